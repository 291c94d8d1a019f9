//! Discovery over realistic fake sysfs trees: what each driver offers, VF-correctness,
//! what is ignored, bad entries, Nova's rules and the report's shape.

use accel_agent::config::{DriverSettings, FakeDevice};
use accel_agent::drivers::{self, Discovery};
use accel_agent::model::{FoundDevice, Report};
use accel_agent::nova::NovaPci;
use accel_agent::sysfs::Sysfs;
use accel_agent::testing::{self, FakeSysfs};
use accel_core::accelerator::DeviceType;
use serde_json::Value;

fn discover_with(fs: &FakeSysfs, cfg: &DriverSettings, nova: Option<&NovaPci>) -> Discovery {
    let sysfs = Sysfs::new(&fs.root);
    let all = drivers::select(cfg, None).unwrap();
    drivers::discover(&sysfs, cfg, &all, nova)
}

fn discover(fs: &FakeSysfs) -> Discovery {
    discover_with(fs, &DriverSettings::default(), None)
}

fn tree() -> (tempfile::TempDir, FakeSysfs) {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path());
    (dir, fs)
}

fn handles(d: &FoundDevice) -> Vec<String> {
    d.handles.iter().map(|h| h.address.to_string()).collect()
}

#[test]
fn eight_gpus_over_two_numa_nodes() {
    let (_d, fs) = tree();
    let addrs = testing::eight_gpus(&fs);
    let found = discover(&fs);
    assert!(found.warnings.is_empty(), "{:?}", found.warnings);
    assert_eq!(found.devices.len(), 8);
    for (d, a) in found.devices.iter().zip(&addrs) {
        assert_eq!(d.address.to_string(), *a);
        assert_eq!(d.device_type, DeviceType::Gpu);
        assert_eq!((d.class.as_str(), d.count), ("GPU", 1));
        assert_eq!(handles(d), std::slice::from_ref(a));
        assert_eq!(d.provider_name("cn1"), format!("cn1_{a}"));
    }
    let numa: Vec<Vec<String>> = found.devices.iter().map(|d| d.device_traits()).collect();
    assert_eq!(
        numa[0],
        [
            "CUSTOM_GPU_NVIDIA",
            "CUSTOM_GPU_NVIDIA_AMPERE",
            "CUSTOM_OWNER_ACCEL",
            "CUSTOM_NUMA_0"
        ]
    );
    let on = |n: &str| numa.iter().filter(|t| t.iter().any(|x| x == n)).count();
    assert_eq!((on("CUSTOM_NUMA_0"), on("CUSTOM_NUMA_1")), (4, 4));
}

fn assert_pac(d: &FoundDevice, vfs: usize) {
    assert_eq!(d.device_type, DeviceType::Fpga);
    assert_eq!(d.family.as_deref(), Some("ARRIA10"));
    assert_eq!(d.count, 0, "an FPGA card's inventory is on its regions");
    assert_eq!(d.regions.len(), 1);
    let r = &d.regions[0];
    assert_eq!(r.count, vfs.max(1) as i64);
    let traits = d.region_traits(r);
    assert!(traits.contains(&"CUSTOM_FPGA_REGION_INTEL_9926AB6D6C925A68AABCA7D84C545738".into()));
    assert!(traits.contains(&"CUSTOM_FPGA_FUNCTION_INTEL_D8424DC4A4A3C413F89E433683F9040B".into()));
    assert!(traits.contains(&"CUSTOM_PROGRAMMABLE".into()));
    assert!(traits.contains(&"CUSTOM_FPGA_INTEL_ARRIA10".into()));
    let hs: Vec<String> = r.handles.iter().map(|h| h.address.to_string()).collect();
    if vfs == 0 {
        assert_eq!(hs, [d.address.to_string()]);
    } else {
        assert_eq!(hs.len(), vfs);
        assert!(
            !hs.contains(&d.address.to_string()),
            "the PF is not offered"
        );
    }
    assert_eq!(d.functions.len(), 1 + vfs);
}

#[test]
fn intel_pac_in_both_layouts_with_and_without_vfs() {
    let (_d, fs) = tree();
    testing::pac_opae(&fs, 0x3b, 0);
    testing::pac_opae(&fs, 0x5e, 2);
    testing::pac_dfl(&fs, 0x86, 0);
    testing::pac_dfl(&fs, 0xaf, 3);
    let found = discover(&fs);
    assert!(found.warnings.is_empty(), "{:?}", found.warnings);
    assert_eq!(found.devices.len(), 4, "VFs are not devices");
    assert_pac(&found.devices[0], 0);
    assert_pac(&found.devices[1], 2);
    assert_pac(&found.devices[2], 0);
    assert_pac(&found.devices[3], 3);
    assert_eq!(found.devices[2].numa_node, Some(1));
}

