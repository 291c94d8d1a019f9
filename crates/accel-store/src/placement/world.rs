//! A consistent read of every provider with its inventories, usage, traits and
//! aggregates: the input of the allocation-candidate search.
//!
//! Loaded in one read transaction (five full-table queries, each indexed), so the
//! search sees one instant of the database. Claims never trust this picture: they
//! re-check capacity inside their own write transaction.

use super::changes::{self, Delta, Version};
use crate::{placeholders, Store, StoreError, Tx};
use accel_core::candidates::Inventory;
use sqlx::Row;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub struct WorldProvider {
    pub id: i64,
    pub uuid: String,
    /// Name, generation and `modified` (as in [`super::providers::Provider`]) let a
    /// plain provider listing be answered from the same picture.
    pub name: String,
    pub generation: i64,
    pub modified: i64,
    pub parent_id: Option<i64>,
    pub root_id: i64,
    /// As the search takes them (class ids are the `resource_classes` ids).
    pub inventories: Vec<Inventory>,
    pub traits: Vec<i64>,
    pub aggregates: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct World {
    /// Ordered by provider id.
    pub providers: Vec<WorldProvider>,
    pub rc_names: HashMap<i64, String>,
    pub trait_names: HashMap<i64, String>,
}

/// Loads every provider and the name maps.
pub async fn load(tx: &mut Tx) -> Result<World, StoreError> {
    let providers = load_providers(tx, None).await?;
    let (rc_names, trait_names) = load_names(tx).await?;
    Ok(World {
        providers,
        rc_names,
        trait_names,
    })
}

/// Resource class and trait names by id.
pub async fn load_names(tx: &mut Tx) -> Result<Names, StoreError> {
    let rc_names = super::lookup::resource_class_names(tx).await?;
    let mut trait_names = HashMap::new();
    for r in sqlx::query("SELECT id, name FROM traits")
        .fetch_all(&mut *tx)
        .await?
    {
        trait_names.insert(r.try_get::<i64, _>("id")?, r.try_get::<String, _>("name")?);
    }
    Ok((rc_names, trait_names))
}

/// Largest `IN (...)` list per query when loading only some providers.
const CHUNK: usize = 500;

/// Loads the providers with the given ids (those that still exist), or every provider
/// when `ids` is `None`; ordered by id.
pub async fn load_providers(
    tx: &mut Tx,
    ids: Option<&[i64]>,
) -> Result<Vec<WorldProvider>, StoreError> {
    match ids {
        None => load_where(tx, None).await,
        Some(ids) => {
            let mut out = Vec::new();
            for chunk in ids.chunks(CHUNK) {
                out.extend(load_where(tx, Some(chunk)).await?);
            }
            out.sort_unstable_by_key(|p| p.id);
            Ok(out)
        }
    }
}

/// The five queries, optionally restricted to `ids` (`col IN ($1, ...)`).
async fn load_where(tx: &mut Tx, ids: Option<&[i64]>) -> Result<Vec<WorldProvider>, StoreError> {
    let only = |col: &str| match ids {
        None => String::new(),
        Some(ids) => format!(" WHERE {col} IN ({})", placeholders(1, ids.len())),
    };
    let mut providers: Vec<WorldProvider> = Vec::new();
    let mut index: HashMap<i64, usize> = HashMap::new();
    let rows = run(
        tx,
        format!(
            "SELECT id, uuid, name, generation, parent_provider_id, root_provider_id, \
             COALESCE(updated_at, created_at) AS modified FROM resource_providers{} ORDER BY id",
            only("id")
        ),
        ids,
    )
    .await?;
    for r in rows {
        let id: i64 = r.try_get("id")?;
        index.insert(id, providers.len());
        providers.push(WorldProvider {
            id,
            uuid: r.try_get("uuid")?,
            name: r.try_get("name")?,
            generation: r.try_get("generation")?,
            modified: r.try_get("modified")?,
            parent_id: r.try_get("parent_provider_id")?,
            root_id: r.try_get("root_provider_id")?,
            inventories: Vec::new(),
            traits: Vec::new(),
            aggregates: Vec::new(),
        });
    }
    if providers.is_empty() {
        return Ok(providers);
    }
    let mut used: HashMap<(i64, i64), i64> = HashMap::new();
    for r in run(
        tx,
        format!(
            "SELECT resource_provider_id, resource_class_id, CAST(SUM(used) AS BIGINT) AS used \
             FROM allocations{} GROUP BY resource_provider_id, resource_class_id",
            only("resource_provider_id")
        ),
        ids,
    )
    .await?
    {
        used.insert(
            (
                r.try_get("resource_provider_id")?,
                r.try_get("resource_class_id")?,
            ),
            r.try_get("used")?,
        );
    }
    for r in run(
        tx,
        format!(
            "SELECT resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, \
             step_size, allocation_ratio FROM inventories{} ORDER BY resource_provider_id, resource_class_id",
            only("resource_provider_id")
        ),
        ids,
    )
    .await?
    {
        let rp: i64 = r.try_get("resource_provider_id")?;
        let rc: i64 = r.try_get("resource_class_id")?;
        if let Some(&i) = index.get(&rp) {
            providers[i].inventories.push(Inventory {
                rc: rc as u32,
                limits: super::inventories::limits_at(&r, 2)?,
                used: used.get(&(rp, rc)).copied().unwrap_or(0),
            });
        }
    }
    for r in run(
        tx,
        format!(
            "SELECT resource_provider_id, trait_id FROM resource_provider_traits{} \
             ORDER BY resource_provider_id, trait_id",
            only("resource_provider_id")
        ),
        ids,
    )
    .await?
    {
        let rp: i64 = r.try_get("resource_provider_id")?;
        if let Some(&i) = index.get(&rp) {
            providers[i].traits.push(r.try_get("trait_id")?);
        }
    }
    for r in run(
        tx,
        format!(
            "SELECT rpa.resource_provider_id, pa.uuid FROM resource_provider_aggregates rpa \
             JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id{} \
             ORDER BY rpa.resource_provider_id, pa.id",
            only("rpa.resource_provider_id")
        ),
        ids,
    )
    .await?
    {
        let rp: i64 = r.try_get("resource_provider_id")?;
        if let Some(&i) = index.get(&rp) {
            providers[i].aggregates.push(r.try_get("uuid")?);
        }
    }
    Ok(providers)
}

async fn run(
    tx: &mut Tx,
    sql: String,
    ids: Option<&[i64]>,
) -> Result<Vec<sqlx::any::AnyRow>, StoreError> {
    let mut q = sqlx::query(&sql);
    for id in ids.unwrap_or(&[]) {
        q = q.bind(*id);
    }
    Ok(q.fetch_all(&mut *tx).await?)
}

/// Class and trait names by id: `(classes, traits)`.
pub type Names = (HashMap<i64, String>, HashMap<i64, String>);

/// What changed since a picture of the world was taken ([`Worlds::refresh`]).
pub enum Refresh {
    /// The providers logged as changed (`changed`, sorted ids) as they are now
    /// (`loaded`: those that still exist, by id), and the names when they changed.
    Changed {
        version: Version,
        changed: Vec<i64>,
        loaded: Vec<WorldProvider>,
        names: Option<Names>,
    },
    /// Everything, when there was no picture or the log no longer reaches back to it.
    Full { version: Version, world: World },
}

/// Reads of the whole world ([`Store::world`]): the candidate index's input.
pub struct Worlds<'s>(&'s Store);

impl Store {
    /// Reads of every provider at once.
    pub fn world(&self) -> Worlds<'_> {
        Worlds(self)
    }
}

impl Worlds<'_> {
    /// What changed since the picture of version `known` (everything when `None`),
    /// with the version now, in one read snapshot.
    pub async fn refresh(&self, known: Option<Version>) -> Result<Refresh, StoreError> {
        self.0
            .read(move |tx| {
                Box::pin(async move {
                    let version = changes::version(tx).await?;
                    let Some(known) = known else {
                        let world = load(tx).await?;
                        return Ok(Refresh::Full { version, world });
                    };
                    match changes::since(tx, &known, &version).await? {
                        Delta::Some { providers, names } => {
                            let loaded = load_providers(tx, Some(&providers)).await?;
                            let names = if names {
                                Some(load_names(tx).await?)
                            } else {
                                None
                            };
                            Ok(Refresh::Changed {
                                version,
                                changed: providers,
                                loaded,
                                names,
                            })
                        }
                        Delta::Reload => {
                            let world = load(tx).await?;
                            Ok(Refresh::Full { version, world })
                        }
                    }
                })
            })
            .await
    }
}
