//! Who is looking at the console.
//!
//! - **noauth** (the APIs' noauth2): everyone is `admin` of project `admin` with role
//!   `admin`, as a noauth API caller sending `X-Auth-Token: admin` is, and every page
//!   shows a banner saying so. `/login` only says that no login is needed.
//! - **keystone**: `POST /login` (user, password, project, domain) asks Keystone for a
//!   project-scoped token by password (`POST /v3/auth/tokens`, through
//!   `accel_keystone::Session`, the client the server's outgoing calls use). The token
//!   stays on the server, in a session keyed by 32 random bytes (hex) sent as the
//!   cookie `accel_console` with `HttpOnly; SameSite=Strict; Path=/`. Each request
//!   validates the token through the APIs' own path (`Keystone::authenticate`, with its
//!   cache), so an expired or revoked token ends the session as it would end an API
//!   call. `POST /logout` forgets the session.
//!
//! The cookie gets `Secure` only when the request evidently came over HTTPS: the
//! console itself speaks plain HTTP, so that means a TLS-terminating proxy in front
//! that says `X-Forwarded-Proto: https` (or an `Origin` of `https://...`). Without one,
//! a `Secure` cookie would never come back and nobody could log in.
//!
//! CSRF: the console changes nothing but its own session, and only by POST. The cookie
//! is `SameSite=Strict`, so a cross-site request carries no session; on top, every POST
//! must carry an `Origin` equal to the console's own (`http(s)://` + `Host`), which
//! browsers send with every POST, so a cross-site form post to `/login` (login CSRF)
//! is refused as well. Failures are logged with their cause and counted in
//! `accel_console_logins_total{outcome}`.

use super::{html, redirect, Console, Shared, Who};
use crate::auth::{AuthStrategy, Credentials};
use crate::metrics::OutcomeLabel;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The session cookie's name.
pub const COOKIE: &str = "accel_console";

/// Sessions live at most this long (Keystone's default token lifetime is an hour;
/// the token's own expiry ends a session sooner).
const MAX_AGE: Duration = Duration::from_secs(12 * 3600);

/// At most this many sessions are kept; the oldest go first.
const MAX_SESSIONS: usize = 10_000;

struct Entry {
    token: String,
    started: Instant,
}

/// Server-side sessions by id.
#[derive(Default)]
pub struct Sessions(std::sync::Mutex<HashMap<String, Entry>>);

impl Sessions {
    fn insert(&self, token: String) -> String {
        let mut id = [0u8; 32];
        rand::Rng::fill(&mut rand::thread_rng(), &mut id);
        let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, e| e.started.elapsed() < MAX_AGE);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, e)| e.started)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            id.clone(),
            Entry {
                token,
                started: Instant::now(),
            },
        );
        id
    }

    fn token(&self, id: &str) -> Option<String> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(id)
            .filter(|e| e.started.elapsed() < MAX_AGE)
            .map(|e| e.token.clone())
    }

    fn remove(&self, id: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
}

fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The noauth viewer: the APIs' `X-Auth-Token: admin`.
fn noauth_admin() -> Credentials {
    Credentials {
        policy: accel_core::policy::Credentials {
            roles: vec!["admin".to_owned()],
            project_id: Some("admin".to_owned()),
            user_id: Some("admin".to_owned()),
            ..Default::default()
        },
    }
}

impl Console {
    /// The viewer of a request, or the answer for one who is not logged in (a
    /// redirect to the login form) or whose Keystone cannot be asked (503).
    pub async fn who(&self, headers: &HeaderMap) -> Result<Who, Response> {
        let app = &self.app;
        match (&app.config.auth_strategy, &app.config.keystone) {
            (AuthStrategy::Noauth, _) => {
                let creds = noauth_admin();
                crate::auth::note_caller(creds.user_id(), creds.project_id());
                Ok(Who {
                    creds,
                    is_admin: true,
                    noauth: true,
                    session: false,
                })
            }
            (AuthStrategy::Keystone, None) => {
                tracing::error!(target: "accel::console", "auth_strategy is keystone but no [keystone_authtoken] is set");
                Err(super::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Keystone is not configured.",
                ))
            }
            (AuthStrategy::Keystone, Some(k)) => {
                let Some(id) = cookie_value(headers, COOKIE) else {
                    return Err(redirect("/login"));
                };
                let Some(token) = self.sessions.token(id) else {
                    return Err(redirect("/login"));
                };
                let mut h = HeaderMap::new();
                let Ok(v) = HeaderValue::from_str(&token) else {
                    return Err(redirect("/login"));
                };
                h.insert("x-auth-token", v);
                match k.authenticate(&h).await {
                    Ok(creds) => {
                        crate::auth::note_caller(creds.user_id(), creds.project_id());
                        let is_admin = creds.policy.roles.iter().any(|r| r == "admin");
                        Ok(Who {
                            creds,
                            is_admin,
                            noauth: false,
                            session: true,
                        })
                    }
                    Err(crate::auth::Rejection::Unauthorized { .. }) => {
                        tracing::info!(target: "accel::console", "console session ended: Keystone no longer accepts its token");
                        self.sessions.remove(id);
                        Err(redirect("/login"))
                    }
                    Err(crate::auth::Rejection::Unavailable) => Err(super::error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "Keystone is temporarily unavailable.",
                    )),
                }
            }
        }
    }

    fn count(&self, outcome: &'static str) {
        self.app
            .metrics
            .console_logins
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }
}

