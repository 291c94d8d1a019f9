//! What drivers find ([`FoundDevice`]) and how it is modelled in Placement (seed 003),
//! turned into the report the server applies ([`Report`]).
//!
//! ```text
//! compute node provider (Nova's, found by name, never modified)
//! ├── <node>_<bdf>                  one per device: GPU, QAT, NIC, SSD, FPGA card
//! │     inventory CUSTOM_ACCELERATOR_<TYPE> (+ CUSTOM_ACCELERATOR_MEMORY_<KIND>)
//! │     traits CUSTOM_<TYPE>_<VENDOR>, CUSTOM_<TYPE>_<VENDOR>_<FAMILY>,
//! │            CUSTOM_OWNER_ACCEL, CUSTOM_NUMA_<N>
//! └── <node>_<bdf>                  an FPGA card: no inventory of its own
//!     └── <node>_<bdf>_region<R>    one per region: CUSTOM_ACCELERATOR_FPGA, the card's
//!                                   traits + CUSTOM_FPGA_REGION_<VENDOR>_<ID>,
//!                                   CUSTOM_PROGRAMMABLE, CUSTOM_FPGA_FUNCTION_<VENDOR>_<ID>
//! ```
//!
//! With `model = "cyborg"` ([`Model::Cyborg`]) devices are reported as upstream
//! Cyborg's drivers report them instead, for clouds whose flavors ask for Cyborg's
//! classes and traits: `FPGA`, `PGPU`, `VGPU`, `CUSTOM_QAT`, `CUSTOM_NIC`,
//! `CUSTOM_SSD`; `OWNER_CYBORG`, `CUSTOM_<VENDOR>_<PRODUCT>`,
//! `CUSTOM_FPGA_<VENDOR>[_PAC_<FAMILY>]`, `CUSTOM_FPGA_FUNCTION_ID_<VENDOR>_<ID>`;
//! one provider `<node>_<bdf>` per device (an FPGA card's first region folded into
//! it), and one per QAT or NIC VF. Differences kept on purpose: an Intel card with
//! VFs is named after its PF (Cyborg: after its last VF), a Xilinx card has one
//! handle, its user function (Cyborg: both functions, so twice the ARQs), and VF
//! handles of a carved GPU are PCI (Cyborg: mdev).
//!
//! Names start with the node name, which is unique among compute nodes, so provider
//! names are unique across hosts; the server derives each provider's uuid from its name
//! (`uuid3(DNS, name)`, as Cyborg), so uuids survive agent restarts. NUMA affinity is a
//! trait (`CUSTOM_NUMA_<N>`) rather than a provider level, so that the tree stays
//! compute node → device → region and flavors can ask for it with `trait:` keys.
//!
//! Invariants:
//!
//! - **VF-correctness**: a PF with VFs enabled offers its VFs (one handle each) and not
//!   itself; a GPU's VFs are a `VGPU` inventory of that GPU's one provider, never GPUs.
//! - **Devices that go away**: with no allocation and no ARQ they are removed from the
//!   database and Placement at once; otherwise the device becomes `health = vanished`,
//!   its inventories get `reserved = total` (unallocatable, nothing over-allocated), and
//!   each later report (never skipped while one is pending) removes it once free. A
//!   device the agent reports unhealthy is reserved the same way.
//! - All Placement writes of a report go through `store::placement::*` functions, which
//!   `touch` the change log, so the candidate index sees them.

use crate::pci::PciAddress;
use accel_api::agent::{self as wire, AttachHandle, ControlPathId, DeviceReport, KeyValue};
use accel_core::accelerator::DeviceType;
use serde_json::Value;

mod cyborg;
pub use cyborg::{Model, UnknownModel};

fn kv(key: impl Into<String>, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
    }
}

/// `trait0`, `trait1`, ... attributes.
fn traits_attrs(traits: Vec<String>) -> Vec<KeyValue> {
    traits
        .into_iter()
        .enumerate()
        .map(|(i, t)| kv(format!("trait{i}"), t))
        .collect()
}

/// Marks providers (and so allocations) as accel's, as Cyborg's `OWNER_CYBORG`.
pub const OWNER_TRAIT: &str = "CUSTOM_OWNER_ACCEL";
/// Every FPGA region (seed 003): the flavor asks for it unless pre-programmed.
pub const PROGRAMMABLE_TRAIT: &str = "CUSTOM_PROGRAMMABLE";

/// A resource class suffix: `CUSTOM_ACCELERATOR_<kind>`.
pub fn accelerator_class(kind: &str) -> String {
    format!("CUSTOM_ACCELERATOR_{}", trait_part(kind))
}

/// Upper case, and anything but `A-Z0-9` becomes `_` (trait and class names).
pub fn trait_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

pub use accel_core::accelerator::id_part;

