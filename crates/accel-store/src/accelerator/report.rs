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

use super::hardware::{self, Deployable, Device};
use super::new_uuid;
use crate::placement::allocations;
use crate::placement::{classes, inventories, providers, traits};
use crate::{Conflict, StoreError, Tx};
use accel_core::accelerator::{
    DeviceHealth, DeviceStatus, ReportedDeployable, ReportedDevice, ReportedHandle,
};
use sqlx::Row;
use std::collections::{HashMap, HashSet};

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
                return Err(StoreError::Invalid(format!(
                    "deployable {} is reported twice",
                    d.name
                )));
            }
            if let Some(p) = &d.parent {
                let ok = dev
                    .deployables
                    .iter()
                    .any(|q| q.name == *p && q.parent.is_none());
                if !ok {
                    return Err(StoreError::Invalid(format!(
                        "deployable {}: parent {p} is not a top-level deployable of the same device",
                        d.name
                    )));
                }
            }
        }
    }
    let mut cpids = HashSet::new();
    for dev in reported {
        if !cpids.insert(dev.cpid_info.as_str()) {
            return Err(StoreError::Invalid(format!(
                "control path {} is reported twice",
                dev.cpid_info
            )));
        }
    }
    Ok(())
}

/// Applies an agent's report unless it equals (`digest`) the last one applied for the
/// host and nothing is pending there (no vanished device waiting to be removed); `force`
/// applies it anyway.
pub async fn apply(
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
pub async fn host(
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
pub async fn compute_node_placeholder(
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
pub async fn has_compute_node(tx: &mut Tx, hostname: &str) -> Result<bool, StoreError> {
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
    validate(reported)?;
    let mut summary = Summary::default();
    let compute = match compute_node(tx, hostname).await? {
        Some(p) => p,
        None if create_compute_node => {
            summary.compute_node_created = true;
            providers::create(tx, &new_uuid(), hostname, None).await?
        }
        None => {
            return Err(StoreError::Invalid(format!(
                "No compute node resource provider named {hostname}; the agent's host name must be Nova's hypervisor host name."
            )))
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
                if dev.health != DeviceHealth::Vanished.as_str() {
                    set_health(tx, dev.id, DeviceHealth::Vanished).await?;
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
        sqlx::query(
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
        .await?;
        let health = reported_health(r);
        if dev.health != health.as_str() {
            set_health(tx, dev.id, health).await?;
        }
        let old = hardware::deployables_of_device(tx, dev.id).await?;
        let wanted: HashSet<&str> = r.deployables.iter().map(|n| n.name.as_str()).collect();
        // Children (higher ids) before their parents.
        for d in old.iter().rev() {
            if !wanted.contains(d.name.as_str()) {
                remove_deployable(tx, d).await?;
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
                }
            }
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

async fn set_health(tx: &mut Tx, device_id: i64, h: DeviceHealth) -> Result<(), StoreError> {
    sqlx::query("UPDATE devices SET health = $1, updated_at = $2 WHERE id = $3")
        .bind(h.as_str())
        .bind(crate::now())
        .bind(device_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
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

/// Trait and class ids by name, looked up once per report: a host's devices share
/// most of their names, and one lookup per name per provider was a large part of a
/// first report's statements.
#[derive(Default)]
struct Names {
    traits: HashMap<String, i64>,
    classes: HashMap<String, (i64, String)>,
}

impl Names {
    async fn class(&mut self, tx: &mut Tx, rc: &str) -> Result<(i64, String), StoreError> {
        if let Some(c) = self.classes.get(rc) {
            return Ok(c.clone());
        }
        let class = match classes::get(tx, rc).await? {
            Some(c) => c,
            None => classes::create(tx, rc).await?,
        };
        let c = (class.id, class.name);
        self.classes.insert(rc.to_owned(), c.clone());
        Ok(c)
    }

    /// Ids of `wanted` (custom traits are created when missing; an unknown standard
    /// trait is an error naming the deployable).
    async fn traits(
        &mut self,
        tx: &mut Tx,
        wanted: &[&str],
        deployable: &str,
    ) -> Result<Vec<i64>, StoreError> {
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|t| !self.traits.contains_key(*t))
            .collect();
        if !missing.is_empty() {
            for (name, id) in traits::ids_by_name(tx, &missing).await? {
                self.traits.insert(name, id);
            }
        }
        let mut ids = Vec::with_capacity(wanted.len());
        for &name in wanted {
            let id = match self.traits.get(name) {
                Some(&id) => id,
                None if name.starts_with(accel_core::names::CUSTOM_PREFIX) => {
                    let id = traits::ensure(tx, name).await?.0.id;
                    self.traits.insert(name.to_owned(), id);
                    id
                }
                None => {
                    return Err(StoreError::Invalid(format!(
                        "Unknown standard trait {name} on deployable {deployable}"
                    )))
                }
            };
            ids.push(id);
        }
        Ok(ids)
    }
}

/// Reconciles the providers of `devices`' deployables, parents first: their
/// deployables, attributes and existing providers are read once; the providers that do
/// not exist yet are created together, a level at a time (cards, then their regions),
/// with their inventories and traits in a few multi-row statements (a first report
/// creates them all); the others are compared one by one. A top-level deployable's
/// parent is `compute` (`None`: nothing is created).
async fn sync_devices(
    tx: &mut Tx,
    compute: Option<&providers::Provider>,
    devices: &[Device],
    names: &mut Names,
) -> Result<(), StoreError> {
    let dev_ids: Vec<i64> = devices.iter().map(|d| d.id).collect();
    let deps = hardware::deployables_of_devices(tx, &dev_ids).await?;
    let dep_ids: Vec<i64> = deps.iter().map(|d| d.id).collect();
    let attrs = hardware::attributes_of(tx, &dep_ids).await?;
    let uuids: Vec<&str> = deps.iter().filter_map(|d| d.rp_uuid.as_deref()).collect();
    let mut rps: HashMap<String, providers::Provider> = providers::existing(tx, &uuids)
        .await?
        .into_iter()
        .map(|p| (p.uuid.clone(), p))
        .collect();
    let unavailable: HashMap<i64, bool> = devices
        .iter()
        .map(|d| {
            let off = d.status == DeviceStatus::Maintaining.as_str()
                || d.health != DeviceHealth::Ok.as_str();
            (d.id, off)
        })
        .collect();
    let rp_of: HashMap<i64, Option<&str>> =
        deps.iter().map(|d| (d.id, d.rp_uuid.as_deref())).collect();
    let no_attrs = Vec::new();
    let mut done: HashSet<i64> = HashSet::with_capacity(deps.len());
    while done.len() < deps.len() {
        // This level: deployables whose parent (if any) is done.
        let level: Vec<&Deployable> = deps
            .iter()
            .filter(|d| !done.contains(&d.id))
            .filter(|d| {
                d.parent_id
                    .is_none_or(|p| done.contains(&p) || !rp_of.contains_key(&p))
            })
            .collect();
        if level.is_empty() {
            return Err(StoreError::Invalid(
                "deployables of this host form a parent cycle".into(),
            ));
        }
        let mut new: Vec<(
            &Deployable,
            providers::Provider,
            Vec<inventories::Inventory>,
            Vec<i64>,
        )> = Vec::new();
        let mut old: Vec<&Deployable> = Vec::new();
        for d in &level {
            done.insert(d.id);
            let Some(uuid) = d.rp_uuid.as_deref() else {
                continue;
            };
            if rps.contains_key(uuid) {
                old.push(d);
                continue;
            }
            let parent = match d.parent_id {
                Some(p) => rp_of
                    .get(&p)
                    .copied()
                    .flatten()
                    .and_then(|u| rps.get(u))
                    .cloned(),
                None => compute.cloned(),
            };
            let Some(parent) = parent else { continue };
            let a = attrs.get(&d.id).unwrap_or(&no_attrs);
            let (inv, tr) = desired(tx, d, a, unavailable[&d.device_id], names).await?;
            new.push((d, parent, inv, tr));
        }
        let children: Vec<providers::NewChild> = new
            .iter()
            .map(|(d, parent, inv, tr)| providers::NewChild {
                uuid: d.rp_uuid.as_deref().unwrap_or_default(),
                name: &d.name,
                parent,
                generation: i64::from(!inv.is_empty() || !tr.is_empty()),
            })
            .collect();
        let created = providers::create_many(tx, &children).await?;
        let mut inv_rows = Vec::new();
        let mut trait_rows = Vec::new();
        for (rp, (_, _, inv, tr)) in created.iter().zip(&new) {
            inv_rows.extend(inv.iter().map(|i| (rp.id, i)));
            trait_rows.extend(tr.iter().map(|t| (rp.id, *t)));
        }
        inventories::insert_many_on_new(tx, &inv_rows).await?;
        traits::insert_many_on_new(tx, &trait_rows).await?;
        rps.extend(created.into_iter().map(|p| (p.uuid.clone(), p)));
        for d in old {
            let Some(rp) = d.rp_uuid.as_deref().and_then(|u| rps.get(u)).cloned() else {
                continue;
            };
            let a = attrs.get(&d.id).unwrap_or(&no_attrs);
            let (want, trait_ids) = desired(tx, d, a, unavailable[&d.device_id], names).await?;
            let rp = sync_provider(tx, rp, &want, &trait_ids).await?;
            rps.insert(rp.uuid.clone(), rp);
        }
    }
    Ok(())
}

async fn insert_device(tx: &mut Tx, hostname: &str, r: &ReportedDevice) -> Result<(), StoreError> {
    let now = crate::now();
    let device_id: i64 = sqlx::query_scalar(
        "INSERT INTO devices (uuid, type, vendor, model, std_board_info, vendor_board_info, \
         hostname, status, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
    )
    .bind(new_uuid())
    .bind(r.device_type.as_str())
    .bind(&r.vendor)
    .bind(&r.model)
    .bind(r.std_board_info.as_deref())
    .bind(r.vendor_board_info.as_deref())
    .bind(hostname)
    .bind(DeviceStatus::Enabled.as_str())
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    let cpid_id: i64 = sqlx::query_scalar(
        "INSERT INTO control_path_ids (uuid, device_id, cpid_type, cpid_info, created_at) \
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(new_uuid())
    .bind(device_id)
    .bind(&r.cpid_type)
    .bind(&r.cpid_info)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    let mut ids: HashMap<String, i64> = HashMap::new();
    for d in parents_first(&r.deployables) {
        let parent = d.parent.as_ref().and_then(|p| ids.get(p).copied());
        let id = insert_deployable(tx, device_id, cpid_id, parent, d).await?;
        ids.insert(d.name.clone(), id);
    }
    if !r.healthy {
        set_health(tx, device_id, DeviceHealth::Unhealthy).await?;
    }
    Ok(())
}

async fn insert_deployable(
    tx: &mut Tx,
    device_id: i64,
    cpid_id: i64,
    parent_id: Option<i64>,
    d: &ReportedDeployable,
) -> Result<i64, StoreError> {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO deployables (uuid, name, num_accelerators, device_id, rp_uuid, driver_name, \
         created_at, parent_id, root_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING id",
    )
    .bind(new_uuid())
    .bind(&d.name)
    .bind(d.num_accelerators)
    .bind(device_id)
    .bind(provider_uuid(&d.name))
    .bind(d.driver_name.as_deref())
    .bind(crate::now())
    .bind(parent_id)
    .fetch_one(&mut *tx)
    .await?;
    let attributes: Vec<(&str, &str)> = d
        .attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    insert_attributes(tx, id, &attributes).await?;
    let handles: Vec<&ReportedHandle> = d.attach_handles.iter().collect();
    insert_handles(tx, id, cpid_id, &handles).await?;
    Ok(id)
}

/// New attributes of one deployable, a few hundred rows per statement (a report
/// creates thousands; one statement each was most of a first report on PostgreSQL).
async fn insert_attributes(
    tx: &mut Tx,
    deployable_id: i64,
    attributes: &[(&str, &str)],
) -> Result<(), StoreError> {
    let now = crate::now();
    for chunk in attributes.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "INSERT INTO attributes (uuid, deployable_id, key, value, created_at) VALUES {}",
            crate::value_rows(chunk.len(), 5)
        );
        let mut q = sqlx::query(&sql);
        for (k, v) in chunk {
            q = q
                .bind(new_uuid())
                .bind(deployable_id)
                .bind(*k)
                .bind(*v)
                .bind(now);
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

/// New attach handles of one deployable, batched like [`insert_attributes`].
async fn insert_handles(
    tx: &mut Tx,
    deployable_id: i64,
    cpid_id: i64,
    handles: &[&ReportedHandle],
) -> Result<(), StoreError> {
    let now = crate::now();
    for chunk in handles.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "INSERT INTO attach_handles (uuid, deployable_id, cpid_id, in_use, attach_type, \
             attach_info, created_at) VALUES {}",
            crate::value_rows(chunk.len(), 7)
        );
        let mut q = sqlx::query(&sql);
        for h in chunk {
            q = q
                .bind(new_uuid())
                .bind(deployable_id)
                .bind(cpid_id)
                .bind(i64::from(h.in_use))
                .bind(h.attach_type.as_str())
                .bind(&h.attach_info)
                .bind(now);
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

async fn update_deployable(
    tx: &mut Tx,
    old: &Deployable,
    cpid_id: i64,
    new: &ReportedDeployable,
) -> Result<(), StoreError> {
    let now = crate::now();
    if old.num_accelerators != new.num_accelerators
        || old.driver_name.as_deref() != new.driver_name.as_deref()
    {
        sqlx::query(
            "UPDATE deployables SET num_accelerators = $1, driver_name = $2, updated_at = $3 WHERE id = $4",
        )
        .bind(new.num_accelerators)
        .bind(new.driver_name.as_deref())
        .bind(now)
        .bind(old.id)
        .execute(&mut *tx)
        .await?;
    }
    let attrs = hardware::list_attributes(tx, Some(old.id), None).await?;
    for a in &attrs {
        match new.attributes.iter().find(|(k, _)| *k == a.key) {
            None => {
                hardware::delete_attribute(tx, &a.uuid).await?;
            }
            Some((_, v)) if *v != a.value => {
                sqlx::query("UPDATE attributes SET value = $1, updated_at = $2 WHERE id = $3")
                    .bind(v)
                    .bind(now)
                    .bind(a.id)
                    .execute(&mut *tx)
                    .await?;
            }
            Some(_) => {}
        }
    }
    let added: Vec<(&str, &str)> = new
        .attributes
        .iter()
        .filter(|(k, _)| !attrs.iter().any(|a| a.key == *k))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    insert_attributes(tx, old.id, &added).await?;
    let handles = hardware::handles_of(tx, old.id).await?;
    let reported: HashMap<&str, &ReportedHandle> = new
        .attach_handles
        .iter()
        .map(|n| (n.attach_info.as_str(), n))
        .collect();
    for h in &handles {
        match reported.get(h.attach_info.as_str()) {
            None => remove_handle(tx, h.id, &h.uuid).await?,
            Some(n) if n.attach_type.as_str() != h.attach_type => {
                sqlx::query(
                    "UPDATE attach_handles SET attach_type = $1, updated_at = $2 WHERE id = $3",
                )
                .bind(n.attach_type.as_str())
                .bind(now)
                .bind(h.id)
                .execute(&mut *tx)
                .await?;
            }
            Some(_) => {}
        }
    }
    let known: HashSet<&str> = handles.iter().map(|h| h.attach_info.as_str()).collect();
    let added: Vec<&ReportedHandle> = new
        .attach_handles
        .iter()
        .filter(|n| !known.contains(n.attach_info.as_str()))
        .collect();
    insert_handles(tx, old.id, cpid_id, &added).await?;
    Ok(())
}

async fn remove_handle(tx: &mut Tx, id: i64, uuid: &str) -> Result<(), StoreError> {
    let holders: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM extended_accelerator_requests WHERE attach_handle_id = $1",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    if holders > 0 {
        return Err(StoreError::conflict(
            Conflict::InUse,
            format!("Attach handle {uuid} is held by an accelerator request."),
        ));
    }
    sqlx::query("DELETE FROM attach_handles WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

async fn remove_deployable(tx: &mut Tx, d: &Deployable) -> Result<(), StoreError> {
    if arq_holders(tx, d.id).await? > 0 {
        return Err(StoreError::conflict(
            Conflict::InUse,
            format!("Deployable {} is held by accelerator requests.", d.name),
        ));
    }
    for table in ["attach_handles", "attributes"] {
        sqlx::query(&format!("DELETE FROM {table} WHERE deployable_id = $1"))
            .bind(d.id)
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("DELETE FROM deployables WHERE id = $1")
        .bind(d.id)
        .execute(&mut *tx)
        .await?;
    if let Some(rp) = match &d.rp_uuid {
        Some(u) => providers::get(tx, u).await?,
        None => None,
    } {
        providers::delete(tx, &rp).await?;
    }
    Ok(())
}

async fn remove_device(tx: &mut Tx, dev: &Device) -> Result<(), StoreError> {
    // Children (higher ids) before their parents.
    for d in hardware::deployables_of_device(tx, dev.id)
        .await?
        .iter()
        .rev()
    {
        remove_deployable(tx, d).await?;
    }
    sqlx::query("DELETE FROM control_path_ids WHERE device_id = $1")
        .bind(dev.id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM devices WHERE id = $1")
        .bind(dev.id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Makes the deployable's provider match its records: exists (created under `parent`
/// when given), the inventories of its `rc` and `inventory:*` attributes with
/// `reserved` = total while `unavailable`, and the traits of its `trait*` attributes.
/// The inventories (by class id) and trait ids a deployable's provider should have:
/// `rc` with `num_accelerators`, each `inventory:<RC>` with its value, reserved in full
/// while `unavailable`; the `trait*` attributes' values.
async fn desired(
    tx: &mut Tx,
    d: &Deployable,
    attrs: &[hardware::Attribute],
    unavailable: bool,
    names: &mut Names,
) -> Result<(Vec<inventories::Inventory>, Vec<i64>), StoreError> {
    let mut wanted: Vec<(&str, i64)> = Vec::new();
    for a in attrs {
        if a.key == "rc" && d.num_accelerators > 0 {
            wanted.push((&a.value, d.num_accelerators));
        } else if let Some(rc) = a.key.strip_prefix("inventory:") {
            match a.value.parse::<i64>() {
                Ok(n) if n > 0 => wanted.push((rc, n)),
                _ => {
                    return Err(StoreError::Invalid(format!(
                        "deployable {}: attribute {} must be a positive integer, not {:?}",
                        d.name, a.key, a.value
                    )))
                }
            }
        }
    }
    let mut want = Vec::new();
    for (rc, n) in wanted {
        let (rc_id, rc_name) = names.class(tx, rc).await?;
        want.push(inventories::Inventory {
            rc_id,
            rc_name,
            total: n,
            reserved: if unavailable { n } else { 0 },
            min_unit: 1,
            max_unit: n,
            step_size: 1,
            allocation_ratio: 1.0,
            modified: 0,
        });
    }
    want.sort_by_key(|i| i.rc_id);
    let trait_names: Vec<&str> = attrs
        .iter()
        .filter(|a| a.key.starts_with("trait"))
        .map(|a| a.value.as_str())
        .collect();
    let trait_ids = names.traits(tx, &trait_names, &d.name).await?;
    Ok((want, trait_ids))
}

/// Makes an existing provider's inventories and traits `want` and `trait_ids`;
/// returns it as it now is.
async fn sync_provider(
    tx: &mut Tx,
    mut rp: providers::Provider,
    want: &[inventories::Inventory],
    trait_ids: &[i64],
) -> Result<providers::Provider, StoreError> {
    let same = {
        let have = inventories::list(tx, rp.id).await?;
        have.len() == want.len()
            && have.iter().zip(want).all(|(h, w)| {
                (
                    h.rc_id,
                    h.total,
                    h.reserved,
                    h.max_unit,
                    h.min_unit,
                    h.step_size,
                ) == (w.rc_id, w.total, w.reserved, w.max_unit, 1, 1)
                    && h.allocation_ratio == 1.0
            })
    };
    if !same {
        rp.generation = inventories::replace(tx, &rp, want).await?;
    }
    rp.generation = traits::set_for_provider(tx, &rp, trait_ids).await?;
    Ok(rp)
}

/// Applies a device's status to its providers' inventories (`reserved` = total while
/// `maintaining`, unhealthy or vanished; 0 otherwise), for every deployable of the
/// device (upstream updates one deployable, chosen by the device's id: a known bug).
pub async fn apply_status(tx: &mut Tx, device: &Device) -> Result<(), StoreError> {
    sync_devices(
        tx,
        None,
        std::slice::from_ref(device),
        &mut Names::default(),
    )
    .await
}
