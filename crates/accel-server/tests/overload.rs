//! Admission under overload (`accel_server::admission`, issue 46 item 3): a class with
//! no place free answers 503 with `Retry-After` in its API's own envelope, at once,
//! while other classes are still served; agents' requests yield to a boot's waiting
//! request; a waiting request gets the place freed; the shed counter and the log line
//! move. The places are taken by the test itself through the server's own admission
//! (an explicit gate), so nothing depends on timing.

use accel_server::admission::{Class, Limits};
use accel_server::ServerConfig;
use accel_testkit::server::{builder, store, Backend, TestServer};
use accel_testkit::{eventually, placement_request, Logs};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

async fn server(limits: Limits) -> TestServer {
    TestServer::start(builder(store(Backend::Sqlite).await).config(ServerConfig {
        allocation_conflict_retry_count: 10,
        max_allocation_candidates: 1000,
        admission: limits,
        ..Default::default()
    }))
    .await
}

async fn scrape(s: &TestServer) -> String {
    reqwest::get(format!("{}/metrics", s.metrics))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn accel(method: Method, url: String) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .request(method, url)
        .header("x-auth-token", "admin")
        .header("x-roles", "admin,member,reader")
        .header("x-project-id", "p1")
        .header("x-service-roles", "service")
}

/// One test, two servers one after the other: the overload line is checked in the
/// captured log, and `tracing` decides once per call site whether it is wanted, so
/// no other test thread of this binary may reach that line first.
#[tokio::test]
async fn shedding_under_explicit_gates() {
    let (logs, _guard) = Logs::capture();
    a_full_class_is_503_with_retry_after_in_each_apis_envelope_and_others_are_served(&logs).await;
    agents_yield_to_a_waiting_boot_and_the_waiting_request_gets_the_place().await;
}

async fn a_full_class_is_503_with_retry_after_in_each_apis_envelope_and_others_are_served(
    logs: &Logs,
) {
    let s = server(Limits {
        candidates: 1,
        binds: 1,
        wait: Duration::ZERO,
        retry_after_secs: 2,
        ..Limits::default()
    })
    .await;
    let candidates = format!("{}/allocation_candidates?resources=VCPU:1", s.placement);
    let ok = placement_request(Method::GET, &candidates, "admin", "1.36")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200, "a free place serves the request");

    let held = s.state.admission.admit(Class::Candidates).await.unwrap();
    let r = placement_request(Method::GET, &candidates, "admin", "1.36")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "2");
    assert_eq!(r.headers()["openstack-api-version"], "placement 1.36");
    let body: Value = r.json().await.unwrap();
    let e = &body["errors"][0];
    assert_eq!(e["status"], 503, "{body}");
    assert_eq!(e["title"], "Service Unavailable", "{body}");
    assert!(
        e["detail"].as_str().unwrap().contains("Retry after 2 s"),
        "{body}"
    );
    assert!(e["request_id"].as_str().unwrap().starts_with("req-"));
    // Another class of the same API, and the other API, are still served.
    let providers = format!("{}/resource_providers", s.placement);
    let r = placement_request(Method::GET, &providers, "admin", "1.36")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(held);
    let r = placement_request(Method::GET, &candidates, "admin", "1.36")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the place freed serves again");

    // Cyborg's envelope for a bind refused; reads of the accelerator API go on.
    let bind = s.state.admission.admit(Class::Binds).await.unwrap();
    let patch = json!({"00000000-0000-0000-0000-000000000001": [
        {"path": "/hostname", "op": "add", "value": "h1"}]});
    let r = accel(
        Method::PATCH,
        format!("{}/v2/accelerator_requests", s.accel),
    )
    .json(&patch)
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "2");
    let body: Value = r.json().await.unwrap();
    let inner: Value = serde_json::from_str(body["error_message"].as_str().unwrap()).unwrap();
    assert!(
        inner["faultstring"]
            .as_str()
            .unwrap()
            .contains("binds requests are being served"),
        "{body}"
    );
    let r = accel(Method::GET, format!("{}/v2/device_profiles", s.accel))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let text = scrape(&s).await;
    for line in [
        "accel_http_shed_total{api=\"placement\",class=\"candidates\"} 1",
        "accel_http_shed_total{api=\"accelerator\",class=\"binds\"} 1",
        "accel_http_admission_in_flight{class=\"binds\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    let log = logs.text();
    assert!(
        log.contains("requests answered 503 (overload)") && log.contains("class=\"candidates\""),
        "{log}"
    );
    drop(bind);
    s.stop().await;
}

async fn agents_yield_to_a_waiting_boot_and_the_waiting_request_gets_the_place() {
    let s = server(Limits {
        writes: 1,
        agents: 4,
        wait: Duration::from_secs(600),
        ..Limits::default()
    })
    .await;
    let report = accel(
        Method::GET,
        format!("{}/v2/agent/hosts/h1/programs", s.accel),
    );
    let r = report.try_clone().unwrap().send().await.unwrap();
    assert_ne!(r.status(), 503, "agents are served while no boot waits");

    let held = s.state.admission.admit(Class::Writes).await.unwrap();
    let url = format!("{}/resource_providers", s.placement);
    let create = tokio::spawn(
        placement_request(Method::POST, &url, "admin", "1.20")
            .json(&json!({"name": "waiting"}))
            .send(),
    );
    let admission = &s.state.admission;
    eventually(Duration::from_secs(10), "the create waiting", || {
        let waiting = admission.waiting(Class::Writes);
        async move { (waiting == 1).then_some(()) }
    })
    .await;
    let r = report.try_clone().unwrap().send().await.unwrap();
    assert_eq!(r.status(), 503, "an agent yields while a write waits");
    assert_eq!(r.headers()["retry-after"], "1");
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error_message"]
            .as_str()
            .unwrap()
            .contains("agent requests wait"),
        "{body}"
    );
    drop(held);
    let created = create.await.unwrap().unwrap();
    assert_eq!(created.status(), 200, "the waiting create got the place");
    let text = scrape(&s).await;
    assert!(
        text.contains("accel_http_shed_total{api=\"accelerator\",class=\"agents\"} 1"),
        "{text}"
    );
    s.stop().await;
}
