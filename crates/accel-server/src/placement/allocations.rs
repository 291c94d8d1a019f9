//! `/allocations`, `/allocations/{consumer_uuid}` and
//! `/resource_providers/{uuid}/allocations`.
//!
//! Every write replaces the full allocation set of each named consumer in one
//! transaction (`Store::allocations().replace`); a write that loses a
//! provider-generation race is rerun from scratch up to
//! `allocation_conflict_retry_count` times, as upstream retries, before answering 409.

use super::error::{consumer_generation, invalid_inventory, race, ApiError, ApiResult};
use super::AppState;
use super::{authorize, qs, Reply, Req};
use accel_api::placement::{
    self as api, mv, AllocationsPost, ConsumerAllocations, ConsumerAllocationsView, ConsumerUsage,
    ListAllocations, ProviderAllocationView, ProviderAllocations, Resources,
};
use accel_core::policy::placement as rules;
use accel_store::placement::allocations::{AllocationRow, ConsumerWrite, Refusable, Refusal};
use serde_json::{json, Value};
use std::sync::Arc;

pub(crate) const UUID_PATTERN: &str = "^[0-9a-fA-F-]{36}$";
const RC_PATTERN: &str = "^[A-Z0-9_]+$";
const GROUP_PAT_1_33: &str = "[a-zA-Z0-9_-]{1,64}";
const CONSUMER_TYPE_PATTERN: &str = "^[A-Z0-9_]+$";

fn resources_schema() -> Value {
    json!({
        "type": "object",
        "minProperties": 1,
        "patternProperties": {RC_PATTERN: {"type": "integer", "minimum": 1}},
        "additionalProperties": false
    })
}

fn id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255})
}

/// `PUT /allocations/{c}` from 1.0 (list form).
fn schema_v1_0() -> Value {
    json!({
        "type": "object",
        "properties": {
            "allocations": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "resource_provider": {
                            "type": "object",
                            "properties": {"uuid": {"type": "string", "format": "uuid"}},
                            "additionalProperties": false,
                            "required": ["uuid"]
                        },
                        "resources": resources_schema()
                    },
                    "required": ["resource_provider", "resources"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["allocations"],
        "additionalProperties": false
    })
}

fn schema_v1_8() -> Value {
    let mut s = schema_v1_0();
    s["properties"]["project_id"] = id_schema();
    s["properties"]["user_id"] = id_schema();
    s["required"] = json!(["allocations", "project_id", "user_id"]);
    s
}

/// The dict form (1.12).
fn schema_v1_12() -> Value {
    json!({
        "type": "object",
        "properties": {
            "allocations": {
                "type": "object",
                "minProperties": 1,
                "patternProperties": {
                    UUID_PATTERN: {
                        "type": "object",
                        "properties": {
                            "generation": {"type": "integer"},
                            "resources": resources_schema()
                        },
                        "required": ["resources"],
                        "additionalProperties": false
                    }
                },
                "additionalProperties": false
            },
            "project_id": id_schema(),
            "user_id": id_schema()
        },
        "additionalProperties": false,
        "required": ["allocations", "project_id", "user_id"]
    })
}

fn deletable() -> Value {
    let mut s = schema_v1_12();
    s["properties"]["allocations"]["minProperties"] = json!(0);
    s
}

fn schema_v1_28() -> Value {
    let mut s = deletable();
    s["properties"]["consumer_generation"] =
        json!({"type": ["integer", "null"], "additionalProperties": false});
    s["required"] = json!([
        "allocations",
        "project_id",
        "user_id",
        "consumer_generation"
    ]);
    s
}

fn schema_v1_34() -> Value {
    let mut s = schema_v1_28();
    s["properties"]["mappings"] = json!({
        "type": "object",
        "minProperties": 1,
        "patternProperties": {
            GROUP_PAT_1_33: {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "format": "uuid"}
            }
        }
    });
    s
}

fn schema_v1_38() -> Value {
    let mut s = schema_v1_34();
    s["properties"]["consumer_type"] = json!({
        "type": "string",
        "pattern": CONSUMER_TYPE_PATTERN,
        "minLength": 1,
        "maxLength": 255
    });
    s["required"] = json!([
        "allocations",
        "project_id",
        "user_id",
        "consumer_generation",
        "consumer_type"
    ]);
    s
}

