//! `accel-bench partitions`: allocation candidates for a MIG profile across a fleet of
//! partitioned GPUs (issue 45), beside the same query for the whole GPU on the same
//! estate, over HTTP against a real `accel serve`.
//!
//! - **setup** (untimed): per node a compute node provider `mig-<n>` with Nova's
//!   inventories, and the agent's report of `--gpus` H100s (H200s on the last
//!   `--h200-nodes` nodes) in MIG mode, each carrying its `partitions` (the
//!   reference's geometry, `accel_core::partition::fixtures`). The report body is
//!   the agent's own rendering (`accel_agent::model::Report`) of the devices its
//!   `nvidia` driver finds, sent through the agent protocol, so the server builds every
//!   ledger and MIG child provider as it does for a real node.
//! - **holders** (untimed): Placement claims as Nova or the DRA path write them
//!   (`PUT /allocations/{consumer}`): a share of the GPUs held whole
//!   (`--whole-held`), a share partly held (`--partly-held`: one to four claims of a
//!   random profile each, a claim the ledger refuses with 409 skipped and counted), the
//!   rest free. So the ledger's `reserved` differs from GPU to GPU.
//! - **queries** (timed): each query `--requests` times on `-c` clients (a closed
//!   loop), Nova's candidates call (`placement 1.36`, `limit`), timed from the request
//!   sent to the whole answer read (not parsed). A first, untimed answer is checked:
//!   the whole GPU's count of candidates against the GPUs nothing holds (the answer is
//!   exact, not just fast), a MIG query offers something and, with one group, no
//!   more GPUs than are not held whole; every timed answer must have its size.
//!
//! Seeded: the same `--seed` on an empty database gives the same estate.

use crate::{check_failures, run_phase, PhaseStats};
use accel_agent::model::{FoundDevice, Handle, Health, Memory, Report};
use accel_agent::pci::PciAddress;
use accel_api::agent;
use accel_api::http::{Http, Method, Request};
use accel_api::partitions::GpuPartitions;
use accel_core::accelerator::DeviceType;
use accel_core::partition::{fixtures, members, Geometry, Member};
use anyhow::{bail, Context};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `accel-bench partitions`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct PartitionsArgs {
    /// Compute nodes.
    #[arg(long, default_value_t = 125)]
    pub nodes: usize,
    /// GPUs per node (an HGX board's 8 at most).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..=8))]
    pub gpus: u8,
    /// The last N nodes have H200s instead of H100s (other profile names, so a query
    /// for an H100 profile does not match them).
    #[arg(long, default_value_t = 0)]
    pub h200_nodes: usize,
    /// Share of the GPUs held whole (`CUSTOM_ACCELERATOR_GPU: 1` on the GPU's provider).
    #[arg(long, default_value_t = 0.05)]
    pub whole_held: f64,
    /// Share of the GPUs partly held (one to four MIG claims each).
    #[arg(long, default_value_t = 0.6)]
    pub partly_held: f64,
    /// Requests per query.
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// Concurrent clients of the timed queries.
    #[arg(long, short = 'c', default_value_t = 1)]
    pub concurrency: usize,
    /// `limit` of each candidates query (Nova's `max_placement_results`); 0 sends none.
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
    /// The Placement API of a running server (empty before the run).
    #[arg(long, default_value = "http://127.0.0.1:8778")]
    pub placement_url: String,
    /// The accelerator API of the same server.
    #[arg(long, default_value = "http://127.0.0.1:6666")]
    pub accelerator_url: String,
    /// Start `accel serve` on this (empty) database instead: SQLite, PostgreSQL or
    /// MariaDB URL.
    #[arg(long)]
    pub database: Option<String>,
    /// The `accel` binary `--database` starts (default: beside this one).
    #[arg(long)]
    pub accel_bin: Option<std::path::PathBuf>,
    /// Seed of the holders' choices.
    #[arg(long, default_value_t = 45)]
    pub seed: u64,
    /// Concurrent requests of the setup.
    #[arg(long, default_value_t = 8)]
    pub setup_clients: usize,
}

