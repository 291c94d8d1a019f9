//! Helpers for tests that need a real database: a fresh SQLite in-memory store, a
//! fresh PostgreSQL database on the server named by `ACCEL_TEST_PG` (an admin URL,
//! default `postgres://postgres@127.0.0.1:5432/postgres`), or, when
//! `ACCEL_TEST_MYSQL` names a MariaDB/MySQL server (`mysql://root@127.0.0.1:3306`), a
//! fresh database there. Each call creates its own database so tests never share data.
//!
//! MariaDB is opt-in (unset, the suites run on SQLite and PostgreSQL only) so that a
//! machine without it still runs every test; CI sets it.

use crate::{Store, StoreError};

/// The admin URL of the PostgreSQL server tests use.
pub fn pg_admin_url() -> String {
    std::env::var("ACCEL_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Creates an empty PostgreSQL database and returns its URL.
pub async fn fresh_postgres_url() -> Result<String, StoreError> {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let admin = pg_admin_url();
    let name = format!("accel_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::AnyConnection::connect(&admin).await?;
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
    let name = format!("accel_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::AnyConnection::connect(&base).await?;
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
