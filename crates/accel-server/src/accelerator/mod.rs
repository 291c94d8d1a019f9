//! The accelerator API, compatible with OpenStack Cyborg v2 (microversions 2.0–2.3).
//!
//! Its own router and its own error format, beside the Placement API on the same store.
//! One fallback handler ([`handle`]) does what Cyborg's WSGI pipeline does, in its order:
//!
//! ```text
//! path ─▶ strip "/accelerator" (DevStack mount) ─▶ "/" public root document
//!      ─▶ strip "v2" (Pecan prepends it when absent) ─▶ "/v2" public version document
//!      ─▶ auth (401, keystonemiddleware's body) ─▶ microversion (406 + min/max headers)
//!      ─▶ route table ([`route`]: 404 / 405) ─▶ handler ─▶ policy (403) ─▶ store
//! ```
//!
//! Errors render in Cyborg's `error_message` envelope ([`error`]). Every `/v2` response
//! carries `OpenStack-API-Minimum-Version`, `-Maximum-Version`, `Vary` and, once the
//! version parsed, `OpenStack-API-Version: accelerator 2.x`; `/` carries none.
//!
//! Differences from upstream (docs/cyborg-compat.md): validation failures upstream
//! answers with 500 are 4xx here; multi-name profile deletes and ARQ batch creates are
//! all-or-nothing; list filtering happens in SQL.
//!
//! Invariants:
//!
//! - **ARQs are project-scoped in SQL.** Every ARQ query takes a `Scope` (admin: all;
//!   otherwise the caller's project), so another project's ARQ is a 404, never a leak
//!   (CVE-2026-40214). Lists filter on indexed `instance_uuid` / `project_id` and join the
//!   profile and attach handle in the same query.
//! - **Hardware reads need a manager or an admin** in legacy and new-defaults mode alike
//!   (CVE-2026-40213); profile, attribute and device writes need an admin; bind, unbind,
//!   delete by instance and deletion of a bound ARQ need a service token.
//! - **A bind is durable before 202.** PATCH validates every ARQ's patch first, then, in
//!   one transaction, moves each ARQ `Initial|Unbound → BindStarted` with a conditional
//!   `UPDATE .. WHERE state IN (..)` and writes its `bind_jobs` row (deadline = now +
//!   bind timeout), then wakes this process's bind worker.
//! - **Writes are all-or-nothing**: a profile create, a multi-name profile delete, an ARQ
//!   batch create or delete, a patch over several ARQs and a host report are each one
//!   `Store::write`.
//! - **Group order is kept** (stored as JSON text with key order), because group index N is
//!   Nova's request group `device_profile_N`.

pub mod agent;
mod arqs;
pub mod binder;
mod claims;
mod cleaning;
pub mod error;
mod hardware;
mod kubernetes;
pub mod microversion;
mod profiles;
mod render;

use crate::auth::Credentials;
use crate::state::Shared;
use accel_core::policy::{Policy, Target};
use accel_store::accelerator::Scope;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use error::{AccelError, AccelResult};
use microversion::Version;
use serde_json::Value;
use std::sync::Arc;

/// What accelerator handlers reach: the shared application state and Cyborg's policy.
pub struct AccelState {
    pub app: Arc<Shared>,
    pub policy: Policy,
    /// How long a bind may take before it is failed (upstream `bind_timeout`, 60 s).
    pub bind_timeout_secs: i64,
    /// Wakes this process's bind worker ([`binder`]) when a bind is accepted.
    pub bind_wakeup: Arc<tokio::sync::Notify>,
    /// The external Placement (`[placement]`) that device providers are pushed to, if
    /// any ([`crate::external`]).
    pub external: Option<Arc<crate::external::ExternalPlacement>>,
    /// Whether the event sender has a Nova to send to: without one, events are
    /// recorded `no_endpoint`, a state of the deployment the console shows once
    /// rather than a failure of every ARQ (issue 31 item 9).
    pub nova_configured: bool,
}

