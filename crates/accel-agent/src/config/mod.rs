//! The agent's configuration: flags over the TOML file (`--config`) over defaults.
//! Unknown keys are an error; a missing node name or server fails at start-up with
//! what to set, and every value that would make the agent report the wrong devices
//! (a fake device of an unknown type, a count, vendor or product out of range, an
//! unknown driver) stops it at start-up naming its key, before the server is asked
//! anything (issue 14: a skipped device would otherwise read as removed).
//!
//! Every key is declared once, in [`AgentConfig`]'s [`accel_settings::settings!`]
//! block (its flag, environment variable, file key, default and help; docs/agent.md's
//! table is generated from it). The tables:
//!
//! ```toml
//! [keystone]                           # instead of token: a Keystone session
//! auth_url = "http://keystone:5000/v3"
//! username = "accel-agent"
//! password = "secret"
//! project_name = "service"
//!
//! [nic.physnets]
//! physnet1 = ["eth2", "0000:3b:00.0"]
//!
//! [programming]                       # FPGA programming tools
//! fpgaconf = "/usr/bin/fpgaconf"
//! xbutil = "/opt/xilinx/xrt/bin/xbutil"
//!
//! [[fake.devices]]
//! type = "FPGA"
//! model = "demo"
//! count = 4
//!
//! [kubernetes]                         # kubelet device plugins (accel_k8s::config)
//! [[kubernetes.configurations]]
//! name = "gpu"
//! ```

use accel_settings::Secret;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod fake;
pub use fake::{validate_fake, FakeConfig, FakeDevice, MAX_FAKE_COUNT, MAX_FAKE_DEVICES};

/// The drivers an agent can run: the values the `drivers` key accepts.
pub const DRIVER_NAMES: &[&str] = &[
    "nvidia",
    "intel_fpga",
    "xilinx",
    "qat",
    "nvme",
    "nic",
    "fake",
];

