//! Placement behind the front door ([`crate::front`]): upstream's middleware order,
//! as clients observe it, expressed as the door's hooks. Request id, CORS, noauth on
//! all but `/` (401), version parsing (400/406), the query's length, `content-length`
//! without `content-type` (400), the route (404/405 with `Allow`; 404 for a route newer
//! than the version), the body, the route's content rules (406/415), the handler; then
//! `{"errors": [...]}` negotiated against HTML and plain text, `Vary` unless the error
//! was raised above upstream's handlers ([`ApiError::unvaried`]), and an absolute
//! `Location`.

use super::error::{ApiError, ErrorFormat};
use super::microversion::{self, Version, VersionError};
use super::routes::{self, MethodRoute};
use super::{error, AppState, Req};
use crate::auth::{Credentials, Rejection};
use crate::front::{Api, Handler, Head, Reply};
use crate::state::Shared;
use accel_api::placement::{mv, ErrorItem, Errors};
use axum::body::Body;
use axum::http::{HeaderValue, Method, Response, StatusCode};
use std::ops::ControlFlow;

/// The Placement API, as the front door knows it.
pub struct Placement;

impl Api for Placement {
    type State = AppState;
    type Version = Version;
    type VersionError = VersionError;
    type Error = ApiError;
    /// The path.
    type Target = String;
    type Route = &'static MethodRoute;
    type Local = ();

    const NAME: &'static str = "placement";
    const REQUEST_ID_HEADERS: &'static [&'static str] =
        &["x-openstack-request-id", "openstack-request-id"];
    const CORS: bool = true;
    const ROUTE_BEFORE_BODY: bool = true;

    fn shared(st: &AppState) -> &Shared {
        &st.shared
    }

    fn enter(head: &Head) -> ControlFlow<Response<Body>, String> {
        ControlFlow::Continue(head.parts.uri.path().to_owned())
    }

    /// noauth2: everything but the root needs a token.
    fn public(path: &String) -> bool {
        path == "/" || path.is_empty()
    }

    fn rejection(r: &Rejection, head: &Head) -> Response<Body> {
        error::rejection(r, &head.request_id)
    }

    fn version<'a>(values: impl Iterator<Item = &'a str>) -> Result<Version, VersionError> {
        microversion::from_headers(values)
    }

    fn version_refused(e: VersionError, head: &Head) -> Response<Body> {
        version_error(e, &head.request_id, head.header("accept"))
    }

    fn error(status: StatusCode, message: String) -> ApiError {
        ApiError::new(status, message)
    }

    /// Upstream checks this before dispatch, for every route.
    fn precheck(head: &Head) -> Result<(), ApiError> {
        let Some(len) = head.parts.headers.get("content-length") else {
            return Ok(());
        };
        let n: i64 = len
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| ApiError::bad_request("content-length header must be an integer"))?;
        if n > 0 && !head.parts.headers.contains_key("content-type") {
            return Err(ApiError::bad_request(
                "content-type header required when content-length > 0",
            ));
        }
        Ok(())
    }

    fn route(
        path: &String,
        method: &Method,
        version: Version,
    ) -> Result<(&'static MethodRoute, Vec<String>), ApiError> {
        routes::resolve(path, method, version)
    }

    fn handler(route: &&'static MethodRoute) -> Handler<Self> {
        route.handler
    }

    fn check(route: &&'static MethodRoute, req: &Req) -> Result<(), ApiError> {
        route.check_content(req)
    }

    fn local(_: &AppState, _: String, _: &Credentials) {}

    fn reply(reply: Reply, version: Version, head: &Head) -> Response<Body> {
        let resp = reply.into_response(version.at_least(mv::LAST_MODIFIED));
        absolute_location(resp, head.header("host").unwrap_or("localhost"))
    }

    fn refusal(e: ApiError, version: Version, head: &Head) -> Response<Body> {
        let (e, accept) = (&e, head.header("accept"));
        match ErrorFormat::negotiate(accept) {
            ErrorFormat::Json => error_response(e, &head.request_id, Some(version), accept),
            ErrorFormat::Html => text_error(e, e.html_body(accept), HTML),
            ErrorFormat::Plain => text_error(e, e.plain_body(accept), PLAIN),
        }
    }

    fn varies(e: &ApiError) -> bool {
        !e.unvaried
    }

    fn stamp(resp: &mut Response<Body>, version: Option<Version>, vary: bool) {
        if let Some(version) = version {
            with_version(resp, version, vary);
        }
    }
}

/// The microversion header, and `Vary`, which upstream's microversion middleware adds
/// to every answer its handlers return but not to errors raised above them
/// ([`ApiError::unvaried`]).
fn with_version(resp: &mut Response<Body>, version: Version, vary: bool) {
    let h = resp.headers_mut();
    if let Ok(val) = HeaderValue::from_str(&format!("placement {version}")) {
        h.insert("openstack-api-version", val);
    }
    if vary {
        h.append("vary", HeaderValue::from_static("openstack-api-version"));
    }
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
fn error_response(
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
