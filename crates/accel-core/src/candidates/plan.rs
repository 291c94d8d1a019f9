//! The request, normalised once per search, and the per-provider predicates that decide
//! whether a provider may serve (part of) a group.
//!
//! The predicates follow upstream Placement 16.0.0 exactly:
//!
//! * **Capacity** of one amount on one provider (`research_context._capacity_check_clause`):
//!   `min_unit <= amount <= max_unit`, `amount % step_size == 0` and
//!   `used + amount <= (total - reserved) * allocation_ratio` (see [`crate::capacity`]).
//! * **Granular group** (`research_context.get_provider_ids_matching`): one provider has
//!   every requested class, every any-of list of `required` directly, none of
//!   `forbidden`, is directly in every any-of list of `member_of`, in none of the
//!   forbidden aggregates and, for a group with resources, in the `in_tree` tree.
//!   A *resourceless* group ignores `in_tree`, and one with neither a required trait nor
//!   a `member_of` matches nothing: upstream filters the provider list by an empty
//!   "matching" set in that case.
//! * **Unsuffixed group, one class** (`research_context.get_trees_matching_all` and
//!   `rp_candidates.RPCandidateList`): a provider of the anchor's own tree, or a sharing
//!   provider anchored there when the group has no `in_tree`. With `member_of` the
//!   provider *or the anchor root* must match (a root's aggregates span its tree) and a
//!   sharing provider must match itself; with forbidden aggregates neither the provider
//!   nor the anchor may be in one; no contributing provider may carry a forbidden trait
//!   (`allocation_candidate._check_traits_for_alloc_request`). Required traits are
//!   checked collectively later, over the providers actually chosen.
//! * **Anchor** (`research_context._get_roots_with_traits`): the root must carry
//!   `root_required` and none of `root_forbidden`.

use uuid::Uuid;

use super::request::{GroupPolicy, Request, RequestGroup};
use super::snapshot::{Provider, ProviderId, RcId, Snapshot, TraitId};

/// Whether `sorted` meets every any-of list.
pub(crate) fn meets_all<T: Ord>(sorted: &[T], lists: &[Vec<T>]) -> bool {
    lists
        .iter()
        .all(|any| any.iter().any(|x| sorted.binary_search(x).is_ok()))
}

/// Whether `sorted` contains any of `items`.
pub(crate) fn has_any<T: Ord>(sorted: &[T], items: &[T]) -> bool {
    items.iter().any(|x| sorted.binary_search(x).is_ok())
}

/// One request group after normalisation.
#[derive(Debug, Clone)]
pub(crate) struct Group<'r> {
    pub suffix: &'r str,
    pub granular: bool,
    /// `(request-wide class slot, class, amount)`, one per class.
    pub resources: Vec<(usize, RcId, i64)>,
    pub required: &'r [Vec<TraitId>],
    pub forbidden: &'r [TraitId],
    pub member_of: &'r [Vec<Uuid>],
    pub forbidden_aggs: &'r [Uuid],
    pub in_tree_root: Option<ProviderId>,
}