accel_settings::settings! {
    /// The agent's settings, resolved (flag, environment, file, default); [`Settings::load`]
    /// checks them and turns them into what the agent runs with.
    pub struct AgentConfig / AgentFlags / AgentFile {
        /// The accelerator API root.
        server: String = optional("http://127.0.0.1:6666; with [keystone], the catalog's accelerator endpoint"),
            flag(long, env = "ACCEL_AGENT_SERVER", value_name = "URL");
        /// The compute node's provider name: Nova's hypervisor_hostname (checked at start-up).
        node: String = optional("none (required)"),
            flag(long, env = "ACCEL_AGENT_NODE", global = true, value_name = "NAME");
        /// Who creates the node's root provider in Placement: nova (nova-compute does;
        /// the agent never creates it) or own (no Nova on this node: the agent has the
        /// server create it, named after node, and owns it; docs/kubernetes.md).
        node_provider: NodeProvider = value(NodeProvider::Nova);
        /// Sent as X-Auth-Token: admin for a noauth server, else a service token (or a
        /// [keystone] table).
        token: Secret = optional("admin"),
            flag(long, env = "ACCEL_AGENT_TOKEN", value_name = "TOKEN",
                 hide_env_values = true);
        /// Where sysfs is mounted.
        sysfs_root: PathBuf = value("/sys".into()),
            flag(long, global = true, value_name = "DIR");
        /// Drivers to run (comma-separated): nvidia, intel_fpga, xilinx, qat, nvme, nic,
        /// fake; they report only what they find.
        drivers: Vec<String> = optional("all"),
            flag(long, value_delimiter = ',', global = true, value_name = "LIST");
        /// Seconds between reports.
        interval_seconds: u64 = value(60),
            flag(long = "interval", value_name = "SECONDS");
        /// Nova's configuration file: devices its [pci] device_spec rules match are left
        /// to Nova.
        nova_config: PathBuf = optional(),
            flag(long, global = true, value_name = "PATH");
        /// Use NVML when libnvidia-ml.so.1 loads.
        nvml: bool = value(true);
        /// The NVML library to load: a name dlopen looks up, or a path (tests point it
        /// at accel-fake-nvml's library).
        nvml_library: PathBuf = value(crate::nvml::DEFAULT_LIBRARY.into());
        /// The agent's own state (the MIG and mdev partitions it created, with the boot
        /// they were created in: partitions.json).
        state_dir: PathBuf = value("/var/lib/accel-agent".into());
        /// The kernel's boot id: a new one means the node rebooted and MIG layouts and
        /// mdevs are gone.
        boot_id_file: PathBuf = value("/proc/sys/kernel/random/boot_id".into());
        /// Create a vGPU's mdev when it is handed out (Cyborg's behaviour; KubeVirt and
        /// DRA consumers need it); false when the consumer creates it (Nova with the
        /// 2026.2 cyborg-vgpu-support spec creates it from the attach handle).
        create_mdev_at_bind: bool = value(true);
        /// [nic.physnets]: physical network name to the interface names or PF addresses
        /// on it (physnet1 = ["eth2", "0000:3b:00.0"]); without it NICs are not offered.
        nic: NicConfig = optional();
        /// [[fake.devices]], with drivers = ["fake"]: devices without hardware.
        fake: FakeConfig = optional();
        /// [programming] fpgaconf = PATH, xbutil = PATH: the vendor FPGA tools (default
        /// fpgaconf on the PATH, /opt/xilinx/xrt/bin/xbutil).
        programming: ProgramTools = optional();
        /// [kubernetes]: kubelet device plugins; without it the agent serves none.
        kubernetes: accel_k8s::KubernetesFile = optional();
        /// The image service (Glance v2) root FPGA bitstreams are fetched from; without
        /// it programming requests fail with that reason.
        glance_url: String = optional(),
            flag(long, env = "ACCEL_AGENT_GLANCE_URL", value_name = "URL");
        /// Milliseconds between two looks for programming requests.
        program_interval_ms: u64 = value(1000);
        /// Where downloaded bitstreams are kept while they are programmed.
        program_dir: PathBuf = optional("$TMPDIR/accel-bitstreams");
        /// How devices are modelled in Placement: accel (seed 003: a provider per device
        /// under the compute node's, one per FPGA region, named after the node) or cyborg
        /// (upstream Cyborg's FPGA/PGPU/VGPU classes, names and traits).
        model: crate::model::Model = value(crate::model::Model::Accel),
            flag(long, value_parser = crate::model::Model::parse_flag, global = true,
                 value_name = "accel|cyborg");
        /// [keystone]: Keystone credentials (keystoneauth's option names) instead of token.
        keystone: accel_keystone::SessionConfig = optional();
        /// Address of the metrics port: /metrics, /livez, /readyz.
        metrics_listen: String = value(crate::observe::DEFAULT_METRICS_LISTEN.into()),
            flag(long, env = "ACCEL_AGENT_METRICS_LISTEN", value_name = "HOST:PORT");
        /// Log lines as text or json.
        log_format: String = value("text".into()),
            flag(long, value_parser = ["text", "json"], global = true, value_name = "text|json");
        /// [[cleaning]]: how devices are cleaned between tenants (docs/cleaning.md).
        cleaning: Vec<crate::cleaning::CleaningFile> = optional();
    }
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicConfig {
    /// Physical network name to the interface names or PF addresses on it.
    #[serde(default)]
    pub physnets: BTreeMap<String, Vec<String>>,
}

/// What the drivers need.
#[derive(Debug, Clone, Default)]
pub struct DriverSettings {
    pub nvml: bool,
    /// The NVML library (`nvml_library`; empty: [`crate::nvml::DEFAULT_LIBRARY`]).
    pub nvml_library: PathBuf,
    pub physnets: BTreeMap<String, Vec<String>>,
    pub fake: Vec<FakeDevice>,
    pub tools: ProgramTools,
}

/// The vendor tools FPGA drivers program with (`[programming]`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProgramTools {
    /// OPAE's `fpgaconf` for Intel PACs (default: `fpgaconf` on the PATH).
    pub fpgaconf: Option<PathBuf>,
    /// XRT's `xbutil` for Xilinx Alveo cards (default `/opt/xilinx/xrt/bin/xbutil`).
    pub xbutil: Option<PathBuf>,
}

