//! A Keystone v3 session for accel's own outgoing calls (events to Nova), as
//! keystoneauth's `password` plugin and `Session` do it.
//!
//! ```text
//! token():    cached and more than 2 min left? ─▶ it
//!             else POST {auth_url}/v3/auth/tokens (password, project scope)
//!                  ─▶ X-Subject-Token, token.expires_at, token.catalog
//! endpoint(): endpoint_override, else the catalog entry of the service type with
//!             the configured interface (and region, when set)
//! invalidate(t): the service answered 401 with t ─▶ the next token() authenticates
//! refused:    Keystone answered 4xx to the password ─▶ said once at error, and no
//!             new attempt before the backoff (1 s, doubling to 64 s) has passed;
//!             token() fails at once meanwhile, so a wrong or rotated password is
//!             not tried once per request (an account lockout policy would lock
//!             the user)
//! ```
//!
//! Its own crate because both sides use it: the server (events to Nova, and the token
//! validator's own token) and the agent (its token for the accelerator API and
//! Glance), and the agent never links the server. Options use keystoneauth's names, as
//! in the `[nova]` table of Cyborg's and Nova's configuration files.

pub use accel_settings::Secret;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime};

/// Password credentials and where the service is found (keystoneauth's options).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SessionConfig {
    /// Identity endpoint, with or without `/v3`.
    pub auth_url: String,
    /// Only `password` is supported.
    #[serde(default = "default_auth_type")]
    pub auth_type: String,
    pub username: String,
    /// Printed as `***` by `Debug`.
    pub password: Secret,
    pub project_name: String,
    #[serde(default = "default_domain")]
    pub user_domain_name: String,
    #[serde(default = "default_domain")]
    pub project_domain_name: String,
    /// The catalog region to use; any region when absent.
    #[serde(default)]
    pub region_name: Option<String>,
    /// `public` (default), `internal` or `admin`.
    #[serde(default = "default_interface")]
    pub interface: String,
    /// Use this URL instead of the catalog's.
    #[serde(default)]
    pub endpoint_override: Option<String>,
    /// Seconds to wait for a connection (default 10); a request takes at most three
    /// times that.
    #[serde(default)]
    pub http_connect_timeout: Option<u64>,
}

/// `auth_type`'s default: the only one supported, as keystoneauth's `password`.
pub fn default_auth_type() -> String {
    "password".into()
}
/// The user and project domains' default, as keystoneauth's.
pub fn default_domain() -> String {
    "Default".into()
}
fn default_interface() -> String {
    "public".into()
}

/// `http://` or `https://`, or a message naming the option.
pub fn check_url(option: &str, url: &str) -> Result<(), String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(format!(
            "{option} must be an http:// or https:// URL, not {url:?}"
        ))
    }
}

impl SessionConfig {
    /// Checks values the types do not; `table` names the config table in messages.
    pub fn validate(&self, table: &str) -> Result<(), String> {
        check_url(&format!("[{table}] auth_url"), &self.auth_url)?;
        if self.auth_type != "password" {
            return Err(format!(
                "[{table}] auth_type {:?} is not supported; use \"password\"",
                self.auth_type
            ));
        }
        for (k, v) in [
            ("username", &self.username),
            ("password", &self.password.expose().to_owned()),
            ("project_name", &self.project_name),
        ] {
            if v.is_empty() {
                return Err(format!("[{table}] {k} must not be empty"));
            }
        }
        if !matches!(self.interface.as_str(), "public" | "internal" | "admin") {
            return Err(format!(
                "[{table}] interface must be public, internal or admin, not {:?}",
                self.interface
            ));
        }
        if let Some(u) = &self.endpoint_override {
            check_url(&format!("[{table}] endpoint_override"), u)?;
        }
        Ok(())
    }

    /// `auth_url` ending in `/v3`.
    pub fn v3_base(&self) -> String {
        let base = self.auth_url.trim_end_matches('/');
        if base.ends_with("/v3") {
            base.to_owned()
        } else {
            format!("{base}/v3")
        }
    }
}

/// Renew the token when it has less than this left (keystoneauth's margin).
const MARGIN: Duration = Duration::from_secs(120);

struct Token {
    id: String,
    expires_at: SystemTime,
    catalog: Value,
}

/// The first wait after Keystone refuses the credentials; doubled after each
/// further refusal up to [`REFUSAL_BACKOFF_MAX`].
const REFUSAL_BACKOFF: Duration = Duration::from_secs(1);
const REFUSAL_BACKOFF_MAX: Duration = Duration::from_secs(64);

