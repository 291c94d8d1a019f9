//! Performing bind jobs: the store half of the bind worker (`accel-server`'s
//! `accelerator::binder`).
//!
//! A job (`bind_jobs`, written with the ARQ's move to `BindStarted` by
//! [`super::arqs::start_bind`]) goes `pending → done | failed`, or through
//! `programming` while the agent programs the deployable. Guarantees, all kept in SQL so
//! they hold across replicas on one PostgreSQL database:
//!
//! - **One performer.** The bind worker takes and performs an instance's jobs in one
//!   transaction ([`take_and_perform`]): the take is a compare-and-swap on
//!   `owner`/`lease_until` that only succeeds when the job is unowned or its lease ran
//!   out (a crashed server's jobs are free again after the lease), after the instance's
//!   rows are locked. The older two-step path ([`claim`], then [`perform`], which
//!   re-checks `owner = me` under the lock) keeps the same rule: a worker whose lease
//!   was taken over finds nothing to update and changes nothing.
//! - **A handle is given once.** The attach handle is taken with `UPDATE attach_handles
//!   SET in_use = 1 WHERE id = .. AND in_use = 0`, in the transaction that moves the ARQ
//!   to `Bound`.
//! - **Every job ends.** A job found past its deadline ends `failed` (ARQ `BindFailed`),
//!   whatever it was waiting for.
//! - **The Nova event is never lost.** The transaction that resolves an instance's last
//!   ARQ records the instance's event in the outbox ([`super::events`]). The instance's
//!   ARQ rows are locked first (`UPDATE .. SET updated_at = updated_at`, portable row
//!   locks), so two transactions finishing two ARQs of one instance cannot both see the
//!   other as unresolved.

mod attempt;

use super::events;
use super::lease;
pub use super::programs::{finish_program_request, program_request, ProgramRequest, ProgramState};
use crate::{Store, StoreError, Tx};
use accel_core::accelerator::ArqState;
use attempt::{perform_locked, write_bound, Seen};
use sqlx::Row;

super::column_enum!(
    /// `bind_jobs.state`.
    JobState {
        /// To perform.
        Pending => "pending",
        /// Waiting for the agent's programming request.
        Programming => "programming",
        Done => "done",
        Failed => "failed",
    }
);

/// Job states a worker still has to act on.
const ACTIVE: &str = "('pending', 'programming')";

impl JobState {
    /// One of [`ACTIVE`].
    fn is_active(self) -> bool {
        matches!(self, JobState::Pending | JobState::Programming)
    }
}

/// A job that is due: free to claim and with something to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueJob {
    pub id: i64,
    pub arq_uuid: String,
    pub instance_uuid: Option<String>,
    /// The compute node the ARQ is bound to (the unit of fairness in [`due`]).
    pub hostname: Option<String>,
}

/// Jobs a worker should take at `now`: free ([`lease::free`]: unowned, lease expired,
/// or holder's heartbeat expired) and either pending, or programming with the agent's
/// answer in or the deadline passed.
///
/// The order is round-robin across hostnames, one instance per host per turn: every
/// host's oldest instance, then every host's second oldest, and so on; within a turn
/// oldest first, and an instance's jobs together. So a host with many instances
/// waiting cannot push another host's instance out of a worker's batch (`limit`), as
/// plain oldest-first would. Window functions: SQLite 3.25, PostgreSQL, MariaDB 10.2
/// and MySQL 8 all have them.
pub async fn due(tx: &mut Tx, now: i64, limit: i64) -> Result<Vec<DueJob>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT id, arq_uuid, instance_uuid, hostname FROM ( \
           SELECT f.id, f.arq_uuid, f.instance_uuid, f.hostname, f.first_id, \
                  DENSE_RANK() OVER (PARTITION BY f.hostname ORDER BY f.first_id) AS turn \
           FROM ( \
             SELECT j.id, j.arq_uuid, a.instance_uuid, a.hostname, \
                    MIN(j.id) OVER (PARTITION BY a.instance_uuid) AS first_id \
             FROM bind_jobs j \
             JOIN extended_accelerator_requests a ON a.uuid = j.arq_uuid \
             LEFT JOIN program_requests pr ON pr.arq_uuid = j.arq_uuid \
             WHERE {free} \
             AND (j.state = 'pending' OR (j.state = 'programming' \
                  AND (j.deadline < $1 OR pr.state IS NULL OR pr.state <> 'pending'))) \
           ) f \
         ) t ORDER BY turn, first_id, id LIMIT $2",
        free = lease::free("j.", "$1"),
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(DueJob {
                id: r.try_get(0)?,
                arq_uuid: r.try_get(1)?,
                instance_uuid: r.try_get(2)?,
                hostname: r.try_get(3)?,
            })
        })
        .collect()
}

