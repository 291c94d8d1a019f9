//! `accel explain`: "no valid host", explained. For an allocation-candidates query (as
//! nova-scheduler logs it, or composed from a device profile and a flavor's resources
//! as Nova composes it) it prints, for every root provider, whether Placement's answer
//! has a candidate in its tree and, when not, the engine's reasons.
//!
//! Shaped as a client of the standard Placement API only (accel-api and accel-core,
//! no store, no server), so it is part of the compute-node build and works against
//! upstream Placement 1.39 as well as accel:
//!
//! ```text
//! GET /allocation_candidates?QUERY     Placement's answer (no limit): its 400 is the
//!                                      command's error; its count is `candidates`;
//!                                      the roots of its allocation requests are the
//!                                      roots that fit
//! GET /resource_providers, per provider inventories, usages, traits, aggregates
//!      ─▶ Snapshot (read.rs) ─▶ Request (request.rs) ─▶ accel_core explain
//! ```
//!
//! The two reads are not one transaction. When the engine's verdict on some root
//! differs from Placement's answer, the data changed in between (or the engine and
//! that Placement disagree): everything is read again once; if they still differ, the
//! explanation is printed, the roots in dispute are named on stderr and the exit
//! status is 2. A `fits` printed with exit status 0 is Placement's own.

mod read;
mod request;
mod unknown;

use std::collections::{BTreeSet, HashMap};

use accel_api::accelerator;
use accel_api::http::{self as wire, Http};
use accel_api::placement::candidate_query::{self, CandidateQuery};
use accel_api::placement::explain::{Explained, ExplainedReason};
use accel_api::placement::{self, mv, Version};
use accel_api::workflow;
use accel_core::candidates::explain::{explain, ExplainOptions};
use anyhow::{bail, Context};
use serde_json::Value;

use crate::client::http::failed;
use crate::client::Format;

/// `accel explain`.
#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The allocation-candidates query string, as nova-scheduler logs it (a leading
    /// `?` or the whole URL is fine); instead of --device-profile/--resources.
    #[arg(conflicts_with_all = ["device_profile", "resources", "group_policy"])]
    pub query: Option<String>,
    /// Placement (and, for --device-profile, the accelerator API) as `boot` has them.
    #[command(flatten)]
    pub urls: crate::boot::Urls,
    /// Placement microversion of the query (below 1.29 a candidate lives in one
    /// provider of a tree).
    #[arg(long, default_value = "1.39")]
    pub microversion: String,
    /// Compose the query from this device profile (a flavor's `accel:device_profile`).
    #[arg(long)]
    pub device_profile: Option<String>,
    /// The flavor's own resources, `RC=N,...` (e.g. `VCPU=2,MEMORY_MB=2048`).
    #[arg(long)]
    pub resources: Option<String>,
    /// The flavor's `group_policy` (none or isolate); unset, the query has none, as
    /// Nova's.
    #[arg(long)]
    pub group_policy: Option<String>,
    /// Explain only this root provider (a name or uuid of any provider of its tree);
    /// only its tree and the sharing providers are read. `candidates` still counts
    /// Placement's whole answer.
    #[arg(long)]
    pub root: Option<String>,
    /// Output format.
    #[arg(short = 'f', long = "format", value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `accel explain` and exits: 0 explained, 1 an error (Placement's 400 included),
/// 2 the engine and Placement still disagreed after a second read.
pub fn run(args: ExplainArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match rt.block_on(explained(&args)) {
        Ok((out, disputed)) => {
            println!("{out}");
            if !disputed.is_empty() {
                eprintln!(
                    "accel: Placement's answer and the providers read do not agree on {} (the data changed between the reads twice, or the engine differs from this Placement)",
                    disputed.join(", ")
                );
                std::process::exit(2);
            }
            Ok(())
        }
        Err(e) => crate::client::fail(&e, &args.urls.apis()),
    }
}

/// The query's decoded pairs: given, or composed as Nova does.
async fn query_pairs(args: &ExplainArgs) -> anyhow::Result<Vec<(String, String)>> {
    if let Some(q) = &args.query {
        return Ok(candidate_query::pairs(q));
    }
    if args.device_profile.is_none() && args.resources.is_none() {
        bail!("give a QUERY, or --device-profile and/or --resources to compose one");
    }
    // `RC=N` like the other commands' options; `RC:N` as Placement writes it.
    let resources =
        workflow::parse_resources(&args.resources.clone().unwrap_or_default().replace('=', ":"))?;
    let groups = match &args.device_profile {
        None => Vec::new(),
        Some(name) => {
            let client = accelerator::Client::new(Http::with_token(
                &args.urls.accelerator_url,
                &args.urls.token,
            )?);
            let profiles = client.profiles(Some(name)).await.map_err(failed)?;
            let [profile] = profiles.as_slice() else {
                bail!(
                    "expected one device profile named {name:?}, found {}",
                    profiles.len()
                );
            };
            profile.groups.clone()
        }
    };
    Ok(workflow::nova_query(
        &resources,
        args.group_policy.as_deref(),
        &groups,
    )?)
}

