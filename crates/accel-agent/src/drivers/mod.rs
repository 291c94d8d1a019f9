//! Discovery drivers, one module each behind [`Driver`] (discover, program, health),
//! and the discovery pass that runs the enabled ones over one scan of the PCI bus.
//!
//! ```text
//! Sysfs ──▶ PciBus::scan (every function, once)
//!             │
//!             ├─▶ nvidia ─┐   each driver starts from physical functions only and
//!             ├─▶ intel_fpga  reaches VFs through their PF's virtfn* links, so a VF
//!             ├─▶ xilinx  │   is never a device of its own
//!             ├─▶ qat     ├─▶ FoundDevice* ─▶ first claim of a function wins
//!             ├─▶ nvme    │                ─▶ Nova's [pci] rules: matching devices dropped
//!             ├─▶ nic     │                ─▶ health()
//!             └─▶ fake ───┘
//! ```
//!
//! VF-correctness: a PF with SR-IOV VFs enabled offers its VFs (inventory = number of
//! VFs, one attach handle each) and is not offered itself; a GPU's VFs become a `VGPU`
//! inventory of that one GPU's provider, never GPUs of their own. Bridges, virtio
//! functions and classes no driver knows are ignored.
//!
//! A driver says why it does not take a function ([`Judgement`]: not its kind, its
//! class from another vendor, or its kind declined with a reason), and the pass turns
//! that and what became of each device (reported, left to Nova, found twice) into one
//! [`Verdict`] per function on the bus: `accel agent check` shows the drivers' own
//! reasons rather than a second copy of their rules.

mod discovery;
pub mod fake;
pub mod intel_fpga;
pub mod nic;
pub mod nvidia;
pub mod nvme;
pub mod qat;
mod verdict;
pub mod xilinx;

use crate::config::DriverSettings;
use crate::model::{FoundDevice, Handle, Health};
use crate::nova::{Conflict, NovaPci};
use crate::pci::{PciAddress, PciBus, PciFunction, CLASS_BRIDGE, VENDOR_VIRTIO};
use crate::sysfs::Sysfs;
use accel_core::accelerator::DeviceType;
pub use discovery::{discover, Discovery};
use std::path::Path;
use std::sync::Mutex;
use verdict::{verdicts, Fates};
pub use verdict::{Decision, Verdict};

/// What a driver sees of the host, and what its drivers said of the functions they
/// did not take ([`Judgement`]), for `accel agent check`.
pub struct Host<'a> {
    pub sysfs: &'a Sysfs,
    pub bus: &'a PciBus,
    pub config: &'a DriverSettings,
    notes: Mutex<Vec<(&'static str, PciAddress, Judgement)>>,
}

/// What one driver made of one candidate function it did not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Neither a class nor a vendor this driver handles.
    Unrelated,
    /// A class this driver handles, from a vendor it does not (an AMD GPU to `nvidia`).
    OtherVendor,
    /// This driver's kind of device, not offered, and why.
    Declined(String),
}

impl<'a> Host<'a> {
    pub fn new(sysfs: &'a Sysfs, bus: &'a PciBus, config: &'a DriverSettings) -> Host<'a> {
        Host {
            sysfs,
            bus,
            config,
            notes: Mutex::new(Vec::new()),
        }
    }

    /// Records what `driver` made of `f` (drivers that judge whole cards call it; the
    /// default [`Driver::discover`] records every [`Driver::judge`]).
    pub fn note(&self, driver: &'static str, f: PciAddress, judgement: Judgement) {
        if let Ok(mut n) = self.notes.lock() {
            n.push((driver, f, judgement));
        }
    }

    fn take_notes(&self) -> Vec<(&'static str, PciAddress, Judgement)> {
        self.notes
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default()
    }

    /// Why `f` is never an accelerator whatever the drivers say, or `None` for a
    /// candidate (the one rule [`Host::candidates`] applies).
    pub fn not_a_candidate(f: &PciFunction) -> Option<&'static str> {
        if f.is_vf() {
            Some("a VF: judged with its PF")
        } else if f.base_class() == CLASS_BRIDGE {
            Some("a bridge: never an accelerator")
        } else if f.vendor == VENDOR_VIRTIO {
            Some("a virtio (paravirtual) device: never an accelerator")
        } else {
            None
        }
    }

