//! Inventories: what each provider offers, per resource class.
//!
//! Every change goes through [`replace`], which compares the new full set with the
//! stored one, refuses to drop a class that allocations still use, writes the
//! difference, and bumps the provider generation by compare-and-swap, all in the
//! caller's transaction.

use super::providers::{self, Provider};
use super::refused::Refused;
use crate::{Store, StoreError, Tx};
use accel_core::capacity::Limits;
use sqlx::Row;
use std::collections::HashMap;

/// One inventory record: its class and the limits that the capacity arithmetic of
/// `accel_core::capacity` (claims, the candidate search) works on.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    pub rc_id: i64,
    pub rc_name: String,
    pub limits: Limits,
    /// `updated_at` or `created_at` (epoch seconds).
    pub modified: i64,
}

impl Inventory {
    /// A record of class `rc_id` (`rc_name`) with `limits`, not yet stored.
    pub fn new(rc_id: i64, rc_name: String, limits: Limits) -> Inventory {
        Inventory {
            rc_id,
            rc_name,
            limits,
            modified: 0,
        }
    }

    pub fn capacity(&self) -> i64 {
        self.limits.capacity()
    }
}

/// The limits stored in columns `first..first + 6` of `r`, selected in the table's
/// order: total, reserved, min_unit, max_unit, step_size, allocation_ratio.
pub(crate) fn limits_at(r: &sqlx::any::AnyRow, first: usize) -> Result<Limits, sqlx::Error> {
    Ok(Limits {
        total: r.try_get(first)?,
        reserved: r.try_get(first + 1)?,
        min_unit: r.try_get(first + 2)?,
        max_unit: r.try_get(first + 3)?,
        step_size: r.try_get(first + 4)?,
        allocation_ratio: r.try_get(first + 5)?,
    })
}

type Query<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Binds the limits of `n` to the next six parameters of `q`, in the order of
/// [`limits_at`].
fn bind_limits<'q>(q: Query<'q>, n: &Inventory) -> Query<'q> {
    let l = &n.limits;
    q.bind(l.total)
        .bind(l.reserved)
        .bind(l.min_unit)
        .bind(l.max_unit)
        .bind(l.step_size)
        .bind(l.allocation_ratio)
}

/// A provider's inventories, ordered by resource class id.
pub async fn list(tx: &mut Tx, rp_id: i64) -> Result<Vec<Inventory>, StoreError> {
    let rows = sqlx::query(
        "SELECT i.resource_class_id, rc.name, i.total, i.reserved, i.min_unit, i.max_unit, \
         i.step_size, i.allocation_ratio, COALESCE(i.updated_at, i.created_at) AS modified \
         FROM inventories i JOIN resource_classes rc ON rc.id = i.resource_class_id \
         WHERE i.resource_provider_id = $1 ORDER BY i.resource_class_id",
    )
    .bind(rp_id)
    .fetch_all(&mut *tx)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Inventory {
                modified: r.try_get(8)?,
                ..Inventory::new(r.try_get(0)?, r.try_get(1)?, limits_at(r, 2)?)
            })
        })
        .collect()
}

/// Usage per resource class id on one provider.
pub async fn usage(tx: &mut Tx, rp_id: i64) -> Result<HashMap<i64, i64>, StoreError> {
    let rows = sqlx::query(
        "SELECT resource_class_id, CAST(SUM(used) AS BIGINT) FROM allocations \
         WHERE resource_provider_id = $1 GROUP BY resource_class_id",
    )
    .bind(rp_id)
    .fetch_all(&mut *tx)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)?)))
        .collect()
}

/// Replaces the provider's whole inventory with `new` (keyed by class id) and bumps
/// its generation from `rp.generation`. Classes dropped while allocated are refused
/// with [`Refused::InventoryInUse`] naming them; nothing is written then.
pub async fn replace(tx: &mut Tx, rp: &Provider, new: &[Inventory]) -> Result<i64, StoreError> {
    let old = list(tx, rp.id).await?;
    Ok(replace_listed(tx, rp, &old, new).await?.0)
}

