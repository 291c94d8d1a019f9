//! `accel agent`: the node agent (library `accel_agent`), and `accel agent check`, the
//! offline look at what the agent would report and what Nova's `[pci]` rules claim.
//!
//! The long-running agent serves its metrics port first (so `/readyz` can say why
//! it is not ready), then waits for the server with backoff rather than exiting: under
//! a DaemonSet or systemd, exiting would be a crash loop. `--once` fails fast.

use anyhow::{bail, Context};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    command: Option<AgentCommand>,
    /// TOML file with the same keys as these flags (flags win).
    #[arg(long, env = "ACCEL_AGENT_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Discover and report once, then exit (non-zero with the reason on failure).
    #[arg(long)]
    once: bool,
    /// The agent's settings (`accel_agent::AgentConfig` declares each one).
    #[command(flatten)]
    flags: accel_agent::AgentFlags,
    /// Kubelet's device plugin directory; the [kubernetes] plugins serve while it exists.
    #[arg(long, default_value = accel_k8s::run::DEFAULT_KUBELET_DIR)]
    kubelet_dir: PathBuf,
    /// Kubelet's pod-resources socket (which pods hold which slots).
    #[arg(long, default_value = accel_k8s::run::DEFAULT_POD_RESOURCES_SOCKET)]
    pod_resources_socket: PathBuf,
    /// Where the CDI spec files go (default: [kubernetes] cdi_dir, else /var/run/cdi).
    #[arg(long)]
    cdi_dir: Option<PathBuf>,
    /// Kubelet's plugin registry: the DRA driver's registration socket goes here
    /// ([kubernetes] mode = "dra").
    #[arg(long, default_value = accel_k8s::dra::DEFAULT_REGISTRY_DIR)]
    kubelet_registry_dir: PathBuf,
    /// Kubelet's plugin directory: the DRA driver serves <dir>/<driver>/dra.sock.
    #[arg(long, default_value = accel_k8s::dra::DEFAULT_PLUGINS_DIR)]
    kubelet_plugins_dir: PathBuf,
    /// Kubeconfig for the Kubernetes API (DRA mode; default: KUBECONFIG, else the
    /// in-cluster service account).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

/// Where kubelet and the container runtime are.
struct KubeletPaths {
    kubelet_dir: PathBuf,
    pod_resources_socket: PathBuf,
    cdi_dir: Option<PathBuf>,
    registry_dir: PathBuf,
    plugins_dir: PathBuf,
    kubeconfig: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum AgentCommand {
    /// Explain what the agent sees: every PCI function it looked at (ids and names,
    /// kernel driver, NUMA node) and what it decided for each and why, then the
    /// providers it would report (classes, inventories, traits, health) and every
    /// conflict with Nova's [pci] rules, and whether each [[cleaning]] rule can work
    /// for each device it matches. Exits non-zero on a conflict, a failed driver or a
    /// rule that cannot work. Contacts neither the server nor Keystone (nor Glance);
    /// --node only names the providers.
    #[command(
        after_help = "Examples:\n  accel agent check\n  accel agent check --nova-config /etc/nova/nova.conf --node compute-1\n  accel agent check --config /etc/accel/agent.toml --format json"
    )]
    Check {
        /// Output format.
        #[arg(long, value_parser = ["text", "json"], default_value = "text")]
        format: String,
    },
}

fn settings(a: &AgentArgs) -> anyhow::Result<accel_agent::Settings> {
    accel_agent::Settings::load(a.config.as_deref(), a.flags.clone()).map_err(anyhow::Error::msg)
}

