//! `accel arq create|list|show|bind|unbind|delete`: accelerator requests.
//!
//! Bind, unbind and deleting by instance are Nova's calls upstream and need a service
//! token: `--service-token` (default: the `--token`) is sent as `X-Service-Token`.

use super::http::{Api, Extra};
use super::profiles::{deleted, segment};
use super::{output, Connection};
use clap::{Args, Subcommand};
use reqwest::Method;
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
    let api = Api::new(conn)?;
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
            let mut body = json!({"device_profile_name": device_profile});
            if let Some(g) = group_id {
                body["device_profile_group_id"] = json!(g);
            }
            let v = api
                .call(
                    Method::POST,
                    "/accelerator_requests",
                    &[],
                    Some(&body),
                    Extra::default(),
                )
                .await?;
            Ok(output::list(f, &arqs(&v), LIST_COLUMNS))
        }
        ArqCommand::List {
            instance,
            bind_state,
        } => {
            let mut query = Vec::new();
            if let Some(i) = &instance {
                query.push(("instance", i.as_str()));
            }
            if let Some(b) = &bind_state {
                query.push(("bind_state", b.as_str()));
            }
            let v = api
                .call(
                    Method::GET,
                    "/accelerator_requests",
                    &query,
                    None,
                    Extra::default(),
                )
                .await?;
            Ok(output::list(f, &arqs(&v), LIST_COLUMNS))
        }
        ArqCommand::Show { arq } => {
            let v = show(&api, &arq).await?;
            Ok(output::show(f, &v, SHOW_FIELDS))
        }
        ArqCommand::Bind {
            arq,
            hostname,
            device_rp_uuid,
            instance_uuid,
            service: st,
        } => {
            let ops = json!([
                {"op": "add", "path": "/hostname", "value": hostname},
                {"op": "add", "path": "/device_rp_uuid", "value": device_rp_uuid},
                {"op": "add", "path": "/instance_uuid", "value": instance_uuid},
            ]);
            patch(&api, &arq, ops, &service(&st)).await?;
            Ok(output::show(f, &show(&api, &arq).await?, SHOW_FIELDS))
        }
        ArqCommand::Unbind { arq, service: st } => {
            let ops = json!([
                {"op": "remove", "path": "/hostname"},
                {"op": "remove", "path": "/device_rp_uuid"},
                {"op": "remove", "path": "/instance_uuid"},
            ]);
            patch(&api, &arq, ops, &service(&st)).await?;
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
            let extra = || Extra {
                service_token: st.as_deref(),
            };
            match instance {
                Some(i) => {
                    segment(&i)?;
                    api.call(
                        Method::DELETE,
                        "/accelerator_requests",
                        &[("instance", &i)],
                        None,
                        extra(),
                    )
                    .await?;
                    Ok(deleted(f, "instance", &[i]))
                }
                None => {
                    for a in &arqs {
                        segment(a)?;
                    }
                    // One request: all-or-nothing on the server.
                    api.call(
                        Method::DELETE,
                        "/accelerator_requests",
                        &[("arqs", &arqs.join(","))],
                        None,
                        extra(),
                    )
                    .await?;
                    Ok(deleted(f, "accelerator_requests", &arqs))
                }
            }
        }
    }
}

fn arqs(v: &Value) -> Vec<Value> {
    v["arqs"].as_array().cloned().unwrap_or_default()
}

async fn show(api: &Api, arq: &str) -> anyhow::Result<Value> {
    api.call(
        Method::GET,
        &format!("/accelerator_requests/{}", segment(arq)?),
        &[],
        None,
        Extra::default(),
    )
    .await
}

/// The collection form `{uuid: [ops]}` that Nova sends.
async fn patch(api: &Api, arq: &str, ops: Value, service_token: &str) -> anyhow::Result<()> {
    segment(arq)?;
    api.call(
        Method::PATCH,
        "/accelerator_requests",
        &[],
        Some(&json!({ arq: ops })),
        Extra {
            service_token: Some(service_token),
        },
    )
    .await?;
    Ok(())
}