/// [`replace`] given the provider's inventories as [`list`] read them in this
/// transaction; also answers the inventories as [`list`] would read them afterwards
/// (what changed is modified now, the rest keeps its time), with no statement for it.
pub async fn replace_listed(
    tx: &mut Tx,
    rp: &Provider,
    old: &[Inventory],
    new: &[Inventory],
) -> Result<(i64, Vec<Inventory>), StoreError> {
    let dropped: Vec<&Inventory> = old
        .iter()
        .filter(|o| !new.iter().any(|n| n.rc_id == o.rc_id))
        .collect();
    // Only a dropped class can be in use.
    let used = if dropped.is_empty() {
        HashMap::new()
    } else {
        usage(tx, rp.id).await?
    };
    let in_use: Vec<&str> = dropped
        .iter()
        .filter(|o| used.get(&o.rc_id).copied().unwrap_or(0) > 0)
        .map(|o| o.rc_name.as_str())
        .collect();
    if !in_use.is_empty() {
        return Err(Refused::InventoryInUse {
            uuid: rp.uuid.clone(),
            classes: in_use.iter().map(|c| (*c).to_owned()).collect(),
        }
        .into());
    }
    let now = crate::now();
    for o in &dropped {
        sqlx::query(
            "DELETE FROM inventories WHERE resource_provider_id = $1 AND resource_class_id = $2",
        )
        .bind(rp.id)
        .bind(o.rc_id)
        .execute(&mut *tx)
        .await?;
    }
    let mut added = Vec::new();
    let mut after = Vec::with_capacity(new.len());
    for n in new {
        let kept = old.iter().find(|o| o.rc_id == n.rc_id);
        after.push(Inventory {
            modified: match kept {
                Some(o) if o.limits == n.limits => o.modified,
                _ => now,
            },
            ..n.clone()
        });
        match kept {
            Some(o) if o.limits == n.limits => {}
            Some(_) => {
                let q = sqlx::query(
                    "UPDATE inventories SET total = $1, reserved = $2, min_unit = $3, max_unit = $4, \
                     step_size = $5, allocation_ratio = $6, updated_at = $7 \
                     WHERE resource_provider_id = $8 AND resource_class_id = $9",
                );
                bind_limits(q, n)
                    .bind(now)
                    .bind(rp.id)
                    .bind(n.rc_id)
                    .execute(&mut *tx)
                    .await?;
            }
            None => added.push((rp.id, n)),
        }
    }
    insert_rows(tx, &added, now).await?;
    let generation = providers::bump_generation(tx, rp.id, rp.generation).await?;
    after.sort_by_key(|i| i.rc_id);
    Ok((generation, after))
}

/// The inventories of providers created in this same transaction (nothing to compare
/// with, nothing allocated): `(provider id, inventory)` rows,
/// a few hundred per statement.
pub async fn insert_many_on_new(tx: &mut Tx, rows: &[(i64, &Inventory)]) -> Result<(), StoreError> {
    insert_rows(tx, rows, crate::now()).await
}

async fn insert_rows(tx: &mut Tx, rows: &[(i64, &Inventory)], now: i64) -> Result<(), StoreError> {
    for chunk in rows.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, \
             min_unit, max_unit, step_size, allocation_ratio, created_at) VALUES {}",
            crate::value_rows(chunk.len(), 9)
        );
        let mut q = sqlx::query(&sql);
        for (rp_id, n) in chunk {
            q = bind_limits(q.bind(*rp_id).bind(n.rc_id), n).bind(now);
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

/// One change a client asks of a provider's inventories. Records carry their class by
/// name (`rc_id` is resolved here).
#[derive(Debug, Clone)]
pub enum Change {
    /// `PUT .../inventories`: the whole set, guarded by the client's generation.
    ReplaceAll {
        generation: i64,
        records: Vec<Inventory>,
    },
    /// `POST .../inventories`: one new class.
    Create(Inventory),
    /// `PUT .../inventories/{class}`: one existing class, guarded by the generation.
    Update { generation: i64, record: Inventory },
    /// `DELETE .../inventories/{class}`, guarded by the generation just read.
    Delete { class: String },
    /// `DELETE .../inventories`.
    DeleteAll,
}

/// Why an inventory change was refused before writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeRefusal {
    /// The client's provider generation is not the current one.
    Generation,
    /// A record names a resource class that does not exist.
    UnknownClass(String),
    /// The body's own problem the caller found ([`change`]'s `invalid`).
    Invalid(String),
    /// `Create` of a class the provider already has.
    Exists(String),
    /// `Update` or `Delete` of a class the provider does not have.
    Missing(String),
}

/// Applies `change` to provider `rp_uuid`'s inventories in one transaction and returns
/// the new provider generation and inventories. `invalid` is a problem the caller
/// found in the body itself (a capacity below zero); it is reported after the
/// generation check and before the class lookup, in upstream's order (its handlers
/// check capacity before the object layer resolves the class). A missing provider is
/// [`Refused::NoProvider`]; dropping a class still allocated is
/// [`Refused::InventoryInUse`].
async fn change(
    store: &Store,
    rp_uuid: &str,
    change: Change,
    invalid: Option<String>,
) -> crate::Refusable<(i64, Vec<Inventory>), ChangeRefusal> {
    let rp_uuid = rp_uuid.to_owned();
    store
        .write_or_refuse(move |tx| {
            Box::pin(async move { change_tx(tx, &rp_uuid, change, invalid).await })
        })
        .await
}

