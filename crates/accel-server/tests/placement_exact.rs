//! Placement answers exactly as upstream 16.0.0 does at the edges (checked against the
//! conformance kit's upstream Placement), and no list query reaches a database error:
//! every list route at the largest query string the server accepts.

mod common;
#[path = "common/query.rs"]
mod query;

use accel_server::MAX_QUERY_BYTES;
use common::{TestApp, BACKENDS};
use query::exact_query;
use reqwest::Method;
use serde_json::{json, Value};

const RP: &str = "5b1f4e2a-0000-4000-8000-000000000001";

async fn send(
    app: &TestApp,
    method: Method,
    path: &str,
    mv: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut r = app.req(method, path, mv);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

fn vary(resp: &reqwest::Response) -> Vec<String> {
    resp.headers()
        .get_all("vary")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

/// Errors upstream raises above its handlers (its dispatcher's 404 for an unknown route,
/// a `NotFound` its handler does not catch, a policy refusal) carry the version header
/// but no `Vary`; those its handlers raise carry both.
#[tokio::test]
async fn vary_only_where_upstream_sends_it() {
    let app = TestApp::spawn(common::Backend::Sqlite).await;
    let traits = json!({"traits": [], "resource_provider_generation": 0});
    let without = [
        (
            Method::GET,
            format!("/resource_providers/{RP}"),
            "1.0",
            None,
        ),
        (
            Method::GET,
            format!("/resource_providers/{RP}/aggregates"),
            "1.28",
            None,
        ),
        (
            Method::PUT,
            format!("/resource_providers/{RP}/aggregates"),
            "1.28",
            Some(json!({})),
        ),
        (
            Method::PUT,
            format!("/resource_providers/{RP}"),
            "1.28",
            Some(json!({})),
        ),
        (
            Method::PUT,
            format!("/resource_providers/{RP}/traits"),
            "1.28",
            Some(traits),
        ),
        (
            Method::DELETE,
            format!("/resource_providers/{RP}/traits"),
            "1.28",
            None,
        ),
        (
            Method::POST,
            format!("/resource_providers/{RP}/inventories"),
            "1.28",
            Some(json!({})),
        ),
        (
            Method::PUT,
            format!("/resource_providers/{RP}/inventories"),
            "1.28",
            Some(json!({})),
        ),
        (
            Method::DELETE,
            format!("/resource_providers/{RP}/inventories"),
            "1.28",
            None,
        ),
        (
            Method::GET,
            "/resource_classes/CUSTOM_NOPE".to_owned(),
            "1.7",
            None,
        ),
        (
            Method::DELETE,
            "/resource_classes/CUSTOM_NOPE".to_owned(),
            "1.7",
            None,
        ),
        (Method::GET, "/nope".to_owned(), "1.39", None),
        (
            Method::GET,
            "/resource_providers/x/y/z".to_owned(),
            "1.39",
            None,
        ),
    ];
    for (m, path, mv, body) in without {
        let resp = send(&app, m.clone(), &path, mv, body).await;
        assert_eq!(resp.status(), 404, "{m} {path}");
        assert_eq!(
            resp.headers()["openstack-api-version"],
            format!("placement {mv}").as_str()
        );
        assert!(vary(&resp).is_empty(), "{m} {path}: {:?}", vary(&resp));
    }
    // Accepted bodies reach the write without a lookup first; a missing provider is
    // still the dispatcher's 404, worded as for a refused body.
    let accepted = [
        (
            Method::PUT,
            format!("/resource_providers/{RP}/inventories"),
            json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 1}}}),
        ),
        (
            Method::POST,
            format!("/resource_providers/{RP}/inventories"),
            json!({"resource_class": "VCPU", "total": 1}),
        ),
        (
            Method::PUT,
            format!("/resource_providers/{RP}/inventories/VCPU"),
            json!({"resource_provider_generation": 0, "total": 1}),
        ),
    ];
    for (m, path, body) in accepted {
        let mut details = Vec::new();
        for body in [body, json!({})] {
            let resp = send(&app, m.clone(), &path, "1.28", Some(body)).await;
            assert_eq!(resp.status(), 404, "{m} {path}");
            assert!(vary(&resp).is_empty(), "{m} {path}: {:?}", vary(&resp));
            let v: Value = resp.json().await.unwrap();
            details.push(v["errors"][0]["detail"].clone());
        }
        assert_eq!(details[0], details[1], "{m} {path}");
        let detail = details[0].as_str().unwrap();
        assert!(
            detail.contains(&format!("No resource provider with uuid {RP} found")),
            "{detail}"
        );
    }
    let with = [
        (
            Method::GET,
            format!("/resource_providers/{RP}/inventories"),
            404,
        ),
        (Method::GET, format!("/resource_providers/{RP}/traits"), 404),
        (Method::GET, format!("/resource_providers/{RP}/usages"), 404),
        (
            Method::GET,
            format!("/resource_providers/{RP}/allocations"),
            404,
        ),
        (Method::DELETE, format!("/resource_providers/{RP}"), 404),
        (Method::GET, "/traits/CUSTOM_NOPE".to_owned(), 404),
        (Method::DELETE, "/resource_providers".to_owned(), 405),
        (Method::GET, "/resource_providers?name=x".to_owned(), 200),
    ];
    for (m, path, status) in with {
        let resp = send(&app, m.clone(), &path, "1.39", None).await;
        assert_eq!(resp.status(), status, "{m} {path}");
        assert_eq!(vary(&resp), ["openstack-api-version"], "{m} {path}");
    }
    // A policy refusal (a user, not the admin): no Vary either.
    let url = format!("{}/resource_classes/CUSTOM_Y", app.base);
    let resp = accel_testkit::placement_request(Method::PUT, &url, "user", "1.7")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert!(vary(&resp).is_empty(), "{:?}", vary(&resp));
}

