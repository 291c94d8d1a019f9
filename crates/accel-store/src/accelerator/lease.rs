//! The lease every background queue is taken with: bind jobs ([`super::binds`]), Nova
//! events ([`super::events`]) and Placement pushes ([`super::pushes`]).
//!
//! A row is taken with one compare-and-swap on `owner`/`lease_until` that only
//! succeeds when the row is ready and either unowned or its lease ran out before `now`
//! (a crashed replica's rows are free again once its lease ends). A later write by the
//! taker repeats `owner = me` in its `WHERE`, so a taker whose lease was taken over
//! changes nothing: [`changed_one`] tells it so.
//!
//! A row is also free when its holder is known dead: every server process beats a
//! heartbeat row ([`super::heartbeats`]) with a short expiry, and a lease held by an
//! owner whose heartbeat expired is taken over at once instead of after the 30 s
//! lease, so a restarted server resumes its dead predecessor's work within seconds.
//! Safety does not rest on the heartbeat: a live holder whose heartbeat lapsed (a slow
//! database) and lost its row finds `owner = me` false on its next write and changes
//! nothing, exactly as after an expired lease.

use crate::{StoreError, Tx};
use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::Any;

/// One leased queue: which table, which key names a row, and when a row may be taken.
pub(super) struct Queue {
    pub table: &'static str,
    /// The key column; [`take`] binds the key as `$4`.
    pub key: &'static str,
    /// Whether taking a row counts one more attempt (`attempts = attempts + 1`).
    pub counts_attempts: bool,
    /// The row is ready to be taken; `$3` is `now`.
    pub ready: &'static str,
}

/// Takes the row of `queue` named by `key` for `owner` until `lease_until`, if it is
/// ready and free at `now`. True when this call got it.
pub(super) async fn take<K>(
    tx: &mut Tx,
    queue: &Queue,
    key: K,
    owner: &str,
    now: i64,
    lease_until: i64,
) -> Result<bool, StoreError>
where
    K: 'static + Send + for<'a> sqlx::Encode<'a, Any> + sqlx::Type<Any>,
{
    let sql = take_sql(queue, "= $4");
    let q = sqlx::query(&sql)
        .bind(owner.to_owned())
        .bind(lease_until)
        .bind(now)
        .bind(key);
    changed_one(tx, q).await
}

/// [`take`] for several rows of `queue` at once (keys `ids`), in one statement. Which
/// rows are now `owner`'s is for the caller to read back (a row it already held is
/// its own too).
pub(super) async fn take_all(
    tx: &mut Tx,
    queue: &Queue,
    ids: &[i64],
    owner: &str,
    now: i64,
    lease_until: i64,
) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    let sql = take_sql(
        queue,
        &format!("IN ({})", crate::placeholders(4, ids.len())),
    );
    let mut q = sqlx::query(&sql)
        .bind(owner.to_owned())
        .bind(lease_until)
        .bind(now);
    for id in ids {
        q = q.bind(*id);
    }
    q.execute(&mut *tx).await?;
    Ok(())
}

/// The take of [`take`] and [`take_all`]: `$1` owner, `$2` lease end, `$3` now, and the
/// keys matched by `keys` (`= $4`, `IN ($4, ..)`).
fn take_sql(queue: &Queue, keys: &str) -> String {
    let Queue {
        table,
        key: column,
        counts_attempts,
        ready,
    } = queue;
    let attempts = if *counts_attempts {
        "attempts = attempts + 1, "
    } else {
        ""
    };
    format!(
        "UPDATE {table} SET owner = $1, lease_until = $2, {attempts}updated_at = $3 \
         WHERE {column} {keys} AND {ready} AND {free}",
        free = free("", "$3"),
    )
}

/// Runs a conditional `UPDATE` and says whether it changed its one row: false when the
/// condition (an owner, a state) no longer held.
pub(super) async fn changed_one<'q>(
    tx: &mut Tx,
    update: Query<'q, Any, AnyArguments<'q>>,
) -> Result<bool, StoreError> {
    Ok(update.execute(&mut *tx).await?.rows_affected() == 1)
}

/// The SQL condition "the lease on this row is free at `now`": unowned, its lease
/// ran out, or its owner's heartbeat expired. `alias` prefixes the row's columns
/// (`"j."` or `""`); `now` is the placeholder holding the time.
pub(super) fn free(alias: &str, now: &str) -> String {
    format!(
        "({alias}owner IS NULL OR {alias}lease_until < {now} OR {alias}owner IN \
         (SELECT h.owner FROM server_heartbeats h WHERE h.alive_until < {now}))"
    )
}
