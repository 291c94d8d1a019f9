//! Device profiles: create validation, lifecycle, admin-only writes.

use crate::app::{AccelApp, As};
use accel_testkit::server::BACKENDS;
use reqwest::Method;
use serde_json::{json, Value};

#[tokio::test]
async fn profile_create_validation() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, None).await;
        let g = |group: Value| json!([{"name": "dp", "groups": [group]}]);
        let cases: Vec<(Value, &str)> = vec![
            (json!({"name": "dp", "groups": [{"resources:FPGA": "1"}]}), "Only one device profile allowed per POST request for now."),
            (json!([{"name": "a", "groups": [{"resources:FPGA": "1"}]}, {"name": "b", "groups": [{"resources:FPGA": "1"}]}]), "Only one device profile allowed per POST request for now."),
            (json!([]), "Only one device profile allowed per POST request for now."),
            (json!([{"groups": [{"resources:FPGA": "1"}]}]), "DeviceProfile name needed."),
            (json!([{"name": "", "groups": [{"resources:FPGA": "1"}]}]), "DeviceProfile name needed."),
            (json!([{"name": "bad name!", "groups": [{"resources:FPGA": "1"}]}]), "Device profile name must be of the form ^[a-zA-Z0-9-_]+$"),
            (json!([{"name": "a".repeat(256), "groups": [{"resources:FPGA": "1"}]}]), "Device profile name must be at most 255 characters long."),
            (json!([{"name": "dp"}]), "DeviceProfile needs groups field."),
            (json!([{"name": "dp", "groups": []}]), "DeviceProfile needs groups field."),
            (json!([{"name": "dp", "groups": ["x"]}]), "Device profile groups must be JSON objects."),
            (g(json!({})), "Device profile group 0 is empty."),
            (g(json!({"resource:FPGA": "1"})), "Device profile group keys must be of the form ^(resources:|trait:|accel:)"),
            (g(json!({"trait:CUSTOM_A": "maybe"})), "Unsupported trait value maybe, the value must be one among ['required', 'forbidden']"),
            (g(json!({"trait:NOT_A_TRAIT": "required"})), "Unsupported trait name format NOT_A_TRAIT, should start with CUSTOM_"),
            (g(json!({"resources:BOGUS": "1"})), "Unsupported resource class BOGUS"),
            (g(json!({"resources:FPGA": "0"})), "Resources number 0 is invalid"),
            (g(json!({"resources:FPGA": "-2"})), "Resources number -2 is invalid"),
            (g(json!({"resources:FPGA": "one"})), "Resources number one is invalid"),
            (g(json!({"resources:FPGA": true})), "Device profile group values must be strings or integers, not a boolean (key resources:FPGA)."),
            (g(json!({"resources:FPGA": "1", "resources: fpga": "1"})), "Duplicate key resources:FPGA in device profile group 0."),
            (g(json!({"resources:FPGA": "1", "accel:attach_target": "cloud"})), "Invalid value cloud for accel:attach_target: one of VM, host, none is expected"),
            (g(json!({"resources:FPGA": "1", "accel:bitstream_id": "nope"})), "Invalid value nope for accel:bitstream_id: a UUID is expected"),
            (json!([{"name": "dp", "uuid": "nope", "groups": [{"resources:FPGA": "1"}]}]), "Expected a uuid but received nope."),
        ];
        for (body, message) in cases {
            let r = app
                .send_json(As::Admin, Method::POST, "/v2/device_profiles", body.clone())
                .await;
            assert_eq!(r.status, 400, "{body}: {}", r.body);
            assert_eq!(r.fault(), message, "{body}");
        }
        let listed = app.get(As::Admin, "/v2/device_profiles").await;
        assert_eq!(
            listed.body["device_profiles"],
            json!([]),
            "nothing was written"
        );
    }
}

