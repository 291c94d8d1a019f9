//! `POST /reshaper` (1.30): atomically replace the inventories of some providers and
//! the allocations of some consumers.
//!
//! The transaction itself, in upstream's order, is the store's `Store::reshape`
//! ([`accel_store::placement::reshape`]); this handler parses the body and words the
//! refusals.

use super::allocations::{consumer_write, post_item_schema, UUID_PATTERN};
use super::error::{
    consumer_generation, invalid_inventory, inventory_in_use, placement_refusal, race, ApiError,
    ApiResult, Code,
};
use super::inventories::{from_record, put_all_schema};
use super::AppState;
use super::{authorize, Reply, Req};
use accel_api::placement::Reshape;
use accel_core::policy::placement as rules;
use accel_store::placement::allocations::{ConsumerWrite, Refusal};
use accel_store::placement::reshape::{ProviderInventories, ReshapeRefusal as Refused};
use accel_store::placement::Refused as StoreRefused;
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

fn schema(req: &Req) -> Value {
    let mut allocations = json!({
        "type": "object",
        "minProperties": 1,
        "additionalProperties": false,
        "patternProperties": {UUID_PATTERN: post_item_schema(req)}
    });
    allocations["minProperties"] = json!(0);
    json!({
        "type": "object",
        "properties": {
            "inventories": {
                "type": "object",
                "patternProperties": {UUID_PATTERN: put_all_schema()},
                "minProperties": 1,
                "additionalProperties": false
            },
            "allocations": allocations
        },
        "required": ["inventories", "allocations"],
        "additionalProperties": false
    })
}

pub async fn reshape(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESHAPER_RESHAPE)?;
    let data: Reshape = req.body(&schema(&req))?;
    let invs: Vec<ProviderInventories> = data
        .inventories
        .into_iter()
        .map(|(uuid, v)| ProviderInventories {
            inventories: v
                .inventories
                .iter()
                .map(|(class, rec)| from_record(class, -1, rec))
                .collect(),
            uuid,
            generation: v.resource_provider_generation,
        })
        .collect();
    let writes: Vec<ConsumerWrite> = data
        .allocations
        .into_iter()
        .map(|(c, v)| consumer_write(&req, &c, v))
        .collect();
    let attempts = app.config.allocation_conflict_retry_count;
    let result = app.store.reshape(&invs, &writes, attempts).await;
    match result {
        Ok(Ok(())) => Ok(Reply::no_content()),
        Ok(Err(Refused::ProviderNotFound(u))) => Err(ApiError::bad_request(format!(
            "Resource provider {u} in inventories not found: No resource provider with uuid {u} found"
        ))
        .with_code(Code::ProviderNotFound)),
        Ok(Err(Refused::Generation { rp, actual, given })) => Err(ApiError::concurrent(format!(
            "resource provider generation conflict for provider {rp}: actual: {actual}, given: {given}"
        ))),
        Ok(Err(Refused::Allocation(r))) => Err(match r {
            Refusal::ConsumerGeneration { expected, got } => {
                ApiError::concurrent(consumer_generation(expected, got))
            }
            Refusal::NoSuchProvider(u) => ApiError::bad_request(format!(
                "Allocation for resource provider '{u}' that does not exist."
            )),
            Refusal::NoSuchClass(n) => ApiError::bad_request(format!(
                "malformed reshaper data: No such resource class {n}."
            )),
            Refusal::InvalidInventory(i) => ApiError::new(
                StatusCode::CONFLICT,
                format!("Unable to allocate inventory: {}", invalid_inventory(&i)),
            ),
        }),
        Err(e) => Err(match (placement_refusal(&e), race(&e)) {
            (Some(StoreRefused::InventoryInUse { uuid, classes }), _) => ApiError::conflict(
                format!("update conflict: {}", inventory_in_use(uuid, classes)),
            )
            .with_code(Code::InventoryInUse),
            (_, Some(m)) => ApiError::concurrent(format!("update conflict: {m}")),
            _ => e.into(),
        }),
    }
}
