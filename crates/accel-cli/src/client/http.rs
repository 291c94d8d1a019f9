//! The HTTP side of the client commands: one request helper that adds the token and
//! microversion headers and turns an error reply into the server's own message.

use super::Connection;
use anyhow::{bail, Context};
use reqwest::Method;
use serde_json::Value;

/// The microversion the commands speak (2.2+ shows profiles by name).
const MICROVERSION: &str = "accelerator 2.3";

/// A connection to the accelerator API.
pub struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// Extra headers of one request (the service token of a bind).
#[derive(Default)]
pub struct Extra<'a> {
    pub service_token: Option<&'a str>,
}

impl Api {
    pub fn new(conn: &Connection) -> anyhow::Result<Api> {
        let base = conn.url.trim_end_matches('/');
        if !base.starts_with("http://") && !base.starts_with("https://") {
            bail!("--url must be an http:// or https:// URL, not {base:?}");
        }
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?;
        Ok(Api {
            base: format!("{base}/v2"),
            token: conn.token.clone(),
            http,
        })
    }

    /// Sends a request to `path` (under `/v2`) and returns the JSON reply (`Null` for
    /// an empty body), or the server's error message.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
        extra: Extra<'_>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method.clone(), &url)
            .header("x-auth-token", &self.token)
            .header("openstack-api-version", MICROVERSION)
            .header("accept", "application/json");
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(st) = extra.service_token {
            // Keystone mode validates the token; noauth mode trusts X-Service-Roles
            // as it trusts X-Roles (docs/cyborg-compat.md).
            req = req
                .header("x-service-token", st)
                .header("x-service-roles", "service");
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = resp.status();
        let text = resp.text().await.context("reading the reply")?;
        if !status.is_success() {
            bail!("{} ({method} {url})", error_message(status, &text));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).with_context(|| format!("{method} {url}: reply is not JSON"))
    }
}

/// The message inside Cyborg's `error_message` envelope (a JSON string holding WSME's
/// fault), keystonemiddleware's `{"error": {"message"}}`, or the raw text.
fn error_message(status: reqwest::StatusCode, text: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let message = parsed.as_ref().and_then(|v| {
        if let Some(inner) = v.get("error_message").and_then(Value::as_str) {
            let fault: Option<Value> = serde_json::from_str(inner).ok();
            return Some(
                fault
                    .as_ref()
                    .and_then(|f| f.get("faultstring"))
                    .and_then(Value::as_str)
                    .unwrap_or(inner)
                    .to_owned(),
            );
        }
        v.get("error")
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let message = message.unwrap_or_else(|| text.trim().to_owned());
    format!("HTTP {}: {message}", status.as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_unwrapped() {
        let s = reqwest::StatusCode::NOT_FOUND;
        let cyborg = r#"{"error_message": "{\"faultcode\": \"Client\", \"faultstring\": \"Device Profile not found\", \"debuginfo\": null}"}"#;
        assert_eq!(
            error_message(s, cyborg),
            "HTTP 404: Device Profile not found"
        );
        let ksm = r#"{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}"#;
        assert_eq!(
            error_message(reqwest::StatusCode::UNAUTHORIZED, ksm),
            "HTTP 401: The request you have made requires authentication."
        );
        assert_eq!(
            error_message(reqwest::StatusCode::LOCKED, r#"{"error_message": "null"}"#),
            "HTTP 423: null"
        );
        assert_eq!(error_message(s, "plain words\n"), "HTTP 404: plain words");
    }
}
