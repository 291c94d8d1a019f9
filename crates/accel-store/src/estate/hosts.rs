//! Hosts (root providers: compute nodes, and any other tree root) with their whole
//! provider trees: inventories with usage, traits, aggregates, the device behind each
//! device provider (health, status) and the host's last agent report.
//!
//! A page is four steps: the page's roots (filtered, ordered by name), every provider of
//! those trees, the world loader's inventories/usage/traits/aggregates for exactly those
//! providers ([`crate::placement::world::load_providers`], the same reads the candidate
//! search uses), and the devices and reports of those hosts.

use super::{bind_all, count, like, Estate, Page, Window};
use crate::placement::world;
use crate::{placeholders, StoreError, Tx};
use sqlx::Row;
use std::collections::HashMap;
use std::fmt::Write;

/// One inventory with its usage, named.
#[derive(Debug, Clone, PartialEq)]
pub struct InventoryView {
    pub resource_class: String,
    pub total: i64,
    pub reserved: i64,
    pub used: i64,
    /// `(total - reserved) * allocation_ratio`, Placement's capacity.
    pub capacity: i64,
    pub min_unit: i64,
    pub max_unit: i64,
    pub step_size: i64,
    pub allocation_ratio: f64,
}

/// The accelerator device a provider models (through its deployable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceView {
    pub uuid: String,
    /// `FPGA`, `GPU`, ...
    pub kind: String,
    pub vendor: String,
    pub model: String,
    /// `ok`, `unhealthy` or `vanished` (the agent's word).
    pub health: String,
    /// Why it is not `ok`: the agent's reason, or the server's for a vanished device.
    pub health_reason: Option<String>,
    /// When the health last changed (epoch seconds; `None` before it was recorded).
    pub health_since: Option<i64>,
    /// `enabled` or `disabled` (the operator's).
    pub status: String,
}

/// One provider of a host's tree.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderView {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub parent_id: Option<i64>,
    pub root_id: i64,
    pub generation: i64,
    pub inventories: Vec<InventoryView>,
    /// Trait names, sorted.
    pub traits: Vec<String>,
    pub aggregates: Vec<String>,
    pub device: Option<DeviceView>,
}

/// A root provider and its tree.
#[derive(Debug, Clone, PartialEq)]
pub struct HostView {
    pub root: i64,
    /// The whole tree, parents before children (depth first, siblings by name).
    pub providers: Vec<ProviderView>,
    /// Epoch seconds of the last agent report applied for this host (by root name).
    pub last_report: Option<i64>,
}

impl HostView {
    pub fn root(&self) -> &ProviderView {
        self.providers
            .iter()
            .find(|p| p.id == self.root)
            .unwrap_or(&self.providers[0])
    }

    /// Each provider with its depth under the root (0 for the root).
    pub fn with_depth(&self) -> Vec<(usize, &ProviderView)> {
        let by_id: HashMap<i64, &ProviderView> = self.providers.iter().map(|p| (p.id, p)).collect();
        self.providers
            .iter()
            .map(|p| {
                let mut depth = 0;
                let mut at = p.parent_id;
                while let Some(parent) = at.and_then(|id| by_id.get(&id)) {
                    depth += 1;
                    at = parent.parent_id;
                    if depth > self.providers.len() {
                        break;
                    }
                }
                (depth, p)
            })
            .collect()
    }
}

/// The filter of the hosts list: a root whose name matches, or whose tree has a
/// provider whose name matches or whose uuid is the text, or a consumer (an instance
/// or pod uuid) with allocations in the tree.
///
/// One pass over the providers' names: a root is a provider of its own tree (its
/// `root_provider_id` is itself), so the subquery covers the root's own name and
/// uuid too. A substring `LIKE` reads every name (no index serves `%x%`); with
/// 50,000 providers a second pass for the roots alone cost PostgreSQL as much again
/// (52 ms against 24 ms, `EXPLAIN ANALYZE`, docs/benchmarks.md).
fn roots_where(filter: &HostFilter) -> (String, Vec<String>) {
    let mut clause = "r.id = r.root_provider_id".to_owned();
    let mut args = Vec::new();
    if let Some((pattern, exact)) = like(filter.search.as_deref()) {
        clause.push_str(
            " AND r.id IN (SELECT p.root_provider_id FROM resource_providers p \
                WHERE p.name LIKE $1 OR p.uuid = $2 \
             UNION SELECT p.root_provider_id FROM allocations a \
                JOIN resource_providers p ON p.id = a.resource_provider_id \
                WHERE a.consumer_id = $2)",
        );
        args.extend([pattern, exact]);
    }
    // A device filter: the hosts with at least one such device (by the hostname the
    // agent reports, which is the compute node provider's name).
    let mut device = Vec::new();
    if let Some(t) = &filter.device_type {
        args.push(t.clone());
        device.push(format!("v.type = ${}", args.len()));
    }
    match filter.health {
        None => {}
        Some(HealthFilter::NotOk) => device.push("v.health <> 'ok'".to_owned()),
        Some(h) => {
            args.push(h.as_str().to_owned());
            device.push(format!("v.health = ${}", args.len()));
        }
    }
    if !device.is_empty() {
        let _ = write!(
            clause,
            " AND r.name IN (SELECT v.hostname FROM devices v WHERE {})",
            device.join(" AND ")
        );
    }
    (clause, args)
}

