//! Resource providers: the nodes of provider trees.
//!
//! A provider's `root_provider_id` is denormalised (upstream does the same) so that
//! tree queries are one indexed lookup. Re-parenting (1.37) rewrites the root of the
//! whole moved subtree in the same transaction.

use super::changes;
use crate::{placeholders, Conflict, StoreError, Tx};
use sqlx::Row;
use std::collections::HashMap;

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

/// One provider for [`create_many`].
pub struct NewChild<'a> {
    pub uuid: &'a str,
    pub name: &'a str,
    pub parent: &'a Provider,
    /// 1 for a provider whose inventories or traits the caller inserts next (as one
    /// change, like a create followed by one update), else 0.
    pub generation: i64,
}

/// Creates providers under parents already read in this transaction, a few hundred
/// per statement: what an agent's first report does for a host's devices. Upstream's
/// 409 when any uuid or name is taken; nothing is created then. Returns the providers
/// in `new`'s order.
pub async fn create_many(tx: &mut Tx, new: &[NewChild<'_>]) -> Result<Vec<Provider>, StoreError> {
    if new.iter().any(|c| c.parent.uuid == c.uuid) {
        return Err(same_as_parent());
    }
    let now = crate::now();
    let mut ids: HashMap<&str, i64> = HashMap::with_capacity(new.len());
    for chunk in new.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT uuid, name FROM resource_providers WHERE uuid IN ({}) OR name IN ({})",
            crate::placeholders(1, chunk.len()),
            crate::placeholders(1 + chunk.len(), chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for c in chunk {
            q = q.bind(c.uuid);
        }
        for c in chunk {
            q = q.bind(c.name);
        }
        if let Some(r) = q.fetch_optional(&mut *tx).await? {
            let (u, n): (String, String) = (r.try_get("uuid")?, r.try_get("name")?);
            let what = match chunk.iter().find(|c| c.uuid == u) {
                Some(_) => format!("uuid: {u}"),
                None => format!("name: {n}"),
            };
            return Err(StoreError::conflict(Conflict::Duplicate, what));
        }
        let rows: Vec<NewRow<'_>> = chunk
            .iter()
            .map(|c| NewRow {
                uuid: c.uuid,
                name: c.name,
                generation: c.generation,
                parent_id: Some(c.parent.id),
                root_id: Some(c.parent.root_id),
            })
            .collect();
        insert_rows(tx, &rows, now, &mut ids).await?;
    }
    let mut out = Vec::with_capacity(new.len());
    for c in new {
        let id = *ids
            .get(c.uuid)
            .ok_or_else(|| StoreError::Invalid(format!("provider {} was not created", c.uuid)))?;
        out.push(Provider {
            id,
            uuid: c.uuid.to_owned(),
            name: c.name.to_owned(),
            generation: c.generation,
            parent_uuid: Some(c.parent.uuid.clone()),
            root_uuid: c.parent.root_uuid.clone(),
            parent_id: Some(c.parent.id),
            root_id: c.parent.root_id,
            modified: now,
        });
    }
    let all: Vec<i64> = out.iter().map(|p| p.id).collect();
    changes::touch(tx, &all).await?;
    Ok(out)
}

/// One row for [`insert_rows`].
struct NewRow<'a> {
    uuid: &'a str,
    name: &'a str,
    generation: i64,
    parent_id: Option<i64>,
    root_id: Option<i64>,
}

