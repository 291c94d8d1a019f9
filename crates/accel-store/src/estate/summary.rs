//! The estate at a glance, for the console's overview: devices by type and vendor,
//! how many are in use, free, unhealthy and reserved.
//!
//! One grouped scan of `devices` with two semi-joins (devices with an allocation on
//! one of their providers, devices with a reserved inventory): the answer has a row
//! per (type, vendor), however many hosts there are, and the database does the
//! counting.

use super::Estate;
use crate::{StoreError, Tx};
use sqlx::Row;

/// One (device type, vendor) row of the summary. A device counts once in `total`
/// and in each column whose condition it meets: `used` and `free` never overlap;
/// an unhealthy device is reserved too (its inventory is), unless it is still in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCount {
    /// `GPU`, `FPGA`, ...
    pub device_type: String,
    /// As the agent reports it (a PCI vendor id such as `10de`).
    pub vendor: String,
    pub total: i64,
    /// Something is allocated on one of its providers.
    pub used: i64,
    /// Nothing allocated, healthy, nothing reserved: allocatable now.
    pub free: i64,
    /// The agent reports it unhealthy, or it is no longer reported (vanished).
    pub unhealthy: i64,
    /// One of its inventories is reserved (unhealthy, maintaining, being cleaned,
    /// or reserved by an operator).
    pub reserved: i64,
}

impl Estate<'_> {
    /// Devices by type and vendor ([`DeviceCount`]), by type then vendor.
    pub async fn device_summary(&self) -> Result<Vec<DeviceCount>, StoreError> {
        self.0.read(|tx| Box::pin(devices(tx))).await
    }
}

/// [`Estate::device_summary`]'s read.
async fn devices(tx: &mut Tx) -> Result<Vec<DeviceCount>, StoreError> {
    // COUNT(CASE ..) rather than SUM: a BIGINT on every backend (MySQL's SUM is a
    // DECIMAL).
    let rows = sqlx::query(
        "SELECT v.type, v.vendor, COUNT(*), \
         COUNT(CASE WHEN u.device_id IS NOT NULL THEN 1 END), \
         COUNT(CASE WHEN u.device_id IS NULL AND r.device_id IS NULL AND v.health = 'ok' \
                    THEN 1 END), \
         COUNT(CASE WHEN v.health <> 'ok' THEN 1 END), \
         COUNT(CASE WHEN r.device_id IS NOT NULL THEN 1 END) \
         FROM devices v \
         LEFT JOIN (SELECT DISTINCT d.device_id FROM deployables d \
                    JOIN resource_providers p ON p.uuid = d.rp_uuid \
                    JOIN allocations a ON a.resource_provider_id = p.id) u \
           ON u.device_id = v.id \
         LEFT JOIN (SELECT DISTINCT d.device_id FROM deployables d \
                    JOIN resource_providers p ON p.uuid = d.rp_uuid \
                    JOIN inventories i ON i.resource_provider_id = p.id \
                    WHERE i.reserved > 0) r \
           ON r.device_id = v.id \
         GROUP BY v.type, v.vendor ORDER BY v.type, v.vendor",
    )
    .fetch_all(&mut *tx)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(DeviceCount {
                device_type: r.try_get(0)?,
                vendor: r.try_get(1)?,
                total: r.try_get(2)?,
                used: r.try_get(3)?,
                free: r.try_get(4)?,
                unhealthy: r.try_get(5)?,
                reserved: r.try_get(6)?,
            })
        })
        .collect()
}
