//! Placement's error body: `{"errors": [{status, title, detail, code, request_id}]}`.
//!
//! `code` appears from 1.23 and comes from upstream's closed set. `detail` is built the
//! way webob renders it upstream (status explanation, a blank line, the message), since
//! clients and the gabbi suite match fragments of it.

use crate::auth::Rejection;
use crate::reply;
use axum::body::Body;
use axum::http::{Response, StatusCode};
use serde_json::json;

/// Upstream's closed set of error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Undefined,
    InventoryInUse,
    ConcurrentUpdate,
    DuplicateName,
    ProviderInUse,
    ProviderCannotDeleteParent,
    ProviderNotFound,
    QueryDuplicateKey,
    QueryBadValue,
    QueryMissingValue,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Undefined => "placement.undefined_code",
            Code::InventoryInUse => "placement.inventory.inuse",
            Code::ConcurrentUpdate => "placement.concurrent_update",
            Code::DuplicateName => "placement.duplicate_name",
            Code::ProviderInUse => "placement.resource_provider.inuse",
            Code::ProviderCannotDeleteParent => "placement.resource_provider.cannot_delete_parent",
            Code::ProviderNotFound => "placement.resource_provider.not_found",
            Code::QueryDuplicateKey => "placement.query.duplicate_key",
            Code::QueryBadValue => "placement.query.bad_value",
            Code::QueryMissingValue => "placement.query.missing_value",
        }
    }
}

/// An error a handler returns; rendered by the dispatcher, which knows the request id
/// and microversion.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub code: Code,
    /// Extra headers (`allow` on 405).
    pub headers: Vec<(&'static str, String)>,
    /// Upstream raises this error above its handlers' wrapper (an unknown route, a
    /// policy refusal, a `NotFound` from its object layer that the handler does not
    /// catch), where its microversion middleware re-raises it with the version header
    /// but without `Vary: openstack-api-version`. Clients see the difference.
    pub unvaried: bool,
    /// A 405 from a microversion gate: upstream raises it with no detail of its own,
    /// so webob's sentence is followed by nothing.
    pub version_gated: bool,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            code: Code::Undefined,
            headers: Vec::new(),
            unvaried: false,
            version_gated: false,
        }
    }
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, m)
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, m)
    }
    pub fn conflict(m: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, m)
    }
    pub fn forbidden(m: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, m)
    }
    pub fn internal(m: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, m)
    }
    pub fn with_code(mut self, code: Code) -> Self {
        self.code = code;
        self
    }
    /// Marks the error as one upstream answers without `Vary` (see [`ApiError::unvaried`]).
    pub fn without_vary(mut self) -> Self {
        self.unvaried = true;
        self
    }
    pub fn concurrent(m: impl Into<String>) -> Self {
        Self::conflict(m).with_code(Code::ConcurrentUpdate)
    }

    /// The HTML body webob renders for this error, for a request whose `Accept` header
    /// was `accept` (406 names it).
    pub fn html_body(&self, accept: Option<&str>) -> String {
        let title = status_line(self.status);
        let message = html_escape(&self.message);
        let body = match self.status {
            StatusCode::METHOD_NOT_ALLOWED => format!(
                "{message} <br /><br />\nThe method specified is not allowed for this resource."
            ),
            StatusCode::NOT_ACCEPTABLE => format!(
                "The resource could not be generated that was acceptable to your browser\n(content of type {}. <br /><br />\n{message}",
                html_escape(shown_accept(accept))
            ),
            // webob's template: explanation, detail, an (empty) comment, each on a line.
            s => format!("{}<br /><br />\n{message}\n\n", explanation(s)),
        };
        format!(
            "<html>\n <head>\n  <title>{title}</title>\n </head>\n <body>\n  <h1>{title}</h1>\n  {body}\n </body>\n</html>"
        )
    }

    /// The plain-text body webob renders when the client accepts neither HTML nor JSON.
    pub fn plain_body(&self, accept: Option<&str>) -> String {
        format!("{}\n\n{}", status_line(self.status), self.detail(accept))
    }

    /// The `detail` text as webob would render it (406 names the request's `Accept`).
    pub fn detail(&self, accept: Option<&str>) -> String {
        match self.status {
            StatusCode::METHOD_NOT_ALLOWED if self.version_gated => format!("{} \n\n ", self.message),
            StatusCode::METHOD_NOT_ALLOWED => format!(
                "{} \n\n The method specified is not allowed for this resource.",
                self.message
            ),
            StatusCode::NOT_ACCEPTABLE => format!(
                "The resource could not be generated that was acceptable to your browser (content of type {}. \n\n {}",
                shown_accept(accept),
                self.message
            ),
            s => format!("{}\n\n {}  ", explanation(s), self.message),
        }
    }
}

