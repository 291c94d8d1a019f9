//! The bind `PATCH` refuses a bind that cannot succeed (issue 31 item 3, issue 29's
//! bind point), in the API's error format: a device of another host (400), a device
//! its agent reports unhealthy (409), no attach handle left (404, as upstream's
//! `AttachHandle not found`). The refused ARQ is `BindFailed` with the patch's host
//! and instance, the refusal is counted in `accel_arq_bind_refusals_total` and shown
//! on the console's ARQ page; the other ARQs of the patch are untouched.

use crate::app::{AccelApp, As, Reply};
use accel_core::accelerator::fake_device;
use accel_store::accelerator::report;
use accel_testkit::server::BACKENDS;
use reqwest::Method;
use serde_json::{json, Value};

fn rp_of(host: &str) -> String {
    report::provider_uuid(&format!("{host}_FakeDevice"))
}

/// Nova's bind PATCH of `arqs` to `rp` on `host` for `instance`.
async fn bind(app: &AccelApp, arqs: &[&str], host: &str, rp: &str, instance: &str) -> Reply {
    let body: serde_json::Map<String, Value> = arqs
        .iter()
        .map(|a| {
            (
                (*a).to_owned(),
                json!([
                    {"op": "add", "path": "/hostname", "value": host},
                    {"op": "add", "path": "/device_rp_uuid", "value": rp},
                    {"op": "add", "path": "/instance_uuid", "value": instance},
                ]),
            )
        })
        .collect();
    app.send_json(
        As::Nova("p1"),
        Method::PATCH,
        "/v2/accelerator_requests",
        Value::Object(body),
    )
    .await
}

async fn arq(app: &AccelApp, uuid: &str) -> Value {
    app.get(As::Admin, &format!("/v2/accelerator_requests/{uuid}"))
        .await
        .body
}

/// Reports `host`'s fake device through the store, as its agent would: `handles`
/// attach handles, healthy or not.
async fn report_host(app: &AccelApp, host: &str, handles: usize, healthy: bool) {
    let mut dev = fake_device(host);
    dev.deployables[0].attach_handles.truncate(handles);
    dev.healthy = healthy;
    let host = host.to_owned();
    app.server()
        .store
        .write(move |tx| {
            Box::pin(async move { report::replace_host(tx, &host, &[dev], true).await })
        })
        .await
        .unwrap();
}

