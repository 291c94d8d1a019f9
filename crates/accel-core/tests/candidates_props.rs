//! Property tests: the engine against a brute-force reference on small random forests.
//!
//! The reference re-implements upstream Placement 16.0.0's algorithm literally and
//! naively (`allocation_candidate._get_by_requests`): per group, the single-group
//! allocation requests of every anchor (the single-provider path for granular groups
//! with its filtering quirks, the per-class product with sharing anchors for the
//! unsuffixed group), then per anchor the full Cartesian product across groups, filtered
//! by `group_policy`, `same_subtree`, consolidated and re-checked for capacity, collected
//! in a set keyed by allocations and mappings, and finally the pre-1.29 nested filter.
//! It shares no code with the engine.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use accel_core::candidates::{
    search, search_with, Candidate, GenerationStrategy, GroupPolicy, Provider, ProviderId, RcId,
    Request, RequestGroup, SearchOptions, Snapshot, TraitId,
};
use accel_core::chunks::Chunks;
use proptest::prelude::*;
use uuid::Uuid;

#[path = "candidates_gen.rs"]
mod random;

use random::{build_request, forest, scenario, SHARES};

// ---------------------------------------------------------------------------------
// Reference
// ---------------------------------------------------------------------------------

#[derive(Clone)]
struct Areq {
    anchor: ProviderId,
    granular: bool,
    rr: Vec<(ProviderId, RcId, i64)>,
    mappings: BTreeMap<String, BTreeSet<ProviderId>>,
}

struct Ref<'a> {
    ps: &'a Chunks<Provider>,
}

impl Ref<'_> {
    fn ids(&self) -> impl Iterator<Item = ProviderId> + '_ {
        (0..self.ps.len() as u32).map(ProviderId)
    }
    fn p(&self, id: ProviderId) -> &Provider {
        &self.ps[id.0 as usize]
    }
    fn has_trait(&self, id: ProviderId, t: TraitId) -> bool {
        self.p(id).traits.contains(&t)
    }
    fn sharing(&self) -> BTreeSet<ProviderId> {
        self.ids().filter(|&i| self.has_trait(i, SHARES)).collect()
    }
    fn meets(&self, id: ProviderId, lists: &[Vec<TraitId>]) -> bool {
        lists
            .iter()
            .all(|any| any.iter().any(|t| self.has_trait(id, *t)))
    }
    fn in_aggs(&self, lists: &[Vec<Uuid>]) -> BTreeSet<ProviderId> {
        self.ids()
            .filter(|&i| {
                lists
                    .iter()
                    .all(|any| any.iter().any(|a| self.p(i).aggregates.contains(a)))
            })
            .collect()
    }
    fn in_any_agg(&self, aggs: &[Uuid]) -> BTreeSet<ProviderId> {
        self.ids()
            .filter(|&i| aggs.iter().any(|a| self.p(i).aggregates.contains(a)))
            .collect()
    }
    fn with_resource(
        &self,
        rc: RcId,
        amount: i64,
        tree: Option<ProviderId>,
    ) -> BTreeSet<ProviderId> {
        self.ids()
            .filter(|&i| tree.is_none_or(|t| self.p(i).root == t))
            .filter(|&i| {
                self.p(i).inventories.iter().any(|inv| {
                    inv.rc == rc
                        && inv.limits.min_unit <= amount
                        && inv.limits.max_unit >= amount
                        && inv.limits.step_size > 0
                        && amount % inv.limits.step_size == 0
                        && (inv.used + amount) as f64
                            <= (inv.limits.total - inv.limits.reserved) as f64
                                * inv.limits.allocation_ratio
                })
            })
            .collect()
    }
    fn anchors_of_sharing(&self, sp: ProviderId) -> BTreeSet<ProviderId> {
        let aggs = &self.p(sp).aggregates;
        self.ids()
            .filter(|&q| self.p(q).aggregates.iter().any(|a| aggs.contains(a)))
            .map(|q| self.p(q).root)
            .collect()
    }
    fn ancestors(&self, id: ProviderId) -> BTreeSet<ProviderId> {
        let mut out = BTreeSet::from([id]);
        let mut cur = id;
        while let Some(parent) = self.p(cur).parent {
            out.insert(parent);
            cur = parent;
        }
        out
    }
}

