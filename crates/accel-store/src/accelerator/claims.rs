//! Kubernetes DRA claims on the shared inventory (issue 30): a ResourceClaim the
//! kubelet asks the node's driver to prepare becomes one Placement consumer whose uuid
//! is the claim's uid, of consumer type [`CONSUMER_TYPE`], holding each of its devices
//! whole, exactly as the device plugins' pods do ([`super::kubernetes`]): the same
//! allocation write (`allocations::prepare` + `apply`: provider locks, capacity
//! re-check, change-log touches), so a device is never a VM's and a pod's at once,
//! whichever asked first.
//!
//! ```text
//! prepare(host, uid, addresses)                       one transaction
//!   each address ──not a device of host──▶ refused: unknown device
//!                ──an ARQ, or another consumer's allocation──▶ refused: held (by whom)
//!                ──reserved (unhealthy, vanished, maintaining)──▶ refused: unavailable
//!   allocations of consumer uid == wanted ──▶ nothing written (a replay)
//!   otherwise ──▶ replaced; a capacity refusal (a racing claimer) ──▶ refused: held
//! unprepare(uid) ──▶ the consumer's allocations deleted (none: nothing to do); a
//!                    consumer of another type is never touched
//! ```
//!
//! The allocation is the whole record: a restarted agent replays the kubelet's calls
//! and finds them done, so no table of its own is needed.

use super::kubernetes::{held_by_vm, holds_exactly, host_devices, HostDevice};
use crate::placement::allocations::{self, ConsumerWrite};
use crate::placement::inventories;
use crate::{Refusable, Store, StoreError, Tx};
use std::collections::BTreeSet;

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
}

/// Allocates the devices at `addresses` of `host` to the consumer `uid`, whole; see the
/// module doc. Answers whether anything was written.
pub async fn prepare(
    tx: &mut Tx,
    host: &str,
    uid: &str,
    addresses: &[String],
) -> Result<Result<bool, ClaimRefusal>, StoreError> {
    let devices = host_devices(tx, host).await?;
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
        let mut any = false;
        for rp in &d.providers {
            let amounts: Vec<(String, i64)> = inventories::list(tx, rp.id)
                .await?
                .iter()
                .map(|i| (i.rc_name.clone(), i.capacity().min(i.limits.max_unit)))
                .filter(|(_, n)| *n > 0)
                .collect();
            if !amounts.is_empty() {
                wanted.push((rp.uuid.clone(), amounts));
                any = true;
            }
        }
        if !any {
            return Ok(Err(ClaimRefusal::Unavailable(address.clone())));
        }
    }
    if holds_exactly(tx, uid, &wanted).await? {
        return Ok(Ok(false));
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
    /// Allocates the devices at `addresses` of `host` to claim `uid` ([`prepare`]);
    /// answers whether anything was written, or why it was refused.
    pub async fn prepare(
        &self,
        host: &str,
        uid: &str,
        addresses: &[String],
    ) -> Refusable<bool, ClaimRefusal> {
        self.0
            .write_retrying(PREPARE_ATTEMPTS, || {
                let (host, uid, addresses) = (host.to_owned(), uid.to_owned(), addresses.to_vec());
                move |tx| Box::pin(async move { prepare(tx, &host, &uid, &addresses).await })
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
