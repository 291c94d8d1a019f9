//! `/v2/accelerator_requests`: create from a profile, list, show, bind/unbind (PATCH),
//! delete.
//!
//! Visibility is the store's [`accel_store::accelerator::Scope`]: a project sees only
//! its ARQs, an admin all. Bind, unbind, delete by instance and deletion of a bound ARQ
//! need a service token (Nova's), as upstream master requires since CVE-2026-40214.
//!
//! A bind is validated with upstream's patch rules and recorded durably: the ARQ moves
//! `Initial|Unbound → BindStarted` and a `bind_jobs` row (deadline = now +
//! `bind_timeout`) is written in the same transaction before `202`, then the bind
//! worker is woken; performing the job (attach handle, programming, the Nova event) is
//! [`super::binder`]'s. A bind that cannot succeed (a device of another host, an
//! unhealthy device, no attach handle left) is refused by the `PATCH` itself
//! ([`accel_store::accelerator::refusals`]), so Nova fails the build instead of
//! booting the server without its accelerator.

use super::error::{AccelError, AccelResult};
use super::microversion::Version;
use super::{json_reply, render, require_uuid, require_uuid_arg, AccelState, Reply, Req};
use accel_api::accelerator::{self as wire, NewArqs, PatchOp};
use accel_core::policy::cyborg as rules;
use accel_store::accelerator::arqs::{Arq, Binding, Filter, Patch as Op};
use accel_store::accelerator::refusals::{Refusal, Refused};
use axum::http::StatusCode;
use serde_json::{Map, Value};
use std::sync::Arc;

fn service_token_required() -> AccelError {
    AccelError::forbidden(
        "This operation requires a service token. Use the Compute API to manage instance accelerators.",
    )
}

fn reply_list(req: &Req, status: StatusCode, list: &[Arq]) -> Reply {
    let arqs: Vec<_> = list.iter().map(|a| render::arq(req, a)).collect();
    json_reply(status, &wire::Arqs { arqs })
}

pub async fn create(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::ARQ_CREATE)?;
    req.only_params(&[])?;
    let body = req.json_arg("req")?;
    // The object and the name are checked first, with upstream's texts; what is left
    // to refuse is the group id, which `NewArqs` reads as WSME does ("1" is 1).
    let mut body = body;
    let obj = body
        .as_object_mut()
        .ok_or_else(|| AccelError::bad_request("The request body must be a JSON object."))?;
    // Upstream looks a number up by its text (a 404 naming it), as Python formats it.
    let spelled = match obj.get("device_profile_name") {
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(Value::Bool(b)) => Some(if *b { "True" } else { "False" }.to_owned()),
        _ => None,
    };
    if let Some(name) = spelled {
        obj.insert("device_profile_name".into(), Value::String(name));
    }
    match obj.get("device_profile_name") {
        Some(Value::String(_)) => {}
        None | Some(Value::Null) => {
            return Err(AccelError::bad_request("DeviceProfile name needed."))
        }
        Some(_) => {
            return Err(AccelError::bad_request(
                "device_profile_name must be a string.",
            ))
        }
    }
    let new: NewArqs = serde_json::from_value(body).map_err(|_| {
        AccelError::bad_request("device_profile_group_id must be a non-negative integer.")
    })?;
    let group = new
        .device_profile_group_id
        .map(|g| usize::try_from(g).unwrap_or(usize::MAX));
    let project = req.creds.project_id().map(str::to_owned);
    let created = st
        .app
        .store
        .arqs()
        .create_from_profile(&new.device_profile_name, group, project.as_deref())
        .await?;
    Ok(reply_list(&req, StatusCode::CREATED, &created))
}

pub async fn list(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::ARQ_GET_ALL)?;
    req.only_params(&["bind_state", "instance"])?;
    // Upstream filters only on values that are truthy in Python: an empty `bind_state`
    // is no filter.
    let instance = req.query_last("instance").map(str::to_owned);
    if let Some(i) = &instance {
        // WSME types it `uuid`: an empty value is refused too.
        require_uuid_arg("instance", i)?;
    }
    let resolved = match req.query_last("bind_state") {
        None | Some("") => false,
        Some("resolved") => true,
        // Upstream: ARQBadState, a 500.
        Some(other) => {
            return Err(AccelError::bad_request(format!(
                "Bad state: {other} for ARQ: None. Expected state(s): ['resolved']"
            )))
        }
    };
    let scope = req.scope();
    // With an instance and `bind_state=resolved`, every ARQ of the instance is read
    // and checked here: all resolved is the answer, any other is 423. One statement,
    // so no transaction is needed for one snapshot.
    let whole_instance = instance.is_some() && resolved;
    let f = Filter {
        instance,
        resolved_only: resolved && !whole_instance,
    };
    let list = st.app.store.arqs().list(&scope, &f).await?;
    if whole_instance && list.iter().any(|a| !a.state.is_resolved()) {
        return Err(AccelError::locked());
    }
    Ok(reply_list(&req, StatusCode::OK, &list))
}

