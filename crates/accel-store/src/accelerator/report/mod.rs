//! A host's hardware report: replace that host's records with what the agent found and
//! reconcile the host's device providers in Placement, in the caller's transaction.
//!
//! ```text
//!   reported devices ──keyed by cpid_info──▶ added / kept / gone devices
//!   deployables of a kept device ──keyed by name──▶ added / kept / removed
//!   attributes by key, attach handles by attach_info
//!   every deployable ──▶ provider: child of its parent deployable's provider, or of
//!        the compute node provider (name = host, never modified); uuid3(DNS, name);
//!        inventories {rc: num_accelerators, inventory:<RC>: value}, reserved = total
//!        while the device is maintaining, unhealthy or vanished; traits from `trait*`
//!   a gone device ──no allocation, no ARQ──▶ records and providers removed
//!                 ──otherwise──▶ kept as `vanished` (reserved) until a later report
//!                                finds it free, then removed
//! ```
//!
//! This is upstream conductor's `report_data` diff done in one transaction, with
//! linear lookups (maps by key) instead of its per-device re-listing. The provider's
//! traits are replaced by the reported set: accel owns these providers. [`apply`]
//! wraps it with the per-host digest, so an identical report costs one comparison.

use super::hardware::{self, Device};
use super::history::{self, Kind};
use super::new_uuid;
use super::refused::Refused;
use crate::placement::allocations;
use crate::placement::providers;
use crate::{Store, StoreError, Tx};
use accel_core::accelerator::{DeviceHealth, DeviceStatus, ReportedDeployable, ReportedDevice};
use sqlx::Row;
use std::collections::{HashMap, HashSet};

mod node;
mod placement;
mod records;

pub use node::{ensure_owned, OWNER_TRAIT};
pub use placement::apply_status;
pub(crate) use placement::uncleaned;
use placement::{sync_devices, Names};
use records::{
    insert_deployable, insert_device, remove_deployable, remove_device, update_deployable,
};

/// The provider uuid Cyborg gives a deployable: `uuid3(NAMESPACE_DNS, name)`.
pub fn provider_uuid(deployable_name: &str) -> String {
    uuid::Uuid::new_v3(&uuid::Uuid::NAMESPACE_DNS, deployable_name.as_bytes()).to_string()
}

/// What a report changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub devices_added: usize,
    pub devices_removed: usize,
    pub devices_kept: usize,
    /// Devices no longer reported but kept (reserved) because they are still in use.
    pub devices_vanished: usize,
    /// Whether the compute node provider had to be created.
    pub compute_node_created: bool,
    /// The report equalled the last one applied and was skipped.
    pub unchanged: bool,
}

/// Every deployable named once per report, and a parent, when given, names a
/// top-level deployable of the same device.
pub fn validate(reported: &[ReportedDevice]) -> Result<(), StoreError> {
    let mut names = HashSet::new();
    for dev in reported {
        for d in &dev.deployables {
            if !names.insert(d.name.as_str()) {
                return Err(Refused::DeployableTwice {
                    name: d.name.clone(),
                }
                .into());
            }
            if let Some(p) = &d.parent {
                let ok = dev
                    .deployables
                    .iter()
                    .any(|q| q.name == *p && q.parent.is_none());
                if !ok {
                    return Err(Refused::BadParent {
                        deployable: d.name.clone(),
                        parent: p.clone(),
                    }
                    .into());
                }
            }
        }
    }
    let mut cpids = HashSet::new();
    for dev in reported {
        if !cpids.insert(dev.cpid_info.as_str()) {
            return Err(Refused::ControlPathTwice {
                cpid_info: dev.cpid_info.clone(),
            }
            .into());
        }
    }
    Ok(())
}