/// Takes job `id` for `owner` until `lease_until` if it is active and unowned or its
/// lease expired before `now`. True when this call got it.
pub async fn claim(
    tx: &mut Tx,
    id: i64,
    owner: &str,
    now: i64,
    lease_until: i64,
) -> Result<bool, StoreError> {
    lease::take(tx, &JOBS, id, owner, now, lease_until).await
}

/// Bind jobs are taken while active (the states of [`ACTIVE`]), each take counting an
/// attempt.
const JOBS: lease::Queue = lease::Queue {
    table: "bind_jobs",
    key: "id",
    counts_attempts: true,
    ready: "state IN ('pending', 'programming')",
};

/// How a [`perform`] call left its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The ARQ is `Bound` to this attach handle (uuid).
    Bound(String),
    /// The ARQ is `BindFailed`, for this reason.
    Failed(String),
    /// Waiting for the agent to program the deployable; the job is unowned again.
    Programming,
    /// Not this worker's any more (lease taken over, job gone with an unbind) or the
    /// ARQ left `BindStarted` by other means: nothing was changed.
    Skipped,
}

/// What [`perform`] did, and whether it recorded a Nova event (the instance's ARQs are
/// all resolved now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Performed {
    pub arq_uuid: String,
    pub instance_uuid: Option<String>,
    /// When the bind was accepted (epoch seconds; 0 when the job was gone).
    pub accepted_at: i64,
    pub outcome: Outcome,
    pub event_recorded: bool,
}

impl Performed {
    fn skipped(arq_uuid: String) -> Performed {
        Performed {
            arq_uuid,
            instance_uuid: None,
            accepted_at: 0,
            outcome: Outcome::Skipped,
            event_recorded: false,
        }
    }

    /// The ARQ is resolved by this call (`Bound` or `BindFailed`).
    fn resolved(&self) -> bool {
        matches!(self.outcome, Outcome::Bound(_) | Outcome::Failed(_))
    }
}

struct JobRow {
    id: i64,
    state: JobState,
    owner: Option<String>,
    deadline: i64,
    /// When the bind was accepted (epoch seconds), for the bind-duration histogram.
    accepted_at: i64,
    arq_id: i64,
    arq_uuid: String,
    arq_state: String,
    device_rp_uuid: Option<String>,
    instance_uuid: Option<String>,
    hostname: Option<String>,
    profile_id: i64,
    group: i64,
    /// The profile's groups as stored (read with the job, so no query per profile).
    groups: Option<String>,
}

/// The jobs `ids` that still exist, with their ARQs, in the order of `ids`.
async fn job_rows(tx: &mut Tx, ids: &[i64]) -> Result<Vec<JobRow>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
    let sql = format!(
        "SELECT j.id, j.state, j.deadline, j.created_at, a.id, a.uuid, a.state, \
         a.device_rp_uuid, a.instance_uuid, a.hostname, a.device_profile_id, \
         a.device_profile_group_id, j.owner, p.groups \
         FROM bind_jobs j JOIN extended_accelerator_requests a ON a.uuid = j.arq_uuid \
         LEFT JOIN device_profiles p ON p.id = a.device_profile_id \
         WHERE j.id IN ({})",
        marks.join(", ")
    );
    let mut q = sqlx::query(&sql);
    for id in ids {
        q = q.bind(*id);
    }
    let mut rows = q
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            Ok(JobRow {
                id: r.try_get(0)?,
                state: super::parse_column(r, 1)?,
                deadline: r.try_get(2)?,
                accepted_at: r.try_get(3)?,
                arq_id: r.try_get(4)?,
                arq_uuid: r.try_get(5)?,
                arq_state: r.try_get(6)?,
                device_rp_uuid: r.try_get(7)?,
                instance_uuid: r.try_get(8)?,
                hostname: r.try_get(9)?,
                profile_id: r.try_get(10)?,
                group: r.try_get(11)?,
                owner: r.try_get(12)?,
                groups: r.try_get(13)?,
            })
        })
        .collect::<Result<Vec<JobRow>, StoreError>>()?;
    rows.sort_by_key(|r| ids.iter().position(|id| *id == r.id));
    Ok(rows)
}

