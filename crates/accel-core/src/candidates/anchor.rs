//! The search problem for one anchor: which providers each decision may pick, in what
//! order the decisions are taken, and the cheap tests that rule an anchor out before
//! any search.
//!
//! A candidate has exactly one anchor root; its providers are members of the anchor's
//! tree or sharing providers that list the anchor. Upstream builds, per group, a list of
//! "allocation requests" per anchor and takes their Cartesian product
//! (`allocation_candidate._merge_candidates`). Here each group becomes one or more
//! *decisions* instead:
//!
//! * a granular group is one decision: which single provider serves it;
//! * the unsuffixed group is one decision per requested class: upstream's per-tree
//!   product over per-class provider lists (`_alloc_candidates_multiple_providers`) is
//!   exactly that, with the group's required traits checked collectively once all its
//!   classes are placed.
//!
//! Decisions are ordered unsuffixed first (its collective trait check fails early), then
//! fewest options first. Every provider that appears as an option becomes a *local* with
//! a dense index, its free capacity per requested class, its root slot (for the
//! pre-1.29 one-provider-per-tree rule) and an *equivalence class*: untouched leaves
//! with the same parent, traits, aggregates, inventories of the requested classes and
//! option memberships are interchangeable, so if one fails to complete a prefix, all do.
//!
//! Before searching, an anchor is dropped when a decision has no option, when the total
//! free capacity of a class cannot cover the total requested, when `isolate` leaves no
//! distinct provider per granular group (bipartite matching), or when no choice of
//! providers could carry the unsuffixed group's required traits.

use std::collections::HashMap;

use uuid::Uuid;

use super::plan::{has_any, Plan};
use super::rng::Rng;
use super::snapshot::{ProviderId, TraitId};

/// One decision of the search.
#[derive(Debug, Clone)]
pub(crate) struct Var {
    /// Index into [`Plan::groups`].
    pub group: usize,
    pub granular: bool,
    /// `(class slot, amount)` taken from the chosen provider.
    pub amounts: Vec<(usize, i64)>,
    /// Local indexes of the providers this decision may pick.
    pub options: Vec<u32>,
}

/// Everything the solver needs for one anchor, in local indexes.
#[derive(Debug)]
pub(crate) struct Problem {
    /// Ascending global ids of every provider that is an option somewhere.
    pub locals: Vec<ProviderId>,
    pub sharing: Vec<bool>,
    pub root_slot: Vec<u32>,
    pub n_roots: usize,
    pub class: Vec<u32>,
    /// `capacity - used` per (local, class slot); `i64::MIN` without inventory.
    pub free: Vec<i64>,
    /// `max_unit` per (local, class slot).
    pub max_unit: Vec<i64>,
    /// Decisions in search order.
    pub vars: Vec<Var>,
    /// Var positions per group.
    pub group_vars: Vec<Vec<usize>>,
    /// Var positions (ascending) per `same_subtree` entry with at least two decisions.
    pub subtree_sets: Vec<Vec<usize>>,
    /// Per var position: the `subtree_sets` that contain it.
    pub subtree_at: Vec<Vec<usize>>,
    /// Per var position: unsuffixed groups whose collective traits are due there.
    pub traits_at: Vec<Vec<usize>>,
    /// Per class slot: locals that some decision asking for the class may pick.
    pub slot_suppliers: Vec<Vec<u32>>,
    /// Per (position, class slot), flattened: what the decisions from that position on
    /// still ask for.
    pub pending: Vec<Pending>,
    /// When no option belongs to the anchor's own tree, the per-decision option lists;
    /// two anchors with equal signatures yield the same candidates.
    pub foreign_signature: Option<Vec<Vec<ProviderId>>>,
}

/// Outstanding demand for one class from a position of the search onwards.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pending {
    pub total: i64,
    pub count: u32,
    /// The common amount when every outstanding request is the same size.
    pub uniform: Option<i64>,
}

