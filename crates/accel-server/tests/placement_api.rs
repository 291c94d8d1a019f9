//! The Placement API over HTTP, on SQLite and PostgreSQL: protocol behaviour
//! (versions, auth, routing, errors) and that rejected requests write nothing.

mod common;

use common::{TestApp, BACKENDS};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn root_versions_and_protocol_errors() {
    let app = TestApp::spawn(common::Backend::Sqlite).await;
    let resp = app
        .client
        .get(format!("{}/", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["openstack-api-version"], "placement 1.0");
    assert!(resp.headers()["x-openstack-request-id"]
        .to_str()
        .unwrap()
        .starts_with("req-"));
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["versions"][0]["max_version"], "1.39");

    // No token: 401 (but not on /).
    let resp = app
        .client
        .get(format!("{}/resource_providers", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);

    // Unsupported and malformed versions.
    let (s, v) = app
        .json(Method::GET, "/resource_providers", "9.9", None)
        .await;
    assert_eq!(s, 406);
    assert_eq!(v["errors"][0]["max_version"], "1.39");
    let (s, _) = app
        .json(Method::GET, "/resource_providers", "1.2.3", None)
        .await;
    assert_eq!(s, 400);

    // Wrong method: 405 with Allow; unknown route: 404; route newer than the version: 404.
    let resp = app
        .req(Method::DELETE, "/resource_providers", "1.39")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "GET, POST");
    let (s, _) = app.json(Method::GET, "/nope", "1.39", None).await;
    assert_eq!(s, 404);
    let (s, _) = app.json(Method::GET, "/traits", "1.5", None).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn providers_on_both_backends() {
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        let root = app.create_provider("root", None).await;
        let root_uuid = root["uuid"].as_str().unwrap().to_owned();
        assert_eq!(root["generation"], 0);
        assert_eq!(root["root_provider_uuid"], root_uuid.as_str());
        let child = app.create_provider("child", Some(&root_uuid)).await;
        assert_eq!(child["parent_provider_uuid"], root_uuid.as_str());

        // Duplicate name: 409 with the code from 1.23, none before.
        let (s, v) = app
            .json(
                Method::POST,
                "/resource_providers",
                "1.39",
                Some(json!({"name": "root"})),
            )
            .await;
        assert_eq!(s, 409);
        assert_eq!(v["errors"][0]["code"], "placement.duplicate_name");
        let (s, v) = app
            .json(
                Method::POST,
                "/resource_providers",
                "1.22",
                Some(json!({"name": "root"})),
            )
            .await;
        assert_eq!(s, 409);
        assert!(v["errors"][0].get("code").is_none());

        // Deleting a parent is refused.
        let (s, v) = app
            .json(
                Method::DELETE,
                &format!("/resource_providers/{root_uuid}"),
                "1.39",
                None,
            )
            .await;
        assert_eq!(s, 409);
        assert_eq!(
            v["errors"][0]["code"],
            "placement.resource_provider.cannot_delete_parent"
        );
    }
}

#[tokio::test]
async fn rejected_requests_write_nothing() {
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        for body in [
            json!({"nam": "x"}),
            json!({"name": "x", "bad_field": 1}),
            json!({"name": "x".repeat(201)}),
            json!({"name": "x", "uuid": "not-a-uuid"}),
            json!({"name": "x", "parent_provider_uuid": "00000000-0000-0000-0000-000000000000"}),
        ] {
            let (s, v) = app
                .json(
                    Method::POST,
                    "/resource_providers",
                    "1.39",
                    Some(body.clone()),
                )
                .await;
            assert_eq!(s, 400, "{body} -> {v}");
            assert!(v["errors"][0]["detail"].as_str().unwrap().len() > 10);
        }
        let resp = app
            .req(Method::POST, "/resource_providers", "1.39")
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 415);
        let (s, v) = app
            .json(Method::GET, "/resource_providers", "1.39", None)
            .await;
        assert_eq!(s, 200);
        assert_eq!(v["resource_providers"], json!([]));
    }
}
