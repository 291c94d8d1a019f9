//! `accel-bench cloud`: a whole cloud's load on one Placement + accelerator API, the
//! way Nova 34, Cyborg's workflow and accel's agents send it, so that a latency is what
//! a user would see at a given boot rate with the background of N compute nodes.
//!
//! - **setup** (untimed): per node a compute node provider `cloud-<n>` with Nova's
//!   inventories (VCPU, MEMORY_MB, DISK_GB), and the agent's report of `--devices`
//!   FPGA cards (Cyborg's fake device: class FPGA, trait `CUSTOM_FAKE_DEVICE`, one
//!   accelerator and one attach handle each), so each card is a child provider; then
//!   the device profile `cloud-fpga` (`resources:FPGA=1`, `CUSTOM_FAKE_DEVICE`
//!   required).
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
mod server;

use report::{print_table, summary};

use crate::PhaseStats;
use accel_api::accelerator::{self, bind_ops, patch_entry, ArqPatch, ArqSelector, NewArqs};
use accel_api::agent;
use accel_api::http::{Auth, Endpoint, Http, Method, Options, Reply, Request};
use anyhow::Context;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
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

/// Placement microversions Nova 34 sends: the scheduler's candidates (1.36: consumer
/// types are 1.38 and Nova asks no more than it needs), its claims and the report
/// client's reads.
const CANDIDATES_MV: &str = "placement 1.36";
const CLAIM_MV: &str = "placement 1.36";
const READ_MV: &str = "placement 1.14";

/// Nova's project and user, as the noauth identity of its service calls.
const PROJECT: &str = "c10dc10dc10d4000800000000000000a";
const USER: &str = "nova";

/// Latencies per call type and errors, from the start of the measured window.
#[derive(Default)]
struct Record {
    latencies: BTreeMap<&'static str, Vec<Duration>>,
    errors: BTreeMap<&'static str, usize>,
    first_errors: BTreeMap<&'static str, String>,
    boots_done: usize,
    boots_failed: BTreeMap<String, usize>,
}

/// Where a node's agent sends its device report.
enum Agents {
    /// accel's agent API.
    Accel(agent::Client),
    /// Upstream Cyborg, through the relay to its conductor (`--cyborg-relay`).
    Relay { http: Http, devices: usize },
}

impl Agents {
    async fn report(&self, host: &str, report: &agent::DeviceReport) -> Result<(), String> {
        match self {
            Agents::Accel(c) => c
                .report(host, report, false)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Agents::Relay { http, devices } => {
                let req = Request::new(Method::POST, format!("/report/{host}"))
                    .query("devices", devices.to_string());
                let r = http.send(&req).await.map_err(|e| e.to_string())?;
                let status = r.status;
                r.success().map(|_| ()).map_err(|e| format!("{status} {e}"))
            }
        }
    }
}

struct Sim {
    placement: Http,
    nova: accelerator::Client,
    agent: Agents,
    record: Mutex<Record>,
    /// Whether requests now count (the measured window).
    measuring: AtomicBool,
    in_flight: AtomicUsize,
    max_in_flight: usize,
    /// Node name by its provider's uuid.
    hosts: HashMap<String, String>,
    /// When each instance's bind PATCH was sent, until its event arrives.
    binding: Mutex<HashMap<String, Instant>>,
}

impl Sim {
    /// The fake Nova received `instance`'s event.
    fn event(&self, instance: &str) {
        let Some(sent) = self.binding.lock().unwrap().remove(instance) else {
            return;
        };
        if self.measuring.load(Ordering::Relaxed) {
            let mut rec = self.record.lock().unwrap();
            rec.latencies
                .entry("bind_to_event")
                .or_default()
                .push(sent.elapsed());
        }
    }
}

impl Sim {
    /// Times `f` as one call of type `what`; counts its error while measuring.
    async fn timed<T, E: std::fmt::Display>(
        &self,
        what: &'static str,
        f: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        let t = Instant::now();
        let r = f.await;
        let took = t.elapsed();
        if self.measuring.load(Ordering::Relaxed) {
            let mut rec = self.record.lock().unwrap();
            rec.latencies.entry(what).or_default().push(took);
            if let Err(e) = &r {
                *rec.errors.entry(what).or_default() += 1;
                rec.first_errors
                    .entry(what)
                    .or_insert_with(|| e.to_string());
            }
        }
        r.map_err(|e| e.to_string())
    }

