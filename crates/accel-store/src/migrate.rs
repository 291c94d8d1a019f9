//! Schema migrations, embedded in the binary and applied at start-up.
//!
//! Each backend has its own SQL files (types differ); both share version numbers.
//! Applying takes a lock first (`pg_advisory_xact_lock` on PostgreSQL, `BEGIN
//! IMMEDIATE` on SQLite) so several servers starting together apply each version once.
//!
//! Why not `sqlx::migrate!`: its migrator runs on one concrete driver, while the store
//! talks through `sqlx::Any` and picks each version's SQL by backend at run time; its
//! PostgreSQL lock is a session advisory lock held across statements, where ours is
//! the transaction's own (released by COMMIT or by a dropped connection); and it
//! checksums each file into `_sqlx_migrations`, which existing databases (our own
//! `accel_schema_migrations` table) do not have.

use crate::{Backend, Store, StoreError};
use sqlx::Connection;

struct Migration {
    version: i64,
    sqlite: &'static str,
    postgres: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sqlite: include_str!("../migrations/sqlite/0001_placement.sql"),
        postgres: include_str!("../migrations/postgres/0001_placement.sql"),
    },
    Migration {
        version: 2,
        sqlite: include_str!("../migrations/sqlite/0002_accelerator.sql"),
        postgres: include_str!("../migrations/postgres/0002_accelerator.sql"),
    },
    Migration {
        version: 3,
        sqlite: include_str!("../migrations/sqlite/0003_placement_changes.sql"),
        postgres: include_str!("../migrations/postgres/0003_placement_changes.sql"),
    },
    Migration {
        version: 4,
        sqlite: include_str!("../migrations/sqlite/0004_bind_worker.sql"),
        postgres: include_str!("../migrations/postgres/0004_bind_worker.sql"),
    },
    Migration {
        version: 5,
        sqlite: include_str!("../migrations/sqlite/0005_usage_indexes.sql"),
        postgres: include_str!("../migrations/postgres/0005_usage_indexes.sql"),
    },
    Migration {
        version: 6,
        sqlite: include_str!("../migrations/sqlite/0006_agent.sql"),
        postgres: include_str!("../migrations/postgres/0006_agent.sql"),
    },
    Migration {
        version: 7,
        sqlite: include_str!("../migrations/sqlite/0007_arq_instance_project_idx.sql"),
        postgres: include_str!("../migrations/postgres/0007_arq_instance_project_idx.sql"),
    },
    Migration {
        version: 8,
        sqlite: include_str!("../migrations/sqlite/0008_kubernetes.sql"),
        postgres: include_str!("../migrations/postgres/0008_kubernetes.sql"),
    },
    Migration {
        version: 9,
        sqlite: include_str!("../migrations/sqlite/0009_program_requests.sql"),
        postgres: include_str!("../migrations/postgres/0009_program_requests.sql"),
    },
    Migration {
        version: 10,
        sqlite: include_str!("../migrations/sqlite/0010_placement_pushes.sql"),
        postgres: include_str!("../migrations/postgres/0010_placement_pushes.sql"),
    },
    Migration {
        version: 11,
        sqlite: include_str!("../migrations/sqlite/0011_server_heartbeats.sql"),
        postgres: include_str!("../migrations/postgres/0011_server_heartbeats.sql"),
    },
];

/// Arbitrary constant naming accel's migration lock.
const PG_LOCK_KEY: i64 = 0x000a_cce1_0001;

pub(crate) async fn run(store: &Store) -> Result<(), StoreError> {
    let mut conn = store.pool.acquire().await?;
    match store.backend {
        Backend::Sqlite => sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?,
        Backend::Postgres => sqlx::query("BEGIN").execute(&mut *conn).await?,
    };
    let result = apply(store.backend, &mut conn).await;
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

async fn apply(backend: Backend, conn: &mut sqlx::AnyConnection) -> Result<(), StoreError> {
    if backend == Backend::Postgres {
        sqlx::query(&format!("SELECT pg_advisory_xact_lock({PG_LOCK_KEY})"))
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS accel_schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
    )
    .execute(&mut *conn)
    .await?;
    let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM accel_schema_migrations")
        .fetch_all(&mut *conn)
        .await?;
    for m in MIGRATIONS {
        if done.contains(&m.version) {
            continue;
        }
        let sql = match backend {
            Backend::Sqlite => m.sqlite,
            Backend::Postgres => m.postgres,
        };
        // Comment lines go first: a `;` inside a comment must not split a statement.
        let sql: String = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            sqlx::query(stmt).execute(&mut *conn).await?;
        }
        sqlx::query("INSERT INTO accel_schema_migrations (version, applied_at) VALUES ($1, $2)")
            .bind(m.version)
            .bind(crate::now())
            .execute(&mut *conn)
            .await?;
        tracing::info!(version = m.version, "applied migration");
    }
    let _ = conn.ping().await;
    Ok(())
}

/// The schema version this binary expects once [`run`] has applied everything.
pub(crate) fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}
