//! The agent's side of the agent protocol (`accel_api::agent`): its compute node
//! (`GET /v2/agent/hosts/{node}`), its reports (`PUT .../devices`), its programming
//! requests (`.../programs`) and the Kubernetes slot usage (`.../kubernetes`), on
//! accel-api's typed client. This module only turns the answers into what the agent
//! acts on.

pub use accel_api::http::{Auth, Error as ClientError};

use accel_api::agent::{self as wire, DeviceReport, ProgramAnswer};
use accel_api::http::{Endpoint, Http, Options};

/// The accelerator API as the agent uses it.
#[derive(Debug, Clone)]
pub struct Client {
    api: wire::Client,
}

/// The server's view of the node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    pub compute_node_uuid: String,
    pub devices: i64,
}

/// What a report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOutcome {
    pub unchanged: bool,
    pub added: i64,
    pub removed: i64,
    pub kept: i64,
    pub vanished: i64,
}

impl Client {
    /// A client with a fixed token.
    pub fn new(base: &str, token: &str) -> Result<Client, ClientError> {
        Client::with_auth(base, Auth::Token(token.to_owned()))
    }

    pub fn with_auth(base: &str, auth: Auth) -> Result<Client, ClientError> {
        // Bounded calls: a server that accepts and never answers must not stop the
        // agent's loop (its /livez would then fail, rightly, but only after this).
        let options = Options {
            timeout: Some(std::time::Duration::from_secs(60)),
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            ..Options::default()
        };
        let http = Http::new(Endpoint::Url(base.to_owned()), auth, options)?;
        Ok(Client {
            api: wire::Client::new(http),
        })
    }

    pub fn auth(&self) -> &Auth {
        self.api.http().auth()
    }

    pub async fn node(&self, node: &str) -> Result<NodeInfo, ClientError> {
        let h = self.api.host(node).await?;
        Ok(NodeInfo {
            compute_node_uuid: h.compute_node_uuid,
            devices: h.devices,
        })
    }

    /// `PUT /v2/agent/hosts/{node}`: the node provider this agent owns, created by
    /// the server when absent (`node_provider = "own"`).
    pub async fn own_node(&self, node: &str) -> Result<NodeInfo, ClientError> {
        let h = self.api.own_host(node).await?;
        Ok(NodeInfo {
            compute_node_uuid: h.compute_node_uuid,
            devices: h.devices,
        })
    }

    /// `PUT /v2/agent/hosts/{node}/kubernetes/claims/{uid}`: a DRA claim's devices
    /// held in Placement, its MIG devices in their GPUs' ledgers.
    pub async fn prepare_claim(
        &self,
        node: &str,
        uid: &str,
        body: &accel_api::agent::ClaimDevices,
    ) -> Result<(), ClientError> {
        self.api.prepare_claim(node, uid, body).await.map(|_| ())
    }

    /// `GET /v2/agent/hosts/{node}/partitions`: the MIG instances the server's ledgers
    /// hold on this node.
    pub async fn held_partitions(
        &self,
        node: &str,
    ) -> Result<accel_api::agent::HeldPartitions, ClientError> {
        self.api.held_partitions(node).await
    }

    /// `DELETE /v2/agent/hosts/{node}/kubernetes/claims/{uid}`.
    pub async fn unprepare_claim(&self, node: &str, uid: &str) -> Result<(), ClientError> {
        self.api.unprepare_claim(node, uid).await
    }

    /// `GET /v2/agent/hosts/{node}/kubernetes`: the saved slot usage (seed 001's
    /// `deviceUsage` strings) and the devices VMs hold.
    pub async fn kubernetes_usage(&self, node: &str) -> Result<wire::KubernetesShown, ClientError> {
        self.api.kubernetes_usage(node).await
    }

    /// `PUT /v2/agent/hosts/{node}/kubernetes`; answers the server's reply.
    pub async fn kubernetes_save(
        &self,
        node: &str,
        body: &wire::KubernetesUsageParts,
    ) -> Result<wire::KubernetesSaved, ClientError> {
        self.api.kubernetes_save_parts(node, body).await
    }

    /// Sends `body`; `force` makes the server apply it even when it equals the last one.
    pub async fn report(
        &self,
        node: &str,
        body: &DeviceReport,
        force: bool,
    ) -> Result<ReportOutcome, ClientError> {
        let a = self.api.report(node, body, force).await?;
        Ok(ReportOutcome {
            unchanged: a.unchanged,
            added: a.devices_added,
            removed: a.devices_removed,
            kept: a.devices_kept,
            vanished: a.devices_vanished,
        })
    }

    /// `GET /v2/agent/hosts/{node}/programs`: the programming requests to carry out.
    pub async fn pending_programs(
        &self,
        node: &str,
    ) -> Result<Vec<crate::program::ProgramJob>, ClientError> {
        Ok(self
            .api
            .pending_programs(node)
            .await?
            .into_iter()
            .map(crate::program::ProgramJob::from)
            .collect())
    }

    /// `GET /v2/agent/hosts/{node}/cleanings?agent=..`: the cleanings this agent
    /// process holds (taking over a dead predecessor's).
    pub async fn cleanings(
        &self,
        node: &str,
        agent: &str,
        wait: Option<u64>,
    ) -> Result<Vec<wire::CleaningRequest>, ClientError> {
        self.api.cleanings(node, agent, wait).await
    }

    /// `PUT /v2/agent/hosts/{node}/cleanings/{rp_uuid}`.
    pub async fn finish_cleaning(
        &self,
        node: &str,
        rp_uuid: &str,
        answer: &wire::CleaningAnswer,
    ) -> Result<(), ClientError> {
        self.api
            .finish_cleaning(node, rp_uuid, answer)
            .await
            .map(|_| ())
    }

    /// `PUT /v2/agent/hosts/{node}/programs/{id}`: done, or failed with the reason.
    pub async fn finish_program(
        &self,
        node: &str,
        id: i64,
        answer: &ProgramAnswer,
    ) -> Result<(), ClientError> {
        self.api.finish_program(node, id, answer).await.map(|_| ())
    }
}
