//! The HTTP client of the external Placement: its endpoint and token (a static token,
//! or a Keystone password token with the endpoint from the catalog), requests at a
//! chosen microversion, one retry with a fresh token on 401.

use super::PlacementConfig;
use crate::auth::keystone::parse_timestamp;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

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

#[derive(Clone)]
struct Session {
    endpoint: String,
    token: String,
    /// `None` for a static token.
    expires_at: Option<SystemTime>,
}

/// Renew a Keystone token with less than this left (keystoneauth's margin).
const MARGIN: Duration = Duration::from_secs(120);

pub struct Client {
    cfg: PlacementConfig,
    http: reqwest::Client,
    session: tokio::sync::Mutex<Option<Session>>,
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
        Ok(Client {
            cfg,
            http,
            session: tokio::sync::Mutex::new(None),
        })
    }

    /// Where requests go, for messages (the override, or the catalog's once known).
    pub async fn endpoint(&self) -> String {
        match &self.cfg.endpoint_override {
            Some(u) => u.clone(),
            None => self
                .session
                .lock()
                .await
                .as_ref()
                .map(|s| s.endpoint.clone())
                .unwrap_or_else(|| "the catalog's placement endpoint".into()),
        }
    }

    async fn session(&self) -> Result<Session, RemoteError> {
        let mut s = self.session.lock().await;
        if let Some(cur) = s.as_ref() {
            if cur
                .expires_at
                .is_none_or(|t| t > SystemTime::now() + MARGIN)
            {
                return Ok(cur.clone());
            }
        }
        let fresh = match &self.cfg.token {
            Some(t) => Session {
                endpoint: self.cfg.endpoint_override.clone().unwrap_or_default(),
                token: t.clone(),
                expires_at: None,
            },
            None => self.password_auth().await?,
        };
        *s = Some(fresh.clone());
        Ok(fresh)
    }

    async fn forget(&self, token: &str) {
        let mut s = self.session.lock().await;
        if s.as_ref()
            .is_some_and(|c| c.token == token && c.expires_at.is_some())
        {
            *s = None;
        }
    }

    /// `POST {auth_url}/v3/auth/tokens` with the catalog, scoped to the project.
    async fn password_auth(&self) -> Result<Session, RemoteError> {
        let c = &self.cfg;
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let domain = |v: &Option<String>| v.clone().unwrap_or_else(|| "Default".into());
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": opt(&c.username),
                "domain": {"name": domain(&c.user_domain_name)},
                "password": opt(&c.password),
            }}},
            "scope": {"project": {
                "name": opt(&c.project_name),
                "domain": {"name": domain(&c.project_domain_name)},
            }},
        }});
        let base = opt(&c.auth_url);
        let base = base.trim().trim_end_matches('/');
        let url = format!(
            "{}/v3/auth/tokens",
            base.strip_suffix("/v3").unwrap_or(base)
        );
        let resp = self
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .map_err(|e| RemoteError(format!("POST {url}: {e}")))?;
        if !resp.status().is_success() {
            return Err(RemoteError(format!(
                "Keystone refused the [placement] credentials of user {:?} (HTTP {})",
                opt(&c.username),
                resp.status().as_u16()
            )));
        }
        let token = resp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| RemoteError("no X-Subject-Token in Keystone's answer".into()))?;
        let body: Value = resp
            .json()
            .await
            .map_err(|e| RemoteError(format!("Keystone token body: {e}")))?;
        let expires_at = body["token"]["expires_at"]
            .as_str()
            .and_then(parse_timestamp)
            .unwrap_or_else(|| SystemTime::now() + MARGIN * 2);
        let endpoint = match &c.endpoint_override {
            Some(u) => u.clone(),
            None => catalog_endpoint(
                &body,
                c.interface.as_deref().unwrap_or("public"),
                c.region_name.as_deref(),
            )
            .ok_or_else(|| {
                RemoteError(format!(
                    "no placement endpoint (interface {}, region {}) in the Keystone catalog; \
                     set [placement] endpoint_override",
                    c.interface.as_deref().unwrap_or("public"),
                    c.region_name.as_deref().unwrap_or("any")
                ))
            })?,
        };
        Ok(Session {
            endpoint,
            token,
            expires_at: Some(expires_at),
        })
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
            let s = self.session().await?;
            let url = format!("{}{path}", s.endpoint.trim_end_matches('/'));
            let mut req = self
                .http
                .request(method.clone(), &url)
                .header("x-auth-token", &s.token)
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
            if status == 401 && attempt == 0 && s.expires_at.is_some() {
                self.forget(&s.token).await;
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

/// The `placement` endpoint of a v3 token body's catalog for `interface`, in `region`
/// when given.
pub fn catalog_endpoint(body: &Value, interface: &str, region: Option<&str>) -> Option<String> {
    body["token"]["catalog"]
        .as_array()?
        .iter()
        .filter(|s| s["type"] == "placement")
        .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
        .find(|e| {
            e["interface"] == interface
                && region.is_none_or(|r| e["region_id"] == r || e["region"] == r)
        })
        .and_then(|e| e["url"].as_str())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_lookup_by_type_interface_and_region() {
        let body = json!({"token": {"catalog": [
            {"type": "compute", "endpoints": [
                {"interface": "public", "region_id": "R1", "url": "http://nova"}]},
            {"type": "placement", "endpoints": [
                {"interface": "internal", "region_id": "R1", "url": "http://p-int"},
                {"interface": "public", "region_id": "R1", "url": "http://p-r1"},
                {"interface": "public", "region_id": "R2", "region": "R2", "url": "http://p-r2"}]},
        ]}});
        assert_eq!(
            catalog_endpoint(&body, "public", None).as_deref(),
            Some("http://p-r1")
        );
        assert_eq!(
            catalog_endpoint(&body, "public", Some("R2")).as_deref(),
            Some("http://p-r2")
        );
        assert_eq!(
            catalog_endpoint(&body, "internal", None).as_deref(),
            Some("http://p-int")
        );
        assert_eq!(catalog_endpoint(&body, "admin", None), None);
    }
}
