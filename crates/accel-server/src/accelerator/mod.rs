//! The accelerator API, compatible with OpenStack Cyborg v2 (microversions 2.0–2.3).
//!
//! Its own router and its own error format, beside the Placement API on the same store.
//! It stands behind the front door ([`crate::front`]); [`api`] fills the door's hooks
//! in the order of Cyborg's WSGI pipeline (prefixes, public documents, auth,
//! microversion, route table) and holds the route table. Handlers take the door's
//! [`Req`] with this API's [`Caller`], authorize (403), call the store and return a
//! [`Reply`]. Errors render in Cyborg's `error_message` envelope ([`error`]).
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
mod api;
mod arqs;
pub mod binder;
mod claims;
mod cleaning;
pub mod error;
mod hardware;
mod kubernetes;
mod maintenance;
pub mod microversion;
mod profiles;
mod pyjson;
mod render;
mod webob;

pub use crate::front::Reply;
pub use api::Cyborg;

use crate::front::Request;
use crate::state::Shared;
use accel_core::policy::{Policy, Target};
use accel_store::accelerator::Scope;
use axum::http::StatusCode;
use error::{AccelError, AccelResult};
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
    crate::front::router::<Cyborg>(state)
}

/// One authenticated request, as handlers see it: the front door's, with the caller
/// as Cyborg sees it.
pub(crate) type Req = Request<Cyborg>;

/// What Cyborg adds to the request context.
pub struct Caller {
    /// Upstream's `context.is_admin`: `admin` among the roles.
    is_admin: bool,
    /// Whether a service token with a service role came along (Nova's calls).
    is_service: bool,
    /// `scheme://host` for links, as Pecan's `host_url`.
    host_url: String,
}

impl Req {
    pub fn is_admin(&self) -> bool {
        self.local.is_admin
    }

    pub fn is_service(&self) -> bool {
        self.local.is_service
    }

    pub fn host_url(&self) -> &str {
        &self.local.host_url
    }

    /// Enforces `rule` with Cyborg's target (the caller's own project and user) and
    /// `is_admin` among the credentials, as `authorize_wsgi` does.
    pub fn authorize(&self, st: &AccelState, rule: &str) -> AccelResult<()> {
        let mut creds = self.creds.policy.clone();
        creds.is_admin = Some(self.is_admin());
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
        if self.is_admin() {
            Scope::All
        } else {
            Scope::Project(self.creds.project_id().unwrap_or_default().to_owned())
        }
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
        self.json_arg("body")
    }

    /// The body, read as WSME reads the handler's body argument `name`: absent is a
    /// missing argument, text that is not JSON is refused in WSME's words.
    pub fn json_arg(&self, name: &str) -> AccelResult<Value> {
        if self.body.is_empty() {
            return Err(AccelError::bad_request(format!(
                "Missing argument: \"{name}\""
            )));
        }
        serde_json::from_slice(&self.body)
            .map_err(|_| AccelError::bad_request("Request is not in valid JSON format"))
    }

    /// `<host>/accelerator/v2/<resource>/<id>`, the link Cyborg hard-codes.
    pub fn link(&self, resource: &str, id: &str) -> String {
        format!("{}/accelerator/v2/{resource}/{id}", self.host_url())
    }

    pub fn bookmark(&self, resource: &str, id: &str) -> String {
        format!("{}/accelerator/{resource}/{id}", self.host_url())
    }
}

pub(crate) use accel_core::ids::is_uuid_like;

/// A path segment or query value WSME types as `uuid`, refused in WSME's words.
pub(crate) fn require_uuid(s: &str) -> AccelResult<()> {
    require_uuid_arg("uuid", s)
}

/// Argument `name`, which WSME types as `uuid`.
pub(crate) fn require_uuid_arg(name: &str, s: &str) -> AccelResult<()> {
    if is_uuid_like(s) {
        Ok(())
    } else {
        Err(AccelError::invalid_uuid_arg(name, s))
    }
}

/// A JSON answer: a wire type of `accel_api`, or a `Value`.
pub(crate) fn json_reply(status: StatusCode, body: &impl serde::Serialize) -> Reply {
    let text = serde_json::to_vec(body).unwrap_or_else(|_| b"null".to_vec());
    Reply::status(status).body(text)
}
