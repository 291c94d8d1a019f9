//! The agent's side of the kubelet device plugins (crate `accel_k8s`): the devices
//! discovery finds, as the plugins see them ([`to_device`]; the node's `AgentDevices`
//! serves them from the agent's discovery), and the slot usage kept by the server
//! ([`ServerUsage`]).
//!
//! ```text
//! Agent::discover ──FoundDevice──▶ to_device ──▶ accel_k8s::Device
//!   id, PCI addresses      the control path; the attach handles (VFs, regions' handles)
//!   device nodes           from sysfs, per address: VFIO group /dev/vfio/<group> (and
//!                          /dev/vfio/vfio) when bound to vfio-pci; DRI render nodes
//!                          drm/renderD*; any other node the device's sysfs directory
//!                          shows (a `dev` file two levels down: fpga/*/intel-fpga-port.N,
//!                          nvme/nvme0, ...) as /dev/<name>
//!   NUMA, health, traits   as in the report (`CUSTOM_NUMA_<N>` etc.)
//! ServerUsage ──GET/PUT /v2/agent/hosts/{node}/kubernetes──▶ accelerator API
//! ```
//!
//! A vendor node the kernel does not show in sysfs (NVIDIA's `/dev/nvidia<N>`, whose
//! minor only the driver's procfs knows) is not guessed: such a device gets its VFIO
//! group when it is bound to vfio-pci, its render node when nvidia-drm shows one.
//!
//! The usage record on the server, and one inventory with the VMs:
//!
//! ```text
//! usage.rs Syncer        restore (before any plugin registers) ◀─ GET  /v2/agent/hosts/{node}/kubernetes
//!                        step (after a table change; every reclaim tick) ─▶ PUT  (usage map + claims)
//!                           claims = held slots + device + pod (pod-resources List)
//! accel-server accelerator/kubernetes.rs ─▶ store accelerator/kubernetes.rs::save, ONE transaction:
//!    kubernetes_slots  ◀── held slots (seed 001 strings)           (migration 0008)
//!    per device with claims and no VM: consumer = pod of its first listed slot, else the
//!      first slot; allocation = every inventory of the device's providers, whole
//!      (min(capacity, max_unit)), consumer type KUBERNETES_POD
//!    stale consumers ─▶ allocations::delete_for_consumer; changed ─▶ prepare + apply
//!    kubernetes_consumers ◀── the host's pod consumers
//!    answer: vm_held_devices ─▶ SlotTable::set_vm_held (offered to nobody, like slots held elsewhere)
//!            held_partitions (MIG devices, GPU + placement) ─▶ the same, as withheld_mig keys
//! a MIG device's claim carries its placement (`partitions` beside the claims): the
//!   server holds it in the GPU's ledger there (accel-store accelerator/kubernetes/mig.rs)
//! cdi.rs: after each device change, one spec file per configuration in cdi_dir
//! ```
//!
//! Invariants:
//!
//! - **A device is never a pod's and a VM's at once.** A device with a held slot is
//!   allocated whole in Placement (capacity slots share one device; Placement has no
//!   fractions, so the other pods ride on that one allocation and appear in the usage map
//!   only). The allocation goes through `allocations::apply`, which locks the providers and
//!   checks capacity, so it is never over-allocated: if Nova got there first, the save is
//!   refused (409, rolled back) and the next one reports the device as VM-held. A device
//!   with a bound or binding ARQ, or with any allocation by a consumer that is not one of
//!   the host's pod consumers, is VM-held: every slot Unhealthy, no pool id, Allocate refused.
//! - **Placement writes go through `store::placement`** (`delete_for_consumer`,
//!   `prepare` and `apply`), which touch the change log, so the candidate index sees a
//!   pod's claim on its next request; an unchanged save writes nothing.
//! - **No claim is forgotten across restarts.** Plugins register only after the saved
//!   usage is restored (restored claims get a full reclaim grace); the record is saved
//!   after every change, so a restart loses at most the changes of the last
//!   `watch_interval`; claims of a device not found yet at restore are saved as recorded
//!   and applied when it appears. Consumers are `uuid3(URL, "accel-kubernetes:<host>:pod:<ns>/<name>")`
//!   (pod-resources gives no pod uid) or `...:slot:<slot>` until kubelet lists the pod.
//! - **CDI names match the spec files**: kind `<domain>/<configuration>`, device
//!   `<instance>`; files replaced by rename, only when their content changes.
//!
//! Device changes: a full rediscovery runs every `device_interval` (10 s); in between,
//! every `presence_interval` (50 ms) `DeviceSource::presence` lists the PCI functions
//! (one directory read) and a changed list triggers a rediscovery at once, so an
//! unplugged or added device reaches ListAndWatch within about one poll period plus one
//! discovery (`docs/benchmarks.md`). A health change the driver reports while the device
//! stays in sysfs waits for the next full rediscovery. The Kubernetes node name is the
//! agent's `--node`.

