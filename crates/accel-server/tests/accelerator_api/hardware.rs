//! Devices, deployables and attributes: the fake device in the hardware API and Placement, attribute CRUD, the agent report.

use crate::app::{AccelApp, As};
use accel_testkit::server::BACKENDS;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn fake_devices_in_hardware_api_and_placement() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        let r = app.get(As::Admin, "/v2/devices").await;
        assert_eq!(r.status, 200);
        let devices = r.body["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1);
        let d = &devices[0];
        assert_eq!(
            (
                d["type"].as_str(),
                d["vendor"].as_str(),
                d["hostname"].as_str()
            ),
            (Some("FPGA"), Some("0xABCD"), Some("compute1"))
        );
        assert!(d.get("status").is_none(), "status only from 2.3");
        let uuid = d["uuid"].as_str().unwrap().to_owned();
        let at23 = app
            .call(
                As::Admin,
                Method::GET,
                &format!("/v2/devices/{uuid}"),
                Some("accelerator 2.3"),
                None,
            )
            .await;
        assert_eq!(at23.body["status"], "enabled");
        for (q, n) in [
            ("?type=FPGA", 1),
            ("?hostname=compute1&vendor=0xABCD", 1),
            ("?hostname=other", 0),
            ("?filters.field=limit&filters.value=1", 1),
        ] {
            let r = app.get(As::Admin, &format!("/v2/devices{q}")).await;
            assert_eq!(r.body["devices"].as_array().unwrap().len(), n, "{q}");
        }
        // Upstream's `FilterType` takes only its enumeration of fields.
        let r = app
            .get(As::Admin, "/v2/devices?filters.field=model&filters.value=x")
            .await;
        assert_eq!(r.status, 400);
        assert!(r.fault().starts_with("Invalid input for field/attribute field. Value: 'model'. Value should be one of: availability, board,"), "{}", r.fault());
        let r = app
            .get(
                As::Admin,
                "/v2/devices/00000000-0000-0000-0000-000000000000",
            )
            .await;
        assert_eq!(r.status, 404);

        // Hardware reads are for admins and managers only (CVE-2026-40213).
        for path in ["/v2/devices", "/v2/deployables", "/v2/attributes"] {
            let r = app.get(As::Member("p1"), path).await;
            assert_eq!(r.status, 403, "{path}");
        }

        let r = app.get(As::Admin, "/v2/deployables").await;
        let deps = r.body["deployables"].as_array().unwrap();
        assert_eq!(deps.len(), 1);
        let dep = &deps[0];
        assert_eq!(dep["name"], "compute1_FakeDevice");
        assert_eq!(dep["num_accelerators"], 16);
        assert_eq!(dep["driver_name"], "fake");
        assert_eq!(
            dep["attributes_list"],
            "[{\"traits1\": \"CUSTOM_FAKE_DEVICE\"}, {\"rc\": \"FPGA\"}]"
        );
        let rp_uuid = dep["rp_uuid"].as_str().unwrap().to_owned();
        let dep_uuid = dep["uuid"].as_str().unwrap().to_owned();
        let one = app
            .get(As::Admin, &format!("/v2/deployables/{dep_uuid}"))
            .await;
        assert_eq!(one.body["rp_uuid"], rp_uuid.as_str());
        let filtered = app
            .get(
                As::Admin,
                "/v2/deployables?filters.field=name&filters.value=compute1_FakeDevice",
            )
            .await;
        assert_eq!(filtered.body["deployables"].as_array().unwrap().len(), 1);

        // Placement: the compute node and its device child with FPGA x16 and the trait.
        let compute = app.placement_get("/resource_providers?name=compute1").await;
        let compute_uuid = compute["resource_providers"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let child = app
            .placement_get(&format!("/resource_providers/{rp_uuid}"))
            .await;
        assert_eq!(child["name"], "compute1_FakeDevice");
        assert_eq!(child["parent_provider_uuid"], compute_uuid.as_str());
        let inv = app
            .placement_get(&format!("/resource_providers/{rp_uuid}/inventories"))
            .await;
        assert_eq!(inv["inventories"]["FPGA"]["total"], 16);
        assert_eq!(inv["inventories"]["FPGA"]["max_unit"], 16);
        let with_trait = app
            .placement_get("/resource_providers?required=CUSTOM_FAKE_DEVICE")
            .await;
        assert_eq!(
            with_trait["resource_providers"][0]["uuid"],
            rp_uuid.as_str()
        );
        let candidates = app
            .placement_get("/allocation_candidates?resources=FPGA:1&required=CUSTOM_FAKE_DEVICE")
            .await;
        assert_eq!(
            candidates["allocation_requests"].as_array().unwrap().len(),
            1
        );

        // Disable reserves the inventory, enable frees it.
        let r = app
            .send(
                As::Member("p1"),
                Method::POST,
                &format!("/v2/devices/{uuid}/disable"),
            )
            .await;
        assert_eq!(r.status, 403);
        let r = app
            .send(
                As::Admin,
                Method::POST,
                &format!("/v2/devices/{uuid}/disable"),
            )
            .await;
        assert_eq!(r.status, 200);
        let inv = app
            .placement_get(&format!("/resource_providers/{rp_uuid}/inventories"))
            .await;
        assert_eq!(inv["inventories"]["FPGA"]["reserved"], 16);
        let at23 = app
            .call(
                As::Admin,
                Method::GET,
                &format!("/v2/devices/{uuid}"),
                Some("accelerator 2.3"),
                None,
            )
            .await;
        assert_eq!(at23.body["status"], "maintaining");
        let r = app
            .send(
                As::Admin,
                Method::POST,
                &format!("/v2/devices/{uuid}/enable"),
            )
            .await;
        assert_eq!(r.status, 200);
        let inv = app
            .placement_get(&format!("/resource_providers/{rp_uuid}/inventories"))
            .await;
        assert_eq!(inv["inventories"]["FPGA"]["reserved"], 0);
    }
}

