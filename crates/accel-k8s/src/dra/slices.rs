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
//! scheduler never mixes an old generation with a new one.
//!
//! [`run`] steps every interval and, between ticks, when the node's devices come or go
//! ([`DeviceSource::presence`], polled every [`PRESENCE_INTERVAL`]) and whenever a
//! watch on the driver's own slices of the node (the list's field selectors, from the resourceVersion of the
//! last list) reports a change: a slice someone deleted or edited comes back at once,
//! not at the next tick. The step after the driver's own write finds nothing to do
//! and watches from the newer list, so the loop settles; a watch that cannot be made
//! (410 Gone, no watch verb) leaves the interval alone until the next step. A device a VM holds, or that
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
    fn list_slices(&self, node: &str, driver: &str) -> BoxFuture<'_, Result<SliceList, String>>;
    /// Waits for a change to the slices of `driver` on `node` after
    /// `resource_version` (a list's): Ok when an event (added, modified, deleted)
    /// came, an error when the watch failed or ended without one.
    fn watch_slices(
        &self,
        node: &str,
        driver: &str,
        resource_version: &str,
    ) -> BoxFuture<'_, Result<(), String>>;
    fn create_slice(&self, slice: Value) -> BoxFuture<'_, Result<Value, String>>;
    /// Replaces the slice named in `slice.metadata.name` (with its resourceVersion).
    fn update_slice(&self, slice: Value) -> BoxFuture<'_, Result<Value, String>>;
    fn delete_slice(&self, name: &str) -> BoxFuture<'_, Result<(), String>>;
}

