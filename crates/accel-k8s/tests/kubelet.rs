//! The plugins against a fake kubelet on unix sockets in a temporary directory:
//! registration of both kinds, ListAndWatch, pooled and instance Allocate, repeated
//! Allocate, refusals, kubelet restart, a removed socket, reclaim after the grace.

use accel_k8s::testing as common;

use accel_k8s::config::{Configuration, KubernetesConfig, Selector};
use accel_k8s::kubelet::Registrar;
use accel_k8s::podresources::Reclaimer;
use accel_k8s::proto::deviceplugin as dp;
use accel_k8s::slots::Usage;
use accel_k8s::{Device, DeviceNode, Shared, SlotTable};
use common::{allocate_request, healthy, ids, wait_list, FakeKubelet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::Code;

const POOL: &str = "accel.dev/gpu";

fn gpu(addr: &str, render: u32) -> Device {
    Device {
        device_nodes: vec![DeviceNode {
            host_path: format!("/dev/dri/renderD{render}"),
            container_path: format!("/dev/dri/renderD{render}"),
            permissions: "rw".into(),
        }],
        ..common::device(addr, "GPU")
    }
}

fn config() -> KubernetesConfig {
    KubernetesConfig {
        reclaim_grace: Duration::from_secs(30),
        configurations: vec![Configuration {
            name: "gpu".into(),
            capacity: 2,
            selector: Selector {
                device_type: Some("GPU".into()),
                ..Selector::default()
            },
        }],
        ..KubernetesConfig::default()
    }
}

struct Node {
    _dir: tempfile::TempDir,
    kubelet: FakeKubelet,
    shared: Arc<Shared>,
    registrar: Registrar,
    /// The two instance-level resource names.
    instances: Vec<String>,
}

/// Two GPUs of capacity 2 on node-a; every plugin served and registered.
async fn node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path());
    let mut table = SlotTable::new("node-a", &config());
    table.set_devices(&[gpu("0000:3b:00.0", 128), gpu("0000:5e:00.0", 129)]);
    let instances: Vec<String> = table
        .resources()
        .into_iter()
        .map(|r| r.name)
        .filter(|n| n != POOL)
        .collect();
    let shared = Shared::new(table);
    let mut registrar = Registrar::new(shared.clone(), "accel.dev", dir.path());
    let report = registrar.step().await;
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(report.registered.len(), 3);
    Node {
        _dir: dir,
        kubelet,
        shared,
        registrar,
        instances,
    }
}

#[tokio::test]
async fn both_kinds_register_and_list() {
    let n = node().await;
    let mut all = vec![POOL.to_string()];
    all.extend(n.instances.iter().cloned());
    all.sort();
    assert_eq!(n.kubelet.registered(), all);
    let pool = n.kubelet.plugin(POOL).await;
    assert_eq!(pool.request.version, "v1beta1");
    assert_eq!(pool.request.endpoint, "accel-accel.dev_gpu.sock");
    let opts = pool.request.options.unwrap();
    assert!(opts.get_preferred_allocation_available && !opts.pre_start_required);
    // Two devices of capacity 2: the pool offers two virtual ids, not four.
    wait_list(&pool, "pool", |d| ids(d) == healthy(&["0", "1"])).await;
    for name in &n.instances {
        let il = n.kubelet.plugin(name).await;
        let short = name.strip_prefix("accel.dev/").unwrap();
        let want = healthy(&[&format!("{short}-0"), &format!("{short}-1")]);
        let list = wait_list(&il, name, |d| ids(d) == want).await;
        assert!(list.iter().all(|d| d.id.len() <= 63));
        assert_eq!(list[0].topology.as_ref().unwrap().nodes[0].id, 0);
    }
}