/// A provider without inventories has no time to report: `cache-control` but no
/// `last-modified`. With one, both.
#[tokio::test]
async fn inventories_without_inventory_send_no_last_modified() {
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        let rp = app.create_provider("rp", None).await;
        let uuid = rp["uuid"].as_str().unwrap().to_owned();
        let path = format!("/resource_providers/{uuid}/inventories");
        let resp = send(&app, Method::GET, &path, "1.15", None).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["cache-control"], "no-cache");
        assert!(resp.headers().get("last-modified").is_none());
        let body = json!({"resource_provider_generation": 0, "inventories": {}});
        let resp = send(&app, Method::PUT, &path, "1.15", Some(body)).await;
        assert_eq!(resp.status(), 200);
        assert!(resp.headers().get("last-modified").is_none());

        let body =
            json!({"resource_provider_generation": 1, "inventories": {"VCPU": {"total": 4}}});
        let resp = send(&app, Method::PUT, &path, "1.15", Some(body)).await;
        assert_eq!(resp.status(), 200);
        let resp = send(&app, Method::GET, &path, "1.15", None).await;
        assert!(resp.headers().get("last-modified").is_some());
        assert_eq!(resp.headers()["cache-control"], "no-cache");
        // Before 1.15 neither.
        let resp = send(&app, Method::GET, &path, "1.14", None).await;
        assert!(resp.headers().get("cache-control").is_none());
    }
}

/// `PUT .../inventories/{class}` of a class that does not exist is upstream's 404 "No
/// such resource class" (raised by its object layer, so without `Vary`), after the
/// capacity check and whatever the other amounts say.
#[tokio::test]
async fn update_of_an_unknown_class_is_404() {
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        let rp = app.create_provider("rp", None).await;
        let uuid = rp["uuid"].as_str().unwrap().to_owned();
        let path = format!("/resource_providers/{uuid}/inventories/CUSTOM_NOPE");
        let body =
            json!({"resource_provider_generation": 0, "total": 4, "min_unit": 5, "max_unit": 2});
        let resp = send(&app, Method::PUT, &path, "1.39", Some(body)).await;
        assert_eq!(resp.status(), 404);
        assert!(vary(&resp).is_empty());
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            v["errors"][0]["detail"],
            "The resource could not be found.\n\n No such resource class CUSTOM_NOPE.  "
        );
        // Capacity is checked before the class is looked up, as upstream does.
        let body = json!({"resource_provider_generation": 0, "total": 4, "reserved": 5});
        let (s, v) = app.json(Method::PUT, &path, "1.39", Some(body)).await;
        assert_eq!(s, 400);
        assert!(v["errors"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("Unable to update inventory for resource provider"));
        let body = json!({"resource_class": "CUSTOM_NOPE", "total": 4, "reserved": 5});
        let (s, v) = app
            .json(
                Method::POST,
                &format!("/resource_providers/{uuid}/inventories"),
                "1.39",
                Some(body),
            )
            .await;
        assert_eq!(s, 400);
        assert!(v["errors"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("The reserved value is greater than total."));
        // A known class the provider lacks is still the 400 it was.
        let body = json!({"resource_provider_generation": 0, "total": 4});
        let (s, v) = app
            .json(
                Method::PUT,
                &format!("/resource_providers/{uuid}/inventories/VCPU"),
                "1.39",
                Some(body),
            )
            .await;
        assert_eq!(s, 400);
        assert!(v["errors"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("No inventory of class VCPU found."));
    }
}

/// Microversion errors pick HTML, JSON or plain text from `Accept` by quality, like
/// every other error; a 406 names the `Accept` it could not satisfy.
#[tokio::test]
async fn version_errors_negotiate_like_other_errors() {
    let app = TestApp::spawn(common::Backend::Sqlite).await;
    let get = |accept: Option<&'static str>, version: &'static str| {
        let mut r = app
            .client
            .get(format!("{}/resource_providers", app.base))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", version);
        if let Some(a) = accept {
            r = r.header("accept", a);
        }
        r.send()
    };
    let ctype = |r: &reqwest::Response| r.headers()["content-type"].to_str().unwrap().to_owned();
    for version in ["placement 1.a", "placement 9.0"] {
        for (accept, want) in [
            (None, "application/json"),
            (Some("*/*"), "application/json"),
            (
                Some("application/json;q=0.9, text/html;q=0.1"),
                "application/json",
            ),
            (Some("text/html"), "text/html; charset=UTF-8"),
            (
                Some("text/html;q=0.5, application/json;q=0.5"),
                "text/html; charset=UTF-8",
            ),
            (Some("text/plain"), "text/plain; charset=UTF-8"),
        ] {
            let resp = get(accept, version).await.unwrap();
            assert_eq!(ctype(&resp), want, "{accept:?} {version}");
            assert!(resp.headers().get("vary").is_none());
        }
    }
    let resp = get(
        Some("application/json;q=0.9, text/html;q=0.1"),
        "placement 9.0",
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 406);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v["errors"][0]["detail"],
        "The resource could not be generated that was acceptable to your browser (content of type application/json;q=0.9, text/html;q=0.1. \n\n Invalid microversion: Unacceptable version header: 9.0"
    );
    assert_eq!(v["errors"][0]["max_version"], "1.39");
    let html = get(Some("text/html"), "placement 9.0")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        html,
        "<html>\n <head>\n  <title>406 Not Acceptable</title>\n </head>\n <body>\n  <h1>406 Not Acceptable</h1>\n  The resource could not be generated that was acceptable to your browser\n(content of type text/html. <br /><br />\nInvalid microversion: Unacceptable version header: 9.0\n </body>\n</html>"
    );
    let plain = get(Some("text/plain"), "placement 9.0")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        plain,
        "406 Not Acceptable\n\nThe resource could not be generated that was acceptable to your browser (content of type text/plain. \n\n Invalid microversion: Unacceptable version header: 9.0"
    );
}

