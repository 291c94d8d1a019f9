//! The agent protocol: accel's own endpoints between the node agent and the server
//! (upstream's agents speak RPC to the conductor instead). Both sides use these types:
//! the agent serialises them, the server deserialises them after its checks.
//!
//! ```text
//! GET /v2/agent/hosts/{host}                   ─▶ HostInfo (404: no compute node)
//! PUT /v2/agent/hosts/{host}                   {"node_provider": "own"} ─▶ HostInfo
//! PUT /v2/agent/hosts/{host}/devices[?force]   DeviceReport ─▶ ReportAnswer
//! GET /v2/agent/hosts/{host}/programs          ─▶ Programs
//! PUT /v2/agent/hosts/{host}/programs/{id}     ProgramAnswer ─▶ ProgramRequest
//! GET /v2/agent/hosts/{host}/kubernetes        ─▶ KubernetesShown
//! PUT /v2/agent/hosts/{host}/kubernetes        KubernetesUsage ─▶ KubernetesSaved
//!                                              (KubernetesUsageParts with MIG devices)
//! GET /v2/agent/hosts/{host}/cleanings?agent=ID ─▶ Cleanings (taken by agent process ID)
//! PUT /v2/agent/hosts/{host}/cleanings/{rp}     CleaningAnswer ─▶ DeviceCleaning
//! PUT /v2/agent/hosts/{host}/kubernetes/claims/{uid}  ClaimDevices ─▶ ClaimPrepared
//! GET /v2/agent/hosts/{host}/partitions               ─▶ HeldPartitions
//! DELETE /v2/agent/hosts/{host}/kubernetes/claims/{uid}              ─▶ 204
//! ```
//!
//! The report is the host's full device list in upstream's `DriverDevice` shape, plus
//! accel's optional `health` per device and `parent` per deployable (an FPGA region
//! under its card). Field order is the order the agent has always sent (the server
//! keeps a digest of the body bytes to skip an unchanged report).

use crate::http::{Error, Http, Method, Request};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `code` of a refusal because no compute node provider has the host's name
/// (`GET /v2/agent/hosts/{host}`'s 404, a report's 400): the agent then creates its
/// own node provider (`node_provider = "own"`) or says what to fix. Agent endpoints'
/// errors carry it beside Cyborg's envelope: `{"error_message": ..., "code": ...}`.
pub const NO_COMPUTE_NODE: &str = "accel.agent.no_compute_node";

/// `PUT /v2/agent/hosts/{host}/devices`'s body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub devices: Vec<Device>,
}

/// One device of a report (upstream's `DriverDevice`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// `GPU`, `FPGA`, `AICHIP`, ...
    #[serde(rename = "type")]
    pub device_type: String,
    pub vendor: String,
    pub model: String,
    #[serde(default)]
    pub std_board_info: Option<String>,
    #[serde(default)]
    pub vendor_board_info: Option<String>,
    /// accel's: `ok` (the default) or `unhealthy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// accel's: why the device is unhealthy, for people (the console shows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_reason: Option<String>,
    pub controlpath_id: ControlPathId,
    #[serde(default)]
    pub deployables: Vec<Deployable>,
    /// accel's: how a GPU can be partitioned (MIG profiles, vGPU types); absent for a
    /// device handed out whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<crate::partitions::GpuPartitions>,
}

/// How the driver reaches the device (`PCI` and its address as JSON text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlPathId {
    pub cpid_type: String,
    pub cpid_info: String,
}

/// One deployable of a device: a whole device, or an FPGA region under its card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployable {
    pub name: String,
    /// accel's: the name of the deployable this one is part of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    pub num_accelerators: i64,
    #[serde(default)]
    pub driver_name: Option<String>,
    #[serde(default)]
    pub attributes: Vec<KeyValue>,
    #[serde(default)]
    pub attach_handles: Vec<AttachHandle>,
}

