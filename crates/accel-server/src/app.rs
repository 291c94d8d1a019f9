//! The composition root of a server process: [`App::builder`] takes the store, the
//! policies, the run-time configuration, Nova's endpoint, the external Placement and
//! the fake devices, and [`App::serve`] runs both APIs on already-bound listeners with
//! the background workers under their [`crate::supervisor`] until a shutdown future
//! completes. `accel serve` and every test or bench that starts a server go through
//! here, so they run the same wiring; only the listeners (configured addresses or
//! port 0) and the shutdown (signals or a channel) differ.
//!
//! ```text
//! App::builder(store) ─ .policy .config .nova .external .fake_devices .workers ─▶ build
//!   build: fake devices reported ─▶ AppState + AccelState
//! App::serve(placement, accelerator, shutdown):
//!   workers (bind, Nova events, pusher) ─▶ both routers (and the metrics port and
//!   the console when given) until shutdown ─▶ workers stopped ─▶ store closed
//! ```

use crate::accelerator::binder::{self, NovaEndpoint, WorkerConfig};
use crate::accelerator::AccelState;
use crate::external::ExternalPlacement;
use crate::placement::AppState;
use crate::serve::{serve_all, AcceleratorApi};
use crate::state::{ServerConfig, Shared};
use crate::supervisor::Backoff;
use accel_core::policy::Policy;
use accel_store::Store;
use anyhow::Context;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// A configured server, ready to serve.
pub struct App {
    state: Arc<AppState>,
    accel: Arc<AccelState>,
    workers: Option<(WorkerConfig, Backoff)>,
    metrics_listener: Option<TcpListener>,
    console_listener: Option<TcpListener>,
}

/// Builds an [`App`]; see [`App::builder`] for the defaults.
pub struct AppBuilder {
    store: Store,
    policy: Policy,
    accelerator_policy: Policy,
    config: ServerConfig,
    bind_timeout_secs: i64,
    external: Option<Arc<ExternalPlacement>>,
    fake_devices: Option<String>,
    maintenance: Option<String>,
    workers: Option<WorkerConfig>,
    backoff: Backoff,
    metrics: Arc<crate::metrics::Metrics>,
    metrics_listener: Option<TcpListener>,
    console_listener: Option<TcpListener>,
}

impl App {
    /// A server over `store` with upstream's default policies (legacy defaults), the
    /// default [`ServerConfig`], a 60 s bind timeout, no Nova endpoint (events are
    /// recorded, not sent), no external Placement, no fake devices, and the
    /// background workers with [`WorkerConfig::new`]'s settings.
    pub fn builder(store: Store) -> AppBuilder {
        AppBuilder {
            store,
            policy: Policy::placement(false),
            accelerator_policy: Policy::cyborg(false),
            config: ServerConfig::default(),
            bind_timeout_secs: 60,
            external: None,
            fake_devices: None,
            maintenance: None,
            workers: Some(WorkerConfig::new(None)),
            backoff: Backoff::default(),
            metrics: Default::default(),
            metrics_listener: None,
            console_listener: None,
        }
    }

    /// The Placement side's state (store, policy, configuration, candidate index).
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// The accelerator API's state.
    pub fn accelerator(&self) -> &Arc<AccelState> {
        &self.accel
    }

    /// Serves Placement on `placement` and the accelerator API on `accelerator` (when
    /// given) until `shutdown` completes, with the background workers running under
    /// their supervisor meanwhile; then the listeners drain, the workers stop after
    /// their current step and the store is closed.
    pub async fn serve(
        self,
        placement: TcpListener,
        accelerator: Option<TcpListener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        // The workers resume what a previous (or crashed) server left in the database.
        let workers = self
            .workers
            .map(|(cfg, backoff)| binder::spawn_with(&self.state, &self.accel, cfg, backoff));
        // The drain deadline covers the workers too: it starts when shutdown does.
        let drain = self.state.config.http.shutdown_timeout;
        let deadline = Arc::new(std::sync::OnceLock::new());
        let shutdown = {
            let deadline = deadline.clone();
            async move {
                shutdown.await;
                let _ = deadline.set(tokio::time::Instant::now() + drain);
            }
        };
        if let Some(w) = &workers {
            self.state.health.watch_workers(w.running());
        }
        let served = serve_all(
            self.state.clone(),
            placement,
            accelerator.map(|listener| AcceleratorApi {
                listener,
                state: self.accel.clone(),
            }),
            self.metrics_listener,
            self.console_listener.map(|l| (l, self.accel.clone())),
            shutdown,
        )
        .await;
        if let Some(w) = workers {
            let left = deadline.get().map_or(drain, |d| {
                d.saturating_duration_since(tokio::time::Instant::now())
            });
            match tokio::time::timeout(left, w.shutdown()).await {
                Ok(r) => r.context("stopping the bind worker")?,
                Err(_) => tracing::warn!(
                    timeout_s = drain.as_secs(),
                    "shutdown timeout: background workers stopped in the middle of a step"
                ),
            }
        }
        self.state.store.close().await;
        served.context("serving the APIs")
    }
}