/// `limit` keeps, in `provider_summaries`, every provider of the unlimited answer's
/// summaries whose root is a kept candidate's root. Below 1.29 the summaries are the
/// providers some candidate uses, so a device of a kept tree that only a dropped
/// candidate used stays.
#[tokio::test]
async fn limited_summaries_filter_by_root() {
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        let mut roots = Vec::new();
        for i in 0..3 {
            let cn = app.create_provider(&format!("cn{i}"), None).await;
            let cn_uuid = cn["uuid"].as_str().unwrap().to_owned();
            put_inventory(&app, &cn_uuid, json!({"VCPU": {"total": 8}})).await;
            let mut devs = Vec::new();
            for j in 0..2 {
                let dev = app
                    .create_provider(&format!("cn{i}_dev{j}"), Some(&cn_uuid))
                    .await;
                let uuid = dev["uuid"].as_str().unwrap().to_owned();
                put_inventory(&app, &uuid, json!({"FPGA": {"total": 1}})).await;
                devs.push(uuid);
            }
            roots.push((cn_uuid, devs));
        }
        // 1.28: one provider per tree, so each candidate is one device alone.
        let (s, all) = app
            .json(
                Method::GET,
                "/allocation_candidates?resources=FPGA:1",
                "1.28",
                None,
            )
            .await;
        assert_eq!(s, 200);
        assert_eq!(all["allocation_requests"].as_array().unwrap().len(), 6);
        let (s, one) = app
            .json(
                Method::GET,
                "/allocation_candidates?resources=FPGA:1&limit=1",
                "1.28",
                None,
            )
            .await;
        assert_eq!(s, 200);
        let reqs = one["allocation_requests"].as_array().unwrap();
        assert_eq!(reqs.len(), 1);
        let used: Vec<&String> = reqs[0]["allocations"].as_object().unwrap().keys().collect();
        let (_, devs) = roots
            .iter()
            .find(|(_, devs)| devs.contains(used[0]))
            .expect("a device");
        let mut summarised: Vec<&String> = one["provider_summaries"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        summarised.sort();
        let mut want: Vec<&String> = devs.iter().collect();
        want.sort();
        assert_eq!(summarised, want, "both devices of the kept tree");
        // 1.29 on: whole trees of the kept roots.
        let (_, nested) = app
            .json(
                Method::GET,
                "/allocation_candidates?resources=FPGA:1&limit=1",
                "1.29",
                None,
            )
            .await;
        assert_eq!(nested["provider_summaries"].as_object().unwrap().len(), 3);
    }
}

