//! `GET /allocation_candidates` (1.10+): parse the request groups exactly as upstream
//! does (suffixes, orphans, resourceless groups, same_subtree, root_required), read
//! one consistent picture of the providers, and let `accel_core::candidates` search it.
//!
//! The search is bounded by `limit` and by the server's `max_allocation_candidates`,
//! so an answer is never computed in full only to be truncated.

use super::error::{ApiError, ApiResult, Code};
use super::index::Prepared;
use super::AppState;
use super::{authorize, qs, Reply, Req};
use crate::jsonschema::pyrepr;
use accel_api::placement::mv;
use accel_core::candidates::{self as engine, GroupPolicy, ProviderId};
use accel_core::policy::placement as rules;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const PREFIXES: [&str; 4] = ["resources", "required", "member_of", "in_tree"];

fn group_pat(req: &Req) -> &'static str {
    if req.mv(mv::STRING_SUFFIXES) {
        "[a-zA-Z0-9_-]{1,64}"
    } else {
        "[1-9][0-9]*"
    }
}

fn schema(req: &Req) -> Value {
    let limit = json!({"type": ["integer", "string"], "pattern": "^[1-9][0-9]*$", "minimum": 1, "minLength": 1});
    if !req.mv(mv::GRANULAR_GROUPS) {
        let mut props = json!({"resources": {"type": "string"}});
        if req.mv(mv::CANDIDATES_LIMIT) {
            props["limit"] = limit;
        }
        if req.mv(mv::CANDIDATES_REQUIRED) {
            props["required"] = json!({"type": ["string"]});
        }
        if req.mv(mv::CANDIDATES_MEMBER_OF) {
            props["member_of"] = json!({"type": ["string"]});
        }
        return json!({"type": "object", "properties": props, "required": ["resources"], "additionalProperties": false});
    }
    let mut props =
        json!({"limit": limit, "group_policy": {"type": "string", "enum": ["none", "isolate"]}});
    if req.mv(mv::ROOT_REQUIRED) {
        props["root_required"] = json!({"type": ["string"]});
    }
    if req.mv(mv::SAME_SUBTREE) {
        props["same_subtree"] = json!({"type": ["string"]});
    }
    let mut pats = Map::new();
    let kinds: &[&str] = if req.mv(mv::CANDIDATES_IN_TREE) {
        &PREFIXES
    } else {
        &PREFIXES[..3]
    };
    for k in kinds {
        pats.insert(
            format!("^{k}({})?$", group_pat(req)),
            json!({"type": "string"}),
        );
    }
    json!({"type": "object", "properties": props, "patternProperties": pats, "additionalProperties": false})
}

/// One request group as parsed from the query string (names, not ids).
#[derive(Default, Debug)]
struct Group {
    resources: Vec<(String, i64)>,
    traits: qs::TraitQuery,
    aggs: qs::AggQuery,
    in_tree: Option<String>,
}

struct Parsed {
    /// Suffix -> group, in first-seen order.
    groups: Vec<(String, Group)>,
    limit: Option<usize>,
    group_policy: Option<String>,
    root_required: Vec<String>,
    root_forbidden: Vec<String>,
    same_subtree: Vec<Vec<String>>,
}