pub async fn show(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let uuid = req.param(0);
    req.authorize(&st, rules::ARQ_GET_ONE)?;
    req.only_params(&[])?;
    require_uuid(uuid)?;
    let arq = st.app.store.arqs().show(&req.scope(), uuid).await?;
    Ok(json_reply(StatusCode::OK, &render::arq(&req, &arq)))
}

/// `?arqs=u1,u2` (or the uuid in the path) or `?instance=`, exactly one of them.
pub async fn delete(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let id = req.params.first().map(String::as_str);
    req.authorize(&st, rules::ARQ_DELETE)?;
    req.only_params(&["arqs", "instance"])?;
    let list = id.or(req.query_last("arqs")).filter(|s| !s.is_empty());
    let instance = req.query_last("instance").filter(|s| !s.is_empty());
    let scope = req.scope();
    match (list, instance) {
        (Some(list), None) => {
            // A uuid named twice: upstream deletes the ARQ, then cannot find it again
            // and answers 404 naming the repeats (after the deletion).
            let mut uuids: Vec<String> = Vec::new();
            let mut repeated: Vec<String> = Vec::new();
            for u in list.split(',') {
                match uuids.iter().any(|x| x == u) {
                    true => repeated.push(format!("'{u}'")),
                    false => uuids.push(u.to_owned()),
                }
            }
            // Once bound, only Nova (with its service token) may delete an ARQ.
            st.app
                .store
                .arqs()
                .delete_listed(&scope, &uuids, req.is_service())
                .await?;
            if !repeated.is_empty() {
                return Err(AccelError::not_found(format!(
                    "ARQ not found with uuids [{}]",
                    repeated.join(", ")
                )));
            }
        }
        (None, Some(instance)) => {
            require_uuid_arg("instance", instance)?;
            if !req.is_service() {
                return Err(service_token_required());
            }
            st.app
                .store
                .arqs()
                .delete_of_instance(&scope, instance)
                .await?;
        }
        // Upstream: ObjectActionError, a 500.
        _ => {
            return Err(AccelError::bad_request(
                "Object action delete failed because: Provide either an ARQ uuid list or an instance UUID",
            ))
        }
    }
    Ok(Reply::status(StatusCode::NO_CONTENT))
}

/// One ARQ's operations, read as [`PatchOp`]s one by one so that the first bad one
/// answers: a non-empty list, each an object with a string `path`.
fn read_ops(patch: Value) -> AccelResult<Vec<PatchOp>> {
    let ops = match patch {
        Value::Array(ops) if !ops.is_empty() => ops,
        _ => {
            return Err(AccelError::patch(
                "A patch must be a non-empty list of operations",
            ))
        }
    };
    ops.into_iter()
        .map(|op| {
            if !op.is_object() {
                return Err(AccelError::patch("Every operation must be an object"));
            }
            // An object fails to read only for want of a string path.
            serde_json::from_value(op)
                .map_err(|_| AccelError::patch("Every operation needs a path"))
        })
        .collect()
}

/// Upstream's `_validate_arq_patch`: all ops add or all remove; paths limited to
/// hostname, device_rp_uuid, instance_uuid and (2.1+, admin only) project_id; an add
/// needs the first three.
fn validate(req: &Req, ops: &[PatchOp]) -> AccelResult<Op> {
    let add = ops.iter().all(|o| o.op == "add");
    if !add && !ops.iter().all(|o| o.op == "remove") {
        return Err(AccelError::patch("Every op must be add or remove"));
    }
    let mut fields: Vec<(&str, Option<String>)> = vec![
        ("hostname", None),
        ("device_rp_uuid", None),
        ("instance_uuid", None),
    ];
    let allow_project = req.version >= Version::PROJECT_ID;
    if allow_project {
        fields.push(("project_id", None));
    }
    for PatchOp { path, value, .. } in ops {
        let name = path.trim_start_matches('/');
        if name == "project_id" {
            if !allow_project {
                return Err(AccelError::not_acceptable(format!(
                    "Request not acceptable. The minimal required API version should be {}",
                    Version::PROJECT_ID
                )));
            }
            if !req.is_admin() {
                return Err(AccelError::denied(rules::ARQ_UPDATE));
            }
        }
        let slot = fields
            .iter_mut()
            .find(|(f, _)| *f == name)
            .ok_or_else(|| AccelError::patch(format!("Invalid path in patch {path}")))?;
        if add {
            slot.1 = Some(bind_value(name, value.as_ref())?);
        }
    }
    if !add {
        return Ok(Op::Unbind);
    }
    let absent: Vec<&str> = fields
        .iter()
        .filter(|(f, v)| v.is_none() && *f != "project_id")
        .map(|(f, _)| *f)
        .collect();
    if !absent.is_empty() {
        return Err(AccelError::patch(format!(
            "Fields absent in patch {}",
            absent.join(",")
        )));
    }
    if let Some((_, Some(instance))) = fields.iter().find(|(f, _)| *f == "instance_uuid") {
        // Upstream stores any text here and then cannot render its own list.
        require_uuid_arg("instance_uuid", instance)?;
    }
    let get = |n: &str| {
        fields
            .iter()
            .find(|(f, _)| *f == n)
            .and_then(|(_, v)| v.clone())
    };
    Ok(Op::Bind(Binding {
        hostname: get("hostname").unwrap_or_default(),
        device_rp_uuid: get("device_rp_uuid").unwrap_or_default(),
        instance_uuid: get("instance_uuid").unwrap_or_default(),
        // Absent: the caller's project (`ExtARQ` keeps it when the token has none).
        project_id: get("project_id")
            .filter(|p| !p.is_empty())
            .or_else(|| req.creds.project_id().map(str::to_owned)),
    }))
}

