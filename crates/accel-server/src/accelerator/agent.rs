//! How hardware records get in: an agent's report over HTTP
//! (`PUT /v2/agent/hosts/{hostname}/devices`, admin or service), the agent's start-up
//! check (`GET /v2/agent/hosts/{hostname}`: 404 with what to fix when no compute node
//! provider has that name, locally or in the external Placement), the start-up call
//! of an agent that owns its node provider (`PUT /v2/agent/hosts/{hostname}` with
//! `{"node_provider": "own"}`: created when absent, see
//! [`accel_store::accelerator::report::ensure_owned`]), and the built-in
//! fake source ([`report_fake_devices`]) that reports what Cyborg's fake driver would.
//! The agent also takes its programming requests here
//! (`GET /v2/agent/hosts/{hostname}/programs`) and answers them
//! (`PUT .../programs/{id}`); upstream does both over RPC.
//!
//! Upstream agents report over RPC to the conductor; these endpoints are accel's. The
//! body is the host's full device list in upstream's `DriverDevice` shape, plus
//! accel's optional `health` (`ok` | `unhealthy`) and `health_reason` (why, for
//! people: the console shows it) per device and `parent` per deployable (an FPGA
//! region under its card):
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
use super::{json_reply, AccelState, Reply, Req};
use crate::external::ExternalPlacement;
use accel_api::agent::{
    self as wire, HostInfo, ProgramAnswer, ProgramRequest, Programs, ReportAnswer,
};
use accel_api::partitions::GpuPartitions;
use accel_core::accelerator::{
    AttachType, DeviceType, ReportedDeployable, ReportedDevice, ReportedHandle,
};
use accel_core::policy::cyborg as rules;
use accel_store::accelerator::binds;
use accel_store::accelerator::report::Summary;
use accel_store::{Store, StoreError};
use axum::http::StatusCode;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Reports Cyborg's fake device for `host` (creating the compute node provider when it
/// is absent), as an agent on that host would at start-up.
pub async fn report_fake_devices(store: &Store, host: &str) -> Result<Summary, StoreError> {
    store.reports().fake_devices(host).await
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

/// The shape checks, with the messages agents have always had; the body is read into
/// `accel_api::agent::DeviceReport` after them.
fn check_device(v: &Value) -> AccelResult<()> {
    text(v, "type")?;
    let cpid = v
        .get("controlpath_id")
        .ok_or_else(|| bad("controlpath_id is required"))?;
    for d in list(v, "deployables")? {
        for a in list(d, "attributes")? {
            text(a, "key")?;
            text(a, "value")?;
        }
        for h in list(d, "attach_handles")? {
            text(h, "attach_type")?;
            text(h, "attach_info")?;
        }
        text(d, "name")?;
        opt_text(d, "parent")?;
        d.get("num_accelerators")
            .and_then(Value::as_i64)
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad("num_accelerators must be a non-negative integer"))?;
        opt_text(d, "driver_name")?;
    }
    text(v, "vendor")?;
    text(v, "model")?;
    opt_text(v, "std_board_info")?;
    opt_text(v, "vendor_board_info")?;
    text(cpid, "cpid_type")?;
    text(cpid, "cpid_info")?;
    opt_text(v, "health")?;
    opt_text(v, "health_reason")?;
    Ok(())
}

/// A reported device as the domain's [`ReportedDevice`] (device and attach types,
/// health).
fn device(d: wire::Device) -> AccelResult<ReportedDevice> {
    let device_type = DeviceType::parse(&d.device_type)
        .ok_or_else(|| bad(format!("unknown device type {}", d.device_type)))?;
    let deployables = d
        .deployables
        .into_iter()
        .map(|d| {
            let attach_handles = d
                .attach_handles
                .into_iter()
                .map(|h| {
                    Ok(ReportedHandle {
                        attach_type: AttachType::parse(&h.attach_type)
                            .ok_or_else(|| bad(format!("unknown attach type {}", h.attach_type)))?,
                        attach_info: h.attach_info,
                        in_use: h.in_use,
                    })
                })
                .collect::<AccelResult<_>>()?;
            Ok(ReportedDeployable {
                name: d.name,
                parent: d.parent,
                num_accelerators: d.num_accelerators,
                driver_name: d.driver_name,
                attributes: d.attributes.into_iter().map(|a| (a.key, a.value)).collect(),
                attach_handles,
            })
        })
        .collect::<AccelResult<_>>()?;
    Ok(ReportedDevice {
        device_type,
        vendor: d.vendor,
        model: d.model,
        std_board_info: d.std_board_info,
        vendor_board_info: d.vendor_board_info,
        cpid_type: d.controlpath_id.cpid_type,
        cpid_info: d.controlpath_id.cpid_info,
        healthy: match d.health.as_deref() {
            None | Some("ok") => true,
            Some("unhealthy") => false,
            Some(other) => return Err(bad(format!("unknown health {other}"))),
        },
        health_reason: d.health_reason.filter(|r| !r.trim().is_empty()),
        deployables,
        partitions: match d.partitions.as_ref().map(GpuPartitions::geometry) {
            Some(g) => {
                g.check().map_err(|e| bad(format!("partitions: {e}")))?;
                Some(g)
            }
            None => None,
        },
    })
}

