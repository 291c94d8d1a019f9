//! The lease every background queue is taken with: bind jobs ([`super::binds`]), Nova
//! events ([`super::events`]) and Placement pushes ([`super::pushes`]).
//!
//! A row is taken with one compare-and-swap on `owner`/`lease_until` that only
//! succeeds when the row is ready and either unowned or its lease ran out before `now`
//! (a crashed replica's rows are free again once its lease ends). A later write by the
//! taker repeats `owner = me` in its `WHERE`, so a taker whose lease was taken over
//! changes nothing: [`changed_one`] tells it so.

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
    let sql = format!(
        "UPDATE {table} SET owner = $1, lease_until = $2, {attempts}updated_at = $3 \
         WHERE {column} = $4 AND {ready} AND (owner IS NULL OR lease_until < $3)"
    );
    let q = sqlx::query(&sql)
        .bind(owner.to_owned())
        .bind(lease_until)
        .bind(now)
        .bind(key);
    changed_one(tx, q).await
}

/// Runs a conditional `UPDATE` and says whether it changed its one row: false when the
/// condition (an owner, a state) no longer held.
pub(super) async fn changed_one<'q>(
    tx: &mut Tx,
    update: Query<'q, Any, AnyArguments<'q>>,
) -> Result<bool, StoreError> {
    Ok(update.execute(&mut *tx).await?.rows_affected() == 1)
}
