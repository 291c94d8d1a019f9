//! The ledger's rows: `gpu_ledgers` (a GPU's geometry, under its own provider's uuid),
//! `gpu_ledger_members` (which provider takes the GPU which way) and
//! `gpu_ledger_holders` (who holds what, where). Read and written only inside the
//! transactions of [`super`].

use crate::{placeholders, StoreError, Tx};
use accel_core::partition::{Consumer, Geometry, Member};
use sqlx::Row;

/// One GPU's ledger as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Ledger {
    pub id: i64,
    /// The GPU's own provider (the whole and VFIO forms).
    pub rp_uuid: String,
    pub hostname: String,
    pub geometry: Geometry,
    pub generation: i64,
    /// Each member's provider uuid.
    pub members: Vec<(String, Member)>,
    pub holders: Vec<Holder>,
}

/// Who holds part of a GPU, through which provider, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub id: i64,
    /// The Placement consumer (an instance, a pod's claim uid).
    pub consumer: String,
    pub rp_uuid: String,
    pub holder: Consumer,
}

impl Ledger {
    /// What every holder holds, for the pure ledger's questions.
    pub fn held(&self) -> Vec<Consumer> {
        self.holders.iter().map(|h| h.holder.clone()).collect()
    }

    pub fn member(&self, rp_uuid: &str) -> Option<&Member> {
        self.members
            .iter()
            .find(|(u, _)| u == rp_uuid)
            .map(|(_, m)| m)
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(format!("ledger JSON: {e}")))
}

fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Invalid(format!("stored ledger: {e}")))
}

/// The ledgers whose members include a provider of `rp_ids`, in id order.
pub(crate) async fn of_providers(tx: &mut Tx, rp_ids: &[i64]) -> Result<Vec<i64>, StoreError> {
    let mut out = Vec::new();
    for chunk in rp_ids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT DISTINCT m.ledger_id FROM gpu_ledger_members m \
             JOIN resource_providers rp ON rp.uuid = m.rp_uuid WHERE rp.id IN ({})",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for id in chunk {
            q = q.bind(*id);
        }
        out.extend(q.fetch_all(&mut *tx).await?);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Takes the ledgers' row locks, in id order, by moving each generation on: every
/// writer of a GPU's holders or of its providers' reservations takes this lock
/// before any provider's, so they queue here instead of deadlocking on providers.
/// A ledger gone meanwhile is a lost race (rerun).
pub(crate) async fn lock(tx: &mut Tx, ids: &[i64]) -> Result<(), StoreError> {
    let now = crate::now();
    for id in ids {
        let n = sqlx::query(
            "UPDATE gpu_ledgers SET generation = generation + 1, updated_at = $1 WHERE id = $2",
        )
        .bind(now)
        .bind(*id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n != 1 {
            return Err(StoreError::provider_race());
        }
    }
    Ok(())
}

/// Which of `rp_uuids` are a ledger's MIG-profile or vGPU-type members (not a GPU's
/// own provider).
pub(crate) async fn partition_members(
    tx: &mut Tx,
    rp_uuids: &[&str],
) -> Result<std::collections::BTreeSet<String>, StoreError> {
    let mut out = std::collections::BTreeSet::new();
    for chunk in rp_uuids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT rp_uuid, member FROM gpu_ledger_members WHERE rp_uuid IN ({})",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for u in chunk {
            q = q.bind(u.to_string());
        }
        for r in q.fetch_all(&mut *tx).await? {
            let key: String = r.try_get(1)?;
            if Member::from_key(&key) != Some(Member::Whole) {
                out.insert(r.try_get(0)?);
            }
        }
    }
    Ok(out)
}

const LEDGER_COLUMNS: &str = "id, rp_uuid, hostname, geometry, generation";

async fn complete(tx: &mut Tx, r: &sqlx::any::AnyRow) -> Result<Ledger, StoreError> {
    let mut all = complete_all(tx, std::slice::from_ref(r)).await?;
    Ok(all.remove(0))
}

