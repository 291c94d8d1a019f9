//! Devices cleaned between tenants, end to end (issue 33): the real server, `accel
//! agent`'s library with the `fake` driver and a `[[cleaning]]` rule whose cleaner is
//! a shell script in a tempdir (`accel_agent::testing::FakeCleaner`: its file `mode`
//! says `ok`, `fail`, `hang` or `gate`). Each test runs on every backend.

mod common;

use accel_agent::cleaning::TRAIT;
use accel_agent::config::Settings;
use accel_agent::testing::FakeCleaner;
use accel_agent::Agent;
use accel_store::accelerator::report;
use accel_testkit::Forwarder;
use common::accel::{
    allocate_gpu, compute_node, delete_allocations, placement, workers, Server, TempDb,
};
use common::BACKENDS;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const NODE: &str = "cn1";
const ADDRESS: &str = "00fa:00:00.0";

/// A consumer uuid, numbered.
fn vm(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

fn rp() -> String {
    report::provider_uuid(&format!("{NODE}_{ADDRESS}"))
}

fn mode(dir: &Path, m: &str) {
    FakeCleaner {
        dir: dir.to_path_buf(),
    }
    .mode(m)
}

fn settings(server: &str, dir: &Path, timeout_seconds: u64) -> Settings {
    FakeCleaner::new(dir).settings(server, NODE, timeout_seconds)
}

struct Fixture {
    srv: Server,
    agent: Agent,
    dir: tempfile::TempDir,
    db: TempDb,
}

async fn fixture(backend: common::Backend, timeout_seconds: u64) -> Fixture {
    let db = TempDb::fresh(backend).await;
    let srv = Server::start(&db.url, None, Some(workers(None))).await;
    compute_node(&srv, NODE).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::new(settings(&srv.accel, dir.path(), timeout_seconds)).unwrap();
    agent.step().await.unwrap();
    Fixture {
        srv,
        agent,
        dir,
        db,
    }
}

/// The device provider's cleaning as `GET /v2/device_cleanings` shows it.
async fn cleaning(srv: &Server) -> Value {
    let (s, v) = srv
        .admin_get(&format!("/v2/device_cleanings?hostname={NODE}"))
        .await;
    assert_eq!(s, 200, "{v}");
    v["device_cleanings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["rp_uuid"] == rp().as_str())
        .unwrap()
        .clone()
}

/// Whether a new consumer can claim the device through Placement (status).
async fn claim(srv: &Server, consumer: &str) -> u16 {
    let (s, _) = placement(
        srv,
        reqwest::Method::PUT,
        &format!("/allocations/{consumer}"),
        Some(json!({
            "allocations": {rp(): {"resources": {"CUSTOM_ACCELERATOR_GPU": 1}}},
            "project_id": "p", "user_id": "u", "consumer_generation": null,
            "consumer_type": "INSTANCE",
        })),
    )
    .await;
    s
}

/// Lets the agent take the cleaning and waits until it answered.
async fn run_cleaning(agent: &mut Agent) {
    let a = tokio::sync::Mutex::new(agent);
    common::eventually(
        Duration::from_secs(10),
        "a cleaning to reach the agent",
        || async { (a.lock().await.clean_step().await.unwrap() == 1).then_some(()) },
    )
    .await;
    a.lock().await.cleanings_done().await;
}

async fn operator(srv: &Server, action: &str) -> Value {
    let r = reqwest::Client::new()
        .post(format!(
            "{}/v2/device_cleanings/{}/{action}",
            srv.accel,
            rp()
        ))
        .header("x-auth-token", "admin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn success_failure_timeout_and_verification_end_as_they_should() {
    for backend in BACKENDS {
        let Fixture {
            srv,
            mut agent,
            dir,
            db: _db,
        } = fixture(backend, 2).await;
        let d = dir.path();
        let c = cleaning(&srv).await;
        assert_eq!(
            (c["state"].as_str(), c["cleaned_on_release"].as_bool()),
            (Some("clean"), Some(true))
        );
        let (_, traits) = placement(
            &srv,
            reqwest::Method::GET,
            &format!("/resource_providers/{}/traits", rp()),
            None,
        )
        .await;
        assert!(
            traits["traits"].as_array().unwrap().contains(&json!(TRAIT)),
            "{traits}"
        );

        // Success: released, reserved, cleaned, offered again.
        allocate_gpu(&srv, &vm(1), &rp()).await;
        delete_allocations(&srv, &vm(1)).await;
        assert_eq!(cleaning(&srv).await["state"], "cleaning");
        assert_eq!(
            claim(&srv, &vm(2)).await,
            409,
            "{backend:?}: claimed before cleaning"
        );
        run_cleaning(&mut agent).await;
        let c = cleaning(&srv).await;
        assert_eq!(c["state"], "clean", "{backend:?}: {c}");
        assert!(c["last_duration_ms"].as_i64().is_some());
        assert_eq!(
            std::fs::read_to_string(d.join("cleaned")).unwrap(),
            format!("{ADDRESS}\n")
        );
        assert_eq!(claim(&srv, &vm(2)).await, 204);
        delete_allocations(&srv, &vm(2)).await;

        // The cleaner fails: clean_failed with its reason, still reserved; a retry.
        mode(d, "fail");
        run_cleaning(&mut agent).await;
        let c = cleaning(&srv).await;
        assert_eq!(c["state"], "clean_failed", "{backend:?}: {c}");
        assert!(c["reason"].as_str().unwrap().contains("wipe failed"), "{c}");
        assert_eq!(claim(&srv, &vm(3)).await, 409);
        mode(d, "ok");
        assert_eq!(
            operator(&srv, "clean").await["device_cleanings"][0]["state"],
            "cleaning"
        );
        run_cleaning(&mut agent).await;
        assert_eq!(cleaning(&srv).await["state"], "clean");

        // The cleaner outlives its timeout: killed, clean_failed; an operator releases.
        allocate_gpu(&srv, &vm(3), &rp()).await;
        delete_allocations(&srv, &vm(3)).await;
        mode(d, "hang");
        run_cleaning(&mut agent).await;
        let c = cleaning(&srv).await;
        assert!(
            c["reason"].as_str().unwrap().contains("timed out"),
            "{backend:?}: {c}"
        );
        assert_eq!(
            operator(&srv, "release").await["device_cleanings"][0]["state"],
            "clean"
        );
        assert_eq!(claim(&srv, &vm(4)).await, 204);

        // The verification fails.
        mode(d, "ok");
        std::fs::remove_file(d.join("verified")).unwrap();
        delete_allocations(&srv, &vm(4)).await;
        run_cleaning(&mut agent).await;
        let c = cleaning(&srv).await;
        assert_eq!(c["state"], "clean_failed");
        assert!(c["reason"].as_str().unwrap().starts_with("verify"), "{c}");

        // The console's host page shows the state, the reason and the last cleaning.
        let (_, nodes) = placement(
            &srv,
            reqwest::Method::GET,
            &format!("/resource_providers?name={NODE}"),
            None,
        )
        .await;
        let root = nodes["resource_providers"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let html = reqwest::get(format!("{}/hosts/{root}", srv.console))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let row = format!(
            "data-test=\"cleaning\" data-provider=\"{}\" data-state=\"clean_failed\"",
            rp()
        );
        assert!(html.contains(&row), "{html}");
        assert!(html.contains("not wiped"), "the reason is shown");

        let text = reqwest::get(format!("{}/metrics", srv.metrics))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            text.contains("accel_device_cleanings_total{outcome=\"failed\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("accel_devices_by_cleaning_state{state=\"clean_failed\"} 1"),
            "{text}"
        );
        srv.stop().await;
    }
}

#[tokio::test]
async fn a_restarted_agent_resumes_the_cleaning() {
    for backend in BACKENDS {
        let Fixture {
            srv,
            agent,
            dir,
            db: _db,
        } = fixture(backend, 60).await;
        allocate_gpu(&srv, &vm(1), &rp()).await;
        delete_allocations(&srv, &vm(1)).await;
        mode(dir.path(), "gate");
        assert_eq!(agent.clean_step().await.unwrap(), 1);
        assert_eq!(cleaning(&srv).await["attempt"], 1);
        // The agent dies mid-cleaning (its cleaner killed with it); a new one starts.
        drop(agent);
        std::fs::write(dir.path().join("go"), "").unwrap();
        let mut again = Agent::new(settings(&srv.accel, dir.path(), 60)).unwrap();
        run_cleaning(&mut again).await;
        let c = cleaning(&srv).await;
        assert_eq!(
            (c["state"].as_str(), c["attempt"].as_i64()),
            (Some("clean"), Some(2)),
            "{backend:?}"
        );
        srv.stop().await;
    }
}

#[tokio::test]
async fn a_server_replaced_mid_cleaning_takes_the_answer() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let first = Server::start(&db.url, None, Some(workers(None))).await;
        compute_node(&first, NODE).await;
        let dir = tempfile::tempdir().unwrap();
        let proxy = Forwarder::start(&first.accel).await;
        let agent = Agent::new(settings(&proxy.url, dir.path(), 60)).unwrap();
        agent.step().await.unwrap();
        allocate_gpu(&first, &vm(1), &rp()).await;
        delete_allocations(&first, &vm(1)).await;
        mode(dir.path(), "gate");
        assert_eq!(agent.clean_step().await.unwrap(), 1);
        // The server goes away while the agent cleans; nothing of the cleaning was
        // in its memory. Another process opens the same database.
        first.stop().await;
        let second = Server::start(&db.url, None, Some(workers(None))).await;
        proxy.retarget(&second.accel);
        assert_eq!(cleaning(&second).await["state"], "cleaning");
        assert_eq!(claim(&second, &vm(2)).await, 409, "{backend:?}");
        std::fs::write(dir.path().join("go"), "").unwrap();
        agent.cleanings_done().await;
        assert_eq!(cleaning(&second).await["state"], "clean", "{backend:?}");
        assert_eq!(claim(&second, &vm(2)).await, 204);
        second.stop().await;
    }
}

#[tokio::test]
async fn a_vms_release_is_the_last_of_its_arq_and_its_allocation() {
    for backend in BACKENDS {
        let Fixture {
            srv,
            mut agent,
            dir: _dir,
            db: _db,
        } = fixture(backend, 60).await;
        srv.create_profile("gpu", json!([{"resources:CUSTOM_ACCELERATOR_GPU": "1"}]))
            .await;
        for (round, arq_first) in [(1, true), (2, false)] {
            let inst = uuid::Uuid::new_v4().to_string();
            let arqs = srv.create_arqs("gpu").await;
            allocate_gpu(&srv, &inst, &rp()).await;
            srv.bind(&arqs, NODE, &rp(), &inst).await;
            let resolved = srv.wait_resolved(&inst).await;
            assert_eq!(resolved[0]["state"], "Bound", "{backend:?}: {resolved:?}");
            let delete_arqs = format!("/v2/accelerator_requests?instance={inst}");
            if arq_first {
                let (s, v) = srv.nova(reqwest::Method::DELETE, &delete_arqs, None).await;
                assert_eq!(s, 204, "{v}");
                assert_eq!(
                    cleaning(&srv).await["state"],
                    "clean",
                    "round {round}: the allocation holds it"
                );
                delete_allocations(&srv, &inst).await;
            } else {
                delete_allocations(&srv, &inst).await;
                assert_eq!(
                    cleaning(&srv).await["state"],
                    "clean",
                    "round {round}: the ARQ holds it"
                );
                let (s, v) = srv.nova(reqwest::Method::DELETE, &delete_arqs, None).await;
                assert_eq!(s, 204, "{v}");
            }
            assert_eq!(
                cleaning(&srv).await["state"],
                "cleaning",
                "{backend:?} round {round}"
            );
            run_cleaning(&mut agent).await;
            assert_eq!(cleaning(&srv).await["state"], "clean");
        }
        srv.stop().await;
    }
}

/// The reserved amount of the device provider's inventory, as Placement shows it.
async fn reserved(srv: &Server) -> i64 {
    let (s, v) = placement(
        srv,
        reqwest::Method::GET,
        &format!("/resource_providers/{}/inventories", rp()),
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    v["inventories"]["CUSTOM_ACCELERATOR_GPU"]["reserved"]
        .as_i64()
        .unwrap()
}

/// The agent's look for cleanings as a long poll: with nothing queued it answers
/// nothing after `wait`; a release while it waits is answered long before `wait`
/// ends; a `wait` out of range is refused.
#[tokio::test]
async fn the_agents_long_poll_answers_a_release_before_its_wait_ends() {
    for backend in BACKENDS {
        let Fixture {
            srv,
            agent: _agent,
            dir: _dir,
            db: _db,
        } = fixture(backend, 60).await;
        let look = |wait: &str| {
            let path = format!("/v2/agent/hosts/{NODE}/cleanings?agent=a1&wait={wait}");
            let srv = &srv;
            async move { srv.admin_get(&path).await }
        };
        let t = std::time::Instant::now();
        let (s, v) = look("1").await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["cleanings"], json!([]), "{backend:?}");
        assert!(
            t.elapsed() >= Duration::from_millis(900),
            "{:?}",
            t.elapsed()
        );

        allocate_gpu(&srv, &vm(1), &rp()).await;
        let t = std::time::Instant::now();
        let (polled, ()) = tokio::join!(look("30"), async {
            delete_allocations(&srv, &vm(1)).await;
        });
        assert_eq!(polled.0, 200, "{}", polled.1);
        let taken = polled.1["cleanings"].as_array().unwrap();
        assert_eq!(taken.len(), 1, "{backend:?}: {}", polled.1);
        assert_eq!(taken[0]["rp_uuid"], rp().as_str());
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());

        for bad in ["61", "-1", "soon"] {
            let (s, v) = look(bad).await;
            assert_eq!(s, 400, "wait={bad}: {v}");
            assert!(v.to_string().contains("wait must be"), "{v}");
        }
        srv.stop().await;
    }
}

/// The benchmark of docs/benchmarks.md ("Devices cleaned between tenants"): the time
/// from a release (the 204 of Nova's DELETE /allocations) to the device offered again
/// (Placement shows it unreserved) with a cleaner that takes 1 s, the agent running
/// as `accel agent` does, with its defaults (the long poll for cleanings; the
/// programming interval plays no part). Ignored in the test run
/// (it takes about a minute per backend); run with
/// `cargo test --release -p accel-server --test cleaning -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn bench_release_to_offered_again() {
    const ROUNDS: usize = 50;
    for backend in BACKENDS {
        let Fixture {
            srv,
            agent,
            dir,
            db: _db,
        } = fixture(backend, 30).await;
        std::fs::write(dir.path().join("clean.sh"), "exec sleep 1\n").unwrap();
        let settings = agent.settings.clone();
        assert_eq!(settings.program_interval, Duration::from_millis(1000));
        drop(agent);
        let running = Agent::new(settings).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(running.run(async {
            let _ = stopped.await;
        }));
        let mut took = Vec::with_capacity(ROUNDS);
        for i in 0..ROUNDS {
            let vm = vm(100 + i as u32);
            allocate_gpu(&srv, &vm, &rp()).await;
            delete_allocations(&srv, &vm).await;
            let t0 = std::time::Instant::now();
            assert_eq!(reserved(&srv).await, 1);
            common::eventually(
                Duration::from_secs(20),
                "the device offered again",
                || async { (reserved(&srv).await == 0).then_some(()) },
            )
            .await;
            took.push(t0.elapsed());
        }
        let _ = stop.send(());
        task.await.unwrap();
        took.sort();
        let pct = |p: f64| took[((took.len() as f64 * p).ceil() as usize).saturating_sub(1)];
        println!(
            "{backend:?}: release to offered again, 1 s cleaner, {ROUNDS} rounds: min {:?} p50 {:?} p99 {:?} max {:?}",
            took[0],
            pct(0.50),
            pct(0.99),
            took[took.len() - 1]
        );
        srv.stop().await;
    }
}
