//! The one rule every hand-out of a device applies (issue 41): a device provider that
//! is being cleaned, failed its cleaning, or (for a bind) has its whole inventory
//! reserved is given to no one, whichever way in is asked:
//!
//! ```text
//! bind naming device_rp_uuid   binds::attempt ──▶ withheld(rp)  ──▶ BindFailed, "no free
//!                                                                   attach handle" (upstream's
//!                                                                   refusal; Nova: ERROR)
//! Placement claim              allocations::apply ─┐
//! device plugins' usage save   kubernetes::save ───┼▶ cleaning_of(rps) ──▶ capacity refusal
//! DRA prepare                  claims::prepare ────┘                       (409)
//! ```
//!
//! Each asks inside the transaction that hands the device out, after taking the
//! provider's row lock; [`super::after_release`] marks a released device under the
//! same lock, in the releasing transaction. So the hand-out either committed before
//! the release (and the release sees a consumer: no cleaning yet) or sees the
//! cleaning (and refuses): no hand-out overlaps a cleaning, and a device is never
//! handed from one tenant to the next without one. A Placement claim is refused by
//! the reservation already; asking the cleaning state as well keeps the rule when an
//! inventory write lowered the reservation meanwhile.

use super::CleaningState;
use crate::{placeholders, StoreError, Tx};
use sqlx::Row;

/// Why a device provider is given to no one now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// Released and not cleaned yet.
    Cleaning,
    /// Its cleaning failed: out of service until an operator acts.
    CleanFailed,
    /// Its whole inventory is reserved (unhealthy, vanished, in maintenance, or an
    /// operator's reservation).
    Reserved,
}

impl Withheld {
    /// How a refusal says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Withheld::Cleaning => "it is being cleaned",
            Withheld::CleanFailed => "its cleaning failed",
            Withheld::Reserved => "its inventory is reserved in full",
        }
    }
}

/// Those of `rp_uuids` whose cleaning is not `clean`, with their state. Costs one
/// indexed read.
pub(crate) async fn cleaning_of(
    tx: &mut Tx,
    rp_uuids: &[&str],
) -> Result<Vec<(String, Withheld)>, StoreError> {
    if rp_uuids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT rp_uuid, state FROM device_cleanings WHERE state <> 'clean' AND rp_uuid IN ({})",
        placeholders(1, rp_uuids.len())
    );
    let mut q = sqlx::query(&sql);
    for u in rp_uuids {
        q = q.bind(*u);
    }
    let mut out = Vec::new();
    for r in q.fetch_all(&mut *tx).await? {
        let why = match crate::accelerator::parse_column::<CleaningState, _>(&r, 1)? {
            CleaningState::Clean => continue,
            CleaningState::Cleaning => Withheld::Cleaning,
            CleaningState::Failed => Withheld::CleanFailed,
        };
        out.push((r.try_get(0)?, why));
    }
    Ok(out)
}

/// Why the device provider `rp_uuid` may not be bound now, if it may not: its
/// cleaning, or an inventory reserved in full (for a partitioned GPU's provider: the
/// GPU out of service). Takes the provider's row lock first,
/// as a claim and a release do.
pub(crate) async fn for_bind(tx: &mut Tx, rp_uuid: &str) -> Result<Option<Withheld>, StoreError> {
    sqlx::query("UPDATE resource_providers SET updated_at = updated_at WHERE uuid = $1")
        .bind(rp_uuid)
        .execute(&mut *tx)
        .await?;
    if let Some((_, why)) = cleaning_of(tx, &[rp_uuid]).await?.into_iter().next() {
        return Ok(Some(why));
    }
    // A partitioned GPU's provider: its reservations are the ledger's (a VM holding
    // the GPU whole leaves its memory inventory reserved in full); ask the GPU itself.
    if let Some(off) = crate::partitions::member_withheld(tx, rp_uuid).await? {
        return Ok(off.then_some(Withheld::Reserved));
    }
    let reserved: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM inventories i JOIN resource_providers rp \
         ON rp.id = i.resource_provider_id WHERE rp.uuid = $1 AND i.reserved >= i.total",
    )
    .bind(rp_uuid)
    .fetch_one(&mut *tx)
    .await?;
    Ok((reserved > 0).then_some(Withheld::Reserved))
}
