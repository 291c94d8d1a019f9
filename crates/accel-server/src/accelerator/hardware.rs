//! Hardware records: `/v2/devices` (with enable/disable), `/v2/deployables` and
//! `/v2/attributes`, and programming a deployable (`PATCH /v2/deployables/{uuid}/program`). Reads need a project manager or an admin and writes an admin
//! (CVE-2026-40213's secure defaults); the agent report fills the records.

use super::error::{AccelError, AccelResult};
use super::{json_reply, render, require_uuid, AccelState, Reply, Req};
use accel_api::accelerator::{self as wire, lenient, NewAttribute, PatchOp, ProgramImage};
use accel_core::accelerator::DeviceStatus;
use accel_core::policy::cyborg as rules;
use accel_store::accelerator::binds::ProgramState;
use accel_store::accelerator::hardware::{DeployableColumn, DeviceColumn};
use axum::http::StatusCode;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The fields upstream's `FilterType` takes (its enumeration; upstream lists them in
/// a Python set's order, here sorted).
const FILTER_FIELDS: &[&str] = &[
    "availability",
    "board",
    "instance_uuid",
    "interface_type",
    "limit",
    "marker",
    "name",
    "parent_uuid",
    "root_uuid",
    "sort_dir",
    "sort_key",
];

/// `(field, value)` filters, and the query's other parameters.
type Filters<'a> = (Vec<(String, String)>, Vec<(&'a str, &'a str)>);

/// WSME's array-of-filters query syntax: `filters.field=f&filters.value=v`, or indexed
/// `filters[0].field=...&filters[0].value=...`. Returns the pairs and the other params.
fn filters(req: &Req) -> AccelResult<Filters<'_>> {
    let mut slots: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    let mut rest = Vec::new();
    for (k, v) in &req.query {
        let Some(tail) = k.strip_prefix("filters") else {
            rest.push((k.as_str(), v.as_str()));
            continue;
        };
        let (index, attr) = match tail.strip_prefix('[') {
            Some(t) => t
                .split_once("].")
                .map(|(i, a)| (i.to_owned(), a))
                .ok_or_else(|| AccelError::bad_request(format!("Unknown argument: \"{k}\"")))?,
            None => (
                String::new(),
                tail.strip_prefix('.')
                    .ok_or_else(|| AccelError::bad_request(format!("Unknown argument: \"{k}\"")))?,
            ),
        };
        let slot = slots.entry(index).or_default();
        match attr {
            "field" => slot.0 = Some(v.clone()),
            "value" => slot.1 = Some(v.clone()),
            _ => {
                return Err(AccelError::bad_request(format!(
                    "Unknown argument: \"{k}\""
                )))
            }
        }
    }
    // WSME reads each filter's `field` as an enumeration first.
    if let Some(bad) = slots
        .values()
        .filter_map(|(f, _)| f.as_deref())
        .find(|f| !FILTER_FIELDS.contains(f))
    {
        return Err(AccelError::bad_request(format!(
            "Invalid input for field/attribute field. Value: '{bad}'. Value should be one of: {}",
            FILTER_FIELDS.join(", ")
        )));
    }
    // A filter without a field is dropped, as upstream answers the whole list.
    let pairs = slots
        .into_values()
        .filter(|(f, _)| f.is_some())
        .map(|(f, v)| match (f, v) {
            (Some(f), Some(v)) => Ok((f, v)),
            _ => Err(AccelError::bad_request(
                "A filter needs both field and value.",
            )),
        })
        .collect::<AccelResult<_>>()?;
    Ok((pairs, rest))
}

pub async fn list_devices(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::DEVICE_GET_ALL)?;
    let (pairs, rest) = filters(&req)?;
    let mut f: Vec<(DeviceColumn, String)> = Vec::new();
    for (k, v) in rest {
        match k {
            "type" | "vendor" | "hostname" if !v.is_empty() => {
                f.push((DeviceColumn::parse(k).expect("listed above"), v.to_owned()))
            }
            "type" | "vendor" | "hostname" => {}
            other => {
                return Err(AccelError::bad_request(format!(
                    "Unknown argument: \"{other}\""
                )))
            }
        }
    }
    for (field, value) in pairs {
        // Upstream accepts paging and sorting keys here too; they do not filter.
        match DeviceColumn::parse(&field) {
            Some(c) => f.push((c, value)),
            None if matches!(field.as_str(), "limit" | "marker" | "sort_key" | "sort_dir") => {}
            None => {
                return Err(AccelError::bad_request(format!(
                    "Unsupported filter field {field}"
                )))
            }
        }
    }
    let found = st.app.store.hardware().devices(&f).await?;
    let list: Vec<_> = found.iter().map(|d| render::device(&req, d)).collect();
    Ok(json_reply(StatusCode::OK, &wire::Devices { devices: list }))
}