/// A bind field's value as upstream's string field takes it: text, or a number or a
/// boolean in Python's spelling; null, a list, an object or no value at all is refused
/// here, before anything is stored or sent (upstream fails in the conductor with a 500).
fn bind_value(field: &str, value: Option<&Value>) -> AccelResult<String> {
    let kind = match value {
        Some(Value::String(s)) => return Ok(s.clone()),
        Some(Value::Number(n)) => return Ok(n.to_string()),
        Some(Value::Bool(b)) => return Ok(if *b { "True" } else { "False" }.to_owned()),
        Some(Value::Array(_)) => "list",
        Some(Value::Object(_)) => "dict",
        Some(Value::Null) => "NoneType",
        None => return Err(AccelError::patch(format!("Fields absent in patch {field}"))),
    };
    Err(AccelError::bad_request(format!(
        "A string is required in field {field}, not a {kind}"
    )))
}

/// `PATCH /accelerator_requests` with `{arq_uuid: [ops]}`; also accepted on the item
/// URL (openstacksdk sends the same map there) and, on the item URL, a bare op list.
pub async fn patch(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let id = req.params.first().map(String::as_str);
    req.authorize(&st, rules::ARQ_UPDATE)?;
    req.only_params(&[])?;
    let body = req.json_arg("patch_list")?;
    let map: Map<String, Value> = match (body, id) {
        (Value::Object(m), _) if !m.is_empty() => m,
        (list @ Value::Array(_), Some(id)) => std::iter::once((id.to_owned(), list)).collect(),
        _ => {
            return Err(AccelError::patch(
                "The body must map ARQ uuids to lists of operations",
            ))
        }
    };
    let mut plan: Vec<(String, Op)> = Vec::with_capacity(map.len());
    // A key that is no uuid is looked up like any other: upstream's 404.
    for (uuid, ops) in map {
        let op = validate(&req, &read_ops(ops)?)?;
        plan.push((uuid, op));
    }
    if !req.is_service() {
        return Err(service_token_required());
    }
    let scope = req.scope();
    already_bound(&st, &req, &plan).await?;
    let deadline = accel_store::now() + st.bind_timeout_secs;
    let refused = st
        .app
        .store
        .arqs()
        .patch(&scope, plan, deadline, super::error::bind_refusal)
        .await?;
    if let Some(refused) = refused {
        return Err(refuse(&st, &refused));
    }
    st.bind_wakeup.notify_one();
    Ok(Reply::status(StatusCode::ACCEPTED))
}

/// Upstream's `_check_if_already_bound`, before any ARQ of the patch is looked up: the
/// first bind's instance must have no ARQs yet (the store checks every bind again in
/// its transaction).
async fn already_bound(st: &AccelState, req: &Req, plan: &[(String, Op)]) -> AccelResult<()> {
    let Some((_, Op::Bind(b))) = plan.first() else {
        return Ok(());
    };
    let f = Filter {
        instance: Some(b.instance_uuid.clone()),
        resolved_only: false,
    };
    if st.app.store.arqs().list(&req.scope(), &f).await?.is_empty() {
        return Ok(());
    }
    Err(AccelError::patch(format!(
        "Instance {} already has accelerator requests. Cannot bind additional ARQs.",
        b.instance_uuid
    )))
}

/// A bind the store refused ([`accel_store::accelerator::refusals`]): logged, counted,
/// answered in the API's error format. Upstream answers 404 for no free attach handle
/// (`AttachHandle not found`); a device of another host is the request's own
/// inconsistency (400), an unhealthy device the device's state (409).
fn refuse(st: &AccelState, refused: &Refused) -> AccelError {
    let message = super::error::bind_refusal(refused);
    let reason = refused.refusal.label();
    tracing::warn!(
        arq = %refused.arq_uuid,
        instance = %refused.instance_uuid,
        hostname = %refused.hostname,
        device_rp_uuid = %refused.device_rp_uuid,
        reason,
        "bind refused: {message}"
    );
    st.app.metrics.bind_refused(reason);
    match refused.refusal {
        Refusal::OtherHost { .. } => AccelError::bad_request(message),
        Refusal::Unhealthy { .. } => AccelError::conflict(message),
        Refusal::NoFreeHandle { .. } => AccelError::not_found(message),
    }
}
