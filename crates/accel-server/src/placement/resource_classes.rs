//! `/resource_classes` and `/resource_classes/{name}` (microversion 1.2 on).
//!
//! `PUT /resource_classes/{name}` renames a custom class up to 1.6 and is a body-less
//! create-or-verify (201/204) from 1.7.

use super::error::{ApiError, ApiResult};
use super::request::content_type;
use super::AppState;
use super::{authorize, Reply, Req};
use crate::jsonschema;
use accel_api::placement::mv;
use accel_api::placement::{self as api, ResourceClassName};
use accel_core::policy::placement as rules;
use accel_store::placement::classes::ResourceClass;
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

fn url(name: &str) -> String {
    format!("/resource_classes/{name}")
}

fn render(rc: &ResourceClass) -> api::ResourceClass {
    api::ResourceClass {
        name: rc.name.clone(),
        links: vec![api::Link {
            rel: "self".into(),
            href: url(&rc.name),
        }],
    }
}

/// Upstream's POST (and pre-1.7 PUT) body schema.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^CUSTOM_[A-Z0-9_]+$", "maxLength": 255},
        },
        "required": ["name"],
        "additionalProperties": false,
    })
}

/// Parses and validates a JSON text as upstream's `extract_json` does.
fn extract_json(text: &[u8], schema: &Value) -> ApiResult<Value> {
    let v: Value = serde_json::from_slice(text)
        .map_err(|e| ApiError::bad_request(format!("Malformed JSON: {e}")))?;
    jsonschema::validate(&v, schema)
        .map_err(|e| ApiError::bad_request(format!("JSON does not validate: {e}")))?;
    Ok(v)
}

/// Custom classes show when they last changed; standard ones are "now", as upstream.
fn modified(rc: &ResourceClass) -> i64 {
    if rc.is_standard() {
        accel_store::now()
    } else {
        rc.modified
    }
}

pub async fn list(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_CLASSES_LIST)?;
    let rcs = app.store.classes().list().await?;
    let at = rcs
        .iter()
        .map(modified)
        .max()
        .unwrap_or_else(accel_store::now);
    let body = api::ResourceClasses {
        resource_classes: rcs.iter().map(render).collect(),
    };
    Ok(Reply::typed(&body)?.modified(at))
}

pub async fn create(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_CLASSES_CREATE)?;
    let ResourceClassName { name } = req.body(&schema())?;
    let rc = app.store.classes().create(&name).await?;
    Ok(Reply::status(StatusCode::CREATED).header("location", url(&rc.name)))
}

pub async fn show(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_CLASSES_SHOW)?;
    let rc = app.store.classes().require(req.param(0)).await?;
    Ok(Reply::typed(&render(&rc))?.modified(modified(&rc)))
}

pub async fn update(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    if req.mv(mv::RESOURCE_CLASS_PUT_CREATES) {
        create_or_verify(app, req).await
    } else {
        rename(app, req).await
    }
}

/// 1.2 to 1.6: rename a custom class.
async fn rename(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    let ct = content_type(&req.headers);
    if ct != "application/json" {
        let shown = if ct.is_empty() { "None".to_owned() } else { ct };
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("The media type {shown} is not supported, use application/json"),
        ));
    }
    authorize(&app, &req, rules::RESOURCE_CLASSES_UPDATE)?;
    let name = req.param(0).to_owned();
    let ResourceClassName { name: new_name } = req.body(&schema())?;
    let rc = app.store.classes().rename(&name, &new_name).await?;
    Ok(Reply::typed(&render(&rc))?)
}

/// 1.7 on: create the class unless it exists (201 / 204).
async fn create_or_verify(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_CLASSES_UPDATE)?;
    let name = req.param(0).to_owned();
    // Upstream validates the name by formatting it into a JSON document.
    extract_json(format!("{{\"name\": \"{name}\"}}").as_bytes(), &schema())?;
    let created = app.store.classes().ensure(&name).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    };
    Ok(Reply::status(status).header("location", url(&name)))
}

pub async fn delete(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::RESOURCE_CLASSES_DELETE)?;
    app.store.classes().delete(req.param(0)).await?;
    Ok(Reply::no_content())
}
