//! `accel arq create|list|show|bind|unbind|delete`: accelerator requests.
//!
//! Bind, unbind and deleting by instance are Nova's calls upstream and need a service
//! token: `--service-token` (default: the `--token`) is sent as `X-Service-Token`.

use super::http::{api, failed};
use super::profiles::{deleted, segment};
use super::{output, Connection};
use accel_api::accelerator::{
    bind_ops, patch_entry, unbind_ops, Arq, ArqFilter, ArqPatch, ArqSelector, Client, NewArqs,
    PatchOp,
};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

#[derive(Subcommand, Debug)]
pub enum ArqCommand {
    /// Create the accelerator requests of a device profile (one per accelerator
    /// its groups ask for).
    #[command(after_help = "Example:\n  accel arq create dp1 -f json")]
    Create {
        /// The device profile's name (what a flavor's `accel:device_profile` names).
        device_profile: String,
        /// Only the ARQs of this group of the profile.
        #[arg(long)]
        group_id: Option<u32>,
    },
    /// List accelerator requests (the caller's project's; all for an admin).
    #[command(
        after_help = "Example:\n  accel arq list --instance 7c9e6679-7425-40de-944b-e07fc1f90ae7 --bind-state resolved"
    )]
    List {
        /// Only the ARQs bound to this instance.
        #[arg(long)]
        instance: Option<String>,
        /// With --instance: only when all are resolved (`resolved`; 423 otherwise).
        #[arg(long, value_name = "resolved", requires = "instance")]
        bind_state: Option<String>,
    },
    /// Show one accelerator request.
    #[command(after_help = "Example:\n  accel arq show 0f3b6b5e-1a0e-4c1e-9a51-0f6a3c0b9d2e")]
    Show {
        /// The accelerator request's uuid.
        arq: String,
    },
    /// Bind an accelerator request to a host, device provider and instance (Nova's
    /// call: sends the service token). The bind is accepted at once and finishes in
    /// the background; --wait waits until it is Bound or BindFailed.
    #[command(
        after_help = "Example (the device provider is the one `GET /resource_providers?name=<host>_FakeDevice`\n\
                            of the Placement API lists for the `--fake-devices <host>` source):\n  \
                            accel arq bind 0f3b6b5e-1a0e-4c1e-9a51-0f6a3c0b9d2e --hostname compute1 \\\n    \
                            --device-rp-uuid 2b9f1c5e-6d7a-4e3b-8c1d-9a0f5e4b3c2d \\\n    \
                            --instance-uuid 7c9e6679-7425-40de-944b-e07fc1f90ae7 --wait"
    )]
    Bind {
        /// The accelerator request's uuid.
        arq: String,
        /// The compute node (Nova's hypervisor hostname) the instance runs on.
        #[arg(long)]
        hostname: String,
        /// The Placement provider of the device (its deployable).
        #[arg(long)]
        device_rp_uuid: String,
        /// The instance the accelerator is for.
        #[arg(long)]
        instance_uuid: String,
        /// Wait until the bind is resolved (Bound or BindFailed; BindFailed exits 1).
        #[arg(long)]
        wait: bool,
        /// Seconds --wait waits at most.
        #[arg(long, default_value_t = 120, requires = "wait")]
        timeout: u64,
        #[command(flatten)]
        service: ServiceToken,
    },
    /// Unbind an accelerator request (Nova's call: sends the service token).
    #[command(after_help = "Example:\n  accel arq unbind 0f3b6b5e-1a0e-4c1e-9a51-0f6a3c0b9d2e")]
    Unbind {
        /// The accelerator request's uuid.
        arq: String,
        #[command(flatten)]
        service: ServiceToken,
    },
    /// Delete accelerator requests by uuid, or all of an instance's.
    #[command(
        after_help = "Examples:\n  accel arq delete 0f3b6b5e-1a0e-4c1e-9a51-0f6a3c0b9d2e\n  accel arq delete --instance 7c9e6679-7425-40de-944b-e07fc1f90ae7"
    )]
    Delete {
        /// The accelerator requests' uuids.
        #[arg(required_unless_present = "instance", conflicts_with = "instance")]
        arqs: Vec<String>,
        /// All accelerator requests of this instance (Nova's call: sends the service
        /// token).
        #[arg(long)]
        instance: Option<String>,
        #[command(flatten)]
        service: ServiceToken,
    },
}

/// The service token of Nova's calls, shown with the connection's flags.
#[derive(Args, Debug)]
#[command(next_help_heading = super::CONNECTION_HEADING)]
pub struct ServiceToken {
    /// Sent as X-Service-Token [default for bind, unbind and delete --instance: the
    /// --token].
    #[arg(long, env = "ACCEL_SERVICE_TOKEN")]
    service_token: Option<String>,
}

