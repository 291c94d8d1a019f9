//! The DRA kubelet plugin (issue 30, `[kubernetes] mode = "dra"`): kubelet's Dynamic
//! Resource Allocation driver for the node's accelerators, beside (never together
//! with) the device plugins. The scheduler allocates a ResourceClaim's devices from
//! the node's ResourceSlices; kubelet then asks this driver to prepare the claim:
//!
//! ```text
//! kubelet ──NodePrepareResources(claims: ns, uid, name)──▶ dra.sock (v1 | v1beta1)
//!   per claim, concurrently (Driver::prepare):
//!     ClaimApi.claim(ns, name) ─▶ the ResourceClaim (GET resource.k8s.io/v1)
//!       uid differs, not allocated, or a result of this driver on another pool ─▶ error
//!     results of this driver ─▶ device names (DNS labels of the providers' names)
//!       ─▶ this node's devices (DeviceSource) ─▶ unknown name ─▶ error
//!     ClaimRecord.prepare(uid, PCI addresses) ─▶ the server allocates them whole in
//!       Placement, consumer = the claim uid (type KUBERNETES_CLAIM); a VM-held device
//!       is refused there, with the reason, for this claim only
//!     CDI spec file per claim and configuration (`accel-<domain>-<conf>-<uid>.json`,
//!       kind `<domain>/<conf>`, devices `<uid>-<device>`, env ACCEL_VISIBLE_DEVICES:
//!       the claim's PCI addresses, as the device plugins set it) ─▶ cdi_device_ids
//! kubelet ──NodeUnprepareResources──▶ ClaimRecord.unprepare(uid); CDI files removed
//! ```
//!
//! Both calls are idempotent (a replay finds the allocation in place and rewrites the
//! same files), so an agent restart (kubelet replays prepared claims) and a reboot (the
//! CDI directory is a tmpfs) need no state here: the record is the server's. Every
//! claim uid kubelet sends is answered, with an error string when it failed.
//!
//! Registration and serving are in [`serve`]; the node's ResourceSlices in [`slices`]
//! (device names: [`device_name`]; taints for unhealthy and cleaning devices:
//! [`taints`]); the objects read and written in [`objects`]; how
//! the seams and the driver fail in [`error`].

pub mod error;
pub mod metrics;
pub mod mig;
pub mod objects;
pub mod partitions;
pub mod serve;
pub mod slices;
pub mod taints;

pub use error::{ApiError, ClaimError};

use crate::config::KubernetesConfig;
use crate::device::{Device, DeviceSource};
use crate::record::RecordError;
use objects::{DeviceResult, ResourceClaim};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future, as the seams below answer.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Kubelet's plugin registry (where `<driver>-reg.sock` goes).
pub const DEFAULT_REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";
/// Kubelet's plugin directory (where `<driver>/dra.sock` goes).
pub const DEFAULT_PLUGINS_DIR: &str = "/var/lib/kubelet/plugins";
/// The DRA service's socket, in `<plugins dir>/<driver>/`.
pub const DRA_SOCKET: &str = "dra.sock";

/// A claim as kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: String,
    pub uid: String,
    pub name: String,
}

/// One prepared device, as kubelet's `Device` message carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedDevice {
    pub request_names: Vec<String>,
    pub pool_name: String,
    pub device_name: String,
    pub cdi_device_ids: Vec<String>,
}

/// Where ResourceClaims are read: the Kubernetes API server (the agent's client), or
/// a map in tests.
pub trait ClaimApi: Send + Sync {
    /// `GET /apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}`.
    fn claim(&self, namespace: &str, name: &str) -> BoxFuture<'_, Result<ResourceClaim, ApiError>>;
}

/// What a prepared claim holds on the server: devices given whole, by PCI address, and
/// MIG devices at the placements the scheduler allocated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimHolds {
    pub whole: Vec<String>,
    pub mig: Vec<MigHold>,
}

/// One MIG device of a claim: the GPU's PCI address, NVML's GPU instance profile id and
/// the first memory slice of its placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigHold {
    pub gpu: String,
    pub profile_id: u32,
    pub start: u32,
}

