//! People's names for the vendor and product ids agents report (`10de`, `20b0`):
//! a small table of the common accelerator vendors and products, then the server's
//! own `pci.ids` (pciutils/hwdata: `/usr/share/misc/pci.ids`,
//! `/usr/share/hwdata/pci.ids`) where it has one. Names are for the page only: the
//! ids stay in the `data-` hooks, the API and the database, as upstream has them.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Common accelerator vendors.
const VENDORS: &[(u16, &str)] = &[
    (0x10de, "NVIDIA"),
    (0x1002, "AMD"),
    (0x8086, "Intel"),
    (0x10ee, "Xilinx (AMD)"),
    (0x1172, "Altera (Intel)"),
    (0x15b3, "Mellanox (NVIDIA)"),
    (0x1da3, "Habana Labs (Intel)"),
    (0x1d0f, "Amazon"),
    (0x1ae0, "Google"),
    (0x19e5, "Huawei"),
    // Cyborg's fake driver.
    (0xabcd, "Fake vendor (Cyborg's fake driver)"),
];

/// Common accelerators, by vendor and device id.
const PRODUCTS: &[(u16, u16, &str)] = &[
    (0x10de, 0x1db4, "Tesla V100 PCIe 16GB"),
    (0x10de, 0x1db6, "Tesla V100 PCIe 32GB"),
    (0x10de, 0x1eb8, "Tesla T4"),
    (0x10de, 0x20b0, "A100 SXM4 40GB"),
    (0x10de, 0x20b2, "A100 SXM4 80GB"),
    (0x10de, 0x20b5, "A100 PCIe 80GB"),
    (0x10de, 0x20f1, "A100 PCIe 40GB"),
    (0x10de, 0x20b7, "A30"),
    (0x10de, 0x2236, "A10"),
    (0x10de, 0x26b5, "L40"),
    (0x10de, 0x26b9, "L40S"),
    (0x10de, 0x27b8, "L4"),
    (0x10de, 0x2330, "H100 SXM5 80GB"),
    (0x10de, 0x2331, "H100 PCIe"),
    (0x10de, 0x2335, "H200 SXM 141GB"),
    (0x1002, 0x738c, "Instinct MI100"),
    (0x1002, 0x740c, "Instinct MI250X / MI250"),
    (0x1002, 0x740f, "Instinct MI210"),
    (0x1002, 0x74a1, "Instinct MI300X"),
    (0x8086, 0x09c4, "PAC Arria 10 GX (FPGA)"),
    (0x8086, 0x09c5, "PAC Arria 10 GX VF (FPGA)"),
    (0x8086, 0x0b2b, "PAC D5005 Stratix 10 (FPGA)"),
    (0x8086, 0x0b30, "FPGA PAC N3000"),
    (0x8086, 0x37c8, "C62x QuickAssist (QAT)"),
    (0x8086, 0x37c9, "C62x QuickAssist VF (QAT)"),
    (0x8086, 0x4940, "4xxx QuickAssist (QAT)"),
    (0x8086, 0x4941, "4xxx QuickAssist VF (QAT)"),
    (0x8086, 0x56c0, "Data Center GPU Flex 170"),
    (0x10ee, 0x500c, "Alveo U280"),
    (0x10ee, 0x5004, "Alveo U250"),
    (0x10ee, 0x5000, "Alveo U200"),
    (0x1da3, 0x1000, "Gaudi"),
    (0x1da3, 0x1020, "Gaudi2"),
];

/// A PCI id as agents write it: `10de`, `0x10DE`.
fn hex_id(s: &str) -> Option<u16> {
    let s = s.trim();
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 4 {
        return None;
    }
    u16::from_str_radix(s, 16).ok()
}

/// The vendor's name, when known.
pub fn vendor(vendor: &str) -> Option<String> {
    let id = hex_id(vendor)?;
    VENDORS
        .iter()
        .find(|(v, _)| *v == id)
        .map(|(_, n)| (*n).to_owned())
        .or_else(|| system().vendors.get(&id).cloned())
}

/// The product's name, when `model` is a device id (drivers that know no better
/// report the id) and it is known.
pub fn product(vendor: &str, model: &str) -> Option<String> {
    let (v, d) = (hex_id(vendor)?, hex_id(model)?);
    PRODUCTS
        .iter()
        .find(|(pv, pd, _)| (*pv, *pd) == (v, d))
        .map(|(_, _, n)| (*n).to_owned())
        .or_else(|| system().devices.get(&(v, d)).cloned())
}

/// `name (id)` where a name is known, else the id.
pub fn labelled(name: Option<String>, id: &str) -> String {
    match name {
        Some(n) => format!("{n} ({id})"),
        None => id.to_owned(),
    }
}

/// Vendors and devices of the server's `pci.ids`, read once.
#[derive(Default)]
struct PciIds {
    vendors: HashMap<u16, String>,
    devices: HashMap<(u16, u16), String>,
}

fn system() -> &'static PciIds {
    static IDS: OnceLock<PciIds> = OnceLock::new();
    IDS.get_or_init(|| {
        ["/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids"]
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .map(|b| parse(&String::from_utf8_lossy(&b)))
            .unwrap_or_default()
    })
}

/// `vvvv  Vendor` lines and, under each, `\tdddd  Device` lines; classes (`C ..`)
/// and subsystems (`\t\t`) are not read.
fn parse(text: &str) -> PciIds {
    let mut ids = PciIds::default();
    let mut vendor = None;
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if line.starts_with("C ") {
            // Classes come last in the file: no vendor or device follows.
            break;
        }
        if let Some(rest) = line.strip_prefix('\t') {
            if rest.starts_with('\t') {
                continue;
            }
            if let (Some(v), Some((id, name))) = (vendor, rest.split_once("  ")) {
                if let Some(d) = hex_id(id) {
                    ids.devices.insert((v, d), name.trim().to_owned());
                }
            }
        } else if let Some((id, name)) = line.split_once("  ") {
            vendor = hex_id(id);
            if let Some(v) = vendor {
                ids.vendors.insert(v, name.trim().to_owned());
            }
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_as_agents_write_them_are_named() {
        assert_eq!(vendor("10de").as_deref(), Some("NVIDIA"));
        assert_eq!(
            vendor("0xABCD").as_deref(),
            Some("Fake vendor (Cyborg's fake driver)")
        );
        assert_eq!(product("10de", "20b0").as_deref(), Some("A100 SXM4 40GB"));
        assert_eq!(
            product("8086", "09c4").as_deref(),
            Some("PAC Arria 10 GX (FPGA)")
        );
        assert_eq!(product("10de", "miss model info"), None);
        assert_eq!(labelled(vendor("10de"), "10de"), "NVIDIA (10de)");
        assert_eq!(labelled(None, "beef"), "beef");
    }

    #[test]
    fn pci_ids_vendors_and_devices_are_read() {
        let ids = parse(
            "# comment\n1234  Acme Corp\n\t5678  Widget [W-1]\n\t\t1234 0001  Sub\n\
             C 03  Display controller\n\t02  3D controller\n",
        );
        assert_eq!(ids.vendors[&0x1234], "Acme Corp");
        assert_eq!(ids.devices[&(0x1234, 0x5678)], "Widget [W-1]");
        assert_eq!(ids.devices.len(), 1);
    }
}