/// The ledgers of `rows` (in their order) with their members and holders, read in a
/// few batched statements rather than two per ledger (a candidate answer may ask a
/// hundred GPUs' ledgers).
async fn complete_all(tx: &mut Tx, rows: &[sqlx::any::AnyRow]) -> Result<Vec<Ledger>, StoreError> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(Ledger {
            id: r.try_get(0)?,
            rp_uuid: r.try_get(1)?,
            hostname: r.try_get(2)?,
            geometry: parse(&r.try_get::<String, _>(3)?)?,
            generation: r.try_get(4)?,
            members: Vec::new(),
            holders: Vec::new(),
        });
    }
    let at: std::collections::HashMap<i64, usize> =
        out.iter().enumerate().map(|(i, l)| (l.id, i)).collect();
    let ids: Vec<i64> = out.iter().map(|l| l.id).collect();
    for chunk in ids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT ledger_id, rp_uuid, member FROM gpu_ledger_members WHERE ledger_id IN ({})",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for id in chunk {
            q = q.bind(*id);
        }
        for m in q.fetch_all(&mut *tx).await? {
            let key: String = m.try_get(2)?;
            let member = Member::from_key(&key)
                .ok_or_else(|| StoreError::Invalid(format!("stored ledger member {key:?}")))?;
            out[at[&m.try_get::<i64, _>(0)?]]
                .members
                .push((m.try_get(1)?, member));
        }
        let sql = format!(
            "SELECT ledger_id, id, consumer, rp_uuid, holder FROM gpu_ledger_holders \
             WHERE ledger_id IN ({}) ORDER BY id",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for id in chunk {
            q = q.bind(*id);
        }
        for h in q.fetch_all(&mut *tx).await? {
            out[at[&h.try_get::<i64, _>(0)?]].holders.push(Holder {
                id: h.try_get(1)?,
                consumer: h.try_get(2)?,
                rp_uuid: h.try_get(3)?,
                holder: parse(&h.try_get::<String, _>(4)?)?,
            });
        }
    }
    for l in &mut out {
        l.members.sort_by(|a, b| a.1.cmp(&b.1));
    }
    Ok(out)
}

pub(crate) async fn load(tx: &mut Tx, id: i64) -> Result<Option<Ledger>, StoreError> {
    let sql = format!("SELECT {LEDGER_COLUMNS} FROM gpu_ledgers WHERE id = $1");
    match sqlx::query(&sql).bind(id).fetch_optional(&mut *tx).await? {
        Some(r) => Ok(Some(complete(tx, &r).await?)),
        None => Ok(None),
    }
}

/// The ledger of the GPU whose own provider is `rp_uuid`.
pub(crate) async fn by_gpu(tx: &mut Tx, rp_uuid: &str) -> Result<Option<Ledger>, StoreError> {
    let sql = format!("SELECT {LEDGER_COLUMNS} FROM gpu_ledgers WHERE rp_uuid = $1");
    match sqlx::query(&sql)
        .bind(rp_uuid)
        .fetch_optional(&mut *tx)
        .await?
    {
        Some(r) => Ok(Some(complete(tx, &r).await?)),
        None => Ok(None),
    }
}

/// Every ledger of `host`'s GPUs, in id order.
pub(crate) async fn of_host(tx: &mut Tx, host: &str) -> Result<Vec<Ledger>, StoreError> {
    let sql = format!("SELECT {LEDGER_COLUMNS} FROM gpu_ledgers WHERE hostname = $1 ORDER BY id");
    let rows = sqlx::query(&sql).bind(host).fetch_all(&mut *tx).await?;
    complete_all(tx, &rows).await
}

