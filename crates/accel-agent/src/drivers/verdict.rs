//! One verdict per PCI function of a discovery pass ([`Verdict`]): what became of the
//! devices the drivers found (reported, left to Nova, found twice) and what each
//! driver said of the functions it did not take ([`Judgement`]), for `accel agent
//! check`. Nothing here matches devices: it only reads what the drivers decided.

use super::{Discovery, Host, Judgement, NAMES};
use crate::pci::{PciAddress, PciFunction};
use std::collections::HashMap;

/// What one discovery pass decided for one PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub address: PciAddress,
    pub decision: Decision,
    /// The accel driver the decision is about, when one is.
    pub driver: Option<&'static str>,
    /// The device (its control address) the function is part of, when it is one's.
    pub device: Option<PciAddress>,
    /// Why, in a sentence.
    pub reason: String,
}

/// The kinds of [`Verdict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Part of a device the agent reports.
    Taken,
    /// Part of a device one of Nova's `[pci]` rules matches: left to Nova.
    LeftToNova,
    /// A driver's kind of device that it does not offer (the reason says why).
    Declined,
    /// A bridge or virtio device: never an accelerator.
    Ignored,
    /// A class some driver handles, from a vendor none does.
    NoDriver,
    /// A class and id no enabled driver handles.
    NotAccelerator,
    /// Not judged: a driver failed during discovery.
    DriverFailed,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Taken => "taken",
            Decision::LeftToNova => "left_to_nova",
            Decision::Declined => "declined",
            Decision::Ignored => "ignored",
            Decision::NoDriver => "no_driver",
            Decision::NotAccelerator => "not_an_accelerator",
            Decision::DriverFailed => "driver_failed",
        }
    }
}

/// What became of the devices drivers found, by function: the input of [`verdicts`].
#[derive(Default)]
pub(super) struct Fates {
    /// Function -> (driver, device) of reported devices.
    pub taken: HashMap<PciAddress, (&'static str, PciAddress)>,
    /// Function -> (driver, device, the rule matching this function, if it is the one).
    pub nova: HashMap<PciAddress, (&'static str, PciAddress, Option<String>)>,
    /// Function -> (driver whose device was skipped, driver that took it first).
    pub twice: HashMap<PciAddress, (&'static str, &'static str)>,
}

/// Every function's [`Verdict`], from what the drivers found and said.
pub(super) fn verdicts(
    host: &Host,
    out: &Discovery,
    fates: &Fates,
    enabled: &[&str],
) -> Vec<Verdict> {
    let mut notes: HashMap<PciAddress, Vec<(&'static str, Judgement)>> = HashMap::new();
    for (driver, f, j) in host.take_notes() {
        notes.entry(f).or_default().push((driver, j));
    }
    let judge = |f: &PciFunction| -> Verdict {
        let a = f.address;
        let v = |decision, driver, device, reason: String| Verdict {
            address: a,
            decision,
            driver,
            device,
            reason,
        };
        if let Some(&(driver, device)) = fates.taken.get(&a) {
            let dev = out.devices.iter().find(|d| d.address == device);
            let handle = dev.is_some_and(|d| {
                d.handles
                    .iter()
                    .chain(d.regions.iter().flat_map(|r| &r.handles))
                    .any(|h| h.address == a)
            });
            let what = dev.map_or("device", |d| d.device_type.as_str());
            let role = match (a == device, handle) {
                (true, true) => "the device itself, offered".to_owned(),
                (true, false) => {
                    "its control function (its VFs or regions are offered, not itself)".to_owned()
                }
                (false, true) => format!("offered as an accelerator of {device}"),
                (false, false) => format!("a function of {device}, not offered on its own"),
            };
            return v(
                Decision::Taken,
                Some(driver),
                Some(device),
                format!("by driver {driver} ({what} {device}): {role}"),
            );
        }
        if let Some((driver, device, rule)) = fates.nova.get(&a) {
            let why = match rule {
                Some(r) => format!("Nova's [pci] device_spec {r} matches it"),
                None => "Nova's [pci] device_spec matches another function of it".to_owned(),
            };
            return v(
                Decision::LeftToNova,
                Some(*driver),
                Some(*device),
                format!("left to Nova: driver {driver} found device {device}, but {why}"),
            );
        }
        if let Some(&(driver, first)) = fates.twice.get(&a) {
            return v(
                Decision::Declined,
                Some(driver),
                None,
                format!("driver {driver} found it too, but driver {first} took it first"),
            );
        }
        let said = notes.get(&a).map(Vec::as_slice).unwrap_or_default();
        let declined: Vec<(&'static str, &String)> = said
            .iter()
            .filter_map(|(d, j)| match j {
                Judgement::Declined(r) => Some((*d, r)),
                _ => None,
            })
            .collect();
        if let Some((driver, _)) = declined.first() {
            let reason = declined
                .iter()
                .map(|(d, r)| format!("driver {d}: {r}"))
                .collect::<Vec<_>>()
                .join("; ");
            return v(Decision::Declined, Some(driver), None, reason);
        }
        if let Some(why) = Host::not_a_candidate(f) {
            return v(Decision::Ignored, None, None, why.to_owned());
        }
        if !out.failed.is_empty() {
            let failed: Vec<String> = out
                .failed
                .iter()
                .map(|f| format!("{} ({})", f.driver, f.reason))
                .collect();
            return v(
                Decision::DriverFailed,
                None,
                None,
                format!(
                    "not judged: driver(s) {} failed during discovery",
                    failed.join(", ")
                ),
            );
        }
        let others: Vec<&str> = said
            .iter()
            .filter(|(_, j)| *j == Judgement::OtherVendor)
            .map(|(d, _)| *d)
            .collect();
        if !others.is_empty() {
            return v(
                Decision::NoDriver,
                None,
                None,
                format!(
                    "no driver for {:04x}:{:04x}: driver(s) {} handle its class, for other vendors or devices",
                    f.vendor,
                    f.device,
                    others.join(", ")
                ),
            );
        }
        let mut reason = format!(
            "no enabled driver handles class {:06x} with vendor:device {:04x}:{:04x}",
            f.class, f.vendor, f.device
        );
        if enabled.len() < NAMES.len() {
            reason.push_str(&format!(" (drivers enabled: {})", enabled.join(", ")));
        }
        v(Decision::NotAccelerator, None, None, reason)
    };
    let mut by_address: HashMap<PciAddress, Verdict> = HashMap::new();
    let mut all = Vec::new();
    // PFs first: a VF no device took is judged with its PF.
    for f in host.bus.functions.values().filter(|f| !f.is_vf()) {
        let v = judge(f);
        by_address.insert(f.address, v.clone());
    }
    for f in host.bus.functions.values() {
        let mut v = by_address
            .get(&f.address)
            .cloned()
            .unwrap_or_else(|| judge(f));
        if let (Decision::Ignored, Some(pf)) = (v.decision, f.physfn) {
            match by_address.get(&pf) {
                Some(p) if p.decision == Decision::Taken => {
                    v.reason = format!("a VF of {pf} that its device does not use ({})", p.reason);
                }
                Some(p) => {
                    v = Verdict {
                        address: f.address,
                        reason: format!("a VF of {pf}, judged with it: {}", p.reason),
                        ..p.clone()
                    };
                }
                None => {}
            }
        }
        all.push(v);
    }
    all
}
