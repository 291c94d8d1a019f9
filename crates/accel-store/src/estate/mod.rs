//! Read-only views of the whole estate for the operator's console: hosts with their
//! provider trees and GPU ledgers, consumers with their allocations and ARQs, ARQs with
//! their bind jobs and Nova events, Kubernetes slots.
//!
//! Every list is paged in SQL (`ORDER BY .. LIMIT .. OFFSET ..` plus one `COUNT(*)`
//! under the same filter), and the details of a page are read for that page's rows
//! only, with `IN (...)` lists of at most a page's ids. So a page costs the same few
//! indexed queries with 10 or 10,000 compute nodes; nothing here loads the estate.
//! Searches are substring matches (`LIKE '%text%'`) on names and exact matches on
//! uuids, which a person types or pastes.
//!
//! The console renders these rows; it never writes, so nothing here needs a write
//! transaction or a `touch`. It reads through [`Store::estate`]: one operation per
//! page, each in its own snapshot, so a page's lists agree with each other.

use crate::{Store, StoreError, Tx};

pub mod activity;
mod host;
pub mod hosts;
pub mod ledgers;
mod profiles;
pub mod summary;

pub use host::HostPage;
pub use hosts::KubernetesPage;

/// The console's reads ([`Store::estate`]); each page is one of them.
pub struct Estate<'s>(&'s Store);

impl Store {
    /// The console's reads of the estate.
    pub fn estate(&self) -> Estate<'_> {
        Estate(self)
    }
}

impl Estate<'_> {
    /// A token that changes whenever anything the console shows changes: the
    /// Placement change version (every provider, inventory, trait or allocation write
    /// bumps it) and counts and latest stamps of ARQs, bind jobs, Nova events, agent
    /// reports, Kubernetes slots and device history (health, binds, cleanings). Pages
    /// poll it and reload only when it moved.
    pub async fn stamp(&self) -> Result<String, StoreError> {
        self.0.read_one(|tx| Box::pin(stamp(tx))).await
    }
}

/// One page of a list and how many rows the whole filtered list has.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: i64,
}

/// Which page of a list: rows `offset .. offset + limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub offset: u64,
    pub limit: u64,
}

impl Window {
    /// ` LIMIT n OFFSET m`: plain integers of our own, so they are written into the
    /// statement (every backend takes literals there; bound LIMITs differ).
    fn sql(&self) -> String {
        format!(" LIMIT {} OFFSET {}", self.limit, self.offset)
    }
}

/// `%text%` for a `LIKE`; `None` for an empty or absent search.
fn like(search: Option<&str>) -> Option<(String, String)> {
    let s = search.map(str::trim).filter(|s| !s.is_empty())?;
    Some((format!("%{s}%"), s.to_owned()))
}

/// `SELECT COUNT(*) ...` with `args` bound.
async fn count(tx: &mut Tx, sql: &str, args: &[String]) -> Result<i64, StoreError> {
    let mut q = sqlx::query_scalar::<_, i64>(sql);
    for a in args {
        q = q.bind(a.as_str());
    }
    Ok(q.fetch_one(&mut *tx).await?)
}

/// Binds `args` (all text) in order to a query built over `$1..$n`.
fn bind_all<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    args: &'q [String],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for a in args {
        q = q.bind(a.as_str());
    }
    q
}

/// [`Estate::stamp`]'s read.
async fn stamp(tx: &mut Tx) -> Result<String, StoreError> {
    use sqlx::Row;
    let placement: i64 = crate::placement::changes::version(tx).await?.iter().sum();
    let row = sqlx::query(
        "SELECT \
         (SELECT COUNT(*) FROM extended_accelerator_requests), \
         (SELECT COALESCE(MAX(COALESCE(updated_at, created_at)), 0) FROM extended_accelerator_requests), \
         (SELECT COALESCE(MAX(COALESCE(updated_at, created_at)), 0) FROM bind_jobs), \
         (SELECT COALESCE(MAX(COALESCE(updated_at, created_at)), 0) FROM nova_events), \
         (SELECT COALESCE(MAX(updated_at), 0) FROM agent_reports), \
         (SELECT COUNT(*) FROM kubernetes_slots), \
         (SELECT COUNT(*) FROM device_profiles), \
         (SELECT COALESCE(MAX(id), 0) FROM device_events)",
    )
    .fetch_one(&mut *tx)
    .await?;
    let mut parts = vec![placement.to_string()];
    for i in 0..8 {
        parts.push(row.try_get::<i64, _>(i)?.to_string());
    }
    Ok(parts.join("."))
}