/// Applies an agent's report unless it equals (`digest`) the last one applied for the
/// host and nothing is pending there (no vanished device waiting to be removed); `force`
/// applies it anyway.
pub(crate) async fn apply(
    tx: &mut Tx,
    hostname: &str,
    reported: &[ReportedDevice],
    digest: &str,
    force: bool,
) -> Result<Summary, StoreError> {
    if !force {
        let last: Option<String> =
            sqlx::query_scalar("SELECT digest FROM agent_reports WHERE hostname = $1")
                .bind(hostname)
                .fetch_optional(&mut *tx)
                .await?;
        if last.as_deref() == Some(digest) {
            let pending: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM devices WHERE hostname = $1 AND health = $2",
            )
            .bind(hostname)
            .bind(DeviceHealth::Vanished.as_str())
            .fetch_one(&mut *tx)
            .await?;
            if pending == 0 {
                return Ok(Summary {
                    unchanged: true,
                    ..Summary::default()
                });
            }
        }
    }
    let summary = replace_host(tx, hostname, reported, false).await?;
    let n =
        sqlx::query("UPDATE agent_reports SET digest = $1, updated_at = $2 WHERE hostname = $3")
            .bind(digest)
            .bind(crate::now())
            .bind(hostname)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    if n == 0 {
        sqlx::query("INSERT INTO agent_reports (hostname, digest, updated_at) VALUES ($1, $2, $3)")
            .bind(hostname)
            .bind(digest)
            .bind(crate::now())
            .execute(&mut *tx)
            .await?;
    }
    Ok(summary)
}

/// The compute node provider named `hostname` and how many devices the host has.
pub(crate) async fn host(
    tx: &mut Tx,
    hostname: &str,
) -> Result<Option<(providers::Provider, usize)>, StoreError> {
    let Some(p) = compute_node(tx, hostname).await? else {
        return Ok(None);
    };
    let n = hardware::list_devices(
        tx,
        &[(hardware::DeviceColumn::Hostname, hostname.to_owned())],
    )
    .await?
    .len();
    Ok(Some((p, n)))
}

/// Creates a local stand-in for a compute node provider that lives in an external
/// Placement (same uuid and name, no inventory, never pushed), unless a provider named
/// `name` exists. Returns whether it was created.
pub(crate) async fn compute_node_placeholder(
    tx: &mut Tx,
    uuid: &str,
    name: &str,
) -> Result<bool, StoreError> {
    if compute_node(tx, name).await?.is_some() {
        return Ok(false);
    }
    providers::create(tx, uuid, name, None).await?;
    Ok(true)
}

/// Whether a compute node provider named `hostname` exists.
pub(crate) async fn has_compute_node(tx: &mut Tx, hostname: &str) -> Result<bool, StoreError> {
    Ok(compute_node(tx, hostname).await?.is_some())
}

async fn compute_node(
    tx: &mut Tx,
    hostname: &str,
) -> Result<Option<providers::Provider>, StoreError> {
    Ok(providers::list(
        tx,
        &providers::Filter {
            name: Some(hostname.to_owned()),
            ..Default::default()
        },
    )
    .await?
    .into_iter()
    .next())
}

