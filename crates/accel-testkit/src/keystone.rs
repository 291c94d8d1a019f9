//! A fake Keystone v3, the one both the Keystone-mode tests and the
//! `accel-fake-keystone` development binary (accel-bench, for tempest) run. Tokens live
//! in memory, there is no TLS, passwords are compared in clear text. Served:
//!
//! - `POST /v3/auth/tokens`: password auth (user by name or id), scoped to the user's
//!   project (by name or id; unscoped requests get it too) or to the system; `201` with
//!   `X-Subject-Token` and Keystone's token body, with the service catalog when one is
//!   set (unless `?nocatalog`).
//! - `GET /v3/auth/tokens`: validation of `X-Subject-Token` by the holder of a live
//!   `X-Auth-Token` (keystonemiddleware's call); `404` for an unknown, revoked or
//!   expired token unless `allow_expired=1`.
//! - `GET /v3` and `GET /`: version documents.
//!
//! Counters let tests see how often accel asked; tokens can be issued, expired and
//! revoked directly. Only what keystonemiddleware and keystoneauth use is served; the
//! token bodies have Keystone's shape (`token.{expires_at, user, project | system,
//! roles}`).

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// A project a token is scoped to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Project {
    pub id: String,
    pub name: String,
}

/// Who a token stands for.
#[derive(Clone, Debug)]
pub struct Subject {
    pub user_id: String,
    pub user_name: String,
    /// The project of project-scoped tokens.
    pub project: Option<Project>,
    /// Whether system-scoped tokens may be issued (a user with a project and this
    /// set gets the scope it asks for).
    pub system: bool,
    pub roles: Vec<String>,
}

