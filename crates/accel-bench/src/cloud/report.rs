//! What `accel-bench cloud` prints at the end: the per-call table, and the one JSON
//! object of `--json` (rates, p50/p99/p99.9, errors, boots, the server's CPU and memory).

use super::{CloudArgs, Record, CALLS};
use crate::PhaseStats;
use serde_json::{json, Value};
use std::time::Duration;

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// The run's numbers as one JSON object.
pub(super) fn summary(
    args: &CloudArgs,
    rec: &Record,
    elapsed: Duration,
    server: Option<(f64, f64)>,
) -> Value {
    let secs = elapsed.as_secs_f64();
    let mut calls = serde_json::Map::new();
    for what in CALLS {
        let mut lat = rec.latencies.get(what).cloned().unwrap_or_default();
        lat.sort_unstable();
        let stats = PhaseStats {
            name: what.into(),
            requests: lat.len(),
            failures: 0,
            concurrency: 0,
            elapsed,
            latencies: lat,
            first_error: None,
        };
        calls.insert(
            what.into(),
            json!({
                "rate": (stats.requests as f64 / secs * 10.0).round() / 10.0,
                "p50_ms": ms(stats.percentile(50.0)),
                "p99_ms": ms(stats.percentile(99.0)),
                "p999_ms": ms(stats.percentile(99.9)),
                "errors": rec.errors.get(what).copied().unwrap_or(0),
            }),
        );
    }
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
    });
    if let Some((cpu, rss)) = server {
        out["server"] = json!({"cpu_s": (cpu * 10.0).round() / 10.0, "rss_mb": rss.round()});
    }
    out
}

pub(super) fn print_table(report: &Value) {
    println!("| call | rate /s | p50 ms | p99 ms | p99.9 ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|");
    for what in CALLS {
        let c = &report["calls"][what];
        println!(
            "| {what} | {} | {} | {} | {} | {} |",
            c["rate"], c["p50_ms"], c["p99_ms"], c["p999_ms"], c["errors"]
        );
    }
    println!(
        "boots: target {}/s, achieved {}/s, failed {}",
        report["boots"]["target_rate"], report["boots"]["achieved_rate"], report["boots"]["failed"]
    );
    if let Some(s) = report.get("server") {
        println!("server: {} CPU s, peak RSS {} MB", s["cpu_s"], s["rss_mb"]);
    }
}