    /// Functions that could be an accelerator at all: physical functions that are not
    /// bridges or virtio devices.
    pub fn candidates(&self) -> impl Iterator<Item = &PciFunction> {
        self.bus
            .functions
            .values()
            .filter(|f| Host::not_a_candidate(f).is_none())
    }

    /// The VFs of `pf` that are on the bus.
    pub fn vfs<'b>(&'b self, pf: &'b PciFunction) -> impl Iterator<Item = &'b PciFunction> {
        pf.virtfns.iter().filter_map(|a| self.bus.get(a))
    }
}

/// Why programming did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error("driver {0} cannot program devices")]
    NotSupported(&'static str),
    #[error("device {0} has no region {1}")]
    NoSuchRegion(String, u32),
    #[error("{0}")]
    Failed(String),
}

/// How a driver programs its devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Programming {
    /// It does not ([`ProgramError::NotSupported`]).
    NotSupported,
    /// By running this vendor tool (`fpgaconf`, `xbutil`; a bare name is looked up on
    /// the PATH).
    Tool(std::path::PathBuf),
    /// Within the agent (the `fake` driver).
    InProcess,
}

/// A driver that could not tell what devices the host has this time: the agent keeps
/// the devices it found last (issue 14: a failing driver never reports its devices
/// removed), marking those in `unhealthy` so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFailure {
    pub driver: &'static str,
    pub reason: String,
    /// Devices (control addresses) the driver knows to be unhealthy.
    pub unhealthy: Vec<PciAddress>,
}

/// One kind of hardware.
pub trait Driver: Send + Sync {
    /// The name used in `--drivers` and as the deployables' `driver_name`.
    fn name(&self) -> &'static str;

    /// Every device of this kind on the host: by default each candidate PF that
    /// [`Driver::judge`] finds one in; what it said of the others is noted in `host`.
    fn discover(&self, host: &Host) -> Vec<FoundDevice> {
        host.candidates()
            .filter_map(|f| match self.judge(host, f) {
                Ok(d) => Some(d),
                Err(j) => {
                    host.note(self.name(), f.address, j);
                    None
                }
            })
            .collect()
    }

    /// The device the candidate PF `f` is, or why it is not one of this driver's
    /// (for drivers that judge PFs one at a time).
    fn judge(&self, _host: &Host, _f: &PciFunction) -> Result<FoundDevice, Judgement> {
        Err(Judgement::Unrelated)
    }

    /// [`Driver::discover`], or why the driver cannot tell this time. A driver whose
    /// vendor library or device files fail mid-run overrides this; the default never
    /// fails on its own (a panic is still caught by [`discover`]).
    fn try_discover(&self, host: &Host) -> Result<Vec<FoundDevice>, DriverFailure> {
        Ok(self.discover(host))
    }

    /// Whether the driver finds its devices on the PCI bus (all but `fake`): when the
    /// bus cannot be listed, such a driver has failed rather than found nothing.
    fn uses_pci_bus(&self) -> bool {
        true
    }

    /// Loads `bitstream` into `region` of `device` and returns the function id it now
    /// carries, when the driver can tell.
    fn program(
        &self,
        _host: &Host,
        _device: &FoundDevice,
        _region: u32,
        _bitstream: &Path,
    ) -> Result<Option<String>, ProgramError> {
        Err(ProgramError::NotSupported(self.name()))
    }

    /// How [`Driver::program`] loads a bitstream, so that a `fpga-default` cleaning
    /// rule can be checked before a region needs it (the cleaner's `resolve`).
    /// Says the truth of `program`: a driver that overrides one overrides both.
    fn programming(&self, _tools: &crate::config::ProgramTools) -> Programming {
        Programming::NotSupported
    }

    /// The device's health; by default [`pci_health`].
    fn health(&self, host: &Host, device: &FoundDevice) -> Health {
        pci_health(host, device)
    }
}

