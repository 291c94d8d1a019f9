//! Kubernetes pods and virtual machines on one inventory: the node agent's slot usage
//! (seed 001's `deviceUsage`) is stored per host, and the devices pods hold are
//! allocated in Placement, so Nova's scheduling cannot take them; the devices virtual
//! machines hold are answered back, so the agent does not offer them to kubelet.
//!
//! ```text
//! save(host, usage, claims)                          one transaction
//!   kubernetes_slots     ◀── the held slots (replaced when they differ)
//!   per device with claims, not held by a VM:
//!     consumer = the pod of its first claimed slot (by slot name) that kubelet lists,
//!                else the first slot itself (Allocate came before pod-resources did)
//!     allocation = every inventory of every provider of the device, whole
//!                  (min(capacity, max_unit) of each class; a reserved device: none)
//!   consumers of the host no longer wanted ──▶ allocations::delete_for_consumer
//!   changed ones ──▶ allocations::prepare + apply   (provider locks, capacity checks,
//!                                                     change-log touches)
//!   per MIG device claimed (a `partition`: profile, start; `mig.rs`): held in its
//!     GPU's ledger at that placement for its pod's consumer (partitions::pin, the
//!     ledgers locked before the deletes), one unit of the profile's provider
//!     allocated; one the ledger refuses is left out and answered in held_partitions
//!   kubernetes_consumers ◀── the host's consumers
//!   answer: devices held by a VM = an ARQ on the device (bound, or binding to one of
//!           its providers), or an allocation on its providers by any consumer that is
//!           not one of this host's pod consumers; also a device released and not
//!           yet cleaned (accelerator/cleaning.rs), so the agent offers it to no pod
//! ```
//!
//! Why whole devices: a device's `capacity` slots let several containers share it,
//! but Placement has no fraction of a `CUSTOM_ACCELERATOR_GPU: 1` inventory. The
//! device is therefore allocated once, in full, whatever number of its slots are held;
//! the other pods sharing it appear in the usage map only. Nothing is over-allocated
//! (the allocation is checked against capacity under the provider lock like any other
//! claim), and a device any pod holds has no capacity left for Nova. When Nova got the
//! device first, the claim is refused by that check, the transaction rolls back (409),
//! and the agent's next save finds the device held by a VM.
//!
//! Consumers are `uuid3(URL, "accel-kubernetes:<host>:pod:<namespace>/<name>")` (the
//! pod-resources API gives no pod uid) or `...:slot:<slot>`, of consumer type
//! `KUBERNETES_POD`, with upstream's incomplete-consumer project and user.

use super::hardware::{self, DeviceColumn};
use super::refused::Refused;
use crate::partitions::Pin;
use crate::placement::allocations::{self, ConsumerWrite};
use crate::placement::{inventories, providers};
use crate::{placeholders, Store, StoreError, Tx};
use sqlx::Row;
use std::collections::{BTreeMap, BTreeSet};

/// The consumer type of the pods' allocations (Placement >= 1.38 shows it).
pub const CONSUMER_TYPE: &str = "KUBERNETES_POD";

/// The consumer type of a DRA claim's allocations (`super::claims`).
pub const CLAIM_CONSUMER_TYPE: &str = "KUBERNETES_CLAIM";

/// A slot the agent's node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotClaim {
    /// `<instance>-<index>`; also a key of the usage map.
    pub slot: String,
    /// The device's PCI address (its provider is `<host>_<address>`).
    pub device: String,
    /// `<namespace>/<name>`, once kubelet's pod-resources API lists the slot.
    pub pod: Option<String>,
    /// A MIG device (issue 45): where its instance is on the GPU `device`; the pod's
    /// consumer holds it there in the GPU's ledger (`mig.rs`).
    pub partition: Option<Pin>,
}

/// What [`save`] did, and what the agent must not offer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Addresses of the host's devices that virtual machines hold.
    pub vm_held: Vec<String>,
    /// Each pod consumer and the devices it is allocated.
    pub consumers: BTreeMap<String, Vec<String>>,
    /// Whether the stored usage changed.
    pub usage_changed: bool,
    /// Consumers whose allocations were written or deleted.
    pub allocations_changed: usize,
    /// MIG devices of the host's GPUs no pod may be given, by GPU address and
    /// placement (`mig.rs`).
    pub held_partitions: Vec<(String, Pin)>,
}

