//! Creating many providers at once: a host's devices under their parents
//! ([`create_many`], one insert per few hundred) and concurrent root creates combined
//! into one transaction ([`create_roots`], and on MySQL [`create_roots_alone`]: the
//! whole transaction in one round trip through migration 12's procedure).

use super::Provider;
use crate::placement::changes;
use crate::placement::refused::{ParentRefusal, Refused};
use crate::{StoreError, Tx};
use sqlx::Row;
use std::collections::HashMap;

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
    if let Some(c) = new.iter().find(|c| c.parent.uuid == c.uuid) {
        return Err(Refused::ProviderCreate {
            uuid: c.uuid.to_owned(),
            name: c.name.to_owned(),
            why: ParentRefusal::Itself,
        }
        .into());
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
            let taken = match chunk.iter().find(|c| c.uuid == u) {
                Some(_) => Refused::ProviderExists {
                    uuid: Some(u),
                    name: None,
                },
                None => Refused::ProviderExists {
                    uuid: None,
                    name: Some(n),
                },
            };
            return Err(taken.into());
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
pub(crate) fn create_roots_alone<'a>(
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
