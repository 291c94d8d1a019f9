//! `--verify`: upstream's answers against accel's, read by read, after an import (or
//! an export: the same comparison with the sides' roles swapped).
//!
//! Both APIs are asked the same GETs at microversion 1.39 and the JSON bodies
//! compared after one normalisation: arrays are compared as sets (Placement
//! promises no order for providers, traits, aggregates or candidates) and `links` are
//! dropped (hrefs, not data). Compared: the provider list; every provider's
//! inventories, usages, traits, aggregates and allocations; every consumer found in
//! those allocations (`GET /allocations/{consumer}`); every project's and project and
//! user's usages; the custom classes and traits and the traits in use; and a sample
//! of allocation-candidate queries built from the imported data (each class alone,
//! with a trait, with an aggregate, two classes in one tree, two granular groups
//! isolated). Every difference is printed.

use anyhow::Context;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The microversion both sides are asked at: the newest both speak.
const MICROVERSION: &str = "placement 1.39";

/// One Placement API.
pub struct Side {
    name: &'static str,
    base: String,
    client: reqwest::Client,
    token: String,
    /// The `openstack-api-version` header's value.
    microversion: &'static str,
    /// More headers sent with every GET (upstream Cyborg without keystonemiddleware
    /// takes its identity from `X-User-Id`, `X-Project-Id` and `X-Roles`).
    headers: Vec<(&'static str, String)>,
}

impl Side {
    /// `token` goes in `x-auth-token`: a Keystone token, or noauth2's `admin`.
    pub fn new(name: &'static str, base: &str, token: String) -> anyhow::Result<Side> {
        Ok(Side {
            name,
            base: base.trim_end_matches('/').to_owned(),
            client: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(300))
                .build()?,
            token,
            microversion: MICROVERSION,
            headers: Vec::new(),
        })
    }

    /// This side asked at `microversion` (`accelerator 2.3`) with `headers` besides
    /// the token.
    pub fn with(
        mut self,
        microversion: &'static str,
        headers: Vec<(&'static str, String)>,
    ) -> Side {
        self.microversion = microversion;
        self.headers = headers;
        self
    }

    async fn get(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .client
            .get(&url)
            .header("x-auth-token", &self.token)
            .header("openstack-api-version", self.microversion)
            .header("accept", "application/json");
        for (k, v) in &self.headers {
            req = req.header(*k, v);
        }
        let r = req
            .send()
            .await
            .with_context(|| format!("{}: GET {url}", self.name))?;
        let status = r.status().as_u16();
        let body = r
            .text()
            .await
            .with_context(|| format!("{}: GET {url}", self.name))?;
        let v = serde_json::from_str(&body).unwrap_or(Value::String(body));
        Ok((status, v))
    }
}

/// `v` with `links` removed and every array sorted (by its items' canonical text).
pub fn normalise(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != "links")
                .map(|(k, v)| (k, normalise(v)))
                .collect();
            Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(a) => {
            let mut items: Vec<Value> = a.iter().map(normalise).collect();
            items.sort_by_cached_key(|x| x.to_string());
            Value::Array(items)
        }
        other => other.clone(),
    }
}

/// The comparison's state: the two sides and the differences found so far.
pub struct Compare<'a> {
    pub reference: &'a Side,
    pub candidate: &'a Side,
    pub differences: usize,
    pub reads: usize,
}

impl Compare<'_> {
    /// GETs `path` on both sides; a difference in status or normalised body is
    /// printed. Returns the reference side's body.
    pub(crate) async fn same(&mut self, path: &str) -> anyhow::Result<Value> {
        let (a, b) = tokio::join!(self.reference.get(path), self.candidate.get(path));
        let ((sa, va), (sb, vb)) = (a?, b?);
        self.reads += 1;
        let (na, nb) = (normalise(&va), normalise(&vb));
        if sa != sb || na != nb {
            self.differences += 1;
            println!("DIFFERENT GET {path}");
            if sa != sb {
                println!(
                    "  status: {} {sa}, {} {sb}",
                    self.reference.name, self.candidate.name
                );
            }
            let mut lines = Vec::new();
            differences(
                &na,
                &nb,
                "",
                (self.reference.name, self.candidate.name),
                &mut lines,
            );
            let shown = lines.len().min(MAX_LINES);
            for l in &lines[..shown] {
                println!("  at {l}");
            }
            if lines.len() > shown {
                println!("  ... and {} more", lines.len() - shown);
            }
        }
        Ok(va)
    }
}

