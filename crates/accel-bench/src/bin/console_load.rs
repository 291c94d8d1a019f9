//! The console at estate scale: fills an empty `accel serve` (noauth) with a large
//! estate through its public APIs, then times each console page.
//!
//! Setup (untimed, `--clients` at once; skipped with `--no-fill`):
//!
//! 1. `--hosts` compute nodes `cn-NNNNN` (`POST /resource_providers`, inventory VCPU 64
//!    and MEMORY_MB 262144), each with `--devices` fake FPGA cards reported through the
//!    agent endpoint (`PUT /v2/agent/hosts/{host}/devices`: a provider per card under
//!    the node, class FPGA with `--handles` units, trait `CUSTOM_FAKE_DEVICE`); so
//!    10,000 hosts × 4 are 10,000 roots and 40,000 device providers;
//! 2. an instance's allocation (VCPU 4, MEMORY_MB 8192 and FPGA 1 on the first card)
//!    on every `--allocate-every`th host;
//! 3. the device profile `console-fpga` (`resources:FPGA=1`) and, on every
//!    `--arq-every`th host, an instance with one ARQ bound to its second card (the
//!    server's bind worker resolves them) and one ARQ left unbound;
//! 4. Kubernetes slot usage (two slots of the last card, one held by a pod) on every
//!    `--k8s-every`th host.
//!
//! With `--fill-only` it stops there, and `--no-fill` times a server filled before
//! (scripts/bench-console.sh has PostgreSQL analyze the tables in between, as its
//! autovacuum would soon after such a load).
//!
//! Timed: each page of `--page NAME=PATH` (repeatable; the defaults are the console's
//! pages: first page, a search, a host detail, the explainer, ...) fetched
//! `--requests` times one after another, as one operator's browser would; every answer
//! must be 200. Prints a Markdown table of median, p95 and max per page and exits
//! non-zero when any request failed or (with `--limit-ms`) a page's p95 is over it.
//!
//! ```sh
//! accel serve --database sqlite:///tmp/estate.db --console-listen 127.0.0.1:8790 &
//! cargo run --release -p accel-bench --bin console-load -- --hosts 10000 --devices 4
//! ```

use accel_api::accelerator::{bind_ops, patch_entry, ArqPatch, NewArqs};
use accel_api::agent::{self, KubernetesUsage, SlotClaim};
use accel_api::http::{Auth, Endpoint, Http, Method, Options, Request};
use accel_bench::{fake_report, run_phase, PhaseStats, TABLE_HEADER};
use anyhow::{bail, Context};
use clap::Parser;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use uuid::Uuid;

#[derive(Parser, Debug)]
#[command(about = "Console pages at estate scale: fill a server, then time each page")]
struct Args {
    /// Base URL of the Placement API.
    #[arg(long, default_value = "http://127.0.0.1:8778")]
    placement_url: String,
    /// Base URL of the accelerator API.
    #[arg(long, default_value = "http://127.0.0.1:6666")]
    accel_url: String,
    /// Base URL of the console.
    #[arg(long, default_value = "http://127.0.0.1:8790")]
    console_url: String,
    /// Compute nodes to create.
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Device providers (fake FPGA cards) per compute node.
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// Attach handles (FPGA units) per card.
    #[arg(long, default_value_t = 4)]
    handles: usize,
    /// An instance's allocation on every Nth host.
    #[arg(long, default_value_t = 4)]
    allocate_every: usize,
    /// A bound and an unbound ARQ on every Nth host.
    #[arg(long, default_value_t = 20)]
    arq_every: usize,
    /// Kubernetes slot usage on every Nth host.
    #[arg(long, default_value_t = 10)]
    k8s_every: usize,
    /// Concurrent clients while filling.
    #[arg(long, short = 'c', default_value_t = 8)]
    clients: usize,
    /// The server is filled already (by an earlier run with the same sizes).
    #[arg(long)]
    no_fill: bool,
    /// Fill, then exit without timing (a script analyzes the database in between).
    #[arg(long, conflicts_with = "no_fill")]
    fill_only: bool,
    /// Requests per page.
    #[arg(long, default_value_t = 50)]
    requests: usize,
    /// `NAME=PATH` of a console page to time (repeatable; replaces the defaults).
    /// `{host}` in PATH is replaced by a host's name, `{rp}` by its uuid.
    #[arg(long = "page")]
    pages: Vec<String>,
    /// Fail when a page's p95 is over this many milliseconds.
    #[arg(long)]
    limit_ms: Option<f64>,
    /// A label printed above the tables.
    #[arg(long, default_value = "")]
    label: String,
}

