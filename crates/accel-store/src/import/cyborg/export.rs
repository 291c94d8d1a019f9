//! The way back: accel's accelerator data written into an empty upstream Cyborg database.

use super::write::{rows_of, s, COLUMNS};
use super::*;

/// The upstream database's Cyborg data (nonzero counts).
pub(super) async fn upstream_contents(tx: &mut Tx) -> Result<Vec<(&'static str, i64)>, StoreError> {
    const COUNTS: &[(&str, &str)] = &[
        ("device_profiles", "SELECT COUNT(*) FROM device_profiles"),
        ("devices", "SELECT COUNT(*) FROM devices"),
        ("controlpath_ids", "SELECT COUNT(*) FROM controlpath_ids"),
        ("deployables", "SELECT COUNT(*) FROM deployables"),
        ("attributes", "SELECT COUNT(*) FROM attributes"),
        ("attach_handles", "SELECT COUNT(*) FROM attach_handles"),
        (
            "extended_accelerator_requests",
            "SELECT COUNT(*) FROM extended_accelerator_requests",
        ),
    ];
    nonzero_counts(tx, COUNTS).await
}

/// Writes `data` (accel's, from [`read_accel`]) into the empty upstream Cyborg
/// database `target`, in one transaction; returns the rows written per table.
pub async fn export_cyborg(
    data: &CyborgData,
    target: &Source,
) -> Result<Result<Vec<(&'static str, usize)>, CyborgRefused>, StoreError> {
    let data = data.clone();
    target
        .write(move |tx| {
            Box::pin(async move {
                if let Some(refused) = refusal(tx).await? {
                    return Ok(Err(refused));
                }
                write_upstream(tx, &data).await?;
                Ok(Ok(data.counts()))
            })
        })
        .await
}

/// What `accel export cyborg --dry-run` checks, reading `target` only: its schema is
/// Cyborg 17.0.0's and it holds no accelerator data.
pub async fn check_target(target: &Source) -> Result<Result<(), CyborgRefused>, StoreError> {
    target
        .read(|tx| Box::pin(async move { Ok(refusal(tx).await?.map_or(Ok(()), Err)) }))
        .await
}

/// Why the upstream database cannot take an export: another schema (an error), or
/// data already there.
async fn refusal(tx: &mut Tx) -> Result<Option<CyborgRefused>, StoreError> {
    check_alembic(
        &schema_version(tx, "Cyborg").await?,
        "Cyborg",
        &[CYBORG_HEAD],
        "the schema of Cyborg 17.0.0; create it with `cyborg-dbsync upgrade`",
    )?;
    let held = upstream_contents(tx).await?;
    Ok((!held.is_empty()).then_some(CyborgRefused::UpstreamNotEmpty(held)))
}

/// A `DateTime` from epoch seconds bound at `$n` (NULL stays NULL).
pub(super) fn datetime(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => "datetime(?, 'unixepoch')".to_owned(),
        Backend::Postgres => format!("(to_timestamp(${n}) AT TIME ZONE 'UTC')"),
        Backend::MySql => format!("FROM_UNIXTIME(${n})"),
    }
}

pub(super) async fn write_upstream(tx: &mut Tx, d: &CyborgData) -> Result<(), StoreError> {
    // Upstream's profile_json wraps the groups list.
    let mut up = d.clone();
    for p in &mut up.profiles {
        let groups: serde_json::Value =
            serde_json::from_str(p.groups.as_deref().unwrap_or("[]")).unwrap_or_default();
        p.groups = Ok(serde_json::json!({ "groups": groups }).to_string());
    }
    let in_use: HashSet<i64> = up
        .handles
        .iter()
        .filter(|h| h.in_use)
        .map(|h| h.deployable_id)
        .collect();
    let allocated: HashSet<i64> = up
        .deployables
        .iter()
        .filter(|x| in_use.contains(&x.id))
        .map(|x| x.device_id)
        .collect();
    for ((table, cols), mut rows) in COLUMNS.iter().zip(rows_of(&up, None)) {
        let mut cols: Vec<&str> = cols.to_vec();
        let table = match *table {
            "control_path_ids" => "controlpath_ids",
            other => other,
        };
        for c in cols.iter_mut() {
            if *c == "groups" {
                *c = "profile_json";
            }
        }
        if table == "devices" {
            // Upstream derives a NULL device_state from the handles on the first load
            // and bumps updated_at doing so: written here as it would derive it.
            cols.push("device_state");
            for (r, x) in rows.iter_mut().zip(&up.devices) {
                r.push(s(if allocated.contains(&x.id) {
                    "allocated"
                } else {
                    "available"
                }));
            }
        }
        if table == "extended_accelerator_requests" {
            cols.push("substate");
            for r in &mut rows {
                r.push(s("Initial"));
            }
        }
        insert_rows_with(tx, table, &cols, rows, |c, backend, n| match (c, backend) {
            ("created_at" | "updated_at", _) => datetime(backend, n),
            // Upstream's `in_use` is a Boolean: BOOLEAN on PostgreSQL, which takes no
            // integer (MariaDB's TINYINT(1) and SQLite take accel's 0/1 as they are).
            ("in_use", Backend::Postgres) => format!("(${n} <> 0)"),
            _ => placeholder(backend, n),
        })
        .await?;
    }
    if tx.backend() == Backend::Postgres {
        for (table, _) in COLUMNS {
            let table = if *table == "control_path_ids" {
                "controlpath_ids"
            } else {
                table
            };
            sqlx::query(&format!(
                "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                 (SELECT COALESCE(MAX(id), 0) + 1 FROM {table}), false)"
            ))
            .execute(&mut *tx)
            .await?;
        }
    }
    Ok(())
}
