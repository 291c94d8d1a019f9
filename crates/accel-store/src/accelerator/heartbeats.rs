//! Server liveness: one `server_heartbeats` row per running server process.
//!
//! Leases ([`super::lease`]) last 30 s so that a slow step never loses its job; without
//! another signal, a server killed in the middle of a bind leaves that job untouched
//! for the rest of its lease. Each process therefore beats a row named by its lease
//! owner every second or so with a few seconds' expiry ([`beat`]); a lease whose owner's
//! row has expired is free at once. A clean stop marks the row dead ([`retire`]) so a
//! successor need not wait even that long, and a process that finds rows of dead
//! holders still owning work wakes its workers ([`orphaned_work`]).
//!
//! ```text
//! server A beats: alive_until = now + ttl ─ kill -9 ─▶ alive_until passes
//! server B beat ─▶ orphaned_work > 0 ─▶ wake bind worker ─▶ take A's jobs (lease::free)
//! ```
//!
//! Times are the servers' clocks in epoch seconds, as every lease; replicas are
//! assumed to keep their clocks within a second or so of each other. A skewed clock
//! can only make a takeover early, which the lease's `owner = me` checks make safe.

use crate::{Store, StoreError};

/// Records that `owner` is alive until `now + ttl_secs`.
pub async fn beat(store: &Store, owner: &str, now: i64, ttl_secs: i64) -> Result<(), StoreError> {
    let owner = owner.to_owned();
    store
        .write(move |tx| {
            Box::pin(async move {
                let upsert = if tx.backend() == crate::Backend::MySql {
                    "ON DUPLICATE KEY UPDATE alive_until = $2, updated_at = $3"
                } else {
                    "ON CONFLICT (owner) DO UPDATE SET alive_until = $2, updated_at = $3"
                };
                sqlx::query(&format!(
                    "INSERT INTO server_heartbeats (owner, alive_until, started_at, updated_at) \
                     VALUES ($1, $2, $3, $3) {upsert}"
                ))
                .bind(owner)
                .bind(now + ttl_secs)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await
}

/// Marks `owner` stopped: its leases are free to others at once.
pub async fn retire(store: &Store, owner: &str, now: i64) -> Result<(), StoreError> {
    let owner = owner.to_owned();
    store
        .write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "UPDATE server_heartbeats SET alive_until = 0, updated_at = $1 WHERE owner = $2",
                )
                .bind(now)
                .bind(owner)
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await
}

/// Bind jobs and Nova events still leased at `now` by owners whose heartbeat expired:
/// work a live server should take over now.
pub async fn orphaned_work(store: &Store, now: i64) -> Result<i64, StoreError> {
    store
        .read_one(move |tx| {
            Box::pin(async move {
                let n: i64 = sqlx::query_scalar(
                    "SELECT (SELECT COUNT(*) FROM bind_jobs j JOIN server_heartbeats h \
                       ON h.owner = j.owner WHERE h.alive_until < $1 AND j.lease_until >= $1 \
                       AND j.state IN ('pending', 'programming')) \
                     + (SELECT COUNT(*) FROM nova_events e JOIN server_heartbeats h \
                       ON h.owner = e.owner WHERE h.alive_until < $1 AND e.lease_until >= $1 \
                       AND e.state = 'pending')",
                )
                .bind(now)
                .fetch_one(&mut *tx)
                .await?;
                Ok(n)
            })
        })
        .await
}

/// Deletes the rows of holders dead for longer than `keep_secs` (longer than any
/// lease, so none of their leases is still running): returns how many.
pub async fn forget_dead(store: &Store, now: i64, keep_secs: i64) -> Result<u64, StoreError> {
    store
        .write(move |tx| {
            Box::pin(async move {
                Ok(
                    sqlx::query("DELETE FROM server_heartbeats WHERE alive_until < $1")
                        .bind(now - keep_secs)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected(),
                )
            })
        })
        .await
}

/// The heartbeat rows, owner and `alive_until`, for diagnostics and tests.
pub async fn list(store: &Store) -> Result<Vec<(String, i64)>, StoreError> {
    store
        .read(|tx| {
            Box::pin(async move {
                let rows: Vec<(String, i64)> = sqlx::query_as(
                    "SELECT owner, alive_until FROM server_heartbeats ORDER BY owner",
                )
                .fetch_all(&mut *tx)
                .await?;
                Ok(rows)
            })
        })
        .await
}
