//! `accel serve` as a process under failure: noauth refused on a public address, an
//! unreachable database at start-up, shutdown against a client that never finishes its
//! request (and a second signal), a `kill -9` in the middle of a bind, and a
//! PostgreSQL server stopped and started again under write load, and a `kill -9` in the
//! middle of a device cleaning.
//!
//! Each test runs the built binary with `--log-format json` and reads its addresses
//! from the "accel serve ready" line, so nothing here picks a port for the server.

mod common;

use accel_store::accelerator::{binds, heartbeats};
use accel_store::Store;
use accel_testkit::postgres::PrivatePostgres;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// A running `accel serve`.
struct Serve {
    child: Child,
    placement: String,
    accel: String,
    /// Every log line so far.
    log: Arc<Mutex<Vec<String>>>,
}

fn accel() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_accel"));
    c.env_remove("ACCEL_CONFIG")
        .env("ACCEL_LOG", "info")
        // Servers of parallel tests must not race for the default metrics and console
        // ports.
        .env("ACCEL_METRICS_LISTEN", "127.0.0.1:0")
        .env("ACCEL_CONSOLE_LISTEN", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

/// An `accel serve` started and not yet ready.
struct Starting {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    ready: tokio::sync::oneshot::Receiver<String>,
}

/// Starts `accel serve ARGS` (both APIs on port 0) and waits for it to be ready.
async fn serve(args: &[&str]) -> Serve {
    start(args).ready().await
}

/// Starts `accel serve ARGS` (both APIs on port 0), its log collected as it comes.
fn start(args: &[&str]) -> Starting {
    let mut c = accel();
    c.args(["serve", "--log-format", "json"])
        .args(["--placement-listen", "127.0.0.1:0"])
        .args(["--accelerator-listen", "127.0.0.1:0"])
        .args(args);
    let mut child = c.spawn().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sink = log.clone();
    tokio::spawn(async move {
        let mut tx = Some(tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("accel serve ready") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(line.clone());
                }
            }
            sink.lock().unwrap().push(line);
        }
    });
    Starting {
        child,
        log,
        ready: rx,
    }
}

impl Starting {
    /// Waits for the "accel serve ready" line.
    async fn ready(self) -> Serve {
        let log = self.log;
        let ready = tokio::time::timeout(Duration::from_secs(60), self.ready)
            .await
            .unwrap_or_else(|_| panic!("not ready: {:?}", log.lock().unwrap()))
            .unwrap_or_else(|_| panic!("exited: {:?}", log.lock().unwrap()));
        let v: Value = serde_json::from_str(&ready).unwrap();
        let f = &v["fields"];
        Serve {
            child: self.child,
            placement: format!("http://{}", f["placement"].as_str().unwrap()),
            accel: format!("http://{}", f["accelerator"].as_str().unwrap()),
            log,
        }
    }
}

/// Waits until a line of `log` contains `what` (at most 30 s).
async fn until_logged(log: &Mutex<Vec<String>>, what: &str) {
    until_logged_times(log, what, 1).await
}

