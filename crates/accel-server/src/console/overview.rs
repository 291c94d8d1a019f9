//! The overview: what an operator looks at first. Devices by type and vendor, how
//! many are used, free, unhealthy and reserved (`accel_store::estate::summary`, one
//! grouped read however large the estate), each count linking to the hosts page
//! filtered to those devices' hosts.

use super::html::{esc, qv};
use super::{names, read, Answer, Rule, Shared};
use accel_core::policy::placement as rules;
use accel_store::estate::summary;
use axum::http::HeaderMap;
use std::fmt::Write;

pub(crate) async fn overview(state: Shared, headers: HeaderMap) -> Answer {
    let who = state
        .0
        .admit(&headers, Rule::Placement(rules::RESOURCE_PROVIDERS_LIST))
        .await?;
    let rows = read("the device summary", state.0.estate().device_summary()).await?;
    let mut h = String::from(
        "<h2>Devices by type and vendor</h2><p class=\"muted\">Used: something is allocated on \
         the device. Free: healthy, nothing allocated, nothing reserved. Unhealthy: as its \
         agent reports, or no longer reported. Reserved: an inventory of it is reserved \
         (unhealthy, in maintenance, being cleaned, or by an operator).</p>\
         <table class=\"summary\" data-test=\"summary\"><thead><tr><th>Type</th><th>Vendor</th>\
         <th class=\"num\">Devices</th><th class=\"num\">Used</th><th class=\"num\">Free</th>\
         <th class=\"num\">Unhealthy</th><th class=\"num\">Reserved</th></tr></thead><tbody>",
    );
    let mut all = summary::DeviceCount {
        device_type: String::new(),
        vendor: String::new(),
        total: 0,
        used: 0,
        free: 0,
        unhealthy: 0,
        reserved: 0,
    };
    for r in &rows {
        let hosts = |health: &str| {
            let mut url = format!("/hosts?type={}", qv(&r.device_type));
            if !health.is_empty() {
                let _ = write!(url, "&health={health}");
            }
            esc(&url)
        };
        let _ = write!(
            h,
            "<tr data-test=\"summary-row\" data-type=\"{t}\" data-vendor=\"{v}\" data-total=\"{}\" \
             data-used=\"{}\" data-free=\"{}\" data-unhealthy=\"{}\" data-reserved=\"{}\">\
             <td><a href=\"{}\">{t}</a></td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            r.total,
            r.used,
            r.free,
            r.unhealthy,
            r.reserved,
            hosts(""),
            esc(&names::labelled(names::vendor(&r.vendor), &r.vendor)),
            r.total,
            r.used,
            r.free,
            if r.unhealthy > 0 {
                format!(
                    "<a class=\"bad\" href=\"{}\">{}</a>",
                    hosts("not_ok"),
                    r.unhealthy
                )
            } else {
                "0".to_owned()
            },
            r.reserved,
            t = esc(&r.device_type),
            v = esc(&r.vendor),
        );
        all.total += r.total;
        all.used += r.used;
        all.free += r.free;
        all.unhealthy += r.unhealthy;
        all.reserved += r.reserved;
    }
    let _ = write!(
        h,
        "</tbody><tfoot><tr data-test=\"summary-total\" data-total=\"{0}\" data-used=\"{1}\" \
         data-free=\"{2}\" data-unhealthy=\"{3}\" data-reserved=\"{4}\"><th colspan=\"2\">All devices</th>\
         <th class=\"num\">{0}</th><th class=\"num\">{1}</th><th class=\"num\">{2}</th>\
         <th class=\"num\">{3}</th><th class=\"num\">{4}</th></tr></tfoot></table>",
        all.total, all.used, all.free, all.unhealthy, all.reserved
    );
    if rows.is_empty() {
        h.push_str(
            "<p class=\"muted\" data-test=\"empty\">No agent has reported a device yet.</p>",
        );
    }
    Ok(state.0.page(&who, "Overview", "/overview", &h).await)
}
