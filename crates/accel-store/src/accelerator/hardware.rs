//! Hardware records: `devices`, `control_path_ids`, `deployables`, `attributes`,
//! `attach_handles`. The agent report ([`super::report`]) writes them; the API reads
//! them and manages attributes.

use super::refused::{Key, Kind, Refused};
use super::{new_uuid, Stamps};
use crate::{placeholders, Store, StoreError, Tx};
use accel_core::accelerator::{DeviceHealth, DeviceStatus, DeviceType};
use sqlx::Row;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub id: i64,
    pub uuid: String,
    pub device_type: DeviceType,
    pub vendor: String,
    pub model: String,
    pub std_board_info: Option<String>,
    pub vendor_board_info: Option<String>,
    pub hostname: String,
    pub status: DeviceStatus,
    pub health: DeviceHealth,
    pub stamps: Stamps,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Deployable {
    pub id: i64,
    pub uuid: String,
    pub parent_id: Option<i64>,
    pub root_id: Option<i64>,
    pub name: String,
    pub num_accelerators: i64,
    pub device_id: i64,
    pub rp_uuid: Option<String>,
    pub driver_name: Option<String>,
    pub bitstream_id: Option<String>,
    pub stamps: Stamps,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    pub id: i64,
    pub uuid: String,
    pub deployable_id: i64,
    pub key: String,
    pub value: String,
    pub stamps: Stamps,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AttachHandle {
    pub id: i64,
    pub uuid: String,
    pub deployable_id: i64,
    pub cpid_id: i64,
    pub in_use: bool,
    pub attach_type: String,
    pub attach_info: String,
}

const DEVICE_SELECT: &str = "SELECT id, uuid, type, vendor, model, std_board_info, \
     vendor_board_info, hostname, status, health, created_at, updated_at FROM devices";
const DEPLOYABLE_SELECT: &str = "SELECT id, uuid, parent_id, root_id, name, num_accelerators, \
     device_id, rp_uuid, driver_name, bitstream_id, created_at, updated_at FROM deployables";
const ATTRIBUTE_SELECT: &str =
    "SELECT id, uuid, deployable_id, key, value, created_at, updated_at FROM attributes";
const HANDLE_SELECT: &str =
    "SELECT id, uuid, deployable_id, cpid_id, in_use, attach_type, attach_info FROM attach_handles";

fn device(row: &sqlx::any::AnyRow) -> Result<Device, StoreError> {
    Ok(Device {
        id: row.try_get("id")?,
        uuid: row.try_get("uuid")?,
        device_type: super::parse_column(row, "type")?,
        vendor: row.try_get("vendor")?,
        model: row.try_get("model")?,
        std_board_info: row.try_get("std_board_info")?,
        vendor_board_info: row.try_get("vendor_board_info")?,
        hostname: row.try_get("hostname")?,
        status: super::parse_column(row, "status")?,
        health: super::parse_column(row, "health")?,
        stamps: Stamps::from_row(row)?,
    })
}

fn deployable(row: &sqlx::any::AnyRow) -> Result<Deployable, StoreError> {
    Ok(Deployable {
        id: row.try_get("id")?,
        uuid: row.try_get("uuid")?,
        parent_id: row.try_get("parent_id")?,
        root_id: row.try_get("root_id")?,
        name: row.try_get("name")?,
        num_accelerators: row.try_get("num_accelerators")?,
        device_id: row.try_get("device_id")?,
        rp_uuid: row.try_get("rp_uuid")?,
        driver_name: row.try_get("driver_name")?,
        bitstream_id: row.try_get("bitstream_id")?,
        stamps: Stamps::from_row(row)?,
    })
}

fn attribute(row: &sqlx::any::AnyRow) -> Result<Attribute, StoreError> {
    Ok(Attribute {
        id: row.try_get("id")?,
        uuid: row.try_get("uuid")?,
        deployable_id: row.try_get("deployable_id")?,
        key: row.try_get("key")?,
        value: row.try_get("value")?,
        stamps: Stamps::from_row(row)?,
    })
}

fn handle(row: &sqlx::any::AnyRow) -> Result<AttachHandle, StoreError> {
    let in_use: i64 = row.try_get("in_use")?;
    Ok(AttachHandle {
        id: row.try_get("id")?,
        uuid: row.try_get("uuid")?,
        deployable_id: row.try_get("deployable_id")?,
        cpid_id: row.try_get("cpid_id")?,
        in_use: in_use != 0,
        attach_type: row.try_get("attach_type")?,
        attach_info: row.try_get("attach_info")?,
    })
}

/// Runs `head WHERE col = $1 AND ...` with text or integer equality filters.
async fn select<T>(
    tx: &mut Tx,
    head: &str,
    filters: &[(&str, Value)],
    conv: fn(&sqlx::any::AnyRow) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    // A conjunction of equalities needs one condition per column, and two values for
    // one column match nothing: the statement is bounded by the table's columns
    // however many filters the request names.
    let mut distinct: Vec<&(&str, Value)> = Vec::new();
    for f in filters {
        match distinct.iter().find(|(col, _)| *col == f.0) {
            Some((_, v)) if *v != f.1 => return Ok(Vec::new()),
            Some(_) => {}
            None => distinct.push(f),
        }
    }
    let mut sql = head.to_owned();
    for (i, (col, _)) in distinct.iter().enumerate() {
        sql.push_str(if i == 0 { " WHERE " } else { " AND " });
        sql.push_str(&format!("{col} = ${}", i + 1));
    }
    sql.push_str(" ORDER BY id");
    let mut q = sqlx::query(&sql);
    for (_, v) in distinct {
        q = match v {
            Value::Text(s) => q.bind(s.clone()),
            Value::Int(i) => q.bind(*i),
        };
    }
    q.fetch_all(&mut *tx).await?.iter().map(conv).collect()
}

/// The one row of `head` with `uuid`; [`Refused::NotFound`] for `kind` when there is
/// none.
async fn by_uuid<T>(
    tx: &mut Tx,
    head: &str,
    conv: fn(&sqlx::any::AnyRow) -> Result<T, StoreError>,
    kind: Kind,
    uuid: &str,
) -> Result<T, StoreError> {
    select(tx, head, &[("uuid", Value::Text(uuid.into()))], conv)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| Refused::no_uuid(kind, uuid))
}

