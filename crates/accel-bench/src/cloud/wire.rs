//! The simulator's own HTTP/1.1 client, so that each call's time can be split where
//! it is spent (issue 46 item 1): a general client (reqwest) hides when a request
//! left its pool queue and when its first byte was written, which is the line
//! between the simulator's time and the server's.
//!
//! ```text
//! due ──(simulator: runtime, pool, a new connection)──▶ first byte written
//!     ──(server + network)──▶ last byte of the answer read ──(parse)──▶ done
//! ```
//!
//! Each connection's socket is wrapped in [`Stamped`], which notes the instant of
//! the first write after [`Stamp::reset`]; HTTP/1 carries one request at a time per
//! connection, so that instant belongs to the request in flight. Idle connections are
//! reused for at most [`IDLE_REUSE`], below the server's 30 s header-read timeout that
//! closes idle keep-alive connections, so a request is never written to a connection
//! the server is closing.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long an idle connection is reused (the server closes idle ones after 30 s).
const IDLE_REUSE: Duration = Duration::from_secs(20);
/// The longest a call may take, as the reqwest clients before.
const TIMEOUT: Duration = Duration::from_secs(60);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The instant of a connection's first write since the last reset (0: none yet).
#[derive(Clone, Default)]
struct Stamp(Arc<AtomicU64>);

impl Stamp {
    fn reset(&self) {
        self.0.store(0, Ordering::SeqCst);
    }
    fn note(&self) {
        if self.0.load(Ordering::Relaxed) == 0 {
            let nanos = epoch().elapsed().as_nanos() as u64;
            let _ = self
                .0
                .compare_exchange(0, nanos.max(1), Ordering::SeqCst, Ordering::SeqCst);
        }
    }
    fn get(&self) -> Option<Instant> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            n => Some(epoch() + Duration::from_nanos(n)),
        }
    }
}

/// A socket that stamps its first write.
struct Stamped {
    inner: TcpStream,
    stamp: Stamp,
}

impl AsyncRead for Stamped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.stamp.note();
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.stamp.note();
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

struct Conn {
    sender: SendRequest<Full<Bytes>>,
    stamp: Stamp,
    idle_since: Instant,
}

/// Why a call got no answer.
#[derive(Debug)]
pub enum WireError {
    Connect(std::io::Error),
    Http(hyper::Error),
    TimedOut,
    BadRequest(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Connect(e) => write!(f, "connecting: {e}"),
            WireError::Http(e) => write!(f, "HTTP: {e}"),
            WireError::TimedOut => write!(f, "no answer within {} s", TIMEOUT.as_secs()),
            WireError::BadRequest(e) => write!(f, "building the request: {e}"),
        }
    }
}

/// One request: method, path with its query, microversion header, JSON body.
pub struct Call {
    pub method: hyper::Method,
    pub path: String,
    pub microversion: Option<&'static str>,
    pub body: Option<Vec<u8>>,
    /// A status besides 2xx that the caller takes as done (a delete's 404).
    pub also_done: Option<u16>,
}

impl Call {
    pub fn new(method: hyper::Method, path: impl Into<String>) -> Call {
        Call {
            method,
            path: path.into(),
            microversion: None,
            body: None,
            also_done: None,
        }
    }
    pub fn get(path: impl Into<String>) -> Call {
        Call::new(hyper::Method::GET, path)
    }
    /// Adds `key=value` to the query, percent-encoding what a query must not carry.
    pub fn query(mut self, key: &str, value: &str) -> Call {
        self.path
            .push(if self.path.contains('?') { '&' } else { '?' });
        self.path.push_str(&encode(key));
        self.path.push('=');
        self.path.push_str(&encode(value));
        self
    }
    pub fn done_on(mut self, status: u16) -> Call {
        self.also_done = Some(status);
        self
    }
    pub fn microversion(mut self, mv: &'static str) -> Call {
        self.microversion = Some(mv);
        self
    }
    pub fn json(mut self, body: &impl serde::Serialize) -> Call {
        self.body = Some(serde_json::to_vec(body).unwrap_or_default());
        self
    }
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' | b',' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Where each part of a call's time went.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// From the call being due to its first byte written: the simulator's runtime,
    /// its pool and, for a new connection, the connect.
    pub queued: Duration,
    /// From the first byte written to the answer's last byte read: the server and
    /// the network (loopback here).
    pub wire: Duration,
    pub new_connection: bool,
}

/// An answer read to its last byte.
pub struct Answer {
    pub status: u16,
    /// The call's [`Call::also_done`].
    pub also_done: Option<u16>,
    pub retry_after: Option<u64>,
    pub body: Bytes,
    pub timing: Timing,
}

/// A client of one base URL with fixed headers (token, identity), pooling up to
/// `max_idle` idle connections.
pub struct Wire {
    authority: String,
    prefix: String,
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    idle: Mutex<Vec<Conn>>,
    max_idle: usize,
}

