//! GPU partitions through the agent's real NVML code path (libloading, nvml.h layouts)
//! against `accel-fake-nvml`, whose MIG geometry is parsed from `nvidia-smi mig
//! -lgip/-lgipp` captures and which refuses overlapping placements as NVML does
//! (issue 45 items 4 to 6). Each test loads its own copy of the fake library, so the
//! tests run in parallel without sharing GPUs.

use accel_agent::config::DriverSettings;
use accel_agent::drivers::{self, Discovery};
use accel_agent::metrics::Metrics;
use accel_agent::partitions::{Code, Held, MdevOutcome, Mig, MigError, PartitionError, Partitions};
use accel_agent::pci::PciAddress;
use accel_agent::sysfs::Sysfs;
use accel_agent::testing::{nvidia_gpu, FakeNvml, FakeSysfs};
use accel_api::partitions::{Engines, GpuPartitions, MigPlacement, MigProfile};
use accel_testkit::Logs;
use std::path::Path;
use std::sync::Arc;

const H100: &str = "0000:3b:00.0";
const H200: &str = "0000:5e:00.0";

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

fn at(start: u32, size: u32) -> MigPlacement {
    MigPlacement { start, size }
}

/// Two GPUs in sysfs (H100 SXM5 `10de:2330`, H200 SXM `10de:2335`) and in the fake.
fn host(dir: &Path, nvml_config: &str) -> (FakeSysfs, FakeNvml) {
    let fs = FakeSysfs::new(dir.join("sys"));
    nvidia_gpu(&fs, H100, 0x2330).numa(0);
    nvidia_gpu(&fs, H200, 0x2335).numa(1);
    let nvml = FakeNvml::new(&dir.join("nvml"), nvml_config);
    (fs, nvml)
}

const BOTH_MIG: &str =
    "gpu bus=0000:3b:00.0 model=h100 mig=on\ngpu bus=0000:5e:00.0 model=h200 mig=on";

fn discover(fs: &FakeSysfs, nvml: &FakeNvml) -> Discovery {
    let cfg = DriverSettings {
        nvml: true,
        nvml_library: nvml.library.clone(),
        ..Default::default()
    };
    let all = drivers::select(&cfg, Some(&["nvidia".to_owned()])).unwrap();
    drivers::discover(&Sysfs::new(&fs.root), &cfg, &all, None)
}

fn partitions_of(d: &Discovery, gpu: &str) -> GpuPartitions {
    let dev = d
        .devices
        .iter()
        .find(|x| x.address.to_string() == gpu)
        .unwrap_or_else(|| panic!("{gpu} not found: {d:?}"));
    dev.partitions
        .clone()
        .unwrap_or_else(|| panic!("{gpu} has no partitions"))
}

/// The profiles a capture pair describes, read here independently of the fake: what
/// the agent reports must be what `nvidia-smi` printed.
fn captured(name: &str) -> Vec<MigProfile> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../accel-fake-nvml/captures");
    let lgip = std::fs::read_to_string(dir.join(format!("{name}.lgip.txt"))).unwrap();
    let lgipp = std::fs::read_to_string(dir.join(format!("{name}.lgipp.txt"))).unwrap();
    let mut placements = std::collections::HashMap::new();
    for line in lgipp.lines() {
        let (_, rest) = line.split_once("Profile ID").unwrap();
        let (id, rest) = rest.split_once("Placement").unwrap();
        let inner = &rest[rest.find('{').unwrap() + 1..rest.find('}').unwrap()];
        let size: u32 = rest[rest.find("}:").unwrap() + 2..].trim().parse().unwrap();
        let starts: Vec<MigPlacement> = inner
            .split(',')
            .map(|s| at(s.parse().unwrap(), size))
            .collect();
        placements.insert(id.trim().parse::<u32>().unwrap(), starts);
    }
    let rows: Vec<Vec<&str>> = lgip
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split_whitespace().collect::<Vec<_>>())
        .filter(|t| !t.is_empty() && t[0].parse::<u32>().is_ok())
        .collect();
    let mut out = Vec::new();
    for pair in rows.chunks(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let n = |s: &str| s.parse::<u32>().unwrap();
        let gib: f64 = a[5].parse().unwrap();
        let id = n(a[3]);
        out.push(MigProfile {
            id,
            name: a[2].to_owned(),
            compute_slices: n(&a[2][..a[2].find('g').unwrap()]),
            engines: Engines {
                memory_mib: ((gib * 1024.0 / 32.0).round() as i64) * 32,
                multiprocessors: n(a[7]),
                decoders: n(a[8]),
                encoders: n(a[9]),
                copy_engines: n(b[0]),
                jpeg_engines: n(b[1]),
                ofa_engines: n(b[2]),
            },
            placements: placements.remove(&id).unwrap(),
        });
    }
    out.sort_by_key(|p| p.id);
    out
}