/// A deployable's attribute (`rc`, `trait<N>`, `inventory:<RC>`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
}

/// What an instance attaches (`PCI`, `MDEV`, `TEST_PCI`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachHandle {
    pub attach_type: String,
    pub attach_info: String,
    /// Anything but `true` reads as `false`, as the server always has.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub in_use: bool,
}

fn lenient_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(serde_json::Value::deserialize(d)?
        .as_bool()
        .unwrap_or(false))
}

/// What a report did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportAnswer {
    pub hostname: String,
    pub unchanged: bool,
    #[serde(default)]
    pub devices_added: i64,
    #[serde(default)]
    pub devices_removed: i64,
    #[serde(default)]
    pub devices_kept: i64,
    #[serde(default)]
    pub devices_vanished: i64,
}

/// `GET /v2/agent/hosts/{host}`: the compute node provider the agent reports under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub compute_node_uuid: String,
    pub devices: i64,
}

/// A programming request for the host's agent (a bind's, or
/// `PATCH /v2/deployables/{uuid}/program`'s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgramRequest {
    pub id: i64,
    #[serde(default)]
    pub arq_uuid: Option<String>,
    pub deployable_uuid: String,
    pub deployable_name: String,
    #[serde(default)]
    pub bitstream_id: Option<String>,
    #[serde(default)]
    pub function_id: Option<String>,
    pub state: String,
    #[serde(default)]
    pub error: Option<String>,
}

/// `{"programs": [...]}`, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Programs {
    pub programs: Vec<ProgramRequest>,
}

/// The agent's answer to a programming request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum ProgramAnswer {
    Done,
    Failed { error: String },
}

impl From<&Result<(), String>> for ProgramAnswer {
    fn from(r: &Result<(), String>) -> ProgramAnswer {
        match r {
            Ok(()) => ProgramAnswer::Done,
            Err(e) => ProgramAnswer::Failed { error: e.clone() },
        }
    }
}

/// A device provider the host's agent must clean (its last consumer let go).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleaningRequest {
    pub rp_uuid: String,
    /// The deployable's (and provider's) name.
    pub name: String,
    /// The device's PCI address.
    pub address: String,
    pub device_uuid: String,
    /// Quoted back in the answer.
    pub attempt: i64,
}

/// `{"cleanings": [...]}`, oldest first: every cleaning the asking agent process holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleanings {
    pub cleanings: Vec<CleaningRequest>,
}

/// The agent's answer to a cleaning: `error` is absent when the method and the
/// verification succeeded within the timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleaningAnswer {
    pub attempt: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// A device provider's cleaning, as the agent's answer and the admin API show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCleaning {
    pub device_uuid: String,
    pub hostname: String,
    pub name: String,
    pub rp_uuid: String,
    /// Whether the device carries `CUSTOM_ACCEL_CLEANED_ON_RELEASE`.
    pub cleaned_on_release: bool,
    /// `clean`, `cleaning` or `clean_failed`.
    pub state: String,
    #[serde(default)]
    pub reason: Option<String>,
    pub attempt: i64,
    #[serde(default)]
    pub started_at: Option<i64>,
    #[serde(default)]
    pub finished_at: Option<i64>,
    #[serde(default)]
    pub last_duration_ms: Option<i64>,
}

/// `GET /v2/device_cleanings` and the operator's actions: `{"device_cleanings": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCleanings {
    pub device_cleanings: Vec<DeviceCleaning>,
}

/// One slot a pod (or nobody yet) holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotClaim {
    pub slot: String,
    /// The device's PCI address.
    pub device: String,
    /// `<namespace>/<name>`, or `None` before the pod is known.
    pub pod: Option<String>,
}

/// `PUT /v2/agent/hosts/{host}/kubernetes`: seed 001's slot usage (`""`, `<node>` or
/// `C:<virtual id>:<node>` per slot id) and the claims behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesUsage {
    pub usage: BTreeMap<String, String>,
    #[serde(default)]
    pub claims: Vec<SlotClaim>,
}