/// Why no token could be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Keystone answered and refused the credentials (a wrong or rotated password,
    /// a disabled user, an unknown project): a configuration error, asked again only
    /// after a backoff.
    Refused(String),
    /// Keystone could not be reached, or failed (5xx, a body without a token).
    Unavailable(String),
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::Refused(m) | TokenError::Unavailable(m) => f.write_str(m),
        }
    }
}

impl From<TokenError> for String {
    fn from(e: TokenError) -> String {
        e.to_string()
    }
}

/// Keystone's last refusal of the credentials, and when to ask again.
#[derive(Debug, Clone)]
struct Refusal {
    message: String,
    retry_at: Instant,
    backoff: Duration,
}

/// A session: the configuration, an HTTP client and the current token.
pub struct Session {
    cfg: SessionConfig,
    /// Whether tokens are asked with their catalog (not when only the token is used).
    catalog: bool,
    http: reqwest::Client,
    current: tokio::sync::Mutex<Option<Token>>,
    /// Set while Keystone refuses the credentials (read by readiness checks without
    /// waiting for a token request in flight).
    refused: std::sync::Mutex<Option<Refusal>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// `User-Agent` of accel's calls (the same as `accel_api::http::USER_AGENT`).
pub const USER_AGENT: &str = concat!("accel/", env!("CARGO_PKG_VERSION"));

/// A fresh `X-OpenStack-Request-ID` for one outgoing call, so the remote service's
/// log line and ours can be matched.
pub fn request_id() -> String {
    format!("req-{}", uuid::Uuid::new_v4())
}

/// The HTTP client for Keystone: `connect_secs` (default 10) to connect, three times
/// that for a whole request.
pub fn http_client(connect_secs: Option<u64>) -> Result<reqwest::Client, String> {
    let connect = Duration::from_secs(connect_secs.unwrap_or(10).max(1));
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(connect)
        .timeout(connect * 3)
        .build()
        .map_err(|e| format!("building the Keystone HTTP client: {e}"))
}

impl Session {
    pub fn new(cfg: SessionConfig) -> Result<Session, String> {
        let http = http_client(cfg.http_connect_timeout)?;
        Ok(Session {
            catalog: cfg.endpoint_override.is_none(),
            cfg,
            http,
            current: tokio::sync::Mutex::new(None),
            refused: std::sync::Mutex::new(None),
        })
    }

    /// A session whose tokens are only sent, never used to find endpoints (the
    /// validator's own token): they are asked without their catalog.
    pub fn tokens_only(cfg: SessionConfig) -> Result<Session, String> {
        Ok(Session {
            catalog: false,
            ..Session::new(cfg)?
        })
    }

    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// A valid token, authenticating when there is none or it is about to expire.
    pub async fn token(&self) -> Result<String, String> {
        Ok(self.try_token().await?)
    }

    /// [`Session::token`], saying whether Keystone refused the credentials or could
    /// not answer. While refused, no new attempt is made before the backoff has
    /// passed: the last refusal is returned at once.
    pub async fn try_token(&self) -> Result<String, TokenError> {
        let mut cur = self.current.lock().await;
        if let Some(t) = cur.as_ref() {
            if t.expires_at > SystemTime::now() + MARGIN {
                return Ok(t.id.clone());
            }
        }
        if let Some(r) = self.lock_refused().as_ref() {
            if Instant::now() < r.retry_at {
                return Err(TokenError::Refused(r.message.clone()));
            }
        }
        match self.authenticate().await {
            Ok(fresh) => {
                if self.lock_refused().take().is_some() {
                    tracing::info!(target: "accel::keystone", user = %self.cfg.username, project = %self.cfg.project_name, "Keystone accepts the service's credentials again");
                }
                let id = fresh.id.clone();
                *cur = Some(fresh);
                Ok(id)
            }
            Err(TokenError::Refused(message)) => {
                self.note_refusal(&message);
                Err(TokenError::Refused(message))
            }
            Err(e) => Err(e),
        }
    }

    /// The message of Keystone's refusal of the credentials while it lasts (a
    /// readiness check reads it); `None` once a token was had, or before any refusal.
    pub fn refusal(&self) -> Option<String> {
        self.lock_refused().as_ref().map(|r| r.message.clone())
    }