use crate::client::{Client, ClientError};
use crate::model::{FoundDevice, Health};
use accel_api::agent::{
    ClaimPartition, KubernetesUsage, KubernetesUsageParts, SlotClaim, SlotPartition,
};
use accel_k8s::dra::partitions::{Instance, Partitioning};
use accel_k8s::usage::BoxFuture;
use accel_k8s::{Device, DeviceNode, RecordError, Recorded, UsageRecord, UsageReport};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

/// A found device as the plugins offer it.
pub fn to_device(sysfs_root: &Path, d: &FoundDevice) -> Device {
    let mut addresses: Vec<String> = d
        .handles
        .iter()
        .chain(d.regions.iter().flat_map(|r| r.handles.iter()))
        .map(|h| h.address.to_string())
        .collect();
    addresses.dedup();
    if addresses.is_empty() {
        addresses.push(d.address.to_string());
    }
    let mut nodes: Vec<DeviceNode> = Vec::new();
    let control = d.address.to_string();
    for a in std::iter::once(&control).chain(addresses.iter()) {
        for n in device_nodes(sysfs_root, a) {
            if !nodes.iter().any(|m| m.host_path == n.host_path) {
                nodes.push(n);
            }
        }
    }
    let pcie_root = pcie_root(sysfs_root, &control);
    Device {
        id: control,
        device_type: d.device_type.as_str().to_owned(),
        vendor: d.vendor,
        product: d.product,
        model: d.model.clone(),
        traits: d.device_traits(),
        numa_node: d.numa_node,
        healthy: d.health == Health::Ok,
        pci_addresses: addresses,
        device_nodes: nodes,
        memory_mib: d.memory.as_ref().map(|m| m.mib),
        pcie_root,
        partitions: d
            .partitions
            .as_ref()
            .filter(|p| p.mig_enabled)
            .map(partitioning),
    }
}

/// A MIG-mode GPU as the DRA slices publish it (issue 45): the ledger's geometry
/// (`accel_core::partition`, as the server builds it from the same report) and the
/// MIG devices that exist, with their UUIDs.
pub fn partitioning(p: &accel_api::partitions::GpuPartitions) -> Partitioning {
    let mut geometry = p.geometry();
    // The slices publish MIG devices and the whole GPU; vGPU types are Placement's only.
    geometry.vgpu_types.clear();
    Partitioning {
        geometry,
        instances: p
            .instances
            .iter()
            .map(|i| Instance {
                profile_id: i.profile_id,
                placement: i.placement.span(),
                uuid: i.uuid.clone(),
            })
            .collect(),
    }
}

/// The root complex above `address`: sysfs links `bus/pci/devices/<address>` to
/// `devices/pci<domain>:<bus>/.../<address>`, and that first `pci` component is the
/// form Kubernetes' `resource.kubernetes.io/pcieRoot` takes. None where the entry is
/// not a link (a fake tree) or no such component is on its way.
pub fn pcie_root(sysfs_root: &Path, address: &str) -> Option<String> {
    let target = std::fs::read_link(sysfs_root.join("bus/pci/devices").join(address)).ok()?;
    target.components().find_map(|c| {
        let name = c.as_os_str().to_str()?;
        let (domain, bus) = name.strip_prefix("pci")?.split_once(':')?;
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        (hex(domain, 4) && hex(bus, 2)).then(|| name.to_ascii_lowercase())
    })
}

fn node(path: String) -> DeviceNode {
    DeviceNode {
        container_path: path.clone(),
        host_path: path,
        permissions: "rw".into(),
    }
}

fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()
        .and_then(|t| t.file_name().map(|f| f.to_string_lossy().into_owned()))
}

/// The device nodes sysfs shows for one PCI function.
pub fn device_nodes(sysfs_root: &Path, address: &str) -> Vec<DeviceNode> {
    let dir = sysfs_root.join("bus/pci/devices").join(address);
    let mut out = Vec::new();
    if link_name(&dir.join("driver")).as_deref() == Some("vfio-pci") {
        if let Some(group) = link_name(&dir.join("iommu_group")) {
            out.push(node("/dev/vfio/vfio".into()));
            out.push(node(format!("/dev/vfio/{group}")));
        }
    }
    walk(&dir, 3, &mut |name, under_drm| {
        if !under_drm {
            out.push(node(format!("/dev/{name}")));
        } else if name.starts_with("renderD") {
            out.push(node(format!("/dev/dri/{name}")));
        }
    });
    out
}

