//! Delivering the Nova events the bind worker recorded: `POST
//! /os-server-external-events` with `accelerator-request-bound`, one attempt per
//! claimed event, retried with backoff until Nova answers or the event expires.
//!
//! Apart from the bind worker ([`super::Binder`]) because it talks HTTP, not SQL: the
//! store side is `accel_store::accelerator::events` (the outbox and its leases). Events
//! are independent of each other (one per instance), so a step posts up to
//! [`POSTS_AT_ONCE`] of them at once (more when `bind_concurrency` is higher); each is
//! still claimed by a lease compare-and-swap first and settled only while this owner
//! holds it. A step's outcomes are recorded together in one transaction, so posting
//! many at once does not cost SQLite's one writer a turn per event.
//!
//! **Handed-over events.** The bind transaction that resolves an instance records its
//! event already leased to this server (`binds::take_and_perform`), and the binder
//! hands it over through a channel ([`Handoff`]): the sender posts it and settles it
//! (with the step's other attempts), with no due query and no claim transaction.
//! Should the event not be posted (the process dies, the sender restarts
//! mid-delivery), its lease runs out (or
//! this server's heartbeat does) and it is due again for any sender, so the outbox's
//! at-least-once delivery is unchanged. An event whose lease is about to run out is
//! left to that path rather than posted late.

use super::{WorkerConfig, BATCH};
use accel_core::accelerator::ArqState;
use accel_keystone::Session;
use accel_store::accelerator::events::{self, Attempted, Delivery, NovaEvent};
use accel_store::{Store, StoreError};
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;

/// Events a sender posts at once, whatever `bind_concurrency` says. At one at a time
/// (SQLite's default concurrency) delivery was bounded by Nova's answer time: 200
/// binds a second with a busy Nova left events 11-20 s behind (docs/benchmarks.md).
pub const POSTS_AT_ONCE: usize = 16;

/// Nova's API endpoint for external events.
#[derive(Debug, Clone)]
pub struct NovaEndpoint {
    /// The compute API root, e.g. `http://nova:8774/v2.1`; events go to
    /// `<url>/os-server-external-events`. Empty with a session: the catalog's.
    pub url: String,
    /// Sent as `X-Auth-Token` when set and there is no session.
    pub token: Option<String>,
    /// A Keystone session (`[nova]`): its token, renewed before expiry and after a
    /// 401, and its catalog's `compute` endpoint when `url` is empty.
    pub session: Option<Arc<Session>>,
}

impl NovaEndpoint {
    /// A fixed URL and optional static token.
    pub fn fixed(url: impl Into<String>, token: Option<String>) -> NovaEndpoint {
        NovaEndpoint {
            url: url.into(),
            token,
            session: None,
        }
    }

    /// Through a Keystone session; `url` overrides the catalog when given.
    pub fn keystone(session: Arc<Session>, url: Option<String>) -> NovaEndpoint {
        NovaEndpoint {
            url: url.unwrap_or_default(),
            token: None,
            session: Some(session),
        }
    }

    /// Where to post and with which token, right now.
    async fn resolve(&self) -> Result<(String, Option<String>), String> {
        let Some(s) = &self.session else {
            return Ok((self.url.clone(), self.token.clone()));
        };
        let url = if self.url.is_empty() {
            s.endpoint("compute").await?
        } else {
            self.url.clone()
        };
        Ok((url, Some(s.token().await?)))
    }
}

/// An event the bind worker recorded as taken by this server until `lease_until`.
#[derive(Debug, Clone)]
pub struct HandedEvent {
    pub event: NovaEvent,
    pub lease_until: i64,
}

/// The binder's end of the hand-over channel, and the sender's (kept across restarts
/// of the sender's loop, so nothing queued is dropped with a failed run).
pub type Handoff = tokio::sync::mpsc::UnboundedSender<HandedEvent>;
pub type Handed = Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<HandedEvent>>>;

/// A connected pair: what [`super::Binder::handoff`] and [`EventSender::handed`] take.
pub fn handoff() -> (Handoff, Handed) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (tx, Arc::new(tokio::sync::Mutex::new(rx)))
}

