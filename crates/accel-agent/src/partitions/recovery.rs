//! [`Partitions::after_boot`]: the node's partitions accounted for when the agent
//! starts, against what the server says is held.
//!
//! ```text
//! held (server) ─┬─ exists, ours, same holder ─────────▶ kept (same UUID)
//!                ├─ exists, not in the checkpoint ─────▶ adopted (reported re-created)
//!                ├─ exists, ours, another holder ──────▶ destroyed, then created again
//!                └─ missing (reboot, crash half-way) ──▶ created again (new UUID) | lost
//! ours (checkpoint, this boot), held by no one, there ──▶ destroyed (released)
//! ```
//!
//! A new boot id means the node rebooted: MIG layouts and non-persistent mdevs are
//! gone, so the checkpoint's partitions are not looked for, only the held ones made.

use super::checkpoint::{Checkpoint, HeldMdev, HeldMig};
use super::{boot_id, vgpu, PartitionError, Partitions};
use crate::pci::PciAddress;
use accel_api::partitions::{MigInstance, MigPlacement};
use std::collections::BTreeMap;

/// A partition the server says is held (what [`Partitions::after_boot`] makes exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Mig {
        gpu: PciAddress,
        profile_id: u32,
        placement: MigPlacement,
        holder: String,
    },
    Mdev {
        parent: PciAddress,
        type_id: String,
        uuid: String,
        holder: String,
    },
}

/// A held MIG partition made again: new GPU and compute instance ids and a new UUID,
/// which its consumer must be given (CDI device, attach handle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recreated {
    pub gpu: PciAddress,
    pub holder: String,
    /// The UUID it had before, when this agent made it before.
    pub old_uuid: Option<String>,
    pub instance: MigInstance,
}

/// A held partition that could not be made again, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub held: Held,
    pub reason: String,
}

/// What [`Partitions::after_boot`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The boot id differs from the checkpoint's: the node rebooted.
    pub rebooted: bool,
    /// Held MIG partitions that still exist, UUID unchanged.
    pub kept: Vec<HeldMig>,
    pub recreated: Vec<Recreated>,
    pub lost: Vec<Lost>,
    /// MIG devices this agent made that no one holds any more: destroyed.
    pub released: Vec<HeldMig>,
    pub mdevs_kept: Vec<HeldMdev>,
    /// Held mdevs made again (same UUID: the agent chooses mdev UUIDs).
    pub mdevs_recreated: Vec<HeldMdev>,
    pub mdevs_released: Vec<HeldMdev>,
}

/// One held MIG slot.
struct Slot<'a> {
    held: &'a Held,
    gpu: PciAddress,
    profile_id: u32,
    placement: MigPlacement,
    holder: &'a str,
}

impl Slot<'_> {
    fn record(&self, instance: MigInstance) -> HeldMig {
        HeldMig {
            gpu: self.gpu.to_string(),
            holder: self.holder.to_owned(),
            instance,
        }
    }

    fn lost(&self, reason: String) -> Lost {
        Lost {
            held: self.held.clone(),
            reason,
        }
    }
}

/// The state of one [`Partitions::after_boot`] pass.
struct Pass {
    before: Checkpoint,
    /// The checkpoint's MIG devices of this boot (none after a reboot).
    ours: Vec<HeldMig>,
    /// The MIG devices of each GPU concerned, or why NVML could not say.
    live: BTreeMap<PciAddress, Result<Vec<MigInstance>, PartitionError>>,
    /// UUIDs that serve a held slot.
    used: Vec<String>,
    next: Checkpoint,
    out: Recovery,
}

impl Partitions {
    /// Accounts for the partitions after the agent starts, against `held` (what the
    /// server says is held on this node): each held MIG partition that exists is kept,
    /// one that does not (a reboot, a crash half-way) is created again at its placement
    /// (a new UUID), one that cannot be is lost with the reason; MIG devices and mdevs
    /// this agent made that no one holds are destroyed. Partitions the agent did not
    /// make are never destroyed.
    pub fn after_boot(&self, held: &[Held]) -> Result<Recovery, PartitionError> {
        let _g = self.guard();
        let before = Checkpoint::load(&self.settings.state_dir)?;
        let boot = boot_id(&self.settings.boot_id_file);
        let rebooted = !before.boot_id.is_empty() && before.boot_id != boot;
        if rebooted {
            tracing::info!(previous_boot = %before.boot_id, boot = %boot, mig = before.mig.len(),
                mdevs = before.mdevs.len(), "the node rebooted: re-creating the partitions the server says are held");
        }
        let mut pass = Pass {
            ours: if rebooted {
                Vec::new()
            } else {
                before.mig.clone()
            },
            before,
            live: BTreeMap::new(),
            used: Vec::new(),
            next: Checkpoint {
                boot_id: boot,
                ..Checkpoint::default()
            },
            out: Recovery {
                rebooted,
                ..Recovery::default()
            },
        };
        self.look(&mut pass, held);
        for h in held {
            if let Held::Mig {
                gpu,
                profile_id,
                placement,
                holder,
            } = h
            {
                let slot = Slot {
                    held: h,
                    gpu: *gpu,
                    profile_id: *profile_id,
                    placement: *placement,
                    holder,
                };
                self.recover(&mut pass, &slot);
            }
        }
        self.release_unheld(&mut pass);
        self.mdevs_after_boot(held, rebooted, &mut pass);
        self.save(&pass.next)?;
        Ok(pass.out)
    }

