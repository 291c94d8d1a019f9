//! The store's error type: what went wrong, in terms callers branch on.

/// A write refused because of the data, not the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// A generation compare-and-swap lost (provider or consumer) where the client has
    /// to decide what to do: not retried.
    ConcurrentUpdate,
    /// An allocation claim lost a provider-generation race ([`PROVIDER_RACE`]):
    /// rerunning the whole transaction may succeed, so writers retry it
    /// ([`StoreError::is_retryable`]) before answering 409 with the same words.
    ProviderRace,
    /// A unique name or uuid already exists.
    Duplicate,
    /// Removing inventory that allocations still use.
    InventoryInUse,
    /// Deleting a provider that has allocations.
    ProviderInUse,
    /// Deleting a provider that has children.
    CannotDeleteParent,
    /// Deleting a resource class or trait still referenced.
    InUse,
}

/// The message of a lost provider-generation race, upstream's
/// `ResourceProviderConcurrentUpdateDetected` text.
pub const PROVIDER_RACE: &str =
    "Another thread concurrently updated the resource provider data. Please retry your update";

/// `Ok(Ok(v))` done, `Ok(Err(r))` refused (nothing written), `Err` failed.
pub type Refusable<T, R> = Result<Result<T, R>, StoreError>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found: {0}")]
    NotFound(String),
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

    /// A lost provider-generation race, worded as upstream ([`PROVIDER_RACE`]).
    pub fn provider_race() -> Self {
        StoreError::conflict(Conflict::ProviderRace, PROVIDER_RACE)
    }

    /// True for errors after which rerunning the whole transaction may succeed: a lost
    /// provider-generation race, or a database deadlock / serialization failure.
    ///
    /// On MariaDB/MySQL these are the errors `oslo.db` turns into `DBDeadlock` and
    /// upstream's writers retry: a deadlock (1213, SQLSTATE 40001), a lock wait
    /// timeout (1205), and a Galera certification failure, which a Galera node reports
    /// as 1213 ("WSREP detected deadlock/conflict").
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Conflict(Conflict::ProviderRace, _) => true,
            StoreError::Db(sqlx::Error::Database(d)) => {
                matches!(d.code().as_deref(), Some("40P01") | Some("40001"))
                    || d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                        .is_some_and(|m| matches!(m.number(), 1205 | 1213))
                    || d.message().contains("WSREP detected deadlock")
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