/// The accelerator router; mount it on its own listener. It answers under both `/`
/// and `/accelerator`.
pub fn router(state: Arc<AccelState>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

/// One authenticated request, as handlers see it.
pub(crate) struct Ctx {
    pub version: Version,
    pub creds: Credentials,
    /// Upstream's `context.is_admin`: `admin` among the roles.
    pub is_admin: bool,
    /// Whether a service token with a service role came along (Nova's calls).
    pub is_service: bool,
    pub query: Vec<(String, String)>,
    pub body: Bytes,
    /// `scheme://host` for links, as Pecan's `host_url`.
    pub host_url: String,
}

impl Ctx {
    /// Enforces `rule` with Cyborg's target (the caller's own project and user) and
    /// `is_admin` among the credentials, as `authorize_wsgi` does.
    pub fn authorize(&self, st: &AccelState, rule: &str) -> AccelResult<()> {
        let mut creds = self.creds.policy.clone();
        creds.is_admin = Some(self.is_admin);
        let target = Target::from_credentials(&creds);
        match st.policy.authorize(rule, &creds, &target) {
            Ok(d) if d.is_allowed() => Ok(()),
            Ok(_) => Err(AccelError::denied(rule)),
            Err(e) => Err(AccelError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                e.to_string(),
            )),
        }
    }

    /// Which ARQs the caller may see (CVE-2026-40214): all for an admin, else its
    /// project's.
    pub fn scope(&self) -> Scope {
        if self.is_admin {
            Scope::All
        } else {
            Scope::Project(self.creds.project_id().unwrap_or_default().to_owned())
        }
    }

    /// The last value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// WSME refuses parameters a handler does not declare.
    pub fn only_params(&self, allowed: &[&str]) -> AccelResult<()> {
        match self
            .query
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            Some((k, _)) => Err(AccelError::bad_request(format!(
                "Unknown argument: \"{k}\""
            ))),
            None => Ok(()),
        }
    }

    pub fn json_body(&self) -> AccelResult<Value> {
        if self.body.is_empty() {
            return Err(AccelError::bad_request("Missing argument: \"body\""));
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| AccelError::bad_request(format!("Request body is not valid JSON: {e}")))
    }

    /// `<host>/accelerator/v2/<resource>/<id>`, the link Cyborg hard-codes.
    pub fn link(&self, resource: &str, id: &str) -> String {
        format!("{}/accelerator/v2/{resource}/{id}", self.host_url)
    }

    pub fn bookmark(&self, resource: &str, id: &str) -> String {
        format!("{}/accelerator/{resource}/{id}", self.host_url)
    }
}

pub(crate) use accel_core::ids::is_uuid_like;

/// A path segment or query value WSME types as `uuid`.
pub(crate) fn require_uuid(s: &str) -> AccelResult<()> {
    if is_uuid_like(s) {
        Ok(())
    } else {
        Err(AccelError::invalid_uuid(s))
    }
}

fn host_url(headers: &HeaderMap) -> String {
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let scheme = h("x-forwarded-proto").unwrap_or("http");
    let host = h("x-forwarded-host")
        .or_else(|| h("host"))
        .unwrap_or("localhost");
    format!("{scheme}://{host}")
}

/// A JSON answer: a wire type of `accel_api`, or a `Value`.
pub(crate) fn json_reply(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    let text = serde_json::to_string(body).unwrap_or_else(|_| "null".to_owned());
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

pub(crate) fn empty_reply(status: StatusCode) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = status;
    resp
}

async fn handle(State(st): State<Arc<AccelState>>, request: Request<Body>) -> Response<Body> {
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let (parts, body) = request.into_parts();
    let mut path = parts.uri.path();
    if let Some(rest) = path.strip_prefix("/accelerator") {
        if rest.is_empty() || rest.starts_with('/') {
            path = rest;
        }
    }
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".json").unwrap_or(path);
    let mut segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let host_url = host_url(&parts.headers);

    let resp = if segs.is_empty() {
        if parts.method == Method::GET {
            json_reply(StatusCode::OK, &render::root_document(&host_url))
        } else {
            AccelError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "The method specified is not allowed for this resource.",
            )
            .into_response()
        }
    } else {
        if segs[0] == "v2" {
            segs.remove(0);
        }
        versioned(
            &st,
            &parts.method,
            &parts.headers,
            parts.uri.query(),
            &segs,
            body,
            host_url,
        )
        .await
    };
    let mut resp = resp;
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-openstack-request-id", v);
    }
    resp
}

