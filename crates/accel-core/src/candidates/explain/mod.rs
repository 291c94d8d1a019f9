//! Why a root provider does or does not yield allocation candidates ("no valid host").
//!
//! Placement answers an empty list and says nothing about which provider failed which
//! part of a request. [`explain`] answers, for every root of a [`Snapshot`] (or one),
//! whether the candidate search has a candidate in its tree (`fits`) and, when it has
//! none, the reasons: which provider, which request group, which rule, with the numbers,
//! as a sentence a person reads. `accel explain` runs it over data read through the
//! standard Placement API, the console over the server's candidate index.
//!
//! A root *fits* exactly when the unlimited answer of [`super::search`] to the same
//! request has a candidate that allocates from, or maps a group to, a provider of its
//! tree.
//!
//! # Why it is shaped this way
//!
//! The verdict must agree with the search, so it is computed by the search's own
//! machinery rather than by a second model of Placement's rules: `fits` asks the
//! forced path and the backtracking solver existence questions ("is there a candidate
//! of this anchor, with this decision narrowed to these providers?") that stop at the
//! first candidate. Enumerating candidates would be combinatorial on big clouds; one
//! existence question per anchor (a few more where sharing providers are involved) is
//! what a limited search costs.
//!
//! Reasons are the other direction: *why not*, which the solver does not record. They
//! are found in three layers, each only reached when the one before found nothing,
//! so every non-fitting root gets at least one:
//!
//! 1. the root cannot anchor (`root_required`, `in_tree`): `reasons`;
//! 2. some decision (a granular group, or one class of the unsuffixed group) has no
//!    provider: each provider it may look at is re-checked rule by rule, closest
//!    providers (fewest failed rules) first, at most `reasons_per_group`: `reasons`;
//! 3. every decision has providers but no candidate exists: rules binding decisions
//!    together are switched off one at a time and the anchor asked again; the rules
//!    whose removal helps are the reasons, and summed capacity when none does:
//!    `combine`.
//!
//! A root whose anchor may use sharing providers of other trees can have candidates
//! that all come from them and still not fit (its own tree holds nothing); its reasons
//! are those of layers 2 and 3 with each decision in turn narrowed to its own tree.
//!
//! # Detail sentences
//!
//! `accel explain` and the console show [`Reason::detail`] verbatim; `explain_reasons`
//! pins each form. `{…}` are names and numbers; lists name at most three providers,
//! then "and N more"; groups are named by suffix, the unsuffixed one "(unsuffixed)".
//!
//! Provider-level (the reason's `provider` is the provider the sentence is about):
//!
//! * no_inventory: `has no {RC} inventory`
//! * capacity: `needs {n} {RC}, {free} free: total {t}, reserved {r}, used {u},
//!   allocation ratio {ratio}`
//! * max_unit / min_unit: `needs {n} {RC}, max_unit is {m}`, `needs {n} {RC}, min_unit
//!   is {m}`; step_size: `needs {n} {RC}, not a multiple of step_size {s}`
//! * required_trait: `lacks required trait {T}`; any_trait: `has none of {T1}, {T2}`;
//!   forbidden_trait: `has forbidden trait {T}`
//! * member_of: `is not in aggregate {uuid}`, `is in none of aggregates {u1}, {u2}`
//!   (for the unsuffixed group, whose root may stand in for it: followed by `, and root
//!   {root} does not meet member_of either`), `is in forbidden aggregate {uuid}`, `root
//!   {root} is in forbidden aggregate {uuid}`
//! * in_tree: `is outside the tree of {root} (in_tree)`
//!
//! Group-level (`provider` null, `group` set):
//!
//! * no_inventory: `no provider of tree {root} has {RC} inventory`, `no provider of
//!   tree {root} or of the {k} sharing providers it may use has {RC} inventory`, `no
//!   provider of tree {root} has {RC} inventory, only sharing providers of other trees`
//! * in_tree (`provider` is the named one): `in_tree{s}={name}: only the tree of {name}
//!   may serve group {s}`
//! * required_trait / any_trait, the unsuffixed group's traits carried together: `none
//!   of the providers that can serve the unsuffixed group ({providers}) has {T}`, `… has
//!   any of {T1}, {T2}`, `no choice of providers for the unsuffixed group ({providers})
//!   carries all of {T1}; {T2} together`
//! * required_trait, a resourceless group Placement matches nothing for: `group {s}
//!   asks for no resources, no required trait and no member_of: Placement matches no
//!   provider for it`
//!
//! Request-wide (`group` null):
//!
//! * root_required: `root lacks required trait {T} (root_required)`, `root has none of
//!   {T1}, {T2} (root_required)`; root_forbidden: `root has forbidden trait {T}
//!   (root_required=!{T})` (`provider` is the root)
//! * isolate: `group_policy=isolate needs a separate provider for each of groups 1, 2:
//!   group 1 can use {providers}; group 2 can use {providers}`
//! * same_subtree: `same_subtree=1,2: no choice puts these groups under one of their
//!   own providers: group 1 can use {providers}; group 2 can use {providers}`
//! * single_tree: `before microversion 1.29 a candidate takes resources from one
//!   provider per tree: {RC} (unsuffixed) can use {providers}; group 1 can use
//!   {providers}`
//! * capacity, groups together on one provider (`provider` set): `groups 1, 2 together
//!   need {n} {RC}, {free} free: total …` as above, or `groups 1, 2 together need {n}
//!   {RC}, max_unit is {m}`; on several: `groups 1, 2 together need {a} + {b} {RC},
//!   more than {p} ({f} free), {q} ({f} free, max_unit {m}) can hold`
//! * a request that matches nothing anywhere: min_unit `asks for {n} {RC}: amounts
//!   below 1 are never allowed` (group set), in_tree `in_tree names a provider that does
//!   not exist`, no_inventory `the request asks for no resources`, `the unsuffixed group
//!   asks for no resources: Placement finds no tree for it`