/// What [`load`] answers: the stored usage and the devices VMs hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Saved {
    pub usage: BTreeMap<String, String>,
    pub vm_held: Vec<String>,
    /// As [`Outcome::held_partitions`].
    pub held_partitions: Vec<(String, Pin)>,
}

fn consumer_uuid(host: &str, what: &str) -> String {
    uuid::Uuid::new_v3(
        &uuid::Uuid::NAMESPACE_URL,
        format!("accel-kubernetes:{host}:{what}").as_bytes(),
    )
    .to_string()
}

/// The Placement consumer of a pod on `host`.
pub fn pod_consumer(host: &str, pod: &str) -> String {
    consumer_uuid(host, &format!("pod:{pod}"))
}

/// The Placement consumer of a slot no listed pod holds yet.
pub fn slot_consumer(host: &str, slot: &str) -> String {
    consumer_uuid(host, &format!("slot:{slot}"))
}

/// One device of the host: its deployables and their providers.
pub(super) struct HostDevice {
    pub(super) deployables: Vec<i64>,
    pub(super) providers: Vec<providers::Provider>,
}

/// The host's devices by address (the top-level deployable's name after `<host>_`).
pub(super) async fn host_devices(
    tx: &mut Tx,
    host: &str,
) -> Result<BTreeMap<String, HostDevice>, StoreError> {
    let prefix = format!("{host}_");
    let mut out = BTreeMap::new();
    for dev in hardware::list_devices(tx, &[(DeviceColumn::Hostname, host.to_owned())]).await? {
        let deps = hardware::deployables_of_device(tx, dev.id).await?;
        let Some(address) = deps
            .iter()
            .find(|d| d.parent_id.is_none())
            .and_then(|d| d.name.strip_prefix(&prefix))
            .map(str::to_owned)
        else {
            continue;
        };
        let mut rps = Vec::new();
        for d in &deps {
            if let Some(rp) = match &d.rp_uuid {
                Some(u) => providers::get(tx, u).await?,
                None => None,
            } {
                rps.push(rp);
            }
        }
        out.insert(
            address,
            HostDevice {
                deployables: deps.iter().map(|d| d.id).collect(),
                providers: rps,
            },
        );
    }
    Ok(out)
}

/// What a pod takes of a device given whole: every inventory of its providers, as much
/// as each can give, but not a partitioned GPU's MIG-profile and vGPU-type providers
/// (the ledger's members other than the GPU's own): the whole form already takes every
/// slice, and allocating them too would ask the ledger for the GPU twice.
pub(super) async fn whole_amounts(
    tx: &mut Tx,
    d: &HostDevice,
) -> Result<ProviderAmounts, StoreError> {
    let uuids: Vec<&str> = d.providers.iter().map(|rp| rp.uuid.as_str()).collect();
    let parts = crate::partitions::partition_members(tx, &uuids).await?;
    let mut out = Vec::new();
    for rp in d.providers.iter().filter(|rp| !parts.contains(&rp.uuid)) {
        let amounts: Vec<(String, i64)> = inventories::list(tx, rp.id)
            .await?
            .iter()
            .map(|i| (i.rc_name.clone(), i.capacity().min(i.limits.max_unit)))
            .filter(|(_, n)| *n > 0)
            .collect();
        if !amounts.is_empty() {
            out.push((rp.uuid.clone(), amounts));
        }
    }
    Ok(out)
}

pub(super) async fn our_consumers(tx: &mut Tx, host: &str) -> Result<BTreeSet<String>, StoreError> {
    let rows: Vec<String> =
        sqlx::query_scalar("SELECT consumer_uuid FROM kubernetes_consumers WHERE hostname = $1")
            .bind(host)
            .fetch_all(&mut *tx)
            .await?;
    Ok(rows.into_iter().collect())
}

