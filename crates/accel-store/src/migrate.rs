//! Schema migrations, embedded in the binary and applied at start-up.
//!
//! SQLite and PostgreSQL share one SQL file per version, written for PostgreSQL: SQLite
//! takes it with two type names swapped ([`for_sqlite`]), and has a file of its own
//! only where its SQL really differs (`migrations/sqlite/`: a recursive CTE for
//! `generate_series`, a table rebuilt to drop a NOT NULL). MariaDB/MySQL have their
//! own files (foreign keys as table constraints, `AUTO_INCREMENT`, a stored procedure).
//! All share version numbers.
//! Applying takes a lock first (`pg_advisory_xact_lock` on PostgreSQL, `BEGIN
//! IMMEDIATE` on SQLite, `GET_LOCK` on MariaDB/MySQL) so several servers starting
//! together apply each version once.
//!
//! MariaDB/MySQL commit each DDL statement on their own, so there the migration
//! transaction does not make a version atomic; the named lock (held by the session,
//! across those implicit commits, and released when the session ends) is what keeps
//! replicas from applying a version twice. Every table is created `utf8mb4` with a
//! binary NO PAD collation ([`mysql_collation`]): names, uuids and traits then compare
//! byte for byte, as on the other backends, where MySQL's default collations would
//! fold case and ignore trailing spaces.
//!
//! Why not `sqlx::migrate!`: its migrator runs on one concrete driver, while the store
//! talks through `sqlx::Any` and picks each version's SQL by backend at run time; its
//! PostgreSQL lock is a session advisory lock held across statements, where ours is
//! the transaction's own (released by COMMIT or by a dropped connection); and it
//! checksums each file into `_sqlx_migrations`, which existing databases (our own
//! `accel_schema_migrations` table) do not have.

use crate::dialect::Backend;
use crate::error::StoreError;
use sqlx::AnyPool;
use sqlx::Connection;

struct Migration {
    version: i64,
    /// SQLite's own SQL where PostgreSQL's will not do ([`for_sqlite`] otherwise).
    sqlite: Option<&'static str>,
    postgres: &'static str,
    mysql: &'static str,
}

/// One version's entry: the file of that name in each backend's folder, SQLite's own
/// where it is marked `sqlite` (else SQLite takes PostgreSQL's through [`for_sqlite`]).
/// One name for every backend, so no version can pair files from different versions.
macro_rules! migration {
    ($version:literal, $file:literal) => {
        migration!(@ $version, $file, None)
    };
    ($version:literal, $file:literal, sqlite) => {
        migration!(@ $version, $file, Some(include_str!(concat!("../migrations/sqlite/", $file))))
    };
    (@ $version:literal, $file:literal, $sqlite:expr) => {
        Migration {
            version: $version,
            sqlite: $sqlite,
            postgres: include_str!(concat!("../migrations/postgres/", $file)),
            mysql: include_str!(concat!("../migrations/mysql/", $file)),
        }
    };
}

const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001_placement.sql"),
    migration!(2, "0002_accelerator.sql"),
    migration!(3, "0003_placement_changes.sql", sqlite),
    migration!(4, "0004_bind_worker.sql"),
    migration!(5, "0005_usage_indexes.sql"),
    migration!(6, "0006_agent.sql"),
    migration!(7, "0007_arq_instance_project_idx.sql"),
    migration!(8, "0008_kubernetes.sql"),
    migration!(9, "0009_program_requests.sql", sqlite),
    migration!(10, "0010_placement_pushes.sql"),
    migration!(11, "0011_server_heartbeats.sql"),
    migration!(12, "0012_create_roots.sql"),
    migration!(13, "0013_device_cleanings.sql"),
    migration!(14, "0014_device_history.sql"),
    migration!(15, "0015_maintenance.sql"),
    migration!(16, "0016_gpu_ledgers.sql"),
];

/// Arbitrary constant naming accel's migration lock.
const PG_LOCK_KEY: i64 = 0x000a_cce1_0001;

/// The name of accel's migration lock on MariaDB/MySQL (one per server, so it names
/// the database too).
const MYSQL_LOCK: &str = "CONCAT('accel_migrations.', DATABASE())";

/// How long a replica waits for another's migrations, in seconds.
const MYSQL_LOCK_WAIT: i64 = 300;

pub(crate) async fn run(backend: Backend, pool: &AnyPool) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await?;
    if backend == Backend::MySql {
        return run_mysql(&mut conn).await;
    }
    match backend {
        Backend::Sqlite => sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?,
        Backend::Postgres | Backend::MySql => sqlx::query("BEGIN").execute(&mut *conn).await?,
    };
    let result = apply(backend, &mut conn).await;
    match result {
        Ok(()) => {
            sqlx::query("COMMIT").execute(&mut *conn).await?;
            Ok(())
        }
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            Err(e)
        }
    }
}

