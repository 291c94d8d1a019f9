//! The node's ResourceSlices: what the scheduler allocates claims from.
//!
//! ```text
//! Publisher::step()   (the run loop calls it; tests directly)
//!   observe: devices (DeviceSource), the claims' CDI specs (prepared), the devices
//!     claims released (Released); their fingerprint
//!   publish: VM-held or withheld (the server) ─ matching no configuration
//!     ─▶ desired devices: name = DNS label of the provider, attributes type, vendor,
//!        product, model, configuration, health, pciAddress; Kubernetes' standard
//!        resource.kubernetes.io/ numaNode, pciBusID and pcieRoot (where sysfs shows it);
//!        capacity memory where the driver knows the device's memory; taints for an
//!        unhealthy, gone or cleaning device (taints.rs), or, where the cluster does
//!        not serve taints, such a device withdrawn
//!     ─▶ in slices of at most 128 devices (64 when any has a taint)
//!   the slices of (driver, node) ─ none ─▶ create them (generation = last + 1)
//!                                ─ the same devices ─▶ nothing
//!                                ─ otherwise ─▶ the listed ones updated (generation
//!                                  + 1), the missing created, the others deleted
//! ```
//!
//! One pool per node (`pool.name` = the node, `resourceSliceCount` the slices it
//! spans), the Node as owner (the slices go with it). Kubelet deletes a node's slices
//! when it starts; the next step finds none and creates the pool again with a higher
//! generation, so the scheduler never mixes an old generation with a new one.
//!
//! [`run`] steps every interval and, between ticks: when the node's devices come or go
//! ([`DeviceSource::presence`], polled every [`PRESENCE_INTERVAL`]); when what the
//! node shows changes ([`HEALTH_INTERVAL`]: a device's health, a claim prepared or
//! released, so a device turning unhealthy is tainted within a second); and whenever
//! a watch on the driver's own slices of the node (the list's field selectors, from
//! the resourceVersion of the last list) reports a change: a slice someone deleted or
//! edited comes back at once, not at the next tick. The step after the driver's own
//! write finds nothing to do and watches from the newer list, so the loop settles; a
//! watch that cannot be made (410 Gone, no watch verb) leaves the interval alone
//! until the next step. A device a VM holds is withdrawn: the scheduler cannot
//! allocate it, and a claim already allocated keeps its device.

mod pool;
mod run_loop;
pub use pool::{desired, wanted, Marks, Part, Wanted};

/// The pool cut into slices as [`Publisher`] writes them (tests).
#[cfg(test)]
pub(crate) fn cut_for_tests(w: Wanted) -> Vec<Part> {
    pool::cut(w)
}
pub use run_loop::{run, HEALTH_INTERVAL, PRESENCE_INTERVAL, PUBLISH_INTERVAL};

use super::metrics::DraMetrics;
use super::objects::{
    DeviceTaint, ObjectMeta, OwnerReference, ResourcePool, ResourceSlice, ResourceSliceSpec,
    SliceDevice, API_VERSION,
};
use super::partitions::Layout;
use super::taints::{self, Released, Support};
use super::{device_name, ApiError, BoxFuture};
use crate::config::KubernetesConfig;
use crate::device::{Device, DeviceSource};
use crate::metrics::Pulse;
use crate::record::RecordError;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Kubernetes' standard attribute for a PCI function's address, `dddd:bb:dd.f`.
pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
/// Kubernetes' standard attribute for the PCIe root complex, `pci<domain>:<bus>`.
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

