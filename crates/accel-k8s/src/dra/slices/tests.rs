//! The publisher against an API server in memory.

use super::*;
use serde_json::{json, Value};

#[test]
fn devices_of_no_configuration_or_vm_held_are_left_out_and_unhealthy_ones_tainted() {
    let config = KubernetesConfig::from_toml(
        "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n\
         [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n",
    )
    .unwrap();
    let t = crate::testing::device;
    let with_memory = Device {
        memory_mib: Some(40960),
        ..t("0000:17:00.0", "GPU")
    };
    let sick = Device {
        healthy: false,
        ..t("0000:31:00.0", "GPU")
    };
    let devices = vec![
        with_memory,
        sick,
        t("0000:4b:00.0", "GPU"),
        t("0000:65:00.0", "FPGA"),
    ];
    let marks = Marks {
        vm_held: ["0000:4b:00.0".to_string()].into(),
        ..Marks::default()
    };
    let got: Vec<Value> = desired("n", &config, devices, &marks, &[])
        .iter()
        .map(|d| serde_json::to_value(d).unwrap())
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["name"], "n-0000-17-00-0");
    assert_eq!(got[0]["capacity"], json!({"memory": {"value": "40960Mi"}}));
    assert_eq!(
        got[0]["attributes"]["configuration"],
        json!({"string": "gpu"})
    );
    assert_eq!(got[0].get("taints"), None);
    assert_eq!(got[1]["name"], "n-0000-31-00-0");
    assert_eq!(
        got[1]["attributes"]["health"],
        json!({"string": "unhealthy"})
    );
    assert_eq!(
        got[1]["taints"],
        json!([{"key": "accel.dev/unhealthy", "effect": "NoSchedule"}])
    );
}

#[test]
fn a_lost_device_of_a_prepared_claim_is_no_execute_and_a_cleaning_one_no_schedule() {
    let config = KubernetesConfig::from_toml(
        "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    let t = crate::testing::device;
    let sick = Device {
        healthy: false,
        ..t("0000:17:00.0", "GPU")
    };
    let cleaned = |a: &str| Device {
        traits: vec![crate::slots::CLEANED_ON_RELEASE.into()],
        ..t(a, "GPU")
    };
    let gone = t("0000:65:00.0", "GPU");
    let taken = t("0000:98:00.0", "GPU");
    // The slice as it was: the gone device in it, and one a VM has taken since.
    let before = desired(
        "n",
        &config,
        vec![gone, taken.clone()],
        &Marks::default(),
        &[],
    );
    let listed = ResourceSlice {
        api_version: API_VERSION.into(),
        kind: "ResourceSlice".into(),
        metadata: ObjectMeta::default(),
        spec: ResourceSliceSpec {
            shared_counters: Vec::new(),
            driver: "accel.dev".into(),
            node_name: Some("n".into()),
            pool: ResourcePool {
                name: "n".into(),
                generation: 1,
                resource_slice_count: 1,
            },
            devices: before,
        },
    };
    let name = |a: &str| device_name("n", a);
    let marks = Marks {
        // All withheld by the server: one released by a claim (cleaning), two a VM's
        // (one of them named in a stale CDI spec), the unhealthy one for its health.
        vm_held: [
            "0000:17:00.0".to_string(),
            "0000:31:00.0".to_string(),
            "0000:4b:00.0".to_string(),
            "0000:98:00.0".to_string(),
        ]
        .into(),
        prepared: [
            name("0000:17:00.0"),
            name("0000:65:00.0"),
            name("0000:98:00.0"),
        ]
        .into(),
        released: [name("0000:31:00.0")].into(),
        ..Marks::default()
    };
    let devices = vec![
        sick,
        cleaned("0000:31:00.0"),
        cleaned("0000:4b:00.0"),
        taken,
    ];
    let got: Vec<(String, Value)> = desired("n", &config, devices, &marks, &[listed])
        .iter()
        .map(|d| (d.name.clone(), serde_json::to_value(&d.taints).unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                name("0000:17:00.0"),
                json!([{"key": "accel.dev/unhealthy", "effect": "NoExecute"}])
            ),
            (
                name("0000:31:00.0"),
                json!([{"key": "accel.dev/cleaning", "effect": "NoSchedule"}])
            ),
            (
                name("0000:65:00.0"),
                json!([{"key": "accel.dev/unhealthy", "value": "gone", "effect": "NoExecute"}])
            ),
        ]
    );
}

