//! Rule defaults as plain data.
//!
//! oslo.policy services register `RuleDefault`s in code: a name, a default check
//! string, optionally a deprecated check string that is OR-ed in while new defaults are
//! not enforced, and the token scopes the rule accepts. Keeping these as `const` tables
//! (see [`super::placement::RULES`]) lets a second service (Cyborg) plug in its own set
//! without touching the engine, and lets tests and sample-file generators walk them.

use std::fmt;

/// The scope of a Keystone token, and the scopes a rule accepts.
///
/// oslo.policy derives a token's scope from its credentials: `system` when
/// `system_scope` is set, else `domain` when `domain_id` is set, else `project`
/// (`oslo_policy.policy.Enforcer._enforce_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    System,
    Domain,
    Project,
}

impl Scope {
    /// The spelling oslo.policy uses in `scope_types`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::System => "system",
            Scope::Domain => "domain",
            Scope::Project => "project",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The check string a rule had before its default changed.
///
/// While new defaults are not enforced the engine evaluates
/// `(<new default>) or (<deprecated check>)`, unless an operator overrode the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeprecatedRule {
    /// The deprecated rule's name. For a renamed rule, a policy-file entry under this
    /// name still takes effect for the new rule.
    pub name: &'static str,
    /// The deprecated check string.
    pub check: &'static str,
}

/// One HTTP operation a rule guards; documentation only, as in oslo.policy's
/// `DocumentedRuleDefault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    pub method: &'static str,
    pub path: &'static str,
}

/// A registered rule: what the service enforces when no policy file overrides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleDefault {
    /// The name handlers authorize against, e.g. `placement:resource_providers:list`.
    pub name: &'static str,
    /// The default check string (the "new default").
    pub check: &'static str,
    /// Token scopes this rule accepts; empty means any scope.
    pub scope_types: &'static [Scope],
    /// The legacy check OR-ed in while `enforce_new_defaults` is false.
    pub deprecated: Option<DeprecatedRule>,
    /// One line for operators, as in a generated sample policy file.
    pub description: &'static str,
    /// The API operations the rule guards (empty for base rules).
    pub operations: &'static [Operation],
}
