//! `/resource_providers/{uuid}/inventories[/{resource_class}]`.
//!
//! Every write is a full-set replacement in the store (`Store::inventories().change`)
//! inside one transaction, guarded by the provider generation the client sent (or, for
//! `DELETE` of one class, the generation just read).

use super::error::{inventory_in_use, placement_refusal, race, ApiError, ApiResult, Code};
use super::resource_providers::{body_of_provider, exists, provider_url};
use super::AppState;
use super::{authorize, Reply, Req};
use accel_api::placement::{self as api, mv, InventoriesPut, InventoryRecord};
use accel_core::capacity::Limits;
use accel_core::policy::placement as rules;
use accel_store::placement::inventories::{Change, ChangeRefusal as Refusal, Inventory};
use accel_store::placement::Refused;
use accel_store::StoreError;
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

const MAX_INT: i64 = 2_147_483_647;
const MAX_FLOAT: f64 = 3.40282e38;
const RC_PATTERN: &str = "^[A-Z0-9_]+$";

fn record_schema(gen_required: bool, with_class: bool) -> Value {
    let int = |min: i64| json!({"type": "integer", "maximum": MAX_INT, "minimum": min});
    let mut props = json!({
        "resource_provider_generation": {"type": "integer"},
        "total": int(1),
        "reserved": int(0),
        "min_unit": int(1),
        "max_unit": int(1),
        "step_size": int(1),
        "allocation_ratio": {"type": "number", "maximum": MAX_FLOAT},
    });
    let mut required = vec![json!("total")];
    if gen_required {
        required.push(json!("resource_provider_generation"));
    }
    if with_class {
        props["resource_class"] = json!({"type": "string", "pattern": RC_PATTERN});
        required.push(json!("resource_class"));
    }
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

pub(crate) fn put_all_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "resource_provider_generation": {"type": "integer"},
            "inventories": {"type": "object", "patternProperties": {RC_PATTERN: record_schema(false, false)}},
        },
        "required": ["resource_provider_generation", "inventories"],
        "additionalProperties": false,
    })
}

/// Inventory fields from a validated record, with upstream's defaults.
pub(crate) fn from_record(rc_name: &str, rc_id: i64, v: &InventoryRecord) -> Inventory {
    Inventory {
        rc_id,
        rc_name: rc_name.to_owned(),
        limits: Limits {
            total: v.total,
            reserved: v.reserved.unwrap_or(0),
            min_unit: v.min_unit.unwrap_or(1),
            max_unit: v.max_unit.unwrap_or(MAX_INT),
            step_size: v.step_size.unwrap_or(1),
            allocation_ratio: v.allocation_ratio.unwrap_or(1.0),
        },
        modified: accel_store::now(),
    }
}

fn render(inv: &Inventory) -> api::Inventory {
    api::Inventory::from(inv.limits)
}

fn render_one(inv: &Inventory, generation: i64) -> api::ProviderInventory {
    api::ProviderInventory {
        inventory: render(inv),
        resource_provider_generation: generation,
    }
}

/// A provider's inventories, and when the newest changed (none when there is none:
/// upstream then sends no `last-modified`).
fn render_all(invs: &[Inventory], generation: i64) -> (api::Inventories, Option<i64>) {
    let body = api::Inventories {
        inventories: invs
            .iter()
            .map(|i| (i.rc_name.clone(), render(i)))
            .collect(),
        resource_provider_generation: generation,
    };
    let modified = invs.iter().map(|i| i.modified).max();
    (body, modified)
}

/// Upstream refuses capacity <= 0 before 1.26 and < 0 from 1.26.
fn check_capacity(req: &Req, uuid: &str, inv: &Inventory) -> Result<(), String> {
    let cap = inv.capacity();
    let bad = if req.mv(mv::ZERO_CAPACITY) {
        cap < 0
    } else {
        cap <= 0
    };
    if !bad {
        return Ok(());
    }
    let tail = if req.mv(mv::ZERO_CAPACITY) {
        "The reserved value is greater than total."
    } else {
        "The reserved value is greater than or equal to total."
    };
    Err(format!(
        "Invalid inventory for '{}' on resource provider '{uuid}'. {tail}",
        inv.rc_name
    ))
}

