//! The Placement API (microversions 1.0 to 1.39).
//!
//! It stands behind the front door ([`crate::front`]); [`api`] fills the door's hooks in
//! the order upstream's middleware stack runs, because clients observe that order:
//! request id, CORS, noauth (401), version parsing (400/406), route match (404/405 with
//! `Allow`), version gate, content checks, then the handler, whose errors render as
//! `{"errors": [...]}`.
//!
//! Routing is a table ([`routes::ROUTES`]) rather than axum's router so that a path
//! that exists with another method answers 405 with upstream's `Allow` list, and a
//! route newer than the requested microversion answers 404.

mod api;
pub mod error;
pub mod index;
pub mod microversion;
mod qs;
mod request;
mod routes;

mod aggregates;
mod allocation_candidates;
mod partition_candidates;
pub use allocation_candidates::{resolve_query, Resolved};
pub(crate) mod allocations;
pub mod creates;
mod inventories;
mod reshaper;
mod resource_classes;
mod resource_providers;
mod root;
mod traits;
pub mod usage_cache;
mod usages;

pub use crate::front::Reply;
pub use api::Placement;
pub use request::Req;

use crate::state::Shared;
use accel_core::policy::Policy;
use error::ApiError;
use std::sync::Arc;

/// The Placement API's state: its policy, candidate index, usage cache and create
/// queue, over the state both APIs share (reached through `Deref`: `app.store`).
pub struct AppState {
    pub shared: Arc<Shared>,
    pub policy: Policy,
    /// The in-memory picture allocation candidates are searched in.
    pub placement_index: index::Index,
    /// Remembered `GET /usages` answers, forgotten as the change log names their projects.
    pub usage_cache: usage_cache::UsageCache,
    /// Concurrent root-provider creates waiting to be combined into one transaction.
    pub creates: creates::Creates,
}

impl AppState {
    pub fn new(shared: Arc<Shared>, policy: Policy) -> AppState {
        AppState {
            shared,
            policy,
            placement_index: Default::default(),
            usage_cache: Default::default(),
            creates: Default::default(),
        }
    }

    /// Brings the metrics that count in Placement's own structures (index refreshes,
    /// usage answers) up to date, before a scrape.
    pub fn sync_metrics(&self) {
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let (index, usage) = (&self.placement_index.stats, &self.usage_cache);
        self.metrics
            .sync_index(index.full.load(relaxed), index.incremental.load(relaxed));
        self.metrics
            .sync_usage_cache(usage.cached.load(relaxed), usage.queried.load(relaxed));
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// The Placement router: every request goes through the front door.
pub fn router(state: Arc<AppState>) -> axum::Router {
    crate::front::router::<Placement>(state)
}

/// Checks `rule` against the caller, with upstream's default target.
pub(crate) fn authorize(app: &AppState, req: &Req, rule: &str) -> Result<(), ApiError> {
    let target = req.creds.default_target();
    authorize_target(app, req, rule, &target)
}

pub(crate) fn authorize_target(
    app: &AppState,
    req: &Req,
    rule: &str,
    target: &accel_core::policy::Target,
) -> Result<(), ApiError> {
    match app.policy.authorize(rule, &req.creds.policy, target) {
        Ok(d) if d.is_allowed() => Ok(()),
        // Upstream's policy refusal is raised above its handlers: no `Vary`.
        Ok(_) => Err(
            ApiError::forbidden(format!("Policy does not allow {rule} to be performed."))
                .without_vary(),
        ),
        Err(e) => Err(ApiError::internal(e.to_string())),
    }
}
