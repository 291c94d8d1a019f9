//! A policy engine compatible with oslo.policy, so operators can keep their Placement
//! (and later Cyborg) `policy.yaml` files and get the same 403s as upstream.
//!
//! ```text
//!   check string ──parser──▶ Check ─┐
//!   RuleDefault table ──────────────┼─▶ Policy ──authorize(rule, creds, target)──▶ Decision
//!   policy.yaml overrides ──────────┘        (scope first, then the check)
//! ```
//!
//! * [`parser`]: the check-string language (`role:`, `rule:`, generic `kind:match`,
//!   `@`, `!`, `and`/`or`/`not`, parentheses).
//! * [`check`]: the parsed tree and its evaluation against [`Credentials`] and a
//!   [`Target`].
//! * [`rules`]: rule defaults as data, so a service's rule set is a `const` table.
//! * [`enforcer`]: [`Policy`], which merges defaults, deprecated checks and policy
//!   file overrides and enforces token scope the way oslo.policy 6 does.
//! * [`placement`]: Placement's rule table and rule-name constants.
//! * [`cyborg`]: Cyborg's (the accelerator API's) rule table and rule-name constants.
//!
//! Everything is pure: the server turns headers into [`Credentials`], builds a
//! [`Policy`] once at startup (failing fast on a bad policy file) and maps anything but
//! [`Decision::Allowed`] to 403.

pub mod check;
pub mod creds;
pub mod cyborg;
pub mod enforcer;
pub mod parser;
pub mod placement;
pub mod rules;

pub use check::Check;
pub use creds::{Credentials, Target};
pub use enforcer::{parse_policy_file, Decision, Policy, PolicyError, UnknownRule};
pub use parser::{parse, ParseError};
pub use rules::{DeprecatedRule, Operation, RuleDefault, Scope};

impl Policy {
    /// Upstream Placement's rules with no policy file. `enforce_new_defaults` is
    /// `[oslo_policy] enforce_new_defaults`: true for secure RBAC (upstream's
    /// `SecureRBACPolicyFixture`), false for the legacy behaviour the rest of the
    /// functional suite runs under.
    pub fn placement(enforce_new_defaults: bool) -> Policy {
        Policy::new(placement::RULES.iter().copied(), enforce_new_defaults)
            .expect("the built-in Placement rules parse and have no cycle (tested)")
    }

    /// Upstream Cyborg's rules (the secure defaults of master) with no policy file;
    /// `enforce_new_defaults` as for [`Policy::placement`].
    pub fn cyborg(enforce_new_defaults: bool) -> Policy {
        Policy::new(cyborg::RULES.iter().copied(), enforce_new_defaults)
            .expect("the built-in Cyborg rules parse and have no cycle (tested)")
    }
}
