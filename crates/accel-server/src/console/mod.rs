//! The operator's console: a read-only web view of the estate, served by `accel serve`
//! on a listener of its own (`--console-listen`, default `127.0.0.1:8790`), so the API
//! ports keep upstream's bytes and the console can be firewalled apart.
//!
//! ```text
//! browser ─▶ observe::layer (api="console": request metrics, access log)
//!          ─▶ headers (CSP, X-Frame-Options, nosniff, Referrer-Policy, no-store)
//!          ─▶ router: /overview /hosts /hosts/{uuid} /consumers /arqs /profiles
//!                     /kubernetes /explain /changes /login /logout
//!                     /static/console.{css,js}
//!          ─▶ viewer (noauth: admin; keystone: session cookie ─▶ token ─▶ the APIs'
//!             token validation) ─▶ policy (the APIs' rule names) ─▶ one estate read
//! ```
//!
//! Why it is shaped so:
//! - **Server-rendered HTML** ([`html`]), one stylesheet and one script embedded with
//!   `include_str!`: air-gapped sites get the whole console in the binary, the build
//!   needs nothing beyond cargo, and the CSP can forbid inline scripts and styles.
//! - **Every list is a page** read in SQL (`accel_store::estate`): the page's rows, a
//!   count, and details for those rows only; candidate questions (device profiles,
//!   the explainer) run on the in-memory candidate index the Placement API uses. So a
//!   page costs the same with 10 or 10,000 hosts.
//! - **Refresh by polling** one token (`GET /changes`, `Estate::stamp`):
//!   the script fetches it every few seconds and, when it moved, re-fetches the page
//!   and swaps `<main>`. No server push: nothing to hold open through proxies.
//! - **Auth as the APIs'** ([`session`]): noauth acts as admin and a banner says so;
//!   keystone mode logs in with Keystone password auth and keeps the token in a
//!   server-side session (a random id in an `HttpOnly; SameSite=Strict` cookie), and
//!   every request validates it through the APIs' own token cache. What a user sees
//!   is decided by the APIs' rule names: hardware pages need
//!   `placement:resource_providers:list`, consumers `placement:allocations:list`,
//!   the explainer `placement:allocation_candidates:list`, ARQs `cyborg:arq:get_all`
//!   (a project member sees its own project's ARQs only), profiles
//!   `cyborg:device_profile:get_all`.
//!
//! Test hooks (`data-test` attributes; numbers as `data-` attributes, never parsed
//! from text):
//! - every page: `viewer` (user · project), `noauth-banner` (noauth only), `logout`
//!   (keystone only), `search` (the search box), `pager` (`data-total`,
//!   `data-offset`) with `prev`/`next` links, `empty` (a list with no row), `error`
//!   (an error page); `<body data-stamp>` is the change token the page shows (the
//!   script sets `data-refreshed` when it swapped the content);
//! - login: `login-form`, `login-error`;
//! - overview: `summary` with `summary-row` (`data-type`, `data-vendor` id,
//!   `data-total`, `data-used`, `data-free`, `data-unhealthy`, `data-reserved`) and
//!   `summary-total` (the same counts over every row);
//! - hosts: `hosts-filter` (the form) with `filter-type` and `filter-health`;
//!   `host-row` (`data-host`, `data-uuid`, `data-providers`), `provider-row`
//!   (`data-provider`, `data-uuid`, `data-depth`, `data-health`) with its
//!   `provider-name`, `device` (`data-vendor`, `data-model` ids) with `vendor-name`
//!   and `product-name`, `health-reason` (`data-since`, epoch seconds), `usage-bar`
//!   (`data-provider`, `data-rc`, `data-used`, `data-total`, `data-reserved`,
//!   `data-capacity`) with its `rc-name`, `trait` (`data-trait`), `last-report`
//!   (`data-epoch`); a tree page adds `tree` and `inventory` rows (`data-provider`
//!   uuid, `data-rc`), `host-consumers` and `host-arqs` (`data-total`) with
//!   `host-consumer` (`data-consumer`, `data-kind`) and `host-arq` (`data-arq`,
//!   `data-state`) rows, and `history` with `history-row` (`data-kind`
//!   report|health|bind|bind_failed|cleaning, `data-device` uuid, `data-epoch`) or
//!   `history-empty` and, per partitioned GPU, `ledger` (`data-gpu` uuid,
//!   `data-slices`, `data-mig` on|off, `data-holders`) with its `slice-bar`: a
//!   `slice-cell` per occupied run (`data-start`, `data-size`) holding each
//!   `slice-holder` (`data-consumer`, `data-form` whole|vfio|mig|vgpu, `data-start`,
//!   `data-size`) or a `slice-standing` instance nobody holds (`data-profile`), and a
//!   `slice-free` cell per free slice (`data-slice`); `ledger-holder` rows
//!   (`data-consumer`, `data-type`, `data-form`, `data-start`, `data-size`,
//!   `data-provider`) or `ledger-empty`; `ledger-member` rows (`data-provider`,
//!   `data-member` whole|mig:<id>|vgpu:<type>, `data-label`, `data-rc`, `data-held`, and
//!   `data-total`, `data-reserved`, `data-used`, `data-free` when it has an inventory);
//! - times: `<time datetime>` in UTC, written with `UTC`, and `data-epoch`;
//! - consumers: `consumer-row` (`data-consumer`, `data-kind` vm|pod),
//!   `allocation` (`data-provider`, `data-rc`, `data-used`), `no-allocation` (an
//!   instance with ARQs only), `arq` (`data-arq`);
//! - ARQs: `arq-row` (`data-arq`, `data-state`, `data-stuck`, `data-project`,
//!   `data-instance`, `data-bind-seconds`, `data-event`), `arq-device`
//!   (`data-provider` uuid; the provider's name as text);
//! - profiles: `profile-row` (`data-profile`, `data-hosts`), `profile-host`
//!   (`data-host`), `profile-error`;
//! - Kubernetes: `k8s-node` (`data-host`, `data-slots`, `data-instance-level`,
//!   `data-configuration-level`), `slot` (`data-slot`, `data-kind`, `data-pod`);
//! - explainer: `explain-form` with `explain-submit`, `explain-query` (the query
//!   asked), `explain-error`, `candidates` (`data-count`, `data-capped`),
//!   `candidate` (`data-index`), `roots-summary` (`data-fits`, `data-roots`),
//!   `root-row` (`data-root`, `data-name`, `data-fits`), `reason` (`data-code`,
//!   `data-group`, `data-provider` name).

