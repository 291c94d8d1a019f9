//! The cleaning worker's side of [`Agent`], over the rules of [`crate::cleaning`]:
//! the rules resolved against this host's devices and drivers ([`resolve`], what `accel
//! agent check` shows and start-up refuses, [`startup`]), one look for the cleanings the server
//! holds for this process ([`Agent::clean_step`], a long poll in the worker), and the
//! start of each new one: `pci-reset` and `command` rules in their own task (a wipe
//! may take hours), `fpga-default` handed to the programming worker
//! ([`Handover`]). Nothing here waits for a cleaning to end.

pub mod resolve;
pub mod startup;

use crate::agent::{Agent, AgentError, Handover};
use crate::cleaning::{answer, device_node, rule_for, run_rule, CleanError, Method};
use accel_api::agent::CleaningRequest;
use std::time::Instant;

impl Agent {
    /// Takes the cleanings the server holds for this process and starts each that is
    /// not already running; answers how many it started. `wait`: how long the server
    /// may hold the look for a release (the worker's long poll), `None` to answer now.
    pub async fn clean_step(&self) -> Result<usize, AgentError> {
        self.look_for_cleanings(None).await
    }

    /// One look, held by the server up to `wait` seconds.
    pub(crate) async fn look_for_cleanings(&self, wait: Option<u64>) -> Result<usize, AgentError> {
        let node = self.settings.require_node()?.to_owned();
        // Reaped before the look: a cleaning that ends while the look waits is still
        // counted as running when its answer comes, so it is not started twice.
        self.cleanings.lock().await.reap();
        // Without rules no device carries the trait; the server is not asked.
        if self.settings.cleaning.is_empty() {
            return Ok(0);
        }
        let jobs = self.client.cleanings(&node, &self.agent_id, wait).await?;
        Ok(self.start_cleanings(&node, jobs).await)
    }

    /// Starts the cleanings of `jobs` this process is not already running (a fetch
    /// answers every cleaning the process holds); answers how many it started.
    async fn start_cleanings(&self, node: &str, jobs: Vec<CleaningRequest>) -> usize {
        let mut running = self.cleanings.lock().await;
        let new: Vec<_> = jobs
            .into_iter()
            .filter(|j| !running.contains(&j.rp_uuid, j.attempt) && !self.is_handed(j))
            .collect();
        if new.is_empty() {
            return 0;
        }
        let devices = self.discover().devices;
        let metrics = self.metrics();
        for job in &new {
            let started = Instant::now();
            let found = devices
                .iter()
                .find(|d| d.address.to_string() == job.address);
            let rule = found.and_then(|d| {
                let k = crate::kubernetes::to_device(&self.settings.sysfs_root, d);
                rule_for(&self.settings.cleaning, &k).cloned()
            });
            let device_node = device_node(&self.settings.sysfs_root, &job.address);
            tracing::info!(provider = %job.rp_uuid, address = %job.address, attempt = job.attempt, "cleaning a released device");
            let rule = match (found, rule) {
                (Some(_), Some(r)) => r,
                (found, _) => {
                    let address = job.address.clone();
                    let e = match found {
                        None => CleanError::Gone { address },
                        Some(_) => CleanError::NoRule { address },
                    };
                    let took = started.elapsed();
                    answer(&self.client, metrics.as_deref(), node, job, &Err(e), took).await;
                    continue;
                }
            };
            if let Method::FpgaDefault(_) = &rule.method {
                self.hand_over(Handover {
                    node: node.to_owned(),
                    job: job.clone(),
                    rule,
                    device_node,
                    started,
                });
                continue;
            }
            let (client, node, job2) = (self.client.clone(), node.to_owned(), job.clone());
            let (metrics, root) = (metrics.clone(), self.settings.sysfs_root.clone());
            running.spawn(job.rp_uuid.clone(), job.attempt, async move {
                let deadline = started + rule.timeout;
                let r = run_rule(
                    &rule,
                    &root,
                    &job2.address,
                    device_node.as_deref(),
                    deadline,
                )
                .await;
                answer(
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
        new.len()
    }

    /// Waits for every cleaning this agent started in its own task to be answered (or
    /// given up); handed-over ones end with the programming worker's step.
    pub async fn cleanings_done(&self) {
        self.cleanings.lock().await.drain().await;
    }

    /// Whether `job` was handed to the programming worker and is not answered yet.
    fn is_handed(&self, job: &CleaningRequest) -> bool {
        let handed = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        handed.contains(&(job.rp_uuid.clone(), job.attempt))
    }

    /// Hands an `fpga-default` cleaning to the programming worker.
    fn hand_over(&self, h: Handover) {
        let key = (h.job.rp_uuid.clone(), h.job.attempt);
        self.handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key);
        // The receiver lives as long as the agent: a send cannot fail.
        let _ = self.handover.0.send(h);
    }

    /// A handed-over cleaning was answered: a later look may start it again.
    pub(crate) fn handed_back(&self, job: &CleaningRequest) {
        let key = (job.rp_uuid.clone(), job.attempt);
        self.handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }
}
