//! Lazy backtracking over the decisions of one anchor.
//!
//! [`AnchorSearch::next_found`] resumes a depth-first search with an explicit stack, so
//! candidates come out one at a time: the caller stops at `limit`, or interleaves
//! several anchors (breadth-first), without ever materialising a product.
//!
//! State per assignment prefix, kept incrementally and undone on backtrack:
//!
//! * the amount placed per (provider, class): a choice is rejected as soon as the sum
//!   would exceed `capacity - used` or `max_unit` (upstream `exceeds_capacity`, which
//!   checks only the consolidated sum against those two);
//! * how many granular decisions sit on each provider (`isolate`);
//! * per root, which single provider allocates from it (pre-1.29 rule);
//! * per `same_subtree` entry, the lowest common ancestor of the providers placed so far.
//!   The entry can still succeed only if that ancestor is one of them, or some pending
//!   decision of the entry may pick it or one of its ancestors; with nothing pending, it
//!   must be one of them (upstream `_check_same_subtree`);
//! * when the last class of an unsuffixed group is placed, its required traits must be
//!   carried collectively by the chosen providers;
//! * after each placement, the providers that may still supply a class must have room
//!   for everything the later decisions ask of it (whole multiples of the request size
//!   when the outstanding requests are all the same size).
//!
//! Symmetry: each stack frame remembers the equivalence classes of untouched options
//! whose subtree yielded no complete assignment; other untouched members of those
//! classes are skipped, since swapping two interchangeable providers maps completions to
//! completions. This turns "n identical devices, n+1 requests" from n! work into n² option
//! checks.
//!
//! Invariant: distinct complete assignments of one anchor give distinct candidates
//! (the mappings fix every granular provider; the unsuffixed group takes each class
//! whole, so the remaining amounts fix its providers).

use super::anchor::Problem;
use super::plan::Plan;
use super::request::Candidate;
use super::snapshot::ProviderId;

#[derive(Debug, Default, Clone)]
struct Frame {
    next: usize,
    assigned: bool,
    was_untouched: bool,
    solutions_before: u64,
    failed_classes: Vec<u32>,
}

/// The resumable search of one anchor.
#[derive(Debug)]
pub(crate) struct AnchorSearch<'p> {
    plan: &'p Plan<'p>,
    pb: Problem,
    nrc: usize,
    placed: Vec<i64>,
    touched: Vec<u32>,
    granular_on: Vec<u32>,
    root_owner: Vec<(u32, u32)>,
    lca: Vec<Vec<Option<ProviderId>>>,
    choice: Vec<u32>,
    frames: Vec<Frame>,
    depth: usize,
    solutions: u64,
    /// Options tried so far, reported as [`super::SearchWork::option_checks`].
    steps: u64,
    done: bool,
}

/// A complete assignment turned into a candidate.
pub(crate) struct Found {
    pub candidate: Candidate,
    /// Every provider involved carries `MISC_SHARES_VIA_AGGREGATE`, so the same
    /// candidate may also come out of another anchor.
    pub shared_only: bool,
}

impl<'p> AnchorSearch<'p> {
    pub fn new(plan: &'p Plan<'p>, pb: Problem) -> Self {
        let nrc = plan.rcs.len();
        let n = pb.locals.len();
        let nv = pb.vars.len();
        AnchorSearch {
            plan,
            nrc,
            placed: vec![0; n * nrc],
            touched: vec![0; n],
            granular_on: vec![0; n],
            root_owner: vec![(0, 0); pb.n_roots],
            lca: vec![Vec::new(); pb.subtree_sets.len()],
            choice: vec![0; nv],
            frames: vec![Frame::default(); nv],
            depth: 0,
            solutions: 0,
            steps: 0,
            done: nv == 0,
            pb,
        }
    }

