//! Property tests of `explain` on the random forests and requests of the candidate
//! search's own property tests: its verdicts agree with the unlimited search root by
//! root, every root that does not fit gets at least one reason, what a provider-level
//! reason claims (a missing trait, a full inventory, ...) holds in the snapshot, a
//! root blamed only on rules binding groups together fits once they are dropped, the
//! per-group bound holds, and explaining one root (`only_root`) gives that root's verdict of the full
//! run.

use std::collections::{BTreeMap, BTreeSet};

use accel_core::candidates::explain::{
    explain, ExplainOptions, Explanation, Names, Reason, ReasonCode, RootExplanation,
};
use accel_core::candidates::{search, GroupPolicy, ProviderId, RcId, Request, Snapshot, TraitId};
use proptest::prelude::*;
use uuid::Uuid;

#[path = "candidates_gen.rs"]
mod random;

use random::{build_request, forest, scenario};

struct Plain;

impl Names for Plain {
    fn provider(&self, id: ProviderId) -> String {
        format!("rp{}", id.0)
    }
    fn resource_class(&self, rc: RcId) -> String {
        format!("RC{rc}")
    }
    fn trait_name(&self, t: TraitId) -> String {
        format!("T{t}")
    }
}

/// Roots with a provider in some candidate of the unlimited search.
fn touched_roots(snap: &Snapshot, req: &Request) -> BTreeSet<ProviderId> {
    let out = search(snap, req, usize::MAX);
    let mut roots = BTreeSet::new();
    for c in &out.candidates {
        roots.extend(c.providers().map(|p| snap.provider(p).root));
    }
    roots
}

/// The amount group `suffix` asks of `rc` (the last one written wins).
fn amount(req: &Request, suffix: &str, rc: RcId) -> Option<i64> {
    let g = req.groups.iter().find(|g| g.suffix == suffix)?;
    g.resources.iter().rev().find(|r| r.0 == rc).map(|r| r.1)
}

/// What a provider-level reason claims holds in the snapshot.
fn check_claim(snap: &Snapshot, req: &Request, r: &Reason) -> Result<(), TestCaseError> {
    let Some(p) = r.provider else { return Ok(()) };
    let prov = snap.provider(p);
    let has = |t: Option<TraitId>| t.is_some_and(|t| prov.traits.contains(&t));
    match r.code {
        ReasonCode::RequiredTrait | ReasonCode::RootRequired => {
            prop_assert!(!has(r.trait_id) && r.trait_id.is_some(), "{:?}", r)
        }
        ReasonCode::ForbiddenTrait | ReasonCode::RootForbidden => {
            prop_assert!(has(r.trait_id), "{:?}", r)
        }
        ReasonCode::NoInventory => prop_assert!(
            snap.inventory(p, r.resource_class.unwrap()).is_none(),
            "{:?}",
            r
        ),
        ReasonCode::Capacity | ReasonCode::MaxUnit | ReasonCode::MinUnit | ReasonCode::StepSize => {
            let Some(group) = &r.group else { return Ok(()) }; // several groups together
            let rc = r.resource_class.unwrap();
            let inv = snap.inventory(p, rc);
            prop_assert!(inv.is_some(), "{:?}", r);
            let inv = inv.unwrap();
            let n = amount(req, group, rc).unwrap();
            let l = &inv.limits;
            let holds = match r.code {
                ReasonCode::Capacity => inv.used + n > inv.capacity(),
                ReasonCode::MaxUnit => n > l.max_unit,
                ReasonCode::MinUnit => n < l.min_unit,
                _ => l.step_size <= 0 || n % l.step_size != 0,
            };
            prop_assert!(holds, "{:?} against {:?}", r, inv);
        }
        _ => {}
    }
    Ok(())
}

