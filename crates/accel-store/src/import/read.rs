//! Reading an upstream Placement database: opened read-only, read in one read-only
//! transaction (one snapshot, so the rows agree with each other while upstream keeps
//! running), its `alembic_version` checked before anything else.
//!
//! Upstream's columns are SQLAlchemy's types: `DateTime` timestamps (naive UTC),
//! `Integer` ids, `Float` allocation ratios. `sqlx::Any` decodes no date type, so
//! timestamps are turned into epoch seconds in SQL (accel's unit); MySQL's `FLOAT` is
//! single precision and read as the text MySQL prints for it (what upstream's PyMySQL
//! reads, so `0.9` stays `0.9` and not `0.899999976`).

use super::columns::{allocation, consumer, fetch, inventory_with, named, pair, provider};
use super::{InventoryRow, PlacementData};
use crate::{Backend, StoreError, Tx};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};
use std::str::FromStr;

/// An upstream database, opened for reading only.
#[derive(Debug)]
pub struct Source {
    pool: AnyPool,
    backend: Backend,
}

/// The session settings of an upstream MySQL database: timestamps read and written as
/// UTC (upstream stores naive UTC, and `UNIX_TIMESTAMP`/`FROM_UNIXTIME` use the
/// session's zone), and an explicit id 0 stored as 0, not as the next auto-increment
/// value (upstream's standard class VCPU has id 0; an export writes it).
const MYSQL_SOURCE_SESSION: &[&str] = &[
    "SET time_zone = '+00:00'",
    "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO')",
];

impl Source {
    /// Opens `url` (`sqlite://ABSOLUTE_PATH`, `postgres://`, `mysql://`, `mariadb://`)
    /// with one connection. A SQLite file is opened read-only (and must exist).
    pub async fn open(url: &str) -> Result<Source, StoreError> {
        Self::open_with(url, false).await
    }

    /// [`Source::open`] for writing (an export's target; a SQLite file must exist).
    pub async fn open_for_write(url: &str) -> Result<Source, StoreError> {
        Self::open_with(url, true).await
    }

