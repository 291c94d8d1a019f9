//! What each consumer takes from a GPU's counters, and whether it fits beside what is
//! held: the mode rules first (whole against anything, MIG mode, one time-sliced vGPU
//! type per GPU), then the counters (memory slices by position, compute slices,
//! engines, memory).

use super::geometry::{Engines, Geometry, Span};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Something that holds part (or all) of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Consumer {
    /// The whole GPU given to a container.
    Whole,
    /// The whole GPU given to a VM by passthrough (the VFIO form).
    Vfio,
    /// A MIG GPU instance of `profile` at `at`.
    Mig { profile: u32, at: Span },
    /// A vGPU of `type_id`; `at` is the MIG placement of a MIG-backed type.
    Vgpu { type_id: String, at: Option<Span> },
}

impl Consumer {
    fn whole(&self) -> bool {
        matches!(self, Consumer::Whole | Consumer::Vfio)
    }

    /// The MIG instance this consumer needs (profile, placement), if any: its own, or
    /// a MIG-backed vGPU's profile at its placement.
    pub fn instance(&self, g: &Geometry) -> Option<(u32, Span)> {
        match self {
            Consumer::Mig { profile, at } => Some((*profile, *at)),
            Consumer::Vgpu {
                type_id,
                at: Some(at),
            } => g
                .vgpu_type(type_id)
                .and_then(|t| t.mig_profile_id)
                .map(|p| (p, *at)),
            _ => None,
        }
    }

    /// A time-sliced vGPU's type.
    fn time_sliced(&self) -> Option<&str> {
        match self {
            Consumer::Vgpu { type_id, at: None } => Some(type_id),
            _ => None,
        }
    }
}

/// What a consumer takes, or what is taken: a point in the GPU's counter space.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Memory slices by position (bit `i` is slice `i`).
    pub slices: u64,
    pub compute_slices: u32,
    pub engines: Engines,
}

impl Counters {
    fn plus(self, o: Counters) -> Counters {
        Counters {
            slices: self.slices | o.slices,
            compute_slices: self.compute_slices + o.compute_slices,
            engines: self.engines.plus(o.engines),
        }
    }
}

/// Why a consumer does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    UnknownProfile(u32),
    UnknownVgpuType(String),
    /// The profile may not start there (or a MIG-backed vGPU was asked without one).
    UnknownPlacement {
        profile: u32,
        at: Option<Span>,
    },
    /// MIG slices need MIG mode on.
    MigOff,
    /// Time-sliced vGPU types need MIG mode off.
    MigOn,
    /// The whole GPU is held.
    WholeHeld,
    /// The whole GPU was asked while something holds part of it.
    PartlyHeld,
    /// A time-sliced vGPU holds the GPU; MIG slices wait for it to go.
    TimeSlicedHeld,
    /// MIG slices are held; a time-sliced vGPU waits for them to go.
    SlicesHeld,
    /// Another time-sliced vGPU type holds the GPU.
    OtherVgpuType(String),
    /// The type's instances are all held.
    MaxInstances,
    /// These memory slices are taken.
    Overlap {
        slices: u64,
    },
    /// A counter would be exceeded (its DRA name).
    Exhausted(&'static str),
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::UnknownProfile(p) => write!(f, "the GPU has no MIG profile {p}"),
            Conflict::UnknownVgpuType(t) => write!(f, "the GPU has no vGPU type {t}"),
            Conflict::UnknownPlacement { profile, at } => match at {
                Some(at) => write!(f, "profile {profile} cannot start at slice {}", at.start),
                None => write!(f, "profile {profile} needs a placement"),
            },
            Conflict::MigOff => f.write_str("MIG mode is off"),
            Conflict::MigOn => f.write_str("MIG mode is on"),
            Conflict::WholeHeld => f.write_str("the whole GPU is held"),
            Conflict::PartlyHeld => f.write_str("part of the GPU is held"),
            Conflict::TimeSlicedHeld => f.write_str("a time-sliced vGPU holds the GPU"),
            Conflict::SlicesHeld => f.write_str("MIG slices are held"),
            Conflict::OtherVgpuType(t) => write!(f, "vGPU type {t} holds the GPU"),
            Conflict::MaxInstances => f.write_str("every instance of the vGPU type is held"),
            Conflict::Overlap { slices } => write!(f, "memory slices {slices:#b} are taken"),
            Conflict::Exhausted(c) => write!(f, "no {c} left"),
        }
    }
}

impl std::error::Error for Conflict {}

impl Geometry {
    /// Everything the GPU has.
    pub fn whole_counters(&self) -> Counters {
        Counters {
            slices: self.all_slices(),
            compute_slices: self.compute_slices(),
            engines: self.totals,
        }
    }

