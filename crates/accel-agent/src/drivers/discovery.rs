//! The discovery pass: one scan of the PCI bus, every enabled driver over it, the
//! first claim of a function winning, Nova's `[pci]` devices dropped, health asked,
//! and one verdict per function for `accel agent check` (the parent module's picture).

use super::*;

/// The outcome of one discovery pass.
#[derive(Debug, Default)]
pub struct Discovery {
    /// Devices to report, by address.
    pub devices: Vec<FoundDevice>,
    /// Devices left to Nova because one of their functions matches its `[pci]` rules.
    pub conflicts: Vec<Conflict>,
    /// Sysfs entries skipped, each naming its path.
    pub warnings: Vec<String>,
    /// Drivers that failed this time (the agent puts their last devices back).
    pub failed: Vec<DriverFailure>,
    /// Failed drivers with no earlier picture: a report now would be wrong.
    pub unknown: Vec<&'static str>,
    /// Every function on the bus, in address order, with what this pass decided for
    /// it and why (`accel agent check`).
    pub verdicts: Vec<Verdict>,
}

/// Why the PCI bus cannot be listed, when it exists but is unreadable (a missing
/// `bus/pci/devices` is a host without PCI, which has no devices).
fn bus_unreadable(sysfs: &Sysfs) -> Option<String> {
    let dir = sysfs.path("bus/pci/devices");
    match std::fs::read_dir(&dir) {
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(format!("cannot list {}: {e}", dir.display())),
    }
}

/// Scans the bus once and runs `drivers` over it.
pub fn discover(
    sysfs: &Sysfs,
    config: &DriverSettings,
    drivers: &[Box<dyn Driver>],
    nova: Option<&NovaPci>,
) -> Discovery {
    let bus = PciBus::scan(sysfs);
    let host = Host::new(sysfs, &bus, config);
    let mut out = Discovery::default();
    let mut fates = Fates::default();
    let bus_failure = bus_unreadable(sysfs);
    for driver in drivers {
        let found = match &bus_failure {
            Some(why) if driver.uses_pci_bus() => Err(DriverFailure {
                driver: driver.name(),
                reason: why.clone(),
                unhealthy: Vec::new(),
            }),
            _ => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                driver.try_discover(&host)
            }))
            .unwrap_or_else(|_| {
                Err(DriverFailure {
                    driver: driver.name(),
                    reason: "the driver panicked during discovery".into(),
                    unhealthy: Vec::new(),
                })
            }),
        };
        let found = match found {
            Ok(found) => found,
            Err(failure) => {
                tracing::error!(driver = failure.driver, reason = %failure.reason, "driver failed during discovery; its devices are kept as last seen");
                out.failed.push(failure);
                continue;
            }
        };
        for mut dev in found {
            if let Some((other, _)) = dev.functions.iter().find_map(|f| fates.taken.get(f)) {
                tracing::warn!(device = %dev.address, driver = driver.name(), other, "device already claimed by another driver, skipped");
                for f in &dev.functions {
                    fates.twice.insert(*f, (driver.name(), other));
                }
                continue;
            }
            if let Some(nova) = nova {
                let conflicts = nova.conflicts(host.bus, &dev);
                if !conflicts.is_empty() {
                    for c in &conflicts {
                        tracing::warn!(device = %c.device, function = %c.function, rule = %c.rule, "Nova's [pci] rules claim this device; accel leaves it to Nova");
                    }
                    for f in &dev.functions {
                        let rule = conflicts.iter().find(|c| c.function == *f);
                        let rule = rule.map(|c| c.rule.clone());
                        fates.nova.insert(*f, (driver.name(), dev.address, rule));
                    }
                    out.conflicts.extend(conflicts);
                    continue;
                }
            }
            for f in &dev.functions {
                fates.taken.insert(*f, (driver.name(), dev.address));
            }
            dev.health = driver.health(&host, &dev);
            out.devices.push(dev);
        }
    }
    out.devices.sort_by_key(|d| d.address);
    let enabled: Vec<&str> = drivers.iter().map(|d| d.name()).collect();
    out.verdicts = verdicts(&host, &out, &fates, &enabled);
    out.warnings = sysfs.take_warnings();
    out
}
