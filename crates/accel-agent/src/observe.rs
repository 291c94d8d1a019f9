//! The agent's metrics port (`--metrics-listen`, default `127.0.0.1:9779`): `GET
//! /metrics`, and Kubernetes-style `/livez` and `/readyz` for the DaemonSet's probes.
//!
//! ```text
//!  Agent::step ──▶ Health (server reached? last report accepted?) ──▶ /readyz
//!  each worker ──▶ its Beat (and Beat::hold while a long job runs) ─▶ /livez
//!  the supervisor ──▶ Running (workers waiting out a restart) ─────▶ /readyz
//!  Agent, accel_k8s ──▶ Metrics (one registry) ────────────────────▶ /metrics
//!  accel_k8s Registrar ──▶ KubeletMetrics::all_registered ─────────▶ /readyz
//! ```
//!
//! Served with hyper directly (HTTP/1.1, three fixed paths): the agent's build links
//! no web framework and no database driver. The server takes a bound listener and a
//! shutdown future, like every server of accel, so tests bind port 0.
//!
//! Liveness is "every worker's loop answers": each worker (the node's, started by `Node::run`) beats
//! its own [`Beat`] around every step, so a beat older than [`Health::stale_after`]
//! means that worker is stuck (a call that never returns, a deadlock), and kubelet
//! should restart the agent. A step that may run long by design (a programming, an
//! `fpga-default` cleaning, a long poll) [`Beat::hold`]s its beat for its own bound, so
//! a card being re-programmed never reads as a stuck agent. Before the workers start
//! (the wait for the server), [`Health::beat`] is the one beat. Readiness lists every check with
//! `[+]` or `[-]` and the reason, as the Kubernetes components' `?verbose` output does.

use crate::metrics::Metrics;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// The default `--metrics-listen`.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9779";

/// What `/livez` and `/readyz` answer from; shared by the agent's tasks.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    /// Milliseconds after `started` of the loop's last beat.
    beat_ms: AtomicU64,
    stale_after: Duration,
    server: Mutex<Check>,
    report: Mutex<Check>,
    metrics: Arc<Metrics>,
    /// Which kubelet side is part of readiness (`[kubernetes]` is on): the device
    /// plugins, or the DRA driver and its slices.
    kubelet: Option<accel_k8s::config::Mode>,
    /// Each worker's beat, once the workers run.
    workers: Mutex<Vec<Arc<Beat>>>,
    /// Which supervised workers run now (a failed one waits out its backoff).
    running: Mutex<Option<accel_supervisor::Running>>,
}

/// One worker's liveness: when it last beat, and until when a long step holds it.
#[derive(Debug)]
pub struct Beat {
    name: &'static str,
    started: Instant,
    at_ms: AtomicU64,
    held_until_ms: AtomicU64,
}

/// A hold on a [`Beat`]; dropping it beats (the long step ended).
#[derive(Debug)]
pub struct Held(Arc<Beat>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.held_until_ms.store(0, Ordering::Relaxed);
        self.0.beat();
    }
}

impl Beat {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The worker's loop is alive.
    pub fn beat(&self) {
        self.at_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// The worker starts a step that may take up to `bound` (its own timeout): its
    /// silence counts from the end of the bound, until the hold is dropped.
    pub fn hold(self: &Arc<Self>, bound: Duration) -> Held {
        self.beat();
        let until = self.now_ms().saturating_add(bound.as_millis() as u64);
        self.held_until_ms.store(until, Ordering::Relaxed);
        Held(self.clone())
    }

    /// How long the worker has been silent past its beat and its hold.
    fn silent(&self) -> Duration {
        let last = self
            .at_ms
            .load(Ordering::Relaxed)
            .max(self.held_until_ms.load(Ordering::Relaxed));
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }
}

/// One readiness check's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    Pending(String),
    Ok,
    Failed(String),
}

