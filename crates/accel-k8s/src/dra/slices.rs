//! The node's ResourceSlices: what the scheduler allocates claims from.
//!
//! ```text
//! Publisher::step()   (the run loop calls it every interval; tests directly)
//!   devices (DeviceSource) ─ VM-held (the server) ─ unhealthy ─ matching no configuration
//!     ─▶ desired devices: name = DNS label of the provider, attributes type, vendor,
//!        product, model, configuration, health, pciAddress, resource.kubernetes.io/numaNode;
//!        capacity memory where the driver knows the device's memory
//!   the slices of (driver, node) ─ none ─▶ create (generation = last + 1)
//!                                ─ one, same devices ─▶ nothing
//!                                ─ otherwise ─▶ the first updated (generation + 1),
//!                                               the others deleted
//! ```
//!
//! One pool per node (`pool.name` = the node, `resourceSliceCount` 1), the Node as
//! owner (the slices go with it). Kubelet deletes a node's slices when it starts; the
//! next step finds none and creates the pool again with a higher generation, so the
//! scheduler never mixes an old generation with a new one. A device a VM holds, or that
//! is unhealthy, is withdrawn (taints are off by default before 1.37): the scheduler
//! cannot allocate it, and a claim already allocated keeps its device.

use super::{device_name, BoxFuture};
use crate::config::KubernetesConfig;
use crate::device::{Device, DeviceSource};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

/// What the publisher needs of the Kubernetes API.
pub trait SliceApi: Send + Sync {
    /// The node's uid (the slices' owner).
    fn node_uid(&self, node: &str) -> BoxFuture<'_, Result<String, String>>;
    /// The ResourceSlices of `driver` on `node` (field selectors `spec.nodeName`,
    /// `spec.driver`).
    fn list_slices(&self, node: &str, driver: &str) -> BoxFuture<'_, Result<Vec<Value>, String>>;
    fn create_slice(&self, slice: Value) -> BoxFuture<'_, Result<Value, String>>;
    /// Replaces the slice named in `slice.metadata.name` (with its resourceVersion).
    fn update_slice(&self, slice: Value) -> BoxFuture<'_, Result<Value, String>>;
    fn delete_slice(&self, name: &str) -> BoxFuture<'_, Result<(), String>>;
}

/// Which devices a VM holds (the server's answer; PCI addresses).
pub trait Held: Send + Sync {
    fn vm_held(&self) -> BoxFuture<'_, Result<BTreeSet<String>, String>>;
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    Unchanged,
    Created { generation: i64 },
    Updated { generation: i64 },
}

/// Keeps the node's pool in the API server equal to its devices.
pub struct Publisher {
    node: String,
    config: KubernetesConfig,
    devices: Arc<dyn DeviceSource>,
    api: Arc<dyn SliceApi>,
    held: Arc<dyn Held>,
    /// The highest pool generation seen or written.
    generation: i64,
    node_uid: Option<String>,
}

fn string(s: impl Into<String>) -> Value {
    json!({"string": s.into()})
}

/// The slice's devices: every healthy device of a configuration no VM holds, by name.
pub fn desired(
    node: &str,
    config: &KubernetesConfig,
    devices: Vec<Device>,
    vm_held: &BTreeSet<String>,
) -> Vec<Value> {
    let mut out: Vec<(String, Value)> = Vec::new();
    for d in devices {
        if !d.healthy || vm_held.contains(&d.id) {
            continue;
        }
        let Some(conf) = config
            .configurations
            .iter()
            .find(|c| c.selector.matches(&d))
        else {
            continue;
        };
        let name = device_name(node, &d.id);
        let mut attributes = serde_json::Map::new();
        attributes.insert("type".into(), string(&d.device_type));
        attributes.insert("vendor".into(), string(format!("{:04x}", d.vendor)));
        attributes.insert("product".into(), string(format!("{:04x}", d.product)));
        attributes.insert("model".into(), string(&d.model));
        attributes.insert("configuration".into(), string(&conf.name));
        attributes.insert("health".into(), string("ok"));
        attributes.insert("pciAddress".into(), string(&d.id));
        if let Some(n) = d.numa_node {
            attributes.insert("resource.kubernetes.io/numaNode".into(), json!({"int": n}));
        }
        let mut device = json!({"name": name, "attributes": attributes});
        if let Some(mib) = d.memory_mib {
            device["capacity"] = json!({"memory": {"value": format!("{mib}Mi")}});
        }
        out.push((name, device));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, v)| v).collect()
}

