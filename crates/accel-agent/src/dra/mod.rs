//! The agent's side of the DRA kubelet plugin (`accel_k8s::dra`): ResourceClaims read
//! from the Kubernetes API server ([`KubeApi`], whose client is [`client`]) and claims
//! held through the server ([`ServerClaims`]: `PUT`/`DELETE
//! /v2/agent/hosts/{node}/kubernetes/claims/{uid}`, a Placement consumer per claim;
//! the devices VMs hold, withdrawn from the node's ResourceSlice); the slices
//! themselves written through [`KubeApi`] too, each write's answer read back (the
//! driver sees whether the API server kept the devices' taints), and a dry-run create
//! (`dryRun=All`) to ask that before a taint is first written.
//!
//! The objects cross as `accel_k8s::dra::objects` types, read from and written as the
//! API's JSON here; the seams' errors are accel-k8s's (`ApiError`, `RecordError`),
//! each carrying this side's error as its cause.

pub mod client;
pub mod mig;

pub use client::{ConfigError, KubeApi, RequestError, WatchEnd, SERVICE_ACCOUNT_DIR};

use accel_k8s::dra::objects::{List, Node, ResourceClaim, ResourceSlice};
use accel_k8s::dra::slices::{Held, SliceApi, SliceList};
use accel_k8s::dra::{ApiError, BoxFuture, ClaimApi, ClaimHolds, ClaimRecord};
use accel_k8s::RecordError;
use serde_json::Value;
use std::collections::BTreeSet;

const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";
/// How long the API server keeps one watch open (`timeoutSeconds`); the request's own
/// timeout is a little longer.
pub const WATCH_SECONDS: u64 = 300;

fn slice_selector(node: &str, driver: &str) -> String {
    format!("fieldSelector=spec.nodeName%3D{node}%2Cspec.driver%3D{driver}")
}

/// A slice as the API's JSON.
fn to_json(slice: &ResourceSlice) -> Result<Value, ApiError> {
    serde_json::to_value(slice).map_err(ApiError::client)
}

impl KubeApi {
    /// Sends `slice` and reads back the slice the API server answers (as it keeps it).
    async fn write_slice(
        &self,
        method: reqwest::Method,
        path: &str,
        slice: &ResourceSlice,
    ) -> Result<ResourceSlice, ApiError> {
        let call = format!("{method} {}{path}", self.base());
        let body = to_json(slice)?;
        let answer = self.call(method, path, Some(&body)).await?;
        serde_json::from_value(answer)
            .map_err(|source| RequestError::Decode { call, source }.into())
    }

    /// A watch (`watch=true`, newline-delimited JSON events) at `url`; the first
    /// added, modified or deleted event ends it.
    async fn watch(&self, url: String) -> Result<(), RequestError> {
        let call = format!("watch {url}");
        let end = |why: WatchEnd| RequestError::Watch {
            call: call.clone(),
            why,
        };
        let mut resp = self
            .request(reqwest::Method::GET, &url)?
            .timeout(std::time::Duration::from_secs(WATCH_SECONDS + 30))
            .send()
            .await
            .map_err(|e| end(WatchEnd::Read(e)))?;
        if !resp.status().is_success() {
            return Err(end(WatchEnd::Status(resp.status())));
        }
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| end(WatchEnd::Read(e)))? {
            buf.extend_from_slice(&chunk);
            while let Some(newline) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=newline).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match event(&line) {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    Err(why) => return Err(end(why)),
                }
            }
        }
        Err(end(WatchEnd::Ended))
    }
}

/// One watch event: a change (true), a bookmark (false), or how the watch ended.
fn event(line: &[u8]) -> Result<bool, WatchEnd> {
    let event: Value = serde_json::from_slice(line).map_err(WatchEnd::NotJson)?;
    match event["type"].as_str() {
        Some("ADDED" | "MODIFIED" | "DELETED") => Ok(true),
        Some("BOOKMARK") => Ok(false),
        Some("ERROR") => {
            let message = event["object"]["message"].as_str().unwrap_or("");
            Err(WatchEnd::Error(message.to_owned()))
        }
        _ => Err(WatchEnd::NotAnEvent),
    }
}

/// A Node without a uid: the slices could not name their owner.
#[derive(Debug, thiserror::Error)]
#[error("node {0} has no uid")]
pub struct NoUid(pub String);