pub(crate) async fn report(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&["force"])?;
    let force = match req.query_last("force") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(bad(format!("force must be true or false, not {other}"))),
    };
    let body = req.json_body()?;
    for d in list(&body, "devices")? {
        check_device(d)?;
    }
    let report: wire::DeviceReport = match body.get("devices") {
        None | Some(Value::Null) => wire::DeviceReport { devices: vec![] },
        Some(_) => serde_json::from_value(body).map_err(bad)?,
    };
    let devices = report
        .devices
        .into_iter()
        .map(device)
        .collect::<AccelResult<Vec<_>>>()?;
    let digest: String = Sha256::digest(&req.body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let placeholder = match &st.external {
        Some(ext) => remote_compute_node(&st, ext, host).await?,
        None => None,
    };
    let placeholder = placeholder.as_ref().map(|(u, n)| (u.as_str(), n.as_str()));
    let s = st
        .app
        .store
        .reports()
        .apply(
            host,
            &devices,
            &digest,
            force,
            placeholder,
            st.external.is_some(),
        )
        .await?;
    if let (Some(ext), false) = (&st.external, s.unchanged) {
        ext.wake.notify_one();
    }
    Ok(json_reply(
        StatusCode::OK,
        &ReportAnswer {
            hostname: host.to_owned(),
            unchanged: s.unchanged,
            devices_added: s.devices_added as i64,
            devices_removed: s.devices_removed as i64,
            devices_kept: s.devices_kept as i64,
            devices_vanished: s.devices_vanished as i64,
        },
    ))
}

/// `GET /v2/agent/hosts/{host}`: the compute node provider the agent reports under.
pub(crate) async fn show_host(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    let found = st.app.store.reports().host(host).await?;
    let remote = match (&found, &st.external) {
        (None, Some(ext)) => remote_compute_node(&st, ext, host).await?,
        _ => None,
    };
    let info = |compute_node_uuid: String, devices: i64| HostInfo {
        hostname: host.to_owned(),
        compute_node_uuid,
        devices,
    };
    match (found, remote) {
        (Some((rp, devices)), _) => Ok(json_reply(StatusCode::OK, &info(rp.uuid, devices as i64))),
        (None, Some((uuid, _))) => Ok(json_reply(StatusCode::OK, &info(uuid, 0))),
        (None, None) => {
            let wh = match &st.external {
                Some(ext) => format!(
                    "in the external Placement ({}) nor in accel's",
                    ext.client.endpoint().await
                ),
                None => "in Placement".to_owned(),
            };
            Err(AccelError::not_found(format!(
                "No compute node resource provider named {host} {wh}. The agent's --node must be Nova's hypervisor_hostname for this host (openstack hypervisor list), and nova-compute must have registered it; on a node without Nova set node_provider = \"own\" in the agent's configuration"
            ))
            .with_code(accel_api::agent::NO_COMPUTE_NODE))
        }
    }
}

/// `GET /v2/agent/hosts/{host}/partitions`: the MIG instances the host's GPU ledgers
/// hold, with their consumers and placements, for the agent's start-up (a rebooted
/// node makes them again; docs/partitions.md).
pub(crate) async fn held_partitions(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    let prefix = format!("{host}_");
    let held = st
        .app
        .store
        .partitions()
        .held_mig(host)
        .await?
        .into_iter()
        .filter_map(|(gpu, consumer, profile_id, at)| {
            Some(accel_api::agent::HeldPartition {
                device: gpu.strip_prefix(&prefix)?.to_owned(),
                consumer,
                profile_id,
                start: at.start,
                size: at.size,
            })
        })
        .collect();
    Ok(json_reply(
        StatusCode::OK,
        &accel_api::agent::HeldPartitions {
            hostname: host.to_owned(),
            held,
        },
    ))
}

