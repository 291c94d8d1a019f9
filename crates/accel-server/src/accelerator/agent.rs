//! How hardware records get in: an agent's report over HTTP
//! (`PUT /v2/agent/hosts/{hostname}/devices`, admin or service), the agent's start-up
//! check (`GET /v2/agent/hosts/{hostname}`: 404 with what to fix when no compute node
//! provider has that name, locally or in the external Placement), and the built-in
//! fake source ([`report_fake_devices`]) that reports what Cyborg's fake driver would.
//! The agent also takes its programming requests here
//! (`GET /v2/agent/hosts/{hostname}/programs`) and answers them
//! (`PUT .../programs/{id}`); upstream does both over RPC.
//!
//! Upstream agents report over RPC to the conductor; these endpoints are accel's. The
//! body is the host's full device list in upstream's `DriverDevice` shape, plus
//! accel's optional `health` (`ok` | `unhealthy`) per device and `parent` per
//! deployable (an FPGA region under its card):
//!
//! ```json
//! {"devices": [{"type": "FPGA", "vendor": "0xABCD", "model": "m",
//!   "std_board_info": "{...}", "vendor_board_info": "...",
//!   "controlpath_id": {"cpid_type": "PCI", "cpid_info": "{...}"},
//!   "deployables": [{"name": "host_FakeDevice", "num_accelerators": 16, "driver_name": "fake",
//!     "attributes": [{"key": "rc", "value": "FPGA"}],
//!     "attach_handles": [{"attach_type": "TEST_PCI", "attach_info": "{...}", "in_use": false}]}]}]}
//! ```
//!
//! The SHA-256 of the body is kept per host; a body equal to the last one applied is
//! answered `{"unchanged": true}` after that one comparison (unless `?force=true`, or
//! a vanished device is waiting for removal). A report that fails validation is
//! rejected whole (400) and changes nothing.
//!
//! With an external Placement ([`crate::external`]), Nova's compute node provider
//! lives only there: a report for a host accel has no compute node provider for first
//! copies its uuid and name into a local placeholder (no inventory, never pushed), and
//! a report that changed anything marks the host for a push in its transaction.

use super::error::{AccelError, AccelResult};
use super::{json_reply, AccelState, Ctx};
use crate::external::ExternalPlacement;
use accel_core::accelerator::{
    fake_device, AttachType, DeviceType, ReportedDeployable, ReportedDevice, ReportedHandle,
};
use accel_core::policy::cyborg as rules;
use accel_store::accelerator::binds;
use accel_store::accelerator::pushes;
use accel_store::accelerator::report::{self, Summary};
use accel_store::{Store, StoreError};
use axum::body::Body;
use axum::http::{Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Reports Cyborg's fake device for `host` (creating the compute node provider when it
/// is absent), as an agent on that host would at start-up.
pub async fn report_fake_devices(store: &Store, host: &str) -> Result<Summary, StoreError> {
    let host = host.to_owned();
    store
        .write(move |tx| {
            Box::pin(
                async move { report::replace_host(tx, &host, &[fake_device(&host)], true).await },
            )
        })
        .await
}

fn bad(what: impl std::fmt::Display) -> AccelError {
    AccelError::bad_request(format!("Invalid device report: {what}"))
}

fn text(v: &Value, key: &str) -> AccelResult<String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| bad(format!("{key} must be a string")))
}

fn opt_text(v: &Value, key: &str) -> AccelResult<Option<String>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(format!("{key} must be a string or null"))),
    }
}

fn list<'a>(v: &'a Value, key: &str) -> AccelResult<&'a [Value]> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(bad(format!("{key} must be a list"))),
    }
}