/// Applies what is missing, in order, on one connection under the caller's lock. The
/// backends differ only in table options (MariaDB/MySQL: engine, character set and
/// binary collation on every table), placeholders and how a statement is sent.
async fn apply(backend: Backend, conn: &mut sqlx::AnyConnection) -> Result<(), StoreError> {
    let options = match backend {
        Backend::MySql => {
            let collation = mysql_collation(&mut *conn).await?;
            format!(" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation}")
        }
        Backend::Sqlite | Backend::Postgres => String::new(),
    };
    if backend == Backend::Postgres {
        sqlx::query(&format!("SELECT pg_advisory_xact_lock({PG_LOCK_KEY})"))
            .execute(&mut *conn)
            .await?;
    }
    let create = format!(
        "CREATE TABLE IF NOT EXISTS accel_schema_migrations \
         (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL){options}"
    );
    execute(backend, conn, &create).await?;
    let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM accel_schema_migrations")
        .fetch_all(&mut *conn)
        .await?;
    let insert = match backend {
        Backend::MySql => "INSERT INTO accel_schema_migrations (version, applied_at) VALUES (?, ?)",
        Backend::Sqlite | Backend::Postgres => {
            "INSERT INTO accel_schema_migrations (version, applied_at) VALUES ($1, $2)"
        }
    };
    for m in MIGRATIONS {
        if done.contains(&m.version) {
            continue;
        }
        let sql = match (backend, m.sqlite) {
            (Backend::Sqlite, Some(own)) => own.to_owned(),
            (Backend::Sqlite, None) => for_sqlite(m.postgres),
            (Backend::Postgres, _) => m.postgres.to_owned(),
            (Backend::MySql, _) => m.mysql.to_owned(),
        };
        // Comment lines go first: a `;` inside a comment must not split a statement.
        let sql: String = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        // A stored routine's body has semicolons of its own: its file is one statement.
        let statements: Vec<&str> = if sql.trim_start().starts_with("CREATE PROCEDURE") {
            vec![sql.trim()]
        } else {
            sql.split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        };
        for stmt in statements {
            let stmt = if stmt.starts_with("CREATE TABLE") {
                format!("{stmt}{options}")
            } else {
                stmt.to_owned()
            };
            execute(backend, conn, &stmt).await?;
        }
        sqlx::query(insert)
            .bind(m.version)
            .bind(crate::dialect::now())
            .execute(&mut *conn)
            .await?;
        tracing::info!(version = m.version, "applied migration");
    }
    if backend != Backend::MySql {
        let _ = conn.ping().await;
    }
    Ok(())
}

/// PostgreSQL's migration SQL as SQLite takes it: an id column aliases SQLite's rowid
/// (and so numbers itself) only when declared exactly `INTEGER PRIMARY KEY`, and
/// floating-point columns are named `REAL`, as in the schema existing SQLite databases
/// were created with.
fn for_sqlite(postgres: &str) -> String {
    postgres
        .replace("BIGSERIAL PRIMARY KEY", "INTEGER PRIMARY KEY AUTOINCREMENT")
        .replace("DOUBLE PRECISION", "REAL")
}

/// One migration statement: MariaDB/MySQL takes DDL unprepared (text protocol); the
/// others run it as a prepared statement.
async fn execute(
    backend: Backend,
    conn: &mut sqlx::AnyConnection,
    stmt: &str,
) -> Result<(), StoreError> {
    use sqlx::Executor;
    match backend {
        Backend::MySql => conn.execute(stmt).await?,
        Backend::Sqlite | Backend::Postgres => sqlx::query(stmt).execute(&mut *conn).await?,
    };
    Ok(())
}

/// What a database holds of the schema, against what this binary carries
/// (`accel db version`, `accel upgrade check`, `accel serve --no-migrate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// Versions applied to the database, ascending (empty: a database accel never
    /// migrated).
    pub applied: Vec<i64>,
    /// Versions this binary carries, ascending.
    pub known: Vec<i64>,
}

impl Schema {
    /// The highest applied version (0 for none).
    pub fn current(&self) -> i64 {
        self.applied.last().copied().unwrap_or(0)
    }

    /// The highest version this binary carries.
    pub fn latest(&self) -> i64 {
        self.known.last().copied().unwrap_or(0)
    }

    /// Versions this binary would apply.
    pub fn pending(&self) -> Vec<i64> {
        let applied = &self.applied;
        self.known
            .iter()
            .copied()
            .filter(|v| !applied.contains(v))
            .collect()
    }

