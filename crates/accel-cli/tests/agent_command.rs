//! `accel agent check` and `accel agent --once`: the built binary over a fake sysfs
//! tree, with Nova's rules and against the real server (SQLite and PostgreSQL).

use accel_agent::testing::{self, FakeSysfs};
use accel_testkit::server::{TestServer, BACKENDS};

mod common;

use common::Run;

async fn accel(args: &[&str]) -> Run {
    common::accel(args, &[("ACCEL_LOG", "warn")]).await
}

#[tokio::test]
async fn check_lists_every_conflict_with_novas_rules_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    testing::eight_gpus(&fs);
    testing::qat(&fs, 0x3d, 2);
    let root = fs.root.to_str().unwrap().to_owned();
    let ok = accel(&["agent", "check", "--sysfs-root", &root]).await;
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    assert!(
        ok.stdout.contains("ok: 9 device(s), no conflict"),
        "{}",
        ok.stdout
    );

    let nova = dir.path().join("nova.conf");
    std::fs::write(
        &nova,
        "[pci]\ndevice_spec = {\"vendor_id\": \"10de\", \"address\": \"*:17:00.*\"}\n\
         device_spec = [{\"vendor_id\": \"8086\", \"product_id\": \"37c9\"}]\n",
    )
    .unwrap();
    let bad = accel(&[
        "agent",
        "check",
        "--sysfs-root",
        &root,
        "--nova-config",
        nova.to_str().unwrap(),
    ])
    .await;
    assert_eq!(bad.code, Some(1), "{}", bad.stdout);
    let conflicts: Vec<&str> = bad
        .stdout
        .lines()
        .filter(|l| l.starts_with("conflict:"))
        .collect();
    assert_eq!(conflicts.len(), 3, "{}", bad.stdout);
    assert!(conflicts[0].contains("device 0000:17:00.0 function 0000:17:00.0"));
    assert!(conflicts[1].contains("device 0000:3d:00.0 function 0000:3d:01.0"));
    assert!(conflicts[1].contains("37c9"));
    assert!(
        bad.stderr.contains("3 function(s) claimed by both"),
        "{}",
        bad.stderr
    );
}

/// A host with PCI functions but no accelerator, and a NIC mapped in [nic.physnets]
/// that cannot be offered: `check` says why for each function, as text and as JSON,
/// with the shipped kind of configuration (a [keystone] table, a node), contacting
/// neither Keystone nor the server (both unreachable here).
#[tokio::test]
async fn check_explains_every_function_as_text_and_json_without_calling_anyone() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    testing::pci_ids(dir.path());
    testing::bridge_and_virtio(&fs);
    let nic = testing::nic_without_sriov(&fs, 0x3b, "eth2");
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        "server = \"http://127.0.0.1:9\"\nnode = \"compute-1\"\n\
         [keystone]\nauth_url = \"http://127.0.0.1:9/v3\"\nusername = \"accel-agent\"\n\
         password = \"x\"\nproject_name = \"service\"\n\
         [nic.physnets]\nphysnet1 = [\"eth2\"]\n",
    )
    .unwrap();
    let (config, root) = (config.to_str().unwrap(), fs.root.to_str().unwrap());
    let text = accel(&["agent", "check", "--config", config, "--sysfs-root", root]).await;
    assert_eq!(text.code, Some(0), "{}{}", text.stdout, text.stderr);
    let out = &text.stdout;
    assert!(out.contains("PCI functions looked at: 3"), "{out}");
    assert!(
        out.contains(&format!(
            "{nic}  class 020000 Ethernet controller  8086:1533 Intel Corporation / I210 Gigabit Network Connection  kernel driver igb  NUMA node 0"
        )),
        "{out}"
    );
    assert!(
        out.contains("declined: driver nic: a NIC mapped to physnet1 in [nic.physnets], but used by the host (kernel driver igb) and not VF-capable"),
        "{out}"
    );
    assert!(out.contains("ignored: a bridge"), "{out}");
    assert!(
        out.contains("Providers the agent would report (node compute-1, model accel): 0"),
        "{out}"
    );
    assert!(out.contains("ok: 0 device(s), no conflict"), "{out}");

    let json = accel(&[
        "agent",
        "check",
        "--config",
        config,
        "--sysfs-root",
        root,
        "--format",
        "json",
    ])
    .await
    .json();
    let functions = json["functions"].as_array().unwrap();
    assert_eq!(functions.len(), 3, "{json}");
    let f = functions
        .iter()
        .find(|f| f["address"] == nic.as_str())
        .unwrap();
    assert_eq!(f["decision"], "declined");
    assert_eq!(f["driver"], "nic");
    assert_eq!(f["kernel_driver"], "igb");
    assert_eq!(f["numa_node"], 0);
    assert_eq!(f["vendor_name"], "Intel Corporation");
    assert_eq!(f["class_name"], "Ethernet controller");
    assert!(
        f["reason"].as_str().unwrap().contains("not VF-capable"),
        "{f}"
    );
    assert_eq!(json["providers"], serde_json::json!([]));
    assert_eq!(json["node"], "compute-1");
}