impl ProgramTools {
    pub fn fpgaconf(&self) -> PathBuf {
        self.fpgaconf.clone().unwrap_or_else(|| "fpgaconf".into())
    }
    pub fn xbutil(&self) -> PathBuf {
        self.xbutil
            .clone()
            .unwrap_or_else(|| "/opt/xilinx/xrt/bin/xbutil".into())
    }
}

/// Who registers the node's root provider in Placement (`node_provider`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeProvider {
    /// nova-compute does; the agent reports under it and never creates it.
    #[default]
    Nova,
    /// No Nova on this node (a Kubernetes-only cluster): the agent asks the server to
    /// create the provider, named `node`, and owns it (`CUSTOM_OWNER_ACCEL`).
    Own,
}

impl accel_settings::ShowDefault for NodeProvider {
    fn show_default(&self) -> Option<String> {
        Some(
            match self {
                NodeProvider::Nova => "nova",
                NodeProvider::Own => "own",
            }
            .into(),
        )
    }
}

/// What the agent runs with: [`AgentConfig`] checked and shaped for its parts.
#[derive(Debug, Clone)]
pub struct Settings {
    pub server: String,
    /// May be empty for `accel agent check` (no server needed).
    pub node: String,
    /// Who creates the node's root provider.
    pub node_provider: NodeProvider,
    pub token: String,
    pub sysfs_root: PathBuf,
    pub drivers: Option<Vec<String>>,
    pub interval_seconds: u64,
    pub nova_config: Option<PathBuf>,
    pub driver: DriverSettings,
    /// The validated `[kubernetes]` table, when the file has one.
    pub kubernetes: Option<accel_k8s::KubernetesConfig>,
    /// Glance v2 root for bitstreams; without it programming requests fail with that
    /// reason.
    pub glance_url: Option<String>,
    pub program_interval: std::time::Duration,
    pub program_dir: PathBuf,
    /// How devices are modelled in Placement.
    pub model: crate::model::Model,
    /// A Keystone session for the agent's calls (instead of `token`).
    pub keystone: Option<accel_keystone::SessionConfig>,
    /// Where the metrics port listens.
    pub metrics_listen: std::net::SocketAddr,
    /// `text` or `json`.
    pub log_format: String,
    /// The validated `[[cleaning]]` rules.
    pub cleaning: Vec<crate::cleaning::Rule>,
    /// Partitioning on demand (MIG instances, mdevs): where its state is kept.
    pub partitions: crate::partitions::PartitionSettings,
}

pub const DEFAULT_SERVER: &str = "http://127.0.0.1:6666";

/// Why the agent cannot run with its configuration; each names its key or file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading the agent configuration {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("agent configuration {}: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    /// The `[kubernetes]` table, with the file it is in.
    #[error("{}{source}", path.as_ref().map(|p| format!("agent configuration {}: ", p.display())).unwrap_or_default())]
    Kubernetes {
        path: Option<PathBuf>,
        source: accel_k8s::config::ConfigError,
    },
    /// A value the agent cannot run with.
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
    #[error("no node name: pass --node NAME (or `node` in the config file) with the compute node's Placement provider name, which is Nova's hypervisor_hostname (`openstack hypervisor list`)")]
    NoNode,
    #[error("no server: pass --server URL or give a [keystone] table")]
    NoServer,
    /// The `[keystone]` session could not be made, or its catalog read.
    #[error("{0}")]
    Keystone(String),
}

impl ConfigError {
    pub fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            key: key.into(),
            problem: problem.into(),
        }
    }
}

impl Settings {
    /// The declared defaults for an agent of `node` reporting to `server` from
    /// `sysfs_root` (tests and benchmarks start from these).
    pub fn new(server: &str, node: &str, sysfs_root: &Path) -> Settings {
        let defaults = AgentConfig::resolve(AgentFlags::default(), AgentFile::default());
        let mut s = Settings::checked(defaults).expect("the declared defaults are valid");
        s.server = server.trim_end_matches('/').to_owned();
        s.node = node.to_owned();
        s.sysfs_root = sysfs_root.to_owned();
        s
    }

