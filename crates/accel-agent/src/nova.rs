//! Coexistence with Nova's PCI passthrough (seed 000): Nova claims the devices its
//! `[pci] device_spec` (formerly `passthrough_whitelist`) entries match, and accel must
//! never claim the same device. The agent reads Nova's configuration file, drops every
//! device one of whose functions a rule matches, and logs which device and which rule;
//! `accel agent check` lists them all.
//!
//! Entries are JSON objects, or JSON lists of objects, one per `device_spec =` line.
//! Matching follows Nova's `PciDeviceSpec`:
//! - `vendor_id`, `product_id`: hex, or `*`;
//! - `address` as a string `[[[[domain]:]bus]:][slot][.[function]]`, each field hex or
//!   `*`, a missing field matching anything; an address naming exactly one PF also
//!   matches that PF's VFs;
//! - `address` as an object of `domain`, `bus`, `slot`, `function` regular expressions;
//! - `devname`: the network interface of the function, or of a VF's PF.
//!
//! Other keys (`physical_network`, `trusted`, `remote_managed`, ...) are tags and do not
//! restrict matching.

use crate::model::FoundDevice;
use crate::pci::{PciAddress, PciBus, PciFunction};
use regex::Regex;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One `device_spec` entry.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The entry as written, for messages.
    pub text: String,
    vendor: Option<u16>,
    product: Option<u16>,
    address: Option<AddressSpec>,
    devname: Option<String>,
}

#[derive(Debug, Clone)]
enum AddressSpec {
    /// Fields of the string form; `None` matches anything.
    Glob {
        domain: Option<u32>,
        bus: Option<u32>,
        slot: Option<u32>,
        function: Option<u32>,
    },
    Regex {
        domain: Regex,
        bus: Regex,
        slot: Regex,
        function: Regex,
    },
}

/// A device accel would claim that a Nova rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The device's control-path address.
    pub device: PciAddress,
    /// The function the rule matched.
    pub function: PciAddress,
    pub rule: String,
}

/// Nova's `[pci]` rules.
#[derive(Debug, Clone, Default)]
pub struct NovaPci {
    pub rules: Vec<Rule>,
}

/// Why Nova's configuration cannot be read: the agent stops at start-up rather than
/// offer devices Nova may also hand out.
#[derive(Debug, thiserror::Error)]
pub enum NovaError {
    #[error("reading Nova's configuration {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    In {
        path: PathBuf,
        source: Box<NovaError>,
    },
    #[error("[pci] device_spec {value:?} is not JSON: {source}")]
    NotJson {
        value: String,
        source: serde_json::Error,
    },
    /// A `device_spec` entry Nova would not accept either.
    #[error("{0}")]
    Spec(String),
}

fn spec(problem: String) -> NovaError {
    NovaError::Spec(problem)
}

fn hex_field(v: &Value, key: &str) -> Result<Option<u16>, NovaError> {
    match v.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if s == "*" => Ok(None),
        Some(Value::String(s)) => u16::from_str_radix(s.trim_start_matches("0x"), 16)
            .map(Some)
            .map_err(|_| spec(format!("{key} {s:?} is not a hex id"))),
        Some(other) => Err(spec(format!("{key} must be a string, not {other}"))),
    }
}

fn glob_part(s: &str, max: u32) -> Result<Option<u32>, NovaError> {
    let s = s.trim();
    if s.is_empty() || s == "*" {
        return Ok(None);
    }
    match u32::from_str_radix(s, 16) {
        Ok(v) if v <= max => Ok(Some(v)),
        _ => Err(spec(format!("address field {s:?} is not hex or *"))),
    }
}

