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
//! whose FME cannot be read is still one region, with no region id trait (seed 003:
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

fn read_layouts(sysfs: &Sysfs, f: &PciFunction) -> Dfl {
    let mut out = Dfl::default();
    // OPAE: fpga/intel-fpga-dev.N/{intel-fpga-fme.N/pr/interface_id, intel-fpga-port.N/afu_id}
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
    // Mainline: fpga_region/regionN/{dfl-fme.N/dfl-fme-region.M/fpga_region/regionK/compat_id, dfl-port.N/afu_id}
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
    out
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
        let mut afu_ids = read_layouts(host.sysfs, pf).afu_ids;
        for v in host.vfs(pf) {
            afu_ids.extend(read_layouts(host.sysfs, v).afu_ids);
        }
        Ok(afu_ids.get(region as usize).cloned())
    }

    fn discover(&self, host: &Host) -> Vec<FoundDevice> {
        let mut out = Vec::new();
        for f in host.candidates() {
            let Some(&(_, vf_id, family, model)) =
                CARDS.iter().find(|c| f.vendor == 0x8086 && f.device == c.0)
            else {
                continue;
            };
            let pf = read_layouts(host.sysfs, f);
            let vfs: Vec<&PciFunction> = host.vfs(f).filter(|v| v.device == vf_id).collect();
            let mut afu_ids = pf.afu_ids.clone();
            for v in &vfs {
                afu_ids.extend(read_layouts(host.sysfs, v).afu_ids);
            }
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
            });
        }
        out
    }
}
