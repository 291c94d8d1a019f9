//! NVML's C functions, resolved at run time from the library the agent is told to use
//! (`nvml_library`, `libnvidia-ml.so.1` by default), and safe wrappers around each.
//!
//! This is the crate's only unsafe code: calls through C function pointers resolved by
//! `libloading`, with the argument and structure layouts of NVIDIA's public `nvml.h`
//! (NVML API 13): `nvmlReturn_t` is a C enum (0 = success); `nvmlDevice_t`,
//! `nvmlGpuInstance_t` and `nvmlComputeInstance_t` are opaque pointers (nvml.h declares
//! them as pointers, or as one-pointer structures, which the C ABI passes alike);
//! strings are NUL-terminated buffers the caller owns; versioned structures start with
//! `NVML_STRUCT_VERSION(name, v)` = their size | v << 24. A symbol the library lacks is
//! `None` until called, then [`MigError::Missing`]: an older driver still answers what
//! it has.
#![allow(unsafe_code)]

use crate::mig::{Code, MigError};
use libloading::Library;
use std::ffi::{c_char, c_uint, c_void, CString};

type Ret = c_uint;
type Ptr = *mut c_void;

/// A GPU or MIG device handle (`nvmlDevice_t`).
#[derive(Debug, Clone, Copy)]
pub struct Dev(Ptr);
/// A GPU instance handle (`nvmlGpuInstance_t`).
#[derive(Debug, Clone, Copy)]
pub struct Gi(Ptr);
/// A compute instance handle (`nvmlComputeInstance_t`).
#[derive(Debug, Clone, Copy)]
pub struct Ci(Ptr);

#[repr(C)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

#[repr(C)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Placement {
    start: c_uint,
    size: c_uint,
}

/// `nvmlGpuInstanceProfileInfo_v2_t`.
#[repr(C)]
struct GiProfileV2 {
    version: c_uint,
    id: c_uint,
    is_p2p_supported: c_uint,
    slice_count: c_uint,
    instance_count: c_uint,
    multiprocessor_count: c_uint,
    copy_engine_count: c_uint,
    decoder_count: c_uint,
    encoder_count: c_uint,
    jpeg_count: c_uint,
    ofa_count: c_uint,
    memory_size_mb: u64,
    name: [c_char; 96],
}

/// `nvmlGpuInstanceInfo_t`.
#[repr(C)]
struct GiInfo {
    device: Ptr,
    id: c_uint,
    profile_id: c_uint,
    placement: Placement,
}

/// `nvmlComputeInstanceProfileInfo_v2_t`.
#[repr(C)]
struct CiProfileV2 {
    version: c_uint,
    id: c_uint,
    slice_count: c_uint,
    instance_count: c_uint,
    multiprocessor_count: c_uint,
    shared_copy_engine_count: c_uint,
    shared_decoder_count: c_uint,
    shared_encoder_count: c_uint,
    shared_jpeg_count: c_uint,
    shared_ofa_count: c_uint,
    name: [c_char; 96],
}

/// `nvmlComputeInstanceInfo_t`.
#[repr(C)]
struct CiInfo {
    device: Ptr,
    gpu_instance: Ptr,
    id: c_uint,
    profile_id: c_uint,
    placement: Placement,
}

const GI_PROFILE_V2: c_uint = std::mem::size_of::<GiProfileV2>() as c_uint | (2 << 24);
const CI_PROFILE_V2: c_uint = std::mem::size_of::<CiProfileV2>() as c_uint | (2 << 24);

/// `NVML_GPU_INSTANCE_PROFILE_COUNT` and `NVML_COMPUTE_INSTANCE_PROFILE_COUNT`.
pub const GI_PROFILE_COUNT: u32 = 0x12;
pub const CI_PROFILE_COUNT: u32 = 0x9;

/// One GPU instance profile as NVML describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiProfile {
    pub id: u32,
    pub slices: u32,
    pub instances: u32,
    pub multiprocessors: u32,
    pub copy_engines: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub jpeg: u32,
    pub ofa: u32,
    pub memory_mib: u64,
    /// `MIG 1g.10gb`.
    pub name: String,
}

/// One compute instance profile of a GPU instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CiProfile {
    pub id: u32,
    pub slices: u32,
}