fn dict(resources: &[(RcId, i64)]) -> Vec<(RcId, i64)> {
    let mut out: Vec<(RcId, i64)> = Vec::new();
    for &(rc, n) in resources {
        match out.iter_mut().find(|r| r.0 == rc) {
            Some(r) => r.1 = n,
            None => out.push((rc, n)),
        }
    }
    out
}

/// `None` = upstream's ResourceProviderNotFound / empty group: whole result empty.
fn ref_group(
    r: &Ref<'_>,
    g: &RequestGroup,
    anchors_ok: &Option<BTreeSet<ProviderId>>,
) -> Option<Vec<Areq>> {
    let has_trees = r.ps.iter().any(|p| p.parent.is_some());
    let sharing = r.sharing();
    let resources = dict(&g.resources);
    let rps_in_aggs = r.in_aggs(&g.member_of);
    if !g.member_of.is_empty() && rps_in_aggs.is_empty() {
        return None;
    }
    let tree = g.in_tree.map(|t| r.p(t).root);
    let mut with_res = BTreeMap::new();
    for &(rc, n) in &resources {
        let set = r.with_resource(rc, n, tree);
        if set.is_empty() {
            return None;
        }
        with_res.insert(rc, set);
    }
    let anchor_ok = |a: ProviderId| anchors_ok.as_ref().is_none_or(|s| s.contains(&a));
    let granular = g.is_granular();
    let mut out = Vec::new();
    if granular || (sharing.is_empty() && !has_trees) {
        // get_provider_ids_matching, with its "empty set means unfiltered" quirk.
        let mut filtered: BTreeSet<ProviderId> = BTreeSet::new();
        if !g.required.is_empty() {
            filtered = r.ids().filter(|&i| r.meets(i, &g.required)).collect();
            if filtered.is_empty() {
                return Some(out);
            }
        }
        if !g.member_of.is_empty() {
            filtered = if filtered.is_empty() {
                rps_in_aggs.clone()
            } else {
                &filtered & &rps_in_aggs
            };
            if filtered.is_empty() {
                return Some(out);
            }
        }
        let mut forbidden_ids = BTreeSet::new();
        if !g.forbidden_aggregates.is_empty() {
            let bad = r.in_any_agg(&g.forbidden_aggregates);
            forbidden_ids.extend(bad.iter().copied());
            if !filtered.is_empty() {
                filtered = &filtered - &bad;
                if filtered.is_empty() {
                    return Some(out);
                }
            }
        }
        if !g.forbidden.is_empty() {
            let bad: BTreeSet<ProviderId> = r
                .ids()
                .filter(|&i| g.forbidden.iter().any(|t| r.has_trait(i, *t)))
                .collect();
            forbidden_ids.extend(bad.iter().copied());
            if !filtered.is_empty() {
                filtered = &filtered - &bad;
                if filtered.is_empty() {
                    return Some(out);
                }
            }
        }
        for (k, &(rc, _)) in resources.iter().enumerate() {
            let ids = &with_res[&rc];
            if k == 0 {
                filtered = if filtered.is_empty() {
                    ids - &forbidden_ids
                } else {
                    &filtered & ids
                };
            } else {
                filtered = &filtered & ids;
            }
            if filtered.is_empty() {
                return Some(out);
            }
        }
        for p in filtered {
            let root = r.p(p).root;
            let areq = |anchor| Areq {
                anchor,
                granular,
                rr: resources.iter().map(|&(rc, n)| (p, rc, n)).collect(),
                mappings: BTreeMap::from([(g.suffix.clone(), BTreeSet::from([p]))]),
            };
            if anchor_ok(root) {
                out.push(areq(root));
            }
            if r.has_trait(p, SHARES) {
                for a in r.anchors_of_sharing(p) {
                    if a != root && anchor_ok(a) {
                        out.push(areq(a));
                    }
                }
            }
        }
        return Some(out);
    }

    // Unsuffixed group, multiple-provider path.
    let flat: Vec<TraitId> = g.required.iter().flatten().copied().collect();
    if !flat.is_empty() && !r.ids().any(|i| flat.iter().any(|t| r.has_trait(i, *t))) {
        return Some(out);
    }
    let bad_aggs = r.in_any_agg(&g.forbidden_aggregates);
    let mut provs: BTreeSet<(ProviderId, ProviderId, RcId)> = BTreeSet::new();
    for &(rc, _) in &resources {
        let mut list: BTreeSet<(ProviderId, ProviderId, RcId)> = with_res[&rc]
            .iter()
            .map(|&p| (p, r.p(p).root, rc))
            .collect();
        let mut shr: BTreeSet<ProviderId> = sharing.clone();
        if !g.member_of.is_empty() {
            shr = &shr & &rps_in_aggs;
        }
        let shr = &shr & &with_res[&rc];
        if !shr.is_empty() && tree.is_none() {
            for sp in shr {
                for a in r.anchors_of_sharing(sp) {
                    list.insert((sp, a, rc));
                }
            }
        }
        if let Some(ok) = anchors_ok {
            list.retain(|e| ok.contains(&e.1));
            if list.is_empty() {
                return Some(out);
            }
        }
        if !g.member_of.is_empty() {
            list.retain(|e| rps_in_aggs.contains(&e.0) || rps_in_aggs.contains(&e.1));
            if list.is_empty() {
                return Some(out);
            }
        }
        if !g.forbidden_aggregates.is_empty() {
            list.retain(|e| !(bad_aggs.contains(&e.0) || bad_aggs.contains(&e.1)));
            if list.is_empty() {
                return Some(out);
            }
        }
        if provs.is_empty() {
            provs = list;
        } else {
            let both: BTreeSet<ProviderId> = provs
                .iter()
                .map(|e| e.1)
                .filter(|t| list.iter().any(|e| e.1 == *t))
                .collect();
            provs.extend(list);
            provs.retain(|e| both.contains(&e.1));
        }
        if provs.is_empty() {
            return Some(out);
        }
    }
    let anchors: BTreeSet<ProviderId> = provs.iter().map(|e| e.1).collect();
    for anchor in anchors {
        let mut lists: Vec<Vec<(ProviderId, RcId, i64)>> = Vec::new();
        let mut rcs: Vec<(RcId, i64)> = resources.clone();
        rcs.sort();
        for (rc, n) in rcs {
            let l: Vec<_> = provs
                .iter()
                .filter(|e| e.1 == anchor && e.2 == rc)
                .map(|e| (e.0, rc, n))
                .collect();
            if l.is_empty() {
                break;
            }
            lists.push(l);
        }
        if lists.len() != resources.len() {
            continue;
        }
        for combo in product(&lists) {
            let ids: Vec<ProviderId> = combo.iter().map(|c| c.0).collect();
            if ids
                .iter()
                .any(|&i| g.forbidden.iter().any(|t| r.has_trait(i, *t)))
            {
                continue;
            }
            let ok = g
                .required
                .iter()
                .all(|any| any.iter().any(|t| ids.iter().any(|&i| r.has_trait(i, *t))));
            if !ok {
                continue;
            }
            out.push(Areq {
                anchor,
                granular: false,
                rr: combo.clone(),
                mappings: BTreeMap::from([(g.suffix.clone(), ids.into_iter().collect())]),
            });
        }
    }
    Some(out)
}

