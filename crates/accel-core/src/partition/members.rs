//! The ledger as Placement sees it: one provider per way of taking the GPU (the GPU's
//! own provider for the whole and VFIO forms, a child per MIG profile and per vGPU
//! type), each with a capacity that is what the ledger can still give that way.
//!
//! Placement has no shared counters, so the ledger's effect is written as `reserved`:
//! a provider's free room (`total - reserved - used`) is exactly how many more
//! instances the ledger can create at once, recomputed for every sibling in the
//! transaction that changes a holder.

use super::geometry::Geometry;
use super::ledger::Consumer;
use super::pack::Want;

/// One provider of a GPU's family.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Member {
    /// The GPU's own provider: the whole GPU for a container or a VM.
    Whole,
    /// A MIG profile, by id.
    Mig(u32),
    /// A vGPU type, by id.
    Vgpu(String),
}

/// A provider's inventory as the ledger sizes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// The most instances that exist at once on an empty GPU with MIG in the mode the
    /// member needs (never 0 for a listed member).
    pub total: i64,
    /// Held now through this member.
    pub held: i64,
    /// More that can be created now.
    pub free: i64,
}

impl Capacity {
    /// The `reserved` that leaves Placement exactly `free` beyond what is held.
    pub fn reserved(self) -> i64 {
        (self.total - self.held - self.free).clamp(0, self.total)
    }
}

/// The members a geometry offers, the whole GPU first: every MIG profile with at
/// least one placement, every vGPU type with at least one instance.
pub fn members(g: &Geometry) -> Vec<Member> {
    let mut v = vec![Member::Whole];
    v.extend(
        g.profiles
            .iter()
            .filter(|p| !p.placements.is_empty())
            .map(|p| Member::Mig(p.id)),
    );
    v.extend(
        g.vgpu_types
            .iter()
            .filter(|t| t.max_instances > 0)
            .map(|t| Member::Vgpu(t.type_id.clone())),
    );
    v
}

impl Member {
    /// What a claim on this member asks the ledger for.
    pub fn want(&self) -> Want {
        match self {
            Member::Whole => Want::Whole,
            Member::Mig(p) => Want::Mig(*p),
            Member::Vgpu(t) => Want::Vgpu(t.clone()),
        }
    }

    /// Whether `c` holds the GPU through this member.
    pub fn holds(&self, c: &Consumer) -> bool {
        match (self, c) {
            (Member::Whole, Consumer::Whole | Consumer::Vfio) => true,
            (Member::Mig(p), Consumer::Mig { profile, .. }) => p == profile,
            (Member::Vgpu(t), Consumer::Vgpu { type_id, .. }) => t == type_id,
            _ => false,
        }
    }

    /// The member's stable key (`whole`, `mig:19`, `vgpu:nvidia-1122`): how the
    /// store names it.
    pub fn key(&self) -> String {
        match self {
            Member::Whole => "whole".into(),
            Member::Mig(p) => format!("mig:{p}"),
            Member::Vgpu(t) => format!("vgpu:{t}"),
        }
    }

    /// The member a [`Member::key`] names.
    pub fn from_key(key: &str) -> Option<Member> {
        match key.split_once(':') {
            None if key == "whole" => Some(Member::Whole),
            Some(("mig", p)) => p.parse().ok().map(Member::Mig),
            Some(("vgpu", t)) if !t.is_empty() => Some(Member::Vgpu(t.to_owned())),
            _ => None,
        }
    }

    /// Its provider's name under the GPU's (`<gpu>_mig_1g.10gb`, `<gpu>_vgpu_<type>`);
    /// the whole GPU's is the GPU's own.
    pub fn provider_name(&self, g: &Geometry, gpu: &str) -> String {
        match self {
            Member::Whole => gpu.to_owned(),
            Member::Mig(p) => match g.profile(*p) {
                Some(p) => format!("{gpu}_mig_{}", p.name),
                None => format!("{gpu}_mig_{p}"),
            },
            Member::Vgpu(t) => format!("{gpu}_vgpu_{t}"),
        }
    }

