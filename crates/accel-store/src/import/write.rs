//! Writing checked upstream rows into accel's database, in one transaction.
//!
//! The target must hold no Placement or accelerator data (a database `accel serve`
//! created and never used holds only the standard classes and traits, which count as
//! empty); `--force` replaces the Placement data it holds and keeps its accelerator
//! data, saying which is which ([`super::force`]).
//! Rows go in with multi-row inserts, parents before children, with upstream's ids
//! where rows refer to each other (PostgreSQL's sequences are moved past them after),
//! and every provider written or replaced is logged in the change log
//! ([`crate::placement::changes`]) so running servers reload them.

pub use super::rows::describe;
pub(crate) use super::rows::{insert_rows, insert_rows_with, nonzero_counts, placeholder, Val};
use super::{check, force, tables, OverCapacity, PlacementData, Problem};
use crate::placement::changes;
use crate::{Backend, Store, StoreError, Tx};
use accel_core::standard::CUSTOM_RC_BASE_ID;
use sqlx::Row;
use std::collections::{HashMap, HashSet};

/// What an import did.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// Rows written per table.
    pub counts: Vec<(&'static str, usize)>,
    /// Rows left out (`--skip-invalid`), with why.
    pub skipped: Vec<Problem>,
    /// The consumers left out, whole, each with all its allocations in the source.
    pub left_out: Vec<String>,
    /// Providers imported with usage above capacity, as upstream held them.
    pub warnings: Vec<OverCapacity>,
    /// The Placement data the target held and `--force` replaced (nonzero counts).
    pub replaced: Vec<(&'static str, i64)>,
    /// The accelerator data the target held and kept (nonzero counts): every provider
    /// it points at is in the imported data.
    pub kept: Vec<(&'static str, i64)>,
}

/// Why an import wrote nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// The target holds data (nonzero counts per table) and `--force` was not given.
    NotEmpty(Vec<(&'static str, i64)>),
    /// The source holds inconsistent rows and `--skip-invalid` was not given.
    Invalid(Vec<Problem>),
    /// `--force` would leave these accelerator objects pointing at providers the
    /// imported data lacks (each named).
    Orphans(Vec<String>),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NotEmpty(held) => write!(
                f,
                "the target database is not empty ({}); pass --force to replace its Placement data",
                describe(held)
            ),
            Refused::Invalid(problems) => {
                write!(
                    f,
                    "the source holds {} inconsistent row(s); nothing was written (--skip-invalid \
                     imports the rest and lists what it leaves out):",
                    problems.len()
                )?;
                lines(f, problems)
            }
            Refused::Orphans(objects) => {
                write!(
                    f,
                    "--force replaces Placement data only, and {} accelerator object(s) the target \
                     keeps would point at providers the imported data lacks; nothing was written \
                     (import Placement data that has these providers, or remove the objects first, \
                     or replace them with `accel import cyborg --force`):",
                    objects.len()
                )?;
                lines(f, objects)
            }
        }
    }
}

fn lines<T: std::fmt::Display>(f: &mut std::fmt::Formatter<'_>, items: &[T]) -> std::fmt::Result {
    for i in items {
        write!(f, "\n  {i}")?;
    }
    Ok(())
}

/// How an import treats a non-empty target and invalid rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Replace the target's Placement data.
    pub force: bool,
    /// Leave invalid rows out (listed in [`Imported::skipped`]) instead of refusing.
    pub skip_invalid: bool,
}

/// The target's Placement and accelerator data: nonzero row counts per table.
/// Standard resource classes and traits do not count.
pub async fn target_contents(tx: &mut Tx) -> Result<Vec<(&'static str, i64)>, StoreError> {
    let mut held = force::placement_contents(tx).await?;
    held.extend(force::accelerator_contents(tx).await?);
    Ok(held)
}

