//! The one HTTP core under every typed client: where a request goes, which token it
//! carries, the OpenStack headers, one retry with a fresh token after a 401, and the
//! reading of an error body in whichever API's format it came.
//!
//! Typed clients (Placement, accelerator API, agent protocol) are thin layers that
//! build a [`Request`] and decode a [`Reply`]; nothing else in accel sends HTTP by
//! hand.
//!
//! Every call sends `User-Agent: accel/<version>` and an `X-OpenStack-Request-ID` of
//! its own (unless the caller set one), and is logged on the `accel::outgoing` target
//! with that id, its status and duration: answers at `debug` (a client polls, and
//! its callers log what the answers meant), an unreachable service at `warn`.

use accel_keystone::Session;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

pub use reqwest::Method;

/// `User-Agent` of every request accel sends.
pub const USER_AGENT: &str = concat!("accel/", env!("CARGO_PKG_VERSION"));

/// How a client authenticates.
#[derive(Clone)]
pub enum Auth {
    /// A fixed `X-Auth-Token` (noauth's `user[:project[:roles]]`, or a Keystone token
    /// the caller manages).
    Token(String),
    /// A Keystone session: its token, renewed before expiry and after a 401.
    Keystone(Arc<Session>),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Token(_) => f.write_str("Auth::Token(..)"),
            Auth::Keystone(_) => f.write_str("Auth::Keystone(..)"),
        }
    }
}

impl Auth {
    /// The token to send now.
    pub async fn token(&self) -> Result<String, Error> {
        match self {
            Auth::Token(t) => Ok(t.clone()),
            Auth::Keystone(s) => s.token().await.map_err(Error::Keystone),
        }
    }
}

/// Where requests go.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A fixed base URL (no trailing slash needed).
    Url(String),
    /// The Keystone catalog's endpoint of this service type (needs [`Auth::Keystone`]).
    Catalog(&'static str),
}

/// Why a request got no answer worth reading.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No answer: `cause` is the innermost error ("Connection refused (os error 111)"),
    /// not a chained source, so `{:#}` says it once instead of reqwest's three layers.
    #[error("cannot reach {url}: {cause}")]
    Unreachable { url: String, cause: String },
    #[error("Keystone: {0}")]
    Keystone(String),
    #[error("{0}")]
    Config(String),
    /// A 2xx answer whose body is not the expected document.
    #[error("{url}: unexpected reply: {detail}")]
    Decode { url: String, detail: String },
    /// The server answered with an error status.
    #[error("HTTP {status} from {url}: {message}")]
    Status {
        url: String,
        status: u16,
        /// The explanation inside the API's error body (or the raw body).
        message: String,
        /// Placement's error `code` (1.23+), or the agent protocol's beside Cyborg's
        /// envelope, when there is one.
        code: Option<String>,
    },
}

/// The innermost error of `e`'s chain: reqwest wraps the socket's error in two
/// layers that each repeat the URL.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    inner.to_string()
}

impl Error {
    /// The HTTP status of an error answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// One request, before authentication.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    /// Path under the endpoint, starting with `/`.
    pub path: String,
    pub query: Vec<(String, String)>,
    /// `OpenStack-API-Version`, e.g. `placement 1.39` or `accelerator 2.3`.
    pub microversion: Option<String>,
    pub headers: Vec<(&'static str, String)>,
    pub body: Option<Value>,
}

impl Request {
    pub fn new(method: Method, path: impl Into<String>) -> Request {
        Request {
            method,
            path: path.into(),
            query: Vec::new(),
            microversion: None,
            headers: Vec::new(),
            body: None,
        }
    }

    pub fn get(path: impl Into<String>) -> Request {
        Request::new(Method::GET, path)
    }

    pub fn query(mut self, key: &str, value: impl Into<String>) -> Request {
        self.query.push((key.to_owned(), value.into()));
        self
    }

    pub fn microversion(mut self, header: impl Into<String>) -> Request {
        self.microversion = Some(header.into());
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Request {
        self.headers.push((name, value.into()));
        self
    }

    /// A JSON body, from any serialisable type.
    pub fn json(mut self, body: &impl Serialize) -> Request {
        self.body = Some(serde_json::to_value(body).unwrap_or(Value::Null));
        self
    }
}

/// An answer: status, headers and body text.
#[derive(Debug, Clone)]
pub struct Reply {
    pub url: String,
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as `T`; an empty body reads as JSON `null`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let text = if self.text.trim().is_empty() {
            "null"
        } else {
            &self.text
        };
        serde_json::from_str(text).map_err(|e| Error::Decode {
            url: self.url.clone(),
            detail: e.to_string(),
        })
    }

