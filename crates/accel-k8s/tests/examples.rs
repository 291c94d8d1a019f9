//! The node the claim examples of deploy/kubernetes/examples are checked against: the
//! publisher's slice of a node with two configurations (`gpu`, `fpga`) and GPUs that
//! differ in model and memory. With `ACCEL_DRA_SLICES_OUT` set (the test command sets
//! it) the slice is written there, where scripts/dra-check.sh validates it against the
//! 1.34 and 1.37 schemas and scripts/dra-cel.py evaluates every example's CEL
//! selectors against it: each must pick exactly the devices the script names.

use accel_k8s::config::KubernetesConfig;
use accel_k8s::dra::objects::ResourceSlice;
use accel_k8s::dra::slices::{Held, Published, Publisher, SliceApi, SliceList};
use accel_k8s::dra::{ApiError, BoxFuture};
use accel_k8s::testing::device;
use accel_k8s::{Device, RecordError};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Keeps the slices created; nothing listed before.
#[derive(Default)]
struct Created(Mutex<Vec<ResourceSlice>>);

impl SliceApi for Created {
    fn node_uid(&self, _: &str) -> BoxFuture<'_, Result<String, ApiError>> {
        Box::pin(async { Ok("3f7c9a2e-0000-4000-8000-000000000001".to_string()) })
    }
    fn list_slices(&self, _: &str, _: &str) -> BoxFuture<'_, Result<SliceList, ApiError>> {
        Box::pin(async { Ok(SliceList::default()) })
    }
    fn watch_slices(&self, _: &str, _: &str, _: &str) -> BoxFuture<'_, Result<(), ApiError>> {
        Box::pin(std::future::pending())
    }
    fn create_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        self.0.lock().unwrap().push(slice.clone());
        Box::pin(async { Ok(slice) })
    }
    fn update_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        Box::pin(async { Ok(slice) })
    }
    fn dry_run_create(
        &self,
        slice: ResourceSlice,
    ) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        Box::pin(async { Ok(slice) })
    }
    fn delete_slice(&self, _: &str) -> BoxFuture<'_, Result<(), ApiError>> {
        Box::pin(async { Ok(()) })
    }
}

struct NoVm;
impl Held for NoVm {
    fn vm_held(&self) -> BoxFuture<'_, Result<BTreeSet<String>, RecordError>> {
        Box::pin(async { Ok(BTreeSet::new()) })
    }
}

fn gpu(address: &str, model: &str, mib: i64) -> Device {
    Device {
        model: model.into(),
        memory_mib: Some(mib),
        pcie_root: Some("pci0000:16".into()),
        partitions: None,
        ..device(address, "GPU")
    }
}

#[tokio::test]
async fn the_examples_node_publishes_both_configurations() {
    let config = KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n\
         [[kubernetes.configurations]]\nname = \"gpu\"\n\
         [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n\
         [[kubernetes.configurations]]\nname = \"fpga\"\n\
         [kubernetes.configurations.selector]\ndevice_type = \"FPGA\"\n",
    )
    .unwrap();
    let devices = vec![
        gpu("0000:17:00.0", "A100", 40960),
        gpu("0000:31:00.0", "A100", 81920),
        gpu("0000:4b:00.0", "H100", 81920),
        Device {
            vendor: 0x8086,
            product: 0x09c4,
            model: "PAC Arria 10".into(),
            ..device("0000:65:00.0", "FPGA")
        },
    ];
    let api = Arc::new(Created::default());
    let mut p = Publisher::new(
        "examples-node",
        config,
        Arc::new(devices),
        api.clone(),
        Arc::new(NoVm),
    );
    assert_eq!(
        p.step().await.unwrap(),
        Published::Created { generation: 1 }
    );
    let mut slice = api.0.lock().unwrap().pop().unwrap();
    let confs: Vec<String> = slice
        .spec
        .devices
        .iter()
        .map(|d| {
            serde_json::to_value(&d.attributes["configuration"]).unwrap()["string"].to_string()
        })
        .collect();
    assert_eq!(confs, ["\"gpu\"", "\"gpu\"", "\"gpu\"", "\"fpga\""]);
    let Some(dir) = std::env::var_os("ACCEL_DRA_SLICES_OUT") else {
        eprintln!("ACCEL_DRA_SLICES_OUT unset: the examples' slice is not kept");
        return;
    };
    // As the API server would name it from generateName.
    slice.metadata.name = Some("examples-node-accel.dev-x7k2q".into());
    slice.metadata.generate_name = None;
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = serde_json::to_vec_pretty(&slice).unwrap();
    std::fs::write(dir.join("slice-examples-node.yaml"), text).unwrap();
}