impl Subject {
    /// A project-scoped user `user` (id `<user>-id`) of project id `project` (name
    /// `<project>-name`).
    pub fn project(user: &str, project: &str, roles: &[&str]) -> Subject {
        Subject {
            user_id: format!("{user}-id"),
            user_name: user.to_owned(),
            project: Some(Project {
                id: project.to_owned(),
                name: format!("{project}-name"),
            }),
            system: false,
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    /// A system-scoped user.
    pub fn system(user: &str, roles: &[&str]) -> Subject {
        Subject {
            project: None,
            system: true,
            ..Subject::project(user, "", roles)
        }
    }

    /// The same subject with Keystone's default implied roles added (admin → manager
    /// → member → reader), as a real Keystone expands them when it issues a token.
    pub fn with_implied_roles(mut self) -> Subject {
        self.roles = implied(&self.roles);
        self
    }
}

/// Keystone's default role implications (keystone-manage bootstrap).
pub fn implied(roles: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |r: &str| {
        if !out.iter().any(|o| o == r) {
            out.push(r.to_owned());
        }
    };
    for r in roles {
        add(r);
        let chain: &[&str] = match r.as_str() {
            "admin" => &["manager", "member", "reader"],
            "manager" => &["member", "reader"],
            "member" => &["reader"],
            _ => &[],
        };
        for c in chain {
            add(c);
        }
    }
    out
}

/// A stable 32-hex-digit id for a name (Keystone ids look like this).
pub fn id_of(kind: &str, name: &str) -> String {
    let fnv = |seed: u64| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for b in kind.bytes().chain([0]).chain(name.bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    format!("{:016x}{:016x}", fnv(1), fnv(2))
}

struct Token {
    subject: Subject,
    expires_at: SystemTime,
    issued_at: SystemTime,
}

struct User {
    password: String,
    subject: Subject,
}

#[derive(Default)]
struct Inner {
    users: Mutex<HashMap<String, User>>,
    tokens: Mutex<HashMap<String, Token>>,
    validations: AtomicUsize,
    password_auths: AtomicUsize,
    lifetime: Mutex<Option<Duration>>,
    /// `token.catalog` of answers (unless `?nocatalog`).
    catalog: Mutex<Option<Value>>,
    /// The identity URL the version documents name (`<url>/v3`).
    identity: Mutex<String>,
}

/// A lock that survives a panicked holder (a failed assertion in another task).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fake Keystone; one from [`FakeKeystone::start`] stops serving when dropped.
pub struct FakeKeystone {
    /// `http://HOST:PORT` (the `/v3` API is under it).
    pub url: String,
    inner: Arc<Inner>,
    _shutdown: Option<oneshot::Sender<()>>,
}

impl FakeKeystone {
    /// Serves a fresh fake Keystone on a free local port.
    pub async fn start() -> FakeKeystone {
        let ks = FakeKeystone::new("http://127.0.0.1");
        let (addr, tx) = crate::serve_fake(ks.router()).await;
        let url = format!("http://{addr}");
        *lock(&ks.inner.identity) = format!("{url}/v3");
        FakeKeystone {
            url,
            _shutdown: Some(tx),
            ..ks
        }
    }

    /// A fake Keystone reachable at `url` once [`Self::router`] is served there.
    pub fn new(url: &str) -> FakeKeystone {
        let url = url.trim_end_matches('/').to_owned();
        let inner = Arc::new(Inner::default());
        *lock(&inner.identity) = format!("{url}/v3");
        FakeKeystone {
            url,
            inner,
            _shutdown: None,
        }
    }

    /// The routes, to serve on a listener of one's own.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/v3/auth/tokens", get(validate).post(password_auth))
            .route("/v3", get(version))
            .route("/", get(versions))
            .with_state(self.inner.clone())
    }

    /// A user that can get a token scoped to its subject by password auth.
    pub fn add_user(&self, password: &str, subject: Subject) {
        lock(&self.inner.users).insert(
            subject.user_name.clone(),
            User {
                password: password.to_owned(),
                subject,
            },
        );
    }

    /// Issues a token valid for an hour.
    pub fn issue(&self, subject: Subject) -> String {
        self.issue_until(subject, SystemTime::now() + Duration::from_secs(3600))
    }

    /// Issues a token with the given expiry (in the past for an expired one).
    pub fn issue_until(&self, subject: Subject, expires_at: SystemTime) -> String {
        let id = format!("gAAAA{}", uuid::Uuid::new_v4().simple());
        lock(&self.inner.tokens).insert(
            id.clone(),
            Token {
                subject,
                expires_at,
                issued_at: SystemTime::now(),
            },
        );
        id
    }

    /// The service catalog answers carry from now on (keystoneauth reads endpoints
    /// from it), unless the request says `?nocatalog`.
    pub fn set_catalog(&self, catalog: Value) {
        *lock(&self.inner.catalog) = Some(catalog);
    }

    /// Tokens issued by password auth from now on live this long (default an hour).
    pub fn set_password_token_lifetime(&self, d: Duration) {
        *lock(&self.inner.lifetime) = Some(d);
    }

    pub fn revoke(&self, token: &str) {
        lock(&self.inner.tokens).remove(token);
    }

    /// Revokes every token of user `name` (what a password change does).
    pub fn revoke_user(&self, name: &str) {
        lock(&self.inner.tokens).retain(|_, t| t.subject.user_name != name);
    }

    /// How many `GET /v3/auth/tokens` calls arrived.
    pub fn validations(&self) -> usize {
        self.inner.validations.load(Ordering::SeqCst)
    }

    /// How many password authentications arrived.
    pub fn password_auths(&self) -> usize {
        self.inner.password_auths.load(Ordering::SeqCst)
    }
}

/// A catalog entry: one service with public, internal and admin endpoints at `url` in
/// `region`.
pub fn catalog_service(kind: &str, name: &str, url: &str, region: &str) -> Value {
    let endpoints: Vec<Value> = ["public", "internal", "admin"]
        .iter()
        .map(|i| {
            json!({"id": id_of("endpoint", &format!("{kind}-{i}")), "interface": i,
                   "region": region, "region_id": region, "url": url})
        })
        .collect();
    json!({"id": id_of("service", name), "type": kind, "name": name, "endpoints": endpoints})
}

/// RFC 3339 UTC with microseconds, as Keystone writes `expires_at`.
pub fn iso(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let days = secs.div_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let t = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        t / 3600,
        t % 3600 / 60,
        t % 60,
        d.subsec_micros()
    )
}

fn token_body(t: &Token, catalog: Option<Value>) -> Value {
    let s = &t.subject;
    let domain = json!({"id": "default", "name": "Default"});
    let mut token = json!({
        "methods": ["password"],
        "expires_at": iso(t.expires_at),
        "issued_at": iso(t.issued_at),
        "audit_ids": [id_of("audit", &iso(t.issued_at))[..22].to_owned()],
        "user": {"id": s.user_id, "name": s.user_name, "domain": domain,
                 "password_expires_at": null},
        "roles": s.roles.iter().map(|r| json!({"id": id_of("role", r), "name": r}))
            .collect::<Vec<_>>(),
    });
    if s.system {
        token["system"] = json!({"all": true});
    } else if let Some(p) = &s.project {
        token["project"] = json!({"id": p.id, "name": p.name, "domain": domain});
        token["is_domain"] = json!(false);
    }
    if let Some(c) = catalog {
        token["catalog"] = c;
    }
    json!({ "token": token })
}

fn error(status: StatusCode, title: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": status.as_u16(), "title": title, "message": message}})),
    )
        .into_response()
}

fn unauthorized() -> Response {
    error(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "The request you have made requires authentication.",
    )
}

