//! [`Partitions`]: MIG instances and mdevs made when the server hands a partition out,
//! unmade when it is given back, and accounted for after the agent starts (a node
//! reboot loses every MIG layout and every mdev that is not persistent).
//!
//! One change at a time (a lock around each operation and its checkpoint write); each
//! create, destroy and re-create is a log line with its cause when it fails and a count
//! in `accel_agent_partition_operations_total{kind, action, outcome}`.

use super::checkpoint::{Checkpoint, HeldMdev, HeldMig};
use super::vgpu;
use super::{boot_id, Mig, MigError, PartitionError, PartitionSettings};
use crate::cleaning::{self, Method, Rule};
use crate::metrics::Metrics;
use crate::pci::PciAddress;
use accel_api::partitions::{MigInstance, MigPlacement};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A partition the server says is held (what [`Partitions::after_boot`] makes exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Mig {
        gpu: PciAddress,
        profile_id: u32,
        placement: MigPlacement,
        holder: String,
    },
    Mdev {
        parent: PciAddress,
        type_id: String,
        uuid: String,
        holder: String,
    },
}

/// A held MIG partition made again: new GPU and compute instance ids and a new UUID,
/// which its consumer must be given (CDI device, attach handle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recreated {
    pub gpu: PciAddress,
    pub holder: String,
    /// The UUID it had before, when this agent made it before.
    pub old_uuid: Option<String>,
    pub instance: MigInstance,
}

/// A held partition that could not be made again, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub held: Held,
    pub reason: String,
}

/// What [`Partitions::after_boot`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The boot id differs from the checkpoint's: the node rebooted.
    pub rebooted: bool,
    /// Held MIG partitions that still exist, UUID unchanged.
    pub kept: Vec<HeldMig>,
    pub recreated: Vec<Recreated>,
    pub lost: Vec<Lost>,
    /// MIG devices this agent made that no one holds any more: destroyed.
    pub released: Vec<HeldMig>,
    pub mdevs_kept: Vec<HeldMdev>,
    /// Held mdevs made again (same UUID: the agent chooses mdev UUIDs).
    pub mdevs_recreated: Vec<HeldMdev>,
    pub mdevs_released: Vec<HeldMdev>,
}

/// What became of an mdev request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MdevOutcome {
    Created,
    /// `create_mdev_at_bind` is off: the consumer creates it.
    LeftToConsumer,
    Removed,
    /// It was not there any more (the checkpoint forgets it).
    AlreadyGone,
}

/// Makes, unmakes and accounts for the node's partitions.
pub struct Partitions {
    mig: Result<Arc<dyn Mig>, MigError>,
    settings: PartitionSettings,
    sysfs_root: PathBuf,
    metrics: Option<Arc<Metrics>>,
    lock: Mutex<()>,
}

impl Partitions {
    /// Partitions made through `mig`.
    pub fn new(
        mig: Arc<dyn Mig>,
        sysfs_root: impl Into<PathBuf>,
        settings: PartitionSettings,
    ) -> Partitions {
        Partitions {
            mig: Ok(mig),
            settings,
            sysfs_root: sysfs_root.into(),
            metrics: None,
            lock: Mutex::new(()),
        }
    }

    /// Partitions made through NVML loaded from `settings.nvml_library`; without it
    /// every MIG operation fails with the reason (mdevs still work).
    pub fn open(sysfs_root: impl Into<PathBuf>, settings: PartitionSettings) -> Partitions {
        let path = settings.nvml_library.display().to_string();
        let path = if path.is_empty() {
            crate::nvml::DEFAULT_LIBRARY.to_owned()
        } else {
            path
        };
        let mig = crate::nvml::Nvml::open_at(&path).map(|n| Arc::new(n) as Arc<dyn Mig>);
        if let Err(e) = &mig {
            tracing::info!(library = %path, "MIG partitioning unavailable: {e}");
        }
        Partitions {
            mig,
            settings,
            sysfs_root: sysfs_root.into(),
            metrics: None,
            lock: Mutex::new(()),
        }
    }

