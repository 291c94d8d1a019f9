//! `placement_pushes`: the outbox of hosts whose device providers must be pushed to an
//! external OpenStack Placement, and the local subtree such a push copies.
//!
//! ```text
//!  report / enable / disable ──same tx──▶ mark(host): version += 1, due now
//!  pusher (any replica): due ─▶ claim (owner/lease CAS, returns the version)
//!         ─▶ push local_tree(host) ─▶ succeeded(version) | failed(retry at)
//! ```
//!
//! The built-in Placement tables stay accel's record of the tree; this table only says
//! which hosts the remote copy may lag behind. A host is pending while `version >
//! pushed_version`. Because [`mark`] commits with the change, a crash loses nothing:
//! the row stays pending and any replica, or the restarted server, pushes it once the
//! lease has run out. A change made while a push runs bumps `version`, so
//! [`succeeded`] with the older version leaves the host pending and due at once.
//!
//! [`mark`] runs inside the writes that change a tree; the pusher's steps are
//! operations of their own ([`Store::pushes`]), each one transaction, since a push
//! talks to the remote between them and must hold no transaction meanwhile.

use super::lease;
use crate::placement::{inventories, providers, traits};
use crate::{Store, StoreError, Tx};
use accel_core::capacity::Limits;
use sqlx::Row;
use std::collections::HashMap;

/// One host's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Push {
    pub hostname: String,
    pub version: i64,
    pub pushed_version: i64,
    /// Failed attempts since the last success.
    pub attempts: i64,
    pub next_attempt: i64,
    pub owner: Option<String>,
    pub lease_until: Option<i64>,
    pub last_error: Option<String>,
}

impl Push {
    /// Whether the remote may lag behind the local tree.
    pub fn pending(&self) -> bool {
        self.version > self.pushed_version
    }
}

/// The pusher's operations on the outbox ([`Store::pushes`]).
pub struct Pushes<'s>(&'s Store);

impl Store {
    /// Operations on the external-Placement outbox, each its own transaction.
    pub fn pushes(&self) -> Pushes<'_> {
        Pushes(self)
    }
}

impl Pushes<'_> {
    /// Marks every host ([`mark_all`]); answers how many.
    pub async fn mark_all(&self, now: i64) -> Result<usize, StoreError> {
        self.0.write(move |tx| Box::pin(mark_all(tx, now))).await
    }

    /// At most `limit` hosts due at `now` ([`due`]).
    pub async fn due(&self, now: i64, limit: i64) -> Result<Vec<String>, StoreError> {
        self.0.read(move |tx| Box::pin(due(tx, now, limit))).await
    }

    /// Takes `host` for one push by `owner` until `lease_until` ([`claim`]); `None`
    /// when it is no longer pending, due and free.
    pub async fn claim(
        &self,
        host: &str,
        owner: &str,
        now: i64,
        lease_until: i64,
    ) -> Result<Option<Claimed>, StoreError> {
        let (host, owner) = (host.to_owned(), owner.to_owned());
        self.0
            .write(move |tx| {
                Box::pin(async move { claim(tx, &host, &owner, now, lease_until).await })
            })
            .await
    }

    /// What a push of `host` copies ([`local_tree`]), in one snapshot.
    pub async fn local_tree(&self, host: &str) -> Result<LocalTree, StoreError> {
        let host = host.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { local_tree(tx, &host).await }))
            .await
    }

    /// Records that `owner` pushed `version` of `host` ([`succeeded`]).
    pub async fn succeeded(
        &self,
        host: &str,
        owner: &str,
        version: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (host, owner) = (host.to_owned(), owner.to_owned());
        self.0
            .write(move |tx| {
                Box::pin(async move { succeeded(tx, &host, &owner, version, now).await })
            })
            .await
    }

    /// Records `owner`'s failed push of `host`, tried again at `next_attempt`
    /// ([`failed`]).
    pub async fn failed(
        &self,
        host: &str,
        owner: &str,
        next_attempt: i64,
        error: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (host, owner, error) = (host.to_owned(), owner.to_owned(), error.to_owned());
        self.0
            .write(move |tx| {
                Box::pin(async move { failed(tx, &host, &owner, next_attempt, &error, now).await })
            })
            .await
    }

    /// The row of `host`, if it was ever marked.
    pub async fn get(&self, host: &str) -> Result<Option<Push>, StoreError> {
        let host = host.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { get(tx, &host).await }))
            .await
    }
}

