//! A MIG-capable GPU in the node's pool (issue 45): one counter set per GPU and the
//! devices that draw from it, so the scheduler itself never places two claims on the
//! same memory slices.
//!
//! ```text
//! slice A (sharedCounters only)       slices B.. (devices only, at most 64 each)
//!   <gpu>-counters                      <gpu>            every counter (the whole GPU)
//!     multiprocessors, memory,          <gpu>-vfio       every counter (VM passthrough)
//!     compute-slices, copy-engines,     <gpu>-mig-1g10gb-19-0   its engines, memory-slice-0
//!     decoders, encoders, jpeg-engines, <gpu>-mig-1g10gb-19-1   ... memory-slice-1
//!     ofa-engines, memory-slice-0..7    <gpu>-mig-3g40gb-9-4    ... memory-slice-4..7
//! ```
//!
//! `resource.k8s.io/v1` from 1.35 requires counters and devices in separate slices of
//! one pool, and at most 64 devices in a slice whose devices consume counters. A
//! placement is a range of memory slices, so one counter per memory slice (value 1)
//! makes two overlapping placements exclude each other exactly as NVML refuses them;
//! the engine counters keep the sums honest where placements alone would not.
//!
//! On a cluster that does not serve partitionable devices (before 1.36, or
//! `DRAPartitionableDevices` off) the pool takes the [`Layout::Static`] form instead:
//! only the MIG devices that exist, each a device of its own without counters (what
//! the operator made with `nvidia-smi mig`), and no whole GPU.
//!
//! The device names are DNS labels: `<gpu>-mig-<profile without dots>-<profile id>-
//! <placement start>`, the GPU's own name cut (and ended by a hash) where the whole
//! would pass 63 characters.

use super::objects::{
    CounterConsumption, CounterSet, DeviceAttribute, DeviceCapacity, SliceDevice,
};
use indexmap::IndexMap;

/// How a partitionable GPU is published (`[kubernetes] partition_layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Counters when the API server keeps them (asked by a dry-run create), static
    /// where it drops them.
    #[default]
    Auto,
    /// Counters and every profile at every placement (Kubernetes >= 1.36, or 1.35
    /// with `DRAPartitionableDevices` on).
    Counters,
    /// The MIG devices that exist, without counters.
    Static,
}

/// What a GPU can be split into, as the agent found it (NVML's GPU instance profiles
/// and placements); present only on a GPU in MIG mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partitioning {
    /// Memory slices a placement counts in (8 on A100, H100, H200).
    pub memory_slices: u32,
    /// What the whole GPU has.
    pub totals: Engines,
    pub profiles: Vec<Profile>,
    /// MIG devices that exist now.
    pub instances: Vec<Instance>,
}

/// Countable resources of a GPU or of one partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Engines {
    pub memory_mib: i64,
    pub multiprocessors: u32,
    pub compute_slices: u32,
    pub copy_engines: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub jpeg_engines: u32,
    pub ofa_engines: u32,
}

/// One GPU instance profile and where it may be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The hardware id (`1g.10gb` is 19 on H100).
    pub id: u32,
    /// `1g.10gb`, `1g.10gb+me`.
    pub name: String,
    pub engines: Engines,
    pub placements: Vec<Placement>,
}

/// A range of memory slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Placement {
    pub start: u32,
    pub size: u32,
}

/// A MIG device that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub profile_id: u32,
    pub placement: Placement,
    /// `MIG-<uuid>`.
    pub uuid: String,
}

/// What a device name of a partitioned GPU stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Form {
    /// The GPU given whole (a container).
    Whole,
    /// The GPU for a VM (`vfio-pci`).
    Vfio,
    /// A MIG device of `profile_id` at `placement`; `uuid` when it exists already
    /// (the static layout publishes only those).
    Mig {
        profile_id: u32,
        profile: String,
        placement: Placement,
        uuid: Option<String>,
    },
}

/// The counter set's name of the GPU whose device is `gpu`.
pub fn counter_set(gpu: &str) -> String {
    label(gpu, "-counters")
}

/// A MIG device's name.
pub fn mig_name(gpu: &str, profile: &str, id: u32, start: u32) -> String {
    let short: String = profile
        .to_ascii_lowercase()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    label(gpu, &format!("-mig-{short}-{id}-{start}"))
}

/// The VFIO form's name.
pub fn vfio_name(gpu: &str) -> String {
    label(gpu, "-vfio")
}

/// `base` and `suffix` as one DNS label: `base` cut and ended by 8 hex digits of its
/// hash when the whole would pass 63 characters.
fn label(base: &str, suffix: &str) -> String {
    if base.len() + suffix.len() <= 63 {
        return format!("{base}{suffix}");
    }
    let hash = crate::device::instance_hash(base, suffix);
    let keep = 63 - suffix.len() - 9;
    let cut = base[..keep.min(base.len())].trim_end_matches('-');
    format!("{cut}-{hash}{suffix}")
}

