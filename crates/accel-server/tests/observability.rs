//! What an operator watches: real traffic (providers, candidates, claims, ARQs bound
//! through the fake devices, an agent report) moves the server's Prometheus families
//! as it says, the exposition passes `promtool check metrics`, `/healthcheck`,
//! `/livez` and `/readyz` answer, every request writes one `accel::access` line; and
//! a PostgreSQL the server loses and gets back turns the health checks 503 and back to
//! 200 without a restart.

mod common;

use accel_agent::config::Settings;
use accel_agent::testing::{self, FakeSysfs};
use accel_agent::Agent;
use accel_testkit::postgres::PrivatePostgres;
use accel_testkit::Logs;
use common::accel::{placement, workers, FakeNova, Server, TempDb};
use common::BACKENDS;
use serde_json::{json, Value};

use std::time::Duration;

/// The sum of every sample of `name` whose labels include all of `labels`
/// (`k="v"` pairs); 0 when there is none.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = match series.split_once('{') {
                Some((n, r)) => (n, r.trim_end_matches('}')),
                None => (series, ""),
            };
            (n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.split(',').any(|p| p == format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

async fn scrape(srv: &Server) -> String {
    let r = reqwest::get(format!("{}/metrics", srv.metrics))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    r.text().await.unwrap()
}

/// `promtool check metrics` on `text`, or a printed reason when promtool is absent.
fn promtool_check(text: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            println!(
                "SKIPPED promtool check metrics: promtool not found ({e}); install Debian's \
                 prometheus package"
            );
            return;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4
}

#[tokio::test]
async fn traffic_moves_the_metrics_and_promtool_accepts_them() {
    let (logs, _guard) = Logs::capture();
    for backend in BACKENDS {
        let nova = FakeNova::start(true).await;
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, Some("cn1"), Some(workers(Some(&nova)))).await;
        let http = reqwest::Client::new();
        let before = scrape(&srv).await;
        assert_eq!(
            sample(
                &before,
                "accel_build_info",
                &[("version", env!("CARGO_PKG_VERSION"))]
            ),
            1.0,
            "{before}"
        );

        // Placement: a provider with inventory, candidates, claims.
        let (s, rp) = placement(
            &srv,
            reqwest::Method::POST,
            "/resource_providers",
            Some(json!({"name": "obs-rp"})),
        )
        .await;
        assert_eq!(s, 200, "{rp}");
        let rp_uuid = rp["uuid"].as_str().unwrap().to_owned();
        let (s, v) = placement(
            &srv,
            reqwest::Method::PUT,
            &format!("/resource_providers/{rp_uuid}/inventories"),
            Some(json!({"resource_provider_generation": 0,
                        "inventories": {"VCPU": {"total": 4}}})),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, v) = placement(
            &srv,
            reqwest::Method::GET,
            "/allocation_candidates?resources=VCPU:2",
            None,
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let returned = v["allocation_requests"].as_array().unwrap().len();
        assert_eq!(returned, 1, "{v}");
        let consumer = uuid::Uuid::new_v4().to_string();
        let claim = |n: i64, generation: Value| {
            json!({"allocations": {rp_uuid.clone(): {"resources": {"VCPU": n}}},
                   "project_id": "p", "user_id": "u", "consumer_generation": generation,
                   "consumer_type": "INSTANCE"})
        };
        let path = format!("/allocations/{consumer}");
        let (s, v) = placement(
            &srv,
            reqwest::Method::PUT,
            &path,
            Some(claim(2, Value::Null)),
        )
        .await;
        assert_eq!(s, 204, "{v}");
        let (s, v) = placement(&srv, reqwest::Method::PUT, &path, Some(claim(9, json!(1)))).await;
        assert_eq!(s, 409, "over capacity: {v}");
        let (s, v) = placement(&srv, reqwest::Method::PUT, &path, Some(claim(1, json!(7)))).await;
        assert_eq!(s, 409, "stale consumer generation: {v}");

        // A caller's global request id reaches the access log.
        let r = http
            .get(format!("{}/resource_providers/{rp_uuid}", srv.placement))
            .header("x-auth-token", "admin")
            .header("x-openstack-request-id", "req-global-obs-1")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);

        // ARQs bound through the fake devices, the Nova event delivered.
        srv.create_profile(
            "obs-fpgas",
            json!([{"resources:FPGA": "2", "trait:CUSTOM_FAKE_DEVICE": "required"}]),
        )
        .await;
        let arqs = srv.create_arqs("obs-fpgas").await;
        let inst = uuid::Uuid::new_v4().to_string();
        let fake_rp = accel_store::accelerator::report::provider_uuid("cn1_FakeDevice");
        srv.bind(&arqs, "cn1", &fake_rp, &inst).await;
        srv.wait_resolved(&inst).await;
        nova.wait_for("two events", |n| n.events().len() == 2).await;

        // An agent report of a host with one QAT card.
        let (s, v) = placement(
            &srv,
            reqwest::Method::POST,
            "/resource_providers",
            Some(json!({"name": "cn2"})),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let dir = tempfile::tempdir().unwrap();
        let fs = FakeSysfs::new(dir.path());
        testing::qat(&fs, 0x3d, 4);
        let agent = Agent::new(Settings::new(&srv.accel, "cn2", dir.path())).unwrap();
        agent.step().await.unwrap();

        // What the metrics say now (the event's outcome may land just after the
        // fake Nova recorded it).
        let text = common::eventually(Duration::from_secs(20), "the delivery counted", || async {
            let t = scrape(&srv).await;
            (sample(&t, "accel_nova_events_total", &[("outcome", "delivered")]) >= 1.0).then_some(t)
        })
        .await;
        let d = |name: &str, labels: &[(&str, &str)]| {
            sample(&text, name, labels) - sample(&before, name, labels)
        };
        let req = "accel_http_requests_total";
        assert_eq!(
            d(
                req,
                &[
                    ("api", "placement"),
                    ("method", "POST"),
                    ("route", "/resource_providers"),
                    ("status", "200")
                ]
            ),
            2.0,
            "{text}"
        );
        assert_eq!(
            d(
                req,
                &[
                    ("api", "placement"),
                    ("method", "PUT"),
                    ("route", "/allocations/{consumer_uuid}"),
                    ("status", "409")
                ]
            ),
            2.0
        );
        assert_eq!(
            d(
                req,
                &[
                    ("api", "placement"),
                    ("route", "/resource_providers/{uuid}/inventories")
                ]
            ),
            1.0
        );
        assert!(
            d(
                req,
                &[
                    ("api", "accelerator"),
                    ("method", "PATCH"),
                    ("route", "/v2/accelerator_requests"),
                    ("status", "202")
                ]
            ) == 1.0
        );
        assert!(
            d(
                req,
                &[
                    ("api", "accelerator"),
                    ("method", "PUT"),
                    ("route", "/v2/agent/hosts/{hostname}/devices")
                ]
            ) >= 1.0,
            "{text}"
        );
        assert!(
            d(
                "accel_http_request_duration_seconds_count",
                &[("api", "placement"), ("route", "/allocation_candidates")]
            ) == 1.0
        );
        // No uuid, host name or raw path is a label value.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let labels = l.split_once('{').map_or("", |(_, r)| r);
            for part in labels.split('"') {
                assert!(!uuid_like(part) && part != "cn1" && part != "cn2", "{l}");
            }
        }

        assert_eq!(
            d("accel_allocation_candidates_duration_seconds_count", &[]),
            1.0
        );
        assert_eq!(
            d("accel_allocation_candidates_returned_sum", &[]),
            returned as f64
        );
        assert!(d("accel_allocation_candidates_anchors_searched_total", &[]) >= 1.0);
        assert!(
            d("accel_allocation_candidates_option_checks_total", &[]) >= 1.0,
            "{text}"
        );
        assert!(
            sample(
                &text,
                "accel_placement_index_refreshes_total",
                &[("kind", "full")]
            ) >= 1.0
        );
        let (_, all) = placement(&srv, reqwest::Method::GET, "/resource_providers", None).await;
        assert_eq!(
            sample(&text, "accel_placement_providers", &[]),
            all["resource_providers"].as_array().unwrap().len() as f64
        );
        let claims = "accel_allocation_claims_total";
        assert_eq!(d(claims, &[("outcome", "committed")]), 1.0, "{text}");
        assert_eq!(d(claims, &[("outcome", "capacity_refused")]), 1.0);
        assert_eq!(d(claims, &[("outcome", "generation_conflict")]), 1.0);

        assert_eq!(
            sample(&text, "accel_arqs", &[("state", "Bound")]),
            2.0,
            "{text}"
        );
        assert_eq!(
            d(
                "accel_arq_bind_duration_seconds_count",
                &[("outcome", "bound")]
            ),
            2.0
        );
        assert_eq!(
            d("accel_nova_events_total", &[("outcome", "delivered")]),
            1.0
        );
        assert_eq!(sample(&text, "accel_nova_events_pending", &[]), 0.0);
        assert!(
            d(
                "accel_outgoing_requests_total",
                &[("service", "nova"), ("outcome", "success")]
            ) >= 1.0
        );
        assert_eq!(sample(&text, "accel_db_up", &[]), 1.0);
        assert!(
            text.contains("accel_db_pool_connections{pool=\"write\",state=\"in_use\"}"),
            "{text}"
        );
        assert!(sample(&text, "process_open_fds", &[]) > 0.0);
        assert!(sample(&text, "process_resident_memory_bytes", &[]) > 0.0);
        promtool_check(&text);

        // OpenMetrics when asked for.
        let r = http
            .get(format!("{}/metrics", srv.metrics))
            .header("accept", "application/openmetrics-text; version=1.0.0")
            .send()
            .await
            .unwrap();
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"));
        let om = r.text().await.unwrap();
        assert!(om.ends_with("# EOF\n") && om.contains("# TYPE accel_allocation_claims counter"));

        // Health on both API ports, without a token, and the probes.
        for base in [&srv.placement, &srv.accel] {
            let r = http
                .get(format!("{base}/healthcheck"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.headers()["content-type"], "text/plain; charset=UTF-8");
            assert_eq!(r.text().await.unwrap(), "OK");
            let r = http
                .head(format!("{base}/healthcheck"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 204);
        }
        let r = http
            .get(format!("{}/healthcheck", srv.placement))
            .header("accept", "application/json")
            .send()
            .await
            .unwrap();
        let doc: Value = r.json().await.unwrap();
        assert_eq!(doc, json!({"detailed": false, "reasons": ["OK"]}));
        let r = reqwest::get(format!("{}/livez", srv.metrics))
            .await
            .unwrap();
        assert_eq!(
            (r.status().as_u16(), r.text().await.unwrap()),
            (200, "ok".to_owned())
        );
        let r = reqwest::get(format!("{}/readyz", srv.metrics))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body = r.text().await.unwrap();
        assert!(
            body.contains("[+]database ok") && body.contains("[+]workers ok"),
            "{body}"
        );
        let after = scrape(&srv).await;
        assert!(
            sample(
                &after,
                req,
                &[
                    ("api", "accelerator"),
                    ("route", "/healthcheck"),
                    ("status", "200")
                ]
            ) >= 1.0
        );
        srv.stop().await;
    }

    let text = logs.text();
    let line = text
        .lines()
        .find(|l| l.contains("accel::access") && l.contains("req-global-obs-1"))
        .unwrap_or_else(|| panic!("no access line with the global request id:\n{text}"));
    for field in [
        "api=\"placement\"",
        "method=\"GET\"",
        "path=/resource_providers/",
        "status=200",
        "bytes=",
        "duration_ms=",
        "request_id=\"req-",
        "user=admin",
        "project=admin",
    ] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
    assert!(
        text.lines().any(|l| l.contains("accel::outgoing")
            && l.contains("service=\"nova\"")
            && l.contains("status=200")),
        "the delivered Nova event is logged: {text}"
    );
}

async fn status_and_body(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test]
async fn losing_the_database_turns_health_503_and_back_without_a_restart() {
    let Some(pg) = PrivatePostgres::init().await else {
        println!(
            "SKIPPED: no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql"
        );
        return;
    };
    pg.start().await;
    let srv = Server::start(&pg.url("postgres"), None, Some(workers(None))).await;
    let health = format!("{}/healthcheck", srv.placement);
    let ready = format!("{}/readyz", srv.metrics);
    assert_eq!(status_and_body(&health).await, (200, "OK".to_owned()));
    assert_eq!(status_and_body(&ready).await.0, 200);

    pg.stop("fast").await;
    let body = common::eventually(
        Duration::from_secs(30),
        "healthcheck to turn 503",
        || async {
            let (s, b) = status_and_body(&health).await;
            (s == 503).then_some(b)
        },
    )
    .await;
    assert!(body.contains("database unreachable"), "{body}");
    let (s, body) = status_and_body(&ready).await;
    assert_eq!(s, 503, "{body}");
    assert!(
        body.contains("[-]database failed: database unreachable"),
        "{body}"
    );
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    let (s, body) = status_and_body(&format!("{}/healthcheck", srv.accel)).await;
    assert_eq!(s, 503, "{body}");
    assert!(
        !body.contains("Connection refused") && !body.contains("error"),
        "no driver message: {body}"
    );

    pg.start().await;
    common::eventually(
        Duration::from_secs(30),
        "healthcheck back to 200",
        || async { (status_and_body(&health).await == (200, "OK".to_owned())).then_some(()) },
    )
    .await;
    let (s, body) = status_and_body(&ready).await;
    assert_eq!(s, 200, "{body}");
    let (s, v) = placement(
        &srv,
        reqwest::Method::POST,
        "/resource_providers",
        Some(json!({"name": "after-the-outage"})),
    )
    .await;
    assert_eq!(s, 200, "a write after the database came back: {v}");
    srv.stop().await;
}
