//! Helpers for tests that need a real database: a fresh SQLite in-memory store, or a
//! fresh PostgreSQL database on the server named by `ACCEL_TEST_PG` (an admin URL,
//! default `postgres://postgres@127.0.0.1:5432/postgres`). Each call creates its own
//! database so tests never share data.

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

/// Runs one conformance test against each backend in turn: a fresh SQLite store, then
/// a fresh PostgreSQL one (the "one suite, every engine" rule).
pub async fn each_backend<F, Fut>(f: F)
where
    F: Fn(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    f(sqlite().await).await;
    f(postgres().await).await;
}