fn parse_device(v: &Value) -> AccelResult<ReportedDevice> {
    let ty = text(v, "type")?;
    let device_type =
        DeviceType::parse(&ty).ok_or_else(|| bad(format!("unknown device type {ty}")))?;
    let cpid = v
        .get("controlpath_id")
        .ok_or_else(|| bad("controlpath_id is required"))?;
    let deployables = list(v, "deployables")?
        .iter()
        .map(|d| {
            let attributes = list(d, "attributes")?
                .iter()
                .map(|a| Ok((text(a, "key")?, text(a, "value")?)))
                .collect::<AccelResult<_>>()?;
            let attach_handles = list(d, "attach_handles")?
                .iter()
                .map(|h| {
                    let t = text(h, "attach_type")?;
                    Ok(ReportedHandle {
                        attach_type: AttachType::parse(&t)
                            .ok_or_else(|| bad(format!("unknown attach type {t}")))?,
                        attach_info: text(h, "attach_info")?,
                        in_use: h.get("in_use").and_then(Value::as_bool).unwrap_or(false),
                    })
                })
                .collect::<AccelResult<_>>()?;
            Ok(ReportedDeployable {
                name: text(d, "name")?,
                parent: opt_text(d, "parent")?,
                num_accelerators: d
                    .get("num_accelerators")
                    .and_then(Value::as_i64)
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| bad("num_accelerators must be a non-negative integer"))?,
                driver_name: opt_text(d, "driver_name")?,
                attributes,
                attach_handles,
            })
        })
        .collect::<AccelResult<_>>()?;
    Ok(ReportedDevice {
        device_type,
        vendor: text(v, "vendor")?,
        model: text(v, "model")?,
        std_board_info: opt_text(v, "std_board_info")?,
        vendor_board_info: opt_text(v, "vendor_board_info")?,
        cpid_type: text(cpid, "cpid_type")?,
        cpid_info: text(cpid, "cpid_info")?,
        healthy: match opt_text(v, "health")?.as_deref() {
            None | Some("ok") => true,
            Some("unhealthy") => false,
            Some(other) => return Err(bad(format!("unknown health {other}"))),
        },
        deployables,
    })
}

pub(crate) async fn report(st: &AccelState, ctx: &Ctx, host: &str) -> AccelResult<Response<Body>> {
    ctx.authorize(st, rules::AGENT_REPORT)?;
    ctx.only_params(&["force"])?;
    let force = match ctx.param("force") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(bad(format!("force must be true or false, not {other}"))),
    };
    let body = ctx.json_body()?;
    let devices = list(&body, "devices")?
        .iter()
        .map(parse_device)
        .collect::<AccelResult<Vec<_>>>()?;
    let digest: String = Sha256::digest(&ctx.body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let placeholder = match &st.external {
        Some(ext) => remote_compute_node(st, ext, host).await?,
        None => None,
    };
    let external = st.external.is_some();
    let h = host.to_owned();
    let s = st
        .app
        .store
        .write(move |tx| {
            Box::pin(async move {
                if let Some((uuid, name)) = &placeholder {
                    report::compute_node_placeholder(tx, uuid, name).await?;
                }
                let s = report::apply(tx, &h, &devices, &digest, force).await?;
                if external && !s.unchanged {
                    pushes::mark(tx, &h, accel_store::now()).await?;
                }
                Ok(s)
            })
        })
        .await?;
    if let (Some(ext), false) = (&st.external, s.unchanged) {
        ext.wake.notify_one();
    }
    Ok(json_reply(
        StatusCode::OK,
        &json!({
            "hostname": host,
            "unchanged": s.unchanged,
            "devices_added": s.devices_added,
            "devices_removed": s.devices_removed,
            "devices_kept": s.devices_kept,
            "devices_vanished": s.devices_vanished,
        }),
    ))
}

/// `GET /v2/agent/hosts/{host}`: the compute node provider the agent reports under.
pub(crate) async fn show_host(
    st: &AccelState,
    ctx: &Ctx,
    host: &str,
) -> AccelResult<Response<Body>> {
    ctx.authorize(st, rules::AGENT_REPORT)?;
    ctx.only_params(&[])?;
    let h = host.to_owned();
    let found = st
        .app
        .store
        .read(move |tx| Box::pin(async move { report::host(tx, &h).await }))
        .await?;
    let remote = match (&found, &st.external) {
        (None, Some(ext)) => remote_compute_node(st, ext, host).await?,
        _ => None,
    };
    match (found, remote) {
        (Some((rp, devices)), _) => Ok(json_reply(
            StatusCode::OK,
            &json!({
                "hostname": host,
                "compute_node_uuid": rp.uuid,
                "devices": devices,
            }),
        )),
        (None, Some((uuid, _))) => Ok(json_reply(
            StatusCode::OK,
            &json!({
                "hostname": host,
                "compute_node_uuid": uuid,
                "devices": 0,
            }),
        )),
        (None, None) => {
            let wh = match &st.external {
                Some(ext) => format!(
                    "in the external Placement ({}) nor in accel's",
                    ext.client.endpoint().await
                ),
                None => "in Placement".to_owned(),
            };
            Err(AccelError::not_found(format!(
                "No compute node resource provider named {host} {wh}. The agent's --node must be Nova's hypervisor_hostname for this host (openstack hypervisor list), and nova-compute must have registered it"
            )))
        }
    }
}

