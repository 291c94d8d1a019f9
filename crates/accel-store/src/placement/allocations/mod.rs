//! Consumers and their allocations.
//!
//! Split by what a caller wants from them, because the three share tables but not
//! invariants:
//! - [`write`]: replacing consumers' allocations, the only place that claims
//!   providers and checks capacity ([`Allocations::replace`] is the whole
//!   transaction, with its retries; [`prepare`] + [`apply`] are its steps for callers
//!   that compose it with other writes, such as the reshaper and the Kubernetes usage
//!   report);
//! - [`read`]: allocation rows as the API lists them;
//! - [`usage`]: usage sums, per provider and per project (`GET /usages`,
//!   [`Usages`]).
//!
//! The API's operations are [`Allocations`] ([`Store::allocations`]) and [`Usages`]
//! ([`Store::usages`]).
//!
//! Refusals that depend on the data (bad consumer generation, unknown provider or
//! class, capacity) come back as [`Refusal`] inside `Ok`, so callers can word them, and
//! [`crate::Store::write_or_refuse`] rolls the transaction back for them.

mod read;
mod usage;
mod write;

pub use read::{for_consumer, for_provider, AllocationRow};
pub use usage::{provider_usages, totals, TotalUsage, Totals, TypeFilter, Usages};
pub use write::{
    apply, consumer_type_id, delete_consumers_without_allocations, delete_for_consumer, prepare,
    replace, Prepared,
};

use super::providers::{self, Provider};
use crate::{Store, StoreError};

pub use crate::error::Refusable;

/// Upstream's default `incomplete_consumer_project_id` / `_user_id`.
pub const INCOMPLETE_ID: &str = "00000000-0000-0000-0000-000000000000";

/// Why a write was refused, as data (the Placement API words it).
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The consumer's generation is `expected` (`None`: no such consumer yet), not
    /// the `got` the client sent (`None`: null).
    ConsumerGeneration {
        expected: Option<i64>,
        got: Option<i64>,
    },
    /// An allocation names a provider that does not exist (its uuid).
    NoSuchProvider(String),
    /// A resource class that does not exist (its name).
    NoSuchClass(String),
    /// Upstream's `InvalidInventory` family.
    InvalidInventory(InvalidInventory),
}

/// Why allocations do not fit the inventory (upstream's `InvalidInventory` family).
#[derive(Debug, Clone, PartialEq)]
pub enum InvalidInventory {
    /// The providers have no inventory of the classes (both lists in request order).
    Missing {
        classes: Vec<String>,
        providers: Vec<String>,
    },
    /// The amount of `class` asked of `provider` breaks its inventory's limits:
    /// its capacity (`capacity`), else its min/max unit or step size.
    Exceeds {
        class: String,
        provider: String,
        capacity: bool,
    },
}

/// What a request asks for one consumer.
#[derive(Debug, Clone, Default)]
pub struct ConsumerWrite {
    pub uuid: String,
    /// External project id; `None` (before 1.8) means the incomplete-consumer ids.
    pub project_id: Option<String>,
    pub user_id: Option<String>,
    /// Whether the consumer generation is checked (1.28+).
    pub check_generation: bool,
    /// The client's `consumer_generation` (`None` = null: "expect a new consumer").
    pub generation: Option<i64>,
    /// The consumer type (1.38+); created on first use.
    pub consumer_type: Option<String>,
    /// Provider uuid -> [(resource class, amount)], in request order. Empty: remove
    /// every allocation of the consumer.
    pub allocations: Vec<(String, Vec<(String, i64)>)>,
}

/// Allocation operations ([`Store::allocations`]).
pub struct Allocations<'s>(&'s Store);

impl Store {
    /// Operations on consumers' allocations.
    pub fn allocations(&self) -> Allocations<'_> {
        Allocations(self)
    }
}

impl Allocations<'_> {
    /// Consumer `uuid`'s allocations, in insertion order (none for an unknown one).
    pub async fn of_consumer(&self, uuid: &str) -> Result<Vec<AllocationRow>, StoreError> {
        let uuid = uuid.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { for_consumer(tx, &uuid).await }))
            .await
    }

    /// Provider `uuid` and its allocations, `None` when there is no such provider.
    pub async fn of_provider(
        &self,
        uuid: &str,
    ) -> Result<Option<(Provider, Vec<AllocationRow>)>, StoreError> {
        providers::read_of(self.0, uuid, |tx, id| Box::pin(for_provider(tx, id))).await
    }

    /// Replaces the allocations of every consumer in `writes` in one transaction,
    /// rerun up to `attempts` times in all after a lost provider-generation race
    /// ([`write`]'s rules).
    pub async fn replace(&self, writes: &[ConsumerWrite], attempts: u32) -> Refusable<(), Refusal> {
        replace(self.0, writes, attempts).await
    }

    /// Deletes every allocation of consumer `uuid` ([`delete_for_consumer`]); false
    /// when it had none.
    pub async fn delete_consumer(&self, uuid: &str) -> Result<bool, StoreError> {
        let uuid = uuid.to_owned();
        self.0
            .write(move |tx| Box::pin(async move { delete_for_consumer(tx, &uuid).await }))
            .await
    }
}
