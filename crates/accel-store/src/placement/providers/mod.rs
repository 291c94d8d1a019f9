//! Resource providers: the nodes of provider trees.
//!
//! A provider's `root_provider_id` is denormalised (upstream does the same) so that
//! tree queries are one indexed lookup. Re-parenting (1.37) rewrites the root of the
//! whole moved subtree in the same transaction.
//!
//! The API's operations on providers are [`Providers`] ([`Store::providers`]); the
//! functions taking a transaction compose with other writes (an agent's report).

mod batch;
mod list;

use batch::create_roots_alone;
pub use batch::{create_many, create_roots, NewChild};
pub use list::{list, Filter, Query};

use super::changes;
use super::refused::{ParentRefusal, Refused};
use crate::{placeholders, BoxFut, Store, StoreError, Tx};
use sqlx::Row;

/// A provider as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub generation: i64,
    pub parent_uuid: Option<String>,
    pub root_uuid: String,
    pub parent_id: Option<i64>,
    pub root_id: i64,
    /// `updated_at`, or `created_at` when never updated (epoch seconds).
    pub modified: i64,
}

const SELECT: &str = "SELECT rp.id, rp.uuid, rp.name, rp.generation, rp.parent_provider_id, \
     rp.root_provider_id, p.uuid AS parent_uuid, r.uuid AS root_uuid, \
     COALESCE(rp.updated_at, rp.created_at) AS modified \
     FROM resource_providers rp \
     JOIN resource_providers r ON r.id = rp.root_provider_id \
     LEFT JOIN resource_providers p ON p.id = rp.parent_provider_id";

fn from_row(row: &sqlx::any::AnyRow) -> Result<Provider, sqlx::Error> {
    Ok(Provider {
        id: row.try_get("id")?,
        uuid: row.try_get("uuid")?,
        name: row.try_get("name")?,
        generation: row.try_get("generation")?,
        parent_id: row.try_get("parent_provider_id")?,
        root_id: row.try_get("root_provider_id")?,
        parent_uuid: row.try_get("parent_uuid")?,
        root_uuid: row.try_get("root_uuid")?,
        modified: row.try_get("modified")?,
    })
}

pub async fn get(tx: &mut Tx, uuid: &str) -> Result<Option<Provider>, StoreError> {
    let row = sqlx::query(&format!("{SELECT} WHERE rp.uuid = $1"))
        .bind(uuid)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(row.as_ref().map(from_row).transpose()?)
}

/// Like [`get`] but a missing provider is refused ([`Refused::NoProvider`]).
pub async fn require(tx: &mut Tx, uuid: &str) -> Result<Provider, StoreError> {
    get(tx, uuid).await?.ok_or_else(|| no_provider(uuid))
}

/// The refusal of an operation on a provider that does not exist.
pub(crate) fn no_provider(uuid: &str) -> StoreError {
    Refused::NoProvider {
        uuid: uuid.to_owned(),
    }
    .into()
}

/// Which of `uuid` and `name` are already taken (for the duplicate message).
pub async fn taken(tx: &mut Tx, uuid: &str, name: &str) -> Result<(bool, bool), StoreError> {
    let rows =
        sqlx::query("SELECT uuid, name FROM resource_providers WHERE uuid = $1 OR name = $2")
            .bind(uuid)
            .bind(name)
            .fetch_all(&mut *tx)
            .await?;
    let mut dup = (false, false);
    for r in rows {
        let u: String = r.try_get("uuid")?;
        let n: String = r.try_get("name")?;
        dup.0 |= u == uuid;
        dup.1 |= n == name;
    }
    Ok(dup)
}

/// Creates a provider; the parent (if any) must exist.
pub async fn create(
    tx: &mut Tx,
    uuid: &str,
    name: &str,
    parent_uuid: Option<&str>,
) -> Result<Provider, StoreError> {
    // A taken uuid or name outranks a bad parent, as upstream checks them. PostgreSQL
    // aborts the whole transaction on a failed insert, so there they are checked
    // first; MySQL and SQLite undo only the failed statement, so the insert goes
    // first and the check runs only when it (or the parent) fails: one round trip
    // less on every create.
    let checked = tx.backend() == crate::Backend::Postgres;
    if checked {
        check_free(tx, uuid, name).await?;
    }
    let parent = match parent_uuid {
        None => None,
        Some(p) => {
            let refused = |why| {
                StoreError::from(Refused::ProviderCreate {
                    uuid: uuid.to_owned(),
                    name: name.to_owned(),
                    why,
                })
            };
            let found = if p == uuid {
                Err(refused(ParentRefusal::Itself))
            } else {
                get(tx, p)
                    .await?
                    .ok_or_else(|| refused(ParentRefusal::Missing))
            };
            match found {
                Ok(parent) => Some(parent),
                Err(e) => {
                    if !checked {
                        check_free(tx, uuid, name).await?;
                    }
                    return Err(e);
                }
            }
        }
    };
    match insert(tx, uuid, name, parent.as_ref()).await {
        Err(e) if !checked && e.is_unique_violation() => {
            check_free(tx, uuid, name).await?;
            Err(e)
        }
        inserted => inserted,
    }
}

