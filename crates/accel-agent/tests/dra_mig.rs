//! Issue 45 items 3 and 4, the Kubernetes half: a MIG-mode H100 (the fake NVML, whose
//! geometry comes from `nvidia-smi mig -lgip/-lgipp` captures and which refuses
//! overlapping placements) in the node's ResourceSlices and in DRA prepares. The whole
//! agent path: its discovery through the real NVML code, the real server (SQLite),
//! the slices written over HTTP by the agent's Kubernetes client to the stand-in API
//! server (with and without partitionable devices), which keeps what it was sent for
//! scripts/dra-check.sh's schema check.

use accel_agent::dra::KubeApi;
use accel_agent::testing::FakeNvml;
use accel_agent::Node;
use accel_k8s::dra::slices::Published;
use accel_k8s::dra::ClaimRef;
use accel_k8s::testing::kube::{self, claim, claim_api, slice_api, Claims, SliceStore};
use accel_testkit::server::{Backend, TestServer};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

const NODE: &str = "mig-node";
const H100: &str = "0000:3b:00.0";

/// A node with one H100 in MIG mode, reported to `server`.
async fn node(server: &TestServer, dir: &Path) -> (Node, FakeNvml) {
    node_with(server, dir, "").await
}

/// [`node`], with more lines of the fake NVML's configuration (failures to inject).
async fn node_with(server: &TestServer, dir: &Path, more: &str) -> (Node, FakeNvml) {
    accel_agent::testing::dra_mig_node(&server.accel, NODE, dir, more).await
}

fn slices(store: &SliceStore) -> Vec<Value> {
    store.lock().unwrap().items.values().cloned().collect()
}