fn product<T: Clone>(lists: &[Vec<T>]) -> Vec<Vec<T>> {
    let mut out = vec![Vec::new()];
    for l in lists {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                l.iter().map(move |x| {
                    let mut v = prefix.clone();
                    v.push(x.clone());
                    v
                })
            })
            .collect();
    }
    out
}

fn reference(snap: &Snapshot, req: &Request) -> BTreeSet<Candidate> {
    let r = Ref {
        ps: snap.providers(),
    };
    let mut result = BTreeSet::new();
    let anchors_ok: Option<BTreeSet<ProviderId>> =
        if req.root_required.is_empty() && req.root_forbidden.is_empty() {
            None
        } else {
            let s: BTreeSet<ProviderId> = r
                .ids()
                .filter(|&i| r.p(i).parent.is_none())
                .filter(|&i| r.meets(i, &req.root_required))
                .filter(|&i| !req.root_forbidden.iter().any(|t| r.has_trait(i, *t)))
                .collect();
            if s.is_empty() {
                return result;
            }
            Some(s)
        };
    let mut per_group: Vec<Vec<Areq>> = Vec::new();
    for g in &req.groups {
        match ref_group(&r, g, &anchors_ok) {
            Some(areqs) if !areqs.is_empty() => per_group.push(areqs),
            _ => return result,
        }
    }
    let n_granular = req.groups.iter().filter(|g| g.is_granular()).count();
    let anchors: BTreeSet<ProviderId> = per_group[0].iter().map(|a| a.anchor).collect();
    for anchor in anchors {
        let lists: Vec<Vec<Areq>> = per_group
            .iter()
            .map(|l| l.iter().filter(|a| a.anchor == anchor).cloned().collect())
            .collect();
        if lists.iter().any(|l| l.is_empty()) {
            continue;
        }
        'combo: for combo in product(&lists) {
            if req.group_policy == GroupPolicy::Isolate {
                let used: BTreeSet<ProviderId> = combo
                    .iter()
                    .filter(|a| a.granular)
                    .flat_map(|a| a.mappings.values().next().unwrap().iter().copied())
                    .collect();
                if used.len() != n_granular {
                    continue;
                }
            }
            for ss in &req.same_subtree {
                let ids: BTreeSet<ProviderId> = combo
                    .iter()
                    .flat_map(|a| ss.iter().filter_map(|s| a.mappings.get(s)))
                    .flatten()
                    .copied()
                    .collect();
                if ids.len() > 1 {
                    let common = ids
                        .iter()
                        .map(|&i| r.ancestors(i))
                        .reduce(|a, b| &a & &b)
                        .unwrap();
                    if common.intersection(&ids).next().is_none() {
                        continue 'combo;
                    }
                }
            }
            let mut amounts: BTreeMap<(ProviderId, RcId), i64> = BTreeMap::new();
            let mut mappings: BTreeMap<String, BTreeSet<ProviderId>> = BTreeMap::new();
            for a in &combo {
                for &(p, rc, n) in &a.rr {
                    *amounts.entry((p, rc)).or_default() += n;
                }
                for (s, ids) in &a.mappings {
                    mappings.entry(s.clone()).or_default().extend(ids);
                }
            }
            for (&(p, rc), &n) in &amounts {
                let inv = r.p(p).inventories.iter().find(|i| i.rc == rc).unwrap();
                let cap = ((inv.limits.total - inv.limits.reserved) as f64
                    * inv.limits.allocation_ratio) as i64;
                if inv.used + n > cap || n > inv.limits.max_unit {
                    continue 'combo;
                }
            }
            if !req.nested && r.ps.iter().any(|p| p.parent.is_some()) {
                let ids: BTreeSet<ProviderId> = amounts.keys().map(|k| k.0).collect();
                let roots: BTreeSet<ProviderId> = ids.iter().map(|&i| r.p(i).root).collect();
                if roots.len() != ids.len() {
                    continue;
                }
            }
            result.insert(Candidate {
                allocations: amounts.into_iter().map(|((p, rc), n)| (p, rc, n)).collect(),
                mappings: mappings
                    .into_iter()
                    .map(|(s, ids)| (s, ids.into_iter().collect()))
                    .collect(),
            });
        }
    }
    result
}

