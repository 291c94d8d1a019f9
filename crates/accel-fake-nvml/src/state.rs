//! The fake's GPUs and their MIG layouts, and the rules NVML enforces on them.
//!
//! A GPU instance (GI) is created at a placement: a start and a size in memory slices
//! (8 on Hopper). It is refused with `NVML_ERROR_INSUFFICIENT_RESOURCES` when its
//! slices overlap another GI's, when the profile already has its maximum number of
//! instances, or when the GIs together would need more SMs or engines than the whole
//! GPU has (the 7-slice profile's counts); with `NVML_ERROR_INVALID_ARGUMENT` when the
//! placement is not one of the profile's; with `NVML_ERROR_NOT_SUPPORTED` when MIG is
//! off. A compute instance (CI) takes compute slices of its GI; each CI is one MIG
//! device with its own `MIG-` UUID. A GI with CIs cannot be destroyed (`IN_USE`).
//!
//! Not hardware-exact, on purpose or for want of facts: GI ids are the lowest free id
//! from 1 and CI ids from 0 (the driver's numbering differs by profile), MIG device
//! UUIDs are derived from the boot id, the GPU's UUID, ids and a creation serial (new
//! ones after a reboot, as on hardware), and the
//! compute-instance profile ids are the `NVML_COMPUTE_INSTANCE_PROFILE_*` indices.

