//! The pool's devices as the slices hold them: which devices, with which taints, cut
//! into slices, and whether the listed slices already hold them.

use super::{PCIE_ROOT, PCI_BUS_ID};
use crate::config::KubernetesConfig;
use crate::device::Device;
use crate::dra::device_name;
use crate::dra::objects::{DeviceAttribute, DeviceCapacity, ResourceSlice, SliceDevice};
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
}

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
        out.push(SliceDevice {
            name,
            attributes,
            capacity,
            taints,
            other: Default::default(),
        });
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
    out
}

/// The pool's devices cut into slices (one, empty, when there are none).
pub(super) fn cut(devices: Vec<SliceDevice>) -> Vec<Vec<SliceDevice>> {
    if devices.is_empty() {
        return vec![Vec::new()];
    }
    let per = taints::per_slice(&devices);
    devices.chunks(per).map(<[SliceDevice]>::to_vec).collect()
}

/// Whether `listed` (in [`in_order`]) already holds `pool`, slice by slice.
pub(super) fn same(listed: &[ResourceSlice], pool: &[Vec<SliceDevice>]) -> bool {
    let count = pool.len() as i64;
    let generation = listed.first().map(|s| s.spec.pool.generation);
    listed.len() == pool.len()
        && listed.iter().zip(pool).all(|(s, devices)| {
            s.spec.pool.resource_slice_count == count
                && Some(s.spec.pool.generation) == generation
                && s.spec.devices == *devices
        })
}

/// The slices by their first device's name (the pool is cut from a sorted list, so
/// this is the order its parts are written in), then by name.
pub(super) fn in_order(mut slices: Vec<ResourceSlice>) -> Vec<ResourceSlice> {
    slices.sort_by(|a, b| {
        let first = |s: &ResourceSlice| s.spec.devices.first().map(|d| d.name.clone());
        (first(a), &a.metadata.name).cmp(&(first(b), &b.metadata.name))
    });
    slices
}
