//! The estate as the candidate engine sees it, read through the standard Placement API
//! only (so `accel explain` works against upstream Placement too): one
//! `GET /resource_providers` for the forest, then per provider its inventories,
//! usages, traits and aggregates, at most [`IN_FLIGHT`] providers at a time.
//!
//! With `--root` only that tree and the sharing providers
//! (`required=MISC_SHARES_VIA_AGGREGATE`) are read in detail; the other providers stay
//! in the snapshot with nothing on them, so ids, `in_tree` and parent links still
//! resolve while the work is bounded by one tree.

use std::collections::{HashMap, HashSet};

use accel_api::placement::{self, mv, Client};
use accel_core::candidates::explain::Names;
use accel_core::candidates::{Inventory, Provider, ProviderId, RcId, Snapshot, TraitId};
use accel_core::capacity::Limits;
use anyhow::{bail, Context};
use tokio::task::JoinSet;

/// Providers read at once (each is four GETs in a row).
const IN_FLIGHT: usize = 16;

/// Every read is at 1.18: root and parent uuids (1.14), `required` on the provider
/// list (1.18); upstream Placement has served it since Queens.
const READ: placement::Version = mv::PROVIDERS_REQUIRED;

/// Placement's sharing trait.
const SHARING: &str = "MISC_SHARES_VIA_AGGREGATE";

/// Interned class and trait names, and every provider's name, for the engine's
/// detail sentences and for the output.
#[derive(Debug, Default)]
pub struct Catalog {
    classes: Vec<String>,
    class_ids: HashMap<String, RcId>,
    traits: Vec<String>,
    trait_ids: HashMap<String, TraitId>,
    provider_names: Vec<String>,
}

impl Catalog {
    /// The id of class `name`, a new one on first sight.
    pub fn class(&mut self, name: &str) -> RcId {
        intern(&mut self.classes, &mut self.class_ids, name)
    }

    /// The id of trait `name`, a new one on first sight.
    pub fn trait_id(&mut self, name: &str) -> TraitId {
        intern(&mut self.traits, &mut self.trait_ids, name)
    }
}

fn intern(names: &mut Vec<String>, ids: &mut HashMap<String, u32>, name: &str) -> u32 {
    if let Some(&id) = ids.get(name) {
        return id;
    }
    let id = names.len() as u32;
    names.push(name.to_owned());
    ids.insert(name.to_owned(), id);
    id
}

impl Names for Catalog {
    fn provider(&self, id: ProviderId) -> String {
        self.provider_names
            .get(id.index())
            .cloned()
            .unwrap_or_else(|| format!("#{}", id.0))
    }
    fn resource_class(&self, rc: RcId) -> String {
        self.classes.get(rc as usize).cloned().unwrap_or_default()
    }
    fn trait_name(&self, t: TraitId) -> String {
        self.traits.get(t as usize).cloned().unwrap_or_default()
    }
}

/// What was read.
pub struct Estate {
    pub snapshot: Snapshot,
    pub catalog: Catalog,
    /// Provider uuid to its root's uuid, for every provider.
    pub root_of: HashMap<String, String>,
    /// The root `--root` named.
    pub only_root: Option<ProviderId>,
}

/// One provider's details.
struct Detail {
    inventories: placement::Inventories,
    usages: placement::ProviderUsages,
    traits: Vec<String>,
    aggregates: Vec<String>,
}

async fn detail(client: Client, uuid: String) -> anyhow::Result<(String, Detail)> {
    let what = |w: &str| format!("reading the {w} of provider {uuid}");
    let inventories = client
        .inventories(READ, &uuid)
        .await
        .with_context(|| what("inventories"))?;
    let usages = client
        .provider_usages(READ, &uuid)
        .await
        .with_context(|| what("usages"))?;
    let traits = client
        .provider_traits(READ, &uuid)
        .await
        .with_context(|| what("traits"))?
        .traits;
    let aggregates = client
        .aggregates(READ, &uuid)
        .await
        .with_context(|| what("aggregates"))?
        .aggregates;
    Ok((
        uuid,
        Detail {
            inventories,
            usages,
            traits,
            aggregates,
        },
    ))
}