fn devices(store: &SliceStore) -> Vec<Value> {
    slices(store)
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn gpu_name() -> String {
    accel_k8s::dra::device_name(NODE, H100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mig_gpu_publishes_counters_where_served_and_its_mig_devices_where_not() {
    let server = TestServer::spawn(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (node, _nvml) = node(&server, dir.path()).await;
    let gpu = gpu_name();

    // A 1.36 cluster: the dry runs keep the counters.
    let store = kube::store(false);
    let (addr, _stop) = accel_testkit::serve_fake(slice_api(store.clone())).await;
    let mut p = node
        .dra(KubeApi::new(&format!("http://{addr}"), None).unwrap())
        .unwrap()
        .publisher();
    assert_eq!(
        p.step().await.unwrap(),
        Published::Created { generation: 1 }
    );
    let all = slices(&store);
    assert_eq!(all.len(), 2, "{all:#?}");
    let counters: Vec<&Value> = all
        .iter()
        .filter(|s| s["spec"].get("sharedCounters").is_some())
        .collect();
    assert_eq!(counters.len(), 1);
    assert_eq!(counters[0]["spec"]["devices"], Value::Array(vec![]));
    let set = &counters[0]["spec"]["sharedCounters"][0];
    assert_eq!(set["name"], format!("{gpu}-counters"));
    assert_eq!(set["counters"]["memory-slice-7"]["value"], "1");
    let devs = devices(&store);
    let names: Vec<&str> = devs.iter().map(|d| d["name"].as_str().unwrap()).collect();
    for want in [
        gpu.clone(),
        format!("{gpu}-vfio"),
        format!("{gpu}-mig-1g10gb-19-0"),
        format!("{gpu}-mig-1g10gb-19-6"),
        format!("{gpu}-mig-3g40gb-9-4"),
        format!("{gpu}-mig-7g80gb-0-0"),
    ] {
        assert!(names.contains(&want.as_str()), "{want} not in {names:?}");
    }
    assert!(devs
        .iter()
        .all(|d| d["consumesCounters"][0]["counterSet"] == set["name"]));
    // Every profile NVML lists at every placement it lists, and the two whole forms.
    let found = node.agent().discover();
    let geometry = found.devices[0].partitions.clone().unwrap();
    let placements: usize = geometry.profiles.iter().map(|p| p.placements.len()).sum();
    eprintln!(
        "{} profiles, {placements} placements",
        geometry.profiles.len()
    );
    assert_eq!(devs.len(), 2 + placements);
    assert!(all
        .iter()
        .all(|s| s["spec"]["pool"]["resourceSliceCount"] == 2));
    assert_eq!(p.step().await.unwrap(), Published::Unchanged);

    // A 1.35 cluster (counters dropped): only the MIG devices that exist.
    let store = kube::store_without_counters();
    let (addr, _stop) = accel_testkit::serve_fake(slice_api(store.clone())).await;
    let mut p = node
        .dra(KubeApi::new(&format!("http://{addr}"), None).unwrap())
        .unwrap()
        .publisher();
    p.step().await.unwrap();
    assert_eq!(devices(&store), Vec::<Value>::new());
    let made = node
        .agent()
        .partitions()
        .create(
            H100.parse().unwrap(),
            19,
            accel_api::partitions::MigPlacement { start: 2, size: 1 },
            "operator",
        )
        .unwrap();
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 2 }
    );
    let devs = devices(&store);
    assert_eq!(devs.len(), 1, "{devs:#?}");
    assert_eq!(devs[0]["name"], format!("{gpu}-mig-1g10gb-19-2"));
    assert_eq!(devs[0]["attributes"]["uuid"]["string"], made.uuid.as_str());
    assert!(devs[0].get("consumesCounters").is_none());
    server.stop().await;
}

/// The env a claim's CDI spec gives its container.
fn env(dir: &Path, uid: &str) -> Vec<String> {
    let path = dir.join(format!("cdi/accel-accel.dev-gpu-{uid}.json"));
    let spec: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    spec["devices"][0]["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_makes_the_mig_device_a_conflicting_claim_fails_and_unprepare_frees_it() {
    let server = TestServer::spawn(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    // NVML refuses the first instance: the claim fails with NVML's code, and what the
    // server was asked to hold for it is freed again.
    let (node, _nvml) = node_with(
        &server,
        dir.path(),
        "fail call=nvmlDeviceCreateGpuInstanceWithPlacement code=INSUFFICIENT_RESOURCES once",
    )
    .await;
    let gpu_rp = accel_store::accelerator::report::provider_uuid(&format!("{NODE}_{H100}"));
    let holders = || async {
        let l = server
            .store
            .partitions()
            .ledger(&gpu_rp)
            .await
            .unwrap()
            .unwrap();
        l.holders
            .iter()
            .map(|h| h.consumer.clone())
            .collect::<Vec<_>>()
    };
    let gpu = gpu_name();
    let claims: Claims = Arc::default();
    let uids = [
        "6f1c1a52-0000-4d7f-9a39-000000000001",
        "6f1c1a52-0000-4d7f-9a39-000000000002",
        "6f1c1a52-0000-4d7f-9a39-000000000003",
    ];
    let wants = [
        format!("{gpu}-mig-1g10gb-19-0"),
        format!("{gpu}-mig-1g10gb-19-1"),
        format!("{gpu}-mig-2g20gb-14-0"),
    ];
    for (i, (uid, device)) in uids.iter().zip(&wants).enumerate() {
        claims.lock().unwrap().insert(
            format!("default/c{i}"),
            claim(
                &format!("c{i}"),
                uid,
                &[("accel.dev", NODE, device.clone())],
            ),
        );
    }
    let (addr, _stop) = accel_testkit::serve_fake(claim_api(claims)).await;
    let driver = node
        .dra(KubeApi::new(&format!("http://{addr}"), None).unwrap())
        .unwrap()
        .driver();
    let c = |i: usize| ClaimRef {
        namespace: "default".into(),
        uid: uids[i].into(),
        name: format!("c{i}"),
    };
    let e = driver.prepare(&c(0)).await.unwrap_err().to_string();
    assert!(
        e.contains(&format!("creating MIG device {}", wants[0])),
        "{e}"
    );
    assert!(e.contains("NVML_ERROR_INSUFFICIENT_RESOURCES"), "{e}");
    assert!(holders().await.is_empty());
    let mut uuids = Vec::new();
    for i in 0..2 {
        let prepared = driver.prepare(&c(i)).await.unwrap();
        assert_eq!(prepared[0].device_name, wants[i]);
        let env = env(dir.path(), uids[i]);
        let nvidia = env
            .iter()
            .find_map(|e| e.strip_prefix("NVIDIA_VISIBLE_DEVICES="))
            .unwrap_or_else(|| panic!("no NVIDIA_VISIBLE_DEVICES in {env:?}"))
            .to_owned();
        assert!(nvidia.starts_with("MIG-"), "{nvidia}");
        assert!(
            env.contains(&format!("ACCEL_VISIBLE_DEVICES={nvidia}")),
            "{env:?}"
        );
        uuids.push(nvidia);
    }
    assert_ne!(uuids[0], uuids[1]);
    // Prepared again (kubelet's replay after a restart): the same device.
    driver.prepare(&c(0)).await.unwrap();
    assert!(env(dir.path(), uids[0]).contains(&format!("NVIDIA_VISIBLE_DEVICES={}", uuids[0])));
    let live = |node: &Node| node.agent().partitions().checkpoint().unwrap().mig.len();
    assert_eq!(live(&node), 2);
    assert_eq!(
        holders().await,
        vec![uids[0].to_owned(), uids[1].to_owned()]
    );

    // A 2g over memory slices 0 and 1: both taken. The server's ledger refuses it
    // before NVML is asked (the two claims are held there at their placements).
    let taken = "MIG 2g.20gb at memory slice 0 of device 0000:3b:00.0 is held by another pod";
    let e = driver.prepare(&c(2)).await.unwrap_err().to_string();
    assert!(e.contains(taken), "{e}");
    assert_eq!(live(&node), 2);
    driver.unprepare(&c(0)).await.unwrap();
    assert_eq!(live(&node), 1);
    let e = driver.prepare(&c(2)).await.unwrap_err().to_string();
    assert!(e.contains(taken), "{e}");
    driver.unprepare(&c(1)).await.unwrap();
    assert_eq!(live(&node), 0);
    driver.prepare(&c(2)).await.unwrap();
    let held = node.agent().partitions().checkpoint().unwrap().mig;
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].holder, uids[2]);
    assert_eq!(
        (held[0].instance.profile_id, held[0].instance.placement.size),
        (14, 2)
    );
    // The agent's start-up accounting (after a restart): it asks the server what its
    // ledgers hold; the claim's 2g.20gb is held, so it is kept as it is.
    let before = held[0].instance.clone();
    node.agent().recover_partitions().await.unwrap();
    let after = node.agent().partitions().checkpoint().unwrap().mig;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(
        (after[0].holder.as_str(), &after[0].instance),
        (uids[2], &before)
    );
    // The claim freed on the server while the agent was away (its unprepare never came
    // through): at the next start no one holds the 2g this agent made, so it goes.
    assert!(server.store.claims().unprepare(uids[2]).await.unwrap());
    node.agent().recover_partitions().await.unwrap();
    assert_eq!(live(&node), 0);
    // Unprepared twice: the second finds nothing to release.
    driver.unprepare(&c(2)).await.unwrap();
    driver.unprepare(&c(2)).await.unwrap();
    assert_eq!(live(&node), 0);
    server.stop().await;
}