impl Group<'_> {
    fn traits_ok(&self, p: &Provider) -> bool {
        meets_all(&p.traits, self.required) && !has_any(&p.traits, self.forbidden)
    }

    fn in_member_of(&self, p: &Provider) -> bool {
        meets_all(&p.aggregates, self.member_of)
    }

    fn in_forbidden_agg(&self, p: &Provider) -> bool {
        has_any(&p.aggregates, self.forbidden_aggs)
    }

    fn fits(snap: &Snapshot, id: ProviderId, rc: RcId, amount: i64) -> bool {
        snap.inventory(id, rc).is_some_and(|inv| inv.fits(amount))
    }

    /// The provider alone satisfies every filter and every amount of the group.
    fn single_provider_ok(&self, snap: &Snapshot, id: ProviderId) -> bool {
        let p = snap.provider(id);
        self.traits_ok(p)
            && self.in_member_of(p)
            && !self.in_forbidden_agg(p)
            && self.in_tree_root.is_none_or(|root| p.root == root)
            && self
                .resources
                .iter()
                .all(|&(_, rc, amount)| Self::fits(snap, id, rc, amount))
    }

    /// Granular-group semantics inside `GET /allocation_candidates`.
    pub fn granular_ok(&self, snap: &Snapshot, id: ProviderId) -> bool {
        if !self.resources.is_empty() {
            return self.single_provider_ok(snap, id);
        }
        if self.required.is_empty() && self.member_of.is_empty() {
            return false;
        }
        let p = snap.provider(id);
        self.traits_ok(p) && self.in_member_of(p) && !self.in_forbidden_agg(p)
    }

    /// Whether `id` may supply `amount` of `rc` for this unsuffixed group in a candidate
    /// anchored at `anchor`. `own_tree` says whether `id` is in the anchor's tree;
    /// otherwise it is a sharing provider that lists `anchor` among its anchors.
    pub fn unsuffixed_ok(
        &self,
        snap: &Snapshot,
        id: ProviderId,
        rc: RcId,
        amount: i64,
        anchor: ProviderId,
        own_tree: bool,
    ) -> bool {
        let p = snap.provider(id);
        let root = snap.provider(anchor);
        if !Self::fits(snap, id, rc, amount) || has_any(&p.traits, self.forbidden) {
            return false;
        }
        if self.in_forbidden_agg(p) || self.in_forbidden_agg(root) {
            return false;
        }
        if own_tree {
            self.in_tree_root.is_none_or(|r| r == anchor)
                && (self.member_of.is_empty() || self.in_member_of(p) || self.in_member_of(root))
        } else {
            self.in_tree_root.is_none() && (self.member_of.is_empty() || self.in_member_of(p))
        }
    }

    /// Whether the chosen providers together carry every any-of list of `required`.
    pub fn collectively_ok(
        &self,
        snap: &Snapshot,
        chosen: impl Iterator<Item = ProviderId> + Clone,
    ) -> bool {
        self.required.iter().all(|any| {
            chosen
                .clone()
                .any(|id| has_any(&snap.provider(id).traits, any))
        })
    }
}

/// The whole request, normalised.
#[derive(Debug, Clone)]
pub(crate) struct Plan<'r> {
    pub snap: &'r Snapshot,
    pub groups: Vec<Group<'r>>,
    /// Request-wide distinct classes; `Group::resources` refer to these slots.
    pub rcs: Vec<RcId>,
    pub isolate: bool,
    pub nested: bool,
    /// Group indexes per `same_subtree` entry, distinct and ascending.
    pub same_subtree: Vec<Vec<usize>>,
    pub root_required: &'r [Vec<TraitId>],
    pub root_forbidden: &'r [TraitId],
    /// Group indexes in the order their mappings are reported (by suffix).
    pub mapping_order: Vec<usize>,
}

impl<'r> Plan<'r> {
    /// `None` when the request cannot match anything whatever the providers: no groups,
    /// an unsuffixed group without resources (upstream finds no trees for it), an
    /// amount below 1 (upstream rejects it with a 400) or an `in_tree` outside the
    /// snapshot.
    pub fn new(snap: &'r Snapshot, request: &'r Request) -> Option<Self> {
        if request.groups.is_empty() {
            return None;
        }
        let mut rcs: Vec<RcId> = Vec::new();
        let mut groups = Vec::with_capacity(request.groups.len());
        for g in &request.groups {
            groups.push(normalise(snap, g, &mut rcs)?);
        }
        let same_subtree = request
            .same_subtree
            .iter()
            .map(|suffixes| {
                let mut idx: Vec<usize> = suffixes
                    .iter()
                    .filter_map(|s| groups.iter().position(|g| g.suffix == s))
                    .collect();
                idx.sort_unstable();
                idx.dedup();
                idx
            })
            .filter(|idx| !idx.is_empty())
            .collect();
        let mut mapping_order: Vec<usize> = (0..groups.len()).collect();
        mapping_order.sort_by(|&a, &b| groups[a].suffix.cmp(groups[b].suffix).then(a.cmp(&b)));
        Some(Plan {
            snap,
            groups,
            rcs,
            isolate: request.group_policy == GroupPolicy::Isolate,
            nested: request.nested,
            same_subtree,
            root_required: &request.root_required,
            root_forbidden: &request.root_forbidden,
            mapping_order,
        })
    }

    /// Whether a root may anchor a candidate (`root_required`).
    pub fn anchor_ok(&self, root: ProviderId) -> bool {
        let traits = &self.snap.provider(root).traits;
        meets_all(traits, self.root_required) && !has_any(traits, self.root_forbidden)
    }

