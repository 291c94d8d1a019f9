//! What `scripts/cyborg-diff.sh` found accel answering differently from upstream Cyborg
//! 17, each as upstream answers it: media types (415, 406), percent-decoded paths,
//! empty filters, bind values refused before anything is stored, WSME's words.

use crate::app::{AccelApp, As, INSTANCE};
use accel_testkit::server::BACKENDS;
use reqwest::Method;
use serde_json::{json, Value};

/// A request with a raw body and the given extra headers, as the admin with a
/// service token (Nova's rights).
async fn raw(
    app: &AccelApp,
    method: Method,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> crate::app::Reply {
    let mut r = app
        .client
        .request(method, format!("{}{path}", app.base))
        .header("x-auth-token", "admin")
        .header("x-service-roles", "service")
        .body(body.to_owned());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    crate::app::Reply::read(r.send().await.unwrap()).await
}

#[tokio::test]
async fn bodies_and_accept_are_negotiated_before_anything_is_done() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        let profile = r#"[{"name": "dp", "groups": [{"resources:FPGA": "1"}]}]"#;
        for (ct, status, fault) in [
            ("text/plain", 415, "Unknown mimetype: text/plain"),
            ("application/xml", 415, "Unknown mimetype: application/xml"),
            ("application/JSON", 415, "Unknown mimetype: application/JSON"),
            ("application/x-www-form-urlencoded", 400, "Unknown argument: \"[{\"name\": \"dp\", \"groups\": [{\"resources:FPGA\": \"1\"}]}]\""),
        ] {
            let r = raw(&app, Method::POST, "/v2/device_profiles", profile, &[("content-type", ct)]).await;
            assert_eq!((r.status, r.fault().as_str()), (status, fault), "{ct}");
            assert_eq!(r.header("openstack-api-version"), Some("accelerator 2.0"), "a WSME fault");
        }
        let r = raw(
            &app,
            Method::POST,
            "/v2/device_profiles",
            profile,
            &[
                ("accept", "application/xml"),
                ("content-type", "application/json"),
            ],
        )
        .await;
        assert_eq!(r.status, 406);
        assert_eq!(
            r.body["error_message"],
            "406 Not Acceptable\n\nThe resource could not be generated that was acceptable to your browser (content of type application/xml. \n\n "
        );
        assert_eq!(r.header("openstack-api-version"), None);
        // None of those created anything; JSON with a charset does.
        assert_eq!(
            app.get(As::Admin, "/v2/device_profiles").await.body["device_profiles"],
            json!([])
        );
        let r = raw(
            &app,
            Method::POST,
            "/v2/device_profiles",
            profile,
            &[("content-type", "application/json; charset=utf-8")],
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
        // WSME's words for a body that is not JSON and for none.
        let r = raw(
            &app,
            Method::POST,
            "/v2/accelerator_requests",
            "{",
            &[("content-type", "application/json")],
        )
        .await;
        assert_eq!(
            (r.status, r.fault().as_str()),
            (400, "Request is not in valid JSON format")
        );
        let r = raw(&app, Method::POST, "/v2/accelerator_requests", "", &[]).await;
        assert_eq!(
            (r.status, r.fault().as_str()),
            (400, "Missing argument: \"req\"")
        );
    }
}