/// Inserts `rows` (at most [`crate::BATCH_ROWS`]) in one statement and records their
/// ids by uuid in `ids`.
async fn insert_rows<'a>(
    tx: &mut Tx,
    rows: &[NewRow<'a>],
    now: i64,
    ids: &mut HashMap<&'a str, i64>,
) -> Result<(), StoreError> {
    // MySQL 8 has no INSERT .. RETURNING (MariaDB has): the new rows are read back
    // by their unique uuids, inside the same transaction.
    let mysql = tx.backend() == crate::Backend::MySql;
    let sql = format!(
        "INSERT INTO resource_providers (uuid, name, generation, parent_provider_id, \
         root_provider_id, created_at) VALUES {}{}",
        crate::value_rows(rows.len(), 6),
        if mysql { "" } else { " RETURNING id, uuid" }
    );
    let mut q = sqlx::query(&sql);
    for r in rows {
        q = q
            .bind(r.uuid)
            .bind(r.name)
            .bind(r.generation)
            .bind(r.parent_id)
            .bind(r.root_id)
            .bind(now);
    }
    let got = if mysql {
        q.execute(&mut *tx).await?;
        let sql = format!(
            "SELECT id, uuid FROM resource_providers WHERE uuid IN ({})",
            crate::placeholders(1, rows.len())
        );
        let mut q = sqlx::query(&sql);
        for r in rows {
            q = q.bind(r.uuid);
        }
        q.fetch_all(&mut *tx).await?
    } else {
        q.fetch_all(&mut *tx).await?
    };
    for g in got {
        let (id, u): (i64, String) = (g.try_get(0)?, g.try_get(1)?);
        if let Some(r) = rows.iter().find(|r| r.uuid == u) {
            ids.insert(r.uuid, id);
        }
    }
    Ok(())
}

/// Creates root providers, a few hundred per statement: concurrent creates combined
/// into one transaction (the server's `placement::creates`). A taken uuid or name
/// fails the whole call with the database's unique violation (the caller then creates
/// them one by one, for upstream's message). Returns the providers in `new`'s order,
/// each as [`create`] would have made it.
pub async fn create_roots(tx: &mut Tx, new: &[(&str, &str)]) -> Result<Vec<Provider>, StoreError> {
    let now = crate::now();
    if tx.backend() == crate::Backend::MySql {
        return create_roots_in_one_call(tx, new, now).await;
    }
    let mut ids: HashMap<&str, i64> = HashMap::with_capacity(new.len());
    for chunk in new.chunks(crate::BATCH_ROWS) {
        let rows: Vec<NewRow<'_>> = chunk
            .iter()
            .map(|(uuid, name)| NewRow {
                uuid,
                name,
                generation: 0,
                parent_id: None,
                root_id: None,
            })
            .collect();
        insert_rows(tx, &rows, now, &mut ids).await?;
    }
    let mut all = Vec::with_capacity(new.len());
    for (uuid, _) in new {
        all.push(
            *ids.get(uuid)
                .ok_or_else(|| StoreError::Invalid(format!("provider {uuid} was not created")))?,
        );
    }
    // Each root is its own root, stamped `updated_at` as a single create stamps it.
    for chunk in all.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "UPDATE resource_providers SET root_provider_id = id, updated_at = $1 WHERE id IN ({})",
            crate::placeholders(2, chunk.len())
        );
        let mut q = sqlx::query(&sql).bind(now);
        for id in chunk {
            q = q.bind(*id);
        }
        q.execute(&mut *tx).await?;
    }
    changes::touch(tx, &all).await?;
    Ok(roots(new, all, now))
}

/// [`create_roots`] on MariaDB/MySQL: the inserts, the roots' references to their own
/// ids and the change-log entry in one call of the `accel_create_roots` procedure
/// (migration 12). Each of those statements is a round trip from here, and a create
/// that only waits on them spends its time on the network rather than the rows: a
/// root create is BEGIN, the call and COMMIT instead of six statements.
async fn create_roots_in_one_call(
    tx: &mut Tx,
    new: &[(&str, &str)],
    now: i64,
) -> Result<Vec<Provider>, StoreError> {
    let mut all = Vec::with_capacity(new.len());
    for chunk in new.chunks(crate::BATCH_ROWS) {
        let rows = serde_json::to_string(chunk)
            .map_err(|e| StoreError::Invalid(format!("provider rows: {e}")))?;
        // The procedure answers one result set, then its own status: read them all.
        let answer = sqlx::query("CALL accel_create_roots($1, $2)")
            .bind(rows)
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
        all.extend(new_ids(&answer, chunk.len())?);
    }
    Ok(roots(new, all, now))
}

/// [`create_roots`] in a transaction of its own, on MariaDB/MySQL in one round trip:
/// `START TRANSACTION`, the procedure call and `COMMIT` sent together (the rows as a
/// hex literal, so nothing in a name needs escaping). Elsewhere, `Store::write`. A
/// refused call (a taken uuid or name) rolls back and says why, as in a transaction.
pub fn create_roots_alone<'a>(
    store: &'a crate::Store,
    new: &'a [(String, String)],
) -> crate::BoxFut<'a, Vec<Provider>> {
    // Boxed with its `Send` stated: the raw statement's executor lifetimes are
    // otherwise too general for a spawned caller to prove it.
    Box::pin(create_roots_alone_inner(store, new))
}

