//! What a handler receives ([`Req`]) and returns ([`Reply`]).

use super::error::{ApiError, ApiResult};
use super::microversion::Version;
use crate::auth::Credentials;
use crate::jsonschema;
use accel_api::placement::mv;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use serde_json::Value;

/// One parsed request.
pub struct Req {
    pub method: Method,
    /// Query pairs in order, decoded.
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub version: Version,
    pub creds: Credentials,
    /// Path parameters in route order (`{uuid}`, `{name}`, ...).
    pub params: Vec<String>,
    pub request_id: String,
}

impl Req {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        method: Method,
        query: &str,
        headers: HeaderMap,
        body: Bytes,
        version: Version,
        creds: Credentials,
        params: Vec<String>,
        request_id: String,
    ) -> Self {
        let query = form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Req {
            method,
            query,
            headers,
            body,
            version,
            creds,
            params,
            request_id,
        }
    }

    pub fn param(&self, i: usize) -> &str {
        self.params.get(i).map(String::as_str).unwrap_or("")
    }

    /// The request's microversion is `v` or newer (`req.mv(mv::TRAITS)`).
    pub fn mv(&self, v: Version) -> bool {
        self.version.at_least(v)
    }

    /// The last value of each query key, as upstream's `dict(req.GET)` sees them.
    pub fn query_dict(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        for (k, v) in &self.query {
            m.insert(k.clone(), Value::String(v.clone()));
        }
        m
    }

    /// Every value given for `key`, in order.
    pub fn query_all(&self, key: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The last value given for `key`.
    pub fn query_last(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Validates the query string against a JSON schema, as upstream does.
    pub fn validate_query(&self, schema: &Value) -> ApiResult<()> {
        jsonschema::validate(&Value::Object(self.query_dict()), schema)
            .map_err(|e| ApiError::bad_request(format!("Invalid query string parameters: {e}")))
    }

    /// Parses the body as JSON and validates it against `schema`.
    pub fn json(&self, schema: &Value) -> ApiResult<Value> {
        let v: Value = serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::bad_request(format!("Malformed JSON: {e}")))?;
        jsonschema::validate(&v, schema)
            .map_err(|e| ApiError::bad_request(format!("JSON does not validate: {e}")))?;
        Ok(v)
    }

    /// The body as the DTO `T`, after the JSON-schema check: the schema's errors are
    /// upstream's words, so it runs first and `T` only reads what it admitted.
    pub fn body<T: serde::de::DeserializeOwned>(&self, schema: &Value) -> ApiResult<T> {
        let v = self.json(schema)?;
        serde_json::from_value(v)
            .map_err(|e| ApiError::bad_request(format!("JSON does not validate: {e}")))
    }
}

/// Whether the `Accept` header (if any) admits `application/json`.
pub fn accepts_json(headers: &HeaderMap) -> bool {
    let values: Vec<&str> = headers
        .get_all("accept")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if values.is_empty() {
        return true;
    }
    let joined = values.join(",");
    if joined.trim().is_empty() {
        return true;
    }
    joined.split(',').any(|range| {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q_zero = parts.any(|p| {
            let p = p.trim();
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        !q_zero && matches!(media.as_str(), "*/*" | "application/*" | "application/json")
    })
}

/// The media type of the request body, without parameters (webob's `content_type`).
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// A successful answer. Its body is already JSON bytes: an `accel_api::placement`
/// response type, or the hand-written writers of the large listings.
pub struct Reply {
    pub status: StatusCode,
    pub raw: Option<Vec<u8>>,
    pub headers: Vec<(&'static str, String)>,
    /// Seconds since the epoch; rendered as `last-modified` (with `cache-control:
    /// no-cache`) from 1.15.
    pub last_modified: Option<i64>,
    /// `cache-control: no-cache` from 1.15 even without `last_modified`.
    pub no_cache: bool,
}

impl Reply {
    /// A 200 whose body is the typed `view` (an `accel_api::placement` response).
    pub fn typed(view: &impl serde::Serialize) -> ApiResult<Self> {
        Self::serialized(view).map_err(|e| ApiError::internal(e.to_string()))
    }
    /// A 200 whose body is `view` serialised directly.
    pub fn serialized(view: &impl serde::Serialize) -> Result<Self, serde_json::Error> {
        let mut r = Self::status(StatusCode::OK);
        r.raw = Some(serde_json::to_vec(view)?);
        Ok(r)
    }
    pub fn status(status: StatusCode) -> Self {
        Reply {
            status,
            raw: None,
            headers: Vec::new(),
            last_modified: None,
            no_cache: false,
        }
    }
    pub fn no_content() -> Self {
        Self::status(StatusCode::NO_CONTENT)
    }
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }
    pub fn header(mut self, k: &'static str, v: impl Into<String>) -> Self {
        self.headers.push((k, v.into()));
        self
    }
    pub fn modified(mut self, at: i64) -> Self {
        self.last_modified = Some(at);
        self
    }
    /// `last-modified` when there is a time to report; upstream sends only
    /// `cache-control` when there is none (a provider without inventories).
    pub fn modified_if(mut self, at: Option<i64>) -> Self {
        self.last_modified = at;
        self.no_cache = true;
        self
    }
    /// Composite views (candidates, usages, root) are "modified now".
    pub fn modified_now(self) -> Self {
        self.modified(accel_store::now())
    }

    pub fn into_response(self, version: Version) -> Response<Body> {
        let mut resp = match self.raw {
            Some(raw) => {
                let mut r = Response::new(Body::from(raw));
                *r.status_mut() = self.status;
                r.headers_mut()
                    .insert("content-type", HeaderValue::from_static("application/json"));
                r
            }
            None => {
                let mut r = Response::new(Body::empty());
                *r.status_mut() = self.status;
                r
            }
        };
        let h = resp.headers_mut();
        for (k, v) in &self.headers {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.insert(*k, v);
            }
        }
        if version.at_least(mv::LAST_MODIFIED) {
            if let Some(at) = self.last_modified {
                let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(at.max(0) as u64);
                if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(t)) {
                    h.insert("last-modified", v);
                }
            }
            if self.last_modified.is_some() || self.no_cache {
                h.insert("cache-control", HeaderValue::from_static("no-cache"));
            }
        }
        resp
    }
}
