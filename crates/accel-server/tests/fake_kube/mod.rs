//! A stand-in for the Kubernetes API server, as the DRA driver uses it: ResourceClaims
//! (get) and ResourceSlices (list with field selectors, create, update with the
//! resourceVersion checked, delete) and Nodes (get). Slices are checked against the
//! fields `resource.k8s.io/v1` defines (unknown fields refused). Slices can be watched
//! as the API server streams them (`watch=true`, from a `resourceVersion`, with the
//! same field selectors): one JSON event a line, ADDED, MODIFIED or DELETED.

use axum::extract::{Path as UrlPath, State};
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

/// The stand-in API server's ResourceSlices, by name, the number of writes (the
/// resourceVersion), and every write as a watch event.
#[derive(Default)]
pub struct Slices {
    pub items: std::collections::BTreeMap<String, Value>,
    next: u64,
    events: Vec<(u64, &'static str, Value)>,
    written: tokio::sync::watch::Sender<u64>,
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

/// With `ACCEL_DRA_SLICES_OUT` set (the test command sets it), each slice the driver
/// sends is also written there as it was sent, one file per write, so that
/// scripts/dra-check.sh validates them with `kubernetes-validate --strict` against the
/// published Kubernetes 1.34 and 1.37 schemas: the field list here is ours, that check
/// is upstream's.
fn keep_for_schema_check(s: &Value) {
    static WRITTEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Some(dir) = std::env::var_os("ACCEL_DRA_SLICES_OUT") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let n = WRITTEN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let file = dir.join(format!("slice-{}-{n}.yaml", std::process::id()));
    std::fs::create_dir_all(&dir).expect("ACCEL_DRA_SLICES_OUT is a writable directory");
    std::fs::write(file, serde_json::to_vec_pretty(s).expect("JSON")).expect("write a slice");
}

/// The fields `resource.k8s.io/v1` defines where the driver writes (ResourceSlice,
/// its spec, pool, devices and attribute values): anything else is refused, as a
/// strict API server refuses unknown fields.
pub fn validate_slice(s: &Value) -> Result<(), String> {
    let only = |v: &Value, keys: &[&str], at: &str| -> Result<(), String> {
        match v.as_object() {
            Some(m) => match m.keys().find(|k| !keys.contains(&k.as_str())) {
                Some(k) => Err(format!("unknown field \"{at}.{k}\"")),
                None => Ok(()),
            },
            None => Err(format!("{at} is not an object")),
        }
    };
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
    for (i, d) in spec["devices"]
        .as_array()
        .ok_or("spec.devices")?
        .iter()
        .enumerate()
    {
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
    }
    Ok(())
}

pub fn slice_api(store: SliceStore) -> axum::Router {
    use axum::extract::Query;
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
    let create = move |State(st): State<SliceStore>, Json(mut s): Json<Value>| async move {
        validate_slice(&s).map_err(bad)?;
        keep_for_schema_check(&s);
        let mut st = st.lock().unwrap();
        let name = format!(
            "{}{}",
            s["metadata"]["generateName"].as_str().unwrap_or("x-"),
            st.next + 1
        );
        s["metadata"]["name"] = json!(name);
        let s = st.write("ADDED", s);
        st.items.insert(name, s.clone());
        Ok::<_, (StatusCode, Json<Value>)>((StatusCode::CREATED, Json(s)))
    };
    let update = move |State(st): State<SliceStore>,
                       UrlPath(name): UrlPath<String>,
                       Json(s): Json<Value>| async move {
        validate_slice(&s).map_err(bad)?;
        keep_for_schema_check(&s);
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
