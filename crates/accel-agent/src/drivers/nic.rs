//! NICs (class `0x02`) that the configuration maps to a physical network
//! (`[nic.physnets] physnet1 = ["eth2", "0000:3b:00.0"]`: interface names or PF
//! addresses). Unmapped NICs are the host's and never offered. A mapped PF with VFs
//! offers its VFs (`CUSTOM_ACCELERATOR_NIC` = number of VFs), each handle carrying
//! `physical_network` as Cyborg's does; a mapped PF without VFs is offered only when
//! bound to `vfio-pci` or nothing. Trait `CUSTOM_PHYSNET_<NAME>` names the network.

use super::{host_uses, offer, pci_device, Driver, Host, Judgement};
use crate::model::{trait_part, FoundDevice, Handle};
use crate::pci::PciFunction;
use accel_core::accelerator::DeviceType;

pub struct Nic;

fn physnet<'a>(host: &'a Host, f: &PciFunction) -> Option<&'a str> {
    let netdevs = host.sysfs.list(&f.path.join("net"));
    let addr = f.address.to_string();
    host.config
        .physnets
        .iter()
        .find(|(_, devs)| {
            devs.iter()
                .any(|d| *d == addr || netdevs.iter().any(|n| n == d))
        })
        .map(|(name, _)| name.as_str())
}

impl Driver for Nic {
    fn name(&self) -> &'static str {
        "nic"
    }

    fn judge(&self, host: &Host, f: &PciFunction) -> Result<FoundDevice, Judgement> {
        if f.base_class() != 0x02 {
            return Err(Judgement::Unrelated);
        }
        let Some(net) = physnet(host, f) else {
            let netdevs = host.sysfs.list(&f.path.join("net"));
            return Err(Judgement::Declined(format!(
                "a NIC ({}) not mapped in [nic.physnets]: the host's",
                if netdevs.is_empty() {
                    "no network interface".to_owned()
                } else {
                    format!("interface {}", netdevs.join(", "))
                }
            )));
        };
        let vfs: Vec<_> = host.vfs(f).map(|v| v.address).collect();
        let handle = |a| Handle {
            address: a,
            extra: vec![("physical_network".into(), net.to_owned())],
        };
        let Some(offer) = offer(f, vfs, handle) else {
            return Err(Judgement::Declined(format!(
                "a NIC mapped to {net} in [nic.physnets], but {}",
                host_uses(f)
            )));
        };
        Ok(FoundDevice {
            extra_traits: vec![format!("CUSTOM_PHYSNET_{}", trait_part(net))],
            board_info: vec![("physical_network".into(), net.to_owned())],
            ..pci_device(f, DeviceType::Nic, "nic", "NIC", offer)
        })
    }
}