/// A list of slices and the resourceVersion it was read at (where a watch starts).
#[derive(Debug, Clone, Default)]
pub struct SliceList {
    pub items: Vec<Value>,
    pub resource_version: Option<String>,
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
    /// The resourceVersion of the last list, where the next watch starts.
    listed_at: Option<String>,
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
            listed_at: None,
        }
    }

    /// The device source's cheap fingerprint (None: it has none).
    async fn presence(&self) -> Option<u64> {
        let source = self.devices.clone();
        tokio::task::spawn_blocking(move || source.presence())
            .await
            .ok()
            .flatten()
    }

    /// A watch for the next change after the last list (None before a list).
    pub fn changed(&self) -> Option<BoxFuture<'static, Result<(), String>>> {
        let from = self.listed_at.clone()?;
        let api = self.api.clone();
        let (node, driver) = (self.node.clone(), self.config.resource_domain.clone());
        Some(Box::pin(async move {
            api.watch_slices(&node, &driver, &from).await
        }))
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
        let listed = self.api.list_slices(&self.node, &driver).await?;
        self.listed_at = listed.resource_version;
        let existing = listed.items;
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
/// How often [`DeviceSource::presence`] is compared with its last value.
pub const PRESENCE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Reconciles every `interval`, when the devices' presence changes, and whenever the
/// watch of the node's slices reports a change, until `shutdown`; a failed step is
/// logged and retried at the next tick, a failed watch made again after the next step.
pub async fn run(
    mut publisher: Publisher,
    interval: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut presence = tokio::time::interval(PRESENCE_INTERVAL);
    presence.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_presence = publisher.presence().await;
    let mut watch: Option<BoxFuture<'static, Result<(), String>>> = None;
    loop {
        let now = tokio::select! {
            _ = &mut shutdown => return,
            _ = tick.tick() => true,
            _ = presence.tick(), if last_presence.is_some() => {
                let seen = publisher.presence().await;
                let changed = seen != last_presence;
                last_presence = seen;
                changed
            }
            r = async {
                match watch.as_mut() {
                    Some(w) => w.await,
                    None => std::future::pending().await,
                }
            } => {
                watch = None;
                match r {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::debug!(node = %publisher.node, error = %e, "watching the ResourceSlices stopped; the interval goes on");
                        false
                    }
                }
            }
        };
        if !now {
            continue;
        }
        let stepped = match publisher.step().await {
            Ok(Published::Unchanged) => true,
            Ok(p) => {
                tracing::info!(node = %publisher.node, outcome = ?p, "ResourceSlice published");
                true
            }
            Err(e) => {
                tracing::warn!(node = %publisher.node, error = %e, "publishing the ResourceSlice failed");
                false
            }
        };
        // After a failed step the last list may be old: watching from it again would
        // replay the same event at once, so the tick comes first.
        if stepped && watch.is_none() {
            watch = publisher.changed();
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

    /// An API server in memory: slices by name, a resourceVersion per write, and a
    /// watch that wakes on any write after the version it is given.
    #[derive(Default)]
    struct Api {
        st: std::sync::Mutex<(u64, std::collections::BTreeMap<String, Value>)>,
        written: tokio::sync::watch::Sender<u64>,
        watch_fails: bool,
        lists: std::sync::atomic::AtomicUsize,
        watches: std::sync::atomic::AtomicUsize,
    }

    impl Api {
        fn write(&self, f: impl FnOnce(&mut std::collections::BTreeMap<String, Value>, u64)) {
            let rv = {
                let mut g = self.st.lock().unwrap();
                g.0 += 1;
                let rv = g.0;
                f(&mut g.1, rv);
                rv
            };
            self.written.send_replace(rv);
        }

        fn generations(&self) -> Vec<i64> {
            let g = self.st.lock().unwrap();
            g.1.values()
                .map(|s| s["spec"]["pool"]["generation"].as_i64().unwrap())
                .collect()
        }
    }

    impl SliceApi for Api {
        fn node_uid(&self, _: &str) -> BoxFuture<'_, Result<String, String>> {
            Box::pin(async { Ok("uid".to_string()) })
        }
        fn list_slices(&self, _: &str, _: &str) -> BoxFuture<'_, Result<SliceList, String>> {
            self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let g = self.st.lock().unwrap();
            let list = SliceList {
                items: g.1.values().cloned().collect(),
                resource_version: Some(g.0.to_string()),
            };
            Box::pin(async move { Ok(list) })
        }
        fn watch_slices(&self, _: &str, _: &str, from: &str) -> BoxFuture<'_, Result<(), String>> {
            self.watches
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let from: u64 = from.parse().unwrap();
            let mut rx = self.written.subscribe();
            let fails = self.watch_fails;
            Box::pin(async move {
                if fails {
                    return Err("410 Gone".into());
                }
                while *rx.borrow_and_update() <= from {
                    rx.changed().await.map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        }
        fn create_slice(&self, mut slice: Value) -> BoxFuture<'_, Result<Value, String>> {
            self.write(|m, rv| {
                slice["metadata"]["name"] = json!(format!("s{rv}"));
                m.insert(format!("s{rv}"), slice.clone());
            });
            Box::pin(async move { Ok(slice) })
        }
        fn update_slice(&self, slice: Value) -> BoxFuture<'_, Result<Value, String>> {
            self.write(|m, _| {
                m.insert(
                    slice["metadata"]["name"].as_str().unwrap().into(),
                    slice.clone(),
                );
            });
            Box::pin(async move { Ok(slice) })
        }
        fn delete_slice(&self, name: &str) -> BoxFuture<'_, Result<(), String>> {
            self.write(|m, _| {
                m.remove(name);
            });
            Box::pin(async { Ok(()) })
        }
    }

    struct NoVm;
    impl Held for NoVm {
        fn vm_held(&self) -> BoxFuture<'_, Result<BTreeSet<String>, String>> {
            Box::pin(async { Ok(BTreeSet::new()) })
        }
    }

    fn publisher(api: Arc<Api>) -> Publisher {
        let config = KubernetesConfig::from_toml(
            "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
        )
        .unwrap();
        let devices = vec![crate::testing::device("0000:17:00.0", "GPU")];
        Publisher::new("n", config, Arc::new(devices), api, Arc::new(NoVm))
    }

    #[tokio::test]
    async fn a_deleted_slice_is_back_through_the_watch_before_the_next_tick() {
        let api = Arc::new(Api::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run(
            publisher(api.clone()),
            std::time::Duration::from_secs(3600),
            async {
                let _ = stopped.await;
            },
        ));
        let mut written = api.written.subscribe();
        async fn until(api: &Api, written: &mut tokio::sync::watch::Receiver<u64>, want: Vec<i64>) {
            while api.generations() != want {
                written.changed().await.unwrap();
            }
        }
        let wait = std::time::Duration::from_secs(10);
        tokio::time::timeout(wait, until(&api, &mut written, vec![1]))
            .await
            .unwrap();
        let name = api.st.lock().unwrap().1.keys().next().unwrap().clone();
        api.write(|m, _| {
            m.remove(&name);
        });
        tokio::time::timeout(wait, until(&api, &mut written, vec![2]))
            .await
            .unwrap();
        stop.send(()).unwrap();
        task.await.unwrap();
    }

    /// Devices that can be unplugged, with a presence fingerprint that says so.
    struct Plugged(std::sync::Mutex<Vec<Device>>);
    impl DeviceSource for Plugged {
        fn devices(&self) -> Vec<Device> {
            self.0.lock().unwrap().clone()
        }
        fn presence(&self) -> Option<u64> {
            Some(self.0.lock().unwrap().len() as u64)
        }
    }

    #[tokio::test]
    async fn a_device_unplugged_leaves_the_slice_before_the_next_tick() {
        let api = Arc::new(Api::default());
        let config = KubernetesConfig::from_toml(
            "[kubernetes]\n[[kubernetes.configurations]]\nname = \"gpu\"\n",
        )
        .unwrap();
        let t = crate::testing::device;
        let devices = Arc::new(Plugged(std::sync::Mutex::new(vec![
            t("0000:17:00.0", "GPU"),
            t("0000:31:00.0", "GPU"),
        ])));
        let p = Publisher::new("n", config, devices.clone(), api.clone(), Arc::new(NoVm));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run(p, std::time::Duration::from_secs(3600), async {
            let _ = stopped.await;
        }));
        let mut written = api.written.subscribe();
        let count = |api: &Api| -> Vec<usize> {
            let g = api.st.lock().unwrap();
            g.1.values()
                .map(|s| s["spec"]["devices"].as_array().unwrap().len())
                .collect()
        };
        let wait = std::time::Duration::from_secs(10);
        tokio::time::timeout(wait, async {
            while count(&api) != vec![2] {
                written.changed().await.unwrap();
            }
        })
        .await
        .unwrap();
        devices.0.lock().unwrap().pop();
        tokio::time::timeout(wait, async {
            while count(&api) != vec![1] {
                written.changed().await.unwrap();
            }
        })
        .await
        .unwrap();
        assert_eq!(api.generations(), vec![2]);
        stop.send(()).unwrap();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_fails_waits_for_the_tick() {
        use std::sync::atomic::Ordering::SeqCst;
        let api = Arc::new(Api {
            watch_fails: true,
            ..Api::default()
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run(
            publisher(api.clone()),
            std::time::Duration::from_secs(10),
            async {
                let _ = stopped.await;
            },
        ));
        // Ticks at 0, 10, ..., 90 s (the clock is paused and moves when idle).
        tokio::time::sleep(std::time::Duration::from_secs(95)).await;
        stop.send(()).unwrap();
        task.await.unwrap();
        assert_eq!(api.generations(), vec![1]);
        assert_eq!(api.lists.load(SeqCst), 10);
        assert_eq!(
            api.watches.load(SeqCst),
            10,
            "one watch a step, no retry loop"
        );
    }
}
