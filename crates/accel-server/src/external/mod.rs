//! An external OpenStack Placement: accel's device providers copied to the
//! Placement a cloud already runs, so accel can replace Cyborg there.
//!
//! ```text
//!  PUT /v2/agent/hosts/{h}/devices ─┐   (compute node only remote? a local placeholder
//!  POST /v2/devices/{u}/enable|disable│    with its uuid and name is created first)
//!                                   ▼
//!  one transaction: built-in Placement tables + placement_pushes.mark(h) ─▶ wake
//!                                   ▼
//!  Pusher::step(now) (worker.rs): due hosts ─▶ claim (lease CAS)
//!     ─▶ push.rs: remote compute node by name ─▶ each local device provider:
//!        exists (uuid, name, parent), classes, traits (+ CUSTOM_OWNER_ACCEL),
//!        inventories (generation, re-read on 409) ─▶ remote providers under the node
//!        with CUSTOM_OWNER_ACCEL that are gone locally: deleted, children first;
//!        in use remotely (409): reserved = total, retried later
//!     ─▶ succeeded(version) | failed(error, retry with backoff)
//! ```
//!
//! The built-in Placement stays accel's record of the tree; the remote copy is
//! eventually consistent with it. Everything a push needs is in the database, so any
//! replica pushes and a restarted server resumes (see
//! [`accel_store::accelerator::pushes`]). accel never modifies the remote compute
//! node provider (Cyborg's rule, reference §5.4). Requests use Placement microversion
//! 1.26 (reserved may equal total), and 1.37 only to move a provider.
//!
//! Invariants:
//!
//! - **Nothing is lost.** The mark commits with the change it announces, so a crash
//!   between the change and the push leaves the host pending; a claim by a dead server
//!   expires with its lease. A change made during a push bumps `version`, so the push's
//!   `succeeded` (for the older version) leaves the host pending and due at once.
//! - **The remote compute node is Nova's**: looked up by name, never written; accel
//!   writes only below it, and deletes only providers with `CUSTOM_OWNER_ACCEL` (added to
//!   every pushed provider's traits), so Nova's own nested providers are left alone.
//! - **Nothing allocated remotely disappears.** A device accel removed (its allocations
//!   are Nova's, in the other Placement) whose remote provider cannot be deleted is made
//!   unallocatable (`reserved = total`) and the host stays pending (`last_error` names
//!   it) until a later attempt deletes it.
//! - **A push is idempotent and reads first**: when in sync it makes three list requests
//!   and two reads per provider, and writes nothing.
//! - **The local compute node is a placeholder**: with `[placement]` set, a report or the
//!   agent's start-up check for a host with no local provider of that name asks the
//!   remote; the report then creates a local provider with the remote uuid and name (no
//!   inventory, never pushed) in its transaction. A report for a known host does not
//!   contact the remote, so agents keep reporting while it is down.

mod client;
mod push;
pub(crate) mod worker;

pub use client::{Client, RemoteError};
pub use push::{push, Pushed};
pub use worker::{PushStep, Pusher, BATCH as PUSH_BATCH};

use serde::Deserialize;
use std::sync::Arc;
use tokio::sync::Notify;

/// The `[placement]` table: keystoneauth's option names, as in Cyborg's and Nova's
/// `[placement]` sections, plus a static `token`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PlacementConfig {
    /// The Placement URL (e.g. `http://ctl/placement`); without it the endpoint comes
    /// from the Keystone catalog (service type `placement`).
    #[serde(default)]
    pub endpoint_override: Option<String>,
    /// Only `password` (keystoneauth's default plugin name) is supported.
    #[serde(default)]
    pub auth_type: Option<String>,
    /// Keystone, for a token by password.
    #[serde(default)]
    pub auth_url: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    /// Printed as `***` by `Debug`.
    pub password: Option<accel_settings::Secret>,
    #[serde(default)]
    pub project_name: Option<String>,
    #[serde(default)]
    pub user_domain_name: Option<String>,
    #[serde(default)]
    pub project_domain_name: Option<String>,
    /// The catalog region; any region when unset.
    #[serde(default)]
    pub region_name: Option<String>,
    /// The catalog interface: public (default), internal or admin.
    #[serde(default)]
    pub interface: Option<String>,
    /// A fixed X-Auth-Token instead of Keystone (tests, a noauth2 Placement such as
    /// `accel serve` with `auth_strategy = "noauth"`, where `admin` is an admin).
    #[serde(default)]
    /// Printed as `***` by `Debug`.
    pub token: Option<accel_settings::Secret>,
    /// Seconds one request may take (default 30).
    #[serde(default)]
    pub timeout: Option<u64>,
}

