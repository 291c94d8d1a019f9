//! Consumers and their allocations.
//!
//! A write replaces the whole allocation set of every consumer it names, in the
//! caller's transaction, in upstream's order: ensure projects, users, consumer types
//! and consumers ([`prepare`]), then ([`apply`]) update consumer attributes, claim the
//! touched providers, snapshot prior usage, delete the consumers' allocations, check
//! capacity against what remains, insert, and bump the consumers' generations.
//!
//! Claiming a provider locks its row (in id order) and moves its generation on by
//! compare-and-swap before any usage is read, so concurrent writers of one provider
//! (even on other servers sharing a PostgreSQL database) queue instead of both
//! checking capacity against the same usage. A swap that still loses (the row changed
//! between read and swap) is [`PROVIDER_RACE`], and callers rerun the transaction.
//!
//! Refusals that depend on the data (bad consumer generation, unknown provider or
//! class, capacity) come back as [`Refusal`] inside `Ok`, so callers can word them;
//! [`write_refusable`] rolls the transaction back for them.

use super::lookup;
use crate::{placeholders, Conflict, Store, StoreError, Tx};
use sqlx::Row;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// Upstream's default `incomplete_consumer_project_id` / `_user_id`.
pub const INCOMPLETE_ID: &str = "00000000-0000-0000-0000-000000000000";

/// The message of a lost provider-generation swap (retried by callers).
pub const PROVIDER_RACE: &str =
    "Another thread concurrently updated the resource provider data. Please retry your update";

/// The message of a lost consumer-generation swap (not retried).
pub const CONSUMER_RACE: &str =
    "Another thread concurrently updated the data. Please retry your update";

/// Why a write was refused, in upstream's words where upstream has them.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// `consumer generation conflict - expected X but got Y`.
    ConsumerGeneration(String),
    /// An allocation names a provider that does not exist (its uuid).
    NoSuchProvider(String),
    /// A resource class that does not exist (its name).
    NoSuchClass(String),
    /// Upstream's `InvalidInventory` family: the full message.
    InvalidInventory(String),
}

/// `Ok(Ok(v))` done, `Ok(Err(r))` refused (nothing written), `Err` failed.
pub type Refusable<T, R = Refusal> = Result<Result<T, R>, StoreError>;

/// Runs `f` in one write transaction; a refusal rolls it back like an error does.
pub async fn write_refusable<T, R, F>(store: &Store, f: F) -> Refusable<T, R>
where
    T: Send + 'static,
    R: Send + 'static,
    F: for<'c> FnOnce(&'c mut Tx) -> crate::BoxFut<'c, Result<T, R>> + Send,
{
    let slot: Arc<Mutex<Option<R>>> = Arc::new(Mutex::new(None));
    let s2 = slot.clone();
    let result = store
        .write(move |tx| {
            let fut = f(tx);
            Box::pin(async move {
                match fut.await? {
                    Ok(v) => Ok(v),
                    Err(r) => {
                        *s2.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                        Err(StoreError::Invalid("refused".into()))
                    }
                }
            })
        })
        .await;
    match result {
        Ok(v) => Ok(Ok(v)),
        Err(e) => match slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(r) => Ok(Err(r)),
            None => Err(e),
        },
    }
}

/// True for errors after which rerunning the whole transaction may succeed: a lost
/// provider-generation swap, or a database deadlock / serialization failure.
pub fn is_retryable(e: &StoreError) -> bool {
    match e {
        StoreError::Conflict(Conflict::ConcurrentUpdate, m) => m == PROVIDER_RACE,
        StoreError::Db(sqlx::Error::Database(d)) => {
            matches!(d.code().as_deref(), Some("40P01") | Some("40001"))
        }
        _ => false,
    }
}

/// What a request asks for one consumer.
#[derive(Debug, Clone, Default)]
pub struct ConsumerWrite {
    pub uuid: String,
    /// External project id; `None` (before 1.8) means the incomplete-consumer ids.
    pub project_id: Option<String>,
    pub user_id: Option<String>,
    /// Whether the consumer generation is checked (1.28+).
    pub check_generation: bool,
    /// The client's `consumer_generation` (`None` = null: "expect a new consumer").
    pub generation: Option<i64>,
    /// The consumer type (1.38+); created on first use.
    pub consumer_type: Option<String>,
    /// Provider uuid -> [(resource class, amount)], in request order. Empty: remove
    /// every allocation of the consumer.
    pub allocations: Vec<(String, Vec<(String, i64)>)>,
}

