//! Whether each `[[cleaning]]` rule can work for each device it matches (issue 41
//! item 3). A rule that passes [`cleaning::validate`] is well formed; whether its programs
//! are installed, and whether its placeholders mean anything for a given device, is
//! known only on the host. Found out at a release instead, the device would sit
//! reserved as `clean_failed` with a tenant's data on it, so `accel agent check` shows
//! the answer for every device (and exits non-zero on a problem) and the agent refuses
//! to start on one ([`super::startup`]).
//!
//! ```text
//! device ─▶ its first matching rule (cleaning::rule_for), its control address, its node
//!   command, verify   argv[0]: the file it names, or the first on the PATH, executable
//!                     {device}: the device has a node (a vfio-pci function has none)
//!   pci-reset         <sysfs>/bus/pci/devices/<address>/reset exists; at start-up,
//!                     the agent can open it for writing (not under a read-only /sys)
//!   fpga-default      the device has a region; its driver programs (its tool found);
//!                     glance_url or a [keystone] catalog; the image: asked of Glance
//!                     at start-up only (check asks no one)
//! ```
//!
//! Whether the agent may write is a question for the agent itself: `check` may run as
//! another user, or outside the unit's mount namespace (the shipped unit's
//! `ProtectKernelTunables=yes` mounts /sys read-only for the agent only), so only the
//! start-up check opens the reset file, for writing, without writing it.
//!
//! The resolution reads what a cleaning reads (the same rule, address, device node,
//! and the PATH the agent's `Command` searches), so a rule it passes cannot fail for
//! those reasons later. It cannot tell whether a program succeeds, whether the agent
//! may write the device (the agent runs as root, `check` perhaps not), or what a
//! device that appears after start-up needs: that one fails at its cleaning, as before.

use crate::cleaning::{self, Method, Rule};
use crate::drivers::Programming;
use crate::model::FoundDevice;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// The directories a program without a slash is looked up in: the `PATH` the agent's
/// commands run with (execvp's `/bin:/usr/bin` when there is none).
#[derive(Debug, Clone)]
pub struct SearchPath(Option<OsString>);

impl SearchPath {
    /// This process's `PATH`: the agent's at start-up, the shell's under `check`.
    pub fn current() -> SearchPath {
        SearchPath(std::env::var_os("PATH"))
    }

    /// An explicit `PATH` (tests).
    pub fn new(path: impl Into<OsString>) -> SearchPath {
        SearchPath(Some(path.into()))
    }

    fn text(&self) -> String {
        self.0.as_ref().map_or_else(
            || "/bin:/usr/bin".to_owned(),
            |p| p.to_string_lossy().into_owned(),
        )
    }

    /// The file `program` runs, or why there is none.
    pub fn runnable(&self, part: Part, program: &str) -> Result<PathBuf, Unworkable> {
        if program.contains('/') {
            let p = PathBuf::from(program);
            return match executable(&p) {
                Some(true) => Ok(p),
                Some(false) => Err(Unworkable::NotExecutable { part, program: p }),
                None => Err(Unworkable::Missing { part, program: p }),
            };
        }
        let text = self.text();
        for dir in text.split(':') {
            // An empty entry is the working directory (POSIX).
            let p = Path::new(if dir.is_empty() { "." } else { dir }).join(program);
            if executable(&p) == Some(true) {
                return Ok(p);
            }
        }
        Err(Unworkable::NotOnPath {
            part,
            program: program.to_owned(),
            path: text,
        })
    }
}

/// `None`: nothing there; else whether it is a file with an execute bit.
fn executable(p: &Path) -> Option<bool> {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(p).ok()?;
    Some(m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Which part of a rule a program belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Command,
    Verify,
    /// The vendor tool `fpga-default` programs with (`[programming]`).
    Programmer,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Command => "command",
            Part::Verify => "verify",
            Part::Programmer => "fpga-default's programming tool",
        })
    }
}

