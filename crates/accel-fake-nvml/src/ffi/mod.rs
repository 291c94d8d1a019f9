//! The exported C ABI: NVML's functions with the argument and structure layouts of
//! NVIDIA's public `nvml.h` (NVML API 13). Handles (`nvmlDevice_t`, `nvmlGpuInstance_t`,
//! `nvmlComputeInstance_t`) are opaque pointers the caller never dereferences; here
//! they carry [`Handle`]s. Every function takes the library's one lock, checks
//! initialisation, failure injection and lost GPUs, then answers from [`Fake`].
//!
//! Safety contract of every export (the caller's side, as nvml.h states it): pointer
//! arguments are null or point to writable memory of the declared type (arrays of the
//! declared length), strings are NUL-terminated. Null out-pointers are answered with
//! `NVML_ERROR_INVALID_ARGUMENT`; a panic is answered with `NVML_ERROR_UNKNOWN`.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

use crate::code::*;
use crate::config::Config;
use crate::state::{Fake, Handle};
use abi::*;
use std::ffi::{c_char, c_uint, CStr};
use std::sync::Mutex;

mod abi;
mod mig;

type Ret = c_uint;

struct Global {
    refs: u32,
    fake: Option<Fake>,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    refs: 0,
    fake: None,
});

/// Where the configuration is: `$ACCEL_FAKE_NVML_CONFIG`, else
/// `accel-fake-nvml.conf` beside this library (found in `/proc/self/maps`).
fn config_path() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("ACCEL_FAKE_NVML_CONFIG").filter(|p| !p.is_empty()) {
        return Some(p.into());
    }
    let me = config_path as *const () as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let (range, _) = line.split_once(' ')?;
        let (s, e) = range.split_once('-')?;
        let (s, e) = (
            usize::from_str_radix(s, 16).ok()?,
            usize::from_str_radix(e, 16).ok()?,
        );
        if !(s..e).contains(&me) {
            return None;
        }
        let path = std::path::Path::new(&line[line.find('/')?..]);
        Some(path.parent()?.join("accel-fake-nvml.conf"))
    })
}

fn load() -> Result<Fake, String> {
    let path = config_path().ok_or("no configuration: set ACCEL_FAKE_NVML_CONFIG")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let config = Config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Fake::load(&config).map_err(|e| format!("{}: {e}", path.display()))
}

fn global() -> std::sync::MutexGuard<'static, Global> {
    GLOBAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the initialised fake, after failure injection for `call` on the GPU of
/// `handle` (when the call takes one).
fn with(call: &str, handle: Option<H>, f: impl FnOnce(&mut Fake) -> Result<(), u32>) -> Ret {
    let run = std::panic::AssertUnwindSafe(|| {
        let mut g = global();
        let Some(fake) = g.fake.as_mut() else {
            return UNINITIALIZED;
        };
        let gpu = match handle.map(|h| Handle::decode(h as u64)) {
            None => None,
            Some(None) => return INVALID_ARGUMENT,
            Some(Some(h)) if h.gpu() >= fake.gpus.len() => return INVALID_ARGUMENT,
            Some(Some(h)) => Some(h.gpu()),
        };
        if let Err(c) = fake.check(call, gpu) {
            return c;
        }
        match f(fake) {
            Ok(()) => SUCCESS,
            Err(c) => c,
        }
    });
    std::panic::catch_unwind(run).unwrap_or(UNKNOWN)
}

fn h(handle: Handle) -> H {
    handle.encode() as usize as H
}

fn decode(p: H) -> Result<Handle, u32> {
    Handle::decode(p as u64).ok_or(INVALID_ARGUMENT)
}

fn device(p: H) -> Result<usize, u32> {
    match decode(p)? {
        Handle::Device(g) => Ok(g),
        _ => Err(INVALID_ARGUMENT),
    }
}

/// Writes `v` through `p`.
fn put<T>(p: *mut T, v: T) -> Result<(), u32> {
    if p.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller passes a pointer to a writable `T` (nvml.h).
    unsafe { p.write(v) };
    Ok(())
}

/// Copies `s` and its NUL into the caller's buffer of `len` bytes.
fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), u32> {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    if s.len() + 1 > len as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` has `len` writable bytes (nvml.h), and `s.len() + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
        buf.add(s.len()).write(0);
    }
    Ok(())
}

fn fill<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

/// Reads the version field a versioned structure starts with.
fn version_of(p: *const c_uint) -> Result<u32, u32> {
    if p.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: a versioned NVML structure starts with its `unsigned int version`.
    Ok(unsafe { p.read() })
}

