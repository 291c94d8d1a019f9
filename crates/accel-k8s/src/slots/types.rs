//! The slot table's vocabulary: who holds a slot ([`Usage`], seed 001's `deviceUsage`
//! strings), the plugins it serves ([`Resource`]), what they advertise and grant, and why
//! an Allocate is refused ([`AllocError`], whose text kubelet receives).

use crate::device::Device;
use std::fmt;

/// A slot this node holds: which device it is on and, once kubelet's pod-resources
/// API lists it, the pod (`<namespace>/<name>`) that has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// `<instance>-<index>`, the key of the usage map.
    pub slot: String,
    /// [`crate::device::Device::id`] (the device's PCI address).
    pub device: String,
    pub pod: Option<String>,
    /// For a MIG device (a slot of `<domain>/mig-<profile>`): where its instance is on
    /// the GPU `device`, which the server holds in the GPU's ledger.
    pub partition: Option<MigPlacement>,
}

/// Where a MIG device is on its GPU: NVML's GPU instance profile id and the first
/// memory slice of its placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MigPlacement {
    pub profile_id: u32,
    pub start: u32,
}

/// Who holds a slot (seed 001's `deviceUsage` value).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Usage {
    Free,
    /// Held through the instance-level resource by the node's plugin.
    Node(String),
    /// Held by virtual id `vdev` of the pooled resource on `node`.
    Pool {
        vdev: String,
        node: String,
    },
}

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Usage::Free => Ok(()),
            Usage::Node(n) => f.write_str(n),
            Usage::Pool { vdev, node } => write!(f, "C:{vdev}:{node}"),
        }
    }
}

/// A usage string that is neither `<node>` nor `C:<vdev>:<node>` (seed 001).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is neither \"<node>\" nor \"C:<vdev>:<node>\"")]
pub struct ParseUsageError(pub String);

impl std::str::FromStr for Usage {
    type Err = ParseUsageError;
    fn from_str(s: &str) -> Result<Usage, ParseUsageError> {
        if s.is_empty() {
            return Ok(Usage::Free);
        }
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            [node] => Ok(Usage::Node((*node).into())),
            ["C", vdev, node] if !vdev.is_empty() && !node.is_empty() => Ok(Usage::Pool {
                vdev: (*vdev).into(),
                node: (*node).into(),
            }),
            _ => Err(ParseUsageError(s.to_owned())),
        }
    }
}

/// Which plugin: one per device (by instance name), one per configuration, or one per
/// MIG profile (by the profile's name, `1g.10gb`) across the node's GPUs in MIG mode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceKey {
    Instance(String),
    Pool(String),
    Mig(String),
}

/// A plugin to serve: its key and the extended resource name kubelet knows it by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resource {
    pub key: ResourceKey,
    pub name: String,
}

/// One entry of a ListAndWatch message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    pub id: String,
    pub healthy: bool,
    pub numa_node: Option<u32>,
}

/// One slot handed to a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The kubelet device id that asked for it (a slot id, or a virtual id).
    pub id: String,
    /// The instance (device) name, `<configuration>-<hash>`.
    pub instance: String,
    /// `<instance>-<index>`.
    pub slot: String,
    pub usage: Usage,
    /// The device; for a MIG device, its GPU.
    pub device: Device,
    /// A MIG device: its UUID and placement (the container is given the UUID).
    pub mig: Option<MigGrant>,
}

/// The MIG device a [`Grant`] hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigGrant {
    /// `MIG-<uuid>`, what NVIDIA's container toolkit reads.
    pub uuid: String,
    pub placement: MigPlacement,
}

impl Grant {
    /// How the server's answer names what it withholds of this grant: the device's
    /// id, or for a MIG device [`withheld_mig`](crate::slots::withheld_mig) of its
    /// GPU and placement.
    pub fn withheld_key(&self) -> String {
        match &self.mig {
            None => self.device.id.clone(),
            Some(m) => crate::slots::withheld_mig(&self.device.id, m.placement),
        }
    }
}

/// Why an Allocate is refused; the text goes to kubelet in the gRPC status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("no resource {0:?} on this node")]
    UnknownResource(String),
    #[error("unknown device id {0:?} for this resource")]
    UnknownId(String),
    #[error("device id {0:?} appears twice in one container request")]
    Duplicate(String),
    #[error("slot {slot:?} is held by {holder:?}")]
    SlotTaken { slot: String, holder: String },
    #[error("device of {0:?} is unhealthy, gone, or held by a virtual machine")]
    Unhealthy(String),
    /// A MIG device whose GPU is unhealthy or gone, whose slices a VM or another
    /// consumer holds in the GPU's ledger, or whose GPU a pod holds whole.
    #[error("MIG device {0:?} is unhealthy, gone, held by another consumer in its GPU's ledger, or its GPU is held whole")]
    MigUnavailable(String),
    #[error("virtual ids {0:?} and {1:?} are both held on one device; a container needs distinct devices")]
    SameDevice(String, String),
    #[error("the request needs {needed} distinct devices but only {available} have a free slot")]
    NotEnoughDevices { needed: usize, available: usize },
    /// The server's answer to the grant's save: the device is being cleaned, failed its
    /// cleaning, is reserved in full, or a virtual machine holds it (issue 41).
    #[error("device {0} is being cleaned, reserved, or held by a virtual machine (the server withheld it)")]
    Withheld(String),
    /// A repeated grant of a slot whose pod kubelet no longer lists, on a device
    /// cleaned on release: the old holder is gone, so the device is cleaned first.
    #[error("slot {0} was held for a pod that kubelet no longer lists; its device is cleaned before it is given again")]
    HolderGone(String),
    /// The grant's save did not reach the server or was refused as a whole.
    /// (The save's error, worded: this refusal is compared and cloned, a cause is not.)
    #[error("the server did not confirm the grant: {0}")]
    Unconfirmed(String),
}
