//! One job's part of a bind transaction: find the deployable, ask for programming when
//! the profile group wants it, take a free attach handle, and the writes that move an
//! ARQ to `Bound` (batched per transaction, [`write_bound`]) or `BindFailed` ([`fail`]).
//! The transaction around it (locks, the take, the Nova event) is the parent module's.

use super::super::cleaning::withheld;
use super::super::history::{self, Kind};
use super::super::profiles;
use super::super::programs::{insert_program_request, set_bitstream, NewProgram, ProgramState};
use super::{finish_job, JobRow, JobState, Outcome, Performed};
use crate::{StoreError, Tx};
use accel_core::accelerator::{carries_function, ArqState, Group};
use sqlx::Row;

/// What one transaction looked up, for the next ARQ of the same instance: the
/// deployable of a provider, the profile, and free handles not yet tried.
#[derive(Default)]
pub(super) struct Seen {
    /// Jobs in the transaction: free handles are read this many at a time.
    want: usize,
    deployables: Vec<(String, Option<Deployable>)>,
    profiles: Vec<(i64, Option<Vec<Group>>)>,
    free_handles: Vec<(i64, Vec<(i64, String)>)>,
}

#[derive(Clone)]
struct Deployable {
    id: i64,
    driver: Option<String>,
    bitstream: Option<String>,
}

impl Seen {
    /// For a transaction of `jobs` jobs.
    pub(super) fn new(jobs: usize) -> Seen {
        Seen {
            want: jobs,
            ..Seen::default()
        }
    }

    async fn deployable(
        &mut self,
        tx: &mut Tx,
        rp: &str,
    ) -> Result<Option<Deployable>, StoreError> {
        if let Some((_, d)) = self.deployables.iter().find(|(r, _)| r == rp) {
            return Ok(d.clone());
        }
        let row = sqlx::query(
            "SELECT id, driver_name, bitstream_id FROM deployables WHERE rp_uuid = $1 \
             ORDER BY id LIMIT 1",
        )
        .bind(rp)
        .fetch_optional(&mut *tx)
        .await?;
        let d = match row {
            Some(r) => Some(Deployable {
                id: r.try_get(0)?,
                driver: r.try_get(1)?,
                bitstream: r.try_get(2)?,
            }),
            None => None,
        };
        self.deployables.push((rp.to_owned(), d.clone()));
        Ok(d)
    }

    /// The groups of the job's profile, decoded once per profile.
    fn groups(&mut self, job: &JobRow) -> Result<Option<&[Group]>, StoreError> {
        let at = match self.profiles.iter().position(|(p, _)| *p == job.profile_id) {
            Some(at) => at,
            None => {
                let groups = job.groups.as_deref().map(profiles::decode).transpose()?;
                self.profiles.push((job.profile_id, groups));
                self.profiles.len() - 1
            }
        };
        Ok(self.profiles[at].1.as_deref())
    }

    /// Takes a free handle of the deployable: `(id, uuid)`, or `None` when all are in
    /// use. Free handles are read up to `want` at a time; each is taken with the
    /// `in_use = 0 → 1` compare-and-swap, and one a concurrent taker got first is
    /// passed over.
    async fn take_handle(
        &mut self,
        tx: &mut Tx,
        dep_id: i64,
        want: usize,
        now: i64,
    ) -> Result<Option<(i64, String)>, StoreError> {
        loop {
            let at = match self.free_handles.iter().position(|(d, _)| *d == dep_id) {
                Some(at) => at,
                None => {
                    self.free_handles.push((dep_id, Vec::new()));
                    self.free_handles.len() - 1
                }
            };
            if self.free_handles[at].1.is_empty() {
                let rows = sqlx::query(
                    "SELECT id, uuid FROM attach_handles WHERE deployable_id = $1 \
                     AND in_use = 0 ORDER BY id LIMIT $2",
                )
                .bind(dep_id)
                .bind(want.max(1) as i64)
                .fetch_all(&mut *tx)
                .await?;
                let mut free = rows
                    .iter()
                    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                    .collect::<Result<Vec<(i64, String)>, StoreError>>()?;
                if free.is_empty() {
                    return Ok(None);
                }
                free.reverse();
                self.free_handles[at].1 = free;
            }
            let Some((hid, huuid)) = self.free_handles[at].1.pop() else {
                continue;
            };
            let n = sqlx::query(
                "UPDATE attach_handles SET in_use = 1, updated_at = $1 WHERE id = $2 AND in_use = 0",
            )
            .bind(now)
            .bind(hid)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 1 {
                return Ok(Some((hid, huuid)));
            }
        }
    }
}

