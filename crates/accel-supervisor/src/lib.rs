//! The supervisor of background workers, shared by the server (the bind worker, the
//! Nova event sender, the external-Placement pusher) and the node agent (reports,
//! programming, cleaning, the kubelet plugins): each runs as its own task, and one that
//! returns an error or panics is logged at `error` with its cause and started again
//! after a backoff (1 s, doubling to 60 s; back to 1 s once a run lasted a minute).
//!
//! ```text
//! Supervisor ── JoinSet ── guard(name) ─spawn─▶ worker(stop) ─▶ Ok at stop: done
//!                               ▲                      │ Err(e) / panic / early Ok
//!                               └── error!, backoff ◀──┘
//! ```
//!
//! Restart rather than exit: every worker is a loop around an idempotent `step()`
//! whose state lives in the database under leases (the server's) or on the server
//! (the agent's), so a fresh run resumes exactly where a failed one stopped, while
//! the rest (the APIs, the agent's other workers) keeps serving. Exiting would turn one bad job or a database blip into an
//! outage of both APIs; a worker that keeps failing stays visible as an `error` line
//! per attempt. A worker runs in its own spawned task so that a panic is caught at
//! the guard (`JoinError`) instead of unwinding through the supervisor; dropping the
//! supervisor aborts the guards, and a guard's drop aborts its worker.
//!
//! [`Supervisor::running`] tells the health checks which workers run right now: a
//! worker waiting out its backoff after a failure counts as stopped, so `/healthcheck`
//! and `/readyz` answer 503 until its next run starts.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Tells a worker to return: `stopped()` completes once [`Supervisor::shutdown`] ran.
#[derive(Clone)]
pub struct Stop(watch::Receiver<bool>);

impl Stop {
    /// Completes when the supervisor asks its workers to stop (at once if it already
    /// did).
    pub async fn stopped(&mut self) {
        let _ = self.0.wait_for(|s| *s).await;
    }

    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }
}

/// Waits between two runs of a failed worker.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

/// Runs named workers until [`Supervisor::shutdown`], restarting any that fails.
pub struct Supervisor {
    tasks: JoinSet<()>,
    stop: watch::Sender<bool>,
    backoff: Backoff,
    running: Running,
}

/// Whether each supervised worker is running now (shared with the health checks).
#[derive(Clone, Default, Debug)]
pub struct Running(Arc<Mutex<Vec<WorkerFlag>>>);

/// A worker's name and whether it runs now.
type WorkerFlag = (&'static str, Arc<AtomicBool>);

impl Running {
    /// The workers not running now: failed and waiting to restart, or stopped.
    pub fn stopped(&self) -> Vec<&'static str> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, up)| !up.load(Ordering::Relaxed))
            .map(|(name, _)| *name)
            .collect()
    }

    fn add(&self, name: &'static str) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, flag.clone()));
        flag
    }
}

impl Default for Supervisor {
    fn default() -> Supervisor {
        Supervisor::new(Backoff::default())
    }
}

impl Supervisor {
    pub fn new(backoff: Backoff) -> Supervisor {
        Supervisor {
            tasks: JoinSet::new(),
            stop: watch::channel(false).0,
            backoff,
            running: Running::default(),
        }
    }

    /// Which workers run now, for the health checks.
    pub fn running(&self) -> Running {
        self.running.clone()
    }

    /// Starts worker `name`: `make` builds one run, which should return `Ok(())` once
    /// its [`Stop`] fires. Any other end of a run (an error, a panic, `Ok` before the
    /// stop) is logged and `make` is called again after the backoff.
    pub fn spawn<F, Fut>(&mut self, name: &'static str, make: F)
    where
        F: Fn(Stop) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let stop = Stop(self.stop.subscribe());
        let up = self.running.add(name);
        self.tasks.spawn(guard(name, make, stop, self.backoff, up));
    }

