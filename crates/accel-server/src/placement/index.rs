//! The in-memory placement index that allocation candidates are searched in, and
//! that answers `GET /resource_providers` without filters (its providers carry name,
//! generation and modification time for that).
//!
//! Loading every provider, inventory, usage, trait and aggregate per request costs
//! five full-table queries and an engine snapshot build; at 100,000 providers that is
//! most of a request. The index keeps the last [`Prepared`] picture (the store's
//! [`World`] plus the engine [`Snapshot`](engine::Snapshot) and name maps built from
//! it) together with the change version it reflects
//! (`accel_store::placement::changes`).
//!
//! Every request still asks the database, in one read snapshot, for the current
//! version (one 16-row query). Equal: the cached picture is exactly that snapshot's
//! data and is used as is. Newer: the providers logged as changed since are re-read in
//! the same snapshot and merged in; if the log no longer reaches back, everything is
//! reloaded. So every answer reflects a consistent state no older than the request,
//! whichever server replica made the changes. Claims never trust the index: they
//! re-check capacity inside their own write transaction.
//!
//! Refreshes are serialised by a mutex; the version checks are not (the mutex is held
//! only to copy the `Arc`). Readers hold an `Arc` to the picture they started with, so
//! a refresh never waits for a search.

use accel_core::candidates::{self as engine, ProviderId};
use accel_store::placement::changes::{self, Delta, Version};
use accel_store::placement::world::{self, World, WorldProvider};
use accel_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// One consistent picture of the placement data, ready to search.
pub struct Prepared {
    pub version: Version,
    /// Provider index `i` in `snapshot` is `world.providers[i]`.
    pub world: World,
    pub snapshot: engine::Snapshot,
    pub by_uuid: HashMap<String, u32>,
    pub rc_ids: HashMap<String, i64>,
    pub trait_ids: HashMap<String, i64>,
    /// `(id, name)` sorted by id: answers look names up by binary search, which at
    /// a few hundred entries beats hashing.
    rc_names: Vec<(i64, String)>,
    /// Position in `rc_names` by class id, for ids below [`DENSE_IDS`] (every
    /// standard class and the usual custom ones): one index instead of a search in
    /// the loops that name every inventory of every summarised provider.
    rc_dense: Vec<Option<u32>>,
    trait_names: Vec<(i64, String)>,
    /// The size of the last candidates answer rendered from this picture: the next
    /// one's buffer starts that large.
    pub answer_size: AtomicUsize,
}

/// Class ids at or above this are looked up by binary search only.
const DENSE_IDS: i64 = 1 << 16;

fn dense(names: &[(i64, String)]) -> Vec<Option<u32>> {
    let len = names
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| (0..DENSE_IDS).contains(id))
        .max()
        .map_or(0, |max| max as usize + 1);
    let mut v = vec![None; len];
    for (i, (id, _)) in names.iter().enumerate() {
        if (0..DENSE_IDS).contains(id) {
            v[*id as usize] = Some(i as u32);
        }
    }
    v
}

fn sorted_names(names: &HashMap<i64, String>) -> Vec<(i64, String)> {
    let mut v: Vec<(i64, String)> = names.iter().map(|(id, n)| (*id, n.clone())).collect();
    v.sort_unstable();
    v
}

fn lookup(names: &[(i64, String)], id: i64) -> Option<&str> {
    names
        .binary_search_by_key(&id, |(i, _)| *i)
        .ok()
        .map(|i| names[i].1.as_str())
}

impl Prepared {
    /// The name of resource class `id` ("" for an id the picture does not know).
    pub fn rc_name(&self, id: i64) -> &str {
        match usize::try_from(id).ok().and_then(|i| self.rc_dense.get(i)) {
            Some(&Some(i)) => &self.rc_names[i as usize].1,
            Some(None) => "",
            None => lookup(&self.rc_names, id).unwrap_or(""),
        }
    }

    pub fn trait_name(&self, id: i64) -> Option<&str> {
        lookup(&self.trait_names, id)
    }

