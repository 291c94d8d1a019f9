//! Anchors without a choice: every decision has exactly one allowed provider.
//!
//! This is the common shape of large answers (a flat compute node, or a compute with one
//! matching device per group), and there the general machinery (a [`Problem`] with
//! local indexes, equivalence classes, demand tables and a resumable search) costs
//! several times the check itself. With one option per decision the anchor has at most
//! one candidate: the forced assignment, valid when it passes the rules the solver
//! applies while backtracking, checked here on the complete assignment:
//!
//! * per (provider, class) the amounts placed stay within `capacity - used` and
//!   `max_unit`;
//! * `isolate`: no provider carries two granular groups;
//! * before 1.29, one provider per tree holds resources;
//! * every `same_subtree` entry's lowest common ancestor is one of its chosen providers;
//! * every unsuffixed group's required traits are carried by its providers together.
//!
//! On a complete assignment the solver's incremental forms of these rules are equivalent
//! to their final forms, and its remaining pruning (the supply bound, the static bounds
//! of [`super::anchor`]) only removes prefixes that cannot complete. Anchors whose
//! options include sharing providers of other trees, or where some decision has two or
//! more options, go the general way.
//!
//! [`Problem`]: super::anchor::Problem

use super::plan::Plan;
use super::request::Candidate;
use super::snapshot::{ProviderId, RcId};
use super::solver::{consolidate, lowest_common_ancestor, Found};

/// What [`solve`] found out about one anchor.
pub(crate) enum Forced {
    /// Some decision has several options (or a foreign sharing provider is involved):
    /// search it the general way.
    Choice,
    /// A decision has no option, or the forced assignment breaks a rule.
    Nothing,
    /// The anchor's only candidate; `checks` decisions were placed.
    One { found: Found, checks: u64 },
}

/// One decision with its only provider.
struct Pick<'a> {
    group: usize,
    granular: bool,
    /// `(class slot, class, amount)`: all of a granular group's, or one class of the
    /// unsuffixed group.
    amounts: &'a [(usize, RcId, i64)],
    provider: ProviderId,
}

/// The single provider of `candidates` that passes `ok`.
fn only(
    candidates: &[ProviderId],
    mut ok: impl FnMut(ProviderId) -> bool,
) -> Result<ProviderId, Forced> {
    let mut found = None;
    for &p in candidates {
        if ok(p) {
            if found.is_some() {
                return Err(Forced::Choice);
            }
            found = Some(p);
        }
    }
    found.ok_or(Forced::Nothing)
}

pub(crate) fn solve(plan: &Plan<'_>, anchor: ProviderId) -> Forced {
    match picks(plan, anchor) {
        Ok(picks) => check(plan, &picks),
        Err(outcome) => outcome,
    }
}

/// The decisions in group order (as [`super::anchor`] lists them) with their only
/// providers.
fn picks<'p>(plan: &'p Plan<'_>, anchor: ProviderId) -> Result<Vec<Pick<'p>>, Forced> {
    let snap = plan.snap;
    if snap
        .sharing_for_anchor(anchor)
        .iter()
        .any(|&sp| snap.provider(sp).root != anchor)
    {
        return Err(Forced::Choice);
    }
    let own = snap.tree(anchor);
    let mut picks = Vec::with_capacity(plan.rcs.len() + plan.groups.len());
    for (gi, g) in plan.groups.iter().enumerate() {
        if g.granular {
            let provider = only(own, |p| g.granular_ok(snap, p))?;
            picks.push(Pick {
                group: gi,
                granular: true,
                amounts: &g.resources,
                provider,
            });
        } else {
            for (i, &(_, rc, amount)) in g.resources.iter().enumerate() {
                let provider = only(own, |p| g.unsuffixed_ok(snap, p, rc, amount, anchor, true))?;
                picks.push(Pick {
                    group: gi,
                    granular: false,
                    amounts: &g.resources[i..=i],
                    provider,
                });
            }
        }
    }
    Ok(picks)
}