/// Delivers recorded Nova events.
pub struct EventSender {
    pub(super) store: Store,
    pub(super) owner: String,
    pub(super) lease_secs: i64,
    pub(super) nova: Option<NovaEndpoint>,
    pub(super) client: reqwest::Client,
    pub(super) max_backoff_secs: i64,
    pub(super) expiry_secs: i64,
    /// Events delivered at once within a step.
    pub concurrency: usize,
    /// Where delivery outcomes are counted (the server's, once spawned).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Events the bind worker handed over, already leased to this server.
    pub handed: Option<Handed>,
}

/// What one [`EventSender::step`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SendStep {
    pub delivered: usize,
    pub retrying: usize,
    /// Rejected by Nova, expired, or recorded as `no_endpoint`.
    pub given_up: usize,
}

/// An event to try: handed over (already leased to this server) or due (to claim).
enum Work {
    Handed(NovaEvent),
    Due(i64),
}

/// The result of one POST.
enum Attempt {
    Delivered,
    Rejected(String),
    Retry(String),
}

impl EventSender {
    pub fn new(store: Store, cfg: &WorkerConfig) -> EventSender {
        EventSender {
            store,
            owner: cfg.owner.clone(),
            lease_secs: cfg.lease_secs,
            nova: cfg.nova.clone(),
            client: reqwest::Client::builder()
                .timeout(cfg.nova_timeout)
                .user_agent(accel_api::http::USER_AGENT)
                .build()
                .unwrap_or_default(),
            max_backoff_secs: cfg.max_backoff_secs,
            expiry_secs: cfg.event_expiry_secs,
            concurrency: cfg.concurrency,
            metrics: Default::default(),
            handed: None,
        }
    }

    /// Seconds to wait after the `attempts`-th failed attempt: 1, 2, 4, ... capped.
    fn backoff(&self, attempts: i64) -> i64 {
        let exp = attempts.clamp(1, 31) - 1;
        (1_i64 << exp).min(self.max_backoff_secs.max(1))
    }

    /// One pass at time `now`: the handed-over events and the due ones, each tried
    /// once.
    pub async fn step(&self, now: i64) -> Result<SendStep, StoreError> {
        self.run(now, true).await
    }

