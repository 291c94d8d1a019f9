//! The operator's console in real headless Chromium (Debian's `chromium` and
//! `chromium-driver`, driven over WebDriver by `accel_testkit::browser`), against a
//! server with fake devices, bound ARQs and Kubernetes slots:
//!
//! - noauth, on every backend: every page loads with the noauth banner; the numbers
//!   each page shows (usage bars, provider counts, ARQ states, consumers'
//!   allocations, slot counts, hosts per profile, candidate counts) equal what the
//!   Placement and accelerator APIs answer for the same data; the explainer form,
//!   submitted, shows Placement's candidate count and a reason for every root that
//!   does not fit; issue 31's console: an unhealthy device's reason and since when,
//!   times in UTC, names never cut nor broken inside a word, vendors and products by
//!   name, the hosts filtered through the form, a host's instances, ARQs and device
//!   history, ARQs naming their device, an instance with ARQs only among the
//!   consumers, the explainer's request decoded, the estate summary against the
//!   accelerator API; the SQLite run saves the README's screenshots
//!   (`console-{hosts,tree,history,overview,explain}.png`, in `docs/images` with
//!   `ACCEL_SCREENSHOTS=docs/images`, see `images()`);
//! - a host's GPU ledgers (issue 45), on SQLite: an H100 in seven `1g.10gb` slices and
//!   one given whole, each holder's cell as wide as its slices, named and linked to
//!   its consumer (`console-ledger.png`);
//! - keystone, against the fake Keystone: the login form, the session cookie's
//!   flags, a refused password, and a member of project A who sees A's ARQs and none
//!   of project B's.
//!
//! Every number is read from the page's `data-` attributes (the console's test
//! hooks, listed in its module doc), never parsed out of display text. Without a
//! browser the tests print that they skipped, and fail when `ACCEL_REQUIRE_BROWSER=1`.

mod common;

use accel_agent::config::Settings;
use accel_agent::testing::{self as sysfs, FakeSysfs};
use accel_agent::Agent;
use accel_api::agent::{KubernetesUsage, SlotClaim};
use accel_server::auth::keystone::{Keystone, KeystoneConfig};
use accel_server::auth::AuthStrategy;
use accel_server::ServerConfig;
use accel_testkit::browser::{Browser, Element};
use accel_testkit::server::TestServer;
use common::accel::{arq_uuids, compute_node, get, placement, workers, FakeNova, Server, TempDb};
use common::gpus::TwoH100s;
use common::keystone::{FakeKeystone, Subject};
use common::BACKENDS;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The compute node the built-in fake source reports (`cn1_FakeDevice`, 16 FPGA).
const FAKE_HOST: &str = "cn1";
/// A node with two GPUs in Kubernetes' hands and an Intel PAC with two regions.
const EDGE: &str = "edge-1";
const GPUS: [&str; 2] = ["0000:17:00.0", "0000:31:00.0"];
/// A third A100 on edge-1 whose function reports fatal AER errors: the agent finds it
/// unhealthy and says why.
const SICK_GPU: &str = "0000:4b:00.0";
const PROFILE: &str = "fpga-1";

/// Where the screenshots go: `ACCEL_SCREENSHOTS` when set (`ACCEL_SCREENSHOTS=docs/images`
/// retakes the README's pictures), else the test target's scratch folder, so an ordinary
/// run leaves the checkout as it was.
fn images() -> PathBuf {
    match std::env::var_os("ACCEL_SCREENSHOTS") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../..")
                    .join(dir)
            }
        }
        None => Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots"),
    }
}

fn fake_rp() -> String {
    accel_store::accelerator::report::provider_uuid(&format!("{FAKE_HOST}_FakeDevice"))
}

/// What the test put in and must find on the pages.
struct Estate {
    instance: String,
    bound: Vec<String>,
    /// An instance with a bound ARQ and no allocation.
    lone: String,
    lone_arqs: Vec<String>,
    unbound: Vec<String>,
    pods: BTreeMap<String, String>,
}

