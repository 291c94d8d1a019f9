//! A stand-in for the Kubernetes API server, as the DRA driver uses it: ResourceClaims
//! (get) and ResourceSlices (list with field selectors, create, update with the
//! resourceVersion checked, delete, and create with `dryRun=All`) and Nodes (get).
//! Slices are checked against the fields `resource.k8s.io/v1` defines (unknown fields
//! refused) and its limits on devices and taints. Slices can be watched as the API
//! server streams them (`watch=true`, from a `resourceVersion`, with the same field
//! selectors): one JSON event a line, ADDED, MODIFIED or DELETED.
//!
//! Device taints as a cluster serves them or not ([`Slices::drops_taints`]): an API
//! server with `DRADeviceTaints` on keeps them and fills each taint's `timeAdded`
//! where it is absent; one with the gate off drops the field from what it keeps and
//! answers, without an error (as kube-apiserver's resourceslice strategy does in
//! `dropDisabledDRADeviceTaintsFields`, and the `resource/v1` defaulting of
//! `timeAdded`). A dry run answers the object as it would be kept and keeps nothing.

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The claims the stand-in API server knows, by `<namespace>/<name>`.
pub type Claims = Arc<Mutex<HashMap<String, Value>>>;

pub async fn read_claim(
    State(claims): State<Claims>,
    UrlPath((ns, name)): UrlPath<(String, String)>,
) -> (StatusCode, Json<Value>) {
    match claims.lock().unwrap().get(&format!("{ns}/{name}")) {
        Some(c) => (StatusCode::OK, Json(c.clone())),
        None => (
            StatusCode::NOT_FOUND,
            Json(
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": format!("resourceclaims.resource.k8s.io \"{name}\" not found"),
                "reason": "NotFound", "code": 404}),
            ),
        ),
    }
}

/// A ResourceClaim allocated `devices` (driver, pool, device name) for request `gpu`.
pub fn claim(name: &str, uid: &str, devices: &[(&str, &str, String)]) -> Value {
    let results: Vec<Value> = devices
        .iter()
        .map(|(driver, pool, device)| {
            json!({"request": "gpu", "driver": driver, "pool": pool, "device": device})
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": "gpu.accel.dev"}}]}},
        "status": {"allocation": {"devices": {"results": results}}},
    })
}

/// The claims' route: `GET .../namespaces/{ns}/resourceclaims/{name}`.
pub fn claim_api(claims: Claims) -> axum::Router {
    axum::Router::new()
        .route(
            "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}",
            axum::routing::get(read_claim),
        )
        .with_state(claims)
}

/// The stand-in API server's ResourceSlices, by name, the number of writes (the
/// resourceVersion), and every write as a watch event.
#[derive(Default)]
pub struct Slices {
    pub items: std::collections::BTreeMap<String, Value>,
    /// The cluster does not serve device taints (`DRADeviceTaints` off): they are
    /// dropped from what is kept and answered.
    pub drops_taints: bool,
    /// The cluster does not serve partitionable devices (before 1.36, or
    /// `DRAPartitionableDevices` off): `sharedCounters` and `consumesCounters` are
    /// dropped from what is kept and answered.
    pub drops_counters: bool,
    next: u64,
    events: Vec<(u64, &'static str, Value)>,
    written: tokio::sync::watch::Sender<u64>,
    /// The resourceVersion the last list was answered at.
    listed: tokio::sync::watch::Sender<u64>,
}

impl Slices {
    /// Records a write: the next resourceVersion, on the object and in the events.
    fn write(&mut self, kind: &'static str, mut s: Value) -> Value {
        self.next += 1;
        s["metadata"]["resourceVersion"] = json!(self.next.to_string());
        self.events.push((self.next, kind, s.clone()));
        self.written.send_replace(self.next);
        s
    }

    /// A receiver that changes at every write.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.written.subscribe()
    }

    /// A receiver of the resourceVersion each list was answered at: a list at the
    /// last write's version or later means the driver has read back its own writes.
    pub fn lists(&self) -> tokio::sync::watch::Receiver<u64> {
        self.listed.subscribe()
    }

    /// The resourceVersion of the last write.
    pub fn version(&self) -> u64 {
        self.next
    }