fn render_program(pr: &binds::ProgramRequest) -> Value {
    json!({
        "id": pr.id,
        "arq_uuid": pr.arq_uuid,
        "deployable_uuid": pr.deployable_uuid,
        "deployable_name": pr.deployable_name,
        "bitstream_id": pr.bitstream_id,
        "function_id": pr.function_id,
        "state": pr.state.as_str(),
        "error": pr.error,
    })
}

/// `GET /v2/agent/hosts/{host}/programs`: the programming requests the host's agent
/// has to carry out (for binds whose profile names a bitstream or function the region
/// lacks, and for `PATCH /v2/deployables/{uuid}/program`), oldest first.
pub(crate) async fn pending_programs(
    st: &AccelState,
    ctx: &Ctx,
    host: &str,
) -> AccelResult<Response<Body>> {
    ctx.authorize(st, rules::AGENT_REPORT)?;
    ctx.only_params(&[])?;
    let h = host.to_owned();
    let list = st
        .app
        .store
        .read(move |tx| Box::pin(async move { binds::pending_programs(tx, &h).await }))
        .await?;
    let programs: Vec<Value> = list.iter().map(render_program).collect();
    Ok(json_reply(StatusCode::OK, &json!({ "programs": programs })))
}

/// `PUT /v2/agent/hosts/{host}/programs/{id}` with `{"state": "done"}` or
/// `{"state": "failed", "error": "<why>"}`: the agent's answer. A bind waiting on it
/// is performed at once; 404 when the host has no such pending request (it was
/// abandoned, or answered before).
pub(crate) async fn finish_program(
    st: &AccelState,
    ctx: &Ctx,
    host: &str,
    id: &str,
) -> AccelResult<Response<Body>> {
    ctx.authorize(st, rules::AGENT_REPORT)?;
    ctx.only_params(&[])?;
    let id: i64 = id
        .parse()
        .map_err(|_| AccelError::bad_request(format!("Invalid programming request id {id}")))?;
    let body = ctx.json_body()?;
    let result = match body.get("state").and_then(Value::as_str) {
        Some("done") => Ok(()),
        Some("failed") => Err(body
            .get("error")
            .and_then(Value::as_str)
            .filter(|e| !e.trim().is_empty())
            .ok_or_else(|| AccelError::bad_request("A failed programming request needs its error"))?
            .to_owned()),
        _ => {
            return Err(AccelError::bad_request(
                "state must be \"done\" or \"failed\"",
            ))
        }
    };
    let h = host.to_owned();
    let pr = st
        .app
        .store
        .write(move |tx| {
            Box::pin(async move {
                binds::finish_program_request(tx, &h, id, result, accel_store::now()).await
            })
        })
        .await?;
    if pr.arq_uuid.is_some() {
        st.bind_wakeup.notify_one();
    }
    Ok(json_reply(StatusCode::OK, &render_program(&pr)))
}
/// With an external Placement, the compute node provider Nova registered there, when
/// accel has none of that name yet: `(uuid, name)` for a local placeholder.
async fn remote_compute_node(
    st: &AccelState,
    ext: &ExternalPlacement,
    host: &str,
) -> AccelResult<Option<(String, String)>> {
    let h = host.to_owned();
    let local = st
        .app
        .store
        .read(move |tx| Box::pin(async move { report::has_compute_node(tx, &h).await }))
        .await?;
    if local {
        return Ok(None);
    }
    ext.client.provider_by_name(host).await.map_err(|e| {
        AccelError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("The external Placement could not be asked for compute node {host}: {e}"),
        )
    })
}