/// `agent check --help` lists only the flags check reads (issue 31 item 8).
#[tokio::test]
async fn check_help_lists_only_the_flags_check_reads() {
    let run = accel(&["agent", "check", "--help"]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    for flag in [
        "--config",
        "--node",
        "--sysfs-root",
        "--drivers",
        "--nova-config",
        "--model",
        "--log-format",
        "--format <FORMAT>",
    ] {
        assert!(run.stdout.contains(flag), "{flag} missing: {}", run.stdout);
    }
    for flag in [
        "--server",
        "--token",
        "--interval",
        "--glance-url",
        "--metrics-listen",
        "--once",
        "--kubelet-dir",
        "--pod-resources-socket",
        "--cdi-dir",
    ] {
        assert!(!run.stdout.contains(flag), "{flag} listed: {}", run.stdout);
    }
    // The agent itself still takes them.
    let agent = accel(&["agent", "--help"]).await;
    for flag in [
        "--server",
        "--token",
        "--interval",
        "--metrics-listen",
        "--once",
    ] {
        assert!(agent.stdout.contains(flag), "{flag}: {}", agent.stdout);
    }
}

#[tokio::test]
async fn once_reports_and_exits_and_says_what_to_fix_without_a_compute_node() {
    for backend in BACKENDS {
        let server = TestServer::spawn(backend).await;
        let (url, store) = (server.accel.clone(), server.store.clone());
        let dir = tempfile::tempdir().unwrap();
        let fs = FakeSysfs::new(dir.path());
        testing::pac_opae(&fs, 0x5e, 2);
        let root = fs.root.to_str().unwrap().to_owned();
        let args = [
            "agent",
            "--once",
            "--server",
            &url,
            "--node",
            "cn9",
            "--sysfs-root",
            &root,
        ];
        // The Placement API's port where the accelerator API's belongs: said so.
        let mut wrong = args;
        wrong[3] = &server.placement;
        let run = accel(&wrong).await;
        assert_eq!(run.code, Some(1));
        assert!(
            run.stderr.contains("is not the accelerator API")
                && !run.stderr.contains("is not known"),
            "{}",
            run.stderr
        );
        let missing = accel(&args).await;
        assert_eq!(missing.code, Some(1));
        assert!(
            missing.stderr.contains("compute node \"cn9\" is not known")
                && missing.stderr.contains("hypervisor_hostname"),
            "{}",
            missing.stderr
        );
        store
            .write(|tx| {
                Box::pin(async move {
                    accel_store::placement::providers::create(
                        tx,
                        "0d9c1c3e-4b8e-4b8e-9d2a-2f1e1a0b0c0d",
                        "cn9",
                        None,
                    )
                    .await
                })
            })
            .await
            .unwrap();
        let run = accel(&args).await;
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert_eq!(
            run.stdout.trim(),
            "reported: 1 added, 0 removed, 0 kept, 0 vanished"
        );
    }
}

#[tokio::test]
async fn a_malformed_kubernetes_table_stops_the_agent_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    for (text, key) in [
        (
            "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\ncapacity = 0\n",
            "kubernetes.configurations[0].capacity",
        ),
        (
            "[kubernetes]\nresource_domian = \"accel.dev\"\n",
            "resource_domian",
        ),
        (
            "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n\
             [kubernetes.configurations.selector]\nvendor = \"nvidia\"\n",
            "kubernetes.configurations[0].selector.vendor",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let run = accel(&[
            "agent",
            "--config",
            config.to_str().unwrap(),
            "--node",
            "cn1",
            // Never contacted: the configuration is refused first.
            "--server",
            "http://127.0.0.1:9",
        ])
        .await;
        assert_ne!(run.code, Some(0), "{text}");
        assert!(run.stderr.contains(key), "{text}: {}", run.stderr);
    }
}

#[tokio::test]
async fn a_malformed_cleaning_rule_stops_the_agent_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    for (text, key) in [
        ("[[cleaning]]\nmethod = \"wipe\"\n", "cleaning[0].method"),
        (
            "[[cleaning]]\nmethod = \"command\"\n",
            "cleaning[0].command",
        ),
        (
            "[[cleaning]]\nmethod = \"pci-reset\"\n[[cleaning]]\nmethod = \"pci-reset\"\n\
             [cleaning.selector]\nvendor = \"nvidia\"\n",
            "cleaning[1].selector.vendor",
        ),
        (
            "[[cleaning]]\nmethod = \"pci-reset\"\ntimeout = 5\n",
            "timeout",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let run = accel(&[
            "agent",
            "--config",
            config.to_str().unwrap(),
            "--node",
            "cn1",
            // Never contacted: the configuration is refused first.
            "--server",
            "http://127.0.0.1:9",
        ])
        .await;
        assert_ne!(run.code, Some(0), "{text}");
        assert!(run.stderr.contains(key), "{text}: {}", run.stderr);
    }
}

/// Issue 41 item 3: `[[cleaning]]` rules resolved against the devices they match, on a
/// PATH the test controls. A missing program, `{device}` on a drive passed through
/// (bound to vfio-pci: no node) and `pci-reset` on a function without a `reset` file
/// each fail `check` and stop the agent at start-up (`--once` and long-running alike,
/// before any server is asked), naming the device and the reason.
#[tokio::test]
async fn check_and_start_up_fail_naming_each_device_a_cleaning_rule_cannot_work_for() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path().join("sys"));
    let gpus = testing::two_gpus(&fs);
    let drive = testing::nvme(&fs, 0x5a, "vfio-pci");
    let qat = testing::qat(&fs, 0x3d, 2);
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    testing::stand_in(&bin, "nvme");
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        "[[cleaning]]\nmethod = \"command\"\ncommand = [\"no-such-wiper\", \"{address}\"]\n\
         [cleaning.selector]\ndevice_type = \"GPU\"\n\
         [[cleaning]]\nmethod = \"command\"\ncommand = [\"nvme\", \"format\", \"{device}\"]\n\
         [cleaning.selector]\ndevice_type = \"SSD\"\n\
         [[cleaning]]\nmethod = \"pci-reset\"\n[cleaning.selector]\ndevice_type = \"QAT\"\n",
    )
    .unwrap();
    let (config, root) = (config.to_str().unwrap(), fs.root.to_str().unwrap());
    let env = [("ACCEL_LOG", "warn"), ("PATH", bin.to_str().unwrap())];
    let expected: Vec<String> = gpus
        .iter()
        .map(|g| {
            format!(
                "device {g} (cn1_{g}): cleaning[0] (command) cannot work: command: \"no-such-wiper\" is not on the PATH ({})",
                bin.display()
            )
        })
        .chain([
            format!("device {drive} (cn1_{drive}): cleaning[1] (command) cannot work: command: the argument \"{{device}}\" names {{device}}, but the function has no device node (it is bound to vfio-pci, for passthrough)"),
            format!(
                "device {qat} (cn1_{qat}): cleaning[2] (pci-reset) cannot work: pci-reset: {} does not exist",
                fs.root.join(format!("bus/pci/devices/{qat}/reset")).display()
            ),
        ])
        .collect();

    let check = common::accel(
        &[
            "agent",
            "check",
            "--config",
            config,
            "--sysfs-root",
            root,
            "--node",
            "cn1",
        ],
        &env,
    )
    .await;
    assert_eq!(check.code, Some(1), "{}{}", check.stdout, check.stderr);
    assert!(
        check.stdout.contains("Devices [[cleaning]] rules clean: 4"),
        "{}",
        check.stdout
    );
    for e in &expected {
        assert!(check.stderr.contains(e.as_str()), "{e}\n{}", check.stderr);
        let device = e.split(' ').nth(1).unwrap();
        assert!(
            check
                .stdout
                .contains(&format!("  device {device} (cn1_{device}) cleaning[")),
            "{}",
            check.stdout
        );
    }

    let agent = ["--config", config, "--sysfs-root", root, "--node", "cn1"];
    let server = ["--server", "http://127.0.0.1:9"];
    let once = [&["agent", "--once"][..], &agent, &server].concat();
    let long = [
        &["agent", "--metrics-listen", "127.0.0.1:0"][..],
        &agent,
        &server,
    ]
    .concat();
    for args in [once, long] {
        let run = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            common::accel(&args, &env),
        )
        .await
        .expect("the agent stops at start-up");
        assert_eq!(run.code, Some(1), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("4 [[cleaning]] problem(s), so the agent does not start"),
            "{}",
            run.stderr
        );
        for e in &expected {
            assert!(run.stderr.contains(e.as_str()), "{e}\n{}", run.stderr);
        }
    }
}