    async fn open_with(url: &str, write: bool) -> Result<Source, StoreError> {
        sqlx::any::install_default_drivers();
        let (backend, url) = match Backend::of_url(url) {
            Some(Backend::Sqlite) => {
                let path = url["sqlite:".len()..].trim_start_matches("//");
                let path = if path.starts_with('/') {
                    path.to_owned()
                } else {
                    format!("/{path}")
                };
                if !std::path::Path::new(&path).is_file() {
                    return Err(StoreError::Config(format!(
                        "no SQLite database at {path} (sqlite://ABSOLUTE_PATH)"
                    )));
                }
                let mode = if write { "rw" } else { "ro" };
                (Backend::Sqlite, format!("sqlite://{path}?mode={mode}"))
            }
            Some(Backend::Postgres) => (Backend::Postgres, url.to_owned()),
            Some(Backend::MySql) => match url.strip_prefix("mariadb://") {
                Some(rest) => (Backend::MySql, format!("mysql://{rest}")),
                None => (Backend::MySql, url.to_owned()),
            },
            None => {
                return Err(StoreError::Config(format!(
                    "unsupported database URL {url:?}: use sqlite://ABSOLUTE_PATH, postgres://, \
                     mysql:// or mariadb://"
                )))
            }
        };
        let opts = AnyConnectOptions::from_str(&url).map_err(StoreError::Db)?;
        let mut pool = AnyPoolOptions::new().max_connections(1);
        if backend == Backend::MySql {
            pool = pool.after_connect(|conn, _| Box::pin(crate::text(conn, MYSQL_SOURCE_SESSION)));
        }
        let pool = pool.connect_with(opts).await.map_err(StoreError::Db)?;
        Ok(Source { pool, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Runs `f` in one read-only transaction of the source, rolled back after.
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: for<'c> FnOnce(&'c mut Tx) -> crate::BoxFut<'c, T>,
    {
        let mut tx = Tx::new(self.pool.acquire().await?, self.backend);
        match self.backend {
            Backend::Sqlite => crate::control(tx.raw(), self.backend, "BEGIN").await?,
            Backend::Postgres => {
                crate::control(
                    tx.raw(),
                    self.backend,
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                )
                .await?
            }
            Backend::MySql => {
                crate::text(
                    tx.raw(),
                    &[
                        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                        "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
                    ],
                )
                .await?
            }
        }
        let out = f(&mut tx).await;
        let _ = crate::control(tx.raw(), self.backend, "ROLLBACK").await;
        out
    }

    /// Runs `f` in one write transaction of the database (an export's target):
    /// committed on `Ok(Ok(_))`, rolled back on a refusal or an error.
    pub(crate) async fn write<T, R, F>(&self, f: F) -> crate::Refusable<T, R>
    where
        F: for<'c> FnOnce(&'c mut Tx) -> crate::BoxFut<'c, Result<T, R>>,
    {
        let mut tx = Tx::new(self.pool.acquire().await?, self.backend);
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres | Backend::MySql => "BEGIN",
        };
        crate::control(tx.raw(), self.backend, begin).await?;
        let out = f(&mut tx).await;
        if let Ok(Ok(_)) = &out {
            crate::control(tx.raw(), self.backend, "COMMIT").await?;
        } else {
            let _ = crate::control(tx.raw(), self.backend, "ROLLBACK").await;
        }
        out
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Epoch seconds of a nullable `DateTime` column, in the source's dialect.
pub(crate) fn epoch(backend: Backend, col: &str) -> String {
    match backend {
        Backend::Sqlite => format!("CAST(strftime('%s', {col}) AS INTEGER)"),
        Backend::Postgres => format!("CAST(EXTRACT(EPOCH FROM {col}) AS BIGINT)"),
        Backend::MySql => format!("CAST(UNIX_TIMESTAMP({col}) AS SIGNED)"),
    }
}

/// The schema version of the source: every row of `alembic_version` (`product`
/// names the upstream service in the message when there is no such table).
pub async fn schema_version(tx: &mut Tx, product: &str) -> Result<Vec<String>, StoreError> {
    sqlx::query_scalar("SELECT version_num FROM alembic_version")
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| {
            StoreError::Invalid(format!(
                "not an upstream {product} database: reading alembic_version failed ({})",
                crate::db_cause(&e)
            ))
        })
}

/// Refuses any schema but one of `accepted`, naming what was found; `hint` says which
/// releases those are and what to do.
pub fn check_alembic(
    found: &[String],
    product: &str,
    accepted: &[&str],
    hint: &str,
) -> Result<(), StoreError> {
    match found {
        [one] if accepted.contains(&one.as_str()) => Ok(()),
        _ => Err(StoreError::Invalid(format!(
            "unsupported upstream {product} schema: alembic_version is {} (accel reads {}, {hint})",
            if found.is_empty() {
                "empty".to_owned()
            } else {
                found.join(", ")
            },
            accepted.join(" and ")
        ))),
    }
}

/// Refuses any schema but those of [`super::PLACEMENT_SCHEMAS`], naming what was found.
pub fn check_version(found: &[String]) -> Result<(), StoreError> {
    check_alembic(
        found,
        "Placement",
        super::PLACEMENT_SCHEMAS,
        "the schemas of Placement 2023.1 to 16.0.0; upgrade upstream with \
         `placement-manage db sync` first",
    )
}

/// Reads every Placement row of the source in one snapshot, after checking its schema.
pub async fn read_placement(source: &Source) -> Result<PlacementData, StoreError> {
    let b = source.backend;
    source
        .read(move |tx| {
            Box::pin(async move {
                check_version(&schema_version(tx, "Placement").await?)?;
                read_all(tx, b).await
            })
        })
        .await
}

async fn read_all(tx: &mut Tx, b: Backend) -> Result<PlacementData, StoreError> {
    let (c, u) = (epoch(b, "created_at"), epoch(b, "updated_at"));
    let ratio = match b {
        Backend::MySql => "CAST(allocation_ratio AS CHAR)",
        Backend::Sqlite | Backend::Postgres => "allocation_ratio",
    };
    // MySQL's ratio comes as text (see `inventory_with`).
    let inventory = |r: &AnyRow| -> Result<InventoryRow, StoreError> {
        let ratio = match b {
            Backend::MySql => {
                let s: String = r.try_get(7)?;
                s.trim().parse::<f64>().map_err(|_| {
                    StoreError::Invalid(format!("allocation_ratio {s:?} is not a number"))
                })?
            }
            Backend::Sqlite | Backend::Postgres => r.try_get(7)?,
        };
        Ok(inventory_with(r, ratio)?)
    };
    Ok(PlacementData {
        classes: fetch(tx, &format!("SELECT id, name, {c} FROM resource_classes ORDER BY id"), named).await?,
        traits: fetch(tx, &format!("SELECT id, name, {c} FROM traits ORDER BY id"), named).await?,
        aggregates: fetch(
            tx,
            &format!("SELECT id, uuid, {c} FROM placement_aggregates WHERE uuid IS NOT NULL ORDER BY id"),
            named,
        )
        .await?,
        projects: fetch(tx, &format!("SELECT id, external_id, {c} FROM projects ORDER BY id"), named).await?,
        users: fetch(tx, &format!("SELECT id, external_id, {c} FROM users ORDER BY id"), named).await?,
        consumer_types: fetch(tx, &format!("SELECT id, name, {c} FROM consumer_types ORDER BY id"), named).await?,
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
            &format!(
                "SELECT id, uuid, name, generation, root_provider_id, parent_provider_id, {c}, {u} \
                 FROM resource_providers ORDER BY id"
            ),
            provider,
        )
        .await?,
        inventories: fetch(
            tx,
            &format!(
                "SELECT resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, \
                 step_size, {ratio}, {c}, {u} FROM inventories ORDER BY resource_provider_id, resource_class_id"
            ),
            inventory,
        )
        .await?,
        consumers: fetch(
            tx,
            &format!(
                "SELECT id, uuid, project_id, user_id, generation, consumer_type_id, {c}, {u} \
                 FROM consumers ORDER BY id"
            ),
            consumer,
        )
        .await?,
        allocations: fetch(
            tx,
            &format!(
                "SELECT resource_provider_id, consumer_id, resource_class_id, used, {c}, {u} \
                 FROM allocations ORDER BY id"
            ),
            allocation,
        )
        .await?,
    })
}
