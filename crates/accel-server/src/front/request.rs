//! What the front door hands a handler ([`Request`]) and takes back ([`Reply`]), the
//! same shapes for both APIs; what an API adds to them (its version, its context, its
//! body readers) is an `impl Request<ThatApi>` in that API's module.

use super::Api;
use crate::auth::Credentials;
use axum::body::{Body, Bytes};
use axum::http::{request::Parts, HeaderMap, HeaderValue, Method, Response, StatusCode};

/// The request as it arrived, with the id the front door gave it: what the hooks
/// that run before the context exists see.
pub struct Head {
    pub request_id: String,
    pub parts: Parts,
}

impl Head {
    /// The value of header `name`, when it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.parts.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// One authenticated, versioned request whose body was read within the limits.
pub struct Request<A: Api> {
    pub method: Method,
    pub request_id: String,
    pub creds: Credentials,
    pub version: A::Version,
    /// Query pairs in order, decoded.
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Path parameters in route order (`{uuid}`, `{name}`, ...).
    pub params: Vec<String>,
    /// What the API adds ([`Api::local`]).
    pub local: A::Local,
}

/// A query string's pairs, decoded, in order.
pub(crate) fn query_pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

impl<A: Api> Request<A> {
    /// Path parameter `i` (empty when the route has fewer).
    pub fn param(&self, i: usize) -> &str {
        self.params.get(i).map(String::as_str).unwrap_or("")
    }

    /// Every value given for query key `key`, in order.
    pub fn query_all(&self, key: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The last value given for query key `key`.
    pub fn query_last(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A successful answer. Its body is already JSON bytes: a wire type of `accel_api`, or
/// the hand-written writers of the large listings.
pub struct Reply {
    pub status: StatusCode,
    pub raw: Option<Vec<u8>>,
    pub headers: Vec<(&'static str, String)>,
    /// Seconds since the epoch; rendered as `last-modified` (with `cache-control:
    /// no-cache`) where the API's version asks for cache headers (Placement 1.15).
    pub last_modified: Option<i64>,
    /// `cache-control: no-cache` with cache headers even without `last_modified`.
    pub no_cache: bool,
}

impl Reply {
    /// A 200 whose body is the typed `view` (an `accel_api` response).
    pub fn typed(view: &impl serde::Serialize) -> Result<Self, serde_json::Error> {
        Ok(Self::status(StatusCode::OK).body(serde_json::to_vec(view)?))
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
    /// `raw` (JSON) as the body.
    pub fn body(mut self, raw: Vec<u8>) -> Self {
        self.raw = Some(raw);
        self
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
    /// `last-modified` when there is a time to report; upstream Placement sends only
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

    /// The answer: a JSON body with its content type, the reply's headers and, when
    /// `cache_headers`, `last-modified` and `cache-control`.
    pub fn into_response(self, cache_headers: bool) -> Response<Body> {
        let mut resp = match self.raw {
            Some(raw) => {
                let mut r = Response::new(Body::from(raw));
                r.headers_mut()
                    .insert("content-type", HeaderValue::from_static("application/json"));
                r
            }
            None => Response::new(Body::empty()),
        };
        *resp.status_mut() = self.status;
        let h = resp.headers_mut();
        for (k, v) in &self.headers {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.insert(*k, v);
            }
        }
        if cache_headers {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pairs_are_decoded_in_order() {
        let pairs = query_pairs("a=1&b=x%20y&a=2+3");
        let want = [("a", "1"), ("b", "x y"), ("a", "2 3")];
        let got: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn cache_headers_only_where_the_api_asks_for_them() {
        let reply = || Reply::typed(&serde_json::json!({})).unwrap().modified(0);
        let plain = reply().into_response(false);
        assert_eq!(plain.headers()["content-type"], "application/json");
        assert!(plain.headers().get("last-modified").is_none());
        assert!(plain.headers().get("cache-control").is_none());
        let cached = reply().into_response(true);
        assert_eq!(
            cached.headers()["last-modified"],
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
        assert_eq!(cached.headers()["cache-control"], "no-cache");
        let unknown = Reply::no_content().modified_if(None).into_response(true);
        assert_eq!(unknown.status(), StatusCode::NO_CONTENT);
        assert!(unknown.headers().get("content-type").is_none());
        assert!(unknown.headers().get("last-modified").is_none());
        assert_eq!(unknown.headers()["cache-control"], "no-cache");
    }
}
