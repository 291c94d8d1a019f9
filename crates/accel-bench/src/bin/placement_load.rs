//! Placement write and read throughput over HTTP, for accel and upstream side by side.
//!
//! Against an empty Placement (accel or upstream, noauth2 with the `admin` token), runs
//! five phases in order, each building on the data of the previous ones:
//!
//! 1. `create provider`: `POST /resource_providers`, `--providers` distinct providers;
//! 2. `PUT inventories`: `PUT /resource_providers/{u}/inventories`, each client on its
//!    own provider, carrying the generation forward (so no request loses a race);
//! 3. `PUT allocations`: `PUT /allocations/{new consumer}` for 1 VCPU and 16 MEMORY_MB on
//!    the client's provider, four projects round robin;
//! 4. `GET usages`: `GET /usages?project_id=P`, over the allocations just written;
//! 5. `GET resource_providers`: the whole list (`--providers` providers).
//!
//! Every request uses microversion 1.39. Prints a Markdown table; exits non-zero when any
//! request failed.
//!
//! With `--scrape-url http://127.0.0.1:9778/metrics` a Prometheus-like scraper reads that
//! URL every `--scrape-interval` seconds while the phases run, so the cost of being
//! watched shows in the same table (docs/benchmarks.md, issue 13).
//!
//! ```sh
//! cargo run --release -p accel-bench --bin placement-load -- --url http://127.0.0.1:8778
//! ```

use accel_api::http::{Http, Method};
use accel_api::placement::{
    mv, Client, ConsumerAllocations, InventoriesPut, InventoryRecord, Map, ProviderAllocation,
    ProviderCreate, Resources, Usage, Version,
};
use accel_bench::{run_phase, PhaseStats, TABLE_HEADER};
use anyhow::{bail, Context};
use clap::Parser;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

#[derive(Parser, Debug)]
#[command(
    about = "Placement HTTP load: create provider, PUT inventories, PUT allocations, GET usages, GET resource_providers"
)]
struct Args {
    /// Base URL of an empty Placement service.
    #[arg(long, default_value = "http://127.0.0.1:8778")]
    url: String,
    /// noauth2 token (admin is needed for every phase).
    #[arg(long, default_value = "admin")]
    token: String,
    /// Concurrent clients.
    #[arg(long, short = 'c', default_value_t = 8)]
    concurrency: usize,
    /// Providers created in the first phase (and listed in the last).
    #[arg(long, default_value_t = 1000)]
    providers: usize,
    /// Requests in each of the inventory, allocation and usage phases.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Requests in the listing phase (each returns every provider).
    #[arg(long, default_value_t = 200)]
    list_requests: usize,
    /// A label printed above the table.
    #[arg(long, default_value = "")]
    label: String,
    /// Scrape this URL (the server's `/metrics`) while the phases run.
    #[arg(long, value_name = "URL")]
    scrape_url: Option<String>,
    /// Seconds between two scrapes of `--scrape-url`.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    scrape_interval: f64,
}

/// Reads `url` every `every` until dropped; counts the scrapes and the failed ones.
fn scraper(
    url: String,
    every: std::time::Duration,
) -> (tokio::task::JoinHandle<()>, Arc<Mutex<(u64, u64)>>) {
    let counts = Arc::new(Mutex::new((0u64, 0u64)));
    let c = counts.clone();
    let task = tokio::spawn(async move {
        let client = reqwest::Client::new();
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let ok = match client
                .get(&url)
                .header("accept", "text/plain;version=0.0.4")
                .send()
                .await
            {
                Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                Err(_) => false,
            };
            let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
            c.0 += 1;
            if !ok {
                c.1 += 1;
            }
        }
    });
    (task, counts)
}

const VERSION: Version = mv::ANY_TRAITS;

