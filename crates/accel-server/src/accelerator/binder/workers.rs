//! Running the background workers of one server under one [`Supervisor`]: the bind
//! worker (its loop is here), and beside it the Nova event sender
//! ([`nova::send_loop`]), the heartbeat ([`crate::heartbeat`]) and, with an external
//! Placement, the pusher ([`crate::external::worker::run_loop`]); each a loop around
//! its testable `step`, woken by a [`Notify`] and a poll.

use super::nova::{self, EventSender};
use super::{Binder, WorkerConfig, BATCH};
use crate::accelerator::AccelState;
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
/// `state.bind_wakeup`, and with an external Placement the pusher
/// ([`crate::external::Pusher`]), which first marks every host once.
pub fn spawn(state: &Arc<AccelState>, cfg: WorkerConfig) -> Workers {
    spawn_with(state, cfg, Backoff::default())
}

/// [`spawn`] with the supervisor's restart backoff chosen.
pub fn spawn_with(state: &Arc<AccelState>, cfg: WorkerConfig, backoff: Backoff) -> Workers {
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