/// Row locks on every ARQ of `instance`, held to the end of the transaction.
async fn lock_instance(tx: &mut Tx, instance: &str) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE extended_accelerator_requests SET updated_at = updated_at \
         WHERE instance_uuid = $1",
    )
    .bind(instance)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Locks the instances of jobs `ids` (each once, in the order first seen), before any
/// job row: the order the API's unbind and delete take them in.
async fn lock_instances_of(tx: &mut Tx, ids: &[i64]) -> Result<(), StoreError> {
    let mut locked: Vec<String> = Vec::new();
    for row in job_rows(tx, ids).await? {
        // The instance of a BindStarted ARQ changes only with an unbind, which also
        // drops the job; reading it before the lock is safe.
        if let Some(i) = row.instance_uuid {
            if !locked.contains(&i) {
                lock_instance(tx, &i).await?;
                locked.push(i);
            }
        }
    }
    Ok(())
}

/// Performs job `id`, which `owner` claimed, at `now`, in the caller's transaction:
/// checks the deadline, finds the deployable under the ARQ's `device_rp_uuid`,
/// records a programming request when the profile group names a bitstream the
/// deployable does not hold or a function its traits do not show (the server's
/// built-in fake source, on a host no agent reports, programs at once; otherwise the
/// host's agent is asked and the job waits for its answer), takes a free attach handle
/// and moves the ARQ to `Bound`, or to `BindFailed` when any of that is impossible.
/// When the ARQ was its instance's last unresolved one, the instance's Nova event is
/// recorded in the same transaction.
pub async fn perform(tx: &mut Tx, owner: &str, id: i64, now: i64) -> Result<Performed, StoreError> {
    lock_instances_of(tx, &[id]).await?;
    // Ours still? This also locks the job row until commit.
    let mine = sqlx::query(&format!(
        "UPDATE bind_jobs SET updated_at = $1 WHERE id = $2 AND owner = $3 AND state IN {ACTIVE}"
    ))
    .bind(now)
    .bind(id)
    .bind(owner)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let Some(job) = job_rows(tx, &[id]).await?.pop() else {
        return Ok(Performed::skipped(String::new()));
    };
    if mine != 1 {
        return Ok(Performed::skipped(job.arq_uuid));
    }
    let mut taken = Vec::new();
    let mut done = perform_locked(tx, job, now, &mut Seen::new(1), &mut taken).await?;
    write_bound(tx, &taken, now).await?;
    if let (true, Some(instance)) = (done.resolved(), &done.instance_uuid) {
        done.event_recorded = record_if_resolved(tx, instance, now, None).await?.is_some();
    }
    Ok(done)
}

async fn finish_job(
    tx: &mut Tx,
    id: i64,
    state: JobState,
    error: Option<&str>,
    now: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE bind_jobs SET state = $1, error = $2, owner = NULL, lease_until = NULL, \
         updated_at = $3 WHERE id = $4",
    )
    .bind(state.as_str())
    .bind(error)
    .bind(now)
    .bind(id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Records the instance's Nova event when none of its ARQs is unresolved any more.
/// With `lease`, the event is recorded as taken by that owner until then, for the
/// caller to deliver itself (see [`events::record`]).
async fn record_if_resolved(
    tx: &mut Tx,
    instance: &str,
    now: i64,
    lease: Option<(&str, i64)>,
) -> Result<Option<events::NovaEvent>, StoreError> {
    let rows = sqlx::query(
        "SELECT uuid, state FROM extended_accelerator_requests WHERE instance_uuid = $1 \
         ORDER BY id",
    )
    .bind(instance)
    .fetch_all(&mut *tx)
    .await?;
    let mut arqs = Vec::with_capacity(rows.len());
    for r in &rows {
        let uuid: String = r.try_get(0)?;
        let state: String = r.try_get(1)?;
        let state = ArqState::parse(&state)
            .ok_or_else(|| StoreError::Invalid(format!("stored ARQ state {state:?} is unknown")))?;
        if !state.is_resolved() {
            return Ok(None);
        }
        arqs.push((uuid, state));
    }
    if arqs.is_empty() {
        return Ok(None);
    }
    Ok(Some(events::record(tx, instance, arqs, now, lease).await?))
}

/// A bind job as stored, for diagnostics and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: i64,
    pub arq_uuid: String,
    pub state: JobState,
    pub deadline: i64,
    pub attempts: i64,
    pub owner: Option<String>,
    pub lease_until: Option<i64>,
    pub error: Option<String>,
}

