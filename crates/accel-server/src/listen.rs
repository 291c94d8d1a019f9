//! How both APIs hold their connections: limits against slow and hostile clients, and
//! a shutdown that drains for a bounded time.
//!
//! `axum::serve` has no header-read timeout, no connection cap, and its graceful
//! shutdown waits for every connection however long a client takes, so one client
//! that sends half a request holds the process. Here each listener runs its own
//! accept loop over hyper's HTTP/1 connection:
//!
//! ```text
//! accept ─ permit (cap on open connections; at the cap, accept waits) ─▶ task:
//!   hyper http1 (header_read_timeout, also closing idle keep-alive connections)
//!     ─▶ router ─▶ dispatcher: read_body (max_body_bytes ─▶ 413, body_timeout ─▶ 408)
//! shutdown ─▶ stop accepting ─▶ each connection: finish the request in flight, close
//!          ─▶ after shutdown_timeout: the connections left are dropped
//! ```
//!
//! Each connection is a task of its own, so a client trickling its headers costs one
//! idle task and a socket until `header_read_timeout`; other clients are not queued
//! behind it. The errors are rendered by the dispatchers in each API's own format.

use axum::body::{Body, Bytes};
use futures::future::{BoxFuture, Shared};
use futures::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The message of a 503 while the database is unreachable.
pub(crate) const DB_UNAVAILABLE: &str =
    "The database is unavailable; the request was not carried out. Try again later.";

/// The message of a 500: the cause is in the server's log, not in the answer.
pub(crate) const INTERNAL: &str =
    "An unexpected error occurred; the server's log has the cause (search for the request id).";

/// Limits on what one client may cost the server.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Time a client has to send a request's headers (from the connection's start or
    /// the previous answer, so it also closes idle keep-alive connections).
    pub header_read_timeout: Duration,
    /// Time a client has to send a request's body once its headers are in.
    pub body_timeout: Duration,
    /// The largest request body accepted; larger ones are answered 413.
    pub max_body_bytes: usize,
    /// Open connections per API; at the cap, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// How long a shutdown waits for requests in flight before it drops the
    /// connections still open (`shutdown_timeout_seconds`).
    pub shutdown_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            header_read_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_body_bytes: 16 * 1024 * 1024,
            max_connections: 4096,
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a request body was not read.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// Longer than `max_body_bytes`.
    TooLarge(usize),
    /// Not complete within `body_timeout`.
    TimedOut(Duration),
    /// The connection failed while the body was read.
    Unreadable(String),
}

impl BodyError {
    /// The status and message of the answer, for each API to render in its format.
    pub(crate) fn status_and_message(&self) -> (http::StatusCode, String) {
        match self {
            BodyError::TooLarge(max) => (
                http::StatusCode::PAYLOAD_TOO_LARGE,
                format!("Request body larger than the limit of {max} bytes."),
            ),
            BodyError::TimedOut(d) => (
                http::StatusCode::REQUEST_TIMEOUT,
                format!("Request body not received within {} s.", d.as_secs()),
            ),
            BodyError::Unreadable(e) => (
                http::StatusCode::BAD_REQUEST,
                format!("Request body unreadable: {e}"),
            ),
        }
    }
}

/// Reads a request body within `limits`: a `content-length` over the limit is refused
/// before anything is read, a chunked body as soon as it passes the limit.
pub(crate) async fn read_body(
    headers: &http::HeaderMap,
    body: Body,
    limits: &HttpLimits,
) -> Result<Bytes, BodyError> {
    let max = limits.max_body_bytes;
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        tracing::info!(
            limit = max,
            "request body refused: content-length over the limit"
        );
        return Err(BodyError::TooLarge(max));
    }
    let read = async {
        let mut stream = body.into_data_stream();
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut len = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| BodyError::Unreadable(e.to_string()))?;
            len += chunk.len();
            if len > max {
                return Err(BodyError::TooLarge(max));
            }
            chunks.push(chunk);
        }
        Ok(match chunks.len() {
            0 => Bytes::new(),
            1 => chunks.pop().unwrap_or_default(),
            _ => Bytes::from(chunks.concat()),
        })
    };
    match tokio::time::timeout(limits.body_timeout, read).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => {
            tracing::info!(error = ?e, "request body not read");
            Err(e)
        }
        Err(_) => {
            tracing::info!(
                timeout_s = limits.body_timeout.as_secs(),
                "request body not received in time"
            );
            Err(BodyError::TimedOut(limits.body_timeout))
        }
    }
}

/// The shutdown signal every accept loop and connection watches.
pub(crate) type Shutdown = Shared<BoxFuture<'static, ()>>;

/// Serves `router` on `listener` within `limits` until `shutdown`, then drains the
/// open connections for at most `limits.shutdown_timeout`. `api` names the API in
/// log lines.
pub(crate) async fn serve(
    api: &'static str,
    listener: TcpListener,
    router: axum::Router,
    limits: HttpLimits,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut conns: JoinSet<()> = JoinSet::new();
    let mut at_cap = false;
    loop {
        while conns.try_join_next().is_some() {}
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => {
                at_cap = false;
                p
            }
            Err(_) => {
                if !at_cap {
                    tracing::warn!(
                        api,
                        max_connections = limits.max_connections,
                        "connection cap reached; new connections wait until one closes"
                    );
                    at_cap = true;
                }
                tokio::select! {
                    p = permits.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                    _ = shutdown.clone() => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: the cause is the host's,
                    // so wait a little rather than spin.
                    tracing::warn!(api, error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.clone() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let header_timeout = limits.header_read_timeout;
        let stop = shutdown.clone();
        conns.spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(true);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop => {
                    conn.as_mut().graceful_shutdown();
                    conn.as_mut().await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let open = conns.len();
    if open > 0 {
        tracing::info!(
            api,
            connections = open,
            timeout_s = limits.shutdown_timeout.as_secs(),
            "draining connections"
        );
    }
    let drained = tokio::time::timeout(limits.shutdown_timeout, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            api,
            connections = conns.len(),
            timeout_s = limits.shutdown_timeout.as_secs(),
            "shutdown timeout: closing the connections still open"
        );
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
    Ok(())
}
