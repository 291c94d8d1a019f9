//! `accel-bench cloud`: a whole cloud's load on one Placement + accelerator API, the
//! way Nova 34, Cyborg's workflow and accel's agents send it, so that a latency is what
//! a user would see at a given boot rate with the background of N compute nodes.
//!
//! - **setup** (untimed): per node a compute node provider `cloud-<n>` with Nova's
//!   inventories (VCPU, MEMORY_MB, DISK_GB), and the agent's report of `--devices`
//!   FPGA cards (Cyborg's fake device: class FPGA, trait `CUSTOM_FAKE_DEVICE`, one
//!   accelerator and one attach handle each), so each card is a child provider; then
//!   the device profile `cloud-fpga` (`resources:FPGA=1`, `CUSTOM_FAKE_DEVICE`
//!   required), and one boot's allocation candidates query, timed and printed (the
//!   server's first answer after the burst of writes builds its index).
//! - **periodic** (per node, as nova-compute's resource tracker every 60 s, jittered
//!   by up to 10 % as Nova's periodic tasks are): `GET /resource_providers?in_tree=`
//!   and the node's inventories; every fifth run (300 s,
//!   `resource_provider_association_refresh`) also its traits and aggregates, each
//!   node starting at a random point of that five-run cycle.
//! - **report** (per node, as the agent every 60 s): the same device report, which
//!   the server answers as unchanged.
//! - **boots**, open loop at `--boot-rate` (arrivals on a fixed schedule, not a closed
//!   loop that slows down with the server): the scheduler's
//!   `GET /allocation_candidates` for the flavor and the profile's group
//!   (`limit=1000`), the claim (`PUT /allocations/{instance}` with
//!   `consumer_generation: null`, on a candidate picked at random, as spreading
//!   weighers do; a 409 takes the next candidate, at most three claims), the
//!   conductor's ARQ create and bind `PATCH`. Each booted instance is deleted
//!   `--lifetime` seconds later (ARQs by instance, then the allocations), so deletes
//!   run at the boot rate and the cloud stays in a steady state.
//!
//! - **upstream** (`--cyborg-relay`, `scripts/cloud-upstream.sh`): the same scenario
//!   against upstream Placement + Cyborg. Nodes' reports go through a relay that makes
//!   the cyborg-agent's `report_data` RPC to Cyborg's conductor with the same cards, so
//!   the conductor, not this command, creates the device providers in Placement; the
//!   identity headers are the ones Cyborg reads without keystonemiddleware.
//!
//! Only requests sent during `--duration` count. With `--json` the last line is one
//! object: per call type its rate, p50/p99/p99.9 and errors; the boots' target and
//! achieved rates and failures by reason; and, when this command started the server
//! (`--database`), the server's CPU seconds and peak RSS during the run.

mod report;
pub(crate) mod server;
mod server_view;
mod sim;
mod wire;

use report::{print_table, summary};
use sim::{Agents, Sim, PROJECT, USER};
use wire::Wire;