    /// `Ok(self)` for a 2xx answer, else [`Error::Status`] with the body's message.
    pub fn success(self) -> Result<Reply, Error> {
        if self.is_success() {
            return Ok(self);
        }
        let (message, code) = error_message(&self.text);
        Err(Error::Status {
            url: self.url,
            status: self.status,
            message,
            code,
        })
    }
}

/// The explanation inside an error body, in any of the formats accel's peers use:
/// Cyborg's `error_message` envelope (a JSON string holding WSME's fault),
/// keystonemiddleware's `{"error": {"message"}}`, Placement's `{"errors": [{detail,
/// code}]}`; otherwise the trimmed text. The second value is Placement's `code`.
pub fn error_message(text: &str) -> (String, Option<String>) {
    let parsed: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    if let Some(inner) = parsed.get("error_message").and_then(Value::as_str) {
        let fault: Value = serde_json::from_str(inner).unwrap_or(Value::Null);
        let message = fault
            .get("faultstring")
            .and_then(Value::as_str)
            .unwrap_or(inner);
        // accel's agent endpoints add a code beside the envelope.
        let code = parsed
            .get("code")
            .and_then(Value::as_str)
            .map(str::to_owned);
        return (message.to_owned(), code);
    }
    if let Some(m) = parsed
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
    {
        return (m.to_owned(), None);
    }
    if let Some(first) = parsed
        .get("errors")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        let detail = first
            .get("detail")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let code = first.get("code").and_then(Value::as_str).map(str::to_owned);
        return (detail.to_owned(), code);
    }
    (text.trim().to_owned(), None)
}

/// The HTTP core: one `reqwest::Client`, an endpoint and an authentication.
#[derive(Clone, Debug)]
pub struct Http {
    client: reqwest::Client,
    endpoint: Endpoint,
    auth: Auth,
    /// Sent with every request (before each request's own).
    headers: Vec<(&'static str, String)>,
}

/// Options of [`Http::new`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Whole-request timeout (none by default: long polls set their own).
    pub timeout: Option<Duration>,
    pub connect_timeout: Option<Duration>,
    /// Idle connections kept per host (reqwest's default when `None`); a load
    /// generator keeps one per concurrent client.
    pub pool_max_idle_per_host: Option<usize>,
    /// Headers of every request, e.g. the identity headers keystonemiddleware would
    /// set, for a service run without it.
    pub headers: Vec<(&'static str, String)>,
}

impl Http {
    pub fn new(endpoint: Endpoint, auth: Auth, options: Options) -> Result<Http, Error> {
        if let (Endpoint::Catalog(kind), Auth::Token(_)) = (&endpoint, &auth) {
            return Err(Error::Config(format!(
                "the {kind} endpoint comes from a Keystone catalog, which needs Keystone credentials"
            )));
        }
        if let Endpoint::Url(u) = &endpoint {
            if !u.starts_with("http://") && !u.starts_with("https://") {
                return Err(Error::Config(format!(
                    "{u:?} is not an http:// or https:// URL"
                )));
            }
        }
        let mut b = reqwest::Client::builder().user_agent(USER_AGENT);
        if let Some(t) = options.timeout {
            b = b.timeout(t);
        }
        if let Some(t) = options.connect_timeout {
            b = b.connect_timeout(t);
        }
        if let Some(n) = options.pool_max_idle_per_host {
            b = b.pool_max_idle_per_host(n);
        }
        let client = b.build().map_err(|e| Error::Config(e.to_string()))?;
        Ok(Http {
            client,
            endpoint,
            auth,
            headers: options.headers,
        })
    }

