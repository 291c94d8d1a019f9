//! How `accel serve` words what stops it at start-up: a database it cannot open
//! (issue 31 item 6), or Keystone refusing its own credentials (issue 29).
//!
//! The store retries only what an operator may be fixing while the server waits (a
//! server not up yet, a login or database not created yet); everything else fails at
//! once. The message says which of the two happened, so an operator never reads
//! "retried for up to 60 s" for an error that was not retried, and a SQLite file in a
//! directory that does not exist names that directory: SQLite itself says only
//! "(code: 14) unable to open database file".

use std::path::{Path, PathBuf};
use std::time::Duration;

/// `accel serve --no-migrate`: the schema must already be this accel's (`accel db
/// sync` ran); a newer one is served with a warning (the readiness probe then says not
/// ready, as for any server older than its database). The standard classes and traits
/// are still written: they are data this binary carries, not schema.
pub async fn schema_without_migrating(
    store: &accel_store::Store,
    shown: &str,
) -> anyhow::Result<()> {
    let s = store.schema().await?;
    let pending = s.pending();
    if !pending.is_empty() {
        let list: Vec<String> = pending.iter().map(i64::to_string).collect();
        anyhow::bail!(
            "the schema of {shown} is at version {} and this accel needs {} (to apply: {}): \
             run `accel db sync` with the same --database or --config first, or start \
             without --no-migrate",
            s.current(),
            s.latest(),
            list.join(", ")
        );
    }
    if !s.unknown().is_empty() {
        tracing::warn!(
            current = s.current(),
            latest = s.latest(),
            "the database was migrated by a newer accel; this server will report not ready"
        );
    }
    store.sync_standards().await?;
    Ok(())
}

/// The error `accel serve` exits with when the store does not open.
pub fn database_error(
    e: accel_store::StoreError,
    url: &str,
    shown: &str,
    within: Duration,
) -> anyhow::Error {
    let retried = e.is_unreachable_at_start();
    let err = match &e {
        // The driver's root cause, not its wrapper ("pool timed out" and the like).
        accel_store::StoreError::Db(db) => {
            anyhow::anyhow!("{}", accel_store::db_cause(db)).context(e.to_string())
        }
        _ => anyhow::Error::new(e),
    };
    if let Some(dir) = missing_sqlite_dir(url) {
        return err.context(format!(
            "opening database {shown}: the directory {} does not exist (create it, or give \
             --database a path in an existing directory; SQLite creates only the file)",
            dir.display()
        ));
    }
    if retried {
        err.context(format!(
            "opening database {shown} (retried for up to {} s, --database-connect-timeout)",
            within.as_secs()
        ))
    } else {
        err.context(format!(
            "opening database {shown} (failed at once, not retried)"
        ))
    }
}

/// The file path of a `sqlite:` URL (`sqlite://PATH`, `sqlite:PATH`, options after `?`).
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

/// The directory a SQLite URL's file would be in, when that directory is missing.
fn missing_sqlite_dir(url: &str) -> Option<PathBuf> {
    let path = sqlite_path(url)?;
    let dir = match path.parent() {
        Some(d) if d.as_os_str().is_empty() => Path::new("."),
        Some(d) => d,
        None => return None,
    };
    (!dir.is_dir()).then(|| dir.to_path_buf())
}

/// Asks Keystone for the validator's own token once, before serving. A refusal
/// (wrong password, disabled user, unknown project) is a configuration error: the
/// server stops with Keystone's answer instead of answering 503 to every request and
/// trying the password again and again (an account lockout policy would lock the
/// user). An unreachable Keystone is not: requests get 503 until it answers.
#[cfg(feature = "server")]
pub async fn own_keystone_credentials(
    keystone: &accel_server::auth::keystone::Keystone,
) -> anyhow::Result<()> {
    match keystone.check_own_credentials().await {
        Ok(()) => Ok(()),
        Err(accel_keystone::TokenError::Refused(said)) => anyhow::bail!(
            "{said}\n[keystone_authtoken] username, password, project_name and their domains must be a user Keystone accepts"
        ),
        Err(accel_keystone::TokenError::Unavailable(why)) => {
            tracing::warn!(target: "accel::keystone", error = %why, "Keystone did not answer at start-up; requests that need a token validated get 503 until it does");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_paths_are_read_from_every_url_form() {
        assert_eq!(
            sqlite_path("sqlite:///var/lib/accel/accel.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/accel/accel.db"))
        );
        assert_eq!(
            sqlite_path("sqlite:accel.db"),
            Some(PathBuf::from("accel.db"))
        );
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("postgres://u@h/db"), None);
    }

    #[test]
    fn only_a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let there = format!("sqlite://{}/accel.db", dir.path().display());
        assert_eq!(missing_sqlite_dir(&there), None);
        let gone = dir.path().join("no/such");
        let url = format!("sqlite://{}/accel.db", gone.display());
        assert_eq!(missing_sqlite_dir(&url), Some(gone));
        assert_eq!(missing_sqlite_dir("sqlite:accel.db"), None);
    }
}