/// Checks `data` and writes what is valid into `store` in one transaction: all of it
/// or, on a refusal or failure, nothing.
pub async fn import_placement(
    store: &Store,
    data: &PlacementData,
    opts: Options,
) -> Result<Result<Imported, Refused>, StoreError> {
    let checked = check(data);
    if !checked.problems.is_empty() && !opts.skip_invalid {
        return Ok(Err(Refused::Invalid(checked.problems)));
    }
    let checked = std::sync::Arc::new(checked);
    store
        .write_or_refuse(move |tx| {
            Box::pin(async move {
                let (replaced, kept) = match make_room(tx, &checked.valid, opts).await? {
                    Ok(room) => room,
                    Err(refused) => return Ok(Err(refused)),
                };
                write_all(tx, &checked.valid).await?;
                Ok(Ok(Imported {
                    counts: checked.valid.counts(),
                    skipped: checked.problems.clone(),
                    left_out: checked.left_out.clone(),
                    warnings: checked.warnings.clone(),
                    replaced,
                    kept,
                }))
            })
        })
        .await
}

/// Replaces the target's Placement data when `--force` allows it and no kept
/// accelerator object would lose its provider: what was replaced and what is kept.
async fn make_room(
    tx: &mut Tx,
    valid: &PlacementData,
    opts: Options,
) -> Result<Result<(Vec<(&'static str, i64)>, Vec<(&'static str, i64)>), Refused>, StoreError> {
    let replaced = force::placement_contents(tx).await?;
    let kept = force::accelerator_contents(tx).await?;
    if replaced.is_empty() && kept.is_empty() {
        return Ok(Ok((replaced, kept)));
    }
    if !opts.force {
        return Ok(Err(Refused::NotEmpty([replaced, kept].concat())));
    }
    let keeps: HashSet<&str> = valid.providers.iter().map(|p| p.uuid.as_str()).collect();
    let orphans = force::orphans(tx, &keeps).await?;
    if !orphans.is_empty() {
        return Ok(Err(Refused::Orphans(orphans)));
    }
    if !replaced.is_empty() {
        force::clear_placement(tx).await?;
    }
    Ok(Ok((replaced, kept)))
}

/// Upstream class ids mapped to accel's, by name; classes accel lacks are created
/// (with upstream's id when it is free).
async fn map_classes(tx: &mut Tx, data: &PlacementData) -> Result<HashMap<i64, i64>, StoreError> {
    let mut have: HashMap<String, i64> = HashMap::new();
    let mut taken: HashSet<i64> = HashSet::new();
    for r in sqlx::query("SELECT id, name FROM resource_classes")
        .fetch_all(&mut *tx)
        .await?
    {
        let id: i64 = r.try_get(0)?;
        have.insert(r.try_get(1)?, id);
        taken.insert(id);
    }
    let mut map = HashMap::new();
    let mut next = taken
        .iter()
        .copied()
        .filter(|i| *i >= CUSTOM_RC_BASE_ID)
        .max()
        .unwrap_or(CUSTOM_RC_BASE_ID - 1)
        + 1;
    let now = crate::now();
    for c in &data.classes {
        let id = match have.get(&c.name) {
            Some(id) => *id,
            None => {
                let id = if taken.contains(&c.id) {
                    while taken.contains(&next) {
                        next += 1;
                    }
                    next
                } else {
                    c.id
                };
                sqlx::query(
                    "INSERT INTO resource_classes (id, name, created_at) VALUES ($1, $2, $3)",
                )
                .bind(id)
                .bind(&c.name)
                .bind(c.created.unwrap_or(now))
                .execute(&mut *tx)
                .await?;
                taken.insert(id);
                id
            }
        };
        map.insert(c.id, id);
    }
    Ok(map)
}

/// Upstream trait ids mapped to accel's, by name; traits accel lacks are created.
async fn map_traits(tx: &mut Tx, data: &PlacementData) -> Result<HashMap<i64, i64>, StoreError> {
    let mut have: HashMap<String, i64> = HashMap::new();
    for r in sqlx::query("SELECT name, id FROM traits")
        .fetch_all(&mut *tx)
        .await?
    {
        have.insert(r.try_get(0)?, r.try_get(1)?);
    }
    let now = crate::now();
    let missing: Vec<Vec<Val>> = data
        .traits
        .iter()
        .filter(|t| !have.contains_key(&t.name))
        .map(|t| vec![Val::S(t.name.clone()), Val::I(t.created.unwrap_or(now))])
        .collect();
    if !missing.is_empty() {
        insert_rows(tx, "traits", &["name", "created_at"], missing).await?;
        for r in sqlx::query("SELECT name, id FROM traits")
            .fetch_all(&mut *tx)
            .await?
        {
            have.insert(r.try_get(0)?, r.try_get(1)?);
        }
    }
    Ok(data
        .traits
        .iter()
        .filter_map(|t| have.get(&t.name).map(|id| (t.id, *id)))
        .collect())
}

