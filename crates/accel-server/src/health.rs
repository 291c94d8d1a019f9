//! Whether this server can serve: the checks behind `/healthcheck` on both API ports
//! (oslo.middleware's answer, for load balancers) and `/readyz` on the metrics port
//! (Kubernetes' readiness probe).
//!
//! A server can serve when its database answers, its background workers run (a
//! worker waiting out its restart backoff does not, see [`crate::supervisor`]) and it
//! is not draining after a shutdown request. Readiness adds that the schema is the
//! one this binary migrates to and, in keystone mode, that Keystone accepts the
//! service's own credentials (without them no token can be validated). Every check runs when asked, under a short timeout,
//! so a probe sees the database go and come back without the server restarting; a
//! failing check is logged with its cause, while the answer names only what failed
//! (no driver message leaves the server).

use crate::state::Shared;
use std::time::Duration;

/// How long a check waits for the database.
pub const DB_TIMEOUT: Duration = Duration::from_secs(2);

/// The draining flag and the workers' handle (kept with the shared state).
pub use crate::state::Health;

/// One check's result: its name and, when it failed, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub failure: Option<String>,
}

/// Runs the checks; `ready` adds the schema check of `/readyz`.
pub async fn check(app: &Shared, ready: bool) -> Vec<Check> {
    let mut out = Vec::with_capacity(4);
    let draining = app.health.is_draining();
    out.push(Check {
        name: "draining",
        failure: draining.then(|| "the server is draining (shutting down)".to_owned()),
    });
    let db = match tokio::time::timeout(DB_TIMEOUT, app.store.ping()).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => {
            tracing::warn!(target: "accel::health", error = %e, "health check: the database did not answer");
            Some("database unreachable".to_owned())
        }
        Err(_) => {
            tracing::warn!(target: "accel::health", timeout_ms = DB_TIMEOUT.as_millis() as u64, "health check: the database did not answer in time");
            Some("database unreachable (timed out)".to_owned())
        }
    };
    app.metrics.set_db_up(db.is_none());
    let reachable = db.is_none();
    out.push(Check {
        name: "database",
        failure: db,
    });
    if ready {
        let schema = if !reachable {
            Some("not checked: the database is unreachable".to_owned())
        } else {
            match tokio::time::timeout(DB_TIMEOUT, app.store.schema_current()).await {
                Ok(Ok(true)) => None,
                Ok(Ok(false)) => {
                    Some("database schema is not the version this accel migrates to".to_owned())
                }
                Ok(Err(e)) => {
                    tracing::warn!(target: "accel::health", error = %e, "readiness: reading the schema version failed");
                    Some("database schema version unreadable".to_owned())
                }
                Err(_) => Some("database schema version unreadable (timed out)".to_owned()),
            }
        };
        out.push(Check {
            name: "migrations",
            failure: schema,
        });
    }
    if ready {
        if let Some(k) = &app.config.keystone {
            // A retry Keystone is slow to answer leaves the last known state.
            let refused = tokio::time::timeout(DB_TIMEOUT, k.own_credentials_refused())
                .await
                .unwrap_or_else(|_| k.own_credentials_refused_now());
            app.metrics.set_keystone_refused(refused);
            // Keystone's answer is in the server's log (said once, at error).
            out.push(Check {
                name: "keystone",
                failure: refused.then(|| {
                    let c = k.config();
                    format!(
                        "Keystone refuses the service credentials (user {}, project {})",
                        c.username, c.project_name
                    )
                }),
            });
        }
    }
    let stopped = app.health.stopped_workers();
    // While draining the workers stop on purpose; "draining" already says so.
    let workers = (!stopped.is_empty() && !draining).then(|| {
        tracing::warn!(target: "accel::health", workers = ?stopped, "health check: background workers not running");
        format!("background worker stopped: {}", stopped.join(", "))
    });
    out.push(Check {
        name: "workers",
        failure: workers,
    });
    out
}

/// The failures of `checks`, in order.
pub fn failures(checks: &[Check]) -> Vec<&str> {
    checks.iter().filter_map(|c| c.failure.as_deref()).collect()
}