impl PlacementConfig {
    /// Checks the table as a whole, with messages naming the keys to fix.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(t) = &self.auth_type {
            if t != "password" {
                return Err(format!(
                    "[placement] auth_type {t:?} is not supported: use \"password\", or token"
                ));
            }
        }
        if let Some(u) = &self.endpoint_override {
            accel_keystone::check_url("[placement] endpoint_override", u)?;
        }
        let password_keys = [
            ("auth_url", &self.auth_url),
            ("username", &self.username),
            (
                "password",
                &self.password.as_ref().map(|p| p.expose().to_owned()),
            ),
            ("project_name", &self.project_name),
        ];
        let given: Vec<&str> = password_keys
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| *k)
            .collect();
        match &self.token {
            Some(t) if t.is_empty() => return Err("[placement] token must not be empty".into()),
            Some(_) if !given.is_empty() => {
                return Err(format!(
                    "[placement] token and password authentication exclude each other: \
                     remove token or {}",
                    given.join(", ")
                ))
            }
            Some(_) if self.endpoint_override.is_none() => {
                return Err(
                    "[placement] with token, endpoint_override must name the Placement URL".into(),
                )
            }
            Some(_) => {}
            None => {
                let missing: Vec<&str> = password_keys
                    .iter()
                    .filter(|(_, v)| v.as_deref().is_none_or(str::is_empty))
                    .map(|(k, _)| *k)
                    .collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "[placement] needs token (with endpoint_override) or Keystone password \
                         authentication; missing: {}",
                        missing.join(", ")
                    ));
                }
            }
        }
        if let Some(u) = &self.auth_url {
            accel_keystone::check_url("[placement] auth_url", u)?;
        }
        if let Some(i) = &self.interface {
            if !["public", "internal", "admin"].contains(&i.as_str()) {
                return Err(format!(
                    "[placement] interface must be public, internal or admin, not {i:?}"
                ));
            }
        }
        if let Some(t) = self.timeout {
            if !(1..=600).contains(&t) {
                return Err(format!(
                    "[placement] timeout must be between 1 and 600 seconds, not {t}"
                ));
            }
        }
        Ok(())
    }
}

/// What the server holds when `[placement]` is set: the client, and the pusher's
/// wake-up for this process's changes.
#[derive(Debug)]
pub struct ExternalPlacement {
    pub client: Client,
    pub wake: Notify,
}

impl ExternalPlacement {
    pub fn new(cfg: PlacementConfig) -> Result<Arc<ExternalPlacement>, String> {
        Ok(Arc::new(ExternalPlacement {
            client: Client::new(cfg)?,
            wake: Notify::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(toml_like: &[(&str, &str)]) -> PlacementConfig {
        let map: serde_json::Map<String, serde_json::Value> = toml_like
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
            .collect();
        serde_json::from_value(serde_json::Value::Object(map)).unwrap()
    }

    #[test]
    fn token_needs_an_endpoint_and_excludes_passwords() {
        let e = cfg(&[("token", "admin")]).validate().unwrap_err();
        assert!(e.contains("endpoint_override"), "{e}");
        let e = cfg(&[
            ("token", "admin"),
            ("endpoint_override", "http://p"),
            ("username", "u"),
        ])
        .validate()
        .unwrap_err();
        assert!(e.contains("remove token or username"), "{e}");
        cfg(&[("token", "admin"), ("endpoint_override", "http://p")])
            .validate()
            .unwrap();
    }

    #[test]
    fn password_auth_names_what_is_missing() {
        let e = cfg(&[("auth_url", "http://ks/v3"), ("username", "cyborg")])
            .validate()
            .unwrap_err();
        assert!(e.contains("missing: password, project_name"), "{e}");
        let e = cfg(&[
            ("auth_url", "http://ks/v3"),
            ("username", "u"),
            ("password", "p"),
            ("project_name", "service"),
            ("interface", "private"),
        ])
        .validate()
        .unwrap_err();
        assert!(e.contains("interface"), "{e}");
        let e = cfg(&[("endpoint_override", "placement:8778"), ("token", "t")])
            .validate()
            .unwrap_err();
        assert!(e.contains("endpoint_override must be an http"), "{e}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = serde_json::from_value::<PlacementConfig>(serde_json::json!({"endpoint": "x"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `endpoint`"), "{e}");
    }
}
