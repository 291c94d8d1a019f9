//! `accel import cyborg --verify` (and `accel import verify-cyborg`): upstream
//! Cyborg's answers against accel's accelerator API, read by read.
//!
//! Both are asked the same GETs at microversion 2.3 (the newest both speak), and the
//! JSON bodies compared as [`super::verify`] compares Placement's: arrays as sets,
//! `links` dropped (hrefs name the host asked). Compared: the device profile list and
//! every profile by uuid; the ARQ list, every ARQ, and for every instance its ARQs
//! and its resolved ARQs (`?instance=..&bind_state=resolved`, Nova's poll); the
//! device, deployable and attribute lists and each of them by uuid. Every difference
//! is printed.

use super::verify::{Compare, Side};
use serde_json::Value;
use std::collections::BTreeSet;

const MICROVERSION: &str = "accelerator 2.3";

fn uuids(v: &Value, key: &str, field: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.get(field).and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
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
    let profiles = c.same("/v2/device_profiles").await?;
    let profiles = uuids(&profiles, "device_profiles", "uuid");
    for u in &profiles {
        c.same(&format!("/v2/device_profiles/{u}")).await?;
    }
    let arqs = c.same("/v2/accelerator_requests").await?;
    let instances: BTreeSet<String> = uuids(&arqs, "arqs", "instance_uuid").into_iter().collect();
    let arqs = uuids(&arqs, "arqs", "uuid");
    for u in &arqs {
        c.same(&format!("/v2/accelerator_requests/{u}")).await?;
    }
    c.same("/v2/accelerator_requests?bind_state=resolved")
        .await?;
    for i in &instances {
        c.same(&format!("/v2/accelerator_requests?instance={i}"))
            .await?;
        c.same(&format!(
            "/v2/accelerator_requests?instance={i}&bind_state=resolved"
        ))
        .await?;
    }
    let mut hardware = 0;
    for (list, key) in [
        ("devices", "devices"),
        ("deployables", "deployables"),
        ("attributes", "attributes"),
    ] {
        let v = c.same(&format!("/v2/{list}")).await?;
        let all = uuids(&v, key, "uuid");
        hardware += all.len();
        for u in &all {
            c.same(&format!("/v2/{list}/{u}")).await?;
        }
    }
    println!(
        "verify: {} device profiles, {} accelerator requests, {} instances, {} hardware records, \
         {} reads compared: {} difference(s)",
        profiles.len(),
        arqs.len(),
        instances.len(),
        hardware,
        c.reads,
        c.differences
    );
    Ok(c.differences)
}

/// The upstream side: `$OS_TOKEN` (Keystone) as the token, and the identity headers
/// keystonemiddleware would set, for an upstream API run without it (Keystone's
/// middleware drops client-sent ones, so they are harmless behind it).
fn upstream_side(upstream: &str) -> anyhow::Result<Side> {
    let token = std::env::var("OS_TOKEN").unwrap_or_else(|_| "admin".to_owned());
    Ok(Side::new("upstream", upstream, token)?.with(
        MICROVERSION,
        vec![
            ("x-user-id", "admin".to_owned()),
            ("x-project-id", "admin".to_owned()),
            ("x-roles", "admin,member,reader".to_owned()),
        ],
    ))
}

/// Starts accel's accelerator API over `store` in this process (127.0.0.1, port 0,
/// noauth, no workers, so nothing moves an imported ARQ meanwhile), compares
/// `upstream` with it, and stops it. Returns the number of differences.
pub async fn against_local(store: accel_store::Store, upstream: &str) -> anyhow::Result<usize> {
    let app = accel_server::app::App::builder(store)
        .workers(None)
        .build()
        .await?;
    let placement = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let accelerator = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let local = format!("http://{}", accelerator.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.serve(placement, Some(accelerator), async move {
        let _ = stopped.await;
    }));
    let accel_side = Side::new("accel", &local, "admin".to_owned())?.with(MICROVERSION, vec![]);
    let result = compare(&upstream_side(upstream)?, &accel_side).await;
    let _ = stop.send(());
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the verification server stopped with an error"),
        Err(e) => tracing::warn!(error = %e, "the verification server's task failed"),
    }
    result
}
