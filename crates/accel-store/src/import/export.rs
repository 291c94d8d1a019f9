//! The way back: accel's Placement data written into an empty upstream Placement
//! database (one `placement-manage db sync` created), so that upstream started on it
//! answers as accel did.
//!
//! accel's rows are read in one snapshot into the same [`PlacementData`] an import
//! reads, and written in ONE transaction of the upstream database. Ids come through
//! unchanged, resource classes included: accel's standard class ids are upstream's
//! (`os_resource_classes` index, VCPU = 0, which MySQL stores only under
//! `NO_AUTO_VALUE_ON_ZERO`), its custom ones start at 10000 as upstream's do. Traits
//! are matched by name with any upstream already holds (an upstream that has been
//! started synced the standard ones) and otherwise created. Timestamps go back from
//! epoch seconds to upstream's naive-UTC `DateTime`. PostgreSQL's sequences are moved
//! past the ids written, so upstream's next insert does not collide.

use super::columns::{allocation, consumer, fetch, inventory, named, pair, provider};
use super::{tables, Named, PlacementData, Source};
use crate::import::write::Val;
use crate::{Backend, Store, StoreError, Tx};
use sqlx::Row;
use std::collections::HashMap;

/// Why an export wrote nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportRefused {
    /// The upstream database holds Placement data (nonzero counts per table).
    NotEmpty(Vec<(&'static str, i64)>),
}

impl std::fmt::Display for ExportRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportRefused::NotEmpty(held) => write!(
                f,
                "the upstream database is not empty ({}); export into a database just created by \
                 `placement-manage db sync`",
                super::write::describe(held)
            ),
        }
    }
}

/// Reads accel's Placement data in one snapshot.
pub async fn read_accel(store: &Store) -> Result<PlacementData, StoreError> {
    store
        .read(|tx| Box::pin(async move { read_all(tx).await }))
        .await
}

/// The tables in upstream's order, each in id order (what the export writes back).
async fn read_all(tx: &mut Tx) -> Result<PlacementData, StoreError> {
    // Tables without a created_at of their own read NULL in its place.
    let none = "CAST(NULL AS BIGINT)";
    Ok(PlacementData {
        classes: fetch(
            tx,
            "SELECT id, name, created_at FROM resource_classes ORDER BY id",
            named,
        )
        .await?,
        traits: fetch(
            tx,
            "SELECT id, name, created_at FROM traits ORDER BY id",
            named,
        )
        .await?,
        aggregates: fetch(
            tx,
            &format!("SELECT id, uuid, {none} FROM placement_aggregates ORDER BY id"),
            named,
        )
        .await?,
        projects: fetch(
            tx,
            &format!("SELECT id, external_id, {none} FROM projects ORDER BY id"),
            named,
        )
        .await?,
        users: fetch(
            tx,
            &format!("SELECT id, external_id, {none} FROM users ORDER BY id"),
            named,
        )
        .await?,
        consumer_types: fetch(
            tx,
            &format!("SELECT id, name, {none} FROM consumer_types ORDER BY id"),
            named,
        )
        .await?,
        provider_aggregates: fetch(
            tx,
            "SELECT resource_provider_id, aggregate_id FROM resource_provider_aggregates \
             ORDER BY resource_provider_id, aggregate_id",
            pair,
        )
        .await?,
        provider_traits: fetch(
            tx,
            "SELECT resource_provider_id, trait_id FROM resource_provider_traits \
             ORDER BY resource_provider_id, trait_id",
            pair,
        )
        .await?,
        providers: fetch(
            tx,
            "SELECT id, uuid, name, generation, root_provider_id, parent_provider_id, created_at, \
             updated_at FROM resource_providers ORDER BY id",
            provider,
        )
        .await?,
        inventories: fetch(
            tx,
            "SELECT resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, \
             step_size, allocation_ratio, created_at, updated_at FROM inventories ORDER BY id",
            inventory,
        )
        .await?,
        consumers: fetch(
            tx,
            "SELECT id, uuid, project_id, user_id, generation, consumer_type_id, created_at, \
             updated_at FROM consumers ORDER BY id",
            consumer,
        )
        .await?,
        allocations: fetch(
            tx,
            "SELECT resource_provider_id, consumer_id, resource_class_id, used, created_at, \
             updated_at FROM allocations ORDER BY id",
            allocation,
        )
        .await?,
    })
}

