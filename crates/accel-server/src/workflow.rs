//! The Nova workflow without Nova: what nova-api, the scheduler, nova-conductor and
//! nova-compute do with Placement and the accelerator API to boot an instance with a
//! device profile (seed 000, steps 1–10), over HTTP only, as a library
//! (`accel boot` / `accel unboot` print its results).
//!
//! ```text
//! GET  /v2/device_profiles?name=DP            exactly one profile
//! GET  /allocation_candidates (1.39)          flavor resources unsuffixed, profile group N
//!                                             as suffix `_device_profile_N`, limit=1
//!                                             (100 when a group names accel:function_id)
//! PUT  /allocations/{instance} (1.39)         the first candidate, consumer_type INSTANCE;
//!                                             with a function: seed 003's weigher
//!                                             ([`weigh`]) picks the one whose regions
//!                                             already carry it
//! POST /v2/accelerator_requests               the profile's ARQs
//!      each ARQ ─▶ mappings["_device_profile_<group>"] ─▶ device provider; its root
//!      provider's name is the host (Nova's compute node name)
//! PATCH /v2/accelerator_requests              bind all ARQs (service token)
//! GET  /v2/accelerator_requests?instance=&bind_state=resolved   until not 423
//! ```
//!
//! A step that fails after the claim undoes what was done (ARQs deleted, allocations
//! released), as nova-conductor does when a build aborts. [`unboot`] is the reverse:
//! unbind, delete the ARQs, release the allocations.

use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::time::Duration;

/// Where the two APIs are and how to authenticate.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub placement_url: String,
    pub accelerator_url: String,
    /// `X-Auth-Token` for both APIs (noauth: `user[:project]`).
    pub token: String,
    /// `X-Service-Token` for the calls Nova makes with one (bind, unbind, delete); the
    /// user token when `None`. In noauth mode `X-Service-Roles: service` stands for it.
    pub service_token: Option<String>,
}

/// What to boot.
#[derive(Debug, Clone)]
pub struct BootRequest {
    pub device_profile: String,
    /// The flavor's own resources (the unsuffixed request group), e.g. `VCPU:2`.
    pub resources: Vec<(String, u64)>,
    pub instance: String,
    pub project_id: String,
    pub user_id: String,
    /// Placement's `group_policy` (`none` or `isolate`).
    pub group_policy: String,
    /// How long to wait for the ARQs to resolve.
    pub timeout: Duration,
}

/// One bound accelerator.
#[derive(Debug, Clone, PartialEq)]
pub struct Attached {
    pub arq_uuid: String,
    pub device_profile_group_id: i64,
    pub state: String,
    pub hostname: String,
    pub device_rp_uuid: String,
    pub attach_handle_type: String,
    pub attach_handle_uuid: Option<String>,
    /// The handle's location (for PCI: domain, bus, device, function).
    pub attach_handle_info: Value,
}

/// A booted instance: where it landed, what Placement holds for it, its accelerators.
#[derive(Debug, Clone, PartialEq)]
pub struct Booted {
    pub instance: String,
    pub host: String,
    /// `{rp_uuid: {"resources": {class: amount}}}` as claimed.
    pub allocations: Value,
    pub arqs: Vec<Attached>,
}

/// What [`unboot`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unbooted {
    pub arqs_unbound: usize,
    pub arqs_deleted: usize,
    pub allocations_released: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    #[error("{step}: HTTP {status}: {body}")]
    Http {
        step: &'static str,
        status: u16,
        body: String,
    },
    /// The API could not be reached; the cause is the error's source.
    #[error("{step}")]
    Transport {
        step: &'static str,
        source: reqwest::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("no allocation candidate satisfies the request (profile {0})")]
    NoCandidate(String),
    #[error("the accelerator requests did not resolve within {0:?}")]
    Timeout(Duration),
    #[error("binding failed for ARQ(s) {0}; the instance's ARQs and allocations were released")]
    BindFailed(String),
}

type Result<T> = std::result::Result<T, WorkflowError>;

