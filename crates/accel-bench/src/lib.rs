//! A small closed-loop HTTP load driver shared by the bench binaries.
//!
//! Benchmarks here compare accel with the upstream services it replaces, over HTTP, on
//! the same machine. They are binaries rather than criterion benches because the thing
//! under test is another process: the driver only issues requests, times each one, and
//! reports throughput and latency percentiles. `c` workers each send their share of
//! the requests back to back (a closed loop), so throughput is what the server sustains
//! at that concurrency, not an offered rate.
//!
//! A phase that sees any failed request reports the failure count and the binary exits
//! non-zero: numbers from a run that did not do the work are not numbers.

pub mod cloud;
pub mod fake_nova;
pub mod partitions;

use accel_api::agent::{AttachHandle, ControlPathId, Deployable, Device, DeviceReport, KeyValue};
use std::future::Future;
use std::time::{Duration, Instant};

/// What one phase measured.
#[derive(Debug, Clone)]
pub struct PhaseStats {
    pub name: String,
    pub requests: usize,
    pub failures: usize,
    pub concurrency: usize,
    pub elapsed: Duration,
    /// Sorted ascending.
    pub latencies: Vec<Duration>,
    /// The first failure, for the report.
    pub first_error: Option<String>,
}

impl PhaseStats {
    pub fn throughput(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// The `p`-th percentile (0..=100) by the nearest-rank method.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }

    /// One Markdown table row: phase, requests, concurrency, req/s, p50 ms, p99 ms, failures.
    pub fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} |",
            self.name,
            self.requests,
            self.concurrency,
            self.throughput(),
            ms(self.percentile(50.0)),
            ms(self.percentile(99.0)),
            self.failures
        )
    }
}

pub const TABLE_HEADER: &str = "| phase | requests | clients | req/s | p50 ms | p99 ms | failures |\n|---|---:|---:|---:|---:|---:|---:|";

/// Prints each failed phase's count and first error to stderr; an error when any phase
/// failed, since the numbers of a run that did not do the work are not numbers.
pub fn check_failures(results: &[PhaseStats]) -> Result<(), &'static str> {
    let failed: Vec<&PhaseStats> = results.iter().filter(|r| r.failures > 0).collect();
    for r in &failed {
        eprintln!(
            "{}: {} failed; first: {}",
            r.name,
            r.failures,
            r.first_error.as_deref().unwrap_or("?")
        );
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err("some requests failed; these numbers are not valid")
    }
}

