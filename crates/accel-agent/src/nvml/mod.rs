//! NVML, opened at run time: `libnvidia-ml.so.1` is part of NVIDIA's driver, not of
//! this build, so a host without it (or without NVIDIA GPUs) simply has no NVML and the
//! GPU driver uses sysfs alone. The library is `nvml_library` in the agent's
//! configuration (tests point it at `accel-fake-nvml`).
//!
//! [`Nvml`] is the safe face: what discovery reads of a GPU ([`Nvml::info`]) and the
//! [`Mig`] seam partitioning goes through. The foreign calls are in [`sys`], the
//! crate's only unsafe code.

mod sys;

use crate::mig::{Code, Mig, MigError};
use crate::pci::PciAddress;
use accel_api::partitions::{Engines, MigInstance, MigPlacement, MigProfile};
use sys::{Dev, Lib, CI_PROFILE_COUNT, GI_PROFILE_COUNT};

/// Where NVML is when the configuration does not say.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// What NVML adds to a GPU's sysfs facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// The marketing name, `NVIDIA A100-SXM4-80GB`.
    pub name: String,
    pub memory_mib: i64,
    pub mig_enabled: bool,
    /// MIG instances currently created.
    pub mig_instances: u32,
}

/// An initialised NVML; shut down on drop.
pub struct Nvml {
    lib: Lib,
}

/// Codes that mean "nothing here" while enumerating by index.
fn absent(e: &MigError) -> bool {
    matches!(
        e.code(),
        Some(Code::NOT_SUPPORTED | Code::INVALID_ARGUMENT | Code::NOT_FOUND)
    )
}

impl Nvml {
    /// The default library; `None` when it is absent or `nvmlInit_v2` fails (no
    /// driver loaded).
    pub fn open() -> Option<Nvml> {
        Nvml::open_or_log(DEFAULT_LIBRARY)
    }

    /// [`Nvml::open_at`], `None` (logged) when it fails.
    pub fn open_or_log(path: &str) -> Option<Nvml> {
        match Nvml::open_at(path) {
            Ok(n) => Some(n),
            Err(e @ MigError::Unavailable { .. }) => {
                tracing::debug!(library = path, "no NVML: {e}");
                None
            }
            Err(e) => {
                tracing::info!(
                    library = path,
                    "NVML present but unusable; using sysfs only: {e}"
                );
                None
            }
        }
    }

    /// Loads and initialises the library at `path` (a bare name is looked up as
    /// `dlopen` does).
    pub fn open_at(path: &str) -> Result<Nvml, MigError> {
        let lib = Lib::open(path)?;
        lib.init()?;
        Ok(Nvml { lib })
    }

    /// The library this NVML was loaded from.
    pub fn library(&self) -> &str {
        self.lib.path()
    }

    fn device(&self, gpu: PciAddress) -> Result<Dev, MigError> {
        self.lib
            .by_bus(&gpu.to_string())
            .map_err(|e| match e.code() {
                Some(Code::NOT_FOUND) => MigError::NoGpu(gpu),
                _ => e,
            })
    }

    /// The GPU at `address`, when NVML knows it.
    pub fn info(&self, address: &PciAddress) -> Option<GpuInfo> {
        let gpu = address.to_string();
        let dev = self.lib.by_bus(&gpu).ok()?;
        let name = self.lib.name(dev, &gpu).unwrap_or_default();
        let memory_mib = self
            .lib
            .memory(dev, &gpu)
            .map_or(0, |b| (b / (1024 * 1024)) as i64);
        // NOT_SUPPORTED on GPUs without MIG: then it stays off.
        let mig_enabled = matches!(self.lib.mig_mode(dev, &gpu), Ok((1, _)));
        let mig_instances = if mig_enabled {
            let max = self.lib.max_mig_devices(dev, &gpu).unwrap_or(0);
            (0..max)
                .filter(|i| self.lib.mig_device(dev, &gpu, *i).is_ok())
                .count() as u32
        } else {
            0
        };
        Some(GpuInfo {
            name,
            memory_mib,
            mig_enabled,
            mig_instances,
        })
    }