fn rp_not_found(uuid: &str) -> ApiError {
    ApiError::not_found(format!(
        "No resource provider with uuid {uuid} found : No resource provider with uuid {uuid} found"
    ))
}

pub async fn list(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_INVENTORIES_LIST)?;
    let uuid = req.param(0).to_owned();
    let (rp, invs) = app
        .store
        .inventories()
        .of_provider(&uuid)
        .await?
        .ok_or_else(|| rp_not_found(&uuid))?;
    let (body, modified) = render_all(&invs, rp.generation);
    Ok(Reply::typed(&body)?.modified_if(modified))
}

pub async fn show(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_INVENTORIES_SHOW)?;
    let uuid = req.param(0).to_owned();
    let rc = req.param(1).to_owned();
    let (rp, invs) = app
        .store
        .inventories()
        .of_provider(&uuid)
        .await?
        .ok_or_else(|| rp_not_found(&uuid))?;
    let inv = invs
        .into_iter()
        .find(|i| i.rc_name == rc)
        .ok_or_else(|| ApiError::not_found(format!("No inventory of class {rc} for {uuid}")))?;
    Ok(Reply::typed(&render_one(&inv, rp.generation))?.modified(inv.modified))
}

/// The operations that rewrite a provider's inventory.
enum Op {
    ReplaceAll {
        generation: i64,
        records: Vec<(String, InventoryRecord)>,
    },
    Create {
        class: String,
        record: InventoryRecord,
    },
    Update {
        class: String,
        generation: i64,
        record: InventoryRecord,
    },
    Delete {
        class: String,
    },
    DeleteAll,
}

/// How an inventory write failed, as its handlers word it.
enum Failed {
    /// Refused before writing.
    Refused(Refusal),
    /// It would drop classes still allocated: upstream's sentence.
    InUse(String),
    /// It lost a generation race.
    Raced,
    /// Anything else (a missing provider among them).
    Other(StoreError),
}

/// Runs `op` through the store's one inventory write; a body whose capacity is invalid
/// for this microversion is refused there, in upstream's order.
async fn apply(
    app: &AppState,
    uuid: &str,
    op: Op,
    req: &Req,
) -> Result<(i64, Vec<Inventory>), Failed> {
    let parse = |class: &str, rec: &InventoryRecord| from_record(class, -1, rec);
    let change = match op {
        Op::ReplaceAll {
            generation,
            records,
        } => Change::ReplaceAll {
            generation,
            records: records.iter().map(|(c, rec)| parse(c, rec)).collect(),
        },
        Op::Create { class, record } => Change::Create(parse(&class, &record)),
        Op::Update {
            class,
            generation,
            record,
        } => Change::Update {
            generation,
            record: parse(&class, &record),
        },
        Op::Delete { class } => Change::Delete { class },
        Op::DeleteAll => Change::DeleteAll,
    };
    // Capacity is a property of the body alone; check it first as upstream does.
    let records: &[Inventory] = match &change {
        Change::ReplaceAll { records, .. } => records,
        Change::Create(r) | Change::Update { record: r, .. } => std::slice::from_ref(r),
        Change::Delete { .. } | Change::DeleteAll => &[],
    };
    let invalid = records
        .iter()
        .find_map(|inv| check_capacity(req, uuid, inv).err());
    match app.store.inventories().change(uuid, change, invalid).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(r)) => Err(Failed::Refused(r)),
        Err(e) => Err(match placement_refusal(&e) {
            Some(Refused::InventoryInUse { uuid, classes }) => {
                Failed::InUse(inventory_in_use(uuid, classes))
            }
            _ if race(&e).is_some() => Failed::Raced,
            _ => Failed::Other(e),
        }),
    }
}

/// Upstream's 409 for classes still allocated, as its object layer raises it.
fn in_use(m: String) -> ApiError {
    ApiError::conflict(m).with_code(Code::InventoryInUse)
}