/// Why `/livez` fails: who has been silent, for how long, over which limit.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Stuck {
    #[error("{} (limit {}s)", stuck.iter().map(|(n, s)| format!("worker {n} has not run for {}s", s.as_secs())).collect::<Vec<_>>().join(", "), limit.as_secs())]
    Workers {
        stuck: Vec<(&'static str, Duration)>,
        limit: Duration,
    },
    #[error("the agent's loop has not run for {}s (limit {}s)", silent.as_secs(), limit.as_secs())]
    Loop { silent: Duration, limit: Duration },
}

impl Check {
    /// A result as a check: passing, or failed with the error's words.
    pub fn of<T, E: std::fmt::Display>(result: &Result<T, E>) -> Check {
        match result {
            Ok(_) => Check::Ok,
            Err(e) => Check::Failed(e.to_string()),
        }
    }
}

impl Health {
    /// `stale_after`: how old the loop's last beat may be for `/livez` to pass.
    pub fn new(
        metrics: Arc<Metrics>,
        kubelet: Option<accel_k8s::config::Mode>,
        stale_after: Duration,
    ) -> Health {
        Health {
            started: Instant::now(),
            beat_ms: AtomicU64::new(0),
            stale_after,
            server: Mutex::new(Check::Pending("not contacted yet".into())),
            report: Mutex::new(Check::Pending("no report sent yet".into())),
            metrics,
            kubelet,
            workers: Mutex::new(Vec::new()),
            running: Mutex::new(None),
        }
    }

    /// The beat of worker `name`, which `/livez` checks from now on.
    pub fn worker(&self, name: &'static str) -> Arc<Beat> {
        let beat = Arc::new(Beat {
            name,
            started: self.started,
            at_ms: AtomicU64::new(0),
            held_until_ms: AtomicU64::new(0),
        });
        beat.beat();
        if let Ok(mut w) = self.workers.lock() {
            w.push(beat.clone());
        }
        beat
    }

    /// Each worker `/livez` checks, with how long it has been silent past its beat and
    /// its hold.
    pub fn workers(&self) -> Vec<(&'static str, Duration)> {
        let workers = self.workers.lock().map(|w| w.clone()).unwrap_or_default();
        workers.iter().map(|b| (b.name, b.silent())).collect()
    }

    /// The supervisor's view of its workers, for `/readyz`.
    pub fn supervised(&self, running: accel_supervisor::Running) {
        if let Ok(mut r) = self.running.lock() {
            *r = Some(running);
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }

    /// The agent's loop is alive.
    pub fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.beat_ms.store(ms, Ordering::Relaxed);
    }

    /// The server answered ([`Check::Ok`]) or could not be reached (failed, with the
    /// cause).
    pub fn server(&self, check: Check) {
        if let Ok(mut c) = self.server.lock() {
            *c = check;
        }
    }

    /// The last report was accepted, or not (failed, with the reason).
    pub fn report(&self, check: Check) {
        if let Ok(mut c) = self.report.lock() {
            *c = check;
        }
    }

