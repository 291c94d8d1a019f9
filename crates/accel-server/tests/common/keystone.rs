//! A fake Keystone v3 for tests: password auth issues tokens for configured users,
//! `GET /v3/auth/tokens` validates them (404 for unknown, revoked or expired ones,
//! unless `allow_expired=1`), and counters let tests see how often accel asked.
//!
//! Only what keystonemiddleware and keystoneauth use is served; the token bodies have
//! Keystone's shape (`token.{expires_at, user, project | system, roles}`).

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// Who a token stands for.
#[derive(Clone, Debug)]
pub struct Subject {
    pub user_id: String,
    pub user_name: String,
    /// `None` with `system` set: a system-scoped token.
    pub project_id: Option<String>,
    pub system: bool,
    pub roles: Vec<String>,
}

impl Subject {
    /// A project-scoped user `user` of project `project`.
    pub fn project(user: &str, project: &str, roles: &[&str]) -> Subject {
        Subject {
            user_id: format!("{user}-id"),
            user_name: user.to_owned(),
            project_id: Some(project.to_owned()),
            system: false,
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    /// A system-scoped user.
    pub fn system(user: &str, roles: &[&str]) -> Subject {
        Subject {
            project_id: None,
            system: true,
            ..Subject::project(user, "", roles)
        }
    }
}

struct Token {
    subject: Subject,
    expires_at: SystemTime,
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
    /// `token.catalog` of password-auth answers (unless `?nocatalog`).
    catalog: Mutex<Option<Value>>,
}

/// A running fake Keystone; stops when dropped.
pub struct FakeKeystone {
    /// `http://127.0.0.1:PORT` (the `/v3` API is under it).
    pub url: String,
    inner: Arc<Inner>,
    _shutdown: oneshot::Sender<()>,
}

impl FakeKeystone {
    pub async fn start() -> FakeKeystone {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/v3/auth/tokens", get(validate).post(password_auth))
            .with_state(inner.clone());
        let (addr, tx) = super::serve_fake(app).await;
        FakeKeystone {
            url: format!("http://{addr}"),
            inner,
            _shutdown: tx,
        }
    }

    /// A user that can get a project-scoped token by password auth.
    pub fn add_user(&self, password: &str, subject: Subject) {
        self.inner.users.lock().unwrap().insert(
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
        self.inner.tokens.lock().unwrap().insert(
            id.clone(),
            Token {
                subject,
                expires_at,
            },
        );
        id
    }

    /// The service catalog password auth returns from now on (keystoneauth reads
    /// endpoints from it), unless the request says `?nocatalog`.
    pub fn set_catalog(&self, catalog: Value) {
        *self.inner.catalog.lock().unwrap() = Some(catalog);
    }

    /// Tokens issued by password auth from now on live this long.
    pub fn set_password_token_lifetime(&self, d: Duration) {
        *self.inner.lifetime.lock().unwrap() = Some(d);
    }

    pub fn revoke(&self, token: &str) {
        self.inner.tokens.lock().unwrap().remove(token);
    }

    /// Revokes every token of user `name` (what a password change does).
    pub fn revoke_user(&self, name: &str) {
        self.inner
            .tokens
            .lock()
            .unwrap()
            .retain(|_, t| t.subject.user_name != name);
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

fn iso(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let days = secs.div_euclid(86_400);
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

fn token_body(t: &Token) -> Value {
    let s = &t.subject;
    let domain = json!({"id": "default", "name": "Default"});
    let mut token = json!({
        "methods": ["password"],
        "expires_at": iso(t.expires_at),
        "issued_at": iso(SystemTime::now()),
        "audit_ids": ["aUdIt"],
        "user": {"id": s.user_id, "name": s.user_name, "domain": domain,
                 "password_expires_at": null},
        "roles": s.roles.iter().map(|r| json!({"id": format!("{r}-role-id"), "name": r}))
            .collect::<Vec<_>>(),
    });
    if s.system {
        token["system"] = json!({"all": true});
    } else if let Some(p) = &s.project_id {
        token["project"] = json!({"id": p, "name": format!("{p}-name"), "domain": domain});
        token["is_domain"] = json!(false);
    }
    json!({ "token": token })
}

fn not_found(msg: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": {"code": 404, "title": "Not Found", "message": msg}})),
    )
        .into_response()
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({"error": {"code": 401, "title": "Unauthorized",
            "message": "The request you have made requires authentication."}})),
    )
        .into_response()
}

async fn validate(
    State(ks): State<Arc<Inner>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    ks.validations.fetch_add(1, Ordering::SeqCst);
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let now = SystemTime::now();
    let tokens = ks.tokens.lock().unwrap();
    // The caller must hold a live token (Keystone's identity:validate_token).
    match h("x-auth-token").and_then(|t| tokens.get(&t).map(|t| t.expires_at)) {
        Some(exp) if exp > now => {}
        _ => return unauthorized(),
    }
    let allow_expired = q
        .get("allow_expired")
        .is_some_and(|v| v == "1" || v == "true");
    let Some(subject) = h("x-subject-token") else {
        return not_found("Could not find token.");
    };
    match tokens.get(&subject) {
        Some(t) if t.expires_at > now || allow_expired => {
            let mut resp = Json(token_body(t)).into_response();
            if let Ok(v) = HeaderValue::from_str(&subject) {
                resp.headers_mut().insert("x-subject-token", v);
            }
            resp
        }
        _ => not_found(&format!("Could not find token: {subject}.")),
    }
}

async fn password_auth(
    State(ks): State<Arc<Inner>>,
    Query(q): Query<HashMap<String, String>>,
    Json(body): Json<Value>,
) -> Response {
    ks.password_auths.fetch_add(1, Ordering::SeqCst);
    let user = &body["auth"]["identity"]["password"]["user"];
    let (Some(name), Some(password)) = (user["name"].as_str(), user["password"].as_str()) else {
        return unauthorized();
    };
    let subject = {
        let users = ks.users.lock().unwrap();
        match users.get(name) {
            Some(u) if u.password == password => u.subject.clone(),
            _ => return unauthorized(),
        }
    };
    let scope_project = body["auth"]["scope"]["project"]["name"].as_str();
    if scope_project.is_some() && scope_project != subject.project_id.as_deref() {
        return unauthorized();
    }
    let lifetime = ks
        .lifetime
        .lock()
        .unwrap()
        .unwrap_or(Duration::from_secs(3600));
    let token = Token {
        subject,
        expires_at: SystemTime::now() + lifetime,
    };
    let mut body = token_body(&token);
    if !q.contains_key("nocatalog") {
        if let Some(c) = ks.catalog.lock().unwrap().clone() {
            body["token"]["catalog"] = c;
        }
    }
    let id = format!("gAAAA{}", uuid::Uuid::new_v4().simple());
    ks.tokens.lock().unwrap().insert(id.clone(), token);
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    resp.headers_mut()
        .insert("x-subject-token", HeaderValue::from_str(&id).unwrap());
    resp
}