    /// Asks every worker to stop after its current step and waits for them.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Aborts the worker task when the guard is dropped (the supervisor aborted).
struct AbortOnDrop(tokio::task::JoinHandle<anyhow::Result<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn guard<F, Fut>(
    name: &'static str,
    make: F,
    mut stop: Stop,
    backoff: Backoff,
    up: Arc<AtomicBool>,
) where
    F: Fn(Stop) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let mut wait = backoff.first;
    loop {
        let started = tokio::time::Instant::now();
        up.store(true, Ordering::Relaxed);
        let mut run = AbortOnDrop(tokio::spawn(make(stop.clone())));
        let outcome = (&mut run.0).await;
        up.store(false, Ordering::Relaxed);
        match outcome {
            Ok(Ok(())) if stop.is_stopped() => return,
            Ok(Ok(())) => {
                tracing::error!(
                    worker = name,
                    retry_in_ms = wait.as_millis() as u64,
                    "background worker returned before the server stopped; restarting"
                )
            }
            Ok(Err(e)) => {
                tracing::error!(
                    worker = name,
                    error = format!("{e:#}"),
                    retry_in_ms = wait.as_millis() as u64,
                    "background worker failed; restarting"
                )
            }
            Err(e) => {
                let cause = if e.is_panic() {
                    panic_message(e.into_panic())
                } else {
                    e.to_string()
                };
                tracing::error!(worker = name, panic = %cause, retry_in_ms = wait.as_millis() as u64, "background worker panicked; restarting")
            }
        }
        if started.elapsed() >= backoff.max {
            wait = backoff.first;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.stopped() => return,
        }
        wait = (wait * 2).min(backoff.max);
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_testkit::Logs;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A worker that panics on its first run and fails on its second is logged at
    /// `error` with each cause, restarted after the backoff, and its third run stops
    /// cleanly at shutdown.
    #[tokio::test]
    async fn a_failing_worker_is_logged_and_restarted_with_backoff() {
        let (logs, _guard) = Logs::capture();

        let runs = Arc::new(AtomicUsize::new(0));
        let third = Arc::new(tokio::sync::Notify::new());
        let mut sup = Supervisor::new(Backoff {
            first: Duration::from_millis(20),
            max: Duration::from_secs(60),
        });
        let (r, t) = (runs.clone(), third.clone());
        let begun = tokio::time::Instant::now();
        sup.spawn("flaky", move |mut stop| {
            let n = r.fetch_add(1, Ordering::SeqCst);
            let t = t.clone();
            async move {
                match n {
                    0 => panic!("bad job 42"),
                    1 => Err(anyhow::anyhow!("database gone").context("claiming jobs")),
                    _ => {
                        t.notify_one();
                        stop.stopped().await;
                        Ok(())
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), third.notified())
            .await
            .expect("the worker was not restarted twice");
        assert!(sup.running().stopped().is_empty(), "the third run is up");
        // 20 ms after the panic, 40 ms after the error.
        assert!(begun.elapsed() >= Duration::from_millis(60));
        sup.shutdown().await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        let text = logs.text();
        assert!(
            text.contains("ERROR")
                && text.contains("background worker panicked; restarting")
                && text.contains("worker=\"flaky\"")
                && text.contains("bad job 42"),
            "{text}"
        );
        assert!(
            text.contains("background worker failed; restarting")
                && text.contains("claiming jobs: database gone"),
            "{text}"
        );
    }

    /// A worker that returns `Ok` while the server runs is an error too (a loop that
    /// ended by mistake), and shutdown during the backoff ends at once.
    #[tokio::test]
    async fn an_early_return_is_an_error_and_shutdown_interrupts_the_backoff() {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut sup = Supervisor::new(Backoff {
            first: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
        });
        let r = runs.clone();
        sup.spawn("quitter", move |_| {
            r.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        });
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // Waiting out its backoff, the worker counts as stopped for the health checks.
        let running = sup.running();
        tokio::time::timeout(Duration::from_secs(10), async {
            while running.stopped().is_empty() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the ended worker is reported stopped");
        assert_eq!(running.stopped(), ["quitter"]);
        let begun = tokio::time::Instant::now();
        sup.shutdown().await;
        assert!(begun.elapsed() < Duration::from_secs(1));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
