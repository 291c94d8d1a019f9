//! The Placement side of a report: each deployable's provider made to match its
//! records (inventories from `rc` and `inventory:*` attributes, reserved in full while
//! the device is unavailable or not yet cleaned after a release; traits from `trait*` attributes). Apart from the records
//! diff ([`super::records`]) because it reads them back as a whole, level by level, and
//! batches the creation of new providers.

use crate::accelerator::hardware::{self, Deployable, Device};
use crate::accelerator::Refused;
use crate::placement::{classes, inventories, providers, traits};
use crate::{placeholders, StoreError, Tx};
use accel_core::accelerator::{DeviceHealth, DeviceStatus};
use accel_core::capacity::Limits;
use std::collections::{HashMap, HashSet};

/// Trait and class ids by name, looked up once per report: a host's devices share
/// most of their names, and one lookup per name per provider was a large part of a
/// first report's statements.
#[derive(Default)]
pub(super) struct Names {
    traits: HashMap<String, i64>,
    classes: HashMap<String, (i64, String)>,
}

fn is_class_exists(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Refused(crate::Refused::Placement(
            crate::refused::placement::Refused::ClassExists { .. }
        ))
    )
}

impl Names {
    async fn class(&mut self, tx: &mut Tx, rc: &str) -> Result<(i64, String), StoreError> {
        if let Some(c) = self.classes.get(rc) {
            return Ok(c.clone());
        }
        let class = match classes::get(tx, rc).await? {
            Some(c) => c,
            None => match classes::create(tx, rc).await {
                Ok(c) => c,
                // Another host's first report created it meanwhile: PostgreSQL's insert
                // waited for that one to commit, and this statement now sees it. (A
                // snapshot that still cannot see it refuses as before.)
                Err(e) if is_class_exists(&e) => match classes::get(tx, rc).await? {
                    Some(c) => c,
                    None => return Err(e),
                },
                Err(e) => return Err(e),
            },
        };
        let c = (class.id, class.name);
        self.classes.insert(rc.to_owned(), c.clone());
        Ok(c)
    }

    /// Ids of `wanted` (custom traits are created when missing; an unknown standard
    /// trait is an error naming the deployable).
    async fn traits(
        &mut self,
        tx: &mut Tx,
        wanted: &[&str],
        deployable: &str,
    ) -> Result<Vec<i64>, StoreError> {
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|t| !self.traits.contains_key(*t))
            .collect();
        if !missing.is_empty() {
            for (name, id) in traits::ids_by_name(tx, &missing).await? {
                self.traits.insert(name, id);
            }
        }
        let mut ids = Vec::with_capacity(wanted.len());
        for &name in wanted {
            let id = match self.traits.get(name) {
                Some(&id) => id,
                None if name.starts_with(accel_core::names::CUSTOM_PREFIX) => {
                    let id = traits::ensure(tx, name).await?.0.id;
                    self.traits.insert(name.to_owned(), id);
                    id
                }
                None => {
                    return Err(Refused::UnknownTrait {
                        name: name.to_owned(),
                        deployable: deployable.to_owned(),
                    }
                    .into())
                }
            };
            ids.push(id);
        }
        Ok(ids)
    }
}