/// The job of an ARQ, if it has one.
pub async fn job_of(tx: &mut Tx, arq_uuid: &str) -> Result<Option<Job>, StoreError> {
    let row = sqlx::query(
        "SELECT id, arq_uuid, state, deadline, attempts, owner, lease_until, error \
         FROM bind_jobs WHERE arq_uuid = $1",
    )
    .bind(arq_uuid)
    .fetch_optional(&mut *tx)
    .await?;
    row.map(|r| {
        Ok(Job {
            id: r.try_get(0)?,
            arq_uuid: r.try_get(1)?,
            state: super::parse_column(&r, 2)?,
            deadline: r.try_get(3)?,
            attempts: r.try_get(4)?,
            owner: r.try_get(5)?,
            lease_until: r.try_get(6)?,
            error: r.try_get(7)?,
        })
    })
    .transpose()
}

/// Claims jobs `ids` (one instance's) for `owner` until `lease_until` in one
/// transaction; returns the ids this call got, in order.
pub async fn claim_all(
    store: &Store,
    ids: Vec<i64>,
    owner: &str,
    now: i64,
    lease_until: i64,
) -> Result<Vec<i64>, StoreError> {
    store
        .write_rerunning(|| {
            let (ids, owner) = (ids.clone(), owner.to_owned());
            move |tx| {
                Box::pin(async move {
                    let mut got = Vec::with_capacity(ids.len());
                    for id in ids {
                        if claim(tx, id, &owner, now, lease_until).await? {
                            got.push(id);
                        }
                    }
                    Ok(got)
                })
            }
        })
        .await
}

/// Performs `owner`'s claimed jobs `ids` (one instance's) in one transaction, so the
/// instance's ARQs resolve, and its Nova event is recorded, together.
pub async fn perform_all(
    store: &Store,
    owner: &str,
    ids: Vec<i64>,
    now: i64,
) -> Result<Vec<Performed>, StoreError> {
    store
        .write_rerunning(|| {
            let (ids, owner) = (ids.clone(), owner.to_owned());
            move |tx| {
                Box::pin(async move {
                    let mut out = Vec::with_capacity(ids.len());
                    for id in ids {
                        out.push(perform(tx, &owner, id, now).await?);
                    }
                    Ok(out)
                })
            }
        })
        .await
}

/// [`due`] (one statement, so no transaction around it): the bind worker's pass
/// starts here.
pub async fn due_now(store: &Store, now: i64, limit: i64) -> Result<Vec<DueJob>, StoreError> {
    store
        .read_one(move |tx| Box::pin(async move { due(tx, now, limit).await }))
        .await
}

/// What [`take_and_perform`] did with one instance's jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceBind {
    /// The jobs this call took, each performed.
    pub performed: Vec<Performed>,
    /// Jobs another worker held or had finished first.
    pub not_taken: usize,
    /// The instance's Nova event, when this call resolved its last ARQ (one per
    /// instance; jobs without an instance have none); taken for delivery by the
    /// caller when it asked for that.
    pub events: Vec<events::NovaEvent>,
}

/// Runs of one [`take_and_perform`] transaction: a deadlock or serialization failure
/// (more likely with instances performed at once) reruns the whole transaction, as
/// Placement's writers do.
pub const PERFORM_ATTEMPTS: u32 = 5;

/// One instance's due jobs for [`take_and_perform`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take {
    /// The worker taking them.
    pub owner: String,
    /// The instance, as [`due`] named it, or `None` to read it in the transaction.
    pub instance: Option<String>,
    pub ids: Vec<i64>,
    pub now: i64,
    /// The jobs' lease.
    pub lease_until: i64,
    /// Record the instance's event taken by `owner` until then (the caller delivers
    /// it), or pending (any sender's due pass takes it).
    pub deliver_until: Option<i64>,
}