    /// How the agent authenticates: its `[keystone]` session, else `token`.
    pub fn auth(&self) -> Result<crate::client::Auth, ConfigError> {
        Ok(match &self.keystone {
            Some(k) => crate::client::Auth::Keystone(std::sync::Arc::new(
                accel_keystone::Session::new(k.clone()).map_err(ConfigError::Keystone)?,
            )),
            None => crate::client::Auth::Token(self.token.clone()),
        })
    }

    /// Reads the file at `config` (when given) under `flags`, and checks every value,
    /// naming its key.
    pub fn load(config: Option<&Path>, flags: AgentFlags) -> Result<Settings, ConfigError> {
        let file = match config {
            Some(p) => read_file(p)?,
            None => AgentFile::default(),
        };
        Settings::checked(AgentConfig::resolve(flags, file)).map_err(|e| match e {
            ConfigError::Kubernetes { source, .. } => ConfigError::Kubernetes {
                path: config.map(Path::to_owned),
                source,
            },
            e => e,
        })
    }

    /// `c` checked, key by key, and shaped for the agent's parts.
    fn checked(c: AgentConfig) -> Result<Settings, ConfigError> {
        if c.interval_seconds == 0 {
            return Err(ConfigError::invalid(
                "interval_seconds",
                "must be at least 1",
            ));
        }
        let kubernetes = match c.kubernetes {
            Some(k) => Some(
                k.validate()
                    .map_err(|source| ConfigError::Kubernetes { path: None, source })?,
            ),
            None => None,
        };
        let fake = c.fake.unwrap_or_default().devices;
        validate_fake(&fake)?;
        let cleaning = crate::cleaning::validate(c.cleaning.unwrap_or_default())
            .map_err(|e| ConfigError::invalid(e.key, e.message))?;
        let metrics_listen = socket_address(&c.metrics_listen)?;
        if c.log_format != "text" && c.log_format != "json" {
            let problem = format!("must be text or json, not {:?}", c.log_format);
            return Err(ConfigError::invalid("log_format", problem));
        }
        if let Some(k) = &c.keystone {
            k.validate("keystone").map_err(ConfigError::Keystone)?;
            if c.token.is_some() {
                return Err(ConfigError::invalid(
                    "token",
                    "token and a [keystone] table both say how the agent authenticates: keep one",
                ));
            }
        }
        let glance_url = c
            .glance_url
            .map(|u| u.trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty());
        if let Some(u) = &glance_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                let problem = format!("must be an http:// or https:// URL, not {u:?}");
                return Err(ConfigError::invalid("glance_url", problem));
            }
        }
        if let Some(d) = &c.drivers {
            if let Some(bad) = d.iter().find(|n| !DRIVER_NAMES.contains(&n.as_str())) {
                let known = DRIVER_NAMES.join(", ");
                let problem = format!("unknown driver {bad:?}; known: {known}");
                return Err(ConfigError::invalid("drivers", problem));
            }
        }
        Ok(Settings {
            // Empty: the catalog's, found by `find_server` before the agent starts.
            server: match (&c.server, &c.keystone) {
                (Some(u), _) => u.trim_end_matches('/').to_owned(),
                (None, Some(_)) => String::new(),
                (None, None) => DEFAULT_SERVER.to_owned(),
            },
            node: c.node.unwrap_or_default(),
            node_provider: c.node_provider,
            token: c
                .token
                .map_or_else(|| "admin".into(), |t| t.expose().to_owned()),
            sysfs_root: c.sysfs_root,
            drivers: c.drivers,
            interval_seconds: c.interval_seconds,
            nova_config: c.nova_config,
            driver: DriverSettings {
                nvml: c.nvml,
                nvml_library: c.nvml_library.clone(),
                physnets: c.nic.unwrap_or_default().physnets,
                fake,
                tools: c.programming.unwrap_or_default(),
            },
            kubernetes,
            glance_url,
            program_interval: std::time::Duration::from_millis(c.program_interval_ms.max(10)),
            program_dir: c
                .program_dir
                .unwrap_or_else(|| std::env::temp_dir().join("accel-bitstreams")),
            model: c.model,
            keystone: c.keystone,
            metrics_listen,
            log_format: c.log_format,
            cleaning,
            partitions: crate::partitions::PartitionSettings {
                nvml_library: c.nvml_library,
                state_dir: c.state_dir,
                boot_id_file: c.boot_id_file,
                create_mdev_at_bind: c.create_mdev_at_bind,
            },
        })
    }

    /// Fills an empty `server` with the accelerator endpoint of the `[keystone]`
    /// session's catalog (service type `accelerator`, its `interface` and
    /// `region_name`), as the OpenStack clients find a service.
    pub async fn find_server(&mut self) -> Result<(), ConfigError> {
        if !self.server.is_empty() {
            return Ok(());
        }
        let Some(k) = &self.keystone else {
            return Err(ConfigError::NoServer);
        };
        let session = accel_keystone::Session::new(k.clone()).map_err(ConfigError::Keystone)?;
        let url = session.endpoint("accelerator").await.map_err(|e| {
            ConfigError::Keystone(format!(
                "finding the accelerator API in Keystone's catalog: {e}"
            ))
        })?;
        // The catalog names the versioned root (`.../v2`, devstack's
        // `.../accelerator/v2`); the agent's paths start at `/v2`.
        let url = url.trim_end_matches('/');
        let url = url.strip_suffix("/v2").unwrap_or(url).to_owned();
        tracing::info!(server = %url, "accelerator API found in Keystone's catalog");
        self.server = url;
        Ok(())
    }

    pub fn require_node(&self) -> Result<&str, ConfigError> {
        if self.node.is_empty() {
            Err(ConfigError::NoNode)
        } else {
            Ok(&self.node)
        }
    }
}