    /// Asks NVML once per GPU concerned which MIG devices exist.
    fn look(&self, pass: &mut Pass, held: &[Held]) {
        let mut gpus: Vec<PciAddress> = pass
            .ours
            .iter()
            .filter_map(|m| m.gpu.parse().ok())
            .collect();
        gpus.extend(held.iter().filter_map(|h| match h {
            Held::Mig { gpu, .. } => Some(*gpu),
            Held::Mdev { .. } => None,
        }));
        for gpu in gpus {
            pass.live.entry(gpu).or_insert_with(|| {
                self.mig()
                    .and_then(|m| m.instances(gpu).map_err(PartitionError::Mig))
            });
        }
    }

    /// Makes one held slot exist, or says why it cannot.
    fn recover(&self, pass: &mut Pass, slot: &Slot) {
        let existing = match pass.live.get(&slot.gpu) {
            Some(Ok(list)) => list
                .iter()
                .find(|i| i.profile_id == slot.profile_id && i.placement == slot.placement)
                .cloned(),
            Some(Err(e)) => {
                tracing::warn!(gpu = %slot.gpu, profile_id = slot.profile_id, start = slot.placement.start,
                    holder = slot.holder, cause = %e, "a held MIG partition is lost: its GPU cannot be asked");
                self.count("mig", "recreate", false);
                let lost = slot.lost(e.to_string());
                pass.out.lost.push(lost);
                return;
            }
            None => None,
        };
        if let Some(i) = existing {
            if self.keep_or_clear(pass, slot, i) {
                return;
            }
        }
        self.create_again(pass, slot);
    }

    /// What to do with a MIG device that exists at a held slot: keep it (true), or
    /// destroy it because it was made for another holder (false: create again).
    fn keep_or_clear(&self, pass: &mut Pass, slot: &Slot, i: MigInstance) -> bool {
        let Some(m) = pass
            .ours
            .iter()
            .find(|m| m.instance.uuid == i.uuid)
            .cloned()
        else {
            // There, but not in the checkpoint (a crash before it was written): it
            // serves the slot as it is.
            tracing::info!(gpu = %slot.gpu, profile_id = slot.profile_id, start = slot.placement.start,
                holder = slot.holder, uuid = %i.uuid, "a held MIG partition exists and is adopted");
            pass.used.push(i.uuid.clone());
            pass.out.recreated.push(Recreated {
                gpu: slot.gpu,
                holder: slot.holder.to_owned(),
                old_uuid: self.previous(pass, slot),
                instance: i.clone(),
            });
            pass.next.mig.push(slot.record(i));
            return true;
        };
        if m.holder == slot.holder {
            pass.used.push(i.uuid.clone());
            pass.out.kept.push(slot.record(i.clone()));
            pass.next.mig.push(slot.record(i));
            return true;
        }
        // Ours, made for someone else: a release the agent missed. The new holder gets
        // a fresh one, not the old one's memory.
        let gone = self.mig().and_then(|x| {
            x.destroy(slot.gpu, i.gpu_instance_id, i.compute_instance_id)
                .map_err(PartitionError::Mig)
        });
        self.count("mig", "destroy", gone.is_ok());
        if let Err(e) = gone {
            tracing::warn!(gpu = %slot.gpu, uuid = %i.uuid, holder = %m.holder, cause = %e,
                "a MIG instance made for another holder cannot be destroyed");
            pass.used.push(i.uuid.clone());
            pass.next.mig.push(m);
            pass.out.lost.push(slot.lost(e.to_string()));
            return true;
        }
        tracing::info!(gpu = %slot.gpu, uuid = %i.uuid, previous_holder = %m.holder, holder = slot.holder,
            "a MIG instance made for another holder was destroyed");
        if let Some(Ok(list)) = pass.live.get_mut(&slot.gpu) {
            list.retain(|x| x.uuid != i.uuid);
        }
        pass.out.released.push(m);
        false
    }

    /// The UUID the slot had in the checkpoint, if any.
    fn previous(&self, pass: &Pass, slot: &Slot) -> Option<String> {
        pass.before
            .mig
            .iter()
            .find(|m| {
                m.gpu == slot.gpu.to_string()
                    && m.instance.profile_id == slot.profile_id
                    && m.instance.placement == slot.placement
            })
            .map(|m| m.instance.uuid.clone())
    }

