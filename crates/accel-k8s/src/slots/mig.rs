//! The MIG devices of the node's GPUs in MIG mode as kubelet resources (issue 45), named
//! as NVIDIA's device plugin names them in its "mixed" strategy: one resource per MIG
//! profile, `<domain>/mig-<profile>` (`accel.dev/mig-1g.10gb`; a `+` becomes a `.`,
//! `mig-1g.10gb.me`, since resource names allow no `+`), whose device ids are the MIG
//! devices' UUIDs.
//!
//! ```text
//! GPU 0000:3b:00.0, MIG mode, instances made by the operator (nvidia-smi mig -cgi/-C)
//! ├── MIG-aaaa…  1g.10gb at slice 6  ─┐
//! ├── MIG-bbbb…  1g.10gb at slice 5  ─┴▶ accel.dev/mig-1g.10gb  ids MIG-aaaa…, MIG-bbbb…
//! └── MIG-cccc…  2g.20gb at slice 0  ───▶ accel.dev/mig-2g.20gb  ids MIG-cccc…
//!     the GPU's own resources (accel.dev/gpu, accel.dev/gpu-<hash>): Unhealthy, no pool id
//! ```
//!
//! Only MIG devices that exist are offered: the plugins never make or destroy one (the
//! DRA driver does; an operator's layout is kept as it is). Each has one slot, held
//! through its profile's resource (`<node>` usage, slot `mig-<uuid>`), so a MIG device
//! is one container's at a time.
//!
//! What excludes what, on one GPU:
//! - a GPU in MIG mode with MIG devices is not offered whole (its instance slots are
//!   Unhealthy and the pool offers no id for it): a container given the whole GPU
//!   would share it with the MIG devices' holders, and the server's ledger refuses
//!   the whole GPU while instances stand on it;
//! - a GPU one of whose whole slots this node still holds (given before the instances
//!   were made) offers none of its MIG devices until that slot is freed;
//! - a MIG device the server withholds (its memory slices held in the GPU's ledger by a
//!   VM or a claim, the ledger refusing this node's pod there, its GPU being cleaned)
//!   is Unhealthy, as a whole device a VM holds is.

use super::{held_here, MigGrant, MigPlacement, Slot, SlotTable, Usage};
use crate::device::Device;
use crate::slots::{Advertised, AllocError, Claim, Grant};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

/// One MIG device of a GPU in MIG mode.
#[derive(Debug, Clone)]
pub(super) struct MigSlot {
    /// `MIG-<uuid>`: the kubelet device id and what the container is given.
    uuid: String,
    /// The profile's name (`1g.10gb`).
    profile: String,
    placement: MigPlacement,
    /// The GPU's instance name (`<configuration>-<hash>`): its whole slots and these
    /// exclude each other.
    gpu: String,
    /// The GPU.
    device: Device,
    present: bool,
    /// The server withholds it (a VM's or a claim's slices, its GPU being cleaned).
    withheld: bool,
    slot: Slot,
}

/// The name a MIG profile's resource takes after `<domain>/`: `mig-<profile>`, each
/// character a resource name does not allow (`+`) a `.`.
pub fn mig_resource(profile: &str) -> String {
    let name: String = profile
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '.'
            }
        })
        .collect();
    format!("mig-{name}")
}

/// The slot (usage map key, at most 63 lower-case characters, digits and `-`) of the
/// MIG device `uuid`: `mig-<uuid without its MIG- prefix>`, lower case, other
/// characters as `-`; cut and ended by a hash of the whole when longer.
pub fn mig_slot(uuid: &str) -> String {
    let rest = uuid.strip_prefix("MIG-").unwrap_or(uuid);
    let clean: String = rest
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let slot = format!("mig-{clean}");
    if slot.len() <= 63 {
        return slot;
    }
    let hash = crate::device::instance_hash("mig", uuid);
    format!("{}-{hash}", &slot[..54])
}

/// How the server's answer names a MIG device it withholds: its GPU's address and
/// placement (`0000:3b:00.0/mig-19-6`), beside the whole devices' addresses.
pub fn withheld_mig(gpu: &str, p: MigPlacement) -> String {
    format!("{gpu}/mig-{}-{}", p.profile_id, p.start)
}

