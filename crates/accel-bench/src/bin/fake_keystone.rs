//! A fake Keystone v3 to run tempest (and accel's Keystone mode) against, without a
//! real identity service. Development only: tokens live in memory and nothing is
//! persisted, there is no TLS, and every password is compared in clear text.
//!
//! Users come from tempest's own pre-provisioned credentials file (`accounts.yaml`:
//! `username`, `password`, `project_name` or `tenant_name`, or `system: all`, and
//! `roles`), so tempest and this service read the same list; `--accounts` may be given
//! several times (accel's own service user can live in a second file). Served:
//!
//! - `POST /v3/auth/tokens`: password auth, scoped to a project (by name and domain, or
//!   by id) or to the system; `201` with `X-Subject-Token` and Keystone's token body,
//!   including the service catalog (unless `?nocatalog`).
//! - `GET /v3/auth/tokens`: validation of `X-Subject-Token` by the holder of a live
//!   `X-Auth-Token` (keystonemiddleware's call); `404` for an unknown or expired token
//!   unless `allow_expired=1`.
//! - `GET /v3` and `GET /`: version documents.
//!
//! Roles in tokens are expanded with Keystone's default implied roles (admin → manager
//! → member → reader), as a real Keystone does when it issues a token. The catalog lists
//! `identity` (this service) and `accelerator` (`--accelerator-url`) with public,
//! internal and admin endpoints in `--region`.
//!
//! ```sh
//! accel-fake-keystone --listen 127.0.0.1:19550 --accounts accounts.yaml \
//!     --accelerator-url http://127.0.0.1:19551/accelerator/v2
//! ```

use anyhow::Context;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Parser, Debug)]
#[command(about = "A fake Keystone v3 for development: password tokens, validation, a catalog")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:5000")]
    listen: String,
    /// tempest-style accounts file (repeatable).
    #[arg(long, required = true)]
    accounts: Vec<std::path::PathBuf>,
    /// The accelerator endpoint for the catalog (Cyborg registers `.../accelerator/v2`).
    #[arg(long)]
    accelerator_url: String,
    /// This service's public URL, for the catalog (default: `http://<listen>`).
    #[arg(long)]
    public_url: Option<String>,
    /// Region of every catalog endpoint.
    #[arg(long, default_value = "RegionOne")]
    region: String,
    /// Token lifetime in seconds.
    #[arg(long, default_value_t = 3600)]
    token_lifetime: u64,
}

/// One entry of tempest's accounts file (other keys are ignored).
#[derive(Debug, Clone, serde::Deserialize)]
struct Account {
    username: String,
    password: String,
    #[serde(default)]
    project_name: Option<String>,
    #[serde(default)]
    tenant_name: Option<String>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    roles: Vec<String>,
}

#[derive(Clone)]
enum Scope {
    Project(String),
    System,
}

#[derive(Clone)]
struct Token {
    user: String,
    scope: Scope,
    roles: Vec<String>,
    expires_at: SystemTime,
    issued_at: SystemTime,
}

struct Keystone {
    users: HashMap<String, Account>,
    tokens: Mutex<HashMap<String, Token>>,
    catalog: Value,
    lifetime: Duration,
}

