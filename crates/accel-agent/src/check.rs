//! `accel agent check`: the agent explaining itself on a host, without calling anyone
//! (issue 31 item 4). It lists every PCI function discovery looked at, with its ids,
//! their names from `pci.ids` ([`crate::pci_ids`]), its kernel driver and NUMA node,
//! and what discovery decided for it and why; then the providers the agent would
//! report, with their classes, inventories, traits and health.
//!
//! Nothing here decides anything: the verdicts are the discovery pass's own
//! ([`crate::drivers::Verdict`], from each driver's [`crate::drivers::Judgement`]),
//! and the providers are read from the very report body the agent would send
//! ([`crate::model::Report::body`]), so `check` cannot drift from what the agent does.
//! A GPU that can be partitioned shows its MIG profiles with their placements (printed
//! as `nvidia-smi mig -lgipp` does), its MIG devices and its vGPU types, for comparing
//! with `nvidia-smi` on the host. Each device a `[[cleaning]]` rule matches is listed
//! with whether the rule can work for it, resolved as the agent resolves it at start-up ([`crate::cleaner::resolve`],
//! without the image service's word on `fpga-default` images).

use crate::cleaner::resolve::{Resolution, SearchPath};
use crate::config::Settings;
use crate::drivers::Verdict;
use crate::model::FoundDevice;
use crate::model::Report;
use crate::pci::PciBus;
use crate::pci_ids::PciIds;
use crate::sysfs::Sysfs;
use crate::{Agent, AgentError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub use crate::model::NO_NODE;

/// What `accel agent check` shows; `--format json` prints it as it is.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// The node the providers are named after (`null` without `--node`).
    pub node: Option<String>,
    /// `accel` or `cyborg`.
    pub model: &'static str,
    /// The `pci.ids` the names come from, when one was found.
    pub pci_ids: Option<String>,
    pub functions: Vec<Function>,
    pub providers: Vec<Provider>,
    pub conflicts: Vec<Conflict>,
    /// Sysfs entries skipped, each naming its path.
    pub skipped: Vec<String>,
    pub failed_drivers: Vec<FailedDriver>,
    /// Each device a `[[cleaning]]` rule matches.
    pub cleaning: Vec<Cleaning>,
    /// The indexes of the `[[cleaning]]` rules no device here matches.
    pub unmatched_rules: Vec<usize>,
    /// The GPUs that can be partitioned, as discovery read them.
    pub partitions: Vec<Partitioned>,
}

/// A GPU's partitions as discovery read them: what to compare with `nvidia-smi mig
/// -lgip`, `-lgipp` and `-lgi` on the host (issue 45).
#[derive(Debug, Clone, Serialize)]
pub struct Partitioned {
    /// The device's control address.
    pub device: String,
    #[serde(flatten)]
    pub partitions: accel_api::partitions::GpuPartitions,
}

/// A device, the `[[cleaning]]` rule that cleans it, and whether it can.
#[derive(Debug, Clone, Serialize)]
pub struct Cleaning {
    /// The device's control address (the one `pci-reset` resets).
    pub device: String,
    pub providers: Vec<String>,
    /// The rule's index in `[[cleaning]]`.
    pub rule: usize,
    pub method: &'static str,
    /// Why the rule cannot work for the device; empty when it can.
    pub problems: Vec<String>,
    /// What `check` could not verify.
    pub unverified: Vec<String>,
}

/// One PCI function and what discovery decided for it.
#[derive(Debug, Clone, Serialize)]
pub struct Function {
    pub address: String,
    /// The 24-bit class code in hex (`030200`).
    pub class: String,
    pub class_name: String,
    pub vendor: String,
    pub vendor_name: String,
    pub device: String,
    pub device_name: String,
    /// The bound kernel driver.
    pub kernel_driver: Option<String>,
    pub numa_node: Option<u32>,
    /// `taken`, `left_to_nova`, `declined`, `ignored`, `no_driver`,
    /// `not_an_accelerator` or `driver_failed`.
    pub decision: &'static str,
    /// The accel driver the decision is about.
    pub driver: Option<&'static str>,
    /// The device (control address) the function is part of.
    pub accel_device: Option<String>,
    pub reason: String,
}

