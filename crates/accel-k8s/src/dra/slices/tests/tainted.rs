//! Taints in the publisher: within a second of a health change (a paused clock: the
//! publisher's loop sleeps its health interval, nothing else), on a cluster that
//! serves them and on one that drops them; the slice limit with taints; the time a
//! taint was added kept; cleaning and prepared devices.

use super::*;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Mutex;
use tokio::time::{Duration, Instant};

/// Devices whose health and presence a test changes; no presence fingerprint, so
/// only the publisher's health observation notices.
struct Switch(Mutex<Vec<Device>>);
impl DeviceSource for Switch {
    fn devices(&self) -> Vec<Device> {
        self.0.lock().unwrap().clone()
    }
}

impl Switch {
    fn set_healthy(&self, i: usize, healthy: bool) {
        self.0.lock().unwrap()[i].healthy = healthy;
    }
}

/// The devices the server withholds, changed by the test.
#[derive(Default)]
struct Withheld(Mutex<BTreeSet<String>>);
impl Held for Withheld {
    fn vm_held(&self) -> BoxFuture<'_, Result<BTreeSet<String>, RecordError>> {
        let held = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(held) })
    }
}

fn gpus(n: usize) -> Vec<Device> {
    (0..n)
        .map(|i| crate::testing::device(&format!("0000:{:02x}:00.0", 0x10 + i), "GPU"))
        .collect()
}

fn config() -> KubernetesConfig {
    KubernetesConfig::from_toml("[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n")
        .unwrap()
}

fn unhealthy(effect: &str) -> Value {
    json!([{"key": "accel.dev/unhealthy", "effect": effect}])
}

/// The taints without their time (which the API server chose).
fn untimed(v: &Value) -> Value {
    let mut v = v.clone();
    for t in v.as_array_mut().into_iter().flatten() {
        t.as_object_mut().unwrap().remove("timeAdded");
    }
    v
}