fn catalog_for(ks: &Inner, q: &HashMap<String, String>) -> Option<Value> {
    if q.contains_key("nocatalog") {
        None
    } else {
        lock(&ks.catalog).clone()
    }
}

async fn validate(
    State(ks): State<Arc<Inner>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    ks.validations.fetch_add(1, Ordering::SeqCst);
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let now = SystemTime::now();
    let body = {
        let tokens = lock(&ks.tokens);
        // The caller must hold a live token (Keystone's identity:validate_token).
        match header("x-auth-token").and_then(|t| tokens.get(t)) {
            Some(t) if t.expires_at > now => {}
            _ => return unauthorized(),
        }
        let allow_expired = q
            .get("allow_expired")
            .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        let Some(subject) = header("x-subject-token") else {
            return error(StatusCode::NOT_FOUND, "Not Found", "Could not find token.");
        };
        match tokens.get(subject) {
            Some(t) if t.expires_at > now || allow_expired => token_body(t, catalog_for(&ks, &q)),
            _ => {
                return error(
                    StatusCode::NOT_FOUND,
                    "Not Found",
                    &format!("Could not find token: {subject}."),
                )
            }
        }
    };
    let mut resp = Json(body).into_response();
    if let Some(v) = header("x-subject-token").and_then(|s| HeaderValue::from_str(s).ok()) {
        resp.headers_mut().insert("x-subject-token", v);
    }
    resp
}

async fn password_auth(
    State(ks): State<Arc<Inner>>,
    Query(q): Query<HashMap<String, String>>,
    Json(body): Json<Value>,
) -> Response {
    ks.password_auths.fetch_add(1, Ordering::SeqCst);
    let identity = &body["auth"]["identity"];
    if !identity["methods"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m == "password"))
    {
        return unauthorized();
    }
    let user = &identity["password"]["user"];
    let subject = {
        let users = lock(&ks.users);
        let found = match (user["name"].as_str(), user["id"].as_str()) {
            (Some(name), _) => users.get(name),
            (None, Some(id)) => users.values().find(|u| u.subject.user_id == id),
            _ => None,
        };
        match found {
            Some(u) if Some(u.password.as_str()) == user["password"].as_str() => u.subject.clone(),
            _ => return unauthorized(),
        }
    };
    let scope = &body["auth"]["scope"];
    let mut subject = subject;
    if scope["system"].is_object() {
        if !subject.system {
            return unauthorized();
        }
        subject.project = None;
    } else if scope["project"].is_object() {
        let p = &scope["project"];
        let Some(own) = &subject.project else {
            return unauthorized();
        };
        // By name or by id; a test subject's id doubles as its name.
        let by_name = p["name"]
            .as_str()
            .is_some_and(|n| n == own.name || n == own.id);
        if !by_name && p["id"].as_str() != Some(own.id.as_str()) {
            return unauthorized();
        }
        subject.system = false;
    }
    let lifetime = lock(&ks.lifetime).unwrap_or(Duration::from_secs(3600));
    let now = SystemTime::now();
    let token = Token {
        subject,
        expires_at: now + lifetime,
        issued_at: now,
    };
    let body = token_body(&token, catalog_for(&ks, &q));
    let id = format!("gAAAA{}", uuid::Uuid::new_v4().simple());
    lock(&ks.tokens).insert(id.clone(), token);
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-subject-token", v);
    }
    resp
}

fn v3_document(identity: &str) -> Value {
    json!({"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{identity}/")}],
        "media-types": [{"base": "application/json",
                         "type": "application/vnd.openstack.identity-v3+json"}]})
}

async fn version(State(ks): State<Arc<Inner>>) -> Response {
    let identity = lock(&ks.identity).clone();
    Json(json!({ "version": v3_document(&identity) })).into_response()
}

async fn versions(State(ks): State<Arc<Inner>>) -> Response {
    let identity = lock(&ks.identity).clone();
    (
        StatusCode::MULTIPLE_CHOICES,
        Json(json!({"versions": {"values": [v3_document(&identity)]}})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_expanded_as_keystone_implies_them() {
        let r = |v: &[&str]| implied(&v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(r(&["admin"]), ["admin", "manager", "member", "reader"]);
        assert_eq!(r(&["member", "service"]), ["member", "reader", "service"]);
        assert_eq!(r(&["reader", "member"]), ["reader", "member"]);
    }

    #[test]
    fn ids_are_stable_and_keystone_shaped() {
        let id = id_of("project", "tempest-demo");
        assert_eq!(id, id_of("project", "tempest-demo"));
        assert_ne!(id, id_of("user", "tempest-demo"));
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn expiry_is_rfc3339_utc() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(iso(t), "2023-11-14T22:13:20.123456Z");
    }
}
