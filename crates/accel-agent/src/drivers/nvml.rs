//! NVML, opened at run time: `libnvidia-ml.so.1` is part of NVIDIA's driver, not of
//! this build, so a host without it (or without NVIDIA GPUs) simply has no NVML and the
//! GPU driver uses sysfs alone.
//!
//! This is the crate's only unsafe code: calls through C function pointers resolved by
//! `libloading`, each with the argument types of NVML's public header (`nvml.h`):
//! `nvmlReturn_t` is a C enum (0 = success), `nvmlDevice_t` an opaque pointer, strings
//! NUL-terminated buffers the caller owns.
#![allow(unsafe_code)]

use crate::pci::PciAddress;
use libloading::Library;
use std::ffi::{c_char, c_uint, c_void, CStr, CString};

type Ret = c_uint;
type Device = *mut c_void;

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

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
    lib: Library,
}

impl Nvml {
    /// `None` when the library is absent or `nvmlInit_v2` fails (no driver loaded).
    pub fn open() -> Option<Nvml> {
        // SAFETY: loading NVML runs its initialisers, which only register the library.
        let lib = unsafe { Library::new("libnvidia-ml.so.1") }.ok()?;
        // SAFETY: nvmlInit_v2 takes no arguments and returns nvmlReturn_t.
        let rc = unsafe {
            let init = lib
                .get::<unsafe extern "C" fn() -> Ret>(b"nvmlInit_v2\0")
                .ok()?;
            init()
        };
        if rc != 0 {
            tracing::info!(rc, "NVML present but nvmlInit_v2 failed; using sysfs only");
            return None;
        }
        Some(Nvml { lib })
    }

    /// The GPU at `address`, when NVML knows it.
    pub fn info(&self, address: &PciAddress) -> Option<GpuInfo> {
        let bus_id = CString::new(address.to_string()).ok()?;
        // SAFETY: every call below passes the types nvml.h declares: a NUL-terminated
        // bus id, out-pointers to live locals, and a buffer with its length.
        unsafe {
            let by_bus = self
                .lib
                .get::<unsafe extern "C" fn(*const c_char, *mut Device) -> Ret>(
                    b"nvmlDeviceGetHandleByPciBusId_v2\0",
                )
                .ok()?;
            let mut dev: Device = std::ptr::null_mut();
            if by_bus(bus_id.as_ptr(), &mut dev) != 0 {
                return None;
            }
            let get_name = self
                .lib
                .get::<unsafe extern "C" fn(Device, *mut c_char, c_uint) -> Ret>(
                    b"nvmlDeviceGetName\0",
                )
                .ok()?;
            let mut buf = [0 as c_char; 96];
            let name = if get_name(dev, buf.as_mut_ptr(), buf.len() as c_uint) == 0 {
                CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
            } else {
                String::new()
            };
            let get_mem = self
                .lib
                .get::<unsafe extern "C" fn(Device, *mut Memory) -> Ret>(
                    b"nvmlDeviceGetMemoryInfo\0",
                )
                .ok()?;
            let mut mem = Memory::default();
            let memory_mib = if get_mem(dev, &mut mem) == 0 {
                (mem.total / (1024 * 1024)) as i64
            } else {
                0
            };
            let (mut mig_enabled, mut mig_instances) = (false, 0);
            if let Ok(get_mig) =
                self.lib
                    .get::<unsafe extern "C" fn(Device, *mut c_uint, *mut c_uint) -> Ret>(
                        b"nvmlDeviceGetMigMode\0",
                    )
            {
                let (mut current, mut pending) = (0, 0);
                // NOT_SUPPORTED on GPUs without MIG: then it stays off.
                if get_mig(dev, &mut current, &mut pending) == 0 && current == 1 {
                    mig_enabled = true;
                    if let (Ok(max), Ok(by_index)) = (
                        self.lib
                            .get::<unsafe extern "C" fn(Device, *mut c_uint) -> Ret>(
                                b"nvmlDeviceGetMaxMigDeviceCount\0",
                            ),
                        self.lib
                            .get::<unsafe extern "C" fn(Device, c_uint, *mut Device) -> Ret>(
                                b"nvmlDeviceGetMigDeviceHandleByIndex\0",
                            ),
                    ) {
                        let mut n = 0;
                        if max(dev, &mut n) == 0 {
                            for i in 0..n {
                                let mut mig: Device = std::ptr::null_mut();
                                if by_index(dev, i, &mut mig) == 0 {
                                    mig_instances += 1;
                                }
                            }
                        }
                    }
                }
            }
            Some(GpuInfo {
                name,
                memory_mib,
                mig_enabled,
                mig_instances,
            })
        }
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: nvmlShutdown takes no arguments; NVML was initialised in open().
        unsafe {
            if let Ok(shutdown) = self
                .lib
                .get::<unsafe extern "C" fn() -> Ret>(b"nvmlShutdown\0")
            {
                shutdown();
            }
        }
    }
}
