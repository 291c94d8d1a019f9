//! CORS for configured origins, as oslo.middleware's CORS filter behaves for
//! Placement (allowed header `openstack-api-version`, which is also exposed).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode};

const ALLOW_METHODS: &str = "GET, PUT, POST, DELETE, PATCH";
const ALLOW_HEADERS: &str = "openstack-api-version";

/// Answers a CORS preflight (`OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`) when origins are configured.
pub fn preflight(origins: &[String], method: &Method, h: &HeaderMap) -> Option<Response<Body>> {
    if origins.is_empty() || method != Method::OPTIONS {
        return None;
    }
    let origin = h.get("origin")?.to_str().ok()?;
    let req_method = h.get("access-control-request-method")?.to_str().ok()?;
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::OK;
    if !origins.iter().any(|o| o == origin || o == "*") {
        return Some(resp);
    }
    if !ALLOW_METHODS
        .split(", ")
        .any(|m| m.eq_ignore_ascii_case(req_method))
    {
        return Some(resp);
    }
    if let Some(req_headers) = h
        .get("access-control-request-headers")
        .and_then(|v| v.to_str().ok())
    {
        let ok = req_headers
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .all(|s| ALLOW_HEADERS.split(", ").any(|a| a == s) || is_simple_header(&s));
        if !ok {
            return Some(resp);
        }
        if let Ok(v) = HeaderValue::from_str(req_headers) {
            resp.headers_mut().insert("access-control-allow-headers", v);
        }
    }
    let hm = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(origin) {
        hm.insert("access-control-allow-origin", v);
    }
    if let Ok(v) = HeaderValue::from_str(req_method) {
        hm.insert("access-control-allow-methods", v);
    }
    hm.insert("vary", HeaderValue::from_static("Origin"));
    Some(resp)
}

fn is_simple_header(h: &str) -> bool {
    matches!(
        h,
        "cache-control"
            | "content-language"
            | "content-type"
            | "expires"
            | "last-modified"
            | "pragma"
    )
}

/// Adds the actual-request CORS headers for an allowed origin.
pub fn decorate(origins: &[String], origin: Option<&str>, h: &mut HeaderMap) {
    let Some(origin) = origin else { return };
    if origins.is_empty() || !origins.iter().any(|o| o == origin || o == "*") {
        return;
    }
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert("access-control-allow-origin", v);
    }
    h.insert(
        "access-control-expose-headers",
        HeaderValue::from_static("openstack-api-version"),
    );
    h.append("vary", HeaderValue::from_static("Origin"));
}
