//! Running the background workers of one server under one [`Supervisor`]: the bind
//! worker (its loop is here), and beside it the Nova event sender
//! ([`nova::send_loop`]), the heartbeat ([`crate::heartbeat`]), the candidate index's
//! keeper ([`index::Keeper`], its loop here too) and, with an external Placement, the
//! pusher ([`crate::external::worker::run_loop`]); each a loop around its testable
//! `step`, woken by a [`Notify`] and a poll.

use super::nova::{self, EventSender};
use super::{Binder, WorkerConfig, BATCH};
use crate::accelerator::AccelState;
use crate::placement::{index, AppState};
use crate::supervisor::{Backoff, Stop, Supervisor};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The running workers of one server, under one [`Supervisor`] (a worker that fails
/// or panics is logged and restarted); stop them with [`Workers::shutdown`]. Dropping
/// it aborts them.
pub struct Workers {
    supervisor: Supervisor,
}

/// Starts the bind worker and the event sender for `state`'s store, woken by
/// `state.bind_wakeup`, the keeper of `placement`'s candidate index, and with an
/// external Placement the pusher ([`crate::external::Pusher`]), which first marks
/// every host once.
pub fn spawn(placement: &Arc<AppState>, state: &Arc<AccelState>, cfg: WorkerConfig) -> Workers {
    spawn_with(placement, state, cfg, Backoff::default())
}

/// [`spawn`] with the supervisor's restart backoff chosen.
pub fn spawn_with(
    placement: &Arc<AppState>,
    state: &Arc<AccelState>,
    cfg: WorkerConfig,
    backoff: Backoff,
) -> Workers {
    let mut supervisor = Supervisor::new(backoff);
    let store = state.app.store.clone();
    if let Some(ext) = &state.external {
        let (store, ext, cfg) = (store.clone(), ext.clone(), cfg.clone());
        let metrics = state.app.metrics.clone();
        supervisor.spawn("external placement pusher", move |stop| {
            crate::external::worker::run_loop(
                store.clone(),
                ext.clone(),
                cfg.clone(),
                metrics.clone(),
                stop,
            )
        });
    }
    // The binder wakes the sender when a step records Nova events; one Notify for
    // every run of both, so a restarted sender still hears a running binder.
    let events_wake = Arc::new(Notify::new());
    let (handoff, handed) = nova::handoff();
    {
        let (store, cfg, events_wake) = (store.clone(), cfg.clone(), events_wake.clone());
        let bind_wake = state.bind_wakeup.clone();
        let metrics = state.app.metrics.clone();
        supervisor.spawn("bind worker", move |stop| {
            let binder = Binder {
                events_wake: events_wake.clone(),
                metrics: metrics.clone(),
                concurrency: cfg.concurrency,
                wake: Some(bind_wake.clone()),
                handoff: Some(handoff.clone()),
                ..Binder::new(store.clone(), cfg.owner.clone(), cfg.lease_secs)
            };
            bind_loop(binder, bind_wake.clone(), cfg.poll_interval, stop)
        });
    }
    {
        let (store, cfg) = (store.clone(), cfg.clone());
        let wakes = [state.bind_wakeup.clone(), events_wake.clone()];
        supervisor.spawn("heartbeat", move |stop| {
            crate::heartbeat::run(store.clone(), cfg.clone(), wakes.clone(), stop)
        });
    }
    {
        let app = placement.clone();
        supervisor.spawn("index keeper", move |stop| keep_loop(app.clone(), stop));
    }
    let metrics = state.app.metrics.clone();
    supervisor.spawn("nova event sender", move |stop| {
        let sender = EventSender {
            metrics: metrics.clone(),
            handed: Some(handed.clone()),
            ..EventSender::new(store.clone(), &cfg)
        };
        nova::send_loop(sender, events_wake.clone(), cfg.poll_interval, stop)
    });
    Workers { supervisor }
}

async fn bind_loop(
    binder: Binder,
    bind_wake: Arc<Notify>,
    poll: Duration,
    mut stop: Stop,
) -> anyhow::Result<()> {
    loop {
        let more = match binder.step(accel_store::now()).await {
            Ok(r) => r.due as i64 >= BATCH,
            Err(e) => {
                tracing::warn!(error = %e, "bind worker step failed; retrying");
                false
            }
        };
        if more {
            continue;
        }
        tokio::select! {
            _ = bind_wake.notified() => {}
            _ = tokio::time::sleep(poll) => {}
            _ = stop.stopped() => return Ok(()),
        }
    }
}

/// Runs [`index::Keeper::step`] every [`index::KEEP_EVERY`]: the first step builds
/// the picture at start-up. A step that cannot read the database is logged and
/// counted, and the next one tries again (the requests meanwhile refresh as before).
async fn keep_loop(app: Arc<AppState>, mut stop: Stop) -> anyhow::Result<()> {
    let mut keeper = index::Keeper::default();
    loop {
        let started = std::time::Instant::now();
        let outcome = match keeper.step(&app.placement_index, &app.store).await {
            Ok(index::Kept::Current) => "current",
            Ok(index::Kept::Waiting) => "waiting",
            Ok(index::Kept::Refreshed { full }) => {
                let ms = started.elapsed().as_millis() as u64;
                if full {
                    tracing::info!(duration_ms = ms, "index keeper built the candidate index");
                } else {
                    tracing::debug!(
                        duration_ms = ms,
                        "index keeper refreshed the candidate index"
                    );
                }
                "refreshed"
            }
            Err(e) => {
                tracing::warn!(error = %e, "index keeper could not read the placement data; next step in a second");
                "failed"
            }
        };
        app.metrics
            .index_keeper_steps
            .get_or_create(&crate::metrics::OutcomeLabel { outcome })
            .inc();
        tokio::select! {
            _ = tokio::time::sleep(index::KEEP_EVERY) => {}
            _ = stop.stopped() => return Ok(()),
        }
    }
}

impl Workers {
    /// Which workers run now (the health checks read it).
    pub fn running(&self) -> crate::supervisor::Running {
        self.supervisor.running()
    }

    /// Asks the workers to stop after their current step and waits for them. A
    /// worker's failures were logged and it was restarted, so stopping cannot fail;
    /// the `Result` is kept for callers that treat shutdown as fallible.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.supervisor.shutdown().await;
        Ok(())
    }
}
