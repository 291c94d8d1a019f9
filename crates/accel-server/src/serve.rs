//! The listeners of one server process: both APIs, the metrics port and the console,
//! each router inside [`observe::layer`], drained together on shutdown ([`listen`]).

use crate::placement::AppState;
use crate::{accelerator, console, listen, observe, placement};
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

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
    let draining = state.shared.clone();
    let shutdown: listen::Shutdown = async move {
        shutdown.await;
        draining.health.set_draining();
    }
    .boxed()
    .shared();
    let limits = state.config.http.clone();
    let placement_app = observe::layer(
        placement::router(state.clone()),
        state.shared.clone(),
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
                    state.shared.clone(),
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
                let placement = state.clone();
                let router = observe::metrics_router(
                    state.shared.clone(),
                    Arc::new(move || placement.sync_metrics()),
                );
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
                    state.shared.clone(),
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
