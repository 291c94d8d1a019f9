//! Devices cleaned between tenants, on the agent's side: the `[[cleaning]]` rules, the
//! trait a matching device carries, and how one cleaning runs.
//!
//! ```text
//! [[cleaning]] selector ─▶ matching devices report CUSTOM_ACCEL_CLEANED_ON_RELEASE
//! server: last consumer let go ─▶ device reserved, cleaning recorded
//!    │ GET /v2/agent/hosts/{node}/cleanings?agent=<this process>
//!    ▼
//! agent: rule of the device ─▶ method under timeout_seconds
//!          pci-reset     write "1" to <sysfs>/bus/pci/devices/<address>/reset
//!          fpga-default  program the region with `image` (the programming path)
//!          command       argv with {address} and {device} filled in
//!        ─▶ verify (argv, same placeholders, within what is left of the timeout)
//!    │ PUT .../cleanings/{rp_uuid} {"attempt", "error"?, "duration_ms"}
//!    ▼
//! server: clean ─▶ offered again | clean_failed ─▶ stays reserved, reason shown
//! ```
//!
//! The selector takes exactly the keys of `[kubernetes.configurations.selector]` and
//! is validated by the same code, so one set of words picks devices everywhere. A
//! command is run without a shell (no quoting surprises) and killed when the timeout
//! ends. The agent process's id is sent with each fetch: the server hands a new
//! process the cleanings a dead one held, so an agent restart resumes them.
//!
//! A rule that validates can still never work on a given host (a program that is not
//! installed, `{device}` on a drive passed through to VMs): [`resolve`] checks each
//! rule against each device it matches, for `accel agent check` and at start-up.

mod error;
mod running;

pub use error::{CleanError, Part};
pub use running::Running;

use accel_api::agent::{CleaningAnswer, CleaningRequest};
use accel_k8s::config::{ConfigError, ConfigurationFile, Selector, SelectorFile};
use accel_k8s::KubernetesFile;
use serde::Deserialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// The trait of a device that is cleaned on release (the server's rule reads it; the
/// device plugins hold such a device from its release until the server says clean).
pub const TRAIT: &str = accel_k8s::slots::CLEANED_ON_RELEASE;

/// Timeout when a rule gives none.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;

/// One `[[cleaning]]` table as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CleaningFile {
    /// Which devices the rule cleans (default: every device).
    #[serde(default)]
    pub selector: SelectorFile,
    /// `pci-reset`, `fpga-default` or `command`.
    pub method: String,
    /// For `command`: the program and its arguments (`{address}`, `{device}`).
    #[serde(default)]
    pub command: Vec<String>,
    /// A check run after the method; a non-zero exit fails the cleaning.
    #[serde(default)]
    pub verify: Vec<String>,
    /// For `fpga-default`: the Glance image id of the default bitstream.
    pub image: Option<String>,
    /// Seconds the method and the verification may take together (default 300).
    pub timeout_seconds: Option<u64>,
}

/// How a device is wiped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    PciReset,
    /// The Glance image the region is programmed with.
    FpgaDefault(String),
    Command(Vec<String>),
}

impl Method {
    /// The `method` key's value.
    pub fn name(&self) -> &'static str {
        match self {
            Method::PciReset => "pci-reset",
            Method::FpgaDefault(_) => "fpga-default",
            Method::Command(_) => "command",
        }
    }
}

/// A validated rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub selector: Selector,
    pub method: Method,
    pub verify: Vec<String>,
    pub timeout: Duration,
}