pub async fn show_device(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let uuid = req.param(0);
    req.authorize(&st, rules::DEVICE_GET_ONE)?;
    req.only_params(&[])?;
    let d = st.app.store.hardware().device(uuid).await?;
    Ok(json_reply(StatusCode::OK, &render::device(&req, &d)))
}

/// `POST /devices/{uuid}/enable|disable`: the status, and `reserved` on every one of
/// the device's provider inventories (total while maintaining, 0 when enabled).
pub async fn set_device_status(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let uuid = req.param(0);
    let action = req.param(1);
    let (rule, status) = match action {
        "enable" => (rules::DEVICE_ENABLE, DeviceStatus::Enabled),
        _ => (rules::DEVICE_DISABLE, DeviceStatus::Maintaining),
    };
    req.authorize(&st, rule)?;
    req.only_params(&[])?;
    require_uuid(uuid)?;
    st.app
        .store
        .hardware()
        .set_device_status(uuid, status, st.external.is_some())
        .await?;
    if let Some(ext) = &st.external {
        ext.wake.notify_one();
    }
    Ok(Reply::status(StatusCode::OK))
}

async fn render_deployables(
    st: &AccelState,
    req: &Req,
    f: Vec<(DeployableColumn, String)>,
) -> AccelResult<Vec<accel_api::accelerator::Deployable>> {
    let (deps, attrs) = st.app.store.hardware().deployables(&f).await?;
    Ok(deps
        .iter()
        .map(|d| render::deployable(req, d, attrs.get(&d.id).map_or(&[], Vec::as_slice)))
        .collect())
}

pub async fn list_deployables(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::DEPLOYABLE_GET_ALL)?;
    let (pairs, rest) = filters(&req)?;
    if let Some((k, _)) = rest.first() {
        return Err(AccelError::bad_request(format!(
            "Unknown argument: \"{k}\""
        )));
    }
    let mut f = Vec::new();
    for (field, value) in pairs {
        match DeployableColumn::parse(&field) {
            Some(c) => f.push((c, value)),
            // Accepted by upstream's API but ignored by its database filter.
            None if matches!(
                field.as_str(),
                "parent_uuid"
                    | "root_uuid"
                    | "board"
                    | "availability"
                    | "interface_type"
                    | "instance_uuid"
                    | "limit"
                    | "marker"
                    | "sort_key"
                    | "sort_dir"
            ) => {}
            None => {
                return Err(AccelError::bad_request(format!(
                    "Unsupported filter field {field}"
                )))
            }
        }
    }
    let list = render_deployables(&st, &req, f).await?;
    Ok(json_reply(
        StatusCode::OK,
        &wire::Deployables { deployables: list },
    ))
}

pub async fn show_deployable(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let uuid = req.param(0);
    req.authorize(&st, rules::DEPLOYABLE_GET_ONE)?;
    req.only_params(&[])?;
    require_uuid(uuid)?;
    Ok(json_reply(
        StatusCode::OK,
        &one_deployable(&st, &req, uuid).await?,
    ))
}

async fn one_deployable(
    st: &AccelState,
    req: &Req,
    uuid: &str,
) -> AccelResult<accel_api::accelerator::Deployable> {
    render_deployables(st, req, vec![(DeployableColumn::Uuid, uuid.to_owned())])
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| AccelError::not_found(format!("Deployable not found with uuid={uuid}")))
}

pub async fn list_attributes(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::ATTRIBUTE_GET_ALL)?;
    req.only_params(&["deployable_id", "key"])?;
    let deployable_id = match req.query_last("deployable_id").filter(|s| !s.is_empty()) {
        None => None,
        Some(d) => Some(d.trim().parse::<i64>().map_err(|_| {
            AccelError::bad_request(format!("Invalid input for field/attribute deployable_id. Value: '{d}'. unable to convert to integer. Error: invalid literal for int() with base 10: '{d}'"))
        })?),
    };
    let key = req
        .query_last("key")
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let found = st
        .app
        .store
        .hardware()
        .attributes(deployable_id, key.as_deref())
        .await?;
    let list: Vec<_> = found.iter().map(|a| render::attribute(&req, a)).collect();
    Ok(json_reply(
        StatusCode::OK,
        &wire::Attributes { attributes: list },
    ))
}

