//! Replacing consumers' allocations: the claim.
//!
//! A write replaces the whole allocation set of every consumer it names, in upstream's
//! order: ensure projects, users, consumer types and consumers ([`prepare`]), then
//! ([`apply`]) update consumer attributes, claim the touched providers, snapshot prior
//! usage, delete the consumers' allocations, check capacity against what remains
//! ([`accel_core::capacity::Limits::judge`]), insert, and bump the consumers'
//! generations. [`replace`] runs both as one transaction and reruns it after a race.
//!
//! Claiming a provider moves its generation on with an `UPDATE` (in id order) before
//! any usage is read; the update holds the row lock until commit, so concurrent
//! writers of one provider (even on other servers sharing the database) queue instead
//! of both checking capacity against the same usage. A provider deleted meanwhile is
//! [`crate::Conflict::ProviderRace`], and the transaction is rerun (and then refused as
//! unknown). A deadlock between writers is rerun the same way.

use super::{ConsumerWrite, InvalidInventory, Refusable, Refusal, INCOMPLETE_ID};
use crate::placement::lookup;
use crate::placement::refused::Refused;
use crate::{placeholders, Store, StoreError, Tx};
use accel_core::capacity::{Claim, Limits, Verdict};
use sqlx::Row;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Replaces the allocations of every consumer in `writes` in one transaction (an
/// empty allocation list removes the consumer's allocations), rerunning it up to
/// `attempts` times in all when it loses a provider-generation race, as upstream
/// retries (`allocation_conflict_retry_count`). A race (or database deadlock) still
/// lost after that is [`StoreError::provider_race`].
pub async fn replace(
    store: &Store,
    writes: &[ConsumerWrite],
    attempts: u32,
) -> Refusable<(), Refusal> {
    store
        .write_retrying(attempts, || {
            let w = writes.to_vec();
            move |tx: &mut Tx| -> crate::BoxFut<'_, Result<(), Refusal>> {
                Box::pin(async move {
                    match prepare(tx, &w).await? {
                        Ok(prepared) => apply(tx, &prepared).await,
                        Err(r) => Ok(Err(r)),
                    }
                })
            }
        })
        .await
        // A deadlock on the last attempt is reported as the race it was, too.
        .map_err(|e| {
            if e.is_retryable() {
                StoreError::provider_race()
            } else {
                e
            }
        })
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

/// Ensures projects, users, types and consumers exist (checking consumer generations
/// where asked), then resolves every allocation's provider, as upstream does before
/// its write transaction.
pub async fn prepare(tx: &mut Tx, writes: &[ConsumerWrite]) -> Refusable<Prepared, Refusal> {
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
            let expected = existing.as_ref().map(|c| c.generation);
            if expected != w.generation {
                return Ok(Err(Refusal::ConsumerGeneration {
                    expected,
                    got: w.generation,
                }));
            }
        }
        let type_id = match &w.consumer_type {
            Some(t) => Some(consumer_type_id(tx, t).await?),
            None => None,
        };
        let row = match existing {
            Some(c) => c,
            None => {
                // The new row is known but for its id; a concurrent request that
                // created it first leaves no row inserted here.
                let created: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type_id, created_at) \
                     VALUES ($1, $2, $3, 0, $4, $5) ON CONFLICT DO NOTHING RETURNING id",
                )
                .bind(&w.uuid)
                .bind(project_id)
                .bind(user_id)
                .bind(type_id)
                .bind(crate::now())
                .fetch_optional(&mut *tx)
                .await?;
                match created {
                    Some(id) => ConsumerRow {
                        id,
                        uuid: w.uuid.clone(),
                        project_id,
                        user_id,
                        generation: 0,
                        consumer_type_id: type_id,
                    },
                    None => {
                        let c = consumer(tx, &w.uuid)
                            .await?
                            .ok_or_else(|| StoreError::NotFound(format!("consumer {}", w.uuid)))?;
                        // The client's "expect a new consumer" no longer holds.
                        if w.check_generation {
                            return Ok(Err(Refusal::ConsumerGeneration {
                                expected: Some(c.generation),
                                got: w.generation,
                            }));
                        }
                        c
                    }
                }
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

/// Updates consumer attributes, replaces the allocations and bumps generations.
pub async fn apply(tx: &mut Tx, prepared: &Prepared) -> Refusable<(), Refusal> {
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
            // Its usage moves between the projects' totals.
            crate::placement::changes::touch_projects(tx, &[c.project_id, c.row.project_id])
                .await?;
        }
    }
    let items = &prepared.items;
    if items.is_empty() {
        return Ok(Ok(()));
    }
    // The projects whose consumers' allocations are replaced.
    let projects: BTreeSet<i64> = items
        .iter()
        .map(|i| prepared.consumers[i.consumer].project_id)
        .collect();
    let projects: Vec<i64> = projects.into_iter().collect();
    crate::placement::changes::touch_projects(tx, &projects).await?;
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

    // The GPU partition ledgers of these providers, and of those the consumers let
    // go of, are locked before any provider (crate::partitions: one lock order).
    let mut family = rp_ids.clone();
    family.extend(providers_held_by(tx, prepared).await?);
    let ledgers = crate::partitions::lock_for(tx, &family).await?;

    // Claim the providers before reading any usage: move each generation on in id
    // order. The update locks the row until commit (a fixed order means no deadlock
    // between writers), so any other writer of these providers waits for this
    // transaction rather than both checking capacity against the same usage.
    let mut ordered = rp_ids.clone();
    ordered.sort_unstable();
    let now = crate::now();
    for id in &ordered {
        let n = sqlx::query(
            "UPDATE resource_providers SET generation = generation + 1, updated_at = $1 WHERE id = $2",
        )
        .bind(now)
        .bind(*id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n != 1 {
            // A provider vanished since `prepare`: rerunning reports it as unknown.
            return Err(StoreError::provider_race());
        }
    }
    crate::placement::changes::touch(tx, &ordered).await?;

    // Usage before, and after the consumers' own allocations are taken away: what they
    // held is read as it is deleted from.
    let prev_usage = usage_of(tx, &rp_ids, &classes).await?;
    let mut remaining = prev_usage.clone();
    let mut cleared = BTreeSet::new();
    for i in items {
        let uuid = &prepared.consumers[i.consumer].row.uuid;
        if cleared.insert(uuid.clone()) {
            let held = sqlx::query(
                "SELECT resource_provider_id, resource_class_id, used FROM allocations WHERE consumer_id = $1",
            )
            .bind(uuid)
            .fetch_all(&mut *tx)
            .await?;
            if held.is_empty() {
                continue;
            }
            let mut providers = Vec::with_capacity(held.len());
            for r in &held {
                let key: (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
                providers.push(key.0);
                if let Some(u) = remaining.get_mut(&key) {
                    *u -= r.try_get::<i64, _>(2)?;
                }
            }
            crate::placement::changes::touch(tx, &providers).await?;
            crate::placement::changes::released(tx, providers)?;
            sqlx::query("DELETE FROM allocations WHERE consumer_id = $1")
                .bind(uuid)
                .execute(&mut *tx)
                .await?;
        }
    }

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
    let mut rooms: HashMap<(i64, i64), Limits> = HashMap::new();
    for r in q.fetch_all(&mut *tx).await? {
        let key: (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
        rooms.insert(key, crate::placement::inventories::limits_at(&r, 2)?);
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
        return Ok(Err(Refusal::InvalidInventory(InvalidInventory::Missing {
            classes: class_names.iter().map(|(_, n)| (*n).to_owned()).collect(),
            providers: missing.iter().map(|p| (*p).to_owned()).collect(),
        })));
    }
    // The one hand-out rule (accelerator/cleaning/withheld.rs): a device provider
    // being cleaned, or whose cleaning failed, is given to no one, even where an
    // inventory write lowered its reservation; refused in upstream's capacity words.
    let claimed: Vec<&str> = items
        .iter()
        .filter(|i| i.used > 0)
        .map(|i| i.rp_uuid.as_str())
        .collect();
    let withheld = crate::accelerator::cleaning::withheld::cleaning_of(tx, &claimed).await?;
    if let Some(i) = items
        .iter()
        .find(|i| i.used > 0 && withheld.iter().any(|(w, _)| *w == i.rp_uuid))
    {
        return Ok(Err(Refusal::InvalidInventory(InvalidInventory::Exceeds {
            class: i.rc_name.clone(),
            provider: i.rp_uuid.clone(),
            capacity: true,
        })));
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
            return Ok(Err(Refusal::InvalidInventory(InvalidInventory::Missing {
                classes: vec![i.rc_name.clone()],
                providers: vec![i.rp_uuid.clone()],
            })));
        };
        let verdict = room.judge(&Claim {
            used: remaining.get(&key).copied().unwrap_or(0),
            amount: i.used,
            claim_total: *all,
            before: prev_usage.get(&key).copied(),
        });
        let capacity = match verdict {
            Verdict::Fits => continue,
            Verdict::Constraints => false,
            Verdict::Capacity => true,
        };
        return Ok(Err(Refusal::InvalidInventory(InvalidInventory::Exceeds {
            class: i.rc_name.clone(),
            provider: i.rp_uuid.clone(),
            capacity,
        })));
    }

    let rows: Vec<&Item> = items.iter().filter(|i| i.used > 0).collect();
    for chunk in rows.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used, created_at) \
             VALUES {}",
            crate::value_rows(chunk.len(), 5)
        );
        let mut q = sqlx::query(&sql);
        for i in chunk {
            q = q
                .bind(i.rp_id)
                .bind(&prepared.consumers[i.consumer].row.uuid)
                .bind(rc_ids[&i.rc_name])
                .bind(i.used)
                .bind(now);
        }
        q.execute(&mut *tx).await?;
    }

    // Holders follow the allocations; siblings' capacities follow the holders.
    let writing = prepared
        .consumers
        .iter()
        .map(|c| c.row.uuid.clone())
        .collect();
    let mode = crate::partitions::Settling::Claim(writing);
    if let Err(r) = crate::partitions::settle(tx, &ledgers, &mode).await? {
        return Ok(Err(r));
    }

    let mut visited: BTreeMap<i64, &Ensured> = BTreeMap::new();
    for i in items {
        let c = &prepared.consumers[i.consumer];
        visited.insert(c.row.id, c);
    }
    for c in visited.values() {
        let (id, generation) = (c.row.id, c.row.generation);
        crate::placement::bump(
            tx,
            "consumers",
            id,
            generation,
            now,
            Refused::ConsumerChanged,
        )
        .await?;
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

/// The providers the prepared consumers hold allocations on now (one query per
/// [`crate::BATCH_ROWS`] consumers).
async fn providers_held_by(tx: &mut Tx, prepared: &Prepared) -> Result<Vec<i64>, StoreError> {
    let uuids: Vec<&str> = prepared
        .consumers
        .iter()
        .map(|c| c.row.uuid.as_str())
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .collect();
    let mut out = Vec::new();
    for chunk in uuids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT DISTINCT resource_provider_id FROM allocations WHERE consumer_id IN ({})",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for u in chunk {
            q = q.bind(u.to_string());
        }
        out.extend(q.fetch_all(&mut *tx).await?);
    }
    Ok(out)
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
    let rows = sqlx::query(
        "SELECT a.id, c.project_id, a.resource_provider_id FROM allocations a \
         JOIN consumers c ON c.uuid = a.consumer_id \
         JOIN resource_providers rp ON rp.id = a.resource_provider_id \
         WHERE a.consumer_id = $1",
    )
    .bind(consumer_uuid)
    .fetch_all(&mut *tx)
    .await?;
    let Some(first) = rows.first() else {
        return Ok(false);
    };
    let project: i64 = first.try_get(1)?;
    let held = rows
        .iter()
        .map(|r| r.try_get::<i64, _>(2))
        .collect::<Result<Vec<i64>, _>>()?;
    let ledgers = crate::partitions::lock_for(tx, &held).await?;
    let ids = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<Vec<i64>, _>>()?;
    crate::placement::changes::touch_consumer_providers(tx, consumer_uuid).await?;
    crate::placement::changes::released(
        tx,
        rows.iter()
            .map(|r| r.try_get::<i64, _>(2))
            .collect::<Result<Vec<i64>, _>>()?,
    )?;
    crate::placement::changes::touch_projects(tx, &[project]).await?;
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
    // A release is never refused (Settling::Release).
    let mode = crate::partitions::Settling::Release;
    let _ = crate::partitions::settle(tx, &ledgers, &mode).await?;
    Ok(true)
}