    /// What the API server keeps of a slice it was sent: taints dropped where they
    /// are not served, their `timeAdded` filled where they are.
    fn admit(&self, mut s: Value) -> Value {
        let now = time::OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        if self.drops_counters {
            if let Some(spec) = s["spec"].as_object_mut() {
                spec.remove("sharedCounters");
            }
        }
        for d in s["spec"]["devices"].as_array_mut().into_iter().flatten() {
            let Some(device) = d.as_object_mut() else {
                continue;
            };
            if self.drops_counters {
                device.remove("consumesCounters");
            }
            if self.drops_taints {
                device.remove("taints");
                continue;
            }
            for t in device
                .get_mut("taints")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if t.get("timeAdded").is_none_or(Value::is_null) {
                    t["timeAdded"] = json!(now);
                }
            }
        }
        s
    }
}

/// The field selectors the driver uses: `spec.nodeName=..,spec.driver=..`.
fn selected(s: &Value, want: &[(String, String)]) -> bool {
    want.iter().all(|(k, v)| match k.as_str() {
        "spec.nodeName" => s["spec"]["nodeName"] == v.as_str(),
        "spec.driver" => s["spec"]["driver"] == v.as_str(),
        _ => false,
    })
}

/// The events after `from` that `want` selects, as the API server streams them.
fn watch(st: SliceStore, from: u64, want: Vec<(String, String)>) -> axum::response::Response {
    // Writes before this are seen: the first wait is for a later one.
    let written = st.lock().unwrap().written.subscribe();
    let events = futures::stream::unfold(
        (from, want, written),
        move |(mut from, want, mut written)| {
            let st = st.clone();
            async move {
                loop {
                    let lines: String = {
                        let g = st.lock().unwrap();
                        let mut out = String::new();
                        let after = from;
                        for (rv, kind, obj) in g.events.iter().filter(|(rv, ..)| *rv > after) {
                            from = *rv;
                            if selected(obj, &want) {
                                out += &json!({"type": kind, "object": obj}).to_string();
                                out.push('\n');
                            }
                        }
                        out
                    };
                    if !lines.is_empty() {
                        let chunk: Result<String, std::convert::Infallible> = Ok(lines);
                        return Some((chunk, (from, want, written)));
                    }
                    written.changed().await.ok()?;
                }
            }
        },
    );
    axum::response::Response::builder()
        .header("content-type", "application/json")
        .body(axum::body::Body::from_stream(events))
        .unwrap()
}

pub type SliceStore = Arc<Mutex<Slices>>;

/// An empty store of a cluster without partitionable devices (1.35 and older, or the
/// gate off): counters dropped, taints served.
pub fn store_without_counters() -> SliceStore {
    Arc::new(Mutex::new(Slices {
        drops_counters: true,
        ..Slices::default()
    }))
}

/// An empty store, of a cluster that serves device taints or (`drops_taints`) not.
pub fn store(drops_taints: bool) -> SliceStore {
    Arc::new(Mutex::new(Slices {
        drops_taints,
        ..Slices::default()
    }))
}

/// With `ACCEL_DRA_SLICES_OUT` set (the test command sets it), each slice the driver
/// sends is also written there as the API server keeps it, one file per write, so
/// that scripts/dra-check.sh validates them with `kubernetes-validate --strict`
/// against the published Kubernetes 1.34 and 1.37 schemas: the field list here is
/// ours, that check is upstream's. Dry runs are not kept.
pub fn keep_for_schema_check(s: &Value) {
    static WRITTEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Some(dir) = std::env::var_os("ACCEL_DRA_SLICES_OUT") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let n = WRITTEN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let file = dir.join(format!("slice-k8s-{}-{n}.yaml", std::process::id()));
    std::fs::create_dir_all(&dir).expect("ACCEL_DRA_SLICES_OUT is a writable directory");
    std::fs::write(file, serde_json::to_vec_pretty(s).expect("JSON")).expect("write a slice");
}

/// `resource.k8s.io/v1`'s limits (`ResourceSliceMaxDevices`, with taints
/// `ResourceSliceMaxDevicesWithTaintsOrConsumesCounters`, `DeviceTaintsMaxLength`).
const MAX_DEVICES: usize = 128;
const MAX_DEVICES_WITH_TAINTS: usize = 64;
const MAX_TAINTS: usize = 16;

/// A label name: an optional DNS subdomain prefix and `/`, then at most 63 of
/// `[A-Za-z0-9._-]`, alphanumeric at both ends.
fn label_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && label_value(name)
}

/// A label value: empty, or at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
fn label_value(v: &str) -> bool {
    let b = v.as_bytes();
    v.is_empty()
        || (v.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric())
}

