//! Accelerator microversions: the named versions and the header parser live in the
//! wire crate (`accel_api::accelerator::microversion`), shared with the clients.

pub use accel_api::accelerator::microversion::{parse, Version};