/// Takes `owner`'s due jobs (one instance's) and performs them in one transaction: the
/// claim ([`claim`]'s compare-and-swap) and the perform commit together, so a bind
/// costs one commit and no other worker can see the job between the two. The
/// instance's ARQ rows are locked first, as [`perform`] does; a job another worker
/// holds or finished is left alone (`not_taken`). When the instance's last ARQ
/// resolves, its event is recorded in the same transaction, and with `deliver_until` it
/// is recorded as taken by `owner` until then (the caller posts it without claiming it
/// again; should it not, the lease runs out and any sender takes it).
///
/// The transaction is rerun from scratch after a retryable failure
/// ([`StoreError::is_retryable`]), at most [`PERFORM_ATTEMPTS`] runs; `runs` counts
/// those that began (the bind worker's metrics tell reruns from failures).
pub async fn take_and_perform(
    store: &Store,
    take: &Take,
    runs: &mut u32,
) -> Result<InstanceBind, StoreError> {
    store
        .rerun(
            PERFORM_ATTEMPTS,
            StoreError::is_retryable,
            || {
                *runs += 1;
                let take = take.clone();
                move |tx| Box::pin(async move { take_and_perform_once(tx, take).await })
            },
            |_| true,
        )
        .await
}

/// [`take_and_perform`] for several instances in one transaction, each taken and
/// performed exactly as alone (its ARQ rows locked first, its event recorded with its
/// resolution): one commit, and on SQLite one turn of the single writer, for all of
/// them. Any failure rolls back every instance of the batch; the caller then performs
/// them one by one, so one failing instance costs the others only the retry.
pub async fn take_and_perform_together(
    store: &Store,
    takes: &[Take],
    runs: &mut u32,
) -> Result<Vec<InstanceBind>, StoreError> {
    store
        .rerun(
            PERFORM_ATTEMPTS,
            StoreError::is_retryable,
            || {
                *runs += 1;
                let takes = takes.to_vec();
                move |tx| {
                    Box::pin(async move {
                        let mut out = Vec::with_capacity(takes.len());
                        for take in takes {
                            out.push(take_and_perform_once(tx, take).await?);
                        }
                        Ok(out)
                    })
                }
            },
            |_| true,
        )
        .await
}

/// One run of [`take_and_perform`]'s transaction.
async fn take_and_perform_once(tx: &mut Tx, take: Take) -> Result<InstanceBind, StoreError> {
    let Take {
        owner,
        instance,
        ids,
        now,
        lease_until,
        deliver_until,
    } = take;
    match &instance {
        Some(i) => lock_instance(tx, i).await?,
        None => lock_instances_of(tx, &ids).await?,
    }
    lease::take_all(tx, &JOBS, &ids, &owner, now, lease_until).await?;
    let mine: Vec<JobRow> = job_rows(tx, &ids)
        .await?
        .into_iter()
        .filter(|j| j.owner.as_deref() == Some(owner.as_str()) && j.state.is_active())
        .collect();
    let mut seen = Seen::new(mine.len());
    let mut out = InstanceBind {
        performed: Vec::with_capacity(mine.len()),
        not_taken: ids.len() - mine.len(),
        events: Vec::new(),
    };
    let mut taken = Vec::new();
    for job in mine {
        out.performed
            .push(perform_locked(tx, job, now, &mut seen, &mut taken).await?);
    }
    write_bound(tx, &taken, now).await?;
    let mut instances: Vec<String> = Vec::new();
    for p in out.performed.iter().filter(|p| p.resolved()) {
        if let Some(i) = &p.instance_uuid {
            if !instances.contains(i) {
                instances.push(i.clone());
            }
        }
    }
    let lease = deliver_until.map(|until| (owner.as_str(), until));
    for instance in instances {
        if let Some(ev) = record_if_resolved(tx, &instance, now, lease).await? {
            if let Some(p) = out
                .performed
                .iter_mut()
                .rev()
                .find(|p| p.instance_uuid.as_ref() == Some(&instance))
            {
                p.event_recorded = true;
            }
            out.events.push(ev);
        }
    }
    Ok(out)
}