/// The console's pages timed by default.
const PAGES: &[(&str, &str)] = &[
    ("hosts, first page", "/hosts"),
    ("hosts, search by host", "/hosts?q={host}"),
    ("hosts, page 100", "/hosts?offset=4950"),
    ("host detail (provider tree)", "/hosts/{rp}"),
    ("consumers", "/consumers"),
    ("ARQs", "/arqs"),
    ("device profiles", "/profiles"),
    ("Kubernetes", "/kubernetes"),
    (
        "explainer",
        "/explain?query=resources%3DVCPU%3A1%26resources1%3DFPGA%3A1%26required1%3DCUSTOM_FAKE_DEVICE%26group_policy%3Disolate",
    ),
    (
        "explainer, empty answer (every root explained)",
        "/explain?query=resources%3DVCPU%3A1%26resources1%3DFPGA%3A20",
    ),
    ("ARQs, search by host", "/arqs?q={host}"),
    ("consumers, search by host", "/consumers?q={host}"),
];

/// The host the detail page and the search ask for.
const PROBE: usize = 4321;

fn host_name(i: usize) -> String {
    format!("cn-{i:05}")
}

/// The device provider uuid of `host`'s card `i`: the report's `uuid3(DNS, name)`.
fn card_rp(host: &str, i: usize) -> String {
    let suffix = if i == 0 { String::new() } else { i.to_string() };
    Uuid::new_v3(
        &Uuid::NAMESPACE_DNS,
        format!("{host}_FakeDevice{suffix}").as_bytes(),
    )
    .to_string()
}