/// Which devices' hosts the hosts page lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthFilter {
    Ok,
    Unhealthy,
    Vanished,
    /// Unhealthy or vanished.
    NotOk,
}

impl HealthFilter {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthFilter::Ok => "ok",
            HealthFilter::Unhealthy => "unhealthy",
            HealthFilter::Vanished => "vanished",
            HealthFilter::NotOk => "not_ok",
        }
    }

    pub fn parse(s: &str) -> Option<HealthFilter> {
        [
            HealthFilter::Ok,
            HealthFilter::Unhealthy,
            HealthFilter::Vanished,
            HealthFilter::NotOk,
        ]
        .into_iter()
        .find(|h| h.as_str() == s)
    }
}

/// The hosts list's filter: a search (see [`roots_where`]) and the hosts with a
/// device of a type (`GPU`, `FPGA`, ...) and/or health.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFilter {
    pub search: Option<String>,
    pub device_type: Option<String>,
    pub health: Option<HealthFilter>,
}

impl Estate<'_> {
    /// One page of hosts, by root name, that `filter` keeps, with their trees.
    pub async fn hosts(
        &self,
        filter: &HostFilter,
        window: Window,
    ) -> Result<Page<HostView>, StoreError> {
        let filter = filter.clone();
        self.0
            .read(move |tx| Box::pin(async move { filtered(tx, &filter, window).await }))
            .await
    }

    /// Every provider's name by id: one scan (the candidate pages name providers of
    /// the whole index, and keep this per index version).
    pub async fn provider_names(&self) -> Result<HashMap<i64, String>, StoreError> {
        self.0.read_one(|tx| Box::pin(all_names(tx))).await
    }

    /// A page of the hosts that have Kubernetes slots, by name, matching `search`
    /// (a node, a pod's `namespace/name`, or a device address), with their held
    /// slots.
    pub async fn kubernetes(
        &self,
        search: Option<&str>,
        window: Window,
    ) -> Result<KubernetesPage, StoreError> {
        let search = search.map(str::to_owned);
        self.0
            .read(move |tx| {
                Box::pin(async move {
                    let hosts = kubernetes_hosts(tx, search.as_deref(), window).await?;
                    let slots = kubernetes_slots(tx, &hosts.items).await?;
                    Ok(KubernetesPage { hosts, slots })
                })
            })
            .await
    }
}

/// One page of hosts, by root name, that `filter` keeps.
async fn filtered(
    tx: &mut Tx,
    filter: &HostFilter,
    window: Window,
) -> Result<Page<HostView>, StoreError> {
    let (clause, args) = roots_where(filter);
    let count_sql = format!("SELECT COUNT(*) FROM resource_providers r WHERE {clause}");
    let total = count(tx, &count_sql, &args).await?;
    let sql = format!(
        "SELECT r.id FROM resource_providers r WHERE {clause} ORDER BY r.name{}",
        window.sql()
    );
    let roots: Vec<i64> = bind_all(sqlx::query(&sql), &args)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get::<i64, _>(0))
        .collect::<Result<_, _>>()?;
    let items = trees(tx, &roots).await?;
    Ok(Page { items, total })
}

/// The tree of the root provider `uuid` (or of the root of the provider `uuid`).
pub(crate) async fn tree(tx: &mut Tx, uuid: &str) -> Result<Option<HostView>, StoreError> {
    let root: Option<i64> =
        sqlx::query_scalar("SELECT root_provider_id FROM resource_providers WHERE uuid = $1")
            .bind(uuid)
            .fetch_optional(&mut *tx)
            .await?;
    match root {
        None => Ok(None),
        Some(root) => Ok(trees(tx, &[root]).await?.into_iter().next()),
    }
}