mod host;
pub mod html;
mod ledger;
mod names;
mod overview;
mod pages;
mod profiles;
pub mod session;

use crate::accelerator::AccelState;
use crate::auth::Credentials;
use crate::placement::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::Arc;

/// What console handlers reach.
pub struct Console {
    pub app: Arc<AppState>,
    pub accel: Arc<AccelState>,
    pub sessions: session::Sessions,
    /// Provider names for the candidate pages, per index version.
    names: profiles::NameCache,
}

/// The console's router, wrapped in its security headers. Mount it (inside
/// [`crate::observe::layer`]) on its own listener.
pub fn router(app: Arc<AppState>, accel: Arc<AccelState>) -> axum::Router {
    let console = Arc::new(Console {
        app,
        accel,
        sessions: Default::default(),
        names: Default::default(),
    });
    axum::Router::new()
        .route("/", get(|| async { redirect("/overview") }))
        .route("/overview", get(overview::overview))
        .route("/hosts", get(pages::hosts))
        .route("/hosts/{uuid}", get(host::tree))
        .route("/consumers", get(pages::consumers))
        .route("/arqs", get(pages::arqs))
        .route("/kubernetes", get(pages::kubernetes))
        .route("/profiles", get(profiles::profiles))
        .route("/explain", get(profiles::explain))
        .route("/changes", get(pages::changes))
        .route("/login", get(session::login_form).post(session::login))
        .route("/logout", post(session::logout))
        .route("/static/console.css", get(css))
        .route("/static/console.js", get(js))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "No such page.") })
        .layer(axum::middleware::from_fn(headers))
        .with_state(console)
}

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

async fn js() -> Response {
    asset(JS, "text/javascript; charset=utf-8")
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut r = Response::new(Body::from(body));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Assets change only with the binary; pages are never cached (below).
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=300"),
    );
    r
}

/// The policy every answer carries: no inline script or style, nothing from another
/// origin, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

async fn headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// An HTML answer.
pub(crate) fn html(status: StatusCode, body: String) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

/// A plain error page.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<p class=\"error\" data-test=\"error\">{}</p><p><a href=\"/hosts\">Back to the hosts</a></p>",
        html::esc(message)
    );
    html(
        status,
        html::bare(status.canonical_reason().unwrap_or("Error"), &body),
    )
}

pub(crate) fn redirect(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// A store failure, logged with its cause; the person sees that it was ours.
pub(crate) fn store_failed(what: &str, e: accel_store::StoreError) -> Response {
    tracing::error!(target: "accel::console", error = %e, "console: reading {what} failed");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("Reading {what} from the database failed; see the server log."),
    )
}

/// Who is looking, once authenticated.
pub struct Who {
    pub creds: Credentials,
    pub is_admin: bool,
    pub noauth: bool,
    pub session: bool,
}

impl Who {
    pub fn viewer(&self) -> html::Viewer<'_> {
        html::Viewer {
            user: self.creds.user_id().unwrap_or("-"),
            project: self.creds.project_id().unwrap_or("-"),
            noauth: self.noauth,
            session: self.session,
        }
    }
}