/// Placement's answer: how many candidates, and the uuids of the providers they
/// allocate from or map a group to (list form before 1.12, `mappings` from 1.34).
async fn placement_answer(
    client: &placement::Client,
    version: Version,
    pairs: &[(String, String)],
) -> Result<(usize, BTreeSet<String>), wire::Error> {
    let mut req = wire::Request::get("/allocation_candidates").microversion(version.header());
    for (k, v) in pairs {
        req = req.query(k, v.clone());
    }
    let answer: Value = client.http().call(&req).await?;
    let requests = answer["allocation_requests"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut providers = BTreeSet::new();
    for r in &requests {
        match &r["allocations"] {
            Value::Object(m) => providers.extend(m.keys().cloned()),
            Value::Array(l) => providers.extend(
                l.iter()
                    .filter_map(|a| a["resource_provider"]["uuid"].as_str())
                    .map(str::to_owned),
            ),
            _ => {}
        }
        if let Some(m) = r["mappings"].as_object() {
            for rps in m.values() {
                providers.extend(
                    rps.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(str::to_owned),
                );
            }
        }
    }
    Ok((requests.len(), providers))
}

/// One read of everything and its explanation; the names of the roots whose `fits`
/// Placement's answer contradicts.
async fn attempt(
    client: &placement::Client,
    version: Version,
    pairs: &[(String, String)],
    query: &CandidateQuery,
    root: Option<&str>,
) -> anyhow::Result<(Explained, Vec<String>)> {
    let (count, providers, unknown) = match placement_answer(client, version, pairs).await {
        Ok((count, providers)) => (count, providers, Vec::new()),
        // Placement's 400 for a trait it does not know is explained, not passed on.
        Err(e) if e.status() == Some(400) => {
            let unknown = unknown::unknown_traits(client, version, query)
                .await
                .map_err(failed)?;
            if unknown.is_empty() {
                return Err(failed(e));
            }
            (0, BTreeSet::new(), unknown)
        }
        Err(e) => return Err(failed(e)),
    };
    let mut estate = read::read(client, root).await?;
    let request = request::to_request(query, version, &estate.snapshot, &mut estate.catalog)?;
    let options = ExplainOptions {
        only_root: estate.only_root,
        ..ExplainOptions::default()
    };
    let explanation = explain(&estate.snapshot, &request, &estate.catalog, &options);
    let out = Explained::from_core(count, &explanation, &estate.snapshot, &estate.catalog);
    if !unknown.is_empty() {
        return Ok((unknown::explained(out, &unknown), Vec::new()));
    }
    let disputed = disputed(&out, &providers, &estate.root_of);
    Ok((out, disputed))
}

/// The roots (`name (uuid)`) whose `fits` is not "Placement's answer uses a provider
/// of this tree", given the providers the answer uses and every provider's root.
fn disputed(
    out: &Explained,
    providers: &BTreeSet<String>,
    root_of: &HashMap<String, String>,
) -> Vec<String> {
    let fitting: BTreeSet<&str> = providers
        .iter()
        .map(|p| root_of.get(p).map_or(p.as_str(), String::as_str))
        .collect();
    out.roots
        .iter()
        .filter(|r| r.fits != fitting.contains(r.uuid.as_str()))
        .map(|r| format!("{} ({})", r.name, r.uuid))
        .collect()
}

async fn explained(args: &ExplainArgs) -> anyhow::Result<(String, Vec<String>)> {
    let version = mv::parse(&args.microversion).map_err(|e| {
        let (mv::VersionError::Malformed(why) | mv::VersionError::Unacceptable(why)) = e;
        anyhow::anyhow!("--microversion {}: {why}", args.microversion)
    })?;
    let mut pairs = query_pairs(args).await?;
    // Every root is explained, so Placement is asked for every candidate.
    pairs.retain(|(k, _)| k != "limit");
    let query = candidate_query::parse(&pairs).map_err(anyhow::Error::msg)?;
    let client = placement::Client::new(
        Http::with_token(
            args.urls.placement_url.trim_end_matches('/'),
            &args.urls.token,
        )
        .context("--placement-url")?,
    );
    let root = args.root.as_deref();
    let (mut out, mut disputed) = attempt(&client, version, &pairs, &query, root).await?;
    if !disputed.is_empty() {
        (out, disputed) = attempt(&client, version, &pairs, &query, root).await?;
    }
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&out)?,
        Format::Table => table(&out, &pairs),
    };
    Ok((text, disputed))
}

