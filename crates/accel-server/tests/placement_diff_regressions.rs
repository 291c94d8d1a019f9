//! Differences from upstream Placement 16.0.0 that the differential test
//! (`scripts/placement-diff.sh`) found, each pinned to upstream's answer so it cannot
//! come back: error wording clients match on, validation order, and when an unknown
//! name in a later request group is never looked up.

mod common;

use common::{TestApp, BACKENDS};
use reqwest::Method;
use serde_json::{json, Value};

fn detail(v: &Value) -> &str {
    v["errors"][0]["detail"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn provider_refusals_carry_upstreams_object_action_wording() {
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        // An empty name is refused (upstream's provider object checks it), and nothing is written.
        let (s, v) = app
            .json(
                Method::POST,
                "/resource_providers",
                "1.20",
                Some(json!({"name": ""})),
            )
            .await;
        assert_eq!(s, 400, "{v}");
        assert!(
            detail(&v).contains("Unable to create resource provider \"\", ")
                && detail(&v)
                    .ends_with(": Object action create failed because: name is required  "),
            "{v}"
        );
        let (_, list) = app
            .json(Method::GET, "/resource_providers", "1.20", None)
            .await;
        assert_eq!(list["resource_providers"], json!([]));

        let (s, v) = app
            .json(
                Method::POST,
                "/resource_providers",
                "1.20",
                Some(json!({"name": "orphan", "parent_provider_uuid": uuid::Uuid::new_v4()})),
            )
            .await;
        assert_eq!(s, 400, "{v}");
        assert!(
            detail(&v).ends_with(
                ": Object action create failed because: parent provider UUID does not exist.  "
            ),
            "{v}"
        );

        let root = app.create_provider("root", None).await;
        let root_uuid = root["uuid"].as_str().unwrap().to_owned();
        let child = app.create_provider("child", Some(&root_uuid)).await;
        let child_uuid = child["uuid"].as_str().unwrap().to_owned();
        let (s, v) = app
            .json(
                Method::PUT,
                &format!("/resource_providers/{child_uuid}"),
                "1.20",
                Some(json!({"name": "child", "parent_provider_uuid": null})),
            )
            .await;
        assert_eq!(s, 400, "{v}");
        assert!(
            detail(&v).ends_with(&format!(
                "Unable to save resource provider {child_uuid}: Object action update failed because: un-parenting a provider is not currently allowed.  "
            )),
            "{v}"
        );
        // A missing new parent is a failed "create" in upstream's words, even on update.
        let (s, v) = app
            .json(
                Method::PUT,
                &format!("/resource_providers/{root_uuid}"),
                "1.20",
                Some(json!({"name": "root", "parent_provider_uuid": uuid::Uuid::new_v4()})),
            )
            .await;
        assert_eq!(s, 400, "{v}");
        assert!(
            detail(&v).ends_with(
                ": Object action create failed because: parent provider UUID does not exist.  "
            ),
            "{v}"
        );
    }
}

#[tokio::test]
async fn inventory_and_method_errors_read_as_upstreams() {
    let app = TestApp::spawn(common::Backend::Sqlite).await;
    let rp = app.create_provider("rp", None).await;
    let uuid = rp["uuid"].as_str().unwrap();

    let (s, v) = app
        .json(
            Method::DELETE,
            &format!("/resource_providers/{uuid}/inventories/VCPU"),
            "1.20",
            None,
        )
        .await;
    assert_eq!(s, 404);
    assert!(
        detail(&v).ends_with(
            "\n\n No inventory of class VCPU found for delete: No inventory of class VCPU found for delete  "
        ),
        "{v}"
    );

    // DELETE of all inventories arrived in 1.5: before it, webob's sentence and no detail.
    let (s, v) = app
        .json(
            Method::DELETE,
            &format!("/resource_providers/{uuid}/inventories"),
            "1.4",
            None,
        )
        .await;
    assert_eq!(s, 405);
    assert_eq!(
        detail(&v),
        "The method DELETE is not allowed for this resource. \n\n ",
        "{v}"
    );
    // A method no version has keeps webob's sentence and the handler's detail.
    let (s, v) = app
        .json(
            Method::PATCH,
            &format!("/resource_providers/{uuid}"),
            "1.4",
            None,
        )
        .await;
    assert_eq!(s, 405);
    assert_eq!(
        detail(&v),
        "The method PATCH is not allowed for this resource. \n\n The method specified is not allowed for this resource.",
        "{v}"
    );

    // The body's most relevant error, as Python's jsonschema.validate picks it: the
    // missing top-level property, not the empty nested object.
    let (s, v) = app
        .json(
            Method::PUT,
            &format!("/allocations/{}", uuid::Uuid::new_v4()),
            "1.12",
            Some(json!({"allocations": {}})),
        )
        .await;
    assert_eq!(s, 400);
    assert!(
        detail(&v).contains("JSON does not validate: 'project_id' is a required property"),
        "{v}"
    );
}

#[tokio::test]
async fn later_groups_names_are_not_looked_up_once_a_group_is_empty() {
    let app = TestApp::spawn(common::Backend::Sqlite).await;
    let rp = app.create_provider("cn", None).await;
    let uuid = rp["uuid"].as_str().unwrap();
    let (s, _) = app
        .json(
            Method::PUT,
            &format!("/resource_providers/{uuid}/inventories"),
            "1.20",
            Some(json!({"resource_provider_generation": 0,
                        "inventories": {"VCPU": {"total": 4}}})),
        )
        .await;
    assert_eq!(s, 200);
    let ac = |q: &'static str| {
        let app = &app;
        async move {
            app.json(
                Method::GET,
                &format!("/allocation_candidates?{q}"),
                "1.25",
                None,
            )
            .await
        }
    };
    let empty = json!({"allocation_requests": [], "provider_summaries": {}});

    // The first group has no candidates (no DISK_GB anywhere): upstream stops there.
    let (s, v) = ac("resources=DISK_GB:1&resources1=CUSTOM_NOPE:1").await;
    assert_eq!((s, &v), (200, &empty));
    let (s, v) = ac("resources=DISK_GB:1&resources1=VCPU:1&required1=CUSTOM_NOPE").await;
    assert_eq!((s, &v), (200, &empty));
    // Query order decides: the unknown name comes first, so it is looked up.
    let (s, v) = ac("resources1=CUSTOM_NOPE:1&resources=DISK_GB:1").await;
    assert_eq!(s, 400, "{v}");
    assert!(
        detail(&v).contains("No such resource class CUSTOM_NOPE."),
        "{v}"
    );

    // The first group has candidates: the unknown names are a 400.
    let (s, v) = ac("resources=VCPU:1&resources1=CUSTOM_NOPE:1").await;
    assert_eq!(s, 400, "{v}");
    assert!(
        detail(&v).contains(
            "Invalid resource class in resources parameter: No such resource class CUSTOM_NOPE."
        ),
        "{v}"
    );
    let (s, v) = ac("resources=VCPU:1&resources1=VCPU:1&required1=CUSTOM_NOPE").await;
    assert_eq!(s, 400, "{v}");
    assert!(detail(&v).contains("No such trait(s): CUSTOM_NOPE."), "{v}");
    // root_required is resolved for the whole request, before any group.
    let (s, v) = app
        .json(
            Method::GET,
            "/allocation_candidates?resources=DISK_GB:1&root_required=CUSTOM_NOPE",
            "1.35",
            None,
        )
        .await;
    assert_eq!(s, 400, "{v}");
}

#[tokio::test]
async fn provider_update_reports_the_update_time_it_had_before() {
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        let root = app.create_provider("root", None).await;
        let root_uuid = root["uuid"].as_str().unwrap().to_owned();
        let child = app.create_provider("child", Some(&root_uuid)).await;
        let child_uuid = child["uuid"].as_str().unwrap().to_owned();
        let rename = |uuid: String, name: &'static str| {
            let app = &app;
            async move {
                let resp = app
                    .req(Method::PUT, &format!("/resource_providers/{uuid}"), "1.15")
                    .header("content-type", "application/json")
                    .body(json!({ "name": name }).to_string())
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200);
                assert_eq!(resp.headers()["cache-control"], "no-cache");
                resp.headers().contains_key("last-modified")
            }
        };
        // A root is written twice when created (its root id), so it has an update time.
        assert!(rename(root_uuid.clone(), "root2").await);
        // A child has none until its first update, whose answer therefore has no header.
        assert!(!rename(child_uuid.clone(), "child2").await);
        assert!(rename(child_uuid, "child3").await);
    }
}
