//! What both APIs, the metrics port and the background workers share: the store, the
//! run-time configuration, the metrics registry and the health state ([`Shared`]).
//! Each API's own state stands on it: Placement's ([`crate::placement::AppState`]: its
//! policy, candidate index, usage cache and create queue) and the accelerator API's
//! ([`crate::accelerator::AccelState`]: Cyborg's policy, the bind wake-up, the
//! external Placement). This file sits on the ground floor of the crate: it imports
//! no API, so the layers that serve both (auth, health, observe) need neither.

use crate::auth::{self, keystone::Keystone, Credentials, Rejection};
use crate::supervisor::Running;
use crate::{admission, listen, metrics};
use accel_store::Store;
use axum::http::HeaderMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The longest query string either API accepts, in bytes; a longer one is a 400 in the
/// API's own format. Every list query stays within both backends' statement limits up to
/// this size (filters nest as a balanced tree, name lists are batched), so no filter list
/// reaches a database error. Upstream behind gunicorn refuses request lines over 4,094
/// bytes with 414; this is four times that.
pub const MAX_QUERY_BYTES: usize = 16 * 1024;

/// The refusal of a query string over [`MAX_QUERY_BYTES`].
pub(crate) fn query_too_long(query: Option<&str>) -> Option<String> {
    let n = query.map_or(0, str::len);
    (n > MAX_QUERY_BYTES).then(|| {
        format!("The query string is {n} bytes long; at most {MAX_QUERY_BYTES} are accepted.")
    })
}

/// Settings the server needs at run time (the CLI maps flags and files onto it).
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    pub auth_strategy: auth::AuthStrategy,
    pub cors_allowed_origins: Vec<String>,
    /// Server-side retries of an allocation write that lost a provider race.
    pub allocation_conflict_retry_count: u32,
    /// Upstream's `randomize_allocation_candidates`.
    pub randomize_allocation_candidates: bool,
    /// Upper bound on candidates computed per request, whatever `limit` says.
    pub max_allocation_candidates: usize,
    /// The Keystone validator (configuration, own token, validation cache), present
    /// when `auth_strategy` is keystone.
    pub keystone: Option<Arc<Keystone>>,
    /// Timeouts, body and connection limits, and the shutdown drain of both APIs.
    pub http: listen::HttpLimits,
    /// No `accel::access` line per request (`access_log = false`).
    pub disable_access_log: bool,
    /// Requests served at once per class, and the wait for a place ([`admission`]).
    pub admission: admission::Limits,
}

impl ServerConfig {
    /// Authenticates a request as this configuration says ([`auth::authenticate`]).
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Credentials, Rejection> {
        auth::authenticate(self.auth_strategy, self.keystone.as_deref(), headers).await
    }

    /// Whether the caller's service token counts as a service's ([`auth::is_service`]).
    pub fn is_service(&self, creds: &Credentials) -> bool {
        auth::is_service(self.auth_strategy, self.keystone.as_deref(), creds)
    }
}

/// The state every part of the server reaches.
pub struct Shared {
    pub store: Store,
    pub config: ServerConfig,
    /// The Prometheus metrics every handler and worker updates ([`metrics`]).
    pub metrics: Arc<metrics::Metrics>,
    /// Draining and the workers' state, for the health checks ([`crate::health`]).
    pub health: Health,
    /// The maintenance switch as this server last read it ([`crate::maintenance`]).
    pub maintenance: crate::maintenance::Gate,
    /// The places of each request class ([`admission`]), from `config.admission`.
    pub admission: admission::Admission,
}

/// The server's health state: draining, and the workers' handle once they run.
#[derive(Default, Debug)]
pub struct Health {
    draining: AtomicBool,
    workers: Mutex<Option<Running>>,
}

impl Health {
    /// From now on every check fails with "draining" (the listeners are closing).
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The supervised workers whose state the checks include.
    pub fn watch_workers(&self, running: Running) {
        *self.workers.lock().unwrap_or_else(|e| e.into_inner()) = Some(running);
    }

    pub(crate) fn stopped_workers(&self) -> Vec<&'static str> {
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(Running::stopped)
            .unwrap_or_default()
    }
}
