//! The provider-level sentences of [`super::Reason::detail`] and the pieces the others
//! share (lists of groups, providers, traits; the capacity numbers). `accel explain`
//! and the console show them verbatim, the unit tests pin them word for word, and the
//! parent module's doc lists every form.
//!
//! Provider-level sentences leave the provider out (the reason's `provider` names
//! it) and give the numbers the rule compared; group-level and request-wide ones, built
//! where their facts are gathered, name what they talk about.

use std::fmt::Display;

use uuid::Uuid;

use super::super::snapshot::{Inventory, ProviderId, TraitId};
use super::Names;

/// At most this many providers are named in one sentence.
const LISTED: usize = 3;

/// `"1"`, `"_NET"`, or `"(unsuffixed)"`.
pub(super) fn label(suffix: &str) -> &str {
    if suffix.is_empty() {
        "(unsuffixed)"
    } else {
        suffix
    }
}

/// "group 1" or "groups 1, 2".
pub(super) fn groups<'s>(suffixes: impl IntoIterator<Item = &'s str>) -> String {
    let all: Vec<&str> = suffixes.into_iter().map(label).collect();
    match all.as_slice() {
        [one] => format!("group {one}"),
        _ => format!("groups {}", all.join(", ")),
    }
}

/// "a, b, c and 2 more".
pub(super) fn providers(names: &dyn Names, ids: &[ProviderId]) -> String {
    let mut out: Vec<String> = ids
        .iter()
        .take(LISTED)
        .map(|&p| names.provider(p))
        .collect();
    if ids.len() > LISTED {
        let last = format!(
            "{} and {} more",
            out.pop().unwrap_or_default(),
            ids.len() - LISTED + 1
        );
        out.push(last);
    }
    out.join(", ")
}

/// "A, B", each trait once.
pub(super) fn traits(names: &dyn Names, ids: &[TraitId]) -> String {
    let mut seen: Vec<TraitId> = Vec::new();
    let all: Vec<String> = ids
        .iter()
        .filter(|&&t| {
            let first = !seen.contains(&t);
            seen.push(t);
            first
        })
        .map(|&t| names.trait_name(t))
        .collect();
    all.join(", ")
}

fn aggregates(ids: &[Uuid]) -> String {
    let all: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    all.join(", ")
}

/// "needs 2 CUSTOM_ACCELERATOR_FPGA, 1 free: total 4, reserved 0, used 3, allocation
/// ratio 1.0", with `lead` in place of "needs 2".
pub(super) fn capacity(lead: impl Display, rc: &str, inv: &Inventory) -> String {
    let l = &inv.limits;
    format!(
        "{lead} {rc}, {} free: total {}, reserved {}, used {}, allocation ratio {:?}",
        free(inv),
        l.total,
        l.reserved,
        inv.used,
        l.allocation_ratio
    )
}

/// What is left of an inventory, never below zero.
pub(super) fn free(inv: &Inventory) -> i64 {
    inv.capacity().saturating_sub(inv.used).max(0)
}

pub(super) fn max_unit(lead: impl Display, rc: &str, max: i64) -> String {
    format!("{lead} {rc}, max_unit is {max}")
}

pub(super) fn min_unit(amount: i64, rc: &str, min: i64) -> String {
    format!("needs {amount} {rc}, min_unit is {min}")
}

pub(super) fn step_size(amount: i64, rc: &str, step: i64) -> String {
    format!("needs {amount} {rc}, not a multiple of step_size {step}")
}

pub(super) fn lacks_trait(t: &str) -> String {
    format!("lacks required trait {t}")
}

pub(super) fn lacks_any(list: &str) -> String {
    format!("has none of {list}")
}

pub(super) fn forbidden_trait(t: &str) -> String {
    format!("has forbidden trait {t}")
}

/// A provider outside a `member_of` any-of list; `root` when the unsuffixed group's
/// rule (the provider *or* its root) failed on both.
pub(super) fn member_of(list: &[Uuid], root: Option<&str>) -> String {
    let base = match list {
        [one] => format!("is not in aggregate {one}"),
        _ => format!("is in none of aggregates {}", aggregates(list)),
    };
    match root {
        Some(root) => format!("{base}, and root {root} does not meet member_of either"),
        None => base,
    }
}

pub(super) fn forbidden_aggregate(agg: &Uuid, root: Option<&str>) -> String {
    match root {
        Some(root) => format!("root {root} is in forbidden aggregate {agg}"),
        None => format!("is in forbidden aggregate {agg}"),
    }
}

pub(super) fn outside_tree(of: &str) -> String {
    format!("is outside the tree of {of} (in_tree)")
}