fn only(v: &Value, keys: &[&str], at: &str) -> Result<(), String> {
    match v.as_object() {
        Some(m) => match m.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(k) => Err(format!("unknown field \"{at}.{k}\"")),
            None => Ok(()),
        },
        None => Err(format!("{at} is not an object")),
    }
}

/// A device's taints: `key` a label name, `value` a label value, `effect` one of
/// `None`, `NoSchedule`, `NoExecute`, `timeAdded` RFC 3339; at most 16.
fn validate_taints(taints: &Value, at: &str) -> Result<(), String> {
    let list = taints.as_array().ok_or(format!("{at}.taints"))?;
    if list.len() > MAX_TAINTS {
        return Err(format!(
            "{at}.taints: Too many: {} > {MAX_TAINTS}",
            list.len()
        ));
    }
    for (j, t) in list.iter().enumerate() {
        let at = format!("{at}.taints[{j}]");
        only(t, &["key", "value", "effect", "timeAdded"], &at)?;
        let key = t["key"].as_str().unwrap_or_default();
        if !label_name(key) {
            return Err(format!("{at}.key {key:?} is not a label name"));
        }
        let value = t.get("value").map_or(Some(""), Value::as_str);
        if !value.is_some_and(label_value) {
            return Err(format!("{at}.value {:?} is not a label value", t["value"]));
        }
        let effect = t["effect"].as_str().unwrap_or_default();
        if !matches!(effect, "None" | "NoSchedule" | "NoExecute") {
            return Err(format!("{at}.effect: Unsupported value: {effect:?}"));
        }
        if let Some(time) = t.get("timeAdded").filter(|v| !v.is_null()) {
            let text = time.as_str().unwrap_or_default();
            let parsed =
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339);
            if parsed.is_err() {
                return Err(format!("{at}.timeAdded {text:?} is not RFC 3339"));
            }
        }
    }
    Ok(())
}

/// The fields `resource.k8s.io/v1` defines where the driver writes (ResourceSlice,
/// its spec, pool, devices, attribute values and taints) and its limits: anything
/// else is refused, as a strict API server refuses unknown fields.
pub fn validate_slice(s: &Value) -> Result<(), String> {
    only(s, &["apiVersion", "kind", "metadata", "spec"], "")?;
    if s["apiVersion"] != "resource.k8s.io/v1" || s["kind"] != "ResourceSlice" {
        return Err("not a resource.k8s.io/v1 ResourceSlice".into());
    }
    let spec = &s["spec"];
    only(
        spec,
        &[
            "driver",
            "nodeName",
            "pool",
            "devices",
            "allNodes",
            "nodeSelector",
            "perDeviceNodeSelection",
            "sharedCounters",
        ],
        "spec",
    )?;
    only(
        &spec["pool"],
        &["name", "generation", "resourceSliceCount"],
        "spec.pool",
    )?;
    let devices = spec["devices"].as_array().ok_or("spec.devices")?;
    validate_counter_sets(spec)?;
    let tainted = devices
        .iter()
        .any(|d| d.get("taints").is_some() || d.get("consumesCounters").is_some());
    let most = if tainted {
        MAX_DEVICES_WITH_TAINTS
    } else {
        MAX_DEVICES
    };
    if devices.len() > most {
        return Err(format!(
            "spec.devices: Too many: {} > {most}",
            devices.len()
        ));
    }
    for (i, d) in devices.iter().enumerate() {
        let at = format!("spec.devices[{i}]");
        only(
            d,
            &[
                "name",
                "attributes",
                "capacity",
                "consumesCounters",
                "nodeName",
                "nodeSelector",
                "allNodes",
                "taints",
                "bindsToNode",
                "bindingConditions",
                "bindingFailureConditions",
                "allowMultipleAllocations",
            ],
            &at,
        )?;
        let name = d["name"].as_str().unwrap_or_default();
        let label = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !label {
            return Err(format!("{at}.name {name:?} is not a DNS label"));
        }
        for (k, v) in d["attributes"].as_object().into_iter().flatten() {
            only(
                v,
                &["int", "bool", "string", "version"],
                &format!("{at}.attributes[{k}]"),
            )?;
            if v.as_object().map_or(0, |m| m.len()) != 1 {
                return Err(format!("{at}.attributes[{k}]: exactly one value"));
            }
        }
        if let Some(t) = d.get("taints") {
            validate_taints(t, &at)?;
        }
        if let Some(c) = d.get("consumesCounters") {
            let list = c.as_array().ok_or(format!("{at}.consumesCounters"))?;
            if list.len() > MAX_DEVICE_COUNTER_SETS {
                return Err(format!(
                    "{at}.consumesCounters: Too many: {} > {MAX_DEVICE_COUNTER_SETS}",
                    list.len()
                ));
            }
            for (j, c) in list.iter().enumerate() {
                let at = format!("{at}.consumesCounters[{j}]");
                only(c, &["counterSet", "counters"], &at)?;
                dns_label(c["counterSet"].as_str().unwrap_or_default(), &at)?;
                counters(&c["counters"], &at)?;
            }
        }
    }
    Ok(())
}

