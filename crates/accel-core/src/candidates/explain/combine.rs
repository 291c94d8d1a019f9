//! Reasons when every decision has a provider but no candidate exists: the rules that
//! bind decisions together.
//!
//! Those rules are `group_policy=isolate`, each `same_subtree` entry, the pre-1.29
//! one-provider-per-tree rule, the unsuffixed group's required traits (carried by its
//! providers together) and the summed capacity of decisions that land on one
//! provider. Each of the first four can be dropped from a [`Plan`] and the anchor asked
//! again whether it has a candidate touching its own tree (an existence question,
//! stopping at the first candidate), so the blame is found by experiment rather than
//! by a second copy of the solver's reasoning:
//!
//! 1. every rule whose removal alone yields a candidate is a reason;
//! 2. otherwise, when removing all of them yields one, a minimal set of them (drop
//!    each in turn and keep it out while the anchor still has a candidate);
//! 3. otherwise summed capacity: with those rules gone only the per-provider sums
//!    remain, and each option fits alone, so the sums must be what fails.
//!
//! Step 3 is why every anchor reaching this point gets at least one reason.

use super::super::anchor::{self, Var};
use super::super::plan::{has_any, Plan};
use super::super::snapshot::{ProviderId, RcId, TraitId};
use super::fits::{first_filtered, own_candidate};
use super::reasons::single;
use super::{words, Ctx, Reason, ReasonCode};

/// A rule the explainer can switch off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Isolate,
    /// Index into [`Plan::same_subtree`].
    SameSubtree(usize),
    SingleTree,
    /// The unsuffixed group's collective required traits.
    Traits,
}

fn relaxed<'r>(plan: &Plan<'r>, rules: &[Rule]) -> Plan<'r> {
    let mut p = plan.clone();
    let mut drop_entries: Vec<usize> = Vec::new();
    for rule in rules {
        match *rule {
            Rule::Isolate => p.isolate = false,
            Rule::SameSubtree(k) => drop_entries.push(k),
            Rule::SingleTree => p.nested = true,
            Rule::Traits => {
                for g in p.groups.iter_mut().filter(|g| !g.granular) {
                    g.required = &[];
                }
            }
        }
    }
    p.same_subtree = p
        .same_subtree
        .into_iter()
        .enumerate()
        .filter(|(k, _)| !drop_entries.contains(k))
        .map(|(_, e)| e)
        .collect();
    p
}

