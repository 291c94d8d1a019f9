//! Placement's request and response bodies, field for field as upstream writes them:
//! fields keep upstream's key order, and a field a microversion added is an `Option`
//! skipped when absent, so one struct serves every microversion.
//!
//! Request bodies are read only after the server's JSON-schema check (whose error
//! texts are upstream's), so they describe what the schema admits and no more.

use super::map::{int, opt_int, present, Map, Resources};
use serde::{Deserialize, Serialize};

/// `{"rel": ..., "href": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub rel: String,
    pub href: String,
}

/// `POST /resource_providers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderCreate {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// 1.14.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_provider_uuid: Option<String>,
}

/// `PUT /resource_providers/{uuid}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderUpdate {
    pub name: String,
    /// 1.14: absent keeps the parent, `null` (`Some(None)`) clears it (1.37).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub parent_provider_uuid: Option<Option<String>>,
}

/// A resource provider (the server writes its listings with a hand-made serialiser
/// of the same shape, see `docs/benchmarks.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provider {
    pub uuid: String,
    pub name: String,
    pub generation: i64,
    #[serde(default)]
    pub links: Vec<Link>,
    /// 1.14.
    #[serde(default)]
    pub parent_provider_uuid: Option<String>,
    /// 1.14.
    #[serde(default)]
    pub root_provider_uuid: Option<String>,
}

/// `GET /resource_providers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Providers {
    pub resource_providers: Vec<Provider>,
}

/// One inventory record of a request: only `total` is required; `resource_class`
/// only in `POST .../inventories`, `resource_provider_generation` in the PUT of one
/// class.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InventoryRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_class: Option<String>,
    #[serde(
        default,
        deserialize_with = "opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub resource_provider_generation: Option<i64>,
    #[serde(deserialize_with = "int")]
    pub total: i64,
    #[serde(
        default,
        deserialize_with = "opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub reserved: Option<i64>,
    #[serde(
        default,
        deserialize_with = "opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_unit: Option<i64>,
    #[serde(
        default,
        deserialize_with = "opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_unit: Option<i64>,
    #[serde(
        default,
        deserialize_with = "opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub step_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_ratio: Option<f64>,
}

impl From<&Inventory> for InventoryRecord {
    fn from(i: &Inventory) -> Self {
        InventoryRecord {
            resource_class: None,
            resource_provider_generation: None,
            total: i.total,
            reserved: Some(i.reserved),
            min_unit: Some(i.min_unit),
            max_unit: Some(i.max_unit),
            step_size: Some(i.step_size),
            allocation_ratio: Some(i.allocation_ratio),
        }
    }
}

/// An inventory as Placement answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    pub total: i64,
    pub reserved: i64,
    pub min_unit: i64,
    pub max_unit: i64,
    pub step_size: i64,
    pub allocation_ratio: f64,
}

impl From<accel_core::capacity::Limits> for Inventory {
    fn from(l: accel_core::capacity::Limits) -> Inventory {
        Inventory {
            total: l.total,
            reserved: l.reserved,
            min_unit: l.min_unit,
            max_unit: l.max_unit,
            step_size: l.step_size,
            allocation_ratio: l.allocation_ratio,
        }
    }
}

/// `GET|PUT|POST /resource_providers/{uuid}/inventories/{class}` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderInventory {
    #[serde(flatten)]
    pub inventory: Inventory,
    pub resource_provider_generation: i64,
}

/// `GET /resource_providers/{uuid}/inventories` (and the PUT's answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventories {
    pub inventories: Map<Inventory>,
    pub resource_provider_generation: i64,
}

/// `PUT /resource_providers/{uuid}/inventories`, and one provider of a reshape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InventoriesPut {
    #[serde(deserialize_with = "int")]
    pub resource_provider_generation: i64,
    pub inventories: Map<InventoryRecord>,
}

/// `GET /resource_providers/{uuid}/aggregates`; from 1.19 also the PUT body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aggregates {
    pub aggregates: Vec<String>,
    /// 1.19.
    #[serde(
        default,
        deserialize_with = "opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub resource_provider_generation: Option<i64>,
}

/// `PUT /resource_providers/{uuid}/aggregates`: a bare list before 1.19.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AggregatesPut {
    List(Vec<String>),
    /// 1.19.
    WithGeneration(Aggregates),
}

/// `GET /traits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traits {
    pub traits: Vec<String>,
}

