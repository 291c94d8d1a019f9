//! What a client command says when no server answers (issue 31 item 6): the URL it
//! used, where that URL came from (the flag, the environment variable or the default),
//! and whether an `accel serve` runs on this machine at all, so a newcomer's first
//! mistake (no server started, or started on other ports) is answered by the error.

use accel_api::http;

/// One API a command talks to, as its flags name it.
pub struct Api<'a> {
    /// "the accelerator API", "Placement".
    pub what: &'static str,
    /// The URL the command used.
    pub url: &'a str,
    pub flag: &'static str,
    pub env: &'static str,
    pub default: &'static str,
    /// The `accel serve` flag that sets where it listens.
    pub serve_flag: &'static str,
}

/// The accelerator API of `arq`, `device-profile`, `boot` (`--url` there is
/// `--accelerator-url`).
pub fn accelerator<'a>(url: &'a str, flag: &'static str) -> Api<'a> {
    Api {
        what: "the accelerator API",
        url,
        flag,
        env: "ACCEL_URL",
        default: "http://127.0.0.1:6666",
        serve_flag: "--accelerator-listen",
    }
}

/// Placement of `boot`, `explain` and `provider`.
pub fn placement(url: &str) -> Api<'_> {
    Api {
        what: "Placement",
        url,
        flag: "--placement-url",
        env: "ACCEL_PLACEMENT_URL",
        default: "http://127.0.0.1:8778",
        serve_flag: "--placement-listen",
    }
}

/// The lines to print under `e` when it is a server that did not answer; `None` for
/// every other error (the server's own message says enough).
pub fn hint(e: &anyhow::Error, apis: &[Api<'_>]) -> Option<String> {
    let failed = e
        .chain()
        .find_map(|c| match c.downcast_ref::<http::Error>() {
            Some(http::Error::Unreachable { url, .. }) => Some(url.as_str()),
            _ => None,
        })?;
    let api = apis
        .iter()
        .find(|a| failed.starts_with(a.url.trim_end_matches('/')))
        .or(apis.first())?;
    let from = if std::env::var(api.env).is_ok_and(|v| v == api.url) {
        format!("from {}", api.env)
    } else if api.url == api.default {
        format!("the default; set it with {} or {}", api.flag, api.env)
    } else {
        format!("from {}", api.flag)
    };
    let server = if is_local(api.url) {
        match serve_processes().first() {
            Some(pid) => format!(
                "an `accel serve` runs on this machine (pid {pid}) but not at {}: compare its {}",
                api.url, api.serve_flag
            ),
            None => format!(
                "no `accel serve` runs on this machine: start one (`accel serve`), or point {} at the host where it runs",
                api.flag
            ),
        }
    } else {
        format!(
            "is `accel serve` running there, with {} on that address?",
            api.serve_flag
        )
    };
    Some(format!(
        "  {} was looked for at {} ({from})\n  {server}",
        api.what, api.url
    ))
}

/// Whether `url`'s host is this machine.
fn is_local(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1" | "0.0.0.0")
}

/// Process ids of the `accel serve` processes of this machine (Linux's /proc; none
/// elsewhere, and then the hint says none run, which is the likelier case anyway).
fn serve_processes() -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|d| d.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let mut args = cmd.split(|b| *b == 0).map(String::from_utf8_lossy);
            let bin = args.next().unwrap_or_default();
            bin.rsplit('/').next() == Some("accel") && args.next().as_deref() == Some("serve")
        })
        .collect();
    pids.sort_unstable();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable(url: &str) -> anyhow::Error {
        anyhow::Error::new(http::Error::Unreachable {
            url: url.into(),
            cause: "Connection refused (os error 111)".into(),
        })
        .context("device profile lookup")
    }

    #[test]
    fn names_the_api_its_url_and_the_flag_that_sets_it() {
        let p = "http://192.0.2.1:8778";
        let apis = [accelerator("http://192.0.2.1:6666/", "--url"), placement(p)];
        let h = hint(
            &unreachable("http://192.0.2.1:8778/resource_providers"),
            &apis,
        )
        .unwrap();
        assert!(
            h.contains("Placement was looked for at http://192.0.2.1:8778 (from --placement-url)"),
            "{h}"
        );
        assert!(h.contains("--placement-listen"), "{h}");
        let h = hint(&unreachable("http://192.0.2.1:6666/v2/arqs"), &apis).unwrap();
        assert!(h.contains("the accelerator API was looked for"), "{h}");
    }

    #[test]
    fn other_errors_get_no_hint() {
        let e = anyhow::Error::new(http::Error::Status {
            url: "http://x".into(),
            status: 404,
            message: "nope".into(),
            code: None,
        });
        assert!(hint(&e, &[placement("http://x")]).is_none());
    }

    #[test]
    fn local_hosts() {
        assert!(is_local("http://127.0.0.1:6666"));
        assert!(is_local("http://localhost/accelerator"));
        assert!(is_local("http://[::1]:8778"));
        assert!(!is_local("https://cloud.example.org:6666"));
    }
}
