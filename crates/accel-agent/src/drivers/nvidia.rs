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
//! as trait `CUSTOM_GPU_NVIDIA_MIG`.
//!
//! Partitions (issue 45): a GPU with MIG or vGPU types carries its
//! [`GpuPartitions`](accel_api::partitions::GpuPartitions) in the report: MIG mode,
//! profiles with placements, the MIG devices that exist (NVML, through the
//! [`Mig`](crate::partitions::Mig) seam), and the vGPU types of sysfs
//! ([`crate::partitions::vgpu`]); the server builds its ledger from them. NVML is
//! loaded from `nvml_library`. A GPU NVML says is lost is reported unhealthy; any
//! other NVML failure while reading partitions fails the driver for that pass (issue
//! 14: its devices are kept as last seen rather than reported without partitions).

use super::{pci_device, pci_health, Driver, DriverFailure, Host, Judgement, Offer};
use crate::mig::{Mig, MigError};
use crate::model::{FoundDevice, Handle, Health, Memory};
use crate::nvml::{GpuInfo, Nvml, DEFAULT_LIBRARY};
use crate::partitions;
use crate::pci::{PciAddress, PciFunction};
use accel_core::accelerator::DeviceType;
use std::path::PathBuf;
use std::sync::OnceLock;

pub struct Nvidia {
    use_nvml: bool,
    library: PathBuf,
    nvml: OnceLock<Option<Nvml>>,
}

impl Nvidia {
    /// With NVML from [`DEFAULT_LIBRARY`] when `use_nvml`.
    pub fn new(use_nvml: bool) -> Nvidia {
        Nvidia::with_library(use_nvml, DEFAULT_LIBRARY)
    }

    /// With NVML loaded from `library` (empty: [`DEFAULT_LIBRARY`]) when `use_nvml`.
    pub fn with_library(use_nvml: bool, library: impl Into<PathBuf>) -> Nvidia {
        let library = library.into();
        Nvidia {
            use_nvml,
            library: if library.as_os_str().is_empty() {
                DEFAULT_LIBRARY.into()
            } else {
                library
            },
            nvml: OnceLock::new(),
        }
    }

    fn nvml(&self) -> Option<&Nvml> {
        if !self.use_nvml {
            return None;
        }
        self.nvml
            .get_or_init(|| Nvml::open_or_log(&self.library.display().to_string()))
            .as_ref()
    }

    /// The GPU `f` is, with the NVML failure that kept its partitions from being read.
    fn judge_gpu(
        &self,
        host: &Host,
        f: &PciFunction,
        failures: &mut Vec<(PciAddress, MigError)>,
    ) -> Result<FoundDevice, Judgement> {
        if !matches!(f.class_subclass(), 0x0300 | 0x0302) {
            return Err(Judgement::Unrelated);
        }
        if f.vendor != 0x10de {
            return Err(Judgement::OtherVendor);
        }
        let nvml = self.nvml();
        let info: Option<GpuInfo> = nvml.and_then(|n| n.info(&f.address));
        let name = info.as_ref().map(|i| i.name.clone()).unwrap_or_default();
        let family = family_from_name(&name).or_else(|| family(f.device));
        let vf_functions: Vec<&PciFunction> = host.vfs(f).collect();
        let vfs: Vec<_> = vf_functions.iter().map(|v| v.address).collect();
        let memory_mib = info.as_ref().map_or(0, |i| i.memory_mib);
        let read = partitions::read(
            nvml.map(|n| n as &dyn Mig),
            f.address,
            memory_mib,
            |profiles| partitions::vgpu::vgpu_types(host.sysfs, f, &vf_functions, profiles),
        );
        let partitions = match read {
            Ok(p) => p,
            // Lost: health says so; nothing to read.
            Err(e) if e.gpu_lost() => None,
            // An NVML without the MIG functions (an old driver): no partitions.
            Err(e @ (MigError::Missing { .. } | MigError::NoGpu(_))) => {
                tracing::info!(gpu = %f.address, "GPU partitions not read: {e}");
                None
            }
            Err(e) => {
                failures.push((f.address, e));
                None
            }
        };
        Ok(self.device(f, info, name, family, vfs, partitions))
    }
}

/// Architecture by device id, for the GPUs common in data centres.
pub fn family(device: u16) -> Option<&'static str> {
    Some(match device {
        0x1db1 | 0x1db4 | 0x1db5 | 0x1db6 | 0x1df6 => "VOLTA",
        0x1eb8 | 0x1e30 | 0x1e78 => "TURING",
        0x20b0..=0x20b5 | 0x20f1 | 0x20f3 | 0x2235 | 0x2236 | 0x2237 | 0x25b6 => "AMPERE",
        0x2321..=0x2331 | 0x2335 | 0x2339 | 0x233a..=0x233f => "HOPPER",
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
        self.judge_gpu(host, f, &mut Vec::new())
    }

    fn try_discover(&self, host: &Host) -> Result<Vec<FoundDevice>, DriverFailure> {
        let mut failures = Vec::new();
        let mut out = Vec::new();
        for f in host.candidates() {
            match self.judge_gpu(host, f, &mut failures) {
                Ok(d) => out.push(d),
                Err(j) => host.note(self.name(), f.address, j),
            }
        }
        if failures.is_empty() {
            return Ok(out);
        }
        let reason = failures
            .iter()
            .map(|(a, e)| format!("{a}: {e}"))
            .collect::<Vec<_>>()
            .join("; ");
        Err(DriverFailure {
            driver: self.name(),
            reason: format!("reading GPU partitions through NVML failed: {reason}"),
            unhealthy: Vec::new(),
        })
    }

    /// [`pci_health`], and unhealthy when NVML says the GPU is lost.
    fn health(&self, host: &Host, device: &FoundDevice) -> Health {
        let pci = pci_health(host, device);
        if pci != Health::Ok {
            return pci;
        }
        match self.nvml().and_then(|n| n.lost(&device.address)) {
            Some(e) => {
                tracing::warn!(gpu = %device.address, cause = %e, "NVML says the GPU is lost; reported unhealthy");
                Health::Unhealthy(format!("NVML says the GPU is lost: {e}"))
            }
            None => Health::Ok,
        }
    }
}

impl Nvidia {
    /// The rest of [`Nvidia::judge_gpu`]: the device, given what NVML and sysfs said.
    fn device(
        &self,
        f: &PciFunction,
        info: Option<GpuInfo>,
        name: String,
        family: Option<&'static str>,
        vfs: Vec<PciAddress>,
        partitions: Option<accel_api::partitions::GpuPartitions>,
    ) -> FoundDevice {
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
        FoundDevice {
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
            partitions,
            ..base
        }
    }
}