/// Whether the device is a GPU in MIG mode with MIG devices: offered by them only.
pub(super) fn cut_into_mig(d: &Device) -> bool {
    d.partitions
        .as_ref()
        .is_some_and(|p| !p.instances.is_empty())
}

impl SlotTable {
    /// Makes the MIG slots follow the present GPUs' MIG devices (after
    /// [`SlotTable::set_devices`]). A MIG device that went away keeps its slot
    /// (Unhealthy) while this node holds it, as a whole device does. Returns whether
    /// anything kubelet sees changed.
    pub(super) fn sync_mig(&mut self) -> bool {
        let mut found: BTreeMap<String, MigSlot> = BTreeMap::new();
        for (gpu, inst) in self.pools.iter().flat_map(|p| p.instances.iter()) {
            let Some(p) = inst.device.partitions.as_ref().filter(|_| inst.present) else {
                continue;
            };
            for i in &p.instances {
                let Some(profile) = p.geometry.profile(i.profile_id) else {
                    tracing::warn!(gpu = %inst.device.id, uuid = %i.uuid, profile_id = i.profile_id,
                        "a MIG device of a profile the GPU does not list is not offered");
                    continue;
                };
                found.insert(
                    mig_slot(&i.uuid),
                    MigSlot {
                        uuid: i.uuid.clone(),
                        profile: profile.name.clone(),
                        placement: MigPlacement {
                            profile_id: i.profile_id,
                            start: i.placement.start,
                        },
                        gpu: gpu.clone(),
                        device: inst.device.clone(),
                        present: true,
                        withheld: false,
                        slot: Slot {
                            usage: Usage::Free,
                            seen: None,
                        },
                    },
                );
            }
        }
        let mut changed = false;
        for (name, m) in self.mig.iter_mut() {
            match found.remove(name) {
                Some(f) => {
                    if !m.present
                        || m.device != f.device
                        || m.placement != f.placement
                        || m.profile != f.profile
                    {
                        changed = true;
                    }
                    m.present = true;
                    m.device = f.device;
                    m.placement = f.placement;
                    m.profile = f.profile;
                    m.gpu = f.gpu;
                    m.uuid = f.uuid;
                }
                None if m.present => {
                    m.present = false;
                    changed = true;
                }
                None => {}
            }
        }
        changed |= !found.is_empty();
        self.mig.extend(found);
        let node = self.node.clone();
        self.mig.retain(|_, m| {
            let keep = m.present || held_here(&m.slot.usage, &node);
            changed |= !keep;
            keep
        });
        changed
    }

    /// The GPU's whole slots are all free (none held by any node's pod).
    fn gpu_whole_free(&self, gpu: &str) -> bool {
        self.pools
            .iter()
            .find_map(|p| p.instances.get(gpu))
            .is_none_or(|i| i.slots.iter().all(|s| s.usage == Usage::Free))
    }

    fn mig_offering(&self, m: &MigSlot) -> bool {
        m.present && m.device.healthy && !m.withheld && self.gpu_whole_free(&m.gpu)
    }

    /// The MIG profiles' resources: `(profile, resource name after the domain)`.
    pub(super) fn mig_profiles(&self) -> BTreeSet<String> {
        self.mig.values().map(|m| m.profile.clone()).collect()
    }

    /// The ListAndWatch list of a MIG profile's resource (`None`: no MIG device of it).
    pub(super) fn list_mig(&self, profile: &str) -> Option<Vec<Advertised>> {
        let list: Vec<Advertised> = self
            .mig
            .values()
            .filter(|m| m.profile == profile)
            .map(|m| Advertised {
                id: m.uuid.clone(),
                healthy: self.mig_offering(m)
                    && match &m.slot.usage {
                        Usage::Free => true,
                        Usage::Node(n) => *n == self.node,
                        Usage::Pool { .. } => false,
                    },
                numa_node: m.device.numa_node,
            })
            .collect();
        (!list.is_empty()).then_some(list)
    }

