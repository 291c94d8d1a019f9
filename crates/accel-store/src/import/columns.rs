//! Placement's rows as both ways read them: upstream's tables by an import
//! (`read.rs`), accel's own by an export (`export.rs`). The two schemas name the same
//! columns, so one mapper per table reads a row of either, given a SELECT that names its
//! columns in the mapper's order.

use super::{AllocationRow, ConsumerRow, InventoryRow, Named, ProviderRow};
use crate::{StoreError, Tx};
use sqlx::any::AnyRow;
use sqlx::Row;

/// Every row of `sql`, each read by `map`.
pub(super) async fn fetch<T, E>(
    tx: &mut Tx,
    sql: &str,
    map: impl Fn(&AnyRow) -> Result<T, E>,
) -> Result<Vec<T>, StoreError>
where
    StoreError: From<E>,
{
    let rows = sqlx::query(sql).fetch_all(&mut *tx).await?;
    Ok(rows.iter().map(map).collect::<Result<_, _>>()?)
}

pub(super) fn named(r: &AnyRow) -> Result<Named, sqlx::Error> {
    Ok(Named {
        id: r.try_get(0)?,
        name: r.try_get(1)?,
        created: r.try_get(2)?,
    })
}

pub(super) fn pair(r: &AnyRow) -> Result<(i64, i64), sqlx::Error> {
    Ok((r.try_get(0)?, r.try_get(1)?))
}

pub(super) fn provider(r: &AnyRow) -> Result<ProviderRow, sqlx::Error> {
    Ok(ProviderRow {
        id: r.try_get(0)?,
        uuid: r.try_get(1)?,
        name: r.try_get(2)?,
        generation: r.try_get(3)?,
        root_id: r.try_get(4)?,
        parent_id: r.try_get(5)?,
        created: r.try_get(6)?,
        updated: r.try_get(7)?,
    })
}

pub(super) fn inventory(r: &AnyRow) -> Result<InventoryRow, sqlx::Error> {
    inventory_with(r, r.try_get(7)?)
}

/// An inventory row whose `allocation_ratio` (column 7) was read by the caller: MySQL's
/// upstream keeps it as a `Float` that sqlx's `Any` reads only as text.
pub(super) fn inventory_with(
    r: &AnyRow,
    allocation_ratio: f64,
) -> Result<InventoryRow, sqlx::Error> {
    Ok(InventoryRow {
        provider_id: r.try_get(0)?,
        class_id: r.try_get(1)?,
        total: r.try_get(2)?,
        reserved: r.try_get(3)?,
        min_unit: r.try_get(4)?,
        max_unit: r.try_get(5)?,
        step_size: r.try_get(6)?,
        allocation_ratio,
        created: r.try_get(8)?,
        updated: r.try_get(9)?,
    })
}

pub(super) fn consumer(r: &AnyRow) -> Result<ConsumerRow, sqlx::Error> {
    Ok(ConsumerRow {
        id: r.try_get(0)?,
        uuid: r.try_get(1)?,
        project_id: r.try_get(2)?,
        user_id: r.try_get(3)?,
        generation: r.try_get(4)?,
        type_id: r.try_get(5)?,
        created: r.try_get(6)?,
        updated: r.try_get(7)?,
    })
}

pub(super) fn allocation(r: &AnyRow) -> Result<AllocationRow, sqlx::Error> {
    Ok(AllocationRow {
        provider_id: r.try_get(0)?,
        consumer: r.try_get(1)?,
        class_id: r.try_get(2)?,
        used: r.try_get(3)?,
        created: r.try_get(4)?,
        updated: r.try_get(5)?,
    })
}
