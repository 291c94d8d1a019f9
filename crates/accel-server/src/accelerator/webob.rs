//! The answers upstream gives outside WSME, and the media types it reads and writes.
//!
//! Cyborg's errors come from two places. A handler's refusal is a WSME fault
//! ([`super::error`]) and carries the version headers. Pecan's routing (404, 405), its
//! `Accept` check (406) and the microversion check (406) raise webob exceptions instead:
//! their page is chosen by the request's `Accept` (HTML for `*/*`, `text/html` or none;
//! pecan's JSON `{"code", "title", "description"}` for `application/json`; plain text
//! otherwise), wrapped as text by Cyborg's `ParsableErrorMiddleware` in `error_message`,
//! and sent with none of the version headers. Clients show these texts, so they are
//! rendered byte for byte here (docs/cyborg-compat.md; `scripts/cyborg-diff.sh` compares
//! them).
//!
//! Request bodies go through WSME's media-type switch before any handler runs: JSON
//! types are read, a form body becomes query arguments (so a JSON text sent as a form is
//! an unknown argument), anything else is `415 Unknown mimetype`.

use super::pyjson::py_string;
use crate::front::Head;
use axum::http::{HeaderMap, Method, StatusCode};

/// Media types WSME reads as JSON.
const JSON_TYPES: &[&str] = &[
    "application/json",
    "text/javascript",
    "application/javascript",
];

/// A webob page: its status and what it says beyond the status' standard words.
#[derive(Debug, Clone)]
pub enum Page {
    NotFound,
    MethodNotAllowed {
        method: String,
    },
    /// The `Accept` check or the version check; `detail` is the version check's message.
    NotAcceptable {
        detail: String,
    },
}

impl Page {
    pub fn status(&self) -> StatusCode {
        match self {
            Page::NotFound => StatusCode::NOT_FOUND,
            Page::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Page::NotAcceptable { .. } => StatusCode::NOT_ACCEPTABLE,
        }
    }

    /// The text Cyborg puts in `error_message`, in the format `Accept` chooses.
    pub fn render(&self, headers: &HeaderMap) -> String {
        let accept = header(headers, "accept");
        let status = self.status();
        let title = status.canonical_reason().unwrap_or("");
        let head = format!("{} {title}", status.as_u16());
        let shown = accept.unwrap_or("*/*");
        let detail = match self {
            Page::NotAcceptable { detail } => detail.as_str(),
            _ => "",
        };
        match choose(accept) {
            Format::Json => format!(
                "{{\"code\": {}, \"title\": {}, \"description\": {}}}",
                status.as_u16(),
                py_string(title),
                py_string(detail)
            ),
            Format::Html => {
                let body = match self {
                    Page::NotFound => "The resource could not be found.<br /><br />\n\n\n".into(),
                    Page::MethodNotAllowed { method } => format!(
                        "The method {method} is not allowed for this resource. <br /><br />\n"
                    ),
                    Page::NotAcceptable { detail } => format!(
                        "The resource could not be generated that was acceptable to your browser\n(content of type {shown}. <br /><br />\n{detail}"
                    ),
                };
                format!(
                    "<html>\n <head>\n  <title>{head}</title>\n </head>\n <body>\n  <h1>{head}</h1>\n  {body}\n </body>\n</html>"
                )
            }
            Format::Plain => {
                let body = match self {
                    Page::NotFound => "The resource could not be found. \n\n ".into(),
                    Page::MethodNotAllowed { method } => {
                        format!("The method {method} is not allowed for this resource. \n\n ")
                    }
                    Page::NotAcceptable { detail } => format!(
                        "The resource could not be generated that was acceptable to your browser (content of type {shown}. \n\n {detail}"
                    ),
                };
                format!("{head}\n\n{body}")
            }
        }
    }
}

enum Format {
    Html,
    Json,
    Plain,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// One media range of an `Accept` header and its quality.
fn ranges(accept: &str) -> impl Iterator<Item = (String, f32)> + '_ {
    accept.split(',').filter_map(|part| {
        let mut it = part.split(';');
        let range = it.next()?.trim().to_ascii_lowercase();
        if range.is_empty() {
            return None;
        }
        let q = it
            .filter_map(|p| p.trim().strip_prefix("q=").map(str::trim))
            .find_map(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        Some((range, q))
    })
}

/// The quality `accept` gives `offer` (the most specific matching range's).
fn quality(accept: &str, offer: &str) -> f32 {
    let (kind, _) = offer.split_once('/').unwrap_or((offer, ""));
    let mut best: Option<(u8, f32)> = None;
    for (range, q) in ranges(accept) {
        let specificity = if range == offer {
            2
        } else if range == format!("{kind}/*") {
            1
        } else if range == "*/*" {
            0
        } else {
            continue;
        };
        if best.is_none_or(|(s, _)| specificity > s) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0.0, |(_, q)| q)
}

/// webob's choice between its HTML and JSON pages (the first acceptable, by quality).
fn choose(accept: Option<&str>) -> Format {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Format::Html;
    };
    let (html, json) = (
        quality(accept, "text/html"),
        quality(accept, "application/json"),
    );
    match (html > 0.0, json > 0.0) {
        (true, true) if json > html => Format::Json,
        (true, _) => Format::Html,
        (false, true) => Format::Json,
        (false, false) => Format::Plain,
    }
}