#[derive(Debug, Clone)]
struct ConsumerRow {
    id: i64,
    uuid: String,
    project_id: i64,
    user_id: i64,
    generation: i64,
    consumer_type_id: Option<i64>,
}

#[derive(Debug, Clone)]
struct Ensured {
    row: ConsumerRow,
    project_id: i64,
    user_id: i64,
    consumer_type_id: Option<i64>,
}

#[derive(Debug, Clone)]
struct Item {
    rp_id: i64,
    rp_uuid: String,
    consumer: usize,
    rc_name: String,
    used: i64,
}

/// Consumers ensured and allocations resolved to providers, ready for [`apply`].
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    consumers: Vec<Ensured>,
    items: Vec<Item>,
}

impl Prepared {
    /// Ids of the providers the allocations touch, in first-seen order.
    pub fn provider_ids(&self) -> Vec<i64> {
        let mut seen = BTreeSet::new();
        self.items
            .iter()
            .filter(|i| seen.insert(i.rp_id))
            .map(|i| i.rp_id)
            .collect()
    }
}

async fn external_id(tx: &mut Tx, table: &str, ext: &str) -> Result<i64, StoreError> {
    let sel = format!("SELECT id FROM {table} WHERE external_id = $1");
    if let Some(id) = sqlx::query_scalar::<_, i64>(&sel)
        .bind(ext)
        .fetch_optional(&mut *tx)
        .await?
    {
        return Ok(id);
    }
    sqlx::query(&format!(
        "INSERT INTO {table} (external_id) VALUES ($1) ON CONFLICT DO NOTHING"
    ))
    .bind(ext)
    .execute(&mut *tx)
    .await?;
    Ok(sqlx::query_scalar::<_, i64>(&sel)
        .bind(ext)
        .fetch_one(&mut *tx)
        .await?)
}

