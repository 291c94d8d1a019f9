//! The agent's cycle: discover, build the report, send it. [`Agent::step`] is one
//! cycle (tests call it); [`Agent::run`] repeats it every interval until shutdown, and
//! between reports carries out the server's programming requests
//! ([`Agent::program_step`], see [`crate::program`]) and cleanings
//! ([`Agent::clean_step`], see [`crate::cleaning`]).
//!
//! Reports are full (the server diffs them, so a lost report costs nothing), and
//! byte-identical while nothing changes, which lets the server skip them after one
//! comparison. Every [`FULL_EVERY`]th report asks the server to apply it anyway, so a
//! provider someone deleted by hand in Placement comes back.
//!
//! Failure behaviour (issue 14): the long-running agent waits for its server with
//! capped exponential backoff ([`Agent::wait_for_server`]), logging each attempt's
//! cause, instead of exiting into a crash loop; a driver that fails during discovery
//! keeps the devices it found last ([`drivers::DriverFailure`]), and when it has no
//! earlier picture the report is not sent at all, so a failure never reads as "these
//! devices are gone" on the server.

use crate::cleaning;
use crate::client::{Auth, Client, ClientError, NodeInfo, ReportOutcome};
use crate::config::{NodeProvider, Settings};
use crate::drivers::{self, Discovery, Driver};
use crate::metrics::ReportOutcome as Outcome;
use crate::model::{FoundDevice, Health, Report};
use crate::nova::NovaPci;
use crate::observe::Health as Probes;
use crate::pci::PciBus;
use crate::program::{self, Glance, ProgramJob};
use crate::sysfs::Sysfs;
use accel_api::agent::CleaningRequest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A forced (full) report every this many reports.
pub const FULL_EVERY: u64 = 10;

/// How long the server may hold one look for cleanings (`wait`): under the agent's
/// 60 s request timeout, and long enough that an idle node asks three times a minute.
pub const CLEANING_WAIT_SECONDS: u64 = 20;

/// One look for cleanings in flight: when it was asked, and the node with the answer.
type CleaningLook = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = (Instant, Result<(String, Vec<CleaningRequest>), ClientError>),
            > + Send,
    >,
>;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Server(#[from] ClientError),
    #[error("{}", no_compute_node(node, message))]
    NoComputeNode { node: String, message: String },
    #[error("report not sent: driver(s) {0} failed during discovery and this agent has no earlier picture of their devices (the server keeps what it has)")]
    DriversFailed(String),
    #[error("{server} is not the accelerator API: it answered the agent's compute node check with 404 ({message:?}) where the accelerator API names the compute node it lacks. Give --server the accelerator API's URL (accel serve --accelerator-listen, port 6666 by default), not the Placement API's (8778)")]
    NotAcceleratorApi { server: String, message: String },
}

/// The agent's answer to a server without its compute node (issue 31 item 5): the
/// Nova hint once (the server's message has it since it names hypervisor_hostname; an
/// older or other server's may not), and what to do without Nova.
fn no_compute_node(node: &str, message: &str) -> String {
    let nova = if message.contains("hypervisor_hostname") {
        String::new()
    } else {
        ". With Nova, --node must be this host's hypervisor_hostname (`openstack hypervisor list`) and nova-compute must have registered it".to_owned()
    };
    // The server's own message may already name node_provider: say it once.
    let own = if message.contains("node_provider") {
        ""
    } else {
        " unless node_provider = \"own\" (the agent then creates and owns it)"
    };
    format!(
        "the compute node {node:?} is not known to the server: {message}{nova}. The agent reports under the compute node provider and never creates it{own}; without Nova, create it in Placement first (POST /resource_providers with {{\"name\": \"{node}\"}}, as the README's walk-through does)"
    )
}

/// `e` and every error under it ("error sending request" alone hides "connection
/// refused"), each once.
pub fn cause_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

/// How the agent waits for its server at start-up: `first`, doubled after each
/// failed attempt up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

/// How the server's refusals begin when no provider has the node's name.
const NO_COMPUTE_NODE: &str = "No compute node resource provider";

/// Whether a report was refused because the server has no provider for the node.
fn refused_for_no_compute_node<T>(sent: &Result<T, ClientError>) -> bool {
    matches!(sent, Err(ClientError::Status { status: 400, message, .. }) if message.contains(NO_COMPUTE_NODE))
}

