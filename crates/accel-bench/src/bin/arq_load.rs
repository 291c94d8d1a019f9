//! Accelerator-request throughput and latency over HTTP: Nova's create → bind →
//! resolved cycle, and `GET /accelerator_requests?instance=` over a large table.
//!
//! Against `accel serve` (noauth) with an empty accelerator database, or upstream
//! Cyborg (`--target`, see `scripts/upstream-cyborg.sh`), in order:
//!
//! 1. **setup** (untimed): creates `--hosts` compute node providers `arq-bench-N` in
//!    Placement and reports for each, through the agent endpoint
//!    (`PUT /v2/agent/hosts/{host}/devices`), the same device the built-in fake source
//!    reports (`HOST_FakeDevice`, class FPGA, trait `CUSTOM_FAKE_DEVICE`) with
//!    `--handles-per-host` TEST_PCI attach handles; then creates the profile
//!    `arq-bench-<k>` with one group `resources:FPGA=<k>` (`--accelerators`). With
//!    `--target HOST=RP` the hosts exist already and only the profile is created.
//! 2. **cycle** (`--cycles` iterations on `--clients` clients): as Nova, with a new
//!    instance uuid each time: `POST /accelerator_requests` for the profile (k ARQs),
//!    one `PATCH` binding all k to the deployable of the client's host, then waits as
//!    Nova does: for the `accelerator-request-bound` events of the instance at the
//!    fake Nova (below), then one `GET ?instance=X&bind_state=resolved` (all k must be
//!    `Bound`); without `--nova-listen` it polls that GET every `--poll-ms` until it
//!    stops answering 423. Then `DELETE ?instance=X`, which frees the handles.
//!    Client w always uses host `w % hosts`, so with `hosts >= clients` and
//!    `handles >= k` no bind can run out of handles.
//! 3. **list** (`--list-requests`, only with `--seeded N`): `GET ?instance=X` for
//!    instances of the N ARQs a setup script inserted directly into the database
//!    (`scripts/bench-accelerator.sh ... list N`): instance `i` is
//!    `5eed0000-0000-4000-8000-<i, 12 digits>` and has 4 ARQs of Nova's project
//!    (`NOVA_PROJECT`).
//!
//! With `--nova-listen ADDR` the driver also serves Nova's
//! `POST /v2.1/os-server-external-events` (start accel with
//! `--nova-url http://ADDR/v2.1`), wakes the cycle waiting for each instance, and
//! checks at the end that one `accelerator-request-bound` event arrived per bound ARQ.
//!
//! Nova's requests carry the noauth identity `nova:NOVA_PROJECT` with roles
//! `member,reader` (`--nova-roles`) and `X-Service-Roles: service` (the service token
//! bind, unbind and delete-by-instance need); setup uses `admin`. Prints Markdown
//! tables; exits non-zero when any request failed.
//!
//! ```sh
//! cargo run --release -p accel-bench --bin arq-load -- --url http://127.0.0.1:6666 \
//!     --placement-url http://127.0.0.1:8778 --clients 16 --cycles 800
//! ```

use accel_api::accelerator::{
    self, bind_ops, patch_entry, state, ArqFilter, ArqPatch, ArqSelector, NewArqs, NewDeviceProfile,
};
use accel_api::agent;
use accel_api::http::{Auth, Endpoint, Http, Method, Options, Request};
use accel_bench::{fake_report, run_phase, PhaseStats, TABLE_HEADER};
use anyhow::{bail, Context};
use clap::Parser;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use uuid::Uuid;