/// Upstream's 409 when the uuid or the name is taken ([`Refused::ProviderExists`]).
async fn check_free(tx: &mut Tx, uuid: &str, name: &str) -> Result<(), StoreError> {
    let (dup_uuid, dup_name) = taken(tx, uuid, name).await?;
    if dup_uuid || dup_name {
        return Err(Refused::ProviderExists {
            uuid: dup_uuid.then(|| uuid.to_owned()),
            name: dup_name.then(|| name.to_owned()),
        }
        .into());
    }
    Ok(())
}

/// Inserts the row and returns the provider as [`require`] would read it back.
async fn insert(
    tx: &mut Tx,
    uuid: &str,
    name: &str,
    parent: Option<&Provider>,
) -> Result<Provider, StoreError> {
    let now = crate::now();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO resource_providers (uuid, name, generation, parent_provider_id, root_provider_id, created_at) \
         VALUES ($1, $2, 0, $3, $4, $5) RETURNING id",
    )
    .bind(uuid)
    .bind(name)
    .bind(parent.map(|p| p.id))
    .bind(parent.map(|p| p.root_id))
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    if parent.is_none() {
        // This second write stamps `updated_at`, as upstream's does: a new root has an
        // update time, a new child does not (see [`updated_at`]).
        sqlx::query(
            "UPDATE resource_providers SET root_provider_id = id, updated_at = $2 WHERE id = $1",
        )
        .bind(id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    changes::touch(tx, &[id]).await?;
    Ok(Provider {
        id,
        uuid: uuid.to_owned(),
        name: name.to_owned(),
        generation: 0,
        parent_uuid: parent.map(|p| p.uuid.clone()),
        root_uuid: parent.map_or_else(|| uuid.to_owned(), |p| p.root_uuid.clone()),
        parent_id: parent.map(|p| p.id),
        root_id: parent.map_or(id, |p| p.root_id),
        modified: now,
    })
}

/// The provider's `updated_at` as stored, `None` when it was never written after its
/// insert. Upstream answers `PUT /resource_providers/{uuid}` with the update time the
/// provider had *before* that update, and with no `last-modified` at all when it had none.
pub async fn updated_at(tx: &mut Tx, id: i64) -> Result<Option<i64>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT updated_at FROM resource_providers WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?,
    )
}

/// Which of `uuids` name existing providers (one query per few hundred).
pub async fn existing(tx: &mut Tx, uuids: &[&str]) -> Result<Vec<Provider>, StoreError> {
    let mut out = Vec::new();
    for chunk in uuids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "{SELECT} WHERE rp.uuid IN ({})",
            crate::placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for u in chunk {
            q = q.bind(*u);
        }
        for r in q.fetch_all(&mut *tx).await? {
            out.push(from_row(&r)?);
        }
    }
    Ok(out)
}

/// What an update does to the parent.
#[derive(Debug, Clone, PartialEq)]
pub enum ParentChange {
    Keep,
    Set(String),
    Clear,
}

