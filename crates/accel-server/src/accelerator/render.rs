//! Wire shapes of the accelerator API: version documents and each resource's JSON, as
//! Cyborg's WSME types serialize them. Built here from store rows, explicitly, so the
//! store's types never leak onto the wire.

use super::error::py_dumps;
use super::microversion::Version;
use super::Req;
use accel_api::accelerator::{self as wire, Group, Link};
use accel_store::accelerator::arqs::Arq;
use accel_store::accelerator::hardware::{Attribute, Deployable, Device};
use accel_store::accelerator::profiles::Profile;
use accel_store::accelerator::Stamps;
use serde_json::{json, Value};

const DESCRIPTION: &str = "Cyborg is the OpenStack project for lifecycle management of hardware accelerators, such as GPUs,FPGAs, AI chips, security accelerators, etc.";

/// Version 2 as the documents list it; `id` and the link differ between `/` and `/v2`.
fn version_doc(id: &str, href: String) -> wire::VersionDoc {
    wire::VersionDoc {
        id: id.to_owned(),
        status: "CURRENT".to_owned(),
        max_version: Version::MAX.to_string(),
        min_version: Version::MIN.to_string(),
        links: vec![Link {
            href,
            rel: "self".to_owned(),
        }],
    }
}

/// `GET /`: the versions document (no microversion headers).
pub fn root_document(host_url: &str) -> wire::Root {
    let entry = || version_doc("v2", format!("{host_url}/accelerator/v2"));
    wire::Root {
        name: "OpenStack Cyborg API".to_owned(),
        description: DESCRIPTION.to_owned(),
        versions: vec![entry()],
        default_version: entry(),
    }
}

/// `GET /v2`: a bare object (not wrapped in `version`), id `v2.0`.
pub fn v2_document(host_url: &str) -> wire::VersionDoc {
    version_doc("v2.0", format!("{host_url}/accelerator/v2/"))
}

/// Epoch seconds as Python's `datetime.isoformat()` of an aware UTC time
/// (`2019-10-25T12:01:05+00:00`), or with `sep` between date and time.
fn iso(secs: i64, sep: char) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let (date, clock) = (t.date(), t.time());
    format!(
        "{:04}-{:02}-{:02}{sep}{:02}:{:02}:{:02}+00:00",
        date.year(),
        u8::from(date.month()),
        date.day(),
        clock.hour(),
        clock.minute(),
        clock.second()
    )
}

/// `created_at` as WSME renders it.
fn created(s: Stamps) -> Option<String> {
    Some(iso(s.created, 'T'))
}

/// `updated_at` as WSME renders it (`null` until updated).
fn updated(s: Stamps) -> Option<String> {
    s.updated.map(|u| iso(u, 'T'))
}

fn self_link(href: String) -> Vec<Link> {
    vec![Link {
        href,
        rel: "self".into(),
    }]
}

fn groups(p: &Profile) -> Vec<Group> {
    p.groups
        .iter()
        .map(|g| {
            g.entries()
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect()
        })
        .collect()
}

/// A device profile in list and create responses.
pub fn profile(req: &Req, p: &Profile) -> wire::DeviceProfile {
    wire::DeviceProfile {
        uuid: p.uuid.clone(),
        name: p.name.clone(),
        description: p.description.clone(),
        groups: groups(p),
        created_at: created(p.stamps),
        updated_at: updated(p.stamps),
        links: self_link(req.link("device_profiles", &p.uuid)),
    }
}

/// `GET /device_profiles/{id}` builds its dict by hand upstream: `str(datetime)` with
/// a space, and the text `None` for a missing `updated_at`.
pub fn profile_shown(req: &Req, p: &Profile) -> wire::DeviceProfileShown {
    wire::DeviceProfileShown {
        name: p.name.clone(),
        description: p.description.clone(),
        uuid: p.uuid.clone(),
        groups: groups(p),
        created_at: iso(p.stamps.created, ' '),
        updated_at: p
            .stamps
            .updated
            .map_or_else(|| "None".to_owned(), |u| iso(u, ' ')),
        links: self_link(req.link("device_profiles", &p.uuid)),
    }
}