/// Build the problem for `anchor`, or `None` when it cannot yield a candidate.
pub(crate) fn build(plan: &Plan<'_>, anchor: ProviderId, rng: Option<&mut Rng>) -> Option<Problem> {
    build_filtered(plan, anchor, rng, |_, _| true)
}

/// [`build`] with the options of each decision narrowed by `keep(decision, provider)`,
/// decisions numbered in group order (one per granular group, one per class of the
/// unsuffixed group). The explainer asks this way whether some candidate uses a given
/// provider, or the anchor's own tree, for one decision.
pub(crate) fn build_filtered(
    plan: &Plan<'_>,
    anchor: ProviderId,
    rng: Option<&mut Rng>,
    keep: impl Fn(usize, ProviderId) -> bool,
) -> Option<Problem> {
    let snap = plan.snap;
    let raw = decisions(plan, anchor, keep, true);
    if raw.last().is_none_or(|(_, opts)| opts.is_empty()) {
        return None;
    }

    let mut locals: Vec<ProviderId> = raw.iter().flat_map(|(_, o)| o.iter().copied()).collect();
    locals.sort_unstable();
    locals.dedup();
    let foreign_signature = locals
        .iter()
        .all(|&p| snap.provider(p).root != anchor)
        .then(|| raw.iter().map(|(_, o)| o.clone()).collect());
    let mut vars: Vec<Var> = raw
        .into_iter()
        .map(|(mut var, opts)| {
            var.options = opts
                .iter()
                .map(|p| locals.binary_search(p).map_or(u32::MAX, |i| i as u32))
                .collect();
            var
        })
        .collect();

    let (free, max_unit) = rooms(plan, &locals);
    if !capacity_bound_ok(plan.rcs.len(), &vars, &free, &max_unit)
        || (plan.isolate && !distinct_granular_ok(&vars, locals.len()))
        || !collective_traits_possible(plan, &locals, &vars)
    {
        return None;
    }

    // Classes only prune among a decision's alternatives: when no decision has two,
    // every provider may as well be its own class (and hashing them is skipped).
    let class = if vars.iter().all(|v| v.options.len() <= 1) {
        (0..locals.len() as u32).collect()
    } else {
        equivalence_classes(plan, anchor, &locals, &vars)
    };
    let mut roots: Vec<ProviderId> = locals.iter().map(|&p| snap.provider(p).root).collect();
    roots.sort_unstable();
    roots.dedup();
    let root_slot = locals
        .iter()
        .map(|&p| {
            roots
                .binary_search(&snap.provider(p).root)
                .map_or(0, |i| i as u32)
        })
        .collect();
    let sharing = locals.iter().map(|&p| snap.is_sharing(p)).collect();

    if let Some(rng) = rng {
        for var in &mut vars {
            rng.shuffle(&mut var.options);
        }
    }
    // Unsuffixed first, then fewest options; stable, so group order breaks ties.
    vars.sort_by_key(|v| (v.granular, v.options.len()));

    let mut group_vars = vec![Vec::new(); plan.groups.len()];
    for (pos, v) in vars.iter().enumerate() {
        group_vars[v.group].push(pos);
    }
    let mut traits_at = vec![Vec::new(); vars.len()];
    for (gi, g) in plan.groups.iter().enumerate() {
        if !g.granular && !g.required.is_empty() {
            if let Some(&last) = group_vars[gi].last() {
                traits_at[last].push(gi);
            }
        }
    }
    let (subtree_sets, subtree_at) = subtree_index(plan, &group_vars, vars.len());
    let (slot_suppliers, pending) = demand_index(plan.rcs.len(), &vars);

    Some(Problem {
        n_roots: roots.len(),
        locals,
        sharing,
        root_slot,
        class,
        free,
        max_unit,
        vars,
        group_vars,
        subtree_sets,
        subtree_at,
        traits_at,
        slot_suppliers,
        pending,
        foreign_signature,
    })
}