/// The id of consumer type `name`, created when missing.
pub async fn consumer_type_id(tx: &mut Tx, name: &str) -> Result<i64, StoreError> {
    let sel = "SELECT id FROM consumer_types WHERE name = $1";
    if let Some(id) = sqlx::query_scalar::<_, i64>(sel)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?
    {
        return Ok(id);
    }
    sqlx::query("INSERT INTO consumer_types (name) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(name)
        .execute(&mut *tx)
        .await?;
    Ok(sqlx::query_scalar::<_, i64>(sel)
        .bind(name)
        .fetch_one(&mut *tx)
        .await?)
}

async fn consumer(tx: &mut Tx, uuid: &str) -> Result<Option<ConsumerRow>, StoreError> {
    let row = sqlx::query(
        "SELECT id, uuid, project_id, user_id, generation, consumer_type_id FROM consumers WHERE uuid = $1",
    )
    .bind(uuid)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(match row {
        Some(r) => Some(ConsumerRow {
            id: r.try_get(0)?,
            uuid: r.try_get(1)?,
            project_id: r.try_get(2)?,
            user_id: r.try_get(3)?,
            generation: r.try_get(4)?,
            consumer_type_id: r.try_get(5)?,
        }),
        None => None,
    })
}

fn got(g: Option<i64>) -> String {
    g.map_or_else(|| "None".to_owned(), |g| g.to_string())
}

/// Ensures projects, users, types and consumers exist (checking consumer generations
/// where asked), then resolves every allocation's provider, as upstream does before
/// its write transaction.
pub async fn prepare(tx: &mut Tx, writes: &[ConsumerWrite]) -> Refusable<Prepared> {
    let mut out = Prepared::default();
    for w in writes {
        let (p, u) = match &w.project_id {
            Some(p) => (
                p.clone(),
                w.user_id.clone().unwrap_or_else(|| INCOMPLETE_ID.into()),
            ),
            None => (INCOMPLETE_ID.to_owned(), INCOMPLETE_ID.to_owned()),
        };
        let project_id = external_id(tx, "projects", &p).await?;
        let user_id = external_id(tx, "users", &u).await?;
        let existing = consumer(tx, &w.uuid).await?;
        if w.check_generation {
            let conflict = match &existing {
                Some(c) if Some(c.generation) != w.generation => Some(format!(
                    "consumer generation conflict - expected {} but got {}",
                    c.generation,
                    got(w.generation)
                )),
                None if w.generation.is_some() => Some(format!(
                    "consumer generation conflict - expected null but got {}",
                    got(w.generation)
                )),
                _ => None,
            };
            if let Some(m) = conflict {
                return Ok(Err(Refusal::ConsumerGeneration(m)));
            }
        }
        let type_id = match &w.consumer_type {
            Some(t) => Some(consumer_type_id(tx, t).await?),
            None => None,
        };
        let row = match existing {
            Some(c) => c,
            None => {
                let created = sqlx::query(
                    "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type_id, created_at) \
                     VALUES ($1, $2, $3, 0, $4, $5) ON CONFLICT DO NOTHING",
                )
                .bind(&w.uuid)
                .bind(project_id)
                .bind(user_id)
                .bind(type_id)
                .bind(crate::now())
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let c = consumer(tx, &w.uuid)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(format!("consumer {}", w.uuid)))?;
                // A concurrent request created it first: the client's "expect a new
                // consumer" no longer holds.
                if created == 0 && w.check_generation {
                    return Ok(Err(Refusal::ConsumerGeneration(format!(
                        "consumer generation conflict - expected {} but got {}",
                        c.generation,
                        got(w.generation)
                    ))));
                }
                c
            }
        };
        out.consumers.push(Ensured {
            row,
            project_id,
            user_id,
            consumer_type_id: type_id,
        });
    }
    let mut rps: HashMap<String, i64> = HashMap::new();
    for (idx, w) in writes.iter().enumerate() {
        if w.allocations.is_empty() {
            let rows = sqlx::query(
                "SELECT a.resource_provider_id, rp.uuid, rc.name FROM allocations a \
                 JOIN resource_providers rp ON rp.id = a.resource_provider_id \
                 JOIN resource_classes rc ON rc.id = a.resource_class_id \
                 WHERE a.consumer_id = $1 ORDER BY a.id",
            )
            .bind(&w.uuid)
            .fetch_all(&mut *tx)
            .await?;
            for r in rows {
                out.items.push(Item {
                    rp_id: r.try_get(0)?,
                    rp_uuid: r.try_get(1)?,
                    consumer: idx,
                    rc_name: r.try_get(2)?,
                    used: 0,
                });
            }
            continue;
        }
        for (rp_uuid, _) in &w.allocations {
            if rps.contains_key(rp_uuid) {
                continue;
            }
            let id: Option<i64> =
                sqlx::query_scalar("SELECT id FROM resource_providers WHERE uuid = $1")
                    .bind(rp_uuid)
                    .fetch_optional(&mut *tx)
                    .await?;
            match id {
                Some(id) => {
                    rps.insert(rp_uuid.clone(), id);
                }
                None => return Ok(Err(Refusal::NoSuchProvider(rp_uuid.clone()))),
            }
        }
        for (rp_uuid, resources) in &w.allocations {
            for (rc, used) in resources {
                out.items.push(Item {
                    rp_id: rps[rp_uuid],
                    rp_uuid: rp_uuid.clone(),
                    consumer: idx,
                    rc_name: rc.clone(),
                    used: *used,
                });
            }
        }
    }
    Ok(Ok(out))
}

/// One inventory row with the usage left after the write's consumers were cleared.
struct Room {
    total: i64,
    reserved: i64,
    min_unit: i64,
    max_unit: i64,
    step_size: i64,
    allocation_ratio: f64,
    used: i64,
}

/// Per (provider, class) usage of the given providers and classes.
async fn usage_of(
    tx: &mut Tx,
    rp_ids: &[i64],
    rc_ids: &[i64],
) -> Result<HashMap<(i64, i64), i64>, StoreError> {
    if rp_ids.is_empty() || rc_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = format!(
        "SELECT resource_provider_id, resource_class_id, CAST(SUM(used) AS BIGINT) FROM allocations \
         WHERE resource_provider_id IN ({}) AND resource_class_id IN ({}) \
         GROUP BY resource_provider_id, resource_class_id",
        placeholders(1, rp_ids.len()),
        placeholders(1 + rp_ids.len(), rc_ids.len())
    );
    let mut q = sqlx::query(&sql);
    for id in rp_ids.iter().chain(rc_ids) {
        q = q.bind(*id);
    }
    let mut out = HashMap::new();
    for r in q.fetch_all(&mut *tx).await? {
        out.insert((r.try_get(0)?, r.try_get(1)?), r.try_get(2)?);
    }
    Ok(out)
}

