//! The node agent against the real server on both backends: `accel agent --once`
//! over fake sysfs trees builds seed 003's provider tree; restarts change nothing;
//! unchanged reports are skipped; vanished devices go at once when free and only once
//! released when allocated; an unknown compute node is refused with what to fix.

mod common;

use accel_agent::config::Settings;
use accel_agent::testing::{self, FakeSysfs};
use accel_agent::{Agent, AgentError};
use common::accel::{allocate_gpu, compute_node, delete_allocations, get, tree, Server, TempDb};
use common::BACKENDS;
use serde_json::json;
use std::collections::BTreeMap;

fn agent(srv: &Server, node: &str, root: &std::path::Path) -> Agent {
    Agent::new(Settings::new(&srv.accel, node, root)).unwrap()
}

fn uuid3(name: &str) -> String {
    accel_store::accelerator::report::provider_uuid(name)
}

fn strs(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

/// A server without workers over a fresh database, and a fake sysfs in a temporary
/// directory for agents to scan.
async fn host(backend: common::Backend) -> (TempDb, Server, tempfile::TempDir, FakeSysfs) {
    let db = TempDb::fresh(backend).await;
    let srv = Server::start(&db.url, None, None).await;
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path());
    (db, srv, dir, fs)
}

#[tokio::test]
async fn agent_once_builds_the_seed_003_tree_and_restarts_change_nothing() {
    for backend in BACKENDS {
        let (_db, srv, dir, fs) = host(backend).await;
        let gpus = testing::eight_gpus(&fs);
        let pac = testing::pac_dfl(&fs, 0xaf, 2);
        let qat = testing::qat(&fs, 0x3d, 16);
        let ssd = testing::nvme(&fs, 0x5a, "vfio-pci");
        testing::nvme(&fs, 0x5b, "nvme");
        testing::bridge_and_virtio(&fs);
        testing::gpu_with_vfs(&fs, 0x41, 4);

        let a = agent(&srv, "cn1", dir.path());
        let refused = a.step().await;
        assert!(
            matches!(refused, Err(AgentError::NoComputeNode { .. })),
            "{refused:?}"
        );
        let err = a.check_node().await.unwrap_err().to_string();
        // The Nova hint once, and the way without Nova (issue 31 item 5).
        assert_eq!(err.matches("hypervisor_hostname").count(), 1, "{err}");
        assert!(
            err.contains("without Nova, create it in Placement first"),
            "{err}"
        );

        let cn = compute_node(&srv, "cn1").await;
        let cn_uuid = cn["uuid"].as_str().unwrap().to_owned();
        let cn_gen = cn["generation"].as_i64().unwrap();
        assert_eq!(a.check_node().await.unwrap().compute_node_uuid, cn_uuid);
        let o = a.step().await.unwrap();
        assert_eq!((o.added, o.removed, o.unchanged), (12, 0, false));

        let t = tree(&srv, &cn_uuid).await;
        // compute node + 8 GPUs + carved GPU + PAC card + region + QAT + SSD.
        assert_eq!(t.len(), 14, "{:#?}", t.keys());
        let cn_entry = &t["cn1"];
        assert!(
            cn_entry.2.is_empty() && cn_entry.3.is_empty(),
            "never modified"
        );
        let gen = get(&srv, &format!("/resource_providers/{cn_uuid}")).await["generation"].clone();
        assert_eq!(gen, cn_gen);
        for (i, g) in gpus.iter().enumerate() {
            let name = format!("cn1_{g}");
            let (uuid, parent, inv, traits) = &t[&name];
            assert_eq!(*uuid, uuid3(&name));
            assert_eq!(parent.as_deref(), Some("cn1"));
            assert_eq!(
                inv,
                &BTreeMap::from([("CUSTOM_ACCELERATOR_GPU".into(), (1, 0))])
            );
            let numa = if i < 4 {
                "CUSTOM_NUMA_0"
            } else {
                "CUSTOM_NUMA_1"
            };
            assert_eq!(
                *traits,
                strs(&[
                    "CUSTOM_GPU_NVIDIA",
                    "CUSTOM_GPU_NVIDIA_AMPERE",
                    "CUSTOM_OWNER_ACCEL",
                    numa
                ])
            );
        }
        let carved = &t["cn1_0000:41:00.0"];
        assert_eq!(
            carved.2,
            BTreeMap::from([("CUSTOM_ACCELERATOR_VGPU".into(), (4, 0))])
        );
        let card = &t[&format!("cn1_{pac}")];
        assert_eq!(card.1.as_deref(), Some("cn1"));
        assert!(
            card.2.is_empty(),
            "the FPGA card has no inventory of its own"
        );
        assert_eq!(
            card.3,
            strs(&[
                "CUSTOM_FPGA_INTEL",
                "CUSTOM_FPGA_INTEL_ARRIA10",
                "CUSTOM_OWNER_ACCEL",
                "CUSTOM_NUMA_1"
            ])
        );
        let region = &t[&format!("cn1_{pac}_region0")];
        assert_eq!(region.1.as_deref(), Some(format!("cn1_{pac}").as_str()));
        assert_eq!(
            region.2,
            BTreeMap::from([("CUSTOM_ACCELERATOR_FPGA".into(), (2, 0))])
        );
        assert_eq!(
            region.3,
            strs(&[
                "CUSTOM_FPGA_INTEL",
                "CUSTOM_FPGA_INTEL_ARRIA10",
                "CUSTOM_OWNER_ACCEL",
                "CUSTOM_NUMA_1",
                "CUSTOM_FPGA_REGION_INTEL_9926AB6D6C925A68AABCA7D84C545738",
                "CUSTOM_PROGRAMMABLE",
                "CUSTOM_FPGA_FUNCTION_INTEL_D8424DC4A4A3C413F89E433683F9040B",
            ])
        );
        assert_eq!(
            t[&format!("cn1_{qat}")].2,
            BTreeMap::from([("CUSTOM_ACCELERATOR_QAT".into(), (16, 0))])
        );
        assert_eq!(
            t[&format!("cn1_{ssd}")].3,
            strs(&["CUSTOM_SSD_SAMSUNG", "CUSTOM_OWNER_ACCEL", "CUSTOM_NUMA_0"])
        );
        // The scheduler's view: a region with the function, on NUMA node 1.
        let c = get(
            &srv,
            "/allocation_candidates?resources=CUSTOM_ACCELERATOR_FPGA:1&required=CUSTOM_FPGA_FUNCTION_INTEL_D8424DC4A4A3C413F89E433683F9040B,CUSTOM_NUMA_1",
        )
        .await;
        assert_eq!(c["allocation_requests"].as_array().unwrap().len(), 1);

        // Unchanged: skipped. A restarted agent forces a full report: same tree.
        let o = a.step().await.unwrap();
        assert!(o.unchanged);
        let restarted = agent(&srv, "cn1", dir.path());
        let o = restarted.step().await.unwrap();
        assert_eq!((o.added, o.removed, o.kept, o.unchanged), (0, 0, 12, false));
        assert_eq!(tree(&srv, &cn_uuid).await, t, "no duplicates, same uuids");
        let (s, devices) = srv.admin_get("/v2/devices").await;
        assert_eq!((s, devices["devices"].as_array().unwrap().len()), (200, 12));
        srv.stop().await;
    }
}

