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
mod cors;
pub mod external;
pub mod jsonschema;
pub mod placement;
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
}

/// Everything a handler can reach.
pub struct AppState {
    pub store: Store,
    pub policy: Policy,
    pub config: ServerConfig,
    /// The in-memory picture allocation candidates are searched in.
    pub placement_index: placement::index::Index,
}

/// The accelerator API's listener and state, for [`serve`].
pub struct AcceleratorApi {
    pub listener: TcpListener,
    pub state: Arc<accelerator::AccelState>,
}

/// Serves the Placement API on `placement`, and the accelerator API on its own
/// listener when given, until `shutdown` completes; then both drain.
pub async fn serve(
    state: Arc<AppState>,
    placement: TcpListener,
    accelerator: Option<AcceleratorApi>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use futures::FutureExt;
    use std::future::IntoFuture;
    let shutdown = shutdown.boxed().shared();
    let placement_app = placement::router(state);
    let placement_server = axum::serve(placement, placement_app)
        .with_graceful_shutdown(shutdown.clone())
        .into_future();
    match accelerator {
        None => placement_server.await,
        Some(api) => {
            let accel_server = axum::serve(api.listener, accelerator::router(api.state))
                .with_graceful_shutdown(shutdown)
                .into_future();
            let (a, b) = tokio::join!(placement_server, accel_server);
            a.and(b)
        }
    }
}