/// Renames and/or re-parents `rp`. Re-parenting must not create a loop.
pub async fn update(
    tx: &mut Tx,
    rp: &Provider,
    name: &str,
    parent: ParentChange,
) -> Result<Provider, StoreError> {
    if name != rp.name {
        let other: Option<i64> =
            sqlx::query_scalar("SELECT id FROM resource_providers WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
        if other.is_some() {
            return Err(Refused::ProviderNameTaken {
                name: name.to_owned(),
            }
            .into());
        }
    }
    let now = crate::now();
    sqlx::query("UPDATE resource_providers SET name = $1, updated_at = $2 WHERE id = $3")
        .bind(name)
        .bind(now)
        .bind(rp.id)
        .execute(&mut *tx)
        .await?;
    changes::touch(tx, &[rp.id]).await?;
    let refused = |why| {
        StoreError::from(Refused::ProviderUpdate {
            uuid: rp.uuid.clone(),
            why,
        })
    };
    let new_parent = match parent {
        ParentChange::Keep => None,
        ParentChange::Clear => Some(None),
        ParentChange::Set(p) => {
            let parent = get(tx, &p)
                .await?
                .ok_or_else(|| refused(ParentRefusal::Missing))?;
            Some(Some(parent))
        }
    };
    if let Some(new_parent) = new_parent {
        if new_parent.as_ref().map(|p| p.id) != rp.parent_id {
            let subtree = descendants(tx, rp.id).await?;
            let new_root = match &new_parent {
                Some(p) => {
                    if p.id == rp.id || subtree.contains(&p.id) {
                        return Err(refused(ParentRefusal::Loop));
                    }
                    p.root_id
                }
                None => rp.id,
            };
            sqlx::query(
                "UPDATE resource_providers SET parent_provider_id = $1, root_provider_id = $2 WHERE id = $3",
            )
            .bind(new_parent.as_ref().map(|p| p.id))
            .bind(new_root)
            .bind(rp.id)
            .execute(&mut *tx)
            .await?;
            changes::touch(tx, &subtree).await?;
            if !subtree.is_empty() {
                let sql = format!(
                    "UPDATE resource_providers SET root_provider_id = $1 WHERE id IN ({})",
                    placeholders(2, subtree.len())
                );
                let mut q = sqlx::query(&sql).bind(new_root);
                for id in &subtree {
                    q = q.bind(*id);
                }
                q.execute(&mut *tx).await?;
            }
        }
    }
    require(tx, &rp.uuid).await
}

/// Ids of every provider below `id` (not including it).
pub async fn descendants(tx: &mut Tx, id: i64) -> Result<Vec<i64>, StoreError> {
    let mut out = Vec::new();
    let mut frontier = vec![id];
    while !frontier.is_empty() {
        let sql = format!(
            "SELECT id FROM resource_providers WHERE parent_provider_id IN ({})",
            placeholders(1, frontier.len())
        );
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for f in &frontier {
            q = q.bind(*f);
        }
        frontier = q.fetch_all(&mut *tx).await?;
        out.extend_from_slice(&frontier);
    }
    Ok(out)
}

/// Deletes a provider with no children and no allocations, with its inventories,
/// traits and aggregate links.
pub async fn delete(tx: &mut Tx, rp: &Provider) -> Result<(), StoreError> {
    let children: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM resource_providers WHERE parent_provider_id = $1")
            .bind(rp.id)
            .fetch_one(&mut *tx)
            .await?;
    if children > 0 {
        return Err(Refused::ProviderHasChildren {
            uuid: rp.uuid.clone(),
        }
        .into());
    }
    let allocs: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM allocations WHERE resource_provider_id = $1")
            .bind(rp.id)
            .fetch_one(&mut *tx)
            .await?;
    if allocs > 0 {
        return Err(Refused::ProviderInUse {
            uuid: rp.uuid.clone(),
        }
        .into());
    }
    for table in [
        "inventories",
        "resource_provider_traits",
        "resource_provider_aggregates",
    ] {
        sqlx::query(&format!(
            "DELETE FROM {table} WHERE resource_provider_id = $1"
        ))
        .bind(rp.id)
        .execute(&mut *tx)
        .await?;
    }
    let n = sqlx::query("DELETE FROM resource_providers WHERE id = $1")
        .bind(rp.id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if n != 1 {
        return Err(no_provider(&rp.uuid));
    }
    changes::touch(tx, &[rp.id]).await
}

/// Compare-and-swap on a provider's generation: succeeds only if it is still
/// `expected`, and returns the new generation.
pub async fn bump_generation(tx: &mut Tx, id: i64, expected: i64) -> Result<i64, StoreError> {
    let next = super::bump(
        tx,
        "resource_providers",
        id,
        expected,
        crate::now(),
        Refused::ProviderChanged,
    )
    .await?;
    changes::touch(tx, &[id]).await?;
    Ok(next)
}

/// Provider operations ([`Store::providers`]).
pub struct Providers<'s>(&'s Store);

impl Store {
    /// Operations on resource providers.
    pub fn providers(&self) -> Providers<'_> {
        Providers(self)
    }
}

