//! FPGA programming on bind, end to end (seed 003's orchestration-programmed case):
//! the real server with its bind worker, `accel agent`'s library with the `fake`
//! driver, and a fake Glance image endpoint. Each test runs on SQLite and PostgreSQL.

mod common;

use accel_agent::config::{FakeDevice, Settings};
use accel_agent::Agent;
use accel_store::accelerator::{binds, report};
use common::accel::{compute_node, placement, workers, Server, TempDb};
use common::BACKENDS;
use serde_json::{json, Value};
use sha2::{Digest, Sha512};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

const NODE: &str = "cn1";
const INTERFACE: &str = "1e7a7c4f-0f1d-4b5d-9d6b-2a3f4c5d6e7f";
const FUNCTION: &str = "9926ab6d-6c92-5a68-aabc-a7d84c545738";
const FUNCTION_TRAIT: &str = "CUSTOM_FPGA_FUNCTION_FAKE_9926AB6D6C925A68AABCA7D84C545738";

/// Image records by id, with their bytes.
type Images = Arc<Mutex<HashMap<String, (Value, Vec<u8>)>>>;

/// A Glance v2 image endpoint: records by id, their bytes, and how often each file
/// was downloaded.
#[derive(Clone, Default)]
struct FakeGlance {
    images: Images,
    downloads: Arc<Mutex<HashMap<String, usize>>>,
    /// Images whose file is held until released, and how often each was asked for.
    held: Arc<Mutex<HashMap<String, Arc<tokio::sync::Notify>>>>,
    asked: Arc<Mutex<HashMap<String, usize>>>,
}

