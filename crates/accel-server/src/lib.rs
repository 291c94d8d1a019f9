//! The accel API server: the Placement API now, the accelerator API next, sharing one
//! store, one policy engine and one auth layer.
//!
//! [`serve`] takes already-bound listeners and a shutdown future (tests bind port 0
//! and read the address back), so nothing here chooses ports or installs signal
//! handlers.

pub mod auth;
mod cors;
pub mod jsonschema;
pub mod placement;

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
}

/// Everything a handler can reach.
pub struct AppState {
    pub store: Store,
    pub policy: Policy,
    pub config: ServerConfig,
}

/// Serves the Placement API on `placement` until `shutdown` completes, then drains.
pub async fn serve(
    state: Arc<AppState>,
    placement: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = placement::router(state);
    axum::serve(placement, app)
        .with_graceful_shutdown(shutdown)
        .await
}