fn generation_conflict() -> ApiError {
    ApiError::concurrent("resource provider generation conflict")
}

/// A refusal the operation cannot produce (the store's refusals are shared by every
/// inventory change).
fn unexpected(r: Refusal) -> ApiError {
    ApiError::internal(format!("unexpected inventory refusal: {r:?}"))
}

/// A failure of a write that looked the provider up first: one gone meanwhile is
/// worded as the lookup words it.
fn other(uuid: &str, e: StoreError) -> ApiError {
    match placement_refusal(&e) {
        Some(Refused::NoProvider { .. }) => rp_not_found(uuid),
        _ => e.into(),
    }
}

pub async fn replace_all(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_INVENTORIES_UPDATE)?;
    let uuid = req.param(0).to_owned();
    let data: InventoriesPut = body_of_provider(&app, &req, &uuid, &put_all_schema()).await?;
    let generation = data.resource_provider_generation;
    let records: Vec<(String, InventoryRecord)> = data.inventories.into_iter().collect();
    match apply(&app, &uuid, Op::ReplaceAll { generation, records }, &req).await {
        Ok((generation, invs)) => {
            let (body, modified) = render_all(&invs, generation);
            Ok(Reply::typed(&body)?.modified_if(modified))
        }
        Err(Failed::Refused(Refusal::Generation)) => Err(generation_conflict()),
        Err(Failed::Refused(Refusal::UnknownClass(c))) => Err(ApiError::bad_request(format!(
            "Unknown resource class in inventory for resource provider {uuid}: No such resource class {c}."
        ))),
        Err(Failed::Refused(Refusal::Invalid(m))) => Err(ApiError::bad_request(format!(
            "Unable to update inventory for resource provider {uuid}: {m}"
        ))),
        Err(Failed::InUse(m)) => {
            Err(ApiError::conflict(format!("update conflict: {m}")).with_code(Code::InventoryInUse))
        }
        Err(Failed::Raced) => Err(ApiError::concurrent(
            "update conflict: Another thread concurrently updated the data. Please retry your update",
        )),
        Err(Failed::Refused(r)) => Err(unexpected(r)),
        // The body was accepted without looking the provider up first: a missing
        // provider is the lookup's 404.
        Err(Failed::Other(e)) => Err(e.into()),
    }
}

pub async fn create(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_INVENTORIES_CREATE)?;
    let uuid = req.param(0).to_owned();
    let data: InventoryRecord =
        body_of_provider(&app, &req, &uuid, &record_schema(false, true)).await?;
    let class = data.resource_class.clone().unwrap_or_default();
    match apply(&app, &uuid, Op::Create { class: class.clone(), record: data }, &req).await {
        Ok((generation, invs)) => {
            let inv = invs
                .iter()
                .find(|i| i.rc_name == class)
                .ok_or_else(|| ApiError::internal("inventory vanished after create"))?;
            Ok(Reply::typed(&render_one(inv, generation))?
                .with_status(StatusCode::CREATED)
                .header("location", format!("{}/inventories/{class}", provider_url(&uuid)))
                .modified(inv.modified))
        }
        Err(Failed::Refused(Refusal::UnknownClass(c) | Refusal::Missing(c))) => Err(ApiError::bad_request(format!(
            "Unable to create inventory for resource provider {uuid}: No such resource class {c}."
        ))),
        Err(Failed::Refused(Refusal::Invalid(m))) => Err(ApiError::bad_request(format!(
            "Unable to create inventory for resource provider {uuid}: {m}"
        ))),
        Err(Failed::Refused(Refusal::Exists(c))) => Err(ApiError::concurrent(format!(
            "Update conflict: Inventory for {c} on resource provider {uuid} already exists."
        ))),
        Err(Failed::Refused(Refusal::Generation)) | Err(Failed::Raced) => {
            Err(ApiError::concurrent(
                "Update conflict: Another thread concurrently updated the data. Please retry your update",
            ))
        }
        Err(Failed::InUse(m)) => Err(in_use(m)),
        // The body was accepted without looking the provider up first: a missing
        // provider is the lookup's 404.
        Err(Failed::Other(e)) => Err(e.into()),
    }
}

