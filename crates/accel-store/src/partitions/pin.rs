//! A holder placed by someone other than the ledger: the Kubernetes scheduler allocates
//! a MIG device at one placement from the node's ResourceSlice counters, and the node's
//! driver makes the instance exactly there. The ledger must then hold that placement,
//! not one it would have chosen, or a VM could be offered slices a pod has.
//!
//! ```text
//! pin(tx, consumer, gpu provider, profile, start)         inside the claim's transaction
//!   no ledger / no such profile / no such placement ──▶ refused, nothing written
//!   the ledger's row lock (before any provider's, as every claim)
//!   the consumer's own earlier holders on the GPU ──▶ set aside (a claim re-prepared)
//!   fits beside the other holders? ──no──▶ refused, naming a holder in the way
//!   ──▶ holder written at that placement; the caller writes the allocation on the
//!       profile's provider, and settle keeps the holder (it matches the allocation)
//! ```

use super::rows::{self, Ledger};
use crate::{StoreError, Tx};
use accel_core::partition::{Conflict, Consumer, Member};

/// Why a pinned placement cannot be held.
#[derive(Debug, Clone, PartialEq)]
pub enum PinRefusal {
    /// The GPU has no ledger (reported without partitions) or no such profile.
    NoProfile { profile_id: u32 },
    /// The profile cannot start at that memory slice.
    NoPlacement { profile_id: u32, start: u32 },
    /// Something else holds part of what the placement takes: `by` is the holding
    /// consumer, `why` the ledger's reason.
    Taken { by: String, why: Conflict },
}

/// What a pin asks: a MIG instance of `profile_id` starting at memory slice `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    pub profile_id: u32,
    pub start: u32,
}

/// A pin as the ledger holds it: the profile's provider, where the allocation goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    pub member_rp: String,
    pub resource_class: String,
}

/// The ledger of the GPU one of whose providers is in `rp_uuids`, locked.
pub(crate) async fn locked_ledger(
    tx: &mut Tx,
    rp_uuids: &[String],
) -> Result<Option<Ledger>, StoreError> {
    for u in rp_uuids {
        if let Some(l) = rows::by_gpu(tx, u).await? {
            rows::lock(tx, &[l.id]).await?;
            // Read again under the lock: a racing claim may have changed its holders.
            return rows::load(tx, l.id).await;
        }
    }
    Ok(None)
}

/// Holds `pins` on ledger `l` for `consumer`, replacing the consumer's earlier holders
/// there; see the module doc. Answers, per pin, the provider to allocate on.
pub(crate) async fn pin(
    tx: &mut Tx,
    l: &mut Ledger,
    consumer: &str,
    pins: &[Pin],
) -> Result<Result<Vec<Pinned>, PinRefusal>, StoreError> {
    let mut asked = Vec::with_capacity(pins.len());
    for p in pins {
        let Some(profile) = l.geometry.profile(p.profile_id) else {
            return Ok(Err(PinRefusal::NoProfile {
                profile_id: p.profile_id,
            }));
        };
        let Some(at) = profile
            .placements
            .iter()
            .find(|s| s.start == p.start)
            .copied()
        else {
            return Ok(Err(PinRefusal::NoPlacement {
                profile_id: p.profile_id,
                start: p.start,
            }));
        };
        let Some(member_rp) = l
            .members
            .iter()
            .find(|(_, m)| *m == Member::Mig(p.profile_id))
            .map(|(u, _)| u.clone())
        else {
            return Ok(Err(PinRefusal::NoProfile {
                profile_id: p.profile_id,
            }));
        };
        let resource_class = Member::Mig(p.profile_id)
            .resource_class(&l.geometry)
            .unwrap_or_default();
        asked.push((
            Consumer::Mig {
                profile: p.profile_id,
                at,
            },
            Pinned {
                member_rp,
                resource_class,
            },
        ));
    }
    let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut l.holders)
        .into_iter()
        .partition(|h| h.consumer == consumer);
    let mut held: Vec<Consumer> = others.iter().map(|h| h.holder.clone()).collect();
    for (c, _) in &asked {
        if let Err(why) = l.geometry.fits(&held, c) {
            let by = others
                .iter()
                .find(|h| l.geometry.fits(std::slice::from_ref(&h.holder), c).is_err())
                .map(|h| h.consumer.clone())
                .unwrap_or_else(|| consumer.to_owned());
            l.holders = others.into_iter().chain(mine).collect();
            return Ok(Err(PinRefusal::Taken { by, why }));
        }
        held.push(c.clone());
    }
    for h in &mine {
        rows::remove_holder(tx, h.id).await?;
    }
    l.holders = others;
    let mut out = Vec::with_capacity(asked.len());
    for (c, p) in asked {
        let id = rows::add_holder(tx, l.id, consumer, &p.member_rp, &c).await?;
        l.holders.push(rows::Holder {
            id,
            consumer: consumer.to_owned(),
            rp_uuid: p.member_rp.clone(),
            holder: c,
        });
        out.push(p);
    }
    Ok(Ok(out))
}

/// Whether `consumer` holds exactly `pins` on `l` (a replayed prepare).
pub(crate) fn holds_pins(l: &Ledger, consumer: &str, pins: &[Pin]) -> bool {
    let mut have: Vec<(u32, u32)> = l
        .holders
        .iter()
        .filter(|h| h.consumer == consumer)
        .filter_map(|h| match h.holder {
            Consumer::Mig { profile, at } => Some((profile, at.start)),
            _ => None,
        })
        .collect();
    let mut want: Vec<(u32, u32)> = pins.iter().map(|p| (p.profile_id, p.start)).collect();
    have.sort_unstable();
    want.sort_unstable();
    have == want
        && l.holders
            .iter()
            .filter(|h| h.consumer == consumer)
            .all(|h| matches!(h.holder, Consumer::Mig { .. }))
}