/// Whether a VM holds the device: an ARQ on it, or another consumer's allocation.
pub(super) async fn held_by_vm(
    tx: &mut Tx,
    d: &HostDevice,
    ours: &BTreeSet<String>,
) -> Result<bool, StoreError> {
    if !d.deployables.is_empty() {
        let n = d.deployables.len();
        let mut sql = format!(
            "SELECT COUNT(*) FROM extended_accelerator_requests WHERE deployable_id IN ({0}) \
             OR attach_handle_id IN (SELECT id FROM attach_handles WHERE deployable_id IN ({0}))",
            placeholders(1, n)
        );
        if !d.providers.is_empty() {
            sql.push_str(&format!(
                " OR (state IN ('BindStarted', 'Bound') AND device_rp_uuid IN ({}))",
                placeholders(n + 1, d.providers.len())
            ));
        }
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for id in &d.deployables {
            q = q.bind(*id);
        }
        for rp in &d.providers {
            q = q.bind(rp.uuid.clone());
        }
        if q.fetch_one(&mut *tx).await? > 0 {
            return Ok(true);
        }
    }
    // A DRA claim's allocation (a node's driver in `mode = "dra"`, which runs no
    // device plugin) is a pod's, not a VM's: its device stays in the node's slice.
    for rp in &d.providers {
        if allocations::for_provider(tx, rp.id).await?.iter().any(|a| {
            !ours.contains(&a.consumer_uuid)
                && a.consumer_type.as_deref() != Some(CLAIM_CONSUMER_TYPE)
        }) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The devices the agent must not offer to kubelet: held by a VM, or released and
/// not yet cleaned (`super::cleaning`: reserved until the agent says clean).
async fn vm_held(
    tx: &mut Tx,
    devices: &BTreeMap<String, HostDevice>,
    ours: &BTreeSet<String>,
) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    let uuids: Vec<&str> = devices
        .values()
        .flat_map(|d| d.providers.iter().map(|p| p.uuid.as_str()))
        .collect();
    let uncleaned = super::report::uncleaned(tx, &uuids).await?;
    for (address, d) in devices {
        if d.providers.iter().any(|p| uncleaned.contains(&p.uuid)) {
            out.push(address.clone());
            continue;
        }
        if held_by_vm(tx, d, ours).await? || reserved_for_no_pod(tx, d, ours).await? {
            out.push(address.clone());
        }
    }
    Ok(out)
}

/// Whether the device's whole inventory is reserved (unhealthy, vanished, disabled
/// through the accelerator API) while none of this host's pods holds it: the one
/// hand-out rule (cleaning/withheld.rs) gives it to no new pod.
async fn reserved_for_no_pod(
    tx: &mut Tx,
    d: &HostDevice,
    ours: &BTreeSet<String>,
) -> Result<bool, StoreError> {
    let mut any = false;
    for rp in &d.providers {
        for i in inventories::list(tx, rp.id).await? {
            if i.capacity() > 0 {
                return Ok(false);
            }
            any = true;
        }
    }
    if !any {
        return Ok(false);
    }
    for rp in &d.providers {
        if allocations::for_provider(tx, rp.id)
            .await?
            .iter()
            .any(|a| ours.contains(&a.consumer_uuid))
        {
            return Ok(false);
        }
    }
    Ok(true)
}

type Row3 = (String, Option<String>, Option<String>);

/// A consumer's allocations: `[(provider uuid, [(class, amount)])]`, the shape of
/// [`ConsumerWrite::allocations`].
pub(super) type ProviderAmounts = Vec<(String, Vec<(String, i64)>)>;

async fn stored_slots(tx: &mut Tx, host: &str) -> Result<BTreeMap<String, Row3>, StoreError> {
    let rows = sqlx::query(
        "SELECT slot, usage, device, pod FROM kubernetes_slots WHERE hostname = $1 ORDER BY slot",
    )
    .bind(host)
    .fetch_all(&mut *tx)
    .await?;
    let mut out = BTreeMap::new();
    for r in rows {
        out.insert(r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?, r.try_get(3)?));
    }
    Ok(out)
}

/// The usage saved for `host` (free slots are absent) and the devices VMs hold.
pub(crate) async fn load(tx: &mut Tx, host: &str) -> Result<Saved, StoreError> {
    let usage = stored_slots(tx, host)
        .await?
        .into_iter()
        .map(|(slot, (u, _, _))| (slot, u))
        .collect();
    let ours = our_consumers(tx, host).await?;
    let devices = host_devices(tx, host).await?;
    Ok(Saved {
        usage,
        vm_held: vm_held(tx, &devices, &ours).await?,
        held_partitions: mig::withheld(tx, host, &devices, &ours, &BTreeSet::new()).await?,
    })
}