/// Validates the `[[cleaning]]` tables; an error names the key (`cleaning[i].<key>`),
/// in the form the `[kubernetes]` table's errors have.
pub fn validate(files: Vec<CleaningFile>) -> Result<Vec<Rule>, ConfigError> {
    let mut out = Vec::with_capacity(files.len());
    for (i, f) in files.into_iter().enumerate() {
        let key = format!("cleaning[{i}]");
        let bad = |field: &str, message: String| ConfigError {
            key: format!("{key}.{field}"),
            message,
        };
        // The Kubernetes selector's own validation, wrapped in a throwaway
        // configuration; its key is renamed to this table's.
        let k = KubernetesFile {
            configurations: vec![ConfigurationFile {
                name: "cleaning".into(),
                capacity: None,
                selector: f.selector,
            }],
            ..KubernetesFile::default()
        };
        let selector = k
            .validate()
            .map_err(|e| ConfigError {
                key: e.key.replace("kubernetes.configurations[0]", &key),
                message: e.message,
            })?
            .configurations
            .remove(0)
            .selector;
        let method = match f.method.as_str() {
            "pci-reset" => Method::PciReset,
            "fpga-default" => Method::FpgaDefault(f.image.clone().filter(|s| !s.is_empty()).ok_or_else(
                || bad("image", "fpga-default needs the Glance image id of the default bitstream".into()),
            )?),
            "command" if f.command.is_empty() => {
                return Err(bad("command", "the method \"command\" needs the program and its arguments, e.g. [\"nvme\", \"format\", \"{device}\", \"--ses=1\"]".into()))
            }
            "command" => Method::Command(f.command.clone()),
            other => {
                return Err(bad("method", format!(
                    "{other:?} is not one of \"pci-reset\", \"fpga-default\", \"command\""
                )))
            }
        };
        if !matches!(method, Method::Command(_)) && !f.command.is_empty() {
            return Err(bad(
                "command",
                "only the method \"command\" runs a command".into(),
            ));
        }
        if f.image.is_some() && !matches!(method, Method::FpgaDefault(_)) {
            return Err(bad(
                "image",
                "only the method \"fpga-default\" takes an image".into(),
            ));
        }
        let secs = f.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
        if !(1..=86_400).contains(&secs) {
            return Err(bad("timeout_seconds", "must be between 1 and 86400".into()));
        }
        out.push(Rule {
            selector,
            method,
            verify: f.verify,
            timeout: Duration::from_secs(secs),
        });
    }
    Ok(out)
}

/// The first rule whose selector matches `device`.
pub fn rule_for<'a>(rules: &'a [Rule], device: &accel_k8s::Device) -> Option<&'a Rule> {
    rules.iter().find(|r| r.selector.matches(device))
}

/// The device node `{device}` stands for: the first node the kernel created for the
/// function at `address` that is not VFIO's (`/dev/nvme0`, `/dev/dri/renderD128`).
/// A function bound to `vfio-pci` has none: its host driver is not attached.
pub fn device_node(sysfs_root: &Path, address: &str) -> Option<String> {
    crate::kubernetes::device_nodes(sysfs_root, address)
        .into_iter()
        .map(|n| n.host_path)
        .find(|p| !p.starts_with("/dev/vfio"))
}

/// `args` with `{address}` and `{device}` (the device's first device node) filled in.
pub fn fill(
    args: &[String],
    address: &str,
    device: Option<&str>,
) -> Result<Vec<String>, CleanError> {
    args.iter()
        .map(|a| {
            let mut s = a.replace("{address}", address);
            if s.contains("{device}") {
                let d = device.ok_or_else(|| CleanError::NoDeviceNode {
                    arg: a.clone(),
                    address: address.to_owned(),
                })?;
                s = s.replace("{device}", d);
            }
            Ok(s)
        })
        .collect()
}

/// Runs `argv` until it exits or `deadline`; killed at the deadline. `Err` names what
/// failed: the start, a non-zero exit (with the end of its stderr), the timeout.
pub async fn run_command(argv: &[String], deadline: Instant, part: Part) -> Result<(), CleanError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(CleanError::Empty { part });
    };
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| CleanError::Start {
            part,
            program: program.clone(),
            cause: e.to_string(),
        })?;
    let left = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, child.wait_with_output()).await {
        Err(_) => Err(CleanError::TimedOut { part }),
        Ok(Err(e)) => Err(CleanError::Wait {
            part,
            program: program.clone(),
            cause: e.to_string(),
        }),
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: String = err
                .trim()
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            Err(CleanError::Exited {
                part,
                program: program.clone(),
                status: out.status.to_string(),
                stderr_tail: tail,
            })
        }
    }
}