impl Publisher {
    pub fn new(
        node: impl Into<String>,
        config: KubernetesConfig,
        devices: Arc<dyn DeviceSource>,
        api: Arc<dyn SliceApi>,
        held: Arc<dyn Held>,
    ) -> Publisher {
        Publisher {
            node: node.into(),
            config,
            devices,
            api,
            held,
            generation: 0,
            node_uid: None,
        }
    }

    /// One reconciliation; see the module doc.
    pub async fn step(&mut self) -> Result<Published, String> {
        let held = self.held.vm_held().await?;
        let source = self.devices.clone();
        let found = tokio::task::spawn_blocking(move || source.devices())
            .await
            .map_err(|e| format!("discovering the node's devices failed: {e}"))?;
        let devices = desired(&self.node, &self.config, found, &held);
        let driver = self.config.resource_domain.clone();
        let existing = self.api.list_slices(&self.node, &driver).await?;
        for s in &existing {
            let g = s["spec"]["pool"]["generation"].as_i64().unwrap_or(0);
            self.generation = self.generation.max(g);
        }
        if let [one] = existing.as_slice() {
            if one["spec"]["devices"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
                == devices.as_slice()
                && one["spec"]["pool"]["resourceSliceCount"].as_i64() == Some(1)
            {
                return Ok(Published::Unchanged);
            }
        }
        let uid = match &self.node_uid {
            Some(u) => u.clone(),
            None => {
                let u = self.api.node_uid(&self.node).await?;
                self.node_uid = Some(u.clone());
                u
            }
        };
        let generation = self.generation + 1;
        let spec = json!({
            "driver": driver,
            "nodeName": self.node,
            "pool": {"name": self.node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        });
        let owner = json!([{"apiVersion": "v1", "kind": "Node", "name": self.node,
            "uid": uid, "controller": true}]);
        let published = match existing.first() {
            None => {
                self.api
                    .create_slice(json!({
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceSlice",
                        "metadata": {"generateName": format!("{}-{driver}-", self.node),
                                     "ownerReferences": owner},
                        "spec": spec,
                    }))
                    .await?;
                Published::Created { generation }
            }
            Some(first) => {
                let mut s = first.clone();
                s["spec"] = spec;
                self.api.update_slice(s).await?;
                for other in &existing[1..] {
                    self.api
                        .delete_slice(other["metadata"]["name"].as_str().unwrap_or_default())
                        .await?;
                }
                Published::Updated { generation }
            }
        };
        self.generation = generation;
        Ok(published)
    }
}

/// How often the pool is reconciled (and re-created after kubelet wiped it).
pub const PUBLISH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Reconciles every `interval` until `shutdown`; a failed step is logged and retried at
/// the next tick.
pub async fn run(
    mut publisher: Publisher,
    interval: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tick.tick() => match publisher.step().await {
                Ok(Published::Unchanged) => {}
                Ok(p) => tracing::info!(node = %publisher.node, outcome = ?p, "ResourceSlice published"),
                Err(e) => tracing::warn!(node = %publisher.node, error = %e, "publishing the ResourceSlice failed"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_of_no_configuration_unhealthy_or_vm_held_are_left_out() {
        let config = KubernetesConfig::from_toml(
            "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n\
             [kubernetes.configurations.selector]\ndevice_type = \"GPU\"\n",
        )
        .unwrap();
        let t = crate::testing::device;
        let with_memory = Device {
            memory_mib: Some(40960),
            ..t("0000:17:00.0", "GPU")
        };
        let sick = Device {
            healthy: false,
            ..t("0000:31:00.0", "GPU")
        };
        let devices = vec![
            with_memory,
            sick,
            t("0000:4b:00.0", "GPU"),
            t("0000:65:00.0", "FPGA"),
        ];
        let held: BTreeSet<String> = ["0000:4b:00.0".to_string()].into();
        let got = desired("n", &config, devices, &held);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["name"], "n-0000-17-00-0");
        assert_eq!(got[0]["capacity"], json!({"memory": {"value": "40960Mi"}}));
        assert_eq!(
            got[0]["attributes"]["configuration"],
            json!({"string": "gpu"})
        );
    }
}
