//! The read-only world the search runs against: every resource provider with its
//! inventories (and current usage), traits and aggregates, plus the indexes the search
//! needs, built once by [`Snapshot::new`].
//!
//! Placement answers `GET /allocation_candidates` from whole provider trees and from
//! sharing providers (those with `MISC_SHARES_VIA_AGGREGATE`) linked to a tree through an
//! aggregate, so the indexes are:
//!
//! * the members of every tree, contiguous and in ascending [`ProviderId`] order;
//! * the depth of every provider and whether it has children (for `same_subtree` and for
//!   recognising interchangeable leaves);
//! * for every sharing provider its *anchors*: the roots of every tree that has any
//!   provider in an aggregate with it, its own root included (upstream
//!   `research_context.anchors_for_sharing_providers`), and the reverse map from an
//!   anchor root to the sharing providers it may borrow from.
//!
//! Invariants checked by [`Snapshot::new`]: parent and root ids are in range, a root is
//! its own root and has no parent, a provider's root is its parent's root, and parent
//! links are acyclic. Traits, aggregates and inventories are sorted so lookups are
//! binary searches.
//!
//! The providers live in copy-on-write [`Chunks`] and the indexes above in one shared
//! [`Shape`], so [`Snapshot::with_inventories`] (new inventories or usage on a few
//! providers, the change every claim and delete makes) costs what it changes, not a
//! rebuild of every provider and index.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use uuid::Uuid;

use crate::capacity::Limits;
use crate::chunks::Chunks;

/// Index of a provider in [`Snapshot::providers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderId(pub u32);

impl ProviderId {
    /// The position in [`Snapshot::providers`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A resource class, interned by the caller.
pub type RcId = u32;
/// A trait, interned by the caller.
pub type TraitId = u32;

/// One inventory record of a provider together with the amount currently allocated
/// against it.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    pub rc: RcId,
    /// Total, reserved, unit rules and ratio: the capacity arithmetic shared with claims.
    pub limits: Limits,
    /// Sum of all allocations of this class on this provider.
    pub used: i64,
}

impl Inventory {
    /// `int((total - reserved) * allocation_ratio)`, as reported in provider summaries.
    pub fn capacity(&self) -> i64 {
        self.limits.capacity()
    }

    /// Whether one more allocation of `amount` fits (min/max/step and capacity).
    pub fn fits(&self, amount: i64) -> bool {
        self.limits.fits(self.used, amount)
    }
}

/// A resource provider as the search sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    pub uuid: Uuid,
    pub parent: Option<ProviderId>,
    /// The root of this provider's tree; a root names itself.
    pub root: ProviderId,
    pub inventories: Vec<Inventory>,
    /// Sorted by [`Snapshot::new`].
    pub traits: Vec<TraitId>,
    /// Sorted by [`Snapshot::new`].
    pub aggregates: Vec<Uuid>,
}

/// Why a list of providers cannot form a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("more than {} providers", u32::MAX - 1)]
    TooManyProviders,
    #[error("provider #{provider} names parent #{parent}, which is not in the snapshot")]
    ParentOutOfRange { provider: u32, parent: u32 },
    #[error("provider #{provider} names root #{root}, which is not in the snapshot")]
    RootOutOfRange { provider: u32, root: u32 },
    #[error("provider #{provider} names root #{root}, which is not a root of itself")]
    RootNotARoot { provider: u32, root: u32 },
    #[error("provider #{provider} has root #{root} but its parent's root is #{parent_root}")]
    RootMismatch {
        provider: u32,
        root: u32,
        parent_root: u32,
    },
    #[error("provider #{provider} is its own ancestor")]
    Cycle { provider: u32 },
}

/// All providers plus the indexes the candidate search needs. Immutable once built;
/// a clone shares everything.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    providers: Chunks<Provider>,
    shape: Arc<Shape>,
}