fn sorted(mut p: Vec<MigProfile>) -> Vec<MigProfile> {
    p.sort_by_key(|p| p.id);
    p
}

#[test]
fn discovery_reports_an_h100_and_an_h200_as_their_captures_say() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    let d = discover(&fs, &nvml);
    assert!(d.failed.is_empty(), "{:?}", d.failed);
    for (gpu, capture, model, memory_mib, total_mib) in [
        (
            H100,
            "h100-80gb-hbm3",
            "NVIDIA H100 80GB HBM3",
            81559,
            81152,
        ),
        (H200, "h200-141gb", "NVIDIA H200", 143771, 143360),
    ] {
        let dev = d
            .devices
            .iter()
            .find(|x| x.address.to_string() == gpu)
            .unwrap();
        assert_eq!(dev.model, model);
        assert_eq!(dev.family.as_deref(), Some("HOPPER"));
        assert_eq!(dev.memory.as_ref().map(|m| m.mib), Some(memory_mib));
        assert!(dev
            .extra_traits
            .iter()
            .any(|t| t == "CUSTOM_GPU_NVIDIA_MIG"));
        let p = partitions_of(&d, gpu);
        assert!(p.mig_enabled);
        assert_eq!(p.memory_slices, 8);
        assert_eq!(
            p.totals,
            Engines {
                memory_mib: total_mib,
                multiprocessors: 132,
                copy_engines: 8,
                decoders: 7,
                encoders: 0,
                jpeg_engines: 7,
                ofa_engines: 1,
            }
        );
        assert_eq!(sorted(p.profiles.clone()), captured(capture), "{gpu}");
        assert!(p.instances.is_empty());
        assert!(p.vgpu_types.is_empty());
    }
    // The report carries them to the server.
    let body = accel_agent::model::Report::new("cn1", d.devices.clone()).body();
    let wire = body
        .devices
        .iter()
        .find(|x| x.model == "NVIDIA H200")
        .unwrap();
    let profiles = &wire.partitions.as_ref().unwrap().profiles;
    assert!(profiles.iter().any(|p| p.name == "7g.141gb" && p.id == 0));
}

#[test]
fn mig_off_reports_the_mode_and_no_profiles_and_a_gpu_without_mig_none() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(
        dir.path(),
        "gpu bus=0000:3b:00.0 model=h100 mig=off\ngpu bus=0000:5e:00.0 model=l4",
    );
    let d = discover(&fs, &nvml);
    let p = partitions_of(&d, H100);
    assert!(!p.mig_enabled);
    assert!(p.profiles.is_empty() && p.instances.is_empty());
    assert_eq!(p.totals.memory_mib, 81559);
    let l4 = d
        .devices
        .iter()
        .find(|x| x.address.to_string() == H200)
        .unwrap();
    assert_eq!(l4.partitions, None);
    assert_eq!(l4.model, "NVIDIA L4");
}

fn partitions(fs: &FakeSysfs, nvml: &FakeNvml) -> Partitions {
    Partitions::open(&fs.root, nvml.partition_settings())
}

fn nvml_code(e: &PartitionError) -> Option<u32> {
    e.code().map(|c| c.0)
}