async fn put_inventory(app: &TestApp, uuid: &str, inventories: Value) {
    let path = format!("/resource_providers/{uuid}/inventories");
    let (_, rp) = app
        .json(
            Method::GET,
            &format!("/resource_providers/{uuid}"),
            "1.39",
            None,
        )
        .await;
    let body =
        json!({"resource_provider_generation": rp["generation"], "inventories": inventories});
    let (s, v) = app.json(Method::PUT, &path, "1.39", Some(body)).await;
    assert_eq!(s, 200, "{v}");
}

/// Every Placement list route at the largest query string the server accepts: never a
/// 5xx (filter lists do not reach the database's limits), and one byte more is a 400 in
/// Placement's format.
#[tokio::test]
async fn list_routes_at_the_query_limit() {
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        let traits: Vec<String> = (0..40).map(|i| format!("CUSTOM_T{i:02}")).collect();
        for t in &traits {
            let r = send(&app, Method::PUT, &format!("/traits/{t}"), "1.39", None).await;
            assert_eq!(r.status(), 201);
        }
        let rp = app.create_provider("rp", None).await;
        let uuid = rp["uuid"].as_str().unwrap().to_owned();
        put_inventory(&app, &uuid, json!({"VCPU": {"total": 8}})).await;
        let body = json!({"resource_provider_generation": 1, "traits": traits[..39]});
        let (s, v) = app
            .json(
                Method::PUT,
                &format!("/resource_providers/{uuid}/traits"),
                "1.39",
                Some(body),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        // Distinct any-of groups: one condition each, hundreds of them.
        let groups = || {
            (0..39).flat_map(move |a| {
                (a + 1..39).map(move |b| format!("required=in:CUSTOM_T{a:02},CUSTOM_T{b:02}"))
            })
        };
        let agg = |i: usize| format!("member_of=in:{i:08X}-ABCD-4ABC-8ABC-ABCDEF000000");
        let mut routes: Vec<(String, String, Option<u16>)> = vec![
            (
                "/resource_providers".into(),
                exact_query(groups(), "required=!CUSTOM_T39", MAX_QUERY_BYTES),
                Some(200),
            ),
            (
                "/resource_providers".into(),
                exact_query((0..).map(agg), "name=rp00000", MAX_QUERY_BYTES),
                Some(200),
            ),
            (
                "/allocation_candidates".into(),
                exact_query(
                    std::iter::once("resources=VCPU:1".to_owned()).chain(groups()),
                    "required=!CUSTOM_T39",
                    MAX_QUERY_BYTES,
                ),
                Some(200),
            ),
            (
                "/traits".into(),
                format!(
                    "name=in:{}",
                    exact_query(
                        std::iter::repeat("CUSTOM_T01".to_owned()),
                        "CUSTOM_T02",
                        MAX_QUERY_BYTES - 8
                    )
                    .replace('&', ",")
                ),
                Some(200),
            ),
            (
                "/usages".into(),
                exact_query(
                    (0..).map(|i| format!("project_id=P{i}")),
                    "user_id=U0",
                    MAX_QUERY_BYTES,
                ),
                Some(200),
            ),
        ];
        // Routes that take none of these parameters: whatever they answer under the limit
        // (not a 500), one byte over it is a 400.
        let unknown = exact_query((0..).map(|i| format!("x=X{i}")), "yyy=Y0", MAX_QUERY_BYTES);
        routes.push(("/resource_classes".into(), unknown.clone(), None));
        for sub in [
            "allocations",
            "inventories",
            "traits",
            "aggregates",
            "usages",
        ] {
            let path = format!("/resource_providers/{uuid}/{sub}");
            routes.push((path, unknown.clone(), None));
        }
        for (path, q, status) in routes {
            assert_eq!(q.len(), MAX_QUERY_BYTES);
            let resp = send(&app, Method::GET, &format!("{path}?{q}"), "1.39", None).await;
            let got = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            assert!(got < 500, "{path}: {got} {text}");
            if let Some(status) = status {
                assert_eq!(got, status, "{path}: {text}");
            }
            let over = send(&app, Method::GET, &format!("{path}?{q}0"), "1.39", None).await;
            assert_eq!(over.status(), 400, "{path}");
            let v: Value = over.json().await.unwrap();
            assert!(
                v["errors"][0]["detail"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("at most {MAX_QUERY_BYTES} are accepted")),
                "{v}"
            );
        }
        // The group query found the provider: the filters held, not just parsed.
        let q = exact_query(groups(), "required=!CUSTOM_T39", MAX_QUERY_BYTES);
        let (_, v) = app
            .json(
                Method::GET,
                &format!("/resource_providers?{q}"),
                "1.39",
                None,
            )
            .await;
        assert_eq!(v["resource_providers"].as_array().unwrap().len(), 1, "{v}");
    }
}