    /// Creates a held slot's MIG device again.
    fn create_again(&self, pass: &mut Pass, slot: &Slot) {
        let made = self.mig().and_then(|m| {
            m.create(slot.gpu, slot.profile_id, slot.placement)
                .map_err(|source| PartitionError::Create {
                    gpu: slot.gpu,
                    profile_id: slot.profile_id,
                    placement: slot.placement,
                    source,
                })
        });
        self.count("mig", "recreate", made.is_ok());
        let old_uuid = self.previous(pass, slot);
        match made {
            Ok(i) => {
                tracing::info!(gpu = %slot.gpu, profile_id = slot.profile_id, start = slot.placement.start,
                    holder = slot.holder, uuid = %i.uuid, old_uuid = old_uuid.as_deref().unwrap_or(""),
                    "a held MIG partition was re-created");
                if let Some(Ok(list)) = pass.live.get_mut(&slot.gpu) {
                    list.push(i.clone());
                }
                pass.used.push(i.uuid.clone());
                pass.out.recreated.push(Recreated {
                    gpu: slot.gpu,
                    holder: slot.holder.to_owned(),
                    old_uuid,
                    instance: i.clone(),
                });
                pass.next.mig.push(slot.record(i));
            }
            Err(e) => {
                tracing::warn!(gpu = %slot.gpu, profile_id = slot.profile_id, start = slot.placement.start,
                    holder = slot.holder, cause = %e, "a held MIG partition is lost: it cannot be re-created");
                pass.out.lost.push(slot.lost(e.to_string()));
            }
        }
    }

    /// Destroys this boot's MIG devices of ours that no held slot uses (a release the
    /// agent missed); one that cannot be destroyed stays in the checkpoint.
    fn release_unheld(&self, pass: &mut Pass) {
        let unheld: Vec<HeldMig> = pass
            .ours
            .iter()
            .filter(|m| !pass.used.contains(&m.instance.uuid))
            .cloned()
            .collect();
        for m in unheld {
            let Ok(gpu) = m.gpu.parse::<PciAddress>() else {
                continue;
            };
            let there = matches!(pass.live.get(&gpu), Some(Ok(l)) if l.iter().any(|i| i.uuid == m.instance.uuid));
            if !there {
                continue;
            }
            let i = &m.instance;
            let gone = self.mig().and_then(|x| {
                x.destroy(gpu, i.gpu_instance_id, i.compute_instance_id)
                    .map_err(PartitionError::Mig)
            });
            self.count("mig", "destroy", gone.is_ok());
            match gone {
                Ok(()) => {
                    tracing::info!(%gpu, uuid = %i.uuid, holder = %m.holder, "a MIG instance no one holds was destroyed");
                    pass.out.released.push(m);
                }
                Err(e) => {
                    tracing::warn!(%gpu, uuid = %i.uuid, holder = %m.holder, cause = %e,
                        "destroying a MIG instance no one holds failed; kept in the checkpoint");
                    pass.next.mig.push(m);
                }
            }
        }
    }

    /// Held mdevs made again when missing (with `create_mdev_at_bind`), ours that no
    /// one holds removed (same boot only).
    fn mdevs_after_boot(&self, held: &[Held], rebooted: bool, pass: &mut Pass) {
        let mut wanted = Vec::new();
        for h in held {
            let Held::Mdev {
                parent,
                type_id,
                uuid,
                holder,
            } = h
            else {
                continue;
            };
            wanted.push(uuid.clone());
            let entry = HeldMdev {
                parent: parent.to_string(),
                type_id: type_id.clone(),
                uuid: uuid.clone(),
                holder: holder.clone(),
            };
            if vgpu::mdev_path(&self.sysfs_root, uuid).is_dir() {
                pass.out.mdevs_kept.push(entry.clone());
                pass.next.mdevs.push(entry);
                continue;
            }
            if !self.settings.create_mdev_at_bind {
                continue;
            }
            let made = vgpu::create_mdev(&self.sysfs_root, *parent, type_id, uuid);
            self.count("mdev", "recreate", made.is_ok());
            match made {
                Ok(()) => {
                    tracing::info!(%parent, type_id, uuid, holder, "a held mdev was re-created");
                    pass.out.mdevs_recreated.push(entry.clone());
                    pass.next.mdevs.push(entry);
                }
                Err(e) => {
                    tracing::warn!(%parent, type_id, uuid, holder, cause = %e, "a held mdev is lost");
                    pass.out.lost.push(Lost {
                        held: h.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        if rebooted {
            return;
        }
        let unheld: Vec<HeldMdev> = pass
            .before
            .mdevs
            .iter()
            .filter(|m| !wanted.contains(&m.uuid))
            .cloned()
            .collect();
        for m in unheld {
            if !vgpu::mdev_path(&self.sysfs_root, &m.uuid).is_dir() {
                continue;
            }
            let gone = vgpu::remove_mdev(&self.sysfs_root, &m.uuid);
            self.count("mdev", "destroy", gone.is_ok());
            match gone {
                Ok(()) => pass.out.mdevs_released.push(m),
                Err(e) => {
                    tracing::warn!(uuid = %m.uuid, cause = %e, "removing an mdev no one holds failed");
                    pass.next.mdevs.push(m);
                }
            }
        }
    }
}