    /// Records a refusal: the first is said at error with its cause, later ones at
    /// debug; each doubles the wait before the next attempt.
    fn note_refusal(&self, message: &str) {
        let mut refused = self.lock_refused();
        let backoff = match refused.as_ref() {
            None => {
                tracing::error!(target: "accel::keystone", user = %self.cfg.username, project = %self.cfg.project_name, error = %message, "Keystone refused the service's own credentials; requests needing them fail with 503 and the password is tried again with backoff (up to every {} s) until Keystone accepts it", REFUSAL_BACKOFF_MAX.as_secs());
                REFUSAL_BACKOFF
            }
            Some(r) => {
                tracing::debug!(target: "accel::keystone", user = %self.cfg.username, error = %message, "Keystone still refuses the service's own credentials");
                (r.backoff * 2).min(REFUSAL_BACKOFF_MAX)
            }
        };
        *refused = Some(Refusal {
            message: message.to_owned(),
            retry_at: Instant::now() + backoff,
            backoff,
        });
    }

    fn lock_refused(&self) -> std::sync::MutexGuard<'_, Option<Refusal>> {
        // A plain value: a panicking holder cannot leave it half-written.
        self.refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets `used` (a service refused it), so the next [`Session::token`]
    /// authenticates again.
    pub async fn invalidate(&self, used: &str) {
        let mut cur = self.current.lock().await;
        if cur.as_ref().is_some_and(|t| t.id == used) {
            *cur = None;
        }
    }

    /// The URL of `service_type` (`compute`): `endpoint_override`, or the catalog of
    /// the current token.
    pub async fn endpoint(&self, service_type: &str) -> Result<String, String> {
        if let Some(u) = &self.cfg.endpoint_override {
            return Ok(u.trim_end_matches('/').to_owned());
        }
        self.token().await?;
        let cur = self.current.lock().await;
        let catalog = cur.as_ref().map_or(&Value::Null, |t| &t.catalog);
        find_endpoint(
            catalog,
            service_type,
            &self.cfg.interface,
            self.cfg.region_name.as_deref(),
        )
        .ok_or_else(|| {
            format!(
                "Keystone's catalog has no {} endpoint of service type {service_type}{}",
                self.cfg.interface,
                self.cfg
                    .region_name
                    .as_deref()
                    .map(|r| format!(" in region {r}"))
                    .unwrap_or_default()
            )
        })
    }

    /// `POST /v3/auth/tokens` with the password, scoped to the project. The catalog
    /// comes with it unless an `endpoint_override` makes it unneeded.
    async fn authenticate(&self) -> Result<Token, TokenError> {
        let c = &self.cfg;
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": c.username,
                "domain": {"name": c.user_domain_name},
                "password": c.password.expose(),
            }}},
            "scope": {"project": {
                "name": c.project_name,
                "domain": {"name": c.project_domain_name},
            }},
        }});
        let mut url = format!("{}/auth/tokens", c.v3_base());
        if !self.catalog {
            url.push_str("?nocatalog");
        }
        let request_id = request_id();
        let started = std::time::Instant::now();
        let resp = self
            .http
            .post(&url)
            .header("x-openstack-request-id", &request_id)
            .json(&body)
            .send()
            .await
            .map_err(|e| {
                tracing::warn!(target: "accel::outgoing", service = "keystone", method = "POST", url = %url, request_id = %request_id, error = %e, "outgoing call failed");
                TokenError::Unavailable(format!("POST {url}: {e}"))
            })?;
        let status = resp.status();
        tracing::info!(target: "accel::outgoing", service = "keystone", method = "POST", url = %url, status = status.as_u16(), request_id = %request_id, duration_ms = started.elapsed().as_millis() as u64, user = %c.username, "outgoing call: token requested");
        if !status.is_success() {
            let said = resp.text().await.unwrap_or_default();
            let (user, project, said) = (&c.username, &c.project_name, said.trim());
            // 4xx: Keystone judged the credentials (or the scope); 5xx: it failed.
            return Err(if status.is_client_error() {
                TokenError::Refused(format!(
                    "Keystone at {url} refused the credentials of user {user:?} in project {project:?} ({status}): {said}"
                ))
            } else {
                TokenError::Unavailable(format!(
                    "Keystone at {url} failed to authenticate user {user:?} in project {project:?} ({status}): {said}"
                ))
            });
        }
        let unavailable = TokenError::Unavailable;
        let id = resp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| {
                unavailable(format!(
                    "no X-Subject-Token in Keystone's answer from {url}"
                ))
            })?;
        let body: Value = resp
            .json()
            .await
            .map_err(|e| unavailable(format!("token body from {url}: {e}")))?;
        let token = body.get("token").cloned().unwrap_or(Value::Null);
        let expires_at = token
            .get("expires_at")
            .and_then(Value::as_str)
            .and_then(parse_timestamp)
            .ok_or_else(|| unavailable(format!("no expires_at in the token from {url}")))?;
        Ok(Token {
            id,
            expires_at,
            catalog: token.get("catalog").cloned().unwrap_or(Value::Null),
        })
    }
}