/// Records that `host`'s tree changed: a push is due at `now`. Call it in the
/// transaction that made the change.
pub async fn mark(tx: &mut Tx, host: &str, now: i64) -> Result<(), StoreError> {
    let upsert = if tx.backend() == crate::Backend::MySql {
        "ON DUPLICATE KEY UPDATE version = version + 1, next_attempt = $2, updated_at = $2"
    } else {
        "ON CONFLICT (hostname) DO UPDATE SET version = placement_pushes.version + 1, \
         next_attempt = $2, updated_at = $2"
    };
    sqlx::query(&format!(
        "INSERT INTO placement_pushes (hostname, version, pushed_version, attempts, \
         next_attempt, updated_at) VALUES ($1, 1, 0, 0, $2, $2) {upsert}"
    ))
    .bind(host)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Marks every host that has devices or was ever pushed (a server that starts with an
/// external Placement checks every host once, so enabling or changing `[placement]`
/// later still brings the remote up to date). Returns how many hosts were marked.
pub async fn mark_all(tx: &mut Tx, now: i64) -> Result<usize, StoreError> {
    let hosts: Vec<String> = sqlx::query_scalar(
        "SELECT hostname FROM devices UNION SELECT hostname FROM placement_pushes",
    )
    .fetch_all(&mut *tx)
    .await?;
    for h in &hosts {
        mark(tx, h, now).await?;
    }
    Ok(hosts.len())
}

/// Hosts pending, due at `now` and free to claim, oldest due first.
pub async fn due(tx: &mut Tx, now: i64, limit: i64) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(&format!(
        "SELECT hostname FROM placement_pushes WHERE version > pushed_version \
         AND next_attempt <= $1 AND {free} \
         ORDER BY next_attempt, hostname LIMIT $2",
        free = lease::free("", "$1"),
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?)
}

/// A host taken for one push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimed {
    /// The version being pushed.
    pub version: i64,
    /// Failed attempts before this one.
    pub attempts: i64,
}

/// Hosts are taken while pending and due; only a failed push counts an attempt.
const PUSHES: lease::Queue = lease::Queue {
    table: "placement_pushes",
    key: "hostname",
    counts_attempts: false,
    ready: "version > pushed_version AND next_attempt <= $3",
};

/// Takes `host` for one push by `owner` if it is still pending, due and free.
pub async fn claim(
    tx: &mut Tx,
    host: &str,
    owner: &str,
    now: i64,
    lease_until: i64,
) -> Result<Option<Claimed>, StoreError> {
    if !lease::take(tx, &PUSHES, host.to_owned(), owner, now, lease_until).await? {
        return Ok(None);
    }
    let r = sqlx::query("SELECT version, attempts FROM placement_pushes WHERE hostname = $1")
        .bind(host)
        .fetch_one(&mut *tx)
        .await?;
    Ok(Some(Claimed {
        version: r.try_get(0)?,
        attempts: r.try_get(1)?,
    }))
}

/// Records that `owner` pushed `version`. A lease taken over records nothing.
pub async fn succeeded(
    tx: &mut Tx,
    host: &str,
    owner: &str,
    version: i64,
    now: i64,
) -> Result<bool, StoreError> {
    let q = sqlx::query(
        "UPDATE placement_pushes SET pushed_version = $1, attempts = 0, last_error = NULL, \
         owner = NULL, lease_until = NULL, updated_at = $2 \
         WHERE hostname = $3 AND owner = $4 AND pushed_version < $1",
    )
    .bind(version)
    .bind(now)
    .bind(host)
    .bind(owner);
    lease::changed_one(tx, q).await
}

/// Records `owner`'s failed push: tried again at `next_attempt`.
pub async fn failed(
    tx: &mut Tx,
    host: &str,
    owner: &str,
    next_attempt: i64,
    error: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let q = sqlx::query(
        "UPDATE placement_pushes SET attempts = attempts + 1, last_error = $1, \
         next_attempt = $2, owner = NULL, lease_until = NULL, updated_at = $3 \
         WHERE hostname = $4 AND owner = $5",
    )
    .bind(error)
    .bind(next_attempt)
    .bind(now)
    .bind(host)
    .bind(owner);
    lease::changed_one(tx, q).await
}

/// The row of `host`, if it was ever marked.
pub async fn get(tx: &mut Tx, host: &str) -> Result<Option<Push>, StoreError> {
    let row = sqlx::query(
        "SELECT hostname, version, pushed_version, attempts, next_attempt, owner, \
         lease_until, last_error FROM placement_pushes WHERE hostname = $1",
    )
    .bind(host)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(r) = row else { return Ok(None) };
    Ok(Some(Push {
        hostname: r.try_get("hostname")?,
        version: r.try_get("version")?,
        pushed_version: r.try_get("pushed_version")?,
        attempts: r.try_get("attempts")?,
        next_attempt: r.try_get("next_attempt")?,
        owner: r.try_get("owner")?,
        lease_until: r.try_get("lease_until")?,
        last_error: r.try_get("last_error")?,
    }))
}

/// One inventory as Placement's API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalInventory {
    pub class: String,
    pub limits: Limits,
}