pub async fn update(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_INVENTORIES_UPDATE)?;
    let uuid = req.param(0).to_owned();
    let class = req.param(1).to_owned();
    let data: InventoryRecord =
        body_of_provider(&app, &req, &uuid, &record_schema(true, false)).await?;
    let generation = data.resource_provider_generation.unwrap_or(-1);
    match apply(&app, &uuid, Op::Update { class: class.clone(), generation, record: data }, &req).await {
        Ok((generation, invs)) => {
            let inv = invs
                .iter()
                .find(|i| i.rc_name == class)
                .ok_or_else(|| ApiError::internal("inventory vanished after update"))?;
            Ok(Reply::typed(&render_one(inv, generation))?.modified(inv.modified))
        }
        Err(Failed::Refused(Refusal::Generation)) => Err(generation_conflict()),
        // Upstream's object layer raises this `NotFound` and the handler lets it through.
        Err(Failed::Refused(Refusal::UnknownClass(c))) => {
            Err(ApiError::not_found(format!("No such resource class {c}.")).without_vary())
        }
        Err(Failed::Refused(Refusal::Missing(c))) => Err(ApiError::bad_request(format!(
            "No inventory record with resource class for resource provider {uuid}: No inventory of class {c} found."
        ))),
        Err(Failed::Refused(Refusal::Invalid(m))) => Err(ApiError::bad_request(format!(
            "Unable to update inventory for resource provider {uuid}: {m}"
        ))),
        Err(Failed::Raced) => Err(ApiError::concurrent(
            "update conflict: Another thread concurrently updated the data. Please retry your update",
        )),
        Err(Failed::Refused(r)) => Err(unexpected(r)),
        Err(Failed::InUse(m)) => Err(in_use(m)),
        // The body was accepted without looking the provider up first: a missing
        // provider is the lookup's 404.
        Err(Failed::Other(e)) => Err(e.into()),
    }
}

pub async fn delete(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_INVENTORIES_DELETE)?;
    let uuid = req.param(0).to_owned();
    let class = req.param(1).to_owned();
    exists(&app, &uuid).await?;
    match apply(&app, &uuid, Op::Delete { class: class.clone() }, &req).await {
        Ok(_) => Ok(Reply::no_content()),
        Err(Failed::Refused(Refusal::UnknownClass(c))) => Err(ApiError::not_found(format!(
            "No inventory of class {c} found for delete: No such resource class {c}."
        ))),
        Err(Failed::Refused(Refusal::Missing(c))) => Err(ApiError::not_found(format!(
            "No inventory of class {c} found for delete: No inventory of class {c} found for delete"
        ))),
        Err(Failed::InUse(m)) => Err(ApiError::concurrent(format!(
            "Unable to delete inventory of class {class}: {m}"
        ))),
        Err(Failed::Raced) => Err(ApiError::concurrent(format!(
            "Unable to delete inventory of class {class}: Another thread concurrently updated the data. Please retry your update"
        ))),
        Err(Failed::Refused(r)) => Err(unexpected(r)),
        Err(Failed::Other(e)) => Err(other(&uuid, e)),
    }
}

pub async fn delete_all(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_INVENTORIES_DELETE)?;
    let uuid = req.param(0).to_owned();
    exists(&app, &uuid).await?;
    match apply(&app, &uuid, Op::DeleteAll, &req).await {
        Ok(_) => Ok(Reply::no_content()),
        Err(Failed::InUse(m)) => Err(in_use(m)),
        Err(Failed::Raced) => Err(ApiError::concurrent(format!(
            "Unable to delete inventory for resource provider {uuid} because the inventory was updated by another process. Please retry your request."
        ))),
        Err(Failed::Refused(r)) => Err(unexpected(r)),
        Err(Failed::Other(e)) => Err(other(&uuid, e)),
    }
}
