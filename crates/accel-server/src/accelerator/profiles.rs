//! `/v2/device_profiles`: list, show (by name from 2.2), create, delete.

use super::error::{AccelError, AccelResult};
use super::microversion::Version;
use super::{is_uuid_like, json_reply, render, AccelState, Reply, Req};
use accel_api::accelerator::{self as wire, Group, NewDeviceProfile};
use accel_core::accelerator::{DeviceProfile, ProfileError};
use accel_core::policy::cyborg as rules;
use accel_store::accelerator::refused::Key;
use accel_store::accelerator::Refused;
use accel_store::StoreError;
use axum::http::StatusCode;
use serde_json::Value;
use std::sync::Arc;

pub async fn list(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::DEVICE_PROFILE_GET_ALL)?;
    req.only_params(&["name"])?;
    let names: Option<Vec<String>> = req
        .query_last("name")
        .map(|n| n.split(',').map(str::to_owned).collect());
    let found = st.app.store.profiles().list(names.as_deref()).await?;
    let list: Vec<_> = found.iter().map(|p| render::profile(&req, p)).collect();
    Ok(json_reply(
        StatusCode::OK,
        &wire::DeviceProfiles {
            device_profiles: list,
        },
    ))
}

pub async fn show(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let id = req.param(0);
    req.authorize(&st, rules::DEVICE_PROFILE_GET_ONE)?;
    req.only_params(&[])?;
    let by_uuid = is_uuid_like(id);
    if !by_uuid && req.version < Version::DP_BY_NAME {
        return Err(AccelError::not_acceptable(format!(
            "Request not acceptable. The minimal required API version should be {}",
            Version::DP_BY_NAME
        )));
    }
    let key = if by_uuid {
        Key::Uuid(id.to_owned())
    } else {
        Key::Name(id.to_owned())
    };
    let found = st.app.store.profiles().show(&key).await?;
    Ok(json_reply(
        StatusCode::OK,
        &wire::DeviceProfileOne {
            device_profile: render::profile_shown(&req, &found),
        },
    ))
}

/// A group's entries as text: values are strings on the wire; WSME also takes
/// integers (stored as text).
fn group_entries(group: &Group) -> AccelResult<Vec<(String, String)>> {
    group
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
                other => {
                    let kind = match other {
                        Value::Null => "null",
                        Value::Bool(_) => "a boolean",
                        Value::Number(_) => "a fraction",
                        Value::Array(_) => "a list",
                        _ => "an object",
                    };
                    return Err(AccelError::bad_request(
                        ProfileError::BadValueType(kind, k.clone()).to_string(),
                    ));
                }
            };
            Ok((k.clone(), text))
        })
        .collect()
}

fn profile_uuid(text: &str) -> AccelResult<uuid::Uuid> {
    uuid::Uuid::try_parse(text)
        .ok()
        .filter(|_| is_uuid_like(text))
        .ok_or_else(|| AccelError::invalid_uuid(text))
}

/// The one profile of the body, which Cyborg takes as a one-element list.
fn the_one(body: Value) -> AccelResult<Value> {
    match body {
        Value::Array(mut list) if list.len() == 1 => Ok(list.remove(0)),
        _ => Err(AccelError::bad_request(
            "Only one device profile allowed per POST request for now.",
        )),
    }
}

/// The checks [`NewDeviceProfile`] cannot word, in the order they have always been
/// made (the first failing one answers): an object; name, description and uuid
/// strings or `null`; a valid name; groups a list of objects whose values are strings
/// or integers. A client uuid's form is checked last of all, in [`create`].
fn check_profile(one: &Value) -> AccelResult<()> {
    let obj = one
        .as_object()
        .ok_or_else(|| AccelError::bad_request("A device profile must be a JSON object."))?;
    let text = |key: &str| -> AccelResult<Option<&str>> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(AccelError::bad_request(format!(
                "Device profile field {key} must be a string."
            ))),
        }
    };
    let name = text("name")?.unwrap_or_default();
    text("description")?;
    text("uuid")?;
    DeviceProfile::check_name(name).map_err(|e| AccelError::bad_request(e.to_string()))?;
    match obj.get("groups") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(gs)) => gs.iter().try_for_each(|g| {
            let g = g
                .as_object()
                .ok_or_else(|| AccelError::bad_request(ProfileError::GroupNotObject.to_string()))?;
            group_entries(g).map(drop)
        }),
        Some(_) => Err(AccelError::bad_request(
            "Device profile groups must be a list of JSON objects.",
        )),
    }
}

/// The one-element list body, checked, read as a [`NewDeviceProfile`] and turned
/// into a domain profile; beside it the client's uuid, not yet checked.
fn parse_body(body: Value) -> AccelResult<(DeviceProfile, Option<String>)> {
    let one = the_one(body)?;
    check_profile(&one)?;
    let p: NewDeviceProfile =
        serde_json::from_value(one).map_err(|e| AccelError::bad_request(e.to_string()))?;
    let groups = p
        .groups
        .iter()
        .map(group_entries)
        .collect::<AccelResult<_>>()?;
    let profile = DeviceProfile::parse(&p.name, p.description, None, groups)
        .map_err(|e| AccelError::bad_request(e.to_string()))?;
    Ok((profile, p.uuid))
}

pub async fn create(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::DEVICE_PROFILE_CREATE)?;
    req.only_params(&[])?;
    let (mut profile, uuid) = parse_body(req.json_arg("req_devprof_list")?)?;
    if let Some(text) = uuid {
        // accel's own check comes after every one upstream makes: upstream stores any
        // text as the uuid, so a taken name is its answer (409) before a bad uuid.
        match profile_uuid(&text) {
            Ok(u) => profile.uuid = Some(u),
            Err(bad) => {
                let name = Key::Name(profile.name.clone());
                if st.app.store.profiles().show(&name).await.is_ok() {
                    let name = profile.name.clone();
                    return Err(StoreError::from(Refused::ProfileNameTaken { name }).into());
                }
                return Err(bad);
            }
        }
    }
    let created = st.app.store.profiles().create(&profile).await?;
    Ok(json_reply(
        StatusCode::CREATED,
        &render::profile(&req, &created),
    ))
}

/// `DELETE /device_profiles/{uuid|name}` or `?value=uuid` / `?value=n1,n2`: all named
/// profiles go, or none (upstream deletes those before the first missing one).
pub async fn delete(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let id = req.params.first().map(String::as_str);
    req.authorize(&st, rules::DEVICE_PROFILE_DELETE)?;
    req.only_params(&["value"])?;
    let value = match id.or(req.query_last("value")) {
        Some(v) if !v.is_empty() => v.to_owned(),
        _ => return Err(AccelError::bad_request("Missing argument: \"value\"")),
    };
    // A name given twice: upstream deletes the profile, then cannot find it again (a 404
    // naming it, after the deletion).
    let mut repeated = None;
    let keys: Vec<Key> = if is_uuid_like(&value) {
        vec![Key::Uuid(value)]
    } else {
        let mut names: Vec<&str> = Vec::new();
        for n in value.split(',') {
            match names.contains(&n) {
                true => repeated = repeated.or(Some(n.to_owned())),
                false => names.push(n),
            }
        }
        names.into_iter().map(|n| Key::Name(n.to_owned())).collect()
    };
    st.app.store.profiles().delete_all(&keys).await?;
    if let Some(name) = repeated {
        return Err(AccelError::not_found(format!(
            "Device Profile not found with name={name}"
        )));
    }
    Ok(Reply::status(StatusCode::NO_CONTENT))
}
