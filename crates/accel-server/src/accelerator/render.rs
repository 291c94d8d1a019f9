//! Wire shapes of the accelerator API: version documents and each resource's JSON, as
//! Cyborg's WSME types serialize them. Built here from store rows, explicitly, so the
//! store's types never leak onto the wire.

use super::error::py_dumps;
use super::microversion::Version;
use super::Ctx;
use accel_store::accelerator::arqs::Arq;
use accel_store::accelerator::hardware::{Attribute, Deployable, Device};
use accel_store::accelerator::profiles::Profile;
use accel_store::accelerator::Stamps;
use serde_json::{json, Map, Value};

const DESCRIPTION: &str = "Cyborg is the OpenStack project for lifecycle management of hardware accelerators, such as GPUs,FPGAs, AI chips, security accelerators, etc.";

fn version_entry(host_url: &str) -> Value {
    json!({
        "id": "v2",
        "status": "CURRENT",
        "max_version": Version::MAX.to_string(),
        "min_version": Version::MIN.to_string(),
        "links": [{"href": format!("{host_url}/accelerator/v2"), "rel": "self"}],
    })
}

/// `GET /`: the versions document (no microversion headers).
pub fn root_document(host_url: &str) -> Value {
    json!({
        "name": "OpenStack Cyborg API",
        "description": DESCRIPTION,
        "versions": [version_entry(host_url)],
        "default_version": version_entry(host_url),
    })
}

/// `GET /v2`: a bare object (not wrapped in `version`), id `v2.0`.
pub fn v2_document(host_url: &str) -> Value {
    json!({
        "id": "v2.0",
        "status": "CURRENT",
        "max_version": Version::MAX.to_string(),
        "min_version": Version::MIN.to_string(),
        "links": [{"href": format!("{host_url}/accelerator/v2/"), "rel": "self"}],
    })
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Epoch seconds as Python's `datetime.isoformat()` of an aware UTC time
/// (`2019-10-25T12:01:05+00:00`), or with `sep` between date and time.
fn iso(secs: i64, sep: char) -> String {
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}{sep}{:02}:{:02}:{:02}+00:00",
        t / 3600,
        t % 3600 / 60,
        t % 60
    )
}

/// `created_at`/`updated_at` as WSME renders them (`null` until updated).
fn stamps(obj: &mut Map<String, Value>, s: Stamps) {
    obj.insert("created_at".into(), json!(iso(s.created, 'T')));
    obj.insert("updated_at".into(), json!(s.updated.map(|u| iso(u, 'T'))));
}

fn groups(p: &Profile) -> Value {
    Value::Array(
        p.groups
            .iter()
            .map(|g| {
                Value::Object(
                    g.entries()
                        .iter()
                        .map(|(k, v)| (k.clone(), json!(v)))
                        .collect(),
                )
            })
            .collect(),
    )
}

/// A device profile in list and create responses.
pub fn profile(ctx: &Ctx, p: &Profile) -> Value {
    let mut o = Map::new();
    o.insert("uuid".into(), json!(p.uuid));
    o.insert("name".into(), json!(p.name));
    o.insert("description".into(), json!(p.description));
    o.insert("groups".into(), groups(p));
    stamps(&mut o, p.stamps);
    o.insert(
        "links".into(),
        json!([{"href": ctx.link("device_profiles", &p.uuid), "rel": "self"}]),
    );
    Value::Object(o)
}

/// `GET /device_profiles/{id}` builds its dict by hand upstream: `str(datetime)` with
/// a space, and the text `None` for a missing `updated_at`.
pub fn profile_shown(ctx: &Ctx, p: &Profile) -> Value {
    json!({
        "name": p.name,
        "description": p.description,
        "uuid": p.uuid,
        "groups": groups(p),
        "created_at": iso(p.stamps.created, ' '),
        "updated_at": p.stamps.updated.map_or_else(|| "None".to_owned(), |u| iso(u, ' ')),
        "links": [{"href": ctx.link("device_profiles", &p.uuid), "rel": "self"}],
    })
}