#[tokio::test]
async fn attributes_crud_and_agent_report() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        let deps = app.get(As::Admin, "/v2/deployables").await;
        let dep_id = deps.body["deployables"][0]["device_id"].as_i64().unwrap();
        let attrs = app.get(As::Admin, "/v2/attributes").await;
        let real_dep_id = attrs.body["attributes"][0]["deployable_id"]
            .as_i64()
            .unwrap();
        assert!(dep_id > 0);
        let body = json!({"deployable_id": real_dep_id, "key": "k1", "value": "v1"});
        let r = app
            .send_json(
                As::Member("p1"),
                Method::POST,
                "/v2/attributes",
                body.clone(),
            )
            .await;
        assert_eq!(r.status, 403);
        let r = app
            .send_json(As::Admin, Method::POST, "/v2/attributes", body)
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        let uuid = r.body["uuid"].as_str().unwrap().to_owned();
        let listed = app
            .get(
                As::Admin,
                &format!("/v2/attributes?deployable_id={real_dep_id}&key=k1"),
            )
            .await;
        assert_eq!(listed.body["attributes"].as_array().unwrap().len(), 1);
        let shown = app.get(As::Admin, &format!("/v2/attributes/{uuid}")).await;
        assert_eq!(shown.body["value"], "v1");
        let bad = app
            .send_json(
                As::Admin,
                Method::POST,
                "/v2/attributes",
                json!({"deployable_id": 424242, "key": "k", "value": "v"}),
            )
            .await;
        assert_eq!(bad.status, 404);
        let r = app
            .send(As::Admin, Method::DELETE, &format!("/v2/attributes/{uuid}"))
            .await;
        assert_eq!(r.status, 204);
        let r = app
            .send(As::Admin, Method::DELETE, &format!("/v2/attributes/{uuid}"))
            .await;
        assert_eq!(r.status, 404);

        // An agent's report replaces the host's records: the fake device goes, a GPU comes.
        let report = json!({"devices": [{
            "type": "GPU", "vendor": "10de", "model": "T4",
            "std_board_info": "{}", "vendor_board_info": null,
            "controlpath_id": {"cpid_type": "PCI", "cpid_info": "{\"bus\": \"af\"}"},
            "deployables": [{"name": "compute1_0000:af:00.0", "num_accelerators": 1, "driver_name": "NVIDIA",
                "attributes": [{"key": "rc", "value": "PGPU"}, {"key": "trait0", "value": "CUSTOM_NVIDIA_1EB8"}],
                "attach_handles": [{"attach_type": "PCI", "attach_info": "{\"bus\": \"af\"}", "in_use": false}]}]}]});
        let path = "/v2/agent/hosts/compute1/devices";
        let r = app
            .send_json(As::Member("p1"), Method::PUT, path, report.clone())
            .await;
        assert_eq!(r.status, 403);
        let r = app
            .send_json(
                As::Admin,
                Method::PUT,
                "/v2/agent/hosts/unknown/devices",
                report.clone(),
            )
            .await;
        assert_eq!(r.status, 400);
        let r = app.send_json(As::Admin, Method::PUT, path, report).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            (
                r.body["devices_added"].as_i64(),
                r.body["devices_removed"].as_i64()
            ),
            (Some(1), Some(1))
        );
        let devices = app.get(As::Admin, "/v2/devices").await;
        assert_eq!(devices.body["devices"][0]["type"], "GPU");
        let gone = app
            .placement_get("/resource_providers?name=compute1_FakeDevice")
            .await;
        assert_eq!(gone["resource_providers"], json!([]));
        let gpu = app
            .placement_get("/resource_providers?required=CUSTOM_NVIDIA_1EB8&resources=PGPU:1")
            .await;
        assert_eq!(
            gpu["resource_providers"][0]["name"],
            "compute1_0000:af:00.0"
        );
    }
}
