//! Building an HTTP answer's bytes, for both APIs and the console: a JSON body with its
//! content type. Each API's error module decides what the body says; this only frames
//! it, so neither API imports the other to answer.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode};

/// `body` as `application/json` with `status`.
pub(crate) fn json(status: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// `resp` with `WWW-Authenticate: value` (keystonemiddleware's `Keystone uri="..."`).
pub(crate) fn with_www_authenticate(mut resp: Response<Body>, value: &str) -> Response<Body> {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert("www-authenticate", v);
    }
    resp
}