/// Where a claimed slot's MIG device is (issue 45): the device plugins' MIG resources
/// (`<domain>/mig-<profile>`) hand out MIG devices that exist, and the server holds
/// each in its GPU's partition ledger at exactly this placement. `slot` is one of the
/// body's `claims`, whose `device` is the GPU's PCI address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotPartition {
    pub slot: String,
    /// NVML's GPU instance profile id (`1g.10gb` is 19 on H100).
    pub profile_id: u32,
    /// The instance's first memory slice.
    pub start: u32,
}

/// `PUT /v2/agent/hosts/{host}/kubernetes` with MIG devices: [`KubernetesUsage`]'s
/// fields and, beside them, `partitions`, the placement of each claimed slot that is a
/// MIG device (absent when there is none, so the body is then [`KubernetesUsage`]'s).
/// A separate type rather than a field of [`SlotClaim`] so that code building the
/// older body keeps compiling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesUsageParts {
    #[serde(flatten)]
    pub usage: KubernetesUsage,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<SlotPartition>,
}

/// The answer to a saved usage: the devices VMs hold, and pods' consumers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesSaved {
    pub hostname: String,
    pub vm_held_devices: Vec<String>,
    /// Placement consumer uuid to the devices it holds.
    #[serde(default)]
    pub consumers: BTreeMap<String, Vec<String>>,
    pub usage_changed: bool,
    /// The MIG devices of the host's GPUs that no pod may be given (issue 45): their
    /// memory slices are held in the GPU's ledger by someone other than this host's
    /// pods (a VM, a claim), the ledger refused a pod's claim of them, or their GPU is
    /// being cleaned. A GPU's whole form follows `vm_held_devices` as before.
    #[serde(default)]
    pub held_partitions: Vec<ClaimPartition>,
}

/// `GET /v2/agent/hosts/{host}/kubernetes`: the stored usage (a restarted agent
/// restores it) and the devices VMs hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesShown {
    pub hostname: String,
    pub usage: BTreeMap<String, String>,
    pub vm_held_devices: Vec<String>,
    /// As [`KubernetesSaved::held_partitions`].
    #[serde(default)]
    pub held_partitions: Vec<ClaimPartition>,
}

/// `GET /v2/agent/hosts/{host}/partitions`: the MIG partitions the server's ledgers
/// hold on the host's GPUs, for the agent to make again after a reboot (MIG layouts do
/// not survive one) or to release what no one holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldPartitions {
    pub hostname: String,
    pub held: Vec<HeldPartition>,
}

/// One MIG instance a consumer holds: on the GPU at PCI address `device`, of NVML
/// profile `profile_id`, at memory slices `start..start + size`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldPartition {
    pub device: String,
    pub consumer: String,
    pub profile_id: u32,
    pub start: u32,
    pub size: u32,
}

/// The agent's client of these endpoints (base: the accelerator API endpoint).
/// `PUT .../kubernetes/claims/{uid}`'s body: the PCI addresses of the devices a
/// Kubernetes DRA claim was allocated on this host whole, and its MIG devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimDevices {
    pub devices: Vec<String>,
    /// MIG devices at the placements the Kubernetes scheduler chose (issue 45): the
    /// server holds them in the GPU's partition ledger, refusing one whose slices a VM
    /// or another pod holds. Absent from a body without any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<ClaimPartition>,
}

impl ClaimDevices {
    /// A claim of devices given whole, by PCI address.
    pub fn whole(devices: Vec<String>) -> ClaimDevices {
        ClaimDevices {
            devices,
            partitions: Vec::new(),
        }
    }
}

/// One MIG device of a claim: a GPU instance of profile `profile_id` (NVML's GPU
/// instance profile id, `1g.10gb` is 19 on H100) starting at memory slice `start` of
/// the GPU at PCI address `device`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimPartition {
    pub device: String,
    pub profile_id: u32,
    pub start: u32,
}