/// Differing places printed per read.
const MAX_LINES: usize = 12;

/// Where normalised `a` (side `names.0`'s) and `b` differ, as `PATH: upstream X,
/// accel Y` (arrays are sorted, so an index names a rank, not a position).
fn differences(a: &Value, b: &Value, at: &str, names: (&str, &str), out: &mut Vec<String>) {
    let (ra, rb) = names;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let here = format!("{at}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => differences(p, q, &here, names, out),
                    (Some(p), None) => out.push(format!("{here}: only {ra} has it: {p}")),
                    (None, Some(q)) => out.push(format!("{here}: only {rb} has it: {q}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(p, q, &format!("{at}[{i}]"), names, out);
            }
        }
        _ if a != b => {
            let at = if at.is_empty() { "/" } else { at };
            out.push(format!("{at}: {ra} {a}, {rb} {b}"))
        }
        _ => {}
    }
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn keys(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Compares every read of the module doc; returns the number of differences.
pub async fn compare(reference: &Side, candidate: &Side) -> anyhow::Result<usize> {
    let mut c = Compare {
        reference,
        candidate,
        differences: 0,
        reads: 0,
    };
    let list = c.same("/resource_providers").await?;
    let providers: Vec<String> = list
        .get("resource_providers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| p.get("uuid").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut consumers = BTreeSet::new();
    // (class -> amount one candidate asks), traits and aggregates in use, per root.
    let mut classes: BTreeMap<String, i64> = BTreeMap::new();
    let mut traits_in_use = BTreeSet::new();
    let mut aggregates_in_use = BTreeSet::new();
    let mut root_classes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let root_of: BTreeMap<String, String> = list
        .get("resource_providers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    Some((
                        p.get("uuid")?.as_str()?.to_owned(),
                        p.get("root_provider_uuid")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    for rp in &providers {
        c.same(&format!("/resource_providers/{rp}")).await?;
        let inv = c
            .same(&format!("/resource_providers/{rp}/inventories"))
            .await?;
        if let Some(m) = inv.get("inventories").and_then(Value::as_object) {
            for (class, i) in m {
                let min = i.get("min_unit").and_then(Value::as_i64).unwrap_or(1);
                let step = i
                    .get("step_size")
                    .and_then(Value::as_i64)
                    .unwrap_or(1)
                    .max(1);
                let amount = (min + step - 1) / step * step;
                classes.entry(class.clone()).or_insert(amount);
                if let Some(root) = root_of.get(rp) {
                    root_classes
                        .entry(root.clone())
                        .or_default()
                        .insert(class.clone());
                }
            }
        }
        c.same(&format!("/resource_providers/{rp}/usages")).await?;
        let t = c.same(&format!("/resource_providers/{rp}/traits")).await?;
        traits_in_use.extend(strings(&t, "traits"));
        let g = c
            .same(&format!("/resource_providers/{rp}/aggregates"))
            .await?;
        aggregates_in_use.extend(strings(&g, "aggregates"));
        let al = c
            .same(&format!("/resource_providers/{rp}/allocations"))
            .await?;
        consumers.extend(keys(&al, "allocations"));
    }
    let mut owners = BTreeSet::new();
    for consumer in &consumers {
        let v = c.same(&format!("/allocations/{consumer}")).await?;
        if let (Some(p), Some(u)) = (
            v.get("project_id").and_then(Value::as_str),
            v.get("user_id").and_then(Value::as_str),
        ) {
            owners.insert((p.to_owned(), u.to_owned()));
        }
    }
    let projects: BTreeSet<&String> = owners.iter().map(|(p, _)| p).collect();
    for p in &projects {
        c.same(&format!("/usages?project_id={p}")).await?;
    }
    for (p, u) in &owners {
        c.same(&format!("/usages?project_id={p}&user_id={u}"))
            .await?;
    }
    c.same("/resource_classes").await?;
    c.same("/traits?name=startswith:CUSTOM_").await?;
    c.same("/traits?associated=true").await?;
    for q in candidate_queries(&classes, &traits_in_use, &aggregates_in_use, &root_classes) {
        c.same(&format!("/allocation_candidates?{q}")).await?;
    }
    println!(
        "verify: {} providers, {} consumers, {} projects, {} reads compared: {} difference(s)",
        providers.len(),
        consumers.len(),
        projects.len(),
        c.reads,
        c.differences
    );
    Ok(c.differences)
}

/// A sample of candidate queries over what the data holds: every class alone (at its
/// smallest valid amount), the first classes with a trait and with an aggregate in
/// use, the first root's two classes together, and two granular groups isolated.
fn candidate_queries(
    classes: &BTreeMap<String, i64>,
    traits: &BTreeSet<String>,
    aggregates: &BTreeSet<String>,
    root_classes: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut out: Vec<String> = classes
        .iter()
        .map(|(c, n)| format!("resources={c}:{n}"))
        .collect();
    let first: Vec<(&String, &i64)> = classes.iter().take(3).collect();
    for (c, n) in &first {
        for t in traits.iter().take(2) {
            out.push(format!("resources={c}:{n}&required={t}"));
            out.push(format!("resources={c}:{n}&required=!{t}"));
        }
        for a in aggregates.iter().take(2) {
            out.push(format!("resources={c}:{n}&member_of={a}"));
        }
    }
    if let Some(two) = root_classes.values().find(|s| s.len() >= 2) {
        let two: Vec<&String> = two.iter().take(2).collect();
        let (a, b) = (two[0], two[1]);
        let (na, nb) = (classes[a], classes[b]);
        out.push(format!("resources={a}:{na},{b}:{nb}"));
        out.push(format!(
            "resources1={a}:{na}&resources2={b}:{nb}&group_policy=isolate"
        ));
        out.push(format!(
            "resources1={a}:{na}&resources2={b}:{nb}&group_policy=none"
        ));
    }
    out
}

/// Starts accel's Placement API over `store` in this process (127.0.0.1, port 0,
/// noauth, no workers), compares `upstream` with it, and stops it. Returns the
/// number of differences.
pub async fn against_local(store: accel_store::Store, upstream: &str) -> anyhow::Result<usize> {
    let app = accel_server::app::App::builder(store)
        .workers(None)
        .build()
        .await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let local = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.serve(listener, None, async move {
        let _ = stopped.await;
    }));
    // Upstream behind Keystone takes $OS_TOKEN; the local accel runs noauth.
    let token = std::env::var("OS_TOKEN").unwrap_or_else(|_| "admin".to_owned());
    let upstream_side = Side::new("upstream", upstream, token)?;
    let accel_side = Side::new("accel", &local, "admin".to_owned())?;
    let result = compare(&upstream_side, &accel_side).await;
    let _ = stop.send(());
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the verification server stopped with an error"),
        Err(e) => tracing::warn!(error = %e, "the verification server's task failed"),
    }
    result
}

#[cfg(test)]
mod tests {
    use super::normalise;
    use serde_json::json;

    #[test]
    fn order_and_links_do_not_count_but_values_do() {
        let a = json!({"traits": ["B", "A"], "links": [{"href": "/x"}], "g": 1});
        let b = json!({"g": 1, "traits": ["A", "B"]});
        assert_eq!(normalise(&a), normalise(&b));
        let c = json!({"g": 2, "traits": ["A", "B"]});
        assert_ne!(normalise(&a), normalise(&c));
    }
}
