//! The test kit, development only: what tests, benches and the development binaries
//! share to start things and to wait for them.
//!
//! - [`server`] (feature `server`): the real accel server, both APIs on port 0, over a
//!   fresh database per test on each backend ([`server::Backend`]), built by the same
//!   [`accel_server::app::App`] builder as `accel serve`.
//! - [`browser`] (feature `browser`): headless Chromium over WebDriver, for the
//!   console's browser tests.
//! - [`keystone`]: a fake Keystone v3 (password tokens, validation, a catalog), used by
//!   the Keystone-mode tests and by the `accel-fake-keystone` binary (accel-bench).
//! - [`eventually`]: the one way a test waits for something another task does; tests
//!   never sleep a fixed time.
//! - [`serve_fake`]: a fake service's router on a free local port.

#[cfg(feature = "browser")]
pub mod browser;
pub mod keystone;
#[cfg(feature = "server")]
pub mod server;

use std::future::Future;
use std::time::Duration;
use tokio::sync::oneshot;

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(20);

/// What an [`eventually`] check answers: `Some(v)` / `Ok(v)` when the awaited thing
/// happened, `None` / `Err(state)` while not yet (the last state is in the timeout's
/// panic message).
pub trait Outcome {
    type Value;
    fn into_result(self) -> Result<Self::Value, String>;
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self.ok_or_else(|| "not yet".to_owned())
    }
}

impl<T, E: std::fmt::Display> Outcome for Result<T, E> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// Calls `check` until it answers `Some` (or `Ok`) and returns that value; panics
/// naming `what` and the last answer when `timeout` passes first. `check` is the
/// condition itself (a request, a read, a step), so the wait ends as soon as the
/// thing happened, not after a guessed sleep.
pub async fn eventually<O, F, Fut>(timeout: Duration, what: &str, mut check: F) -> O::Value
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match check().await.into_result() {
            Ok(v) => return v,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}: {last}")
            }
            Err(_) => {}
        }
    }
}

/// Serves a fake service's `app` on a free local port until the returned sender fires
/// or is dropped.
pub async fn serve_fake(app: axum::Router) -> (std::net::SocketAddr, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding 127.0.0.1:0");
    let addr = listener.local_addr().expect("a bound listener's address");
    let (stop, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await
    });
    (addr, stop)
}