    /// One Placement call, timed from the request to the answer's last byte; the
    /// caller parses what it needs afterwards, outside the time (a scheduler's own
    /// parsing is not the server's latency, and on this shared machine it is CPU
    /// the server would otherwise have).
    async fn placement(&self, what: &'static str, req: Request) -> Result<Reply, String> {
        self.timed(what, async {
            let reply = self.placement.send(&req).await.map_err(|e| e.to_string())?;
            let status = reply.status;
            reply.success().map_err(|e| format!("{status} {e}"))
        })
        .await
    }

    fn boot_failed(&self, why: &str) {
        if self.measuring.load(Ordering::Relaxed) {
            *self
                .record
                .lock()
                .unwrap()
                .boots_failed
                .entry(why.to_owned())
                .or_default() += 1;
        }
    }

    /// One boot: candidates, claim (up to three tries), ARQ create and bind. Returns
    /// the instance to delete later, or `None` when it failed (counted by reason).
    async fn boot(&self, rng_seed: u64) -> Option<String> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rng_seed);
        let instance = uuid::Uuid::from_u128(rng.gen()).to_string();
        let req = Request::get("/allocation_candidates")
            .microversion(CANDIDATES_MV)
            .query("resources", "VCPU:1,MEMORY_MB:512,DISK_GB:1")
            .query("resources1", "FPGA:1")
            .query("required1", "CUSTOM_FAKE_DEVICE")
            .query("group_policy", "none")
            .query("limit", "1000");
        let Some(body) = self
            .placement("candidates", req)
            .await
            .ok()
            .and_then(|r| r.json::<Candidates>().ok())
        else {
            self.boot_failed("candidates_error");
            return None;
        };
        let summaries = &body.provider_summaries;
        let mut requests = body.allocation_requests;
        if requests.is_empty() {
            self.boot_failed("no_candidate");
            return None;
        }
        let mut claimed = None;
        for _ in 0..3 {
            if requests.is_empty() {
                break;
            }
            let allocations = requests
                .swap_remove(rng.gen_range(0..requests.len()))
                .allocations;
            let req = Request::new(Method::PUT, format!("/allocations/{instance}"))
                .microversion(CLAIM_MV)
                .json(&json!({
                    "allocations": allocations,
                    "consumer_generation": null,
                    "project_id": PROJECT,
                    "user_id": USER,
                }));
            match self.placement("claim", req).await {
                Ok(_) => {
                    claimed = Some(allocations);
                    break;
                }
                Err(e) if e.starts_with("409") => self.boot_failed("claim_conflict_retry"),
                Err(_) => {
                    self.boot_failed("claim_error");
                    return None;
                }
            }
        }
        let Some(allocations) = claimed else {
            self.boot_failed("claim_conflicts_exhausted");
            return None;
        };
        // The device provider is the one the FPGA came from; its parent is the host.
        let Some((device_rp, host)) = device_and_host(&allocations, summaries, &self.hosts) else {
            self.boot_failed("no_device_in_claim");
            return None;
        };
        let arqs = match self
            .timed(
                "arq_create",
                self.nova.create_arqs(&NewArqs {
                    device_profile_name: "cloud-fpga".into(),
                    device_profile_group_id: None,
                }),
            )
            .await
        {
            Ok(a) => a,
            Err(_) => {
                self.boot_failed("arq_create_error");
                return Some(instance);
            }
        };
        let mut patch = ArqPatch::new();
        for a in &arqs {
            patch_entry(&mut patch, &a.uuid, bind_ops(&host, &device_rp, &instance));
        }
        self.binding
            .lock()
            .unwrap()
            .insert(instance.clone(), Instant::now());
        if self
            .timed("arq_bind", self.nova.patch_arqs(&patch, None))
            .await
            .is_err()
        {
            self.boot_failed("arq_bind_error");
            return Some(instance);
        }
        if self.measuring.load(Ordering::Relaxed) {
            self.record.lock().unwrap().boots_done += 1;
        }
        Some(instance)
    }

    /// Nova's delete: the ARQs by instance, then the allocations.
    async fn delete(&self, instance: &str) {
        let which = ArqSelector::Instance(instance.to_owned());
        let _ = self
            .timed("delete", self.nova.delete_arqs(&which, None))
            .await;
        let req =
            Request::new(Method::DELETE, format!("/allocations/{instance}")).microversion(CLAIM_MV);
        let _ = self
            .timed("delete", async {
                let r = self.placement.send(&req).await.map_err(|e| e.to_string())?;
                if r.status == 204 || r.status == 404 {
                    Ok(())
                } else {
                    Err(format!("{} {}", r.status, r.text))
                }
            })
            .await;
    }

    /// One run of a node's resource tracker; `full` adds the 300 s refresh.
    async fn periodic(&self, node: &Node, full: bool) {
        let tree = Request::get("/resource_providers")
            .microversion(READ_MV)
            .query("in_tree", node.uuid.as_str());
        let _ = self.placement("periodic", tree).await;
        let inv = Request::get(format!("/resource_providers/{}/inventories", node.uuid))
            .microversion(READ_MV);
        let _ = self.placement("periodic", inv).await;
        if full {
            for what in ["traits", "aggregates"] {
                let r = Request::get(format!("/resource_providers/{}/{what}", node.uuid))
                    .microversion(READ_MV);
                let _ = self.placement("periodic", r).await;
            }
        }
    }

    /// Runs `f` unless too many requests are in flight (then the arrival is lost,
    /// counted as `overloaded`: an open loop does not wait for the server).
    fn spawn_limited<F>(self: &Arc<Self>, f: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.boot_failed("overloaded");
            return;
        }
        let sim = self.clone();
        tokio::spawn(async move {
            f.await;
            sim.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// What the scheduler reads of a candidates answer: each candidate's allocations
/// (sent back as the claim) and each provider's root. The rest of the answer is
/// skipped while parsing, not built.
#[derive(serde::Deserialize)]
struct Candidates {
    allocation_requests: Vec<Candidate>,
    provider_summaries: HashMap<String, Summary>,
}

#[derive(serde::Deserialize)]
struct Candidate {
    allocations: Value,
}

#[derive(serde::Deserialize)]
struct Summary {
    root_provider_uuid: String,
}

/// The provider holding FPGA in a claim's `allocations`, and its host: the node
/// whose provider is the device's root (`provider_summaries`, 1.29+).
fn device_and_host(
    allocations: &Value,
    summaries: &HashMap<String, Summary>,
    hosts: &HashMap<String, String>,
) -> Option<(String, String)> {
    allocations.as_object()?.iter().find_map(|(rp, a)| {
        a["resources"].get("FPGA")?;
        let root = &summaries.get(rp)?.root_provider_uuid;
        Some((rp.clone(), hosts.get(root)?.clone()))
    })
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

/// Creates the nodes, their inventories and devices, and the device profile.
async fn setup(
    sim: &Arc<Sim>,
    args: &CloudArgs,
    admin: &accelerator::Client,
) -> anyhow::Result<()> {
    let sim2 = sim.clone();
    let devices = args.devices;
    let stats: PhaseStats =
        crate::run_phase("setup", args.setup_clients, args.nodes, move |_, i| {
            let sim = sim2.clone();
            async move {
                let n = node(i);
                let create = Request::new(Method::POST, "/resource_providers")
                    .microversion("placement 1.20")
                    .json(&json!({"name": n.name, "uuid": n.uuid}));
                let r = sim
                    .placement
                    .send(&create)
                    .await
                    .map_err(|e| e.to_string())?;
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
                let r = sim.placement.send(&inv).await.map_err(|e| e.to_string())?;
                if r.status != 409 {
                    r.success().map_err(|e| e.to_string())?;
                }
                sim.agent
                    .report(&n.name, &crate::fake_report(&n.name, devices, 1))
                    .await?;
                Ok(())
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
    if let Err(e) = admin.create_profile(&profile).await {
        if e.status() != Some(409) {
            return Err(e).context("creating the device profile cloud-fpga");
        }
    }
    Ok(())
}

/// Runs the simulation; prints the table, and the JSON line with `--json`.
pub async fn run(args: CloudArgs) -> anyhow::Result<()> {
    // The fake Nova reaches the simulation through this cell once it exists.
    let sim_cell: Arc<std::sync::OnceLock<Arc<Sim>>> = Arc::default();
    let cell = sim_cell.clone();
    let on_event = move |instance: &str| {
        if let Some(sim) = cell.get() {
            sim.event(instance);
        }
    };
    let nova = match (&args.nova_listen, &args.database) {
        (Some(addr), _) => Some(crate::fake_nova::serve(addr, on_event).await?),
        (None, Some(_)) => Some(crate::fake_nova::serve("127.0.0.1:0", on_event).await?),
        (None, None) => None,
    };
    let started = match (&args.database, &nova) {
        (Some(db), Some(nova)) => {
            Some(server::Server::start(db, args.accel_bin.as_deref(), nova).await?)
        }
        _ => None,
    };
    let (placement_url, accel_url) = match &started {
        Some(s) => (s.placement.clone(), s.accelerator.clone()),
        None => (args.placement_url.clone(), args.accelerator_url.clone()),
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
    let sim = Arc::new(Sim {
        placement: http(&placement_url, "admin", pool, Vec::new())?,
        nova: accelerator::Client::new(http(
            &accel_url,
            &format!("{USER}:{PROJECT}"),
            pool,
            nova_headers,
        )?)
        .with_microversion(None),
        agent: match &args.cyborg_relay {
            Some(relay) => Agents::Relay {
                http: http(relay, "admin", pool, Vec::new())?,
                devices: args.devices,
            },
            None => Agents::Accel(agent::Client::new(http(
                &accel_url,
                "admin",
                pool,
                Vec::new(),
            )?)),
        },
        record: Mutex::new(Record::default()),
        measuring: AtomicBool::new(false),
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
    let admin = accelerator::Client::new(http(&accel_url, "admin", 4, admin_headers)?);
    setup(&sim, &args, &admin).await?;

    let period = Duration::from_secs(args.period.max(1));
    let begin = tokio::time::Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // Nodes: each its periodic task and its agent, at their own jittered phase.
    let mut background = Vec::new();
    for n in 0..args.nodes {
        let (sim, stop) = (sim.clone(), stop.clone());
        let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ (n as u64) << 20);
        let report = crate::fake_report(&node(n).name, args.devices, 1);
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
                let (s1, n1) = (sim.clone(), node.clone());
                sim.spawn_limited(async move { s1.periodic(&n1, full).await });
                let (s2, n2, r2) = (sim.clone(), node.name.clone(), report.clone());
                sim.spawn_limited(async move {
                    let _ = s2.timed("report", s2.agent.report(&n2, &r2)).await;
                });
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
    let cpu_before = server_cpu();
    sim.measuring.store(true, Ordering::SeqCst);
    let window = Instant::now();
    // Boots, open loop: arrival k at k / rate, whatever the answers take.
    let rate = args.boot_rate.max(0.001);
    let total = (rate * args.duration as f64).round() as u64;
    let lifetime = Duration::from_secs(args.lifetime);
    let t0 = tokio::time::Instant::now();
    for k in 0..total {
        tokio::time::sleep_until(t0 + Duration::from_secs_f64(k as f64 / rate)).await;
        let s = sim.clone();
        let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(k);
        sim.spawn_limited(async move {
            if let Some(instance) = s.boot(seed).await {
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
    stop.store(true, Ordering::SeqCst);
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
    let report = summary(&args, &rec, elapsed, server_stats);
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
    use super::*;

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
    fn node_uuids_are_stable_and_distinct() {
        assert_eq!(node(7).uuid, node(7).uuid);
        assert_ne!(node(7).uuid, node(8).uuid);
        assert_eq!(node(7).name, "cloud-7");
    }
}
