//! The rule set a service enforces: registered defaults, a policy file's overrides and
//! the decision for one request.
//!
//! This follows oslo.policy 6.0.1's `Enforcer` (`load_rules`, `_handle_deprecated_rule`,
//! `enforce`, `_enforce_scope`, `authorize`):
//!
//! * A rule named in the policy file replaces that rule's default outright; the file may
//!   also add rules of its own for others to reference with `rule:`.
//! * A registered rule that the file leaves alone gets its default check, OR-ed with its
//!   deprecated check while `enforce_new_defaults` is false (and the two differ).
//! * Scope is checked before the rule, against the registered rule's `scope_types`
//!   only, whatever the policy file says. oslo.policy 6 has no `enforce_scope` switch
//!   any more: scope is always enforced, in legacy and secure-RBAC mode alike, so a
//!   system-scoped token is refused every Placement API (its rules all say `project`).
//!   Placement turns the resulting `InvalidScope` into a 403, as it does a failed check.
//! * Authorizing an unregistered name is a programming error (`PolicyNotRegistered`).
//!
//! Differences, chosen to fail at startup rather than per request: a malformed check
//! string and a cycle of `rule:` references are errors when the rules are built (oslo
//! logs the first and denies; the second raises `RecursionError` when used).

use std::collections::{BTreeMap, HashMap};

use super::check::{Check, RuleMap};
use super::creds::{Credentials, Target};
use super::parser::{self, ParseError};
use super::rules::{RuleDefault, Scope};

/// The outcome of [`Policy::authorize`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// The check string evaluated to false.
    Denied,
    /// The token's scope is not among the rule's `scope_types`; the check string was
    /// not evaluated. Placement answers this with 403 like [`Decision::Denied`].
    WrongScope {
        token_scope: Scope,
    },
}

impl Decision {
    pub fn is_allowed(self) -> bool {
        self == Decision::Allowed
    }
}

/// A rule name that is not registered: the caller asked about a rule the service never
/// declared, which is a bug in the caller, not a denial.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy rule {0:?} is not registered")]
pub struct UnknownRule(pub String);

/// Why a rule set or policy file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy file is not valid YAML or JSON: {0}")]
    Syntax(#[from] serde_yaml::Error),
    #[error("policy file must be a mapping of rule names to check strings")]
    NotAMapping,
    #[error("policy file: rule names must be strings, found {0}")]
    BadName(String),
    #[error(
        "policy file: rule {name:?} must be a check string (or a list of lists), found {found}"
    )]
    BadValue { name: String, found: String },
    #[error("policy rule {name:?}: {source}")]
    Parse {
        name: String,
        #[source]
        source: ParseError,
    },
    #[error("policy rule {0:?} is registered twice")]
    Duplicate(String),
    #[error("policy rules reference each other in a cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
}

/// A service's policy: what [`Policy::authorize`] decides for each registered rule.
#[derive(Debug, Clone)]
pub struct Policy {
    defaults: Vec<RuleDefault>,
    by_name: HashMap<&'static str, usize>,
    enforce_new_defaults: bool,
    /// Rules from policy files; a later file's entry replaces an earlier one.
    file_rules: BTreeMap<String, Check>,
    /// What is evaluated: file rules plus every default the files leave alone.
    rules: RuleMap,
}

impl Policy {
    /// A policy over `defaults` with no policy file. `enforce_new_defaults` is
    /// `[oslo_policy] enforce_new_defaults`: false keeps each deprecated check OR-ed in.
    pub fn new(
        defaults: impl IntoIterator<Item = RuleDefault>,
        enforce_new_defaults: bool,
    ) -> Result<Self, PolicyError> {
        let defaults: Vec<RuleDefault> = defaults.into_iter().collect();
        let mut by_name = HashMap::new();
        for (i, d) in defaults.iter().enumerate() {
            if by_name.insert(d.name, i).is_some() {
                return Err(PolicyError::Duplicate(d.name.to_owned()));
            }
        }
        let mut policy = Policy {
            defaults,
            by_name,
            enforce_new_defaults,
            file_rules: BTreeMap::new(),
            rules: RuleMap::new(),
        };
        policy.rebuild()?;
        Ok(policy)
    }

    /// Applies a policy file in oslo.policy syntax (YAML, hence also JSON): a mapping of
    /// rule name to check string. Rules it names replace earlier ones; others keep
    /// their current definition. An empty document changes nothing.
    pub fn with_overrides_yaml(self, text: &str) -> Result<Self, PolicyError> {
        let overrides = parse_policy_file(text)?;
        self.with_overrides(overrides)
    }

