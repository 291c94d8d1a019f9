//! Who is calling: `noauth` (upstream's `noauth2`, the default) or `keystone`.
//!
//! noauth2 semantics, as the gabbi suite relies on them: `x-auth-token: user[:project]`
//! names the user and project (project defaults to the user); `X-Roles` (comma
//! separated) wins over the token, else user `admin` has role `admin`; a present
//! `OpenStack-System-Scope` header makes the token system-scoped (no project from the
//! token); `X-Project-Id` overrides the project as oslo.context reads it;
//! `X-Service-Token: user[:project[:roles]]` is a service token whose roles (default
//! `service`) count as validated, so Nova without Keystone binds without a shim;
//! without one, `X-Service-Roles` stands for a validated service token's roles. No
//! token is 401 except on `/`.
//!
//! keystone: tokens are validated against Keystone v3 ([`keystone`]); identity
//! headers sent by the client are ignored. Both APIs call [`authenticate`] and render a
//! [`Rejection`] in their own format.
//!
//! Invariants:
//!
//! - **In keystone mode, identity comes only from token bodies**: client-sent identity
//!   headers are never read (keystonemiddleware strips them), so a member cannot claim
//!   `X-Roles: admin` or another project.
//! - **The cache is bounded and can only shorten trust**: an entry lives until the earlier
//!   of `token_cache_time` and the token's own `expires_at`; a full cache drops expired
//!   entries, then the soonest to expire. Only successful validations are cached.
//! - **Service-ness is a fact about the service token**, decided in `auth::is_service`
//!   against `service_token_roles`; the accelerator API's gate (bind, unbind, deletes by
//!   instance) asks it, never a header.
//! - Missing or refused token: 401 with `WWW-Authenticate: Keystone uri=...`; Keystone
//!   unreachable or refusing our own credentials: 503, as keystonemiddleware answers.

mod cache;
pub mod keystone;

use crate::AppState;
use accel_core::policy;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::json;

/// How requests are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthStrategy {
    #[default]
    Noauth,
    Keystone,
}

impl std::str::FromStr for AuthStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "noauth" | "noauth2" => Ok(AuthStrategy::Noauth),
            "keystone" => Ok(AuthStrategy::Keystone),
            other => Err(format!(
                "unknown auth strategy {other:?}: use noauth or keystone"
            )),
        }
    }
}

impl accel_settings::ShowDefault for AuthStrategy {
    fn show_default(&self) -> Option<String> {
        Some(
            match self {
                AuthStrategy::Noauth => "noauth",
                AuthStrategy::Keystone => "keystone",
            }
            .into(),
        )
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    pub policy: policy::Credentials,
}

impl Credentials {
    pub fn anonymous() -> Self {
        Credentials::default()
    }

    /// Upstream's default policy target: the caller's own project and user.
    pub fn default_target(&self) -> policy::Target {
        policy::Target::from_credentials(&self.policy)
    }

    pub fn project_id(&self) -> Option<&str> {
        self.policy.project_id.as_deref()
    }

    pub fn user_id(&self) -> Option<&str> {
        self.policy.user_id.as_deref()
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// No token, or Keystone refused it: 401, with keystonemiddleware's
    /// `WWW-Authenticate: Keystone uri="..."` in keystone mode.
    Unauthorized { www_authenticate: Option<String> },
    /// Keystone could not be asked: 503, as keystonemiddleware answers.
    Unavailable,
}

const AUTH_REQUIRED: &str = "The request you have made requires authentication.";
const KEYSTONE_UNAVAILABLE: &str = "The Keystone service is temporarily unavailable.";

impl Rejection {
    /// The Placement API's rendering: webob's body in noauth mode (what upstream's
    /// noauth2 middleware returns, which the gabbi suite sees); the `errors` envelope
    /// in keystone mode.
    pub fn placement_response(&self, request_id: &str) -> Response<Body> {
        match self {
            Rejection::Unauthorized {
                www_authenticate: None,
            } => unauthorized(),
            Rejection::Unauthorized {
                www_authenticate: Some(uri),
            } => with_www_authenticate(
                placement_error(StatusCode::UNAUTHORIZED, AUTH_REQUIRED, request_id),
                uri,
            ),
            Rejection::Unavailable => placement_error(
                StatusCode::SERVICE_UNAVAILABLE,
                KEYSTONE_UNAVAILABLE,
                request_id,
            ),
        }
    }