/// The capacity decision for one allocation, as upstream's `_check_capacity_exceeded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Ok,
    Constraints,
    Capacity,
}

/// Whether `needed` more of a class fits on an inventory with `used` already consumed
/// by others, when this write puts `needed_all` in total there and the usage before the
/// write was `prev_used` (`None`: no allocations at all). An over-capacity provider
/// still accepts a write that leaves usage no worse than before (bug 2104040).
#[allow(clippy::too_many_arguments)]
pub fn fit(
    total: i64,
    reserved: i64,
    min_unit: i64,
    max_unit: i64,
    step_size: i64,
    allocation_ratio: f64,
    used: i64,
    needed: i64,
    needed_all: i64,
    prev_used: Option<i64>,
) -> Fit {
    if needed < min_unit || needed > max_unit || step_size <= 0 || needed % step_size != 0 {
        return Fit::Constraints;
    }
    let capacity = (total - reserved) as f64 * allocation_ratio;
    if capacity < (used + needed) as f64 || capacity < (used + needed_all) as f64 {
        match prev_used {
            Some(prev) if used + needed_all <= prev => Fit::Ok,
            _ => Fit::Capacity,
        }
    } else {
        Fit::Ok
    }
}

/// Updates consumer attributes, replaces the allocations and bumps generations.
pub async fn apply(tx: &mut Tx, prepared: &Prepared) -> Refusable<()> {
    // Requested project/user/type changes do not bump the consumer generation.
    for c in &prepared.consumers {
        let type_id = c.consumer_type_id.or(c.row.consumer_type_id);
        if c.project_id != c.row.project_id
            || c.user_id != c.row.user_id
            || type_id != c.row.consumer_type_id
        {
            sqlx::query(
                "UPDATE consumers SET project_id = $1, user_id = $2, consumer_type_id = $3, updated_at = $4 \
                 WHERE id = $5 AND generation = $6",
            )
            .bind(c.project_id)
            .bind(c.user_id)
            .bind(type_id)
            .bind(crate::now())
            .bind(c.row.id)
            .bind(c.row.generation)
            .execute(&mut *tx)
            .await?;
        }
    }
    let items = &prepared.items;
    if items.is_empty() {
        return Ok(Ok(()));
    }
    // Resource classes, in allocation order for the first unknown one.
    let names: Vec<String> = items.iter().map(|i| i.rc_name.clone()).collect();
    let rc_ids = lookup::resource_class_ids(tx, &names).await?;
    if let Some(bad) = items.iter().find(|i| !rc_ids.contains_key(&i.rc_name)) {
        return Ok(Err(Refusal::NoSuchClass(bad.rc_name.clone())));
    }
    let rp_ids = prepared.provider_ids();
    let mut classes: Vec<i64> = rc_ids.values().copied().collect();
    classes.sort_unstable();
    classes.dedup();

    // Claim the providers before reading any usage: lock their rows in id order (a
    // no-op write; a fixed order means no deadlock between writers), then move each
    // generation on by compare-and-swap. Any other writer of these providers must do
    // the same, so it waits for this transaction and then loses its swap (and
    // retries) rather than both checking capacity against the same usage.
    let mut ordered = rp_ids.clone();
    ordered.sort_unstable();
    for id in &ordered {
        sqlx::query("UPDATE resource_providers SET generation = generation WHERE id = $1")
            .bind(*id)
            .execute(&mut *tx)
            .await?;
    }
    let sql = format!(
        "SELECT id, generation FROM resource_providers WHERE id IN ({})",
        placeholders(1, rp_ids.len())
    );
    let mut q = sqlx::query(&sql);
    for id in &rp_ids {
        q = q.bind(*id);
    }
    let mut generations: BTreeMap<i64, i64> = BTreeMap::new();
    for r in q.fetch_all(&mut *tx).await? {
        generations.insert(r.try_get(0)?, r.try_get(1)?);
    }
    if generations.len() != rp_ids.len() {
        // A provider vanished since `prepare`: rerunning reports it as unknown.
        return Err(StoreError::conflict(
            Conflict::ConcurrentUpdate,
            PROVIDER_RACE,
        ));
    }
    for (id, g) in &generations {
        if let Err(e) = super::providers::bump_generation(tx, *id, *g).await {
            return Err(match e {
                StoreError::Conflict(Conflict::ConcurrentUpdate, _) => {
                    StoreError::conflict(Conflict::ConcurrentUpdate, PROVIDER_RACE)
                }
                e => e,
            });
        }
    }

    let prev_usage = usage_of(tx, &rp_ids, &classes).await?;
    let mut cleared = BTreeSet::new();
    for i in items {
        let uuid = &prepared.consumers[i.consumer].row.uuid;
        if cleared.insert(uuid.clone()) {
            super::changes::touch_consumer_providers(tx, uuid).await?;
            sqlx::query("DELETE FROM allocations WHERE consumer_id = $1")
                .bind(uuid)
                .execute(&mut *tx)
                .await?;
        }
    }
    let remaining = usage_of(tx, &rp_ids, &classes).await?;

    // Inventory of the touched providers in the touched classes.
    let sql = format!(
        "SELECT resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, \
         step_size, allocation_ratio FROM inventories \
         WHERE resource_provider_id IN ({}) AND resource_class_id IN ({})",
        placeholders(1, rp_ids.len()),
        placeholders(1 + rp_ids.len(), classes.len())
    );
    let mut q = sqlx::query(&sql);
    for id in rp_ids.iter().chain(&classes) {
        q = q.bind(*id);
    }
    let mut rooms: HashMap<(i64, i64), Room> = HashMap::new();
    for r in q.fetch_all(&mut *tx).await? {
        let key: (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
        rooms.insert(
            key,
            Room {
                total: r.try_get(2)?,
                reserved: r.try_get(3)?,
                min_unit: r.try_get(4)?,
                max_unit: r.try_get(5)?,
                step_size: r.try_get(6)?,
                allocation_ratio: r.try_get(7)?,
                used: remaining.get(&key).copied().unwrap_or(0),
            },
        );
    }
    let with_inventory: BTreeSet<i64> = rooms.keys().map(|k| k.0).collect();
    let mut missing: Vec<&str> = Vec::new();
    for i in items {
        if !with_inventory.contains(&i.rp_id) && !missing.contains(&i.rp_uuid.as_str()) {
            missing.push(&i.rp_uuid);
        }
    }
    if !missing.is_empty() {
        let mut class_names: Vec<(i64, &str)> = Vec::new();
        for i in items {
            let id = rc_ids[&i.rc_name];
            if !class_names.iter().any(|(c, _)| *c == id) {
                class_names.push((id, &i.rc_name));
            }
        }
        let class_str = class_names
            .iter()
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join(", ");
        return Ok(Err(Refusal::InvalidInventory(format!(
            "Inventory for '{class_str}' on resource provider '{}' invalid.",
            missing.join(", ")
        ))));
    }
    let mut sums: HashMap<(i64, i64), i64> = HashMap::new();
    for i in items {
        let rc = rc_ids[&i.rc_name];
        let key = (i.rp_id, rc);
        let all = sums.entry(key).or_insert(0);
        *all += i.used;
        if i.used == 0 {
            continue;
        }
        let Some(room) = rooms.get(&key) else {
            return Ok(Err(Refusal::InvalidInventory(format!(
                "Inventory for '{}' on resource provider '{}' invalid.",
                i.rc_name, i.rp_uuid
            ))));
        };
        let verdict = fit(
            room.total,
            room.reserved,
            room.min_unit,
            room.max_unit,
            room.step_size,
            room.allocation_ratio,
            room.used,
            i.used,
            *all,
            prev_usage.get(&key).copied(),
        );
        let tail = match verdict {
            Fit::Ok => continue,
            Fit::Constraints => "would violate inventory constraints",
            Fit::Capacity => "would exceed the capacity",
        };
        return Ok(Err(Refusal::InvalidInventory(format!(
            "Unable to create allocation for '{}' on resource provider '{}'. The requested amount {tail}.",
            i.rc_name, i.rp_uuid
        ))));
    }

    let now = crate::now();
    for i in items.iter().filter(|i| i.used > 0) {
        sqlx::query(
            "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(i.rp_id)
        .bind(&prepared.consumers[i.consumer].row.uuid)
        .bind(rc_ids[&i.rc_name])
        .bind(i.used)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }

    let mut visited: BTreeMap<i64, &Ensured> = BTreeMap::new();
    for i in items {
        let c = &prepared.consumers[i.consumer];
        visited.insert(c.row.id, c);
    }
    for c in visited.values() {
        let n = sqlx::query(
            "UPDATE consumers SET generation = $1, updated_at = $2 WHERE id = $3 AND generation = $4",
        )
        .bind(c.row.generation + 1)
        .bind(now)
        .bind(c.row.id)
        .bind(c.row.generation)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n != 1 {
            return Err(StoreError::conflict(
                Conflict::ConcurrentUpdate,
                CONSUMER_RACE,
            ));
        }
    }
    let with_allocs: BTreeSet<i64> = items
        .iter()
        .filter(|i| i.used > 0)
        .map(|i| prepared.consumers[i.consumer].row.id)
        .collect();
    let empty: Vec<String> = visited
        .values()
        .filter(|c| !with_allocs.contains(&c.row.id))
        .map(|c| c.row.uuid.clone())
        .collect();
    delete_consumers_without_allocations(tx, &empty).await?;
    Ok(Ok(()))
}

/// Deletes those of `uuids` that no longer have any allocation.
pub async fn delete_consumers_without_allocations(
    tx: &mut Tx,
    uuids: &[String],
) -> Result<(), StoreError> {
    for u in uuids {
        sqlx::query(
            "DELETE FROM consumers WHERE uuid = $1 \
             AND NOT EXISTS (SELECT 1 FROM allocations WHERE consumer_id = $1)",
        )
        .bind(u)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Deletes every allocation of a consumer (and the consumer), without touching
/// generations, as upstream's `DELETE /allocations/{consumer}`. False when there were
/// none.
pub async fn delete_for_consumer(tx: &mut Tx, consumer_uuid: &str) -> Result<bool, StoreError> {
    // Only allocations whose consumer record exists count, as upstream's join.
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT a.id FROM allocations a JOIN consumers c ON c.uuid = a.consumer_id \
         JOIN resource_providers rp ON rp.id = a.resource_provider_id \
         WHERE a.consumer_id = $1",
    )
    .bind(consumer_uuid)
    .fetch_all(&mut *tx)
    .await?;
    if ids.is_empty() {
        return Ok(false);
    }
    super::changes::touch_consumer_providers(tx, consumer_uuid).await?;
    let sql = format!(
        "DELETE FROM allocations WHERE id IN ({})",
        placeholders(1, ids.len())
    );
    let mut q = sqlx::query(&sql);
    for id in &ids {
        q = q.bind(*id);
    }
    q.execute(&mut *tx).await?;
    delete_consumers_without_allocations(tx, &[consumer_uuid.to_owned()]).await?;
    Ok(true)
}

/// One allocation row as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocationRow {
    pub rp_uuid: String,
    pub rp_generation: i64,
    pub rc_name: String,
    pub used: i64,
    pub consumer_uuid: String,
    pub consumer_generation: i64,
    pub project_id: String,
    pub user_id: String,
    /// `None`: no type recorded (shown as `unknown`).
    pub consumer_type: Option<String>,
    /// `updated_at` or `created_at` (epoch seconds).
    pub modified: i64,
}

const ROW_SELECT: &str = "SELECT rp.uuid, rp.generation, rc.name, a.used, c.uuid, c.generation, \
     p.external_id, u.external_id, ct.name, COALESCE(a.updated_at, a.created_at) \
     FROM allocations a \
     JOIN resource_providers rp ON rp.id = a.resource_provider_id \
     JOIN resource_classes rc ON rc.id = a.resource_class_id \
     JOIN consumers c ON c.uuid = a.consumer_id \
     JOIN projects p ON p.id = c.project_id \
     JOIN users u ON u.id = c.user_id \
     LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id";

fn row(r: &sqlx::any::AnyRow) -> Result<AllocationRow, sqlx::Error> {
    Ok(AllocationRow {
        rp_uuid: r.try_get(0)?,
        rp_generation: r.try_get(1)?,
        rc_name: r.try_get(2)?,
        used: r.try_get(3)?,
        consumer_uuid: r.try_get(4)?,
        consumer_generation: r.try_get(5)?,
        project_id: r.try_get(6)?,
        user_id: r.try_get(7)?,
        consumer_type: r.try_get(8)?,
        modified: r.try_get(9)?,
    })
}

/// A consumer's allocations, in insertion order.
pub async fn for_consumer(
    tx: &mut Tx,
    consumer_uuid: &str,
) -> Result<Vec<AllocationRow>, StoreError> {
    let rows = sqlx::query(&format!(
        "{ROW_SELECT} WHERE a.consumer_id = $1 ORDER BY a.id"
    ))
    .bind(consumer_uuid)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.iter().map(row).collect::<Result<_, _>>()?)
}

/// A provider's allocations, in insertion order.
pub async fn for_provider(tx: &mut Tx, rp_id: i64) -> Result<Vec<AllocationRow>, StoreError> {
    let rows = sqlx::query(&format!(
        "{ROW_SELECT} WHERE a.resource_provider_id = $1 ORDER BY a.id"
    ))
    .bind(rp_id)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.iter().map(row).collect::<Result<_, _>>()?)
}

