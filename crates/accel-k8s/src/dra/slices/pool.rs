//! The pool's devices as the slices hold them: which devices, with which taints, cut
//! into slices, and whether the listed slices already hold them.

use super::{PCIE_ROOT, PCI_BUS_ID};
use crate::config::KubernetesConfig;
use crate::device::Device;
use crate::dra::device_name;
use crate::dra::objects::{
    CounterSet, DeviceAttribute, DeviceCapacity, ResourceSlice, SliceDevice,
};
use crate::dra::partitions::{self, Layout};
use crate::dra::taints;
use crate::slots::CLEANED_ON_RELEASE;
use indexmap::IndexMap;
use std::collections::BTreeSet;

/// What marks the node's devices beyond their drivers' verdicts.
#[derive(Debug, Clone, Default)]
pub struct Marks {
    /// PCI addresses the server withholds: a VM holds them, or they wait for their
    /// cleaning.
    pub vm_held: BTreeSet<String>,
    /// Slice names of the devices prepared for claims on this node.
    pub prepared: BTreeSet<String>,
    /// Slice names of the devices claims released to their cleaning.
    pub released: BTreeSet<String>,
    /// How partitionable GPUs are published, as found for this cluster
    /// ([`Layout::Auto`] reads as [`Layout::Static`]: nothing it may not keep).
    pub layout: Layout,
}

/// The pool's counter sets and devices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Wanted {
    pub counters: Vec<CounterSet>,
    pub devices: Vec<SliceDevice>,
}

/// One slice's part of the pool: counter sets or devices, never both (1.35+).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Part {
    pub counters: Vec<CounterSet>,
    pub devices: Vec<SliceDevice>,
}

/// At most 8 counter sets in one slice (`ResourceSliceMaxCounterSets`).
pub const MAX_COUNTER_SETS: usize = 8;

/// The pool's devices, by name: every device of a configuration, but a healthy one the
/// server withholds for a VM; with a taint when it is unhealthy (`NoExecute` when
/// prepared; the server withholds an unhealthy device whoever holds it, so it stays,
/// tainted), being cleaned after a claim let it go, or gone while prepared (kept from
/// `listed`, the slices as they are). See [`taints`].
pub fn desired(
    node: &str,
    config: &KubernetesConfig,
    devices: Vec<Device>,
    marks: &Marks,
    listed: &[ResourceSlice],
) -> Vec<SliceDevice> {
    wanted(node, config, devices, marks, listed).devices
}