/// Replaces `hostname`'s hardware records with `reported`. The compute node provider
/// named `hostname` must exist unless `create_compute_node` (the built-in fake source
/// creates it, as a compute node would have).
pub async fn replace_host(
    tx: &mut Tx,
    hostname: &str,
    reported: &[ReportedDevice],
    create_compute_node: bool,
) -> Result<Summary, StoreError> {
    // A partitioned GPU's profiles and vGPU types become deployables under it.
    let expanded = crate::partitions::expand(reported);
    let reported = expanded.as_slice();
    validate(reported)?;
    let mut summary = Summary::default();
    let compute = match compute_node(tx, hostname).await? {
        Some(p) => p,
        None if create_compute_node => {
            summary.compute_node_created = true;
            providers::create(tx, &new_uuid(), hostname, None).await?
        }
        None => {
            return Err(Refused::NoComputeNode {
                host: hostname.to_owned(),
                own_possible: true,
            }
            .into())
        }
    };

    let existing = hardware::list_devices(
        tx,
        &[(hardware::DeviceColumn::Hostname, hostname.to_owned())],
    )
    .await?;
    let by_cpid: HashMap<&str, &ReportedDevice> =
        reported.iter().map(|r| (r.cpid_info.as_str(), r)).collect();
    let cpids = cpids_of_host(tx, hostname).await?;
    let mut kept: Vec<(Device, i64, &ReportedDevice)> = Vec::new();
    let mut kept_cpids: HashSet<&str> = HashSet::new();
    for dev in existing {
        match cpids
            .get(&dev.id)
            .and_then(|(id, info)| by_cpid.get(info.as_str()).map(|r| (*id, *r)))
        {
            Some((cpid_id, r)) => {
                kept_cpids.insert(r.cpid_info.as_str());
                kept.push((dev, cpid_id, r));
            }
            None if in_use(tx, &dev).await? => {
                if dev.health != DeviceHealth::Vanished {
                    set_health(tx, dev.id, DeviceHealth::Vanished, Some(VANISHED_REASON)).await?;
                }
                summary.devices_vanished += 1;
            }
            None => {
                remove_device(tx, &dev).await?;
                summary.devices_removed += 1;
            }
        }
    }
    for (dev, cpid_id, r) in &kept {
        let changed = sqlx::query(
            "UPDATE devices SET type = $1, vendor = $2, model = $3, std_board_info = $4, \
             vendor_board_info = $5, updated_at = $6 WHERE id = $7 AND (type <> $1 OR vendor <> $2 \
             OR model <> $3 OR COALESCE(std_board_info, '') <> COALESCE($4, '') \
             OR COALESCE(vendor_board_info, '') <> COALESCE($5, ''))",
        )
        .bind(r.device_type.as_str())
        .bind(&r.vendor)
        .bind(&r.model)
        .bind(r.std_board_info.as_deref())
        .bind(r.vendor_board_info.as_deref())
        .bind(crate::now())
        .bind(dev.id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        let mut what = Vec::new();
        if changed {
            what.push(format!(
                "now {} {} {}",
                r.device_type.as_str(),
                r.vendor,
                r.model
            ));
        }
        let health = reported_health(r);
        let reason = r.health_reason.as_deref();
        if dev.health != health {
            set_health(tx, dev.id, health, reason).await?;
        } else if health != DeviceHealth::Ok {
            // Still unhealthy, perhaps for another reason: the reason is the agent's
            // latest, the time it went unhealthy stays.
            sqlx::query(
                "UPDATE devices SET health_reason = $1 WHERE id = $2 \
                 AND COALESCE(health_reason, '') <> COALESCE($1, '')",
            )
            .bind(reason)
            .bind(dev.id)
            .execute(&mut *tx)
            .await?;
        }
        let old = hardware::deployables_of_device(tx, dev.id).await?;
        let wanted: HashSet<&str> = r.deployables.iter().map(|n| n.name.as_str()).collect();
        // Children (higher ids) before their parents.
        for d in old.iter().rev() {
            if !wanted.contains(d.name.as_str()) {
                remove_deployable(tx, d).await?;
                what.push(format!("deployable {} removed", d.name));
            }
        }
        let mut ids: HashMap<String, i64> = old
            .iter()
            .filter(|d| wanted.contains(d.name.as_str()))
            .map(|d| (d.name.clone(), d.id))
            .collect();
        for n in parents_first(&r.deployables) {
            match old.iter().find(|d| d.name == n.name) {
                Some(d) => update_deployable(tx, d, *cpid_id, n).await?,
                None => {
                    let parent = n.parent.as_ref().and_then(|p| ids.get(p).copied());
                    let id = insert_deployable(tx, dev.id, *cpid_id, parent, n).await?;
                    ids.insert(n.name.clone(), id);
                    what.push(format!("deployable {} added", n.name));
                }
            }
        }
        if !what.is_empty() {
            history::record_device(tx, dev.id, None, Kind::Report, &what.join("; ")).await?;
        }
        summary.devices_kept += 1;
    }
    for r in reported {
        if kept_cpids.contains(r.cpid_info.as_str()) {
            continue;
        }
        insert_device(tx, hostname, r).await?;
        summary.devices_added += 1;
    }

    crate::partitions::sync_report(tx, hostname, reported).await?;
    let devices = hardware::list_devices(
        tx,
        &[(hardware::DeviceColumn::Hostname, hostname.to_owned())],
    )
    .await?;
    sync_devices(tx, Some(&compute), &devices, &mut Names::default()).await?;
    Ok(summary)
}

fn reported_health(r: &ReportedDevice) -> DeviceHealth {
    if r.healthy {
        DeviceHealth::Ok
    } else {
        DeviceHealth::Unhealthy
    }
}

/// Why a device the agent no longer reports is kept.
pub const VANISHED_REASON: &str =
    "no longer reported by the agent; kept, reserved, while an allocation or ARQ holds it";

/// Sets the device's health, its reason (`None` for `ok`, or when the agent gave
/// none) and since when, and records the change in the device's history.
async fn set_health(
    tx: &mut Tx,
    device_id: i64,
    h: DeviceHealth,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    let now = crate::now();
    let reason = reason.filter(|_| h != DeviceHealth::Ok);
    sqlx::query(
        "UPDATE devices SET health = $1, health_reason = $2, health_since = $3, updated_at = $3 \
         WHERE id = $4",
    )
    .bind(h.as_str())
    .bind(reason)
    .bind(now)
    .bind(device_id)
    .execute(&mut *tx)
    .await?;
    let detail = match reason {
        Some(r) => format!("{}: {r}", h.as_str()),
        None => h.as_str().to_owned(),
    };
    history::record_device(tx, device_id, None, Kind::Health, &detail).await
}

/// Control-path id (id, info) of each device of the host, in one query.
async fn cpids_of_host(
    tx: &mut Tx,
    hostname: &str,
) -> Result<HashMap<i64, (i64, String)>, StoreError> {
    let rows = sqlx::query(
        "SELECT c.device_id, c.id, c.cpid_info FROM control_path_ids c \
         JOIN devices d ON d.id = c.device_id WHERE d.hostname = $1 ORDER BY c.id DESC",
    )
    .bind(hostname)
    .fetch_all(&mut *tx)
    .await?;
    let mut out = HashMap::new();
    for r in rows {
        // Descending ids: the first control path of a device wins, as before.
        out.insert(r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?));
    }
    Ok(out)
}

