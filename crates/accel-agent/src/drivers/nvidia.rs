//! NVIDIA GPUs: display (`0x0300`) and 3D (`0x0302`) functions of vendor `0x10de`.
//!
//! A GPU without VFs offers itself (`CUSTOM_ACCELERATOR_GPU` = 1, its PF as the
//! handle). A GPU with SR-IOV VFs enabled (vGPU on Ampere and later) offers its VFs as
//! `CUSTOM_ACCELERATOR_VGPU` on the same one provider: the VFs are never counted as
//! GPUs, and the PF, then in use by the host's vGPU manager, is not offered (Cyborg's
//! driver counts every function as a PGPU, reference §8).
//!
//! Family is the architecture, from the device id (or NVML's name); with NVML the model
//! is the marketing name and the device memory becomes
//! `CUSTOM_ACCELERATOR_MEMORY_<HBM|GDDR>`. MIG state is recorded in the board info and
//! as trait `CUSTOM_GPU_NVIDIA_MIG`; MIG instances are not separately allocatable
//! (Nova has no way to attach them).

use super::nvml::{GpuInfo, Nvml};
use super::{pci_device, Driver, Host, Judgement, Offer};
use crate::model::{FoundDevice, Handle, Memory};
use crate::pci::PciFunction;
use accel_core::accelerator::DeviceType;
use std::sync::OnceLock;

pub struct Nvidia {
    use_nvml: bool,
    nvml: OnceLock<Option<Nvml>>,
}

impl Nvidia {
    pub fn new(use_nvml: bool) -> Nvidia {
        Nvidia {
            use_nvml,
            nvml: OnceLock::new(),
        }
    }

    fn nvml(&self) -> Option<&Nvml> {
        if !self.use_nvml {
            return None;
        }
        self.nvml.get_or_init(Nvml::open).as_ref()
    }
}

/// Architecture by device id, for the GPUs common in data centres.
pub fn family(device: u16) -> Option<&'static str> {
    Some(match device {
        0x1db1 | 0x1db4 | 0x1db5 | 0x1db6 | 0x1df6 => "VOLTA",
        0x1eb8 | 0x1e30 | 0x1e78 => "TURING",
        0x20b0..=0x20b5 | 0x20f1 | 0x20f3 | 0x2235 | 0x2236 | 0x2237 | 0x25b6 => "AMPERE",
        0x2321..=0x2331 | 0x2339 | 0x233a..=0x233f => "HOPPER",
        0x26b5 | 0x26b9 | 0x27b8 | 0x26ba => "ADA",
        0x2900..=0x29ff => "BLACKWELL",
        _ => return None,
    })
}

fn family_from_name(name: &str) -> Option<&'static str> {
    let n = name.to_ascii_uppercase();
    let has = |s: &str| n.contains(s);
    Some(
        if has("H100") || has("H200") || has("H800") || has("GH200") {
            "HOPPER"
        } else if has("B200") || has("B100") || has("GB200") {
            "BLACKWELL"
        } else if has("A100") || has("A30") || has("A40") || has("A10") || has("A16") {
            "AMPERE"
        } else if has("L40") || has("L4") {
            "ADA"
        } else if has("T4") {
            "TURING"
        } else if has("V100") {
            "VOLTA"
        } else {
            return None;
        },
    )
}

fn memory_kind(name: &str, family: Option<&str>) -> &'static str {
    let n = name.to_ascii_uppercase();
    let hbm = [
        "A100", "A30", "H100", "H200", "H800", "V100", "B200", "B100",
    ]
    .iter()
    .any(|m| n.contains(m));
    if hbm || (name.is_empty() && matches!(family, Some("HOPPER" | "BLACKWELL" | "VOLTA"))) {
        "HBM"
    } else {
        "GDDR"
    }
}

impl Driver for Nvidia {
    fn name(&self) -> &'static str {
        "nvidia"
    }

    fn judge(&self, host: &Host, f: &PciFunction) -> Result<FoundDevice, Judgement> {
        if !matches!(f.class_subclass(), 0x0300 | 0x0302) {
            return Err(Judgement::Unrelated);
        }
        if f.vendor != 0x10de {
            return Err(Judgement::OtherVendor);
        }
        let info: Option<GpuInfo> = self.nvml().and_then(|n| n.info(&f.address));
        let name = info.as_ref().map(|i| i.name.clone()).unwrap_or_default();
        let family = family_from_name(&name).or_else(|| family(f.device));
        let vfs: Vec<_> = host.vfs(f).map(|v| v.address).collect();
        let (class, count, handles) = if vfs.is_empty() {
            ("GPU", 1, vec![Handle::pci(f.address)])
        } else {
            (
                "VGPU",
                vfs.len() as i64,
                vfs.iter().copied().map(Handle::pci).collect(),
            )
        };
        let mut functions = vec![f.address];
        functions.extend(&vfs);
        let mut board_info = Vec::new();
        let mut extra_traits = Vec::new();
        if let Some(i) = &info {
            if i.mig_enabled {
                board_info.push(("mig_instances".into(), i.mig_instances.to_string()));
                extra_traits.push("CUSTOM_GPU_NVIDIA_MIG".into());
            }
        }
        if !vfs.is_empty() {
            board_info.push(("sriov_numvfs".into(), vfs.len().to_string()));
        }
        let offer = Offer {
            count,
            handles,
            functions,
        };
        let base = pci_device(f, DeviceType::Gpu, "nvidia", class, offer);
        Ok(FoundDevice {
            model: if name.is_empty() {
                base.model.clone()
            } else {
                name.clone()
            },
            family: family.map(str::to_owned),
            memory: info.as_ref().filter(|i| i.memory_mib > 0).map(|i| Memory {
                kind: memory_kind(&name, family).into(),
                mib: i.memory_mib,
            }),
            extra_traits,
            board_info,
            ..base
        })
    }
}