/// Logs to stderr as `format` says, filtered by `ACCEL_LOG` (default `info`); colours
/// only on a terminal, and never when `NO_COLOR` is set (<https://no-color.org>).
fn init_tracing(format: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("ACCEL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

pub fn run(a: AgentArgs) -> anyhow::Result<()> {
    let settings = settings(&a)?;
    init_tracing(&settings.log_format);
    match a.command {
        Some(AgentCommand::Check { format }) => check(settings, &format),
        None => {
            let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let paths = KubeletPaths {
                kubelet_dir: a.kubelet_dir,
                pod_resources_socket: a.pod_resources_socket,
                cdi_dir: a.cdi_dir,
                registry_dir: a.kubelet_registry_dir,
                plugins_dir: a.kubelet_plugins_dir,
                kubeconfig: a.kubeconfig,
            };
            rt.block_on(agent(settings, a.once, paths))
        }
    }
}

async fn agent(
    mut settings: accel_agent::Settings,
    once: bool,
    paths: KubeletPaths,
) -> anyhow::Result<()> {
    use accel_agent::observe;
    use std::sync::Arc;
    settings.find_server().await.map_err(anyhow::Error::msg)?;
    if once {
        let mut agent = accel_agent::Agent::new(settings)?;
        agent.check_cleaning().await?;
        let node = agent.check_node().await?;
        tracing::info!(node = %agent.settings.node, compute_node = %node.compute_node_uuid, "compute node found");
        let o = agent.step().await?;
        println!(
            "reported: {} added, {} removed, {} kept, {} vanished{}",
            o.added,
            o.removed,
            o.kept,
            o.vanished,
            if o.unchanged { " (unchanged)" } else { "" }
        );
        return Ok(());
    }
    // Configuration errors stop the agent here, before anything is served or sent.
    settings.require_node().map_err(anyhow::Error::msg)?;
    let metrics = Arc::new(accel_agent::metrics::Metrics::built_from(crate::COMMIT));
    let kubernetes_on = settings
        .kubernetes
        .as_ref()
        .is_some_and(|k| !k.configurations.is_empty());
    // The loop beats at least every programming interval, and once per backoff step
    // (at most a minute) while it waits; a report is bounded by the client's
    // timeout. Three minutes without a beat is a stuck loop.
    let stale = std::time::Duration::from_secs(180).max(settings.program_interval * 3);
    let probes = Arc::new(observe::Health::new(metrics.clone(), kubernetes_on, stale));
    probes.beat();
    let listener = tokio::net::TcpListener::bind(settings.metrics_listen)
        .await
        .with_context(|| {
            format!(
                "binding the metrics port (metrics_listen) to {}",
                settings.metrics_listen
            )
        })?;
    let agent = accel_agent::Agent::new(settings)?.observe(probes.clone());
    // A [[cleaning]] rule that cannot work for a device stops the agent here, naming
    // the device and the reason, before anything is served or sent.
    agent.check_cleaning().await?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = crate::COMMIT,
        node = %agent.settings.node,
        server = %agent.settings.server,
        metrics_listen = %listener.local_addr()?,
        drivers = %agent.settings.drivers.as_ref().map(|d| d.join(",")).unwrap_or_else(|| "all".into()),
        kubernetes = kubernetes_on,
        "accel agent starting"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = std::sync::Arc::new(stop_tx);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            crate::shutdown_signal().await;
            let _ = stop_tx.send(true);
        });
    }
    let metrics_port = tokio::spawn(observe::serve(
        listener,
        probes.clone(),
        stopped(stop_rx.clone()),
    ));
    // The plugins run beside the reports, in their own task: a kubelet that never
    // answers delays only their registration.
    let mut plugins = tokio::task::JoinSet::new();
    if let Some(mut config) = agent
        .settings
        .kubernetes
        .clone()
        .filter(|k| !k.configurations.is_empty())
    {
        if let Some(dir) = paths.cdi_dir {
            config.cdi_dir = dir;
        }
        let s = &agent.settings;
        if config.mode == accel_k8s::config::Mode::Dra {
            let api = accel_agent::dra::KubeApi::discover(paths.kubeconfig.as_deref())
                .map_err(anyhow::Error::msg)
                .context("the Kubernetes API (DRA mode)")?;
            let client = accel_agent::client::Client::with_auth(
                &s.server,
                s.auth().map_err(anyhow::Error::msg)?,
            )
            .context("the accelerator API endpoint")?;
            let api = Arc::new(api);
            let claims = Arc::new(accel_agent::dra::ServerClaims::new(client, &s.node));
            let devices: Arc<dyn accel_k8s::DeviceSource> = Arc::new(
                accel_agent::kubernetes::AgentDevices::new(accel_agent::Agent::new(s.clone())?),
            );
            let publisher = accel_k8s::dra::slices::Publisher::new(
                s.node.clone(),
                config.clone(),
                devices.clone(),
                api.clone(),
                claims.clone(),
            );
            let until = stopped(stop_rx.clone());
            plugins.spawn(async move {
                let every = accel_k8s::dra::slices::PUBLISH_INTERVAL;
                accel_k8s::dra::slices::run(publisher, every, until).await;
                Ok(())
            });
            let driver = Arc::new(
                accel_k8s::dra::Driver::new(s.node.clone(), config, devices, api, claims)
                    .with_metrics(Some(metrics.kubelet.clone())),
            );
            tracing::info!(kubernetes_api = %paths.kubeconfig.as_deref().map(|p| p.display().to_string()).unwrap_or_else(|| "KUBECONFIG or in-cluster".into()), "DRA kubelet plugin enabled");
            let until = stopped(stop_rx.clone());
            let (registry, plugins_dir) = (paths.registry_dir, paths.plugins_dir);
            plugins.spawn(async move {
                accel_k8s::dra::serve::serve(driver, &registry, &plugins_dir, until)
                    .await
                    .context("DRA kubelet plugin")
            });
        } else {
            let source = std::sync::Arc::new(accel_agent::kubernetes::AgentDevices::new(
                accel_agent::Agent::new(s.clone())?.observe(probes.clone()),
            ));
            let record = std::sync::Arc::new(accel_agent::kubernetes::ServerUsage::with_client(
                accel_agent::client::Client::with_auth(
                    &s.server,
                    s.auth().map_err(anyhow::Error::msg)?,
                )
                .context("the accelerator API endpoint")?,
                &s.node,
            ));
            let options = accel_k8s::Options {
                kubelet_dir: paths.kubelet_dir,
                pod_resources_socket: paths.pod_resources_socket,
                metrics: Some(metrics.kubelet.clone()),
                ..accel_k8s::Options::new(s.node.clone())
            };
            tracing::info!(
                kubelet_dir = %options.kubelet_dir.display(),
                configurations = config.configurations.len(),
                "kubelet device plugins enabled"
            );
            let until = stopped(stop_rx.clone());
            plugins.spawn(async move {
                accel_k8s::run_with(config, source, record, options, until)
                    .await
                    .context("kubelet device plugins")
            });
        }
    }
    // The plugins serve while the agent waits: they restore their usage from the
    // server on their own once it answers.
    match agent
        .wait_for_server(
            accel_agent::agent::Backoff::default(),
            stopped(stop_rx.clone()),
        )
        .await?
    {
        Some(node) => {
            tracing::info!(node = %agent.settings.node, compute_node = %node.compute_node_uuid, "compute node found")
        }
        None => {
            let _ = stop_tx.send(true);
            while let Some(ended) = plugins.join_next().await {
                ended.context("kubelet device plugins task")??;
            }
            let _ = metrics_port.await;
            return Ok(());
        }
    }
    let reports = agent.run(stopped(stop_rx.clone()));
    tokio::pin!(reports);
    tokio::select! {
        _ = &mut reports => {}
        Some(ended) = plugins.join_next() => {
            // The plugins end only at shutdown; earlier is a failure: stop and say so.
            let _ = stop_tx.send(true);
            reports.await;
            return ended.context("kubelet device plugins task")?;
        }
    }
    while let Some(ended) = plugins.join_next().await {
        ended.context("kubelet device plugins task")??;
    }
    let _ = stop_tx.send(true);
    let _ = metrics_port.await;
    tracing::info!("accel agent stopped");
    Ok(())
}

/// `accel agent check`: one discovery pass, explained; never calls the server or
/// Keystone (issue 31 item 4).
fn check(settings: accel_agent::Settings, format: &str) -> anyhow::Result<()> {
    let report = accel_agent::Agent::offline(settings)?.check();
    if format == "json" {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    let problems = report.problems();
    if !problems.is_empty() {
        bail!(problems.join("; "));
    }
    Ok(())
}
