//! The plugins' run loop: three thin shells around testable steps, driven by timers
//! until the shutdown future resolves.
//!
//! - every `presence_interval`: [`DeviceSource::presence`], and the devices at once
//!   when it changed (a device unplugged or added);
//! - every `device_interval`: [`DeviceSource::devices`] (on a blocking thread: it may
//!   read sysfs) into [`SlotTable::set_devices`], then the CDI spec files;
//! - every `watch_interval`: [`Registrar::step`] (serve, register, re-register), once
//!   [`Syncer::restore`] has put the recorded usage back; and [`Syncer::step`] when the
//!   table changed since the last save;
//! - every `reclaim_interval`: [`Reclaimer::step`], then [`Syncer::step`] (so devices
//!   a VM took are noticed within that interval even when nothing else changes).

use crate::config::KubernetesConfig;
use crate::device::DeviceSource;
use crate::kubelet::Registrar;
use crate::metrics::{KubeletMetrics, Pulse};
use crate::podresources::Reclaimer;
use crate::slots::SlotTable;
use crate::state::Shared;
use crate::usage::{InMemory, Syncer, UsageRecord};
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
    /// How often [`DeviceSource::presence`] is compared with its last value (a
    /// change triggers a full refresh at once): unplugged or new devices reach
    /// ListAndWatch within this plus one discovery.
    pub presence_interval: Duration,
    pub watch_interval: Duration,
    pub reclaim_interval: Duration,
    /// Where Allocate calls, registrations and slot counts are counted (the agent's
    /// `/metrics`); `None` counts nothing.
    pub metrics: Option<Arc<KubeletMetrics>>,
    /// Beaten at every turn of the run loop (the agent's liveness); `None` beats nothing.
    pub pulse: Option<Pulse>,
}

impl Options {
    pub fn new(node: impl Into<String>) -> Options {
        Options {
            node: node.into(),
            kubelet_dir: DEFAULT_KUBELET_DIR.into(),
            pod_resources_socket: DEFAULT_POD_RESOURCES_SOCKET.into(),
            device_interval: Duration::from_secs(10),
            presence_interval: Duration::from_millis(50),
            watch_interval: Duration::from_secs(1),
            reclaim_interval: Duration::from_secs(10),
            metrics: None,
            pulse: None,
        }
    }
}

/// [`run_with`] without a usage record: claims live as long as the process.
pub async fn run(
    config: KubernetesConfig,
    source: Arc<dyn DeviceSource>,
    options: Options,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    run_with(config, source, Arc::new(InMemory), options, shutdown).await
}

/// Serves the device plugins of `config` for the devices of `source` until
/// `shutdown` resolves, then stops every server and removes its socket. Usage is
/// restored from `record` before any plugin registers and saved to it after changes.
/// A kubelet (or record) that is absent or does not answer only delays registration
/// (retried every `watch_interval`); it never blocks the caller's discovery.
pub async fn run_with(
    config: KubernetesConfig,
    source: Arc<dyn DeviceSource>,
    record: Arc<dyn UsageRecord>,
    options: Options,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let shared = Shared::new(SlotTable::new(options.node.clone(), &config));
    let mut registrar = Registrar::new(
        shared.clone(),
        config.resource_domain.clone(),
        options.kubelet_dir.clone(),
    )
    .with_metrics(options.metrics.clone());
    let mut reclaimer = Reclaimer::new(
        shared.clone(),
        options.pod_resources_socket.clone(),
        config.reclaim_grace,
    );
    let mut syncer = Syncer::new(shared.clone(), record);
    // Every Allocate's grant is saved (and so checked by the server's hand-out rule)
    // before kubelet hears of it; the saves stay in this one loop, in order.
    let (saver, mut grants) = tokio::sync::mpsc::channel(16);
    shared.set_saver(saver);
    shared.set_pod_resources(options.pod_resources_socket.clone());
    let refresh = |found: Vec<crate::device::Device>| {
        let changed = shared.write(|t| {
            let changed = t.set_devices(&found);
            (changed, changed)
        });
        if changed {
            let by_config = shared.read(|t| t.devices_by_configuration());
            if let Err(e) =
                crate::cdi::write_specs(&config.cdi_dir, &config.resource_domain, &by_config)
            {
                tracing::warn!(dir = %config.cdi_dir.display(), error = %e, "CDI specs not written");
            }
        }
    };
    // Devices first: restoring skips the slots of devices not found yet.
    let first = {
        let source = source.clone();
        tokio::task::spawn_blocking(move || source.devices()).await?
    };
    refresh(first);
    let mut saved = shared.subscribe();
    let mut devices = tokio::time::interval(options.device_interval);
    let mut presence = tokio::time::interval(options.presence_interval);
    let mut watch = tokio::time::interval(options.watch_interval);
    let mut reclaim = tokio::time::interval(options.reclaim_interval);
    for i in [&mut devices, &mut presence, &mut watch, &mut reclaim] {
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    let mut last_presence = {
        let source = source.clone();
        tokio::task::spawn_blocking(move || source.presence()).await?
    };
    tokio::pin!(shutdown);
    loop {
        if let Some(p) = &options.pulse {
            p.beat();
        }
        tokio::select! {
            _ = &mut shutdown => break,
            Some(reply) = grants.recv() => {
                let saved = syncer.confirm(reclaimer.pods()).await;
                if let Err(e) = &saved {
                    tracing::warn!(error = %e, "a grant's usage save failed; the Allocate is refused");
                }
                let _ = reply.send(saved);
            }
            _ = devices.tick() => {
                let source = source.clone();
                let found = tokio::task::spawn_blocking(move || source.devices()).await?;
                refresh(found);
            }
            _ = presence.tick(), if last_presence.is_some() => {
                let probe = source.clone();
                let now = tokio::task::spawn_blocking(move || probe.presence()).await?;
                if now != last_presence {
                    last_presence = now;
                    let source = source.clone();
                    let found = tokio::task::spawn_blocking(move || source.devices()).await?;
                    refresh(found);
                }
            }
            _ = watch.tick() => {
                if !syncer.restored() {
                    match syncer.restore().await {
                        Ok(n) => tracing::info!(slots = n, "slot usage restored"),
                        Err(e) => {
                            tracing::warn!(error = %e, "slot usage not restored yet; plugins wait");
                            continue;
                        }
                    }
                }
                if saved.has_changed().unwrap_or(false) {
                    saved.borrow_and_update();
                    if let Err(e) = syncer.step(reclaimer.pods()).await {
                        tracing::warn!(error = %e, "slot usage not saved; retried");
                    }
                }
                let r = registrar.step().await;
                for (resource, why) in &r.failed {
                    tracing::debug!(%resource, why, "device plugin not registered yet");
                }
                if let Some(m) = &options.metrics {
                    m.slot_counts(&shared.read(|t| t.slot_counts()));
                }
            }
            _ = reclaim.tick() => {
                if let Err(e) = reclaimer.step(Instant::now()).await {
                    tracing::debug!(error = %e, "pod-resources unavailable; nothing reclaimed");
                }
                if syncer.restored() {
                    saved.borrow_and_update();
                    if let Err(e) = syncer.step(reclaimer.pods()).await {
                        tracing::warn!(error = %e, "slot usage not saved; retried");
                    }
                }
            }
        }
    }
    registrar.shutdown();
    Ok(())
}
