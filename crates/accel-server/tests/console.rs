//! The operator's console over HTTP: a real server on port 0 with Cyborg's fake
//! device, a bound ARQ and its allocation, on each backend; every page's numbers
//! checked against the APIs' answers (through the `data-` hooks the console module
//! documents); paging and search; the security headers; noauth's banner; and, in
//! keystone mode against the test kit's fake Keystone, login, a refused password, a
//! cross-origin POST, the cookie's attributes, policy per page and a member who sees
//! only its own project's ARQs; and a host's GPU ledgers (two H100s, one in seven
//! `1g.10gb` slices, one given whole) against Placement.

mod common;

use accel_server::auth::keystone::{Keystone, KeystoneConfig};
use accel_server::auth::AuthStrategy;
use accel_server::ServerConfig;
use accel_testkit::server::TestServer;
use common::accel::{compute_node, get, placement, workers, Server, TempDb};
use common::gpus::TwoH100s;
use common::keystone::{FakeKeystone, Subject};
use common::BACKENDS;
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::Arc;

const INSTANCE: &str = "6a0c2c7e-1f7b-4c53-8d11-5e2f1a9b3c40";
/// The reason edge-9's agent gives for its GPU.
const SICK: &str = "its control function 0000:17:00.0 is no longer on the PCI bus";

/// GET `path` on the console: status, headers, body.
async fn page(
    client: &reqwest::Client,
    base: &str,
    path: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let r = client.get(format!("{base}{path}")).send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

/// The opening tags carrying `data-test="<hook>"`.
fn hooks<'a>(html: &'a str, hook: &str) -> Vec<&'a str> {
    let needle = format!("data-test=\"{hook}\"");
    html.match_indices(&needle)
        .map(|(i, _)| {
            let start = html[..i].rfind('<').unwrap();
            let end = i + html[i..].find('>').unwrap();
            &html[start..=end]
        })
        .collect()
}

/// The text inside each element carrying `data-test="<hook>"`, tags (`<wbr>`, links)
/// removed and entities decoded as far as the console writes them.
fn texts_of(html: &str, hook: &str) -> Vec<String> {
    let needle = format!("data-test=\"{hook}\"");
    html.match_indices(&needle)
        .map(|(i, _)| {
            let start = html[..i].rfind('<').unwrap();
            let tag: String = html[start + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            let open = i + html[i..].find('>').unwrap() + 1;
            let close = open + html[open..].find(&format!("</{tag}>")).unwrap();
            plain(&html[open..close])
        })
        .collect()
}

fn text_of(html: &str, hook: &str) -> String {
    let all = texts_of(html, hook);
    assert_eq!(all.len(), 1, "{hook}: {all:?}");
    all.into_iter().next().unwrap()
}

/// The text of the table row that opens with `tag`.
fn row_text(html: &str, tag: &str) -> String {
    let i = html.find(tag).unwrap();
    plain(&html[i + tag.len()..i + html[i..].find("</tr>").unwrap()])
}

/// Markup without its tags, the console's entities decoded.
fn plain(s: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
        .trim()
        .to_owned()
}

/// The value of attribute `name` in an opening tag.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!(" {name}=\"");
    let i = tag.find(&needle)? + needle.len();
    Some(&tag[i..i + tag[i..].find('"')?])
}

fn with<'a>(tags: &[&'a str], name: &str, value: &str) -> Vec<&'a str> {
    tags.iter()
        .copied()
        .filter(|t| attr(t, name) == Some(value))
        .collect()
}

fn assert_security_headers(h: &reqwest::header::HeaderMap, what: &str) {
    let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    let csp = get("content-security-policy");
    for part in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{what}: CSP {csp:?} lacks {part}");
    }
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert_eq!(get("x-frame-options"), "DENY", "{what}");
    assert_eq!(get("x-content-type-options"), "nosniff", "{what}");
    assert_eq!(get("referrer-policy"), "same-origin", "{what}");
}

/// No inline script or style anywhere in a page: the CSP would block them.
fn assert_no_inline(html: &str, what: &str) {
    for (i, _) in html.match_indices("<script") {
        let tag = &html[i..i + html[i..].find('>').unwrap()];
        assert!(tag.contains(" src=\""), "{what}: inline script {tag}");
    }
    assert!(
        !html.contains(" style=\""),
        "{what}: inline style attribute"
    );
    assert!(!html.contains("<style"), "{what}: inline style element");
}