/// Reconciles the providers of `devices`' deployables, parents first: their
/// deployables, attributes and existing providers are read once; the providers that do
/// not exist yet are created together, a level at a time (cards, then their regions),
/// with their inventories and traits in a few multi-row statements (a first report
/// creates them all); the others are compared one by one. A top-level deployable's
/// parent is `compute` (`None`: nothing is created).
pub(super) async fn sync_devices(
    tx: &mut Tx,
    compute: Option<&providers::Provider>,
    devices: &[Device],
    names: &mut Names,
) -> Result<(), StoreError> {
    let dev_ids: Vec<i64> = devices.iter().map(|d| d.id).collect();
    let deps = hardware::deployables_of_devices(tx, &dev_ids).await?;
    let dep_ids: Vec<i64> = deps.iter().map(|d| d.id).collect();
    let attrs = hardware::attributes_of(tx, &dep_ids).await?;
    let uuids: Vec<&str> = deps.iter().filter_map(|d| d.rp_uuid.as_deref()).collect();
    let mut rps: HashMap<String, providers::Provider> = providers::existing(tx, &uuids)
        .await?
        .into_iter()
        .map(|p| (p.uuid.clone(), p))
        .collect();
    // A provider between its release and its cleaning stays reserved whatever the
    // report says (accelerator/cleaning.rs): one rule for both reasons.
    let uncleaned = uncleaned(tx, &uuids).await?;
    // A partitioned GPU's providers are reserved as its ledger says (crate::partitions).
    let ledger = crate::partitions::reserves_of(tx, &uuids).await?;
    let unavailable: HashMap<i64, bool> = devices
        .iter()
        .map(|d| {
            let off = d.status == DeviceStatus::Maintaining || d.health != DeviceHealth::Ok;
            (d.id, off)
        })
        .collect();
    let rp_of: HashMap<i64, Option<&str>> =
        deps.iter().map(|d| (d.id, d.rp_uuid.as_deref())).collect();
    let no_attrs = Vec::new();
    let mut done: HashSet<i64> = HashSet::with_capacity(deps.len());
    while done.len() < deps.len() {
        // This level: deployables whose parent (if any) is done.
        let level: Vec<&Deployable> = deps
            .iter()
            .filter(|d| !done.contains(&d.id))
            .filter(|d| {
                d.parent_id
                    .is_none_or(|p| done.contains(&p) || !rp_of.contains_key(&p))
            })
            .collect();
        if level.is_empty() {
            return Err(Refused::ParentCycle.into());
        }
        let mut new: Vec<(
            &Deployable,
            providers::Provider,
            Vec<inventories::Inventory>,
            Vec<i64>,
        )> = Vec::new();
        let mut old: Vec<&Deployable> = Vec::new();
        for d in &level {
            done.insert(d.id);
            let Some(uuid) = d.rp_uuid.as_deref() else {
                continue;
            };
            if rps.contains_key(uuid) {
                old.push(d);
                continue;
            }
            let parent = match d.parent_id {
                Some(p) => rp_of
                    .get(&p)
                    .copied()
                    .flatten()
                    .and_then(|u| rps.get(u))
                    .cloned(),
                None => compute.cloned(),
            };
            let Some(parent) = parent else { continue };
            let a = attrs.get(&d.id).unwrap_or(&no_attrs);
            let off = unavailable[&d.device_id] || uncleaned.contains(uuid);
            let mode = Reserving {
                off,
                ledger: ledger.get(uuid).copied(),
                rp_id: None,
            };
            let (inv, tr) = desired(tx, d, a, mode, names).await?;
            new.push((d, parent, inv, tr));
        }
        let children: Vec<providers::NewChild> = new
            .iter()
            .map(|(d, parent, inv, tr)| providers::NewChild {
                uuid: d.rp_uuid.as_deref().unwrap_or_default(),
                name: &d.name,
                parent,
                generation: i64::from(!inv.is_empty() || !tr.is_empty()),
            })
            .collect();
        let created = providers::create_many(tx, &children).await?;
        let mut inv_rows = Vec::new();
        let mut trait_rows = Vec::new();
        for (rp, (_, _, inv, tr)) in created.iter().zip(&new) {
            inv_rows.extend(inv.iter().map(|i| (rp.id, i)));
            trait_rows.extend(tr.iter().map(|t| (rp.id, *t)));
        }
        inventories::insert_many_on_new(tx, &inv_rows).await?;
        traits::insert_many_on_new(tx, &trait_rows).await?;
        rps.extend(created.into_iter().map(|p| (p.uuid.clone(), p)));
        for d in old {
            let Some(rp) = d.rp_uuid.as_deref().and_then(|u| rps.get(u)).cloned() else {
                continue;
            };
            let a = attrs.get(&d.id).unwrap_or(&no_attrs);
            let off = unavailable[&d.device_id] || uncleaned.contains(rp.uuid.as_str());
            let mode = Reserving {
                off,
                ledger: ledger.get(&rp.uuid).copied(),
                rp_id: Some(rp.id),
            };
            let (want, trait_ids) = desired(tx, d, a, mode, names).await?;
            let rp = sync_provider(tx, rp, &want, &trait_ids).await?;
            rps.insert(rp.uuid.clone(), rp);
        }
    }
    Ok(())
}

/// What a deployable's provider reserves: everything while it is `off` (unavailable
/// or uncleaned), else what its GPU's ledger says, if it has one (`rp_id`: the
/// provider, when it exists, whose usage the ledger may leave room for).
#[derive(Debug, Clone, Copy)]
struct Reserving {
    off: bool,
    ledger: Option<crate::partitions::Reserve>,
    rp_id: Option<i64>,
}

