//! `accel device list|clean|release`: devices cleaned between tenants (issue 33).
//! `list` shows every device provider with its cleaning state, its last cleaning and
//! how long it took; `clean` asks the agent to clean a device again (after a
//! `clean_failed`); `release` offers it again after an operator checked it by hand.
//! All three are admin only on the server, which logs the two actions.

use super::http::{api, failed};
use super::{output, Connection};
use clap::Subcommand;
use serde_json::Value;

#[derive(Subcommand, Debug)]
pub enum DeviceCommand {
    /// List device providers with their cleaning state (admin).
    #[command(after_help = "Example:\n  accel device list --hostname compute-1")]
    List {
        /// Only this host's devices.
        #[arg(long)]
        hostname: Option<String>,
    },
    /// Clean a device again (retry after clean_failed), by device or provider uuid (admin).
    #[command(after_help = "Example:\n  accel device clean 5c8e5ef0-3a0c-4a8f-9d51-6f1b0f2c9a11")]
    Clean { uuid: String },
    /// Offer a device again after a manual check, by device or provider uuid (admin).
    #[command(
        after_help = "Example:\n  accel device release 5c8e5ef0-3a0c-4a8f-9d51-6f1b0f2c9a11"
    )]
    Release { uuid: String },
}

const COLUMNS: &[&str] = &[
    "hostname",
    "name",
    "rp_uuid",
    "cleaned_on_release",
    "state",
    "reason",
    "finished_at",
    "last_duration_ms",
];

pub async fn run(conn: &Connection, cmd: DeviceCommand) -> anyhow::Result<String> {
    let c = api(conn)?;
    let rows = match cmd {
        DeviceCommand::List { hostname } => c.device_cleanings(hostname.as_deref()).await,
        DeviceCommand::Clean { uuid } => c.device_cleaning_action(&uuid, "clean").await,
        DeviceCommand::Release { uuid } => c.device_cleaning_action(&uuid, "release").await,
    }
    .map_err(failed)?;
    let items: Vec<Value> = rows
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    Ok(output::list(conn.format, &items, COLUMNS))
}
