//! What runs on the estate: consumers (instances and pods) with their allocations and
//! ARQs, and ARQs with their bind jobs and Nova events.
//!
//! ARQs are project-scoped here as in the API ([`Scope`]): a project member's page
//! is filtered in SQL, so another project's ARQ is never read.

use super::{bind_all, count, like, Estate, Page, Window};
use crate::accelerator::Scope;
use crate::{placeholders, StoreError, Tx};
use sqlx::Row;
use std::collections::HashMap;

/// One allocation of a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationView {
    pub provider_uuid: String,
    pub provider_name: String,
    pub resource_class: String,
    pub used: i64,
}

/// A consumer: a virtual machine, or a pod (a consumer the Kubernetes path created).
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerView {
    pub uuid: String,
    pub project: String,
    pub user: String,
    /// `Some(host)` when the consumer is a pod's (or a pod slot's) on that node.
    pub pod_host: Option<String>,
    pub allocations: Vec<AllocationView>,
    pub arqs: Vec<ArqView>,
}

/// An ARQ with what the operator asks about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArqView {
    pub uuid: String,
    pub state: String,
    pub project_id: Option<String>,
    pub profile: String,
    pub group_id: i64,
    pub hostname: Option<String>,
    pub device_rp_uuid: Option<String>,
    /// The device provider's name (`None` when no provider has that uuid).
    pub device_name: Option<String>,
    pub instance_uuid: Option<String>,
    pub attach_handle: Option<(String, String)>,
    /// The bind job: state, created, last change, deadline (epoch seconds) and error.
    pub job: Option<JobView>,
    /// The newest Nova event of the instance: its delivery state and last error.
    pub event: Option<(String, Option<String>)>,
    pub created_at: i64,
    pub updated_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    pub state: String,
    pub created_at: i64,
    pub updated_at: Option<i64>,
    pub deadline: i64,
    pub error: Option<String>,
}

impl ArqView {
    /// Failed, or still binding after its job's deadline: what an operator looks at
    /// first.
    pub fn is_stuck_or_failed(&self, now: i64) -> bool {
        self.state == "BindFailed"
            || (self.state == "BindStarted" && self.job.as_ref().is_some_and(|j| j.deadline < now))
    }

    /// Seconds from the bind's start to its end (or to `now` while it runs).
    pub fn bind_seconds(&self, now: i64) -> Option<i64> {
        let job = self.job.as_ref()?;
        let end = match self.state.as_str() {
            "BindStarted" => now,
            _ => job.updated_at.unwrap_or(now),
        };
        Some((end - job.created_at).max(0))
    }
}

const ARQ_SELECT: &str = "SELECT a.uuid, a.state, a.project_id, p.name AS dp_name, \
     a.device_profile_group_id, a.hostname, a.device_rp_uuid, a.instance_uuid, \
     a.created_at, a.updated_at, ah.uuid AS ah_uuid, ah.attach_type, \
     j.state AS job_state, j.created_at AS job_created, j.updated_at AS job_updated, \
     j.deadline AS job_deadline, j.error AS job_error, drp.name AS device_name, \
     (SELECT e.state FROM nova_events e WHERE e.instance_uuid = a.instance_uuid \
        ORDER BY e.id DESC LIMIT 1) AS event_state, \
     (SELECT e.last_error FROM nova_events e WHERE e.instance_uuid = a.instance_uuid \
        ORDER BY e.id DESC LIMIT 1) AS event_error \
     FROM extended_accelerator_requests a \
     JOIN device_profiles p ON p.id = a.device_profile_id \
     LEFT JOIN attach_handles ah ON ah.id = a.attach_handle_id AND a.state = 'Bound' \
     LEFT JOIN bind_jobs j ON j.arq_uuid = a.uuid \
     LEFT JOIN resource_providers drp ON drp.uuid = a.device_rp_uuid";