impl SliceApi for KubeApi {
    fn node_uid(&self, node: &str) -> BoxFuture<'_, Result<String, ApiError>> {
        let path = format!("/api/v1/nodes/{node}");
        Box::pin(async move {
            let n: Node = self.get_as(&path).await?;
            n.metadata.uid.ok_or_else(|| ApiError::client(NoUid(path)))
        })
    }

    fn list_slices(&self, node: &str, driver: &str) -> BoxFuture<'_, Result<SliceList, ApiError>> {
        let path = format!("{SLICES}?{}", slice_selector(node, driver));
        Box::pin(async move {
            let list: List<ResourceSlice> = self.get_as(&path).await?;
            Ok(SliceList {
                items: list.items,
                resource_version: list.metadata.resource_version,
            })
        })
    }

    /// A watch from `resource_version` of the slices of `driver` on `node`.
    fn watch_slices(
        &self,
        node: &str,
        driver: &str,
        resource_version: &str,
    ) -> BoxFuture<'_, Result<(), ApiError>> {
        let url = format!(
            "{}{SLICES}?watch=true&resourceVersion={resource_version}&timeoutSeconds={WATCH_SECONDS}&{}",
            self.base(),
            slice_selector(node, driver)
        );
        Box::pin(async move { Ok(self.watch(url).await?) })
    }

    fn create_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        Box::pin(async move {
            self.write_slice(reqwest::Method::POST, SLICES, &slice)
                .await
        })
    }

    fn update_slice(&self, slice: ResourceSlice) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        Box::pin(async move {
            let name = slice.metadata.name.clone().unwrap_or_default();
            let path = format!("{SLICES}/{name}");
            self.write_slice(reqwest::Method::PUT, &path, &slice).await
        })
    }

    /// `POST ...?dryRun=All`: validated, admitted and answered, nothing kept.
    fn dry_run_create(
        &self,
        slice: ResourceSlice,
    ) -> BoxFuture<'_, Result<ResourceSlice, ApiError>> {
        Box::pin(async move {
            let path = format!("{SLICES}?dryRun=All");
            self.write_slice(reqwest::Method::POST, &path, &slice).await
        })
    }

    fn delete_slice(&self, name: &str) -> BoxFuture<'_, Result<(), ApiError>> {
        let path = format!("{SLICES}/{name}");
        Box::pin(async move {
            self.call(reqwest::Method::DELETE, &path, None)
                .await
                .map(|_| ())
        })
    }
}

impl ClaimApi for KubeApi {
    fn claim(&self, namespace: &str, name: &str) -> BoxFuture<'_, Result<ResourceClaim, ApiError>> {
        let path = format!("/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}");
        Box::pin(async move { self.get_as(&path).await })
    }
}

/// Claims held through the server: a Placement consumer per claim.
pub struct ServerClaims {
    client: crate::client::Client,
    node: String,
}

impl ServerClaims {
    pub fn new(client: crate::client::Client, node: &str) -> ServerClaims {
        ServerClaims {
            client,
            node: node.to_owned(),
        }
    }
}

impl ClaimRecord for ServerClaims {
    /// A refusal is the server's message alone: kubelet shows it for the claim.
    fn prepare(&self, uid: &str, holds: ClaimHolds) -> BoxFuture<'_, Result<(), RecordError>> {
        let uid = uid.to_owned();
        let body = accel_api::agent::ClaimDevices {
            devices: holds.whole,
            partitions: holds
                .mig
                .into_iter()
                .map(|m| accel_api::agent::ClaimPartition {
                    device: m.gpu,
                    profile_id: m.profile_id,
                    start: m.start,
                })
                .collect(),
        };
        Box::pin(async move {
            self.client
                .prepare_claim(&self.node, &uid, &body)
                .await
                .map_err(|e| match e {
                    crate::client::ClientError::Status {
                        status, message, ..
                    } => RecordError::Refused { status, message },
                    other => RecordError::unavailable(other),
                })
        })
    }

    fn unprepare(&self, uid: &str) -> BoxFuture<'_, Result<(), RecordError>> {
        let uid = uid.to_owned();
        Box::pin(async move {
            self.client
                .unprepare_claim(&self.node, &uid)
                .await
                .map_err(RecordError::unavailable)
        })
    }
}

impl Held for ServerClaims {
    fn vm_held(&self) -> BoxFuture<'_, Result<BTreeSet<String>, RecordError>> {
        Box::pin(async move {
            let shown = self
                .client
                .kubernetes_usage(&self.node)
                .await
                .map_err(RecordError::unavailable)?;
            Ok(shown.vm_held_devices.into_iter().collect())
        })
    }
}