/// The region `index` of `device`, or [`ProgramError::NoSuchRegion`].
/// A sysfs tree one kernel driver builds under a PCI function: the drivers whose tree
/// it is, and whether it is there.
pub struct Layout {
    pub drivers: &'static [&'static str],
    pub present: bool,
}

/// Which of several drivers' trees describes `f`. Two drivers can describe one device
/// (Intel's OPAE driver and the kernel's DFL driver both model a PAC's regions), and
/// a driver swapped without a reboot leaves its tree beside the new one: reading both
/// would report one physical thing twice. The tree of the driver bound to the
/// function (its `driver` link) wins; a lone tree is read whoever is bound; with
/// several and none of their drivers bound, the first present is read and the
/// ambiguity is a warning. `None` when no tree is there.
pub fn bound_layout(sysfs: &Sysfs, f: &PciFunction, layouts: &[Layout]) -> Option<usize> {
    let present: Vec<usize> = (0..layouts.len()).filter(|&i| layouts[i].present).collect();
    match present.as_slice() {
        [] => None,
        [one] => Some(*one),
        several => {
            let bound = f.driver.as_deref();
            let by_driver = several
                .iter()
                .copied()
                .find(|&i| bound.is_some_and(|d| layouts[i].drivers.contains(&d)));
            match by_driver {
                Some(i) => {
                    tracing::info!(device = %f.address, driver = bound.unwrap_or(""),
                        "sysfs trees of several drivers: reading the bound driver's");
                    Some(i)
                }
                None => {
                    let first = several[0];
                    sysfs.warn(
                        &f.path.join("driver"),
                        format!(
                            "sysfs trees of drivers {} are all present and none is bound; reading {}'s",
                            several
                                .iter()
                                .map(|&i| layouts[i].drivers.join("/"))
                                .collect::<Vec<_>>()
                                .join(" and "),
                            layouts[first].drivers.join("/"),
                        ),
                    );
                    Some(first)
                }
            }
        }
    }
}

pub fn region_of(device: &FoundDevice, index: u32) -> Result<&crate::model::Region, ProgramError> {
    device
        .regions
        .iter()
        .find(|r| r.index == index)
        .ok_or_else(|| ProgramError::NoSuchRegion(device.address.to_string(), index))
}

