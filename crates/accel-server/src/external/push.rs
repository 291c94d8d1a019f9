//! One push: make the remote subtree of a host's compute node match the local device
//! providers. Idempotent; when already in sync it only reads (three list requests plus
//! two per provider).
//!
//! Cyborg does the same writes (reference §5.4) but only on change and without
//! re-reading on generation conflicts; here every write carries the generation just
//! read and a 409 `placement.concurrent_update` re-reads and tries again.

use super::client::{Client, RemoteError};
use accel_api::http::Error;
use accel_api::placement::{
    mv, Inventories, InventoriesPut, InventoryRecord, Map, ProviderCreate, ProviderTraits,
    ProviderUpdate, Version,
};
use accel_store::accelerator::pushes::{LocalInventory, LocalProvider, LocalTree};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Placement microversion of every request but a move: 1.26 lets `reserved` equal
/// `total`, and has `in_tree` (1.14), `required` (1.18) and POST bodies (1.20).
const MV: Version = mv::ZERO_CAPACITY;
/// Moving a provider to another parent (`PUT /resource_providers/{uuid}`).
const MV_MOVE: Version = mv::REPARENT;
/// The trait that marks a provider as accel's: only such providers are deleted.
pub const OWNER_TRAIT: &str = "CUSTOM_OWNER_ACCEL";
/// Attempts of one generation-guarded write before giving up for this push.
const CAS_ATTEMPTS: usize = 5;

/// What a push changed remotely.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pushed {
    pub created: usize,
    /// Providers whose name, parent, inventories or traits were written.
    pub updated: usize,
    pub deleted: usize,
    /// Gone locally but still allocated remotely: kept with `reserved = total`.
    pub held: Vec<String>,
}

/// A lost generation race: read again and retry.
fn lost_race(e: &Error) -> bool {
    matches!(e, Error::Status { status: 409, code: Some(c), .. } if c == "placement.concurrent_update")
}

#[derive(Debug, Clone)]
struct Remote {
    name: String,
    parent: Option<String>,
}

async fn list(c: &Client, query: &[(&str, &str)]) -> Result<HashMap<String, Remote>, RemoteError> {
    let shown: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let what = format!("GET /resource_providers?{}", shown.join("&"));
    let found = match c.api().providers(MV, query).await {
        Ok(found) => found,
        // Upstream refuses `required` with an unknown trait: nobody carries it yet.
        Err(Error::Status {
            status: 400,
            message,
            ..
        }) if message.contains("No such trait") => return Ok(HashMap::new()),
        Err(e) => return Err(RemoteError::of(&what, &e)),
    };
    Ok(found
        .into_iter()
        .map(|p| {
            (
                p.uuid,
                Remote {
                    name: p.name,
                    parent: p.parent_provider_uuid,
                },
            )
        })
        .collect())
}

/// Pushes `local` (the tree of compute node `host`).
pub async fn push(c: &Client, host: &str, local: &LocalTree) -> Result<Pushed, RemoteError> {
    let Some((cn, _)) = c.provider_by_name(host).await? else {
        return Err(RemoteError(format!(
            "no compute node resource provider named {host} in the external Placement ({})",
            c.endpoint().await
        )));
    };
    let tree = list(c, &[("in_tree", &cn)]).await?;
    let owned = list(c, &[("in_tree", &cn), ("required", OWNER_TRAIT)]).await?;
    let mut out = Pushed::default();
    let mut classes_done: BTreeSet<String> = BTreeSet::new();
    for p in &local.providers {
        let parent = p.parent.clone().unwrap_or_else(|| cn.clone());
        let (created, mut changed) = match tree.get(&p.uuid) {
            None => {
                let created = ensure_provider(c, p, &parent).await?;
                (created, !created)
            }
            Some(r) if r.name != p.name || r.parent.as_deref() != Some(parent.as_str()) => {
                move_provider(c, p, &parent).await?;
                (false, true)
            }
            Some(_) => (false, false),
        };
        changed |= sync_traits(c, p).await?;
        changed |= sync_inventories(c, p, &mut classes_done).await?;
        if created {
            out.created += 1;
        } else if changed {
            out.updated += 1;
        }
    }
    let keep: BTreeSet<&str> = local.providers.iter().map(|p| p.uuid.as_str()).collect();
    let mut gone: Vec<(usize, &String)> = owned
        .keys()
        .filter(|u| !keep.contains(u.as_str()) && **u != cn)
        .map(|u| (depth(&tree, u), u))
        .collect();
    // Deepest first: Placement refuses to delete a parent before its children.
    gone.sort_by(|a, b| b.cmp(a));
    for (_, uuid) in gone {
        let path = format!("/resource_providers/{uuid}");
        match c
            .api()
            .delete_provider(MV, uuid)
            .await
            .map_err(|e| (e.status(), e))
        {
            Ok(()) | Err((Some(404), _)) => out.deleted += 1,
            Err((Some(409), e)) => {
                let reason = RemoteError::of("DELETE", &e);
                tracing::info!(provider = %uuid, reason = %reason, "device provider in use in the external Placement: reserved until free");
                reserve_all(c, uuid).await?;
                out.held
                    .push(tree.get(uuid).map(|t| t.name.clone()).unwrap_or_default());
            }
            Err((_, e)) => return Err(RemoteError::of(&format!("DELETE {path}"), &e)),
        }
    }
    Ok(out)
}