const CANDIDATES_MV: &str = "placement 1.36";
const CLAIM_MV: &str = "placement 1.36";
/// A node's report is sent this many times at most while the server answers 409.
const REPORT_TRIES: usize = 10;
/// An HGX board's GPU buses.
const GPU_BUSES: [u8; 8] = [0x17, 0x31, 0x4b, 0x65, 0x98, 0xb1, 0xca, 0xe3];

/// One GPU model of the estate: what NVML and the PCI ids tell the `nvidia` driver.
struct Model {
    product: u16,
    name: &'static str,
    memory_mib: i64,
    geometry: Geometry,
}

fn h100() -> Model {
    Model {
        product: 0x2330,
        name: "NVIDIA H100 80GB HBM3",
        memory_mib: 81559,
        geometry: fixtures::h100_80gb(),
    }
}

fn h200() -> Model {
    Model {
        product: 0x2335,
        name: "NVIDIA H200",
        memory_mib: 143771,
        geometry: fixtures::h200_141gb(),
    }
}

/// The ledger's model of a GPU in the agent protocol's words (the reverse of
/// [`GpuPartitions::geometry`]), as the `nvidia` driver reports what NVML lists.
pub fn wire(g: &Geometry) -> GpuPartitions {
    GpuPartitions::from_geometry(g)
}

fn address(gpu: usize) -> PciAddress {
    PciAddress {
        domain: 0,
        bus: GPU_BUSES[gpu],
        slot: 0,
        function: 0,
    }
}

/// What the agent's `nvidia` driver finds for GPU `i` of a node with NVML in MIG mode.
fn found(model: &Model, i: usize) -> FoundDevice {
    let a = address(i);
    FoundDevice {
        device_type: DeviceType::Gpu,
        vendor: 0x10de,
        product: model.product,
        model: model.name.into(),
        family: Some("HOPPER".into()),
        address: a,
        numa_node: Some((i / 4) as u32),
        driver: "nvidia",
        health: Health::Ok,
        class: "GPU".into(),
        count: 1,
        handles: vec![Handle::pci(a)],
        memory: Some(Memory {
            kind: "HBM".into(),
            mib: model.memory_mib,
        }),
        regions: Vec::new(),
        extra_traits: vec!["CUSTOM_GPU_NVIDIA_MIG".into()],
        functions: vec![a],
        board_info: vec![("mig_instances".into(), "0".into())],
        partitions: Some(wire(&model.geometry)),
    }
}

/// One node's report, as its agent sends it.
pub fn node_report(node: &str, model_h200: bool, gpus: usize) -> agent::DeviceReport {
    let model = if model_h200 { h200() } else { h100() };
    Report::new(node, (0..gpus).map(|i| found(&model, i)).collect()).body()
}

fn node_name(n: usize) -> String {
    format!("mig-{n}")
}

fn node_uuid(n: usize) -> String {
    uuid::Uuid::new_v3(&uuid::Uuid::NAMESPACE_OID, node_name(n).as_bytes()).to_string()
}

/// A provider's uuid as the server derives it from its name (`uuid3(DNS, name)`).
fn provider_uuid(name: &str) -> String {
    uuid::Uuid::new_v3(&uuid::Uuid::NAMESPACE_DNS, name.as_bytes()).to_string()
}

/// One claim of a holder plan: a provider of the GPU's family and its class.
#[derive(Debug, Clone)]
struct Claim {
    provider: String,
    class: String,
}

