//! Accelerator requests: counts, project isolation, deletes, PATCH rules.

use crate::app::{AccelApp, As, INSTANCE};
use accel_testkit::server::BACKENDS;
use reqwest::Method;
use serde_json::{json, Value};

#[tokio::test]
async fn arqs_counts_isolation_and_deletes() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        app.create_profile(
            "dp",
            json!([{"resources:FPGA": "2", "resources:CUSTOM_X": "1"}, {"resources:PGPU": "1"}]),
        )
        .await;
        let mine = app.create_arqs(As::Member("p1"), "dp").await;
        assert_eq!(mine.len(), 4);
        let groups: Vec<i64> = mine
            .iter()
            .map(|a| a["device_profile_group_id"].as_i64().unwrap())
            .collect();
        assert_eq!(groups, [0, 0, 0, 1]);
        let a0 = &mine[0];
        assert_eq!(a0["state"], "Initial");
        assert_eq!(a0["device_profile_name"], "dp");
        assert_eq!(a0["project_id"], "p1");
        assert_eq!(
            (a0["hostname"].clone(), a0["instance_uuid"].clone()),
            (Value::Null, Value::Null)
        );
        assert_eq!(a0["attach_handle_type"], "");
        assert_eq!(a0["attach_handle_info"], json!({}));
        assert_eq!(a0["attach_handle_uuid"], Value::Null);
        let only_group = app
            .send_json(
                As::Member("p1"),
                Method::POST,
                "/v2/accelerator_requests",
                json!({"device_profile_name": "dp", "device_profile_group_id": 1}),
            )
            .await;
        assert_eq!(only_group.body["arqs"].as_array().unwrap().len(), 1);

        for (name, code) in [("", 404), ("fake_dp", 404), ("!@#$%^&*()=-[]", 404)] {
            let r = app
                .send_json(
                    As::Member("p1"),
                    Method::POST,
                    "/v2/accelerator_requests",
                    json!({"device_profile_name": name}),
                )
                .await;
            assert_eq!(r.status, code);
            assert_eq!(
                r.fault(),
                format!("Device Profile not found with name={name}")
            );
        }

        // Another project sees none of p1's ARQs and cannot touch them.
        let theirs = app.get(As::Member("p2"), "/v2/accelerator_requests").await;
        assert_eq!(theirs.body["arqs"], json!([]));
        let uuid = a0["uuid"].as_str().unwrap();
        let shown = app
            .get(
                As::Member("p2"),
                &format!("/v2/accelerator_requests/{uuid}"),
            )
            .await;
        assert_eq!(shown.status, 404);
        assert_eq!(shown.fault(), format!("ExtArq not found with uuid={uuid}"));
        let deleted = app
            .send(
                As::Member("p2"),
                Method::DELETE,
                &format!("/v2/accelerator_requests?arqs={uuid}"),
            )
            .await;
        assert_eq!(deleted.status, 404);
        let ours = app.get(As::Member("p1"), "/v2/accelerator_requests").await;
        assert_eq!(ours.body["arqs"].as_array().unwrap().len(), 5);
        let all = app.get(As::Admin, "/v2/accelerator_requests").await;
        assert_eq!(all.body["arqs"].as_array().unwrap().len(), 5);
        let shown = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests/{uuid}"),
            )
            .await;
        assert_eq!(shown.status, 200);
        assert_eq!(shown.body["uuid"], uuid);
        let bad = app
            .get(As::Member("p1"), "/v2/accelerator_requests/not-a-uuid")
            .await;
        assert_eq!(bad.status, 400);

        // Unknown uuid in a batch: 404 and nothing deleted.
        let unknown = "11111111-2222-3333-4444-555555555555";
        let r = app
            .send(
                As::Member("p1"),
                Method::DELETE,
                &format!("/v2/accelerator_requests?arqs={uuid},{unknown}"),
            )
            .await;
        assert_eq!(r.status, 404);
        assert_eq!(r.fault(), format!("ExtArq not found with uuid={unknown}"));
        assert_eq!(
            app.get(As::Member("p1"), "/v2/accelerator_requests")
                .await
                .body["arqs"]
                .as_array()
                .unwrap()
                .len(),
            5
        );
        let r = app
            .send(
                As::Member("p1"),
                Method::DELETE,
                &format!("/v2/accelerator_requests/{uuid}"),
            )
            .await;
        assert_eq!(r.status, 204);
        let neither = app
            .send(As::Member("p1"), Method::DELETE, "/v2/accelerator_requests")
            .await;
        assert_eq!(neither.status, 400);

        // Bind one ARQ to an instance: 423 while unresolved, filters done in SQL.
        let rp = app
            .placement_get("/resource_providers?name=compute1_FakeDevice")
            .await;
        let rp_uuid = rp["resource_providers"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let target = mine[1]["uuid"].as_str().unwrap();
        let bind = json!({target: [
            {"op": "add", "path": "/hostname", "value": "compute1"},
            {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
            {"op": "add", "path": "/instance_uuid", "value": INSTANCE},
        ]});
        let no_token = app
            .send_json(
                As::Member("p1"),
                Method::PATCH,
                "/v2/accelerator_requests",
                bind.clone(),
            )
            .await;
        assert_eq!(no_token.status, 403);
        assert!(no_token
            .fault()
            .starts_with("This operation requires a service token."));
        let r = app
            .send_json(
                As::Nova("p1"),
                Method::PATCH,
                "/v2/accelerator_requests",
                bind.clone(),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let hot_add = app
            .send_json(
                As::Nova("p1"),
                Method::PATCH,
                "/v2/accelerator_requests",
                bind,
            )
            .await;
        assert_eq!(hot_add.status, 400);
        assert!(hot_add.fault().contains("already has accelerator requests"));
        let shown = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests/{target}"),
            )
            .await;
        assert_eq!(shown.body["state"], "BindStarted");
        assert_eq!(shown.body["instance_uuid"], INSTANCE);
        assert_eq!(shown.body["hostname"], "compute1");

        let locked = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests?instance={INSTANCE}&bind_state=resolved"),
            )
            .await;
        assert_eq!(locked.status, 423);
        assert_eq!(locked.body, json!({"error_message": "null"}));
        let by_instance = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests?instance={INSTANCE}"),
            )
            .await;
        assert_eq!(by_instance.body["arqs"].as_array().unwrap().len(), 1);
        let resolved = app
            .get(
                As::Member("p1"),
                "/v2/accelerator_requests?bind_state=resolved",
            )
            .await;
        assert_eq!(resolved.body["arqs"], json!([]));
        let bad_state = app
            .get(As::Member("p1"), "/v2/accelerator_requests?bind_state=done")
            .await;
        assert_eq!(bad_state.status, 400);
        let bad_instance = app
            .get(As::Member("p1"), "/v2/accelerator_requests?instance=x")
            .await;
        assert_eq!(bad_instance.status, 400);

        // A bound ARQ is Nova's to delete; delete by instance needs the service token
        // and is idempotent.
        let r = app
            .send(
                As::Member("p1"),
                Method::DELETE,
                &format!("/v2/accelerator_requests?arqs={target}"),
            )
            .await;
        assert_eq!(r.status, 403);
        let path = format!("/v2/accelerator_requests?instance={INSTANCE}");
        let r = app.send(As::Member("p1"), Method::DELETE, &path).await;
        assert_eq!(r.status, 403);
        for _ in 0..2 {
            let r = app.send(As::Nova("p1"), Method::DELETE, &path).await;
            assert_eq!(r.status, 204);
        }
        let gone = app
            .get(
                As::Member("p1"),
                &format!("/v2/accelerator_requests/{target}"),
            )
            .await;
        assert_eq!(gone.status, 404);
    }
}

