//! Writing checked upstream rows into accel's database, in one transaction.
//!
//! The target must hold no Placement or accelerator data (a database `accel serve`
//! created and never used holds only the standard classes and traits, which count as
//! empty); `--force` replaces the Placement data it holds and says what it replaced.
//! Rows go in with multi-row inserts, parents before children, with upstream's ids
//! where rows refer to each other (PostgreSQL's sequences are moved past them after),
//! and every provider written or replaced is logged in the change log
//! ([`crate::placement::changes`]) so running servers reload them.

use super::{check, PlacementData, Problem};
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
    /// What the target held before and `--force` replaced (nonzero counts).
    pub replaced: Vec<(&'static str, i64)>,
}

/// Why an import wrote nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// The target holds data (nonzero counts per table) and `--force` was not given.
    NotEmpty(Vec<(&'static str, i64)>),
    /// The source holds inconsistent rows and `--skip-invalid` was not given.
    Invalid(Vec<Problem>),
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
                for p in problems {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
        }
    }
}

/// `12 resource_providers, 3 consumers`.
pub fn describe(counts: &[(&str, i64)]) -> String {
    counts
        .iter()
        .map(|(t, n)| format!("{n} {t}"))
        .collect::<Vec<_>>()
        .join(", ")
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
    const COUNTS: &[(&str, &str)] = &[
        (
            "resource_providers",
            "SELECT COUNT(*) FROM resource_providers",
        ),
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
        ("device_profiles", "SELECT COUNT(*) FROM device_profiles"),
        ("devices", "SELECT COUNT(*) FROM devices"),
        (
            "extended_accelerator_requests",
            "SELECT COUNT(*) FROM extended_accelerator_requests",
        ),
    ];
    nonzero_counts(tx, COUNTS).await
}