// ---- init and the library ----------------------------------------------------------

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> Ret {
    let mut g = global();
    if g.refs == 0 {
        match load() {
            Ok(fake) => g.fake = Some(fake),
            Err(e) => {
                eprintln!("accel-fake-nvml: {e}");
                return UNKNOWN;
            }
        }
        // An injected init failure leaves the library uninitialised.
        if let Some(Err(c)) = g.fake.as_mut().map(|f| f.check("nvmlInit_v2", None)) {
            g.fake = None;
            return c;
        }
    }
    g.refs += 1;
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlInit() -> Ret {
    nvmlInit_v2()
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Ret {
    nvmlInit_v2()
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> Ret {
    let mut g = global();
    match g.refs {
        0 => UNINITIALIZED,
        1 => {
            g.refs = 0;
            g.fake = None;
            SUCCESS
        }
        _ => {
            g.refs -= 1;
            SUCCESS
        }
    }
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: Ret) -> *const c_char {
    // Static, NUL-terminated names: nvml.h says the string is the library's.
    static NAMES: std::sync::OnceLock<Vec<(u32, std::ffi::CString)>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        crate::code::NAMES
            .iter()
            .map(|(n, c)| {
                (
                    *c,
                    std::ffi::CString::new(format!("NVML_ERROR_{n}")).unwrap_or_default(),
                )
            })
            .collect()
    });
    names
        .iter()
        .find(|(c, _)| *c == result)
        .or_else(|| names.iter().find(|(c, _)| *c == UNKNOWN))
        .map_or(std::ptr::null(), |(_, s)| s.as_ptr())
}

// ---- devices -------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> Ret {
    with("nvmlDeviceGetCount_v2", None, |f| {
        put(count, f.gpus.len() as c_uint)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, out: *mut H) -> Ret {
    with("nvmlDeviceGetHandleByIndex_v2", None, |f| {
        let g = f.device(index as usize)?;
        f.check("nvmlDeviceGetHandleByIndex_v2", Some(g))?;
        put(out, h(Handle::Device(g)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(bus: *const c_char, out: *mut H) -> Ret {
    with("nvmlDeviceGetHandleByPciBusId_v2", None, |f| {
        if bus.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null and NUL-terminated (nvml.h).
        let s = unsafe { CStr::from_ptr(bus) }
            .to_str()
            .map_err(|_| INVALID_ARGUMENT)?;
        let g = f.device_by_bus(s)?;
        f.check("nvmlDeviceGetHandleByPciBusId_v2", Some(g))?;
        put(out, h(Handle::Device(g)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, out: *mut H) -> Ret {
    with("nvmlDeviceGetHandleByUUID", None, |f| {
        if uuid.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null and NUL-terminated (nvml.h).
        let s = unsafe { CStr::from_ptr(uuid) }
            .to_str()
            .map_err(|_| INVALID_ARGUMENT)?;
        let handle = f.device_by_uuid(s)?;
        f.check("nvmlDeviceGetHandleByUUID", Some(handle.gpu()))?;
        put(out, h(handle))
    })
}

/// The name of a GPU, or of a MIG device (`<GPU> MIG 1g.10gb`).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(dev: H, name: *mut c_char, len: c_uint) -> Ret {
    with("nvmlDeviceGetName", Some(dev), |f| {
        let text = match decode(dev)? {
            Handle::Device(g) => f.gpus[g].model.name.to_owned(),
            m @ Handle::Mig { gpu, .. } => {
                let (_, gi, _) = f.ci(m)?;
                let p = f.gpus[gpu].model.profile(gi.profile_id).ok_or(UNKNOWN)?;
                format!("{} MIG {}", f.gpus[gpu].model.name, p.name)
            }
            _ => return Err(INVALID_ARGUMENT),
        };
        put_str(name, len, &text)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(dev: H, uuid: *mut c_char, len: c_uint) -> Ret {
    with("nvmlDeviceGetUUID", Some(dev), |f| {
        let text = match decode(dev)? {
            Handle::Device(g) => f.gpus[g].uuid.clone(),
            m @ Handle::Mig { .. } => f.ci(m)?.2.uuid.clone(),
            _ => return Err(INVALID_ARGUMENT),
        };
        put_str(uuid, len, &text)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(dev: H, pci: *mut PciInfo) -> Ret {
    with("nvmlDeviceGetPciInfo_v3", Some(dev), |f| {
        let g = &f.gpus[decode(dev)?.gpu()];
        let b = g.bus;
        let legacy = format!("{:04X}:{:02X}:{:02X}.0", b.domain, b.bus, b.device);
        put(
            pci,
            PciInfo {
                bus_id_legacy: fill(&legacy),
                domain: b.domain,
                bus: b.bus.into(),
                device: b.device.into(),
                pci_device_id: (u32::from(g.model.device_id) << 16) | 0x10de,
                pci_sub_system_id: (0x1839 << 16) | 0x10de,
                bus_id: fill(&b.to_string()),
            },
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(dev: H, memory: *mut Memory) -> Ret {
    with("nvmlDeviceGetMemoryInfo", Some(dev), |f| {
        let mib = match decode(dev)? {
            Handle::Device(g) => f.gpus[g].model.memory_mib,
            m @ Handle::Mig { gpu, .. } => {
                let (_, gi, _) = f.ci(m)?;
                f.gpus[gpu]
                    .model
                    .profile(gi.profile_id)
                    .ok_or(UNKNOWN)?
                    .memory_mib
            }
            _ => return Err(INVALID_ARGUMENT),
        };
        let total = mib * 1024 * 1024;
        put(
            memory,
            Memory {
                total,
                free: total,
                used: 0,
            },
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    dev: H,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Ret {
    with("nvmlDeviceGetMigMode", Some(dev), |f| {
        let (c, p) = f.mig_mode(device(dev)?)?;
        put(current, c)?;
        put(pending, p)
    })
}