/// Every decision with its allowed providers (global ids, ascending) that `keep` keeps,
/// in group order. With `stop_at_empty` the list ends at the first decision without
/// an option (the search needs no more); the explainer asks for all of them.
pub(crate) fn decisions(
    plan: &Plan<'_>,
    anchor: ProviderId,
    keep: impl Fn(usize, ProviderId) -> bool,
    stop_at_empty: bool,
) -> Vec<(Var, Vec<ProviderId>)> {
    let snap = plan.snap;
    let own = snap.tree(anchor);
    let foreign: Vec<ProviderId> = snap
        .sharing_for_anchor(anchor)
        .iter()
        .copied()
        .filter(|&sp| snap.provider(sp).root != anchor)
        .collect();
    let mut raw: Vec<(Var, Vec<ProviderId>)> = Vec::new();
    for (gi, g) in plan.groups.iter().enumerate() {
        if g.granular {
            let opts: Vec<ProviderId> = own
                .iter()
                .chain(&foreign)
                .copied()
                .filter(|&p| keep(raw.len(), p) && g.granular_ok(snap, p))
                .collect();
            let amounts = g.resources.iter().map(|&(slot, _, n)| (slot, n)).collect();
            raw.push((
                Var {
                    group: gi,
                    granular: true,
                    amounts,
                    options: Vec::new(),
                },
                opts,
            ));
        } else {
            for &(slot, rc, amount) in &g.resources {
                let opts: Vec<ProviderId> = own
                    .iter()
                    .map(|&p| (p, true))
                    .chain(foreign.iter().map(|&p| (p, false)))
                    .filter(|&(p, own_tree)| {
                        keep(raw.len(), p) && g.unsuffixed_ok(snap, p, rc, amount, anchor, own_tree)
                    })
                    .map(|(p, _)| p)
                    .collect();
                let amounts = vec![(slot, amount)];
                raw.push((
                    Var {
                        group: gi,
                        granular: false,
                        amounts,
                        options: Vec::new(),
                    },
                    opts,
                ));
            }
        }
        if stop_at_empty && raw.last().is_some_and(|(_, opts)| opts.is_empty()) {
            return raw;
        }
    }
    raw
}

/// `capacity - used` and `max_unit` per (local, class slot); `i64::MIN` where the
/// provider has no inventory of the class.
fn rooms(plan: &Plan<'_>, locals: &[ProviderId]) -> (Vec<i64>, Vec<i64>) {
    let nrc = plan.rcs.len();
    let mut free = vec![i64::MIN; locals.len() * nrc];
    let mut max_unit = vec![i64::MIN; locals.len() * nrc];
    for (li, &p) in locals.iter().enumerate() {
        for (slot, &rc) in plan.rcs.iter().enumerate() {
            if let Some(inv) = plan.snap.inventory(p, rc) {
                free[li * nrc + slot] = inv.capacity().saturating_sub(inv.used);
                max_unit[li * nrc + slot] = inv.limits.max_unit;
            }
        }
    }
    (free, max_unit)
}

/// Whether some choice of options could carry each unsuffixed group's required traits.
fn collective_traits_possible(plan: &Plan<'_>, locals: &[ProviderId], vars: &[Var]) -> bool {
    plan.groups.iter().enumerate().all(|(gi, g)| {
        if g.granular || g.required.is_empty() {
            return true;
        }
        let mut pool: Vec<TraitId> = vars
            .iter()
            .filter(|v| v.group == gi)
            .flat_map(|v| v.options.iter())
            .flat_map(|&li| {
                plan.snap
                    .provider(locals[li as usize])
                    .traits
                    .iter()
                    .copied()
            })
            .collect();
        pool.sort_unstable();
        pool.dedup();
        g.required.iter().all(|any| has_any(&pool, any))
    })
}

/// Var positions per `same_subtree` entry (entries with fewer than two decisions hold
/// trivially and are dropped) and, per position, the entries that contain it.
fn subtree_index(
    plan: &Plan<'_>,
    group_vars: &[Vec<usize>],
    n_vars: usize,
) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let sets: Vec<Vec<usize>> = plan
        .same_subtree
        .iter()
        .map(|gs| {
            let mut pos: Vec<usize> = gs
                .iter()
                .flat_map(|&g| group_vars[g].iter().copied())
                .collect();
            pos.sort_unstable();
            pos
        })
        .filter(|pos| pos.len() >= 2)
        .collect();
    let mut at = vec![Vec::new(); n_vars];
    for (si, set) in sets.iter().enumerate() {
        for &pos in set {
            at[pos].push(si);
        }
    }
    (sets, at)
}

