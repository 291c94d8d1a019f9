//! A `GET /allocation_candidates` query string read back into its request groups, as
//! nova-scheduler logs it and `accel explain` takes it.
//!
//! Lenient on purpose: the query is sent to Placement as it is first, and Placement's
//! validation (microversion gates, unknown names, orphaned groups, conflicting traits)
//! is the one that counts; this parser only has to understand a query Placement has
//! accepted. So it never rejects a key it does not know (Placement would have), merges
//! repeated keys as Placement reads them (`required` and `member_of` AND together,
//! `resources` keeps the last amount per class), and accepts every syntax up to 1.39
//! whatever the microversion: `in:` any-of traits and aggregates, `!` forbidden traits
//! and aggregates, string suffixes, `same_subtree`, `root_required`.

/// One request group: the unsuffixed one (`suffix == ""`) or a granular one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryGroup {
    /// What follows the parameter name: `""`, `"1"`, `"_device_profile_0"`.
    pub suffix: String,
    pub resources: Vec<(String, i64)>,
    /// AND of any-of lists of traits.
    pub required: Vec<Vec<String>>,
    pub forbidden: Vec<String>,
    /// AND of any-of lists of aggregate uuids.
    pub member_of: Vec<Vec<String>>,
    pub forbidden_aggregates: Vec<String>,
    pub in_tree: Option<String>,
}

/// The whole query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CandidateQuery {
    /// In order of first appearance.
    pub groups: Vec<QueryGroup>,
    pub group_policy: Option<String>,
    pub same_subtree: Vec<Vec<String>>,
    /// AND of any-of lists the root must carry.
    pub root_required: Vec<Vec<String>>,
    pub root_forbidden: Vec<String>,
    pub limit: Option<usize>,
}

const GROUP_PARAMS: [&str; 4] = ["resources", "required", "member_of", "in_tree"];

