//! The pure half of the workflow: a flavor's resources, the allocation-candidate
//! query a device profile becomes, and seed 003's weigher. No I/O.

use super::{Result, WorkflowError};
use crate::accelerator::Group;
use crate::placement::{AllocationRequest, Map, ProviderSummary};

/// Parses `RC:N,RC:N` (a flavor's resources; empty is no resources).
pub fn parse_resources(s: &str) -> Result<Vec<(String, u64)>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (rc, n) = p.split_once(':').ok_or_else(|| {
                WorkflowError::Invalid(format!("resource {p:?} is not RESOURCE_CLASS:AMOUNT"))
            })?;
            let n: u64 = n.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                WorkflowError::Invalid(format!("amount in {p:?} must be a positive integer"))
            })?;
            Ok((rc.trim().to_owned(), n))
        })
        .collect()
}

/// The request group suffix of profile group `n` (Nova's requester id
/// `device_profile_<n>`).
pub fn group_suffix(n: usize) -> String {
    format!("_device_profile_{n}")
}

/// How many candidates the weigher looks at.
const WEIGHED_CANDIDATES: usize = 100;

/// The `GET /allocation_candidates` query for the flavor resources and profile groups,
/// with `limit` for the workflow's pick.
pub(super) fn candidate_query(
    resources: &[(String, u64)],
    group_policy: &str,
    groups: &[Group],
) -> Result<Vec<(String, String)>> {
    let mut q = nova_query(resources, Some(group_policy), groups)?;
    // The first candidate is taken, unless the weigher has something to choose among.
    let limit = if wanted_functions(groups).is_empty() {
        1
    } else {
        WEIGHED_CANDIDATES
    };
    q.push(("limit".into(), limit.to_string()));
    Ok(q)
}

/// The allocation-candidates query Nova composes from a flavor's own resources (the
/// unsuffixed group), its `group_policy` and a device profile's groups, without
/// `limit` (nova/accelerator/cyborg.py `get_device_request_groups`, then
/// nova/scheduler/utils.py `ResourceRequest.to_querystring`): profile group N is the
/// granular group with suffix `_device_profile_N`; its `resources:RC` keys are
/// amounts, its `trait:T` keys `required` or `forbidden` (`!T`); other keys
/// (`accel:*`) are Cyborg's. As Nova writes it: classes and traits sorted within a
/// value (forbidden after required), zero amounts dropped, the pairs sorted. The
/// scheduler's own pre-filters (e.g. `!COMPUTE_STATUS_DISABLED`) are not added.
pub fn nova_query(
    resources: &[(String, u64)],
    group_policy: Option<&str>,
    groups: &[Group],
) -> Result<Vec<(String, String)>> {
    let mut q: Vec<(String, String)> = Vec::new();
    let list = |v: &[(String, u64)]| {
        let mut items: Vec<String> = v
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(rc, n)| format!("{rc}:{n}"))
            .collect();
        items.sort();
        items.join(",")
    };
    if resources.iter().any(|(_, n)| *n > 0) {
        q.push(("resources".into(), list(resources)));
    }
    for (n, g) in groups.iter().enumerate() {
        let mut resources = Vec::new();
        let mut required = Vec::new();
        let mut forbidden = Vec::new();
        for (k, v) in g {
            let v = v
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string());
            if let Some(rc) = k.strip_prefix("resources:") {
                let amount = v.trim().parse().map_err(|_| {
                    WorkflowError::Invalid(format!("group {n}: {k} is not an amount: {v}"))
                })?;
                resources.push((rc.to_owned(), amount));
            } else if let Some(t) = k.strip_prefix("trait:") {
                match v.as_str() {
                    "required" => required.push(t.to_owned()),
                    "forbidden" => forbidden.push(format!("!{t}")),
                    _ => {}
                }
            }
            // accel:* keys are Cyborg's, not Placement's (Nova ignores them too).
        }
        required.sort();
        forbidden.sort();
        required.extend(forbidden);
        let suffix = group_suffix(n);
        q.push((format!("resources{suffix}"), list(&resources)));
        if !required.is_empty() {
            q.push((format!("required{suffix}"), required.join(",")));
        }
    }
    if let Some(p) = group_policy {
        q.push(("group_policy".into(), p.to_owned()));
    }
    q.sort();
    Ok(q)
}

/// The function each profile group asks for (`accel:function_id`), by request group
/// suffix.
pub fn wanted_functions(groups: &[Group]) -> Vec<(String, String)> {
    groups
        .iter()
        .enumerate()
        .filter_map(|(n, g)| {
            let f = g.get("accel:function_id")?.as_str()?;
            Some((group_suffix(n), f.to_owned()))
        })
        .collect()
}

