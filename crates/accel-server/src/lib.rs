//! The accel API server: the Placement API and the accelerator (Cyborg v2) API, each
//! with its own router, listener and error format, sharing one store, one policy engine
//! and one auth layer.
//!
//! Besides the listeners, `accel serve` runs the accelerator API's background workers
//! ([`accelerator::binder`]). The Nova workflow, a client of both APIs, is
//! `accel_api::workflow`.
//!
//! [`app::App`] is the composition root every server process goes through (`accel
//! serve`, tests, benches): it takes already-bound listeners and a shutdown future
//! (tests bind port 0 and read the address back), so nothing here chooses ports or
//! installs signal handlers. Background workers run under [`supervisor`].

pub mod accelerator;
pub mod app;
pub mod auth;
pub mod console;
mod cors;
pub mod external;
pub mod health;
mod heartbeat;
pub mod jsonschema;
pub mod listen;
pub mod metrics;
pub mod observe;
pub mod placement;
mod reply;
pub mod supervisor;

/// The longest query string either API accepts, in bytes; a longer one is a 400 in the
/// API's own format. Every list query stays within both backends' statement limits up to
/// this size (filters nest as a balanced tree, name lists are batched), so no filter list
/// reaches a database error. Upstream behind gunicorn refuses request lines over 4,094
/// bytes with 414; this is four times that.
pub const MAX_QUERY_BYTES: usize = 16 * 1024;

/// The refusal of a query string over [`MAX_QUERY_BYTES`].
pub(crate) fn query_too_long(query: Option<&str>) -> Option<String> {
    let n = query.map_or(0, str::len);
    (n > MAX_QUERY_BYTES).then(|| {
        format!("The query string is {n} bytes long; at most {MAX_QUERY_BYTES} are accepted.")
    })
}

use accel_core::policy::Policy;
use accel_store::Store;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Settings the server needs at run time (the CLI maps flags and files onto it).
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    pub auth_strategy: auth::AuthStrategy,
    pub cors_allowed_origins: Vec<String>,
    /// Server-side retries of an allocation write that lost a provider race.
    pub allocation_conflict_retry_count: u32,
    /// Upstream's `randomize_allocation_candidates`.
    pub randomize_allocation_candidates: bool,
    /// Upper bound on candidates computed per request, whatever `limit` says.
    pub max_allocation_candidates: usize,
    /// The Keystone validator (configuration, own token, validation cache), present
    /// when `auth_strategy` is keystone.
    pub keystone: Option<Arc<auth::keystone::Keystone>>,
    /// Timeouts, body and connection limits, and the shutdown drain of both APIs.
    pub http: listen::HttpLimits,
    /// No `accel::access` line per request (`access_log = false`).
    pub disable_access_log: bool,
}

/// Everything a handler can reach.
pub struct AppState {
    pub store: Store,
    pub policy: Policy,
    pub config: ServerConfig,
    /// The in-memory picture allocation candidates are searched in.
    pub placement_index: placement::index::Index,
    /// Remembered `GET /usages` answers, forgotten as the change log names their projects.
    pub usage_cache: placement::usage_cache::UsageCache,
    /// Concurrent root-provider creates waiting to be combined into one transaction.
    pub creates: placement::creates::Creates,
    /// The Prometheus metrics every handler and worker updates ([`metrics`]).
    pub metrics: Arc<metrics::Metrics>,
    /// Draining and the workers' state, for the health checks ([`health`]).
    pub health: health::Health,
}

/// The accelerator API's listener and state, for [`serve`].
pub struct AcceleratorApi {
    pub listener: TcpListener,
    pub state: Arc<accelerator::AccelState>,
}

/// Serves the Placement API on `placement`, and the accelerator API on its own
/// listener when given, until `shutdown` completes; then both drain, for at most
/// `state.config.http.shutdown_timeout` ([`listen`]). Each API router runs inside
/// [`observe::layer`] (`/healthcheck`, request metrics, access log).
pub async fn serve(
    state: Arc<AppState>,
    placement: TcpListener,
    accelerator: Option<AcceleratorApi>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with_metrics(state, placement, accelerator, None, shutdown).await
}

/// [`serve`], and the metrics port ([`observe::metrics_router`]) on `metrics` when
/// given. Once `shutdown` completes the health checks answer "draining" while the
/// listeners close.
pub async fn serve_with_metrics(
    state: Arc<AppState>,
    placement: TcpListener,
    accelerator: Option<AcceleratorApi>,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_all(state, placement, accelerator, metrics, None, shutdown).await
}

/// [`serve_with_metrics`], and the operator's console ([`console::router`]) on
/// `console` when given; it uses the accelerator API's state for Cyborg's policy.
pub async fn serve_all(
    state: Arc<AppState>,
    placement: TcpListener,
    accelerator: Option<AcceleratorApi>,
    metrics: Option<TcpListener>,
    console: Option<(TcpListener, Arc<accelerator::AccelState>)>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use futures::FutureExt;
    let draining = state.clone();
    let shutdown: listen::Shutdown = async move {
        shutdown.await;
        draining.health.set_draining();
    }
    .boxed()
    .shared();
    let limits = state.config.http.clone();
    let placement_app = observe::layer(
        placement::router(state.clone()),
        state.clone(),
        observe::Api::Placement,
    );
    let placement_server = listen::serve(
        "placement",
        placement,
        placement_app,
        limits.clone(),
        shutdown.clone(),
    );
    let accel_server = async {
        match accelerator {
            None => Ok(()),
            Some(api) => {
                let router = observe::layer(
                    accelerator::router(api.state),
                    state.clone(),
                    observe::Api::Accelerator,
                );
                listen::serve(
                    "accelerator",
                    api.listener,
                    router,
                    limits.clone(),
                    shutdown.clone(),
                )
                .await
            }
        }
    };
    // The metrics port drains within the same limits as the APIs: a scraper's
    // keep-alive connection cannot hold shutdown.
    let metrics_server = async {
        match metrics {
            None => Ok(()),
            Some(listener) => {
                let router = observe::metrics_router(state.clone());
                listen::serve(
                    "metrics",
                    listener,
                    router,
                    limits.clone(),
                    shutdown.clone(),
                )
                .await
            }
        }
    };
    let console_server = async {
        match console {
            None => Ok(()),
            Some((listener, accel)) => {
                let router = observe::layer(
                    console::router(state.clone(), accel),
                    state.clone(),
                    observe::Api::Console,
                );
                listen::serve(
                    "console",
                    listener,
                    router,
                    limits.clone(),
                    shutdown.clone(),
                )
                .await
            }
        }
    };
    let (a, b, c, d) = tokio::join!(
        placement_server,
        accel_server,
        metrics_server,
        console_server
    );
    a.and(b).and(c).and(d)
}
