//! Kubernetes DRA claims on the shared inventory (issue 30): a ResourceClaim the
//! kubelet asks the node's driver to prepare becomes one Placement consumer whose uuid
//! is the claim's uid, of consumer type [`CONSUMER_TYPE`], holding each of its devices
//! whole, exactly as the device plugins' pods do ([`super::kubernetes`]): the same
//! allocation write (`allocations::prepare` + `apply`: provider locks, capacity
//! re-check, change-log touches), so a device is never a VM's and a pod's at once,
//! whichever asked first.
//!
//! ```text
//! prepare(host, uid, addresses, parts)                one transaction
//!   each part (a MIG device: GPU address, profile, start) ──▶ the GPU's ledger locked
//!                ──no ledger / profile / placement──▶ refused
//!   each address ──not a device of host──▶ refused: unknown device
//!                ──an ARQ, or another consumer's allocation──▶ refused: held (by whom)
//!                ──reserved (unhealthy, vanished, maintaining)──▶ refused: unavailable
//!   allocations of consumer uid == wanted, holders at the parts ──▶ nothing written
//!   each part pinned in its ledger (partitions::pin) ──a holder in the way──▶ refused,
//!                naming a VM or a pod
//!   otherwise ──▶ replaced (the parts on their profile's provider, which settle keeps
//!                at the pinned placement); a capacity refusal (a racing claimer) ──▶ refused: held
//! unprepare(uid) ──▶ the consumer's allocations deleted (none: nothing to do); a
//!                    consumer of another type is never touched
//! ```
//!
//! The allocation (with, for a MIG device, the ledger's holder at its placement) is the
//! whole record: a restarted agent replays the kubelet's calls and finds them done, so
//! no table of its own is needed. A device given whole takes the GPU's own provider,
//! never its profiles' (the whole form already takes every slice).

use super::kubernetes::{held_by_vm, holds_exactly, host_devices, whole_amounts, HostDevice};
use crate::partitions::{self, Pin, PinRefusal};
use crate::placement::allocations::{self, ConsumerWrite};
use crate::{Refusable, Store, StoreError, Tx};
use std::collections::{BTreeMap, BTreeSet};

/// The consumer type of a prepared claim's allocations (declared beside the pods' in
/// [`super::kubernetes`], which tells the two apart).
pub use super::kubernetes::CLAIM_CONSUMER_TYPE as CONSUMER_TYPE;

/// Why a claim cannot be prepared: the data says no, nothing was written. Each names
/// the device's address (the accelerator API words them).
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimRefusal {
    /// The host reported no device at this address.
    UnknownDevice(String),
    /// A virtual machine (an ARQ, or a non-Kubernetes consumer's allocation) holds it.
    HeldByVm(String),
    /// Another pod (a device plugin's, or another claim) holds it.
    HeldByPod(String),
    /// Reserved in full: unhealthy, vanished or in maintenance.
    Unavailable(String),
    /// Placement refused the allocation: another claimer took a device meanwhile
    /// (a VM's or a pod's allocation committed between the check and the claim).
    Refused(allocations::Refusal),
    /// The device has no partition ledger (not reported partitioned) or no such MIG
    /// profile.
    NotPartitioned { device: String, profile_id: u32 },
    /// The profile cannot start at that memory slice on this GPU.
    NoPlacement {
        device: String,
        profile: String,
        start: u32,
    },
    /// Another holder of the GPU's ledger is in the way: a VM (`by_vm`) or a pod.
    PartitionHeld {
        device: String,
        profile: String,
        start: u32,
        by_vm: bool,
        why: String,
    },
}

