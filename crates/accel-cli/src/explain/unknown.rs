//! A query naming a trait Placement does not know, explained (issue 31 item 7).
//!
//! Placement answers such a query `400 No such trait(s)` (required and forbidden
//! alike, and in `root_required`), so there is no candidate anywhere. The engine
//! cannot say that: to it an unknown trait is one no provider happens to carry. So
//! when Placement answers 400, the query's traits are checked against `GET /traits`;
//! if some are unknown, every root gets the reason `unknown_trait` per such trait
//! (no such trait, so no provider can have it) instead of the command failing with
//! the raw 400. Any other 400 stays the command's error.

use std::collections::BTreeSet;

use accel_api::placement::candidate_query::CandidateQuery;
use accel_api::placement::explain::{Explained, ExplainedReason};
use accel_api::placement::{self, Version};

/// Every trait the query names, with the group it is in (`None`: `root_required`).
fn query_traits(q: &CandidateQuery) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for g in &q.groups {
        for t in g.required.iter().flatten().chain(&g.forbidden) {
            out.push((Some(g.suffix.clone()), t.clone()));
        }
    }
    for t in q.root_required.iter().flatten().chain(&q.root_forbidden) {
        out.push((None, t.clone()));
    }
    out
}

/// The traits of `q` that Placement does not know, with their groups, in query order.
pub async fn unknown_traits(
    client: &placement::Client,
    version: Version,
    q: &CandidateQuery,
) -> Result<Vec<(Option<String>, String)>, accel_api::http::Error> {
    let named = query_traits(q);
    if named.is_empty() {
        return Ok(Vec::new());
    }
    let known: BTreeSet<String> = client.traits(version).await?.into_iter().collect();
    let mut seen = BTreeSet::new();
    Ok(named
        .into_iter()
        .filter(|(g, t)| !known.contains(t) && seen.insert((g.clone(), t.clone())))
        .collect())
}

/// `out` with no root fitting and, on each, one `unknown_trait` reason per trait.
pub fn explained(mut out: Explained, unknown: &[(Option<String>, String)]) -> Explained {
    out.candidates = 0;
    for root in &mut out.roots {
        root.fits = false;
        root.reasons = unknown
            .iter()
            .map(|(group, t)| ExplainedReason {
                code: "unknown_trait".into(),
                group: group.clone(),
                provider: None,
                provider_name: None,
                resource_class: None,
                trait_name: Some(t.clone()),
                detail: format!(
                    "no such trait {t}: no provider can have it (Placement refuses the query with 400)"
                ),
            })
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_api::placement::candidate_query;
    use accel_api::placement::explain::ExplainedRoot;

    #[test]
    fn every_trait_of_the_query_is_found_with_its_group() {
        let q = candidate_query::parse(&candidate_query::pairs(
            "resources1=FPGA:1&required1=CUSTOM_A,!CUSTOM_B&root_required=in:CUSTOM_C,CUSTOM_D",
        ))
        .unwrap();
        assert_eq!(
            query_traits(&q),
            [
                (Some("1".to_owned()), "CUSTOM_A".to_owned()),
                (Some("1".to_owned()), "CUSTOM_B".to_owned()),
                (None, "CUSTOM_C".to_owned()),
                (None, "CUSTOM_D".to_owned()),
            ]
        );
    }

    #[test]
    fn no_root_fits_and_each_says_which_trait() {
        let out = Explained {
            candidates: 3,
            roots: vec![ExplainedRoot {
                uuid: "u".into(),
                name: "compute1".into(),
                fits: true,
                reasons: vec![],
            }],
        };
        let e = explained(out, &[(Some("1".into()), "CUSTOM_NOPE".into())]);
        assert_eq!(e.candidates, 0);
        assert!(!e.roots[0].fits);
        assert_eq!(e.roots[0].reasons[0].code, "unknown_trait");
        assert_eq!(
            e.roots[0].reasons[0].trait_name.as_deref(),
            Some("CUSTOM_NOPE")
        );
    }
}
