//! The claim's side of the ledger: holders made to match the allocations on a GPU's
//! member providers, and every member's `reserved` rewritten from what the ledger can
//! still give, in the claiming transaction.

use super::rows::{self, Ledger};
use super::Reserve;
use crate::accelerator::report::uncleaned;
use crate::placement::allocations::{InvalidInventory, Refusal};
use crate::placement::{changes, inventories, providers};
use crate::{placeholders, Refusable, StoreError, Tx};
use accel_core::accelerator::{DeviceHealth, DeviceStatus};
use accel_core::partition::{Member, Want};
use sqlx::Row;
use std::collections::{BTreeMap, HashMap};

/// Locks (in id order) the ledgers any of `rp_ids` belongs to and answers them: the
/// first thing a claim does, before its providers' locks.
pub(crate) async fn lock_for(tx: &mut Tx, rp_ids: &[i64]) -> Result<Vec<i64>, StoreError> {
    let ids = rows::of_providers(tx, rp_ids).await?;
    rows::lock(tx, &ids).await?;
    Ok(ids)
}

/// Allocations on `uuids`: (consumer, provider uuid, class, used).
async fn allocations_on(
    tx: &mut Tx,
    uuids: &[&str],
) -> Result<Vec<(String, String, String, i64)>, StoreError> {
    if uuids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT a.consumer_id, rp.uuid, rc.name, a.used FROM allocations a \
         JOIN resource_providers rp ON rp.id = a.resource_provider_id \
         JOIN resource_classes rc ON rc.id = a.resource_class_id \
         WHERE rp.uuid IN ({}) ORDER BY a.id",
        placeholders(1, uuids.len())
    );
    let mut q = sqlx::query(&sql);
    for u in uuids {
        q = q.bind(u.to_string());
    }
    q.fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
        .collect::<Result<_, sqlx::Error>>()
        .map_err(StoreError::from)
}

/// Makes each ledger's holders match the allocations on its members (whole: one
/// holder per consumer with any allocation on the GPU's provider; a profile or type:
/// one per unit of its class), then rewrites the members' reservations. A new holder
/// the ledger cannot place is refused as the capacity of its provider in a claim; a
/// release is never refused (a holder missing since before, say an import's
/// allocation, is then logged and left out).
pub(crate) async fn settle(
    tx: &mut Tx,
    ledgers: &[i64],
    mode: &Settling,
) -> Refusable<(), Refusal> {
    for id in ledgers {
        let Some(mut l) = rows::load(tx, *id).await? else {
            continue;
        };
        let uuids: Vec<&str> = l.members.iter().map(|(u, _)| u.as_str()).collect();
        let mut want: BTreeMap<(String, String), i64> = BTreeMap::new();
        for (consumer, rp, rc, used) in allocations_on(tx, &uuids).await? {
            let Some(m) = l.member(&rp) else { continue };
            let units = match m {
                Member::Whole => {
                    want.insert((consumer, rp), 1);
                    continue;
                }
                _ if m.resource_class(&l.geometry).as_deref() == Some(rc.as_str()) => used,
                _ => 0,
            };
            *want.entry((consumer, rp)).or_insert(0) += units;
        }
        let mut kept = Vec::with_capacity(l.holders.len());
        for h in std::mem::take(&mut l.holders) {
            match want.get_mut(&(h.consumer.clone(), h.rp_uuid.clone())) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    kept.push(h);
                }
                _ => rows::remove_holder(tx, h.id).await?,
            }
        }
        l.holders = kept;
        // What each consumer still needs, placed together (as one claim asks them).
        let mut needs: BTreeMap<String, Vec<(String, Member)>> = BTreeMap::new();
        for ((consumer, rp), n) in want {
            if let Some(m) = l.member(&rp).cloned() {
                for _ in 0..n {
                    needs
                        .entry(consumer.clone())
                        .or_default()
                        .push((rp.clone(), m.clone()));
                }
            }
        }
        for (consumer, parts) in needs {
            let mut wants = Vec::with_capacity(parts.len());
            for (_, m) in &parts {
                wants.push(match m {
                    Member::Whole => whole_form(tx, &consumer).await?,
                    m => m.want(),
                });
            }
            match l.geometry.place_all(&l.held(), &wants) {
                Ok(placed) => {
                    for ((rp, _), holder) in parts.into_iter().zip(placed) {
                        let hid = rows::add_holder(tx, l.id, &consumer, &rp, &holder).await?;
                        l.holders.push(rows::Holder {
                            id: hid,
                            consumer: consumer.clone(),
                            rp_uuid: rp,
                            holder,
                        });
                    }
                }
                Err(why) if !mode.refuses(&consumer) => {
                    tracing::warn!(gpu = %l.rp_uuid, %consumer, reason = %why,
                        "a GPU partition allocated before its ledger cannot be placed");
                    crate::stats::partition_refused();
                }
                Err(why) => {
                    tracing::info!(gpu = %l.rp_uuid, %consumer, reason = %why,
                        "GPU partition refused: the ledger cannot place it");
                    crate::stats::partition_refused();
                    let Some((rp, m)) = parts.into_iter().next() else {
                        continue;
                    };
                    let class = m
                        .resource_class(&l.geometry)
                        .unwrap_or_else(|| "whole GPU".to_owned());
                    return Ok(Err(Refusal::InvalidInventory(InvalidInventory::Exceeds {
                        class,
                        provider: rp,
                        capacity: true,
                    })));
                }
            }
        }
        write_reserved(tx, &l).await?;
    }
    Ok(Ok(()))
}

