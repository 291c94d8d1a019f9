//! Persistence for accel: the only crate that knows SQL.
//!
//! One concrete [`Store`] over `sqlx::Any`, so the same queries run on SQLite (the
//! embedded default), PostgreSQL and MariaDB/MySQL (the replicated deployments).
//! Queries use `$N` placeholders, which SQLite and PostgreSQL accept, and only
//! portable SQL: `ON CONFLICT DO NOTHING`, `RETURNING`, `CAST(SUM(..) AS BIGINT)`
//! (PostgreSQL would otherwise return NUMERIC). On MariaDB/MySQL the transaction
//! handle ([`Tx`], `dialect.rs`) rewrites each statement into MySQL's spelling.
//!
//! Invariants kept here, not in callers:
//! - every multi-statement write runs in one transaction ([`Store::write`]);
//! - provider and consumer generations change only through compare-and-swap
//!   (`UPDATE .. SET generation = g + 1 WHERE id = .. AND generation = g`), so two
//!   servers on one PostgreSQL database never both win a race;
//! - SQLite write transactions start with `BEGIN IMMEDIATE` so a reader never has to
//!   upgrade its lock (which SQLite refuses with SQLITE_BUSY instead of waiting).
//!
//! A write either commits, fails ([`StoreError`]) or is refused: the data says no and
//! the caller words why ([`Store::write_or_refuse`], [`Refusable`]). A lost
//! provider-generation race is [`Conflict::ProviderRace`], the one conflict worth
//! rerunning a transaction for ([`Store::write_retrying`]).
//!
//! Rows are mapped by hand (`try_get` by position or name) rather than with
//! `#[derive(sqlx::FromRow)]`: the workspace builds sqlx without its `derive` feature,
//! whose proc-macro crate turns on sqlx-core's `offline` feature and so rebuilds sqlx
//! and both drivers for every crate. Typed text columns (device and job states) are
//! decoded at this edge with `FromStr` (`accelerator::parse_column`).

pub mod accelerator;
mod dialect;
mod error;
pub mod estate;
pub mod import;
pub mod maintenance;
mod migrate;
pub mod partitions;
pub mod placement;
pub mod refused;
mod sqlite_probe;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(any(test, feature = "testing"))]
pub use dialect::Tx;
#[cfg(not(any(test, feature = "testing")))]
pub(crate) use dialect::Tx;
pub use dialect::{now, Backend};
pub use error::{db_cause, Conflict, Refusable, StoreError};
pub use migrate::Schema;
pub use refused::Refused;

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, Connection, Executor};

pub use sqlx::Row;

/// Handle on the database. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    /// Writes (and, on PostgreSQL and in-memory SQLite, reads).
    pool: AnyPool,
    /// SQLite files only: reader connections. In WAL mode readers run beside the one
    /// writer and see the last committed state, so reads do not queue behind writes.
    readers: Option<AnyPool>,
    backend: Backend,
    /// Counters the server's metrics read ([`stats`]).
    counters: std::sync::Arc<dialect::Counters>,
    /// Bumped after each commit that queued a device cleaning (and by
    /// [`Store::cleanings_queued`]): the agents' long polls for cleanings wait on it,
    /// so a release on this process reaches its agent at once.
    cleanings: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    /// SQLite files only: the index's freshness check without a thread hand-off
    /// ([`Store::placement_version`]).
    version_probe:
        Option<std::sync::Arc<sqlite_probe::VersionProbe<{ placement::changes::SHARDS }>>>,
}

/// How long a request waits for a PostgreSQL connection: past it the database counts
/// as unavailable ([`StoreError::is_unavailable`]) and the APIs answer 503 instead of
/// holding the client.
pub const PG_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs of a write [`Store::write_rerunning`] reruns after a deadlock: the first and
/// five more, as `oslo.db`'s `wrap_db_retry(max_retries=5, retry_on_deadlock=True)`.
pub const DEADLOCK_ATTEMPTS: u32 = 6;

