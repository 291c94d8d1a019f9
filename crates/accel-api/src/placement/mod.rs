//! The Placement API's wire contract: named microversions ([`mv`]), the typed client
//! ([`Client`]) every caller of a Placement uses, and the request and response bodies.

pub mod mv;

pub use mv::Version;
