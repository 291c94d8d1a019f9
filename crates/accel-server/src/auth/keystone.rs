//! Keystone token validation, as keystonemiddleware's `auth_token` does it.
//!
//! ```text
//! request ─▶ X-Service-Token? ─▶ validate ─▶ invalid, or roles ∩ service_token_roles
//!                                            empty while required ─▶ 401
//!         ─▶ X-Auth-Token ─▶ cache hit? ─▶ GET {auth_url}/v3/auth/tokens
//!                                          X-Subject-Token: <token>
//!                                          X-Auth-Token: <our own token>
//!                                          200 ─▶ credentials; 404 ─▶ 401;
//!                                          401 ─▶ new own token, ask once more;
//!                                          unreachable or 5xx ─▶ 503
//! ```
//!
//! Our own token comes from password auth (`POST /v3/auth/tokens`, a
//! [`accel_keystone::Session`]) with the `[keystone_authtoken]` credentials and is
//! renewed when it has less than two minutes left, or when Keystone refuses it. When
//! Keystone refuses the password itself, `accel serve` stops at start-up; later (a
//! rotated password) requests get 503, `/readyz` fails and the password is tried
//! again with the session's backoff, never once per request. Validations are cached ([`super::cache`]) until
//! the token expires or `token_cache_time` passes, whichever is first. A user token may
//! be expired when a service token that passed the role check comes with it
//! (keystonemiddleware's `allow_expired`, which lets Nova finish long operations).
//!
//! Headers a client sends that keystonemiddleware would strip (`X-Roles`,
//! `X-Project-Id`, `X-Service-Roles`, ...) are never read in this mode: everything
//! comes from the token bodies Keystone returns.

use super::cache::TokenCache;
use super::{Credentials, Rejection};
use accel_core::policy;
pub use accel_keystone::parse_timestamp;
use accel_keystone::{Session, SessionConfig, TokenError};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The `[keystone_authtoken]` table, with keystonemiddleware's option names.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeystoneConfig {
    /// Identity endpoint used to get our own token and validate others, with or
    /// without `/v3` (`http://keystone:5000/v3`, `https://ctl/identity`). https is
    /// verified against the system's trust store (rustls).
    pub auth_url: String,
    /// Only `password` is supported.
    #[serde(default = "accel_keystone::default_auth_type")]
    pub auth_type: String,
    /// Sent to clients in `WWW-Authenticate: Keystone uri="..."` on a 401. Default:
    /// `auth_url`.
    #[serde(default)]
    pub www_authenticate_uri: Option<String>,
    /// The service user (for Cyborg, usually `cyborg`).
    pub username: String,
    /// Printed as `***` by `Debug`.
    pub password: accel_settings::Secret,
    /// The service project (usually `service`).
    pub project_name: String,
    #[serde(default = "accel_keystone::default_domain")]
    pub user_domain_name: String,
    #[serde(default = "accel_keystone::default_domain")]
    pub project_domain_name: String,
    /// A service token must carry one of these roles to count as a service's.
    #[serde(default = "default_service_roles")]
    pub service_token_roles: Vec<String>,
    /// When true (keystonemiddleware 13's and Cyborg's default), a service token
    /// without one of `service_token_roles` makes the request a 401; when false it is
    /// accepted but does not count as a service's.
    #[serde(default = "default_true")]
    pub service_token_roles_required: bool,
    /// Seconds a validation is reused (never past the token's expiry); -1 or 0
    /// disables caching.
    #[serde(default = "default_cache_time")]
    pub token_cache_time: i64,
    /// At most this many validations are cached (accel's option; keystonemiddleware
    /// leaves the bound to memcached).
    #[serde(default = "default_cache_size")]
    pub token_cache_size: usize,
    /// Seconds to wait for a connection to Keystone (default 10); a request to
    /// Keystone takes at most three times that.
    #[serde(default)]
    pub http_connect_timeout: Option<u64>,
}

