//! The maintenance switch (issue 42), on every backend with two servers on one
//! database: turned on through one server's `PUT /v2/maintenance` at run time, both
//! refuse writes with 503 in their API's own envelope (Placement's `errors`, Cyborg's
//! `error_message`) and serve reads; `/readyz` and the metrics say so; `DELETE` lets
//! writes in again on both. Only an admin turns it.

mod common;

use common::accel::{Server, TempDb};
use common::{eventually, BACKENDS};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

async fn call(
    base: &str,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    let version = match path.starts_with("/v2") {
        true => "accelerator 2.0",
        false => "placement 1.39",
    };
    let mut r = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .header("x-auth-token", token)
        .header("openstack-api-version", version);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    (resp.status(), resp.text().await.unwrap())
}

/// A provider create on `srv`'s Placement: its status and body.
async fn create_provider(srv: &Server, name: &str) -> (StatusCode, String) {
    let body = json!({ "name": name });
    call(
        &srv.placement,
        Method::POST,
        "/resource_providers",
        "admin",
        Some(body),
    )
    .await
}

/// Waits until `srv` answers a provider create with `want` (another replica's switch
/// is seen within the server's freshness window).
async fn until_create_answers(srv: &Server, want: StatusCode) {
    eventually(
        Duration::from_secs(10),
        "the replica to see the switch",
        || async {
            let name = format!("rp-{}", uuid::Uuid::new_v4().simple());
            let (s, text) = create_provider(srv, &name).await;
            (s == want).then_some(()).ok_or(format!("{s}: {text}"))
        },
    )
    .await;
}

#[tokio::test]
async fn writes_stop_and_reads_go_on_on_every_replica_while_the_switch_is_on() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let a = Server::start(&db.url, None, None).await;
        let b = Server::start(&db.url, None, None).await;
        let (s, _) = create_provider(&a, "before").await;
        assert_eq!(s, StatusCode::OK, "{backend:?}");

        // Only an admin turns it; a member is refused by policy.
        let reason = json!({"reason": "cut-over to accel"});
        let (s, text) = call(
            &a.accel,
            Method::PUT,
            "/v2/maintenance",
            "demo:p7",
            Some(reason.clone()),
        )
        .await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{text}");
        let (s, text) = call(
            &a.accel,
            Method::PUT,
            "/v2/maintenance",
            "admin",
            Some(json!({})),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "a reason is required: {text}");
        let (s, text) = call(
            &a.accel,
            Method::PUT,
            "/v2/maintenance",
            "admin",
            Some(reason),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{text}");
        let shown: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (shown["maintenance"].as_bool(), shown["reason"].as_str()),
            (Some(true), Some("cut-over to accel"))
        );

        // Placement: a write refused in its envelope, a read served.
        let (s, text) = create_provider(&a, "during").await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        let detail = e["errors"][0]["detail"].as_str().unwrap_or_default();
        assert_eq!(e["errors"][0]["status"], 503, "{text}");
        assert!(
            detail.contains("writes are stopped (cut-over to accel); reads are served"),
            "{text}"
        );
        let (s, text) = call(
            &a.placement,
            Method::GET,
            "/resource_providers",
            "admin",
            None,
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{text}");
        assert!(text.contains("\"before\""), "{text}");

        // Cyborg: a write refused in its envelope, a read served.
        let profile = json!([{"name": "p", "groups": [{"resources:FPGA": "1"}]}]);
        let (s, text) = call(
            &a.accel,
            Method::POST,
            "/v2/device_profiles",
            "admin",
            Some(profile),
        )
        .await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        let inner = e["error_message"].as_str().unwrap_or_default();
        assert!(
            inner.contains("faultstring") && inner.contains("writes are stopped"),
            "{text}"
        );
        let (s, text) = call(&a.accel, Method::GET, "/v2/device_profiles", "admin", None).await;
        assert_eq!(s, StatusCode::OK, "{text}");

        // The other replica sees the switch from the database.
        until_create_answers(&b, StatusCode::SERVICE_UNAVAILABLE).await;

        // /readyz stays ready and says it; the refusals are counted.
        let ready = reqwest::get(format!("{}/readyz", a.metrics)).await.unwrap();
        assert_eq!(ready.status(), StatusCode::OK);
        let ready = ready.text().await.unwrap();
        assert!(
            ready.contains("[+]maintenance ok: on since ") && ready.contains("(cut-over to accel)"),
            "{ready}"
        );
        let metrics = reqwest::get(format!("{}/metrics", a.metrics))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("accel_maintenance_refused_writes_total{kind=\"placement\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("accel_maintenance_refused_writes_total{kind=\"accelerator\"} 1"),
            "{metrics}"
        );

        // Off, through the other replica: writes in again on both.
        let (s, text) = call(&b.accel, Method::DELETE, "/v2/maintenance", "admin", None).await;
        assert_eq!(s, StatusCode::OK, "{text}");
        let (s, text) = create_provider(&b, "after-b").await;
        assert_eq!(s, StatusCode::OK, "{text}");
        until_create_answers(&a, StatusCode::OK).await;
        let ready = reqwest::get(format!("{}/readyz", a.metrics))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(ready.contains("[+]maintenance ok: off"), "{ready}");
        a.stop().await;
        b.stop().await;
    }
}