    /// Why the GPU cannot be used any more, when NVML says it is lost.
    pub fn lost(&self, address: &PciAddress) -> Option<MigError> {
        let gpu = address.to_string();
        let probe = self
            .lib
            .by_bus(&gpu)
            .and_then(|dev| self.lib.name(dev, &gpu));
        probe.err().filter(MigError::gpu_lost)
    }

    /// The PCI device id NVML reports for the GPU (`0x2330`).
    pub fn pci_device_id(&self, gpu: PciAddress) -> Result<u16, MigError> {
        let dev = self.device(gpu)?;
        self.lib.pci_device_id(dev, &gpu.to_string())
    }

    /// The MIG devices of a GPU by GPU instance id: `(gi, ci, uuid)`.
    fn mig_devices(&self, dev: Dev, gpu: &str) -> Result<Vec<(u32, u32, String)>, MigError> {
        let max = self.lib.max_mig_devices(dev, gpu)?;
        let mut out = Vec::new();
        for i in 0..max {
            let mig = match self.lib.mig_device(dev, gpu, i) {
                Ok(m) => m,
                Err(e) if absent(&e) => continue,
                Err(e) => return Err(e),
            };
            let (gi, ci) = self.lib.mig_ids(mig, gpu)?;
            out.push((gi, ci, self.lib.uuid(mig, gpu)?));
        }
        Ok(out)
    }