    /// Applies already-parsed overrides, as [`Policy::with_overrides_yaml`] does.
    pub fn with_overrides(
        mut self,
        overrides: impl IntoIterator<Item = (String, Check)>,
    ) -> Result<Self, PolicyError> {
        self.file_rules.extend(overrides);
        self.rebuild()?;
        Ok(self)
    }

    /// Whether deprecated checks are ignored (secure RBAC) or OR-ed in (legacy).
    pub fn enforce_new_defaults(&self) -> bool {
        self.enforce_new_defaults
    }

    /// The registered rules, in registration order.
    pub fn registered(&self) -> &[RuleDefault] {
        &self.defaults
    }

    /// The check evaluated for `name` (a registered rule or one a policy file added),
    /// e.g. for logging the effective policy at startup.
    pub fn effective_check(&self, name: &str) -> Option<&Check> {
        self.rules.get(name)
    }

    /// `(rule, missing)` pairs where a rule refers to `rule:missing` that nobody
    /// defines. Such a reference is simply false; oslo.policy logs a warning for it.
    pub fn undefined_references(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (name, check) in &self.rules {
            let mut refs = Vec::new();
            check.referenced_rules(&mut refs);
            for r in refs {
                if !self.rules.contains_key(r) {
                    out.push((name.clone(), r.to_owned()));
                }
            }
        }
        out.sort();
        out
    }

    /// Decides whether `creds` may perform `rule` on `target`.
    pub fn authorize(
        &self,
        rule: &str,
        creds: &Credentials,
        target: &Target,
    ) -> Result<Decision, UnknownRule> {
        let default = self
            .by_name
            .get(rule)
            .map(|&i| &self.defaults[i])
            .ok_or_else(|| UnknownRule(rule.to_owned()))?;
        if !default.scope_types.is_empty() {
            let token_scope = creds.token_scope();
            if !default.scope_types.contains(&token_scope) {
                return Ok(Decision::WrongScope { token_scope });
            }
        }
        // Every registered rule is in `rules` (rebuild guarantees it).
        let allowed = self
            .rules
            .get(rule)
            .is_some_and(|c| c.eval(creds, target, &self.rules));
        Ok(if allowed {
            Decision::Allowed
        } else {
            Decision::Denied
        })
    }

    /// Evaluates an ad-hoc check against this policy's rules, with no scope check (as
    /// oslo.policy's `enforce` does when handed a check instead of a rule name).
    /// An ad-hoc check has no name, so it cannot close a cycle; the rules have none.
    pub fn check(&self, check: &Check, creds: &Credentials, target: &Target) -> bool {
        check.eval(creds, target, &self.rules)
    }

    fn rebuild(&mut self) -> Result<(), PolicyError> {
        let mut rules: RuleMap = self
            .file_rules
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for d in &self.defaults {
            if rules.contains_key(d.name) {
                continue;
            }
            let check = self.default_check(d)?;
            rules.insert(d.name.to_owned(), check);
        }
        if let Some(cycle) = find_cycle(&rules) {
            return Err(PolicyError::Cycle(cycle));
        }
        self.rules = rules;
        Ok(())
    }

    /// The check for a registered rule the policy file does not name
    /// (oslo.policy `Enforcer._handle_deprecated_rule`).
    fn default_check(&self, d: &RuleDefault) -> Result<Check, PolicyError> {
        let parse = |s: &str| {
            parser::parse(s).map_err(|source| PolicyError::Parse {
                name: d.name.to_owned(),
                source,
            })
        };
        let new = parse(d.check)?;
        let Some(dep) = d.deprecated else {
            return Ok(new);
        };
        let old = parse(dep.check)?;
        // A renamed rule: an operator's override of the old name carries over, unless
        // it merely restates the old default or points at the new rule.
        if dep.name != d.name {
            if let Some(file) = self.file_rules.get(dep.name) {
                if *file != old && *file != Check::Rule(d.name.to_owned()) {
                    return Ok(file.clone());
                }
            }
        }
        if !self.enforce_new_defaults && dep.check != d.check {
            return Ok(Check::Or(vec![new, old]));
        }
        Ok(new)
    }
}

