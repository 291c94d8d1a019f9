//! The estate's list pages: hosts, consumers, ARQs, Kubernetes nodes, and the change
//! token the script polls (one host's page is [`super::host`]). Each handler is the same
//! four steps: who is looking, may they (the APIs' rule), one `accel_store::estate`
//! read of one page, render.

use super::html::{bar, esc, list_head, name, pager, when};
use super::{names, now, read, stamp, Answer, ListQuery, Rule, Shared};
use accel_core::accelerator::DeviceType;
use accel_core::policy::{cyborg, placement as rules};
use accel_store::accelerator::Scope;
use accel_store::estate::hosts::{HealthFilter, HostFilter};
use accel_store::estate::{activity, hosts as estate_hosts, KubernetesPage};
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

/// What the hardware pages need: what listing providers needs in the API.
pub(super) const HARDWARE: Rule = Rule::Placement(rules::RESOURCE_PROVIDERS_LIST);
use std::fmt::Write;

/// Traits worth a chip on the hosts page: the vendor, family, region and function
/// ones the agent sets (`CUSTOM_*`), and accelerator traits from os-traits.
fn shown_trait(t: &str) -> bool {
    t.starts_with("CUSTOM_") || t.starts_with("HW_GPU") || t.starts_with("COMPUTE_ACCELERATOR")
}

fn trait_chips(traits: &[String], all: bool) -> String {
    let mut h = String::new();
    for t in traits.iter().filter(|t| all || shown_trait(t)) {
        let _ = write!(
            h,
            "<span class=\"chip\" data-test=\"trait\" data-trait=\"{}\">{}</span>",
            esc(t),
            name(t)
        );
    }
    h
}

/// The device a provider models, for people: type, vendor and product by name
/// (ids where no name is known), health with the agent's reason and since when.
fn device_cell(h: &mut String, d: &estate_hosts::DeviceView, now: i64) {
    let cls = if d.health == "ok" { "ok" } else { "bad" };
    let vendor = names::labelled(names::vendor(&d.vendor), &d.vendor);
    let product = names::product(&d.vendor, &d.model).unwrap_or_else(|| d.model.clone());
    let _ = write!(
        h,
        "<span data-test=\"device\" data-vendor=\"{v}\" data-model=\"{m}\">{} \
         <span data-test=\"vendor-name\">{}</span> <span data-test=\"product-name\">{}</span></span> \
         <span class=\"health {cls}\">{}</span>{}",
        esc(&d.kind),
        esc(&vendor),
        esc(&product),
        esc(&d.health),
        if d.status == "enabled" {
            String::new()
        } else {
            format!(" <span class=\"health bad\">{}</span>", esc(&d.status))
        },
        v = esc(&d.vendor),
        m = esc(&d.model),
    );
    if d.health != "ok" {
        let since = d
            .health_since
            .map_or_else(String::new, |t| format!(" · since {}", when(t, now)));
        let reason = d
            .health_reason
            .as_deref()
            .unwrap_or("no reason given by the agent");
        let _ = write!(
            h,
            "<div class=\"reason\" data-test=\"health-reason\" data-since=\"{}\">\
             {}{since}</div>",
            d.health_since.map_or(String::new(), |t| t.to_string()),
            esc(reason),
        );
    }
}

/// One provider's row: name, device and health, bars, traits.
pub(super) fn provider_row(
    h: &mut String,
    depth: usize,
    p: &estate_hosts::ProviderView,
    all_traits: bool,
    now: i64,
) {
    let health = p.device.as_ref().map_or("", |d| d.health.as_str());
    let _ = write!(
        h,
        "<tr class=\"provider depth{d}\" data-test=\"provider-row\" data-provider=\"{n}\" \
         data-uuid=\"{uuid}\" data-depth=\"{depth}\" data-health=\"{hl}\">\
         <td class=\"name\" data-test=\"provider-name\">{shown}</td><td>",
        d = depth.min(4),
        n = esc(&p.name),
        shown = name(&p.name),
        uuid = esc(&p.uuid),
        hl = esc(health),
    );
    if let Some(d) = &p.device {
        device_cell(h, d, now);
    }
    h.push_str("</td><td>");
    for inv in &p.inventories {
        h.push_str(&bar(
            &p.uuid,
            &inv.resource_class,
            inv.used,
            inv.capacity,
            inv.total,
            inv.reserved,
        ));
    }
    let _ = write!(
        h,
        "</td><td>{}</td></tr>",
        trait_chips(&p.traits, all_traits)
    );
}