    /// Options tried so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The next candidate of this anchor, or `None` once exhausted.
    pub fn next_found(&mut self) -> Option<Found> {
        let nv = self.pb.vars.len();
        loop {
            if self.done {
                return None;
            }
            if self.depth == nv {
                self.solutions += 1;
                self.depth -= 1;
                return Some(self.emit());
            }
            let d = self.depth;
            if self.frames[d].assigned {
                let p = self.choice[d];
                self.unassign(d, p);
                let frame = &mut self.frames[d];
                frame.assigned = false;
                if frame.was_untouched && self.solutions == frame.solutions_before {
                    frame.failed_classes.push(self.pb.class[p as usize]);
                }
            }
            let mut found = None;
            while self.frames[d].next < self.pb.vars[d].options.len() {
                let p = self.pb.vars[d].options[self.frames[d].next];
                self.frames[d].next += 1;
                self.steps += 1;
                let untouched = self.touched[p as usize] == 0;
                let class = self.pb.class[p as usize];
                if untouched && self.frames[d].failed_classes.contains(&class) {
                    continue;
                }
                if self.try_assign(d, p) {
                    found = Some((p, untouched));
                    break;
                }
                if untouched {
                    self.frames[d].failed_classes.push(class);
                }
            }
            match found {
                Some((p, untouched)) => {
                    self.choice[d] = p;
                    let frame = &mut self.frames[d];
                    frame.assigned = true;
                    frame.was_untouched = untouched;
                    frame.solutions_before = self.solutions;
                    self.depth += 1;
                    if self.depth < nv {
                        let next = &mut self.frames[self.depth];
                        next.next = 0;
                        next.assigned = false;
                        next.failed_classes.clear();
                    }
                }
                None if d == 0 => self.done = true,
                None => self.depth -= 1,
            }
        }
    }

    fn try_assign(&mut self, d: usize, p: u32) -> bool {
        let var = &self.pb.vars[d];
        let li = p as usize;
        for &(slot, amount) in &var.amounts {
            let i = li * self.nrc + slot;
            let total = self.placed[i].saturating_add(amount);
            if total > self.pb.free[i] || total > self.pb.max_unit[i] {
                return false;
            }
        }
        if self.plan.isolate && var.granular && self.granular_on[li] > 0 {
            return false;
        }
        let holds_resources = !var.amounts.is_empty();
        if !self.plan.nested && holds_resources {
            let (owner, count) = self.root_owner[self.pb.root_slot[li] as usize];
            if count > 0 && owner != p {
                return false;
            }
        }
        self.apply(d, p);
        if self.subtrees_ok(d) && self.traits_ok(d) && self.supply_ok(d) {
            true
        } else {
            self.unassign(d, p);
            false
        }
    }

    fn apply(&mut self, d: usize, p: u32) {
        let li = p as usize;
        self.choice[d] = p;
        let var = &self.pb.vars[d];
        for &(slot, amount) in &var.amounts {
            self.placed[li * self.nrc + slot] += amount;
        }
        self.touched[li] += 1;
        if var.granular {
            self.granular_on[li] += 1;
        }
        if !self.plan.nested && !var.amounts.is_empty() {
            let owner = &mut self.root_owner[self.pb.root_slot[li] as usize];
            *owner = (p, owner.1 + 1);
        }
        let id = self.pb.locals[li];
        for &si in &self.pb.subtree_at[d] {
            let next = match self.lca[si].last() {
                None => Some(id),
                Some(None) => None,
                Some(&Some(prev)) => lowest_common_ancestor(self.plan, prev, id),
            };
            self.lca[si].push(next);
        }
    }

    fn unassign(&mut self, d: usize, p: u32) {
        let li = p as usize;
        let var = &self.pb.vars[d];
        for &(slot, amount) in &var.amounts {
            self.placed[li * self.nrc + slot] -= amount;
        }
        self.touched[li] -= 1;
        if var.granular {
            self.granular_on[li] -= 1;
        }
        if !self.plan.nested && !var.amounts.is_empty() {
            self.root_owner[self.pb.root_slot[li] as usize].1 -= 1;
        }
        for &si in &self.pb.subtree_at[d] {
            self.lca[si].pop();
        }
    }

