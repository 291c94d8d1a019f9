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
//!
//! A refresh whose changed providers kept their uuid, tree links, traits and
//! aggregates (a claim, a delete, a new inventory: usage and inventories only) patches
//! the picture instead of rebuilding it: providers live in copy-on-write [`Chunks`]
//! and everything derived from the forest's shape is shared, so it costs what changed.
//! Rebuilding every provider, map and engine index on each such refresh was what made
//! `GET /allocation_candidates` queue at 10,000 nodes (issue 32). Anything else
//! rebuilds, as before; both give the same picture (tests below).

use accel_core::candidates::{self as engine, ProviderId};
use accel_core::chunks::Chunks;
use accel_store::placement::changes::Version;
use accel_store::placement::world::{Refresh, World, WorldProvider};
use accel_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Resource class and trait names by id, as `world::load_names` reads them.
type NameMaps = accel_store::placement::world::Names;

/// One consistent picture of the placement data, ready to search. Everything but the
/// changed providers is shared with the picture it was patched from.
pub struct Prepared {
    pub version: Version,
    /// Provider index `i` in `snapshot` is `world.providers[i]`.
    pub world: Picture,
    pub snapshot: engine::Snapshot,
    pub by_uuid: Arc<HashMap<String, u32>>,
    pub rc_ids: Arc<HashMap<String, i64>>,
    pub trait_ids: Arc<HashMap<String, i64>>,
    names: Arc<Names>,
    /// Every provider uuid, class name and trait name of the picture needs no JSON
    /// escaping (no `"`, `\` or control character), so answers copy them without
    /// scanning each. The API validates them all on the way in; this holds whatever
    /// the database holds (a row written by other means), checked once per build.
    pub plain: bool,
    /// The size of the last candidates answer rendered from this picture: the next
    /// one's buffer starts that large.
    pub answer_size: AtomicUsize,
}

/// The store's [`World`], its providers in shared chunks.
#[derive(Clone, Debug, PartialEq)]
pub struct Picture {
    /// Ordered by provider id; each provider's traits sorted.
    pub providers: Chunks<WorldProvider>,
    rc_names: Arc<HashMap<i64, String>>,
    trait_names: Arc<HashMap<i64, String>>,
}

impl Picture {
    fn into_world(self) -> World {
        World {
            providers: self.providers.to_vec(),
            rc_names: Arc::unwrap_or_clone(self.rc_names),
            trait_names: Arc::unwrap_or_clone(self.trait_names),
        }
    }
}

/// Names by id, laid out for the answers' lookups.
#[derive(Debug, PartialEq)]
struct Names {
    /// `(id, name)` sorted by id: answers look names up by binary search, which at
    /// a few hundred entries beats hashing.
    rc_names: Vec<(i64, String)>,
    /// Position in `rc_names` by class id, for ids below [`DENSE_IDS`] (every
    /// standard class and the usual custom ones): one index instead of a search in
    /// the loops that name every inventory of every summarised provider.
    rc_dense: Vec<Option<u32>>,
    trait_names: Vec<(i64, String)>,
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

/// Whether `s` is written in JSON as is, between quotes.
fn needs_no_escape(s: &str) -> bool {
    !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
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
        let names = &self.names;
        match usize::try_from(id).ok().and_then(|i| names.rc_dense.get(i)) {
            Some(&Some(i)) => &names.rc_names[i as usize].1,
            Some(None) => "",
            None => lookup(&names.rc_names, id).unwrap_or(""),
        }
    }

    pub fn trait_name(&self, id: i64) -> Option<&str> {
        lookup(&self.names.trait_names, id)
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
        let plain = world.providers.iter().all(|rp| needs_no_escape(&rp.uuid))
            && world.rc_names.values().all(|n| needs_no_escape(n))
            && world.trait_names.values().all(|n| needs_no_escape(n));
        let rc_names = sorted_names(&world.rc_names);
        let names = Names {
            rc_dense: dense(&rc_names),
            rc_names,
            trait_names: sorted_names(&world.trait_names),
        };
        Ok(Prepared {
            version,
            world: Picture {
                providers: world.providers.into(),
                rc_names: Arc::new(world.rc_names),
                trait_names: Arc::new(world.trait_names),
            },
            snapshot,
            by_uuid: Arc::new(by_uuid),
            rc_ids: Arc::new(rc_ids),
            trait_ids: Arc::new(trait_ids),
            names: Arc::new(names),
            plain,
            answer_size: AtomicUsize::new(0),
        })
    }

