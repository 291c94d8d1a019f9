//! The node's own workers, each a loop around a step that tests call directly:
//! reporting ([`Agent::step`]), programming ([`Agent::program_step`], and the
//! `fpga-default` cleanings handed to it), cleaning ([`Agent::clean_step`] as a long
//! poll). Each beats its own [`Beat`] and holds it through every wait and step for that
//! wait's or step's bound, so one slow job never reads as a stuck agent; a panic ends
//! only its worker, which the supervisor restarts (and `/readyz` shows meanwhile).
//!
//! A failed step is logged and retried at the next tick: it never stops a worker.

use crate::agent::{Agent, Handover, CLEANING_WAIT_SECONDS};
use crate::observe::Beat;
use accel_supervisor::{Stop, Supervisor};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

/// How long one call to the server may take (the client's request timeout), twice:
/// a report may be sent again after its node provider is made again.
const CALL_BOUND: Duration = Duration::from_secs(120);

/// Starts the reporting, programming and cleaning workers over `agent`.
pub(crate) fn spawn(agent: &Arc<Agent>, sup: &mut Supervisor) {
    let beat = |name| agent.probes().map(|h| h.worker(name));
    let reporting = beat("reporting");
    let a = agent.clone();
    sup.spawn("reporting", move |stop| {
        let period = Duration::from_secs(a.settings.interval_seconds);
        let a = a.clone();
        every(
            stop,
            reporting.clone(),
            period,
            "report failed",
            move || {
                let a = a.clone();
                async move { a.step().await.map(|_| ()) }
            },
        )
    });
    let programming = beat("programming");
    if let Some(b) = &programming {
        let _ = agent.programming_beat.set(b.clone());
    }
    let a = agent.clone();
    sup.spawn("programming", move |stop| {
        programs(a.clone(), programming.clone(), stop)
    });
    if !agent.settings.cleaning.is_empty() {
        let cleaning = beat("cleaning");
        let a = agent.clone();
        sup.spawn("cleaning", move |stop| {
            cleanings(a.clone(), cleaning.clone(), stop)
        });
    }
}

impl Agent {
    /// Reports every interval, carries out programming requests and cleanings, until
    /// `shutdown` resolves: this agent's three workers alone (no metrics port, no
    /// kubelet plugins; [`super::Node`] runs those too).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let agent = Arc::new(self);
        let mut sup = Supervisor::default();
        spawn(&agent, &mut sup);
        shutdown.await;
        sup.shutdown().await;
    }
}

/// Holds `beat` (when the agent has probes) for `bound`.
fn hold(beat: &Option<Arc<Beat>>, bound: Duration) -> Option<crate::observe::Held> {
    beat.as_ref().map(|b| b.hold(bound))
}

/// Runs `step` every `period` until `stop`; a failed step is logged.
async fn every<F, Fut, E>(
    mut stop: Stop,
    beat: Option<Arc<Beat>>,
    period: Duration,
    failed: &'static str,
    mut step: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        {
            let _waiting = hold(&beat, period);
            tokio::select! {
                _ = stop.stopped() => return Ok(()),
                _ = tick.tick() => {}
            }
        }
        let _stepping = hold(&beat, CALL_BOUND);
        if let Err(e) = step().await {
            tracing::error!("{failed}: {e}");
        }
    }
}

/// The programming worker: the server's requests every program interval, and each
/// handed-over `fpga-default` cleaning in its own task as it comes (another device's
/// programming does not wait for a card being cleaned).
async fn programs(
    agent: Arc<Agent>,
    beat: Option<Arc<Beat>>,
    mut stop: Stop,
) -> anyhow::Result<()> {
    let period = agent.settings.program_interval;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut handed = agent.handover.1.lock().await;
    let mut cleaning: JoinSet<()> = JoinSet::new();
    loop {
        let next: Option<Handover> = {
            let _waiting = hold(&beat, period);
            tokio::select! {
                _ = stop.stopped() => break,
                _ = tick.tick() => None,
                Some(h) = handed.recv() => Some(h),
                Some(ended) = cleaning.join_next(), if !cleaning.is_empty() => {
                    if let Err(e) = ended {
                        tracing::error!("an fpga-default cleaning task failed: {e}");
                    }
                    continue;
                }
            }
        };
        match next {
            Some(h) => {
                let a = agent.clone();
                cleaning.spawn(async move { a.clean_by_programming(h).await });
            }
            None => {
                let _stepping = hold(&beat, CALL_BOUND);
                if let Err(e) = agent.program_step().await {
                    tracing::warn!("looking for programming requests failed: {e}");
                }
            }
        }
    }
    // A cleaning cut short is handed back by the server at the next start.
    cleaning.shutdown().await;
    Ok(())
}

/// The cleaning worker: a long poll (see [`CLEANING_WAIT_SECONDS`]): the server
/// answers as soon as a device of this node is released. An answer that came back
/// early with nothing new (an error, or a server that does not hold long polls) waits
/// out the program interval before the next look, so a failing server is not hammered.
async fn cleanings(
    agent: Arc<Agent>,
    beat: Option<Arc<Beat>>,
    mut stop: Stop,
) -> anyhow::Result<()> {
    let pause = agent.settings.program_interval;
    let mut next = Instant::now();
    loop {
        let asked = {
            let _waiting = hold(&beat, next.saturating_duration_since(Instant::now()));
            tokio::select! {
                _ = stop.stopped() => return Ok(()),
                _ = tokio::time::sleep_until(next.into()) => Instant::now(),
            }
        };
        let started = {
            let bound = Duration::from_secs(CLEANING_WAIT_SECONDS) + CALL_BOUND;
            let _polling = hold(&beat, bound);
            tokio::select! {
                _ = stop.stopped() => return Ok(()),
                r = agent.look_for_cleanings(Some(CLEANING_WAIT_SECONDS)) => r,
            }
        };
        let started = started.unwrap_or_else(|e| {
            tracing::warn!("looking for cleanings failed: {e}");
            0
        });
        next = if started == 0 && asked.elapsed() < pause {
            asked + pause
        } else {
            Instant::now()
        };
    }
}
