//! Issue 6's second latency goal through the real agent path: a device unplugged (its
//! sysfs directory removed) or plugged back, until kubelet's ListAndWatch stream of the
//! pooled plugin carries the change. The plugins run as `accel agent` runs
//! them (`accel_k8s::run` over [`accel_agent::node::AgentDevices`], default intervals: presence every
//! 50 ms, full rediscovery every 10 s), over a fake sysfs tree with 8 GPUs and
//! `EXTRA` (default 1016) functions nothing claims, 1024 in all.
//!
//! `cargo bench -p accel-agent --bench k8s_watch [-- ROUNDS]` (default 50 unplug and
//! 50 re-plug events).

use accel_agent::config::Settings;
use accel_agent::testing::{bdf, FakeSysfs};
use accel_agent::Node;
use accel_k8s::config::KubernetesConfig;
use accel_k8s::proto::deviceplugin as dp;
use accel_k8s::testing::{bench_count, latency_summary, list_and_watch};
use std::time::Instant;

const GPU_BUSES: [u8; 8] = [0x17, 0x31, 0x4b, 0x65, 0x98, 0xb1, 0xca, 0xe3];

fn plug(fs: &FakeSysfs, i: usize) {
    fs.function(&bdf(GPU_BUSES[i], 0, 0), 0x10de, 0x20b0, 0x030200)
        .numa(0)
        .driver("vfio-pci")
        .iommu_group(40 + i as u32);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = bench_count(50);
    let extra: usize = std::env::var("EXTRA")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1016);
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    for i in 0..GPU_BUSES.len() {
        plug(&fs, i);
    }
    // Functions no driver claims (a bridge-class device per slot), so a discovery
    // walks a host-sized tree.
    for k in 0..extra {
        let a = format!("0001:{:02x}:{:02x}.{}", k / 256, (k / 8) % 32, k % 8);
        fs.function(&a, 0x8086, 0x1234, 0x060400);
    }
    let mut kubernetes = KubernetesConfig::from_toml(
        "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\ncapacity = 1\n\
         [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n",
    )
    .unwrap();
    kubernetes.cdi_dir = dir.path().join("cdi");
    let settings = Settings::new("http://127.0.0.1:9", "bench-node", &fs.root);
    let source = Node::builder(settings).build().unwrap().devices();
    let kubelet = dir.path().join("device-plugins");
    std::fs::create_dir_all(&kubelet).unwrap();
    let options = accel_k8s::Options {
        kubelet_dir: kubelet.clone(),
        pod_resources_socket: dir.path().join("absent.sock"),
        ..accel_k8s::Options::new("bench-node")
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(accel_k8s::run(kubernetes, source, options, async {
        let _ = stopped.await;
    }));
    // The pooled plugin: one virtual id per device with a free slot (an unplugged
    // device's instance-level plugin stops, so its own stream would just end).
    let sock = kubelet.join(accel_k8s::kubelet::socket_name("accel.dev/gpu"));
    let mut stream = list_and_watch(&sock).await;
    let healthy =
        |m: &dp::ListAndWatchResponse| m.devices.iter().filter(|d| d.health == "Healthy").count();
    let mut first = stream.message().await.unwrap().unwrap();
    while healthy(&first) < GPU_BUSES.len() {
        first = stream.message().await.unwrap().unwrap();
    }
    let mut unplug = Vec::new();
    let mut replug = Vec::new();
    for _ in 0..rounds {
        for (plugged, times) in [(false, &mut unplug), (true, &mut replug)] {
            let t = Instant::now();
            for (i, &bus) in GPU_BUSES.iter().enumerate() {
                if plugged {
                    plug(&fs, i);
                } else {
                    fs.remove(&bdf(bus, 0, 0));
                }
            }
            let want = if plugged { GPU_BUSES.len() } else { 0 };
            loop {
                let msg = stream.message().await.unwrap().unwrap();
                if healthy(&msg) == want {
                    break;
                }
            }
            times.push(t.elapsed());
        }
    }
    latency_summary("8 GPUs unplugged -> pool offers none", unplug);
    latency_summary("8 GPUs plugged back -> pool offers 8", replug);
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
