//! `nova_events`: the outbox of Nova's `accelerator-request-bound` notifications.
//!
//! One row is one `POST /os-server-external-events` for one instance: the uuid and
//! final state of each of its ARQs. It is written by the transaction that resolves the
//! instance's last ARQ ([`super::binds::perform`]), so a resolution and its event
//! commit together, and delivered later by the server's event sender, which may be any
//! replica and may be restarted: a sender claims a row with a lease
//! (`owner`/`lease_until` compare-and-swap, as bind jobs), posts, then records the
//! result. Delivery is at least once (a sender that dies after Nova answered and before
//! recording it leaves the row to be sent again, which Nova tolerates).
//!
//! States: `pending` (to send, at or after `next_attempt`), `delivered`, `no_endpoint`
//! (this server has no Nova URL configured: recorded, never sent), `rejected` (Nova
//! answered with a client error, retrying cannot help) and `expired` (retried until
//! Nova could no longer be waiting for it).

use super::lease;
use crate::{Store, StoreError, Tx};
use accel_core::accelerator::ArqState;
use sqlx::Row;

/// Where an event's delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Pending,
    Delivered,
    NoEndpoint,
    Rejected,
    Expired,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Pending => "pending",
            Delivery::Delivered => "delivered",
            Delivery::NoEndpoint => "no_endpoint",
            Delivery::Rejected => "rejected",
            Delivery::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Delivery> {
        [
            Delivery::Pending,
            Delivery::Delivered,
            Delivery::NoEndpoint,
            Delivery::Rejected,
            Delivery::Expired,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

/// One recorded notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NovaEvent {
    pub id: i64,
    pub instance_uuid: String,
    /// Each ARQ of the instance with its resolved state, in creation order.
    pub arqs: Vec<(String, ArqState)>,
    pub delivery: Delivery,
    /// Delivery attempts so far (a claim counts as one).
    pub attempts: i64,
    pub next_attempt: i64,
    pub last_error: Option<String>,
    pub created_at: i64,
}

const SELECT: &str = "SELECT id, instance_uuid, events, state, attempts, next_attempt, \
     last_error, created_at FROM nova_events";

fn encode(arqs: &[(String, ArqState)]) -> String {
    serde_json::Value::Array(
        arqs.iter()
            .map(|(u, s)| serde_json::json!([u, s.as_str()]))
            .collect(),
    )
    .to_string()
}

fn decode(text: &str) -> Result<Vec<(String, ArqState)>, StoreError> {
    let bad = || StoreError::Invalid(format!("stored Nova event is corrupt: {text}"));
    let v: serde_json::Value = serde_json::from_str(text).map_err(|_| bad())?;
    v.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|pair| {
            let uuid = pair.get(0).and_then(|u| u.as_str()).ok_or_else(bad)?;
            let state = pair
                .get(1)
                .and_then(|s| s.as_str())
                .and_then(ArqState::parse)
                .ok_or_else(bad)?;
            Ok((uuid.to_owned(), state))
        })
        .collect()
}

fn from_row(r: &sqlx::any::AnyRow) -> Result<NovaEvent, StoreError> {
    let events: String = r.try_get("events")?;
    let state: String = r.try_get("state")?;
    Ok(NovaEvent {
        id: r.try_get("id")?,
        instance_uuid: r.try_get("instance_uuid")?,
        arqs: decode(&events)?,
        delivery: Delivery::parse(&state).ok_or_else(|| {
            StoreError::Invalid(format!("stored event state {state:?} is unknown"))
        })?,
        attempts: r.try_get("attempts")?,
        next_attempt: r.try_get("next_attempt")?,
        last_error: r.try_get("last_error")?,
        created_at: r.try_get("created_at")?,
    })
}

/// Records a pending event for `instance`, due at once. With `lease` (owner, until)
/// it is recorded as taken by that owner, its first attempt counted, as [`claim`]
/// would leave it: the bind worker that resolved the instance hands it to its own
/// sender instead of a second transaction claiming it.
pub(crate) async fn record(
    tx: &mut Tx,
    instance: &str,
    arqs: Vec<(String, ArqState)>,
    now: i64,
    lease: Option<(&str, i64)>,
) -> Result<NovaEvent, StoreError> {
    let (owner, lease_until) = match lease {
        Some((o, until)) => (Some(o.to_owned()), Some(until)),
        None => (None, None),
    };
    let attempts = i64::from(lease.is_some());
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO nova_events (instance_uuid, events, state, attempts, next_attempt, \
         owner, lease_until, created_at) VALUES ($1, $2, $7, $3, $4, $5, $6, $4) \
         RETURNING id",
    )
    .bind(instance)
    .bind(encode(&arqs))
    .bind(attempts)
    .bind(now)
    .bind(owner)
    .bind(lease_until)
    .bind(Delivery::Pending.as_str())
    .fetch_one(&mut *tx)
    .await?;
    Ok(NovaEvent {
        id,
        instance_uuid: instance.to_owned(),
        arqs,
        delivery: Delivery::Pending,
        attempts,
        next_attempt: now,
        last_error: None,
        created_at: now,
    })
}