    /// keystonemiddleware's rendering, which sits outside Cyborg's error envelope:
    /// `{"error": {"code": 401, "title": "Unauthorized", "message": ...}}`, and webob's
    /// JSON body for its 503.
    pub fn keystonemiddleware_response(&self) -> Response<Body> {
        match self {
            Rejection::Unauthorized { www_authenticate } => {
                let resp = crate::placement::json_response(
                    StatusCode::UNAUTHORIZED,
                    &json!({"error": {"code": 401, "title": "Unauthorized",
                        "message": AUTH_REQUIRED}}),
                );
                match www_authenticate {
                    Some(uri) => with_www_authenticate(resp, uri),
                    None => resp,
                }
            }
            Rejection::Unavailable => crate::placement::json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({
                    "message": format!("The server is currently unavailable. Please try again at a later time.<br /><br />\n{KEYSTONE_UNAVAILABLE}\n\n"),
                    "code": "503 Service Unavailable",
                    "title": "Service Unavailable",
                }),
            ),
        }
    }
}

fn placement_error(status: StatusCode, detail: &str, request_id: &str) -> Response<Body> {
    crate::placement::json_response(
        status,
        &json!({"errors": [{
            "status": status.as_u16(),
            "title": status.canonical_reason().unwrap_or(""),
            "detail": detail,
            "request_id": request_id,
        }]}),
    )
}

fn with_www_authenticate(mut resp: Response<Body>, value: &str) -> Response<Body> {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert("www-authenticate", v);
    }
    resp
}

/// Authenticates a request.
pub async fn authenticate(app: &AppState, headers: &HeaderMap) -> Result<Credentials, Rejection> {
    let result = authenticate_caller(app, headers).await;
    if let Ok(c) = &result {
        // The access log names the caller (crate::observe).
        crate::observe::note_caller(c.user_id(), c.project_id());
    }
    result
}

async fn authenticate_caller(
    app: &AppState,
    headers: &HeaderMap,
) -> Result<Credentials, Rejection> {
    match app.config.auth_strategy {
        AuthStrategy::Noauth => noauth(headers).ok_or(Rejection::Unauthorized {
            www_authenticate: None,
        }),
        AuthStrategy::Keystone => match &app.config.keystone {
            Some(k) => k.authenticate(headers).await,
            // A keystone-configured server without its validator refuses rather
            // than trusting headers.
            None => {
                tracing::error!("auth_strategy is keystone but no [keystone_authtoken] is set");
                Err(Rejection::Unavailable)
            }
        },
    }
}

/// Whether the caller presented a service token that counts as a service's: its roles
/// meet `[keystone_authtoken] service_token_roles` (Cyborg's `is_service_request`;
/// `service` in noauth mode).
pub fn is_service(app: &AppState, creds: &Credentials) -> bool {
    let roles = &creds.policy.service_roles;
    match (&app.config.auth_strategy, &app.config.keystone) {
        (AuthStrategy::Keystone, Some(k)) => roles
            .iter()
            .any(|r| k.config().service_token_roles.contains(r)),
        _ => roles.iter().any(|r| r == "service"),
    }
}

/// noauth2 as upstream implements it.
pub fn noauth(headers: &HeaderMap) -> Option<Credentials> {
    let token = header(headers, "x-auth-token")?;
    let (user, project) = match token.split_once(':') {
        Some((u, p)) if !p.is_empty() => (u, p),
        Some((u, _)) => (u, u),
        None => (token, token),
    };
    let roles: Vec<String> = match header(headers, "x-roles") {
        Some(r) => r
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
        None if user == "admin" => vec!["admin".to_owned()],
        None => Vec::new(),
    };
    let system_scope = header(headers, "openstack-system-scope")
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let project_id = header(headers, "x-project-id")
        .map(str::to_owned)
        .or_else(|| system_scope.is_none().then(|| project.to_owned()));
    let service_roles = match header(headers, "x-service-token").filter(|t| !t.is_empty()) {
        Some(token) => noauth_service_roles(token),
        // What keystonemiddleware sets after validating an X-Service-Token; without a
        // service token noauth trusts it as it trusts X-Roles.
        None => header(headers, "x-service-roles")
            .map(split_roles)
            .unwrap_or_default(),
    };
    Some(Credentials {
        policy: policy::Credentials {
            roles,
            project_id,
            user_id: Some(user.to_owned()),
            system_scope,
            service_roles,
            ..Default::default()
        },
    })
}

fn split_roles(r: &str) -> Vec<String> {
    r.split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// noauth's dev-mode convention for a service token: Nova without Keystone
/// (`[service_user] auth_type = admin_token`) sends `X-Service-Token: <user>`, which
/// reads as `user[:project[:roles]]` like `X-Auth-Token`, roles (comma separated)
/// defaulting to `service`. A service token given makes a client-sent
/// `X-Service-Roles` irrelevant.
fn noauth_service_roles(token: &str) -> Vec<String> {
    let mut parts = token.splitn(3, ':');
    let _user = parts.next();
    let _project = parts.next();
    match parts.next().map(split_roles) {
        Some(roles) if !roles.is_empty() => roles,
        _ => vec!["service".to_owned()],
    }
}

/// webob's default 401 body, which noauth2 returns.
pub fn unauthorized() -> Response<Body> {
    let body = json!({
        "message": "This server could not verify that you are authorized to access the document you requested. Either you supplied the wrong credentials (e.g., bad password), or your browser does not understand how to supply the credentials required.<br /><br />\n\n\n",
        "code": "401 Unauthorized",
        "title": "Unauthorized",
    });
    crate::placement::json_response(StatusCode::UNAUTHORIZED, &body)
}
