//! `/resource_providers/{uuid}/aggregates` (1.1 on; generations from 1.19).

use super::error::{no_provider, race, ApiError, ApiResult};
use super::resource_providers::exists;
use super::AppState;
use super::{authorize, qs, Reply, Req};
use accel_api::placement::{mv, Aggregates, AggregatesPut};
use accel_core::policy::placement as rules;
use serde_json::{json, Value};
use std::sync::Arc;

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
    let (rp, uuids) = app
        .store
        .aggregates()
        .of_provider(&uuid)
        .await?
        .ok_or_else(|| no_provider(&uuid))?;
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
        .aggregates()
        .set_for_provider(&uuid, expected, normalized, with_generation)
        .await
        .map_err(|e| match race(&e) {
            Some(_) => ApiError::concurrent(
                "Update conflict: Another thread concurrently updated the data. Please retry your update",
            ),
            None => e.into(),
        })?;
    // Upstream answers with the list as the client sent it.
    render(&req, given, generation)
}