fn depth(tree: &HashMap<String, Remote>, uuid: &str) -> usize {
    let mut d = 0;
    let mut at = tree.get(uuid).and_then(|r| r.parent.clone());
    while let Some(p) = at {
        d += 1;
        if d > tree.len() {
            break;
        }
        at = tree.get(&p).and_then(|r| r.parent.clone());
    }
    d
}

/// Creates the provider, or moves it when it exists in another tree. Returns whether
/// it was created.
async fn ensure_provider(c: &Client, p: &LocalProvider, parent: &str) -> Result<bool, RemoteError> {
    let path = format!("/resource_providers/{}", p.uuid);
    let found = c
        .api()
        .provider(MV, &p.uuid)
        .await
        .map_err(|e| RemoteError::of(&format!("GET {path}"), &e))?;
    if found.is_some() {
        move_provider(c, p, parent).await?;
        return Ok(false);
    }
    let body = ProviderCreate {
        uuid: Some(p.uuid.clone()),
        name: p.name.clone(),
        parent_provider_uuid: Some(parent.to_owned()),
    };
    c.api()
        .create_provider(MV, &body)
        .await
        .map_err(|e| RemoteError::of(&format!("POST /resource_providers ({})", p.name), &e))?;
    Ok(true)
}

async fn move_provider(c: &Client, p: &LocalProvider, parent: &str) -> Result<(), RemoteError> {
    let path = format!("/resource_providers/{}", p.uuid);
    let body = ProviderUpdate {
        name: p.name.clone(),
        parent_provider_uuid: Some(Some(parent.to_owned())),
    };
    c.api()
        .update_provider(MV_MOVE, &p.uuid, &body)
        .await
        .map_err(|e| RemoteError::of(&format!("PUT {path}"), &e))?;
    Ok(())
}

fn too_many(path: &str) -> RemoteError {
    RemoteError(format!(
        "PUT {path}: generation conflicts {CAS_ATTEMPTS} times in a row"
    ))
}

async fn read_traits(c: &Client, uuid: &str) -> Result<ProviderTraits, RemoteError> {
    c.api()
        .provider_traits(MV, uuid)
        .await
        .map_err(|e| RemoteError::of(&format!("GET /resource_providers/{uuid}/traits"), &e))
}

async fn sync_traits(c: &Client, p: &LocalProvider) -> Result<bool, RemoteError> {
    let mut want: BTreeSet<String> = p.traits.iter().cloned().collect();
    want.insert(OWNER_TRAIT.to_owned());
    let names =
        |have: &ProviderTraits| -> BTreeSet<String> { have.traits.iter().cloned().collect() };
    let path = format!("/resource_providers/{}/traits", p.uuid);
    if names(&read_traits(c, &p.uuid).await?) == want {
        return Ok(false);
    }
    for t in want.iter().filter(|t| t.starts_with("CUSTOM_")) {
        c.api()
            .ensure_trait(MV, t)
            .await
            .map_err(|e| RemoteError::of(&format!("PUT /traits/{t}"), &e))?;
    }
    // The generation just read; a 409 `placement.concurrent_update` reads again.
    for _ in 0..CAS_ATTEMPTS {
        let have = read_traits(c, &p.uuid).await?;
        if names(&have) == want {
            return Ok(false);
        }
        let body = ProviderTraits {
            traits: want.iter().cloned().collect(),
            resource_provider_generation: have.resource_provider_generation,
        };
        match c.api().set_provider_traits(MV, &p.uuid, &body).await {
            Ok(_) => return Ok(true),
            Err(e) if lost_race(&e) => continue,
            Err(e) => return Err(RemoteError::of(&format!("PUT {path}"), &e)),
        }
    }
    Err(too_many(&path))
}