fn default_service_roles() -> Vec<String> {
    vec!["service".into()]
}
fn default_true() -> bool {
    true
}
fn default_cache_time() -> i64 {
    300
}
fn default_cache_size() -> usize {
    10_000
}

impl KeystoneConfig {
    /// Checks the values a typo would break, with messages that say what to do.
    pub fn validate(&self) -> Result<(), String> {
        if self.auth_type != "password" {
            return Err(format!(
                "[keystone_authtoken] auth_type {:?} is not supported: use \"password\"",
                self.auth_type
            ));
        }
        let url = self.auth_url.trim();
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(format!(
                "[keystone_authtoken] auth_url must be an http:// or https:// URL, not {url:?}"
            ));
        }
        for (name, v) in [
            ("username", &self.username),
            ("password", &self.password.expose().to_owned()),
            ("project_name", &self.project_name),
        ] {
            if v.is_empty() {
                return Err(format!("[keystone_authtoken] {name} must not be empty"));
            }
        }
        if self.token_cache_time < -1 {
            return Err("[keystone_authtoken] token_cache_time must be -1 (off) or more".into());
        }
        Ok(())
    }

    /// `{auth_url}/v3`, however the URL was written.
    fn v3_base(&self) -> String {
        let base = self.auth_url.trim().trim_end_matches('/');
        let base = base.strip_suffix("/v3").unwrap_or(base);
        format!("{base}/v3")
    }
}

/// What a validated token says about its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub roles: Vec<String>,
    pub user_id: Option<String>,
    pub user_domain_id: Option<String>,
    pub project_id: Option<String>,
    pub project_domain_id: Option<String>,
    /// `all` for a system-scoped token.
    pub system_scope: Option<String>,
    /// Set for a domain-scoped token.
    pub domain_id: Option<String>,
    pub is_admin_project: bool,
    pub expires_at: SystemTime,
}

