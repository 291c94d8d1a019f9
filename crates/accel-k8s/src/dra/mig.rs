//! Preparing a claim's MIG devices (issue 45): the scheduler allocated a MIG profile at
//! a placement from the GPU's counters; prepare makes that MIG device on the GPU and
//! hands the container its UUID, unprepare destroys it (then the GPU's cleaning rule).
//!
//! ```text
//! claim result <gpu>-mig-1g10gb-19-3 ─▶ targets(): the GPU, profile 19, placement 3+1
//!   ─▶ Partitioner::create(gpu, 19, 3+1, existing uuid?, holder = claim uid)
//!        the agent: NVML GPU instance + compute instance, checkpointed
//!        (a slot someone holds: NVML refuses it, and so does the claim)
//!   ─▶ CDI: ACCEL_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES = MIG-<uuid>
//! unprepare ─▶ Partitioner::release(holder = claim uid)
//! ```
//!
//! The NVML work stays behind [`Partitioner`] (the agent's `partitions` module); this
//! crate only knows which names stand for which partition ([`targets`]).

use super::partitions::{forms, Form, Layout, Placement};
use super::{device_name, BoxFuture};
use crate::device::Device;
use crate::record::BoxError;
use std::collections::BTreeMap;

/// `NVIDIA_VISIBLE_DEVICES`: what NVIDIA's container toolkit reads to expose GPUs and
/// MIG devices (by UUID) to a container.
pub const NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// Makes and unmakes a node's MIG devices (the agent's partitions manager).
pub trait Partitioner: Send + Sync {
    /// The MIG device of `profile_id` at `placement` on `gpu` for `holder`: made, or
    /// answered when `holder` already has it; `existing` is the UUID discovery saw at
    /// that slot (one the operator made is handed out as it is, never made again).
    fn create(
        &self,
        gpu: Device,
        profile_id: u32,
        placement: Placement,
        existing: Option<String>,
        holder: String,
    ) -> BoxFuture<'_, Result<String, BoxError>>;
    /// Destroys every MIG device `holder` was given, each followed by its GPU's cleaning
    /// rule (`gpus`: the node's devices, where the rule is looked up); answers how many.
    fn release(&self, holder: String, gpus: Vec<Device>) -> BoxFuture<'_, Result<usize, BoxError>>;
}

/// What one slice device name of this node stands for.
#[derive(Debug, Clone)]
pub struct Target {
    /// The device itself, or for a partition the GPU it is part of.
    pub device: Device,
    /// `None`: a device given whole as before (no partitions).
    pub form: Option<Form>,
}

/// Every name this node's devices may publish, with what it stands for: a device's own
/// name, and for a partitionable GPU each of its forms (the counter layout's names are
/// a superset of the static layout's).
pub fn targets(node: &str, found: Vec<Device>) -> BTreeMap<String, Target> {
    let mut out = BTreeMap::new();
    for d in found {
        let name = device_name(node, &d.id);
        match &d.partitions {
            Some(p) => {
                for (n, form) in forms(&name, p, Layout::Counters) {
                    let device = d.clone();
                    out.insert(
                        n,
                        Target {
                            device,
                            form: Some(form),
                        },
                    );
                }
            }
            None => {
                out.insert(
                    name,
                    Target {
                        device: d,
                        form: None,
                    },
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::partitions::{Instance, Partitioning};

    #[test]
    fn a_partitioned_gpu_answers_each_form_and_a_plain_device_its_own_name() {
        let mut geometry = accel_core::partition::fixtures::h100_80gb();
        geometry.profiles.retain(|x| x.id == 19);
        let p = Partitioning {
            geometry,
            instances: vec![Instance {
                profile_id: 19,
                placement: Placement { start: 2, size: 1 },
                uuid: "MIG-x".into(),
            }],
        };
        let gpu = Device {
            partitions: Some(p),
            ..crate::testing::device("0000:3b:00.0", "GPU")
        };
        let t = targets(
            "n",
            vec![gpu, crate::testing::device("0000:5e:00.0", "GPU")],
        );
        // Whole, VFIO, seven 1g placements; and the plain GPU.
        assert_eq!(t.len(), 10, "{:?}", t.keys());
        assert!(t["n-0000-5e-00-0"].form.is_none());
        assert_eq!(t["n-0000-3b-00-0"].form, Some(Form::Whole));
        assert_eq!(t["n-0000-3b-00-0-vfio"].form, Some(Form::Vfio));
        let Some(Form::Mig {
            uuid, placement, ..
        }) = &t["n-0000-3b-00-0-mig-1g10gb-19-2"].form
        else {
            panic!("not a MIG form");
        };
        assert_eq!((uuid.as_deref(), placement.start), (Some("MIG-x"), 2));
        let Some(Form::Mig { uuid, .. }) = &t["n-0000-3b-00-0-mig-1g10gb-19-3"].form else {
            panic!("not a MIG form");
        };
        assert_eq!(uuid, &None);
    }
}
