//! The accelerator API's error body: Cyborg's `ParsableErrorMiddleware` envelope around
//! WSME's fault, i.e. JSON text inside a JSON string:
//!
//! ```json
//! {"error_message": "{\"faultcode\": \"Client\", \"faultstring\": \"...\", \"debuginfo\": null}"}
//! ```
//!
//! `faultcode` is `Client` for 4xx and `Server` otherwise. Both layers are rendered as
//! Python's `json.dumps` writes them (`", "` and `": "` separators, non-ASCII escaped),
//! since that is the byte stream clients have always seen.

pub use super::pyjson::{py_dumps, py_string};
use super::webob::{Page, Refusal};
use crate::auth::Rejection;
use crate::reply;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode};

/// An error a handler returns.
#[derive(Debug)]
pub struct AccelError {
    pub status: StatusCode,
    pub message: String,
    /// Render the body as given instead of as a fault (upstream's 423 is `null`).
    pub raw_body: Option<String>,
    /// The `Allow` header of a 405: the methods the path is served with.
    pub allow: Option<String>,
    /// A code beside the envelope's message (`{"error_message": ..., "code": ...}`)
    /// on accel's own agent endpoints, so the agent tells refusals apart without
    /// reading words ([`accel_api::agent::NO_COMPUTE_NODE`]).
    pub code: Option<&'static str>,
    /// Rendered as webob's page instead of a WSME fault, without version headers.
    pub page: Option<Box<Page>>,
}

/// Marks an answer that carries none of the version headers (a webob page).
#[derive(Clone, Copy)]
pub struct Bare;

pub type AccelResult<T> = Result<T, AccelError>;

impl From<Refusal> for AccelError {
    fn from(r: Refusal) -> AccelError {
        match r {
            Refusal::Page(page) => AccelError::page(page),
            Refusal::UnknownArgument(name) => {
                AccelError::bad_request(format!("Unknown argument: \"{name}\""))
            }
            Refusal::UnknownMimetype(mime) => AccelError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Unknown mimetype: {mime}"),
            ),
        }
    }
}

impl AccelError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        AccelError {
            status,
            message: message.into(),
            raw_body: None,
            allow: None,
            code: None,
            page: None,
        }
    }

    /// The same error with an agent protocol code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
    /// A webob page ([`super::webob`]): routing errors, the `Accept` and version checks.
    pub fn page(page: Page) -> Self {
        let mut e = Self::new(page.status(), "");
        e.page = Some(Box::new(page));
        e
    }
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, m)
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, m)
    }
    pub fn forbidden(m: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, m)
    }
    pub fn not_acceptable(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_ACCEPTABLE, m)
    }
    pub fn conflict(m: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, m)
    }
    /// A failure that is not the caller's (upstream's 500s such as `FPGAProgramError`).
    pub fn internal(m: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, m)
    }
    /// The policy refusal upstream's `HTTPForbidden` gives.
    pub fn denied(rule: &str) -> Self {
        Self::forbidden(format!(
            "Access was denied to the following resource: {rule}"
        ))
    }
    /// `PatchError`.
    pub fn patch(reason: impl std::fmt::Display) -> Self {
        Self::bad_request(format!("Couldn't apply patch. Reason: {reason}"))
    }
    pub fn invalid_uuid(value: &str) -> Self {
        Self::bad_request(format!("Expected a uuid but received {value}."))
    }
    /// WSME's refusal of argument `name` typed `uuid`.
    pub fn invalid_uuid_arg(name: &str, value: &str) -> Self {
        Self::bad_request(format!(
            "Invalid input for field/attribute {name}. Value: '{value}'. unable to convert to uuid. Error: Expected a uuid but received {value}."
        ))
    }
    /// `423 Locked` with WSME's `null` body (ARQs of the instance not resolved yet).
    pub fn locked() -> Self {
        AccelError {
            status: StatusCode::LOCKED,
            message: String::new(),
            raw_body: Some("null".into()),
            allow: None,
            code: None,
            page: None,
        }
    }

    /// A 405 naming the methods `allow` the path is served with.
    pub fn with_allow(mut self, allow: String) -> Self {
        self.allow = Some(allow);
        self
    }

    /// The answer; a page is rendered for a client without an `Accept` header.
    pub fn into_response(self) -> Response<Body> {
        self.into_response_for(&HeaderMap::new())
    }

    /// The answer to a request with `headers` (a page's format follows its `Accept`).
    pub fn into_response_for(self, headers: &HeaderMap) -> Response<Body> {
        if let Some(page) = &self.page {
            let mut resp = envelope(self.status, &page.render(headers));
            resp.extensions_mut().insert(Bare);
            if let Some(v) = self.allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
                resp.headers_mut().insert("allow", v);
            }
            return resp;
        }
        let inner = match self.raw_body {
            Some(raw) => raw,
            None => {
                let code = if self.status.is_client_error() {
                    "Client"
                } else {
                    "Server"
                };
                format!(
                    "{{\"faultcode\": {}, \"faultstring\": {}, \"debuginfo\": null}}",
                    py_string(code),
                    py_string(&self.message)
                )
            }
        };
        let mut resp = match self.code {
            Some(code) => coded_envelope(self.status, &inner, code),
            None => envelope(self.status, &inner),
        };
        if let Some(v) = self.allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
            resp.headers_mut().insert("allow", v);
        }
        resp
    }
}