impl TokenInfo {
    /// Reads the `token` object of a v3 validation (or password auth) response.
    pub fn from_body(body: &Value) -> Option<TokenInfo> {
        let t = body.get("token")?;
        let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        let expires_at = parse_timestamp(t.get("expires_at")?.as_str()?)?;
        let roles = t
            .get("roles")
            .and_then(Value::as_array)
            .map(|rs| rs.iter().filter_map(|r| s(r.get("name"))).collect())
            .unwrap_or_default();
        let user = t.get("user");
        let project = t.get("project");
        let system_all = t
            .get("system")
            .and_then(|s| s.get("all"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Some(TokenInfo {
            roles,
            user_id: s(user.and_then(|u| u.get("id"))),
            user_domain_id: s(user.and_then(|u| u.get("domain")).and_then(|d| d.get("id"))),
            project_id: s(project.and_then(|p| p.get("id"))),
            project_domain_id: s(project
                .and_then(|p| p.get("domain"))
                .and_then(|d| d.get("id"))),
            system_scope: system_all.then(|| "all".to_owned()),
            domain_id: s(t.get("domain").and_then(|d| d.get("id"))),
            is_admin_project: t
                .get("is_admin_project")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            expires_at,
        })
    }
}

/// Why a validation gave no token.
#[derive(Debug)]
enum Failure {
    /// Keystone does not know the token, or it has expired: 401.
    Invalid,
    /// Keystone could not answer: 503.
    Unavailable(String),
    /// Keystone refuses our own credentials: 503, said once by the session.
    OwnCredentialsRefused,
}

/// What the validation cache reads the time from: `Instant::now`, or a test's clock.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// The Keystone validator: its configuration, HTTP client, own token and cache.
pub struct Keystone {
    cfg: KeystoneConfig,
    base: String,
    www_authenticate: String,
    http: reqwest::Client,
    /// The service's own token (password auth with the table's credentials).
    own: Session,
    cache: Mutex<TokenCache<TokenInfo>>,
    cache_ttl: Option<Duration>,
    clock: Clock,
}

impl std::fmt::Debug for Keystone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keystone")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Keystone {
    pub fn new(cfg: KeystoneConfig) -> Result<Keystone, String> {
        cfg.validate()?;
        let http = accel_keystone::http_client(cfg.http_connect_timeout)?;
        let uri = cfg
            .www_authenticate_uri
            .clone()
            .unwrap_or_else(|| cfg.auth_url.clone());
        let cache_ttl = (cfg.token_cache_time > 0)
            .then(|| Duration::from_secs(cfg.token_cache_time.unsigned_abs()));
        let capacity = if cache_ttl.is_some() {
            cfg.token_cache_size
        } else {
            0
        };
        Ok(Keystone {
            base: cfg.v3_base(),
            www_authenticate: format!("Keystone uri=\"{uri}\""),
            http,
            own: Session::tokens_only(SessionConfig {
                auth_url: cfg.auth_url.trim().to_owned(),
                auth_type: cfg.auth_type.clone(),
                username: cfg.username.clone(),
                password: cfg.password.clone(),
                project_name: cfg.project_name.clone(),
                user_domain_name: cfg.user_domain_name.clone(),
                project_domain_name: cfg.project_domain_name.clone(),
                region_name: None,
                interface: "public".into(),
                endpoint_override: None,
                http_connect_timeout: cfg.http_connect_timeout,
            })?,
            cache: Mutex::new(TokenCache::new(capacity)),
            cache_ttl,
            clock: Arc::new(Instant::now),
            cfg,
        })
    }

    /// Replaces the clock the cache's deadlines are read against, so a test can move
    /// past `token_cache_time` without waiting. Token expiry (`expires_at`) is always
    /// checked against the system time.
    pub fn with_cache_clock(mut self, clock: Clock) -> Keystone {
        self.clock = clock;
        self
    }

    pub fn config(&self) -> &KeystoneConfig {
        &self.cfg
    }

    /// The `WWW-Authenticate` value of a 401.
    pub fn www_authenticate(&self) -> &str {
        &self.www_authenticate
    }

    fn unauthorized(&self) -> Rejection {
        Rejection::Unauthorized {
            www_authenticate: Some(self.www_authenticate.clone()),
        }
    }

    fn fail(&self, f: Failure) -> Rejection {
        match f {
            Failure::Invalid => self.unauthorized(),
            Failure::Unavailable(why) => {
                tracing::error!(error = %why, "unable to validate token");
                Rejection::Unavailable
            }
            Failure::OwnCredentialsRefused => Rejection::Unavailable,
        }
    }

    /// keystonemiddleware's `process_request`: the service token first, then the
    /// user token; either one failing is a 401.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Credentials, Rejection> {
        let header = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .filter(|s| !s.is_empty())
        };
        let mut service: Option<Arc<TokenInfo>> = None;
        let mut allow_expired = false;
        if let Some(st) = header("x-service-token") {
            let info = self.validate(st, false).await.map_err(|f| self.fail(f))?;
            let passed = info
                .roles
                .iter()
                .any(|r| self.cfg.service_token_roles.iter().any(|s| s == r));
            if self.cfg.service_token_roles_required && !passed {
                tracing::info!("service token without a service role refused");
                return Err(self.unauthorized());
            }
            // Accepted (with or without a service role): its identity is the
            // service's, as keystonemiddleware's X-Service-* headers; only a role
            // match makes it a service (`auth::is_service`) or lets an expired user
            // token through.
            allow_expired = passed;
            service = Some(info);
        }
        let token = header("x-auth-token").ok_or_else(|| self.unauthorized())?;
        let user = self
            .validate(token, allow_expired)
            .await
            .map_err(|f| self.fail(f))?;
        let mut creds = policy::Credentials {
            roles: user.roles.clone(),
            project_id: user.project_id.clone(),
            user_id: user.user_id.clone(),
            system_scope: user.system_scope.clone(),
            domain_id: user.domain_id.clone(),
            user_domain_id: user.user_domain_id.clone(),
            project_domain_id: user.project_domain_id.clone(),
            is_admin_project: user.is_admin_project,
            ..Default::default()
        };
        if let Some(s) = service {
            creds.service_user_id = s.user_id.clone();
            creds.service_user_domain_id = s.user_domain_id.clone();
            creds.service_project_id = s.project_id.clone();
            creds.service_project_domain_id = s.project_domain_id.clone();
            creds.service_roles = s.roles.clone();
        }
        Ok(Credentials { policy: creds })
    }

    /// A token's validation, from the cache or from Keystone.
    async fn validate(&self, token: &str, allow_expired: bool) -> Result<Arc<TokenInfo>, Failure> {
        let cached = self.lock_cache().get(token, (self.clock)());
        let info = match cached {
            Some(info) => info,
            None => {
                let info = Arc::new(self.ask_keystone(token, allow_expired).await?);
                let now = (self.clock)();
                let left = info
                    .expires_at
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                if let Some(ttl) = self.cache_ttl {
                    self.lock_cache()
                        .insert(token, info.clone(), now + ttl.min(left), now);
                }
                info
            }
        };
        if !allow_expired && info.expires_at <= SystemTime::now() {
            return Err(Failure::Invalid);
        }
        Ok(info)
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, TokenCache<TokenInfo>> {
        // The cache holds no invariant a panicking holder could break half-way.
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `GET /v3/auth/tokens`, retried once with a fresh own token when Keystone
    /// refuses ours.
    async fn ask_keystone(&self, token: &str, allow_expired: bool) -> Result<TokenInfo, Failure> {
        let mut url = format!("{}/auth/tokens?nocatalog", self.base);
        if allow_expired {
            url.push_str("&allow_expired=1");
        }
        for attempt in 0..2 {
            let own = self.own_token().await?;
            let request_id = accel_keystone::request_id();
            let started = std::time::Instant::now();
            let resp = self
                .http
                .get(&url)
                .header("x-auth-token", &own)
                .header("x-subject-token", token)
                .header("x-openstack-request-id", &request_id)
                .header("accept", "application/json")
                .send()
                .await
                .map_err(|e| {
                    tracing::warn!(target: "accel::outgoing", service = "keystone", method = "GET", url = %url, request_id = %request_id, error = %e, "outgoing call failed: token validation");
                    Failure::Unavailable(format!("GET {url}: {e}"))
                })?;
            // A cache miss: one call per token and cache period, so info is not noisy.
            tracing::info!(target: "accel::outgoing", service = "keystone", method = "GET", url = %url, status = resp.status().as_u16(), request_id = %request_id, duration_ms = started.elapsed().as_millis() as u64, "outgoing call: token validation");
            match resp.status().as_u16() {
                200 => {
                    let body: Value = resp
                        .json()
                        .await
                        .map_err(|e| Failure::Unavailable(format!("token body: {e}")))?;
                    return TokenInfo::from_body(&body).ok_or(Failure::Invalid);
                }
                404 => return Err(Failure::Invalid),
                401 if attempt == 0 => self.forget_own_token(&own).await,
                s => {
                    return Err(Failure::Unavailable(format!(
                        "Keystone answered {s} to a token validation"
                    )))
                }
            }
        }
        Err(Failure::Unavailable(
            "Keystone refused the service's own token twice".into(),
        ))
    }

    /// Our own token, fetched or renewed when needed.
    async fn own_token(&self) -> Result<String, Failure> {
        self.own.try_token().await.map_err(|e| match e {
            TokenError::Refused(_) => Failure::OwnCredentialsRefused,
            TokenError::Unavailable(why) => Failure::Unavailable(why),
        })
    }

    /// Asks Keystone for our own token now: `accel serve` stops on a refusal at
    /// start-up (a configuration error), and goes on when Keystone is unreachable.
    pub async fn check_own_credentials(&self) -> Result<(), TokenError> {
        self.own.try_token().await.map(drop)
    }

    /// Whether Keystone refused our credentials last time it was asked.
    pub fn own_credentials_refused_now(&self) -> bool {
        self.own.refusal().is_some()
    }

    /// Whether Keystone still refuses our credentials; asks again first when the
    /// backoff has passed, so a readiness probe notices the fix even when no request
    /// comes (a not-ready server gets none).
    pub async fn own_credentials_refused(&self) -> bool {
        if !self.own_credentials_refused_now() {
            return false;
        }
        // The outcome is in the session's refusal either way.
        let _ = self.own.try_token().await;
        self.own_credentials_refused_now()
    }

    async fn forget_own_token(&self, used: &str) {
        self.own.invalidate(used).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn token_body_roles_scope_and_ids() {
        let body = json!({"token": {
            "expires_at": "2030-01-01T00:00:00.000000Z",
            "roles": [{"id": "r1", "name": "member"}, {"id": "r2", "name": "reader"}],
            "user": {"id": "u1", "name": "alice", "domain": {"id": "default", "name": "Default"}},
            "project": {"id": "p1", "name": "demo", "domain": {"id": "default", "name": "Default"}},
        }});
        let info = TokenInfo::from_body(&body).unwrap();
        assert_eq!(info.roles, ["member", "reader"]);
        assert_eq!(info.user_id.as_deref(), Some("u1"));
        assert_eq!(info.project_id.as_deref(), Some("p1"));
        assert_eq!(info.project_domain_id.as_deref(), Some("default"));
        assert_eq!(info.system_scope, None);
        assert!(info.is_admin_project);

        let system = json!({"token": {
            "expires_at": "2030-01-01T00:00:00Z",
            "roles": [{"name": "admin"}],
            "user": {"id": "u2"},
            "system": {"all": true},
            "is_admin_project": false,
        }});
        let info = TokenInfo::from_body(&system).unwrap();
        assert_eq!(info.system_scope.as_deref(), Some("all"));
        assert_eq!(info.project_id, None);
        assert!(!info.is_admin_project);

        let domain = json!({"token": {"expires_at": "2030-01-01T00:00:00Z",
            "domain": {"id": "d1", "name": "D"}}});
        assert_eq!(
            TokenInfo::from_body(&domain).unwrap().domain_id.as_deref(),
            Some("d1")
        );
        assert_eq!(TokenInfo::from_body(&json!({"token": {}})), None);
    }

    fn cfg(toml_text: &str) -> Result<KeystoneConfig, String> {
        let c: KeystoneConfig = serde_json::from_value(
            toml_text
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.trim().to_owned(), json!(v.trim())))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        )
        .map_err(|e| e.to_string())?;
        c.validate().map(|()| c)
    }

    #[test]
    fn config_defaults_and_checks() {
        let c =
            cfg("auth_url=http://ks:5000/v3/\nusername=cyborg\npassword=pw\nproject_name=service")
                .unwrap();
        assert_eq!(c.v3_base(), "http://ks:5000/v3");
        assert_eq!(c.service_token_roles, ["service"]);
        assert!(c.service_token_roles_required);
        assert_eq!(c.token_cache_time, 300);
        assert_eq!(c.user_domain_name, "Default");
        assert!(!format!("{c:?}").contains("pw"), "password redacted");
        let c =
            cfg("auth_url=http://ctl/identity\nusername=u\npassword=p\nproject_name=s").unwrap();
        assert_eq!(c.v3_base(), "http://ctl/identity/v3");
        let c = cfg("auth_url=https://ks\nusername=u\npassword=p\nproject_name=s").unwrap();
        assert_eq!(c.v3_base(), "https://ks/v3");
        assert!(
            cfg("auth_url=ks:5000\nusername=u\npassword=p\nproject_name=s")
                .unwrap_err()
                .contains("http:// or https://")
        );
        assert!(cfg(
            "auth_url=http://ks\nusername=u\npassword=p\nproject_name=s\nauth_type=v3token"
        )
        .unwrap_err()
        .contains("auth_type"));
        assert!(cfg(
            "auth_url=http://ks\nusername=u\npassword=p\nproject_name=s\nmemcache_servers=x"
        )
        .unwrap_err()
        .contains("unknown field"));
    }
}