    /// A client on a fixed URL with a fixed token.
    pub fn with_token(url: &str, token: &str) -> Result<Http, Error> {
        Http::new(
            Endpoint::Url(url.to_owned()),
            Auth::Token(token.to_owned()),
            Options::default(),
        )
    }

    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// The base URL requests go to now (the catalog's, looked up once known).
    pub async fn base(&self) -> Result<String, Error> {
        let base = match (&self.endpoint, &self.auth) {
            (Endpoint::Url(u), _) => u.clone(),
            (Endpoint::Catalog(kind), Auth::Keystone(s)) => {
                s.endpoint(kind).await.map_err(Error::Keystone)?
            }
            (Endpoint::Catalog(kind), Auth::Token(_)) => {
                return Err(Error::Config(format!("no catalog to find {kind} in")))
            }
        };
        Ok(base.trim_end_matches('/').to_owned())
    }

    /// Sends `req`; any status is a [`Reply`], only a missing answer is an error.
    /// With a Keystone session a 401 drops the token and the request goes once more.
    pub async fn send(&self, req: &Request) -> Result<Reply, Error> {
        let mut retried = false;
        loop {
            let base = self.base().await?;
            let url = format!("{base}{}", req.path);
            let token = self.auth.token().await?;
            let given = self
                .headers
                .iter()
                .chain(&req.headers)
                .find(|(k, _)| k.eq_ignore_ascii_case("x-openstack-request-id"))
                .map(|(_, v)| v.clone());
            let request_id = given.clone().unwrap_or_else(accel_keystone::request_id);
            let mut b = self
                .client
                .request(req.method.clone(), &url)
                .header("x-auth-token", &token)
                .header("accept", "application/json");
            if given.is_none() {
                b = b.header("x-openstack-request-id", &request_id);
            }
            if !req.query.is_empty() {
                b = b.query(&req.query);
            }
            if let Some(mv) = &req.microversion {
                b = b.header("openstack-api-version", mv);
            }
            for (k, v) in self.headers.iter().chain(&req.headers) {
                b = b.header(*k, v);
            }
            if let Some(body) = &req.body {
                b = b.json(body);
            }
            let started = std::time::Instant::now();
            let resp = b.send().await.map_err(|source| {
                tracing::warn!(target: "accel::outgoing", method = %req.method, url = %url, request_id = %request_id, error = %source, "outgoing call failed");
                Error::Unreachable {
                    url: url.clone(),
                    cause: root_cause(&source),
                }
            })?;
            let status = resp.status().as_u16();
            tracing::debug!(target: "accel::outgoing", method = %req.method, url = %url, status, request_id = %request_id, duration_ms = started.elapsed().as_millis() as u64, "outgoing call");
            if let (401, false, Auth::Keystone(s)) = (status, retried, &self.auth) {
                s.invalidate(&token).await;
                retried = true;
                continue;
            }
            let headers = resp.headers().clone();
            let text = resp.text().await.map_err(|source| Error::Unreachable {
                url: url.clone(),
                cause: root_cause(&source),
            })?;
            return Ok(Reply {
                url,
                status,
                headers,
                text,
            });
        }
    }

    /// Sends `req` and decodes a 2xx body as `T`; other statuses are [`Error::Status`].
    pub async fn call<T: DeserializeOwned>(&self, req: &Request) -> Result<T, Error> {
        self.send(req).await?.success()?.json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_of_every_api() {
        let cyborg = r#"{"error_message": "{\"faultcode\": \"Client\", \"faultstring\": \"Device Profile not found\", \"debuginfo\": null}"}"#;
        assert_eq!(error_message(cyborg).0, "Device Profile not found");
        let ksm = r#"{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}"#;
        assert_eq!(
            error_message(ksm).0,
            "The request you have made requires authentication."
        );
        let placement = r#"{"errors": [{"status": 409, "title": "Conflict", "detail": "generation mismatch", "code": "placement.concurrent_update", "request_id": "req-1"}]}"#;
        assert_eq!(
            error_message(placement),
            (
                "generation mismatch".to_owned(),
                Some("placement.concurrent_update".to_owned())
            )
        );
        assert_eq!(error_message(r#"{"error_message": "null"}"#).0, "null");
        assert_eq!(error_message("plain words\n").0, "plain words");
    }

    #[test]
    fn catalog_endpoint_needs_keystone() {
        let e = Http::new(
            Endpoint::Catalog("placement"),
            Auth::Token("admin".into()),
            Options::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("Keystone credentials"), "{e}");
        let e = Http::with_token("ftp://x", "admin").unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
    }
}
