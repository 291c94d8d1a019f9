//! Slot usage kept outside the agent, so that a restarted agent loses no claim, and
//! the devices virtual machines hold, so that kubelet is never offered them.
//!
//! ```text
//!  start-up:  UsageRecord::load ──▶ SlotTable::restore + set_vm_held ──▶ plugins register
//!  each sync: SlotTable::usage + claims (slot, device, pod from pod-resources)
//!               ──▶ UsageRecord::save ──▶ devices VMs hold ──▶ SlotTable::set_vm_held
//! ```
//!
//! The record is a seam: the agent implements it over the accelerator API
//! (`PUT /v2/agent/hosts/{node}/kubernetes`), which stores the usage and turns the
//! claims into Placement allocations in one transaction; [`InMemory`] keeps nothing
//! (tests, and plugins run without a server). The plugins do not register before the
//! first successful [`Syncer::restore`]: serving from an empty table could hand a pod a
//! slot another pod still holds.

pub use crate::record::RecordError;
use crate::slots::Usage;
pub use crate::state::SaveError;
use crate::state::Shared;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future, so that [`UsageRecord`] can be a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A slot this node holds (kept with the slot table, which lists them).
pub use crate::slots::Claim;

/// What is saved: seed 001's `deviceUsage` map of every slot, and the claims.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UsageReport {
    pub usage: BTreeMap<String, Usage>,
    pub claims: Vec<Claim>,
}

/// What the record holds for this node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recorded {
    pub usage: BTreeMap<String, Usage>,
    /// Device ids virtual machines hold.
    pub vm_held: BTreeSet<String>,
}

/// Where usage is kept.
pub trait UsageRecord: Send + Sync {
    /// The usage saved last (agent start-up).
    fn load(&self) -> BoxFuture<'_, Result<Recorded, RecordError>>;
    /// Saves `report`; answers the device ids virtual machines hold.
    fn save(&self, report: UsageReport) -> BoxFuture<'_, Result<BTreeSet<String>, RecordError>>;
}

/// Keeps nothing: every agent start begins with free slots.
pub struct InMemory;

impl UsageRecord for InMemory {
    fn load(&self) -> BoxFuture<'_, Result<Recorded, RecordError>> {
        Box::pin(async { Ok(Recorded::default()) })
    }
    fn save(&self, _: UsageReport) -> BoxFuture<'_, Result<BTreeSet<String>, RecordError>> {
        Box::pin(async { Ok(BTreeSet::new()) })
    }
}

/// Restores the table from the record once, then saves it (the run loop calls
/// [`Syncer::step`] after changes and periodically; tests call it directly).
pub struct Syncer {
    shared: Arc<Shared>,
    record: Arc<dyn UsageRecord>,
    restored: bool,
    /// Restored usage of devices not found yet (a driver still loading): saved as
    /// recorded meanwhile, and applied when the device appears.
    pending: BTreeMap<String, Usage>,
}

impl Syncer {
    pub fn new(shared: Arc<Shared>, record: Arc<dyn UsageRecord>) -> Syncer {
        Syncer {
            shared,
            record,
            restored: false,
            pending: BTreeMap::new(),
        }
    }

    /// Whether [`Syncer::restore`] has succeeded (the plugins may register).
    pub fn restored(&self) -> bool {
        self.restored
    }

    /// Loads the record into the table (call after the first device refresh: slots
    /// of devices not found are skipped). Returns how many slots were applied.
    pub async fn restore(&mut self) -> Result<usize, RecordError> {
        let r = self.record.load().await?;
        let (applied, pending) = self.shared.write(|t| {
            let n = t.restore(&r.usage);
            t.set_vm_held(&r.vm_held);
            let known = t.usage();
            let pending: BTreeMap<String, Usage> = r
                .usage
                .iter()
                .filter(|(slot, _)| !known.contains_key(*slot))
                .map(|(s, u)| (s.clone(), u.clone()))
                .collect();
            ((n, pending), true)
        });
        self.pending = pending;
        self.restored = true;
        Ok(applied)
    }

    /// Saves the table with the pods of the last pod-resources listing (`(resource
    /// name, device id)` to `<namespace>/<pod>`), then marks the devices VMs hold.
    /// Returns whether that changed what kubelet sees.
    pub async fn step(
        &mut self,
        pods: &HashMap<(String, String), String>,
    ) -> Result<bool, SaveError> {
        self.save(pods).await.map(|(changed, _)| changed)
    }

