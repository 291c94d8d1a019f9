//! Each device's recent history, for the console's device page: the reports that
//! changed it, its health changes, binds to it and its cleanings between tenants.
//!
//! A row is written in the transaction of the change it records, by the store
//! function that makes the change (the report's diff, the bind's resolution, the
//! cleaning's start and finish), so the history never names a change that rolled
//! back. Each insert prunes that device's rows beyond the newest [`KEEP`]: the table
//! stays bounded by devices × `KEEP` however long the estate runs, and a device's
//! rows go when a report removes the device ([`forget`]). Rows name the device by
//! uuid, and the provider an event is about where there is one.

use crate::{placeholders, StoreError, Tx};
use sqlx::Row;

/// Rows kept per device.
pub const KEEP: i64 = 100;

/// What happened to a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A report added the device or changed what it is (type, vendor, model,
    /// deployables).
    Report,
    /// Its health changed (`ok`, `unhealthy`, `vanished`), with the reason.
    Health,
    /// An ARQ was bound to one of its providers.
    Bind,
    /// A bind to one of its providers failed or was refused.
    BindFailed,
    /// A cleaning between tenants started or ended.
    Cleaning,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Report => "report",
            Kind::Health => "health",
            Kind::Bind => "bind",
            Kind::BindFailed => "bind_failed",
            Kind::Cleaning => "cleaning",
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub device_uuid: String,
    pub hostname: String,
    /// The provider the event is about (a bind's device provider, a cleaned
    /// provider); `None` for the whole device.
    pub rp_uuid: Option<String>,
    /// [`Kind::as_str`].
    pub kind: String,
    pub detail: String,
    /// Epoch seconds.
    pub at: i64,
}

/// Records `kind` for the device `device_id` (a `devices.id`).
pub async fn record_device(
    tx: &mut Tx,
    device_id: i64,
    rp_uuid: Option<&str>,
    kind: Kind,
    detail: &str,
) -> Result<(), StoreError> {
    let row = sqlx::query("SELECT uuid, hostname FROM devices WHERE id = $1")
        .bind(device_id)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(row) = row else { return Ok(()) };
    let (uuid, host): (String, String) = (row.try_get(0)?, row.try_get(1)?);
    insert(tx, &uuid, &host, rp_uuid, kind, detail).await
}

/// Records `kind` for the device behind the provider `rp_uuid` (a deployable's); a
/// provider no device models (a compute node) records nothing.
pub async fn record_provider(
    tx: &mut Tx,
    rp_uuid: &str,
    kind: Kind,
    detail: &str,
) -> Result<(), StoreError> {
    let row = sqlx::query(
        "SELECT v.uuid, v.hostname FROM deployables d JOIN devices v ON v.id = d.device_id \
         WHERE d.rp_uuid = $1",
    )
    .bind(rp_uuid)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else { return Ok(()) };
    let (uuid, host): (String, String) = (row.try_get(0)?, row.try_get(1)?);
    insert(tx, &uuid, &host, Some(rp_uuid), kind, detail).await
}

async fn insert(
    tx: &mut Tx,
    device_uuid: &str,
    host: &str,
    rp_uuid: Option<&str>,
    kind: Kind,
    detail: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO device_events (device_uuid, hostname, rp_uuid, kind, detail, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(device_uuid)
    .bind(host)
    .bind(rp_uuid)
    .bind(kind.as_str())
    .bind(detail)
    .bind(crate::now())
    .execute(&mut *tx)
    .await?;
    // The newest KEEP stay: the id of the oldest of them bounds the delete (two
    // indexed reads; MySQL refuses a DELETE whose subquery reads its own table).
    let cutoff: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT id FROM device_events WHERE device_uuid = $1 ORDER BY id DESC LIMIT 1 OFFSET {}",
        KEEP - 1
    ))
    .bind(device_uuid)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(cutoff) = cutoff {
        sqlx::query("DELETE FROM device_events WHERE device_uuid = $1 AND id < $2")
            .bind(device_uuid)
            .bind(cutoff)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// Removes the device's history (the device itself is being removed).
pub async fn forget(tx: &mut Tx, device_uuid: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM device_events WHERE device_uuid = $1")
        .bind(device_uuid)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// The history of the devices `device_uuids`, newest first, at most `limit` rows in
/// all.
pub async fn of_devices(
    tx: &mut Tx,
    device_uuids: &[String],
    limit: i64,
) -> Result<Vec<Event>, StoreError> {
    if device_uuids.is_empty() {
        return Ok(Vec::new());
    }
    // A page's devices: a host's tree, never the estate.
    let sql = format!(
        "SELECT device_uuid, hostname, rp_uuid, kind, detail, created_at FROM device_events \
         WHERE device_uuid IN ({}) ORDER BY id DESC LIMIT {}",
        placeholders(1, device_uuids.len()),
        limit.max(0)
    );
    let mut q = sqlx::query(&sql);
    for u in device_uuids {
        q = q.bind(u.as_str());
    }
    let mut out = Vec::new();
    for r in q.fetch_all(&mut *tx).await? {
        out.push(Event {
            device_uuid: r.try_get(0)?,
            hostname: r.try_get(1)?,
            rp_uuid: r.try_get(2)?,
            kind: r.try_get(3)?,
            detail: r.try_get(4)?,
            at: r.try_get(5)?,
        });
    }
    Ok(out)
}