#[tokio::test]
async fn every_page_shows_the_estate_as_the_apis_do() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, Some("compute-1"), Some(workers(None))).await;
        for name in ["compute-2", "compute-3", "edge-9"] {
            compute_node(&srv, name).await;
        }
        srv.create_profile(
            "fpga",
            json!([{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]),
        )
        .await;
        let rps = get(&srv, "/resource_providers?resources=FPGA:1").await;
        let rp = rps["resource_providers"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let (s, v) = placement(
            &srv,
            Method::PUT,
            &format!("/allocations/{INSTANCE}"),
            Some(json!({"allocations": {&rp: {"resources": {"FPGA": 1}}},
                "project_id": "p1", "user_id": "u1", "consumer_generation": null, "consumer_type": "INSTANCE"})),
        )
        .await;
        assert_eq!(s, 204, "{v}");
        let arqs = srv.create_arqs("fpga").await;
        srv.bind(&arqs, "compute-1", &rp, INSTANCE).await;
        srv.wait_resolved(INSTANCE).await;
        let c = reqwest::Client::new();
        let base = &srv.console;

        // Hosts: every root, by name; the device provider's bar says what the API says.
        let (s, h, html) = page(&c, base, "/hosts").await;
        assert_eq!(s, 200, "{backend:?}");
        assert_security_headers(&h, "/hosts");
        assert_eq!(h.get("cache-control").unwrap(), "no-store");
        assert_no_inline(&html, "/hosts");
        assert_eq!(hooks(&html, "noauth-banner").len(), 1);
        let hosts: Vec<&str> = hooks(&html, "host-row")
            .iter()
            .map(|t| attr(t, "data-host").unwrap())
            .collect();
        assert_eq!(hosts, ["compute-1", "compute-2", "compute-3", "edge-9"]);
        let inv = get(&srv, &format!("/resource_providers/{rp}/inventories")).await;
        let usage = get(&srv, &format!("/resource_providers/{rp}/usages")).await;
        let bars = with(&hooks(&html, "usage-bar"), "data-provider", &rp);
        let fpga = with(&bars, "data-rc", "FPGA");
        assert_eq!(fpga.len(), 1, "{bars:?}");
        let num = |t: &str, n: &str| attr(t, n).unwrap().parse::<i64>().unwrap();
        assert_eq!(
            num(fpga[0], "data-used"),
            usage["usages"]["FPGA"].as_i64().unwrap()
        );
        assert_eq!(num(fpga[0], "data-used"), 1);
        assert_eq!(
            num(fpga[0], "data-total"),
            inv["inventories"]["FPGA"]["total"].as_i64().unwrap()
        );
        assert_eq!(
            num(fpga[0], "data-reserved"),
            inv["inventories"]["FPGA"]["reserved"].as_i64().unwrap()
        );
        let rows = with(&hooks(&html, "provider-row"), "data-uuid", &rp);
        assert_eq!(attr(rows[0], "data-health"), Some("ok"));
        assert_eq!(attr(rows[0], "data-depth"), Some("1"));
        assert!(!with(&hooks(&html, "trait"), "data-trait", "CUSTOM_FAKE_DEVICE").is_empty());

        // Paging and search.
        let (_, _, html) = page(&c, base, "/hosts?limit=2").await;
        assert_eq!(hooks(&html, "host-row").len(), 2);
        let pager = hooks(&html, "pager")[0];
        assert_eq!(attr(pager, "data-total"), Some("4"));
        assert_eq!(hooks(&html, "next").len(), 1);
        let (_, _, html) = page(&c, base, "/hosts?limit=2&offset=2").await;
        let hosts: Vec<&str> = hooks(&html, "host-row")
            .iter()
            .map(|t| attr(t, "data-host").unwrap())
            .collect();
        assert_eq!(hosts, ["compute-3", "edge-9"]);
        assert_eq!(hooks(&html, "next").len(), 0);
        for (q, want) in [
            ("edge", vec!["edge-9"]),
            ("FakeDevice", vec!["compute-1"]),
            (rp.as_str(), vec!["compute-1"]),
            (INSTANCE, vec!["compute-1"]),
            ("nothing-like-this", vec![]),
        ] {
            let (_, _, html) = page(&c, base, &format!("/hosts?q={q}")).await;
            let hosts: Vec<&str> = hooks(&html, "host-row")
                .iter()
                .map(|t| attr(t, "data-host").unwrap())
                .collect();
            assert_eq!(hosts, want, "search {q}");
        }

        // A provider's tree, found from any of its providers.
        let (s, h, html) = page(&c, base, &format!("/hosts/{rp}")).await;
        assert_eq!(s, 200);
        assert_security_headers(&h, "tree");
        let names: Vec<&str> = hooks(&html, "provider-row")
            .iter()
            .map(|t| attr(t, "data-provider").unwrap())
            .collect();
        assert_eq!(names[0], "compute-1");
        assert!(names.len() >= 2, "{names:?}");
        let (s, _, _) = page(&c, base, &format!("/hosts/{}", uuid::Uuid::new_v4())).await;
        assert_eq!(s, 404);

        // Consumers: the instance with its allocation and its bound ARQ.
        let (s, _, html) = page(&c, base, "/consumers").await;
        assert_eq!(s, 200);
        let row = with(&hooks(&html, "consumer-row"), "data-consumer", INSTANCE);
        assert_eq!(row.len(), 1, "{html}");
        assert_eq!(attr(row[0], "data-kind"), Some("vm"));
        let allocs = with(&hooks(&html, "allocation"), "data-provider", &rp);
        assert_eq!(attr(allocs[0], "data-used"), Some("1"));
        let arq_tags = hooks(&html, "arq");
        assert_eq!(arq_tags.len(), arqs.len());
        assert!(arq_tags
            .iter()
            .all(|t| attr(t, "data-state") == Some("Bound")));
        let (_, _, html) = page(&c, base, "/consumers?q=compute-2").await;
        assert_eq!(hooks(&html, "consumer-row").len(), 0);

        // ARQs: state, instance, project, event state as the API and the outbox say.
        let (s, _, html) = page(&c, base, "/arqs").await;
        assert_eq!(s, 200);
        let (_, api) = srv.admin_get("/v2/accelerator_requests").await;
        let rows = hooks(&html, "arq-row");
        assert_eq!(rows.len(), api["arqs"].as_array().unwrap().len());
        for a in api["arqs"].as_array().unwrap() {
            let row = with(&rows, "data-arq", a["uuid"].as_str().unwrap());
            assert_eq!(attr(row[0], "data-state"), a["state"].as_str());
            assert_eq!(attr(row[0], "data-instance"), a["instance_uuid"].as_str());
            assert_eq!(attr(row[0], "data-stuck"), Some("false"));
            assert!(attr(row[0], "data-bind-seconds")
                .unwrap()
                .parse::<i64>()
                .is_ok());
        }
        let events = srv.events_of(INSTANCE).await;
        let event_state = events
            .last()
            .map(|e| e.delivery.as_str().to_owned())
            .unwrap();
        assert_eq!(attr(rows[0], "data-event"), Some(event_state.as_str()));
        let (_, _, html) = page(&c, base, &format!("/arqs?q={INSTANCE}")).await;
        assert_eq!(hooks(&html, "arq-row").len(), arqs.len());
        let (_, _, html) = page(&c, base, "/arqs?q=compute-3").await;
        assert_eq!(hooks(&html, "arq-row").len(), 0);

        // Profiles: the hosts that could serve one are the roots of Placement's answer.
        let (s, _, html) = page(&c, base, "/profiles").await;
        assert_eq!(s, 200);
        let row = with(&hooks(&html, "profile-row"), "data-profile", "fpga");
        let answer = get(
            &srv,
            "/allocation_candidates?resources_device_profile_0=FPGA:1&required_device_profile_0=CUSTOM_FAKE_DEVICE&group_policy=none",
        )
        .await;
        let roots: std::collections::BTreeSet<&str> = answer["provider_summaries"]
            .as_object()
            .unwrap()
            .values()
            .map(|s| s["root_provider_uuid"].as_str().unwrap())
            .collect();
        assert_eq!(
            attr(row[0], "data-hosts"),
            Some(roots.len().to_string().as_str())
        );
        assert_eq!(hooks(&html, "profile-host").len(), roots.len(), "{html}");

        // The explainer: Placement's count, each root's verdict, Placement's errors.
        let q = "resources=FPGA:1";
        let (s, h, html) = page(
            &c,
            base,
            &format!("/explain?query={}&show=all", urlencode(q)),
        )
        .await;
        assert_eq!(s, 200, "{html}");
        assert_security_headers(&h, "explain");
        let answer = get(&srv, &format!("/allocation_candidates?{q}")).await;
        let n = answer["allocation_requests"].as_array().unwrap().len();
        assert!(n >= 1);
        assert_eq!(
            attr(hooks(&html, "candidates")[0], "data-count"),
            Some(n.to_string().as_str())
        );
        assert_eq!(hooks(&html, "candidate").len(), n.min(50));
        let roots = hooks(&html, "root-row");
        assert_eq!(roots.len(), 4);
        assert_eq!(
            attr(with(&roots, "data-name", "compute-1")[0], "data-fits"),
            Some("true")
        );
        assert_eq!(
            attr(with(&roots, "data-name", "edge-9")[0], "data-fits"),
            Some("false")
        );
        let (_, _, html) = page(
            &c,
            base,
            "/explain?query=resources%3DFPGA%3A1000&show=nofit",
        )
        .await;
        assert_eq!(attr(hooks(&html, "candidates")[0], "data-count"), Some("0"));
        assert_eq!(hooks(&html, "root-row").len(), 4);
        // Every root that does not fit says why; one without the class has no inventory.
        for (i, _) in html.match_indices("data-test=\"root-row\"") {
            let row = &html[i..i + html[i..].find("</tr>").unwrap()];
            assert!(row.contains("data-test=\"reason\""), "{row}");
        }
        let edge = html.find("data-name=\"edge-9\"").unwrap();
        let edge_row = &html[edge..edge + html[edge..].find("</tr>").unwrap()];
        assert!(
            edge_row.contains("data-code=\"no_inventory\""),
            "{edge_row}"
        );
        let (_, _, html) = page(
            &c,
            base,
            "/explain?query=resources%3DFPGA%3A1000&root=compute-1&show=all",
        )
        .await;
        assert_eq!(hooks(&html, "root-row").len(), 1);
        let (_, _, html) = page(&c, base, "/explain?query=resources%3DNOPE%3A1").await;
        let err = hooks(&html, "explain-error");
        assert_eq!(err.len(), 1, "{html}");
        assert!(html.contains("No such resource class NOPE"), "{html}");
        let (_, _, html) = page(
            &c,
            base,
            "/explain?query=resources%3DFPGA%3A1&microversion=1.9",
        )
        .await;
        assert_eq!(hooks(&html, "explain-error").len(), 1, "{html}");
        // Before 1.12 the answer is a list; the engine's answer is the same candidates.
        let (_, _, html) = page(
            &c,
            base,
            "/explain?query=resources%3DFPGA%3A1&microversion=1.10",
        )
        .await;
        assert_eq!(
            attr(hooks(&html, "candidates")[0], "data-count"),
            Some(n.to_string().as_str())
        );
        let (_, _, html) = page(&c, base, "/explain?profile=fpga&resources=").await;
        assert!(hooks(&html, "candidates").len() == 1, "{html}");

        // Issue 31, items 10-12: a device the agent reports unhealthy, with its reason.
        let report = json!({"devices": [{
            "type": "GPU", "vendor": "10de", "model": "20b0", "std_board_info": "{}",
            "health": "unhealthy", "health_reason": SICK,
            "controlpath_id": {"cpid_type": "PCI", "cpid_info": "{\"domain\":\"0000\",\"bus\":\"17\",\"device\":\"00\",\"function\":\"0\"}"},
            "deployables": [{"name": "edge-9_0000:17:00.0", "num_accelerators": 1, "driver_name": "nvidia",
                "attributes": [{"key": "rc", "value": "PGPU"},
                               {"key": "inventory:CUSTOM_ACCELERATOR_MEMORY_DEVICE_MIB", "value": "40960"}],
                "attach_handles": [{"attach_type": "PCI", "attach_info": "{}", "in_use": false}]}]}]});
        let r = c
            .put(format!("{}/v2/agent/hosts/edge-9/devices", srv.accel))
            .header("x-auth-token", "admin")
            .json(&report)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{:?}", r.text().await);
        let gpu_rp = accel_store::accelerator::report::provider_uuid("edge-9_0000:17:00.0");

        // 10: the reason and since when (UTC), names not hex ids, class names whole.
        let (_, _, html) = page(&c, base, &format!("/hosts/{gpu_rp}")).await;
        let row = with(&hooks(&html, "provider-row"), "data-uuid", &gpu_rp);
        assert_eq!(attr(row[0], "data-health"), Some("unhealthy"));
        let reason = text_of(&html, "health-reason");
        assert!(reason.starts_with(SICK), "{reason}");
        assert!(reason.contains(" UTC"), "{reason}");
        let since: i64 = attr(hooks(&html, "health-reason")[0], "data-since")
            .unwrap()
            .parse()
            .unwrap();
        assert!(since > 1_700_000_000);
        assert_eq!(text_of(&html, "vendor-name"), "NVIDIA (10de)");
        assert_eq!(text_of(&html, "product-name"), "A100 SXM4 40GB");
        let names: Vec<String> = texts_of(&html, "rc-name");
        assert!(
            names.contains(&"CUSTOM_ACCELERATOR_MEMORY_DEVICE_MIB".to_owned()),
            "{names:?}"
        );
        assert!(html.contains("CUSTOM_<wbr>ACCELERATOR_<wbr>MEMORY_<wbr>DEVICE_<wbr>MIB"));
        assert!(!html.contains('…'), "nothing is cut");
        // The device's history: first reported, then unhealthy with the reason.
        let history: Vec<(&str, String)> = hooks(&html, "history-row")
            .iter()
            .map(|t| (attr(t, "data-kind").unwrap(), row_text(&html, t)))
            .collect();
        assert_eq!(history.len(), 2, "{history:?}");
        assert_eq!(history[0].0, "health");
        assert!(history[0].1.contains(SICK), "{history:?}");
        assert!(history[0].1.contains(" UTC"), "{history:?}");
        assert_eq!(history[1].0, "report");

        // 12: hosts filtered by device type and health (a plain GET form).
        let filtered = |html: &str| -> Vec<String> {
            hooks(html, "host-row")
                .iter()
                .map(|t| attr(t, "data-host").unwrap().to_owned())
                .collect()
        };
        for (query, want) in [
            ("health=not_ok", vec!["edge-9"]),
            ("health=unhealthy&type=GPU", vec!["edge-9"]),
            ("type=FPGA", vec!["compute-1"]),
            ("type=FPGA&health=unhealthy", vec![]),
            ("type=QAT", vec![]),
            ("health=ok", vec!["compute-1"]),
        ] {
            let (s, _, html) = page(&c, base, &format!("/hosts?{query}")).await;
            assert_eq!(s, 200);
            assert_eq!(filtered(&html), want, "{query}");
            assert_eq!(hooks(&html, "hosts-filter").len(), 1);
        }
        // The pager's links keep the filters.
        let (_, _, html) = page(&c, base, "/hosts?type=FPGA&health=ok&limit=1&offset=1").await;
        let prev = hooks(&html, "prev");
        assert_eq!(
            attr(prev[0], "href"),
            Some("/hosts?type=FPGA&amp;health=ok&amp;offset=0&amp;limit=1")
        );

        // 12: the estate summary, against Placement's usage and the reported health.
        let (s, _, html) = page(&c, base, "/overview").await;
        assert_eq!(s, 200);
        let rows = hooks(&html, "summary-row");
        let gpu = with(&rows, "data-type", "GPU");
        let fpga = with(&rows, "data-type", "FPGA");
        let counts = |t: &str| {
            [
                "data-total",
                "data-used",
                "data-free",
                "data-unhealthy",
                "data-reserved",
            ]
            .map(|n| attr(t, n).unwrap().parse::<i64>().unwrap())
        };
        assert_eq!(attr(gpu[0], "data-vendor"), Some("10de"));
        assert_eq!(counts(gpu[0]), [1, 0, 0, 1, 1]);
        let used = usage["usages"]["FPGA"].as_i64().unwrap();
        assert_eq!(counts(fpga[0]), [1, i64::from(used > 0), 0, 0, 0]);
        assert_eq!(counts(hooks(&html, "summary-total")[0]), [2, 1, 0, 1, 1]);
        assert!(html.contains("NVIDIA (10de)"), "{html}");

        // 11: an instance with ARQs and no allocation is a consumer too.
        let lone = uuid::Uuid::new_v4().to_string();
        let lone_arqs = srv.create_arqs("fpga").await;
        srv.bind(&lone_arqs, "compute-1", &rp, &lone).await;
        srv.wait_resolved(&lone).await;
        let (_, _, html) = page(&c, base, "/consumers").await;
        let row = with(&hooks(&html, "consumer-row"), "data-consumer", &lone);
        assert_eq!(row.len(), 1, "{html}");
        let i = html.find(row[0]).unwrap();
        let lone_row = &html[i..i + html[i..].find("</tr>").unwrap()];
        assert!(
            lone_row.contains("data-test=\"no-allocation\""),
            "{lone_row}"
        );
        assert!(lone_row.contains(&format!("data-arq=\"{}\"", lone_arqs[0])));
        let (_, _, html) = page(&c, base, "/consumers?q=compute-1").await;
        assert_eq!(
            with(&hooks(&html, "consumer-row"), "data-consumer", &lone).len(),
            1
        );

        // 11: the ARQs page names the device by its provider's name.
        let (_, _, html) = page(&c, base, &format!("/arqs?q={INSTANCE}")).await;
        let devices = hooks(&html, "arq-device");
        assert_eq!(devices.len(), arqs.len());
        assert!(devices
            .iter()
            .all(|t| attr(t, "data-provider") == Some(rp.as_str())));
        assert!(texts_of(&html, "arq-device")
            .iter()
            .all(|t| t == "compute-1_FakeDevice"));
        // ... and finds ARQs by that name.
        let (_, _, html) = page(&c, base, "/arqs?q=1_FakeDev").await;
        assert_eq!(hooks(&html, "arq-row").len(), arqs.len() + lone_arqs.len());

        // 11: the host's page lists its instances and ARQs; the device's history
        // its binds.
        let (_, _, html) = page(&c, base, &format!("/hosts/{rp}")).await;
        let on_host: std::collections::BTreeSet<&str> = hooks(&html, "host-consumer")
            .iter()
            .map(|t| attr(t, "data-consumer").unwrap())
            .collect();
        assert_eq!(on_host, [INSTANCE, lone.as_str()].into_iter().collect());
        let (_, api) = srv.admin_get("/v2/accelerator_requests").await;
        let bound_here = api["arqs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["hostname"] == "compute-1")
            .count();
        assert_eq!(hooks(&html, "host-arq").len(), bound_here);
        assert_eq!(
            attr(hooks(&html, "host-arqs")[0], "data-total"),
            Some(bound_here.to_string().as_str())
        );
        let binds = with(&hooks(&html, "history-row"), "data-kind", "bind");
        assert_eq!(binds.len(), arqs.len() + lone_arqs.len(), "{html}");
        let (_, _, other) = page(&c, base, &format!("/hosts/{gpu_rp}")).await;
        assert!(hooks(&other, "host-consumer").is_empty());
        assert_eq!(attr(hooks(&other, "host-arqs")[0], "data-total"), Some("0"));

        // 11: the explainer's request line is decoded.
        let (_, _, html) = page(&c, base, "/explain?profile=fpga&resources=").await;
        let asked = text_of(&html, "explain-query");
        assert!(!asked.contains('%'), "{asked}");
        assert!(asked.contains("CUSTOM_FAKE_DEVICE"), "{asked}");
        let raw = attr(hooks(&html, "explain-query")[0], "data-query").unwrap();
        assert!(raw.contains('%') || raw == asked, "{raw}");

        // Kubernetes: no slot is held here.
        let (s, _, html) = page(&c, base, "/kubernetes").await;
        assert_eq!(s, 200);
        assert_eq!(hooks(&html, "k8s-node").len(), 0);
        assert_eq!(hooks(&html, "empty").len(), 1);

        // The change token moves with the data; assets are embedded.
        let (s, _, before) = page(&c, base, "/changes").await;
        assert_eq!(s, 200);
        compute_node(&srv, "compute-4").await;
        let (_, _, after) = page(&c, base, "/changes").await;
        assert_ne!(before, after);
        let (s, h, js) = page(&c, base, "/static/console.js").await;
        assert_eq!(s, 200);
        assert!(h
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("text/javascript"));
        assert!(js.contains("/changes"));
        let (s, h, _) = page(&c, base, "/nope").await;
        assert_eq!(s, 404);
        assert_security_headers(&h, "404");

        // Console requests are counted under the HTTP families with api="console".
        let metrics = c
            .get(format!("{}/metrics", srv.metrics))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("accel_http_requests_total{")
                    && l.contains("api=\"console\"")
                    && l.contains("route=\"/hosts\"")),
            "{metrics}"
        );
        srv.stop().await;
    }
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Keystone mode: a server whose console logs in against the fake Keystone.
struct KsApp {
    ks: FakeKeystone,
    server: TestServer,
}