    /// What `c` takes from the GPU.
    pub fn take(&self, c: &Consumer) -> Result<Counters, Conflict> {
        if c.whole() {
            return Ok(self.whole_counters());
        }
        if let Some((profile, at)) = c.instance(self) {
            let p = self
                .profile(profile)
                .ok_or(Conflict::UnknownProfile(profile))?;
            if !p.placements.contains(&at) {
                return Err(Conflict::UnknownPlacement {
                    profile,
                    at: Some(at),
                });
            }
            return Ok(Counters {
                slices: at.mask(),
                compute_slices: p.compute_slices,
                engines: p.engines,
            });
        }
        let Consumer::Vgpu { type_id, .. } = c else {
            unreachable!("whole and MIG consumers answered above")
        };
        let t = self
            .vgpu_type(type_id)
            .ok_or_else(|| Conflict::UnknownVgpuType(type_id.clone()))?;
        if let Some(profile) = t.mig_profile_id {
            return Err(Conflict::UnknownPlacement { profile, at: None });
        }
        Ok(Counters {
            engines: Engines {
                memory_mib: t.memory_mib,
                ..Engines::default()
            },
            ..Counters::default()
        })
    }

    /// MIG instances that exist but no holder has adopted (a holder adopts one by
    /// asking for its profile at its placement), except `asked`'s own.
    fn stray(&self, held: &[Consumer], asked: Option<(u32, Span)>) -> Counters {
        let adopted: Vec<(u32, Span)> = held.iter().filter_map(|h| h.instance(self)).collect();
        let mut sum = Counters::default();
        let mut skipped = false;
        for s in &self.standing {
            let key = (s.profile_id, s.at);
            if adopted.contains(&key) {
                continue;
            }
            if !skipped && asked == Some(key) {
                skipped = true;
                continue;
            }
            let take = self.profile(s.profile_id).map_or(
                Counters {
                    slices: s.at.mask(),
                    ..Counters::default()
                },
                |p| Counters {
                    slices: s.at.mask(),
                    compute_slices: p.compute_slices,
                    engines: p.engines,
                },
            );
            sum = sum.plus(take);
        }
        sum
    }

    /// What `held` takes in all (a holder the geometry no longer knows takes its
    /// memory slices only), with the instances nobody holds.
    pub fn used(&self, held: &[Consumer]) -> Counters {
        let mut sum = self.stray(held, None);
        for h in held {
            let take = match (self.take(h), h.instance(self)) {
                (Ok(t), _) => t,
                (Err(_), Some((_, at))) => Counters {
                    slices: at.mask(),
                    ..Counters::default()
                },
                (Err(_), None) => Counters::default(),
            };
            sum = sum.plus(take);
        }
        sum
    }

    /// Whether `c` can be added to `held`; why not otherwise.
    pub fn fits(&self, held: &[Consumer], c: &Consumer) -> Result<(), Conflict> {
        let take = self.take(c)?;
        if c.whole() {
            if !held.is_empty() {
                return Err(Conflict::PartlyHeld);
            }
        } else if held.iter().any(Consumer::whole) {
            return Err(Conflict::WholeHeld);
        }
        let instance = c.instance(self);
        if let Some(type_id) = c.time_sliced() {
            if self.mig_enabled {
                return Err(Conflict::MigOn);
            }
            if held.iter().any(|h| h.instance(self).is_some()) {
                return Err(Conflict::SlicesHeld);
            }
            if let Some(other) = held
                .iter()
                .filter_map(Consumer::time_sliced)
                .find(|t| *t != type_id)
            {
                return Err(Conflict::OtherVgpuType(other.to_owned()));
            }
        }
        if instance.is_some() {
            if !self.mig_enabled {
                return Err(Conflict::MigOff);
            }
            if held.iter().any(|h| h.time_sliced().is_some()) {
                return Err(Conflict::TimeSlicedHeld);
            }
        }
        if let Consumer::Vgpu { type_id, .. } = c {
            let max = self.vgpu_type(type_id).map_or(0, |t| t.max_instances);
            let n = held
                .iter()
                .filter(|h| matches!(h, Consumer::Vgpu { type_id: t, .. } if t == type_id))
                .count();
            if n >= max as usize {
                return Err(Conflict::MaxInstances);
            }
        }
        let mut used = self.stray(held, instance);
        for h in held {
            used = used.plus(self.take(h).unwrap_or(Counters {
                slices: h.instance(self).map_or(0, |(_, at)| at.mask()),
                ..Counters::default()
            }));
        }
        let overlap = used.slices & take.slices;
        if overlap != 0 {
            return Err(Conflict::Overlap { slices: overlap });
        }
        let after = used.plus(take);
        if after.compute_slices > self.compute_slices() && take.compute_slices > 0 {
            return Err(Conflict::Exhausted("compute-slices"));
        }
        match after.engines.exceeds(self.totals) {
            Some(counter) => Err(Conflict::Exhausted(counter)),
            None => Ok(()),
        }
    }
}