/// Where a prepared claim's devices are held: the server (Placement, and a GPU's
/// partition ledger for MIG devices), which refuses a device or slices a VM or another
/// pod holds.
pub trait ClaimRecord: Send + Sync {
    /// Holds `holds` for the claim `uid` (idempotent).
    fn prepare(&self, uid: &str, holds: ClaimHolds) -> BoxFuture<'_, Result<(), RecordError>>;
    /// Frees the claim's devices; an unknown claim is not an error.
    fn unprepare(&self, uid: &str) -> BoxFuture<'_, Result<(), RecordError>>;
}

/// A device's name in the ResourceSlice: its provider's name (`<node>_<address>`) as a
/// DNS label: lower case, anything but `[a-z0-9]` as `-`, no `-` at either end, and
/// when longer than 63, cut to 54 and ended by `-` and 8 hex digits of its hash.
pub fn device_name(node: &str, address: &str) -> String {
    let provider = format!("{node}_{address}");
    let label: String = provider
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let label = label.trim_matches('-').to_owned();
    if label.len() <= 63 {
        return label;
    }
    let hash = crate::device::instance_hash(node, address);
    format!("{}-{hash}", label[..54].trim_end_matches('-'))
}

/// The CDI spec file of a claim's devices of one configuration.
pub fn cdi_path(dir: &Path, domain: &str, configuration: &str, uid: &str) -> PathBuf {
    dir.join(format!("accel-{domain}-{configuration}-{uid}.json"))
}

/// One device of a claim being prepared.
struct Picked<'a> {
    requests: Vec<String>,
    target: &'a mig::Target,
    conf: &'a str,
    /// What the container is told the device is: its PCI addresses, or a MIG UUID.
    ids: Vec<String>,
}

/// One CDI device of a claim: its name, the device, what the container is told it is.
type CdiDevice<'a> = (String, &'a Device, &'a [String]);

/// The claim's devices as every CDI device of it tells the container.
struct Visible {
    /// `ACCEL_VISIBLE_DEVICES`.
    all: String,
    /// `NVIDIA_VISIBLE_DEVICES` (MIG UUIDs; unset when the claim has none).
    mig: String,
}

/// Prepares and unprepares claims for one node; the gRPC services delegate here.
pub struct Driver {
    node: String,
    config: KubernetesConfig,
    devices: Arc<dyn DeviceSource>,
    api: Arc<dyn ClaimApi>,
    record: Arc<dyn ClaimRecord>,
    metrics: Option<Arc<crate::metrics::KubeletMetrics>>,
    dra_metrics: Option<Arc<metrics::DraMetrics>>,
    /// Where the devices of unprepared claims are told to the slices' publisher.
    released: Option<Arc<taints::Released>>,
    /// Makes and unmakes MIG devices (the agent's NVML); none: a MIG claim is refused.
    partitioner: Option<Arc<dyn mig::Partitioner>>,
}

impl Driver {
    pub fn new(
        node: impl Into<String>,
        config: KubernetesConfig,
        devices: Arc<dyn DeviceSource>,
        api: Arc<dyn ClaimApi>,
        record: Arc<dyn ClaimRecord>,
    ) -> Driver {
        Driver {
            node: node.into(),
            config,
            devices,
            api,
            record,
            metrics: None,
            dra_metrics: None,
            released: None,
            partitioner: None,
        }
    }

    /// Makes the MIG devices claims are allocated through `p` (issue 45).
    pub fn with_partitioner(mut self, p: Arc<dyn mig::Partitioner>) -> Driver {
        self.partitioner = Some(p);
        self
    }

    /// Tells `released` the devices of every claim unprepared (the publisher's
    /// [`slices::Publisher::with_released`]: tainted while they are cleaned).
    pub fn with_released(mut self, released: Arc<taints::Released>) -> Driver {
        self.released = Some(released);
        self
    }

    /// Counts prepares and unprepares (`accel_dra_*`).
    pub fn with_dra_metrics(mut self, metrics: Arc<metrics::DraMetrics>) -> Driver {
        self.dra_metrics = Some(metrics);
        self
    }

    /// Records kubelet's registration verdict (the agent's `/readyz`: registered once
    /// kubelet said so through NotifyRegistrationStatus).
    pub fn with_metrics(mut self, metrics: Option<Arc<crate::metrics::KubeletMetrics>>) -> Driver {
        self.metrics = metrics;
        self
    }

    /// The driver name: the resource domain (`accel.dev`).
    pub fn name(&self) -> &str {
        &self.config.resource_domain
    }