/// PCI function reset through sysfs (`echo 1 > .../reset`).
pub fn pci_reset(sysfs_root: &Path, address: &str) -> Result<(), CleanError> {
    let path = sysfs_root
        .join("bus/pci/devices")
        .join(address)
        .join("reset");
    std::fs::write(&path, "1").map_err(|e| CleanError::Reset {
        cause: e.to_string(),
        path,
    })
}

/// Runs a `pci-reset` or `command` rule, then its verification, by `deadline`.
pub async fn run_rule(
    rule: &Rule,
    sysfs_root: &Path,
    address: &str,
    device: Option<&str>,
    deadline: Instant,
) -> Result<(), CleanError> {
    match &rule.method {
        Method::PciReset => {
            let (root, a) = (sysfs_root.to_owned(), address.to_owned());
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(
                left,
                tokio::task::spawn_blocking(move || pci_reset(&root, &a)),
            )
            .await
            {
                Err(_) => return Err(CleanError::ResetTimedOut),
                Ok(Err(e)) => return Err(CleanError::ResetTask(e.to_string())),
                Ok(Ok(r)) => r?,
            }
        }
        Method::Command(argv) => {
            run_command(&fill(argv, address, device)?, deadline, "command").await?
        }
        Method::FpgaDefault(_) => return Err(CleanError::NotHere),
    }
    verify(rule, address, device, deadline).await
}

/// The rule's verification, if it has one, by `deadline`.
pub async fn verify(
    rule: &Rule,
    address: &str,
    device: Option<&str>,
    deadline: Instant,
) -> Result<(), CleanError> {
    if rule.verify.is_empty() {
        return Ok(());
    }
    run_command(&fill(&rule.verify, address, device)?, deadline, "verify").await
}

