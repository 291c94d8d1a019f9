//! The accel API server: the Placement API and the accelerator (Cyborg v2) API, each
//! with its own router, listener and error format, sharing one store, one policy engine,
//! one auth layer and one HTTP front door ([`front`]) that gives both APIs' handlers one
//! signature.
//!
//! Besides the listeners, `accel serve` runs the accelerator API's background workers
//! ([`accelerator::binder`]). The Nova workflow, a client of both APIs, is
//! `accel_api::workflow`.
//!
//! [`app::App`] is the composition root every server process goes through (`accel
//! serve`, tests, benches): it takes already-bound listeners and a shutdown future
//! (tests bind port 0 and read the address back), so nothing here chooses ports or
//! installs signal handlers. Background workers run under [`supervisor`].

pub mod accelerator;
pub mod admission;
pub mod app;
pub mod auth;
pub mod console;
mod cors;
pub mod external;
pub mod front;
pub mod health;
mod heartbeat;
pub mod jsonschema;
pub mod listen;
pub mod maintenance;
pub mod metrics;
pub mod observe;
pub mod placement;
mod reply;
mod serve;
pub mod state;
pub mod supervisor;

pub use placement::AppState;
pub use serve::{serve, serve_all, serve_with_metrics, AcceleratorApi};
pub use state::{ServerConfig, Shared, MAX_QUERY_BYTES};