#[tokio::test]
async fn removed_devices_go_when_free_and_wait_while_allocated() {
    for backend in BACKENDS {
        let (_db, srv, dir, fs) = host(backend).await;
        let gpus = testing::eight_gpus(&fs);
        let cn = compute_node(&srv, "cn2").await;
        let cn_uuid = cn["uuid"].as_str().unwrap().to_owned();
        let a = agent(&srv, "cn2", dir.path());
        a.step().await.unwrap();

        let busy = uuid3(&format!("cn2_{}", gpus[0]));
        let consumer = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
        allocate_gpu(&srv, consumer, &busy).await;

        fs.remove(&gpus[0]);
        fs.remove(&gpus[1]);
        let o = a.step().await.unwrap();
        assert_eq!((o.removed, o.vanished, o.kept), (1, 1, 6));
        let t = tree(&srv, &cn_uuid).await;
        assert!(
            !t.contains_key(&format!("cn2_{}", gpus[1])),
            "free: removed"
        );
        let held = &t[&format!("cn2_{}", gpus[0])];
        assert_eq!(
            held.2,
            BTreeMap::from([("CUSTOM_ACCELERATOR_GPU".into(), (1, 1))]),
            "allocated: kept, reserved"
        );
        let (_, devices) = srv.admin_get("/v2/devices").await;
        assert_eq!(devices["devices"].as_array().unwrap().len(), 7);
        let c = get(
            &srv,
            "/allocation_candidates?resources=CUSTOM_ACCELERATOR_GPU:1",
        )
        .await;
        assert_eq!(c["allocation_requests"].as_array().unwrap().len(), 6);

        // Same report again: not skipped while a device waits; still held.
        let o = a.step().await.unwrap();
        assert_eq!((o.unchanged, o.vanished), (false, 1));
        delete_allocations(&srv, consumer).await;
        let o = a.step().await.unwrap();
        assert_eq!((o.removed, o.vanished), (1, 0));
        let t = tree(&srv, &cn_uuid).await;
        assert_eq!(t.len(), 7, "compute node + 6 GPUs");
        let (_, devices) = srv.admin_get("/v2/devices").await;
        assert_eq!(devices["devices"].as_array().unwrap().len(), 6);
        let o = a.step().await.unwrap();
        assert!(o.unchanged);
        srv.stop().await;
    }
}