/// The URL of the first endpoint of `service_type` with `interface` (and `region`).
pub fn find_endpoint(
    catalog: &Value,
    service_type: &str,
    interface: &str,
    region: Option<&str>,
) -> Option<String> {
    catalog
        .as_array()?
        .iter()
        .filter(|s| s.get("type").and_then(Value::as_str) == Some(service_type))
        .flat_map(|s| {
            s.get("endpoints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .find(|e| {
            e.get("interface").and_then(Value::as_str) == Some(interface)
                && region.is_none_or(|r| {
                    e.get("region_id").and_then(Value::as_str) == Some(r)
                        || e.get("region").and_then(Value::as_str) == Some(r)
                })
        })
        .and_then(|e| e.get("url").and_then(Value::as_str))
        .map(|u| u.trim_end_matches('/').to_owned())
}

/// Keystone's ISO 8601 times (`2026-11-01T12:00:00.000000Z`, or with a `+hh:mm`
/// offset, fractions optional; a time without a zone is UTC, as Keystone v2 wrote it).
/// Calendar checks are the `time` crate's: 31 February is no date.
pub fn parse_timestamp(s: &str) -> Option<SystemTime> {
    use time::format_description::well_known::Rfc3339;
    use time::macros::format_description;
    // Python's isoformat() with a space instead of the `T`.
    let s = s.trim().replacen(' ', "T", 1);
    if let Ok(t) = time::OffsetDateTime::parse(&s, &Rfc3339) {
        return Some(t.into());
    }
    let naive = format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second][optional [.[subsecond]]]"
    );
    time::PrimitiveDateTime::parse(&s, naive)
        .ok()
        .map(|t| t.assume_utc().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn timestamps_as_keystone_writes_them() {
        let t = parse_timestamp("2026-11-01T12:00:00.000000Z").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_793_534_400
        );
        let off = parse_timestamp("2026-11-01T14:00:00+02:00").unwrap();
        assert_eq!(off, t);
        let frac = parse_timestamp("1970-01-01T00:00:01.5Z").unwrap();
        assert_eq!(frac.duration_since(UNIX_EPOCH).unwrap().as_millis(), 1500);
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(parse_timestamp("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_timestamp("2026-02-31T00:00:00Z"), None);
        assert_eq!(parse_timestamp("2026-11-01 12:00:00Z"), Some(t));
        assert_eq!(parse_timestamp("2026-11-01T12:00:00.000000"), Some(t));
    }

    #[test]
    fn catalog_lookup_by_type_interface_and_region() {
        let catalog = json!([
            {"type": "identity", "endpoints": [
                {"interface": "public", "region_id": "R1", "url": "http://ks/v3"}]},
            {"type": "compute", "endpoints": [
                {"interface": "internal", "region_id": "R1", "url": "http://nova-int/v2.1/"},
                {"interface": "public", "region_id": "R1", "url": "http://nova-r1/v2.1"},
                {"interface": "public", "region_id": "R2", "url": "http://nova-r2/v2.1"}]},
        ]);
        let f = |i, r| find_endpoint(&catalog, "compute", i, r);
        assert_eq!(f("public", None).as_deref(), Some("http://nova-r1/v2.1"));
        assert_eq!(
            f("public", Some("R2")).as_deref(),
            Some("http://nova-r2/v2.1")
        );
        assert_eq!(f("internal", None).as_deref(), Some("http://nova-int/v2.1"));
        assert_eq!(f("admin", None), None);
        assert_eq!(f("public", Some("R3")), None);
        assert_eq!(find_endpoint(&catalog, "placement", "public", None), None);
    }

    #[test]
    fn config_checks() {
        let cfg: SessionConfig = serde_json::from_value(json!({
            "auth_url": "http://ks:5000", "username": "cyborg", "password": "p",
            "project_name": "service",
        }))
        .unwrap();
        assert_eq!(cfg.interface, "public");
        assert_eq!(cfg.v3_base(), "http://ks:5000/v3");
        assert!(cfg.validate("nova").is_ok());
        let bad = SessionConfig {
            interface: "private".into(),
            ..cfg.clone()
        };
        assert!(bad
            .validate("nova")
            .unwrap_err()
            .contains("[nova] interface"));
        let bad = SessionConfig {
            auth_url: "ks:5000".into(),
            ..cfg.clone()
        };
        assert!(bad
            .validate("nova")
            .unwrap_err()
            .contains("[nova] auth_url"));
        let unknown = serde_json::from_value::<SessionConfig>(json!({
            "auth_url": "http://ks", "username": "u", "password": "p",
            "project_name": "s", "region": "R1",
        }));
        assert!(unknown.unwrap_err().to_string().contains("region"));
    }
}
