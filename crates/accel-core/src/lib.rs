//! Domain types and pure logic for accel: names of resource classes and traits, the
//! standard catalogues, capacity arithmetic, the allocation-candidate search, the
//! accelerator domain (device profiles, ARQ states, reported hardware) and the policy
//! engine. Nothing here performs I/O or knows about HTTP or SQL, so every rule
//! can be tested directly and shared by the server and the agent.

pub mod accelerator;
pub mod candidates;
pub mod capacity;
pub mod chunks;
pub mod ids;
pub mod names;
pub mod partition;
pub mod policy;
pub mod standard;