fn check(plan: &Plan<'_>, picks: &[Pick<'_>]) -> Forced {
    if picks.is_empty() {
        return Forced::Choice; // the solver's business (it yields nothing)
    }
    let snap = plan.snap;
    // Capacity and max_unit of the consolidated amounts, pair by pair (a handful of
    // decisions: quadratic is cheaper than a table).
    for (i, a) in picks.iter().enumerate() {
        for &(slot, rc, _) in a.amounts {
            let first = picks[..i]
                .iter()
                .any(|b| b.provider == a.provider && b.amounts.iter().any(|x| x.0 == slot));
            if first {
                continue; // counted with the earlier decision
            }
            let placed: i64 = picks[i..]
                .iter()
                .filter(|b| b.provider == a.provider)
                .flat_map(|b| b.amounts.iter())
                .filter(|x| x.0 == slot)
                .fold(0i64, |acc, x| acc.saturating_add(x.2));
            let Some(inv) = snap.inventory(a.provider, rc) else {
                return Forced::Nothing;
            };
            if placed > inv.capacity().saturating_sub(inv.used) || placed > inv.limits.max_unit {
                return Forced::Nothing;
            }
        }
    }
    for (i, a) in picks.iter().enumerate() {
        let earlier = &picks[..i];
        if plan.isolate
            && a.granular
            && earlier
                .iter()
                .any(|b| b.granular && b.provider == a.provider)
        {
            return Forced::Nothing;
        }
        if !plan.nested
            && !a.amounts.is_empty()
            && earlier.iter().any(|b| {
                !b.amounts.is_empty()
                    && b.provider != a.provider
                    && snap.provider(b.provider).root == snap.provider(a.provider).root
            })
        {
            return Forced::Nothing;
        }
    }
    for groups in &plan.same_subtree {
        let mut chosen = picks
            .iter()
            .filter(|p| groups.contains(&p.group))
            .map(|p| p.provider);
        let Some(first) = chosen.next() else {
            continue;
        };
        let mut top = Some(first);
        let mut members = 1;
        for p in chosen {
            members += 1;
            top = top.and_then(|t| lowest_common_ancestor(plan, t, p));
        }
        if members < 2 {
            continue;
        }
        let Some(top) = top else {
            return Forced::Nothing; // different trees
        };
        if !picks
            .iter()
            .any(|p| groups.contains(&p.group) && p.provider == top)
        {
            return Forced::Nothing;
        }
    }
    for (gi, g) in plan.groups.iter().enumerate() {
        if g.granular || g.required.is_empty() {
            continue;
        }
        let mut chosen = picks
            .iter()
            .filter(|p| p.group == gi)
            .map(|p| p.provider)
            .peekable();
        if chosen.peek().is_some() && !g.collectively_ok(snap, chosen) {
            return Forced::Nothing;
        }
    }
    Forced::One {
        found: emit(plan, picks),
        checks: picks.len() as u64,
    }
}

/// The candidate of a valid forced assignment, shaped as the solver's `emit` shapes it.
fn emit(plan: &Plan<'_>, picks: &[Pick<'_>]) -> Found {
    let snap = plan.snap;
    let merged = consolidate(
        picks
            .iter()
            .flat_map(|p| p.amounts.iter().map(|&(_, rc, n)| (p.provider, rc, n)))
            .collect(),
    );
    let mappings = plan
        .mapping_order
        .iter()
        .map(|&gi| {
            let mut ids: Vec<ProviderId> = picks
                .iter()
                .filter(|p| p.group == gi)
                .map(|p| p.provider)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            (plan.groups[gi].suffix.to_owned(), ids)
        })
        .collect();
    Found {
        shared_only: picks.iter().all(|p| snap.is_sharing(p.provider)),
        candidate: Candidate {
            allocations: merged,
            mappings,
        },
    }
}
