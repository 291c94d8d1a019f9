//! NVMe SSDs (class `0x010802`). A controller bound to the host's `nvme` driver holds
//! the host's file systems and is never offered; one bound to `vfio-pci` (or to no
//! driver) is, as `CUSTOM_ACCELERATOR_SSD` = 1. With SR-IOV VFs enabled the VFs are
//! offered instead of the PF, whatever the PF is bound to.

use super::{host_uses, offer, pci_device, Driver, Host, Judgement};
use crate::model::{FoundDevice, Handle};
use crate::pci::PciFunction;
use accel_core::accelerator::DeviceType;

pub struct Nvme;

impl Driver for Nvme {
    fn name(&self) -> &'static str {
        "nvme"
    }

    fn judge(&self, host: &Host, f: &PciFunction) -> Result<FoundDevice, Judgement> {
        if f.class != 0x010802 {
            return Err(Judgement::Unrelated);
        }
        let vfs: Vec<_> = host.vfs(f).map(|v| v.address).collect();
        let Some(offer) = offer(f, vfs, Handle::pci) else {
            return Err(Judgement::Declined(format!(
                "an NVMe controller {}",
                host_uses(f)
            )));
        };
        Ok(pci_device(f, DeviceType::Ssd, "nvme", "SSD", offer))
    }
}
