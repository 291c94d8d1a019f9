//! The slot table: seed 001's instance-level (IL) and configuration-level (CL)
//! resources as pure logic, shared by every plugin of the node.
//!
//! ```text
//! configuration "gpu" (capacity 2)            kubelet resources
//! ├── instance gpu-1a2b3c4d  slots 0 1   ──▶  accel.dev/gpu-1a2b3c4d  ids gpu-1a2b3c4d-0, -1
//! ├── instance gpu-99aa0b1c  slots 0 1   ──▶  accel.dev/gpu-99aa0b1c  ids gpu-99aa0b1c-0, -1
//! └── (the pool)                          ──▶  accel.dev/gpu           ids "0", "1", ... (virtual)
//! ```
//!
//! A slot's [`Usage`] is seed 001's `deviceUsage` value: free, `<node>` (held through
//! the instance-level resource) or `C:<vdev>:<node>` (held by virtual id `vdev` of the
//! pool). The IL resource advertises every slot, Healthy when free or held by this
//! node's IL plugin, Unhealthy otherwise. The pool advertises the virtual ids it
//! already holds plus one new id per device that still has a free slot, so
//! kubelet's allocatable count for the pool is the number of distinct devices it can
//! still hand out: a request that kubelet admits can be met with distinct devices,
//! except in seed 001's corner (every slot held by earlier virtual ids) where
//! Allocate refuses.
//!
//! Invariants, checked by the property test at the bottom:
//! - a slot has one usage; a grant either takes a free slot or repeats the holder's own
//!   earlier grant (kubelet re-offers an init container's devices), never another's;
//! - one virtual id maps to at most one slot, and one container's ids to distinct
//!   devices;
//! - an Allocate is all or nothing.
//!
//! A GPU in MIG mode with MIG devices is offered through them instead, one resource per
//! MIG profile (`mig.rs`).
//!
//! To keep IL and CL from racing for the same slot index, the pool takes a device's
//! highest free slot and `GetPreferredAllocation` steers kubelet to the lowest.

use crate::config::{Configuration, KubernetesConfig};
use crate::device::{instance_hash, Device};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

mod mig;
mod types;
pub use mig::{mig_resource, mig_slot, withheld_mig};
pub use types::{
    Advertised, AllocError, Claim, Grant, MigGrant, MigPlacement, ParseUsageError, Resource,
    ResourceKey, Usage,
};

#[derive(Debug, Clone)]
struct Slot {
    usage: Usage,
    /// Last time the slot was granted or seen in use; reclaim counts from here.
    seen: Option<Instant>,
}

/// The trait of a device the server reserves for a cleaning when its last consumer
/// lets go (`accel_agent::cleaning::TRAIT`).
pub const CLEANED_ON_RELEASE: &str = "CUSTOM_ACCEL_CLEANED_ON_RELEASE";

#[derive(Debug, Clone)]
struct Instance {
    device: Device,
    present: bool,
    /// A VM holds the device (a bound ARQ, or another consumer's Placement
    /// allocation), or it waits for its cleaning: its free slots are offered to
    /// nobody, like slots held elsewhere.
    vm_held: bool,
    slots: Vec<Slot>,
}

impl Instance {
    /// A GPU in MIG mode with MIG devices is offered through them only (`mig.rs`).
    fn offering(&self) -> bool {
        self.present && self.device.healthy && !self.vm_held && !mig::cut_into_mig(&self.device)
    }
    /// After slots were freed: a device cleaned on release is held from its last
    /// slot's release until the server's answer says it is clean (issue 33).
    fn hold_for_cleaning(&mut self) {
        if self.free() == self.slots.len()
            && self.device.traits.iter().any(|t| t == CLEANED_ON_RELEASE)
        {
            self.vm_held = true;
        }
    }

    fn free(&self) -> usize {
        self.slots.iter().filter(|s| s.usage == Usage::Free).count()
    }
}

#[derive(Debug, Clone)]
struct Pool {
    config: Configuration,
    instances: BTreeMap<String, Instance>,
}