fn new_instance() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[tokio::test]
async fn binds_that_cannot_succeed_are_refused_by_the_patch_itself() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        app.create_profile("one", json!([{"resources:FPGA": "1"}]))
            .await;
        app.create_profile("two", json!([{"resources:FPGA": "2"}]))
            .await;

        // A device of another host: the issue's `compute-1` against `compute1`.
        let a = app.create_arqs(As::Nova("p1"), "one").await;
        let a = a[0]["uuid"].as_str().unwrap();
        let inst = new_instance();
        let r = bind(&app, &[a], "compute-1", &rp_of("compute1"), &inst).await;
        assert_eq!(r.status, 400, "{backend:?}: {}", r.body);
        let other_host = r.fault();
        assert!(
            other_host.contains("is a device of host compute1, not of compute-1"),
            "{other_host}"
        );
        let shown = arq(&app, a).await;
        assert_eq!(shown["state"], "BindFailed", "{shown}");
        assert_eq!(shown["hostname"], "compute-1");
        assert_eq!(shown["instance_uuid"], inst.as_str());
        // As upstream: the instance now has ARQs, so a second bind for it is refused.
        let again = app.create_arqs(As::Nova("p1"), "one").await;
        let again = again[0]["uuid"].as_str().unwrap();
        let r = bind(&app, &[again], "compute1", &rp_of("compute1"), &inst).await;
        assert_eq!(r.status, 400);
        assert!(r.fault().contains("already has accelerator requests"));
        // An unknown ARQ before the refused one is named first, and nothing is recorded
        // (upstream's conductor looks each ARQ up, in the body's order, before its bind).
        let known = app.create_arqs(As::Nova("p1"), "one").await;
        let known = known[0]["uuid"].as_str().unwrap();
        let unknown = "00000000-0000-0000-0000-0000000000ab";
        let r = bind(
            &app,
            &[unknown, known],
            "compute-1",
            &rp_of("compute1"),
            &new_instance(),
        )
        .await;
        assert_eq!(r.status, 404, "{backend:?}: {}", r.body);
        assert_eq!(r.fault(), format!("ExtArq not found with uuid={unknown}"));
        assert_eq!(arq(&app, known).await["state"], "Initial");

        // A device its agent reports unhealthy.
        report_host(&app, "compute2", 16, false).await;
        let b = app.create_arqs(As::Nova("p1"), "one").await;
        let b = b[0]["uuid"].as_str().unwrap();
        let r = bind(&app, &[b], "compute2", &rp_of("compute2"), &new_instance()).await;
        assert_eq!(r.status, 409, "{}", r.body);
        assert!(r.fault().contains("is unhealthy"), "{}", r.fault());
        assert_eq!(arq(&app, b).await["state"], "BindFailed");

        // No attach handle left: one handle, two ARQs in one patch. The second is
        // refused, the first left as it was.
        report_host(&app, "compute3", 1, true).await;
        let pair = app.create_arqs(As::Nova("p1"), "two").await;
        let pair: Vec<&str> = pair.iter().map(|a| a["uuid"].as_str().unwrap()).collect();
        let r = bind(&app, &pair, "compute3", &rp_of("compute3"), &new_instance()).await;
        assert_eq!(r.status, 404, "{}", r.body);
        let no_handle = r.fault();
        assert!(
            no_handle.starts_with("AttachHandle not found Matching deployable_id"),
            "{no_handle}"
        );
        assert!(no_handle.contains("no free attach handle"), "{no_handle}");
        let states = [arq(&app, pair[0]).await, arq(&app, pair[1]).await];
        let states: Vec<&str> = states
            .iter()
            .map(|a| a["state"].as_str().unwrap())
            .collect();
        assert!(
            states == ["Initial", "BindFailed"] || states == ["BindFailed", "Initial"],
            "{states:?}"
        );
        // One ARQ takes the handle (202); the next instance's bind finds it promised.
        let c = app.create_arqs(As::Nova("p1"), "one").await;
        let r = bind(
            &app,
            &[c[0]["uuid"].as_str().unwrap()],
            "compute3",
            &rp_of("compute3"),
            &new_instance(),
        )
        .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let d = app.create_arqs(As::Nova("p1"), "one").await;
        let r = bind(
            &app,
            &[d[0]["uuid"].as_str().unwrap()],
            "compute3",
            &rp_of("compute3"),
            &new_instance(),
        )
        .await;
        assert_eq!(r.status, 404, "{}", r.body);

        // Counted by reason.
        let metrics = reqwest::get(format!("{}/metrics", app.server().metrics))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for line in [
            "accel_arq_bind_refusals_total{reason=\"other_host\"} 1",
            "accel_arq_bind_refusals_total{reason=\"unhealthy\"} 1",
            "accel_arq_bind_refusals_total{reason=\"no_free_handle\"} 2",
        ] {
            assert!(metrics.contains(line), "{line} not in\n{metrics}");
        }

        // The console's ARQ page shows the refused ARQ BindFailed, with the reason.
        let html = reqwest::get(format!("{}/arqs?q={inst}", app.server().console))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let row = html
            .split("<tr")
            .find(|r| r.contains(&format!("data-arq=\"{a}\"")))
            .unwrap_or_else(|| panic!("no row for {a} in {html}"));
        assert!(row.contains("data-state=\"BindFailed\""), "{row}");
        assert!(
            row.contains("is a device of host compute1, not of compute-1"),
            "{row}"
        );
    }
}

/// Without Nova: the console's ARQ page says so once, as the deployment's state, and a
/// Bound ARQ whose event was recorded `no_endpoint` shows no failure (issue 31 item 9).
#[tokio::test]
async fn without_nova_the_console_says_so_once_and_not_per_arq() {
    use std::time::Duration;
    let backend = accel_testkit::server::Backend::Sqlite;
    let store = accel_testkit::server::store(backend).await;
    let workers = accel_server::accelerator::binder::WorkerConfig {
        poll_interval: Duration::from_millis(100),
        ..accel_server::accelerator::binder::WorkerConfig::new(None)
    };
    let app = AccelApp::start(
        accel_testkit::server::builder(store)
            .fake_devices(Some("compute1".into()))
            .workers(Some(workers)),
    )
    .await;
    app.create_profile("one", json!([{"resources:FPGA": "1"}]))
        .await;
    let a = app.create_arqs(As::Nova("p1"), "one").await;
    let a = a[0]["uuid"].as_str().unwrap().to_owned();
    let r = bind(&app, &[&a], "compute1", &rp_of("compute1"), &new_instance()).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let (html, row) = accel_testkit::eventually(
        Duration::from_secs(20),
        "the ARQ Bound with its event recorded no_endpoint",
        || async {
            let html = reqwest::get(format!("{}/arqs", app.server().console))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let row = html
                .split("<tr")
                .find(|r| r.contains(&format!("data-arq=\"{a}\"")))
                .unwrap_or_default()
                .to_owned();
            if row.contains("data-state=\"Bound\"") && row.contains("data-event=\"no_endpoint\"") {
                Ok((html, row))
            } else {
                Err(row)
            }
        },
    )
    .await;
    assert_eq!(html.matches("data-test=\"no-nova\"").count(), 1, "{html}");
    assert!(!row.contains("no Nova endpoint configured"), "{row}");
}
