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
//! ```sh
//! cargo run --release -p accel-bench --bin placement-load -- --url http://127.0.0.1:8778
//! ```

use accel_bench::{run_phase, PhaseStats, TABLE_HEADER};
use anyhow::{bail, Context};
use clap::Parser;
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
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
}

const VERSION: &str = "placement 1.39";

#[derive(Clone)]
struct Api {
    client: Client,
    base: Arc<str>,
    token: Arc<str>,
}

impl Api {
    /// Sends one request; any status other than `expect` is a failure.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        expect: StatusCode,
    ) -> Result<Value, String> {
        let bytes = self.call_raw(method.clone(), path, body, expect).await?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| format!("{method} {path}: bad JSON: {e}"))
    }

    /// Like `call`, returning the body unparsed (the listing phase checks it with a
    /// typed parse that allocates nothing per provider, to keep the client's share of
    /// the two cores small).
    async fn call_raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        expect: StatusCode,
    ) -> Result<bytes::Bytes, String> {
        let mut rb = self
            .client
            .request(method.clone(), format!("{}{}", self.base, path))
            .header("x-auth-token", &*self.token)
            .header("openstack-api-version", VERSION)
            .header("accept", "application/json");
        if let Some(b) = body {
            rb = rb.json(b);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        if status != expect {
            return Err(format!(
                "{method} {path}: {status}: {}",
                String::from_utf8_lossy(&bytes)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
        Ok(bytes)
    }
}

fn inventories(generation: i64, total: i64) -> Value {
    json!({
        "resource_provider_generation": generation,
        "inventories": {
            "VCPU": {"total": total, "allocation_ratio": 16.0},
            "MEMORY_MB": {"total": total * 1024, "reserved": 512},
            "DISK_GB": {"total": 2048, "min_unit": 10, "step_size": 10},
        }
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let api = Api {
        client: Client::builder()
            .pool_max_idle_per_host(args.concurrency)
            .build()?,
        base: args.url.trim_end_matches('/').into(),
        token: args.token.clone().into(),
    };
    let c = args.concurrency.max(1);
    if args.providers < c {
        bail!("--providers must be at least --concurrency");
    }
    let existing = api
        .call(Method::GET, "/resource_providers", None, StatusCode::OK)
        .await
        .map_err(anyhow::Error::msg)
        .context("is the service up?")?;
    if existing["resource_providers"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        bail!("the service already has resource providers; start it on an empty database");
    }

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
                    let body = json!({"name": format!("bench-rp-{i}"), "uuid": uuids[i]});
                    api.call(
                        Method::POST,
                        "/resource_providers",
                        Some(&body),
                        StatusCode::OK,
                    )
                    .await
                    .map(drop)
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
                    let path = format!("/resource_providers/{}/inventories", uuids[w]);
                    let v = api
                        .call(Method::PUT, &path, Some(&body), StatusCode::OK)
                        .await?;
                    let g = v["resource_provider_generation"]
                        .as_i64()
                        .ok_or("no generation in the answer")?;
                    *gens[w].lock().unwrap() = g;
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
                    let body = json!({
                        "allocations": {uuids[w].as_str(): {"resources": {"VCPU": 1, "MEMORY_MB": 16}}},
                        "project_id": format!("bench-project-{}", i % 4),
                        "user_id": "bench-user",
                        "consumer_generation": null,
                        "consumer_type": "INSTANCE",
                    });
                    let path = format!("/allocations/{}", Uuid::new_v4());
                    api.call(Method::PUT, &path, Some(&body), StatusCode::NO_CONTENT)
                        .await
                        .map(drop)
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
                    let path = format!("/usages?project_id=bench-project-{project}");
                    let v = api.call(Method::GET, &path, None, StatusCode::OK).await?;
                    // 1.38 groups usages by consumer type.
                    let vcpu = v["usages"]["INSTANCE"]["VCPU"].as_i64().unwrap_or(-1);
                    if project == 0 && vcpu < expected_vcpu {
                        return Err(format!("usages VCPU {vcpu} < {expected_vcpu}: {v}"));
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
                        let raw = api
                            .call_raw(Method::GET, "/resource_providers", None, StatusCode::OK)
                            .await?;
                        let got = serde_json::from_slice::<List>(&raw)
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

    if !args.label.is_empty() {
        println!("{}\n", args.label);
    }
    println!("{TABLE_HEADER}");
    for r in &results {
        println!("{}", r.row());
    }
    let failed: Vec<&PhaseStats> = results.iter().filter(|r| r.failures > 0).collect();
    for r in &failed {
        eprintln!(
            "{}: {} failed; first: {}",
            r.name,
            r.failures,
            r.first_error.as_deref().unwrap_or("?")
        );
    }
    if !failed.is_empty() {
        bail!("some requests failed; these numbers are not valid");
    }
    Ok(())
}
