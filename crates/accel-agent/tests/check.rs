//! `accel agent check`'s explanation (issue 31 item 4) over fake sysfs trees: a
//! verdict for every PCI function, from the drivers' own judgements, names from the
//! tree's `pci.ids`, and the providers the agent would report.

use accel_agent::check::Check;
use accel_agent::testing::{self, FakeSysfs};
use accel_agent::{Agent, Settings};

/// A host whose sysfs is `<dir>/sys`; `physnets` maps `physnet1`.
fn check(dir: &std::path::Path, physnets: &[&str], nova: Option<&str>) -> Check {
    let mut s = Settings::new("http://127.0.0.1:9", "cn1", &dir.join("sys"));
    if !physnets.is_empty() {
        s.driver.physnets.insert(
            "physnet1".into(),
            physnets.iter().map(|p| p.to_string()).collect(),
        );
    }
    if let Some(rules) = nova {
        let conf = dir.join("nova.conf");
        std::fs::write(&conf, format!("[pci]\ndevice_spec = {rules}\n")).unwrap();
        s.nova_config = Some(conf);
    }
    Agent::offline(s).unwrap().check()
}

fn verdict<'a>(c: &'a Check, address: &str) -> &'a accel_agent::check::Function {
    c.functions
        .iter()
        .find(|f| f.address == address)
        .unwrap_or_else(|| panic!("{address} not listed: {:#?}", c.functions))
}

#[test]
fn a_host_with_only_a_mapped_nic_says_why_each_function_is_not_offered() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    testing::bridge_and_virtio(&fs);
    let mapped = testing::nic_without_sriov(&fs, 0x3b, "eth2");
    let unmapped = testing::nic_without_sriov(&fs, 0x3c, "eth3");
    // An AMD GPU (no driver for its vendor) and a USB controller (no driver's class).
    fs.function("0000:41:00.0", 0x1002, 0x740f, 0x030200)
        .driver("amdgpu");
    fs.function("0000:42:00.0", 0x8086, 0xa0ed, 0x0c0330);
    let c = check(dir.path(), &["eth2"], None);

    assert_eq!(c.functions.len(), 6, "{:#?}", c.functions);
    assert!(c.providers.is_empty(), "{:#?}", c.providers);
    assert!(c.problems().is_empty());
    let nic = verdict(&c, &mapped);
    assert_eq!((nic.decision, nic.driver), ("declined", Some("nic")));
    assert!(
        nic.reason.contains("mapped to physnet1 in [nic.physnets]")
            && nic.reason.contains("not VF-capable")
            && nic.reason.contains("igb"),
        "{}",
        nic.reason
    );
    assert_eq!(nic.kernel_driver.as_deref(), Some("igb"));
    assert_eq!(nic.numa_node, Some(0));
    let other = verdict(&c, &unmapped);
    assert_eq!(other.decision, "declined");
    assert!(
        other.reason.contains("not mapped in [nic.physnets]") && other.reason.contains("eth3"),
        "{}",
        other.reason
    );
    let bridge = verdict(&c, "0000:00:00.0");
    assert_eq!(bridge.decision, "ignored");
    assert!(bridge.reason.contains("bridge"));
    assert_eq!(verdict(&c, "0000:00:03.0").decision, "ignored");
    let amd = verdict(&c, "0000:41:00.0");
    assert_eq!(amd.decision, "no_driver", "{}", amd.reason);
    assert!(amd.reason.contains("nvidia"), "{}", amd.reason);
    let usb = verdict(&c, "0000:42:00.0");
    assert_eq!(usb.decision, "not_an_accelerator", "{}", usb.reason);
    assert!(usb.reason.contains("0c0330"), "{}", usb.reason);
    // No pci.ids beside this tree: every name is unknown.
    assert_eq!(c.pci_ids, None);
    assert!(c
        .functions
        .iter()
        .all(|f| f.vendor_name == "unknown" && f.device_name == "unknown"));
    let text = c.text();
    assert!(text.contains("PCI functions looked at: 6"), "{text}");
    assert!(text.contains("ok: 0 device(s), no conflict"), "{text}");
}

