//! The Placement API's wire contract: named microversions ([`mv`]), the request and
//! response bodies ([`types`], on the ordered maps and lenient integers of [`map`]),
//! and the typed client ([`Client`]) every caller of a Placement uses: the
//! external-Placement pusher, the load bench and the tests. [`candidate_query`] reads an
//! allocation-candidates query back into its groups and [`explain`] is the wire form
//! of `accel explain`'s answer.

pub mod candidate_query;
mod client;
pub mod explain;
pub mod map;
pub mod mv;
pub mod types;

pub use client::Client;
pub use map::{Map, Resources};
pub use mv::Version;
pub use types::*;