/// `PUT /v2/agent/hosts/{host}` with `{"node_provider": "own"}`: the node provider
/// accel owns for `host`, created when absent (201) or as it is (200); 409 when a
/// provider of that name is not accel's. Refused with an external Placement, where
/// the node's provider has to be the one Nova registered there.
pub(crate) async fn own_host(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    let body = req.json_body()?;
    if body.get("node_provider").and_then(Value::as_str) != Some("own") {
        return Err(AccelError::bad_request(
            "The body must be {\"node_provider\": \"own\"}",
        ));
    }
    if st.external.is_some() {
        return Err(AccelError::bad_request(
            "node_provider = \"own\" cannot be used with an external Placement: the node provider must be the one Nova registered there",
        ));
    }
    let (rp, created, devices) = st.app.store.reports().own_host(host).await?;
    if created {
        tracing::info!(host = %host, uuid = %rp.uuid, "node provider created for an agent that owns it");
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_reply(
        status,
        &HostInfo {
            hostname: host.to_owned(),
            compute_node_uuid: rp.uuid,
            devices: devices as i64,
        },
    ))
}

fn render_program(pr: &binds::ProgramRequest) -> ProgramRequest {
    ProgramRequest {
        id: pr.id,
        arq_uuid: pr.arq_uuid.clone(),
        deployable_uuid: pr.deployable_uuid.clone(),
        deployable_name: pr.deployable_name.clone(),
        bitstream_id: pr.bitstream_id.clone(),
        function_id: pr.function_id.clone(),
        state: pr.state.as_str().to_owned(),
        error: pr.error.clone(),
    }
}

/// `GET /v2/agent/hosts/{host}/programs`: the programming requests the host's agent
/// has to carry out (for binds whose profile names a bitstream or function the region
/// lacks, and for `PATCH /v2/deployables/{uuid}/program`), oldest first.
pub(crate) async fn pending_programs(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    let list = st.app.store.programs().pending(host).await?;
    let programs = list.iter().map(render_program).collect();
    Ok(json_reply(StatusCode::OK, &Programs { programs }))
}

/// `PUT /v2/agent/hosts/{host}/programs/{id}` with `{"state": "done"}` or
/// `{"state": "failed", "error": "<why>"}`: the agent's answer. A bind waiting on it
/// is performed at once; 404 when the host has no such pending request (it was
/// abandoned, or answered before).
pub(crate) async fn finish_program(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    let id = req.param(1);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    let id: i64 = id
        .parse()
        .map_err(|_| AccelError::bad_request(format!("Invalid programming request id {id}")))?;
    let body = req.json_body()?;
    match body.get("state").and_then(Value::as_str) {
        Some("done") => {}
        Some("failed") => {
            if body
                .get("error")
                .and_then(Value::as_str)
                .is_none_or(|e| e.trim().is_empty())
            {
                return Err(AccelError::bad_request(
                    "A failed programming request needs its error",
                ));
            }
        }
        _ => {
            return Err(AccelError::bad_request(
                "state must be \"done\" or \"failed\"",
            ))
        }
    }
    let result =
        match serde_json::from_value(body).map_err(|e| AccelError::bad_request(e.to_string()))? {
            ProgramAnswer::Done => Ok(()),
            ProgramAnswer::Failed { error } => Err(error),
        };
    let outcome = if result.is_ok() { "done" } else { "failed" };
    let (pr, recorded_at) = st.app.store.programs().finish(host, id, result).await?;
    let m = &st.app.metrics;
    let label = crate::metrics::OutcomeLabel { outcome };
    m.fpga_programs.get_or_create(&label).inc();
    if let Some(at) = recorded_at {
        let took = (accel_store::now() - at).max(0) as f64;
        m.fpga_program_duration.get_or_create(&label).observe(took);
    }
    tracing::info!(host = %host, request = id, outcome, "FPGA programming request answered");
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
    let local = st.app.store.reports().has_compute_node(host).await?;
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