/// An API server in memory: slices by name, a resourceVersion per write, and a
/// watch that wakes on any write after the version it is given. Taints are kept (their
/// time filled) or, with `drops_taints`, dropped, as a cluster with and without
/// `DRADeviceTaints` does.
#[derive(Default)]
struct Api {
    st: std::sync::Mutex<(u64, std::collections::BTreeMap<String, Value>)>,
    written: tokio::sync::watch::Sender<u64>,
    watch_fails: bool,
    drops_taints: std::sync::atomic::AtomicBool,
    /// Dry runs answer the taints kept even while writes drop them (a gate turned off
    /// between the two).
    dry_run_keeps: bool,
    /// Dry runs refused (the API server down, or no `create` verb).
    dry_run_fails: std::sync::atomic::AtomicBool,
    lists: std::sync::atomic::AtomicUsize,
    watches: std::sync::atomic::AtomicUsize,
    dry_runs: std::sync::atomic::AtomicUsize,
    /// Writes (not dry runs) that carried a taint.
    tainted_writes: std::sync::atomic::AtomicUsize,
}

impl Api {
    fn write(&self, f: impl FnOnce(&mut std::collections::BTreeMap<String, Value>, u64)) {
        let rv = {
            let mut g = self.st.lock().unwrap();
            g.0 += 1;
            let rv = g.0;
            f(&mut g.1, rv);
            rv
        };
        self.written.send_replace(rv);
    }

    fn generations(&self) -> Vec<i64> {
        let g = self.st.lock().unwrap();
        g.1.values()
            .map(|s| s["spec"]["pool"]["generation"].as_i64().unwrap())
            .collect()
    }

    /// Every device of every slice: its name and taints.
    fn taints(&self) -> Vec<(String, Value)> {
        let g = self.st.lock().unwrap();
        let mut out: Vec<(String, Value)> =
            g.1.values()
                .flat_map(|s| s["spec"]["devices"].as_array().unwrap().clone())
                .map(|d| (d["name"].as_str().unwrap().to_owned(), d["taints"].clone()))
                .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// What the server keeps of `slice`: taints dropped, or their time filled.
    fn admit(&self, slice: ResourceSlice, drop: bool) -> Value {
        // A time of its own per admission: a carried-over time is told from a new one.
        let now = format!("2026-07-01T10:{:02}:00Z", self.st.lock().unwrap().0 % 60);
        let mut slice = serde_json::to_value(slice).unwrap();
        for d in slice["spec"]["devices"].as_array_mut().unwrap() {
            let d = d.as_object_mut().unwrap();
            if drop {
                d.remove("taints");
            }
            for t in d
                .get_mut("taints")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if t.get("timeAdded").is_none() {
                    t["timeAdded"] = json!(now);
                }
            }
        }
        slice
    }