const LIST_COLUMNS: &[&str] = &[
    "uuid",
    "state",
    "device_profile_name",
    "device_profile_group_id",
    "hostname",
    "instance_uuid",
    "attach_handle_type",
];
const SHOW_FIELDS: &[&str] = &[
    "uuid",
    "state",
    "device_profile_name",
    "device_profile_group_id",
    "hostname",
    "device_rp_uuid",
    "instance_uuid",
    "project_id",
    "attach_handle_type",
    "attach_handle_uuid",
    "attach_handle_info",
    "created_at",
    "updated_at",
];

pub async fn run(conn: &Connection, cmd: ArqCommand) -> anyhow::Result<String> {
    let api = api(conn)?;
    let f = conn.format;
    let service = |s: &ServiceToken| {
        s.service_token
            .clone()
            .unwrap_or_else(|| conn.token.clone())
    };
    match cmd {
        ArqCommand::Create {
            device_profile,
            group_id,
        } => {
            let created = api
                .create_arqs(&NewArqs {
                    device_profile_name: device_profile,
                    device_profile_group_id: group_id.map(u64::from),
                })
                .await
                .map_err(failed)?;
            Ok(output::list(f, &values(&created), LIST_COLUMNS))
        }
        ArqCommand::List {
            instance,
            bind_state,
        } => {
            let found = api
                .arqs(&ArqFilter {
                    instance,
                    bind_state,
                })
                .await
                .map_err(failed)?;
            Ok(output::list(f, &values(&found), LIST_COLUMNS))
        }
        ArqCommand::Show { arq } => Ok(output::show(f, &show(&api, &arq).await?, SHOW_FIELDS)),
        ArqCommand::Bind {
            arq,
            hostname,
            device_rp_uuid,
            instance_uuid,
            wait,
            timeout,
            service: st,
        } => {
            let ops = bind_ops(&hostname, &device_rp_uuid, &instance_uuid);
            patch(&api, &arq, ops, &service(&st)).await?;
            let mut shown = show(&api, &arq).await?;
            if wait {
                shown = wait_resolved(&api, &arq, shown, std::time::Duration::from_secs(timeout))
                    .await?;
                if shown["state"] == "BindFailed" {
                    anyhow::bail!(
                        "binding {arq}: BindFailed\n{}",
                        output::show(f, &shown, SHOW_FIELDS)
                    );
                }
            }
            Ok(output::show(f, &shown, SHOW_FIELDS))
        }
        ArqCommand::Unbind { arq, service: st } => {
            patch(&api, &arq, unbind_ops(), &service(&st)).await?;
            Ok(output::show(f, &show(&api, &arq).await?, SHOW_FIELDS))
        }
        ArqCommand::Delete {
            arqs,
            instance,
            service: st,
        } => {
            // Deleting by instance is Nova's (service token); deleting one's own
            // unbound ARQs is not, so a token is sent only when asked for.
            let st = match instance {
                Some(_) => Some(service(&st)),
                None => st.service_token,
            };
            match instance {
                Some(i) => {
                    segment(&i)?;
                    api.delete_arqs(&ArqSelector::Instance(i.clone()), st.as_deref())
                        .await
                        .map_err(failed)?;
                    Ok(deleted(f, "instance", &[i]))
                }
                None => {
                    for a in &arqs {
                        segment(a)?;
                    }
                    // One request: all-or-nothing on the server.
                    api.delete_arqs(&ArqSelector::Uuids(arqs.clone()), st.as_deref())
                        .await
                        .map_err(failed)?;
                    Ok(deleted(f, "accelerator_requests", &arqs))
                }
            }
        }
    }
}

fn values(arqs: &[Arq]) -> Vec<Value> {
    arqs.iter().map(|a| json!(a)).collect()
}

/// Polls the ARQ until its bind is resolved (`Bound` or `BindFailed`): the server's
/// bind worker ends every bind by its deadline, so this ends too, or at `timeout`.
async fn wait_resolved(
    api: &Client,
    arq: &str,
    mut shown: Value,
    timeout: std::time::Duration,
) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + timeout;
    while !matches!(shown["state"].as_str(), Some("Bound" | "BindFailed")) {
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "binding {arq}: still {} after {} s",
                shown["state"],
                timeout.as_secs()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        shown = show(api, arq).await?;
    }
    Ok(shown)
}

async fn show(api: &Client, arq: &str) -> anyhow::Result<Value> {
    let a = api.arq(segment(arq)?).await.map_err(failed)?;
    Ok(json!(a))
}

/// The collection form `{uuid: [ops]}` that Nova sends.
async fn patch(
    api: &Client,
    arq: &str,
    ops: Vec<PatchOp>,
    service_token: &str,
) -> anyhow::Result<()> {
    let mut body = ArqPatch::new();
    patch_entry(&mut body, segment(arq)?, ops);
    api.patch_arqs(&body, Some(service_token))
        .await
        .map_err(failed)
}
