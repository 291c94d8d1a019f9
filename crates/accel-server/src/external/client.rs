//! The external Placement's client: [`accel_api::placement::Client`] configured from
//! `[placement]` (a static token and `endpoint_override`, or a Keystone password
//! session with the endpoint from the catalog), and its failures worded for logs and
//! `last_error`.

use super::PlacementConfig;
use accel_api::http::{self, Auth, Endpoint, Http, Options};
use accel_api::placement::{self, mv, Version};
use accel_keystone::{Session, SessionConfig};
use std::sync::Arc;
use std::time::Duration;

/// Why a push or a lookup failed (network, Keystone, endpoint, or Placement's answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RemoteError(pub String);

impl RemoteError {
    /// `what` failed with `e`: `"{what}: HTTP {status}: {detail}"` for Placement's
    /// answers (the detail cut at 300 characters).
    pub fn of(what: &str, e: &http::Error) -> RemoteError {
        RemoteError(match e {
            http::Error::Status {
                status, message, ..
            } => {
                let detail: String = message.chars().take(300).collect();
                format!("{what}: HTTP {status}: {detail}")
            }
            http::Error::Keystone(k) => format!("[placement] Keystone: {k}"),
            e => format!("{what}: {e}"),
        })
    }
}

/// The microversion of [`Client::provider_by_name`]'s lookup.
const LOOKUP: Version = mv::NESTED_PROVIDERS;

pub struct Client {
    cfg: PlacementConfig,
    api: placement::Client,
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
        let options = Options {
            timeout: Some(timeout),
            connect_timeout: Some(timeout.min(Duration::from_secs(10))),
            ..Options::default()
        };
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let (endpoint, auth) = match &cfg.token {
            Some(t) => (
                Endpoint::Url(opt(&cfg.endpoint_override)),
                Auth::Token(t.expose().to_owned()),
            ),
            // The session answers `endpoint_override` when set, else the catalog's.
            None => (
                Endpoint::Catalog("placement"),
                Auth::Keystone(Arc::new(Session::new(SessionConfig {
                    auth_url: opt(&cfg.auth_url),
                    auth_type: cfg.auth_type.clone().unwrap_or_else(|| "password".into()),
                    username: opt(&cfg.username),
                    password: cfg.password.clone().unwrap_or_default(),
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
            ),
        };
        let http = Http::new(endpoint, auth, options)
            .map_err(|e| format!("building the Placement HTTP client: {e}"))?;
        Ok(Client {
            cfg,
            api: placement::Client::new(http),
        })
    }

    /// The typed Placement client.
    pub fn api(&self) -> &placement::Client {
        &self.api
    }

    /// Where requests go, for messages (the override, or the catalog's once known).
    pub async fn endpoint(&self) -> String {
        match self.api.base().await {
            Ok(u) => u,
            Err(_) => match &self.cfg.endpoint_override {
                Some(u) => u.clone(),
                None => "the catalog's placement endpoint".into(),
            },
        }
    }

    /// The provider named `name` (the compute node), as `(uuid, name)`.
    pub async fn provider_by_name(
        &self,
        name: &str,
    ) -> Result<Option<(String, String)>, RemoteError> {
        let found = self
            .api
            .providers(LOOKUP, &[("name", name)])
            .await
            .map_err(|e| RemoteError::of("GET /resource_providers?name=", &e))?;
        Ok(found.into_iter().next().map(|p| (p.uuid, p.name)))
    }
}
