//! `extended_accelerator_requests` (ARQs) and `bind_jobs`.
//!
//! Every function takes the caller's [`Scope`] and applies it in SQL: a project sees and
//! touches only its own ARQs (CVE-2026-40214). Lists use the `instance_uuid` and
//! `project_id` indexes; the profile name and the attach handle come from joins in the
//! same query, not one query per ARQ as upstream does.

use super::profiles::Profile;
use super::refusals::{self, Refused as BindRefused};
use super::refused::{Key, Kind, Refused};
use super::{new_uuid, Scope, Stamps};
use crate::{placeholders, Store, StoreError, Tx};
use accel_core::accelerator::ArqState;
use sqlx::Row;

/// The attach handle of a bound ARQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundHandle {
    pub uuid: String,
    pub attach_type: String,
    /// JSON object text, as the agent reported it.
    pub attach_info: String,
}

/// An ARQ as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Arq {
    pub id: i64,
    pub uuid: String,
    pub state: ArqState,
    pub project_id: Option<String>,
    pub device_profile_id: i64,
    pub device_profile_name: String,
    pub device_profile_group_id: i64,
    pub hostname: Option<String>,
    pub device_rp_uuid: Option<String>,
    pub instance_uuid: Option<String>,
    /// Set only while the ARQ is `Bound`, as upstream fills it.
    pub attach_handle: Option<BoundHandle>,
    pub stamps: Stamps,
}

const SELECT: &str = "SELECT a.id, a.uuid, a.state, a.project_id, a.device_profile_id, \
     p.name AS dp_name, a.device_profile_group_id, a.hostname, a.device_rp_uuid, \
     a.instance_uuid, a.created_at, a.updated_at, \
     ah.uuid AS ah_uuid, ah.attach_type, ah.attach_info \
     FROM extended_accelerator_requests a \
     JOIN device_profiles p ON p.id = a.device_profile_id \
     LEFT JOIN attach_handles ah ON ah.id = a.attach_handle_id";

const RESOLVED: &str = "('Bound', 'BindFailed', 'Deleting')";

fn from_row(row: &sqlx::any::AnyRow) -> Result<Arq, StoreError> {
    let state: String = row.try_get("state")?;
    let state = ArqState::parse(&state)
        .ok_or_else(|| StoreError::Invalid(format!("stored ARQ state {state:?} is unknown")))?;
    let ah_uuid: Option<String> = row.try_get("ah_uuid")?;
    let attach_handle = match (state, ah_uuid) {
        (ArqState::Bound, Some(uuid)) => Some(BoundHandle {
            uuid,
            attach_type: row.try_get("attach_type")?,
            attach_info: row.try_get("attach_info")?,
        }),
        _ => None,
    };
    Ok(Arq {
        id: row.try_get("id")?,
        uuid: row.try_get("uuid")?,
        state,
        project_id: row.try_get("project_id")?,
        device_profile_id: row.try_get("device_profile_id")?,
        device_profile_name: row.try_get("dp_name")?,
        device_profile_group_id: row.try_get("device_profile_group_id")?,
        hostname: row.try_get("hostname")?,
        device_rp_uuid: row.try_get("device_rp_uuid")?,
        instance_uuid: row.try_get("instance_uuid")?,
        attach_handle,
        stamps: Stamps::from_row(row)?,
    })
}

/// Query text and arguments built together so placeholders stay numbered right.
struct Where {
    clauses: Vec<String>,
    args: Vec<String>,
}

impl Where {
    fn new(scope: &Scope) -> Self {
        let mut w = Where {
            clauses: Vec::new(),
            args: Vec::new(),
        };
        if let Scope::Project(p) = scope {
            w.eq("a.project_id", p.clone());
        }
        w
    }

    fn eq(&mut self, column: &str, value: String) {
        self.args.push(value);
        self.clauses
            .push(format!("{column} = ${}", self.args.len()));
    }

