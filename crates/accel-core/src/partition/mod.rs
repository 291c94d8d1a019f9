//! One ledger per GPU (issue 45): a GPU is a set of counters, and everything that can
//! be handed out of it draws from them, so a whole GPU, a MIG slice and a vGPU are
//! never given twice from the same hardware.
//!
//! ```text
//!  Geometry (the agent's report)      counters: memory slices 0..N by position,
//!    profiles + placements, engines ─▶          compute slices, SMs, copy engines,
//!    standing MIG instances, vGPU types         decoders, encoders, JPEG, OFA, memory
//!
//!  consumers                          what each takes
//!    Whole (a container)    ─┐
//!    Vfio (a VM, passthrough)┴──────▶ everything: excludes every other holder
//!    Mig { profile, at }   ─────────▶ memory slices at..at+size, its compute slices and
//!                                     engines (NVML's GPU instance profile)
//!    Vgpu { type, at }      ────────▶ time-sliced (MIG off): framebuffer, one type per
//!                                     GPU; MIG-backed (MIG on): its profile at `at`
//! ```
//!
//! [`Geometry::fits`] says whether a consumer can be added to what is held (and why
//! not, as a [`Conflict`]); [`Geometry::place`] picks where a MIG profile or vGPU type
//! goes (the placement that keeps the most of the larger profiles creatable);
//! [`Geometry::creatable`] counts, per profile and per vGPU type, how many more
//! instances can exist at once: what Placement offers as capacity
//! ([`Geometry::capacities`], [`members`] names the providers). Nothing here performs
//! I/O: the store keeps the holders and calls these in the transaction that hands a
//! partition out or takes it back.
//!
//! Rules the hardware imposes and the ledger keeps (reference `gpu-sharing-2026.md`
//! §1.2, §1.4): GPU instances never share a memory slice; a profile may start only at
//! its placements; the engines are a bag every instance draws from (one OFA engine:
//! one `+me` instance); MIG slices need MIG mode on, time-sliced vGPU types need it
//! off (NVML answers NOT_SUPPORTED for their placements with MIG on) and share a GPU
//! only with their own type; MIG instances that exist on the GPU but are held by no
//! one (made by an operator) occupy their slices until adopted by a holder of the
//! same profile and placement.

mod geometry;
mod ledger;
mod members;
mod pack;

pub mod fixtures;

pub use geometry::{BadGeometry, Engines, Geometry, Profile, Span, Standing, VgpuType};
pub use ledger::{Conflict, Consumer, Counters};
pub use members::{members, Capacity, Member, PARTITION_TRAIT};
pub use pack::{Creatable, Want};

#[cfg(test)]
mod tests;
