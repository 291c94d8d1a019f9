//! Issue 43 item 4: a GPU that turns unhealthy (a fatal PCIe AER error in the fake
//! sysfs, as the kernel counts it) is tainted in the node's ResourceSlice within a
//! second, and untainted when it recovers, without a restart; on a cluster that does
//! not serve taints it is withdrawn and restored instead. The whole agent path: its
//! discovery, the devices VMs hold asked of the real server (SQLite), the slices
//! written over HTTP by the agent's Kubernetes client to the stand-in API server
//! (`accel_k8s::testing::kube`, with and without `DRADeviceTaints`), which keeps
//! what it was sent for scripts/dra-check.sh's schema check.

use accel_agent::config::{NodeProvider, Settings};
use accel_agent::dra::KubeApi;
use accel_agent::testing::{bdf, FakeSysfs};
use accel_agent::Node;
use accel_k8s::config::KubernetesConfig;
use accel_k8s::dra::slices;
use accel_k8s::testing::kube::{self, slice_api, SliceStore};
use accel_testkit::server::{Backend, TestServer};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NODE: &str = "taint-node";

/// The devices of the node's slices: name and taints (null when none).
fn devices(store: &SliceStore) -> Vec<(String, Value)> {
    let st = store.lock().unwrap();
    let mut out: Vec<(String, Value)> = st
        .items
        .values()
        .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .map(|d| (d["name"].as_str().unwrap().to_owned(), d["taints"].clone()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Waits until `want` holds of the slices' devices; answers how long it took.
async fn until(store: &SliceStore, want: impl Fn(&[(String, Value)]) -> bool) -> Duration {
    let mut written = store.lock().unwrap().subscribe();
    let from = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), async {
        while !want(&devices(store)) {
            written.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not reached: {:?}", devices(store)));
    from.elapsed()
}

/// The loop has settled: it listed the slices after its last write (the step its
/// own write's watch event causes), so the change that follows is found by the
/// publisher's health observation at whatever point of its interval, not by that step.
async fn settled(store: &SliceStore) {
    let mut lists = store.lock().unwrap().lists();
    tokio::time::timeout(Duration::from_secs(20), async {
        while *lists.borrow_and_update() < store.lock().unwrap().version() {
            lists.changed().await.unwrap();
        }
    })
    .await
    .expect("the publisher lists its slices after writing them");
}

fn aer(fs: &FakeSysfs, address: &str, fatal: u32) {
    let path = fs
        .root
        .join("bus/pci/devices")
        .join(address)
        .join("aer_dev_fatal");
    std::fs::write(path, format!("Undefined 0\nTOTAL_ERR_FATAL {fatal}\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_gpu_is_tainted_within_a_second_or_withdrawn_where_taints_are_not_served() {
    let server = TestServer::spawn(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let gpus = [bdf(0x17, 0, 0), bdf(0x31, 0, 0)];
    for (i, a) in gpus.iter().enumerate() {
        fs.function(a, 0x10de, 0x20b0, 0x030200)
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
        kubernetes: Some(kubernetes),
        ..Settings::new(&server.accel, NODE, &fs.root)
    };
    let node = Node::builder(settings).build().unwrap();
    node.agent().check_node().await.unwrap();
    assert_eq!(node.agent().step().await.unwrap().added, 2);
    let names: Vec<String> = gpus
        .iter()
        .map(|a| accel_k8s::dra::device_name(NODE, a))
        .collect();

    for drops_taints in [false, true] {
        let store: SliceStore = kube::store(drops_taints);
        let (addr, _api_stop) = accel_testkit::serve_fake(slice_api(store.clone())).await;
        let api = KubeApi::new(&format!("http://{addr}"), None).unwrap();
        let publisher = node.dra(api).unwrap().publisher();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(slices::run(publisher, Duration::from_secs(3600), async {
            let _ = stopped.await;
        }));
        until(&store, |d| {
            d.len() == 2 && d.iter().all(|(_, t)| t.is_null())
        })
        .await;

        settled(&store).await;
        aer(&fs, &gpus[0], 1);
        let took = if drops_taints {
            until(&store, |d| d.len() == 1 && d[0].0 == names[1]).await
        } else {
            until(&store, |d| {
                d.len() == 2
                    && d[0].1[0]["key"] == "accel.dev/unhealthy"
                    && d[0].1[0]["effect"] == "NoSchedule"
                    && d[1].1.is_null()
            })
            .await
        };
        let what = if drops_taints { "withdrawn" } else { "tainted" };
        eprintln!("unhealthy GPU {what} in the slice after {took:?}");
        assert!(took < Duration::from_secs(1), "{what} after {took:?}");
        if !drops_taints {
            // The API server's time, read back and kept.
            let time = devices(&store)[0].1[0]["timeAdded"].clone();
            assert!(time.as_str().is_some_and(|t| t.ends_with('Z')), "{time}");
        }

        settled(&store).await;
        aer(&fs, &gpus[0], 0);
        let took = until(&store, |d| {
            d.len() == 2 && d.iter().all(|(_, t)| t.is_null())
        })
        .await;
        eprintln!("recovered GPU back in the slice after {took:?}");
        assert!(took < Duration::from_secs(1), "restored after {took:?}");
        stop.send(()).unwrap();
        task.await.unwrap();
    }
    server.stop().await;
}

/// Seventy GPUs, one of them unhealthy while a claim holds it: the pool is cut into
/// slices of at most 64 (the limit once a device has a taint), the device tainted
/// `NoExecute`, and the stand-in (which refuses more) keeps both slices for the
/// schema check; healthy again, the pool is one slice of 70.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tainted_pool_is_cut_at_64_devices_and_a_prepared_device_is_no_execute() {
    use accel_k8s::dra::slices::Published;
    const N: usize = 70;
    let server = TestServer::spawn(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let gpus: Vec<String> = (0..N)
        .map(|i| bdf(0x10 + (i / 8) as u8, (i % 8) as u8, 0))
        .collect();
    for (i, a) in gpus.iter().enumerate() {
        fs.function(a, 0x10de, 0x20b0, 0x030200)
            .numa(0)
            .driver("vfio-pci")
            .iommu_group(100 + i as u32);
    }
    let mut kubernetes = KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    let cdi = dir.path().join("cdi");
    kubernetes.cdi_dir = cdi.clone();
    let settings = Settings {
        drivers: Some(vec!["nvidia".into()]),
        node_provider: NodeProvider::Own,
        kubernetes: Some(kubernetes),
        ..Settings::new(&server.accel, NODE, &fs.root)
    };
    let node = Node::builder(settings).build().unwrap();
    node.agent().check_node().await.unwrap();
    assert_eq!(node.agent().step().await.unwrap().added, N as i64);
    let store = kube::store(false);
    let (addr, _api_stop) = accel_testkit::serve_fake(slice_api(store.clone())).await;
    let api = KubeApi::new(&format!("http://{addr}"), None).unwrap();
    let mut p = node.dra(api).unwrap().publisher();
    let sizes = |store: &SliceStore| -> Vec<(usize, Value)> {
        let st = store.lock().unwrap();
        let mut v: Vec<(usize, Value)> = st
            .items
            .values()
            .map(|s| {
                let n = s["spec"]["devices"].as_array().unwrap().len();
                (n, s["spec"]["pool"]["resourceSliceCount"].clone())
            })
            .collect();
        v.sort_by_key(|(n, _)| *n);
        v
    };
    assert_eq!(
        p.step().await.unwrap(),
        Published::Created { generation: 1 }
    );
    assert_eq!(sizes(&store), vec![(N, 1.into())]);

    // A claim holds the last GPU (its CDI spec, as the driver writes it), which fails.
    let last = accel_k8s::dra::device_name(NODE, &gpus[N - 1]);
    let uid = "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7a31";
    std::fs::create_dir_all(&cdi).unwrap();
    let spec = accel_k8s::dra::cdi_path(&cdi, "accel.dev", "gpu", uid);
    let named = serde_json::json!({"devices": [{"name": format!("{uid}-{last}")}]});
    std::fs::write(&spec, named.to_string()).unwrap();
    aer(&fs, &gpus[N - 1], 1);
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 2 }
    );
    assert_eq!(sizes(&store), vec![(N - 64, 2.into()), (64, 2.into())]);
    let tainted: Vec<(String, Value)> = devices(&store)
        .into_iter()
        .filter(|(_, t)| !t.is_null())
        .collect();
    assert_eq!(tainted.len(), 1);
    assert_eq!(tainted[0].0, last);
    assert_eq!(tainted[0].1[0]["effect"], "NoExecute");
    assert_eq!(p.step().await.unwrap(), Published::Unchanged);
    // The agent's report says it unhealthy: the server reserves it in full and
    // withholds it (as it would a VM's); it stays in the slice, tainted.
    node.agent().step().await.unwrap();
    let client = accel_agent::client::Client::new(&server.accel, "admin").unwrap();
    let withheld = client.kubernetes_usage(NODE).await.unwrap().vm_held_devices;
    assert_eq!(withheld, vec![gpus[N - 1].clone()]);
    assert_eq!(p.step().await.unwrap(), Published::Unchanged);

    // The claim lets go: NoSchedule; the GPU recovers: one slice again.
    std::fs::remove_file(&spec).unwrap();
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 3 }
    );
    let effect = devices(&store)
        .into_iter()
        .find(|(n, _)| *n == last)
        .map(|(_, t)| t[0]["effect"].clone());
    assert_eq!(effect, Some("NoSchedule".into()));
    aer(&fs, &gpus[N - 1], 0);
    node.agent().step().await.unwrap();
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 4 }
    );
    assert_eq!(sizes(&store), vec![(N, 1.into())]);
    server.stop().await;
}

/// A GPU with a `[[cleaning]]` rule, released by a claim: tainted `cleaning` while
/// the agent's cleaner runs (the server withholds it until the agent says clean), and
/// untainted once the cleaning is over. The driver's unprepare tells the publisher
/// which devices it released; the real server and the agent's cleaning worker decide
/// when the cleaning ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_released_by_a_claim_is_tainted_while_it_is_cleaned() {
    use accel_k8s::dra::slices::Published;
    use accel_k8s::dra::ClaimRef;
    use accel_k8s::testing::kube::{claim, claim_api, Claims};
    const GPU: &str = "00fa:00:00.0";
    let server = TestServer::spawn(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let cleaner = accel_agent::testing::FakeCleaner::new(dir.path().join("cleaner"));
    cleaner.mode("gate");
    let mut settings = cleaner.settings(&server.accel, NODE, 60);
    let mut kubernetes = KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    kubernetes.cdi_dir = dir.path().join("cdi");
    settings.kubernetes = Some(kubernetes);
    settings.node_provider = NodeProvider::Own;
    let node = Node::builder(settings).build().unwrap();
    node.agent().check_node().await.unwrap();
    node.agent().step().await.unwrap();

    let name = accel_k8s::dra::device_name(NODE, GPU);
    let uid = "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7a31";
    let claims: Claims = Arc::default();
    claims.lock().unwrap().insert(
        "default/c".into(),
        claim("c", uid, &[("accel.dev", NODE, name.clone())]),
    );
    let store = kube::store(false);
    let app = claim_api(claims).merge(slice_api(store.clone()));
    let (addr, _api_stop) = accel_testkit::serve_fake(app).await;
    let dra = node
        .dra(KubeApi::new(&format!("http://{addr}"), None).unwrap())
        .unwrap();
    let (driver, mut p) = (dra.driver(), dra.publisher());
    assert_eq!(
        p.step().await.unwrap(),
        Published::Created { generation: 1 }
    );
    assert_eq!(devices(&store), vec![(name.clone(), Value::Null)]);

    let c = ClaimRef {
        namespace: "default".into(),
        uid: uid.into(),
        name: "c".into(),
    };
    driver.prepare(&c).await.unwrap();
    assert_eq!(p.step().await.unwrap(), Published::Unchanged);
    driver.unprepare(&c).await.unwrap();
    // Released: the server withholds it until clean, and the slice says why.
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 2 }
    );
    let got = devices(&store);
    assert_eq!(got[0].0, name);
    assert_eq!(got[0].1[0]["key"], "accel.dev/cleaning");
    assert_eq!(got[0].1[0]["effect"], "NoSchedule");
    assert_eq!(node.agent().clean_step().await.unwrap(), 1);
    let client = accel_agent::client::Client::new(&server.accel, "admin").unwrap();
    accel_testkit::eventually(Duration::from_secs(20), "the cleaner started", || async {
        (cleaner.started() == 1).then_some(())
    })
    .await;
    // Still being cleaned: still tainted.
    assert_eq!(p.step().await.unwrap(), Published::Unchanged);
    cleaner.open_gate();
    accel_testkit::eventually(Duration::from_secs(20), "the device clean", || async {
        let shown = client.kubernetes_usage(NODE).await.ok()?;
        shown.vm_held_devices.is_empty().then_some(())
    })
    .await;
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 3 }
    );
    assert_eq!(devices(&store), vec![(name, Value::Null)]);
    server.stop().await;
}
