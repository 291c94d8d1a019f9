//! GPU partitions on the agent's side (issue 45): what a GPU can be split into, read
//! for the report ([`read`], vGPU types in [`vgpu`]), and the partitions the agent
//! makes and unmakes when the server hands them out ([`Partitions`]).
//!
//! ```text
//! discovery: nvidia driver ─▶ read(&dyn Mig) + vgpu::vgpu_types(sysfs) ─▶ Device.partitions
//! hand-out:  bind / DRA prepare ─▶ Partitions::create(gpu, profile, placement, holder)
//!                                     │  Mig::create: GI at the placement + one CI
//!                                     ▼  partitions.json (state_dir) + boot id
//!            MigInstance { uuid: "MIG-…" } ─▶ attach handle / CDI device
//! release:   Partitions::release(uuid, rule) ─▶ Mig::destroy, then the cleaning rule
//! start-up:  Partitions::after_boot(held) ─▶ kept | re-created (new UUID) | lost
//! vGPU:      Partitions::create_mdev / remove_mdev (create_mdev_at_bind)
//! ```
//!
//! The agent only ever destroys what it created (the checkpoint lists it): a MIG layout
//! an operator made stays untouched, and MIG mode is never changed here (an operator's
//! action; docs/partitions.md).

mod checkpoint;
mod manager;
mod recovery;
pub mod vgpu;

pub use crate::mig::{Code, Mig, MigError};
pub use checkpoint::{Checkpoint, HeldMdev, HeldMig};
pub use manager::{MdevOutcome, Partitions};
pub use recovery::{Held, Lost, Recovery, Recreated};

use crate::pci::PciAddress;
use accel_api::partitions::{Engines, GpuPartitions, VgpuType};
use std::path::PathBuf;

/// Where partitioning keeps its state and how it behaves (the agent's configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSettings {
    /// The NVML library MIG partitions are made through.
    pub nvml_library: PathBuf,
    /// The checkpoint `partitions.json` is kept here.
    pub state_dir: PathBuf,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`).
    pub boot_id_file: PathBuf,
    /// Whether [`Partitions::create_mdev`] creates the mdev, or leaves it to the
    /// consumer (Nova with the 2026.2 cyborg-vgpu-support spec).
    pub create_mdev_at_bind: bool,
}

impl PartitionSettings {
    /// Settings with everything under `dir` (tests).
    pub fn under(dir: &std::path::Path, nvml_library: impl Into<PathBuf>) -> PartitionSettings {
        PartitionSettings {
            nvml_library: nvml_library.into(),
            state_dir: dir.join("state"),
            boot_id_file: dir.join("boot_id"),
            create_mdev_at_bind: true,
        }
    }
}

/// Why a partition could not be made, unmade or accounted for.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PartitionError {
    #[error("creating a MIG instance of profile {profile_id} at memory slices {}..{} on {gpu} failed: {source}", placement.start, placement.start + placement.size)]
    Create {
        gpu: PciAddress,
        profile_id: u32,
        placement: accel_api::partitions::MigPlacement,
        source: MigError,
    },
    #[error("destroying MIG device {uuid} on {gpu} failed: {source}")]
    Destroy {
        gpu: PciAddress,
        uuid: String,
        source: MigError,
    },
    /// The agent did not create it: it leaves it alone.
    #[error(
        "{0} was not created by this agent (partitions.json does not list it); it is left alone"
    )]
    NotOurs(String),
    #[error(transparent)]
    Mig(MigError),
    #[error("the partition checkpoint {path}: {cause}")]
    Checkpoint { path: String, cause: String },
    #[error("mdev {path}: {cause}")]
    Mdev { path: String, cause: String },
    #[error("cleaning {gpu} after destroying {uuid}: {cause}")]
    Cleaning {
        gpu: PciAddress,
        uuid: String,
        cause: String,
    },
}

impl PartitionError {
    /// The NVML code behind the error, when NVML answered one.
    pub fn code(&self) -> Option<Code> {
        match self {
            PartitionError::Create { source, .. }
            | PartitionError::Destroy { source, .. }
            | PartitionError::Mig(source) => source.code(),
            _ => None,
        }
    }
}

/// A GPU's partitioning facts for the report: MIG mode, the memory slices placements
/// count in, the whole GPU's engines (those of the profile with the most slices, as
/// NVIDIA's DRA driver counts them), the profiles with their placements and the MIG
/// devices that exist, plus the vGPU types sysfs offers. `None` for a GPU with neither
/// MIG nor vGPU types (it is handed out whole). While MIG is off NVML describes no
/// profiles, so they and the slices are empty and the totals are the device memory.
pub fn read(
    mig: Option<&dyn Mig>,
    gpu: PciAddress,
    memory_mib: i64,
    vgpu_types: impl FnOnce(&[accel_api::partitions::MigProfile]) -> Vec<VgpuType>,
) -> Result<Option<GpuPartitions>, MigError> {
    let mode = match mig.map(|m| m.mig_mode(gpu)) {
        Some(Ok(mode)) => mode,
        // A GPU NVML does not know (another driver's, or none loaded): no MIG.
        Some(Err(MigError::NoGpu(_))) | None => None,
        Some(Err(e)) => return Err(e),
    };
    let enabled = mode == Some(true);
    let (profiles, instances) = match mig {
        Some(m) if enabled => (m.profiles(gpu)?, m.instances(gpu)?),
        _ => (Vec::new(), Vec::new()),
    };
    let vgpu_types = vgpu_types(&profiles);
    if mode.is_none() && vgpu_types.is_empty() {
        return Ok(None);
    }
    let memory_slices = profiles
        .iter()
        .flat_map(|p| &p.placements)
        .map(|p| p.start + p.size)
        .max()
        .unwrap_or(0);
    let totals = profiles
        .iter()
        .max_by_key(|p| (p.compute_slices, p.engines.multiprocessors))
        .map_or(
            Engines {
                memory_mib,
                ..Engines::default()
            },
            |p| p.engines,
        );
    Ok(Some(GpuPartitions {
        mig_enabled: enabled,
        memory_slices,
        totals,
        profiles,
        instances,
        vgpu_types,
    }))
}

/// The kernel's boot id (empty when it cannot be read: then every start looks like the
/// same boot, and held partitions that are missing are re-created anyway).
pub fn boot_id(path: &std::path::Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(s) => s.trim().to_owned(),
        Err(e) => {
            tracing::warn!(path = %path.display(), "cannot read the boot id: {e}");
            String::new()
        }
    }
}
