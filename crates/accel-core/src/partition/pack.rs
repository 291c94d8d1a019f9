//! How many more of each partition fit at once, and where the next one goes.
//!
//! A profile has at most a handful of placements (8 on H100), so the largest set of
//! them that fits beside what is held is found by trying every subset (at most 256):
//! exact where counting free placements is not (one OFA engine allows one `+me`
//! instance of seven placements; a held `1g` at slice 6 costs `1g.20gb` its last one).

use super::geometry::{Geometry, Span};
use super::ledger::{Conflict, Consumer};
use std::collections::BTreeMap;

/// What a claim asks for; the ledger picks the placement.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Want {
    Whole,
    Vfio,
    Mig(u32),
    Vgpu(String),
}

/// How many more of each partition can exist at once beside what is held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Creatable {
    /// Whether the whole GPU (container or VFIO form) can be given.
    pub whole: bool,
    /// By profile id.
    pub mig: BTreeMap<u32, u32>,
    /// By vGPU type id.
    pub vgpu: BTreeMap<String, u32>,
}

/// Above this many placements a profile is counted greedily (no GPU known has one).
const EXACT_UP_TO: usize = 12;

impl Geometry {
    /// Every consumer that would satisfy `want`, in the hardware's placement order.
    pub fn options(&self, want: &Want) -> Vec<Consumer> {
        let at = |profile: u32| -> Vec<Span> {
            self.profile(profile)
                .map(|p| p.placements.clone())
                .unwrap_or_default()
        };
        match want {
            Want::Whole => vec![Consumer::Whole],
            Want::Vfio => vec![Consumer::Vfio],
            Want::Mig(p) => at(*p)
                .into_iter()
                .map(|at| Consumer::Mig { profile: *p, at })
                .collect(),
            Want::Vgpu(t) => match self.vgpu_type(t).and_then(|v| v.mig_profile_id) {
                Some(p) => at(p)
                    .into_iter()
                    .map(|at| Consumer::Vgpu {
                        type_id: t.clone(),
                        at: Some(at),
                    })
                    .collect(),
                None => vec![Consumer::Vgpu {
                    type_id: t.clone(),
                    at: None,
                }],
            },
        }
    }

    /// How many more of `want` fit at once beside `held`.
    pub fn count(&self, held: &[Consumer], want: &Want) -> u32 {
        let options = self.options(want);
        let mut sim = held.to_vec();
        // A time-sliced vGPU has one option, taken again and again.
        if options.len() == 1 && matches!(want, Want::Vgpu(_)) {
            let mut n = 0;
            while self.fits(&sim, &options[0]).is_ok() {
                sim.push(options[0].clone());
                n += 1;
            }
            return n;
        }
        if options.len() > EXACT_UP_TO {
            let mut n = 0;
            for o in &options {
                if self.fits(&sim, o).is_ok() {
                    sim.push(o.clone());
                    n += 1;
                }
            }
            return n;
        }
        let fitting: Vec<Consumer> = options
            .into_iter()
            .filter(|o| self.fits(held, o).is_ok())
            .collect();
        most(self, &mut sim, &fitting)
    }

    /// [`Geometry::count`] of every partition the GPU offers, and the whole GPU.
    pub fn creatable(&self, held: &[Consumer]) -> Creatable {
        Creatable {
            whole: self.fits(held, &Consumer::Whole).is_ok(),
            mig: self
                .profiles
                .iter()
                .map(|p| (p.id, self.count(held, &Want::Mig(p.id))))
                .collect(),
            vgpu: self
                .vgpu_types
                .iter()
                .map(|t| {
                    let n = self.count(held, &Want::Vgpu(t.type_id.clone()));
                    (t.type_id.clone(), n)
                })
                .collect(),
        }
    }