/// Why a step did not publish.
#[derive(Debug, thiserror::Error)]
pub enum SliceError {
    /// The devices VMs hold were not read (the server).
    #[error(transparent)]
    Held(#[from] RecordError),
    #[error("discovering the node's devices failed: {0}")]
    Discovery(#[source] tokio::task::JoinError),
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// What the publisher needs of the Kubernetes API.
pub trait SliceApi: Send + Sync {
    /// The node's uid (the slices' owner).
    fn node_uid(&self, node: &str) -> BoxFuture<'_, Result<String, ApiError>>;
    /// The ResourceSlices of `driver` on `node` (field selectors `spec.nodeName`,
    /// `spec.driver`).
    fn list_slices(&self, node: &str, driver: &str) -> BoxFuture<'_, Result<SliceList, ApiError>>;
    /// Waits for a change to the slices of `driver` on `node` after
    /// `resource_version` (a list's): Ok when an event (added, modified, deleted)
    /// came, an error when the watch failed or ended without one.
    fn watch_slices(
        &self,
        node: &str,
        driver: &str,
        resource_version: &str,
    ) -> BoxFuture<'_, Result<(), ApiError>>;
    /// Creates the slice; answers it as the API server keeps it.
    fn create_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>>;
    /// Replaces the slice named in `slice.metadata.name` (with its resourceVersion);
    /// answers it as the API server keeps it.
    fn update_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>>;
    /// A create with `dryRun=All`: the slice as the API server would keep it (fields
    /// it does not serve dropped, defaults filled), nothing kept.
    fn dry_run_create(
        &self,
        slice: ResourceSlice,
    ) -> BoxFuture<'_, Result<ResourceSlice, ApiError>>;
    fn delete_slice(&self, name: &str) -> BoxFuture<'_, Result<(), ApiError>>;
}

/// A list of slices and the resourceVersion it was read at (where a watch starts).
#[derive(Debug, Clone, Default)]
pub struct SliceList {
    pub items: Vec<ResourceSlice>,
    pub resource_version: Option<String>,
}

/// Which devices the server withholds from new claims (PCI addresses): a VM holds
/// them, or they wait for their cleaning.
pub trait Held: Send + Sync {
    fn vm_held(&self) -> BoxFuture<'_, Result<BTreeSet<String>, RecordError>>;
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    Unchanged,
    Created { generation: i64 },
    Updated { generation: i64 },
}

impl Published {
    /// The `outcome` label of `accel_dra_slice_publishes_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Published::Unchanged => "unchanged",
            Published::Created { .. } => "created",
            Published::Updated { .. } => "updated",
        }
    }
}

/// What the node shows at one instant, and its fingerprint (what [`run`] compares
/// between steps).
pub struct Observed {
    found: Vec<Device>,
    prepared: BTreeSet<String>,
    released: BTreeSet<String>,
    fingerprint: u64,
}

/// Keeps the node's pool in the API server equal to its devices.
pub struct Publisher {
    node: String,
    config: KubernetesConfig,
    devices: Arc<dyn DeviceSource>,
    api: Arc<dyn SliceApi>,
    held: Arc<dyn Held>,
    /// The devices the driver's unprepare released (shared with the driver).
    released: Arc<Released>,
    /// Whether the cluster keeps the devices' taints.
    support: Support,
    /// Whether the cluster keeps counters (partitionable devices), as last found out.
    counters: Support,
    /// The highest pool generation seen or written.
    generation: i64,
    node_uid: Option<String>,
    /// The resourceVersion of the last list, where the next watch starts.
    listed_at: Option<String>,
    /// The fingerprint of what the last step observed.
    seen: Option<u64>,
    /// How often [`run`] observes the node between steps.
    health_interval: std::time::Duration,
    /// Beaten at every turn of [`run`]'s loop.
    pulse: Option<Pulse>,
    /// Counts each step of [`run`] and keeps the last one's verdict (`/readyz`).
    metrics: Option<Arc<DraMetrics>>,
}

impl Publisher {
    pub fn new(
        node: impl Into<String>,
        config: KubernetesConfig,
        devices: Arc<dyn DeviceSource>,
        api: Arc<dyn SliceApi>,
        held: Arc<dyn Held>,
    ) -> Publisher {
        Publisher {
            node: node.into(),
            config,
            devices,
            api,
            held,
            released: Arc::default(),
            support: Support::Unknown,
            counters: Support::Unknown,
            generation: 0,
            node_uid: None,
            listed_at: None,
            seen: None,
            health_interval: HEALTH_INTERVAL,
            pulse: None,
            metrics: None,
        }
    }

    /// Counts every step [`run`] takes (`accel_dra_slice_publishes`).
    pub fn with_metrics(mut self, metrics: Arc<DraMetrics>) -> Publisher {
        self.metrics = Some(metrics);
        self
    }

    /// Beats `pulse` at every turn of [`run`]'s loop (the agent's liveness).
    pub fn with_pulse(mut self, pulse: Pulse) -> Publisher {
        self.pulse = Some(pulse);
        self
    }

    /// The devices the driver releases (its [`super::Driver::with_released`]): such
    /// a device is tainted while it is cleaned instead of withdrawn.
    pub fn with_released(mut self, released: Arc<Released>) -> Publisher {
        self.released = released;
        self
    }