/// The data every page shows: VCPU on `cn1` and an instance holding 2 VCPU and two of
/// its FPGA units, its two ARQs bound there (the Nova event delivered), one ARQ not
/// bound, and `edge-1` reported by the real agent over a fake sysfs with its two GPUs
/// held by two pods through the Kubernetes usage endpoint.
async fn fill(srv: &Server, nova: &FakeNova, dir: &Path) -> Estate {
    let cn1 = get(srv, &format!("/resource_providers?name={FAKE_HOST}")).await;
    let generation = cn1["resource_providers"][0]["generation"].clone();
    let cn1 = cn1["resource_providers"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, v) = placement(
        srv,
        reqwest::Method::PUT,
        &format!("/resource_providers/{cn1}/inventories"),
        Some(json!({"resource_provider_generation": generation,
                    "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096, "reserved": 512}}})),
    )
    .await;
    assert_eq!(s, 200, "{v}");

    srv.create_profile(
        PROFILE,
        json!([{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]),
    )
    .await;
    let instance = uuid::Uuid::new_v4().to_string();
    let (s, v) = placement(
        srv,
        reqwest::Method::PUT,
        &format!("/allocations/{instance}"),
        Some(
            json!({"allocations": {cn1: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}},
                                    fake_rp(): {"resources": {"FPGA": 2}}},
                    "project_id": "p1", "user_id": "nova", "consumer_generation": null,
                    "consumer_type": "INSTANCE"}),
        ),
    )
    .await;
    assert_eq!(s, 204, "{v}");
    let mut bound = srv.create_arqs(PROFILE).await;
    bound.extend(srv.create_arqs(PROFILE).await);
    srv.bind(&bound, FAKE_HOST, &fake_rp(), &instance).await;
    srv.wait_resolved(&instance).await;
    nova.wait_for("the bound event", |n| n.events().len() == 2)
        .await;
    let unbound = srv.create_arqs(PROFILE).await;
    let lone = uuid::Uuid::new_v4().to_string();
    let lone_arqs = srv.create_arqs(PROFILE).await;
    srv.bind(&lone_arqs, FAKE_HOST, &fake_rp(), &lone).await;
    srv.wait_resolved(&lone).await;

    // edge-1: two GPUs for pods, an Intel PAC with two regions (VFs).
    let fs = FakeSysfs::new(dir.join("sys"));
    assert_eq!(sysfs::two_gpus(&fs), GPUS);
    sysfs::pac_opae(&fs, 0x5e, 2);
    fs.function(SICK_GPU, 0x10de, 0x20b0, 0x030200)
        .driver("vfio-pci")
        .iommu_group(42)
        .file("aer_dev_fatal", "ERR_FATAL 0\nTOTAL_ERR_FATAL 2\n");
    compute_node(srv, EDGE).await;
    let settings = Settings::new(&srv.accel, EDGE, &fs.root);
    Agent::new(settings).unwrap().step().await.unwrap();

    let slot = |i: usize, n: usize| {
        format!(
            "gpu-{}-{n}",
            accel_k8s::device::instance_hash(EDGE, GPUS[i])
        )
    };
    let usage = KubernetesUsage {
        usage: BTreeMap::from([
            (slot(0, 0), format!("C:0:{EDGE}")),
            (slot(1, 0), EDGE.to_owned()),
        ]),
        claims: vec![
            SlotClaim {
                slot: slot(0, 0),
                device: GPUS[0].into(),
                pod: Some("default/train".into()),
            },
            SlotClaim {
                slot: slot(1, 0),
                device: GPUS[1].into(),
                pod: Some("default/infer".into()),
            },
        ],
    };
    let agent = accel_api::agent::Client::new(
        accel_api::http::Http::with_token(&srv.accel, "admin").unwrap(),
    );
    let saved = agent.kubernetes_save(EDGE, &usage).await.unwrap();
    assert_eq!(saved.consumers.len(), 2, "{saved:?}");
    let pods = ["default/train", "default/infer"]
        .into_iter()
        .map(|p| {
            (
                accel_store::accelerator::kubernetes::pod_consumer(EDGE, p),
                p.to_owned(),
            )
        })
        .collect();
    Estate {
        instance,
        bound,
        lone,
        lone_arqs,
        unbound,
        pods,
    }
}

async fn attr(b: &Browser, e: &Element, name: &str) -> String {
    b.attr(e, name)
        .await
        .unwrap_or_else(|| panic!("no {name} on the element"))
}

async fn num(b: &Browser, e: &Element, name: &str) -> i64 {
    let v = attr(b, e, name).await;
    v.parse()
        .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
}

/// Opens `path`, checks what every page carries, and returns nothing: the page is
/// the browser's.
async fn open(b: &Browser, console: &str, path: &str, noauth: bool) {
    b.goto(&format!("{console}{path}")).await;
    let banner = b.find_all_now("[data-test=noauth-banner]").await;
    assert_eq!(!banner.is_empty(), noauth, "noauth banner on {path}");
    assert!(
        b.find_all_now("[data-test=error]").await.is_empty(),
        "{path} shows an error: {}",
        b.source().await
    );
}

/// Every usage bar on the page against the provider's inventories and usages in
/// Placement; answers how many bars were checked.
async fn check_bars(b: &Browser, srv: &Server) -> usize {
    let bars = b.find_all_now("[data-test=usage-bar]").await;
    let mut cache: BTreeMap<String, (Value, Value)> = BTreeMap::new();
    for bar in &bars {
        let rp = attr(b, bar, "data-provider").await;
        let rc = attr(b, bar, "data-rc").await;
        if !cache.contains_key(&rp) {
            let inv = get(srv, &format!("/resource_providers/{rp}/inventories")).await;
            let usages = get(srv, &format!("/resource_providers/{rp}/usages")).await;
            cache.insert(rp.clone(), (inv, usages));
        }
        let (inv, usages) = &cache[&rp];
        let i = &inv["inventories"][&rc];
        assert!(
            i.is_object(),
            "a bar for {rp} {rc}, which has no inventory: {inv}"
        );
        let used = usages["usages"][&rc].as_i64().unwrap_or(0);
        assert_eq!(num(b, bar, "data-used").await, used, "used {rp} {rc}");
        assert_eq!(
            num(b, bar, "data-total").await,
            i["total"].as_i64().unwrap(),
            "total {rp} {rc}"
        );
        assert_eq!(
            num(b, bar, "data-reserved").await,
            i["reserved"].as_i64().unwrap(),
            "reserved {rp} {rc}"
        );
        let capacity = ((i["total"].as_i64().unwrap() - i["reserved"].as_i64().unwrap()) as f64
            * i["allocation_ratio"].as_f64().unwrap()) as i64;
        assert_eq!(
            num(b, bar, "data-capacity").await,
            capacity,
            "capacity {rp} {rc}"
        );
    }
    bars.len()
}

/// Where the browser broke the text of `e` into lines: for each break, the
/// character before it and the one after, as laid out on the page.
async fn line_breaks(b: &Browser, e: &Element) -> Vec<String> {
    let v = b
        .execute(
            "const el = arguments[0], chars = [];
             const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
             let n;
             while ((n = w.nextNode())) {
               for (let i = 0; i < n.data.length; i++) {
                 const r = document.createRange();
                 r.setStart(n, i); r.setEnd(n, i + 1);
                 const rect = r.getClientRects()[0];
                 if (rect) chars.push([n.data[i], rect.top]);
               }
             }
             const out = [];
             for (let i = 1; i < chars.length; i++)
               if (chars[i][1] > chars[i - 1][1] + 2) out.push(chars[i - 1][0] + chars[i][0]);
             return out;",
            &[e],
        )
        .await;
    serde_json::from_value(v.clone()).unwrap_or_else(|_| panic!("line breaks: {v}"))
}

/// Whether `e` shows all of its content (nothing clipped or cut by an ellipsis).
async fn shown_whole(b: &Browser, e: &Element) -> bool {
    b.execute(
        "const e = arguments[0], s = getComputedStyle(e);
         return e.scrollWidth <= e.clientWidth + 1 && s.textOverflow !== 'ellipsis';",
        &[e],
    )
    .await
        == Value::Bool(true)
}

/// Whether a line break between these two characters is at a sensible point: after
/// `_`, `-` or `/`, or after a `.` that a letter follows (never inside a word, a
/// number or a PCI address).
fn sensible(pair: &str) -> bool {
    let mut c = pair.chars();
    match (c.next(), c.next()) {
        (Some('_' | '-' | '/'), _) => true,
        (Some('.'), Some(n)) => n.is_alphabetic(),
        _ => false,
    }
}

/// Every resource class and provider name on the page is shown whole, and wraps (if
/// it wraps) only at sensible points ([`sensible`]); answers how many names were
/// checked.
async fn check_names(b: &Browser) -> usize {
    let mut n = 0;
    for e in b.find_all_now("[data-test=rc-name]").await {
        let bar = b
            .execute(
                "return arguments[0].closest('[data-test=usage-bar]').dataset.rc",
                &[&e],
            )
            .await;
        assert_eq!(Value::String(b.text(&e).await), bar, "a class name cut");
        assert!(shown_whole(b, &e).await, "{bar} is clipped");
        for br in line_breaks(b, &e).await {
            assert!(sensible(&br), "{bar} breaks at {br:?}");
        }
        n += 1;
    }
    for e in b.find_all_now("[data-test=provider-name]").await {
        let name = b.text(&e).await;
        for br in line_breaks(b, &e).await {
            assert!(sensible(&br), "{name} breaks at {br:?}");
        }
        n += 1;
    }
    n
}

/// Every time on the page says its zone.
async fn check_times(b: &Browser) -> usize {
    let times = b.find_all_now("time").await;
    for t in &times {
        let text = b.text(t).await;
        assert!(text.ends_with(" UTC"), "a time without its zone: {text:?}");
    }
    times.len()
}

/// The uuids of the providers in `root`'s tree, from Placement.
async fn tree_uuids(srv: &Server, root: &str) -> BTreeSet<String> {
    let v = get(srv, &format!("/resource_providers?in_tree={root}")).await;
    v["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["uuid"].as_str().unwrap().to_owned())
        .collect()
}

/// The roots of the providers an allocation-candidates answer summarises: the roots
/// with at least one candidate (an empty answer summarises none).
fn roots_of(answer: &Value) -> BTreeSet<String> {
    answer["provider_summaries"]
        .as_object()
        .unwrap()
        .values()
        .map(|s| s["root_provider_uuid"].as_str().unwrap().to_owned())
        .collect()
}

async fn hosts_page(b: &Browser, srv: &Server, console: &str, shots: bool) {
    open(b, console, "/hosts", true).await;
    let rows = b.find_all("[data-test=host-row]").await;
    let roots: Vec<Value> = get(srv, "/resource_providers").await["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["parent_provider_uuid"].is_null())
        .cloned()
        .collect();
    let pager = b.find("[data-test=pager]").await;
    assert_eq!(num(b, &pager, "data-total").await, roots.len() as i64);
    assert_eq!(rows.len(), roots.len());
    for row in &rows {
        let uuid = attr(b, row, "data-uuid").await;
        let root = roots
            .iter()
            .find(|r| r["uuid"] == uuid.as_str())
            .unwrap_or_else(|| panic!("host row {uuid} is no root provider"));
        assert_eq!(
            attr(b, row, "data-host").await,
            root["name"].as_str().unwrap()
        );
        assert_eq!(
            num(b, row, "data-providers").await as usize,
            tree_uuids(srv, &uuid).await.len(),
            "providers of {uuid}"
        );
    }
    assert!(
        check_bars(b, srv).await >= 3,
        "usage bars on the hosts page"
    );
    // The fake device's trait and the last report are shown.
    let traits: BTreeSet<String> = {
        let mut s = BTreeSet::new();
        for t in b.find_all_now("[data-test=trait]").await {
            s.insert(attr(b, &t, "data-trait").await);
        }
        s
    };
    assert!(traits.contains("CUSTOM_FAKE_DEVICE"), "{traits:?}");
    let reports = b.find_all_now("[data-test=last-report]").await;
    assert!(!reports.is_empty(), "no last agent report shown");
    for r in &reports {
        assert!(num(b, r, "data-epoch").await > 1_700_000_000);
    }
    assert!(check_names(b).await >= 6, "names on the hosts page");
    assert!(check_times(b).await >= 2, "times on the hosts page");
    // The sick GPU: unhealthy, the agent's reason and since when, names not ids.
    let sick_rp = accel_store::accelerator::report::provider_uuid(&format!("{EDGE}_{SICK_GPU}"));
    let row = b
        .find(&format!(
            "[data-test=provider-row][data-uuid=\"{sick_rp}\"]"
        ))
        .await;
    assert_eq!(attr(b, &row, "data-health").await, "unhealthy");
    let reason = b.find_in(&row, "[data-test=health-reason]").await;
    let text = b.text(&reason).await;
    assert!(
        text.starts_with("2 fatal PCIe AER error(s)") && text.contains(" UTC"),
        "{text}"
    );
    assert!(num(b, &reason, "data-since").await > 1_700_000_000);
    let vendor = b.find_in(&row, "[data-test=vendor-name]").await;
    assert_eq!(b.text(&vendor).await, "NVIDIA (10de)");
    let product = b.find_in(&row, "[data-test=product-name]").await;
    assert_eq!(b.text(&product).await, "A100 SXM4 40GB");
    if shots {
        b.save_screenshot(&images().join("console-hosts.png")).await;
    }

    // Filters, through the form: hosts with a device neither ok (edge-1), then
    // with an FPGA (cn1's fake one and edge-1's PAC), then with a QAT (none).
    for (ty, health, want) in [
        ("", "not_ok", vec![EDGE]),
        ("FPGA", "", vec![FAKE_HOST, EDGE]),
        ("GPU", "ok", vec![EDGE]),
        ("QAT", "", vec![]),
    ] {
        open(b, console, "/hosts", true).await;
        let form = b.find("[data-test=hosts-filter]").await;
        for (select, value) in [("filter-type", ty), ("filter-health", health)] {
            let option = b
                .find_in(
                    &form,
                    &format!("[data-test={select}] option[value=\"{value}\"]"),
                )
                .await;
            b.click(&option).await;
        }
        let submit = b.find_in(&form, "[type=submit]").await;
        b.click_and_wait(&submit).await;
        let url = b.url().await;
        assert!(url.contains(&format!("type={ty}&health={health}")), "{url}");
        let mut names = Vec::new();
        for r in b.find_all_now("[data-test=host-row]").await {
            names.push(attr(b, &r, "data-host").await);
        }
        assert_eq!(names, want, "type {ty:?} health {health:?}");
    }
    open(b, console, "/hosts", true).await;

    // Search by host: only edge-1 is left.
    let q = b.find("input[data-test=search]").await;
    b.clear(&q).await;
    b.send_keys(&q, EDGE).await;
    b.submit(&q).await;
    let mut names = Vec::new();
    for r in b.find_all("[data-test=host-row]").await {
        names.push(attr(b, &r, "data-host").await);
    }
    assert_eq!(names, [EDGE]);
    assert_eq!(
        num(b, &b.find("[data-test=pager]").await, "data-total").await,
        1
    );
}

async fn tree_page(b: &Browser, srv: &Server, console: &str, e: &Estate, shots: bool) {
    let edge = get(srv, &format!("/resource_providers?name={EDGE}")).await;
    let edge = edge["resource_providers"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    open(b, console, &format!("/hosts/{edge}"), true).await;
    let mut shown = BTreeSet::new();
    let mut deepest = 0;
    for row in b.find_all("[data-test=provider-row]").await {
        shown.insert(attr(b, &row, "data-uuid").await);
        deepest = deepest.max(num(b, &row, "data-depth").await);
    }
    assert_eq!(shown, tree_uuids(srv, &edge).await, "the tree of {EDGE}");
    // The PAC's regions sit under its card: at least two levels below the node.
    assert!(deepest >= 2, "deepest provider at depth {deepest}");
    assert!(check_bars(b, srv).await >= 2);
    assert!(check_names(b).await >= 4);
    // Vendors and products by name, for every device of the tree.
    for d in b.find_all_now("[data-test=device]").await {
        let (vendor, model) = (
            attr(b, &d, "data-vendor").await,
            attr(b, &d, "data-model").await,
        );
        let name = b
            .text(&b.find_in(&d, "[data-test=vendor-name]").await)
            .await;
        let want = match vendor.as_str() {
            "10de" => "NVIDIA (10de)",
            "8086" => "Intel (8086)",
            other => panic!("a device of vendor {other} on {EDGE}"),
        };
        assert_eq!(name, want);
        let product = b
            .text(&b.find_in(&d, "[data-test=product-name]").await)
            .await;
        // A driver that knows no name reports the device id: the page names it.
        if model.len() == 4 && u16::from_str_radix(&model, 16).is_ok() {
            assert_ne!(
                product, model,
                "product {model} of {vendor} shown as its id"
            );
        } else {
            assert_eq!(product, model);
        }
    }
    if shots {
        b.save_screenshot(&images().join("console-tree.png")).await;
    }

    // What runs on the host: its pods, no ARQ.
    let mut consumers = BTreeSet::new();
    for c in b.find_all_now("[data-test=host-consumer]").await {
        assert_eq!(attr(b, &c, "data-kind").await, "pod");
        consumers.insert(attr(b, &c, "data-consumer").await);
    }
    assert_eq!(consumers, e.pods.keys().cloned().collect::<BTreeSet<_>>());
    let arqs = b.find("[data-test=host-arqs]").await;
    assert_eq!(num(b, &arqs, "data-total").await, 0);

    // The devices' history: each first report, and the sick GPU going unhealthy
    // with the agent's reason.
    let mut kinds = BTreeMap::<String, usize>::new();
    let mut sick = Vec::new();
    for r in b.find_all_now("[data-test=history-row]").await {
        let kind = attr(b, &r, "data-kind").await;
        if kind == "health" {
            sick.push(b.text(&r).await);
        }
        *kinds.entry(kind).or_default() += 1;
    }
    let devices = b.find_all_now("[data-test=device]").await.len();
    assert!(
        kinds["report"] >= 4,
        "{kinds:?} ({devices} device providers)"
    );
    assert_eq!(sick.len(), 1, "{sick:?}");
    assert!(
        sick[0].contains("unhealthy: 2 fatal PCIe AER error(s)"),
        "{sick:?}"
    );
    assert!(sick[0].contains(" UTC"), "{sick:?}");
    assert!(check_times(b).await >= kinds.values().sum::<usize>());
    if shots {
        let h = b.find("[data-test=host-consumers]").await;
        b.scroll_to(&h).await;
        b.save_screenshot(&images().join("console-history.png"))
            .await;
    }

    // cn1: its ARQs (the API's, by host) and their binds in the device's history.
    let cn1 = get(srv, &format!("/resource_providers?name={FAKE_HOST}")).await;
    let cn1 = cn1["resource_providers"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    open(b, console, &format!("/hosts/{cn1}"), true).await;
    let (_, api) = srv.admin_get("/v2/accelerator_requests").await;
    let on_cn1: BTreeSet<String> = api["arqs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["hostname"] == FAKE_HOST)
        .map(|a| a["uuid"].as_str().unwrap().to_owned())
        .collect();
    let mut shown = BTreeSet::new();
    for a in b.find_all_now("[data-test=host-arq]").await {
        shown.insert(attr(b, &a, "data-arq").await);
    }
    assert_eq!(shown, on_cn1);
    assert_eq!(on_cn1.len(), e.bound.len() + e.lone_arqs.len());
    let mut consumers = BTreeSet::new();
    for c in b.find_all_now("[data-test=host-consumer]").await {
        consumers.insert(attr(b, &c, "data-consumer").await);
    }
    assert_eq!(
        consumers,
        BTreeSet::from([e.instance.clone(), e.lone.clone()])
    );
    let binds = b
        .find_all_now("[data-test=history-row][data-kind=bind]")
        .await;
    assert_eq!(binds.len(), on_cn1.len());
    for r in &binds {
        let text = b.text(r).await;
        assert!(on_cn1.iter().any(|a| text.contains(a.as_str())), "{text}");
    }
}

async fn consumers_page(b: &Browser, srv: &Server, console: &str, e: &Estate) {
    open(b, console, "/consumers", true).await;
    let mut seen = BTreeMap::new();
    for row in b.find_all("[data-test=consumer-row]").await {
        let c = attr(b, &row, "data-consumer").await;
        let kind = attr(b, &row, "data-kind").await;
        let mut allocs = BTreeMap::new();
        for a in b.find_all_in(&row, "[data-test=allocation]").await {
            allocs.insert(
                (
                    attr(b, &a, "data-provider").await,
                    attr(b, &a, "data-rc").await,
                ),
                num(b, &a, "data-used").await,
            );
        }
        let mut arqs = BTreeSet::new();
        for a in b.find_all_in(&row, "[data-test=arq]").await {
            arqs.insert(attr(b, &a, "data-arq").await);
        }
        // The page's allocations are Placement's for that consumer.
        let api = get(srv, &format!("/allocations/{c}")).await;
        let want: BTreeMap<(String, String), i64> = api["allocations"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(rp, a)| {
                a["resources"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(rc, n)| ((rp.clone(), rc.clone()), n.as_i64().unwrap()))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(allocs, want, "allocations of {c}");
        seen.insert(c, (kind, arqs));
    }
    let (kind, arqs) = &seen[&e.instance];
    assert_eq!(kind, "vm");
    assert_eq!(arqs, &e.bound.iter().cloned().collect::<BTreeSet<_>>());
    for pod in e.pods.keys() {
        assert_eq!(seen[pod].0, "pod", "consumer {pod}");
    }
    // An instance with ARQs and no allocation is listed, with its ARQ.
    let (kind, arqs) = &seen[&e.lone];
    assert_eq!(kind, "vm");
    assert_eq!(arqs, &e.lone_arqs.iter().cloned().collect::<BTreeSet<_>>());
    let row = b
        .find(&format!(
            "[data-test=consumer-row][data-consumer=\"{}\"]",
            e.lone
        ))
        .await;
    assert_eq!(
        b.find_all_in(&row, "[data-test=no-allocation]").await.len(),
        1
    );
}

async fn arqs_page(b: &Browser, srv: &Server, console: &str, e: &Estate) {
    open(b, console, "/arqs", true).await;
    let (s, api) = srv.admin_get("/v2/accelerator_requests").await;
    assert_eq!(s, 200);
    let want: BTreeMap<String, (String, String)> = api["arqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["uuid"].as_str().unwrap().to_owned(),
                (
                    a["state"].as_str().unwrap().to_owned(),
                    a["instance_uuid"].as_str().unwrap_or("").to_owned(),
                ),
            )
        })
        .collect();
    let mut shown = BTreeMap::new();
    for row in b.find_all("[data-test=arq-row]").await {
        let state = attr(b, &row, "data-state").await;
        let instance = b.attr(&row, "data-instance").await.unwrap_or_default();
        shown.insert(attr(b, &row, "data-arq").await, (state, instance));
    }
    assert_eq!(shown, want);
    assert_eq!(
        want.len(),
        e.bound.len() + e.lone_arqs.len() + e.unbound.len()
    );
    // Devices by their provider's name, as Placement names it.
    let devices = b.find_all_now("[data-test=arq-device]").await;
    assert_eq!(devices.len(), e.bound.len() + e.lone_arqs.len());
    for d in &devices {
        let rp = attr(b, d, "data-provider").await;
        let name = get(srv, &format!("/resource_providers/{rp}")).await["name"].clone();
        assert_eq!(Value::String(b.text(d).await), name);
    }
    for a in &e.bound {
        assert_eq!(shown[a].0, "Bound");
        assert_eq!(shown[a].1, e.instance);
    }
}

/// The estate summary: devices by type and vendor as the accelerator API lists them;
/// the GPUs the pods hold are used, the sick one unhealthy and reserved; cn1's fake
/// FPGA is used by the instance.
async fn overview_page(b: &Browser, srv: &Server, console: &str, shots: bool) {
    open(b, console, "/overview", true).await;
    let (s, api) = srv.admin_get("/v2/devices").await;
    assert_eq!(s, 200, "{api}");
    let mut want = BTreeMap::<(String, String), i64>::new();
    for d in api["devices"].as_array().unwrap() {
        let key = (
            d["type"].as_str().unwrap().to_owned(),
            d["vendor"].as_str().unwrap().to_owned(),
        );
        *want.entry(key).or_default() += 1;
    }
    let mut shown = BTreeMap::new();
    let mut rows = BTreeMap::new();
    let mut sums = [0i64; 5];
    const COLUMNS: [&str; 5] = [
        "data-total",
        "data-used",
        "data-free",
        "data-unhealthy",
        "data-reserved",
    ];
    for r in b.find_all("[data-test=summary-row]").await {
        let key = (
            attr(b, &r, "data-type").await,
            attr(b, &r, "data-vendor").await,
        );
        let mut counts = [0i64; 5];
        for (i, c) in COLUMNS.iter().enumerate() {
            counts[i] = num(b, &r, c).await;
            sums[i] += counts[i];
        }
        shown.insert(key.clone(), counts[0]);
        rows.insert(key, counts);
    }
    assert_eq!(shown, want);
    let gpus = rows[&("GPU".to_owned(), "10de".to_owned())];
    // total, used (two pods), free, unhealthy (the sick one), reserved (it too).
    assert_eq!(gpus, [3, 2, 0, 1, 1]);
    let fake = rows[&("FPGA".to_owned(), "0xABCD".to_owned())];
    assert_eq!(fake, [1, 1, 0, 0, 0]);
    let total = b.find("[data-test=summary-total]").await;
    for (i, c) in COLUMNS.iter().enumerate() {
        assert_eq!(num(b, &total, c).await, sums[i], "{c}");
    }
    let text = b.text_of("[data-test=summary]").await;
    assert!(
        text.contains("NVIDIA (10de)") && text.contains("Intel (8086)"),
        "{text}"
    );
    if shots {
        b.save_screenshot(&images().join("console-overview.png"))
            .await;
    }
}

async fn profiles_page(b: &Browser, srv: &Server, console: &str) {
    open(b, console, "/profiles", true).await;
    let row = b
        .find(&format!(
            "[data-test=profile-row][data-profile=\"{PROFILE}\"]"
        ))
        .await;
    // Nova's request for the profile's one group.
    let roots = roots_of(
        &get(
            srv,
            "/allocation_candidates?resources1=FPGA:1&required1=CUSTOM_FAKE_DEVICE",
        )
        .await,
    );
    assert_eq!(num(b, &row, "data-hosts").await as usize, roots.len());
    let mut hosts = BTreeSet::new();
    for h in b.find_all_in(&row, "[data-test=profile-host]").await {
        hosts.insert(attr(b, &h, "data-host").await);
    }
    assert_eq!(hosts, BTreeSet::from([FAKE_HOST.to_owned()]));
}

async fn kubernetes_page(b: &Browser, srv: &Server, console: &str) {
    open(b, console, "/kubernetes", true).await;
    let node = b
        .find(&format!("[data-test=k8s-node][data-host=\"{EDGE}\"]"))
        .await;
    let (s, api) = srv
        .admin_get(&format!("/v2/agent/hosts/{EDGE}/kubernetes"))
        .await;
    assert_eq!(s, 200, "{api}");
    let usage = api["usage"].as_object().unwrap();
    let mut pods = BTreeSet::new();
    let mut kinds = BTreeMap::<String, usize>::new();
    for slot in b.find_all_in(&node, "[data-test=slot]").await {
        let id = attr(b, &slot, "data-slot").await;
        assert!(usage.contains_key(&id), "slot {id} is not in {usage:?}");
        *kinds.entry(attr(b, &slot, "data-kind").await).or_default() += 1;
        if let Some(p) = b.attr(&slot, "data-pod").await.filter(|p| !p.is_empty()) {
            pods.insert(p);
        }
    }
    let configuration = usage
        .values()
        .filter(|v| v.as_str().unwrap().starts_with("C:"))
        .count();
    assert_eq!(num(b, &node, "data-slots").await as usize, usage.len());
    assert_eq!(
        num(b, &node, "data-configuration-level").await as usize,
        configuration
    );
    assert_eq!(
        num(b, &node, "data-instance-level").await as usize,
        usage.len() - configuration
    );
    assert_eq!(
        pods,
        BTreeSet::from(["default/infer".to_owned(), "default/train".to_owned()])
    );
}

/// The uuids of the explainer's root rows on the page now, each checked: a fitting
/// root has no reason, another at least one, each with a code and words.
async fn root_rows(b: &Browser) -> BTreeMap<String, bool> {
    let mut roots = BTreeMap::new();
    for row in b.find_all_now("[data-test=root-row]").await {
        let uuid = attr(b, &row, "data-root").await;
        let fits = attr(b, &row, "data-fits").await == "true";
        let reasons = b.find_all_in(&row, "[data-test=reason]").await;
        if fits {
            assert!(reasons.is_empty(), "a fitting root {uuid} with reasons");
        } else {
            assert!(
                !reasons.is_empty(),
                "root {uuid} does not fit and says not why"
            );
            for r in &reasons {
                assert!(!attr(b, r, "data-code").await.is_empty());
                assert!(!b.text(r).await.trim().is_empty(), "a reason without words");
            }
        }
        roots.insert(uuid, fits);
    }
    roots
}

/// Submits the explainer's form with `query` and checks the answer against
/// Placement's: the candidates in its order, the roots that fit (the page lists
/// those that do not first, the others one link away); answers the reason codes
/// shown for the roots that do not fit.
async fn explain(b: &Browser, srv: &Server, console: &str, query: &str) -> BTreeSet<String> {
    let all_roots: BTreeSet<String> = get(srv, "/resource_providers").await["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["parent_provider_uuid"].is_null())
        .map(|p| p["uuid"].as_str().unwrap().to_owned())
        .collect();
    open(b, console, "/explain", true).await;
    let form = b.find("[data-test=explain-form]").await;
    let field = b.find_in(&form, "textarea[name=query]").await;
    b.clear(&field).await;
    b.send_keys(&field, query).await;
    let submit = b.find_in(&form, "[type=submit]").await;
    b.click_and_wait(&submit).await;

    let answer = get(srv, &format!("/allocation_candidates?{query}")).await;
    let requests = answer["allocation_requests"].as_array().unwrap();
    let shown = b.find("[data-test=candidates]").await;
    assert_eq!(
        num(b, &shown, "data-count").await as usize,
        requests.len(),
        "{query}"
    );
    let items = b.find_all_now("[data-test=candidate]").await;
    assert_eq!(items.len(), requests.len().min(50));
    // Candidate i names the providers of Placement's allocation request i.
    for (i, item) in items.iter().enumerate() {
        let mut providers = BTreeSet::new();
        for a in b.find_all_in(item, "a").await {
            let href = attr(b, &a, "href").await;
            providers.insert(href.rsplit('/').next().unwrap().to_owned());
        }
        let want: BTreeSet<String> = requests[i]["allocations"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(providers, want, "candidate {i} of {query}");
    }
    let fit_roots = roots_of(&answer);
    let summary = b.find("[data-test=roots-summary]").await;
    assert_eq!(
        num(b, &summary, "data-roots").await as usize,
        all_roots.len()
    );
    assert_eq!(
        num(b, &summary, "data-fits").await as usize,
        fit_roots.len()
    );

    let unfit = root_rows(b).await;
    assert!(unfit.values().all(|f| !f), "{unfit:?}");
    let want: BTreeSet<String> = all_roots.difference(&fit_roots).cloned().collect();
    assert_eq!(
        unfit.keys().cloned().collect::<BTreeSet<_>>(),
        want,
        "{query}"
    );
    let mut codes = BTreeSet::new();
    for r in b.find_all_now("[data-test=reason]").await {
        codes.insert(attr(b, &r, "data-code").await);
    }
    let explained = b.url().await;
    b.goto(&format!("{explained}&show=fits")).await;
    let fits = root_rows(b).await;
    assert!(fits.values().all(|f| *f), "{fits:?}");
    assert_eq!(
        fits.keys().cloned().collect::<BTreeSet<_>>(),
        fit_roots,
        "{query}"
    );
    b.goto(&explained).await;
    codes
}

async fn explainer(b: &Browser, srv: &Server, console: &str, shots: bool) {
    explain(
        b,
        srv,
        console,
        "resources=VCPU:1&resources1=FPGA:1&required1=CUSTOM_FAKE_DEVICE&group_policy=isolate",
    )
    .await;
    // An empty answer, explained: 20 FPGA units on one device exceed cn1's 16, and
    // edge-1 has no VCPU.
    // As nova-scheduler logs it: percent-encoded. The request line reads decoded.
    let codes = explain(b, srv, console, "resources=VCPU%3A1&resources1=FPGA%3A20").await;
    assert_eq!(
        b.text_of("[data-test=explain-query]").await,
        "resources=VCPU:1&resources1=FPGA:20"
    );
    assert!(codes.contains("no_inventory"), "{codes:?}");
    assert!(
        codes.contains("capacity") || codes.contains("max_unit"),
        "{codes:?}"
    );
    if shots {
        // The answer, not the form: from the request line down.
        let request = b.find("[data-test=explain-query]").await;
        b.scroll_to(&request).await;
        b.save_screenshot(&images().join("console-explain.png"))
            .await;
    }
}

#[tokio::test]
async fn every_page_shows_what_the_apis_answer() {
    let Some(b) = Browser::start().await else {
        return;
    };
    for (i, backend) in BACKENDS.into_iter().enumerate() {
        let nova = FakeNova::start(true).await;
        let db = TempDb::fresh(backend).await;
        let srv = Server::start(&db.url, Some(FAKE_HOST), Some(workers(Some(&nova)))).await;
        let console = srv.console.clone();
        let dir = tempfile::tempdir().unwrap();
        let estate = fill(&srv, &nova, dir.path()).await;
        let shots = i == 0;

        hosts_page(&b, &srv, &console, shots).await;
        tree_page(&b, &srv, &console, &estate, shots).await;
        overview_page(&b, &srv, &console, shots).await;
        consumers_page(&b, &srv, &console, &estate).await;
        arqs_page(&b, &srv, &console, &estate).await;
        kubernetes_page(&b, &srv, &console).await;
        profiles_page(&b, &srv, &console).await;
        explainer(&b, &srv, &console, shots).await;
        srv.stop().await;
    }
    b.close().await;
}

/// accel in keystone mode against the fake Keystone (the service user `accel`, the
/// admin, and `alice` and `bob`, members of projects `proj-a` and `proj-b`), with its
/// console on port 0: the console's URL, the server, Keystone.
async fn keystone_server() -> (String, TestServer, FakeKeystone) {
    let ks = FakeKeystone::start().await;
    ks.add_user("secret", Subject::project("accel", "service", &["service"]));
    ks.add_user("pw-admin", admin());
    ks.add_user("pw-a", member("alice", "proj-a"));
    ks.add_user("pw-b", member("bob", "proj-b"));
    let cfg: KeystoneConfig = serde_json::from_value(json!({
        "auth_url": format!("{}/v3", ks.url),
        "username": "accel",
        "password": "secret",
        "project_name": "service",
    }))
    .unwrap();
    let store = accel_testkit::server::store(BACKENDS[0]).await;
    let server = TestServer::start(accel_testkit::server::builder(store).config(ServerConfig {
        auth_strategy: AuthStrategy::Keystone,
        keystone: Some(Arc::new(Keystone::new(cfg).unwrap())),
        ..Default::default()
    }))
    .await;
    (server.console.clone(), server, ks)
}

fn admin() -> Subject {
    Subject::project("admin", "admin-project", &["admin", "member", "reader"])
}

fn member(user: &str, project: &str) -> Subject {
    Subject::project(user, project, &["member", "reader"])
}

/// A request to the accelerator API with a Keystone token.
async fn as_user(
    server: &TestServer,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = reqwest::Client::new()
        .request(method, format!("{}{path}", server.accel))
        .header("x-auth-token", token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// The uuids of the ARQs `token`'s project sees through the API.
async fn arqs_seen(server: &TestServer, token: &str) -> BTreeSet<String> {
    let (s, v) = as_user(
        server,
        token,
        reqwest::Method::GET,
        "/v2/accelerator_requests",
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    arq_uuids(&v).into_iter().collect()
}

/// Logs in through the console's form.
async fn log_in(b: &Browser, console: &str, user: &str, password: &str, project: &str) {
    b.goto(&format!("{console}/login")).await;
    let form = b.find("[data-test=login-form]").await;
    for (name, value) in [("user", user), ("password", password), ("project", project)] {
        let field = b.find_in(&form, &format!("input[name={name}]")).await;
        b.clear(&field).await;
        b.send_keys(&field, value).await;
    }
    let submit = b.find_in(&form, "[type=submit]").await;
    b.click_and_wait(&submit).await;
}

/// The ARQs the console's ARQ page shows now: uuid → project.
async fn arqs_shown(b: &Browser, console: &str) -> BTreeMap<String, String> {
    open(b, console, "/arqs", false).await;
    b.find("[data-test=pager]").await;
    let mut out = BTreeMap::new();
    for row in b.find_all_now("[data-test=arq-row]").await {
        out.insert(
            attr(b, &row, "data-arq").await,
            attr(b, &row, "data-project").await,
        );
    }
    out
}

#[tokio::test]
async fn keystone_login_and_a_member_sees_its_own_projects_arqs() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let (console, server, ks) = keystone_server().await;
    let admin_token = ks.issue(admin());
    let (s, v) = as_user(
        &server,
        &admin_token,
        reqwest::Method::POST,
        "/v2/device_profiles",
        Some(json!([{"name": PROFILE, "groups": [{"resources:FPGA": "1"}]}])),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let (a, bb) = (
        ks.issue(member("alice", "proj-a")),
        ks.issue(member("bob", "proj-b")),
    );
    for token in [&a, &a, &bb] {
        let (s, v) = as_user(
            &server,
            token,
            reqwest::Method::POST,
            "/v2/accelerator_requests",
            Some(json!({"device_profile_name": PROFILE})),
        )
        .await;
        assert_eq!(s, 201, "{v}");
    }
    let (alices, bobs) = (arqs_seen(&server, &a).await, arqs_seen(&server, &bb).await);
    assert_eq!((alices.len(), bobs.len()), (2, 1));

    // Not logged in: every page asks for the login form.
    b.goto(&format!("{console}/arqs")).await;
    b.find("[data-test=login-form]").await;
    assert!(b.find_all_now("[data-test=arq-row]").await.is_empty());

    // A wrong password is refused and sets no session.
    log_in(&b, &console, "alice", "wrong", "proj-a-name").await;
    b.find("[data-test=login-error]").await;
    assert!(b.cookie("accel_console").await.is_none());

    log_in(&b, &console, "alice", "pw-a", "proj-a-name").await;
    let cookie = b.cookie("accel_console").await.expect("a session cookie");
    assert_eq!(cookie["httpOnly"], true, "{cookie}");
    assert_eq!(cookie["sameSite"], "Strict", "{cookie}");
    let shown = arqs_shown(&b, &console).await;
    let viewer = b.text_of("[data-test=viewer]").await;
    assert!(
        viewer.contains("alice") && viewer.contains("proj-a"),
        "{viewer}"
    );
    assert_eq!(shown.keys().cloned().collect::<BTreeSet<_>>(), alices);
    assert!(shown.values().all(|p| p == "proj-a"), "{shown:?}");
    let source = b.source().await;
    for bob in &bobs {
        assert!(
            !source.contains(bob.as_str()),
            "bob's ARQ {bob} on alice's page"
        );
    }

    // Hardware is the admin's (Placement's resource_providers:list): policy refuses it.
    b.goto(&format!("{console}/hosts")).await;
    let refusal = b.text_of("[data-test=error]").await;
    assert!(refusal.contains("Policy does not allow"), "{refusal}");
    b.goto(&format!("{console}/arqs")).await;

    // Logging out ends the session: the ARQ page asks for the login form again.
    let logout = b.find("[data-test=logout]").await;
    b.click_and_wait(&logout).await;
    b.goto(&format!("{console}/arqs")).await;
    b.find("[data-test=login-form]").await;

    // The admin sees both projects'.
    log_in(&b, &console, "admin", "pw-admin", "admin-project-name").await;
    let shown = arqs_shown(&b, &console).await;
    assert!(b.text_of("[data-test=viewer]").await.contains("admin"));
    let all: BTreeSet<String> = alices.union(&bobs).cloned().collect();
    assert_eq!(shown.keys().cloned().collect::<BTreeSet<_>>(), all);

    b.close().await;
    server.stop().await;
}

/// An element's rendered width in CSS pixels.
async fn width(b: &Browser, e: &Element) -> f64 {
    b.execute("return arguments[0].getBoundingClientRect().width", &[e])
        .await
        .as_f64()
        .expect("a width")
}

/// A host's GPU ledgers as a person sees them (issue 45), on SQLite (tests/console.rs
/// checks the same page's numbers on every backend): an H100 in seven `1g.10gb`
/// slices and one given whole. In the browser each holder's cell is as wide as its
/// slices (a one-slice cell an eighth of the bar, the whole GPU's all of it), and
/// every holder is named by its consumer and linked to it; the run saves
/// `console-ledger.png`.
#[tokio::test]
async fn gpu_ledgers_as_a_person_sees_them() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let db = TempDb::fresh(BACKENDS[0]).await;
    let srv = Server::start(&db.url, None, None).await;
    let gpus = TwoH100s::fill(&srv, "gpu-1").await;
    let node = get(&srv, "/resource_providers?name=gpu-1").await;
    let node = node["resource_providers"][0]["uuid"].as_str().unwrap();
    open(&b, &srv.console, &format!("/hosts/{node}"), true).await;

    let ledgers = b.find_all("[data-test=ledger]").await;
    assert_eq!(ledgers.len(), 2);
    let mut holders = Vec::new();
    for (ledger, gpu) in ledgers.iter().zip([&gpus.sliced, &gpus.whole]) {
        assert_eq!(&attr(&b, ledger, "data-gpu").await, gpu);
        let slices = num(&b, ledger, "data-slices").await;
        let bar = b.find_in(ledger, "[data-test=slice-bar]").await;
        let bar_width = width(&b, &bar).await;
        let mut occupied = 0;
        let mut here = Vec::new();
        for cell in b.find_all_in(&bar, "[data-test=slice-cell]").await {
            let size = num(&b, &cell, "data-size").await;
            occupied += size;
            // Equal columns (`table-layout: fixed`): a cell's share of the bar is its
            // share of the slices.
            let share = width(&b, &cell).await / bar_width;
            let want = size as f64 / slices as f64;
            assert!(
                (share - want).abs() < 0.02,
                "a cell of {size} slices takes {share:.3} of the bar, not {want:.3}"
            );
            for h in b.find_all_in(&cell, "[data-test=slice-holder]").await {
                let consumer = attr(&b, &h, "data-consumer").await;
                let text = b.text(&h).await;
                assert!(
                    text.starts_with(&consumer[..8]),
                    "{text:?} does not name {consumer}"
                );
                assert_eq!(
                    attr(&b, &h, "href").await,
                    format!("/consumers?q={consumer}")
                );
                here.push((consumer, text));
            }
        }
        let free = b.find_all_in(&bar, "[data-test=slice-free]").await;
        assert_eq!(occupied + free.len() as i64, slices, "{gpu}");
        holders.push(here);
    }
    // Seven one-slice holders of 1g.10gb; one holder of the other GPU, whole.
    let sliced: BTreeSet<String> = holders[0].iter().map(|(c, _)| c.clone()).collect();
    assert_eq!(sliced, gpus.slice_holders.iter().cloned().collect());
    assert!(
        holders[0].iter().all(|(_, t)| t.ends_with("1g.10gb")),
        "{holders:?}"
    );
    assert_eq!(holders[1].len(), 1, "{holders:?}");
    assert_eq!(holders[1][0].0, gpus.whole_holder);
    assert!(holders[1][0].1.ends_with("whole GPU (VFIO)"), "{holders:?}");

    b.scroll_to(&ledgers[0]).await;
    b.save_screenshot(&images().join("console-ledger.png"))
        .await;
    srv.stop().await;
    b.close().await;
}