/// A stable 32-hex-digit id for a name (Keystone ids look like this).
fn id_of(kind: &str, name: &str) -> String {
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

/// Keystone's default role implications (keystone-manage bootstrap).
fn implied(roles: &[String]) -> Vec<String> {
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

/// RFC 3339 UTC with microseconds, as Keystone writes `expires_at`.
fn iso(t: SystemTime) -> String {
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

impl Keystone {
    fn body(&self, t: &Token, with_catalog: bool) -> Value {
        let domain = json!({"id": "default", "name": "Default"});
        let mut token = json!({
            "methods": ["password"],
            "expires_at": iso(t.expires_at),
            "issued_at": iso(t.issued_at),
            "audit_ids": [id_of("audit", &iso(t.issued_at))[..22].to_owned()],
            "user": {"id": id_of("user", &t.user), "name": t.user, "domain": domain,
                     "password_expires_at": null},
            "roles": t.roles.iter().map(|r| json!({"id": id_of("role", r), "name": r}))
                .collect::<Vec<_>>(),
        });
        match &t.scope {
            Scope::System => token["system"] = json!({"all": true}),
            Scope::Project(p) => {
                token["project"] = json!({"id": id_of("project", p), "name": p, "domain": domain});
                token["is_domain"] = json!(false);
            }
        }
        if with_catalog {
            token["catalog"] = self.catalog.clone();
        }
        json!({ "token": token })
    }

    fn project_of(a: &Account) -> Option<&str> {
        a.project_name.as_deref().or(a.tenant_name.as_deref())
    }
}

fn catalog(identity: &str, accelerator: &str, region: &str) -> Value {
    let endpoints = |service: &str, url: &str| {
        ["public", "internal", "admin"]
            .iter()
            .map(|i| {
                json!({"id": id_of("endpoint", &format!("{service}-{i}")), "interface": i,
                       "region": region, "region_id": region, "url": url})
            })
            .collect::<Vec<_>>()
    };
    json!([
        {"id": id_of("service", "keystone"), "type": "identity", "name": "keystone",
         "endpoints": endpoints("identity", identity)},
        {"id": id_of("service", "cyborg"), "type": "accelerator", "name": "cyborg",
         "endpoints": endpoints("accelerator", accelerator)},
    ])
}

async fn issue(
    State(ks): State<Arc<Keystone>>,
    Query(q): Query<HashMap<String, String>>,
    Json(body): Json<Value>,
) -> Response {
    let identity = &body["auth"]["identity"];
    if !identity["methods"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m == "password"))
    {
        return unauthorized();
    }
    let user = &identity["password"]["user"];
    let account = match (user["name"].as_str(), user["id"].as_str()) {
        (Some(name), _) => ks.users.get(name),
        (None, Some(id)) => ks.users.values().find(|a| id_of("user", &a.username) == id),
        _ => None,
    };
    let Some(account) = account.filter(|a| Some(a.password.as_str()) == user["password"].as_str())
    else {
        return unauthorized();
    };
    let scope = &body["auth"]["scope"];
    let scope = if scope["system"].is_object() {
        if account.system.is_none() {
            return unauthorized();
        }
        Scope::System
    } else if scope["project"].is_object() {
        let p = &scope["project"];
        let Some(own) = Keystone::project_of(account) else {
            return unauthorized();
        };
        let matches = p["name"].as_str() == Some(own)
            || p["id"].as_str() == Some(id_of("project", own).as_str());
        if !matches {
            return unauthorized();
        }
        Scope::Project(own.to_owned())
    } else {
        // Unscoped and domain-scoped tokens: not needed by tempest's API tests here.
        return error(
            StatusCode::BAD_REQUEST,
            "Bad Request",
            "This fake Keystone issues project- or system-scoped tokens only.",
        );
    };
    let now = SystemTime::now();
    let token = Token {
        user: account.username.clone(),
        scope,
        roles: implied(&account.roles),
        expires_at: now + ks.lifetime,
        issued_at: now,
    };
    let id = format!("gAAAA{}", uuid::Uuid::new_v4().simple());
    let mut resp = (
        StatusCode::CREATED,
        Json(ks.body(&token, !q.contains_key("nocatalog"))),
    )
        .into_response();
    ks.tokens
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id.clone(), token);
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-subject-token", v);
    }
    resp
}

async fn validate(
    State(ks): State<Arc<Keystone>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let now = SystemTime::now();
    let tokens = ks.tokens.lock().unwrap_or_else(|e| e.into_inner()).clone();
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
        Some(t) if t.expires_at > now || allow_expired => {
            let mut resp = Json(ks.body(t, !q.contains_key("nocatalog"))).into_response();
            if let Ok(v) = HeaderValue::from_str(subject) {
                resp.headers_mut().insert("x-subject-token", v);
            }
            resp
        }
        _ => error(
            StatusCode::NOT_FOUND,
            "Not Found",
            &format!("Could not find token: {subject}."),
        ),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut users = HashMap::new();
    for path in &args.accounts {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let list: Vec<Account> = serde_yaml::from_str(&text)
            .with_context(|| format!("{}: not a list of tempest accounts", path.display()))?;
        for a in list {
            if Keystone::project_of(&a).is_none() && a.system.is_none() {
                anyhow::bail!(
                    "{}: account {} has neither project_name nor system",
                    path.display(),
                    a.username
                );
            }
            users.insert(a.username.clone(), a);
        }
    }
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let public = args
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", args.listen));
    let identity = format!("{}/v3", public.trim_end_matches('/'));
    let ks = Arc::new(Keystone {
        users,
        tokens: Mutex::default(),
        catalog: catalog(&identity, &args.accelerator_url, &args.region),
        lifetime: Duration::from_secs(args.token_lifetime),
    });
    let v3 = json!({"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{identity}/")}],
        "media-types": [{"base": "application/json",
                         "type": "application/vnd.openstack.identity-v3+json"}]});
    let (v3a, v3b) = (v3.clone(), v3.clone());
    let app = Router::new()
        .route("/v3/auth/tokens", get(validate).post(issue))
        .route(
            "/v3",
            get(move || async move { Json(json!({ "version": v3a })) }),
        )
        .route(
            "/",
            get(move || async move {
                (
                    StatusCode::MULTIPLE_CHOICES,
                    Json(json!({"versions": {"values": [v3b]}})),
                )
            }),
        )
        .with_state(ks);
    eprintln!("fake Keystone on {public} (identity {identity})");
    axum::serve(listener, app).await?;
    Ok(())
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
