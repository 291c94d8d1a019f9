//! The consistency checks an import makes before it writes anything.
//!
//! Upstream's schema enforces little (most references have no foreign key, names and
//! generations are nullable), and a database that lived through years of bugs and
//! hand repairs can hold rows accel's invariants forbid. Each such row is a
//! [`Problem`] named by the provider or consumer uuid it belongs to. The import
//! refuses when there is any; with `--skip-invalid` it leaves out what the problem
//! touches and lists it: a bad provider takes its subtree with it (inventories,
//! traits, aggregate links, and the consumers allocated there), a bad consumer all its
//! allocations (a consumer's allocations are one unit to Placement). Nothing is
//! repaired or changed silently.

use super::{ConsumerRow, PlacementData};
use accel_core::capacity::Limits;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// One inconsistent row (or set of rows), and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// `provider <uuid>` or `consumer <uuid>` (or, when the row has no uuid to name,
    /// the table and id).
    pub subject: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.subject, self.message)
    }
}

fn provider(uuid: &str) -> String {
    format!("provider {uuid}")
}

fn consumer(uuid: &str) -> String {
    format!("consumer {uuid}")
}

/// Checks `data`; returns the problems found and the rows free of them (all of `data`
/// when there is none).
pub fn check(data: &PlacementData) -> (Vec<Problem>, PlacementData) {
    let mut problems = BTreeSet::new();
    let by_id: HashMap<i64, &super::ProviderRow> =
        data.providers.iter().map(|p| (p.id, p)).collect();
    let class_names: HashMap<i64, &str> = data
        .classes
        .iter()
        .map(|c| (c.id, c.name.as_str()))
        .collect();
    let mut bad_rp: HashSet<i64> = HashSet::new();
    let flag = |problems: &mut BTreeSet<Problem>, bad: &mut HashSet<i64>, id: i64, m: String| {
        bad.insert(id);
        problems.insert(Problem {
            subject: provider(&by_id[&id].uuid),
            message: m,
        });
    };

    // Providers: names, generations, parents, roots, loops.
    for p in &data.providers {
        if p.name.is_none() {
            flag(&mut problems, &mut bad_rp, p.id, "has no name".into());
        }
        if p.generation.is_none() {
            flag(&mut problems, &mut bad_rp, p.id, "has no generation".into());
        }
        if let Some(parent) = p.parent_id.filter(|x| !by_id.contains_key(x)) {
            flag(
                &mut problems,
                &mut bad_rp,
                p.id,
                format!("parent provider id {parent} does not exist"),
            );
            continue;
        }
        // Walk up: a loop revisits a provider before reaching a root.
        let mut seen = vec![p.id];
        let mut at = p;
        let top = loop {
            match at.parent_id.and_then(|x| by_id.get(&x)) {
                None => break Some(at.id),
                Some(up) if seen.contains(&up.id) => {
                    let chain: Vec<&str> = seen
                        .iter()
                        .chain(std::iter::once(&up.id))
                        .map(|id| by_id[id].uuid.as_str())
                        .collect();
                    flag(
                        &mut problems,
                        &mut bad_rp,
                        p.id,
                        format!("parent loop: {}", chain.join(" -> ")),
                    );
                    break None;
                }
                Some(up) => {
                    seen.push(up.id);
                    at = up;
                }
            }
        };
        let Some(top) = top else { continue };
        if p.root_id != Some(top) {
            let root = p
                .root_id
                .and_then(|r| by_id.get(&r))
                .map_or_else(|| format!("{:?}", p.root_id), |r| r.uuid.clone());
            flag(
                &mut problems,
                &mut bad_rp,
                p.id,
                format!(
                    "root provider is {root} but its parents lead to {}",
                    by_id[&top].uuid
                ),
            );
        }
    }
    // A skipped provider takes its descendants with it.
    loop {
        let more: Vec<(i64, i64)> = data
            .providers
            .iter()
            .filter(|p| !bad_rp.contains(&p.id))
            .filter_map(|p| {
                p.parent_id
                    .filter(|x| bad_rp.contains(x))
                    .map(|x| (p.id, x))
            })
            .collect();
        if more.is_empty() {
            break;
        }
        for (id, parent) in more {
            let m = format!("its parent provider {} is invalid", by_id[&parent].uuid);
            flag(&mut problems, &mut bad_rp, id, m);
        }
    }

    // Inventories.
    let mut inventories = Vec::new();
    let mut limits: HashMap<(i64, i64), Limits> = HashMap::new();
    for inv in &data.inventories {
        let Some(p) = by_id.get(&inv.provider_id) else {
            problems.insert(Problem {
                subject: format!("inventories of provider id {}", inv.provider_id),
                message: "the provider does not exist".into(),
            });
            continue;
        };
        if bad_rp.contains(&p.id) {
            continue;
        }
        if !class_names.contains_key(&inv.class_id) {
            problems.insert(Problem {
                subject: provider(&p.uuid),
                message: format!("inventory of unknown resource class id {}", inv.class_id),
            });
            continue;
        }
        limits.insert(
            (inv.provider_id, inv.class_id),
            Limits {
                total: inv.total,
                reserved: inv.reserved,
                min_unit: inv.min_unit,
                max_unit: inv.max_unit,
                step_size: inv.step_size,
                allocation_ratio: inv.allocation_ratio,
            },
        );
        inventories.push(inv.clone());
    }

    // Consumers and their allocations.
    let projects: HashSet<i64> = data.projects.iter().map(|n| n.id).collect();
    let users: HashSet<i64> = data.users.iter().map(|n| n.id).collect();
    let types: HashSet<i64> = data.consumer_types.iter().map(|n| n.id).collect();
    let consumers: HashMap<&str, &ConsumerRow> = data
        .consumers
        .iter()
        .map(|c| (c.uuid.as_str(), c))
        .collect();
    let mut bad_consumer: HashSet<String> = HashSet::new();
    let refuse =
        |problems: &mut BTreeSet<Problem>, bad: &mut HashSet<String>, uuid: &str, m: String| {
            bad.insert(uuid.to_owned());
            problems.insert(Problem {
                subject: consumer(uuid),
                message: m,
            });
        };
    for c in &data.consumers {
        if !projects.contains(&c.project_id) {
            refuse(
                &mut problems,
                &mut bad_consumer,
                &c.uuid,
                format!("project id {} does not exist", c.project_id),
            );
        }
        if !users.contains(&c.user_id) {
            refuse(
                &mut problems,
                &mut bad_consumer,
                &c.uuid,
                format!("user id {} does not exist", c.user_id),
            );
        }
        if let Some(t) = c.type_id.filter(|t| !types.contains(t)) {
            refuse(
                &mut problems,
                &mut bad_consumer,
                &c.uuid,
                format!("consumer type id {t} does not exist"),
            );
        }
    }
    for a in &data.allocations {
        let class = class_names.get(&a.class_id).copied();
        let m = if !consumers.contains_key(a.consumer.as_str()) {
            Some("has allocations but no consumer record".to_owned())
        } else if let Some(p) = by_id.get(&a.provider_id) {
            match class {
                None => Some(format!(
                    "allocation of unknown resource class id {}",
                    a.class_id
                )),
                Some(_) if bad_rp.contains(&p.id) => {
                    Some(format!("allocation on invalid provider {}", p.uuid))
                }
                Some(name) if !limits.contains_key(&(a.provider_id, a.class_id)) => Some(format!(
                    "allocation of {name} on provider {}, which has no {name} inventory",
                    p.uuid
                )),
                Some(_) => None,
            }
        } else {
            Some(format!(
                "allocation on missing provider id {}",
                a.provider_id
            ))
        };
        if let Some(m) = m {
            refuse(&mut problems, &mut bad_consumer, &a.consumer, m);
        }
    }
    // Usage over capacity: the inventory's provider is named, and every consumer
    // allocated there is left out with --skip-invalid.
    let mut usage: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for a in data
        .allocations
        .iter()
        .filter(|a| !bad_consumer.contains(&a.consumer))
    {
        *usage.entry((a.provider_id, a.class_id)).or_default() += a.used;
    }
    let mut over: HashSet<(i64, i64)> = HashSet::new();
    for (key, used) in &usage {
        let l = &limits[key];
        if *used > l.capacity() {
            over.insert(*key);
            problems.insert(Problem {
                subject: provider(&by_id[&key.0].uuid),
                message: format!(
                    "usage of {} is {used}, over its capacity {} ((total {} - reserved {}) * allocation_ratio {})",
                    class_names[&key.1],
                    l.capacity(),
                    l.total,
                    l.reserved,
                    l.allocation_ratio
                ),
            });
        }
    }
    for a in &data.allocations {
        if over.contains(&(a.provider_id, a.class_id)) && !bad_consumer.contains(&a.consumer) {
            let m = format!(
                "allocated {} of {} on provider {}, whose usage is over capacity",
                a.used, class_names[&a.class_id], by_id[&a.provider_id].uuid
            );
            refuse(&mut problems, &mut bad_consumer, &a.consumer, m);
        }
    }

    // Aggregate and trait links of valid providers to existing rows.
    let aggregates: HashSet<i64> = data.aggregates.iter().map(|n| n.id).collect();
    let traits: HashSet<i64> = data.traits.iter().map(|n| n.id).collect();
    let mut links = |pairs: &[(i64, i64)], known: &HashSet<i64>, what: &str| -> Vec<(i64, i64)> {
        let mut kept = Vec::new();
        for &(rp, other) in pairs {
            match by_id.get(&rp) {
                None => {
                    problems.insert(Problem {
                        subject: format!("{what} links of provider id {rp}"),
                        message: "the provider does not exist".into(),
                    });
                }
                Some(_) if bad_rp.contains(&rp) => {}
                Some(p) if !known.contains(&other) => {
                    problems.insert(Problem {
                        subject: provider(&p.uuid),
                        message: format!("{what} id {other} does not exist"),
                    });
                }
                Some(_) => kept.push((rp, other)),
            }
        }
        kept
    };
    let provider_aggregates = links(&data.provider_aggregates, &aggregates, "aggregate");
    let provider_traits = links(&data.provider_traits, &traits, "trait");

    let valid = PlacementData {
        classes: data.classes.clone(),
        traits: data.traits.clone(),
        providers: data
            .providers
            .iter()
            .filter(|p| !bad_rp.contains(&p.id))
            .cloned()
            .collect(),
        inventories,
        aggregates: data.aggregates.clone(),
        provider_aggregates,
        provider_traits,
        projects: data.projects.clone(),
        users: data.users.clone(),
        consumer_types: data.consumer_types.clone(),
        consumers: data
            .consumers
            .iter()
            .filter(|c| !bad_consumer.contains(&c.uuid))
            .cloned()
            .collect(),
        allocations: data
            .allocations
            .iter()
            .filter(|a| !bad_consumer.contains(&a.consumer))
            .cloned()
            .collect(),
    };
    (problems.into_iter().collect(), valid)
}
