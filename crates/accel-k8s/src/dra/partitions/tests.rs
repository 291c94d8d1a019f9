//! A partitioned H100's slices: the counter layout (one counter set, every profile at
//! every placement, counters and devices in separate slices of at most 64 devices)
//! and the static layout; each slice passes the stand-in API server's checks of
//! `resource.k8s.io/v1`.

use super::*;
use crate::config::KubernetesConfig;
use crate::device::Device;
use crate::dra::objects::{ObjectMeta, ResourcePool, ResourceSlice, ResourceSliceSpec};
use crate::dra::slices::{wanted, Marks};
use crate::testing::kube::validate_slice;
use serde_json::{json, Value};

/// H100 80GB as the ledger's fixture has it (`accel_core::partition::fixtures`: a real
/// `nvidia-smi mig -lgip` capture, the reference's placements).
pub(crate) fn h100(instances: Vec<Instance>) -> Partitioning {
    Partitioning {
        geometry: accel_core::partition::fixtures::h100_80gb(),
        instances,
    }
}

fn gpu(address: &str, p: Partitioning) -> Device {
    Device {
        memory_mib: Some(81559),
        partitions: Some(p),
        ..crate::testing::device(address, "GPU")
    }
}

fn config() -> KubernetesConfig {
    KubernetesConfig::from_toml(
        "[kubernetes]\nmode = \"dra\"\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
    )
    .unwrap()
}

/// The pool as the publisher cuts it, as slices (what the API server is sent).
fn pool(devices: Vec<Device>, layout: Layout) -> Vec<Value> {
    let marks = Marks {
        layout,
        ..Marks::default()
    };
    let parts = crate::dra::slices::cut_for_tests(wanted("n", &config(), devices, &marks, &[]));
    let count = parts.len() as i64;
    parts
        .into_iter()
        .map(|p| {
            let s = ResourceSlice {
                api_version: "resource.k8s.io/v1".into(),
                kind: "ResourceSlice".into(),
                metadata: ObjectMeta::default(),
                spec: ResourceSliceSpec {
                    driver: "accel.dev".into(),
                    node_name: Some("n".into()),
                    pool: ResourcePool {
                        name: "n".into(),
                        generation: 1,
                        resource_slice_count: count,
                    },
                    devices: p.devices,
                    shared_counters: p.counters,
                },
            };
            let v = serde_json::to_value(&s).unwrap();
            validate_slice(&v).unwrap_or_else(|e| panic!("{e}: {v:#}"));
            v
        })
        .collect()
}

