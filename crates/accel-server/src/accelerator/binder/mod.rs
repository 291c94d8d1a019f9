//! The bind worker and the Nova event sender: the background half of an ARQ bind.
//!
//! ```text
//!  PATCH (bind) ──tx──▶ ARQ BindStarted + bind_jobs row ──▶ 202, wake ─┐
//!                                                                     ▼
//!  Binder::step: due jobs (round-robin across hosts), up to `concurrency` instances
//!                 at once, a slot refilled as one frees or a bind is accepted; each
//!                 instance in ONE transaction: lock its ARQ rows, take the jobs (lease
//!                 CAS), attach handles (in_use CAS), ARQs Bound | BindFailed,
//!                 instance resolved? ─▶ nova_events row (same tx, leased to this
//!                 server) ─▶ handed to the sender ─┐
//!                                                  ▼
//!  EventSender: handed-over events, and due ones (other replicas', retries) claimed
//!                 by a lease CAS ─▶ POST /os-server-external-events
//!                 ─▶ delivered | rejected | retry with backoff | expired | no_endpoint
//! ```
//!
//! Everything a job or an event needs is in the database, so any replica's worker may
//! perform it and a restarted server resumes what a dead one left (its leases expire).
//! Both loops are thin shells around a testable `step(now)`; they wake on a
//! [`Notify`] (this process's new work) and poll (other replicas' work, retries,
//! deadlines).
//!
//! **Why one transaction per instance.** Taking the jobs in their own commit and then
//! performing them in another cost a commit and a dozen round trips more per instance;
//! with the take inside the performing transaction, no other worker can see a taken job
//! between the two, and a rolled-back transaction leaves the job free (a failed one is
//! then leased for a lease's length so it is not retried in a tight loop). On SQLite
//! several instances share one such transaction ([`default_together`]): its one writer
//! serialises every transaction anyway, and an instance alone waited its turn behind
//! the API's writes; a group that fails is bound again one instance at a time.
//!
//! **Why instances run in parallel.** A bind is a handful of statements per ARQ, and on
//! a server database every statement is a network round trip: performed one instance
//! after another, the worker's ceiling was the round-trip time (about 13 ms of worker
//! time per instance on PostgreSQL, a quarter of SQLite's rate). Instances share
//! nothing but attach handles (taken with a compare-and-swap) and the guarantees below
//! are per transaction, so a step runs up to `concurrency` instances at once, each in
//! its own transactions, and the event sender posts at least as many events at once
//! ([`POSTS_AT_ONCE`]). SQLite's single writer connection serialises the
//! transactions anyway; the reads between them still overlap. The due list is taken
//! round-robin across hostnames (`accel_store::accelerator::binds::due`), so a host with
//! many instances waiting cannot fill every step while another host's boot waits.
//!
//! Invariants:
//!
//! - **Every job ends.** A job past its deadline (`bind_timeout_seconds`, default 60 s)
//!   ends `failed` and its ARQ `BindFailed`, whatever it waited for (an agent that never
//!   programs, a Nova that never calls back). A crashed server's claims expire after the
//!   30 s lease and any replica, or the restarted server, takes the jobs over; such a job
//!   ends at its deadline or at that lease's expiry, whichever is later. Sooner in
//!   practice: each process beats a heartbeat row (every 0.5 s, expiring after 2 s), and the
//!   leases of a holder whose heartbeat expired are free at once, so a restarted server
//!   resumes a killed one's binds within seconds (`heartbeat_loop`).
//! - **At most one performer, at most one handle.** The take is a compare-and-swap on
//!   `owner`/`lease_until` inside the transaction that performs the job, after the
//!   instance's rows are locked; a job another worker holds or finished is left alone
//!   (an unbind or delete drops the job, so a later transaction finds nothing). A handle is taken with `in_use = 0 → 1` in the transaction that binds the
//!   ARQ, so two workers can never hand out the same handle, and a rolled-back bind
//!   holds none.
//! - **The event commits with the resolution.** The transaction that resolves an
//!   instance's last ARQ writes its `nova_events` row; the instance's ARQ rows are locked
//!   first, so of two transactions finishing two ARQs of one instance exactly one sees
//!   both resolved (no lost event, no duplicate). Delivery is at least once: a sender that
//!   dies between Nova's answer and recording it sends again after the lease.
//! - **Programming is a request, not a call.** `program_requests` is the agents' queue:
//!   an agent lists its host's pending rows (`GET /v2/agent/hosts/{host}/programs`),
//!   fetches and verifies the image, programs, reports the new function trait, then
//!   answers (`PUT .../programs/{id}`, `binds::finish_program_request`), which makes the
//!   waiting job due and wakes the worker. An answer is taken only while the row is
//!   pending, so an answer after the bind's deadline (job failed) or after a
//!   `PATCH /v2/deployables/{uuid}/program` caller gave up (row `failed`) changes
//!   nothing. The built-in fake source's hosts (no agent report on record) program at
//!   once, as Cyborg's fake driver.
//!
//! The agent's side of a programming request:
//!
//! ```text
//! agent (program_interval) ─GET programs─▶ [request] ─▶ deployable name ─▶ device, region
//!   Glance GET /v2/images/{id} (or ?accel:function_id=F) ─▶ active, hash recorded?
//!   GET /v2/images/{id}/file ─▶ file, hashed while written ─▶ hash and size match?
//!   driver.program: fpgaconf (Intel PAC) | xbutil program --user (Xilinx) | fake
//!   report (new CUSTOM_FPGA_FUNCTION_*) ─▶ PUT programs/{id} done | failed + reason
//! ```