    fn drops(&self) -> bool {
        self.drops_taints.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn count_tainted(&self, slice: &ResourceSlice) {
        if slice.spec.devices.iter().any(|d| !d.taints.is_empty()) {
            self.tainted_writes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl SliceApi for Api {
    fn node_uid(&self, _: &str) -> BoxFuture<'_, Result<String, ApiError>> {
        Box::pin(async { Ok("uid".to_string()) })
    }
    fn list_slices(&self, _: &str, _: &str) -> BoxFuture<'_, Result<SliceList, ApiError>> {
        self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let g = self.st.lock().unwrap();
        let list = SliceList {
            items: g
                .1
                .values()
                .map(|s| serde_json::from_value(s.clone()).unwrap())
                .collect(),
            resource_version: Some(g.0.to_string()),
        };
        Box::pin(async move { Ok(list) })
    }
    fn watch_slices(&self, _: &str, _: &str, from: &str) -> BoxFuture<'_, Result<(), ApiError>> {
        self.watches
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let from: u64 = from.parse().unwrap();
        let mut rx = self.written.subscribe();
        let fails = self.watch_fails;
        Box::pin(async move {
            if fails {
                return Err(ApiError::client(std::io::Error::other("410 Gone")));
            }
            while *rx.borrow_and_update() <= from {
                rx.changed().await.map_err(ApiError::client)?;
            }
            Ok(())
        })
    }
    fn create_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        self.count_tainted(&slice);
        let mut slice = self.admit(slice, self.drops());
        self.write(|m, rv| {
            slice["metadata"]["name"] = json!(format!("s{rv}"));
            m.insert(format!("s{rv}"), slice.clone());
        });
        Box::pin(async move { Ok(serde_json::from_value(slice).unwrap()) })
    }
    fn update_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        self.count_tainted(&slice);
        let slice = self.admit(slice, self.drops());
        self.write(|m, _| {
            m.insert(
                slice["metadata"]["name"].as_str().unwrap().into(),
                slice.clone(),
            );
        });
        Box::pin(async move { Ok(serde_json::from_value(slice).unwrap()) })
    }
    fn dry_run_create(
        &self,
        slice: ResourceSlice,
    ) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        self.dry_runs
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.dry_run_fails.load(std::sync::atomic::Ordering::SeqCst) {
            let e = ApiError::client(std::io::Error::other("connection refused"));
            return Box::pin(async move { Err(e) });
        }
        let slice = self.admit(slice, self.drops() && !self.dry_run_keeps);
        Box::pin(async move { Ok(serde_json::from_value(slice).unwrap()) })
    }
    fn delete_slice(&self, name: &str) -> BoxFuture<'_, Result<(), ApiError>> {
        self.write(|m, _| {
            m.remove(name);
        });
        Box::pin(async { Ok(()) })
    }
}

struct NoVm;
impl Held for NoVm {
    fn vm_held(&self) -> BoxFuture<'_, Result<BTreeSet<String>, RecordError>> {
        Box::pin(async { Ok(BTreeSet::new()) })
    }
}

