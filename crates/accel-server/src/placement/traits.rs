//! `/traits`, `/traits/{name}` and `/resource_providers/{uuid}/traits` (1.6 on).
//!
//! Trait lists are sorted by name everywhere, so answers do not depend on the
//! database's row order.

use super::error::{race, ApiError, ApiResult};
use super::AppState;
use super::{authorize, Reply, Req};
use accel_api::placement::{ProviderTraits, Traits};
use accel_core::policy::placement as rules;
use accel_store::placement::traits::{Filter, Trait};
use accel_store::StoreError;
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

const CONCURRENT: &str = "Another thread concurrently updated the data. Please retry your update";

fn url(name: &str) -> String {
    format!("/traits/{name}")
}

/// The names of `ts` and the latest change among them (now when empty).
fn serialize(ts: &[Trait]) -> (Vec<String>, i64) {
    let names = ts.iter().map(|t| t.name.clone()).collect();
    let at = ts
        .iter()
        .map(|t| t.modified)
        .max()
        .unwrap_or_else(accel_store::now);
    (names, at)
}

/// A custom trait name as upstream's `CUSTOM_TRAIT` schema accepts it.
fn valid_custom(name: &str) -> bool {
    let n = name.chars().count();
    (1..=255).contains(&n)
        && name.strip_prefix("CUSTOM_").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        })
}

fn list_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "associated": {"type": "string"},
        },
        "additionalProperties": false,
    })
}

pub async fn list(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::TRAITS_LIST)?;
    req.validate_query(&list_schema())?;
    let mut filter = Filter::default();
    if let Some(name) = req.query_last("name") {
        let Some((op, value)) = name.split_once(':') else {
            return Err(ApiError::bad_request(format!(
                "Badly formatted name parameter. Expected name query string parameter in form: ?name=[in|startswith]:[name1,name2|prefix]. Got: \"{name}\""
            )));
        };
        match op {
            "in" => filter.name_in = Some(value.split(',').map(str::to_owned).collect()),
            "startswith" => filter.prefix = Some(value.to_owned()),
            _ => {}
        }
    }
    if let Some(assoc) = req.query_last("associated") {
        filter.associated = match assoc.to_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => {
                return Err(ApiError::bad_request(
                    "The query parameter \"associated\" only accepts \"true\" or \"false\"",
                ))
            }
        };
    }
    let ts = app.store.traits().list(filter).await?;
    let (traits, at) = serialize(&ts);
    Ok(Reply::typed(&Traits { traits })?.modified(at))
}

pub async fn show(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::TRAITS_SHOW)?;
    let name = req.param(0).to_owned();
    let t = app
        .store
        .traits()
        .get(&name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No such trait(s): {name}.")))?;
    Ok(Reply::no_content().modified(t.modified))
}

pub async fn create(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::TRAITS_UPDATE)?;
    let name = req.param(0).to_owned();
    if !valid_custom(&name) {
        return Err(ApiError::bad_request(
            "The trait is invalid. A valid trait must be no longer than 255 characters, start with the prefix \"CUSTOM_\" and use following characters: \"A\"-\"Z\", \"0\"-\"9\" and \"_\"",
        ));
    }
    let (t, created) = app.store.traits().ensure(&name).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    };
    Ok(Reply::status(status)
        .header("location", url(&name))
        .modified(t.modified))
}

pub async fn delete(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::TRAITS_DELETE)?;
    app.store.traits().delete(req.param(0)).await?;
    Ok(Reply::no_content())
}

pub async fn for_provider(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_TRAITS_LIST)?;
    let uuid = req.param(0).to_owned();
    let (rp, ts) = app
        .store
        .traits()
        .of_provider(&uuid)
        .await?
        .ok_or_else(|| super::error::provider_not_found_caught(&uuid))?;
    let (traits, at) = serialize(&ts);
    let body = ProviderTraits {
        traits,
        resource_provider_generation: rp.generation,
    };
    Ok(Reply::typed(&body)?.modified(at))
}

fn set_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "traits": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 255},
            },
            "resource_provider_generation": {"type": "integer"},
        },
        "required": ["traits", "resource_provider_generation"],
        "additionalProperties": false,
    })
}

/// A lost compare-and-swap in upstream's words; every other error as usual.
fn concurrent(e: StoreError) -> ApiError {
    match race(&e) {
        Some(_) => ApiError::concurrent(CONCURRENT),
        None => e.into(),
    }
}

pub async fn set_for_provider(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_TRAITS_UPDATE)?;
    let uuid = req.param(0).to_owned();
    let data: ProviderTraits = req.body(&set_schema())?;
    let (gen, ts) = app
        .store
        .traits()
        .set_for_provider(&uuid, data.resource_provider_generation, data.traits)
        .await
        .map_err(concurrent)?;
    let (traits, at) = serialize(&ts);
    let body = ProviderTraits {
        traits,
        resource_provider_generation: gen,
    };
    Ok(Reply::typed(&body)?.modified(at))
}

pub async fn delete_for_provider(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_PROVIDERS_TRAITS_DELETE)?;
    app.store
        .traits()
        .clear_for_provider(req.param(0))
        .await
        .map_err(concurrent)?;
    Ok(Reply::no_content())
}
