//! What the server's metrics and health checks read from the database, kept here
//! because this is the only crate that writes SQL.
//!
//! Two kinds of numbers: counters the store keeps in memory as it works (writes
//! rerun after a race, connection acquisitions that found no idle connection), read
//! without a query on every scrape; and gauges that only the data knows (ARQs by
//! state, Nova events and pushes waiting, providers), counted in one read snapshot
//! when `/metrics` is scraped rather than tracked by every writer, so replicas sharing
//! a database report the same picture and nothing on a hot path pays for them.

use crate::{Store, StoreError, Tx};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Row};
use std::sync::atomic::Ordering;

/// One pool's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolState {
    /// `write` (the pool writes go through; also reads on PostgreSQL) or `read` (a
    /// SQLite file's reader connections).
    pub pool: &'static str,
    pub idle: u64,
    pub in_use: u64,
}

/// A snapshot of the store's in-memory counters.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreCounters {
    pub pools: Vec<PoolState>,
    pub write_retries: u64,
    pub pool_waits: u64,
    pub pool_wait_seconds: f64,
    /// [`Store::placement_version`] answers from the SQLite file's probe, and the
    /// times the probe could not answer (read through the pool instead).
    pub version_probes: u64,
    pub version_probe_fallbacks: u64,
    /// GPU partitions the ledger refused to place (in this process, every store).
    pub partition_refusals: u64,
}

/// Partition claims the ledger refused (`partitions::settle`): process-wide, because
/// the transaction that refuses does not hold its store's counters.
static PARTITION_REFUSALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts a partition the ledger could not place.
pub(crate) fn partition_refused() {
    PARTITION_REFUSALS.fetch_add(1, Ordering::Relaxed);
}

/// Counts only the data knows, from one read snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gauges {
    /// `(state, count)` of every ARQ state present.
    pub arqs: Vec<(String, i64)>,
    /// Nova events recorded and not yet delivered or given up.
    pub nova_events_pending: i64,
    /// Hosts whose device providers changed since their last push to the external
    /// Placement.
    pub pushes_pending: i64,
    /// FPGA programming requests the agents have not answered yet.
    pub programs_pending: i64,
    pub providers: i64,
    /// `(state, count)` of the device providers cleaned on release, every state.
    pub cleanings: Vec<(String, i64)>,
}

impl Store {
    /// Takes a connection from `pool`, counting it as a wait when none was idle.
    pub(crate) async fn acquire(&self, pool: &AnyPool) -> Result<PoolConnection<Any>, sqlx::Error> {
        if pool.num_idle() > 0 {
            return pool.acquire().await;
        }
        let started = std::time::Instant::now();
        let conn = pool.acquire().await;
        let c = &self.counters;
        c.pool_waits.fetch_add(1, Ordering::Relaxed);
        c.pool_wait_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        conn
    }

    /// A connection of the writers' pool, for a statement that runs its own
    /// transaction.
    pub(crate) async fn writer(&self) -> Result<PoolConnection<Any>, sqlx::Error> {
        self.acquire(&self.pool).await
    }

    /// The in-memory counters; no query.
    pub fn counters(&self) -> StoreCounters {
        let state = |pool: &'static str, p: &AnyPool| {
            let (size, idle) = (u64::from(p.size()), p.num_idle() as u64);
            PoolState {
                pool,
                idle,
                in_use: size.saturating_sub(idle),
            }
        };
        let mut pools = vec![state("write", &self.pool)];
        if let Some(r) = &self.readers {
            pools.push(state("read", r));
        }
        let c = &self.counters;
        StoreCounters {
            pools,
            write_retries: c.write_retries.load(Ordering::Relaxed),
            pool_waits: c.pool_waits.load(Ordering::Relaxed),
            pool_wait_seconds: c.pool_wait_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            version_probes: c.version_probes.load(Ordering::Relaxed),
            version_probe_fallbacks: c.version_probe_fallbacks.load(Ordering::Relaxed),
            partition_refusals: PARTITION_REFUSALS.load(Ordering::Relaxed),
        }
    }

    /// One round trip on the write pool: can this server reach its database now?
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.acquire(&self.pool).await?;
        sqlx::query("SELECT 1").execute(&mut *conn).await?;
        Ok(())
    }

    /// Whether the database's schema is the version this binary migrates to (another
    /// server's newer or older schema, or a table dropped by hand, says no).
    pub async fn schema_current(&self) -> Result<bool, StoreError> {
        let mut conn = self.acquire(&self.pool).await?;
        let v: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM accel_schema_migrations")
            .fetch_one(&mut *conn)
            .await?;
        Ok(v == Some(crate::migrate::latest()))
    }

    /// The gauges of [`Gauges`], in one read snapshot.
    pub async fn gauges(&self) -> Result<Gauges, StoreError> {
        self.read(|tx| Box::pin(gauges(tx))).await
    }
}

async fn count(tx: &mut Tx, sql: &str) -> Result<i64, StoreError> {
    let row = sqlx::query(sql).fetch_one(&mut *tx).await?;
    Ok(row.try_get(0)?)
}

async fn gauges(tx: &mut Tx) -> Result<Gauges, StoreError> {
    let rows = sqlx::query(
        "SELECT state, CAST(COUNT(*) AS BIGINT) FROM extended_accelerator_requests GROUP BY state",
    )
    .fetch_all(&mut *tx)
    .await?;
    let arqs = rows
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<Vec<(String, i64)>, StoreError>>()?;
    let cleanings = crate::accelerator::cleaning::counts(tx)
        .await?
        .into_iter()
        .map(|(s, n)| (s.as_str().to_owned(), n))
        .collect();
    Ok(Gauges {
        arqs,
        cleanings,
        nova_events_pending: count(
            tx,
            "SELECT CAST(COUNT(*) AS BIGINT) FROM nova_events WHERE state = 'pending'",
        )
        .await?,
        pushes_pending: count(
            tx,
            "SELECT CAST(COUNT(*) AS BIGINT) FROM placement_pushes WHERE pushed_version < version",
        )
        .await?,
        programs_pending: count(
            tx,
            "SELECT CAST(COUNT(*) AS BIGINT) FROM program_requests WHERE state = 'pending'",
        )
        .await?,
        providers: count(
            tx,
            "SELECT CAST(COUNT(*) AS BIGINT) FROM resource_providers",
        )
        .await?,
    })
}
