//! One way for the client commands to find the cloud (issue 29 item 4): the OpenStack
//! way, `--os-cloud NAME` (`OS_CLOUD`) with `clouds.yaml`, or the `OS_AUTH_URL`
//! family of variables, authenticating with Keystone and finding Placement and the
//! accelerator API in its catalog, as `openstack` does. The explicit URLs (`--url`,
//! `--placement-url`, `--accelerator-url` and their `ACCEL_*` variables) and `--token`
//! stay as overrides; without a cloud, they default to a local `accel serve` in noauth
//! mode, as before.
//!
//! `clouds.yaml` is looked for where openstacksdk looks: `$OS_CLIENT_CONFIG_FILE`,
//! `./clouds.yaml`, `$XDG_CONFIG_HOME/openstack/clouds.yaml` (`~/.config/...`), then
//! `/etc/openstack/clouds.yaml`. Only password authentication is spoken (the
//! `password` auth type, Keystone v3); `secure.yaml` is not read.

use accel_keystone::{Session, SessionConfig};
use anyhow::{bail, Context};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The local `accel serve`'s Placement, when nothing else says where it is.
pub const DEFAULT_PLACEMENT: &str = "http://127.0.0.1:8778";
/// The local `accel serve`'s accelerator API.
pub const DEFAULT_ACCELERATOR: &str = "http://127.0.0.1:6666";
/// noauth's admin token.
pub const DEFAULT_TOKEN: &str = "admin";

/// The API a URL is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Placement,
    Accelerator,
}

impl Service {
    /// The catalog's service type (devstack registers Cyborg as `accelerator`).
    fn catalog_type(self) -> &'static str {
        match self {
            Service::Placement => "placement",
            Service::Accelerator => "accelerator",
        }
    }

    fn default_url(self) -> &'static str {
        match self {
            Service::Placement => DEFAULT_PLACEMENT,
            Service::Accelerator => DEFAULT_ACCELERATOR,
        }
    }
}

/// Where the client commands' credentials come from.
pub struct Cloud {
    /// Keystone credentials, when a cloud is named or `OS_AUTH_URL` is set.
    session: Option<SessionConfig>,
    /// Says where they came from, for messages.
    source: String,
}

#[derive(Deserialize)]
struct CloudsFile {
    #[serde(default)]
    clouds: BTreeMap<String, CloudEntry>,
}

#[derive(Deserialize)]
struct CloudEntry {
    #[serde(default)]
    auth: BTreeMap<String, serde_yaml::Value>,
    auth_type: Option<String>,
    region_name: Option<String>,
    interface: Option<String>,
}

/// `clouds.yaml` files in openstacksdk's order.
fn clouds_files() -> Vec<PathBuf> {
    if let Some(f) = std::env::var_os("OS_CLIENT_CONFIG_FILE") {
        return vec![PathBuf::from(f)];
    }
    let mut out = vec![PathBuf::from("clouds.yaml")];
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(c) = config {
        out.push(c.join("openstack/clouds.yaml"));
    }
    out.push(PathBuf::from("/etc/openstack/clouds.yaml"));
    out
}