mod combine;
mod fits;
mod reasons;
mod words;

use super::anchor;
use super::plan::Plan;
use super::request::Request;
use super::snapshot::{ProviderId, RcId, Snapshot, TraitId};

/// Which rule kept a root (or one provider of its tree) from serving a request group.
/// The strings of [`ReasonCode::as_str`] are a public interface (`accel explain -f json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReasonCode {
    /// No provider of the tree (or its sharing providers) has inventory of the class.
    NoInventory,
    /// The class is there but not enough of it is free.
    Capacity,
    MaxUnit,
    MinUnit,
    StepSize,
    RequiredTrait,
    ForbiddenTrait,
    /// None of an any-of list (`required=in:A,B`) is present.
    AnyTrait,
    MemberOf,
    InTree,
    RootRequired,
    RootForbidden,
    SameSubtree,
    Isolate,
    /// Before 1.29 a candidate allocates from one provider of a tree only.
    SingleTree,
}

impl ReasonCode {
    /// The code as `accel explain -f json` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::NoInventory => "no_inventory",
            ReasonCode::Capacity => "capacity",
            ReasonCode::MaxUnit => "max_unit",
            ReasonCode::MinUnit => "min_unit",
            ReasonCode::StepSize => "step_size",
            ReasonCode::RequiredTrait => "required_trait",
            ReasonCode::ForbiddenTrait => "forbidden_trait",
            ReasonCode::AnyTrait => "any_trait",
            ReasonCode::MemberOf => "member_of",
            ReasonCode::InTree => "in_tree",
            ReasonCode::RootRequired => "root_required",
            ReasonCode::RootForbidden => "root_forbidden",
            ReasonCode::SameSubtree => "same_subtree",
            ReasonCode::Isolate => "isolate",
            ReasonCode::SingleTree => "single_tree",
        }
    }
}

/// One reason a root does not fit. Fields that do not apply are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    pub code: ReasonCode,
    /// The request group's suffix (`Some("")` for the unsuffixed group); `None` for
    /// request-wide rules (`root_required`, `root_forbidden`, ...).
    pub group: Option<String>,
    pub provider: Option<ProviderId>,
    pub resource_class: Option<RcId>,
    pub trait_id: Option<TraitId>,
    /// A sentence with the numbers, e.g. "needs 2 CUSTOM_ACCELERATOR_FPGA, 1 free:
    /// total 4, reserved 0, used 3, allocation ratio 1.0".
    pub detail: String,
}

/// The verdict on one root provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootExplanation {
    pub root: ProviderId,
    pub fits: bool,
    /// Empty when `fits`; otherwise at least one, at most
    /// [`ExplainOptions::reasons_per_group`] per request group plus request-wide ones.
    pub reasons: Vec<Reason>,
}

/// The verdicts, roots ascending by [`ProviderId`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Explanation {
    pub roots: Vec<RootExplanation>,
}

/// Names for the detail sentences: the snapshot holds interned ids only.
pub trait Names {
    fn provider(&self, id: ProviderId) -> String;
    fn resource_class(&self, rc: RcId) -> String;
    fn trait_name(&self, t: TraitId) -> String;
}

/// Bounds on the work of one explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainOptions {
    /// Stop collecting a root's reasons for one group after this many (0 counts as
    /// 1: a root that does not fit always gets a reason).
    pub reasons_per_group: usize,
    /// Explain only this root (`accel explain --root`).
    pub only_root: Option<ProviderId>,
}

impl Default for ExplainOptions {
    fn default() -> Self {
        ExplainOptions {
            reasons_per_group: 3,
            only_root: None,
        }
    }
}