/// The `Accept` value a 406 names: upstream rewrites a missing or `*/*` header to
/// `application/json` before anything renders.
fn shown_accept(accept: Option<&str>) -> &str {
    match accept.map(str::trim) {
        None | Some("") | Some("*/*") => "application/json",
        Some(a) => a,
    }
}

/// How an error body is rendered. Upstream's handler rewrites a missing or `*/*`
/// `Accept` to JSON; otherwise webob picks between HTML and JSON by quality (HTML wins a
/// tie, being offered first) and falls back to plain text when neither is acceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorFormat {
    Json,
    Html,
    Plain,
}

impl ErrorFormat {
    pub fn negotiate(accept: Option<&str>) -> Self {
        let accept = accept.map(str::trim).unwrap_or("");
        if accept.is_empty() || accept == "*/*" {
            return ErrorFormat::Json;
        }
        let ranges: Vec<(&str, f32)> = accept
            .split(',')
            .filter_map(|part| {
                let mut it = part.split(';');
                let range = it.next()?.trim();
                if range.is_empty() {
                    return None;
                }
                let q = it
                    .filter_map(|p| p.trim().strip_prefix("q="))
                    .find_map(|q| q.trim().parse::<f32>().ok())
                    .unwrap_or(1.0);
                Some((range, q))
            })
            .collect();
        // The quality of an offer is that of the most specific range matching it.
        let quality = |offer: &str| -> f32 {
            let (otype, _) = offer.split_once('/').unwrap_or((offer, ""));
            let mut best: Option<(u8, f32)> = None;
            for &(range, q) in &ranges {
                let spec = if range.eq_ignore_ascii_case(offer) {
                    2
                } else if range
                    .strip_suffix("/*")
                    .is_some_and(|t| t.eq_ignore_ascii_case(otype))
                {
                    1
                } else if range == "*/*" {
                    0
                } else {
                    continue;
                };
                if best.is_none_or(|(s, _)| spec > s) {
                    best = Some((spec, q));
                }
            }
            best.map_or(0.0, |(_, q)| q)
        };
        let html = quality("text/html");
        let json = quality("application/json");
        if html <= 0.0 && json <= 0.0 {
            ErrorFormat::Plain
        } else if html >= json {
            ErrorFormat::Html
        } else {
            ErrorFormat::Json
        }
    }
}

fn explanation(s: StatusCode) -> &'static str {
    match s.as_u16() {
        400 => "The server could not comply with the request since it is either malformed or otherwise incorrect.",
        403 => "Access was denied to this resource.",
        404 => "The resource could not be found.",
        409 => "There was a conflict when trying to complete your request.",
        415 => "The request media type is not supported by this server.",
        408 => "The request did not arrive in time.",
        413 => "The request body is larger than this server accepts.",
        503 => "The service cannot answer right now; try again later.",
        _ => "The server has either erred or is incapable of performing the requested operation.",
    }
}

fn status_line(s: StatusCode) -> String {
    format!("{} {}", s.as_u16(), s.canonical_reason().unwrap_or(""))
}

