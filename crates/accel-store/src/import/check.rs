//! The consistency checks an import makes before it writes anything.
//!
//! Upstream's schema enforces little (most references have no foreign key, names and
//! generations are nullable), and a database that lived through years of bugs and
//! hand repairs can hold rows accel's invariants forbid. The line drawn (issue 42):
//! - what upstream's own API can produce is imported as it stands. A provider whose
//!   usage is above its capacity is one (upstream, and accel, accept an inventory
//!   change that lowers `allocation_ratio` or raises `reserved` below the usage, and
//!   only log it), so it is an [`OverCapacity`] warning, never a refusal: the
//!   consumers keep every allocation and the scheduler hands out nothing they hold;
//! - what upstream's API could never produce (an allocation on a missing provider, a
//!   consumer naming a missing project or user, a parent loop...) is a [`Problem`]
//!   named by the provider or consumer uuid it belongs to. The import refuses when
//!   there is any; with `--skip-invalid` it leaves out what the problem touches and
//!   lists it: a bad provider takes its subtree with it (inventories, traits,
//!   aggregate links, and the consumers allocated there), a bad consumer all its
//!   allocations. A consumer is imported whole or left out whole, never in part: its
//!   allocations are one unit to Placement.
//!
//! Nothing is repaired or changed silently.

use super::{ConsumerRow, PlacementData, ProviderRow};
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

/// A provider whose usage of a class is above its capacity: imported as it stands,
/// and said.
#[derive(Debug, Clone, PartialEq)]
pub struct OverCapacity {
    pub provider: String,
    pub class: String,
    pub usage: i64,
    pub capacity: i64,
    pub total: i64,
    pub reserved: i64,
    pub allocation_ratio: f64,
}

impl std::fmt::Display for OverCapacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "provider {}: usage of {} is {}, over its capacity {} ((total {} - reserved {}) * \
             allocation_ratio {}); imported as it stands (upstream allows it after a lowered \
             allocation_ratio or a raised reserved), nothing more fits there until usage drops",
            self.provider,
            self.class,
            self.usage,
            self.capacity,
            self.total,
            self.reserved,
            self.allocation_ratio
        )
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checked {
    /// Rows upstream's API could never have produced: the import refuses them.
    pub problems: Vec<Problem>,
    /// States upstream's API produces that deserve the operator's eye: imported.
    pub warnings: Vec<OverCapacity>,
    /// The rows free of problems (all of the data when there is none).
    pub valid: PlacementData,
    /// Each consumer `valid` leaves out, with every allocation it holds in the source
    /// (`consumer <uuid>: 2 VCPU on <provider uuid>, ...`): what `--skip-invalid` would
    /// not carry over, whole.
    pub left_out: Vec<String>,
}

fn provider(uuid: &str) -> String {
    format!("provider {uuid}")
}

fn consumer(uuid: &str) -> String {
    format!("consumer {uuid}")
}

/// Checks `data`: its problems, its warnings, and the rows free of problems.
pub fn check(data: &PlacementData) -> Checked {
    let mut c = Checker::new(data);
    c.providers();
    c.orphans();
    let inventories = c.inventories();
    c.consumers();
    c.allocations();
    let warnings = c.over_capacity();
    let aggregates: HashSet<i64> = data.aggregates.iter().map(|n| n.id).collect();
    let traits: HashSet<i64> = data.traits.iter().map(|n| n.id).collect();
    let provider_aggregates = c.links(&data.provider_aggregates, &aggregates, "aggregate");
    let provider_traits = c.links(&data.provider_traits, &traits, "trait");
    let valid = PlacementData {
        classes: data.classes.clone(),
        traits: data.traits.clone(),
        providers: (data.providers.iter())
            .filter(|p| !c.bad_rp.contains(&p.id))
            .cloned()
            .collect(),
        inventories,
        aggregates: data.aggregates.clone(),
        provider_aggregates,
        provider_traits,
        projects: data.projects.clone(),
        users: data.users.clone(),
        consumer_types: data.consumer_types.clone(),
        consumers: (data.consumers.iter())
            .filter(|x| !c.bad_consumer.contains(&x.uuid))
            .cloned()
            .collect(),
        allocations: (data.allocations.iter())
            .filter(|a| !c.bad_consumer.contains(&a.consumer))
            .cloned()
            .collect(),
    };
    let left_out = c.left_out();
    Checked {
        problems: c.problems.into_iter().collect(),
        warnings,
        valid,
        left_out,
    }
}

/// The check's working state: the source's rows by id and what was found bad so far.
struct Checker<'a> {
    data: &'a PlacementData,
    by_id: HashMap<i64, &'a ProviderRow>,
    class_names: HashMap<i64, &'a str>,
    limits: HashMap<(i64, i64), Limits>,
    problems: BTreeSet<Problem>,
    bad_rp: HashSet<i64>,
    bad_consumer: HashSet<String>,
}

