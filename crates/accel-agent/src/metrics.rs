//! The agent's Prometheus families (issue 13), in one [`Registry`] that
//! the observe module serves on `--metrics-listen`. Names are a public interface: prefix
//! `accel_`, base units, `_total` on counters; the process families use the names every
//! Prometheus client library uses (`process_*`) so standard dashboards work.
//!
//! The agent's own families are updated where the work happens ([`crate::Agent::step`],
//! programming); the kubelet plugins' families ([`KubeletMetrics`]) and the DRA
//! driver's ([`DraMetrics`]) are registered here and updated by `accel_k8s`. Process CPU, memory and file descriptors are read from
//! `/proc/self` at scrape time ([`ProcessCollector`]), so an idle agent does no work for them.
//!
//! Prometheus' text format 0.0.4 is derived from the OpenMetrics text the crate
//! writes ([`to_prometheus_text`]): scrapers that do not ask for OpenMetrics (and
//! `promtool check metrics`) get the classic format.

use accel_exposition::{to_prometheus_text, ProcessCollector};
use accel_k8s::dra::metrics::DraMetrics;
use accel_k8s::KubeletMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeviceLabels {
    /// `GPU`, `FPGA`, ...
    pub r#type: String,
    /// `ok` or `unhealthy`.
    pub health: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `glance_image`, `glance_download`, `program_answer`, ...
    pub call: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    /// `mig`, `mdev`, or `checkpoint` (the agent's record of them, `partitions.json`).
    pub kind: String,
    /// `create`, `destroy` or `recreate` (after a reboot); `write` for the checkpoint.
    pub action: String,
    /// `ok` or `failed`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriverLabels {
    pub driver: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

/// How a report ended (`accel_agent_reports_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportOutcome {
    /// The server applied it.
    Accepted,
    /// The server found it equal to the last one and skipped it.
    Unchanged,
    /// The server answered with a 4xx (not known compute node, a refused body).
    Refused,
    /// No answer, or a 5xx: retried at the next interval.
    Failed,
    /// Not sent: a driver failed and the agent had no earlier picture of its devices
    /// (sending would have reported them removed).
    Skipped,
}

impl ReportOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportOutcome::Accepted => "accepted",
            ReportOutcome::Unchanged => "unchanged",
            ReportOutcome::Refused => "refused",
            ReportOutcome::Failed => "failed",
            ReportOutcome::Skipped => "skipped",
        }
    }
}