/// Whether a POST comes from the console's own pages: its `Origin` is
/// `http(s)://<Host>`.
fn same_origin(headers: &HeaderMap) -> bool {
    let get = |n: header::HeaderName| headers.get(n).and_then(|v| v.to_str().ok());
    match (get(header::ORIGIN), get(header::HOST)) {
        (Some(origin), Some(host)) => {
            origin == format!("http://{host}") || origin == format!("https://{host}")
        }
        _ => false,
    }
}

fn over_https(headers: &HeaderMap) -> bool {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    get("x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case("https"))
        || get("origin").is_some_and(|o| o.starts_with("https://"))
}

fn form_page(message: Option<&str>, user: &str, project: &str, domain: &str) -> String {
    let note = message.map_or(String::new(), |m| {
        format!(
            "<p class=\"error\" data-test=\"login-error\">{}</p>",
            html::esc(m)
        )
    });
    html::bare(
        "Log in",
        &format!(
            "{note}<form method=\"post\" action=\"/login\" class=\"login\" data-test=\"login-form\">\
             <label>User <input name=\"user\" value=\"{}\" autocomplete=\"username\" required></label>\
             <label>Password <input name=\"password\" type=\"password\" autocomplete=\"current-password\" required></label>\
             <label>Project <input name=\"project\" value=\"{}\" required></label>\
             <label>Domain <input name=\"domain\" value=\"{}\"></label>\
             <button type=\"submit\">Log in</button></form>",
            html::esc(user),
            html::esc(project),
            html::esc(domain)
        ),
    )
}

pub(crate) async fn login_form(state: Shared) -> Response {
    if state.0.app.config.auth_strategy == AuthStrategy::Noauth {
        return super::html(
            StatusCode::OK,
            html::bare(
                "Log in",
                "<p data-test=\"noauth-banner\">noauth mode: no login is needed; the console acts as admin.</p>\
                 <p><a href=\"/hosts\">Hosts</a></p>",
            ),
        );
    }
    super::html(StatusCode::OK, form_page(None, "", "", "Default"))
}

#[derive(Default)]
struct LoginForm {
    user: String,
    password: String,
    project: String,
    domain: String,
}

impl LoginForm {
    /// The `application/x-www-form-urlencoded` body (axum's `form` feature is off
    /// in this workspace; four fields do not need it).
    fn parse(body: &[u8]) -> LoginForm {
        let mut f = LoginForm::default();
        for (k, v) in form_urlencoded::parse(body) {
            let slot = match k.as_ref() {
                "user" => &mut f.user,
                "password" => &mut f.password,
                "project" => &mut f.project,
                "domain" => &mut f.domain,
                _ => continue,
            };
            *slot = v.into_owned();
        }
        f
    }
}

pub(crate) async fn login(state: Shared, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let console = &state.0;
    let f = LoginForm::parse(&body);
    if !same_origin(&headers) {
        tracing::warn!(target: "accel::console", user = %f.user, origin = ?headers.get(header::ORIGIN), "console login refused: the POST's Origin is not the console's");
        console.count("bad_origin");
        return super::error(StatusCode::FORBIDDEN, "Cross-origin request refused.");
    }
    let Some(k) = console.app.config.keystone.as_ref() else {
        return super::redirect("/hosts");
    };
    let domain = if f.domain.trim().is_empty() {
        "Default".to_owned()
    } else {
        f.domain.trim().to_owned()
    };
    let kc = k.config();
    let cfg = accel_keystone::SessionConfig {
        auth_url: kc.auth_url.clone(),
        auth_type: "password".to_owned(),
        username: f.user.clone(),
        password: f.password.clone().into(),
        project_name: f.project.clone(),
        user_domain_name: domain.clone(),
        project_domain_name: domain.clone(),
        region_name: None,
        interface: "public".to_owned(),
        endpoint_override: None,
        http_connect_timeout: None,
    };
    let token = match accel_keystone::Session::tokens_only(cfg) {
        Ok(s) => s.token().await,
        Err(e) => Err(e),
    };
    let token = match token {
        Ok(t) => t,
        Err(cause) => {
            // A refusal (401) and an unreachable Keystone read differently to the user.
            // A 4xx is Keystone saying no; a 5xx or no answer is Keystone unavailable.
            let refused = cause.contains("refused the credentials") && !cause.contains("(5");
            tracing::warn!(target: "accel::console", user = %f.user, project = %f.project, domain = %domain, cause = %cause, "console login failed");
            console.count(if refused { "refused" } else { "unavailable" });
            let msg = if refused {
                "Keystone refused these credentials."
            } else {
                "Keystone could not be asked; see the server log."
            };
            let mut r = super::html(
                StatusCode::UNAUTHORIZED,
                form_page(Some(msg), &f.user, &f.project, &domain),
            );
            if !refused {
                *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            }
            return r;
        }
    };
    let id = console.sessions.insert(token);
    console.count("ok");
    tracing::info!(target: "accel::console", user = %f.user, project = %f.project, domain = %domain, "console login");
    let secure = if over_https(&headers) { "; Secure" } else { "" };
    let mut r = redirect("/hosts");
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{secure}"
    )) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

pub(crate) async fn logout(state: Shared, headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        tracing::warn!(target: "accel::console", origin = ?headers.get(header::ORIGIN), "console logout refused: the POST's Origin is not the console's");
        return super::error(StatusCode::FORBIDDEN, "Cross-origin request refused.");
    }
    if let Some(id) = cookie_value(&headers, COOKIE) {
        state.0.sessions.remove(id);
    }
    let mut r = redirect("/login");
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("accel_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_must_be_the_host() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8790"));
        assert!(!same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8790"),
        );
        assert!(same_origin(&h));
    }

    #[test]
    fn cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; accel_console=abc; b=2"),
        );
        assert_eq!(cookie_value(&h, COOKIE), Some("abc"));
    }
}