/// What the kernel has bound to a function: why it has no device node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    Driver(String),
    NoDriver,
    /// Not in sysfs at all (a `fake` driver's device).
    NoFunction,
}

impl Binding {
    fn of(sysfs_root: &Path, address: &str) -> Binding {
        let dir = sysfs_root.join("bus/pci/devices").join(address);
        if !dir.exists() {
            return Binding::NoFunction;
        }
        std::fs::read_link(dir.join("driver"))
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
            .map_or(Binding::NoDriver, Binding::Driver)
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Binding::Driver(d) if d == "vfio-pci" => {
                f.write_str("it is bound to vfio-pci, for passthrough")
            }
            Binding::Driver(d) => write!(f, "it is bound to {d}"),
            Binding::NoDriver => f.write_str("no driver is bound to it"),
            Binding::NoFunction => f.write_str("it is not a PCI function in sysfs"),
        }
    }
}

/// Why Glance's image cannot be the default design (start-up only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRefusal {
    NotFound,
    NotActive(String),
    /// Programming refuses an image it cannot verify.
    NoChecksum,
}

impl fmt::Display for ImageRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageRefusal::NotFound => f.write_str("the image service has no such image"),
            ImageRefusal::NotActive(s) => write!(f, "it is {s}, not active"),
            ImageRefusal::NoChecksum => {
                f.write_str("it has no checksum, and an unverifiable bitstream is never programmed")
            }
        }
    }
}

/// Why a rule cannot work for a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unworkable {
    #[error("{part}: {program:?} is not on the PATH ({path})")]
    NotOnPath {
        part: Part,
        program: String,
        path: String,
    },
    #[error("{part}: {} does not exist", program.display())]
    Missing { part: Part, program: PathBuf },
    #[error("{part}: {} is not an executable file", program.display())]
    NotExecutable { part: Part, program: PathBuf },
    #[error("{part}: the argument {arg:?} names {{device}}, but the function has no device node ({binding}); {{address}} always resolves")]
    NoDeviceNode {
        part: Part,
        arg: String,
        binding: Binding,
    },
    #[error("pci-reset: {} does not exist: the kernel offers no reset for this function", path.display())]
    NoResetFile { path: PathBuf },
    #[error("pci-reset: the agent cannot open {} for writing ({error}); a read-only /sys (the shipped unit's ProtectKernelTunables=yes) forbids every reset: docs/cleaning.md says what to change", path.display())]
    ResetNotWritable { path: PathBuf, error: String },
    #[error("fpga-default: the device has no FPGA region to program")]
    NoRegion,
    #[error("fpga-default: driver {driver} does not program devices")]
    CannotProgram { driver: String },
    #[error("fpga-default: neither glance_url nor a [keystone] catalog names the image service to fetch image {image} from")]
    NoImageService { image: String },
    #[error("fpga-default: image {image}: {why}")]
    Image { image: String, why: ImageRefusal },
}

/// What was not checked for a device, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unverified {
    /// `check` asks no one; the agent asks Glance at start-up.
    Image(String),
    /// `check` does not write; the agent opens the file at start-up.
    Write(PathBuf),
}

impl fmt::Display for Unverified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unverified::Image(i) => write!(
                f,
                "fpga-default: image {i} not verified: only the image service knows it, and check asks no one (the agent asks at start-up)"
            ),
            Unverified::Write(p) => write!(
                f,
                "pci-reset: whether the agent may write {} is checked by the agent at start-up",
                p.display()
            ),
        }
    }
}

/// What a resolution needs to know of the host besides the devices.
pub struct Env<'a> {
    pub sysfs_root: &'a Path,
    pub search: &'a SearchPath,
    /// Whether `glance_url` or a `[keystone]` catalog names an image service.
    pub image_service: bool,
    /// How the enabled driver of this name programs.
    pub programming: &'a dyn Fn(&str) -> Programming,
    /// Whether to open the files a method writes, for writing (the agent's own
    /// start-up check; `check` may run as someone else, elsewhere).
    pub try_writes: bool,
}