/// Allocates the devices at `addresses` of `host` to the consumer `uid`, whole, and
/// the MIG devices `parts` (a GPU's address, where the Kubernetes scheduler put the
/// instance: the node's driver makes it exactly there); see the module doc. Answers whether anything
/// was written.
pub async fn prepare(
    tx: &mut Tx,
    host: &str,
    uid: &str,
    addresses: &[String],
    parts: &[(String, Pin)],
) -> Result<Result<bool, ClaimRefusal>, StoreError> {
    let devices = host_devices(tx, host).await?;
    // The ledgers first: their row locks come before any provider's, as in every claim.
    let mut by_gpu: BTreeMap<&str, Vec<Pin>> = BTreeMap::new();
    for (device, pin) in parts {
        if !devices.contains_key(device) {
            return Ok(Err(ClaimRefusal::UnknownDevice(device.clone())));
        }
        by_gpu.entry(device).or_default().push(*pin);
    }
    let mut ledgers = Vec::with_capacity(by_gpu.len());
    for (address, pins) in by_gpu {
        let uuids: Vec<String> = devices[address]
            .providers
            .iter()
            .map(|rp| rp.uuid.clone())
            .collect();
        let Some(l) = partitions::locked_ledger(tx, &uuids).await? else {
            return Ok(Err(ClaimRefusal::NotPartitioned {
                device: address.to_owned(),
                profile_id: pins[0].profile_id,
            }));
        };
        ledgers.push((address, pins, l));
    }
    let mut wanted: Vec<(String, Vec<(String, i64)>)> = Vec::new();
    for address in addresses {
        let Some(d) = devices.get(address) else {
            return Ok(Err(ClaimRefusal::UnknownDevice(address.clone())));
        };
        match holder(tx, d, uid).await? {
            Some(Holder::Vm) => return Ok(Err(ClaimRefusal::HeldByVm(address.clone()))),
            Some(Holder::Pod) => return Ok(Err(ClaimRefusal::HeldByPod(address.clone()))),
            None => {}
        }
        let amounts = whole_amounts(tx, d).await?;
        if amounts.is_empty() {
            return Ok(Err(ClaimRefusal::Unavailable(address.clone())));
        }
        wanted.extend(amounts);
    }
    // A replay: the claim holds exactly these placements and these allocations.
    if ledgers
        .iter()
        .all(|(_, pins, l)| partitions::holds_pins(l, uid, pins))
    {
        let mut all = wanted.clone();
        for (_, _, l) in &ledgers {
            let held = l.holders.iter().filter(|h| h.consumer == uid);
            all.extend(part_amounts(held.map(|h| {
                let class = l
                    .member(&h.rp_uuid)
                    .and_then(|m| m.resource_class(&l.geometry));
                (h.rp_uuid.clone(), class.unwrap_or_default())
            })));
        }
        if holds_exactly(tx, uid, &all).await? {
            return Ok(Ok(false));
        }
    }
    for (address, pins, l) in &mut ledgers {
        match partitions::pin(tx, l, uid, pins).await? {
            Ok(pinned) => wanted.extend(part_amounts(
                pinned.into_iter().map(|p| (p.member_rp, p.resource_class)),
            )),
            Err(r) => return Ok(Err(pin_refusal(tx, address, l, pins, r).await?)),
        }
    }
    let write = ConsumerWrite {
        uuid: uid.to_owned(),
        project_id: None,
        user_id: None,
        check_generation: false,
        generation: None,
        consumer_type: Some(CONSUMER_TYPE.into()),
        allocations: wanted,
    };
    let refused = match allocations::prepare(tx, std::slice::from_ref(&write)).await? {
        Ok(prepared) => allocations::apply(tx, &prepared).await?.err(),
        Err(r) => Some(r),
    };
    let Some(r) = refused else {
        return Ok(Ok(true));
    };
    // Under the provider locks now: the claimer that won is visible, name it.
    for address in addresses {
        if let Some(d) = devices.get(address) {
            match holder(tx, d, uid).await? {
                Some(Holder::Vm) => return Ok(Err(ClaimRefusal::HeldByVm(address.clone()))),
                Some(Holder::Pod) => return Ok(Err(ClaimRefusal::HeldByPod(address.clone()))),
                None => {}
            }
        }
    }
    Ok(Err(ClaimRefusal::Refused(r)))
}

/// One unit per (provider, class) named, gathered: what MIG holders allocate.
fn part_amounts(held: impl Iterator<Item = (String, String)>) -> Vec<(String, Vec<(String, i64)>)> {
    let mut n: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for (rp, class) in held {
        *n.entry(rp).or_default().entry(class).or_insert(0) += 1;
    }
    n.into_iter()
        .map(|(rp, c)| (rp, c.into_iter().collect()))
        .collect()
}