/// Top-level deployables first, so a child's parent exists when it is inserted.
fn parents_first(ds: &[ReportedDeployable]) -> Vec<&ReportedDeployable> {
    let mut v: Vec<&ReportedDeployable> = ds.iter().filter(|d| d.parent.is_none()).collect();
    v.extend(ds.iter().filter(|d| d.parent.is_some()));
    v
}

/// Whether anything still holds the device: an ARQ on one of its deployables or
/// handles, or an allocation on one of its providers.
async fn in_use(tx: &mut Tx, dev: &Device) -> Result<bool, StoreError> {
    for d in hardware::deployables_of_device(tx, dev.id).await? {
        if arq_holders(tx, d.id).await? > 0 {
            return Ok(true);
        }
        if let Some(rp) = match &d.rp_uuid {
            Some(u) => providers::get(tx, u).await?,
            None => None,
        } {
            if !allocations::for_provider(tx, rp.id).await?.is_empty() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

async fn arq_holders(tx: &mut Tx, deployable_id: i64) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM extended_accelerator_requests WHERE deployable_id = $1 OR \
         attach_handle_id IN (SELECT id FROM attach_handles WHERE deployable_id = $1)",
    )
    .bind(deployable_id)
    .fetch_one(&mut *tx)
    .await?)
}

/// Operations on the agents' reports ([`Store::reports`]): what a host's agent says it
/// has, and the node provider it reports under. Every write is rerun after a deadlock.
pub struct Reports<'s>(&'s Store);

impl Store {
    /// Operations on hosts' hardware reports.
    pub fn reports(&self) -> Reports<'_> {
        Reports(self)
    }
}

