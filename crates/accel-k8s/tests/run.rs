//! `accel_k8s::run` end to end: devices from a source, plugins registered with a fake
//! kubelet, sockets removed at shutdown.

use accel_k8s::testing as common;

use accel_k8s::config::KubernetesConfig;
use accel_k8s::{Device, DeviceSource, Options};
use common::{ids, wait_list, FakeKubelet};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn run_serves_the_configured_devices_until_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path());
    let config = KubernetesConfig::from_toml(
        "[kubernetes]\nresource_domain = \"example.com\"\n\
         [[kubernetes.configurations]]\nname = \"fpga\"\ncapacity = 3\n\
         [kubernetes.configurations.selector]\ndevice_type = \"FPGA\"\n",
    )
    .unwrap();
    let config = KubernetesConfig {
        cdi_dir: dir.path().join("cdi"),
        ..config
    };
    let devices: Vec<Device> = ["0000:af:00.0", "0000:d8:00.0"]
        .iter()
        .map(|a| Device {
            id: a.to_string(),
            device_type: "FPGA".into(),
            vendor: 0x8086,
            product: 0x0b30,
            model: "PAC".into(),
            traits: vec![],
            numa_node: None,
            healthy: true,
            pci_addresses: vec![a.to_string()],
            device_nodes: vec![],
            memory_mib: None,
            pcie_root: None,
            partitions: None,
        })
        .collect();
    let source: Arc<dyn DeviceSource> = Arc::new(devices);
    let options = Options {
        kubelet_dir: dir.path().to_path_buf(),
        pod_resources_socket: kubelet.pod_resources_socket(),
        device_interval: Duration::from_millis(20),
        watch_interval: Duration::from_millis(20),
        reclaim_interval: Duration::from_millis(20),
        ..Options::new("node-a")
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(accel_k8s::run(config, source, options, async {
        let _ = stopped.await;
    }));
    let pool = kubelet.plugin("example.com/fpga").await;
    let spec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("cdi/accel-example.com-fpga.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(spec["kind"], "example.com/fpga");
    assert_eq!(spec["devices"].as_array().unwrap().len(), 2);
    let list = wait_list(&pool, "pool", |d| d.len() == 2).await;
    assert_eq!(
        ids(&list),
        [
            ("0".into(), "Healthy".into()),
            ("1".into(), "Healthy".into())
        ]
    );
    stop.send(()).unwrap();
    tokio::time::timeout(common::WAIT, task)
        .await
        .expect("run stops")
        .unwrap()
        .unwrap();
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("accel-"))
        .collect();
    assert!(left.is_empty(), "sockets left: {left:?}");
}