/// Performs `job`, whose instance is locked and which is this transaction's to perform
/// (claimed by it or before it), without the instance's event: [`perform`] and
/// [`take_and_perform`] record that once the instance's jobs are done.
pub(super) async fn perform_locked(
    tx: &mut Tx,
    job: JobRow,
    now: i64,
    seen: &mut Seen,
    taken: &mut Vec<Taken>,
) -> Result<Performed, StoreError> {
    let done = |job: JobRow, outcome| Performed {
        arq_uuid: job.arq_uuid,
        instance_uuid: job.instance_uuid,
        accepted_at: job.accepted_at,
        outcome,
        event_recorded: false,
    };
    if job.arq_state != ArqState::BindStarted.as_str() {
        finish_job(
            tx,
            job.id,
            JobState::Failed,
            Some("the ARQ left BindStarted"),
            now,
        )
        .await?;
        return Ok(done(job, Outcome::Skipped));
    }
    let outcome = match attempt(tx, &job, now, seen).await? {
        Step::Bound(t) => {
            let handle = t.handle_uuid.clone();
            taken.push(t);
            Outcome::Bound(handle)
        }
        Step::Fail(reason) => {
            fail(tx, &job, &reason, now).await?;
            Outcome::Failed(reason)
        }
        Step::Wait => {
            sqlx::query(
                "UPDATE bind_jobs SET state = 'programming', owner = NULL, lease_until = NULL, \
                 updated_at = $1 WHERE id = $2",
            )
            .bind(now)
            .bind(job.id)
            .execute(&mut *tx)
            .await?;
            Outcome::Programming
        }
    };
    Ok(done(job, outcome))
}

enum Step {
    Bound(Taken),
    Fail(String),
    Wait,
}

async fn attempt(tx: &mut Tx, job: &JobRow, now: i64, seen: &mut Seen) -> Result<Step, StoreError> {
    if now > job.deadline {
        return Ok(Step::Fail(format!(
            "bind did not finish before its deadline ({} s after the epoch)",
            job.deadline
        )));
    }
    let Some(rp) = &job.device_rp_uuid else {
        return Ok(Step::Fail("the ARQ has no device_rp_uuid".into()));
    };
    let Some(dep) = seen.deployable(tx, rp).await? else {
        return Ok(Step::Fail(format!(
            "no deployable with resource provider {rp}"
        )));
    };
    // The one hand-out rule (cleaning/withheld.rs), before anything is programmed:
    // upstream refuses a bind with no free attach handle, and Nova puts the server
    // in ERROR and frees its claim; so does a device given to no one now.
    if let Some(why) = withheld::for_bind(tx, rp).await? {
        return Ok(Step::Fail(format!(
            "no free attach handle on the deployable of provider {rp}: {}",
            why.as_str()
        )));
    }
    let group = seen
        .groups(job)?
        .and_then(|g| g.get(job.group as usize))
        .cloned();
    let bitstream = group.as_ref().and_then(|g| g.get("accel:bitstream_id"));
    let function = group.as_ref().and_then(|g| g.get("accel:function_id"));
    let wants_program = match (bitstream, function) {
        (Some(b), _) => dep.bitstream.as_deref() != Some(b),
        (None, Some(f)) => !deployable_carries(tx, dep.id, f).await?,
        (None, None) => false,
    };
    if job.state == JobState::Pending && wants_program {
        // Cyborg's fake driver "programs" at once; the server's built-in fake source
        // plays that role for hosts no agent reports (an agent's `fake` driver is
        // asked like any other).
        let instant = dep.driver.as_deref() == Some("fake")
            && !agent_reports(tx, job.hostname.as_deref().unwrap_or_default()).await?;
        sqlx::query("DELETE FROM program_requests WHERE arq_uuid = $1")
            .bind(&job.arq_uuid)
            .execute(&mut *tx)
            .await?;
        insert_program_request(
            tx,
            &NewProgram {
                arq_uuid: Some(&job.arq_uuid),
                deployable_id: dep.id,
                hostname: job.hostname.as_deref().unwrap_or_default(),
                bitstream_id: bitstream,
                function_id: function,
                state: if instant {
                    ProgramState::Done
                } else {
                    ProgramState::Pending
                },
            },
            now,
        )
        .await?;
        if !instant {
            return Ok(Step::Wait);
        }
        if let Some(b) = bitstream {
            set_bitstream(tx, dep.id, b, now).await?;
        }
    } else if job.state == JobState::Programming {
        let pr = sqlx::query("SELECT state, error FROM program_requests WHERE arq_uuid = $1")
            .bind(&job.arq_uuid)
            .fetch_optional(&mut *tx)
            .await?;
        match pr {
            None => return Ok(Step::Fail("its programming request disappeared".into())),
            Some(r) => {
                let state: ProgramState = super::super::parse_column(&r, 0)?;
                let error: Option<String> = r.try_get(1)?;
                match state {
                    ProgramState::Done => {}
                    ProgramState::Pending => return Ok(Step::Wait),
                    ProgramState::Failed => {
                        return Ok(Step::Fail(format!(
                            "programming failed: {}",
                            error.unwrap_or_else(|| "no reason given".into())
                        )))
                    }
                }
            }
        }
    }

    let Some(handle) = seen.take_handle(tx, dep.id, seen.want, now).await? else {
        return Ok(Step::Fail(format!(
            "no free attach handle on the deployable of provider {rp}"
        )));
    };
    Ok(Step::Bound(Taken {
        job_id: job.id,
        arq_id: job.arq_id,
        arq_uuid: job.arq_uuid.clone(),
        rp_uuid: rp.clone(),
        instance_uuid: job.instance_uuid.clone(),
        handle_id: handle.0,
        handle_uuid: handle.1,
        deployable_id: dep.id,
    }))
}

