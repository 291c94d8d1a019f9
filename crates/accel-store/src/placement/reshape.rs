//! The reshaper (`POST /reshaper`, 1.30): replace the inventories of some providers
//! and the allocations of some consumers atomically, so a provider tree can move
//! resources from one provider to another without a moment in which they are
//! allocated twice or not at all.
//!
//! One transaction, in upstream's order: check each named provider exists and has the
//! given generation; ensure the consumers and resolve allocation providers; set an
//! interim inventory (the new records plus every old one, so nothing allocated
//! disappears); replace the allocations (capacity is checked against the interim
//! inventory); then set the final inventories, which refuses to drop a class still in
//! use ([`super::Refused::InventoryInUse`]).

use super::allocations::{self, ConsumerWrite, Refusal};
use super::inventories::{self, Inventory};
use super::{lookup, providers};
use crate::{Refusable, Store, Tx};

/// The new inventories of one provider.
#[derive(Debug, Clone)]
pub struct ProviderInventories {
    pub uuid: String,
    /// The generation the client saw.
    pub generation: i64,
    /// The full new set; each record's class by name (`rc_id` is resolved here).
    pub inventories: Vec<Inventory>,
}

/// Why a reshape was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ReshapeRefusal {
    /// A provider in the inventories part does not exist (its uuid).
    ProviderNotFound(String),
    /// A provider's generation is not the one given.
    Generation { rp: String, actual: i64, given: i64 },
    /// The allocations part, or an unknown class in the inventories part
    /// ([`Refusal::NoSuchClass`]).
    Allocation(Refusal),
}

impl Store {
    /// Runs the reshape as one transaction, rerun up to `attempts` times in all when
    /// it loses a provider-generation race.
    pub async fn reshape(
        &self,
        invs: &[ProviderInventories],
        writes: &[ConsumerWrite],
        attempts: u32,
    ) -> Refusable<(), ReshapeRefusal> {
        self.write_retrying(attempts, || {
            let (i, w) = (invs.to_vec(), writes.to_vec());
            move |tx: &mut Tx| -> crate::BoxFut<'_, Result<(), ReshapeRefusal>> {
                Box::pin(async move { reshape_tx(tx, &i, &w).await })
            }
        })
        .await
    }
}

async fn reshape_tx(
    tx: &mut Tx,
    invs: &[ProviderInventories],
    writes: &[ConsumerWrite],
) -> Refusable<(), ReshapeRefusal> {
    let mut rps = Vec::new();
    for p in invs {
        let Some(rp) = providers::get(tx, &p.uuid).await? else {
            return Ok(Err(ReshapeRefusal::ProviderNotFound(p.uuid.clone())));
        };
        if rp.generation != p.generation {
            return Ok(Err(ReshapeRefusal::Generation {
                rp: p.uuid.clone(),
                actual: rp.generation,
                given: p.generation,
            }));
        }
        rps.push(rp);
    }
    let prepared = match allocations::prepare(tx, writes).await? {
        Ok(p) => p,
        Err(r) => return Ok(Err(ReshapeRefusal::Allocation(r))),
    };
    // Resolve every named class and build the new inventory lists.
    let names: Vec<String> = invs
        .iter()
        .flat_map(|p| p.inventories.iter().map(|i| i.rc_name.clone()))
        .collect();
    let ids = lookup::resource_class_ids(tx, &names).await?;
    let mut finals: Vec<Vec<Inventory>> = Vec::new();
    for (rp, p) in rps.iter().zip(invs) {
        let mut list = Vec::new();
        for inv in &p.inventories {
            let Some(id) = ids.get(&inv.rc_name) else {
                return Ok(Err(ReshapeRefusal::Allocation(Refusal::NoSuchClass(
                    inv.rc_name.clone(),
                ))));
            };
            list.push(Inventory {
                rc_id: *id,
                ..inv.clone()
            });
        }
        if !list.is_empty() {
            // Interim: the new records plus every old class they do not mention.
            let mut interim = list.clone();
            for old in inventories::list(tx, rp.id).await? {
                if !interim.iter().any(|n| n.rc_id == old.rc_id) {
                    interim.push(old);
                }
            }
            let current = providers::require(tx, &rp.uuid).await?;
            inventories::replace(tx, &current, &interim).await?;
        }
        finals.push(list);
    }
    if let Err(r) = allocations::apply(tx, &prepared).await? {
        return Ok(Err(ReshapeRefusal::Allocation(r)));
    }
    for (rp, list) in rps.iter().zip(&finals) {
        let current = providers::require(tx, &rp.uuid).await?;
        inventories::replace(tx, &current, list).await?;
    }
    Ok(Ok(()))
}
