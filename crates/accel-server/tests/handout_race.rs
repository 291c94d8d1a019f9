//! Tenant isolation under a race (issue 41): one device with a cleaning rule is
//! released and at once asked for again, round after round, through each way in: a
//! bind naming its provider, a Placement claim, a DRA prepare and a device plugin's
//! Allocate. The real server, the agent's real cleaning loop (`Agent::run`, its long
//! poll) and, for the device plugins, their real run loop against a fake kubelet. The
//! cleaner is a shell script that writes its start and end (wall-clock nanoseconds)
//! to a log; the test writes down when each hand-out was answered and when its
//! release was asked for. Every round must then read hold, cleaning, hold, cleaning:
//! no hand-out overlaps a cleaning, and there are exactly as many cleanings as
//! releases of a held device. Refused attempts are counted and printed.
//!
//! Rounds per path: `ACCEL_RACE_ROUNDS` (default 1,000 on SQLite, 100 on PostgreSQL
//! and MariaDB, whose runs share CI's two cores with the rest of the suite).

mod common;

use accel_agent::cleaning::{validate, CleaningFile};
use accel_agent::config::Settings;
use accel_agent::kubernetes::ServerUsage;
use accel_agent::{Agent, Node};
use accel_api::agent::ClaimDevices;
use accel_k8s::config::KubernetesConfig;
use accel_k8s::testing::FakeKubelet;
use accel_store::accelerator::report;
use common::accel::{compute_node, placement, workers, Server, TempDb};
use common::{Backend, BACKENDS};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

const NODE: &str = "cn1";
const ADDRESS: &str = "00fa:00:00.0";
const CLASS: &str = "CUSTOM_ACCELERATOR_GPU";