fn arq_from_row(r: &sqlx::any::AnyRow) -> Result<ArqView, StoreError> {
    let ah: Option<String> = r.try_get("ah_uuid")?;
    let job_state: Option<String> = r.try_get("job_state")?;
    let event_state: Option<String> = r.try_get("event_state")?;
    Ok(ArqView {
        uuid: r.try_get("uuid")?,
        state: r.try_get("state")?,
        project_id: r.try_get("project_id")?,
        profile: r.try_get("dp_name")?,
        group_id: r.try_get("device_profile_group_id")?,
        hostname: r.try_get("hostname")?,
        device_rp_uuid: r.try_get("device_rp_uuid")?,
        device_name: r.try_get("device_name")?,
        instance_uuid: r.try_get("instance_uuid")?,
        attach_handle: match ah {
            Some(u) => Some((u, r.try_get("attach_type")?)),
            None => None,
        },
        job: match job_state {
            Some(state) => Some(JobView {
                state,
                created_at: r.try_get("job_created")?,
                updated_at: r.try_get("job_updated")?,
                deadline: r.try_get("job_deadline")?,
                error: r.try_get("job_error")?,
            }),
            None => None,
        },
        event: match event_state {
            Some(s) => Some((s, r.try_get("event_error")?)),
            None => None,
        },
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

impl Estate<'_> {
    /// A page of the ARQs `scope` sees, matching `search` (instance, host, device
    /// provider or ARQ uuid, profile name, device provider name), failed and stuck
    /// ones first (a bind past its deadline at `now`), then binding, then the rest;
    /// newest first within each.
    pub async fn arqs(
        &self,
        scope: &Scope,
        search: Option<&str>,
        now: i64,
        window: Window,
    ) -> Result<Page<ArqView>, StoreError> {
        let (scope, search) = (scope.clone(), search.map(str::to_owned));
        self.0
            .read(move |tx| {
                Box::pin(async move { arqs(tx, &scope, search.as_deref(), now, window).await })
            })
            .await
    }

    /// A page of consumers by uuid, matching `search` (a consumer uuid, or a host or
    /// provider name, or a provider uuid, it allocates from), each with its
    /// allocations, its ARQs (as an instance) and whether it is a pod's. Instances
    /// that have ARQs but no allocation are listed too (project from their ARQs, no
    /// user).
    pub async fn consumers(
        &self,
        search: Option<&str>,
        window: Window,
    ) -> Result<Page<ConsumerView>, StoreError> {
        let search = search.map(str::to_owned);
        self.0
            .read(move |tx| {
                Box::pin(async move {
                    consumers_where(tx, ConsumerFilter::Search(search.as_deref()), window).await
                })
            })
            .await
    }
}

/// [`Estate::arqs`]'s read.
async fn arqs(
    tx: &mut Tx,
    scope: &Scope,
    search: Option<&str>,
    now: i64,
    window: Window,
) -> Result<Page<ArqView>, StoreError> {
    let mut clauses = Vec::new();
    let mut args = Vec::new();
    if let Scope::Project(p) = scope {
        args.push(p.clone());
        clauses.push(format!("a.project_id = ${}", args.len()));
    }
    if let Some((pattern, exact)) = like(search) {
        args.push(pattern);
        let l = args.len();
        args.push(exact);
        let e = args.len();
        clauses.push(format!(
            "(a.instance_uuid = ${e} OR a.uuid = ${e} OR a.device_rp_uuid = ${e} \
             OR a.hostname LIKE ${l} OR p.name LIKE ${l} \
             OR a.device_rp_uuid IN (SELECT m.uuid FROM resource_providers m \
                                     WHERE m.name LIKE ${l}))"
        ));
    }
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", clauses.join(" AND "))
    };
    let count_sql = format!(
        "SELECT COUNT(*) FROM extended_accelerator_requests a \
         JOIN device_profiles p ON p.id = a.device_profile_id{filter}"
    );
    let total = count(tx, &count_sql, &args).await?;
    // `now` is our own integer: written into the statement like the window.
    let sql = format!(
        "{ARQ_SELECT}{filter} ORDER BY CASE WHEN a.state = 'BindFailed' THEN 0 \
         WHEN a.state = 'BindStarted' AND j.deadline < {now} THEN 0 \
         WHEN a.state = 'BindStarted' THEN 1 ELSE 2 END, a.id DESC{}",
        window.sql()
    );
    let items = bind_all(sqlx::query(&sql), &args)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(arq_from_row)
        .collect::<Result<_, _>>()?;
    Ok(Page { items, total })
}

/// The newest ARQs bound or binding to the host `hostname` (any project: the host
/// page is an admin's), at most `limit`, and how many there are.
pub(crate) async fn arqs_on_host(
    tx: &mut Tx,
    hostname: &str,
    limit: u64,
) -> Result<Page<ArqView>, StoreError> {
    let args = vec![hostname.to_owned()];
    let total = count(
        tx,
        "SELECT COUNT(*) FROM extended_accelerator_requests WHERE hostname = $1",
        &args,
    )
    .await?;
    let sql = format!("{ARQ_SELECT} WHERE a.hostname = $1 ORDER BY a.id DESC LIMIT {limit}");
    let items = bind_all(sqlx::query(&sql), &args)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(arq_from_row)
        .collect::<Result<_, _>>()?;
    Ok(Page { items, total })
}

/// The ARQs of `instances` (any project: the consumers page is an admin's).
async fn arqs_of(tx: &mut Tx, instances: &[String]) -> Result<Vec<ArqView>, StoreError> {
    let mut out = Vec::new();
    for chunk in instances.chunks(500) {
        let sql = format!(
            "{ARQ_SELECT} WHERE a.instance_uuid IN ({}) ORDER BY a.id",
            placeholders(1, chunk.len())
        );
        for r in bind_all(sqlx::query(&sql), chunk)
            .fetch_all(&mut *tx)
            .await?
        {
            out.push(arq_from_row(&r)?);
        }
    }
    Ok(out)
}

/// Which consumers a consumers page lists.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ConsumerFilter<'a> {
    /// All, or those matching a search: a consumer uuid, or a host or provider name,
    /// or a provider uuid, it allocates from or its ARQs name.
    Search(Option<&'a str>),
    /// Those on one host: allocating from the tree of the root provider `root_uuid`,
    /// or with an ARQ bound (or binding) to the host `hostname`.
    Host {
        root_uuid: &'a str,
        hostname: &'a str,
    },
}

/// The consumers a filter keeps, as one `SELECT uuid` (consumers with allocations,
/// and instances that only have ARQs, which Placement has no consumer row for) and
/// its arguments.
fn consumer_uuids(filter: ConsumerFilter) -> (String, Vec<String>) {
    match filter {
        ConsumerFilter::Search(search) => match like(search) {
            None => (
                "SELECT c.uuid AS uuid FROM consumers c UNION SELECT a.instance_uuid FROM \
                 extended_accelerator_requests a WHERE a.instance_uuid IS NOT NULL"
                    .to_owned(),
                Vec::new(),
            ),
            Some((pattern, exact)) => (
                // The matching providers first, then their allocations: joining every
                // provider to its root before the `LIKE` cost PostgreSQL 107 ms over
                // 50,000 providers, this 20 ms (docs/benchmarks.md).
                "SELECT c.uuid AS uuid FROM consumers c WHERE c.uuid = $2 OR c.uuid IN \
                   (SELECT a.consumer_id FROM allocations a \
                    JOIN resource_providers rp ON rp.id = a.resource_provider_id \
                    WHERE rp.id IN (SELECT m.id FROM resource_providers m \
                                     WHERE m.name LIKE $1 OR m.uuid = $2) \
                       OR rp.root_provider_id IN (SELECT m.id FROM resource_providers m \
                                     WHERE m.name LIKE $1)) \
                 UNION SELECT a.instance_uuid FROM extended_accelerator_requests a \
                 WHERE a.instance_uuid IS NOT NULL AND (a.instance_uuid = $2 \
                   OR a.hostname LIKE $1 OR a.device_rp_uuid = $2)"
                    .to_owned(),
                vec![pattern, exact],
            ),
        },
        ConsumerFilter::Host {
            root_uuid,
            hostname,
        } => (
            "SELECT a.consumer_id AS uuid FROM allocations a \
             JOIN resource_providers rp ON rp.id = a.resource_provider_id \
             WHERE rp.root_provider_id = (SELECT m.root_provider_id FROM resource_providers m \
                                          WHERE m.uuid = $1) \
             UNION SELECT a.instance_uuid FROM extended_accelerator_requests a \
             WHERE a.instance_uuid IS NOT NULL AND a.hostname = $2"
                .to_owned(),
            vec![root_uuid.to_owned(), hostname.to_owned()],
        ),
    }
}

/// A page of the consumers `filter` keeps, as [`Estate::consumers`] shows them.
pub(crate) async fn consumers_where(
    tx: &mut Tx,
    filter: ConsumerFilter<'_>,
    window: Window,
) -> Result<Page<ConsumerView>, StoreError> {
    let (uuids_sql, args) = consumer_uuids(filter);
    let count_sql = format!("SELECT COUNT(*) FROM ({uuids_sql}) u");
    let total = count(tx, &count_sql, &args).await?;
    let sql = format!(
        "SELECT u.uuid FROM ({uuids_sql}) u ORDER BY u.uuid{}",
        window.sql()
    );
    let uuids: Vec<String> = bind_all(sqlx::query(&sql), &args)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get::<String, _>(0))
        .collect::<Result<_, _>>()?;
    let mut known: HashMap<String, ConsumerView> = HashMap::new();
    for chunk in uuids.chunks(500) {
        let sql = format!(
            "SELECT c.uuid, pr.external_id, us.external_id, k.hostname FROM consumers c \
             JOIN projects pr ON pr.id = c.project_id JOIN users us ON us.id = c.user_id \
             LEFT JOIN kubernetes_consumers k ON k.consumer_uuid = c.uuid \
             WHERE c.uuid IN ({})",
            placeholders(1, chunk.len())
        );
        for r in bind_all(sqlx::query(&sql), chunk)
            .fetch_all(&mut *tx)
            .await?
        {
            let c = ConsumerView {
                uuid: r.try_get(0)?,
                project: r.try_get(1)?,
                user: r.try_get(2)?,
                pod_host: r.try_get(3)?,
                allocations: Vec::new(),
                arqs: Vec::new(),
            };
            known.insert(c.uuid.clone(), c);
        }
    }
    let mut items: Vec<ConsumerView> = uuids
        .iter()
        .map(|u| {
            known.remove(u).unwrap_or_else(|| ConsumerView {
                uuid: u.clone(),
                project: String::new(),
                user: String::new(),
                pod_host: None,
                allocations: Vec::new(),
                arqs: Vec::new(),
            })
        })
        .collect();
    let uuids: Vec<String> = items.iter().map(|c| c.uuid.clone()).collect();
    let mut allocations: HashMap<String, Vec<AllocationView>> = HashMap::new();
    let rc_names = crate::placement::lookup::resource_class_names(tx).await?;
    for chunk in uuids.chunks(500) {
        let sql = format!(
            "SELECT a.consumer_id, rp.uuid, rp.name, a.resource_class_id, a.used \
             FROM allocations a JOIN resource_providers rp ON rp.id = a.resource_provider_id \
             WHERE a.consumer_id IN ({}) ORDER BY rp.name, a.resource_class_id",
            placeholders(1, chunk.len())
        );
        for r in bind_all(sqlx::query(&sql), chunk)
            .fetch_all(&mut *tx)
            .await?
        {
            let rc: i64 = r.try_get(3)?;
            allocations
                .entry(r.try_get(0)?)
                .or_default()
                .push(AllocationView {
                    provider_uuid: r.try_get(1)?,
                    provider_name: r.try_get(2)?,
                    resource_class: rc_names.get(&rc).cloned().unwrap_or_default(),
                    used: r.try_get(4)?,
                });
        }
    }
    let mut arqs: HashMap<String, Vec<ArqView>> = HashMap::new();
    for a in arqs_of(tx, &uuids).await? {
        if let Some(i) = a.instance_uuid.clone() {
            arqs.entry(i).or_default().push(a);
        }
    }
    for c in &mut items {
        c.allocations = allocations.remove(&c.uuid).unwrap_or_default();
        c.arqs = arqs.remove(&c.uuid).unwrap_or_default();
        if c.project.is_empty() {
            // No consumer row: an instance known by its ARQs only.
            c.project = c
                .arqs
                .iter()
                .find_map(|a| a.project_id.clone())
                .unwrap_or_default();
        }
    }
    Ok(Page { items, total })
}