#[tokio::test]
async fn a_report_that_fails_validation_changes_nothing() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, Some("cn3"), None).await;
        let body = json!({"devices": [{
            "type": "FPGA", "vendor": "8086", "model": "m",
            "controlpath_id": {"cpid_type": "PCI", "cpid_info": "x"},
            "deployables": [{"name": "cn3_r", "parent": "cn3_missing", "num_accelerators": 1,
                "attributes": [{"key": "rc", "value": "CUSTOM_ACCELERATOR_FPGA"}]}]}]});
        let r = reqwest::Client::new()
            .put(format!("{}/v2/agent/hosts/cn3/devices", srv.accel))
            .header("x-auth-token", "admin")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400);
        let text = r.text().await.unwrap();
        assert!(text.contains("not a top-level deployable"), "{text}");
        let (_, devices) = srv.admin_get("/v2/devices").await;
        assert_eq!(
            devices["devices"][0]["model"], "miss model info",
            "the fake device stays"
        );
        srv.stop().await;
    }
}

#[tokio::test]
async fn cyborg_model_reports_devices_as_upstream_cyborg_does() {
    for backend in BACKENDS {
        let (_db, srv, dir, fs) = host(backend).await;
        let gpu = testing::eight_gpus(&fs).remove(0);
        for g in [
            "0000:31:00.0",
            "0000:4b:00.0",
            "0000:65:00.0",
            "0000:98:00.0",
            "0000:b1:00.0",
            "0000:ca:00.0",
            "0000:e3:00.0",
        ] {
            fs.remove(g);
        }
        let pac = testing::pac_opae(&fs, 0xaf, 2);
        let qat = testing::qat(&fs, 0x3d, 4);
        let ssd = testing::nvme(&fs, 0x5a, "vfio-pci");
        let cn = compute_node(&srv, "cn3").await;
        let cn_uuid = cn["uuid"].as_str().unwrap().to_owned();
        let mut settings = Settings::new(&srv.accel, "cn3", dir.path());
        settings.model = accel_agent::model::Model::Cyborg;
        let a = Agent::new(settings).unwrap();
        a.step().await.unwrap();

        let t = tree(&srv, &cn_uuid).await;
        let qat_vfs: Vec<String> = testing::vf_addresses(0x3d, 4, 0x37c9)
            .into_iter()
            .map(|(a, _)| format!("cn3_{a}"))
            .collect();
        let mut want: Vec<String> = vec![
            "cn3".into(),
            format!("cn3_{gpu}"),
            format!("cn3_{pac}"),
            format!("cn3_{ssd}"),
        ];
        want.extend(qat_vfs.iter().cloned());
        want.sort();
        assert_eq!(t.keys().cloned().collect::<Vec<_>>(), want, "{backend:?}");
        for (name, (uuid, parent, _, _)) in &t {
            if name != "cn3" {
                assert_eq!(*uuid, uuid3(name));
                assert_eq!(parent.as_deref(), Some("cn3"), "{name}: no nesting");
            }
        }
        let g = &t[&format!("cn3_{gpu}")];
        assert_eq!(g.2, BTreeMap::from([("PGPU".into(), (1, 0))]));
        assert_eq!(g.3, strs(&["OWNER_CYBORG", "CUSTOM_NVIDIA_20B0"]));
        let p = &t[&format!("cn3_{pac}")];
        assert_eq!(p.2, BTreeMap::from([("FPGA".into(), (2, 0))]));
        assert_eq!(
            p.3,
            strs(&[
                "CUSTOM_FPGA_INTEL",
                "CUSTOM_FPGA_INTEL_PAC_ARRIA10",
                "CUSTOM_FPGA_FUNCTION_ID_INTEL_D8424DC4A4A3C413F89E433683F9040B",
                "CUSTOM_FPGA_REGION_INTEL_9926AB6D6C925A68AABCA7D84C545738",
            ])
        );
        for vf in &qat_vfs {
            assert_eq!(t[vf].2, BTreeMap::from([("CUSTOM_QAT".into(), (1, 0))]));
            assert!(t[vf].3.is_empty());
        }
        assert!(
            !t.contains_key(&format!("cn3_{qat}")),
            "the QAT PF is not offered"
        );
        let s = &t[&format!("cn3_{ssd}")];
        assert_eq!(s.2, BTreeMap::from([("CUSTOM_SSD".into(), (1, 0))]));
        assert_eq!(
            s.3,
            strs(&["CUSTOM_SSD_SAMSUNG", "CUSTOM_SSD_PRODUCT_ID_A824"])
        );
        // What a Cyborg flavor asks for is schedulable.
        let c = get(
            &srv,
            "/allocation_candidates?resources=FPGA:1&required=CUSTOM_FPGA_INTEL_PAC_ARRIA10",
        )
        .await;
        assert_eq!(c["allocation_requests"].as_array().unwrap().len(), 1);
        // Unchanged, and a restarted agent: same tree.
        assert!(a.step().await.unwrap().unchanged);
        let mut settings = Settings::new(&srv.accel, "cn3", dir.path());
        settings.model = accel_agent::model::Model::Cyborg;
        Agent::new(settings).unwrap().step().await.unwrap();
        assert_eq!(tree(&srv, &cn_uuid).await, t);
        srv.stop().await;
    }
}