/// A `DateTime` value from epoch seconds bound at `$n`, in the target's dialect.
fn datetime(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => "datetime(?, 'unixepoch')".to_owned(),
        Backend::Postgres => format!("(to_timestamp(${n}) AT TIME ZONE 'UTC')"),
        Backend::MySql => format!("FROM_UNIXTIME(${n})"),
    }
}

/// Inserts `rows` into the upstream `table (cols)`; the columns named in `times` hold
/// epoch seconds to be stored as `DateTime`.
async fn insert(
    tx: &mut Tx,
    table: &str,
    cols: &[&str],
    times: &[&str],
    rows: Vec<Vec<Val>>,
) -> Result<(), StoreError> {
    crate::import::write::insert_rows_with(tx, table, cols, rows, |c, backend, n| {
        if times.contains(&c) {
            datetime(backend, n)
        } else {
            crate::import::write::placeholder(backend, n)
        }
    })
    .await
}

/// The upstream database's Placement data (nonzero counts); the standard classes
/// and traits an upstream start synced do not count.
async fn upstream_contents(tx: &mut Tx) -> Result<Vec<(&'static str, i64)>, StoreError> {
    crate::import::write::nonzero_counts(tx, crate::import::force::PLACEMENT_COUNTS).await
}

/// Writes `data` (accel's, from [`read_accel`]) into the empty upstream database
/// `target`, in one transaction; returns the rows written per table.
pub async fn export_placement(
    data: &PlacementData,
    target: &Source,
) -> Result<Result<Vec<(&'static str, usize)>, ExportRefused>, StoreError> {
    // The transaction's future owns what it reads (it outlives no borrow of the caller's).
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

/// What `accel export placement --dry-run` checks, reading `target` only: its schema
/// is upstream's and it holds no Placement data.
pub async fn check_target(target: &Source) -> Result<Result<(), ExportRefused>, StoreError> {
    target
        .read(|tx| Box::pin(async move { Ok(refusal(tx).await?.map_or(Ok(()), Err)) }))
        .await
}

/// Why the upstream database cannot take an export: another schema (an error), or
/// data already there.
async fn refusal(tx: &mut Tx) -> Result<Option<ExportRefused>, StoreError> {
    super::read::check_version(&super::read::schema_version(tx, "Placement").await?)?;
    let held = upstream_contents(tx).await?;
    Ok((!held.is_empty()).then_some(ExportRefused::NotEmpty(held)))
}

async fn write_upstream(tx: &mut Tx, d: &PlacementData) -> Result<(), StoreError> {
    let now = crate::now();
    let classes = upstream_classes(tx, d).await?;
    let class = |id: i64| classes.get(&id).copied().unwrap_or(id);
    let traits = upstream_traits(tx, d).await?;
    let stamped = &["created_at", "updated_at"];
    let rows = tables::provider_rows(d, now);
    insert(
        tx,
        "resource_providers",
        tables::PROVIDER_COLS,
        stamped,
        rows,
    )
    .await?;
    let rows = tables::inventory_rows(d, class, now);
    insert(tx, "inventories", tables::INVENTORY_COLS, stamped, rows).await?;
    write_named_and_links(tx, d, &traits).await?;
    let rows = tables::consumer_rows(d, now);
    insert(tx, "consumers", tables::CONSUMER_COLS, stamped, rows).await?;
    let rows = tables::allocation_rows(d, class, now);
    insert(tx, "allocations", tables::ALLOCATION_COLS, stamped, rows).await?;
    if tx.backend() == Backend::Postgres {
        move_sequences(tx).await?;
    }
    Ok(())
}

/// `name -> id` of a name table of the upstream database.
async fn ids_by_name(tx: &mut Tx, table: &str) -> Result<HashMap<String, i64>, StoreError> {
    let mut have = HashMap::new();
    for r in sqlx::query(&format!("SELECT name, id FROM {table}"))
        .fetch_all(&mut *tx)
        .await?
    {
        have.insert(r.try_get(0)?, r.try_get(1)?);
    }
    Ok(have)
}

/// accel's class ids mapped to upstream's: its rows by name; accel's others written
/// with accel's ids.
async fn upstream_classes(tx: &mut Tx, d: &PlacementData) -> Result<HashMap<i64, i64>, StoreError> {
    let now = crate::now();
    let have = ids_by_name(tx, "resource_classes").await?;
    let mut map = HashMap::new();
    let mut rows = Vec::new();
    for c in &d.classes {
        let id = have.get(&c.name).copied().unwrap_or(c.id);
        if !have.contains_key(&c.name) {
            rows.push(vec![
                Val::I(c.id),
                Val::S(c.name.clone()),
                Val::I(c.created.unwrap_or(now)),
            ]);
        }
        map.insert(c.id, id);
    }
    let cols = &["id", "name", "created_at"];
    insert(tx, "resource_classes", cols, &["created_at"], rows).await?;
    Ok(map)
}

/// accel's trait ids mapped to upstream's: by name; missing ones created with
/// upstream's own ids.
async fn upstream_traits(tx: &mut Tx, d: &PlacementData) -> Result<HashMap<i64, i64>, StoreError> {
    let now = crate::now();
    let mut have = ids_by_name(tx, "traits").await?;
    let rows: Vec<Vec<Val>> = (d.traits.iter())
        .filter(|t| !have.contains_key(&t.name))
        .map(|t| vec![Val::S(t.name.clone()), Val::I(t.created.unwrap_or(now))])
        .collect();
    if !rows.is_empty() {
        insert(tx, "traits", &["name", "created_at"], &["created_at"], rows).await?;
        have = ids_by_name(tx, "traits").await?;
    }
    Ok((d.traits.iter())
        .filter_map(|t| have.get(&t.name).map(|id| (t.id, *id)))
        .collect())
}

/// Aggregates, projects, users and consumer types, and the providers' aggregate and
/// trait links (stamped now: accel keeps no time for a link).
async fn write_named_and_links(
    tx: &mut Tx,
    d: &PlacementData,
    traits: &HashMap<i64, i64>,
) -> Result<(), StoreError> {
    let now = crate::now();
    let named = |rows: &[Named]| -> Vec<Vec<Val>> {
        rows.iter()
            .map(|n| {
                vec![
                    Val::I(n.id),
                    Val::S(n.name.clone()),
                    Val::I(n.created.unwrap_or(now)),
                ]
            })
            .collect()
    };
    let stamp = &["created_at"];
    for (table, key, rows) in [
        ("placement_aggregates", "uuid", &d.aggregates),
        ("projects", "external_id", &d.projects),
        ("users", "external_id", &d.users),
        ("consumer_types", "name", &d.consumer_types),
    ] {
        insert(tx, table, &["id", key, "created_at"], stamp, named(rows)).await?;
    }
    let rows = (d.provider_aggregates.iter())
        .map(|(rp, a)| vec![Val::I(*rp), Val::I(*a), Val::I(now)])
        .collect();
    let cols = &["resource_provider_id", "aggregate_id", "created_at"];
    insert(tx, "resource_provider_aggregates", cols, stamp, rows).await?;
    let rows = (d.provider_traits.iter())
        .filter_map(|(rp, t)| {
            traits
                .get(t)
                .map(|t| vec![Val::I(*rp), Val::I(*t), Val::I(now)])
        })
        .collect();
    let cols = &["resource_provider_id", "trait_id", "created_at"];
    insert(tx, "resource_provider_traits", cols, stamp, rows).await
}

/// PostgreSQL's sequences moved past the ids written, so upstream's next insert does
/// not collide.
async fn move_sequences(tx: &mut Tx) -> Result<(), StoreError> {
    for table in [
        "resource_classes",
        "traits",
        "resource_providers",
        "inventories",
        "placement_aggregates",
        "projects",
        "users",
        "consumer_types",
        "consumers",
        "allocations",
    ] {
        // Upstream's integer keys are SERIAL except where SQLAlchemy made them plain
        // (resource_classes): no sequence, nothing to move.
        let seq: Option<String> =
            sqlx::query_scalar(&format!("SELECT pg_get_serial_sequence('{table}', 'id')"))
                .fetch_one(&mut *tx)
                .await?;
        if let Some(seq) = seq {
            sqlx::query(&format!(
                "SELECT setval('{seq}', (SELECT COALESCE(MAX(id), 0) + 1 FROM {table}), false)"
            ))
            .execute(&mut *tx)
            .await?;
        }
    }
    Ok(())
}
