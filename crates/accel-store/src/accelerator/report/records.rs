//! The hardware-record side of a report: inserting, updating and removing devices,
//! deployables, attributes and attach handles as the diff in [`super::replace_host`]
//! decides. Removing records also removes their providers; nothing here decides what
//! a provider should contain ([`super::placement`] does).

use super::{arq_holders, parents_first, provider_uuid, set_health};
use crate::accelerator::hardware::{self, Deployable, Device};
use crate::accelerator::history::{self, Kind};
use crate::accelerator::new_uuid;
use crate::accelerator::Refused;
use crate::placement::providers;
use crate::{StoreError, Tx};
use accel_core::accelerator::{
    DeviceHealth, DeviceStatus, ReportedDeployable, ReportedDevice, ReportedHandle,
};
use std::collections::{HashMap, HashSet};

pub(super) async fn insert_device(
    tx: &mut Tx,
    hostname: &str,
    r: &ReportedDevice,
) -> Result<(), StoreError> {
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
    let names: Vec<&str> = r.deployables.iter().map(|d| d.name.as_str()).collect();
    history::record_device(
        tx,
        device_id,
        None,
        Kind::Report,
        &format!(
            "first reported: {} {} {} ({})",
            r.device_type.as_str(),
            r.vendor,
            r.model,
            names.join(", ")
        ),
    )
    .await?;
    if !r.healthy {
        set_health(
            tx,
            device_id,
            DeviceHealth::Unhealthy,
            r.health_reason.as_deref(),
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn insert_deployable(
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

pub(super) async fn update_deployable(
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
        return Err(Refused::HandleHeld {
            uuid: uuid.to_owned(),
        }
        .into());
    }
    sqlx::query("DELETE FROM attach_handles WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

pub(super) async fn remove_deployable(tx: &mut Tx, d: &Deployable) -> Result<(), StoreError> {
    if arq_holders(tx, d.id).await? > 0 {
        return Err(Refused::DeployableHeld {
            name: d.name.clone(),
        }
        .into());
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

pub(super) async fn remove_device(tx: &mut Tx, dev: &Device) -> Result<(), StoreError> {
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
    // Its history goes with it (no page shows a removed device), so the history
    // table holds at most KEEP rows per device that exists.
    history::forget(tx, &dev.uuid).await
}