/// Everything under `/v2`: version headers on every answer, auth except for the
/// version document.
async fn versioned(
    st: &Arc<AccelState>,
    method: &Method,
    headers: &HeaderMap,
    query: Option<&str>,
    segs: &[&str],
    body: Body,
    host_url: String,
) -> Response<Body> {
    let public = segs.is_empty();
    let creds = if public {
        Credentials::anonymous()
    } else {
        match st.app.config.authenticate(headers).await {
            Ok(c) => c,
            // keystonemiddleware's 401 sits outside Cyborg's app: its own body, no
            // envelope, no version headers.
            Err(rejection) => return error::rejection(&rejection),
        }
    };
    let version = microversion::parse(
        headers
            .get_all("openstack-api-version")
            .iter()
            .filter_map(|v| v.to_str().ok()),
    );
    let mut resp = match version {
        Err(msg) => AccelError::not_acceptable(msg).into_response(),
        Ok(version) => {
            let result = async {
                if let Some(m) = crate::state::query_too_long(query) {
                    return Err(AccelError::bad_request(m));
                }
                let body = crate::listen::read_body(headers, body, &st.app.config.http)
                    .await
                    .map_err(|e| {
                        let (status, message) = e.status_and_message();
                        AccelError::new(status, message)
                    })?;
                let ctx = Ctx {
                    version,
                    is_admin: creds.policy.roles.iter().any(|r| r == "admin"),
                    is_service: st.app.config.is_service(&creds),
                    creds,
                    query: form_urlencoded::parse(query.unwrap_or("").as_bytes())
                        .map(|(k, v)| (k.into_owned(), v.into_owned()))
                        .collect(),
                    body,
                    host_url,
                };
                route(st, method, segs, &ctx).await
            }
            .await;
            let mut resp = result.unwrap_or_else(AccelError::into_response);
            if let Ok(v) = HeaderValue::from_str(&format!("accelerator {version}")) {
                resp.headers_mut().insert("openstack-api-version", v);
            }
            resp
        }
    };
    let h = resp.headers_mut();
    h.insert(
        "openstack-api-minimum-version",
        HeaderValue::from_static("2.0"),
    );
    h.insert(
        "openstack-api-maximum-version",
        HeaderValue::from_static("2.3"),
    );
    h.insert("vary", HeaderValue::from_static("OpenStack-API-Version"));
    resp
}