impl Ctx<'_> {
    /// Why `anchor` has no candidate whose options pass `keep`, when every decision
    /// has at least one such option.
    pub(super) fn combination(
        &self,
        anchor: ProviderId,
        keep: impl Fn(usize, ProviderId) -> bool + Copy,
    ) -> Vec<Reason> {
        let plan = self.plan;
        let lists = anchor::decisions(plan, anchor, keep, false);
        let rules = self.active_rules(&lists);
        let works = |set: &[Rule]| {
            let p = relaxed(plan, set);
            own_candidate(&p, anchor, keep, first_filtered(&p, anchor, keep), |_| {})
        };

        let mut blame: Vec<Rule> = rules.iter().copied().filter(|&r| works(&[r])).collect();
        if blame.is_empty() && rules.len() > 1 && works(&rules) {
            blame = rules.clone();
            for r in &rules {
                let without: Vec<Rule> = blame.iter().copied().filter(|x| x != r).collect();
                if works(&without) {
                    blame = without;
                }
            }
        }
        if blame.is_empty() {
            return self.summed_capacity(&lists);
        }
        blame
            .into_iter()
            .flat_map(|rule| self.rule_reasons(rule, &lists))
            .collect()
    }

    /// The rules of the plan that bind more than one decision here.
    fn active_rules(&self, lists: &[(Var, Vec<ProviderId>)]) -> Vec<Rule> {
        let plan = self.plan;
        let mut rules = Vec::new();
        if plan.isolate && lists.iter().filter(|(v, _)| v.granular).count() > 1 {
            rules.push(Rule::Isolate);
        }
        for (k, entry) in plan.same_subtree.iter().enumerate() {
            if lists
                .iter()
                .filter(|(v, _)| entry.contains(&v.group))
                .count()
                > 1
            {
                rules.push(Rule::SameSubtree(k));
            }
        }
        if !plan.nested && lists.iter().filter(|(v, _)| !v.amounts.is_empty()).count() > 1 {
            rules.push(Rule::SingleTree);
        }
        if plan
            .groups
            .iter()
            .any(|g| !g.granular && !g.required.is_empty())
        {
            rules.push(Rule::Traits);
        }
        rules
    }

    /// "group 1 can use a, b; VCPU (unsuffixed) can use c" for the decisions `pick`.
    fn options(&self, lists: &[(Var, Vec<ProviderId>)], pick: impl Fn(&Var) -> bool) -> String {
        let parts: Vec<String> = lists
            .iter()
            .filter(|(v, _)| pick(v))
            .map(|(v, opts)| {
                let g = &self.plan.groups[v.group];
                let who = match (g.granular, v.amounts.as_slice()) {
                    (false, [(slot, _)]) => format!(
                        "{} (unsuffixed)",
                        self.names.resource_class(self.plan.rcs[*slot])
                    ),
                    _ => words::groups([g.suffix]),
                };
                format!("{who} can use {}", words::providers(self.names, opts))
            })
            .collect();
        parts.join("; ")
    }

    fn rule_reasons(&self, rule: Rule, lists: &[(Var, Vec<ProviderId>)]) -> Vec<Reason> {
        let plan = self.plan;
        let request_wide = |code, detail| Reason {
            code,
            group: None,
            provider: None,
            resource_class: None,
            trait_id: None,
            detail,
        };
        match rule {
            Rule::Isolate => {
                let suffixes = plan.groups.iter().filter(|g| g.granular).map(|g| g.suffix);
                let detail = format!(
                    "group_policy=isolate needs a separate provider for each of {}: {}",
                    words::groups(suffixes),
                    self.options(lists, |v| v.granular)
                );
                vec![request_wide(ReasonCode::Isolate, detail)]
            }
            Rule::SameSubtree(k) => {
                let entry = &plan.same_subtree[k];
                let suffixes: Vec<&str> = entry.iter().map(|&g| plan.groups[g].suffix).collect();
                let detail = format!(
                    "same_subtree={}: no choice puts these groups under one of their own providers: {}",
                    suffixes.join(","),
                    self.options(lists, |v| entry.contains(&v.group))
                );
                vec![request_wide(ReasonCode::SameSubtree, detail)]
            }
            Rule::SingleTree => {
                let detail = format!(
                    "before microversion 1.29 a candidate takes resources from one provider per tree: {}",
                    self.options(lists, |v| !v.amounts.is_empty())
                );
                vec![request_wide(ReasonCode::SingleTree, detail)]
            }
            Rule::Traits => self.collective_traits(lists),
        }
    }

    /// The unsuffixed group's required traits that its possible providers cannot carry.
    fn collective_traits(&self, lists: &[(Var, Vec<ProviderId>)]) -> Vec<Reason> {
        let plan = self.plan;
        let snap = plan.snap;
        let mut out = Vec::new();
        for (gi, g) in plan.groups.iter().enumerate() {
            if g.granular || g.required.is_empty() {
                continue;
            }
            let mut providers: Vec<ProviderId> = lists
                .iter()
                .filter(|(v, _)| v.group == gi)
                .flat_map(|(_, opts)| opts.iter().copied())
                .collect();
            providers.sort_unstable();
            providers.dedup();
            let mut pool: Vec<TraitId> = providers
                .iter()
                .flat_map(|&p| snap.provider(p).traits.iter().copied())
                .collect();
            pool.sort_unstable();
            pool.dedup();
            let who = words::providers(self.names, &providers);
            let reason = |code, trait_id, detail| Reason {
                code,
                group: Some(String::new()),
                provider: None,
                resource_class: None,
                trait_id,
                detail,
            };
            let before = out.len();
            for list in g.required.iter().filter(|list| !has_any(&pool, list)) {
                out.push(match single(list) {
                    Some(t) => reason(
                        ReasonCode::RequiredTrait,
                        Some(t),
                        format!(
                            "none of the providers that can serve the unsuffixed group ({who}) has {}",
                            self.names.trait_name(t)
                        ),
                    ),
                    None => reason(
                        ReasonCode::AnyTrait,
                        None,
                        format!(
                            "none of the providers that can serve the unsuffixed group ({who}) has any of {}",
                            words::traits(self.names, list)
                        ),
                    ),
                });
            }
            if out.len() == before {
                let all: Vec<String> = g
                    .required
                    .iter()
                    .map(|l| words::traits(self.names, l))
                    .collect();
                out.push(reason(
                    ReasonCode::RequiredTrait,
                    None,
                    format!(
                        "no choice of providers for the unsuffixed group ({who}) carries all of {} together",
                        all.join("; ")
                    ),
                ));
            }
        }
        out
    }

    /// Classes that several decisions may take from one provider, and the room there.
    fn summed_capacity(&self, lists: &[(Var, Vec<ProviderId>)]) -> Vec<Reason> {
        let plan = self.plan;
        let snap = plan.snap;
        let mut out = Vec::new();
        for (slot, &rc) in plan.rcs.iter().enumerate() {
            let askers: Vec<(&str, i64, &[ProviderId])> = lists
                .iter()
                .filter_map(|(v, opts)| {
                    let amount = v.amounts.iter().find(|a| a.0 == slot)?.1;
                    Some((plan.groups[v.group].suffix, amount, opts.as_slice()))
                })
                .collect();
            let shared = |p: &ProviderId| askers.iter().filter(|a| a.2.contains(p)).count() > 1;
            let mut suppliers: Vec<ProviderId> = askers
                .iter()
                .flat_map(|a| a.2.iter().copied())
                .filter(shared)
                .collect();
            suppliers.sort_unstable();
            suppliers.dedup();
            if suppliers.is_empty() {
                continue;
            }
            let askers: Vec<&(&str, i64, &[ProviderId])> =
                askers.iter().filter(|a| a.2.iter().any(shared)).collect();
            let who = words::groups(askers.iter().map(|a| a.0));
            let total: i64 = askers.iter().map(|a| a.1).sum();
            let rc_name = self.names.resource_class(rc);
            let (provider, detail) = match suppliers.as_slice() {
                [p] => {
                    let inv = snap.inventory(*p, rc).expect("an option has the class");
                    let lead = format!("{who} together need {total}");
                    let detail = if total > inv.limits.max_unit {
                        words::max_unit(&lead, &rc_name, inv.limits.max_unit)
                    } else {
                        words::capacity(&lead, &rc_name, inv)
                    };
                    (Some(*p), detail)
                }
                _ => {
                    let amounts: Vec<String> = askers.iter().map(|a| a.1.to_string()).collect();
                    (
                        None,
                        format!(
                            "{who} together need {} {rc_name}, more than {} can hold",
                            amounts.join(" + "),
                            self.rooms(rc, &suppliers)
                        ),
                    )
                }
            };
            out.push(Reason {
                code: ReasonCode::Capacity,
                group: None,
                provider,
                resource_class: Some(rc),
                trait_id: None,
                detail,
            });
        }
        out
    }

    /// "a (2 free), b (4 free, max_unit 3)".
    fn rooms(&self, rc: RcId, providers: &[ProviderId]) -> String {
        let snap = self.plan.snap;
        let parts: Vec<String> = providers
            .iter()
            .map(|&p| {
                let name = self.names.provider(p);
                match snap.inventory(p, rc) {
                    Some(inv) if inv.limits.max_unit < words::free(inv) => {
                        format!(
                            "{name} ({} free, max_unit {})",
                            words::free(inv),
                            inv.limits.max_unit
                        )
                    }
                    Some(inv) => format!("{name} ({} free)", words::free(inv)),
                    None => name,
                }
            })
            .collect();
        parts.join(", ")
    }
}
