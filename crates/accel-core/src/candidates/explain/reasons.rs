//! Reasons one decision has no provider, and reasons a root cannot anchor at all.
//!
//! A decision (a granular group, or one class of the unsuffixed group) has no option
//! when every provider it may look at (the anchor's tree and the sharing providers
//! that list the anchor) fails one of the predicates of [`super::super::plan`]. This
//! module re-asks those predicates one rule at a time, so that each failure becomes a
//! [`Fail`] carrying the numbers it compared, and renders the closest providers
//! (fewest failed rules) first. Failures are collected as small values and rendered
//! only for the few reasons kept: on a big cloud most roots of a typical answer fail
//! here, and formatting every provider's sentence would cost more than the search.

use uuid::Uuid;

use super::super::anchor::Var;
use super::super::plan::{has_any, meets_all, Group};
use super::super::snapshot::{ProviderId, RcId, TraitId};
use super::{words, Ctx, Reason, ReasonCode};

/// One rule one provider failed for one decision.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fail<'r> {
    NoInventory {
        rc: RcId,
    },
    Capacity {
        rc: RcId,
        amount: i64,
    },
    MaxUnit {
        rc: RcId,
        amount: i64,
        max: i64,
    },
    MinUnit {
        rc: RcId,
        amount: i64,
        min: i64,
    },
    StepSize {
        rc: RcId,
        amount: i64,
        step: i64,
    },
    Required {
        list: &'r [TraitId],
    },
    Forbidden {
        t: TraitId,
    },
    MemberOf {
        list: &'r [Uuid],
        root: Option<ProviderId>,
    },
    ForbiddenAggregate {
        agg: Uuid,
        root: Option<ProviderId>,
    },
    InTree {
        of: ProviderId,
    },
}

