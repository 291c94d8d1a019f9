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
    /// Where kubelet and the container runtime are.
    #[command(flatten)]
    kubelet: accel_agent::node::Kubelet,
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

pub fn run(a: AgentArgs) -> anyhow::Result<()> {
    let settings = settings(&a)?;
    crate::init_tracing(&settings.log_format);
    match a.command {
        Some(AgentCommand::Check { format }) => check(settings, &format),
        None => {
            let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            rt.block_on(agent(settings, a.once, a.kubelet))
        }
    }
}

/// The node through its builder (`accel_agent::Node`); `--once` reports once.
async fn agent(
    mut settings: accel_agent::Settings,
    once: bool,
    kubelet: accel_agent::node::Kubelet,
) -> anyhow::Result<()> {
    settings.find_server().await.map_err(anyhow::Error::msg)?;
    // Configuration errors stop the agent here, before anything is served or sent.
    settings.require_node().map_err(anyhow::Error::msg)?;
    let addr = settings.metrics_listen;
    let mut node = accel_agent::Node::builder(settings)
        .commit(crate::COMMIT)
        .kubelet(kubelet);
    if !once {
        let listener = tokio::net::TcpListener::bind(addr).await;
        node = node.metrics(
            listener
                .with_context(|| format!("binding the metrics port (metrics_listen) to {addr}"))?,
        );
    }
    let node = node.build()?;
    let agent = node.agent().clone();
    // A [[cleaning]] rule that cannot work for a device stops the agent here, naming
    // the device and the reason, before anything is served or sent.
    agent.check_cleaning().await?;
    let s = &agent.settings;
    if once {
        let found = agent.check_node().await?;
        tracing::info!(node = %s.node, compute_node = %found.compute_node_uuid, "compute node found");
        let o = agent.step().await?;
        let unchanged = if o.unchanged { " (unchanged)" } else { "" };
        println!(
            "reported: {} added, {} removed, {} kept, {} vanished{unchanged}",
            o.added, o.removed, o.kept, o.vanished
        );
        return Ok(());
    }
    node.run(crate::shutdown_signal()).await
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
