//! The accelerator (Cyborg) domain: device profiles and accelerator requests (ARQs).
//!
//! Pure rules only: what a valid profile group is, how many ARQs a group asks for, which
//! ARQ state may follow which, what a host's hardware report holds. The server turns wire JSON into these types once, at the
//! edge; the store persists them.

pub mod arq;
pub mod device;
pub mod profile;

pub use arq::ArqState;
pub use device::{
    carries_function, fake_device, id_part, AttachType, DeviceHealth, DeviceStatus, DeviceType,
    ReportedDeployable, ReportedDevice, ReportedHandle, UnknownValue, FUNCTION_TRAIT_PREFIX,
};
pub use profile::{DeviceProfile, Group, ProfileError};
