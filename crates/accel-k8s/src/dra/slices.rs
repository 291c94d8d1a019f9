//! The node's ResourceSlices: what the scheduler allocates claims from.
//!
//! ```text
//! Publisher::step()   (the run loop calls it every interval; tests directly)
//!   devices (DeviceSource) ─ VM-held (the server) ─ unhealthy ─ matching no configuration
//!     ─▶ desired devices: name = DNS label of the provider, attributes type, vendor,
//!        product, model, configuration, health, pciAddress; Kubernetes' standard
//!        resource.kubernetes.io/ numaNode, pciBusID and pcieRoot (where sysfs shows it);
//!        capacity memory where the driver knows the device's memory
//!   the slices of (driver, node) ─ none ─▶ create (generation = last + 1)
//!                                ─ one, same devices ─▶ nothing
//!                                ─ otherwise ─▶ the first updated (generation + 1),
//!                                               the others deleted
//! ```
//!
//! One pool per node (`pool.name` = the node, `resourceSliceCount` 1), the Node as
//! owner (the slices go with it). Kubelet deletes a node's slices when it starts; the
//! next step finds none and creates the pool again with a higher generation, so the
//! scheduler never mixes an old generation with a new one.
//!
//! [`run`] steps every interval and, between ticks, when the node's devices come or go
//! ([`DeviceSource::presence`], polled every [`PRESENCE_INTERVAL`]) and whenever a
//! watch on the driver's own slices of the node (the list's field selectors, from the resourceVersion of the
//! last list) reports a change: a slice someone deleted or edited comes back at once,
//! not at the next tick. The step after the driver's own write finds nothing to do
//! and watches from the newer list, so the loop settles; a watch that cannot be made
//! (410 Gone, no watch verb) leaves the interval alone until the next step. A device a VM holds, or that
//! is unhealthy, is withdrawn (taints are off by default before 1.37): the scheduler
//! cannot allocate it, and a claim already allocated keeps its device.

use super::metrics::DraMetrics;
use super::objects::{
    DeviceAttribute, DeviceCapacity, ObjectMeta, OwnerReference, ResourcePool, ResourceSlice,
    ResourceSliceSpec, SliceDevice, API_VERSION,
};
use super::{device_name, ApiError, BoxFuture};
use crate::config::KubernetesConfig;
use crate::device::{Device, DeviceSource};
use crate::metrics::Pulse;
use crate::record::RecordError;
use indexmap::IndexMap;
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
    fn create_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<(), ApiError>>;
    /// Replaces the slice named in `slice.metadata.name` (with its resourceVersion).
    fn update_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<(), ApiError>>;
    fn delete_slice(&self, name: &str) -> BoxFuture<'_, Result<(), ApiError>>;
}

/// A list of slices and the resourceVersion it was read at (where a watch starts).
#[derive(Debug, Clone, Default)]
pub struct SliceList {
    pub items: Vec<ResourceSlice>,
    pub resource_version: Option<String>,
}

/// Which devices a VM holds (the server's answer; PCI addresses).
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

/// Keeps the node's pool in the API server equal to its devices.
pub struct Publisher {
    node: String,
    config: KubernetesConfig,
    devices: Arc<dyn DeviceSource>,
    api: Arc<dyn SliceApi>,
    held: Arc<dyn Held>,
    /// The highest pool generation seen or written.
    generation: i64,
    node_uid: Option<String>,
    /// The resourceVersion of the last list, where the next watch starts.
    listed_at: Option<String>,
    /// Beaten at every turn of [`run`]'s loop.
    pulse: Option<Pulse>,
    /// Counts each step of [`run`] and keeps the last one's verdict (`/readyz`).
    metrics: Option<Arc<DraMetrics>>,
}