/// Runs a vendor programming tool; its exit status decides, and its error output is
/// the reason when it fails.
pub fn run_tool(tool: &Path, args: &[String]) -> Result<(), ProgramError> {
    let out = std::process::Command::new(tool)
        .args(args)
        .output()
        .map_err(|e| ProgramError::Failed(format!("cannot run {}: {e}", tool.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = if stderr.trim().is_empty() {
        stdout.trim()
    } else {
        stderr.trim()
    };
    Err(ProgramError::Failed(format!(
        "{} {} failed ({}): {said}",
        tool.display(),
        args.join(" "),
        out.status
    )))
}

/// A PCI device is healthy while its control function is still on the bus and has
/// reported no fatal AER error (`aer_dev_fatal`, `TOTAL_ERR_FATAL` > 0).
pub fn pci_health(host: &Host, device: &FoundDevice) -> Health {
    let Some(f) = host.bus.get(&device.address) else {
        return Health::Unhealthy(format!(
            "its control function {} is no longer on the PCI bus",
            device.address
        ));
    };
    let fatal = host
        .sysfs
        .read_opt(&f.path.join("aer_dev_fatal"))
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("TOTAL_ERR_FATAL "))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    if fatal > 0 {
        Health::Unhealthy(format!(
            "{fatal} fatal PCIe AER error(s) (aer_dev_fatal TOTAL_ERR_FATAL)"
        ))
    } else {
        Health::Ok
    }
}

/// Drivers bound by the host for its own use: a general-purpose PF (NVMe, NIC, QAT)
/// bound to one of these stays the host's unless it has VFs.
pub fn host_owned(f: &PciFunction) -> bool {
    matches!(f.driver.as_deref(), Some(d) if d != "vfio-pci" && d != "pci-stub")
}

/// Why a general-purpose PF with no VFs that the host uses is not offered.
pub fn host_uses(f: &PciFunction) -> String {
    let driver = f.driver.as_deref().unwrap_or("?");
    match (f.sriov_totalvfs, f.sriov_numvfs) {
        (None | Some(0), _) => format!(
            "used by the host (kernel driver {driver}) and not VF-capable (no SR-IOV): bind it to vfio-pci to offer the whole device"
        ),
        (Some(total), _) => format!(
            "used by the host (kernel driver {driver}) with no VFs enabled (sriov_numvfs 0 of {total}): enable VFs or bind it to vfio-pci"
        ),
    }
}

/// What a general-purpose PF (NVMe, NIC, QAT) offers.
pub struct Offer {
    pub count: i64,
    /// One per VF, or the PF's own.
    pub handles: Vec<Handle>,
    /// The PF and its VFs: every function the device takes from the host.
    pub functions: Vec<PciAddress>,
}

/// The VF-correctness rule for a general-purpose PF: with VFs, the VFs (one handle
/// each, `handle` builds it); without, the PF itself unless the host uses it
/// ([`host_owned`]), in which case nothing is offered (`None`).
pub fn offer(
    f: &PciFunction,
    vfs: Vec<PciAddress>,
    handle: impl Fn(PciAddress) -> Handle,
) -> Option<Offer> {
    let (count, handles) = if !vfs.is_empty() {
        (vfs.len() as i64, vfs.iter().copied().map(handle).collect())
    } else if !host_owned(f) {
        (1, vec![handle(f.address)])
    } else {
        return None;
    };
    let mut functions = vec![f.address];
    functions.extend(vfs);
    Some(Offer {
        count,
        handles,
        functions,
    })
}

/// The device a PF is when its driver offers `offer` of `class`: the PCI ids, the
/// device id in hex as its model, healthy until [`Driver::health`] says otherwise, and
/// no family, memory, regions, traits or board information (a driver that knows more
/// sets those fields over this value).
pub fn pci_device(
    f: &PciFunction,
    device_type: DeviceType,
    driver: &'static str,
    class: &str,
    offer: Offer,
) -> FoundDevice {
    FoundDevice {
        device_type,
        vendor: f.vendor,
        product: f.device,
        model: format!("{:04x}", f.device),
        family: None,
        address: f.address,
        numa_node: f.numa_node,
        driver,
        health: Health::Ok,
        class: class.into(),
        count: offer.count,
        handles: offer.handles,
        memory: None,
        regions: Vec::new(),
        extra_traits: Vec::new(),
        functions: offer.functions,
        board_info: Vec::new(),
        partitions: None,
    }
}

/// Every driver this build has, in discovery order.
pub fn all(config: &DriverSettings) -> Vec<Box<dyn Driver>> {
    vec![
        Box::new(nvidia::Nvidia::with_library(
            config.nvml,
            config.nvml_library.clone(),
        )),
        Box::new(intel_fpga::IntelFpga),
        Box::new(xilinx::Xilinx),
        Box::new(qat::Qat),
        Box::new(nvme::Nvme),
        Box::new(nic::Nic),
        Box::new(fake::Fake::default()),
    ]
}

/// The drivers' names (declared with the `drivers` key they are accepted in).
pub use crate::config::DRIVER_NAMES as NAMES;

/// The drivers named in `names` (all when `None`); an unknown name is an error.
pub fn select(
    config: &DriverSettings,
    names: Option<&[String]>,
) -> Result<Vec<Box<dyn Driver>>, crate::config::ConfigError> {
    let all = all(config);
    match names {
        None => Ok(all),
        Some(names) => {
            for n in names {
                if !NAMES.contains(&n.as_str()) {
                    let known = NAMES.join(", ");
                    let problem = format!("unknown driver {n:?}; known drivers: {known}");
                    return Err(crate::config::ConfigError::invalid("drivers", problem));
                }
            }
            Ok(all
                .into_iter()
                .filter(|d| names.iter().any(|n| n == d.name()))
                .collect())
        }
    }
}
