//! The node agent's Kubernetes slot usage (accel's own endpoints, beside the device
//! report, with its policy: admin or service):
//!
//! - `PUT /v2/agent/hosts/{host}/kubernetes` stores the usage, allocates the devices
//!   pods hold in Placement and answers the devices VMs hold;
//! - `GET /v2/agent/hosts/{host}/kubernetes` answers the stored usage (a restarted
//!   agent restores it) and the devices VMs hold.
//!
//! ```json
//! PUT {"usage": {"gpu-1a2b3c4d-0": "node-a", "gpu-1a2b3c4d-1": "",
//!                "gpu-99aa0b1c-1": "C:0:node-a"},
//!      "claims": [{"slot": "gpu-1a2b3c4d-0", "device": "0000:3b:00.0", "pod": "default/train"},
//!                 {"slot": "gpu-99aa0b1c-1", "device": "0000:5e:00.0", "pod": null}]}
//! 200 {"hostname": "node-a", "vm_held_devices": ["0000:af:00.0"],
//!      "consumers": {"<uuid>": ["0000:3b:00.0"]}, "usage_changed": true,
//!      "held_partitions": []}
//! ```
//!
//! A claimed slot that is a MIG device (the device plugins' `<domain>/mig-<profile>`,
//! issue 45) has its placement in `partitions`, beside the claims:
//!
//! ```json
//! PUT {"usage": {"mig-6f1c1a52-...": "node-a"},
//!      "claims": [{"slot": "mig-6f1c1a52-...", "device": "0000:3b:00.0", "pod": "default/infer"}],
//!      "partitions": [{"slot": "mig-6f1c1a52-...", "profile_id": 19, "start": 6}]}
//! ```
//!
//! The pod's consumer then holds that placement in the GPU's ledger and one unit of the
//! profile's provider; `held_partitions` answers the MIG devices (GPU, profile,
//! start) no pod may be given, the refused ones among them.
//!
//! Usage values are seed 001's: `""` (free), `<node>` or `C:<virtual id>:<node>`. The
//! store does the work in one transaction (`accel_store::accelerator::kubernetes`).

use super::error::{AccelError, AccelResult};
use super::{json_reply, AccelState, Reply, Req};
use accel_api::agent::{ClaimPartition, KubernetesSaved, KubernetesShown, KubernetesUsageParts};
use accel_core::policy::cyborg as rules;
use accel_store::accelerator::kubernetes::SlotClaim;
use accel_store::partitions::Pin;
use axum::http::StatusCode;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

fn bad(what: impl std::fmt::Display) -> AccelError {
    AccelError::bad_request(format!("Invalid Kubernetes usage: {what}"))
}

/// `<instance>-<index>`: a kubelet device id, at most 63 characters.
fn valid_slot(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `""`, `<node>` or `C:<digits>:<node>`; a node name has no `:`.
fn valid_usage(u: &str) -> bool {
    let node = |n: &str| !n.is_empty() && n.len() <= 253 && !n.contains(':');
    match u.split(':').collect::<Vec<_>>().as_slice() {
        [""] => true,
        [n] => node(n),
        ["C", v, n] => !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && node(n),
        _ => false,
    }
}

/// The checks, in the order and words they have always had; the DTO is read after
/// them, so a malformed body gets these messages rather than serde's.
fn check(body: &Value) -> AccelResult<()> {
    match body.get("usage") {
        Some(Value::Object(m)) => {
            for (slot, u) in m {
                let u = u
                    .as_str()
                    .ok_or_else(|| bad(format!("usage of {slot} must be a string")))?;
                if !valid_slot(slot) {
                    return Err(bad(format!("{slot:?} is not a slot id")));
                }
                if !valid_usage(u) {
                    return Err(bad(format!(
                        "usage of {slot} is {u:?}, neither \"\", \"<node>\" nor \"C:<virtual id>:<node>\""
                    )));
                }
            }
        }
        _ => return Err(bad("usage must be an object of slot ids to usage strings")),
    }
    match body.get("claims") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for c in a {
                match c.get("pod") {
                    None | Some(Value::Null) => {}
                    Some(Value::String(p)) if p.contains('/') => {}
                    Some(_) => {
                        return Err(bad("claims: pod must be \"<namespace>/<name>\" or null"))
                    }
                }
                for k in ["slot", "device"] {
                    if !c.get(k).is_some_and(Value::is_string) {
                        return Err(bad(format!("claims: {k} must be a string")));
                    }
                }
            }
        }
        Some(_) => return Err(bad("claims must be a list")),
    }
    match body.get("partitions") {
        None | Some(Value::Null) | Some(Value::Array(_)) => {}
        Some(_) => return Err(bad("partitions must be a list")),
    }
    Ok(())
}

fn parse(body: Value) -> AccelResult<(BTreeMap<String, String>, Vec<SlotClaim>)> {
    check(&body)?;
    let KubernetesUsageParts { usage, partitions } = serde_json::from_value(body).map_err(bad)?;
    let mut pins: BTreeMap<String, Pin> = BTreeMap::new();
    for p in partitions {
        if !usage.claims.iter().any(|c| c.slot == p.slot) {
            return Err(bad(format!(
                "partitions: slot {} is not one of the claims",
                p.slot
            )));
        }
        let pin = Pin {
            profile_id: p.profile_id,
            start: p.start,
        };
        if pins.insert(p.slot.clone(), pin).is_some() {
            return Err(bad(format!("partitions: slot {} appears twice", p.slot)));
        }
    }
    let claims = usage
        .claims
        .into_iter()
        .map(|c| SlotClaim {
            partition: pins.get(&c.slot).copied(),
            slot: c.slot,
            device: c.device,
            pod: c.pod,
        })
        .collect();
    Ok((usage.usage, claims))
}

/// The wire form of the MIG devices no pod may be given.
fn held(parts: Vec<(String, Pin)>) -> Vec<ClaimPartition> {
    parts
        .into_iter()
        .map(|(device, p)| ClaimPartition {
            device,
            profile_id: p.profile_id,
            start: p.start,
        })
        .collect()
}

pub(crate) async fn save(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    let (usage, claims) = parse(req.json_body()?)?;
    let outcome = st
        .app
        .store
        .kubernetes()
        .save(host, &usage, &claims)
        .await?;
    Ok(json_reply(
        StatusCode::OK,
        &KubernetesSaved {
            hostname: host.to_owned(),
            vm_held_devices: outcome.vm_held,
            consumers: outcome.consumers,
            usage_changed: outcome.usage_changed,
            held_partitions: held(outcome.held_partitions),
        },
    ))
}

pub(crate) async fn show(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    let saved = st.app.store.kubernetes().load(host).await?;
    Ok(json_reply(
        StatusCode::OK,
        &KubernetesShown {
            hostname: host.to_owned(),
            usage: saved.usage,
            vm_held_devices: saved.vm_held,
            held_partitions: held(saved.held_partitions),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_strings_are_seed_001s() {
        for ok in ["", "node-a", "C:0:node-a", "C:12:n.example.org"] {
            assert!(valid_usage(ok), "{ok}");
        }
        for bad in ["C::node-a", "C:x:node-a", "C:0:", "a:b", "C:0:a:b"] {
            assert!(!valid_usage(bad), "{bad}");
        }
        assert!(valid_slot("gpu-1a2b3c4d-0"));
        assert!(!valid_slot("GPU-1"));
        assert!(!valid_slot(&"a".repeat(64)));
    }
}