    /// Roots that may anchor a candidate, ascending. `in_tree` narrows them: an
    /// unsuffixed group to its tree's root, a granular group with resources to that root
    /// plus the anchors of the tree's matching sharing providers.
    pub fn candidate_anchors(&self) -> Vec<ProviderId> {
        let snap = self.snap;
        let mut restrict: Option<Vec<ProviderId>> = None;
        for g in &self.groups {
            let Some(root) = g.in_tree_root else { continue };
            if g.granular && g.resources.is_empty() {
                continue;
            }
            let mut set = vec![root];
            if g.granular {
                for &p in snap.tree(root) {
                    if snap.is_sharing(p) && g.granular_ok(snap, p) {
                        set.extend_from_slice(snap.sharing_anchors(p));
                    }
                }
                set.sort_unstable();
                set.dedup();
            }
            restrict = Some(match restrict {
                None => set,
                Some(prev) => prev
                    .into_iter()
                    .filter(|a| set.binary_search(a).is_ok())
                    .collect(),
            });
        }
        let base = restrict.unwrap_or_else(|| snap.roots().to_vec());
        base.into_iter().filter(|&a| self.anchor_ok(a)).collect()
    }
}

/// The root of the `in_tree` provider: `Err` when the id is outside the snapshot.
fn in_tree_root(snap: &Snapshot, in_tree: Option<ProviderId>) -> Result<Option<ProviderId>, ()> {
    match in_tree {
        None => Ok(None),
        Some(id) if id.index() < snap.providers().len() => Ok(Some(snap.provider(id).root)),
        Some(_) => Err(()),
    }
}

/// One entry per class, the last amount winning (upstream parses into a dict), in
/// first-seen order, each tagged with the slot `slot_of` assigns.
fn distinct_resources(
    resources: &[(RcId, i64)],
    mut slot_of: impl FnMut(RcId) -> usize,
) -> Vec<(usize, RcId, i64)> {
    let mut out: Vec<(usize, RcId, i64)> = Vec::new();
    for &(rc, amount) in resources {
        match out.iter_mut().find(|r| r.1 == rc) {
            Some(r) => r.2 = amount,
            None => out.push((slot_of(rc), rc, amount)),
        }
    }
    out
}

fn normalise<'r>(snap: &Snapshot, g: &'r RequestGroup, rcs: &mut Vec<RcId>) -> Option<Group<'r>> {
    let granular = g.is_granular();
    if (!granular && g.resources.is_empty()) || g.resources.iter().any(|r| r.1 < 1) {
        return None;
    }
    let in_tree_root = in_tree_root(snap, g.in_tree).ok()?;
    let resources =
        distinct_resources(&g.resources, |rc| match rcs.iter().position(|&r| r == rc) {
            Some(slot) => slot,
            None => {
                rcs.push(rc);
                rcs.len() - 1
            }
        });
    Some(Group {
        suffix: &g.suffix,
        granular,
        resources,
        required: &g.required,
        forbidden: &g.forbidden,
        member_of: &g.member_of,
        forbidden_aggs: &g.forbidden_aggregates,
        in_tree_root,
    })
}

/// Providers that individually satisfy `group`: the filter behind
/// `GET /resource_providers?resources=…&required=…&member_of=…&in_tree=…`
/// (upstream `resource_provider._get_all_by_filters_from_db`). Every amount must fit,
/// traits and aggregates are direct, `in_tree` restricts to that tree; with no
/// resources every provider passes the capacity part. The suffix is ignored. Ascending.
pub fn providers_matching(snap: &Snapshot, group: &RequestGroup) -> Vec<ProviderId> {
    let Ok(in_tree_root) = in_tree_root(snap, group.in_tree) else {
        return Vec::new();
    };
    let g = Group {
        suffix: &group.suffix,
        granular: true,
        resources: distinct_resources(&group.resources, |_| 0),
        required: &group.required,
        forbidden: &group.forbidden,
        member_of: &group.member_of,
        forbidden_aggs: &group.forbidden_aggregates,
        in_tree_root,
    };
    (0..snap.providers().len() as u32)
        .map(ProviderId)
        .filter(|&id| g.single_provider_ok(snap, id))
        .collect()
}
