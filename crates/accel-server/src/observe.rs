//! What an operator sees of the APIs from outside: a layer around each API router
//! ([`layer`]) that answers `/healthcheck` before authentication, counts and times
//! every request under its route template, and writes one access-log line per
//! request; and the metrics port's router ([`metrics_router`]: `/metrics`, `/livez`,
//! `/readyz`).
//!
//! ```text
//! request ─▶ layer: /healthcheck? ─yes─▶ health::check ─▶ 200 OK / 204 / 503 reasons
//!              │ no
//!              ▼
//!            API router (auth, version, route, handler; notes the caller)
//!              ▼
//!            accel_http_requests_total{api,method,route,status} += 1, duration observed,
//!            info! target "accel::access" (unless access_log is off)
//! ```
//!
//! `/healthcheck` follows oslo.middleware's healthcheck application as Nova's or
//! Glance's pipelines mount it: `GET` answers `200` with `OK` as `text/plain`, `HEAD`
//! `204` with no body, and either `503` with the failing reasons, one per line, when
//! the server cannot serve; a client that asks for JSON (and not text) gets its
//! `{"detailed": false, "reasons": [..]}` document. It sits in front of the API so it
//! needs no token, and it adds nothing to the bytes of any upstream route.
//!
//! The route label is a template from a fixed list (`/resource_providers/{uuid}`),
//! never the raw path, so no uuid becomes a label value; a path no route matches is
//! [`UNMATCHED`]. The user and project of the access log come from the API's own
//! authentication, which notes them in a task-local ([`crate::auth::note_caller`]) that only
//! exists while the access log is on.

use crate::health;
use crate::metrics::{HttpLabels, RouteLabels};
use crate::state::Shared;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use std::time::Instant;

/// Which API a listener serves (the `api` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Placement,
    Accelerator,
    /// The operator's console ([`crate::console`]).
    Console,
}

impl Api {
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Placement => "placement",
            Api::Accelerator => "accelerator",
            Api::Console => "console",
        }
    }
}

/// The route label of a path that matches no route.
pub const UNMATCHED: &str = "unmatched";
const HEALTHCHECK: &str = "/healthcheck";

