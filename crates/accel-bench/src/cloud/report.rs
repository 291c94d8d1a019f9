//! What `accel-bench cloud` prints at the end: the per-call tables, and the one JSON
//! object of `--json`. Each admitted call's time is given whole (`p50_ms`, `p99_ms`,
//! `p999_ms`: due to answer parsed; the server's 503s with `Retry-After` apart, in
//! `shed_total`) and in its three parts (`queue`, `wire`, `parse`; see
//! [`super::sim::Sample`]); the simulator's own CPU share says how much of the
//! machine it took from the server; and, when the server's metrics port was read,
//! `server_view` sets the server's own histogram quantiles beside the wire times.

use super::server_view::{self, Scrape};
use super::sim::{Record, Sample};
use super::{CloudArgs, CALLS};
use serde_json::{json, Value};
use std::time::Duration;

/// What the run measured besides the calls.
pub(super) struct Run<'a> {
    pub elapsed: Duration,
    /// The server's CPU seconds in the window and its peak RSS in MB.
    pub server: Option<(f64, f64)>,
    /// This process's CPU seconds (user + system) in the window.
    pub own_cpu: f64,
    /// The server's metrics before and after the window.
    pub view: Option<(&'a Scrape, &'a Scrape)>,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// p50, p99 and p99.9 of `part` of `samples` (nearest rank), in ms.
fn quantiles(samples: &[Sample], part: impl Fn(&Sample) -> Duration) -> Value {
    let mut v: Vec<Duration> = samples.iter().map(part).collect();
    v.sort_unstable();
    let at = |p: f64| {
        if v.is_empty() {
            return 0.0;
        }
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        ms(v[rank.clamp(1, v.len()) - 1])
    };
    json!({"p50_ms": at(50.0), "p99_ms": at(99.0), "p999_ms": at(99.9)})
}

