//! What the fake's GPUs are made of: a model (the board NVML names and its MIG
//! geometry from `captures/`), the opaque handles NVML hands out, and the UUIDs.

use crate::capture::{geometry, Profile};

/// A GPU model: what NVML says of the board, and its MIG geometry.
#[derive(Debug, Clone)]
pub struct Model {
    pub name: &'static str,
    pub memory_mib: u64,
    /// PCI device id (vendor 0x10de).
    pub device_id: u16,
    /// Empty for a GPU without MIG.
    pub profiles: Vec<Profile>,
}

impl Model {
    pub fn by_name(key: &str) -> Result<Model, String> {
        let mig = |lgip, lgipp| geometry(lgip, lgipp);
        Ok(match key {
            "h100" | "h100-80gb" => Model {
                name: "NVIDIA H100 80GB HBM3",
                memory_mib: 81559,
                device_id: 0x2330,
                profiles: mig(
                    include_str!("../captures/h100-80gb-hbm3.lgip.txt"),
                    include_str!("../captures/h100-80gb-hbm3.lgipp.txt"),
                )?,
            },
            "h200" | "h200-141gb" => Model {
                name: "NVIDIA H200",
                memory_mib: 143771,
                device_id: 0x2335,
                profiles: mig(
                    include_str!("../captures/h200-141gb.lgip.txt"),
                    include_str!("../captures/h200-141gb.lgipp.txt"),
                )?,
            },
            "l4" => Model {
                name: "NVIDIA L4",
                memory_mib: 23034,
                device_id: 0x27b8,
                profiles: Vec::new(),
            },
            other => return Err(format!("unknown model {other:?} (h100, h200, l4)")),
        })
    }

    pub fn mig_capable(&self) -> bool {
        !self.profiles.is_empty()
    }

    /// The whole GPU's engines: the profile with the most compute slices.
    pub fn totals(&self) -> Option<&Profile> {
        self.profiles
            .iter()
            .max_by_key(|p| (p.slices, p.multiprocessors))
    }

    /// Compute slices: the most any profile takes.
    pub fn slices(&self) -> u32 {
        self.totals().map_or(0, |p| p.slices)
    }

    pub fn profile(&self, id: u32) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.id == id)
    }
}

/// Compute-instance profile index to compute slices (`NVML_COMPUTE_INSTANCE_PROFILE_*`).
pub fn ci_slices(index: u32) -> Option<u32> {
    Some(match index {
        0 => 1,
        1 => 2,
        2 => 3,
        3 => 4,
        4 => 7,
        5 => 8,
        6 => 6,
        _ => return None,
    })
}

/// An opaque NVML handle: kind, GPU, creation serial, GI id and CI id packed in a
/// non-null pointer-sized integer (never dereferenced by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handle {
    Device(usize),
    Gi {
        gpu: usize,
        gi: u32,
        serial: u64,
    },
    Ci {
        gpu: usize,
        gi: u32,
        ci: u32,
        serial: u64,
    },
    Mig {
        gpu: usize,
        gi: u32,
        ci: u32,
        serial: u64,
    },
}

impl Handle {
    pub fn encode(self) -> u64 {
        let (kind, gpu, serial, gi, ci) = match self {
            Handle::Device(g) => (1u64, g, 0, 0, 0),
            Handle::Gi { gpu, gi, serial } => (2, gpu, serial, gi, 0),
            Handle::Ci {
                gpu,
                gi,
                ci,
                serial,
            } => (3, gpu, serial, gi, ci),
            Handle::Mig {
                gpu,
                gi,
                ci,
                serial,
            } => (4, gpu, serial, gi, ci),
        };
        (kind << 60)
            | ((gpu as u64 & 0xff) << 52)
            | ((serial & 0xf_ffff_ffff) << 16)
            | ((gi as u64 & 0xff) << 8)
            | (ci as u64 & 0xff)
    }

    pub fn decode(v: u64) -> Option<Handle> {
        let gpu = ((v >> 52) & 0xff) as usize;
        let serial = (v >> 16) & 0xf_ffff_ffff;
        let gi = ((v >> 8) & 0xff) as u32;
        let ci = (v & 0xff) as u32;
        Some(match v >> 60 {
            1 => Handle::Device(gpu),
            2 => Handle::Gi { gpu, gi, serial },
            3 => Handle::Ci {
                gpu,
                gi,
                ci,
                serial,
            },
            4 => Handle::Mig {
                gpu,
                gi,
                ci,
                serial,
            },
            _ => return None,
        })
    }

    pub fn gpu(self) -> usize {
        match self {
            Handle::Device(g) => g,
            Handle::Gi { gpu, .. } | Handle::Ci { gpu, .. } | Handle::Mig { gpu, .. } => gpu,
        }
    }
}

/// 128 bits from `key`, as a UUID (no randomness: the same key, the same UUID).
pub fn uuid_of(key: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let (a, b) = (mix(h), mix(h.wrapping_add(0x9e37_79b9_7f4a_7c15)));
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}
