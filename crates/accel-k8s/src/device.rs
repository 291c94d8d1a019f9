//! What the plugins offer: devices as the agent found them ([`Device`]), handed over
//! through [`DeviceSource`], and how a configuration's selector picks them.

use crate::config::Selector;
use accel_core::partition::{Geometry, Span as Placement};

/// One device node the container gets (a VFIO group, a render node, a vendor node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    pub host_path: String,
    pub container_path: String,
    /// Any of `r`, `w`, `m` (kubelet's `DeviceSpec.permissions`).
    pub permissions: String,
}

/// One accelerator on this node, as the plugins see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Stable identity on this node across agent restarts (the control path's PCI
    /// address): the input of the instance-level resource's hash.
    pub id: String,
    /// `GPU`, `FPGA`, ... (upper case, as `accel_core::accelerator::DeviceType`).
    pub device_type: String,
    pub vendor: u16,
    pub product: u16,
    pub model: String,
    /// The device's Placement traits (`CUSTOM_GPU_NVIDIA`, `CUSTOM_NUMA_0`, ...).
    pub traits: Vec<String>,
    pub numa_node: Option<u32>,
    /// The driver's verdict; an unhealthy device offers nothing new to kubelet.
    pub healthy: bool,
    /// PCI addresses the container is told about (`ACCEL_VISIBLE_DEVICES`).
    pub pci_addresses: Vec<String>,
    pub device_nodes: Vec<DeviceNode>,
    /// Device-local memory in MiB, where the driver knows it (the DRA slice's
    /// `memory` capacity).
    pub memory_mib: Option<i64>,
    /// The PCIe root complex above the device, `pci<domain>:<bus>` (Kubernetes'
    /// standard `resource.kubernetes.io/pcieRoot`), where sysfs shows it.
    pub pcie_root: Option<String>,
    /// What the GPU can be split into (a GPU in MIG mode, issue 45): its DRA devices
    /// then draw from one counter set (`dra::partitions`).
    pub partitions: Option<Partitioning>,
}

/// Where the plugins get the node's devices from: the agent's discovery implements
/// it; tests and the config-only mode build the list by hand.
pub trait DeviceSource: Send + Sync {
    /// The devices present now, healthy or not. A device missing from the list is
    /// gone (unplugged, or taken by a VM; see ARCHITECTURE.md).
    fn devices(&self) -> Vec<Device>;

    /// A cheap fingerprint of what [`devices`](Self::devices) would find (for the
    /// agent: the PCI functions sysfs lists), polled often; when it changes the
    /// devices are read at once instead of at the next full refresh. `None`: no such
    /// shortcut, full refreshes only.
    fn presence(&self) -> Option<u64> {
        None
    }
}

/// A fixed list (tests, and devices given in configuration).
impl DeviceSource for Vec<Device> {
    fn devices(&self) -> Vec<Device> {
        self.clone()
    }
}

impl Selector {
    /// Every given criterion holds.
    pub fn matches(&self, d: &Device) -> bool {
        self.device_type
            .as_ref()
            .is_none_or(|t| t.eq_ignore_ascii_case(&d.device_type))
            && self.vendor.is_none_or(|v| v == d.vendor)
            && (self.product_ids.is_empty() || self.product_ids.contains(&d.product))
            && self.model.as_ref().is_none_or(|m| *m == d.model)
            && self.traits.iter().all(|t| d.traits.contains(t))
    }
}

/// The short stable hash of an instance-level resource name: 8 hex digits of FNV-1a
/// (64-bit) over `<node>\0<device id>`. Written out here, not taken from a library,
/// so that the names (kubelet's resource names, pods' requests) never change with a
/// dependency upgrade; the node name is part of it because devices are node-local.
pub fn instance_hash(node: &str, device_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.bytes().chain([0]).chain(device_id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", (h ^ (h >> 32)) as u32)
}

/// A GPU in MIG mode as the agent found it: the ledger's `Geometry` (NVML's GPU
/// instance profiles and placements, the engines; `accel_core::partition`, the model
/// the server's ledger keeps) and the MIG devices that exist, with their UUIDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitioning {
    pub geometry: Geometry,
    /// MIG devices that exist now.
    pub instances: Vec<Instance>,
}

/// A MIG device that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub profile_id: u32,
    pub placement: Placement,
    /// `MIG-<uuid>`.
    pub uuid: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::device as test_device;

    #[test]
    fn the_hash_is_stable_and_node_scoped() {
        // Pinned: changing it renames every instance-level resource in a cluster.
        assert_eq!(
            instance_hash("node-a", "0000:3b:00.0"),
            instance_hash("node-a", "0000:3b:00.0")
        );
        assert_eq!(instance_hash("node-a", "0000:3b:00.0").len(), 8);
        assert_ne!(
            instance_hash("node-a", "0000:3b:00.0"),
            instance_hash("node-b", "0000:3b:00.0")
        );
        assert_ne!(
            instance_hash("node-a", "0000:3b:00.0"),
            instance_hash("node-a", "0000:3c:00.0")
        );
        assert_eq!(
            instance_hash("", ""),
            format!("{:08x}", {
                let h: u64 = 0xaf63_bd4c_8601_b7df; // FNV-1a 64 of the single byte 0
                (h ^ (h >> 32)) as u32
            })
        );
    }

    #[test]
    fn selectors_match_every_given_field() {
        let d = Device {
            traits: vec!["CUSTOM_NUMA_0".into()],
            ..test_device("a", "GPU")
        };
        let mut s = Selector {
            device_type: Some("gpu".into()),
            ..Default::default()
        };
        assert!(s.matches(&d));
        s.vendor = Some(0x10de);
        s.product_ids = vec![0x1111, 0x20b0];
        s.traits = vec!["CUSTOM_NUMA_0".into()];
        assert!(s.matches(&d));
        s.model = Some("H100".into());
        assert!(!s.matches(&d));
        assert!(!Selector {
            device_type: Some("FPGA".into()),
            ..Default::default()
        }
        .matches(&d));
        assert!(!Selector {
            traits: vec!["CUSTOM_NUMA_1".into()],
            ..Default::default()
        }
        .matches(&d));
    }
}