    /// The configuration a device belongs to (the first whose selector matches).
    fn configuration(&self, d: &Device) -> Option<&str> {
        self.config
            .configurations
            .iter()
            .find(|c| c.selector.matches(d))
            .map(|c| c.name.as_str())
    }

    /// Prepares one claim (see the module doc); counted, and each grant logged.
    pub async fn prepare(&self, claim: &ClaimRef) -> Result<Vec<PreparedDevice>, ClaimError> {
        let started = std::time::Instant::now();
        let result = self.prepare_claim(claim).await;
        if let Some(m) = &self.dra_metrics {
            m.prepared(started.elapsed(), &result);
        }
        if let Ok(devices) = &result {
            let devices: Vec<&str> = devices.iter().map(|d| d.device_name.as_str()).collect();
            tracing::info!(namespace = %claim.namespace, claim = %claim.name, uid = %claim.uid, ?devices, "claim prepared: devices granted");
        }
        result
    }

    /// Unprepares one claim; counted, and each reclaim logged.
    pub async fn unprepare(&self, claim: &ClaimRef) -> Result<(), ClaimError> {
        let started = std::time::Instant::now();
        let result = self.unprepare_claim(claim).await;
        if let Some(m) = &self.dra_metrics {
            m.unprepared(started.elapsed(), &result);
        }
        if result.is_ok() {
            tracing::info!(namespace = %claim.namespace, claim = %claim.name, uid = %claim.uid, "claim unprepared: devices reclaimed");
        }
        result
    }

    async fn prepare_claim(&self, claim: &ClaimRef) -> Result<Vec<PreparedDevice>, ClaimError> {
        let claimed = self.api.claim(&claim.namespace, &claim.name).await?;
        let ours = self.ours(claim, &claimed)?;
        // Discovery reads sysfs (and NVML): off the async threads.
        let source = self.devices.clone();
        let found = tokio::task::spawn_blocking(move || source.devices())
            .await
            .map_err(ClaimError::Discovery)?;
        let by_name = mig::targets(&self.node, found);
        // One entry per device, its requests gathered (a device serves one request,
        // but kubelet's message allows several).
        let mut picked: BTreeMap<String, Picked> = BTreeMap::new();
        for r in ours {
            let name = &r.device;
            let t = by_name
                .get(name)
                .ok_or_else(|| ClaimError::NotOnNode(name.clone()))?;
            if t.form == Some(partitions::Form::Vfio) {
                tracing::warn!(claim = %claim.uid, device = %name, "a claim was allocated a GPU's VFIO form, which this driver does not prepare");
                return Err(ClaimError::VfioForm(name.clone()));
            }
            let conf = self
                .configuration(&t.device)
                .ok_or_else(|| ClaimError::NoConfiguration(name.clone()))?;
            picked
                .entry(name.clone())
                .or_insert_with(|| Picked {
                    requests: Vec::new(),
                    target: t,
                    conf,
                    ids: t.device.pci_addresses.clone(),
                })
                .requests
                .push(r.request.clone());
        }
        // Held on the server before anything is made: the devices given whole, and the
        // MIG devices at their placements in the GPU's ledger, so a VM's bind and this
        // claim never both get the same slices.
        let mut holds = ClaimHolds::default();
        for p in picked.values() {
            match &p.target.form {
                Some(partitions::Form::Mig {
                    profile_id,
                    placement,
                    ..
                }) => holds.mig.push(MigHold {
                    gpu: p.target.device.id.clone(),
                    profile_id: *profile_id,
                    start: placement.start,
                }),
                _ => holds.whole.push(p.target.device.id.clone()),
            }
        }
        if holds != ClaimHolds::default() {
            self.record.prepare(&claim.uid, holds).await?;
        }
        let mut mig_uuids = Vec::new();
        for (name, p) in picked.iter_mut() {
            match self.make_mig(claim, name, p.target).await {
                Ok(Some(uuid)) => {
                    p.ids = vec![uuid.clone()];
                    mig_uuids.push(uuid);
                }
                Ok(None) => {}
                Err(e) => {
                    self.undo_prepare(claim).await;
                    return Err(e);
                }
            }
        }
        // Every device of the claim carries the whole list, so whichever device's edits
        // the runtime applies last, the container sees all of the claim's devices.
        let visible: Vec<&str> = picked
            .values()
            .flat_map(|p| p.ids.iter().map(String::as_str))
            .collect();
        let visible = Visible {
            all: visible.join(","),
            mig: mig_uuids.join(","),
        };
        let mut by_conf: BTreeMap<&str, Vec<CdiDevice>> = BTreeMap::new();
        let mut out = Vec::new();
        for (name, p) in &picked {
            let cdi_name = format!("{}-{name}", claim.uid);
            out.push(PreparedDevice {
                request_names: p.requests.clone(),
                pool_name: self.node.clone(),
                device_name: name.clone(),
                cdi_device_ids: vec![crate::cdi::device_name(self.name(), p.conf, &cdi_name)],
            });
            by_conf
                .entry(p.conf)
                .or_default()
                .push((cdi_name, &p.target.device, &p.ids));
        }
        for (conf, devices) in by_conf {
            self.write_cdi(conf, &claim.uid, &devices, &visible)
                .map_err(|source| ClaimError::WriteCdi {
                    uid: claim.uid.clone(),
                    source,
                })?;
        }
        Ok(out)
    }