/// One consumer's body from 1.28 on, the same in `PUT /allocations/{consumer}` and in
/// each consumer of `POST /allocations`; `None` before 1.28.
fn consumer_schema(req: &Req) -> Option<Value> {
    if req.mv(mv::CONSUMER_TYPES) {
        Some(schema_v1_38())
    } else if req.mv(mv::CANDIDATE_MAPPINGS) {
        Some(schema_v1_34())
    } else if req.mv(mv::CONSUMER_GENERATION) {
        Some(schema_v1_28())
    } else {
        None
    }
}

fn put_schema(req: &Req) -> Value {
    if let Some(s) = consumer_schema(req) {
        s
    } else if req.mv(mv::ALLOCATIONS_DICT) {
        schema_v1_12()
    } else if req.mv(mv::ALLOCATION_PROJECT_USER) {
        schema_v1_8()
    } else {
        schema_v1_0()
    }
}

/// The per-consumer schema of `POST /allocations` (and the reshaper) at `req`'s
/// microversion.
pub(crate) fn post_item_schema(req: &Req) -> Value {
    consumer_schema(req).unwrap_or_else(deletable)
}

fn post_schema(req: &Req) -> Value {
    json!({
        "type": "object",
        "minProperties": 1,
        "additionalProperties": false,
        "patternProperties": {UUID_PATTERN: post_item_schema(req)}
    })
}

/// One consumer's validated body (dict form) as a store request.
pub(crate) fn consumer_write(req: &Req, uuid: &str, data: ConsumerAllocations) -> ConsumerWrite {
    ConsumerWrite {
        uuid: uuid.to_owned(),
        project_id: data.project_id,
        user_id: data.user_id,
        check_generation: req.mv(mv::CONSUMER_GENERATION),
        generation: data.consumer_generation.flatten(),
        consumer_type: if req.mv(mv::CONSUMER_TYPES) {
            data.consumer_type
        } else {
            None
        },
        allocations: data
            .allocations
            .into_iter()
            .map(|(rp, a)| (rp, a.resources.0))
            .collect(),
    }
}

/// The `outcome` label of `accel_allocation_claims_total` for one write's result.
fn claim_outcome(result: &Refusable<(), Refusal>) -> &'static str {
    match result {
        Ok(Ok(())) => "committed",
        Ok(Err(Refusal::InvalidInventory(_))) => "capacity_refused",
        Ok(Err(Refusal::ConsumerGeneration { .. })) => "generation_conflict",
        Err(e) if race(e).is_some() => "generation_conflict",
        Ok(Err(_)) => "invalid",
        Err(_) => "error",
    }
}

/// The sentence Placement answers `r` with, for another API that reports it (a DRA
/// claim the allocation write refused).
pub(crate) fn refusal_words(r: &Refusal) -> String {
    match write_error(Ok(Err(r.clone())), "") {
        Err(e) => e.message,
        Ok(()) => String::new(),
    }
}

/// Words a refusal or failure of an allocation write as upstream does; `class_prefix`
/// starts the unknown-class message.
fn write_error(result: Refusable<(), Refusal>, class_prefix: &str) -> ApiResult<()> {
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(Refusal::ConsumerGeneration { expected, got })) => {
            Err(ApiError::concurrent(consumer_generation(expected, got)))
        }
        Ok(Err(Refusal::NoSuchProvider(u))) => Err(ApiError::bad_request(format!(
            "Allocation for resource provider '{u}' that does not exist."
        ))),
        Ok(Err(Refusal::NoSuchClass(n))) => Err(ApiError::bad_request(format!(
            "{class_prefix}No such resource class {n}."
        ))),
        Ok(Err(Refusal::InvalidInventory(i))) => Err(ApiError::conflict(format!(
            "Unable to allocate inventory: {}",
            invalid_inventory(&i)
        ))),
        Err(e) => Err(match race(&e) {
            Some(m) => ApiError::concurrent(format!(
                "Inventory and/or allocations changed while attempting to allocate: {m}"
            )),
            None => e.into(),
        }),
    }
}