/// Runs `head WHERE col IN (ids) ORDER BY id`, a query per [`crate::BATCH_ROWS`] ids.
async fn select_in<T>(
    tx: &mut Tx,
    head: &str,
    col: &str,
    ids: &[i64],
    conv: fn(&sqlx::any::AnyRow) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    for chunk in ids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "{head} WHERE {col} IN ({}) ORDER BY id",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for id in chunk {
            q = q.bind(*id);
        }
        for row in q.fetch_all(&mut *tx).await? {
            out.push(conv(&row)?);
        }
    }
    Ok(out)
}

/// A filter value: text or integer column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    Int(i64),
}

/// Device columns `GET /devices` may filter on (upstream's DB filter keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceColumn {
    Uuid,
    Type,
    Vendor,
    Model,
    Hostname,
}

impl DeviceColumn {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "uuid" => Self::Uuid,
            "type" => Self::Type,
            "vendor" => Self::Vendor,
            "model" => Self::Model,
            "hostname" => Self::Hostname,
            _ => return None,
        })
    }
    fn column(self) -> &'static str {
        match self {
            Self::Uuid => "uuid",
            Self::Type => "type",
            Self::Vendor => "vendor",
            Self::Model => "model",
            Self::Hostname => "hostname",
        }
    }
}

/// Devices matching every `(column, value)` pair, in creation order.
pub async fn list_devices(
    tx: &mut Tx,
    filters: &[(DeviceColumn, String)],
) -> Result<Vec<Device>, StoreError> {
    let f: Vec<(&str, Value)> = filters
        .iter()
        .map(|(c, v)| (c.column(), Value::Text(v.clone())))
        .collect();
    select(tx, DEVICE_SELECT, &f, device).await
}

pub(crate) async fn device_by_uuid(tx: &mut Tx, uuid: &str) -> Result<Device, StoreError> {
    by_uuid(tx, DEVICE_SELECT, device, Kind::Device, uuid).await
}

/// Deployable columns `GET /deployables` may filter on (those upstream's DB layer
/// matches; it ignores the others it accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeployableColumn {
    Id,
    Uuid,
    Name,
    ParentId,
    RootId,
    NumAccelerators,
    DeviceId,
    DriverName,
    RpUuid,
    BitstreamId,
}

