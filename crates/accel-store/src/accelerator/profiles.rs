//! `device_profiles`: named, ordered request groups, stored as JSON text
//! (`[{"resources:FPGA": "1", ...}, ...]`, key order kept).

use super::refused::{Key, Kind, Refused};
use super::{new_uuid, Stamps};
use crate::{Store, StoreError, Tx};
use accel_core::accelerator::{DeviceProfile, Group};
use sqlx::Row;

/// A stored profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub description: Option<String>,
    pub groups: Vec<Group>,
    pub stamps: Stamps,
}

const SELECT: &str =
    "SELECT id, uuid, name, description, groups, created_at, updated_at FROM device_profiles";

fn encode(groups: &[Group]) -> String {
    let list: Vec<serde_json::Value> = groups
        .iter()
        .map(|g| {
            serde_json::Value::Object(
                g.entries()
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            )
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

/// A profile's `groups` column as stored.
pub(crate) fn decode(text: &str) -> Result<Vec<Group>, StoreError> {
    let bad = || StoreError::Invalid(format!("stored device profile groups are corrupt: {text}"));
    let value: serde_json::Value = serde_json::from_str(text).map_err(|_| bad())?;
    let list = value.as_array().ok_or_else(bad)?;
    list.iter()
        .map(|g| {
            let obj = g.as_object().ok_or_else(bad)?;
            Ok(Group::from_stored(
                obj.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect(),
            ))
        })
        .collect()
}

fn from_row(row: &sqlx::any::AnyRow) -> Result<Profile, StoreError> {
    let groups: String = row.try_get("groups")?;
    Ok(Profile {
        id: row.try_get("id")?,
        uuid: row.try_get("uuid")?,
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        groups: decode(&groups)?,
        stamps: Stamps::from_row(row)?,
    })
}

/// Stores a new profile. A taken name is [`Refused::ProfileNameTaken`], a taken
/// client-supplied uuid [`Refused::ProfileUuidTaken`].
pub async fn create(tx: &mut Tx, p: &DeviceProfile) -> Result<Profile, StoreError> {
    let uuid = p.uuid.map(|u| u.to_string()).unwrap_or_else(new_uuid);
    let taken: Vec<(String, String)> =
        sqlx::query("SELECT uuid, name FROM device_profiles WHERE name = $1 OR uuid = $2")
            .bind(&p.name)
            .bind(&uuid)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, sqlx::Error>>()?;
    let name_taken = || Refused::ProfileNameTaken {
        name: p.name.clone(),
    };
    if taken.iter().any(|(_, n)| *n == p.name) {
        return Err(name_taken().into());
    }
    if !taken.is_empty() {
        return Err(Refused::ProfileUuidTaken { uuid }.into());
    }
    sqlx::query(
        "INSERT INTO device_profiles (uuid, name, description, groups, created_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&uuid)
    .bind(&p.name)
    .bind(p.description.as_deref())
    .bind(encode(&p.groups))
    .bind(crate::now())
    .execute(&mut *tx)
    .await
    .map_err(|e| {
        // A concurrent creator won between our check and insert.
        let e = StoreError::Db(e);
        if e.is_unique_violation() {
            name_taken().into()
        } else {
            e
        }
    })?;
    by_uuid(tx, &uuid)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("device profile {uuid}")))
}

/// Every profile, or those named in `names`, in creation order.
pub async fn list(tx: &mut Tx, names: Option<&[String]>) -> Result<Vec<Profile>, StoreError> {
    let rows = match names {
        None => {
            sqlx::query(&format!("{SELECT} ORDER BY id"))
                .fetch_all(&mut *tx)
                .await?
        }
        Some([]) => return Ok(Vec::new()),
        Some(names) => {
            let sql = format!(
                "{SELECT} WHERE name IN ({}) ORDER BY id",
                crate::placeholders(1, names.len())
            );
            let mut q = sqlx::query(&sql);
            for n in names {
                q = q.bind(n);
            }
            q.fetch_all(&mut *tx).await?
        }
    };
    rows.iter().map(from_row).collect()
}

pub(crate) async fn by_uuid(tx: &mut Tx, uuid: &str) -> Result<Option<Profile>, StoreError> {
    let row = sqlx::query(&format!("{SELECT} WHERE uuid = $1"))
        .bind(uuid)
        .fetch_optional(&mut *tx)
        .await?;
    row.as_ref().map(from_row).transpose()
}

pub async fn by_name(tx: &mut Tx, name: &str) -> Result<Option<Profile>, StoreError> {
    let row = sqlx::query(&format!("{SELECT} WHERE name = $1"))
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    row.as_ref().map(from_row).transpose()
}

pub(crate) async fn by_id(tx: &mut Tx, id: i64) -> Result<Option<Profile>, StoreError> {
    let row = sqlx::query(&format!("{SELECT} WHERE id = $1"))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// Deletes a profile no ARQ references ([`Refused::ProfileInUse`] otherwise, with how
/// many ARQs still use it).
pub async fn delete(tx: &mut Tx, p: &Profile) -> Result<(), StoreError> {
    let users: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM extended_accelerator_requests WHERE device_profile_id = $1",
    )
    .bind(p.id)
    .fetch_one(&mut *tx)
    .await?;
    if users > 0 {
        return Err(Refused::ProfileInUse {
            name: p.name.clone(),
            arqs: users,
        }
        .into());
    }
    sqlx::query("DELETE FROM device_profiles WHERE id = $1")
        .bind(p.id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// The profile `key` names (its uuid or its name), [`Refused::NotFound`] when none.
async fn require(tx: &mut Tx, key: &Key) -> Result<Profile, StoreError> {
    let found = match key {
        Key::Uuid(u) => by_uuid(tx, u).await?,
        Key::Name(n) => by_name(tx, n).await?,
        Key::Id(i) => by_id(tx, *i).await?,
        Key::ProviderUuid(_) => None,
    };
    found.ok_or_else(|| Refused::NotFound(Kind::DeviceProfile, key.clone()).into())
}

/// Device profile operations ([`Store::profiles`]).
pub struct Profiles<'s>(&'s Store);

impl Store {
    /// Operations on device profiles.
    pub fn profiles(&self) -> Profiles<'_> {
        Profiles(self)
    }
}

impl Profiles<'_> {
    /// Every profile, or those named in `names`, in creation order.
    pub async fn list(&self, names: Option<&[String]>) -> Result<Vec<Profile>, StoreError> {
        let names = names.map(<[String]>::to_vec);
        self.0
            .read(move |tx| Box::pin(async move { list(tx, names.as_deref()).await }))
            .await
    }

    /// The profile `key` names ([`Refused::NotFound`] when none).
    pub async fn show(&self, key: &Key) -> Result<Profile, StoreError> {
        let key = key.clone();
        self.0
            .read(move |tx| Box::pin(async move { require(tx, &key).await }))
            .await
    }

    /// Stores a new profile ([`create`]'s refusals).
    pub async fn create(&self, p: &DeviceProfile) -> Result<Profile, StoreError> {
        self.0
            .write_rerunning(|| {
                let p = p.clone();
                move |tx| Box::pin(async move { create(tx, &p).await })
            })
            .await
    }

    /// Deletes every profile `keys` name, or none: the first missing one is
    /// [`Refused::NotFound`], one still in use [`Refused::ProfileInUse`].
    pub async fn delete_all(&self, keys: &[Key]) -> Result<(), StoreError> {
        self.0
            .write_rerunning(|| {
                let keys = keys.to_vec();
                move |tx| {
                    Box::pin(async move {
                        let mut targets = Vec::with_capacity(keys.len());
                        for k in &keys {
                            targets.push(require(tx, k).await?);
                        }
                        for p in &targets {
                            delete(tx, p).await?;
                        }
                        Ok(())
                    })
                }
            })
            .await
    }
}