async fn keystone_app() -> KsApp {
    let ks = FakeKeystone::start().await;
    ks.add_user("secret", Subject::project("accel", "service", &["service"]));
    ks.add_user(
        "admin-pw",
        Subject::project("root", "admin-project", &["admin", "member", "reader"]),
    );
    ks.add_user(
        "alice-pw",
        Subject::project("alice", "p1", &["member", "reader"]),
    );
    let cfg: KeystoneConfig = serde_json::from_value(json!({
        "auth_url": format!("{}/v3", ks.url),
        "username": "accel",
        "password": "secret",
        "project_name": "service",
        // Every request asks Keystone, so a revoked token ends a session at once.
        "token_cache_time": 0,
    }))
    .unwrap();
    let store = accel_testkit::server::store(BACKENDS[0]).await;
    let server = TestServer::start(
        accel_testkit::server::builder(store)
            .fake_devices(Some("compute-1".to_owned()))
            .config(ServerConfig {
                auth_strategy: AuthStrategy::Keystone,
                keystone: Some(Arc::new(Keystone::new(cfg).unwrap())),
                allocation_conflict_retry_count: 10,
                max_allocation_candidates: 1000,
                ..Default::default()
            }),
    )
    .await;
    KsApp { ks, server }
}

impl KsApp {
    /// An ARQ created through the API by a member of `project`.
    async fn arq_of(&self, project: &str) -> String {
        let token = self.ks.issue(Subject::project(
            &format!("maker-{project}"),
            project,
            &["member", "reader"],
        ));
        let r = reqwest::Client::new()
            .post(format!("{}/v2/accelerator_requests", self.server.accel))
            .header("x-auth-token", token)
            .json(&json!({"device_profile_name": "fpga"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: Value = r.json().await.unwrap();
        v["arqs"][0]["uuid"].as_str().unwrap().to_owned()
    }

    /// POSTs the login form; the answer is not followed.
    async fn login(
        &self,
        c: &reqwest::Client,
        (user, password, project): (&str, &str, &str),
        origin: Option<&str>,
    ) -> reqwest::Response {
        let form = [
            ("user", user),
            ("password", password),
            ("project", project),
            ("domain", "Default"),
        ];
        let mut r = c
            .post(format!("{}/login", self.server.console))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(
                form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(form)
                    .finish(),
            );
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        r.send().await.unwrap()
    }
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The session cookie of a login answer (`name=value`), after checking its attributes.
fn session_cookie(r: &reqwest::Response) -> String {
    let set = r
        .headers()
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(set.starts_with("accel_console="), "{set}");
    assert!(set.contains("; HttpOnly"), "{set}");
    assert!(set.contains("; SameSite=Strict"), "{set}");
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    set.split(';').next().unwrap().to_owned()
}

#[tokio::test]
async fn keystone_login_policy_and_project_scoped_arqs() {
    let app = keystone_app().await;
    let admin = app.ks.issue(Subject::project(
        "root",
        "admin-project",
        &["admin", "member", "reader"],
    ));
    let r = reqwest::Client::new()
        .post(format!("{}/v2/device_profiles", app.server.accel))
        .header("x-auth-token", &admin)
        .json(&json!([{"name": "fpga", "groups": [{"resources:FPGA": "1"}]}]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let mine = app.arq_of("p1").await;
    let theirs = app.arq_of("p2").await;
    let base = app.server.console.clone();
    let origin = base.clone();
    let c = no_redirects();

    // Not logged in: every page sends to the login form, which has no banner.
    let (s, h, _) = page(&c, &base, "/arqs").await;
    assert_eq!(s, 303);
    assert_eq!(h.get("location").unwrap(), "/login");
    let (s, h, html) = page(&c, &base, "/login").await;
    assert_eq!(s, 200);
    assert_security_headers(&h, "/login");
    assert_eq!(hooks(&html, "login-form").len(), 1);
    assert_eq!(hooks(&html, "noauth-banner").len(), 0);

    // A wrong password and a cross-origin POST are refused, and counted.
    let r = app
        .login(&c, ("alice", "wrong", "p1-name"), Some(&origin))
        .await;
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    assert_eq!(hooks(&r.text().await.unwrap(), "login-error").len(), 1);
    let r = app
        .login(
            &c,
            ("alice", "alice-pw", "p1-name"),
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("set-cookie").is_none());
    let r = app.login(&c, ("alice", "alice-pw", "p1-name"), None).await;
    assert_eq!(r.status(), 403);
    let metrics = reqwest::get(format!("{}/metrics", app.server.metrics))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (outcome, n) in [("refused", 1), ("bad_origin", 2)] {
        let line = format!("accel_console_logins_total{{outcome=\"{outcome}\"}} {n}");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }

    // A member: its own project's ARQs only; hardware pages need what the API needs.
    let r = app
        .login(&c, ("alice", "alice-pw", "p1-name"), Some(&origin))
        .await;
    assert_eq!(r.status(), 303);
    let alice = session_cookie(&r);
    let get_as = |cookie: String, path: &str| {
        let c = c.clone();
        let url = format!("{base}{path}");
        async move {
            let r = c.get(url).header("cookie", cookie).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (s, html) = get_as(alice.clone(), "/arqs").await;
    assert_eq!(s, 200, "{html}");
    let rows: Vec<&str> = hooks(&html, "arq-row")
        .iter()
        .map(|t| attr(t, "data-arq").unwrap())
        .collect();
    assert_eq!(rows, [mine.as_str()]);
    assert!(!html.contains(&theirs));
    assert_eq!(hooks(&html, "noauth-banner").len(), 0);
    assert!(hooks(&html, "viewer")[0].contains("viewer"));
    assert!(html.contains("alice-id · p1"), "{html}");
    let (s, html) = get_as(alice.clone(), "/hosts").await;
    assert_eq!(s, 403, "{html}");
    assert!(html.contains("placement:resource_providers:list"));

    // The admin sees every project's ARQs and the hosts.
    let r = app
        .login(
            &c,
            ("root", "admin-pw", "admin-project-name"),
            Some(&origin),
        )
        .await;
    assert_eq!(r.status(), 303);
    let root = session_cookie(&r);
    let (s, html) = get_as(root.clone(), "/arqs").await;
    assert_eq!(s, 200);
    let mut rows: Vec<&str> = hooks(&html, "arq-row")
        .iter()
        .map(|t| attr(t, "data-arq").unwrap())
        .collect();
    rows.sort();
    let mut want = vec![mine.as_str(), theirs.as_str()];
    want.sort();
    assert_eq!(rows, want);
    let (s, html) = get_as(root.clone(), "/hosts").await;
    assert_eq!(s, 200);
    assert_eq!(hooks(&html, "host-row").len(), 1);
    assert_eq!(hooks(&html, "logout").len(), 1);

    // Logout (a same-origin POST) ends the session; the other one lives on.
    let r = c
        .post(format!("{base}/logout"))
        .header("cookie", &alice)
        .header("origin", &origin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let (s, _) = get_as(alice.clone(), "/arqs").await;
    assert_eq!(s, 303);
    let (s, _) = get_as(root.clone(), "/arqs").await;
    assert_eq!(s, 200);
    // A revoked token ends the session at the next request (no validation cache
    // here; with one, at the cache entry's end, as for the APIs).
    app.ks.revoke_user("root");
    let (s, _) = get_as(root, "/arqs").await;
    assert_eq!(s, 303);
    app.server.stop().await;
}

#[tokio::test]
async fn kubernetes_page_shows_each_nodes_slots_as_the_agent_api_stores_them() {
    let db = TempDb::fresh(BACKENDS[0]).await;
    let srv = Server::start(&db.url, Some("compute-1"), None).await;
    let c = reqwest::Client::new();
    let url = format!("{}/v2/agent/hosts/compute-1/kubernetes", srv.accel);
    let r = c
        .put(&url)
        .header("x-auth-token", "admin")
        .json(&json!({
            "usage": {"fake-0": "compute-1", "fake-1": "C:0:compute-1", "fake-2": ""},
            "claims": [{"slot": "fake-0", "device": "FakeDevice", "pod": "default/train"},
                       {"slot": "fake-1", "device": "FakeDevice", "pod": null}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let saved: Value = r.json().await.unwrap();
    let pod_consumers: Vec<&String> = saved["consumers"].as_object().unwrap().keys().collect();
    let (s, shown) = srv.admin_get("/v2/agent/hosts/compute-1/kubernetes").await;
    assert_eq!(s, 200, "{shown}");
    let held = shown["usage"]
        .as_object()
        .unwrap()
        .values()
        .filter(|u| u.as_str() != Some(""))
        .count();

    let (s, _, html) = page(&c, &srv.console, "/kubernetes").await;
    assert_eq!(s, 200);
    let nodes = hooks(&html, "k8s-node");
    assert_eq!(nodes.len(), 1, "{html}");
    assert_eq!(attr(nodes[0], "data-host"), Some("compute-1"));
    assert_eq!(
        attr(nodes[0], "data-slots"),
        Some(held.to_string().as_str())
    );
    assert_eq!(attr(nodes[0], "data-instance-level"), Some("1"));
    assert_eq!(attr(nodes[0], "data-configuration-level"), Some("1"));
    let slots = hooks(&html, "slot");
    assert_eq!(
        attr(with(&slots, "data-slot", "fake-0")[0], "data-pod"),
        Some("default/train")
    );
    assert_eq!(
        attr(with(&slots, "data-slot", "fake-1")[0], "data-kind"),
        Some("configuration")
    );
    let (_, _, html) = page(&c, &srv.console, "/kubernetes?q=default/train").await;
    assert_eq!(hooks(&html, "k8s-node").len(), 1);
    let (_, _, html) = page(&c, &srv.console, "/kubernetes?q=elsewhere").await;
    assert_eq!(hooks(&html, "k8s-node").len(), 0);

    // A name with markup is shown, never run.
    let r = c
        .post(format!("{}/resource_providers", srv.placement))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
        .json(&json!({"name": "evil<script>alert(1)</script>\"'"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (_, _, html) = page(&c, &srv.console, "/hosts?q=evil").await;
    assert_eq!(hooks(&html, "host-row").len(), 1);
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(html.contains("evil&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;"));
    assert_no_inline(&html, "hostile name");

    // The pods' Placement consumers are listed as pods.
    let (_, _, html) = page(&c, &srv.console, "/consumers").await;
    let pods = with(&hooks(&html, "consumer-row"), "data-kind", "pod");
    assert_eq!(pods.len(), pod_consumers.len(), "{html}");
    for p in pod_consumers {
        assert_eq!(with(&pods, "data-consumer", p).len(), 1);
    }
    srv.stop().await;
}

/// The ledger of each partitioned GPU on its host's page (issue 45), on every backend:
/// an H100 fully sliced into seven `1g.10gb` instances shows seven holders, one on
/// each of slices 0 to 6, and slice 7 free; an H100 given whole shows its holder across
/// every slice; each holder is named with its consumer type; and every member
/// provider's total, reserved, used and free are Placement's, none free on either GPU.
#[tokio::test]
async fn host_page_shows_each_gpus_ledger() {
    for backend in BACKENDS {
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, None, None).await;
        let gpus = TwoH100s::fill(&srv, "gpu-1").await;
        let c = reqwest::Client::new();
        let node = get(&srv, "/resource_providers?name=gpu-1").await;
        let node = node["resource_providers"][0]["uuid"].as_str().unwrap();
        let (s, _, html) = page(&c, &srv.console, &format!("/hosts/{node}")).await;
        assert_eq!(s, 200, "{backend:?}");
        assert_no_inline(&html, "the ledgers");
        let ledgers = hooks(&html, "ledger");
        let gpu_of = |t: &str| attr(t, "data-gpu").unwrap().to_owned();
        assert_eq!(
            ledgers.iter().map(|t| gpu_of(t)).collect::<Vec<_>>(),
            [gpus.sliced.clone(), gpus.whole.clone()],
            "{backend:?}"
        );
        // Each ledger's markup, to read its hooks apart from the other's.
        let section = |gpu: &str| -> &str {
            let start = html.find(&format!("data-gpu=\"{gpu}\"")).unwrap();
            &html[start..start + html[start..].find("</section>").unwrap()]
        };
        let num = |t: &str, n: &str| -> i64 {
            attr(t, n)
                .unwrap_or_else(|| panic!("{n} on {t}"))
                .parse()
                .unwrap()
        };

        // The sliced GPU: a holder on each of slices 0..6, as the ledger placed them.
        let sliced = section(&gpus.sliced);
        let slices = num(ledgers[0], "data-slices");
        assert_eq!(slices, 8);
        assert_eq!(attr(ledgers[0], "data-mig"), Some("on"));
        assert_eq!(num(ledgers[0], "data-holders"), 7);
        let on_bar = hooks(sliced, "slice-holder");
        let mut at: Vec<(i64, i64)> = on_bar
            .iter()
            .map(|t| (num(t, "data-start"), num(t, "data-size")))
            .collect();
        at.sort();
        assert_eq!(at, (0..7).map(|i| (i, 1)).collect::<Vec<_>>());
        assert!(on_bar.iter().all(|t| attr(t, "data-form") == Some("mig")));
        let mut named: Vec<&str> = on_bar
            .iter()
            .map(|t| attr(t, "data-consumer").unwrap())
            .collect();
        named.sort();
        let mut want: Vec<&str> = gpus.slice_holders.iter().map(String::as_str).collect();
        want.sort();
        assert_eq!(named, want);
        assert!(!named.contains(&gpus.refused.as_str()));
        let free: Vec<i64> = hooks(sliced, "slice-free")
            .iter()
            .map(|t| num(t, "data-slice"))
            .collect();
        assert_eq!(free, [7]);
        let rows = hooks(sliced, "ledger-holder");
        assert_eq!(rows.len(), 7);
        for r in &rows {
            assert_eq!(attr(r, "data-type"), Some("INSTANCE"), "{r}");
            assert_eq!(attr(r, "data-provider"), Some(gpus.slice_rp.as_str()));
            assert_eq!(attr(r, "data-form"), Some("mig"));
        }
        let texts = texts_of(sliced, "ledger-holder");
        assert!(texts.iter().all(|t| t.contains("1g.10gb")), "{texts:?}");

        // The GPU given whole: one holder across every slice, in the VFIO form (an
        // instance's), nothing free.
        let whole = section(&gpus.whole);
        assert_eq!(num(ledgers[1], "data-holders"), 1);
        let on_bar = hooks(whole, "slice-holder");
        assert_eq!(on_bar.len(), 1);
        assert_eq!(
            attr(on_bar[0], "data-consumer"),
            Some(gpus.whole_holder.as_str())
        );
        assert_eq!(attr(on_bar[0], "data-form"), Some("vfio"));
        assert_eq!(
            (num(on_bar[0], "data-start"), num(on_bar[0], "data-size")),
            (0, slices)
        );
        assert!(hooks(whole, "slice-free").is_empty());
        assert!(
            row_text(whole, "data-test=\"ledger-holder\"").contains("whole GPU (VFIO)"),
            "{whole}"
        );

        // Every member of each GPU, with Placement's figures: the GPU's provider and
        // its children, nothing free on either.
        for gpu in [&gpus.sliced, &gpus.whole] {
            let members = hooks(section(gpu), "ledger-member");
            let tree = get(&srv, &format!("/resource_providers?in_tree={gpu}")).await;
            let mut in_tree: Vec<&str> = tree["resource_providers"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["uuid"] == **gpu || p["parent_provider_uuid"] == **gpu)
                .map(|p| p["uuid"].as_str().unwrap())
                .collect();
            in_tree.sort();
            let mut shown: Vec<&str> = members
                .iter()
                .map(|m| attr(m, "data-provider").unwrap())
                .collect();
            shown.sort();
            assert_eq!(shown, in_tree, "{backend:?}");
            for m in &members {
                let (rp, rc) = (
                    attr(m, "data-provider").unwrap(),
                    attr(m, "data-rc").unwrap(),
                );
                let inv = get(&srv, &format!("/resource_providers/{rp}/inventories/{rc}")).await;
                let usage = get(&srv, &format!("/resource_providers/{rp}/usages")).await;
                let (total, reserved) = (
                    inv["total"].as_i64().unwrap(),
                    inv["reserved"].as_i64().unwrap(),
                );
                let used = usage["usages"][rc].as_i64().unwrap_or(0);
                let capacity =
                    ((total - reserved) as f64 * inv["allocation_ratio"].as_f64().unwrap()) as i64;
                assert_eq!(num(m, "data-total"), total, "{m}");
                assert_eq!(num(m, "data-reserved"), reserved, "{m}");
                assert_eq!(num(m, "data-used"), used, "{m}");
                assert_eq!(num(m, "data-free"), capacity - used, "{m}");
                assert_eq!(num(m, "data-free"), 0, "{backend:?}: {m}");
            }
        }
        let slice_member = with(
            &hooks(sliced, "ledger-member"),
            "data-provider",
            &gpus.slice_rp,
        );
        assert_eq!(attr(slice_member[0], "data-label"), Some("1g.10gb"));
        assert_eq!(num(slice_member[0], "data-used"), 7);
        assert_eq!(num(slice_member[0], "data-held"), 7);
        let whole_member = with(&hooks(whole, "ledger-member"), "data-member", "whole");
        assert_eq!(
            attr(whole_member[0], "data-provider"),
            Some(gpus.whole.as_str())
        );
        assert_eq!(num(whole_member[0], "data-used"), 1);

        // A GPU's own page (its provider's or a partition's) shows its ledger alone; a
        // page of a host without partitioned GPUs, none.
        for (asked, gpu) in [(&gpus.whole, &gpus.whole), (&gpus.slice_rp, &gpus.sliced)] {
            let (_, _, one) = page(&c, &srv.console, &format!("/hosts/{asked}")).await;
            let shown: Vec<String> = hooks(&one, "ledger").iter().map(|t| gpu_of(t)).collect();
            assert_eq!(shown.iter().collect::<Vec<_>>(), [gpu]);
        }
        let other = compute_node(&srv, "cpu-1").await;
        let other = other["uuid"].as_str().unwrap();
        let (_, _, none) = page(&c, &srv.console, &format!("/hosts/{other}")).await;
        assert!(hooks(&none, "ledger").is_empty());

        // A release gives the slices back: the bar says so at once.
        common::accel::delete_allocations(&srv, &gpus.slice_holders[0]).await;
        let (_, _, html) = page(&c, &srv.console, &format!("/hosts/{}", gpus.sliced)).await;
        assert_eq!(hooks(&html, "slice-holder").len(), 6);
        assert_eq!(hooks(&html, "slice-free").len(), 2);
        srv.stop().await;
    }
}