/// The route table: one `match` on method and path segments.
async fn route(
    st: &AccelState,
    method: &Method,
    segs: &[&str],
    ctx: &Ctx,
) -> AccelResult<Response<Body>> {
    use Method as M;
    let m = method.clone();
    let allowed: &[Method] = match segs {
        [] => match m {
            M::GET => {
                return Ok(json_reply(
                    StatusCode::OK,
                    &render::v2_document(&ctx.host_url),
                ))
            }
            _ => &[M::GET],
        },
        ["device_profiles"] => match m {
            M::GET => return profiles::list(st, ctx).await,
            M::POST => return profiles::create(st, ctx).await,
            M::DELETE => return profiles::delete(st, ctx, None).await,
            _ => &[M::GET, M::POST, M::DELETE],
        },
        ["device_profiles", id] => match m {
            M::GET => return profiles::show(st, ctx, id).await,
            M::DELETE => return profiles::delete(st, ctx, Some(id)).await,
            _ => &[M::GET, M::DELETE],
        },
        ["accelerator_requests"] => match m {
            M::GET => return arqs::list(st, ctx).await,
            M::POST => return arqs::create(st, ctx).await,
            M::PATCH => return arqs::patch(st, ctx, None).await,
            M::DELETE => return arqs::delete(st, ctx, None).await,
            _ => &[M::GET, M::POST, M::PATCH, M::DELETE],
        },
        ["accelerator_requests", id] => match m {
            M::GET => return arqs::show(st, ctx, id).await,
            M::PATCH => return arqs::patch(st, ctx, Some(id)).await,
            M::DELETE => return arqs::delete(st, ctx, Some(id)).await,
            _ => &[M::GET, M::PATCH, M::DELETE],
        },
        ["devices"] => match m {
            M::GET => return hardware::list_devices(st, ctx).await,
            _ => &[M::GET],
        },
        ["devices", id] => match m {
            M::GET => return hardware::show_device(st, ctx, id).await,
            _ => &[M::GET],
        },
        ["devices", id, action @ ("enable" | "disable")] => match m {
            M::POST => return hardware::set_device_status(st, ctx, id, action).await,
            _ => &[M::POST],
        },
        ["deployables"] => match m {
            M::GET => return hardware::list_deployables(st, ctx).await,
            _ => &[M::GET],
        },
        ["deployables", id] => match m {
            M::GET => return hardware::show_deployable(st, ctx, id).await,
            _ => &[M::GET],
        },
        ["deployables", id, "program"] => match m {
            M::PATCH => return hardware::program_deployable(st, ctx, id).await,
            _ => &[M::PATCH],
        },
        ["attributes"] => match m {
            M::GET => return hardware::list_attributes(st, ctx).await,
            M::POST => return hardware::create_attribute(st, ctx).await,
            _ => &[M::GET, M::POST],
        },
        ["attributes", id] => match m {
            M::GET => return hardware::show_attribute(st, ctx, id).await,
            M::DELETE => return hardware::delete_attribute(st, ctx, id).await,
            _ => &[M::GET, M::DELETE],
        },
        ["agent", "hosts", host] => match m {
            M::GET => return agent::show_host(st, ctx, host).await,
            M::PUT => return agent::own_host(st, ctx, host).await,
            _ => &[M::GET, M::PUT],
        },
        ["agent", "hosts", host, "devices"] => match m {
            M::PUT => return agent::report(st, ctx, host).await,
            _ => &[M::PUT],
        },
        ["agent", "hosts", host, "programs"] => match m {
            M::GET => return agent::pending_programs(st, ctx, host).await,
            _ => &[M::GET],
        },
        ["agent", "hosts", host, "programs", id] => match m {
            M::PUT => return agent::finish_program(st, ctx, host, id).await,
            _ => &[M::PUT],
        },
        ["agent", "hosts", host, "cleanings"] => match m {
            M::GET => return cleaning::take(st, ctx, host).await,
            _ => &[M::GET],
        },
        ["agent", "hosts", host, "cleanings", rp] => match m {
            M::PUT => return cleaning::finish(st, ctx, host, rp).await,
            _ => &[M::PUT],
        },
        ["device_cleanings"] => match m {
            M::GET => return cleaning::list(st, ctx).await,
            _ => &[M::GET],
        },
        ["device_cleanings", id, action @ ("clean" | "release")] => match m {
            M::POST => return cleaning::act(st, ctx, id, action).await,
            _ => &[M::POST],
        },
        ["agent", "hosts", host, "kubernetes"] => match m {
            M::GET => return kubernetes::show(st, ctx, host).await,
            M::PUT => return kubernetes::save(st, ctx, host).await,
            _ => &[M::GET, M::PUT],
        },
        ["agent", "hosts", host, "kubernetes", "claims", uid] => match m {
            M::PUT => return claims::prepare(st, ctx, host, uid).await,
            M::DELETE => return claims::unprepare(st, ctx, host, uid).await,
            _ => &[M::PUT, M::DELETE],
        },
        _ => return Err(AccelError::not_found("The resource could not be found.")),
    };
    let mut resp = AccelError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "The method specified is not allowed for this resource.",
    )
    .into_response();
    let allow: Vec<&str> = allowed.iter().map(Method::as_str).collect();
    if let Ok(v) = HeaderValue::from_str(&allow.join(", ")) {
        resp.headers_mut().insert("allow", v);
    }
    Ok(resp)
}