fn expected_summary(snap: &Snapshot, cands: &[Candidate], nested: bool) -> Vec<ProviderId> {
    let mut ids: BTreeSet<ProviderId> =
        cands.iter().flat_map(|c| c.allocated_providers()).collect();
    if nested {
        let roots: BTreeSet<ProviderId> = ids.iter().map(|&i| snap.provider(i).root).collect();
        ids = snap
            .providers()
            .iter()
            .enumerate()
            .filter(|(_, p)| roots.contains(&p.root))
            .map(|(i, _)| ProviderId(i as u32))
            .collect();
    }
    ids.into_iter().collect()
}

/// Upstream's summaries of a limited answer: those of the whole answer whose root is
/// the root of a kept candidate (`limit_results`). Nested-aware summaries are whole
/// trees, so only the kept candidates matter; below 1.29 a provider of a kept tree
/// that only a dropped candidate uses is summarised too.
fn expected_limited_summary(
    snap: &Snapshot,
    all: &BTreeSet<Candidate>,
    kept: &[Candidate],
    nested: bool,
) -> Vec<ProviderId> {
    if nested || kept.len() == all.len() {
        return expected_summary(snap, kept, nested);
    }
    let whole: Vec<Candidate> = all.iter().cloned().collect();
    let roots: BTreeSet<ProviderId> = kept
        .iter()
        .flat_map(|c| c.allocated_providers())
        .map(|p| snap.provider(p).root)
        .collect();
    expected_summary(snap, &whole, false)
        .into_iter()
        .filter(|&p| roots.contains(&snap.provider(p).root))
        .collect()
}