/// An ARQ whose handle this transaction took: it becomes `Bound`, and its job `done`,
/// in [`write_bound`] once every job of the transaction was looked at.
pub(super) struct Taken {
    job_id: i64,
    arq_id: i64,
    arq_uuid: String,
    rp_uuid: String,
    instance_uuid: Option<String>,
    handle_id: i64,
    handle_uuid: String,
    deployable_id: i64,
}

/// Moves the ARQs of `taken` to `Bound` with their handles and finishes their jobs:
/// two statements however many there are (a `CASE` per column picks each ARQ's own
/// handle and deployable).
pub(super) async fn write_bound(tx: &mut Tx, taken: &[Taken], now: i64) -> Result<(), StoreError> {
    if taken.is_empty() {
        return Ok(());
    }
    // $1 Bound, $2 now, $3 BindStarted; then per ARQ: id, handle, deployable.
    let at = |i: usize, k: usize| 4 + 3 * i + k;
    let case = |k: usize| {
        let whens: Vec<String> = (0..taken.len())
            .map(|i| format!("WHEN ${} THEN ${}", at(i, 0), at(i, k)))
            .collect();
        format!("CASE id {} END", whens.join(" "))
    };
    let ids: Vec<String> = (0..taken.len()).map(|i| format!("${}", at(i, 0))).collect();
    let sql = format!(
        "UPDATE extended_accelerator_requests SET state = $1, updated_at = $2, \
         attach_handle_id = {}, deployable_id = {} WHERE id IN ({}) AND state = $3",
        case(1),
        case(2),
        ids.join(", ")
    );
    let mut q = sqlx::query(&sql)
        .bind(ArqState::Bound.as_str())
        .bind(now)
        .bind(ArqState::BindStarted.as_str());
    for t in taken {
        q = q.bind(t.arq_id).bind(t.handle_id).bind(t.deployable_id);
    }
    let n = q.execute(&mut *tx).await?.rows_affected();
    if n != taken.len() as u64 {
        // The instance lock and the state check before make this unreachable; refuse
        // to guess.
        let arqs: Vec<&str> = taken.iter().map(|t| t.arq_uuid.as_str()).collect();
        return Err(StoreError::Invalid(format!(
            "ARQs {arqs:?} left BindStarted during their bind"
        )));
    }
    let sql = format!(
        "UPDATE bind_jobs SET state = $1, error = NULL, owner = NULL, lease_until = NULL, \
         updated_at = $2 WHERE id IN ({})",
        crate::placeholders(3, taken.len())
    );
    let mut q = sqlx::query(&sql).bind(JobState::Done.as_str()).bind(now);
    for t in taken {
        q = q.bind(t.job_id);
    }
    q.execute(&mut *tx).await?;
    for t in taken {
        let detail = format!(
            "ARQ {} bound for instance {} (attach handle {})",
            t.arq_uuid,
            t.instance_uuid.as_deref().unwrap_or("-"),
            t.handle_uuid
        );
        history::record_provider(tx, &t.rp_uuid, Kind::Bind, &detail).await?;
    }
    Ok(())
}

/// Whether the deployable's reported traits say it carries `function_id` already.
async fn deployable_carries(
    tx: &mut Tx,
    dep_id: i64,
    function_id: &str,
) -> Result<bool, StoreError> {
    let values: Vec<String> = sqlx::query_scalar(
        "SELECT value FROM attributes WHERE deployable_id = $1 AND value LIKE 'CUSTOM_FPGA_FUNCTION_%'",
    )
    .bind(dep_id)
    .fetch_all(&mut *tx)
    .await?;
    Ok(carries_function(
        values.iter().map(String::as_str),
        function_id,
    ))
}

/// Whether an agent reports `host` (it has applied a report), rather than the
/// server's built-in fake source.
async fn agent_reports(tx: &mut Tx, host: &str) -> Result<bool, StoreError> {
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM agent_reports WHERE hostname = $1")
        .bind(host)
        .fetch_one(&mut *tx)
        .await?;
    Ok(n > 0)
}

async fn fail(tx: &mut Tx, job: &JobRow, reason: &str, now: i64) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE extended_accelerator_requests SET state = $1, updated_at = $2 \
         WHERE id = $3 AND state = $4",
    )
    .bind(ArqState::BindFailed.as_str())
    .bind(now)
    .bind(job.arq_id)
    .bind(ArqState::BindStarted.as_str())
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE program_requests SET state = 'failed', error = $1, updated_at = $2 \
                 WHERE arq_uuid = $3 AND state = 'pending'",
    )
    .bind("the bind failed first")
    .bind(now)
    .bind(&job.arq_uuid)
    .execute(&mut *tx)
    .await?;
    if let Some(rp) = &job.device_rp_uuid {
        let detail = format!("ARQ {} failed to bind: {reason}", job.arq_uuid);
        history::record_provider(tx, rp, Kind::BindFailed, &detail).await?;
    }
    finish_job(tx, job.id, JobState::Failed, Some(reason), now).await
}