/// What the settling transaction does: a claim may be refused for the consumers it
/// writes, a release never; a holder missing for anyone else (allocated before the
/// ledger, say by an import) is logged and left out rather than refusing a write that
/// did not ask for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settling {
    Claim(std::collections::BTreeSet<String>),
    Release,
}

impl Settling {
    fn refuses(&self, consumer: &str) -> bool {
        matches!(self, Settling::Claim(c) if c.contains(consumer))
    }
}

/// How a consumer takes a whole GPU: a pod (the device plugins' pods, DRA claims) as a container
/// device, anything else (Nova's instances) by passthrough, the VFIO form. Both take
/// everything; the agent's wiring tells them apart.
async fn whole_form(tx: &mut Tx, consumer: &str) -> Result<Want, StoreError> {
    let kind: Option<String> = sqlx::query_scalar(
        "SELECT t.name FROM consumers c JOIN consumer_types t ON t.id = c.consumer_type_id \
         WHERE c.uuid = $1",
    )
    .bind(consumer)
    .fetch_optional(&mut *tx)
    .await?;
    use crate::accelerator::kubernetes::{CLAIM_CONSUMER_TYPE, CONSUMER_TYPE};
    Ok(match kind.as_deref() {
        Some(CONSUMER_TYPE | CLAIM_CONSUMER_TYPE) => Want::Whole,
        _ => Want::Vfio,
    })
}

/// Whether the GPU is out of service (maintaining, unhealthy, vanished) or being
/// cleaned: then every member is reserved in full.
async fn withheld(tx: &mut Tx, gpu: &str) -> Result<bool, StoreError> {
    let row = sqlx::query(
        "SELECT v.status, v.health FROM devices v JOIN deployables d ON d.device_id = v.id \
         WHERE d.rp_uuid = $1",
    )
    .bind(gpu)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(r) = row {
        let status: DeviceStatus = crate::accelerator::parse_column(&r, 0)?;
        let health: DeviceHealth = crate::accelerator::parse_column(&r, 1)?;
        if status == DeviceStatus::Maintaining || health != DeviceHealth::Ok {
            return Ok(true);
        }
    }
    Ok(!uncleaned(tx, &[gpu]).await?.is_empty())
}

/// For a provider that is a member of a GPU's ledger, whether the GPU is out of
/// service (maintaining, unhealthy, vanished) or being cleaned; `None` for any other
/// provider. A member's `reserved` is the ledger's arithmetic (a whole-GPU holder
/// reserves the GPU's other inventories in full), so it says nothing of this.
pub(crate) async fn member_withheld(
    tx: &mut Tx,
    rp_uuid: &str,
) -> Result<Option<bool>, StoreError> {
    let gpu: Option<String> = sqlx::query_scalar(
        "SELECT l.rp_uuid FROM gpu_ledger_members m JOIN gpu_ledgers l ON l.id = m.ledger_id \
         WHERE m.rp_uuid = $1",
    )
    .bind(rp_uuid)
    .fetch_optional(&mut *tx)
    .await?;
    match gpu {
        Some(gpu) => Ok(Some(withheld(tx, &gpu).await?)),
        None => Ok(None),
    }
}