async fn create_roots_alone_inner(
    store: &crate::Store,
    new: &[(String, String)],
) -> Result<Vec<Provider>, StoreError> {
    if store.backend() != crate::Backend::MySql || new.len() > crate::BATCH_ROWS {
        let rows = new.to_vec();
        return store
            .write(move |tx| {
                Box::pin(async move {
                    let pairs: Vec<(&str, &str)> =
                        rows.iter().map(|(u, n)| (u.as_str(), n.as_str())).collect();
                    create_roots(tx, &pairs).await
                })
            })
            .await;
    }
    let now = crate::now();
    let rows = serde_json::to_string(new)
        .map_err(|e| StoreError::Invalid(format!("provider rows: {e}")))?;
    let hex: String = rows.bytes().map(|b| format!("{b:02x}")).collect();
    let sql = format!(
        "START TRANSACTION; CALL accel_create_roots(CONVERT(X'{hex}' USING utf8mb4), {now}); COMMIT"
    );
    let mut conn = store.writer().await?;
    // A `&str` runs unprepared, several statements in one round trip.
    let answer = sqlx::Executor::fetch_all(&mut *conn, sql.as_str()).await;
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            // The statements after the failed one did not run: end the transaction
            // here, or drop the connection rather than hand it out mid-transaction.
            if sqlx::Executor::execute(&mut *conn, "ROLLBACK")
                .await
                .is_err()
            {
                conn.close_on_drop();
            }
            return Err(e.into());
        }
    };
    let ids = new_ids(&answer, new.len())?;
    let pairs: Vec<(&str, &str)> = new.iter().map(|(u, n)| (u.as_str(), n.as_str())).collect();
    Ok(roots(&pairs, ids, now))
}

/// The `expected` ids `accel_create_roots` answered (a JSON array; text when the call
/// was prepared, bytes when it was sent as text).
fn new_ids(answer: &[sqlx::any::AnyRow], expected: usize) -> Result<Vec<i64>, StoreError> {
    let row = answer
        .first()
        .ok_or_else(|| StoreError::Invalid("accel_create_roots answered nothing".into()))?;
    let text = match row.try_get::<String, _>(0) {
        Ok(t) => t,
        Err(_) => String::from_utf8_lossy(&row.try_get::<Vec<u8>, _>(0)?).into_owned(),
    };
    let ids: Vec<i64> = serde_json::from_str(&text)
        .map_err(|e| StoreError::Invalid(format!("accel_create_roots answered {text}: {e}")))?;
    if ids.len() != expected {
        return Err(StoreError::Invalid(format!(
            "accel_create_roots created {} of {expected} providers",
            ids.len()
        )));
    }
    Ok(ids)
}

/// The providers [`create_roots`] made, as [`create`] would have answered them.
fn roots(new: &[(&str, &str)], ids: Vec<i64>, now: i64) -> Vec<Provider> {
    new.iter()
        .zip(ids)
        .map(|((uuid, name), id)| Provider {
            id,
            uuid: (*uuid).to_owned(),
            name: (*name).to_owned(),
            generation: 0,
            parent_uuid: None,
            root_uuid: (*uuid).to_owned(),
            parent_id: None,
            root_id: id,
            modified: now,
        })
        .collect()
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

/// Filters of `GET /resource_providers`; every given filter must hold.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub name: Option<String>,
    pub uuid: Option<String>,
    /// Root id of the tree to stay in.
    pub in_tree: Option<i64>,
    /// AND of any-of lists of trait ids.
    pub required: Vec<Vec<i64>>,
    pub forbidden: Vec<i64>,
    /// AND of any-of lists of aggregate uuids (direct membership).
    pub member_of: Vec<Vec<String>>,
    pub forbidden_aggregates: Vec<String>,
    /// (resource class id, amount): each must fit on the provider itself.
    pub resources: Vec<(i64, i64)>,
}

