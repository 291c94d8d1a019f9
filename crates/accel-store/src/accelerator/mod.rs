//! The accelerator (Cyborg) tables: device profiles, hardware records (devices,
//! control-path ids, deployables, attributes, attach handles), accelerator requests and
//! their durable bind jobs.
//!
//! As in [`crate::placement`], functions take an open transaction so a handler composes
//! them in one [`crate::Store::write`]. Invariants kept here:
//! - every ARQ query that a tenant can reach is scoped in SQL by [`Scope`] (an ARQ with
//!   no project is visible to admins only), and lists filter in SQL on indexed columns
//!   (`instance_uuid`, `project_id`), never by loading every ARQ;
//! - a profile referenced by ARQs cannot be deleted ([`crate::Conflict::InUse`]);
//! - a host's hardware report replaces that host's records and reconciles its Placement
//!   providers in the caller's transaction ([`report::replace_host`]), so a failed
//!   report leaves both as they were;
//! - a bind job is performed once, takes an attach handle once and always ends
//!   ([`binds`]); the Nova event commits with the resolution it reports ([`events`]);
//! - a change to a host's device providers marks the host for a push to an external
//!   Placement in the same transaction ([`pushes`]), when the caller has one.

pub mod arqs;
pub mod binds;
pub mod events;
pub mod hardware;
pub mod kubernetes;
pub mod profiles;
mod programs;
pub mod pushes;
pub mod report;

/// Which ARQs a caller may see: all of them (admin), or one project's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Project(String),
}

/// The rows' `created_at`/`updated_at` (epoch seconds); `updated` is `None` until the
/// first update, which the API shows as `null`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamps {
    pub created: i64,
    pub updated: Option<i64>,
}

impl Stamps {
    fn from_row(row: &sqlx::any::AnyRow) -> Result<Stamps, sqlx::Error> {
        use sqlx::Row;
        Ok(Stamps {
            created: row.try_get("created_at")?,
            updated: row.try_get("updated_at")?,
        })
    }
}

fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}