/// One of the host's device providers.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalProvider {
    pub uuid: String,
    pub name: String,
    /// `None`: a child of the compute node; otherwise another device provider's uuid.
    pub parent: Option<String>,
    /// Sorted by class name.
    pub inventories: Vec<LocalInventory>,
    /// Sorted.
    pub traits: Vec<String>,
}

/// What a push copies: the host's device providers, parents before children.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalTree {
    /// The local compute node provider (`uuid`, `name`), if there is one.
    pub compute_node: Option<(String, String)>,
    pub providers: Vec<LocalProvider>,
}

/// The device providers of `host` (the providers of its deployables) as they are in
/// the built-in Placement, parents first.
pub async fn local_tree(tx: &mut Tx, host: &str) -> Result<LocalTree, StoreError> {
    let compute = providers::list(
        tx,
        &providers::Filter {
            name: Some(host.to_owned()),
            ..Default::default()
        },
    )
    .await?
    .into_iter()
    .next();
    let uuids: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT dp.rp_uuid FROM deployables dp JOIN devices d ON d.id = dp.device_id \
         WHERE d.hostname = $1 AND dp.rp_uuid IS NOT NULL ORDER BY dp.rp_uuid",
    )
    .bind(host)
    .fetch_all(&mut *tx)
    .await?;
    let mut found = Vec::with_capacity(uuids.len());
    for u in &uuids {
        let Some(rp) = providers::get(tx, u).await? else {
            continue;
        };
        let mut invs: Vec<LocalInventory> = inventories::list(tx, rp.id)
            .await?
            .into_iter()
            .map(|i| LocalInventory {
                limits: i.limits,
                class: i.rc_name,
            })
            .collect();
        invs.sort_by(|a, b| a.class.cmp(&b.class));
        let names: Vec<String> = traits::for_provider(tx, rp.id)
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect();
        let parent = match (&rp.parent_uuid, &compute) {
            (Some(p), Some(c)) if *p == c.uuid => None,
            (p, _) => p.clone(),
        };
        found.push(LocalProvider {
            uuid: rp.uuid,
            name: rp.name,
            parent,
            inventories: invs,
            traits: names,
        });
    }
    Ok(LocalTree {
        compute_node: compute.map(|c| (c.uuid, c.name)),
        providers: parents_first(found),
    })
}

/// Orders providers so each comes after its parent (when the parent is among them).
fn parents_first(mut ps: Vec<LocalProvider>) -> Vec<LocalProvider> {
    let parent_of: HashMap<String, Option<String>> = ps
        .iter()
        .map(|p| (p.uuid.clone(), p.parent.clone()))
        .collect();
    let depth = |uuid: &str| {
        let mut d = 0;
        let mut at = parent_of.get(uuid).cloned().flatten();
        while let Some(p) = at {
            d += 1;
            if d > parent_of.len() {
                break;
            }
            at = parent_of.get(&p).cloned().flatten();
        }
        d
    };
    ps.sort_by_cached_key(|p| (depth(&p.uuid), p.name.clone()));
    ps
}