/// One device and the rule that cleans it.
#[derive(Debug, Clone)]
pub struct Resolution<'a> {
    pub device: &'a FoundDevice,
    /// The rule's index in `[[cleaning]]`.
    pub rule: usize,
    pub method: &'static str,
    /// Empty: the rule can work for the device.
    pub problems: Vec<Unworkable>,
    pub unverified: Vec<Unverified>,
}

/// Every device of `devices` a rule matches, with its first matching rule resolved.
pub fn resolve<'a>(rules: &[Rule], devices: &'a [FoundDevice], env: &Env) -> Vec<Resolution<'a>> {
    devices
        .iter()
        .filter_map(|d| {
            let k = crate::kubernetes::to_device(env.sysfs_root, d);
            let i = rules.iter().position(|r| r.selector.matches(&k))?;
            Some(resolve_one(i, &rules[i], d, env))
        })
        .collect()
}

fn resolve_one<'a>(rule: usize, r: &Rule, d: &'a FoundDevice, env: &Env) -> Resolution<'a> {
    let address = d.address.to_string();
    let node = cleaning::device_node(env.sysfs_root, &address);
    let mut problems = Vec::new();
    let mut unverified = Vec::new();
    match &r.method {
        Method::Command(argv) => problems.extend(argv_problems(
            Part::Command,
            argv,
            &address,
            node.as_deref(),
            env,
        )),
        Method::PciReset => {
            let path = env
                .sysfs_root
                .join("bus/pci/devices")
                .join(&address)
                .join("reset");
            if !path.is_file() {
                problems.push(Unworkable::NoResetFile { path });
            } else if !env.try_writes {
                unverified.push(Unverified::Write(path));
            } else if let Err(e) = std::fs::OpenOptions::new().write(true).open(&path) {
                // Opening a sysfs attribute runs nothing; only a write resets.
                problems.push(Unworkable::ResetNotWritable {
                    path,
                    error: e.to_string(),
                });
            }
        }
        Method::FpgaDefault(image) => {
            if d.regions.is_empty() {
                problems.push(Unworkable::NoRegion);
            }
            match (env.programming)(d.driver) {
                Programming::NotSupported => problems.push(Unworkable::CannotProgram {
                    driver: d.driver.to_owned(),
                }),
                Programming::Tool(t) => {
                    if let Err(e) = env.search.runnable(Part::Programmer, &t.to_string_lossy()) {
                        problems.push(e);
                    }
                }
                Programming::InProcess => {}
            }
            if env.image_service {
                unverified.push(Unverified::Image(image.clone()));
            } else {
                problems.push(Unworkable::NoImageService {
                    image: image.clone(),
                });
            }
        }
    }
    problems.extend(argv_problems(
        Part::Verify,
        &r.verify,
        &address,
        node.as_deref(),
        env,
    ));
    Resolution {
        device: d,
        rule,
        method: r.method.name(),
        problems,
        unverified,
    }
}

/// A command's problems: `{device}` without a node, and a program that cannot run.
fn argv_problems(
    part: Part,
    argv: &[String],
    address: &str,
    node: Option<&str>,
    env: &Env,
) -> Vec<Unworkable> {
    let mut out = Vec::new();
    if node.is_none() {
        if let Some(arg) = argv.iter().find(|a| a.contains("{device}")) {
            out.push(Unworkable::NoDeviceNode {
                part,
                arg: arg.clone(),
                binding: Binding::of(env.sysfs_root, address),
            });
        }
    }
    // A program named through {device} without a node is already said.
    if let Some(Ok(program)) = argv
        .first()
        .map(|p| cleaning::fill(std::slice::from_ref(p), address, node))
    {
        if let Err(e) = env.search.runnable(part, &program[0]) {
            out.push(e);
        }
    }
    out
}