fn rp() -> String {
    report::provider_uuid(&format!("{NODE}_{ADDRESS}"))
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn rounds(backend: Backend) -> usize {
    if let Ok(n) = std::env::var("ACCEL_RACE_ROUNDS") {
        return n.parse().expect("ACCEL_RACE_ROUNDS is a number");
    }
    if matches!(backend, Backend::Sqlite) {
        1000
    } else {
        100
    }
}

/// The cleaner: logs `start <ns>`, works for 5 ms, logs `end <ns>`.
const CLEANER: &str = r#"echo "start $(date +%s%N)" >> "$(dirname "$0")/log"
sleep 0.005
echo "end $(date +%s%N)" >> "$(dirname "$0")/log"
"#;

/// The agent's settings: the `fake` driver's one GPU, the recording cleaner's rule,
/// and a device plugin configuration of capacity 1 (used by the Allocate path only).
fn settings(server: &str, dir: &Path) -> Settings {
    std::fs::write(dir.join("clean.sh"), CLEANER).unwrap();
    let mut s =
        accel_agent::testing::FakeCleaner::new(dir.join("unused")).settings(server, NODE, 10);
    s.cleaning = validate(vec![CleaningFile {
        method: "command".into(),
        command: vec![
            "sh".into(),
            dir.join("clean.sh").to_string_lossy().into_owned(),
            "{address}".into(),
        ],
        timeout_seconds: Some(10),
        ..Default::default()
    }])
    .unwrap();
    let mut k = KubernetesConfig::from_toml(
        "[[kubernetes.configurations]]\nname = \"gpu\"\ncapacity = 1\n\
         [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n",
    )
    .unwrap();
    k.cdi_dir = dir.join("cdi");
    // Longer than any grant's save: a slot is not reclaimed before kubelet lists its pod.
    // A release is noticed at the next Allocate anyway (its pod no longer listed).
    k.reclaim_grace = Duration::from_secs(5);
    s.kubernetes = Some(k);
    s
}

/// The cleanings the cleaner logged, as `(start, end)`; one still running has no end.
fn cleanings(dir: &Path) -> Vec<(u128, Option<u128>)> {
    let text = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    let mut out: Vec<(u128, Option<u128>)> = Vec::new();
    for line in text.lines() {
        let (what, at) = line.split_once(' ').expect("a log line");
        let at: u128 = at.parse().expect("nanoseconds");
        match what {
            "start" => out.push((at, None)),
            "end" => {
                let last = out.last_mut().expect("an end after a start");
                assert!(last.1.is_none(), "two ends for one start: {text}");
                last.1 = Some(at);
            }
            _ => panic!("unknown log line {line:?}"),
        }
    }
    out
}

/// One way in: hand the device to a new holder (`Ok` once it holds it) and let go.
enum Path4 {
    Bind,
    Placement,
    Dra(accel_agent::client::Client),
    Plugin(Box<(FakeKubelet, accel_k8s::testing::Registered, String)>),
}

impl Path4 {
    fn name(&self) -> &'static str {
        match self {
            Path4::Bind => "bind naming the provider",
            Path4::Placement => "Placement claim",
            Path4::Dra(_) => "DRA prepare",
            Path4::Plugin(_) => "device-plugin Allocate",
        }
    }

    /// Asks once; answers the holder's handle when the device was handed out, else
    /// the refusal's kind.
    async fn acquire(&self, srv: &Server, n: usize) -> Result<String, String> {
        let holder = format!("00000000-0000-4000-8000-{n:012}");
        match self {
            Path4::Bind => {
                let arqs = srv.create_arqs("gpu").await;
                srv.bind(&arqs, NODE, &rp(), &holder).await;
                let resolved = srv.wait_resolved(&holder).await;
                let state = resolved[0]["state"].as_str().unwrap().to_owned();
                if state == "Bound" {
                    return Ok(arqs[0].clone());
                }
                assert_eq!(state, "BindFailed", "{resolved:?}");
                delete_arq(srv, &arqs[0]).await;
                Err(state)
            }
            Path4::Placement => {
                let (s, v) = placement(
                    srv,
                    reqwest::Method::PUT,
                    &format!("/allocations/{holder}"),
                    Some(json!({
                        "allocations": {rp(): {"resources": {CLASS: 1}}},
                        "project_id": "p", "user_id": "u", "consumer_generation": null,
                        "consumer_type": "INSTANCE",
                    })),
                )
                .await;
                match s {
                    204 => Ok(holder),
                    409 => Err("409".into()),
                    _ => panic!("claim: {s} {v}"),
                }
            }
            Path4::Dra(client) => {
                match client
                    .prepare_claim(
                        NODE,
                        &holder,
                        &ClaimDevices::whole(vec![ADDRESS.to_owned()]),
                    )
                    .await
                {
                    Ok(()) => Ok(holder),
                    Err(e) if e.status() == Some(409) => Err("409".into()),
                    Err(e) => panic!("prepare: {e}"),
                }
            }
            Path4::Plugin(p) => match p.1.allocate(&[p.2.as_str()]).await {
                Ok(_) => {
                    // Kubelet lists the pod's container: the slot stays held.
                    p.0.set_pods(vec![(resource_of(&p.2), vec![p.2.clone()])]);
                    Ok(p.2.clone())
                }
                Err(e) => Err(e.message().split(':').next().unwrap_or_default().to_owned()),
            },
        }
    }

    async fn release(&self, srv: &Server, handle: &str) {
        match self {
            Path4::Bind => delete_arq(srv, handle).await,
            Path4::Placement => {
                let (s, v) = placement(
                    srv,
                    reqwest::Method::DELETE,
                    &format!("/allocations/{handle}"),
                    None,
                )
                .await;
                assert_eq!(s, 204, "{v}");
            }
            Path4::Dra(client) => client.unprepare_claim(NODE, handle).await.unwrap(),
            // The pod ends: kubelet no longer lists it. The next Allocate of its id
            // finds the holder gone (or the reclaimer, after the grace, does) and the
            // save that frees the slot releases the device.
            Path4::Plugin(p) => p.0.set_pods(vec![]),
        }
    }
}

/// The instance-level resource of a slot id `<instance>-<index>`.
fn resource_of(id: &str) -> String {
    let (instance, _) = id.rsplit_once('-').unwrap();
    format!("accel.dev/{instance}")
}

async fn delete_arq(srv: &Server, arq: &str) {
    let (s, v) = srv
        .nova(
            reqwest::Method::DELETE,
            &format!("/v2/accelerator_requests?arqs={arq}"),
            None,
        )
        .await;
    assert_eq!(s, 204, "{v}");
}