fn publisher(api: Arc<Api>) -> Publisher {
    let config = KubernetesConfig::from_toml(
        "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    let devices = vec![crate::testing::device("0000:17:00.0", "GPU")];
    Publisher::new("n", config, Arc::new(devices), api, Arc::new(NoVm))
}

#[tokio::test]
async fn a_deleted_slice_is_back_through_the_watch_before_the_next_tick() {
    let api = Arc::new(Api::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run(
        publisher(api.clone()),
        std::time::Duration::from_secs(3600),
        async {
            let _ = stopped.await;
        },
    ));
    let mut written = api.written.subscribe();
    async fn until(api: &Api, written: &mut tokio::sync::watch::Receiver<u64>, want: Vec<i64>) {
        while api.generations() != want {
            written.changed().await.unwrap();
        }
    }
    let wait = std::time::Duration::from_secs(10);
    tokio::time::timeout(wait, until(&api, &mut written, vec![1]))
        .await
        .unwrap();
    let name = api.st.lock().unwrap().1.keys().next().unwrap().clone();
    api.write(|m, _| {
        m.remove(&name);
    });
    tokio::time::timeout(wait, until(&api, &mut written, vec![2]))
        .await
        .unwrap();
    stop.send(()).unwrap();
    task.await.unwrap();
}

/// Devices that can be unplugged, with a presence fingerprint that says so.
struct Plugged(std::sync::Mutex<Vec<Device>>);
impl DeviceSource for Plugged {
    fn devices(&self) -> Vec<Device> {
        self.0.lock().unwrap().clone()
    }
    fn presence(&self) -> Option<u64> {
        Some(self.0.lock().unwrap().len() as u64)
    }
}

#[tokio::test]
async fn a_device_unplugged_leaves_the_slice_before_the_next_tick() {
    let api = Arc::new(Api::default());
    let config = KubernetesConfig::from_toml(
        "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    let t = crate::testing::device;
    let devices = Arc::new(Plugged(std::sync::Mutex::new(vec![
        t("0000:17:00.0", "GPU"),
        t("0000:31:00.0", "GPU"),
    ])));
    let p = Publisher::new("n", config, devices.clone(), api.clone(), Arc::new(NoVm));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run(p, std::time::Duration::from_secs(3600), async {
        let _ = stopped.await;
    }));
    let mut written = api.written.subscribe();
    let count = |api: &Api| -> Vec<usize> {
        let g = api.st.lock().unwrap();
        g.1.values()
            .map(|s| s["spec"]["devices"].as_array().unwrap().len())
            .collect()
    };
    let wait = std::time::Duration::from_secs(10);
    tokio::time::timeout(wait, async {
        while count(&api) != vec![2] {
            written.changed().await.unwrap();
        }
    })
    .await
    .unwrap();
    devices.0.lock().unwrap().pop();
    tokio::time::timeout(wait, async {
        while count(&api) != vec![1] {
            written.changed().await.unwrap();
        }
    })
    .await
    .unwrap();
    assert_eq!(api.generations(), vec![2]);
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_fails_waits_for_the_tick() {
    use std::sync::atomic::Ordering::SeqCst;
    let api = Arc::new(Api {
        watch_fails: true,
        ..Api::default()
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run(
        publisher(api.clone()),
        std::time::Duration::from_secs(10),
        async {
            let _ = stopped.await;
        },
    ));
    // Ticks at 0, 10, ..., 90 s (the clock is paused and moves when idle).
    tokio::time::sleep(std::time::Duration::from_secs(95)).await;
    stop.send(()).unwrap();
    task.await.unwrap();
    assert_eq!(api.generations(), vec![1]);
    assert_eq!(api.lists.load(SeqCst), 10);
    assert_eq!(
        api.watches.load(SeqCst),
        10,
        "one watch a step, no retry loop"
    );
}

/// An API server that refuses every list while `down` is set.
struct Down {
    api: Api,
    down: std::sync::atomic::AtomicBool,
}

impl SliceApi for Down {
    fn node_uid(&self, n: &str) -> BoxFuture<'_, Result<String, ApiError>> {
        self.api.node_uid(n)
    }
    fn list_slices(&self, n: &str, d: &str) -> BoxFuture<'_, Result<SliceList, ApiError>> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            let e = ApiError::client(std::io::Error::other("connection refused"));
            return Box::pin(async move { Err(e) });
        }
        self.api.list_slices(n, d)
    }
    fn watch_slices(&self, n: &str, d: &str, rv: &str) -> BoxFuture<'_, Result<(), ApiError>> {
        self.api.watch_slices(n, d, rv)
    }
    fn create_slice(&self, s: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        self.api.create_slice(s)
    }
    fn update_slice(&self, s: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        self.api.update_slice(s)
    }
    fn dry_run_create(&self, s: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        self.api.dry_run_create(s)
    }
    fn delete_slice(&self, name: &str) -> BoxFuture<'_, Result<(), ApiError>> {
        self.api.delete_slice(name)
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_publish_is_counted_and_kept_until_one_gets_through() {
    use super::super::metrics::{DraMetrics, PublishState};
    use crate::testing::sample;
    let api = Arc::new(Down {
        api: Api::default(),
        down: true.into(),
    });
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(DraMetrics::register(&mut registry));
    assert_eq!(metrics.last_publish(), PublishState::NotYet);
    let config = KubernetesConfig::from_toml(
        "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    let devices = vec![crate::testing::device("0000:17:00.0", "GPU")];
    let p = Publisher::new("n", config, Arc::new(devices), api.clone(), Arc::new(NoVm))
        .with_metrics(metrics.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let every = std::time::Duration::from_secs(10);
    let task = tokio::spawn(run(p, every, async {
        let _ = stopped.await;
    }));
    let failed = r#"accel_dra_slice_publishes_total{outcome="failed"}"#;
    let created = r#"accel_dra_slice_publishes_total{outcome="created"}"#;
    // Ticks at 0 and 10 s fail (the clock is paused and moves when idle).
    tokio::time::sleep(std::time::Duration::from_secs(15)).await;
    assert_eq!(sample(&registry, failed), Some(2.0));
    assert_eq!(sample(&registry, created), None);
    let PublishState::Failed(why) = metrics.last_publish() else {
        panic!("{:?}", metrics.last_publish());
    };
    assert!(why.contains("connection refused"), "{why}");
    api.down.store(false, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    assert_eq!(sample(&registry, created), Some(1.0));
    assert_eq!(sample(&registry, failed), Some(2.0));
    assert_eq!(metrics.last_publish(), PublishState::Published);
    stop.send(()).unwrap();
    task.await.unwrap();
}

mod tainted;
