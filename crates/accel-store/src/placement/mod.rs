//! Placement's tables: resource providers, classes, traits, aggregates, inventories,
//! consumers and allocations.
//!
//! The API's operations are grouped per resource, each a handle on the [`Store`] that
//! opens its own snapshot or transaction (and reruns it where upstream does):
//! [`Store::providers`], [`Store::inventories`], [`Store::allocations`],
//! [`Store::usages`], [`Store::traits`], [`Store::classes`], [`Store::aggregates`],
//! [`Store::reshape`], [`Store::changes`] and [`Store::world`]. What they refuse is a
//! [`Refused`] (worded by the Placement API, not here).
//!
//! Beneath them, functions take an open transaction (`&mut Tx`) so several compose in
//! one atomic unit (an agent's report composes them with its own writes). Names
//! (resource classes, traits) are resolved to ids here; callers pass validated names
//! from `accel_core::names`.

pub mod aggregates;
pub mod allocations;
pub mod changes;
pub mod classes;
pub mod inventories;
pub mod lookup;
pub mod providers;
pub use crate::refused::placement as refused;
pub mod reshape;
pub mod traits;

use crate::{Store, StoreError, Tx};
use accel_core::standard;

/// The generation compare-and-swap of a provider or consumer row: moves row `id` of
/// `table` from generation `expected` to the next, stamping `updated_at` with `now`.
/// A writer that read an older generation changes nothing and is refused with `lost`
/// ([`Refused::ProviderChanged`] or [`Refused::ConsumerChanged`]); this, not a lock,
/// is what keeps concurrent writers (and replicas) from overwriting each other.
pub(crate) async fn bump(
    tx: &mut Tx,
    table: &str,
    id: i64,
    expected: i64,
    now: i64,
    lost: Refused,
) -> Result<i64, StoreError> {
    let n = sqlx::query(&format!(
        "UPDATE {table} SET generation = $1, updated_at = $2 WHERE id = $3 AND generation = $4"
    ))
    .bind(expected + 1)
    .bind(now)
    .bind(id)
    .bind(expected)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if n != 1 {
        return Err(lost.into());
    }
    Ok(expected + 1)
}

/// Inserts the standard resource classes (ids = upstream index) and the os-traits
/// catalogue when missing. Idempotent and safe to run from several servers at once:
/// replicas starting together insert the same rows and can deadlock, so it is rerun
/// as upstream's `_resource_classes_sync` and `_trait_sync` are.
pub(crate) async fn sync_standards(store: &Store) -> Result<(), StoreError> {
    store
        .write_rerunning(|| {
            |tx| Box::pin(async move {
                let now = crate::now();
                let mut added = 0;
                for (i, name) in standard::RESOURCE_CLASSES.iter().enumerate() {
                    added += sqlx::query(
                        "INSERT INTO resource_classes (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    )
                    .bind(i as i64)
                    .bind(*name)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                }
                let have: Vec<String> = sqlx::query_scalar("SELECT name FROM traits")
                    .fetch_all(&mut *tx)
                    .await?;
                let have: std::collections::HashSet<String> = have.into_iter().collect();
                for name in standard::traits().filter(|t| !have.contains(*t)) {
                    added += sqlx::query(
                        "INSERT INTO traits (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    )
                    .bind(name)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                }
                // A start that added nothing writes nothing: a refused import, a dry
                // run or a verify opens the target and must leave it as it was, change
                // log included (issue 42).
                if added > 0 {
                    changes::touch_names(tx).await?;
                }
                Ok(())
            })
        })
        .await
}
pub mod world;
pub use refused::{ParentRefusal, Refused};

/// Deletes row `id` of a name table (`resource_classes`, `traits`) unless `uses` (a
/// `SELECT COUNT(*) ... = $1` over the rows that refer to it) finds it in use, which is
/// refused with `in_use`; a row gone meanwhile is `missing`. Bumps the names version.
pub(crate) async fn delete_unused_name(
    tx: &mut crate::Tx,
    table: &str,
    uses: &str,
    id: i64,
    in_use: Refused,
    missing: Refused,
) -> Result<(), StoreError> {
    let used: i64 = sqlx::query_scalar(uses)
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    if used > 0 {
        return Err(in_use.into());
    }
    let n = sqlx::query(&format!("DELETE FROM {table} WHERE id = $1"))
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if n != 1 {
        return Err(missing.into());
    }
    changes::touch_names(tx).await
}
