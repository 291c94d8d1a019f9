//! Devices cleaned between tenants (`device_cleanings`): a device provider that carries
//! [`TRAIT`] (the agent reports it for devices a `[[cleaning]]` rule matches) is wiped
//! by its host's agent after its last consumer lets go, and offered again only once
//! the agent says it is clean.
//!
//! ```text
//!   any write transaction ── deletes an allocation / unbinds or deletes an ARQ
//!        │  changes::released(tx, provider ids)
//!        ▼  before COMMIT (Store::transaction): after_release
//!   provider with TRAIT, no allocation, no ARQ left ──▶ state cleaning,
//!        inventories reserved = total, generation + 1, touched (candidate index)
//!   agent GET  /v2/agent/hosts/{host}/cleanings ──▶ take (owner = agent process)
//!   agent PUT  .../cleanings/{rp_uuid}            ──▶ finish
//!        ok ──▶ clean, reservation recomputed (only the agent's own reasons remain)
//!        failed / timed out / verify failed ──▶ clean_failed with the reason, reserved
//!   operator: retry (clean ─▶ cleaning) | release after a manual check (─▶ clean)
//! ```
//!
//! Why the reservation is written by the releasing transaction itself: a claim reads
//! usage and inventory under the provider's row lock, so it sees either the old
//! consumer's allocation or the full reservation, never a free, unclean device. Why
//! the state lives in its own table keyed by provider uuid: the uuid is stable
//! (`uuid3(name)`), so a device that vanishes and comes back uncleaned is still
//! reserved when it is reported again (the report reads `report::placement::uncleaned`). The reserve
//! of a report (maintaining, unhealthy, vanished) and the reserve of a cleaning are
//! one rule there: `reserved = total` while either holds.
//!
//! Takes are leased by the agent's process id rather than by time: one agent runs per
//! host, so a take by another process of the same host means the earlier one is gone
//! and the cleaning restarts at once (`attempt` + 1; an answer naming an older attempt
//! changes nothing). A server restart loses nothing: every state is a row.

mod operator;
pub mod withheld;

pub use operator::{release, retry};
pub use withheld::Withheld;

use super::hardware;
use super::refused::Refused;
use crate::placement::changes;
use crate::{placeholders, Store, StoreError, Tx};
use sqlx::Row;
use std::collections::BTreeSet;

/// The trait of a device provider that is cleaned on release.
pub const TRAIT: &str = "CUSTOM_ACCEL_CLEANED_ON_RELEASE";

super::column_enum!(
    /// `device_cleanings.state` (no row: `clean`).
    CleaningState {
        /// Offered as its other reasons allow.
        Clean => "clean",
        /// Reserved; the agent is asked to clean it.
        Cleaning => "cleaning",
        /// Reserved until an operator retries or releases it.
        Failed => "clean_failed",
    }
);

/// A device provider and its cleaning, as the admin API and the console show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCleaning {
    pub device_uuid: String,
    pub hostname: String,
    /// The deployable's (and its provider's) name.
    pub name: String,
    pub rp_uuid: String,
    /// Whether the provider carries [`TRAIT`].
    pub has_rule: bool,
    pub state: CleaningState,
    pub reason: Option<String>,
    pub attempt: i64,
    /// Epoch seconds the current or last cleaning began.
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub last_duration_ms: Option<i64>,
}

/// A cleaning the agent of `hostname` should carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleaningJob {
    pub rp_uuid: String,
    /// The deployable's name.
    pub name: String,
    /// The device's PCI address: its top-level deployable's name after `<host>_`.
    pub address: String,
    pub device_uuid: String,
    /// Quoted back in the answer: an answer to an older take changes nothing.
    pub attempt: i64,
}

/// How a cleaning ended, as the agent answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `Err(reason)`: failed, timed out or not verified.
    pub result: Result<(), String>,
    pub duration_ms: i64,
}

