//! Kubernetes device plugins for accel's accelerators (kubelet device plugin API
//! v1beta1), with seed 001's two kinds of resource: one instance-level plugin per
//! device and one configuration-level (pooled) plugin per configuration.
//!
//! ```text
//!  DeviceSource ──set_devices──▶ SlotTable (slots.rs, pure) ◀──reclaim── pod-resources List
//!                                   │  ▲                                  (podresources.rs)
//!                      list/allocate│  │ state.rs: one mutex, one change counter
//!                                   ▼  │
//!   plugin.rs: a DevicePlugin service per resource ◀──gRPC, unix sockets── kubelet
//!   kubelet.rs: serve the sockets, Register, re-register when kubelet restarts
//!   usage.rs: restore usage from, and save it to, a record (the server); devices VMs hold
//!   cdi.rs: CDI spec files for the runtime
//!   run.rs: the loop around the steps
//! ```
//!
//! Every change to the table bumps one `watch` counter; every ListAndWatch stream
//! recomputes its list on each bump and sends it when it differs, which is how the
//! instance-level and pooled plugins notify each other.

pub mod cdi;
pub mod config;
pub mod device;
pub mod kubelet;
pub mod plugin;
pub mod podresources;
pub mod proto;
pub mod run;
pub mod slots;
pub mod state;
#[cfg(feature = "testing")]
pub mod testing;
pub mod usage;

pub use config::{KubernetesConfig, KubernetesFile};
pub use device::{Device, DeviceNode, DeviceSource};
pub use run::{run, run_with, Options};
pub use slots::SlotTable;
pub use state::Shared;
pub use usage::{Claim, Recorded, UsageRecord, UsageReport};
