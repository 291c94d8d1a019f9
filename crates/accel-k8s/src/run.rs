//! The plugins' run loop: three thin shells around testable steps, driven by timers
//! until the shutdown future resolves.
//!
//! - every `device_interval`: [`DeviceSource::devices`] (on a blocking thread: it may
//!   read sysfs) into [`SlotTable::set_devices`];
//! - every `watch_interval`: [`Registrar::step`] (serve, register, re-register);
//! - every `reclaim_interval`: [`Reclaimer::step`].

use crate::config::KubernetesConfig;
use crate::device::DeviceSource;
use crate::kubelet::Registrar;
use crate::podresources::Reclaimer;
use crate::slots::SlotTable;
use crate::state::Shared;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Kubelet's device plugin directory.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet/device-plugins";
/// Kubelet's pod-resources socket.
pub const DEFAULT_POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Where kubelet is and how often to look.
#[derive(Debug, Clone)]
pub struct Options {
    /// This node's name (the `<node>` of seed 001's usage strings, and part of the
    /// instance hash).
    pub node: String,
    /// `--kubelet-dir`: the plugins serve only while it exists.
    pub kubelet_dir: PathBuf,
    /// `--pod-resources-socket`.
    pub pod_resources_socket: PathBuf,
    pub device_interval: Duration,
    pub watch_interval: Duration,
    pub reclaim_interval: Duration,
}

impl Options {
    pub fn new(node: impl Into<String>) -> Options {
        Options {
            node: node.into(),
            kubelet_dir: DEFAULT_KUBELET_DIR.into(),
            pod_resources_socket: DEFAULT_POD_RESOURCES_SOCKET.into(),
            device_interval: Duration::from_secs(10),
            watch_interval: Duration::from_secs(1),
            reclaim_interval: Duration::from_secs(10),
        }
    }
}

/// Serves the device plugins of `config` for the devices of `source` until
/// `shutdown` resolves, then stops every server and removes its socket. A kubelet
/// that is absent or does not answer only delays registration (retried every
/// `watch_interval`); it never blocks the caller's discovery.
pub async fn run(
    config: KubernetesConfig,
    source: Arc<dyn DeviceSource>,
    options: Options,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let shared = Shared::new(SlotTable::new(options.node.clone(), &config));
    let mut registrar = Registrar::new(
        shared.clone(),
        config.resource_domain.clone(),
        options.kubelet_dir.clone(),
    );
    let reclaimer = Reclaimer::new(
        shared.clone(),
        options.pod_resources_socket.clone(),
        config.reclaim_grace,
    );
    let mut devices = tokio::time::interval(options.device_interval);
    let mut watch = tokio::time::interval(options.watch_interval);
    let mut reclaim = tokio::time::interval(options.reclaim_interval);
    for i in [&mut devices, &mut watch, &mut reclaim] {
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = devices.tick() => {
                let source = source.clone();
                let found = tokio::task::spawn_blocking(move || source.devices()).await?;
                shared.write(|t| {
                    let changed = t.set_devices(&found);
                    (changed, changed)
                });
            }
            _ = watch.tick() => {
                let r = registrar.step().await;
                for (resource, why) in &r.failed {
                    tracing::debug!(%resource, why, "device plugin not registered yet");
                }
            }
            _ = reclaim.tick() => {
                if let Err(e) = reclaimer.step(Instant::now()).await {
                    tracing::debug!(error = %e, "pod-resources unavailable; nothing reclaimed");
                }
            }
        }
    }
    registrar.shutdown();
    Ok(())
}
