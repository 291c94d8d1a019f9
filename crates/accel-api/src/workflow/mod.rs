//! The Nova workflow without Nova: what nova-api, the scheduler, nova-conductor and
//! nova-compute do with Placement and the accelerator API to boot an instance with a
//! device profile (seed 000, steps 1–10), over HTTP only, as a library
//! (`accel boot` / `accel unboot` print its results). It links no server: a compute
//! node's `accel` runs it.
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

mod plan;

pub use plan::{group_suffix, nova_query, parse_resources, wanted_functions, weigh};

use crate::accelerator::{
    self, bind_ops, patch_entry, state, unbind_ops, Arq, ArqFilter, ArqPatch, ArqSelector, NewArqs,
};
use crate::http::{self, Http};
use crate::placement::{self, mv, AllocationRequest, ConsumerAllocations, Provider};
use serde_json::Value;
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
    /// The API answered with an error; `body` is its explanation.
    #[error("{step}: HTTP {status}: {body}")]
    Http {
        step: &'static str,
        status: u16,
        body: String,
    },
    /// The API could not be reached or answered something unreadable; the cause is
    /// the error's source.
    #[error("{step}")]
    Transport {
        step: &'static str,
        source: http::Error,
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

/// Names the step of an [`http::Error`].
trait Step<T> {
    fn step(self, step: &'static str) -> Result<T>;
}

impl<T> Step<T> for std::result::Result<T, http::Error> {
    fn step(self, step: &'static str) -> Result<T> {
        self.map_err(|e| match e {
            http::Error::Status {
                status, message, ..
            } => WorkflowError::Http {
                step,
                status,
                body: message,
            },
            source => WorkflowError::Transport { step, source },
        })
    }
}

/// A fresh instance uuid, for a boot that names none.
pub fn new_instance_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The Placement microversion of every call: 1.39 has `mappings` (1.34), traits in
/// `provider_summaries` (1.17) and `consumer_type` (1.38).
const PLACEMENT: placement::Version = mv::ANY_TRAITS;

struct Api {
    placement: placement::Client,
    accel: accelerator::Client,
    /// What goes as `X-Service-Token` on Nova's calls.
    service_token: String,
}

impl Api {
    fn new(ep: &Endpoints) -> Result<Api> {
        let invalid = |e: http::Error| WorkflowError::Invalid(e.to_string());
        let placement = placement::Client::new(
            Http::with_token(&ep.placement_url, &ep.token).map_err(invalid)?,
        );
        // Nova sends no microversion header: the server's 2.0.
        let accel = accelerator::Client::new(
            Http::with_token(&ep.accelerator_url, &ep.token).map_err(invalid)?,
        )
        .with_microversion(None);
        Ok(Api {
            placement,
            accel,
            service_token: ep.service_token.clone().unwrap_or_else(|| ep.token.clone()),
        })
    }

    fn service(&self) -> Option<&str> {
        Some(&self.service_token)
    }

    /// A provider that must exist: a 404 is the step's failure, as any other error.
    async fn provider(&self, step: &'static str, uuid: &str) -> Result<Provider> {
        self.placement
            .provider(PLACEMENT, uuid)
            .await
            .step(step)?
            .ok_or_else(|| WorkflowError::Http {
                step,
                status: 404,
                body: format!("No resource provider with uuid {uuid} found"),
            })
    }
}

/// Boots `req.instance` with `req.device_profile` (steps 2–9 of the Nova workflow).
pub async fn boot(ep: &Endpoints, req: &BootRequest) -> Result<Booted> {
    let api = Api::new(ep)?;
    if uuid::Uuid::try_parse(&req.instance).is_err() {
        return Err(WorkflowError::Invalid(format!(
            "instance {:?} is not a UUID",
            req.instance
        )));
    }

    // 2. The profile's groups become request groups.
    let profiles = api
        .accel
        .profiles(Some(&req.device_profile))
        .await
        .step("device profile lookup")?;
    let [profile] = profiles.as_slice() else {
        return Err(WorkflowError::Invalid(format!(
            "expected one device profile named {:?}, found {}",
            req.device_profile,
            profiles.len()
        )));
    };
    let query = plan::candidate_query(&req.resources, &req.group_policy, &profile.groups)?;

    // 3. Candidates, and the claim of the first.
    let query: Vec<(&str, &str)> = query
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let found = api
        .placement
        .allocation_candidates(PLACEMENT, &query)
        .await
        .step("allocation candidates")?;
    let wanted = wanted_functions(&profile.groups);
    let best = weigh(
        &found.allocation_requests,
        &found.provider_summaries,
        &wanted,
    );
    let Some(candidate) = found.allocation_requests.get(best) else {
        return Err(WorkflowError::NoCandidate(req.device_profile.clone()));
    };
    // A new consumer (generation `null`), claimed with the candidate's allocations.
    let claim = ConsumerAllocations {
        allocations: candidate.allocations.clone(),
        project_id: Some(req.project_id.clone()),
        user_id: Some(req.user_id.clone()),
        consumer_generation: Some(None),
        mappings: None,
        consumer_type: Some("INSTANCE".to_owned()),
    };
    api.placement
        .put_allocations(PLACEMENT, &req.instance, &claim)
        .await
        .step("allocation claim")?;

    match bind(&api, req, candidate).await {
        Ok((host, arqs)) => Ok(Booted {
            instance: req.instance.clone(),
            host,
            allocations: serde_json::to_value(&candidate.allocations).unwrap_or_default(),
            arqs,
        }),
        Err(e) => {
            // As nova-conductor on a failed build: drop the ARQs, release the claim.
            let _ = undo(&api, &req.instance, None).await;
            Err(e)
        }
    }
}

/// Steps 4–9: ARQs, matching, bind, wait. Returns the host and the bound ARQs.
async fn bind(
    api: &Api,
    req: &BootRequest,
    candidate: &AllocationRequest,
) -> Result<(String, Vec<Attached>)> {
    let arqs = api
        .accel
        .create_arqs(&NewArqs {
            device_profile_name: req.device_profile.clone(),
            device_profile_group_id: None,
        })
        .await
        .step("ARQ create")?;

    // 5. Each ARQ to the provider its group was given.
    let mut hosts: HashMap<String, String> = HashMap::new();
    let mut patch = ArqPatch::new();
    let mut host = String::new();
    for arq in &arqs {
        let suffix = group_suffix(arq.device_profile_group_id.max(0) as usize);
        let rp = candidate.mapped(&suffix).first().cloned().ok_or_else(|| {
            WorkflowError::Invalid(format!(
                "the candidate maps no provider to request group {suffix}: {:?}",
                candidate.mappings
            ))
        })?;
        if !hosts.contains_key(&rp) {
            let p = api.provider("provider lookup", &rp).await?;
            // 1.14+ always names the root.
            let root_uuid = p.root_provider_uuid.ok_or_else(|| {
                WorkflowError::Invalid(format!("provider {rp} names no root provider"))
            })?;
            let root = api.provider("root provider lookup", &root_uuid).await?;
            hosts.insert(rp.clone(), root.name);
        }
        host = hosts[&rp].clone();
        patch_entry(&mut patch, &arq.uuid, bind_ops(&host, &rp, &req.instance));
    }
    if arqs.is_empty() {
        return Err(WorkflowError::Invalid(format!(
            "device profile {} produced no accelerator requests",
            req.device_profile
        )));
    }

    // 6. Bind (asynchronous: 202), then 8. wait for resolution.
    if let Err(e) = api
        .accel
        .patch_arqs(&patch, api.service())
        .await
        .step("ARQ bind")
    {
        // Not bound, so not reachable by instance: delete them by uuid.
        let uuids = arqs.iter().map(|a| a.uuid.clone()).collect();
        let _ = api
            .accel
            .delete_arqs(&ArqSelector::Uuids(uuids), api.service())
            .await;
        return Err(e);
    }
    let resolved = wait_resolved(api, &req.instance, req.timeout).await?;
    let failed: Vec<String> = resolved
        .iter()
        .filter(|a| a.state != state::BOUND)
        .map(|a| a.uuid.clone())
        .collect();
    if !failed.is_empty() {
        return Err(WorkflowError::BindFailed(failed.join(", ")));
    }
    let attached = resolved
        .into_iter()
        .map(|a| Attached {
            arq_uuid: a.uuid,
            device_profile_group_id: a.device_profile_group_id,
            state: a.state,
            hostname: a.hostname.unwrap_or_default(),
            device_rp_uuid: a.device_rp_uuid.unwrap_or_default(),
            attach_handle_type: a.attach_handle_type,
            attach_handle_uuid: a.attach_handle_uuid,
            attach_handle_info: a.attach_handle_info,
        })
        .collect();
    Ok((host, attached))
}

/// Nova-compute's wait: `?instance=&bind_state=resolved` answers 423 until every ARQ
/// of the instance is resolved.
async fn wait_resolved(api: &Api, instance: &str, timeout: Duration) -> Result<Vec<Arq>> {
    let filter = ArqFilter {
        instance: Some(instance.to_owned()),
        bind_state: Some("resolved".to_owned()),
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        match api.accel.arqs(&filter).await {
            Ok(arqs) => return Ok(arqs),
            Err(e) if e.status() == Some(423) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(WorkflowError::Timeout(timeout));
                }
            }
            Err(e) => return Err(e).step("ARQ wait"),
        }
    }
}

