//! Kubernetes DRA claims (issue 30): the node agent, as the kubelet's DRA driver,
//! claims a ResourceClaim's devices in Placement here before it hands them to the
//! container, and frees them when the kubelet unprepares the claim.
//!
//! ```json
//! PUT /v2/agent/hosts/{host}/kubernetes/claims/{uid}  {"devices": ["0000:3b:00.0"]}
//! 200 {"claim": "<uid>", "devices": ["0000:3b:00.0"], "changed": true}
//! 409 "Claim <uid>: device 0000:3b:00.0 is held by a virtual machine"
//! PUT ...  {"devices": [], "partitions": [{"device": "0000:3b:00.0", "profile_id": 19, "start": 6}]}
//! 409 "Claim <uid>: MIG 1g.10gb at memory slice 6 of device 0000:3b:00.0 is held by a
//!      virtual machine (the whole GPU is held)"
//! DELETE /v2/agent/hosts/{host}/kubernetes/claims/{uid}   204 (also when unknown)
//! ```
//!
//! The claim's uid is the Placement consumer (type `KUBERNETES_CLAIM`); the store does
//! the work in one transaction (`accel_store::accelerator::claims`) through the same
//! allocation write as every other claimer.

use super::error::{claim_refusal, AccelError, AccelResult};
use super::{json_reply, AccelState, Reply, Req};
use accel_api::agent::{ClaimDevices, ClaimPrepared};
use accel_core::policy::cyborg as rules;
use accel_store::partitions::Pin;
use axum::http::StatusCode;
use std::sync::Arc;

fn check_uid(uid: &str) -> AccelResult<()> {
    if accel_core::ids::is_uuid_like(uid) {
        Ok(())
    } else {
        Err(AccelError::bad_request(format!(
            "Invalid claim uid {uid}: a ResourceClaim's metadata.uid is a UUID"
        )))
    }
}

pub(crate) async fn prepare(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    let uid = req.param(1);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    check_uid(uid)?;
    let body: ClaimDevices = serde_json::from_value(req.json_body()?).map_err(|e| {
        AccelError::bad_request(format!(
            "Invalid claim: {e}; expected {{\"devices\": [\"<PCI address>\", ...], \
             \"partitions\": [{{\"device\": \"<PCI address>\", \"profile_id\": <id>, \
             \"start\": <memory slice>}}, ...]}}"
        ))
    })?;
    if body.devices.is_empty() && body.partitions.is_empty() {
        return Err(AccelError::bad_request("Invalid claim: no device"));
    }
    let parts: Vec<(String, Pin)> = body
        .partitions
        .iter()
        .map(|p| {
            let pin = Pin {
                profile_id: p.profile_id,
                start: p.start,
            };
            (p.device.clone(), pin)
        })
        .collect();
    let changed = st
        .app
        .store
        .claims()
        .prepare(host, uid, &body.devices, &parts)
        .await?
        .map_err(|r| {
            let words = claim_refusal(&r);
            tracing::info!(host = %host, claim = %uid, reason = %words, "claim refused");
            AccelError::conflict(format!("Claim {uid}: {words}"))
        })?;
    if changed {
        tracing::info!(host = %host, claim = %uid, devices = ?body.devices, partitions = ?body.partitions, "claim prepared");
    }
    Ok(json_reply(
        StatusCode::OK,
        &ClaimPrepared {
            claim: uid.to_owned(),
            devices: body.devices,
            partitions: body.partitions,
            changed,
        },
    ))
}

pub(crate) async fn unprepare(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    let uid = req.param(1);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    check_uid(uid)?;
    let freed = st.app.store.claims().unprepare(uid).await?;
    if freed {
        tracing::info!(host = %host, claim = %uid, "claim unprepared");
    }
    Ok(Reply::status(StatusCode::NO_CONTENT))
}
