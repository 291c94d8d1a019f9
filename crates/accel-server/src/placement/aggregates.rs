//! `/resource_providers/{uuid}/aggregates` (1.1 on; generations from 1.19).

use super::error::{ApiError, ApiResult};
use super::resource_providers::{exists, read_with, require, uncaught};
use super::AppState;
use super::{authorize, qs, Reply, Req};
use accel_api::placement::{mv, Aggregates, AggregatesPut};
use accel_core::policy::placement as rules;
use accel_store::placement::aggregates;
use accel_store::{Conflict, StoreError};
use serde_json::{json, Value};
use std::sync::Arc;

const GENERATION_CHANGED: &str =
    "Resource provider's generation already changed. Please update the generation and try again.";

/// Upstream's aggregate list schema.
fn list_schema() -> Value {
    json!({
        "type": "array",
        "items": {"type": "string", "format": "uuid"},
        "uniqueItems": true,
    })
}

fn put_schema(req: &Req) -> Value {
    if req.mv(mv::AGGREGATES_GENERATION) {
        json!({
            "type": "object",
            "properties": {
                "aggregates": list_schema(),
                "resource_provider_generation": {"type": "integer"},
            },
            "required": ["aggregates", "resource_provider_generation"],
            "additionalProperties": false,
        })
    } else {
        list_schema()
    }
}

fn render(req: &Req, uuids: Vec<String>, generation: i64) -> ApiResult<Reply> {
    let body = Aggregates {
        aggregates: uuids,
        resource_provider_generation: req.mv(mv::AGGREGATES_GENERATION).then_some(generation),
    };
    // Upstream records no time for associations and answers "now".
    Ok(Reply::typed(&body)?.modified_now())
}

pub async fn show(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_AGGREGATES_LIST)?;
    let uuid = req.param(0).to_owned();
    let (rp, uuids) = read_with(&app, &uuid, |tx, id| {
        Box::pin(aggregates::for_provider(tx, id))
    })
    .await
    .map_err(uncaught)?;
    render(&req, uuids, rp.generation)
}

pub async fn update(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_AGGREGATES_UPDATE)?;
    let uuid = req.param(0).to_owned();
    exists(&app, &uuid).await?;
    let data: AggregatesPut = req.body(&put_schema(&req))?;
    let with_generation = req.mv(mv::AGGREGATES_GENERATION);
    let (given, expected) = match data {
        AggregatesPut::List(list) => (list, None),
        AggregatesPut::WithGeneration(a) => (a.aggregates, a.resource_provider_generation),
    };
    let normalized: Vec<String> = given.iter().map(|u| qs::normalize_uuid(u)).collect();
    let generation = app
        .store
        .write(move |tx| {
            Box::pin(async move {
                let rp = require(tx, &uuid).await?;
                if let Some(g) = expected {
                    if g != rp.generation {
                        return Ok(Err(()));
                    }
                }
                let gen =
                    aggregates::set_for_provider(tx, &rp, &normalized, with_generation).await?;
                Ok(Ok(gen))
            })
        })
        .await
        .map_err(|e| match e {
            StoreError::Conflict(Conflict::ConcurrentUpdate, _) => ApiError::concurrent(
                "Update conflict: Another thread concurrently updated the data. Please retry your update",
            ),
            e => e.into(),
        })?
        .map_err(|()| ApiError::concurrent(GENERATION_CHANGED))?;
    // Upstream answers with the list as the client sent it.
    render(&req, given, generation)
}