/// Waits (paused clock: as long as the loop needs) until `want` holds of the API's
/// devices and taints; answers how long that took on the clock.
async fn until(
    api: &Api,
    written: &mut tokio::sync::watch::Receiver<u64>,
    want: impl Fn(&[(String, Value)]) -> bool,
) -> Duration {
    let from = Instant::now();
    tokio::time::timeout(Duration::from_secs(30), async {
        while !want(&api.taints()) {
            written.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not reached: {:?}", api.taints()));
    from.elapsed()
}

fn start(
    p: Publisher,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run(p, Duration::from_secs(3600), async {
        let _ = stopped.await;
    }));
    (stop, task)
}

#[tokio::test(start_paused = true)]
async fn a_device_turning_unhealthy_is_tainted_within_a_second_and_untainted_on_recovery() {
    let api = Arc::new(Api::default());
    let devices = Arc::new(Switch(Mutex::new(gpus(2))));
    let p = Publisher::new("n", config(), devices.clone(), api.clone(), Arc::new(NoVm));
    let (stop, task) = start(p);
    let mut written = api.written.subscribe();
    until(&api, &mut written, |d| d.len() == 2).await;
    assert_eq!(api.dry_runs.load(SeqCst), 0, "no taint, no question");

    for round in 0..2 {
        devices.set_healthy(0, false);
        let took = until(&api, &mut written, |d| {
            untimed(&d[0].1) == unhealthy("NoSchedule") && d[1].1.is_null()
        })
        .await;
        assert!(took <= Duration::from_secs(1), "tainted after {took:?}");
        let time = &api.taints()[0].1[0]["timeAdded"];
        assert!(time.is_string(), "the server's time: {time}");
        devices.set_healthy(0, true);
        let took = until(&api, &mut written, |d| d.iter().all(|(_, t)| t.is_null())).await;
        assert!(
            took <= Duration::from_secs(1),
            "untainted after {took:?} (round {round})"
        );
    }
    // Asked once: the answer stands.
    assert_eq!(api.dry_runs.load(SeqCst), 1);
    assert_eq!(api.tainted_writes.load(SeqCst), 2);
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn on_a_cluster_without_taints_the_device_is_withdrawn_and_restored() {
    let api = Arc::new(Api {
        drops_taints: true.into(),
        ..Api::default()
    });
    let devices = Arc::new(Switch(Mutex::new(gpus(2))));
    let p = Publisher::new("n", config(), devices.clone(), api.clone(), Arc::new(NoVm));
    let (stop, task) = start(p);
    let mut written = api.written.subscribe();
    let names = |d: &[(String, Value)]| d.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    until(&api, &mut written, |d| d.len() == 2).await;
    let both = names(&api.taints());
    for _ in 0..2 {
        devices.set_healthy(0, false);
        let took = until(&api, &mut written, |d| names(d) == both[1..]).await;
        assert!(took <= Duration::from_secs(1), "withdrawn after {took:?}");
        devices.set_healthy(0, true);
        let took = until(&api, &mut written, |d| names(d) == both).await;
        assert!(took <= Duration::from_secs(1), "restored after {took:?}");
    }
    // The dry run found the taints dropped: never written, asked once.
    assert_eq!(api.dry_runs.load(SeqCst), 1);
    assert_eq!(api.tainted_writes.load(SeqCst), 0);
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn taints_dropped_by_a_write_are_seen_and_the_device_withdrawn_and_asked_again_later() {
    use crate::testing::sample;
    // The dry run says kept, the write drops them (the gate went off in between).
    let api = Arc::new(Api {
        drops_taints: true.into(),
        dry_run_keeps: true,
        ..Api::default()
    });
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(DraMetrics::register(&mut registry));
    let checks = |outcome: &str| {
        let series = format!("accel_dra_taint_checks_total{{outcome=\"{outcome}\"}}");
        sample(&registry, &series)
    };
    let devices = Arc::new(Switch(Mutex::new(gpus(2))));
    let mut p = Publisher::new("n", config(), devices.clone(), api.clone(), Arc::new(NoVm))
        .with_metrics(metrics.clone());
    assert_eq!(
        p.step().await.unwrap(),
        Published::Created { generation: 1 }
    );
    devices.set_healthy(0, false);
    // Written with the taint (dropped), then again without the device.
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 3 }
    );
    assert_eq!(api.taints().len(), 1);
    assert!(matches!(
        p.taint_support(),
        crate::dra::taints::Support::Dropped(_)
    ));
    assert_eq!(checks("served"), Some(1.0));
    assert_eq!(checks("dropped_on_write"), Some(1.0));
    assert_eq!(p.step().await.unwrap(), Published::Unchanged);
    assert_eq!(api.dry_runs.load(SeqCst), 1);
    // An hour on, the cluster serves them: asked again, and tainted.
    api.drops_taints.store(false, SeqCst);
    tokio::time::advance(crate::dra::taints::RECHECK).await;
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 4 }
    );
    assert_eq!(api.dry_runs.load(SeqCst), 2);
    assert_eq!(untimed(&api.taints()[0].1), unhealthy("NoSchedule"));
    assert_eq!(p.taint_support(), crate::dra::taints::Support::Served);
    assert_eq!(checks("served"), Some(2.0));
    let gauge = r#"accel_dra_tainted_devices{key="accel.dev/unhealthy",effect="NoSchedule"}"#;
    assert_eq!(sample(&registry, gauge), Some(1.0));
    devices.set_healthy(0, true);
    p.step().await.unwrap();
    assert_eq!(sample(&registry, gauge), None);
}

#[tokio::test]
async fn a_failed_question_withdraws_the_device_and_is_asked_again_at_the_next_step() {
    use crate::testing::sample;
    let api = Arc::new(Api {
        dry_run_fails: true.into(),
        ..Api::default()
    });
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(DraMetrics::register(&mut registry));
    let devices = Arc::new(Switch(Mutex::new(gpus(2))));
    let mut p = Publisher::new("n", config(), devices.clone(), api.clone(), Arc::new(NoVm))
        .with_metrics(metrics);
    p.step().await.unwrap();
    devices.set_healthy(0, false);
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 2 }
    );
    assert_eq!(api.taints().len(), 1, "withdrawn while unknown");
    let failed = r#"accel_dra_taint_checks_total{outcome="failed"}"#;
    assert_eq!(sample(&registry, failed), Some(1.0));
    api.dry_run_fails.store(false, SeqCst);
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 3 }
    );
    assert_eq!(untimed(&api.taints()[0].1), unhealthy("NoSchedule"));
    assert_eq!(api.dry_runs.load(SeqCst), 2);
}