/// Explain `request` against `snapshot`, root by root. `request.limit` and
/// `request.randomize` are ignored. `options.only_root` may name any provider of a
/// tree; the verdict is its root's (no verdict when it names no provider).
pub fn explain(
    snapshot: &Snapshot,
    request: &Request,
    names: &dyn Names,
    options: &ExplainOptions,
) -> Explanation {
    let only = match options.only_root {
        Some(p) if p.index() >= snapshot.providers().len() => return Explanation::default(),
        Some(p) => Some(snapshot.provider(p).root),
        None => None,
    };
    let roots: Vec<ProviderId> = match only {
        Some(r) => vec![r],
        None => snapshot.roots().to_vec(),
    };
    let Some(plan) = Plan::new(snapshot, request) else {
        let reasons = unplannable(snapshot, request, names);
        return Explanation {
            roots: roots
                .into_iter()
                .map(|root| RootExplanation {
                    root,
                    fits: false,
                    reasons: reasons.clone(),
                })
                .collect(),
        };
    };
    let fitting = fits::fitting(&plan, only);
    let ctx = Ctx {
        plan: &plan,
        request,
        names,
        per_group: options.reasons_per_group.max(1),
    };
    let roots = roots
        .into_iter()
        .map(|root| {
            let fits = fitting[root.index()];
            RootExplanation {
                root,
                fits,
                reasons: if fits {
                    Vec::new()
                } else {
                    ctx.bounded(ctx.root(root))
                },
            }
        })
        .collect();
    Explanation { roots }
}

/// What the reason finders share.
struct Ctx<'a> {
    plan: &'a Plan<'a>,
    request: &'a Request,
    names: &'a dyn Names,
    per_group: usize,
}

impl Ctx<'_> {
    /// Why no candidate touches the tree of `root` (which does not fit).
    fn root(&self, root: ProviderId) -> Vec<Reason> {
        let out = self.anchoring(root);
        if !out.is_empty() {
            return out;
        }
        let plan = self.plan;
        let all = anchor::decisions(plan, root, |_, _| true, false);
        let empty = without_options(&all);
        if !empty.is_empty() {
            return self.unservable(root, &all, &empty, false);
        }
        let snap = plan.snap;
        let own = |p: ProviderId| snap.provider(p).root == root;
        if all.iter().all(|(_, opts)| opts.iter().all(|&p| own(p))) {
            return self.combination(root, |_, _| true);
        }
        // Sharing providers of other trees are among the options, and a candidate
        // made of them only would not touch this tree: narrow each decision to the
        // root's own providers in turn.
        let own_lists = anchor::decisions(plan, root, |_, p| own(p), false);
        let empty = without_options(&own_lists);
        let mut out = self.unservable(root, &own_lists, &empty, true);
        for i in (0..own_lists.len()).filter(|i| !empty.contains(i)) {
            for r in self.combination(root, move |j, p| j != i || own(p)) {
                if !out.contains(&r) {
                    out.push(r);
                }
            }
        }
        out
    }
}

impl Ctx<'_> {
    /// At most `per_group` reasons per group, the first ones kept.
    fn bounded(&self, reasons: Vec<Reason>) -> Vec<Reason> {
        let mut seen: Vec<(Option<String>, usize)> = Vec::new();
        reasons
            .into_iter()
            .filter(|r| {
                if r.group.is_none() {
                    return true;
                }
                match seen.iter_mut().find(|(g, _)| *g == r.group) {
                    Some((_, n)) if *n >= self.per_group => false,
                    Some((_, n)) => {
                        *n += 1;
                        true
                    }
                    None => {
                        seen.push((r.group.clone(), 1));
                        true
                    }
                }
            })
            .collect()
    }
}

fn without_options(lists: &[(anchor::Var, Vec<ProviderId>)]) -> Vec<usize> {
    (0..lists.len())
        .filter(|&i| lists[i].1.is_empty())
        .collect()
}

/// Reasons a request matches nothing whatever the providers ([`Plan::new`] refuses
/// it): the same for every root.
fn unplannable(snapshot: &Snapshot, request: &Request, names: &dyn Names) -> Vec<Reason> {
    let mut out = Vec::new();
    let reason = |code, group: Option<&str>, rc, detail| Reason {
        code,
        group: group.map(str::to_owned),
        provider: None,
        resource_class: rc,
        trait_id: None,
        detail,
    };
    if request.groups.is_empty() {
        out.push(reason(
            ReasonCode::NoInventory,
            None,
            None,
            "the request asks for no resources".to_owned(),
        ));
    }
    for g in &request.groups {
        let group = Some(g.suffix.as_str());
        if !g.is_granular() && g.resources.is_empty() {
            out.push(reason(
                ReasonCode::NoInventory,
                group,
                None,
                "the unsuffixed group asks for no resources: Placement finds no tree for it"
                    .to_owned(),
            ));
        }
        for &(rc, n) in g.resources.iter().filter(|r| r.1 < 1) {
            let detail = format!(
                "asks for {n} {}: amounts below 1 are never allowed",
                names.resource_class(rc)
            );
            out.push(reason(ReasonCode::MinUnit, group, Some(rc), detail));
        }
        if g.in_tree
            .is_some_and(|p| p.index() >= snapshot.providers().len())
        {
            out.push(reason(
                ReasonCode::InTree,
                group,
                None,
                "in_tree names a provider that does not exist".to_owned(),
            ));
        }
    }
    out
}
