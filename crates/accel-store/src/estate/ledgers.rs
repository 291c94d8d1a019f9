//! The GPU ledgers of a host as its console page shows them ([`HostPage::ledgers`]):
//! each partitioned GPU's memory slices, who holds which of them in which form, and
//! what each of its member providers has free now.
//!
//! Read inside the host page's snapshot ([`super::host`]) from the ledger's own rows
//! (`crate::partitions::rows`, the ones the claim settles) and the tree the page already
//! loaded: a member's total, reserved and used are its provider's inventory in that
//! tree, so the ledger and the inventories on one page never disagree. Nothing here is
//! worded: names (profiles, vGPU types) come from the reported geometry, the console
//! writes the sentences.
//!
//! [`HostPage::ledgers`]: super::HostPage::ledgers

use super::bind_all;
use super::hosts::{HostView, ProviderView};
use crate::partitions::{rows, Ledger};
use crate::{placeholders, StoreError, Tx};
use accel_core::partition::{members, Consumer, Geometry, Member, Span};
use sqlx::Row;
use std::collections::HashMap;

/// One partitioned GPU's ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerView {
    /// The GPU's own provider (the whole and VFIO forms).
    pub gpu_uuid: String,
    /// Its name (`<node>_<bdf>`), or the uuid when the tree lacks it.
    pub gpu_name: String,
    /// As the agent last reported it: MIG mode, memory slices, profiles, vGPU types,
    /// the MIG instances that exist.
    pub geometry: Geometry,
    /// In the order they were placed.
    pub holders: Vec<HolderView>,
    /// MIG instances on the GPU that no holder has (an operator's): they occupy their
    /// slices until a claim of the same profile there adopts them. Profile name and
    /// placement.
    pub unheld: Vec<(String, Span)>,
    /// The whole GPU first, then the MIG profiles and vGPU types as the report lists
    /// them (NVML's order: the smallest profile first).
    pub members: Vec<MemberView>,
}

/// Who holds part (or all) of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderView {
    /// The Placement consumer (an instance, a pod's claim uid).
    pub consumer: String,
    /// Its consumer type (`INSTANCE`, `KUBERNETES_POD`), when Placement knows one.
    pub consumer_type: Option<String>,
    /// The member provider it holds through.
    pub rp_uuid: String,
    pub form: Form,
}

/// How a holder takes the GPU, with the names the report gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Form {
    /// The whole GPU, as a container device.
    Whole,
    /// The whole GPU, by passthrough to a VM.
    Vfio,
    /// A MIG instance of `profile` (its name, `1g.10gb`; the id when the geometry no
    /// longer lists it) at `at`.
    Mig { profile: String, at: Span },
    /// A vGPU of `type_id` (`name` as reported); `at` is the MIG placement of a
    /// MIG-backed type, `None` for a time-sliced one.
    Vgpu {
        type_id: String,
        name: String,
        at: Option<Span>,
    },
}

impl Form {
    /// The word the console and its tests use: `whole`, `vfio`, `mig`, `vgpu`.
    pub fn kind(&self) -> &'static str {
        match self {
            Form::Whole => "whole",
            Form::Vfio => "vfio",
            Form::Mig { .. } => "mig",
            Form::Vgpu { .. } => "vgpu",
        }
    }

    /// The memory slices it occupies on a GPU of `slices`: a MIG instance (or a
    /// MIG-backed vGPU) its placement; the whole GPU, and a time-sliced vGPU, which
    /// shares the GPU with others of its type, every slice.
    pub fn span(&self, slices: u32) -> Span {
        match self {
            Form::Mig { at, .. } | Form::Vgpu { at: Some(at), .. } => *at,
            _ => Span {
                start: 0,
                size: slices,
            },
        }
    }

    fn of(c: &Consumer, g: &Geometry) -> Form {
        match c {
            Consumer::Whole => Form::Whole,
            Consumer::Vfio => Form::Vfio,
            Consumer::Mig { profile, at } => Form::Mig {
                profile: profile_name(g, *profile),
                at: *at,
            },
            Consumer::Vgpu { type_id, at } => Form::Vgpu {
                type_id: type_id.clone(),
                name: g
                    .vgpu_type(type_id)
                    .map_or_else(|| type_id.clone(), |t| t.name.clone()),
                at: *at,
            },
        }
    }
}

fn profile_name(g: &Geometry, id: u32) -> String {
    g.profile(id)
        .map_or_else(|| format!("profile {id}"), |p| p.name.clone())
}

/// One way of taking the GPU, and what its provider has free now.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberView {
    pub member: Member,
    /// `whole GPU`, the profile's name (`1g.10gb`) or the vGPU type's (`GRID H100-10C`).
    pub label: String,
    pub rp_uuid: String,
    /// Its provider's name, or the uuid when the tree lacks it.
    pub provider_name: String,
    /// The class the member is claimed by (the GPU's own for the whole GPU, as the
    /// report gave it).
    pub resource_class: Option<String>,
    /// Its provider's inventory of that class; `None` when it has none.
    pub inventory: Option<MemberInventory>,
    /// How many holders hold the GPU through it.
    pub held: usize,
}