/// A prepared claim: its consumer (the claim uid) holds `devices` whole and
/// `partitions` at their placements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimPrepared {
    pub claim: String,
    pub devices: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<ClaimPartition>,
    /// False when the claim already held exactly these devices (a replay).
    pub changed: bool,
}

#[derive(Debug, Clone)]
pub struct Client {
    http: Http,
}

impl Client {
    pub fn new(http: Http) -> Client {
        Client { http }
    }

    pub fn http(&self) -> &Http {
        &self.http
    }

    fn req(method: Method, host: &str, rest: &str) -> Request {
        Request::new(method, format!("/v2/agent/hosts/{host}{rest}"))
    }

    /// `GET /v2/agent/hosts/{host}`.
    pub async fn host(&self, host: &str) -> Result<HostInfo, Error> {
        self.http.call(&Client::req(Method::GET, host, "")).await
    }

    /// `PUT /v2/agent/hosts/{host}` with `{"node_provider": "own"}`: the node provider
    /// accel owns for the host, created when absent.
    pub async fn own_host(&self, host: &str) -> Result<HostInfo, Error> {
        let body = serde_json::json!({"node_provider": "own"});
        self.http
            .call(&Client::req(Method::PUT, host, "").json(&body))
            .await
    }

    /// `PUT /v2/agent/hosts/{host}/devices`; `force` makes the server apply a body
    /// equal to the last one.
    pub async fn report(
        &self,
        host: &str,
        body: &DeviceReport,
        force: bool,
    ) -> Result<ReportAnswer, Error> {
        let mut r = Client::req(Method::PUT, host, "/devices").json(body);
        if force {
            r = r.query("force", "true");
        }
        self.http.call(&r).await
    }

    /// `GET /v2/agent/hosts/{host}/programs`.
    pub async fn pending_programs(&self, host: &str) -> Result<Vec<ProgramRequest>, Error> {
        let r = Client::req(Method::GET, host, "/programs");
        Ok(self.http.call::<Programs>(&r).await?.programs)
    }

    /// `PUT /v2/agent/hosts/{host}/programs/{id}`: done, or failed with the reason.
    pub async fn finish_program(
        &self,
        host: &str,
        id: i64,
        answer: &ProgramAnswer,
    ) -> Result<ProgramRequest, Error> {
        let r = Client::req(Method::PUT, host, &format!("/programs/{id}")).json(answer);
        self.http.call(&r).await
    }

    /// `GET /v2/agent/hosts/{host}/cleanings?agent={agent}[&wait={wait}]`: takes the
    /// host's cleanings for this agent process and answers all it holds; with `wait`
    /// (seconds), the server holds the answer until one is queued or `wait` passes.
    pub async fn cleanings(
        &self,
        host: &str,
        agent: &str,
        wait: Option<u64>,
    ) -> Result<Vec<CleaningRequest>, Error> {
        let mut r = Client::req(Method::GET, host, "/cleanings").query("agent", agent);
        if let Some(w) = wait {
            r = r.query("wait", w.to_string());
        }
        Ok(self.http.call::<Cleanings>(&r).await?.cleanings)
    }

    /// `PUT /v2/agent/hosts/{host}/cleanings/{rp_uuid}`.
    pub async fn finish_cleaning(
        &self,
        host: &str,
        rp_uuid: &str,
        answer: &CleaningAnswer,
    ) -> Result<DeviceCleaning, Error> {
        let r = Client::req(Method::PUT, host, &format!("/cleanings/{rp_uuid}")).json(answer);
        self.http.call(&r).await
    }

    /// `GET /v2/agent/hosts/{host}/kubernetes`.
    pub async fn kubernetes_usage(&self, host: &str) -> Result<KubernetesShown, Error> {
        self.http
            .call(&Client::req(Method::GET, host, "/kubernetes"))
            .await
    }

