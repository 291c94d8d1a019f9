//! The slot reclaimer: kubelet never says that a pod has gone (there is no
//! deallocate), so held slots are compared with what kubelet's pod-resources API
//! lists, and those unlisted for the grace period are freed.
//!
//! A failed List frees nothing: a kubelet that is down or restarting must not make
//! running pods lose their devices.

use crate::channel::{connect, CallError};
use crate::proto::podresources as pb;
use crate::state::Shared;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one List may take.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// Every `(resource name, device id)` some container on the node holds.
pub async fn in_use(socket: &Path) -> Result<HashSet<(String, String)>, CallError> {
    Ok(listed(socket).await?.into_keys().collect())
}

/// Every `(resource name, device id)` some container on the node holds, with the pod
/// (`<namespace>/<name>`) it belongs to.
pub async fn listed(socket: &Path) -> Result<HashMap<(String, String), String>, CallError> {
    let call = async {
        let channel = connect(socket).await.map_err(CallError::Connect)?;
        let resp = pb::pod_resources_lister_client::PodResourcesListerClient::new(channel)
            .list(pb::ListPodResourcesRequest {})
            .await
            .map_err(|status| CallError::Refused {
                call: "List",
                status,
            })?;
        Ok(resp
            .into_inner()
            .pod_resources
            .into_iter()
            .flat_map(|p| {
                let pod = format!("{}/{}", p.namespace, p.name);
                p.containers
                    .into_iter()
                    .flat_map(|c| c.devices)
                    .map(move |d| (pod.clone(), d))
            })
            .flat_map(|(pod, d)| {
                let r = d.resource_name;
                d.device_ids
                    .into_iter()
                    .map(move |id| ((r.clone(), id), pod.clone()))
            })
            .collect())
    };
    tokio::time::timeout(LIST_TIMEOUT, call)
        .await
        .map_err(|_| CallError::TimedOut("pod-resources List"))?
}

/// Frees the slots no pod holds any more.
pub struct Reclaimer {
    shared: Arc<Shared>,
    socket: PathBuf,
    grace: Duration,
    /// The last successful listing: which pod holds which `(resource, device id)`.
    pods: HashMap<(String, String), String>,
}

impl Reclaimer {
    pub fn new(shared: Arc<Shared>, socket: impl Into<PathBuf>, grace: Duration) -> Reclaimer {
        Reclaimer {
            shared,
            socket: socket.into(),
            grace,
            pods: HashMap::new(),
        }
    }

    /// One pass at `now`; `Ok(true)` when slots were freed.
    pub async fn step(&mut self, now: Instant) -> Result<bool, CallError> {
        let pods = listed(&self.socket).await?;
        let in_use: HashSet<(String, String)> = pods.keys().cloned().collect();
        self.pods = pods;
        Ok(self.shared.write(|t| {
            let changed = t.reclaim(&in_use, now, self.grace);
            (changed, changed)
        }))
    }

    /// The pods of the last successful listing.
    pub fn pods(&self) -> &HashMap<(String, String), String> {
        &self.pods
    }
}