/// Seed 003's weigher: the index of the candidate whose request groups land on the
/// most providers that already carry the function their group asks for (their
/// `CUSTOM_FPGA_FUNCTION_*` trait in `summaries`, Placement's `provider_summaries`).
/// Otherwise equal candidates keep Placement's order: the earliest wins. This saves a
/// reprogramming (seconds of the bind, and the function other users of the region
/// rely on) whenever a programmed region is free.
pub fn weigh(
    candidates: &[AllocationRequest],
    summaries: &Map<ProviderSummary>,
    wanted: &[(String, String)],
) -> usize {
    let carries = |rp: &str, function: &str| {
        summaries.get(rp).is_some_and(|s| {
            let traits = s.traits.iter().flatten().map(String::as_str);
            accel_core::accelerator::carries_function(traits, function)
        })
    };
    let score = |c: &AllocationRequest| {
        wanted
            .iter()
            .filter(|(suffix, function)| {
                let rps = c.mapped(suffix);
                !rps.is_empty() && rps.iter().all(|rp| carries(rp, function))
            })
            .count()
    };
    let mut best = (0, 0);
    for (i, c) in candidates.iter().enumerate() {
        let s = score(c);
        if s > best.1 {
            best = (i, s);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn group(v: Value) -> Group {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn flavor_resources_parse() {
        assert_eq!(
            parse_resources("VCPU:2, MEMORY_MB:512").unwrap(),
            [("VCPU".to_owned(), 2), ("MEMORY_MB".to_owned(), 512)]
        );
        assert!(parse_resources("").unwrap().is_empty());
        assert!(parse_resources("VCPU").is_err());
        assert!(parse_resources("VCPU:0").is_err());
    }

    #[test]
    fn the_weigher_prefers_regions_that_carry_the_function_and_keeps_order_otherwise() {
        let f = "9926ab6d-6c92-5a68-aabc-a7d84c545738";
        let t = "CUSTOM_FPGA_FUNCTION_INTEL_9926AB6D6C925A68AABCA7D84C545738";
        let cand = |rp: &str| -> AllocationRequest {
            serde_json::from_value(
                json!({"allocations": {}, "mappings": {"_device_profile_0": [rp]}}),
            )
            .unwrap()
        };
        let candidates = [cand("a"), cand("b"), cand("c")];
        let summaries: Map<ProviderSummary> = serde_json::from_value(json!({
            "a": {"traits": ["CUSTOM_PROGRAMMABLE"]},
            "b": {"traits": ["CUSTOM_PROGRAMMABLE", t]},
            "c": {"traits": [t]},
        }))
        .unwrap();
        let wanted = wanted_functions(&[group(json!({"accel:function_id": f}))]);
        assert_eq!(wanted, [("_device_profile_0".to_owned(), f.to_owned())]);
        assert_eq!(weigh(&candidates, &summaries, &wanted), 1);
        assert_eq!(weigh(&candidates, &summaries, &[]), 0, "no wish: first");
        let none: Map<ProviderSummary> = serde_json::from_value(
            json!({"a": {"traits": []}, "b": {"traits": []}, "c": {"traits": []}}),
        )
        .unwrap();
        assert_eq!(weigh(&candidates, &none, &wanted), 0, "no match: first");
        assert_eq!(weigh(&[], &summaries, &wanted), 0);
    }

    #[test]
    fn profile_groups_become_suffixed_request_groups() {
        let groups = vec![
            group(
                json!({"resources:FPGA": "2", "trait:CUSTOM_A": "required", "trait:CUSTOM_B": "forbidden",
                   "accel:bitstream_id": "x"}),
            ),
            group(json!({"resources:PGPU": "1"})),
        ];
        let q = candidate_query(&[("VCPU".into(), 1)], "none", &groups).unwrap();
        let q: Vec<(&str, &str)> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            q,
            [
                ("group_policy", "none"),
                ("required_device_profile_0", "CUSTOM_A,!CUSTOM_B"),
                ("resources", "VCPU:1"),
                ("resources_device_profile_0", "FPGA:2"),
                ("resources_device_profile_1", "PGPU:1"),
                ("limit", "1"),
            ]
        );
        // Nova's order within a value too, and no group_policy unless the flavor has one.
        let groups = vec![group(
            json!({"trait:CUSTOM_Z": "required", "trait:CUSTOM_B": "forbidden",
                   "trait:CUSTOM_A": "required", "resources:PGPU": "1", "resources:FPGA": "1"}),
        )];
        let q = nova_query(&[("VCPU".into(), 2), ("DISK_GB".into(), 0)], None, &groups).unwrap();
        let q: Vec<(&str, &str)> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            q,
            [
                ("required_device_profile_0", "CUSTOM_A,CUSTOM_Z,!CUSTOM_B"),
                ("resources", "VCPU:2"),
                ("resources_device_profile_0", "FPGA:1,PGPU:1"),
            ]
        );
    }
}