    /// Where `want` goes beside `held`: an existing MIG instance nobody holds when
    /// one is there, else the option that leaves the larger profiles the most
    /// instances (largest profile first), the later start on a tie (small instances
    /// fill from the top, as the hardware's own order leaves the low slices to the
    /// profiles that must start at 0). Why not, when nothing fits.
    pub fn place(&self, held: &[Consumer], want: &Want) -> Result<Consumer, Conflict> {
        let options = self.options(want);
        let mut first_refusal = None;
        let mut best: Option<(Score, Consumer)> = None;
        for o in options {
            if let Err(why) = self.fits(held, &o) {
                first_refusal.get_or_insert(why);
                continue;
            }
            let score = self.score(held, &o);
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, o));
            }
        }
        match (best, first_refusal, want) {
            (Some((_, c)), _, _) => Ok(c),
            (None, Some(why), _) => Err(why),
            (None, None, Want::Mig(p)) => {
                Err(self.profile(*p).map_or(Conflict::UnknownProfile(*p), |_| {
                    Conflict::UnknownPlacement {
                        profile: *p,
                        at: None,
                    }
                }))
            }
            (None, None, Want::Vgpu(t)) => Err(Conflict::UnknownVgpuType(t.clone())),
            (None, None, _) => Err(Conflict::PartlyHeld),
        }
    }

    fn score(&self, held: &[Consumer], o: &Consumer) -> Score {
        let adopts = match o {
            Consumer::Mig { profile, at } => self
                .standing
                .iter()
                .any(|s| s.profile_id == *profile && s.at == *at),
            _ => false,
        };
        let mut after = held.to_vec();
        after.push(o.clone());
        let mut order: Vec<&super::Profile> = self.profiles.iter().collect();
        order.sort_by_key(|p| {
            (
                std::cmp::Reverse(p.compute_slices),
                std::cmp::Reverse(p.engines.memory_mib),
                p.id,
            )
        });
        let left = order
            .iter()
            .map(|p| self.count(&after, &Want::Mig(p.id)))
            .collect();
        let start = match o {
            Consumer::Mig { at, .. } | Consumer::Vgpu { at: Some(at), .. } => at.start,
            _ => 0,
        };
        (adopts, left, start)
    }
}

/// (adopts an existing instance, creatable per profile largest first, start).
type Score = (bool, Vec<u32>, u32);

/// The largest subset of `options` that fits together beside `sim`.
fn most(g: &Geometry, sim: &mut Vec<Consumer>, options: &[Consumer]) -> u32 {
    let Some((first, rest)) = options.split_first() else {
        return 0;
    };
    if g.fits(sim, first).is_err() {
        return most(g, sim, rest);
    }
    sim.push(first.clone());
    let with = 1 + most(g, sim, rest);
    sim.pop();
    if with as usize == options.len() {
        return with;
    }
    with.max(most(g, sim, rest))
}

impl Geometry {
    /// Places every one of `wants` beside `held`, as one claim asks them: the whole
    /// GPU first, then the larger profiles (compute slices, then memory), so that what
    /// fits together is found whatever order the request named them in (ties in the
    /// order of [`Want`]). Answers the holders in the order of `wants`.
    pub fn place_all(&self, held: &[Consumer], wants: &[Want]) -> Result<Vec<Consumer>, Conflict> {
        let size = |w: &Want| -> (u32, i64) {
            let profile = match w {
                Want::Whole | Want::Vfio => return (u32::MAX, i64::MAX),
                Want::Mig(p) => Some(*p),
                Want::Vgpu(t) => self.vgpu_type(t).and_then(|v| v.mig_profile_id),
            };
            profile
                .and_then(|p| self.profile(p))
                .map_or((0, 0), |p| (p.compute_slices, p.engines.memory_mib))
        };
        let mut order: Vec<usize> = (0..wants.len()).collect();
        // Ties in a fixed order, so that the same wants place the same way however a
        // request (or the candidate answer checking it) lists them.
        order.sort_by(|&i, &j| {
            size(&wants[j])
                .cmp(&size(&wants[i]))
                .then_with(|| wants[i].cmp(&wants[j]))
        });
        let mut sim = held.to_vec();
        let mut placed: Vec<Option<Consumer>> = vec![None; wants.len()];
        for i in order {
            let c = self.place(&sim, &wants[i])?;
            sim.push(c.clone());
            placed[i] = Some(c);
        }
        Ok(placed.into_iter().flatten().collect())
    }
}
