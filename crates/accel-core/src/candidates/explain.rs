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
//! STATUS: interface fixed by the lead; the implementation below computes `fits` with a
//! whole search and gives no reasons yet (the explain-core branch replaces it).

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
    /// Stop collecting a root's reasons for one group after this many.
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

/// Explain `request` against `snapshot`, root by root. `request.limit` is ignored.
pub fn explain(
    snapshot: &Snapshot,
    request: &Request,
    _names: &dyn Names,
    options: &ExplainOptions,
) -> Explanation {
    let unlimited = Request {
        limit: None,
        ..request.clone()
    };
    let outcome = super::search(snapshot, &unlimited, usize::MAX);
    let mut fitting = std::collections::HashSet::new();
    for c in &outcome.candidates {
        for &(p, _, _) in &c.allocations {
            fitting.insert(snapshot.provider(p).root);
        }
        for (_, ps) in &c.mappings {
            for &p in ps {
                fitting.insert(snapshot.provider(p).root);
            }
        }
    }
    let roots = snapshot
        .roots()
        .iter()
        .copied()
        .filter(|r| options.only_root.is_none_or(|only| only == *r))
        .map(|root| RootExplanation {
            root,
            fits: fitting.contains(&root),
            reasons: Vec::new(),
        })
        .collect();
    Explanation { roots }
}
