//! Candidates that ask two or more partitions of one GPU (issue 45): each partition
//! provider's capacity is exact on its own (`accel_store::partitions`), but Placement's
//! search checks providers one by one, so a candidate taking, say, a `3g` and a `4g`
//! of one GPU in two groups may name what the GPU cannot hold together. Such a
//! candidate is kept only when the GPU's ledger places every partition it asks, one
//! after another, as the claim would; the others are dropped before the answer is
//! written.
//!
//! This costs nothing where no provider carries `CUSTOM_GPU_PARTITION`, and one ledger
//! read per GPU a multi-partition candidate names otherwise. The ledger is read after
//! the index's picture: a claim in between can still cost a 409, never a double booking
//! (the claim settles the ledger itself).

use super::index::Prepared;
use accel_core::candidates::{self as engine, ProviderId};
use accel_core::partition::{Member, PARTITION_TRAIT};
use accel_store::partitions::Ledger;
use accel_store::{Store, StoreError};
use std::collections::{BTreeMap, HashMap};

/// The GPU (its own provider's index) whose ledger `id` draws from: a partition
/// member's parent, or the GPU itself.
fn family(index: &Prepared, marker: i64, id: ProviderId) -> Option<ProviderId> {
    let p = index.world.providers.get(id.0 as usize)?;
    if p.traits.binary_search(&marker).is_ok() {
        let parent = p.parent_id?;
        let at = index
            .world
            .providers
            .binary_search_by_key(&parent, |q| q.id)
            .ok()?;
        return Some(ProviderId(at as u32));
    }
    Some(id)
}

/// Drops the candidates whose partitions of one GPU its ledger cannot hold together;
/// answers how many it dropped.
pub async fn drop_unholdable(
    store: &Store,
    index: &Prepared,
    outcome: &mut engine::Outcome,
) -> Result<usize, StoreError> {
    let Some(&marker) = index.trait_ids.get(PARTITION_TRAIT) else {
        return Ok(0);
    };
    // Per candidate: GPU -> [(provider, amount)] where a GPU is named twice or more.
    let mut asks: Vec<BTreeMap<ProviderId, Vec<(ProviderId, i64)>>> = Vec::new();
    let mut any = false;
    for c in &outcome.candidates {
        let mut by_gpu: BTreeMap<ProviderId, Vec<(ProviderId, i64)>> = BTreeMap::new();
        for (p, _, amount) in &c.allocations {
            if let Some(gpu) = family(index, marker, *p) {
                by_gpu.entry(gpu).or_default().push((*p, *amount));
            }
        }
        by_gpu.retain(|_, v| {
            v.dedup_by_key(|(p, _)| *p);
            v.len() > 1
        });
        any |= !by_gpu.is_empty();
        asks.push(by_gpu);
    }
    if !any {
        return Ok(0);
    }
    let uuid = |id: ProviderId| {
        index
            .world
            .providers
            .get(id.0 as usize)
            .map(|p| p.uuid.clone())
    };
    // Every GPU named twice in some candidate, its ledger read in one snapshot.
    let mut gpus: Vec<ProviderId> = asks.iter().flat_map(|a| a.keys().copied()).collect();
    gpus.sort_unstable();
    gpus.dedup();
    let uuids: Vec<String> = gpus.iter().filter_map(|g| uuid(*g)).collect();
    let mut found = store.partitions().ledgers(&uuids).await?;
    let ledgers: HashMap<ProviderId, Option<Ledger>> = gpus
        .iter()
        .map(|g| (*g, uuid(*g).and_then(|u| found.remove(&u))))
        .collect();
    let before = outcome.candidates.len();
    let mut keep = asks.iter().map(|by_gpu| {
        by_gpu.iter().all(|(gpu, parts)| match &ledgers[gpu] {
            Some(l) => holdable(l, parts, &uuid),
            None => true,
        })
    });
    outcome.candidates.retain(|_| keep.next().unwrap_or(true));
    Ok(before - outcome.candidates.len())
}

/// Whether the ledger places every unit of `parts` (one whole-GPU holder for the GPU's
/// own provider) together, as the claim would ([`accel_core::partition::Geometry::place_all`]).
fn holdable(
    l: &Ledger,
    parts: &[(ProviderId, i64)],
    uuid: &impl Fn(ProviderId) -> Option<String>,
) -> bool {
    let mut wants = Vec::new();
    for (p, amount) in parts {
        let Some(m) = uuid(*p).and_then(|u| l.member(&u).cloned()) else {
            continue;
        };
        let units = if m == Member::Whole { 1 } else { *amount };
        wants.extend((0..units).map(|_| m.want()));
    }
    l.geometry.place_all(&l.held(), &wants).is_ok()
}
