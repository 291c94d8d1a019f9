//! Root providers created together (`placement::creates`): a combined transaction
//! answers each request as it would have been answered alone, a refused one falls back
//! to one by one, and concurrent creates over HTTP keep every name's one winner.

mod common;

use accel_server::metrics::OutcomeLabel;
use accel_server::placement::creates::create_together;
use accel_store::placement::Refused;
use accel_store::StoreError;
use common::{TestApp, BACKENDS};
use reqwest::Method;
use serde_json::{json, Value};

fn fresh(name: &str) -> (String, String) {
    (uuid::Uuid::new_v4().to_string(), name.to_owned())
}

fn combined(app: &TestApp, outcome: &'static str) -> u64 {
    app.state
        .metrics
        .combined_creates
        .get_or_create(&OutcomeLabel { outcome })
        .get()
}

async fn listing(app: &TestApp) -> Vec<Value> {
    let (s, v) = app
        .json(Method::GET, "/resource_providers", "1.39", None)
        .await;
    assert_eq!(s, 200, "{v}");
    v["resource_providers"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_combined_create_answers_each_request_as_alone() {
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        let new = vec![fresh("a"), fresh("b"), fresh("c")];
        let got = create_together(&app.state, new.clone()).await;
        assert_eq!(combined(&app, "committed"), 1, "{backend:?}");
        for ((uuid, name), rp) in new.iter().zip(&got) {
            let rp = rp.as_ref().unwrap();
            assert_eq!((&rp.uuid, &rp.name, rp.generation), (uuid, name, 0));
            // What the database holds is what was answered (root of itself, no parent).
            let stored = app
                .state
                .store
                .providers()
                .get(uuid)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&stored, rp);
            assert_eq!(stored.root_uuid, *uuid);
        }
        // The index saw the whole transaction (the listing is answered from it), and
        // a single create next to them looks the same.
        app.create_provider("d", None).await;
        let all = listing(&app).await;
        let names: Vec<&str> = all.iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        for p in &all {
            assert_eq!(p["root_provider_uuid"], p["uuid"]);
            assert_eq!(p["parent_provider_uuid"], Value::Null);
        }

        // A taken name, and a name twice in one batch: refused together, then each
        // answered alone (the first "e" wins).
        let new = vec![fresh("e"), fresh("a"), fresh("e")];
        let got = create_together(&app.state, new).await;
        assert_eq!(combined(&app, "retried_alone"), 1);
        assert!(got[0].is_ok(), "{:?}", got[0]);
        for refused in &got[1..] {
            assert!(
                matches!(
                    refused,
                    Err(StoreError::Refused(accel_store::Refused::Placement(
                        Refused::ProviderExists { .. }
                    )))
                ),
                "{refused:?}"
            );
        }
        assert_eq!(listing(&app).await.len(), 5);
    }
}

#[tokio::test]
async fn concurrent_creates_over_http_keep_one_winner_per_name() {
    // The server's log, shown with an answer no create may give.
    let (logs, _guard) = accel_testkit::Logs::capture();
    for backend in BACKENDS {
        let app = TestApp::spawn(backend).await;
        // 32 requests at once for 16 names: every name twice.
        let mut tasks = Vec::new();
        for i in 0..32 {
            let (base, client) = (app.base.clone(), app.client.clone());
            tasks.push(tokio::spawn(async move {
                let r = client
                    .post(format!("{base}/resource_providers"))
                    .header("x-auth-token", "admin")
                    .header("openstack-api-version", "placement 1.39")
                    .json(&json!({"name": format!("cn{}", i % 16)}))
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap())
            }));
        }
        let mut created = 0;
        for t in tasks {
            let (status, body) = t.await.unwrap();
            match status {
                200 => created += 1,
                409 => {
                    let detail = body["errors"][0]["detail"].as_str().unwrap();
                    assert!(
                        detail.contains("Conflicting resource provider name: cn"),
                        "{detail}"
                    );
                }
                other => panic!("{backend:?}: {other}: {body}\n{}", logs.text()),
            }
        }
        assert_eq!(created, 16, "{backend:?}");
        assert_eq!(listing(&app).await.len(), 16);
    }
}