/// What each GPU's holders ask, drawn from `seed`.
fn plan(args: &PartitionsArgs) -> Vec<Vec<Claim>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let gpus = args.gpus as usize;
    let mut out = Vec::with_capacity(args.nodes * gpus);
    for n in 0..args.nodes {
        let model = if n >= args.nodes.saturating_sub(args.h200_nodes) {
            h200()
        } else {
            h100()
        };
        let g = &model.geometry;
        let migs: Vec<Member> = members(g)
            .into_iter()
            .filter(|m| matches!(m, Member::Mig(_)))
            .collect();
        for i in 0..gpus {
            let gpu = format!("{}_{}", node_name(n), address(i));
            let draw: f64 = rng.gen();
            let claims = if draw < args.whole_held {
                vec![Claim {
                    provider: gpu,
                    class: "CUSTOM_ACCELERATOR_GPU".into(),
                }]
            } else if draw < args.whole_held + args.partly_held {
                (0..rng.gen_range(1..=4))
                    .map(|_| {
                        let m = &migs[rng.gen_range(0..migs.len())];
                        Claim {
                            provider: m.provider_name(g, &gpu),
                            class: m.resource_class(g).unwrap_or_default(),
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            };
            out.push(claims);
        }
    }
    out
}

/// What the holders' claims did.
#[derive(Default)]
struct Held {
    claims: AtomicUsize,
    refused: AtomicUsize,
    whole: AtomicUsize,
    partly: AtomicUsize,
}

/// A timed query.
struct Query {
    label: &'static str,
    params: Vec<(&'static str, String)>,
}

fn queries(limit: usize) -> Vec<Query> {
    let q = |label, params: &[(&'static str, &str)]| {
        let mut params: Vec<(&'static str, String)> =
            params.iter().map(|(k, v)| (*k, v.to_string())).collect();
        if limit > 0 {
            params.push(("limit", limit.to_string()));
        }
        Query { label, params }
    };
    vec![
        q("MIG 1g.10gb", &[("resources", "CUSTOM_MIG_1G_10GB:1")]),
        q(
            "MIG 1g.10gb, trait required",
            &[
                ("resources", "CUSTOM_MIG_1G_10GB:1"),
                ("required", "CUSTOM_GPU_NVIDIA_HOPPER"),
            ],
        ),
        q(
            "MIG 3g.40gb + 1g.10gb, two groups",
            &[
                ("resources1", "CUSTOM_MIG_3G_40GB:1"),
                ("resources2", "CUSTOM_MIG_1G_10GB:1"),
                ("group_policy", "none"),
            ],
        ),
        q("whole GPU", &[("resources", "CUSTOM_ACCELERATOR_GPU:1")]),
        q(
            "whole GPU, trait required",
            &[
                ("resources", "CUSTOM_ACCELERATOR_GPU:1"),
                ("required", "CUSTOM_GPU_NVIDIA_HOPPER"),
            ],
        ),
    ]
}

fn candidates_request(q: &Query) -> Request {
    let mut r = Request::get("/allocation_candidates").microversion(CANDIDATES_MV);
    for (k, v) in &q.params {
        r = r.query(k, v.clone());
    }
    r
}

/// An answer's number of candidates, how many of them name two providers of one
/// GPU's family (each such GPU costs the server a ledger read), and its size in bytes.
fn read_answer(
    text: &str,
    family: &HashMap<String, usize>,
) -> anyhow::Result<(usize, usize, usize)> {
    let v: Value = serde_json::from_str(text).context("a candidates answer")?;
    let requests = v["allocation_requests"]
        .as_array()
        .context("no allocation_requests")?;
    let one_gpu = requests
        .iter()
        .filter(|r| {
            let mut gpus: Vec<usize> = r["allocations"]
                .as_object()
                .into_iter()
                .flat_map(|a| a.keys())
                .filter_map(|u| family.get(u).copied())
                .collect();
            let named = gpus.len();
            gpus.sort_unstable();
            gpus.dedup();
            gpus.len() < named
        })
        .count();
    Ok((requests.len(), one_gpu, text.len()))
}

/// Every provider of every GPU's family (the GPU's and its MIG children's uuids) and
/// the GPU it belongs to.
fn families(args: &PartitionsArgs) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for n in 0..args.nodes {
        let model = if n >= args.nodes.saturating_sub(args.h200_nodes) {
            h200()
        } else {
            h100()
        };
        for i in 0..args.gpus as usize {
            let gpu = format!("{}_{}", node_name(n), address(i));
            for m in members(&model.geometry) {
                let name = m.provider_name(&model.geometry, &gpu);
                out.insert(provider_uuid(&name), n * args.gpus as usize + i);
            }
        }
    }
    out
}

/// Runs the setup and the queries; prints the tables.
pub async fn run(args: PartitionsArgs) -> anyhow::Result<()> {
    if args.whole_held + args.partly_held > 1.0 {
        bail!("--whole-held and --partly-held add up to more than 1");
    }
    let started = match &args.database {
        Some(db) => {
            let nova = crate::fake_nova::serve("127.0.0.1:0", |_: &str, _| {}).await?;
            Some(
                crate::cloud::server::Server::start(db, args.accel_bin.as_deref(), &nova, None)
                    .await?,
            )
        }
        None => None,
    };
    let (placement_url, accelerator_url) = match &started {
        Some(s) => (s.placement.clone(), s.accelerator.clone()),
        None => (args.placement_url.clone(), args.accelerator_url.clone()),
    };
    let result = measure(&args, &placement_url, &accelerator_url).await;
    if let Some(s) = started {
        s.stop().await;
    }
    result
}

async fn measure(
    args: &PartitionsArgs,
    placement_url: &str,
    accel_url: &str,
) -> anyhow::Result<()> {
    let placement = Arc::new(Http::with_token(placement_url, "admin")?);
    let agent = Arc::new(agent::Client::new(Http::with_token(accel_url, "admin")?));
    let existing = placement
        .send(&Request::get("/resource_providers").microversion(CLAIM_MV))
        .await
        .context("is the server up?")?;
    let v: Value = existing.json()?;
    if v["resource_providers"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        bail!("the server already has resource providers; start it on an empty database");
    }
    let gpus = args.gpus as usize;
    let total_gpus = args.nodes * gpus;

    // Nodes and their agents' reports.
    let (p, a) = (placement.clone(), agent.clone());
    let (nodes, h200_from) = (args.nodes, args.nodes.saturating_sub(args.h200_nodes));
    let again = Arc::new(AtomicUsize::new(0));
    let a2 = again.clone();
    let setup = run_phase("setup", args.setup_clients, nodes, move |_, n| {
        let (placement, agent, reports_again) = (p.clone(), a.clone(), a2.clone());
        async move {
            let name = node_name(n);
            let create = Request::new(Method::POST, "/resource_providers")
                .microversion("placement 1.20")
                .json(&json!({"name": name, "uuid": node_uuid(n)}));
            placement
                .send(&create)
                .await
                .and_then(|r| r.success())
                .map_err(|e| format!("creating {name}: {e}"))?;
            let inv = Request::new(
                Method::PUT,
                format!("/resource_providers/{}/inventories", node_uuid(n)),
            )
            .microversion("placement 1.20")
            .json(&json!({"resource_provider_generation": 0, "inventories": {
                "VCPU": {"total": 128, "allocation_ratio": 4.0},
                "MEMORY_MB": {"total": 2097152, "reserved": 512},
                "DISK_GB": {"total": 8000}}}));
            placement
                .send(&inv)
                .await
                .and_then(|r| r.success())
                .map_err(|e| format!("{name}'s inventories: {e}"))?;
            let body = node_report(&name, n >= h200_from, gpus);
            // A 409 is sent again, as the agent's next report would send it.
            for _ in 1..REPORT_TRIES {
                match agent.report(&name, &body, false).await {
                    Err(e) if e.status() == Some(409) => {
                        eprintln!("{name}'s report, sent again: {e}");
                        reports_again.fetch_add(1, Ordering::Relaxed);
                    }
                    r => return r.map(|_| ()).map_err(|e| format!("{name}'s report: {e}")),
                }
            }
            Err(format!("{name}'s report refused 409 {REPORT_TRIES} times"))
        }
    })
    .await;
    check_failures(std::slice::from_ref(&setup)).map_err(anyhow::Error::msg)?;
    eprintln!(
        "setup: {} nodes x {gpus} GPUs reported in {:.1} s ({} reports refused 409 and sent again)",
        args.nodes,
        setup.elapsed.as_secs_f64(),
        again.load(Ordering::Relaxed)
    );

    // Holders, one GPU's claims in order.
    let plan = Arc::new(plan(args));
    let held = Arc::new(Held::default());
    let (p, pl, h) = (placement.clone(), plan.clone(), held.clone());
    let holding = run_phase("holders", args.setup_clients, total_gpus, move |_, g| {
        let (placement, plan, held) = (p.clone(), pl.clone(), h.clone());
        async move {
            let mut made = 0;
            for (k, c) in plan[g].iter().enumerate() {
                let consumer = uuid::Uuid::new_v3(
                    &uuid::Uuid::NAMESPACE_OID,
                    format!("holder-{g}-{k}").as_bytes(),
                )
                .to_string();
                let body = json!({
                    "allocations": {provider_uuid(&c.provider): {"resources": {c.class.as_str(): 1}}},
                    "project_id": "bench", "user_id": "bench", "consumer_generation": null,
                });
                let r = placement
                    .send(
                        &Request::new(Method::PUT, format!("/allocations/{consumer}"))
                            .microversion(CLAIM_MV)
                            .json(&body),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                match r.status {
                    204 => made += 1,
                    // The ledger cannot place it beside the GPU's other holders.
                    409 => {
                        held.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    s => return Err(format!("claim on {}: {s} {}", c.provider, r.text)),
                }
            }
            held.claims.fetch_add(made, Ordering::Relaxed);
            match plan[g].first() {
                Some(c) if made > 0 && c.class == "CUSTOM_ACCELERATOR_GPU" => {
                    held.whole.fetch_add(1, Ordering::Relaxed);
                }
                Some(_) if made > 0 => {
                    held.partly.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
            Ok(())
        }
    })
    .await;
    check_failures(std::slice::from_ref(&holding)).map_err(anyhow::Error::msg)?;
    let (whole, partly) = (
        held.whole.load(Ordering::Relaxed),
        held.partly.load(Ordering::Relaxed),
    );
    let free = total_gpus - whole - partly;
    eprintln!(
        "holders: {} claims in {:.1} s ({} refused by the ledger): {whole} GPUs held whole, \
         {partly} partly, {free} free",
        held.claims.load(Ordering::Relaxed),
        holding.elapsed.as_secs_f64(),
        held.refused.load(Ordering::Relaxed),
    );

    // The queries.
    println!(
        "{} nodes x {gpus} GPUs ({} H200 nodes): {whole} held whole, {partly} partly, {free} free; \
         {} requests per query on {} client(s), limit {}",
        args.nodes, args.h200_nodes, args.requests, args.concurrency, args.limit
    );
    println!("| query | candidates | on one GPU | answer bytes | requests | clients | req/s | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let family = families(args);
    let mut all: Vec<PhaseStats> = Vec::new();
    for q in queries(args.limit) {
        let req = Arc::new(candidates_request(&q));
        // Untimed: the index's first read of the estate, and the answer checked.
        let first = placement
            .send(&req)
            .await
            .and_then(|r| r.success())
            .with_context(|| format!("{}: GET /allocation_candidates", q.label))?;
        let (found, one_gpu, bytes) = read_answer(&first.text, &family)?;
        check_count(q.label, found, free, total_gpus - whole, args)?;
        let p = placement.clone();
        let stats = run_phase(q.label, args.concurrency, args.requests, move |_, _| {
            let (placement, req) = (p.clone(), req.clone());
            async move {
                let r = placement.send(&req).await.map_err(|e| e.to_string())?;
                // Parsing the answer again would time this client's JSON reader: an
                // unchanged estate answers the same bytes, so its size is the check.
                match r.status {
                    200 if r.text.len() == bytes => Ok(()),
                    200 => Err(format!("{} bytes, not {bytes}", r.text.len())),
                    s => Err(format!("{s}: {}", r.text)),
                }
            }
        })
        .await;
        println!(
            "| {} | {found} | {one_gpu} | {bytes} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            q.label,
            stats.requests,
            stats.concurrency,
            stats.throughput(),
            ms(stats.percentile(50.0)),
            ms(stats.percentile(99.0)),
            ms(stats.latencies.last().copied().unwrap_or_default()),
        );
        all.push(stats);
    }
    check_failures(&all).map_err(anyhow::Error::msg)
}

/// The whole GPU is offered exactly where nothing is held (the limit permitting); a
/// MIG profile somewhere, and never on a GPU held whole.
fn check_count(
    label: &str,
    found: usize,
    free: usize,
    not_whole: usize,
    args: &PartitionsArgs,
) -> anyhow::Result<()> {
    let capped = |n: usize| if args.limit > 0 { n.min(args.limit) } else { n };
    if label.starts_with("whole GPU") {
        // The class and the family trait are every GPU's here, H100 and H200 alike.
        if found != capped(free) {
            bail!("{label}: {found} candidates, but {free} GPUs are free");
        }
    } else if found == 0 || (!label.contains("two groups") && found > capped(not_whole)) {
        bail!("{label}: {found} candidates for {not_whole} GPUs not held whole");
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_carries_every_gpu_with_its_partitions() {
        let r = node_report("n", false, 8);
        assert_eq!(r.devices.len(), 8);
        let d = &r.devices[0];
        assert_eq!(d.deployables[0].name, "n_0000:17:00.0");
        let g = d.partitions.as_ref().unwrap().geometry();
        assert_eq!(g, fixtures::h100_80gb());
        let h200 = node_report("n", true, 1);
        assert_eq!(
            h200.devices[0].partitions.as_ref().unwrap().geometry(),
            fixtures::h200_141gb()
        );
    }

    #[test]
    fn the_plan_is_seeded_and_holds_about_the_shares_asked() {
        let args = PartitionsArgs {
            nodes: 125,
            gpus: 8,
            h200_nodes: 25,
            whole_held: 0.05,
            partly_held: 0.6,
            requests: 1,
            concurrency: 1,
            limit: 1000,
            placement_url: String::new(),
            accelerator_url: String::new(),
            database: None,
            accel_bin: None,
            seed: 45,
            setup_clients: 1,
        };
        let a = plan(&args);
        let b = plan(&args);
        assert_eq!(a.len(), 1000);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let whole = a
            .iter()
            .filter(|c| {
                c.first()
                    .is_some_and(|c| c.class == "CUSTOM_ACCELERATOR_GPU")
            })
            .count();
        let empty = a.iter().filter(|c| c.is_empty()).count();
        assert!((20..=80).contains(&whole), "{whole}");
        assert!((280..=420).contains(&empty), "{empty}");
        // The H200 nodes' claims name H200 profiles, the others H100 ones.
        let classes = |gpus: &[Vec<Claim>]| -> Vec<String> {
            gpus.iter()
                .flatten()
                .filter(|c| c.class != "CUSTOM_ACCELERATOR_GPU")
                .map(|c| c.class.clone())
                .collect()
        };
        let (h100s, h200s) = (classes(&a[..800]), classes(&a[800..]));
        assert!(h100s.iter().any(|c| c == "CUSTOM_MIG_1G_10GB"), "{h100s:?}");
        assert!(h200s.iter().any(|c| c == "CUSTOM_MIG_1G_18GB"), "{h200s:?}");
        assert!(h200s
            .iter()
            .all(|c| !c.contains("10GB") && !c.contains("40GB")));
    }
}