fn record(i: &LocalInventory) -> InventoryRecord {
    let l = &i.limits;
    InventoryRecord {
        total: l.total,
        reserved: Some(l.reserved),
        min_unit: Some(l.min_unit),
        max_unit: Some(l.max_unit),
        step_size: Some(l.step_size),
        allocation_ratio: Some(l.allocation_ratio),
        ..Default::default()
    }
}

/// Inventories as comparable tuples (ratio in thousandths).
fn inventory_key(v: &Map<InventoryRecord>) -> BTreeMap<String, [i64; 6]> {
    v.iter()
        .map(|(k, i)| {
            let ratio = (i.allocation_ratio.unwrap_or(-1.0) * 1000.0).round() as i64;
            (
                k.to_owned(),
                [
                    i.total,
                    i.reserved.unwrap_or(-1),
                    i.min_unit.unwrap_or(-1),
                    i.max_unit.unwrap_or(-1),
                    i.step_size.unwrap_or(-1),
                    ratio,
                ],
            )
        })
        .collect()
}

/// The remote inventories as records.
fn records(have: &Inventories) -> Map<InventoryRecord> {
    have.inventories
        .iter()
        .map(|(k, i)| (k.to_owned(), InventoryRecord::from(i)))
        .collect()
}

async fn read_inventories(c: &Client, uuid: &str) -> Result<Inventories, RemoteError> {
    c.api()
        .inventories(MV, uuid)
        .await
        .map_err(|e| RemoteError::of(&format!("GET /resource_providers/{uuid}/inventories"), &e))
}

/// PUTs the inventories `make` derives from the ones read, re-reading after a 409
/// `placement.concurrent_update`; nothing is written when they already match.
/// Returns whether it wrote.
async fn cas_inventories(
    c: &Client,
    uuid: &str,
    make: impl Fn(&Map<InventoryRecord>) -> Map<InventoryRecord>,
) -> Result<bool, RemoteError> {
    let path = format!("/resource_providers/{uuid}/inventories");
    for _ in 0..CAS_ATTEMPTS {
        let have = read_inventories(c, uuid).await?;
        let current = records(&have);
        let want = make(&current);
        if inventory_key(&current) == inventory_key(&want) {
            return Ok(false);
        }
        let body = InventoriesPut {
            resource_provider_generation: have.resource_provider_generation,
            inventories: want,
        };
        match c.api().set_inventories(MV, uuid, &body).await {
            Ok(_) => return Ok(true),
            Err(e) if lost_race(&e) => continue,
            Err(e) => return Err(RemoteError::of(&format!("PUT {path}"), &e)),
        }
    }
    Err(too_many(&path))
}

async fn sync_inventories(
    c: &Client,
    p: &LocalProvider,
    classes_done: &mut BTreeSet<String>,
) -> Result<bool, RemoteError> {
    let want: Map<InventoryRecord> = p
        .inventories
        .iter()
        .map(|i| (i.class.clone(), record(i)))
        .collect();
    let have = read_inventories(c, &p.uuid).await?;
    if inventory_key(&records(&have)) == inventory_key(&want) {
        return Ok(false);
    }
    for class in want.keys().filter(|k| k.starts_with("CUSTOM_")) {
        if classes_done.contains(class) {
            continue;
        }
        c.api()
            .ensure_resource_class(MV, class)
            .await
            .map_err(|e| RemoteError::of(&format!("PUT /resource_classes/{class}"), &e))?;
        classes_done.insert(class.to_owned());
    }
    cas_inventories(c, &p.uuid, |_| want.clone()).await
}

/// Sets `reserved = total` on every inventory of a provider accel no longer has but
/// that is allocated remotely, so nothing new lands on it.
async fn reserve_all(c: &Client, uuid: &str) -> Result<(), RemoteError> {
    cas_inventories(c, uuid, |have| {
        have.iter()
            .map(|(k, i)| {
                let mut i = i.clone();
                i.reserved = Some(i.total);
                (k.to_owned(), i)
            })
            .collect()
    })
    .await
    .map(|_| ())
}
