//! The device plugins' MIG devices in the GPUs' ledgers (issue 45): a pod given a MIG
//! device through `<domain>/mig-<profile>` holds it in its GPU's partition ledger at
//! the instance's actual placement, exactly as a DRA claim does (`partitions::pin`), in
//! the usage save's transaction; the allocation goes on the profile's provider.
//!
//! ```text
//! read      claims with a partition, by GPU and pod consumer; the GPU's ledger read
//!           GPU unknown, not partitioned, or being cleaned ──▶ refused (withheld)
//! changed?  every consumer holds exactly its placements ──▶ nothing locked or pinned
//! lock      the ledgers' rows, before the save's first provider lock (its deletes)
//! pin       after the deletes (a slot consumer replaced by its pod's lets go first),
//!           one placement at a time, so one in the way (a VM's slice, a VM holding
//!           the GPU whole) is refused alone ──▶ withheld; the others held
//! withheld  the answer: every MIG device of the host's GPUs whose placement does not
//!           fit beside the holders that are not this host's pods, every one of a GPU
//!           being cleaned, and the refused ones
//! ```
//!
//! A refusal never fails the save: the agent reads the answer, withdraws the device
//! and refuses the Allocate that granted it, as for a whole device a VM holds.

use super::{pod_consumer, slot_consumer, HostDevice, ProviderAmounts, SlotClaim};
use crate::partitions::{self, Ledger, Pin};
use crate::{StoreError, Tx};
use accel_core::partition::{Consumer, Member};
use std::collections::{BTreeMap, BTreeSet};

/// Per pod consumer, its slots' placements, in slot order.
type ByConsumer = BTreeMap<String, Vec<(String, Pin)>>;

/// One GPU's MIG devices in a save.
struct Gpu {
    address: String,
    rp_uuids: Vec<String>,
    ledger: Ledger,
    by_consumer: ByConsumer,
}

/// The MIG devices of a save, as they go through it.
pub(super) struct Parts {
    gpus: Vec<Gpu>,
    locked: bool,
    /// Placements refused, by GPU address.
    pub(super) refused: BTreeSet<(String, u32, u32)>,
}

/// Withholds a pod's MIG device, counted in `accel_gpu_partition_refusals`.
fn refuse(refused: &mut BTreeSet<(String, u32, u32)>, address: &str, p: Pin) {
    crate::stats::partition_refused();
    refused.insert((address.to_owned(), p.profile_id, p.start));
}

impl Parts {
    /// The claims of MIG devices grouped by GPU and consumer, each GPU's ledger read.
    pub(super) async fn read(
        tx: &mut Tx,
        host: &str,
        devices: &BTreeMap<String, HostDevice>,
        by_slot: &BTreeMap<&str, &SlotClaim>,
    ) -> Result<Parts, StoreError> {
        let mut grouped: BTreeMap<&str, ByConsumer> = BTreeMap::new();
        for c in by_slot.values() {
            let Some(pin) = c.partition else { continue };
            let consumer = match &c.pod {
                Some(pod) => pod_consumer(host, pod),
                None => slot_consumer(host, &c.slot),
            };
            grouped
                .entry(c.device.as_str())
                .or_default()
                .entry(consumer)
                .or_default()
                .push((c.slot.clone(), pin));
        }
        let mut out = Parts {
            gpus: Vec::new(),
            locked: false,
            refused: BTreeSet::new(),
        };
        if grouped.is_empty() {
            return Ok(out);
        }
        let uuids: Vec<&str> = devices
            .values()
            .flat_map(|d| d.providers.iter().map(|p| p.uuid.as_str()))
            .collect();
        let uncleaned = super::super::report::uncleaned(tx, &uuids).await?;
        for (address, by_consumer) in grouped {
            let all = || by_consumer.values().flatten().map(|(_, p)| *p);
            let Some(d) = devices.get(address) else {
                tracing::warn!(%host, device = %address, "a pod's MIG device is on a GPU the host did not report: not held");
                all().for_each(|p| refuse(&mut out.refused, address, p));
                continue;
            };
            if d.providers.iter().any(|p| uncleaned.contains(&p.uuid)) {
                tracing::warn!(%host, device = %address, "a pod's MIG device is on a GPU being cleaned: not held");
                all().for_each(|p| refuse(&mut out.refused, address, p));
                continue;
            }
            let rp_uuids: Vec<String> = d.providers.iter().map(|p| p.uuid.clone()).collect();
            let mut ledger = None;
            for u in &rp_uuids {
                if let Some(l) = partitions::rows::by_gpu(tx, u).await? {
                    ledger = Some(l);
                    break;
                }
            }
            let Some(ledger) = ledger else {
                tracing::warn!(%host, device = %address, "a pod's MIG device is on a GPU reported without partitions: not held");
                all().for_each(|p| refuse(&mut out.refused, address, p));
                continue;
            };
            out.gpus.push(Gpu {
                address: address.to_owned(),
                rp_uuids,
                ledger,
                by_consumer,
            });
        }
        out.gpus.sort_by_key(|g| g.ledger.id);
        Ok(out)
    }