    /// This picture with the `changed` providers (sorted ids) replaced by `loaded`
    /// (sorted by id), the same as [`Prepared::build`] of the merged world would be;
    /// `None` unless every changed provider still exists, none is new, each kept its
    /// uuid, tree links, traits and aggregates, and the names did not change.
    fn patched(
        &self,
        version: Version,
        changed: &[i64],
        loaded: Vec<WorldProvider>,
        names: Option<&NameMaps>,
    ) -> Option<Prepared> {
        if let Some((rc, traits)) = names {
            if rc != &*self.world.rc_names || traits != &*self.world.trait_names {
                return None;
            }
        }
        // A changed id that did not load was deleted.
        if loaded.len() != changed.len() {
            return None;
        }
        let mut providers = self.world.providers.clone();
        let mut updates = Vec::with_capacity(loaded.len());
        for mut rp in loaded {
            let i = providers.binary_search_by_key(&rp.id, |p| p.id).ok()?;
            rp.traits.sort_unstable();
            let old = &providers[i];
            let same_shape = rp.uuid == old.uuid
                && rp.parent_id == old.parent_id
                && rp.root_id == old.root_id
                && rp.traits == old.traits
                && rp.aggregates == old.aggregates;
            if !same_shape {
                return None;
            }
            let id = ProviderId(i as u32);
            let mut p = self.snapshot.provider(id).clone();
            p.inventories.clone_from(&rp.inventories);
            updates.push((id, p));
            *providers.make_mut(i) = rp;
        }
        let snapshot = self.snapshot.with_inventories(updates)?;
        Some(Prepared {
            version,
            world: Picture {
                providers,
                ..self.world.clone()
            },
            snapshot,
            by_uuid: self.by_uuid.clone(),
            rc_ids: self.rc_ids.clone(),
            trait_ids: self.trait_ids.clone(),
            // A patch keeps every uuid and name.
            names: self.names.clone(),
            plain: self.plain,
            answer_size: AtomicUsize::new(self.answer_size.load(Ordering::Relaxed)),
        })
    }

    /// [`Prepared::patched`] when it applies, else a rebuild of the merged world.
    fn refreshed(
        &self,
        version: Version,
        changed: &[i64],
        loaded: Vec<WorldProvider>,
        names: Option<NameMaps>,
    ) -> Result<(Prepared, bool), StoreError> {
        if let Some(p) = self.patched(version, changed, loaded.clone(), names.as_ref()) {
            return Ok((p, true));
        }
        let old = self.world.clone().into_world();
        Ok((
            Prepared::build(version, merge(old, changed, loaded, names))?,
            false,
        ))
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
    /// Of the incremental refreshes, those that only replaced inventories and usage
    /// and so patched the picture instead of rebuilding it.
    pub patched: AtomicU64,
}

#[derive(Default)]
pub struct Index {
    current: tokio::sync::Mutex<Option<Arc<Prepared>>>,
    pub stats: IndexStats,
}

impl Index {
    /// The picture of the database as of now (see the module docs).
    pub async fn current(&self, store: &Store) -> Result<Arc<Prepared>, StoreError> {
        Ok(self.load(store).await?.0)
    }