/// Stores `usage` (every slot, free ones as `""`) and allocates the devices of
/// `claims` to their pods, in the caller's transaction; see the module doc. Every
/// claim must name a slot that `usage` shows held.
pub async fn save(
    tx: &mut Tx,
    host: &str,
    usage: &BTreeMap<String, String>,
    claims: &[SlotClaim],
) -> Result<Outcome, StoreError> {
    let compute: Option<i64> =
        sqlx::query_scalar("SELECT id FROM resource_providers WHERE name = $1")
            .bind(host)
            .fetch_optional(&mut *tx)
            .await?;
    if compute.is_none() {
        return Err(Refused::NoComputeNode {
            host: host.to_owned(),
            own_possible: false,
        }
        .into());
    }
    let by_slot: BTreeMap<&str, &SlotClaim> = claims.iter().map(|c| (c.slot.as_str(), c)).collect();
    if by_slot.len() != claims.len() {
        return Err(Refused::SlotClaimedTwice.into());
    }
    for c in claims {
        if usage.get(&c.slot).is_none_or(|u| u.is_empty()) {
            return Err(Refused::FreeSlotClaimed {
                slot: c.slot.clone(),
            }
            .into());
        }
    }
    let mut out = Outcome::default();

    let wanted_rows: BTreeMap<String, Row3> = usage
        .iter()
        .filter(|(_, u)| !u.is_empty())
        .map(|(slot, u)| {
            let c = by_slot.get(slot.as_str());
            (
                slot.clone(),
                (
                    u.clone(),
                    c.map(|c| c.device.clone()),
                    c.and_then(|c| c.pod.clone()),
                ),
            )
        })
        .collect();
    if stored_slots(tx, host).await? != wanted_rows {
        sqlx::query("DELETE FROM kubernetes_slots WHERE hostname = $1")
            .bind(host)
            .execute(&mut *tx)
            .await?;
        let rows: Vec<(&String, &Row3)> = wanted_rows.iter().collect();
        for chunk in rows.chunks(crate::BATCH_ROWS) {
            let sql = format!(
                "INSERT INTO kubernetes_slots (hostname, slot, usage, device, pod) VALUES {}",
                crate::value_rows(chunk.len(), 5)
            );
            let mut q = sqlx::query(&sql);
            for (slot, (u, device, pod)) in chunk {
                q = q
                    .bind(host)
                    .bind(slot.as_str())
                    .bind(u.as_str())
                    .bind(device.clone())
                    .bind(pod.clone());
            }
            q.execute(&mut *tx).await?;
        }
        out.usage_changed = true;
    }

    let ours = our_consumers(tx, host).await?;
    let devices = host_devices(tx, host).await?;
    out.vm_held = vm_held(tx, &devices, &ours).await?;

    // Claims by device, in slot order (the map above is sorted); MIG devices apart.
    let mut by_device: BTreeMap<&str, Vec<&SlotClaim>> = BTreeMap::new();
    for c in by_slot.values().filter(|c| c.partition.is_none()) {
        by_device.entry(c.device.as_str()).or_default().push(c);
    }
    let mut wanted: BTreeMap<String, ProviderAmounts> = BTreeMap::new();
    for (address, cs) in by_device {
        let Some(d) = devices.get(address) else {
            continue; // not reported (left to Nova's PCI passthrough, or gone): nothing to allocate
        };
        if out.vm_held.iter().any(|a| a == address) {
            continue;
        }
        let consumer = match cs.iter().find_map(|c| c.pod.as_deref()) {
            Some(pod) => pod_consumer(host, pod),
            None => slot_consumer(host, &cs[0].slot),
        };
        let amounts = whole_amounts(tx, d).await?;
        let allocated = !amounts.is_empty();
        wanted.entry(consumer.clone()).or_default().extend(amounts);
        if allocated {
            out.consumers
                .entry(consumer)
                .or_default()
                .push(address.to_owned());
        }
    }

    // MIG devices: held in their GPUs' ledgers where they are (the ledgers locked
    // before the deletes below take any provider's lock).
    let mut parts = mig::Parts::read(tx, host, &devices, &by_slot).await?;
    for c in parts.consumers() {
        wanted.entry(c).or_default();
    }
    if parts.changed() {
        parts.lock(tx).await?;
    }
    for gone in ours.iter().filter(|c| !wanted.contains_key(*c)) {
        if allocations::delete_for_consumer(tx, gone).await? {
            out.allocations_changed += 1;
        }
    }
    for (consumer, (address, amounts)) in parts.pin(tx).await? {
        let allocated = !amounts.is_empty();
        wanted.entry(consumer.clone()).or_default().extend(amounts);
        if allocated {
            let held = out.consumers.entry(consumer).or_default();
            if !held.contains(&address) {
                held.push(address);
            }
        }
    }
    let mut writes = Vec::new();
    for (consumer, allocs) in &wanted {
        if !holds_exactly(tx, consumer, allocs).await? {
            writes.push(ConsumerWrite {
                uuid: consumer.clone(),
                project_id: None,
                user_id: None,
                check_generation: false,
                generation: None,
                consumer_type: Some(CONSUMER_TYPE.into()),
                allocations: allocs.clone(),
            });
        }
    }
    if !writes.is_empty() {
        let refused = match allocations::prepare(tx, &writes).await? {
            Ok(prepared) => allocations::apply(tx, &prepared).await?.err(),
            Err(r) => Some(r),
        };
        if let Some(r) = refused {
            return Err(Refused::PodsRefused {
                host: host.to_owned(),
                placement: format!("{r:?}"),
            }
            .into());
        }
        out.allocations_changed += writes.len();
    }

    // A device a pod let go of is reserved for its cleaning now (not only at commit),
    // so this answer already tells the agent not to offer it.
    let released = crate::placement::changes::take_released(tx);
    if !super::cleaning::after_release(tx, &released)
        .await?
        .is_empty()
    {
        out.vm_held = vm_held(tx, &devices, &ours).await?;
    }

    let now: BTreeSet<String> = wanted.keys().cloned().collect();
    out.held_partitions = mig::withheld(tx, host, &devices, &now, &parts.refused).await?;
    if now != ours {
        sqlx::query("DELETE FROM kubernetes_consumers WHERE hostname = $1")
            .bind(host)
            .execute(&mut *tx)
            .await?;
        for c in &now {
            sqlx::query(
                "INSERT INTO kubernetes_consumers (consumer_uuid, hostname) VALUES ($1, $2)",
            )
            .bind(c)
            .bind(host)
            .execute(&mut *tx)
            .await?;
        }
    }
    Ok(out)
}