/// Every name the GPU `gpu` publishes under `layout`, with what it stands for.
pub fn forms(gpu: &str, p: &Partitioning, layout: Layout) -> Vec<(String, Form)> {
    let mut out = Vec::new();
    let profile_name = |id: u32| {
        p.profiles
            .iter()
            .find(|x| x.id == id)
            .map(|x| x.name.clone())
    };
    if layout == Layout::Static {
        for i in &p.instances {
            let profile = profile_name(i.profile_id).unwrap_or_else(|| i.profile_id.to_string());
            let name = mig_name(gpu, &profile, i.profile_id, i.placement.start);
            out.push((
                name,
                Form::Mig {
                    profile_id: i.profile_id,
                    profile,
                    placement: i.placement,
                    uuid: Some(i.uuid.clone()),
                },
            ));
        }
        return out;
    }
    out.push((gpu.to_owned(), Form::Whole));
    out.push((vfio_name(gpu), Form::Vfio));
    for prof in &p.profiles {
        for at in &prof.placements {
            let uuid = p
                .instances
                .iter()
                .find(|i| i.profile_id == prof.id && i.placement == *at)
                .map(|i| i.uuid.clone());
            out.push((
                mig_name(gpu, &prof.name, prof.id, at.start),
                Form::Mig {
                    profile_id: prof.id,
                    profile: prof.name.clone(),
                    placement: *at,
                    uuid,
                },
            ));
        }
    }
    out
}

/// The GPU's counter set: its engines, and one counter per memory slice.
pub fn counters(gpu: &str, p: &Partitioning) -> CounterSet {
    let mut counters = engine_counters(&p.totals);
    for n in 0..p.memory_slices {
        counters.insert(format!("memory-slice-{n}"), count(1));
    }
    CounterSet {
        name: counter_set(gpu),
        counters,
    }
}

fn count(n: impl std::fmt::Display) -> DeviceCapacity {
    DeviceCapacity {
        value: n.to_string(),
    }
}

fn engine_counters(e: &Engines) -> IndexMap<String, DeviceCapacity> {
    let mut c = IndexMap::new();
    c.insert("multiprocessors".into(), count(e.multiprocessors));
    c.insert("memory".into(), count(format!("{}Mi", e.memory_mib)));
    c.insert("compute-slices".into(), count(e.compute_slices));
    c.insert("copy-engines".into(), count(e.copy_engines));
    c.insert("decoders".into(), count(e.decoders));
    c.insert("encoders".into(), count(e.encoders));
    c.insert("jpeg-engines".into(), count(e.jpeg_engines));
    c.insert("ofa-engines".into(), count(e.ofa_engines));
    c
}

/// The devices a partitioned GPU publishes, built on `whole` (the GPU's own device
/// as the pool would publish it: its attributes, capacity and taints).
pub fn devices(whole: &SliceDevice, p: &Partitioning, layout: Layout) -> Vec<SliceDevice> {
    let gpu = whole.name.as_str();
    forms(gpu, p, layout)
        .into_iter()
        .map(|(name, form)| {
            let mut d = SliceDevice {
                name,
                consumes_counters: Vec::new(),
                ..whole.clone()
            };
            match form {
                Form::Whole => consume(
                    &mut d,
                    gpu,
                    engine_counters(&p.totals),
                    all_slices(p),
                    layout,
                ),
                Form::Vfio => {
                    d.attributes
                        .insert("type".into(), DeviceAttribute::string("vfio"));
                    consume(
                        &mut d,
                        gpu,
                        engine_counters(&p.totals),
                        all_slices(p),
                        layout,
                    );
                }
                Form::Mig {
                    profile_id,
                    profile,
                    placement,
                    uuid,
                } => {
                    let engines = p
                        .profiles
                        .iter()
                        .find(|x| x.id == profile_id)
                        .map(|x| x.engines)
                        .unwrap_or_default();
                    mig_attributes(&mut d, gpu, &profile, profile_id, placement, &engines);
                    if let Some(u) = uuid {
                        d.attributes
                            .insert("uuid".into(), DeviceAttribute::string(u));
                    }
                    let slices = placement.start..placement.start + placement.size;
                    consume(&mut d, gpu, engine_counters(&engines), slices, layout);
                }
            }
            d
        })
        .collect()
}

fn all_slices(p: &Partitioning) -> std::ops::Range<u32> {
    0..p.memory_slices
}

/// The device draws `engines` and the memory slices `slices` from the GPU's set (not
/// in the static layout, which has no counters).
fn consume(
    d: &mut SliceDevice,
    gpu: &str,
    mut engines: IndexMap<String, DeviceCapacity>,
    slices: std::ops::Range<u32>,
    layout: Layout,
) {
    if layout == Layout::Static {
        return;
    }
    // A zero draw says nothing: left out (the set stays within 32 counters either way).
    engines.retain(|_, v| v.value != "0" && v.value != "0Mi");
    for n in slices {
        engines.insert(format!("memory-slice-{n}"), count(1));
    }
    d.consumes_counters = vec![CounterConsumption {
        counter_set: counter_set(gpu),
        counters: engines,
    }];
}

/// A MIG device's own attributes and capacity; the parent's stay (its pciBusID,
/// model, NUMA node), with `parent` naming the GPU's device.
fn mig_attributes(
    d: &mut SliceDevice,
    gpu: &str,
    profile: &str,
    id: u32,
    at: Placement,
    e: &Engines,
) {
    let a = &mut d.attributes;
    a.insert("type".into(), DeviceAttribute::string("mig"));
    a.insert("profile".into(), DeviceAttribute::string(profile));
    a.insert("profileId".into(), DeviceAttribute::int(id.into()));
    a.insert(
        "placementStart".into(),
        DeviceAttribute::int(at.start.into()),
    );
    a.insert("placementSize".into(), DeviceAttribute::int(at.size.into()));
    a.insert("parent".into(), DeviceAttribute::string(gpu));
    d.capacity = IndexMap::new();
    d.capacity
        .insert("memory".into(), count(format!("{}Mi", e.memory_mib)));
    d.capacity
        .insert("multiprocessors".into(), count(e.multiprocessors));
}

#[cfg(test)]
mod tests;
