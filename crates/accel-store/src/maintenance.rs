//! The maintenance switch (issue 42): writes stopped for a cut-over, reads served.
//!
//! It is a row in the database (`maintenance`, migration 0015), not a flag in a
//! process: replicas sharing the database stop writes together, whichever of them
//! the operator asked, and a server restarted during the cut-over comes back with
//! writes still stopped. The server reads it before a write (remembering the answer
//! for a moment, see accel-server's `maintenance.rs`); the store itself enforces
//! nothing, so an import, an export and the background workers run as before.

use crate::{Store, StoreError};
use sqlx::Row;

/// Writes are stopped: why, and since when (epoch seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Maintenance {
    pub reason: String,
    pub since: i64,
}

/// `store.maintenance()`: the switch.
pub struct Switch<'a>(&'a Store);

impl Store {
    /// The maintenance switch.
    pub fn maintenance(&self) -> Switch<'_> {
        Switch(self)
    }
}

impl Switch<'_> {
    /// Whether writes are stopped, and why.
    pub async fn get(&self) -> Result<Option<Maintenance>, StoreError> {
        self.0
            .read(|tx| {
                Box::pin(async move {
                    let row =
                        sqlx::query("SELECT reason, started_at FROM maintenance WHERE id = 1")
                            .fetch_optional(&mut *tx)
                            .await?;
                    row.map(|r| {
                        Ok(Maintenance {
                            reason: r.try_get(0)?,
                            since: r.try_get(1)?,
                        })
                    })
                    .transpose()
                })
            })
            .await
    }

    /// Stops writes with `reason` (a switch already on keeps its start and takes the
    /// new reason); returns the state now.
    pub async fn start(&self, reason: &str) -> Result<Maintenance, StoreError> {
        let reason = reason.to_owned();
        self.0
            .write(move |tx| {
                Box::pin(async move {
                    let now = crate::now();
                    let n = sqlx::query("UPDATE maintenance SET reason = $1 WHERE id = 1")
                        .bind(&reason)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if n == 0 {
                        sqlx::query(
                            "INSERT INTO maintenance (id, reason, started_at) VALUES (1, $1, $2)",
                        )
                        .bind(&reason)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    }
                    let since: i64 =
                        sqlx::query_scalar("SELECT started_at FROM maintenance WHERE id = 1")
                            .fetch_one(&mut *tx)
                            .await?;
                    Ok(Maintenance { reason, since })
                })
            })
            .await
    }

    /// Lets writes in again; whether the switch was on.
    pub async fn end(&self) -> Result<bool, StoreError> {
        self.0
            .write(|tx| {
                Box::pin(async move {
                    let n = sqlx::query("DELETE FROM maintenance WHERE id = 1")
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    Ok(n > 0)
                })
            })
            .await
    }
}