/// Writes every row of `data` (already checked) and logs the change.
async fn write_all(tx: &mut Tx, data: &PlacementData) -> Result<(), StoreError> {
    let classes = map_classes(tx, data).await?;
    let traits = map_traits(tx, data).await?;
    write_providers(tx, data, &classes).await?;
    write_links(tx, data, &traits).await?;
    write_consumers(tx, data, &classes).await?;
    if tx.backend() == Backend::Postgres {
        move_sequences(tx).await?;
    }
    let ids: Vec<i64> = data.providers.iter().map(|p| p.id).collect();
    changes::touch(tx, &ids).await?;
    let projects: Vec<i64> = data.projects.iter().map(|p| p.id).collect();
    changes::touch_projects(tx, &projects).await?;
    changes::touch_names(tx).await
}

/// Providers (parents first) and their inventories.
async fn write_providers(
    tx: &mut Tx,
    data: &PlacementData,
    classes: &HashMap<i64, i64>,
) -> Result<(), StoreError> {
    let now = crate::now();
    let rows = tables::provider_rows(data, now);
    insert_rows(tx, "resource_providers", tables::PROVIDER_COLS, rows).await?;
    let rows = tables::inventory_rows(data, |id| classes[&id], now);
    insert_rows(tx, "inventories", tables::INVENTORY_COLS, rows).await
}

fn named(rows: &[super::Named]) -> Vec<Vec<Val>> {
    rows.iter()
        .map(|n| vec![Val::I(n.id), Val::S(n.name.clone())])
        .collect()
}

/// Aggregates, and the providers' aggregate and trait links.
async fn write_links(
    tx: &mut Tx,
    data: &PlacementData,
    traits: &HashMap<i64, i64>,
) -> Result<(), StoreError> {
    let aggregates = named(&data.aggregates);
    insert_rows(tx, "placement_aggregates", &["id", "uuid"], aggregates).await?;
    let links = |pairs: &[(i64, i64)], map: Option<&HashMap<i64, i64>>| -> Vec<Vec<Val>> {
        pairs
            .iter()
            .map(|(rp, x)| vec![Val::I(*rp), Val::I(map.map_or(*x, |m| m[x]))])
            .collect()
    };
    let cols = ["resource_provider_id", "aggregate_id"];
    let rows = links(&data.provider_aggregates, None);
    insert_rows(tx, "resource_provider_aggregates", &cols, rows).await?;
    let cols = ["resource_provider_id", "trait_id"];
    let rows = links(&data.provider_traits, Some(traits));
    insert_rows(tx, "resource_provider_traits", &cols, rows).await
}

/// Projects, users, consumer types, consumers and their allocations.
async fn write_consumers(
    tx: &mut Tx,
    data: &PlacementData,
    classes: &HashMap<i64, i64>,
) -> Result<(), StoreError> {
    let now = crate::now();
    insert_rows(
        tx,
        "projects",
        &["id", "external_id"],
        named(&data.projects),
    )
    .await?;
    insert_rows(tx, "users", &["id", "external_id"], named(&data.users)).await?;
    let types = named(&data.consumer_types);
    insert_rows(tx, "consumer_types", &["id", "name"], types).await?;
    let rows = tables::consumer_rows(data, now);
    insert_rows(tx, "consumers", tables::CONSUMER_COLS, rows).await?;
    let rows = tables::allocation_rows(data, |id| classes[&id], now);
    insert_rows(tx, "allocations", tables::ALLOCATION_COLS, rows).await
}

/// PostgreSQL's id sequences moved past upstream's ids, so later creates get fresh ones.
async fn move_sequences(tx: &mut Tx) -> Result<(), StoreError> {
    for table in [
        "resource_providers",
        "placement_aggregates",
        "projects",
        "users",
        "consumer_types",
        "consumers",
    ] {
        sqlx::query(&format!(
            "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
             (SELECT COALESCE(MAX(id), 0) + 1 FROM {table}), false)"
        ))
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}
