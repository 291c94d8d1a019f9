//! One push: make the remote subtree of a host's compute node match the local device
//! providers. Idempotent; when already in sync it only reads (three list requests plus
//! two per provider).
//!
//! Cyborg does the same writes (reference §5.4) but only on change and without
//! re-reading on generation conflicts; here every write carries the generation just
//! read and a 409 `placement.concurrent_update` re-reads and tries again.

use super::client::{Client, RemoteError, Reply};
use accel_store::accelerator::pushes::{LocalInventory, LocalProvider, LocalTree};
use reqwest::Method;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Placement microversion of every request but a move: 1.26 lets `reserved` equal
/// `total`, and has `in_tree` (1.14), `required` (1.18) and POST bodies (1.20).
const MV: &str = "1.26";
/// Moving a provider to another parent (`PUT /resource_providers/{uuid}`).
const MV_MOVE: &str = "1.37";
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

fn fail(r: &Reply, what: &str) -> RemoteError {
    RemoteError(r.describe(what))
}

#[derive(Debug, Clone)]
struct Remote {
    name: String,
    parent: Option<String>,
}

async fn list(c: &Client, query: &str) -> Result<HashMap<String, Remote>, RemoteError> {
    let path = format!("/resource_providers?{query}");
    let r = c.call(Method::GET, &path, MV, None).await?;
    if r.status == 400 && r.body.to_string().contains("No such trait") {
        // Upstream refuses `required` with an unknown trait: nobody carries it yet.
        return Ok(HashMap::new());
    }
    if !r.ok() {
        return Err(fail(&r, &format!("GET {path}")));
    }
    Ok(r.body["resource_providers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["uuid"].as_str()?.to_owned(),
                Remote {
                    name: p["name"].as_str()?.to_owned(),
                    parent: p["parent_provider_uuid"].as_str().map(str::to_owned),
                },
            ))
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
    let tree = list(c, &format!("in_tree={cn}")).await?;
    let owned = list(c, &format!("in_tree={cn}&required={OWNER_TRAIT}")).await?;
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
        let r = c.call(Method::DELETE, &path, MV, None).await?;
        match r.status {
            204 | 404 => out.deleted += 1,
            409 => {
                tracing::info!(provider = %uuid, reason = %r.describe("DELETE"), "device provider in use in the external Placement: reserved until free");
                reserve_all(c, uuid).await?;
                out.held
                    .push(tree.get(uuid).map(|t| t.name.clone()).unwrap_or_default());
            }
            _ => return Err(fail(&r, &format!("DELETE {path}"))),
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
    let r = c.call(Method::GET, &path, MV, None).await?;
    if r.ok() {
        move_provider(c, p, parent).await?;
        return Ok(false);
    }
    if r.status != 404 {
        return Err(fail(&r, &format!("GET {path}")));
    }
    let body = json!({"uuid": p.uuid, "name": p.name, "parent_provider_uuid": parent});
    let r = c
        .call(Method::POST, "/resource_providers", MV, Some(&body))
        .await?;
    if !r.ok() {
        return Err(fail(&r, &format!("POST /resource_providers ({})", p.name)));
    }
    Ok(true)
}

async fn move_provider(c: &Client, p: &LocalProvider, parent: &str) -> Result<(), RemoteError> {
    let path = format!("/resource_providers/{}", p.uuid);
    let body = json!({"name": p.name, "parent_provider_uuid": parent});
    let r = c.call(Method::PUT, &path, MV_MOVE, Some(&body)).await?;
    if !r.ok() {
        return Err(fail(&r, &format!("PUT {path}")));
    }
    Ok(())
}

/// `(generation, body)` of a provider's sub-resource.
async fn read(c: &Client, path: &str) -> Result<(i64, Value), RemoteError> {
    let r = c.call(Method::GET, path, MV, None).await?;
    if !r.ok() {
        return Err(fail(&r, &format!("GET {path}")));
    }
    let g = r.body["resource_provider_generation"]
        .as_i64()
        .ok_or_else(|| RemoteError(format!("GET {path}: no resource_provider_generation")))?;
    Ok((g, r.body))
}

/// PUTs `make(generation)` to `path`, re-reading the generation after a 409
/// `placement.concurrent_update`. `same` says whether the body read already matches
/// (nothing is written then). Returns whether it wrote.
async fn cas_put(
    c: &Client,
    path: &str,
    same: impl Fn(&Value) -> bool,
    make: impl Fn(i64) -> Value,
) -> Result<bool, RemoteError> {
    for _ in 0..CAS_ATTEMPTS {
        let (g, have) = read(c, path).await?;
        if same(&have) {
            return Ok(false);
        }
        let r = c.call(Method::PUT, path, MV, Some(&make(g))).await?;
        if r.ok() {
            return Ok(true);
        }
        if r.status == 409 && r.code() == "placement.concurrent_update" {
            continue;
        }
        return Err(fail(&r, &format!("PUT {path}")));
    }
    Err(RemoteError(format!(
        "PUT {path}: generation conflicts {CAS_ATTEMPTS} times in a row"
    )))
}

async fn sync_traits(c: &Client, p: &LocalProvider) -> Result<bool, RemoteError> {
    let mut want: BTreeSet<String> = p.traits.iter().cloned().collect();
    want.insert(OWNER_TRAIT.to_owned());
    let path = format!("/resource_providers/{}/traits", p.uuid);
    let (_, have) = read(c, &path).await?;
    if names(&have["traits"]) == want {
        return Ok(false);
    }
    for t in want.iter().filter(|t| t.starts_with("CUSTOM_")) {
        let r = c
            .call(Method::PUT, &format!("/traits/{t}"), MV, None)
            .await?;
        if !r.ok() {
            return Err(fail(&r, &format!("PUT /traits/{t}")));
        }
    }
    let list: Vec<&String> = want.iter().collect();
    cas_put(
        c,
        &path,
        |have| names(&have["traits"]) == want,
        |g| json!({"resource_provider_generation": g, "traits": list}),
    )
    .await
}

fn names(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect()
}

fn inventory_json(i: &LocalInventory) -> Value {
    json!({
        "total": i.total, "reserved": i.reserved, "min_unit": i.min_unit,
        "max_unit": i.max_unit, "step_size": i.step_size,
        "allocation_ratio": i.allocation_ratio,
    })
}

/// The remote inventories as comparable tuples (ratio in thousandths).
fn inventory_key(v: &Value) -> BTreeMap<String, [i64; 6]> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, i)| {
            let n = |f: &str| i[f].as_i64().unwrap_or(-1);
            let ratio = (i["allocation_ratio"].as_f64().unwrap_or(-1.0) * 1000.0).round() as i64;
            (
                k.clone(),
                [
                    n("total"),
                    n("reserved"),
                    n("min_unit"),
                    n("max_unit"),
                    n("step_size"),
                    ratio,
                ],
            )
        })
        .collect()
}