/// Waits until `n` lines of `log` contain `what` (at most 30 s): the process may have
/// exited before its last lines were read from the pipe.
async fn until_logged_times(log: &Mutex<Vec<String>>, what: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let count = || {
        log.lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    };
    while count() < n {
        assert!(
            Instant::now() < deadline,
            "logged {what:?} {} times, not {n}: {:?}",
            count(),
            log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the server at `base` has accepted every connection opened before this
/// call: it answers a request on a new one, and accepts are taken in order.
async fn accepted_so_far(base: &str) {
    let r = reqwest::Client::new()
        .get(format!("{base}/"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

impl Serve {
    fn pid(&self) -> String {
        self.child.id().unwrap().to_string()
    }

    fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &self.pid()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Waits for the process to exit: its status and how long that took.
    async fn exit(&mut self, within: Duration) -> (std::process::ExitStatus, Duration) {
        let t = Instant::now();
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("still running after {within:?}"))
            .unwrap();
        (status, t.elapsed())
    }

    fn logged(&self, what: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    }
}

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("accel.db").display())
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn noauth_on_a_public_address_needs_insecure_noauth() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(dir.path());
    let out = accel()
        .args(["serve", "--database", &db])
        .args(["--placement-listen", "0.0.0.0:0"])
        .args(["--accelerator-listen", "127.0.0.1:0"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--insecure-noauth") && err.contains("placement_listen"),
        "{err}"
    );
    // Said explicitly, it serves.
    let mut s = serve(&["--database", &db, "--insecure-noauth"]).await;
    s.signal("TERM");
    let (status, _) = s.exit(Duration::from_secs(10)).await;
    assert!(status.success());
}

#[tokio::test]
async fn an_unreachable_database_fails_start_up_with_its_cause_within_the_timeout() {
    let port = free_port();
    let t = Instant::now();
    let out = accel()
        .args(["serve", "--database"])
        .arg(format!("postgres://postgres@127.0.0.1:{port}/accel"))
        .args(["--database-connect-timeout", "2"])
        .args(["--placement-listen", "127.0.0.1:0"])
        .args(["--accelerator-listen", "127.0.0.1:0"])
        .output()
        .await
        .unwrap();
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(took < Duration::from_secs(6), "took {took:?}");
    // Each attempt logged with the cause, and the exit names it.
    let attempts = err.matches("database not reachable yet").count();
    assert!(attempts >= 2, "{err}");
    assert!(
        err.matches("Connection refused").count() > attempts,
        "{err}"
    );
    assert!(err.contains("Error: opening database"), "{err}");
    assert!(!err.contains("pool timed out"), "{err}");

    // A database that does not exist on a server that answers.
    let admin = accel_store::testing::pg_admin_url();
    let base = admin.rsplit_once('/').unwrap().0;
    let out = accel()
        .args(["serve", "--database"])
        .arg(format!("{base}/accel_missing_db"))
        .args(["--database-connect-timeout", "1"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("does not exist"), "{err}");
}

/// A connection that sends a request's first line and then nothing.
async fn half_request(base: &str) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    s.write_all(b"GET /resource_providers HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    s
}

#[tokio::test]
async fn a_trickling_client_cannot_hold_shutdown_and_a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(dir.path());
    let mut s = serve(&["--database", &db, "--shutdown-timeout", "1"]).await;
    let _held = half_request(&s.placement).await;
    let _held2 = half_request(&s.accel).await;
    accepted_so_far(&s.placement).await;
    accepted_so_far(&s.accel).await;
    s.signal("TERM");
    let (status, took) = s.exit(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_secs(3),
        "drained for {took:?}, not about 1 s"
    );
    until_logged_times(&s.log, "shutdown timeout: closing the connections", 2).await;
    assert_eq!(s.logged("shutdown timeout: closing the connections"), 2);

    // A long drain, cut short by a second SIGINT.
    let mut s = serve(&["--database", &db, "--shutdown-timeout", "60"]).await;
    let _held = half_request(&s.placement).await;
    accepted_so_far(&s.placement).await;
    s.signal("INT");
    until_logged(&s.log, "shutdown requested, draining").await;
    assert!(s.child.try_wait().unwrap().is_none(), "still draining");
    s.signal("INT");
    let (status, took) = s.exit(Duration::from_secs(5)).await;
    assert!(!status.success());
    assert!(took < Duration::from_secs(2), "{took:?}");
    until_logged(&s.log, "second shutdown signal").await;
    assert_eq!(s.logged("second shutdown signal"), 1);
}

async fn placement_uuid(s: &Serve, name: &str) -> String {
    let v = common::placement_get(&s.placement, &format!("/resource_providers?name={name}")).await;
    v["resource_providers"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn arq_state(s: &Serve, arq: &str) -> String {
    let v: Value = reqwest::Client::new()
        .get(format!("{}/v2/accelerator_requests/{arq}", s.accel))
        .header("x-auth-token", "admin")
        .header("x-roles", "admin")
        .header("x-project-id", "p1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["state"].as_str().unwrap_or_default().to_owned()
}

/// The owner name of the one live server on `store`'s database.
async fn live_owner(store: &Store) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = accel_store::now();
        let rows = heartbeats::list(store).await.unwrap();
        if let Some((o, _)) = rows.iter().find(|(_, until)| *until >= now) {
            return o.clone();
        }
        assert!(Instant::now() < deadline, "no heartbeat: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks how the killed server left the ARQ's bind job (pending; with `leased`, taken
/// by it for most of 30 s), then restarts the server and waits for the ARQ to resolve:
/// within 5 s of the restart, not after a dead server's lease.
async fn restart_resolves(url: &str, store: &Store, arq: &str, leased: bool) {
    let job = store
        .read({
            let arq = arq.to_owned();
            move |tx| Box::pin(async move { binds::job_of(tx, &arq).await })
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.state.as_str(), "pending", "{job:?}");
    if leased {
        assert!(
            job.lease_until.unwrap() > accel_store::now() + 20,
            "{job:?}"
        );
    } else {
        assert_eq!(job.owner, None, "{job:?}");
    }
    let restarted = Instant::now();
    let b = serve(&["--database", url, "--fake-devices", "compute1"]).await;
    loop {
        let state = arq_state(&b, arq).await;
        if state == "Bound" || state == "BindFailed" {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(5),
            "still {state} {:?} after the restart",
            restarted.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("resolved {:?} after the restart", restarted.elapsed());
    assert_eq!(arq_state(&b, arq).await, "Bound");
}

/// Creates a device profile and an ARQ of it; returns the ARQ's uuid.
async fn new_arq(s: &Serve, name: &str) -> String {
    let c = reqwest::Client::new();
    let admin = |r: reqwest::RequestBuilder| {
        r.header("x-auth-token", "admin")
            .header("x-roles", "admin")
            .header("x-project-id", "p1")
    };
    let r = admin(c.post(format!("{}/v2/device_profiles", s.accel)))
        .json(&serde_json::json!([{"name": name, "groups": [{"resources:FPGA": "1"}]}]))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let r = admin(c.post(format!("{}/v2/accelerator_requests", s.accel)))
        .json(&serde_json::json!({"device_profile_name": name}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let v: Value = r.json().await.unwrap();
    v["arqs"][0]["uuid"].as_str().unwrap().to_owned()
}

const INSTANCE: &str = "5b7a0c2e-64a9-4b5e-9d4a-0b8e6f7c1d2e";

#[tokio::test]
async fn kill_9_between_claim_and_bind_sqlite_resolves_within_5_s_of_the_restart() {
    use accel_store::accelerator::{arqs, report, Scope};
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let mut a = serve(&["--database", &url, "--fake-devices", "compute1"]).await;
    let store = Store::connect(&url).await.unwrap();
    let owner = live_owner(&store).await;
    let arq = new_arq(&a, "dp1").await;
    a.signal("KILL");
    a.exit(Duration::from_secs(5)).await;
    // A bind takes and performs its jobs in one transaction, so a kill cannot leave a
    // job taken; a lease held by a dead server still happens (a server that leased a
    // failed transaction's jobs, or an older version that claimed in a commit of its
    // own), and is written here as such a server writes it: the ARQ in BindStarted
    // with its job, leased by the killed server for 30 s.
    let now = accel_store::now();
    let a_uuid = arq.clone();
    store
        .write(move |tx| {
            Box::pin(async move {
                let b = arqs::Binding {
                    hostname: "compute1".into(),
                    device_rp_uuid: report::provider_uuid("compute1_FakeDevice"),
                    instance_uuid: INSTANCE.into(),
                    project_id: None,
                };
                arqs::start_bind(tx, &Scope::All, &a_uuid, &b, now + 60).await?;
                let job = binds::job_of(tx, &a_uuid).await?.unwrap();
                assert!(binds::claim(tx, job.id, &owner, now, now + 30).await?);
                Ok(())
            })
        })
        .await
        .unwrap();
    restart_resolves(&url, &store, &arq, true).await;
    store.close().await;
}

#[tokio::test]
async fn kill_9_during_a_bind_postgres_resolves_within_5_s_of_the_restart() {
    use sqlx::Connection;
    let url = accel_store::testing::fresh_postgres_url().await.unwrap();
    let mut a = serve(&["--database", &url, "--fake-devices", "compute1"]).await;
    let store = Store::connect(&url).await.unwrap();
    live_owner(&store).await; // up and beating
    let arq = new_arq(&a, "dp1").await;
    // Hold the attach handles: the server's bind transaction locks the instance, takes
    // the job, and then waits here, in the middle of its transaction.
    let mut lock = sqlx::AnyConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut lock).await.unwrap();
    sqlx::query("SELECT id FROM attach_handles FOR UPDATE")
        .execute(&mut lock)
        .await
        .unwrap();
    let rp = placement_uuid(&a, "compute1_FakeDevice").await;
    let r = reqwest::Client::new()
        .patch(format!("{}/v2/accelerator_requests", a.accel))
        .header("x-auth-token", "nova:service")
        .header("x-roles", "admin,service")
        .header("x-service-roles", "service")
        .header("x-project-id", "p1")
        .json(&serde_json::json!({ arq.clone(): [
            {"path": "/hostname", "op": "add", "value": "compute1"},
            {"path": "/device_rp_uuid", "op": "add", "value": rp},
            {"path": "/instance_uuid", "op": "add", "value": INSTANCE},
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    // The server's transaction waits for a handle's row lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = store
            .read_one(|tx| {
                Box::pin(async move {
                    Ok(sqlx::query_scalar(
                        "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_stat_activity \
                         WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    )
                    .fetch_one(&mut *tx)
                    .await?)
                })
            })
            .await
            .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server's bind never waited for the handles"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.signal("KILL");
    a.exit(Duration::from_secs(5)).await;
    sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    lock.close().await.unwrap();
    // The kill rolled the bind back: the job is pending and no one's.
    restart_resolves(&url, &store, &arq, false).await;
    store.close().await;
}

/// What the load saw: names acknowledged, statuses, slowest answer.
#[derive(Default)]
struct Load {
    acknowledged: Vec<String>,
    statuses: Vec<u16>,
    /// Answers that were not HTTP at all (connection errors, timeouts).
    failures: Vec<String>,
    slowest: Duration,
    /// Successes since `mark` was last set.
    ok_since_mark: usize,
}

#[tokio::test]
async fn postgres_stopped_and_started_under_load_503s_then_recovers_losing_nothing() {
    let pg = PrivatePostgres::init()
        .await
        .expect("PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql");
    pg.start().await;
    {
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let mut admin = sqlx::AnyConnection::connect(&pg.url("postgres"))
            .await
            .unwrap();
        sqlx::query("CREATE DATABASE accel")
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
    }
    pg.stop("fast").await;
    let url = pg.url("accel");

    // Started before its database: it waits, logging why, and comes up with it.
    let args = ["--database", &url, "--database-connect-timeout", "60"];
    let starting = start(&args);
    until_logged(&starting.log, "Connection refused").await;
    pg.start().await;
    let s = starting.ready().await;
    assert!(s.logged("database not reachable yet") >= 1);
    assert!(s.logged("Connection refused") >= 1);

    let load = Arc::new(Mutex::new(Load::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (load, stop, client) = (load.clone(), stop.clone(), client.clone());
            let url = format!("{}/resource_providers", s.placement);
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let name = format!("rp-{w}-{i}");
                    let t = Instant::now();
                    let r = client
                        .post(&url)
                        .header("x-auth-token", "admin")
                        .header("openstack-api-version", "placement 1.39")
                        .json(&serde_json::json!({ "name": name }))
                        .send()
                        .await;
                    let took = t.elapsed();
                    {
                        let mut l = load.lock().unwrap();
                        l.slowest = l.slowest.max(took);
                        match r {
                            Ok(r) => {
                                let code = r.status().as_u16();
                                l.statuses.push(code);
                                if r.status().is_success() {
                                    l.acknowledged.push(name);
                                    l.ok_since_mark += 1;
                                }
                            }
                            Err(e) => l.failures.push(e.to_string()),
                        }
                    }
                    if took < Duration::from_millis(20) {
                        tokio::time::sleep(Duration::from_millis(20) - took).await;
                    }
                }
            })
        })
        .collect();

    // The load is running: writes are acknowledged.
    let deadline = Instant::now() + Duration::from_secs(30);
    while load.lock().unwrap().ok_since_mark < 20 {
        assert!(Instant::now() < deadline, "the load never got going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pg.stop("fast").await;
    // Down for longer than a request waits for a connection (5 s): answered 503.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !load.lock().unwrap().statuses.contains(&503) {
        assert!(
            Instant::now() < deadline,
            "no 503 while the database is down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    load.lock().unwrap().ok_since_mark = 0;
    pg.start().await;
    // Recovered by itself: writes succeed again, with no restart of accel.
    let deadline = Instant::now() + Duration::from_secs(30);
    while load.lock().unwrap().ok_since_mark < 20 {
        assert!(Instant::now() < deadline, "no recovery after the restart");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }

    // Every writer has ended: the load is ours alone now.
    let l = std::mem::take(&mut *load.lock().unwrap());
    let count = |c: u16| l.statuses.iter().filter(|s| **s == c).count();
    eprintln!(
        "acknowledged {}, 503s {}, statuses {:?}, slowest {:?}",
        l.acknowledged.len(),
        count(503),
        l.statuses.iter().collect::<BTreeSet<_>>(),
        l.slowest
    );
    assert!(l.failures.is_empty(), "{:?}", l.failures);
    assert!(count(503) > 0, "no 503 while the database was down");
    assert!(
        l.statuses.iter().all(|c| *c < 300 || *c == 503),
        "{:?}",
        l.statuses.iter().collect::<BTreeSet<_>>()
    );
    assert!(l.slowest < Duration::from_secs(10), "{:?}", l.slowest);
    // Every acknowledged write is there.
    let v = common::placement_get(&s.placement, "/resource_providers").await;
    let present: BTreeSet<&str> = v["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let lost: Vec<&String> = l
        .acknowledged
        .iter()
        .filter(|n| !present.contains(n.as_str()))
        .collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    drop(s);
}

/// Issue 33: `kill -9` of the server while a device is being cleaned, and again while
/// a cleaning is queued and no agent has taken it: the restarted server never offers
/// the device before the agent says it is clean, and then offers it at once. The agent
/// is `accel agent`'s loop (`Agent::run`, its long poll for cleanings) behind a
/// forwarder, so the restarted server is at the address it already had.
#[tokio::test]
async fn kill_9_during_a_cleaning_never_offers_the_device_before_it_is_clean() {
    use accel_agent::testing::FakeCleaner;
    use accel_agent::Agent;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite_url(dir.path());
    let mut urls = vec![sqlite];
    if std::env::var("ACCEL_TEST_PG").is_ok() {
        urls.push(accel_store::testing::fresh_postgres_url().await.unwrap());
    }
    for (i, url) in urls.into_iter().enumerate() {
        let node = "cn1";
        let rp = accel_store::accelerator::report::provider_uuid("cn1_00fa:00:00.0");
        let mut a = serve(&["--database", &url]).await;
        let (s, v) = placement(
            &a,
            reqwest::Method::POST,
            "/resource_providers",
            Some(serde_json::json!({"name": node})),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let proxy = accel_testkit::Forwarder::start(&a.accel).await;
        let cleaner = FakeCleaner::new(dir.path().join(format!("cleaner-{i}")));
        let settings = || cleaner.settings(&proxy.url, node, 60);
        let agent = Agent::new(settings()).unwrap();
        agent.step().await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(agent.run(async move {
            let _ = stopped.await;
        }));

        // Killed while the agent cleans.
        cleaner.mode("gate");
        claim(&a, &rp, VM[0], 204).await;
        release(&a, VM[0]).await;
        accel_testkit::eventually(
            Duration::from_secs(10),
            "the agent to start cleaning",
            || async { (cleaner.started() == 1).then_some(()) },
        )
        .await;
        a.signal("KILL");
        a.exit(Duration::from_secs(5)).await;
        let mut b = serve(&["--database", &url]).await;
        proxy.retarget(&b.accel);
        assert_eq!(cleaning_state(&b, &rp).await, "cleaning", "{url}");
        assert_eq!(reserved(&b, &rp).await, 1);
        claim(&b, &rp, VM[1], 409).await;
        cleaner.open_gate();
        accel_testkit::eventually(
            Duration::from_secs(10),
            "the device offered again",
            || async { (cleaning_state(&b, &rp).await == "clean").then_some(()) },
        )
        .await;
        assert_eq!(reserved(&b, &rp).await, 0);
        claim(&b, &rp, VM[1], 204).await;

        // Killed with a cleaning queued and no agent running.
        let _ = stop.send(());
        running.await.unwrap();
        cleaner.mode("ok");
        release(&b, VM[1]).await;
        b.signal("KILL");
        b.exit(Duration::from_secs(5)).await;
        let c = serve(&["--database", &url]).await;
        proxy.retarget(&c.accel);
        assert_eq!(cleaning_state(&c, &rp).await, "cleaning", "{url}");
        claim(&c, &rp, VM[2], 409).await;
        let again = Agent::new(settings()).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(again.run(async move {
            let _ = stopped.await;
        }));
        accel_testkit::eventually(
            Duration::from_secs(10),
            "the queued cleaning done",
            || async { (cleaning_state(&c, &rp).await == "clean").then_some(()) },
        )
        .await;
        assert_eq!(cleaner.started(), 2);
        claim(&c, &rp, VM[2], 204).await;
        let _ = stop.send(());
        running.await.unwrap();
    }
}

const VM: [&str; 3] = [
    "00000000-0000-4000-8000-000000000001",
    "00000000-0000-4000-8000-000000000002",
    "00000000-0000-4000-8000-000000000003",
];

/// A Placement request as the noauth admin: status and body.
async fn placement(
    s: &Serve,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = reqwest::Client::new()
        .request(method, format!("{}{path}", s.placement))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement latest");
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Nova's claim of the GPU for `consumer`, expecting `status`.
async fn claim(s: &Serve, rp: &str, consumer: &str, status: u16) {
    let body = serde_json::json!({
        "allocations": {rp: {"resources": {"CUSTOM_ACCELERATOR_GPU": 1}}},
        "project_id": "p", "user_id": "u", "consumer_generation": null,
        "consumer_type": "INSTANCE",
    });
    let (got, v) = placement(
        s,
        reqwest::Method::PUT,
        &format!("/allocations/{consumer}"),
        Some(body),
    )
    .await;
    assert_eq!(got, status, "claim for {consumer}: {v}");
}

/// Nova's release of `consumer`'s allocations.
async fn release(s: &Serve, consumer: &str) {
    let (got, v) = placement(
        s,
        reqwest::Method::DELETE,
        &format!("/allocations/{consumer}"),
        None,
    )
    .await;
    assert_eq!(got, 204, "{v}");
}

/// The GPU provider's `reserved`.
async fn reserved(s: &Serve, rp: &str) -> i64 {
    let (_, v) = placement(
        s,
        reqwest::Method::GET,
        &format!("/resource_providers/{rp}/inventories"),
        None,
    )
    .await;
    v["inventories"]["CUSTOM_ACCELERATOR_GPU"]["reserved"]
        .as_i64()
        .unwrap_or_else(|| panic!("{v}"))
}

/// The provider's cleaning state as `GET /v2/device_cleanings` shows it.
async fn cleaning_state(s: &Serve, rp: &str) -> String {
    let v: Value = reqwest::Client::new()
        .get(format!("{}/v2/device_cleanings", s.accel))
        .header("x-auth-token", "admin")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["device_cleanings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["rp_uuid"] == rp)
        .map(|c| c["state"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no cleaning row for {rp}: {v}"))
}

/// `accel db version|sync`, `accel upgrade check` and `accel serve --no-migrate` on a
/// fresh database (SQLite, and PostgreSQL and MariaDB where the test run has them):
/// nothing applied until `db sync`, the server refusing the old schema and naming the
/// command, then starting; a version only a newer accel knows fails the check.
#[tokio::test]
async fn db_sync_as_a_step_of_its_own_and_the_upgrade_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![sqlite_url(dir.path())];
    if std::env::var("ACCEL_TEST_PG").is_ok() {
        urls.push(accel_store::testing::fresh_postgres_url().await.unwrap());
    }
    if let Ok(Some(url)) = accel_store::testing::fresh_mysql_url().await {
        urls.push(url);
    }
    let run = |args: Vec<String>| async move {
        let out = accel()
            .args(&args)
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .output()
            .await
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let cmd = |words: &str, url: &str| {
        let mut v: Vec<String> = words.split(' ').map(str::to_owned).collect();
        v.extend(["--database".to_owned(), url.to_owned()]);
        v
    };
    for url in urls {
        let (code, out, err) = run(cmd("db version -f json", &url)).await;
        assert_eq!(code, Some(0), "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let latest = v["latest"].as_i64().unwrap();
        assert_eq!(v["current"], 0, "{v}");
        assert_eq!(v["pending"].as_array().unwrap().len() as i64, latest, "{v}");

        let (code, out, _) = run(cmd("upgrade check", &url)).await;
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains("Result: Warning") && out.contains("accel db sync"),
            "{out}"
        );

        let mut refused = cmd("serve --no-migrate", &url);
        refused.extend(
            [
                "--placement-listen",
                "127.0.0.1:0",
                "--accelerator-listen",
                "127.0.0.1:0",
            ]
            .map(str::to_owned),
        );
        let (code, _, err) = run(refused).await;
        assert_ne!(code, Some(0));
        assert!(
            err.contains("version 0") && err.contains("accel db sync"),
            "{err}"
        );

        let (code, out, err) = run(cmd("db sync -f json", &url)).await;
        assert_eq!(code, Some(0), "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["applied"].as_array().unwrap().len() as i64, latest, "{v}");
        assert_eq!(
            (v["current"].as_i64(), v["pending"].as_array().map(Vec::len)),
            (Some(latest), Some(0))
        );
        // A second sync has nothing to do.
        let (_, out, _) = run(cmd("db sync", &url)).await;
        assert!(out.starts_with("applied: none; schema version"), "{out}");

        let (code, out, _) = run(cmd("upgrade check -f json", &url)).await;
        assert_eq!(code, Some(0), "{out}");
        let s = serve(&["--no-migrate", "--database", &url]).await;
        // The standard traits were written by `db sync`, not by the server.
        let (status, _) =
            placement(&s, reqwest::Method::GET, "/traits/HW_CPU_X86_AVX2", None).await;
        assert_eq!(status, 204);
        drop(s);

        // A newer accel's migration.
        let store = Store::open(&url).await.unwrap();
        store
            .write(|tx| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO accel_schema_migrations (version, applied_at) VALUES (9999, 0)")
                        .execute(&mut *tx)
                        .await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
        store.close().await;
        let (code, out, _) = run(cmd("upgrade check", &url)).await;
        assert_eq!(code, Some(2), "{out}");
        assert!(
            out.contains("(9999)") && out.contains("newer accel"),
            "{out}"
        );
        let (_, out, _) = run(cmd("db version", &url)).await;
        assert!(out.contains("newer:          9999"), "{out}");
    }
}

/// A config file in keystone mode whose `[keystone_authtoken]` points at `auth_url`
/// with `password`.
fn keystone_config(dir: &Path, auth_url: &str, password: &str) -> std::path::PathBuf {
    let path = dir.join("accel.toml");
    std::fs::write(
        &path,
        format!(
            "auth_strategy = \"keystone\"\n\
             [keystone_authtoken]\n\
             auth_url = \"{auth_url}/v3\"\n\
             username = \"accel\"\n\
             password = \"{password}\"\n\
             project_name = \"service\"\n"
        ),
    )
    .unwrap();
    path
}

// A fake Keystone: these cases need one that refuses on cue and one that is not there;
// scripts/keystone-real.sh tries the refusal against Keystone 30 itself.
#[tokio::test]
async fn keystone_refusing_the_service_credentials_stops_start_up_naming_them() {
    use accel_testkit::keystone::{FakeKeystone, Subject};
    let ks = FakeKeystone::start().await;
    ks.add_user("secret", Subject::project("accel", "service", &["service"]));
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(dir.path());
    let config = keystone_config(dir.path(), &ks.url, "wrong");
    let out = accel()
        .args(["serve", "--database", &db, "--config"])
        .arg(&config)
        .args(["--placement-listen", "127.0.0.1:0"])
        .args(["--accelerator-listen", "127.0.0.1:0"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("refused the credentials of user \"accel\" in project \"service\" (401"),
        "{err}"
    );
    assert!(
        err.contains("[keystone_authtoken] username, password"),
        "{err}"
    );
    assert!(!err.contains("accel serve ready"), "{err}");
    assert_eq!(ks.password_auths(), 1, "asked once, not retried");

    // The right password serves; an unreachable Keystone does not stop start-up (it
    // may come later): requests get 503 until it answers.
    let config = keystone_config(dir.path(), &ks.url, "secret");
    let mut s = serve(&["--database", &db, "--config", config.to_str().unwrap()]).await;
    s.signal("TERM");
    assert!(s.exit(Duration::from_secs(10)).await.0.success());
    let gone = format!("http://127.0.0.1:{}", free_port());
    let config = keystone_config(dir.path(), &gone, "secret");
    let mut s = serve(&["--database", &db, "--config", config.to_str().unwrap()]).await;
    assert_eq!(s.logged("Keystone did not answer at start-up"), 1);
    let r = reqwest::Client::new()
        .get(format!("{}/v2/device_profiles", s.accel))
        .header("x-auth-token", "some-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    s.signal("TERM");
    assert!(s.exit(Duration::from_secs(10)).await.0.success());
}