/// `/hosts`' query: the list's search and paging, and the device filters.
#[derive(serde::Deserialize, Default)]
pub(crate) struct HostsQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
    /// A device type (`GPU`, `FPGA`, ...): hosts with such a device.
    #[serde(default, rename = "type")]
    device_type: String,
    /// `ok`, `unhealthy`, `vanished` or `not_ok`: hosts with a device so.
    #[serde(default)]
    health: String,
}

/// The health filter's choices: value and label.
const HEALTH_CHOICES: &[(&str, &str)] = &[
    ("", "any health"),
    ("ok", "ok"),
    ("not_ok", "unhealthy or vanished"),
    ("unhealthy", "unhealthy"),
    ("vanished", "vanished"),
];

/// The hosts page's form (a plain GET: it works without the script) and the start
/// of its pager's links, which keep the filters.
fn hosts_form(
    q: &str,
    device_type: Option<DeviceType>,
    health: Option<HealthFilter>,
) -> (String, String) {
    let mut h = format!(
        "<form method=\"get\" action=\"/hosts\" class=\"search\" data-test=\"hosts-filter\">\
         <input type=\"search\" name=\"q\" value=\"{}\" \
         placeholder=\"host, provider name or uuid, instance uuid\" data-test=\"search\">\
         <select name=\"type\" data-test=\"filter-type\"><option value=\"\">any device type</option>",
        esc(q)
    );
    for t in DeviceType::ALL {
        let sel = if device_type == Some(*t) {
            " selected"
        } else {
            ""
        };
        let _ = write!(h, "<option value=\"{0}\"{sel}>{0}</option>", t.as_str());
    }
    h.push_str("</select><select name=\"health\" data-test=\"filter-health\">");
    for (v, label) in HEALTH_CHOICES {
        let sel = if health.map_or("", |x| x.as_str()) == *v {
            " selected"
        } else {
            ""
        };
        let _ = write!(h, "<option value=\"{v}\"{sel}>{label}</option>");
    }
    h.push_str("</select><button type=\"submit\">Filter</button></form>");
    let mut base = String::from("/hosts?");
    for (k, v) in [
        ("q", q),
        ("type", device_type.map_or("", |t| t.as_str())),
        ("health", health.map_or("", |x| x.as_str())),
    ] {
        if !v.is_empty() {
            let _ = write!(base, "{k}={}&", super::html::qv(v));
        }
    }
    (h, base)
}

