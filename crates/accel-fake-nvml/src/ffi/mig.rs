//! The MIG exports: GPU instance profiles and placements, GPU and compute instances,
//! and the MIG devices (one per compute instance), answered from the fake's layout.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

use super::abi::*;
use super::{decode, device, fill, h, put, version_of, with, Ret};
use crate::code::*;
use crate::state::Handle;
use std::ffi::c_uint;

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
