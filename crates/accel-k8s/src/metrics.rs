//! What the device plugins count, for the agent's `/metrics` (issue 13) and its
//! `/readyz`: kubelet's `Allocate` calls (duration and outcome per resource), the
//! registrations with kubelet (a re-registration means kubelet restarted or a plugin
//! socket was lost), slots in use per pooled resource, and whether every plugin is
//! registered with the kubelet that runs now.
//!
//! The families live in a [`Registry`] the caller owns (the agent serves one registry
//! for everything); this crate only updates them. Without a [`KubeletMetrics`]
//! (`Options::metrics` is `None`) nothing is counted.

use crate::slots::AllocError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AllocationLabels {
    pub resource: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

type Histograms = Family<ResourceLabels, Histogram, fn() -> Histogram>;

fn allocate_buckets() -> Histogram {
    // Allocate is an in-memory table update: microseconds, a few milliseconds when
    // the table's lock is contended.
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5,
    ])
}

/// A worker's liveness beat, called once per turn of a run loop (the device plugins'
/// and the DRA slices'): the agent's `/livez` fails when a loop stops turning.
#[derive(Clone)]
pub struct Pulse(std::sync::Arc<dyn Fn() + Send + Sync>);

impl Pulse {
    pub fn new(beat: impl Fn() + Send + Sync + 'static) -> Pulse {
        Pulse(std::sync::Arc::new(beat))
    }

    pub fn beat(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Pulse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pulse")
    }
}

/// The kubelet families (`accel_kubelet_*`).
#[derive(Debug)]
pub struct KubeletMetrics {
    allocate_duration: Histograms,
    allocations: Family<AllocationLabels, Counter>,
    registrations: Family<OutcomeLabels, Counter>,
    reregistrations: Counter,
    slots: Family<ResourceLabels, Gauge>,
    slots_in_use: Family<ResourceLabels, Gauge>,
    plugins_registered: Gauge,
    ready: AtomicBool,
}

impl KubeletMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> KubeletMetrics {
        let m = KubeletMetrics {
            allocate_duration: Family::new_with_constructor(allocate_buckets),
            allocations: Family::default(),
            registrations: Family::default(),
            reregistrations: Counter::default(),
            slots: Family::default(),
            slots_in_use: Family::default(),
            plugins_registered: Gauge::default(),
            ready: AtomicBool::new(false),
        };
        registry.register_with_unit(
            "accel_kubelet_allocate_duration",
            "Time to answer kubelet's Allocate, per resource",
            Unit::Seconds,
            m.allocate_duration.clone(),
        );
        registry.register(
            "accel_kubelet_allocations",
            "Kubelet Allocate calls by resource and outcome (granted, or the refusal)",
            m.allocations.clone(),
        );
        registry.register(
            "accel_kubelet_registrations",
            "Device plugin registrations with kubelet by outcome (registered, failed)",
            m.registrations.clone(),
        );
        registry.register(
            "accel_kubelet_reregistrations",
            "Registrations of a plugin that had been registered before (kubelet restarted, or its socket was lost)",
            m.reregistrations.clone(),
        );
        registry.register(
            "accel_kubelet_slots",
            "Slots of the devices of each pooled resource (configuration)",
            m.slots.clone(),
        );
        registry.register(
            "accel_kubelet_slots_in_use",
            "Slots held by a container (on this node or another sharing the device), per pooled resource",
            m.slots_in_use.clone(),
        );
        registry.register(
            "accel_kubelet_plugins_registered",
            "Device plugins registered with the kubelet that runs now",
            m.plugins_registered.clone(),
        );
        m
    }

    /// One Allocate of `resource`, `took` long, with its result.
    pub fn allocate(
        &self,
        resource: &str,
        took: std::time::Duration,
        result: Result<(), &AllocError>,
    ) {
        self.allocate_duration
            .get_or_create(&ResourceLabels {
                resource: resource.to_owned(),
            })
            .observe(took.as_secs_f64());
        let outcome = match result {
            Ok(()) => "granted",
            Err(AllocError::UnknownResource(_)) => "unknown_resource",
            Err(AllocError::UnknownId(_)) => "unknown_id",
            Err(AllocError::Duplicate(_)) => "duplicate",
            Err(AllocError::SlotTaken { .. }) => "slot_taken",
            Err(AllocError::Unhealthy(_)) => "unhealthy",
            Err(AllocError::MigUnavailable(_)) => "mig_unavailable",
            Err(AllocError::SameDevice(..)) => "same_device",
            Err(AllocError::NotEnoughDevices { .. }) => "not_enough_devices",
            Err(AllocError::Withheld(_)) => "withheld",
            Err(AllocError::HolderGone(_)) => "holder_gone",
            Err(AllocError::Unconfirmed(_)) => "unconfirmed",
        };
        self.allocations
            .get_or_create(&AllocationLabels {
                resource: resource.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// One Register call; `again` when the plugin had been registered before.
    pub fn registration(&self, ok: bool, again: bool) {
        let outcome = if ok { "registered" } else { "failed" };
        self.registrations
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
        if ok && again {
            self.reregistrations.inc();
        }
    }

    /// After a registrar step: how many plugins are registered, and whether all are.
    pub fn registered(&self, registered: usize, all: bool) {
        self.plugins_registered.set(registered as i64);
        self.ready.store(all, Ordering::Relaxed);
    }

    /// Whether every plugin was registered with the running kubelet at the last step.
    pub fn all_registered(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Slot totals per pooled resource, replacing the last ones.
    pub fn slot_counts(&self, counts: &[(String, usize, usize)]) {
        self.slots.clear();
        self.slots_in_use.clear();
        for (resource, total, used) in counts {
            let l = ResourceLabels {
                resource: resource.clone(),
            };
            self.slots.get_or_create(&l).set(*total as i64);
            self.slots_in_use.get_or_create(&l).set(*used as i64);
        }
    }
}