/// An AND of any-of groups with each group's members and the groups themselves sorted
/// and deduplicated: a repeated group or member says nothing new.
fn distinct_groups<T: Ord + Clone>(groups: &[Vec<T>]) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = groups
        .iter()
        .map(|any| {
            let mut g = any.clone();
            g.sort_unstable();
            g.dedup();
            g
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `rows` of two SQL expressions as a derived table with the columns `column1` and
/// `column2`, the names SQLite and PostgreSQL give a VALUES list's columns. MariaDB
/// names a VALUES list's columns after its first row (`?` twice: a duplicate column),
/// so there the rows are SELECTs that name them, joined by UNION ALL (MySQL has no
/// limit on their number; SQLite's is 500, which is why it keeps VALUES).
fn pairs(backend: crate::Backend, rows: &[(String, String)]) -> String {
    if backend == crate::Backend::MySql {
        let selects: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, (a, b))| match i {
                0 => format!("SELECT {a} AS column1, {b} AS column2"),
                _ => format!("SELECT {a}, {b}"),
            })
            .collect();
        format!("({})", selects.join(" UNION ALL "))
    } else {
        let values: Vec<String> = rows.iter().map(|(a, b)| format!("({a}, {b})")).collect();
        format!("(VALUES {})", values.join(", "))
    }
}

/// Lists providers matching `f`, ordered by id (creation order).
pub async fn list(tx: &mut Tx, f: &Filter) -> Result<Vec<Provider>, StoreError> {
    enum Arg {
        S(String),
        I(i64),
    }
    let mut args: Vec<Arg> = Vec::new();
    let next = |args: &mut Vec<Arg>, a: Arg| {
        args.push(a);
        format!("${}", args.len())
    };
    let mut wh: Vec<String> = Vec::new();
    if let Some(n) = &f.name {
        wh.push(format!("rp.name = {}", next(&mut args, Arg::S(n.clone()))));
    }
    if let Some(u) = &f.uuid {
        wh.push(format!("rp.uuid = {}", next(&mut args, Arg::S(u.clone()))));
    }
    if let Some(r) = f.in_tree {
        wh.push(format!(
            "rp.root_provider_id = {}",
            next(&mut args, Arg::I(r))
        ));
    }
    // Repeated groups say nothing new; one condition each for the distinct ones.
    let required = distinct_groups(&f.required);
    // Every group as one condition: the (group, trait) pairs are a VALUES list joined
    // to the provider's traits, and a provider qualifies when it matches every group.
    // One `IN (subquery)` per group made PostgreSQL's planner take minutes at a few
    // hundred groups.
    if !required.is_empty() {
        let rows: Vec<(String, String)> = required
            .iter()
            .enumerate()
            .flat_map(|(g, any)| any.iter().map(move |t| (g, *t)))
            .map(|(g, t)| {
                let g = next(&mut args, Arg::I(g as i64));
                (g, next(&mut args, Arg::I(t)))
            })
            .collect();
        wh.push(format!(
            "rp.id IN (SELECT rpt.resource_provider_id FROM resource_provider_traits rpt \
             JOIN {} AS g ON g.column2 = rpt.trait_id \
             GROUP BY rpt.resource_provider_id HAVING COUNT(DISTINCT g.column1) = {})",
            pairs(tx.backend(), &rows),
            required.len()
        ));
    }
    if !f.forbidden.is_empty() {
        let ids: Vec<String> = f
            .forbidden
            .iter()
            .map(|t| next(&mut args, Arg::I(*t)))
            .collect();
        wh.push(format!(
            "rp.id NOT IN (SELECT resource_provider_id FROM resource_provider_traits WHERE trait_id IN ({}))",
            ids.join(", ")
        ));
    }
    let member_of = distinct_groups(&f.member_of);
    // As for traits: one condition for all groups.
    if !member_of.is_empty() {
        let rows: Vec<(String, String)> = member_of
            .iter()
            .enumerate()
            .flat_map(|(g, any)| any.iter().map(move |a| (g, a.clone())))
            .map(|(g, a)| {
                let g = next(&mut args, Arg::I(g as i64));
                (g, next(&mut args, Arg::S(a)))
            })
            .collect();
        wh.push(format!(
            "rp.id IN (SELECT rpa.resource_provider_id FROM resource_provider_aggregates rpa \
             JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id \
             JOIN {} AS g ON g.column2 = pa.uuid \
             GROUP BY rpa.resource_provider_id HAVING COUNT(DISTINCT g.column1) = {})",
            pairs(tx.backend(), &rows),
            member_of.len()
        ));
    }
    if !f.forbidden_aggregates.is_empty() {
        let ids: Vec<String> = f
            .forbidden_aggregates
            .iter()
            .map(|a| next(&mut args, Arg::S(a.clone())))
            .collect();
        wh.push(format!(
            "rp.id NOT IN (SELECT rpa.resource_provider_id FROM resource_provider_aggregates rpa \
             JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id WHERE pa.uuid IN ({}))",
            ids.join(", ")
        ));
    }
    for (rc, amount) in &f.resources {
        let rc = next(&mut args, Arg::I(*rc));
        let amt = next(&mut args, Arg::I(*amount));
        wh.push(format!(
            "rp.id IN (SELECT inv.resource_provider_id FROM inventories inv \
             LEFT JOIN (SELECT resource_provider_id, CAST(SUM(used) AS BIGINT) AS used FROM allocations \
                        WHERE resource_class_id = {rc} GROUP BY resource_provider_id) u \
               ON u.resource_provider_id = inv.resource_provider_id \
             WHERE inv.resource_class_id = {rc} \
               AND COALESCE(u.used, 0) + {amt} <= (inv.total - inv.reserved) * inv.allocation_ratio \
               AND inv.min_unit <= {amt} AND inv.max_unit >= {amt} AND {amt} % inv.step_size = 0)"
        ));
    }
    let mut sql = SELECT.to_owned();
    if !wh.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&crate::all_of(&wh));
    }
    let sql = packed(tx, &sql);
    let mut q = sqlx::query(&sql);
    for a in args {
        q = match a {
            Arg::S(s) => q.bind(s),
            Arg::I(i) => q.bind(i),
        };
    }
    let packed: String = q.fetch_one(&mut *tx).await?.try_get(0)?;
    unpack(&packed)
}

