//! NVMe SSDs (class `0x010802`). A controller bound to the host's `nvme` driver holds
//! the host's file systems and is never offered; one bound to `vfio-pci` (or to no
//! driver) is, as `CUSTOM_ACCELERATOR_SSD` = 1. With SR-IOV VFs enabled the VFs are
//! offered instead of the PF, whatever the PF is bound to.

use super::{offer, pci_device, Driver, Host};
use crate::model::{FoundDevice, Handle};
use crate::pci::PciFunction;
use accel_core::accelerator::DeviceType;

pub struct Nvme;

impl Driver for Nvme {
    fn name(&self) -> &'static str {
        "nvme"
    }

    fn found(&self, host: &Host, f: &PciFunction) -> Option<FoundDevice> {
        if f.class != 0x010802 {
            return None;
        }
        let vfs: Vec<_> = host.vfs(f).map(|v| v.address).collect();
        let Some(offer) = offer(f, vfs, Handle::pci) else {
            tracing::debug!(device = %f.address, driver = ?f.driver, "NVMe controller used by the host; not offered");
            return None;
        };
        Some(pci_device(f, DeviceType::Ssd, "nvme", "SSD", offer))
    }
}