/// The trees of `roots`, in the order given.
async fn trees(tx: &mut Tx, roots: &[i64]) -> Result<Vec<HostView>, StoreError> {
    if roots.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT id, uuid, name, parent_provider_id, root_provider_id, generation \
         FROM resource_providers WHERE root_provider_id IN ({}) ORDER BY name",
        placeholders(1, roots.len())
    );
    let mut q = sqlx::query(&sql);
    for r in roots {
        q = q.bind(*r);
    }
    let mut providers = Vec::new();
    for r in q.fetch_all(&mut *tx).await? {
        providers.push(ProviderView {
            id: r.try_get("id")?,
            uuid: r.try_get("uuid")?,
            name: r.try_get("name")?,
            parent_id: r.try_get("parent_provider_id")?,
            root_id: r.try_get("root_provider_id")?,
            generation: r.try_get("generation")?,
            inventories: Vec::new(),
            traits: Vec::new(),
            aggregates: Vec::new(),
            device: None,
        });
    }
    let ids: Vec<i64> = providers.iter().map(|p| p.id).collect();
    let loaded = world::load_providers(tx, Some(&ids)).await?;
    let (rc_names, trait_names) = world::load_names(tx).await?;
    let loaded: HashMap<i64, world::WorldProvider> =
        loaded.into_iter().map(|w| (w.id, w)).collect();
    for p in &mut providers {
        let Some(w) = loaded.get(&p.id) else { continue };
        p.inventories = w
            .inventories
            .iter()
            .map(|inv| InventoryView {
                resource_class: rc_names
                    .get(&i64::from(inv.rc))
                    .cloned()
                    .unwrap_or_default(),
                total: inv.limits.total,
                reserved: inv.limits.reserved,
                used: inv.used,
                capacity: inv.capacity(),
                min_unit: inv.limits.min_unit,
                max_unit: inv.limits.max_unit,
                step_size: inv.limits.step_size,
                allocation_ratio: inv.limits.allocation_ratio,
            })
            .collect();
        p.traits = w
            .traits
            .iter()
            .filter_map(|t| trait_names.get(t).cloned())
            .collect();
        p.traits.sort();
        p.aggregates = w.aggregates.clone();
    }
    let uuids: Vec<String> = providers.iter().map(|p| p.uuid.clone()).collect();
    let devices = devices_of(tx, &uuids).await?;
    for p in &mut providers {
        p.device = devices.get(&p.uuid).cloned();
    }
    let root_names: Vec<String> = providers
        .iter()
        .filter(|p| p.id == p.root_id)
        .map(|p| p.name.clone())
        .collect();
    let reports = last_reports(tx, &root_names).await?;
    let mut by_root: HashMap<i64, Vec<ProviderView>> = HashMap::new();
    for p in providers {
        by_root.entry(p.root_id).or_default().push(p);
    }
    Ok(roots
        .iter()
        .filter_map(|root| {
            let tree = depth_first(*root, by_root.remove(root)?);
            let name = tree.iter().find(|p| p.id == *root)?.name.clone();
            Some(HostView {
                root: *root,
                providers: tree,
                last_report: reports.get(&name).copied(),
            })
        })
        .collect())
}