impl<'a> Checker<'a> {
    fn new(data: &'a PlacementData) -> Self {
        Checker {
            data,
            by_id: data.providers.iter().map(|p| (p.id, p)).collect(),
            class_names: (data.classes.iter())
                .map(|c| (c.id, c.name.as_str()))
                .collect(),
            limits: HashMap::new(),
            problems: BTreeSet::new(),
            bad_rp: HashSet::new(),
            bad_consumer: HashSet::new(),
        }
    }

    fn bad_provider(&mut self, id: i64, message: String) {
        self.bad_rp.insert(id);
        self.problems.insert(Problem {
            subject: provider(&self.by_id[&id].uuid),
            message,
        });
    }

    fn refuse_consumer(&mut self, uuid: &str, message: String) {
        self.bad_consumer.insert(uuid.to_owned());
        self.problems.insert(Problem {
            subject: consumer(uuid),
            message,
        });
    }

    /// Providers: names, generations, parents, roots, loops.
    fn providers(&mut self) {
        for p in &self.data.providers {
            if p.name.is_none() {
                self.bad_provider(p.id, "has no name".into());
            }
            if p.generation.is_none() {
                self.bad_provider(p.id, "has no generation".into());
            }
            if let Some(parent) = p.parent_id.filter(|x| !self.by_id.contains_key(x)) {
                self.bad_provider(p.id, format!("parent provider id {parent} does not exist"));
                continue;
            }
            let Some(top) = self.top_of(p) else { continue };
            if p.root_id != Some(top) {
                let root = (p.root_id.and_then(|r| self.by_id.get(&r)))
                    .map_or_else(|| format!("{:?}", p.root_id), |r| r.uuid.clone());
                let m = format!(
                    "root provider is {root} but its parents lead to {}",
                    self.by_id[&top].uuid
                );
                self.bad_provider(p.id, m);
            }
        }
    }

    /// The provider `p`'s parents lead to, or `None` (and a problem) for a loop: a
    /// loop revisits a provider before reaching a root.
    fn top_of(&mut self, p: &ProviderRow) -> Option<i64> {
        let mut seen = vec![p.id];
        let mut at = p;
        loop {
            match at.parent_id.and_then(|x| self.by_id.get(&x).copied()) {
                None => return Some(at.id),
                Some(up) if seen.contains(&up.id) => {
                    let chain: Vec<&str> = (seen.iter().chain(std::iter::once(&up.id)))
                        .map(|id| self.by_id[id].uuid.as_str())
                        .collect();
                    let m = format!("parent loop: {}", chain.join(" -> "));
                    self.bad_provider(p.id, m);
                    return None;
                }
                Some(up) => {
                    seen.push(up.id);
                    at = up;
                }
            }
        }
    }

    /// A skipped provider takes its descendants with it.
    fn orphans(&mut self) {
        loop {
            let more: Vec<(i64, i64)> = (self.data.providers.iter())
                .filter(|p| !self.bad_rp.contains(&p.id))
                .filter_map(|p| {
                    (p.parent_id.filter(|x| self.bad_rp.contains(x))).map(|x| (p.id, x))
                })
                .collect();
            if more.is_empty() {
                return;
            }
            for (id, parent) in more {
                let m = format!(
                    "its parent provider {} is invalid",
                    self.by_id[&parent].uuid
                );
                self.bad_provider(id, m);
            }
        }
    }

    /// The inventories of valid providers in known classes (their limits kept for the
    /// capacity warnings).
    fn inventories(&mut self) -> Vec<super::InventoryRow> {
        let mut kept = Vec::new();
        for inv in &self.data.inventories {
            let Some(p) = self.by_id.get(&inv.provider_id) else {
                self.problems.insert(Problem {
                    subject: format!("inventories of provider id {}", inv.provider_id),
                    message: "the provider does not exist".into(),
                });
                continue;
            };
            if self.bad_rp.contains(&p.id) {
                continue;
            }
            if !self.class_names.contains_key(&inv.class_id) {
                self.problems.insert(Problem {
                    subject: provider(&p.uuid),
                    message: format!("inventory of unknown resource class id {}", inv.class_id),
                });
                continue;
            }
            self.limits
                .insert((inv.provider_id, inv.class_id), limits_of(inv));
            kept.push(inv.clone());
        }
        kept
    }

    /// Consumers naming a project, user or consumer type that does not exist.
    fn consumers(&mut self) {
        let ids = |rows: &[super::Named]| -> HashSet<i64> { rows.iter().map(|n| n.id).collect() };
        let projects = ids(&self.data.projects);
        let users = ids(&self.data.users);
        let types = ids(&self.data.consumer_types);
        for c in &self.data.consumers {
            if !projects.contains(&c.project_id) {
                self.refuse_consumer(
                    &c.uuid,
                    format!("project id {} does not exist", c.project_id),
                );
            }
            if !users.contains(&c.user_id) {
                self.refuse_consumer(&c.uuid, format!("user id {} does not exist", c.user_id));
            }
            if let Some(t) = c.type_id.filter(|t| !types.contains(t)) {
                self.refuse_consumer(&c.uuid, format!("consumer type id {t} does not exist"));
            }
        }
    }