    /// Every `same_subtree` entry touched at position `d` can still be satisfied.
    fn subtrees_ok(&self, d: usize) -> bool {
        let snap = self.plan.snap;
        self.pb.subtree_at[d].iter().all(|&si| {
            let Some(&Some(top)) = self.lca[si].last() else {
                return false; // providers in different trees
            };
            let set = &self.pb.subtree_sets[si];
            let split = set.partition_point(|&pos| pos <= d);
            let (placed, pending) = set.split_at(split);
            if placed
                .iter()
                .any(|&pos| self.pb.locals[self.choice[pos] as usize] == top)
            {
                return true;
            }
            pending.iter().any(|&pos| {
                self.pb.vars[pos]
                    .options
                    .iter()
                    .any(|&o| snap.is_ancestor_or_self(self.pb.locals[o as usize], top))
            })
        })
    }

    /// After placing decision `d`, the providers that may still take each of its
    /// classes can hold what the later decisions ask for. A provider's room is
    /// `min(free, max_unit) - placed`; when every outstanding request has the same size
    /// `a`, only whole multiples of `a` of that room are usable. Symmetric in
    /// interchangeable providers, so it is compatible with the failed-class memo.
    fn supply_ok(&self, d: usize) -> bool {
        let nrc = self.nrc;
        self.pb.vars[d].amounts.iter().all(|&(slot, _)| {
            let pending = self.pb.pending[(d + 1) * nrc + slot];
            if pending.count == 0 {
                return true;
            }
            let mut supply = 0i64;
            for &li in &self.pb.slot_suppliers[slot] {
                let i = li as usize * nrc + slot;
                let room = self.pb.free[i].min(self.pb.max_unit[i]) - self.placed[i];
                if room > 0 {
                    supply = supply.saturating_add(match pending.uniform {
                        Some(a) if a > 0 => room - room % a,
                        _ => room,
                    });
                    if supply >= pending.total {
                        return true;
                    }
                }
            }
            false
        })
    }

    /// Collective required traits of every unsuffixed group completed at `d`.
    fn traits_ok(&self, d: usize) -> bool {
        self.pb.traits_at[d].iter().all(|&gi| {
            let chosen = self.pb.group_vars[gi]
                .iter()
                .map(|&pos| self.pb.locals[self.choice[pos] as usize]);
            self.plan.groups[gi].collectively_ok(self.plan.snap, chosen)
        })
    }

    fn emit(&self) -> Found {
        let mut allocations: Vec<(ProviderId, u32, i64)> = Vec::new();
        let mut shared_only = true;
        for (pos, var) in self.pb.vars.iter().enumerate() {
            let li = self.choice[pos] as usize;
            shared_only &= self.pb.sharing[li];
            let id = self.pb.locals[li];
            for &(slot, amount) in &var.amounts {
                allocations.push((id, self.plan.rcs[slot], amount));
            }
        }
        let merged = consolidate(allocations);
        let mappings = self
            .plan
            .mapping_order
            .iter()
            .map(|&gi| {
                let mut ids: Vec<ProviderId> = self.pb.group_vars[gi]
                    .iter()
                    .map(|&pos| self.pb.locals[self.choice[pos] as usize])
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                (self.plan.groups[gi].suffix.to_owned(), ids)
            })
            .collect();
        Found {
            candidate: Candidate {
                allocations: merged,
                mappings,
            },
            shared_only,
        }
    }
}

/// Sorts `(provider, class, amount)` triples and sums those of one provider and class.
pub(crate) fn consolidate(
    mut allocations: Vec<(ProviderId, u32, i64)>,
) -> Vec<(ProviderId, u32, i64)> {
    allocations.sort_unstable();
    let mut merged: Vec<(ProviderId, u32, i64)> = Vec::with_capacity(allocations.len());
    for a in allocations {
        match merged.last_mut() {
            Some(last) if last.0 == a.0 && last.1 == a.1 => last.2 += a.2,
            _ => merged.push(a),
        }
    }
    merged
}

