//! What the caller asks for and what the search answers, in interned ids.
//!
//! These mirror the parsed query of `GET /allocation_candidates` (upstream
//! `placement.lib.RequestGroup` and `RequestWideParams`) after the server has validated
//! it and resolved names to ids: unknown resource classes, traits and suffixes, orphaned
//! parameters and microversion gating are the server's business. The engine still copes
//! with odd input without panicking (see the field docs for how).

use uuid::Uuid;

use super::snapshot::{ProviderId, RcId, TraitId};

/// One request group: the unsuffixed group (`suffix == ""`, resources may come from
/// several providers of one tree plus sharing providers) or a granular group (every
/// resource, trait and aggregate satisfied by a single provider).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestGroup {
    /// `""` for the unsuffixed group, otherwise the suffix as written (`"1"`, `"_NET"`).
    pub suffix: String,
    /// Requested amounts. A class listed twice keeps the last amount, as upstream's dict.
    /// Empty makes a granular group *resourceless* (microversion 1.36).
    pub resources: Vec<(RcId, i64)>,
    /// AND of any-of lists. An empty inner list can never be satisfied.
    pub required: Vec<Vec<TraitId>>,
    pub forbidden: Vec<TraitId>,
    /// AND of any-of lists of aggregates. An empty inner list can never be satisfied.
    pub member_of: Vec<Vec<Uuid>>,
    /// A provider in any of these is excluded.
    pub forbidden_aggregates: Vec<Uuid>,
    /// Restrict the group to the tree containing this provider (any member may be
    /// named). The server answers an unknown uuid with an empty result itself.
    pub in_tree: Option<ProviderId>,
}

impl RequestGroup {
    /// Whether this is a granular (suffixed, single-provider) group.
    pub fn is_granular(&self) -> bool {
        !self.suffix.is_empty()
    }
}

/// How granular groups may share providers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Groups may land on the same provider; amounts are summed and re-checked.
    #[default]
    None,
    /// Granular groups (resourceless ones included) land on pairwise distinct providers.
    Isolate,
}

/// A whole `GET /allocation_candidates` query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// At most one group per suffix (the parser merges repeated keys).
    pub groups: Vec<RequestGroup>,
    pub group_policy: GroupPolicy,
    /// Each entry lists suffixes whose providers must all lie under one of them. Unknown
    /// suffixes are ignored; duplicates are squashed.
    pub same_subtree: Vec<Vec<String>>,
    /// AND of any-of lists the anchor root must carry.
    pub root_required: Vec<Vec<TraitId>>,
    /// Traits the anchor root must not carry.
    pub root_forbidden: Vec<TraitId>,
    /// Return at most this many candidates.
    pub limit: Option<usize>,
    /// Microversion >= 1.29. Below it a candidate that allocates from more than one
    /// provider of a tree is dropped and summaries list only allocated providers.
    pub nested: bool,
    /// Seed for upstream's `randomize_allocation_candidates`; `None` keeps the
    /// deterministic order.
    pub randomize: Option<u64>,
}

impl Default for Request {
    /// No groups, policy `none`, latest-microversion semantics, no limit.
    fn default() -> Self {
        Request {
            groups: Vec::new(),
            group_policy: GroupPolicy::None,
            same_subtree: Vec::new(),
            root_required: Vec::new(),
            root_forbidden: Vec::new(),
            limit: None,
            nested: true,
            randomize: None,
        }
    }
}

/// One allocation candidate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Candidate {
    /// `(provider, class, amount)`, one entry per (provider, class) with the amounts of
    /// every group summed, sorted by provider then class.
    pub allocations: Vec<(ProviderId, RcId, i64)>,
    /// Suffix -> providers that satisfied that group (sorted, distinct), one entry per
    /// request group including resourceless ones, sorted by suffix.
    pub mappings: Vec<(String, Vec<ProviderId>)>,
}

impl Candidate {
    /// The providers named in [`Candidate::allocations`], ascending and distinct.
    pub fn allocated_providers(&self) -> Vec<ProviderId> {
        let mut ids: Vec<ProviderId> = self.allocations.iter().map(|a| a.0).collect();
        ids.dedup();
        ids
    }

    /// Every provider the candidate allocates from or maps a group to (resourceless
    /// groups included), with repeats: what makes a tree "in" the answer.
    pub fn providers(&self) -> impl Iterator<Item = ProviderId> + '_ {
        self.allocations
            .iter()
            .map(|a| a.0)
            .chain(self.mappings.iter().flat_map(|m| m.1.iter().copied()))
    }
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Distinct candidates (two candidates differ in allocations or in mappings).
    pub candidates: Vec<Candidate>,
    /// Providers to summarise, ascending: with `nested`, every member of every tree
    /// that holds an allocation of a returned candidate; without, the providers that
    /// candidates of the unlimited answer allocate from, in the trees of the returned
    /// candidates (upstream filters the summaries of a limited answer by root).
    pub summary_providers: Vec<ProviderId>,
}