    fn any_of(&mut self, column: &str, values: &[String]) {
        let first = self.args.len() + 1;
        self.args.extend(values.iter().cloned());
        self.clauses.push(format!(
            "{column} IN ({})",
            placeholders(first, values.len())
        ));
    }

    fn raw(&mut self, clause: &str) {
        self.clauses.push(clause.to_owned());
    }

    fn sql(&self, head: &str, tail: &str) -> String {
        let mut sql = head.to_owned();
        if !self.clauses.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&self.clauses.join(" AND "));
        }
        sql.push_str(tail);
        sql
    }

    async fn fetch(&self, tx: &mut Tx, head: &str, tail: &str) -> Result<Vec<Arq>, StoreError> {
        let sql = self.sql(head, tail);
        let mut q = sqlx::query(&sql);
        for a in &self.args {
            q = q.bind(a);
        }
        q.fetch_all(&mut *tx).await?.iter().map(from_row).collect()
    }

    async fn count(&self, tx: &mut Tx) -> Result<i64, StoreError> {
        let sql = self.sql("SELECT COUNT(*) FROM extended_accelerator_requests a", "");
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for a in &self.args {
            q = q.bind(a);
        }
        Ok(q.fetch_one(&mut *tx).await?)
    }
}

/// Creates the ARQs a profile asks for, in state `Initial`: for each group (or only
/// group `only_group`), as many as [`accel_core::accelerator::Group::accelerator_count`],
/// with the group's index as `device_profile_group_id`. Returned in creation order.
pub async fn create_for_profile(
    tx: &mut Tx,
    profile: &Profile,
    only_group: Option<usize>,
    project_id: Option<&str>,
) -> Result<Vec<Arq>, StoreError> {
    let now = crate::now();
    let mut rows: Vec<(String, i64)> = Vec::new();
    for (index, group) in profile.groups.iter().enumerate() {
        if only_group.is_some_and(|g| g != index) {
            continue;
        }
        for _ in 0..group.accelerator_count() {
            rows.push((new_uuid(), index as i64));
        }
    }
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // One insert for all of them (the ids are read back by uuid below, so no
    // `RETURNING` is needed, which MySQL would refuse on several rows).
    let values: Vec<String> = (0..rows.len())
        .map(|i| {
            let b = 6 * i;
            format!(
                "(${}, ${}, ${}, ${}, ${}, ${})",
                b + 1,
                b + 2,
                b + 3,
                b + 4,
                b + 5,
                b + 6
            )
        })
        .collect();
    let sql = format!(
        "INSERT INTO extended_accelerator_requests \
         (uuid, project_id, state, device_profile_id, device_profile_group_id, created_at) \
         VALUES {}",
        values.join(", ")
    );
    let mut q = sqlx::query(&sql);
    for (uuid, index) in &rows {
        q = q
            .bind(uuid)
            .bind(project_id)
            .bind(ArqState::Initial.as_str())
            .bind(profile.id)
            .bind(*index)
            .bind(now);
    }
    q.execute(&mut *tx).await?;
    let sql = format!(
        "{SELECT} WHERE a.uuid IN ({}) ORDER BY a.id",
        placeholders(1, rows.len())
    );
    let mut q = sqlx::query(&sql);
    for (u, _) in &rows {
        q = q.bind(u);
    }
    q.fetch_all(&mut *tx).await?.iter().map(from_row).collect()
}

/// Filters of `GET /accelerator_requests`.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub instance: Option<String>,
    /// Only `Bound`, `BindFailed` and `Deleting` ARQs.
    pub resolved_only: bool,
}

/// The ARQs `scope` may see that match `f`, in creation order.
pub async fn list(tx: &mut Tx, scope: &Scope, f: &Filter) -> Result<Vec<Arq>, StoreError> {
    let mut w = Where::new(scope);
    if let Some(i) = &f.instance {
        w.eq("a.instance_uuid", i.clone());
    }
    if f.resolved_only {
        w.raw(&format!("a.state IN {RESOLVED}"));
    }
    w.fetch(tx, SELECT, " ORDER BY a.id").await
}

