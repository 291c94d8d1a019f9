//! The generated `DevicePlugin` service, delegating to the slot table: one value per
//! kubelet resource (an instance or a pool), all over one [`Shared`] table.
//!
//! Kubelet fidelity (see `../shared/reference/akri-k8s.md` §1.5, §7):
//! - kubelet sends one container per Allocate and keeps only the first response, so
//!   every device of a container goes into one `ContainerAllocateResponse`;
//! - a repeated Allocate of slots this node holds (init containers) succeeds;
//! - each ListAndWatch message is the full list, sent whenever it changes.

use crate::metrics::KubeletMetrics;
use crate::proto::deviceplugin as pb;
use crate::slots::{Advertised, AllocError, Grant, ResourceKey, Usage, CLEANED_ON_RELEASE};
use crate::state::Shared;
use pb::device_plugin_server::DevicePlugin;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// Kubelet's health values.
pub const HEALTHY: &str = "Healthy";
pub const UNHEALTHY: &str = "Unhealthy";
/// The environment variable listing the PCI addresses of a container's devices.
pub const VISIBLE_DEVICES_ENV: &str = "ACCEL_VISIBLE_DEVICES";

/// The plugin of one resource.
pub struct Plugin {
    shared: Arc<Shared>,
    key: ResourceKey,
    domain: String,
    metrics: Option<Arc<KubeletMetrics>>,
}

impl Plugin {
    pub fn new(shared: Arc<Shared>, key: ResourceKey, domain: impl Into<String>) -> Plugin {
        Plugin {
            shared,
            key,
            domain: domain.into(),
            metrics: None,
        }
    }

    /// Counts this plugin's Allocate calls in `metrics`.
    pub fn with_metrics(mut self, metrics: Option<Arc<KubeletMetrics>>) -> Plugin {
        self.metrics = metrics;
        self
    }

    /// The resource's name as kubelet knows it (`<domain>/<name>`), a metric label.
    fn resource_name(&self) -> String {
        match &self.key {
            ResourceKey::Instance(n) | ResourceKey::Pool(n) => format!("{}/{n}", self.domain),
            ResourceKey::Mig(p) => format!("{}/{}", self.domain, crate::slots::mig_resource(p)),
        }
    }
}

fn to_proto(list: &[Advertised]) -> pb::ListAndWatchResponse {
    pb::ListAndWatchResponse {
        devices: list
            .iter()
            .map(|a| pb::Device {
                id: a.id.clone(),
                health: if a.healthy { HEALTHY } else { UNHEALTHY }.into(),
                topology: a.numa_node.map(|n| pb::TopologyInfo {
                    nodes: vec![pb::NumaNode { id: i64::from(n) }],
                }),
            })
            .collect(),
    }
}

/// One container's response: every granted device in it.
pub fn container_response(domain: &str, grants: &[Grant]) -> pb::ContainerAllocateResponse {
    if grants.iter().any(|g| g.mig.is_some()) {
        return mig_response(grants);
    }
    let mut addresses: Vec<&str> = Vec::new();
    let mut nodes = BTreeMap::new();
    let mut annotations = std::collections::HashMap::new();
    let mut cdi = Vec::new();
    for g in grants {
        for a in &g.device.pci_addresses {
            if !addresses.contains(&a.as_str()) {
                addresses.push(a);
            }
        }
        for n in &g.device.device_nodes {
            nodes
                .entry(n.host_path.clone())
                .or_insert_with(|| pb::DeviceSpec {
                    container_path: n.container_path.clone(),
                    host_path: n.host_path.clone(),
                    permissions: n.permissions.clone(),
                });
        }
        // Seed 001's slot annotation: "<slot>" or "C:<vdev>:<slot>".
        let value = match &g.usage {
            Usage::Pool { vdev, .. } => format!("C:{vdev}:{}", g.slot),
            _ => g.slot.clone(),
        };
        annotations.insert(format!("{domain}/slot-{}", g.slot), value);
        // The instance is `<configuration>-<8 hex>`; its CDI spec is the configuration's.
        let (config, _) = g.instance.rsplit_once('-').unwrap_or((&g.instance, ""));
        let name = crate::cdi::device_name(domain, config, &g.instance);
        if !cdi.iter().any(|c: &pb::CdiDevice| c.name == name) {
            cdi.push(pb::CdiDevice { name });
        }
    }
    let mut envs = std::collections::HashMap::new();
    envs.insert(VISIBLE_DEVICES_ENV.to_string(), addresses.join(","));
    pb::ContainerAllocateResponse {
        envs,
        mounts: Vec::new(),
        devices: nodes.into_values().collect(),
        annotations,
        cdi_devices: cdi,
    }
}

