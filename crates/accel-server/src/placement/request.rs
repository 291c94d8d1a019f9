//! What a Placement handler receives ([`Req`], the front door's request at a Placement
//! microversion) beyond the shared context: the version test, and the query and body
//! readers that word their refusals as upstream's schema checks do.

use super::error::{ApiError, ApiResult};
use super::microversion::Version;
use super::Placement;
use crate::auth::Credentials;
use crate::front::{query_pairs, Request};
use crate::jsonschema;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method};
use serde_json::Value;

/// One Placement request, as the front door built it.
pub type Req = Request<Placement>;

impl Req {
    /// A request carrying only `query`, read at `version`: how the console asks a
    /// question in a query string exactly as a Placement handler would read it.
    pub fn from_query(query: &str, version: Version) -> Self {
        Request {
            method: Method::GET,
            request_id: String::new(),
            creds: Credentials::anonymous(),
            version,
            query: query_pairs(query),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            params: Vec::new(),
            local: (),
        }
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