    /// Its resource class: `CUSTOM_MIG_1G_10GB` (as NVIDIA's mixed strategy names
    /// `nvidia.com/mig-1g.10gb`), `VGPU` for every vGPU type (as Nova and Cyborg),
    /// told apart by trait; `None` for the whole GPU, which keeps the reported class.
    pub fn resource_class(&self, g: &Geometry) -> Option<String> {
        match self {
            Member::Whole => None,
            Member::Mig(p) => Some(mig_class(g, *p)),
            Member::Vgpu(_) => Some("VGPU".into()),
        }
    }

    /// Traits naming what the member is, beside the GPU's own: the partition marker,
    /// the profile or type, and the memory one instance has (`CUSTOM_GPU_MEMORY_10GB`).
    pub fn traits(&self, g: &Geometry) -> Vec<String> {
        let mut t = vec![PARTITION_TRAIT.to_owned()];
        match self {
            Member::Whole => return Vec::new(),
            Member::Mig(p) => {
                t.push(mig_class(g, *p));
                if let Some(p) = g.profile(*p) {
                    t.push(memory_trait(&p.name, p.engines.memory_mib));
                }
            }
            Member::Vgpu(id) => {
                t.push(format!("CUSTOM_VGPU_TYPE_{}", part(id)));
                if let Some(v) = g.vgpu_type(id) {
                    t.push(format!("CUSTOM_VGPU_{}", part(&v.name)));
                    t.push(memory_trait("", v.memory_mib));
                    if let Some(p) = v.mig_profile_id {
                        t.push(mig_class(g, p));
                    }
                }
            }
        }
        t
    }
}

/// Every partition provider carries it.
pub const PARTITION_TRAIT: &str = "CUSTOM_GPU_PARTITION";

fn mig_class(g: &Geometry, p: u32) -> String {
    match g.profile(p) {
        Some(p) => format!("CUSTOM_MIG_{}", part(&p.name)),
        None => format!("CUSTOM_MIG_PROFILE_{p}"),
    }
}

/// `CUSTOM_GPU_MEMORY_<N>GB`: the memory part of a MIG profile's name (`10gb`), else
/// the memory rounded to whole GiB.
fn memory_trait(name: &str, mib: i64) -> String {
    let named = name
        .split(['.', '+'])
        .find(|s| s.ends_with("gb") && s[..s.len() - 2].bytes().all(|b| b.is_ascii_digit()));
    match named {
        Some(gb) if gb.len() > 2 => format!("CUSTOM_GPU_MEMORY_{}", gb.to_ascii_uppercase()),
        _ => format!("CUSTOM_GPU_MEMORY_{}GB", (mib + 512) / 1024),
    }
}

/// Upper case, anything but `A-Z0-9` as `_` (trait and class names).
fn part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

impl Geometry {
    /// The capacity of `m` beside `held`.
    pub fn capacity(&self, held: &[Consumer], m: &Member) -> Capacity {
        let held_n = held.iter().filter(|c| m.holds(c)).count() as i64;
        let free = self.count(held, &m.want()) as i64;
        let total = match m {
            Member::Whole => 1,
            Member::Mig(p) => self.empty(true).count(&[], &Want::Mig(*p)) as i64,
            Member::Vgpu(t) => {
                let mig = self
                    .vgpu_type(t)
                    .is_some_and(|v| v.mig_profile_id.is_some());
                self.empty(mig).count(&[], &Want::Vgpu(t.clone())) as i64
            }
        };
        Capacity {
            total: total.max(1),
            held: held_n,
            free,
        }
    }

    /// Every member's capacity beside `held`.
    pub fn capacities(&self, held: &[Consumer]) -> Vec<(Member, Capacity)> {
        members(self)
            .into_iter()
            .map(|m| {
                let c = self.capacity(held, &m);
                (m, c)
            })
            .collect()
    }

    /// The same GPU with no instance on it, MIG mode `mig`.
    fn empty(&self, mig: bool) -> Geometry {
        Geometry {
            mig_enabled: mig,
            standing: Vec::new(),
            ..self.clone()
        }
    }
}
