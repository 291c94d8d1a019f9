//! Which roots fit: existence questions answered with the search's own machinery.
//!
//! A root fits when some candidate of the unlimited answer allocates from, or maps a
//! group to, a provider of its tree. Such a candidate is anchored either at the root
//! itself and uses one of its own providers, or at another root and uses a sharing
//! provider of this tree. Both are existence questions that stop at the first
//! candidate, never an enumeration:
//!
//! 1. per anchor, the first candidate ([`forced`] when every decision has one option,
//!    otherwise the backtracking solver); every root it touches fits. When it uses only
//!    sharing providers of other trees, the anchor asks once per decision for a
//!    candidate whose provider for that decision is one of its own (a candidate touches
//!    the anchor's tree exactly when one of its decisions does): [`own_candidate`];
//! 2. per sharing provider of a tree that does not fit yet, per other anchor it serves,
//!    once per decision: a candidate with that provider for that decision.
//!
//! Every candidate found on the way marks all the trees it touches, so most questions
//! of step 2 are never asked. With `only` (explain one root) step 1 runs for that
//! root alone and step 2 for the sharing providers of its tree only.

use super::super::anchor;
use super::super::forced::{self, Forced};
use super::super::plan::Plan;
use super::super::request::Candidate;
use super::super::snapshot::ProviderId;
use super::super::solver::AnchorSearch;

/// The first candidate of `anchor` whose options pass `keep(decision, provider)`.
pub(super) fn first_filtered(
    plan: &Plan<'_>,
    anchor: ProviderId,
    keep: impl Fn(usize, ProviderId) -> bool,
) -> Option<Candidate> {
    let pb = anchor::build_filtered(plan, anchor, None, keep)?;
    AnchorSearch::new(plan, pb)
        .next_found()
        .map(|found| found.candidate)
}

/// The first candidate of `anchor`, as the search would produce it.
pub(super) fn first(plan: &Plan<'_>, anchor: ProviderId) -> Option<Candidate> {
    match forced::solve(plan, anchor) {
        Forced::One { found, .. } => Some(found.candidate),
        Forced::Nothing => None,
        Forced::Choice => first_filtered(plan, anchor, |_, _| true),
    }
}

/// How many decisions the search makes per anchor: one per granular group, one per
/// class of the unsuffixed group (the numbering of [`anchor::build_filtered`]).
pub(super) fn decision_count(plan: &Plan<'_>) -> usize {
    plan.groups
        .iter()
        .map(|g| if g.granular { 1 } else { g.resources.len() })
        .sum()
}

/// Whether `anchor` has a candidate (options passing `keep`) that uses a provider of
/// its own tree, given its first candidate `first`. Every candidate looked at goes to
/// `seen`. When `first` uses only sharing providers of other trees, each decision in
/// turn is narrowed to the own tree: a candidate touches the tree exactly when one of
/// its decisions does.
pub(super) fn own_candidate(
    plan: &Plan<'_>,
    anchor: ProviderId,
    keep: impl Fn(usize, ProviderId) -> bool + Copy,
    first: Option<Candidate>,
    mut seen: impl FnMut(&Candidate),
) -> bool {
    let snap = plan.snap;
    let own = |p: ProviderId| snap.provider(p).root == anchor;
    let Some(c) = first else { return false };
    seen(&c);
    if c.providers().any(own) {
        return true;
    }
    for i in 0..decision_count(plan) {
        if let Some(c) = first_filtered(plan, anchor, |j, p| keep(j, p) && (j != i || own(p))) {
            seen(&c);
            return true;
        }
    }
    false
}

/// Whether the sharing provider `s` of another tree is an option of decision `i` of
/// `anchor`: the check [`anchor::build_filtered`] would make, without building the
/// rest of the problem (most sharing providers serve one class of one group).
fn may_take(plan: &Plan<'_>, i: usize, s: ProviderId, anchor: ProviderId) -> bool {
    let snap = plan.snap;
    let mut next = 0;
    for g in &plan.groups {
        if g.granular {
            if next == i {
                return g.granular_ok(snap, s);
            }
            next += 1;
        } else {
            if let Some(&(_, rc, amount)) = i.checked_sub(next).and_then(|k| g.resources.get(k)) {
                return g.unsuffixed_ok(snap, s, rc, amount, anchor, false);
            }
            next += g.resources.len();
        }
    }
    false
}

/// Per provider index: whether the tree rooted there fits (meaningful for roots).
pub(super) fn fitting(plan: &Plan<'_>, only: Option<ProviderId>) -> Vec<bool> {
    let snap = plan.snap;
    let mut fits = vec![false; snap.providers().len()];
    let mark = |fits: &mut Vec<bool>, c: &Candidate| {
        for p in c.providers() {
            fits[snap.provider(p).root.index()] = true;
        }
    };
    let anchors = plan.candidate_anchors();
    let decisions = decision_count(plan);

    for &a in &anchors {
        if only.is_some_and(|r| r != a) || fits[a.index()] {
            continue;
        }
        own_candidate(plan, a, |_, _| true, first(plan, a), |c| mark(&mut fits, c));
    }

    let sharing = (0..snap.providers().len() as u32)
        .map(ProviderId)
        .filter(|&s| snap.is_sharing(s))
        .filter(|&s| only.is_none_or(|r| snap.provider(s).root == r));
    for s in sharing {
        let root = snap.provider(s).root;
        'anchors: for &a in snap.sharing_anchors(s) {
            if fits[root.index()] {
                break;
            }
            if a == root || anchors.binary_search(&a).is_err() {
                continue;
            }
            for i in (0..decisions).filter(|&i| may_take(plan, i, s, a)) {
                if let Some(c) = first_filtered(plan, a, |j, p| j != i || p == s) {
                    mark(&mut fits, &c);
                    break 'anchors;
                }
            }
        }
    }
    fits
}