/// One container's response for MIG devices (issue 45), as a DRA claim's CDI edits
/// give them: `NVIDIA_VISIBLE_DEVICES` and `ACCEL_VISIBLE_DEVICES` list the MIG
/// devices' UUIDs (NVIDIA's container toolkit exposes exactly those), with their GPUs'
/// device nodes. No CDI device is named: the configuration's spec files describe
/// whole devices, whose edits would show the container the whole GPU.
fn mig_response(grants: &[Grant]) -> pb::ContainerAllocateResponse {
    let mut uuids: Vec<&str> = Vec::new();
    let mut nodes = BTreeMap::new();
    for g in grants {
        if let Some(m) = &g.mig {
            if !uuids.contains(&m.uuid.as_str()) {
                uuids.push(&m.uuid);
            }
        }
        for n in &g.device.device_nodes {
            nodes
                .entry(n.host_path.clone())
                .or_insert_with(|| pb::DeviceSpec {
                    container_path: n.container_path.clone(),
                    host_path: n.host_path.clone(),
                    permissions: n.permissions.clone(),
                });
        }
    }
    let list = uuids.join(",");
    let envs = [
        (VISIBLE_DEVICES_ENV.to_string(), list.clone()),
        (crate::dra::mig::NVIDIA_VISIBLE_DEVICES.to_string(), list),
    ]
    .into_iter()
    .collect();
    pb::ContainerAllocateResponse {
        envs,
        mounts: Vec::new(),
        devices: nodes.into_values().collect(),
        annotations: Default::default(),
        cdi_devices: Vec::new(),
    }
}

impl Plugin {
    /// Saves `grants` through the run loop before kubelet hears of them: the server
    /// applies its one hand-out rule (a device being cleaned, reserved or a VM's is
    /// given to no pod, issue 41) in the transaction that records the grant. A grant
    /// it withholds, or a save that fails, is undone (each granted slot back to its
    /// usage `before`) and the Allocate refused.
    async fn confirm(
        &self,
        grants: Vec<Vec<Grant>>,
        before: &BTreeMap<String, Usage>,
    ) -> Result<Vec<Vec<Grant>>, AllocError> {
        if let Some(gone) = self.holders_gone(&grants, before).await {
            self.undo(&grants, before);
            self.shared.write(|t| (t.free_slots(&gone), true));
            // Saved now: the server releases the device and queues its cleaning.
            let _ = self.shared.confirm().await;
            return Err(AllocError::HolderGone(gone[0].clone()));
        }
        let refusal = match self.shared.confirm().await {
            None => return Ok(grants),
            Some(Ok(held)) => match grants
                .iter()
                .flatten()
                .find(|g| held.contains(&g.withheld_key()))
            {
                None => return Ok(grants),
                Some(g) => AllocError::Withheld(
                    g.mig
                        .as_ref()
                        .map_or_else(|| g.device.id.clone(), |m| m.uuid.clone()),
                ),
            },
            Some(Err(e)) => AllocError::Unconfirmed(e.to_string()),
        };
        self.undo(&grants, before);
        if matches!(refusal, AllocError::Unconfirmed(_)) {
            // The refused save named nothing: save again without the grant, so the
            // server's answer withdraws what it withholds.
            let _ = self.shared.confirm().await;
        }
        Err(refusal)
    }

    /// Each granted slot back to its usage `before` the Allocate.
    fn undo(&self, grants: &[Vec<Grant>], before: &BTreeMap<String, Usage>) {
        let undo: BTreeMap<String, Usage> = grants
            .iter()
            .flatten()
            .map(|g| {
                let was = before.get(&g.slot).cloned().unwrap_or(Usage::Free);
                (g.slot.clone(), was)
            })
            .collect();
        self.shared.write(|t| (t.restore(&undo), true));
    }