/// When every reason of a root blames a rule that binds groups together (isolate,
/// same_subtree, one provider per tree, the unsuffixed group's traits), the same request
/// without those rules has a candidate in the root's tree.
fn check_blame(snap: &Snapshot, req: &Request, r: &RootExplanation) -> Result<(), TestCaseError> {
    let collective = |x: &Reason| {
        matches!(x.code, ReasonCode::RequiredTrait | ReasonCode::AnyTrait)
            && x.provider.is_none()
            && x.group.as_deref() == Some("")
    };
    let binding = |x: &Reason| {
        matches!(
            x.code,
            ReasonCode::Isolate | ReasonCode::SameSubtree | ReasonCode::SingleTree
        ) || collective(x)
    };
    if r.fits || !r.reasons.iter().all(binding) {
        return Ok(());
    }
    let mut relaxed = req.clone();
    for x in &r.reasons {
        match x.code {
            ReasonCode::Isolate => relaxed.group_policy = GroupPolicy::None,
            ReasonCode::SingleTree => relaxed.nested = true,
            ReasonCode::SameSubtree => {
                let named = x
                    .detail
                    .strip_prefix("same_subtree=")
                    .and_then(|d| d.split_once(':'));
                prop_assert!(named.is_some(), "{:?}", x);
                let named: BTreeSet<&str> = named.unwrap().0.split(',').collect();
                let known = |s: &String| req.groups.iter().any(|g| &g.suffix == s);
                relaxed.same_subtree.retain(|entry| {
                    let entry: BTreeSet<&str> = entry
                        .iter()
                        .filter(|s| known(s))
                        .map(String::as_str)
                        .collect();
                    entry != named
                });
            }
            _ => {
                for g in relaxed.groups.iter_mut().filter(|g| g.suffix.is_empty()) {
                    g.required.clear();
                }
            }
        }
    }
    prop_assert!(
        touched_roots(snap, &relaxed).contains(&r.root),
        "root {} still does not fit without the blamed rules {:?}",
        r.root.0,
        r.reasons
    );
    Ok(())
}

fn check_shape(
    snap: &Snapshot,
    req: &Request,
    ex: &Explanation,
    per_group: usize,
) -> Result<(), TestCaseError> {
    let n = snap.providers().len() as u32;
    for r in &ex.roots {
        if r.fits {
            prop_assert!(r.reasons.is_empty(), "a fitting root has reasons: {:?}", r);
            continue;
        }
        prop_assert!(
            !r.reasons.is_empty(),
            "root {} does not fit and has no reason",
            r.root.0
        );
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for reason in &r.reasons {
            prop_assert!(!reason.detail.is_empty());
            prop_assert!(reason.provider.is_none_or(|p| p.0 < n));
            check_claim(snap, req, reason)?;
            check_blame(snap, req, r)?;
            if let Some(g) = &reason.group {
                *per.entry(g.as_str()).or_default() += 1;
            }
        }
        for (g, count) in per {
            prop_assert!(count <= per_group, "group {g:?}: {count} reasons");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn fits_agrees_with_the_search_root_by_root((nodes, spec) in scenario(), per_group in 1usize..4) {
        let aggs = [Uuid::from_u128(1), Uuid::from_u128(2)];
        let snap = forest(&nodes, &aggs);
        let req = build_request(&spec, &snap, &aggs);
        let options = ExplainOptions { reasons_per_group: per_group, only_root: None };
        let ex = explain(&snap, &req, &Plain, &options);
        let expected = touched_roots(&snap, &req);
        let roots: Vec<ProviderId> = ex.roots.iter().map(|r| r.root).collect();
        prop_assert_eq!(roots.as_slice(), snap.roots());
        for r in &ex.roots {
            prop_assert_eq!(r.fits, expected.contains(&r.root), "root {}: {:?}", r.root.0, r);
        }
        check_shape(&snap, &req, &ex, per_group)?;
    }

    #[test]
    fn one_root_agrees_with_the_full_run((nodes, spec) in scenario(), pick in any::<prop::sample::Index>()) {
        let aggs = [Uuid::from_u128(1), Uuid::from_u128(2)];
        let snap = forest(&nodes, &aggs);
        let req = build_request(&spec, &snap, &aggs);
        let full = explain(&snap, &req, &Plain, &ExplainOptions::default());
        // Any provider may be named; the verdict is its root's.
        let named = ProviderId(pick.index(snap.providers().len()) as u32);
        let root = snap.provider(named).root;
        let options = ExplainOptions { only_root: Some(named), ..ExplainOptions::default() };
        let one = explain(&snap, &req, &Plain, &options);
        let expected = full.roots.iter().find(|r| r.root == root).cloned();
        prop_assert_eq!(one.roots, expected.into_iter().collect::<Vec<_>>());
    }
}
