//! Names of PCI vendors, devices and classes from the system's `pci.ids` (the
//! pciutils/hwdata database), for `accel agent check`'s list of functions. Names are
//! for people only: no decision reads them, and without the file every name is
//! "unknown".
//!
//! The file is looked for under the filesystem the sysfs root belongs to, the sysfs
//! root's parent (`/sys` → `/usr/share/misc/pci.ids`, then `/usr/share/hwdata/pci.ids`):
//! an agent in a container with the host's root at `/host` and `--sysfs-root
//! /host/sys` names the host's devices, and a test's fake tree `<dir>/sys` brings its
//! own `<dir>/usr/share/misc/pci.ids`.
//!
//! ```text
//! 10de  NVIDIA Corporation          vendor
//! \t20b0  GA100 [A100 SXM4 40GB]     device of the vendor above
//! \t\t10de 1450  A100 SXM4 40GB      subsystem (not read)
//! C 03  Display controller          class
//! \t02  3D controller               subclass
//! ```

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Where pciutils and hwdata install the database, relative to a filesystem root.
pub const LOCATIONS: &[&str] = &["usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids"];

/// The names of the ids asked for.
#[derive(Debug, Clone, Default)]
pub struct PciIds {
    /// The file read, when one was found.
    pub source: Option<PathBuf>,
    vendors: HashMap<u16, String>,
    devices: HashMap<(u16, u16), String>,
    classes: HashMap<u8, String>,
    subclasses: HashMap<(u8, u8), String>,
}

impl PciIds {
    /// The database of the filesystem `sysfs_root` belongs to, read for `wanted`
    /// (vendor, device) pairs only; empty when there is none or it cannot be read.
    pub fn for_sysfs(sysfs_root: &Path, wanted: &[(u16, u16)]) -> PciIds {
        let base = sysfs_root.parent().unwrap_or(Path::new("/"));
        LOCATIONS
            .iter()
            .map(|l| base.join(l))
            .find_map(|p| {
                let text = std::fs::read(&p).ok()?;
                // The file is UTF-8 in current releases, Latin-1 in old ones.
                let text = String::from_utf8_lossy(&text);
                Some(PciIds {
                    source: Some(p),
                    ..PciIds::parse(&text, wanted)
                })
            })
            .unwrap_or_default()
    }

    /// Reads the names of `wanted` (and every class) from `text`.
    pub fn parse(text: &str, wanted: &[(u16, u16)]) -> PciIds {
        let vendors: HashSet<u16> = wanted.iter().map(|w| w.0).collect();
        let devices: HashSet<(u16, u16)> = wanted.iter().copied().collect();
        let mut out = PciIds::default();
        // The vendor or class the indented lines below belong to.
        enum Under {
            Nothing,
            Vendor(u16),
            Class(u8),
        }
        let mut under = Under::Nothing;
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let hex_name = |s: &str, width: usize| -> Option<(u32, String)> {
                let id = u32::from_str_radix(s.get(..width)?, 16).ok()?;
                Some((id, s.get(width..)?.trim().to_owned()))
            };
            if let Some(rest) = line.strip_prefix("\t\t") {
                let _ = rest; // subsystems and programming interfaces: not read
            } else if let Some(rest) = line.strip_prefix('\t') {
                match under {
                    Under::Vendor(v) => {
                        if let Some((d, name)) = hex_name(rest, 4) {
                            if devices.contains(&(v, d as u16)) {
                                out.devices.insert((v, d as u16), name);
                            }
                        }
                    }
                    Under::Class(c) => {
                        if let Some((s, name)) = hex_name(rest, 2) {
                            out.subclasses.insert((c, s as u8), name);
                        }
                    }
                    Under::Nothing => {}
                }
            } else if let Some(rest) = line.strip_prefix("C ") {
                under = match hex_name(rest, 2) {
                    Some((c, name)) => {
                        out.classes.insert(c as u8, name);
                        Under::Class(c as u8)
                    }
                    None => Under::Nothing,
                };
            } else {
                under = match hex_name(line, 4) {
                    Some((v, name)) => {
                        if vendors.contains(&(v as u16)) {
                            out.vendors.insert(v as u16, name);
                        }
                        Under::Vendor(v as u16)
                    }
                    None => Under::Nothing,
                };
            }
        }
        out
    }

    pub fn vendor(&self, vendor: u16) -> Option<&str> {
        self.vendors.get(&vendor).map(String::as_str)
    }

    pub fn device(&self, vendor: u16, device: u16) -> Option<&str> {
        self.devices.get(&(vendor, device)).map(String::as_str)
    }

    /// The subclass's name (`3D controller`), else the base class's.
    pub fn class(&self, class: u32) -> Option<&str> {
        let (base, sub) = ((class >> 16) as u8, (class >> 8) as u8);
        self.subclasses
            .get(&(base, sub))
            .or_else(|| self.classes.get(&base))
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vendors_devices_and_classes_asked_for() {
        let text = "# comment\n10de  NVIDIA Corporation\n\t20b0  GA100 [A100 SXM4 40GB]\n\t\t10de 1450  A100 SXM4 40GB\n\t20b5  GA100 [A100 PCIe 80GB]\n8086  Intel Corporation\n\t1572  Ethernet Controller X710\nC 03  Display controller\n\t02  3D controller\n\t\t00  none\nC 12  Processing accelerators\n";
        let ids = PciIds::parse(text, &[(0x10de, 0x20b0), (0x8086, 0x9999)]);
        assert_eq!(ids.vendor(0x10de), Some("NVIDIA Corporation"));
        assert_eq!(ids.device(0x10de, 0x20b0), Some("GA100 [A100 SXM4 40GB]"));
        assert_eq!(ids.device(0x10de, 0x20b5), None, "not asked for");
        assert_eq!(ids.vendor(0x8086), Some("Intel Corporation"));
        assert_eq!(ids.device(0x8086, 0x9999), None);
        assert_eq!(ids.class(0x030200), Some("3D controller"));
        assert_eq!(ids.class(0x120000), Some("Processing accelerators"));
        assert_eq!(ids.class(0x0c0300), None);
    }
}