/// Wraps `router` (an API's whole router) in the observing layer.
pub fn layer(router: axum::Router, app: Arc<Shared>, api: Api) -> axum::Router {
    router.layer(axum::middleware::from_fn_with_state((app, api), observe))
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

async fn observe(
    State((app, api)): State<(Arc<Shared>, Api)>,
    req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    let route = route_of(api, req.uri().path());
    let access = !app.config.disable_access_log
        && tracing::enabled!(target: "accel::access", tracing::Level::INFO);
    // Only what the log line needs is copied out of the request, and only when it is
    // written.
    let seen = access.then(|| {
        (
            req.uri()
                .path_and_query()
                .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned()),
            header_str(req.headers(), "x-openstack-request-id").map(str::to_owned),
        )
    });
    let (resp, caller) = if route == HEALTHCHECK && (method == "GET" || method == "HEAD") {
        (
            healthcheck(&app, method == "HEAD", req.headers()).await,
            None,
        )
    } else if access {
        crate::auth::noting_caller(next.run(req)).await
    } else {
        (next.run(req).await, None)
    };
    let elapsed = started.elapsed();
    let status = resp.status().as_u16();
    let api_label = api.as_str();
    app.metrics
        .http_requests
        .get_or_create(&HttpLabels {
            api: api_label,
            method,
            route,
            status,
        })
        .inc();
    app.metrics
        .http_duration
        .get_or_create(&RouteLabels {
            api: api_label,
            method,
            route,
        })
        .observe(elapsed.as_secs_f64());
    if let Some((path, global)) = seen {
        let bytes = axum::body::HttpBody::size_hint(resp.body()).exact();
        let (user, project) = caller.unwrap_or_else(|| ("-".to_owned(), "-".to_owned()));
        let request_id = header_str(resp.headers(), "x-openstack-request-id").unwrap_or("-");
        let duration_ms = (elapsed.as_secs_f64() * 1e6).round() / 1e3;
        if route == HEALTHCHECK {
            // Probes come every few seconds; their lines are asked for explicitly.
            tracing::debug!(target: "accel::access", api = api_label, method, path = %path, status, bytes, duration_ms, "request");
        } else {
            tracing::info!(
                target: "accel::access",
                api = api_label,
                method,
                path = %path,
                status,
                bytes,
                duration_ms,
                request_id,
                global_request_id = global.as_deref().unwrap_or("-"),
                user = %user,
                project = %project,
                "request"
            );
        }
    }
    resp
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// oslo.middleware's healthcheck answer (see the module docs).
async fn healthcheck(app: &Shared, head: bool, headers: &HeaderMap) -> Response {
    let checks = health::check(app, false).await;
    let reasons = health::failures(&checks);
    let healthy = reasons.is_empty();
    let status = match (healthy, head) {
        (true, true) => StatusCode::NO_CONTENT,
        (true, false) => StatusCode::OK,
        (false, _) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let accept = header_str(headers, "accept").unwrap_or("");
    let json = accept.contains("application/json") && !accept.contains("text/plain");
    let (body, content_type) = if head {
        (String::new(), "text/plain; charset=UTF-8")
    } else if json {
        let reasons: Vec<&str> = if healthy { vec!["OK"] } else { reasons };
        let doc = serde_json::json!({"detailed": false, "reasons": reasons});
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        let _ = serde::Serialize::serialize(&doc, &mut ser);
        (
            String::from_utf8(out).unwrap_or_default(),
            "application/json",
        )
    } else if healthy {
        ("OK".to_owned(), "text/plain; charset=UTF-8")
    } else {
        (reasons.join("\n"), "text/plain; charset=UTF-8")
    };
    if !healthy {
        tracing::warn!(target: "accel::health", reasons = ?reasons_of(&checks), "healthcheck: 503");
    }
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn reasons_of(checks: &[health::Check]) -> Vec<String> {
    health::failures(checks)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Placement's route templates, as upstream's route table names them.
const PLACEMENT_ROUTES: &[&str] = &[
    "/",
    "/resource_classes",
    "/resource_classes/{name}",
    "/resource_providers",
    "/resource_providers/{uuid}",
    "/resource_providers/{uuid}/inventories",
    "/resource_providers/{uuid}/inventories/{resource_class}",
    "/resource_providers/{uuid}/usages",
    "/resource_providers/{uuid}/aggregates",
    "/resource_providers/{uuid}/allocations",
    "/resource_providers/{uuid}/traits",
    "/allocations",
    "/allocations/{consumer_uuid}",
    "/allocation_candidates",
    "/traits",
    "/traits/{name}",
    "/usages",
    "/reshaper",
    HEALTHCHECK,
];

/// The accelerator API's templates under `/v2` (the router also answers them
/// without the `v2` segment and under `/accelerator`; all count as the `/v2` form).
const ACCEL_ROUTES: &[&str] = &[
    "/v2/device_profiles",
    "/v2/device_profiles/{uuid}",
    "/v2/accelerator_requests",
    "/v2/accelerator_requests/{uuid}",
    "/v2/devices",
    "/v2/devices/{uuid}",
    "/v2/devices/{uuid}/enable",
    "/v2/devices/{uuid}/disable",
    "/v2/deployables",
    "/v2/deployables/{uuid}",
    "/v2/deployables/{uuid}/program",
    "/v2/attributes",
    "/v2/attributes/{uuid}",
    "/v2/agent/hosts/{hostname}",
    "/v2/agent/hosts/{hostname}/devices",
    "/v2/agent/hosts/{hostname}/programs",
    "/v2/agent/hosts/{hostname}/programs/{id}",
    "/v2/agent/hosts/{hostname}/kubernetes",
];

/// The console's pages ([`crate::console`]).
const CONSOLE_ROUTES: &[&str] = &[
    "/hosts",
    "/hosts/{uuid}",
    "/consumers",
    "/arqs",
    "/profiles",
    "/kubernetes",
    "/explain",
    "/login",
    "/logout",
    "/changes",
    "/static/console.css",
    "/static/console.js",
];

/// Whether `segs` (a path's segments) fit `template` ("{..}" matches any non-empty
/// segment). No allocation: both sides are iterated.
fn fits<'a>(template: &str, mut segs: impl Iterator<Item = &'a str>) -> bool {
    for t in template.split('/').filter(|t| !t.is_empty()) {
        match segs.next() {
            Some(s) if t.starts_with('{') => {
                if s.is_empty() {
                    return false;
                }
            }
            Some(s) if s == t => {}
            _ => return false,
        }
    }
    segs.next().is_none()
}

/// The route template `path` answers under on `api`'s listener.
pub fn route_of(api: Api, path: &str) -> &'static str {
    match api {
        Api::Console => {
            if path == "/" || path.is_empty() {
                return "/";
            }
            let rest = path.strip_prefix('/').unwrap_or(path);
            CONSOLE_ROUTES
                .iter()
                .find(|t| fits(t, rest.split('/')))
                .copied()
                .unwrap_or(UNMATCHED)
        }
        Api::Placement => {
            if path == "/" || path.is_empty() {
                return "/";
            }
            let Some(rest) = path.strip_prefix('/') else {
                return UNMATCHED;
            };
            PLACEMENT_ROUTES
                .iter()
                .find(|t| **t != "/" && fits(t, rest.split('/')))
                .copied()
                .unwrap_or(UNMATCHED)
        }
        Api::Accelerator => {
            if path == HEALTHCHECK {
                return HEALTHCHECK;
            }
            // The accelerator API's own normalisation (`Cyborg::enter`, accelerator/api.rs).
            let mut p = path;
            if let Some(rest) = p.strip_prefix("/accelerator") {
                if rest.is_empty() || rest.starts_with('/') {
                    p = rest;
                }
            }
            let p = p.trim_end_matches('/');
            let p = p.strip_suffix(".json").unwrap_or(p);
            let mut segs = p.split('/').filter(|s| !s.is_empty()).peekable();
            match segs.peek() {
                None => return "/",
                Some(&"v2") => {
                    segs.next();
                    if segs.peek().is_none() {
                        return "/v2";
                    }
                }
                Some(_) => {}
            }
            let segs: Vec<&str> = segs.collect();
            ACCEL_ROUTES
                .iter()
                .find(|t| fits(&t[3..], segs.iter().copied()))
                .copied()
                .unwrap_or(UNMATCHED)
        }
    }
}

/// Brings the figures an API keeps in its own structures into the metrics before a
/// scrape (Placement's index refreshes and usage answers), so this module needs
/// nothing of the APIs.
pub type BeforeScrape = Arc<dyn Fn() + Send + Sync>;

/// The metrics port: `GET /metrics`, `/livez`, `/readyz`.
pub fn metrics_router(app: Arc<Shared>, before_scrape: BeforeScrape) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state((app, before_scrape))
}

async fn metrics(
    State((app, before_scrape)): State<(Arc<Shared>, BeforeScrape)>,
    headers: HeaderMap,
) -> Response {
    let openmetrics =
        header_str(&headers, "accept").is_some_and(|a| a.contains("application/openmetrics-text"));
    before_scrape();
    if let Some(k) = &app.config.keystone {
        app.metrics
            .set_keystone_refused(k.own_credentials_refused_now());
    }
    app.metrics.refresh(&app.store, health::DB_TIMEOUT).await;
    let body = app.metrics.encode(openmetrics);
    let content_type = if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    };
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// The process loop answers: that is all liveness means.
async fn livez() -> Response {
    text(StatusCode::OK, "ok".to_owned())
}

/// Kubernetes' readiness format: one `[+]`/`[-]` line per check, the maintenance
/// switch's state (never a failure: reads are served), then the verdict.
async fn readyz(State((app, _)): State<(Arc<Shared>, BeforeScrape)>) -> Response {
    let checks = health::check(&app, true).await;
    let mut body = String::new();
    for c in &checks {
        match &c.failure {
            None => body.push_str(&format!("[+]{} ok\n", c.name)),
            Some(why) => body.push_str(&format!("[-]{} failed: {why}\n", c.name)),
        }
    }
    // Ready either way: reads go on while writes are stopped.
    let stopped = app.maintenance.current(&app.store).await;
    let state = crate::maintenance::describe(stopped.as_ref());
    body.push_str(&format!("[+]maintenance ok: {state}\n"));
    let ok = checks.iter().all(|c| c.failure.is_none());
    if ok {
        body.push_str("readyz check passed\n");
        text(StatusCode::OK, body)
    } else {
        tracing::warn!(target: "accel::health", reasons = ?reasons_of(&checks), "readyz: 503");
        body.push_str("readyz check failed\n");
        text(StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

fn text(status: StatusCode, body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_templates_never_raw_paths() {
        let u = "/resource_providers/7c7b2b1e-2b0c-4a34-9a51-4f5b4d6e8a10";
        assert_eq!(route_of(Api::Placement, u), "/resource_providers/{uuid}");
        assert_eq!(
            route_of(Api::Placement, &format!("{u}/inventories/VGPU")),
            "/resource_providers/{uuid}/inventories/{resource_class}"
        );
        assert_eq!(route_of(Api::Placement, "/"), "/");
        assert_eq!(
            route_of(Api::Placement, "/allocations/x"),
            "/allocations/{consumer_uuid}"
        );
        assert_eq!(route_of(Api::Placement, "/resource_providers/"), UNMATCHED);
        assert_eq!(route_of(Api::Placement, "/nope/a/b"), UNMATCHED);
        assert_eq!(route_of(Api::Placement, "/healthcheck"), HEALTHCHECK);
        assert_eq!(route_of(Api::Accelerator, "/"), "/");
        assert_eq!(route_of(Api::Accelerator, "/accelerator/v2/"), "/v2");
        assert_eq!(
            route_of(Api::Accelerator, "/accelerator/v2/accelerator_requests/abc"),
            "/v2/accelerator_requests/{uuid}"
        );
        assert_eq!(
            route_of(Api::Accelerator, "/device_profiles.json"),
            "/v2/device_profiles"
        );
        assert_eq!(
            route_of(Api::Accelerator, "/v2/agent/hosts/node1/programs/4"),
            "/v2/agent/hosts/{hostname}/programs/{id}"
        );
        assert_eq!(
            route_of(Api::Accelerator, "/v2/devices/x/reboot"),
            UNMATCHED
        );
        assert_eq!(route_of(Api::Accelerator, "/healthcheck"), HEALTHCHECK);
        assert_eq!(route_of(Api::Console, "/hosts/abc"), "/hosts/{uuid}");
        assert_eq!(
            route_of(Api::Console, "/static/console.js"),
            "/static/console.js"
        );
        assert_eq!(route_of(Api::Console, "/"), "/");
        assert_eq!(route_of(Api::Console, "/nope"), UNMATCHED);
    }
}
