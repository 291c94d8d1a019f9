//! Issue 45's DRA figure: a prepare that creates a MIG instance, and its unprepare,
//! through the agent's real DRA path (`accel_k8s::dra::Driver::prepare` and
//! `unprepare`, as `NodePrepareResources` and `NodeUnprepareResources` call them):
//! the claim read over HTTP from the stand-in API server, the node's devices
//! discovered (fake sysfs and the fake NVML's H100 in MIG mode, loaded through the
//! agent's NVML code), whatever the prepare records on the server (the real server,
//! SQLite; at the commit this was written a MIG device's claim is not recorded there
//! yet, docs/kubernetes.md), the GPU instance and compute instance created at the
//! claim's placement through the fake `libnvidia-ml.so` (checkpointed), the CDI spec
//! written; and the reverse.
//!
//! Each round prepares a new claim of a `1g.10gb` at placement `round % 7`, after
//! unpreparing the claim that held that placement seven rounds before; so from round
//! 7 on the GPU always holds six other instances while one is made, as a busy node's
//! does. Both calls are timed.
//!
//! `cargo bench -p accel-agent --bench dra_mig_prepare [-- ROUNDS]` (default 700). The
//! fake NVML answers in microseconds where a real GPU's create takes what the driver
//! takes: this measures accel's part of the path, not NVIDIA's.

use accel_agent::dra::KubeApi;
use accel_k8s::dra::ClaimRef;
use accel_k8s::testing::kube::{claim, claim_api, Claims};
use accel_k8s::testing::{bench_count, latency_summary};
use accel_testkit::server::{Backend, TestServer};
use std::sync::Arc;
use std::time::Instant;

const NODE: &str = "mig-bench-node";
const H100: &str = "0000:3b:00.0";
/// `1g.10gb`'s placements on an H100 (starts 0 to 6, one memory slice each).
const PLACEMENTS: u32 = 7;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = bench_count(700);
    let server = TestServer::spawn(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (node, _nvml) =
        accel_agent::testing::dra_mig_node(&server.accel, NODE, dir.path(), "").await;

    let claims: Claims = Arc::default();
    let (addr, _stop) = accel_testkit::serve_fake(claim_api(claims.clone())).await;
    let driver = node
        .dra(KubeApi::new(&format!("http://{addr}"), None).unwrap())
        .unwrap()
        .driver();
    let gpu = accel_k8s::dra::device_name(NODE, H100);
    let claim_ref = |round: usize| ClaimRef {
        namespace: "default".into(),
        uid: format!("00000000-0000-4000-8000-{round:012x}"),
        name: format!("c{round}"),
    };
    let live = || node.agent().partitions().checkpoint().unwrap().mig.len();

    let (mut prepares, mut unprepares) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let at = round as u32 % PLACEMENTS;
        if round >= PLACEMENTS as usize {
            let old = claim_ref(round - PLACEMENTS as usize);
            let started = Instant::now();
            driver.unprepare(&old).await.unwrap();
            unprepares.push(started.elapsed());
            claims
                .lock()
                .unwrap()
                .remove(&format!("default/{}", old.name));
        }
        let c = claim_ref(round);
        claims.lock().unwrap().insert(
            format!("default/{}", c.name),
            claim(
                &c.name,
                &c.uid,
                &[("accel.dev", NODE, format!("{gpu}-mig-1g10gb-19-{at}"))],
            ),
        );
        let started = Instant::now();
        let prepared = driver.prepare(&c).await;
        prepares.push(started.elapsed());
        let prepared = prepared.unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(prepared.len(), 1, "round {round}");
    }
    // The work was done: the last seven claims' instances exist, one each.
    assert_eq!(live(), rounds.min(PLACEMENTS as usize));
    latency_summary("DRA prepare, MIG 1g.10gb created (SQLite)", prepares);
    latency_summary("DRA unprepare, MIG 1g.10gb destroyed", unprepares);
    server.stop().await;
}