fn devices_of(slices: &[Value]) -> Vec<Value> {
    slices
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn an_h100_publishes_its_counters_apart_from_every_profile_at_every_placement() {
    let slices = pool(
        vec![gpu("0000:3b:00.0", h100(Vec::new()))],
        Layout::Counters,
    );
    assert_eq!(slices.len(), 2, "a counter slice and a device slice");
    let set = &slices[0]["spec"]["sharedCounters"];
    assert_eq!(slices[0]["spec"]["devices"], json!([]));
    assert_eq!(set[0]["name"], "n-0000-3b-00-0-counters");
    let c = &set[0]["counters"];
    assert_eq!(c["multiprocessors"], json!({"value": "132"}));
    assert_eq!(c["memory"], json!({"value": "81152Mi"}));
    assert_eq!(c["compute-slices"], json!({"value": "7"}));
    for n in 0..8 {
        assert_eq!(c[format!("memory-slice-{n}")], json!({"value": "1"}));
    }
    assert_eq!(c.as_object().unwrap().len(), 16);
    let devices = devices_of(&slices);
    // Whole, VFIO, and the fixture's 7 profiles at their 25 placements
    // (`1g.10gb` 7, `1g.10gb+me` 7, `1g.20gb` 4, `2g` 3, `3g` 2, `4g` 1, `7g` 1).
    let g = accel_core::partition::fixtures::h100_80gb();
    let placements: usize = g.profiles.iter().map(|p| p.placements.len()).sum();
    assert_eq!(placements, 25);
    assert_eq!(devices.len(), 2 + placements);
    let by = |n: &str| devices.iter().find(|d| d["name"] == n).unwrap().clone();
    let whole = by("n-0000-3b-00-0");
    // The whole GPU draws every counter the set has (a counter of 0, H100's
    // encoders, is no draw).
    let mut nonzero = c.as_object().unwrap().clone();
    nonzero.retain(|_, v| v["value"] != "0");
    assert_eq!(
        whole["consumesCounters"][0]["counters"],
        Value::Object(nonzero)
    );
    assert_eq!(whole["attributes"]["type"], json!({"string": "GPU"}));
    assert_eq!(
        by("n-0000-3b-00-0-vfio")["attributes"]["type"],
        json!({"string": "vfio"})
    );
    let small = by("n-0000-3b-00-0-mig-1g10gb-19-5");
    assert_eq!(small["attributes"]["profile"], json!({"string": "1g.10gb"}));
    assert_eq!(small["attributes"]["placementStart"], json!({"int": 5}));
    assert_eq!(
        small["attributes"]["resource.kubernetes.io/pciBusID"],
        json!({"string": "0000:3b:00.0"})
    );
    assert_eq!(small["capacity"]["memory"], json!({"value": "9984Mi"}));
    let drawn = &small["consumesCounters"][0];
    assert_eq!(drawn["counterSet"], "n-0000-3b-00-0-counters");
    assert_eq!(drawn["counters"]["memory-slice-5"], json!({"value": "1"}));
    assert_eq!(drawn["counters"]["multiprocessors"], json!({"value": "16"}));
    assert!(drawn["counters"].get("memory-slice-4").is_none());
    // Zero draws are left out (the GPU has no encoder).
    assert!(drawn["counters"].get("encoders").is_none());
    let big = by("n-0000-3b-00-0-mig-3g40gb-9-4");
    let slices_drawn: Vec<&String> = big["consumesCounters"][0]["counters"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("memory-slice-"))
        .collect();
    assert_eq!(
        slices_drawn,
        [
            "memory-slice-4",
            "memory-slice-5",
            "memory-slice-6",
            "memory-slice-7"
        ]
    );
}

#[test]
fn four_h100s_cut_into_one_counter_slice_and_device_slices_of_64() {
    let gpus: Vec<Device> = [
        "0000:17:00.0",
        "0000:3b:00.0",
        "0000:5e:00.0",
        "0000:86:00.0",
    ]
    .iter()
    .map(|a| gpu(a, h100(Vec::new())))
    .collect();
    let slices = pool(gpus, Layout::Counters);
    let sizes: Vec<(usize, usize)> = slices
        .iter()
        .map(|s| {
            let n = |k: &str| s["spec"][k].as_array().map_or(0, Vec::len);
            (n("sharedCounters"), n("devices"))
        })
        .collect();
    // 4 x 27 devices: 64 and 44.
    assert_eq!(sizes, vec![(4, 0), (0, 64), (0, 44)]);
    assert!(slices
        .iter()
        .all(|s| s["spec"]["pool"]["resourceSliceCount"] == 3));
}

#[test]
fn the_static_layout_publishes_only_the_mig_devices_that_exist() {
    let made = vec![
        Instance {
            profile_id: 19,
            placement: Placement { start: 0, size: 1 },
            uuid: "MIG-a".into(),
        },
        Instance {
            profile_id: 9,
            placement: Placement { start: 4, size: 4 },
            uuid: "MIG-b".into(),
        },
    ];
    let slices = pool(vec![gpu("0000:3b:00.0", h100(made))], Layout::Static);
    assert_eq!(slices.len(), 1);
    assert!(slices[0]["spec"].get("sharedCounters").is_none());
    let devices = devices_of(&slices);
    let names: Vec<&str> = devices
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "n-0000-3b-00-0-mig-1g10gb-19-0",
            "n-0000-3b-00-0-mig-3g40gb-9-4"
        ]
    );
    assert_eq!(devices[0]["attributes"]["uuid"], json!({"string": "MIG-a"}));
    assert!(devices.iter().all(|d| d.get("consumesCounters").is_none()));
    // Auto before the cluster answered: nothing it may not keep.
    let auto = pool(vec![gpu("0000:3b:00.0", h100(Vec::new()))], Layout::Auto);
    assert_eq!(devices_of(&auto), Vec::<Value>::new());
}

#[test]
fn a_vm_held_gpu_withdraws_every_form_of_it() {
    let marks = Marks {
        layout: Layout::Counters,
        vm_held: ["0000:3b:00.0".to_string()].into(),
        ..Marks::default()
    };
    let w = wanted(
        "n",
        &config(),
        vec![gpu("0000:3b:00.0", h100(Vec::new()))],
        &marks,
        &[],
    );
    assert_eq!((w.counters.len(), w.devices.len()), (0, 0));
}

#[test]
fn long_names_stay_dns_labels_and_distinct() {
    let gpu = "n".repeat(60);
    let a = mig_name(&gpu, "1g.10gb", 19, 0);
    let b = mig_name(&gpu, "1g.10gb", 19, 1);
    assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
    assert_ne!(a, b);
    assert!(a.ends_with("-mig-1g10gb-19-0"), "{a}");
    assert_eq!(counter_set("gpu-0"), "gpu-0-counters");
    assert_eq!(
        mig_name("gpu-0", "1g.10gb+me", 20, 3),
        "gpu-0-mig-1g10gbme-20-3"
    );
}
