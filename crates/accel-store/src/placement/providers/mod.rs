//! Resource providers: the nodes of provider trees.
//!
//! A provider's `root_provider_id` is denormalised (upstream does the same) so that
//! tree queries are one indexed lookup. Re-parenting (1.37) rewrites the root of the
//! whole moved subtree in the same transaction.

mod batch;
mod list;

pub use batch::{create_many, create_roots, create_roots_alone, NewChild};
pub use list::{list, Filter};

use super::changes;
use crate::{placeholders, Conflict, StoreError, Tx};
use sqlx::Row;

/// A provider as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub generation: i64,
    pub parent_uuid: Option<String>,
    pub root_uuid: String,
    pub parent_id: Option<i64>,
    pub root_id: i64,
    /// `updated_at`, or `created_at` when never updated (epoch seconds).
    pub modified: i64,
}

const SELECT: &str = "SELECT rp.id, rp.uuid, rp.name, rp.generation, rp.parent_provider_id, \
     rp.root_provider_id, p.uuid AS parent_uuid, r.uuid AS root_uuid, \
     COALESCE(rp.updated_at, rp.created_at) AS modified \
     FROM resource_providers rp \
     JOIN resource_providers r ON r.id = rp.root_provider_id \
     LEFT JOIN resource_providers p ON p.id = rp.parent_provider_id";

fn from_row(row: &sqlx::any::AnyRow) -> Result<Provider, sqlx::Error> {
    Ok(Provider {
        id: row.try_get("id")?,
        uuid: row.try_get("uuid")?,
        name: row.try_get("name")?,
        generation: row.try_get("generation")?,
        parent_id: row.try_get("parent_provider_id")?,
        root_id: row.try_get("root_provider_id")?,
        parent_uuid: row.try_get("parent_uuid")?,
        root_uuid: row.try_get("root_uuid")?,
        modified: row.try_get("modified")?,
    })
}

pub async fn get(tx: &mut Tx, uuid: &str) -> Result<Option<Provider>, StoreError> {
    let row = sqlx::query(&format!("{SELECT} WHERE rp.uuid = $1"))
        .bind(uuid)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(row.as_ref().map(from_row).transpose()?)
}

/// Like [`get`] but a missing provider is [`StoreError::NotFound`].
pub async fn require(tx: &mut Tx, uuid: &str) -> Result<Provider, StoreError> {
    get(tx, uuid)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("resource provider {uuid}")))
}

/// Which of `uuid` and `name` are already taken (for the duplicate message).
pub async fn taken(tx: &mut Tx, uuid: &str, name: &str) -> Result<(bool, bool), StoreError> {
    let rows =
        sqlx::query("SELECT uuid, name FROM resource_providers WHERE uuid = $1 OR name = $2")
            .bind(uuid)
            .bind(name)
            .fetch_all(&mut *tx)
            .await?;
    let mut dup = (false, false);
    for r in rows {
        let u: String = r.try_get("uuid")?;
        let n: String = r.try_get("name")?;
        dup.0 |= u == uuid;
        dup.1 |= n == name;
    }
    Ok(dup)
}

/// Creates a provider; the parent (if any) must exist.
pub async fn create(
    tx: &mut Tx,
    uuid: &str,
    name: &str,
    parent_uuid: Option<&str>,
) -> Result<Provider, StoreError> {
    // A taken uuid or name outranks a bad parent, as upstream checks them. PostgreSQL
    // aborts the whole transaction on a failed insert, so there they are checked
    // first; MySQL and SQLite undo only the failed statement, so the insert goes
    // first and the check runs only when it (or the parent) fails: one round trip
    // less on every create.
    let checked = tx.backend() == crate::Backend::Postgres;
    if checked {
        check_free(tx, uuid, name).await?;
    }
    let parent = match parent_uuid {
        None => None,
        Some(p) => {
            let found = if p == uuid {
                Err(same_as_parent())
            } else {
                get(tx, p).await?.ok_or_else(|| {
                    StoreError::Invalid("parent provider UUID does not exist.".into())
                })
            };
            match found {
                Ok(parent) => Some(parent),
                Err(e) => {
                    if !checked {
                        check_free(tx, uuid, name).await?;
                    }
                    return Err(e);
                }
            }
        }
    };
    match insert(tx, uuid, name, parent.as_ref()).await {
        Err(e) if !checked && e.is_unique_violation() => {
            check_free(tx, uuid, name).await?;
            Err(e)
        }
        inserted => inserted,
    }
}