/// Reader connections on a SQLite file (the writer is separate).
const SQLITE_READERS: u32 = 4;

/// The SQLite writer's connection settings: foreign keys enforced, WAL so readers do
/// not block it, and a wait instead of `SQLITE_BUSY` when another process writes.
const SQLITE_WRITER_PRAGMAS: &[&str] = &[
    "PRAGMA foreign_keys = ON",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA busy_timeout = 10000",
];

/// The SQLite readers' connection settings: the same wait, and no writes.
const SQLITE_READER_PRAGMAS: &[&str] = &["PRAGMA busy_timeout = 10000", "PRAGMA query_only = ON"];

/// The MariaDB/MySQL session settings. Writes run at READ COMMITTED, as on
/// PostgreSQL: each statement of a write sees what committed before it, so the
/// claim's capacity re-check after winning a provider's generation compare-and-swap
/// counts the allocations of the transaction it waited for (InnoDB's default
/// REPEATABLE READ would read them from the snapshot its first read took), and
/// inserts take no gap locks, which under REPEATABLE READ deadlock concurrent claims
/// on the same providers. Reads ask for REPEATABLE READ per transaction
/// ([`Store::read`]). Strict mode makes an out-of-range value an error, not a
/// silently clipped one.
const MYSQL_SESSION: &[&str] = &[
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET SESSION sql_mode = CONCAT(@@sql_mode, ',STRICT_ALL_TABLES')",
];

/// Runs `list` on `conn` in order, as text: MySQL does not prepare every statement
/// (transaction control, `SET TRANSACTION`), and these take no arguments.
async fn text(conn: &mut AnyConnection, list: &[&str]) -> Result<(), sqlx::Error> {
    for s in list {
        conn.execute(*s).await?;
    }
    Ok(())
}

/// Runs `list` on a new connection, in order.
async fn pragmas(conn: &mut AnyConnection, list: &[&str]) -> Result<(), sqlx::Error> {
    for p in list {
        sqlx::query(p).execute(&mut *conn).await?;
    }
    Ok(())
}

/// The future a transaction closure returns (boxed: it borrows the transaction).
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The transaction closure of one store function keyed by a borrowed name or uuid, the
/// shape of most handlers' reads and writes:
/// `store.read(keyed(uuid, |tx, k| Box::pin(f(tx, k))))`. The key is copied into the
/// transaction's future, which must own what it borrows.
#[cfg(any(test, feature = "testing"))]
pub fn keyed<T, F>(key: &str, f: F) -> impl for<'c> FnOnce(&'c mut Tx) -> BoxFut<'c, T> + Send
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut Tx, &'c str) -> BoxFut<'c, T> + Send + 'static,
{
    let key = key.to_owned();
    move |tx| Box::pin(async move { f(tx, &key).await })
}