/// A function that shows both FPGA trees has one partial-reconfiguration region, read
/// in the tree of the driver bound to it; with neither driver bound, the kernel's DFL
/// tree, and a warning.
#[test]
fn intel_pac_with_both_trees_reports_the_bound_drivers_regions_once() {
    let region = |id: &str| {
        format!(
            "CUSTOM_FPGA_REGION_INTEL_{}",
            id.replace('-', "").to_uppercase()
        )
    };
    let function = |id: &str| format!("CUSTOM_FPGA_FUNCTION_INTEL_{}", id.to_uppercase());
    for (driver, interface, afu, warned) in [
        (
            "intel-fpga-pci",
            testing::PAC_INTERFACE_ID,
            testing::PAC_AFU_ID,
            false,
        ),
        (
            "dfl-pci",
            testing::PAC_DFL_INTERFACE_ID,
            testing::PAC_DFL_AFU_ID,
            false,
        ),
        (
            "vfio-pci",
            testing::PAC_DFL_INTERFACE_ID,
            testing::PAC_DFL_AFU_ID,
            true,
        ),
    ] {
        let (_d, fs) = tree();
        testing::pac_both_trees(&fs, 0x3b, driver);
        let found = discover(&fs);
        assert_eq!(
            found.warnings.is_empty(),
            !warned,
            "{driver}: {:?}",
            found.warnings
        );
        assert_eq!(found.devices.len(), 1, "{driver}");
        let d = &found.devices[0];
        assert_eq!(d.regions.len(), 1, "{driver}: one physical region");
        let traits = d.region_traits(&d.regions[0]);
        assert!(traits.contains(&region(interface)), "{driver}: {traits:?}");
        assert!(traits.contains(&function(afu)), "{driver}: {traits:?}");
        let other = if interface == testing::PAC_INTERFACE_ID {
            testing::PAC_DFL_INTERFACE_ID
        } else {
            testing::PAC_INTERFACE_ID
        };
        assert!(!traits.contains(&region(other)), "{driver}: {traits:?}");
        // The report carries one region provider under the card, not two.
        let json = Report::new("cn1", found.devices.clone()).to_json();
        let regions: Vec<&Value> = json["devices"][0]["deployables"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|dep| dep["num_accelerators"].as_i64().unwrap_or(0) > 0)
            .collect();
        assert_eq!(regions.len(), 1, "{driver}: {json}");
    }
}

#[test]
fn qat_card_with_sixteen_vfs_is_one_device() {
    let (_d, fs) = tree();
    let pf = testing::qat(&fs, 0x3d, 16);
    let found = discover(&fs);
    assert_eq!(found.devices.len(), 1);
    let d = &found.devices[0];
    assert_eq!(
        (d.device_type, d.class.as_str(), d.count),
        (DeviceType::Qat, "QAT", 16)
    );
    assert_eq!(d.handles.len(), 16);
    assert!(!handles(d).contains(&pf));
    assert_eq!(
        d.device_traits()[..2],
        ["CUSTOM_QAT_INTEL", "CUSTOM_QAT_INTEL_C62X"]
    );
    // Without VFs the PF is the host's crypto device (bound to c6xx): not offered.
    let (_d2, fs2) = tree();
    testing::qat(&fs2, 0x3d, 0);
    assert!(discover(&fs2).devices.is_empty());
}

#[test]
fn nvme_offered_only_when_not_the_hosts() {
    let (_d, fs) = tree();
    testing::nvme(&fs, 0x5a, "vfio-pci");
    testing::nvme(&fs, 0x5b, "nvme");
    let found = discover(&fs);
    assert_eq!(found.devices.len(), 1);
    let d = &found.devices[0];
    assert_eq!(d.address.to_string(), "0000:5a:00.0");
    assert_eq!((d.device_type, d.count), (DeviceType::Ssd, 1));
    assert_eq!(d.device_traits()[0], "CUSTOM_SSD_SAMSUNG");
}

#[test]
fn nic_vfs_on_a_mapped_physical_network() {
    let (_d, fs) = tree();
    testing::nic(&fs, 0x18, "eth2", 4);
    testing::nic(&fs, 0x19, "eth3", 2);
    let mut cfg = DriverSettings::default();
    cfg.physnets.insert("physnet1".into(), vec!["eth2".into()]);
    let found = discover_with(&fs, &cfg, None);
    assert_eq!(found.devices.len(), 1, "the unmapped NIC stays the host's");
    let d = &found.devices[0];
    assert_eq!((d.device_type, d.count), (DeviceType::Nic, 4));
    assert!(d
        .device_traits()
        .contains(&"CUSTOM_PHYSNET_PHYSNET1".into()));
    let json = Report::new("cn1", found.devices.clone()).to_json();
    let info = json["devices"][0]["deployables"][0]["attach_handles"][0]["attach_info"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        info,
        r#"{"bus": "18", "device": "01", "domain": "0000", "function": "0", "physical_network": "physnet1"}"#
    );
}

#[test]
fn bridges_virtio_and_unknown_classes_are_ignored() {
    let (_d, fs) = tree();
    testing::bridge_and_virtio(&fs);
    fs.function("0000:00:1f.3", 0x8086, 0xa348, 0x040300);
    let found = discover(&fs);
    assert!(found.devices.is_empty());
    assert!(found.warnings.is_empty());
}