    /// The slots of `grants` that repeat a grant this node held already, on a device
    /// cleaned on release, and that no pod holds any more. kubelet repeats a grant for
    /// one pod (an init container's devices re-offered to its app container: that
    /// pod is listed), but it also hands a new pod an id it freed before the reclaimer
    /// saw the old pod go; for a device cleaned between tenants the two must not be
    /// taken for one another. `None` when every repeat is listed (or there is none,
    /// or no pod-resources socket: plugins run without kubelet). A listing that fails
    /// counts every repeat as gone: a device is refused rather than handed over
    /// uncleaned.
    async fn holders_gone(
        &self,
        grants: &[Vec<Grant>],
        before: &BTreeMap<String, Usage>,
    ) -> Option<Vec<String>> {
        let repeats: Vec<&Grant> = grants
            .iter()
            .flatten()
            .filter(|g| before.get(&g.slot).is_some_and(|u| *u != Usage::Free))
            .filter(|g| g.device.traits.iter().any(|t| t == CLEANED_ON_RELEASE))
            .collect();
        if repeats.is_empty() {
            return None;
        }
        let socket = self.shared.pod_resources()?;
        let listed = crate::podresources::listed(&socket).await;
        let resource = self.resource_name();
        let gone: Vec<String> = repeats
            .iter()
            .filter(|g| match &listed {
                Ok(l) => !l.contains_key(&(resource.clone(), g.id.clone())),
                Err(_) => true,
            })
            .map(|g| g.slot.clone())
            .collect();
        if let Err(e) = &listed {
            tracing::warn!(error = %e, "pod-resources unavailable: a repeated grant of a cleaned device is refused");
        }
        (!gone.is_empty()).then_some(gone)
    }
}

fn status(e: AllocError) -> Status {
    match e {
        AllocError::UnknownResource(_) => Status::not_found(e.to_string()),
        AllocError::UnknownId(_) | AllocError::Duplicate(_) => {
            Status::invalid_argument(e.to_string())
        }
        AllocError::SlotTaken { .. }
        | AllocError::Unhealthy(_)
        | AllocError::MigUnavailable(_)
        | AllocError::SameDevice(..)
        | AllocError::NotEnoughDevices { .. }
        | AllocError::Withheld(_)
        | AllocError::HolderGone(_) => Status::resource_exhausted(e.to_string()),
        AllocError::Unconfirmed(_) => Status::unavailable(e.to_string()),
    }
}

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::DevicePluginOptions>, Status> {
        Ok(Response::new(pb::DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = ReceiverStream<Result<pb::ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let shared = self.shared.clone();
        let key = self.key.clone();
        let mut changes = shared.subscribe();
        tokio::spawn(async move {
            let mut last: Option<Vec<Advertised>> = None;
            loop {
                changes.borrow_and_update();
                // The resource went away (its device and claims are gone): end the
                // stream; kubelet marks the resource unhealthy and drops it later.
                let Some(list) = shared.read(|t| t.list(&key)) else {
                    break;
                };
                if last.as_ref() != Some(&list) {
                    if tx.send(Ok(to_proto(&list))).await.is_err() {
                        break;
                    }
                    last = Some(list);
                }
                tokio::select! {
                    r = changes.changed() => if r.is_err() { break },
                    _ = tx.closed() => break,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<pb::PreferredAllocationRequest>,
    ) -> Result<Response<pb::PreferredAllocationResponse>, Status> {
        let container_responses = self.shared.read(|t| {
            request
                .get_ref()
                .container_requests
                .iter()
                .map(|c| pb::ContainerPreferredAllocationResponse {
                    device_i_ds: t.preferred(
                        &self.key,
                        &c.available_device_i_ds,
                        &c.must_include_device_i_ds,
                        usize::try_from(c.allocation_size).unwrap_or(0),
                    ),
                })
                .collect()
        });
        Ok(Response::new(pb::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<pb::AllocateRequest>,
    ) -> Result<Response<pb::AllocateResponse>, Status> {
        let containers: Vec<Vec<String>> = request
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| c.devices_ids)
            .collect();
        let started = Instant::now();
        let (result, before) = self.shared.write(|t| {
            let before = t.usage();
            let r = t.allocate(&self.key, &containers, started);
            let changed = r.is_ok();
            ((r, before), changed)
        });
        let result = match result {
            Ok(grants) => self.confirm(grants, &before).await,
            Err(e) => Err(e),
        };
        if let Some(m) = &self.metrics {
            let r = result.as_ref().map(|_| ());
            m.allocate(&self.resource_name(), started.elapsed(), r);
        }
        match result {
            Ok(grants) => {
                tracing::info!(resource = %self.resource_name(), ?containers, "devices granted");
                Ok(Response::new(pb::AllocateResponse {
                    container_responses: grants
                        .iter()
                        .map(|g| container_response(&self.domain, g))
                        .collect(),
                }))
            }
            Err(e) => {
                tracing::warn!(resource = ?self.key, ?containers, error = %e, "allocate refused");
                Err(status(e))
            }
        }
    }

    async fn pre_start_container(
        &self,
        _: Request<pb::PreStartContainerRequest>,
    ) -> Result<Response<pb::PreStartContainerResponse>, Status> {
        // Not requested (pre_start_required is false); answered for kubelets that ask.
        Ok(Response::new(pb::PreStartContainerResponse {}))
    }
}
