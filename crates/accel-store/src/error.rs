//! The store's error type: what went wrong, in terms callers branch on.

/// A write refused because of the data, not the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// A generation compare-and-swap lost (provider or consumer).
    ConcurrentUpdate,
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
