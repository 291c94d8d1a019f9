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
    Create {
        device_profile: String,
        /// Only the ARQs of this group of the profile.
        #[arg(long)]
        group_id: Option<u32>,
    },
    /// List accelerator requests (the caller's project's; all for an admin).
    List {
        /// Only the ARQs bound to this instance.
        #[arg(long)]
        instance: Option<String>,
        /// With --instance: only when all are resolved (`resolved`; 423 otherwise).
        #[arg(long, value_name = "resolved")]
        bind_state: Option<String>,
    },
    /// Show one accelerator request.
    Show { arq: String },
    /// Bind an accelerator request to a host, device provider and instance.
    Bind {
        arq: String,
        #[arg(long)]
        hostname: String,
        /// The Placement provider of the device (its deployable).
        #[arg(long)]
        device_rp_uuid: String,
        #[arg(long)]
        instance_uuid: String,
        #[command(flatten)]
        service: ServiceToken,
    },
    /// Unbind an accelerator request.
    Unbind {
        arq: String,
        #[command(flatten)]
        service: ServiceToken,
    },
    /// Delete accelerator requests by uuid, or all of an instance's.
    Delete {
        #[arg(required_unless_present = "instance", conflicts_with = "instance")]
        arqs: Vec<String>,
        #[arg(long)]
        instance: Option<String>,
        #[command(flatten)]
        service: ServiceToken,
    },
}

/// The service token of Nova's calls.
#[derive(Args, Debug)]
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
            service: st,
        } => {
            let ops = bind_ops(&hostname, &device_rp_uuid, &instance_uuid);
            patch(&api, &arq, ops, &service(&st)).await?;
            Ok(output::show(f, &show(&api, &arq).await?, SHOW_FIELDS))
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
