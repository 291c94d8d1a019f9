//! The pusher: takes pending hosts from `placement_pushes` and pushes each, as the
//! bind worker takes bind jobs (lease compare-and-swap, so one replica pushes a host
//! at a time and a dead one's lease expires). A failed push, or one that had to keep
//! a remotely allocated provider, is retried after 1, 2, 4 … `max_backoff_secs`.

use super::{push, ExternalPlacement};
use accel_store::{Store, StoreError};
use std::sync::Arc;

/// Hosts taken per step.
pub const BATCH: i64 = 16;

/// Pushes pending hosts to the external Placement.
pub struct Pusher {
    store: Store,
    external: Arc<ExternalPlacement>,
    owner: String,
    /// Longer than the bind worker's: a push of a large host is many requests.
    pub lease_secs: i64,
    pub max_backoff_secs: i64,
    /// Where push outcomes are counted (the server's, once spawned).
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// What one [`Pusher::step`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PushStep {
    /// Hosts due when the step began.
    pub due: usize,
    pub pushed: usize,
    /// Failed, or kept a provider that is allocated remotely: retried later.
    pub retrying: usize,
    /// Claimed by another worker first.
    pub skipped: usize,
}

impl Pusher {
    pub fn new(store: Store, external: Arc<ExternalPlacement>, owner: impl Into<String>) -> Pusher {
        Pusher {
            store,
            external,
            owner: owner.into(),
            lease_secs: 120,
            max_backoff_secs: 60,
            metrics: Default::default(),
        }
    }

    fn backoff(&self, attempts: i64) -> i64 {
        (1_i64 << attempts.clamp(0, 30)).min(self.max_backoff_secs.max(1))
    }

    /// One pass at time `now` (epoch seconds): each due host claimed, pushed and its
    /// result recorded.
    pub async fn step(&self, now: i64) -> Result<PushStep, StoreError> {
        let pushes = self.store.pushes();
        let due = pushes.due(now, BATCH).await?;
        let mut report = PushStep {
            due: due.len(),
            ..Default::default()
        };
        for host in due {
            let claimed = pushes
                .claim(&host, &self.owner, now, now + self.lease_secs)
                .await?;
            let Some(claimed) = claimed else {
                report.skipped += 1;
                continue;
            };
            let local = pushes.local_tree(&host).await?;
            let error = match push(&self.external.client, &host, &local).await {
                Ok(p) if p.held.is_empty() => {
                    tracing::info!(host = %host, created = p.created, updated = p.updated, deleted = p.deleted, "device providers pushed to the external Placement");
                    None
                }
                Ok(p) => Some(format!(
                    "allocated in the external Placement, kept with reserved = total until free: {}",
                    p.held.join(", ")
                )),
                Err(e) => Some(e.0),
            };
            let settle_at = accel_store::now().max(now);
            let outcome = if error.is_none() { "pushed" } else { "failed" };
            self.metrics
                .external_pushes
                .get_or_create(&crate::metrics::OutcomeLabel { outcome })
                .inc();
            if error.is_some() {
                self.metrics.external_push_failures.inc();
            }
            match error {
                None => {
                    report.pushed += 1;
                    pushes
                        .succeeded(&host, &self.owner, claimed.version, settle_at)
                        .await?;
                }
                Some(e) => {
                    report.retrying += 1;
                    let wait = self.backoff(claimed.attempts);
                    tracing::warn!(host = %host, error = %e, retry_in_s = wait, "push to the external Placement not complete");
                    pushes
                        .failed(&host, &self.owner, now + wait, &e, settle_at)
                        .await?;
                }
            }
        }
        Ok(report)
    }
}

/// The pusher's loop: every host marked once per run (so enabling `[placement]`, or a
/// restart, brings the remote up to date), then due hosts until stopped.
pub(crate) async fn run_loop(
    store: Store,
    ext: Arc<ExternalPlacement>,
    cfg: crate::accelerator::binder::WorkerConfig,
    metrics: Arc<crate::metrics::Metrics>,
    mut stop: crate::supervisor::Stop,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut pusher = Pusher::new(store.clone(), ext.clone(), cfg.owner.clone());
    pusher.metrics = metrics;
    let n = store
        .pushes()
        .mark_all(accel_store::now())
        .await
        .context("external Placement: marking every host")?;
    tracing::info!(hosts = n, "external Placement: every host will be checked");
    loop {
        let more = match pusher.step(accel_store::now()).await {
            Ok(r) => r.due as i64 >= super::PUSH_BATCH,
            Err(e) => {
                tracing::warn!(error = %e, "pusher step failed; retrying");
                false
            }
        };
        if more {
            continue;
        }
        tokio::select! {
            _ = ext.wake.notified() => {}
            _ = tokio::time::sleep(cfg.poll_interval) => {}
            _ = stop.stopped() => return Ok(()),
        }
    }
}
