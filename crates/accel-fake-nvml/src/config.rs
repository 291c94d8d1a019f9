//! The fake's configuration file: one statement per line, `#` starts a note.
//!
//! ```text
//! # GPUs in NVML's index order
//! gpu bus=0000:3b:00.0 model=h100 mig=on
//! gpu bus=0000:5e:00.0 model=h200 mig=off uuid=GPU-6a1c...
//! gpu bus=0000:86:00.0 model=h100 mig=on lost          # every call on it: GPU_IS_LOST
//! # failure injection: the call fails with `code` once, `times=N`, or `always`,
//! # optionally only for one GPU
//! fail call=nvmlDeviceCreateGpuInstanceWithPlacement code=INSUFFICIENT_RESOURCES once
//! fail call=nvmlGpuInstanceCreateComputeInstance code=23 times=2 gpu=0000:3b:00.0
//! # where the layout is kept between loads, and the boot id that must match for it
//! # to be kept (a new boot id is a reboot: MIG mode stays, instances are gone)
//! state_file /var/tmp/fake-nvml.state
//! boot_id_file /var/tmp/boot_id
//! ```
//!
//! Models: `h100` (H100 80GB HBM3, `10de:2330`), `h200` (H200 141GB, `10de:2335`),
//! both with the MIG geometry of `captures/`, and `l4` (an L4, `10de:27b8`, no MIG).

use std::fmt;
use std::path::PathBuf;

/// A PCI address as NVML prints it (`00000000:3B:00.0`) or sysfs does (`0000:3b:00.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BusId {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl BusId {
    pub fn parse(s: &str) -> Option<BusId> {
        let s = s.trim().trim_end_matches('\0');
        let (domain, rest) = s.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (device, function) = rest.split_once('.')?;
        Some(BusId {
            domain: u32::from_str_radix(domain, 16).ok()?,
            bus: u8::from_str_radix(bus, 16).ok()?,
            device: u8::from_str_radix(device, 16).ok()?,
            function: u8::from_str_radix(function, 16).ok()?,
        })
    }

    /// `0000:3b:00.0`, as sysfs names it.
    pub fn sysfs(&self) -> String {
        format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// NVML's `NVML_DEVICE_PCI_BUS_ID_FMT`: `%08X:%02X:%02X.0`.
impl fmt::Display for BusId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08X}:{:02X}:{:02X}.0",
            self.domain, self.bus, self.device
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuConfig {
    pub bus: BusId,
    pub model: String,
    pub mig: bool,
    pub uuid: Option<String>,
    pub lost: bool,
}

/// How often an injected failure fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Times {
    Always,
    /// This many more times (`once` is 1).
    Left(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The exported symbol, `nvmlDeviceCreateGpuInstanceWithPlacement`.
    pub call: String,
    pub code: u32,
    pub times: Times,
    /// Only calls on this GPU (or its instances); any GPU when `None`.
    pub gpu: Option<BusId>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    pub gpus: Vec<GpuConfig>,
    pub failures: Vec<Failure>,
    pub state_file: Option<PathBuf>,
    pub boot_id_file: Option<PathBuf>,
}

impl Config {
    /// Parses the text of a configuration file; an error names the line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let mut c = Config::default();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |e: String| format!("line {}: {e}: {raw:?}", n + 1);
            let mut words = line.split_whitespace();
            let verb = words.next().unwrap_or_default();
            let rest: Vec<&str> = words.collect();
            match verb {
                "gpu" => c.gpus.push(gpu(&rest).map_err(at)?),
                "fail" => c.failures.push(failure(&rest).map_err(at)?),
                "state_file" | "boot_id_file" => {
                    let [path] = rest.as_slice() else {
                        return Err(at(format!("{verb} takes one path")));
                    };
                    let p = Some(PathBuf::from(path));
                    if verb == "state_file" {
                        c.state_file = p;
                    } else {
                        c.boot_id_file = p;
                    }
                }
                other => return Err(at(format!("unknown statement {other:?}"))),
            }
        }
        for (i, g) in c.gpus.iter().enumerate() {
            if c.gpus[..i].iter().any(|o| o.bus == g.bus) {
                return Err(format!("GPU {} is configured twice", g.bus.sysfs()));
            }
        }
        Ok(c)
    }
}