#[test]
fn seven_1g_instances_fill_an_h100_and_the_eighth_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    let p = partitions(&fs, &nvml);
    let mut uuids = Vec::new();
    for s in 0..7 {
        let i = p
            .create(addr(H100), 19, at(s, 1), &format!("claim-{s}"))
            .unwrap();
        assert_eq!((i.profile_id, i.placement), (19, at(s, 1)));
        assert!(i.uuid.starts_with("MIG-"), "{}", i.uuid);
        uuids.push(i.uuid);
    }
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 7);
    let e = p.create(addr(H100), 19, at(3, 1), "claim-7").unwrap_err();
    assert_eq!(e.code(), Some(Code::INSUFFICIENT_RESOURCES), "{e}");
    assert!(
        e.to_string().contains("NVML_ERROR_INSUFFICIENT_RESOURCES"),
        "{e}"
    );
    let e = p.create(addr(H100), 19, at(7, 1), "claim-7").unwrap_err();
    assert_eq!(e.code(), Some(Code::INVALID_ARGUMENT), "{e}");
    // The other GPU is untouched, and discovery now shows the seven MIG devices.
    p.create(addr(H200), 19, at(0, 1), "claim-8").unwrap();
    let d = discover(&fs, &nvml);
    let h100 = partitions_of(&d, H100);
    assert_eq!(h100.instances.len(), 7);
    assert!(h100
        .instances
        .iter()
        .all(|i| i.profile_id == 19 && i.compute_instance_id == 0));
    assert_eq!(partitions_of(&d, H200).instances.len(), 1);
    assert_eq!(p.checkpoint().unwrap().mig.len(), 8);
}

#[test]
fn a_3g_at_4_conflicts_with_a_1g_at_5() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    let p = partitions(&fs, &nvml);
    let big = p.create(addr(H100), 9, at(4, 4), "big").unwrap();
    let e = p.create(addr(H100), 19, at(5, 1), "small").unwrap_err();
    assert_eq!(nvml_code(&e), Some(23), "{e}");
    p.destroy(&big.uuid).unwrap();
    let small = p.create(addr(H100), 19, at(5, 1), "small").unwrap();
    let e = p.create(addr(H100), 9, at(4, 4), "big").unwrap_err();
    assert_eq!(nvml_code(&e), Some(23), "{e}");
    // The other half of the GPU is free for it.
    p.create(addr(H100), 9, at(0, 4), "big").unwrap();
    p.destroy(&small.uuid).unwrap();
}

#[test]
fn destroy_then_create_again_gives_a_new_mig_device_and_only_ours_are_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    let metrics = Arc::new(Metrics::new());
    let p = partitions(&fs, &nvml).with_metrics(metrics.clone());
    let first = p.create(addr(H200), 14, at(2, 2), "pod-a").unwrap();
    // Asked twice for the same slot and holder (a retried prepare): the same device.
    assert_eq!(p.create(addr(H200), 14, at(2, 2), "pod-a").unwrap(), first);
    let held = p.destroy(&first.uuid).unwrap();
    assert_eq!((held.gpu.as_str(), held.holder.as_str()), (H200, "pod-a"));
    let again = p.create(addr(H200), 14, at(2, 2), "pod-b").unwrap();
    assert_ne!(again.uuid, first.uuid);
    // One made outside the agent (an operator's) is left alone.
    let nvml_direct =
        accel_agent::nvml::Nvml::open_at(&nvml.library.display().to_string()).unwrap();
    let theirs = nvml_direct.create(addr(H200), 19, at(6, 1)).unwrap();
    let e = p.destroy(&theirs.uuid).unwrap_err();
    assert!(matches!(e, PartitionError::NotOurs(_)), "{e}");
    assert_eq!(nvml_direct.instances(addr(H200)).unwrap().len(), 2);
    let text = metrics.openmetrics();
    assert!(
        text.contains("accel_agent_partition_operations_total{kind=\"mig\",action=\"create\",outcome=\"ok\"} 2"),
        "{text}"
    );
    assert!(text.contains(
        "accel_agent_partition_operations_total{kind=\"mig\",action=\"destroy\",outcome=\"ok\"} 1"
    ));
}