    /// Applied versions this binary does not know: a newer accel migrated the database.
    pub fn unknown(&self) -> Vec<i64> {
        let known = &self.known;
        self.applied
            .iter()
            .copied()
            .filter(|v| !known.contains(v))
            .collect()
    }
}

/// The database's applied versions (none when accel's version table is absent).
pub(crate) async fn schema(backend: Backend, pool: &AnyPool) -> Result<Schema, StoreError> {
    let mut conn = pool.acquire().await?;
    let exists = match backend {
        Backend::Sqlite => {
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' \
             AND name = 'accel_schema_migrations'"
        }
        Backend::Postgres => {
            "SELECT CAST(COUNT(*) AS BIGINT) FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = 'accel_schema_migrations'"
        }
        Backend::MySql => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name = 'accel_schema_migrations'"
        }
    };
    let n: i64 = sqlx::query_scalar(exists).fetch_one(&mut *conn).await?;
    let applied = if n == 0 {
        Vec::new()
    } else {
        sqlx::query_scalar("SELECT version FROM accel_schema_migrations ORDER BY version")
            .fetch_all(&mut *conn)
            .await?
    };
    Ok(Schema {
        applied,
        known: MIGRATIONS.iter().map(|m| m.version).collect(),
    })
}

/// The schema version this binary expects once [`run`] has applied everything.
pub(crate) fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// MariaDB/MySQL: the migrations under `GET_LOCK`, released however they end.
async fn run_mysql(conn: &mut sqlx::AnyConnection) -> Result<(), StoreError> {
    let got: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT CAST(GET_LOCK({MYSQL_LOCK}, {MYSQL_LOCK_WAIT}) AS SIGNED)"
    ))
    .fetch_one(&mut *conn)
    .await?;
    if got != Some(1) {
        tracing::error!(
            wait_s = MYSQL_LOCK_WAIT,
            "another server held the migration lock too long"
        );
        return Err(StoreError::Config(format!(
            "could not take the migration lock within {MYSQL_LOCK_WAIT}s: another accel \
             server is migrating this database, or died holding its session"
        )));
    }
    let result = apply(Backend::MySql, &mut *conn).await;
    let released = sqlx::query(&format!("DO RELEASE_LOCK({MYSQL_LOCK})"))
        .execute(&mut *conn)
        .await;
    if let Err(e) = &released {
        tracing::warn!(error = %e, "releasing the migration lock failed; closing the session frees it");
    }
    result?;
    released?;
    Ok(())
}

/// The binary, NO PAD utf8mb4 collation of this server: MariaDB (10.6+) and MySQL
/// (8.0+) name it differently; `utf8mb4_bin` pads with spaces on both.
async fn mysql_collation(conn: &mut sqlx::AnyConnection) -> Result<&'static str, StoreError> {
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut *conn)
        .await?;
    Ok(if version.to_ascii_lowercase().contains("mariadb") {
        "utf8mb4_nopad_bin"
    } else {
        "utf8mb4_0900_bin"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_takes_postgres_ids_and_floats_in_its_own_names() {
        let pg = "CREATE TABLE t (\n    id BIGSERIAL PRIMARY KEY,\n    ratio DOUBLE PRECISION NOT NULL,\n    n BIGINT\n)";
        assert_eq!(
            for_sqlite(pg),
            "CREATE TABLE t (\n    id INTEGER PRIMARY KEY AUTOINCREMENT,\n    ratio REAL NOT NULL,\n    n BIGINT\n)"
        );
    }

    /// A shared file must say nothing SQLite cannot run once its two type names are
    /// swapped: what PostgreSQL alone knows goes into a file under `migrations/sqlite/`.
    #[test]
    fn shared_migrations_hold_nothing_only_postgresql_runs() {
        let postgres_only = [
            "BIGSERIAL",
            "SERIAL",
            "DOUBLE PRECISION",
            "generate_series",
            "ALTER COLUMN",
            "::",
            "ILIKE",
            "JSONB",
            "TIMESTAMPTZ",
        ];
        for m in MIGRATIONS.iter().filter(|m| m.sqlite.is_none()) {
            let sql = for_sqlite(m.postgres);
            for word in postgres_only {
                assert!(
                    !sql.to_uppercase().contains(&word.to_uppercase()),
                    "migration {} shares `{word}` with SQLite",
                    m.version
                );
            }
        }
        for m in MIGRATIONS.iter().filter_map(|m| m.sqlite) {
            assert!(
                !m.contains("BIGSERIAL"),
                "SQLite's own file names a PostgreSQL type"
            );
        }
    }
}