/// An ARQ. `attach_handle_*` are filled only when Bound (`""`, `null`, `{}` otherwise).
pub fn arq(req: &Req, a: &Arq) -> wire::Arq {
    let (ah_type, ah_uuid, ah_info) = match &a.attach_handle {
        Some(h) => (
            h.attach_type.clone(),
            Some(h.uuid.clone()),
            serde_json::from_str::<Value>(&h.attach_info)
                .unwrap_or_else(|_| Value::Object(Default::default())),
        ),
        None => (String::new(), None, Value::Object(Default::default())),
    };
    wire::Arq {
        uuid: a.uuid.clone(),
        state: a.state.as_str().to_owned(),
        device_profile_name: a.device_profile_name.clone(),
        device_profile_group_id: a.device_profile_group_id,
        hostname: a.hostname.clone(),
        device_rp_uuid: a.device_rp_uuid.clone(),
        instance_uuid: a.instance_uuid.clone(),
        project_id: a.project_id.clone(),
        attach_handle_type: ah_type,
        attach_handle_uuid: ah_uuid,
        attach_handle_info: ah_info,
        created_at: created(a.stamps),
        updated_at: updated(a.stamps),
        links: self_link(req.link("accelerator_requests", &a.uuid)),
    }
}

/// A device; `status` only from 2.3.
pub fn device(req: &Req, d: &Device) -> wire::Device {
    wire::Device {
        uuid: d.uuid.clone(),
        device_type: d.device_type.as_str().to_owned(),
        vendor: d.vendor.clone(),
        model: d.model.clone(),
        std_board_info: d.std_board_info.clone(),
        vendor_board_info: d.vendor_board_info.clone(),
        hostname: Some(d.hostname.clone()),
        status: (req.version >= Version::DEVICE_STATUS).then(|| d.status.as_str().to_owned()),
        created_at: created(d.stamps),
        updated_at: updated(d.stamps),
        links: self_link(req.link("devices", &d.uuid)),
    }
}

/// A deployable; `attributes_list` is JSON *text* of `[{key: value}, ...]`, and
/// `device_id` the device's integer id, as upstream.
pub fn deployable(req: &Req, d: &Deployable, attrs: &[Attribute]) -> wire::Deployable {
    let list = Value::Array(
        attrs
            .iter()
            .map(|a| json!({ a.key.clone(): a.value }))
            .collect(),
    );
    wire::Deployable {
        uuid: d.uuid.clone(),
        parent_id: d.parent_id,
        root_id: d.root_id,
        name: d.name.clone(),
        num_accelerators: d.num_accelerators,
        device_id: Some(d.device_id),
        attributes_list: py_dumps(&list),
        rp_uuid: d.rp_uuid.clone(),
        driver_name: d.driver_name.clone(),
        bitstream_id: d.bitstream_id.clone(),
        created_at: created(d.stamps),
        updated_at: updated(d.stamps),
        links: vec![
            Link {
                href: req.link("deployables", &d.uuid),
                rel: "self".into(),
            },
            Link {
                href: req.bookmark("deployables", &d.uuid),
                rel: "bookmark".into(),
            },
        ],
    }
}

pub fn attribute(req: &Req, a: &Attribute) -> wire::Attribute {
    wire::Attribute {
        uuid: a.uuid.clone(),
        deployable_id: a.deployable_id,
        key: a.key.clone(),
        value: a.value.clone(),
        created_at: created(a.stamps),
        updated_at: updated(a.stamps),
        links: self_link(req.link("attributes", &a.uuid)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_documents_byte_for_byte() {
        let root = serde_json::to_string(&root_document("http://h:6666")).unwrap();
        let v2 = r#"{"id":"v2","status":"CURRENT","max_version":"2.3","min_version":"2.0","links":[{"href":"http://h:6666/accelerator/v2","rel":"self"}]}"#;
        assert_eq!(
            root,
            format!(
                r#"{{"name":"OpenStack Cyborg API","description":"{DESCRIPTION}","versions":[{v2}],"default_version":{v2}}}"#
            )
        );
        assert_eq!(
            serde_json::to_string(&v2_document("http://h:6666")).unwrap(),
            r#"{"id":"v2.0","status":"CURRENT","max_version":"2.3","min_version":"2.0","links":[{"href":"http://h:6666/accelerator/v2/","rel":"self"}]}"#
        );
    }

    #[test]
    fn timestamps_like_python() {
        assert_eq!(iso(0, 'T'), "1970-01-01T00:00:00+00:00");
        assert_eq!(iso(1_572_004_865, 'T'), "2019-10-25T12:01:05+00:00");
        assert_eq!(iso(1_583_753_165, ' '), "2020-03-09 11:26:05+00:00");
    }
}