/// `GET|PUT /resource_providers/{uuid}/traits` (answer and PUT body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderTraits {
    pub traits: Vec<String>,
    #[serde(deserialize_with = "int")]
    pub resource_provider_generation: i64,
}

/// `POST /resource_classes`, and the rename of `PUT /resource_classes/{name}` before
/// 1.7.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceClassName {
    pub name: String,
}

/// A resource class as Placement answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceClass {
    pub name: String,
    pub links: Vec<Link>,
}

/// `GET /resource_classes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceClasses {
    pub resource_classes: Vec<ResourceClass>,
}

/// `{"uuid": ...}` of the list-form allocations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderRef {
    pub uuid: String,
}

/// One element of the list-form allocations (before 1.12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListAllocation {
    pub resource_provider: ProviderRef,
    pub resources: Resources,
}

/// `PUT /allocations/{consumer}` before 1.12 (`project_id` and `user_id` from 1.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListAllocations {
    pub allocations: Vec<ListAllocation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

/// One provider's part of a dict-form allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderAllocation {
    /// Accepted and ignored in requests (the provider's generation in answers).
    #[serde(
        default,
        deserialize_with = "opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub generation: Option<i64>,
    pub resources: Resources,
}

/// One consumer's allocations in the dict form: `PUT /allocations/{consumer}` from
/// 1.12, each consumer of `POST /allocations` and of a reshape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerAllocations {
    pub allocations: Map<ProviderAllocation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// 1.28: required there, `null` for a new consumer.
    #[serde(
        default,
        deserialize_with = "present_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub consumer_generation: Option<Option<i64>>,
    /// 1.34.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mappings: Option<Map<Vec<String>>>,
    /// 1.38.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_type: Option<String>,
}

fn present_int<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    opt_int(d).map(Some)
}

/// `GET /allocation_candidates` (1.12+: allocation requests in the dict form).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationCandidates {
    pub allocation_requests: Vec<AllocationRequest>,
    #[serde(default)]
    pub provider_summaries: Map<ProviderSummary>,
}

/// One of `allocation_requests`: a body `PUT /allocations/{consumer}` can claim as it
/// is (`generation` is absent here).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationRequest {
    pub allocations: Map<ProviderAllocation>,
    /// 1.34: request group suffix (`""` for the unsuffixed group) to the providers
    /// that satisfy it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mappings: Option<Map<Vec<String>>>,
}

impl AllocationRequest {
    /// The providers that satisfy the request group with `suffix` (none before 1.34).
    pub fn mapped(&self, suffix: &str) -> &[String] {
        self.mappings
            .as_ref()
            .and_then(|m| m.get(suffix))
            .map_or(&[], Vec::as_slice)
    }
}

/// One of `provider_summaries`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSummary {
    /// Class to capacity and usage (from 1.27 every class of the provider).
    #[serde(default)]
    pub resources: Map<ClassSummary>,
    /// 1.17.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traits: Option<Vec<String>>,
    /// 1.29.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_provider_uuid: Option<String>,
    /// 1.29.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_provider_uuid: Option<String>,
}

/// A class in a provider summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassSummary {
    #[serde(deserialize_with = "int")]
    pub capacity: i64,
    #[serde(deserialize_with = "int")]
    pub used: i64,
}

/// `POST /allocations`: consumer uuid to its allocations.
pub type AllocationsPost = Map<ConsumerAllocations>;

/// `POST /reshaper` (1.30).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reshape {
    pub inventories: Map<InventoriesPut>,
    pub allocations: Map<ConsumerAllocations>,
}

/// `GET /allocations/{consumer}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerAllocationsView {
    pub allocations: Map<ProviderAllocationView>,
    /// 1.12, when the consumer has allocations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// 1.28.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_generation: Option<i64>,
    /// 1.38.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_type: Option<String>,
}

/// One provider's part of `GET /allocations/{consumer}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderAllocationView {
    pub resources: Resources,
    pub generation: i64,
}

/// `GET /resource_providers/{uuid}/allocations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderAllocations {
    pub allocations: Map<ConsumerUsage>,
    pub resource_provider_generation: i64,
}

/// One consumer's part of `GET /resource_providers/{uuid}/allocations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerUsage {
    pub resources: Resources,
    /// 1.28.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_generation: Option<i64>,
}

/// `GET /resource_providers/{uuid}/usages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderUsages {
    pub resource_provider_generation: i64,
    pub usages: Resources,
}

