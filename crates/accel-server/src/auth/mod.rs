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

use accel_core::policy;
use axum::http::HeaderMap;

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

tokio::task_local! {
    static CALLER: std::cell::RefCell<Option<(String, String)>>;
}

/// Called once the caller is known: the access log ([`crate::observe`]) names the
/// user and project. Does nothing outside [`noting_caller`] (no access log written).
pub(crate) fn note_caller(user: Option<&str>, project: Option<&str>) {
    let _ = CALLER.try_with(|c| {
        *c.borrow_mut() = Some((
            user.unwrap_or("-").to_owned(),
            project.unwrap_or("-").to_owned(),
        ))
    });
}

/// Runs `handler` where [`note_caller`] records, and returns its answer with the
/// (user, project) noted, if any.
pub(crate) async fn noting_caller<T>(
    handler: impl std::future::Future<Output = T>,
) -> (T, Option<(String, String)>) {
    CALLER
        .scope(std::cell::RefCell::new(None), async {
            let out = handler.await;
            (out, CALLER.with(|c| c.borrow_mut().take()))
        })
        .await
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

/// Authenticates a request.
pub async fn authenticate(
    strategy: AuthStrategy,
    keystone: Option<&keystone::Keystone>,
    headers: &HeaderMap,
) -> Result<Credentials, Rejection> {
    let result = authenticate_caller(strategy, keystone, headers).await;
    if let Ok(c) = &result {
        // The access log names the caller (crate::observe).
        note_caller(c.user_id(), c.project_id());
    }
    result
}

async fn authenticate_caller(
    strategy: AuthStrategy,
    keystone: Option<&keystone::Keystone>,
    headers: &HeaderMap,
) -> Result<Credentials, Rejection> {
    match strategy {
        AuthStrategy::Noauth => noauth(headers).ok_or(Rejection::Unauthorized {
            www_authenticate: None,
        }),
        AuthStrategy::Keystone => match keystone {
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
pub fn is_service(
    strategy: AuthStrategy,
    keystone: Option<&keystone::Keystone>,
    creds: &Credentials,
) -> bool {
    let roles = &creds.policy.service_roles;
    match (strategy, keystone) {
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