#[tokio::test]
async fn arq_patch_rules() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        app.create_profile("dp", json!([{"resources:FPGA": "1"}]))
            .await;
        let arq = app.create_arqs(As::Nova("p1"), "dp").await.remove(0);
        let u = arq["uuid"].as_str().unwrap();
        let patch = |ops: Value| json!({ u: ops });
        let cases = [
            (patch(json!([{"op": "add", "path": "/hostname", "value": "h"}, {"op": "remove", "path": "/instance_uuid"}])),
             None, 400, "Couldn't apply patch. Reason: Every op must be add or remove".to_owned()),
            (patch(json!([{"op": "add", "path": "/state", "value": "Bound"}])),
             None, 400, "Couldn't apply patch. Reason: Invalid path in patch /state".to_owned()),
            (patch(json!([{"op": "add", "path": "/hostname", "value": "h"}])),
             None, 400, "Couldn't apply patch. Reason: Fields absent in patch device_rp_uuid,instance_uuid".to_owned()),
            (patch(json!([{"op": "add", "path": "/project_id", "value": "p9"}])),
             None, 406, "Request not acceptable. The minimal required API version should be 2.1".to_owned()),
            (patch(json!([{"op": "add", "path": "/project_id", "value": "p9"}])),
             Some("accelerator 2.1"), 403, "Access was denied to the following resource: cyborg:arq:update".to_owned()),
            (patch(json!([
                {"op": "add", "path": "/hostname", "value": "compute1"},
                {"op": "add", "path": "/device_rp_uuid", "value": "00000000-0000-0000-0000-000000000001"},
                {"op": "add", "path": "/instance_uuid", "value": INSTANCE}])),
             None, 404, "Deployable not found with resource provider uuid=00000000-0000-0000-0000-000000000001".to_owned()),
            // An unknown ARQ is named before an unknown provider, in the body's order
            // (upstream's conductor looks the ARQ up first).
            (json!({
                "00000000-0000-0000-0000-0000000000aa": [
                    {"op": "add", "path": "/hostname", "value": "compute1"},
                    {"op": "add", "path": "/device_rp_uuid", "value": "00000000-0000-0000-0000-000000000001"},
                    {"op": "add", "path": "/instance_uuid", "value": INSTANCE}],
                u: [
                    {"op": "add", "path": "/hostname", "value": "compute1"},
                    {"op": "add", "path": "/device_rp_uuid", "value": "00000000-0000-0000-0000-000000000001"},
                    {"op": "add", "path": "/instance_uuid", "value": INSTANCE}]}),
             None, 404, "ExtArq not found with uuid=00000000-0000-0000-0000-0000000000aa".to_owned()),
        ];
        for (body, version, status, message) in cases {
            let r = app
                .call(
                    As::Nova("p1"),
                    Method::PATCH,
                    "/v2/accelerator_requests",
                    version,
                    Some(body.clone()),
                )
                .await;
            assert_eq!(r.status, status, "{body}");
            assert_eq!(r.fault(), message, "{body}");
        }
        // The single-ARQ form on the item URL (openstacksdk), then unbind.
        let rp = app
            .placement_get("/resource_providers?name=compute1_FakeDevice")
            .await;
        let rp_uuid = rp["resource_providers"][0]["uuid"].as_str().unwrap();
        let r = app
            .send_json(
                As::Nova("p1"),
                Method::PATCH,
                &format!("/v2/accelerator_requests/{u}"),
                patch(json!([
                      {"op": "add", "path": "/hostname", "value": "compute1"},
                      {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
                      {"op": "add", "path": "/instance_uuid", "value": INSTANCE}])),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let r = app
            .send_json(
                As::Nova("p1"),
                Method::PATCH,
                "/v2/accelerator_requests",
                patch(json!([
                      {"op": "remove", "path": "/hostname"},
                      {"op": "remove", "path": "/device_rp_uuid"},
                      {"op": "remove", "path": "/instance_uuid"}])),
            )
            .await;
        assert_eq!(r.status, 202);
        let shown = app
            .get(As::Nova("p1"), &format!("/v2/accelerator_requests/{u}"))
            .await;
        assert_eq!(shown.body["state"], "Unbound");
        assert_eq!(shown.body["instance_uuid"], Value::Null);
        assert_eq!(shown.body["project_id"], "p1");
    }
}