    /// Makes the MIG device a claim was allocated (its UUID), or nothing for a device
    /// given whole; counted and logged either way.
    async fn make_mig(
        &self,
        claim: &ClaimRef,
        name: &str,
        t: &mig::Target,
    ) -> Result<Option<String>, ClaimError> {
        let Some(partitions::Form::Mig {
            profile_id,
            profile,
            placement,
            uuid,
        }) = &t.form
        else {
            return Ok(None);
        };
        let Some(p) = &self.partitioner else {
            tracing::warn!(claim = %claim.uid, device = name, "a MIG device was allocated on a node without NVML");
            self.count_mig("create_failed");
            return Err(ClaimError::NoPartitioner(name.to_owned()));
        };
        let made = p
            .create(
                t.device.clone(),
                *profile_id,
                *placement,
                uuid.clone(),
                claim.uid.clone(),
            )
            .await;
        match made {
            Ok(uuid) => {
                self.count_mig("created");
                tracing::info!(claim = %claim.uid, device = name, profile = %profile, start = placement.start, %uuid, "MIG device made for a claim");
                Ok(Some(uuid))
            }
            Err(source) => {
                self.count_mig("create_failed");
                tracing::warn!(claim = %claim.uid, device = name, profile = %profile, start = placement.start, cause = %source, "making a claim's MIG device failed");
                Err(ClaimError::MigCreate {
                    device: name.to_owned(),
                    uid: claim.uid.clone(),
                    source,
                })
            }
        }
    }

    /// After a MIG device of the claim could not be made: what was made is destroyed
    /// and the server's hold freed, so the slices do not stay held for a claim that
    /// has nothing (kubelet prepares it again, or unprepares it). Failures are logged:
    /// the claim's own error is the one kubelet must see.
    async fn undo_prepare(&self, claim: &ClaimRef) {
        if let Err(e) = self.release_mig(claim).await {
            tracing::warn!(claim = %claim.uid, cause = %e, "undoing a failed prepare: destroying its MIG devices failed");
        }
        if let Err(e) = self.record.unprepare(&claim.uid).await {
            tracing::warn!(claim = %claim.uid, cause = %e, "undoing a failed prepare: freeing its hold on the server failed");
        }
    }

    fn count_mig(&self, outcome: &str) {
        if let Some(m) = &self.dra_metrics {
            m.mig_operation(outcome);
        }
    }

    /// Destroys the claim's MIG devices, if any (replays find none).
    async fn release_mig(&self, claim: &ClaimRef) -> Result<(), ClaimError> {
        let Some(p) = &self.partitioner else {
            return Ok(());
        };
        let source = self.devices.clone();
        let gpus = tokio::task::spawn_blocking(move || source.devices())
            .await
            .map_err(ClaimError::Discovery)?;
        match p.release(claim.uid.clone(), gpus).await {
            Ok(0) => Ok(()),
            Ok(n) => {
                self.count_mig("released");
                tracing::info!(claim = %claim.uid, count = n, "a claim's MIG devices destroyed");
                Ok(())
            }
            Err(source) => {
                self.count_mig("release_failed");
                tracing::warn!(claim = %claim.uid, cause = %source, "releasing a claim's MIG devices failed");
                Err(ClaimError::MigRelease {
                    uid: claim.uid.clone(),
                    source,
                })
            }
        }
    }