pub async fn show_attribute(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let uuid = req.param(0);
    req.authorize(&st, rules::ATTRIBUTE_GET_ONE)?;
    req.only_params(&[])?;
    require_uuid(uuid)?;
    let a = st.app.store.hardware().attribute(uuid).await?;
    Ok(json_reply(StatusCode::OK, &render::attribute(&req, &a)))
}

/// The attribute a `POST /attributes` body names, each field checked in turn so the
/// first bad one answers: `deployable_id` an integer as [`NewAttribute`] reads it (or
/// a string holding one), `key` and `value` non-empty strings.
fn attribute_body(body: &Value) -> AccelResult<NewAttribute> {
    let field = |k: &str| body.get(k).filter(|v| !v.is_null());
    let deployable_id = field("deployable_id")
        .and_then(|v| lenient::int_or_text(v).ok())
        .ok_or_else(|| AccelError::bad_request("deployable_id (an integer) is required."))?;
    let text = |k: &str| -> AccelResult<String> {
        match field(k) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            _ => Err(AccelError::bad_request(format!(
                "{k} (a non-empty string) is required."
            ))),
        }
    };
    Ok(NewAttribute {
        deployable_id,
        key: text("key")?,
        value: text("value")?,
    })
}

/// `POST /attributes` with a flat `{"deployable_id": 1, "key": "k", "value": "v"}`.
/// API-made attributes are not pushed to Placement, as upstream.
pub async fn create_attribute(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::ATTRIBUTE_CREATE)?;
    req.only_params(&[])?;
    let NewAttribute {
        deployable_id,
        key,
        value,
    } = attribute_body(&req.json_arg("req_attr")?)?;
    let a = st
        .app
        .store
        .hardware()
        .create_attribute(deployable_id, &key, &value)
        .await?;
    Ok(json_reply(
        StatusCode::CREATED,
        &render::attribute(&req, &a),
    ))
}

pub async fn delete_attribute(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let uuid = req.param(0);
    req.authorize(&st, rules::ATTRIBUTE_DELETE)?;
    req.only_params(&[])?;
    st.app.store.hardware().delete_attribute(uuid).await?;
    Ok(Reply::status(StatusCode::NO_CONTENT))
}

/// The Glance image a program patch names: upstream's body is
/// `[{"path": "/program", "op": "replace", "value": [{"image_uuid": "<uuid>"}]}]`.
fn program_image(body: Value) -> AccelResult<String> {
    let bad = |what: &str| {
        AccelError::bad_request(format!(
            "Invalid program request: {what}. Expected [{{\"path\": \"/program\", \"op\": \"replace\", \"value\": [{{\"image_uuid\": \"<image uuid>\"}}]}}]"
        ))
    };
    let op = match body {
        Value::Array(mut ops) if ops.len() == 1 => ops.remove(0),
        _ => return Err(bad("the body must be a list of one patch operation")),
    };
    // Serde would read a struct from a JSON list too: only an object is an operation.
    // One that fails to read has no string path.
    let op: PatchOp = Some(op)
        .filter(Value::is_object)
        .and_then(|op| serde_json::from_value(op).ok())
        .ok_or_else(|| bad("path must be /program"))?;
    if op.path != "/program" {
        return Err(bad("path must be /program"));
    }
    if op.op != "replace" {
        return Err(bad("op must be replace"));
    }
    let value = match op.value {
        Some(Value::Array(mut values)) if values.len() == 1 => values.remove(0),
        _ => return Err(bad("value must be a list of one object")),
    };
    let ProgramImage { image_uuid } = Some(value)
        .filter(Value::is_object)
        .and_then(|v| serde_json::from_value(v).ok())
        .ok_or_else(|| bad("value[0].image_uuid must be a string"))?;
    if uuid::Uuid::try_parse(&image_uuid).is_err() {
        return Err(bad(&format!("image_uuid {image_uuid:?} is not a UUID")));
    }
    Ok(image_uuid)
}