/// The slice's devices: every healthy device of a configuration no VM holds, by name.
pub fn desired(
    node: &str,
    config: &KubernetesConfig,
    devices: Vec<Device>,
    vm_held: &BTreeSet<String>,
) -> Vec<SliceDevice> {
    let string = |s: &str| DeviceAttribute::string(s);
    let mut out: Vec<SliceDevice> = Vec::new();
    for d in devices {
        if !d.healthy || vm_held.contains(&d.id) {
            continue;
        }
        let Some(conf) = config
            .configurations
            .iter()
            .find(|c| c.selector.matches(&d))
        else {
            continue;
        };
        let name = device_name(node, &d.id);
        let mut attributes = IndexMap::new();
        attributes.insert("type".into(), string(&d.device_type));
        attributes.insert("vendor".into(), string(&format!("{:04x}", d.vendor)));
        attributes.insert("product".into(), string(&format!("{:04x}", d.product)));
        attributes.insert("model".into(), string(&d.model));
        attributes.insert("configuration".into(), string(&conf.name));
        attributes.insert("health".into(), string("ok"));
        attributes.insert("pciAddress".into(), string(&d.id));
        // Kubernetes' standard names (KubeVirt reads pciBusID): extended BDF, lower case.
        attributes.insert(PCI_BUS_ID.into(), string(&d.id.to_ascii_lowercase()));
        if let Some(root) = &d.pcie_root {
            attributes.insert(PCIE_ROOT.into(), string(root));
        }
        if let Some(n) = d.numa_node {
            attributes.insert(
                "resource.kubernetes.io/numaNode".into(),
                DeviceAttribute::int(n.into()),
            );
        }
        let capacity = d
            .memory_mib
            .map(|mib| {
                let value = format!("{mib}Mi");
                ("memory".to_owned(), DeviceCapacity { value })
            })
            .into_iter()
            .collect();
        out.push(SliceDevice {
            name,
            attributes,
            capacity,
            other: Default::default(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
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
            generation: 0,
            node_uid: None,
            listed_at: None,
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

    /// One reconciliation; see the module doc.
    pub async fn step(&mut self) -> Result<Published, SliceError> {
        let held = self.held.vm_held().await?;
        let source = self.devices.clone();
        let found = tokio::task::spawn_blocking(move || source.devices())
            .await
            .map_err(SliceError::Discovery)?;
        let devices = desired(&self.node, &self.config, found, &held);
        let driver = self.config.resource_domain.clone();
        let listed = self.api.list_slices(&self.node, &driver).await?;
        self.listed_at = listed.resource_version;
        let existing = listed.items;
        for s in &existing {
            self.generation = self.generation.max(s.spec.pool.generation);
        }
        if let [one] = existing.as_slice() {
            if one.spec.devices == devices && one.spec.pool.resource_slice_count == 1 {
                return Ok(Published::Unchanged);
            }
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
        let spec = self.spec(driver.clone(), generation, devices);
        let published = match existing.first() {
            None => {
                let metadata = ObjectMeta {
                    generate_name: Some(format!("{}-{driver}-", self.node)),
                    owner_references: vec![self.owner(uid)],
                    ..ObjectMeta::default()
                };
                self.api
                    .create_slice(ResourceSlice {
                        api_version: API_VERSION.into(),
                        kind: "ResourceSlice".into(),
                        metadata,
                        spec,
                    })
                    .await?;
                Published::Created { generation }
            }
            Some(first) => {
                let mut s = first.clone();
                s.spec = spec;
                self.api.update_slice(s).await?;
                for other in &existing[1..] {
                    let name = other.metadata.name.as_deref().unwrap_or_default();
                    self.api.delete_slice(name).await?;
                }
                Published::Updated { generation }
            }
        };
        self.generation = generation;
        Ok(published)
    }

    /// The pool's spec: one slice of the node's pool, at `generation`.
    fn spec(
        &self,
        driver: String,
        generation: i64,
        devices: Vec<SliceDevice>,
    ) -> ResourceSliceSpec {
        ResourceSliceSpec {
            driver,
            node_name: Some(self.node.clone()),
            pool: ResourcePool {
                name: self.node.clone(),
                generation,
                resource_slice_count: 1,
            },
            devices,
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

/// How often the pool is reconciled (and re-created after kubelet wiped it).
pub const PUBLISH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
/// How often [`DeviceSource::presence`] is compared with its last value.
pub const PRESENCE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Reconciles every `interval`, when the devices' presence changes, and whenever the
/// watch of the node's slices reports a change, until `shutdown`; a failed step is
/// logged and retried at the next tick, a failed watch made again after the next step.
pub async fn run(
    mut publisher: Publisher,
    interval: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut presence = tokio::time::interval(PRESENCE_INTERVAL);
    presence.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_presence = publisher.presence().await;
    let mut watch: Option<BoxFuture<'static, Result<(), ApiError>>> = None;
    loop {
        if let Some(p) = &publisher.pulse {
            p.beat();
        }
        let now = tokio::select! {
            _ = &mut shutdown => return,
            _ = tick.tick() => true,
            _ = presence.tick(), if last_presence.is_some() => {
                let seen = publisher.presence().await;
                let changed = seen != last_presence;
                last_presence = seen;
                changed
            }
            r = async {
                match watch.as_mut() {
                    Some(w) => w.await,
                    None => std::future::pending().await,
                }
            } => {
                watch = None;
                match r {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::debug!(node = %publisher.node, error = %e, "watching the ResourceSlices stopped; the interval goes on");
                        false
                    }
                }
            }
        };
        if !now {
            continue;
        }
        let result = publisher.step().await;
        if let Some(m) = &publisher.metrics {
            m.published(
                result
                    .as_ref()
                    .map(Published::outcome)
                    .map_err(|e| e.to_string()),
            );
        }
        let stepped = match result {
            Ok(Published::Unchanged) => true,
            Ok(p) => {
                tracing::info!(node = %publisher.node, outcome = ?p, "ResourceSlice published");
                true
            }
            Err(e) => {
                tracing::warn!(node = %publisher.node, error = %e, "publishing the ResourceSlice failed");
                false
            }
        };
        // After a failed step the last list may be old: watching from it again would
        // replay the same event at once, so the tick comes first.
        if stepped && watch.is_none() {
            watch = publisher.changed();
        }
    }
}

#[cfg(test)]
mod tests;