impl Providers<'_> {
    /// One provider by uuid, `None` when absent.
    pub async fn get(&self, uuid: &str) -> Result<Option<Provider>, StoreError> {
        let uuid = uuid.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { get(tx, &uuid).await }))
            .await
    }

    /// Whether provider `uuid` exists: one statement, outside any transaction.
    pub async fn exists(&self, uuid: &str) -> Result<bool, StoreError> {
        let uuid = uuid.to_owned();
        self.0
            .read_one(move |tx| Box::pin(async move { Ok(get(tx, &uuid).await?.is_some()) }))
            .await
    }

    /// Creates provider `uuid` named `name`, under `parent` when given ([`create`]).
    pub async fn create(
        &self,
        uuid: &str,
        name: &str,
        parent: Option<&str>,
    ) -> Result<Provider, StoreError> {
        let run = || {
            let (u, n, p) = (uuid.to_owned(), name.to_owned(), parent.map(str::to_owned));
            self.0
                .write(move |tx| Box::pin(async move { create(tx, &u, &n, p.as_deref()).await }))
        };
        // On PostgreSQL the uuid and name are checked before the insert: a create racing
        // another for the same name can pass the check and then meet the unique
        // constraint. Run again, the check sees the winner's row and answers the 409.
        match run().await {
            Err(e) if e.is_unique_violation() => run().await,
            done => done,
        }
    }

    /// Renames and re-parents provider `uuid` ([`update`]); before microversion 1.37
    /// (`allow_reparent` false) a child keeps its parent. Answers the provider and its
    /// update time before this update (`None` when never updated since its insert).
    pub async fn update(
        &self,
        uuid: &str,
        name: &str,
        parent: ParentChange,
        allow_reparent: bool,
    ) -> Result<(Provider, Option<i64>), StoreError> {
        let (u, n) = (uuid.to_owned(), name.to_owned());
        self.0
            .write(move |tx| {
                Box::pin(async move {
                    let rp = require(tx, &u).await?;
                    if !allow_reparent {
                        let why = match &parent {
                            ParentChange::Set(p)
                                if rp.parent_uuid.is_some()
                                    && rp.parent_uuid.as_deref() != Some(p.as_str()) =>
                            {
                                Some(ParentRefusal::Reparent)
                            }
                            ParentChange::Clear if rp.parent_uuid.is_some() => {
                                Some(ParentRefusal::Unparent)
                            }
                            _ => None,
                        };
                        if let Some(why) = why {
                            return Err(Refused::ProviderUpdate { uuid: u, why }.into());
                        }
                    }
                    let before = updated_at(tx, rp.id).await?;
                    Ok((update(tx, &rp, &n, parent).await?, before))
                })
            })
            .await
    }

    /// Deletes provider `uuid` ([`delete`]); false when there is none.
    pub async fn delete(&self, uuid: &str) -> Result<bool, StoreError> {
        let uuid = uuid.to_owned();
        self.0
            .write(move |tx| {
                Box::pin(async move {
                    match get(tx, &uuid).await? {
                        Some(rp) => delete(tx, &rp).await.map(|()| true),
                        None => Ok(false),
                    }
                })
            })
            .await
    }

    /// The providers a filtered listing asks for ([`Query`]), in one snapshot.
    pub async fn list(&self, q: Query) -> Result<Vec<Provider>, StoreError> {
        self.0
            .read(move |tx| Box::pin(list::list_named(tx, q)))
            .await
    }

    /// Creates the root providers `new` (uuid, name) together in one transaction
    /// ([`create_roots_alone`]).
    pub async fn create_roots(
        &self,
        new: &[(String, String)],
    ) -> Result<Vec<Provider>, StoreError> {
        create_roots_alone(self.0, new).await
    }
}

/// A provider and what `then` reads of it (given its id) in one read snapshot, `None`
/// when the provider is absent: every per-provider read of the API
/// (`/resource_providers/{uuid}/...`).
pub(crate) async fn read_of<T, F>(
    store: &Store,
    uuid: &str,
    then: F,
) -> Result<Option<(Provider, T)>, StoreError>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut Tx, i64) -> BoxFut<'c, T> + Send + 'static,
{
    let uuid = uuid.to_owned();
    store
        .read(move |tx| {
            Box::pin(async move {
                let Some(rp) = get(tx, &uuid).await? else {
                    return Ok(None);
                };
                let v = then(tx, rp.id).await?;
                Ok(Some((rp, v)))
            })
        })
        .await
}

/// A write on provider `uuid` that checks the generation the client sent first
/// (`expected`, when given): a missing provider is [`Refused::NoProvider`], another
/// generation [`Refused::ProviderGeneration`]. `then` gets the provider.
pub(crate) async fn write_at<T, F>(
    store: &Store,
    uuid: &str,
    expected: Option<i64>,
    then: F,
) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut Tx, Provider) -> BoxFut<'c, T> + Send + 'static,
{
    let uuid = uuid.to_owned();
    store
        .write(move |tx| {
            Box::pin(async move {
                let rp = require(tx, &uuid).await?;
                if expected.is_some_and(|g| g != rp.generation) {
                    return Err(Refused::ProviderGeneration { uuid }.into());
                }
                then(tx, rp).await
            })
        })
        .await
}
