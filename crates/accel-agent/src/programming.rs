//! The programming worker's side of [`Agent`]: the server's programming requests
//! ([`Agent::program_step`]) and the `fpga-default` cleanings the cleaning worker
//! hands over ([`crate::agent::Handover`]), each fetched from Glance, checked and programmed by the
//! device's driver (see [`crate::program`]).
//!
//! ```text
//! cleaning worker ── Handover (channel) ──▶ programming worker ──▶ Agent::program
//! server's pending programs ───────────────▶     (one at a time)      │
//!                      report (forced) ◀── answer (finish_program / finish_cleaning)
//! ```
//!
//! A cleaning that re-programs a card may take minutes (the rule's timeout, 300 s by
//! default); it runs here, not in the cleaning worker's loop, so the long poll for the
//! next release goes on, and the worker's liveness is held for the rule's timeout (see
//! [`crate::observe::Beat::hold`]) rather than read as stuck.

use crate::agent::{Agent, AgentError, Handover};
use crate::cleaning;
use crate::client::Auth;
use crate::drivers;
use crate::pci::PciBus;
use crate::program::{self, Glance, GlanceError, ProgramJob};
use crate::sysfs::Sysfs;
use accel_api::agent::ProgramAnswer;
use std::time::Duration;

/// How long one programming request may hold the programming worker before its
/// liveness fails: a download and a vendor tool's run, bounded by the client's
/// timeouts and the tool's own.
pub const PROGRAM_BOUND: Duration = Duration::from_secs(15 * 60);

impl Agent {
    /// Carries out the `fpga-default` cleanings handed over so far, then the server's
    /// pending programming requests, one at a time, answering each; answers how many
    /// programming requests it handled. After a successful programming the host is
    /// reported (forced) before the answer, so the region's new function trait is in
    /// Placement when the bind resolves.
    pub async fn program_step(&self) -> Result<usize, AgentError> {
        while let Some(h) = self.next_handover() {
            self.clean_by_programming(h).await;
        }
        let node = self.settings.require_node()?.to_owned();
        let jobs = self.client.pending_programs(&node).await?;
        for job in &jobs {
            let _held = self.hold(PROGRAM_BOUND);
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
            let answer = match &result {
                Ok(_) => ProgramAnswer::Done,
                Err(e) => ProgramAnswer::Failed {
                    error: e.to_string(),
                },
            };
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

    /// One handed-over `fpga-default` cleaning: the rule's image programmed by its
    /// timeout, a report, the rule's verification, the answer.
    pub(crate) async fn clean_by_programming(&self, h: Handover) {
        let Handover {
            node,
            job,
            rule,
            device_node,
            started,
        } = h;
        let cleaning::Method::FpgaDefault(image) = &rule.method else {
            return;
        };
        let deadline = started + rule.timeout;
        let _held = self.hold(rule.timeout);
        let pj = ProgramJob {
            id: 0,
            deployable_name: job.name.clone(),
            bitstream_id: Some(image.clone()),
            function_id: None,
        };
        let result = match tokio::time::timeout_at(deadline.into(), self.program(&node, &pj)).await
        {
            Err(_) => Err(cleaning::CleanError::ProgramTimedOut),
            Ok(Err(e)) => Err(cleaning::CleanError::Program(e.to_string())),
            Ok(Ok(_)) => {
                if let Err(e) = self.step().await {
                    tracing::warn!("report after the default image failed: {e}");
                }
                cleaning::verify(&rule, &job.address, device_node.as_deref(), deadline).await
            }
        };
        let metrics = self.metrics();
        cleaning::answer(
            &self.client,
            metrics.as_deref(),
            &node,
            &job,
            &result,
            started.elapsed(),
        )
        .await;
        self.handed_back(&job);
    }

    /// Fetches, verifies and programs one request's bitstream; answers the function id
    /// the driver reports.
    pub(crate) async fn program(
        &self,
        node: &str,
        job: &ProgramJob,
    ) -> Result<Option<String>, ProgramError> {
        let (glance, glance_url) = self.glance().await?;
        let image = match (&job.bitstream_id, &job.function_id) {
            (Some(b), _) => glance.image(b).await,
            (None, Some(f)) => glance.image_for_function(f).await,
            (None, None) => return Err(ProgramError::NoImage),
        };
        self.glance_call(
            "glance_image",
            &glance_url,
            job,
            image.as_ref().map(|i| i.id.as_str()),
        );
        let image = image.map_err(ProgramError::Glance)?;
        let file = glance.download(&image, &self.settings.program_dir).await;
        self.glance_call(
            "glance_download",
            &glance_url,
            job,
            file.as_ref().map(|_| image.id.as_str()),
        );
        let file = file.map_err(ProgramError::Glance)?;
        let result = self.program_file(node, job, &file);
        let _ = std::fs::remove_file(&file);
        let function = result?;
        if let (Some(want), Some(got)) = (&job.function_id, &function) {
            if accel_core::accelerator::id_part(want) != accel_core::accelerator::id_part(got) {
                return Err(ProgramError::WrongFunction {
                    image: image.id.clone(),
                    got: got.clone(),
                    want: want.clone(),
                });
            }
        }
        Ok(function)
    }

    /// The image service bitstreams come from (`glance_url`, else the Keystone
    /// catalog's), with a token, and its URL.
    pub(crate) async fn glance(&self) -> Result<(Glance, String), ProgramError> {
        let glance_url = match (&self.settings.glance_url, self.client.auth()) {
            (Some(u), _) => u.clone(),
            (None, Auth::Keystone(s)) => {
                s.endpoint("image").await.map_err(GlanceError::Keystone)?
            }
            (None, Auth::Token(_)) => return Err(ProgramError::NoGlance),
        };
        let token = self
            .client
            .auth()
            .token()
            .await
            .map_err(|e| GlanceError::Keystone(e.to_string()))?;
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
    fn glance_call(&self, call: &str, url: &str, job: &ProgramJob, r: Result<&str, &GlanceError>) {
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
    ) -> Result<Option<String>, ProgramError> {
        let sysfs = Sysfs::new(&self.settings.sysfs_root);
        let devices = self.discover().devices;
        let (device, region) = program::locate(&devices, node, &job.deployable_name)
            .ok_or_else(|| ProgramError::NoRegion(job.deployable_name.clone()))?;
        let driver = self
            .drivers
            .iter()
            .find(|d| d.name() == device.driver)
            .ok_or_else(|| ProgramError::DriverNotEnabled(device.driver.to_owned()))?;
        let bus = PciBus::scan(&sysfs);
        let host = drivers::Host::new(&sysfs, &bus, &self.settings.driver);
        driver
            .program(&host, device, region, file)
            .map_err(|e| ProgramError::Driver(e.to_string()))
    }
}

/// Why one programming failed (the server records the words with the request).
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error("the request names neither a bitstream nor a function")]
    NoImage,
    #[error("the agent has no glance_url, so it cannot fetch bitstreams")]
    NoGlance,
    #[error(transparent)]
    Glance(#[from] crate::program::GlanceError),
    #[error("no FPGA region on this host is deployable {0}")]
    NoRegion(String),
    #[error("driver {0} is not enabled")]
    DriverNotEnabled(String),
    #[error("{0}")]
    Driver(String),
    #[error("image {image} programmed function {got}, not the requested {want}")]
    WrongFunction {
        image: String,
        got: String,
        want: String,
    },
}