impl AppBuilder {
    /// The Placement policy (upstream defaults, legacy or new, with file overrides).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The accelerator API's policy (Cyborg's rules, with file overrides).
    pub fn accelerator_policy(mut self, policy: Policy) -> Self {
        self.accelerator_policy = policy;
        self
    }

    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// How long a bind may take before it is failed (upstream `bind_timeout`).
    pub fn bind_timeout_secs(mut self, secs: i64) -> Self {
        self.bind_timeout_secs = secs;
        self
    }

    /// Where the workers send `accelerator-request-bound` events; `None` records
    /// them as `no_endpoint`. Sets the `nova` of the workers' configuration, so call
    /// it after [`Self::workers`].
    pub fn nova(mut self, nova: Option<NovaEndpoint>) -> Self {
        if let Some(w) = self.workers.as_mut() {
            w.nova = nova;
        }
        self
    }

    /// Push device providers to this external Placement too.
    pub fn external(mut self, external: Option<Arc<ExternalPlacement>>) -> Self {
        self.external = external;
        self
    }

    /// Report Cyborg's fake device for `host` at build time (`--fake-devices`).
    pub fn fake_devices(mut self, host: Option<String>) -> Self {
        self.fake_devices = host;
        self
    }

    /// Stop writes at start-up with this reason (`maintenance = REASON`): the switch
    /// is turned on in the database, for every replica ([`crate::maintenance`]).
    /// `None` leaves the switch as the database holds it.
    pub fn maintenance(mut self, reason: Option<String>) -> Self {
        self.maintenance = reason;
        self
    }

    /// The background workers' settings; `None` runs no worker (tests that drive `step` themselves).
    pub fn workers(mut self, workers: Option<WorkerConfig>) -> Self {
        self.workers = workers;
        self
    }

    /// The metrics registry to record into (a fresh one by default).
    pub fn metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Serve `/metrics`, `/livez` and `/readyz` on this listener too
    /// (`--metrics-listen`).
    pub fn metrics_listener(mut self, listener: Option<TcpListener>) -> Self {
        self.metrics_listener = listener;
        self
    }

    /// Serve the operator's console on this listener too (`--console-listen`;
    /// `None`, the default, serves none: `--no-console`).
    pub fn console_listener(mut self, listener: Option<TcpListener>) -> Self {
        self.console_listener = listener;
        self
    }

    /// The supervisor's wait before restarting a failed worker.
    pub fn restart_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Reports the fake devices, if any, and assembles the states.
    pub async fn build(self) -> anyhow::Result<App> {
        if let Some(host) = &self.fake_devices {
            let s = crate::accelerator::agent::report_fake_devices(&self.store, host)
                .await
                .with_context(|| format!("reporting the fake devices of host {host}"))?;
            // Logged under `accel serve`'s own target, where these lines were born.
            tracing::info!(target: "accel", host = %host, compute_node_created = s.compute_node_created, "fake devices reported");
        }
        if let Some(ext) = &self.external {
            tracing::info!(target: "accel", placement = %ext.client.endpoint().await, "device providers are pushed to an external Placement");
        }
        if let Some(reason) = &self.maintenance {
            self.store
                .maintenance()
                .start(reason)
                .await
                .context("turning the maintenance switch on")?;
            tracing::warn!(target: "accel::maintenance", reason = %reason, "started in maintenance: writes are answered 503 until DELETE /v2/maintenance");
        }
        let admission = crate::admission::Admission::new(&self.config.admission, &self.metrics);
        let shared = Arc::new(Shared {
            store: self.store,
            config: self.config,
            metrics: self.metrics,
            health: Default::default(),
            maintenance: Default::default(),
            admission,
        });
        let state = Arc::new(AppState::new(shared.clone(), self.policy));
        let accel = Arc::new(AccelState {
            app: shared,
            policy: self.accelerator_policy,
            bind_timeout_secs: self.bind_timeout_secs,
            bind_wakeup: Default::default(),
            external: self.external,
            nova_configured: self.workers.as_ref().is_some_and(|w| w.nova.is_some()),
        });
        Ok(App {
            state,
            accel,
            workers: self.workers.map(|cfg| (cfg, self.backoff)),
            metrics_listener: self.metrics_listener,
            console_listener: self.console_listener,
        })
    }
}
