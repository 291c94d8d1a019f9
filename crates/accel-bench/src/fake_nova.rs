//! A fake Nova for the load tools: `os-server-external-events`, where Cyborg and accel
//! send `accelerator-request-bound`, and the version document keystoneauth's
//! discovery asks for first (upstream Cyborg's openstacksdk adapter does), so one
//! stand-in serves accel and upstream alike.

use anyhow::Context;
use serde_json::{json, Value};

/// Nova's `os-server-external-events` on `listen` (`127.0.0.1:0`: a free port): calls `on_event` with each
/// event's server uuid and whether it says bound (`status` `completed`; `failed`
/// when the bind was refused), and answers every event 200, as Nova does for an
/// instance it knows. Returns the compute API root to give accel (`--nova-url`).
pub async fn serve(
    listen: &str,
    on_event: impl Fn(&str, bool) + Clone + Send + Sync + 'static,
) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("the fake Nova's address {listen}"))?;
    let addr = listener.local_addr()?;
    // The version document answers keystoneauth's discovery (upstream Cyborg's
    // openstacksdk adapter asks for it before its first event).
    let href = format!("http://{addr}/v2.1/");
    let version = move || {
        let href = href.clone();
        async move {
            axum::Json(json!({"version": {"id": "v2.1", "status": "CURRENT",
                "version": "2.96", "min_version": "2.1",
                "links": [{"rel": "self", "href": href}]}}))
        }
    };
    let app = axum::Router::new()
        .route("/v2.1", axum::routing::get(version.clone()))
        .route("/v2.1/", axum::routing::get(version))
        .route(
            "/v2.1/os-server-external-events",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let on_event = on_event.clone();
                async move {
                    let mut events = body["events"].as_array().cloned().unwrap_or_default();
                    for e in &mut events {
                        let bound = e["status"] == "completed";
                        on_event(e["server_uuid"].as_str().unwrap_or_default(), bound);
                        e["code"] = 200.into();
                    }
                    axum::Json(json!({ "events": events }))
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}/v2.1"))
}