fn parse(req: &Req) -> ApiResult<Parsed> {
    let limit = req
        .query_all("limit")
        .first()
        .and_then(|l| l.parse::<usize>().ok());
    let group_policy = req.query_all("group_policy").first().map(|s| s.to_string());
    let mut root_required = Vec::new();
    let mut root_forbidden = Vec::new();
    let rr = req.query_all("root_required");
    if !rr.is_empty() {
        if rr.len() > 1 {
            return Err(ApiError::bad_request(
                "Query parameter 'root_required' may be specified only once.",
            )
            .with_code(Code::QueryDuplicateKey));
        }
        let q = qs::trait_value(rr[0], true, false)?;
        root_required = q.required.into_iter().flatten().collect();
        root_forbidden = q.forbidden;
        root_required.sort();
        root_required.dedup();
        root_forbidden.sort();
        root_forbidden.dedup();
        let conflicts: Vec<&String> = root_forbidden
            .iter()
            .filter(|t| root_required.contains(t))
            .collect();
        if !conflicts.is_empty() {
            let list = conflicts
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ApiError::bad_request(format!(
                "Conflicting required and forbidden traits found in root_required: {list}"
            ))
            .with_code(Code::QueryBadValue));
        }
    }
    let mut same_subtree = Vec::new();
    for val in req.query_all("same_subtree") {
        let mut suffixes: Vec<String> = val.split(',').map(|s| s.trim().to_owned()).collect();
        if suffixes.iter().any(String::is_empty) {
            return Err(ApiError::bad_request(
                "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
            )
            .with_code(Code::QueryBadValue));
        }
        suffixes.sort();
        suffixes.dedup();
        same_subtree.push(suffixes);
    }

    static KEYS: std::sync::LazyLock<[regex::Regex; 2]> = std::sync::LazyLock::new(|| {
        ["[1-9][0-9]*", "[a-zA-Z0-9_-]{1,64}"].map(|pat| {
            regex::Regex::new(&format!("^(resources|required|member_of|in_tree)({pat})?$"))
                .expect("static pattern")
        })
    });
    let key_re = &KEYS[usize::from(req.mv(mv::STRING_SUFFIXES))];
    let mut groups: Vec<(String, Group)> = Vec::new();
    for (key, val) in &req.query {
        let Some(c) = key_re.captures(key) else {
            continue;
        };
        let prefix = c.get(1).map_or("", |m| m.as_str());
        let suffix = c.get(2).map_or("", |m| m.as_str()).to_owned();
        let idx = match groups.iter().position(|(s, _)| *s == suffix) {
            Some(i) => i,
            None => {
                groups.push((suffix.clone(), Group::default()));
                groups.len() - 1
            }
        };
        let g = &mut groups[idx].1;
        match prefix {
            "resources" => g.resources = qs::resources(val)?,
            "required" => g.traits = qs::traits(req, &format!("required{suffix}"))?,
            "member_of" => g.aggs = qs::member_of(req, &format!("member_of{suffix}"), &suffix)?,
            _ => g.in_tree = Some(qs::in_tree(val)?),
        }
    }

    if req.mv(mv::SAME_SUBTREE) {
        let resourceless: Vec<&String> = groups
            .iter()
            .filter(|(_, g)| g.resources.is_empty())
            .map(|(s, _)| s)
            .collect();
        if resourceless.len() == groups.len() {
            return Err(ApiError::bad_request(
                "There must be at least one resources or resources[$S] parameter.",
            )
            .with_code(Code::QueryMissingValue));
        }
        let in_subtree = |s: &String| same_subtree.iter().any(|set| set.contains(s));
        let bad: Vec<&String> = resourceless
            .into_iter()
            .filter(|s| !in_subtree(s))
            .collect();
        if !bad.is_empty() {
            return Err(ApiError::bad_request(format!(
                "Resourceless suffixed group request should be specified in `same_subtree` query param: bad group(s) - {}.",
                py_list(bad.iter().map(|s| s.as_str()))
            ))
            .with_code(Code::QueryBadValue));
        }
        let known: Vec<&str> = groups.iter().map(|(s, _)| s.as_str()).collect();
        let bad: Vec<&str> = same_subtree
            .iter()
            .flatten()
            .map(String::as_str)
            .filter(|s| !known.contains(s))
            .collect();
        if !bad.is_empty() {
            return Err(ApiError::bad_request(format!(
                "Real suffixes should be specified in `same_subtree`: {} not found in {}.",
                py_list(bad.into_iter()),
                py_list(known.into_iter())
            ))
            .with_code(Code::QueryBadValue));
        }
    } else {
        let orphans: Vec<String> = groups
            .iter()
            .filter(|(_, g)| !g.traits.required.is_empty() && g.resources.is_empty())
            .map(|(s, _)| format!("required{s}"))
            .collect();
        if !orphans.is_empty() {
            return Err(ApiError::bad_request(format!(
                "All traits parameters must be associated with resources.  Found the following orphaned traits keys: {}",
                orphans.join(", ")
            )));
        }
        let orphans: Vec<String> = groups
            .iter()
            .filter(|(_, g)| {
                g.resources.is_empty()
                    && (!g.aggs.required.is_empty() || !g.aggs.forbidden.is_empty())
            })
            .map(|(s, _)| format!("member_of{s}"))
            .collect();
        if !orphans.is_empty() {
            return Err(ApiError::bad_request(format!(
                "All member_of parameters must be associated with resources. Found the following orphaned member_of keys: {}",
                orphans.join(", ")
            )));
        }
        if groups.iter().any(|(_, g)| g.resources.is_empty()) {
            return Err(ApiError::bad_request(
                "All request groups must specify resources.",
            ));
        }
        if groups.is_empty() {
            return Err(ApiError::bad_request(
                "At least one request group (`resources` or `resources{$S}`) is required.",
            ));
        }
    }
    if req.mv(mv::FORBIDDEN_TRAITS) {
        let mut conflicts: Vec<String> = Vec::new();
        for (s, g) in &groups {
            for any in &g.traits.required {
                if any.iter().all(|t| g.traits.forbidden.contains(t)) {
                    let mut names = any.clone();
                    names.sort();
                    conflicts.push(format!("required{s}: ({})", names.join(", ")));
                }
            }
        }
        if !conflicts.is_empty() {
            conflicts.sort();
            return Err(ApiError::bad_request(format!(
                "Conflicting required and forbidden traits found in the following traits keys: {}",
                conflicts.join(", ")
            )));
        }
    }
    if group_policy.is_none() && groups.iter().filter(|(s, _)| !s.is_empty()).count() > 1 {
        return Err(ApiError::bad_request(
            "The \"group_policy\" parameter is required when specifying more than one \"resources{N}\" parameter.",
        ));
    }
    Ok(Parsed {
        groups,
        limit,
        group_policy,
        root_required,
        root_forbidden,
        same_subtree,
    })
}