/// Sends the answer; a failed send is retried a few times (a server restarting), then
/// left: the server still holds the cleaning for this process, which runs it again
/// when the next fetch hands it back.
pub async fn answer(
    client: &crate::client::Client,
    metrics: Option<&crate::metrics::Metrics>,
    node: &str,
    job: &CleaningRequest,
    result: &Result<(), CleanError>,
    took: Duration,
) {
    if let Some(m) = metrics {
        m.cleaning(result.is_ok(), took);
    }
    let body = CleaningAnswer {
        attempt: job.attempt,
        error: result.as_ref().err().map(ToString::to_string),
        duration_ms: took.as_millis() as i64,
    };
    let mut wait = Duration::from_millis(100);
    for _ in 0..8 {
        match client.finish_cleaning(node, &job.rp_uuid, &body).await {
            Ok(()) => {
                match result {
                    Ok(()) => {
                        tracing::info!(provider = %job.rp_uuid, address = %job.address, duration_ms = body.duration_ms, "device cleaned")
                    }
                    Err(e) => {
                        tracing::warn!(provider = %job.rp_uuid, address = %job.address, reason = %e, "device cleaning failed")
                    }
                }
                return;
            }
            Err(e) if e.status() == Some(404) => {
                tracing::info!(provider = %job.rp_uuid, "cleaning answer not wanted any more (released or taken over): {e}");
                return;
            }
            Err(e) => {
                tracing::warn!(provider = %job.rp_uuid, "sending a cleaning answer failed, retrying: {e}");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `[[cleaning]]` examples of the README and docs/cleaning.md: every TOML
    /// block with a rule parses as the agent's file does and passes validation.
    #[test]
    fn the_documented_rules_are_valid() {
        #[derive(Deserialize)]
        struct Rules {
            cleaning: Vec<CleaningFile>,
        }
        let docs = [
            ("README.md", include_str!("../../../../README.md")),
            (
                "docs/cleaning.md",
                include_str!("../../../../docs/cleaning.md"),
            ),
        ];
        let mut methods = Vec::new();
        for (name, text) in docs {
            let blocks: Vec<&str> = text
                .split("```toml\n")
                .skip(1)
                .filter_map(|b| b.split("```").next())
                .filter(|b| b.contains("[[cleaning]]"))
                .collect();
            assert!(!blocks.is_empty(), "{name} has no [[cleaning]] example");
            for b in blocks {
                let rules: Rules = toml::from_str(b).unwrap_or_else(|e| panic!("{name}: {e}\n{b}"));
                let valid = validate(rules.cleaning).unwrap_or_else(|e| panic!("{name}: {e}\n{b}"));
                methods.extend(valid.into_iter().map(|r| r.method.name()));
            }
        }
        for m in ["pci-reset", "fpga-default", "command"] {
            assert!(methods.contains(&m), "no documented example of {m}");
        }
    }

    fn parse(text: &str) -> Result<Vec<Rule>, String> {
        #[derive(Deserialize)]
        struct Doc {
            cleaning: Vec<CleaningFile>,
        }
        validate(
            toml::from_str::<Doc>(text)
                .map_err(|e| e.to_string())?
                .cleaning,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn rules_are_validated_naming_their_key() {
        let ok = parse(
            "[[cleaning]]\nmethod = \"command\"\ncommand = [\"nvme\", \"format\", \"{device}\"]\nverify = [\"true\"]\ntimeout_seconds = 60\n[cleaning.selector]\ndevice_type = \"nvme\"\nvendor = \"0x144d\"\n",
        )
        .unwrap();
        assert_eq!(ok[0].selector.vendor, Some(0x144d));
        assert_eq!(ok[0].timeout, Duration::from_secs(60));
        let e = parse(
            "[[cleaning]]\nmethod = \"pci-reset\"\n[cleaning.selector]\nvendor = \"nvidia\"\n",
        )
        .unwrap_err();
        assert!(e.starts_with("cleaning[0].selector.vendor"), "{e}");
        let e = parse("[[cleaning]]\nmethod = \"wipe\"\n").unwrap_err();
        assert!(e.starts_with("cleaning[0].method"), "{e}");
        let e = parse("[[cleaning]]\nmethod = \"fpga-default\"\n").unwrap_err();
        assert!(e.starts_with("cleaning[0].image"), "{e}");
        let e = parse("[[cleaning]]\nmethod = \"command\"\n").unwrap_err();
        assert!(e.starts_with("cleaning[0].command"), "{e}");
    }

    #[tokio::test]
    async fn pci_reset_writes_the_functions_reset_file_then_verifies() {
        let root = tempfile::tempdir().unwrap();
        let dev = root.path().join("bus/pci/devices/0000:3b:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        let rule = |verify: &[&str]| Rule {
            selector: Selector::default(),
            method: Method::PciReset,
            verify: verify.iter().map(|s| s.to_string()).collect(),
            timeout: Duration::from_secs(5),
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        run_rule(
            &rule(&["true"]),
            root.path(),
            "0000:3b:00.0",
            None,
            deadline,
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read_to_string(dev.join("reset")).unwrap(), "1");
        let e = run_rule(
            &rule(&["false"]),
            root.path(),
            "0000:3b:00.0",
            None,
            deadline,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&e, CleanError::Exited { part: "verify", program, .. } if program == "false"),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("verify: false exited"), "{e}");
        let e = run_rule(&rule(&[]), root.path(), "0000:99:00.0", None, deadline)
            .await
            .unwrap_err();
        assert!(matches!(e, CleanError::Reset { .. }), "{e:?}");
        assert!(e.to_string().starts_with("pci-reset: writing 1 to"), "{e}");
    }

    #[test]
    fn placeholders_are_filled_and_a_missing_node_says_so() {
        let args = vec!["x".to_owned(), "--dev={device}".into(), "{address}".into()];
        assert_eq!(
            fill(&args, "0000:01:00.0", Some("/dev/nvme0")).unwrap(),
            ["x", "--dev=/dev/nvme0", "0000:01:00.0"]
        );
        let e = fill(&args, "0000:01:00.0", None).unwrap_err();
        assert!(matches!(e, CleanError::NoDeviceNode { .. }), "{e:?}");
        assert!(e.to_string().contains("no device node"), "{e}");
    }
}
