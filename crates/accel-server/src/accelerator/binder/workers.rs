//! Running the background workers of one server: the bind worker, the Nova event
//! sender, the heartbeat and (with an external Placement) the pusher, each a loop
//! around its testable `step` under one [`Supervisor`], woken by a [`Notify`] and a
//! poll.

use super::nova::{self, EventSender};
use super::{Binder, WorkerConfig, BATCH};
use crate::accelerator::AccelState;
use crate::supervisor::{Backoff, Stop, Supervisor};
use accel_store::Store;
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
            push_loop(
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
            heartbeat_loop(store.clone(), cfg.clone(), wakes.clone(), stop)
        });
    }
    let metrics = state.app.metrics.clone();
    supervisor.spawn("nova event sender", move |stop| {
        let sender = EventSender {
            metrics: metrics.clone(),
            handed: Some(handed.clone()),
            ..EventSender::new(store.clone(), &cfg)
        };
        send_loop(sender, events_wake.clone(), cfg.poll_interval, stop)
    });
    Workers { supervisor }
}

/// Rows of holders dead this long are deleted: far past any lease they held.
const FORGET_DEAD_SECS: i64 = 3600;

/// Beats this process's heartbeat row every `heartbeat_interval`, wakes the workers when
/// a dead holder still has leased work (so it is taken over now rather than when the
/// lease ends, see `accel_store::accelerator::heartbeats`), and marks the row dead at
/// a clean stop.
async fn heartbeat_loop(
    store: Store,
    cfg: WorkerConfig,
    wakes: [Arc<Notify>; 2],
    mut stop: Stop,
) -> anyhow::Result<()> {
    use accel_store::accelerator::heartbeats;
    let mut failing = false;
    let mut last_forget = 0;
    loop {
        let now = accel_store::now();
        match heartbeats::beat(&store, &cfg.owner, now, cfg.heartbeat_ttl_secs).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!(owner = %cfg.owner, "heartbeat written again");
            }
            Ok(()) => {}
            Err(e) => {
                // Logged once per outage: the database is down and every request says so.
                if !failing {
                    tracing::warn!(owner = %cfg.owner, error = %e, "heartbeat not written; other servers may take this one's leases over");
                }
                failing = true;
            }
        }
        if !failing {
            match heartbeats::orphaned_work(&store, now).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(
                        leases = n,
                        "taking over work leased by a server whose heartbeat expired"
                    );
                    for w in &wakes {
                        w.notify_one();
                    }
                }
                Err(e) => tracing::warn!(error = %e, "looking for work of dead servers failed"),
            }
            if now - last_forget >= 60 {
                last_forget = now;
                if let Err(e) = heartbeats::forget_dead(&store, now, FORGET_DEAD_SECS).await {
                    tracing::warn!(error = %e, "deleting old heartbeat rows failed");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.heartbeat_interval) => {}
            _ = stop.stopped() => break,
        }
    }
    if let Err(e) = heartbeats::retire(&store, &cfg.owner, accel_store::now()).await {
        tracing::warn!(owner = %cfg.owner, error = %e, "could not mark this server stopped; its leases free up when its heartbeat expires");
    }
    Ok(())
}

/// The pusher's loop: every host marked once per run (so enabling `[placement]`, or a
/// restart, brings the remote up to date), then due hosts until stopped.
async fn push_loop(
    store: Store,
    ext: Arc<crate::external::ExternalPlacement>,
    cfg: WorkerConfig,
    metrics: Arc<crate::metrics::Metrics>,
    mut stop: Stop,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut pusher = crate::external::Pusher::new(store.clone(), ext.clone(), cfg.owner.clone());
    pusher.metrics = metrics;
    let now = accel_store::now();
    let n = store
        .write(move |tx| {
            Box::pin(async move { accel_store::accelerator::pushes::mark_all(tx, now).await })
        })
        .await
        .context("external Placement: marking every host")?;
    tracing::info!(hosts = n, "external Placement: every host will be checked");
    loop {
        let more = match pusher.step(accel_store::now()).await {
            Ok(r) => r.due as i64 >= crate::external::PUSH_BATCH,
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

/// The sender's loop: on each wake the events the binder handed over; the due pass
/// (other replicas' events, retries, expired leases) at least every `poll`, and
/// whenever a wake brought nothing handed over.
async fn send_loop(
    sender: EventSender,
    events_wake: Arc<Notify>,
    poll: Duration,
    mut stop: Stop,
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