    /// Allocations: of a known consumer, on an existing valid provider, of a class
    /// that provider has inventory of. One bad allocation leaves its consumer out.
    fn allocations(&mut self) {
        let consumers: HashMap<&str, &ConsumerRow> = (self.data.consumers.iter())
            .map(|c| (c.uuid.as_str(), c))
            .collect();
        for a in &self.data.allocations {
            let m = if !consumers.contains_key(a.consumer.as_str()) {
                Some("has allocations but no consumer record".to_owned())
            } else {
                self.allocation_problem(a.provider_id, a.class_id)
            };
            if let Some(m) = m {
                self.refuse_consumer(&a.consumer, m);
            }
        }
    }

    fn allocation_problem(&self, provider_id: i64, class_id: i64) -> Option<String> {
        let Some(p) = self.by_id.get(&provider_id) else {
            return Some(format!("allocation on missing provider id {provider_id}"));
        };
        match self.class_names.get(&class_id).copied() {
            None => Some(format!(
                "allocation of unknown resource class id {class_id}"
            )),
            Some(_) if self.bad_rp.contains(&p.id) => {
                Some(format!("allocation on invalid provider {}", p.uuid))
            }
            Some(name) if !self.limits.contains_key(&(provider_id, class_id)) => Some(format!(
                "allocation of {name} on provider {}, which has no {name} inventory",
                p.uuid
            )),
            Some(_) => None,
        }
    }

    /// Usage above capacity, of the consumers imported: a warning per provider and
    /// class, nothing left out.
    fn over_capacity(&self) -> Vec<OverCapacity> {
        let mut usage: BTreeMap<(i64, i64), i64> = BTreeMap::new();
        for a in (self.data.allocations.iter()).filter(|a| !self.bad_consumer.contains(&a.consumer))
        {
            *usage.entry((a.provider_id, a.class_id)).or_default() += a.used;
        }
        let mut out: Vec<OverCapacity> = (usage.iter())
            .filter_map(|(key, used)| {
                let l = &self.limits[key];
                (*used > l.capacity()).then(|| OverCapacity {
                    provider: self.by_id[&key.0].uuid.clone(),
                    class: self.class_names[&key.1].to_owned(),
                    usage: *used,
                    capacity: l.capacity(),
                    total: l.total,
                    reserved: l.reserved,
                    allocation_ratio: l.allocation_ratio,
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.provider, &a.class).cmp(&(&b.provider, &b.class)));
        out
    }

    /// The consumers left out, each with all its allocations in the source.
    fn left_out(&self) -> Vec<String> {
        let mut held: BTreeMap<&str, Vec<String>> = (self.bad_consumer.iter())
            .map(|c| (c.as_str(), Vec::new()))
            .collect();
        for a in &self.data.allocations {
            let Some(list) = held.get_mut(a.consumer.as_str()) else {
                continue;
            };
            let class = (self.class_names.get(&a.class_id).map(|n| n.to_string()))
                .unwrap_or_else(|| format!("class id {}", a.class_id));
            let on = (self.by_id.get(&a.provider_id).map(|p| p.uuid.clone()))
                .unwrap_or_else(|| format!("provider id {}", a.provider_id));
            list.push(format!("{} {class} on {on}", a.used));
        }
        (held.into_iter())
            .map(|(c, list)| match list.is_empty() {
                true => format!("consumer {c}: no allocation"),
                false => format!("consumer {c}: {}", list.join(", ")),
            })
            .collect()
    }

    /// Aggregate and trait links of valid providers to existing rows.
    fn links(&mut self, pairs: &[(i64, i64)], known: &HashSet<i64>, what: &str) -> Vec<(i64, i64)> {
        let mut kept = Vec::new();
        for &(rp, other) in pairs {
            match self.by_id.get(&rp) {
                None => {
                    self.problems.insert(Problem {
                        subject: format!("{what} links of provider id {rp}"),
                        message: "the provider does not exist".into(),
                    });
                }
                Some(_) if self.bad_rp.contains(&rp) => {}
                Some(p) if !known.contains(&other) => {
                    self.problems.insert(Problem {
                        subject: provider(&p.uuid),
                        message: format!("{what} id {other} does not exist"),
                    });
                }
                Some(_) => kept.push((rp, other)),
            }
        }
        kept
    }
}

fn limits_of(inv: &super::InventoryRow) -> Limits {
    Limits {
        total: inv.total,
        reserved: inv.reserved,
        min_unit: inv.min_unit,
        max_unit: inv.max_unit,
        step_size: inv.step_size,
        allocation_ratio: inv.allocation_ratio,
    }
}
