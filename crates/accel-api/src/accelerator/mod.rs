//! The accelerator API (Cyborg v2) on the wire: device profiles, accelerator requests
//! (ARQs) and their patch body, devices, deployables and attributes, as Cyborg's WSME
//! types serialise them; the named microversions ([`microversion`]); and a typed
//! [`Client`].
//!
//! Field order is the wire order (the workspace's `serde_json` preserves it, and
//! tempest and python-cyborgclient compare documents); a field a microversion lacks is
//! an `Option` skipped when `None`. Deserialising is lenient: what an older server
//! leaves out takes its default, so one client reads every microversion.
//! The request bodies the server reads ([`NewDeviceProfile`], [`NewArqs`],
//! [`PatchOp`], [`NewAttribute`]) take exactly what it has always taken, through the
//! helpers of [`lenient`]; the server words its refusals before reading them.

mod client;
pub mod lenient;
pub mod microversion;

pub use client::{ArqFilter, ArqSelector, Client, DEFAULT_MICROVERSION};
pub use microversion::Version;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A `links` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub href: String,
    pub rel: String,
}

/// One API version as Cyborg's version documents describe it (`GET /`, `GET /v2`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionDoc {
    pub id: String,
    pub status: String,
    pub max_version: String,
    pub min_version: String,
    pub links: Vec<Link>,
}

/// `GET /`: the API's name, description and versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Root {
    pub name: String,
    pub description: String,
    pub versions: Vec<VersionDoc>,
    pub default_version: VersionDoc,
}

/// One request group of a device profile: `resources:RC`, `trait:NAME` and `accel:*`
/// keys with string values, in the order they were given.
pub type Group = Map<String, Value>;

/// A device profile, as listed and created (`GET /v2/device_profiles/{id}` writes its
/// stamps differently upstream, see [`DeviceProfileShown`], and reads into this type).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    pub uuid: String,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub groups: Vec<Group>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub links: Vec<Link>,
}

/// `GET /v2/device_profiles/{id}`: upstream builds this dict by hand, in this order,
/// with `str(datetime)` stamps and the text `None` for a missing `updated_at`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceProfileShown {
    pub name: String,
    pub description: Option<String>,
    pub uuid: String,
    pub groups: Vec<Group>,
    pub created_at: String,
    pub updated_at: String,
    pub links: Vec<Link>,
}

/// `POST /v2/device_profiles`'s body (Cyborg takes a one-element list or the object).
///
/// Read as the server takes it: a missing or `null` name is `""` (which the server
/// refuses as upstream does, "DeviceProfile name needed."), missing or `null` groups
/// are none, and a group value may be an integer as well as a string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewDeviceProfile {
    #[serde(default, deserialize_with = "lenient::null_default")]
    pub name: String,
    #[serde(default, deserialize_with = "lenient::null_default")]
    pub groups: Vec<Group>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// `{"device_profile": {...}}`: one profile as `GET /v2/device_profiles/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceProfileOne {
    pub device_profile: DeviceProfileShown,
}

/// `{"device_profiles": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfiles {
    pub device_profiles: Vec<DeviceProfile>,
}

/// ARQ states as the wire spells them.
pub mod state {
    pub const INITIAL: &str = "Initial";
    pub const BIND_STARTED: &str = "BindStarted";
    pub const BOUND: &str = "Bound";
    pub const UNBOUND: &str = "Unbound";
    pub const BIND_FAILED: &str = "BindFailed";
    pub const DELETING: &str = "Deleting";
}

/// An accelerator request. `attach_handle_*` are filled only when Bound (`""`,
/// `null`, `{}` otherwise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arq {
    pub uuid: String,
    pub state: String,
    pub device_profile_name: String,
    pub device_profile_group_id: i64,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub device_rp_uuid: Option<String>,
    #[serde(default)]
    pub instance_uuid: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub attach_handle_type: String,
    #[serde(default)]
    pub attach_handle_uuid: Option<String>,
    /// The handle's location (for PCI: domain, bus, device, function).
    #[serde(default)]
    pub attach_handle_info: Value,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub links: Vec<Link>,
}

/// `{"arqs": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arqs {
    pub arqs: Vec<Arq>,
}

/// `POST /v2/accelerator_requests`'s body. The group id is read as WSME reads an
/// integer: a number, or a string holding one (`"1"`, `" 1 "`); `null` is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewArqs {
    pub device_profile_name: String,
    #[serde(
        default,
        deserialize_with = "lenient::opt_group_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub device_profile_group_id: Option<u64>,
}

/// One JSON-patch operation of `PATCH /v2/accelerator_requests` and of a deployable's
/// program patch. A missing or non-string `op` reads as `""`, which no patch accepts
/// (the server answers "Every op must be add or remove"); `path` must be a string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchOp {
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub op: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// `PATCH /v2/accelerator_requests`: `{arq_uuid: [ops]}`, Nova's collection form.
pub type ArqPatch = Map<String, Value>;

