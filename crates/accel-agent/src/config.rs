//! The agent's configuration: flags over the TOML file (`--config`) over defaults.
//! Unknown keys are an error; a missing node name or server fails at start-up with
//! what to set.
//!
//! ```toml
//! server = "http://controller:6666"     # the accelerator API
//! node = "compute-1.example.org"        # Nova's hypervisor_hostname
//! token = "admin"
//! sysfs_root = "/sys"
//! drivers = ["nvidia", "intel_fpga"]   # default: every driver
//! interval_seconds = 60
//! nova_config = "/etc/nova/nova.conf"
//! nvml = true
//! glance_url = "http://glance:9292"    # bitstreams for FPGA programming
//! program_interval_ms = 1000           # how often programming requests are fetched
//! program_dir = "/var/lib/accel/bitstreams"
//! model = "accel"                      # or "cyborg": upstream Cyborg's modelling
//!
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

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file's shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The accelerator API root, e.g. `http://controller:6666`.
    pub server: Option<String>,
    /// The compute node's provider name (Nova's `hypervisor_hostname`).
    pub node: Option<String>,
    /// Token sent as `X-Auth-Token` (noauth: `admin`; keystone: a service token).
    pub token: Option<String>,
    /// Where sysfs is mounted (default `/sys`).
    pub sysfs_root: Option<PathBuf>,
    /// Drivers to run (default: all; they report only what they find).
    pub drivers: Option<Vec<String>>,
    /// Seconds between reports (default 60).
    pub interval_seconds: Option<u64>,
    /// Nova's configuration file, whose `[pci]` rules accel must not contradict.
    pub nova_config: Option<PathBuf>,
    /// Use NVML when `libnvidia-ml.so.1` loads (default true).
    pub nvml: Option<bool>,
    #[serde(default)]
    pub nic: NicConfig,
    #[serde(default)]
    pub fake: FakeConfig,
    /// Vendor programming tools.
    #[serde(default)]
    pub programming: ProgramTools,
    /// Kubelet device plugins; absent: the agent serves none.
    pub kubernetes: Option<accel_k8s::KubernetesFile>,
    /// The image service (Glance v2) bitstreams are fetched from.
    pub glance_url: Option<String>,
    /// Milliseconds between two looks for programming requests (default 1000).
    pub program_interval_ms: Option<u64>,
    /// Where downloaded bitstreams are kept while they are programmed.
    pub program_dir: Option<PathBuf>,
    /// `accel` (seed 003, default) or `cyborg` (upstream Cyborg's classes, names and
    /// traits, for clouds migrating from it).
    pub model: Option<crate::model::Model>,
    /// Keystone credentials (keystoneauth's option names) instead of `token`.
    pub keystone: Option<accel_keystone::SessionConfig>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicConfig {
    /// Physical network name to the interface names or PF addresses on it.
    #[serde(default)]
    pub physnets: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeConfig {
    #[serde(default)]
    pub devices: Vec<FakeDevice>,
}

fn one() -> i64 {
    1
}
fn one_u32() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn fake_vendor() -> String {
    "abcd".into()
}
fn fake_model() -> String {
    "fake".into()
}

/// One fake device.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FakeDevice {
    /// `GPU`, `FPGA`, `QAT`, `NIC`, `SSD` or `AICHIP`.
    #[serde(rename = "type")]
    pub device_type: String,
    /// Hex vendor id (default `abcd`, trait name `FAKE`).
    #[serde(default = "fake_vendor")]
    pub vendor: String,
    /// Hex product id.
    #[serde(default)]
    pub product: String,
    #[serde(default = "fake_model")]
    pub model: String,
    pub family: Option<String>,
    /// Accelerators on the device (per region for an FPGA); default 1.
    #[serde(default = "one")]
    pub count: i64,
    /// Class suffix instead of the type (`VGPU`).
    pub class: Option<String>,
    pub numa_node: Option<u32>,
    /// FPGA regions (default 1).
    #[serde(default = "one_u32")]
    pub regions: u32,
    pub interface_id: Option<String>,
    pub function_id: Option<String>,
    pub memory_mib: Option<i64>,
    pub memory_kind: Option<String>,
    #[serde(default = "yes")]
    pub healthy: bool,
}