/// `resource.k8s.io/v1`'s counter limits: at most 8 sets a slice, 32 counters a set,
/// 2 sets a device draws from; set and counter names DNS labels.
const MAX_COUNTER_SETS: usize = 8;
const MAX_COUNTERS: usize = 32;
const MAX_DEVICE_COUNTER_SETS: usize = 2;

fn dns_label(name: &str, at: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!("{at}: {name:?} is not a DNS label"))
    }
}

fn counters(c: &Value, at: &str) -> Result<(), String> {
    let map = c.as_object().ok_or(format!("{at}.counters"))?;
    if map.len() > MAX_COUNTERS {
        return Err(format!(
            "{at}.counters: Too many: {} > {MAX_COUNTERS}",
            map.len()
        ));
    }
    for (k, v) in map {
        dns_label(k, &format!("{at}.counters"))?;
        only(v, &["value"], &format!("{at}.counters[{k}]"))?;
        if !v["value"].is_string() {
            return Err(format!("{at}.counters[{k}].value: a quantity"));
        }
    }
    Ok(())
}

/// A slice's counter sets: never beside devices (1.35+), within the limits.
fn validate_counter_sets(spec: &Value) -> Result<(), String> {
    let Some(sets) = spec.get("sharedCounters") else {
        return Ok(());
    };
    let sets = sets.as_array().ok_or("spec.sharedCounters")?;
    let has_devices = spec["devices"].as_array().is_some_and(|d| !d.is_empty());
    if has_devices && !sets.is_empty() {
        return Err("spec: only one of devices and sharedCounters may be set".into());
    }
    if sets.len() > MAX_COUNTER_SETS {
        return Err(format!(
            "spec.sharedCounters: Too many: {} > {MAX_COUNTER_SETS}",
            sets.len()
        ));
    }
    for (i, set) in sets.iter().enumerate() {
        let at = format!("spec.sharedCounters[{i}]");
        only(set, &["name", "counters"], &at)?;
        dns_label(set["name"].as_str().unwrap_or_default(), &at)?;
        counters(&set["counters"], &at)?;
    }
    Ok(())
}