/// The run's numbers as one JSON object.
pub(super) fn summary(args: &CloudArgs, rec: &Record, run: &Run) -> Value {
    let secs = run.elapsed.as_secs_f64();
    let mut calls = serde_json::Map::new();
    for what in CALLS {
        let samples = rec.samples.get(what).map(Vec::as_slice).unwrap_or(&[]);
        let shed = rec.shed_samples.get(what).map(Vec::as_slice).unwrap_or(&[]);
        let total = quantiles(samples, Sample::total);
        let mut c = json!({
            "rate": ((samples.len() + shed.len()) as f64 / secs * 10.0).round() / 10.0,
            "p50_ms": total["p50_ms"],
            "p99_ms": total["p99_ms"],
            "p999_ms": total["p999_ms"],
            "errors": rec.errors.get(what).copied().unwrap_or(0),
            "shed": rec.shed.get(what).copied().unwrap_or(0),
            "new_connections": rec.new_connections.get(what).copied().unwrap_or(0),
            "queue": quantiles(samples, |s| s.queued),
            "wire": quantiles(samples, |s| s.wire),
            "parse": quantiles(samples, |s| s.parse),
            "shed_total": quantiles(shed, Sample::total),
        });
        if let Some((before, after)) = run.view {
            let buckets = after.since(before, server_view::series_of(what));
            if server_view::count(&buckets) > 0.0 {
                let q = |p: f64| {
                    server_view::quantile(&buckets, p).map_or(0.0, |s| (s * 1e6).round() / 1e3)
                };
                c["server_view"] = json!({
                    "count": server_view::count(&buckets),
                    "p50_ms": q(0.5),
                    "p99_ms": q(0.99),
                    "p999_ms": q(0.999),
                });
            }
        }
        calls.insert(what.into(), c);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = json!({
        "nodes": args.nodes,
        "devices": args.devices,
        "duration_s": (secs * 10.0).round() / 10.0,
        "calls": calls,
        "boots": {
            "target_rate": args.boot_rate,
            "achieved_rate": (rec.boots_done as f64 / secs * 100.0).round() / 100.0,
            "failed": rec.boots_failed,
        },
        "simulator": {
            "cpu_s": (run.own_cpu * 10.0).round() / 10.0,
            "cpu_share": (run.own_cpu / secs * 1000.0).round() / 1000.0,
            "cores": cores,
        },
    });
    if let Some((cpu, rss)) = run.server {
        out["server"] = json!({"cpu_s": (cpu * 10.0).round() / 10.0, "rss_mb": rss.round()});
    }
    if args.then_boot_rate.is_some() {
        out["series"] = series(rec, run.elapsed);
    }
    out
}

/// Seconds per step of the series.
const STEP: u64 = 5;

/// Per [`STEP`] of the window (by when the call was due) and per boot call: the
/// admitted calls, their p99 and the refused ones, to see how soon a step down in
/// the rate is felt.
fn series(rec: &Record, elapsed: Duration) -> Value {
    let steps = elapsed.as_secs().div_ceil(STEP).max(1);
    let mut out = serde_json::Map::new();
    for what in ["candidates", "claim", "arq_bind"] {
        let in_step = |v: Option<&Vec<Sample>>, i: u64| -> Vec<Sample> {
            v.map(|v| {
                v.iter()
                    .filter(|s| s.at.as_secs() / STEP == i)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
        };
        let rows: Vec<Value> = (0..steps)
            .map(|i| {
                let admitted = in_step(rec.samples.get(what), i);
                let shed = in_step(rec.shed_samples.get(what), i);
                json!({
                    "from_s": i * STEP,
                    "admitted": admitted.len(),
                    "p99_ms": quantiles(&admitted, Sample::total)["p99_ms"],
                    "shed": shed.len(),
                })
            })
            .collect();
        out.insert(what.into(), Value::Array(rows));
    }
    Value::Object(out)
}

fn triple(v: &Value) -> String {
    format!("{} / {} / {}", v["p50_ms"], v["p99_ms"], v["p999_ms"])
}

pub(super) fn print_table(report: &Value) {
    println!("| call | rate /s | total p50 / p99 / p99.9 ms | queued | wire (server + network) | parse | errors | shed | shed total |");
    println!("|---|---:|---|---|---|---|---:|---:|---|");
    for what in CALLS {
        let c = &report["calls"][what];
        println!(
            "| {what} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c["rate"],
            triple(c),
            triple(&c["queue"]),
            triple(&c["wire"]),
            triple(&c["parse"]),
            c["errors"],
            c["shed"],
            triple(&c["shed_total"]),
        );
    }
    let viewed: Vec<&str> = CALLS
        .into_iter()
        .filter(|w| report["calls"][*w].get("server_view").is_some())
        .collect();
    if !viewed.is_empty() {
        println!();
        println!("| call | simulator wire p50 / p99 / p99.9 ms | server histogram p50 / p99 / p99.9 ms | p99 wire / server |");
        println!("|---|---|---|---:|");
        for what in viewed {
            let c = &report["calls"][what];
            let (w, s) = (&c["wire"], &c["server_view"]);
            let ratio = match (w["p99_ms"].as_f64(), s["p99_ms"].as_f64()) {
                (Some(w), Some(s)) if s > 0.0 => format!("{:.2}", w / s),
                _ => "-".to_owned(),
            };
            println!("| {what} | {} | {} | {ratio} |", triple(w), triple(s));
        }
    }
    println!(
        "boots: target {}/s, achieved {}/s, failed {}",
        report["boots"]["target_rate"], report["boots"]["achieved_rate"], report["boots"]["failed"]
    );
    let sim = &report["simulator"];
    println!(
        "simulator: {} CPU s in the window, {} of one core ({} cores)",
        sim["cpu_s"], sim["cpu_share"], sim["cores"]
    );
    if let Some(s) = report.get("server") {
        println!("server: {} CPU s, peak RSS {} MB", s["cpu_s"], s["rss_mb"]);
    }
    if let Some(series) = report.get("series") {
        println!();
        println!("| from s | candidates: admitted, p99 ms, shed | claim | arq_bind |");
        println!("|---:|---|---|---|");
        let rows = series["candidates"].as_array().map_or(0, Vec::len);
        for i in 0..rows {
            let cell = |w: &str| {
                let r = &series[w][i];
                format!("{}, {}, {}", r["admitted"], r["p99_ms"], r["shed"])
            };
            println!(
                "| {} | {} | {} | {} |",
                series["candidates"][i]["from_s"],
                cell("candidates"),
                cell("claim"),
                cell("arq_bind")
            );
        }
    }
}