/// A member provider's inventory, as Placement counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberInventory {
    pub total: i64,
    pub reserved: i64,
    pub used: i64,
    /// `capacity - used` (the capacity rule's): how many more Placement can hand out,
    /// which the ledger keeps equal to how many it can still create.
    pub free: i64,
}

/// The ledgers of `host`'s GPUs (all of them; only the asked GPU's when `asked` is
/// one of its members' providers), with member figures from `tree`.
pub(crate) async fn of_host(
    tx: &mut Tx,
    host: &str,
    tree: &HostView,
    asked: &str,
) -> Result<Vec<LedgerView>, StoreError> {
    let mut ledgers = rows::of_host(tx, host).await?;
    if let Some(one) = ledgers
        .iter()
        .position(|l| l.members.iter().any(|(u, _)| u == asked))
    {
        ledgers = vec![ledgers.swap_remove(one)];
    }
    let consumers: Vec<String> = ledgers
        .iter()
        .flat_map(|l| l.holders.iter().map(|h| h.consumer.clone()))
        .collect();
    let types = consumer_types(tx, &consumers).await?;
    let gpus: Vec<String> = ledgers.iter().map(|l| l.rp_uuid.clone()).collect();
    let classes = reported_classes(tx, &gpus).await?;
    let by_uuid: HashMap<&str, &ProviderView> = tree
        .providers
        .iter()
        .map(|p| (p.uuid.as_str(), p))
        .collect();
    Ok(ledgers
        .into_iter()
        .map(|l| view(l, &by_uuid, &types, &classes))
        .collect())
}

fn view(
    l: Ledger,
    providers: &HashMap<&str, &ProviderView>,
    types: &HashMap<String, String>,
    classes: &HashMap<String, String>,
) -> LedgerView {
    let g = &l.geometry;
    let name_of = |uuid: &str| {
        providers
            .get(uuid)
            .map_or_else(|| uuid.to_owned(), |p| p.name.clone())
    };
    let held = l.held();
    let order = members(g);
    let mut ordered: Vec<&(String, Member)> = l.members.iter().collect();
    ordered.sort_by_key(|(_, m)| order.iter().position(|o| o == m).unwrap_or(order.len()));
    let members = ordered
        .into_iter()
        .map(|(uuid, m)| {
            let resource_class = match m {
                Member::Whole => classes.get(&l.rp_uuid).cloned(),
                m => m.resource_class(g),
            };
            let inventory = resource_class.as_deref().and_then(|rc| {
                let p = providers.get(uuid.as_str())?;
                let i = p.inventories.iter().find(|i| i.resource_class == rc)?;
                Some(MemberInventory {
                    total: i.total,
                    reserved: i.reserved,
                    used: i.used,
                    free: (i.capacity - i.used).max(0),
                })
            });
            MemberView {
                label: match m {
                    Member::Whole => "whole GPU".to_owned(),
                    Member::Mig(p) => profile_name(g, *p),
                    Member::Vgpu(t) => g.vgpu_type(t).map_or_else(|| t.clone(), |v| v.name.clone()),
                },
                member: m.clone(),
                rp_uuid: uuid.clone(),
                provider_name: name_of(uuid),
                resource_class,
                inventory,
                held: held.iter().filter(|c| m.holds(c)).count(),
            }
        })
        .collect();
    // The instance each holder has (a MIG-backed vGPU's is its profile's); a standing
    // instance none of them has is an operator's, occupying its slices.
    let mut adopted: Vec<(u32, Span)> = held.iter().filter_map(|c| c.instance(g)).collect();
    let mut unheld = Vec::new();
    for s in &g.standing {
        match adopted.iter().position(|a| *a == (s.profile_id, s.at)) {
            Some(i) => {
                adopted.swap_remove(i);
            }
            None => unheld.push((profile_name(g, s.profile_id), s.at)),
        }
    }
    LedgerView {
        holders: l
            .holders
            .iter()
            .map(|h| HolderView {
                consumer: h.consumer.clone(),
                consumer_type: types.get(&h.consumer).cloned(),
                rp_uuid: h.rp_uuid.clone(),
                form: Form::of(&h.holder, g),
            })
            .collect(),
        gpu_name: name_of(&l.rp_uuid),
        gpu_uuid: l.rp_uuid.clone(),
        unheld,
        members,
        geometry: l.geometry,
    }
}

/// Each of `consumers`' Placement consumer type, where it has one.
async fn consumer_types(
    tx: &mut Tx,
    consumers: &[String],
) -> Result<HashMap<String, String>, StoreError> {
    let mut out = HashMap::new();
    for chunk in consumers.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT c.uuid, t.name FROM consumers c \
             JOIN consumer_types t ON t.id = c.consumer_type_id WHERE c.uuid IN ({})",
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

/// The resource class each GPU (by its own provider's uuid) is handed out whole by:
/// its deployable's reported `rc`, as the report made its inventory.
async fn reported_classes(
    tx: &mut Tx,
    gpus: &[String],
) -> Result<HashMap<String, String>, StoreError> {
    let mut out = HashMap::new();
    for chunk in gpus.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT d.rp_uuid, a.value FROM deployables d \
             JOIN attributes a ON a.deployable_id = d.id \
             WHERE a.key = 'rc' AND d.rp_uuid IN ({})",
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