/// What the checks before a handler refuse (the error module words and renders it).
#[derive(Debug)]
pub enum Refusal {
    /// A webob page (406 for an `Accept` without JSON).
    Page(Page),
    /// A form body: its first name, which no handler takes (400).
    UnknownArgument(String),
    /// Any other body type, none included (415).
    UnknownMimetype(String),
}

/// Pecan's `Accept` check: the v2 controllers render only JSON.
pub fn acceptable(head: &Head) -> Result<(), Refusal> {
    match header(&head.parts.headers, "accept") {
        Some(a) if !a.trim().is_empty() && quality(a, "application/json") <= 0.0 => {
            Err(Refusal::Page(Page::NotAcceptable {
                detail: String::new(),
            }))
        }
        _ => Ok(()),
    }
}

/// WSME's media-type switch over a non-empty body: JSON types pass, a form is an
/// unknown argument, any other type (none included) is a 415.
pub fn body_media_type(method: &Method, headers: &HeaderMap, body: &[u8]) -> Result<(), Refusal> {
    if body.is_empty() {
        return Ok(());
    }
    let given = header(headers, "content-type");
    let mime = given
        .map(|c| c.split(';').next().unwrap_or("").trim())
        .unwrap_or("");
    if JSON_TYPES.contains(&mime) {
        return Ok(());
    }
    // webob reads a POST or PUT body without a type as a form too.
    let form_method = *method == Method::POST || *method == Method::PUT;
    if mime == "application/x-www-form-urlencoded" || (given.is_none() && form_method) {
        // Pecan reads the form into the arguments: its first name is one the handler
        // does not take.
        let name = form_urlencoded::parse(body)
            .map(|(k, _)| k.into_owned())
            .next()
            .unwrap_or_default();
        return Err(Refusal::UnknownArgument(name));
    }
    Err(Refusal::UnknownMimetype(mime.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accept(a: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("accept", HeaderValue::from_str(a).unwrap());
        h
    }

    #[test]
    fn pages_follow_accept_as_upstream_renders_them() {
        let p = Page::MethodNotAllowed {
            method: "PUT".into(),
        };
        assert_eq!(
            p.render(&accept("*/*")),
            "<html>\n <head>\n  <title>405 Method Not Allowed</title>\n </head>\n <body>\n  <h1>405 Method Not Allowed</h1>\n  The method PUT is not allowed for this resource. <br /><br />\n\n </body>\n</html>"
        );
        assert_eq!(
            p.render(&accept("application/json")),
            "{\"code\": 405, \"title\": \"Method Not Allowed\", \"description\": \"\"}"
        );
        assert_eq!(
            p.render(&accept("text/plain")),
            "405 Method Not Allowed\n\nThe method PUT is not allowed for this resource. \n\n "
        );
        let v = Page::NotAcceptable {
            detail: "Invalid value for OpenStack-API-Version header".into(),
        };
        assert_eq!(
            v.render(&accept("application/xml")),
            "406 Not Acceptable\n\nThe resource could not be generated that was acceptable to your browser (content of type application/xml. \n\n Invalid value for OpenStack-API-Version header"
        );
        assert!(Page::NotFound
            .render(&HeaderMap::new())
            .contains("The resource could not be found.<br /><br />\n\n\n\n </body>"));
    }

    #[test]
    fn json_must_be_acceptable() {
        for ok in [
            "*/*",
            "application/json",
            "application/*",
            "text/html, application/json;q=0.5",
        ] {
            assert!(quality(ok, "application/json") > 0.0, "{ok}");
        }
        for refused in [
            "text/html",
            "application/xml",
            "text/plain",
            "application/json;q=0",
        ] {
            assert!(quality(refused, "application/json") <= 0.0, "{refused}");
        }
    }

    #[test]
    fn bodies_by_media_type() {
        let with = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert("content-type", HeaderValue::from_str(ct).unwrap());
            h
        };
        let post = Method::POST;
        assert!(body_media_type(&post, &with("application/json; charset=utf-8"), b"{}").is_ok());
        assert!(body_media_type(&post, &with("text/plain"), b"").is_ok());
        let mime = |r: Result<(), Refusal>| match r {
            Err(Refusal::UnknownMimetype(m)) => Some(m),
            _ => None,
        };
        let argument = |r: Result<(), Refusal>| match r {
            Err(Refusal::UnknownArgument(a)) => Some(a),
            _ => None,
        };
        let e = body_media_type(&post, &with("text/plain"), b"{}");
        assert_eq!(mime(e).as_deref(), Some("text/plain"));
        let e = body_media_type(&Method::PATCH, &HeaderMap::new(), b"{}");
        assert_eq!(mime(e).as_deref(), Some(""));
        let e = body_media_type(&post, &HeaderMap::new(), b"{}");
        assert_eq!(argument(e).as_deref(), Some("{}"));
        let form = with("application/x-www-form-urlencoded");
        let e = body_media_type(&post, &form, b"{\"a\": 1}");
        assert_eq!(argument(e).as_deref(), Some("{\"a\": 1}"));
    }
}
