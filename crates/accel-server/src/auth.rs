//! Who is calling: `noauth` (upstream's `noauth2`) today, with a seam for Keystone.
//!
//! noauth2 semantics, as the gabbi suite relies on them: `x-auth-token: user[:project]`
//! names the user and project (project defaults to the user); `X-Roles` (comma
//! separated) wins over the token, else user `admin` has role `admin`; a present
//! `OpenStack-System-Scope` header makes the token system-scoped (no project from the
//! token); `X-Project-Id` overrides the project as oslo.context reads it. No token is
//! 401 except on `/`.

use crate::AppState;
use accel_core::policy;
use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode};
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

/// Authenticates a request or answers 401.
pub async fn authenticate(
    app: &AppState,
    headers: &HeaderMap,
) -> Result<Credentials, Response<Body>> {
    match app.config.auth_strategy {
        AuthStrategy::Noauth => noauth(headers).ok_or_else(unauthorized),
        // Keystone token validation arrives with the accelerator API; until then a
        // keystone-configured server refuses rather than trusting headers.
        AuthStrategy::Keystone => Err(unauthorized()),
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
    Some(Credentials {
        policy: policy::Credentials {
            roles,
            project_id,
            user_id: Some(user.to_owned()),
            system_scope,
            ..Default::default()
        },
    })
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