impl Console {
    /// Whether `who` may do what Placement's `rule` guards, with Placement's default
    /// target (the caller's own project and user).
    pub fn placement_allows(&self, who: &Who, rule: &str) -> bool {
        let target = who.creds.default_target();
        matches!(self.app.policy.authorize(rule, &who.creds.policy, &target), Ok(d) if d.is_allowed())
    }

    /// Whether `who` may do what Cyborg's `rule` guards (`is_admin` set as Cyborg's
    /// `authorize_wsgi` sets it).
    pub fn cyborg_allows(&self, who: &Who, rule: &str) -> bool {
        let mut creds = who.creds.policy.clone();
        creds.is_admin = Some(who.is_admin);
        let target = accel_core::policy::Target::from_credentials(&creds);
        matches!(self.accel.policy.authorize(rule, &creds, &target), Ok(d) if d.is_allowed())
    }
}

/// The API rule that guards a page, in its policy engine.
#[derive(Clone, Copy)]
pub(crate) enum Rule {
    Placement(&'static str),
    Cyborg(&'static str),
}

/// A handler's answer: `Err` is an early page (login redirect, 403, 503).
pub(crate) type Answer = Result<Response, Response>;

impl Console {
    /// The viewer, when policy lets them see what `rule` guards; else the answer
    /// to send (the login form, a 403 naming the rule).
    pub(crate) async fn admit(
        &self,
        headers: &axum::http::HeaderMap,
        rule: Rule,
    ) -> Result<Who, Response> {
        let who = self.who(headers).await?;
        let (allowed, name) = match rule {
            Rule::Placement(r) => (self.placement_allows(&who, r), r),
            Rule::Cyborg(r) => (self.cyborg_allows(&who, r), r),
        };
        if allowed {
            Ok(who)
        } else {
            Err(forbidden(name))
        }
    }

    /// A list page for `who`, with the change token it refreshes against.
    pub(crate) async fn page(&self, who: &Who, title: &str, active: &str, body: &str) -> Response {
        let stamp = stamp(&self.app).await;
        // The maintenance switch on every page while it is on: the APIs refuse writes.
        let Some(m) = self.app.maintenance.current(&self.app.store).await else {
            return render(who, title, active, stamp.as_deref(), body);
        };
        let banner = format!(
            "<p class=\"bad\" data-test=\"maintenance\">Maintenance {}</p>",
            html::esc(&crate::maintenance::describe(Some(&m)))
        );
        render(who, title, active, stamp.as_deref(), &(banner + body))
    }

    /// The console's reads ([`accel_store::estate`]), each one page's snapshot.
    pub(crate) fn estate(&self) -> accel_store::estate::Estate<'_> {
        self.app.store.estate()
    }
}

/// The answer of the store read `read` (of `what`, for the log and the page); a
/// failure is logged and becomes a 503 page.
pub(crate) async fn read<T>(
    what: &str,
    read: impl std::future::Future<Output = Result<T, accel_store::StoreError>>,
) -> Result<T, Response> {
    read.await.map_err(|e| store_failed(what, e))
}

/// The refusal when policy says no: what the API would answer, as a page.
pub(crate) fn forbidden(rule: &str) -> Response {
    error(
        StatusCode::FORBIDDEN,
        &format!("Policy does not allow {rule} to be performed."),
    )
}

/// Seconds since the epoch.
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `?q=..&offset=..&limit=..` of every list page.
#[derive(serde::Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    pub q: String,
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Rows per page unless `limit` says (at most [`MAX_LIMIT`]).
pub const DEFAULT_LIMIT: u64 = 50;
pub const MAX_LIMIT: u64 = 500;

impl ListQuery {
    pub fn window(&self) -> accel_store::estate::Window {
        accel_store::estate::Window {
            offset: self.offset.unwrap_or(0),
            limit: self.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT),
        }
    }

    pub fn search(&self) -> Option<&str> {
        Some(self.q.trim()).filter(|s| !s.is_empty())
    }
}

/// The change token of a page, or `None` when it cannot be read (the page then
/// does not refresh; the failure is logged).
pub(crate) async fn stamp(app: &AppState) -> Option<String> {
    match app.store.estate().stamp().await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(target: "accel::console", error = %e, "console: reading the change token failed");
            None
        }
    }
}

/// Answers `page` for `who` with the shell around it.
pub(crate) fn render(
    who: &Who,
    title: &str,
    active: &str,
    stamp: Option<&str>,
    body: &str,
) -> Response {
    html(
        StatusCode::OK,
        html::page(title, active, &who.viewer(), stamp, body),
    )
}

pub(crate) type Shared = State<Arc<Console>>;
