//! What the store's operations refuse, as data: one enum per API area, each worded
//! only by that API's error module in accel-server (upstream's sentences live there).
//! A leaf of the crate: nothing here imports the store, so the error type
//! ([`crate::StoreError::Refused`]) and both areas stand on it.

pub mod accelerator;
pub mod placement;

/// A refusal an API shows its client: which API's words it needs and what was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Placement(placement::Refused),
    Accelerator(accelerator::Refused),
}