    fn build(version: Version, mut world: World) -> Result<Self, StoreError> {
        // Answers list a provider's traits in id order (upstream's creation order).
        for rp in &mut world.providers {
            rp.traits.sort_unstable();
        }
        let rc_ids = world
            .rc_names
            .iter()
            .map(|(id, n)| (n.clone(), *id))
            .collect();
        let trait_ids: HashMap<String, i64> = world
            .trait_names
            .iter()
            .map(|(id, n)| (n.clone(), *id))
            .collect();
        let index: HashMap<i64, u32> = world
            .providers
            .iter()
            .enumerate()
            .map(|(i, rp)| (rp.id, i as u32))
            .collect();
        let providers: Vec<engine::Provider> = world
            .providers
            .iter()
            .map(|rp| engine::Provider {
                uuid: uuid::Uuid::parse_str(&rp.uuid).unwrap_or_default(),
                parent: rp
                    .parent_id
                    .and_then(|p| index.get(&p))
                    .map(|&i| ProviderId(i)),
                root: ProviderId(index.get(&rp.root_id).copied().unwrap_or(0)),
                inventories: rp.inventories.clone(),
                traits: rp.traits.iter().map(|t| *t as u32).collect(),
                aggregates: rp
                    .aggregates
                    .iter()
                    .filter_map(|a| uuid::Uuid::parse_str(a).ok())
                    .collect(),
            })
            .collect();
        let sharing = trait_ids
            .get(accel_core::standard::MISC_SHARES_VIA_AGGREGATE)
            .map(|t| *t as u32);
        let snapshot = engine::Snapshot::new(providers, sharing)
            .map_err(|e| StoreError::Invalid(format!("inconsistent provider trees: {e:?}")))?;
        let by_uuid = world
            .providers
            .iter()
            .enumerate()
            .map(|(i, rp)| (rp.uuid.clone(), i as u32))
            .collect();
        let rc_names = sorted_names(&world.rc_names);
        Ok(Prepared {
            version,
            rc_dense: dense(&rc_names),
            rc_names,
            trait_names: sorted_names(&world.trait_names),
            world,
            snapshot,
            by_uuid,
            rc_ids,
            trait_ids,
            answer_size: AtomicUsize::new(0),
        })
    }
}

/// How the last refreshes went; for logs, tests and the benchmark notes.
#[derive(Debug, Default)]
pub struct IndexStats {
    /// Requests answered from the cached picture unchanged.
    pub hits: AtomicU64,
    /// Refreshes that re-read only the changed providers.
    pub incremental: AtomicU64,
    /// Refreshes that re-read everything.
    pub full: AtomicU64,
}

#[derive(Default)]
pub struct Index {
    current: tokio::sync::Mutex<Option<Arc<Prepared>>>,
    pub stats: IndexStats,
}

/// What the read transaction found.
enum Step {
    Changed {
        version: Version,
        changed: Vec<i64>,
        loaded: Vec<WorldProvider>,
        names: Option<(HashMap<i64, String>, HashMap<i64, String>)>,
    },
    Full {
        version: Version,
        world: World,
    },
}

