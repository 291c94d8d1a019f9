//! The estate's list pages: hosts, one host's provider tree, consumers, ARQs,
//! Kubernetes nodes, and the change token the script polls. Each handler is the same
//! four steps: who is looking, may they (the APIs' rule), one `accel_store::estate`
//! read of one page, render.

use super::html::{bar, esc, list_head, when};
use super::{now, stamp, Answer, ListQuery, Rule, Shared};
use accel_core::policy::{cyborg, placement as rules};
use accel_store::accelerator::{cleaning, Scope};
use accel_store::estate::{activity, hosts as estate_hosts, Page};
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

/// What the hardware pages need: what listing providers needs in the API.
const HARDWARE: Rule = Rule::Placement(rules::RESOURCE_PROVIDERS_LIST);
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
            "<span class=\"chip\" data-test=\"trait\" data-trait=\"{0}\">{0}</span>",
            esc(t)
        );
    }
    h
}

/// One provider's row: name, device and health, bars, traits.
fn provider_row(h: &mut String, depth: usize, p: &estate_hosts::ProviderView, all_traits: bool) {
    let health = p.device.as_ref().map_or("", |d| d.health.as_str());
    let _ = write!(
        h,
        "<tr class=\"provider depth{d}\" data-test=\"provider-row\" data-provider=\"{name}\" \
         data-uuid=\"{uuid}\" data-depth=\"{depth}\" data-health=\"{hl}\"><td class=\"name\">{name}</td><td>",
        d = depth.min(4),
        name = esc(&p.name),
        uuid = esc(&p.uuid),
        hl = esc(health),
    );
    if let Some(d) = &p.device {
        let cls = if d.health == "ok" { "ok" } else { "bad" };
        let _ = write!(
            h,
            "{} {} {} <span class=\"health {cls}\">{}</span>{}",
            esc(&d.kind),
            esc(&d.vendor),
            esc(&d.model),
            esc(&d.health),
            if d.status == "enabled" {
                String::new()
            } else {
                format!(" <span class=\"health bad\">{}</span>", esc(&d.status))
            }
        );
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

pub(crate) async fn hosts(state: Shared, headers: HeaderMap, Query(q): Query<ListQuery>) -> Answer {
    let who = state.0.admit(&headers, HARDWARE).await?;
    let (search_text, window) = (q.search().map(str::to_owned), q.window());
    let page = state
        .0
        .read("the hosts", move |tx| {
            Box::pin(async move { estate_hosts::page(tx, search_text.as_deref(), window).await })
        })
        .await?;
    let now = now();
    let mut h = list_head(
        "/hosts",
        &q.q,
        "host, provider name or uuid, instance uuid",
        window,
        page.items.len(),
        page.total,
    );
    h.push_str(
        "<table class=\"hosts\"><thead><tr><th>Host / provider</th><th>Device</th>\
         <th>Inventory: used / capacity</th><th>Traits</th></tr></thead>",
    );
    for host in &page.items {
        let root = host.root();
        let _ = write!(
            h,
            "<tbody class=\"host\" data-test=\"host-row\" data-host=\"{name}\" data-uuid=\"{uuid}\" \
             data-providers=\"{n}\"><tr class=\"hosthead\"><th colspan=\"4\">\
             <a href=\"/hosts/{uuid}\">{name}</a> <span class=\"muted\">{n} providers · ",
            name = esc(&root.name),
            uuid = esc(&root.uuid),
            n = host.providers.len(),
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
            provider_row(&mut h, depth, p, false);
        }
        h.push_str("</tbody>");
    }
    h.push_str("</table>");
    if page.items.is_empty() {
        h.push_str("<p class=\"muted\" data-test=\"empty\">No host matches.</p>");
    }
    Ok(state.0.page(&who, "Hosts", "/hosts", &h).await)
}

pub(crate) async fn tree(state: Shared, headers: HeaderMap, Path(uuid): Path<String>) -> Answer {
    let who = state.0.admit(&headers, HARDWARE).await?;
    let Some((host, cleanings)) = state
        .0
        .read("the provider tree", move |tx| {
            Box::pin(async move {
                let Some(t) = estate_hosts::tree(tx, &uuid).await? else {
                    return Ok(None);
                };
                let c = cleaning::list(tx, Some(&t.root().name)).await?;
                Ok(Some((t, c)))
            })
        })
        .await?
    else {
        return Ok(super::error(
            StatusCode::NOT_FOUND,
            "No such resource provider.",
        ));
    };
    let root = host.root();
    let mut h = format!(
        "<p><a href=\"/hosts\">← hosts</a> · root <code>{}</code></p>\
         <table class=\"tree\" data-test=\"tree\"><thead><tr><th>Provider</th><th>Device</th>\
         <th>Inventory: used / capacity</th><th>Traits</th></tr></thead><tbody>",
        esc(&root.uuid)
    );
    for (depth, p) in host.with_depth() {
        provider_row(&mut h, depth, p, true);
    }
    h.push_str("</tbody></table><h2>Inventories in detail</h2><table class=\"inv\"><thead><tr>\
        <th>Provider</th><th>Class</th><th>Total</th><th>Reserved</th><th>Used</th><th>Capacity</th>\
        <th>Min</th><th>Max</th><th>Step</th><th>Ratio</th></tr></thead><tbody>");
    for p in &host.providers {
        for i in &p.inventories {
            let _ = write!(
                h,
                "<tr data-test=\"inventory\" data-provider=\"{}\" data-rc=\"{}\"><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&p.uuid),
                esc(&i.resource_class),
                esc(&p.name),
                esc(&i.resource_class),
                i.total,
                i.reserved,
                i.used,
                i.capacity,
                i.min_unit,
                i.max_unit,
                i.step_size,
                i.allocation_ratio
            );
        }
    }
    h.push_str("</tbody></table>");
    cleaning_table(&mut h, &cleanings);
    let title = format!("Provider tree of {}", root.name);
    Ok(state.0.page(&who, &title, "/hosts", &h).await)
}

/// The host's devices cleaned between tenants (those with a rule, or not clean):
/// state, reason, the last cleaning and how long it took.
fn cleaning_table(h: &mut String, rows: &[cleaning::DeviceCleaning]) {
    let shown: Vec<&cleaning::DeviceCleaning> = rows
        .iter()
        .filter(|c| c.has_rule || c.state != cleaning::CleaningState::Clean)
        .collect();
    if shown.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Cleaning between tenants</h2><table class=\"inv\"><thead><tr><th>Provider</th>\
         <th>State</th><th>Reason</th><th>Last cleaning</th><th>Duration</th></tr></thead><tbody>",
    );
    let now = now();
    for c in shown {
        let cls = match c.state {
            cleaning::CleaningState::Clean => "ok",
            _ => "bad",
        };
        let last = c
            .finished_at
            .map_or_else(|| "never".to_owned(), |t| when(t, now));
        let took = c
            .last_duration_ms
            .map_or_else(String::new, |ms| format!("{:.1} s", ms as f64 / 1000.0));
        let _ = write!(
            h,
            "<tr data-test=\"cleaning\" data-provider=\"{uuid}\" data-state=\"{state}\"><td>{name}</td>\
             <td><span class=\"health {cls}\">{state}</span></td><td>{reason}</td><td>{last}</td>\
             <td>{took}</td></tr>",
            uuid = esc(&c.rp_uuid),
            state = esc(c.state.as_str()),
            name = esc(&c.name),
            reason = esc(c.reason.as_deref().unwrap_or("")),
        );
    }
    h.push_str("</tbody></table>");
}

/// An ARQ's short line: state, profile, host, attach handle.
fn arq_cell(a: &activity::ArqView) -> String {
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
    let (search_text, window) = (q.search().map(str::to_owned), q.window());
    let page: Page<activity::ConsumerView> = state
        .0
        .read("the consumers", move |tx| {
            Box::pin(async move { activity::consumers(tx, search_text.as_deref(), window).await })
        })
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
            esc(&c.user),
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
                esc(&a.provider_name),
                a.used,
                esc(&a.resource_class)
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
    let (search_text, window) = (q.search().map(str::to_owned), q.window());
    let page = state
        .0
        .read("the ARQs", move |tx| {
            Box::pin(async move {
                activity::arqs(tx, &scope, search_text.as_deref(), now, window).await
            })
        })
        .await?;
    let mut h = list_head(
        "/arqs",
        &q.q,
        "instance, ARQ or device provider uuid, host, profile",
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
            dev = a.device_rp_uuid.as_deref().map_or(String::new(), |d| format!(
                " <a href=\"/hosts/{0}\"><code>{0}</code></a>",
                esc(d)
            )),
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
    let (search_text, window) = (q.search().map(str::to_owned), q.window());
    let (page, slots) = state
        .0
        .read("the Kubernetes slots", move |tx| {
            Box::pin(async move {
                let page =
                    estate_hosts::kubernetes_hosts(tx, search_text.as_deref(), window).await?;
                let slots = estate_hosts::kubernetes_slots(tx, &page.items).await?;
                Ok((page, slots))
            })
        })
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