    /// `/livez`: `Err` with the reason when a worker (before the workers run, the
    /// agent's loop) has not beaten for too long.
    pub fn live(&self) -> Result<(), Stuck> {
        let workers = self.workers.lock().map(|w| w.clone()).unwrap_or_default();
        let limit = self.stale_after;
        let stuck: Vec<(&'static str, Duration)> = workers
            .iter()
            .filter(|b| b.silent() > limit)
            .map(|b| (b.name, b.silent()))
            .collect();
        if !stuck.is_empty() {
            return Err(Stuck::Workers { stuck, limit });
        }
        if !workers.is_empty() {
            return Ok(());
        }
        let now = self.started.elapsed();
        let beat = Duration::from_millis(self.beat_ms.load(Ordering::Relaxed));
        let silent = now.saturating_sub(beat);
        if silent > limit {
            Err(Stuck::Loop { silent, limit })
        } else {
            Ok(())
        }
    }

    /// `/readyz`: every check, by name, and whether it passes.
    pub fn checks(&self) -> Vec<(&'static str, Check)> {
        let get = |m: &Mutex<Check>| {
            m.lock()
                .map(|c| c.clone())
                .unwrap_or_else(|_| Check::Failed("state poisoned".into()))
        };
        let mut out = vec![("server", get(&self.server)), ("report", get(&self.report))];
        if let Some(running) = self.running.lock().ok().and_then(|r| r.clone()) {
            let stopped = running.stopped();
            out.push((
                "workers",
                if stopped.is_empty() {
                    Check::Ok
                } else {
                    Check::Failed(format!(
                        "restarting after a failure: {}",
                        stopped.join(", ")
                    ))
                },
            ));
        }
        out.extend(self.kubelet_checks());
        out
    }

    /// The kubelet side's checks: the device plugins registered; or the DRA driver
    /// registered and the node's ResourceSlices published by the last step.
    fn kubelet_checks(&self) -> Vec<(&'static str, Check)> {
        use accel_k8s::config::Mode;
        use accel_k8s::dra::metrics::PublishState;
        let registered = self.metrics.kubelet.all_registered();
        match self.kubelet {
            None => vec![],
            Some(Mode::DevicePlugin) => vec![(
                "kubelet",
                if registered {
                    Check::Ok
                } else {
                    Check::Pending("device plugins not registered with kubelet yet".into())
                },
            )],
            Some(Mode::Dra) => {
                let driver = if registered {
                    Check::Ok
                } else {
                    Check::Pending("DRA driver not registered with kubelet yet".into())
                };
                let slices = match self.metrics.dra.last_publish() {
                    PublishState::Published => Check::Ok,
                    PublishState::NotYet => {
                        Check::Pending("DRA ResourceSlices not published yet".into())
                    }
                    PublishState::Failed(why) => {
                        Check::Failed(format!("publishing the DRA ResourceSlices failed: {why}"))
                    }
                };
                vec![("dra-driver", driver), ("dra-slices", slices)]
            }
        }
    }
}

fn text(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

const PLAIN: &str = "text/plain; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Answers one request.
pub fn answer(health: &Health, method: &Method, path: &str, accept: &str) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "only GET and HEAD\n".into(),
        );
        r.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        return r;
    }
    match path {
        "/metrics" => {
            if accept.contains("application/openmetrics-text") {
                text(StatusCode::OK, OPENMETRICS, health.metrics.openmetrics())
            } else {
                text(StatusCode::OK, PROMETHEUS, health.metrics.prometheus_text())
            }
        }
        "/livez" => match health.live() {
            Ok(()) => text(StatusCode::OK, PLAIN, "ok\n".into()),
            Err(e) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                PLAIN,
                format!("[-]loop failed: {e}\nlivez check failed\n"),
            ),
        },
        "/readyz" => {
            let checks = health.checks();
            let mut body = String::new();
            let mut ok = true;
            for (name, c) in &checks {
                match c {
                    Check::Ok => body.push_str(&format!("[+]{name} ok\n")),
                    Check::Pending(why) | Check::Failed(why) => {
                        ok = false;
                        body.push_str(&format!("[-]{name} failed: {why}\n"));
                    }
                }
            }
            if ok {
                body.push_str("readyz check passed\n");
                text(StatusCode::OK, PLAIN, body)
            } else {
                body.push_str("readyz check failed\n");
                text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, body)
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            PLAIN,
            "not found: /metrics, /livez, /readyz\n".into(),
        ),
    }
}

/// Serves `/metrics`, `/livez` and `/readyz` on `listener` until `shutdown`
/// resolves. A connection that fails is logged at debug and dropped; the listener
/// failing to accept is logged and retried after a pause (file descriptors exhausted
/// must not end the probes for good).
pub async fn serve(listener: TcpListener, health: Arc<Health>, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "metrics port: accept failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let health = health.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let accept = req
                    .headers()
                    .get(hyper::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let r = answer(&health, req.method(), req.uri().path(), &accept);
                tracing::debug!(target: "accel::agent::metrics", method = %req.method(), path = req.uri().path(), status = r.status().as_u16(), "metrics port request");
                async move { Ok::<_, std::convert::Infallible>(r) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "metrics port connection ended");
            }
        });
    }
    connections.shutdown().await;
}