fn parse_glob(s: &str) -> Result<AddressSpec, NovaError> {
    let (left, function) = match s.split_once('.') {
        Some((l, f)) => (l, glob_part(f, 7)?),
        None => (s, None),
    };
    let mut parts: Vec<&str> = left.split(':').collect();
    if parts.len() > 3 {
        return Err(spec(format!("address {s:?} has too many fields")));
    }
    let slot = glob_part(parts.pop().unwrap_or(""), 0x1f)?;
    let bus = glob_part(parts.pop().unwrap_or(""), 0xff)?;
    let domain = glob_part(parts.pop().unwrap_or(""), 0xffff)?;
    Ok(AddressSpec::Glob {
        domain,
        bus,
        slot,
        function,
    })
}

fn parse_regex_map(v: &Value) -> Result<AddressSpec, NovaError> {
    let re = |key: &str| -> Result<Regex, NovaError> {
        let pat = match v.get(key) {
            None => ".*".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(spec(format!("address {key} must be a string, not {other}")))
            }
        };
        Regex::new(&format!("^(?:{pat})$")).map_err(|e| spec(format!("address {key}: {e}")))
    };
    Ok(AddressSpec::Regex {
        domain: re("domain")?,
        bus: re("bus")?,
        slot: re("slot")?,
        function: re("function")?,
    })
}

impl Rule {
    pub fn parse(v: &Value) -> Result<Rule, NovaError> {
        if !v.is_object() {
            return Err(spec(format!(
                "a device_spec entry must be a JSON object: {v}"
            )));
        }
        let address = match v.get("address") {
            None => None,
            Some(Value::String(s)) => Some(parse_glob(s)?),
            Some(m @ Value::Object(_)) => Some(parse_regex_map(m)?),
            Some(other) => {
                return Err(spec(format!(
                    "address must be a string or an object: {other}"
                )))
            }
        };
        Ok(Rule {
            text: v.to_string(),
            vendor: hex_field(v, "vendor_id")?,
            product: hex_field(v, "product_id")?,
            address,
            devname: v.get("devname").and_then(Value::as_str).map(str::to_owned),
        })
    }

    fn address_matches(&self, a: &PciAddress) -> bool {
        match &self.address {
            None => true,
            Some(AddressSpec::Glob {
                domain,
                bus,
                slot,
                function,
            }) => {
                domain.is_none_or(|d| d == a.domain)
                    && bus.is_none_or(|b| b == u32::from(a.bus))
                    && slot.is_none_or(|s| s == u32::from(a.slot))
                    && function.is_none_or(|f| f == u32::from(a.function))
            }
            Some(AddressSpec::Regex {
                domain,
                bus,
                slot,
                function,
            }) => {
                domain.is_match(&format!("{:04x}", a.domain))
                    && bus.is_match(&format!("{:02x}", a.bus))
                    && slot.is_match(&format!("{:02x}", a.slot))
                    && function.is_match(&format!("{:x}", a.function))
            }
        }
    }

    /// The PF this rule names exactly (string form with every field given).
    fn exact_address(&self) -> Option<PciAddress> {
        match self.address {
            Some(AddressSpec::Glob {
                domain: Some(d),
                bus: Some(b),
                slot: Some(s),
                function: Some(f),
            }) => Some(PciAddress {
                domain: d,
                bus: b as u8,
                slot: s as u8,
                function: f as u8,
            }),
            _ => None,
        }
    }

    /// Whether the rule matches `f` (ids, address, devname).
    pub fn matches(&self, bus: &PciBus, f: &PciFunction) -> bool {
        if self.vendor.is_some_and(|v| v != f.vendor) || self.product.is_some_and(|p| p != f.device)
        {
            return false;
        }
        let address_ok = self.address_matches(&f.address)
            || (f.physfn.is_some() && f.physfn == self.exact_address());
        if !address_ok {
            return false;
        }
        match &self.devname {
            None => true,
            Some(name) => {
                let has = |g: &PciFunction| g.path.join("net").join(name).exists();
                has(f) || f.physfn.and_then(|p| bus.get(&p)).is_some_and(has)
            }
        }
    }
}

