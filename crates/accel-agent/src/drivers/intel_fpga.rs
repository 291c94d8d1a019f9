//! Intel FPGA PACs (DFL devices): the card is a device provider, each partial
//! reconfiguration region a child provider carrying `CUSTOM_ACCELERATOR_FPGA`.
//!
//! Two sysfs layouts carry the same facts:
//!
//! ```text
//! OPAE out-of-tree driver           <pf>/fpga/intel-fpga-dev.N/
//!     FME, region interface id          intel-fpga-fme.N/pr/interface_id
//!     port, programmed AFU              intel-fpga-port.N/afu_id
//! mainline DFL driver               <pf>/fpga_region/regionN/
//!     FME, region interface id          dfl-fme.N/dfl-fme-region.M/fpga_region/regionK/compat_id
//!     port, programmed AFU              dfl-port.N/afu_id
//! ```
//!
//! With SR-IOV enabled the ports move to the VFs (each VF carries one port): the region
//! then offers one accelerator per VF with the VFs as handles and the PF stays the
//! host's management function. Without VFs the PF is the region's one handle. A card
//! A function that shows both trees (one driver swapped for the other without a
//! reboot) is read in the tree of the driver bound to it, so each region is reported
//! once. A card whose FME cannot be read is still one region, with no region id trait (seed 003:
//! a device without partial reconfiguration is one region). Programming runs OPAE's
//! `fpgaconf` on the PF and reads the new AFU id back from sysfs.

use super::{region_of, run_tool, Driver, Host, ProgramError};
use crate::model::{FoundDevice, Handle, Health, Region};
use crate::pci::PciFunction;
use crate::sysfs::Sysfs;
use accel_core::accelerator::DeviceType;
use std::path::Path;

pub struct IntelFpga;

/// (PF id, VF id, family, model).
const CARDS: &[(u16, u16, &str, &str)] = &[
    (0x09c4, 0x09c5, "ARRIA10", "PAC Arria 10 GX"),
    (0x0b30, 0x0b31, "ARRIA10", "PAC N3000"),
    (0x0b2b, 0x0b2c, "STRATIX10", "PAC D5005"),
    (0xbcce, 0xbccf, "AGILEX", "PAC N6000"),
];

/// What one layout shows of a function: region interface ids (FME) and AFU ids (ports).
#[derive(Debug, Default)]
struct Dfl {
    interface_ids: Vec<String>,
    afu_ids: Vec<String>,
}

/// The two drivers' trees. Both can be present under one function (the OPAE driver
/// swapped for `dfl-pci`, or back, without a reboot); they describe the same regions,
/// so only the bound driver's is read ([`super::bound_layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tree {
    Dfl,
    Opae,
}

/// Drivers whose trees these are; with neither bound, the kernel's own is read.
const TREES: [(Tree, &[&str]); 2] = [(Tree::Dfl, &["dfl-pci"]), (Tree::Opae, &["intel-fpga-pci"])];

fn present(sysfs: &Sysfs, f: &PciFunction, tree: Tree) -> bool {
    match tree {
        Tree::Dfl => !sysfs
            .list_prefixed(&f.path.join("fpga_region"), "region")
            .is_empty(),
        Tree::Opae => !sysfs
            .list_prefixed(&f.path.join("fpga"), "intel-fpga-dev.")
            .is_empty(),
    }
}

/// The tree to read for `f`: the one there, or the bound driver's of several. A VF
/// showing both reads the tree chosen for its PF (`pf_tree`), the VF itself being bound
/// to neither driver when it is passed through.
fn tree_of(sysfs: &Sysfs, f: &PciFunction, pf_tree: Option<Tree>) -> Option<Tree> {
    if let Some(t) = pf_tree {
        if TREES.iter().all(|(t, _)| present(sysfs, f, *t)) {
            return Some(t);
        }
    }
    let layouts = TREES.map(|(t, drivers)| super::Layout {
        drivers,
        present: present(sysfs, f, t),
    });
    super::bound_layout(sysfs, f, &layouts).map(|i| TREES[i].0)
}

/// What `f` shows in `tree`.
fn read_layout(sysfs: &Sysfs, f: &PciFunction, tree: Tree) -> Dfl {
    let mut out = Dfl::default();
    match tree {
        // OPAE: fpga/intel-fpga-dev.N/{intel-fpga-fme.N/pr/interface_id, intel-fpga-port.N/afu_id}
        Tree::Opae => {
            let fpga = f.path.join("fpga");
            for dev in sysfs.list_prefixed(&fpga, "intel-fpga-dev.") {
                let dev = fpga.join(dev);
                for fme in sysfs.list_prefixed(&dev, "intel-fpga-fme.") {
                    if let Some(id) = read_id(sysfs, &dev.join(fme).join("pr/interface_id")) {
                        out.interface_ids.push(id);
                    }
                }
                for port in sysfs.list_prefixed(&dev, "intel-fpga-port.") {
                    if let Some(id) = read_id(sysfs, &dev.join(port).join("afu_id")) {
                        out.afu_ids.push(id);
                    }
                }
            }
        }
        // Mainline: fpga_region/regionN/{dfl-fme.N/dfl-fme-region.M/fpga_region/regionK/compat_id, dfl-port.N/afu_id}
        Tree::Dfl => {
            let regions = f.path.join("fpga_region");
            for region in sysfs.list_prefixed(&regions, "region") {
                let region = regions.join(region);
                for fme in sysfs.list_prefixed(&region, "dfl-fme.") {
                    let fme = region.join(fme);
                    for pr in sysfs.list_prefixed(&fme, "dfl-fme-region.") {
                        let inner = fme.join(pr).join("fpga_region");
                        for r in sysfs.list_prefixed(&inner, "region") {
                            if let Some(id) = read_id(sysfs, &inner.join(r).join("compat_id")) {
                                out.interface_ids.push(id);
                            }
                        }
                    }
                }
                for port in sysfs.list_prefixed(&region, "dfl-port.") {
                    if let Some(id) = read_id(sysfs, &region.join(port).join("afu_id")) {
                        out.afu_ids.push(id);
                    }
                }
            }
        }
    }
    out
}