fn http(url: &str, token: &str, headers: Vec<(&'static str, String)>, clients: usize) -> Http {
    Http::new(
        Endpoint::Url(url.trim_end_matches('/').to_owned()),
        Auth::Token(token.to_owned()),
        Options {
            pool_max_idle_per_host: Some(2 * clients),
            headers,
            ..Options::default()
        },
    )
    .expect("an HTTP client")
}

#[derive(Clone)]
struct Api {
    placement: Http,
    agent: agent::Client,
    admin: Http,
    nova: accel_api::accelerator::Client,
}

async fn ok(h: &Http, r: Request, what: &str) -> Result<(), String> {
    let reply = h.send(&r).await.map_err(|e| format!("{what}: {e}"))?;
    reply.success().map_err(|e| format!("{what}: {e}"))?;
    Ok(())
}

impl Api {
    /// Step 1 for host `i`: the compute node, its inventory, its cards.
    async fn host(&self, i: usize, devices: usize, handles: usize) -> Result<(), String> {
        let host = host_name(i);
        let p = |m, path: String| Request::new(m, path).microversion("placement 1.39");
        let uuid = Uuid::new_v3(&Uuid::NAMESPACE_DNS, host.as_bytes()).to_string();
        ok(
            &self.placement,
            p(Method::POST, "/resource_providers".into())
                .json(&json!({"name": host, "uuid": uuid})),
            "create compute node",
        )
        .await?;
        ok(
            &self.placement,
            p(
                Method::PUT,
                format!("/resource_providers/{uuid}/inventories"),
            )
            .json(&json!({
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": 64}, "MEMORY_MB": {"total": 262144}},
            })),
            "compute node inventory",
        )
        .await?;
        self.agent
            .report(&host, &fake_report(&host, devices, handles), false)
            .await
            .map_err(|e| format!("report {host}: {e}"))?;
        Ok(())
    }

    /// Step 2 for host `i`: an instance's VCPU, memory and first card.
    async fn allocate(&self, i: usize) -> Result<(), String> {
        let host = host_name(i);
        let cn = Uuid::new_v3(&Uuid::NAMESPACE_DNS, host.as_bytes()).to_string();
        let consumer = Uuid::new_v4().to_string();
        let body = json!({
            "allocations": {
                cn: {"resources": {"VCPU": 4, "MEMORY_MB": 8192}},
                card_rp(&host, 0): {"resources": {"FPGA": 1}},
            },
            "project_id": format!("project-{}", i % 7),
            "user_id": "bench",
            "consumer_generation": null,
            "consumer_type": "INSTANCE",
        });
        let r = Request::new(Method::PUT, format!("/allocations/{consumer}"))
            .microversion("placement 1.39")
            .json(&body);
        ok(&self.placement, r, "allocation").await
    }

    /// Step 3 for host `i`: one ARQ bound to the second card, one left unbound.
    async fn arqs(&self, i: usize) -> Result<(), String> {
        let host = host_name(i);
        let new = NewArqs {
            device_profile_name: "console-fpga".into(),
            device_profile_group_id: None,
        };
        let bound = self
            .nova
            .create_arqs(&new)
            .await
            .map_err(|e| e.to_string())?;
        self.nova
            .create_arqs(&new)
            .await
            .map_err(|e| e.to_string())?;
        let instance = Uuid::new_v4().to_string();
        let mut patch = ArqPatch::new();
        for a in &bound {
            patch_entry(
                &mut patch,
                &a.uuid,
                bind_ops(&host, &card_rp(&host, 1), &instance),
            );
        }
        self.nova
            .patch_arqs(&patch, None)
            .await
            .map_err(|e| format!("bind on {host}: {e}"))?;
        Ok(())
    }

    /// Step 4 for host `i`: two slots of its last card, one held by a pod.
    async fn kubernetes(&self, i: usize, devices: usize) -> Result<(), String> {
        let host = host_name(i);
        let device = format!("FakeDevice{}", devices - 1);
        let usage = KubernetesUsage {
            usage: BTreeMap::from([
                ("fpga-bench-0".to_owned(), host.clone()),
                ("fpga-bench-1".to_owned(), String::new()),
            ]),
            claims: vec![SlotClaim {
                slot: "fpga-bench-0".into(),
                device,
                pod: Some(format!("default/train-{i}")),
            }],
        };
        self.agent
            .kubernetes_save(&host, &usage)
            .await
            .map_err(|e| format!("kubernetes usage of {host}: {e}"))?;
        Ok(())
    }
}

/// Runs `op` on every `every`th host of `hosts` on `clients` clients.
async fn phase<F, Fut>(name: &str, clients: usize, hosts: usize, every: usize, op: F) -> PhaseStats
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let every = every.max(1);
    let n = hosts.div_ceil(every);
    run_phase(name, clients, n, move |_w, k| op(k * every)).await
}

