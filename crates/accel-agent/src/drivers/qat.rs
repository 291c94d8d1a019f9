//! Intel QuickAssist: a PF with VFs offers `CUSTOM_ACCELERATOR_QAT` = number of VFs,
//! one handle per VF, on one provider per card (Cyborg makes one deployable per VF). A
//! PF without VFs is offered only when the host does not use it (bound to `vfio-pci` or
//! to nothing).

use super::{host_uses, offer, pci_device, Driver, Host, Judgement};
use crate::model::{FoundDevice, Handle};
use crate::pci::PciFunction;
use accel_core::accelerator::DeviceType;

pub struct Qat;

/// (PF id, VF id, family).
const CARDS: &[(u16, u16, &str)] = &[
    (0x0435, 0x0443, "DH895XCC"),
    (0x37c8, 0x37c9, "C62X"),
    (0x19e2, 0x19e3, "C3XXX"),
    (0x18a0, 0x18a1, "C4XXX"),
    (0x4940, 0x4941, "4XXX"),
    (0x4942, 0x4943, "401XX"),
];

impl Driver for Qat {
    fn name(&self) -> &'static str {
        "qat"
    }

    fn judge(&self, host: &Host, f: &PciFunction) -> Result<FoundDevice, Judgement> {
        let &(_, vf_id, family) = CARDS
            .iter()
            .find(|c| f.vendor == 0x8086 && f.device == c.0)
            .ok_or(Judgement::Unrelated)?;
        let vfs: Vec<_> = host
            .vfs(f)
            .filter(|v| v.device == vf_id)
            .map(|v| v.address)
            .collect();
        let Some(offer) = offer(f, vfs, Handle::pci) else {
            return Err(Judgement::Declined(format!(
                "a QAT {family} PF {}",
                host_uses(f)
            )));
        };
        Ok(FoundDevice {
            model: format!("QAT {family}"),
            family: Some(family.into()),
            ..pci_device(f, DeviceType::Qat, "qat", "QAT", offer)
        })
    }
}
