//! A GPU's partitioning facts as the ledger reads them: the agent reports them
//! (`accel_api::partitions`, from NVML and sysfs) and the store keeps them as JSON, so
//! these types are serialisable; the wire types stay in the API crate.

use serde::{Deserialize, Serialize};

/// How a GPU can be partitioned, and what already exists on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// MIG mode as the GPU has it (changing it is an operator's action).
    pub mig_enabled: bool,
    /// Memory slices placements count in (8 on A100, H100, H200).
    pub memory_slices: u32,
    /// What the whole GPU has.
    pub totals: Engines,
    #[serde(default)]
    pub profiles: Vec<Profile>,
    /// MIG instances that exist on the GPU now.
    #[serde(default)]
    pub standing: Vec<Standing>,
    #[serde(default)]
    pub vgpu_types: Vec<VgpuType>,
}

/// The countable resources of a GPU or of one partition of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Engines {
    pub memory_mib: i64,
    pub multiprocessors: u32,
    pub copy_engines: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub jpeg_engines: u32,
    pub ofa_engines: u32,
}

impl Engines {
    /// `self + other`, field by field.
    pub fn plus(self, o: Engines) -> Engines {
        Engines {
            memory_mib: self.memory_mib + o.memory_mib,
            multiprocessors: self.multiprocessors + o.multiprocessors,
            copy_engines: self.copy_engines + o.copy_engines,
            decoders: self.decoders + o.decoders,
            encoders: self.encoders + o.encoders,
            jpeg_engines: self.jpeg_engines + o.jpeg_engines,
            ofa_engines: self.ofa_engines + o.ofa_engines,
        }
    }

    /// The first field in which `self` exceeds `limit`, by its counter name (the
    /// names NVIDIA's DRA counters use).
    pub fn exceeds(self, limit: Engines) -> Option<&'static str> {
        let over = [
            (self.memory_mib > limit.memory_mib, "memory"),
            (
                self.multiprocessors > limit.multiprocessors,
                "multiprocessors",
            ),
            (self.copy_engines > limit.copy_engines, "copy-engines"),
            (self.decoders > limit.decoders, "decoders"),
            (self.encoders > limit.encoders, "encoders"),
            (self.jpeg_engines > limit.jpeg_engines, "jpeg-engines"),
            (self.ofa_engines > limit.ofa_engines, "ofa-engines"),
        ];
        over.iter().find(|(o, _)| *o).map(|(_, n)| *n)
    }
}

/// One GPU instance profile and where an instance of it may be placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// The hardware profile id (`1g.10gb` is 19 on H100).
    pub id: u32,
    /// `1g.10gb`, `1g.10gb+me`.
    pub name: String,
    pub compute_slices: u32,
    pub engines: Engines,
    pub placements: Vec<Span>,
}

/// A range of memory slices: a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Span {
    pub start: u32,
    pub size: u32,
}

impl Span {
    /// The memory slices as bits (slice `i` is bit `i`).
    pub fn mask(self) -> u64 {
        let size = self.size.min(64);
        let bits = if size == 64 {
            u64::MAX
        } else {
            (1u64 << size) - 1
        };
        bits.checked_shl(self.start).unwrap_or(0)
    }
}

/// A MIG instance that exists on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    pub profile_id: u32,
    pub at: Span,
}

/// A vGPU type the GPU offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VgpuType {
    /// `nvidia-1122` (an mdev type) or the vendor-VFIO numeric id.
    pub type_id: String,
    /// `GRID H100-10C`.
    pub name: String,
    pub memory_mib: i64,
    pub max_instances: u32,
    /// The MIG profile a MIG-backed type needs.
    #[serde(default)]
    pub mig_profile_id: Option<u32>,
}

impl Geometry {
    pub fn profile(&self, id: u32) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.id == id)
    }

    pub fn vgpu_type(&self, type_id: &str) -> Option<&VgpuType> {
        self.vgpu_types.iter().find(|t| t.type_id == type_id)
    }

    /// Every memory slice, as bits.
    pub fn all_slices(&self) -> u64 {
        Span {
            start: 0,
            size: self.memory_slices,
        }
        .mask()
    }

    /// Compute slices of the whole GPU: those of its largest profile (the `7g` of
    /// `7g.80gb`); NVML reports no total of its own.
    pub fn compute_slices(&self) -> u32 {
        self.profiles
            .iter()
            .map(|p| p.compute_slices)
            .max()
            .unwrap_or(0)
    }
}

/// Why a reported geometry cannot be a ledger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadGeometry {
    #[error("memory_slices must be 1 to 32, not {0}")]
    Slices(u32),
    #[error(
        "profile {profile}'s placement at {start} (size {size}) lies outside the memory slices"
    )]
    Placement { profile: u32, start: u32, size: u32 },
    #[error("profile {0} is listed twice")]
    ProfileTwice(u32),
    #[error("vGPU type {0} is listed twice")]
    TypeTwice(String),
}

impl Geometry {
    /// Whether the facts can be a ledger: slices a placement can count in, placements
    /// inside them, each profile and type once. A GPU without profiles (MIG off: NVML
    /// then describes none, and says 0 memory slices) has nothing to place in slices.
    pub fn check(&self) -> Result<(), BadGeometry> {
        let none_needed = self.memory_slices == 0 && self.profiles.is_empty();
        if !none_needed && !(1..=32).contains(&self.memory_slices) {
            return Err(BadGeometry::Slices(self.memory_slices));
        }
        let mut ids = std::collections::HashSet::new();
        for p in &self.profiles {
            if !ids.insert(p.id) {
                return Err(BadGeometry::ProfileTwice(p.id));
            }
            if let Some(s) = p
                .placements
                .iter()
                .find(|s| s.size == 0 || s.start + s.size > self.memory_slices)
            {
                return Err(BadGeometry::Placement {
                    profile: p.id,
                    start: s.start,
                    size: s.size,
                });
            }
        }
        let mut types = std::collections::HashSet::new();
        if let Some(t) = self.vgpu_types.iter().find(|t| !types.insert(&t.type_id)) {
            return Err(BadGeometry::TypeTwice(t.type_id.clone()));
        }
        Ok(())
    }
}