/// The operations that bind an ARQ (Nova's, in its order).
pub fn bind_ops(hostname: &str, device_rp_uuid: &str, instance_uuid: &str) -> Vec<PatchOp> {
    let add = |path: &str, v: &str| PatchOp {
        op: "add".into(),
        path: path.into(),
        value: Some(Value::String(v.to_owned())),
    };
    vec![
        add("/hostname", hostname),
        add("/device_rp_uuid", device_rp_uuid),
        add("/instance_uuid", instance_uuid),
    ]
}

/// The operations that unbind an ARQ.
pub fn unbind_ops() -> Vec<PatchOp> {
    ["/hostname", "/device_rp_uuid", "/instance_uuid"]
        .into_iter()
        .map(|p| PatchOp {
            op: "remove".into(),
            path: p.into(),
            value: None,
        })
        .collect()
}

/// Adds `ops` for `arq` to a patch body.
pub fn patch_entry(patch: &mut ArqPatch, arq: &str, ops: Vec<PatchOp>) {
    patch.insert(
        arq.to_owned(),
        serde_json::to_value(ops).unwrap_or(Value::Null),
    );
}

/// The one value of a deployable's program patch:
/// `[{"path": "/program", "op": "replace", "value": [{"image_uuid": "<uuid>"}]}]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramImage {
    pub image_uuid: String,
}

/// The operations of `PATCH /v2/deployables/{uuid}/program` with a Glance image.
pub fn program_ops(image_uuid: &str) -> Vec<PatchOp> {
    vec![PatchOp {
        op: "replace".into(),
        path: "/program".into(),
        value: Some(serde_json::json!([ProgramImage {
            image_uuid: image_uuid.to_owned()
        }])),
    }]
}

/// A device; `status` only from 2.3.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    pub uuid: String,
    #[serde(rename = "type")]
    pub device_type: String,
    pub vendor: String,
    pub model: String,
    #[serde(default)]
    pub std_board_info: Option<String>,
    #[serde(default)]
    pub vendor_board_info: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub links: Vec<Link>,
}

/// `{"devices": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Devices {
    pub devices: Vec<Device>,
}

/// A deployable; `attributes_list` is JSON *text* of `[{key: value}, ...]` and
/// `device_id` the device's integer id, as upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployable {
    pub uuid: String,
    #[serde(default)]
    pub parent_id: Option<i64>,
    #[serde(default)]
    pub root_id: Option<i64>,
    pub name: String,
    pub num_accelerators: i64,
    #[serde(default)]
    pub device_id: Option<i64>,
    #[serde(default)]
    pub attributes_list: String,
    #[serde(default)]
    pub rp_uuid: Option<String>,
    #[serde(default)]
    pub driver_name: Option<String>,
    #[serde(default)]
    pub bitstream_id: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub links: Vec<Link>,
}

/// `{"deployables": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployables {
    pub deployables: Vec<Deployable>,
}

/// A deployable's attribute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribute {
    pub uuid: String,
    pub deployable_id: i64,
    pub key: String,
    pub value: String,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub links: Vec<Link>,
}

/// `POST /v2/attributes`: a flat body; `deployable_id` may be a string holding the
/// integer, as the server has always taken it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewAttribute {
    #[serde(deserialize_with = "lenient::int_or_text")]
    pub deployable_id: i64,
    pub key: String,
    pub value: String,
}

/// `{"attributes": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attributes {
    pub attributes: Vec<Attribute>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patch_bodies_are_novas() {
        let mut p = ArqPatch::new();
        patch_entry(&mut p, "a", bind_ops("h", "rp", "i"));
        patch_entry(&mut p, "b", unbind_ops());
        assert_eq!(
            Value::Object(p),
            json!({
                "a": [{"op": "add", "path": "/hostname", "value": "h"},
                      {"op": "add", "path": "/device_rp_uuid", "value": "rp"},
                      {"op": "add", "path": "/instance_uuid", "value": "i"}],
                "b": [{"op": "remove", "path": "/hostname"},
                      {"op": "remove", "path": "/device_rp_uuid"},
                      {"op": "remove", "path": "/instance_uuid"}],
            })
        );
    }

    #[test]
    fn an_unbound_arq_reads() {
        let a: Arq = serde_json::from_value(json!({
            "uuid": "u", "state": "Initial", "device_profile_name": "dp",
            "device_profile_group_id": 0, "hostname": null, "device_rp_uuid": null,
            "instance_uuid": null, "project_id": "p", "attach_handle_type": "",
            "attach_handle_uuid": null, "attach_handle_info": {},
            "created_at": "2019-10-25T12:01:05+00:00", "updated_at": null,
            "links": [{"href": "http://x/accelerator/v2/accelerator_requests/u", "rel": "self"}],
        }))
        .unwrap();
        assert_eq!(a.state, state::INITIAL);
        assert_eq!(a.attach_handle_info, json!({}));
        assert_eq!(a.project_id.as_deref(), Some("p"));
    }
}
