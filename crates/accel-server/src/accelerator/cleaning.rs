//! Devices cleaned between tenants, over HTTP (the rule itself lives in the store:
//! `accel_store::accelerator::cleaning`).
//!
//! ```text
//! agent     GET  /v2/agent/hosts/{host}/cleanings?agent=ID[&wait=S]  take this process's cleanings
//!           PUT  /v2/agent/hosts/{host}/cleanings/{rp_uuid}  {"attempt", "error"?, "duration_ms"}
//! operator  GET  /v2/device_cleanings[?hostname=]            every device provider's state
//!           POST /v2/device_cleanings/{uuid}/clean           retry (device or provider uuid)
//!           POST /v2/device_cleanings/{uuid}/release         offer again after a manual check
//! ```
//!
//! The agent's endpoints take `accel:agent:report` as the other agent endpoints do; the
//! operator's are `admin_api` only and logged at `warn` with who asked, because both
//! put a device back in front of tenants (or take it away) by hand.

use super::error::{AccelError, AccelResult};
use super::{json_reply, AccelState, Reply, Req};
use accel_api::agent::{
    CleaningAnswer, CleaningRequest, Cleanings, DeviceCleaning, DeviceCleanings,
};
use accel_core::policy::cyborg as rules;
use accel_store::accelerator::cleaning::{self, Outcome};
use axum::http::StatusCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

pub(crate) fn render(c: &cleaning::DeviceCleaning) -> DeviceCleaning {
    DeviceCleaning {
        device_uuid: c.device_uuid.clone(),
        hostname: c.hostname.clone(),
        name: c.name.clone(),
        rp_uuid: c.rp_uuid.clone(),
        cleaned_on_release: c.has_rule,
        state: c.state.as_str().to_owned(),
        reason: c.reason.clone(),
        attempt: c.attempt,
        started_at: c.started_at,
        finished_at: c.finished_at,
        last_duration_ms: c.last_duration_ms,
    }
}

/// The longest `wait` an agent may ask for, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// While a long poll waits, how often it looks in the database as well: a cleaning
/// queued through another replica wakes no one on this process.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// `GET /v2/agent/hosts/{host}/cleanings?agent=ID[&wait=S]`: takes the host's
/// cleanings for agent process `ID` (a new process takes over its predecessor's at
/// once) and answers every one it holds.
///
/// With `wait`, a long poll: when nothing new is there for `ID`, the answer waits up to
/// `S` seconds for a cleaning to be queued (woken at once by a release on this process,
/// and looking in the database every [`RECHECK`] for other replicas'), so a released
/// device reaches its agent without the agent asking every second.
pub(crate) async fn take(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&["agent", "wait"])?;
    let agent = req
        .query_last("agent")
        .filter(|a| !a.is_empty() && a.len() <= 255)
        .ok_or_else(|| {
            AccelError::bad_request("agent must name the agent process (1 to 255 characters)")
        })?
        .to_owned();
    let wait = match req.query_last("wait") {
        None => 0,
        Some(w) => w
            .parse::<u64>()
            .ok()
            .filter(|w| *w <= MAX_WAIT_SECONDS)
            .ok_or_else(|| {
                AccelError::bad_request(format!(
                    "wait must be a whole number of seconds from 0 to {MAX_WAIT_SECONDS}"
                ))
            })?,
    };
    if wait > 0 {
        wait_for_cleanings(&st, host, &agent, std::time::Duration::from_secs(wait)).await?;
    }
    let jobs = st.app.store.cleanings().take(host, &agent).await?;
    let cleanings = jobs
        .into_iter()
        .map(|j| CleaningRequest {
            rp_uuid: j.rp_uuid,
            name: j.name,
            address: j.address,
            device_uuid: j.device_uuid,
            attempt: j.attempt,
        })
        .collect();
    Ok(json_reply(StatusCode::OK, &Cleanings { cleanings }))
}

/// Long polls that may wait at once on this process. Each holds a connection (an API
/// takes 4096), so past this many a look is answered at once and its agent looks again
/// after its program interval, as agents did before the long poll.
pub const MAX_WAITING: usize = 1024;

static WAITING: AtomicUsize = AtomicUsize::new(0);
static SAID_FULL: AtomicBool = AtomicBool::new(false);

/// One long poll waiting, counted while it lives (a client that hangs up drops it).
struct Waiting;

