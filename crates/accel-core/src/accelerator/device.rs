//! The hardware model Cyborg keeps per compute node: devices, their control-path id,
//! deployables (one Placement provider each), attributes and attach handles.
//!
//! [`ReportedDevice`] is what an agent's driver discovers (upstream's `DriverDevice`);
//! a host's report is the full list, and the store replaces that host's records with it.

use std::fmt;

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(s: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownValue;

            fn from_str(s: &str) -> Result<$name, UnknownValue> {
                $name::parse(s).ok_or_else(|| UnknownValue {
                    kind: stringify!($name),
                    value: s.to_owned(),
                })
            }
        }
    };
}

/// A database or wire text that names no variant of a device enum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownValue {
    /// The enum's name, such as `DeviceType`.
    pub kind: &'static str,
    pub value: String,
}

impl fmt::Display for UnknownValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} {:?}", self.kind, self.value)
    }
}

impl std::error::Error for UnknownValue {}

wire_enum!(
    /// `devices.type` (upstream's database enum).
    DeviceType { Gpu => "GPU", Fpga => "FPGA", AiChip => "AICHIP", Qat => "QAT", Nic => "NIC", Ssd => "SSD" }
);

wire_enum!(
    /// `devices.status`: `maintaining` is what upstream's disable action sets.
    DeviceStatus { Enabled => "enabled", Maintaining => "maintaining" }
);

wire_enum!(
    /// `devices.health` (accel's): `vanished` is a device no longer reported but kept,
    /// unallocatable, while allocations or ARQs still hold it.
    DeviceHealth { Ok => "ok", Unhealthy => "unhealthy", Vanished => "vanished" }
);

wire_enum!(
    /// `attach_handles.attach_type`. Nova attaches only `PCI`; `TEST_PCI` is the fake
    /// driver's.
    AttachType { Pci => "PCI", Mdev => "MDEV", TestPci => "TEST_PCI" }
);

/// One attach handle as a driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedHandle {
    pub attach_type: AttachType,
    /// A JSON object of strings (the BDF, sorted keys upstream), kept as text.
    pub attach_info: String,
    pub in_use: bool,
}

/// One deployable as a driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedDeployable {
    /// `<host>_<BDF>` or `<host>_FakeDevice`; also the Placement provider's name.
    pub name: String,
    /// The deployable of the same device this one sits under (an FPGA region under its
    /// card); its provider is then a child of the parent's provider.
    pub parent: Option<String>,
    pub num_accelerators: i64,
    pub driver_name: Option<String>,
    /// `rc` names the resource class (total = `num_accelerators`); `inventory:<CLASS>`
    /// adds another inventory with the value as total (device memory); `trait*` keys
    /// name traits.
    pub attributes: Vec<(String, String)>,
    pub attach_handles: Vec<ReportedHandle>,
}

impl ReportedDeployable {
    /// The resource class from the `rc` attribute.
    pub fn resource_class(&self) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == "rc")
            .map(|(_, v)| v.as_str())
    }

    /// Trait names from `trait*` attributes, in report order.
    pub fn traits(&self) -> impl Iterator<Item = &str> {
        self.attributes
            .iter()
            .filter(|(k, _)| k.starts_with("trait"))
            .map(|(_, v)| v.as_str())
    }
}

/// One device as a driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedDevice {
    pub device_type: DeviceType,
    pub vendor: String,
    pub model: String,
    pub std_board_info: Option<String>,
    pub vendor_board_info: Option<String>,
    /// Control-path id type (`PCI`) and info (the PF's BDF as JSON text), which
    /// identifies the device across reports.
    pub cpid_type: String,
    pub cpid_info: String,
    /// False when the agent finds the device unhealthy: its inventory is then reserved.
    pub healthy: bool,
    /// Why the agent finds it unhealthy, in its words (`None`: no reason given).
    pub health_reason: Option<String>,
    pub deployables: Vec<ReportedDeployable>,
    /// How a GPU can be partitioned (MIG profiles, vGPU types): the server then keeps
    /// one ledger for it (`crate::partition`) and models each way of taking it as a
    /// provider under the GPU's. `None`: handed out whole, as before.
    pub partitions: Option<crate::partition::Geometry>,
}