    /// Observes the node every `every` between steps instead of [`HEALTH_INTERVAL`].
    pub fn with_health_interval(mut self, every: std::time::Duration) -> Publisher {
        self.health_interval = every;
        self
    }

    /// Whether the cluster keeps device taints, as last found out.
    pub fn taint_support(&self) -> Support {
        self.support
    }

    /// The device source's cheap fingerprint (None: it has none).
    async fn presence(&self) -> Option<u64> {
        let source = self.devices.clone();
        tokio::task::spawn_blocking(move || source.presence())
            .await
            .ok()
            .flatten()
    }

    /// A watch for the next change after the last list (None before a list).
    pub fn changed(&self) -> Option<BoxFuture<'static, Result<(), ApiError>>> {
        let from = self.listed_at.clone()?;
        let api = self.api.clone();
        let (node, driver) = (self.node.clone(), self.config.resource_domain.clone());
        Some(Box::pin(async move {
            api.watch_slices(&node, &driver, &from).await
        }))
    }

    /// The node now: its devices (one discovery, off the async threads), the devices
    /// its claims' CDI specs name, those claims released.
    pub async fn observe(&self) -> Result<Observed, SliceError> {
        use std::hash::{Hash, Hasher};
        let source = self.devices.clone();
        let (dir, domain) = (
            self.config.cdi_dir.clone(),
            self.config.resource_domain.clone(),
        );
        let (found, prepared) = tokio::task::spawn_blocking(move || {
            (source.devices(), taints::prepared(&dir, &domain))
        })
        .await
        .map_err(SliceError::Discovery)?;
        let released = self.released.names();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for d in &found {
            (&d.id, d.healthy).hash(&mut h);
        }
        prepared.hash(&mut h);
        released.hash(&mut h);
        Ok(Observed {
            found,
            prepared,
            released,
            fingerprint: h.finish(),
        })
    }

    /// Whether `observed` differs from what the last step saw.
    pub fn differs(&self, observed: &Observed) -> bool {
        self.seen != Some(observed.fingerprint)
    }

    /// One reconciliation; see the module doc.
    pub async fn step(&mut self) -> Result<Published, SliceError> {
        let observed = self.observe().await?;
        self.publish(observed).await
    }

    /// One reconciliation of what `observed` saw.
    pub async fn publish(&mut self, observed: Observed) -> Result<Published, SliceError> {
        // Before anything that can fail: a failed step waits for the next tick, not
        // for the next observation.
        self.seen = Some(observed.fingerprint);
        let held = self.held.vm_held().await?;
        // A released device the server no longer withholds is clean (or gone). Only
        // those observed before the server was asked: one released since is kept.
        let node = self.node.clone();
        let withheld = |name: &str| {
            observed
                .found
                .iter()
                .any(|d| device_name(&node, &d.id) == name && held.contains(&d.id))
        };
        self.released
            .retain(|n| !observed.released.contains(n) || withheld(n));
        let released = observed
            .released
            .iter()
            .filter(|n| withheld(n))
            .cloned()
            .collect();
        let marks = Marks {
            vm_held: held,
            prepared: observed.prepared,
            released,
            layout: Layout::Auto,
        };
        let mut published = Published::Unchanged;
        // A second time only when the API server dropped the taints written the
        // first time: then without the tainted devices.
        for _ in 0..2 {
            let (p, dropped) = self.write_pool(observed.found.clone(), &marks).await?;
            published = p;
            if !dropped {
                break;
            }
        }
        Ok(published)
    }