#[test]
fn an_injected_failure_is_a_typed_error_with_a_log_line_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(
        dir.path(),
        &format!("{BOTH_MIG}\nfail call=nvmlGpuInstanceCreateComputeInstance code=INSUFFICIENT_RESOURCES once"),
    );
    let metrics = Arc::new(Metrics::new());
    let p = partitions(&fs, &nvml).with_metrics(metrics.clone());
    let (logs, _guard) = Logs::capture();
    let e = p.create(addr(H100), 5, at(0, 4), "vm-1").unwrap_err();
    match &e {
        PartitionError::Create {
            gpu,
            profile_id: 5,
            source: MigError::Nvml { call, code, .. },
            ..
        } => {
            assert_eq!(*gpu, addr(H100));
            assert_eq!(*call, "nvmlGpuInstanceCreateComputeInstance");
            assert_eq!(*code, Code::INSUFFICIENT_RESOURCES);
        }
        other => panic!("{other:?}"),
    }
    let text = logs.text();
    assert!(text.contains("creating a MIG instance failed"), "{text}");
    assert!(
        text.contains("nvmlGpuInstanceCreateComputeInstance"),
        "{text}"
    );
    assert!(text.contains("INSUFFICIENT_RESOURCES"), "{text}");
    assert!(metrics
        .openmetrics()
        .contains("accel_agent_partition_operations_total{kind=\"mig\",action=\"create\",outcome=\"failed\"} 1"));
    // The GPU instance made before the failure was rolled back: the slot is free.
    let made = p.create(addr(H100), 5, at(0, 4), "vm-1").unwrap();
    assert_eq!(made.placement, at(0, 4));
}

#[test]
fn a_lost_gpu_is_unhealthy_and_a_failing_read_fails_the_driver() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(
        dir.path(),
        "gpu bus=0000:3b:00.0 model=h100 mig=on lost\ngpu bus=0000:5e:00.0 model=h200 mig=on",
    );
    let d = discover(&fs, &nvml);
    assert!(d.failed.is_empty(), "{:?}", d.failed);
    let lost = d
        .devices
        .iter()
        .find(|x| x.address.to_string() == H100)
        .unwrap();
    match &lost.health {
        accel_agent::model::Health::Unhealthy(r) => assert!(r.contains("GPU_IS_LOST"), "{r}"),
        h => panic!("{h:?}"),
    }
    assert!(partitions_of(&d, H200).mig_enabled);

    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(
        dir.path(),
        &format!("{BOTH_MIG}\nfail call=nvmlDeviceGetGpuInstancePossiblePlacements_v2 code=UNKNOWN once gpu={H200}"),
    );
    let d = discover(&fs, &nvml);
    assert_eq!(d.failed.len(), 1, "{d:?}");
    assert!(d.failed[0].reason.contains(H200), "{}", d.failed[0].reason);
    assert!(d.failed[0]
        .reason
        .contains("nvmlDeviceGetGpuInstancePossiblePlacements_v2"));
}

#[test]
fn after_a_reboot_held_partitions_are_recreated_or_reported_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    let (a, b) = {
        let p = partitions(&fs, &nvml);
        let a = p.create(addr(H100), 19, at(0, 1), "a").unwrap();
        let b = p.create(addr(H100), 9, at(4, 4), "b").unwrap();
        p.create(addr(H200), 19, at(1, 1), "c").unwrap();
        (a, b)
        // dropped: NVML shut down, as when the node goes down
    };
    nvml.reboot();
    let p = partitions(&fs, &nvml);
    let held = [
        Held::Mig {
            gpu: addr(H100),
            profile_id: 19,
            placement: at(0, 1),
            holder: "a".into(),
        },
        Held::Mig {
            gpu: addr(H100),
            profile_id: 9,
            placement: at(4, 4),
            holder: "b".into(),
        },
        // A 4g at 0 cannot be beside the 1g at 0: reported lost.
        Held::Mig {
            gpu: addr(H100),
            profile_id: 5,
            placement: at(0, 4),
            holder: "d".into(),
        },
    ];
    let (logs, _guard) = Logs::capture();
    let r = p.after_boot(&held).unwrap();
    assert!(r.rebooted);
    assert!(r.kept.is_empty());
    let recreated: Vec<(&str, Option<&str>)> = r
        .recreated
        .iter()
        .map(|x| (x.holder.as_str(), x.old_uuid.as_deref()))
        .collect();
    assert_eq!(
        recreated,
        [("a", Some(a.uuid.as_str())), ("b", Some(b.uuid.as_str()))]
    );
    assert!(r
        .recreated
        .iter()
        .all(|x| x.instance.uuid != a.uuid && x.instance.uuid != b.uuid));
    assert_eq!(r.lost.len(), 1);
    assert_eq!(r.lost[0].held, held[2]);
    assert!(
        r.lost[0].reason.contains("INSUFFICIENT_RESOURCES"),
        "{}",
        r.lost[0].reason
    );
    assert!(
        logs.text().contains("a held MIG partition is lost"),
        "{}",
        logs.text()
    );
    let cp = p.checkpoint().unwrap();
    assert_eq!(cp.boot_id, "boot-2");
    assert_eq!(cp.mig.len(), 2);
    // The H200's 1g was held by no one: gone with the reboot, not re-created.
    assert!(p.checkpoint().unwrap().mig.iter().all(|m| m.gpu == H100));
    let new_a = r.recreated[0].instance.clone();
    drop(p);

    // The agent restarts without a reboot: what exists is kept (same UUID), what no
    // one holds any more is destroyed.
    let p = partitions(&fs, &nvml);
    let r = p.after_boot(&held[..1]).unwrap();
    assert!(!r.rebooted);
    assert_eq!(r.kept.len(), 1);
    assert_eq!(r.kept[0].instance, new_a);
    assert_eq!(r.released.len(), 1);
    assert_eq!(r.released[0].holder, "b");
    assert!(r.recreated.is_empty() && r.lost.is_empty());
    let nvml_direct =
        accel_agent::nvml::Nvml::open_at(&nvml.library.display().to_string()).unwrap();
    assert_eq!(nvml_direct.instances(addr(H100)).unwrap(), [new_a]);
}

