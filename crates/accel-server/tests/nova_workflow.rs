//! The Nova workflow without Nova (seed 000, steps 1–10) driven by the `workflow`
//! library over HTTP against a server with the fake device source, its bind worker and
//! a fake Nova; on SQLite and PostgreSQL.

mod common;

use accel_api::workflow::{self, BootRequest, Unbooted, WorkflowError};
use accel_store::accelerator::report;
use common::accel::{get, handles_in_use, placement, workers, FakeNova, Server, TempDb};
use common::BACKENDS;
use serde_json::{json, Value};
use std::time::Duration;

const HOST: &str = "cn-wf";

/// Gives the fake host's compute node some CPU and memory, as nova-compute would.
async fn compute_inventory(server: &Server) -> String {
    let v = get(server, &format!("/resource_providers?name={HOST}")).await;
    let rp = &v["resource_providers"][0];
    let uuid = rp["uuid"].as_str().unwrap().to_owned();
    let (s, v) = placement(
        server,
        reqwest::Method::PUT,
        &format!("/resource_providers/{uuid}/inventories"),
        Some(json!({
            "resource_provider_generation": rp["generation"],
            "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}},
        })),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    uuid
}

fn request(profile: &str, instance: &str) -> BootRequest {
    BootRequest {
        device_profile: profile.into(),
        resources: workflow::parse_resources("VCPU:1,MEMORY_MB:256").unwrap(),
        instance: instance.into(),
        project_id: "p1".into(),
        user_id: "u1".into(),
        group_policy: "none".into(),
        timeout: Duration::from_secs(30),
    }
}

#[tokio::test]
async fn boot_and_unboot_an_instance_with_two_accelerators() {
    for backend in BACKENDS {
        let nova = FakeNova::start(true).await;
        let db = TempDb::fresh(backend).await;
        let server = Server::start(&db.url, Some(HOST), Some(workers(Some(&nova)))).await;
        let compute = compute_inventory(&server).await;
        // Two groups of one accelerator each: two request groups, two ARQs.
        server
            .create_profile(
                "two-accels",
                json!([{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"},
                       {"resources:FPGA": "1"}]),
            )
            .await;
        let ep = server.endpoints();
        let instance = uuid::Uuid::new_v4().to_string();
        let booted = workflow::boot(&ep, &request("two-accels", &instance))
            .await
            .unwrap();

        let device_rp = report::provider_uuid(&format!("{HOST}_FakeDevice"));
        assert_eq!(booted.host, HOST, "{backend:?}");
        assert_eq!(booted.arqs.len(), 2);
        let groups: Vec<i64> = booted
            .arqs
            .iter()
            .map(|a| a.device_profile_group_id)
            .collect();
        assert_eq!(groups, [0, 1]);
        for a in &booted.arqs {
            assert_eq!(a.state, "Bound");
            assert_eq!(a.hostname, HOST);
            assert_eq!(a.device_rp_uuid, device_rp);
            assert_eq!(a.attach_handle_type, "TEST_PCI");
            assert_eq!(a.attach_handle_info["bus"], "0c");
            assert!(a.attach_handle_uuid.is_some());
        }
        assert_ne!(
            booted.arqs[0].attach_handle_uuid,
            booted.arqs[1].attach_handle_uuid
        );
        assert_eq!(handles_in_use(&server.store, HOST).await, 2);

        // Placement holds the claim under the instance.
        let alloc = get(&server, &format!("/allocations/{instance}")).await;
        assert_eq!(
            alloc["allocations"][&device_rp]["resources"],
            json!({"FPGA": 2})
        );
        assert_eq!(
            alloc["allocations"][&compute]["resources"],
            json!({"VCPU": 1, "MEMORY_MB": 256})
        );
        assert_eq!(alloc["consumer_type"], "INSTANCE");
        assert_eq!(alloc["project_id"], "p1");

        // Nova heard of each ARQ once.
        nova.wait_for("two events", |n| n.events().len() >= 2).await;
        let mut got = nova.events();
        got.sort_by_key(|e| e["tag"].as_str().unwrap().to_owned());
        let mut want: Vec<Value> = booted
            .arqs
            .iter()
            .map(|a| {
                json!({"name": "accelerator-request-bound", "tag": a.arq_uuid,
                            "server_uuid": instance, "status": "completed"})
            })
            .collect();
        want.sort_by_key(|e| e["tag"].as_str().unwrap().to_owned());
        assert_eq!(got, want);

        // The reverse leaves nothing behind.
        let undone = workflow::unboot(&ep, &instance).await.unwrap();
        assert_eq!(
            undone,
            Unbooted {
                arqs_unbound: 2,
                arqs_deleted: 2,
                allocations_released: true
            }
        );
        let alloc = get(&server, &format!("/allocations/{instance}")).await;
        assert_eq!(alloc["allocations"], json!({}));
        let (s, arqs) = server.admin_get("/v2/accelerator_requests").await;
        assert_eq!((s, &arqs["arqs"]), (200, &json!([])));
        assert_eq!(handles_in_use(&server.store, HOST).await, 0);
        // Unbooting again finds nothing and is not an error.
        assert_eq!(
            workflow::unboot(&ep, &instance).await.unwrap(),
            Unbooted::default()
        );

        // More accelerators than the host has: no candidate, nothing claimed.
        server
            .create_profile("too-many", json!([{"resources:FPGA": "17"}]))
            .await;
        let other = uuid::Uuid::new_v4().to_string();
        let err = workflow::boot(&ep, &request("too-many", &other))
            .await
            .unwrap_err();
        assert!(matches!(err, WorkflowError::NoCandidate(_)), "{err}");
        let alloc = get(&server, &format!("/allocations/{other}")).await;
        assert_eq!(alloc["allocations"], json!({}));
        server.stop().await;
    }
}