    /// Unprepares one claim: its devices freed on the server, its CDI files removed.
    async fn unprepare_claim(&self, claim: &ClaimRef) -> Result<(), ClaimError> {
        self.release_mig(claim).await?;
        self.record.unprepare(&claim.uid).await?;
        for c in &self.config.configurations {
            let path = cdi_path(&self.config.cdi_dir, self.name(), &c.name, &claim.uid);
            if let Some(released) = &self.released {
                released.add(taints::cdi_devices(&path, &claim.uid));
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(ClaimError::RemoveCdi { path, source }),
            }
        }
        Ok(())
    }

    /// The claim's results of this driver, once the claim is found to be the one
    /// kubelet named, allocated, and on this node's pool.
    fn ours<'c>(
        &self,
        claim: &ClaimRef,
        found: &'c ResourceClaim,
    ) -> Result<Vec<&'c DeviceResult>, ClaimError> {
        let named = || (claim.namespace.clone(), claim.name.clone());
        let uid = found.metadata.uid.as_deref().unwrap_or_default();
        if uid != claim.uid {
            let (namespace, name) = named();
            return Err(ClaimError::UidDiffers {
                namespace,
                name,
                found: uid.to_owned(),
                want: claim.uid.clone(),
            });
        }
        let results = found
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref())
            .ok_or_else(|| {
                let (namespace, name) = named();
                ClaimError::NotAllocated { namespace, name }
            })?;
        let driver = self.name();
        let ours: Vec<&DeviceResult> = results.iter().filter(|r| r.driver == driver).collect();
        if let Some(r) = ours.iter().find(|r| r.pool != self.node) {
            let (namespace, name) = named();
            return Err(ClaimError::OtherPool {
                namespace,
                name,
                device: r.device.clone(),
                pool: r.pool.clone(),
                node: self.node.clone(),
            });
        }
        if ours.is_empty() {
            let (namespace, name) = named();
            return Err(ClaimError::NoDevice {
                namespace,
                name,
                driver: driver.to_owned(),
            });
        }
        Ok(ours)
    }

    /// One spec per claim and configuration, replaced by rename.
    fn write_cdi(
        &self,
        conf: &str,
        uid: &str,
        devices: &[CdiDevice],
        visible: &Visible,
    ) -> std::io::Result<()> {
        let dir = &self.config.cdi_dir;
        std::fs::create_dir_all(dir)?;
        let specs: Vec<Value> = devices
            .iter()
            .map(|(name, d, ids)| {
                let nodes: Vec<Value> = d
                    .device_nodes
                    .iter()
                    .map(|n| json!({"path": n.container_path, "hostPath": n.host_path, "permissions": n.permissions}))
                    .collect();
                let mut edits = serde_json::Map::new();
                let mut env = vec![
                    format!("{}={}", crate::cdi::device_env(name), ids.join(",")),
                    format!("{}={}", crate::plugin::VISIBLE_DEVICES_ENV, visible.all),
                ];
                if !visible.mig.is_empty() {
                    env.push(format!("{}={}", mig::NVIDIA_VISIBLE_DEVICES, visible.mig));
                }
                edits.insert("env".into(), json!(env));
                if !nodes.is_empty() {
                    edits.insert("deviceNodes".into(), Value::Array(nodes));
                }
                json!({"name": name, "containerEdits": Value::Object(edits)})
            })
            .collect();
        let spec = json!({
            "cdiVersion": crate::cdi::CDI_VERSION,
            "kind": crate::cdi::kind(self.name(), conf),
            "devices": specs,
        });
        let path = cdi_path(dir, self.name(), conf, uid);
        let text = serde_json::to_string_pretty(&spec).map_err(std::io::Error::other)?;
        let tmp = dir.join(format!(".accel-{uid}-{conf}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_are_dns_labels() {
        assert_eq!(
            device_name("k8s-node", "0000:17:00.0"),
            "k8s-node-0000-17-00-0"
        );
        assert_eq!(
            device_name("Node.Example", "0000:3b:00.1"),
            "node-example-0000-3b-00-1"
        );
        let long = "n".repeat(70);
        let a = device_name(&long, "0000:17:00.0");
        let b = device_name(&long, "0000:31:00.0");
        assert_eq!(a.len(), 63);
        assert_ne!(a, b);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'));
    }
}