async fn sync_inventories(
    c: &Client,
    p: &LocalProvider,
    classes_done: &mut BTreeSet<String>,
) -> Result<bool, RemoteError> {
    let want: Map<String, Value> = p
        .inventories
        .iter()
        .map(|i| (i.class.clone(), inventory_json(i)))
        .collect();
    let want_key = inventory_key(&Value::Object(want.clone()));
    let path = format!("/resource_providers/{}/inventories", p.uuid);
    let (_, have) = read(c, &path).await?;
    if inventory_key(&have["inventories"]) == want_key {
        return Ok(false);
    }
    for class in want.keys().filter(|k| k.starts_with("CUSTOM_")) {
        if classes_done.contains(class) {
            continue;
        }
        let r = c
            .call(Method::PUT, &format!("/resource_classes/{class}"), MV, None)
            .await?;
        if !r.ok() {
            return Err(fail(&r, &format!("PUT /resource_classes/{class}")));
        }
        classes_done.insert(class.clone());
    }
    cas_put(
        c,
        &path,
        |have| inventory_key(&have["inventories"]) == want_key,
        |g| json!({"resource_provider_generation": g, "inventories": want}),
    )
    .await
}

/// Sets `reserved = total` on every inventory of a provider accel no longer has but
/// that is allocated remotely, so nothing new lands on it.
async fn reserve_all(c: &Client, uuid: &str) -> Result<(), RemoteError> {
    let path = format!("/resource_providers/{uuid}/inventories");
    let reserved = |have: &Value| -> Map<String, Value> {
        have["inventories"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, i)| {
                let mut i = i.clone();
                i["reserved"] = i["total"].clone();
                (k.clone(), i)
            })
            .collect()
    };
    for _ in 0..CAS_ATTEMPTS {
        let (g, have) = read(c, &path).await?;
        let want = reserved(&have);
        if Value::Object(want.clone()) == have["inventories"] {
            return Ok(());
        }
        let body = json!({"resource_provider_generation": g, "inventories": want});
        let r = c.call(Method::PUT, &path, MV, Some(&body)).await?;
        if r.ok() {
            return Ok(());
        }
        if r.status == 409 && r.code() == "placement.concurrent_update" {
            continue;
        }
        return Err(fail(&r, &format!("PUT {path}")));
    }
    Err(RemoteError(format!(
        "PUT {path}: generation conflicts {CAS_ATTEMPTS} times in a row"
    )))
}