/// Usage per inventory class of one provider (zero when unallocated), by class id.
pub async fn provider_usages(tx: &mut Tx, rp_id: i64) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = sqlx::query(
        "SELECT rc.name, CAST(COALESCE(SUM(a.used), 0) AS BIGINT) FROM inventories i \
         JOIN resource_classes rc ON rc.id = i.resource_class_id \
         LEFT JOIN allocations a ON a.resource_provider_id = i.resource_provider_id \
              AND a.resource_class_id = i.resource_class_id \
         WHERE i.resource_provider_id = $1 \
         GROUP BY i.resource_class_id, rc.name ORDER BY i.resource_class_id",
    )
    .bind(rp_id)
    .fetch_all(&mut *tx)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// How `GET /usages` groups by consumer type (1.38+).
#[derive(Debug, Clone, PartialEq)]
pub enum TypeFilter {
    /// Before 1.38: no grouping.
    Ungrouped,
    /// Grouped by type; optionally only the named one.
    ByType(Option<String>),
    /// Everything under one key `all`.
    All,
    /// Only consumers without a type, under `unknown`.
    Unknown,
}

/// One line of `GET /usages`: (type key or `None` when ungrouped, class, usage,
/// consumers of that type).
pub type TotalUsage = (Option<String>, String, i64, i64);