/// Unbinds and deletes the instance's ARQs and releases its allocations.
pub async fn unboot(ep: &Endpoints, instance: &str) -> Result<Unbooted> {
    let api = Api::new(ep)?;
    let arqs = api
        .accel
        .arqs(&ArqFilter {
            instance: Some(instance.to_owned()),
            bind_state: None,
        })
        .await
        .step("ARQ list")?;
    undo(&api, instance, Some(&arqs)).await
}

/// Unbind (when the ARQs are known), delete, release; each step tolerates "nothing
/// there" so it can also clean up after a half-done boot.
async fn undo(api: &Api, instance: &str, arqs: Option<&[Arq]>) -> Result<Unbooted> {
    let mut out = Unbooted::default();
    if let Some(arqs) = arqs.filter(|a| !a.is_empty()) {
        let mut unbind = ArqPatch::new();
        for a in arqs.iter().filter(|a| a.state != state::UNBOUND) {
            patch_entry(&mut unbind, &a.uuid, unbind_ops());
        }
        out.arqs_unbound = unbind.len();
        if !unbind.is_empty() {
            api.accel
                .patch_arqs(&unbind, api.service())
                .await
                .step("ARQ unbind")?;
        }
        // Unbound ARQs no longer name the instance: delete them by uuid.
        let uuids: Vec<String> = arqs.iter().map(|a| a.uuid.clone()).collect();
        out.arqs_deleted = uuids.len();
        api.accel
            .delete_arqs(&ArqSelector::Uuids(uuids), api.service())
            .await
            .step("ARQ delete")?;
    }
    // Whatever still names the instance (idempotent upstream).
    api.accel
        .delete_arqs(&ArqSelector::Instance(instance.to_owned()), api.service())
        .await
        .step("ARQ delete by instance")?;
    // A 404 is nothing left to release (a half-done boot that never claimed).
    match api.placement.delete_allocations(PLACEMENT, instance).await {
        Ok(()) => out.allocations_released = true,
        Err(e) if e.status() == Some(404) => {}
        Err(e) => return Err(e).step("allocation release"),
    }
    Ok(out)
}
