//! What the DRA driver counts (issue 43), for the agent's `/metrics` and `/readyz`:
//! the node's ResourceSlice publishes by outcome, kubelet's prepares and unprepares by
//! outcome and their duration, whether the last publish reached the API server, the
//! devices tainted in the slice (by key and effect), and each time the driver asked
//! whether the API server keeps device taints (and when a write lost them).
//!
//! A failing publish is the one DRA fault the scheduler shows nowhere near the node
//! (the pool simply stops changing), so it is both counted and a readiness check. The
//! families live in the caller's [`Registry`], as [`crate::KubeletMetrics`]' do; the
//! driver and the publisher only update them, and count nothing without them.

use super::error::ClaimError;
use crate::metrics::OutcomeLabels;
use crate::record::RecordError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::Mutex;
use std::time::Duration;

/// Whether the last publish of the node's slices got through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishState {
    /// No step has finished yet.
    NotYet,
    Published,
    /// The last step failed, with why.
    Failed(String),
}

/// A taint's key and effect (`accel_dra_tainted_devices`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaintLabels {
    pub key: String,
    pub effect: String,
}

/// The DRA families (`accel_dra_*`).
#[derive(Debug)]
pub struct DraMetrics {
    publishes: Family<OutcomeLabels, Counter>,
    taint_checks: Family<OutcomeLabels, Counter>,
    counter_checks: Family<OutcomeLabels, Counter>,
    mig_operations: Family<OutcomeLabels, Counter>,
    tainted: Family<TaintLabels, Gauge>,
    prepares: Family<OutcomeLabels, Counter>,
    unprepares: Family<OutcomeLabels, Counter>,
    prepare_duration: Histogram,
    unprepare_duration: Histogram,
    last_publish: Mutex<PublishState>,
}

fn claim_buckets() -> Histogram {
    // A prepare is an API server read, a server round trip (a Placement claim in a
    // transaction) and a file write: milliseconds, seconds when a backend is slow.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl DraMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> DraMetrics {
        let m = DraMetrics {
            publishes: Family::default(),
            taint_checks: Family::default(),
            counter_checks: Family::default(),
            mig_operations: Family::default(),
            tainted: Family::default(),
            prepares: Family::default(),
            unprepares: Family::default(),
            prepare_duration: claim_buckets(),
            unprepare_duration: claim_buckets(),
            last_publish: Mutex::new(PublishState::NotYet),
        };
        registry.register(
            "accel_dra_slice_publishes",
            "Reconciliations of the node's ResourceSlices by outcome (created, updated, unchanged, failed)",
            m.publishes.clone(),
        );
        registry.register(
            "accel_dra_taint_checks",
            "Whether the API server keeps device taints: dry runs by answer (served, dropped, failed), and writes whose answer lost them (dropped_on_write)",
            m.taint_checks.clone(),
        );
        registry.register(
            "accel_dra_counter_checks",
            "Whether the API server keeps shared counters (partitionable devices): dry runs by answer (served, dropped, failed)",
            m.counter_checks.clone(),
        );
        registry.register(
            "accel_dra_mig_operations",
            "MIG devices made and unmade for claims, by outcome (created, create_failed, released, release_failed)",
            m.mig_operations.clone(),
        );
        registry.register(
            "accel_dra_tainted_devices",
            "Devices of the node's ResourceSlices carrying a taint, by key and effect (unhealthy, cleaning)",
            m.tainted.clone(),
        );
        registry.register(
            "accel_dra_prepares",
            "Claims kubelet asked the DRA driver to prepare, by outcome (prepared, refused, failed)",
            m.prepares.clone(),
        );
        registry.register(
            "accel_dra_unprepares",
            "Claims kubelet asked the DRA driver to unprepare, by outcome (unprepared, failed)",
            m.unprepares.clone(),
        );
        registry.register_with_unit(
            "accel_dra_prepare_duration",
            "Time to prepare one claim (its ResourceClaim read, the server's hold, its CDI file)",
            Unit::Seconds,
            m.prepare_duration.clone(),
        );
        registry.register_with_unit(
            "accel_dra_unprepare_duration",
            "Time to unprepare one claim (the server's release, its CDI files removed)",
            Unit::Seconds,
            m.unprepare_duration.clone(),
        );
        m
    }

    fn count(family: &Family<OutcomeLabels, Counter>, outcome: &str) {
        family
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// One publisher step: what it did (`created`, `updated`, `unchanged`), or why it
    /// failed.
    pub fn published(&self, result: Result<&'static str, String>) {
        let (outcome, state) = match result {
            Ok(done) => (done, PublishState::Published),
            Err(why) => ("failed", PublishState::Failed(why)),
        };
        Self::count(&self.publishes, outcome);
        if let Ok(mut last) = self.last_publish.lock() {
            *last = state;
        }
    }

    /// One answer to whether the API server keeps device taints.
    pub fn taint_check(&self, outcome: &str) {
        Self::count(&self.taint_checks, outcome);
    }

    /// One ask whether the API server keeps shared counters.
    pub fn counter_check(&self, outcome: &str) {
        Self::count(&self.counter_checks, outcome);
    }

    /// One MIG device made or unmade for a claim.
    pub fn mig_operation(&self, outcome: &str) {
        Self::count(&self.mig_operations, outcome);
    }

    /// The taints of the devices the pool now holds.
    pub fn tainted(&self, taints: &[super::objects::DeviceTaint]) {
        self.tainted.clear();
        for t in taints {
            self.tainted
                .get_or_create(&TaintLabels {
                    key: t.key.clone(),
                    effect: t.effect.clone(),
                })
                .inc();
        }
    }

    /// Whether the last publish got through.
    pub fn last_publish(&self) -> PublishState {
        self.last_publish
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|_| PublishState::Failed("state poisoned".into()))
    }

    /// One prepare, `took` long: refused when the server would not hold a device (a
    /// VM or another pod has it), failed for anything else.
    pub fn prepared<T>(&self, took: Duration, result: &Result<T, ClaimError>) {
        self.prepare_duration.observe(took.as_secs_f64());
        let outcome = match result {
            Ok(_) => "prepared",
            Err(ClaimError::Record(RecordError::Refused { .. })) => "refused",
            Err(_) => "failed",
        };
        Self::count(&self.prepares, outcome);
    }

    /// One unprepare, `took` long.
    pub fn unprepared(&self, took: Duration, result: &Result<(), ClaimError>) {
        self.unprepare_duration.observe(took.as_secs_f64());
        let outcome = if result.is_ok() {
            "unprepared"
        } else {
            "failed"
        };
        Self::count(&self.unprepares, outcome);
    }
}