mod nova;
mod workers;

pub use nova::{
    handoff, render_events, EventSender, Handed, HandedEvent, Handoff, NovaEndpoint, SendStep,
    POSTS_AT_ONCE,
};

use accel_store::accelerator::binds::{self, Outcome};
use accel_store::{Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
pub use workers::{spawn, spawn_with, Workers};

/// How the background workers run.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This server's name on the leases it takes (unique per process).
    pub owner: String,
    /// How long a claimed job or event stays this server's before others may take it.
    pub lease_secs: i64,
    /// How often the database is polled for work this process was not woken for.
    pub poll_interval: Duration,
    /// Where events go; `None` records them as `no_endpoint`.
    pub nova: Option<NovaEndpoint>,
    /// Longest wait between two delivery attempts (the waits double from 1 s).
    pub max_backoff_secs: i64,
    /// Stop retrying an event this long after it was recorded (Nova waits 300 s by
    /// default, `[DEFAULT] arq_binding_timeout`).
    pub event_expiry_secs: i64,
    /// Timeout of one POST to Nova.
    pub nova_timeout: Duration,
    /// How often this process beats its heartbeat row (`server_heartbeats`).
    pub heartbeat_interval: Duration,
    /// How long after its last beat this process counts as dead and its leases as
    /// free to others (seconds; a few beats, so one slow beat is not a death).
    pub heartbeat_ttl_secs: i64,
    /// Instances the bind worker performs at once (`bind_concurrency`; 1 is one at a
    /// time); the sender posts this many Nova events at once, at least
    /// [`POSTS_AT_ONCE`].
    pub concurrency: usize,
}

