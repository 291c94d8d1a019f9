//! One host's page (`/hosts/{uuid}`, from any provider of its tree): the tree with
//! every inventory in detail, its partitioned GPUs' ledgers ([`super::ledger`]: the
//! asked GPU's alone on a GPU's page), its devices' cleanings, the instances, pods and ARQs on
//! it, and the device history (`accel_store::accelerator::history`): one device's
//! when the uuid is a device provider's, else all of the host's devices'. One store
//! read (`Estate::host`, one snapshot), each list bounded ([`ON_HOST`]).

use super::html::{esc, name, when};
use super::pages::{arq_cell, device_link, provider_row, HARDWARE};
use super::{now, read, Answer, Shared};
use accel_store::accelerator::{cleaning, history};
use accel_store::estate::{hosts as estate_hosts, HostPage};
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use std::fmt::Write;

/// How many of a host's consumers, ARQs and history rows its page shows (the
/// consumers and ARQs pages, searched by the host, list them all).
const ON_HOST: u64 = 50;

pub(crate) async fn tree(state: Shared, headers: HeaderMap, Path(uuid): Path<String>) -> Answer {
    let who = state.0.admit(&headers, HARDWARE).await?;
    let Some(page) = read("the provider tree", state.0.estate().host(&uuid, ON_HOST)).await? else {
        return Ok(super::error(
            StatusCode::NOT_FOUND,
            "No such resource provider.",
        ));
    };
    let host = &page.tree;
    let now = now();
    let root = host.root();
    let mut h = format!(
        "<p><a href=\"/hosts\">← hosts</a> · root <code>{}</code></p>\
         <table class=\"tree\" data-test=\"tree\"><thead><tr><th>Provider</th><th>Device</th>\
         <th>Inventory: used / capacity</th><th>Traits</th></tr></thead><tbody>",
        esc(&root.uuid)
    );
    for (depth, p) in host.with_depth() {
        provider_row(&mut h, depth, p, true, now);
    }
    h.push_str("</tbody></table>");
    super::ledger::ledgers(&mut h, &page.ledgers);
    h.push_str("<h2>Inventories in detail</h2><table class=\"inv\"><thead><tr>\
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
                name(&p.name),
                name(&i.resource_class),
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
    cleaning_table(&mut h, &page.cleanings);
    on_host(&mut h, &root.name, &page);
    history_table(&mut h, host, &uuid, &page.history, now);
    let title = format!("Provider tree of {}", root.name);
    Ok(state.0.page(&who, &title, "/hosts", &h).await)
}

/// The instances and pods on the host (allocating from its tree, or with ARQs bound
/// to it) and its ARQs, each list linking to the whole list searched by the host.
fn on_host(h: &mut String, host: &str, more: &HostPage) {
    let _ = write!(
        h,
        "<h2>Instances and pods on this host</h2><p class=\"muted\" data-test=\"host-consumers\" \
         data-total=\"{n}\">{n} in all{}</p>",
        if more.consumers.total > more.consumers.items.len() as i64 {
            format!(
                "; the first {} here, <a href=\"/consumers?q={}\">all on the consumers page</a>",
                more.consumers.items.len(),
                esc(&super::html::qv(host))
            )
        } else {
            String::new()
        },
        n = more.consumers.total,
    );
    if !more.consumers.items.is_empty() {
        h.push_str(
            "<table class=\"consumers\"><thead><tr><th>Consumer</th><th>Kind</th><th>Project</th>\
             <th>Here</th><th>ARQs</th></tr></thead><tbody>",
        );
        for c in &more.consumers.items {
            let kind = if c.pod_host.is_some() { "pod" } else { "vm" };
            let _ = write!(
                h,
                "<tr data-test=\"host-consumer\" data-consumer=\"{u}\" data-kind=\"{kind}\">\
                 <td><a href=\"/consumers?q={u}\"><code>{u}</code></a></td><td>{}</td><td>{}</td><td>",
                if kind == "pod" { "pod" } else { "instance" },
                esc(&c.project),
                u = esc(&c.uuid),
            );
            for a in &c.allocations {
                let _ = write!(
                    h,
                    "<div>{} × {} on {}</div>",
                    a.used,
                    name(&a.resource_class),
                    name(&a.provider_name)
                );
            }
            h.push_str("</td><td>");
            for a in &c.arqs {
                h.push_str(&arq_cell(a));
            }
            h.push_str("</td></tr>");
        }
        h.push_str("</tbody></table>");
    }
    let _ = write!(
        h,
        "<h2>ARQs on this host</h2><p class=\"muted\" data-test=\"host-arqs\" data-total=\"{n}\">\
         {n} in all{}</p>",
        if more.arqs.total > more.arqs.items.len() as i64 {
            format!(
                "; the newest {} here, <a href=\"/arqs?q={}\">all on the ARQs page</a>",
                more.arqs.items.len(),
                esc(&super::html::qv(host))
            )
        } else {
            String::new()
        },
        n = more.arqs.total,
    );
    if !more.arqs.items.is_empty() {
        h.push_str(
            "<table class=\"arqs\"><thead><tr><th>ARQ</th><th>State</th><th>Instance</th>\
             <th>Profile</th><th>Device</th></tr></thead><tbody>",
        );
        for a in &more.arqs.items {
            let _ = write!(
                h,
                "<tr data-test=\"host-arq\" data-arq=\"{u}\" data-state=\"{st}\"><td><code>{u}</code></td>\
                 <td>{st}</td><td><code>{inst}</code></td><td>{prof}</td><td>{dev}</td></tr>",
                u = esc(&a.uuid),
                st = esc(&a.state),
                inst = esc(a.instance_uuid.as_deref().unwrap_or("")),
                prof = esc(&a.profile),
                dev = device_link(a),
            );
        }
        h.push_str("</tbody></table>");
    }
}

/// The device history: every device of the tree, or the one device whose provider
/// the page was asked for.
fn history_table(
    h: &mut String,
    host: &estate_hosts::HostView,
    asked: &str,
    events: &[history::Event],
    now: i64,
) {
    let one = host
        .providers
        .iter()
        .find(|p| p.uuid == asked && p.device.is_some());
    let _ = write!(
        h,
        "<h2>Device history{}</h2>",
        one.map_or(String::new(), |p| format!(" of {}", name(&p.name)))
    );
    if events.is_empty() {
        h.push_str("<p class=\"muted\" data-test=\"history-empty\">Nothing recorded yet.</p>");
        return;
    }
    // Events name the provider they are about; whole-device events the device's
    // top provider.
    let provider_name = |e: &history::Event| {
        let by_rp = e
            .rp_uuid
            .as_deref()
            .and_then(|u| host.providers.iter().find(|p| p.uuid == u));
        let by_device = || {
            host.providers
                .iter()
                .find(|p| p.device.as_ref().is_some_and(|d| d.uuid == e.device_uuid))
        };
        by_rp
            .or_else(by_device)
            .map_or_else(|| esc(&e.device_uuid), |p| name(&p.name))
    };
    h.push_str(
        "<table class=\"history\" data-test=\"history\"><thead><tr><th>When</th><th>Device</th>\
         <th>What</th><th>Detail</th></tr></thead><tbody>",
    );
    for e in events {
        let _ = write!(
            h,
            "<tr data-test=\"history-row\" data-kind=\"{k}\" data-device=\"{d}\" data-epoch=\"{t}\">\
             <td>{when}</td><td>{p}</td><td>{k}</td><td>{detail}</td></tr>",
            k = esc(&e.kind),
            d = esc(&e.device_uuid),
            t = e.at,
            when = when(e.at, now),
            p = provider_name(e),
            detail = esc(&e.detail),
        );
    }
    h.push_str("</tbody></table>");
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