/// `PATCH /v2/deployables/{uuid}/program`: programs the deployable with a Glance
/// image and answers it (200). As upstream the call is synchronous: the request is
/// recorded for the deployable's agent, which fetches, verifies and programs the image
/// and answers; the call waits at most the bind timeout for it. A failed or timed-out
/// programming answers 500 with the reason, as upstream's `FPGAProgramError`.
pub async fn program_deployable(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let uuid = req.param(0);
    req.authorize(&st, rules::DEPLOYABLE_PROGRAM)?;
    req.only_params(&[])?;
    require_uuid(uuid)?;
    let image = program_image(req.json_arg("program_info")?)?;
    let asked = st.app.store.programs().request(uuid, &image).await?;
    let id = asked.id;
    let deadline =
        tokio::time::Instant::now() + Duration::from_secs(st.bind_timeout_secs.max(1) as u64);
    let mut tick = tokio::time::interval(PROGRAM_POLL);
    let done = loop {
        tick.tick().await;
        let now_pr = st.app.store.programs().get(id).await?;
        match now_pr {
            Some(pr) if pr.state == ProgramState::Pending => {}
            Some(pr) => break pr,
            None => return Err(AccelError::internal("the programming request disappeared")),
        }
        if tokio::time::Instant::now() >= deadline {
            let reason = format!(
                "the agent of host {} did not program deployable {uuid} within {} s",
                asked.hostname, st.bind_timeout_secs
            );
            let gave_up = st.app.store.programs().abandon(id, &reason).await?;
            if gave_up {
                return Err(AccelError::internal(format!(
                    "FPGA programming failed: {reason}"
                )));
            }
        }
    };
    if done.state != ProgramState::Done {
        return Err(AccelError::internal(format!(
            "FPGA programming failed: {}",
            done.error.as_deref().unwrap_or("no reason given")
        )));
    }
    Ok(json_reply(
        StatusCode::OK,
        &one_deployable(&st, &req, uuid).await?,
    ))
}

/// How often a program call looks for the agent's answer.
const PROGRAM_POLL: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refusal<T: std::fmt::Debug>(r: AccelResult<T>) -> String {
        r.unwrap_err().message
    }

    #[test]
    fn a_program_body_is_upstreams_and_refusals_name_the_first_fault() {
        let image = "6b7bb4d4-1d6a-4a0c-b1b2-3cbb9b3c9d8a";
        let ok = serde_json::to_value(accel_api::accelerator::program_ops(image)).unwrap();
        assert_eq!(program_image(ok).unwrap(), image);
        let why = |body: Value| {
            let m = refusal(program_image(body));
            m["Invalid program request: ".len()..m.find(". Expected").unwrap()].to_owned()
        };
        let one = "the body must be a list of one patch operation";
        assert_eq!(why(json!({})), one);
        assert_eq!(why(json!([])), one);
        // A list is not an operation, though serde would read a struct from one.
        assert_eq!(
            why(json!([["replace", "/program", [{"image_uuid": image}]]])),
            "path must be /program"
        );
        assert_eq!(why(json!([{"op": "replace"}])), "path must be /program");
        assert_eq!(
            why(json!([{"path": "/program", "value": [{"image_uuid": image}]}])),
            "op must be replace"
        );
        assert_eq!(
            why(json!([{"path": "/program", "op": "replace", "value": null}])),
            "value must be a list of one object"
        );
        assert_eq!(
            why(json!([{"path": "/program", "op": "replace", "value": [[image]]}])),
            "value[0].image_uuid must be a string"
        );
        assert_eq!(
            why(json!([{"path": "/program", "op": "replace", "value": [{"image_uuid": "x"}]}])),
            "image_uuid \"x\" is not a UUID"
        );
    }

    #[test]
    fn an_attribute_body_takes_a_string_id_and_checks_fields_in_order() {
        let a = attribute_body(&json!({"deployable_id": "3", "key": "k", "value": "v"})).unwrap();
        assert_eq!(
            (a.deployable_id, a.key.as_str(), a.value.as_str()),
            (3, "k", "v")
        );
        let id = "deployable_id (an integer) is required.";
        assert_eq!(refusal(attribute_body(&json!([1]))), id);
        assert_eq!(
            refusal(attribute_body(&json!({"deployable_id": 1.5, "key": ""}))),
            id
        );
        assert_eq!(
            refusal(attribute_body(
                &json!({"deployable_id": 1, "key": "", "value": 2})
            )),
            "key (a non-empty string) is required."
        );
        assert_eq!(
            refusal(attribute_body(&json!({"deployable_id": 1, "key": "k"}))),
            "value (a non-empty string) is required."
        );
    }
}
