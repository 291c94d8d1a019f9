//! The candidate questions: device profiles with the hosts that could serve each
//! right now, and the explainer ("why no valid host?").
//!
//! Both ask the engine the way Placement is asked: a profile becomes the query Nova
//! composes (`accel_api::workflow::candidate_query`, the `accel boot` path), and every
//! query string goes through Placement's own parser
//! ([`crate::placement::resolve_query`]), so the console reads a request exactly as
//! `GET /allocation_candidates` reads it, same errors included. The search runs on
//! the candidate index the API uses (no per-request load), and
//! `accel_core::candidates::explain` gives each root's verdict and reasons.
//!
//! Provider names (the index holds ids and uuids only) come from one `id, name` read
//! kept per index version, so an explanation over 10,000 roots names its providers
//! without a query per reason.

use super::html::{esc, pager, qv};
use super::{html, read, render, store_failed, Answer, Console, ListQuery, Rule, Shared, Who};
use crate::placement::index::Prepared;
use crate::placement::{resolve_query, Resolved};
use accel_api::placement::mv;
use accel_core::candidates::explain::{self, ExplainOptions, Names};
use accel_core::candidates::{self as engine, ProviderId, RcId, TraitId};
use accel_core::policy::{cyborg, placement as rules};
use accel_store::accelerator::profiles;
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use std::fmt::Write;
use std::sync::Arc;

/// Hosts listed per profile; the count says how many more.
const HOSTS_SHOWN: usize = 12;
/// Candidates searched per profile for its hosts.
const PROFILE_CAP: usize = 1000;
/// Candidates shown by the explainer.
const CANDIDATES_SHOWN: usize = 50;
/// Candidates the explainer searches for at most (its count then reads "N+").
const EXPLAIN_CAP: usize = 1000;

/// Provider names by index position, for one index version.
pub struct NameCache(
    tokio::sync::Mutex<Option<(accel_store::placement::changes::Version, Arc<Vec<String>>)>>,
);

impl Default for NameCache {
    fn default() -> Self {
        NameCache(tokio::sync::Mutex::new(None))
    }
}

impl Console {
    /// The index and the names of its providers (position `i` names
    /// `index.world.providers[i]`).
    async fn index_and_names(
        &self,
    ) -> Result<(Arc<Prepared>, Arc<Vec<String>>), accel_store::StoreError> {
        let index = self.app.placement_index.current(&self.app.store).await?;
        let mut cache = self.names.0.lock().await;
        if let Some((v, names)) = cache.as_ref() {
            if *v == index.version {
                return Ok((index, names.clone()));
            }
        }
        let by_id = self.estate().provider_names().await?;
        let names: Arc<Vec<String>> = Arc::new(
            index
                .world
                .providers
                .iter()
                .map(|p| by_id.get(&p.id).cloned().unwrap_or_else(|| p.uuid.clone()))
                .collect(),
        );
        *cache = Some((index.version, names.clone()));
        Ok((index, names))
    }
}

/// [`Names`] over the index and the cached provider names.
struct IndexNames<'a> {
    index: &'a Prepared,
    names: &'a [String],
}

impl Names for IndexNames<'_> {
    fn provider(&self, id: ProviderId) -> String {
        self.names.get(id.0 as usize).cloned().unwrap_or_default()
    }
    fn resource_class(&self, rc: RcId) -> String {
        self.index.rc_name(i64::from(rc)).to_owned()
    }
    fn trait_name(&self, t: TraitId) -> String {
        self.index
            .trait_name(i64::from(t))
            .unwrap_or_default()
            .to_owned()
    }
}

