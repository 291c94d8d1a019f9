//! Resource classes: the standard catalogue (ids = upstream index) and custom
//! `CUSTOM_*` classes, whose ids start at [`standard::CUSTOM_RC_BASE_ID`]. The API's
//! operations on them are [`Classes`] ([`Store::classes`]).

use super::refused::Refused;
use crate::{Store, StoreError, Tx};
use accel_core::standard;
use sqlx::Row;

/// A resource class row.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceClass {
    pub id: i64,
    pub name: String,
    /// `updated_at`, or `created_at` when never updated (epoch seconds).
    pub modified: i64,
}

impl ResourceClass {
    /// Standard classes are never renamed or deleted.
    pub fn is_standard(&self) -> bool {
        self.id < standard::CUSTOM_RC_BASE_ID
    }
}

const SELECT: &str =
    "SELECT id, name, COALESCE(updated_at, created_at) AS modified FROM resource_classes";

fn from_row(row: &sqlx::any::AnyRow) -> Result<ResourceClass, sqlx::Error> {
    Ok(ResourceClass {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        modified: row.try_get("modified")?,
    })
}

fn not_found(name: &str) -> Refused {
    Refused::NoClass {
        name: name.to_owned(),
    }
}

/// Every class, standard ones first (by id, as upstream lists them).
pub async fn list(tx: &mut Tx) -> Result<Vec<ResourceClass>, StoreError> {
    let rows = sqlx::query(&format!("{SELECT} ORDER BY id"))
        .fetch_all(&mut *tx)
        .await?;
    Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
}

pub async fn get(tx: &mut Tx, name: &str) -> Result<Option<ResourceClass>, StoreError> {
    let row = sqlx::query(&format!("{SELECT} WHERE name = $1"))
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(row.as_ref().map(from_row).transpose()?)
}

/// Like [`get`], but a missing class is refused ([`Refused::NoClass`]).
pub async fn require(tx: &mut Tx, name: &str) -> Result<ResourceClass, StoreError> {
    Ok(get(tx, name).await?.ok_or_else(|| not_found(name))?)
}

/// Creates a custom class with the next free id (>= 10000). An existing name is
/// refused ([`Refused::ClassExists`]).
///
/// Ids are chosen as `max + 1`; a concurrent creator on PostgreSQL may take the same
/// id first, in which case the insert does nothing and the next id is tried.
pub async fn create(tx: &mut Tx, name: &str) -> Result<ResourceClass, StoreError> {
    if !name.starts_with(accel_core::names::CUSTOM_PREFIX) {
        return Err(StoreError::Invalid(format!(
            "name must start with {}",
            accel_core::names::CUSTOM_PREFIX
        )));
    }
    let now = crate::now();
    for _ in 0..100 {
        if get(tx, name).await?.is_some() {
            return Err(Refused::ClassExists {
                name: name.to_owned(),
            }
            .into());
        }
        let max: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM resource_classes")
            .fetch_one(&mut *tx)
            .await?;
        let id = match max {
            Some(m) if m >= standard::CUSTOM_RC_BASE_ID => m + 1,
            _ => standard::CUSTOM_RC_BASE_ID,
        };
        let n = sqlx::query(
            "INSERT INTO resource_classes (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(name)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 1 {
            super::changes::touch_names(tx).await?;
            return Ok(ResourceClass {
                id,
                name: name.to_owned(),
                modified: now,
            });
        }
    }
    Err(Refused::ClassIdRace {
        name: name.to_owned(),
    }
    .into())
}

/// Renames a custom class (microversions 1.2 to 1.6).
///
/// Refusals: a standard class ([`Refused::StandardClassUpdate`]), a name taken
/// ([`Refused::ClassNameTaken`]).
pub async fn rename(
    tx: &mut Tx,
    rc: &ResourceClass,
    new_name: &str,
) -> Result<ResourceClass, StoreError> {
    if rc.is_standard() {
        return Err(Refused::StandardClassUpdate {
            name: rc.name.clone(),
        }
        .into());
    }
    let other: Option<i64> =
        sqlx::query_scalar("SELECT id FROM resource_classes WHERE name = $1 AND id <> $2")
            .bind(new_name)
            .bind(rc.id)
            .fetch_optional(&mut *tx)
            .await?;
    if other.is_some() {
        return Err(Refused::ClassNameTaken {
            name: new_name.to_owned(),
        }
        .into());
    }
    let now = crate::now();
    sqlx::query("UPDATE resource_classes SET name = $1, updated_at = $2 WHERE id = $3")
        .bind(new_name)
        .bind(now)
        .bind(rc.id)
        .execute(&mut *tx)
        .await?;
    super::changes::touch_names(tx).await?;
    Ok(ResourceClass {
        id: rc.id,
        name: new_name.to_owned(),
        modified: now,
    })
}

/// Deletes a custom class that no inventory uses.
///
/// Refusals: missing ([`Refused::NoClass`]), standard
/// ([`Refused::StandardClassDelete`]), in use ([`Refused::ClassInUse`]).
pub async fn delete(tx: &mut Tx, name: &str) -> Result<(), StoreError> {
    let rc = require(tx, name).await?;
    if rc.is_standard() {
        return Err(Refused::StandardClassDelete {
            name: name.to_owned(),
        }
        .into());
    }
    super::delete_unused_name(
        tx,
        "resource_classes",
        "SELECT COUNT(*) FROM inventories WHERE resource_class_id = $1",
        rc.id,
        Refused::ClassInUse {
            name: name.to_owned(),
        },
        not_found(name),
    )
    .await
}

/// Resource class operations ([`Store::classes`]).
pub struct Classes<'s>(&'s Store);

impl Store {
    /// Operations on resource classes.
    pub fn classes(&self) -> Classes<'_> {
        Classes(self)
    }
}

impl Classes<'_> {
    /// Every class, standard ones first.
    pub async fn list(&self) -> Result<Vec<ResourceClass>, StoreError> {
        self.0.read(|tx| Box::pin(list(tx))).await
    }

    /// One class by name ([`Refused::NoClass`] when absent).
    pub async fn require(&self, name: &str) -> Result<ResourceClass, StoreError> {
        let name = name.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { require(tx, &name).await }))
            .await
    }

    /// Creates a custom class ([`create`]).
    pub async fn create(&self, name: &str) -> Result<ResourceClass, StoreError> {
        let name = name.to_owned();
        self.0
            .write(move |tx| Box::pin(async move { create(tx, &name).await }))
            .await
    }

    /// Creates the custom class unless it exists; true when this call created it.
    pub async fn ensure(&self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.0
            .write(move |tx| {
                Box::pin(async move {
                    if get(tx, &name).await?.is_some() {
                        return Ok(false);
                    }
                    match create(tx, &name).await {
                        Ok(_) => Ok(true),
                        Err(StoreError::Refused(crate::Refused::Placement(
                            Refused::ClassExists { .. },
                        ))) => Ok(false),
                        Err(e) => Err(e),
                    }
                })
            })
            .await
    }

    /// Renames custom class `name` to `new_name` ([`rename`]).
    pub async fn rename(&self, name: &str, new_name: &str) -> Result<ResourceClass, StoreError> {
        let (n, nn) = (name.to_owned(), new_name.to_owned());
        self.0
            .write(move |tx| {
                Box::pin(async move {
                    let rc = require(tx, &n).await?;
                    rename(tx, &rc, &nn).await
                })
            })
            .await
    }

    /// Deletes a custom class no inventory uses ([`delete`]).
    pub async fn delete(&self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.0
            .write(move |tx| Box::pin(async move { delete(tx, &name).await }))
            .await
    }
}
