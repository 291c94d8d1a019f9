//! The accel node agent: one per compute node. It finds the node's accelerators in
//! sysfs through its drivers, models them as seed 003 says, leaves Nova's PCI devices
//! alone, and reports the full picture to the server, which applies it to its records
//! and to Placement in one transaction.
//!
//! ```text
//! sysfs ──▶ pci (one scan) ──▶ drivers/* ──▶ FoundDevice ──▶ nova (drop Nova's)
//!                                                 │
//!                              model::Report ◀────┘ ──▶ client ──PUT──▶ server
//! ```
//!
//! The agent never links the store: its only way to the data is the server's API.
//! With a `[kubernetes]` table it also serves kubelet device plugins (crate
//! `accel_k8s`) for the devices it finds ([`kubernetes`]), or, with `mode = "dra"`,
//! the DRA kubelet plugin ([`dra`]: the Kubernetes API client and the server's claims). It programs FPGA regions
//! when the server asks ([`program`]).

pub mod agent;
pub mod check;
pub mod cleaner;
pub mod cleaning;
pub mod client;
pub mod config;
pub mod dra;
pub mod drivers;
pub mod kubernetes;
pub mod metrics;
pub mod mig;
pub mod model;
pub mod node;
pub mod nova;
pub mod nvml;
pub mod observe;
pub mod partitions;
pub mod pci;
pub mod pci_ids;
pub mod program;
pub mod programming;
pub mod sysfs;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use agent::{Agent, AgentError};
pub use config::{AgentConfig, AgentFile, AgentFlags, Settings};
pub use node::{Node, NodeBuilder};