impl Index {
    /// The picture of the database as of now (see the module docs).
    pub async fn current(&self, store: &Store) -> Result<Arc<Prepared>, StoreError> {
        // Fast path: one statement, with the lock held only to copy the `Arc`, so
        // concurrent requests check the version in parallel. Equal means the cached
        // picture is the data as of that statement's snapshot.
        let seen = self.current.lock().await.clone();
        if let Some(p) = &seen {
            if self.fresh(store, p).await? {
                return Ok(p.clone());
            }
        }
        let mut guard = self.current.lock().await;
        let known = guard.as_ref().map(|p| p.version);
        // Another request refreshed while this one waited: that picture may do.
        if let Some(p) = guard.as_ref() {
            let same = seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, p));
            if !same && self.fresh(store, p).await? {
                return Ok(p.clone());
            }
        }
        let step = store
            .read(move |tx| {
                Box::pin(async move {
                    let version = changes::version(tx).await?;
                    let Some(known) = known else {
                        let world = world::load(tx).await?;
                        return Ok(Step::Full { version, world });
                    };
                    match changes::since(tx, &known, &version).await? {
                        Delta::Some { providers, names } => {
                            let loaded = world::load_providers(tx, Some(&providers)).await?;
                            let names = if names {
                                Some(world::load_names(tx).await?)
                            } else {
                                None
                            };
                            Ok(Step::Changed {
                                version,
                                changed: providers,
                                loaded,
                                names,
                            })
                        }
                        Delta::Reload => {
                            let world = world::load(tx).await?;
                            Ok(Step::Full { version, world })
                        }
                    }
                })
            })
            .await?;
        let prepared = match step {
            Step::Full { version, world } => {
                self.stats.full.fetch_add(1, Ordering::Relaxed);
                Prepared::build(version, world)?
            }
            Step::Changed {
                version,
                changed,
                loaded,
                names,
            } => {
                self.stats.incremental.fetch_add(1, Ordering::Relaxed);
                let old = guard.take().expect("a known version has a picture");
                // Reuse the old world's allocations when no search still holds it.
                let old_world = match Arc::try_unwrap(old) {
                    Ok(p) => p.world,
                    Err(shared) => shared.world.clone(),
                };
                Prepared::build(version, merge(old_world, &changed, loaded, names))?
            }
        };
        let prepared = Arc::new(prepared);
        *guard = Some(prepared.clone());
        Ok(prepared)
    }
}

impl Index {
    /// Whether `p` is the data as of now (one statement); counts a hit when it is.
    async fn fresh(&self, store: &Store, p: &Prepared) -> Result<bool, StoreError> {
        let now = store
            .read_one(|tx| Box::pin(async move { changes::version(tx).await }))
            .await?;
        let fresh = now == p.version;
        if fresh {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(fresh)
    }
}

/// Replaces the `changed` providers of `old` (sorted ids) with `loaded` (sorted by id;
/// a changed id missing from it was deleted).
fn merge(
    old: World,
    changed: &[i64],
    loaded: Vec<WorldProvider>,
    names: Option<(HashMap<i64, String>, HashMap<i64, String>)>,
) -> World {
    let mut out = Vec::with_capacity(old.providers.len() + loaded.len());
    let mut fresh = loaded.into_iter().peekable();
    for rp in old.providers {
        while fresh.peek().is_some_and(|f| f.id < rp.id) {
            out.extend(fresh.next());
        }
        if changed.binary_search(&rp.id).is_err() {
            out.push(rp);
        }
    }
    out.extend(fresh);
    let (rc_names, trait_names) = names.unwrap_or((old.rc_names, old.trait_names));
    World {
        providers: out,
        rc_names,
        trait_names,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(id: i64, tag: &str) -> WorldProvider {
        WorldProvider {
            id,
            uuid: format!("{tag}-{id}"),
            name: format!("{tag}-{id}"),
            generation: 0,
            modified: 0,
            parent_id: None,
            root_id: id,
            inventories: Vec::new(),
            traits: Vec::new(),
            aggregates: Vec::new(),
        }
    }

    #[test]
    fn merge_replaces_inserts_and_deletes_in_id_order() {
        let old = World {
            providers: vec![rp(1, "old"), rp(3, "old"), rp(5, "old"), rp(7, "old")],
            ..World::default()
        };
        // 3 changed, 5 deleted, 6 and 9 created.
        let changed = [3, 5, 6, 9];
        let loaded = vec![rp(3, "new"), rp(6, "new"), rp(9, "new")];
        let merged = merge(old, &changed, loaded, None);
        let got: Vec<String> = merged.providers.iter().map(|p| p.uuid.clone()).collect();
        assert_eq!(got, ["old-1", "new-3", "new-6", "old-7", "new-9"]);
    }
}
