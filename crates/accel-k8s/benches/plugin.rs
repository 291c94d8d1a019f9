//! The plugins' two latency goals (issue 6), measured over their unix sockets as
//! kubelet reaches them:
//!
//! - Allocate: 8 devices of capacity 4; a pooled Allocate of one and of four virtual
//!   ids, and an instance-level Allocate of one slot, each released (reclaimed, not
//!   timed) before the next; p50 / p99 / max per kind.
//! - A device change visible in ListAndWatch: the devices turn unhealthy / healthy
//!   again in the table, time until the instance plugin's stream carries it; and the
//!   same through `accel_k8s::run` (a source that flips, polled every 20 ms), which
//!   adds the polling delay.
//!
//! `cargo bench -p accel-k8s --bench plugin [-- N]` (N Allocates per kind, default 5000).

use accel_k8s::config::{Configuration, KubernetesConfig, Selector};
use accel_k8s::kubelet::{connect, socket_name, Registrar};
use accel_k8s::proto::deviceplugin as dp;
use accel_k8s::testing::{bench_count, latency_summary, list_and_watch};
use accel_k8s::{Device, DeviceSource, Shared, SlotTable};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

fn device(i: usize, healthy: bool) -> Device {
    Device {
        id: format!("0000:{:02x}:00.0", 0x17 + i),
        device_type: "GPU".into(),
        vendor: 0x10de,
        product: 0x20b0,
        model: "A100".into(),
        traits: vec![],
        numa_node: Some((i / 4) as u32),
        healthy,
        pci_addresses: vec![format!("0000:{:02x}:00.0", 0x17 + i)],
        device_nodes: vec![],
        memory_mib: None,
        pcie_root: None,
        partitions: None,
    }
}

/// Eight devices, all healthy or all not.
fn devices(healthy: bool) -> Vec<Device> {
    (0..8).map(|i| device(i, healthy)).collect()
}

fn config() -> KubernetesConfig {
    KubernetesConfig {
        configurations: vec![Configuration {
            name: "gpu".into(),
            capacity: 4,
            selector: Selector::default(),
        }],
        ..KubernetesConfig::default()
    }
}

fn request(ids: &[String]) -> dp::AllocateRequest {
    dp::AllocateRequest {
        container_requests: vec![dp::ContainerAllocateRequest {
            devices_ids: ids.to_vec(),
        }],
    }
}

/// A source whose devices flip health when asked.
struct Flipping(AtomicBool);

impl DeviceSource for Flipping {
    fn devices(&self) -> Vec<Device> {
        devices(self.0.load(Ordering::SeqCst))
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = bench_count(5000);
    let dir = tempfile::tempdir().unwrap();
    let mut table = SlotTable::new("bench-node", &config());
    table.set_devices(&devices(true));
    let instance = table
        .resources()
        .into_iter()
        .find(|r| r.name != "accel.dev/gpu")
        .unwrap();
    let shared = Shared::new(table);
    let mut registrar = Registrar::new(shared.clone(), "accel.dev", dir.path());
    registrar.step().await; // serves every socket (no kubelet.sock: nothing registers)
    let pool_channel = connect(&dir.path().join(socket_name("accel.dev/gpu")))
        .await
        .unwrap();
    let mut pool = dp::device_plugin_client::DevicePluginClient::new(pool_channel);
    let il_channel = connect(&dir.path().join(socket_name(&instance.name)))
        .await
        .unwrap();
    let mut il = dp::device_plugin_client::DevicePluginClient::new(il_channel);
    let short = instance
        .name
        .strip_prefix("accel.dev/")
        .unwrap()
        .to_string();
    let release = || {
        shared.write(|t| {
            let c = t.reclaim(
                &HashSet::new(),
                Instant::now() + Duration::from_secs(3600),
                Duration::ZERO,
            );
            (c, c)
        })
    };

    let kinds: [(&str, Vec<String>, bool); 3] = [
        ("Allocate pool, 1 id", vec!["0".into()], true),
        (
            "Allocate pool, 4 ids (4 distinct devices)",
            (0..4).map(|i| i.to_string()).collect(),
            true,
        ),
        (
            "Allocate instance, 1 slot",
            vec![format!("{short}-0")],
            false,
        ),
    ];
    for (what, ids, is_pool) in kinds {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let r = if is_pool {
                pool.allocate(request(&ids)).await
            } else {
                il.allocate(request(&ids)).await
            };
            v.push(t.elapsed());
            r.unwrap();
            release();
        }
        latency_summary(what, v);
    }

    // Table change -> ListAndWatch message.
    let mut stream = il.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
    stream.next().await.unwrap().unwrap();
    let mut v = Vec::new();
    for k in 0..400 {
        let t = Instant::now();
        shared.write(|tb| {
            let c = tb.set_devices(&devices(k % 2 == 1));
            (c, c)
        });
        let msg = stream.next().await.unwrap().unwrap();
        v.push(t.elapsed());
        let want = if k % 2 == 1 { "Healthy" } else { "Unhealthy" };
        assert!(msg.devices.iter().all(|d| d.health == want));
    }
    latency_summary("device change -> ListAndWatch (table)", v);
    registrar.shutdown();

    // Through run(): the source flips; the loop polls it every 20 ms.
    let dir2 = tempfile::tempdir().unwrap();
    let source = Arc::new(Flipping(AtomicBool::new(true)));
    let options = accel_k8s::Options {
        kubelet_dir: dir2.path().to_path_buf(),
        pod_resources_socket: dir2.path().join("absent.sock"),
        device_interval: Duration::from_millis(20),
        watch_interval: Duration::from_millis(20),
        reclaim_interval: Duration::from_secs(60),
        ..accel_k8s::Options::new("bench-node")
    };
    let cfg = KubernetesConfig {
        cdi_dir: dir2.path().join("cdi"),
        ..config()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(accel_k8s::run(cfg, source.clone(), options, async {
        let _ = stopped.await;
    }));
    let sock = dir2.path().join(socket_name(&instance.name));
    let mut stream = list_and_watch(&sock).await;
    stream.next().await.unwrap().unwrap();
    let mut v = Vec::new();
    for k in 0..100 {
        let t = Instant::now();
        source.0.store(k % 2 == 1, Ordering::SeqCst);
        stream.next().await.unwrap().unwrap();
        v.push(t.elapsed());
    }
    latency_summary("device change -> ListAndWatch (run, 20 ms poll)", v);
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