/// Orders a tree's providers (given sorted by name) parents first, depth first.
fn depth_first(root: i64, providers: Vec<ProviderView>) -> Vec<ProviderView> {
    let mut children: HashMap<Option<i64>, Vec<usize>> = HashMap::new();
    for (i, p) in providers.iter().enumerate() {
        let parent = if p.id == root { None } else { p.parent_id };
        children.entry(parent).or_default().push(i);
    }
    let mut order = Vec::with_capacity(providers.len());
    let mut stack: Vec<usize> = children.get(&None).cloned().unwrap_or_default();
    stack.reverse();
    while let Some(i) = stack.pop() {
        order.push(i);
        if let Some(kids) = children.get(&Some(providers[i].id)) {
            stack.extend(kids.iter().rev());
        }
    }
    let mut slots: Vec<Option<ProviderView>> = providers.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// The device behind each of the providers `uuids` (a deployable's `rp_uuid`).
async fn devices_of(
    tx: &mut Tx,
    uuids: &[String],
) -> Result<HashMap<String, DeviceView>, StoreError> {
    let mut out = HashMap::new();
    for chunk in uuids.chunks(500) {
        let sql = format!(
            "SELECT d.rp_uuid, v.uuid, v.type, v.vendor, v.model, v.health, v.status, \
             v.health_reason, v.health_since \
             FROM deployables d JOIN devices v ON v.id = d.device_id WHERE d.rp_uuid IN ({})",
            placeholders(1, chunk.len())
        );
        for r in bind_all(sqlx::query(&sql), chunk)
            .fetch_all(&mut *tx)
            .await?
        {
            out.insert(
                r.try_get::<String, _>(0)?,
                DeviceView {
                    uuid: r.try_get(1)?,
                    kind: r.try_get(2)?,
                    vendor: r.try_get(3)?,
                    model: r.try_get(4)?,
                    health: r.try_get(5)?,
                    status: r.try_get(6)?,
                    health_reason: r.try_get(7)?,
                    health_since: r.try_get(8)?,
                },
            );
        }
    }
    Ok(out)
}

/// When each host's agent last reported (epoch seconds).
async fn last_reports(tx: &mut Tx, hosts: &[String]) -> Result<HashMap<String, i64>, StoreError> {
    let mut out = HashMap::new();
    for chunk in hosts.chunks(500) {
        let sql = format!(
            "SELECT hostname, updated_at FROM agent_reports WHERE hostname IN ({})",
            placeholders(1, chunk.len())
        );
        for r in bind_all(sqlx::query(&sql), chunk)
            .fetch_all(&mut *tx)
            .await?
        {
            out.insert(r.try_get(0)?, r.try_get(1)?);
        }
    }
    Ok(out)
}

/// [`Estate::provider_names`]'s read.
async fn all_names(tx: &mut Tx) -> Result<HashMap<i64, String>, StoreError> {
    let mut out = HashMap::new();
    for r in sqlx::query("SELECT id, name FROM resource_providers")
        .fetch_all(&mut *tx)
        .await?
    {
        out.insert(r.try_get(0)?, r.try_get(1)?);
    }
    Ok(out)
}

/// Hostnames that have Kubernetes slots, a page of them by name, matching `search`.
async fn kubernetes_hosts(
    tx: &mut Tx,
    search: Option<&str>,
    window: Window,
) -> Result<Page<String>, StoreError> {
    let (clause, args) = match like(search) {
        None => (String::new(), Vec::new()),
        Some((pattern, exact)) => (
            " WHERE hostname LIKE $1 OR pod LIKE $1 OR device = $2".to_owned(),
            vec![pattern, exact],
        ),
    };
    let count_sql =
        format!("SELECT COUNT(*) FROM (SELECT DISTINCT hostname FROM kubernetes_slots{clause}) h");
    let total = count(tx, &count_sql, &args).await?;
    let sql = format!(
        "SELECT DISTINCT hostname FROM kubernetes_slots{clause} ORDER BY hostname{}",
        window.sql()
    );
    let items = bind_all(sqlx::query(&sql), &args)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get::<String, _>(0))
        .collect::<Result<_, _>>()?;
    Ok(Page { items, total })
}

/// A page of Kubernetes nodes ([`Estate::kubernetes`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesPage {
    /// The page's hostnames.
    pub hosts: Page<String>,
    /// The held slots of those hosts, by host then slot.
    pub slots: Vec<SlotView>,
}

/// One held Kubernetes slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotView {
    pub hostname: String,
    pub slot: String,
    /// `<node>` (an instance-level resource) or `C:<virtual id>:<node>` (a
    /// configuration-level, pooled one), as seed 001's deviceUsage writes it.
    pub usage: String,
    pub device: Option<String>,
    pub pod: Option<String>,
}

/// The held slots of `hosts`, by host then slot.
async fn kubernetes_slots(tx: &mut Tx, hosts: &[String]) -> Result<Vec<SlotView>, StoreError> {
    let mut out = Vec::new();
    for chunk in hosts.chunks(500) {
        let sql = format!(
            "SELECT hostname, slot, usage, device, pod FROM kubernetes_slots \
             WHERE hostname IN ({}) ORDER BY hostname, slot",
            placeholders(1, chunk.len())
        );
        for r in bind_all(sqlx::query(&sql), chunk)
            .fetch_all(&mut *tx)
            .await?
        {
            out.push(SlotView {
                hostname: r.try_get(0)?,
                slot: r.try_get(1)?,
                usage: r.try_get(2)?,
                device: r.try_get(3)?,
                pod: r.try_get(4)?,
            });
        }
    }
    Ok(out)
}
