//! The DRA driver's sockets as kubelet reaches them: registration and both DRA
//! versions over unix sockets (tonic clients of the real protos), and, when
//! `ACCEL_DRA_PYTHON` names a Python with grpcio (`scripts/dra-check.txt`; the test
//! command sets it), a gRPC C-core client sending each `:authority` kubelet-side
//! clients send (`scripts/dra-authority.py`).

use accel_k8s::config::KubernetesConfig;
use accel_k8s::dra::{self, serve, BoxFuture, ClaimApi, ClaimRecord, Driver};
use accel_k8s::proto::{dra_v1 as v1, registration as reg};
use accel_k8s::testing::device;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NODE: &str = "node-a";

/// Claims by name, allocated as the scheduler would.
struct Api(BTreeMap<String, Value>);

impl ClaimApi for Api {
    fn claim(&self, _ns: &str, name: &str) -> BoxFuture<'_, Result<Value, String>> {
        let c = self
            .0
            .get(name)
            .cloned()
            .ok_or_else(|| format!("{name} not found"));
        Box::pin(async move { c })
    }
}

/// The claims held, by uid.
#[derive(Default)]
struct Held(Mutex<BTreeMap<String, Vec<String>>>);

impl ClaimRecord for Held {
    fn prepare(&self, uid: &str, addresses: Vec<String>) -> BoxFuture<'_, Result<(), String>> {
        self.0.lock().unwrap().insert(uid.to_owned(), addresses);
        Box::pin(async { Ok(()) })
    }
    fn unprepare(&self, uid: &str) -> BoxFuture<'_, Result<(), String>> {
        self.0.lock().unwrap().remove(uid);
        Box::pin(async { Ok(()) })
    }
}

async fn dial(path: &Path) -> tonic::transport::Channel {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    loop {
        tick.tick().await;
        if let Ok(c) = accel_k8s::kubelet::connect(path).await {
            return c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never served",
            path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_and_prepare_over_the_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    config.cdi_dir = dir.path().join("cdi");
    assert_eq!(config.mode, accel_k8s::config::Mode::Dra);
    let gpu = device("0000:3b:00.0", "GPU");
    let name = dra::device_name(NODE, &gpu.id);
    let uid = "0b0e5b1c-1111-4c4c-9d9d-000000000001";
    let claim = json!({"metadata": {"uid": uid, "name": "c", "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": [
            {"request": "r", "driver": "accel.dev", "pool": NODE, "device": name}]}}}});
    let held = Arc::new(Held::default());
    let metrics = Arc::new(accel_k8s::KubeletMetrics::register(
        &mut prometheus_client::registry::Registry::default(),
    ));
    let driver = Arc::new(
        Driver::new(
            NODE,
            config,
            Arc::new(vec![gpu.clone()]),
            Arc::new(Api([("c".to_string(), claim)].into())),
            held.clone(),
        )
        .with_metrics(Some(metrics.clone())),
    );
    let registry = dir.path().join("registry");
    let plugins = dir.path().join("plugins");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = {
        let (registry, plugins) = (registry.clone(), plugins.clone());
        tokio::spawn(async move {
            serve::serve(driver, &registry, &plugins, async {
                let _ = stopped.await;
            })
            .await
        })
    };
    let reg_sock = serve::registration_socket(&registry, "accel.dev");
    let mut r = reg::registration_client::RegistrationClient::new(dial(&reg_sock).await);
    let info = r.get_info(reg::InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(
        info.endpoint,
        plugins.join("accel.dev/dra.sock").display().to_string()
    );
    // Ready (the agent's /readyz) once kubelet says it registered the driver.
    assert!(!metrics.all_registered());
    r.notify_registration_status(reg::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();
    assert!(metrics.all_registered());

    let mut k = v1::dra_plugin_client::DraPluginClient::new(dial(Path::new(&info.endpoint)).await);
    let got = k
        .node_prepare_resources(v1::NodePrepareResourcesRequest {
            claims: vec![v1::Claim {
                namespace: "ns".into(),
                uid: uid.into(),
                name: "c".into(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.claims[uid].error, "");
    assert_eq!(
        got.claims[uid].devices[0].cdi_device_ids,
        vec![format!("accel.dev/gpu={uid}-{name}")]
    );
    assert_eq!(held.0.lock().unwrap()[uid], vec![gpu.id.clone()]);

    if let Some(python) = std::env::var_os("ACCEL_DRA_PYTHON") {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dra-authority.py");
        let out = tokio::process::Command::new(python)
            .arg(&script)
            .arg(&reg_sock)
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
        let cases: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(cases.len(), 3, "{text}");
        assert_eq!(cases[0]["ok"], true, "localhost, as kubelet sends: {text}");
        assert_eq!(cases[0]["info"]["endpoint"], info.endpoint.as_str());
        // What h2 answers a percent-encoded authority (kept in the log and the docs):
        // pinned so that a change in either h2 or grpcio is noticed.
        assert_eq!(cases[1]["ok"], false, "percent-encoded: {text}");
        assert!(out.status.success());
    } else {
        eprintln!("ACCEL_DRA_PYTHON unset: the grpcio client part is not run");
    }
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert!(!reg_sock.exists());
}
