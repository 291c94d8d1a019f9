//! Placement microversions: the ordered value, its parsing from
//! `OpenStack-API-Version` and the named versions live in the wire crate
//! ([`accel_api::placement::mv`]); the server gates on those names.

pub use accel_api::placement::mv::{from_headers, parse, Version, VersionError};
