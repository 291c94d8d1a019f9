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
//! Names start with the node name, which is unique among compute nodes, so provider
//! names are unique across hosts; the server derives each provider's uuid from its name
//! (`uuid3(DNS, name)`, as Cyborg), so uuids survive agent restarts. NUMA affinity is a
//! trait (`CUSTOM_NUMA_<N>`) rather than a provider level, so that the tree stays
//! compute node → device → region and flavors can ask for it with `trait:` keys.

use crate::pci::PciAddress;
use accel_core::accelerator::DeviceType;
use serde_json::{json, Value};

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

    fn wire(&self) -> Value {
        let extra: Vec<(&str, &str)> = self
            .extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        json!({
            "attach_type": "PCI",
            "attach_info": self.address.cyborg_json_with(&extra),
            "in_use": false,
        })
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

/// Health as a driver sees it; an unhealthy device stays in Placement, unallocatable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Ok,
    Unhealthy,
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

    fn wire(&self, node: &str) -> Value {
        let name = self.provider_name(node);
        let mut deployables = Vec::new();
        let traits_attrs = |traits: Vec<String>| -> Vec<Value> {
            traits
                .into_iter()
                .enumerate()
                .map(|(i, t)| json!({"key": format!("trait{i}"), "value": t}))
                .collect()
        };
        if self.device_type == DeviceType::Fpga {
            deployables.push(json!({
                "name": name,
                "num_accelerators": 0,
                "driver_name": self.driver,
                "attributes": traits_attrs(self.device_traits()),
                "attach_handles": [],
            }));
            for r in &self.regions {
                let mut attrs = vec![json!({"key": "rc", "value": accelerator_class("FPGA")})];
                attrs.extend(traits_attrs(self.region_traits(r)));
                deployables.push(json!({
                    "name": self.region_name(node, r),
                    "parent": name,
                    "num_accelerators": r.count,
                    "driver_name": self.driver,
                    "attributes": attrs,
                    "attach_handles": r.handles.iter().map(Handle::wire).collect::<Vec<_>>(),
                }));
            }
        } else {
            let mut attrs = vec![json!({"key": "rc", "value": accelerator_class(&self.class)})];
            if let Some(m) = &self.memory {
                attrs.push(json!({
                    "key": format!("inventory:{}", accelerator_class(&format!("MEMORY_{}", m.kind))),
                    "value": m.mib.to_string(),
                }));
            }
            attrs.extend(traits_attrs(self.device_traits()));
            deployables.push(json!({
                "name": name,
                "num_accelerators": self.count,
                "driver_name": self.driver,
                "attributes": attrs,
                "attach_handles": self.handles.iter().map(Handle::wire).collect::<Vec<_>>(),
            }));
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
        json!({
            "type": self.device_type.as_str(),
            "vendor": format!("{:04x}", self.vendor),
            "model": self.model,
            "std_board_info": Value::Object(board).to_string(),
            "vendor_board_info": null,
            "health": match self.health { Health::Ok => "ok", Health::Unhealthy => "unhealthy" },
            "controlpath_id": {"cpid_type": "PCI", "cpid_info": self.address.cyborg_json()},
            "deployables": deployables,
        })
    }
}

/// The full report of one node, in a deterministic order (devices by address), so
/// that an unchanged host sends byte-identical bodies and the server can skip them.
#[derive(Debug, Clone)]
pub struct Report {
    pub node: String,
    pub devices: Vec<FoundDevice>,
}

impl Report {
    pub fn new(node: &str, mut devices: Vec<FoundDevice>) -> Report {
        devices.sort_by_key(|d| d.address);
        Report {
            node: node.to_owned(),
            devices,
        }
    }

    /// The body of `PUT /v2/agent/hosts/{node}/devices`.
    pub fn to_json(&self) -> Value {
        json!({"devices": self.devices.iter().map(|d| d.wire(&self.node)).collect::<Vec<_>>()})
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