/// A host's agent report of `devices` fake FPGA cards as the built-in fake source
/// reports one (`accel_core::accelerator::fake_device`: class FPGA, trait
/// `CUSTOM_FAKE_DEVICE`), each with `handles` TEST_PCI attach handles, in the agent
/// report's wire shape. The first card's deployable is `HOST_FakeDevice`, the others
/// `HOST_FakeDevice<i>` on bus `0c + i`.
pub fn fake_report(host: &str, devices: usize, handles: usize) -> DeviceReport {
    let kv = |key: &str, value: &str| KeyValue {
        key: key.into(),
        value: value.into(),
    };
    let device = |i: usize| {
        let bus = format!("{:02x}", 0x0c + i);
        let attach_handles = (1..=handles)
            .map(|n| AttachHandle {
                attach_type: "TEST_PCI".into(),
                attach_info: format!(
                    "{{\"domain\": \"0000\", \"bus\": \"{bus}\", \"device\": \"{}\", \"function\": \"{}\"}}",
                    n / 8,
                    n % 8
                ),
                in_use: false,
            })
            .collect();
        let suffix = if i == 0 { String::new() } else { i.to_string() };
        Device {
            device_type: "FPGA".into(),
            vendor: "0xABCD".into(),
            model: "miss model info".into(),
            std_board_info: Some("{\"device_id\": \"0xabcd\", \"class\": \"Fake class\"}".into()),
            vendor_board_info: Some("fake_vendor_info".into()),
            health: None,
            health_reason: None,
            partitions: None,
            controlpath_id: ControlPathId {
                cpid_type: "PCI".into(),
                cpid_info: format!(
                    "{{\"domain\":\"0000\",\"bus\":\"{bus}\",\"device\":\"00\",\"function\":\"0\"}}"
                ),
            },
            deployables: vec![Deployable {
                name: format!("{host}_FakeDevice{suffix}"),
                parent: None,
                num_accelerators: handles as i64,
                driver_name: Some("fake".into()),
                attributes: vec![kv("traits1", "CUSTOM_FAKE_DEVICE"), kv("rc", "FPGA")],
                attach_handles,
            }],
        }
    };
    DeviceReport {
        devices: (0..devices).map(device).collect(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs `total` requests on `concurrency` workers. Worker `w` performs requests
/// `w, w + c, w + 2c, ...`; `op(w, i)` performs request `i` and returns an error
/// description on failure. Only the call to `op` is timed per request; the phase's wall
/// time spans from the first start to the last finish.
pub async fn run_phase<F, Fut>(name: &str, concurrency: usize, total: usize, op: F) -> PhaseStats
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let concurrency = concurrency.max(1);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for w in 0..concurrency {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut failures = 0usize;
            let mut first_error = None;
            let mut i = w;
            while i < total {
                let t = Instant::now();
                let r = op(w, i).await;
                lat.push(t.elapsed());
                if let Err(e) = r {
                    failures += 1;
                    first_error.get_or_insert(e);
                }
                i += concurrency;
            }
            (lat, failures, first_error)
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    let mut failures = 0;
    let mut first_error = None;
    for t in futures::future::join_all(tasks).await {
        let (lat, f, e) = t.expect("bench worker panicked");
        latencies.extend(lat);
        failures += f;
        if first_error.is_none() {
            first_error = e;
        }
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    PhaseStats {
        name: name.to_owned(),
        requests: total,
        failures,
        concurrency,
        elapsed,
        latencies,
        first_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(ms: &[u64]) -> PhaseStats {
        PhaseStats {
            name: "t".into(),
            requests: ms.len(),
            failures: 0,
            concurrency: 1,
            elapsed: Duration::from_secs(1),
            latencies: ms.iter().map(|m| Duration::from_millis(*m)).collect(),
            first_error: None,
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s = stats(&(1..=100).collect::<Vec<_>>());
        assert_eq!(s.percentile(50.0), Duration::from_millis(50));
        assert_eq!(s.percentile(99.0), Duration::from_millis(99));
        assert_eq!(s.percentile(100.0), Duration::from_millis(100));
        assert_eq!(s.percentile(0.0), Duration::from_millis(1));
        assert_eq!(stats(&[]).percentile(50.0), Duration::ZERO);
    }

    #[test]
    fn fake_reports_name_each_card_and_handle_once() {
        let one = fake_report("h", 1, 2);
        assert_eq!(one.devices[0].deployables[0].name, "h_FakeDevice");
        assert_eq!(
            one.devices[0].controlpath_id.cpid_info,
            r#"{"domain":"0000","bus":"0c","device":"00","function":"0"}"#
        );
        let four = fake_report("h", 4, 3);
        let names: std::collections::BTreeSet<_> = four
            .devices
            .iter()
            .map(|d| d.deployables[0].name.clone())
            .collect();
        let cpids: std::collections::BTreeSet<_> = four
            .devices
            .iter()
            .map(|d| d.controlpath_id.cpid_info.clone())
            .collect();
        let handles: std::collections::BTreeSet<_> = four
            .devices
            .iter()
            .flat_map(|d| d.deployables[0].attach_handles.iter())
            .map(|h| h.attach_info.clone())
            .collect();
        assert_eq!(names.len(), 4);
        assert!(names.contains("h_FakeDevice3"));
        assert_eq!(cpids.len(), 4);
        assert_eq!(handles.len(), 12);
        assert!(four
            .devices
            .iter()
            .all(|d| d.deployables[0].num_accelerators == 3));
    }

    #[tokio::test]
    async fn every_request_runs_once_and_failures_are_counted() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let seen = Arc::new((0..37).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        let s2 = seen.clone();
        let stats = run_phase("p", 4, 37, move |_w, i| {
            let seen = s2.clone();
            async move {
                seen[i].fetch_add(1, Ordering::SeqCst);
                if i % 10 == 3 {
                    Err(format!("request {i} failed"))
                } else {
                    Ok(())
                }
            }
        })
        .await;
        assert!(seen.iter().all(|c| c.load(Ordering::SeqCst) == 1));
        assert_eq!(stats.latencies.len(), 37);
        assert_eq!(stats.failures, 4);
        assert!(stats.first_error.is_some());
    }
}
