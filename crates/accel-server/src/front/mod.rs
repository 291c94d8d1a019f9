//! The one HTTP front door both APIs stand behind: it builds the request context once
//! ([`Request`]: request id, credentials, the API's version, query, headers, body under
//! the listener's limits, path parameters) and takes one reply type ([`Reply`]), so the
//! handlers of both APIs have one signature ([`Handler`]).
//!
//! What differs between the APIs is a trait, [`Api`]: the version and its parsing, the
//! error type and its envelope, the route table, the headers every answer carries. The
//! order of the steps is a contract clients observe (a 401 before a 406; Placement's 404
//! before a 413, Cyborg's 413 before a 404), so [`handle`] runs one sequence and each
//! API fills its hooks, choosing where the sequence lets it choose:
//!
//! ```text
//! request id ─▶ CORS preflight (Api::CORS) ─▶ Api::enter (prefixes, documents before auth)
//!   ─▶ auth unless Api::public (Api::rejection renders the typed refusal)
//!   ─▶ Api::version (Api::version_refused) ─▶ query length ─▶ Api::precheck
//!   ─▶ Api::route and the body read, in Api::ROUTE_BEFORE_BODY's order
//!   ─▶ Api::check ─▶ a place in the request's class (crate::admission; none within the
//!      wait: 503 with Retry-After) ─▶ a write while the maintenance switch is on: 503
//!      (neither for Api::open_in_maintenance) ─▶ the handler ─▶ Api::reply | Api::refusal
//!      ─▶ Api::stamp
//!   ─▶ request id headers and CORS on every answer
//! ```
//!
//! This module imports neither API: each one names itself to it (`impl Api for ..`).

mod request;

pub(crate) use request::query_pairs;
pub use request::{Head, Reply, Request};

use crate::auth::{Credentials, Rejection};
use crate::state::Shared;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, Method, Response, StatusCode};
use futures::future::BoxFuture;
use std::ops::ControlFlow;
use std::sync::Arc;

/// What every handler of API `A` is: its state and the request, to a reply or `A`'s
/// error.
pub type Handler<A> =
    fn(Arc<<A as Api>::State>, Request<A>) -> BoxFuture<'static, Result<Reply, <A as Api>::Error>>;

/// One API behind the front door: what [`handle`] asks of it, in the order it asks.
pub trait Api: Sized + Send + Sync + 'static {
    /// The API's own state (over [`Shared`]).
    type State: Send + Sync + 'static;
    /// An ordered microversion.
    type Version: Copy + Send + Sync + 'static;
    /// Why the version header was refused.
    type VersionError: Send;
    /// What handlers return; rendered by [`Api::refusal`].
    type Error: Send + 'static;
    /// The request's place in the API, as [`Api::enter`] read it from the path.
    type Target: Send + Sync;
    /// A resolved route (besides its path parameters).
    type Route: Send + Sync;
    /// What the API adds to the request context.
    type Local: Send + Sync;

    /// The API's name in metrics and logs (`placement`, `accelerator`).
    const NAME: &'static str;
    /// The headers that carry the request id, in the order they are set.
    const REQUEST_ID_HEADERS: &'static [&'static str];
    /// Whether CORS preflights are answered and answers decorated for the configured
    /// origins.
    const CORS: bool = false;
    /// Whether the route is resolved before the body is read (a 404 before a 413).
    const ROUTE_BEFORE_BODY: bool;

    fn shared(st: &Self::State) -> &Shared;
    /// Reads the path; `Break` is an answer given before authentication (a public
    /// document, a method refused there).
    fn enter(head: &Head) -> ControlFlow<Response<Body>, Self::Target>;
    /// Whether `target` is answered without credentials.
    fn public(target: &Self::Target) -> bool;
    /// Whether writes to `target` go on while the maintenance switch is on (the
    /// switch itself).
    fn open_in_maintenance(_target: &Self::Target) -> bool {
        false
    }
    /// The answer to a request authentication refused.
    fn rejection(r: &Rejection, head: &Head) -> Response<Body>;
    /// The version the values of `OpenStack-API-Version` ask for, in the API's service
    /// type (none: the API's oldest).
    fn version<'a>(
        values: impl Iterator<Item = &'a str>,
    ) -> Result<Self::Version, Self::VersionError>;
    /// The answer to a refused version header (before [`Api::stamp`] with no version).
    fn version_refused(e: Self::VersionError, head: &Head) -> Response<Body>;
    /// An error of the API with `status` and `message` (the query and body limits).
    fn error(status: StatusCode, message: String) -> Self::Error;
    /// Checks made on every request before the route is resolved.
    fn precheck(_head: &Head) -> Result<(), Self::Error> {
        Ok(())
    }
    /// The route for `target`, with its path parameters (the API's 404 and 405).
    fn route(
        target: &Self::Target,
        method: &Method,
        version: Self::Version,
    ) -> Result<(Self::Route, Vec<String>), Self::Error>;
    fn handler(route: &Self::Route) -> Handler<Self>;
    /// What the route asks of the request once it is read (media types).
    fn check(_route: &Self::Route, _req: &Request<Self>) -> Result<(), Self::Error> {
        Ok(())
    }
    /// The API's part of the request context.
    fn local(st: &Self::State, target: Self::Target, creds: &Credentials) -> Self::Local;
    /// A handler's reply as the API sends it.
    fn reply(reply: Reply, version: Self::Version, head: &Head) -> Response<Body>;
    /// An error in the API's envelope.
    fn refusal(e: Self::Error, version: Self::Version, head: &Head) -> Response<Body>;
    /// Whether the answer to `e` carries the version's `Vary`.
    fn varies(_e: &Self::Error) -> bool {
        true
    }
    /// The version headers of every answer past authentication (`None`: the version
    /// was refused).
    fn stamp(resp: &mut Response<Body>, version: Option<Self::Version>, vary: bool);
}

