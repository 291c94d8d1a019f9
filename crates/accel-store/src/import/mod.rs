//! Taking over a running cloud: upstream Placement's database read into accel's, and
//! accel's written back into an empty upstream one (issue 28).
//!
//! Why here and shaped so:
//! - The upstream schema is SQL like ours, so reading it is this crate's business
//!   ([`read`]); the CLI only names the URLs and prints what comes back.
//! - Everything the upstream database holds is read first, in one read-only
//!   transaction, into plain rows ([`PlacementData`]); then checked row by row
//!   ([`check`]) with nothing written; then written in ONE transaction of accel's own
//!   ([`write`], through [`crate::Store::write_or_refuse`]), so an import is all or
//!   nothing, and a refusal leaves the target exactly as it was.
//! - The write goes through accel's change log like every other Placement write: every
//!   provider written (and every one a `--force` replaced) is `touch`ed, the names and
//!   the consumer projects too, so a running accel's candidate index and usage cache
//!   see the imported data on their next request (ARCHITECTURE.md, "Every Placement
//!   change is logged in its transaction").
//! - Uuids, names and generations come through unchanged (Nova caches provider and
//!   consumer generations); integer ids are upstream's too for providers, aggregates,
//!   projects, users, consumer types and consumers (nothing outside the database sees
//!   them), while resource classes and traits are mapped by name, never by upstream's
//!   integer ids.
//!
//! Upstream's schemas in use since 2023.1 are accepted ([`PLACEMENT_SCHEMAS`]):
//! 2023.1 (9.0.0) stands at alembic revision `422ece571366` (consumer types), every
//! release from 2023.2 (10.0.0) to 16.0.0 at `a082b8bb98d0`, which only drops
//! indexes that duplicated unique constraints: the tables and columns read and
//! written are the same. Any other `alembic_version` is refused with the version
//! found.

pub mod check;
mod columns;
pub mod cyborg;
pub mod export;
pub mod force;
pub mod read;
mod rows;
mod tables;
pub mod write;

pub use check::{check, Checked, OverCapacity, Problem};
pub use read::{read_placement, Source};
pub use write::{import_placement, Imported, Options, Refused};

/// The alembic revision of upstream Placement's schema from 2023.2 to 16.0.0.
pub const PLACEMENT_HEAD: &str = "a082b8bb98d0";

/// The alembic revisions accepted: [`PLACEMENT_HEAD`], and 2023.1's `422ece571366`
/// (the same tables and columns, with redundant indexes `a082b8bb98d0` dropped).
pub const PLACEMENT_SCHEMAS: &[&str] = &[PLACEMENT_HEAD, "422ece571366"];

/// A resource provider row of upstream's `resource_providers`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRow {
    pub id: i64,
    pub uuid: String,
    /// Nullable upstream; a provider without a name is refused.
    pub name: Option<String>,
    /// Nullable upstream; a provider without a generation is refused.
    pub generation: Option<i64>,
    pub root_id: Option<i64>,
    pub parent_id: Option<i64>,
    pub created: Option<i64>,
    pub updated: Option<i64>,
}

/// An inventory row (`inventories`).
#[derive(Debug, Clone, PartialEq)]
pub struct InventoryRow {
    pub provider_id: i64,
    pub class_id: i64,
    pub total: i64,
    pub reserved: i64,
    pub min_unit: i64,
    pub max_unit: i64,
    pub step_size: i64,
    pub allocation_ratio: f64,
    pub created: Option<i64>,
    pub updated: Option<i64>,
}

/// A consumer row (`consumers`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerRow {
    pub id: i64,
    pub uuid: String,
    pub project_id: i64,
    pub user_id: i64,
    pub generation: i64,
    pub type_id: Option<i64>,
    pub created: Option<i64>,
    pub updated: Option<i64>,
}

/// An allocation row (`allocations`).
#[derive(Debug, Clone, PartialEq)]
pub struct AllocationRow {
    pub provider_id: i64,
    pub consumer: String,
    pub class_id: i64,
    pub used: i64,
    pub created: Option<i64>,
    pub updated: Option<i64>,
}

/// An `(id, name)` row: resource classes, traits, aggregates (uuid), projects and
/// users (external id), consumer types.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    pub id: i64,
    pub name: String,
    pub created: Option<i64>,
}

/// Everything of Placement a database holds, as rows with the source's integer ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlacementData {
    pub classes: Vec<Named>,
    pub traits: Vec<Named>,
    pub providers: Vec<ProviderRow>,
    pub inventories: Vec<InventoryRow>,
    pub aggregates: Vec<Named>,
    /// `(provider id, aggregate id)`.
    pub provider_aggregates: Vec<(i64, i64)>,
    /// `(provider id, trait id)`.
    pub provider_traits: Vec<(i64, i64)>,
    pub projects: Vec<Named>,
    pub users: Vec<Named>,
    pub consumer_types: Vec<Named>,
    pub consumers: Vec<ConsumerRow>,
    pub allocations: Vec<AllocationRow>,
}

impl PlacementData {
    /// Rows per table, in the order the tables are written, for `--dry-run` and the
    /// import's summary.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("resource_classes", self.classes.len()),
            ("traits", self.traits.len()),
            ("resource_providers", self.providers.len()),
            ("inventories", self.inventories.len()),
            ("placement_aggregates", self.aggregates.len()),
            (
                "resource_provider_aggregates",
                self.provider_aggregates.len(),
            ),
            ("resource_provider_traits", self.provider_traits.len()),
            ("projects", self.projects.len()),
            ("users", self.users.len()),
            ("consumer_types", self.consumer_types.len()),
            ("consumers", self.consumers.len()),
            ("allocations", self.allocations.len()),
        ]
    }
}