/// The decoded `key=value` pairs of a query string. A leading `?`, or everything up
/// to the `?` of a whole URL, is skipped, so a line copied from a log works as it is.
pub fn pairs(query: &str) -> Vec<(String, String)> {
    let q = query.trim();
    let q = q.split_once('?').map_or(q, |(_, rest)| rest);
    reqwest::Url::parse(&format!("http://q/?{q}"))
        .map(|u| {
            u.query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// `A,!B,in:C,D` style lists: `(any-of lists, forbidden)`. `in:` makes the whole value
/// one any-of list (1.39); otherwise each name is a list of its own.
fn trait_lists(value: &str) -> (Vec<Vec<String>>, Vec<String>) {
    let names = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    };
    if let Some(any) = value.trim().strip_prefix("in:") {
        return (vec![names(any)], Vec::new());
    }
    let mut required = Vec::new();
    let mut forbidden = Vec::new();
    for t in names(value) {
        match t.strip_prefix('!') {
            Some(f) => forbidden.push(f.to_owned()),
            None => required.push(vec![t]),
        }
    }
    (required, forbidden)
}

/// Parses the pairs of [`pairs`]. The only error is an amount that is not an integer
/// (which Placement would not have accepted either).
pub fn parse(pairs: &[(String, String)]) -> Result<CandidateQuery, String> {
    let mut q = CandidateQuery::default();
    for (key, value) in pairs {
        match key.as_str() {
            "group_policy" => q.group_policy = Some(value.trim().to_owned()),
            "limit" => q.limit = value.trim().parse().ok(),
            "same_subtree" => q.same_subtree.push(
                value
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
            "root_required" => {
                let (req, forb) = trait_lists(value);
                q.root_required.extend(req);
                q.root_forbidden.extend(forb);
            }
            _ => {
                let Some((param, suffix)) = GROUP_PARAMS
                    .iter()
                    .find_map(|p| key.strip_prefix(p).map(|s| (*p, s)))
                else {
                    continue;
                };
                let g = match q.groups.iter().position(|g| g.suffix == suffix) {
                    Some(i) => &mut q.groups[i],
                    None => {
                        q.groups.push(QueryGroup {
                            suffix: suffix.to_owned(),
                            ..QueryGroup::default()
                        });
                        q.groups.last_mut().expect("just pushed")
                    }
                };
                group_param(g, param, key, value)?;
            }
        }
    }
    Ok(q)
}

fn group_param(g: &mut QueryGroup, param: &str, key: &str, value: &str) -> Result<(), String> {
    match param {
        "resources" => {
            for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (rc, n) = item
                    .split_once(':')
                    .ok_or_else(|| format!("{key}: {item:?} is not CLASS:AMOUNT"))?;
                let n: i64 = n
                    .trim()
                    .parse()
                    .map_err(|_| format!("{key}: {item:?}: the amount is not an integer"))?;
                let rc = rc.trim().to_owned();
                g.resources.retain(|(c, _)| *c != rc);
                g.resources.push((rc, n));
            }
        }
        "required" => {
            let (req, forb) = trait_lists(value);
            g.required.extend(req);
            g.forbidden.extend(forb);
        }
        "member_of" => {
            let v = value.trim();
            let (forbidden, v) = match v.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, v),
            };
            let v = v.strip_prefix("in:").unwrap_or(v);
            let uuids: Vec<String> = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if forbidden {
                g.forbidden_aggregates.extend(uuids);
            } else {
                g.member_of.push(uuids);
            }
        }
        _ => g.in_tree = Some(value.trim().to_owned()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn the_issue_example_and_every_syntax() {
        let p = pairs(
            "resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_FPGA_INTEL&group_policy=isolate",
        );
        let q = parse(&p).unwrap();
        assert_eq!(q.group_policy.as_deref(), Some("isolate"));
        assert_eq!(q.groups.len(), 2);
        assert_eq!(q.groups[0].suffix, "");
        assert_eq!(q.groups[0].resources, [("VCPU".to_owned(), 1)]);
        assert_eq!(q.groups[1].suffix, "1");
        assert_eq!(q.groups[1].required, [s(&["CUSTOM_FPGA_INTEL"])]);

        let q = parse(&pairs(
            "http://placement/allocation_candidates?resources_A=FPGA:2,FPGA:3&required_A=in:T1,T2\
             &required_A=T3,!T4&member_of_A=in:a1,a2&member_of_A=!in:a3,a4&member_of_A=!a5\
             &in_tree_A=tree&root_required=R1,!R2&same_subtree=_A,_B&required_B=T5&limit=3",
        ))
        .unwrap();
        let a = &q.groups[0];
        assert_eq!(a.suffix, "_A");
        assert_eq!(a.resources, [("FPGA".to_owned(), 3)], "last amount wins");
        assert_eq!(a.required, [s(&["T1", "T2"]), s(&["T3"])]);
        assert_eq!(a.forbidden, s(&["T4"]));
        assert_eq!(a.member_of, [s(&["a1", "a2"])]);
        assert_eq!(a.forbidden_aggregates, s(&["a3", "a4", "a5"]));
        assert_eq!(a.in_tree.as_deref(), Some("tree"));
        assert_eq!(q.groups[1].suffix, "_B");
        assert!(q.groups[1].resources.is_empty(), "resourceless");
        assert_eq!(q.root_required, [s(&["R1"])]);
        assert_eq!(q.root_forbidden, s(&["R2"]));
        assert_eq!(q.same_subtree, [s(&["_A", "_B"])]);
        assert_eq!(q.limit, Some(3));
    }

    #[test]
    fn percent_encoding_is_decoded_and_bad_amounts_are_errors() {
        let q = parse(&pairs("?resources=VCPU%3A2%2CMEMORY_MB%3A64")).unwrap();
        assert_eq!(
            q.groups[0].resources,
            [("VCPU".to_owned(), 2), ("MEMORY_MB".to_owned(), 64)]
        );
        assert!(parse(&pairs("resources=VCPU:x")).is_err());
        assert!(parse(&pairs("resources=VCPU")).is_err());
        assert!(parse(&pairs("unknown=1")).unwrap().groups.is_empty());
    }
}
