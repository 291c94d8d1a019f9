//! The `[kubernetes]` table of the agent's TOML file: the resource domain, the reclaim
//! grace and the configurations (seed 001) that turn devices into kubelet resources.
//!
//! ```toml
//! [kubernetes]
//! resource_domain = "accel.dev"      # resources are <domain>/<configuration>[-<hash>]
//! reclaim_grace_seconds = 30         # a slot no pod lists is freed after this long
//! cdi_dir = "/var/run/cdi"           # where the CDI spec files of the devices go
//!
//! [[kubernetes.configurations]]
//! name = "gpu"                       # pooled resource accel.dev/gpu
//! capacity = 2                       # containers that may share one device
//! [kubernetes.configurations.selector]
//! device_type = "GPU"                # every key optional; all given ones must match
//! vendor = "10de"                    # PCI vendor id, hex
//! product_ids = ["20b0", "20b2"]     # PCI device ids, hex; any of them
//! model = "A100-SXM4-40GB"
//! traits = ["CUSTOM_NUMA_0"]         # all of them (the device's Placement traits)
//! ```
//!
//! [`KubernetesFile`] is the file's shape (unknown keys rejected); [`KubernetesFile::validate`]
//! turns it into [`KubernetesConfig`], where every value is known good, naming the
//! offending key when one is not.

use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// The default extended-resource domain.
pub const DEFAULT_DOMAIN: &str = "accel.dev";
/// The default reclaim grace, in seconds.
pub const DEFAULT_RECLAIM_GRACE_SECONDS: u64 = 30;
/// The default CDI spec directory (the runtime also reads `/etc/cdi`, which is the
/// administrator's).
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";
/// Longest configuration name: `<name>-<8 hex>-<slot>` must stay a 63-character
/// device id and `slot-<that>` a 63-character annotation name.
pub const MAX_CONFIG_NAME: usize = 40;

/// `[kubernetes]` as written in the file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesFile {
    /// Domain of the extended resources (default `accel.dev`; `kubernetes.io` is kubelet's).
    pub resource_domain: Option<String>,
    /// Seconds a claimed slot may go unlisted by the pod-resources API before it is
    /// freed (default 30).
    pub reclaim_grace_seconds: Option<u64>,
    /// Directory the CDI spec files are written to (default `/var/run/cdi`; absolute).
    pub cdi_dir: Option<PathBuf>,
    /// The configurations; none means no device is offered to kubelet.
    #[serde(default)]
    pub configurations: Vec<ConfigurationFile>,
    /// `device-plugin` (default) or `dra` (the DRA kubelet plugin instead).
    pub mode: Option<Mode>,
    /// How a GPU in MIG mode is published in DRA (issue 45): `counters` (its counter
    /// set, and every MIG profile at every placement; Kubernetes >= 1.36), `static`
    /// (the MIG devices that exist; older clusters), or `auto` (default: counters when
    /// a dry-run create shows the API server keeps them).
    pub partition_layout: Option<Layout>,
}

/// How the devices are handed to kubelet (`[kubernetes] mode`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Mode {
    /// Kubelet device plugins (API v1beta1), seed 001's resources.
    #[default]
    #[serde(rename = "device-plugin")]
    DevicePlugin,
    /// A Dynamic Resource Allocation driver (`crate::dra`).
    #[serde(rename = "dra")]
    Dra,
}

/// One `[[kubernetes.configurations]]` entry as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigurationFile {
    /// DNS-1123 label, at most 40 characters: the pooled resource's name.
    pub name: String,
    /// Containers that may use one device at once (default 1).
    pub capacity: Option<u32>,
    /// Which devices belong to the configuration (default: every device).
    #[serde(default)]
    pub selector: SelectorFile,
}

/// `[kubernetes.configurations.selector]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectorFile {
    /// Device type (`GPU`, `FPGA`, `QAT`, ...), compared without case.
    pub device_type: Option<String>,
    /// PCI vendor id in hex (`10de` or `0x10de`).
    pub vendor: Option<String>,
    /// PCI device ids in hex; the device must have one of them.
    #[serde(default)]
    pub product_ids: Vec<String>,
    /// Model name, compared exactly.
    pub model: Option<String>,
    /// Traits the device must all have.
    #[serde(default)]
    pub traits: Vec<String>,
}

