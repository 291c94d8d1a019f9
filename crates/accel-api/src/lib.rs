//! The wire contract between accel's processes and its clients: request and response
//! types for the Placement API ([`placement`]), the accelerator API ([`accelerator`])
//! and the agent protocol ([`agent`]), the named microversions of both OpenStack APIs,
//! and one typed async client per API.
//!
//! Why a crate of its own: the server, the agent, the CLI, the Nova workflow, the
//! external-Placement pusher, the benches and the tests all speak these formats. With
//! the types here each side serialises the same struct instead of hand-writing JSON,
//! and nothing that only talks HTTP has to link the server (axum, sqlx).
//!
//! Upstream's field names and microversion quirks live here and stop here: the server
//! converts these types to and from `accel_core`'s domain types explicitly.

pub mod accelerator;
pub mod agent;
pub mod http;
pub mod partitions;
pub mod placement;
pub mod python;
pub mod workflow;
