//! The operator's two actions on a device's cleaning (`accel device clean|release`,
//! `POST /v2/device_cleanings/{uuid}/clean|release`), each refused where it could hurt
//! (issue 41 item 4):
//!
//! ```text
//! clean   ── a consumer holds a provider ──▶ ProviderInUse   (it would wipe a tenant's device)
//!         ── a provider has no rule      ──▶ NoCleaningRule  (nothing would clean it: it
//!                                                              would stay out of service)
//!         ── otherwise ──▶ cleaning, reserved in full, asked of the agent anew
//! release ── a consumer holds a provider ──▶ ReleasingInUse  (nothing is withheld; a
//!                                                              release now would mark it
//!                                                              clean under its tenant)
//!         ── otherwise ──▶ clean, offered again as far as the report allows
//! ```
//!
//! Both look at every provider the uuid names before changing any, under the
//! providers' row locks (as a claim takes them), so a refusal changes nothing.

use super::{in_use, lift, require, reserve, start, DeviceCleaning, TRAIT};
use crate::accelerator::refused::Refused;
use crate::{StoreError, Tx};
use sqlx::Row;

/// A device provider an operator's action names.
struct Named {
    rp_id: i64,
    rp_uuid: String,
    host: String,
    deployable: i64,
    has_rule: bool,
}

/// The device providers `uuid` names: a device's uuid (all of its providers) or one
/// provider's, each locked. [`Refused::NoDeviceProvider`] when it names none.
async fn providers_named(tx: &mut Tx, uuid: &str) -> Result<Vec<Named>, StoreError> {
    let rows = sqlx::query(
        "SELECT rp.id, rp.uuid, v.hostname, d.id, \
         (SELECT COUNT(*) FROM resource_provider_traits t JOIN traits tr ON tr.id = t.trait_id \
          WHERE t.resource_provider_id = rp.id AND tr.name = $2) \
         FROM deployables d JOIN devices v ON v.id = d.device_id \
         JOIN resource_providers rp ON rp.uuid = d.rp_uuid \
         WHERE v.uuid = $1 OR d.rp_uuid = $1 ORDER BY rp.id",
    )
    .bind(uuid)
    .bind(TRAIT)
    .fetch_all(&mut *tx)
    .await?;
    if rows.is_empty() {
        return Err(Refused::NoDeviceProvider {
            uuid: uuid.to_owned(),
            or_device: true,
        }
        .into());
    }
    let named = rows
        .iter()
        .map(|r| {
            Ok(Named {
                rp_id: r.try_get(0)?,
                rp_uuid: r.try_get(1)?,
                host: r.try_get(2)?,
                deployable: r.try_get(3)?,
                has_rule: r.try_get::<i64, _>(4)? > 0,
            })
        })
        .collect::<Result<Vec<Named>, StoreError>>()?;
    // In id order, as a claim takes them: a consumer racing in either committed
    // before (and is seen by `in_use`) or waits for this transaction.
    for n in &named {
        sqlx::query("UPDATE resource_providers SET updated_at = updated_at WHERE id = $1")
            .bind(n.rp_id)
            .execute(&mut *tx)
            .await?;
    }
    Ok(named)
}

/// An operator's retry: the providers `uuid` names are cleaned again (reserved, asked
/// of the agent anew), whatever their state. [`Refused::ProviderInUse`] while a
/// consumer holds one; [`Refused::NoCleaningRule`] when one carries no rule.
pub async fn retry(tx: &mut Tx, uuid: &str) -> Result<Vec<DeviceCleaning>, StoreError> {
    let named = providers_named(tx, uuid).await?;
    for n in &named {
        if in_use(tx, n.rp_id, &n.rp_uuid, n.deployable).await? {
            return Err(Refused::ProviderInUse {
                rp_uuid: n.rp_uuid.clone(),
            }
            .into());
        }
        if !n.has_rule {
            return Err(Refused::NoCleaningRule {
                rp_uuid: n.rp_uuid.clone(),
            }
            .into());
        }
    }
    let mut out = Vec::new();
    for n in named {
        start(tx, &n.rp_uuid, &n.host).await?;
        reserve(tx, n.rp_id).await?;
        out.push(require(tx, &n.rp_uuid).await?);
    }
    Ok(out)
}

/// An operator's release after a manual check: the providers `uuid` names become
/// `clean` and are offered again as far as the report allows.
/// [`Refused::ReleasingInUse`] while a consumer holds one.
pub async fn release(tx: &mut Tx, uuid: &str) -> Result<Vec<DeviceCleaning>, StoreError> {
    let named = providers_named(tx, uuid).await?;
    for n in &named {
        if in_use(tx, n.rp_id, &n.rp_uuid, n.deployable).await? {
            return Err(Refused::ReleasingInUse {
                rp_uuid: n.rp_uuid.clone(),
            }
            .into());
        }
    }
    let mut out = Vec::new();
    let now = crate::now();
    for n in named {
        sqlx::query(
            "UPDATE device_cleanings SET state = 'clean', owner = NULL, finished_at = $1, \
             updated_at = $1 WHERE rp_uuid = $2 AND state <> 'clean'",
        )
        .bind(now)
        .bind(&n.rp_uuid)
        .execute(&mut *tx)
        .await?;
        lift(tx, &n.rp_uuid).await?;
        out.push(require(tx, &n.rp_uuid).await?);
    }
    Ok(out)
}