/// The details of `uuids`, [`IN_FLIGHT`] providers at a time.
async fn details(client: &Client, uuids: Vec<String>) -> anyhow::Result<HashMap<String, Detail>> {
    let mut out = HashMap::with_capacity(uuids.len());
    let mut tasks = JoinSet::new();
    let mut queue = uuids.into_iter();
    loop {
        while tasks.len() < IN_FLIGHT {
            let Some(uuid) = queue.next() else { break };
            tasks.spawn(detail(client.clone(), uuid));
        }
        let Some(done) = tasks.join_next().await else {
            break;
        };
        let (uuid, d) = done.context("a provider read panicked")??;
        out.insert(uuid, d);
    }
    Ok(out)
}

/// Reads the forest (the tree of `root` and the sharing providers in detail, when
/// given: a name or uuid of any provider of the tree).
pub async fn read(client: &Client, root: Option<&str>) -> anyhow::Result<Estate> {
    let all = client
        .providers(READ, &[])
        .await
        .context("listing resource providers")?;
    let root_of: HashMap<String, String> = all
        .iter()
        .map(|p| {
            let root = p
                .root_provider_uuid
                .clone()
                .unwrap_or_else(|| p.uuid.clone());
            (p.uuid.clone(), root)
        })
        .collect();
    let only_root_uuid = match root {
        None => None,
        Some(r) => {
            let Some(p) = all.iter().find(|p| p.uuid == r || p.name == r) else {
                bail!("--root {r}: no resource provider has this name or uuid");
            };
            Some(root_of[&p.uuid].clone())
        }
    };
    let wanted: Vec<String> = match &only_root_uuid {
        None => all.iter().map(|p| p.uuid.clone()).collect(),
        Some(r) => {
            let sharing = client
                .providers(READ, &[("required", SHARING)])
                .await
                .context("listing the sharing providers")?;
            let mut set: HashSet<String> = sharing.into_iter().map(|p| p.uuid).collect();
            set.extend(
                all.iter()
                    .filter(|p| root_of[&p.uuid] == *r)
                    .map(|p| p.uuid.clone()),
            );
            set.into_iter().collect()
        }
    };
    let mut details = details(client, wanted).await?;

    let index: HashMap<&str, ProviderId> = all
        .iter()
        .enumerate()
        .map(|(i, p)| (p.uuid.as_str(), ProviderId(i as u32)))
        .collect();
    let id_of = |uuid: &str| -> anyhow::Result<ProviderId> {
        index.get(uuid).copied().with_context(|| {
            format!("provider {uuid} is named as a parent or root but is not in the list")
        })
    };
    let mut catalog = Catalog::default();
    let mut providers = Vec::with_capacity(all.len());
    for p in &all {
        let uuid = uuid::Uuid::parse_str(&p.uuid)
            .with_context(|| format!("provider uuid {:?}", p.uuid))?;
        let parent = p.parent_provider_uuid.as_deref().map(id_of).transpose()?;
        let root = id_of(&root_of[&p.uuid])?;
        let mut provider = Provider {
            uuid,
            parent,
            root,
            inventories: Vec::new(),
            traits: Vec::new(),
            aggregates: Vec::new(),
        };
        if let Some(d) = details.remove(&p.uuid) {
            for (class, inv) in d.inventories.inventories.iter() {
                provider.inventories.push(Inventory {
                    rc: catalog.class(class),
                    limits: Limits {
                        total: inv.total,
                        reserved: inv.reserved,
                        min_unit: inv.min_unit,
                        max_unit: inv.max_unit,
                        step_size: inv.step_size,
                        allocation_ratio: inv.allocation_ratio,
                    },
                    used: d.usages.usages.get(class).unwrap_or(0),
                });
            }
            provider.traits = d.traits.iter().map(|t| catalog.trait_id(t)).collect();
            provider.aggregates = d
                .aggregates
                .iter()
                .filter_map(|a| uuid::Uuid::parse_str(a).ok())
                .collect();
        }
        catalog.provider_names.push(p.name.clone());
        providers.push(provider);
    }
    let sharing = catalog.trait_id(SHARING);
    let snapshot = Snapshot::new(providers, Some(sharing))
        .map_err(|e| anyhow::anyhow!("the provider forest Placement answered: {e}"))?;
    let only_root = only_root_uuid.map(|u| index[u.as_str()]);
    Ok(Estate {
        snapshot,
        catalog,
        root_of,
        only_root,
    })
}