/// The create body as it has always been read: a group id may be a string holding a
/// non-negative integer; refusals keep their order (object, name, group id).
#[tokio::test]
async fn arq_create_bodies() {
    let backend = BACKENDS[0];
    let app = AccelApp::spawn(backend, Some("compute1")).await;
    app.create_profile(
        "dp",
        json!([{"resources:FPGA": "1"}, {"resources:PGPU": "1"}]),
    )
    .await;
    let post = |body: Value| {
        app.call(
            As::Member("p1"),
            Method::POST,
            "/v2/accelerator_requests",
            None,
            Some(body),
        )
    };
    for group in [json!(" 1 "), json!("1"), json!(1)] {
        let r = post(json!({"device_profile_name": "dp", "device_profile_group_id": group})).await;
        assert_eq!(r.status, 201, "{group}: {}", r.body);
        assert_eq!(r.body["arqs"][0]["device_profile_group_id"], 1, "{group}");
    }
    let r = post(json!({"device_profile_name": "dp", "device_profile_group_id": null})).await;
    assert_eq!(r.body["arqs"].as_array().map(Vec::len), Some(2));
    let group_id = "device_profile_group_id must be a non-negative integer.";
    let cases: Vec<(Value, &str)> = vec![
        (json!(["dp"]), "The request body must be a JSON object."),
        (
            json!({"device_profile_group_id": "x"}),
            "DeviceProfile name needed.",
        ),
        (
            json!({"device_profile_name": null}),
            "DeviceProfile name needed.",
        ),
        (
            json!({"device_profile_name": [3], "device_profile_group_id": "x"}),
            "device_profile_name must be a string.",
        ),
        (
            json!({"device_profile_name": "dp", "device_profile_group_id": -1}),
            group_id,
        ),
        (
            json!({"device_profile_name": "dp", "device_profile_group_id": 1.0}),
            group_id,
        ),
        (
            json!({"device_profile_name": "dp", "device_profile_group_id": "one"}),
            group_id,
        ),
        (
            json!({"device_profile_name": "dp", "device_profile_group_id": [1]}),
            group_id,
        ),
    ];
    for (body, message) in cases {
        let r = post(body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert_eq!(r.fault(), message, "{body}");
    }
    // A number is looked up by its text, as upstream does.
    let r = post(json!({"device_profile_name": 3})).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.fault(), "Device Profile not found with name=3");
}

