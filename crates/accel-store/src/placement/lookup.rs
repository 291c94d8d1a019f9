//! Name <-> id lookups for resource classes and traits, used by every other module.

use crate::{placeholders, StoreError, Tx};
use sqlx::Row;
use std::collections::HashMap;

async fn ids(
    tx: &mut Tx,
    table: &str,
    names: &[String],
) -> Result<HashMap<String, i64>, StoreError> {
    let mut names: Vec<&String> = names.iter().collect();
    names.sort_unstable();
    names.dedup();
    let mut out = HashMap::new();
    // Batched: a request may name thousands of classes or traits.
    for chunk in names.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT id, name FROM {table} WHERE name IN ({})",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for n in chunk {
            q = q.bind(n.as_str());
        }
        for row in q.fetch_all(&mut *tx).await? {
            out.insert(
                row.try_get::<String, _>("name")?,
                row.try_get::<i64, _>("id")?,
            );
        }
    }
    Ok(out)
}

/// Ids of the named resource classes that exist.
pub async fn resource_class_ids(
    tx: &mut Tx,
    names: &[String],
) -> Result<HashMap<String, i64>, StoreError> {
    ids(tx, "resource_classes", names).await
}

/// Ids of the named traits that exist.
pub async fn trait_ids(tx: &mut Tx, names: &[String]) -> Result<HashMap<String, i64>, StoreError> {
    ids(tx, "traits", names).await
}

/// Every resource class id -> name.
pub async fn resource_class_names(tx: &mut Tx) -> Result<HashMap<i64, String>, StoreError> {
    let rows = sqlx::query("SELECT id, name FROM resource_classes")
        .fetch_all(&mut *tx)
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("id")?, r.try_get("name")?)))
        .collect()
}