fn py_list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    pyrepr(&Value::Array(
        items.map(|s| Value::String(s.to_owned())).collect(),
    ))
}

pub async fn list(app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    authorize(&app, &req, rules::ALLOCATION_CANDIDATES_LIST)?;
    req.validate_query(&schema(&req))?;
    let parsed = parse(&req)?;
    let started = std::time::Instant::now();
    let index = app.placement_index.current(&app.store).await?;
    let reply = answer(&app, &req, &parsed, &index).await?.modified_now();
    app.metrics
        .candidates_duration
        .observe(started.elapsed().as_secs_f64());
    Ok(reply)
}

/// The answer with no candidates, in [`Answer::write`]'s format.
fn empty() -> Reply {
    let mut reply = Reply::status(StatusCode::OK);
    reply.raw = Some(br#"{"allocation_requests":[],"provider_summaries":{}}"#.to_vec());
    reply
}

/// A candidates request resolved against one picture: the engine's request, or an
/// answer known to be empty before any search (an `in_tree` provider that does not
/// exist, an unknown name after a group that has no candidates).
pub enum Resolved {
    Search(engine::Request),
    Empty,
}

/// Parses `query` exactly as `GET /allocation_candidates` at `version` parses its
/// query string (schema, groups, orphans, conflicts: the same errors), and resolves
/// it against `index`. The console's explainer and device-profile pages ask the
/// engine through here, so they read a request as Placement reads it.
pub fn resolve_query(
    app: &AppState,
    query: &str,
    version: super::microversion::Version,
    index: &Prepared,
) -> ApiResult<Resolved> {
    if let Some(m) = crate::state::query_too_long(Some(query)) {
        return Err(ApiError::bad_request(m));
    }
    let req = Req::from_query(query, version);
    req.validate_query(&schema(&req))?;
    let parsed = parse(&req)?;
    resolve(app, &req, &parsed, index)
}

async fn answer(app: &AppState, req: &Req, p: &Parsed, index: &Prepared) -> ApiResult<Reply> {
    let request = match resolve(app, req, p, index)? {
        Resolved::Search(r) => r,
        Resolved::Empty => return Ok(empty()),
    };
    let snapshot = &index.snapshot;
    let cap = if app.config.max_allocation_candidates == 0 {
        usize::MAX
    } else {
        app.config.max_allocation_candidates
    };
    let (mut outcome, work) = engine::search_counted(
        snapshot,
        &request,
        &engine::SearchOptions {
            cap,
            ..Default::default()
        },
    );
    // Two partitions of one GPU in one candidate: its ledger decides.
    let dropped =
        super::partition_candidates::drop_unholdable(&app.store, index, &mut outcome).await?;
    if dropped > 0 {
        tracing::debug!(
            dropped,
            "candidates a GPU's partition ledger cannot hold together"
        );
    }
    let m = &app.metrics;
    m.candidates_returned
        .observe(outcome.candidates.len() as f64);
    m.candidates_anchors.inc_by(work.anchors_searched as u64);
    m.candidates_option_checks.inc_by(work.option_checks);
    let requested = p
        .groups
        .iter()
        .flat_map(|(_, g)| g.resources.iter().map(|(rc, _)| rc.as_str()))
        .collect();
    let answer = Answer {
        req,
        index,
        outcome: &outcome,
        requested,
    };
    let body = answer.write(index.answer_size.load(Ordering::Relaxed));
    index.answer_size.store(body.len(), Ordering::Relaxed);
    let mut reply = Reply::status(StatusCode::OK);
    reply.raw = Some(body);
    Ok(reply)
}

fn resolve(app: &AppState, req: &Req, p: &Parsed, index: &Prepared) -> ApiResult<Resolved> {
    let rc_ids = &index.rc_ids;
    let trait_ids = &index.trait_ids;
    let no_such_traits = |names: &mut dyn Iterator<Item = &String>| -> Option<ApiError> {
        let mut unknown: Vec<&str> = names
            .map(String::as_str)
            .filter(|t| !trait_ids.contains_key(*t))
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        (!unknown.is_empty())
            .then(|| ApiError::bad_request(format!("No such trait(s): {}.", unknown.join(", "))))
    };
    // `root_required` is resolved for the request as a whole, before any group.
    if let Some(e) = no_such_traits(&mut p.root_required.iter().chain(p.root_forbidden.iter())) {
        return Err(e);
    }
    let trait_id = |name: &str| -> u32 { trait_ids[name] as u32 };
    let root_required: Vec<Vec<u32>> = p.root_required.iter().map(|t| vec![trait_id(t)]).collect();
    let root_forbidden: Vec<u32> = p.root_forbidden.iter().map(|t| trait_id(t)).collect();
    let nested = req.mv(mv::NESTED_CANDIDATES);

    let snapshot = &index.snapshot;
    let by_uuid = &index.by_uuid;

    // Upstream resolves the groups one at a time, in query order, and stops at the first
    // group that has no candidates of its own: the names of the groups after it are never
    // looked up, so an unknown class or trait there answers an empty 200, not a 400.
    let mut groups: Vec<engine::RequestGroup> = Vec::new();
    for (suffix, g) in &p.groups {
        let unknown = match g
            .resources
            .iter()
            .find(|(rc, _)| !rc_ids.contains_key(rc.as_str()))
        {
            Some((rc, _)) => Some(ApiError::bad_request(format!(
                "Invalid resource class in resources parameter: No such resource class {rc}."
            ))),
            // one lookup per any-of set, then one for the forbidden ones, as upstream
            None => g
                .traits
                .required
                .iter()
                .find_map(|any| no_such_traits(&mut any.iter()))
                .or_else(|| no_such_traits(&mut g.traits.forbidden.iter())),
        };
        if let Some(e) = unknown {
            let alone_is_empty = |group: &engine::RequestGroup| {
                let alone = engine::Request {
                    groups: vec![group.clone()],
                    group_policy: GroupPolicy::None,
                    same_subtree: Vec::new(),
                    root_required: root_required.clone(),
                    root_forbidden: root_forbidden.clone(),
                    limit: Some(1),
                    nested,
                    randomize: None,
                };
                engine::search(snapshot, &alone, 1).candidates.is_empty()
            };
            if groups.iter().any(alone_is_empty) {
                return Ok(Resolved::Empty);
            }
            return Err(e);
        }
        let in_tree = match &g.in_tree {
            Some(u) => match by_uuid.get(u.as_str()) {
                Some(&i) => Some(ProviderId(i)),
                None => return Ok(Resolved::Empty),
            },
            None => None,
        };
        groups.push(engine::RequestGroup {
            suffix: suffix.clone(),
            resources: g
                .resources
                .iter()
                .map(|(rc, n)| (rc_ids[rc.as_str()] as u32, *n))
                .collect(),
            required: g
                .traits
                .required
                .iter()
                .map(|any| any.iter().map(|t| trait_id(t)).collect())
                .collect(),
            forbidden: g.traits.forbidden.iter().map(|t| trait_id(t)).collect(),
            member_of: g
                .aggs
                .required
                .iter()
                .map(|any| {
                    any.iter()
                        .filter_map(|a| uuid::Uuid::parse_str(a).ok())
                        .collect()
                })
                .collect(),
            forbidden_aggregates: g
                .aggs
                .forbidden
                .iter()
                .filter_map(|a| uuid::Uuid::parse_str(a).ok())
                .collect(),
            in_tree,
        });
    }
    let request = engine::Request {
        groups,
        group_policy: match p.group_policy.as_deref() {
            Some("isolate") => GroupPolicy::Isolate,
            _ => GroupPolicy::None,
        },
        same_subtree: p.same_subtree.clone(),
        root_required,
        root_forbidden,
        limit: p.limit,
        nested,
        randomize: app
            .config
            .randomize_allocation_candidates
            .then(rand::random::<u64>),
    };
    Ok(Resolved::Search(request))
}

/// The answer, written straight to bytes by [`Answer::write`]: at hundreds of
/// candidates a `Value` tree cost more than the search itself, and serde's generic
/// map and string machinery (escaping every uuid, hashing every name lookup) still
/// cost as much as the search.
struct Answer<'a> {
    req: &'a Req,
    index: &'a Prepared,
    outcome: &'a engine::Outcome,
    /// Classes the request names (summaries before 1.27 show only those).
    requested: Vec<&'a str>,
}