/// One line per root (name, uuid, fits), one indented line per reason (code, group,
/// the provider's name, detail), under a line with the count and the query as sent.
fn table(e: &Explained, pairs: &[(String, String)]) -> String {
    let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut lines = vec![format!(
        "{} candidate(s) for {}",
        e.candidates,
        query.join("&")
    )];
    let name_w = e
        .roots
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0);
    for r in &e.roots {
        lines.push(format!(
            "{:<name_w$}  {}  {}",
            r.name,
            r.uuid,
            if r.fits { "fits" } else { "does not fit" }
        ));
        let group = |g: Option<&str>| match g {
            None => "-".to_owned(),
            Some("") => "(unsuffixed)".to_owned(),
            Some(s) => s.to_owned(),
        };
        let code_w = r.reasons.iter().map(|x| x.code.len()).max().unwrap_or(0);
        let group_w = r
            .reasons
            .iter()
            .map(|x| group(x.group.as_deref()).chars().count())
            .max()
            .unwrap_or(0);
        let provider = |x: &ExplainedReason| x.provider_name.clone().unwrap_or_else(|| "-".into());
        let provider_w = r
            .reasons
            .iter()
            .map(|x| provider(x).chars().count())
            .max()
            .unwrap_or(0);
        for x in &r.reasons {
            let g = group(x.group.as_deref());
            let p = provider(x);
            lines.push(format!(
                "    {:<code_w$}  {g:<group_w$}  {p:<provider_w$}  {}",
                x.code, x.detail
            ));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_api::placement::explain::ExplainedRoot;

    fn root(uuid: &str, fits: bool) -> ExplainedRoot {
        ExplainedRoot {
            uuid: uuid.into(),
            name: format!("n{uuid}"),
            fits,
            reasons: vec![],
        }
    }

    #[test]
    fn a_fits_that_placements_answer_contradicts_is_disputed() {
        let root_of: HashMap<String, String> = [("r1", "r1"), ("c1", "r1"), ("r2", "r2")]
            .into_iter()
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect();
        let used: BTreeSet<String> = ["c1".to_owned()].into();
        let agree = Explained {
            candidates: 1,
            roots: vec![root("r1", true), root("r2", false)],
        };
        assert!(disputed(&agree, &used, &root_of).is_empty());
        let wrong = Explained {
            candidates: 1,
            roots: vec![root("r1", false), root("r2", true)],
        };
        assert_eq!(disputed(&wrong, &used, &root_of), ["nr1 (r1)", "nr2 (r2)"]);
        // A provider Placement knows but the read did not (created in between) counts
        // as a root of its own.
        let new: BTreeSet<String> = ["r3".to_owned()].into();
        let three = Explained {
            candidates: 1,
            roots: vec![root("r3", true)],
        };
        assert!(disputed(&three, &new, &root_of).is_empty());
    }

    #[test]
    fn the_table_has_a_line_per_root_and_an_indented_line_per_reason() {
        let e = Explained {
            candidates: 1,
            roots: vec![
                ExplainedRoot {
                    uuid: "u1".into(),
                    name: "compute1".into(),
                    fits: true,
                    reasons: vec![],
                },
                ExplainedRoot {
                    uuid: "u2".into(),
                    name: "c2".into(),
                    fits: false,
                    reasons: vec![ExplainedReason {
                        code: "capacity".into(),
                        group: Some("1".into()),
                        provider: Some("u3".into()),
                        provider_name: Some("c2_fpga0".into()),
                        resource_class: Some("FPGA".into()),
                        trait_name: None,
                        detail: "needs 2 FPGA, 1 free".into(),
                    }],
                },
            ],
        };
        let pairs = vec![("resources1".to_owned(), "FPGA:2".to_owned())];
        assert_eq!(
            table(&e, &pairs),
            "1 candidate(s) for resources1=FPGA:2\n\
             compute1  u1  fits\n\
             c2        u2  does not fit\n    capacity  1  c2_fpga0  needs 2 FPGA, 1 free"
        );
    }
}