fn inventories(generation: i64, total: i64) -> InventoriesPut {
    let record = |total: i64| InventoryRecord {
        total,
        ..Default::default()
    };
    InventoriesPut {
        resource_provider_generation: generation,
        inventories: Map(vec![
            (
                "VCPU".into(),
                InventoryRecord {
                    allocation_ratio: Some(16.0),
                    ..record(total)
                },
            ),
            (
                "MEMORY_MB".into(),
                InventoryRecord {
                    reserved: Some(512),
                    ..record(total * 1024)
                },
            ),
            (
                "DISK_GB".into(),
                InventoryRecord {
                    min_unit: Some(10),
                    step_size: Some(10),
                    ..record(2048)
                },
            ),
        ]),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let api = Client::new(Http::with_token(&args.url, &args.token)?);
    let c = args.concurrency.max(1);
    if args.providers < c {
        bail!("--providers must be at least --concurrency");
    }
    let existing = api
        .providers(VERSION, &[])
        .await
        .context("is the service up?")?;
    if !existing.is_empty() {
        bail!("the service already has resource providers; start it on an empty database");
    }

    let scraping = args.scrape_url.clone().map(|u| {
        scraper(
            u,
            std::time::Duration::from_secs_f64(args.scrape_interval.max(0.01)),
        )
    });
    let mut results: Vec<PhaseStats> = Vec::new();
    let uuids: Arc<Vec<String>> = Arc::new(
        (0..args.providers)
            .map(|_| Uuid::new_v4().to_string())
            .collect(),
    );
    // Generations of the providers the clients own, carried from phase to phase.
    let generations: Arc<Vec<Mutex<i64>>> = Arc::new((0..c).map(|_| Mutex::new(0)).collect());

    // 1. create provider
    {
        let (api, uuids) = (api.clone(), uuids.clone());
        results.push(
            run_phase("create provider", c, args.providers, move |_, i| {
                let (api, uuids) = (api.clone(), uuids.clone());
                async move {
                    let body = ProviderCreate {
                        name: format!("bench-rp-{i}"),
                        uuid: Some(uuids[i].clone()),
                        parent_provider_uuid: None,
                    };
                    match api.create_provider(VERSION, &body).await {
                        Ok(Some(_)) => Ok(()),
                        Ok(None) => Err("no provider in the answer".to_owned()),
                        Err(e) => Err(format!("POST /resource_providers: {e}")),
                    }
                }
            })
            .await,
        );
    }

    // 2. PUT inventories, client w on provider w.
    {
        let (api, uuids, gens) = (api.clone(), uuids.clone(), generations.clone());
        results.push(
            run_phase("PUT inventories", c, args.requests, move |w, i| {
                let (api, uuids, gens) = (api.clone(), uuids.clone(), gens.clone());
                async move {
                    let generation = *gens[w].lock().unwrap();
                    // Alternate the total so every request is a real change.
                    let body = inventories(generation, 1_000_000 + (i % 2) as i64);
                    let v = api
                        .set_inventories(VERSION, &uuids[w], &body)
                        .await
                        .map_err(|e| format!("PUT inventories: {e}"))?;
                    *gens[w].lock().unwrap() = v.resource_provider_generation;
                    Ok(())
                }
            })
            .await,
        );
    }

    // 3. PUT allocations, a new consumer per request.
    {
        let (api, uuids) = (api.clone(), uuids.clone());
        results.push(
            run_phase("PUT allocations", c, args.requests, move |w, i| {
                let (api, uuids) = (api.clone(), uuids.clone());
                async move {
                    let body = ConsumerAllocations {
                        allocations: Map(vec![(
                            uuids[w].clone(),
                            ProviderAllocation {
                                generation: None,
                                resources: Resources(vec![
                                    ("VCPU".into(), 1),
                                    ("MEMORY_MB".into(), 16),
                                ]),
                            },
                        )]),
                        project_id: Some(format!("bench-project-{}", i % 4)),
                        user_id: Some("bench-user".into()),
                        consumer_generation: Some(None),
                        mappings: None,
                        consumer_type: Some("INSTANCE".into()),
                    };
                    api.put_allocations(VERSION, &Uuid::new_v4().to_string(), &body)
                        .await
                        .map_err(|e| format!("PUT allocations: {e}"))
                }
            })
            .await,
        );
    }

    // 4. GET usages per project.
    {
        let api = api.clone();
        let expected_vcpu = (args.requests / 4) as i64;
        results.push(
            run_phase("GET usages", c, args.requests, move |_, i| {
                let api = api.clone();
                async move {
                    let project = i % 4;
                    let v = api
                        .usages(VERSION, &format!("bench-project-{project}"))
                        .await
                        .map_err(|e| format!("GET usages: {e}"))?;
                    // 1.38 groups usages by consumer type.
                    let vcpu = match v.usages.get("INSTANCE") {
                        Some(Usage::Group(r)) => r.get("VCPU").unwrap_or(-1),
                        _ => -1,
                    };
                    if project == 0 && vcpu < expected_vcpu {
                        return Err(format!("usages VCPU {vcpu} < {expected_vcpu}: {v:?}"));
                    }
                    Ok(())
                }
            })
            .await,
        );
    }

    // 5. GET resource_providers, the whole list.
    {
        let api = api.clone();
        let n = args.providers;
        results.push(
            run_phase(
                "GET resource_providers",
                c,
                args.list_requests,
                move |_, _| {
                    let api = api.clone();
                    async move {
                        #[derive(serde::Deserialize)]
                        struct List {
                            resource_providers: Vec<serde::de::IgnoredAny>,
                        }
                        // Parsed without a value per provider, to keep the client's
                        // share of the two cores small.
                        let raw = api
                            .send(VERSION, Method::GET, "/resource_providers", None::<&()>)
                            .await
                            .and_then(|r| r.success())
                            .map_err(|e| format!("GET /resource_providers: {e}"))?;
                        let got = serde_json::from_str::<List>(&raw.text)
                            .map_err(|e| format!("bad listing: {e}"))?
                            .resource_providers
                            .len();
                        if got != n {
                            return Err(format!("listed {got} providers, expected {n}"));
                        }
                        Ok(())
                    }
                },
            )
            .await,
        );
    }

    if let Some((task, counts)) = scraping {
        task.abort();
        let (n, bad) = *counts.lock().unwrap_or_else(|e| e.into_inner());
        eprintln!(
            "scraped {} every {}s: {n} scrapes, {bad} failed",
            args.scrape_url.as_deref().unwrap_or(""),
            args.scrape_interval
        );
        if bad > 0 {
            bail!("{bad} of {n} scrapes failed");
        }
    }
    if !args.label.is_empty() {
        println!("{}\n", args.label);
    }
    println!("{TABLE_HEADER}");
    for r in &results {
        println!("{}", r.row());
    }
    accel_bench::check_failures(&results).map_err(anyhow::Error::msg)?;
    Ok(())
}