/// Runs `rounds` of hold, release and immediate re-acquisition through `path`, then
/// checks the timeline against the cleaner's log.
async fn race(srv: &Server, dir: &Path, path: &Path4, rounds: usize, first: usize) {
    let before = cleanings(dir).len();
    let mut holds: Vec<(u128, u128)> = Vec::new();
    let mut refused: std::collections::BTreeMap<String, usize> = Default::default();
    let mut n = first;
    let started = std::time::Instant::now();
    for _ in 0..rounds {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let handle = loop {
            n += 1;
            match path.acquire(srv, n).await {
                Ok(h) => break h,
                Err(kind) => *refused.entry(kind).or_default() += 1,
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{}: the device was not handed out again within 20 s",
                path.name()
            );
            // kubelet asks again at once too; a device plugin's refusal is local and
            // takes microseconds, so that path waits a millisecond between asks.
            if matches!(path, Path4::Plugin(_)) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            } else {
                tokio::task::yield_now().await;
            }
        };
        let held = now_ns();
        let released = now_ns();
        path.release(srv, &handle).await;
        holds.push((held, released));
    }
    // The last release's cleaning ends.
    common::eventually(
        Duration::from_secs(20),
        "a cleaning for every release",
        || async {
            let c = cleanings(dir);
            if c.len() >= before + rounds && c.iter().all(|(_, e)| e.is_some()) {
                Ok(())
            } else {
                Err(format!(
                    "{}: {} cleanings logged for {rounds} releases of a held device",
                    path.name(),
                    c.len() - before
                ))
            }
        },
    )
    .await;
    let cleans: Vec<(u128, u128)> = cleanings(dir)[before..]
        .iter()
        .map(|(s, e)| (*s, e.unwrap()))
        .collect();
    assert_eq!(
        cleans.len(),
        holds.len(),
        "{}: {} cleanings for {} releases of a held device",
        path.name(),
        cleans.len(),
        holds.len()
    );
    let around = |i: usize| {
        let r = i.saturating_sub(2)..(i + 2).min(holds.len());
        format!(
            "holds {:?}, cleanings {:?}, refusals {refused:?}",
            &holds[r.clone()],
            &cleans[r]
        )
    };
    for (i, (h, c)) in holds.iter().zip(&cleans).enumerate() {
        assert!(
            h.1 < c.0,
            "{}: round {i}: cleaning started at {} before the hold's release at {}; {}",
            path.name(),
            c.0,
            h.1,
            around(i)
        );
        if let Some(next) = holds.get(i + 1) {
            assert!(
                c.1 < next.0,
                "{}: round {}: handed out at {} while the cleaning ran ({}..{}); {}",
                path.name(),
                i + 1,
                next.0,
                c.0,
                c.1,
                around(i)
            );
        }
    }
    println!(
        "{}: {rounds} rounds, {} cleanings, refused attempts {refused:?}, {:.1} s",
        path.name(),
        cleans.len(),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hand_out_overlaps_a_cleaning_and_every_release_cleans() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, Some(workers(None))).await;
        compute_node(&srv, NODE).await;
        let dir = tempfile::tempdir().unwrap();
        let settings = settings(&srv.accel, dir.path());
        let agent = Agent::new(settings.clone()).unwrap();
        agent.step().await.unwrap();
        let (stop_agent, agent_stopped) = oneshot::channel::<()>();
        let agent_task = tokio::spawn(agent.run(async {
            let _ = agent_stopped.await;
        }));
        srv.create_profile("gpu", json!([{format!("resources:{CLASS}"): "1"}]))
            .await;
        let rounds = rounds(backend);

        race(&srv, dir.path(), &Path4::Bind, rounds, 0).await;
        race(&srv, dir.path(), &Path4::Placement, rounds, 1_000_000).await;
        let client = accel_agent::client::Client::new(&srv.accel, &settings.token).unwrap();
        race(&srv, dir.path(), &Path4::Dra(client), rounds, 2_000_000).await;

        // The device plugins, as `accel agent` runs them.
        let kdir: PathBuf = dir.path().join("kubelet");
        std::fs::create_dir(&kdir).unwrap();
        let kubelet = FakeKubelet::start(&kdir);
        let source = Node::builder(settings.clone()).build().unwrap().devices();
        let record = Arc::new(ServerUsage::new(&settings.server, &settings.token, NODE));
        let options = accel_k8s::Options {
            kubelet_dir: kubelet.dir.clone(),
            pod_resources_socket: kubelet.pod_resources_socket(),
            device_interval: Duration::from_millis(50),
            watch_interval: Duration::from_millis(10),
            reclaim_interval: Duration::from_millis(10),
            ..accel_k8s::Options::new(NODE)
        };
        let (stop_plugins, plugins_stopped) = oneshot::channel::<()>();
        let plugins = tokio::spawn(accel_k8s::run_with(
            settings.kubernetes.clone().unwrap(),
            source,
            record,
            options,
            async {
                let _ = plugins_stopped.await;
            },
        ));
        let instance = format!("gpu-{}", accel_k8s::device::instance_hash(NODE, ADDRESS));
        let plugin = kubelet.plugin(&format!("accel.dev/{instance}")).await;
        let id = format!("{instance}-0");
        race(
            &srv,
            dir.path(),
            &Path4::Plugin(Box::new((kubelet, plugin, id))),
            rounds,
            3_000_000,
        )
        .await;

        stop_plugins.send(()).unwrap();
        plugins.await.unwrap().unwrap();
        stop_agent.send(()).unwrap();
        agent_task.await.unwrap();
        srv.stop().await;
    }
}