    /// One pass: every handed-over event, and with `look_for_due` (or when none was
    /// handed over) the due events too, each claimed first.
    pub(super) async fn run(&self, now: i64, look_for_due: bool) -> Result<SendStep, StoreError> {
        let handed = self.take_handed(now).await;
        let ids = if look_for_due || handed.is_empty() {
            events::due_now(&self.store, now, BATCH).await?
        } else {
            Vec::new()
        };
        let work = handed
            .into_iter()
            .map(Work::Handed)
            .chain(ids.into_iter().map(Work::Due));
        // Recorded together once every attempt has ended: a due event's claim holds
        // the writer while it runs, so recording while such a claim waits unpolled
        // would wait for itself.
        let tried: Vec<_> = futures::stream::iter(work)
            .map(|w| self.deliver(w, now))
            .buffer_unordered(self.posts_at_once())
            .collect()
            .await;
        let mut report = SendStep::default();
        let mut error = None;
        let mut attempts = Vec::with_capacity(tried.len());
        for r in tried {
            match r {
                Ok(Some(a)) => attempts.push(a),
                Ok(None) => {}
                Err(e) if error.is_none() => error = Some(e),
                Err(e) => tracing::warn!(error = %e, "delivery of a Nova event failed"),
            }
        }
        if !attempts.is_empty() {
            let recorded = events::record_attempts(
                &self.store,
                &self.owner,
                &attempts,
                accel_store::now().max(now),
            )
            .await;
            match recorded {
                Ok(_) => {
                    for a in &attempts {
                        match a.delivery {
                            Delivery::Delivered => report.delivered += 1,
                            Delivery::Pending => report.retrying += 1,
                            _ => report.given_up += 1,
                        }
                    }
                }
                // Posted but not recorded: their leases run out and they are posted
                // again (delivery is at least once).
                Err(e) => {
                    tracing::warn!(error = %e, events = attempts.len(), "recording Nova event attempts failed; they are posted again after their lease");
                    error.get_or_insert(e);
                }
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Events posted at once: at least [`POSTS_AT_ONCE`], since a post waits on Nova,
    /// not on the database (its outcome is recorded with others' in one transaction),
    /// so SQLite's one writer is no reason to post one at a time.
    fn posts_at_once(&self) -> usize {
        self.concurrency.max(POSTS_AT_ONCE)
    }

    /// The handed-over events queued now (at most a batch), less those whose lease
    /// ends within a second: those are left for the due path.
    async fn take_handed(&self, now: i64) -> Vec<NovaEvent> {
        let Some(handed) = &self.handed else {
            return Vec::new();
        };
        let mut rx = handed.lock().await;
        let mut out = Vec::new();
        while out.len() < BATCH as usize {
            match rx.try_recv() {
                Ok(h) if h.lease_until > now + 1 => out.push(h.event),
                Ok(h) => {
                    tracing::info!(instance = %h.event.instance_uuid, "handed-over Nova event's lease is ending; leaving it to the due path")
                }
                Err(_) => break,
            }
        }
        out
    }

    /// Tries one event once (a due one claimed first): how it was left, for the
    /// caller to record, or `None` when another sender had it.
    async fn deliver(&self, work: Work, now: i64) -> Result<Option<Attempted>, StoreError> {
        let ev = match work {
            Work::Handed(ev) => ev,
            Work::Due(id) => {
                let claimed = events::claim_for_delivery(
                    &self.store,
                    id,
                    &self.owner,
                    now,
                    now + self.lease_secs,
                )
                .await?;
                match claimed {
                    Some(ev) => ev,
                    None => return Ok(None),
                }
            }
        };
        let id = ev.id;
        let (delivery, next, error) = match &self.nova {
            // `accel serve` says once at start-up that there is no Nova, and the
            // console shows it as the deployment's state: nothing per event to warn of.
            None => {
                tracing::debug!(
                    instance = %ev.instance_uuid,
                    "no Nova endpoint configured: accelerator-request-bound event recorded, not sent"
                );
                (Delivery::NoEndpoint, now, None)
            }
            Some(nova) => match self.post(nova, &ev).await {
                Attempt::Delivered => (Delivery::Delivered, now, None),
                Attempt::Rejected(e) => {
                    tracing::error!(instance = %ev.instance_uuid, error = %e, "Nova rejected the event");
                    (Delivery::Rejected, now, Some(e))
                }
                Attempt::Retry(e) if now - ev.created_at >= self.expiry_secs => {
                    tracing::error!(instance = %ev.instance_uuid, error = %e, "giving up on the event");
                    (Delivery::Expired, now, Some(e))
                }
                Attempt::Retry(e) => {
                    let wait = self.backoff(ev.attempts);
                    tracing::warn!(instance = %ev.instance_uuid, error = %e, retry_in_s = wait, "event not delivered");
                    (Delivery::Pending, now + wait, Some(e))
                }
            },
        };
        let outcome = match delivery {
            Delivery::Delivered => "delivered",
            Delivery::Pending => "retried",
            Delivery::Rejected => "rejected",
            Delivery::Expired => "expired",
            _ => "no_endpoint",
        };
        self.metrics
            .nova_events
            .get_or_create(&crate::metrics::OutcomeLabel { outcome })
            .inc();
        Ok(Some(Attempted {
            id,
            delivery,
            next_attempt: next,
            error,
        }))
    }

    /// `POST /os-server-external-events` at compute microversion 2.82, one event per
    /// ARQ. 200 and 207 count as delivered: a 207 whose events are all 422 means the
    /// instance is not on a host yet, which upstream ignores too (nova bug 1855752).
    /// With a Keystone session, a 401 drops the token and the event is posted once
    /// more with a new one; a session that cannot get a token or find Nova is a
    /// retryable failure whose reason is recorded.
    async fn post(&self, nova: &NovaEndpoint, ev: &NovaEvent) -> Attempt {
        let mut fresh_token_tried = false;
        loop {
            let (base, token) = match nova.resolve().await {
                Ok(r) => r,
                Err(e) => return Attempt::Retry(format!("Keystone: {e}")),
            };
            let url = format!("{}/os-server-external-events", base.trim_end_matches('/'));
            let request_id = format!("req-{}", uuid::Uuid::new_v4());
            let started = std::time::Instant::now();
            let mut req = self
                .client
                .post(&url)
                .header("X-OpenStack-Request-ID", &request_id)
                .header("X-OpenStack-Nova-API-Version", "2.82")
                .header("OpenStack-API-Version", "compute 2.82")
                .json(&render_events(ev));
            if let Some(t) = &token {
                req = req.header("X-Auth-Token", t);
            }
            let resp = match req.send().await {
                Err(e) => {
                    self.metrics.outgoing("nova", "unreachable");
                    tracing::warn!(target: "accel::outgoing", service = "nova", method = "POST", url = %url, request_id = %request_id, instance = %ev.instance_uuid, error = %e, "outgoing call failed");
                    return Attempt::Retry(format!("POST {url}: {e}"));
                }
                Ok(resp) => resp,
            };
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            let ok = status.is_success();
            self.metrics
                .outgoing("nova", if ok { "success" } else { "http_error" });
            tracing::info!(target: "accel::outgoing", service = "nova", method = "POST", url = %url, status = status.as_u16(), request_id = %request_id, instance = %ev.instance_uuid, duration_ms = started.elapsed().as_millis() as u64, "outgoing call");
            let what = format!("POST {url}: HTTP {}: {}", status.as_u16(), clip(&body));
            if status.as_u16() == 401 && !fresh_token_tried {
                if let (Some(s), Some(t)) = (&nova.session, &token) {
                    tracing::info!(instance = %ev.instance_uuid, "Nova refused the token; authenticating again");
                    s.invalidate(t).await;
                    fresh_token_tried = true;
                    continue;
                }
            }
            return if status.is_success() {
                if status.as_u16() == 207 {
                    tracing::info!(instance = %ev.instance_uuid, body = %clip(&body), "Nova answered 207");
                }
                Attempt::Delivered
            } else if status.is_client_error() && !matches!(status.as_u16(), 401 | 408 | 429) {
                Attempt::Rejected(what)
            } else {
                Attempt::Retry(what)
            };
        }
    }
}

fn clip(s: &str) -> &str {
    match s.char_indices().nth(300) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Nova's event body: `accelerator-request-bound`, `tag` = the ARQ uuid, status
/// `completed` for `Bound`, `failed` otherwise (upstream's
/// `ARQ_BIND_STATES_STATUS_MAP`).
pub fn render_events(ev: &NovaEvent) -> serde_json::Value {
    let events: Vec<serde_json::Value> = ev
        .arqs
        .iter()
        .map(|(arq, state)| {
            json!({
                "name": "accelerator-request-bound",
                "tag": arq,
                "server_uuid": ev.instance_uuid,
                "status": if *state == ArqState::Bound { "completed" } else { "failed" },
            })
        })
        .collect();
    json!({ "events": events })
}

/// The sender's loop: on each wake the events the binder handed over; the due pass
/// (other replicas' events, retries, expired leases) at least every `poll`, and
/// whenever a wake brought nothing handed over.
pub(crate) async fn send_loop(
    sender: EventSender,
    events_wake: std::sync::Arc<tokio::sync::Notify>,
    poll: std::time::Duration,
    mut stop: crate::supervisor::Stop,
) -> anyhow::Result<()> {
    let mut looked = tokio::time::Instant::now();
    let mut first = true;
    loop {
        let look_for_due = first || looked.elapsed() >= poll;
        if look_for_due {
            looked = tokio::time::Instant::now();
        }
        first = false;
        if let Err(e) = sender.run(accel_store::now(), look_for_due).await {
            tracing::warn!(error = %e, "event sender step failed; retrying");
        }
        tokio::select! {
            _ = events_wake.notified() => {}
            _ = tokio::time::sleep(poll) => {}
            _ = stop.stopped() => return Ok(()),
        }
    }
}