    /// [`Index::current`], and how the picture came to be.
    async fn load(&self, store: &Store) -> Result<(Arc<Prepared>, Source), StoreError> {
        // Fast path: one statement, with the lock held only to copy the `Arc`, so
        // concurrent requests check the version in parallel. Equal means the cached
        // picture is the data as of that statement's snapshot.
        let seen = self.current.lock().await.clone();
        if let Some(p) = &seen {
            if self.fresh(store, p).await? {
                return Ok((p.clone(), Source::Cached));
            }
        }
        let mut guard = self.current.lock().await;
        let known = guard.as_ref().map(|p| p.version);
        // Another request refreshed while this one waited: that picture may do.
        if let Some(p) = guard.as_ref() {
            let same = seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, p));
            if !same && self.fresh(store, p).await? {
                return Ok((p.clone(), Source::Cached));
            }
        }
        let step = store.world().refresh(known).await?;
        let (prepared, source) = match step {
            Refresh::Full { version, world } => {
                self.stats.full.fetch_add(1, Ordering::Relaxed);
                (Prepared::build(version, world)?, Source::Full)
            }
            Refresh::Changed {
                version,
                changed,
                loaded,
                names,
            } => {
                self.stats.incremental.fetch_add(1, Ordering::Relaxed);
                let old = guard.as_ref().expect("a known version has a picture");
                let (prepared, patched) = old.refreshed(version, &changed, loaded, names)?;
                if patched {
                    self.stats.patched.fetch_add(1, Ordering::Relaxed);
                }
                (prepared, Source::Incremental)
            }
        };
        let prepared = Arc::new(prepared);
        *guard = Some(prepared.clone());
        Ok((prepared, source))
    }
}

/// How [`Index::load`] came by its picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The cached one was current (possibly refreshed meanwhile by another caller).
    Cached,
    /// Everything re-read.
    Full,
    /// The changed providers re-read.
    Incremental,
}

/// The index keeper's memory between two of its steps ([`Keeper::step`]); the server
/// runs one step a second ([`KEEP_EVERY`]) beside its other background workers.
///
/// Without it the picture is built by the first request that needs it: after a start
/// on a large database, or after a burst of registrations, that request pays the
/// whole build (about a second at 50,000 providers) and every request arriving
/// meanwhile waits behind it (issue 46: the candidates p99.9). The keeper builds the
/// picture at start-up, and brings a stale one up to date once the writes pause (the
/// version stood still for a step), or when it has been stale for [`PATIENCE`] steps
/// with nobody asking (so an idle cloud whose agents keep reporting is never far
/// behind). While writes go on and requests come, the requests refresh it as before
/// and the keeper only reads the version: it never builds a picture nobody waits for
/// while the writes that would outdate it are still coming.
#[derive(Debug, Default)]
pub struct Keeper {
    last: Option<Version>,
    stale_for: u32,
}

/// How often the server runs [`Keeper::step`].
pub const KEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Steps a picture may stay stale while writes continue before the keeper refreshes
/// it anyway.
pub const PATIENCE: u32 = 10;

/// What one [`Keeper::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// The picture was current (or a request brought it up to date meanwhile).
    Current,
    /// Stale, but the version moved since the last step: writes are going on.
    Waiting,
    /// Built or refreshed (`full`: everything re-read).
    Refreshed { full: bool },
}

impl Keeper {
    /// Checks the version (one statement) and builds or refreshes the picture when
    /// the rules above say so.
    pub async fn step(&mut self, index: &Index, store: &Store) -> Result<Kept, StoreError> {
        let now = store.placement_version().await?;
        let picture = index.current.lock().await.as_ref().map(|p| p.version);
        let still = self.last == Some(now);
        self.last = Some(now);
        if picture == Some(now) {
            self.stale_for = 0;
            return Ok(Kept::Current);
        }
        self.stale_for += 1;
        if picture.is_some() && !still && self.stale_for < PATIENCE {
            return Ok(Kept::Waiting);
        }
        let (_, source) = index.load(store).await?;
        self.stale_for = 0;
        Ok(match source {
            // A request refreshed it while this step waited for the lock.
            Source::Cached => Kept::Current,
            Source::Full => Kept::Refreshed { full: true },
            Source::Incremental => Kept::Refreshed { full: false },
        })
    }
}