/// The claim's words for a placement the ledger refused; a holder in the way is a VM
/// unless its allocations are a pod's or a claim's.
async fn pin_refusal(
    tx: &mut Tx,
    address: &str,
    l: &partitions::Ledger,
    pins: &[Pin],
    r: PinRefusal,
) -> Result<ClaimRefusal, StoreError> {
    let device = address.to_owned();
    let name = |id: u32| {
        l.geometry
            .profile(id)
            .map_or_else(|| id.to_string(), |p| p.name.clone())
    };
    Ok(match r {
        PinRefusal::NoProfile { profile_id } => ClaimRefusal::NotPartitioned { device, profile_id },
        PinRefusal::NoPlacement { profile_id, start } => ClaimRefusal::NoPlacement {
            device,
            profile: name(profile_id),
            start,
        },
        PinRefusal::Taken { by, why } => {
            let pod = allocations::for_consumer(tx, &by).await?.iter().any(|a| {
                matches!(
                    a.consumer_type.as_deref(),
                    Some(CONSUMER_TYPE) | Some(super::kubernetes::CONSUMER_TYPE)
                )
            });
            let first = pins[0];
            ClaimRefusal::PartitionHeld {
                device,
                profile: name(first.profile_id),
                start: first.start,
                by_vm: !pod,
                why: why.to_string(),
            }
        }
    })
}

enum Holder {
    Vm,
    Pod,
}

/// Who other than `uid` holds the device: a VM (an ARQ on it, or an allocation of a
/// consumer that is not Kubernetes'), a pod (a device plugin's or another claim's
/// allocation), or nobody.
async fn holder(tx: &mut Tx, d: &HostDevice, uid: &str) -> Result<Option<Holder>, StoreError> {
    let mut others = BTreeSet::new();
    let mut pod = false;
    for rp in &d.providers {
        for a in allocations::for_provider(tx, rp.id).await? {
            if a.consumer_uuid == uid {
                continue;
            }
            let k8s = matches!(
                a.consumer_type.as_deref(),
                Some(CONSUMER_TYPE) | Some(super::kubernetes::CONSUMER_TYPE)
            );
            if !k8s {
                return Ok(Some(Holder::Vm));
            }
            pod = true;
            others.insert(a.consumer_uuid);
        }
    }
    // Every allocation is accounted for above: what is left is an ARQ.
    others.insert(uid.to_owned());
    if held_by_vm(tx, d, &others).await? {
        return Ok(Some(Holder::Vm));
    }
    Ok(pod.then_some(Holder::Pod))
}

/// Deletes the allocations of the claim `uid`; answers whether it had any. A consumer
/// of another type (a VM's) is refused, never freed.
pub async fn unprepare(tx: &mut Tx, uid: &str) -> Result<bool, StoreError> {
    let rows = allocations::for_consumer(tx, uid).await?;
    if rows.is_empty() {
        return Ok(false);
    }
    if let Some(other) = rows
        .iter()
        .find(|a| a.consumer_type.as_deref() != Some(CONSUMER_TYPE))
    {
        return Err(super::Refused::NotAClaim {
            uid: uid.to_owned(),
            consumer_type: other.consumer_type.clone(),
        }
        .into());
    }
    allocations::delete_for_consumer(tx, uid).await
}

/// Runs of a claim's preparation: a lost provider-generation race or a deadlock reruns
/// it, as a Placement allocation write is.
const PREPARE_ATTEMPTS: u32 = 6;

/// Kubernetes DRA claim operations ([`Store::claims`]).
pub struct Claims<'s>(&'s Store);

impl Store {
    /// Operations on Kubernetes DRA claims.
    pub fn claims(&self) -> Claims<'_> {
        Claims(self)
    }
}

impl Claims<'_> {
    /// Allocates the devices at `addresses` of `host` to claim `uid`, and the MIG
    /// placements `parts` (a GPU's address, the pin) ([`prepare`]); answers whether
    /// anything was written, or why it was refused.
    pub async fn prepare(
        &self,
        host: &str,
        uid: &str,
        addresses: &[String],
        parts: &[(String, Pin)],
    ) -> Refusable<bool, ClaimRefusal> {
        self.0
            .write_retrying(PREPARE_ATTEMPTS, || {
                let (host, uid, addresses) = (host.to_owned(), uid.to_owned(), addresses.to_vec());
                let parts = parts.to_vec();
                move |tx| {
                    Box::pin(async move { prepare(tx, &host, &uid, &addresses, &parts).await })
                }
            })
            .await
    }

    /// Frees claim `uid`'s devices ([`unprepare`]); answers whether it had any.
    pub async fn unprepare(&self, uid: &str) -> Result<bool, StoreError> {
        self.0
            .write_rerunning(|| {
                let uid = uid.to_owned();
                move |tx| Box::pin(async move { unprepare(tx, &uid).await })
            })
            .await
    }
}