    /// Counts operations in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Partitions {
        self.metrics = Some(metrics);
        self
    }

    pub fn settings(&self) -> &PartitionSettings {
        &self.settings
    }

    fn mig(&self) -> Result<&dyn Mig, PartitionError> {
        self.mig
            .as_deref()
            .map_err(|e| PartitionError::Mig(e.clone()))
    }

    fn count(&self, kind: &str, action: &str, ok: bool) {
        if let Some(m) = &self.metrics {
            m.partition(kind, action, ok, 1);
        }
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The checkpoint as it is on disk.
    pub fn checkpoint(&self) -> Result<Checkpoint, PartitionError> {
        Checkpoint::load(&self.settings.state_dir)
    }

    /// The checkpoint of this boot: one written in another boot lists partitions that
    /// are gone ([`Partitions::after_boot`] accounts for them; a change made before it
    /// ran starts from this boot's empty list).
    fn current(&self) -> Result<Checkpoint, PartitionError> {
        let mut cp = Checkpoint::load(&self.settings.state_dir)?;
        let boot = boot_id(&self.settings.boot_id_file);
        if cp.boot_id != boot {
            if !cp.mig.is_empty() || !cp.mdevs.is_empty() {
                tracing::warn!(previous_boot = %cp.boot_id, boot = %boot,
                    "the partition checkpoint is from another boot and after_boot has not run; its partitions are forgotten");
            }
            cp = Checkpoint {
                boot_id: boot,
                ..Checkpoint::default()
            };
        }
        Ok(cp)
    }

    fn save(&self, cp: &Checkpoint) -> Result<(), PartitionError> {
        cp.save(&self.settings.state_dir)
    }

    /// Creates a MIG partition of `profile_id` at `placement` on `gpu` for `holder`
    /// (a GPU instance and one compute instance spanning it) and answers the MIG device.
    /// Asked again for the same slot and holder, it answers the device that exists.
    pub fn create(
        &self,
        gpu: PciAddress,
        profile_id: u32,
        placement: MigPlacement,
        holder: &str,
    ) -> Result<MigInstance, PartitionError> {
        let _g = self.guard();
        let mut cp = self.current()?;
        let mig = self.mig()?;
        let slot = |m: &HeldMig| {
            m.gpu == gpu.to_string()
                && m.instance.profile_id == profile_id
                && m.instance.placement == placement
        };
        if let Some(prev) = cp.mig.iter().find(|m| slot(m) && m.holder == holder) {
            let live = mig.instances(gpu).map_err(PartitionError::Mig)?;
            if live.iter().any(|i| i.uuid == prev.instance.uuid) {
                tracing::info!(%gpu, profile_id, start = placement.start, holder, uuid = %prev.instance.uuid,
                    "MIG instance already created for this holder");
                return Ok(prev.instance.clone());
            }
            cp.mig.retain(|m| !slot(m));
        }
        let made = mig.create(gpu, profile_id, placement);
        self.count("mig", "create", made.is_ok());
        let instance = made.map_err(|source| {
            tracing::warn!(%gpu, profile_id, start = placement.start, size = placement.size, holder,
                cause = %source, code = source.cause(), "creating a MIG instance failed");
            PartitionError::Create {
                gpu,
                profile_id,
                placement,
                source,
            }
        })?;
        tracing::info!(%gpu, profile_id, start = placement.start, size = placement.size, holder,
            uuid = %instance.uuid, gpu_instance = instance.gpu_instance_id,
            compute_instance = instance.compute_instance_id, "MIG instance created");
        cp.mig.push(HeldMig {
            gpu: gpu.to_string(),
            holder: holder.to_owned(),
            instance: instance.clone(),
        });
        self.save(&cp)?;
        Ok(instance)
    }

    /// Destroys the MIG device `uuid` this agent created. One that is already gone is
    /// forgotten; one the agent did not create is refused ([`PartitionError::NotOurs`]).
    pub fn destroy(&self, uuid: &str) -> Result<HeldMig, PartitionError> {
        let _g = self.guard();
        let mut cp = self.current()?;
        let Some(held) = cp.mig.iter().find(|m| m.instance.uuid == uuid).cloned() else {
            tracing::warn!(
                uuid,
                "not destroying a MIG device this agent did not create"
            );
            return Err(PartitionError::NotOurs(uuid.to_owned()));
        };
        let gpu: PciAddress = held
            .gpu
            .parse()
            .map_err(|e: String| PartitionError::Checkpoint {
                path: Checkpoint::path(&self.settings.state_dir)
                    .display()
                    .to_string(),
                cause: e,
            })?;
        let i = &held.instance;
        match self
            .mig()?
            .destroy(gpu, i.gpu_instance_id, i.compute_instance_id)
        {
            Ok(()) => {
                self.count("mig", "destroy", true);
                tracing::info!(%gpu, uuid, holder = %held.holder, profile_id = i.profile_id,
                    start = i.placement.start, "MIG instance destroyed");
            }
            Err(MigError::NoInstance { .. }) => {
                tracing::info!(%gpu, uuid, holder = %held.holder, "MIG instance was already gone");
            }
            Err(source) => {
                self.count("mig", "destroy", false);
                tracing::warn!(%gpu, uuid, holder = %held.holder, cause = %source,
                    code = source.cause(), "destroying a MIG instance failed");
                return Err(PartitionError::Destroy {
                    gpu,
                    uuid: uuid.to_owned(),
                    source,
                });
            }
        }
        cp.mig.retain(|m| m.instance.uuid != uuid);
        self.save(&cp)?;
        Ok(held)
    }

    /// Gives a MIG partition back: [`Partitions::destroy`], then the GPU's cleaning
    /// rule (`rule`, the `[[cleaning]]` rule matching the GPU) with `{address}` the
    /// GPU, `{device}` its device node and `{uuid}` the destroyed MIG device. A
    /// `pci-reset` resets the whole GPU, so it is refused while other MIG devices
    /// live on it; `fpga-default` does not apply to a GPU.
    pub async fn release(
        &self,
        uuid: &str,
        rule: Option<&Rule>,
    ) -> Result<HeldMig, PartitionError> {
        let held = self.destroy(uuid)?;
        let Some(rule) = rule else {
            return Ok(held);
        };
        let started = Instant::now();
        let fail = |cause: String| PartitionError::Cleaning {
            gpu: held.gpu.parse().unwrap_or(PciAddress {
                domain: 0,
                bus: 0,
                slot: 0,
                function: 0,
            }),
            uuid: uuid.to_owned(),
            cause,
        };
        let result = match &rule.method {
            Method::FpgaDefault(_) => Err(fail("fpga-default does not clean a GPU".into())),
            Method::PciReset => {
                let gpu = held.gpu.parse().map_err(fail)?;
                let others = self.mig()?.instances(gpu).map_err(PartitionError::Mig)?;
                if others.is_empty() {
                    Ok(rule.clone())
                } else {
                    Err(fail(format!(
                        "pci-reset would reset the whole GPU under {} other MIG device(s); give MIG GPUs a command rule",
                        others.len()
                    )))
                }
            }
            Method::Command(argv) => Ok(Rule {
                method: Method::Command(argv.iter().map(|a| a.replace("{uuid}", uuid)).collect()),
                verify: rule
                    .verify
                    .iter()
                    .map(|a| a.replace("{uuid}", uuid))
                    .collect(),
                ..rule.clone()
            }),
        };
        let result = match result {
            Ok(rule) => {
                let device = cleaning::device_node(&self.sysfs_root, &held.gpu);
                let deadline = started + rule.timeout;
                cleaning::run_rule(
                    &rule,
                    &self.sysfs_root,
                    &held.gpu,
                    device.as_deref(),
                    deadline,
                )
                .await
                .map_err(|e| fail(e.to_string()))
            }
            Err(e) => Err(e),
        };
        if let Some(m) = &self.metrics {
            m.cleaning(result.is_ok(), started.elapsed());
        }
        match result {
            Ok(()) => {
                tracing::info!(gpu = %held.gpu, uuid, method = rule.method.name(), "GPU cleaned after a MIG release");
                Ok(held)
            }
            Err(e) => {
                tracing::warn!(gpu = %held.gpu, uuid, method = rule.method.name(), cause = %e, "cleaning after a MIG release failed");
                Err(e)
            }
        }
    }

    /// Accounts for the partitions after the agent starts, against `held` (what the
    /// server says is held on this node): each held MIG partition that exists is kept,
    /// one that does not (a reboot, a crash half-way) is created again at its placement
    /// (a new UUID), one that cannot be is lost with the reason; MIG devices and mdevs
    /// this agent made that no one holds are destroyed. Partitions the agent did not
    /// make are never touched.
    pub fn after_boot(&self, held: &[Held]) -> Result<Recovery, PartitionError> {
        let _g = self.guard();
        let before = Checkpoint::load(&self.settings.state_dir)?;
        let boot = boot_id(&self.settings.boot_id_file);
        let rebooted = !before.boot_id.is_empty() && before.boot_id != boot;
        let mut out = Recovery {
            rebooted,
            ..Recovery::default()
        };
        if rebooted {
            tracing::info!(previous_boot = %before.boot_id, boot = %boot, mig = before.mig.len(),
                mdevs = before.mdevs.len(), "the node rebooted: re-creating the partitions the server says are held");
        }
        // Ours from this boot (after a reboot, none exist any more).
        let ours: Vec<HeldMig> = if rebooted {
            Vec::new()
        } else {
            before.mig.clone()
        };
        let mut next = Checkpoint {
            boot_id: boot,
            ..Checkpoint::default()
        };
        let mut live: BTreeMap<PciAddress, Result<Vec<MigInstance>, String>> = BTreeMap::new();
        let mut gpus: Vec<PciAddress> = ours.iter().filter_map(|m| m.gpu.parse().ok()).collect();
        gpus.extend(held.iter().filter_map(|h| match h {
            Held::Mig { gpu, .. } => Some(*gpu),
            Held::Mdev { .. } => None,
        }));
        for gpu in gpus {
            live.entry(gpu).or_insert_with(|| {
                self.mig()
                    .and_then(|m| m.instances(gpu).map_err(PartitionError::Mig))
                    .map_err(|e| e.to_string())
            });
        }
        let mut used: Vec<String> = Vec::new();
        for h in held {
            let Held::Mig {
                gpu,
                profile_id,
                placement,
                holder,
            } = h
            else {
                continue;
            };
            let prev = before.mig.iter().find(|m| {
                m.gpu == gpu.to_string()
                    && m.instance.profile_id == *profile_id
                    && m.instance.placement == *placement
            });
            let lost = |reason: String| Lost {
                held: h.clone(),
                reason,
            };
            let existing = match live.get(gpu) {
                Some(Ok(list)) => list
                    .iter()
                    .find(|i| i.profile_id == *profile_id && i.placement == *placement)
                    .cloned(),
                Some(Err(e)) => {
                    tracing::warn!(%gpu, profile_id, start = placement.start, holder, cause = %e,
                        "a held MIG partition is lost: its GPU cannot be asked");
                    self.count("mig", "recreate", false);
                    out.lost.push(lost(e.clone()));
                    continue;
                }
                None => None,
            };
            let record = |instance: MigInstance| HeldMig {
                gpu: gpu.to_string(),
                holder: holder.clone(),
                instance,
            };
            if let Some(i) = existing {
                match ours.iter().find(|m| m.instance.uuid == i.uuid) {
                    Some(m) if m.holder == *holder => {
                        used.push(i.uuid.clone());
                        out.kept.push(record(i.clone()));
                        next.mig.push(record(i));
                        continue;
                    }
                    Some(m) => {
                        // Ours, made for someone else: a release the agent missed.
                        // The new holder gets a fresh one, not the old one's memory.
                        let gone = self.mig().and_then(|x| {
                            x.destroy(*gpu, i.gpu_instance_id, i.compute_instance_id)
                                .map_err(PartitionError::Mig)
                        });
                        self.count("mig", "destroy", gone.is_ok());
                        if let Err(e) = gone {
                            tracing::warn!(%gpu, uuid = %i.uuid, holder = %m.holder, cause = %e,
                                "a MIG instance held by another holder before cannot be destroyed");
                            used.push(i.uuid.clone());
                            next.mig.push(m.clone());
                            out.lost.push(lost(e.to_string()));
                            continue;
                        }
                        tracing::info!(%gpu, uuid = %i.uuid, previous_holder = %m.holder, holder,
                            "a MIG instance made for another holder was destroyed");
                        if let Some(Ok(list)) = live.get_mut(gpu) {
                            list.retain(|x| x.uuid != i.uuid);
                        }
                        out.released.push(m.clone());
                    }
                    None => {
                        // There, but not in the checkpoint (a crash before it was
                        // written): it serves the slot as it is.
                        tracing::info!(%gpu, profile_id, start = placement.start, holder, uuid = %i.uuid,
                            "a held MIG partition exists and is adopted");
                        used.push(i.uuid.clone());
                        out.recreated.push(Recreated {
                            gpu: *gpu,
                            holder: holder.clone(),
                            old_uuid: prev.map(|p| p.instance.uuid.clone()),
                            instance: i.clone(),
                        });
                        next.mig.push(record(i));
                        continue;
                    }
                }
            }
            let made = self.mig().and_then(|m| {
                m.create(*gpu, *profile_id, *placement)
                    .map_err(|source| PartitionError::Create {
                        gpu: *gpu,
                        profile_id: *profile_id,
                        placement: *placement,
                        source,
                    })
            });
            self.count("mig", "recreate", made.is_ok());
            match made {
                Ok(i) => {
                    tracing::info!(%gpu, profile_id, start = placement.start, holder, uuid = %i.uuid,
                        old_uuid = prev.map_or("", |p| p.instance.uuid.as_str()),
                        "a held MIG partition was re-created");
                    if let Some(Ok(list)) = live.get_mut(gpu) {
                        list.push(i.clone());
                    }
                    used.push(i.uuid.clone());
                    out.recreated.push(Recreated {
                        gpu: *gpu,
                        holder: holder.clone(),
                        old_uuid: prev.map(|p| p.instance.uuid.clone()),
                        instance: i.clone(),
                    });
                    next.mig.push(record(i));
                }
                Err(e) => {
                    tracing::warn!(%gpu, profile_id, start = placement.start, holder, cause = %e,
                        "a held MIG partition is lost: it cannot be re-created");
                    out.lost.push(lost(e.to_string()));
                }
            }
        }
        // Ours, still there, held by no one: a release the agent missed.
        for m in ours.iter().filter(|m| !used.contains(&m.instance.uuid)) {
            let Ok(gpu) = m.gpu.parse::<PciAddress>() else {
                continue;
            };
            let exists = matches!(live.get(&gpu), Some(Ok(l)) if l.iter().any(|i| i.uuid == m.instance.uuid));
            if !exists {
                continue;
            }
            let i = &m.instance;
            let gone = self.mig().and_then(|x| {
                x.destroy(gpu, i.gpu_instance_id, i.compute_instance_id)
                    .map_err(PartitionError::Mig)
            });
            self.count("mig", "destroy", gone.is_ok());
            match gone {
                Ok(()) => {
                    tracing::info!(%gpu, uuid = %i.uuid, holder = %m.holder, "a MIG instance no one holds was destroyed");
                    out.released.push(m.clone());
                }
                Err(e) => {
                    tracing::warn!(%gpu, uuid = %i.uuid, holder = %m.holder, cause = %e,
                        "destroying a MIG instance no one holds failed; kept in the checkpoint");
                    next.mig.push(m.clone());
                }
            }
        }
        self.mdevs_after_boot(held, &before, rebooted, &mut next, &mut out);
        self.save(&next)?;
        Ok(out)
    }

    fn mdevs_after_boot(
        &self,
        held: &[Held],
        before: &Checkpoint,
        rebooted: bool,
        next: &mut Checkpoint,
        out: &mut Recovery,
    ) {
        let mut wanted = Vec::new();
        for h in held {
            let Held::Mdev {
                parent,
                type_id,
                uuid,
                holder,
            } = h
            else {
                continue;
            };
            wanted.push(uuid.clone());
            let entry = HeldMdev {
                parent: parent.to_string(),
                type_id: type_id.clone(),
                uuid: uuid.clone(),
                holder: holder.clone(),
            };
            if vgpu::mdev_path(&self.sysfs_root, uuid).is_dir() {
                out.mdevs_kept.push(entry.clone());
                next.mdevs.push(entry);
                continue;
            }
            if !self.settings.create_mdev_at_bind {
                continue;
            }
            let made = vgpu::create_mdev(&self.sysfs_root, *parent, type_id, uuid);
            self.count("mdev", "recreate", made.is_ok());
            match made {
                Ok(()) => {
                    tracing::info!(%parent, type_id, uuid, holder, "a held mdev was re-created");
                    out.mdevs_recreated.push(entry.clone());
                    next.mdevs.push(entry);
                }
                Err(e) => {
                    tracing::warn!(%parent, type_id, uuid, holder, cause = %e, "a held mdev is lost");
                    out.lost.push(Lost {
                        held: h.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        if rebooted {
            return;
        }
        for m in before.mdevs.iter().filter(|m| !wanted.contains(&m.uuid)) {
            if !vgpu::mdev_path(&self.sysfs_root, &m.uuid).is_dir() {
                continue;
            }
            let gone = vgpu::remove_mdev(&self.sysfs_root, &m.uuid);
            self.count("mdev", "destroy", gone.is_ok());
            match gone {
                Ok(()) => out.mdevs_released.push(m.clone()),
                Err(e) => {
                    tracing::warn!(uuid = %m.uuid, cause = %e, "removing an mdev no one holds failed");
                    next.mdevs.push(m.clone());
                }
            }
        }
    }

    /// Creates the mdev `uuid` of `type_id` under `parent` for `holder` when
    /// `create_mdev_at_bind` is on (else the consumer does, and nothing is written).
    pub fn create_mdev(
        &self,
        parent: PciAddress,
        type_id: &str,
        uuid: &str,
        holder: &str,
    ) -> Result<MdevOutcome, PartitionError> {
        if !self.settings.create_mdev_at_bind {
            tracing::info!(%parent, type_id, uuid, holder, "mdev left to its consumer (create_mdev_at_bind = false)");
            return Ok(MdevOutcome::LeftToConsumer);
        }
        let _g = self.guard();
        let mut cp = self.current()?;
        if !vgpu::mdev_path(&self.sysfs_root, uuid).is_dir() {
            let made = vgpu::create_mdev(&self.sysfs_root, parent, type_id, uuid);
            self.count("mdev", "create", made.is_ok());
            if let Err(e) = made {
                tracing::warn!(%parent, type_id, uuid, holder, cause = %e, "creating an mdev failed");
                return Err(e);
            }
            tracing::info!(%parent, type_id, uuid, holder, "mdev created");
        }
        if !cp.mdevs.iter().any(|m| m.uuid == uuid) {
            cp.mdevs.push(HeldMdev {
                parent: parent.to_string(),
                type_id: type_id.to_owned(),
                uuid: uuid.to_owned(),
                holder: holder.to_owned(),
            });
            self.save(&cp)?;
        }
        Ok(MdevOutcome::Created)
    }

    /// Removes the mdev `uuid` this agent created.
    pub fn remove_mdev(&self, uuid: &str) -> Result<MdevOutcome, PartitionError> {
        let _g = self.guard();
        let mut cp = self.current()?;
        if !cp.mdevs.iter().any(|m| m.uuid == uuid) {
            if !self.settings.create_mdev_at_bind {
                return Ok(MdevOutcome::LeftToConsumer);
            }
            return Err(PartitionError::NotOurs(uuid.to_owned()));
        }
        let outcome = if vgpu::mdev_path(&self.sysfs_root, uuid).is_dir() {
            let gone = vgpu::remove_mdev(&self.sysfs_root, uuid);
            self.count("mdev", "destroy", gone.is_ok());
            if let Err(e) = gone {
                tracing::warn!(uuid, cause = %e, "removing an mdev failed");
                return Err(e);
            }
            tracing::info!(uuid, "mdev removed");
            MdevOutcome::Removed
        } else {
            tracing::info!(uuid, "mdev was already gone");
            MdevOutcome::AlreadyGone
        };
        cp.mdevs.retain(|m| m.uuid != uuid);
        self.save(&cp)?;
        Ok(outcome)
    }
}