/// `metrics_listen`'s address.
fn socket_address(listen: &str) -> Result<std::net::SocketAddr, ConfigError> {
    std::net::ToSocketAddrs::to_socket_addrs(listen)
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            let problem = format!("must be HOST:PORT (e.g. 127.0.0.1:9779), not {listen:?}");
            ConfigError::invalid("metrics_listen", problem)
        })
}

fn read_file(p: &Path) -> Result<AgentFile, ConfigError> {
    let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
        path: p.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: p.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/agent.md's table of the agent's keys comes from the declaration.
    #[test]
    fn readme_table_follows_the_declaration() {
        let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/agent.md");
        let table = accel_settings::markdown_table(&AgentConfig::keys());
        accel_settings::check_doc_table(&readme, "agent", &table).unwrap();
    }

    #[test]
    fn partition_keys_reach_the_settings() {
        let defaults = Settings::new("http://x", "n", Path::new("/sys"));
        assert_eq!(defaults.driver.nvml_library, Path::new("libnvidia-ml.so.1"));
        assert_eq!(
            defaults.partitions.state_dir,
            Path::new("/var/lib/accel-agent")
        );
        assert!(defaults.partitions.create_mdev_at_bind);
        let file: AgentFile = toml::from_str(
            "nvml_library = \"/opt/nv/libnvidia-ml.so.1\"\nstate_dir = \"/srv/agent\"\n\
             boot_id_file = \"/run/boot_id\"\ncreate_mdev_at_bind = false\n",
        )
        .unwrap();
        let s = Settings::checked(AgentConfig::resolve(AgentFlags::default(), file)).unwrap();
        assert_eq!(
            s.driver.nvml_library,
            Path::new("/opt/nv/libnvidia-ml.so.1")
        );
        assert_eq!(
            s.partitions,
            crate::partitions::PartitionSettings {
                nvml_library: "/opt/nv/libnvidia-ml.so.1".into(),
                state_dir: "/srv/agent".into(),
                boot_id_file: "/run/boot_id".into(),
                create_mdev_at_bind: false,
            }
        );
    }

    #[test]
    fn node_provider_is_nova_unless_own() {
        let read = |t: &str| toml::from_str::<AgentFile>(t).map(|f| f.node_provider);
        assert_eq!(read("").unwrap(), None);
        assert_eq!(
            read("node_provider = \"own\"").unwrap(),
            Some(NodeProvider::Own)
        );
        assert_eq!(
            read("node_provider = \"nova\"").unwrap(),
            Some(NodeProvider::Nova)
        );
        assert!(read("node_provider = \"kubernetes\"").is_err());
        assert_eq!(NodeProvider::default(), NodeProvider::Nova);
    }
}