/// Whether any ARQ `scope` sees is associated with `instance`.
pub(crate) async fn instance_has_arqs(
    tx: &mut Tx,
    scope: &Scope,
    instance: &str,
) -> Result<bool, StoreError> {
    let mut w = Where::new(scope);
    w.eq("a.instance_uuid", instance.to_owned());
    Ok(w.count(tx).await? > 0)
}

pub async fn get(tx: &mut Tx, scope: &Scope, uuid: &str) -> Result<Option<Arq>, StoreError> {
    let mut w = Where::new(scope);
    w.eq("a.uuid", uuid.to_owned());
    Ok(w.fetch(tx, SELECT, "").await?.into_iter().next())
}

fn not_found(uuid: &str) -> StoreError {
    Refused::no_uuid(Kind::Arq, uuid)
}

/// Like [`get`], refusing an ARQ `scope` cannot see ([`Refused::NotFound`]).
pub async fn require(tx: &mut Tx, scope: &Scope, uuid: &str) -> Result<Arq, StoreError> {
    get(tx, scope, uuid).await?.ok_or_else(|| not_found(uuid))
}

/// Releases what the ARQs hold (attach handles, bind jobs, programming requests) and
/// removes them: a fixed handful of statements however many there are. The ARQ rows
/// are locked first, in id order, the order the bind worker takes them in
/// ([`super::binds`]), so a delete racing a bind waits instead of deadlocking.
async fn unbind_and_delete(tx: &mut Tx, arqs: &[Arq]) -> Result<(), StoreError> {
    if arqs.is_empty() {
        return Ok(());
    }
    let mut ids: Vec<i64> = arqs.iter().map(|a| a.id).collect();
    ids.sort_unstable();
    let in_ids = format!("id IN ({})", placeholders(1, ids.len()));
    by_ids(
        tx,
        &format!("UPDATE extended_accelerator_requests SET updated_at = updated_at WHERE {in_ids}"),
        &ids,
    )
    .await?;
    super::cleaning::note_arqs_released(tx, &ids).await?;
    release(tx, &ids).await?;
    let uuids: Vec<String> = arqs.iter().map(|a| a.uuid.clone()).collect();
    forget_jobs(tx, &uuids).await?;
    by_ids(
        tx,
        &format!("DELETE FROM extended_accelerator_requests WHERE {in_ids}"),
        &ids,
    )
    .await
}

/// Runs `sql`, whose placeholders `$1..` are `ids`.
async fn by_ids(tx: &mut Tx, sql: &str, ids: &[i64]) -> Result<(), StoreError> {
    let mut q = sqlx::query(sql);
    for id in ids {
        q = q.bind(*id);
    }
    q.execute(&mut *tx).await?;
    Ok(())
}

