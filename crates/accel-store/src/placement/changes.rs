//! Change tracking for readers that keep placement data in memory.
//!
//! The allocation-candidate index (`world::Cache`) serves reads from memory and must
//! notice every committed change, including those made by another server on the same
//! PostgreSQL database. Writers therefore log, in the same transaction as the change,
//! which providers they touched:
//!
//! - during the transaction, store functions call [`touch`] / [`touch_names`], which
//!   insert into a per-connection temporary table (no shared lock is taken);
//! - just before `COMMIT`, [`flush`] moves those rows into `placement_changes` under
//!   one new `(shard, seq)`: it increments the sequence of one of [`SHARDS`] rows of
//!   `placement_change_shards`, chosen by the smallest touched provider id.
//!
//! Why this is exact: a shard's row is updated under its row lock, and a rolled-back
//! transaction rolls its increment back too, so within any one database snapshot the
//! sequence numbers of a shard are gapless, and a reader that reads the shard vector
//! and the logged rows in the *same* snapshot sees exactly the transactions committed
//! before that snapshot. Comparing vectors is one 16-row read; a reader holding an
//! older vector fetches the rows with `seq` above its own, shard by shard. Sharding
//! keeps writers of unrelated providers from queueing on one hot row; the shard lock
//! is taken last, by a transaction that then only commits, so it adds no deadlock.
//!
//! The log is pruned as it grows; a reader that finds a gap in a shard (its rows were
//! pruned) falls back to a full reload.

use crate::{Backend, StoreError, Tx};
use sqlx::Row;

/// Number of sequence rows writers spread over.
pub const SHARDS: usize = 16;

/// The logged id meaning "resource class or trait names changed".
pub const NAMES: i64 = -1;

/// Log rows kept per shard beyond the newest sequence.
const KEEP_PER_SHARD: i64 = 4096;

/// The temporary table each connection collects its touches in.
pub(crate) fn temp_table_sql(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "CREATE TEMP TABLE IF NOT EXISTS pending_placement_changes (provider_id BIGINT NOT NULL)"
        }
        Backend::Postgres => {
            "CREATE TEMP TABLE IF NOT EXISTS pending_placement_changes (provider_id BIGINT NOT NULL) \
             ON COMMIT DELETE ROWS"
        }
    }
}

/// Records that the providers `ids` changed (their existence, tree, inventories,
/// usage, traits or aggregates).
pub async fn touch(tx: &mut Tx, ids: &[i64]) -> Result<(), StoreError> {
    for id in ids {
        sqlx::query("INSERT INTO pending_placement_changes (provider_id) VALUES ($1)")
            .bind(*id)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// Records that every provider holding allocations of `consumer` changed (called
/// before those allocations are deleted).
pub async fn touch_consumer_providers(tx: &mut Tx, consumer: &str) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO pending_placement_changes (provider_id) \
         SELECT DISTINCT resource_provider_id FROM allocations WHERE consumer_id = $1",
    )
    .bind(consumer)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Records that resource class or trait names changed.
pub async fn touch_names(tx: &mut Tx) -> Result<(), StoreError> {
    touch(tx, &[NAMES]).await
}

/// Moves this transaction's touches into the shared log under one new sequence
/// number. Called by `Store::write` right before `COMMIT`.
pub(crate) async fn flush(tx: &mut Tx, backend: Backend) -> Result<(), StoreError> {
    let ids: Vec<i64> =
        sqlx::query_scalar("SELECT DISTINCT provider_id FROM pending_placement_changes")
            .fetch_all(&mut *tx)
            .await?;
    if ids.is_empty() {
        return Ok(());
    }
    let shard = ids
        .iter()
        .copied()
        .min()
        .unwrap_or(0)
        .rem_euclid(SHARDS as i64);
    let seq: i64 = sqlx::query_scalar(
        "UPDATE placement_change_shards SET seq = seq + 1 WHERE shard = $1 RETURNING seq",
    )
    .bind(shard as i32)
    .fetch_one(&mut *tx)
    .await?;
    for chunk in ids.chunks(300) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| format!("($1, $2, ${})", i + 3))
            .collect();
        let sql = format!(
            "INSERT INTO placement_changes (shard, seq, provider_id) VALUES {}",
            values.join(", ")
        );
        let mut q = sqlx::query(&sql).bind(shard as i32).bind(seq);
        for id in chunk {
            q = q.bind(*id);
        }
        q.execute(&mut *tx).await?;
    }
    if seq % 512 == 0 {
        sqlx::query("DELETE FROM placement_changes WHERE shard = $1 AND seq < $2")
            .bind(shard as i32)
            .bind(seq - KEEP_PER_SHARD)
            .execute(&mut *tx)
            .await?;
    }
    if backend == Backend::Sqlite {
        sqlx::query("DELETE FROM pending_placement_changes")
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// The per-shard sequence numbers: the version of the placement data as of a snapshot.
pub type Version = [i64; SHARDS];

/// Reads the version in the current transaction's snapshot.
pub async fn version(tx: &mut Tx) -> Result<Version, StoreError> {
    let mut v = [0; SHARDS];
    for r in sqlx::query("SELECT shard, seq FROM placement_change_shards")
        .fetch_all(&mut *tx)
        .await?
    {
        let shard: i32 = r.try_get(0)?;
        if let Some(slot) = v.get_mut(shard as usize) {
            *slot = r.try_get(1)?;
        }
    }
    Ok(v)
}

/// What changed between two versions read in one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// Providers whose data changed (sorted, deduplicated); `names` when class or trait
    /// names changed.
    Some { providers: Vec<i64>, names: bool },
    /// The log no longer covers `from`: reload everything.
    Reload,
}

/// The changes committed after `from`, up to `to` (which must be the version of the
/// current snapshot).
pub async fn since(tx: &mut Tx, from: &Version, to: &Version) -> Result<Delta, StoreError> {
    let mut providers = Vec::new();
    let mut names = false;
    for shard in 0..SHARDS {
        if to[shard] == from[shard] {
            continue;
        }
        if to[shard] < from[shard] {
            return Ok(Delta::Reload);
        }
        let rows = sqlx::query(
            "SELECT seq, provider_id FROM placement_changes WHERE shard = $1 AND seq > $2 AND seq <= $3",
        )
        .bind(shard as i32)
        .bind(from[shard])
        .bind(to[shard])
        .fetch_all(&mut *tx)
        .await?;
        let mut seen = std::collections::BTreeSet::new();
        for r in &rows {
            let seq: i64 = r.try_get(0)?;
            let id: i64 = r.try_get(1)?;
            seen.insert(seq);
            if id == NAMES {
                names = true;
            } else {
                providers.push(id);
            }
        }
        // Every sequence number in (from, to] logged at least one row; a missing
        // one was pruned.
        if seen.len() as i64 != to[shard] - from[shard] {
            return Ok(Delta::Reload);
        }
    }
    providers.sort_unstable();
    providers.dedup();
    Ok(Delta::Some { providers, names })
}