/// The allocation-candidates query Nova composes for a flavor's `resources` and a
/// profile's groups (`accel_api::workflow::nova_query`, as `accel explain
/// --device-profile` composes it), as a query string.
fn profile_query(
    resources: &[(String, u64)],
    group_policy: Option<&str>,
    groups: &[accel_core::accelerator::Group],
) -> Result<String, String> {
    let groups: Vec<accel_api::accelerator::Group> = groups
        .iter()
        .map(|g| {
            g.entries()
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect()
        })
        .collect();
    let q = accel_api::workflow::nova_query(resources, group_policy, &groups)
        .map_err(|e| e.to_string())?;
    Ok(form_urlencoded::Serializer::new(String::new())
        .extend_pairs(q)
        .finish())
}

/// The roots (index positions) of `outcome`'s candidates, in Placement's order, once
/// each.
fn roots_of(snapshot: &engine::Snapshot, outcome: &engine::Outcome) -> Vec<ProviderId> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for c in &outcome.candidates {
        for &(p, _, _) in &c.allocations {
            let root = snapshot.provider(p).root;
            if seen.insert(root) {
                out.push(root);
            }
        }
    }
    out
}

pub(crate) async fn profiles(
    state: Shared,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Answer {
    let console = &state.0;
    let who = console
        .admit(&headers, Rule::Cyborg(cyborg::DEVICE_PROFILE_GET_ALL))
        .await?;
    let all = read("the device profiles", console.estate().profiles()).await?;
    // Profiles are few (tens): filtered and paged here, after one read.
    let needle = q.search().map(str::to_lowercase);
    let matching: Vec<&profiles::Profile> = all
        .iter()
        .filter(|p| {
            needle
                .as_ref()
                .is_none_or(|n| p.name.to_lowercase().contains(n) || p.uuid == *n)
        })
        .collect();
    let window = q.window();
    let page: Vec<&profiles::Profile> = matching
        .iter()
        .skip(window.offset as usize)
        .take(window.limit as usize)
        .copied()
        .collect();
    let hosts_allowed = console.placement_allows(&who, rules::ALLOCATION_CANDIDATES_LIST);
    let picture = if hosts_allowed {
        Some(
            console
                .index_and_names()
                .await
                .map_err(|e| store_failed("the candidate index", e))?,
        )
    } else {
        None
    };
    let mut h = html::list_head(
        "/profiles",
        &q.q,
        "profile name or uuid",
        window,
        page.len(),
        matching.len() as i64,
    );
    h.push_str(
        "<table class=\"profiles\"><thead><tr><th>Profile</th><th>Groups</th>\
         <th>Hosts that could serve it now</th></tr></thead><tbody>",
    );
    for p in page {
        let mut groups = String::new();
        for g in &p.groups {
            groups.push_str("<div><code>");
            let entries: Vec<String> = g
                .entries()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            groups.push_str(&esc(&entries.join(", ")));
            groups.push_str("</code></div>");
        }
        let (count, hosts) = match &picture {
            None => (
                String::new(),
                format!(
                    "<span class=\"muted\">needs {}</span>",
                    rules::ALLOCATION_CANDIDATES_LIST
                ),
            ),
            Some((index, names)) => serving_hosts(console, index, names, p),
        };
        let _ = write!(
            h,
            "<tr data-test=\"profile-row\" data-profile=\"{n}\" data-hosts=\"{count}\"><td><b>{n}</b><br>\
             <code class=\"muted\">{u}</code><br><a href=\"/explain?profile={qn}\">explain</a></td>\
             <td>{groups}</td><td>{hosts}</td></tr>",
            n = esc(&p.name),
            u = esc(&p.uuid),
            qn = esc(&qv(&p.name)),
        );
    }
    h.push_str("</tbody></table>");
    Ok(console.page(&who, "Device profiles", "/profiles", &h).await)
}

/// `(count, html)` of the hosts that could serve profile `p` now.
fn serving_hosts(
    console: &Console,
    index: &Prepared,
    names: &[String],
    p: &profiles::Profile,
) -> (String, String) {
    let query = match profile_query(&[], Some("none"), &p.groups) {
        Ok(q) => q,
        Err(e) => {
            return (
                String::new(),
                format!("<span class=\"error\">{}</span>", esc(&e)),
            )
        }
    };
    let request = match resolve_query(&console.app, &query, mv::Version::MAX, index) {
        Ok(Resolved::Search(r)) => r,
        Ok(Resolved::Empty) => return ("0".to_owned(), "none".to_owned()),
        Err(e) => {
            return (
                "0".to_owned(),
                format!(
                    "<span class=\"error\" data-test=\"profile-error\">{}</span>",
                    esc(&e.message)
                ),
            )
        }
    };
    let outcome = engine::search(&index.snapshot, &request, PROFILE_CAP);
    let roots = roots_of(&index.snapshot, &outcome);
    let mut h = String::new();
    for r in roots.iter().take(HOSTS_SHOWN) {
        let uuid = &index.world.providers[r.0 as usize].uuid;
        let _ = write!(
            h,
            "<a class=\"chip\" data-test=\"profile-host\" data-host=\"{n}\" href=\"/hosts/{u}\">{n}</a>",
            n = esc(names.get(r.0 as usize).map_or("", String::as_str)),
            u = esc(uuid),
        );
    }
    let capped = outcome.candidates.len() >= PROFILE_CAP;
    if roots.is_empty() {
        h.push_str("<span class=\"fits-no\">none</span> · <a href=\"/explain?profile=");
        h.push_str(&esc(&qv(&p.name)));
        h.push_str("\">why?</a>");
    } else if roots.len() > HOSTS_SHOWN || capped {
        let _ = write!(
            h,
            " <span class=\"muted\">{}{} hosts in all</span>",
            roots.len(),
            if capped { "+" } else { "" }
        );
    }
    (roots.len().to_string(), h)
}

/// The explainer's inputs, as `accel explain` takes them.
#[derive(serde::Deserialize, Default)]
pub(crate) struct ExplainQuery {
    /// A query string as nova-scheduler logs it.
    #[serde(default)]
    query: String,
    /// Or a device profile's name, with the flavor's `resources` (`RC=N,...` or
    /// `RC:N,...`) and `group_policy`.
    #[serde(default)]
    profile: String,
    #[serde(default)]
    resources: String,
    #[serde(default)]
    group_policy: String,
    #[serde(default)]
    root: String,
    #[serde(default)]
    microversion: String,
    #[serde(default)]
    show: String,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

fn explain_form(q: &ExplainQuery, profiles: &[String]) -> String {
    let mut options = String::from("<option value=\"\">(none: use the query string)</option>");
    for p in profiles {
        let sel = if *p == q.profile { " selected" } else { "" };
        let _ = write!(options, "<option value=\"{0}\"{sel}>{0}</option>", esc(p));
    }
    let gp = |v: &str| if q.group_policy == v { " selected" } else { "" };
    format!(
        "<form method=\"get\" action=\"/explain\" class=\"explain\" data-test=\"explain-form\">\
         <label for=\"e-query\">Query string</label>\
         <textarea id=\"e-query\" name=\"query\" placeholder=\"resources=VCPU:1&amp;resources1=CUSTOM_ACCELERATOR_FPGA:1&amp;required1=CUSTOM_FPGA_INTEL&amp;group_policy=isolate\">{query}</textarea>\
         <label for=\"e-profile\">or device profile</label><select id=\"e-profile\" name=\"profile\">{options}</select>\
         <label for=\"e-res\">flavor resources (with a profile)</label><input id=\"e-res\" name=\"resources\" value=\"{res}\" placeholder=\"VCPU=2,MEMORY_MB=2048\">\
         <label for=\"e-gp\">group policy (with a profile)</label><select id=\"e-gp\" name=\"group_policy\">\
         <option value=\"none\"{n}>none</option><option value=\"isolate\"{i}>isolate</option></select>\
         <label for=\"e-root\">only root (name or uuid)</label><input id=\"e-root\" name=\"root\" value=\"{root}\">\
         <label for=\"e-mv\">microversion</label><input id=\"e-mv\" name=\"microversion\" value=\"{mv}\" placeholder=\"1.39\">\
         <span></span><button type=\"submit\" data-test=\"explain-submit\">Explain</button></form>",
        query = esc(&q.query),
        res = esc(&q.resources),
        root = esc(&q.root),
        mv = esc(&q.microversion),
        n = gp("none"),
        i = gp("isolate"),
    )
}

fn explain_error(message: &str) -> String {
    format!(
        "<p class=\"error\" data-test=\"explain-error\">{}</p>",
        esc(message)
    )
}

pub(crate) async fn explain(
    state: Shared,
    headers: HeaderMap,
    Query(q): Query<ExplainQuery>,
) -> Answer {
    let console = &state.0;
    let who = console
        .admit(&headers, Rule::Placement(rules::ALLOCATION_CANDIDATES_LIST))
        .await?;
    let all = read("the device profiles", console.estate().profiles()).await?;
    let names: Vec<String> = all.iter().map(|p| p.name.clone()).collect();
    let mut h = explain_form(&q, &names);
    if q.query.trim().is_empty() && q.profile.is_empty() {
        h.push_str("<p class=\"muted\">Give a query string as nova-scheduler logs it, or a device profile with the flavor's resources.</p>");
        return Ok(done(&who, &h));
    }
    let query = if !q.query.trim().is_empty() {
        let t = q.query.trim();
        let t = t
            .rsplit_once("allocation_candidates?")
            .map_or(t, |(_, rest)| rest);
        t.trim_start_matches('?').to_owned()
    } else {
        let Some(p) = all.iter().find(|p| p.name == q.profile) else {
            h.push_str(&explain_error(&format!(
                "No device profile named {}.",
                q.profile
            )));
            return Ok(done(&who, &h));
        };
        let resources = match accel_api::workflow::parse_resources(&q.resources.replace('=', ":")) {
            Ok(r) => r,
            Err(e) => {
                h.push_str(&explain_error(&e.to_string()));
                return Ok(done(&who, &h));
            }
        };
        let policy = if q.group_policy.is_empty() {
            None
        } else {
            Some(q.group_policy.as_str())
        };
        match profile_query(&resources, policy, &p.groups) {
            Ok(s) => s,
            Err(e) => {
                h.push_str(&explain_error(&e));
                return Ok(done(&who, &h));
            }
        }
    };
    let version = if q.microversion.trim().is_empty() {
        mv::Version::MAX
    } else {
        match mv::parse(q.microversion.trim()) {
            // GET /allocation_candidates exists from 1.10.
            Ok(v) if v >= mv::ALLOCATION_CANDIDATES && v <= mv::Version::MAX => v,
            _ => {
                h.push_str(&explain_error(&format!(
                    "Microversion {:?} is not one of 1.10 to 1.39 (allocation candidates exist from 1.10).",
                    q.microversion
                )));
                return Ok(done(&who, &h));
            }
        }
    };
    let (index, provider_names) = console
        .index_and_names()
        .await
        .map_err(|e| store_failed("the candidate index", e))?;
    let _ = write!(
        h,
        "<p>Request: <code data-test=\"explain-query\" data-query=\"{}\">{}</code> at {}</p>",
        esc(&query),
        esc(&decoded(&query)),
        version.header()
    );
    let request = match resolve_query(&console.app, &query, version, &index) {
        Ok(Resolved::Search(r)) => r,
        Ok(Resolved::Empty) => {
            h.push_str("<p data-test=\"candidates\" data-count=\"0\">Placement answers an empty list before any search: \
                an <code>in_tree</code> provider does not exist, or a name is unknown after a group that has no candidates.</p>");
            return Ok(done(&who, &h));
        }
        Err(e) => {
            h.push_str(&explain_error(&format!(
                "Placement would answer {}: {}",
                e.status.as_u16(),
                e.message
            )));
            return Ok(done(&who, &h));
        }
    };
    let only_root = if q.root.trim().is_empty() {
        None
    } else {
        let r = q.root.trim();
        let pos = index
            .by_uuid
            .get(r)
            .copied()
            .or_else(|| provider_names.iter().position(|n| n == r).map(|i| i as u32));
        match pos {
            Some(i) => Some(index.snapshot.provider(ProviderId(i)).root),
            None => {
                h.push_str(&explain_error(&format!("No provider named {r}.")));
                return Ok(done(&who, &h));
            }
        }
    };
    // Counting past EXPLAIN_CAP candidates only costs time: the page says "N+".
    let cap = match console.app.config.max_allocation_candidates {
        0 => EXPLAIN_CAP,
        n => n.min(EXPLAIN_CAP),
    };
    let outcome = engine::search(&index.snapshot, &request, cap);
    let names = IndexNames {
        index: &index,
        names: &provider_names,
    };
    let explanation = explain::explain(
        &index.snapshot,
        &request,
        &names,
        &ExplainOptions {
            only_root,
            ..Default::default()
        },
    );
    candidates_html(
        &mut h,
        &index,
        &names,
        &outcome,
        outcome.candidates.len() >= cap,
    );
    roots_html(&mut h, &q, &names, &index, &explanation);
    Ok(done(&who, &h))
}

fn done(who: &Who, body: &str) -> Response {
    // A form: it does not refresh by itself.
    let mut r = render(who, "Explain allocation candidates", "/explain", None, body);
    *r.status_mut() = StatusCode::OK;
    r
}

fn candidates_html(
    h: &mut String,
    index: &Prepared,
    names: &IndexNames,
    outcome: &engine::Outcome,
    capped: bool,
) {
    let n = outcome.candidates.len();
    let _ = write!(
        h,
        "<h2>Candidates in Placement's order</h2><div data-test=\"candidates\" data-count=\"{n}\" \
         data-capped=\"{capped}\"><p>{n}{} candidate{}{}</p><ol>",
        if capped { "+" } else { "" },
        if n == 1 { "" } else { "s" },
        if n > CANDIDATES_SHOWN {
            format!(", the first {CANDIDATES_SHOWN} shown")
        } else {
            String::new()
        }
    );
    for (i, c) in outcome.candidates.iter().take(CANDIDATES_SHOWN).enumerate() {
        let parts: Vec<String> = c
            .allocations
            .iter()
            .map(|&(p, rc, amount)| {
                format!(
                    "<a href=\"/hosts/{}\">{}</a> {} × {amount}",
                    esc(&index.world.providers[p.0 as usize].uuid),
                    esc(&names.provider(p)),
                    esc(&names.resource_class(rc))
                )
            })
            .collect();
        let _ = write!(
            h,
            "<li data-test=\"candidate\" data-index=\"{i}\">{}</li>",
            parts.join(" · ")
        );
    }
    h.push_str("</ol></div>");
}

fn roots_html(
    h: &mut String,
    q: &ExplainQuery,
    names: &IndexNames,
    index: &Prepared,
    explanation: &explain::Explanation,
) {
    let fitting = explanation.roots.iter().filter(|r| r.fits).count();
    let total = explanation.roots.len();
    let _ = write!(
        h,
        "<h2>Roots</h2><p data-test=\"roots-summary\" data-fits=\"{fitting}\" data-roots=\"{total}\">\
         {fitting} of {total} roots yield candidates. Show: "
    );
    let base = {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("query", &q.query),
            ("profile", &q.profile),
            ("resources", &q.resources),
            ("group_policy", &q.group_policy),
            ("root", &q.root),
            ("microversion", &q.microversion),
        ] {
            if !v.is_empty() {
                s.append_pair(k, v);
            }
        }
        s.finish()
    };
    for (v, label) in [
        ("nofit", "not fitting"),
        ("fits", "fitting"),
        ("all", "all"),
    ] {
        let _ = write!(
            h,
            "<a href=\"/explain?{}&amp;show={v}\">{label}</a> ",
            esc(&base)
        );
    }
    h.push_str("</p>");
    let show = if q.show.is_empty() {
        "nofit"
    } else {
        q.show.as_str()
    };
    let rows: Vec<&explain::RootExplanation> = explanation
        .roots
        .iter()
        .filter(|r| match show {
            "fits" => r.fits,
            "all" => true,
            _ => !r.fits,
        })
        .collect();
    let list = ListQuery {
        q: String::new(),
        offset: q.offset,
        limit: q.limit,
    };
    let window = list.window();
    let page: Vec<&&explain::RootExplanation> = rows
        .iter()
        .skip(window.offset as usize)
        .take(window.limit as usize)
        .collect();
    h.push_str(&pager(
        &format!("/explain?{base}&show={show}&"),
        window.offset,
        window.limit,
        page.len(),
        rows.len() as i64,
    ));
    h.push_str("<table class=\"roots\"><thead><tr><th>Root</th><th>Fits</th><th>Reasons</th></tr></thead><tbody>");
    for r in page {
        let name = names.provider(r.root);
        let _ = write!(
            h,
            "<tr data-test=\"root-row\" data-root=\"{u}\" data-name=\"{n}\" data-fits=\"{f}\"><td>\
             <a href=\"/hosts/{u}\">{n}</a></td><td class=\"{cls}\">{yn}</td><td><ul class=\"reasons\">",
            u = esc(&index.world.providers[r.root.0 as usize].uuid),
            n = esc(&name),
            f = r.fits,
            cls = if r.fits { "fits-yes" } else { "fits-no" },
            yn = if r.fits { "yes" } else { "no" },
        );
        for reason in &r.reasons {
            let group = reason.group.as_deref();
            let provider = reason.provider.map(|p| names.provider(p));
            let _ = write!(
                h,
                "<li data-test=\"reason\" data-code=\"{c}\" data-group=\"{g}\" data-provider=\"{p}\">\
                 <code>{c}</code>{gl}{on}: {d}</li>",
                c = reason.code.as_str(),
                g = esc(group.unwrap_or("")),
                p = esc(provider.as_deref().unwrap_or("")),
                on = provider
                    .as_deref()
                    .map_or(String::new(), |p| format!(" on <b>{}</b>", esc(p))),
                gl = match group {
                    Some("") => " (unsuffixed group)".to_owned(),
                    Some(g) => format!(" (group {})", esc(g)),
                    None => String::new(),
                },
                d = esc(&reason.detail),
            );
        }
        h.push_str("</ul></td></tr>");
    }
    h.push_str("</tbody></table>");
}

/// A query string as people read it: each parameter's name and value
/// percent-decoded (`required1=CUSTOM_FAKE_DEVICE,!CUSTOM_X`, not
/// `required1=CUSTOM_FAKE_DEVICE%2C%21CUSTOM_X`), joined by `&` as asked.
fn decoded(query: &str) -> String {
    form_urlencoded::parse(query.trim_start_matches('?').as_bytes())
        .map(|(k, v)| {
            if v.is_empty() && !query.contains(&format!("{k}=")) {
                k.into_owned()
            } else {
                format!("{k}={v}")
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::decoded;

    #[test]
    fn the_request_line_is_decoded() {
        assert_eq!(
            decoded(
                "resources=VCPU%3A1&required1=CUSTOM_FAKE_DEVICE%2C%21CUSTOM_X&group_policy=none"
            ),
            "resources=VCPU:1&required1=CUSTOM_FAKE_DEVICE,!CUSTOM_X&group_policy=none"
        );
    }
}