#[tokio::test]
async fn profiles_lifecycle_and_admin_only_writes() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, None).await;
        let created = app
            .create_profile(
                "dp1",
                json!([
                    {"trait:custom_fpga-1": "required", "resources:fpga": 2, "accel:attach_target": "VM"},
                    {"resources:PGPU": "1"}
                ]),
            )
            .await;
        assert_eq!(
            created["groups"],
            json!([
                {"trait:CUSTOM_FPGA_1": "required", "resources:FPGA": "2", "accel:attach_target": "VM"},
                {"resources:PGPU": "1"}
            ]),
            "names translated, values as strings, order kept"
        );
        assert_eq!(created["updated_at"], Value::Null);
        // A taken name answers before a malformed uuid (upstream stores any text as the
        // uuid; its database's unique name is what refuses).
        let again = app
            .send_json(
                As::Admin,
                Method::POST,
                "/v2/device_profiles",
                json!([{"name": "dp1", "uuid": "not-a-uuid", "groups": [{"resources:FPGA": "1"}]}]),
            )
            .await;
        assert_eq!(again.status, 409, "{}", again.body);
        assert_eq!(
            again.fault(),
            "A device_profile with name dp1 already exists."
        );
        assert!(created["created_at"].as_str().unwrap().ends_with("+00:00"));
        let uuid = created["uuid"].as_str().unwrap().to_owned();
        assert!(created["links"][0]["href"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/accelerator/v2/device_profiles/{uuid}")));

        let dup = app
            .send_json(
                As::Admin,
                Method::POST,
                "/v2/device_profiles",
                json!([{"name": "dp1", "groups": [{"resources:FPGA": "1"}]}]),
            )
            .await;
        assert_eq!(dup.status, 409);
        assert_eq!(
            dup.fault(),
            "A device_profile with name dp1 already exists."
        );
        let dup_uuid = app
            .send_json(
                As::Admin,
                Method::POST,
                "/v2/device_profiles",
                json!([{"name": "other", "uuid": uuid, "groups": [{"resources:FPGA": "1"}]}]),
            )
            .await;
        assert_eq!(dup_uuid.status, 409);
        assert_eq!(
            dup_uuid.fault(),
            format!("DeviceProfile with uuid {uuid} already exists.")
        );

        let member = app
            .send_json(
                As::Member("p1"),
                Method::POST,
                "/v2/device_profiles",
                json!([{"name": "mine", "groups": [{"resources:FPGA": "1"}]}]),
            )
            .await;
        assert_eq!(member.status, 403);
        assert_eq!(
            member.fault(),
            "Access was denied to the following resource: cyborg:device_profile:create"
        );
        let member_del = app
            .send(
                As::Member("p1"),
                Method::DELETE,
                &format!("/v2/device_profiles/{uuid}"),
            )
            .await;
        assert_eq!(member_del.status, 403);

        let listed = app
            .get(As::Member("p1"), "/v2/device_profiles?name=dp1,nope")
            .await;
        assert_eq!(listed.status, 200);
        assert_eq!(listed.body["device_profiles"].as_array().unwrap().len(), 1);

        let by_uuid = app
            .get(As::Member("p1"), &format!("/v2/device_profiles/{uuid}"))
            .await;
        assert_eq!(by_uuid.status, 200);
        assert_eq!(by_uuid.body["device_profile"]["name"], "dp1");
        assert_eq!(by_uuid.body["device_profile"]["updated_at"], "None");
        assert!(by_uuid.body["device_profile"]["created_at"]
            .as_str()
            .unwrap()
            .contains(' '));

        let by_name_old = app.get(As::Admin, "/v2/device_profiles/dp1").await;
        assert_eq!(by_name_old.status, 406);
        assert_eq!(
            by_name_old.fault(),
            "Request not acceptable. The minimal required API version should be 2.2"
        );
        let by_name = app
            .call(
                As::Admin,
                Method::GET,
                "/v2/device_profiles/dp1",
                Some("accelerator 2.2"),
                None,
            )
            .await;
        assert_eq!(by_name.status, 200);
        assert_eq!(by_name.body["device_profile"]["uuid"], uuid.as_str());
        let missing = app
            .call(
                As::Admin,
                Method::GET,
                "/v2/device_profiles/nope",
                Some("accelerator 2.2"),
                None,
            )
            .await;
        assert_eq!(missing.status, 404);
        assert_eq!(missing.fault(), "Device Profile not found with name=nope");
        let missing = app
            .get(
                As::Admin,
                "/v2/device_profiles/5f0bd7b4-0f0b-4f8b-9ad4-3c3d8e1b2a10",
            )
            .await;
        assert_eq!(missing.status, 404);

        // In use by ARQs: 409, not a 500.
        app.create_arqs(As::Member("p1"), "dp1").await;
        let in_use = app
            .send(
                As::Admin,
                Method::DELETE,
                &format!("/v2/device_profiles/{uuid}"),
            )
            .await;
        assert_eq!(in_use.status, 409);
        assert!(in_use.fault().contains("in use"), "{}", in_use.fault());

        app.create_profile("a", json!([{"resources:FPGA": "1"}]))
            .await;
        app.create_profile("b", json!([{"resources:FPGA": "1"}]))
            .await;
        let partial = app
            .call(
                As::Admin,
                Method::DELETE,
                "/v2/device_profiles?value=a,nope",
                None,
                None,
            )
            .await;
        assert_eq!(partial.status, 404);
        assert_eq!(partial.fault(), "Device Profile not found with name=nope");
        let still = app.get(As::Admin, "/v2/device_profiles?name=a").await;
        assert_eq!(
            still.body["device_profiles"].as_array().unwrap().len(),
            1,
            "all or nothing"
        );
        let both = app
            .call(
                As::Admin,
                Method::DELETE,
                "/v2/device_profiles?value=a,b",
                None,
                None,
            )
            .await;
        assert_eq!(both.status, 204);
        let by_name = app
            .send(As::Admin, Method::DELETE, "/v2/device_profiles/dp-none")
            .await;
        assert_eq!(by_name.status, 404);
        let empty = app
            .send(As::Admin, Method::DELETE, "/v2/device_profiles/")
            .await;
        assert_eq!(empty.status, 400);
        assert_eq!(empty.fault(), "Missing argument: \"value\"");
        let left = app.get(As::Admin, "/v2/device_profiles").await;
        let names: Vec<&str> = left.body["device_profiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["dp1"]);
    }
}