/// What Cyborg's fake driver discovers on `host`: one FPGA device `<host>_FakeDevice`
/// with 16 `TEST_PCI` handles (functions 1..=16 on bus `0c`), resource class `FPGA`
/// and trait `CUSTOM_FAKE_DEVICE` (`cyborg/accelerator/drivers/fake.py`).
pub fn fake_device(host: &str) -> ReportedDevice {
    const NUM: i64 = 16;
    // Upstream replaces anything but [A-Za-z0-9_-] so the name is a valid provider name.
    let name: String = format!("{host}_FakeDevice")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let attach_handles = (1..=NUM)
        .map(|fn_no| ReportedHandle {
            attach_type: AttachType::TestPci,
            attach_info: format!(
                "{{\"domain\": \"0000\", \"bus\": \"0c\", \"device\": \"{}\", \"function\": \"{}\"}}",
                fn_no / 8,
                fn_no % 8
            ),
            in_use: false,
        })
        .collect();
    ReportedDevice {
        device_type: DeviceType::Fpga,
        vendor: "0xABCD".into(),
        model: "miss model info".into(),
        std_board_info: Some("{\"device_id\": \"0xabcd\", \"class\": \"Fake class\"}".into()),
        vendor_board_info: Some("fake_vendor_info".into()),
        cpid_type: "PCI".into(),
        cpid_info: "{\"domain\":\"0000\",\"bus\":\"0c\",\"device\":\"00\",\"function\":\"0\"}"
            .into(),
        healthy: true,
        health_reason: None,
        partitions: None,
        deployables: vec![ReportedDeployable {
            name,
            parent: None,
            num_accelerators: NUM,
            driver_name: Some("fake".into()),
            attributes: vec![
                ("traits1".into(), "CUSTOM_FAKE_DEVICE".into()),
                ("rc".into(), "FPGA".into()),
            ],
            attach_handles,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_enums_parse_their_own_text_only() {
        for t in DeviceType::ALL {
            assert_eq!(t.as_str().parse::<DeviceType>(), Ok(*t));
        }
        assert_eq!("maintaining".parse(), Ok(DeviceStatus::Maintaining));
        assert_eq!("vanished".parse(), Ok(DeviceHealth::Vanished));
        let bad = "gpu".parse::<DeviceType>().unwrap_err();
        assert_eq!(bad.to_string(), "unknown DeviceType \"gpu\"");
    }

    #[test]
    fn fake_device_matches_upstream_fake_driver() {
        let d = fake_device("compute.1");
        let dep = &d.deployables[0];
        assert_eq!(dep.name, "compute_1_FakeDevice");
        assert_eq!(dep.attach_handles.len(), 16);
        assert_eq!(dep.resource_class(), Some("FPGA"));
        assert_eq!(dep.traits().collect::<Vec<_>>(), ["CUSTOM_FAKE_DEVICE"]);
        assert!(dep.attach_handles[15]
            .attach_info
            .contains("\"device\": \"2\", \"function\": \"0\""));
        assert_eq!(DeviceType::parse("AICHIP"), Some(DeviceType::AiChip));
        assert_eq!(AttachType::TestPci.as_str(), "TEST_PCI");
    }
}

/// A region, function or interface id as 32 upper-case hex digits (dashes and a `0x`
/// prefix dropped): the form that is valid inside a trait name. `None` when `id` is
/// not 128 bits of hex.
pub fn id_part(id: &str) -> Option<String> {
    let hex: String = id
        .trim()
        .trim_start_matches("0x")
        .chars()
        .filter(|c| *c != '-')
        .collect();
    (hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_uppercase())
}

/// Prefix of the trait a programmed FPGA region carries for its function:
/// `CUSTOM_FPGA_FUNCTION_<VENDOR>_<ID>` (seed 003), or Cyborg's
/// `CUSTOM_FPGA_FUNCTION_ID_<VENDOR>_<ID>`.
pub const FUNCTION_TRAIT_PREFIX: &str = "CUSTOM_FPGA_FUNCTION_";

/// Whether one of `traits` says the region already carries `function_id`.
pub fn carries_function<'a>(traits: impl IntoIterator<Item = &'a str>, function_id: &str) -> bool {
    let Some(id) = id_part(function_id) else {
        return false;
    };
    traits.into_iter().any(|t| {
        t.strip_prefix(FUNCTION_TRAIT_PREFIX)
            .and_then(|rest| rest.strip_suffix(id.as_str()))
            .is_some_and(|vendor| vendor.ends_with('_') && vendor.len() > 1)
    })
}

#[cfg(test)]
mod function_tests {
    use super::*;

    #[test]
    fn ids_and_function_traits() {
        let f = "9926ab6d-6c92-5a68-aabc-a7d84c545738";
        assert_eq!(
            id_part(f).as_deref(),
            Some("9926AB6D6C925A68AABCA7D84C545738")
        );
        assert_eq!(id_part("0x1234"), None);
        assert!(carries_function(
            [
                "CUSTOM_OWNER_ACCEL",
                "CUSTOM_FPGA_FUNCTION_INTEL_9926AB6D6C925A68AABCA7D84C545738"
            ],
            f
        ));
        assert!(carries_function(
            ["CUSTOM_FPGA_FUNCTION_ID_INTEL_9926AB6D6C925A68AABCA7D84C545738"],
            f
        ));
        assert!(!carries_function(
            ["CUSTOM_FPGA_REGION_INTEL_9926AB6D6C925A68AABCA7D84C545738"],
            f
        ));
        assert!(!carries_function(
            ["CUSTOM_FPGA_FUNCTION_9926AB6D6C925A68AABCA7D84C545738"],
            f
        ));
        assert!(!carries_function(["CUSTOM_FPGA_FUNCTION_INTEL_X"], "nope"));
    }
}