#[test]
fn a_recreation_that_nvml_refuses_is_lost_with_the_code() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    {
        partitions(&fs, &nvml)
            .create(addr(H200), 0, at(0, 8), "vm")
            .unwrap();
    }
    nvml.configure(&format!(
        "{BOTH_MIG}\nfail call=nvmlDeviceCreateGpuInstanceWithPlacement code=GPU_IS_LOST always gpu={H200}"
    ));
    nvml.reboot();
    let p = partitions(&fs, &nvml);
    let held = [Held::Mig {
        gpu: addr(H200),
        profile_id: 0,
        placement: at(0, 8),
        holder: "vm".into(),
    }];
    let r = p.after_boot(&held).unwrap();
    assert_eq!(r.lost.len(), 1, "{r:?}");
    assert!(
        r.lost[0].reason.contains("GPU_IS_LOST"),
        "{}",
        r.lost[0].reason
    );
    assert!(p.checkpoint().unwrap().mig.is_empty());
}

#[tokio::test]
async fn release_runs_the_gpus_cleaning_rule_and_refuses_a_reset_under_other_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    let p = partitions(&fs, &nvml);
    let one = p.create(addr(H100), 19, at(0, 1), "a").unwrap();
    let two = p.create(addr(H100), 19, at(1, 1), "b").unwrap();
    let cleaner = accel_agent::testing::FakeCleaner::new(dir.path().join("cleaner"));
    let mut file = cleaner.rule(10);
    file.command.push("{uuid}".into());
    let rule = accel_agent::cleaning::validate(vec![file])
        .unwrap()
        .remove(0);
    p.release(&one.uuid, Some(&rule)).await.unwrap();
    let cleaned = std::fs::read_to_string(cleaner.dir.join("cleaned")).unwrap();
    assert_eq!(cleaned.trim(), H100);
    let reset = accel_agent::cleaning::validate(vec![accel_agent::cleaning::CleaningFile {
        method: "pci-reset".into(),
        ..Default::default()
    }])
    .unwrap()
    .remove(0);
    let three = p.create(addr(H100), 19, at(2, 1), "c").unwrap();
    let e = p.release(&two.uuid, Some(&reset)).await.unwrap_err();
    assert!(e.to_string().contains("1 other MIG device"), "{e}");
    // The partition itself was destroyed before the rule ran.
    assert!(p
        .checkpoint()
        .unwrap()
        .mig
        .iter()
        .all(|m| m.instance.uuid != two.uuid));
    p.release(&three.uuid, None).await.unwrap();
}