/// `key=value` and bare `flag` words.
fn pairs<'a>(words: &[&'a str]) -> Vec<(&'a str, Option<&'a str>)> {
    words
        .iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (*w, None),
        })
        .collect()
}

fn gpu(words: &[&str]) -> Result<GpuConfig, String> {
    let (mut bus, mut model, mut mig, mut uuid, mut lost) = (None, None, false, None, false);
    for (k, v) in pairs(words) {
        match (k, v) {
            ("bus", Some(v)) => {
                bus = Some(BusId::parse(v).ok_or_else(|| format!("bus {v:?} is no PCI address"))?)
            }
            ("model", Some(v)) => model = Some(v.to_owned()),
            ("mig", Some("on" | "1" | "true")) => mig = true,
            ("mig", Some("off" | "0" | "false")) => mig = false,
            ("uuid", Some(v)) => uuid = Some(v.to_owned()),
            ("lost", None) | ("lost", Some("true")) => lost = true,
            _ => return Err(format!("unknown gpu setting {k:?}")),
        }
    }
    Ok(GpuConfig {
        bus: bus.ok_or("a gpu needs bus=")?,
        model: model.ok_or("a gpu needs model=")?,
        mig,
        uuid,
        lost,
    })
}

fn failure(words: &[&str]) -> Result<Failure, String> {
    let (mut call, mut code, mut times, mut gpu) = (None, None, Times::Left(1), None);
    for (k, v) in pairs(words) {
        match (k, v) {
            ("call", Some(v)) => call = Some(v.to_owned()),
            ("code", Some(v)) => {
                code = Some(
                    crate::code::parse(v).ok_or_else(|| format!("code {v:?} is no NVML code"))?,
                )
            }
            ("once", None) => times = Times::Left(1),
            ("always", None) => times = Times::Always,
            ("times", Some(v)) => {
                times = Times::Left(v.parse().map_err(|_| format!("times {v:?} is no count"))?)
            }
            ("gpu", Some(v)) => {
                gpu = Some(BusId::parse(v).ok_or_else(|| format!("gpu {v:?} is no PCI address"))?)
            }
            _ => return Err(format!("unknown fail setting {k:?}")),
        }
    }
    Ok(Failure {
        call: call.ok_or("a failure needs call=")?,
        code: code.ok_or("a failure needs code=")?,
        times,
        gpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let text = "# GPUs\n\
            gpu bus=0000:3b:00.0 model=h100 mig=on\n\
            gpu bus=00000000:5E:00.0 model=h200 mig=off uuid=GPU-1\n\
            gpu bus=0000:86:00.0 model=h100 mig=on lost  # gone\n\
            fail call=nvmlDeviceCreateGpuInstanceWithPlacement code=INSUFFICIENT_RESOURCES once\n\
            fail call=nvmlGpuInstanceCreateComputeInstance code=23 times=2 gpu=0000:3b:00.0\n\
            fail call=nvmlDeviceGetName code=NVML_ERROR_GPU_IS_LOST always\n\
            state_file /tmp/s\nboot_id_file /tmp/b\n";
        let c = Config::parse(text).unwrap();
        assert_eq!(c.gpus.len(), 3);
        assert_eq!(c.gpus[1].bus.sysfs(), "0000:5e:00.0");
        assert_eq!(c.gpus[1].bus.to_string(), "00000000:5E:00.0");
        assert!(c.gpus[0].mig && !c.gpus[1].mig && c.gpus[2].lost);
        assert_eq!(c.failures[0].code, 23);
        assert_eq!(c.failures[1].times, Times::Left(2));
        assert_eq!(
            c.failures[2],
            Failure {
                call: "nvmlDeviceGetName".into(),
                code: 15,
                times: Times::Always,
                gpu: None,
            }
        );
        assert_eq!(c.state_file, Some("/tmp/s".into()));
    }

    #[test]
    fn mistakes_name_their_line() {
        let e = Config::parse("gpu model=h100\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("bus="), "{e}");
        let e = Config::parse("\nfail call=x code=NOPE\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("NOPE"), "{e}");
        let e = Config::parse("gpu bus=0000:3b:00.0 model=h100\ngpu bus=0:3b:0.0 model=h200\n")
            .unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }
}