/// API `A`'s router: every request goes through [`handle`].
pub fn router<A: Api>(state: Arc<A::State>) -> axum::Router {
    axum::Router::new().fallback(handle::<A>).with_state(state)
}

/// The one dispatcher: see the module doc for its order.
pub async fn handle<A: Api>(
    State(st): State<Arc<A::State>>,
    request: axum::http::Request<Body>,
) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let head = Head {
        request_id: format!("req-{}", uuid::Uuid::new_v4()),
        parts,
    };
    let mut resp = answer::<A>(&st, &head, body).await;
    finish::<A>(&st, &head, &mut resp);
    resp
}

async fn answer<A: Api>(st: &Arc<A::State>, head: &Head, body: Body) -> Response<Body> {
    let shared = A::shared(st);
    if A::CORS {
        let origins = &shared.config.cors_allowed_origins;
        if let Some(resp) = crate::cors::preflight(origins, &head.parts.method, &head.parts.headers)
        {
            return resp;
        }
    }
    let target = match A::enter(head) {
        ControlFlow::Continue(t) => t,
        ControlFlow::Break(resp) => return resp,
    };
    let creds = if A::public(&target) {
        Credentials::anonymous()
    } else {
        match shared.config.authenticate(&head.parts.headers).await {
            Ok(c) => c,
            Err(rejection) => return A::rejection(&rejection, head),
        }
    };
    let values = head.parts.headers.get_all("openstack-api-version").iter();
    let version = match A::version(values.filter_map(|v| v.to_str().ok())) {
        Ok(v) => v,
        Err(e) => {
            let mut resp = A::version_refused(e, head);
            A::stamp(&mut resp, None, true);
            return resp;
        }
    };
    let (result, retry_after) = match serve::<A>(st, head, body, target, creds, version).await {
        Served::Done(result) => (result, None),
        Served::Shed(e, secs) => (Err(e), Some(secs)),
    };
    let vary = result.as_ref().err().is_none_or(A::varies);
    let mut resp = match result {
        Ok(reply) => A::reply(reply, version, head),
        Err(e) => A::refusal(e, version, head),
    };
    A::stamp(&mut resp, Some(version), vary);
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// How [`serve`] ended: the handler's result (or an earlier refusal), or a 503 of
/// admission with its `Retry-After` seconds.
enum Served<A: Api> {
    Done(Result<Reply, A::Error>),
    Shed(A::Error, u64),
}

/// The request's place among its class's ([`crate::admission`]); routes open in
/// maintenance (the switch itself) are never refused.
async fn admit<'a, A: Api>(
    shared: &'a Shared,
    head: &Head,
    open: bool,
) -> Result<Option<crate::admission::Admitted<'a>>, A::Error> {
    if open {
        return Ok(None);
    }
    let api = match A::NAME {
        "accelerator" => crate::observe::Api::Accelerator,
        _ => crate::observe::Api::Placement,
    };
    let method = &head.parts.method;
    let route = crate::observe::route_of(api, head.parts.uri.path());
    let class = crate::admission::Class::of(method, route);
    match shared.admission.admit(class).await {
        Ok(a) => Ok(Some(a)),
        Err(shed) => {
            shared.admission.count_shed(A::NAME, shed, &shared.metrics);
            Err(A::error(
                StatusCode::SERVICE_UNAVAILABLE,
                shared.admission.message(shed),
            ))
        }
    }
}

