//! A host's hardware report: replace that host's records with what the agent found and
//! reconcile the host's device providers in Placement, in the caller's transaction.
//!
//! ```text
//!   reported devices ──keyed by cpid_info──▶ added / kept / removed devices
//!   deployables of a kept device ──keyed by name──▶ added / kept / removed
//!   attributes by key, attach handles by attach_info
//!   every deployable ──▶ child provider of the compute node provider (name = host):
//!        uuid3(DNS, name), inventory {rc: total = max_unit = num_accelerators,
//!        reserved = total while the device is `maintaining`}, traits from `trait*`
//! ```
//!
//! This is upstream conductor's `report_data` diff done in one transaction (a simple
//! replace-by-host; the agent issue refines it). Removing a deployable that an ARQ
//! still holds, or whose provider has allocations, is refused with a conflict and
//! nothing changes. The provider's traits are replaced by the reported set: accel owns
//! these providers.

use super::hardware::{self, Deployable, Device};
use super::new_uuid;
use crate::placement::{classes, inventories, providers, traits};
use crate::{Conflict, StoreError, Tx};
use accel_core::accelerator::{DeviceStatus, ReportedDeployable, ReportedDevice};
use sqlx::Row;

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
    /// Whether the compute node provider had to be created.
    pub compute_node_created: bool,
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
    let mut summary = Summary::default();
    let compute = match providers::list(
        tx,
        &providers::Filter {
            name: Some(hostname.to_owned()),
            ..Default::default()
        },
    )
    .await?
    .into_iter()
    .next()
    {
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
    let mut kept: Vec<(Device, i64, &ReportedDevice)> = Vec::new();
    for dev in existing {
        let cpid: Option<(i64, String)> = sqlx::query(
            "SELECT id, cpid_info FROM control_path_ids WHERE device_id = $1 ORDER BY id",
        )
        .bind(dev.id)
        .fetch_optional(&mut *tx)
        .await?
        .map(|r| Ok::<_, sqlx::Error>((r.try_get(0)?, r.try_get(1)?)))
        .transpose()?;
        match cpid.and_then(|(id, info)| {
            reported
                .iter()
                .find(|r| r.cpid_info == info)
                .map(|r| (id, r))
        }) {
            Some((cpid_id, r)) => kept.push((dev, cpid_id, r)),
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
        let old = hardware::deployables_of_device(tx, dev.id).await?;
        for d in &old {
            if !r.deployables.iter().any(|n| n.name == d.name) {
                remove_deployable(tx, d).await?;
            }
        }
        for n in &r.deployables {
            match old.iter().find(|d| d.name == n.name) {
                Some(d) => update_deployable(tx, d, *cpid_id, n).await?,
                None => insert_deployable(tx, dev.id, *cpid_id, n).await?,
            }
        }
        summary.devices_kept += 1;
    }
    for r in reported {
        if kept.iter().any(|(_, _, k)| std::ptr::eq(*k, r)) {
            continue;
        }
        insert_device(tx, hostname, r).await?;
        summary.devices_added += 1;
    }

    for dev in hardware::list_devices(
        tx,
        &[(hardware::DeviceColumn::Hostname, hostname.to_owned())],
    )
    .await?
    {
        let maintaining = dev.status == DeviceStatus::Maintaining.as_str();
        for d in hardware::deployables_of_device(tx, dev.id).await? {
            sync_provider(tx, Some(&compute), &d, maintaining).await?;
        }
    }
    Ok(summary)
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
    for d in &r.deployables {
        insert_deployable(tx, device_id, cpid_id, d).await?;
    }
    Ok(())
}

async fn insert_deployable(
    tx: &mut Tx,
    device_id: i64,
    cpid_id: i64,
    d: &ReportedDeployable,
) -> Result<(), StoreError> {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO deployables (uuid, name, num_accelerators, device_id, rp_uuid, driver_name, \
         created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(new_uuid())
    .bind(&d.name)
    .bind(d.num_accelerators)
    .bind(device_id)
    .bind(provider_uuid(&d.name))
    .bind(d.driver_name.as_deref())
    .bind(crate::now())
    .fetch_one(&mut *tx)
    .await?;
    for (k, v) in &d.attributes {
        hardware::insert_attribute(tx, id, k, v).await?;
    }
    for h in &d.attach_handles {
        insert_handle(tx, id, cpid_id, h).await?;
    }
    Ok(())
}

async fn insert_handle(
    tx: &mut Tx,
    deployable_id: i64,
    cpid_id: i64,
    h: &accel_core::accelerator::ReportedHandle,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO attach_handles (uuid, deployable_id, cpid_id, in_use, attach_type, attach_info, \
         created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(new_uuid())
    .bind(deployable_id)
    .bind(cpid_id)
    .bind(i64::from(h.in_use))
    .bind(h.attach_type.as_str())
    .bind(&h.attach_info)
    .bind(crate::now())
    .execute(&mut *tx)
    .await?;
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
    for (k, v) in &new.attributes {
        if !attrs.iter().any(|a| a.key == *k) {
            hardware::insert_attribute(tx, old.id, k, v).await?;
        }
    }
    let handles = hardware::handles_of(tx, old.id).await?;
    for h in &handles {
        match new
            .attach_handles
            .iter()
            .find(|n| n.attach_info == h.attach_info)
        {
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
    for n in &new.attach_handles {
        if !handles.iter().any(|h| h.attach_info == n.attach_info) {
            insert_handle(tx, old.id, cpid_id, n).await?;
        }
    }
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
    let holders: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM extended_accelerator_requests WHERE deployable_id = $1 OR \
         attach_handle_id IN (SELECT id FROM attach_handles WHERE deployable_id = $1)",
    )
    .bind(d.id)
    .fetch_one(&mut *tx)
    .await?;
    if holders > 0 {
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
    for d in hardware::deployables_of_device(tx, dev.id).await? {
        remove_deployable(tx, &d).await?;
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

/// Makes the deployable's provider match its records: exists (created under `compute`
/// when given), one inventory of its `rc` with `reserved` = total while maintaining,
/// and the traits of its `trait*` attributes.
async fn sync_provider(
    tx: &mut Tx,
    compute: Option<&providers::Provider>,
    d: &Deployable,
    maintaining: bool,
) -> Result<(), StoreError> {
    let Some(rp_uuid) = &d.rp_uuid else {
        return Ok(());
    };
    let rp = match (providers::get(tx, rp_uuid).await?, compute) {
        (Some(rp), _) => rp,
        (None, Some(c)) => providers::create(tx, rp_uuid, &d.name, Some(&c.uuid)).await?,
        (None, None) => return Ok(()),
    };
    let attrs = hardware::list_attributes(tx, Some(d.id), None).await?;
    if let Some(rc) = attrs
        .iter()
        .find(|a| a.key == "rc")
        .map(|a| a.value.clone())
    {
        let class = match classes::get(tx, &rc).await? {
            Some(c) => c,
            None => classes::create(tx, &rc).await?,
        };
        let n = d.num_accelerators;
        let want = inventories::Inventory {
            rc_id: class.id,
            rc_name: class.name.clone(),
            total: n,
            reserved: if maintaining { n } else { 0 },
            min_unit: 1,
            max_unit: n,
            step_size: 1,
            allocation_ratio: 1.0,
            modified: 0,
        };
        let have = inventories::list(tx, rp.id).await?;
        let same = have.len() == 1
            && have[0].rc_id == want.rc_id
            && (have[0].total, have[0].reserved, have[0].max_unit) == (n, want.reserved, n)
            && (have[0].min_unit, have[0].step_size) == (1, 1)
            && have[0].allocation_ratio == 1.0;
        if !same {
            inventories::replace(tx, &rp, &[want]).await?;
        }
    }
    let rp = providers::require(tx, rp_uuid).await?;
    let mut ids = Vec::new();
    for a in attrs.iter().filter(|a| a.key.starts_with("trait")) {
        let t = if a.value.starts_with(accel_core::names::CUSTOM_PREFIX) {
            traits::ensure(tx, &a.value).await?.0
        } else {
            traits::get(tx, &a.value).await?.ok_or_else(|| {
                StoreError::Invalid(format!(
                    "Unknown standard trait {} on deployable {}",
                    a.value, d.name
                ))
            })?
        };
        ids.push(t.id);
    }
    traits::set_for_provider(tx, &rp, &ids).await?;
    Ok(())
}

/// Applies a device's status to its providers' inventories (`reserved` = total while
/// `maintaining`, 0 when `enabled`), for every deployable of the device (upstream
/// updates one deployable, chosen by the device's id: a known bug).
pub async fn apply_status(tx: &mut Tx, device: &Device) -> Result<(), StoreError> {
    let maintaining = device.status == DeviceStatus::Maintaining.as_str();
    for d in hardware::deployables_of_device(tx, device.id).await? {
        sync_provider(tx, None, &d, maintaining).await?;
    }
    Ok(())
}
