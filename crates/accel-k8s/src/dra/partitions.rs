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

pub use crate::config::Layout;
pub use crate::device::{Instance, Partitioning};
use accel_core::partition::{Consumer, Counters};
pub use accel_core::partition::{Engines, Geometry, Profile, Span as Placement};

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
        p.geometry
            .profiles
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
    for prof in &p.geometry.profiles {
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

/// The GPU's counter set: everything it has (the ledger's whole counters), one
/// counter per memory slice.
pub fn counters(gpu: &str, p: &Partitioning) -> CounterSet {
    CounterSet {
        name: counter_set(gpu),
        counters: render(&p.geometry.whole_counters(), p.geometry.memory_slices, true),
    }
}

fn count(n: impl std::fmt::Display) -> DeviceCapacity {
    DeviceCapacity {
        value: n.to_string(),
    }
}

/// The ledger's counters in DRA's names (the ledger's own: `memory`, `multiprocessors`,
/// `compute-slices`, `copy-engines`, ...; `memory-slice-N` for slice N). Zero draws
/// are left out of a device's (`all` false); a set lists every counter.
fn render(c: &Counters, memory_slices: u32, all: bool) -> IndexMap<String, DeviceCapacity> {
    let e = &c.engines;
    let mut out = IndexMap::new();
    let fields: [(&str, String, bool); 8] = [
        (
            "multiprocessors",
            e.multiprocessors.to_string(),
            e.multiprocessors > 0,
        ),
        ("memory", format!("{}Mi", e.memory_mib), e.memory_mib > 0),
        (
            "compute-slices",
            c.compute_slices.to_string(),
            c.compute_slices > 0,
        ),
        (
            "copy-engines",
            e.copy_engines.to_string(),
            e.copy_engines > 0,
        ),
        ("decoders", e.decoders.to_string(), e.decoders > 0),
        ("encoders", e.encoders.to_string(), e.encoders > 0),
        (
            "jpeg-engines",
            e.jpeg_engines.to_string(),
            e.jpeg_engines > 0,
        ),
        ("ofa-engines", e.ofa_engines.to_string(), e.ofa_engines > 0),
    ];
    for (name, value, nonzero) in fields {
        if all || nonzero {
            out.insert(name.to_owned(), count(value));
        }
    }
    for n in 0..memory_slices.min(64) {
        if c.slices & (1u64 << n) != 0 {
            out.insert(format!("memory-slice-{n}"), count(1));
        }
    }
    out
}

/// The devices a partitioned GPU publishes, built on `whole` (the GPU's own device
/// as the pool would publish it: its attributes, capacity and taints); each draws
/// what the ledger says its consumer takes.
pub fn devices(whole: &SliceDevice, p: &Partitioning, layout: Layout) -> Vec<SliceDevice> {
    let gpu = whole.name.as_str();
    let g = &p.geometry;
    forms(gpu, p, layout)
        .into_iter()
        .map(|(name, form)| {
            let mut d = SliceDevice {
                name,
                consumes_counters: Vec::new(),
                ..whole.clone()
            };
            let consumer = match &form {
                Form::Whole => Consumer::Whole,
                Form::Vfio => {
                    d.attributes
                        .insert("type".into(), DeviceAttribute::string("vfio"));
                    Consumer::Vfio
                }
                Form::Mig {
                    profile_id,
                    profile,
                    placement,
                    uuid,
                } => {
                    let engines = g
                        .profile(*profile_id)
                        .map(|x| x.engines)
                        .unwrap_or_default();
                    mig_attributes(&mut d, gpu, profile, *profile_id, *placement, &engines);
                    if let Some(u) = uuid {
                        d.attributes
                            .insert("uuid".into(), DeviceAttribute::string(u));
                    }
                    Consumer::Mig {
                        profile: *profile_id,
                        at: *placement,
                    }
                }
            };
            // The static layout has no counters; a form the geometry does not know
            // (an instance of an unlisted profile) draws nothing.
            if layout != Layout::Static {
                if let Ok(taken) = g.take(&consumer) {
                    d.consumes_counters = vec![CounterConsumption {
                        counter_set: counter_set(gpu),
                        counters: render(&taken, g.memory_slices, false),
                    }];
                }
            }
            d
        })
        .collect()
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