/// Reads a policy file into rule name -> check (oslo.policy `parse_file_contents` and
/// `parse_rule`).
pub fn parse_policy_file(text: &str) -> Result<Vec<(String, Check)>, PolicyError> {
    use serde_yaml::Value;
    let doc: Value = serde_yaml::from_str(text)?;
    let map = match doc {
        Value::Null => return Ok(Vec::new()),
        Value::Mapping(m) => m,
        _ => return Err(PolicyError::NotAMapping),
    };
    let mut out = Vec::with_capacity(map.len());
    for (k, v) in map {
        let Value::String(name) = k else {
            return Err(PolicyError::BadName(describe(&k)));
        };
        let check = rule_value(&name, v)?;
        out.push((name, check));
    }
    Ok(out)
}

/// One policy-file value: a check string, or oslo.policy's legacy list syntax (outer
/// list OR-ed, inner lists AND-ed, each element a single check). A null value and an
/// empty list mean "always", as in oslo's `_parse_list_rule`.
fn rule_value(name: &str, value: serde_yaml::Value) -> Result<Check, PolicyError> {
    use serde_yaml::Value;
    let parse_err = |source| PolicyError::Parse {
        name: name.to_owned(),
        source,
    };
    let bad = |v: &Value| PolicyError::BadValue {
        name: name.to_owned(),
        found: describe(v),
    };
    let outer = match value {
        Value::String(s) => return parser::parse(&s).map_err(parse_err),
        Value::Null => return Ok(Check::Always),
        Value::Sequence(outer) => outer,
        other => return Err(bad(&other)),
    };
    if outer.is_empty() {
        return Ok(Check::Always);
    }
    let mut any = Vec::new();
    for inner in outer {
        let items = match inner {
            Value::String(s) => vec![Value::String(s)],
            Value::Sequence(items) => items,
            other => return Err(bad(&other)),
        };
        let mut all = Vec::new();
        for item in &items {
            let Value::String(s) = item else {
                return Err(bad(item));
            };
            all.push(parser::parse_single(s).map_err(parse_err)?);
        }
        match all.len() {
            0 => {}
            1 => any.extend(all),
            _ => any.push(Check::And(all)),
        }
    }
    Ok(match any.len() {
        0 => Check::Never,
        1 => any.remove(0),
        _ => Check::Or(any),
    })
}

fn describe(v: &serde_yaml::Value) -> String {
    serde_yaml::to_string(v)
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_else(|_| format!("{v:?}"))
}

/// A chain of `rule:` references that returns to its start, if any.
fn find_cycle(rules: &RuleMap) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        OnPath,
        Done,
    }
    fn visit<'a>(
        name: &'a str,
        rules: &'a RuleMap,
        marks: &mut HashMap<&'a str, Mark>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match marks.get(name) {
            Some(Mark::Done) => return None,
            Some(Mark::OnPath) => {
                let start = path.iter().position(|n| *n == name).unwrap_or(0);
                let mut cycle: Vec<String> = path[start..].iter().map(|s| s.to_string()).collect();
                cycle.push(name.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        // A reference to an undefined rule ends the path; it is no cycle.
        let check = rules.get(name)?;
        marks.insert(name, Mark::OnPath);
        path.push(name);
        let mut refs = Vec::new();
        check.referenced_rules(&mut refs);
        for r in refs {
            if let Some(c) = visit(r, rules, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(name, Mark::Done);
        None
    }
    let mut marks = HashMap::new();
    let mut names: Vec<&str> = rules.keys().map(String::as_str).collect();
    names.sort_unstable();
    names
        .into_iter()
        .find_map(|name| visit(name, rules, &mut marks, &mut Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(pairs: &[(&str, &str)]) -> RuleMap {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), parser::parse(v).unwrap()))
            .collect()
    }

    #[test]
    fn cycles_are_found_and_named_in_order() {
        let r = rules(&[
            ("a", "role:x or rule:b"),
            ("b", "not rule:c"),
            ("c", "rule:a"),
        ]);
        assert_eq!(find_cycle(&r).unwrap(), ["a", "b", "c", "a"]);
        assert_eq!(find_cycle(&rules(&[("a", "rule:a")])).unwrap(), ["a", "a"]);
    }

    #[test]
    fn shared_and_undefined_references_are_not_cycles() {
        let r = rules(&[
            ("a", "rule:b and rule:c"),
            ("b", "rule:c"),
            ("c", "rule:missing"),
        ]);
        assert_eq!(find_cycle(&r), None);
    }
}