/// [`desired`]'s devices and the counter sets a partitioned GPU's devices draw from
/// (the counter layout only): a GPU with partitions is its whole form, its VFIO form
/// and its MIG devices, each with the GPU's taints ([`partitions`]).
pub fn wanted(
    node: &str,
    config: &KubernetesConfig,
    devices: Vec<Device>,
    marks: &Marks,
    listed: &[ResourceSlice],
) -> Wanted {
    let layout = match marks.layout {
        Layout::Auto => Layout::Static,
        l => l,
    };
    let mut counters = Vec::new();
    let domain = config.resource_domain.as_str();
    let string = |s: &str| DeviceAttribute::string(s);
    let mut out: Vec<SliceDevice> = Vec::new();
    // Every device found of a configuration, withdrawn or not.
    let mut found: BTreeSet<String> = BTreeSet::new();
    for d in devices {
        let Some(conf) = config
            .configurations
            .iter()
            .find(|c| c.selector.matches(&d))
        else {
            continue;
        };
        let name = device_name(node, &d.id);
        found.insert(name.clone());
        let mut taints = Vec::new();
        if marks.vm_held.contains(&d.id) {
            let cleaning =
                marks.released.contains(&name) && d.traits.iter().any(|t| t == CLEANED_ON_RELEASE);
            if cleaning {
                taints.push(taints::taint(
                    domain,
                    taints::CLEANING,
                    "",
                    taints::NO_SCHEDULE,
                ));
            } else if d.healthy {
                continue;
            }
            // Unhealthy: the server withholds a device its report says unhealthy
            // (reserved in full), so that is no sign of a VM; tainted, not withdrawn.
        }
        if !d.healthy {
            let effect = if marks.prepared.contains(&name) {
                taints::NO_EXECUTE
            } else {
                taints::NO_SCHEDULE
            };
            taints.push(taints::taint(domain, taints::UNHEALTHY, "", effect));
        }
        let mut attributes = IndexMap::new();
        attributes.insert("type".into(), string(&d.device_type));
        attributes.insert("vendor".into(), string(&format!("{:04x}", d.vendor)));
        attributes.insert("product".into(), string(&format!("{:04x}", d.product)));
        attributes.insert("model".into(), string(&d.model));
        attributes.insert("configuration".into(), string(&conf.name));
        let health = if d.healthy { "ok" } else { "unhealthy" };
        attributes.insert("health".into(), string(health));
        attributes.insert("pciAddress".into(), string(&d.id));
        // Kubernetes' standard names (KubeVirt reads pciBusID): extended BDF, lower case.
        attributes.insert(PCI_BUS_ID.into(), string(&d.id.to_ascii_lowercase()));
        if let Some(root) = &d.pcie_root {
            attributes.insert(PCIE_ROOT.into(), string(root));
        }
        if let Some(n) = d.numa_node {
            attributes.insert(
                "resource.kubernetes.io/numaNode".into(),
                DeviceAttribute::int(n.into()),
            );
        }
        let capacity = d
            .memory_mib
            .map(|mib| {
                let value = format!("{mib}Mi");
                ("memory".to_owned(), DeviceCapacity { value })
            })
            .into_iter()
            .collect();
        let whole = SliceDevice {
            name,
            attributes,
            capacity,
            taints,
            consumes_counters: Vec::new(),
            other: Default::default(),
        };
        match &d.partitions {
            Some(p) => {
                if layout == Layout::Counters {
                    counters.push(partitions::counters(&whole.name, p));
                }
                for part in partitions::devices(&whole, p, layout) {
                    found.insert(part.name.clone());
                    out.push(part);
                }
            }
            None => out.push(whole),
        }
    }
    // A prepared device no longer found: its claims are told to let go.
    let before = listed.iter().flat_map(|s| s.spec.devices.iter());
    let gone: Vec<SliceDevice> = before
        .filter(|b| marks.prepared.contains(&b.name) && !found.contains(&b.name))
        .map(|b| {
            let mut d = b.clone();
            d.other.clear();
            d.attributes.insert("health".into(), string("unhealthy"));
            d.taints = vec![taints::taint(
                domain,
                taints::UNHEALTHY,
                taints::GONE,
                taints::NO_EXECUTE,
            )];
            d
        })
        .collect();
    out.extend(gone);
    out.sort_by(|a, b| a.name.cmp(&b.name));
    counters.sort_by(|a, b| a.name.cmp(&b.name));
    Wanted {
        counters,
        devices: out,
    }
}

/// The pool cut into slices: the counter sets first (at most 8 a slice), then the
/// devices (one, empty, when there is nothing at all).
pub(super) fn cut(wanted: Wanted) -> Vec<Part> {
    let Wanted { counters, devices } = wanted;
    let mut parts: Vec<Part> = counters
        .chunks(MAX_COUNTER_SETS)
        .map(|c| Part {
            counters: c.to_vec(),
            devices: Vec::new(),
        })
        .collect();
    if devices.is_empty() {
        if parts.is_empty() {
            parts.push(Part::default());
        }
        return parts;
    }
    let per = taints::per_slice(&devices);
    parts.extend(devices.chunks(per).map(|d| Part {
        counters: Vec::new(),
        devices: d.to_vec(),
    }));
    parts
}

/// Whether `listed` (in [`in_order`]) already holds `pool`, slice by slice.
pub(super) fn same(listed: &[ResourceSlice], pool: &[Part]) -> bool {
    let count = pool.len() as i64;
    let generation = listed.first().map(|s| s.spec.pool.generation);
    listed.len() == pool.len()
        && listed.iter().zip(pool).all(|(s, devices)| {
            s.spec.pool.resource_slice_count == count
                && Some(s.spec.pool.generation) == generation
                && s.spec.devices == devices.devices
                && s.spec.shared_counters == devices.counters
        })
}

/// The slices by their first device's name (the pool is cut from a sorted list, so
/// this is the order its parts are written in), then by name.
pub(super) fn in_order(mut slices: Vec<ResourceSlice>) -> Vec<ResourceSlice> {
    slices.sort_by(|a, b| {
        // Counter slices (no device) first, by their first set.
        let first = |s: &ResourceSlice| {
            let set = s.spec.shared_counters.first().map(|c| c.name.clone());
            (s.spec.devices.first().map(|d| d.name.clone()), set)
        };
        (first(a), &a.metadata.name).cmp(&(first(b), &b.metadata.name))
    });
    slices
}