/// Declares the functions the agent calls, each resolved once when the library is
/// opened (`None` when the library lacks it).
macro_rules! functions {
    ($($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        #[allow(non_snake_case)]
        struct Fns {
            $($name: Option<unsafe extern "C" fn($($arg),*) $(-> $ret)?>,)*
        }

        impl Fns {
            fn resolve(lib: &Library) -> Fns {
                Fns {
                    // SAFETY: each symbol has the signature nvml.h declares for it
                    // (the types above); the pointer stays valid while `lib` lives,
                    // and `Lib` keeps both together.
                    $($name: unsafe {
                        lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(
                            concat!(stringify!($name), "\0").as_bytes(),
                        )
                        .ok()
                        .map(|s| *s)
                    },)*
                }
            }
        }
    };
}

functions! {
    nvmlInit_v2: fn() -> Ret;
    nvmlShutdown: fn() -> Ret;
    nvmlDeviceGetHandleByPciBusId_v2: fn(*const c_char, *mut Ptr) -> Ret;
    nvmlDeviceGetName: fn(Ptr, *mut c_char, c_uint) -> Ret;
    nvmlDeviceGetUUID: fn(Ptr, *mut c_char, c_uint) -> Ret;
    nvmlDeviceGetMemoryInfo: fn(Ptr, *mut Memory) -> Ret;
    nvmlDeviceGetPciInfo_v3: fn(Ptr, *mut PciInfo) -> Ret;
    nvmlDeviceGetMigMode: fn(Ptr, *mut c_uint, *mut c_uint) -> Ret;
    nvmlDeviceGetGpuInstanceProfileInfoV: fn(Ptr, c_uint, *mut GiProfileV2) -> Ret;
    nvmlDeviceGetGpuInstancePossiblePlacements_v2: fn(Ptr, c_uint, *mut Placement, *mut c_uint) -> Ret;
    nvmlDeviceCreateGpuInstanceWithPlacement: fn(Ptr, c_uint, *const Placement, *mut Ptr) -> Ret;
    nvmlGpuInstanceDestroy: fn(Ptr) -> Ret;
    nvmlDeviceGetGpuInstances: fn(Ptr, c_uint, *mut Ptr, *mut c_uint) -> Ret;
    nvmlDeviceGetGpuInstanceById: fn(Ptr, c_uint, *mut Ptr) -> Ret;
    nvmlGpuInstanceGetInfo: fn(Ptr, *mut GiInfo) -> Ret;
    nvmlGpuInstanceGetComputeInstanceProfileInfoV: fn(Ptr, c_uint, c_uint, *mut CiProfileV2) -> Ret;
    nvmlGpuInstanceCreateComputeInstance: fn(Ptr, c_uint, *mut Ptr) -> Ret;
    nvmlGpuInstanceGetComputeInstanceById: fn(Ptr, c_uint, *mut Ptr) -> Ret;
    nvmlComputeInstanceDestroy: fn(Ptr) -> Ret;
    nvmlComputeInstanceGetInfo_v2: fn(Ptr, *mut CiInfo) -> Ret;
    nvmlDeviceGetMaxMigDeviceCount: fn(Ptr, *mut c_uint) -> Ret;
    nvmlDeviceGetMigDeviceHandleByIndex: fn(Ptr, c_uint, *mut Ptr) -> Ret;
    nvmlDeviceGetGpuInstanceId: fn(Ptr, *mut c_uint) -> Ret;
    nvmlDeviceGetComputeInstanceId: fn(Ptr, *mut c_uint) -> Ret;
}

/// An opened library and its resolved functions (not yet initialised).
pub struct Lib {
    fns: Fns,
    path: String,
    // Last: the function pointers above are only valid while the library is loaded.
    _lib: Library,
}

/// Text of a NUL-terminated buffer (up to its end when NVML wrote no NUL).
fn text(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .map(|c| *c as u8)
        .take_while(|b| *b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Lib {
    /// Loads the library at `path` (a bare name is looked up as `dlopen` does).
    pub fn open(path: &str) -> Result<Lib, MigError> {
        // SAFETY: loading NVML runs its initialisers, which only register the library.
        let lib = unsafe { Library::new(path) }.map_err(|e| MigError::Unavailable {
            path: path.to_owned(),
            cause: e.to_string(),
        })?;
        Ok(Lib {
            fns: Fns::resolve(&lib),
            path: path.to_owned(),
            _lib: lib,
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    fn missing(&self, symbol: &'static str) -> MigError {
        MigError::Missing {
            path: self.path.clone(),
            symbol,
        }
    }

    fn check(call: &'static str, gpu: &str, rc: Ret) -> Result<(), MigError> {
        if rc == 0 {
            Ok(())
        } else {
            Err(MigError::Nvml {
                call,
                gpu: gpu.to_owned(),
                code: Code(rc),
            })
        }
    }

    pub fn init(&self) -> Result<(), MigError> {
        let f = self
            .fns
            .nvmlInit_v2
            .ok_or_else(|| self.missing("nvmlInit_v2"))?;
        // SAFETY: nvmlInit_v2 takes no arguments.
        Lib::check("nvmlInit_v2", "-", unsafe { f() })
    }

    pub fn shutdown(&self) {
        if let Some(f) = self.fns.nvmlShutdown {
            // SAFETY: nvmlShutdown takes no arguments; called once per init.
            unsafe { f() };
        }
    }

    /// The GPU at the bus id (`0000:3b:00.0`).
    pub fn by_bus(&self, bus: &str) -> Result<Dev, MigError> {
        let f = self
            .fns
            .nvmlDeviceGetHandleByPciBusId_v2
            .ok_or_else(|| self.missing("nvmlDeviceGetHandleByPciBusId_v2"))?;
        let id =
            CString::new(bus).map_err(|_| MigError::Inconsistent(format!("bus id {bus:?}")))?;
        let mut dev: Ptr = std::ptr::null_mut();
        // SAFETY: a NUL-terminated bus id and an out-pointer to a live local.
        let rc = unsafe { f(id.as_ptr(), &mut dev) };
        Lib::check("nvmlDeviceGetHandleByPciBusId_v2", bus, rc)?;
        Ok(Dev(dev))
    }

    /// A string answered into a caller buffer (`nvmlDeviceGetName`, `...GetUUID`).
    fn string(
        &self,
        call: &'static str,
        f: Option<unsafe extern "C" fn(Ptr, *mut c_char, c_uint) -> Ret>,
        dev: Dev,
        gpu: &str,
    ) -> Result<String, MigError> {
        let f = f.ok_or_else(|| self.missing(call))?;
        let mut buf = [0 as c_char; 96];
        // SAFETY: a handle NVML gave, and a buffer of the length passed (96 is
        // NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE).
        let rc = unsafe { f(dev.0, buf.as_mut_ptr(), buf.len() as c_uint) };
        Lib::check(call, gpu, rc)?;
        Ok(text(&buf))
    }

    pub fn name(&self, dev: Dev, gpu: &str) -> Result<String, MigError> {
        self.string("nvmlDeviceGetName", self.fns.nvmlDeviceGetName, dev, gpu)
    }

    pub fn uuid(&self, dev: Dev, gpu: &str) -> Result<String, MigError> {
        self.string("nvmlDeviceGetUUID", self.fns.nvmlDeviceGetUUID, dev, gpu)
    }

    /// Total device memory in bytes.
    pub fn memory(&self, dev: Dev, gpu: &str) -> Result<u64, MigError> {
        let call = "nvmlDeviceGetMemoryInfo";
        let f = self
            .fns
            .nvmlDeviceGetMemoryInfo
            .ok_or_else(|| self.missing(call))?;
        let mut m = Memory {
            total: 0,
            free: 0,
            used: 0,
        };
        // SAFETY: a handle NVML gave and an out-pointer to a live nvmlMemory_t.
        Lib::check(call, gpu, unsafe { f(dev.0, &mut m) })?;
        Ok(m.total)
    }

    /// The PCI device id (`0x2330`) of a GPU.
    pub fn pci_device_id(&self, dev: Dev, gpu: &str) -> Result<u16, MigError> {
        let call = "nvmlDeviceGetPciInfo_v3";
        let f = self
            .fns
            .nvmlDeviceGetPciInfo_v3
            .ok_or_else(|| self.missing(call))?;
        let mut p = PciInfo {
            bus_id_legacy: [0; 16],
            domain: 0,
            bus: 0,
            device: 0,
            pci_device_id: 0,
            pci_sub_system_id: 0,
            bus_id: [0; 32],
        };
        // SAFETY: a handle NVML gave and an out-pointer to a live nvmlPciInfo_t.
        Lib::check(call, gpu, unsafe { f(dev.0, &mut p) })?;
        Ok((p.pci_device_id >> 16) as u16)
    }

    /// `(current, pending)` MIG mode.
    pub fn mig_mode(&self, dev: Dev, gpu: &str) -> Result<(u32, u32), MigError> {
        let call = "nvmlDeviceGetMigMode";
        let f = self
            .fns
            .nvmlDeviceGetMigMode
            .ok_or_else(|| self.missing(call))?;
        let (mut current, mut pending) = (0, 0);
        // SAFETY: a handle NVML gave and out-pointers to live locals.
        Lib::check(call, gpu, unsafe { f(dev.0, &mut current, &mut pending) })?;
        Ok((current, pending))
    }

    /// The GPU instance profile NVML enumerates at `index` (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub fn gi_profile(&self, dev: Dev, gpu: &str, index: u32) -> Result<GiProfile, MigError> {
        let call = "nvmlDeviceGetGpuInstanceProfileInfoV";
        let f = self
            .fns
            .nvmlDeviceGetGpuInstanceProfileInfoV
            .ok_or_else(|| self.missing(call))?;
        let mut info = GiProfileV2 {
            version: GI_PROFILE_V2,
            id: 0,
            is_p2p_supported: 0,
            slice_count: 0,
            instance_count: 0,
            multiprocessor_count: 0,
            copy_engine_count: 0,
            decoder_count: 0,
            encoder_count: 0,
            jpeg_count: 0,
            ofa_count: 0,
            memory_size_mb: 0,
            name: [0; 96],
        };
        // SAFETY: a handle NVML gave and a live v2 structure with its version set.
        Lib::check(call, gpu, unsafe { f(dev.0, index, &mut info) })?;
        Ok(GiProfile {
            id: info.id,
            slices: info.slice_count,
            instances: info.instance_count,
            multiprocessors: info.multiprocessor_count,
            copy_engines: info.copy_engine_count,
            decoders: info.decoder_count,
            encoders: info.encoder_count,
            jpeg: info.jpeg_count,
            ofa: info.ofa_count,
            memory_mib: info.memory_size_mb,
            name: text(&info.name),
        })
    }

    /// A profile's possible placements `(start, size)`.
    pub fn gi_placements(
        &self,
        dev: Dev,
        gpu: &str,
        profile_id: u32,
    ) -> Result<Vec<(u32, u32)>, MigError> {
        let call = "nvmlDeviceGetGpuInstancePossiblePlacements_v2";
        let f = self
            .fns
            .nvmlDeviceGetGpuInstancePossiblePlacements_v2
            .ok_or_else(|| self.missing(call))?;
        let mut count: c_uint = 0;
        // SAFETY: a null array asks only for the count (nvml.h).
        Lib::check(call, gpu, unsafe {
            f(dev.0, profile_id, std::ptr::null_mut(), &mut count)
        })?;
        let mut out = vec![Placement::default(); count as usize];
        // SAFETY: an array of `count` placements, as the first call asked for.
        Lib::check(call, gpu, unsafe {
            f(dev.0, profile_id, out.as_mut_ptr(), &mut count)
        })?;
        out.truncate(count as usize);
        Ok(out.iter().map(|p| (p.start, p.size)).collect())
    }

    pub fn create_gi(
        &self,
        dev: Dev,
        gpu: &str,
        profile_id: u32,
        at: (u32, u32),
    ) -> Result<Gi, MigError> {
        let call = "nvmlDeviceCreateGpuInstanceWithPlacement";
        let f = self
            .fns
            .nvmlDeviceCreateGpuInstanceWithPlacement
            .ok_or_else(|| self.missing(call))?;
        let placement = Placement {
            start: at.0,
            size: at.1,
        };
        let mut gi: Ptr = std::ptr::null_mut();
        // SAFETY: a handle NVML gave, a live placement and an out-pointer.
        Lib::check(call, gpu, unsafe {
            f(dev.0, profile_id, &placement, &mut gi)
        })?;
        Ok(Gi(gi))
    }

    pub fn destroy_gi(&self, gi: Gi, gpu: &str) -> Result<(), MigError> {
        let call = "nvmlGpuInstanceDestroy";
        let f = self
            .fns
            .nvmlGpuInstanceDestroy
            .ok_or_else(|| self.missing(call))?;
        // SAFETY: a GPU instance handle NVML gave.
        Lib::check(call, gpu, unsafe { f(gi.0) })
    }

    /// The GPU instances of a profile; `capacity` is the profile's instance count.
    pub fn gpu_instances(
        &self,
        dev: Dev,
        gpu: &str,
        profile_id: u32,
        capacity: u32,
    ) -> Result<Vec<Gi>, MigError> {
        let call = "nvmlDeviceGetGpuInstances";
        let f = self
            .fns
            .nvmlDeviceGetGpuInstances
            .ok_or_else(|| self.missing(call))?;
        let mut out: Vec<Ptr> = vec![std::ptr::null_mut(); capacity.max(1) as usize];
        let mut count: c_uint = 0;
        // SAFETY: an array as large as the profile's instance count (nvml.h's rule).
        Lib::check(call, gpu, unsafe {
            f(dev.0, profile_id, out.as_mut_ptr(), &mut count)
        })?;
        out.truncate((count as usize).min(out.len()));
        Ok(out.into_iter().map(Gi).collect())
    }

    pub fn gi_by_id(&self, dev: Dev, gpu: &str, id: u32) -> Result<Gi, MigError> {
        let call = "nvmlDeviceGetGpuInstanceById";
        let f = self
            .fns
            .nvmlDeviceGetGpuInstanceById
            .ok_or_else(|| self.missing(call))?;
        let mut gi: Ptr = std::ptr::null_mut();
        // SAFETY: a handle NVML gave and an out-pointer to a live local.
        Lib::check(call, gpu, unsafe { f(dev.0, id, &mut gi) })?;
        Ok(Gi(gi))
    }

    /// `(id, profile id, placement)` of a GPU instance.
    pub fn gi_info(&self, gi: Gi, gpu: &str) -> Result<(u32, u32, (u32, u32)), MigError> {
        let call = "nvmlGpuInstanceGetInfo";
        let f = self
            .fns
            .nvmlGpuInstanceGetInfo
            .ok_or_else(|| self.missing(call))?;
        let mut info = GiInfo {
            device: std::ptr::null_mut(),
            id: 0,
            profile_id: 0,
            placement: Placement::default(),
        };
        // SAFETY: a GPU instance handle NVML gave and a live nvmlGpuInstanceInfo_t.
        Lib::check(call, gpu, unsafe { f(gi.0, &mut info) })?;
        Ok((
            info.id,
            info.profile_id,
            (info.placement.start, info.placement.size),
        ))
    }

    /// The compute instance profile at `index` of a GPU instance (shared engines).
    pub fn ci_profile(&self, gi: Gi, gpu: &str, index: u32) -> Result<CiProfile, MigError> {
        let call = "nvmlGpuInstanceGetComputeInstanceProfileInfoV";
        let f = self
            .fns
            .nvmlGpuInstanceGetComputeInstanceProfileInfoV
            .ok_or_else(|| self.missing(call))?;
        let mut info = CiProfileV2 {
            version: CI_PROFILE_V2,
            id: 0,
            slice_count: 0,
            instance_count: 0,
            multiprocessor_count: 0,
            shared_copy_engine_count: 0,
            shared_decoder_count: 0,
            shared_encoder_count: 0,
            shared_jpeg_count: 0,
            shared_ofa_count: 0,
            name: [0; 96],
        };
        // SAFETY: a GPU instance handle, the shared engine profile (0), and a live v2
        // structure with its version set.
        Lib::check(call, gpu, unsafe { f(gi.0, index, 0, &mut info) })?;
        Ok(CiProfile {
            id: info.id,
            slices: info.slice_count,
        })
    }

    pub fn create_ci(&self, gi: Gi, gpu: &str, profile_id: u32) -> Result<Ci, MigError> {
        let call = "nvmlGpuInstanceCreateComputeInstance";
        let f = self
            .fns
            .nvmlGpuInstanceCreateComputeInstance
            .ok_or_else(|| self.missing(call))?;
        let mut ci: Ptr = std::ptr::null_mut();
        // SAFETY: a GPU instance handle NVML gave and an out-pointer to a live local.
        Lib::check(call, gpu, unsafe { f(gi.0, profile_id, &mut ci) })?;
        Ok(Ci(ci))
    }

    pub fn ci_by_id(&self, gi: Gi, gpu: &str, id: u32) -> Result<Ci, MigError> {
        let call = "nvmlGpuInstanceGetComputeInstanceById";
        let f = self
            .fns
            .nvmlGpuInstanceGetComputeInstanceById
            .ok_or_else(|| self.missing(call))?;
        let mut ci: Ptr = std::ptr::null_mut();
        // SAFETY: a GPU instance handle NVML gave and an out-pointer to a live local.
        Lib::check(call, gpu, unsafe { f(gi.0, id, &mut ci) })?;
        Ok(Ci(ci))
    }

    /// The id of a compute instance.
    pub fn ci_id(&self, ci: Ci, gpu: &str) -> Result<u32, MigError> {
        let call = "nvmlComputeInstanceGetInfo_v2";
        let f = self
            .fns
            .nvmlComputeInstanceGetInfo_v2
            .ok_or_else(|| self.missing(call))?;
        let mut info = CiInfo {
            device: std::ptr::null_mut(),
            gpu_instance: std::ptr::null_mut(),
            id: 0,
            profile_id: 0,
            placement: Placement::default(),
        };
        // SAFETY: a compute instance handle NVML gave and a live nvmlComputeInstanceInfo_t.
        Lib::check(call, gpu, unsafe { f(ci.0, &mut info) })?;
        Ok(info.id)
    }

    pub fn destroy_ci(&self, ci: Ci, gpu: &str) -> Result<(), MigError> {
        let call = "nvmlComputeInstanceDestroy";
        let f = self
            .fns
            .nvmlComputeInstanceDestroy
            .ok_or_else(|| self.missing(call))?;
        // SAFETY: a compute instance handle NVML gave.
        Lib::check(call, gpu, unsafe { f(ci.0) })
    }

    pub fn max_mig_devices(&self, dev: Dev, gpu: &str) -> Result<u32, MigError> {
        let call = "nvmlDeviceGetMaxMigDeviceCount";
        let f = self
            .fns
            .nvmlDeviceGetMaxMigDeviceCount
            .ok_or_else(|| self.missing(call))?;
        let mut n = 0;
        // SAFETY: a handle NVML gave and an out-pointer to a live local.
        Lib::check(call, gpu, unsafe { f(dev.0, &mut n) })?;
        Ok(n)
    }

    /// The MIG device at `index` (`NVML_ERROR_NOT_FOUND` where there is none).
    pub fn mig_device(&self, dev: Dev, gpu: &str, index: u32) -> Result<Dev, MigError> {
        let call = "nvmlDeviceGetMigDeviceHandleByIndex";
        let f = self
            .fns
            .nvmlDeviceGetMigDeviceHandleByIndex
            .ok_or_else(|| self.missing(call))?;
        let mut mig: Ptr = std::ptr::null_mut();
        // SAFETY: a handle NVML gave and an out-pointer to a live local.
        Lib::check(call, gpu, unsafe { f(dev.0, index, &mut mig) })?;
        Ok(Dev(mig))
    }

    /// `(GPU instance id, compute instance id)` of a MIG device.
    pub fn mig_ids(&self, mig: Dev, gpu: &str) -> Result<(u32, u32), MigError> {
        let gi_call = "nvmlDeviceGetGpuInstanceId";
        let ci_call = "nvmlDeviceGetComputeInstanceId";
        let gi_f = self
            .fns
            .nvmlDeviceGetGpuInstanceId
            .ok_or_else(|| self.missing(gi_call))?;
        let ci_f = self
            .fns
            .nvmlDeviceGetComputeInstanceId
            .ok_or_else(|| self.missing(ci_call))?;
        let (mut gi, mut ci) = (0, 0);
        // SAFETY: a MIG device handle NVML gave and out-pointers to live locals.
        Lib::check(gi_call, gpu, unsafe { gi_f(mig.0, &mut gi) })?;
        // SAFETY: as above.
        Lib::check(ci_call, gpu, unsafe { ci_f(mig.0, &mut ci) })?;
        Ok((gi, ci))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layouts of nvml.h on 64-bit Linux: sizes and the offsets that padding decides.
    #[test]
    fn structures_have_nvml_h_layouts() {
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<PciInfo>(), 68);
        assert_eq!(offset_of!(PciInfo, pci_device_id), 28);
        assert_eq!(size_of::<Memory>(), 24);
        assert_eq!(size_of::<GiProfileV2>(), 152);
        assert_eq!(offset_of!(GiProfileV2, memory_size_mb), 48);
        assert_eq!(size_of::<GiInfo>(), 24);
        assert_eq!(offset_of!(GiInfo, placement), 16);
        assert_eq!(size_of::<CiProfileV2>(), 136);
        assert_eq!(size_of::<CiInfo>(), 32);
        assert_eq!(offset_of!(CiInfo, id), 16);
        assert_eq!(GI_PROFILE_V2, 0x0200_0098);
        assert_eq!(CI_PROFILE_V2, 0x0200_0088);
    }

    #[test]
    fn a_missing_library_is_unavailable_with_its_path() {
        let e = Lib::open("/nonexistent/libnvidia-ml.so.1").err().unwrap();
        assert!(
            matches!(&e, MigError::Unavailable { path, .. } if path == "/nonexistent/libnvidia-ml.so.1"),
            "{e}"
        );
    }
}
