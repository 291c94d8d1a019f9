//! Change tracking for readers that keep placement data in memory.
//!
//! The allocation-candidate index (`world::Cache`) serves reads from memory and must
//! notice every committed change, including those made by another server on the same
//! PostgreSQL database. Writers therefore log, in the same transaction as the change,
//! which providers they touched:
//!
//! - during the transaction, store functions call [`touch`] / [`touch_names`], which
//!   only note the ids in memory (on the write transaction itself, `Tx`: no
//!   statement, no shared lock);
//! - just before `COMMIT`, [`flush`] writes them to `placement_changes` under one new
//!   `(shard, seq)`: it increments the sequence of one of [`SHARDS`] rows of
//!   `placement_change_shards`, chosen by the smallest touched provider id. That is two
//!   statements per changing transaction and none for the others.
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
//!
//! Allocation writes also log the consumer projects whose usage they change (as ids
//! at or below [`PROJECTS`]), for readers that remember usage totals per project
//! (`GET /usages`); [`since`] leaves those out and [`projects_since`] reads only them.

use crate::{Store, StoreError, Tx};
use sqlx::Row;
use std::collections::BTreeSet;

/// Number of sequence rows writers spread over.
pub const SHARDS: usize = 16;

/// The logged id meaning "resource class or trait names changed".
pub const NAMES: i64 = -1;

/// Logged ids at or below this name a consumer project: `PROJECTS - project_id`.
pub const PROJECTS: i64 = -2;

/// Log rows kept per shard beyond the newest sequence (also in MariaDB/MySQL's
/// `accel_create_roots` procedure, migration 12, which logs root creates itself).
const KEEP_PER_SHARD: i64 = 4096;

/// A shard is pruned on every this many sequence numbers (likewise).
const PRUNE_EVERY: i64 = 512;

/// Records that a consumer let go of the providers `ids` (called where allocations
/// are deleted and ARQs unbound): whether that was their last consumer is decided
/// at the end of the transaction, when every write of it is in.
pub fn released(tx: &mut Tx, ids: impl IntoIterator<Item = i64>) -> Result<(), StoreError> {
    tx.written("a release")?.released.extend(ids);
    Ok(())
}

/// The providers released so far in this transaction, emptying the set.
pub(crate) fn take_released(tx: &mut Tx) -> BTreeSet<i64> {
    tx.written("a release")
        .map(|w| std::mem::take(&mut w.released))
        .unwrap_or_default()
}

fn note(tx: &mut Tx, ids: impl IntoIterator<Item = i64>) -> Result<(), StoreError> {
    tx.written("a placement change")?.touched.extend(ids);
    Ok(())
}

/// Records that the providers `ids` changed (their existence, tree, inventories,
/// usage, traits or aggregates). `tx` is taken to keep the call inside a transaction.
pub async fn touch(tx: &mut Tx, ids: &[i64]) -> Result<(), StoreError> {
    note(tx, ids.iter().copied())
}

/// Records that every provider holding allocations of `consumer` changed (called
/// before those allocations are deleted).
pub async fn touch_consumer_providers(tx: &mut Tx, consumer: &str) -> Result<(), StoreError> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT DISTINCT resource_provider_id FROM allocations WHERE consumer_id = $1",
    )
    .bind(consumer)
    .fetch_all(&mut *tx)
    .await?;
    note(tx, ids)
}

/// Records that the usage totals of the consumer projects `ids` changed.
pub async fn touch_projects(tx: &mut Tx, ids: &[i64]) -> Result<(), StoreError> {
    note(tx, ids.iter().map(|id| PROJECTS - id))
}

/// Records that resource class or trait names changed.
pub async fn touch_names(tx: &mut Tx) -> Result<(), StoreError> {
    touch(tx, &[NAMES]).await
}