async fn change_tx(
    tx: &mut Tx,
    rp_uuid: &str,
    change: Change,
    invalid: Option<String>,
) -> crate::Refusable<(i64, Vec<Inventory>), ChangeRefusal> {
    let rp = providers::require(tx, rp_uuid).await?;
    let current = list(tx, rp.id).await?;
    let names: Vec<String> = match &change {
        Change::ReplaceAll { records, .. } => records.iter().map(|r| r.rc_name.clone()).collect(),
        Change::Create(r) | Change::Update { record: r, .. } => vec![r.rc_name.clone()],
        Change::Delete { class } => vec![class.clone()],
        Change::DeleteAll => Vec::new(),
    };
    let ids = super::lookup::resource_class_ids(tx, &names).await?;
    let new = match changed(&rp, &current, change, &ids, invalid) {
        Ok(new) => new,
        Err(r) => return Ok(Err(r)),
    };
    let (generation, after) = replace_listed(tx, &rp, &current, &new).await?;
    Ok(Ok((generation, after)))
}

/// The provider's inventories once `change` is applied to `current`, or why it is
/// refused, judged in upstream's order: generation, the body's own problem
/// (`invalid`: capacity below what is used), resource classes (resolved to ids through
/// `ids`), then the class's presence.
fn changed(
    rp: &Provider,
    current: &[Inventory],
    change: Change,
    ids: &HashMap<String, i64>,
    invalid: Option<String>,
) -> Result<Vec<Inventory>, ChangeRefusal> {
    use ChangeRefusal as R;
    let generation_is = |g: i64| {
        if g == rp.generation {
            Ok(())
        } else {
            Err(R::Generation)
        }
    };
    let resolve = |records: Vec<Inventory>| {
        if let Some(m) = invalid {
            return Err(R::Invalid(m));
        }
        records
            .into_iter()
            .map(|mut inv| match ids.get(&inv.rc_name) {
                Some(id) => {
                    inv.rc_id = *id;
                    Ok(inv)
                }
                None => Err(R::UnknownClass(inv.rc_name)),
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let has = |rc_id: i64| current.iter().any(|i| i.rc_id == rc_id);
    Ok(match change {
        Change::ReplaceAll {
            generation,
            records,
        } => {
            generation_is(generation)?;
            resolve(records)?
        }
        Change::Create(record) => {
            let inv = resolve(vec![record])?.remove(0);
            if has(inv.rc_id) {
                return Err(R::Exists(inv.rc_name));
            }
            let mut out = current.to_vec();
            out.push(inv);
            out
        }
        Change::Update { generation, record } => {
            generation_is(generation)?;
            let inv = resolve(vec![record])?.remove(0);
            if !has(inv.rc_id) {
                return Err(R::Missing(inv.rc_name));
            }
            current
                .iter()
                .map(|i| if i.rc_id == inv.rc_id { &inv } else { i })
                .cloned()
                .collect()
        }
        Change::Delete { class } => {
            if !ids.contains_key(&class) {
                return Err(R::UnknownClass(class));
            }
            if !current.iter().any(|i| i.rc_name == class) {
                return Err(R::Missing(class));
            }
            current
                .iter()
                .filter(|i| i.rc_name != class)
                .cloned()
                .collect()
        }
        Change::DeleteAll => Vec::new(),
    })
}

/// Inventory operations ([`Store::inventories`]).
pub struct Inventories<'s>(&'s Store);

impl Store {
    /// Operations on provider inventories.
    pub fn inventories(&self) -> Inventories<'_> {
        Inventories(self)
    }
}

impl Inventories<'_> {
    /// Provider `uuid` and its inventories, `None` when there is no such provider.
    pub async fn of_provider(
        &self,
        uuid: &str,
    ) -> Result<Option<(Provider, Vec<Inventory>)>, StoreError> {
        providers::read_of(self.0, uuid, |tx, id| Box::pin(list(tx, id))).await
    }

    /// Applies `change` to provider `uuid`'s inventories in one transaction
    /// ([`change`]'s rules).
    pub async fn change(
        &self,
        uuid: &str,
        change: Change,
        invalid: Option<String>,
    ) -> crate::Refusable<(i64, Vec<Inventory>), ChangeRefusal> {
        self::change(self.0, uuid, change, invalid).await
    }
}