async fn fetch(
    tx: &mut Tx,
    sql: String,
    args: Vec<String>,
) -> Result<Vec<sqlx::any::AnyRow>, StoreError> {
    let mut q = sqlx::query(&sql);
    for a in args {
        q = q.bind(a);
    }
    Ok(q.fetch_all(&mut *tx).await?)
}

/// Usage totals of a project (and optionally a user).
pub async fn totals(
    tx: &mut Tx,
    project_id: &str,
    user_id: Option<&str>,
    filter: &TypeFilter,
) -> Result<Vec<TotalUsage>, StoreError> {
    // The consumer filter, shared by the sums (over allocations) and the consumer
    // counts (over consumers that hold any allocation: counting from `consumers` with
    // an EXISTS probe is half the work of COUNT(DISTINCT) over the allocation join).
    let mut filter_sql = " WHERE p.external_id = $1".to_owned();
    let mut args: Vec<String> = vec![project_id.to_owned()];
    // The users table is joined only to filter by user.
    let mut users_join = "";
    if let Some(u) = user_id {
        args.push(u.to_owned());
        users_join = " JOIN users u ON u.id = c.user_id";
        filter_sql.push_str(&format!(" AND u.external_id = ${}", args.len()));
    }
    match filter {
        TypeFilter::ByType(Some(t)) => {
            args.push(t.clone());
            filter_sql.push_str(&format!(" AND ct.name = ${}", args.len()));
        }
        TypeFilter::Unknown => filter_sql.push_str(" AND c.consumer_type_id IS NULL"),
        _ => {}
    }
    let from = format!(
        "FROM allocations a \
         JOIN consumers c ON c.uuid = a.consumer_id \
         JOIN projects p ON p.id = c.project_id{users_join} \
         LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id \
         JOIN resource_classes rc ON rc.id = a.resource_class_id{filter_sql}"
    );
    let consumers_from = format!(
        "FROM consumers c \
         JOIN projects p ON p.id = c.project_id{users_join} \
         LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id{filter_sql} \
         AND EXISTS (SELECT 1 FROM allocations a WHERE a.consumer_id = c.uuid)"
    );
    // One statement (a snapshot of its own, and one round trip): the class sums
    // (kind 0) and, when grouped, the consumer counts (kind 1).
    let grouped_by_type = matches!(filter, TypeFilter::ByType(_));
    let type_col = if grouped_by_type { "ct.name" } else { "NULL" };
    let mut sql = format!(
        "SELECT CAST(0 AS BIGINT) AS kind, {type_col} AS t, rc.name AS rc, a.resource_class_id AS rcid, \
         CAST(SUM(a.used) AS BIGINT) AS n {from} GROUP BY {}a.resource_class_id, rc.name",
        if grouped_by_type { "ct.name, " } else { "" }
    );
    if filter != &TypeFilter::Ungrouped {
        sql.push_str(&format!(
            " UNION ALL SELECT CAST(1 AS BIGINT), {type_col}, NULL, NULL, COUNT(*) {consumers_from}{}",
            if grouped_by_type { " GROUP BY ct.name" } else { "" }
        ));
    }
    sql.push_str(" ORDER BY 1, 2, 4");
    let rows = fetch(tx, sql, args).await?;
    let mut counts: HashMap<Option<String>, i64> = HashMap::new();
    let mut sums: Vec<(Option<String>, String, i64)> = Vec::new();
    for r in &rows {
        let kind: i64 = r.try_get(0)?;
        let t: Option<String> = r.try_get(1)?;
        if kind == 1 {
            counts.insert(t, r.try_get(4)?);
        } else {
            sums.push((t, r.try_get(2)?, r.try_get(4)?));
        }
    }
    let key = |t: Option<String>| match filter {
        TypeFilter::Ungrouped => None,
        TypeFilter::All => Some("all".to_owned()),
        TypeFilter::Unknown => Some("unknown".to_owned()),
        TypeFilter::ByType(_) => Some(t.unwrap_or_else(|| "unknown".to_owned())),
    };
    Ok(sums
        .into_iter()
        .map(|(t, rc, n)| {
            let count = counts.get(&t).copied().unwrap_or(0);
            (key(t), rc, n, count)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simple(total: i64, used: i64, needed: i64, prev: Option<i64>) -> Fit {
        fit(total, 0, 1, 1000, 1, 1.0, used, needed, needed, prev)
    }

    #[test]
    fn fits_within_capacity() {
        assert_eq!(simple(10, 0, 10, None), Fit::Ok);
        assert_eq!(simple(10, 5, 5, Some(5)), Fit::Ok);
        assert_eq!(simple(10, 5, 6, Some(5)), Fit::Capacity);
    }

    #[test]
    fn constraints_checked_first() {
        assert_eq!(
            fit(100, 0, 10, 50, 10, 1.0, 0, 5, 5, None),
            Fit::Constraints
        );
        assert_eq!(
            fit(100, 0, 10, 50, 10, 1.0, 0, 60, 60, None),
            Fit::Constraints
        );
        assert_eq!(
            fit(100, 0, 10, 50, 10, 1.0, 0, 15, 15, None),
            Fit::Constraints
        );
        assert_eq!(
            fit(100, 0, 10, 50, 10, 1.0, 95, 20, 20, None),
            Fit::Capacity
        );
    }

    #[test]
    fn ratio_and_reserved_use_float_capacity() {
        // (3 - 0) * 1.5 = 4.5: 4 fits, 5 does not.
        assert_eq!(fit(3, 0, 1, 10, 1, 1.5, 0, 4, 4, None), Fit::Ok);
        assert_eq!(fit(3, 0, 1, 10, 1, 1.5, 0, 5, 5, None), Fit::Capacity);
        assert_eq!(fit(10, 8, 1, 10, 1, 1.0, 0, 3, 3, None), Fit::Capacity);
    }

    #[test]
    fn several_allocations_add_up() {
        // A second allocation of 6 on the same class: 6 alone fits, 12 does not.
        assert_eq!(fit(10, 0, 1, 10, 1, 1.0, 0, 6, 12, None), Fit::Capacity);
    }

    #[test]
    fn over_capacity_accepted_when_not_worse() {
        // Inventory shrank to 8 under usage 10 (held by this consumer, now cleared).
        assert_eq!(simple(8, 0, 10, Some(10)), Fit::Ok);
        assert_eq!(simple(8, 0, 9, Some(10)), Fit::Ok);
        assert_eq!(simple(8, 0, 11, Some(10)), Fit::Capacity);
        // Another consumer's 10 stays: adding anything makes it worse.
        assert_eq!(simple(8, 10, 1, Some(10)), Fit::Capacity);
        // No prior usage at all: plain capacity rule.
        assert_eq!(simple(8, 0, 9, None), Fit::Capacity);
    }
}
