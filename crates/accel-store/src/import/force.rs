//! What a target holds, and what `--force` replaces and keeps (issue 42).
//!
//! An import replaces Placement data only: device profiles, devices and ARQs are
//! Cyborg's (`accel import cyborg` replaces those). They stay, so `--force` says they
//! were kept rather than replaced; and since devices and ARQs point at Placement
//! providers by uuid (a deployable's `rp_uuid`, an ARQ's `device_rp_uuid`, a
//! cleaning's `rp_uuid`), the import refuses when one of them would point at a
//! provider the new data lacks, naming each: a kept object must never be a silent
//! orphan the console shows as present and free.
//!
//! The tables counted here are the lists the other directions use, written once:
//! [`PLACEMENT_COUNTS`] (the export's emptiness check too) and the Cyborg import's.

use super::rows::nonzero_counts;
use crate::placement::changes;
use crate::{StoreError, Tx};
use sqlx::Row;
use std::collections::HashSet;

/// Placement's tables as `(name, COUNT query)`, in accel's schema and upstream's
/// alike: the standard classes and traits (every database syncs them) do not count.
pub(crate) const PLACEMENT_COUNTS: &[(&str, &str)] = &[
    (
        "resource_providers",
        "SELECT COUNT(*) FROM resource_providers",
    ),
    ("inventories", "SELECT COUNT(*) FROM inventories"),
    ("consumers", "SELECT COUNT(*) FROM consumers"),
    ("allocations", "SELECT COUNT(*) FROM allocations"),
    (
        "placement_aggregates",
        "SELECT COUNT(*) FROM placement_aggregates",
    ),
    ("projects", "SELECT COUNT(*) FROM projects"),
    ("users", "SELECT COUNT(*) FROM users"),
    ("consumer_types", "SELECT COUNT(*) FROM consumer_types"),
    (
        "custom resource_classes",
        "SELECT COUNT(*) FROM resource_classes WHERE id >= 10000",
    ),
    (
        "custom traits",
        "SELECT COUNT(*) FROM traits WHERE SUBSTR(name, 1, 7) = 'CUSTOM_'",
    ),
];

/// The target's Placement data (nonzero counts): what `--force` replaces.
pub async fn placement_contents(tx: &mut Tx) -> Result<Vec<(&'static str, i64)>, StoreError> {
    nonzero_counts(tx, PLACEMENT_COUNTS).await
}

/// The target's accelerator data (nonzero counts): what a Placement import keeps
/// (counted as `accel import cyborg` counts what it would replace).
pub async fn accelerator_contents(tx: &mut Tx) -> Result<Vec<(&'static str, i64)>, StoreError> {
    super::cyborg::accel_contents(tx).await
}

/// Accelerator objects this import would orphan: pointing at a provider the target
/// holds and `keeps` (the uuids the import writes) lacks, each named with what it is
/// and the provider. One already pointing at no provider (a `BindFailed` ARQ's stale
/// `device_rp_uuid`, as upstream Cyborg keeps it) is not this import's doing.
pub async fn orphans(tx: &mut Tx, keeps: &HashSet<&str>) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    let arqs = sqlx::query(
        "SELECT a.uuid, a.state, a.instance_uuid, a.device_rp_uuid \
         FROM extended_accelerator_requests a \
         JOIN resource_providers rp ON rp.uuid = a.device_rp_uuid ORDER BY a.uuid",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in arqs {
        let rp: String = r.try_get(3)?;
        if !keeps.contains(rp.as_str()) {
            let (uuid, state): (String, String) = (r.try_get(0)?, r.try_get(1)?);
            let instance: Option<String> = r.try_get(2)?;
            let on = instance.map_or_else(String::new, |i| format!(", instance {i}"));
            out.push(format!("ARQ {uuid} ({state}{on}) is on provider {rp}"));
        }
    }
    let deployables = sqlx::query(
        "SELECT d.uuid, v.uuid, v.hostname, d.rp_uuid FROM deployables d \
         JOIN devices v ON v.id = d.device_id \
         JOIN resource_providers rp ON rp.uuid = d.rp_uuid ORDER BY d.uuid",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in deployables {
        let rp: String = r.try_get(3)?;
        if !keeps.contains(rp.as_str()) {
            let (dep, dev, host): (String, String, String) =
                (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
            out.push(format!(
                "deployable {dep} of device {dev} (host {host}) is provider {rp}"
            ));
        }
    }
    let cleanings = sqlx::query(
        "SELECT c.rp_uuid, c.hostname, c.state FROM device_cleanings c \
         JOIN resource_providers rp ON rp.uuid = c.rp_uuid ORDER BY c.rp_uuid",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in cleanings {
        let rp: String = r.try_get(0)?;
        if !keeps.contains(rp.as_str()) {
            let (host, state): (String, String) = (r.try_get(1)?, r.try_get(2)?);
            out.push(format!(
                "device cleaning of provider {rp} (host {host}, {state})"
            ));
        }
    }
    Ok(out)
}

/// Deletes every Placement row but the standard classes and traits, logging the
/// providers and projects it removes.
pub(crate) async fn clear_placement(tx: &mut Tx) -> Result<(), StoreError> {
    let old: Vec<i64> = sqlx::query_scalar("SELECT id FROM resource_providers")
        .fetch_all(&mut *tx)
        .await?;
    changes::touch(tx, &old).await?;
    let projects: Vec<i64> = sqlx::query_scalar("SELECT id FROM projects")
        .fetch_all(&mut *tx)
        .await?;
    changes::touch_projects(tx, &projects).await?;
    changes::touch_names(tx).await?;
    for sql in [
        "DELETE FROM allocations",
        "DELETE FROM consumers",
        "DELETE FROM consumer_types",
        "DELETE FROM users",
        "DELETE FROM projects",
        "DELETE FROM resource_provider_traits",
        "DELETE FROM resource_provider_aggregates",
        "DELETE FROM placement_aggregates",
        "DELETE FROM inventories",
        "UPDATE resource_providers SET parent_provider_id = NULL, root_provider_id = NULL",
        "DELETE FROM resource_providers",
        "DELETE FROM resource_classes WHERE id >= 10000",
        "DELETE FROM traits WHERE SUBSTR(name, 1, 7) = 'CUSTOM_'",
    ] {
        sqlx::query(sql).execute(&mut *tx).await?;
    }
    Ok(())
}
