//! The parsed form of a check string and how it evaluates.
//!
//! Semantics follow oslo.policy's `_checks` module: `role:` compares case-insensitively
//! against the credential roles; any other `kind:match` is a generic check that compares
//! the substituted match with the credential at path `kind` (or with `kind` itself when
//! it is a Python literal such as `True` or `'member'`); `rule:` evaluates another named
//! rule and is false when that rule does not exist. Every failure to find a value fails
//! closed (false), never errors.

use std::collections::HashMap;
use std::fmt;

use super::creds::{CredValue, Credentials, Target};

/// A parsed check string. `Display` gives oslo.policy's canonical spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// `@` or the empty string.
    Always,
    /// `!`.
    Never,
    /// `rule:NAME`.
    Rule(String),
    /// `role:NAME`; the name may itself use `%(key)s`.
    Role(Template),
    /// `kind:match` for any other kind.
    Generic {
        kind: GenericKind,
        expected: Template,
    },
    Not(Box<Check>),
    And(Vec<Check>),
    Or(Vec<Check>),
}

/// The left-hand side of a generic check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenericKind {
    /// A Python literal (`True`, `None`, `42`, `'text'`): `raw` as written, `value` as
    /// Python's `str()` renders it.
    Literal { raw: String, value: String },
    /// A dotted path into the credentials, e.g. `project_id` or `system_scope`.
    Credential(String),
}

/// A match string with `%(key)s` placeholders, filled from the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(pub(crate) Vec<Piece>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    Field(String),
}

/// Where `rule:NAME` references are resolved.
pub(crate) type RuleMap = HashMap<String, Check>;

impl Template {
    /// The match with placeholders filled in, or `None` when the target lacks a key
    /// (oslo.policy catches that `KeyError` and the check is false).
    pub fn render(&self, target: &Target) -> Option<String> {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(k) => out.push_str(target.get(k)?),
            }
        }
        Some(out)
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for piece in &self.0 {
            match piece {
                Piece::Text(t) => f.write_str(&t.replace('%', "%%"))?,
                Piece::Field(k) => write!(f, "%({k})s")?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for GenericKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GenericKind::Literal { raw, .. } => f.write_str(raw),
            GenericKind::Credential(path) => f.write_str(path),
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |f: &mut fmt::Formatter<'_>, items: &[Check], op: &str| {
            f.write_str("(")?;
            for (i, c) in items.iter().enumerate() {
                if i > 0 {
                    write!(f, " {op} ")?;
                }
                write!(f, "{c}")?;
            }
            f.write_str(")")
        };
        match self {
            Check::Always => f.write_str("@"),
            Check::Never => f.write_str("!"),
            Check::Rule(name) => write!(f, "rule:{name}"),
            Check::Role(t) => write!(f, "role:{t}"),
            Check::Generic { kind, expected } => write!(f, "{kind}:{expected}"),
            Check::Not(c) => write!(f, "not {c}"),
            Check::And(items) => join(f, items, "and"),
            Check::Or(items) => join(f, items, "or"),
        }
    }
}

impl Check {
    /// Evaluates against the caller and target, resolving `rule:` through `rules`.
    /// Callers guarantee `rules` has no reference cycle.
    pub(crate) fn eval(&self, creds: &Credentials, target: &Target, rules: &RuleMap) -> bool {
        match self {
            Check::Always => true,
            Check::Never => false,
            Check::Rule(name) => rules
                .get(name)
                .is_some_and(|c| c.eval(creds, target, rules)),
            Check::Role(t) => t.render(target).is_some_and(|want| {
                let want = want.to_lowercase();
                creds.roles.iter().any(|r| r.to_lowercase() == want)
            }),
            Check::Generic { kind, expected } => {
                let Some(want) = expected.render(target) else {
                    return false;
                };
                match kind {
                    GenericKind::Literal { value, .. } => *value == want,
                    GenericKind::Credential(path) => credential_matches(creds, path, &want),
                }
            }
            Check::Not(c) => !c.eval(creds, target, rules),
            Check::And(items) => items.iter().all(|c| c.eval(creds, target, rules)),
            Check::Or(items) => items.iter().any(|c| c.eval(creds, target, rules)),
        }
    }

    /// Every `rule:` name this check refers to, directly.
    pub(crate) fn referenced_rules<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Check::Rule(name) => out.push(name),
            Check::Not(c) => c.referenced_rules(out),
            Check::And(items) | Check::Or(items) => {
                items.iter().for_each(|c| c.referenced_rules(out))
            }
            Check::Always | Check::Never | Check::Role(_) | Check::Generic { .. } => {}
        }
    }
}

/// oslo.policy's `GenericCheck._find_in_dict` over the credentials: the first path
/// segment selects a credential; a list matches when any element does; the leaf is
/// compared as Python's `str()` renders it. Credentials are flat, so a longer path
/// never matches (Python would raise on indexing a string; we fail closed).
fn credential_matches(creds: &Credentials, path: &str, want: &str) -> bool {
    let mut segments = path.split('.');
    let first = segments.next().unwrap_or_default();
    let deeper = segments.next().is_some();
    match creds.lookup(first) {
        None => false,
        Some(_) if deeper => false,
        Some(CredValue::Text(v)) => v.unwrap_or("None") == want,
        Some(CredValue::Bool(b)) => (if b { "True" } else { "False" }) == want,
        Some(CredValue::List(items)) => items.iter().any(|i| i == want),
    }
}
