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
use std::ffi::{c_char, c_uint, c_void, CStr};
use std::sync::Mutex;

type Ret = c_uint;
type H = *mut c_void;

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
const fn version<T>(v: u32) -> u32 {
    std::mem::size_of::<T>() as u32 | (v << 24)
}

const GI_PROFILE_V2: u32 = version::<GiProfileV2>(2);
const GI_PROFILE_V3: u32 = version::<GiProfileV3>(3);
const CI_PROFILE_V2: u32 = version::<CiProfileV2>(2);
const CI_PROFILE_V3: u32 = version::<CiProfileV3>(3);

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

// ---- GPU instance profiles and placements -------------------------------------------

fn write_gi_profile(info: *mut GiProfileV2, p: &crate::capture::Profile) -> Result<(), u32> {
    let name = format!("MIG {}", p.name);
    match version_of(info.cast::<c_uint>())? {
        GI_PROFILE_V2 => put(
            info,
            GiProfileV2 {
                version: GI_PROFILE_V2,
                id: p.id,
                is_p2p_supported: p.p2p.into(),
                slice_count: p.slices,
                instance_count: p.instances,
                multiprocessor_count: p.multiprocessors,
                copy_engine_count: p.copy_engines,
                decoder_count: p.decoders,
                encoder_count: p.encoders,
                jpeg_count: p.jpeg,
                ofa_count: p.ofa,
                memory_size_mb: p.memory_mib,
                name: fill(&name),
            },
        ),
        GI_PROFILE_V3 => put(
            info.cast::<GiProfileV3>(),
            GiProfileV3 {
                version: GI_PROFILE_V3,
                id: p.id,
                slice_count: p.slices,
                instance_count: p.instances,
                multiprocessor_count: p.multiprocessors,
                copy_engine_count: p.copy_engines,
                decoder_count: p.decoders,
                encoder_count: p.encoders,
                jpeg_count: p.jpeg,
                ofa_count: p.ofa,
                memory_size_mb: p.memory_mib,
                name: fill(&name),
                capabilities: u32::from(p.p2p),
            },
        ),
        _ => Err(ARGUMENT_VERSION_MISMATCH),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    dev: H,
    profile: c_uint,
    info: *mut GiProfileV2,
) -> Ret {
    with("nvmlDeviceGetGpuInstanceProfileInfoV", Some(dev), |f| {
        let p = f.profile_by_index(device(dev)?, profile)?.clone();
        write_gi_profile(info, &p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoByIdV(
    dev: H,
    id: c_uint,
    info: *mut GiProfileV2,
) -> Ret {
    with("nvmlDeviceGetGpuInstanceProfileInfoByIdV", Some(dev), |f| {
        let p = f.profile_by_id(device(dev)?, id)?.clone();
        write_gi_profile(info, &p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    dev: H,
    profile_id: c_uint,
    placements: *mut Placement,
    count: *mut c_uint,
) -> Ret {
    with(
        "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
        Some(dev),
        |f| {
            let all = f.placements(device(dev)?, profile_id)?;
            if count.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            if !placements.is_null() {
                // SAFETY: non-null; the caller's array is "large enough to accommodate
                // the placements supported by the profile" (nvml.h).
                for (i, (start, size)) in all.iter().enumerate() {
                    unsafe {
                        placements.add(i).write(Placement {
                            start: *start,
                            size: *size,
                        })
                    };
                }
            }
            put(count, all.len() as c_uint)
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    dev: H,
    profile_id: c_uint,
    count: *mut c_uint,
) -> Ret {
    with(
        "nvmlDeviceGetGpuInstanceRemainingCapacity",
        Some(dev),
        |f| {
            let n = f.remaining(device(dev)?, profile_id)?;
            put(count, n)
        },
    )
}

// ---- GPU instances ---------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    dev: H,
    profile_id: c_uint,
    placement: *const Placement,
    out: *mut H,
) -> Ret {
    with("nvmlDeviceCreateGpuInstanceWithPlacement", Some(dev), |f| {
        if placement.is_null() || out.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null, pointing to the caller's nvmlGpuInstancePlacement_t.
        let at = unsafe { placement.read() };
        let gi = f.create_gi(device(dev)?, profile_id, (at.start, at.size))?;
        put(out, h(gi))
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpuInstanceDestroy(gi: H) -> Ret {
    with("nvmlGpuInstanceDestroy", Some(gi), |f| {
        f.destroy_gi(decode(gi)?)
    })
}

/// Writes `handles` into the caller's array and their number into `count`.
fn put_handles(out: *mut H, count: *mut c_uint, handles: &[Handle]) -> Result<(), u32> {
    if out.is_null() && !handles.is_empty() {
        return Err(INVALID_ARGUMENT);
    }
    for (i, x) in handles.iter().enumerate() {
        // SAFETY: the caller's array holds the profile's instance count (nvml.h),
        // which bounds `handles`.
        unsafe { out.add(i).write(h(*x)) };
    }
    put(count, handles.len() as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    dev: H,
    profile_id: c_uint,
    out: *mut H,
    count: *mut c_uint,
) -> Ret {
    with("nvmlDeviceGetGpuInstances", Some(dev), |f| {
        let gis = f.gpu_instances(device(dev)?, profile_id)?;
        put_handles(out, count, &gis)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(dev: H, id: c_uint, out: *mut H) -> Ret {
    with("nvmlDeviceGetGpuInstanceById", Some(dev), |f| {
        let gi = f.gi_by_id(device(dev)?, id)?;
        put(out, h(gi))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(gi: H, info: *mut GiInfo) -> Ret {
    with("nvmlGpuInstanceGetInfo", Some(gi), |f| {
        let (gpu, g) = f.gi(decode(gi)?)?;
        put(
            info,
            GiInfo {
                device: h(Handle::Device(gpu)),
                id: g.id,
                profile_id: g.profile_id,
                placement: Placement {
                    start: g.start,
                    size: g.size,
                },
            },
        )
    })
}

// ---- compute instances ---------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    gi: H,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut CiProfileV2,
) -> Ret {
    with(
        "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
        Some(gi),
        |f| {
            let (slices, count, sms, p) = f.ci_profile(decode(gi)?, profile, eng_profile)?;
            let name = if slices == p.slices {
                format!("MIG {}", p.name)
            } else {
                format!("MIG {slices}c.{}", p.name)
            };
            let v2 = |version| CiProfileV2 {
                version,
                id: profile,
                slice_count: slices,
                instance_count: count,
                multiprocessor_count: sms,
                shared_copy_engine_count: p.copy_engines,
                shared_decoder_count: p.decoders,
                shared_encoder_count: p.encoders,
                shared_jpeg_count: p.jpeg,
                shared_ofa_count: p.ofa,
                name: fill(&name),
            };
            match version_of(info.cast::<c_uint>())? {
                CI_PROFILE_V2 => put(info, v2(CI_PROFILE_V2)),
                CI_PROFILE_V3 => put(
                    info.cast::<CiProfileV3>(),
                    CiProfileV3 {
                        v2: v2(CI_PROFILE_V3),
                        capabilities: 0,
                    },
                ),
                _ => Err(ARGUMENT_VERSION_MISMATCH),
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gi: H,
    profile_id: c_uint,
    out: *mut H,
) -> Ret {
    with("nvmlGpuInstanceCreateComputeInstance", Some(gi), |f| {
        if out.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let ci = f.create_ci(decode(gi)?, profile_id)?;
        put(out, h(ci))
    })
}

#[no_mangle]
pub extern "C" fn nvmlComputeInstanceDestroy(ci: H) -> Ret {
    with("nvmlComputeInstanceDestroy", Some(ci), |f| {
        match decode(ci)? {
            c @ Handle::Ci { .. } => f.destroy_ci(c),
            _ => Err(INVALID_ARGUMENT),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gi: H,
    profile_id: c_uint,
    out: *mut H,
    count: *mut c_uint,
) -> Ret {
    with("nvmlGpuInstanceGetComputeInstances", Some(gi), |f| {
        let cis = f.compute_instances(decode(gi)?, profile_id)?;
        put_handles(out, count, &cis)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    gi: H,
    id: c_uint,
    out: *mut H,
) -> Ret {
    with("nvmlGpuInstanceGetComputeInstanceById", Some(gi), |f| {
        let ci = f.ci_by_id(decode(gi)?, id)?;
        put(out, h(ci))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(ci: H, info: *mut CiInfo) -> Ret {
    with("nvmlComputeInstanceGetInfo_v2", Some(ci), |f| {
        let handle = decode(ci)?;
        if !matches!(handle, Handle::Ci { .. }) {
            return Err(INVALID_ARGUMENT);
        }
        let (gpu, g, c) = f.ci(handle)?;
        put(
            info,
            CiInfo {
                device: h(Handle::Device(gpu)),
                gpu_instance: h(Handle::Gi {
                    gpu,
                    gi: g.id,
                    serial: g.serial,
                }),
                id: c.id,
                profile_id: c.profile,
                placement: Placement {
                    start: c.start,
                    size: c.slices,
                },
            },
        )
    })
}

// ---- MIG devices -----------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(dev: H, count: *mut c_uint) -> Ret {
    with("nvmlDeviceGetMaxMigDeviceCount", Some(dev), |f| {
        let n = f.max_mig_devices(device(dev)?)?;
        put(count, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    dev: H,
    index: c_uint,
    out: *mut H,
) -> Ret {
    with("nvmlDeviceGetMigDeviceHandleByIndex", Some(dev), |f| {
        let g = device(dev)?;
        let max = f.max_mig_devices(g)?;
        let migs = f.mig_devices(g)?;
        if index >= max {
            return Err(INVALID_ARGUMENT);
        }
        let m = migs.get(index as usize).ok_or(NOT_FOUND)?;
        put(out, h(*m))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(dev: H, is_mig: *mut c_uint) -> Ret {
    with("nvmlDeviceIsMigDeviceHandle", Some(dev), |_| {
        put(is_mig, matches!(decode(dev)?, Handle::Mig { .. }).into())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig: H, out: *mut H) -> Ret {
    with(
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        Some(mig),
        |f| {
            let (gpu, _, _) = f.ci(decode(mig)?)?;
            put(out, h(Handle::Device(gpu)))
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(mig: H, id: *mut c_uint) -> Ret {
    with("nvmlDeviceGetGpuInstanceId", Some(mig), |f| {
        let (_, g, _) = f.ci(decode(mig)?)?;
        put(id, g.id)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(mig: H, id: *mut c_uint) -> Ret {
    with("nvmlDeviceGetComputeInstanceId", Some(mig), |f| {
        let (_, _, c) = f.ci(decode(mig)?)?;
        put(id, c.id)
    })
}

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