impl DeployableColumn {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "id" => Self::Id,
            "uuid" => Self::Uuid,
            "name" => Self::Name,
            "parent_id" => Self::ParentId,
            "root_id" => Self::RootId,
            "num_accelerators" => Self::NumAccelerators,
            "device_id" => Self::DeviceId,
            "driver_name" => Self::DriverName,
            "rp_uuid" => Self::RpUuid,
            "bitstream_id" => Self::BitstreamId,
            _ => return None,
        })
    }
    fn column(self) -> (&'static str, bool) {
        match self {
            Self::Id => ("id", true),
            Self::Uuid => ("uuid", false),
            Self::Name => ("name", false),
            Self::ParentId => ("parent_id", true),
            Self::RootId => ("root_id", true),
            Self::NumAccelerators => ("num_accelerators", true),
            Self::DeviceId => ("device_id", true),
            Self::DriverName => ("driver_name", false),
            Self::RpUuid => ("rp_uuid", false),
            Self::BitstreamId => ("bitstream_id", false),
        }
    }
}

/// Deployables matching every filter. An integer column given a non-integer matches
/// nothing.
pub async fn list_deployables(
    tx: &mut Tx,
    filters: &[(DeployableColumn, String)],
) -> Result<Vec<Deployable>, StoreError> {
    let mut f = Vec::new();
    for (c, v) in filters {
        let (col, int) = c.column();
        if int {
            match v.parse::<i64>() {
                Ok(i) => f.push((col, Value::Int(i))),
                Err(_) => return Ok(Vec::new()),
            }
        } else {
            f.push((col, Value::Text(v.clone())));
        }
    }
    select(tx, DEPLOYABLE_SELECT, &f, deployable).await
}

pub(crate) async fn deployables_of_device(
    tx: &mut Tx,
    device_id: i64,
) -> Result<Vec<Deployable>, StoreError> {
    select(
        tx,
        DEPLOYABLE_SELECT,
        &[("device_id", Value::Int(device_id))],
        deployable,
    )
    .await
}

/// The deployables of `device_ids` (a query per few hundred devices), by id.
pub(crate) async fn deployables_of_devices(
    tx: &mut Tx,
    device_ids: &[i64],
) -> Result<Vec<Deployable>, StoreError> {
    select_in(tx, DEPLOYABLE_SELECT, "device_id", device_ids, deployable).await
}

/// The attributes of each of `deployable_ids` (a query per few hundred deployables), in
/// creation order.
pub(crate) async fn attributes_of(
    tx: &mut Tx,
    deployable_ids: &[i64],
) -> Result<HashMap<i64, Vec<Attribute>>, StoreError> {
    let mut out: HashMap<i64, Vec<Attribute>> = HashMap::new();
    for a in select_in(
        tx,
        ATTRIBUTE_SELECT,
        "deployable_id",
        deployable_ids,
        attribute,
    )
    .await?
    {
        out.entry(a.deployable_id).or_default().push(a);
    }
    Ok(out)
}

pub async fn list_attributes(
    tx: &mut Tx,
    deployable_id: Option<i64>,
    key: Option<&str>,
) -> Result<Vec<Attribute>, StoreError> {
    let mut f = Vec::new();
    if let Some(d) = deployable_id {
        f.push(("deployable_id", Value::Int(d)));
    }
    if let Some(k) = key {
        f.push(("key", Value::Text(k.to_owned())));
    }
    select(tx, ATTRIBUTE_SELECT, &f, attribute).await
}

pub(crate) async fn attribute_by_uuid(tx: &mut Tx, uuid: &str) -> Result<Attribute, StoreError> {
    by_uuid(tx, ATTRIBUTE_SELECT, attribute, Kind::Attribute, uuid).await
}

/// Adds an attribute to an existing deployable (by its integer id, as upstream's API
/// takes it). A missing deployable is [`Refused::NotFound`] (upstream: a 500 from the
/// foreign key).
pub async fn create_attribute(
    tx: &mut Tx,
    deployable_id: i64,
    key: &str,
    value: &str,
) -> Result<Attribute, StoreError> {
    let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM deployables WHERE id = $1")
        .bind(deployable_id)
        .fetch_optional(&mut *tx)
        .await?;
    if exists.is_none() {
        return Err(Refused::NotFound(Kind::Deployable, Key::Id(deployable_id)).into());
    }
    insert_attribute(tx, deployable_id, key, value).await
}