#[derive(Parser, Debug)]
#[command(
    about = "Accelerator API load: ARQ create + bind + resolution, and ARQ listing by instance"
)]
struct Args {
    /// Base URL of the accelerator API.
    #[arg(long, default_value = "http://127.0.0.1:6666")]
    url: String,
    /// Base URL of the Placement API of the same server (compute node providers).
    #[arg(long, default_value = "http://127.0.0.1:8778")]
    placement_url: String,
    /// Concurrent clients.
    #[arg(long, short = 'c', default_value_t = 16)]
    clients: usize,
    /// Create-bind-resolve-delete iterations in all (0: skip the cycle phase).
    #[arg(long, default_value_t = 800)]
    cycles: usize,
    /// ARQs per instance: the profile's `resources:FPGA` amount.
    #[arg(long, default_value_t = 4)]
    accelerators: usize,
    /// Fake compute hosts to report (default: one per client).
    #[arg(long)]
    hosts: Option<usize>,
    /// Attach handles of each host's fake deployable.
    #[arg(long, default_value_t = 16)]
    handles_per_host: usize,
    /// Interval between two `bind_state=resolved` polls, in milliseconds.
    #[arg(long, default_value_t = 5)]
    poll_ms: u64,
    /// Serve a fake Nova events endpoint here (e.g. 127.0.0.1:19512).
    #[arg(long)]
    nova_listen: Option<String>,
    /// How many ARQs the seed step inserted (4 per instance); enables the list phase.
    #[arg(long, default_value_t = 0)]
    seeded: usize,
    /// `GET ?instance=` requests in the list phase.
    #[arg(long, default_value_t = 2000)]
    list_requests: usize,
    /// `HOST=DEVICE_RP_UUID` of a deployable that already exists (repeatable): skips
    /// the setup of fake hosts (for upstream Cyborg, whose records a script seeds).
    #[arg(long = "target")]
    targets: Vec<String>,
    /// Nova's user roles (`X-Roles`). Upstream Cyborg without keystonemiddleware
    /// reads its service check from them too: give `member,reader,service` there.
    #[arg(long, default_value = "member,reader")]
    nova_roles: String,
    /// A label printed above the tables.
    #[arg(long, default_value = "")]
    label: String,
}

/// Nova's project: a Keystone-like id, because upstream Cyborg refuses a project id
/// that is not uuid-like. The seed script uses it too.
const NOVA_PROJECT: &str = "5eed900000004000800000000000000a";

/// The two APIs, on accel-api's typed clients: the accelerator API as an admin and
/// as Nova (no microversion header, as Nova), Placement as an admin.
#[derive(Clone)]
struct Api {
    admin: accelerator::Client,
    nova: accelerator::Client,
    agent: agent::Client,
    placement: Http,
}

impl Api {
    /// accel's noauth reads the token (`user:project`), `X-Roles` and
    /// `X-Service-Roles`; upstream Cyborg behind no keystonemiddleware reads the
    /// headers keystonemiddleware would have set (`X-User-Id`, `X-Project-Id`,
    /// `X-Roles`): both are sent.
    fn new(args: &Args, clients: usize) -> anyhow::Result<Api> {
        let http = |url: &str, token: String, headers: Vec<(&'static str, String)>| {
            Http::new(
                Endpoint::Url(url.trim_end_matches('/').to_owned()),
                Auth::Token(token),
                Options {
                    pool_max_idle_per_host: Some(2 * clients),
                    headers,
                    ..Options::default()
                },
            )
        };
        let admin = http(
            &args.url,
            "admin".into(),
            vec![
                ("x-user-id", "admin".into()),
                ("x-project-id", "admin".into()),
                ("x-roles", "admin,member,reader".into()),
            ],
        )?;
        let nova = http(
            &args.url,
            format!("nova:{NOVA_PROJECT}"),
            vec![
                ("x-user-id", "nova".into()),
                ("x-project-id", NOVA_PROJECT.into()),
                ("x-roles", args.nova_roles.clone()),
                ("x-service-roles", "service".into()),
            ],
        )?;
        Ok(Api {
            admin: accelerator::Client::new(admin.clone()).with_microversion(None),
            nova: accelerator::Client::new(nova).with_microversion(None),
            agent: agent::Client::new(admin),
            placement: http(&args.placement_url, "admin".into(), Vec::new())?,
        })
    }
}