/// One value of `GET /usages`: an amount, or from 1.38 a consumer type's group
/// (`{class: amount, ..., "consumer_count": n}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Usage {
    Amount(i64),
    Group(Resources),
}

/// `GET /usages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usages {
    pub usages: Map<Usage>,
}

/// `GET /`: the version document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions {
    pub versions: Vec<VersionDoc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionDoc {
    pub id: String,
    pub max_version: String,
    pub min_version: String,
    pub status: String,
    pub links: Vec<Link>,
}

/// Placement's error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errors {
    pub errors: Vec<ErrorItem>,
}

/// One error. `code` from 1.23; `max_version`/`min_version` only in the 406 of an
/// unacceptable microversion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorItem {
    pub status: u16,
    pub title: String,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_null_and_given_parents_differ() {
        let u: ProviderUpdate = serde_json::from_str(r#"{"name": "a"}"#).unwrap();
        assert_eq!(u.parent_provider_uuid, None);
        let u: ProviderUpdate =
            serde_json::from_str(r#"{"name": "a", "parent_provider_uuid": null}"#).unwrap();
        assert_eq!(u.parent_provider_uuid, Some(None));
        assert_eq!(
            serde_json::to_string(&u).unwrap(),
            r#"{"name":"a","parent_provider_uuid":null}"#
        );
        let c: ConsumerAllocations = serde_json::from_str(
            r#"{"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": null}"#,
        )
        .unwrap();
        assert_eq!(c.consumer_generation, Some(None));
    }

    #[test]
    fn aggregates_by_version_and_inventories_in_order() {
        let a: AggregatesPut = serde_json::from_str(r#"["a", "b"]"#).unwrap();
        assert_eq!(a, AggregatesPut::List(vec!["a".into(), "b".into()]));
        let a: AggregatesPut =
            serde_json::from_str(r#"{"aggregates": [], "resource_provider_generation": 3}"#)
                .unwrap();
        assert!(
            matches!(a, AggregatesPut::WithGeneration(g) if g.resource_provider_generation == Some(3))
        );
        let inv = ProviderInventory {
            inventory: Inventory {
                total: 4,
                reserved: 0,
                min_unit: 1,
                max_unit: 4,
                step_size: 1,
                allocation_ratio: 1.0,
            },
            resource_provider_generation: 2,
        };
        assert_eq!(
            serde_json::to_string(&inv).unwrap(),
            r#"{"total":4,"reserved":0,"min_unit":1,"max_unit":4,"step_size":1,"allocation_ratio":1.0,"resource_provider_generation":2}"#
        );
    }

    #[test]
    fn candidates_read_and_claim_as_given() {
        let c: AllocationCandidates = serde_json::from_str(
            r#"{"allocation_requests": [{"allocations": {"rp1": {"resources": {"VCPU": 1, "FPGA": 1}}},
                 "mappings": {"": ["rp1"], "_device_profile_0": ["rp1"]}}],
               "provider_summaries": {"rp1": {"resources": {"VCPU": {"capacity": 8, "used": 0}},
                 "traits": ["CUSTOM_A"], "parent_provider_uuid": null, "root_provider_uuid": "rp1"}}}"#,
        )
        .unwrap();
        let r = &c.allocation_requests[0];
        assert_eq!(r.mapped("_device_profile_0"), ["rp1".to_owned()]);
        assert!(r.mapped("_other").is_empty());
        let s = c.provider_summaries.get("rp1").unwrap();
        assert_eq!(s.traits.as_deref(), Some(&["CUSTOM_A".to_owned()][..]));
        assert_eq!(s.resources.get("VCPU").map(|r| r.capacity), Some(8));
        assert_eq!(
            serde_json::to_string(&r.allocations).unwrap(),
            r#"{"rp1":{"resources":{"VCPU":1,"FPGA":1}}}"#
        );
        // Before 1.34 there are no mappings, before 1.17 no traits.
        let old: AllocationCandidates = serde_json::from_str(
            r#"{"allocation_requests": [{"allocations": {"rp1": {"resources": {"VCPU": 1}}}}],
               "provider_summaries": {"rp1": {"resources": {"VCPU": {"capacity": 8, "used": 0}}}}}"#,
        )
        .unwrap();
        assert!(old.allocation_requests[0].mapped("").is_empty());
        assert_eq!(old.provider_summaries.get("rp1").unwrap().traits, None);
    }
}
