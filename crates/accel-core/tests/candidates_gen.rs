//! Random forests and requests for the candidate-search property tests: small forests
//! (up to about 10 providers, depth up to 2, identical siblings, sharing providers, two
//! aggregates) and requests over three classes and four traits with every kind of
//! group filter, `isolate`, `same_subtree`, root traits and pre-1.29 semantics.
//!
//! Included by `candidates_props.rs` and `explain_props.rs` with `#[path]`.
#![allow(dead_code)]

use accel_core::candidates::{
    GroupPolicy, Inventory, Provider, ProviderId, RcId, Request, RequestGroup, Snapshot, TraitId,
};
use accel_core::capacity::Limits;
use proptest::prelude::*;
use uuid::Uuid;

/// The id of `MISC_SHARES_VIA_AGGREGATE` in generated forests.
pub const SHARES: TraitId = 9;

#[derive(Debug, Clone)]
pub struct NodeSpec {
    parent: Option<usize>,
    inventories: Vec<Inventory>,
    traits: u8,
    sharing: bool,
    aggs: u8,
    /// Identical siblings to add (exercises the interchangeable-provider pruning).
    copies: u8,
}

pub fn node() -> impl Strategy<Value = NodeSpec> {
    let inventory = |rc: RcId| {
        prop::option::weighted(
            0.6,
            (
                1i64..7,
                prop::option::weighted(0.15, 1i64..3),
                prop::option::weighted(0.1, Just(2i64)),
                prop::option::weighted(0.2, 1i64..4),
                prop::option::weighted(0.1, Just(2i64)),
                any::<bool>(),
                prop::option::weighted(0.2, 1i64..3),
            )
                .prop_map(
                    move |(total, reserved, min_unit, max_unit, step, ratio, used)| Inventory {
                        rc,
                        limits: Limits {
                            total,
                            reserved: reserved.unwrap_or(0),
                            min_unit: min_unit.unwrap_or(1),
                            max_unit: max_unit.unwrap_or(total),
                            step_size: step.unwrap_or(1),
                            allocation_ratio: if ratio { 1.5 } else { 1.0 },
                        },
                        used: used.unwrap_or(0),
                    },
                ),
        )
    };
    (
        prop::option::weighted(0.6, 0usize..8),
        (inventory(0), inventory(1), inventory(2)),
        0u8..16,
        prop::bool::weighted(0.25),
        0u8..4,
        prop::option::weighted(0.2, 1u8..4),
    )
        .prop_map(
            |(parent, (a, b, c), traits, sharing, aggs, copies)| NodeSpec {
                parent,
                inventories: [a, b, c].into_iter().flatten().collect(),
                traits,
                sharing,
                aggs,
                copies: copies.unwrap_or(0),
            },
        )
}

pub fn forest(specs: &[NodeSpec], aggs: &[Uuid; 2]) -> Snapshot {
    let mut ps: Vec<Provider> = Vec::new();
    let mut depth: Vec<usize> = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let parent = s
            .parent
            .filter(|_| i > 0)
            .map(|p| p % i)
            .filter(|&p| depth[p] < 2);
        let id = ProviderId(i as u32);
        let root = parent.map_or(id, |p| ps[p].root);
        depth.push(parent.map_or(0, |p| depth[p] + 1));
        let mut traits: Vec<TraitId> = (0..4).filter(|b| s.traits & (1 << b) != 0).collect();
        if s.sharing {
            traits.push(SHARES);
        }
        let inventories = s.inventories.clone();
        ps.push(Provider {
            uuid: Uuid::new_v4(),
            parent: parent.map(|p| ProviderId(p as u32)),
            root,
            inventories,
            traits,
            aggregates: (0..2)
                .filter(|b| s.aggs & (1 << b) != 0)
                .map(|b| aggs[b])
                .collect(),
        });
    }
    for (i, s) in specs.iter().enumerate() {
        if ps[i].parent.is_some() {
            for _ in 0..s.copies {
                let mut twin = ps[i].clone();
                twin.uuid = Uuid::new_v4();
                ps.push(twin);
            }
        }
    }
    Snapshot::new(ps, Some(SHARES)).expect("generated forest is valid")
}