impl FakeGlance {
    async fn start(&self) -> (String, oneshot::Sender<()>) {
        use axum::extract::{Path, Query};
        use axum::http::StatusCode;
        use axum::response::IntoResponse;
        let show = {
            let g = self.clone();
            move |Path(id): Path<String>| {
                let g = g.clone();
                async move {
                    match g.images.lock().unwrap().get(&id) {
                        Some((rec, _)) => axum::Json(rec.clone()).into_response(),
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                }
            }
        };
        let file = {
            let g = self.clone();
            move |Path(id): Path<String>| {
                let g = g.clone();
                async move {
                    *g.asked.lock().unwrap().entry(id.clone()).or_default() += 1;
                    let gate = g.held.lock().unwrap().get(&id).cloned();
                    if let Some(gate) = gate {
                        gate.notified().await;
                    }
                    let bytes = g.images.lock().unwrap().get(&id).map(|(_, b)| b.clone());
                    match bytes {
                        Some(b) => {
                            *g.downloads.lock().unwrap().entry(id).or_default() += 1;
                            b.into_response()
                        }
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                }
            }
        };
        let list = {
            let g = self.clone();
            move |Query(q): Query<HashMap<String, String>>| {
                let g = g.clone();
                async move {
                    let images: Vec<Value> = g
                        .images
                        .lock()
                        .unwrap()
                        .values()
                        .map(|(rec, _)| rec.clone())
                        .filter(|rec| {
                            q.iter()
                                .all(|(k, v)| rec.get(k).and_then(Value::as_str) == Some(v))
                        })
                        .collect();
                    axum::Json(json!({ "images": images }))
                }
            }
        };
        let app = axum::Router::new()
            .route("/v2/images", axum::routing::get(list))
            .route("/v2/images/{id}", axum::routing::get(show))
            .route("/v2/images/{id}/file", axum::routing::get(file));
        let (addr, stop) = common::serve_fake(app).await;
        (format!("http://{addr}"), stop)
    }

    /// An active image holding a fake bitstream for `function` (the fake driver reads
    /// the function id from its first line). `tamper` records a hash of other bytes.
    fn add(&self, function: &str, with_property: bool, tamper: bool) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        let bytes = format!("{function}\nfake bitstream body\n").into_bytes();
        let hashed: &[u8] = if tamper { b"something else" } else { &bytes };
        let hash: String = Sha512::digest(hashed)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut rec = json!({
            "id": id, "name": "bitstream", "status": "active", "size": bytes.len(),
            "os_hash_algo": "sha512", "os_hash_value": hash, "checksum": null,
        });
        if with_property {
            rec["accel:function_id"] = function.into();
        }
        self.images.lock().unwrap().insert(id.clone(), (rec, bytes));
        id
    }

    /// Holds `id`'s file until [`FakeGlance::release`].
    fn hold(&self, id: &str) {
        let gate = Arc::new(tokio::sync::Notify::new());
        self.held.lock().unwrap().insert(id.to_owned(), gate);
    }

    fn release(&self, id: &str) {
        if let Some(gate) = self.held.lock().unwrap().remove(id) {
            gate.notify_one();
        }
    }

    fn asked(&self, id: &str) -> usize {
        self.asked.lock().unwrap().get(id).copied().unwrap_or(0)
    }

    fn downloads(&self, id: &str) -> usize {
        self.downloads.lock().unwrap().get(id).copied().unwrap_or(0)
    }
}

fn fake_fpga() -> FakeDevice {
    FakeDevice {
        device_type: "FPGA".into(),
        vendor: "abcd".into(),
        product: "0001".into(),
        model: "fake-pac".into(),
        family: None,
        count: 2,
        class: None,
        numa_node: Some(0),
        regions: 1,
        interface_id: Some(INTERFACE.into()),
        function_id: None,
        memory_mib: None,
        memory_kind: None,
        healthy: true,
    }
}

/// The region provider's (and deployable's) name: card 0 of the fake driver.
fn region() -> String {
    format!("{NODE}_00fa:00:00.0_region0")
}

async fn agent(srv: &Server, glance: &str, dir: &std::path::Path) -> Agent {
    compute_node(srv, NODE).await;
    let mut settings = Settings::new(&srv.accel, NODE, &dir.join("sys"));
    settings.drivers = Some(vec!["fake".into()]);
    settings.driver.fake = vec![fake_fpga()];
    settings.glance_url = Some(glance.to_owned());
    settings.program_dir = dir.join("bitstreams");
    let a = Agent::new(settings).unwrap();
    a.step().await.unwrap();
    a
}

async fn region_traits(srv: &Server) -> Vec<String> {
    let uuid = report::provider_uuid(&region());
    let (s, v) = placement(
        srv,
        reqwest::Method::GET,
        &format!("/resource_providers/{uuid}/traits"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    v["traits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

/// What a [`fixture`] keeps alive: the agent's directory (its bitstream cache), the
/// database, the fake Glance.
struct Kept {
    dir: tempfile::TempDir,
    _db: TempDb,
    _glance_stop: oneshot::Sender<()>,
}

/// The server with its workers, a fake Glance and an agent whose one fake FPGA card
/// (one region, two handles) has been reported.
async fn fixture(backend: common::Backend) -> (Server, FakeGlance, Agent, Kept) {
    let db = TempDb::fresh(backend).await;
    let srv = Server::start(&db.url, None, Some(workers(None))).await;
    let glance = FakeGlance::default();
    let (glance_url, stop) = glance.start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = agent(&srv, &glance_url, dir.path()).await;
    let kept = Kept {
        dir,
        _db: db,
        _glance_stop: stop,
    };
    (srv, glance, agent, kept)
}

/// The region's deployable as `GET /v2/deployables` shows it.
async fn region_deployable(srv: &Server) -> Value {
    let (s, deps) = srv.admin_get("/v2/deployables").await;
    assert_eq!(s, 200, "{deps}");
    deps["deployables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == region().as_str())
        .unwrap()
        .clone()
}

/// Runs the agent's programming look until it handled one request.
async fn program_one(a: &mut Agent) {
    // The step is the check: it either handles the request or finds none yet.
    let a = tokio::sync::Mutex::new(a);
    common::eventually(
        Duration::from_secs(10),
        "a programming request to reach the agent",
        || async { (a.lock().await.program_step().await.unwrap() == 1).then_some(()) },
    )
    .await;
}

fn instance() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Binds `arqs` to the region for a new instance, lets the agent carry out the one
/// programming request the bind makes, and answers the resolved ARQs.
async fn bind_programmed(srv: &Server, a: &mut Agent, arqs: &[String]) -> Vec<Value> {
    let inst = instance();
    srv.bind(arqs, NODE, &report::provider_uuid(&region()), &inst)
        .await;
    program_one(a).await;
    srv.wait_resolved(&inst).await
}

#[tokio::test]
async fn a_bind_naming_a_function_programs_the_region_once_then_reuses_it() {
    for backend in BACKENDS {
        let (srv, glance, mut a, _kept) = fixture(backend).await;
        let image = glance.add(FUNCTION, true, false);
        assert!(!region_traits(&srv).await.contains(&FUNCTION_TRAIT.into()));

        srv.create_profile(
            "fn",
            json!([{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": FUNCTION}]),
        )
        .await;
        let rp = report::provider_uuid(&region());
        let arqs = srv.create_arqs("fn").await;
        let resolved = bind_programmed(&srv, &mut a, &arqs).await;
        assert_eq!(resolved[0]["state"], "Bound", "{backend:?}: {resolved:?}");
        assert_eq!(glance.downloads(&image), 1);
        // The agent reported the new function before it answered.
        assert!(
            region_traits(&srv).await.contains(&FUNCTION_TRAIT.into()),
            "{backend:?}"
        );
        let a0 = arqs[0].clone();
        let pr = srv
            .store
            .read(move |tx| Box::pin(async move { binds::program_request(tx, &a0).await }))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((pr.state.as_str(), pr.deployable_name), ("done", region()));

        // The region carries the function now: the next bind does not program.
        let arqs2 = srv.create_arqs("fn").await;
        let inst2 = instance();
        srv.bind(&arqs2, NODE, &rp, &inst2).await;
        let resolved = srv.wait_resolved(&inst2).await;
        assert_eq!(resolved[0]["state"], "Bound", "{backend:?}");
        let a1 = arqs2[0].clone();
        let none = srv
            .store
            .read(move |tx| Box::pin(async move { binds::program_request(tx, &a1).await }))
            .await
            .unwrap();
        assert_eq!(none, None);
        assert_eq!(a.program_step().await.unwrap(), 0);
        assert_eq!(glance.downloads(&image), 1);
        srv.stop().await;
    }
}

#[tokio::test]
async fn a_bitstream_whose_checksum_does_not_match_is_never_programmed() {
    for backend in BACKENDS {
        let (srv, glance, mut a, kept) = fixture(backend).await;
        let bad = glance.add(FUNCTION, false, true);
        srv.create_profile(
            "bs",
            json!([{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:bitstream_id": bad}]),
        )
        .await;
        let arqs = srv.create_arqs("bs").await;
        let resolved = bind_programmed(&srv, &mut a, &arqs).await;
        assert_eq!(resolved[0]["state"], "BindFailed", "{backend:?}");
        let a0 = arqs[0].clone();
        let job = srv
            .store
            .read(move |tx| Box::pin(async move { binds::job_of(tx, &a0).await }))
            .await
            .unwrap()
            .unwrap();
        let why = job.error.unwrap();
        assert!(why.contains("does not match"), "{why}");
        // Not programmed: no function trait, no bitstream on the deployable, and the
        // downloaded file is gone.
        assert!(!region_traits(&srv).await.contains(&FUNCTION_TRAIT.into()));
        assert_eq!(region_deployable(&srv).await["bitstream_id"], Value::Null);
        let left = std::fs::read_dir(kept.dir.path().join("bitstreams"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(left, 0);

        // An agent without an image service says so, and the bind fails with it.
        a.settings.glance_url = None;
        let arqs = srv.create_arqs("bs").await;
        let resolved = bind_programmed(&srv, &mut a, &arqs).await;
        assert_eq!(resolved[0]["state"], "BindFailed", "{backend:?}");
        srv.stop().await;
    }
}

#[tokio::test]
async fn patch_program_waits_for_the_agent_and_answers_the_deployable() {
    for backend in BACKENDS {
        let (srv, glance, mut a, _kept) = fixture(backend).await;
        let image = glance.add(FUNCTION, false, false);
        let dep = region_deployable(&srv).await["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let client = reqwest::Client::new();
        let patch = |uuid: String, body: Value| {
            let req = client
                .patch(format!("{}/v2/deployables/{uuid}/program", srv.accel))
                .header("x-auth-token", "admin")
                .json(&body);
            async move {
                let r = req.send().await.unwrap();
                let s = r.status().as_u16();
                (s, r.json::<Value>().await.unwrap_or(Value::Null))
            }
        };
        let good = json!([{"path": "/program", "op": "replace", "value": [{"image_uuid": image}]}]);

        // Bad bodies and unknown deployables never reach the agent.
        for body in [
            json!({"image_uuid": image}),
            json!([{"path": "/bitstream_id", "op": "replace", "value": [{"image_uuid": image}]}]),
            json!([{"path": "/program", "op": "replace", "value": [{"image_uuid": "nope"}]}]),
            json!([{"path": "/program", "op": "add", "value": [{"image_uuid": image}]}]),
        ] {
            let (s, v) = patch(dep.clone(), body.clone()).await;
            assert_eq!(s, 400, "{body}: {v}");
        }
        let (s, _) = patch(uuid::Uuid::new_v4().to_string(), good.clone()).await;
        assert_eq!(s, 404);
        let (s, _) = patch("not-a-uuid".into(), good.clone()).await;
        assert_eq!(s, 400);
        assert_eq!(a.program_step().await.unwrap(), 0);

        let call = tokio::spawn(patch(dep.clone(), good.clone()));
        program_one(&mut a).await;
        let (s, v) = call.await.unwrap();
        assert_eq!(s, 200, "{backend:?}: {v}");
        assert_eq!(v["uuid"], dep.as_str());
        assert_eq!(v["bitstream_id"], image.as_str());
        assert!(region_traits(&srv).await.contains(&FUNCTION_TRAIT.into()));

        // A failed programming answers upstream's 500 with the agent's reason.
        let bad = glance.add(FUNCTION, false, true);
        let bad_body =
            json!([{"path": "/program", "op": "replace", "value": [{"image_uuid": bad}]}]);
        let call = tokio::spawn(patch(dep.clone(), bad_body));
        program_one(&mut a).await;
        let (s, v) = call.await.unwrap();
        assert_eq!(s, 500, "{v}");
        assert!(v.to_string().contains("does not match"), "{v}");
        srv.stop().await;
    }
}

#[tokio::test]
async fn the_workflow_picks_the_region_that_already_carries_the_function() {
    use accel_api::workflow::{self, BootRequest};
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, Some(workers(None))).await;
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = placement(
            &srv,
            reqwest::Method::POST,
            "/resource_providers",
            Some(json!({ "name": NODE })),
        )
        .await;
        assert_eq!(s, 200);
        // Card 0 is blank, card 1 carries the function.
        let mut settings = Settings::new(&srv.accel, NODE, &dir.path().join("sys"));
        settings.drivers = Some(vec!["fake".into()]);
        settings.driver.fake = vec![
            fake_fpga(),
            FakeDevice {
                function_id: Some(FUNCTION.into()),
                ..fake_fpga()
            },
        ];
        Agent::new(settings).unwrap().step().await.unwrap();
        let card0 = report::provider_uuid(&format!("{NODE}_00fa:00:00.0_region0"));
        let card1 = report::provider_uuid(&format!("{NODE}_00fa:01:00.0_region0"));
        srv.create_profile("plain", json!([{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]))
            .await;
        srv.create_profile(
            "fn",
            json!([{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": FUNCTION}]),
        )
        .await;
        let ep = srv.endpoints();
        let boot = |profile: &str| BootRequest {
            device_profile: profile.into(),
            resources: Vec::new(),
            instance: instance(),
            project_id: "p1".into(),
            user_id: "u1".into(),
            group_policy: "none".into(),
            timeout: Duration::from_secs(20),
        };
        // Placement's own first choice is card 0: the weigher is what moves it.
        let plain = workflow::boot(&ep, &boot("plain")).await.unwrap();
        assert_eq!(plain.arqs[0].device_rp_uuid, card0, "{backend:?}");
        let booted = workflow::boot(&ep, &boot("fn")).await.unwrap();
        assert_eq!(booted.arqs[0].device_rp_uuid, card1, "{backend:?}");
        assert_eq!(booted.arqs[0].state, "Bound");
        // Bound without asking any agent to program.
        let a0 = booted.arqs[0].arq_uuid.clone();
        let pr = srv
            .store
            .read(move |tx| Box::pin(async move { binds::program_request(tx, &a0).await }))
            .await
            .unwrap();
        assert_eq!(pr, None);
        srv.stop().await;
    }
}

/// Issue 33's `fpga-default` cleaning: a region released by its tenant is programmed
/// with the default image through this same path before it is offered again.
#[tokio::test]
async fn a_released_region_is_cleaned_by_programming_the_default_image() {
    for backend in BACKENDS {
        let (srv, glance, mut a, _kept) = fixture(backend).await;
        let image = glance.add(FUNCTION, true, false);
        a.settings.cleaning =
            accel_agent::cleaning::validate(vec![accel_agent::cleaning::CleaningFile {
                method: "fpga-default".into(),
                image: Some(image.clone()),
                timeout_seconds: Some(30),
                ..Default::default()
            }])
            .unwrap();
        a.step().await.unwrap();
        assert!(region_traits(&srv)
            .await
            .contains(&accel_agent::cleaning::TRAIT.to_owned()));
        let rp = report::provider_uuid(&region());
        let consumer = "0c5a7a3e-2d0b-4f7e-9d8c-1b2a3c4d5e6f";
        let path = format!("/allocations/{consumer}");
        let body = json!({
            "allocations": {rp.clone(): {"resources": {"CUSTOM_ACCELERATOR_FPGA": 1}}},
            "project_id": "p", "user_id": "u", "consumer_generation": null,
            "consumer_type": "INSTANCE",
        });
        let (s, v) = placement(&srv, reqwest::Method::PUT, &path, Some(body)).await;
        assert_eq!(s, 204, "{v}");
        let (s, v) = placement(&srv, reqwest::Method::DELETE, &path, None).await;
        assert_eq!(s, 204, "{v}");
        let cleaning = |v: &Value| -> String {
            v["device_cleanings"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == region().as_str())
                .unwrap()["state"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            cleaning(&srv.admin_get("/v2/device_cleanings").await.1),
            "cleaning"
        );
        assert_eq!(a.clean_step().await.unwrap(), 1);
        // Handed over to the programming worker's step (issue 40), which answers it.
        assert_eq!(a.program_step().await.unwrap(), 0);
        let now = srv.admin_get("/v2/device_cleanings").await.1;
        assert_eq!(cleaning(&now), "clean", "{backend:?}: {now}");
        assert_eq!(
            glance.downloads(&image),
            1,
            "the default image was programmed"
        );
        assert!(region_traits(&srv).await.contains(&FUNCTION_TRAIT.into()));
    }
}

/// The reports the agent sent so far (`accel_agent_reports_total`, every outcome).
fn reports_sent(health: &accel_agent::observe::Health) -> u64 {
    health
        .metrics()
        .prometheus_text()
        .lines()
        .filter(|l| l.starts_with("accel_agent_reports_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Issue 40: an `fpga-default` cleaning that outlasts the liveness limit runs beside
/// the node's other work: the reports and another card's programming go on, `/livez`
/// stays 200, and the cleaning ends once its image comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_fpga_default_cleaning_neither_blocks_the_agent_nor_fails_livez() {
    let (srv, glance, mut a, _kept) = fixture(common::Backend::Sqlite).await;
    let default = glance.add(FUNCTION, false, false);
    glance.hold(&default);
    a.settings.cleaning =
        accel_agent::cleaning::validate(vec![accel_agent::cleaning::CleaningFile {
            method: "fpga-default".into(),
            image: Some(default.clone()),
            timeout_seconds: Some(60),
            ..Default::default()
        }])
        .unwrap();
    // A second card, whose region the test releases.
    a.settings.driver.fake.push(fake_fpga());
    a.settings.interval_seconds = 1;
    a.settings.program_interval = Duration::from_millis(50);
    let limit = Duration::from_millis(300);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap();
    let node = accel_agent::Node::builder(a.settings.clone())
        .metrics(listener)
        .stale_after(limit)
        .build()
        .unwrap();
    let health = node.health().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(node.run(async {
        let _ = stopped.await;
    }));

    // Card 1's region is released and its cleaning starts: its image is held.
    let card1 = report::provider_uuid(&format!("{NODE}_00fa:01:00.0_region0"));
    let consumer = "0c5a7a3e-2d0b-4f7e-9d8c-1b2a3c4d5e70";
    let path = format!("/allocations/{consumer}");
    let body = json!({
        "allocations": {card1.clone(): {"resources": {"CUSTOM_ACCELERATOR_FPGA": 1}}},
        "project_id": "p", "user_id": "u", "consumer_generation": null,
        "consumer_type": "INSTANCE",
    });
    let traits = format!("/resource_providers/{card1}/traits");
    common::eventually(
        Duration::from_secs(20),
        "the cleaning trait reported",
        || async {
            let (_, v) = placement(&srv, reqwest::Method::GET, &traits, None).await;
            v.to_string()
                .contains(accel_agent::cleaning::TRAIT)
                .then_some(())
        },
    )
    .await;
    let (s, v) = placement(&srv, reqwest::Method::PUT, &path, Some(body)).await;
    assert_eq!(s, 204, "{v}");
    let (s, v) = placement(&srv, reqwest::Method::DELETE, &path, None).await;
    assert_eq!(s, 204, "{v}");
    common::eventually(
        Duration::from_secs(20),
        "the default image asked for",
        || async { (glance.asked(&default) == 1).then_some(()) },
    )
    .await;
    let held_since = std::time::Instant::now();
    let before = reports_sent(&health);

    // Meanwhile card 0 is programmed for a bind, and the reports go on.
    let image = glance.add(FUNCTION, true, false);
    srv.create_profile(
        "fn",
        json!([{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": FUNCTION}]),
    )
    .await;
    let arqs = srv.create_arqs("fn").await;
    let inst = instance();
    srv.bind(&arqs, NODE, &report::provider_uuid(&region()), &inst)
        .await;
    let resolved = srv.wait_resolved(&inst).await;
    assert_eq!(resolved[0]["state"], "Bound", "{resolved:?}");
    assert_eq!(glance.downloads(&image), 1);
    common::eventually(Duration::from_secs(20), "two more reports", || async {
        (reports_sent(&health) >= before + 2).then_some(())
    })
    .await;
    assert!(
        held_since.elapsed() > limit * 2,
        "the cleaning outlasted the limit"
    );
    let livez = reqwest::get(format!("http://{port}/livez")).await.unwrap();
    assert_eq!(livez.status(), 200, "{}", livez.text().await.unwrap());
    assert_eq!(glance.downloads(&default), 0, "the cleaning still waits");

    glance.release(&default);
    common::eventually(Duration::from_secs(20), "the region cleaned", || async {
        let v = srv.admin_get("/v2/device_cleanings").await.1;
        let all = v["device_cleanings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        all.iter()
            .any(|c| c["name"] == "cn1_00fa:01:00.0_region0" && c["state"] == "clean")
            .then_some(())
    })
    .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    srv.stop().await;
}