/// A GPU with an mdev type, as the kernel shows one: its `create` file written by the
/// agent, the mdev's directory made here as the kernel would.
fn mdev_gpu(fs: &FakeSysfs) {
    nvidia_gpu(fs, "0000:af:00.0", 0x20b5)
        .file("mdev_supported_types/nvidia-471/name", "GRID A100-4C")
        .file("mdev_supported_types/nvidia-471/available_instances", "10")
        .file(
            "mdev_supported_types/nvidia-471/description",
            "num_heads=1, frl_config=60, framebuffer=4096M, max_resolution=4096x2160, max_instance=10",
        )
        .file("mdev_supported_types/nvidia-471/create", "");
}

#[test]
fn mdevs_are_created_and_removed_through_sysfs_when_the_switch_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    mdev_gpu(&fs);
    let p = partitions(&fs, &nvml);
    let uuid = "9f3a1c2e-0b6d-4f7a-8e21-5c4d3b2a1f00";
    let gpu = addr("0000:af:00.0");
    assert_eq!(
        p.create_mdev(gpu, "nvidia-471", uuid, "arq-1").unwrap(),
        MdevOutcome::Created
    );
    let create = fs
        .root
        .join("bus/pci/devices/0000:af:00.0/mdev_supported_types/nvidia-471/create");
    assert_eq!(std::fs::read_to_string(&create).unwrap(), uuid);
    let e = p.create_mdev(gpu, "nvidia-999", uuid, "arq-1").unwrap_err();
    assert!(e.to_string().contains("no mdev type nvidia-999"), "{e}");
    let dev = fs.root.join("bus/mdev/devices").join(uuid);
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("remove"), "").unwrap();
    assert_eq!(p.remove_mdev(uuid).unwrap(), MdevOutcome::Removed);
    assert_eq!(std::fs::read_to_string(dev.join("remove")).unwrap(), "1");
    assert!(p.checkpoint().unwrap().mdevs.is_empty());

    let mut off = nvml.partition_settings();
    off.create_mdev_at_bind = false;
    std::fs::write(&create, "").unwrap();
    let p = Partitions::open(&fs.root, off);
    assert_eq!(
        p.create_mdev(gpu, "nvidia-471", uuid, "arq-2").unwrap(),
        MdevOutcome::LeftToConsumer
    );
    assert_eq!(std::fs::read_to_string(&create).unwrap(), "");
}

#[test]
fn vgpu_types_come_from_mdev_types_and_vendor_vfio_vfs() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    mdev_gpu(&fs);
    // An H100 with two VFs on the vendor-specific VFIO framework: one free VF listing
    // what it can become, one already typed.
    let vfs = accel_agent::testing::vf_addresses(0x3c, 2, 0x2330);
    let (_pf, vf) = nvidia_gpu(&fs, "0000:3c:00.0", 0x2330).sriov(&fs, 16, &vfs);
    let listing = "ID    : vGPU Name\n1122  : NVIDIA H100-1-10C\n1130  : NVIDIA H100-20C\n";
    std::fs::create_dir_all(vf[0].path.join("nvidia")).unwrap();
    std::fs::write(vf[0].path.join("nvidia/creatable_vgpu_types"), listing).unwrap();
    std::fs::write(vf[0].path.join("nvidia/current_vgpu_type"), "0\n").unwrap();
    std::fs::create_dir_all(vf[1].path.join("nvidia")).unwrap();
    std::fs::write(
        vf[1].path.join("nvidia/creatable_vgpu_types"),
        "ID    : vGPU Name\n",
    )
    .unwrap();
    std::fs::write(vf[1].path.join("nvidia/current_vgpu_type"), "1130\n").unwrap();
    nvml.configure(&format!(
        "{BOTH_MIG}\ngpu bus=0000:3c:00.0 model=h100 mig=on"
    ));
    let d = discover(&fs, &nvml);
    let a100 = partitions_of(&d, "0000:af:00.0");
    assert!(!a100.mig_enabled);
    assert_eq!(a100.vgpu_types.len(), 1);
    let t = &a100.vgpu_types[0];
    assert_eq!(
        (
            t.type_id.as_str(),
            t.name.as_str(),
            t.memory_mib,
            t.max_instances
        ),
        ("nvidia-471", "GRID A100-4C", 4096, 10)
    );
    let h100 = partitions_of(&d, "0000:3c:00.0");
    let types: Vec<(&str, i64, u32, Option<u32>)> = h100
        .vgpu_types
        .iter()
        .map(|t| {
            (
                t.type_id.as_str(),
                t.memory_mib,
                t.max_instances,
                t.mig_profile_id,
            )
        })
        .collect();
    assert_eq!(
        types,
        [("1122", 10240, 1, Some(19)), ("1130", 20480, 2, None)]
    );
}

