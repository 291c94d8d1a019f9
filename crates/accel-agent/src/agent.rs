//! The agent's report: discover, build the report, send it. [`Agent::step`] is one
//! report (tests call it; the reporting worker of `node` repeats it). The
//! same `Agent`, shared by every worker, carries out the server's programming requests
//! ([`Agent::program_step`], in the programming module) and cleanings
//! ([`Agent::clean_step`], [`crate::cleaning`]), and is the one device discoverer of
//! the reports, the kubelet device plugins and the DRA driver ([`Agent::discover`]).
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
use crate::client::{Client, ClientError, NodeInfo, ReportOutcome};
use crate::config::{NodeProvider, Settings};
use crate::drivers::{self, Discovery, Driver};
use crate::metrics::ReportOutcome as Outcome;
use crate::model::{FoundDevice, Health, Report};
use crate::nova::NovaPci;
use crate::observe::{Beat, Check, Health as Probes, Held};
use crate::sysfs::Sysfs;
use accel_api::agent::CleaningRequest;
use accel_api::agent::NO_COMPUTE_NODE;
pub use accel_supervisor::Backoff;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A forced (full) report every this many reports.
pub const FULL_EVERY: u64 = 10;

/// How long the server may hold one look for cleanings (`wait`): under the agent's
/// 60 s request timeout, and long enough that an idle node asks three times a minute.
pub const CLEANING_WAIT_SECONDS: u64 = 20;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Nova(#[from] crate::nova::NovaError),
    /// The server's URL cannot be used.
    #[error("server: {0}")]
    BadServer(ClientError),
    #[error(transparent)]
    Server(#[from] ClientError),
    #[error("{}", no_compute_node(node, message))]
    NoComputeNode { node: String, message: String },
    #[error("report not sent: driver(s) {0} failed during discovery and this agent has no earlier picture of their devices (the server keeps what it has)")]
    DriversFailed(String),
    #[error("{server} is not the accelerator API: it answered the agent's compute node check with 404 ({message:?}) where the accelerator API names the compute node it lacks. Give --server the accelerator API's URL (accel serve --accelerator-listen, port 6666 by default), not the Placement API's (8778)")]
    NotAcceleratorApi { server: String, message: String },
    /// Accounting for the node's GPU partitions failed (NVML, the checkpoint).
    #[error("GPU partitions: {0}")]
    Partitions(#[from] crate::partitions::PartitionError),
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

/// Whether the server refused because no provider has the node's name: the agent
/// protocol's code, not the words.
fn no_node_code(code: &Option<String>) -> bool {
    code.as_deref() == Some(NO_COMPUTE_NODE)
}

/// Whether a report was refused because the server has no provider for the node.
fn refused_for_no_compute_node<T>(sent: &Result<T, ClientError>) -> bool {
    matches!(sent, Err(ClientError::Status { status: 400, code, .. }) if no_node_code(code))
}

/// An `fpga-default` cleaning, handed by the cleaning worker to the programming worker.
#[derive(Debug)]
pub struct Handover {
    pub(crate) node: String,
    pub(crate) job: CleaningRequest,
    pub(crate) rule: cleaning::Rule,
    pub(crate) device_node: Option<String>,
    pub(crate) started: Instant,
}

pub struct Agent {
    pub settings: Settings,
    pub(crate) drivers: Vec<Box<dyn Driver>>,
    nova: Option<NovaPci>,
    pub(crate) client: Client,
    reports: AtomicU64,
    probes: Option<Arc<Probes>>,
    /// The devices of each driver at its last successful discovery, kept for the
    /// passes in which it fails.
    last_seen: Mutex<HashMap<&'static str, Vec<FoundDevice>>>,
    /// This process's name in the server's cleaning takes: unique per start, so the
    /// server hands a restarted agent the cleanings its predecessor held.
    pub(crate) agent_id: String,
    /// The cleanings running in their own tasks (`pci-reset`, `command`).
    pub(crate) cleanings: tokio::sync::Mutex<cleaning::Running>,
    /// The `fpga-default` cleanings handed to the programming worker, not answered yet.
    pub(crate) handed: Mutex<HashSet<(String, i64)>>,
    /// The channel of those cleanings, from the cleaning worker to the programming one.
    pub(crate) handover: (
        mpsc::UnboundedSender<Handover>,
        tokio::sync::Mutex<mpsc::UnboundedReceiver<Handover>>,
    ),
    /// The programming worker's liveness, held while it programs (set by the node).
    pub(crate) programming_beat: OnceLock<Arc<Beat>>,
    /// Whether the settings had a `[keystone]` table, whose catalog names Glance
    /// (kept by [`Agent::offline`], which drops the table itself).
    pub(crate) keystone_catalog: bool,
    /// Partitioning on demand, opened on first use ([`Agent::partitions`]).
    partitions: OnceLock<crate::partitions::Partitions>,
}

impl Agent {
    pub fn new(settings: Settings) -> Result<Agent, AgentError> {
        let drivers = drivers::select(&settings.driver, settings.drivers.as_deref())?;
        Agent::with_drivers(settings, drivers)
    }

    /// An agent over `drivers` instead of those `settings` names (tests, and drivers
    /// built outside this crate).
    pub fn with_drivers(
        settings: Settings,
        drivers: Vec<Box<dyn Driver>>,
    ) -> Result<Agent, AgentError> {
        let nova = match &settings.nova_config {
            Some(p) => Some(NovaPci::load(p)?),
            None => None,
        };
        let client =
            Client::with_auth(&settings.server, settings.auth()?).map_err(AgentError::BadServer)?;
        let settings_keystone = settings.keystone.is_some();
        let (tx, rx) = mpsc::unbounded_channel();
        Ok(Agent {
            settings,
            drivers,
            nova,
            client,
            reports: AtomicU64::new(0),
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
            cleanings: Default::default(),
            handed: Default::default(),
            handover: (tx, tokio::sync::Mutex::new(rx)),
            programming_beat: OnceLock::new(),
            keystone_catalog: settings_keystone,
            partitions: OnceLock::new(),
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
                    self.probe(|p| p.server(Check::Ok));
                    return Ok(Some(n));
                }
                Err(
                    e @ (AgentError::Config(_) | AgentError::Nova(_) | AgentError::BadServer(_)),
                ) => return Err(e),
                Err(e) => {
                    let cause = cause_chain(&e);
                    tracing::warn!(server = %self.settings.server, attempt, retry_in_s = delay.as_secs_f64(), cause = %cause, "server not ready; waiting");
                    self.probe(|p| {
                        p.server(Check::Failed(cause.clone()));
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

    /// The node's partitioning (MIG instances and mdevs made and unmade on demand,
    /// issue 45), opened on first use: NVML from `nvml_library`, the checkpoint in
    /// `state_dir`, counted in this agent's metrics. The bind and DRA prepare paths call
    /// its `create` / `release` / `create_mdev` / `remove_mdev`, and the start-up its
    /// `after_boot` with what the server says is held (docs/partitions.md).
    pub fn partitions(&self) -> &crate::partitions::Partitions {
        self.partitions.get_or_init(|| {
            let p = crate::partitions::Partitions::open(
                &self.settings.sysfs_root,
                self.settings.partitions.clone(),
            );
            match self.metrics() {
                Some(m) => p.with_metrics(m),
                None => p,
            }
        })
    }

    /// After the start (the server found): the node's MIG partitions accounted for
    /// against what the server's ledgers hold ([`Partitions::after_boot`]: held ones
    /// made again after a reboot or reported lost, ones no one holds destroyed). Skipped
    /// when nothing is held and this agent never made any (no NVML is loaded then).
    /// Every outcome is a log line; NVML's creates and destroys are counted by the
    /// partitions manager.
    ///
    /// [`Partitions::after_boot`]: crate::partitions::Partitions::after_boot
    pub async fn recover_partitions(&self) -> Result<(), AgentError> {
        use crate::partitions::Held;
        let node = self.settings.require_node()?;
        let held = self.client.held_partitions(node).await?.held;
        let ours = self
            .partitions()
            .checkpoint()
            .map(|c| !c.mig.is_empty() || !c.mdevs.is_empty())
            .unwrap_or(true);
        if held.is_empty() && !ours {
            return Ok(());
        }
        let mut wanted = Vec::with_capacity(held.len());
        for h in held {
            match h.device.parse() {
                Ok(gpu) => wanted.push(Held::Mig {
                    gpu,
                    profile_id: h.profile_id,
                    placement: accel_api::partitions::MigPlacement {
                        start: h.start,
                        size: h.size,
                    },
                    holder: h.consumer,
                }),
                Err(_) => {
                    tracing::warn!(device = %h.device, consumer = %h.consumer, "the server holds a MIG partition on a device whose address this agent cannot read; left alone");
                }
            }
        }
        // A few NVML calls, once at the start: run in place.
        match self.partitions().after_boot(&wanted) {
            Ok(r) => {
                for x in &r.recreated {
                    tracing::warn!(gpu = %x.gpu, holder = %x.holder, old_uuid = ?x.old_uuid, uuid = %x.instance.uuid, "a held MIG partition was made again after a reboot: its consumer must be given the new UUID");
                }
                for x in &r.lost {
                    tracing::error!(held = ?x.held, reason = %x.reason, "a held MIG partition could not be made again");
                }
                tracing::info!(
                    rebooted = r.rebooted,
                    kept = r.kept.len(),
                    recreated = r.recreated.len(),
                    lost = r.lost.len(),
                    released = r.released.len(),
                    mdevs_recreated = r.mdevs_recreated.len(),
                    mdevs_released = r.mdevs_released.len(),
                    "partitions accounted for after the start"
                );
                Ok(())
            }
            Err(e) => Err(AgentError::Partitions(e)),
        }
    }

    /// The metrics of the probes this agent records in, if any.
    pub(crate) fn metrics(&self) -> Option<Arc<crate::metrics::Metrics>> {
        self.probes.as_ref().map(|p| p.metrics().clone())
    }

    pub(crate) fn probe(&self, f: impl FnOnce(&Probes)) {
        if let Some(p) = &self.probes {
            f(p);
        }
    }

    /// The report of the current discovery.
    pub fn report(&self) -> Result<(Report, Discovery), AgentError> {
        let node = self.settings.require_node()?;
        let d = self.discover();
        Ok((
            Report::new(node, d.devices.clone()).modelled(self.settings.model),
            d,
        ))
    }

    /// Checks that the server knows the compute node; with `node_provider = "own"`,
    /// has the server create it when absent.
    pub async fn check_node(&self) -> Result<NodeInfo, AgentError> {
        let node = self.settings.require_node()?;
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
                code,
                ..
            }) if no_node_code(&code) => Err(AgentError::NoComputeNode {
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
    pub async fn step(&self) -> Result<ReportOutcome, AgentError> {
        let (report, discovery) = self.report()?;
        if !discovery.unknown.is_empty() {
            let e = AgentError::DriversFailed(discovery.unknown.join(", "));
            self.probe(|p| {
                p.metrics().report(Outcome::Skipped, None);
                p.report(Check::Failed(e.to_string()));
            });
            return Err(e);
        }
        let force = self
            .reports
            .load(Ordering::Relaxed)
            .is_multiple_of(FULL_EVERY);
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
                Err(e) if e.status().is_none() => Check::Failed(e.to_string()),
                _ => Check::Ok,
            });
            p.report(Check::of(&sent));
        });
        if let Err(e) = &sent {
            tracing::warn!(node = %report.node, outcome = outcome.as_str(), took_ms = took.as_millis() as u64, error = %e, "report not accepted");
        }
        let outcome = sent.map_err(|e| match e {
            ClientError::Status {
                status: 400,
                message,
                code,
                ..
            } if no_node_code(&code) => AgentError::NoComputeNode {
                node: report.node.clone(),
                message,
            },
            other => other.into(),
        })?;
        self.reports.fetch_add(1, Ordering::Relaxed);
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

    /// The probes this agent records in, if any (the node's health).
    pub fn probes(&self) -> Option<&Arc<Probes>> {
        self.probes.as_ref()
    }

    /// Holds the programming worker's liveness for `bound` (a programming in flight).
    pub(crate) fn hold(&self, bound: Duration) -> Option<Held> {
        self.programming_beat.get().map(|b| b.hold(bound))
    }

    /// The next handed-over cleaning, if one waits.
    pub(crate) fn next_handover(&self) -> Option<Handover> {
        self.handover.1.try_lock().ok()?.try_recv().ok()
    }
}