fn assert_within_capacity(snap: &Snapshot, cands: &[Candidate]) -> Result<(), TestCaseError> {
    for c in cands {
        for &(p, rc, n) in &c.allocations {
            let inv = snap.inventory(p, rc);
            prop_assert!(inv.is_some(), "allocation without inventory");
            let inv = inv.unwrap();
            prop_assert!(inv.used + n <= inv.capacity(), "over capacity: {:?}", c);
            prop_assert!(n <= inv.limits.max_unit, "over max_unit: {:?}", c);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_reference((nodes, spec) in scenario()) {
        let aggs = [Uuid::from_u128(1), Uuid::from_u128(2)];
        let snap = forest(&nodes, &aggs);
        let req = build_request(&spec, &snap, &aggs);
        let expected = reference(&snap, &req);
        let out = search(&snap, &req, usize::MAX);
        let got: BTreeSet<Candidate> = out.candidates.iter().cloned().collect();
        prop_assert_eq!(got.len(), out.candidates.len(), "duplicates in engine output");
        prop_assert_eq!(&got, &expected);
        prop_assert_eq!(out.summary_providers, expected_summary(&snap, &out.candidates, req.nested));
        assert_within_capacity(&snap, &out.candidates)?;
    }

    #[test]
    fn limits_return_distinct_valid_candidates(
        (nodes, spec) in scenario(),
        limit in 1usize..5,
        breadth in any::<bool>(),
        seed in prop::option::of(any::<u64>()),
    ) {
        let aggs = [Uuid::from_u128(1), Uuid::from_u128(2)];
        let snap = forest(&nodes, &aggs);
        let mut req = build_request(&spec, &snap, &aggs);
        let expected = reference(&snap, &req);
        req.limit = Some(limit);
        req.randomize = seed;
        let options = SearchOptions {
            cap: usize::MAX,
            strategy: if breadth { GenerationStrategy::BreadthFirst } else { GenerationStrategy::DepthFirst },
        };
        let out = search_with(&snap, &req, &options);
        let got: HashSet<&Candidate> = out.candidates.iter().collect();
        prop_assert_eq!(out.candidates.len(), limit.min(expected.len()));
        prop_assert_eq!(got.len(), out.candidates.len(), "duplicates in engine output");
        for c in &out.candidates {
            prop_assert!(expected.contains(c), "not a valid candidate: {:?}", c);
        }
        prop_assert_eq!(&out.summary_providers, &expected_limited_summary(&snap, &expected, &out.candidates, req.nested));
        // A cap below the limit wins.
        let capped = search(&snap, &req, 1);
        prop_assert_eq!(capped.candidates.len(), 1.min(expected.len()));
        assert_within_capacity(&snap, &out.candidates)?;
    }

    #[test]
    fn seeded_results_are_reproducible((nodes, spec) in scenario(), seed in any::<u64>()) {
        let aggs = [Uuid::from_u128(1), Uuid::from_u128(2)];
        let snap = forest(&nodes, &aggs);
        let mut req = build_request(&spec, &snap, &aggs);
        let plain = search(&snap, &req, usize::MAX);
        prop_assert_eq!(&plain, &search(&snap, &req, usize::MAX));
        req.randomize = Some(seed);
        let a = search(&snap, &req, usize::MAX);
        prop_assert_eq!(&a, &search(&snap, &req, usize::MAX));
        let mut sorted_a = a.candidates.clone();
        sorted_a.sort();
        let mut sorted_plain = plain.candidates.clone();
        sorted_plain.sort();
        prop_assert_eq!(sorted_a, sorted_plain);
    }
}