    /// The pod consumers holding MIG devices on a known GPU.
    pub(super) fn consumers(&self) -> BTreeSet<String> {
        self.gpus
            .iter()
            .flat_map(|g| g.by_consumer.keys().cloned())
            .collect()
    }

    /// Whether some consumer does not hold exactly its placements yet.
    pub(super) fn changed(&self) -> bool {
        self.gpus.iter().any(|g| {
            g.by_consumer.iter().any(|(c, slots)| {
                let pins: Vec<Pin> = slots.iter().map(|(_, p)| *p).collect();
                !partitions::holds_pins(&g.ledger, c, &pins)
            })
        })
    }

    /// Takes the ledgers' row locks (in id order; before any provider's).
    pub(super) async fn lock(&mut self, tx: &mut Tx) -> Result<(), StoreError> {
        for g in &mut self.gpus {
            if let Some(l) = partitions::locked_ledger(tx, &g.rp_uuids).await? {
                g.ledger = l;
            }
        }
        self.locked = true;
        Ok(())
    }

    /// Holds each consumer's placements (when locked: read again first, after the
    /// save's deletes), one at a time; a refused one is logged and withheld. Answers,
    /// per consumer and GPU, the allocation on the profiles' providers.
    pub(super) async fn pin(
        &mut self,
        tx: &mut Tx,
    ) -> Result<Vec<(String, (String, ProviderAmounts))>, StoreError> {
        let mut out = Vec::new();
        for g in &mut self.gpus {
            if self.locked {
                if let Some(l) = partitions::locked_ledger(tx, &g.rp_uuids).await? {
                    g.ledger = l;
                }
            }
            for (consumer, slots) in &g.by_consumer {
                let pins: Vec<Pin> = slots.iter().map(|(_, p)| *p).collect();
                let held = if partitions::holds_pins(&g.ledger, consumer, &pins) {
                    pins
                } else if self.locked {
                    let mut accepted: Vec<Pin> = Vec::new();
                    for (slot, p) in slots {
                        let mut trial = accepted.clone();
                        trial.push(*p);
                        match partitions::pin(tx, &mut g.ledger, consumer, &trial).await? {
                            Ok(_) => accepted = trial,
                            Err(why) => {
                                tracing::warn!(device = %g.address, %slot, %consumer,
                                    profile_id = p.profile_id, start = p.start, ?why,
                                    "a pod's MIG device is not held: the GPU's ledger refuses its placement");
                                refuse(&mut self.refused, &g.address, *p);
                            }
                        }
                    }
                    accepted
                } else {
                    // Unchanged saves lock nothing: `changed` said every pin is held.
                    Vec::new()
                };
                let amounts = amounts(&g.ledger, &held);
                out.push((consumer.clone(), (g.address.clone(), amounts)));
            }
        }
        Ok(out)
    }
}

/// One unit of each pin's profile on that profile's provider, gathered.
fn amounts(l: &Ledger, pins: &[Pin]) -> ProviderAmounts {
    let mut n: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for p in pins {
        let member = Member::Mig(p.profile_id);
        let (Some(rp), Some(class)) = (
            l.members
                .iter()
                .find(|(_, m)| *m == member)
                .map(|(u, _)| u.clone()),
            member.resource_class(&l.geometry),
        ) else {
            continue;
        };
        *n.entry(rp).or_default().entry(class).or_insert(0) += 1;
    }
    n.into_iter()
        .map(|(rp, c)| (rp, c.into_iter().collect()))
        .collect()
}

/// The MIG devices of `host`'s GPUs no pod may be given: on a GPU being cleaned, or
/// whose placement does not fit beside the holders that are not `keep` (this host's
/// pod consumers), and those `refused`. In GPU address and placement order.
pub(super) async fn withheld(
    tx: &mut Tx,
    host: &str,
    devices: &BTreeMap<String, HostDevice>,
    keep: &BTreeSet<String>,
    refused: &BTreeSet<(String, u32, u32)>,
) -> Result<Vec<(String, Pin)>, StoreError> {
    let mut out = refused.clone();
    let ledgers = partitions::rows::of_host(tx, host).await?;
    if !ledgers.is_empty() {
        let uuids: Vec<&str> = devices
            .values()
            .flat_map(|d| d.providers.iter().map(|p| p.uuid.as_str()))
            .collect();
        let uncleaned = super::super::report::uncleaned(tx, &uuids).await?;
        for l in &ledgers {
            let Some((address, d)) = devices
                .iter()
                .find(|(_, d)| d.providers.iter().any(|p| p.uuid == l.rp_uuid))
            else {
                continue;
            };
            let cleaning = d.providers.iter().any(|p| uncleaned.contains(&p.uuid));
            let others: Vec<Consumer> = l
                .holders
                .iter()
                .filter(|h| !keep.contains(&h.consumer))
                .map(|h| h.holder.clone())
                .collect();
            for s in &l.geometry.standing {
                let c = Consumer::Mig {
                    profile: s.profile_id,
                    at: s.at,
                };
                if cleaning || l.geometry.fits(&others, &c).is_err() {
                    out.insert((address.clone(), s.profile_id, s.at.start));
                }
            }
        }
    }
    Ok(out
        .into_iter()
        .map(|(a, profile_id, start)| (a, Pin { profile_id, start }))
        .collect())
}
