//! The narrow seam to MIG: what the agent asks of a GPU's GPU instances (GIs) and
//! compute instances (CIs), whoever answers. The `nvml` module's `Nvml` answers
//! through NVML (the only implementation the agent ships); tests answer through the
//! same NVML code loaded from `accel-fake-nvml`. A leaf: it knows no NVML, so the
//! NVML module, discovery and partitioning all stand on it.
//!
//! A GPU is named by its PCI address; a partition by its profile's hardware id and its
//! placement (the memory slices it takes), which is what the server's ledger hands
//! out; a MIG device that exists by its GI and CI ids and its `MIG-` UUID (ids are
//! reused after a destroy, the UUID is not).

use crate::pci::PciAddress;
use accel_api::partitions::{MigInstance, MigPlacement, MigProfile};

/// An `nvmlReturn_t` that is not `NVML_SUCCESS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code(pub u32);

impl Code {
    pub const INVALID_ARGUMENT: Code = Code(2);
    pub const NOT_SUPPORTED: Code = Code(3);
    pub const NOT_FOUND: Code = Code(6);
    pub const GPU_IS_LOST: Code = Code(15);
    pub const IN_USE: Code = Code(19);
    pub const INSUFFICIENT_RESOURCES: Code = Code(23);

    /// NVML's name without `NVML_ERROR_` (`INSUFFICIENT_RESOURCES`), from nvml.h.
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "UNINITIALIZED",
            2 => "INVALID_ARGUMENT",
            3 => "NOT_SUPPORTED",
            4 => "NO_PERMISSION",
            5 => "ALREADY_INITIALIZED",
            6 => "NOT_FOUND",
            7 => "INSUFFICIENT_SIZE",
            8 => "INSUFFICIENT_POWER",
            9 => "DRIVER_NOT_LOADED",
            10 => "TIMEOUT",
            11 => "IRQ_ISSUE",
            12 => "LIBRARY_NOT_FOUND",
            13 => "FUNCTION_NOT_FOUND",
            14 => "CORRUPTED_INFOROM",
            15 => "GPU_IS_LOST",
            16 => "RESET_REQUIRED",
            17 => "OPERATING_SYSTEM",
            18 => "LIB_RM_VERSION_MISMATCH",
            19 => "IN_USE",
            20 => "MEMORY",
            21 => "NO_DATA",
            22 => "VGPU_ECC_NOT_SUPPORTED",
            23 => "INSUFFICIENT_RESOURCES",
            24 => "FREQ_NOT_SUPPORTED",
            25 => "ARGUMENT_VERSION_MISMATCH",
            26 => "DEPRECATED",
            27 => "NOT_READY",
            28 => "GPU_NOT_FOUND",
            29 => "INVALID_STATE",
            30 => "RESET_TYPE_NOT_SUPPORTED",
            _ => "UNKNOWN",
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NVML_ERROR_{} ({})", self.name(), self.0)
    }
}

/// Why a MIG question or change failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigError {
    /// The library could not be loaded or initialised.
    #[error("NVML ({path}) cannot be used: {cause}")]
    Unavailable { path: String, cause: String },
    /// The library lacks a function the agent calls (an older driver).
    #[error("NVML ({path}) has no {symbol}: the driver is older than the agent needs")]
    Missing { path: String, symbol: &'static str },
    /// An NVML call answered an error.
    #[error("{call} on {gpu}: {code}")]
    Nvml {
        call: &'static str,
        gpu: String,
        code: Code,
    },
    /// NVML does not know a GPU at that address.
    #[error("NVML knows no GPU at {0}")]
    NoGpu(PciAddress),
    /// No compute instance with those ids on the GPU.
    #[error("{gpu} has no MIG device with GPU instance {gpu_instance} and compute instance {compute_instance}")]
    NoInstance {
        gpu: PciAddress,
        gpu_instance: u32,
        compute_instance: u32,
    },
    /// The GPU instance was created but its MIG device could not be found afterwards.
    #[error("{0}")]
    Inconsistent(String),
}

impl MigError {
    /// The NVML code of an [`MigError::Nvml`].
    pub fn code(&self) -> Option<Code> {
        match self {
            MigError::Nvml { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A short cause for metrics and log fields: the NVML code name, or the kind.
    pub fn cause(&self) -> &'static str {
        match self {
            MigError::Unavailable { .. } => "unavailable",
            MigError::Missing { .. } => "missing_symbol",
            MigError::Nvml { code, .. } => code.name(),
            MigError::NoGpu(_) => "no_gpu",
            MigError::NoInstance { .. } => "no_instance",
            MigError::Inconsistent(_) => "inconsistent",
        }
    }

    /// Whether the GPU itself is gone (`NVML_ERROR_GPU_IS_LOST`).
    pub fn gpu_lost(&self) -> bool {
        self.code() == Some(Code::GPU_IS_LOST)
    }
}

/// What the agent asks of a GPU's MIG partitions.
pub trait Mig: Send + Sync {
    /// Whether MIG is on; `None` for a GPU without MIG (`NVML_ERROR_NOT_SUPPORTED`).
    fn mig_mode(&self, gpu: PciAddress) -> Result<Option<bool>, MigError>;

    /// The GPU instance profiles with their placements (empty while MIG is off: NVML
    /// describes profiles only in MIG mode).
    fn profiles(&self, gpu: PciAddress) -> Result<Vec<MigProfile>, MigError>;

    /// Where an instance of a profile may be placed (known whatever the MIG mode).
    fn placements(&self, gpu: PciAddress, profile_id: u32) -> Result<Vec<MigPlacement>, MigError>;

    /// The MIG devices that exist: one per compute instance.
    fn instances(&self, gpu: PciAddress) -> Result<Vec<MigInstance>, MigError>;

    /// Creates a GPU instance of `profile_id` at `placement` and one compute instance
    /// spanning it; answers the MIG device (ids and UUID). Nothing is left behind when
    /// it fails.
    fn create(
        &self,
        gpu: PciAddress,
        profile_id: u32,
        placement: MigPlacement,
    ) -> Result<MigInstance, MigError>;

    /// Destroys the compute instance, then its GPU instance.
    fn destroy(
        &self,
        gpu: PciAddress,
        gpu_instance_id: u32,
        compute_instance_id: u32,
    ) -> Result<(), MigError>;
}