pub(crate) async fn hosts(
    state: Shared,
    headers: HeaderMap,
    Query(q): Query<HostsQuery>,
) -> Answer {
    let who = state.0.admit(&headers, HARDWARE).await?;
    let list = ListQuery {
        q: q.q.clone(),
        offset: q.offset,
        limit: q.limit,
    };
    // An unknown choice is no filter (the form offers only known ones).
    let device_type = DeviceType::parse(q.device_type.trim());
    let health = HealthFilter::parse(q.health.trim());
    let filter = HostFilter {
        search: list.search().map(str::to_owned),
        device_type: device_type.map(|t| t.as_str().to_owned()),
        health,
    };
    let window = list.window();
    let page = read("the hosts", state.0.estate().hosts(&filter, window)).await?;
    let now = now();
    let (mut h, base) = hosts_form(&q.q, device_type, health);
    h.push_str(&pager(
        &base,
        window.offset,
        window.limit,
        page.items.len(),
        page.total,
    ));
    h.push_str(
        "<table class=\"hosts\"><thead><tr><th>Host / provider</th><th>Device</th>\
         <th>Inventory: used / capacity</th><th>Traits</th></tr></thead>",
    );
    for host in &page.items {
        let root = host.root();
        let _ = write!(
            h,
            "<tbody class=\"host\" data-test=\"host-row\" data-host=\"{n}\" data-uuid=\"{uuid}\" \
             data-providers=\"{count}\"><tr class=\"hosthead\"><th colspan=\"4\">\
             <a href=\"/hosts/{uuid}\">{shown}</a> <span class=\"muted\">{count} providers · ",
            n = esc(&root.name),
            shown = name(&root.name),
            uuid = esc(&root.uuid),
            count = host.providers.len(),
        );
        match host.last_report {
            Some(t) => {
                let _ = write!(
                    h,
                    "last agent report <span data-test=\"last-report\" data-epoch=\"{t}\">{}</span>",
                    when(t, now)
                );
            }
            None => h.push_str("no agent report"),
        }
        h.push_str("</span></th></tr>");
        for (depth, p) in host.with_depth() {
            provider_row(&mut h, depth, p, false, now);
        }
        h.push_str("</tbody>");
    }
    h.push_str("</table>");
    if page.items.is_empty() {
        h.push_str("<p class=\"muted\" data-test=\"empty\">No host matches.</p>");
    }
    Ok(state.0.page(&who, "Hosts", "/hosts", &h).await)
}

/// An ARQ's device, by its provider's name, linked to its page.
pub(super) fn device_link(a: &activity::ArqView) -> String {
    match (&a.device_rp_uuid, &a.device_name) {
        (Some(u), Some(n)) => format!(
            "<a href=\"/hosts/{}\" data-test=\"arq-device\" data-provider=\"{}\">{}</a>",
            esc(u),
            esc(u),
            name(n)
        ),
        // A provider that no longer exists: its uuid is all there is.
        (Some(u), None) => format!(
            "<code data-test=\"arq-device\" data-provider=\"{0}\">{0}</code>",
            esc(u)
        ),
        _ => String::new(),
    }
}

/// An ARQ's short line: state, profile, host, attach handle.
pub(super) fn arq_cell(a: &activity::ArqView) -> String {
    format!(
        "<span class=\"arq\" data-test=\"arq\" data-arq=\"{}\" data-state=\"{}\">{} <b>{}</b> {}{}</span>",
        esc(&a.uuid),
        esc(&a.state),
        esc(&a.profile),
        esc(&a.state),
        esc(a.hostname.as_deref().unwrap_or("")),
        a.attach_handle
            .as_ref()
            .map_or(String::new(), |(u, t)| format!(" · {} {}", esc(t), esc(u)))
    )
}

