//! The HTTP client of the external Placement: its endpoint and token (a static token,
//! or a Keystone password token with the endpoint from the catalog), requests at a
//! chosen microversion, one retry with a fresh token on 401.

use super::PlacementConfig;
use accel_keystone::{Session, SessionConfig};
use serde_json::Value;
use std::time::Duration;

/// Why a request got no answer from Placement (network, Keystone, endpoint).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RemoteError(pub String);

/// A Placement answer: status and JSON body (`null` when there is none).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The error `code` of a Placement error body (microversion >= 1.23).
    pub fn code(&self) -> &str {
        self.body["errors"][0]["code"].as_str().unwrap_or("")
    }

    /// A short description for logs and `last_error`.
    pub fn describe(&self, what: &str) -> String {
        let detail = self.body["errors"][0]["detail"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| self.body.to_string());
        let detail: String = detail.chars().take(300).collect();
        format!("{what}: HTTP {}: {detail}", self.status)
    }
}

/// Where requests go and with which token.
enum Auth {
    /// A fixed token and the `endpoint_override`.
    Static { endpoint: String, token: String },
    /// A Keystone session (accel-keystone): its token, renewed before expiry and after
    /// a 401, and the catalog's `placement` endpoint unless `endpoint_override`.
    Keystone(Box<Session>),
}

pub struct Client {
    cfg: PlacementConfig,
    http: reqwest::Client,
    auth: Auth,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(cfg: PlacementConfig) -> Result<Client, String> {
        cfg.validate()?;
        let timeout = Duration::from_secs(cfg.timeout.unwrap_or(30));
        let http = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .timeout(timeout)
            .build()
            .map_err(|e| format!("building the Placement HTTP client: {e}"))?;
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let auth = match &cfg.token {
            Some(t) => Auth::Static {
                endpoint: opt(&cfg.endpoint_override),
                token: t.clone(),
            },
            None => Auth::Keystone(Box::new(Session::new(SessionConfig {
                auth_url: opt(&cfg.auth_url),
                auth_type: cfg.auth_type.clone().unwrap_or_else(|| "password".into()),
                username: opt(&cfg.username),
                password: opt(&cfg.password),
                project_name: opt(&cfg.project_name),
                user_domain_name: cfg
                    .user_domain_name
                    .clone()
                    .unwrap_or_else(|| "Default".into()),
                project_domain_name: cfg
                    .project_domain_name
                    .clone()
                    .unwrap_or_else(|| "Default".into()),
                region_name: cfg.region_name.clone(),
                interface: cfg.interface.clone().unwrap_or_else(|| "public".into()),
                endpoint_override: cfg.endpoint_override.clone(),
                http_connect_timeout: None,
            })?)),
        };
        Ok(Client { cfg, http, auth })
    }

    /// Where requests go, for messages (the override, or the catalog's once known).
    pub async fn endpoint(&self) -> String {
        match &self.auth {
            Auth::Static { endpoint, .. } => endpoint.clone(),
            Auth::Keystone(s) => s
                .endpoint("placement")
                .await
                .unwrap_or_else(|_| "the catalog's placement endpoint".into()),
        }
    }

    /// The endpoint and token to use now.
    async fn current(&self) -> Result<(String, String), RemoteError> {
        match &self.auth {
            Auth::Static { endpoint, token } => Ok((endpoint.clone(), token.clone())),
            Auth::Keystone(s) => {
                let keystone = |e: String| RemoteError(format!("[placement] Keystone: {e}"));
                let endpoint = s.endpoint("placement").await.map_err(keystone)?;
                Ok((endpoint, s.token().await.map_err(keystone)?))
            }
        }
    }

    /// One request at microversion `mv`; `path` starts with `/`. Placement's own
    /// errors are replies; only a missing answer is an error.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        mv: &str,
        body: Option<&Value>,
    ) -> Result<Reply, RemoteError> {
        for attempt in 0..2 {
            let (endpoint, token) = self.current().await?;
            let url = format!("{}{path}", endpoint.trim_end_matches('/'));
            let mut req = self
                .http
                .request(method.clone(), &url)
                .header("x-auth-token", &token)
                .header("openstack-api-version", format!("placement {mv}"))
                .header("accept", "application/json");
            if let Some(b) = body {
                req = req.json(b);
            }
            let resp = req
                .send()
                .await
                .map_err(|e| RemoteError(format!("{method} {url}: {e}")))?;
            let status = resp.status().as_u16();
            if let (401, 0, Auth::Keystone(s)) = (status, attempt, &self.auth) {
                s.invalidate(&token).await;
                continue;
            }
            let text = resp
                .text()
                .await
                .map_err(|e| RemoteError(format!("{method} {url}: {e}")))?;
            return Ok(Reply {
                status,
                body: serde_json::from_str(&text).unwrap_or(Value::Null),
            });
        }
        Err(RemoteError(
            "Placement refused a fresh Keystone token".into(),
        ))
    }

    /// The provider named `name` (the compute node), as `(uuid, name)`.
    pub async fn provider_by_name(
        &self,
        name: &str,
    ) -> Result<Option<(String, String)>, RemoteError> {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("name", name)
            .finish();
        let r = self
            .call(
                reqwest::Method::GET,
                &format!("/resource_providers?{q}"),
                "1.14",
                None,
            )
            .await?;
        if !r.ok() {
            return Err(RemoteError(r.describe("GET /resource_providers?name=")));
        }
        Ok(r.body["resource_providers"]
            .as_array()
            .and_then(|a| a.first())
            .and_then(|p| {
                Some((
                    p["uuid"].as_str()?.to_owned(),
                    p["name"].as_str()?.to_owned(),
                ))
            }))
    }
}