#[derive(Debug, Clone)]
pub struct GroupSpec {
    resources: Vec<(RcId, i64)>,
    required: Vec<Vec<TraitId>>,
    forbidden: Vec<TraitId>,
    member_of: Vec<u8>,
    forbidden_agg: Option<u8>,
    in_tree: Option<usize>,
}

pub fn group() -> impl Strategy<Value = GroupSpec> {
    (
        prop::option::weighted(0.85, prop::collection::vec((0u32..3, 1i64..3), 1..3)),
        prop::option::weighted(0.3, prop::collection::vec(0u32..4, 1..3)),
        prop::option::weighted(0.25, 0u32..4),
        prop::option::weighted(0.25, 1u8..4),
        prop::option::weighted(0.15, 0u8..2),
        prop::option::weighted(0.1, 0usize..9),
    )
        .prop_map(
            |(resources, required, forbidden, member_of, forbidden_agg, in_tree)| GroupSpec {
                resources: resources.unwrap_or_default(),
                required: required.into_iter().collect(),
                forbidden: forbidden.into_iter().collect(),
                member_of: member_of.into_iter().collect(),
                forbidden_agg,
                in_tree,
            },
        )
}

#[derive(Debug, Clone)]
pub struct RequestSpec {
    unsuffixed: bool,
    groups: Vec<GroupSpec>,
    isolate: bool,
    same_subtree: Option<u8>,
    root_required: Option<TraitId>,
    root_forbidden: Option<TraitId>,
    nested: bool,
}

pub fn request_spec() -> impl Strategy<Value = RequestSpec> {
    (
        any::<bool>(),
        prop::collection::vec(group(), 1..5),
        any::<bool>(),
        prop::option::weighted(0.4, 1u8..16),
        prop::option::weighted(0.15, 0u32..4),
        prop::option::weighted(0.15, 0u32..4),
        prop::bool::weighted(0.8),
    )
        .prop_map(
            |(unsuffixed, groups, isolate, same_subtree, root_required, root_forbidden, nested)| {
                RequestSpec {
                    unsuffixed,
                    groups,
                    isolate,
                    same_subtree,
                    root_required,
                    root_forbidden,
                    nested,
                }
            },
        )
}

pub fn build_request(spec: &RequestSpec, snap: &Snapshot, aggs: &[Uuid; 2]) -> Request {
    let n = snap.providers().len();
    let mut groups = Vec::new();
    for (i, g) in spec.groups.iter().enumerate() {
        let suffix = if i == 0 && spec.unsuffixed {
            String::new()
        } else {
            format!("_G{i}")
        };
        let mut resources = g.resources.clone();
        if suffix.is_empty() && resources.is_empty() {
            resources.push((0, 1));
        }
        groups.push(RequestGroup {
            suffix,
            resources,
            required: g.required.clone(),
            forbidden: g.forbidden.clone(),
            // bit 0: aggs[0], bit 1: aggs[1], both bits: any-of.
            member_of: g
                .member_of
                .iter()
                .map(|&m| {
                    (0..2)
                        .filter(|b| m & (1 << b) != 0)
                        .map(|b| aggs[b])
                        .collect()
                })
                .collect(),
            forbidden_aggregates: g
                .forbidden_agg
                .map(|b| aggs[b as usize])
                .into_iter()
                .collect(),
            in_tree: g.in_tree.map(|t| ProviderId((t % n) as u32)),
        });
    }
    let granular: Vec<String> = groups
        .iter()
        .filter(|g| g.is_granular())
        .map(|g| g.suffix.clone())
        .collect();
    let same_subtree = spec
        .same_subtree
        .map(|bits| {
            granular
                .iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .map(|(_, s)| s.clone())
                .collect::<Vec<_>>()
        })
        .filter(|s| !s.is_empty())
        .into_iter()
        .collect();
    Request {
        groups,
        group_policy: if spec.isolate {
            GroupPolicy::Isolate
        } else {
            GroupPolicy::None
        },
        same_subtree,
        root_required: spec.root_required.map(|t| vec![t]).into_iter().collect(),
        root_forbidden: spec.root_forbidden.into_iter().collect(),
        limit: None,
        nested: spec.nested,
        randomize: None,
    }
}

pub fn scenario() -> impl Strategy<Value = (Vec<NodeSpec>, RequestSpec)> {
    (prop::collection::vec(node(), 1..10), request_spec())
}