impl Ctx<'_> {
    /// Request-wide reasons `root` cannot anchor a candidate: `root_required`, and an
    /// `in_tree` that keeps the anchor out (as [`super::super::plan::Plan::candidate_anchors`]).
    pub(super) fn anchoring(&self, root: ProviderId) -> Vec<Reason> {
        let snap = self.plan.snap;
        let traits = &snap.provider(root).traits;
        let mut out = Vec::new();
        for list in self.plan.root_required {
            if !has_any(traits, list) {
                let detail = match list.as_slice() {
                    [t] => format!(
                        "root lacks required trait {} (root_required)",
                        self.names.trait_name(*t)
                    ),
                    _ => format!(
                        "root has none of {} (root_required)",
                        words::traits(self.names, list)
                    ),
                };
                out.push(Reason {
                    code: ReasonCode::RootRequired,
                    group: None,
                    provider: Some(root),
                    resource_class: None,
                    trait_id: single(list),
                    detail,
                });
            }
        }
        for &t in self.plan.root_forbidden {
            if traits.binary_search(&t).is_ok() {
                let name = self.names.trait_name(t);
                out.push(Reason {
                    code: ReasonCode::RootForbidden,
                    group: None,
                    provider: Some(root),
                    resource_class: None,
                    trait_id: Some(t),
                    detail: format!("root has forbidden trait {name} (root_required=!{name})"),
                });
            }
        }
        for (gi, g) in self.plan.groups.iter().enumerate() {
            let Some(tree) = g.in_tree_root else { continue };
            if g.granular && g.resources.is_empty() {
                continue;
            }
            let allowed = tree == root
                || (g.granular
                    && snap.tree(tree).iter().any(|&p| {
                        snap.is_sharing(p)
                            && g.granular_ok(snap, p)
                            && snap.sharing_anchors(p).binary_search(&root).is_ok()
                    }));
            if !allowed {
                let named = self.request.groups[gi].in_tree.unwrap_or(tree);
                let name = self.names.provider(named);
                out.push(Reason {
                    code: ReasonCode::InTree,
                    group: Some(g.suffix.to_owned()),
                    provider: Some(named),
                    resource_class: None,
                    trait_id: None,
                    detail: format!(
                        "in_tree{}={name}: only the tree of {name} may serve {}",
                        g.suffix,
                        words::groups([g.suffix])
                    ),
                });
            }
        }
        out
    }

    /// Reasons for the decisions `empty` of `lists` (each without an option), at most
    /// `per_group` per group, the decisions of one group taking turns. `own_only`: the
    /// options were narrowed to the anchor's own tree.
    pub(super) fn unservable(
        &self,
        root: ProviderId,
        lists: &[(Var, Vec<ProviderId>)],
        empty: &[usize],
        own_only: bool,
    ) -> Vec<Reason> {
        let mut out = Vec::new();
        let mut done: Vec<usize> = Vec::new();
        for &i in empty {
            let gi = lists[i].0.group;
            if done.contains(&gi) {
                continue;
            }
            done.push(gi);
            let mut per: Vec<std::vec::IntoIter<Reason>> = empty
                .iter()
                .filter(|&&j| lists[j].0.group == gi)
                .map(|&j| self.decision(root, &lists[j].0, own_only).into_iter())
                .collect();
            let mut taken = 0;
            let mut more = true;
            while more && taken < self.per_group {
                more = false;
                for r in per.iter_mut().filter_map(Iterator::next) {
                    if taken < self.per_group {
                        out.push(r);
                        taken += 1;
                        more = true;
                    }
                }
            }
        }
        out
    }

    /// Why no provider may take decision `var` for `anchor`, closest providers first
    /// (at most `per_group` reasons).
    fn decision(&self, anchor: ProviderId, var: &Var, own_only: bool) -> Vec<Reason> {
        let plan = self.plan;
        let snap = plan.snap;
        let g = &plan.groups[var.group];
        let group = Some(g.suffix.to_owned());
        if g.granular && g.resources.is_empty() && g.required.is_empty() && g.member_of.is_empty() {
            return vec![Reason {
                code: ReasonCode::RequiredTrait,
                group,
                provider: None,
                resource_class: None,
                trait_id: None,
                detail: format!(
                    "{} asks for no resources, no required trait and no member_of: Placement matches no provider for it",
                    words::groups([g.suffix])
                ),
            }];
        }
        let own = snap.tree(anchor);
        let foreign: Vec<ProviderId> = if own_only {
            Vec::new()
        } else {
            snap.sharing_for_anchor(anchor)
                .iter()
                .copied()
                .filter(|&s| snap.provider(s).root != anchor)
                .collect()
        };
        let scope = || own.iter().chain(&foreign).copied();
        let classes: Vec<(RcId, i64)> = var
            .amounts
            .iter()
            .map(|&(slot, n)| (plan.rcs[slot], n))
            .collect();

        let missing: Vec<Reason> = classes
            .iter()
            .filter(|&&(rc, _)| scope().all(|p| snap.inventory(p, rc).is_none()))
            .map(|&(rc, _)| {
                let tree = self.names.provider(anchor);
                let name = self.names.resource_class(rc);
                let detail = if own_only {
                    format!("no provider of tree {tree} has {name} inventory, only sharing providers of other trees")
                } else if foreign.is_empty() {
                    format!("no provider of tree {tree} has {name} inventory")
                } else {
                    format!(
                        "no provider of tree {tree} or of the {} sharing providers it may use has {name} inventory",
                        foreign.len()
                    )
                };
                Reason {
                    code: ReasonCode::NoInventory,
                    group: group.clone(),
                    provider: None,
                    resource_class: Some(rc),
                    trait_id: None,
                    detail,
                }
            })
            .collect();
        if !missing.is_empty() {
            return missing;
        }

        let mut failing: Vec<(ProviderId, Vec<Fail<'_>>)> = scope()
            .filter(|&p| {
                classes.is_empty()
                    || classes
                        .iter()
                        .any(|&(rc, _)| snap.inventory(p, rc).is_some())
            })
            .map(|p| {
                let own_tree = snap.provider(p).root == anchor;
                (p, self.failures(g, &classes, anchor, p, own_tree))
            })
            .collect();
        debug_assert!(
            failing.iter().all(|(_, f)| !f.is_empty()),
            "a provider of an empty decision passes every rule"
        );
        failing.sort_by_key(|(p, f)| (f.len(), *p));
        failing
            .iter()
            .flat_map(|(p, fails)| fails.iter().map(move |f| (*p, *f)))
            .take(self.per_group)
            .map(|(p, f)| self.render(g, p, f))
            .collect()
    }

    /// Every rule `p` fails for a decision of group `g` asking for `classes`, as
    /// [`Group::granular_ok`] and [`Group::unsuffixed_ok`] decide them.
    fn failures<'r>(
        &self,
        g: &Group<'r>,
        classes: &[(RcId, i64)],
        anchor: ProviderId,
        p: ProviderId,
        own_tree: bool,
    ) -> Vec<Fail<'r>> {
        let snap = self.plan.snap;
        let prov = snap.provider(p);
        let root = snap.provider(anchor);
        let mut out = Vec::new();
        for &(rc, amount) in classes {
            let Some(inv) = snap.inventory(p, rc) else {
                out.push(Fail::NoInventory { rc });
                continue;
            };
            let l = &inv.limits;
            if amount < l.min_unit {
                out.push(Fail::MinUnit {
                    rc,
                    amount,
                    min: l.min_unit,
                });
            }
            if amount > l.max_unit {
                out.push(Fail::MaxUnit {
                    rc,
                    amount,
                    max: l.max_unit,
                });
            }
            if l.step_size <= 0 || amount % l.step_size != 0 {
                out.push(Fail::StepSize {
                    rc,
                    amount,
                    step: l.step_size,
                });
            }
            if inv.used.saturating_add(amount) > inv.capacity() {
                out.push(Fail::Capacity { rc, amount });
            }
        }
        out.extend(
            g.forbidden
                .iter()
                .filter(|t| prov.traits.binary_search(t).is_ok())
                .map(|&t| Fail::Forbidden { t }),
        );
        let bad_agg = |of: &super::super::snapshot::Provider| {
            g.forbidden_aggs
                .iter()
                .find(|a| of.aggregates.binary_search(a).is_ok())
                .copied()
        };
        if let Some(agg) = bad_agg(prov) {
            out.push(Fail::ForbiddenAggregate { agg, root: None });
        }
        let first_unmet = |of: &super::super::snapshot::Provider| {
            g.member_of
                .iter()
                .find(|list| !has_any(&of.aggregates, list))
        };
        if g.granular {
            out.extend(
                g.required
                    .iter()
                    .filter(|list| !has_any(&prov.traits, list))
                    .map(|list| Fail::Required { list }),
            );
            if let Some(list) = first_unmet(prov) {
                out.push(Fail::MemberOf { list, root: None });
            }
            if let Some(tree) = g
                .in_tree_root
                .filter(|&t| !g.resources.is_empty() && prov.root != t)
            {
                out.push(Fail::InTree { of: tree });
            }
            return out;
        }
        if let Some(agg) = bad_agg(root) {
            out.push(Fail::ForbiddenAggregate {
                agg,
                root: Some(anchor),
            });
        }
        let tree = g.in_tree_root.filter(|&t| !own_tree || t != anchor);
        if let Some(of) = tree {
            out.push(Fail::InTree { of });
        }
        if let Some(list) = first_unmet(prov) {
            if !own_tree || !meets_all(&root.aggregates, g.member_of) {
                let root = own_tree.then_some(anchor);
                out.push(Fail::MemberOf { list, root });
            }
        }
        out
    }

    /// The reason for one failure of provider `p` in group `g`.
    pub(super) fn render(&self, g: &Group<'_>, p: ProviderId, fail: Fail<'_>) -> Reason {
        let snap = self.plan.snap;
        let names = self.names;
        let rc_name = |rc| names.resource_class(rc);
        let (code, rc, t, detail) = match fail {
            Fail::NoInventory { rc } => (
                ReasonCode::NoInventory,
                Some(rc),
                None,
                format!("has no {} inventory", rc_name(rc)),
            ),
            Fail::Capacity { rc, amount } => {
                let detail = match snap.inventory(p, rc) {
                    Some(inv) => words::capacity(format_args!("needs {amount}"), &rc_name(rc), inv),
                    None => format!("has no {} inventory", rc_name(rc)),
                };
                (ReasonCode::Capacity, Some(rc), None, detail)
            }
            Fail::MaxUnit { rc, amount, max } => (
                ReasonCode::MaxUnit,
                Some(rc),
                None,
                words::max_unit(format_args!("needs {amount}"), &rc_name(rc), max),
            ),
            Fail::MinUnit { rc, amount, min } => (
                ReasonCode::MinUnit,
                Some(rc),
                None,
                words::min_unit(amount, &rc_name(rc), min),
            ),
            Fail::StepSize { rc, amount, step } => (
                ReasonCode::StepSize,
                Some(rc),
                None,
                words::step_size(amount, &rc_name(rc), step),
            ),
            Fail::Required { list: [t] } => (
                ReasonCode::RequiredTrait,
                None,
                Some(*t),
                words::lacks_trait(&names.trait_name(*t)),
            ),
            Fail::Required { list } => (
                ReasonCode::AnyTrait,
                None,
                None,
                words::lacks_any(&words::traits(names, list)),
            ),
            Fail::Forbidden { t } => (
                ReasonCode::ForbiddenTrait,
                None,
                Some(t),
                words::forbidden_trait(&names.trait_name(t)),
            ),
            Fail::MemberOf { list, root } => {
                let root = root.map(|r| names.provider(r));
                (
                    ReasonCode::MemberOf,
                    None,
                    None,
                    words::member_of(list, root.as_deref()),
                )
            }
            Fail::ForbiddenAggregate { agg, root } => {
                let root = root.map(|r| names.provider(r));
                (
                    ReasonCode::MemberOf,
                    None,
                    None,
                    words::forbidden_aggregate(&agg, root.as_deref()),
                )
            }
            Fail::InTree { of } => (
                ReasonCode::InTree,
                None,
                None,
                words::outside_tree(&names.provider(of)),
            ),
        };
        Reason {
            code,
            group: Some(g.suffix.to_owned()),
            provider: Some(p),
            resource_class: rc,
            trait_id: t,
            detail,
        }
    }
}

/// The trait of a one-element any-of list.
pub(super) fn single(list: &[TraitId]) -> Option<TraitId> {
    match list {
        [t] => Some(*t),
        _ => None,
    }
}