/// Per class slot, the locals that may supply it; per (position, slot), the demand
/// still outstanding from that position on.
fn demand_index(nrc: usize, vars: &[Var]) -> (Vec<Vec<u32>>, Vec<Pending>) {
    let mut suppliers = vec![Vec::new(); nrc];
    for var in vars {
        for &(slot, _) in &var.amounts {
            suppliers[slot].extend_from_slice(&var.options);
        }
    }
    for s in &mut suppliers {
        s.sort_unstable();
        s.dedup();
    }
    let mut pending = vec![Pending::default(); (vars.len() + 1) * nrc];
    for pos in (0..vars.len()).rev() {
        for slot in 0..nrc {
            pending[pos * nrc + slot] = pending[(pos + 1) * nrc + slot];
        }
        for &(slot, amount) in &vars[pos].amounts {
            let p = &mut pending[pos * nrc + slot];
            p.uniform = match (p.count, p.uniform) {
                (0, _) => Some(amount),
                (_, Some(u)) if u == amount => Some(u),
                _ => None,
            };
            p.total = p.total.saturating_add(amount);
            p.count += 1;
        }
    }
    (suppliers, pending)
}

/// The inventory fields that decide fits: total, reserved, min, max, step, ratio bits,
/// used.
type InventoryKey = (i64, i64, i64, i64, i64, u64, i64);

/// What makes two untouched providers interchangeable for the rest of a search.
#[derive(PartialEq, Eq, Hash)]
struct ClassKey<'a> {
    parent: Option<ProviderId>,
    own_tree: bool,
    traits: &'a [TraitId],
    aggregates: &'a [Uuid],
    /// Per requested class: the inventory fields that decide fits, ratio as bits.
    inventory: Vec<Option<InventoryKey>>,
    /// Which decisions list the provider.
    member_of_vars: Vec<u64>,
}

/// Class ids per local. Providers with children never share a class: swapping them
/// would not swap their subtrees.
fn equivalence_classes(
    plan: &Plan<'_>,
    anchor: ProviderId,
    locals: &[ProviderId],
    vars: &[Var],
) -> Vec<u32> {
    let snap = plan.snap;
    let words = vars.len().div_ceil(64);
    let mut membership = vec![vec![0u64; words]; locals.len()];
    for (vi, var) in vars.iter().enumerate() {
        for &li in &var.options {
            membership[li as usize][vi / 64] |= 1 << (vi % 64);
        }
    }
    let mut ids: HashMap<ClassKey<'_>, u32> = HashMap::new();
    let mut next = 0u32;
    let mut class = Vec::with_capacity(locals.len());
    for (li, &p) in locals.iter().enumerate() {
        if snap.has_children(p) {
            class.push(next);
            next += 1;
            continue;
        }
        let prov = snap.provider(p);
        let key = ClassKey {
            parent: prov.parent,
            own_tree: prov.root == anchor,
            traits: &prov.traits,
            aggregates: &prov.aggregates,
            inventory: plan
                .rcs
                .iter()
                .map(|&rc| {
                    snap.inventory(p, rc).map(|inv| {
                        (
                            inv.limits.total,
                            inv.limits.reserved,
                            inv.limits.min_unit,
                            inv.limits.max_unit,
                            inv.limits.step_size,
                            inv.limits.allocation_ratio.to_bits(),
                            inv.used,
                        )
                    })
                })
                .collect(),
            member_of_vars: std::mem::take(&mut membership[li]),
        };
        let id = *ids.entry(key).or_insert_with(|| {
            next += 1;
            next - 1
        });
        class.push(id);
    }
    class
}