    /// Creates the compute instance spanning `gi` and answers `(ci id, uuid)`; the
    /// caller destroys the GPU instance when this fails.
    fn fill(
        &self,
        dev: Dev,
        gpu: &str,
        gi: sys::Gi,
        gi_id: u32,
    ) -> Result<(u32, String), MigError> {
        let mut widest: Option<sys::CiProfile> = None;
        for index in 0..CI_PROFILE_COUNT {
            match self.lib.ci_profile(gi, gpu, index) {
                Ok(p) if widest.as_ref().is_none_or(|w| p.slices > w.slices) => widest = Some(p),
                Ok(_) => {}
                Err(e) if absent(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let profile = widest.ok_or_else(|| {
            MigError::Inconsistent(format!(
                "GPU instance {gi_id} on {gpu} offers no compute instance profile"
            ))
        })?;
        let ci = self.lib.create_ci(gi, gpu, profile.id)?;
        let found = self.lib.ci_id(ci, gpu).and_then(|ci_id| {
            let devices = self.mig_devices(dev, gpu)?;
            devices
                .into_iter()
                .find(|(g, c, _)| (*g, *c) == (gi_id, ci_id))
                .map(|(_, c, uuid)| (c, uuid))
                .ok_or_else(|| {
                    MigError::Inconsistent(format!(
                        "{gpu}: compute instance {ci_id} of GPU instance {gi_id} was created but is no MIG device"
                    ))
                })
        });
        if found.is_err() {
            if let Err(e) = self.lib.destroy_ci(ci, gpu) {
                tracing::warn!(
                    gpu,
                    gpu_instance = gi_id,
                    "rolling back a compute instance failed: {e}"
                );
            }
        }
        found
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        self.lib.shutdown();
    }
}

impl Mig for Nvml {
    fn mig_mode(&self, gpu: PciAddress) -> Result<Option<bool>, MigError> {
        let dev = self.device(gpu)?;
        match self.lib.mig_mode(dev, &gpu.to_string()) {
            Ok((current, _)) => Ok(Some(current == 1)),
            Err(e) if e.code() == Some(Code::NOT_SUPPORTED) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn profiles(&self, gpu: PciAddress) -> Result<Vec<MigProfile>, MigError> {
        let dev = self.device(gpu)?;
        let name = gpu.to_string();
        let mut out: Vec<MigProfile> = Vec::new();
        for index in 0..GI_PROFILE_COUNT {
            let p = match self.lib.gi_profile(dev, &name, index) {
                Ok(p) => p,
                Err(e) if absent(&e) => continue,
                Err(e) => return Err(e),
            };
            if out.iter().any(|o| o.id == p.id) {
                continue;
            }
            let placements = self.placements(gpu, p.id)?;
            out.push(MigProfile {
                id: p.id,
                name: p.name.trim_start_matches("MIG ").to_owned(),
                compute_slices: p.slices,
                engines: Engines {
                    memory_mib: p.memory_mib as i64,
                    multiprocessors: p.multiprocessors,
                    copy_engines: p.copy_engines,
                    decoders: p.decoders,
                    encoders: p.encoders,
                    jpeg_engines: p.jpeg,
                    ofa_engines: p.ofa,
                },
                placements,
            });
        }
        Ok(out)
    }

    fn placements(&self, gpu: PciAddress, profile_id: u32) -> Result<Vec<MigPlacement>, MigError> {
        let dev = self.device(gpu)?;
        Ok(self
            .lib
            .gi_placements(dev, &gpu.to_string(), profile_id)?
            .into_iter()
            .map(|(start, size)| MigPlacement { start, size })
            .collect())
    }

    fn instances(&self, gpu: PciAddress) -> Result<Vec<MigInstance>, MigError> {
        if self.mig_mode(gpu)? != Some(true) {
            return Ok(Vec::new());
        }
        let dev = self.device(gpu)?;
        let name = gpu.to_string();
        let mut out = Vec::new();
        for (gi_id, ci_id, uuid) in self.mig_devices(dev, &name)? {
            let gi = self.lib.gi_by_id(dev, &name, gi_id)?;
            let (_, profile_id, (start, size)) = self.lib.gi_info(gi, &name)?;
            out.push(MigInstance {
                profile_id,
                placement: MigPlacement { start, size },
                gpu_instance_id: gi_id,
                compute_instance_id: ci_id,
                uuid,
            });
        }
        // A GPU instance without a compute instance holds its slices but is no MIG
        // device (a create that died half-way, or an operator's): said, not hidden.
        for p in self.profiles(gpu)? {
            for gi in self
                .lib
                .gpu_instances(dev, &name, p.id, p.placements.len() as u32)?
            {
                let (gi_id, _, (start, size)) = self.lib.gi_info(gi, &name)?;
                if !out.iter().any(|i| i.gpu_instance_id == gi_id) {
                    tracing::warn!(gpu = %name, gpu_instance = gi_id, profile = %p.name, start, size,
                        "a GPU instance without a compute instance holds memory slices");
                }
            }
        }
        out.sort_by_key(|i| (i.placement.start, i.gpu_instance_id, i.compute_instance_id));
        Ok(out)
    }

    fn create(
        &self,
        gpu: PciAddress,
        profile_id: u32,
        placement: MigPlacement,
    ) -> Result<MigInstance, MigError> {
        let dev = self.device(gpu)?;
        let name = gpu.to_string();
        let at = (placement.start, placement.size);
        let gi = self.lib.create_gi(dev, &name, profile_id, at)?;
        let made = self.lib.gi_info(gi, &name).and_then(|(gi_id, _, at)| {
            let (ci_id, uuid) = self.fill(dev, &name, gi, gi_id)?;
            Ok(MigInstance {
                profile_id,
                placement: MigPlacement {
                    start: at.0,
                    size: at.1,
                },
                gpu_instance_id: gi_id,
                compute_instance_id: ci_id,
                uuid,
            })
        });
        if made.is_err() {
            if let Err(e) = self.lib.destroy_gi(gi, &name) {
                tracing::warn!(gpu = %name, profile_id, "rolling back a GPU instance failed: {e}");
            }
        }
        made
    }

    fn destroy(
        &self,
        gpu: PciAddress,
        gpu_instance_id: u32,
        compute_instance_id: u32,
    ) -> Result<(), MigError> {
        let dev = self.device(gpu)?;
        let name = gpu.to_string();
        let none = || MigError::NoInstance {
            gpu,
            gpu_instance: gpu_instance_id,
            compute_instance: compute_instance_id,
        };
        let gi = self
            .lib
            .gi_by_id(dev, &name, gpu_instance_id)
            .map_err(|e| if absent(&e) { none() } else { e })?;
        let ci = self
            .lib
            .ci_by_id(gi, &name, compute_instance_id)
            .map_err(|e| if absent(&e) { none() } else { e })?;
        self.lib.destroy_ci(ci, &name)?;
        self.lib.destroy_gi(gi, &name)
    }
}
