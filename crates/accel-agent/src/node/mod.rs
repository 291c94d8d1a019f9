//! The node's composition root, as `App::builder` is the server's: [`Node::builder`]
//! takes the settings, an already-bound metrics listener, kubelet's directories and
//! (in [`Node::run`]) a shutdown future, and builds ONE [`Agent`], the device
//! discoverer that the reports, the device plugins and the DRA driver share. `accel
//! agent` and every test that runs an agent build through it.
//!
//! ```text
//! Node::builder(settings).metrics(listener).kubelet(dirs).build()?.run(shutdown)
//!   metrics port (/metrics /livez /readyz) ◀── Health ◀── each worker's Beat
//!   Supervisor (accel_supervisor; one backoff, restarts, feeds /readyz):
//!     device plugins | DRA slices + DRA kubelet plugin     (serve at once)
//!     ── wait_for_server ──▶ reporting | programming | cleaning   (workers.rs)
//!                 cleaning ── fpga-default Handover ──▶ programming
//! ```

mod devices;
mod workers;

pub use devices::AgentDevices;

use crate::agent::{Agent, AgentError, Backoff};
use crate::config::Settings;
use crate::drivers::Driver;
use crate::kubernetes::ServerUsage;
use crate::metrics::Metrics;
use crate::observe::{self, Health};
use accel_supervisor::Supervisor;
use anyhow::Context;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Where kubelet and the container runtime are (`accel agent`'s flags).
#[derive(Debug, Clone, clap::Args)]
pub struct Kubelet {
    /// Kubelet's device plugin directory; the [kubernetes] plugins serve while it exists.
    #[arg(long, default_value = accel_k8s::run::DEFAULT_KUBELET_DIR)]
    pub kubelet_dir: PathBuf,
    /// Kubelet's pod-resources socket (which pods hold which slots).
    #[arg(long, default_value = accel_k8s::run::DEFAULT_POD_RESOURCES_SOCKET)]
    pub pod_resources_socket: PathBuf,
    /// Where the CDI spec files go (default: [kubernetes] cdi_dir, else /var/run/cdi).
    #[arg(long)]
    pub cdi_dir: Option<PathBuf>,
    /// Kubelet's plugin registry: the DRA driver's registration socket goes here
    /// ([kubernetes] mode = "dra").
    #[arg(long = "kubelet-registry-dir", default_value = accel_k8s::dra::DEFAULT_REGISTRY_DIR)]
    pub registry_dir: PathBuf,
    /// Kubelet's plugin directory: the DRA driver serves <dir>/<driver>/dra.sock.
    #[arg(long = "kubelet-plugins-dir", default_value = accel_k8s::dra::DEFAULT_PLUGINS_DIR)]
    pub plugins_dir: PathBuf,
    /// Kubeconfig for the Kubernetes API (DRA mode; default: KUBECONFIG, else the
    /// in-cluster service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

impl Default for Kubelet {
    fn default() -> Kubelet {
        Kubelet {
            kubelet_dir: accel_k8s::run::DEFAULT_KUBELET_DIR.into(),
            pod_resources_socket: accel_k8s::run::DEFAULT_POD_RESOURCES_SOCKET.into(),
            cdi_dir: None,
            registry_dir: accel_k8s::dra::DEFAULT_REGISTRY_DIR.into(),
            plugins_dir: accel_k8s::dra::DEFAULT_PLUGINS_DIR.into(),
            kubeconfig: None,
        }
    }
}

/// Builds a [`Node`]; see the module doc.
pub struct NodeBuilder {
    settings: Settings,
    listener: Option<TcpListener>,
    kubelet: Kubelet,
    drivers: Option<Vec<Box<dyn Driver>>>,
    kube_api: Option<crate::dra::KubeApi>,
    plugin_options: Option<accel_k8s::Options>,
    commit: &'static str,
    stale_after: Option<Duration>,
    backoff: Backoff,
}

impl NodeBuilder {
    /// The metrics port's listener, already bound (tests bind port 0).
    pub fn metrics(mut self, listener: TcpListener) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Kubelet's directories and sockets.
    pub fn kubelet(mut self, kubelet: Kubelet) -> Self {
        self.kubelet = kubelet;
        self
    }

    /// Drivers built outside the settings (tests' fakes).
    pub fn drivers(mut self, drivers: Vec<Box<dyn Driver>>) -> Self {
        self.drivers = Some(drivers);
        self
    }

    /// The Kubernetes API of DRA mode (default: the kubeconfig of [`Kubelet`]).
    pub fn kube_api(mut self, api: crate::dra::KubeApi) -> Self {
        self.kube_api = Some(api);
        self
    }

    /// The device plugins' intervals (tests shorten them); node, directories and
    /// metrics are the node's own.
    pub fn plugin_options(mut self, options: accel_k8s::Options) -> Self {
        self.plugin_options = Some(options);
        self
    }

    /// The build's commit, shown by `/metrics`.
    pub fn commit(mut self, commit: &'static str) -> Self {
        self.commit = commit;
        self
    }

    /// How long a worker may stay silent before `/livez` fails (default: three
    /// minutes, or three programming intervals when longer).
    pub fn stale_after(mut self, stale: Duration) -> Self {
        self.stale_after = Some(stale);
        self
    }

    /// The wait for the server at start-up and the supervisor's restart backoff.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The node's one agent and its health; a configuration error (no node name, an
    /// unknown driver, a bad Nova file) stops here, before anything is served or sent.
    pub fn build(self) -> Result<Node, AgentError> {
        let s = self.settings;
        s.require_node()?;
        let metrics = Arc::new(Metrics::built_from(self.commit));
        let kubelet_mode = s
            .kubernetes
            .as_ref()
            .filter(|k| !k.configurations.is_empty())
            .map(|k| k.mode);
        // A worker beats on every step and holds its beat through a step's own bound;
        // three minutes of silence past that is a stuck worker.
        let stale = self
            .stale_after
            .unwrap_or_else(|| Duration::from_secs(180).max(s.program_interval * 3));
        let health = Arc::new(Health::new(metrics, kubelet_mode, stale));
        health.beat();
        let agent = match self.drivers {
            Some(d) => Agent::with_drivers(s, d)?,
            None => Agent::new(s)?,
        };
        Ok(Node {
            agent: Arc::new(agent.observe(health.clone())),
            health,
            listener: self.listener,
            kubelet: self.kubelet,
            kube_api: self.kube_api,
            plugin_options: self.plugin_options,
            backoff: self.backoff,
            commit: self.commit,
        })
    }
}

/// One compute node's agent, built; [`Node::run`] runs it.
pub struct Node {
    agent: Arc<Agent>,
    health: Arc<Health>,
    listener: Option<TcpListener>,
    kubelet: Kubelet,
    kube_api: Option<crate::dra::KubeApi>,
    plugin_options: Option<accel_k8s::Options>,
    backoff: Backoff,
    commit: &'static str,
}

impl Node {
    pub fn builder(settings: Settings) -> NodeBuilder {
        NodeBuilder {
            settings,
            listener: None,
            kubelet: Kubelet::default(),
            drivers: None,
            kube_api: None,
            plugin_options: None,
            commit: "unknown",
            stale_after: None,
            backoff: Backoff::default(),
        }
    }

    /// The node's one agent (reports, programming, cleaning, discovery).
    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// What the metrics port answers from.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// The agent's discovery as the device plugins and the DRA driver see it.
    pub fn devices(&self) -> Arc<AgentDevices> {
        Arc::new(AgentDevices::new(self.agent.clone()))
    }

    /// The `[kubernetes]` table with the node's CDI directory, when plugins are on.
    fn kubernetes(&self) -> Option<accel_k8s::config::KubernetesConfig> {
        let mut config = self.agent.settings.kubernetes.clone()?;
        if config.configurations.is_empty() {
            return None;
        }
        if let Some(dir) = &self.kubelet.cdi_dir {
            config.cdi_dir = dir.clone();
        }
        Some(config)
    }

    /// A kubelet worker's liveness beat, registered with the metrics port: `/livez`
    /// fails when its run loop stops turning. (The DRA kubelet plugin itself is a gRPC
    /// server with no loop of its own: it serves or it fails, and the supervisor sees
    /// a failure.)
    fn pulse(&self, worker: &'static str) -> accel_k8s::Pulse {
        let beat = self.health.worker(worker);
        accel_k8s::Pulse::new(move || beat.beat())
    }

    /// The DRA kubelet plugin's parts over `api` (`None` without `[kubernetes]`).
    pub fn dra(&self, api: crate::dra::KubeApi) -> Option<Dra> {
        let config = self.kubernetes()?;
        let s = &self.agent.settings;
        Some(Dra {
            node: s.node.clone(),
            config,
            devices: self.devices(),
            api: Arc::new(api),
            claims: Arc::new(crate::dra::ServerClaims::new(
                self.agent.client.clone(),
                &s.node,
            )),
            metrics: self.health.metrics().kubelet.clone(),
            dra_metrics: self.health.metrics().dra.clone(),
            released: Arc::default(),
            partitioner: Arc::new(crate::dra::mig::AgentPartitions::new(self.agent.clone())),
        })
    }

    /// The device plugins' usage record and options.
    pub fn plugins(&self) -> (Arc<ServerUsage>, accel_k8s::Options) {
        let s = &self.agent.settings;
        let record = Arc::new(ServerUsage::with_client(self.agent.client.clone(), &s.node));
        let base = self
            .plugin_options
            .clone()
            .unwrap_or_else(|| accel_k8s::Options {
                kubelet_dir: self.kubelet.kubelet_dir.clone(),
                pod_resources_socket: self.kubelet.pod_resources_socket.clone(),
                ..accel_k8s::Options::new(s.node.clone())
            });
        let options = accel_k8s::Options {
            node: s.node.clone(),
            metrics: Some(self.health.metrics().kubelet.clone()),
            ..base
        };
        (record, options)
    }

    /// Serves the metrics port, starts the kubelet plugins, waits for the server (with
    /// backoff), then runs the reporting, programming and cleaning workers, all under
    /// one supervisor, until `shutdown` resolves.
    pub async fn run(
        mut self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        });
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let s = &self.agent.settings;
        let drivers = s
            .drivers
            .as_ref()
            .map_or_else(|| "all".into(), |d| d.join(","));
        let listen = self.listener.as_ref().and_then(|l| l.local_addr().ok());
        let listen = listen
            .map(|a| a.to_string())
            .unwrap_or_else(|| "none".into());
        tracing::info!(version = env!("CARGO_PKG_VERSION"), commit = self.commit, node = %s.node, server = %s.server, metrics_listen = %listen, drivers = %drivers, kubernetes = self.kubernetes().is_some(), "accel agent starting");
        let port = self
            .listener
            .take()
            .map(|l| tokio::spawn(observe::serve(l, self.health.clone(), stopped())));
        let mut sup = Supervisor::new(self.backoff);
        self.health.supervised(sup.running());
        self.spawn_kubelet(&mut sup)?;
        let found = self.agent.wait_for_server(self.backoff, stopped()).await;
        match found {
            Ok(Some(n)) => {
                tracing::info!(node = %self.agent.settings.node, compute_node = %n.compute_node_uuid, "compute node found");
                if let Err(e) = self.agent.recover_partitions().await {
                    tracing::warn!(cause = %e, "accounting for the node's GPU partitions after the start failed; held MIG partitions a reboot removed are not made again until the next start");
                }
                workers::spawn(&self.agent, &mut sup);
                stopped().await;
            }
            Ok(None) => {}
            Err(e) => {
                sup.shutdown().await;
                return Err(e.into());
            }
        }
        sup.shutdown().await;
        if let Some(p) = port {
            let _ = p.await;
        }
        tracing::info!("accel agent stopped");
        Ok(())
    }

    /// The device plugins, or the DRA driver and its slices, as supervised workers:
    /// they serve while the agent waits for the server (they restore their usage from
    /// it on their own once it answers).
    fn spawn_kubelet(&mut self, sup: &mut Supervisor) -> anyhow::Result<()> {
        let Some(config) = self.kubernetes() else {
            return Ok(());
        };
        if config.mode != accel_k8s::config::Mode::Dra {
            let (record, mut options) = self.plugins();
            options.pulse = Some(self.pulse("device plugins"));
            tracing::info!(kubelet_dir = %options.kubelet_dir.display(), configurations = config.configurations.len(), "kubelet device plugins enabled");
            let source: Arc<dyn accel_k8s::DeviceSource> = self.devices();
            sup.spawn("device plugins", move |mut stop| {
                let run = accel_k8s::run_with(
                    config.clone(),
                    source.clone(),
                    record.clone(),
                    options.clone(),
                    async move { stop.stopped().await },
                );
                async move { run.await.context("kubelet device plugins") }
            });
            return Ok(());
        }
        let api = match self.kube_api.take() {
            Some(api) => api,
            None => crate::dra::KubeApi::discover(self.kubelet.kubeconfig.as_deref())
                .map_err(anyhow::Error::msg)
                .context("the Kubernetes API (DRA mode)")?,
        };
        let Some(dra) = self.dra(api) else {
            return Ok(());
        };
        tracing::info!(kubernetes_api = %self.kubelet.kubeconfig.as_deref().map(|p| p.display().to_string()).unwrap_or_else(|| "KUBECONFIG or in-cluster".into()), "DRA kubelet plugin enabled");
        let driver = dra.driver();
        let pulse = self.pulse("dra slices");
        sup.spawn("dra slices", move |mut stop| {
            let publisher = dra.publisher().with_pulse(pulse.clone());
            let every = accel_k8s::dra::slices::PUBLISH_INTERVAL;
            async move {
                accel_k8s::dra::slices::run(publisher, every, async move { stop.stopped().await })
                    .await;
                Ok(())
            }
        });
        let (registry, plugins) = (
            self.kubelet.registry_dir.clone(),
            self.kubelet.plugins_dir.clone(),
        );
        sup.spawn("dra kubelet plugin", move |mut stop| {
            let (driver, registry, plugins) = (driver.clone(), registry.clone(), plugins.clone());
            async move {
                accel_k8s::dra::serve::serve(driver, &registry, &plugins, async move {
                    stop.stopped().await
                })
                .await
                .context("DRA kubelet plugin")
            }
        });
        Ok(())
    }
}