    /// `PUT /v2/agent/hosts/{host}/kubernetes`.
    pub async fn kubernetes_save(
        &self,
        host: &str,
        body: &KubernetesUsage,
    ) -> Result<KubernetesSaved, Error> {
        let r = Client::req(Method::PUT, host, "/kubernetes").json(body);
        self.http.call(&r).await
    }

    /// `PUT /v2/agent/hosts/{host}/kubernetes` with the placements of MIG devices.
    pub async fn kubernetes_save_parts(
        &self,
        host: &str,
        body: &KubernetesUsageParts,
    ) -> Result<KubernetesSaved, Error> {
        let r = Client::req(Method::PUT, host, "/kubernetes").json(body);
        self.http.call(&r).await
    }

    /// `PUT /v2/agent/hosts/{host}/kubernetes/claims/{uid}`: the claim's devices
    /// allocated in Placement, its MIG devices held in their GPUs' ledgers (409: one
    /// is held, with the reason).
    pub async fn prepare_claim(
        &self,
        host: &str,
        uid: &str,
        body: &ClaimDevices,
    ) -> Result<ClaimPrepared, Error> {
        let r = Client::req(Method::PUT, host, &format!("/kubernetes/claims/{uid}")).json(body);
        self.http.call(&r).await
    }

    /// `GET /v2/agent/hosts/{host}/partitions`.
    pub async fn held_partitions(&self, host: &str) -> Result<HeldPartitions, Error> {
        self.http
            .call(&Client::req(Method::GET, host, "/partitions"))
            .await
    }

    /// `DELETE /v2/agent/hosts/{host}/kubernetes/claims/{uid}`: the claim's devices
    /// freed (an unknown claim too).
    pub async fn unprepare_claim(&self, host: &str, uid: &str) -> Result<(), Error> {
        let r = Client::req(Method::DELETE, host, &format!("/kubernetes/claims/{uid}"));
        self.http.send(&r).await?.success().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_report_keeps_the_agents_field_order() {
        let d = Device {
            device_type: "GPU".into(),
            vendor: "10de".into(),
            model: "m".into(),
            std_board_info: Some("{}".into()),
            vendor_board_info: None,
            health: Some("ok".into()),
            health_reason: None,
            partitions: None,
            controlpath_id: ControlPathId {
                cpid_type: "PCI".into(),
                cpid_info: "{}".into(),
            },
            deployables: vec![Deployable {
                name: "n".into(),
                parent: None,
                num_accelerators: 1,
                driver_name: Some("nvidia".into()),
                attributes: vec![KeyValue {
                    key: "rc".into(),
                    value: "PGPU".into(),
                }],
                attach_handles: vec![AttachHandle {
                    attach_type: "PCI".into(),
                    attach_info: "{}".into(),
                    in_use: false,
                }],
            }],
        };
        let text = serde_json::to_string(&DeviceReport { devices: vec![d] }).unwrap();
        assert_eq!(
            text,
            r#"{"devices":[{"type":"GPU","vendor":"10de","model":"m","std_board_info":"{}","vendor_board_info":null,"health":"ok","controlpath_id":{"cpid_type":"PCI","cpid_info":"{}"},"deployables":[{"name":"n","num_accelerators":1,"driver_name":"nvidia","attributes":[{"key":"rc","value":"PGPU"}],"attach_handles":[{"attach_type":"PCI","attach_info":"{}","in_use":false}]}]}]}"#
        );
    }

    #[test]
    fn program_answers() {
        assert_eq!(
            serde_json::to_value(ProgramAnswer::from(&Ok(()))).unwrap(),
            json!({"state": "done"})
        );
        assert_eq!(
            serde_json::to_value(ProgramAnswer::from(&Err("no image".to_owned()))).unwrap(),
            json!({"state": "failed", "error": "no image"})
        );
    }
}