/// Notes the providers the ARQs `ids` hold (bound, binding, or by handle), before an
/// unbind or delete lets go of them. An ARQ whose bind failed names a provider it
/// never held: its deletion queues no cleaning (issue 41: cleanings are counted by
/// releases of a held device).
pub(super) async fn note_arqs_released(tx: &mut Tx, ids: &[i64]) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    let set = placeholders(1, ids.len());
    // Three joins from the ARQs to the providers' uuid index, not `rp.uuid IN (..
    // UNION ..)`: MariaDB runs a union under IN as a dependent subquery, once for
    // every provider row (50,000 at 10,000 nodes), and this statement held the
    // 10,000-node cloud to 37 boots/s there (docs/benchmarks.md).
    let sql = format!(
        "SELECT rp.id FROM extended_accelerator_requests a \
         JOIN resource_providers rp ON rp.uuid = a.device_rp_uuid WHERE a.id IN ({set}) \
         AND a.state IN ('BindStarted', 'Bound') \
         UNION SELECT rp.id FROM extended_accelerator_requests a \
         JOIN deployables d ON d.id = a.deployable_id \
         JOIN resource_providers rp ON rp.uuid = d.rp_uuid WHERE a.id IN ({set}) \
         UNION SELECT rp.id FROM extended_accelerator_requests a \
         JOIN attach_handles h ON h.id = a.attach_handle_id \
         JOIN deployables d ON d.id = h.deployable_id \
         JOIN resource_providers rp ON rp.uuid = d.rp_uuid WHERE a.id IN ({set})"
    );
    let mut q = sqlx::query_scalar::<_, i64>(&sql);
    for id in ids {
        q = q.bind(*id);
    }
    let rps = q.fetch_all(&mut *tx).await?;
    changes::released(tx, rps)
}

/// Run before every commit with the providers the transaction released: each that
/// carries [`TRAIT`] and has no consumer left becomes `cleaning`, reserved in full.
/// Answers the uuids it marked. Costs nothing when nothing was released.
pub(crate) async fn after_release(
    tx: &mut Tx,
    released: &BTreeSet<i64>,
) -> Result<Vec<String>, StoreError> {
    let ids: Vec<i64> = released.iter().copied().filter(|id| *id >= 0).collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT rp.id, rp.uuid, v.hostname, d.id FROM resource_providers rp \
         JOIN deployables d ON d.rp_uuid = rp.uuid JOIN devices v ON v.id = d.device_id \
         JOIN resource_provider_traits t ON t.resource_provider_id = rp.id \
         JOIN traits tr ON tr.id = t.trait_id \
         WHERE tr.name = $1 AND rp.id IN ({}) ORDER BY rp.id",
        placeholders(2, ids.len())
    );
    let mut q = sqlx::query(&sql).bind(TRAIT);
    for id in &ids {
        q = q.bind(*id);
    }
    let rows = q.fetch_all(&mut *tx).await?;
    let mut marked = Vec::new();
    for r in rows {
        let (rp_id, uuid, host, dep): (i64, String, String, i64) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
        // The provider's row lock first, as a claim takes it: a concurrent claim then
        // either committed before (and is a consumer seen below) or waits and sees
        // the reservation.
        sqlx::query("UPDATE resource_providers SET updated_at = updated_at WHERE id = $1")
            .bind(rp_id)
            .execute(&mut *tx)
            .await?;
        if in_use(tx, rp_id, &uuid, dep).await? {
            continue;
        }
        if state_of(tx, &uuid).await? != CleaningState::Clean {
            continue;
        }
        start(tx, &uuid, &host).await?;
        reserve(tx, rp_id).await?;
        // A partitioned GPU being cleaned offers none of its partitions either.
        crate::partitions::refresh_gpu(tx, &uuid).await?;
        super::history::record_provider(
            tx,
            &uuid,
            super::history::Kind::Cleaning,
            "released: cleaning started (reserved until clean)",
        )
        .await?;
        marked.push(uuid);
    }
    if !marked.is_empty() {
        tx.written("a cleaning")?.cleanings_queued = true;
    }
    Ok(marked)
}

/// Whether anything still holds the provider: an allocation, or an ARQ on its
/// deployable, on one of its handles, or binding to it.
async fn in_use(tx: &mut Tx, rp_id: i64, rp_uuid: &str, dep: i64) -> Result<bool, StoreError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM allocations WHERE resource_provider_id = $1) + \
         (SELECT COUNT(*) FROM extended_accelerator_requests WHERE deployable_id = $2 \
          OR attach_handle_id IN (SELECT id FROM attach_handles WHERE deployable_id = $2) \
          OR (state IN ('BindStarted', 'Bound') AND device_rp_uuid = $3))",
    )
    .bind(rp_id)
    .bind(dep)
    .bind(rp_uuid)
    .fetch_one(&mut *tx)
    .await?;
    Ok(n > 0)
}

async fn state_of(tx: &mut Tx, rp_uuid: &str) -> Result<CleaningState, StoreError> {
    let row = sqlx::query("SELECT state FROM device_cleanings WHERE rp_uuid = $1")
        .bind(rp_uuid)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(match row {
        Some(r) => super::parse_column(&r, 0)?,
        None => CleaningState::Clean,
    })
}

