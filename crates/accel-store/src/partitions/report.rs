//! A report's side of the ledger: a GPU reported with `partitions` gains a child
//! deployable per MIG profile and vGPU type (so each is a provider, and a deployable
//! an ARQ can name), and its ledger's geometry and members follow the report.

use super::rows;
use crate::accelerator::cleaning::TRAIT as CLEANED_ON_RELEASE;
use crate::accelerator::report::provider_uuid;
use crate::{StoreError, Tx};
use accel_core::accelerator::{AttachType, ReportedDeployable, ReportedDevice, ReportedHandle};
use accel_core::partition::{members, Member};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};

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
                let total = g.capacity(&[], &m).total;
                d.deployables.push(ReportedDeployable {
                    name: m.provider_name(g, &gpu.name),
                    parent: Some(gpu.name.clone()),
                    num_accelerators: total,
                    driver_name: gpu.driver_name.clone(),
                    attributes,
                    attach_handles: match &m {
                        Member::Vgpu(t) => mdev_handles(&gpu, t, total),
                        _ => Vec::new(),
                    },
                });
            }
            d
        })
        .collect()
}

/// A vGPU type's attach handles, one per instance, in Cyborg's `MDEV` form: the GPU's
/// PCI address with `asked_type` (the type) and `vgpu_mark` (`<type>_<n>`), keys
/// sorted (`mdev_str_to_json`); the ARQ's attach handle uuid is the mdev's. None when
/// the GPU has no PCI handle to take the address from. A MIG profile has none: a MIG
/// device exists only once the agent creates it.
fn mdev_handles(gpu: &ReportedDeployable, type_id: &str, n: i64) -> Vec<ReportedHandle> {
    let Some(address) = gpu
        .attach_handles
        .iter()
        .find(|h| h.attach_type == AttachType::Pci)
        .and_then(|h| serde_json::from_str::<BTreeMap<String, Value>>(&h.attach_info).ok())
    else {
        return Vec::new();
    };
    (0..n)
        .map(|i| {
            let mut info: BTreeMap<String, Value> = address
                .iter()
                .filter(|(k, _)| ["domain", "bus", "device", "function"].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            info.insert("asked_type".into(), type_id.into());
            info.insert("vgpu_mark".into(), format!("{type_id}_{i}").into());
            ReportedHandle {
                attach_type: AttachType::Mdev,
                attach_info: Value::Object(info.into_iter().collect()).to_string(),
                in_use: false,
            }
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
