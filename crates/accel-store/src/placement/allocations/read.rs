//! Allocation rows as the API lists them: by consumer (`GET /allocations/{uuid}`) and
//! by provider (`GET /resource_providers/{uuid}/allocations`), from one shared query
//! so both show a row the same way.

use crate::{StoreError, Tx};
use sqlx::Row;

/// One allocation row as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocationRow {
    pub rp_uuid: String,
    pub rp_generation: i64,
    pub rc_name: String,
    pub used: i64,
    pub consumer_uuid: String,
    pub consumer_generation: i64,
    pub project_id: String,
    pub user_id: String,
    /// `None`: no type recorded (shown as `unknown`).
    pub consumer_type: Option<String>,
    /// `updated_at` or `created_at` (epoch seconds).
    pub modified: i64,
}

const ROW_SELECT: &str = "SELECT rp.uuid, rp.generation, rc.name, a.used, c.uuid, c.generation, \
     p.external_id, u.external_id, ct.name, COALESCE(a.updated_at, a.created_at) \
     FROM allocations a \
     JOIN resource_providers rp ON rp.id = a.resource_provider_id \
     JOIN resource_classes rc ON rc.id = a.resource_class_id \
     JOIN consumers c ON c.uuid = a.consumer_id \
     JOIN projects p ON p.id = c.project_id \
     JOIN users u ON u.id = c.user_id \
     LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id";

fn row(r: &sqlx::any::AnyRow) -> Result<AllocationRow, sqlx::Error> {
    Ok(AllocationRow {
        rp_uuid: r.try_get(0)?,
        rp_generation: r.try_get(1)?,
        rc_name: r.try_get(2)?,
        used: r.try_get(3)?,
        consumer_uuid: r.try_get(4)?,
        consumer_generation: r.try_get(5)?,
        project_id: r.try_get(6)?,
        user_id: r.try_get(7)?,
        consumer_type: r.try_get(8)?,
        modified: r.try_get(9)?,
    })
}

/// A consumer's allocations, in insertion order.
pub async fn for_consumer(
    tx: &mut Tx,
    consumer_uuid: &str,
) -> Result<Vec<AllocationRow>, StoreError> {
    let rows = sqlx::query(&format!(
        "{ROW_SELECT} WHERE a.consumer_id = $1 ORDER BY a.id"
    ))
    .bind(consumer_uuid)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.iter().map(row).collect::<Result<_, _>>()?)
}

/// A provider's allocations, in insertion order.
pub async fn for_provider(tx: &mut Tx, rp_id: i64) -> Result<Vec<AllocationRow>, StoreError> {
    let rows = sqlx::query(&format!(
        "{ROW_SELECT} WHERE a.resource_provider_id = $1 ORDER BY a.id"
    ))
    .bind(rp_id)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.iter().map(row).collect::<Result<_, _>>()?)
}