/// Vendor names used in traits (`CUSTOM_GPU_NVIDIA`); others are the hex id.
pub fn vendor_name(vendor: u16) -> String {
    match vendor {
        0x10de => "NVIDIA".into(),
        0x8086 => "INTEL".into(),
        0x10ee => "XILINX".into(),
        0x1002 => "AMD".into(),
        0x15b3 => "MELLANOX".into(),
        0x14e4 => "BROADCOM".into(),
        0x144d => "SAMSUNG".into(),
        0x1bd4 => "INSPUR".into(),
        0x19e5 => "HUAWEI".into(),
        0xabcd => "FAKE".into(),
        v => format!("{v:04X}"),
    }
}

/// One attachable PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    pub address: PciAddress,
    /// Extra attach-info fields (a NIC VF's `physical_network`).
    pub extra: Vec<(String, String)>,
}

impl Handle {
    pub fn pci(address: PciAddress) -> Handle {
        Handle {
            address,
            extra: Vec::new(),
        }
    }

    fn wire(&self) -> AttachHandle {
        let extra: Vec<(&str, &str)> = self
            .extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        AttachHandle {
            attach_type: "PCI".into(),
            attach_info: self.address.cyborg_json_with(&extra),
            in_use: false,
        }
    }
}

/// Device-local memory offered as its own class (`CUSTOM_ACCELERATOR_MEMORY_<kind>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    /// `HBM`, `GDDR`, `DDR`, ...
    pub kind: String,
    pub mib: i64,
}

/// An FPGA region: the unit an FPGA instance is allocated in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub index: u32,
    /// The region's interface (PR) id: what a bitstream must be built for.
    pub interface_id: Option<String>,
    /// The programmed function (AFU id), when one is loaded.
    pub function_id: Option<String>,
    /// How many instances may use the region at once (its VFs, or 1).
    pub count: i64,
    pub handles: Vec<Handle>,
}

/// Health as a driver sees it; an unhealthy device stays in Placement, unallocatable,
/// and the reason goes with the report (the console shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Ok,
    Unhealthy(String),
}

/// One accelerator device found on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundDevice {
    pub device_type: DeviceType,
    pub vendor: u16,
    pub product: u16,
    pub model: String,
    /// The device family (`AMPERE`, `ARRIA10`), when known.
    pub family: Option<String>,
    /// The control path: the PF (or, for a merged card, function 0).
    pub address: PciAddress,
    pub numa_node: Option<u32>,
    /// Which driver found it (`driver_name` in the records).
    pub driver: &'static str,
    pub health: Health,
    /// Resource class suffix of the device's own inventory (`GPU`, `VGPU`, `QAT`, ...);
    /// unused for an FPGA, whose inventory is on its regions.
    pub class: String,
    pub count: i64,
    pub handles: Vec<Handle>,
    pub memory: Option<Memory>,
    pub regions: Vec<Region>,
    pub extra_traits: Vec<String>,
    /// Every PCI function the device takes from the host (PF and VFs, both functions of
    /// a merged card): what must not also be Nova's.
    pub functions: Vec<PciAddress>,
    pub board_info: Vec<(String, String)>,
    /// How a GPU can be partitioned (MIG, vGPU types), when it can (issue 45).
    pub partitions: Option<accel_api::partitions::GpuPartitions>,
}

impl FoundDevice {
    /// The device's provider name on `node`.
    pub fn provider_name(&self, node: &str) -> String {
        format!("{node}_{}", self.address)
    }

    pub fn region_name(&self, node: &str, r: &Region) -> String {
        format!("{node}_{}_region{}", self.address, r.index)
    }