/// What the drivers need.
#[derive(Debug, Clone, Default)]
pub struct DriverSettings {
    pub nvml: bool,
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

/// Command-line values; `None` leaves the file's (or the default).
#[derive(Debug, Default, Clone)]
pub struct Flags {
    pub config: Option<PathBuf>,
    pub server: Option<String>,
    pub node: Option<String>,
    pub token: Option<String>,
    pub sysfs_root: Option<PathBuf>,
    pub drivers: Option<Vec<String>>,
    pub interval_seconds: Option<u64>,
    pub nova_config: Option<PathBuf>,
    pub glance_url: Option<String>,
    pub model: Option<crate::model::Model>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub server: String,
    /// May be empty for `accel agent check` (no server needed).
    pub node: String,
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
}

pub const DEFAULT_SERVER: &str = "http://127.0.0.1:6666";

impl Settings {
    /// The defaults for an agent of `node` reporting to `server` from `sysfs_root`
    /// (tests and benchmarks start from these).
    pub fn new(server: &str, node: &str, sysfs_root: &Path) -> Settings {
        Settings {
            server: server.trim_end_matches('/').to_owned(),
            node: node.to_owned(),
            token: "admin".into(),
            sysfs_root: sysfs_root.to_owned(),
            drivers: None,
            interval_seconds: 60,
            nova_config: None,
            driver: DriverSettings::default(),
            kubernetes: None,
            glance_url: None,
            program_interval: std::time::Duration::from_millis(1000),
            program_dir: std::env::temp_dir().join("accel-bitstreams"),
            model: crate::model::Model::Accel,
            keystone: None,
        }
    }

    /// How the agent authenticates: its `[keystone]` session, else `token`.
    pub fn auth(&self) -> Result<crate::client::Auth, String> {
        Ok(match &self.keystone {
            Some(k) => crate::client::Auth::Keystone(std::sync::Arc::new(
                accel_keystone::Session::new(k.clone())?,
            )),
            None => crate::client::Auth::Token(self.token.clone()),
        })
    }

    /// Merges `flags` over the file they name.
    pub fn load(flags: Flags) -> Result<Settings, String> {
        let file = match &flags.config {
            Some(p) => read_file(p)?,
            None => FileConfig::default(),
        };
        let interval_seconds = flags
            .interval_seconds
            .or(file.interval_seconds)
            .unwrap_or(60);
        if interval_seconds == 0 {
            return Err("interval_seconds must be at least 1".into());
        }
        // A bad value stops the agent here, naming its key (`kubernetes.<path>`).
        let kubernetes = match file.kubernetes {
            Some(k) => Some(k.validate().map_err(|e| match &flags.config {
                Some(p) => format!("agent configuration {}: {e}", p.display()),
                None => e.to_string(),
            })?),
            None => None,
        };
        if let Some(k) = &file.keystone {
            k.validate("keystone")?;
            if flags.token.is_some() || file.token.is_some() {
                return Err(
                    "token and a [keystone] table both say how the agent authenticates: keep one"
                        .into(),
                );
            }
        }
        let settings = Settings {
            server: flags
                .server
                .or(file.server)
                .unwrap_or_else(|| DEFAULT_SERVER.into())
                .trim_end_matches('/')
                .to_owned(),
            node: flags.node.or(file.node).unwrap_or_default(),
            token: flags.token.or(file.token).unwrap_or_else(|| "admin".into()),
            sysfs_root: flags
                .sysfs_root
                .or(file.sysfs_root)
                .unwrap_or_else(|| "/sys".into()),
            drivers: flags.drivers.or(file.drivers),
            interval_seconds,
            nova_config: flags.nova_config.or(file.nova_config),
            driver: DriverSettings {
                nvml: file.nvml.unwrap_or(true),
                physnets: file.nic.physnets,
                fake: file.fake.devices,
                tools: file.programming,
            },
            kubernetes,
            glance_url: flags
                .glance_url
                .or(file.glance_url)
                .map(|u| u.trim_end_matches('/').to_owned())
                .filter(|u| !u.is_empty()),
            program_interval: std::time::Duration::from_millis(
                file.program_interval_ms.unwrap_or(1000).max(10),
            ),
            program_dir: file
                .program_dir
                .unwrap_or_else(|| std::env::temp_dir().join("accel-bitstreams")),
            model: flags.model.or(file.model).unwrap_or_default(),
            keystone: file.keystone,
        };
        if let Some(u) = &settings.glance_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(format!(
                    "glance_url must be an http:// or https:// URL, not {u:?}"
                ));
            }
        }
        if let Some(d) = &settings.drivers {
            if let Some(bad) = d
                .iter()
                .find(|n| !crate::drivers::NAMES.contains(&n.as_str()))
            {
                return Err(format!(
                    "unknown driver {bad:?} in drivers; known: {}",
                    crate::drivers::NAMES.join(", ")
                ));
            }
        }
        Ok(settings)
    }

    /// The node name, required for reporting.
    pub fn require_node(&self) -> Result<&str, String> {
        if self.node.is_empty() {
            Err("no node name: pass --node NAME (or `node` in the config file) with the compute node's Placement provider name, which is Nova's hypervisor_hostname (`openstack hypervisor list`)".into())
        } else {
            Ok(&self.node)
        }
    }
}

fn read_file(p: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| format!("reading the agent configuration {}: {e}", p.display()))?;
    toml::from_str(&text).map_err(|e| format!("agent configuration {}: {e}", p.display()))
}