use crate::PhaseStats;
use accel_api::accelerator;
use accel_api::agent;
use accel_api::http::{Auth, Endpoint, Http, Method, Options, Request};
use anyhow::Context;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `accel-bench cloud`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct CloudArgs {
    /// Compute nodes.
    #[arg(long, default_value_t = 100)]
    pub nodes: usize,
    /// FPGA cards per node (one accelerator each).
    #[arg(long, default_value_t = 4)]
    pub devices: usize,
    /// Boots per second, open loop (and as many deletes once `--lifetime` has passed).
    #[arg(long, default_value_t = 5.0)]
    pub boot_rate: f64,
    /// Seconds measured, after the setup.
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// Boots per second from `--then-at` on (a step down after an overload shows how
    /// soon the latencies recover; the report adds 5-second series).
    #[arg(long)]
    pub then_boot_rate: Option<f64>,
    /// Seconds into the window at which `--then-boot-rate` starts (default: half).
    #[arg(long)]
    pub then_at: Option<u64>,
    /// Seconds an instance lives before it is deleted.
    #[arg(long, default_value_t = 30)]
    pub lifetime: u64,
    /// Seconds between two runs of a node's periodic task and two reports of its agent.
    #[arg(long, default_value_t = 60)]
    pub period: u64,
    /// The Placement API of a running server.
    #[arg(long, default_value = "http://127.0.0.1:8778")]
    pub placement_url: String,
    /// The accelerator API of the same server.
    #[arg(long, default_value = "http://127.0.0.1:6666")]
    pub accelerator_url: String,
    /// Start `accel serve` on this database instead (SQLite, PostgreSQL or MariaDB
    /// URL; it should be empty), and report its CPU and memory.
    #[arg(long)]
    pub database: Option<String>,
    /// The `accel` binary `--database` starts (default: beside this one).
    #[arg(long)]
    pub accel_bin: Option<std::path::PathBuf>,
    /// Seed of the random choices (jitter, candidate picks).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Requests in flight at most; an arrival beyond it fails as `overloaded`.
    #[arg(long, default_value_t = 2000)]
    pub max_in_flight: usize,
    /// Concurrent requests of the setup.
    #[arg(long, default_value_t = 16)]
    pub setup_clients: usize,
    /// The accelerator API is upstream Cyborg: agents' reports go to this relay
    /// (`scripts/cloud-cyborg-relay.py`), which sends them to Cyborg's conductor as
    /// cyborg-agents do, and the identity headers are those Cyborg reads without
    /// keystonemiddleware (Nova's service role among its roles).
    #[arg(long)]
    pub cyborg_relay: Option<String>,
    /// Serve the fake Nova's external events on this address (with `--database` it
    /// picks a free port by itself); a Cyborg started beforehand is pointed at it.
    #[arg(long)]
    pub nova_listen: Option<String>,
    /// Processes to report as the server (CPU seconds during the window, summed peak
    /// RSS) when this command did not start it: an upstream deployment's API workers
    /// and conductor, say.
    #[arg(long, value_delimiter = ',')]
    pub server_pids: Vec<u32>,
    /// The started server's configuration file (`accel serve --config FILE`), e.g. its
    /// admission limits or `randomize_allocation_candidates`.
    #[arg(long)]
    pub server_config: Option<std::path::PathBuf>,
    /// The metrics port of a server started elsewhere (`http://HOST:PORT`), whose
    /// request-duration histograms are read before and after the window and set
    /// beside the simulator's times. A server started with `--database` is read
    /// without it.
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
}

/// The call types measured, in the order they are printed.
const CALLS: [&str; 8] = [
    "candidates",
    "claim",
    "arq_create",
    "arq_bind",
    "periodic",
    "report",
    "delete",
    // From the bind PATCH to Nova receiving the instance's accelerator-request-bound
    // event (only when this command started the server and so serves its Nova).
    "bind_to_event",
];

/// The boots' arrivals from the window's start: `--boot-rate`, then `--then-boot-rate`
/// from `--then-at` on.
fn arrivals(args: &CloudArgs) -> Vec<Duration> {
    let end = args.duration as f64;
    let (first, then) = match args.then_boot_rate {
        Some(r) => (
            args.boot_rate,
            Some((args.then_at.unwrap_or(args.duration / 2) as f64, r)),
        ),
        None => (args.boot_rate, None),
    };
    let switch = then.map_or(end, |(at, _)| at.min(end));
    let mut out = Vec::new();
    let mut phase = |from: f64, to: f64, rate: f64| {
        let rate = rate.max(0.001);
        let n = ((to - from) * rate).round() as u64;
        out.extend((0..n).map(|k| Duration::from_secs_f64(from + k as f64 / rate)));
    };
    phase(0.0, switch, first);
    if let Some((_, rate)) = then {
        phase(switch, end, rate);
    }
    out
}

/// One simulated compute node.
#[derive(Clone)]
struct Node {
    name: String,
    uuid: String,
}