    fn type_part(&self) -> &'static str {
        self.device_type.as_str()
    }

    /// Traits of the device provider (and, for an FPGA, shared by its regions).
    pub fn device_traits(&self) -> Vec<String> {
        let vendor = vendor_name(self.vendor);
        let mut t = vec![format!("CUSTOM_{}_{vendor}", self.type_part())];
        if let Some(f) = &self.family {
            t.push(format!(
                "CUSTOM_{}_{vendor}_{}",
                self.type_part(),
                trait_part(f)
            ));
        }
        t.push(OWNER_TRAIT.into());
        if let Some(n) = self.numa_node {
            t.push(format!("CUSTOM_NUMA_{n}"));
        }
        t.extend(self.extra_traits.iter().cloned());
        t
    }

    /// Traits of one region provider.
    pub fn region_traits(&self, r: &Region) -> Vec<String> {
        let vendor = vendor_name(self.vendor);
        let mut t = self.device_traits();
        if let Some(id) = r.interface_id.as_deref().and_then(id_part) {
            t.push(format!("CUSTOM_FPGA_REGION_{vendor}_{id}"));
        }
        t.push(PROGRAMMABLE_TRAIT.into());
        if let Some(id) = r.function_id.as_deref().and_then(id_part) {
            t.push(format!("CUSTOM_FPGA_FUNCTION_{vendor}_{id}"));
        }
        t
    }

    fn wire(&self, node: &str) -> wire::Device {
        let name = self.provider_name(node);
        let mut deployables = Vec::new();
        let deployable = |name: String, parent: Option<String>, num: i64, attributes, handles| {
            wire::Deployable {
                name,
                parent,
                num_accelerators: num,
                driver_name: Some(self.driver.to_owned()),
                attributes,
                attach_handles: handles,
            }
        };
        if self.device_type == DeviceType::Fpga {
            deployables.push(deployable(
                name.clone(),
                None,
                0,
                traits_attrs(self.device_traits()),
                Vec::new(),
            ));
            for r in &self.regions {
                let mut attrs = vec![kv("rc", accelerator_class("FPGA"))];
                attrs.extend(traits_attrs(self.region_traits(r)));
                deployables.push(deployable(
                    self.region_name(node, r),
                    Some(name.clone()),
                    r.count,
                    attrs,
                    r.handles.iter().map(Handle::wire).collect(),
                ));
            }
        } else {
            let mut attrs = vec![kv("rc", accelerator_class(&self.class))];
            if let Some(m) = &self.memory {
                attrs.push(kv(
                    format!(
                        "inventory:{}",
                        accelerator_class(&format!("MEMORY_{}", m.kind))
                    ),
                    m.mib.to_string(),
                ));
            }
            attrs.extend(traits_attrs(self.device_traits()));
            deployables.push(deployable(
                name,
                None,
                self.count,
                attrs,
                self.handles.iter().map(Handle::wire).collect(),
            ));
        }
        let mut board = serde_json::Map::new();
        board.insert("vendor_id".into(), format!("0x{:04x}", self.vendor).into());
        board.insert(
            "product_id".into(),
            format!("0x{:04x}", self.product).into(),
        );
        if let Some(n) = self.numa_node {
            board.insert("numa_node".into(), n.into());
        }
        for (k, v) in &self.board_info {
            board.insert(k.clone(), v.clone().into());
        }
        wire::Device {
            device_type: self.device_type.as_str().to_owned(),
            vendor: format!("{:04x}", self.vendor),
            model: self.model.clone(),
            std_board_info: Some(Value::Object(board).to_string()),
            vendor_board_info: None,
            health: Some(
                match self.health {
                    Health::Ok => "ok",
                    Health::Unhealthy(_) => "unhealthy",
                }
                .to_owned(),
            ),
            health_reason: match &self.health {
                Health::Ok => None,
                Health::Unhealthy(r) => Some(r.clone()),
            },
            controlpath_id: ControlPathId {
                cpid_type: "PCI".into(),
                cpid_info: self.address.cyborg_json(),
            },
            deployables,
            partitions: self.partitions.clone(),
        }
    }
}

/// Provider names start with the node's; without `--node`, this stands in for it.
pub const NO_NODE: &str = "<node>";

/// The full report of one node, in a deterministic order (devices by address), so
/// that an unchanged host sends byte-identical bodies and the server can skip them.
#[derive(Debug, Clone)]
pub struct Report {
    pub node: String,
    pub devices: Vec<FoundDevice>,
    pub model: Model,
}

impl Report {
    pub fn new(node: &str, mut devices: Vec<FoundDevice>) -> Report {
        devices.sort_by_key(|d| d.address);
        Report {
            node: node.to_owned(),
            devices,
            model: Model::Accel,
        }
    }

    /// The same report modelled as `model` says.
    pub fn modelled(mut self, model: Model) -> Report {
        self.model = model;
        self
    }

    /// The body of `PUT /v2/agent/hosts/{node}/devices`.
    pub fn body(&self) -> DeviceReport {
        let devices = self
            .devices
            .iter()
            .map(|d| {
                let mut v = d.wire(&self.node);
                if self.model == Model::Cyborg {
                    v.deployables = d.cyborg_deployables(&self.node);
                }
                v
            })
            .collect();
        DeviceReport { devices }
    }

    /// The names of each device's providers in the body, by control address.
    pub fn provider_names(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut out = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (dev, wire) in self.devices.iter().zip(self.body().devices) {
            let names = wire.deployables.into_iter().map(|d| d.name);
            out.entry(dev.address.to_string())
                .or_default()
                .extend(names);
        }
        out
    }

    /// [`Report::body`] as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.body()).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids() {
        assert_eq!(accelerator_class("gpu"), "CUSTOM_ACCELERATOR_GPU");
        assert_eq!(trait_part("Arria 10-GX"), "ARRIA_10_GX");
        assert_eq!(
            id_part("9926ab6d-6c92-5a68-aabc-a7d84c545738").as_deref(),
            Some("9926AB6D6C925A68AABCA7D84C545738")
        );
        assert_eq!(id_part("0x1234"), None);
        assert_eq!(vendor_name(0x1234), "1234");
    }
}