fn same_as_parent() -> StoreError {
    StoreError::Invalid(
        "parent provider UUID cannot be same as UUID. Please set parent provider UUID to None if there is no parent.".into(),
    )
}

/// Upstream's 409 when the uuid or the name is taken.
async fn check_free(tx: &mut Tx, uuid: &str, name: &str) -> Result<(), StoreError> {
    let (dup_uuid, dup_name) = taken(tx, uuid, name).await?;
    if dup_uuid || dup_name {
        let mut what = Vec::new();
        if dup_uuid {
            what.push(format!("uuid: {uuid}"));
        }
        if dup_name {
            what.push(format!("name: {name}"));
        }
        return Err(StoreError::conflict(Conflict::Duplicate, what.join(", ")));
    }
    Ok(())
}

/// Inserts the row and returns the provider as [`require`] would read it back.
async fn insert(
    tx: &mut Tx,
    uuid: &str,
    name: &str,
    parent: Option<&Provider>,
) -> Result<Provider, StoreError> {
    let now = crate::now();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO resource_providers (uuid, name, generation, parent_provider_id, root_provider_id, created_at) \
         VALUES ($1, $2, 0, $3, $4, $5) RETURNING id",
    )
    .bind(uuid)
    .bind(name)
    .bind(parent.map(|p| p.id))
    .bind(parent.map(|p| p.root_id))
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    if parent.is_none() {
        // This second write stamps `updated_at`, as upstream's does: a new root has an
        // update time, a new child does not (see [`updated_at`]).
        sqlx::query(
            "UPDATE resource_providers SET root_provider_id = id, updated_at = $2 WHERE id = $1",
        )
        .bind(id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    changes::touch(tx, &[id]).await?;
    Ok(Provider {
        id,
        uuid: uuid.to_owned(),
        name: name.to_owned(),
        generation: 0,
        parent_uuid: parent.map(|p| p.uuid.clone()),
        root_uuid: parent.map_or_else(|| uuid.to_owned(), |p| p.root_uuid.clone()),
        parent_id: parent.map(|p| p.id),
        root_id: parent.map_or(id, |p| p.root_id),
        modified: now,
    })
}

/// The provider's `updated_at` as stored, `None` when it was never written after its
/// insert. Upstream answers `PUT /resource_providers/{uuid}` with the update time the
/// provider had *before* that update, and with no `last-modified` at all when it had none.
pub async fn updated_at(tx: &mut Tx, id: i64) -> Result<Option<i64>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT updated_at FROM resource_providers WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?,
    )
}

/// Which of `uuids` name existing providers (one query per few hundred).
pub async fn existing(tx: &mut Tx, uuids: &[&str]) -> Result<Vec<Provider>, StoreError> {
    let mut out = Vec::new();
    for chunk in uuids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "{SELECT} WHERE rp.uuid IN ({})",
            crate::placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for u in chunk {
            q = q.bind(*u);
        }
        for r in q.fetch_all(&mut *tx).await? {
            out.push(from_row(&r)?);
        }
    }
    Ok(out)
}

/// What an update does to the parent.
#[derive(Debug, Clone, PartialEq)]
pub enum ParentChange {
    Keep,
    Set(String),
    Clear,
}