/// From the query's length to the handler's result, the handler run once the request
/// has its place ([`admit`]).
async fn serve<A: Api>(
    st: &Arc<A::State>,
    head: &Head,
    body: Body,
    target: A::Target,
    creds: Credentials,
    version: A::Version,
) -> Served<A> {
    let (route, req, open) = match prepare::<A>(st, head, body, target, creds, version).await {
        Ok(p) => p,
        Err(e) => return Served::Done(Err(e)),
    };
    let shared = A::shared(st);
    let _admitted = match admit::<A>(shared, head, open).await {
        Ok(a) => a,
        Err(e) => return Served::Shed(e, shared.admission.limits().retry_after_secs),
    };
    if !open && crate::maintenance::writes(&head.parts.method) {
        if let Err(e) = stopped::<A>(shared, head).await {
            return Served::Done(Err(e));
        }
    }
    Served::Done((A::handler(&route))(st.clone(), req).await)
}

/// From the query's length to the route's checks: the route, the request context, and
/// whether the route stays open in maintenance.
async fn prepare<A: Api>(
    st: &Arc<A::State>,
    head: &Head,
    body: Body,
    target: A::Target,
    creds: Credentials,
    version: A::Version,
) -> Result<(A::Route, Request<A>, bool), A::Error> {
    let (method, query) = (&head.parts.method, head.parts.uri.query());
    if let Some(m) = crate::state::query_too_long(query) {
        return Err(A::error(StatusCode::BAD_REQUEST, m));
    }
    A::precheck(head)?;
    let early = match A::ROUTE_BEFORE_BODY {
        true => Some(A::route(&target, method, version)?),
        false => None,
    };
    let body = crate::listen::read_body(&head.parts.headers, body, &A::shared(st).config.http)
        .await
        .map_err(|e| {
            let (status, message) = e.status_and_message();
            A::error(status, message)
        })?;
    let (route, params) = match early {
        Some(routed) => routed,
        None => A::route(&target, method, version)?,
    };
    let open = A::open_in_maintenance(&target);
    let local = A::local(st, target, &creds);
    let req = Request {
        method: method.clone(),
        request_id: head.request_id.clone(),
        creds,
        version,
        query: query_pairs(query.unwrap_or("")),
        headers: head.parts.headers.clone(),
        body,
        params,
        local,
    };
    A::check(&route, &req)?;
    Ok((route, req, open))
}

/// The maintenance switch's 503 for a write, in the API's envelope, when it is on.
async fn stopped<A: Api>(shared: &Shared, head: &Head) -> Result<(), A::Error> {
    let Some(m) = shared.maintenance.current(&shared.store).await else {
        return Ok(());
    };
    let kind = crate::metrics::KindLabel { kind: A::NAME };
    shared
        .metrics
        .maintenance_refusals
        .get_or_create(&kind)
        .inc();
    tracing::info!(target: "accel::maintenance", api = A::NAME, method = %head.parts.method, path = %head.parts.uri.path(), request_id = %head.request_id, reason = %m.reason, "write refused: maintenance");
    Err(A::error(
        StatusCode::SERVICE_UNAVAILABLE,
        crate::maintenance::refusal(&m),
    ))
}

/// The request id on every answer, and CORS where the API has it.
fn finish<A: Api>(st: &A::State, head: &Head, resp: &mut Response<Body>) {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&head.request_id) {
        for name in A::REQUEST_ID_HEADERS {
            h.insert(*name, v.clone());
        }
    }
    if A::CORS {
        let origins = &A::shared(st).config.cors_allowed_origins;
        crate::cors::decorate(origins, head.header("origin"), h);
    }
}