/// Every slot of every device of this node, by configuration.
#[derive(Debug, Clone)]
pub struct SlotTable {
    node: String,
    domain: String,
    pools: Vec<Pool>,
    /// The MIG devices of GPUs in MIG mode, by slot (`mig.rs`).
    mig: BTreeMap<String, mig::MigSlot>,
}

impl SlotTable {
    pub fn new(node: impl Into<String>, config: &KubernetesConfig) -> SlotTable {
        SlotTable {
            node: node.into(),
            domain: config.resource_domain.clone(),
            pools: config
                .configurations
                .iter()
                .map(|c| Pool {
                    config: c.clone(),
                    instances: BTreeMap::new(),
                })
                .collect(),
            mig: BTreeMap::new(),
        }
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// Replaces the device list. A device belongs to the first configuration whose
    /// selector matches it (so no device is offered twice). A device that went away
    /// keeps its instance (all Unhealthy) while this node still holds one of its slots;
    /// the reclaimer frees those, and then the instance goes. Returns whether anything
    /// kubelet sees changed.
    pub fn set_devices(&mut self, devices: &[Device]) -> bool {
        let mut found: Vec<BTreeMap<String, &Device>> = vec![BTreeMap::new(); self.pools.len()];
        for d in devices {
            if let Some(i) = self.pools.iter().position(|p| p.config.selector.matches(d)) {
                let name = format!(
                    "{}-{}",
                    self.pools[i].config.name,
                    instance_hash(&self.node, &d.id)
                );
                found[i].insert(name, d);
            }
        }
        let mut changed = false;
        for (pool, found) in self.pools.iter_mut().zip(found) {
            for (name, inst) in pool.instances.iter_mut() {
                match found.get(name) {
                    Some(d) if !inst.present || inst.device != **d => {
                        inst.present = true;
                        inst.device = (*d).clone();
                        changed = true;
                    }
                    Some(_) => {}
                    None if inst.present => {
                        inst.present = false;
                        changed = true;
                    }
                    None => {}
                }
            }
            for (name, d) in found {
                pool.instances.entry(name).or_insert_with(|| {
                    changed = true;
                    Instance {
                        device: d.clone(),
                        present: true,
                        vm_held: false,
                        slots: vec![
                            Slot {
                                usage: Usage::Free,
                                seen: None
                            };
                            pool.config.capacity as usize
                        ],
                    }
                });
            }
        }
        changed |= self.drop_gone();
        changed |= self.sync_mig();
        changed
    }

    /// Drops absent instances that no longer hold anything of this node's.
    fn drop_gone(&mut self) -> bool {
        let node = self.node.clone();
        let mut changed = false;
        for pool in &mut self.pools {
            pool.instances.retain(|_, i| {
                let keep = i.present || i.slots.iter().any(|s| held_here(&s.usage, &node));
                changed |= !keep;
                keep
            });
        }
        changed
    }

    /// The plugins to serve: per configuration its pool, then its instances.
    pub fn resources(&self) -> Vec<Resource> {
        let mut out = Vec::new();
        for p in &self.pools {
            out.push(Resource {
                key: ResourceKey::Pool(p.config.name.clone()),
                name: format!("{}/{}", self.domain, p.config.name),
            });
            for name in p.instances.keys() {
                out.push(Resource {
                    key: ResourceKey::Instance(name.clone()),
                    name: format!("{}/{name}", self.domain),
                });
            }
        }
        for profile in self.mig_profiles() {
            out.push(Resource {
                name: format!("{}/{}", self.domain, mig_resource(&profile)),
                key: ResourceKey::Mig(profile),
            });
        }
        out
    }

    fn pool_of(&self, key: &ResourceKey) -> Option<usize> {
        self.pools.iter().position(|p| match key {
            ResourceKey::Pool(c) => p.config.name == *c,
            ResourceKey::Instance(i) => p.instances.contains_key(i),
            ResourceKey::Mig(_) => false,
        })
    }

    /// The ListAndWatch device list of one plugin (`None`: no such plugin any more).
    pub fn list(&self, key: &ResourceKey) -> Option<Vec<Advertised>> {
        if let ResourceKey::Mig(profile) = key {
            return self.list_mig(profile);
        }
        let pool = &self.pools[self.pool_of(key)?];
        Some(match key {
            ResourceKey::Instance(name) => {
                let inst = &pool.instances[name];
                inst.slots
                    .iter()
                    .enumerate()
                    .map(|(i, s)| Advertised {
                        id: format!("{name}-{i}"),
                        healthy: inst.offering()
                            && match &s.usage {
                                Usage::Free => true,
                                Usage::Node(n) => *n == self.node,
                                Usage::Pool { .. } => false,
                            },
                        numa_node: inst.device.numa_node,
                    })
                    .collect()
            }
            ResourceKey::Pool(_) => {
                let mut held: BTreeMap<u64, Advertised> = BTreeMap::new();
                for inst in pool.instances.values() {
                    for s in &inst.slots {
                        if let Some(v) = self.vdev_here(&s.usage) {
                            held.insert(
                                vdev_number(v).unwrap_or(u64::MAX),
                                Advertised {
                                    id: v.to_string(),
                                    healthy: inst.offering(),
                                    numa_node: inst.device.numa_node,
                                },
                            );
                        }
                    }
                }
                let free = pool
                    .instances
                    .values()
                    .filter(|i| i.offering() && i.free() > 0)
                    .count();
                let mut out: Vec<Advertised> = held.values().cloned().collect();
                out.extend(
                    (0u64..)
                        .filter(|n| !held.contains_key(n))
                        .take(free)
                        .map(|n| Advertised {
                            id: n.to_string(),
                            healthy: true,
                            numa_node: None,
                        }),
                );
                out.sort_by_key(|a| vdev_number(&a.id));
                out
            }
            ResourceKey::Mig(_) => unreachable!("answered above"),
        })
    }

    fn vdev_here<'a>(&self, u: &'a Usage) -> Option<&'a str> {
        match u {
            Usage::Pool { vdev, node } if *node == self.node => Some(vdev),
            _ => None,
        }
    }

    /// Kubelet's Allocate: one entry of `containers` per container request, each the
    /// device ids kubelet chose. All or nothing: on an error nothing changed.
    pub fn allocate(
        &mut self,
        key: &ResourceKey,
        containers: &[Vec<String>],
        now: Instant,
    ) -> Result<Vec<Vec<Grant>>, AllocError> {
        if let ResourceKey::Mig(profile) = key {
            return self.allocate_mig(profile, containers, now);
        }
        let unknown = || {
            AllocError::UnknownResource(match key {
                ResourceKey::Instance(n) | ResourceKey::Pool(n) | ResourceKey::Mig(n) => n.clone(),
            })
        };
        let p = self.pool_of(key).ok_or_else(unknown)?;
        let mut pool = self.pools[p].clone();
        let mut out = Vec::with_capacity(containers.len());
        for ids in containers {
            let mut seen = HashSet::new();
            if let Some(dup) = ids.iter().find(|id| !seen.insert(id.as_str())) {
                return Err(AllocError::Duplicate(dup.clone()));
            }
            out.push(match key {
                ResourceKey::Instance(name) => self.allocate_instance(&mut pool, name, ids, now)?,
                ResourceKey::Pool(_) => self.allocate_pool(&mut pool, ids, now)?,
                ResourceKey::Mig(_) => unreachable!("answered above"),
            });
        }
        self.pools[p] = pool;
        Ok(out)
    }

    fn allocate_instance(
        &self,
        pool: &mut Pool,
        name: &str,
        ids: &[String],
        now: Instant,
    ) -> Result<Vec<Grant>, AllocError> {
        let inst = pool.instances.get_mut(name).expect("pool_of found it");
        let mut grants = Vec::new();
        for id in ids {
            let index = id
                .strip_prefix(name)
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|r| r.parse::<usize>().ok())
                .filter(|i| *i < inst.slots.len() && *id == format!("{name}-{i}"))
                .ok_or_else(|| AllocError::UnknownId(id.clone()))?;
            let offering = inst.offering();
            let slot = &mut inst.slots[index];
            match &slot.usage {
                Usage::Free if offering => slot.usage = Usage::Node(self.node.clone()),
                Usage::Free => return Err(AllocError::Unhealthy(id.clone())),
                // Kubelet re-offers what this node holds (init containers): it knows best.
                Usage::Node(n) if *n == self.node => {}
                other => {
                    return Err(AllocError::SlotTaken {
                        slot: id.clone(),
                        holder: other.to_string(),
                    })
                }
            }
            slot.seen = Some(now);
            grants.push(Grant {
                id: id.clone(),
                instance: name.to_string(),
                slot: id.clone(),
                usage: slot.usage.clone(),
                device: inst.device.clone(),
                mig: None,
            });
        }
        Ok(grants)
    }

    /// Seed 001's mapping for one container: an id the pool already holds keeps its
    /// slot; every other id gets a slot on a device not yet used by this container,
    /// the one with the most free slots; not enough distinct devices is a refusal.
    fn allocate_pool(
        &self,
        pool: &mut Pool,
        ids: &[String],
        now: Instant,
    ) -> Result<Vec<Grant>, AllocError> {
        let mut placed: Vec<Option<(String, usize)>> = vec![None; ids.len()];
        let mut used: BTreeMap<String, String> = BTreeMap::new(); // instance -> id
        for (k, id) in ids.iter().enumerate() {
            for (name, inst) in &pool.instances {
                if let Some(i) = inst
                    .slots
                    .iter()
                    .position(|s| self.vdev_here(&s.usage) == Some(id))
                {
                    if let Some(other) = used.insert(name.clone(), id.clone()) {
                        return Err(AllocError::SameDevice(other, id.clone()));
                    }
                    placed[k] = Some((name.clone(), i));
                }
            }
        }
        let candidates = |pool: &Pool, used: &BTreeMap<String, String>| {
            pool.instances
                .iter()
                .filter(|(n, i)| i.offering() && i.free() > 0 && !used.contains_key(*n))
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>()
        };
        let available = used.len() + candidates(pool, &used).len();
        for (k, id) in ids.iter().enumerate() {
            if placed[k].is_some() {
                continue;
            }
            if vdev_number(id).is_none() {
                return Err(AllocError::UnknownId(id.clone()));
            }
            // The NUMA node of the container's first device breaks ties.
            let numa = placed
                .iter()
                .flatten()
                .next()
                .and_then(|(n, _)| pool.instances[n].device.numa_node);
            let best = candidates(pool, &used).into_iter().max_by(|a, b| {
                let (da, db) = (&pool.instances[a], &pool.instances[b]);
                da.free()
                    .cmp(&db.free())
                    .then((da.device.numa_node == numa).cmp(&(db.device.numa_node == numa)))
                    .then(b.cmp(a))
            });
            let Some(name) = best else {
                return Err(AllocError::NotEnoughDevices {
                    needed: ids.len(),
                    available,
                });
            };
            let inst = pool.instances.get_mut(&name).expect("just found");
            let i = inst
                .slots
                .iter()
                .rposition(|s| s.usage == Usage::Free)
                .expect("has a free slot");
            inst.slots[i].usage = Usage::Pool {
                vdev: id.clone(),
                node: self.node.clone(),
            };
            used.insert(name.clone(), id.clone());
            placed[k] = Some((name, i));
        }
        Ok(ids
            .iter()
            .zip(placed)
            .map(|(id, p)| {
                let (name, i) = p.expect("every id placed");
                let inst = pool.instances.get_mut(&name).expect("placed on it");
                inst.slots[i].seen = Some(now);
                Grant {
                    id: id.clone(),
                    slot: format!("{name}-{i}"),
                    instance: name,
                    usage: inst.slots[i].usage.clone(),
                    device: inst.device.clone(),
                    mig: None,
                }
            })
            .collect())
    }

    /// Kubelet's GetPreferredAllocation for one container: the ids it must include,
    /// then, for an instance, its lowest slots (the pool takes the highest), for the
    /// pool, ids in order; `size` of them.
    pub fn preferred(
        &self,
        key: &ResourceKey,
        available: &[String],
        must_include: &[String],
        size: usize,
    ) -> Vec<String> {
        let mut rest: Vec<&String> = available
            .iter()
            .filter(|a| !must_include.contains(a))
            .collect();
        let rank = |id: &str| -> u64 {
            match key {
                ResourceKey::Instance(_) => id.rsplit('-').next().and_then(|n| n.parse().ok()),
                ResourceKey::Pool(_) => vdev_number(id),
                ResourceKey::Mig(_) => None,
            }
            .unwrap_or(u64::MAX)
        };
        rest.sort_by_key(|id| rank(id));
        must_include
            .iter()
            .chain(rest)
            .take(size.max(must_include.len()))
            .cloned()
            .collect()
    }

    /// The slot reconciler: `in_use` is every `(resource name, device id)` the
    /// pod-resources API lists. A held slot that is listed is refreshed; one that has
    /// not been listed (nor granted) for `grace` is freed. Returns whether anything
    /// changed.
    pub fn reclaim(
        &mut self,
        in_use: &HashSet<(String, String)>,
        now: Instant,
        grace: Duration,
    ) -> bool {
        let mut changed = false;
        for pool in &mut self.pools {
            let pool_resource = format!("{}/{}", self.domain, pool.config.name);
            for (name, inst) in pool.instances.iter_mut() {
                let resource = format!("{}/{name}", self.domain);
                let mut freed = false;
                for (i, s) in inst.slots.iter_mut().enumerate() {
                    let Some(key) =
                        listed_as(&s.usage, &self.node, &resource, &pool_resource, name, i)
                    else {
                        continue;
                    };
                    if in_use.contains(&key) {
                        s.seen = Some(now);
                    } else {
                        match s.seen {
                            None => s.seen = Some(now),
                            Some(t) if now.saturating_duration_since(t) >= grace => {
                                tracing::info!(%resource, slot = i, "slot reclaimed: its container is gone");
                                s.usage = Usage::Free;
                                s.seen = None;
                                changed = true;
                                freed = true;
                            }
                            Some(_) => {}
                        }
                    }
                }
                if freed {
                    inst.hold_for_cleaning();
                }
            }
        }
        changed |= self.reclaim_mig(in_use, now, grace);
        changed |= self.drop_gone();
        changed
    }

    /// Frees `slots` (`<instance>-<index>`) whose holder is gone, as [`reclaim`]
    /// does after the grace: a device cleaned on release is then held until the
    /// server's answer says it is clean. Returns whether anything changed.
    ///
    /// [`reclaim`]: SlotTable::reclaim
    pub fn free_slots(&mut self, slots: &[String]) -> bool {
        let mut changed = false;
        for (name, inst) in self.pools.iter_mut().flat_map(|p| p.instances.iter_mut()) {
            let mut freed = false;
            for (i, s) in inst.slots.iter_mut().enumerate() {
                if s.usage != Usage::Free && slots.contains(&format!("{name}-{i}")) {
                    s.usage = Usage::Free;
                    s.seen = None;
                    freed = true;
                }
            }
            if freed {
                inst.hold_for_cleaning();
            }
            changed |= freed;
        }
        changed |= self.free_mig(slots);
        changed
    }

    /// Per pooled resource (`<domain>/<configuration>`): its devices' slots and how
    /// many are held by anyone (metrics).
    pub fn slot_counts(&self) -> Vec<(String, usize, usize)> {
        self.pools
            .iter()
            .map(|p| {
                let slots = p.instances.values().flat_map(|i| i.slots.iter());
                let (total, used) = slots.fold((0, 0), |(t, u), s| {
                    (t + 1, u + usize::from(s.usage != Usage::Free))
                });
                (format!("{}/{}", self.domain, p.config.name), total, used)
            })
            .chain(self.mig_counts())
            .collect()
    }

    /// Every slot's usage by slot name (seed 001's `deviceUsage` map, for persistence).
    pub fn usage(&self) -> BTreeMap<String, Usage> {
        let mut out = BTreeMap::new();
        for pool in &self.pools {
            for (name, inst) in &pool.instances {
                for (i, s) in inst.slots.iter().enumerate() {
                    out.insert(format!("{name}-{i}"), s.usage.clone());
                }
            }
        }
        self.mig_usage(&mut out);
        out
    }

    /// Applies usage read back from the record (an agent restart, or other nodes'
    /// claims on a shared device). Slots of unknown devices are skipped; returns how
    /// many were applied. Restored claims get a full grace before they can be freed.
    pub fn restore(&mut self, usage: &BTreeMap<String, Usage>) -> usize {
        let mut applied = 0;
        for pool in &mut self.pools {
            for (name, inst) in pool.instances.iter_mut() {
                for (i, s) in inst.slots.iter_mut().enumerate() {
                    if let Some(u) = usage.get(&format!("{name}-{i}")) {
                        s.usage = u.clone();
                        s.seen = None;
                        applied += 1;
                    }
                }
            }
        }
        applied + self.restore_mig(usage)
    }

    /// Marks the devices (by [`Device::id`]) that virtual machines hold, and the MIG
    /// devices the server withholds (by [`withheld_mig`]); the others are unmarked.
    /// Returns whether anything kubelet sees changed.
    pub fn set_vm_held(&mut self, device_ids: &BTreeSet<String>) -> bool {
        let mut changed = self.set_mig_withheld(device_ids);
        for inst in self.pools.iter_mut().flat_map(|p| p.instances.values_mut()) {
            let held = device_ids.contains(&inst.device.id);
            changed |= inst.vm_held != held;
            inst.vm_held = held;
        }
        changed
    }

    /// Every slot this node holds, with its device and the pod kubelet lists it for:
    /// `pods` maps `(resource name, device id)`, as pod-resources reports them, to
    /// `<namespace>/<pod>`.
    pub fn claims(&self, pods: &HashMap<(String, String), String>) -> Vec<Claim> {
        let mut out = Vec::new();
        for pool in &self.pools {
            let pool_resource = format!("{}/{}", self.domain, pool.config.name);
            for (name, inst) in &pool.instances {
                let resource = format!("{}/{name}", self.domain);
                for (i, s) in inst.slots.iter().enumerate() {
                    if let Some(key) =
                        listed_as(&s.usage, &self.node, &resource, &pool_resource, name, i)
                    {
                        out.push(Claim {
                            slot: format!("{name}-{i}"),
                            device: inst.device.id.clone(),
                            pod: pods.get(&key).cloned(),
                            partition: None,
                        });
                    }
                }
            }
        }
        self.mig_claims(pods, &mut out);
        out
    }

    /// The present devices of each configuration, by instance name (CDI specs).
    pub fn devices_by_configuration(&self) -> Vec<(String, Vec<(String, Device)>)> {
        self.pools
            .iter()
            .map(|p| {
                (
                    p.config.name.clone(),
                    p.instances
                        .iter()
                        .filter(|(_, i)| i.present)
                        .map(|(n, i)| (n.clone(), i.device.clone()))
                        .collect(),
                )
            })
            .collect()
    }

    /// The set of virtual ids the pools of this node hold (tests, diagnostics).
    pub fn held_vdevs(&self) -> BTreeSet<String> {
        self.pools
            .iter()
            .flat_map(|p| p.instances.values())
            .flat_map(|i| i.slots.iter())
            .filter_map(|s| self.vdev_here(&s.usage).map(str::to_string))
            .collect()
    }
}

/// How kubelet's pod-resources API lists a slot this node holds: `(resource name,
/// device id)`, the slot id for the instance resource, the virtual id for the pool.
fn listed_as(
    u: &Usage,
    node: &str,
    resource: &str,
    pool_resource: &str,
    instance: &str,
    i: usize,
) -> Option<(String, String)> {
    match u {
        Usage::Node(n) if n == node => Some((resource.to_owned(), format!("{instance}-{i}"))),
        Usage::Pool { vdev, node: n } if n == node => {
            Some((pool_resource.to_owned(), vdev.clone()))
        }
        _ => None,
    }
}

fn held_here(u: &Usage, node: &str) -> bool {
    match u {
        Usage::Free => false,
        Usage::Node(n) => n == node,
        Usage::Pool { node: n, .. } => n == node,
    }
}

/// A virtual id is a decimal number (seed 001: "0", "1", ...).
fn vdev_number(id: &str) -> Option<u64> {
    (!id.is_empty() && id.len() <= 18 && id.bytes().all(|b| b.is_ascii_digit()))
        .then(|| id.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests;
