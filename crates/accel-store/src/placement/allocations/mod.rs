//! Consumers and their allocations.
//!
//! Split by what a caller wants from them, because the three share tables but not
//! invariants:
//! - [`write`]: replacing consumers' allocations, the only place that claims
//!   providers and checks capacity ([`replace`] is the whole transaction, with its
//!   retries; [`prepare`] + [`apply`] are its steps for callers that compose it with
//!   other writes, such as the reshaper and the Kubernetes usage report);
//! - [`read`]: allocation rows as the API lists them;
//! - [`usage`]: usage sums, per provider and per project (`GET /usages`).
//!
//! Refusals that depend on the data (bad consumer generation, unknown provider or
//! class, capacity) come back as [`Refusal`] inside `Ok`, so callers can word them, and
//! [`crate::Store::write_or_refuse`] rolls the transaction back for them.

mod read;
mod usage;
mod write;

pub use read::{for_consumer, for_provider, AllocationRow};
pub use usage::{provider_usages, totals, TotalUsage, Totals, TypeFilter};
pub use write::{
    apply, consumer_type_id, delete_consumers_without_allocations, delete_for_consumer, prepare,
    replace, Prepared,
};

pub use crate::error::{Refusable, PROVIDER_RACE};

/// Upstream's default `incomplete_consumer_project_id` / `_user_id`.
pub const INCOMPLETE_ID: &str = "00000000-0000-0000-0000-000000000000";

/// The message of a lost consumer-generation swap (not retried).
pub const CONSUMER_RACE: &str =
    "Another thread concurrently updated the data. Please retry your update";

/// Why a write was refused, in upstream's words where upstream has them.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// `consumer generation conflict - expected X but got Y`.
    ConsumerGeneration(String),
    /// An allocation names a provider that does not exist (its uuid).
    NoSuchProvider(String),
    /// A resource class that does not exist (its name).
    NoSuchClass(String),
    /// Upstream's `InvalidInventory` family: the full message.
    InvalidInventory(String),
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
