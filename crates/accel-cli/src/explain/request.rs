//! The query Placement accepted, as the engine's [`Request`]: names interned in the
//! estate's [`Catalog`] (a name no provider has gets an id of its own, which then
//! explains itself as `no_inventory` or a missing trait), aggregates and `in_tree` as
//! the snapshot's ids, `nested` from the microversion (below 1.29 a candidate lives in
//! one provider of a tree).

use accel_api::placement::candidate_query::CandidateQuery;
use accel_api::placement::{mv, Version};
use accel_core::candidates::{GroupPolicy, Request, RequestGroup, Snapshot};
use anyhow::bail;

use super::read::Catalog;

fn uuids(list: &[String]) -> Vec<uuid::Uuid> {
    list.iter()
        .filter_map(|a| uuid::Uuid::parse_str(a).ok())
        .collect()
}

/// AND of any-of lists of trait names, interned.
fn any_of(lists: &[Vec<String>], catalog: &mut Catalog) -> Vec<Vec<u32>> {
    lists
        .iter()
        .map(|any| any.iter().map(|t| catalog.trait_id(t)).collect())
        .collect()
}

/// The engine's form of `q` at `version`. An `in_tree` that names no provider is an
/// error: Placement answers such a query with no candidates and there is no tree to
/// blame.
pub fn to_request(
    q: &CandidateQuery,
    version: Version,
    snapshot: &Snapshot,
    catalog: &mut Catalog,
) -> anyhow::Result<Request> {
    let mut groups = Vec::with_capacity(q.groups.len());
    for g in &q.groups {
        let in_tree = match &g.in_tree {
            None => None,
            Some(u) => match uuid::Uuid::parse_str(u)
                .ok()
                .and_then(|u| snapshot.lookup(&u))
            {
                Some(id) => Some(id),
                None => bail!(
                    "in_tree{}={u} names no resource provider: Placement answers no candidates for any root",
                    g.suffix
                ),
            },
        };
        groups.push(RequestGroup {
            suffix: g.suffix.clone(),
            resources: g
                .resources
                .iter()
                .map(|(rc, n)| (catalog.class(rc), *n))
                .collect(),
            required: any_of(&g.required, catalog),
            forbidden: g.forbidden.iter().map(|t| catalog.trait_id(t)).collect(),
            member_of: g.member_of.iter().map(|any| uuids(any)).collect(),
            forbidden_aggregates: uuids(&g.forbidden_aggregates),
            in_tree,
        });
    }
    let root_required = any_of(&q.root_required, catalog);
    Ok(Request {
        groups,
        group_policy: match q.group_policy.as_deref() {
            Some("isolate") => GroupPolicy::Isolate,
            _ => GroupPolicy::None,
        },
        same_subtree: q.same_subtree.clone(),
        root_required,
        root_forbidden: q
            .root_forbidden
            .iter()
            .map(|t| catalog.trait_id(t))
            .collect(),
        limit: None,
        nested: version.at_least(mv::NESTED_CANDIDATES),
        randomize: None,
    })
}