pub struct Agent {
    pub settings: Settings,
    drivers: Vec<Box<dyn Driver>>,
    nova: Option<NovaPci>,
    client: Client,
    reports: u64,
    probes: Option<Arc<Probes>>,
    /// The devices of each driver at its last successful discovery, kept for the
    /// passes in which it fails.
    last_seen: Mutex<HashMap<&'static str, Vec<FoundDevice>>>,
    /// This process's name in the server's cleaning takes: unique per start, so the
    /// server hands a restarted agent the cleanings its predecessor held.
    agent_id: String,
    cleanings: cleaning::Running,
    /// Whether the settings had a `[keystone]` table, whose catalog names Glance
    /// (kept by [`Agent::offline`], which drops the table itself).
    pub(crate) keystone_catalog: bool,
}

impl Agent {
    pub fn new(settings: Settings) -> Result<Agent, AgentError> {
        let drivers = drivers::select(&settings.driver, settings.drivers.as_deref())
            .map_err(AgentError::Config)?;
        Agent::with_drivers(settings, drivers)
    }

    /// An agent over `drivers` instead of those `settings` names (tests, and drivers
    /// built outside this crate).
    pub fn with_drivers(
        settings: Settings,
        drivers: Vec<Box<dyn Driver>>,
    ) -> Result<Agent, AgentError> {
        let nova = match &settings.nova_config {
            Some(p) => Some(NovaPci::load(p).map_err(AgentError::Config)?),
            None => None,
        };
        let client = Client::with_auth(
            &settings.server,
            settings.auth().map_err(AgentError::Config)?,
        )
        .map_err(|e| AgentError::Config(format!("server: {e}")))?;
        let settings_keystone = settings.keystone.is_some();
        Ok(Agent {
            settings,
            drivers,
            nova,
            client,
            reports: 0,
            probes: None,
            last_seen: Mutex::new(HashMap::new()),
            agent_id: format!(
                "{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ),
            cleanings: cleaning::Running::default(),
            keystone_catalog: settings_keystone,
        })
    }

    /// Records metrics and readiness in `probes` (the metrics port's state).
    pub fn observe(mut self, probes: Arc<Probes>) -> Agent {
        self.probes = Some(probes);
        self
    }

    /// One discovery pass over the sysfs root. A driver that fails contributes the
    /// devices it found last (those it names unhealthy marked so); one that fails
    /// with no earlier picture is listed in [`Discovery::unknown`].
    pub fn discover(&self) -> Discovery {
        let started = Instant::now();
        let sysfs = Sysfs::new(&self.settings.sysfs_root);
        let mut d = drivers::discover(
            &sysfs,
            &self.settings.driver,
            &self.drivers,
            self.nova.as_ref(),
        );
        if let Ok(mut last) = self.last_seen.lock() {
            for driver in &self.drivers {
                let name = driver.name();
                if !d.failed.iter().any(|f| f.driver == name) {
                    let mine = d.devices.iter().filter(|x| x.driver == name).cloned();
                    last.insert(name, mine.collect());
                }
            }
            for f in &d.failed {
                match last.get(f.driver) {
                    Some(kept) => d.devices.extend(kept.iter().cloned().map(|mut dev| {
                        if f.unhealthy.contains(&dev.address) {
                            dev.health = Health::Unhealthy(format!(
                                "driver {} failed and names it unhealthy: {}",
                                f.driver, f.reason
                            ));
                        }
                        dev
                    })),
                    None => d.unknown.push(f.driver),
                }
            }
            d.devices.sort_by_key(|x| x.address);
        }
        // A device a cleaning rule matches says so in Placement.
        if !self.settings.cleaning.is_empty() {
            for dev in &mut d.devices {
                let k = crate::kubernetes::to_device(&self.settings.sysfs_root, dev);
                if cleaning::rule_for(&self.settings.cleaning, &k).is_some()
                    && !dev.extra_traits.iter().any(|t| t == cleaning::TRAIT)
                {
                    dev.extra_traits.push(cleaning::TRAIT.into());
                }
            }
        }
        if let Some(p) = &self.probes {
            let m = p.metrics();
            m.discovery(started.elapsed());
            m.devices(&d.devices);
            for f in &d.failed {
                m.driver_failed(f.driver);
            }
        }
        d
    }

    /// Waits until the server knows this compute node: each failed attempt is
    /// logged with its cause and retried after a delay that doubles up to
    /// `backoff.max`. Answers `None` when `shutdown` resolves first; a configuration
    /// error (no node name) is returned at once.
    pub async fn wait_for_server(
        &self,
        backoff: Backoff,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<Option<NodeInfo>, AgentError> {
        tokio::pin!(shutdown);
        let mut delay = backoff.first;
        let mut attempt = 1u32;
        loop {
            match self.check_node().await {
                Ok(n) => {
                    self.probe(|p| p.server(Ok(())));
                    return Ok(Some(n));
                }
                Err(e @ AgentError::Config(_)) => return Err(e),
                Err(e) => {
                    let cause = cause_chain(&e);
                    tracing::warn!(server = %self.settings.server, attempt, retry_in_s = delay.as_secs_f64(), cause = %cause, "server not ready; waiting");
                    self.probe(|p| {
                        p.server(Err(cause.clone()));
                        p.metrics().server_wait();
                    });
                }
            }
            tokio::select! {
                _ = &mut shutdown => return Ok(None),
                _ = tokio::time::sleep(delay) => {}
            }
            self.probe(|p| p.beat());
            delay = (delay * 2).min(backoff.max);
            attempt += 1;
        }
    }

    /// The metrics of the probes this agent records in, if any.
    fn metrics(&self) -> Option<Arc<crate::metrics::Metrics>> {
        self.probes.as_ref().map(|p| p.metrics().clone())
    }

    fn probe(&self, f: impl FnOnce(&Probes)) {
        if let Some(p) = &self.probes {
            f(p);
        }
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

    /// Checks that the server knows the compute node; with `node_provider = "own"`,
    /// has the server create it when absent.
    pub async fn check_node(&self) -> Result<NodeInfo, AgentError> {
        let node = self.settings.require_node().map_err(AgentError::Config)?;
        let answer = match self.settings.node_provider {
            NodeProvider::Own => self.client.own_node(node).await,
            NodeProvider::Nova => self.client.node(node).await,
        };
        match answer {
            // The accelerator API's 404 names the compute node it lacks; any other 404
            // (a Placement API's unknown route, a web server) means a wrong --server.
            Err(ClientError::Status {
                status: 404,
                message,
                ..
            }) if message.contains(NO_COMPUTE_NODE) => Err(AgentError::NoComputeNode {
                node: node.to_owned(),
                message,
            }),
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
        if !discovery.unknown.is_empty() {
            let e = AgentError::DriversFailed(discovery.unknown.join(", "));
            self.probe(|p| {
                p.metrics().report(Outcome::Skipped, None);
                p.report(Err(e.to_string()));
            });
            return Err(e);
        }
        let force = self.reports.is_multiple_of(FULL_EVERY);
        let started = Instant::now();
        let mut sent = self
            .client
            .report(&report.node, &report.body(), force)
            .await;
        if self.settings.node_provider == NodeProvider::Own && refused_for_no_compute_node(&sent) {
            // Someone deleted the node provider this agent owns: made again, resent.
            self.client.own_node(&report.node).await?;
            sent = self.client.report(&report.node, &report.body(), true).await;
        }
        let took = started.elapsed();
        let outcome = match &sent {
            Ok(o) if o.unchanged => Outcome::Unchanged,
            Ok(_) => Outcome::Accepted,
            Err(e) if e.status().is_some_and(|s| (400..500).contains(&s)) => Outcome::Refused,
            Err(_) => Outcome::Failed,
        };
        self.probe(|p| {
            p.metrics().report(outcome, Some(took));
            p.server(match &sent {
                Err(e) if e.status().is_none() => Err(e.to_string()),
                _ => Ok(()),
            });
            p.report(sent.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        });
        if let Err(e) = &sent {
            tracing::warn!(node = %report.node, outcome = outcome.as_str(), took_ms = took.as_millis() as u64, error = %e, "report not accepted");
        }
        let outcome = sent.map_err(|e| match e {
            ClientError::Status {
                status: 400,
                message,
                ..
            } if message.contains(NO_COMPUTE_NODE) => AgentError::NoComputeNode {
                node: report.node.clone(),
                message,
            },
            other => other.into(),
        })?;
        self.reports += 1;
        tracing::info!(
            node = %report.node,
            outcome = if outcome.unchanged { "unchanged" } else { "accepted" },
            took_ms = took.as_millis() as u64,
            devices = report.devices.len(),
            failed_drivers = discovery.failed.len(),
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
            self.probe(|p| p.metrics().program(result.is_ok()));
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
            let answered = self.client.finish_program(&node, job.id, &answer).await;
            self.probe(|p| p.metrics().call("program_answer", answered.is_ok()));
            match answered {
                Ok(()) => {
                    tracing::info!(request = job.id, outcome = "ok", "programming answer sent")
                }
                // A request abandoned by the server (its caller gave up) is gone: 404.
                Err(e) => tracing::warn!(
                    request = job.id,
                    outcome = "failed",
                    "answer not taken: {e}"
                ),
            }
        }
        Ok(jobs.len())
    }

    /// Takes the cleanings the server holds for this process and starts each that is
    /// not already running: `pci-reset` and `command` rules in their own task,
    /// `fpga-default` here (it reprograms through [`Agent::program`]); answers how
    /// many it started.
    pub async fn clean_step(&mut self) -> Result<usize, AgentError> {
        let node = self
            .settings
            .require_node()
            .map_err(AgentError::Config)?
            .to_owned();
        self.cleanings.reap();
        // Without rules no device carries the trait; the server is not asked.
        if self.settings.cleaning.is_empty() {
            return Ok(0);
        }
        let jobs = self.client.cleanings(&node, &self.agent_id, None).await?;
        Ok(self.start_cleanings(&node, jobs).await)
    }

    /// Starts the cleanings of `jobs` this process is not already running (a fetch
    /// answers every cleaning the process holds); answers how many it started.
    async fn start_cleanings(&mut self, node: &str, jobs: Vec<CleaningRequest>) -> usize {
        let node = node.to_owned();
        let new: Vec<_> = jobs
            .into_iter()
            .filter(|j| !self.cleanings.contains(&j.rp_uuid, j.attempt))
            .collect();
        if new.is_empty() {
            return 0;
        }
        let devices = self.discover().devices;
        for job in &new {
            let started = Instant::now();
            let found = devices
                .iter()
                .find(|d| d.address.to_string() == job.address);
            let rule = found.and_then(|d| {
                let k = crate::kubernetes::to_device(&self.settings.sysfs_root, d);
                cleaning::rule_for(&self.settings.cleaning, &k).cloned()
            });
            let rule = match (found, rule) {
                (None, _) => Err(format!("device {} is not on this node now", job.address)),
                (Some(_), None) => Err(format!(
                    "no [[cleaning]] rule of this agent matches the device at {}",
                    job.address
                )),
                (Some(_), Some(r)) => Ok(r),
            };
            let device_node = cleaning::device_node(&self.settings.sysfs_root, &job.address);
            tracing::info!(provider = %job.rp_uuid, address = %job.address, attempt = job.attempt, "cleaning a released device");
            match rule {
                Err(e) => {
                    cleaning::answer(
                        &self.client,
                        self.metrics().as_deref(),
                        &node,
                        job,
                        &Err(e),
                        started.elapsed(),
                    )
                    .await
                }
                Ok(rule) => match &rule.method {
                    cleaning::Method::FpgaDefault(image) => {
                        let deadline = started + rule.timeout;
                        let pj = ProgramJob {
                            id: 0,
                            deployable_name: job.name.clone(),
                            bitstream_id: Some(image.clone()),
                            function_id: None,
                        };
                        let result = match tokio::time::timeout(
                            rule.timeout,
                            self.program(&node, &pj),
                        )
                        .await
                        {
                            Err(_) => Err("fpga-default: timed out".to_owned()),
                            Ok(Err(e)) => Err(format!("fpga-default: {e}")),
                            Ok(Ok(_)) => {
                                if let Err(e) = self.step().await {
                                    tracing::warn!("report after the default image failed: {e}");
                                }
                                cleaning::verify(
                                    &rule,
                                    &job.address,
                                    device_node.as_deref(),
                                    deadline,
                                )
                                .await
                            }
                        };
                        cleaning::answer(
                            &self.client,
                            self.metrics().as_deref(),
                            &node,
                            job,
                            &result,
                            started.elapsed(),
                        )
                        .await;
                    }
                    _ => {
                        let (client, node, job2) = (self.client.clone(), node.clone(), job.clone());
                        let metrics = self.metrics();
                        let root = self.settings.sysfs_root.clone();
                        self.cleanings
                            .spawn(job.rp_uuid.clone(), job.attempt, async move {
                                let deadline = started + rule.timeout;
                                let r = cleaning::run_rule(
                                    &rule,
                                    &root,
                                    &job2.address,
                                    device_node.as_deref(),
                                    deadline,
                                )
                                .await;
                                cleaning::answer(
                                    &client,
                                    metrics.as_deref(),
                                    &node,
                                    &job2,
                                    &r,
                                    started.elapsed(),
                                )
                                .await;
                            });
                    }
                },
            }
        }
        new.len()
    }

    /// Waits for every cleaning this agent started to be answered (or given up).
    pub async fn cleanings_done(&mut self) {
        self.cleanings.drain().await;
    }

    /// Fetches, verifies and programs one request's bitstream; answers the function id
    /// the driver reports.
    async fn program(&self, node: &str, job: &ProgramJob) -> Result<Option<String>, String> {
        let (glance, glance_url) = self.glance().await?;
        let image = match (&job.bitstream_id, &job.function_id) {
            (Some(b), _) => glance.image(b).await,
            (None, Some(f)) => glance.image_for_function(f).await,
            (None, None) => {
                return Err("the request names neither a bitstream nor a function".into())
            }
        };
        self.glance_call(
            "glance_image",
            &glance_url,
            job,
            image.as_ref().map(|i| i.id.as_str()),
        );
        let image = image?;
        let file = glance.download(&image, &self.settings.program_dir).await;
        self.glance_call(
            "glance_download",
            &glance_url,
            job,
            file.as_ref().map(|_| image.id.as_str()),
        );
        let file = file?;
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

    /// The image service bitstreams come from (`glance_url`, else the Keystone
    /// catalog's), with a token, and its URL.
    pub(crate) async fn glance(&self) -> Result<(Glance, String), String> {
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
        Ok((Glance::new(&glance_url, &token), glance_url))
    }

    /// How the enabled driver `name` programs its devices (`NotSupported` when it is
    /// not enabled: programming would fail with "driver ... is not enabled").
    pub(crate) fn programming(&self, name: &str) -> drivers::Programming {
        self.drivers
            .iter()
            .find(|d| d.name() == name)
            .map_or(drivers::Programming::NotSupported, |d| {
                d.programming(&self.settings.driver.tools)
            })
    }

    /// Logs and counts one call to the image service.
    fn glance_call(&self, call: &str, url: &str, job: &ProgramJob, r: Result<&str, &String>) {
        self.probe(|p| p.metrics().call(call, r.is_ok()));
        match r {
            Ok(image) => tracing::info!(
                call,
                glance = url,
                request = job.id,
                image,
                outcome = "ok",
                "image service call"
            ),
            Err(e) => {
                tracing::warn!(call, glance = url, request = job.id, outcome = "failed", error = %e, "image service call")
            }
        }
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
        let host = drivers::Host::new(&sysfs, &bus, &self.settings.driver);
        driver
            .program(&host, device, region, file)
            .map_err(|e| e.to_string())
    }

    /// Reports every interval and looks for programming requests every program
    /// interval, until `shutdown` resolves. Cleanings are a long poll (see
    /// [`CLEANING_WAIT_SECONDS`]): the server answers as soon as a device of this node
    /// is released, so the wait for the agent is not the program interval. A failed
    /// report or look is logged and retried at the next tick; it never stops the agent.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(Duration::from_secs(self.settings.interval_seconds));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut programs = tokio::time::interval(self.settings.program_interval);
        programs.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut look: Option<CleaningLook> = None;
        let mut next_look = Instant::now();
        loop {
            self.probe(|p| p.beat());
            if look.is_none() {
                look = self.look_for_cleanings(next_look);
            }
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
                (asked, answer) = async { look.as_mut().expect("enabled only when set").await }, if look.is_some() => {
                    look = None;
                    let started = match answer {
                        Ok((node, jobs)) => self.start_cleanings(&node, jobs).await,
                        Err(e) => {
                            tracing::warn!("looking for cleanings failed: {e}");
                            0
                        }
                    };
                    // An answer that came back early with nothing new (an error, or a
                    // server that does not hold long polls) waits out the program
                    // interval before the next look, so a failing server is not hammered.
                    next_look = if started == 0 && asked.elapsed() < self.settings.program_interval {
                        asked + self.settings.program_interval
                    } else {
                        Instant::now()
                    };
                }
            }
        }
    }

    /// The next long poll for cleanings, starting at `at`; `None` without rules (no
    /// device carries the trait, so the server is not asked) or without a node.
    fn look_for_cleanings(&mut self, at: Instant) -> Option<CleaningLook> {
        if self.settings.cleaning.is_empty() {
            return None;
        }
        let node = self.settings.require_node().ok()?.to_owned();
        // Reaped before the look: a cleaning that ends while the look waits is still
        // counted as running when its answer comes, so it is not started twice.
        self.cleanings.reap();
        let (client, agent) = (self.client.clone(), self.agent_id.clone());
        Some(Box::pin(async move {
            tokio::time::sleep_until(at.into()).await;
            let asked = Instant::now();
            let answer = client
                .cleanings(&node, &agent, Some(CLEANING_WAIT_SECONDS))
                .await
                .map(|jobs| (node, jobs));
            (asked, answer)
        }))
    }
}