pub(crate) async fn insert_attribute(
    tx: &mut Tx,
    deployable_id: i64,
    key: &str,
    value: &str,
) -> Result<Attribute, StoreError> {
    let uuid = new_uuid();
    sqlx::query(
        "INSERT INTO attributes (uuid, deployable_id, key, value, created_at) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&uuid)
    .bind(deployable_id)
    .bind(key)
    .bind(value)
    .bind(crate::now())
    .execute(&mut *tx)
    .await?;
    attribute_by_uuid(tx, &uuid).await
}

pub async fn delete_attribute(tx: &mut Tx, uuid: &str) -> Result<(), StoreError> {
    let n = sqlx::query("DELETE FROM attributes WHERE uuid = $1")
        .bind(uuid)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if n != 1 {
        return Err(Refused::no_uuid(Kind::Attribute, uuid));
    }
    Ok(())
}

pub async fn handles_of(tx: &mut Tx, deployable_id: i64) -> Result<Vec<AttachHandle>, StoreError> {
    select(
        tx,
        HANDLE_SELECT,
        &[("deployable_id", Value::Int(deployable_id))],
        handle,
    )
    .await
}

/// Sets a device's status and returns it; the caller reconciles Placement (the
/// report module's `apply_status`, through `Hardware::set_device_status` there).
pub async fn set_device_status(
    tx: &mut Tx,
    uuid: &str,
    status: DeviceStatus,
) -> Result<Device, StoreError> {
    let n = sqlx::query("UPDATE devices SET status = $1, updated_at = $2 WHERE uuid = $3")
        .bind(status.as_str())
        .bind(crate::now())
        .bind(uuid)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if n != 1 {
        return Err(Refused::no_uuid(Kind::Device, uuid));
    }
    device_by_uuid(tx, uuid).await
}

/// Hardware record operations ([`Store::hardware`]): devices, deployables and their
/// attributes, as the API lists and changes them.
pub struct Hardware<'s>(pub(crate) &'s Store);

impl Store {
    /// Operations on hardware records.
    pub fn hardware(&self) -> Hardware<'_> {
        Hardware(self)
    }
}

impl Hardware<'_> {
    /// Devices matching every `(column, value)` pair, in creation order.
    pub async fn devices(
        &self,
        filters: &[(DeviceColumn, String)],
    ) -> Result<Vec<Device>, StoreError> {
        let f = filters.to_vec();
        self.0
            .read(move |tx| Box::pin(async move { list_devices(tx, &f).await }))
            .await
    }

    /// One device ([`Refused::NotFound`] when none has `uuid`).
    pub async fn device(&self, uuid: &str) -> Result<Device, StoreError> {
        let uuid = uuid.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { device_by_uuid(tx, &uuid).await }))
            .await
    }

    /// The deployables matching `filters` ([`list_deployables`]), with the attributes
    /// of each (by deployable id), from one snapshot.
    pub async fn deployables(
        &self,
        filters: &[(DeployableColumn, String)],
    ) -> Result<(Vec<Deployable>, HashMap<i64, Vec<Attribute>>), StoreError> {
        let f = filters.to_vec();
        self.0
            .read(move |tx| {
                Box::pin(async move {
                    let deps = list_deployables(tx, &f).await?;
                    let ids: Vec<i64> = deps.iter().map(|d| d.id).collect();
                    let attrs = attributes_of(tx, &ids).await?;
                    Ok((deps, attrs))
                })
            })
            .await
    }

    /// Attributes, of one deployable and with one key when given, in creation order.
    pub async fn attributes(
        &self,
        deployable_id: Option<i64>,
        key: Option<&str>,
    ) -> Result<Vec<Attribute>, StoreError> {
        let key = key.map(str::to_owned);
        self.0
            .read(move |tx| {
                Box::pin(async move { list_attributes(tx, deployable_id, key.as_deref()).await })
            })
            .await
    }

    /// One attribute ([`Refused::NotFound`] when none has `uuid`).
    pub async fn attribute(&self, uuid: &str) -> Result<Attribute, StoreError> {
        let uuid = uuid.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { attribute_by_uuid(tx, &uuid).await }))
            .await
    }

    /// Adds an attribute to deployable `deployable_id` ([`create_attribute`]).
    pub async fn create_attribute(
        &self,
        deployable_id: i64,
        key: &str,
        value: &str,
    ) -> Result<Attribute, StoreError> {
        self.0
            .write_rerunning(|| {
                let (key, value) = (key.to_owned(), value.to_owned());
                move |tx| {
                    Box::pin(async move { create_attribute(tx, deployable_id, &key, &value).await })
                }
            })
            .await
    }

    /// Deletes an attribute ([`Refused::NotFound`] when none has `uuid`).
    pub async fn delete_attribute(&self, uuid: &str) -> Result<(), StoreError> {
        self.0
            .write_rerunning(|| {
                let uuid = uuid.to_owned();
                move |tx| Box::pin(async move { delete_attribute(tx, &uuid).await })
            })
            .await
    }
}