impl Waiting {
    fn enter() -> Option<Waiting> {
        if WAITING.fetch_add(1, Ordering::SeqCst) < MAX_WAITING {
            return Some(Waiting);
        }
        WAITING.fetch_sub(1, Ordering::SeqCst);
        if !SAID_FULL.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                max = MAX_WAITING,
                "agents' long polls for cleanings at their cap on this server; further looks are answered at once (the agents then look every program_interval_ms)"
            );
        }
        None
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Returns when `host` has a cleaning `agent` does not hold yet, after `wait`, when
/// the server starts draining, or at once when [`MAX_WAITING`] polls already wait.
async fn wait_for_cleanings(
    st: &AccelState,
    host: &str,
    agent: &str,
    wait: std::time::Duration,
) -> AccelResult<()> {
    let Some(_waiting) = Waiting::enter() else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut signal = st.app.store.cleanings_signal();
    loop {
        // Marked seen before the look, so a cleaning queued after it still wakes us.
        signal.borrow_and_update();
        let waiting = st.app.store.cleanings().waiting(host, agent).await?;
        let now = tokio::time::Instant::now();
        if waiting || now >= deadline || st.app.health.is_draining() {
            return Ok(());
        }
        let next = deadline.min(now + RECHECK);
        tokio::select! {
            _ = signal.changed() => {}
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}

/// `PUT /v2/agent/hosts/{host}/cleanings/{rp_uuid}`: the agent's answer. Clean lifts
/// the reservation (as far as the device's health and status allow); an error leaves
/// the device reserved as `clean_failed`. 404 when that take is no longer running.
pub(crate) async fn finish(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let host = req.param(0);
    let rp_uuid = req.param(1);
    req.authorize(&st, rules::AGENT_REPORT)?;
    req.only_params(&[])?;
    super::require_uuid(rp_uuid)?;
    let answer: CleaningAnswer = serde_json::from_value(req.json_body()?)
        .map_err(|e| AccelError::bad_request(format!("Invalid cleaning answer: {e}")))?;
    if answer.error.as_deref().is_some_and(|e| e.trim().is_empty()) {
        return Err(AccelError::bad_request(
            "A failed cleaning needs its reason",
        ));
    }
    let outcome = Outcome {
        result: answer.error.clone().map_or(Ok(()), Err),
        duration_ms: answer.duration_ms.max(0),
    };
    let label = if outcome.result.is_ok() {
        "clean"
    } else {
        "failed"
    };
    let done = st
        .app
        .store
        .cleanings()
        .finish(host, rp_uuid, answer.attempt, &outcome)
        .await?;
    let m = &st.app.metrics;
    let l = crate::metrics::OutcomeLabel { outcome: label };
    m.device_cleanings.get_or_create(&l).inc();
    m.device_cleaning_duration
        .get_or_create(&l)
        .observe(answer.duration_ms.max(0) as f64 / 1000.0);
    match &answer.error {
        None => {
            tracing::info!(host = %host, provider = %rp_uuid, duration_ms = answer.duration_ms, "device cleaned; offered again")
        }
        Some(e) => {
            tracing::warn!(host = %host, provider = %rp_uuid, reason = %e, "device cleaning failed; it stays reserved")
        }
    }
    Ok(json_reply(StatusCode::OK, &render(&done)))
}

/// `GET /v2/device_cleanings[?hostname=]`.
pub(crate) async fn list(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    req.authorize(&st, rules::ADMIN_API)?;
    req.only_params(&["hostname"])?;
    let rows = st
        .app
        .store
        .cleanings()
        .list(req.query_last("hostname"))
        .await?;
    Ok(json_reply(
        StatusCode::OK,
        &DeviceCleanings {
            device_cleanings: rows.iter().map(render).collect(),
        },
    ))
}

/// `POST /v2/device_cleanings/{uuid}/clean` (retry) or `.../release` (offer again
/// after a manual check); `uuid` is a device's (all its providers) or one provider's.
pub(crate) async fn act(st: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    let uuid = req.param(0);
    let action = req.param(1);
    req.authorize(&st, rules::ADMIN_API)?;
    req.only_params(&[])?;
    super::require_uuid(uuid)?;
    let result = if action == "clean" {
        st.app.store.cleanings().retry(uuid).await
    } else {
        st.app.store.cleanings().release(uuid).await
    };
    // Refused or not, the action is an operator's: logged with who asked, and why a
    // refusal was given.
    let result = result.map_err(AccelError::from);
    let (outcome, detail) = match &result {
        Ok(rows) => ("done", format!("{} provider(s)", rows.len())),
        Err(e) => ("refused", format!("{} {}", e.status.as_u16(), e.message)),
    };
    tracing::warn!(
        target: "accel::audit",
        action,
        uuid = %uuid,
        user = req.creds.user_id().unwrap_or_default(),
        project = req.creds.project_id().unwrap_or_default(),
        outcome,
        detail = %detail,
        "device cleaning action by an operator"
    );
    let rows = result?;
    Ok(json_reply(
        StatusCode::OK,
        &DeviceCleanings {
            device_cleanings: rows.iter().map(render).collect(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At most MAX_WAITING polls wait; one that ends (or whose client hangs up) frees
    /// its place. (The lib's tests run no server, so nothing else holds a place.)
    #[test]
    fn long_polls_beyond_the_cap_are_answered_at_once() {
        let mut held: Vec<Waiting> = (0..MAX_WAITING).map_while(|_| Waiting::enter()).collect();
        assert_eq!(held.len(), MAX_WAITING);
        assert!(Waiting::enter().is_none());
        held.pop();
        let again = Waiting::enter();
        assert!(again.is_some());
        assert!(Waiting::enter().is_none());
    }
}