/// The inventories (by class id) and trait ids a deployable's provider should have:
/// `rc` with `num_accelerators`, each `inventory:<RC>` with its value, reserved as
/// [`Reserving`] says; the `trait*` attributes' values.
async fn desired(
    tx: &mut Tx,
    d: &Deployable,
    attrs: &[hardware::Attribute],
    mode: Reserving,
    names: &mut Names,
) -> Result<(Vec<inventories::Inventory>, Vec<i64>), StoreError> {
    let mut wanted: Vec<(&str, i64)> = Vec::new();
    for a in attrs {
        if a.key == "rc" && d.num_accelerators > 0 {
            wanted.push((&a.value, d.num_accelerators));
        } else if let Some(rc) = a.key.strip_prefix("inventory:") {
            match a.value.parse::<i64>() {
                Ok(n) if n > 0 => wanted.push((rc, n)),
                _ => {
                    return Err(Refused::BadInventory {
                        deployable: d.name.clone(),
                        key: a.key.clone(),
                        value: a.value.clone(),
                    }
                    .into())
                }
            }
        }
    }
    let mut want = Vec::new();
    for (rc, n) in wanted {
        let (rc_id, rc_name) = names.class(tx, rc).await?;
        let reserved = match (mode.off, mode.ledger) {
            (true, _) => n,
            (false, None) => 0,
            (false, Some(r)) => {
                let used = match (r, mode.rp_id) {
                    (crate::partitions::Reserve::AllButUsed, Some(rp)) => {
                        crate::partitions::used_of(tx, rp, rc_id).await?
                    }
                    _ => 0,
                };
                r.amount(n, used)
            }
        };
        let limits = Limits {
            reserved,
            ..Limits::whole(n)
        };
        want.push(inventories::Inventory::new(rc_id, rc_name, limits));
    }
    want.sort_by_key(|i| i.rc_id);
    let trait_names: Vec<&str> = attrs
        .iter()
        .filter(|a| a.key.starts_with("trait"))
        .map(|a| a.value.as_str())
        .collect();
    let trait_ids = names.traits(tx, &trait_names, &d.name).await?;
    Ok((want, trait_ids))
}

/// Makes an existing provider's inventories and traits `want` and `trait_ids`;
/// returns it as it now is.
async fn sync_provider(
    tx: &mut Tx,
    mut rp: providers::Provider,
    want: &[inventories::Inventory],
    trait_ids: &[i64],
) -> Result<providers::Provider, StoreError> {
    let same = {
        let have = inventories::list(tx, rp.id).await?;
        have.len() == want.len()
            && have.iter().zip(want).all(|(h, w)| {
                let (h, w, rc) = (&h.limits, &w.limits, (h.rc_id, w.rc_id));
                (
                    rc.0,
                    h.total,
                    h.reserved,
                    h.max_unit,
                    h.min_unit,
                    h.step_size,
                ) == (rc.1, w.total, w.reserved, w.max_unit, 1, 1)
                    && h.allocation_ratio == 1.0
            })
    };
    if !same {
        rp.generation = inventories::replace(tx, &rp, want).await?;
    }
    rp.generation = traits::set_for_provider(tx, &rp, trait_ids).await?;
    Ok(rp)
}

/// Applies a device's status to its providers' inventories (`reserved` = total while
/// `maintaining`, unhealthy or vanished; 0 otherwise), for every deployable of the
/// device (upstream updates one deployable, chosen by the device's id: a known bug).
pub async fn apply_status(tx: &mut Tx, device: &Device) -> Result<(), StoreError> {
    sync_devices(
        tx,
        None,
        std::slice::from_ref(device),
        &mut Names::default(),
    )
    .await
}

/// Of `rp_uuids`, those whose cleaning (`device_cleanings`, see
/// `accelerator::cleaning`) is not `clean`: the report keeps them reserved.
pub(crate) async fn uncleaned(
    tx: &mut Tx,
    rp_uuids: &[&str],
) -> Result<HashSet<String>, StoreError> {
    let mut out = HashSet::new();
    for chunk in rp_uuids.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT rp_uuid FROM device_cleanings WHERE state <> 'clean' AND rp_uuid IN ({})",
            placeholders(1, chunk.len())
        );
        let mut q = sqlx::query_scalar::<_, String>(&sql);
        for u in chunk {
            q = q.bind(u.to_string());
        }
        out.extend(q.fetch_all(&mut *tx).await?);
    }
    Ok(out)
}
