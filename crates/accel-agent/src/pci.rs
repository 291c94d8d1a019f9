//! The generic PCI walker: every function under `<sysfs>/bus/pci/devices`, with the
//! identity and topology facts drivers need (ids, class, NUMA node, driver binding,
//! IOMMU group, SR-IOV counts and the `physfn`/`virtfn*` links).
//!
//! Drivers never walk the bus themselves: they pick functions from [`PciBus`], which
//! is read once per discovery. A function is skipped, with a warning naming its path,
//! when its directory name is not an address or its vendor, device or class cannot be
//! read.

use crate::sysfs::Sysfs;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A PCI function address `DDDD:BB:SS.F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u8,
    pub slot: u8,
    pub function: u8,
}

impl FromStr for PciAddress {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("not a PCI address: {s:?}");
        let (domain, rest) = s.split_once(':').ok_or_else(bad)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
        let (slot, function) = rest.split_once('.').ok_or_else(bad)?;
        let hex = |t: &str, width: usize| {
            if t.len() == width {
                u32::from_str_radix(t, 16).map_err(|_| bad())
            } else {
                Err(bad())
            }
        };
        let a = PciAddress {
            domain: hex(domain, 4)?,
            bus: hex(bus, 2)? as u8,
            slot: hex(slot, 2)? as u8,
            function: hex(function, 1)? as u8,
        };
        if a.slot > 0x1f || a.function > 7 {
            return Err(bad());
        }
        Ok(a)
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.slot, self.function
        )
    }
}

impl PciAddress {
    /// Upstream Cyborg's `pci_str_to_json` text (keys sorted, Python's separators),
    /// used for control-path ids and attach handles.
    pub fn cyborg_json(&self) -> String {
        self.cyborg_json_with(&[])
    }

    /// [`Self::cyborg_json`] with extra string fields, still in sorted key order.
    pub fn cyborg_json_with(&self, extra: &[(&str, &str)]) -> String {
        let mut fields: BTreeMap<&str, String> = BTreeMap::new();
        fields.insert("domain", format!("{:04x}", self.domain));
        fields.insert("bus", format!("{:02x}", self.bus));
        fields.insert("device", format!("{:02x}", self.slot));
        fields.insert("function", format!("{:x}", self.function));
        for (k, v) in extra {
            fields.insert(k, (*v).to_owned());
        }
        let body: Vec<String> = fields
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}: {}",
                    serde_json::Value::from(*k),
                    serde_json::Value::from(v.as_str())
                )
            })
            .collect();
        format!("{{{}}}", body.join(", "))
    }
}

/// One PCI function as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    pub address: PciAddress,
    pub path: PathBuf,
    pub vendor: u16,
    pub device: u16,
    /// 24-bit class code (`0x030000` VGA, `0x030200` 3D, `0x120000` accelerator, ...).
    pub class: u32,
    pub subsystem_vendor: Option<u16>,
    pub subsystem_device: Option<u16>,
    /// `None` when the platform has no NUMA information (`-1`).
    pub numa_node: Option<u32>,
    /// The bound kernel driver (`nvidia`, `vfio-pci`, ...).
    pub driver: Option<String>,
    pub iommu_group: Option<u32>,
    pub sriov_totalvfs: Option<u32>,
    pub sriov_numvfs: Option<u32>,
    /// Set on a virtual function: its physical function.
    pub physfn: Option<PciAddress>,
    /// On a physical function: its enabled VFs, in `virtfnN` order.
    pub virtfns: Vec<PciAddress>,
}

impl PciFunction {
    pub fn is_vf(&self) -> bool {
        self.physfn.is_some()
    }

    /// A PF with SR-IOV VFs enabled: the VFs are the accelerators, not the PF.
    pub fn has_vfs(&self) -> bool {
        !self.virtfns.is_empty()
    }

    pub fn base_class(&self) -> u8 {
        (self.class >> 16) as u8
    }

    /// Class without the programming interface (`0x0302`).
    pub fn class_subclass(&self) -> u16 {
        (self.class >> 8) as u16
    }
}

/// Classes never offered whatever driver asks: bridges (host, PCI-to-PCI, ...).
pub const CLASS_BRIDGE: u8 = 0x06;
/// virtio's vendor id (Red Hat / Qumranet): paravirtual devices are never accelerators.
pub const VENDOR_VIRTIO: u16 = 0x1af4;

/// Every function on the bus, by address.
#[derive(Debug, Clone, Default)]
pub struct PciBus {
    pub functions: BTreeMap<PciAddress, PciFunction>,
}

impl PciBus {
    /// Reads `<root>/bus/pci/devices`.
    pub fn scan(sysfs: &Sysfs) -> PciBus {
        let dir = sysfs.path("bus/pci/devices");
        let names = sysfs.list(&dir);
        let read = |names: &[String]| -> Vec<PciFunction> {
            names
                .iter()
                .filter_map(|name| {
                    let path = dir.join(name);
                    let Ok(address) = name.parse::<PciAddress>() else {
                        sysfs.warn(&path, "directory name is not a PCI address");
                        return None;
                    };
                    read_function(sysfs, address, path)
                })
                .collect()
        };
        // Reading a function is a dozen small system calls; with a thousand functions
        // that is most of discovery, so the list is split over the machine's cores.
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4);
        let found: Vec<PciFunction> = if threads == 1 || names.len() < 64 {
            read(&names)
        } else {
            let chunk = names.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let parts: Vec<_> = names
                    .chunks(chunk)
                    .map(|part| scope.spawn(move || read(part)))
                    .collect();
                parts
                    .into_iter()
                    .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            })
        };
        let functions = found.into_iter().map(|f| (f.address, f)).collect();
        PciBus { functions }
    }

    pub fn get(&self, a: &PciAddress) -> Option<&PciFunction> {
        self.functions.get(a)
    }

    /// Physical functions (and functions without SR-IOV), in address order: the only
    /// starting points of a device. A VF is reached only through its PF.
    pub fn physical(&self) -> impl Iterator<Item = &PciFunction> {
        self.functions.values().filter(|f| !f.is_vf())
    }
}

fn read_function(sysfs: &Sysfs, address: PciAddress, path: PathBuf) -> Option<PciFunction> {
    // One directory listing tells which optional attributes exist, so absent ones cost
    // no failed open (discovery of 1024 functions stays within a few ms per hundred).
    let entries: std::collections::HashSet<String> = sysfs.list(&path).into_iter().collect();
    let has = |n: &str| entries.contains(n);
    let vendor = sysfs.read_hex(&path.join("vendor"))?;
    let device = sysfs.read_hex(&path.join("device"))?;
    let class = sysfs.read_hex(&path.join("class"))?;
    if vendor > 0xffff || device > 0xffff {
        sysfs.warn(&path, "vendor or device id wider than 16 bits");
        return None;
    }
    let opt_hex = |n: &str| {
        if has(n) {
            sysfs.read_hex(&path.join(n)).map(|v| v as u16)
        } else {
            None
        }
    };
    let opt_int = |n: &str| {
        if has(n) {
            sysfs
                .read_int(&path.join(n))
                .and_then(|v| u32::try_from(v).ok())
        } else {
            None
        }
    };
    let opt_link = |n: &str| {
        if has(n) {
            sysfs.link_name(&path.join(n))
        } else {
            None
        }
    };
    let link_addr = |n: &str| -> Option<PciAddress> {
        let name = opt_link(n)?;
        match name.parse() {
            Ok(a) => Some(a),
            Err(e) => {
                sysfs.warn(&path.join(n), e);
                None
            }
        }
    };
    let mut virtfns: Vec<(u32, PciAddress)> = entries
        .iter()
        .filter(|n| n.starts_with("virtfn"))
        .filter_map(|n| {
            let idx = n.trim_start_matches("virtfn").parse::<u32>().ok()?;
            Some((idx, link_addr(n)?))
        })
        .collect();
    virtfns.sort();
    Some(PciFunction {
        address,
        vendor: vendor as u16,
        device: device as u16,
        class,
        subsystem_vendor: opt_hex("subsystem_vendor"),
        subsystem_device: opt_hex("subsystem_device"),
        numa_node: opt_int("numa_node"),
        driver: opt_link("driver"),
        iommu_group: opt_link("iommu_group").and_then(|g| g.parse().ok()),
        sriov_totalvfs: opt_int("sriov_totalvfs"),
        sriov_numvfs: opt_int("sriov_numvfs"),
        physfn: link_addr("physfn"),
        virtfns: virtfns.into_iter().map(|(_, a)| a).collect(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print() {
        let a: PciAddress = "0000:af:00.1".parse().unwrap();
        assert_eq!(a.to_string(), "0000:af:00.1");
        assert_eq!(
            a.cyborg_json(),
            r#"{"bus": "af", "device": "00", "domain": "0000", "function": "1"}"#
        );
        assert!("0000:af:00".parse::<PciAddress>().is_err());
        assert!("0000:af:20.0".parse::<PciAddress>().is_err());
        assert!("0000:zz:00.0".parse::<PciAddress>().is_err());
    }
}