/// The transaction API the store's operations are built on ([`Store::write`],
/// [`Store::read`] and their kin): `pub` for the test suites (feature `testing`: the
/// store's own and the server's set up and inspect data in their own transactions),
/// the crate's own otherwise, so that no shipped caller opens a transaction; callers
/// use the operations (`store.traits().get(..)`).
macro_rules! testing_pub {
    ($(#[$m:meta])* async fn $($rest:tt)*) => {
        #[cfg(any(test, feature = "testing"))]
        $(#[$m])* pub async fn $($rest)*
        #[cfg(not(any(test, feature = "testing")))]
        $(#[$m])* pub(crate) async fn $($rest)*
    };
}

impl Store {
    /// Connects to `url` (`sqlite://PATH` or `postgres://...`), creating a SQLite file
    /// when absent, and applies migrations. Safe to call from several processes at once.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let store = Self::open(url).await?;
        store.migrate().await?;
        store.sync_standards().await?;
        Ok(store)
    }

    /// Applies the migrations the database lacks, under the migration lock (several
    /// processes at once are safe); answers the versions this call applied.
    pub async fn migrate(&self) -> Result<Vec<i64>, StoreError> {
        let before = migrate::schema(self.backend, &self.pool).await?;
        migrate::run(self.backend, &self.pool).await?;
        let after = migrate::schema(self.backend, &self.pool).await?;
        Ok(after
            .applied
            .into_iter()
            .filter(|v| !before.applied.contains(v))
            .collect())
    }

    /// The database's schema against this binary's ([`Schema`]).
    pub async fn schema(&self) -> Result<Schema, StoreError> {
        migrate::schema(self.backend, &self.pool).await
    }

    /// Writes Placement's standard resource classes and traits this binary knows
    /// (os-resource-classes, os-traits) where the database lacks them.
    pub async fn sync_standards(&self) -> Result<(), StoreError> {
        placement::sync_standards(self).await
    }

    /// Connects to `url` as [`Store::connect`] does, creating a SQLite file when
    /// absent, but changes nothing in it: no migration, no standard classes.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let (backend, url) = match Backend::of_url(url) {
            Some(Backend::Sqlite) => {
                let path = url["sqlite:".len()..].trim_start_matches("//");
                let url = if path == ":memory:" || path.is_empty() {
                    "sqlite::memory:".to_owned()
                } else {
                    format!("sqlite://{path}?mode=rwc")
                };
                (Backend::Sqlite, url)
            }
            Some(Backend::Postgres) => (Backend::Postgres, url.to_owned()),
            // sqlx's MySQL driver speaks to MariaDB; it only knows the mysql scheme.
            Some(Backend::MySql) => match url.strip_prefix("mariadb://") {
                Some(rest) => (Backend::MySql, format!("mysql://{rest}")),
                None => (Backend::MySql, url.to_owned()),
            },
            None => {
                return Err(StoreError::Config(format!(
                    "unsupported database URL {url:?}: use sqlite://PATH, postgres://USER@HOST:PORT/DB \
                     or mysql://USER[:PASSWORD]@HOST:PORT/DB (also mariadb://)"
                )));
            }
        };
        let opts = AnyConnectOptions::from_str(&url).map_err(StoreError::Db)?;
        if backend == Backend::Postgres {
            // One plain connection first: the pool would retry a refused connection
            // until its acquire timeout and then say only "pool timed out", hiding
            // the cause an operator needs (refused, bad password, no such database).
            let probe = AnyConnection::connect_with(&opts)
                .await
                .map_err(StoreError::Db)?;
            let _ = probe.close().await;
        }
        let mut readers = None;
        let pool = match backend {
            // One connection: SQLite has a single writer anyway, and one connection
            // makes `sqlite::memory:` one database rather than one per connection.
            // No ping before each acquire (sqlx's default): the connection lives in
            // this process and cannot be dropped by a server, and the ping is a round
            // trip to its worker thread on every request.
            Backend::Sqlite => AnyPoolOptions::new()
                .max_connections(1)
                .test_before_acquire(false)
                .after_connect(|conn, _| Box::pin(pragmas(conn, SQLITE_WRITER_PRAGMAS)))
                .connect_with(opts)
                .await
                .map_err(StoreError::Db)?,
            // A request waits at most PG_ACQUIRE_TIMEOUT for a connection (then 503),
            // and a pooled connection idle for a while is pinged before use, so
            // connections a restarted or failed-over server dropped are replaced, not
            // handed out ([`ping_if_idle`]).
            Backend::Postgres => AnyPoolOptions::new()
                .max_connections(16)
                .acquire_timeout(PG_ACQUIRE_TIMEOUT)
                .test_before_acquire(false)
                .before_acquire(|conn, meta| Box::pin(ping_if_idle(conn, meta)))
                .connect_with(opts)
                .await
                .map_err(StoreError::Db)?,
            Backend::MySql => AnyPoolOptions::new()
                .max_connections(16)
                .acquire_timeout(Duration::from_secs(30))
                .test_before_acquire(false)
                .before_acquire(|conn, meta| Box::pin(ping_if_idle(conn, meta)))
                .after_connect(|conn, _| Box::pin(text(conn, MYSQL_SESSION)))
                .connect_with(opts)
                .await
                .map_err(StoreError::Db)?,
        };
        if backend == Backend::Sqlite && !url.starts_with("sqlite::memory:") {
            let readers_opts = AnyConnectOptions::from_str(&url).map_err(StoreError::Db)?;
            readers = Some(
                AnyPoolOptions::new()
                    .max_connections(SQLITE_READERS)
                    .min_connections(0)
                    .test_before_acquire(false)
                    .after_connect(|conn, _| Box::pin(pragmas(conn, SQLITE_READER_PRAGMAS)))
                    .connect_lazy_with(readers_opts),
            );
        }
        // The pool has created the file by now; an in-memory database has no file
        // a second connection could open.
        let version_probe = match readers {
            Some(_) => url
                .strip_prefix("sqlite://")
                .and_then(|rest| rest.split('?').next())
                .and_then(sqlite_probe::VersionProbe::open)
                .map(std::sync::Arc::new),
            None => None,
        };
        let store = Store {
            pool,
            readers,
            backend,
            counters: Default::default(),
            cleanings: std::sync::Arc::new(tokio::sync::watch::Sender::new(0)),
            version_probe,
        };
        Ok(store)
    }

    /// [`Store::connect`], retried while the database is not reachable yet (a
    /// refused or lost connection, a server starting up, a refused password, a
    /// database not created yet) for at most `within`; each failed attempt is logged
    /// with its cause, and the last one is returned when the time is up. Other
    /// errors (a bad URL, a failed migration) return at once.
    pub async fn connect_retrying(url: &str, within: Duration) -> Result<Self, StoreError> {
        Self::retrying(url, within, true).await
    }

    /// [`Store::open`], retried as [`Store::connect_retrying`] retries.
    pub async fn open_retrying(url: &str, within: Duration) -> Result<Self, StoreError> {
        Self::retrying(url, within, false).await
    }

    async fn retrying(url: &str, within: Duration, migrate: bool) -> Result<Self, StoreError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut wait = Duration::from_millis(200);
        let mut attempt = 1u32;
        let mut last: Option<StoreError> = None;
        loop {
            // Each attempt gets what is left, and at least a moment: an attempt cut
            // short says nothing, so the previous attempt's cause is the one reported.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let budget = left.max(Duration::from_millis(500));
            let attempt_once = async {
                if migrate {
                    Self::connect(url).await
                } else {
                    Self::open(url).await
                }
            };
            let result = match tokio::time::timeout(budget, attempt_once).await {
                Ok(r) => r,
                Err(_) => Err(last
                    .take()
                    .unwrap_or(StoreError::Db(sqlx::Error::PoolTimedOut))),
            };
            let e = match result {
                Ok(store) => {
                    if attempt > 1 {
                        tracing::info!(attempt, "database reachable");
                    }
                    return Ok(store);
                }
                Err(e) if e.is_unreachable_at_start() => e,
                Err(e) => return Err(e),
            };
            let cause = match &e {
                StoreError::Db(db) => db_cause(db),
                other => other.to_string(),
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                tracing::error!(attempt, %cause, within_s = within.as_secs(), "database not reachable; giving up");
                return Err(e);
            }
            let pause = wait.min(left);
            tracing::warn!(attempt, %cause, retry_in_ms = pause.as_millis() as u64, "database not reachable yet");
            tokio::time::sleep(pause).await;
            wait = (wait * 2).min(Duration::from_secs(5));
            attempt += 1;
            last = Some(e);
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    testing_pub! {
        /// Runs `f` inside one write transaction, committing on `Ok` and rolling back on
        /// `Err`: [`Store::write_or_refuse`] for writes that never refuse.
        async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
        where
            T: Send,
            F: for<'c> FnOnce(&'c mut Tx) -> BoxFut<'c, T> + Send,
        {
            self.transaction(f, |_| true).await
        }
    }

    /// Says that a device cleaning was queued (every commit that marks one calls it;
    /// an operator's retry does too), waking the agents' long polls on this process.
    pub fn cleanings_queued(&self) {
        self.cleanings.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that changes whenever [`Store::cleanings_queued`] is called.
    pub fn cleanings_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        self.cleanings.subscribe()
    }

    testing_pub! {
        /// The write transaction whose closure may refuse: commits on `Ok(Ok(v))` and rolls
        /// back both on a refusal `Ok(Err(r))` (the data says no: nothing is written, and
        /// the caller words `r`) and on a failure `Err(e)`.
        async fn write_or_refuse<T, R, F>(&self, f: F) -> Refusable<T, R>
        where
            T: Send,
            R: Send,
            F: for<'c> FnOnce(&'c mut Tx) -> BoxFut<'c, Result<T, R>> + Send,
        {
            self.transaction(f, Result::is_ok).await
        }
    }

    /// The one place a write transaction begins and ends: `f`'s `Ok(v)` commits when
    /// `commits(&v)` holds and rolls back otherwise, as does any `Err`.
    async fn transaction<V, F>(&self, f: F, commits: fn(&V) -> bool) -> Result<V, StoreError>
    where
        V: Send,
        F: for<'c> FnOnce(&'c mut Tx) -> BoxFut<'c, V> + Send,
    {
        let mut tx = Tx::writing(self.acquire(&self.pool).await?, self.backend);
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres | Backend::MySql => "BEGIN",
        };
        control(tx.raw(), self.backend, begin).await?;
        let result = match f(&mut tx).await {
            // A device whose last consumer let go is reserved for its cleaning in
            // the transaction that released it: no window in which it is offered.
            Ok(v) if commits(&v) => {
                let released = placement::changes::take_released(&mut tx);
                accelerator::cleaning::after_release(&mut tx, &released)
                    .await
                    .map(|_| v)
            }
            other => other,
        };
        let result = match result {
            // Placement changes are logged inside the transaction they belong to.
            Ok(v) if commits(&v) => {
                let written = tx
                    .written("a commit")
                    .map(std::mem::take)
                    .unwrap_or_default();
                match placement::changes::flush(&mut tx, &written.touched).await {
                    Ok(()) => {
                        control(tx.raw(), self.backend, "COMMIT").await?;
                        if written.cleanings_queued {
                            self.cleanings_queued();
                        }
                        return Ok(v);
                    }
                    Err(e) => Err(e),
                }
            }
            other => other,
        };
        // The connection is unusable if rollback fails; closing it is the safe answer
        // and the pool replaces it.
        if control(tx.raw(), self.backend, "ROLLBACK").await.is_err() {
            let _ = tx.into_inner().detach().close().await;
        }
        result
    }

    testing_pub! {
        /// [`Store::write_or_refuse`] rerun from scratch while it fails with a retryable
        /// error ([`StoreError::is_retryable`]), at most `attempts` runs in all. `attempt`
        /// builds each run's closure (each takes its own copy of the request).
        async fn write_retrying<T, R, F>(
            &self,
            attempts: u32,
            attempt: impl FnMut() -> F + Send,
        ) -> Refusable<T, R>
        where
            T: Send,
            R: Send,
            F: for<'c> FnOnce(&'c mut Tx) -> BoxFut<'c, Result<T, R>> + Send,
        {
            self.rerun(attempts, StoreError::is_retryable, attempt, Result::is_ok)
                .await
        }
    }

    testing_pub! {
        /// [`Store::write`] rerun from scratch while the database rolls it back to break
        /// a lock conflict ([`StoreError::is_deadlock`]: deadlock, lock wait timeout,
        /// Galera certification failure), at most [`DEADLOCK_ATTEMPTS`] runs in all.
        ///
        /// Upstream wraps the writers that can meet another writer's locks in `oslo.db`'s
        /// `wrap_db_retry(retry_on_deadlock=True)` (Placement: the allocation write, the
        /// standard class and trait sync; Cyborg: every ARQ, device profile, device,
        /// deployable and attach-handle update or delete); accel reruns the same writes
        /// (the allocation write through [`Store::write_retrying`]). A write whose
        /// closure refuses (`NotFound`, a conflict) is not rerun: the data said no.
        async fn write_rerunning<T, F>(
            &self,
            attempt: impl FnMut() -> F + Send,
        ) -> Result<T, StoreError>
        where
            T: Send,
            F: for<'c> FnOnce(&'c mut Tx) -> BoxFut<'c, T> + Send,
        {
            self.rerun(DEADLOCK_ATTEMPTS, StoreError::is_deadlock, attempt, |_| {
                true
            })
            .await
        }
    }

    /// The loop of [`Store::write_retrying`] and [`Store::write_rerunning`]: runs each
    /// closure `attempt` builds in its own transaction until it ends other than with an
    /// error `again` accepts, at most `attempts` runs.
    async fn rerun<V, F>(
        &self,
        attempts: u32,
        again: fn(&StoreError) -> bool,
        mut attempt: impl FnMut() -> F + Send,
        commits: fn(&V) -> bool,
    ) -> Result<V, StoreError>
    where
        V: Send,
        F: for<'c> FnOnce(&'c mut Tx) -> BoxFut<'c, V> + Send,
    {
        let mut left = attempts.max(1);
        loop {
            left -= 1;
            match self.transaction(attempt(), commits).await {
                Err(e) if again(&e) && left > 0 => {
                    self.counters
                        .write_retries
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(error = %e, "rerunning a write transaction after a race");
                }
                Err(e) if again(&e) => {
                    tracing::warn!(error = %e, attempts, "exceeded retry limit on a write");
                    return Err(e);
                }
                other => return other,
            }
        }
    }

    testing_pub! {
        /// Runs `f` in a read-only snapshot (a transaction, so several queries agree).
        async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
        where
            T: Send,
            F: for<'c> FnOnce(&'c mut Tx) -> BoxFut<'c, T> + Send,
        {
            let mut tx = Tx::new(self.acquire(self.reader()).await?, self.backend);
            // PostgreSQL's default READ COMMITTED (and the MySQL sessions' READ COMMITTED)
            // gives each statement its own snapshot; a read of several queries must see
            // one instant.
            match self.backend {
                Backend::Sqlite => sqlx::query("BEGIN").execute(tx.raw()).await?,
                Backend::Postgres => {
                    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                        .execute(tx.raw())
                        .await?
                }
                Backend::MySql => {
                    text(
                        tx.raw(),
                        &[
                            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                            "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
                        ],
                    )
                    .await?;
                    Default::default()
                }
            };
            let result = f(&mut tx).await;
            if control(tx.raw(), self.backend, "ROLLBACK").await.is_err() {
                let _ = tx.into_inner().detach().close().await;
            }
            result
        }
    }

    testing_pub! {
        /// Runs `f` on a reader connection without a transaction. For a single statement
        /// only (one statement is its own snapshot); saves the `BEGIN`/`ROLLBACK` round
        /// trips on hot paths such as the candidate index's version check.
        async fn read_one<T, F>(&self, f: F) -> Result<T, StoreError>
        where
            T: Send,
            F: for<'c> FnOnce(&'c mut Tx) -> BoxFut<'c, T> + Send,
        {
            let mut tx = Tx::new(self.acquire(self.reader()).await?, self.backend);
            f(&mut tx).await
        }
    }

    /// The pool reads use: the SQLite file's read-only readers, else the one pool.
    fn reader(&self) -> &AnyPool {
        self.readers.as_ref().unwrap_or(&self.pool)
    }

    /// Closes every connection.
    pub async fn close(&self) {
        if let Some(r) = &self.readers {
            r.close().await;
        }
        self.pool.close().await;
    }
}

