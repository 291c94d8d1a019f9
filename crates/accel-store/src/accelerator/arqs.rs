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

/// One ARQ's part of a `PATCH /accelerator_requests`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Patch {
    Bind(Binding),
    Unbind,
}

/// ARQ operations ([`Store::arqs`]). Every write is rerun after a deadlock
/// ([`Store::write_rerunning`]), as upstream's `wrap_db_retry` reruns Cyborg's.
pub struct Arqs<'s>(&'s Store);

impl Store {
    /// Operations on accelerator requests.
    pub fn arqs(&self) -> Arqs<'_> {
        Arqs(self)
    }
}

impl Arqs<'_> {
    /// `POST /accelerator_requests`: the ARQs of profile `name` (only group
    /// `only_group` when given), for `project_id`, in creation order. An unknown
    /// profile is [`Refused::NotFound`], a group the profile lacks
    /// [`Refused::NoSuchGroup`].
    pub async fn create_from_profile(
        &self,
        name: &str,
        only_group: Option<usize>,
        project_id: Option<&str>,
    ) -> Result<Vec<Arq>, StoreError> {
        let (name, project_id) = (name.to_owned(), project_id.map(str::to_owned));
        self.0
            .write_rerunning(|| {
                let (name, project_id) = (name.clone(), project_id.clone());
                move |tx| {
                    Box::pin(async move {
                        let profile =
                            super::profiles::by_name(tx, &name).await?.ok_or_else(|| {
                                Refused::NotFound(Kind::DeviceProfile, Key::Name(name.clone()))
                            })?;
                        if let Some(g) = only_group {
                            if g >= profile.groups.len() {
                                return Err(Refused::NoSuchGroup {
                                    profile: name,
                                    group: g,
                                }
                                .into());
                            }
                        }
                        create_for_profile(tx, &profile, only_group, project_id.as_deref()).await
                    })
                }
            })
            .await
    }

    /// The ARQs `scope` may see that match `f`, in creation order: one statement, so
    /// one snapshot without a transaction.
    pub async fn list(&self, scope: &Scope, f: &Filter) -> Result<Vec<Arq>, StoreError> {
        let (scope, f) = (scope.clone(), f.clone());
        self.0
            .read_one(move |tx| Box::pin(async move { list(tx, &scope, &f).await }))
            .await
    }

    /// One ARQ `scope` may see ([`Refused::NotFound`] otherwise).
    pub async fn show(&self, scope: &Scope, uuid: &str) -> Result<Arq, StoreError> {
        let (scope, uuid) = (scope.clone(), uuid.to_owned());
        self.0
            .read(move |tx| Box::pin(async move { require(tx, &scope, &uuid).await }))
            .await
    }

    /// `DELETE /accelerator_requests?arqs=..`: all of `uuids` go, unbound first, or
    /// none: the first that `scope` cannot see is [`Refused::NotFound`], and a bound
    /// one is [`Refused::ArqBound`] unless `bound_too` (the caller is Nova).
    pub async fn delete_listed(
        &self,
        scope: &Scope,
        uuids: &[String],
        bound_too: bool,
    ) -> Result<(), StoreError> {
        self.0
            .write_rerunning(|| {
                let (scope, uuids) = (scope.clone(), uuids.to_vec());
                move |tx| {
                    Box::pin(async move { delete_by_uuids(tx, &scope, &uuids, bound_too).await })
                }
            })
            .await
    }

    /// `DELETE /accelerator_requests?instance=..`: every ARQ of `instance` that `scope`
    /// sees, unbound first; idempotent. Returns how many.
    pub async fn delete_of_instance(
        &self,
        scope: &Scope,
        instance: &str,
    ) -> Result<usize, StoreError> {
        self.0
            .write_rerunning(|| {
                let (scope, instance) = (scope.clone(), instance.to_owned());
                move |tx| Box::pin(async move { delete_by_instance(tx, &scope, &instance).await })
            })
            .await
    }

    /// A `PATCH /accelerator_requests` as one transaction: every ARQ's bind (with its
    /// job, due by `deadline`) or unbind, or none of them. As upstream, there is no
    /// hot-add: a patch whose first operation binds to an instance that already has
    /// ARQs is [`Refused::InstanceHasArqs`], and a bind to a provider with no
    /// deployable is [`Refused::NotFound`]. A bind that cannot succeed ([`refusals`])
    /// answers `Ok(Some(refused))`: nothing of the patch is applied but the refused
    /// ARQ's `BindFailed`, whose failed job (and the device's history) keeps the
    /// refusal in the words `words` gives it (the API's).
    pub async fn patch(
        &self,
        scope: &Scope,
        plan: Vec<(String, Patch)>,
        deadline: i64,
        words: fn(&BindRefused) -> String,
    ) -> Result<Option<BindRefused>, StoreError> {
        self.0
            .write_rerunning(|| {
                let (scope, plan) = (scope.clone(), plan.clone());
                move |tx| Box::pin(async move { patch(tx, &scope, &plan, deadline, words).await })
            })
            .await
    }
}

