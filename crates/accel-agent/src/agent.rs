//! The agent's cycle: discover, build the report, send it. [`Agent::step`] is one
//! cycle (tests call it); [`Agent::run`] repeats it every interval until shutdown.
//!
//! Reports are full (the server diffs them, so a lost report costs nothing), and
//! byte-identical while nothing changes, which lets the server skip them after one
//! comparison. Every [`FULL_EVERY`]th report asks the server to apply it anyway, so a
//! provider someone deleted by hand in Placement comes back.

use crate::client::{Client, ClientError, NodeInfo, ReportOutcome};
use crate::config::Settings;
use crate::drivers::{self, Discovery, Driver};
use crate::model::Report;
use crate::nova::NovaPci;
use crate::sysfs::Sysfs;
use std::time::Duration;

/// A forced (full) report every this many reports.
pub const FULL_EVERY: u64 = 10;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Server(#[from] ClientError),
    #[error("the compute node {node:?} is not known to the server: {message}. Check that nova-compute runs on this host and that --node is its hypervisor_hostname (`openstack hypervisor list`); the agent reports under Nova's compute node provider and never creates it")]
    NoComputeNode { node: String, message: String },
}

pub struct Agent {
    pub settings: Settings,
    drivers: Vec<Box<dyn Driver>>,
    nova: Option<NovaPci>,
    client: Client,
    reports: u64,
}

impl Agent {
    pub fn new(settings: Settings) -> Result<Agent, AgentError> {
        let drivers = drivers::select(&settings.driver, settings.drivers.as_deref())
            .map_err(AgentError::Config)?;
        let nova = match &settings.nova_config {
            Some(p) => Some(NovaPci::load(p).map_err(AgentError::Config)?),
            None => None,
        };
        let client = Client::new(&settings.server, &settings.token);
        Ok(Agent {
            settings,
            drivers,
            nova,
            client,
            reports: 0,
        })
    }

    /// One discovery pass over the sysfs root.
    pub fn discover(&self) -> Discovery {
        let sysfs = Sysfs::new(&self.settings.sysfs_root);
        drivers::discover(
            &sysfs,
            &self.settings.driver,
            &self.drivers,
            self.nova.as_ref(),
        )
    }

    /// The report of the current discovery.
    pub fn report(&self) -> Result<(Report, Discovery), AgentError> {
        let node = self.settings.require_node().map_err(AgentError::Config)?;
        let d = self.discover();
        Ok((Report::new(node, d.devices.clone()), d))
    }

    /// Checks that the server knows the compute node.
    pub async fn check_node(&self) -> Result<NodeInfo, AgentError> {
        let node = self.settings.require_node().map_err(AgentError::Config)?;
        match self.client.node(node).await {
            Err(ClientError::Refused {
                status: 404,
                message,
                ..
            }) => Err(AgentError::NoComputeNode {
                node: node.to_owned(),
                message,
            }),
            other => Ok(other?),
        }
    }

    /// Discover and report once.
    pub async fn step(&mut self) -> Result<ReportOutcome, AgentError> {
        let (report, discovery) = self.report()?;
        let force = self.reports.is_multiple_of(FULL_EVERY);
        let outcome = self
            .client
            .report(&report.node, &report.to_json(), force)
            .await
            .map_err(|e| match e {
                ClientError::Refused {
                    status: 400,
                    message,
                    ..
                } if message.contains("No compute node resource provider") => {
                    AgentError::NoComputeNode {
                        node: report.node.clone(),
                        message,
                    }
                }
                other => other.into(),
            })?;
        self.reports += 1;
        tracing::info!(
            node = %report.node,
            devices = report.devices.len(),
            left_to_nova = discovery.conflicts.len(),
            skipped_entries = discovery.warnings.len(),
            unchanged = outcome.unchanged,
            added = outcome.added,
            removed = outcome.removed,
            vanished = outcome.vanished,
            "report sent"
        );
        Ok(outcome)
    }

    /// Reports every interval until `shutdown` resolves. A failed report is logged and
    /// retried at the next interval; it never stops the agent.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(Duration::from_secs(self.settings.interval_seconds));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tick.tick() => {
                    if let Err(e) = self.step().await {
                        tracing::error!("report failed: {e}");
                    }
                }
            }
        }
    }
}