impl Index {
    /// Whether `p` is the data as of now (one statement); counts a hit when it is.
    async fn fresh(&self, store: &Store, p: &Prepared) -> Result<bool, StoreError> {
        let now = store.placement_version().await?;
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
    names: Option<NameMaps>,
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

    /// A small deterministic generator (no seed file, same sequence everywhere).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) % n as u64) as usize
        }
    }

    const VCPU: u32 = 0;
    const MEMORY_MB: u32 = 1;
    const DISK_GB: u32 = 2;
    const FPGA: u32 = 10;
    const DEVICE: i64 = 20;
    const OTHER: i64 = 21;
    const SHARES: i64 = 30;

    fn uuid(n: i64) -> String {
        format!("00000000-0000-4000-8000-{n:012x}")
    }

    fn inv(rc: u32, total: i64) -> engine::Inventory {
        engine::Inventory {
            rc,
            limits: accel_core::capacity::Limits::whole(total),
            used: 0,
        }
    }

    fn provider(id: i64, root: i64, parent: Option<i64>) -> WorldProvider {
        WorldProvider {
            uuid: uuid(id),
            parent_id: parent,
            root_id: root,
            ..rp(id, "p")
        }
    }

    /// `nodes` computes with `devices` one-unit FPGA children each (as `accel-bench
    /// cloud` builds them), plus a DISK_GB sharing provider in an aggregate with every
    /// third compute.
    fn cloud(nodes: i64, devices: i64) -> World {
        let agg = uuid(0xa99);
        let mut providers = Vec::new();
        for n in 0..nodes {
            let root = 1 + n * (devices + 1);
            let mut cn = provider(root, root, None);
            cn.inventories = vec![inv(VCPU, 8), inv(MEMORY_MB, 4096), inv(DISK_GB, 10)];
            if n % 3 == 0 {
                cn.aggregates = vec![agg.clone()];
            }
            providers.push(cn);
            for d in 1..=devices {
                let mut dev = provider(root + d, root, Some(root));
                dev.inventories = vec![inv(FPGA, 1)];
                dev.traits = vec![DEVICE];
                providers.push(dev);
            }
        }
        let id = 1 + nodes * (devices + 1);
        let mut ss = provider(id, id, None);
        ss.inventories = vec![inv(DISK_GB, 50)];
        ss.traits = vec![SHARES, OTHER];
        ss.aggregates = vec![agg];
        providers.push(ss);
        let names = |pairs: &[(i64, &str)]| {
            pairs
                .iter()
                .map(|&(id, n)| (id, n.to_owned()))
                .collect::<HashMap<i64, String>>()
        };
        World {
            providers,
            rc_names: names(&[
                (VCPU as i64, "VCPU"),
                (MEMORY_MB as i64, "MEMORY_MB"),
                (DISK_GB as i64, "DISK_GB"),
                (FPGA as i64, "FPGA"),
            ]),
            trait_names: names(&[
                (DEVICE, "CUSTOM_FAKE_DEVICE"),
                (OTHER, "CUSTOM_OTHER"),
                (SHARES, accel_core::standard::MISC_SHARES_VIA_AGGREGATE),
            ]),
        }
    }

    /// The query `accel-bench cloud` sends for each boot, at `limit`, randomized with
    /// `seed`.
    fn cloud_query(limit: Option<usize>, seed: Option<u64>) -> engine::Request {
        engine::Request {
            groups: vec![
                engine::RequestGroup {
                    resources: vec![(VCPU, 1), (MEMORY_MB, 512), (DISK_GB, 1)],
                    ..Default::default()
                },
                engine::RequestGroup {
                    suffix: "1".into(),
                    resources: vec![(FPGA, 1)],
                    required: vec![vec![DEVICE as u32]],
                    ..Default::default()
                },
            ],
            group_policy: engine::GroupPolicy::None,
            limit,
            nested: true,
            randomize: seed,
            ..Default::default()
        }
    }

    fn assert_same(got: &Prepared, want: &Prepared) {
        assert_eq!(got.version, want.version);
        assert_eq!(got.plain, want.plain);
        assert_eq!(got.world, want.world);
        assert_eq!(got.snapshot, want.snapshot);
        assert_eq!(got.by_uuid, want.by_uuid);
        assert_eq!(got.rc_ids, want.rc_ids);
        assert_eq!(got.trait_ids, want.trait_ids);
        assert_eq!(got.names, want.names);
        for limit in [Some(1), Some(7), Some(1000), None] {
            for seed in [None, Some(3), Some(32)] {
                let q = cloud_query(limit, seed);
                assert_eq!(
                    engine::search(&got.snapshot, &q, usize::MAX),
                    engine::search(&want.snapshot, &q, usize::MAX),
                    "limit {limit:?}, seed {seed:?}"
                );
            }
        }
    }

    /// `plain` holds only when every uuid and name needs no JSON escaping.
    #[test]
    fn a_name_to_escape_anywhere_makes_the_picture_not_plain() {
        let world = cloud(3, 2);
        assert!(Prepared::build([0; 16], world.clone()).unwrap().plain);
        let mut quoted_trait = world.clone();
        quoted_trait.trait_names.insert(999, "CUSTOM_\"Q".into());
        assert!(!Prepared::build([0; 16], quoted_trait).unwrap().plain);
        let mut backslash_class = world.clone();
        backslash_class.rc_names.insert(999, "CUSTOM_\\B".into());
        assert!(!Prepared::build([0; 16], backslash_class).unwrap().plain);
        let mut control_uuid = world;
        control_uuid.providers[1].uuid.push('\n');
        assert!(!Prepared::build([0; 16], control_uuid).unwrap().plain);
    }

    /// Random claims, deletes, inventory updates, trait changes, new and deleted
    /// providers: after each, the refreshed picture (patched or rebuilt) equals a
    /// picture built from scratch of the same data, and so does every answer.
    #[test]
    fn refreshed_pictures_equal_pictures_built_from_scratch() {
        let mut truth = cloud(60, 4);
        let mut current = Prepared::build([0; 16], truth.clone()).unwrap();
        let mut rng = Lcg(32);
        let mut next_id = truth.providers.last().unwrap().id + 1;
        let (mut patched, mut rebuilt) = (0, 0);
        for step in 1..=120i64 {
            let mut changed: Vec<i64> = Vec::new();
            let n = truth.providers.len();
            match rng.below(10) {
                // claims and deletes: usage on a few providers
                0..=5 => {
                    for _ in 0..=rng.below(5) {
                        let rp = &mut truth.providers[rng.below(n)];
                        if rp.inventories.is_empty() {
                            continue;
                        }
                        let k = rng.below(rp.inventories.len());
                        let total = rp.inventories[k].limits.total;
                        rp.inventories[k].used = rng.below(total as usize + 1) as i64;
                        rp.generation += 1;
                        changed.push(rp.id);
                    }
                }
                // an inventory's total, or a new class on a provider
                6 => {
                    let rp = &mut truth.providers[rng.below(n)];
                    match rp.inventories.first_mut() {
                        Some(first) if rng.below(2) == 0 => {
                            first.limits =
                                accel_core::capacity::Limits::whole(1 + rng.below(9) as i64)
                        }
                        _ => rp.inventories.push(inv(DISK_GB + 100, 5)),
                    }
                    changed.push(rp.id);
                }
                // a trait, an aggregate
                7 => {
                    let rp = &mut truth.providers[rng.below(n)];
                    if rng.below(2) == 0 {
                        rp.traits.push(OTHER);
                        rp.traits.dedup();
                    } else {
                        rp.aggregates.push(uuid(0xa99));
                        rp.aggregates.dedup();
                    }
                    changed.push(rp.id);
                }
                // a device deleted
                8 => {
                    let i = rng.below(n);
                    if truth.providers[i].parent_id.is_some() {
                        changed.push(truth.providers.remove(i).id);
                    }
                }
                // a device created
                _ => {
                    let root = truth.providers[rng.below(n)].root_id;
                    let mut dev = provider(next_id, root, Some(root));
                    dev.inventories = vec![inv(FPGA, 1)];
                    dev.traits = vec![DEVICE];
                    truth.providers.push(dev);
                    changed.push(next_id);
                    next_id += 1;
                }
            }
            changed.sort_unstable();
            changed.dedup();
            let loaded: Vec<WorldProvider> = truth
                .providers
                .iter()
                .filter(|p| changed.binary_search(&p.id).is_ok())
                .cloned()
                .collect();
            let version = [step; 16];
            let (next, was_patched) = current.refreshed(version, &changed, loaded, None).unwrap();
            if was_patched {
                patched += 1;
            } else {
                rebuilt += 1;
            }
            assert_same(&next, &Prepared::build(version, truth.clone()).unwrap());
            current = next;
        }
        assert!(
            patched > 50 && rebuilt > 10,
            "{patched} patched, {rebuilt} rebuilt"
        );
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
