//! Two accel servers on one PostgreSQL database (and one MariaDB/MySQL database when
//! `ACCEL_TEST_MYSQL` is set): each one's in-memory candidate index and remembered
//! usage totals follow the other's writes, and concurrent claims through both never
//! over-allocate. And on every backend, the index keeper that brings a server's index
//! up to date before a request needs it.

mod common;

use accel_server::ServerConfig;
use common::{Backend, TestApp, BACKENDS};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn config() -> ServerConfig {
    ServerConfig {
        allocation_conflict_retry_count: 10,
        max_allocation_candidates: 100_000,
        ..Default::default()
    }
}

/// The server databases several replicas share: every enabled backend but SQLite.
fn shared_backends() -> Vec<Backend> {
    BACKENDS
        .into_iter()
        .filter(|b| *b != Backend::Sqlite)
        .collect()
}

async fn replicas(backend: Backend) -> (TestApp, TestApp) {
    let url = accel_testkit::server::fresh_url(backend).await;
    let (a, b) = tokio::join!(
        accel_store::Store::connect(&url),
        accel_store::Store::connect(&url)
    );
    (
        TestApp::spawn_on(a.unwrap(), config(), false).await,
        TestApp::spawn_on(b.unwrap(), config(), false).await,
    )
}

async fn compute(app: &TestApp, name: &str, vcpus: i64) -> String {
    let rp = app.create_provider(name, None).await;
    let uuid = rp["uuid"].as_str().unwrap().to_owned();
    let (s, v) = app
        .json(
            Method::PUT,
            &format!("/resource_providers/{uuid}/inventories"),
            "1.39",
            Some(json!({"resource_provider_generation": 0,
                        "inventories": {"VCPU": {"total": vcpus}}})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    uuid
}

async fn candidates(app: &TestApp, query: &str) -> Value {
    let (s, v) = app
        .json(
            Method::GET,
            &format!("/allocation_candidates?{query}"),
            "1.39",
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    v
}

/// PUT /allocations for a new consumer; the status.
async fn claim(app: &TestApp, allocations: &Value) -> u16 {
    let consumer = uuid::Uuid::new_v4();
    let (s, _) = app
        .json(
            Method::PUT,
            &format!("/allocations/{consumer}"),
            "1.39",
            Some(
                json!({"allocations": allocations, "project_id": "p", "user_id": "u",
                        "consumer_generation": null, "consumer_type": "INSTANCE"}),
            ),
        )
        .await;
    s
}

#[tokio::test]
async fn each_replica_sees_the_others_writes() {
    for backend in shared_backends() {
        each_replica_sees_the_others_writes_on(backend).await;
    }
}

async fn each_replica_sees_the_others_writes_on(backend: Backend) {
    let (a, b) = replicas(backend).await;
    let cn = compute(&a, "cn1", 8).await;
    // B has never seen this provider: its first look loads everything.
    let v = candidates(&b, "resources=VCPU:8").await;
    assert_eq!(v["allocation_requests"].as_array().unwrap().len(), 1);
    // A claims it all; B's next answer must reflect the new usage.
    let s = claim(&a, &json!({cn.as_str(): {"resources": {"VCPU": 8}}})).await;
    assert_eq!(s, 204);
    let v = candidates(&b, "resources=VCPU:1").await;
    assert_eq!(v["allocation_requests"].as_array().unwrap().len(), 0, "{v}");
    // A second compute created through A appears on B; a trait set through A filters on B.
    let cn2 = compute(&a, "cn2", 4).await;
    let v = candidates(&b, "resources=VCPU:1").await;
    assert_eq!(
        v["allocation_requests"][0]["allocations"][cn2.as_str()]["resources"]["VCPU"],
        1
    );
    let (s, _) = a
        .json(Method::PUT, "/traits/CUSTOM_FAST", "1.39", None)
        .await;
    assert_eq!(s, 201);
    let (_, rp) = a
        .json(
            Method::GET,
            &format!("/resource_providers/{cn2}"),
            "1.39",
            None,
        )
        .await;
    let (s, v) = a
        .json(
            Method::PUT,
            &format!("/resource_providers/{cn2}/traits"),
            "1.39",
            Some(json!({"resource_provider_generation": rp["generation"], "traits": ["CUSTOM_FAST"]})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let v = candidates(&b, "resources=VCPU:1&required=!CUSTOM_FAST").await;
    assert_eq!(v["allocation_requests"].as_array().unwrap().len(), 0, "{v}");
    let v = candidates(&b, "resources=VCPU:1&required=CUSTOM_FAST").await;
    assert_eq!(v["allocation_requests"].as_array().unwrap().len(), 1, "{v}");
    // B refreshed once in full, then only by deltas.
    let stats = &b.state.placement_index.stats;
    assert_eq!(
        stats.full.load(Ordering::Relaxed),
        1,
        "one full load, then deltas"
    );
    assert!(stats.incremental.load(Ordering::Relaxed) >= 3);
}

/// `GET /resource_providers` without filters is answered from the candidate index;
/// each provider must read as the SQL path (a `?uuid=` listing) reads it.
async fn listing(app: &TestApp) -> Vec<Value> {
    let (s, v) = at_139(app, Method::GET, "/resource_providers".into(), None).await;
    assert_eq!(s, 200, "{v}");
    let all = v["resource_providers"].as_array().unwrap().clone();
    for rp in &all {
        let path = format!("/resource_providers?uuid={}", rp["uuid"].as_str().unwrap());
        let (_, one) = at_139(app, Method::GET, path, None).await;
        assert_eq!(
            one["resource_providers"],
            json!([rp]),
            "the index and SQL differ"
        );
    }
    all
}

/// A Placement request at 1.39: its status and body.
async fn at_139(app: &TestApp, m: Method, path: String, body: Option<Value>) -> (u16, Value) {
    app.json(m, &path, "1.39", body).await
}

#[tokio::test]
async fn a_plain_listing_on_one_replica_shows_the_others_writes() {
    for backend in shared_backends() {
        let (a, b) = replicas(backend).await;
        assert!(listing(&b).await.is_empty());
        let root = compute(&a, "cn1", 8).await;
        let child = a.create_provider("cn1-gpu", Some(&root)).await;
        let child = child["uuid"].as_str().unwrap().to_owned();
        let got = listing(&b).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            (got[0]["uuid"].as_str(), got[0]["generation"].as_i64()),
            (Some(root.as_str()), Some(1))
        );
        assert_eq!(got[1]["parent_provider_uuid"], json!(root));
        assert_eq!(got[1]["root_provider_uuid"], json!(root));
        // Renamed and made a root through A: B's next listing says so.
        let body = json!({"name": "gpu", "parent_provider_uuid": null});
        let path = format!("/resource_providers/{child}");
        let (s, v) = at_139(&a, Method::PUT, path, Some(body)).await;
        assert_eq!(s, 200, "{v}");
        let got = listing(&b).await;
        assert_eq!(got[1]["name"], json!("gpu"));
        assert_eq!(got[1]["parent_provider_uuid"], Value::Null);
        assert_eq!(got[1]["root_provider_uuid"], json!(child));
        // Deleted through A: gone from B's listing.
        let path = format!("/resource_providers/{root}");
        let (s, _) = at_139(&a, Method::DELETE, path, None).await;
        assert_eq!(s, 204);
        let got = listing(&b).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["uuid"], json!(child));
    }
}

/// `GET /usages` of `project` at 1.39 (grouped by consumer type): INSTANCE's VCPU and
/// consumer count, (0, 0) when it has none.
async fn usages(app: &TestApp, project: &str) -> (i64, i64) {
    let path = format!("/usages?project_id={project}");
    let (s, v) = at_139(app, Method::GET, path, None).await;
    assert_eq!(s, 200, "{v}");
    let g = &v["usages"]["INSTANCE"];
    (
        g["VCPU"].as_i64().unwrap_or(0),
        g["consumer_count"].as_i64().unwrap_or(0),
    )
}

/// PUT /allocations for `consumer` (at `generation`, null for a new one) in `project`.
async fn claim_in(
    app: &TestApp,
    consumer: &str,
    generation: Value,
    project: &str,
    allocations: Value,
) {
    let (s, v) = at_139(
        app,
        Method::PUT,
        format!("/allocations/{consumer}"),
        Some(
            json!({"allocations": allocations, "project_id": project, "user_id": "u",
                    "consumer_generation": generation, "consumer_type": "INSTANCE"}),
        ),
    )
    .await;
    assert_eq!(s, 204, "{v}");
}

#[tokio::test]
async fn usages_on_one_replica_follow_the_others_claims() {
    use std::sync::atomic::Ordering::Relaxed;
    for backend in shared_backends() {
        let (a, b) = replicas(backend).await;
        let cn = compute(&a, "cn1", 64).await;
        let vcpu = |n: i64| json!({cn.clone(): {"resources": {"VCPU": n}}});
        let c1 = uuid::Uuid::new_v4().to_string();
        claim_in(&a, &c1, Value::Null, "p", vcpu(2)).await;
        assert_eq!(usages(&b, "p").await, (2, 1));
        // Asked again with nothing changed: B answers from memory.
        let cache = &b.state.usage_cache;
        let before = (cache.cached.load(Relaxed), cache.queried.load(Relaxed));
        assert_eq!(usages(&b, "p").await, (2, 1));
        let after = (cache.cached.load(Relaxed), cache.queried.load(Relaxed));
        assert_eq!(after, (before.0 + 1, before.1), "{backend:?}");

        // A claim through A in another project leaves p's answer standing ...
        let c2 = uuid::Uuid::new_v4().to_string();
        claim_in(&a, &c2, Value::Null, "q", vcpu(4)).await;
        assert_eq!(usages(&b, "p").await, (2, 1));
        assert_eq!(cache.cached.load(Relaxed), after.0 + 1);
        assert_eq!(usages(&b, "q").await, (4, 1));
        // ... and one in p is seen at once, as are a consumer moving from p to q and
        // a deletion.
        let c3 = uuid::Uuid::new_v4().to_string();
        claim_in(&a, &c3, Value::Null, "p", vcpu(8)).await;
        assert_eq!(usages(&b, "p").await, (10, 2));
        claim_in(&a, &c1, json!(1), "q", vcpu(2)).await;
        assert_eq!(usages(&b, "p").await, (8, 1));
        assert_eq!(usages(&b, "q").await, (6, 2));
        let (s, _) = at_139(&a, Method::DELETE, format!("/allocations/{c3}"), None).await;
        assert_eq!(s, 204);
        assert_eq!(usages(&b, "p").await, (0, 0));
        // A project that had nothing yet: its first claim is seen too.
        assert_eq!(usages(&b, "r").await, (0, 0));
        claim_in(
            &a,
            &uuid::Uuid::new_v4().to_string(),
            Value::Null,
            "r",
            vcpu(1),
        )
        .await;
        assert_eq!(usages(&b, "r").await, (1, 1));
    }
}

#[tokio::test]
async fn two_replicas_and_32_clients_never_over_allocate() {
    for backend in shared_backends() {
        two_replicas_and_32_clients_never_over_allocate_on(backend).await;
    }
}

async fn two_replicas_and_32_clients_never_over_allocate_on(backend: Backend) {
    const PROVIDERS: usize = 8;
    const VCPUS: i64 = 10;
    const CLIENTS: usize = 32;
    let (a, b) = replicas(backend).await;
    let mut uuids = Vec::new();
    for i in 0..PROVIDERS {
        uuids.push(compute(&a, &format!("cn{i}"), VCPUS).await);
    }
    let apps = Arc::new([a, b]);
    let won = Arc::new(AtomicUsize::new(0));
    let lost = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (apps, won, lost) = (apps.clone(), won.clone(), lost.clone());
        tasks.push(tokio::spawn(async move {
            let app = &apps[c % 2];
            loop {
                let v = candidates(app, "resources=VCPU:1&limit=8").await;
                let reqs = v["allocation_requests"].as_array().unwrap().clone();
                if reqs.is_empty() {
                    return;
                }
                // Clients pick different candidates so races are real but not total.
                let pick = &reqs[c % reqs.len()]["allocations"];
                match claim(app, pick).await {
                    204 => won.fetch_add(1, Ordering::SeqCst),
                    409 => lost.fetch_add(1, Ordering::SeqCst),
                    s => panic!("unexpected claim status {s}"),
                };
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = PROVIDERS * VCPUS as usize;
    assert_eq!(
        won.load(Ordering::SeqCst),
        total,
        "every unit claimed exactly once"
    );
    // The database agrees: no provider holds more than its inventory.
    for u in &uuids {
        let (s, v) = apps[0]
            .json(
                Method::GET,
                &format!("/resource_providers/{u}/usages"),
                "1.39",
                None,
            )
            .await;
        assert_eq!(s, 200);
        assert_eq!(v["usages"]["VCPU"], VCPUS, "{u}: {v}");
    }
    eprintln!(
        "{backend:?} claims: {} won, {} lost a race and retried",
        won.load(Ordering::SeqCst),
        lost.load(Ordering::SeqCst)
    );
}

/// The index keeper (`index::Keeper`, one step a second in every server): it builds
/// the picture at start-up, waits while writes go on, refreshes once they pause or
/// after `PATIENCE` stale steps, and leaves the next request a picture it need not
/// refresh.
#[tokio::test]
async fn the_index_keeper_builds_at_start_waits_out_writes_and_refreshes_when_they_pause() {
    use accel_server::placement::index::{Index, Keeper, Kept, PATIENCE};
    for backend in BACKENDS {
        let store = accel_testkit::server::store(backend).await;
        let app = TestApp::spawn_on(store.clone(), config(), false).await;
        compute(&app, "cn1", 8).await;
        // A server with its background workers on that database: its keeper builds
        // the picture with no request asking for one.
        let workers = accel_server::accelerator::binder::WorkerConfig::new(None);
        let srv = accel_testkit::server::TestServer::start(
            accel_testkit::server::builder(store.clone()).workers(Some(workers)),
        )
        .await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let label = accel_server::metrics::OutcomeLabel {
            outcome: "refreshed",
        };
        let refreshed = || {
            srv.state
                .metrics
                .index_keeper_steps
                .get_or_create(&label)
                .get()
        };
        while refreshed() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{backend:?}: no picture in 10 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let stats = &srv.state.placement_index.stats;
        assert_eq!(stats.full.load(Ordering::Relaxed), 1, "built once, in full");

        // A keeper of the test's own, over the same store, stepped by hand.
        let (index, store) = (Index::default(), &app.state.store);
        let mut keeper = Keeper::default();
        let mut step = async || keeper.step(&index, store).await.unwrap();
        assert_eq!(step().await, Kept::Refreshed { full: true }, "{backend:?}");
        assert_eq!(step().await, Kept::Current);
        compute(&app, "cn2", 8).await;
        assert_eq!(
            step().await,
            Kept::Waiting,
            "the version moved: writes go on"
        );
        assert_eq!(step().await, Kept::Refreshed { full: false }, "they paused");
        // The request after it finds the picture current: a hit, no refresh.
        let (hits, incremental) = (
            index.stats.hits.load(Ordering::Relaxed),
            index.stats.incremental.load(Ordering::Relaxed),
        );
        assert_eq!(index.current(store).await.unwrap().world.providers.len(), 2);
        assert_eq!(index.stats.hits.load(Ordering::Relaxed), hits + 1);
        assert_eq!(index.stats.incremental.load(Ordering::Relaxed), incremental);
        // Writes that never pause: refreshed after PATIENCE stale steps anyway.
        for i in 1..PATIENCE {
            compute(&app, &format!("w{i}"), 1).await;
            assert_eq!(step().await, Kept::Waiting, "{backend:?}: stale step {i}");
        }
        compute(&app, "w-last", 1).await;
        assert_eq!(step().await, Kept::Refreshed { full: false });
        let picture = index.current(store).await.unwrap();
        assert_eq!(picture.world.providers.len(), 2 + PATIENCE as usize);
        assert_eq!(step().await, Kept::Current);
        srv.stop().await; // closes the shared store: last
    }
}