pub(crate) async fn consumers(
    state: Shared,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Answer {
    let who = state
        .0
        .admit(&headers, Rule::Placement(rules::ALLOCATIONS_LIST))
        .await?;
    let window = q.window();
    let page = read(
        "the consumers",
        state.0.estate().consumers(q.search(), window),
    )
    .await?;
    let mut h = list_head(
        "/consumers",
        &q.q,
        "instance or pod uuid, host or provider",
        window,
        page.items.len(),
        page.total,
    );
    h.push_str(
        "<table class=\"consumers\"><thead><tr><th>Consumer</th><th>Kind</th><th>Project / user</th>\
         <th>Allocations</th><th>ARQs and attach handles</th></tr></thead><tbody>",
    );
    for c in &page.items {
        let kind = if c.pod_host.is_some() { "pod" } else { "vm" };
        let _ = write!(
            h,
            "<tr data-test=\"consumer-row\" data-consumer=\"{u}\" data-kind=\"{kind}\"><td><code>{u}</code></td>\
             <td>{}</td><td>{} / {}</td><td>",
            match &c.pod_host {
                Some(host) => format!("pod on {}", esc(host)),
                None => "instance".to_owned(),
            },
            esc(&c.project),
            if c.user.is_empty() { "-".to_owned() } else { esc(&c.user) },
            u = esc(&c.uuid),
        );
        for a in &c.allocations {
            let _ = write!(
                h,
                "<div data-test=\"allocation\" data-provider=\"{}\" data-rc=\"{}\" data-used=\"{}\">\
                 <a href=\"/hosts/{}\">{}</a> {} × {}</div>",
                esc(&a.provider_uuid),
                esc(&a.resource_class),
                a.used,
                esc(&a.provider_uuid),
                name(&a.provider_name),
                a.used,
                name(&a.resource_class)
            );
        }
        if c.allocations.is_empty() {
            h.push_str(
                "<span class=\"muted\" data-test=\"no-allocation\">no allocation in Placement</span>",
            );
        }
        h.push_str("</td><td>");
        for a in &c.arqs {
            h.push_str(&arq_cell(a));
        }
        h.push_str("</td></tr>");
    }
    h.push_str("</tbody></table>");
    Ok(state.0.page(&who, "Consumers", "/consumers", &h).await)
}

pub(crate) async fn arqs(state: Shared, headers: HeaderMap, Query(q): Query<ListQuery>) -> Answer {
    let who = state
        .0
        .admit(&headers, Rule::Cyborg(cyborg::ARQ_GET_ALL))
        .await?;
    // As the API: an admin sees every project's ARQs, anyone else their project's.
    let scope = if who.is_admin {
        Scope::All
    } else {
        Scope::Project(who.creds.project_id().unwrap_or_default().to_owned())
    };
    let now = now();
    let window = q.window();
    let page = read(
        "the ARQs",
        state.0.estate().arqs(&scope, q.search(), now, window),
    )
    .await?;
    let mut h = list_head(
        "/arqs",
        &q.q,
        "instance, ARQ or device provider uuid, host, profile, device name",
        window,
        page.items.len(),
        page.total,
    );
    if !state.0.accel.nova_configured {
        h.push_str(
            "<p class=\"notice\" data-test=\"no-nova\">No Nova endpoint is configured \
             (<code>nova_url</code> or <code>[nova]</code>): accelerator-request-bound events \
             are recorded (<code>no_endpoint</code>), not sent. Binds themselves work.</p>",
        );
    }
    h.push_str(
        "<table class=\"arqs\"><thead><tr><th>ARQ</th><th>State</th><th>Instance</th><th>Project</th>\
         <th>Profile</th><th>Host / device</th><th>Bind</th><th>Nova event</th><th>Failure</th>\
         </tr></thead><tbody>",
    );
    for a in &page.items {
        let stuck = a.is_stuck_or_failed(now);
        let secs = a.bind_seconds(now);
        let event = a.event.as_ref().map_or("", |(s, _)| s.as_str());
        // `no_endpoint` is the deployment's state (the banner above), not this ARQ's
        // failure; rows recorded before said so in their error.
        let failure = a
            .job
            .as_ref()
            .and_then(|j| j.error.clone())
            .or_else(|| {
                a.event
                    .as_ref()
                    .filter(|(s, _)| s != "no_endpoint")
                    .and_then(|(_, e)| e.clone())
            })
            .unwrap_or_default();
        let _ = write!(
            h,
            "<tr class=\"{cls}\" data-test=\"arq-row\" data-arq=\"{u}\" data-state=\"{st}\" data-stuck=\"{stuck}\" \
             data-project=\"{pr}\" data-instance=\"{inst}\" data-bind-seconds=\"{bs}\" data-event=\"{ev}\">\
             <td><code>{u}</code></td><td>{st}</td><td><code>{inst}</code></td><td>{pr}</td><td>{prof}</td>\
             <td>{host}{dev}</td><td>{bind}</td><td>{ev}</td><td>{fail}</td></tr>",
            cls = if stuck { "stuck" } else { "" },
            u = esc(&a.uuid),
            st = esc(&a.state),
            pr = esc(a.project_id.as_deref().unwrap_or("")),
            inst = esc(a.instance_uuid.as_deref().unwrap_or("")),
            bs = secs.map_or(String::new(), |s| s.to_string()),
            ev = esc(event),
            prof = esc(&a.profile),
            host = esc(a.hostname.as_deref().unwrap_or("")),
            dev = match device_link(a) {
                d if d.is_empty() => d,
                d => format!(" {d}"),
            },
            bind = match (secs, &a.job) {
                (Some(s), Some(j)) => format!("{} · {s} s", esc(&j.state)),
                _ => String::new(),
            },
            fail = esc(&failure),
        );
    }
    h.push_str("</tbody></table>");
    Ok(state
        .0
        .page(&who, "Accelerator requests", "/arqs", &h)
        .await)
}

pub(crate) async fn kubernetes(
    state: Shared,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Answer {
    let who = state.0.admit(&headers, HARDWARE).await?;
    let window = q.window();
    let KubernetesPage { hosts: page, slots } = read(
        "the Kubernetes slots",
        state.0.estate().kubernetes(q.search(), window),
    )
    .await?;
    let mut h = list_head(
        "/kubernetes",
        &q.q,
        "node, pod (namespace/name) or device address",
        window,
        page.items.len(),
        page.total,
    );
    for host in &page.items {
        let mine: Vec<&estate_hosts::SlotView> =
            slots.iter().filter(|s| &s.hostname == host).collect();
        let pooled = mine.iter().filter(|s| s.usage.starts_with("C:")).count();
        let _ = write!(
            h,
            "<section class=\"k8s\" data-test=\"k8s-node\" data-host=\"{n}\" data-slots=\"{}\" \
             data-instance-level=\"{}\" data-configuration-level=\"{pooled}\"><h2>{n}</h2>\
             <p>{} slots held: {} instance-level (a whole device), {pooled} configuration-level (pooled)</p>\
             <table><thead><tr><th>Slot</th><th>Kind</th><th>Device</th><th>Pod</th></tr></thead><tbody>",
            mine.len(),
            mine.len() - pooled,
            mine.len(),
            mine.len() - pooled,
            n = esc(host),
        );
        for s in mine {
            let kind = if s.usage.starts_with("C:") {
                "configuration"
            } else {
                "instance"
            };
            let pod = s.pod.as_deref().unwrap_or("");
            let _ = write!(
                h,
                "<tr data-test=\"slot\" data-slot=\"{sl}\" data-kind=\"{kind}\" data-pod=\"{p}\"><td>{sl}</td>\
                 <td>{kind}</td><td>{}</td><td>{}</td></tr>",
                esc(s.device.as_deref().unwrap_or("")),
                if pod.is_empty() { "(not listed by kubelet yet)".to_owned() } else { esc(pod) },
                sl = esc(&s.slot),
                p = esc(pod),
            );
        }
        h.push_str("</tbody></table></section>");
    }
    if page.items.is_empty() {
        h.push_str("<p class=\"muted\" data-test=\"empty\">No Kubernetes node holds a slot.</p>");
    }
    Ok(state.0.page(&who, "Kubernetes", "/kubernetes", &h).await)
}

/// `GET /changes`: the change token, as text (the script compares it with the
/// page's `data-stamp`).
pub(crate) async fn changes(state: Shared, headers: HeaderMap) -> Response {
    if let Err(r) = state.0.who(&headers).await {
        return r;
    }
    match stamp(&state.0.app).await {
        Some(s) => {
            let mut r = super::html(StatusCode::OK, s);
            r.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
        None => super::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "The change token cannot be read.",
        ),
    }
}
