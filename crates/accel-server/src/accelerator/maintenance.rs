//! `/v2/maintenance`: the maintenance switch's admin call (accel's own, beside
//! Cyborg's routes, as `/v2/device_cleanings` is). `GET` shows it, `PUT
//! {"reason": ".."}` stops writes on every replica of the database, `DELETE` lets
//! them in again; all three are `admin_api`, and a change is logged at `warn` with
//! who asked (docs/migrating.md walks through a cut-over with it).

use super::error::{AccelError, AccelResult};
use super::{json_reply, AccelState, Reply, Req};
use accel_core::policy::cyborg as rules;
use accel_store::maintenance::Maintenance;
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

/// The longest reason kept, in characters.
const MAX_REASON: usize = 255;

fn render(state: Option<&Maintenance>) -> Value {
    match state {
        None => json!({"maintenance": false}),
        Some(m) => json!({
            "maintenance": true,
            "reason": m.reason,
            "since": m.since,
            "message": crate::maintenance::refusal(m),
        }),
    }
}

/// `GET /v2/maintenance`.
pub(crate) async fn show(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::ADMIN_API)?;
    req.only_params(&[])?;
    let state = st.app.store.maintenance().get().await?;
    st.app.maintenance.set(state.clone());
    Ok(json_reply(StatusCode::OK, &render(state.as_ref())))
}

/// `PUT /v2/maintenance` with `{"reason": "..."}`: writes stopped.
pub(crate) async fn start(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::ADMIN_API)?;
    req.only_params(&[])?;
    let body = req.json_body()?;
    let reason = match body.get("reason") {
        Some(Value::String(r)) if !r.trim().is_empty() && r.chars().count() <= MAX_REASON => {
            r.trim().to_owned()
        }
        _ => {
            return Err(AccelError::bad_request(format!(
                "The body must be {{\"reason\": \"...\"}}: why writes stop, 1 to {MAX_REASON} characters."
            )))
        }
    };
    let m = st.app.store.maintenance().start(&reason).await?;
    st.app.maintenance.set(Some(m.clone()));
    audit(&req, "start", &reason);
    Ok(json_reply(StatusCode::OK, &render(Some(&m))))
}

/// `DELETE /v2/maintenance`: writes let in again.
pub(crate) async fn end(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::ADMIN_API)?;
    req.only_params(&[])?;
    let was_on = st.app.store.maintenance().end().await?;
    st.app.maintenance.set(None);
    audit(&req, "end", if was_on { "was on" } else { "was off" });
    Ok(json_reply(StatusCode::OK, &render(None)))
}

fn audit(req: &Req, action: &str, detail: &str) {
    tracing::warn!(
        target: "accel::audit",
        action,
        user = req.creds.user_id().unwrap_or_default(),
        project = req.creds.project_id().unwrap_or_default(),
        detail = %detail,
        "maintenance switch changed by an operator"
    );
}