/// `{"error_message": <text>}` with the given status.
pub fn envelope(status: StatusCode, text: &str) -> Response<Body> {
    let body = format!("{{\"error_message\": {}}}", py_string(text));
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// `{"error_message": <text>, "code": <code>}`: the envelope of accel's own agent
/// endpoints, whose clients are accel's agents.
fn coded_envelope(status: StatusCode, text: &str, code: &str) -> Response<Body> {
    let body = format!(
        "{{\"error_message\": {}, \"code\": {}}}",
        py_string(text),
        py_string(code)
    );
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

impl From<accel_store::StoreError> for AccelError {
    fn from(e: accel_store::StoreError) -> Self {
        use accel_store::StoreError;
        match e {
            StoreError::NotFound(m) => AccelError::not_found(m),
            StoreError::Invalid(m) => AccelError::bad_request(m),
            StoreError::Conflict(_, m) => AccelError::conflict(m),
            StoreError::Refused(accel_store::Refused::Accelerator(r)) => refused(r),
            // A Placement write under an accelerator request (an agent's report, a
            // claim): Placement's words and status, in Cyborg's envelope.
            StoreError::Refused(accel_store::Refused::Placement(r)) => {
                let e = crate::placement::error::refused(r);
                AccelError::new(e.status, e.message)
            }
            // As Placement's: the driver's words go to the log, not to the client.
            e if e.is_unavailable() => {
                tracing::warn!(error = %e, "database unavailable; answering 503");
                AccelError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    crate::listen::DB_UNAVAILABLE,
                )
            }
            e @ (StoreError::Config(_) | StoreError::Db(_)) => {
                // The cause goes to the log, never to the client (issue 17).
                tracing::error!(error = %e, "store error");
                AccelError::internal(crate::listen::INTERNAL)
            }
        }
    }
}

/// The words of each refusal of the accelerator operations (upstream Cyborg's sentences)
/// and its status.
fn refused(r: accel_store::accelerator::Refused) -> AccelError {
    use accel_store::accelerator::refused::{Key, Kind};
    use accel_store::accelerator::Refused as R;
    match r {
        R::NotFound(kind, key) => {
            let kind = match kind {
                Kind::Arq => "ExtArq",
                Kind::DeviceProfile => "Device Profile",
                Kind::Device => "Device",
                Kind::Deployable => "Deployable",
                Kind::Attribute => "Attribute",
            };
            let key = match key {
                Key::Uuid(u) => format!("uuid={u}"),
                Key::Name(n) => format!("name={n}"),
                Key::Id(i) => format!("id={i}"),
                Key::ProviderUuid(u) => format!("resource provider uuid={u}"),
            };
            AccelError::not_found(format!("{kind} not found with {key}"))
        }
        R::ArqBadState {
            uuid,
            state,
            expected,
        } => {
            let expected: Vec<String> = expected.iter().map(|s| format!("'{s}'")).collect();
            AccelError::bad_request(format!(
                "Bad state: {state} for ARQ: {uuid}. Expected state(s): [{}]",
                expected.join(", ")
            ))
        }
        R::ArqBound { uuid, instance } => AccelError::forbidden(format!(
            "ARQ {uuid} is bound to instance {instance}. Use the Compute API to manage instance accelerators."
        )),
        R::InstanceHasArqs { instance } => AccelError::patch(format!(
            "Instance {instance} already has accelerator requests. Cannot bind additional ARQs."
        )),
        R::NoSuchGroup { profile, group } => {
            AccelError::bad_request(format!("Device profile {profile} has no group {group}."))
        }
        R::ProfileNameTaken { name } => {
            AccelError::conflict(format!("A device_profile with name {name} already exists."))
        }
        R::ProfileUuidTaken { uuid } => {
            AccelError::conflict(format!("DeviceProfile with uuid {uuid} already exists."))
        }
        R::ProfileInUse { name, arqs } => AccelError::conflict(format!(
            "Device profile {name} is in use by {arqs} accelerator request(s)."
        )),
        R::NoPendingProgram { host, id } => AccelError::not_found(format!(
            "Host {host} has no pending programming request {id}"
        )),
        R::NoRunningCleaning {
            host,
            rp_uuid,
            attempt,
        } => AccelError::not_found(format!(
            "Host {host} has no running cleaning {rp_uuid} (attempt {attempt})"
        )),
        R::NoDeviceProvider { uuid, or_device } => AccelError::not_found(if or_device {
            format!("No device or device provider with uuid {uuid}")
        } else {
            format!("No device provider with uuid {uuid}")
        }),
        R::ProviderInUse { rp_uuid } => AccelError::conflict(format!(
            "Device provider {rp_uuid} is in use; it is cleaned when released"
        )),
        R::ReleasingInUse { rp_uuid } => AccelError::conflict(format!(
            "Device provider {rp_uuid} is in use; it is not withheld, and is cleaned when released"
        )),
        R::NoCleaningRule { rp_uuid } => AccelError::conflict(format!(
            "Device provider {rp_uuid} has no cleaning rule: no [[cleaning]] rule of its agent \
             matches it, so nothing would clean it"
        )),
        R::DeployableTwice { name } => {
            AccelError::bad_request(format!("deployable {name} is reported twice"))
        }
        R::BadParent { deployable, parent } => AccelError::bad_request(format!(
            "deployable {deployable}: parent {parent} is not a top-level deployable of the same device"
        )),
        R::ControlPathTwice { cpid_info } => {
            AccelError::bad_request(format!("control path {cpid_info} is reported twice"))
        }
        R::UnknownTrait { name, deployable } => AccelError::bad_request(format!(
            "Unknown standard trait {name} on deployable {deployable}"
        )),
        R::ParentCycle => {
            AccelError::bad_request("deployables of this host form a parent cycle")
        }
        R::BadInventory {
            deployable,
            key,
            value,
        } => AccelError::bad_request(format!(
            "deployable {deployable}: attribute {key} must be a positive integer, not {value:?}"
        )),
        R::NoComputeNode { host, own_possible } => AccelError::bad_request(if own_possible {
            format!("No compute node resource provider named {host}; the agent's host name must be Nova's hypervisor host name, or, on a node without Nova, the agent's node_provider must be \"own\".")
        } else {
            format!("No compute node resource provider named {host}; the agent's host name must be Nova's hypervisor host name.")
        })
        .with_code(accel_api::agent::NO_COMPUTE_NODE),
        R::NodeNotOwned {
            name,
            uuid,
            owner_trait,
        } => AccelError::conflict(format!(
            "A resource provider named {name} exists ({uuid}) and accel does not own it (no {owner_trait}): it is Nova's compute node or was made by hand. Set node_provider = \"nova\" in the agent's configuration to report under it, or delete it first"
        )),
        R::HandleHeld { uuid } => AccelError::conflict(format!(
            "Attach handle {uuid} is held by an accelerator request."
        )),
        R::DeployableHeld { name } => {
            AccelError::conflict(format!("Deployable {name} is held by accelerator requests."))
        }
        R::SlotClaimedTwice => AccelError::bad_request("a slot is claimed twice"),
        R::FreeSlotClaimed { slot } => AccelError::bad_request(format!(
            "claim of slot {slot} which the usage shows free"
        )),
        R::PodsRefused { host, placement } => AccelError::conflict(format!(
            "Placement refused the pods' allocations on host {host} ({placement}); a virtual \
             machine may have taken the device since the last save. Retry: the next \
             save reports it as held."
        )),
        R::NotAClaim { uid, consumer_type } => AccelError::bad_request(format!(
            "consumer {uid} is not a Kubernetes claim (its type is {})",
            consumer_type.as_deref().unwrap_or("unknown")
        )),
    }
}

/// The sentence of a claim the store refused to prepare (409 `Claim <uid>: ...`).
pub fn claim_refusal(r: &accel_store::accelerator::claims::ClaimRefusal) -> String {
    use accel_store::accelerator::claims::ClaimRefusal as C;
    match r {
        C::UnknownDevice(d) => format!("device {d} is not a device of this node"),
        C::HeldByVm(d) => format!("device {d} is held by a virtual machine"),
        C::HeldByPod(d) => format!("device {d} is held by another pod"),
        C::Unavailable(d) => {
            format!("device {d} is unavailable (unhealthy, gone, or in maintenance)")
        }
        C::Refused(r) => format!(
            "a device was taken by another consumer (a virtual machine or a pod) meanwhile; Placement refused the claim: {}",
            crate::placement::allocations::refusal_words(r)
        ),
        C::NotPartitioned { device, profile_id } => format!(
            "device {device} has no MIG profile {profile_id} (it is not reported partitioned, or its GPU lacks the profile)"
        ),
        C::NoPlacement {
            device,
            profile,
            start,
        } => format!("MIG {profile} cannot start at memory slice {start} of device {device}"),
        C::PartitionHeld {
            device,
            profile,
            start,
            by_vm,
            why,
        } => format!(
            "MIG {profile} at memory slice {start} of device {device} is held by {} ({why})",
            if *by_vm {
                "a virtual machine"
            } else {
                "another pod"
            }
        ),
    }
}

/// The sentence of a bind the `PATCH` refused
/// ([`accel_store::accelerator::refusals`]): the API's error, the log's, and the one its
/// failed bind job and the device's history keep.
pub fn bind_refusal(r: &accel_store::accelerator::refusals::Refused) -> String {
    use accel_store::accelerator::refusals::Refusal;
    let (arq, rp, host) = (&r.arq_uuid, &r.device_rp_uuid, &r.hostname);
    match &r.refusal {
        Refusal::OtherHost { device_host } => format!(
            "Cannot bind ARQ {arq}: device resource provider {rp} is a device of host {device_host}, not of {host}"
        ),
        Refusal::Unhealthy { health } => format!(
            "Cannot bind ARQ {arq}: the device of resource provider {rp} on {host} is {health} (as its agent reports)"
        ),
        Refusal::NoFreeHandle {
            deployable_id,
            handles,
            free,
            promised,
        } => format!(
            "AttachHandle not found Matching deployable_id {deployable_id}: cannot bind ARQ {arq}: no free attach handle on device resource provider {rp} ({handles} handle(s), {free} free, {promised} promised to binds in progress)"
        ),
    }
}

/// A request `auth` turned away, as keystonemiddleware answers in front of Cyborg (its
/// body sits outside Cyborg's envelope): `{"error": {"code": 401, "title":
/// "Unauthorized", "message": ...}}`, and webob's JSON body for its 503.
pub fn rejection(r: &Rejection) -> Response<Body> {
    match r {
        Rejection::Unauthorized { www_authenticate } => {
            let resp = reply::json(
                StatusCode::UNAUTHORIZED,
                &serde_json::json!({"error": {"code": 401, "title": "Unauthorized",
                    "message": "The request you have made requires authentication."}}),
            );
            match www_authenticate {
                Some(uri) => reply::with_www_authenticate(resp, uri),
                None => resp,
            }
        }
        Rejection::Unavailable => reply::json(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({
                "message": "The server is currently unavailable. Please try again at a later time.<br /><br />\nThe Keystone service is temporarily unavailable.\n\n",
                "code": "503 Service Unavailable",
                "title": "Service Unavailable",
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_json() {
        assert_eq!(py_string("a\"é"), "\"a\\\"\\u00e9\"");
        let v = serde_json::json!([{"traits1": "CUSTOM_FAKE_DEVICE"}, {"rc": "FPGA"}]);
        assert_eq!(
            py_dumps(&v),
            "[{\"traits1\": \"CUSTOM_FAKE_DEVICE\"}, {\"rc\": \"FPGA\"}]"
        );
    }
}