/// The ledgers of the GPUs whose own providers are `rp_uuids` (those that have one).
pub(crate) async fn by_gpus(tx: &mut Tx, rp_uuids: &[&str]) -> Result<Vec<Ledger>, StoreError> {
    let mut out = Vec::new();
    for chunk in rp_uuids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT {LEDGER_COLUMNS} FROM gpu_ledgers WHERE rp_uuid IN ({})",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for u in chunk {
            q = q.bind(u.to_string());
        }
        let rows = q.fetch_all(&mut *tx).await?;
        out.extend(complete_all(tx, &rows).await?);
    }
    Ok(out)
}

/// Creates the GPU's ledger, or replaces its geometry and members; holders stay.
pub(crate) async fn upsert(
    tx: &mut Tx,
    rp_uuid: &str,
    hostname: &str,
    geometry: &Geometry,
    members: &[(String, Member)],
) -> Result<i64, StoreError> {
    let text = json(geometry)?;
    let now = crate::now();
    let existing: Option<(i64, String)> =
        sqlx::query("SELECT id, geometry FROM gpu_ledgers WHERE rp_uuid = $1")
            .bind(rp_uuid)
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| Ok::<_, sqlx::Error>((r.try_get(0)?, r.try_get(1)?)))
            .transpose()?;
    let id = match existing {
        Some((id, old)) => {
            lock(tx, &[id]).await?;
            if old != text {
                sqlx::query("UPDATE gpu_ledgers SET geometry = $1, hostname = $2 WHERE id = $3")
                    .bind(&text)
                    .bind(hostname)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            id
        }
        None => {
            sqlx::query_scalar(
                "INSERT INTO gpu_ledgers (rp_uuid, hostname, geometry, generation, created_at) \
                 VALUES ($1, $2, $3, 0, $4) RETURNING id",
            )
            .bind(rp_uuid)
            .bind(hostname)
            .bind(&text)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?
        }
    };
    let have: Vec<(String, String)> =
        sqlx::query("SELECT rp_uuid, member FROM gpu_ledger_members WHERE ledger_id = $1")
            .bind(id)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, sqlx::Error>>()?;
    let want: Vec<(String, String)> = members.iter().map(|(u, m)| (u.clone(), m.key())).collect();
    for (u, k) in &have {
        if !want.iter().any(|(wu, wk)| wu == u && wk == k) {
            sqlx::query("DELETE FROM gpu_ledger_members WHERE rp_uuid = $1")
                .bind(u)
                .execute(&mut *tx)
                .await?;
        }
    }
    for (u, k) in &want {
        if !have.iter().any(|(hu, hk)| hu == u && hk == k) {
            sqlx::query(
                "INSERT INTO gpu_ledger_members (rp_uuid, ledger_id, member) VALUES ($1, $2, $3)",
            )
            .bind(u)
            .bind(id)
            .bind(k)
            .execute(&mut *tx)
            .await?;
        }
    }
    Ok(id)
}

/// Removes a ledger with its members (callers remove only ledgers nobody holds).
pub(crate) async fn remove(tx: &mut Tx, id: i64) -> Result<(), StoreError> {
    for sql in [
        "DELETE FROM gpu_ledger_holders WHERE ledger_id = $1",
        "DELETE FROM gpu_ledger_members WHERE ledger_id = $1",
        "DELETE FROM gpu_ledgers WHERE id = $1",
    ] {
        sqlx::query(sql).bind(id).execute(&mut *tx).await?;
    }
    Ok(())
}

pub(crate) async fn add_holder(
    tx: &mut Tx,
    ledger: i64,
    consumer: &str,
    rp_uuid: &str,
    holder: &Consumer,
) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO gpu_ledger_holders (ledger_id, consumer, rp_uuid, holder, created_at) \
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(ledger)
    .bind(consumer)
    .bind(rp_uuid)
    .bind(json(holder)?)
    .bind(crate::now())
    .fetch_one(&mut *tx)
    .await?)
}

pub(crate) async fn remove_holder(tx: &mut Tx, id: i64) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM gpu_ledger_holders WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}
