//! Reading: upstream Cyborg's tables (after its schema version is checked), and accel's
//! own accelerator tables for an export, into one [`CyborgData`].

use super::*;

/// A device profile's `profile_json` as accel's `groups` text, or why it cannot be.
pub(super) fn groups_of(profile_json: &str) -> Result<String, String> {
    let v: serde_json::Value = serde_json::from_str(profile_json)
        .map_err(|e| format!("profile_json is not JSON ({e})"))?;
    let list = v
        .get("groups")
        .and_then(serde_json::Value::as_array)
        .ok_or("profile_json has no \"groups\" list")?;
    let mut out = Vec::new();
    for g in list {
        let obj = g.as_object().ok_or("a group is not an object")?;
        let mut m = serde_json::Map::new();
        for (k, v) in obj {
            let s = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                other => return Err(format!("group value {other} of {k:?} is not a string")),
            };
            m.insert(k.clone(), serde_json::Value::String(s));
        }
        out.push(serde_json::Value::Object(m));
    }
    Ok(serde_json::Value::Array(out).to_string())
}

pub(super) fn times(r: &sqlx::any::AnyRow, at: usize) -> Result<Times, sqlx::Error> {
    Ok(Times {
        created: r.try_get(at)?,
        updated: r.try_get(at + 1)?,
    })
}

/// Reads every Cyborg row of the source in one snapshot, after checking its schema.
pub async fn read_cyborg(source: &Source) -> Result<CyborgData, StoreError> {
    let b = source.backend();
    source
        .read(move |tx| {
            Box::pin(async move {
                check_alembic(
                    &schema_version(tx, "Cyborg").await?,
                    "Cyborg",
                    &[CYBORG_HEAD],
                    "the schema of Cyborg 17.0.0; upgrade upstream with `cyborg-dbsync upgrade` first",
                )?;
                let (c, u) = (epoch(b, "created_at"), epoch(b, "updated_at"));
                let in_use = match b {
                    Backend::MySql => "CAST(COALESCE(in_use, 0) AS SIGNED)",
                    Backend::Postgres => "CAST(COALESCE(in_use, false) AS INTEGER)",
                    Backend::Sqlite => "CAST(COALESCE(in_use, 0) AS INTEGER)",
                };
                read_tables(tx, "controlpath_ids", &c, &u, in_use).await
            })
        })
        .await
}

/// Reads the seven tables; `cpids` names the control-path table (upstream's
/// `controlpath_ids`, accel's `control_path_ids`), `c`/`u` the timestamp columns'
/// SQL as epoch seconds, `in_use` the handle column's as an integer.
pub(super) async fn read_tables(
    tx: &mut Tx,
    cpids: &str,
    c: &str,
    u: &str,
    in_use: &str,
) -> Result<CyborgData, StoreError> {
    let mut d = CyborgData::default();
    let upstream = cpids == "controlpath_ids";
    let groups_col = if upstream { "profile_json" } else { "groups" };
    for r in sqlx::query(&format!(
        "SELECT id, uuid, name, description, {groups_col}, {c}, {u} FROM device_profiles ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        let text: String = r.try_get(4)?;
        d.profiles.push(ProfileRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            name: r.try_get(2)?,
            description: r.try_get(3)?,
            groups: if upstream { groups_of(&text) } else { Ok(text) },
            times: times(&r, 5)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, type, vendor, model, std_board_info, vendor_board_info, hostname, \
         status, {c}, {u} FROM devices ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.devices.push(DeviceRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            device_type: r.try_get(2)?,
            vendor: r.try_get(3)?,
            model: r.try_get(4)?,
            std_board_info: r.try_get(5)?,
            vendor_board_info: r.try_get(6)?,
            hostname: r.try_get(7)?,
            status: r.try_get(8)?,
            times: times(&r, 9)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, device_id, cpid_type, cpid_info, {c}, {u} FROM {cpids} ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.cpids.push(CpidRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            device_id: r.try_get(2)?,
            cpid_type: r.try_get(3)?,
            cpid_info: r.try_get(4)?,
            times: times(&r, 5)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, parent_id, root_id, name, num_accelerators, device_id, rp_uuid, \
         driver_name, bitstream_id, {c}, {u} FROM deployables ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.deployables.push(DeployableRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            parent_id: r.try_get(2)?,
            root_id: r.try_get(3)?,
            name: r.try_get(4)?,
            num_accelerators: r.try_get(5)?,
            device_id: r.try_get(6)?,
            rp_uuid: r.try_get(7)?,
            driver_name: r.try_get(8)?,
            bitstream_id: r.try_get(9)?,
            times: times(&r, 10)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, deployable_id, key, value, {c}, {u} FROM attributes ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.attributes.push(AttributeRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            deployable_id: r.try_get(2)?,
            key: r.try_get(3)?,
            value: r.try_get(4)?,
            times: times(&r, 5)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, deployable_id, cpid_id, {in_use}, attach_type, attach_info, {c}, {u} \
         FROM attach_handles ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        let used: i64 = r.try_get(4)?;
        d.handles.push(HandleRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            deployable_id: r.try_get(2)?,
            cpid_id: r.try_get(3)?,
            in_use: used != 0,
            attach_type: r.try_get(5)?,
            attach_info: r.try_get(6)?,
            times: times(&r, 7)?,
        });
    }
    for r in sqlx::query(&format!(
        "SELECT id, uuid, project_id, state, device_profile_id, device_profile_group_id, \
         hostname, device_rp_uuid, instance_uuid, attach_handle_id, deployable_id, {c}, {u} \
         FROM extended_accelerator_requests ORDER BY id"
    ))
    .fetch_all(&mut *tx)
    .await?
    {
        d.arqs.push(ArqRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            project_id: r.try_get(2)?,
            state: r.try_get(3)?,
            device_profile_id: r.try_get(4)?,
            device_profile_group_id: r.try_get(5)?,
            hostname: r.try_get(6)?,
            device_rp_uuid: r.try_get(7)?,
            instance_uuid: r.try_get(8)?,
            attach_handle_id: r.try_get(9)?,
            deployable_id: r.try_get(10)?,
            times: times(&r, 11)?,
        });
    }
    Ok(d)
}

/// Reads accel's accelerator data in one snapshot (an export's source).
pub async fn read_accel(store: &Store) -> Result<CyborgData, StoreError> {
    store
        .read(|tx| {
            Box::pin(async move {
                read_tables(tx, "control_path_ids", "created_at", "updated_at", "in_use").await
            })
        })
        .await
}