/// Parses `RC:N,RC:N` (a flavor's resources; empty is no resources).
pub fn parse_resources(s: &str) -> Result<Vec<(String, u64)>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (rc, n) = p.split_once(':').ok_or_else(|| {
                WorkflowError::Invalid(format!("resource {p:?} is not RESOURCE_CLASS:AMOUNT"))
            })?;
            let n: u64 = n.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                WorkflowError::Invalid(format!("amount in {p:?} must be a positive integer"))
            })?;
            Ok((rc.trim().to_owned(), n))
        })
        .collect()
}

/// A fresh instance uuid, for a boot that names none.
pub fn new_instance_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The request group suffix of profile group `n` (Nova's requester id
/// `device_profile_<n>`).
pub fn group_suffix(n: usize) -> String {
    format!("_device_profile_{n}")
}

struct Api<'a> {
    http: reqwest::Client,
    ep: &'a Endpoints,
}

#[derive(Clone, Copy)]
enum Service {
    Placement,
    Accelerator,
}

impl<'a> Api<'a> {
    fn new(ep: &'a Endpoints) -> Api<'a> {
        Api {
            http: reqwest::Client::new(),
            ep,
        }
    }

    /// One request; `as_service` adds Nova's service-token headers.
    #[allow(clippy::too_many_arguments)]
    async fn call(
        &self,
        step: &'static str,
        svc: Service,
        method: Method,
        path: &str,
        query: &[(String, String)],
        body: Option<&Value>,
        as_service: bool,
    ) -> Result<(StatusCode, Value)> {
        let base = match svc {
            Service::Placement => &self.ep.placement_url,
            Service::Accelerator => &self.ep.accelerator_url,
        };
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let mut req = self
            .http
            .request(method, &url)
            .header("x-auth-token", &self.ep.token)
            .query(query);
        if let Service::Placement = svc {
            req = req.header("openstack-api-version", "placement 1.39");
        }
        if as_service {
            let t = self.ep.service_token.as_deref().unwrap_or(&self.ep.token);
            req = req
                .header("x-service-token", t)
                .header("x-service-roles", "service");
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|source| WorkflowError::Transport { step, source })?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|source| WorkflowError::Transport { step, source })?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// Like [`Api::call`], refusing any status but `ok`.
    #[allow(clippy::too_many_arguments)]
    async fn expect(
        &self,
        step: &'static str,
        svc: Service,
        method: Method,
        path: &str,
        query: &[(String, String)],
        body: Option<&Value>,
        as_service: bool,
        ok: StatusCode,
    ) -> Result<Value> {
        let (status, v) = self
            .call(step, svc, method, path, query, body, as_service)
            .await?;
        if status != ok {
            return Err(WorkflowError::Http {
                step,
                status: status.as_u16(),
                body: v.to_string(),
            });
        }
        Ok(v)
    }
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_owned()
}

/// Boots `req.instance` with `req.device_profile` (steps 2–9 of the Nova workflow).
pub async fn boot(ep: &Endpoints, req: &BootRequest) -> Result<Booted> {
    let api = Api::new(ep);
    use Service::{Accelerator as A, Placement as P};
    if uuid::Uuid::try_parse(&req.instance).is_err() {
        return Err(WorkflowError::Invalid(format!(
            "instance {:?} is not a UUID",
            req.instance
        )));
    }

    // 2. The profile's groups become request groups.
    let q = vec![("name".to_owned(), req.device_profile.clone())];
    let v = api
        .expect(
            "device profile lookup",
            A,
            Method::GET,
            "/v2/device_profiles",
            &q,
            None,
            false,
            StatusCode::OK,
        )
        .await?;
    let profiles = v["device_profiles"].as_array().cloned().unwrap_or_default();
    let [profile] = profiles.as_slice() else {
        return Err(WorkflowError::Invalid(format!(
            "expected one device profile named {:?}, found {}",
            req.device_profile,
            profiles.len()
        )));
    };
    let groups = profile["groups"].as_array().cloned().unwrap_or_default();
    let query = candidate_query(req, &groups)?;

    // 3. Candidates, and the claim of the first.
    let v = api
        .expect(
            "allocation candidates",
            P,
            Method::GET,
            "/allocation_candidates",
            &query,
            None,
            false,
            StatusCode::OK,
        )
        .await?;
    let candidates = v["allocation_requests"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let wanted = wanted_functions(&groups);
    let best = weigh(&candidates, &v["provider_summaries"], &wanted);
    let Some(candidate) = candidates.get(best).cloned() else {
        return Err(WorkflowError::NoCandidate(req.device_profile.clone()));
    };
    let allocations = candidate["allocations"].clone();
    let claim = json!({
        "allocations": allocations,
        "consumer_generation": null,
        "project_id": req.project_id,
        "user_id": req.user_id,
        "consumer_type": "INSTANCE",
    });
    let path = format!("/allocations/{}", req.instance);
    api.expect(
        "allocation claim",
        P,
        Method::PUT,
        &path,
        &[],
        Some(&claim),
        false,
        StatusCode::NO_CONTENT,
    )
    .await?;

    match bind(&api, req, &candidate).await {
        Ok((host, arqs)) => Ok(Booted {
            instance: req.instance.clone(),
            host,
            allocations,
            arqs,
        }),
        Err(e) => {
            // As nova-conductor on a failed build: drop the ARQs, release the claim.
            let _ = undo(&api, &req.instance, None).await;
            Err(e)
        }
    }
}

/// The `GET /allocation_candidates` query for the flavor resources and profile groups.
fn candidate_query(req: &BootRequest, groups: &[Value]) -> Result<Vec<(String, String)>> {
    let mut q: Vec<(String, String)> = Vec::new();
    let list = |v: &[(String, u64)]| {
        v.iter()
            .map(|(rc, n)| format!("{rc}:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    if !req.resources.is_empty() {
        q.push(("resources".into(), list(&req.resources)));
    }
    for (n, g) in groups.iter().enumerate() {
        let obj = g.as_object().ok_or_else(|| {
            WorkflowError::Invalid(format!("device profile group {n} is not an object"))
        })?;
        let mut resources = Vec::new();
        let mut traits = Vec::new();
        for (k, v) in obj {
            let v = v
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string());
            if let Some(rc) = k.strip_prefix("resources:") {
                let amount = v.trim().parse().map_err(|_| {
                    WorkflowError::Invalid(format!("group {n}: {k} is not an amount: {v}"))
                })?;
                resources.push((rc.to_owned(), amount));
            } else if let Some(t) = k.strip_prefix("trait:") {
                match v.as_str() {
                    "required" => traits.push(t.to_owned()),
                    "forbidden" => traits.push(format!("!{t}")),
                    _ => {}
                }
            }
            // accel:* keys are Cyborg's, not Placement's (Nova ignores them too).
        }
        let suffix = group_suffix(n);
        q.push((format!("resources{suffix}"), list(&resources)));
        if !traits.is_empty() {
            q.push((format!("required{suffix}"), traits.join(",")));
        }
    }
    q.push(("group_policy".into(), req.group_policy.clone()));
    // The first candidate is taken, unless the weigher has something to choose among.
    let limit = if wanted_functions(groups).is_empty() {
        1
    } else {
        WEIGHED_CANDIDATES
    };
    q.push(("limit".into(), limit.to_string()));
    Ok(q)
}

/// How many candidates the weigher looks at.
const WEIGHED_CANDIDATES: usize = 100;

/// The function each profile group asks for (`accel:function_id`), by request group
/// suffix.
pub fn wanted_functions(groups: &[Value]) -> Vec<(String, String)> {
    groups
        .iter()
        .enumerate()
        .filter_map(|(n, g)| {
            let f = g.get("accel:function_id")?.as_str()?;
            Some((group_suffix(n), f.to_owned()))
        })
        .collect()
}

/// Seed 003's weigher: the index of the candidate whose request groups land on the
/// most providers that already carry the function their group asks for (their
/// `CUSTOM_FPGA_FUNCTION_*` trait in `summaries`, Placement's `provider_summaries`).
/// Otherwise equal candidates keep Placement's order: the earliest wins. This saves a
/// reprogramming (seconds of the bind, and the function other users of the region
/// rely on) whenever a programmed region is free.
pub fn weigh(candidates: &[Value], summaries: &Value, wanted: &[(String, String)]) -> usize {
    let carries = |rp: &str, function: &str| {
        summaries[rp]["traits"].as_array().is_some_and(|traits| {
            accel_core::accelerator::carries_function(
                traits.iter().filter_map(Value::as_str),
                function,
            )
        })
    };
    let score = |c: &Value| {
        wanted
            .iter()
            .filter(|(suffix, function)| {
                c["mappings"][suffix.as_str()]
                    .as_array()
                    .is_some_and(|rps| {
                        !rps.is_empty()
                            && rps
                                .iter()
                                .filter_map(Value::as_str)
                                .all(|rp| carries(rp, function))
                    })
            })
            .count()
    };
    let mut best = (0, 0);
    for (i, c) in candidates.iter().enumerate() {
        let s = score(c);
        if s > best.1 {
            best = (i, s);
        }
    }
    best.0
}

/// Steps 4–9: ARQs, matching, bind, wait. Returns the host and the bound ARQs.
async fn bind(
    api: &Api<'_>,
    req: &BootRequest,
    candidate: &Value,
) -> Result<(String, Vec<Attached>)> {
    use Service::{Accelerator as A, Placement as P};
    let body = json!({"device_profile_name": req.device_profile});
    let v = api
        .expect(
            "ARQ create",
            A,
            Method::POST,
            "/v2/accelerator_requests",
            &[],
            Some(&body),
            false,
            StatusCode::CREATED,
        )
        .await?;
    let arqs = v["arqs"].as_array().cloned().unwrap_or_default();

    // 5. Each ARQ to the provider its group was given.
    let mappings = &candidate["mappings"];
    let mut hosts: HashMap<String, String> = HashMap::new();
    let mut patch = Map::new();
    let mut host = String::new();
    for arq in &arqs {
        let group = arq["device_profile_group_id"].as_i64().unwrap_or(-1);
        let suffix = group_suffix(group.max(0) as usize);
        let rp = mappings[&suffix][0]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| {
                WorkflowError::Invalid(format!(
                    "the candidate maps no provider to request group {suffix}: {mappings}"
                ))
            })?;
        if !hosts.contains_key(&rp) {
            let p = api
                .expect(
                    "provider lookup",
                    P,
                    Method::GET,
                    &format!("/resource_providers/{rp}"),
                    &[],
                    None,
                    false,
                    StatusCode::OK,
                )
                .await?;
            let root = text(&p, "root_provider_uuid");
            let r = api
                .expect(
                    "root provider lookup",
                    P,
                    Method::GET,
                    &format!("/resource_providers/{root}"),
                    &[],
                    None,
                    false,
                    StatusCode::OK,
                )
                .await?;
            hosts.insert(rp.clone(), text(&r, "name"));
        }
        host = hosts[&rp].clone();
        patch.insert(
            text(arq, "uuid"),
            json!([
                {"op": "add", "path": "/hostname", "value": host},
                {"op": "add", "path": "/device_rp_uuid", "value": rp},
                {"op": "add", "path": "/instance_uuid", "value": req.instance},
            ]),
        );
    }
    if arqs.is_empty() {
        return Err(WorkflowError::Invalid(format!(
            "device profile {} produced no accelerator requests",
            req.device_profile
        )));
    }

    // 6. Bind (asynchronous: 202), then 8. wait for resolution.
    if let Err(e) = api
        .expect(
            "ARQ bind",
            A,
            Method::PATCH,
            "/v2/accelerator_requests",
            &[],
            Some(&Value::Object(patch)),
            true,
            StatusCode::ACCEPTED,
        )
        .await
    {
        // Not bound, so not reachable by instance: delete them by uuid.
        let uuids: Vec<String> = arqs.iter().map(|a| text(a, "uuid")).collect();
        let q = vec![("arqs".to_owned(), uuids.join(","))];
        let _ = api
            .call(
                "ARQ delete",
                A,
                Method::DELETE,
                "/v2/accelerator_requests",
                &q,
                None,
                true,
            )
            .await;
        return Err(e);
    }
    let resolved = wait_resolved(api, &req.instance, req.timeout).await?;
    let failed: Vec<String> = resolved
        .iter()
        .filter(|a| a["state"] != "Bound")
        .map(|a| text(a, "uuid"))
        .collect();
    if !failed.is_empty() {
        return Err(WorkflowError::BindFailed(failed.join(", ")));
    }
    let attached = resolved
        .iter()
        .map(|a| Attached {
            arq_uuid: text(a, "uuid"),
            device_profile_group_id: a["device_profile_group_id"].as_i64().unwrap_or_default(),
            state: text(a, "state"),
            hostname: text(a, "hostname"),
            device_rp_uuid: text(a, "device_rp_uuid"),
            attach_handle_type: text(a, "attach_handle_type"),
            attach_handle_uuid: a["attach_handle_uuid"].as_str().map(str::to_owned),
            attach_handle_info: a["attach_handle_info"].clone(),
        })
        .collect();
    Ok((host, attached))
}

/// Nova-compute's wait: `?instance=&bind_state=resolved` answers 423 until every ARQ
/// of the instance is resolved.
async fn wait_resolved(api: &Api<'_>, instance: &str, timeout: Duration) -> Result<Vec<Value>> {
    let q = vec![
        ("instance".to_owned(), instance.to_owned()),
        ("bind_state".to_owned(), "resolved".to_owned()),
    ];
    let deadline = tokio::time::Instant::now() + timeout;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let (status, v) = api
            .call(
                "ARQ wait",
                Service::Accelerator,
                Method::GET,
                "/v2/accelerator_requests",
                &q,
                None,
                false,
            )
            .await?;
        match status {
            StatusCode::OK => return Ok(v["arqs"].as_array().cloned().unwrap_or_default()),
            StatusCode::LOCKED if tokio::time::Instant::now() < deadline => continue,
            StatusCode::LOCKED => return Err(WorkflowError::Timeout(timeout)),
            s => {
                return Err(WorkflowError::Http {
                    step: "ARQ wait",
                    status: s.as_u16(),
                    body: v.to_string(),
                })
            }
        }
    }
}

/// Unbinds and deletes the instance's ARQs and releases its allocations.
pub async fn unboot(ep: &Endpoints, instance: &str) -> Result<Unbooted> {
    let api = Api::new(ep);
    let q = vec![("instance".to_owned(), instance.to_owned())];
    let v = api
        .expect(
            "ARQ list",
            Service::Accelerator,
            Method::GET,
            "/v2/accelerator_requests",
            &q,
            None,
            false,
            StatusCode::OK,
        )
        .await?;
    let arqs = v["arqs"].as_array().cloned().unwrap_or_default();
    undo(&api, instance, Some(&arqs)).await
}

/// Unbind (when the ARQs are known), delete, release; each step tolerates "nothing
/// there" so it can also clean up after a half-done boot.
async fn undo(api: &Api<'_>, instance: &str, arqs: Option<&[Value]>) -> Result<Unbooted> {
    use Service::{Accelerator as A, Placement as P};
    let mut out = Unbooted::default();
    if let Some(arqs) = arqs.filter(|a| !a.is_empty()) {
        let unbind: Map<String, Value> = arqs
            .iter()
            .filter(|a| a["state"] != "Unbound")
            .map(|a| {
                (
                    text(a, "uuid"),
                    json!([
                        {"op": "remove", "path": "/hostname"},
                        {"op": "remove", "path": "/device_rp_uuid"},
                        {"op": "remove", "path": "/instance_uuid"},
                    ]),
                )
            })
            .collect();
        out.arqs_unbound = unbind.len();
        if !unbind.is_empty() {
            api.expect(
                "ARQ unbind",
                A,
                Method::PATCH,
                "/v2/accelerator_requests",
                &[],
                Some(&Value::Object(unbind)),
                true,
                StatusCode::ACCEPTED,
            )
            .await?;
        }
        // Unbound ARQs no longer name the instance: delete them by uuid.
        let uuids: Vec<String> = arqs.iter().map(|a| text(a, "uuid")).collect();
        let q = vec![("arqs".to_owned(), uuids.join(","))];
        api.expect(
            "ARQ delete",
            A,
            Method::DELETE,
            "/v2/accelerator_requests",
            &q,
            None,
            true,
            StatusCode::NO_CONTENT,
        )
        .await?;
        out.arqs_deleted = uuids.len();
    }
    // Whatever still names the instance (idempotent upstream).
    let q = vec![("instance".to_owned(), instance.to_owned())];
    api.expect(
        "ARQ delete by instance",
        A,
        Method::DELETE,
        "/v2/accelerator_requests",
        &q,
        None,
        true,
        StatusCode::NO_CONTENT,
    )
    .await?;
    let (status, v) = api
        .call(
            "allocation release",
            P,
            Method::DELETE,
            &format!("/allocations/{instance}"),
            &[],
            None,
            false,
        )
        .await?;
    match status {
        StatusCode::NO_CONTENT => out.allocations_released = true,
        StatusCode::NOT_FOUND => {}
        s => {
            return Err(WorkflowError::Http {
                step: "allocation release",
                status: s.as_u16(),
                body: v.to_string(),
            })
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavor_resources_parse() {
        assert_eq!(
            parse_resources("VCPU:2, MEMORY_MB:512").unwrap(),
            [("VCPU".to_owned(), 2), ("MEMORY_MB".to_owned(), 512)]
        );
        assert!(parse_resources("").unwrap().is_empty());
        assert!(parse_resources("VCPU").is_err());
        assert!(parse_resources("VCPU:0").is_err());
    }

    #[test]
    fn the_weigher_prefers_regions_that_carry_the_function_and_keeps_order_otherwise() {
        let f = "9926ab6d-6c92-5a68-aabc-a7d84c545738";
        let t = "CUSTOM_FPGA_FUNCTION_INTEL_9926AB6D6C925A68AABCA7D84C545738";
        let cand = |rp: &str| json!({"mappings": {"_device_profile_0": [rp]}});
        let candidates = [cand("a"), cand("b"), cand("c")];
        let summaries = json!({
            "a": {"traits": ["CUSTOM_PROGRAMMABLE"]},
            "b": {"traits": ["CUSTOM_PROGRAMMABLE", t]},
            "c": {"traits": [t]},
        });
        let wanted = wanted_functions(&[json!({"accel:function_id": f})]);
        assert_eq!(wanted, [("_device_profile_0".to_owned(), f.to_owned())]);
        assert_eq!(weigh(&candidates, &summaries, &wanted), 1);
        assert_eq!(weigh(&candidates, &summaries, &[]), 0, "no wish: first");
        let none = json!({"a": {"traits": []}, "b": {"traits": []}, "c": {"traits": []}});
        assert_eq!(weigh(&candidates, &none, &wanted), 0, "no match: first");
        assert_eq!(weigh(&[], &summaries, &wanted), 0);
    }

    #[test]
    fn profile_groups_become_suffixed_request_groups() {
        let req = BootRequest {
            device_profile: "dp".into(),
            resources: vec![("VCPU".into(), 1)],
            instance: "i".into(),
            project_id: "p".into(),
            user_id: "u".into(),
            group_policy: "none".into(),
            timeout: Duration::from_secs(1),
        };
        let groups = vec![
            json!({"resources:FPGA": "2", "trait:CUSTOM_A": "required", "trait:CUSTOM_B": "forbidden",
                   "accel:bitstream_id": "x"}),
            json!({"resources:PGPU": "1"}),
        ];
        let q = candidate_query(&req, &groups).unwrap();
        let q: Vec<(&str, &str)> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            q,
            [
                ("resources", "VCPU:1"),
                ("resources_device_profile_0", "FPGA:2"),
                ("required_device_profile_0", "CUSTOM_A,!CUSTOM_B"),
                ("resources_device_profile_1", "PGPU:1"),
                ("group_policy", "none"),
                ("limit", "1"),
            ]
        );
    }
}