/// Calls `found(name, under_drm)` for every directory below `dir` (at most `depth`
/// levels, symlinks not followed) that holds a `dev` file: a character device the
/// kernel created for the function.
fn walk(dir: &Path, depth: usize, found: &mut dyn FnMut(&str, bool)) {
    let under_drm = dir.file_name().is_some_and(|n| n == "drm");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut subs: Vec<_> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    subs.sort();
    for sub in subs {
        if sub.join("dev").is_file() {
            if let Some(name) = sub.file_name() {
                found(&name.to_string_lossy(), under_drm);
            }
        }
        if depth > 1 && !under_drm {
            walk(&sub, depth - 1, found);
        }
    }
}

/// The slot usage kept by the server.
pub struct ServerUsage {
    /// A bad server URL is reported by the first load or save, as an unreachable
    /// server is (shared: every load and save reports it).
    client: Result<Client, Arc<ClientError>>,
    node: String,
}

impl ServerUsage {
    pub fn new(server: &str, token: &str, node: &str) -> ServerUsage {
        ServerUsage {
            client: Client::new(server, token).map_err(Arc::new),
            node: node.to_owned(),
        }
    }

    /// With the agent's own client (and so its authentication).
    pub fn with_client(client: Client, node: &str) -> ServerUsage {
        ServerUsage {
            client: Ok(client),
            node: node.to_owned(),
        }
    }

    fn client(&self) -> Result<&Client, RecordError> {
        self.client
            .as_ref()
            .map_err(|e| RecordError::unavailable(Unusable(e.clone())))
    }
}

/// The client that could not be made, as the cause of every load and save.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Unusable(Arc<ClientError>);

/// The body of `PUT /v2/agent/hosts/{node}/kubernetes`: the usage, the claims, and
/// where each claimed MIG device is on its GPU (the server holds it there).
pub fn save_body(report: &UsageReport) -> KubernetesUsageParts {
    KubernetesUsageParts {
        usage: KubernetesUsage {
            usage: report
                .usage
                .iter()
                .map(|(slot, u)| (slot.clone(), u.to_string()))
                .collect(),
            claims: report
                .claims
                .iter()
                .map(|c| SlotClaim {
                    slot: c.slot.clone(),
                    device: c.device.clone(),
                    pod: c.pod.clone(),
                })
                .collect(),
        },
        partitions: report
            .claims
            .iter()
            .filter_map(|c| {
                c.partition.map(|p| SlotPartition {
                    slot: c.slot.clone(),
                    profile_id: p.profile_id,
                    start: p.start,
                })
            })
            .collect(),
    }
}

/// What the plugins must not offer: the devices VMs hold, by address, and the MIG
/// devices the server withholds, as `accel_k8s::slots::withheld_mig` names them.
fn withheld(devices: Vec<String>, partitions: &[ClaimPartition]) -> BTreeSet<String> {
    devices
        .into_iter()
        .chain(partitions.iter().map(|p| {
            accel_k8s::slots::withheld_mig(
                &p.device,
                accel_k8s::slots::MigPlacement {
                    profile_id: p.profile_id,
                    start: p.start,
                },
            )
        }))
        .collect()
}

impl UsageRecord for ServerUsage {
    fn load(&self) -> BoxFuture<'_, Result<Recorded, RecordError>> {
        Box::pin(async move {
            let shown = self
                .client()?
                .kubernetes_usage(&self.node)
                .await
                .map_err(RecordError::unavailable)?;
            let mut usage = BTreeMap::new();
            for (slot, u) in shown.usage {
                match u.parse() {
                    Ok(u) => usage.insert(slot, u),
                    Err(source) => return Err(RecordError::BadUsage { slot, source }),
                };
            }
            Ok(Recorded {
                usage,
                vm_held: withheld(shown.vm_held_devices, &shown.held_partitions),
            })
        })
    }

    fn save(&self, report: UsageReport) -> BoxFuture<'_, Result<BTreeSet<String>, RecordError>> {
        Box::pin(async move {
            let saved = self
                .client()?
                .kubernetes_save(&self.node, &save_body(&report))
                .await
                .map_err(RecordError::unavailable)?;
            Ok(withheld(saved.vm_held_devices, &saved.held_partitions))
        })
    }
}

#[cfg(test)]
mod tests;
