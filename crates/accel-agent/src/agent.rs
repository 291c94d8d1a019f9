//! The agent's cycle: discover, build the report, send it. [`Agent::step`] is one
//! cycle (tests call it); [`Agent::run`] repeats it every interval until shutdown, and
//! between reports carries out the server's programming requests
//! ([`Agent::program_step`], see [`crate::program`]).
//!
//! Reports are full (the server diffs them, so a lost report costs nothing), and
//! byte-identical while nothing changes, which lets the server skip them after one
//! comparison. Every [`FULL_EVERY`]th report asks the server to apply it anyway, so a
//! provider someone deleted by hand in Placement comes back.

use crate::client::{Auth, Client, ClientError, NodeInfo, ReportOutcome};
use crate::config::Settings;
use crate::drivers::{self, Discovery, Driver};
use crate::model::Report;
use crate::nova::NovaPci;
use crate::pci::PciBus;
use crate::program::{self, Glance, ProgramJob};
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
    #[error("{server} is not the accelerator API: it answered the agent's compute node check with 404 ({message:?}) where the accelerator API names the compute node it lacks. Give --server the accelerator API's URL (accel serve --accelerator-listen, port 6666 by default), not the Placement API's (8778)")]
    NotAcceleratorApi { server: String, message: String },
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
        let client = Client::with_auth(
            &settings.server,
            settings.auth().map_err(AgentError::Config)?,
        )
        .map_err(|e| AgentError::Config(format!("server: {e}")))?;
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
        Ok((
            Report::new(node, d.devices.clone()).modelled(self.settings.model),
            d,
        ))
    }

    /// Checks that the server knows the compute node.
    pub async fn check_node(&self) -> Result<NodeInfo, AgentError> {
        let node = self.settings.require_node().map_err(AgentError::Config)?;
        match self.client.node(node).await {
            // The accelerator API's 404 names the compute node it lacks; any other 404
            // (a Placement API's unknown route, a web server) means a wrong --server.
            Err(ClientError::Status {
                status: 404,
                message,
                ..
            }) if message.contains("No compute node resource provider") => {
                Err(AgentError::NoComputeNode {
                    node: node.to_owned(),
                    message,
                })
            }
            Err(ClientError::Status {
                status: 404,
                message,
                ..
            }) => {
                tracing::error!(server = %self.settings.server, %message, "the compute node check got a 404 that is not the accelerator API's");
                Err(AgentError::NotAcceleratorApi {
                    server: self.settings.server.clone(),
                    message,
                })
            }
            other => Ok(other?),
        }
    }

    /// Discover and report once.
    pub async fn step(&mut self) -> Result<ReportOutcome, AgentError> {
        let (report, discovery) = self.report()?;
        let force = self.reports.is_multiple_of(FULL_EVERY);
        let outcome = self
            .client
            .report(&report.node, &report.body(), force)
            .await
            .map_err(|e| match e {
                ClientError::Status {
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

    /// Carries out the server's pending programming requests, one at a time, and
    /// answers each; answers how many it handled. After a successful programming the
    /// host is reported (forced) before the answer, so the region's new function
    /// trait is in Placement when the bind resolves.
    pub async fn program_step(&mut self) -> Result<usize, AgentError> {
        let node = self
            .settings
            .require_node()
            .map_err(AgentError::Config)?
            .to_owned();
        let jobs = self.client.pending_programs(&node).await?;
        for job in &jobs {
            let result = self.program(&node, job).await;
            match &result {
                Ok(function) => {
                    tracing::info!(request = job.id, deployable = %job.deployable_name, function = function.as_deref().unwrap_or("unknown"), "programmed");
                    // The new function trait first; a failed report is retried by the
                    // next one and does not undo the programming.
                    if let Err(e) = self.step().await {
                        tracing::warn!("report after programming failed: {e}");
                    }
                }
                Err(e) => {
                    tracing::warn!(request = job.id, deployable = %job.deployable_name, "programming failed: {e}")
                }
            }
            let answer = result.map(|_| ());
            if let Err(e) = self.client.finish_program(&node, job.id, &answer).await {
                // A request abandoned by the server (its caller gave up) is gone: 404.
                tracing::warn!(request = job.id, "answer not taken: {e}");
            }
        }
        Ok(jobs.len())
    }

    /// Fetches, verifies and programs one request's bitstream; answers the function id
    /// the driver reports.
    async fn program(&self, node: &str, job: &ProgramJob) -> Result<Option<String>, String> {
        let glance_url = match (&self.settings.glance_url, self.client.auth()) {
            (Some(u), _) => u.clone(),
            (None, Auth::Keystone(s)) => s.endpoint("image").await?,
            (None, Auth::Token(_)) => {
                return Err("the agent has no glance_url, so it cannot fetch bitstreams".into())
            }
        };
        let token = self
            .client
            .auth()
            .token()
            .await
            .map_err(|e| e.to_string())?;
        let glance = Glance::new(&glance_url, &token);
        let image = match (&job.bitstream_id, &job.function_id) {
            (Some(b), _) => glance.image(b).await?,
            (None, Some(f)) => glance.image_for_function(f).await?,
            (None, None) => {
                return Err("the request names neither a bitstream nor a function".into())
            }
        };
        let file = glance.download(&image, &self.settings.program_dir).await?;
        let result = self.program_file(node, job, &file);
        let _ = std::fs::remove_file(&file);
        let function = result?;
        if let (Some(want), Some(got)) = (&job.function_id, &function) {
            if accel_core::accelerator::id_part(want) != accel_core::accelerator::id_part(got) {
                return Err(format!(
                    "image {} programmed function {got}, not the requested {want}",
                    image.id
                ));
            }
        }
        Ok(function)
    }

    fn program_file(
        &self,
        node: &str,
        job: &ProgramJob,
        file: &std::path::Path,
    ) -> Result<Option<String>, String> {
        let sysfs = Sysfs::new(&self.settings.sysfs_root);
        let devices = self.discover().devices;
        let (device, region) =
            program::locate(&devices, node, &job.deployable_name).ok_or_else(|| {
                format!(
                    "no FPGA region on this host is deployable {}",
                    job.deployable_name
                )
            })?;
        let driver = self
            .drivers
            .iter()
            .find(|d| d.name() == device.driver)
            .ok_or_else(|| format!("driver {} is not enabled", device.driver))?;
        let bus = PciBus::scan(&sysfs);
        let host = drivers::Host {
            sysfs: &sysfs,
            bus: &bus,
            config: &self.settings.driver,
        };
        driver
            .program(&host, device, region, file)
            .map_err(|e| e.to_string())
    }

    /// Reports every interval and looks for programming requests every program
    /// interval, until `shutdown` resolves. A failed report or look is logged and
    /// retried at the next tick; it never stops the agent.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(Duration::from_secs(self.settings.interval_seconds));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut programs = tokio::time::interval(self.settings.program_interval);
        programs.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tick.tick() => {
                    if let Err(e) = self.step().await {
                        tracing::error!("report failed: {e}");
                    }
                }
                _ = programs.tick() => {
                    if let Err(e) = self.program_step().await {
                        tracing::warn!("looking for programming requests failed: {e}");
                    }
                }
            }
        }
    }
}
