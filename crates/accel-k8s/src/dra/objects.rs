//! The parts of the Kubernetes objects the DRA driver reads and writes
//! (`resource.k8s.io/v1` ResourceSlice and ResourceClaim, and a Node's uid), as
//! typed structs in the API's own field names.
//!
//! Fields the driver does not use are tolerated when read (an API server newer than
//! these structs adds some) and left out when written. Two kinds are kept whole
//! instead: a slice's metadata, which an update sends back as it was listed (its
//! resourceVersion, labels and what else the server keeps), and a device's fields the
//! driver never writes, so that a device someone else changed is not taken for the
//! one the driver published. The field order is the order the driver has always sent,
//! so the slices it writes are the same bytes as before these types.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `resource.k8s.io/v1`, the version the driver reads and writes.
pub const API_VERSION: &str = "resource.k8s.io/v1";

/// A ResourceSlice: one pool's devices on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSlice {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: ResourceSliceSpec,
}

/// The metadata the driver writes (`generateName`, the Node as owner) and reads back
/// (`name`, `resourceVersion`); the rest as the server sent it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Everything else the server keeps (labels, managedFields, ...).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The owner whose deletion takes the object with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
}

/// A slice's spec: the driver, the node, the pool and its devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceSpec {
    pub driver: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    pub pool: ResourcePool,
    #[serde(default)]
    pub devices: Vec<SliceDevice>,
    /// Counter sets the pool's devices draw from (a partitionable GPU's, issue 45);
    /// from 1.35 only in a slice without devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_counters: Vec<CounterSet>,
}

/// A named set of counters (`sharedCounters[]`): at most 32 counters, DNS-label names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSet {
    pub name: String,
    pub counters: IndexMap<String, DeviceCapacity>,
}

/// What a device draws from one counter set (`consumesCounters[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterConsumption {
    pub counter_set: String,
    pub counters: IndexMap<String, DeviceCapacity>,
}

/// A pool's name and generation, and how many slices it spans.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePool {
    pub name: String,
    #[serde(default)]
    pub generation: i64,
    #[serde(default)]
    pub resource_slice_count: i64,
}

/// One device of a slice. Attributes and capacities keep the order they were
/// written in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceDevice {
    pub name: String,
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub attributes: IndexMap<String, DeviceAttribute>,
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub capacity: IndexMap<String, DeviceCapacity>,
    /// The driver's taints (an unhealthy or cleaning device, where the cluster serves
    /// them: `dra::taints`); none on a healthy device, so its bytes are as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<DeviceTaint>,
    /// The counters a partition of a GPU draws (issue 45); none on a device given
    /// whole without partitions, so its bytes are as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumes_counters: Vec<CounterConsumption>,
    /// Fields the driver never writes (binding conditions, ...): none on its
    /// own devices.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A device's taint, as `resource.k8s.io/v1` `DeviceTaint` has it: `key` a label
/// name, `value` a label value (optional), `effect` `NoSchedule`, `NoExecute` (or
/// `None`), and `timeAdded`, which the API server fills on create or update when it
/// is absent (RFC 3339, whole seconds). At most 16 per device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

/// An attribute's value: exactly one of the four is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAttribute {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl DeviceAttribute {
    pub fn string(s: impl Into<String>) -> DeviceAttribute {
        DeviceAttribute {
            string: Some(s.into()),
            ..DeviceAttribute::default()
        }
    }

    pub fn int(n: i64) -> DeviceAttribute {
        DeviceAttribute {
            int: Some(n),
            ..DeviceAttribute::default()
        }
    }
}

/// A capacity: a quantity (`40960Mi`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCapacity {
    pub value: String,
}

/// A list's items and the resourceVersion it was read at.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct List<T> {
    #[serde(default = "Vec::new")]
    pub items: Vec<T>,
    #[serde(default)]
    pub metadata: ListMeta,
}

/// A list's metadata: where a watch of the same selection starts.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    #[serde(default)]
    pub resource_version: Option<String>,
}

/// A ResourceClaim: who it is (its uid) and what the scheduler allocated for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaim {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClaimStatus>,
}

/// A claim's status: its allocation, and the pods it is reserved for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<AllocationResult>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_for: Vec<ConsumerReference>,
}

/// Where the scheduler put the claim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceAllocation>,
}

/// The allocated devices (`results` absent: none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceAllocation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<DeviceResult>>,
}

/// One allocated device: the request it serves and where it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceResult {
    #[serde(default)]
    pub request: String,
    #[serde(default)]
    pub driver: String,
    #[serde(default)]
    pub pool: String,
    #[serde(default)]
    pub device: String,
}

/// A consumer a claim is reserved for (a pod).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
}

/// A Node: the driver reads only its uid (the slices' owner).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_the_driver_does_not_know_are_read_and_kept_where_they_matter() {
        let listed = json!({
            "kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1",
            "metadata": {"name": "s1", "resourceVersion": "7", "labels": {"a": "b"}},
            "spec": {"driver": "accel.dev", "nodeName": "n", "perDeviceNodeSelection": false,
                     "pool": {"name": "n", "generation": 3, "resourceSliceCount": 1},
                     "devices": [{"name": "d", "attributes": {"x": {"int": 1}},
                                  "taints": [{"key": "k", "effect": "NoSchedule"}]}]},
        });
        let s: ResourceSlice = serde_json::from_value(listed).unwrap();
        assert_eq!(s.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(s.spec.pool.generation, 3);
        assert_eq!(s.spec.devices[0].attributes["x"], DeviceAttribute::int(1));
        assert_eq!(s.spec.devices[0].taints[0].key, "k");
        assert_eq!(s.spec.devices[0].taints[0].time_added, None);
        let back = serde_json::to_value(&s).unwrap();
        assert_eq!(back["metadata"]["labels"], json!({"a": "b"}));
        assert!(back["spec"].get("perDeviceNodeSelection").is_none());
    }

    #[test]
    fn a_claim_without_results_reads_as_not_allocated() {
        let c: ResourceClaim = serde_json::from_value(json!({
            "metadata": {"uid": "u"}, "status": {"allocation": {"devices": {}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pu"}]}}))
        .unwrap();
        let status = c.status.unwrap();
        assert_eq!(status.allocation.unwrap().devices.unwrap().results, None);
        assert_eq!(status.reserved_for[0].name, "p");
    }
}