impl Reports<'_> {
    /// Reports Cyborg's fake device for `host` (creating the compute node provider
    /// when it is absent), as an agent on that host would at start-up.
    pub async fn fake_devices(&self, host: &str) -> Result<Summary, StoreError> {
        self.0
            .write_rerunning(|| {
                let host = host.to_owned();
                move |tx| {
                    Box::pin(async move {
                        let fake = [accel_core::accelerator::fake_device(&host)];
                        replace_host(tx, &host, &fake, true).await
                    })
                }
            })
            .await
    }

    /// An agent's report for `host` ([`apply`], `digest` and `force` as there), in one
    /// transaction with the local placeholder of the compute node an external Placement
    /// holds (`placeholder`: its uuid and name, [`compute_node_placeholder`]) and, with
    /// `mark_push`, the host's mark for a push when the report changed anything.
    pub async fn apply(
        &self,
        host: &str,
        devices: &[ReportedDevice],
        digest: &str,
        force: bool,
        placeholder: Option<(&str, &str)>,
        mark_push: bool,
    ) -> Result<Summary, StoreError> {
        let placeholder = placeholder.map(|(u, n)| (u.to_owned(), n.to_owned()));
        self.0
            .write_rerunning(|| {
                let (host, devices, digest) =
                    (host.to_owned(), devices.to_vec(), digest.to_owned());
                let placeholder = placeholder.clone();
                move |tx| {
                    Box::pin(async move {
                        if let Some((uuid, name)) = &placeholder {
                            compute_node_placeholder(tx, uuid, name).await?;
                        }
                        let s = apply(tx, &host, &devices, &digest, force).await?;
                        if mark_push && !s.unchanged {
                            super::pushes::mark(tx, &host, crate::now()).await?;
                        }
                        Ok(s)
                    })
                }
            })
            .await
    }

    /// The compute node provider named `host` and how many devices the host has.
    pub async fn host(
        &self,
        host: &str,
    ) -> Result<Option<(providers::Provider, usize)>, StoreError> {
        let host = host.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { self::host(tx, &host).await }))
            .await
    }

    /// Whether a compute node provider named `host` exists.
    pub async fn has_compute_node(&self, host: &str) -> Result<bool, StoreError> {
        let host = host.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { has_compute_node(tx, &host).await }))
            .await
    }

    /// The node provider accel owns for `host` ([`ensure_owned`]): the provider,
    /// whether this call created it, and how many devices the host has.
    pub async fn own_host(
        &self,
        host: &str,
    ) -> Result<(providers::Provider, bool, usize), StoreError> {
        self.0
            .write_rerunning(|| {
                let host = host.to_owned();
                move |tx| {
                    Box::pin(async move {
                        let (rp, created) = ensure_owned(tx, &host).await?;
                        let devices = self::host(tx, &host).await?.map_or(0, |(_, n)| n);
                        Ok((rp, created, devices))
                    })
                }
            })
            .await
    }
}

/// The one hardware operation that reconciles Placement, here beside the reconciling
/// it shares with the agents' reports, so that hardware records never need the report.
impl hardware::Hardware<'_> {
    /// Enables or disables (`Maintaining`) a device: its status, and `reserved` on each
    /// of its provider inventories ([`apply_status`]). With
    /// `mark_push`, its host is marked for a push to the external Placement in the
    /// same transaction ([`super::pushes`]).
    pub async fn set_device_status(
        &self,
        uuid: &str,
        status: DeviceStatus,
        mark_push: bool,
    ) -> Result<(), StoreError> {
        self.0
            .write_rerunning(|| {
                let uuid = uuid.to_owned();
                move |tx| {
                    Box::pin(async move {
                        let d = hardware::set_device_status(tx, &uuid, status).await?;
                        apply_status(tx, &d).await?;
                        if mark_push {
                            super::pushes::mark(tx, &d.hostname, crate::now()).await?;
                        }
                        Ok(())
                    })
                }
            })
            .await
    }
}
