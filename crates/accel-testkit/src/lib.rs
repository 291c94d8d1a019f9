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
//! - [`postgres`]: a PostgreSQL server of the test's own, which the test may stop.
//! - [`Forwarder`]: one address for a server that is killed, restarted elsewhere or
//!   not up yet.
//! - [`Logs`]: the log lines a test's code wrote, for tests that check a log line.
//! - [`placement_request`]: a raw Placement request, for tests that look at what the
//!   typed client hides (headers, a 503 body, a token of their own).

#[cfg(feature = "browser")]
pub mod browser;
mod forward;
pub mod keystone;
pub mod postgres;
#[cfg(feature = "server")]
pub mod server;

pub use forward::Forwarder;
use std::future::Future;
use std::sync::{Arc, Mutex};
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

/// `method url` to Placement with `token` (`admin` or `user` under noauth, an issued
/// token under Keystone) at microversion `mv`.
pub fn placement_request(
    method: reqwest::Method,
    url: &str,
    token: &str,
    mv: &str,
) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .request(method, url)
        .header("x-auth-token", token)
        .header("openstack-api-version", format!("placement {mv}"))
}

/// The log lines written while a [`Logs::capture`] guard lives (on this thread, and
/// on a current-thread runtime's tasks), as plain text without colours.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Starts capturing; dropping the guard stops it.
    pub fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}
