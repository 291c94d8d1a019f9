//! [`Partitions`]: MIG instances and mdevs made when the server hands a partition out,
//! unmade when it is given back, and accounted for after the agent starts (a node
//! reboot loses every MIG layout and every mdev that is not persistent).
//!
//! One change at a time (a lock around each operation and its checkpoint write); each
//! create, destroy and re-create is a log line with its cause when it fails and a count
//! in `accel_agent_partition_operations_total{kind, action, outcome}`. What happens
//! after a start is in `recovery.rs`.

use super::checkpoint::{Checkpoint, HeldMdev, HeldMig};
use super::vgpu;
use super::{boot_id, Mig, MigError, PartitionError, PartitionSettings};
use crate::cleaning::{self, Method, Rule};
use crate::metrics::Metrics;
use crate::pci::PciAddress;
use accel_api::partitions::{MigInstance, MigPlacement};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

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
    pub(super) settings: PartitionSettings,
    pub(super) sysfs_root: PathBuf,
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

    pub(super) fn mig(&self) -> Result<&dyn Mig, PartitionError> {
        self.mig
            .as_deref()
            .map_err(|e| PartitionError::Mig(e.clone()))
    }

    pub(super) fn count(&self, kind: &str, action: &str, ok: bool) {
        if let Some(m) = &self.metrics {
            m.partition(kind, action, ok, 1);
        }
    }

    pub(super) fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
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

    /// Writes the checkpoint; a failure is logged and counted (kind `checkpoint`),
    /// since a partition that exists but is not listed is one the agent later treats
    /// as another's.
    pub(super) fn save(&self, cp: &Checkpoint) -> Result<(), PartitionError> {
        let saved = cp.save(&self.settings.state_dir);
        self.count("checkpoint", "write", saved.is_ok());
        if let Err(e) = &saved {
            tracing::error!(cause = %e, mig = cp.mig.len(), mdevs = cp.mdevs.len(),
                "writing the partition checkpoint failed");
        }
        saved
    }

    /// The GPU a checkpoint entry names.
    fn gpu_of(&self, held: &HeldMig) -> Result<PciAddress, PartitionError> {
        held.gpu
            .parse()
            .map_err(|e: String| PartitionError::Checkpoint {
                path: Checkpoint::path(&self.settings.state_dir)
                    .display()
                    .to_string(),
                cause: e,
            })
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
            self.count("mig", "destroy", false);
            return Err(PartitionError::NotOurs(uuid.to_owned()));
        };
        let gpu = self.gpu_of(&held)?;
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
        let gpu = self.gpu_of(&held)?;
        let result = match self.release_rule(gpu, uuid, rule) {
            Ok(rule) => {
                let address = gpu.to_string();
                let device = cleaning::device_node(&self.sysfs_root, &address);
                let deadline = started + rule.timeout;
                cleaning::run_rule(
                    &rule,
                    &self.sysfs_root,
                    &address,
                    device.as_deref(),
                    deadline,
                )
                .await
                .map_err(|e| PartitionError::Cleaning {
                    gpu,
                    uuid: uuid.to_owned(),
                    cause: e.to_string(),
                })
            }
            Err(e) => Err(e),
        };
        if let Some(m) = &self.metrics {
            m.cleaning(result.is_ok(), started.elapsed());
        }
        match result {
            Ok(()) => {
                tracing::info!(%gpu, uuid, method = rule.method.name(), "GPU cleaned after a MIG release");
                Ok(held)
            }
            Err(e) => {
                tracing::warn!(%gpu, uuid, method = rule.method.name(), cause = %e, "cleaning after a MIG release failed");
                Err(e)
            }
        }
    }

    /// The GPU's cleaning rule as it applies to one released MIG device: `{uuid}`
    /// filled in a command; a `pci-reset` only when no other MIG device lives on the
    /// GPU; `fpga-default` never.
    fn release_rule(
        &self,
        gpu: PciAddress,
        uuid: &str,
        rule: &Rule,
    ) -> Result<Rule, PartitionError> {
        let fail = |cause: String| PartitionError::Cleaning {
            gpu,
            uuid: uuid.to_owned(),
            cause,
        };
        match &rule.method {
            Method::FpgaDefault(_) => Err(fail("fpga-default does not clean a GPU".into())),
            Method::PciReset => {
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
            Method::Command(argv) => {
                let fill =
                    |args: &[String]| args.iter().map(|a| a.replace("{uuid}", uuid)).collect();
                Ok(Rule {
                    method: Method::Command(fill(argv)),
                    verify: fill(&rule.verify),
                    ..rule.clone()
                })
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