impl Wire {
    pub fn new(
        url: &str,
        token: &str,
        headers: &[(&'static str, String)],
        max_idle: usize,
    ) -> anyhow::Result<Wire> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("{url}: only http:// URLs are simulated"))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let mut all = vec![
            ("x-auth-token", token.to_owned()),
            ("accept", "application/json".to_owned()),
            ("user-agent", "accel-bench-cloud".to_owned()),
        ];
        all.extend(headers.iter().cloned());
        let headers = all
            .into_iter()
            .map(|(k, v)| Ok((hyper::header::HeaderName::from_static(k), v.parse()?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Wire {
            authority: authority.to_owned(),
            prefix: prefix.to_owned(),
            headers,
            idle: Mutex::new(Vec::new()),
            max_idle,
        })
    }

    /// Sends `call`, due since `due`, and reads its answer to the last byte.
    pub async fn send(&self, due: Instant, call: Call) -> Result<Answer, WireError> {
        tokio::time::timeout(TIMEOUT, self.exchange(due, call))
            .await
            .unwrap_or(Err(WireError::TimedOut))
    }

    async fn exchange(&self, due: Instant, call: Call) -> Result<Answer, WireError> {
        let mut req = hyper::Request::builder()
            .method(call.method)
            .uri(format!("{}{}", self.prefix, call.path))
            .header("host", &self.authority);
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        if let Some(mv) = call.microversion {
            req = req.header("openstack-api-version", mv);
        }
        let also_done = call.also_done;
        let body = match call.body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Full::new(Bytes::from(b))
            }
            None => Full::new(Bytes::new()),
        };
        let req = req
            .body(body)
            .map_err(|e| WireError::BadRequest(e.to_string()))?;
        let (mut conn, new_connection) = self.checkout().await?;
        conn.stamp.reset();
        let resp = conn
            .sender
            .send_request(req)
            .await
            .map_err(WireError::Http)?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.trim().parse().ok());
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(WireError::Http)?
            .to_bytes();
        let done = Instant::now();
        let written = conn.stamp.get().unwrap_or(done);
        let timing = Timing {
            queued: written.saturating_duration_since(due),
            wire: done.saturating_duration_since(written),
            new_connection,
        };
        self.checkin(conn);
        Ok(Answer {
            status,
            also_done,
            retry_after,
            body,
            timing,
        })
    }

    /// An idle connection still fresh and open, else a new one.
    async fn checkout(&self) -> Result<(Conn, bool), WireError> {
        loop {
            let next = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some(mut c) = next else { break };
            if c.idle_since.elapsed() < IDLE_REUSE && c.sender.ready().await.is_ok() {
                return Ok((c, false));
            }
        }
        let tcp = TcpStream::connect(&self.authority)
            .await
            .map_err(WireError::Connect)?;
        let _ = tcp.set_nodelay(true);
        let stamp = Stamp::default();
        let io = TokioIo::new(Stamped {
            inner: tcp,
            stamp: stamp.clone(),
        });
        let (sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(WireError::Http)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok((
            Conn {
                sender,
                stamp,
                idle_since: Instant::now(),
            },
            true,
        ))
    }

    fn checkin(&self, mut conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_keep_what_placement_reads_and_encode_the_rest() {
        let c = Call::get("/allocation_candidates")
            .query("resources", "VCPU:1,MEMORY_MB:512")
            .query("member_of", "in:a b&c");
        assert_eq!(
            c.path,
            "/allocation_candidates?resources=VCPU:1,MEMORY_MB:512&member_of=in:a%20b%26c"
        );
    }

    #[tokio::test]
    async fn a_call_is_split_at_its_first_written_byte() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // A server that says when it has read the request and answers only once the
        // test lets it: the first byte was written before the first, and the wire time
        // holds at least the time between the two.
        let (read_tx, read_rx) = tokio::sync::oneshot::channel::<()>();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await.unwrap();
            read_tx.send(()).unwrap();
            let _ = wait.await;
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 3\r\ncontent-length: 2\r\n\r\n{}")
                .await
                .unwrap();
        });
        let wire = Wire::new(&format!("http://{addr}"), "admin", &[], 4).unwrap();
        let due = Instant::now();
        let call = tokio::spawn(async move { wire.send(due, Call::get("/x")).await });
        read_rx.await.unwrap();
        let read_seen = Instant::now();
        tokio::task::yield_now().await;
        let go_sent = Instant::now();
        go.send(()).unwrap();
        let a = call.await.unwrap().unwrap();
        let total = due.elapsed();
        assert_eq!((a.status, a.retry_after), (503, Some(3)));
        assert_eq!(&a.body[..], b"{}");
        assert!(a.timing.new_connection);
        assert!(due + a.timing.queued <= read_seen, "{:?}", a.timing);
        assert!(a.timing.wire >= go_sent - read_seen, "{:?}", a.timing);
        assert!(a.timing.queued + a.timing.wire <= total, "{:?}", a.timing);
    }
}
