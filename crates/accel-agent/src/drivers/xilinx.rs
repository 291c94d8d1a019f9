//! Xilinx Alveo cards (vendor `0x10ee`): a management function (even device id, the
//! host's `xclmgmt`) and a user function (odd id, `xocl`) at the same slot are one card.
//! The card is a device provider with one region (the user partition); the user
//! function is the handle, the management function stays with the host.
//!
//! Region and function ids come from XRT's sysfs where present: the management
//! function's `interface_uuids` (the shell's partition interface) and the user
//! function's `xclbinuuid` (the loaded xclbin). Programming loads an xclbin into the
//! user partition with XRT's `xbutil program` and reads `xclbinuuid` back.

use super::{region_of, run_tool, Driver, Host, Judgement, ProgramError};
use crate::model::{FoundDevice, Handle, Health, Region};
use crate::pci::PciFunction;
use accel_core::accelerator::DeviceType;
use std::path::Path;

pub struct Xilinx;

fn model(device: u16) -> Option<&'static str> {
    Some(match device & !1 {
        0x5000 => "Alveo U200",
        0x5004 => "Alveo U250",
        0x500c => "Alveo U280",
        0x5020 => "Alveo U50",
        0x5058 => "Alveo U55C",
        _ => return None,
    })
}

impl Driver for Xilinx {
    fn name(&self) -> &'static str {
        "xilinx"
    }

    fn programming(&self, tools: &crate::config::ProgramTools) -> super::Programming {
        super::Programming::Tool(tools.xbutil())
    }

    fn program(
        &self,
        host: &Host,
        device: &FoundDevice,
        region: u32,
        bitstream: &Path,
    ) -> Result<Option<String>, ProgramError> {
        let r = region_of(device, region)?;
        // The user function is the region's handle.
        let user = r.handles.first().map_or(device.address, |h| h.address);
        let args = vec![
            "program".to_owned(),
            "--device".to_owned(),
            user.to_string(),
            "--user".to_owned(),
            bitstream.display().to_string(),
        ];
        run_tool(&host.config.tools.xbutil(), &args)?;
        Ok(host.bus.get(&user).and_then(|u| {
            host.sysfs
                .read_opt(&u.path.join("xclbinuuid"))
                .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        }))
    }

    fn discover(&self, host: &Host) -> Vec<FoundDevice> {
        let xilinx: Vec<&PciFunction> = host
            .candidates()
            .filter(|f| {
                let mine =
                    f.vendor == 0x10ee && (model(f.device).is_some() || f.base_class() == 0x12);
                if !mine && f.base_class() == 0x12 {
                    host.note(self.name(), f.address, Judgement::OtherVendor);
                }
                mine
            })
            .collect();
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for f in &xilinx {
            let slot = (f.address.domain, f.address.bus, f.address.slot);
            if seen.contains(&slot) {
                continue;
            }
            seen.push(slot);
            let card: Vec<&&PciFunction> = xilinx
                .iter()
                .filter(|g| (g.address.domain, g.address.bus, g.address.slot) == slot)
                .collect();
            let mgmt = card.iter().find(|g| g.device & 1 == 0).copied();
            let user = card.iter().find(|g| g.device & 1 == 1).copied();
            let Some(control) = mgmt.or(user) else {
                continue;
            };
            let attach = user.unwrap_or(control);
            let first_line = |p: std::path::PathBuf| {
                host.sysfs
                    .read_opt(&p)
                    .and_then(|s| s.split_whitespace().next().map(str::to_owned))
            };
            let interface_id = mgmt.and_then(|m| first_line(m.path.join("interface_uuids")));
            let function_id = user.and_then(|u| first_line(u.path.join("xclbinuuid")));
            out.push(FoundDevice {
                device_type: DeviceType::Fpga,
                vendor: control.vendor,
                product: control.device,
                model: model(control.device)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("{:04x}", control.device)),
                family: model(control.device).map(|_| "ULTRASCALE_PLUS".to_owned()),
                address: control.address,
                numa_node: control.numa_node,
                driver: "xilinx",
                health: Health::Ok,
                class: "FPGA".into(),
                count: 0,
                handles: Vec::new(),
                memory: None,
                regions: vec![Region {
                    index: 0,
                    interface_id,
                    function_id,
                    count: 1,
                    handles: vec![Handle::pci(attach.address)],
                }],
                extra_traits: Vec::new(),
                functions: card.iter().map(|g| g.address).collect(),
                board_info: Vec::new(),
                partitions: None,
            });
        }
        out
    }
}