impl WorkerConfig {
    /// Defaults, with a fresh owner name.
    pub fn new(nova: Option<NovaEndpoint>) -> WorkerConfig {
        WorkerConfig {
            owner: format!("accel-{}", uuid::Uuid::new_v4().simple()),
            lease_secs: 30,
            poll_interval: Duration::from_secs(2),
            nova,
            max_backoff_secs: 60,
            event_expiry_secs: 900,
            nova_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_ttl_secs: 2,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

/// Jobs or events taken per step.
pub(crate) const BATCH: i64 = 64;

/// Instances a server binds at once, and Nova events it delivers at once, unless
/// configured (`bind_concurrency`). Chosen from the ARQ cycle benchmark
/// (`docs/benchmarks.md`, "Binding in parallel"): 4 binds and 4 deliveries hold at
/// most half of a server database's 16 pooled connections, so requests keep the rest.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// The default for a database URL (`None`: the embedded SQLite file): SQLite has one
/// writer connection, so binds in parallel only queue behind each other and the API's
/// writes. Since a bind is one transaction per instance, 1 and 4 measure the same on
/// SQLite within the run-to-run spread (`docs/benchmarks.md`, "One transaction per
/// instance"), so the one-writer reasoning decides; PostgreSQL and MariaDB/MySQL get
/// [`DEFAULT_CONCURRENCY`].
pub fn default_concurrency(database: Option<&str>) -> usize {
    match database.and_then(accel_store::Backend::of_url) {
        Some(accel_store::Backend::Postgres | accel_store::Backend::MySql) => DEFAULT_CONCURRENCY,
        _ => 1,
    }
}

/// Instances the bind worker performs in one transaction on `backend`: 16 on SQLite,
/// whose one writer serialises every transaction, so each instance alone waited its
/// turn behind the API's writes (200 binds a second left binds seconds behind,
/// docs/benchmarks.md); 1 on a server database, where instances run in parallel in
/// their own transactions instead.
pub fn default_together(backend: accel_store::Backend) -> usize {
    match backend {
        accel_store::Backend::Sqlite => 16,
        _ => 1,
    }
}

/// Performs bind jobs.
pub struct Binder {
    store: Store,
    owner: String,
    lease_secs: i64,
    /// Woken when a step records Nova events.
    events_wake: Arc<Notify>,
    /// Where bind durations are recorded (the server's, once spawned).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Instances performed at once within a step, each in its own transactions;
    /// 1 performs them one after another.
    pub concurrency: usize,
    /// Jobs taken per step.
    pub batch: i64,
    /// Instances performed in one transaction ([`default_together`]): one writer
    /// turn for several on SQLite, where the bind worker otherwise waited behind
    /// every API write for each instance.
    pub together: usize,
    /// Rung when a bind is accepted (the API's `bind_wakeup`): a running step looks
    /// for due jobs at once when it has a free slot, instead of when an instance ends.
    pub wake: Option<Arc<Notify>>,
    /// Where the Nova events this worker records go: with a channel, each is recorded
    /// leased to this server and handed to its sender; without, it is recorded
    /// pending and any sender's due pass takes it.
    pub handoff: Option<Handoff>,
}

/// What one [`Binder::step`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BindStep {
    /// Jobs looked at (due when the step began, or when it looked again as
    /// instances finished).
    pub due: usize,
    pub bound: usize,
    pub failed: usize,
    /// Jobs now waiting for the agent to program a deployable.
    pub programming: usize,
    /// Claimed by another worker first, or superseded.
    pub skipped: usize,
    /// Nova events recorded.
    pub events: usize,
}

impl BindStep {
    fn add(&mut self, o: BindStep) {
        self.due += o.due;
        self.bound += o.bound;
        self.failed += o.failed;
        self.programming += o.programming;
        self.skipped += o.skipped;
        self.events += o.events;
    }
}

/// Decrements the in-flight gauge when a run ends, however it ends.
struct InFlight<'a>(&'a prometheus_client::metrics::gauge::Gauge, i64);

impl<'a> InFlight<'a> {
    fn new(gauge: &'a prometheus_client::metrics::gauge::Gauge, n: usize) -> InFlight<'a> {
        let n = n as i64;
        gauge.inc_by(n);
        InFlight(gauge, n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec_by(self.1);
    }
}

impl Binder {
    pub fn new(store: Store, owner: impl Into<String>, lease_secs: i64) -> Binder {
        Binder {
            together: default_together(store.backend()),
            store,
            owner: owner.into(),
            lease_secs,
            events_wake: Arc::new(Notify::new()),
            metrics: Default::default(),
            concurrency: DEFAULT_CONCURRENCY,
            batch: BATCH,
            wake: None,
            handoff: None,
        }
    }

    /// One pass at time `now` (epoch seconds): takes the due jobs (round-robin across
    /// hosts, [`binds::due`]) and performs them, the jobs of one instance (or of
    /// [`Binder::together`] instances) in one transaction, up to
    /// [`Binder::concurrency`] transactions at once. When a bind is
    /// accepted ([`Binder::wake`]) while a slot is free, or an instance finishes after
    /// a look the batch cut short, it looks for due jobs again (instances this pass
    /// has not taken yet), so a slot is refilled at once rather than when the slowest
    /// instance of the pass ends; a pass takes at most [`Binder::batch`] jobs.
    /// Instances are independent: each is taken and performed in its own transaction,
    /// and the guarantees (lease compare-and-swap, `owner = me` under the row locks,
    /// handle `in_use` compare-and-swap, event with the resolution) hold per
    /// transaction, so running several at once changes none of them. A failed instance
    /// does not stop the others; its jobs are leased for a lease's length so that it
    /// is not retried in a tight loop, and the step then returns the first error.
    pub async fn step(&self, now: i64) -> Result<BindStep, StoreError> {
        use futures::stream::{FuturesUnordered, StreamExt};
        let mut pass = Pass::default();
        let mut report = BindStep::default();
        report.due += self.look(now, &mut pass).await?;
        let mut running = FuturesUnordered::new();
        let mut error = None;
        let idle = Notify::new();
        let wake = self.wake.as_deref().unwrap_or(&idle);
        loop {
            while running.len() < self.concurrency.max(1) {
                let n = pass.queue.len().min(self.together.max(1));
                if n == 0 {
                    break;
                }
                let group: Vec<_> = pass.queue.drain(..n).collect();
                running.push(self.bind_group(group, now));
            }
            if running.is_empty() {
                break;
            }
            let room = running.len() < self.concurrency.max(1) && (pass.jobs as i64) < self.batch;
            let look = tokio::select! {
                done = running.next() => {
                    match done {
                        Some(Ok(p)) => report.add(p),
                        Some(Err(e)) if error.is_none() => error = Some(e),
                        Some(Err(e)) => tracing::warn!(error = %e, "bind of an instance failed"),
                        None => {}
                    }
                    // Nothing new becomes due when an instance ends: look again only
                    // when the last look was cut short by the batch.
                    pass.queue.is_empty() && pass.cut
                }
                // A bind was accepted while a slot is free.
                _ = wake.notified(), if room => true,
            };
            if look && (pass.jobs as i64) < self.batch {
                match self.look(now, &mut pass).await {
                    Ok(n) => report.due += n,
                    Err(e) => tracing::warn!(error = %e, "looking for more due bind jobs failed"),
                }
            }
        }
        if pass.instances > 1 {
            tracing::debug!(
                jobs = report.due,
                instances = pass.instances,
                concurrency = self.concurrency,
                "bind step"
            );
        }
        if report.events > 0 && self.handoff.is_none() {
            self.events_wake.notify_one();
        }
        match error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Queues the due jobs of instances `pass` has not taken yet, at most what is left
    /// of the batch; the number of jobs queued.
    async fn look(&self, now: i64, pass: &mut Pass) -> Result<usize, StoreError> {
        let room = self.batch - pass.jobs as i64;
        if room <= 0 {
            return Ok(0);
        }
        let due = binds::due_now(&self.store, now, room).await?;
        let found = due.len();
        let mut queued = 0;
        // One instance's jobs are adjacent in `due`; keep the fair order.
        let mut last: Option<Option<String>> = None;
        for j in due {
            if last.as_ref() != Some(&j.instance_uuid) {
                if pass.seen.contains(&j.instance_uuid) {
                    last = None;
                    continue;
                }
                pass.seen.push(j.instance_uuid.clone());
                pass.queue.push_back((j.instance_uuid.clone(), Vec::new()));
                pass.instances += 1;
                last = Some(j.instance_uuid);
            }
            if let Some((_, ids)) = pass.queue.back_mut() {
                ids.push(j.id);
                queued += 1;
            }
        }
        pass.jobs += queued;
        pass.cut = found as i64 >= room;
        Ok(queued)
    }

    /// Takes and performs one instance's due jobs `ids` in one transaction, and hands
    /// the instance's event to the sender when it resolved.
    async fn bind_instance(
        &self,
        instance: Option<String>,
        ids: Vec<i64>,
        now: i64,
    ) -> Result<BindStep, StoreError> {
        let _in_flight = InFlight::new(&self.metrics.bind_jobs_in_flight, ids.len());
        let done = self.perform(instance, ids, now).await?;
        Ok(self.account(done, now))
    }

    /// Takes and performs the due jobs of `group` (instances and their job ids), all
    /// in one transaction when there are several ([`binds::take_and_perform_together`]);
    /// should that fail, one transaction per instance, so a failing instance holds
    /// back no other.
    async fn bind_group(
        &self,
        mut group: Vec<(Option<String>, Vec<i64>)>,
        now: i64,
    ) -> Result<BindStep, StoreError> {
        if group.len() == 1 {
            let (instance, ids) = group.remove(0);
            return self.bind_instance(instance, ids, now).await;
        }
        let jobs: usize = group.iter().map(|(_, ids)| ids.len()).sum();
        let in_flight = InFlight::new(&self.metrics.bind_jobs_in_flight, jobs);
        let takes: Vec<binds::Take> = group
            .iter()
            .map(|(instance, ids)| self.take(instance.clone(), ids.clone(), now))
            .collect();
        let mut runs = 0;
        let mut report = BindStep::default();
        match binds::take_and_perform_together(&self.store, &takes, &mut runs).await {
            Ok(dones) => {
                if runs > 1 {
                    self.count_failures("retried", runs - 1);
                }
                for done in dones {
                    report.add(self.account(done, now));
                }
                Ok(report)
            }
            Err(e) => {
                self.count_failures("retried", runs.saturating_sub(1));
                tracing::info!(error = %e, instances = group.len(), "binding instances together failed; binding them one by one");
                drop(in_flight);
                let mut first = None;
                for (instance, ids) in group {
                    match self.bind_instance(instance, ids, now).await {
                        Ok(r) => report.add(r),
                        Err(e) if first.is_none() => first = Some(e),
                        Err(e) => tracing::warn!(error = %e, "bind of an instance failed"),
                    }
                }
                match first {
                    Some(e) => Err(e),
                    None => Ok(report),
                }
            }
        }
    }

    /// What one instance's transaction did, counted in the report and the metrics,
    /// logged, and its event handed to the sender.
    fn account(&self, done: binds::InstanceBind, now: i64) -> BindStep {
        let mut report = BindStep {
            skipped: done.not_taken,
            ..Default::default()
        };
        let now_f = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        for p in &done.performed {
            // The duration histogram runs from when the bind was accepted.
            let took = (now_f() - p.accepted_at as f64).max(0.0);
            match &p.outcome {
                Outcome::Bound(handle) => {
                    report.bound += 1;
                    self.observe_bind("bound", took);
                    tracing::info!(arq = %p.arq_uuid, attach_handle = %handle, "ARQ bound");
                }
                Outcome::Failed(reason) => {
                    report.failed += 1;
                    self.observe_bind("failed", took);
                    tracing::warn!(arq = %p.arq_uuid, %reason, "ARQ bind failed");
                }
                Outcome::Programming => report.programming += 1,
                Outcome::Skipped => report.skipped += 1,
            }
        }
        report.events = done.events.len();
        if let Some(handoff) = &self.handoff {
            for event in done.events {
                let handed = HandedEvent {
                    event,
                    lease_until: now + self.lease_secs,
                };
                if handoff.send(handed).is_err() {
                    // The sender is gone (shutting down): the lease runs out and any
                    // sender, this server's after a restart included, takes it.
                    tracing::info!(
                        "event sender stopped; the Nova event waits for its lease to end"
                    );
                }
            }
            if report.events > 0 {
                self.events_wake.notify_one();
            }
        }
        report
    }

    /// [`binds::take_and_perform`] (which reruns its transaction after a deadlock or
    /// serialization failure: the jobs are as they were); each rerun is counted, and a
    /// failure, the last retryable one included, is counted and returned, and the jobs
    /// are leased to this server for a lease's length so that they are tried again then
    /// rather than at once.
    async fn perform(
        &self,
        instance: Option<String>,
        ids: Vec<i64>,
        now: i64,
    ) -> Result<binds::InstanceBind, StoreError> {
        let count = |outcome: &'static str, n: u32| self.count_failures(outcome, n);
        let take = self.take(instance, ids, now);
        let lease_until = take.lease_until;
        let mut runs = 0;
        let done = binds::take_and_perform(&self.store, &take, &mut runs).await;
        let ids = take.ids;
        match done {
            Ok(done) => {
                if runs > 1 {
                    count("retried", runs - 1);
                    tracing::info!(runs, jobs = ?ids, "bind transaction lost a race and ran again");
                }
                Ok(done)
            }
            Err(e) => {
                count("retried", runs.saturating_sub(1));
                count("failed", 1);
                tracing::warn!(error = %e, runs, jobs = ?ids, lease_s = self.lease_secs, "bind transaction failed; the jobs are taken again when their lease ends");
                if let Err(e) =
                    binds::claim_all(&self.store, ids.clone(), &self.owner, now, lease_until).await
                {
                    tracing::debug!(error = %e, "leasing the failed jobs failed too; they are due at once");
                }
                Err(e)
            }
        }
    }

    /// One instance's due jobs as this worker takes them at `now`: leased for a
    /// lease's length, and its event (when it resolves) taken for this server's
    /// sender when there is a hand-over.
    fn take(&self, instance: Option<String>, ids: Vec<i64>, now: i64) -> binds::Take {
        let lease_until = now + self.lease_secs;
        binds::Take {
            owner: self.owner.clone(),
            instance,
            ids,
            now,
            lease_until,
            deliver_until: self.handoff.as_ref().map(|_| lease_until),
        }
    }

    /// `accel_bind_transaction_failures_total{outcome}`: reruns after a race
    /// (`retried`) and transactions that failed (`failed`).
    fn count_failures(&self, outcome: &'static str, n: u32) {
        if n > 0 {
            self.metrics
                .bind_transaction_failures
                .get_or_create(&crate::metrics::OutcomeLabel { outcome })
                .inc_by(u64::from(n));
        }
    }

    fn observe_bind(&self, outcome: &'static str, secs: f64) {
        self.metrics
            .bind_duration
            .get_or_create(&crate::metrics::OutcomeLabel { outcome })
            .observe(secs);
    }
}

/// What one [`Binder::step`] has taken so far.
#[derive(Default)]
struct Pass {
    /// The last look found as many due jobs as it asked for: more may be due.
    cut: bool,
    /// Instances taken (their jobs queued or performed), so none is taken twice.
    seen: Vec<Option<String>>,
    /// Instances and their job ids waiting for a free slot, in the fair order.
    queue: std::collections::VecDeque<(Option<String>, Vec<i64>)>,
    jobs: usize,
    instances: usize,
}
