//! The client commands' connection: accel-api's typed accelerator client on the
//! `--url` and `--token`, and the one-line form of its errors.

use super::Connection;
use accel_api::accelerator::Client;
use accel_api::http::{self, Auth, Endpoint, Http, Options};
use anyhow::bail;
use std::time::Duration;

/// The accelerator API at `conn`, asking for [`accel_api::accelerator::DEFAULT_MICROVERSION`]
/// (2.2+ shows profiles by name).
pub fn api(conn: &Connection) -> anyhow::Result<Client> {
    let base = conn.url.trim_end_matches('/');
    if !base.starts_with("http://") && !base.starts_with("https://") {
        bail!("--url must be an http:// or https:// URL, not {base:?}");
    }
    // The catalog's endpoint (`.../accelerator/v2`) works too: the client adds `/v2`.
    let base = base.strip_suffix("/v2").unwrap_or(base);
    let http = Http::new(
        Endpoint::Url(base.to_owned()),
        Auth::Token(conn.token.clone()),
        Options {
            timeout: Some(Duration::from_secs(60)),
            ..Options::default()
        },
    )?;
    Ok(Client::new(http))
}

/// An error as the commands print it: `HTTP <status>: <the server's message> (<url>)`.
pub fn failed(e: http::Error) -> anyhow::Error {
    match e {
        http::Error::Status {
            url,
            status,
            message,
            ..
        } => anyhow::anyhow!("HTTP {status}: {message} ({url})"),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_unwrapped() {
        let e = failed(http::Error::Status {
            url: "http://x/v2/device_profiles/p".into(),
            status: 404,
            message: "Device Profile not found".into(),
            code: None,
        });
        assert_eq!(
            e.to_string(),
            "HTTP 404: Device Profile not found (http://x/v2/device_profiles/p)"
        );
    }
}