    /// Lists the pool, and writes it where it differs from the devices; answers what
    /// it did and whether the API server dropped taints it was sent.
    async fn write_pool(
        &mut self,
        found: Vec<Device>,
        marks: &Marks,
    ) -> Result<(Published, bool), SliceError> {
        let driver = self.config.resource_domain.clone();
        let listed = self.api.list_slices(&self.node, &driver).await?;
        self.listed_at = listed.resource_version;
        let existing = pool::in_order(listed.items);
        for s in &existing {
            self.generation = self.generation.max(s.spec.pool.generation);
        }
        let mut marks = marks.clone();
        if found.iter().any(|d| d.partitions.is_some()) {
            marks.layout = self.partition_layout().await;
        }
        let mut wanted = pool::wanted(&self.node, &self.config, found, &marks, &existing);
        let mut devices = std::mem::take(&mut wanted.devices);
        taints::keep_time_added(&mut devices, &existing);
        if devices.iter().any(|d| !d.taints.is_empty()) && !self.taints_served(&devices).await {
            devices = taints::withdraw_tainted(devices);
        }
        let tainted: Vec<DeviceTaint> = devices.iter().flat_map(|d| d.taints.clone()).collect();
        wanted.devices = devices;
        let pool = pool::cut(wanted);
        if pool::same(&existing, &pool) {
            self.count_tainted(&tainted);
            return Ok((Published::Unchanged, false));
        }
        let uid = match &self.node_uid {
            Some(u) => u.clone(),
            None => {
                let u = self.api.node_uid(&self.node).await?;
                self.node_uid = Some(u.clone());
                u
            }
        };
        let generation = self.generation + 1;
        let count = pool.len() as i64;
        let mut dropped = false;
        for (i, part) in pool.into_iter().enumerate() {
            let mut spec = self.spec(driver.clone(), generation, count, part.devices);
            spec.shared_counters = part.counters;
            let sent = match existing.get(i) {
                Some(old) => ResourceSlice {
                    spec,
                    ..old.clone()
                },
                None => self.new_slice(&driver, &uid, spec),
            };
            let answer = match existing.get(i) {
                Some(_) => self.api.update_slice(sent.clone()).await?,
                None => self.api.create_slice(sent.clone()).await?,
            };
            dropped |= !taints::kept(&sent, &answer);
        }
        for other in existing.iter().skip(count as usize) {
            let name = other.metadata.name.as_deref().unwrap_or_default();
            self.api.delete_slice(name).await?;
        }
        self.generation = generation;
        self.count_tainted(&tainted);
        if dropped {
            self.support = Support::Dropped(tokio::time::Instant::now());
            self.count_check("dropped_on_write");
            tracing::warn!(node = %self.node, "the API server dropped the devices' taints it was sent (DRADeviceTaints off?): tainted devices are withdrawn instead");
        }
        let published = if existing.is_empty() {
            Published::Created { generation }
        } else {
            Published::Updated { generation }
        };
        Ok((published, dropped))
    }