pub async fn put_consumer(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::ALLOCATIONS_UPDATE)?;
    let raw = req.param(0);
    if !qs::is_uuid_like(raw) {
        return Err(ApiError::bad_request(format!(
            "Malformed consumer_uuid: {raw}"
        )));
    }
    let uuid = qs::normalize_uuid(raw);
    let write = if req.mv(mv::ALLOCATIONS_DICT) {
        consumer_write(&req, &uuid, req.body(&put_schema(&req))?)
    } else {
        let data: ListAllocations = req.body(&put_schema(&req))?;
        // The list form: later entries for one provider replace earlier ones.
        let mut allocations: Vec<(String, Vec<(String, i64)>)> = Vec::new();
        for a in data.allocations {
            let (rp, res) = (a.resource_provider.uuid, a.resources.0);
            match allocations.iter_mut().find(|(u, _)| *u == rp) {
                Some(slot) => slot.1 = res,
                None => allocations.push((rp, res)),
            }
        }
        ConsumerWrite {
            uuid: uuid.clone(),
            project_id: data.project_id,
            user_id: data.user_id,
            allocations,
            ..Default::default()
        }
    };
    let result = app
        .store
        .allocations()
        .replace(&[write], app.config.allocation_conflict_retry_count)
        .await;
    app.metrics.claim(claim_outcome(&result));
    write_error(
        result,
        &format!("Unable to allocate inventory for consumer {uuid}: "),
    )?;
    Ok(Reply::no_content())
}

pub async fn post_many(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::ALLOCATIONS_MANAGE)?;
    let data: AllocationsPost = req.body(&post_schema(&req))?;
    let writes: Vec<ConsumerWrite> = data
        .into_iter()
        .map(|(c, v)| consumer_write(&req, &c, v))
        .collect();
    let result = app
        .store
        .allocations()
        .replace(&writes, app.config.allocation_conflict_retry_count)
        .await;
    app.metrics.claim(claim_outcome(&result));
    write_error(result, "Unable to allocate inventory ")?;
    Ok(Reply::no_content())
}

fn last_modified(rows: &[AllocationRow]) -> i64 {
    rows.iter()
        .map(|r| r.modified)
        .max()
        .unwrap_or_else(accel_store::now)
}

pub async fn for_consumer(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::ALLOCATIONS_LIST)?;
    let rows = app.store.allocations().of_consumer(req.param(0)).await?;
    let mut out = ConsumerAllocationsView::default();
    for r in &rows {
        let entry = out
            .allocations
            .entry(&r.rp_uuid, || ProviderAllocationView {
                resources: Resources::default(),
                generation: r.rp_generation,
            });
        entry.resources.insert(r.rc_name.clone(), r.used);
        entry.generation = r.rp_generation;
    }
    if let (Some(first), true) = (rows.first(), req.mv(mv::ALLOCATIONS_DICT)) {
        out.project_id = Some(first.project_id.clone());
        out.user_id = Some(first.user_id.clone());
        if req.mv(mv::CONSUMER_GENERATION) {
            out.consumer_generation = Some(first.consumer_generation);
        }
        if req.mv(mv::CONSUMER_TYPES) {
            out.consumer_type = Some(
                first
                    .consumer_type
                    .as_deref()
                    .unwrap_or("unknown")
                    .to_owned(),
            );
        }
    }
    Ok(Reply::typed(&out)?.modified(last_modified(&rows)))
}

pub async fn for_provider(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_ALLOCATIONS_LIST)?;
    let uuid = req.param(0).to_owned();
    let (rp, rows) = app
        .store
        .allocations()
        .of_provider(&uuid)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "Resource provider '{uuid}' not found: No resource provider with uuid {uuid} found"
            ))
        })?;
    let mut body = ProviderAllocations {
        allocations: api::Map::new(),
        resource_provider_generation: rp.generation,
    };
    for r in &rows {
        let entry = body.allocations.entry(&r.consumer_uuid, || ConsumerUsage {
            resources: Resources::default(),
            consumer_generation: None,
        });
        entry.resources.insert(r.rc_name.clone(), r.used);
        if req.mv(mv::CONSUMER_GENERATION) {
            entry.consumer_generation = Some(r.consumer_generation);
        }
    }
    Ok(Reply::typed(&body)?.modified(last_modified(&rows)))
}

pub async fn delete_consumer(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::ALLOCATIONS_DELETE)?;
    let uuid = req.param(0).to_owned();
    let deleted = app.store.allocations().delete_consumer(&uuid).await?;
    if !deleted {
        return Err(ApiError::not_found(format!(
            "No allocations for consumer '{uuid}'"
        )));
    }
    Ok(Reply::no_content())
}
