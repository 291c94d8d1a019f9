//! Every accelerator API list route at the largest query string the server accepts:
//! never a 5xx (a thousand `filters` once reached SQLite's expression-depth limit), and
//! one byte more is a 400 in Cyborg's envelope.

use crate::app::{AccelApp, As};
use crate::query::exact_query;
use accel_server::MAX_QUERY_BYTES;
use accel_testkit::server::BACKENDS;

#[tokio::test]
async fn list_routes_at_the_query_limit() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, Some("compute1")).await;
        let indexed = |field: &'static str, value: &'static str| {
            (0..).map(move |i| format!("filters[{i}].field={field}&filters[{i}].value={value}"))
        };
        // Pads have an even length; some end in `&`, an empty pair the parser skips.
        let routes: Vec<(&str, String, Option<usize>)> = vec![
            // The same filter over and over, and filters of every kind at once.
            (
                "/v2/devices",
                exact_query(indexed("sort_key", "vendor"), "type=FPGA&", MAX_QUERY_BYTES),
                Some(1),
            ),
            (
                "/v2/devices",
                exact_query(
                    (0..).map(|i| match i % 3 {
                        // upstream's filter fields; on devices they do not filter
                        0 => format!("filters[{i}].field=limit&filters[{i}].value=1"),
                        1 => format!("filters[{i}].field=marker&filters[{i}].value=m"),
                        _ => format!("filters[{i}].field=sort_dir&filters[{i}].value=M{i}"),
                    }),
                    "type=FPGA&",
                    MAX_QUERY_BYTES,
                ),
                Some(1),
            ),
            (
                "/v2/deployables",
                exact_query(
                    (0..).map(|i| match i % 2 {
                        0 => format!(
                            "filters[{i}].field=name&filters[{i}].value=compute1_FakeDevice"
                        ),
                        _ => format!("filters[{i}].field=sort_key&filters[{i}].value=name"),
                    }),
                    "filters[y].field=sort_dir&filters[y].value=ASCENDING",
                    MAX_QUERY_BYTES,
                ),
                Some(1),
            ),
            (
                "/v2/deployables",
                exact_query(
                    (0..).map(|i| {
                        let name = if i % 2 == 0 {
                            "compute1_FakeDevice"
                        } else {
                            "OTHER"
                        };
                        format!("filters[{i}].field=name&filters[{i}].value={name}")
                    }),
                    "filters[y].field=sort_dir&filters[y].value=ASCENDING",
                    MAX_QUERY_BYTES,
                ),
                Some(0),
            ),
            (
                "/v2/device_profiles",
                format!(
                    "name={}",
                    exact_query(
                        std::iter::repeat("DP".to_owned()),
                        "DP",
                        MAX_QUERY_BYTES - 5
                    )
                    .replace('&', ",")
                ),
                Some(0),
            ),
            (
                "/v2/accelerator_requests",
                exact_query(
                    std::iter::repeat("bind_state=resolved".to_owned()),
                    "bind_state=resolved&",
                    MAX_QUERY_BYTES,
                ),
                None,
            ),
            (
                "/v2/attributes",
                exact_query(
                    std::iter::repeat("key=K".to_owned()),
                    "key=KK",
                    MAX_QUERY_BYTES,
                ),
                Some(0),
            ),
        ];
        for (path, q, count) in routes {
            assert_eq!(q.len(), MAX_QUERY_BYTES, "{path}");
            let r = app.get(As::Admin, &format!("{path}?{q}")).await;
            assert!(r.status < 500, "{path}: {} {}", r.status, r.body);
            if let Some(n) = count {
                assert_eq!(r.status, 200, "{path}: {}", r.body);
                let key = path.trim_start_matches("/v2/");
                assert_eq!(
                    r.body[key].as_array().unwrap().len(),
                    n,
                    "{path}: {}",
                    r.body
                );
            }
            let over = app.get(As::Admin, &format!("{path}?{q}0")).await;
            assert_eq!(over.status, 400, "{path}");
            assert!(
                over.fault()
                    .contains(&format!("at most {MAX_QUERY_BYTES} are accepted")),
                "{path}"
            );
        }
    }
}