#[tokio::test]
async fn pooled_allocate_gives_distinct_devices_in_one_response() {
    let n = node().await;
    let pool = n.kubelet.plugin(POOL).await;
    wait_list(&pool, "pool", |d| d.len() == 2).await;
    let mut client = pool.client.clone();
    let resp = client
        .allocate(allocate_request(&["0", "1"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        resp.container_responses.len(),
        1,
        "one container, one response"
    );
    let c = &resp.container_responses[0];
    let mut visible: Vec<&str> = c.envs["ACCEL_VISIBLE_DEVICES"].split(',').collect();
    visible.sort();
    assert_eq!(
        visible,
        ["0000:3b:00.0", "0000:5e:00.0"],
        "distinct devices"
    );
    assert_eq!(c.devices.len(), 2);
    assert_eq!(c.cdi_devices.len(), 2);
    assert!(c
        .cdi_devices
        .iter()
        .all(|d| d.name.starts_with("accel.dev/gpu=gpu-")));
    assert_eq!(c.annotations.len(), 2);
    assert!(
        c.annotations.values().all(|v| v.starts_with("C:")),
        "{:?}",
        c.annotations
    );

    // Kubelet offers the same ids again (an init container's devices): same answer.
    let again = client
        .allocate(allocate_request(&["0", "1"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again, resp);

    // Each device gave its highest slot to the pool: the instance plugins mark it
    // Unhealthy, and the pool offers one new id per device with a slot left.
    for name in &n.instances {
        let il = n.kubelet.plugin(name).await;
        let short = name.strip_prefix("accel.dev/").unwrap();
        let slot1 = format!("{short}-1");
        wait_list(&il, name, |d| {
            d.iter().any(|x| x.id == slot1 && x.health == "Unhealthy")
        })
        .await;
        // And kubelet cannot have that slot through the instance resource.
        let e = il.allocate(&[&slot1]).await.unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    }
    wait_list(&pool, "pool", |d| ids(d) == healthy(&["0", "1", "2", "3"])).await;

    // Three distinct devices do not exist.
    let e = client
        .allocate(allocate_request(&["2", "3", "4"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(
        e.message().contains("needs 3 distinct devices"),
        "{}",
        e.message()
    );
    client
        .allocate(allocate_request(&["2", "3"]))
        .await
        .unwrap();
    // Every slot is taken: nothing new is advertised and more is refused.
    wait_list(&pool, "pool", |d| ids(d) == healthy(&["0", "1", "2", "3"])).await;
    let e = client.allocate(allocate_request(&["4"])).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    let e = client
        .allocate(allocate_request(&["gpu-0"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn instance_allocate_and_preferred_allocation() {
    let n = node().await;
    let name = &n.instances[0];
    let short = name.strip_prefix("accel.dev/").unwrap().to_string();
    let il = n.kubelet.plugin(name).await;
    let mut client = il.client.clone();
    let s = |i: u32| format!("{short}-{i}");
    let pref = client
        .get_preferred_allocation(dp::PreferredAllocationRequest {
            container_requests: vec![dp::ContainerPreferredAllocationRequest {
                available_device_i_ds: vec![s(1), s(0)],
                must_include_device_i_ds: vec![],
                allocation_size: 1,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pref.container_responses[0].device_i_ds, vec![s(0)]);
    let a = client
        .allocate(allocate_request(&[&s(0)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.container_responses.len(), 1);
    assert_eq!(
        a.container_responses[0].annotations[&format!("accel.dev/slot-{}", s(0))],
        s(0)
    );
    client.allocate(allocate_request(&[&s(0)])).await.unwrap();
    // The pool sees the device lose a slot, but it still has one: still two ids.
    let pool = n.kubelet.plugin(POOL).await;
    wait_list(&pool, "pool", |d| ids(d) == healthy(&["0", "1"])).await;
    client.allocate(allocate_request(&[&s(1)])).await.unwrap();
    wait_list(&pool, "pool", |d| ids(d) == healthy(&["0"])).await;
    // The one id left must go to the other device.
    let r = pool.allocate(&["0"]).await.unwrap();
    assert!(!r.container_responses[0].envs["ACCEL_VISIBLE_DEVICES"].is_empty());
    let e = pool
        .client
        .clone()
        .allocate(allocate_request(&["0", "1"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    client
        .pre_start_container(dp::PreStartContainerRequest {
            devices_ids: vec![s(0)],
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn a_kubelet_restart_re_registers_every_plugin() {
    let mut n = node().await;
    assert!(
        n.registrar.step().await.registered.is_empty(),
        "nothing to do"
    );
    n.kubelet = n.kubelet.restart();
    assert!(n.kubelet.registered().is_empty());
    let report = n.registrar.step().await;
    assert_eq!(report.served.len(), 3, "sockets re-created: {report:?}");
    assert_eq!(report.registered.len(), 3, "{report:?}");
    let pool = n.kubelet.plugin(POOL).await;
    wait_list(&pool, "pool after restart", |d| {
        ids(d) == healthy(&["0", "1"])
    })
    .await;
    pool.allocate(&["0"]).await.unwrap();
}

#[tokio::test]
async fn a_removed_socket_is_re_created_and_re_registered() {
    let mut n = node().await;
    let sock = n.kubelet.dir.join("accel-accel.dev_gpu.sock");
    std::fs::remove_file(&sock).unwrap();
    let report = n.registrar.step().await;
    assert_eq!(report.served, vec![POOL.to_string()]);
    assert_eq!(report.registered, vec![POOL.to_string()]);
    assert!(sock.exists());
    let pool = n.kubelet.plugin(POOL).await;
    wait_list(&pool, "pool", |d| d.len() == 2).await;
}

#[tokio::test]
async fn slots_no_pod_lists_are_reclaimed_after_the_grace() {
    let n = node().await;
    let grace = Duration::from_secs(30);
    let mut reclaimer = Reclaimer::new(n.shared.clone(), n.kubelet.pod_resources_socket(), grace);
    let pool = n.kubelet.plugin(POOL).await;
    wait_list(&pool, "pool", |d| d.len() == 2).await;
    pool.allocate(&["0"]).await.unwrap();
    let t0 = Instant::now();
    wait_list(&pool, "pool", |d| ids(d) == healthy(&["0", "1", "2"])).await;

    // The pod is running: listed, so kept however late it is.
    n.kubelet.set_pods(vec![(POOL.into(), vec!["0".into()])]);
    assert!(!reclaimer.step(t0 + Duration::from_secs(100)).await.unwrap());
    // The pod is gone: freed one grace after it was last listed, not before.
    n.kubelet.set_pods(vec![]);
    assert!(!reclaimer.step(t0 + Duration::from_secs(129)).await.unwrap());
    assert!(reclaimer.step(t0 + Duration::from_secs(130)).await.unwrap());
    wait_list(&pool, "pool after reclaim", |d| {
        ids(d) == healthy(&["0", "1"])
    })
    .await;
    for name in &n.instances {
        let il = n.kubelet.plugin(name).await;
        wait_list(&il, name, |d| d.iter().all(|x| x.health == "Healthy")).await;
    }

    // A kubelet that does not answer frees nothing.
    pool.allocate(&["1"]).await.unwrap();
    let mut dead = Reclaimer::new(n.shared.clone(), n.kubelet.dir.join("absent.sock"), grace);
    assert!(dead.step(t0 + Duration::from_secs(1000)).await.is_err());
    assert_eq!(n.shared.read(|t| t.held_vdevs()).len(), 1);
}

#[tokio::test]
async fn a_thousand_allocate_release_cycles_leak_no_slot() {
    let n = node().await;
    let mut reclaimer = Reclaimer::new(
        n.shared.clone(),
        n.kubelet.pod_resources_socket(),
        Duration::ZERO,
    );
    let pool = n.kubelet.plugin(POOL).await;
    wait_list(&pool, "pool", |d| d.len() == 2).await;
    let mut pool_client = pool.client.clone();
    let il = n.kubelet.plugin(&n.instances[0]).await;
    let mut il_client = il.client.clone();
    let short = n.instances[0]
        .strip_prefix("accel.dev/")
        .unwrap()
        .to_string();
    for i in 0..1000 {
        // Kubelet's pattern: allocate for a pod, the pod runs (listed), the pod ends.
        let (resource, ids) = if i % 3 == 2 {
            let id = format!("{short}-{}", i % 2);
            il_client.allocate(allocate_request(&[&id])).await.unwrap();
            (n.instances[0].clone(), vec![id])
        } else {
            let ids: Vec<&str> = if i % 3 == 0 {
                vec!["0"]
            } else {
                vec!["0", "1"]
            };
            pool_client.allocate(allocate_request(&ids)).await.unwrap();
            (
                POOL.to_string(),
                ids.iter().map(|s| s.to_string()).collect(),
            )
        };
        n.kubelet.set_pods(vec![(resource, ids)]);
        assert!(
            !reclaimer.step(Instant::now()).await.unwrap(),
            "cycle {i}: a listed slot was freed"
        );
        n.kubelet.set_pods(vec![]);
        assert!(
            reclaimer.step(Instant::now()).await.unwrap(),
            "cycle {i}: nothing freed"
        );
        let held = n.shared.read(|t| {
            t.usage()
                .into_values()
                .filter(|u| *u != Usage::Free)
                .count()
        });
        assert_eq!(held, 0, "cycle {i}: a slot leaked");
    }
    wait_list(&pool, "pool after 1000 cycles", |d| {
        ids(d) == healthy(&["0", "1"])
    })
    .await;
    for name in &n.instances {
        let il = n.kubelet.plugin(name).await;
        wait_list(&il, name, |d| {
            d.len() == 2 && d.iter().all(|x| x.health == "Healthy")
        })
        .await;
    }
}