/// A pooled connection unused for this long is pinged before it is handed out.
pub const PING_WHEN_IDLE: Duration = Duration::from_millis(500);

/// The pool's check before handing out a server database's connection: a ping when
/// the connection sat idle for [`PING_WHEN_IDLE`] or more (a restarted or failed-over
/// server may have dropped it; a dead one is discarded and another taken), none when
/// it was used moments ago. sqlx's default pings before every acquire: about 13 round
/// trips per ARQ cycle, a tenth of the database's work in that benchmark. A connection
/// that breaks within the window fails its transaction once and is then closed
/// ([`Store::write`] and [`Store::read`] close a connection whose rollback fails).
async fn ping_if_idle(
    conn: &mut AnyConnection,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> Result<bool, sqlx::Error> {
    use sqlx::Connection;
    if meta.idle_for < PING_WHEN_IDLE {
        return Ok(true);
    }
    Ok(conn.ping().await.is_ok())
}

/// Sends a transaction-control statement (`BEGIN`, `COMMIT`, `ROLLBACK`): prepared on
/// SQLite and PostgreSQL as before, as text on MySQL ([`text`]).
async fn control(conn: &mut AnyConnection, backend: Backend, sql: &str) -> Result<(), sqlx::Error> {
    match backend {
        Backend::MySql => text(conn, &[sql]).await,
        Backend::Sqlite | Backend::Postgres => sqlx::query(sql).execute(conn).await.map(|_| ()),
    }
}

/// `($1, $2, $3), ($4, $5, $6), ...`: `rows` tuples of `cols` placeholders for a
/// multi-row `INSERT ... VALUES`.
pub(crate) fn value_rows(rows: usize, cols: usize) -> String {
    (0..rows)
        .map(|r| format!("({})", placeholders(1 + r * cols, cols)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Rows per multi-row statement: far below either backend's limit on bound
/// parameters at the widths used here.
pub(crate) const BATCH_ROWS: usize = 256;

/// `$first, $first+1, ...` placeholders for an `IN (...)` list of `n` values.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The conjunction of `terms` as a balanced tree of `AND`s: `(a AND b) AND (c AND d)`.
///
/// A request can name any number of filters, and a left-deep chain of a thousand
/// `AND`s passes SQLite's expression-depth limit (1,000) and would press on
/// PostgreSQL's stack depth; balanced, the depth grows with the logarithm of the
/// number of terms, so a filter list is bounded only by the size of the query string
/// the APIs accept, on either backend.
pub(crate) fn all_of(terms: &[String]) -> String {
    match terms {
        [] => "1 = 1".to_owned(),
        [one] => one.clone(),
        _ => {
            let (a, b) = terms.split_at(terms.len() / 2);
            format!("({}) AND ({})", all_of(a), all_of(b))
        }
    }
}

#[cfg(test)]
mod all_of_tests {
    use super::all_of;

    #[test]
    fn balanced() {
        let t = |n: usize| (0..n).map(|i| format!("c{i}")).collect::<Vec<_>>();
        assert_eq!(all_of(&t(0)), "1 = 1");
        assert_eq!(all_of(&t(1)), "c0");
        assert_eq!(all_of(&t(3)), "(c0) AND ((c1) AND (c2))");
        // Nesting depth is logarithmic: 1,024 terms nest 10 deep.
        let s = all_of(&t(1024));
        let (mut depth, mut max) = (0i32, 0i32);
        for ch in s.chars() {
            match ch {
                '(' => {
                    depth += 1;
                    max = max.max(depth);
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        assert_eq!(max, 10);
    }
}