#[test]
fn gpu_vfs_are_never_extra_gpus() {
    let (_d, fs) = tree();
    testing::gpu_with_vfs(&fs, 0x41, 4);
    testing::eight_gpus(&fs);
    let found = discover(&fs);
    assert_eq!(
        found.devices.len(),
        9,
        "8 GPUs + 1 carved GPU, no VF devices"
    );
    let carved = found
        .devices
        .iter()
        .find(|d| d.address.to_string() == "0000:41:00.0")
        .unwrap();
    assert_eq!((carved.class.as_str(), carved.count), ("VGPU", 4));
    assert_eq!(carved.handles.len(), 4);
    let gpus: i64 = found
        .devices
        .iter()
        .filter(|d| d.class == "GPU")
        .map(|d| d.count)
        .sum();
    assert_eq!(gpus, 8);
}

#[test]
fn malformed_entries_are_skipped_with_a_warning_naming_the_path() {
    let (_d, fs) = tree();
    testing::eight_gpus(&fs);
    fs.function("0000:20:00.0", 0x10de, 0x20b0, 0x030200)
        .file("vendor", "not-hex");
    std::fs::create_dir_all(fs.root.join("bus/pci/devices/garbage")).unwrap();
    fs.function("0000:21:00.0", 0x10de, 0x20b0, 0x030200)
        .file("numa_node", "two");
    let found = discover(&fs);
    assert_eq!(
        found.devices.len(),
        9,
        "the bad NUMA file only loses the NUMA node"
    );
    let w = found.warnings.join("\n");
    assert!(w.contains("0000:20:00.0/vendor: not a hex number"), "{w}");
    assert!(
        w.contains("devices/garbage: directory name is not a PCI address"),
        "{w}"
    );
    assert!(w.contains("0000:21:00.0/numa_node: not an integer"), "{w}");
    let odd = found
        .devices
        .iter()
        .find(|d| d.address.to_string() == "0000:21:00.0")
        .unwrap();
    assert_eq!(odd.numa_node, None);
}

#[test]
fn devices_nova_claims_are_left_to_nova() {
    let (_d, fs) = tree();
    testing::eight_gpus(&fs);
    let qat = testing::qat(&fs, 0x3d, 16);
    let nova = NovaPci::parse(&format!(
        "[pci]\ndevice_spec = {{\"vendor_id\": \"10de\", \"product_id\": \"20b0\", \"address\": \"*:17:00.*\"}}\n\
         passthrough_whitelist = {{\"address\": \"{qat}\"}}\n"
    ))
    .unwrap();
    let found = discover_with(&fs, &DriverSettings::default(), Some(&nova));
    assert_eq!(found.devices.len(), 7);
    assert!(found
        .devices
        .iter()
        .all(|d| d.address.to_string() != "0000:17:00.0"));
    // The GPU once, the QAT PF and (through the PF's exact address) its 16 VFs.
    assert_eq!(found.conflicts.len(), 1 + 17);
    assert_eq!(found.conflicts[0].device.to_string(), "0000:17:00.0");
    assert!(found.conflicts[0].rule.contains("20b0"));
}

#[test]
fn fake_devices_from_the_configuration() {
    let (_d, fs) = tree();
    let spec: FakeDevice = toml::from_str(
        "type = \"FPGA\"\ncount = 2\nregions = 2\nnuma_node = 1\nfamily = \"demo\"\n\
         interface_id = \"9926ab6d-6c92-5a68-aabc-a7d84c545738\"",
    )
    .unwrap();
    let cfg = DriverSettings {
        fake: vec![spec],
        ..Default::default()
    };
    let found = discover_with(&fs, &cfg, None);
    assert_eq!(found.devices.len(), 1);
    let d = &found.devices[0];
    assert_eq!(d.address.to_string(), "00fa:00:00.0");
    assert_eq!(d.regions.len(), 2);
    assert_eq!(d.regions[1].count, 2);
    assert_eq!(
        d.device_traits()[..2],
        ["CUSTOM_FPGA_FAKE", "CUSTOM_FPGA_FAKE_DEMO"]
    );
}

#[test]
fn reports_are_byte_identical_while_nothing_changes() {
    let (_d, fs) = tree();
    testing::eight_gpus(&fs);
    testing::pac_dfl(&fs, 0xaf, 2);
    let a = Report::new("cn1", discover(&fs).devices).to_json();
    let b = Report::new("cn1", discover(&fs).devices).to_json();
    assert_eq!(a.to_string(), b.to_string());
    let fpga = a["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["type"] == "FPGA")
        .unwrap();
    let deps = fpga["deployables"].as_array().unwrap();
    assert_eq!(deps.len(), 2);
    assert_eq!(deps[0]["name"], "cn1_0000:af:00.0");
    assert_eq!(deps[0]["num_accelerators"], 0);
    assert_eq!(deps[1]["name"], "cn1_0000:af:00.0_region0");
    assert_eq!(deps[1]["parent"], "cn1_0000:af:00.0");
    assert_eq!(deps[1]["num_accelerators"], 2);
    let rc: Vec<&Value> = deps[1]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["key"] == "rc")
        .collect();
    assert_eq!(rc[0]["value"], "CUSTOM_ACCELERATOR_FPGA");
}
