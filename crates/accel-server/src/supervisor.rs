//! The supervisor of the server's background workers: crate `accel_supervisor`, which
//! the node agent's workers run under too.

pub use accel_supervisor::*;
