//! The maintenance switch as the server applies it (issue 42): while it is on, both
//! APIs answer every write (POST, PUT, PATCH, DELETE) with 503 in their own error
//! envelope and serve every read, so an operator can freeze accel, export or import,
//! verify and switch over (docs/migrating.md).
//!
//! The switch is a database row (`accel_store::maintenance`), so replicas on one
//! database see the same state. Reading it on every write would add a query to each;
//! instead each server remembers the answer for [`FRESH`] and reads it again after
//! that, so another replica's toggle is seen within that time and this server's own
//! at once ([`Gate::set`]). A failed or slow read is logged and the last known state
//! stands (none known: the write goes on, and meets the same database, which answers
//! for itself), so a lost database never makes `/readyz` or a write wait on it longer
//! than the health checks do.
//!
//! Turned on and off by `PUT` / `DELETE /v2/maintenance` on the accelerator API
//! (admin only; those two stay writable), or at start-up with `maintenance = REASON`;
//! shown on `/readyz` and the console's overview.

use accel_store::maintenance::Maintenance;
use accel_store::Store;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a server trusts its last reading of the switch.
pub const FRESH: Duration = Duration::from_secs(1);

/// How long a reading may take before the last known state stands in (the health
/// checks' database timeout).
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// A server's view of the switch.
#[derive(Debug, Default)]
pub struct Gate {
    last: Mutex<Option<(Instant, Option<Maintenance>)>>,
}

impl Gate {
    /// The switch's state, read again when the last reading is older than [`FRESH`].
    /// A failed or slow read ([`READ_TIMEOUT`]) answers the last state read (none:
    /// off), and the next call reads again.
    pub async fn current(&self, store: &Store) -> Option<Maintenance> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some((at, state)) = &last {
            if at.elapsed() < FRESH {
                return state.clone();
            }
        }
        let stale = last.and_then(|(_, state)| state);
        match tokio::time::timeout(READ_TIMEOUT, store.maintenance().get()).await {
            Ok(Ok(state)) => {
                self.set(state.clone());
                state
            }
            Ok(Err(e)) => {
                tracing::warn!(target: "accel::maintenance", error = %e, "reading the maintenance switch failed; its last known state stands");
                stale
            }
            Err(_) => {
                tracing::warn!(target: "accel::maintenance", timeout_ms = READ_TIMEOUT.as_millis() as u64, "reading the maintenance switch timed out; its last known state stands");
                stale
            }
        }
    }

    /// What this server just wrote (or read): seen at once.
    pub fn set(&self, state: Option<Maintenance>) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), state));
    }
}

/// The sentence a refused write carries (in the API's envelope).
pub fn refusal(m: &Maintenance) -> String {
    format!(
        "This service is in maintenance since {}: writes are stopped ({}); reads are served. \
         Retry the request once the maintenance ends.",
        utc(m.since),
        m.reason
    )
}

/// The line `/readyz` and the console show.
pub fn describe(state: Option<&Maintenance>) -> String {
    match state {
        None => "off: reads and writes served".to_owned(),
        Some(m) => format!(
            "on since {}: writes answered 503, reads served ({})",
            utc(m.since),
            m.reason
        ),
    }
}

/// Whether `method` writes (what the switch stops).
pub fn writes(method: &axum::http::Method) -> bool {
    use axum::http::Method as M;
    matches!(*method, M::POST | M::PUT | M::PATCH | M::DELETE)
}

/// Epoch seconds as `2026-11-29 04:20:00 UTC`, for people.
fn utc(secs: i64) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let (d, c) = (t.date(), t.time());
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        d.year(),
        u8::from(d.month()),
        d.day(),
        c.hour(),
        c.minute(),
        c.second()
    )
}