/// Reports the fake hosts and returns `(host, device_rp_uuid)` per host.
async fn setup_hosts(
    api: &Api,
    hosts: usize,
    handles: usize,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::with_capacity(hosts);
    for h in 0..hosts {
        let host = format!("arq-bench-{h}");
        let r = Request::new(Method::POST, "/resource_providers")
            .microversion("placement 1.20")
            .json(&json!({"name": host}));
        let reply = api
            .placement
            .send(&r)
            .await
            .context("creating the compute node provider (is the Placement API up?)")?;
        if reply.status != 409 {
            reply
                .success()
                .context("creating the compute node provider")?;
        }
        api.agent
            .report(&host, &fake_report(&host, 1, handles), false)
            .await
            .context("reporting the fake device")?;
        out.push(host);
    }
    let deployables = api.admin.deployables(&[]).await?;
    out.into_iter()
        .map(|host| {
            let name = format!("{host}_FakeDevice");
            let rp = deployables
                .iter()
                .find(|d| d.name == name)
                .and_then(|d| d.rp_uuid.clone())
                .with_context(|| format!("no deployable {name} with an rp_uuid"))?;
            Ok((host, rp))
        })
        .collect()
}

/// Per-iteration timings of the cycle's steps.
#[derive(Default)]
struct Steps {
    create: Vec<Duration>,
    bind: Vec<Duration>,
    resolve: Vec<Duration>,
    delete: Vec<Duration>,
    to_resolved: Vec<Duration>,
    polls: usize,
}

/// The fake Nova's state: events counted, and the cycles waiting for an instance's.
#[derive(Default)]
struct Nova {
    received: AtomicUsize,
    waiters: Mutex<HashMap<String, oneshot::Sender<()>>>,
}

impl Nova {
    /// Registers a wait for `instance`'s events (before the PATCH that causes them:
    /// upstream sends them before it answers).
    fn expect(&self, instance: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().unwrap().insert(instance.to_owned(), tx);
        rx
    }
}

/// What every cycle of the cycle phase shares.
struct Driver {
    api: Api,
    profile: String,
    /// ARQs per instance.
    k: usize,
    poll: Duration,
    nova: Option<Arc<Nova>>,
    steps: Mutex<Steps>,
}

impl Driver {
    /// One Nova boot's accelerator part and its teardown, on `host`'s deployable `rp`.
    async fn cycle(&self, host: &str, rp: &str) -> Result<(), String> {
        let Driver {
            api,
            profile,
            k,
            poll,
            nova,
            steps,
        } = self;
        let (k, poll) = (*k, *poll);
        let instance = Uuid::new_v4().to_string();
        let event = nova.as_ref().map(|n| n.expect(&instance));
        let t0 = Instant::now();
        let created = api
            .nova
            .create_arqs(&NewArqs {
                device_profile_name: profile.clone(),
                device_profile_group_id: None,
            })
            .await
            .map_err(|e| e.to_string())?;
        if created.len() != k {
            return Err(format!("created {} ARQs, expected {k}", created.len()));
        }
        let t1 = Instant::now();
        let mut patch = ArqPatch::new();
        for a in &created {
            patch_entry(&mut patch, &a.uuid, bind_ops(host, rp, &instance));
        }
        // The Nova client's own headers carry its service role.
        api.nova
            .patch_arqs(&patch, None)
            .await
            .map_err(|e| e.to_string())?;
        let t2 = Instant::now();
        if let Some(rx) = event {
            tokio::time::timeout(Duration::from_secs(60), rx)
                .await
                .map_err(|_| format!("no event for instance {instance} after 60 s"))?
                .map_err(|_| "the fake Nova stopped".to_owned())?;
        }
        let filter = ArqFilter {
            instance: Some(instance.clone()),
            bind_state: Some("resolved".into()),
        };
        let mut polls = 0;
        let resolved = loop {
            polls += 1;
            match api.nova.arqs(&filter).await {
                Ok(arqs) => break arqs,
                Err(e) if e.status() == Some(423) => {}
                Err(e) => return Err(e.to_string()),
            }
            if t2.elapsed() > Duration::from_secs(60) {
                return Err(format!("instance {instance} not resolved after 60 s"));
            }
            tokio::time::sleep(poll).await;
        };
        let bound = resolved
            .iter()
            .filter(|a| a.state == state::BOUND && a.attach_handle_uuid.is_some())
            .count();
        if bound != k {
            return Err(format!("{bound} of {k} ARQs Bound: {resolved:?}"));
        }
        let t3 = Instant::now();
        api.nova
            .delete_arqs(&ArqSelector::Instance(instance.clone()), None)
            .await
            .map_err(|e| e.to_string())?;
        let t4 = Instant::now();
        let mut s = steps.lock().unwrap();
        s.create.push(t1 - t0);
        s.bind.push(t2 - t1);
        s.resolve.push(t3 - t2);
        s.delete.push(t4 - t3);
        s.to_resolved.push(t3 - t0);
        s.polls += polls;
        Ok(())
    }
}

