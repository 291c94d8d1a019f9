//! `accel agent`: the node agent (library `accel_agent`), and `accel agent check`, the
//! offline look at what the agent would report and what Nova's `[pci]` rules claim.

use anyhow::{bail, Context};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    command: Option<AgentCommand>,
    /// TOML file with the same keys as these flags (flags win).
    #[arg(long, env = "ACCEL_AGENT_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// The accelerator API root (default http://127.0.0.1:6666).
    #[arg(long, env = "ACCEL_AGENT_SERVER", global = true)]
    server: Option<String>,
    /// The compute node's provider name: Nova's hypervisor_hostname.
    #[arg(long, env = "ACCEL_AGENT_NODE", global = true)]
    node: Option<String>,
    /// Sent as X-Auth-Token (default admin, for noauth servers).
    #[arg(long, env = "ACCEL_AGENT_TOKEN", global = true)]
    token: Option<String>,
    /// Where sysfs is mounted (default /sys).
    #[arg(long, global = true)]
    sysfs_root: Option<PathBuf>,
    /// Comma-separated drivers (default: all): nvidia, intel_fpga, xilinx, qat, nvme, nic, fake.
    #[arg(long, value_delimiter = ',', global = true)]
    drivers: Option<Vec<String>>,
    /// Seconds between reports (default 60).
    #[arg(long, global = true)]
    interval: Option<u64>,
    /// Discover and report once, then exit (non-zero with the reason on failure).
    #[arg(long)]
    once: bool,
    /// Nova's configuration file: devices its [pci] device_spec rules match are left to Nova.
    #[arg(long, global = true)]
    nova_config: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum AgentCommand {
    /// Print the devices the agent would report and every conflict with Nova's [pci]
    /// rules; exit non-zero when there is a conflict (or, with --node, when the server
    /// does not know the compute node).
    Check,
}

fn settings(a: &AgentArgs) -> anyhow::Result<accel_agent::Settings> {
    accel_agent::Settings::load(accel_agent::Flags {
        config: a.config.clone(),
        server: a.server.clone(),
        node: a.node.clone(),
        token: a.token.clone(),
        sysfs_root: a.sysfs_root.clone(),
        drivers: a.drivers.clone(),
        interval_seconds: a.interval,
        nova_config: a.nova_config.clone(),
    })
    .map_err(anyhow::Error::msg)
}

pub fn run(a: AgentArgs) -> anyhow::Result<()> {
    let settings = settings(&a)?;
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match a.command {
        Some(AgentCommand::Check) => rt.block_on(check(settings)),
        None => rt.block_on(agent(settings, a.once)),
    }
}

async fn agent(settings: accel_agent::Settings, once: bool) -> anyhow::Result<()> {
    let mut agent = accel_agent::Agent::new(settings)?;
    let node = agent.check_node().await?;
    tracing::info!(node = %agent.settings.node, compute_node = %node.compute_node_uuid, "compute node found");
    if once {
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
    agent.run(crate::shutdown_signal()).await;
    Ok(())
}

async fn check(settings: accel_agent::Settings) -> anyhow::Result<()> {
    let with_node = !settings.node.is_empty();
    let agent = accel_agent::Agent::new(settings)?;
    let d = agent.discover();
    for w in &d.warnings {
        println!("skipped {w}");
    }
    for dev in &d.devices {
        let regions = if dev.regions.is_empty() {
            String::new()
        } else {
            format!(", {} region(s)", dev.regions.len())
        };
        println!(
            "device {} {} {} ({}){regions}, functions {}",
            dev.address,
            dev.device_type,
            dev.model,
            dev.driver,
            dev.functions.len()
        );
    }
    for c in &d.conflicts {
        println!(
            "conflict: device {} function {} is claimed by Nova's rule {}",
            c.device, c.function, c.rule
        );
    }
    let mut failed = Vec::new();
    if !d.conflicts.is_empty() {
        failed.push(format!(
            "{} function(s) claimed by both accel and Nova's [pci] rules: remove them from Nova's device_spec or from accel's drivers",
            d.conflicts.len()
        ));
    }
    if with_node {
        if let Err(e) = agent.check_node().await {
            failed.push(e.to_string());
        }
    }
    if !failed.is_empty() {
        bail!(failed.join("; "));
    }
    println!("ok: {} device(s), no conflict", d.devices.len());
    Ok(())
}