#[test]
fn the_agent_opens_partitioning_from_its_settings() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    let mut s = accel_agent::Settings::new("http://127.0.0.1:9", "cn1", &fs.root);
    s.drivers = Some(vec!["nvidia".into()]);
    s.driver.nvml_library = nvml.library.clone();
    s.partitions = nvml.partition_settings();
    let agent = accel_agent::Agent::new(s).unwrap();
    let made = agent
        .partitions()
        .create(addr(H200), 0, at(0, 8), "vm-1")
        .unwrap();
    let d = agent.discover();
    assert_eq!(partitions_of(&d, H200).instances, [made]);
    assert!(Path::new(&nvml.dir.join("state/partitions.json")).is_file());
}

#[test]
fn after_a_reboot_held_mdevs_are_created_again_with_their_uuid() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    mdev_gpu(&fs);
    let gpu = addr("0000:af:00.0");
    let (kept, gone) = (
        "1b2c3d4e-0000-4000-8000-000000000001",
        "1b2c3d4e-0000-4000-8000-000000000002",
    );
    let create = fs
        .root
        .join("bus/pci/devices/0000:af:00.0/mdev_supported_types/nvidia-471/create");
    {
        let p = partitions(&fs, &nvml);
        p.create_mdev(gpu, "nvidia-471", kept, "arq-1").unwrap();
        p.create_mdev(gpu, "nvidia-471", gone, "arq-2").unwrap();
    }
    nvml.reboot();
    std::fs::write(&create, "").unwrap();
    let p = partitions(&fs, &nvml);
    let held = [Held::Mdev {
        parent: gpu,
        type_id: "nvidia-471".into(),
        uuid: kept.into(),
        holder: "arq-1".into(),
    }];
    let r = p.after_boot(&held).unwrap();
    assert!(r.rebooted);
    assert_eq!(r.mdevs_recreated.len(), 1);
    assert_eq!(r.mdevs_recreated[0].uuid, kept);
    assert_eq!(std::fs::read_to_string(&create).unwrap(), kept);
    let cp = p.checkpoint().unwrap();
    assert_eq!(
        cp.mdevs.iter().map(|m| m.uuid.as_str()).collect::<Vec<_>>(),
        [kept]
    );
}

#[test]
fn agent_check_shows_the_partitions_as_nvidia_smi_prints_placements() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    let mut s = accel_agent::Settings::new("http://127.0.0.1:9", "", &fs.root);
    s.drivers = Some(vec!["nvidia".into()]);
    s.driver.nvml_library = nvml.library.clone();
    s.partitions = nvml.partition_settings();
    let agent = accel_agent::Agent::offline(s).unwrap();
    let made = agent
        .partitions()
        .create(addr(H100), 15, at(6, 2), "pod")
        .unwrap();
    let check = agent.check();
    assert_eq!(check.partitions.len(), 2);
    let text = check.text();
    assert!(
        text.contains("MIG on, 8 memory slices, whole GPU 81152 MiB, 132 SMs"),
        "{text}"
    );
    assert!(text.contains("profile 15 1g.20gb: 20096 MiB, 26 SMs, CE 1 DEC 1 ENC 0 JPEG 1 OFA 0, placements {0,2,4,6}:2"), "{text}");
    assert!(text.contains("profile 19 1g.18gb: 16384 MiB, 16 SMs, CE 1 DEC 1 ENC 0 JPEG 1 OFA 0, placements {0,1,2,3,4,5,6}:1"), "{text}");
    assert!(
        text.contains(&format!("MIG device {}: profile 15 at {{6}}:2", made.uuid)),
        "{text}"
    );
    let json = serde_json::to_value(&check).unwrap();
    assert_eq!(json["partitions"][0]["device"], H100);
    assert_eq!(
        json["partitions"][0]["instances"][0]["uuid"],
        made.uuid.as_str()
    );
}