/// Row-locks an ARQ before its job and handle, the order the bind worker takes them in
/// ([`super::binds::perform`]), so an unbind racing a bind waits instead of deadlocking.
async fn lock(tx: &mut Tx, arq_id: i64) -> Result<(), StoreError> {
    sqlx::query("UPDATE extended_accelerator_requests SET updated_at = updated_at WHERE id = $1")
        .bind(arq_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Drops the ARQs' bind jobs and programming requests: an unbind, a delete or a new
/// bind supersedes them (a worker holding an old job then finds nothing to finish).
async fn forget_jobs(tx: &mut Tx, uuids: &[String]) -> Result<(), StoreError> {
    if uuids.is_empty() {
        return Ok(());
    }
    for table in ["bind_jobs", "program_requests"] {
        let sql = format!(
            "DELETE FROM {table} WHERE arq_uuid IN ({})",
            placeholders(1, uuids.len())
        );
        let mut q = sqlx::query(&sql);
        for u in uuids {
            q = q.bind(u);
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

/// Frees the attach handles the ARQs `ids` hold, if any. The handles are read first
/// and then updated by primary key: MariaDB runs `UPDATE .. WHERE id IN (SELECT ..)`
/// as a scan of every handle (1.4 ms a statement at 256 handles).
async fn release(tx: &mut Tx, ids: &[i64]) -> Result<(), StoreError> {
    let held = format!(
        "SELECT attach_handle_id FROM extended_accelerator_requests \
         WHERE id IN ({}) AND attach_handle_id IS NOT NULL",
        placeholders(1, ids.len())
    );
    let mut q = sqlx::query_scalar::<_, i64>(&held);
    for id in ids {
        q = q.bind(*id);
    }
    let handles: Vec<i64> = q.fetch_all(&mut *tx).await?;
    if handles.is_empty() {
        return Ok(());
    }
    let now = crate::now();
    by_ids(
        tx,
        &format!(
            "UPDATE attach_handles SET in_use = 0, updated_at = {now} WHERE id IN ({})",
            placeholders(1, handles.len())
        ),
        &handles,
    )
    .await
}

/// Deletes the given ARQs, unbinding bound ones. Not idempotent, as upstream: the first
/// uuid that `scope` cannot see is [`Refused::NotFound`] and nothing is deleted; so is
/// a bound ARQ unless `bound_too` ([`Refused::ArqBound`]: only Nova may delete those).
async fn delete_by_uuids(
    tx: &mut Tx,
    scope: &Scope,
    uuids: &[String],
    bound_too: bool,
) -> Result<(), StoreError> {
    let mut found = Vec::with_capacity(uuids.len());
    for uuid in uuids {
        found.push(require(tx, scope, uuid).await?);
    }
    if !bound_too {
        if let Some((arq, instance)) = found
            .iter()
            .find_map(|a| a.instance_uuid.as_ref().map(|i| (a, i)))
        {
            return Err(Refused::ArqBound {
                uuid: arq.uuid.clone(),
                instance: instance.clone(),
            }
            .into());
        }
    }
    unbind_and_delete(tx, &found).await
}

/// Deletes every ARQ of `instance` that `scope` sees; idempotent. Returns how many.
pub async fn delete_by_instance(
    tx: &mut Tx,
    scope: &Scope,
    instance: &str,
) -> Result<usize, StoreError> {
    let arqs = list(
        tx,
        scope,
        &Filter {
            instance: Some(instance.to_owned()),
            resolved_only: false,
        },
    )
    .await?;
    unbind_and_delete(tx, &arqs).await?;
    Ok(arqs.len())
}

/// What a bind patch sets on an ARQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub hostname: String,
    pub device_rp_uuid: String,
    pub instance_uuid: String,
    pub project_id: Option<String>,
}

/// Moves an ARQ from `Initial` or `Unbound` to `BindStarted`, recording the binding,
/// and persists its bind job (state `pending`, `deadline` in epoch seconds) in the same
/// transaction, so a bind accepted with 202 survives a restart. The state check is a
/// conditional UPDATE: a concurrent bind of the same ARQ loses with
/// [`Refused::ArqBadState`]. Returns the ARQ as it is now.
pub async fn start_bind(
    tx: &mut Tx,
    scope: &Scope,
    uuid: &str,
    b: &Binding,
    deadline: i64,
) -> Result<Arq, StoreError> {
    let arq = require(tx, scope, uuid).await?;
    let mut jobs = Vec::new();
    begin_bind(tx, &arq, b, &mut jobs).await?;
    insert_jobs(tx, &jobs, deadline).await?;
    require(tx, scope, uuid).await
}

/// [`start_bind`] without reading the ARQ back (a `PATCH` answers 202 with no body),
/// for `arq` as read in this transaction; the job's row is left in `jobs`, for
/// [`insert_jobs`] to write.
pub(super) async fn begin_bind(
    tx: &mut Tx,
    arq: &Arq,
    b: &Binding,
    jobs: &mut Vec<String>,
) -> Result<(), StoreError> {
    let sources = ArqState::BindStarted.allowed_sources();
    let list: Vec<String> = sources
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    let n = sqlx::query(&format!(
        "UPDATE extended_accelerator_requests SET state = $1, hostname = $2, device_rp_uuid = $3, \
         instance_uuid = $4, project_id = COALESCE($5, project_id), updated_at = $6 \
         WHERE id = $7 AND state IN ({})",
        list.join(", ")
    ))
    .bind(ArqState::BindStarted.as_str())
    .bind(&b.hostname)
    .bind(&b.device_rp_uuid)
    .bind(&b.instance_uuid)
    .bind(b.project_id.as_deref())
    .bind(crate::now())
    .bind(arq.id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if n != 1 {
        return Err(bad_state(arq, sources));
    }
    // An ARQ still `Initial` was never bound, so it has no job or programming request
    // to supersede (the `Initial` state has no way back).
    if arq.state != ArqState::Initial {
        forget_jobs(tx, std::slice::from_ref(&arq.uuid)).await?;
    }
    jobs.push(arq.uuid.clone());
    Ok(())
}

/// The bind jobs of ARQs `uuids`, pending until `deadline`, in one insert.
async fn insert_jobs(tx: &mut Tx, uuids: &[String], deadline: i64) -> Result<(), StoreError> {
    if uuids.is_empty() {
        return Ok(());
    }
    let rows: Vec<String> = (0..uuids.len())
        .map(|i| format!("(${}, 'pending', $1, 0, $2)", i + 3))
        .collect();
    let sql = format!(
        "INSERT INTO bind_jobs (arq_uuid, state, deadline, attempts, created_at) VALUES {}",
        rows.join(", ")
    );
    let mut q = sqlx::query(&sql).bind(deadline).bind(crate::now());
    for u in uuids {
        q = q.bind(u);
    }
    q.execute(&mut *tx).await?;
    Ok(())
}

fn bad_state(arq: &Arq, expected: &[ArqState]) -> StoreError {
    Refused::ArqBadState {
        uuid: arq.uuid.clone(),
        state: arq.state,
        expected: expected.to_vec(),
    }
    .into()
}

/// Unbinds an ARQ: clears hostname, device provider and instance (the project stays),
/// frees its attach handle, drops its bind job and moves it to `Unbound`.
pub async fn unbind(tx: &mut Tx, scope: &Scope, uuid: &str) -> Result<Arq, StoreError> {
    let arq = require(tx, scope, uuid).await?;
    if !arq.state.can_become(ArqState::Unbound) && arq.state != ArqState::Unbound {
        return Err(bad_state(&arq, ArqState::Unbound.allowed_sources()));
    }
    lock(tx, arq.id).await?;
    super::cleaning::note_arqs_released(tx, &[arq.id]).await?;
    release(tx, &[arq.id]).await?;
    forget_jobs(tx, &[uuid.to_owned()]).await?;
    sqlx::query(
        "UPDATE extended_accelerator_requests SET state = $1, hostname = NULL, \
         device_rp_uuid = NULL, instance_uuid = NULL, attach_handle_id = NULL, \
         deployable_id = NULL, updated_at = $2 WHERE id = $3",
    )
    .bind(ArqState::Unbound.as_str())
    .bind(crate::now())
    .bind(arq.id)
    .execute(&mut *tx)
    .await?;
    require(tx, scope, uuid).await
}

/// A persisted bind job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindJob {
    pub arq_uuid: String,
    pub state: super::binds::JobState,
    pub deadline: i64,
    pub attempts: i64,
}

/// The bind job of an ARQ, if one is recorded.
pub async fn bind_job(tx: &mut Tx, arq_uuid: &str) -> Result<Option<BindJob>, StoreError> {
    let row = sqlx::query(
        "SELECT arq_uuid, state, deadline, attempts FROM bind_jobs WHERE arq_uuid = $1",
    )
    .bind(arq_uuid)
    .fetch_optional(&mut *tx)
    .await?;
    row.map(|r| {
        Ok(BindJob {
            arq_uuid: r.try_get(0)?,
            state: super::parse_column(&r, 1)?,
            deadline: r.try_get(2)?,
            attempts: r.try_get(3)?,
        })
    })
    .transpose()
}

mod operations;
pub use operations::{Arqs, Patch};