/// The validated `[kubernetes]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesConfig {
    pub resource_domain: String,
    pub reclaim_grace: Duration,
    pub cdi_dir: PathBuf,
    pub configurations: Vec<Configuration>,
    pub mode: Mode,
    pub partition_layout: Layout,
}

/// One validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configuration {
    pub name: String,
    pub capacity: u32,
    pub selector: Selector,
}

/// A validated selector: every `Some`/non-empty field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// Upper case.
    pub device_type: Option<String>,
    pub vendor: Option<u16>,
    pub product_ids: Vec<u16>,
    pub model: Option<String>,
    pub traits: Vec<String>,
}

/// A bad value, with the key that holds it and what to do.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

fn bad(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
    }
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            resource_domain: DEFAULT_DOMAIN.into(),
            reclaim_grace: Duration::from_secs(DEFAULT_RECLAIM_GRACE_SECONDS),
            cdi_dir: DEFAULT_CDI_DIR.into(),
            configurations: Vec::new(),
            mode: Mode::DevicePlugin,
            partition_layout: Layout::Auto,
        }
    }
}

impl KubernetesConfig {
    /// Parses a whole TOML document holding a `[kubernetes]` table (other tables are
    /// ignored: they belong to the agent); for tests and `accel agent check`.
    pub fn from_toml(text: &str) -> Result<KubernetesConfig, ConfigError> {
        #[derive(Deserialize)]
        struct Doc {
            #[serde(default)]
            kubernetes: KubernetesFile,
        }
        // The full text of a parse error quotes the offending line, so it names the key.
        let doc: Doc = toml::from_str(text).map_err(|e| bad("kubernetes", e.to_string()))?;
        doc.kubernetes.validate()
    }
}

impl KubernetesFile {
    /// Checks every value; the error names the key as `kubernetes.<path>`.
    pub fn validate(self) -> Result<KubernetesConfig, ConfigError> {
        let resource_domain = self
            .resource_domain
            .unwrap_or_else(|| DEFAULT_DOMAIN.into());
        if !is_dns_subdomain(&resource_domain) {
            return Err(bad(
                "kubernetes.resource_domain",
                format!("{resource_domain:?} is not a DNS subdomain (e.g. \"accel.dev\")"),
            ));
        }
        if resource_domain == "kubernetes.io" || resource_domain.ends_with(".kubernetes.io") {
            return Err(bad(
                "kubernetes.resource_domain",
                "kubernetes.io is reserved by kubelet; use your own domain",
            ));
        }
        let grace = self
            .reclaim_grace_seconds
            .unwrap_or(DEFAULT_RECLAIM_GRACE_SECONDS);
        let cdi_dir = self.cdi_dir.unwrap_or_else(|| DEFAULT_CDI_DIR.into());
        if !cdi_dir.is_absolute() {
            return Err(bad(
                "kubernetes.cdi_dir",
                format!("{} must be an absolute path", cdi_dir.display()),
            ));
        }
        let mut configurations = Vec::with_capacity(self.configurations.len());
        for (i, c) in self.configurations.into_iter().enumerate() {
            let key = format!("kubernetes.configurations[{i}]");
            let parsed = c.validate(&key)?;
            if configurations
                .iter()
                .any(|o: &Configuration| o.name == parsed.name)
            {
                return Err(bad(
                    format!("{key}.name"),
                    format!("{:?} is used by an earlier configuration", parsed.name),
                ));
            }
            configurations.push(parsed);
        }
        Ok(KubernetesConfig {
            resource_domain,
            reclaim_grace: Duration::from_secs(grace),
            cdi_dir,
            configurations,
            mode: self.mode.unwrap_or_default(),
            partition_layout: self.partition_layout.unwrap_or_default(),
        })
    }
}