/// An ARQ. `attach_handle_*` are filled only when Bound (`""`, `null`, `{}` otherwise).
pub fn arq(ctx: &Ctx, a: &Arq) -> Value {
    let (ah_type, ah_uuid, ah_info) = match &a.attach_handle {
        Some(h) => (
            json!(h.attach_type),
            json!(h.uuid),
            serde_json::from_str::<Value>(&h.attach_info).unwrap_or_else(|_| json!({})),
        ),
        None => (json!(""), Value::Null, json!({})),
    };
    let mut o = Map::new();
    o.insert("uuid".into(), json!(a.uuid));
    o.insert("state".into(), json!(a.state.as_str()));
    o.insert("device_profile_name".into(), json!(a.device_profile_name));
    o.insert(
        "device_profile_group_id".into(),
        json!(a.device_profile_group_id),
    );
    o.insert("hostname".into(), json!(a.hostname));
    o.insert("device_rp_uuid".into(), json!(a.device_rp_uuid));
    o.insert("instance_uuid".into(), json!(a.instance_uuid));
    o.insert("project_id".into(), json!(a.project_id));
    o.insert("attach_handle_type".into(), ah_type);
    o.insert("attach_handle_uuid".into(), ah_uuid);
    o.insert("attach_handle_info".into(), ah_info);
    stamps(&mut o, a.stamps);
    o.insert(
        "links".into(),
        json!([{"href": ctx.link("accelerator_requests", &a.uuid), "rel": "self"}]),
    );
    Value::Object(o)
}

/// A device; `status` only from 2.3.
pub fn device(ctx: &Ctx, d: &Device) -> Value {
    let mut o = Map::new();
    o.insert("uuid".into(), json!(d.uuid));
    o.insert("type".into(), json!(d.device_type.as_str()));
    o.insert("vendor".into(), json!(d.vendor));
    o.insert("model".into(), json!(d.model));
    o.insert("std_board_info".into(), json!(d.std_board_info));
    o.insert("vendor_board_info".into(), json!(d.vendor_board_info));
    o.insert("hostname".into(), json!(d.hostname));
    if ctx.version >= Version::DEVICE_STATUS {
        o.insert("status".into(), json!(d.status.as_str()));
    }
    stamps(&mut o, d.stamps);
    o.insert(
        "links".into(),
        json!([{"href": ctx.link("devices", &d.uuid), "rel": "self"}]),
    );
    Value::Object(o)
}

/// A deployable; `attributes_list` is JSON *text* of `[{key: value}, ...]`, and
/// `device_id` the device's integer id, as upstream.
pub fn deployable(ctx: &Ctx, d: &Deployable, attrs: &[Attribute]) -> Value {
    let list = Value::Array(
        attrs
            .iter()
            .map(|a| json!({ a.key.clone(): a.value }))
            .collect(),
    );
    let mut o = Map::new();
    o.insert("uuid".into(), json!(d.uuid));
    o.insert("parent_id".into(), json!(d.parent_id));
    o.insert("root_id".into(), json!(d.root_id));
    o.insert("name".into(), json!(d.name));
    o.insert("num_accelerators".into(), json!(d.num_accelerators));
    o.insert("device_id".into(), json!(d.device_id));
    o.insert("attributes_list".into(), json!(py_dumps(&list)));
    o.insert("rp_uuid".into(), json!(d.rp_uuid));
    o.insert("driver_name".into(), json!(d.driver_name));
    o.insert("bitstream_id".into(), json!(d.bitstream_id));
    stamps(&mut o, d.stamps);
    o.insert(
        "links".into(),
        json!([
            {"href": ctx.link("deployables", &d.uuid), "rel": "self"},
            {"href": ctx.bookmark("deployables", &d.uuid), "rel": "bookmark"},
        ]),
    );
    Value::Object(o)
}

pub fn attribute(ctx: &Ctx, a: &Attribute) -> Value {
    let mut o = Map::new();
    o.insert("uuid".into(), json!(a.uuid));
    o.insert("deployable_id".into(), json!(a.deployable_id));
    o.insert("key".into(), json!(a.key));
    o.insert("value".into(), json!(a.value));
    stamps(&mut o, a.stamps);
    o.insert(
        "links".into(),
        json!([{"href": ctx.link("attributes", &a.uuid), "rel": "self"}]),
    );
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_like_python() {
        assert_eq!(iso(0, 'T'), "1970-01-01T00:00:00+00:00");
        assert_eq!(iso(1_572_004_865, 'T'), "2019-10-25T12:01:05+00:00");
        assert_eq!(iso(1_583_753_165, ' '), "2020-03-09 11:26:05+00:00");
    }
}