/// Makes the provider's cleaning `cleaning`, unowned (any agent process takes it).
async fn start(tx: &mut Tx, rp_uuid: &str, host: &str) -> Result<(), StoreError> {
    let now = crate::now();
    let n = sqlx::query(
        "UPDATE device_cleanings SET state = 'cleaning', reason = NULL, owner = NULL, \
         hostname = $1, started_at = $2, finished_at = NULL, updated_at = $2 WHERE rp_uuid = $3",
    )
    .bind(host)
    .bind(now)
    .bind(rp_uuid)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if n == 0 {
        sqlx::query(
            "INSERT INTO device_cleanings (rp_uuid, hostname, state, attempt, started_at, \
             created_at, updated_at) VALUES ($1, $2, 'cleaning', 0, $3, $3, $3)",
        )
        .bind(rp_uuid)
        .bind(host)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Reserves the provider's whole inventory; a change moves its generation on and is
/// logged for the candidate index.
async fn reserve(tx: &mut Tx, rp_id: i64) -> Result<(), StoreError> {
    let now = crate::now();
    let n = sqlx::query(
        "UPDATE inventories SET reserved = total, updated_at = $1 \
         WHERE resource_provider_id = $2 AND reserved <> total",
    )
    .bind(now)
    .bind(rp_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if n > 0 {
        sqlx::query(
            "UPDATE resource_providers SET generation = generation + 1, updated_at = $1 WHERE id = $2",
        )
        .bind(now)
        .bind(rp_id)
        .execute(&mut *tx)
        .await?;
        changes::touch(tx, &[rp_id]).await?;
    }
    Ok(())
}

/// Recomputes the reservation of the device that `rp_uuid`'s deployable belongs to
/// from everything the report knows (status, health, whether it is cleaned).
async fn lift(tx: &mut Tx, rp_uuid: &str) -> Result<(), StoreError> {
    let dev: Option<String> = sqlx::query_scalar(
        "SELECT v.uuid FROM devices v JOIN deployables d ON d.device_id = v.id WHERE d.rp_uuid = $1",
    )
    .bind(rp_uuid)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(dev) = dev {
        let device = hardware::device_by_uuid(tx, &dev).await?;
        super::report::apply_status(tx, &device).await?;
    }
    Ok(())
}

/// Whether the host has a running cleaning that agent process `owner` does not hold
/// yet (what [`take`] would hand it). A read: the agents' long polls ask it while they
/// wait, and take only when it says yes.
pub(crate) async fn waiting(tx: &mut Tx, host: &str, owner: &str) -> Result<bool, StoreError> {
    let row = sqlx::query(
        "SELECT 1 FROM device_cleanings WHERE hostname = $1 AND state = 'cleaning' \
         AND (owner IS NULL OR owner <> $2) LIMIT 1",
    )
    .bind(host)
    .bind(owner)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.is_some())
}

/// Takes the host's running cleanings for agent process `owner` (those unowned or
/// another process's) and answers every cleaning that process now owns, oldest first.
pub async fn take(tx: &mut Tx, host: &str, owner: &str) -> Result<Vec<CleaningJob>, StoreError> {
    sqlx::query(
        "UPDATE device_cleanings SET owner = $1, attempt = attempt + 1, updated_at = $2 \
         WHERE hostname = $3 AND state = 'cleaning' AND (owner IS NULL OR owner <> $1)",
    )
    .bind(owner)
    .bind(crate::now())
    .bind(host)
    .execute(&mut *tx)
    .await?;
    let rows = sqlx::query(
        "SELECT c.rp_uuid, d.name, COALESCE(p.name, d.name), v.uuid, c.attempt \
         FROM device_cleanings c JOIN deployables d ON d.rp_uuid = c.rp_uuid \
         JOIN devices v ON v.id = d.device_id LEFT JOIN deployables p ON p.id = d.parent_id \
         WHERE c.hostname = $1 AND c.state = 'cleaning' AND c.owner = $2 \
         ORDER BY c.started_at, c.rp_uuid",
    )
    .bind(host)
    .bind(owner)
    .fetch_all(&mut *tx)
    .await?;
    let prefix = format!("{host}_");
    rows.iter()
        .map(|r| {
            let root: String = r.try_get(2)?;
            Ok(CleaningJob {
                rp_uuid: r.try_get(0)?,
                name: r.try_get(1)?,
                address: root.strip_prefix(&prefix).unwrap_or(&root).to_owned(),
                device_uuid: r.try_get(3)?,
                attempt: r.try_get(4)?,
            })
        })
        .collect()
}

/// The agent's answer to take `attempt` of the cleaning of `rp_uuid` on `host`: clean
/// (the reservation is lifted as far as the report allows) or `clean_failed` with the
/// reason (still reserved). `NotFound` when that take is no longer running (an
/// operator released it, or a newer take superseded it).
pub async fn finish(
    tx: &mut Tx,
    host: &str,
    rp_uuid: &str,
    attempt: i64,
    outcome: &Outcome,
) -> Result<DeviceCleaning, StoreError> {
    let (state, reason) = match &outcome.result {
        Ok(()) => (CleaningState::Clean, None),
        Err(r) => (CleaningState::Failed, Some(r.clone())),
    };
    let now = crate::now();
    let n = sqlx::query(
        "UPDATE device_cleanings SET state = $1, reason = $2, owner = NULL, finished_at = $3, \
         last_duration_ms = $4, updated_at = $3 \
         WHERE rp_uuid = $5 AND hostname = $6 AND state = 'cleaning' AND attempt = $7",
    )
    .bind(state.as_str())
    .bind(reason)
    .bind(now)
    .bind(outcome.duration_ms)
    .bind(rp_uuid)
    .bind(host)
    .bind(attempt)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if n != 1 {
        return Err(Refused::NoRunningCleaning {
            host: host.to_owned(),
            rp_uuid: rp_uuid.to_owned(),
            attempt,
        }
        .into());
    }
    if state == CleaningState::Clean {
        lift(tx, rp_uuid).await?;
    }
    let took = format!("{:.1} s", outcome.duration_ms as f64 / 1000.0);
    let detail = match &outcome.result {
        Ok(()) => format!("clean after {took}"),
        Err(r) => format!("clean_failed after {took}: {r}"),
    };
    super::history::record_provider(tx, rp_uuid, super::history::Kind::Cleaning, &detail).await?;
    require(tx, rp_uuid).await
}

const LIST_COLUMNS: &str = "v.uuid, v.hostname, d.name, d.rp_uuid, \
     (SELECT COUNT(*) FROM resource_provider_traits t JOIN traits tr ON tr.id = t.trait_id \
      JOIN resource_providers rp ON rp.id = t.resource_provider_id \
      WHERE rp.uuid = d.rp_uuid AND tr.name = $1), \
     c.state, c.reason, c.attempt, c.started_at, c.finished_at, c.last_duration_ms \
     FROM deployables d JOIN devices v ON v.id = d.device_id \
     LEFT JOIN device_cleanings c ON c.rp_uuid = d.rp_uuid";

fn cleaning_row(r: &sqlx::any::AnyRow) -> Result<DeviceCleaning, StoreError> {
    let state: Option<String> = r.try_get(5)?;
    Ok(DeviceCleaning {
        device_uuid: r.try_get(0)?,
        hostname: r.try_get(1)?,
        name: r.try_get(2)?,
        rp_uuid: r.try_get(3)?,
        has_rule: r.try_get::<i64, _>(4)? > 0,
        state: match state {
            Some(_) => super::parse_column(r, 5)?,
            None => CleaningState::Clean,
        },
        reason: r.try_get(6)?,
        attempt: r.try_get::<Option<i64>, _>(7)?.unwrap_or(0),
        started_at: r.try_get(8)?,
        finished_at: r.try_get(9)?,
        last_duration_ms: r.try_get(10)?,
    })
}

/// The cleaning of the device provider `rp_uuid`.
pub async fn require(tx: &mut Tx, rp_uuid: &str) -> Result<DeviceCleaning, StoreError> {
    let row = sqlx::query(&format!("SELECT {LIST_COLUMNS} WHERE d.rp_uuid = $2"))
        .bind(TRAIT)
        .bind(rp_uuid)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| Refused::NoDeviceProvider {
            uuid: rp_uuid.to_owned(),
            or_device: false,
        })?;
    cleaning_row(&row)
}

/// Every device provider (of `host`, when given) with its cleaning, by host and name.
pub async fn list(tx: &mut Tx, host: Option<&str>) -> Result<Vec<DeviceCleaning>, StoreError> {
    let rows = match host {
        Some(h) => {
            sqlx::query(&format!(
                "SELECT {LIST_COLUMNS} WHERE d.rp_uuid IS NOT NULL AND v.hostname = $2 \
                 ORDER BY v.hostname, d.name"
            ))
            .bind(TRAIT)
            .bind(h)
            .fetch_all(&mut *tx)
            .await?
        }
        None => {
            sqlx::query(&format!(
                "SELECT {LIST_COLUMNS} WHERE d.rp_uuid IS NOT NULL ORDER BY v.hostname, d.name"
            ))
            .bind(TRAIT)
            .fetch_all(&mut *tx)
            .await?
        }
    };
    rows.iter().map(cleaning_row).collect()
}

/// How many device providers with a cleaning rule are in each state (the gauge).
pub async fn counts(tx: &mut Tx) -> Result<Vec<(CleaningState, i64)>, StoreError> {
    let rows = sqlx::query(
        "SELECT COALESCE(c.state, 'clean'), COUNT(*) FROM resource_providers rp \
         JOIN resource_provider_traits t ON t.resource_provider_id = rp.id \
         JOIN traits tr ON tr.id = t.trait_id \
         LEFT JOIN device_cleanings c ON c.rp_uuid = rp.uuid \
         WHERE tr.name = $1 GROUP BY COALESCE(c.state, 'clean')",
    )
    .bind(TRAIT)
    .fetch_all(&mut *tx)
    .await?;
    let mut out: Vec<(CleaningState, i64)> = [
        CleaningState::Clean,
        CleaningState::Cleaning,
        CleaningState::Failed,
    ]
    .into_iter()
    .map(|s| (s, 0))
    .collect();
    for r in rows {
        let s: CleaningState = super::parse_column(&r, 0)?;
        let n: i64 = r.try_get(1)?;
        if let Some(e) = out.iter_mut().find(|(k, _)| *k == s) {
            e.1 = n;
        }
    }
    Ok(out)
}

/// Device cleaning operations ([`Store::cleanings`]): the agents' takes and answers and
/// the operator's retry and release. Every write is rerun after a deadlock.
pub struct Cleanings<'s>(&'s Store);

