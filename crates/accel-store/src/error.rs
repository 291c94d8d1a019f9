//! The store's error type: what went wrong, in terms callers branch on.

/// A write refused because of the data, not the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// A generation compare-and-swap lost (provider or consumer) where the client has
    /// to decide what to do: not retried.
    ConcurrentUpdate,
    /// An allocation claim lost a provider-generation race: rerunning the whole
    /// transaction may succeed, so writers retry it ([`StoreError::is_retryable`])
    /// before the API answers 409 (in upstream's words, which the API owns).
    ProviderRace,
    /// A unique name or uuid already exists.
    Duplicate,
    /// Deleting something still referenced.
    InUse,
}

/// `Ok(Ok(v))` done, `Ok(Err(r))` refused (nothing written), `Err` failed.
pub type Refusable<T, R> = Result<Result<T, R>, StoreError>;

use crate::refused::{self, Refused};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found: {0}")]
    NotFound(String),
    /// Refused by the data, to be worded by the API ([`Refused`]).
    #[error("refused: {0:?}")]
    Refused(Refused),
    #[error("{1}")]
    Conflict(Conflict, String),
    #[error("{0}")]
    Invalid(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

impl StoreError {
    pub fn conflict(kind: Conflict, detail: impl Into<String>) -> Self {
        StoreError::Conflict(kind, detail.into())
    }

    /// A lost provider-generation race ([`Conflict::ProviderRace`]).
    pub fn provider_race() -> Self {
        StoreError::conflict(Conflict::ProviderRace, "lost a provider generation race")
    }

    /// True for errors after which rerunning the whole transaction may succeed: a lost
    /// provider-generation race, or a database deadlock / serialization failure.
    ///
    /// On MariaDB/MySQL these are the errors `oslo.db` turns into `DBDeadlock` and
    /// upstream's writers retry: a deadlock (1213, SQLSTATE 40001), a lock wait
    /// timeout (1205), and a Galera certification failure, which a Galera node reports
    /// as 1213 ("WSREP detected deadlock/conflict").
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Conflict(Conflict::ProviderRace, _)) || self.is_deadlock()
    }

    /// True when the database rolled the transaction back to break a lock conflict
    /// (`oslo.db`'s `DBDeadlock`): a deadlock (PostgreSQL 40P01; MySQL 1213, SQLSTATE
    /// 40001, which a Galera node also answers for a certification failure, "WSREP
    /// detected deadlock/conflict"), a serialization failure (40001), or a lock wait
    /// timeout (1205). Nothing of the transaction was written; [`Store::write_rerunning`]
    /// runs it again.
    ///
    /// [`Store::write_rerunning`]: crate::Store::write_rerunning
    pub fn is_deadlock(&self) -> bool {
        match self {
            StoreError::Db(sqlx::Error::Database(d)) => {
                matches!(d.code().as_deref(), Some("40P01") | Some("40001"))
                    || d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                        .is_some_and(|m| matches!(m.number(), 1205 | 1213))
                    || d.message().contains("WSREP detected deadlock")
            }
            _ => false,
        }
    }

    /// True when the database could not be reached or is not serving right now (no
    /// connection within the pool's acquire timeout, a connection lost mid-query, a
    /// server shutting down or starting up, too many connections, a SQLite file locked
    /// past its busy timeout): the request may succeed later, and the APIs answer 503
    /// rather than 500.
    pub fn is_unavailable(&self) -> bool {
        let StoreError::Db(e) = self else {
            return false;
        };
        match e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(d) => match d.code().as_deref() {
                // PostgreSQL class 08 (connection exception), admin/crash shutdown,
                // cannot connect now, too many connections.
                Some(c) if c.starts_with("08") => true,
                Some("57P01" | "57P02" | "57P03" | "53300") => true,
                // SQLite: SQLITE_BUSY / SQLITE_LOCKED after the busy timeout.
                Some("5" | "6") => true,
                _ => false,
            },
            _ => false,
        }
    }

    /// True for the errors a server at start-up waits out ([`crate::Store::connect_retrying`]):
    /// the database is unavailable, or refuses this login or database name, which an
    /// operator may be fixing while the server waits.
    pub fn is_unreachable_at_start(&self) -> bool {
        if self.is_unavailable() {
            return true;
        }
        match self {
            StoreError::Db(sqlx::Error::Database(d)) => {
                // invalid authorization, invalid password, database does not exist
                matches!(d.code().as_deref(), Some("28000" | "28P01" | "3D000"))
            }
            _ => false,
        }
    }

    /// True when the database itself reported a unique-constraint violation.
    pub fn is_unique_violation(&self) -> bool {
        match self {
            StoreError::Db(sqlx::Error::Database(e)) => {
                e.is_unique_violation()
                    || e.message().contains("UNIQUE constraint failed")
                    || e.code().as_deref() == Some("23505")
            }
            _ => false,
        }
    }
}

/// The root cause of a database error in an operator's words: the innermost source
/// of an I/O error ("Connection refused (os error 111)"), or the server's own message
/// ("password authentication failed for user ..", "database \"x\" does not exist"),
/// rather than sqlx's wrapper text or a pool's "timed out".
pub fn db_cause(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(d) => match d.code() {
            Some(code) => format!("{} (SQLSTATE {code})", d.message()),
            None => d.message().to_owned(),
        },
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::PoolTimedOut => "no connection within the timeout".to_owned(),
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                text = s.to_string();
                source = s.source();
            }
            text
        }
    }
}

impl From<refused::placement::Refused> for StoreError {
    fn from(r: refused::placement::Refused) -> Self {
        StoreError::Refused(Refused::Placement(r))
    }
}

impl From<refused::accelerator::Refused> for StoreError {
    fn from(r: refused::accelerator::Refused) -> Self {
        StoreError::Refused(Refused::Accelerator(r))
    }
}