/// Nova without Keystone (`[service_user] auth_type = admin_token`) sends its service
/// token as `X-Service-Token: <user>` and nothing else: noauth reads it as a service
/// token (`user[:project[:roles]]`, roles defaulting to `service`), so Nova binds and
/// deletes by instance; a service token that names other roles is not made a service's
/// by a client-sent `X-Service-Roles`.
#[tokio::test]
async fn noauth_service_token_binds() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        app.create_profile("dp", json!([{"resources:FPGA": "1"}]))
            .await;
        let user: &[(&str, &str)] = &[("x-auth-token", "demo:p7")];
        let arqs = app.create_arqs(As::Headers(user), "dp").await;
        let target = arqs[0]["uuid"].as_str().unwrap().to_owned();
        // The ARQ belongs to the token's project.
        assert_eq!(arqs[0]["project_id"], "p7");
        let rp = app
            .placement_get("/resource_providers?name=compute1_FakeDevice")
            .await;
        let rp_uuid = rp["resource_providers"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let bind = json!({target.clone(): [
            {"op": "add", "path": "/hostname", "value": "compute1"},
            {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
            {"op": "add", "path": "/instance_uuid", "value": INSTANCE},
        ]});
        let path = "/v2/accelerator_requests";

        // Other roles in the service token: the client's X-Service-Roles does not count.
        let not_service: &[(&str, &str)] = &[
            ("x-auth-token", "demo:p7"),
            ("x-service-token", "nova:service:member,reader"),
            ("x-service-roles", "service"),
        ];
        let r = app
            .send_json(As::Headers(not_service), Method::PATCH, path, bind.clone())
            .await;
        assert_eq!(r.status, 403, "{}", r.body);
        assert!(r
            .fault()
            .starts_with("This operation requires a service token."));

        let nova: &[(&str, &str)] = &[("x-auth-token", "demo:p7"), ("x-service-token", "nova")];
        let r = app
            .send_json(As::Headers(nova), Method::PATCH, path, bind)
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let shown = app
            .get(As::Headers(user), &format!("{path}/{target}"))
            .await;
        assert_eq!(shown.body["state"], "BindStarted", "{}", shown.body);
        assert_eq!(shown.body["instance_uuid"], INSTANCE);

        // Delete by instance: a user token alone is refused, the service token passes.
        let by_instance = format!("{path}?instance={INSTANCE}");
        let r = app
            .send(As::Headers(user), Method::DELETE, &by_instance)
            .await;
        assert_eq!(r.status, 403);
        let explicit: &[(&str, &str)] = &[
            ("x-auth-token", "demo:p7"),
            ("x-service-token", "nova:service:service"),
        ];
        let r = app
            .send(As::Headers(explicit), Method::DELETE, &by_instance)
            .await;
        assert_eq!(r.status, 204, "{}", r.body);
        let gone = app
            .get(As::Headers(user), &format!("{path}/{target}"))
            .await;
        assert_eq!(gone.status, 404);
    }
}