/// A compact JSON writer over a byte buffer. Strings are checked by one byte scan and
/// copied when they need no escaping, else go through serde_json's escaping; the
/// picture's own names (provider uuids, class and trait names), which the index
/// checked once when it was built ([`Prepared::plain`]), are copied without the scan.
struct Json {
    buf: Vec<u8>,
    /// The picture's names need no escaping.
    plain_names: bool,
}

impl Json {
    fn raw(&mut self, s: &str) {
        self.buf.extend_from_slice(s.as_bytes());
    }
    fn byte(&mut self, b: u8) {
        self.buf.push(b);
    }
    fn str(&mut self, s: &str) {
        // A fold without early exit, so the compiler can vectorise the scan.
        let plain = !s.bytes().fold(false, |bad, b| {
            bad | (b < 0x20) | (b == b'"') | (b == b'\\')
        });
        if plain {
            self.buf.push(b'"');
            self.buf.extend_from_slice(s.as_bytes());
            self.buf.push(b'"');
        } else {
            // Writing into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut self.buf, s);
        }
    }
    /// One of the picture's names (a provider uuid, a class or trait name): copied
    /// as is when the index found them all plain. The scan was 8 % of the fpga200
    /// answer's time (docs/benchmarks.md, "The physical limit").
    fn name(&mut self, s: &str) {
        if self.plain_names {
            self.buf.push(b'"');
            self.buf.extend_from_slice(s.as_bytes());
            self.buf.push(b'"');
        } else {
            self.str(s);
        }
    }
    /// `"key":`
    fn key(&mut self, k: &str) {
        self.str(k);
        self.buf.push(b':');
    }
    /// `"name":` for one of the picture's names ([`Json::name`]).
    fn name_key(&mut self, k: &str) {
        self.name(k);
        self.buf.push(b':');
    }
    fn int(&mut self, n: i64) {
        self.raw(itoa::Buffer::new().format(n));
    }
    /// A comma before every element but the first.
    fn sep(&mut self, first: &mut bool) {
        if !std::mem::take(first) {
            self.buf.push(b',');
        }
    }
}

