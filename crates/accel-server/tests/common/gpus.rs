//! Partitioned GPUs for tests (issue 45): a geometry as the agent reports it, a node's
//! GPUs reported through the agent endpoint, Placement claims on their members, and
//! the estate the console's ledger view is checked (and photographed) against.

use super::accel::{compute_node, placement, Server};
use accel_api::partitions::GpuPartitions;
use accel_core::partition::{fixtures, Geometry, Member};
use serde_json::{json, Value};

/// Who holds what of the GPU whose own provider is `gpu_rp`: (consumer, the holder's
/// form as `Debug` writes it), sorted.
pub async fn holders(srv: &Server, gpu_rp: &str) -> Vec<(String, String)> {
    let l = srv
        .store
        .partitions()
        .ledger(gpu_rp)
        .await
        .unwrap()
        .unwrap();
    let mut out: Vec<(String, String)> = l
        .holders
        .iter()
        .map(|h| (h.consumer.clone(), format!("{:?}", h.holder)))
        .collect();
    out.sort();
    out
}

/// What the agent reports of `g`.
pub fn wire(g: &Geometry) -> GpuPartitions {
    GpuPartitions::from_geometry(g)
}

/// The GPU's deployable and provider name: `<node>_0000:<bus>:00.0`.
pub fn gpu_name(node: &str, bus: u8) -> String {
    format!("{node}_0000:{bus:02x}:00.0")
}

/// The class a whole GPU is reported with.
pub const GPU_CLASS: &str = "CUSTOM_ACCELERATOR_GPU";

/// Reports `node`'s NVIDIA H100s, one per `(bus, geometry)`, with their partitions,
/// through the agent endpoint (as `accel agent` does); the report must be taken.
pub async fn report(srv: &Server, node: &str, gpus: &[(u8, Geometry)]) {
    let devices: Vec<Value> = gpus
        .iter()
        .map(|(bus, g)| {
            let address = format!(
                "{{\"domain\":\"0000\",\"bus\":\"{bus:02x}\",\"device\":\"00\",\"function\":\"0\"}}"
            );
            json!({
                "type": "GPU", "vendor": "10de", "model": "H100",
                "controlpath_id": {"cpid_type": "PCI", "cpid_info": address},
                "deployables": [{"name": gpu_name(node, *bus), "num_accelerators": 1,
                    "driver_name": "nvidia",
                    "attributes": [{"key": "rc", "value": GPU_CLASS},
                                   {"key": "trait0", "value": "CUSTOM_GPU_NVIDIA"}],
                    "attach_handles": [{"attach_type": "PCI", "attach_info": address}]}],
                "partitions": wire(g),
            })
        })
        .collect();
    let r = reqwest::Client::new()
        .put(format!("{}/v2/agent/hosts/{node}/devices", srv.accel))
        .header("x-auth-token", "admin")
        .json(&json!({ "devices": devices }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 200, "the report of {node}'s GPUs: {body}");
}

/// The provider of `member` of the GPU `gpu` (its name) and the class it is claimed by.
pub fn member_provider(gpu: &str, g: &Geometry, m: &Member) -> (String, String) {
    (
        accel_store::accelerator::report::provider_uuid(&m.provider_name(g, gpu)),
        m.resource_class(g).unwrap_or_else(|| GPU_CLASS.to_owned()),
    )
}

/// `PUT /allocations/{consumer}`: one unit of `class` on `rp`, as an instance.
pub async fn claim(srv: &Server, consumer: &str, rp: &str, class: &str) -> (u16, Value) {
    placement(
        srv,
        reqwest::Method::PUT,
        &format!("/allocations/{consumer}"),
        Some(json!({
            "allocations": {rp: {"resources": {class: 1}}},
            "project_id": "p1", "user_id": "u1", "consumer_generation": null,
            "consumer_type": "INSTANCE",
        })),
    )
    .await
}

/// Two H100s on one node: one fully sliced into seven `1g.10gb` instances (seven
/// instances, each claiming one unit on the profile's provider; the ledger places
/// them), one given whole to an eighth (a claim on the GPU's own provider).
pub struct TwoH100s {
    pub node: String,
    /// The GPUs' own providers.
    pub sliced: String,
    pub whole: String,
    /// The `1g.10gb` provider of the sliced GPU.
    pub slice_rp: String,
    /// The seven slices' consumers, in claim order.
    pub slice_holders: Vec<String>,
    pub whole_holder: String,
    /// A consumer whose eighth `1g.10gb` the ledger refused (nothing is left).
    pub refused: String,
}

impl TwoH100s {
    /// Creates `node` (a compute node), reports its two GPUs and makes the claims.
    pub async fn fill(srv: &Server, node: &str) -> TwoH100s {
        compute_node(srv, node).await;
        let g = fixtures::h100_80gb();
        let (a, b) = (0x3b, 0x5e);
        report(srv, node, &[(a, g.clone()), (b, g.clone())]).await;
        let profile = g
            .profiles
            .iter()
            .find(|p| p.name == "1g.10gb")
            .expect("the H100 fixture has 1g.10gb");
        let (slice_rp, class) = member_provider(&gpu_name(node, a), &g, &Member::Mig(profile.id));
        let mut slice_holders = Vec::new();
        for _ in 0..profile.placements.len() {
            let c = uuid::Uuid::new_v4().to_string();
            let (s, v) = claim(srv, &c, &slice_rp, &class).await;
            assert_eq!(s, 204, "a 1g.10gb: {v}");
            slice_holders.push(c);
        }
        let refused = uuid::Uuid::new_v4().to_string();
        let (s, v) = claim(srv, &refused, &slice_rp, &class).await;
        assert_eq!(s, 409, "an eighth 1g.10gb on a GPU of seven slots: {v}");
        let (whole_rp, class) = member_provider(&gpu_name(node, b), &g, &Member::Whole);
        let whole_holder = uuid::Uuid::new_v4().to_string();
        let (s, v) = claim(srv, &whole_holder, &whole_rp, &class).await;
        assert_eq!(s, 204, "the whole GPU: {v}");
        TwoH100s {
            node: node.to_owned(),
            sliced: accel_store::accelerator::report::provider_uuid(&gpu_name(node, a)),
            whole: whole_rp,
            slice_rp,
            slice_holders,
            whole_holder,
            refused,
        }
    }
}
