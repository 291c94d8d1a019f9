//! The accelerator (Cyborg) tables: device profiles, hardware records (devices,
//! control-path ids, deployables, attributes, attach handles), accelerator requests and
//! their durable bind jobs.
//!
//! The API calls operations on [`crate::Store`], grouped per resource, each its own
//! snapshot or transaction ([`crate::Store::arqs`], [`crate::Store::profiles`],
//! [`crate::Store::hardware`], [`crate::Store::reports`], [`crate::Store::programs`],
//! [`crate::Store::cleanings`], [`crate::Store::kubernetes`], [`crate::Store::claims`];
//! the bind worker's in [`binds`] and [`events`]); every write is rerun there after a
//! deadlock, as upstream's `wrap_db_retry` reruns Cyborg's. What an operation refuses
//! comes back as data ([`Refused`]), worded by the accelerator API. The functions under
//! them take an open transaction. Invariants kept here:
//! - every ARQ query that a tenant can reach is scoped in SQL by [`Scope`] (an ARQ with
//!   no project is visible to admins only), and lists filter in SQL on indexed columns
//!   (`instance_uuid`, `project_id`), never by loading every ARQ;
//! - a profile referenced by ARQs cannot be deleted ([`Refused::ProfileInUse`]);
//! - a host's hardware report replaces that host's records and reconciles its Placement
//!   providers in the caller's transaction ([`report::replace_host`]), so a failed
//!   report leaves both as they were;
//! - a bind job is performed once, takes an attach handle once and always ends
//!   ([`binds`]); the Nova event commits with the resolution it reports ([`events`]);
//! - a change to a host's device providers marks the host for a push to an external
//!   Placement in the same transaction ([`pushes`]), when the caller has one.

/// The states of the store's own work queues, as enums with the column's text at the
/// database edge (`as_str` to bind, `FromStr` to read). They compare equal to their
/// text too, for callers that match on what the API shows.
macro_rules! column_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vdoc])* $variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::str::FromStr for $name {
            type Err = accel_core::accelerator::UnknownValue;

            fn from_str(s: &str) -> Result<$name, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(accel_core::accelerator::UnknownValue {
                        kind: stringify!($name),
                        value: s.to_owned(),
                    }),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use column_enum;

pub mod arqs;
pub mod binds;
pub mod claims;
pub mod cleaning;
pub mod events;
pub mod hardware;
pub mod heartbeats;
pub mod history;
pub mod kubernetes;
mod lease;
pub mod profiles;
mod programs;
pub mod pushes;
pub mod refusals;
pub use crate::refused::accelerator as refused;
pub use refused::Refused;

impl Refused {
    /// No `kind` with uuid `uuid`.
    pub(crate) fn no_uuid(kind: refused::Kind, uuid: &str) -> crate::StoreError {
        Refused::NotFound(kind, refused::Key::Uuid(uuid.to_owned())).into()
    }
}
pub mod report;

/// A text column read as a typed state: a text no variant has is a decode error naming
/// the column.
pub(crate) fn parse_column<T, I>(row: &sqlx::any::AnyRow, column: I) -> Result<T, sqlx::Error>
where
    T: std::str::FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
    I: sqlx::ColumnIndex<sqlx::any::AnyRow> + std::fmt::Display + Copy,
{
    use sqlx::Row;
    let text: String = row.try_get(column)?;
    text.parse().map_err(|e: T::Err| sqlx::Error::ColumnDecode {
        index: column.to_string(),
        source: Box::new(e),
    })
}

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