    /// Kubelet's Allocate on a MIG profile's resource: each id a MIG device of that
    /// profile, free and offered, or one this node holds already (kubelet re-offers an
    /// init container's). All or nothing.
    pub(super) fn allocate_mig(
        &mut self,
        profile: &str,
        containers: &[Vec<String>],
        now: Instant,
    ) -> Result<Vec<Vec<Grant>>, AllocError> {
        if !self.mig.values().any(|m| m.profile == profile) {
            return Err(AllocError::UnknownResource(mig_resource(profile)));
        }
        let mut mig = self.mig.clone();
        let mut out = Vec::with_capacity(containers.len());
        for ids in containers {
            let mut seen = HashSet::new();
            if let Some(dup) = ids.iter().find(|id| !seen.insert(id.as_str())) {
                return Err(AllocError::Duplicate(dup.clone()));
            }
            let mut grants = Vec::with_capacity(ids.len());
            for id in ids {
                let m = mig
                    .get_mut(&mig_slot(id))
                    .filter(|m| m.uuid == *id && m.profile == profile)
                    .ok_or_else(|| AllocError::UnknownId(id.clone()))?;
                let offering = self.mig_offering(m);
                match &m.slot.usage {
                    Usage::Free if offering => m.slot.usage = Usage::Node(self.node.clone()),
                    Usage::Free => return Err(AllocError::MigUnavailable(id.clone())),
                    Usage::Node(n) if *n == self.node => {}
                    other => {
                        return Err(AllocError::SlotTaken {
                            slot: id.clone(),
                            holder: other.to_string(),
                        })
                    }
                }
                m.slot.seen = Some(now);
                grants.push(Grant {
                    id: id.clone(),
                    instance: m.gpu.clone(),
                    slot: mig_slot(id),
                    usage: m.slot.usage.clone(),
                    device: m.device.clone(),
                    mig: Some(MigGrant {
                        uuid: m.uuid.clone(),
                        placement: m.placement,
                    }),
                });
            }
            out.push(grants);
        }
        self.mig = mig;
        Ok(out)
    }

    /// [`SlotTable::reclaim`] for the MIG slots: `(resource name, MIG UUID)` as
    /// pod-resources lists them.
    pub(super) fn reclaim_mig(
        &mut self,
        in_use: &HashSet<(String, String)>,
        now: Instant,
        grace: Duration,
    ) -> bool {
        let mut changed = false;
        for m in self.mig.values_mut() {
            if !held_here(&m.slot.usage, &self.node) {
                continue;
            }
            let key = (
                format!("{}/{}", self.domain, mig_resource(&m.profile)),
                m.uuid.clone(),
            );
            if in_use.contains(&key) {
                m.slot.seen = Some(now);
                continue;
            }
            match m.slot.seen {
                None => m.slot.seen = Some(now),
                Some(t) if now.saturating_duration_since(t) >= grace => {
                    tracing::info!(resource = %key.0, uuid = %m.uuid, "MIG device reclaimed: its container is gone");
                    m.slot = Slot {
                        usage: Usage::Free,
                        seen: None,
                    };
                    changed = true;
                }
                Some(_) => {}
            }
        }
        if changed {
            changed |= self.sync_mig();
        }
        changed
    }

    /// Frees the MIG slots among `slots`; returns whether any was held.
    pub(super) fn free_mig(&mut self, slots: &[String]) -> bool {
        let mut changed = false;
        for (name, m) in self.mig.iter_mut() {
            if m.slot.usage != Usage::Free && slots.contains(name) {
                m.slot = Slot {
                    usage: Usage::Free,
                    seen: None,
                };
                changed = true;
            }
        }
        changed
    }

    /// Per MIG profile's resource: its MIG devices and how many are held (metrics).
    pub(super) fn mig_counts(&self) -> Vec<(String, usize, usize)> {
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for m in self.mig.values() {
            let c = counts
                .entry(format!("{}/{}", self.domain, mig_resource(&m.profile)))
                .or_default();
            c.0 += 1;
            c.1 += usize::from(m.slot.usage != Usage::Free);
        }
        counts.into_iter().map(|(r, (t, u))| (r, t, u)).collect()
    }

    pub(super) fn mig_usage(&self, out: &mut BTreeMap<String, Usage>) {
        for (name, m) in &self.mig {
            out.insert(name.clone(), m.slot.usage.clone());
        }
    }

    pub(super) fn restore_mig(&mut self, usage: &BTreeMap<String, Usage>) -> usize {
        let mut applied = 0;
        for (name, m) in self.mig.iter_mut() {
            if let Some(u) = usage.get(name) {
                m.slot = Slot {
                    usage: u.clone(),
                    seen: None,
                };
                applied += 1;
            }
        }
        applied
    }

