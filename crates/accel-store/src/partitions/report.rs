//! A report's side of the ledger: a GPU reported with `partitions` gains a child
//! deployable per MIG profile and vGPU type (so each is a provider, and a deployable
//! an ARQ can name), and its ledger's geometry and members follow the report.

use super::rows;
use crate::accelerator::cleaning::TRAIT as CLEANED_ON_RELEASE;
use crate::accelerator::report::provider_uuid;
use crate::{StoreError, Tx};
use accel_core::accelerator::{ReportedDeployable, ReportedDevice};
use accel_core::partition::{members, Member};
use std::collections::HashSet;

/// The deployable a partitioned device is handed out whole through: its first
/// top-level deployable with a resource class.
fn gpu_deployable(d: &ReportedDevice) -> Option<&ReportedDeployable> {
    d.deployables
        .iter()
        .find(|x| x.parent.is_none() && x.resource_class().is_some())
}

/// The devices with a child deployable per partition member under each partitioned
/// GPU's deployable: class and traits from the member, the GPU's traits beside them
/// (so a flavor's `trait:CUSTOM_GPU_NVIDIA_HOPPER` still matches), size the member's
/// total. Not the cleaning trait: a MIG instance is destroyed on release, not wiped.
pub fn expand(reported: &[ReportedDevice]) -> Vec<ReportedDevice> {
    reported
        .iter()
        .map(|d| {
            let mut d = d.clone();
            let (Some(g), Some(gpu)) = (&d.partitions, gpu_deployable(&d).cloned()) else {
                return d;
            };
            for m in members(g) {
                let Some(rc) = m.resource_class(g) else {
                    continue;
                };
                let mut traits: Vec<String> = gpu
                    .traits()
                    .filter(|t| *t != CLEANED_ON_RELEASE)
                    .map(str::to_owned)
                    .collect();
                traits.extend(m.traits(g));
                let mut attributes = vec![("rc".to_owned(), rc)];
                attributes.extend(
                    traits
                        .into_iter()
                        .enumerate()
                        .map(|(i, t)| (format!("trait{i}"), t)),
                );
                d.deployables.push(ReportedDeployable {
                    name: m.provider_name(g, &gpu.name),
                    parent: Some(gpu.name.clone()),
                    num_accelerators: g.capacity(&[], &m).total,
                    driver_name: gpu.driver_name.clone(),
                    attributes,
                    attach_handles: Vec::new(),
                });
            }
            d
        })
        .collect()
}

/// Makes `host`'s ledgers follow its (expanded) report: each partitioned GPU's
/// geometry and members written (its ledger locked first); a ledger whose GPU is no
/// longer reported partitioned is removed once nobody holds it.
pub(crate) async fn sync_report(
    tx: &mut Tx,
    host: &str,
    reported: &[ReportedDevice],
) -> Result<(), StoreError> {
    let mut kept = HashSet::new();
    for d in reported {
        let (Some(g), Some(gpu)) = (&d.partitions, gpu_deployable(d)) else {
            continue;
        };
        let gpu_uuid = provider_uuid(&gpu.name);
        let ms: Vec<(String, Member)> = members(g)
            .into_iter()
            .map(|m| (provider_uuid(&m.provider_name(g, &gpu.name)), m))
            .collect();
        rows::upsert(tx, &gpu_uuid, host, g, &ms).await?;
        kept.insert(gpu_uuid);
    }
    for l in rows::of_host(tx, host).await? {
        if !kept.contains(&l.rp_uuid) && l.holders.is_empty() {
            rows::lock(tx, &[l.id]).await?;
            rows::remove(tx, l.id).await?;
        }
    }
    Ok(())
}