/// Counts the `accelerator-request-bound` events Nova would receive and wakes the
/// cycle waiting for each.
async fn fake_nova(addr: &str, nova: Arc<Nova>) -> anyhow::Result<()> {
    accel_bench::fake_nova::serve(addr, move |instance: &str, _bound| {
        nova.received.fetch_add(1, Ordering::SeqCst);
        if let Some(w) = nova.waiters.lock().unwrap().remove(instance) {
            let _ = w.send(());
        }
    })
    .await?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `| step | p50 | p99 | max |` over one step's timings.
fn step_row(name: &str, mut v: Vec<Duration>) -> String {
    v.sort_unstable();
    let p = |q: f64| {
        let rank = ((q / 100.0) * v.len() as f64).ceil() as usize;
        v.get(rank.clamp(1, v.len().max(1)) - 1)
            .copied()
            .unwrap_or_default()
    };
    format!(
        "| {name} | {:.2} | {:.2} | {:.2} |",
        ms(p(50.0)),
        ms(p(99.0)),
        ms(v.last().copied().unwrap_or_default())
    )
}

/// The instance uuid of seeded instance `i` (the seed script's pattern).
fn seeded_instance(i: usize) -> String {
    format!("5eed0000-0000-4000-8000-{i:012}")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let c = args.clients.max(1);
    let hosts = args.hosts.unwrap_or(c).max(1);
    let k = args.accelerators.max(1);
    if args.cycles > 0 && (hosts < c || args.handles_per_host < k) {
        bail!("each client needs a host of its own with at least --accelerators handles: give --hosts >= --clients and --handles-per-host >= --accelerators");
    }
    let api = Api::new(&args, c)?;
    let nova = match &args.nova_listen {
        Some(addr) => {
            let n = Arc::new(Nova::default());
            fake_nova(addr, n.clone()).await?;
            Some(n)
        }
        None => None,
    };

    let mut results: Vec<PhaseStats> = Vec::new();
    let mut step_rows = Vec::new();
    let mut polls_per_cycle = 0.0;
    if args.cycles > 0 {
        let targets = if args.targets.is_empty() {
            setup_hosts(&api, hosts, args.handles_per_host).await?
        } else {
            args.targets
                .iter()
                .map(|t| match t.split_once('=') {
                    Some((h, rp)) => Ok((h.to_owned(), rp.to_owned())),
                    None => bail!("--target takes HOST=DEVICE_RP_UUID, not {t}"),
                })
                .collect::<anyhow::Result<_>>()?
        };
        if targets.len() < c {
            bail!(
                "{} targets for {c} clients: each client needs a host of its own",
                targets.len()
            );
        }
        let targets = Arc::new(targets);
        let profile: Arc<str> = format!("arq-bench-{k}").into();
        let group =
            json!({"resources:FPGA": k.to_string(), "trait:CUSTOM_FAKE_DEVICE": "required"});
        let created = api
            .admin
            .create_profile(&NewDeviceProfile {
                name: profile.to_string(),
                groups: vec![serde_json::from_value(group)?],
                description: None,
                uuid: None,
            })
            .await;
        match created {
            Err(e) if e.status() == Some(409) => {}
            other => {
                other?;
            }
        }

        let driver = Arc::new(Driver {
            api: api.clone(),
            profile: profile.to_string(),
            k,
            poll: Duration::from_millis(args.poll_ms),
            nova: nova.clone(),
            steps: Mutex::default(),
        });
        let (d, t) = (driver.clone(), targets.clone());
        let name = format!("create + bind + resolved + delete, {k} ARQs");
        results.push(
            run_phase(&name, c, args.cycles, move |w, _| {
                let (driver, targets) = (d.clone(), t.clone());
                async move {
                    let (host, rp) = &targets[w % targets.len()];
                    driver.cycle(host, rp).await
                }
            })
            .await,
        );
        let s = std::mem::take(&mut *driver.steps.lock().unwrap());
        polls_per_cycle = s.polls as f64 / s.create.len().max(1) as f64;
        step_rows.push(step_row("POST accelerator_requests", s.create));
        step_rows.push(step_row("PATCH bind (202)", s.bind));
        step_rows.push(step_row("202 → resolved", s.resolve));
        step_rows.push(step_row("**create + bind + resolved**", s.to_resolved));
        step_rows.push(step_row("DELETE ?instance=", s.delete));
    }

    if args.seeded > 0 && args.list_requests > 0 {
        let instances = args.seeded / 4;
        if instances == 0 {
            bail!("--seeded must be at least 4");
        }
        let list = move |api: Api, i: usize| {
            // A scattered walk over the seeded instances.
            let instance = seeded_instance(i.wrapping_mul(7919) % instances);
            async move {
                let filter = ArqFilter {
                    instance: Some(instance.clone()),
                    bind_state: None,
                };
                match api
                    .nova
                    .arqs(&filter)
                    .await
                    .map_err(|e| e.to_string())?
                    .len()
                {
                    4 => Ok(()),
                    n => Err(format!("instance {instance}: {n} ARQs, expected 4")),
                }
            }
        };
        // Untimed warm-up: connections, caches, the server's pool.
        let a = api.clone();
        let warm = run_phase(
            "warm-up",
            c,
            (args.list_requests / 10).max(c),
            move |_, i| list(a.clone(), i + 1),
        )
        .await;
        if warm.failures > 0 {
            results.push(warm);
        }
        let a = api.clone();
        let name = format!("GET ?instance= ({} ARQs in the table)", args.seeded);
        results.push(run_phase(&name, c, args.list_requests, move |_, i| list(a.clone(), i)).await);
    }

    let expected_events = results
        .first()
        .filter(|_| args.cycles > 0)
        .map(|r| (r.requests - r.failures) * k)
        .unwrap_or(0);
    let received = || {
        nova.as_ref()
            .map_or(0, |n| n.received.load(Ordering::SeqCst))
    };
    let mut events_line = None;
    if nova.is_some() && expected_events > 0 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while received() < expected_events && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        events_line = Some(format!(
            "Nova events received: {} of {expected_events}",
            received()
        ));
    }

    if !args.label.is_empty() {
        println!("{}\n", args.label);
    }
    println!("{TABLE_HEADER}");
    for r in &results {
        println!("{}", r.row());
    }
    for r in &results {
        println!(
            "\n{}: {} in {:.2} s = {:.2}/s",
            r.name,
            r.requests,
            r.elapsed.as_secs_f64(),
            r.throughput()
        );
    }
    if !step_rows.is_empty() {
        println!("\n| step of one cycle | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|");
        for r in &step_rows {
            println!("{r}");
        }
        if nova.is_some() {
            println!("\nresolution: waited for the instance's Nova event, then one GET ?bind_state=resolved ({polls_per_cycle:.2} per cycle)");
        } else {
            println!(
                "\nresolution: GET ?bind_state=resolved every {} ms until 200 ({polls_per_cycle:.2} per cycle)",
                args.poll_ms
            );
        }
    }
    if let Some(l) = &events_line {
        println!("{l}");
    }
    accel_bench::check_failures(&results).map_err(anyhow::Error::msg)?;
    if nova.is_some() && received() < expected_events {
        bail!("not every bound ARQ's event reached the fake Nova");
    }
    Ok(())
}