/// Of `counts` (a table's name and its `COUNT(*)` query), those that are not zero.
pub(crate) async fn nonzero_counts(
    tx: &mut Tx,
    counts: &[(&'static str, &str)],
) -> Result<Vec<(&'static str, i64)>, StoreError> {
    let mut out = Vec::new();
    for (table, sql) in counts {
        let n: i64 = sqlx::query_scalar(sql).fetch_one(&mut *tx).await?;
        if n > 0 {
            out.push((*table, n));
        }
    }
    Ok(out)
}

/// Checks `data` and writes what is valid into `store` in one transaction: all of it
/// or, on a refusal or failure, nothing.
pub async fn import_placement(
    store: &Store,
    data: &PlacementData,
    opts: Options,
) -> Result<Result<Imported, Refused>, StoreError> {
    let (problems, valid) = check(data);
    if !problems.is_empty() && !opts.skip_invalid {
        return Ok(Err(Refused::Invalid(problems)));
    }
    let valid = std::sync::Arc::new(valid);
    let problems = std::sync::Arc::new(problems);
    store
        .write_or_refuse(move |tx| {
            Box::pin(async move {
                let held = target_contents(tx).await?;
                if !held.is_empty() && !opts.force {
                    return Ok(Err(Refused::NotEmpty(held)));
                }
                if !held.is_empty() {
                    clear_placement(tx).await?;
                }
                write_all(tx, &valid).await?;
                Ok(Ok(Imported {
                    counts: valid.counts(),
                    skipped: problems.to_vec(),
                    replaced: held,
                }))
            })
        })
        .await
}

/// Deletes every Placement row but the standard classes and traits, logging the
/// providers and projects it removes.
async fn clear_placement(tx: &mut Tx) -> Result<(), StoreError> {
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

/// One bound value of a multi-row insert.
#[derive(Debug, Clone)]
pub(crate) enum Val {
    I(i64),
    N(Option<i64>),
    S(String),
    /// A nullable text.
    T(Option<String>),
    F(f64),
}

/// The `n`th bound value's placeholder. SQLite gets anonymous `?`s, bound in order: a
/// `$N` is a named parameter there, and binding thousands of them costs a linear
/// name search each (`sqlite3VListNumToName` took 80% of a 200,000-allocation import).
pub(crate) fn placeholder(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => "?".to_owned(),
        Backend::Postgres | Backend::MySql => format!("${n}"),
    }
}

/// Inserts `rows` into `table (cols)` with multi-row statements.
pub(crate) async fn insert_rows(
    tx: &mut Tx,
    table: &str,
    cols: &[&str],
    rows: Vec<Vec<Val>>,
) -> Result<(), StoreError> {
    insert_rows_with(tx, table, cols, rows, |_, backend, n| {
        placeholder(backend, n)
    })
    .await
}

/// [`insert_rows`], each cell's SQL written by `cell(column, backend, n)` around the
/// `n`th bound value (the export wraps epoch seconds into `DateTime`s).
pub(crate) async fn insert_rows_with(
    tx: &mut Tx,
    table: &str,
    cols: &[&str],
    rows: Vec<Vec<Val>>,
    cell: impl Fn(&str, Backend, usize) -> String,
) -> Result<(), StoreError> {
    let per = (8000 / cols.len()).clamp(1, 1000);
    let backend = tx.backend();
    for chunk in rows.chunks(per) {
        let values: Vec<String> = (0..chunk.len())
            .map(|r| {
                let cells: Vec<String> = cols
                    .iter()
                    .enumerate()
                    .map(|(i, c)| cell(c, backend, r * cols.len() + i + 1))
                    .collect();
                format!("({})", cells.join(", "))
            })
            .collect();
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES {}",
            cols.join(", "),
            values.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for row in chunk {
            for v in row {
                q = match v {
                    Val::I(i) => q.bind(*i),
                    Val::N(i) => q.bind(*i),
                    Val::S(s) => q.bind(s.clone()),
                    Val::T(s) => q.bind(s.clone()),
                    Val::F(f) => q.bind(*f),
                };
            }
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

/// Providers ordered parents first (by depth), so each insert's references exist.
fn parents_first(data: &PlacementData) -> Vec<&super::ProviderRow> {
    let by_id: HashMap<i64, &super::ProviderRow> =
        data.providers.iter().map(|p| (p.id, p)).collect();
    let depth = |p: &super::ProviderRow| {
        let (mut d, mut at) = (0usize, p);
        while let Some(up) = at.parent_id.and_then(|x| by_id.get(&x)) {
            d += 1;
            at = up;
            if d > by_id.len() {
                break;
            }
        }
        d
    };
    let mut out: Vec<(usize, &super::ProviderRow)> =
        data.providers.iter().map(|p| (depth(p), p)).collect();
    out.sort_by_key(|(d, p)| (*d, p.id));
    out.into_iter().map(|(_, p)| p).collect()
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
    let now = crate::now();
    let classes = map_classes(tx, data).await?;
    let traits = map_traits(tx, data).await?;
    let providers: Vec<Vec<Val>> = parents_first(data)
        .into_iter()
        .map(|p| {
            vec![
                Val::I(p.id),
                Val::S(p.uuid.clone()),
                Val::S(p.name.clone().unwrap_or_default()),
                Val::I(p.generation.unwrap_or(0)),
                Val::N(p.root_id),
                Val::N(p.parent_id),
                Val::I(p.created.unwrap_or(now)),
                Val::N(p.updated),
            ]
        })
        .collect();
    let cols = [
        "id",
        "uuid",
        "name",
        "generation",
        "root_provider_id",
        "parent_provider_id",
        "created_at",
        "updated_at",
    ];
    insert_rows(tx, "resource_providers", &cols, providers).await?;
    let inventories = data
        .inventories
        .iter()
        .map(|i| {
            vec![
                Val::I(i.provider_id),
                Val::I(classes[&i.class_id]),
                Val::I(i.total),
                Val::I(i.reserved),
                Val::I(i.min_unit),
                Val::I(i.max_unit),
                Val::I(i.step_size),
                Val::F(i.allocation_ratio),
                Val::I(i.created.unwrap_or(now)),
                Val::N(i.updated),
            ]
        })
        .collect();
    let cols = [
        "resource_provider_id",
        "resource_class_id",
        "total",
        "reserved",
        "min_unit",
        "max_unit",
        "step_size",
        "allocation_ratio",
        "created_at",
        "updated_at",
    ];
    insert_rows(tx, "inventories", &cols, inventories).await?;
    let named = |rows: &[super::Named]| -> Vec<Vec<Val>> {
        rows.iter()
            .map(|n| vec![Val::I(n.id), Val::S(n.name.clone())])
            .collect()
    };
    insert_rows(
        tx,
        "placement_aggregates",
        &["id", "uuid"],
        named(&data.aggregates),
    )
    .await?;
    let links = |pairs: &[(i64, i64)], map: Option<&HashMap<i64, i64>>| -> Vec<Vec<Val>> {
        pairs
            .iter()
            .map(|(rp, x)| vec![Val::I(*rp), Val::I(map.map_or(*x, |m| m[x]))])
            .collect()
    };
    insert_rows(
        tx,
        "resource_provider_aggregates",
        &["resource_provider_id", "aggregate_id"],
        links(&data.provider_aggregates, None),
    )
    .await?;
    insert_rows(
        tx,
        "resource_provider_traits",
        &["resource_provider_id", "trait_id"],
        links(&data.provider_traits, Some(&traits)),
    )
    .await?;
    insert_rows(
        tx,
        "projects",
        &["id", "external_id"],
        named(&data.projects),
    )
    .await?;
    insert_rows(tx, "users", &["id", "external_id"], named(&data.users)).await?;
    insert_rows(
        tx,
        "consumer_types",
        &["id", "name"],
        named(&data.consumer_types),
    )
    .await?;
    let consumers = data
        .consumers
        .iter()
        .map(|c| {
            vec![
                Val::I(c.id),
                Val::S(c.uuid.clone()),
                Val::I(c.project_id),
                Val::I(c.user_id),
                Val::I(c.generation),
                Val::N(c.type_id),
                Val::I(c.created.unwrap_or(now)),
                Val::N(c.updated),
            ]
        })
        .collect();
    let cols = [
        "id",
        "uuid",
        "project_id",
        "user_id",
        "generation",
        "consumer_type_id",
        "created_at",
        "updated_at",
    ];
    insert_rows(tx, "consumers", &cols, consumers).await?;
    let allocations = data
        .allocations
        .iter()
        .map(|a| {
            vec![
                Val::I(a.provider_id),
                Val::S(a.consumer.clone()),
                Val::I(classes[&a.class_id]),
                Val::I(a.used),
                Val::I(a.created.unwrap_or(now)),
                Val::N(a.updated),
            ]
        })
        .collect();
    let cols = [
        "resource_provider_id",
        "consumer_id",
        "resource_class_id",
        "used",
        "created_at",
        "updated_at",
    ];
    insert_rows(tx, "allocations", &cols, allocations).await?;
    if tx.backend() == Backend::Postgres {
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
    }
    let ids: Vec<i64> = data.providers.iter().map(|p| p.id).collect();
    changes::touch(tx, &ids).await?;
    let projects: Vec<i64> = data.projects.iter().map(|p| p.id).collect();
    changes::touch_projects(tx, &projects).await?;
    changes::touch_names(tx).await
}
