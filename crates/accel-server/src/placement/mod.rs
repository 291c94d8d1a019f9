//! The Placement API (microversions 1.0 to 1.39).
//!
//! One fallback handler does what upstream's middleware stack does, in the same
//! order, because clients observe that order: request id, CORS, noauth (401), version
//! parsing (400/406), route match (404/405 with `Allow`), version gate, content checks,
//! then the handler, whose errors render as `{"errors": [...]}`.
//!
//! Routing is a table ([`routes::ROUTES`]) rather than axum's router so that a path
//! that exists with another method answers 405 with upstream's `Allow` list, and a
//! route newer than the requested microversion answers 404.

pub mod error;
pub mod index;
pub mod microversion;
mod qs;
mod request;
mod routes;

mod aggregates;
mod allocation_candidates;
pub use allocation_candidates::{resolve_query, Resolved};
pub(crate) mod allocations;
pub mod creates;
mod inventories;
mod reshaper;
mod resource_classes;
mod resource_providers;
mod root;
mod traits;
pub mod usage_cache;
mod usages;

pub use request::{Reply, Req};

use crate::auth::Credentials;
use crate::state::Shared;
use accel_api::placement::{mv, ErrorItem, Errors};
use accel_core::policy::Policy;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, Request, Response, StatusCode};
use error::{ApiError, ErrorFormat};
use microversion::{Version, VersionError};
use std::sync::Arc;

/// The Placement API's state: its policy, candidate index, usage cache and create
/// queue, over the state both APIs share (reached through `Deref`: `app.store`).
pub struct AppState {
    pub shared: Arc<Shared>,
    pub policy: Policy,
    /// The in-memory picture allocation candidates are searched in.
    pub placement_index: index::Index,
    /// Remembered `GET /usages` answers, forgotten as the change log names their projects.
    pub usage_cache: usage_cache::UsageCache,
    /// Concurrent root-provider creates waiting to be combined into one transaction.
    pub creates: creates::Creates,
}

impl AppState {
    pub fn new(shared: Arc<Shared>, policy: Policy) -> AppState {
        AppState {
            shared,
            policy,
            placement_index: Default::default(),
            usage_cache: Default::default(),
            creates: Default::default(),
        }
    }