/// Ids of pending events due at `now` and free to claim, oldest first.
pub async fn due(tx: &mut Tx, now: i64, limit: i64) -> Result<Vec<i64>, StoreError> {
    Ok(sqlx::query_scalar(&format!(
        "SELECT id FROM nova_events WHERE state = 'pending' AND next_attempt <= $1 \
         AND {free} ORDER BY id LIMIT $2",
        free = lease::free("", "$1"),
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?)
}

/// Events are taken while pending and due, each take counting a delivery attempt.
const EVENTS: lease::Queue = lease::Queue {
    table: "nova_events",
    key: "id",
    counts_attempts: true,
    ready: "state = 'pending' AND next_attempt <= $3",
};

/// Takes event `id` for one delivery attempt by `owner` (counting the attempt), if it is
/// still pending, due and free. Returns it when this call got it.
pub async fn claim(
    tx: &mut Tx,
    id: i64,
    owner: &str,
    now: i64,
    lease_until: i64,
) -> Result<Option<NovaEvent>, StoreError> {
    if !lease::take(tx, &EVENTS, id, owner, now, lease_until).await? {
        return Ok(None);
    }
    let row = sqlx::query(&format!("{SELECT} WHERE id = $1"))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    Ok(Some(from_row(&row)?))
}

/// Records the result of `owner`'s attempt: a final `delivery` state, or (for
/// [`Delivery::Pending`]) another try at `next_attempt`. An attempt whose lease was
/// taken over records nothing (the new owner's result counts).
pub async fn settle(
    tx: &mut Tx,
    id: i64,
    owner: &str,
    delivery: Delivery,
    next_attempt: i64,
    error: Option<&str>,
    now: i64,
) -> Result<bool, StoreError> {
    let q = sqlx::query(
        "UPDATE nova_events SET state = $1, next_attempt = $2, last_error = $3, owner = NULL, \
         lease_until = NULL, updated_at = $4 WHERE id = $5 AND owner = $6 AND state = 'pending'",
    )
    .bind(delivery.as_str())
    .bind(next_attempt)
    .bind(error)
    .bind(now)
    .bind(id)
    .bind(owner);
    lease::changed_one(tx, q).await
}

/// Every event recorded for `instance`, oldest first.
pub async fn for_instance(tx: &mut Tx, instance: &str) -> Result<Vec<NovaEvent>, StoreError> {
    sqlx::query(&format!("{SELECT} WHERE instance_uuid = $1 ORDER BY id"))
        .bind(instance)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(from_row)
        .collect()
}

/// [`due`] (one statement, so no transaction around it): the event sender's pass
/// starts here.
pub async fn due_now(store: &Store, now: i64, limit: i64) -> Result<Vec<i64>, StoreError> {
    store
        .read_one(move |tx| Box::pin(async move { due(tx, now, limit).await }))
        .await
}

/// [`claim`] as its own transaction, committed before the event is posted (the lease,
/// not a held transaction, keeps other senders off it while Nova answers).
pub async fn claim_for_delivery(
    store: &Store,
    id: i64,
    owner: &str,
    now: i64,
    lease_until: i64,
) -> Result<Option<NovaEvent>, StoreError> {
    store
        .write_rerunning(|| {
            let owner = owner.to_owned();
            move |tx| Box::pin(async move { claim(tx, id, &owner, now, lease_until).await })
        })
        .await
}

/// One attempt's result, for [`record_attempts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempted {
    pub id: i64,
    pub delivery: Delivery,
    pub next_attempt: i64,
    pub error: Option<String>,
}

/// [`settle`] for several attempts by `owner` in one transaction (one commit, and on
/// SQLite one turn of the writer, however many events): how many were settled (an
/// attempt whose lease was taken over records nothing).
pub async fn record_attempts(
    store: &Store,
    owner: &str,
    attempts: &[Attempted],
    now: i64,
) -> Result<usize, StoreError> {
    store
        .write_rerunning(|| {
            let (owner, attempts) = (owner.to_owned(), attempts.to_vec());
            move |tx| {
                Box::pin(async move {
                    let mut settled = 0;
                    for a in attempts {
                        let done = settle(
                            tx,
                            a.id,
                            &owner,
                            a.delivery,
                            a.next_attempt,
                            a.error.as_deref(),
                            now,
                        )
                        .await?;
                        settled += usize::from(done);
                    }
                    Ok(settled)
                })
            }
        })
        .await
}
