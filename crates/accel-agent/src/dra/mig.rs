//! The DRA driver's MIG devices made through the agent's partitions manager (issue 45
//! item 4): a claim's MIG profile at its placement created on prepare, destroyed (then
//! the GPU's cleaning rule) on unprepare, each in the checkpoint with the claim's uid
//! as holder, so a restart and a reboot account for them as for a VM's.
//!
//! A slot discovery shows a MIG device at that this agent did not make is the
//! operator's (the static layout publishes those): handed out as it is, never made or
//! destroyed here. One this agent made for another claim is refused with that claim's
//! name before NVML is asked.

use crate::agent::Agent;
use crate::partitions::{HeldMig, PartitionError};
use crate::pci::PciAddress;
use accel_api::partitions::MigPlacement;
use accel_k8s::dra::mig::Partitioner;
use accel_k8s::dra::partitions::Placement;
use accel_k8s::dra::BoxFuture;
use accel_k8s::Device;
use std::sync::Arc;

/// Why a claim's MIG device was not made or unmade.
#[derive(Debug, thiserror::Error)]
pub enum ClaimMigError {
    #[error("{0:?} is not a PCI address")]
    Address(String),
    #[error("MIG device {uuid} at that placement is held by claim {holder}")]
    HeldBy { uuid: String, holder: String },
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error("the partition task ended without an answer: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// [`Partitioner`] over the agent's [`crate::partitions::Partitions`].
pub struct AgentPartitions {
    agent: Arc<Agent>,
}

impl AgentPartitions {
    pub fn new(agent: Arc<Agent>) -> AgentPartitions {
        AgentPartitions { agent }
    }
}

/// Makes (or finds) the MIG device; blocking (NVML, the checkpoint file).
fn create(
    agent: &Agent,
    gpu: &Device,
    profile_id: u32,
    at: Placement,
    existing: Option<String>,
    holder: &str,
) -> Result<String, ClaimMigError> {
    let address: PciAddress = gpu
        .id
        .parse()
        .map_err(|_| ClaimMigError::Address(gpu.id.clone()))?;
    let p = agent.partitions();
    if let Some(uuid) = existing {
        let ours: Option<HeldMig> = p
            .checkpoint()?
            .mig
            .into_iter()
            .find(|m| m.instance.uuid == uuid);
        match ours {
            None => {
                tracing::info!(gpu = %address, %uuid, holder, "handing out a MIG device the operator made");
                return Ok(uuid);
            }
            Some(m) if m.holder != holder => {
                return Err(ClaimMigError::HeldBy {
                    uuid,
                    holder: m.holder,
                })
            }
            Some(_) => {}
        }
    }
    let placement = MigPlacement {
        start: at.start,
        size: at.size,
    };
    Ok(p.create(address, profile_id, placement, holder)?.uuid)
}

impl Partitioner for AgentPartitions {
    fn create(
        &self,
        gpu: Device,
        profile_id: u32,
        placement: Placement,
        existing: Option<String>,
        holder: String,
    ) -> BoxFuture<'_, Result<String, accel_k8s::record::BoxError>> {
        let agent = self.agent.clone();
        Box::pin(async move {
            let made = tokio::task::spawn_blocking(move || {
                create(&agent, &gpu, profile_id, placement, existing, &holder)
            })
            .await
            .map_err(ClaimMigError::Task)
            .and_then(|r| r);
            made.map_err(Into::into)
        })
    }

    fn release(
        &self,
        holder: String,
        gpus: Vec<Device>,
    ) -> BoxFuture<'_, Result<usize, accel_k8s::record::BoxError>> {
        Box::pin(async move {
            let p = self.agent.partitions();
            let held: Vec<HeldMig> = p
                .checkpoint()
                .map_err(ClaimMigError::from)?
                .mig
                .into_iter()
                .filter(|m| m.holder == holder)
                .collect();
            for m in &held {
                let rule = gpus
                    .iter()
                    .find(|d| d.id == m.gpu)
                    .and_then(|d| crate::cleaning::rule_for(&self.agent.settings.cleaning, d));
                p.release(&m.instance.uuid, rule)
                    .await
                    .map_err(ClaimMigError::from)?;
            }
            Ok(held.len())
        })
    }
}