/// What only the forest's shape decides (uuids, tree links, traits and aggregates),
/// never inventories or usage.
#[derive(Debug, PartialEq)]
struct Shape {
    sharing_trait: Option<TraitId>,
    roots: Vec<ProviderId>,
    /// Members of every tree, grouped by root, each group ascending.
    tree_order: Vec<ProviderId>,
    /// Per provider: `(start, len)` of its tree in `tree_order` (meaningful for roots).
    tree_span: Vec<(u32, u32)>,
    depth: Vec<u32>,
    has_children: Vec<bool>,
    is_sharing: Vec<bool>,
    /// Sharing provider -> its anchor roots, ascending.
    sharing_anchors: HashMap<ProviderId, Vec<ProviderId>>,
    /// Anchor root -> sharing providers that list it as an anchor, ascending.
    anchor_sharing: HashMap<ProviderId, Vec<ProviderId>>,
    by_uuid: HashMap<Uuid, ProviderId>,
    nested: bool,
}

impl Snapshot {
    /// Validates the provider forest and builds the indexes. `sharing_trait` is the id of
    /// `MISC_SHARES_VIA_AGGREGATE`, or `None` when that trait is unknown (then nothing is
    /// shared).
    pub fn new(
        mut providers: Vec<Provider>,
        sharing_trait: Option<TraitId>,
    ) -> Result<Self, SnapshotError> {
        let n = providers.len();
        if n >= u32::MAX as usize {
            return Err(SnapshotError::TooManyProviders);
        }
        for p in &mut providers {
            normalise(p);
        }
        validate_links(&providers)?;
        let depth = depths(&providers)?;

        let mut has_children = vec![false; n];
        let mut nested = false;
        for p in &providers {
            if let Some(parent) = p.parent {
                has_children[parent.index()] = true;
                nested = true;
            }
        }

        let roots: Vec<ProviderId> = (0..n as u32)
            .map(ProviderId)
            .filter(|id| providers[id.index()].parent.is_none())
            .collect();
        let (tree_order, tree_span) = tree_layout(&providers);

        let is_sharing: Vec<bool> = providers
            .iter()
            .map(|p| sharing_trait.is_some_and(|t| p.traits.binary_search(&t).is_ok()))
            .collect();
        let (sharing_anchors, anchor_sharing) = sharing_links(&providers, &is_sharing);
        let by_uuid = providers
            .iter()
            .enumerate()
            .map(|(i, p)| (p.uuid, ProviderId(i as u32)))
            .collect();

        Ok(Snapshot {
            providers: providers.into(),
            shape: Arc::new(Shape {
                sharing_trait,
                roots,
                tree_order,
                tree_span,
                depth,
                has_children,
                is_sharing,
                sharing_anchors,
                anchor_sharing,
                by_uuid,
                nested,
            }),
        })
    }

    /// This snapshot with some providers replaced by `updates` (new inventories or
    /// usage), sharing everything else; exactly what [`Snapshot::new`] would build from
    /// the updated list. `None` when an update changes more than inventories (a uuid,
    /// a tree link, traits or aggregates: the indexes depend on those) or names a
    /// provider outside the snapshot; the caller then builds anew.
    pub fn with_inventories(
        &self,
        updates: impl IntoIterator<Item = (ProviderId, Provider)>,
    ) -> Option<Snapshot> {
        let mut next = self.clone();
        for (id, mut p) in updates {
            normalise(&mut p);
            let old = self.providers.get(id.index())?;
            let same_shape = p.uuid == old.uuid
                && p.parent == old.parent
                && p.root == old.root
                && p.traits == old.traits
                && p.aggregates == old.aggregates;
            if !same_shape {
                return None;
            }
            if p.inventories != old.inventories {
                next.providers.make_mut(id.index()).inventories = p.inventories;
            }
        }
        Some(next)
    }

    /// Every provider, indexed by [`ProviderId`].
    pub fn providers(&self) -> &Chunks<Provider> {
        &self.providers
    }

    pub fn provider(&self, id: ProviderId) -> &Provider {
        &self.providers[id.index()]
    }

    /// The id of the provider with this uuid (for `in_tree`).
    pub fn lookup(&self, uuid: &Uuid) -> Option<ProviderId> {
        self.shape.by_uuid.get(uuid).copied()
    }

    /// The id of `MISC_SHARES_VIA_AGGREGATE`, if the caller knows it.
    pub fn sharing_trait(&self) -> Option<TraitId> {
        self.shape.sharing_trait
    }