/// Each member provider's reservation as the ledger sees it (by provider uuid): the
/// whole GPU's nothing while it could be given, all but its use while a holder has
/// it, all otherwise; a profile's or type's what leaves exactly the instances that can
/// still be created. All in full while the GPU is being cleaned (the report adds its
/// own reasons: maintenance, health).
pub(crate) async fn reserves(
    tx: &mut Tx,
    l: &Ledger,
) -> Result<HashMap<String, Reserve>, StoreError> {
    let cleaning = !uncleaned(tx, &[l.rp_uuid.as_str()]).await?.is_empty();
    let held = l.held();
    let mut out = HashMap::new();
    for (uuid, m) in &l.members {
        let cap = l.geometry.capacity(&held, m);
        let r = match m {
            _ if cleaning => Reserve::Full,
            Member::Whole if cap.held > 0 => Reserve::AllButUsed,
            Member::Whole if cap.free > 0 => Reserve::Nothing,
            Member::Whole => Reserve::Full,
            _ => Reserve::Units(cap.reserved()),
        };
        out.insert(uuid.clone(), r);
    }
    Ok(out)
}

/// Writes every member provider's reservation ([`reserves`], in full while the GPU is
/// withheld); a provider that changed moves its generation on and is touched for the
/// candidate index.
async fn write_reserved(tx: &mut Tx, l: &Ledger) -> Result<(), StoreError> {
    let off = withheld(tx, &l.rp_uuid).await?;
    let reserves = reserves(tx, l).await?;
    let now = crate::now();
    for (uuid, _) in &l.members {
        let Some(rp) = providers::get(tx, uuid).await? else {
            continue;
        };
        let r = if off { Reserve::Full } else { reserves[uuid] };
        let mut changed = false;
        for inv in inventories::list(tx, rp.id).await? {
            let used = if r == Reserve::AllButUsed {
                used_of(tx, rp.id, inv.rc_id).await?
            } else {
                0
            };
            let want = r.amount(inv.limits.total, used);
            if want != inv.limits.reserved {
                sqlx::query(
                    "UPDATE inventories SET reserved = $1, updated_at = $2 \
                     WHERE resource_provider_id = $3 AND resource_class_id = $4",
                )
                .bind(want)
                .bind(now)
                .bind(rp.id)
                .bind(inv.rc_id)
                .execute(&mut *tx)
                .await?;
                changed = true;
            }
        }
        if changed {
            sqlx::query(
                "UPDATE resource_providers SET generation = generation + 1, updated_at = $1 \
                 WHERE id = $2",
            )
            .bind(now)
            .bind(rp.id)
            .execute(&mut *tx)
            .await?;
            changes::touch(tx, &[rp.id]).await?;
        }
    }
    Ok(())
}

/// What is allocated of class `rc_id` on provider `rp_id`.
pub(crate) async fn used_of(tx: &mut Tx, rp_id: i64, rc_id: i64) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT CAST(COALESCE(SUM(used), 0) AS BIGINT) FROM allocations \
         WHERE resource_provider_id = $1 AND resource_class_id = $2",
    )
    .bind(rp_id)
    .bind(rc_id)
    .fetch_one(&mut *tx)
    .await?)
}

/// After the GPU whose own provider is `rp_uuid` started a cleaning (or otherwise
/// stopped being offered): its members' reservations rewritten. Nothing for a GPU
/// without a ledger.
pub(crate) async fn refresh_gpu(tx: &mut Tx, rp_uuid: &str) -> Result<(), StoreError> {
    let Some(l) = rows::by_gpu(tx, rp_uuid).await? else {
        return Ok(());
    };
    rows::lock(tx, &[l.id]).await?;
    write_reserved(tx, &l).await
}

/// [`reserves`] of every ledger one of `rp_uuids` is a member of, merged (the report
/// writes them with its own reasons added).
pub(crate) async fn reserves_of(
    tx: &mut Tx,
    rp_uuids: &[&str],
) -> Result<HashMap<String, Reserve>, StoreError> {
    let mut ids = Vec::new();
    for chunk in rp_uuids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT DISTINCT ledger_id FROM gpu_ledger_members WHERE rp_uuid IN ({})",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for u in chunk {
            q = q.bind(u.to_string());
        }
        ids.extend(q.fetch_all(&mut *tx).await?);
    }
    ids.sort_unstable();
    ids.dedup();
    let mut out = HashMap::new();
    for id in ids {
        if let Some(l) = rows::load(tx, id).await? {
            out.extend(reserves(tx, &l).await?);
        }
    }
    Ok(out)
}