/// One provider the agent would report.
#[derive(Debug, Clone, Serialize)]
pub struct Provider {
    pub name: String,
    pub parent: Option<String>,
    /// The device's control address.
    pub device: String,
    pub device_type: String,
    pub model: String,
    /// The accel driver that found it.
    pub driver: String,
    /// `ok` or `unhealthy` (an unhealthy device's inventory is reserved whole).
    pub health: String,
    /// Resource class to total.
    pub inventories: BTreeMap<String, i64>,
    pub traits: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Conflict {
    pub device: String,
    pub function: String,
    pub rule: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailedDriver {
    pub driver: &'static str,
    pub reason: String,
}

impl Agent {
    /// An agent for `accel agent check`: the same discovery, and a client that holds
    /// no Keystone session, which `check` never uses anyway (a `[keystone]` table in
    /// the file it shares with the agent is not read).
    pub fn offline(mut settings: Settings) -> Result<Agent, AgentError> {
        let catalog = settings.keystone.take().is_some();
        let mut agent = Agent::new(settings)?;
        agent.keystone_catalog = catalog;
        Ok(agent)
    }

    /// One discovery pass, explained. Calls no server and no Keystone.
    pub fn check(&self) -> Check {
        self.check_with(&SearchPath::current())
    }

    /// [`Agent::check`] with the `[[cleaning]]` rules' programs looked up on `search`.
    pub fn check_with(&self, search: &SearchPath) -> Check {
        let d = self.discover();
        let s = &self.settings;
        let bus = PciBus::scan(&Sysfs::new(&s.sysfs_root));
        let wanted: Vec<(u16, u16)> = bus
            .functions
            .values()
            .map(|f| (f.vendor, f.device))
            .collect();
        let ids = PciIds::for_sysfs(&s.sysfs_root, &wanted);
        let node = (!s.node.is_empty()).then(|| s.node.clone());
        let providers = providers(node.as_deref().unwrap_or(NO_NODE), s.model, &d.devices);
        let resolved = self.resolve_cleaning(&d.devices, search, false);
        let unmatched_rules = (0..s.cleaning.len())
            .filter(|i| !resolved.iter().any(|r| r.rule == *i))
            .collect();
        Check {
            model: match s.model {
                crate::model::Model::Accel => "accel",
                crate::model::Model::Cyborg => "cyborg",
            },
            pci_ids: ids.source.as_ref().map(|p| p.display().to_string()),
            functions: d
                .verdicts
                .iter()
                .filter_map(|v| function(&bus, &ids, v))
                .collect(),
            cleaning: resolved.iter().map(|r| cleaning(r, &providers)).collect(),
            unmatched_rules,
            partitions: d
                .devices
                .iter()
                .filter_map(|x| {
                    let partitions = x.partitions.clone()?;
                    Some(Partitioned {
                        device: x.address.to_string(),
                        partitions,
                    })
                })
                .collect(),
            providers,
            conflicts: d
                .conflicts
                .iter()
                .map(|c| Conflict {
                    device: c.device.to_string(),
                    function: c.function.to_string(),
                    rule: c.rule.clone(),
                })
                .collect(),
            skipped: d.warnings.clone(),
            failed_drivers: d
                .failed
                .iter()
                .map(|f| FailedDriver {
                    driver: f.driver,
                    reason: f.reason.clone(),
                })
                .collect(),
            node,
        }
    }
}

/// `{0,2,4}:2`, as `nvidia-smi mig -lgipp` prints placements (one group per size).
fn placements_text(placements: &[accel_api::partitions::MigPlacement]) -> String {
    let mut sizes: Vec<u32> = placements.iter().map(|p| p.size).collect();
    sizes.dedup();
    sizes
        .iter()
        .map(|size| {
            let starts: Vec<String> = placements
                .iter()
                .filter(|p| p.size == *size)
                .map(|p| p.start.to_string())
                .collect();
            format!("{{{}}}:{size}", starts.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn engines_text(e: &accel_api::partitions::Engines) -> String {
    format!(
        "{} MiB, {} SMs, CE {} DEC {} ENC {} JPEG {} OFA {}",
        e.memory_mib,
        e.multiprocessors,
        e.copy_engines,
        e.decoders,
        e.encoders,
        e.jpeg_engines,
        e.ofa_engines
    )
}

/// A GPU's partitions under its device in `check`'s text.
fn partitions_text(p: &accel_api::partitions::GpuPartitions, o: &mut String) {
    let mode = if p.mig_enabled { "on" } else { "off" };
    let _ = writeln!(
        o,
        "  MIG {mode}, {} memory slices, whole GPU {}",
        p.memory_slices,
        engines_text(&p.totals)
    );
    for m in &p.profiles {
        let _ = writeln!(
            o,
            "      profile {} {}: {}, placements {}",
            m.id,
            m.name,
            engines_text(&m.engines),
            placements_text(&m.placements)
        );
    }
    for i in &p.instances {
        let _ = writeln!(
            o,
            "      MIG device {}: profile {} at {}, GPU instance {}, compute instance {}",
            i.uuid,
            i.profile_id,
            placements_text(&[i.placement]),
            i.gpu_instance_id,
            i.compute_instance_id
        );
    }
    for t in &p.vgpu_types {
        let mig = t
            .mig_profile_id
            .map(|id| format!(", MIG profile {id}"))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "  vGPU type {} {}: {} MiB, up to {}{mig}",
            t.type_id, t.name, t.memory_mib, t.max_instances
        );
    }
}

fn cleaning(r: &Resolution, providers: &[Provider]) -> Cleaning {
    let device = r.device.address.to_string();
    Cleaning {
        providers: providers
            .iter()
            .filter(|p| p.device == device)
            .map(|p| p.name.clone())
            .collect(),
        device,
        rule: r.rule,
        method: r.method,
        problems: r.problems.iter().map(ToString::to_string).collect(),
        unverified: r.unverified.iter().map(ToString::to_string).collect(),
    }
}

fn function(bus: &PciBus, ids: &PciIds, v: &Verdict) -> Option<Function> {
    let f = bus.get(&v.address)?;
    let unknown = || "unknown".to_owned();
    Some(Function {
        address: v.address.to_string(),
        class: format!("{:06x}", f.class),
        class_name: ids.class(f.class).map_or_else(unknown, str::to_owned),
        vendor: format!("{:04x}", f.vendor),
        vendor_name: ids.vendor(f.vendor).map_or_else(unknown, str::to_owned),
        device: format!("{:04x}", f.device),
        device_name: ids
            .device(f.vendor, f.device)
            .map_or_else(unknown, str::to_owned),
        kernel_driver: f.driver.clone(),
        numa_node: f.numa_node,
        decision: v.decision.as_str(),
        driver: v.driver,
        accel_device: v.device.map(|d| d.to_string()),
        reason: v.reason.clone(),
    })
}

/// The providers of the report body the agent would send: a deployable is a provider,
/// its `rc` attribute the class of its `num_accelerators`, `inventory:<class>`
/// attributes further inventories, `traitN` attributes its traits.
fn providers(node: &str, model: crate::model::Model, devices: &[FoundDevice]) -> Vec<Provider> {
    let report = Report::new(node, devices.to_vec()).modelled(model);
    let body = report.body();
    let mut out = Vec::new();
    for (dev, wire) in report.devices.iter().zip(&body.devices) {
        for dep in &wire.deployables {
            let mut inventories = BTreeMap::new();
            let mut traits = Vec::new();
            for kv in &dep.attributes {
                if kv.key == "rc" {
                    inventories.insert(kv.value.clone(), dep.num_accelerators);
                } else if let Some(class) = kv.key.strip_prefix("inventory:") {
                    inventories.insert(class.to_owned(), kv.value.parse().unwrap_or(0));
                } else if kv.key.starts_with("trait") {
                    traits.push(kv.value.clone());
                }
            }
            out.push(Provider {
                name: dep.name.clone(),
                parent: dep.parent.clone(),
                device: dev.address.to_string(),
                device_type: wire.device_type.clone(),
                model: wire.model.clone(),
                driver: dev.driver.to_owned(),
                health: wire.health.clone().unwrap_or_else(|| "ok".into()),
                inventories,
                traits,
            });
        }
    }
    out
}

impl Check {
    /// What makes `check` exit non-zero: functions both accel and Nova would take,
    /// drivers that could not tell what the host has (the agent would not report),
    /// and devices a `[[cleaning]]` rule cannot work for (the agent would not start).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.cleaning {
            for p in &c.problems {
                out.push(format!(
                    "device {} ({}): cleaning[{}] ({}) cannot work: {p}",
                    c.device,
                    c.providers.join(", "),
                    c.rule,
                    c.method
                ));
            }
        }
        if !self.conflicts.is_empty() {
            out.push(format!(
                "{} function(s) claimed by both accel and Nova's [pci] rules: remove them from Nova's device_spec or from accel's drivers",
                self.conflicts.len()
            ));
        }
        if !self.failed_drivers.is_empty() {
            let names: Vec<&str> = self.failed_drivers.iter().map(|f| f.driver).collect();
            out.push(format!(
                "driver(s) {} failed during discovery: the agent would not send its report",
                names.join(", ")
            ));
        }
        out
    }

    /// The `[[cleaning]]` section: each matched device and its rule's verdict.
    fn cleaning_text(&self, o: &mut String) {
        if self.cleaning.is_empty() && self.unmatched_rules.is_empty() {
            return;
        }
        let _ = writeln!(
            o,
            "Devices [[cleaning]] rules clean: {}",
            self.cleaning.len()
        );
        for c in &self.cleaning {
            let verdict = if c.problems.is_empty() {
                "ok"
            } else {
                "cannot work"
            };
            let _ = writeln!(
                o,
                "  device {} ({}) cleaning[{}] {}: {verdict}",
                c.device,
                c.providers.join(", "),
                c.rule,
                c.method
            );
            for p in &c.problems {
                let _ = writeln!(o, "      problem: {p}");
            }
            for u in &c.unverified {
                let _ = writeln!(o, "      {u}");
            }
        }
        for i in &self.unmatched_rules {
            let _ = writeln!(o, "  cleaning[{i}] matches no device here");
        }
    }

    /// The devices the providers belong to, in order.
    fn devices(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.providers.iter().map(|p| p.device.as_str()).collect();
        v.dedup();
        v
    }

    /// The text `accel agent check` prints.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let names = match &self.pci_ids {
            Some(p) => format!("names from {p}"),
            None => "no pci.ids found: names unknown".to_owned(),
        };
        let _ = writeln!(
            o,
            "PCI functions looked at: {} ({names})",
            self.functions.len()
        );
        for f in &self.functions {
            let _ = writeln!(
                o,
                "  {}  class {} {}  {}:{} {} / {}  kernel driver {}  NUMA node {}",
                f.address,
                f.class,
                f.class_name,
                f.vendor,
                f.device,
                f.vendor_name,
                f.device_name,
                f.kernel_driver.as_deref().unwrap_or("none"),
                f.numa_node
                    .map_or_else(|| "none".to_owned(), |n| n.to_string()),
            );
            let _ = writeln!(o, "      {}: {}", f.decision.replace('_', " "), f.reason);
        }
        let node = self.node.as_deref().unwrap_or(NO_NODE);
        let _ = writeln!(
            o,
            "Providers the agent would report (node {node}, model {}): {}",
            self.model,
            self.providers.len()
        );
        for device in self.devices() {
            let mine: Vec<&Provider> = self
                .providers
                .iter()
                .filter(|p| p.device == device)
                .collect();
            let p0 = mine[0];
            let _ = writeln!(
                o,
                "device {device} {} {} ({}), health {}",
                p0.device_type, p0.model, p0.driver, p0.health
            );
            for p in mine {
                let parent = p
                    .parent
                    .as_deref()
                    .map(|x| format!(" (under {x})"))
                    .unwrap_or_default();
                let inv: Vec<String> = p
                    .inventories
                    .iter()
                    .map(|(c, n)| format!("{c}={n}"))
                    .collect();
                let _ = writeln!(o, "  provider {}{parent}", p.name);
                let _ = writeln!(
                    o,
                    "      inventory {}",
                    if inv.is_empty() {
                        "none (its regions carry it)".to_owned()
                    } else {
                        inv.join(", ")
                    }
                );
                let _ = writeln!(o, "      traits {}", p.traits.join(", "));
            }
            if let Some(p) = self.partitions.iter().find(|p| p.device == device) {
                partitions_text(&p.partitions, &mut o);
            }
        }
        for w in &self.skipped {
            let _ = writeln!(o, "skipped {w}");
        }
        for f in &self.failed_drivers {
            let _ = writeln!(o, "failed: driver {} ({})", f.driver, f.reason);
        }
        for c in &self.conflicts {
            let _ = writeln!(
                o,
                "conflict: device {} function {} is claimed by Nova's rule {}",
                c.device, c.function, c.rule
            );
        }
        self.cleaning_text(&mut o);
        if self.problems().is_empty() {
            let _ = writeln!(o, "ok: {} device(s), no conflict", self.devices().len());
        }
        o
    }
}