pub(crate) fn lowest_common_ancestor(
    plan: &Plan<'_>,
    a: ProviderId,
    b: ProviderId,
) -> Option<ProviderId> {
    let snap = plan.snap;
    if snap.provider(a).root != snap.provider(b).root {
        return None;
    }
    let (mut a, mut b) = (a, b);
    while snap.depth(a) > snap.depth(b) {
        a = snap.provider(a).parent?;
    }
    while snap.depth(b) > snap.depth(a) {
        b = snap.provider(b).parent?;
    }
    while a != b {
        a = snap.provider(a).parent?;
        b = snap.provider(b).parent?;
    }
    Some(a)
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::super::anchor;
    use super::*;
    use crate::candidates::{GroupPolicy, Inventory, Provider, Request, RequestGroup, Snapshot};
    use crate::capacity::Limits;

    /// A compute (id 0) with `children` identical devices of `capacity` units of class 1,
    /// and one granular group per amount.
    fn wide(children: u32, amounts: &[i64], capacity: i64) -> (Snapshot, Request) {
        let node = |parent: Option<u32>, total: i64| Provider {
            uuid: Uuid::new_v4(),
            parent: parent.map(ProviderId),
            root: ProviderId(0),
            inventories: vec![Inventory {
                rc: 1,
                limits: Limits::whole(total),
                used: 0,
            }],
            traits: vec![],
            aggregates: vec![],
        };
        let mut ps = vec![node(None, 0)];
        ps.extend((0..children).map(|_| node(Some(0), capacity)));
        let groups = amounts
            .iter()
            .enumerate()
            .map(|(i, &n)| RequestGroup {
                suffix: format!("{i}"),
                resources: vec![(1, n)],
                ..RequestGroup::default()
            })
            .collect();
        let req = Request {
            groups,
            group_policy: GroupPolicy::None,
            ..Request::default()
        };
        (Snapshot::new(ps, None).unwrap(), req)
    }

    #[test]
    fn interchangeable_devices_fail_in_polynomial_steps() {
        // 65 requests of 3 and one of 2 on 64 devices of 5: every static bound passes
        // (mixed sizes), only the search can tell, and symmetry keeps it short.
        let amounts: Vec<i64> = std::iter::repeat_n(3, 65).chain([2]).collect();
        let (snap, req) = wide(64, &amounts, 5);
        let plan = Plan::new(&snap, &req).unwrap();
        let pb = anchor::build(&plan, ProviderId(0), None).expect("passes the static bounds");
        let mut search = AnchorSearch::new(&plan, pb);
        assert!(search.next_found().is_none());
        assert!(search.steps < 20_000, "{} steps", search.steps);
    }

    #[test]
    fn every_solution_is_found_once() {
        // 4 devices of 1 unit, 3 groups of 1: 4 * 3 * 2 ordered choices.
        let (snap, req) = wide(4, &[1, 1, 1], 1);
        let plan = Plan::new(&snap, &req).unwrap();
        let pb = anchor::build(&plan, ProviderId(0), None).unwrap();
        let mut search = AnchorSearch::new(&plan, pb);
        let mut seen = std::collections::HashSet::new();
        while let Some(found) = search.next_found() {
            assert!(seen.insert(found.candidate));
        }
        assert_eq!(seen.len(), 24);
    }

    #[test]
    fn lowest_common_ancestor_walks_to_the_meeting_point() {
        let (snap, req) = wide(2, &[1], 1);
        let plan = Plan::new(&snap, &req).unwrap();
        let lca = |a, b| lowest_common_ancestor(&plan, ProviderId(a), ProviderId(b));
        assert_eq!(lca(1, 2), Some(ProviderId(0)));
        assert_eq!(lca(1, 1), Some(ProviderId(1)));
        assert_eq!(lca(0, 2), Some(ProviderId(0)));
    }
}
