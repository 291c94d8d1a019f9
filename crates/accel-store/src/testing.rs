//! Helpers for tests that need a real database: a fresh SQLite in-memory store, a
//! fresh PostgreSQL database on the server named by `ACCEL_TEST_PG` (an admin URL,
//! default `postgres://postgres@127.0.0.1:5432/postgres`), or, when
//! `ACCEL_TEST_MYSQL` names a MariaDB/MySQL server (`mysql://root@127.0.0.1:3306`), a
//! fresh database there. Each call creates its own database so tests never share data.
//!
//! MariaDB is opt-in (unset, the suites run on SQLite and PostgreSQL only) so that a
//! machine without it still runs every test; CI sets it.
//!
//! A test does not drop its database (a failed test's data is worth reading). Their
//! names carry the time they were made (`accel_test_<unix seconds>_<random>`), and the
//! first fresh database a test process makes on a server drops those made more than
//! [`KEEP_TEST_DATABASES`] ago, so a developer's servers do not fill up run by run.
//! Databases of another name, or younger, are never touched (another checkout may be
//! running its tests on the same server).

pub mod upstream;

use crate::{Store, StoreError};
use std::time::Duration;

/// How long a test database is kept before a later test run drops it.
pub const KEEP_TEST_DATABASES: Duration = Duration::from_secs(6 * 3600);

const TEST_PREFIX: &str = "accel_test_";

/// A new test database's name, stamped with the time.
fn test_database_name() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{TEST_PREFIX}{}_{}", crate::now(), &random[..12])
}

/// Whether `name` is a test database made more than [`KEEP_TEST_DATABASES`] before `now`.
fn expired(name: &str, now: i64) -> bool {
    let Some(rest) = name.strip_prefix(TEST_PREFIX) else {
        return false;
    };
    let Some((stamp, random)) = rest.split_once('_') else {
        return false;
    };
    let keep = KEEP_TEST_DATABASES.as_secs() as i64;
    random.len() == 12
        && random.bytes().all(|b| b.is_ascii_hexdigit())
        && stamp.parse::<i64>().is_ok_and(|t| t < now - keep)
}

/// Drops the expired test databases that `list` (a query answering names) finds, once
/// per process and server kind; a drop that fails is left for the next run.
async fn prune_once(
    conn: &mut sqlx::AnyConnection,
    done: &std::sync::atomic::AtomicBool,
    list: &str,
) {
    use std::sync::atomic::Ordering;
    if done.swap(true, Ordering::SeqCst) {
        return;
    }
    let Ok(names) = sqlx::query_scalar::<_, String>(list)
        .fetch_all(&mut *conn)
        .await
    else {
        return;
    };
    let now = crate::now();
    for name in names.iter().filter(|n| expired(n, now)) {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
            .execute(&mut *conn)
            .await;
    }
}

/// The admin URL of the PostgreSQL server tests use.
pub fn pg_admin_url() -> String {
    std::env::var("ACCEL_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Creates an empty PostgreSQL database and returns its URL.
pub async fn fresh_postgres_url() -> Result<String, StoreError> {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    static PRUNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let admin = pg_admin_url();
    let name = test_database_name();
    let mut conn = sqlx::AnyConnection::connect(&admin).await?;
    prune_once(
        &mut conn,
        &PRUNED,
        "SELECT datname::text FROM pg_database WHERE datname LIKE 'accel_test_%'",
    )
    .await;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    Ok(format!("{base}/{name}"))
}

/// The admin URL of the MariaDB/MySQL server tests use, when `ACCEL_TEST_MYSQL` is set
/// (and not empty).
pub fn mysql_admin_url() -> Option<String> {
    std::env::var("ACCEL_TEST_MYSQL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// Creates an empty MariaDB/MySQL database on the server of [`mysql_admin_url`] and
/// returns its URL; `None` when no server is configured.
pub async fn fresh_mysql_url() -> Result<Option<String>, StoreError> {
    use sqlx::{Connection, Executor};
    let Some(admin) = mysql_admin_url() else {
        return Ok(None);
    };
    sqlx::any::install_default_drivers();
    let admin = match admin.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => admin,
    };
    // The server part: scheme, credentials, host and port, without a database path.
    let (scheme, rest) = admin.split_once("://").unwrap_or(("mysql", &admin));
    let server = rest.split(['/', '?']).next().unwrap_or(rest);
    let base = format!("{scheme}://{server}");
    static PRUNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let name = test_database_name();
    let mut conn = sqlx::AnyConnection::connect(&base).await?;
    prune_once(
        &mut conn,
        &PRUNED,
        "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'accel_test_%'",
    )
    .await;
    conn.execute(
        format!("CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin").as_str(),
    )
    .await?;
    conn.close().await?;
    Ok(Some(format!("{base}/{name}")))
}

/// A migrated store on a fresh MariaDB/MySQL database, `None` when
/// `ACCEL_TEST_MYSQL` is unset.
pub async fn mysql() -> Option<Store> {
    let url = fresh_mysql_url()
        .await
        .expect("create MariaDB/MySQL test database")?;
    Some(Store::connect(&url).await.expect("mysql store"))
}

/// A migrated store on a fresh SQLite in-memory database.
pub async fn sqlite() -> Store {
    Store::connect("sqlite::memory:")
        .await
        .expect("sqlite store")
}

/// A migrated store on a fresh PostgreSQL database.
pub async fn postgres() -> Store {
    let url = fresh_postgres_url()
        .await
        .expect("create PostgreSQL test database");
    Store::connect(&url).await.expect("postgres store")
}

/// Runs one conformance test against each backend in turn: a fresh SQLite store, a
/// fresh PostgreSQL one, and a fresh MariaDB/MySQL one when `ACCEL_TEST_MYSQL` is set
/// (the "one suite, every engine" rule).
pub async fn each_backend<F, Fut>(f: F)
where
    F: Fn(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    f(sqlite().await).await;
    f(postgres().await).await;
    if let Some(store) = mysql().await {
        f(store).await;
    }
}

/// Runs one SQL statement in `tx` as it is written, for tests that shape the database
/// beyond what the store's operations allow (a trigger that makes one write fail, say):
/// the rows it changed.
pub async fn execute(tx: &mut crate::Tx, sql: &str) -> Result<u64, StoreError> {
    Ok(sqlx::query(sql).execute(&mut *tx).await?.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stamped_test_databases_older_than_the_window_expire() {
        let now = 2_000_000_000;
        let old = now - KEEP_TEST_DATABASES.as_secs() as i64 - 1;
        assert!(expired(&format!("accel_test_{old}_0123456789ab"), now));
        assert!(!expired(
            &format!("accel_test_{}_0123456789ab", now - 60),
            now
        ));
        for other in [
            "accel_test_0123456789abcdef0123456789abcdef".to_owned(),
            format!("accel_test_{old}_notarandompart"),
            format!("accel_gabbi_{old}_0123456789ab"),
            format!("accel_test_{old}"),
            "postgres".to_owned(),
        ] {
            assert!(!expired(&other, now), "{other}");
        }
    }
}