impl Store {
    /// Operations on device cleanings.
    pub fn cleanings(&self) -> Cleanings<'_> {
        Cleanings(self)
    }
}

impl Cleanings<'_> {
    /// Whether `host` has a cleaning agent process `owner` does not hold yet.
    pub async fn waiting(&self, host: &str, owner: &str) -> Result<bool, StoreError> {
        let (host, owner) = (host.to_owned(), owner.to_owned());
        self.0
            .read(move |tx| Box::pin(async move { waiting(tx, &host, &owner).await }))
            .await
    }

    /// Takes `host`'s cleanings for agent process `owner` ([`take`]).
    pub async fn take(&self, host: &str, owner: &str) -> Result<Vec<CleaningJob>, StoreError> {
        self.0
            .write_rerunning(|| {
                let (host, owner) = (host.to_owned(), owner.to_owned());
                move |tx| Box::pin(async move { take(tx, &host, &owner).await })
            })
            .await
    }

    /// The agent's answer for provider `rp_uuid`'s take `attempt` ([`finish`]).
    pub async fn finish(
        &self,
        host: &str,
        rp_uuid: &str,
        attempt: i64,
        outcome: &Outcome,
    ) -> Result<DeviceCleaning, StoreError> {
        self.0
            .write_rerunning(|| {
                let (host, rp_uuid, outcome) =
                    (host.to_owned(), rp_uuid.to_owned(), outcome.clone());
                move |tx| {
                    Box::pin(async move { finish(tx, &host, &rp_uuid, attempt, &outcome).await })
                }
            })
            .await
    }

    /// Every device provider (of `host`, when given) with its cleaning.
    pub async fn list(&self, host: Option<&str>) -> Result<Vec<DeviceCleaning>, StoreError> {
        let host = host.map(str::to_owned);
        self.0
            .read(move |tx| Box::pin(async move { list(tx, host.as_deref()).await }))
            .await
    }

    /// An operator's retry of the providers `uuid` names ([`retry`]); the agents'
    /// long polls on this process are woken.
    pub async fn retry(&self, uuid: &str) -> Result<Vec<DeviceCleaning>, StoreError> {
        let rows = self
            .0
            .write_rerunning(|| {
                let uuid = uuid.to_owned();
                move |tx| Box::pin(async move { retry(tx, &uuid).await })
            })
            .await?;
        self.0.cleanings_queued();
        Ok(rows)
    }

    /// An operator's release of the providers `uuid` names ([`release`]).
    pub async fn release(&self, uuid: &str) -> Result<Vec<DeviceCleaning>, StoreError> {
        self.0
            .write_rerunning(|| {
                let uuid = uuid.to_owned();
                move |tx| Box::pin(async move { release(tx, &uuid).await })
            })
            .await
    }
}