    /// All roots, ascending.
    pub fn roots(&self) -> &[ProviderId] {
        &self.shape.roots
    }

    /// Every member of the tree rooted at `root` (root included), ascending.
    pub fn tree(&self, root: ProviderId) -> &[ProviderId] {
        let (start, len) = self.shape.tree_span[root.index()];
        &self.shape.tree_order[start as usize..(start + len) as usize]
    }

    /// Whether any provider has a parent (upstream `_has_provider_trees`).
    pub fn has_nested(&self) -> bool {
        self.shape.nested
    }

    pub fn has_children(&self, id: ProviderId) -> bool {
        self.shape.has_children[id.index()]
    }

    /// Distance from the root (a root has depth 0).
    pub fn depth(&self, id: ProviderId) -> u32 {
        self.shape.depth[id.index()]
    }

    /// Whether the provider carries `MISC_SHARES_VIA_AGGREGATE`.
    pub fn is_sharing(&self, id: ProviderId) -> bool {
        self.shape.is_sharing[id.index()]
    }

    /// The anchor roots of a sharing provider (empty for a non-sharing one).
    pub fn sharing_anchors(&self, id: ProviderId) -> &[ProviderId] {
        self.shape
            .sharing_anchors
            .get(&id)
            .map_or(&[], Vec::as_slice)
    }

    /// The sharing providers that list `root` among their anchors.
    pub fn sharing_for_anchor(&self, root: ProviderId) -> &[ProviderId] {
        self.shape
            .anchor_sharing
            .get(&root)
            .map_or(&[], Vec::as_slice)
    }

    /// The inventory of `rc` on `id`, if any.
    pub fn inventory(&self, id: ProviderId, rc: RcId) -> Option<&Inventory> {
        let invs = &self.providers[id.index()].inventories;
        invs.binary_search_by_key(&rc, |inv| inv.rc)
            .ok()
            .map(|i| &invs[i])
    }

    /// Whether `ancestor` is `descendant` or one of its ancestors.
    pub fn is_ancestor_or_self(&self, ancestor: ProviderId, descendant: ProviderId) -> bool {
        let target = self.depth(ancestor);
        let mut cur = descendant;
        while self.depth(cur) > target {
            match self.provider(cur).parent {
                Some(parent) => cur = parent,
                None => return false,
            }
        }
        cur == ancestor
    }
}

/// Sorted, distinct traits, aggregates and inventories (by class; the first wins).
fn normalise(p: &mut Provider) {
    p.traits.sort_unstable();
    p.traits.dedup();
    p.aggregates.sort_unstable();
    p.aggregates.dedup();
    p.inventories.sort_by_key(|inv| inv.rc);
    p.inventories.dedup_by_key(|inv| inv.rc);
}