/// For every class asked for by more than one decision, the room of all providers
/// that could supply it must cover the total asked (upstream
/// `_pre_check_overall_capacity`, tightened to free capacity, `max_unit`, and whole
/// multiples of the request size when all requests for the class are the same size).
fn capacity_bound_ok(nrc: usize, vars: &[Var], free: &[i64], max_unit: &[i64]) -> bool {
    for slot in 0..nrc {
        let mut demand = 0i64;
        let mut askers = 0;
        let mut uniform: Option<i64> = None;
        let mut mixed = false;
        let mut suppliers: Vec<u32> = Vec::new();
        for var in vars {
            for &(s, amount) in &var.amounts {
                if s == slot {
                    demand = demand.saturating_add(amount);
                    askers += 1;
                    mixed |= uniform.is_some_and(|u| u != amount);
                    uniform = Some(amount);
                    suppliers.extend_from_slice(&var.options);
                }
            }
        }
        if askers < 2 {
            continue;
        }
        let unit = if mixed {
            1
        } else {
            uniform.unwrap_or(1).max(1)
        };
        suppliers.sort_unstable();
        suppliers.dedup();
        let supply = suppliers.iter().fold(0i64, |acc, &li| {
            let i = li as usize * nrc + slot;
            let room = free[i].min(max_unit[i]).max(0);
            acc.saturating_add(room - room % unit)
        });
        if demand > supply {
            return false;
        }
    }
    true
}

/// Whether every granular decision can get a provider of its own (Kuhn's augmenting
/// paths; a necessary condition for `group_policy=isolate`).
fn distinct_granular_ok(vars: &[Var], n_locals: usize) -> bool {
    let granular: Vec<&Var> = vars.iter().filter(|v| v.granular).collect();
    if granular.len() < 2 {
        return true;
    }
    if granular.len() > n_locals {
        return false;
    }
    let mut owner: Vec<Option<usize>> = vec![None; n_locals];
    fn augment(v: usize, vars: &[&Var], owner: &mut [Option<usize>], seen: &mut [bool]) -> bool {
        for &li in &vars[v].options {
            let li = li as usize;
            if seen[li] {
                continue;
            }
            seen[li] = true;
            if owner[li].is_none_or(|w| augment(w, vars, owner, seen)) {
                owner[li] = Some(v);
                return true;
            }
        }
        false
    }
    let mut seen = vec![false; n_locals];
    for v in 0..granular.len() {
        seen.iter_mut().for_each(|s| *s = false);
        if !augment(v, &granular, &mut owner, &mut seen) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(granular: bool, amounts: Vec<(usize, i64)>, options: Vec<u32>) -> Var {
        Var {
            group: 0,
            granular,
            amounts,
            options,
        }
    }

    #[test]
    fn matching_detects_too_few_distinct_providers() {
        let vars = vec![
            var(true, vec![], vec![0, 1]),
            var(true, vec![], vec![0, 1]),
            var(true, vec![], vec![1]),
        ];
        assert!(!distinct_granular_ok(&vars, 2));
        let vars = vec![
            var(true, vec![], vec![0]),
            var(true, vec![], vec![0, 1]),
            var(true, vec![], vec![1, 2]),
        ];
        assert!(distinct_granular_ok(&vars, 3));
        let vars = vec![
            var(true, vec![], vec![0]),
            var(true, vec![], vec![0]),
            var(true, vec![], vec![1, 2]),
        ];
        assert!(!distinct_granular_ok(&vars, 3));
    }

    #[test]
    fn capacity_bound_counts_free_and_max_unit() {
        // two locals, one class: free 3 and 5, max_unit 2 and 5
        let free = vec![3, 5];
        let max_unit = vec![2, 5];
        let ok = vec![
            var(true, vec![(0, 4)], vec![1]),
            var(true, vec![(0, 3)], vec![0, 1]),
        ];
        assert!(capacity_bound_ok(1, &ok, &free, &max_unit));
        let too_much = vec![
            var(true, vec![(0, 4)], vec![1]),
            var(true, vec![(0, 4)], vec![0, 1]),
        ];
        assert!(!capacity_bound_ok(1, &too_much, &free, &max_unit));
    }
}