#[tokio::test]
async fn paths_are_percent_decoded_and_empty_filters_ignored() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        app.create_profile("x-y", json!([{"resources:FPGA": "1"}]))
            .await;
        app.create_profile("a-b", json!([{"resources:FPGA": "1"}]))
            .await;
        let r = app
            .call(
                As::Admin,
                Method::GET,
                "/v2/device_profiles/x%2Dy",
                Some("accelerator 2.2"),
                None,
            )
            .await;
        assert_eq!(r.status, 200);
        assert!(
            r.body.to_string().contains("\"name\":\"x-y\""),
            "{}",
            r.body
        );
        let r = app
            .send(As::Admin, Method::DELETE, "/v2/device_profiles/x-y%2Ca%2Db")
            .await;
        assert_eq!(r.status, 204, "{}", r.body);
        assert_eq!(
            app.get(As::Admin, "/v2/device_profiles").await.body["device_profiles"],
            json!([])
        );

        // A name given twice is deleted, then upstream's 404 for the repeat.
        app.create_profile("twice", json!([{"resources:FPGA": "1"}]))
            .await;
        let r = app
            .send(
                As::Admin,
                Method::DELETE,
                "/v2/device_profiles?value=twice,twice",
            )
            .await;
        assert_eq!(
            (r.status, r.fault().as_str()),
            (404, "Device Profile not found with name=twice")
        );
        let left = app.get(As::Admin, "/v2/device_profiles").await;
        assert_eq!(left.body["device_profiles"], json!([]));
        app.create_profile("dp", json!([{"resources:FPGA": "1"}]))
            .await;
        app.create_arqs(As::Nova("p1"), "dp").await;
        let r = app
            .get(As::Admin, "/v2/accelerator_requests?bind_state=")
            .await;
        assert_eq!(
            r.body["arqs"].as_array().map(Vec::len),
            Some(1),
            "{}",
            r.body
        );
        let r = app
            .get(As::Admin, "/v2/accelerator_requests?instance=")
            .await;
        assert_eq!(r.status, 400);
        assert_eq!(r.fault(), "Invalid input for field/attribute instance. Value: ''. unable to convert to uuid. Error: Expected a uuid but received .");
        let r = app.get(As::Admin, "/v2/accelerator_requests/nope").await;
        assert_eq!(r.fault(), "Invalid input for field/attribute uuid. Value: 'nope'. unable to convert to uuid. Error: Expected a uuid but received nope.");
        let r = app.get(As::Admin, "/v2/deployables?filters.value=x").await;
        assert_eq!(
            r.body["deployables"].as_array().map(Vec::len),
            Some(1),
            "{}",
            r.body
        );
        let r = app
            .get(
                As::Admin,
                "/v2/deployables?filters.field=uuid&filters.value=x",
            )
            .await;
        assert_eq!(r.status, 400);
        assert!(r.fault().ends_with("Value should be one of: availability, board, instance_uuid, interface_type, limit, marker, name, parent_uuid, root_uuid, sort_dir, sort_key"));
    }
}

#[tokio::test]
async fn bind_values_are_refused_before_anything_is_stored_or_sent() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        app.create_profile("dp", json!([{"resources:FPGA": "1"}]))
            .await;
        let arq = app.create_arqs(As::Nova("p1"), "dp").await.remove(0);
        let u = arq["uuid"].as_str().unwrap();
        let rp = app
            .placement_get("/resource_providers?name=compute1_FakeDevice")
            .await;
        let rp = rp["resource_providers"][0]["uuid"].clone();
        let bind = |host: Value, rp: Value, instance: Value| {
            json!({ u: [{"op": "add", "path": "/hostname", "value": host},
                        {"op": "add", "path": "/device_rp_uuid", "value": rp},
                        {"op": "add", "path": "/instance_uuid", "value": instance}] })
        };
        for (body, fault) in [
            (bind(json!("compute1"), json!({"a": 1}), json!(INSTANCE)), "A string is required in field device_rp_uuid, not a dict"),
            (bind(json!(["compute1"]), rp.clone(), json!(INSTANCE)), "A string is required in field hostname, not a list"),
            (bind(json!(null), rp.clone(), json!(INSTANCE)), "Couldn't apply patch. Reason: Fields absent in patch hostname"),
            (bind(json!("compute1"), rp.clone(), json!("1234")), "Invalid input for field/attribute instance_uuid. Value: '1234'. unable to convert to uuid. Error: Expected a uuid but received 1234."),
        ] {
            let r = app.send_json(As::Nova("p1"), Method::PATCH, "/v2/accelerator_requests", body.clone()).await;
            assert_eq!((r.status, r.fault().as_str()), (400, fault), "{body}");
            let now = app.get(As::Admin, &format!("/v2/accelerator_requests/{u}")).await.body;
            assert_eq!(now["state"], "Initial", "untouched: {body}");
            assert_eq!(now["hostname"], Value::Null, "untouched: {body}");
        }
        // A key that is no uuid is looked up as upstream does: not found.
        let r = app
            .send_json(
                As::Nova("p1"),
                Method::PATCH,
                "/v2/accelerator_requests",
                json!({"nope": [{"op": "remove", "path": "/hostname"}]}),
            )
            .await;
        assert_eq!(r.status, 404, "{}", r.body);
        // A uuid named twice in a delete: deleted, then upstream's 404 for the repeat.
        let r = app
            .send(
                As::Nova("p1"),
                Method::DELETE,
                &format!("/v2/accelerator_requests?arqs={u},{u}"),
            )
            .await;
        assert_eq!(
            (r.status, r.fault()),
            (404, format!("ARQ not found with uuids ['{u}']"))
        );
        assert_eq!(
            app.get(As::Admin, &format!("/v2/accelerator_requests/{u}"))
                .await
                .status,
            404
        );
    }
}
