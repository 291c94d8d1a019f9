//! What a new operator meets first (issue 31 items 2, 6 and 7), through the built
//! binary: `accel serve`'s start-up line and `accel_build_info` name the commit
//! `--version` prints; a database that cannot open says whether it was retried and, for
//! SQLite, which directory is missing; a client with no server says which URL it used,
//! what sets it and whether `accel serve` runs; `accel boot` with no candidate names
//! no uuid the user did not give and prints the `accel explain` to run, which runs.

mod common;

use accel_testkit::server::{Backend, TestServer};
use serde_json::{json, Value};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The commit of `accel --version`: `accel 0.1.0 (commit C)`.
async fn version_commit() -> String {
    let v = common::accel(&["--version"], &[]).await;
    assert!(v.ok(), "{}", v.stderr);
    let c = v
        .stdout
        .trim()
        .strip_prefix(concat!("accel ", env!("CARGO_PKG_VERSION"), " (commit "));
    c.and_then(|c| c.strip_suffix(')'))
        .unwrap_or_else(|| panic!("--version: {}", v.stdout))
        .to_owned()
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `accel serve ARGS` with every port 0, its configuration file ignored.
fn serve(args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_accel"));
    c.env_remove("ACCEL_CONFIG")
        .env("ACCEL_LOG", "info")
        .env("RUST_BACKTRACE", "0")
        .args(["serve", "--log-format", "json"])
        .args(["--placement-listen", "127.0.0.1:0"])
        .args(["--accelerator-listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0", "--no-console"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

#[tokio::test]
async fn the_start_up_line_and_build_info_name_the_commit_of_version() {
    let commit = version_commit().await;
    assert_ne!(commit, "unknown");
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("accel.db").display());
    let mut child = serve(&["--database", &db]).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("accel serve ready") {
                return line;
            }
        }
        panic!("accel serve exited before it was ready")
    })
    .await
    .expect("accel serve ready within 60 s");
    let v: Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(v["fields"]["commit"], commit.as_str(), "{ready}");
    let metrics = v["fields"]["metrics"].as_str().unwrap();
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let want = format!(
        "accel_build_info{{version=\"{}\",commit=\"{commit}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&want), "{want} not in\n{text}");
}

#[tokio::test]
async fn a_database_that_cannot_open_says_whether_it_was_retried_and_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    // A SQLite file in a directory that does not exist: the directory is named.
    let gone = dir.path().join("no").join("such");
    let db = format!("sqlite://{}", gone.join("accel.db").display());
    let out = serve(&["--database", &db]).output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("the directory {} does not exist", gone.display())),
        "{err}"
    );
    assert!(!err.contains("retried"), "{err}");
    // A path that is a directory: refused at once, and not said to be retried.
    let db = format!("sqlite://{}", dir.path().display());
    let out = serve(&["--database", &db, "--database-connect-timeout", "30"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("failed at once, not retried"), "{err}");
    assert!(!err.contains("retried for up to"), "{err}");
    // An unreachable server is retried, and says so.
    let db = format!("postgres://postgres@127.0.0.1:{}/accel", free_port());
    let out = serve(&["--database", &db, "--database-connect-timeout", "1"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("retried for up to 1 s"), "{err}");
}

#[tokio::test]
async fn a_client_with_no_server_names_the_url_what_sets_it_and_accel_serve() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let by_env = common::accel(&["arq", "list"], &[("ACCEL_URL", &url)]).await;
    assert_eq!(by_env.code, Some(1));
    let err = &by_env.stderr;
    // Once, not reqwest's three layers.
    assert_eq!(err.matches("error sending request").count(), 0, "{err}");
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "the accelerator API was looked for at {url} (from ACCEL_URL)"
        )),
        "{err}"
    );
    // Whether an `accel serve` runs here depends on what else runs on the machine;
    // either way the line is about it.
    assert!(
        err.contains("no `accel serve` runs on this machine")
            || err.contains("an `accel serve` runs on this machine"),
        "{err}"
    );
    let by_flag = common::accel(&["device-profile", "list", "--url", &url], &[]).await;
    assert!(
        by_flag
            .stderr
            .contains(&format!("looked for at {url} (from --url)")),
        "{}",
        by_flag.stderr
    );
    let explain = common::accel(
        &["explain", "resources=VCPU:1", "--placement-url", &url],
        &[],
    )
    .await;
    assert!(
        explain.stderr.contains(&format!(
            "Placement was looked for at {url} (from --placement-url)"
        )),
        "{}",
        explain.stderr
    );
    assert!(
        explain.stderr.contains("--placement-listen"),
        "{}",
        explain.stderr
    );
}

#[tokio::test]
async fn boot_without_a_candidate_names_no_uuid_and_suggests_the_explain_that_runs() {
    let server = TestServer::spawn(Backend::Sqlite).await;
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/resource_providers", server.placement))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
        .json(&json!({"name": "compute1"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let env = [
        ("ACCEL_PLACEMENT_URL", server.placement.as_str()),
        ("ACCEL_URL", server.accel.as_str()),
    ];
    let dp = common::accel(
        &[
            "device-profile",
            "create",
            "dp1",
            "--group",
            "resources:FPGA=1",
        ],
        &env,
    )
    .await;
    assert!(dp.ok(), "{}", dp.stderr);
    let boot = common::accel(
        &["boot", "--device-profile", "dp1", "--resources", "VCPU=1"],
        &env,
    )
    .await;
    assert_eq!(boot.code, Some(1), "{}", boot.stdout);
    let err = &boot.stderr;
    assert!(err.contains("no allocation candidate"), "{err}");
    // No uuid anywhere: the one generated for the instance was never the user's.
    let uuid_like = err
        .split(|c: char| !c.is_ascii_hexdigit() && c != '-')
        .any(|w| w.len() == 36 && uuid::Uuid::parse_str(w).is_ok());
    assert!(!uuid_like, "{err}");
    let suggested = "accel explain --device-profile dp1 --resources VCPU=1 --group-policy none";
    assert!(err.contains(suggested), "{err}");
    // The suggestion runs as printed and explains compute1.
    let words: Vec<&str> = suggested.split(' ').skip(1).collect();
    let explained = common::accel(&words, &env).await;
    assert!(explained.ok(), "{}", explained.stderr);
    assert!(
        explained.stdout.contains("compute1"),
        "{}",
        explained.stdout
    );
    assert!(
        explained.stdout.contains("does not fit"),
        "{}",
        explained.stdout
    );
    // A uuid the user gave is named.
    let given = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
    let boot = common::accel(
        &["boot", "--device-profile", "dp1", "--instance", given],
        &env,
    )
    .await;
    assert!(
        boot.stderr.contains(&format!("booting instance {given}")),
        "{}",
        boot.stderr
    );
}
