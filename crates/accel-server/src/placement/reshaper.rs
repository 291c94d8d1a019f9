//! `POST /reshaper` (1.30): atomically replace the inventories of some providers and
//! the allocations of some consumers.
//!
//! One transaction, in upstream's order: check each named provider exists and has the
//! given generation; ensure the consumers and resolve allocation providers; set an
//! interim inventory (the new records plus every old one, so nothing allocated
//! disappears); replace the allocations (capacity is checked against the interim
//! inventory); then set the final inventories, which refuses to drop a class still in
//! use.

use super::allocations::{consumer_write, post_item_schema, UUID_PATTERN};
use super::error::{ApiError, ApiResult, Code};
use super::inventories::{from_record, put_all_schema};
use super::resource_providers::require;
use super::{authorize, Reply, Req};
use crate::AppState;
use accel_api::placement::{InventoryRecord, Reshape};
use accel_core::policy::placement as rules;
use accel_store::placement::allocations::{self as store, ConsumerWrite, Refusal};
use accel_store::placement::inventories::{self, Inventory};
use accel_store::placement::{lookup, providers};
use accel_store::{Conflict, StoreError};
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

/// Why a reshape was refused.
enum Refused {
    ProviderNotFound(String),
    Generation { rp: String, actual: i64, given: i64 },
    Allocation(Refusal),
}

/// The inventories part: provider uuid, generation given, records by class.
type InventoryRequest = (String, i64, Vec<(String, InventoryRecord)>);

async fn reshape_tx(
    tx: &mut accel_store::Tx,
    invs: &[InventoryRequest],
    writes: &[ConsumerWrite],
) -> Result<Result<(), Refused>, StoreError> {
    let mut rps = Vec::new();
    for (uuid, given, _) in invs {
        let Some(rp) = providers::get(tx, uuid).await? else {
            return Ok(Err(Refused::ProviderNotFound(uuid.clone())));
        };
        if rp.generation != *given {
            return Ok(Err(Refused::Generation {
                rp: uuid.clone(),
                actual: rp.generation,
                given: *given,
            }));
        }
        rps.push(rp);
    }
    let prepared = match store::prepare(tx, writes).await? {
        Ok(p) => p,
        Err(r) => return Ok(Err(Refused::Allocation(r))),
    };
    // Resolve every named class and build the new inventory lists.
    let names: Vec<String> = invs
        .iter()
        .flat_map(|(_, _, recs)| recs.iter().map(|(c, _)| c.clone()))
        .collect();
    let ids = lookup::resource_class_ids(tx, &names).await?;
    let mut finals: Vec<Vec<Inventory>> = Vec::new();
    for (rp, (_, _, recs)) in rps.iter().zip(invs) {
        let mut list = Vec::new();
        for (class, rec) in recs {
            let Some(id) = ids.get(class) else {
                return Ok(Err(Refused::Allocation(Refusal::NoSuchClass(
                    class.clone(),
                ))));
            };
            list.push(from_record(class, *id, rec));
        }
        if !list.is_empty() {
            // Interim: the new records plus every old class they do not mention.
            let mut interim = list.clone();
            for old in inventories::list(tx, rp.id).await? {
                if !interim.iter().any(|n| n.rc_id == old.rc_id) {
                    interim.push(old);
                }
            }
            let current = require(tx, &rp.uuid).await?;
            inventories::replace(tx, &current, &interim).await?;
        }
        finals.push(list);
    }
    if let Err(r) = store::apply(tx, &prepared).await? {
        return Ok(Err(Refused::Allocation(r)));
    }
    for (rp, list) in rps.iter().zip(&finals) {
        let current = require(tx, &rp.uuid).await?;
        inventories::replace(tx, &current, list).await?;
    }
    Ok(Ok(()))
}

pub async fn reshape(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESHAPER_RESHAPE)?;
    let data: Reshape = req.body(&schema(&req))?;
    let invs: Vec<InventoryRequest> = data
        .inventories
        .into_iter()
        .map(|(uuid, v)| {
            let recs = v.inventories.into_iter().collect();
            (uuid, v.resource_provider_generation, recs)
        })
        .collect();
    let writes: Vec<ConsumerWrite> = data
        .allocations
        .into_iter()
        .map(|(c, v)| consumer_write(&req, &c, v))
        .collect();
    let mut attempts = app.config.allocation_conflict_retry_count.max(1);
    let result = loop {
        let (i, w) = (invs.clone(), writes.clone());
        let r = store::write_refusable(&app.store, move |tx| {
            Box::pin(async move { reshape_tx(tx, &i, &w).await })
        })
        .await;
        attempts -= 1;
        match r {
            Err(e) if store::is_retryable(&e) && attempts > 0 => continue,
            other => break other,
        }
    };
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
            Refusal::ConsumerGeneration(m) => ApiError::concurrent(m),
            Refusal::NoSuchProvider(u) => ApiError::bad_request(format!(
                "Allocation for resource provider '{u}' that does not exist."
            )),
            Refusal::NoSuchClass(n) => ApiError::bad_request(format!(
                "malformed reshaper data: No such resource class {n}."
            )),
            Refusal::InvalidInventory(m) => {
                ApiError::new(StatusCode::CONFLICT, format!("Unable to allocate inventory: {m}"))
            }
        }),
        Err(StoreError::Conflict(Conflict::InventoryInUse, m)) => {
            Err(ApiError::conflict(format!("update conflict: {m}")).with_code(Code::InventoryInUse))
        }
        Err(StoreError::Conflict(Conflict::ConcurrentUpdate, m)) => {
            Err(ApiError::concurrent(format!("update conflict: {m}")))
        }
        Err(e) => Err(e.into()),
    }
}