/// Renames and/or re-parents `rp`. Re-parenting must not create a loop.
pub async fn update(
    tx: &mut Tx,
    rp: &Provider,
    name: &str,
    parent: ParentChange,
) -> Result<Provider, StoreError> {
    if name != rp.name {
        let other: Option<i64> =
            sqlx::query_scalar("SELECT id FROM resource_providers WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
        if other.is_some() {
            return Err(StoreError::conflict(Conflict::Duplicate, name.to_owned()));
        }
    }
    let now = crate::now();
    sqlx::query("UPDATE resource_providers SET name = $1, updated_at = $2 WHERE id = $3")
        .bind(name)
        .bind(now)
        .bind(rp.id)
        .execute(&mut *tx)
        .await?;
    changes::touch(tx, &[rp.id]).await?;
    let new_parent = match parent {
        ParentChange::Keep => None,
        ParentChange::Clear => Some(None),
        ParentChange::Set(p) => {
            let parent = get(tx, &p).await?.ok_or_else(|| {
                StoreError::Invalid("parent provider UUID does not exist.".into())
            })?;
            Some(Some(parent))
        }
    };
    if let Some(new_parent) = new_parent {
        if new_parent.as_ref().map(|p| p.id) != rp.parent_id {
            let subtree = descendants(tx, rp.id).await?;
            let new_root = match &new_parent {
                Some(p) => {
                    if p.id == rp.id || subtree.contains(&p.id) {
                        return Err(StoreError::Invalid(
                            "creating loop in the provider tree is not allowed.".into(),
                        ));
                    }
                    p.root_id
                }
                None => rp.id,
            };
            sqlx::query(
                "UPDATE resource_providers SET parent_provider_id = $1, root_provider_id = $2 WHERE id = $3",
            )
            .bind(new_parent.as_ref().map(|p| p.id))
            .bind(new_root)
            .bind(rp.id)
            .execute(&mut *tx)
            .await?;
            changes::touch(tx, &subtree).await?;
            if !subtree.is_empty() {
                let sql = format!(
                    "UPDATE resource_providers SET root_provider_id = $1 WHERE id IN ({})",
                    placeholders(2, subtree.len())
                );
                let mut q = sqlx::query(&sql).bind(new_root);
                for id in &subtree {
                    q = q.bind(*id);
                }
                q.execute(&mut *tx).await?;
            }
        }
    }
    require(tx, &rp.uuid).await
}

/// Ids of every provider below `id` (not including it).
pub async fn descendants(tx: &mut Tx, id: i64) -> Result<Vec<i64>, StoreError> {
    let mut out = Vec::new();
    let mut frontier = vec![id];
    while !frontier.is_empty() {
        let sql = format!(
            "SELECT id FROM resource_providers WHERE parent_provider_id IN ({})",
            placeholders(1, frontier.len())
        );
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for f in &frontier {
            q = q.bind(*f);
        }
        frontier = q.fetch_all(&mut *tx).await?;
        out.extend_from_slice(&frontier);
    }
    Ok(out)
}

/// Deletes a provider with no children and no allocations, with its inventories,
/// traits and aggregate links.
pub async fn delete(tx: &mut Tx, rp: &Provider) -> Result<(), StoreError> {
    let children: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM resource_providers WHERE parent_provider_id = $1")
            .bind(rp.id)
            .fetch_one(&mut *tx)
            .await?;
    if children > 0 {
        return Err(StoreError::conflict(Conflict::CannotDeleteParent, ""));
    }
    let allocs: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM allocations WHERE resource_provider_id = $1")
            .bind(rp.id)
            .fetch_one(&mut *tx)
            .await?;
    if allocs > 0 {
        return Err(StoreError::conflict(
            Conflict::ProviderInUse,
            "Resource provider has allocations.",
        ));
    }
    for table in [
        "inventories",
        "resource_provider_traits",
        "resource_provider_aggregates",
    ] {
        sqlx::query(&format!(
            "DELETE FROM {table} WHERE resource_provider_id = $1"
        ))
        .bind(rp.id)
        .execute(&mut *tx)
        .await?;
    }
    let n = sqlx::query("DELETE FROM resource_providers WHERE id = $1")
        .bind(rp.id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if n != 1 {
        return Err(StoreError::NotFound(format!(
            "resource provider {}",
            rp.uuid
        )));
    }
    changes::touch(tx, &[rp.id]).await
}

/// Compare-and-swap on a provider's generation: succeeds only if it is still
/// `expected`, and returns the new generation.
pub async fn bump_generation(tx: &mut Tx, id: i64, expected: i64) -> Result<i64, StoreError> {
    let next = super::bump(
        tx,
        "resource_providers",
        id,
        expected,
        crate::now(),
        "resource provider generation conflict",
    )
    .await?;
    changes::touch(tx, &[id]).await?;
    Ok(next)
}