/// The DRA kubelet plugin's parts, over the node's one discoverer.
pub struct Dra {
    node: String,
    config: accel_k8s::config::KubernetesConfig,
    devices: Arc<AgentDevices>,
    api: Arc<crate::dra::KubeApi>,
    claims: Arc<crate::dra::ServerClaims>,
    metrics: Arc<accel_k8s::KubeletMetrics>,
    dra_metrics: Arc<accel_k8s::dra::metrics::DraMetrics>,
    /// The devices the driver's unprepare released, told to the publisher (tainted
    /// while they are cleaned).
    released: Arc<accel_k8s::dra::taints::Released>,
    /// Makes the claims' MIG devices (the agent's partitions manager).
    partitioner: Arc<crate::dra::mig::AgentPartitions>,
}

impl Dra {
    /// The kubelet plugin (NodePrepareResources, NodeUnprepareResources).
    pub fn driver(&self) -> Arc<accel_k8s::dra::Driver> {
        let d = accel_k8s::dra::Driver::new(
            self.node.clone(),
            self.config.clone(),
            self.devices.clone(),
            self.api.clone(),
            self.claims.clone(),
        );
        Arc::new(
            d.with_metrics(Some(self.metrics.clone()))
                .with_dra_metrics(self.dra_metrics.clone())
                .with_released(self.released.clone())
                .with_partitioner(self.partitioner.clone()),
        )
    }

    /// The node's ResourceSlices' publisher.
    pub fn publisher(&self) -> accel_k8s::dra::slices::Publisher {
        accel_k8s::dra::slices::Publisher::new(
            self.node.clone(),
            self.config.clone(),
            self.devices.clone(),
            self.api.clone(),
            self.claims.clone(),
        )
        .with_metrics(self.dra_metrics.clone())
        .with_released(self.released.clone())
    }
}
