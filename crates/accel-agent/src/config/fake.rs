//! `[[fake.devices]]`: devices without hardware, for demos, tests and the fake
//! driver. Every entry is checked at start-up, naming its key, because a skipped fake
//! device would read as a removed one.

use super::ConfigError;
use serde::Deserialize;

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

/// The most accelerators a fake device may have: its handles take one PCI function
/// each, at most 255 after its control function on its own bus.
pub const MAX_FAKE_COUNT: i64 = 255;
/// The most fake devices (each takes a bus of PCI domain `00fa`).
pub const MAX_FAKE_DEVICES: usize = 256;

/// Every `[[fake.devices]]` entry is one the fake driver can build; the error names
/// the key (`fake.devices[N].<field>`).
pub fn validate_fake(devices: &[FakeDevice]) -> Result<(), ConfigError> {
    if devices.len() > MAX_FAKE_DEVICES {
        return Err(ConfigError::invalid(
            "fake.devices",
            format!("{} entries; at most {MAX_FAKE_DEVICES}", devices.len()),
        ));
    }
    let hex16 = |s: &str| {
        let t = s.trim_start_matches("0x");
        !t.is_empty() && t.len() <= 4 && u16::from_str_radix(t, 16).is_ok()
    };
    for (i, d) in devices.iter().enumerate() {
        let bad = |field: &str, problem: String| {
            Err(ConfigError::invalid(
                format!("fake.devices[{i}].{field}"),
                problem,
            ))
        };
        if accel_core::accelerator::DeviceType::parse(&d.device_type.to_ascii_uppercase()).is_none()
        {
            return bad(
                "type",
                format!(
                    "unknown device type {:?}; one of GPU, FPGA, QAT, NIC, SSD, AICHIP",
                    d.device_type
                ),
            );
        }
        if !(1..=MAX_FAKE_COUNT).contains(&d.count) {
            return bad(
                "count",
                format!("{} is out of range 1..={MAX_FAKE_COUNT}", d.count),
            );
        }
        if !hex16(&d.vendor) {
            return bad(
                "vendor",
                format!(
                    "{:?} is not a 16-bit hex vendor id (e.g. \"10de\")",
                    d.vendor
                ),
            );
        }
        if !d.product.is_empty() && !hex16(&d.product) {
            return bad(
                "product",
                format!("{:?} is not a 16-bit hex product id", d.product),
            );
        }
        if !(1..=8).contains(&d.regions) {
            return bad("regions", format!("{} is out of range 1..=8", d.regions));
        }
        if d.memory_mib.is_some_and(|m| m < 1) {
            return bad("memory_mib", "must be at least 1".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(text: &str) -> Vec<FakeDevice> {
        #[derive(Deserialize)]
        struct F {
            fake: FakeConfig,
        }
        toml::from_str::<F>(text).unwrap().fake.devices
    }

    #[test]
    fn every_bad_fake_device_names_its_key() {
        let ok = "[[fake.devices]]\ntype = \"gpu\"\nvendor = \"0x10de\"\nproduct = \"20b0\"\n";
        assert!(validate_fake(&fake(ok)).is_ok());
        for (text, key) in [
            ("type = \"TPU\"", "fake.devices[1].type"),
            ("type = \"GPU\"\ncount = 0", "fake.devices[1].count"),
            ("type = \"GPU\"\ncount = 256", "fake.devices[1].count"),
            ("type = \"GPU\"\nvendor = \"\"", "fake.devices[1].vendor"),
            (
                "type = \"GPU\"\nvendor = \"g00d\"",
                "fake.devices[1].vendor",
            ),
            (
                "type = \"GPU\"\nproduct = \"123456\"",
                "fake.devices[1].product",
            ),
            ("type = \"FPGA\"\nregions = 0", "fake.devices[1].regions"),
        ] {
            let devices = fake(&format!("{ok}[[fake.devices]]\n{text}\n"));
            let e = validate_fake(&devices).unwrap_err().to_string();
            assert!(e.starts_with(key), "{text}: {e}");
        }
    }
}