fn text(v: Option<&serde_yaml::Value>) -> Option<String> {
    match v? {
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The session of cloud `name` of the first `clouds.yaml` that has it.
fn from_clouds_yaml(name: &str) -> anyhow::Result<(SessionConfig, String)> {
    let files = clouds_files();
    for path in &files {
        let Ok(raw) = std::fs::read_to_string(path) else {
            continue;
        };
        let file: CloudsFile =
            serde_yaml::from_str(&raw).with_context(|| format!("reading {}", path.display()))?;
        let Some(entry) = file.clouds.get(name) else {
            continue;
        };
        let where_ = format!("cloud {name:?} of {}", path.display());
        if let Some(t) = entry.auth_type.as_deref().filter(|t| *t != "password") {
            bail!("{where_}: auth_type {t:?} is not supported; accel speaks \"password\"");
        }
        let get = |k: &str| text(entry.auth.get(k));
        let need = |k: &str| get(k).with_context(|| format!("{where_}: auth.{k} is missing"));
        let cfg = SessionConfig {
            auth_url: need("auth_url")?,
            auth_type: "password".into(),
            username: need("username")?,
            password: need("password")?.into(),
            project_name: need("project_name")?,
            user_domain_name: get("user_domain_name")
                .or_else(|| get("domain_name"))
                .unwrap_or_else(accel_keystone::default_domain),
            project_domain_name: get("project_domain_name")
                .or_else(|| get("domain_name"))
                .unwrap_or_else(accel_keystone::default_domain),
            region_name: entry.region_name.clone(),
            interface: entry.interface.clone().unwrap_or_else(|| "public".into()),
            endpoint_override: None,
            http_connect_timeout: None,
        };
        return Ok((cfg, where_));
    }
    let looked: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "--os-cloud {name:?}: no such cloud in {}",
        looked.join(", ")
    )
}

/// The session of the `OS_AUTH_URL` family of variables, when `OS_AUTH_URL` is set.
fn from_environment() -> anyhow::Result<Option<SessionConfig>> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let Some(auth_url) = var("OS_AUTH_URL") else {
        return Ok(None);
    };
    let need = |k: &str| var(k).with_context(|| format!("OS_AUTH_URL is set but {k} is not"));
    Ok(Some(SessionConfig {
        auth_url,
        auth_type: "password".into(),
        username: need("OS_USERNAME")?,
        password: need("OS_PASSWORD")?.into(),
        project_name: need("OS_PROJECT_NAME")?,
        user_domain_name: var("OS_USER_DOMAIN_NAME").unwrap_or_else(accel_keystone::default_domain),
        project_domain_name: var("OS_PROJECT_DOMAIN_NAME")
            .unwrap_or_else(accel_keystone::default_domain),
        region_name: var("OS_REGION_NAME"),
        interface: var("OS_INTERFACE").unwrap_or_else(|| "public".into()),
        endpoint_override: None,
        http_connect_timeout: None,
    }))
}

impl Cloud {
    /// The cloud `--os-cloud` names, else the `OS_*` variables, else none.
    pub fn find(os_cloud: Option<&str>) -> anyhow::Result<Cloud> {
        if let Some(name) = os_cloud.filter(|n| !n.is_empty()) {
            let (cfg, source) = from_clouds_yaml(name)?;
            cfg.validate(&source).map_err(anyhow::Error::msg)?;
            return Ok(Cloud {
                session: Some(cfg),
                source,
            });
        }
        match from_environment()? {
            Some(cfg) => {
                cfg.validate("OS_* variables").map_err(anyhow::Error::msg)?;
                Ok(Cloud {
                    session: Some(cfg),
                    source: "the OS_* variables".into(),
                })
            }
            None => Ok(Cloud {
                session: None,
                source: String::new(),
            }),
        }
    }

    /// Fills each URL left empty and an empty token: from Keystone's catalog and a
    /// password token when there is a cloud, else the local defaults. A URL or token
    /// given explicitly stays as it is (and Keystone is not asked when nothing is
    /// left to fill).
    pub fn fill(
        &self,
        urls: &mut [(&mut String, Service)],
        token: &mut String,
    ) -> anyhow::Result<()> {
        let empty = urls.iter().any(|(u, _)| u.is_empty()) || token.is_empty();
        if !empty {
            return Ok(());
        }
        let Some(cfg) = &self.session else {
            for (u, s) in urls.iter_mut() {
                if u.is_empty() {
                    **u = s.default_url().to_owned();
                }
            }
            if token.is_empty() {
                *token = DEFAULT_TOKEN.to_owned();
            }
            return Ok(());
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let session = Session::new(cfg.clone()).map_err(anyhow::Error::msg)?;
        let source = &self.source;
        rt.block_on(async {
            let t = session
                .token()
                .await
                .map_err(|e| anyhow::anyhow!("authenticating with {source}: {e}"))?;
            if token.is_empty() {
                *token = t;
            }
            for (u, s) in urls.iter_mut() {
                if u.is_empty() {
                    let found = session
                        .endpoint(s.catalog_type())
                        .await
                        .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
                    // Cyborg's catalog entry ends in /v2; the clients add it.
                    **u = found.strip_suffix("/v2").unwrap_or(&found).to_owned();
                }
            }
            Ok(())
        })
    }
}
