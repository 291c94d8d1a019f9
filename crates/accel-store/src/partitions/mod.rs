//! The GPU partition ledger in the database (issue 45): one ledger per GPU whose agent
//! reports `partitions`, changed only inside the transaction that hands a partition out
//! or takes it back, so replicas on one database never double-book a slice.
//!
//! ```text
//!  report (report/mod.rs)   a GPU with partitions ─▶ expand: a child deployable (and
//!                           provider) per MIG profile and vGPU type under the GPU's
//!                           ─▶ upsert gpu_ledgers (geometry) + gpu_ledger_members
//!                           ─▶ sync_devices: each member's reserved from [`reserves`]
//!  claim (allocations::apply, delete_for_consumer; so also DRA prepares, the device
//!        plugins' usage and reshapes, which write through them)
//!     lock the GPUs' ledgers (generation + 1, in id order, before any provider)
//!     ─▶ allocations written ─▶ [`settle`]: holders made to match the allocations on
//!        the members (a new one placed by accel_core::partition, refused in capacity
//!        words when it cannot be) ─▶ every member's reserved rewritten, touched
//!  a pod's MIG device (DRA: the scheduler chose the placement) ─▶ [`pin`]: the
//!        holder written at that placement before the allocation, which settle keeps
//!  cleaning started on a GPU ─▶ [`refresh_gpu`]: every member reserved in full
//! ```
//!
//! Why holders are kept rather than derived like usage: a holder is a *placement* (which
//! memory slices), which allocations do not say; the agent creates the MIG instance
//! there. Why `reserved`: Placement has no shared counters, so each member's free room
//! (`total - reserved - used`) is set to what the ledger can still create that way, and
//! the candidate index, which re-reads touched providers, never offers a partition that
//! cannot be created. A request naming two members of one GPU is checked jointly by the
//! settle and refused if the ledger cannot hold both.
//!
//! Lock order: a ledger's row before any provider's, everywhere a ledger is written (a
//! claim, a report); the cleaning hook runs last and takes it after its provider's, and
//! a deadlock there is rerun like any other.

mod pin;
mod report;
pub(crate) mod rows;
pub(crate) use rows::partition_members;
mod settle;

pub(crate) use pin::{holds_pins, locked_ledger, pin};
pub use pin::{Pin, PinRefusal, Pinned};
pub use report::expand;
pub(crate) use report::sync_report;
pub use rows::{Holder, Ledger};
pub(crate) use settle::{
    lock_for, member_withheld, refresh_gpu, reserves_of, settle, used_of, Settling,
};

use crate::{Store, StoreError};

/// How much of a member provider's inventory is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    /// Nothing: the ledger can give the whole GPU.
    Nothing,
    /// Everything: the ledger can give none of it.
    Full,
    /// All but what is allocated: a holder has the whole GPU, nobody else may.
    AllButUsed,
    /// This many units (a MIG profile's or vGPU type's provider).
    Units(i64),
}

impl Reserve {
    /// The `reserved` of an inventory of `total` with `used` allocated.
    pub fn amount(self, total: i64, used: i64) -> i64 {
        match self {
            Reserve::Nothing => 0,
            Reserve::Full => total,
            Reserve::AllButUsed => (total - used).clamp(0, total),
            Reserve::Units(n) => n.clamp(0, total),
        }
    }
}

/// Reads of the ledgers ([`Store::partitions`]); every write is part of a claim or a
/// report.
pub struct Partitions<'s>(&'s Store);

impl Store {
    /// The GPU partition ledgers.
    pub fn partitions(&self) -> Partitions<'_> {
        Partitions(self)
    }
}

impl Partitions<'_> {
    /// The ledger of the GPU whose own provider is `rp_uuid`.
    pub async fn ledger(&self, rp_uuid: &str) -> Result<Option<Ledger>, StoreError> {
        let u = rp_uuid.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { rows::by_gpu(tx, &u).await }))
            .await
    }

    /// The MIG instances held on `host`'s GPUs: (the GPU provider's name, consumer,
    /// profile id, placement), by GPU then holder.
    pub async fn held_mig(
        &self,
        host: &str,
    ) -> Result<Vec<(String, String, u32, accel_core::partition::Span)>, StoreError> {
        let h = host.to_owned();
        self.0
            .read(move |tx| {
                Box::pin(async move {
                    let mut out = Vec::new();
                    for l in rows::of_host(tx, &h).await? {
                        let Some(gpu) = crate::placement::providers::get(tx, &l.rp_uuid).await?
                        else {
                            continue;
                        };
                        for holder in &l.holders {
                            if let accel_core::partition::Consumer::Mig { profile, at } =
                                holder.holder
                            {
                                out.push((gpu.name.clone(), holder.consumer.clone(), profile, at));
                            }
                        }
                    }
                    Ok(out)
                })
            })
            .await
    }

    /// The ledgers of the GPUs whose own providers are `rp_uuids`, in one snapshot, by
    /// GPU provider uuid (a GPU without a ledger is absent).
    pub async fn ledgers(
        &self,
        rp_uuids: &[String],
    ) -> Result<std::collections::HashMap<String, Ledger>, StoreError> {
        let u = rp_uuids.to_vec();
        self.0
            .read(move |tx| {
                Box::pin(async move {
                    let refs: Vec<&str> = u.iter().map(String::as_str).collect();
                    Ok(rows::by_gpus(tx, &refs)
                        .await?
                        .into_iter()
                        .map(|l| (l.rp_uuid.clone(), l))
                        .collect())
                })
            })
            .await
    }

    /// Every ledger of `host`'s GPUs.
    pub async fn of_host(&self, host: &str) -> Result<Vec<Ledger>, StoreError> {
        let h = host.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { rows::of_host(tx, &h).await }))
            .await
    }
}