/// The slices' routes (and a Node's, the slices' owner), over `store`.
pub fn slice_api(store: SliceStore) -> axum::Router {
    use axum::routing::{get as route_get, put};
    const BASE: &str = "/apis/resource.k8s.io/v1/resourceslices";
    let bad = |m: String| {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"kind": "Status", "message": m})),
        )
    };
    let list = |State(st): State<SliceStore>, Query(q): Query<HashMap<String, String>>| async move {
        use axum::response::IntoResponse;
        let want: Vec<(String, String)> = q
            .get("fieldSelector")
            .map(|f| {
                f.split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        if q.get("watch").map(String::as_str) == Some("true") {
            let from = q
                .get("resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            return watch(st, from, want);
        }
        let g = st.lock().unwrap();
        g.listed.send_replace(g.next);
        let items: Vec<Value> = g
            .items
            .values()
            .filter(|s| selected(s, &want))
            .cloned()
            .collect();
        Json(json!({"kind": "ResourceSliceList",
            "metadata": {"resourceVersion": g.next.to_string()}, "items": items}))
        .into_response()
    };
    let create = move |State(st): State<SliceStore>,
                       Query(q): Query<HashMap<String, String>>,
                       Json(s): Json<Value>| async move {
        validate_slice(&s).map_err(bad)?;
        let mut st = st.lock().unwrap();
        let mut s = st.admit(s);
        let name = format!(
            "{}{}",
            s["metadata"]["generateName"].as_str().unwrap_or("x-"),
            st.next + 1
        );
        s["metadata"]["name"] = json!(name);
        if q.get("dryRun").map(String::as_str) == Some("All") {
            return Ok::<_, (StatusCode, Json<Value>)>((StatusCode::CREATED, Json(s)));
        }
        keep_for_schema_check(&s);
        let s = st.write("ADDED", s);
        st.items.insert(name, s.clone());
        Ok((StatusCode::CREATED, Json(s)))
    };
    let update = move |State(st): State<SliceStore>,
                       UrlPath(name): UrlPath<String>,
                       Json(s): Json<Value>| async move {
        validate_slice(&s).map_err(bad)?;
        let mut st = st.lock().unwrap();
        let Some(old) = st.items.get(&name) else {
            return Err((StatusCode::NOT_FOUND, Json(json!({"message": "not found"}))));
        };
        if old["metadata"]["resourceVersion"] != s["metadata"]["resourceVersion"] {
            return Err((
                StatusCode::CONFLICT,
                Json(json!({"message": "the object has been modified"})),
            ));
        }
        let s = st.admit(s);
        keep_for_schema_check(&s);
        let s = st.write("MODIFIED", s);
        st.items.insert(name, s.clone());
        Ok((StatusCode::OK, Json(s)))
    };
    let delete = |State(st): State<SliceStore>, UrlPath(name): UrlPath<String>| async move {
        let mut st = st.lock().unwrap();
        match st.items.remove(&name) {
            Some(s) => {
                st.write("DELETED", s);
                (
                    StatusCode::OK,
                    Json(json!({"kind": "Status", "status": "Success"})),
                )
            }
            None => (StatusCode::NOT_FOUND, Json(json!({"message": "not found"}))),
        }
    };
    axum::Router::new()
        .route(BASE, route_get(list).post(create))
        .route(&format!("{BASE}/{{name}}"), put(update).delete(delete))
        .route(
            "/api/v1/nodes/{name}",
            route_get(|UrlPath(name): UrlPath<String>| async move {
                Json(json!({"kind": "Node", "metadata": {"name": name, "uid": "node-uid-1"}}))
            }),
        )
        .with_state(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(devices: Value) -> Value {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"generateName": "n-accel.dev-"},
            "spec": {"driver": "accel.dev", "nodeName": "n",
                     "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}})
    }

    #[test]
    fn taints_and_the_device_limits_are_checked_as_resource_v1_says() {
        let tainted = |i: usize, t: Value| json!({"name": format!("d{i}"), "taints": [t]});
        let ok = json!({"key": "accel.dev/unhealthy", "effect": "NoSchedule"});
        assert_eq!(
            validate_slice(&slice(json!([tainted(0, ok.clone())]))),
            Ok(())
        );
        let with_time = json!({"key": "accel.dev/unhealthy", "value": "gone",
            "effect": "NoExecute", "timeAdded": "2026-07-01T10:00:00Z"});
        assert_eq!(
            validate_slice(&slice(json!([tainted(0, with_time)]))),
            Ok(())
        );
        for (bad, why) in [
            (
                json!({"key": "accel.dev/x", "effect": "PreferNoSchedule"}),
                "effect",
            ),
            (json!({"key": "-x", "effect": "NoSchedule"}), "label name"),
            (
                json!({"key": "x", "value": "a b", "effect": "NoSchedule"}),
                "label value",
            ),
            (
                json!({"key": "x", "effect": "NoSchedule", "reason": "?"}),
                "unknown field",
            ),
            (
                json!({"key": "x", "effect": "NoSchedule", "timeAdded": "now"}),
                "RFC 3339",
            ),
        ] {
            let e = validate_slice(&slice(json!([tainted(0, bad)]))).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let many: Vec<Value> = (0..65).map(|i| json!({"name": format!("d{i}")})).collect();
        assert_eq!(validate_slice(&slice(json!(many))), Ok(()));
        let mut many_tainted = many.clone();
        many_tainted[64] = tainted(64, ok);
        let e = validate_slice(&slice(json!(many_tainted))).unwrap_err();
        assert!(e.contains("Too many: 65 > 64"), "{e}");
        let too_many: Vec<Value> = (0..129).map(|i| json!({"name": format!("d{i}")})).collect();
        assert!(validate_slice(&slice(json!(too_many))).is_err());
    }

    #[test]
    fn a_server_without_taints_drops_them_and_one_with_them_fills_the_time() {
        let sent = slice(json!([{"name": "d0", "taints": [
            {"key": "accel.dev/unhealthy", "effect": "NoSchedule"}]}]));
        let served = Slices::default().admit(sent.clone());
        let time = served["spec"]["devices"][0]["taints"][0]["timeAdded"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(time.ends_with('Z') && time.len() == 20, "{time}");
        let dropped = Slices {
            drops_taints: true,
            ..Slices::default()
        }
        .admit(sent);
        assert_eq!(dropped["spec"]["devices"][0], json!({"name": "d0"}));
    }
}