/// Every family the agent exposes.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    discovery_duration: Histogram,
    devices: Family<DeviceLabels, Gauge>,
    driver_failures: Family<DriverLabels, Counter>,
    reports: Family<OutcomeLabels, Counter>,
    report_duration: Histogram,
    calls: Family<CallLabels, Counter>,
    programs: Family<OutcomeLabels, Counter>,
    cleanings: Family<OutcomeLabels, Counter>,
    cleaning_duration: Histogram,
    partitions: Family<PartitionLabels, Counter>,
    server_waits: Counter,
    /// The kubelet plugins' families, updated by `accel_k8s`.
    pub kubelet: Arc<KubeletMetrics>,
    /// The DRA driver's families (`accel_dra_*`), updated by `accel_k8s::dra`.
    pub dra: Arc<DraMetrics>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every family registered; `accel_build_info{commit="unknown"}` (tests: the binary
    /// says its commit through [`Metrics::built_from`]).
    pub fn new() -> Metrics {
        Metrics::built_from("unknown")
    }

    /// Every family registered, `accel_build_info` naming `commit`: the one
    /// `accel --version` prints (the binary's build script knows it; this library is
    /// not rebuilt when HEAD moves).
    pub fn built_from(commit: &str) -> Metrics {
        let mut registry = Registry::default();
        let discovery_duration = Histogram::new([
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ]);
        let report_duration = Histogram::new([
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ]);
        let m = Metrics {
            discovery_duration,
            devices: Family::default(),
            driver_failures: Family::default(),
            reports: Family::default(),
            report_duration,
            calls: Family::default(),
            programs: Family::default(),
            cleanings: Family::default(),
            cleaning_duration: Histogram::new([
                0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
            ]),
            partitions: Family::default(),
            server_waits: Counter::default(),
            kubelet: Arc::new(KubeletMetrics::register(&mut registry)),
            dra: Arc::new(DraMetrics::register(&mut registry)),
            registry: Registry::default(),
        };
        registry.register_with_unit(
            "accel_agent_discovery_duration",
            "Time one discovery pass over sysfs and the drivers takes",
            Unit::Seconds,
            m.discovery_duration.clone(),
        );
        registry.register(
            "accel_agent_devices",
            "Devices found by the last discovery, by device type and health",
            m.devices.clone(),
        );
        registry.register(
            "accel_agent_driver_failures",
            "Discovery passes in which a driver failed (its devices were kept as last seen)",
            m.driver_failures.clone(),
        );
        registry.register(
            "accel_agent_reports",
            "Reports to the server by outcome (accepted, unchanged, refused, failed, skipped)",
            m.reports.clone(),
        );
        registry.register_with_unit(
            "accel_agent_report_duration",
            "Time from sending a report to the server's answer",
            Unit::Seconds,
            m.report_duration.clone(),
        );
        registry.register(
            "accel_agent_outgoing_requests",
            "Calls to other services than the reports (Glance, programming answers) by call and outcome",
            m.calls.clone(),
        );
        registry.register(
            "accel_agent_programs",
            "FPGA programming requests carried out, by outcome (programmed, failed)",
            m.programs.clone(),
        );
        registry.register(
            "accel_agent_cleanings",
            "Device cleanings this agent carried out, by outcome (clean, failed: the method, the verification or the timeout)",
            m.cleanings.clone(),
        );
        registry.register_with_unit(
            "accel_agent_cleaning_duration",
            "Time one cleaning took on this node, method and verification together",
            Unit::Seconds,
            m.cleaning_duration.clone(),
        );
        registry.register(
            "accel_agent_partition_operations",
            "MIG instances and mdevs this agent created, destroyed or re-created after a reboot, and writes of its record of them, by kind, action and outcome (ok, failed)",
            m.partitions.clone(),
        );
        registry.register(
            "accel_agent_server_wait_attempts",
            "Failed attempts to reach the server at start-up (the agent waits with backoff)",
            m.server_waits.clone(),
        );
        let build: Family<BuildLabels, Gauge> = Family::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                commit: commit.into(),
            })
            .set(1);
        registry.register(
            "accel_build_info",
            "Always 1; the labels say which accel this is",
            build,
        );
        registry.register_collector(Box::new(ProcessCollector));
        // Every outcome exists from the start at 0, so `rate()` and `absent()` in
        // alert rules see a series before the first event of its kind.
        for o in [
            ReportOutcome::Accepted,
            ReportOutcome::Unchanged,
            ReportOutcome::Refused,
            ReportOutcome::Failed,
            ReportOutcome::Skipped,
        ] {
            m.reports
                .get_or_create(&OutcomeLabels {
                    outcome: o.as_str().into(),
                })
                .inc_by(0);
        }
        for o in ["programmed", "failed"] {
            m.programs
                .get_or_create(&OutcomeLabels { outcome: o.into() })
                .inc_by(0);
        }
        for o in ["clean", "failed"] {
            m.cleanings
                .get_or_create(&OutcomeLabels { outcome: o.into() })
                .inc_by(0);
        }
        for kind in ["mig", "mdev"] {
            for action in ["create", "destroy", "recreate"] {
                for ok in [true, false] {
                    m.partition(kind, action, ok, 0);
                }
            }
        }
        for ok in [true, false] {
            m.partition("checkpoint", "write", ok, 0);
        }
        Metrics { registry, ..m }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn discovery(&self, took: Duration) {
        self.discovery_duration.observe(took.as_secs_f64());
    }

    /// Replaces the device counts with those of the last discovery.
    pub fn devices(&self, devices: &[crate::model::FoundDevice]) {
        self.devices.clear();
        for d in devices {
            let health = match d.health {
                crate::model::Health::Ok => "ok",
                crate::model::Health::Unhealthy(_) => "unhealthy",
            };
            self.devices
                .get_or_create(&DeviceLabels {
                    r#type: d.device_type.as_str().to_owned(),
                    health: health.into(),
                })
                .inc();
        }
    }

    pub fn driver_failed(&self, driver: &str) {
        self.driver_failures
            .get_or_create(&DriverLabels {
                driver: driver.into(),
            })
            .inc();
    }

    /// A report that ended as `outcome`; `took` is `None` when none was sent.
    pub fn report(&self, outcome: ReportOutcome, took: Option<Duration>) {
        self.reports
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str().into(),
            })
            .inc();
        if let Some(t) = took {
            self.report_duration.observe(t.as_secs_f64());
        }
    }

    pub fn call(&self, call: &str, ok: bool) {
        self.calls
            .get_or_create(&CallLabels {
                call: call.into(),
                outcome: if ok { "ok" } else { "failed" }.into(),
            })
            .inc();
    }

    pub fn program(&self, ok: bool) {
        self.programs
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "programmed" } else { "failed" }.into(),
            })
            .inc();
    }

    /// One cleaning ended (before its answer is sent): `clean` or `failed`.
    pub fn cleaning(&self, ok: bool, took: Duration) {
        self.cleanings
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "clean" } else { "failed" }.into(),
            })
            .inc();
        self.cleaning_duration.observe(took.as_secs_f64());
    }

    /// A partition operation ended (`kind` mig or mdev; `action` create, destroy or
    /// recreate); `n` of them (0 creates the series).
    pub fn partition(&self, kind: &str, action: &str, ok: bool, n: u64) {
        self.partitions
            .get_or_create(&PartitionLabels {
                kind: kind.into(),
                action: action.into(),
                outcome: if ok { "ok" } else { "failed" }.into(),
            })
            .inc_by(n);
    }

    pub fn server_wait(&self) {
        self.server_waits.inc();
    }

    /// The OpenMetrics text exposition.
    pub fn openmetrics(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Prometheus' text format 0.0.4.
    pub fn prometheus_text(&self) -> String {
        to_prometheus_text(&self.openmetrics())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_carry_the_families_and_the_classic_one_names_counters_total() {
        let m = Metrics::new();
        m.report(ReportOutcome::Accepted, Some(Duration::from_millis(3)));
        let om = m.openmetrics();
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE accel_agent_reports counter"), "{om}");
        assert!(om.contains("accel_agent_reports_total{outcome=\"accepted\"} 1"));
        assert!(
            om.contains("accel_agent_reports_total{outcome=\"failed\"} 0"),
            "{om}"
        );
        assert!(om.contains("accel_build_info{version="), "{om}");
        let text = m.prometheus_text();
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE accel_agent_reports_total counter"),
            "{text}"
        );
        assert!(
            text.contains("# HELP accel_agent_reports_total Reports"),
            "{text}"
        );
        assert!(text.contains("# TYPE accel_agent_report_duration_seconds histogram"));
        assert!(
            text.contains("accel_agent_report_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter"),
            "{text}"
        );
        assert!(text.contains("process_open_fds "), "{text}");
    }
}
