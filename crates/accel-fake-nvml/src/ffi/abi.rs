//! The structures of NVIDIA's public `nvml.h` (NVML API 13) the fake reads and
//! writes, with the versions (`NVML_STRUCT_VERSION`) a caller sets in them. The agent
//! declares its own copies (crates/accel-agent/src/nvml/sys.rs): both are checked
//! against the header's sizes and offsets, not against each other.

use std::ffi::{c_char, c_uint, c_void};

pub type H = *mut c_void;

#[repr(C)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

#[repr(C)]
pub struct Memory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Placement {
    pub start: c_uint,
    pub size: c_uint,
}

/// `nvmlGpuInstanceProfileInfo_v2_t`.
#[repr(C)]
pub struct GiProfileV2 {
    pub version: c_uint,
    pub id: c_uint,
    pub is_p2p_supported: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub copy_engine_count: c_uint,
    pub decoder_count: c_uint,
    pub encoder_count: c_uint,
    pub jpeg_count: c_uint,
    pub ofa_count: c_uint,
    pub memory_size_mb: u64,
    pub name: [c_char; 96],
}

/// `nvmlGpuInstanceProfileInfo_v3_t` (no P2P field; capabilities at the end).
#[repr(C)]
pub struct GiProfileV3 {
    pub version: c_uint,
    pub id: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub copy_engine_count: c_uint,
    pub decoder_count: c_uint,
    pub encoder_count: c_uint,
    pub jpeg_count: c_uint,
    pub ofa_count: c_uint,
    pub memory_size_mb: u64,
    pub name: [c_char; 96],
    pub capabilities: c_uint,
}

/// `nvmlGpuInstanceInfo_t`.
#[repr(C)]
pub struct GiInfo {
    pub device: H,
    pub id: c_uint,
    pub profile_id: c_uint,
    pub placement: Placement,
}

/// `nvmlComputeInstanceProfileInfo_v2_t` (v3 adds `capabilities`).
#[repr(C)]
pub struct CiProfileV2 {
    pub version: c_uint,
    pub id: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub shared_copy_engine_count: c_uint,
    pub shared_decoder_count: c_uint,
    pub shared_encoder_count: c_uint,
    pub shared_jpeg_count: c_uint,
    pub shared_ofa_count: c_uint,
    pub name: [c_char; 96],
}

#[repr(C)]
pub struct CiProfileV3 {
    pub v2: CiProfileV2,
    pub capabilities: c_uint,
}

/// `nvmlComputeInstanceInfo_t`.
#[repr(C)]
pub struct CiInfo {
    pub device: H,
    pub gpu_instance: H,
    pub id: c_uint,
    pub profile_id: c_uint,
    pub placement: Placement,
}

/// `NVML_STRUCT_VERSION(data, ver)`: the size with the version in the top byte.
pub const fn version<T>(v: u32) -> u32 {
    std::mem::size_of::<T>() as u32 | (v << 24)
}

pub const GI_PROFILE_V2: u32 = version::<GiProfileV2>(2);
pub const GI_PROFILE_V3: u32 = version::<GiProfileV3>(3);
pub const CI_PROFILE_V2: u32 = version::<CiProfileV2>(2);
pub const CI_PROFILE_V3: u32 = version::<CiProfileV3>(3);

#[cfg(test)]
mod tests {
    use super::*;

    /// The layouts of nvml.h (x86_64 and aarch64 Linux): sizes and field offsets.
    #[test]
    fn structures_have_nvml_h_layouts() {
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<PciInfo>(), 68);
        assert_eq!(offset_of!(PciInfo, bus_id), 36);
        assert_eq!(size_of::<Memory>(), 24);
        assert_eq!(size_of::<GiProfileV2>(), 152);
        assert_eq!(offset_of!(GiProfileV2, memory_size_mb), 48);
        assert_eq!(offset_of!(GiProfileV2, name), 56);
        assert_eq!(size_of::<GiProfileV3>(), 152);
        assert_eq!(offset_of!(GiProfileV3, memory_size_mb), 40);
        assert_eq!(offset_of!(GiProfileV3, capabilities), 144);
        assert_eq!(size_of::<GiInfo>(), 24);
        assert_eq!(size_of::<CiProfileV2>(), 136);
        assert_eq!(size_of::<CiProfileV3>(), 140);
        assert_eq!(size_of::<CiInfo>(), 32);
        assert_eq!(GI_PROFILE_V2, 152 | (2 << 24));
        assert_eq!(CI_PROFILE_V2, 136 | (2 << 24));
    }
}
