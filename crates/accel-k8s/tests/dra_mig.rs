//! The DRA driver's prepare of a MIG-mode GPU's forms (issue 45), through an
//! in-memory [`Partitioner`] that refuses a slot another holder has, as NVML does:
//! the MIG device made and its UUID in the CDI edits, held nowhere on the server; the
//! VFIO form and a node without NVML refused with their reasons; each counted.

use accel_k8s::config::KubernetesConfig;
use accel_k8s::dra::metrics::DraMetrics;
use accel_k8s::dra::mig::Partitioner;
use accel_k8s::dra::objects::ResourceClaim;
use accel_k8s::dra::partitions::{Partitioning, Placement};
use accel_k8s::dra::{
    device_name, ApiError, BoxFuture, ClaimApi, ClaimError, ClaimHolds, ClaimRef, Driver, MigHold,
};
use accel_k8s::record::BoxError;
use accel_k8s::testing::{device, sample, Held};
use accel_k8s::Device;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const NODE: &str = "node-a";
const GPU: &str = "0000:3b:00.0";

struct Api(BTreeMap<String, Value>);

impl ClaimApi for Api {
    fn claim(&self, _ns: &str, name: &str) -> BoxFuture<'_, Result<ResourceClaim, ApiError>> {
        let c = serde_json::from_value(self.0[name].clone()).map_err(ApiError::client);
        Box::pin(async move { c })
    }
}

/// MIG devices by memory slice: (holder, uuid); a slice held by another is refused.
#[derive(Default)]
struct Slices(Mutex<BTreeMap<u32, (String, String)>>);

#[derive(Debug, thiserror::Error)]
#[error("memory slice {0} is taken")]
struct Taken(u32);

impl Partitioner for Slices {
    fn create(
        &self,
        _gpu: Device,
        profile_id: u32,
        at: Placement,
        _existing: Option<String>,
        holder: String,
    ) -> BoxFuture<'_, Result<String, BoxError>> {
        let mut g = self.0.lock().unwrap();
        let span = at.start..at.start + at.size;
        let answer = match span
            .clone()
            .find(|s| g.get(s).is_some_and(|(h, _)| *h != holder))
        {
            Some(s) => Err(Box::new(Taken(s)) as BoxError),
            None => {
                let uuid = format!("MIG-{profile_id}-{}", at.start);
                for s in span {
                    g.insert(s, (holder.clone(), uuid.clone()));
                }
                Ok(uuid)
            }
        };
        Box::pin(async move { answer })
    }

    fn release(
        &self,
        holder: String,
        _gpus: Vec<Device>,
    ) -> BoxFuture<'_, Result<usize, BoxError>> {
        let mut g = self.0.lock().unwrap();
        let before = g.len();
        g.retain(|_, (h, _)| *h != holder);
        let n = before - g.len();
        Box::pin(async move { Ok(n) })
    }
}

fn h100() -> Device {
    Device {
        partitions: Some(Partitioning {
            geometry: accel_core::partition::fixtures::h100_80gb(),
            instances: Vec::new(),
        }),
        ..device(GPU, "GPU")
    }
}

fn claim(name: &str, device: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
           "status": {"allocation": {"devices": {"results": [
               {"request": "gpu", "driver": "accel.dev", "pool": NODE, "device": device}]}}}})
}

fn refs(name: &str) -> ClaimRef {
    ClaimRef {
        namespace: "ns".into(),
        uid: format!("uid-{name}"),
        name: name.into(),
    }
}

#[tokio::test]
async fn a_mig_claim_gets_its_uuid_and_a_taken_slice_or_the_vfio_form_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap();
    config.cdi_dir = dir.path().to_owned();
    let gpu = device_name(NODE, GPU);
    let claims: BTreeMap<String, Value> = [
        ("a", format!("{gpu}-mig-1g10gb-19-1")),
        ("b", format!("{gpu}-mig-2g20gb-14-0")),
        ("v", format!("{gpu}-vfio")),
        ("w", gpu.clone()),
    ]
    .into_iter()
    .map(|(n, d)| (n.to_owned(), claim(n, &d)))
    .collect();
    let held = Arc::new(Held::default());
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(DraMetrics::register(&mut registry));
    let make = |p: Option<Arc<Slices>>| {
        let d = Driver::new(
            NODE,
            config.clone(),
            Arc::new(vec![h100()]),
            Arc::new(Api(claims.clone())),
            held.clone(),
        )
        .with_dra_metrics(metrics.clone());
        match p {
            Some(p) => d.with_partitioner(p),
            None => d,
        }
    };

    // No NVML on the node: refused, saying so.
    let e = make(None).prepare(&refs("a")).await.unwrap_err();
    assert!(matches!(e, ClaimError::NoPartitioner(_)), "{e}");
    let failed = r#"accel_dra_mig_operations_total{outcome="create_failed"}"#;
    assert_eq!(sample(&registry, failed), Some(1.0));
    // What the server was asked to hold was freed again: the claim has nothing.
    assert_eq!(held.0.lock().unwrap().get("uid-a"), None);

    let slices = Arc::new(Slices::default());
    let driver = make(Some(slices.clone()));
    let got = driver.prepare(&refs("a")).await.unwrap();
    assert_eq!(got[0].device_name, format!("{gpu}-mig-1g10gb-19-1"));
    let spec: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("accel-accel.dev-gpu-uid-a.json")).unwrap(),
    )
    .unwrap();
    let env = &spec["devices"][0]["containerEdits"]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .contains(&json!("NVIDIA_VISIBLE_DEVICES=MIG-19-1")),
        "{env}"
    );
    assert!(
        env.as_array()
            .unwrap()
            .contains(&json!("ACCEL_VISIBLE_DEVICES=MIG-19-1")),
        "{env}"
    );
    // The server was asked to hold the MIG device at the scheduler's placement.
    assert_eq!(
        held.0.lock().unwrap()["uid-a"],
        ClaimHolds {
            whole: vec![],
            mig: vec![MigHold {
                gpu: GPU.to_owned(),
                profile_id: 19,
                start: 1
            }],
        }
    );
    let created = r#"accel_dra_mig_operations_total{outcome="created"}"#;
    assert_eq!(sample(&registry, created), Some(1.0));

    // The 2g over slices 0 and 1: slice 1 is claim a's.
    let e = driver.prepare(&refs("b")).await.unwrap_err().to_string();
    assert_eq!(
        e,
        format!("creating MIG device {gpu}-mig-2g20gb-14-0 for claim uid-b failed: memory slice 1 is taken")
    );
    assert_eq!(sample(&registry, failed), Some(2.0));
    driver.unprepare(&refs("a")).await.unwrap();
    assert_eq!(
        sample(
            &registry,
            r#"accel_dra_mig_operations_total{outcome="released"}"#
        ),
        Some(1.0)
    );
    driver.prepare(&refs("b")).await.unwrap();

    // The VFIO form is refused; the whole GPU is held on the server as before.
    let e = driver.prepare(&refs("v")).await.unwrap_err();
    assert!(matches!(e, ClaimError::VfioForm(_)), "{e}");
    driver.prepare(&refs("w")).await.unwrap();
    assert_eq!(held.0.lock().unwrap()["uid-w"].whole, vec![GPU.to_owned()]);
}