/// Issue 45's "every offered candidate or allocated claim is created successfully by
/// the agent": the server's ledger model (`accel_core::partition`, fed the geometry the
/// agent reports) and NVML (the fake, whose rules come from the hardware's captures)
/// must agree on every placement. Random steps on an H100 and an H200: the ledger
/// places a profile where it would (or a pod's claim pins one at random); NVML creates
/// it exactly when the ledger says it fits; when the ledger says a profile fits nowhere,
/// NVML refuses it at every placement; releases destroy. The seed is printed;
/// `ACCEL_LEDGER_SEED=<n>` replays one run.
#[test]
fn the_ledgers_placements_are_exactly_what_nvml_creates() {
    use accel_core::partition::{Consumer, Want};
    let seed: u64 = std::env::var("ACCEL_LEDGER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(45, |d| d.as_nanos() as u64)
        });
    eprintln!("ledger against NVML seed: {seed} (ACCEL_LEDGER_SEED={seed} replays it)");
    let mut state = seed;
    let mut below = |n: usize| {
        // SplitMix64
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    };
    let dir = tempfile::tempdir().unwrap();
    let (fs, nvml) = host(dir.path(), BOTH_MIG);
    let p = partitions(&fs, &nvml);
    let d = discover(&fs, &nvml);
    let (mut made, mut refused) = (0, 0);
    for gpu in [H100, H200] {
        let g = partitions_of(&d, gpu).geometry();
        assert!(g.mig_enabled && !g.profiles.is_empty(), "{gpu}: {g:?}");
        // (ledger holder, MIG device uuid)
        let mut held: Vec<(Consumer, String)> = Vec::new();
        for step in 0..300 {
            let ctx = format!("seed {seed}, {gpu}, step {step}, held {:?}", held);
            let now: Vec<Consumer> = held.iter().map(|(c, _)| c.clone()).collect();
            // A holder of its own each step (NVML's create answers the existing device
            // to the same holder asking again for the same slot).
            let holder = format!("claim-{step}");
            let profile = &g.profiles[below(g.profiles.len())];
            match below(5) {
                // The ledger's own choice (a VM's or a device plugin pod's claim).
                0 | 1 => match g.place(&now, &Want::Mig(profile.id)) {
                    Ok(
                        c @ Consumer::Mig {
                            profile: id,
                            at: span,
                        },
                    ) => {
                        let got = p.create(addr(gpu), id, at(span.start, span.size), &holder);
                        let i =
                            got.unwrap_or_else(|e| panic!("{ctx}: ledger placed {c:?}, NVML: {e}"));
                        held.push((c, i.uuid));
                        made += 1;
                    }
                    Ok(other) => panic!("{ctx}: a MIG want placed as {other:?}"),
                    Err(_) => {
                        for span in &profile.placements {
                            let got =
                                p.create(addr(gpu), profile.id, at(span.start, span.size), &holder);
                            assert!(got.is_err(), "{ctx}: the ledger has no room for {} but NVML made one at {span:?}", profile.name);
                        }
                        refused += 1;
                    }
                },
                // A pod's claim pinned where the Kubernetes scheduler put it.
                2 | 3 => {
                    let span = profile.placements[below(profile.placements.len())];
                    let c = Consumer::Mig {
                        profile: profile.id,
                        at: span,
                    };
                    let fits = g.fits(&now, &c);
                    let got = p.create(addr(gpu), profile.id, at(span.start, span.size), &holder);
                    match (fits, got) {
                        (Ok(()), Ok(i)) => {
                            held.push((c, i.uuid));
                            made += 1;
                        }
                        (Err(_), Err(_)) => refused += 1,
                        (fits, got) => panic!("{ctx}: {c:?}: ledger {fits:?}, NVML {got:?}"),
                    }
                }
                _ if !held.is_empty() => {
                    let (_, uuid) = held.remove(below(held.len()));
                    p.destroy(&uuid)
                        .unwrap_or_else(|e| panic!("{ctx}: destroy {uuid}: {e}"));
                }
                _ => {}
            }
        }
    }
    assert!(
        made > 50 && refused > 20,
        "seed {seed}: {made} made, {refused} refused"
    );
}
