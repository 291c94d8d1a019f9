//! The agent's start-up check of its `[[cleaning]]` rules (issue 41 item 3): what
//! [`super::resolve`] finds for this host's devices, plus what only the agent's own
//! process can tell: whether it may open the reset files for writing, and what the
//! image service says of each `fpga-default` image. A problem stops the agent before
//! it reports or serves anything, naming each device and the reason, rather than at
//! a release, where it would leave a tenant's device reserved and unclean.
//!
//! Glance's word is final only when it answers: a 404, an image not active or one
//! without a checksum stops the agent; an image service it cannot reach (or a
//! Keystone that gives no token) is logged and the check goes on, as the agent waits
//! out an unreachable server rather than crash-looping (issue 14). The image is then
//! fetched, and checked, when a region is cleaned.

use super::resolve::{resolve, Env, ImageRefusal, Resolution, SearchPath, Unverified, Unworkable};
use crate::agent::Agent;
use crate::model::{FoundDevice, Report, NO_NODE};
use std::fmt;
use std::time::Duration;

/// How long the start-up check waits for Glance's answer about one image.
pub const IMAGE_LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// One device its rule cannot work for.
#[derive(Debug, Clone)]
pub struct Problem {
    pub address: String,
    /// The providers the device is reported as.
    pub providers: Vec<String>,
    pub rule: usize,
    pub method: &'static str,
    pub reason: Unworkable,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {} ({}): cleaning[{}] ({}) cannot work: {}",
            self.address,
            self.providers.join(", "),
            self.rule,
            self.method,
            self.reason
        )
    }
}

/// The agent's refusal to start: every device a rule cannot work for.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} [[cleaning]] problem(s), so the agent does not start (`accel agent check` shows every device and its rule): {}", .0.len(), list(.0))]
pub struct CannotWork(pub Vec<Problem>);

fn list(p: &[Problem]) -> String {
    p.iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Agent {
    /// Every device of `devices` a rule matches, resolved with programs looked up on
    /// `search`; with `try_writes`, the reset files opened for writing. Asks no one:
    /// an `fpga-default` image is left [`Unverified`].
    pub fn resolve_cleaning<'a>(
        &self,
        devices: &'a [FoundDevice],
        search: &SearchPath,
        try_writes: bool,
    ) -> Vec<Resolution<'a>> {
        let programming = |driver: &str| self.programming(driver);
        let env = Env {
            sysfs_root: &self.settings.sysfs_root,
            search,
            image_service: self.settings.glance_url.is_some() || self.keystone_catalog,
            programming: &programming,
            try_writes,
        };
        resolve(&self.settings.cleaning, devices, &env)
    }

    /// The start-up check: one discovery, every rule resolved for the devices it
    /// matches with this process's `PATH`, reset files opened for writing, and each
    /// `fpga-default` image asked of Glance. `Err` names every device a rule cannot
    /// work for.
    pub async fn check_cleaning(&self) -> Result<(), CannotWork> {
        self.check_cleaning_with(&SearchPath::current()).await
    }

    /// [`Agent::check_cleaning`] with programs looked up on `search`.
    pub async fn check_cleaning_with(&self, search: &SearchPath) -> Result<(), CannotWork> {
        if self.settings.cleaning.is_empty() {
            return Ok(());
        }
        let devices = self.discover().devices;
        let mut found = self.resolve_cleaning(&devices, search, true);
        let mut images: Vec<String> = found
            .iter()
            .flat_map(|r| r.unverified.iter())
            .filter_map(|u| match u {
                Unverified::Image(i) => Some(i.clone()),
                Unverified::Write(_) => None,
            })
            .collect();
        images.sort();
        images.dedup();
        for image in images {
            let Some(why) = self.ask_glance(&image).await else {
                continue;
            };
            for r in &mut found {
                let before = r.unverified.len();
                r.unverified
                    .retain(|u| !matches!(u, Unverified::Image(i) if *i == image));
                if r.unverified.len() != before {
                    r.problems.push(Unworkable::Image {
                        image: image.clone(),
                        why: why.clone(),
                    });
                }
            }
        }
        let node = if self.settings.node.is_empty() {
            NO_NODE
        } else {
            &self.settings.node
        };
        let names = Report::new(node, devices.clone())
            .modelled(self.settings.model)
            .provider_names();
        let problems: Vec<Problem> = found
            .into_iter()
            .flat_map(|r| {
                let address = r.device.address.to_string();
                let providers = names.get(&address).cloned().unwrap_or_default();
                r.problems.into_iter().map(move |reason| Problem {
                    address: address.clone(),
                    providers: providers.clone(),
                    rule: r.rule,
                    method: r.method,
                    reason,
                })
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(CannotWork(problems))
        }
    }

    /// Glance's refusal of `image`, or `None` when it is fine or Glance cannot say.
    async fn ask_glance(&self, image: &str) -> Option<ImageRefusal> {
        let glance = match self.glance().await {
            Ok((g, _)) => g,
            Err(e) => {
                tracing::warn!(image, "fpga-default image not checked at start-up: {e}");
                return None;
            }
        };
        let answer = tokio::time::timeout(IMAGE_LOOKUP_TIMEOUT, glance.lookup(image)).await;
        match answer {
            Ok(Ok(i)) if i.status != "active" => Some(ImageRefusal::NotActive(i.status)),
            Ok(Ok(i)) if i.hash.is_none() => Some(ImageRefusal::NoChecksum),
            Ok(Ok(_)) => {
                tracing::info!(image, "fpga-default image found in the image service");
                None
            }
            Ok(Err(crate::program::LookupError::NotFound)) => Some(ImageRefusal::NotFound),
            Ok(Err(e)) => {
                tracing::warn!(image, "fpga-default image not checked at start-up: {e}");
                None
            }
            Err(_) => {
                tracing::warn!(
                    image,
                    "fpga-default image not checked at start-up: the image service did not answer within {}s",
                    IMAGE_LOOKUP_TIMEOUT.as_secs()
                );
                None
            }
        }
    }
}