/// Writes this transaction's touches to the shared log under one new sequence
/// number. Called by `Store::write` right before `COMMIT`.
pub(crate) async fn flush(tx: &mut Tx, ids: &BTreeSet<i64>) -> Result<(), StoreError> {
    // The shard follows the smallest provider (a project or names change alone
    // takes its own id's).
    let Some(&anchor) = ids
        .iter()
        .find(|id| **id >= 0)
        .or_else(|| ids.iter().next())
    else {
        return Ok(());
    };
    let shard = anchor.rem_euclid(SHARDS as i64);
    let seq: i64 = if tx.backend() == crate::Backend::MySql {
        // MySQL has no UPDATE .. RETURNING; LAST_INSERT_ID(expr) makes the server send
        // the new value back in the statement's OK packet.
        sqlx::query(
            "UPDATE placement_change_shards SET seq = LAST_INSERT_ID(seq + 1) WHERE shard = $1",
        )
        .bind(shard as i32)
        .execute(&mut *tx)
        .await?
        .last_insert_id()
        .filter(|seq| *seq > 0)
        .ok_or_else(|| StoreError::Config("the change-log sequence came back empty".into()))?
    } else {
        sqlx::query_scalar(
            "UPDATE placement_change_shards SET seq = seq + 1 WHERE shard = $1 RETURNING seq",
        )
        .bind(shard as i32)
        .fetch_one(&mut *tx)
        .await?
    };
    let ids: Vec<i64> = ids.iter().copied().collect();
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
    if seq % PRUNE_EVERY == 0 {
        sqlx::query("DELETE FROM placement_changes WHERE shard = $1 AND seq < $2")
            .bind(shard as i32)
            .bind(seq - KEEP_PER_SHARD)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// The per-shard sequence numbers: the version of the placement data as of a snapshot.
pub type Version = [i64; SHARDS];

/// Reads the version in the current transaction's snapshot.
///
/// This is the per-request freshness check of the candidate index. On SQLite one row
/// of 16 columns rather than 16 rows, since its driver hands every row across threads;
/// elsewhere the 16 rows of a primary-key scan, a statement the server parses in a
/// fraction of the time of sixteen subqueries.
pub async fn version(tx: &mut Tx) -> Result<Version, StoreError> {
    if tx.backend() != crate::Backend::Sqlite {
        let rows = sqlx::query("SELECT shard, seq FROM placement_change_shards")
            .fetch_all(&mut *tx)
            .await?;
        let mut v = [0; SHARDS];
        for r in &rows {
            let shard: i32 = r.try_get(0)?;
            if let Some(slot) = usize::try_from(shard).ok().and_then(|s| v.get_mut(s)) {
                *slot = r.try_get(1)?;
            }
        }
        return Ok(v);
    }
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let cols: Vec<String> = (0..SHARDS)
            .map(|s| format!("(SELECT seq FROM placement_change_shards WHERE shard = {s})"))
            .collect();
        format!("SELECT {}", cols.join(", "))
    });
    let r = sqlx::query(SQL.as_str()).fetch_one(&mut *tx).await?;
    let mut v = [0; SHARDS];
    for (shard, slot) in v.iter_mut().enumerate() {
        *slot = r.try_get::<Option<i64>, _>(shard)?.unwrap_or(0);
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
            } else if id >= 0 {
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

/// What [`projects_since`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectChanges {
    /// `(project id, shard, seq)` of every logged project change.
    pub projects: Vec<(i64, usize, i64)>,
    /// Class or trait names changed too.
    pub names: bool,
}

/// The project (and name) changes committed after `from`, up to `to` (a version read
/// earlier; its rows are committed and stay so), in one statement. `None` when the
/// log no longer covers `from`: some of its rows were pruned, so the caller must
/// forget everything it derived from the log.
pub async fn projects_since(
    tx: &mut Tx,
    from: &Version,
    to: &Version,
) -> Result<Option<ProjectChanges>, StoreError> {
    let shards: Vec<usize> = (0..SHARDS).filter(|s| to[*s] > from[*s]).collect();
    if shards.is_empty() {
        return Ok(Some(ProjectChanges::default()));
    }
    let ranges: Vec<String> = (0..shards.len())
        .map(|i| {
            let p = 3 * i;
            format!(
                "(shard = ${} AND seq > ${} AND seq <= ${})",
                p + 1,
                p + 2,
                p + 3
            )
        })
        .collect();
    let ranges = ranges.join(" OR ");
    // The negative ids, and per shard how many sequence numbers are still logged:
    // every one in (from, to] logged at least one row, so fewer means pruned.
    let sql = format!(
        "SELECT CAST(0 AS BIGINT) AS kind, shard, seq, provider_id FROM placement_changes \
         WHERE provider_id < 0 AND ({ranges}) \
         UNION ALL SELECT CAST(1 AS BIGINT), shard, COUNT(DISTINCT seq), CAST(0 AS BIGINT) \
         FROM placement_changes \
         WHERE {ranges} GROUP BY shard"
    );
    let mut q = sqlx::query(&sql);
    for s in &shards {
        q = q.bind(*s as i32).bind(from[*s]).bind(to[*s]);
    }
    let mut out = ProjectChanges::default();
    let mut logged = [0i64; SHARDS];
    for r in q.fetch_all(&mut *tx).await? {
        let kind: i64 = r.try_get(0)?;
        let shard: i32 = r.try_get(1)?;
        let Some(shard) = usize::try_from(shard).ok().filter(|s| *s < SHARDS) else {
            continue;
        };
        let n: i64 = r.try_get(2)?;
        if kind == 1 {
            logged[shard] = n;
            continue;
        }
        match r.try_get::<i64, _>(3)? {
            NAMES => out.names = true,
            id if id <= PROJECTS => out.projects.push((PROJECTS - id, shard, n)),
            _ => {}
        }
    }
    if shards.iter().any(|s| logged[*s] != to[*s] - from[*s]) {
        return Ok(None);
    }
    Ok(Some(out))
}

/// Change-log operations ([`Store::changes`]): what the Placement API's caches read to
/// know what moved (the version itself is [`Store::placement_version`]).
pub struct Changes<'s>(&'s Store);

impl Store {
    /// Reads of the placement change log.
    pub fn changes(&self) -> Changes<'_> {
        Changes(self)
    }
}

impl Changes<'_> {
    /// The project changes between two versions ([`projects_since`]): one statement.
    pub async fn projects_since(
        &self,
        from: &Version,
        to: &Version,
    ) -> Result<Option<ProjectChanges>, StoreError> {
        let (from, to) = (*from, *to);
        self.0
            .read_one(move |tx| Box::pin(async move { projects_since(tx, &from, &to).await }))
            .await
    }
}

impl Store {
    /// The placement change version now: the candidate index's freshness check. On a
    /// SQLite file the store's probe answers on this thread (`sqlite_probe.rs`);
    /// elsewhere, and when it cannot, one statement on a reader connection.
    pub async fn placement_version(&self) -> Result<Version, StoreError> {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(probe) = &self.version_probe {
            match probe.version() {
                Some(v) => {
                    self.counters.version_probes.fetch_add(1, Relaxed);
                    return Ok(v);
                }
                None => {
                    self.counters.version_probe_fallbacks.fetch_add(1, Relaxed);
                }
            }
        }
        self.read_one(|tx| Box::pin(version(tx))).await
    }
}
