//! Placement's error body: `{"errors": [{status, title, detail, code, request_id}]}`.
//!
//! `code` appears from 1.23 and comes from upstream's closed set. `detail` is built the
//! way webob renders it upstream (status explanation, a blank line, the message), since
//! clients and the gabbi suite match fragments of it.
//!
//! The store refuses as data ([`accel_store::placement::Refused`], allocation and
//! inventory refusals, lost generation races); upstream's sentences for them are here
//! ([`refused`] and the helpers handlers put their own words around), so the Placement
//! API's words live in this file and its handlers.

use crate::auth::Rejection;
use crate::reply;
use accel_store::placement::allocations::InvalidInventory;
use accel_store::placement::{ParentRefusal, Refused};
use accel_store::{Conflict, StoreError};
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

/// A reply that could not be serialised is ours, not the caller's.
impl From<serde_json::Error> for ApiError {
    fn from(e: serde_json::Error) -> Self {
        ApiError::internal(e.to_string())
    }
}

impl From<accel_store::StoreError> for ApiError {
    fn from(e: accel_store::StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => ApiError::not_found(m),
            StoreError::Invalid(m) => ApiError::bad_request(m),
            StoreError::Conflict(Conflict::ProviderRace, _) => ApiError::concurrent(PROVIDER_RACE),
            StoreError::Conflict(Conflict::ConcurrentUpdate, m) => ApiError::concurrent(m),
            StoreError::Conflict(Conflict::Duplicate, m) => {
                ApiError::conflict(m).with_code(Code::DuplicateName)
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

/// Upstream's `ResourceProviderConcurrentUpdateDetected` text: the words of a lost
/// provider-generation race ([`accel_store::Conflict::ProviderRace`], the store's
/// signal to rerun a claim).
const PROVIDER_RACE: &str =
    "Another thread concurrently updated the resource provider data. Please retry your update";

/// The words of a consumer generation swap lost to another writer.
const CONSUMER_RACE: &str =
    "Another thread concurrently updated the data. Please retry your update";

/// The words of a provider generation swap lost to another writer.
const PROVIDER_CHANGED: &str = "resource provider generation conflict";

/// The detail of a lost generation race, for the handlers that put it after their own
/// words; `None` when `e` is not one.
pub(crate) fn race(e: &StoreError) -> Option<&str> {
    match e {
        StoreError::Conflict(Conflict::ProviderRace, _) => Some(PROVIDER_RACE),
        StoreError::Conflict(Conflict::ConcurrentUpdate, m) => Some(m.as_str()),
        StoreError::Refused(accel_store::Refused::Placement(Refused::ProviderChanged)) => {
            Some(PROVIDER_CHANGED)
        }
        StoreError::Refused(accel_store::Refused::Placement(Refused::ConsumerChanged)) => {
            Some(CONSUMER_RACE)
        }
        _ => None,
    }
}

/// The refusal `e` carries, when it is a Placement one.
pub(crate) fn placement_refusal(e: &StoreError) -> Option<&Refused> {
    match e {
        StoreError::Refused(accel_store::Refused::Placement(r)) => Some(r),
        _ => None,
    }
}

/// The wording of upstream's `ObjectActionError`, which every refused provider create or
/// update carries inside its 400 detail.
fn object_action(action: &str, reason: &str) -> String {
    format!("Object action {action} failed because: {reason}")
}

/// Why upstream's provider object refuses a parent.
fn parent_reason(why: ParentRefusal) -> &'static str {
    match why {
        ParentRefusal::Missing => "parent provider UUID does not exist.",
        ParentRefusal::Itself => "parent provider UUID cannot be same as UUID. Please set parent provider UUID to None if there is no parent.",
        ParentRefusal::Loop => "creating loop in the provider tree is not allowed.",
        ParentRefusal::Reparent => "re-parenting a provider is not currently allowed.",
        ParentRefusal::Unparent => "un-parenting a provider is not currently allowed.",
    }
}

/// Upstream's 400 for a provider create its object layer refuses.
pub(crate) fn provider_create_refused(uuid: &str, name: &str, reason: &str) -> ApiError {
    ApiError::bad_request(format!(
        "Unable to create resource provider \"{name}\", {uuid}: {}",
        object_action("create", reason)
    ))
}

/// Upstream's 404 for a provider its handler looks up first and does not catch.
pub(crate) fn no_provider(uuid: &str) -> ApiError {
    ApiError::not_found(format!("No resource provider with uuid {uuid} found")).without_vary()
}

/// Upstream's 404 where the handler catches the lookup's `NotFound` and words it again
/// (a provider's traits, its usages): the sentence twice.
pub(crate) fn provider_not_found_caught(uuid: &str) -> ApiError {
    ApiError::not_found(format!(
        "No resource provider with uuid {uuid} found: No resource provider with uuid {uuid} found"
    ))
}

/// Upstream's sentence for an inventory change that drops classes still allocated.
pub(crate) fn inventory_in_use(uuid: &str, classes: &[String]) -> String {
    format!(
        "Inventory for '{}' on resource provider '{uuid}' in use.",
        classes.join(", ")
    )
}

/// Upstream's sentence for a consumer generation that is not the client's
/// (`expected` `None`: no such consumer; `got` `None`: the client sent null).
pub(crate) fn consumer_generation(expected: Option<i64>, got: Option<i64>) -> String {
    let expected = expected.map_or_else(|| "null".to_owned(), |g| g.to_string());
    let got = got.map_or_else(|| "None".to_owned(), |g| g.to_string());
    format!("consumer generation conflict - expected {expected} but got {got}")
}

/// Upstream's `InvalidInventory` family of sentences.
pub(crate) fn invalid_inventory(i: &InvalidInventory) -> String {
    match i {
        InvalidInventory::Missing { classes, providers } => format!(
            "Inventory for '{}' on resource provider '{}' invalid.",
            classes.join(", "),
            providers.join(", ")
        ),
        InvalidInventory::Exceeds {
            class,
            provider,
            capacity,
        } => {
            let tail = if *capacity {
                "would exceed the capacity"
            } else {
                "would violate inventory constraints"
            };
            format!(
                "Unable to create allocation for '{class}' on resource provider '{provider}'. The requested amount {tail}."
            )
        }
    }
}

/// The words of each refusal of the Placement operations (upstream's sentences).
pub(crate) fn refused(r: Refused) -> ApiError {
    match r {
        Refused::NoProvider { uuid } => no_provider(&uuid),
        Refused::ProviderGeneration { .. } => ApiError::concurrent(
            "Resource provider's generation already changed. Please update the generation and try again.",
        ),
        Refused::ProviderChanged => ApiError::concurrent(PROVIDER_CHANGED),
        Refused::ConsumerChanged => ApiError::concurrent(CONSUMER_RACE),
        Refused::ProviderCreate { uuid, name, why } => {
            provider_create_refused(&uuid, &name, parent_reason(why))
        }
        Refused::ProviderUpdate { uuid, why } => {
            // upstream names a missing new parent a failed "create" even here
            let action = if why == ParentRefusal::Missing {
                "create"
            } else {
                "update"
            };
            ApiError::bad_request(format!(
                "Unable to save resource provider {uuid}: {}",
                object_action(action, parent_reason(why))
            ))
        }
        Refused::ProviderExists { uuid, name } => {
            let what: Vec<String> = [("uuid", uuid), ("name", name)]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| format!("{k}: {v}")))
                .collect();
            ApiError::conflict(format!(
                "Conflicting resource provider {} already exists.",
                what.join(", ")
            ))
            .with_code(Code::DuplicateName)
        }
        Refused::ProviderNameTaken { name } => ApiError::conflict(format!(
            "Conflicting resource provider {name} already exists."
        ))
        .with_code(Code::DuplicateName),
        Refused::ProviderHasChildren { uuid } => ApiError::conflict(format!(
            "Unable to delete parent resource provider {uuid}: It has child resource providers."
        ))
        .with_code(Code::ProviderCannotDeleteParent),
        Refused::ProviderInUse { uuid } => ApiError::conflict(format!(
            "Unable to delete resource provider {uuid}: Resource provider has allocations."
        ))
        .with_code(Code::ProviderInUse),
        Refused::ListUnknownClass { name } => ApiError::bad_request(format!(
            "Invalid resource class in resources parameter: No such resource class {name}."
        )),
        Refused::ListUnknownTraits { names } => ApiError::bad_request(format!(
            "Invalid trait(s) in \"required\" parameter: No such trait(s): {}.",
            names.join(", ")
        )),
        Refused::NoClass { name } => {
            ApiError::not_found(format!("No such resource class {name}.")).without_vary()
        }
        Refused::ClassExists { name } => {
            ApiError::conflict(format!("Conflicting resource class already exists: {name}"))
        }
        Refused::ClassNameTaken { name } => {
            ApiError::conflict(format!("Resource class already exists: {name}"))
        }
        Refused::ClassIdRace { name } => ApiError::conflict(format!(
            "Max retries of DB transaction exceeded attempting to create resource class: {name}, please try again."
        )),
        Refused::StandardClassUpdate { name } => {
            ApiError::bad_request(format!("Cannot update standard resource class {name}"))
        }
        Refused::StandardClassDelete { name } => ApiError::bad_request(format!(
            "Error in delete resource class: Cannot delete standard resource class {name}."
        )),
        Refused::ClassInUse { name } => ApiError::conflict(format!(
            "Error in delete resource class: Cannot delete resource class {name}. Class is in use in inventory."
        )),
        Refused::NoTrait { name } => ApiError::not_found(format!("No such trait(s): {name}.")),
        Refused::StandardTrait { name } => {
            ApiError::bad_request(format!("Cannot delete standard trait {name}."))
        }
        Refused::TraitInUse { name } => ApiError::conflict(format!(
            "The trait {name} is in use by a resource provider."
        )),
        Refused::UnknownTraits { names } => {
            ApiError::bad_request(format!("No such trait {}", names.join(", ")))
        }
        Refused::InventoryInUse { uuid, classes } => {
            ApiError::conflict(inventory_in_use(&uuid, &classes)).with_code(Code::InventoryInUse)
        }
    }
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
