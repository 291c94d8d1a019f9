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
//!   record.rs: how that record fails (its errors cross the seam boxed, as the cause)
//!   channel.rs: the unix-socket dial, and how a call to kubelet fails
//!   cdi.rs: CDI spec files for the runtime
//!   authority.rs: every socket kubelet dials takes grpc-go's percent-encoded :authority
//!   run.rs: the loop around the steps
//! ```
//!
//! Every change to the table bumps one `watch` counter; every ListAndWatch stream
//! recomputes its list on each bump and sends it when it differs, which is how the
//! instance-level and pooled plugins notify each other.
//!
//! Invariants:
//!
//! - **No slot has two holders** (property test in `slots/tests.rs`): a grant takes a free
//!   slot or repeats its own holder's grant; one virtual id is on one slot; one
//!   container's ids are on distinct devices; a refused Allocate changes nothing.
//! - **Kubelet's contract**: all devices of a container in one `ContainerAllocateResponse`
//!   (kubelet keeps only the first); a repeated Allocate of slots this node holds succeeds
//!   (init containers); a socket is served before Register (kubelet dials back);
//!   every ListAndWatch message is the full list, sent when it differs from the last one;
//!   device ids are at most 63 characters (configuration names at most 40).
//! - **Advertise only what can be allocated**: the pool's free ids are one per device
//!   with a free slot; a slot the pool holds is Unhealthy on the instance plugin. The pool
//!   takes a device's highest free slot and GetPreferredAllocation steers kubelet to the
//!   lowest, so the two kinds rarely race for one slot.
//! - **Reclaim never guesses**: a held slot is freed only after `reclaim_grace_seconds`
//!   without being listed by pod-resources (kubelet has no deallocate); a List that fails
//!   frees nothing; restored claims get a full grace.
//! - **Devices that go**: an unhealthy device turns all its ids Unhealthy and offers no
//!   pool id; a vanished one keeps its instance (Unhealthy) while this node holds one of
//!   its slots, and its plugin stops once the reclaimer frees them.

pub mod authority;
pub mod cdi;
pub mod channel;
pub mod config;
pub mod device;
pub mod dra;
pub mod kubelet;
pub mod metrics;
pub mod plugin;
pub mod podresources;
pub mod proto;
pub mod record;
pub mod run;
pub mod slots;
pub mod state;
#[cfg(feature = "testing")]
pub mod testing;
pub mod usage;

pub use config::{KubernetesConfig, KubernetesFile};
pub use device::{Device, DeviceNode, DeviceSource};
pub use metrics::KubeletMetrics;
pub use record::RecordError;
pub use run::{run, run_with, Options};
pub use slots::SlotTable;
pub use state::Shared;
pub use usage::{Claim, Recorded, UsageRecord, UsageReport};