impl NovaPci {
    /// Parses the `[pci]` section of a nova.conf text.
    pub fn parse(conf: &str) -> Result<NovaPci, NovaError> {
        let mut values: Vec<String> = Vec::new();
        let mut section = String::new();
        let mut current: Option<usize> = None;
        for line in conf.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('#') || trimmed.starts_with(';') {
                continue;
            }
            if trimmed.starts_with('[') && trimmed.ends_with(']') {
                section = trimmed[1..trimmed.len() - 1].trim().to_ascii_lowercase();
                current = None;
                continue;
            }
            if trimmed.is_empty() {
                current = None;
                continue;
            }
            // oslo.config continues a value on indented lines.
            if line.starts_with(char::is_whitespace) {
                if let Some(i) = current {
                    values[i].push(' ');
                    values[i].push_str(trimmed);
                }
                continue;
            }
            current = None;
            if section != "pci" {
                continue;
            }
            let Some((key, value)) = trimmed.split_once('=').or_else(|| trimmed.split_once(':'))
            else {
                continue;
            };
            if matches!(key.trim(), "device_spec" | "passthrough_whitelist") {
                values.push(value.trim().to_owned());
                current = Some(values.len() - 1);
            }
        }
        let mut rules = Vec::new();
        for v in values {
            if v.is_empty() {
                continue;
            }
            let json: Value = serde_json::from_str(&v).map_err(|source| NovaError::NotJson {
                value: v.clone(),
                source,
            })?;
            match json {
                Value::Array(items) => {
                    for item in &items {
                        rules.push(Rule::parse(item)?);
                    }
                }
                other => rules.push(Rule::parse(&other)?),
            }
        }
        Ok(NovaPci { rules })
    }

    pub fn load(path: &Path) -> Result<NovaPci, NovaError> {
        let text = std::fs::read_to_string(path).map_err(|source| NovaError::Read {
            path: path.to_owned(),
            source,
        })?;
        NovaPci::parse(&text).map_err(|e| NovaError::In {
            path: path.to_owned(),
            source: Box::new(e),
        })
    }

    /// Every (function, rule) of `device` that Nova claims.
    pub fn conflicts(&self, bus: &PciBus, device: &FoundDevice) -> Vec<Conflict> {
        let mut out = Vec::new();
        for a in &device.functions {
            let Some(f) = bus.get(a) else {
                continue;
            };
            for r in &self.rules {
                if r.matches(bus, f) {
                    out.push(Conflict {
                        device: device.address,
                        function: *a,
                        rule: r.text.clone(),
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_nova_accepts() {
        let conf = r#"
[DEFAULT]
device_spec = {"vendor_id": "ffff"}
[pci]
# a comment
device_spec = {"vendor_id": "10de", "product_id": "*"}
passthrough_whitelist = [{"address": "*:3b:00.*"},
    {"address": {"domain": ".*", "bus": "5e", "slot": "00", "function": "[1-7]"}}]
device_spec = {"devname": "eth3", "physical_network": "physnet1"}
"#;
        let n = NovaPci::parse(conf).unwrap();
        assert_eq!(n.rules.len(), 4);
        assert_eq!(n.rules[0].vendor, Some(0x10de));
        assert_eq!(n.rules[0].product, None);
        let a: PciAddress = "0000:3b:00.4".parse().unwrap();
        assert!(n.rules[1].address_matches(&a));
        assert!(!n.rules[1].address_matches(&"0000:3c:00.4".parse().unwrap()));
        assert!(n.rules[2].address_matches(&"0000:5e:00.3".parse().unwrap()));
        assert!(!n.rules[2].address_matches(&"0000:5e:00.0".parse().unwrap()));
        assert_eq!(n.rules[3].devname.as_deref(), Some("eth3"));
        assert!(NovaPci::parse("[pci]\ndevice_spec = {not json").is_err());
        assert!(NovaPci::parse("[pci]\ndevice_spec = {\"address\": \"0000:zz:00.0\"}").is_err());
    }
}