    /// Whether the cluster keeps device taints: known, or asked by a dry-run create of
    /// the tainted devices (see [`taints`]). A failed ask answers no, and is asked
    /// again at the next step.
    async fn taints_served(&mut self, devices: &[SliceDevice]) -> bool {
        match self.support {
            Support::Served => return true,
            Support::Dropped(at) if at.elapsed() < taints::RECHECK => return false,
            _ => {}
        }
        let tainted: Vec<SliceDevice> = devices
            .iter()
            .filter(|d| !d.taints.is_empty())
            .take(taints::MAX_DEVICES_WITH_TAINTS)
            .cloned()
            .collect();
        let driver = self.config.resource_domain.clone();
        let spec = self.spec(driver.clone(), self.generation + 1, 1, tainted);
        let probe = ResourceSlice {
            api_version: API_VERSION.into(),
            kind: "ResourceSlice".into(),
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-{driver}-", self.node)),
                ..ObjectMeta::default()
            },
            spec,
        };
        match self.api.dry_run_create(probe.clone()).await {
            Ok(answer) if taints::kept(&probe, &answer) => {
                self.support = Support::Served;
                self.count_check("served");
                tracing::info!(node = %self.node, "the API server keeps device taints: unhealthy and cleaning devices are tainted in the slice");
                true
            }
            Ok(_) => {
                self.support = Support::Dropped(tokio::time::Instant::now());
                self.count_check("dropped");
                tracing::info!(node = %self.node, "the API server drops device taints (DRADeviceTaints off): unhealthy and cleaning devices are withdrawn from the slice");
                false
            }
            Err(e) => {
                self.support = Support::Unknown;
                self.count_check("failed");
                tracing::warn!(node = %self.node, error = %e, "asking the API server whether it keeps device taints failed: tainted devices are withdrawn until it answers");
                false
            }
        }
    }

    /// The layout of partitionable GPUs: the configured one, or under `auto` whether
    /// the API server keeps a counter set and a device consuming it, asked by a
    /// dry-run create of each (never both in one slice, as 1.35+ requires). A failed
    /// ask answers static, and is asked again at the next step.
    async fn partition_layout(&mut self) -> Layout {
        match self.config.partition_layout {
            Layout::Auto => {}
            fixed => return fixed,
        }
        match self.counters {
            Support::Served => return Layout::Counters,
            Support::Dropped(at) if at.elapsed() < taints::RECHECK => return Layout::Static,
            _ => {}
        }
        let verdict = self.ask_counters().await;
        let outcome = match &verdict {
            Ok(true) => "served",
            Ok(false) => "dropped",
            Err(_) => "failed",
        };
        if let Some(m) = &self.metrics {
            m.counter_check(outcome);
        }
        match verdict {
            Ok(true) => {
                self.counters = Support::Served;
                tracing::info!(node = %self.node, "the API server keeps shared counters: partitionable GPUs publish every MIG profile at every placement");
                Layout::Counters
            }
            Ok(false) => {
                self.counters = Support::Dropped(tokio::time::Instant::now());
                tracing::info!(node = %self.node, "the API server drops shared counters (before 1.36, or DRAPartitionableDevices off): partitionable GPUs publish only the MIG devices that exist");
                Layout::Static
            }
            Err(e) => {
                self.counters = Support::Unknown;
                tracing::warn!(node = %self.node, error = %e, "asking the API server whether it keeps shared counters failed: the static MIG layout until it answers");
                Layout::Static
            }
        }
    }

    /// One dry-run create of a counter set and one of a device drawing from it.
    async fn ask_counters(&self) -> Result<bool, ApiError> {
        use super::objects::{CounterConsumption, CounterSet, DeviceCapacity};
        let driver = self.config.resource_domain.clone();
        let set = CounterSet {
            name: "accel-probe".into(),
            counters: [("probe".to_owned(), DeviceCapacity { value: "1".into() })].into(),
        };
        let device = SliceDevice {
            name: "accel-probe".into(),
            attributes: Default::default(),
            capacity: Default::default(),
            taints: Vec::new(),
            consumes_counters: vec![CounterConsumption {
                counter_set: set.name.clone(),
                counters: set.counters.clone(),
            }],
            other: Default::default(),
        };
        let probe = |spec: ResourceSliceSpec| ResourceSlice {
            api_version: API_VERSION.into(),
            kind: "ResourceSlice".into(),
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-{driver}-", self.node)),
                ..ObjectMeta::default()
            },
            spec,
        };
        let mut counters = self.spec(driver.clone(), self.generation + 1, 2, Vec::new());
        counters.shared_counters = vec![set];
        let answer = self.api.dry_run_create(probe(counters)).await?;
        if answer.spec.shared_counters.is_empty() {
            return Ok(false);
        }
        let devices = self.spec(driver.clone(), self.generation + 1, 2, vec![device]);
        let answer = self.api.dry_run_create(probe(devices)).await?;
        Ok(answer
            .spec
            .devices
            .first()
            .is_some_and(|d| !d.consumes_counters.is_empty()))
    }

    /// The taints the pool now holds (`accel_dra_tainted_devices`).
    fn count_tainted(&self, tainted: &[DeviceTaint]) {
        if let Some(m) = &self.metrics {
            m.tainted(tainted);
        }
    }

    fn count_check(&self, outcome: &str) {
        if let Some(m) = &self.metrics {
            m.taint_check(outcome);
        }
    }

    /// A new slice of the pool, named by the API server.
    fn new_slice(&self, driver: &str, uid: &str, spec: ResourceSliceSpec) -> ResourceSlice {
        let metadata = ObjectMeta {
            generate_name: Some(format!("{}-{driver}-", self.node)),
            owner_references: vec![self.owner(uid.to_owned())],
            ..ObjectMeta::default()
        };
        ResourceSlice {
            api_version: API_VERSION.into(),
            kind: "ResourceSlice".into(),
            metadata,
            spec,
        }
    }

    /// One slice's spec: part of the node's pool of `count` slices, at `generation`.
    fn spec(
        &self,
        driver: String,
        generation: i64,
        count: i64,
        devices: Vec<SliceDevice>,
    ) -> ResourceSliceSpec {
        ResourceSliceSpec {
            driver,
            node_name: Some(self.node.clone()),
            pool: ResourcePool {
                name: self.node.clone(),
                generation,
                resource_slice_count: count,
            },
            devices,
            shared_counters: Vec::new(),
        }
    }

    /// The Node as the slices' owner: they go when it goes.
    fn owner(&self, uid: String) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.node.clone(),
            uid,
            controller: Some(true),
        }
    }
}

#[cfg(test)]
mod tests;