/// The transaction of [`Arqs::patch`].
async fn patch(
    tx: &mut Tx,
    scope: &Scope,
    plan: &[(String, Patch)],
    deadline: i64,
    words: fn(&BindRefused) -> String,
) -> Result<Option<BindRefused>, StoreError> {
    if let Some((_, Patch::Bind(b))) = plan.first() {
        if instance_has_arqs(tx, scope, &b.instance_uuid).await? {
            return Err(Refused::InstanceHasArqs {
                instance: b.instance_uuid.clone(),
            }
            .into());
        }
    }
    // A bind that cannot succeed is refused before any is started; the refused ARQ is
    // recorded `BindFailed` and the refusal committed.
    let bind_ops: Vec<(&str, &Binding)> = plan
        .iter()
        .filter_map(|(u, op)| match op {
            Patch::Bind(b) => Some((u.as_str(), b)),
            Patch::Unbind => None,
        })
        .collect();
    let judged: Vec<refusals::Bind> = bind_ops
        .iter()
        .map(|(arq, b)| refusals::Bind {
            arq,
            hostname: &b.hostname,
            device_rp_uuid: &b.device_rp_uuid,
            instance_uuid: &b.instance_uuid,
        })
        .collect();
    if let Some(refused) = refusals::check(tx, &judged).await? {
        let arq = require(tx, scope, &refused.arq_uuid).await?;
        if let Some((_, b)) = bind_ops.iter().find(|(u, _)| *u == arq.uuid) {
            record_refusal(tx, &arq, b, &words(&refused), &refused.device_rp_uuid).await?;
        }
        return Ok(Some(refused));
    }
    // The ARQs to bind, read at once when each appears once in the plan (otherwise an
    // earlier operation could change what was read).
    let binds: Vec<String> = plan
        .iter()
        .filter(|(_, op)| matches!(op, Patch::Bind(_)))
        .map(|(u, _)| u.clone())
        .collect();
    let once = plan
        .iter()
        .enumerate()
        .all(|(i, (u, _))| plan.iter().skip(i + 1).all(|(v, _)| v != u));
    let mut read = Vec::new();
    if once && !binds.is_empty() {
        let mut w = Where::new(scope);
        w.any_of("a.uuid", &binds);
        read = w.fetch(tx, SELECT, "").await?;
    }
    // Providers already found to carry a deployable in this patch.
    let mut with_deployable: Vec<&str> = Vec::new();
    let mut jobs = Vec::new();
    for (uuid, op) in plan {
        match op {
            Patch::Bind(b) => {
                if !with_deployable.contains(&b.device_rp_uuid.as_str()) {
                    let deps = super::hardware::list_deployables(
                        tx,
                        &[(
                            super::hardware::DeployableColumn::RpUuid,
                            b.device_rp_uuid.clone(),
                        )],
                    )
                    .await?;
                    if deps.is_empty() {
                        return Err(Refused::NotFound(
                            Kind::Deployable,
                            Key::ProviderUuid(b.device_rp_uuid.clone()),
                        )
                        .into());
                    }
                    with_deployable.push(&b.device_rp_uuid);
                }
                let arq = match read.iter().find(|a| &a.uuid == uuid) {
                    Some(a) => a.clone(),
                    None if once => return Err(not_found(uuid)),
                    None => require(tx, scope, uuid).await?,
                };
                begin_bind(tx, &arq, b, &mut jobs).await?;
                if !once {
                    // A later operation may unbind this ARQ again.
                    insert_jobs(tx, &jobs, deadline).await?;
                    jobs.clear();
                }
            }
            Patch::Unbind => {
                unbind(tx, scope, uuid).await?;
            }
        }
    }
    insert_jobs(tx, &jobs, deadline).await?;
    Ok(None)
}

/// Leaves `arq` as upstream leaves a bind whose handle it could not take: started
/// (host, device, instance recorded), then `BindFailed`, with a failed job carrying
/// the refusal for the console.
async fn record_refusal(
    tx: &mut Tx,
    arq: &Arq,
    b: &Binding,
    why: &str,
    device_rp_uuid: &str,
) -> Result<(), StoreError> {
    let mut started = Vec::new();
    begin_bind(tx, arq, b, &mut started).await?;
    let now = crate::now();
    sqlx::query(
        "UPDATE extended_accelerator_requests SET state = $1, updated_at = $2 WHERE id = $3",
    )
    .bind(ArqState::BindFailed.as_str())
    .bind(now)
    .bind(arq.id)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO bind_jobs (arq_uuid, state, deadline, attempts, created_at, updated_at, error) \
         VALUES ($1, 'failed', $2, 0, $2, $2, $3)",
    )
    .bind(&arq.uuid)
    .bind(now)
    .bind(why)
    .execute(&mut *tx)
    .await?;
    // A refusal for another host's device is that device's history too.
    super::history::record_provider(
        tx,
        device_rp_uuid,
        super::history::Kind::BindFailed,
        &format!("bind refused: {why}"),
    )
    .await
}