/// Wraps a query selecting [`SELECT`]'s columns so the database returns all rows as one
/// JSON array in a single row. Listings of thousands of providers otherwise pay, per
/// row, a hand-off from the driver's thread and a conversion through `sqlx::Any`; the
/// database's JSON encoder does the same work in one pass.
fn packed(tx: &Tx, sql: &str) -> String {
    const COLS: &str = "q.id, q.uuid, q.name, q.generation, q.parent_provider_id, \
         q.root_provider_id, q.parent_uuid, q.root_uuid, q.modified";
    match tx.backend() {
        crate::Backend::Postgres => format!(
            "SELECT COALESCE(json_agg(json_build_array({COLS}) ORDER BY q.id), '[]')::text FROM ({sql}) q"
        ),
        crate::Backend::Sqlite => {
            format!("SELECT COALESCE(json_group_array(json_array({COLS})), '[]') FROM ({sql}) q")
        }
        // `unpack` sorts by id; the cast makes MySQL 8's JSON type come back as text.
        crate::Backend::MySql => format!(
            "SELECT CAST(COALESCE(JSON_ARRAYAGG(JSON_ARRAY({COLS})), '[]') AS CHAR) FROM ({sql}) q"
        ),
    }
}

type PackedRow = (
    i64,
    String,
    String,
    i64,
    Option<i64>,
    i64,
    Option<String>,
    String,
    i64,
);

fn unpack(packed: &str) -> Result<Vec<Provider>, StoreError> {
    let rows: Vec<PackedRow> = serde_json::from_str(packed)
        .map_err(|e| StoreError::Config(format!("decoding packed provider rows: {e}")))?;
    let mut out: Vec<Provider> = rows
        .into_iter()
        .map(
            |(id, uuid, name, generation, parent_id, root_id, parent_uuid, root_uuid, modified)| {
                Provider {
                    id,
                    uuid,
                    name,
                    generation,
                    parent_uuid,
                    root_uuid,
                    parent_id,
                    root_id,
                    modified,
                }
            },
        )
        .collect();
    out.sort_unstable_by_key(|p| p.id);
    Ok(out)
}