fn validate_links(providers: &[Provider]) -> Result<(), SnapshotError> {
    let n = providers.len() as u32;
    for (i, p) in providers.iter().enumerate() {
        let i = i as u32;
        if p.root.0 >= n {
            return Err(SnapshotError::RootOutOfRange {
                provider: i,
                root: p.root.0,
            });
        }
        let root = &providers[p.root.index()];
        if root.parent.is_some() || root.root != p.root {
            return Err(SnapshotError::RootNotARoot {
                provider: i,
                root: p.root.0,
            });
        }
        match p.parent {
            None if p.root.0 != i => {
                return Err(SnapshotError::RootNotARoot {
                    provider: i,
                    root: p.root.0,
                })
            }
            None => {}
            Some(parent) if parent.0 >= n => {
                return Err(SnapshotError::ParentOutOfRange {
                    provider: i,
                    parent: parent.0,
                })
            }
            Some(parent) => {
                let parent_root = providers[parent.index()].root;
                if parent_root != p.root {
                    return Err(SnapshotError::RootMismatch {
                        provider: i,
                        root: p.root.0,
                        parent_root: parent_root.0,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Depth of every provider; a parent chain longer than the forest is a cycle.
fn depths(providers: &[Provider]) -> Result<Vec<u32>, SnapshotError> {
    const UNKNOWN: u32 = u32::MAX;
    let n = providers.len();
    let mut depth = vec![UNKNOWN; n];
    let mut path = Vec::new();
    for start in 0..n {
        let mut cur = start;
        path.clear();
        while depth[cur] == UNKNOWN {
            match providers[cur].parent {
                None => {
                    depth[cur] = 0;
                    break;
                }
                Some(parent) => {
                    path.push(cur);
                    if path.len() > n {
                        return Err(SnapshotError::Cycle {
                            provider: start as u32,
                        });
                    }
                    cur = parent.index();
                }
            }
        }
        let mut d = depth[cur];
        for &p in path.iter().rev() {
            d += 1;
            depth[p] = d;
        }
    }
    Ok(depth)
}

/// Counting sort of providers by root.
fn tree_layout(providers: &[Provider]) -> (Vec<ProviderId>, Vec<(u32, u32)>) {
    let n = providers.len();
    let mut span = vec![(0u32, 0u32); n];
    for p in providers {
        span[p.root.index()].1 += 1;
    }
    let mut next = 0u32;
    for s in span.iter_mut() {
        s.0 = next;
        next += s.1;
    }
    let mut fill: Vec<u32> = span.iter().map(|s| s.0).collect();
    let mut order = vec![ProviderId(0); n];
    for (i, p) in providers.iter().enumerate() {
        let slot = &mut fill[p.root.index()];
        order[*slot as usize] = ProviderId(i as u32);
        *slot += 1;
    }
    (order, span)
}

type Links = HashMap<ProviderId, Vec<ProviderId>>;

/// Anchors of every sharing provider and the reverse map.
fn sharing_links(providers: &[Provider], is_sharing: &[bool]) -> (Links, Links) {
    let shared_aggs: HashSet<Uuid> = providers
        .iter()
        .zip(is_sharing)
        .filter(|(_, &s)| s)
        .flat_map(|(p, _)| p.aggregates.iter().copied())
        .collect();
    let mut roots_by_agg: HashMap<Uuid, Vec<ProviderId>> = HashMap::new();
    if !shared_aggs.is_empty() {
        for p in providers {
            for agg in &p.aggregates {
                if shared_aggs.contains(agg) {
                    roots_by_agg.entry(*agg).or_default().push(p.root);
                }
            }
        }
    }
    let mut anchors_of = Links::new();
    let mut sharing_of = Links::new();
    for (i, p) in providers.iter().enumerate() {
        if !is_sharing[i] {
            continue;
        }
        let id = ProviderId(i as u32);
        let mut anchors: Vec<ProviderId> = p
            .aggregates
            .iter()
            .filter_map(|agg| roots_by_agg.get(agg))
            .flatten()
            .copied()
            .collect();
        anchors.sort_unstable();
        anchors.dedup();
        for &anchor in &anchors {
            sharing_of.entry(anchor).or_default().push(id);
        }
        anchors_of.insert(id, anchors);
    }
    // Providers were visited in ascending order, so every reverse list is sorted.
    (anchors_of, sharing_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(parent: Option<u32>, root: u32) -> Provider {
        Provider {
            uuid: Uuid::new_v4(),
            parent: parent.map(ProviderId),
            root: ProviderId(root),
            inventories: vec![],
            traits: vec![],
            aggregates: vec![],
        }
    }

    #[test]
    fn tree_indexes() {
        // 0 -> {1 -> {3}, 2}; 4 alone
        let snap = Snapshot::new(
            vec![
                node(None, 0),
                node(Some(0), 0),
                node(Some(0), 0),
                node(Some(1), 0),
                node(None, 4),
            ],
            None,
        )
        .unwrap();
        assert_eq!(snap.roots(), &[ProviderId(0), ProviderId(4)]);
        assert_eq!(
            snap.tree(ProviderId(0)),
            &[ProviderId(0), ProviderId(1), ProviderId(2), ProviderId(3)]
        );
        assert_eq!(snap.tree(ProviderId(4)), &[ProviderId(4)]);
        assert_eq!(snap.depth(ProviderId(3)), 2);
        assert!(snap.is_ancestor_or_self(ProviderId(0), ProviderId(3)));
        assert!(snap.is_ancestor_or_self(ProviderId(1), ProviderId(3)));
        assert!(snap.is_ancestor_or_self(ProviderId(3), ProviderId(3)));
        assert!(!snap.is_ancestor_or_self(ProviderId(2), ProviderId(3)));
        assert!(!snap.is_ancestor_or_self(ProviderId(4), ProviderId(3)));
        assert!(snap.has_children(ProviderId(1)));
        assert!(!snap.has_children(ProviderId(2)));
        assert!(snap.has_nested());
        let uuid = snap.provider(ProviderId(3)).uuid;
        assert_eq!(snap.lookup(&uuid), Some(ProviderId(3)));
        assert_eq!(snap.lookup(&Uuid::nil()), None);
    }

    #[test]
    fn with_inventories_builds_what_new_builds_and_refuses_shape_changes() {
        let inv = |rc: RcId, total: i64, used: i64| Inventory {
            rc,
            limits: Limits::whole(total),
            used,
        };
        // 130 providers: the updates below fall in three different chunks.
        let mut list = vec![node(None, 0)];
        for i in 1..130 {
            let mut p = node(Some(0), 0);
            p.traits = vec![3, 1];
            p.inventories = vec![inv(2, 4, 0), inv(1, 8, i)];
            list.push(p);
        }
        let snap = Snapshot::new(list.clone(), Some(9)).unwrap();
        let mut changed = list.clone();
        let mut updates = Vec::new();
        for (i, used) in [(1usize, 3i64), (64, 4), (129, 1)] {
            let mut p = list[i].clone();
            p.inventories = vec![inv(1, 8, used), inv(2, 4, 1), inv(2, 9, 9)];
            changed[i] = p.clone();
            updates.push((ProviderId(i as u32), p));
        }
        let patched = snap.with_inventories(updates).unwrap();
        assert_eq!(patched, Snapshot::new(changed, Some(9)).unwrap());
        assert_ne!(patched, snap);
        // The old snapshot is untouched.
        assert_eq!(snap, Snapshot::new(list.clone(), Some(9)).unwrap());

        let mut p = list[5].clone();
        p.traits.push(9);
        assert!(snap.with_inventories([(ProviderId(5), p)]).is_none());
        let mut p = list[5].clone();
        p.parent = Some(ProviderId(4));
        assert!(snap.with_inventories([(ProviderId(5), p)]).is_none());
        assert!(snap
            .with_inventories([(ProviderId(130), list[5].clone())])
            .is_none());
    }

    #[test]
    fn rejects_bad_links() {
        assert!(matches!(
            Snapshot::new(vec![node(Some(5), 0)], None),
            Err(SnapshotError::RootNotARoot { .. })
        ));
        assert!(matches!(
            Snapshot::new(vec![node(None, 0), node(Some(7), 0)], None),
            Err(SnapshotError::ParentOutOfRange { .. })
        ));
        assert!(matches!(
            Snapshot::new(vec![node(None, 0), node(None, 1), node(Some(1), 0)], None),
            Err(SnapshotError::RootMismatch { .. })
        ));
        // 1 <-> 2 under root 0's name but never reaching it.
        assert!(matches!(
            Snapshot::new(
                vec![node(None, 0), node(Some(2), 0), node(Some(1), 0)],
                None
            ),
            Err(SnapshotError::Cycle { .. })
        ));
    }

    #[test]
    fn sharing_anchors_include_own_root_and_every_tree_in_the_aggregate() {
        let agg = Uuid::new_v4();
        let other = Uuid::new_v4();
        let mut cn = node(None, 0);
        let mut child = node(Some(0), 0);
        child.aggregates = vec![agg];
        cn.aggregates = vec![other];
        let mut ss = node(None, 2);
        ss.traits = vec![9];
        ss.aggregates = vec![agg];
        let lonely = node(None, 3);
        let snap = Snapshot::new(vec![cn, child, ss, lonely], Some(9)).unwrap();
        assert!(snap.is_sharing(ProviderId(2)));
        assert_eq!(
            snap.sharing_anchors(ProviderId(2)),
            &[ProviderId(0), ProviderId(2)]
        );
        assert_eq!(snap.sharing_for_anchor(ProviderId(0)), &[ProviderId(2)]);
        assert!(snap.sharing_for_anchor(ProviderId(3)).is_empty());
    }
}
