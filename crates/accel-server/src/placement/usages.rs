//! `GET /resource_providers/{uuid}/usages` and `GET /usages`.
//!
//! Usage is always `SUM(allocations.used)`; both views are "modified now". Project
//! totals go through [`super::usage_cache`].

use super::error::ApiResult;
use super::usage_cache::Key;
use super::AppState;
use super::{authorize, authorize_target, Reply, Req};
use accel_api::placement::{self as api, mv, ProviderUsages, Resources, Usage, Usages};
use accel_core::policy::placement as rules;
use accel_core::policy::Target;
use accel_store::placement::allocations::TypeFilter;
use serde_json::{json, Value};
use std::sync::Arc;

pub async fn for_provider(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_USAGES)?;
    let uuid = req.param(0).to_owned();
    let (rp, usages) = app
        .store
        .usages()
        .of_provider(&uuid)
        .await?
        .ok_or_else(|| super::error::provider_not_found_caught(&uuid))?;
    let body = ProviderUsages {
        resource_provider_generation: rp.generation,
        usages: usages.into_iter().collect(),
    };
    Ok(Reply::typed(&body)?.modified_now())
}

fn schema(req: &Req) -> Value {
    let id = json!({"type": "string", "minLength": 1, "maxLength": 255});
    let mut s = json!({
        "type": "object",
        "properties": {"project_id": id, "user_id": id},
        "required": ["project_id"],
        "additionalProperties": false,
    });
    if req.mv(mv::CONSUMER_TYPES) {
        s["properties"]["consumer_type"] = json!({
            "type": "string",
            "pattern": "^[A-Z0-9_]+$|^all|^unknown$",
            "minLength": 1,
            "maxLength": 255,
        });
    }
    s
}

pub async fn totals(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    let project_id = req.query_last("project_id").map(str::to_owned);
    let user_id = req.query_last("user_id").map(str::to_owned);
    let mut target = Target::new();
    if let Some(p) = &project_id {
        target.insert("project_id", p.clone());
    }
    authorize_target(&app, &req, rules::USAGES, &target)?;
    req.validate_query(&schema(&req))?;
    let project_id = project_id.unwrap_or_default();
    let filter = if req.mv(mv::CONSUMER_TYPES) {
        match req.query_last("consumer_type") {
            Some("all") => TypeFilter::All,
            Some("unknown") => TypeFilter::Unknown,
            other => TypeFilter::ByType(other.map(str::to_owned)),
        }
    } else {
        TypeFilter::Ungrouped
    };
    let grouped = filter != TypeFilter::Ungrouped;
    let key = Key {
        project: project_id,
        user: user_id,
        filter,
    };
    let rows = app.usage_cache.totals(&app.store, key).await?;
    let mut usages: api::Map<Usage> = api::Map::new();
    for (key, rc, used, count) in rows.iter().cloned() {
        if grouped {
            let key = key.unwrap_or_else(|| "unknown".into());
            let group = usages.entry(&key, || Usage::Group(Resources::default()));
            if let Usage::Group(g) = group {
                g.insert(rc, used);
                g.insert("consumer_count", count);
            }
        } else {
            usages.insert(rc, Usage::Amount(used));
        }
    }
    Ok(Reply::typed(&Usages { usages })?.modified_now())
}