/// Whether `consumer` holds exactly `allocs` (per provider, its classes and amounts), so
/// that writing them again would change nothing (a replayed save or prepare).
pub(super) async fn holds_exactly(
    tx: &mut Tx,
    consumer: &str,
    allocs: &[(String, Vec<(String, i64)>)],
) -> Result<bool, StoreError> {
    let have: BTreeSet<(String, String, i64)> = allocations::for_consumer(tx, consumer)
        .await?
        .into_iter()
        .map(|a| (a.rp_uuid, a.rc_name, a.used))
        .collect();
    let want: BTreeSet<(String, String, i64)> = allocs
        .iter()
        .flat_map(|(rp, amounts)| {
            amounts
                .iter()
                .map(move |(rc, n)| (rp.clone(), rc.clone(), *n))
        })
        .collect();
    Ok(have == want)
}

mod mig;

/// Runs of a slot-usage save: a lost provider-generation race or a deadlock reruns it,
/// as a Placement allocation write is.
const SAVE_ATTEMPTS: u32 = 6;

/// Kubernetes slot usage operations ([`Store::kubernetes`]).
pub struct Kubernetes<'s>(&'s Store);

impl Store {
    /// Operations on hosts' Kubernetes slot usage.
    pub fn kubernetes(&self) -> Kubernetes<'_> {
        Kubernetes(self)
    }
}

impl Kubernetes<'_> {
    /// The usage saved for `host` and the devices VMs hold ([`load`]).
    pub async fn load(&self, host: &str) -> Result<Saved, StoreError> {
        let host = host.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { load(tx, &host).await }))
            .await
    }

    /// Stores `host`'s `usage` and allocates the devices of `claims` to their pods
    /// ([`save`]), rerun from scratch after a lost provider-generation race or a
    /// deadlock.
    pub async fn save(
        &self,
        host: &str,
        usage: &BTreeMap<String, String>,
        claims: &[SlotClaim],
    ) -> Result<Outcome, StoreError> {
        self.0
            .rerun(
                SAVE_ATTEMPTS,
                StoreError::is_retryable,
                || {
                    let (host, usage, claims) = (host.to_owned(), usage.clone(), claims.to_vec());
                    move |tx| Box::pin(async move { save(tx, &host, &usage, &claims).await })
                },
                |_| true,
            )
            .await
    }
}