#[test]
fn taken_functions_name_their_device_and_providers_carry_classes_traits_and_health() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let ids = testing::pci_ids(dir.path());
    let gpu = testing::two_gpus(&fs)[0].clone();
    let nic = testing::nic(&fs, 0x3b, "eth2", 2);
    let c = check(dir.path(), &["eth2"], None);

    assert_eq!(c.pci_ids.as_deref(), Some(ids.to_str().unwrap()));
    let g = verdict(&c, &gpu);
    assert_eq!((g.decision, g.driver), ("taken", Some("nvidia")));
    assert_eq!(g.accel_device.as_deref(), Some(gpu.as_str()));
    assert_eq!(
        (
            g.vendor_name.as_str(),
            g.device_name.as_str(),
            g.class_name.as_str()
        ),
        (
            "NVIDIA Corporation",
            "GA100 [A100 SXM4 40GB]",
            "3D controller"
        )
    );
    // The NIC's PF is the device's control function, its VFs the accelerators.
    let pf = verdict(&c, &nic);
    assert_eq!(pf.decision, "taken");
    assert!(pf.reason.contains("not itself"), "{}", pf.reason);
    let vf = verdict(&c, "0000:3b:01.0");
    assert_eq!(
        (vf.decision, vf.accel_device.as_deref()),
        ("taken", Some(nic.as_str()))
    );
    assert_eq!(
        vf.device_name, "unknown",
        "154c is not in the test's pci.ids"
    );

    let p = c
        .providers
        .iter()
        .find(|p| p.name == format!("cn1_{nic}"))
        .unwrap();
    assert_eq!(p.inventories.get("CUSTOM_ACCELERATOR_NIC"), Some(&2));
    assert!(p.traits.contains(&"CUSTOM_PHYSNET_PHYSNET1".to_owned()));
    assert_eq!(p.health, "ok");
    let p = c
        .providers
        .iter()
        .find(|p| p.name == format!("cn1_{gpu}"))
        .unwrap();
    assert_eq!(p.inventories.get("CUSTOM_ACCELERATOR_GPU"), Some(&1));
    assert!(p.traits.contains(&"CUSTOM_GPU_NVIDIA_AMPERE".to_owned()));
    let text = c.text();
    assert!(
        text.contains("provider cn1_0000:17:00.0") && text.contains("CUSTOM_ACCELERATOR_GPU=1"),
        "{text}"
    );
}

#[test]
fn devices_novas_rules_match_are_left_to_nova_naming_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let gpus = testing::two_gpus(&fs);
    let c = check(
        dir.path(),
        &[],
        Some(r#"{"vendor_id": "10de", "address": "*:17:00.*"}"#),
    );
    let v = verdict(&c, &gpus[0]);
    assert_eq!((v.decision, v.driver), ("left_to_nova", Some("nvidia")));
    assert!(
        v.reason.contains(r#""address":"*:17:00.*""#),
        "{}",
        v.reason
    );
    assert_eq!(verdict(&c, &gpus[1]).decision, "taken");
    assert_eq!(c.providers.len(), 1);
    assert_eq!(c.problems().len(), 1, "{:?}", c.problems());
}

#[test]
fn check_never_builds_a_keystone_session() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    testing::two_gpus(&fs);
    let mut s = Settings::new("http://127.0.0.1:9", "cn1", &fs.root);
    s.keystone = Some(
        toml::from_str("auth_url = \"http://127.0.0.1:9/v3\"\nusername = \"a\"\npassword = \"b\"\nproject_name = \"p\"\n")
            .unwrap(),
    );
    let agent = Agent::offline(s).unwrap();
    assert!(agent.settings.keystone.is_none());
    assert_eq!(agent.check().providers.len(), 2);
}

#[test]
fn a_vf_no_device_took_is_judged_with_its_pf() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let pf = testing::nic(&fs, 0x3c, "eth3", 2);
    let c = check(dir.path(), &[], None);
    assert_eq!(c.functions.len(), 3);
    let vf = verdict(&c, "0000:3c:01.1");
    assert_eq!((vf.decision, vf.driver), ("declined", Some("nic")));
    assert!(
        vf.reason
            .starts_with(&format!("a VF of {pf}, judged with it: driver nic: a NIC"))
            && vf.reason.contains("not mapped in [nic.physnets]"),
        "{}",
        vf.reason
    );
    assert_eq!(vf.kernel_driver.as_deref(), Some("iavf"));
}
