//! The allocation-candidate search behind `GET /allocation_candidates`.
//!
//! Given a [`Snapshot`] of every resource provider (inventories with current usage,
//! traits, aggregates, tree links) and a parsed [`Request`], [`search`] returns distinct
//! [`Candidate`]s with the same meaning as OpenStack Placement 16.0.0, plus the providers
//! to summarise. It is pure: no I/O, no clock, no global randomness.
//!
//! # Why not do what upstream does
//!
//! Upstream builds, per request group, every single-group allocation request, then for
//! each anchor root takes the Cartesian product of those lists and filters it
//! (`allocation_candidate._merge_candidates`). With `n` identical devices and `k`
//! single-unit groups that is `n^k` tuples to find `n!/(n-k)!` answers, and `limit` is
//! applied only after everything was generated. Here:
//!
//! 1. `plan` normalises the request and holds the per-provider predicates;
//! 2. anchors (roots) are visited in ascending id order, or seeded-random order;
//! 3. `forced` settles an anchor where every decision has a single allowed provider
//!    by checking that one assignment; otherwise `anchor` turns it into decisions
//!    (one per granular group, one per class of the unsuffixed group) with their
//!    allowed providers, and discards the anchor early when cheap bounds prove it
//!    infeasible;
//! 4. `solver` backtracks lazily over those decisions with capacity accounting per
//!    provider, prunes `isolate`, `same_subtree`, collective-trait and pre-1.29
//!    violations at the first decision that makes them certain, and skips
//!    interchangeable providers after one of them failed;
//! 5. the driver here stops as soon as `min(limit, cap)` distinct candidates exist.
//!
//! # Equality and duplicates
//!
//! Upstream keeps candidates in a set whose equality is "same allocations *and* same
//! mappings" (`AllocationRequest.__eq__`), so two candidates with identical allocations
//! but swapped granular groups are both returned (gabbit "group mapping with shared").
//! Only a candidate made entirely of sharing providers can come out of several anchors;
//! those are de-duplicated with a set, everything else is distinct by construction.
//!
//! # Order
//!
//! Upstream's order is "undefined but deterministic" and `limit` keeps its first N, so
//! only counts are comparable. Ours: anchors ascending, then depth-first within an
//! anchor ([`GenerationStrategy::DepthFirst`], upstream's default
//! `allocation_candidates_generation_strategy`), or one candidate per anchor per round
//! ([`GenerationStrategy::BreadthFirst`]). With [`Request::randomize`] the anchor order,
//! the option order of every decision and the final list are shuffled with that seed.
//! A limited result is then random (random anchors first, random choices within each)
//! but not the uniform `random.sample` of the full set upstream takes, which would
//! require enumerating the full set.

mod anchor;
pub mod explain;
mod forced;
mod plan;
mod request;
mod rng;
mod snapshot;
mod solver;

use std::collections::HashSet;

pub use plan::providers_matching;
pub use request::{Candidate, GroupPolicy, Outcome, Request, RequestGroup};
pub use snapshot::{Inventory, Provider, ProviderId, RcId, Snapshot, SnapshotError, TraitId};

use forced::Forced;
use plan::Plan;
use rng::Rng;
use solver::{AnchorSearch, Found};

/// How candidates of different anchors are interleaved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GenerationStrategy {
    /// Every candidate of one anchor before the next anchor.
    #[default]
    DepthFirst,
    /// Round-robin over anchors, so a capped result spans many roots.
    BreadthFirst,
}

/// Server-side knobs that are not part of the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchOptions {
    /// Never return more than this many candidates (`max_allocation_candidates`);
    /// `usize::MAX` for no cap.
    pub cap: usize,
    pub strategy: GenerationStrategy,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            cap: usize::MAX,
            strategy: GenerationStrategy::DepthFirst,
        }
    }
}

/// Run `request` against `snapshot`, returning at most `min(request.limit, cap)`
/// candidates, depth-first.
pub fn search(snapshot: &Snapshot, request: &Request, cap: usize) -> Outcome {
    search_with(
        snapshot,
        request,
        &SearchOptions {
            cap,
            strategy: GenerationStrategy::DepthFirst,
        },
    )
}

/// [`search`] with every server-side option.
pub fn search_with(snapshot: &Snapshot, request: &Request, options: &SearchOptions) -> Outcome {
    search_counted(snapshot, request, options).0
}

/// How much work one search did. Deterministic for a given snapshot, request and
/// options (no clock), so tests can bound the cost of a scenario without timing it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchWork {
    /// Anchor roots that passed the root-level filters (`root_required`, `in_tree`,
    /// providers matching every group) and were looked at: rejected by the static
    /// bounds, skipped as a repeat of an earlier all-sharing anchor, or searched.
    pub anchors_considered: usize,
    /// Anchors that passed the static bounds and reached the backtracking solver, or
    /// whose single forced assignment (every decision with one option) was valid.
    pub anchors_searched: usize,
    /// Options tried by the solver, over all anchors: the unit of backtracking work.
    pub option_checks: u64,
}

