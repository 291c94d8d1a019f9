//! How a GPU can be partitioned, as the agent reports it (issue 45).
//!
//! The agent reads the geometry from the vendor library (NVML's GPU instance profiles and
//! their possible placements) and from sysfs (vGPU types), never from a table of its own:
//! the hardware is the source of truth, and the server builds its one ledger per GPU from
//! what arrives here. A report without `partitions` is a GPU handed out whole, as before.
//!
//! Names follow NVML and `nvidia-smi mig -lgip/-lgipp`: a *profile* is a GPU instance
//! profile (`1g.10gb`, hardware id 19), a *placement* the range of memory slices an
//! instance of it would occupy (`start`, `size`).

use serde::{Deserialize, Serialize};

/// A GPU's partitioning facts, carried on its device in a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuPartitions {
    /// MIG mode as the GPU has it now (changing it is an operator's action).
    pub mig_enabled: bool,
    /// Memory slices a placement counts in (8 on A100, H100, H200).
    pub memory_slices: u32,
    /// What the whole GPU has: the counters every partition draws from.
    pub totals: Engines,
    /// The GPU instance profiles the GPU offers, with where each may be placed.
    #[serde(default)]
    pub profiles: Vec<MigProfile>,
    /// MIG devices that exist on the GPU now (one per compute instance).
    #[serde(default)]
    pub instances: Vec<MigInstance>,
    /// vGPU types the GPU (or its virtual functions) can create.
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

/// One GPU instance profile (`nvmlGpuInstanceProfileInfo_t` and its placements).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigProfile {
    /// The hardware profile id (`1g.10gb` is 19 on H100).
    pub id: u32,
    /// `1g.10gb`, `3g.40gb`, `1g.10gb+me`.
    pub name: String,
    /// Compute slices (the `1g` of `1g.10gb`).
    pub compute_slices: u32,
    /// What one instance of the profile has.
    pub engines: Engines,
    /// Where an instance may start, and how many memory slices it takes.
    pub placements: Vec<MigPlacement>,
}

/// A range of memory slices (`nvmlGpuInstancePlacement_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MigPlacement {
    pub start: u32,
    pub size: u32,
}

/// A MIG device that exists: a GPU instance and the compute instance on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstance {
    pub profile_id: u32,
    pub placement: MigPlacement,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    /// `MIG-<uuid>`: what a container or a VM is given.
    pub uuid: String,
}

/// A vGPU type (an mdev type directory, or a vendor-VFIO `creatable_vgpu_types` line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VgpuType {
    /// `nvidia-1122` (mdev type) or the numeric vendor type id.
    pub type_id: String,
    /// `GRID H100-10C`.
    pub name: String,
    /// Frame buffer one instance has.
    pub memory_mib: i64,
    /// Instances the GPU holds at most (mdev `available_instances` with none created).
    pub max_instances: u32,
    /// The MIG profile a MIG-backed type needs, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile_id: Option<u32>,
}

impl GpuPartitions {
    /// The ledger's model of a GPU in the agent protocol's words (the reverse of
    /// [`GpuPartitions::geometry`]), as the `nvidia` driver reports what NVML lists;
    /// without MIG devices (the model's standing instances carry no ids or UUIDs).
    /// Tests and benchmarks report fixture GPUs with it.
    pub fn from_geometry(g: &accel_core::partition::Geometry) -> GpuPartitions {
        let e = |e: accel_core::partition::Engines| Engines {
            memory_mib: e.memory_mib,
            multiprocessors: e.multiprocessors,
            copy_engines: e.copy_engines,
            decoders: e.decoders,
            encoders: e.encoders,
            jpeg_engines: e.jpeg_engines,
            ofa_engines: e.ofa_engines,
        };
        GpuPartitions {
            mig_enabled: g.mig_enabled,
            memory_slices: g.memory_slices,
            totals: e(g.totals),
            profiles: g
                .profiles
                .iter()
                .map(|p| MigProfile {
                    id: p.id,
                    name: p.name.clone(),
                    compute_slices: p.compute_slices,
                    engines: e(p.engines),
                    placements: p
                        .placements
                        .iter()
                        .map(|s| MigPlacement {
                            start: s.start,
                            size: s.size,
                        })
                        .collect(),
                })
                .collect(),
            instances: Vec::new(),
            vgpu_types: g
                .vgpu_types
                .iter()
                .map(|t| VgpuType {
                    type_id: t.type_id.clone(),
                    name: t.name.clone(),
                    memory_mib: t.memory_mib,
                    max_instances: t.max_instances,
                    mig_profile_id: t.mig_profile_id,
                })
                .collect(),
        }
    }

    /// The same facts as the ledger's model (`accel_core::partition::Geometry`), which
    /// the server's ledger and the agent's DRA slices both work from: the wire's names
    /// stay at the wire.
    pub fn geometry(&self) -> accel_core::partition::Geometry {
        use accel_core::partition as core;
        let engines = |e: &Engines| core::Engines {
            memory_mib: e.memory_mib,
            multiprocessors: e.multiprocessors,
            copy_engines: e.copy_engines,
            decoders: e.decoders,
            encoders: e.encoders,
            jpeg_engines: e.jpeg_engines,
            ofa_engines: e.ofa_engines,
        };
        core::Geometry {
            mig_enabled: self.mig_enabled,
            memory_slices: self.memory_slices,
            totals: engines(&self.totals),
            profiles: self
                .profiles
                .iter()
                .map(|m| core::Profile {
                    id: m.id,
                    name: m.name.clone(),
                    compute_slices: m.compute_slices,
                    engines: engines(&m.engines),
                    placements: m.placements.iter().map(|s| s.span()).collect(),
                })
                .collect(),
            standing: self
                .instances
                .iter()
                .map(|i| core::Standing {
                    profile_id: i.profile_id,
                    at: i.placement.span(),
                })
                .collect(),
            vgpu_types: self
                .vgpu_types
                .iter()
                .map(|t| core::VgpuType {
                    type_id: t.type_id.clone(),
                    name: t.name.clone(),
                    memory_mib: t.memory_mib,
                    max_instances: t.max_instances,
                    mig_profile_id: t.mig_profile_id,
                })
                .collect(),
        }
    }
}

impl MigPlacement {
    /// The ledger's name for it.
    pub fn span(&self) -> accel_core::partition::Span {
        accel_core::partition::Span {
            start: self.start,
            size: self.size,
        }
    }
}