use crate::capture::Profile;
use crate::code::*;
use crate::config::{BusId, Config, Failure, Times};
pub use crate::model::{ci_slices, uuid_of, Handle, Model};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ci {
    pub id: u32,
    /// `NVML_COMPUTE_INSTANCE_PROFILE_*` index (also its id).
    pub profile: u32,
    pub slices: u32,
    pub start: u32,
    pub uuid: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gi {
    pub id: u32,
    pub profile_id: u32,
    pub start: u32,
    pub size: u32,
    /// Creation serial: a handle to a destroyed GI never reaches a new one.
    pub serial: u64,
    pub cis: Vec<Ci>,
}

#[derive(Debug, Clone)]
pub struct Gpu {
    pub bus: BusId,
    pub uuid: String,
    pub model: Model,
    pub mig: bool,
    pub lost: bool,
    pub gis: Vec<Gi>,
}

/// Everything the loaded library knows.
#[derive(Debug)]
pub struct Fake {
    pub gpus: Vec<Gpu>,
    pub failures: Vec<Failure>,
    pub state_file: Option<PathBuf>,
    pub boot_id: String,
    pub serial: u64,
}

type R<T> = Result<T, u32>;

impl Fake {
    /// The GPUs of `config`; their layout from the state file when it was written in
    /// this boot (else none: MIG layouts do not survive a reboot).
    pub fn load(config: &Config) -> Result<Fake, String> {
        let mut gpus = Vec::new();
        for g in &config.gpus {
            let model = Model::by_name(&g.model)?;
            if g.mig && !model.mig_capable() {
                return Err(format!(
                    "{} cannot have MIG on: model {} has none",
                    g.bus.sysfs(),
                    g.model
                ));
            }
            gpus.push(Gpu {
                uuid: g
                    .uuid
                    .clone()
                    .unwrap_or_else(|| format!("GPU-{}", uuid_of(&format!("gpu {}", g.bus)))),
                bus: g.bus,
                model,
                mig: g.mig,
                lost: g.lost,
                gis: Vec::new(),
            });
        }
        let boot_id = match &config.boot_id_file {
            Some(p) => std::fs::read_to_string(p)
                .map_err(|e| format!("boot_id_file {}: {e}", p.display()))?
                .trim()
                .to_owned(),
            None => String::new(),
        };
        let mut fake = Fake {
            gpus,
            failures: config.failures.clone(),
            state_file: config.state_file.clone(),
            boot_id,
            serial: 0,
        };
        if let Some(p) = &fake.state_file {
            match std::fs::read_to_string(p) {
                Ok(text) => fake.restore(&text)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("state_file {}: {e}", p.display())),
            }
            fake.save();
        }
        Ok(fake)
    }

    /// The layout written by [`Fake::save`], if it was written under this boot id.
    fn restore(&mut self, text: &str) -> Result<(), String> {
        let mut lines = text.lines();
        let boot = lines
            .next()
            .and_then(|l| l.strip_prefix("boot "))
            .unwrap_or("");
        if boot != self.boot_id {
            return Ok(());
        }
        for line in lines {
            let w: Vec<&str> = line.split_whitespace().collect();
            let bad = || format!("state file line {line:?}");
            let n = |i: usize| -> Result<u64, String> {
                w.get(i).and_then(|s| s.parse().ok()).ok_or_else(bad)
            };
            let gpu = |s: Option<&&str>| -> Result<usize, String> {
                let bus = s.and_then(|s| BusId::parse(s)).ok_or_else(bad)?;
                self.gpus.iter().position(|g| g.bus == bus).ok_or_else(bad)
            };
            match w.first().copied() {
                Some("serial") => self.serial = n(1)?,
                Some("gi") => {
                    let g = gpu(w.get(1))?;
                    let gi = Gi {
                        id: n(2)? as u32,
                        profile_id: n(3)? as u32,
                        start: n(4)? as u32,
                        size: n(5)? as u32,
                        serial: n(6)?,
                        cis: Vec::new(),
                    };
                    self.gpus[g].gis.push(gi);
                }
                Some("ci") => {
                    let g = gpu(w.get(1))?;
                    let gi_id = n(2)? as u32;
                    let ci = Ci {
                        id: n(3)? as u32,
                        profile: n(4)? as u32,
                        slices: n(5)? as u32,
                        start: n(6)? as u32,
                        uuid: w.get(7).ok_or_else(bad)?.to_string(),
                    };
                    let gi = self.gpus[g]
                        .gis
                        .iter_mut()
                        .find(|x| x.id == gi_id)
                        .ok_or_else(bad)?;
                    gi.cis.push(ci);
                }
                _ => return Err(bad()),
            }
        }
        Ok(())
    }

    /// Writes the layout to the state file, if there is one (best effort: a test that
    /// removed its directory does not make NVML calls fail).
    pub fn save(&self) {
        let Some(p) = &self.state_file else { return };
        let mut out = format!("boot {}\nserial {}\n", self.boot_id, self.serial);
        for g in &self.gpus {
            for gi in &g.gis {
                out += &format!(
                    "gi {} {} {} {} {} {}\n",
                    g.bus, gi.id, gi.profile_id, gi.start, gi.size, gi.serial
                );
                for ci in &gi.cis {
                    out += &format!(
                        "ci {} {} {} {} {} {} {}\n",
                        g.bus, gi.id, ci.id, ci.profile, ci.slices, ci.start, ci.uuid
                    );
                }
            }
        }
        let tmp = p.with_extension("tmp");
        if std::fs::write(&tmp, out).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }

    /// Failure injection and lost GPUs, checked at the start of every call: the first
    /// injected failure of `call` (for `gpu`, or any GPU) that still fires, else
    /// `GPU_IS_LOST` for a lost GPU.
    pub fn check(&mut self, call: &str, gpu: Option<usize>) -> R<()> {
        let bus = gpu.and_then(|g| self.gpus.get(g)).map(|g| g.bus);
        for f in &mut self.failures {
            if f.call != call || (f.gpu.is_some() && f.gpu != bus) {
                continue;
            }
            match &mut f.times {
                Times::Always => return Err(f.code),
                Times::Left(0) => continue,
                Times::Left(n) => {
                    *n -= 1;
                    return Err(f.code);
                }
            }
        }
        match gpu.and_then(|g| self.gpus.get(g)) {
            Some(g) if g.lost => Err(GPU_IS_LOST),
            _ => Ok(()),
        }
    }

    pub fn device(&self, index: usize) -> R<usize> {
        if index < self.gpus.len() {
            Ok(index)
        } else {
            Err(INVALID_ARGUMENT)
        }
    }

    pub fn device_by_bus(&self, bus: &str) -> R<usize> {
        let want = BusId::parse(bus).ok_or(INVALID_ARGUMENT)?;
        // NVML's bus ids carry no function (`...:00.0`): match the slot.
        self.gpus
            .iter()
            .position(|g| {
                (g.bus.domain, g.bus.bus, g.bus.device) == (want.domain, want.bus, want.device)
            })
            .ok_or(NOT_FOUND)
    }

    pub fn device_by_uuid(&self, uuid: &str) -> R<Handle> {
        for (i, g) in self.gpus.iter().enumerate() {
            if g.uuid == uuid {
                return Ok(Handle::Device(i));
            }
            for gi in &g.gis {
                for ci in &gi.cis {
                    if ci.uuid == uuid {
                        return Ok(Handle::Mig {
                            gpu: i,
                            gi: gi.id,
                            ci: ci.id,
                            serial: gi.serial,
                        });
                    }
                }
            }
        }
        Err(NOT_FOUND)
    }

    fn gpu(&self, g: usize) -> R<&Gpu> {
        self.gpus.get(g).ok_or(INVALID_ARGUMENT)
    }

    fn gi_index(&self, gpu: usize, gi: u32, serial: u64) -> R<usize> {
        self.gpu(gpu)?
            .gis
            .iter()
            .position(|x| x.id == gi && x.serial == serial)
            .ok_or(INVALID_ARGUMENT)
    }

    /// The GI a GI handle names (a destroyed one is an invalid argument).
    pub fn gi(&self, h: Handle) -> R<(usize, &Gi)> {
        match h {
            Handle::Gi { gpu, gi, serial } => {
                let i = self.gi_index(gpu, gi, serial)?;
                Ok((gpu, &self.gpus[gpu].gis[i]))
            }
            _ => Err(INVALID_ARGUMENT),
        }
    }

    /// The GI and CI a CI or MIG device handle names.
    pub fn ci(&self, h: Handle) -> R<(usize, &Gi, &Ci)> {
        match h {
            Handle::Ci {
                gpu,
                gi,
                ci,
                serial,
            }
            | Handle::Mig {
                gpu,
                gi,
                ci,
                serial,
            } => {
                let i = self.gi_index(gpu, gi, serial)?;
                let g = &self.gpus[gpu].gis[i];
                let c = g.cis.iter().find(|c| c.id == ci).ok_or(INVALID_ARGUMENT)?;
                Ok((gpu, g, c))
            }
            _ => Err(INVALID_ARGUMENT),
        }
    }

    /// A MIG-capable GPU's model, or `NOT_SUPPORTED`.
    fn mig_model(&self, gpu: usize) -> R<&Model> {
        let g = self.gpu(gpu)?;
        if g.model.mig_capable() {
            Ok(&g.model)
        } else {
            Err(NOT_SUPPORTED)
        }
    }

    /// `(current, pending)` MIG mode.
    pub fn mig_mode(&self, gpu: usize) -> R<(u32, u32)> {
        self.mig_model(gpu)?;
        let on = u32::from(self.gpus[gpu].mig);
        Ok((on, on))
    }

    fn mig_on(&self, gpu: usize) -> R<&Model> {
        let m = self.mig_model(gpu)?;
        if self.gpus[gpu].mig {
            Ok(m)
        } else {
            Err(NOT_SUPPORTED)
        }
    }

    /// The profile NVML enumerates at `index` (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub fn profile_by_index(&self, gpu: usize, index: u32) -> R<&Profile> {
        if index >= 0x12 {
            return Err(INVALID_ARGUMENT);
        }
        let m = self.mig_on(gpu)?;
        m.profiles
            .iter()
            .find(|p| p.index() == Some(index))
            .ok_or(NOT_SUPPORTED)
    }

    pub fn profile_by_id(&self, gpu: usize, id: u32) -> R<&Profile> {
        self.mig_on(gpu)?.profile(id).ok_or(NOT_SUPPORTED)
    }

    /// A profile's possible placements: known whether or not MIG is on.
    pub fn placements(&self, gpu: usize, profile_id: u32) -> R<Vec<(u32, u32)>> {
        let m = self.mig_model(gpu)?;
        Ok(m.profile(profile_id)
            .ok_or(NOT_SUPPORTED)?
            .placements
            .clone())
    }

    /// How many more instances of the profile could be created now, anywhere.
    pub fn remaining(&self, gpu: usize, profile_id: u32) -> R<u32> {
        let p = self.profile_by_id(gpu, profile_id)?.clone();
        Ok(p.placements
            .iter()
            .scan(self.gpus[gpu].gis.clone(), |gis, pl| {
                let ok = self.fits(gpu, gis, &p, *pl).is_ok();
                if ok {
                    gis.push(Gi {
                        id: 0,
                        profile_id: p.id,
                        start: pl.0,
                        size: pl.1,
                        serial: 0,
                        cis: vec![],
                    });
                }
                Some(ok)
            })
            .filter(|ok| *ok)
            .count() as u32)
    }

    /// Whether an instance of `p` at `at` fits beside `gis`.
    fn fits(&self, gpu: usize, gis: &[Gi], p: &Profile, at: (u32, u32)) -> R<()> {
        let m = &self.gpus[gpu].model;
        if !p.placements.contains(&at) {
            return Err(INVALID_ARGUMENT);
        }
        if gis.iter().filter(|g| g.profile_id == p.id).count() as u32 >= p.instances {
            return Err(INSUFFICIENT_RESOURCES);
        }
        let (s, e) = (at.0, at.0 + at.1);
        if gis.iter().any(|g| g.start < e && s < g.start + g.size) {
            return Err(INSUFFICIENT_RESOURCES);
        }
        let total = m.totals().ok_or(NOT_SUPPORTED)?;
        let used = |f: fn(&Profile) -> u32| -> u32 {
            gis.iter()
                .filter_map(|g| m.profile(g.profile_id))
                .map(f)
                .sum::<u32>()
                + f(p)
        };
        let over = [
            used(|x| x.multiprocessors) > total.multiprocessors,
            used(|x| x.copy_engines) > total.copy_engines,
            used(|x| x.decoders) > total.decoders,
            used(|x| x.encoders) > total.encoders,
            used(|x| x.jpeg) > total.jpeg,
            used(|x| x.ofa) > total.ofa,
            used(|x| x.slices) > total.slices,
        ];
        if over.iter().any(|o| *o) {
            return Err(INSUFFICIENT_RESOURCES);
        }
        Ok(())
    }

    pub fn create_gi(&mut self, gpu: usize, profile_id: u32, at: (u32, u32)) -> R<Handle> {
        self.mig_on(gpu)?;
        let p = self.gpus[gpu]
            .model
            .profile(profile_id)
            .ok_or(INVALID_ARGUMENT)?
            .clone();
        self.fits(gpu, &self.gpus[gpu].gis, &p, at)?;
        let id = (1..)
            .find(|i| !self.gpus[gpu].gis.iter().any(|g| g.id == *i))
            .unwrap_or(1);
        self.serial += 1;
        let serial = self.serial;
        self.gpus[gpu].gis.push(Gi {
            id,
            profile_id,
            start: at.0,
            size: at.1,
            serial,
            cis: Vec::new(),
        });
        self.save();
        Ok(Handle::Gi {
            gpu,
            gi: id,
            serial,
        })
    }

    pub fn destroy_gi(&mut self, h: Handle) -> R<()> {
        let (gpu, gi) = self.gi(h)?;
        if !gi.cis.is_empty() {
            return Err(IN_USE);
        }
        let id = gi.id;
        self.gpus[gpu].gis.retain(|g| g.id != id);
        self.save();
        Ok(())
    }

    /// The GIs of a profile, in id order.
    pub fn gpu_instances(&self, gpu: usize, profile_id: u32) -> R<Vec<Handle>> {
        self.profile_by_id(gpu, profile_id)
            .map_err(|_| INVALID_ARGUMENT)?;
        let mut gis: Vec<&Gi> = self.gpus[gpu]
            .gis
            .iter()
            .filter(|g| g.profile_id == profile_id)
            .collect();
        gis.sort_by_key(|g| g.id);
        Ok(gis
            .iter()
            .map(|g| Handle::Gi {
                gpu,
                gi: g.id,
                serial: g.serial,
            })
            .collect())
    }

    pub fn gi_by_id(&self, gpu: usize, id: u32) -> R<Handle> {
        self.mig_on(gpu)?;
        let g = self.gpus[gpu]
            .gis
            .iter()
            .find(|g| g.id == id)
            .ok_or(NOT_FOUND)?;
        Ok(Handle::Gi {
            gpu,
            gi: g.id,
            serial: g.serial,
        })
    }

    /// A compute-instance profile of a GI: `(slices, instance count, SMs)`.
    pub fn ci_profile(&self, h: Handle, index: u32, engines: u32) -> R<(u32, u32, u32, Profile)> {
        if index >= 9 || engines >= 1 {
            return Err(INVALID_ARGUMENT);
        }
        let (gpu, gi) = self.gi(h)?;
        let p = self.gpus[gpu]
            .model
            .profile(gi.profile_id)
            .ok_or(INVALID_ARGUMENT)?;
        let slices = ci_slices(index).ok_or(NOT_SUPPORTED)?;
        if slices > p.slices {
            return Err(NOT_SUPPORTED);
        }
        let sms = p.multiprocessors * slices / p.slices;
        Ok((slices, p.slices / slices, sms, p.clone()))
    }

    pub fn create_ci(&mut self, h: Handle, index: u32) -> R<Handle> {
        let (slices, count, _, _) = self.ci_profile(h, index, 0)?;
        let (gpu, gi) = self.gi(h)?;
        let used: u32 = gi.cis.iter().map(|c| c.slices).sum();
        let p = self.gpus[gpu]
            .model
            .profile(gi.profile_id)
            .ok_or(INVALID_ARGUMENT)?;
        let same = gi.cis.iter().filter(|c| c.profile == index).count() as u32;
        if used + slices > p.slices || same >= count {
            return Err(INSUFFICIENT_RESOURCES);
        }
        let id = (0..)
            .find(|i| !gi.cis.iter().any(|c| c.id == *i))
            .unwrap_or(0);
        let (gi_id, serial) = (gi.id, gi.serial);
        self.serial += 1;
        let uuid = format!(
            "MIG-{}",
            uuid_of(&format!(
                "{} {} {gi_id} {id} {}",
                self.boot_id, self.gpus[gpu].uuid, self.serial
            ))
        );
        let i = self.gi_index(gpu, gi_id, serial)?;
        self.gpus[gpu].gis[i].cis.push(Ci {
            id,
            profile: index,
            slices,
            start: used,
            uuid,
        });
        self.save();
        Ok(Handle::Ci {
            gpu,
            gi: gi_id,
            ci: id,
            serial,
        })
    }

    pub fn destroy_ci(&mut self, h: Handle) -> R<()> {
        let (gpu, gi, ci) = self.ci(h)?;
        let (gi_id, serial, ci_id) = (gi.id, gi.serial, ci.id);
        let i = self.gi_index(gpu, gi_id, serial)?;
        self.gpus[gpu].gis[i].cis.retain(|c| c.id != ci_id);
        self.save();
        Ok(())
    }

    pub fn compute_instances(&self, h: Handle, index: u32) -> R<Vec<Handle>> {
        self.ci_profile(h, index, 0)?;
        let (gpu, gi) = self.gi(h)?;
        Ok(gi
            .cis
            .iter()
            .filter(|c| c.profile == index)
            .map(|c| Handle::Ci {
                gpu,
                gi: gi.id,
                ci: c.id,
                serial: gi.serial,
            })
            .collect())
    }

    pub fn ci_by_id(&self, h: Handle, id: u32) -> R<Handle> {
        let (gpu, gi) = self.gi(h)?;
        let c = gi.cis.iter().find(|c| c.id == id).ok_or(NOT_FOUND)?;
        Ok(Handle::Ci {
            gpu,
            gi: gi.id,
            ci: c.id,
            serial: gi.serial,
        })
    }

    /// MIG devices (one per CI), by GI id then CI id.
    pub fn mig_devices(&self, gpu: usize) -> R<Vec<Handle>> {
        self.mig_on(gpu)?;
        let mut gis: Vec<&Gi> = self.gpus[gpu].gis.iter().collect();
        gis.sort_by_key(|g| g.id);
        Ok(gis
            .iter()
            .flat_map(|g| {
                let mut cis: Vec<&Ci> = g.cis.iter().collect();
                cis.sort_by_key(|c| c.id);
                cis.into_iter()
                    .map(|c| Handle::Mig {
                        gpu,
                        gi: g.id,
                        ci: c.id,
                        serial: g.serial,
                    })
                    .collect::<Vec<_>>()
            })
            .collect())
    }

    pub fn max_mig_devices(&self, gpu: usize) -> R<u32> {
        Ok(self.mig_model(gpu)?.slices())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(mig: bool) -> Fake {
        let c = Config::parse(&format!(
            "gpu bus=0000:3b:00.0 model=h100 mig={}\ngpu bus=0000:5e:00.0 model=h200 mig=on\n",
            if mig { "on" } else { "off" }
        ))
        .unwrap();
        Fake::load(&c).unwrap()
    }

    #[test]
    fn handles_round_trip_and_are_never_null() {
        for h in [
            Handle::Device(0),
            Handle::Gi {
                gpu: 3,
                gi: 14,
                serial: 99,
            },
            Handle::Ci {
                gpu: 7,
                gi: 1,
                ci: 6,
                serial: 1 << 30,
            },
            Handle::Mig {
                gpu: 1,
                gi: 2,
                ci: 0,
                serial: 5,
            },
        ] {
            assert_ne!(h.encode(), 0);
            assert_eq!(Handle::decode(h.encode()), Some(h));
        }
        assert_eq!(Handle::decode(0), None);
    }

    #[test]
    fn seven_1g_fill_the_gpu_and_the_eighth_is_refused() {
        let mut f = fake(true);
        for s in 0..7 {
            f.create_gi(0, 19, (s, 1)).unwrap();
        }
        for s in 0..7 {
            assert_eq!(f.create_gi(0, 19, (s, 1)), Err(INSUFFICIENT_RESOURCES));
        }
        assert_eq!(f.create_gi(0, 19, (7, 1)), Err(INVALID_ARGUMENT));
        assert_eq!(f.remaining(0, 19), Ok(0));
    }

    #[test]
    fn overlapping_placements_conflict_both_ways() {
        let mut f = fake(true);
        f.create_gi(0, 9, (4, 4)).unwrap();
        assert_eq!(f.create_gi(0, 19, (5, 1)), Err(INSUFFICIENT_RESOURCES));
        assert_eq!(f.remaining(0, 19), Ok(4));
        let mut f = fake(true);
        f.create_gi(0, 19, (5, 1)).unwrap();
        assert_eq!(f.create_gi(0, 9, (4, 4)), Err(INSUFFICIENT_RESOURCES));
        f.create_gi(0, 9, (0, 4)).unwrap();
        // +me takes the one OFA engine: the 7g (which needs it) could not come anyway,
        // and a second +me is over the profile's count.
        f.create_gi(0, 20, (4, 1)).unwrap();
        assert_eq!(f.create_gi(0, 20, (6, 1)), Err(INSUFFICIENT_RESOURCES));
    }

    #[test]
    fn mig_off_refuses_instances_but_shows_placements() {
        let mut f = fake(false);
        assert_eq!(f.create_gi(0, 19, (0, 1)), Err(NOT_SUPPORTED));
        assert_eq!(f.profile_by_index(0, 0).map(|p| p.id), Err(NOT_SUPPORTED));
        assert_eq!(f.placements(0, 9).unwrap(), [(0, 4), (4, 4)]);
        assert_eq!(f.mig_mode(0), Ok((0, 0)));
    }

    #[test]
    fn compute_instances_are_mig_devices_and_hold_their_gi() {
        let mut f = fake(true);
        let gi = f.create_gi(1, 9, (0, 4)).unwrap();
        let (slices, count, sms, _) = f.ci_profile(gi, 2, 0).unwrap();
        assert_eq!((slices, count, sms), (3, 1, 60));
        assert_eq!(f.ci_profile(gi, 3, 0).map(|x| x.0), Err(NOT_SUPPORTED));
        let ci = f.create_ci(gi, 2).unwrap();
        assert_eq!(f.create_ci(gi, 0), Err(INSUFFICIENT_RESOURCES));
        let migs = f.mig_devices(1).unwrap();
        assert_eq!(migs.len(), 1);
        let (_, _, c) = f.ci(migs[0]).unwrap();
        assert!(
            c.uuid.starts_with("MIG-") && c.uuid.len() == 40,
            "{}",
            c.uuid
        );
        assert_eq!(f.destroy_gi(gi), Err(IN_USE));
        f.destroy_ci(ci).unwrap();
        f.destroy_gi(gi).unwrap();
        assert_eq!(f.destroy_gi(gi), Err(INVALID_ARGUMENT));
        assert!(f.mig_devices(1).unwrap().is_empty());
    }

    #[test]
    fn the_layout_survives_a_reload_in_the_same_boot_only() {
        let dir = std::env::temp_dir().join(format!("accel-fake-nvml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (state, boot) = (dir.join("state"), dir.join("boot_id"));
        let _ = std::fs::remove_file(&state);
        std::fs::write(&boot, "one\n").unwrap();
        let c = Config::parse(&format!(
            "gpu bus=0000:3b:00.0 model=h100 mig=on\nstate_file {}\nboot_id_file {}\n",
            state.display(),
            boot.display()
        ))
        .unwrap();
        let mut f = Fake::load(&c).unwrap();
        let gi = f.create_gi(0, 14, (2, 2)).unwrap();
        f.create_ci(gi, 1).unwrap();
        let uuid = f.gpus[0].gis[0].cis[0].uuid.clone();
        let again = Fake::load(&c).unwrap();
        assert_eq!(again.gpus[0].gis, f.gpus[0].gis);
        assert_eq!(again.device_by_uuid(&uuid).map(|h| h.gpu()), Ok(0));
        std::fs::write(&boot, "two\n").unwrap();
        let rebooted = Fake::load(&c).unwrap();
        assert!(rebooted.gpus[0].gis.is_empty());
        assert!(rebooted.gpus[0].mig, "MIG mode survives a reboot");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn injected_failures_fire_as_often_as_told() {
        let c = Config::parse(
            "gpu bus=0000:3b:00.0 model=h100 mig=on\ngpu bus=0000:5e:00.0 model=h100 mig=on lost\n\
             fail call=x code=23 times=2 gpu=0000:3b:00.0\nfail call=y code=999 always\n",
        )
        .unwrap();
        let mut f = Fake::load(&c).unwrap();
        assert_eq!(f.check("x", Some(1)), Err(GPU_IS_LOST));
        assert_eq!(f.check("x", Some(0)), Err(23));
        assert_eq!(f.check("x", Some(0)), Err(23));
        assert_eq!(f.check("x", Some(0)), Ok(()));
        for _ in 0..3 {
            assert_eq!(f.check("y", None), Err(999));
        }
        assert_eq!(f.device_by_bus("00000000:5E:00.0"), Ok(1));
        assert_eq!(f.device_by_bus("0000:99:00.0"), Err(NOT_FOUND));
    }
}
