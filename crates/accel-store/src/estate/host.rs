//! One host's page in one snapshot ([`Estate::host`]): its provider tree, its GPUs'
//! ledgers, its devices' cleanings, the consumers and ARQs on it, and the device history. The page is read
//! as one because its lists name each other (a history row's provider is looked up in
//! the tree, an ARQ's device too): read apart, a report landing between two reads
//! would show a tree and a history that disagree.

use super::activity::{self, ArqView, ConsumerFilter, ConsumerView};
use super::hosts::{self, HostView};
use super::ledgers::{self, LedgerView};
use super::{Estate, Page, Window};
use crate::accelerator::{cleaning, history};
use crate::StoreError;

/// What one host's page shows ([`Estate::host`]).
#[derive(Debug, Clone, PartialEq)]
pub struct HostPage {
    pub tree: HostView,
    /// The ledgers of the host's partitioned GPUs: the asked GPU's alone when `uuid`
    /// is one of its providers', else every one, in the order they were reported.
    pub ledgers: Vec<LedgerView>,
    /// Every device provider of the host with its cleaning, by name.
    pub cleanings: Vec<cleaning::DeviceCleaning>,
    /// The first consumers allocating from the tree or with an ARQ on the host.
    pub consumers: Page<ConsumerView>,
    /// The newest ARQs bound or binding to the host.
    pub arqs: Page<ArqView>,
    /// The device history, newest first: the asked device's when `uuid` is a device
    /// provider's, else that of every device of the host.
    pub history: Vec<history::Event>,
}

impl Estate<'_> {
    /// The page of the host whose tree holds the provider `uuid`, each list at most
    /// `shown` rows (the totals count them all); `None` when no provider has `uuid`.
    pub async fn host(&self, uuid: &str, shown: u64) -> Result<Option<HostPage>, StoreError> {
        let uuid = uuid.to_owned();
        self.0
            .read(move |tx| {
                Box::pin(async move {
                    let Some(tree) = hosts::tree(tx, &uuid).await? else {
                        return Ok(None);
                    };
                    let root = tree.root();
                    let (root_uuid, root_name) = (root.uuid.as_str(), root.name.as_str());
                    let ledgers = ledgers::of_host(tx, root_name, &tree, &uuid).await?;
                    let cleanings = cleaning::list(tx, Some(root_name)).await?;
                    let consumers = activity::consumers_where(
                        tx,
                        ConsumerFilter::Host {
                            root_uuid,
                            hostname: root_name,
                        },
                        Window {
                            offset: 0,
                            limit: shown,
                        },
                    )
                    .await?;
                    let arqs = activity::arqs_on_host(tx, root_name, shown).await?;
                    let history =
                        history::of_devices(tx, &devices_shown(&tree, &uuid), shown as i64).await?;
                    Ok(Some(HostPage {
                        tree,
                        ledgers,
                        cleanings,
                        consumers,
                        arqs,
                        history,
                    }))
                })
            })
            .await
    }
}

/// Whose history a page shows: a device provider's page, that device's; a host's
/// (or any other provider's), every device of the tree, once each.
fn devices_shown(tree: &HostView, uuid: &str) -> Vec<String> {
    let asked = tree
        .providers
        .iter()
        .find(|p| p.uuid == uuid)
        .and_then(|p| p.device.as_ref());
    if let Some(d) = asked {
        return vec![d.uuid.clone()];
    }
    let mut all: Vec<String> = tree
        .providers
        .iter()
        .filter_map(|p| p.device.as_ref().map(|d| d.uuid.clone()))
        .collect();
    all.sort();
    all.dedup();
    all
}