#[tokio::test]
async fn a_taint_keeps_its_time_and_the_pool_is_cut_at_64_devices_with_taints() {
    let api = Arc::new(Api::default());
    let devices = Arc::new(Switch(Mutex::new(gpus(100))));
    let mut p = Publisher::new("n", config(), devices.clone(), api.clone(), Arc::new(NoVm));
    let slices = |api: &Api| -> Vec<(usize, i64, i64)> {
        let g = api.st.lock().unwrap();
        let mut v: Vec<_> =
            g.1.values()
                .map(|s| {
                    (
                        s["spec"]["devices"].as_array().unwrap().len(),
                        s["spec"]["pool"]["resourceSliceCount"].as_i64().unwrap(),
                        s["spec"]["pool"]["generation"].as_i64().unwrap(),
                    )
                })
                .collect();
        v.sort();
        v
    };
    assert_eq!(
        p.step().await.unwrap(),
        Published::Created { generation: 1 }
    );
    assert_eq!(slices(&api), vec![(100, 1, 1)]);
    devices.set_healthy(99, false);
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 2 }
    );
    assert_eq!(slices(&api), vec![(36, 2, 2), (64, 2, 2)]);
    assert_eq!(p.step().await.unwrap(), Published::Unchanged);
    let first = api.taints()[99].1[0]["timeAdded"].clone();
    // Another device turns unhealthy: the first one's taint keeps its time.
    devices.set_healthy(0, false);
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 3 }
    );
    let now = api.taints();
    assert_eq!(now[99].1[0]["timeAdded"], first);
    assert_ne!(now[0].1[0]["timeAdded"], first);
    assert_eq!(p.step().await.unwrap(), Published::Unchanged);
    devices.set_healthy(0, true);
    devices.set_healthy(99, true);
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 4 }
    );
    assert_eq!(slices(&api), vec![(100, 1, 4)]);
}

#[tokio::test]
async fn a_device_released_to_its_cleaning_is_tainted_until_clean_and_a_vms_withdrawn() {
    let api = Arc::new(Api::default());
    let mut list = gpus(2);
    for d in &mut list {
        d.traits.push(crate::slots::CLEANED_ON_RELEASE.into());
    }
    let (a, b) = (list[0].id.clone(), list[1].id.clone());
    let devices = Arc::new(Switch(Mutex::new(list)));
    let held = Arc::new(Withheld::default());
    let released = Arc::new(Released::default());
    let mut p = Publisher::new("n", config(), devices, api.clone(), held.clone())
        .with_released(released.clone());
    assert_eq!(
        p.step().await.unwrap(),
        Published::Created { generation: 1 }
    );
    // A claim lets go of `a`: the server withholds it until clean. `b` goes to a VM.
    released.add([device_name("n", &a)]);
    *held.0.lock().unwrap() = [a.clone(), b.clone()].into();
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 2 }
    );
    let got = api.taints();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, device_name("n", &a));
    assert_eq!(
        untimed(&got[0].1),
        json!([{"key": "accel.dev/cleaning", "effect": "NoSchedule"}])
    );
    // Clean: untainted, and forgotten.
    held.0.lock().unwrap().remove(&a);
    assert_eq!(
        p.step().await.unwrap(),
        Published::Updated { generation: 3 }
    );
    assert!(api.taints().iter().all(|(_, t)| t.is_null()));
    assert!(released.names().is_empty());
}

#[tokio::test]
async fn a_device_lost_while_prepared_is_no_execute_until_its_claim_lets_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config();
    config.cdi_dir = dir.path().to_path_buf();
    let api = Arc::new(Api::default());
    let devices = Arc::new(Switch(Mutex::new(gpus(2))));
    let (a, b) = {
        let d = devices.devices();
        (device_name("n", &d[0].id), device_name("n", &d[1].id))
    };
    let mut p = Publisher::new(
        "n",
        config.clone(),
        devices.clone(),
        api.clone(),
        Arc::new(NoVm),
    );
    assert_eq!(
        p.step().await.unwrap(),
        Published::Created { generation: 1 }
    );
    // A claim holds both (its CDI spec, as the driver writes it).
    let uid = "6f1c1a52-55b1-4d7f-9a39-3f1a4a0e7a31";
    let spec = crate::dra::cdi_path(dir.path(), "accel.dev", "gpu", uid);
    let names = json!([{"name": format!("{uid}-{a}")}, {"name": format!("{uid}-{b}")}]);
    std::fs::write(&spec, json!({"devices": names}).to_string()).unwrap();
    devices.set_healthy(0, false);
    p.step().await.unwrap();
    assert_eq!(untimed(&api.taints()[0].1), unhealthy("NoExecute"));
    // `b` vanishes while prepared: kept, tainted gone.
    devices.0.lock().unwrap().pop();
    p.step().await.unwrap();
    let got = api.taints();
    assert_eq!(got[1].0, b);
    assert_eq!(
        untimed(&got[1].1),
        json!([{"key": "accel.dev/unhealthy", "value": "gone", "effect": "NoExecute"}])
    );
    // The claim is unprepared: `a` is no longer anyone's, `b` no longer kept.
    std::fs::remove_file(&spec).unwrap();
    p.step().await.unwrap();
    let got = api.taints();
    assert_eq!(got.len(), 1);
    assert_eq!(untimed(&got[0].1), unhealthy("NoSchedule"));
}