    /// Brings the metrics that count in Placement's own structures (index refreshes,
    /// usage answers) up to date, before a scrape.
    pub fn sync_metrics(&self) {
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let (index, usage) = (&self.placement_index.stats, &self.usage_cache);
        self.metrics
            .sync_index(index.full.load(relaxed), index.incremental.load(relaxed));
        self.metrics
            .sync_usage_cache(usage.cached.load(relaxed), usage.queried.load(relaxed));
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// The Placement router: every request goes through [`handle`].
pub fn router(state: Arc<AppState>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

async fn handle(State(app): State<Arc<AppState>>, request: Request<Body>) -> Response<Body> {
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let method = parts.method.clone();

    // CORS (only when origins are configured): preflight answers here.
    let origin = parts
        .headers
        .get("origin")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(resp) =
        crate::cors::preflight(&app.config.cors_allowed_origins, &method, &parts.headers)
    {
        return finish(resp, &request_id, &app, origin.as_deref());
    }

    // noauth2: everything but the root needs a token.
    let creds = if path == "/" || path.is_empty() {
        Credentials::anonymous()
    } else {
        match app.config.authenticate(&parts.headers).await {
            Ok(c) => c,
            Err(rejection) => {
                let resp = error::rejection(&rejection, &request_id);
                return finish(resp, &request_id, &app, origin.as_deref());
            }
        }
    };

    let version = match microversion::from_headers(
        parts
            .headers
            .get_all("openstack-api-version")
            .iter()
            .filter_map(|v| v.to_str().ok()),
    ) {
        Ok(v) => v,
        Err(e) => {
            let accept = parts.headers.get("accept").and_then(|v| v.to_str().ok());
            let resp = version_error(e, &request_id, accept);
            return finish(resp, &request_id, &app, origin.as_deref());
        }
    };

    let result = async {
        if let Some(m) = crate::state::query_too_long(parts.uri.query()) {
            return Err(ApiError::bad_request(m));
        }
        // Upstream checks this before dispatch, for every route.
        if let Some(len) = parts.headers.get("content-length") {
            let n: i64 = len
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| ApiError::bad_request("content-length header must be an integer"))?;
            if n > 0 && !parts.headers.contains_key("content-type") {
                return Err(ApiError::bad_request(
                    "content-type header required when content-length > 0",
                ));
            }
        }
        let (route, params) = routes::resolve(&path, &method, version)?;
        let body = crate::listen::read_body(&parts.headers, body, &app.config.http)
            .await
            .map_err(|e| {
                let (status, message) = e.status_and_message();
                ApiError::new(status, message)
            })?;
        let req = Req::new(
            method.clone(),
            parts.uri.query().unwrap_or(""),
            parts.headers.clone(),
            body,
            version,
            creds,
            params,
            request_id.clone(),
        );
        route.check_content(&req)?;
        (route.handler)(app.clone(), req).await
    }
    .await;

    let host = parts
        .headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost")
        .to_owned();
    let vary = !matches!(&result, Err(e) if e.unvaried);
    let resp = match result {
        Ok(reply) => absolute_location(reply.into_response(version), &host),
        Err(e) => {
            let accept = parts.headers.get("accept").and_then(|v| v.to_str().ok());
            match ErrorFormat::negotiate(accept) {
                ErrorFormat::Json => error_response(&e, &request_id, Some(version), accept),
                ErrorFormat::Html => text_error(&e, e.html_body(accept), HTML),
                ErrorFormat::Plain => text_error(&e, e.plain_body(accept), PLAIN),
            }
        }
    };
    let resp = with_version(resp, version, vary);
    finish(resp, &request_id, &app, origin.as_deref())
}

/// The microversion header, and `Vary`, which upstream's microversion middleware adds
/// to every answer its handlers return but not to errors raised above them
/// ([`ApiError::unvaried`]).
fn with_version(mut resp: Response<Body>, version: Version, vary: bool) -> Response<Body> {
    let h = resp.headers_mut();
    if let Ok(val) = HeaderValue::from_str(&format!("placement {version}")) {
        h.insert("openstack-api-version", val);
    }
    if vary {
        h.append("vary", HeaderValue::from_static("openstack-api-version"));
    }
    resp
}

/// webob makes `Location` absolute against the request's host; clients compare it.
fn absolute_location(mut resp: Response<Body>, host: &str) -> Response<Body> {
    let rel = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .filter(|l| l.starts_with('/'))
        .map(str::to_owned);
    if let Some(rel) = rel {
        if let Ok(v) = HeaderValue::from_str(&format!("http://{host}{rel}")) {
            resp.headers_mut().insert("location", v);
        }
    }
    resp
}

const HTML: &str = "text/html; charset=UTF-8";
const PLAIN: &str = "text/plain; charset=UTF-8";

/// Version errors come from upstream's microversion middleware, before any version is
/// known (no `code`, no version header), and are rendered like every other error: HTML,
/// JSON or plain text by the qualities in `Accept`. A 406 in JSON names the versions
/// served.
fn version_error(e: VersionError, request_id: &str, accept: Option<&str>) -> Response<Body> {
    let err = match &e {
        VersionError::Malformed(m) => ApiError::bad_request(format!("Invalid microversion: {m}")),
        VersionError::Unacceptable(v) => ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            format!("Invalid microversion: Unacceptable version header: {v}"),
        ),
    };
    match ErrorFormat::negotiate(accept) {
        ErrorFormat::Html => text_error(&err, err.html_body(accept), HTML),
        ErrorFormat::Plain => text_error(&err, err.plain_body(accept), PLAIN),
        ErrorFormat::Json if err.status == StatusCode::NOT_ACCEPTABLE => {
            let body = Errors {
                errors: vec![ErrorItem {
                    status: 406,
                    title: "Not Acceptable".into(),
                    detail: err.detail(accept),
                    code: None,
                    request_id: request_id.to_owned(),
                    max_version: Some(Version::MAX.to_string()),
                    min_version: Some(Version::MIN.to_string()),
                }],
            };
            typed_response(StatusCode::NOT_ACCEPTABLE, &body)
        }
        ErrorFormat::Json => error_response(&err, request_id, None, accept),
    }
}

/// Renders an error in Placement's format (`code` from 1.23).
pub fn error_response(
    e: &ApiError,
    request_id: &str,
    version: Option<Version>,
    accept: Option<&str>,
) -> Response<Body> {
    let body = Errors {
        errors: vec![ErrorItem {
            status: e.status.as_u16(),
            title: e.status.canonical_reason().unwrap_or("").to_owned(),
            detail: e.detail(accept),
            code: version
                .is_some_and(|v| v.at_least(mv::ERROR_CODES))
                .then(|| e.code.as_str().to_owned()),
            request_id: request_id.to_owned(),
            max_version: None,
            min_version: None,
        }],
    };
    let mut resp = typed_response(e.status, &body);
    for (k, v) in &e.headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            resp.headers_mut().insert(*k, v);
        }
    }
    resp
}

/// An error rendered as HTML or plain text, for clients that did not ask for JSON.
fn text_error(e: &ApiError, body: String, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = e.status;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static(content_type));
    for (k, v) in &e.headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            resp.headers_mut().insert(*k, v);
        }
    }
    resp
}

/// A JSON answer from one of `accel_api::placement`'s types.
fn typed_response(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    let mut resp = Response::new(Body::from(serde_json::to_vec(body).unwrap_or_default()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

fn finish(
    mut resp: Response<Body>,
    request_id: &str,
    app: &AppState,
    origin: Option<&str>,
) -> Response<Body> {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert("x-openstack-request-id", v.clone());
        h.insert("openstack-request-id", v);
    }
    crate::cors::decorate(&app.config.cors_allowed_origins, origin, h);
    resp
}

/// Checks `rule` against the caller, with upstream's default target.
pub(crate) fn authorize(app: &AppState, req: &Req, rule: &str) -> Result<(), ApiError> {
    let target = req.creds.default_target();
    authorize_target(app, req, rule, &target)
}

pub(crate) fn authorize_target(
    app: &AppState,
    req: &Req,
    rule: &str,
    target: &accel_core::policy::Target,
) -> Result<(), ApiError> {
    match app.policy.authorize(rule, &req.creds.policy, target) {
        Ok(d) if d.is_allowed() => Ok(()),
        // Upstream's policy refusal is raised above its handlers: no `Vary`.
        Ok(_) => Err(
            ApiError::forbidden(format!("Policy does not allow {rule} to be performed."))
                .without_vary(),
        ),
        Err(e) => Err(ApiError::internal(e.to_string())),
    }
}