/// Python's `html.escape(s, quote=True)`, which webob applies.
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
}

impl From<accel_store::StoreError> for ApiError {
    fn from(e: accel_store::StoreError) -> Self {
        use accel_store::{Conflict, StoreError};
        match e {
            StoreError::NotFound(m) => ApiError::not_found(m),
            StoreError::Invalid(m) => ApiError::bad_request(m),
            StoreError::Conflict(Conflict::ConcurrentUpdate | Conflict::ProviderRace, m) => {
                ApiError::concurrent(m)
            }
            StoreError::Conflict(Conflict::InventoryInUse, m) => {
                ApiError::conflict(m).with_code(Code::InventoryInUse)
            }
            StoreError::Conflict(Conflict::Duplicate, m) => {
                ApiError::conflict(m).with_code(Code::DuplicateName)
            }
            StoreError::Conflict(Conflict::ProviderInUse, m) => {
                ApiError::conflict(m).with_code(Code::ProviderInUse)
            }
            StoreError::Conflict(Conflict::CannotDeleteParent, m) => {
                ApiError::conflict(m).with_code(Code::ProviderCannotDeleteParent)
            }
            StoreError::Conflict(Conflict::InUse, m) => ApiError::conflict(m),
            StoreError::Refused(accel_store::Refused::Placement(r)) => refused(r),
            StoreError::Refused(r @ accel_store::Refused::Accelerator(_)) => {
                tracing::error!(refused = ?r, "an accelerator refusal reached the Placement API");
                ApiError::internal(crate::listen::INTERNAL)
            }
            // The database's own words stay in the log: a driver message tells a
            // client nothing it can act on and may describe the deployment.
            e if e.is_unavailable() => {
                tracing::warn!(error = %e, "database unavailable; answering 503");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    crate::listen::DB_UNAVAILABLE,
                )
            }
            e @ (StoreError::Config(_) | StoreError::Db(_)) => {
                // The cause goes to the log, never to the client (issue 17).
                tracing::error!(error = %e, "store error");
                ApiError::internal(crate::listen::INTERNAL)
            }
        }
    }
}

/// The words of each refusal of the Placement operations (upstream's sentences).
fn refused(r: accel_store::placement::Refused) -> ApiError {
    match r {}
}

const AUTH_REQUIRED: &str = "The request you have made requires authentication.";
const KEYSTONE_UNAVAILABLE: &str = "The Keystone service is temporarily unavailable.";

/// A request `auth` turned away, as Placement answers it: webob's body in noauth mode
/// (what upstream's noauth2 middleware returns, which the gabbi suite sees); the
/// `errors` envelope in keystone mode.
pub fn rejection(r: &Rejection, request_id: &str) -> Response<Body> {
    let error = |status: StatusCode, detail: &str| {
        reply::json(
            status,
            &json!({"errors": [{
                "status": status.as_u16(),
                "title": status.canonical_reason().unwrap_or(""),
                "detail": detail,
                "request_id": request_id,
            }]}),
        )
    };
    match r {
        Rejection::Unauthorized {
            www_authenticate: None,
        } => reply::json(
            StatusCode::UNAUTHORIZED,
            &json!({
                "message": "This server could not verify that you are authorized to access the document you requested. Either you supplied the wrong credentials (e.g., bad password), or your browser does not understand how to supply the credentials required.<br /><br />\n\n\n",
                "code": "401 Unauthorized",
                "title": "Unauthorized",
            }),
        ),
        Rejection::Unauthorized {
            www_authenticate: Some(uri),
        } => reply::with_www_authenticate(error(StatusCode::UNAUTHORIZED, AUTH_REQUIRED), uri),
        Rejection::Unavailable => error(StatusCode::SERVICE_UNAVAILABLE, KEYSTONE_UNAVAILABLE),
    }
}