/// A card: its PF's regions (interface ids) and the AFU ids of its ports, PF first then
/// VFs, each function read in one tree.
fn read_card(host: &Host, pf: &PciFunction, vfs: &[&PciFunction]) -> Dfl {
    let pf_tree = tree_of(host.sysfs, pf, None);
    let mut card = pf_tree.map_or_else(Dfl::default, |t| read_layout(host.sysfs, pf, t));
    for v in vfs {
        if let Some(t) = tree_of(host.sysfs, v, pf_tree) {
            card.afu_ids.extend(read_layout(host.sysfs, v, t).afu_ids);
        }
    }
    card
}

/// A 128-bit id file; anything else is a warning and no id.
fn read_id(sysfs: &Sysfs, path: &Path) -> Option<String> {
    let s = sysfs.read(path)?;
    if crate::model::id_part(&s).is_some() {
        Some(s)
    } else {
        sysfs.warn(path, format!("not a 128-bit id: {s:?}"));
        None
    }
}

impl Driver for IntelFpga {
    fn name(&self) -> &'static str {
        "intel_fpga"
    }

    fn programming(&self, tools: &crate::config::ProgramTools) -> super::Programming {
        super::Programming::Tool(tools.fpgaconf())
    }

    /// OPAE's `fpgaconf` loads the green bitstream into the card's PR region; the AFU
    /// id the region's port then shows in sysfs is the function it carries.
    fn program(
        &self,
        host: &Host,
        device: &FoundDevice,
        region: u32,
        bitstream: &Path,
    ) -> Result<Option<String>, ProgramError> {
        region_of(device, region)?;
        let a = device.address;
        let args = vec![
            "--segment".to_owned(),
            format!("0x{:04x}", a.domain),
            "--bus".to_owned(),
            format!("0x{:02x}", a.bus),
            "--device".to_owned(),
            format!("0x{:02x}", a.slot),
            "--function".to_owned(),
            format!("0x{:x}", a.function),
            bitstream.display().to_string(),
        ];
        run_tool(&host.config.tools.fpgaconf(), &args)?;
        let Some(pf) = host.bus.get(&a) else {
            return Ok(None);
        };
        let vfs: Vec<&PciFunction> = host.vfs(pf).collect();
        Ok(read_card(host, pf, &vfs)
            .afu_ids
            .get(region as usize)
            .cloned())
    }

    fn discover(&self, host: &Host) -> Vec<FoundDevice> {
        let mut out = Vec::new();
        for f in host.candidates() {
            let Some(&(_, vf_id, family, model)) =
                CARDS.iter().find(|c| f.vendor == 0x8086 && f.device == c.0)
            else {
                continue;
            };
            let vfs: Vec<&PciFunction> = host.vfs(f).filter(|v| v.device == vf_id).collect();
            let pf = read_card(host, f, &vfs);
            let afu_ids = &pf.afu_ids;
            if pf.interface_ids.is_empty() {
                tracing::info!(device = %f.address, "no FPGA management engine in sysfs: one region without a region id");
            }
            let n_regions = pf.interface_ids.len().max(1);
            let mut regions = Vec::new();
            for i in 0..n_regions {
                let (count, handles) = if vfs.is_empty() {
                    (1, vec![Handle::pci(f.address)])
                } else if i == 0 {
                    // Every VF carries a port of the (first) region.
                    (
                        vfs.len() as i64,
                        vfs.iter().map(|v| Handle::pci(v.address)).collect(),
                    )
                } else {
                    (0, Vec::new())
                };
                if count == 0 {
                    continue;
                }
                regions.push(Region {
                    index: i as u32,
                    interface_id: pf.interface_ids.get(i).cloned(),
                    function_id: afu_ids.get(i).cloned(),
                    count,
                    handles,
                });
            }
            let mut functions = vec![f.address];
            functions.extend(vfs.iter().map(|v| v.address));
            out.push(FoundDevice {
                device_type: DeviceType::Fpga,
                vendor: f.vendor,
                product: f.device,
                model: model.into(),
                family: Some(family.into()),
                address: f.address,
                numa_node: f.numa_node,
                driver: "intel_fpga",
                health: Health::Ok,
                class: "FPGA".into(),
                count: 0,
                handles: Vec::new(),
                memory: None,
                regions,
                extra_traits: Vec::new(),
                functions,
                board_info: Vec::new(),
                partitions: None,
            });
        }
        out
    }
}