fn node(n: usize) -> Node {
    let name = format!("cloud-{n}");
    let uuid = uuid::Uuid::new_v3(&uuid::Uuid::NAMESPACE_OID, name.as_bytes()).to_string();
    Node { name, uuid }
}

fn http(
    url: &str,
    token: &str,
    pool: usize,
    headers: Vec<(&'static str, String)>,
) -> anyhow::Result<Http> {
    Ok(Http::new(
        Endpoint::Url(url.trim_end_matches('/').to_owned()),
        Auth::Token(token.to_owned()),
        Options {
            pool_max_idle_per_host: Some(pool),
            timeout: Some(Duration::from_secs(60)),
            headers,
            ..Options::default()
        },
    )?)
}

/// The untimed clients of the setup (reqwest, through accel's typed clients).
struct Setup {
    placement: Http,
    /// accel's agent API, or the relay to upstream Cyborg's conductor.
    agent: Result<agent::Client, Http>,
    admin: accelerator::Client,
}

/// Setup calls a server's admission refused (503) are sent again, a second later, as
/// OpenStack's clients do; this many times at most.
const SETUP_TRIES: usize = 60;

impl Setup {
    async fn report(&self, host: &str, devices: usize) -> Result<(), String> {
        let body = crate::fake_report(host, devices, 1);
        for _ in 1..SETUP_TRIES {
            let r = match &self.agent {
                Ok(c) => c.report(host, &body, false).await.map(|_| ()),
                Err(relay) => {
                    let req = Request::new(Method::POST, format!("/report/{host}"))
                        .query("devices", devices.to_string());
                    relay.send(&req).await.and_then(|r| r.success()).map(|_| ())
                }
            };
            match r {
                Err(e) if e.status() == Some(503) => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                r => return r.map_err(|e| e.to_string()),
            }
        }
        Err(format!("{host}'s report refused 503 {SETUP_TRIES} times"))
    }

    /// `req` to Placement, sent again after a 503.
    async fn placement(&self, req: &Request) -> Result<accel_api::http::Reply, String> {
        for _ in 1..SETUP_TRIES {
            let r = self.placement.send(req).await.map_err(|e| e.to_string())?;
            if r.status != 503 {
                return Ok(r);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Err(format!("{} refused 503 {SETUP_TRIES} times", req.path))
    }
}

/// Creates the nodes, their inventories and devices, and the device profile.
async fn setup(setup: Arc<Setup>, args: &CloudArgs) -> anyhow::Result<()> {
    let devices = args.devices;
    let s2 = setup.clone();
    let stats: PhaseStats =
        crate::run_phase("setup", args.setup_clients, args.nodes, move |_, i| {
            let setup = s2.clone();
            async move {
                let n = node(i);
                let create = Request::new(Method::POST, "/resource_providers")
                    .microversion("placement 1.20")
                    .json(&json!({"name": n.name, "uuid": n.uuid}));
                let r = setup.placement(&create).await?;
                if r.status != 409 {
                    r.success().map_err(|e| e.to_string())?;
                }
                let inv = Request::new(
                    Method::PUT,
                    format!("/resource_providers/{}/inventories", n.uuid),
                )
                .microversion("placement 1.20")
                .json(&json!({"resource_provider_generation": 0, "inventories": {
                    "VCPU": {"total": 64, "allocation_ratio": 4.0},
                    "MEMORY_MB": {"total": 262144, "reserved": 512},
                    "DISK_GB": {"total": 4000}}}));
                let r = setup.placement(&inv).await?;
                if r.status != 409 {
                    r.success().map_err(|e| e.to_string())?;
                }
                setup.report(&n.name, devices).await
            }
        })
        .await;
    crate::check_failures(std::slice::from_ref(&stats)).map_err(anyhow::Error::msg)?;
    eprintln!(
        "setup: {} nodes x {} devices in {:.1} s",
        args.nodes,
        args.devices,
        stats.elapsed.as_secs_f64()
    );
    let profile: accelerator::NewDeviceProfile = serde_json::from_value(json!({
        "name": "cloud-fpga",
        "groups": [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]
    }))?;
    if let Err(e) = setup.admin.create_profile(&profile).await {
        if e.status() != Some(409) {
            return Err(e).context("creating the device profile cloud-fpga");
        }
    }
    // The scheduler's question once before the window, timed and printed but not
    // counted: after the setup's burst of writes the server answers it from a picture
    // of every provider, which accel builds (or finishes) now, about a second at
    // 10,000 nodes. Without it the window's first second measured that build and the
    // calls queued behind it (docs/benchmarks.md, the candidates p99.9).
    let first = sim::BOOT_QUERY
        .iter()
        .fold(
            Request::new(Method::GET, "/allocation_candidates"),
            |r, (k, v)| r.query(k, *v),
        )
        .microversion(sim::CANDIDATES_MV);
    let t = Instant::now();
    let r = setup.placement(&first).await.map_err(anyhow::Error::msg)?;
    r.success()
        .context("the first allocation candidates after the setup")?;
    eprintln!(
        "setup: the first allocation candidates answered in {:.0} ms (not counted)",
        t.elapsed().as_secs_f64() * 1000.0
    );
    Ok(())
}

/// Runs the simulation; prints the table, and the JSON line with `--json`.
pub async fn run(args: CloudArgs) -> anyhow::Result<()> {
    // The fake Nova reaches the simulation through this cell once it exists.
    let sim_cell: Arc<std::sync::OnceLock<Arc<Sim>>> = Arc::default();
    let cell = sim_cell.clone();
    let on_event = move |instance: &str, bound: bool| {
        if let Some(sim) = cell.get() {
            sim.event(instance, bound);
        }
    };
    let nova = match (&args.nova_listen, &args.database) {
        (Some(addr), _) => Some(crate::fake_nova::serve(addr, on_event).await?),
        (None, Some(_)) => Some(crate::fake_nova::serve("127.0.0.1:0", on_event).await?),
        (None, None) => None,
    };
    let started = match (&args.database, &nova) {
        (Some(db), Some(nova)) => Some(
            server::Server::start(
                db,
                args.accel_bin.as_deref(),
                nova,
                args.server_config.as_deref(),
            )
            .await?,
        ),
        _ => None,
    };
    let (placement_url, accel_url) = match &started {
        Some(s) => (s.placement.clone(), s.accelerator.clone()),
        None => (args.placement_url.clone(), args.accelerator_url.clone()),
    };
    let metrics_url = match &started {
        Some(s) => s.metrics.clone(),
        None => args.metrics_url.clone(),
    };
    let pool = args.max_in_flight.min(512);
    // Without keystonemiddleware upstream Cyborg reads the service check from the
    // user's own roles and the admin check from X-Roles.
    let upstream = args.cyborg_relay.is_some();
    let nova_headers = vec![
        ("x-user-id", USER.to_owned()),
        ("x-project-id", PROJECT.to_owned()),
        (
            "x-roles",
            if upstream {
                "member,reader,service"
            } else {
                "member,reader"
            }
            .to_owned(),
        ),
        ("x-service-roles", "service".to_owned()),
    ];
    let admin_headers = if upstream {
        vec![
            ("x-user-id", "admin".to_owned()),
            ("x-project-id", "admin".to_owned()),
            ("x-roles", "admin,member,reader".to_owned()),
        ]
    } else {
        Vec::new()
    };
    let nova_token = format!("{USER}:{PROJECT}");
    let agent_url = args
        .cyborg_relay
        .clone()
        .unwrap_or_else(|| accel_url.clone());
    let sim = Arc::new(Sim {
        placement: Wire::new(&placement_url, "admin", &[], pool)?,
        nova: Wire::new(&accel_url, &nova_token, &nova_headers, pool)?,
        agent: Wire::new(&agent_url, "admin", &[], pool)?,
        agents: match &args.cyborg_relay {
            Some(_) => Agents::Relay {
                devices: args.devices,
            },
            None => Agents::Accel,
        },
        record: Mutex::default(),
        measuring: AtomicBool::new(false),
        window: std::sync::OnceLock::new(),
        in_flight: AtomicUsize::new(0),
        max_in_flight: args.max_in_flight,
        hosts: (0..args.nodes)
            .map(|n| {
                let n = node(n);
                (n.uuid, n.name)
            })
            .collect(),
        binding: Mutex::default(),
    });
    let _ = sim_cell.set(sim.clone());
    let setup_clients = Arc::new(Setup {
        placement: http(&placement_url, "admin", 64, Vec::new())?,
        agent: match &args.cyborg_relay {
            Some(relay) => Err(http(relay, "admin", 64, Vec::new())?),
            None => Ok(agent::Client::new(http(
                &accel_url,
                "admin",
                64,
                Vec::new(),
            )?)),
        },
        admin: accelerator::Client::new(http(&accel_url, "admin", 4, admin_headers)?),
    });
    setup(setup_clients, &args).await?;

    let period = Duration::from_secs(args.period.max(1));
    let begin = tokio::time::Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // Nodes: each its periodic task and its agent, at their own jittered phase.
    let mut background = Vec::new();
    for n in 0..args.nodes {
        let (sim, stop) = (sim.clone(), stop.clone());
        let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ (n as u64) << 20);
        let report = Arc::new(serde_json::to_value(crate::fake_report(
            &node(n).name,
            args.devices,
            1,
        ))?);
        background.push(tokio::spawn(async move {
            let node = node(n);
            let offset = period.mul_f64(rng.gen::<f64>());
            tokio::time::sleep_until(begin + offset).await;
            // Where in its five-run cycle (the 300 s refresh) each node starts: spread,
            // as in a cloud whose nodes did not all start together, so that a window
            // shortly after the setup does not see every node's full refresh at once.
            let mut runs: u64 = rng.gen_range(0..5);
            while !stop.load(Ordering::Relaxed) {
                let full = runs.is_multiple_of(5);
                runs += 1;
                let due = Instant::now();
                let (s1, u1) = (sim.clone(), node.uuid.clone());
                sim.spawn_limited(async move { s1.periodic(&u1, full, due).await });
                let (s2, n2, r2) = (sim.clone(), node.name.clone(), report.clone());
                sim.spawn_limited(async move { s2.report(&n2, &r2, due).await });
                let jitter = 1.0 + 0.1 * (rng.gen::<f64>() - 0.5);
                tokio::time::sleep(period.mul_f64(jitter)).await;
            }
        }));
    }
    let server_cpu = || match &started {
        Some(s) => Some(s.cpu_seconds()),
        None if !args.server_pids.is_empty() => Some(
            args.server_pids
                .iter()
                .map(|p| server::cpu_seconds(*p))
                .sum(),
        ),
        None => None,
    };
    let scrape = |when: &'static str| {
        let url = metrics_url.clone();
        async move {
            let url = url?;
            match server_view::scrape(&format!("{}/metrics", url.trim_end_matches('/'))).await {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!("scraping the server's metrics {when} the window failed: {e:#}");
                    None
                }
            }
        }
    };
    let scraped_before = scrape("before").await;
    let cpu_before = server_cpu();
    let own_cpu_before = server::cpu_seconds(std::process::id());
    let window = Instant::now();
    let _ = sim.window.set(window);
    sim.measuring.store(true, Ordering::SeqCst);
    // Boots, open loop: arrival k at k / rate, whatever the answers take.
    let lifetime = Duration::from_secs(args.lifetime);
    let t0 = tokio::time::Instant::now();
    for (k, offset) in arrivals(&args).into_iter().enumerate() {
        let k = k as u64;
        let arrival = t0 + offset;
        tokio::time::sleep_until(arrival).await;
        let s = sim.clone();
        let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(k);
        sim.spawn_limited(async move {
            if let Some(instance) = s.boot(seed, arrival.into_std()).await {
                let s2 = s.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(lifetime).await;
                    s2.delete(&instance).await;
                });
            }
        });
    }
    tokio::time::sleep_until(t0 + Duration::from_secs(args.duration)).await;
    let elapsed = window.elapsed();
    sim.measuring.store(false, Ordering::SeqCst);
    let own_cpu = server::cpu_seconds(std::process::id()) - own_cpu_before;
    stop.store(true, Ordering::SeqCst);
    let scraped_after = scrape("after").await;
    let peak_rss = match &started {
        Some(s) => s.peak_rss_mb(),
        None => args
            .server_pids
            .iter()
            .map(|p| server::peak_rss_mb(*p))
            .sum(),
    };
    let server_stats = server_cpu().map(|after| (after - cpu_before.unwrap_or(0.0), peak_rss));
    for b in background {
        b.abort();
    }
    let rec = std::mem::take(&mut *sim.record.lock().unwrap());
    let view = match (&scraped_before, &scraped_after) {
        (Some(b), Some(a)) => Some((b, a)),
        _ => None,
    };
    let run = report::Run {
        elapsed,
        server: server_stats,
        own_cpu,
        view,
    };
    let report = summary(&args, &rec, &run);
    print_table(&report);
    for (what, e) in &rec.first_errors {
        eprintln!("{what}: first error: {e}");
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    }
    if let Some(s) = started {
        s.stop().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::sim::{device_and_host, Candidates};
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_device_of_a_claim_is_the_fpga_provider_and_its_host_the_root() {
        let a = json!({
            "cn": {"resources": {"VCPU": 1, "MEMORY_MB": 512}},
            "dev": {"resources": {"FPGA": 1}},
        });
        // As an answer carries them: the summaries' other fields are skipped.
        let answer: Candidates = serde_json::from_value(json!({
            "allocation_requests": [{"allocations": a.clone(), "mappings": {}}],
            "provider_summaries": {
                "cn": {"root_provider_uuid": "cn", "resources": {}, "traits": []},
                "dev": {"root_provider_uuid": "cn", "parent_provider_uuid": "cn"},
            },
        }))
        .unwrap();
        assert_eq!(answer.allocation_requests[0].allocations, a);
        let summaries = answer.provider_summaries;
        let hosts = HashMap::from([("cn".to_owned(), "cloud-3".to_owned())]);
        assert_eq!(
            device_and_host(&a, &summaries, &hosts),
            Some(("dev".to_owned(), "cloud-3".to_owned()))
        );
        let no_fpga = json!({"cn": {"resources": {"VCPU": 1}}});
        assert_eq!(device_and_host(&no_fpga, &summaries, &hosts), None);
        assert_eq!(device_and_host(&a, &summaries, &HashMap::new()), None);
    }

    #[test]
    fn arrivals_step_from_one_rate_to_the_next() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cloud: CloudArgs,
        }
        let args = |a: &[&str]| Cli::parse_from([&["x"], a].concat()).cloud;
        let flat = arrivals(&args(&["--boot-rate", "4", "--duration", "10"]));
        assert_eq!(flat.len(), 40);
        assert_eq!(flat[1], Duration::from_millis(250));
        let step = arrivals(&args(&[
            "--boot-rate",
            "10",
            "--duration",
            "10",
            "--then-boot-rate",
            "2",
            "--then-at",
            "4",
        ]));
        assert_eq!(step.len(), 40 + 12);
        assert_eq!(step[39], Duration::from_millis(3900));
        assert_eq!(step[40], Duration::from_secs(4));
        assert_eq!(step[41], Duration::from_millis(4500));
    }

    #[test]
    fn node_uuids_are_stable_and_distinct() {
        assert_eq!(node(7).uuid, node(7).uuid);
        assert_ne!(node(7).uuid, node(8).uuid);
        assert_eq!(node(7).name, "cloud-7");
    }
}