/// [`search_with`], also reporting the [`SearchWork`] it took.
pub fn search_counted(
    snapshot: &Snapshot,
    request: &Request,
    options: &SearchOptions,
) -> (Outcome, SearchWork) {
    let mut work = SearchWork::default();
    let limit = request.limit.unwrap_or(usize::MAX).min(options.cap);
    // Below 1.29 upstream summarises the providers that any candidate of the whole
    // answer uses, and only then keeps, of those, the ones in a tree a kept candidate
    // touches (`exclude_nested_providers`, then `limit_results`). A provider of a kept
    // tree that only a dropped candidate uses is still summarised, so the whole answer
    // (up to the cap) is needed; nested-aware requests summarise whole trees and stop
    // at the limit.
    let whole_answer = !request.nested && limit < options.cap;
    let want = if whole_answer { options.cap } else { limit };
    if want == 0 {
        return (Outcome::default(), work);
    }
    let Some(plan) = Plan::new(snapshot, request) else {
        return (Outcome::default(), work);
    };
    let mut rng = request.randomize.map(Rng::new);
    let mut anchors = plan.candidate_anchors();
    if let Some(rng) = rng.as_mut() {
        rng.shuffle(&mut anchors);
    }

    let mut sink = Sink {
        want,
        out: Vec::new(),
        shared_seen: HashSet::new(),
    };
    let mut signatures: HashSet<Vec<Vec<ProviderId>>> = HashSet::new();
    let mut considered = 0usize;
    let mut problems = anchors.iter().filter_map(|&a| {
        considered += 1;
        match forced::solve(&plan, a) {
            Forced::One { found, checks } => return Some(Next::Forced(found, checks)),
            Forced::Nothing => return None,
            Forced::Choice => {}
        }
        let pb = anchor::build(&plan, a, rng.as_mut())?;
        signature_fresh(&mut signatures, &pb).then(|| Next::Search(Box::new(pb)))
    });
    match options.strategy {
        GenerationStrategy::DepthFirst => {
            'anchors: for next in problems.by_ref() {
                work.anchors_searched += 1;
                let pb = match next {
                    Next::Forced(found, checks) => {
                        work.option_checks += checks;
                        if sink.take(found) {
                            break 'anchors;
                        }
                        continue;
                    }
                    Next::Search(pb) => pb,
                };
                let mut search = AnchorSearch::new(&plan, *pb);
                while let Some(found) = search.next_found() {
                    if sink.take(found) {
                        work.option_checks += search.steps();
                        break 'anchors;
                    }
                }
                work.option_checks += search.steps();
            }
        }
        GenerationStrategy::BreadthFirst => {
            // Round one builds anchors lazily; later rounds revisit the live ones.
            let mut live: Vec<AnchorSearch<'_>> = Vec::new();
            let mut full = false;
            for next in problems.by_ref() {
                work.anchors_searched += 1;
                match next {
                    Next::Forced(found, checks) => {
                        work.option_checks += checks;
                        full = sink.take(found);
                    }
                    Next::Search(pb) => {
                        let mut search = AnchorSearch::new(&plan, *pb);
                        if let Some(found) = search.next_found() {
                            full = sink.take(found);
                            live.push(search);
                        } else {
                            work.option_checks += search.steps();
                        }
                    }
                }
                if full {
                    break;
                }
            }
            while !full && !live.is_empty() {
                live.retain_mut(|search| {
                    if full {
                        return true;
                    }
                    match search.next_found() {
                        Some(found) => {
                            full = sink.take(found);
                            true
                        }
                        None => {
                            work.option_checks += search.steps();
                            false
                        }
                    }
                });
            }
            work.option_checks += live.iter().map(AnchorSearch::steps).sum::<u64>();
        }
    }
    drop(problems);
    work.anchors_considered = considered;

    let mut candidates = sink.out;
    if let Some(rng) = rng.as_mut() {
        rng.shuffle(&mut candidates);
    }
    let mut summary_providers = summary_providers(snapshot, &candidates, request.nested);
    if whole_answer && candidates.len() > limit {
        candidates.truncate(limit);
        let kept_roots: HashSet<ProviderId> = candidates
            .iter()
            .flat_map(|c| c.allocations.iter().map(|a| snapshot.provider(a.0).root))
            .collect();
        summary_providers.retain(|&p| kept_roots.contains(&snapshot.provider(p).root));
    }
    let outcome = Outcome {
        candidates,
        summary_providers,
    };
    (outcome, work)
}

/// What an anchor that passed the first checks needs: nothing more (its only
/// candidate, and the decisions placed), or a search.
enum Next {
    Forced(Found, u64),
    Search(Box<anchor::Problem>),
}

/// Collects distinct candidates up to `want`.
struct Sink {
    want: usize,
    out: Vec<Candidate>,
    /// Candidates made only of sharing providers, which several anchors can produce.
    shared_seen: HashSet<Candidate>,
}

impl Sink {
    /// Keep `found` unless it is a duplicate; `true` once `want` candidates are held.
    fn take(&mut self, found: Found) -> bool {
        if !found.shared_only || self.shared_seen.insert(found.candidate.clone()) {
            self.out.push(found.candidate);
        }
        self.out.len() >= self.want
    }
}

/// An anchor whose options all come from other trees yields exactly the candidates of
/// any earlier anchor with the same option lists, so it can be skipped.
fn signature_fresh(signatures: &mut HashSet<Vec<Vec<ProviderId>>>, pb: &anchor::Problem) -> bool {
    match &pb.foreign_signature {
        Some(sig) => signatures.insert(sig.clone()),
        None => true,
    }
}

/// Upstream lists every provider of every tree holding an allocation (story 2005859);
/// below 1.29 `exclude_nested_providers` keeps only the allocated providers.
fn summary_providers(
    snapshot: &Snapshot,
    candidates: &[Candidate],
    nested: bool,
) -> Vec<ProviderId> {
    let mut ids: Vec<ProviderId> = candidates
        .iter()
        .flat_map(|c| c.allocations.iter().map(|a| a.0))
        .collect();
    if nested {
        let mut roots: Vec<ProviderId> = ids.iter().map(|&p| snapshot.provider(p).root).collect();
        roots.sort_unstable();
        roots.dedup();
        ids = roots
            .iter()
            .flat_map(|&r| snapshot.tree(r).iter().copied())
            .collect();
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}