async fn fill(args: &Args, api: &Api) -> anyhow::Result<Vec<PhaseStats>> {
    let (c, n, d, h) = (args.clients, args.hosts, args.devices, args.handles);
    let mut out = Vec::new();
    let a = api.clone();
    out.push(
        phase("setup: hosts and cards", c, n, 1, move |i| {
            let a = a.clone();
            async move { a.host(i, d, h).await }
        })
        .await,
    );
    let a = api.clone();
    out.push(
        phase("setup: allocations", c, n, args.allocate_every, move |i| {
            let a = a.clone();
            async move { a.allocate(i).await }
        })
        .await,
    );
    let profile = json!([{"name": "console-fpga",
                          "groups": [{"resources:FPGA": "1",
                                      "trait:CUSTOM_FAKE_DEVICE": "required"}]}]);
    let r = Request::new(Method::POST, "/v2/device_profiles").json(&profile);
    let reply = api.admin.send(&r).await.context("creating the profile")?;
    if reply.status != 409 {
        reply.success().context("creating the profile")?;
    }
    let a = api.clone();
    out.push(
        phase("setup: ARQs", c, n, args.arq_every, move |i| {
            let a = a.clone();
            async move { a.arqs(i).await }
        })
        .await,
    );
    if d > 0 {
        let a = api.clone();
        out.push(
            phase("setup: Kubernetes usage", c, n, args.k8s_every, move |i| {
                let a = a.clone();
                async move { a.kubernetes(i, d).await }
            })
            .await,
        );
    }
    Ok(out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One GET of a page: an error unless it answers 200; the answer's size.
async fn get_page(client: &reqwest::Client, url: &str) -> Result<usize, String> {
    let r = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = r.status();
    let body = r.bytes().await.map_err(|e| format!("GET {url}: {e}"))?;
    if status != reqwest::StatusCode::OK {
        return Err(format!(
            "GET {url}: {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    Ok(body.len())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let c = args.clients;
    let nova_headers = vec![
        ("x-roles", "member,reader".to_owned()),
        ("x-service-roles", "service".to_owned()),
    ];
    let admin = http(&args.accel_url, "admin", Vec::new(), c);
    let api = Api {
        placement: http(&args.placement_url, "admin", Vec::new(), c),
        agent: agent::Client::new(admin.clone()),
        admin,
        nova: accel_api::accelerator::Client::new(http(
            &args.accel_url,
            "nova:bench",
            nova_headers,
            c,
        ))
        .with_microversion(None),
    };
    if !args.label.is_empty() {
        println!("### {}\n", args.label);
    }
    if !args.no_fill {
        let t = Instant::now();
        let setup = fill(&args, &api).await?;
        println!("{TABLE_HEADER}");
        for s in &setup {
            println!("{}", s.row());
        }
        println!("\nfilled in {:.0} s\n", t.elapsed().as_secs_f64());
        if let Err(e) = accel_bench::check_failures(&setup) {
            bail!(e);
        }
    }
    if args.fill_only {
        return Ok(());
    }

    let probe = host_name(PROBE.min(args.hosts.saturating_sub(1)));
    let probe_rp = Uuid::new_v3(&Uuid::NAMESPACE_DNS, probe.as_bytes()).to_string();
    let pages: Vec<(String, String)> = if args.pages.is_empty() {
        PAGES
            .iter()
            .map(|(n, p)| ((*n).to_owned(), (*p).to_owned()))
            .collect()
    } else {
        args.pages
            .iter()
            .map(|p| {
                p.split_once('=')
                    .map(|(n, p)| (n.to_owned(), p.to_owned()))
                    .with_context(|| format!("--page {p}: not NAME=PATH"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    let client = reqwest::Client::new();
    let base = args.console_url.trim_end_matches('/');
    println!("| page | path | requests | median ms | p95 ms | max ms | bytes |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    let mut over = Vec::new();
    for (name, path) in &pages {
        let path = path.replace("{host}", &probe).replace("{rp}", &probe_rp);
        let url = format!("{base}{path}");
        // One untimed request first: the first answer after the fill pays for caches
        // catching up with it, which is not the page's steady cost.
        let bytes = get_page(&client, &url).await.map_err(anyhow::Error::msg)?;
        let (cl, u) = (client.clone(), url.clone());
        let stats = run_phase(name, 1, args.requests, move |_w, _i| {
            let (cl, u) = (cl.clone(), u.clone());
            async move { get_page(&cl, &u).await.map(drop) }
        })
        .await;
        if let Err(e) = accel_bench::check_failures(std::slice::from_ref(&stats)) {
            bail!(e);
        }
        let (p50, p95) = (stats.percentile(50.0), stats.percentile(95.0));
        println!(
            "| {name} | `{path}` | {} | {:.1} | {:.1} | {:.1} | {bytes} |",
            stats.requests,
            ms(p50),
            ms(p95),
            ms(stats.percentile(100.0)),
        );
        if args.limit_ms.is_some_and(|l| ms(p95) > l) {
            over.push(name.clone());
        }
    }
    if !over.is_empty() {
        bail!("p95 over {:?} ms: {}", args.limit_ms, over.join(", "));
    }
    Ok(())
}