    /// Marks the MIG devices the server withholds (`withheld`: [`withheld_mig`]
    /// names); returns whether anything kubelet sees changed.
    pub(super) fn set_mig_withheld(&mut self, withheld: &BTreeSet<String>) -> bool {
        let mut changed = false;
        for m in self.mig.values_mut() {
            let w = withheld.contains(&withheld_mig(&m.device.id, m.placement));
            changed |= m.withheld != w;
            m.withheld = w;
        }
        changed
    }

    /// The MIG slots this node holds, with their GPU, placement and pod.
    pub(super) fn mig_claims(
        &self,
        pods: &HashMap<(String, String), String>,
        out: &mut Vec<Claim>,
    ) {
        for (name, m) in &self.mig {
            if !held_here(&m.slot.usage, &self.node) {
                continue;
            }
            let key = (
                format!("{}/{}", self.domain, mig_resource(&m.profile)),
                m.uuid.clone(),
            );
            out.push(Claim {
                slot: name.clone(),
                device: m.device.id.clone(),
                pod: pods.get(&key).cloned(),
                partition: Some(m.placement),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Configuration, KubernetesConfig, Selector};
    use crate::device::{Instance, Partitioning};
    use crate::slots::ResourceKey;
    use accel_core::partition::Span;

    const NODE: &str = "node-a";
    const H100: &str = "0000:3b:00.0";
    const PLAIN: &str = "0000:5e:00.0";

    fn uuid(n: u8) -> String {
        format!("MIG-{n:08x}-0000-4000-8000-000000000000")
    }

    /// An H100 in MIG mode with two 1g.10gb (profile 19) at slices 6 and 5 and one
    /// 2g.20gb (profile 14) at 0, and a GPU without MIG.
    fn table() -> SlotTable {
        let config = KubernetesConfig {
            configurations: vec![Configuration {
                name: "gpu".into(),
                capacity: 1,
                selector: Selector::default(),
            }],
            ..KubernetesConfig::default()
        };
        let mut t = SlotTable::new(NODE, &config);
        let at = |profile_id, start, size, n| Instance {
            profile_id,
            placement: Span { start, size },
            uuid: uuid(n),
        };
        let h100 = Device {
            partitions: Some(Partitioning {
                geometry: accel_core::partition::fixtures::h100_80gb(),
                instances: vec![at(19, 6, 1, 1), at(19, 5, 1, 2), at(14, 0, 2, 3)],
            }),
            ..crate::testing::device(H100, "GPU")
        };
        assert!(t.set_devices(&[h100, crate::testing::device(PLAIN, "GPU")]));
        t
    }

    fn mig(profile: &str) -> ResourceKey {
        ResourceKey::Mig(profile.into())
    }

    fn listed(t: &SlotTable, key: &ResourceKey) -> Vec<(String, bool)> {
        t.list(key)
            .unwrap()
            .into_iter()
            .map(|a| (a.id, a.healthy))
            .collect()
    }

    #[test]
    fn names_follow_nvidias_mixed_strategy_and_fit_a_slot() {
        assert_eq!(mig_resource("1g.10gb"), "mig-1g.10gb");
        assert_eq!(mig_resource("1g.10gb+me"), "mig-1g.10gb.me");
        let s = mig_slot(&uuid(1));
        assert_eq!(s, "mig-00000001-0000-4000-8000-000000000000");
        let long = mig_slot("MIG-GPU-6f1c1a52-0000-4d7f-9a39-0123456789ab/11/0");
        assert!(long.len() <= 63, "{long}");
        assert!(long
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
    }

    #[test]
    fn each_profile_with_devices_is_a_resource_of_their_uuids_and_the_gpu_is_not_whole() {
        let t = table();
        let names: Vec<String> = t.resources().into_iter().map(|r| r.name).collect();
        assert!(
            names.contains(&"accel.dev/mig-1g.10gb".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"accel.dev/mig-2g.20gb".to_string()),
            "{names:?}"
        );
        assert!(!names.iter().any(|n| n.contains("3g")), "{names:?}");
        assert_eq!(
            listed(&t, &mig("1g.10gb")),
            vec![(uuid(1), true), (uuid(2), true)]
        );
        assert_eq!(listed(&t, &mig("2g.20gb")), vec![(uuid(3), true)]);
        assert!(t.list(&mig("3g.40gb")).is_none());
        // The pool offers the plain GPU only; the H100's own slot is Unhealthy.
        assert_eq!(
            listed(&t, &ResourceKey::Pool("gpu".into())),
            vec![("0".to_string(), true)]
        );
        let whole = format!("gpu-{}", crate::device::instance_hash(NODE, H100));
        assert_eq!(
            listed(&t, &ResourceKey::Instance(whole.clone())),
            vec![(format!("{whole}-0"), false)]
        );
    }

    #[test]
    fn a_grant_is_the_mig_device_claimed_at_its_placement_until_reclaimed() {
        let mut t = table();
        let now = Instant::now();
        let g = t.allocate(&mig("1g.10gb"), &[vec![uuid(2)]], now).unwrap();
        let m = g[0][0].mig.clone().unwrap();
        assert_eq!(m.uuid, uuid(2));
        let placement = MigPlacement {
            profile_id: 19,
            start: 5,
        };
        assert_eq!(m.placement, placement);
        assert_eq!(g[0][0].withheld_key(), format!("{H100}/mig-19-5"));
        // The same device again for this node (kubelet's repeat), not for a second id list
        // naming a device of another profile.
        assert!(t.allocate(&mig("1g.10gb"), &[vec![uuid(2)]], now).is_ok());
        assert_eq!(
            t.allocate(&mig("1g.10gb"), &[vec![uuid(3)]], now),
            Err(AllocError::UnknownId(uuid(3)))
        );
        let resource = "accel.dev/mig-1g.10gb".to_string();
        let pods: HashMap<(String, String), String> =
            [((resource.clone(), uuid(2)), "ns/p".to_string())].into();
        let claims = t.claims(&pods);
        assert_eq!(
            claims,
            vec![Claim {
                slot: mig_slot(&uuid(2)),
                device: H100.into(),
                pod: Some("ns/p".into()),
                partition: Some(placement),
            }]
        );
        assert_eq!(
            t.usage().get(&mig_slot(&uuid(2))),
            Some(&Usage::Node(NODE.into()))
        );
        // Listed: kept; not listed past the grace: freed.
        let grace = Duration::from_secs(30);
        let listed_now: HashSet<(String, String)> = [(resource, uuid(2))].into();
        assert!(!t.reclaim(&listed_now, now, grace));
        assert!(!t.reclaim(&HashSet::new(), now + grace / 2, grace));
        assert!(t.reclaim(&HashSet::new(), now + grace * 2, grace));
        assert!(t.claims(&HashMap::new()).is_empty());
    }

    #[test]
    fn what_the_server_withholds_and_a_gpu_held_whole_offer_no_mig_device() {
        let mut t = table();
        let now = Instant::now();
        let two_g = BTreeSet::from([withheld_mig(
            H100,
            MigPlacement {
                profile_id: 14,
                start: 0,
            },
        )]);
        assert!(t.set_vm_held(&two_g));
        assert_eq!(listed(&t, &mig("2g.20gb")), vec![(uuid(3), false)]);
        assert_eq!(
            t.allocate(&mig("2g.20gb"), &[vec![uuid(3)]], now),
            Err(AllocError::MigUnavailable(uuid(3)))
        );
        assert_eq!(listed(&t, &mig("1g.10gb")).len(), 2);
        assert!(t.set_vm_held(&BTreeSet::new()));
        assert_eq!(listed(&t, &mig("2g.20gb")), vec![(uuid(3), true)]);

        // A whole slot of the GPU held from before its instances were made (restored):
        // its MIG devices wait for it.
        let whole = format!("gpu-{}-0", crate::device::instance_hash(NODE, H100));
        t.restore(&[(whole, Usage::Node(NODE.into()))].into());
        assert!(listed(&t, &mig("1g.10gb")).iter().all(|(_, h)| !h));

        // The instances go (the operator destroyed them): the profiles' resources go,
        // and the GPU is offered whole again.
        let mut t = table();
        let mut bare = t.pools[0].instances.values().next().unwrap().device.clone();
        assert_eq!(bare.id, H100);
        bare.partitions.as_mut().unwrap().instances.clear();
        assert!(t.set_devices(&[bare, crate::testing::device(PLAIN, "GPU")]));
        assert!(t.list(&mig("1g.10gb")).is_none());
        assert_eq!(
            listed(&t, &ResourceKey::Pool("gpu".into())),
            vec![("0".to_string(), true), ("1".to_string(), true)]
        );
    }
}
