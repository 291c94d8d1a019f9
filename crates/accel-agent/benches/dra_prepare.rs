//! Issue 30's latency goal: `NodePrepareResources` for one claim, one claim after
//! another, as kubelet calls it: over the DRA socket (v1), the claim read from a
//! stand-in API server over HTTP, the node's devices discovered (fake sysfs, 8 GPUs),
//! the devices claimed in Placement through the real server on SQLite, the CDI spec
//! written. Each round prepares a new claim and then unprepares it (untimed), so every
//! prepare allocates.
//!
//! `cargo bench -p accel-agent --bench dra_prepare [-- ROUNDS]` (default 300).

use accel_agent::config::{NodeProvider, Settings};
use accel_agent::dra::KubeApi;
use accel_agent::testing::{bdf, FakeSysfs};
use accel_agent::Node;
use accel_k8s::config::KubernetesConfig;
use accel_k8s::dra::{self, serve};
use accel_k8s::proto::dra_v1 as v1;
use accel_k8s::testing::{bench_count, latency_summary};
use accel_testkit::server::{Backend, TestServer};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

const NODE: &str = "bench-node";
const GPU_BUSES: [u8; 8] = [0x17, 0x31, 0x4b, 0x65, 0x98, 0xb1, 0xca, 0xe3];

type Claims = Arc<Mutex<HashMap<String, Value>>>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = bench_count(300);
    let server = TestServer::spawn(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    for (i, bus) in GPU_BUSES.iter().enumerate() {
        fs.function(&bdf(*bus, 0, 0), 0x10de, 0x20b0, 0x030200)
            .numa(0)
            .driver("vfio-pci")
            .iommu_group(40 + i as u32);
    }
    let mut kubernetes = KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    kubernetes.cdi_dir = dir.path().join("cdi");
    let settings = Settings {
        drivers: Some(vec!["nvidia".into()]),
        node_provider: NodeProvider::Own,
        kubernetes: Some(kubernetes.clone()),
        ..Settings::new(&server.accel, NODE, &fs.root)
    };
    let node = Node::builder(settings).build().unwrap();
    let agent = node.agent();
    agent.check_node().await.unwrap();
    assert_eq!(agent.step().await.unwrap().added, GPU_BUSES.len() as i64);

    let claims: Claims = Arc::default();
    let c2 = claims.clone();
    let app = axum::Router::new().route(
        "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}",
        axum::routing::get(
            move |axum::extract::Path((_ns, name)): axum::extract::Path<(String, String)>| {
                let c = c2
                    .lock()
                    .unwrap()
                    .get(&name)
                    .cloned()
                    .unwrap_or(Value::Null);
                async move { axum::Json(c) }
            },
        ),
    );
    let (addr, _stop) = accel_testkit::serve_fake(app).await;
    let client = accel_agent::client::Client::new(&server.accel, "admin").unwrap();
    let api = KubeApi::new(&format!("http://{addr}"), None).unwrap();
    let driver = node.dra(api).unwrap().driver();
    let (registry, plugins) = (dir.path().join("registry"), dir.path().join("plugins"));
    let (r2, p2) = (registry.clone(), plugins.clone());
    tokio::spawn(async move { serve::serve(driver, &r2, &p2, std::future::pending()).await });
    let socket = serve::dra_socket(&plugins, "accel.dev");
    let channel = loop {
        if let Ok(c) = accel_k8s::kubelet::connect(&socket).await {
            break c;
        }
        tokio::task::yield_now().await;
    };
    let mut kubelet = v1::dra_plugin_client::DraPluginClient::new(channel);
    let mut took = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let uid = format!("00000000-0000-4000-8000-{round:012x}");
        let address = bdf(GPU_BUSES[round % GPU_BUSES.len()], 0, 0);
        let name = format!("c{round}");
        claims.lock().unwrap().insert(
            name.clone(),
            json!({"metadata": {"uid": uid, "name": name, "namespace": "default"},
                "status": {"allocation": {"devices": {"results": [{"request": "gpu",
                "driver": "accel.dev", "pool": NODE, "device": dra::device_name(NODE, &address)}]}}}}),
        );
        let claim = v1::Claim {
            namespace: "default".into(),
            uid: uid.clone(),
            name,
        };
        let started = Instant::now();
        let got = kubelet
            .node_prepare_resources(v1::NodePrepareResourcesRequest {
                claims: vec![claim],
            })
            .await
            .unwrap()
            .into_inner();
        took.push(started.elapsed());
        assert_eq!(got.claims[&uid].error, "", "round {round}");
        client.unprepare_claim(NODE, &uid).await.unwrap();
    }
    latency_summary("NodePrepareResources, one claim (SQLite)", took);
    server.stop().await;
}
