//! The Placement tables' columns and rows as an import writes them into accel and an
//! export into upstream: the two schemas name and order these columns alike, so each
//! table's row builder is written once ([`super::write`], [`super::export`]), and a
//! column added to one direction cannot be forgotten in the other.

use super::rows::Val;
use super::{PlacementData, ProviderRow};
use std::collections::HashMap;

pub(crate) const PROVIDER_COLS: &[&str] = &[
    "id",
    "uuid",
    "name",
    "generation",
    "root_provider_id",
    "parent_provider_id",
    "created_at",
    "updated_at",
];

pub(crate) const INVENTORY_COLS: &[&str] = &[
    "resource_provider_id",
    "resource_class_id",
    "total",
    "reserved",
    "min_unit",
    "max_unit",
    "step_size",
    "allocation_ratio",
    "created_at",
    "updated_at",
];

pub(crate) const CONSUMER_COLS: &[&str] = &[
    "id",
    "uuid",
    "project_id",
    "user_id",
    "generation",
    "consumer_type_id",
    "created_at",
    "updated_at",
];

pub(crate) const ALLOCATION_COLS: &[&str] = &[
    "resource_provider_id",
    "consumer_id",
    "resource_class_id",
    "used",
    "created_at",
    "updated_at",
];

/// Providers ordered parents first (by depth), so each insert's references exist.
pub(crate) fn parents_first(data: &PlacementData) -> Vec<&ProviderRow> {
    let by_id: HashMap<i64, &ProviderRow> = data.providers.iter().map(|p| (p.id, p)).collect();
    let depth = |p: &ProviderRow| {
        let (mut d, mut at) = (0usize, p);
        while let Some(up) = at.parent_id.and_then(|x| by_id.get(&x)) {
            d += 1;
            at = up;
            if d > by_id.len() {
                break;
            }
        }
        d
    };
    let mut out: Vec<(usize, &ProviderRow)> =
        data.providers.iter().map(|p| (depth(p), p)).collect();
    out.sort_by_key(|(d, p)| (*d, p.id));
    out.into_iter().map(|(_, p)| p).collect()
}

/// [`PROVIDER_COLS`] of every provider, parents first; `now` for a missing `created_at`.
pub(crate) fn provider_rows(data: &PlacementData, now: i64) -> Vec<Vec<Val>> {
    parents_first(data)
        .into_iter()
        .map(|p| {
            vec![
                Val::I(p.id),
                Val::S(p.uuid.clone()),
                Val::S(p.name.clone().unwrap_or_default()),
                Val::I(p.generation.unwrap_or(0)),
                Val::N(p.root_id),
                Val::N(p.parent_id),
                Val::I(p.created.unwrap_or(now)),
                Val::N(p.updated),
            ]
        })
        .collect()
}

/// [`INVENTORY_COLS`]; `class` maps the data's class ids to the target's.
pub(crate) fn inventory_rows(
    data: &PlacementData,
    class: impl Fn(i64) -> i64,
    now: i64,
) -> Vec<Vec<Val>> {
    (data.inventories.iter())
        .map(|i| {
            vec![
                Val::I(i.provider_id),
                Val::I(class(i.class_id)),
                Val::I(i.total),
                Val::I(i.reserved),
                Val::I(i.min_unit),
                Val::I(i.max_unit),
                Val::I(i.step_size),
                Val::F(i.allocation_ratio),
                Val::I(i.created.unwrap_or(now)),
                Val::N(i.updated),
            ]
        })
        .collect()
}

/// [`CONSUMER_COLS`].
pub(crate) fn consumer_rows(data: &PlacementData, now: i64) -> Vec<Vec<Val>> {
    (data.consumers.iter())
        .map(|c| {
            vec![
                Val::I(c.id),
                Val::S(c.uuid.clone()),
                Val::I(c.project_id),
                Val::I(c.user_id),
                Val::I(c.generation),
                Val::N(c.type_id),
                Val::I(c.created.unwrap_or(now)),
                Val::N(c.updated),
            ]
        })
        .collect()
}

/// [`ALLOCATION_COLS`]; `class` maps the data's class ids to the target's.
pub(crate) fn allocation_rows(
    data: &PlacementData,
    class: impl Fn(i64) -> i64,
    now: i64,
) -> Vec<Vec<Val>> {
    (data.allocations.iter())
        .map(|a| {
            vec![
                Val::I(a.provider_id),
                Val::S(a.consumer.clone()),
                Val::I(class(a.class_id)),
                Val::I(a.used),
                Val::I(a.created.unwrap_or(now)),
                Val::N(a.updated),
            ]
        })
        .collect()
}
