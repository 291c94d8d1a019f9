//! NVMe SSDs (class `0x010802`). A controller bound to the host's `nvme` driver holds
//! the host's file systems and is never offered; one bound to `vfio-pci` (or to no
//! driver) is, as `CUSTOM_ACCELERATOR_SSD` = 1. With SR-IOV VFs enabled the VFs are
//! offered instead of the PF, whatever the PF is bound to.

use super::{offer, Driver, Host, Offer};
use crate::model::{FoundDevice, Handle, Health};
use accel_core::accelerator::DeviceType;

pub struct Nvme;

impl Driver for Nvme {
    fn name(&self) -> &'static str {
        "nvme"
    }

    fn discover(&self, host: &Host) -> Vec<FoundDevice> {
        let mut out = Vec::new();
        for f in host.candidates() {
            if f.class != 0x010802 {
                continue;
            }
            let vfs: Vec<_> = host.vfs(f).map(|v| v.address).collect();
            let Some(Offer {
                count,
                handles,
                functions,
            }) = offer(f, vfs, Handle::pci)
            else {
                tracing::debug!(device = %f.address, driver = ?f.driver, "NVMe controller used by the host; not offered");
                continue;
            };
            out.push(FoundDevice {
                device_type: DeviceType::Ssd,
                vendor: f.vendor,
                product: f.device,
                model: format!("{:04x}", f.device),
                family: None,
                address: f.address,
                numa_node: f.numa_node,
                driver: "nvme",
                health: Health::Ok,
                class: "SSD".into(),
                count,
                handles,
                memory: None,
                regions: Vec::new(),
                extra_traits: Vec::new(),
                functions,
                board_info: Vec::new(),
            });
        }
        out
    }
}