    /// [`Syncer::step`] for an Allocate waiting on its grant ([`Shared::confirm`]):
    /// answers the device ids the server withholds.
    pub async fn confirm(
        &mut self,
        pods: &HashMap<(String, String), String>,
    ) -> Result<BTreeSet<String>, SaveError> {
        self.save(pods).await.map(|(_, held)| held)
    }

    async fn save(
        &mut self,
        pods: &HashMap<(String, String), String>,
    ) -> Result<(bool, BTreeSet<String>), SaveError> {
        if !self.restored {
            return Err(SaveError::NotRestored);
        }
        let pending = &mut self.pending;
        let mut report = self.shared.write(|t| {
            let mut changed = false;
            if !pending.is_empty() {
                let known = t.usage();
                let found: BTreeMap<String, Usage> = pending
                    .iter()
                    .filter(|(slot, _)| known.contains_key(*slot))
                    .map(|(s, u)| (s.clone(), u.clone()))
                    .collect();
                if !found.is_empty() {
                    changed = t.restore(&found) > 0;
                    pending.retain(|slot, _| !found.contains_key(slot));
                }
            }
            let report = UsageReport {
                usage: t.usage(),
                claims: t.claims(pods),
            };
            (report, changed)
        });
        // Claims of devices not back yet stay in the record as they were.
        for (slot, u) in &self.pending {
            report.usage.insert(slot.clone(), u.clone());
        }
        let held = self.record.save(report).await?;
        let changed = self.shared.write(|t| {
            let changed = t.set_vm_held(&held);
            (changed, changed)
        });
        Ok((changed, held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Configuration, KubernetesConfig, Selector};
    use crate::device::instance_hash;
    use crate::slots::SlotTable;
    use crate::testing::device as test_device;
    use std::sync::Mutex;

    /// A record in memory that keeps what was saved.
    struct Kept(Mutex<Recorded>);

    impl UsageRecord for Kept {
        fn load(&self) -> BoxFuture<'_, Result<Recorded, RecordError>> {
            let r = self.0.lock().unwrap().clone();
            Box::pin(async move { Ok(r) })
        }
        fn save(
            &self,
            report: UsageReport,
        ) -> BoxFuture<'_, Result<BTreeSet<String>, RecordError>> {
            let mut r = self.0.lock().unwrap();
            r.usage = report.usage;
            let held = r.vm_held.clone();
            Box::pin(async move { Ok(held) })
        }
    }

    #[tokio::test]
    async fn claims_of_a_device_found_late_are_kept_then_restored() {
        let config = KubernetesConfig {
            configurations: vec![Configuration {
                name: "gpu".into(),
                capacity: 2,
                selector: Selector::default(),
            }],
            ..KubernetesConfig::default()
        };
        let late = format!("gpu-{}-1", instance_hash("n", "b"));
        let held = Usage::Pool {
            vdev: "0".into(),
            node: "n".into(),
        };
        let record = Arc::new(Kept(Mutex::new(Recorded {
            usage: [(late.clone(), held.clone())].into(),
            vm_held: BTreeSet::new(),
        })));
        let mut table = SlotTable::new("n", &config);
        table.set_devices(&[test_device("a", "GPU")]);
        let shared = Shared::new(table);
        let mut syncer = Syncer::new(shared.clone(), record.clone());
        assert_eq!(syncer.restore().await.unwrap(), 0);
        syncer.step(&HashMap::new()).await.unwrap();
        assert_eq!(record.0.lock().unwrap().usage.get(&late), Some(&held));
        shared.write(|t| {
            let c = t.set_devices(&[test_device("a", "GPU"), test_device("b", "GPU")]);
            (c, c)
        });
        syncer.step(&HashMap::new()).await.unwrap();
        assert_eq!(
            shared.read(|t| t.usage().get(&late).cloned()),
            Some(held.clone())
        );
        assert_eq!(shared.read(|t| t.held_vdevs()), ["0".to_string()].into());
        assert_eq!(record.0.lock().unwrap().usage.get(&late), Some(&held));
    }
}