impl ConfigurationFile {
    fn validate(self, key: &str) -> Result<Configuration, ConfigError> {
        if !is_dns_label(&self.name) || self.name.len() > MAX_CONFIG_NAME {
            return Err(bad(
                format!("{key}.name"),
                format!(
                    "{:?} must be lower-case letters, digits and '-', start and end with a \
                     letter or digit, at most {MAX_CONFIG_NAME} characters",
                    self.name
                ),
            ));
        }
        let capacity = self.capacity.unwrap_or(1);
        if !(1..=999).contains(&capacity) {
            return Err(bad(format!("{key}.capacity"), "must be between 1 and 999"));
        }
        let s = self.selector;
        let hex = |k: &str, v: &str| {
            u16::from_str_radix(v.trim_start_matches("0x"), 16).map_err(|_| {
                bad(
                    format!("{key}.selector.{k}"),
                    format!("{v:?} is not a 16-bit hex id"),
                )
            })
        };
        let vendor = s.vendor.as_deref().map(|v| hex("vendor", v)).transpose()?;
        let product_ids = s
            .product_ids
            .iter()
            .map(|p| hex("product_ids", p))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Configuration {
            name: self.name,
            capacity,
            selector: Selector {
                device_type: s.device_type.map(|t| t.to_ascii_uppercase()),
                vendor,
                product_ids,
                model: s.model,
                traits: s.traits,
            },
        })
    }
}

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain: dot-separated labels, at most 253.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_parses_with_defaults() {
        let c = KubernetesConfig::from_toml(
            r#"
            server = "ignored: the agent's key"
            [kubernetes]
            [[kubernetes.configurations]]
            name = "gpu"
            capacity = 2
            [kubernetes.configurations.selector]
            device_type = "gpu"
            vendor = "0x10de"
            product_ids = ["20B0"]
            "#,
        )
        .unwrap();
        assert_eq!(c.resource_domain, "accel.dev");
        assert_eq!(c.reclaim_grace, Duration::from_secs(30));
        assert_eq!(
            c.configurations,
            vec![Configuration {
                name: "gpu".into(),
                capacity: 2,
                selector: Selector {
                    device_type: Some("GPU".into()),
                    vendor: Some(0x10de),
                    product_ids: vec![0x20b0],
                    model: None,
                    traits: vec![],
                },
            }]
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = |t: &str| KubernetesConfig::from_toml(t).unwrap_err().key;
        assert_eq!(
            err("[kubernetes]\n[[kubernetes.configurations]]\nname = \"GPU\""),
            "kubernetes.configurations[0].name"
        );
        assert_eq!(
            err("[kubernetes]\n[[kubernetes.configurations]]\nname = \"a\"\ncapacity = 0"),
            "kubernetes.configurations[0].capacity"
        );
        assert_eq!(
            err("[kubernetes]\n[[kubernetes.configurations]]\nname = \"a\"\n[[kubernetes.configurations]]\nname = \"a\""),
            "kubernetes.configurations[1].name"
        );
        assert_eq!(
            err("[kubernetes]\n[[kubernetes.configurations]]\nname = \"a\"\n[kubernetes.configurations.selector]\nvendor = \"nvidia\""),
            "kubernetes.configurations[0].selector.vendor"
        );
        assert_eq!(
            err("[kubernetes]\nresource_domain = \"k8s..io\""),
            "kubernetes.resource_domain"
        );
        assert_eq!(
            err("[kubernetes]\nresource_domain = \"kubernetes.io\""),
            "kubernetes.resource_domain"
        );
        assert_eq!(
            err("[kubernetes]\ncdi_dir = \"run/cdi\""),
            "kubernetes.cdi_dir"
        );
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e =
            KubernetesConfig::from_toml("[kubernetes]\nresource_domian = \"x.dev\"").unwrap_err();
        assert!(e.message.contains("resource_domian"), "{e}");
    }
}

/// How a partitionable GPU is published (`[kubernetes] partition_layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Counters when the API server keeps them (asked by a dry-run create), static
    /// where it drops them.
    #[default]
    Auto,
    /// Counters and every profile at every placement (Kubernetes >= 1.36, or 1.35
    /// with `DRAPartitionableDevices` on).
    Counters,
    /// The MIG devices that exist, without counters.
    Static,
}