/// The runs of `allocations` (sorted by provider) that share a provider.
fn by_provider(
    allocations: &[(ProviderId, engine::RcId, i64)],
) -> impl Iterator<Item = &[(ProviderId, engine::RcId, i64)]> {
    allocations.chunk_by(|x, y| x.0 == y.0)
}

impl Answer<'_> {
    fn uuid(&self, id: ProviderId) -> &str {
        &self.index.world.providers[id.0 as usize].uuid
    }

    /// The whole document. `size_hint` (the last answer's size) saves the buffer's
    /// regrowth copies.
    fn write(&self, size_hint: usize) -> Vec<u8> {
        let mut j = Json {
            buf: Vec::with_capacity(size_hint),
            plain_names: self.index.plain,
        };
        j.raw("{\"allocation_requests\":[");
        let mut first = true;
        for c in &self.outcome.candidates {
            j.sep(&mut first);
            self.request(&mut j, c);
        }
        j.raw("],\"provider_summaries\":{");
        let mut first = true;
        for &id in &self.outcome.summary_providers {
            j.sep(&mut first);
            j.name_key(self.uuid(id));
            self.summary(&mut j, id);
        }
        j.raw("}}");
        j.buf
    }

    /// `{class: amount}` for one provider's run of allocations.
    fn resources(&self, j: &mut Json, run: &[(ProviderId, engine::RcId, i64)]) {
        j.byte(b'{');
        let mut first = true;
        for &(_, rc, amount) in run {
            j.sep(&mut first);
            j.name_key(self.index.rc_name(rc as i64));
            j.int(amount);
        }
        j.byte(b'}');
    }

    fn request(&self, j: &mut Json, c: &engine::Candidate) {
        if !self.req.mv(mv::ALLOCATIONS_DICT) {
            // [{"resource_provider": {"uuid": u}, "resources": {...}}, ...]
            j.raw("{\"allocations\":[");
            let mut first = true;
            for run in by_provider(&c.allocations) {
                j.sep(&mut first);
                j.raw("{\"resource_provider\":{\"uuid\":");
                j.name(self.uuid(run[0].0));
                j.raw("},\"resources\":");
                self.resources(j, run);
                j.byte(b'}');
            }
            j.raw("]}");
            return;
        }
        j.raw("{\"allocations\":{");
        let mut first = true;
        for run in by_provider(&c.allocations) {
            j.sep(&mut first);
            j.name_key(self.uuid(run[0].0));
            j.raw("{\"resources\":");
            self.resources(j, run);
            j.byte(b'}');
        }
        j.byte(b'}');
        if self.req.mv(mv::CANDIDATE_MAPPINGS) {
            j.raw(",\"mappings\":{");
            let mut first = true;
            for (suffix, rps) in &c.mappings {
                j.sep(&mut first);
                j.key(suffix);
                j.byte(b'[');
                let mut first_rp = true;
                for &rp in rps {
                    j.sep(&mut first_rp);
                    j.name(self.uuid(rp));
                }
                j.byte(b']');
            }
            j.byte(b'}');
        }
        j.byte(b'}');
    }

    fn summary(&self, j: &mut Json, id: ProviderId) {
        let index = self.index;
        let rp = &index.world.providers[id.0 as usize];
        j.raw("{\"resources\":{");
        let mut first = true;
        // The engine's copy of the inventories (same order) knows its capacity.
        for inv in &index.snapshot.provider(id).inventories {
            let name = index.rc_name(i64::from(inv.rc));
            if !(self.req.mv(mv::SUMMARIES_ALL_CLASSES) || self.requested.contains(&name)) {
                continue;
            }
            let capacity = inv.capacity();
            j.sep(&mut first);
            j.name_key(name);
            j.raw("{\"capacity\":");
            j.int(capacity);
            j.raw(",\"used\":");
            j.int(inv.used);
            j.byte(b'}');
        }
        j.byte(b'}');
        if self.req.mv(mv::CANDIDATES_REQUIRED) {
            // Upstream lists a provider's traits in the database's order, which is
            // creation order: standard traits before custom ones. The index keeps
            // each provider's trait ids sorted.
            j.raw(",\"traits\":[");
            let mut first = true;
            for &t in &rp.traits {
                if let Some(name) = index.trait_name(t) {
                    j.sep(&mut first);
                    j.name(name);
                }
            }
            j.byte(b']');
        }
        if self.req.mv(mv::NESTED_CANDIDATES) {
            let p = index.snapshot.provider(id);
            j.raw(",\"parent_provider_uuid\":");
            match p.parent {
                Some(parent) => j.name(self.uuid(parent)),
                None => j.raw("null"),
            }
            j.raw(",\"root_provider_uuid\":");
            j.name(self.uuid(p.root));
        }
        j.byte(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::Json;

    fn name_key(plain_names: bool, name: &str) -> String {
        let mut j = Json {
            buf: Vec::new(),
            plain_names,
        };
        j.name_key(name);
        j.int(1);
        String::from_utf8(j.buf).unwrap()
    }

    /// A picture that is not plain has its names escaped; a plain one's names are
    /// written as the scan would have written them.
    #[test]
    fn names_are_escaped_unless_the_picture_is_plain() {
        assert_eq!(name_key(false, "CUSTOM_\"Q\\"), r#""CUSTOM_\"Q\\":1"#);
        assert_eq!(name_key(false, "CUSTOM_\n"), r#""CUSTOM_\n":1"#);
        assert_eq!(name_key(true, "CUSTOM_FPGA"), r#""CUSTOM_FPGA":1"#);
        assert_eq!(
            name_key(false, "CUSTOM_FPGA"),
            name_key(true, "CUSTOM_FPGA")
        );
    }
}
