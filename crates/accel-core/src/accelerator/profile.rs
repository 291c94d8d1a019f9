//! Device profiles: a name and an ordered list of request groups.
//!
//! A group is an ordered map of `resources:<CLASS>` → amount, `trait:<NAME>` →
//! `required`|`forbidden` and `accel:<key>` → value, the syntax of the device-profiles
//! spec (seed 004). Group order is significant to Nova: group index N becomes request
//! group `device_profile_N` and each ARQ's `device_profile_group_id`, so nothing here
//! reorders groups or keys.
//!
//! Validation follows upstream's `_validate_post_request` and its messages, with the
//! seed's translation (lower case to upper case, `-` to `_` in class and trait names)
//! and these additions, each a 400 where upstream answers 500 or accepts bad data:
//! amounts must be positive integers; names at most 255 characters; a group must be
//! non-empty and a key may appear once after normalisation; the known `accel:` keys
//! (`bitstream_id`, `bitstream_name`, `function_id`, `function_name`,
//! `attach_target`) are type-checked as the spec's table says; standard os-traits are
//! allowed besides `CUSTOM_` ones (upstream refuses them, see docs/cyborg-compat.md).

use crate::names::{is_symbol, CUSTOM_PREFIX, MAX_NAME_LEN};
use crate::standard;

/// Resource classes Cyborg accepts besides `CUSTOM_*` (`constants.SUPPORT_RESOURCES`,
/// less the custom ones). `GPU` is not a Placement class but upstream allows it.
const CYBORG_CLASSES: &[&str] = &["FPGA", "GPU", "VGPU", "PGPU"];

/// Why a profile or group was refused; `Display` is upstream's message where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("DeviceProfile name needed.")]
    NameNeeded,
    #[error("Device profile name must be of the form ^[a-zA-Z0-9-_]+$")]
    BadName,
    #[error("Device profile name must be at most {MAX_NAME_LEN} characters long.")]
    NameTooLong,
    #[error("DeviceProfile needs groups field.")]
    GroupsExpected,
    #[error("Device profile groups must be JSON objects.")]
    GroupNotObject,
    #[error("Device profile group {0} is empty.")]
    EmptyGroup(usize),
    #[error("Device profile group keys must be of the form ^(resources:|trait:|accel:)")]
    BadKey,
    #[error("Device profile group values must be strings or integers, not {0} (key {1}).")]
    BadValueType(&'static str, String),
    #[error("Unsupported trait name format {0}, should start with CUSTOM_")]
    BadTrait(String),
    #[error("Unsupported trait value {0}, the value must be one among ['required', 'forbidden']")]
    BadTraitValue(String),
    #[error("Unsupported resource class {0}")]
    BadResourceClass(String),
    #[error("Resources number {0} is invalid")]
    BadAmount(String),
    #[error("Duplicate key {0} in device profile group {1}.")]
    DuplicateKey(String, usize),
    #[error("Invalid value {1} for {0}: {2}")]
    BadAccelValue(String, String, &'static str),
}

/// One request group, normalised; entries keep the order they were given in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Group(Vec<(String, String)>);

impl Group {
    /// A group read back from storage (already validated when it was created).
    pub fn from_stored(entries: Vec<(String, String)>) -> Self {
        Group(entries)
    }

    pub fn entries(&self) -> &[(String, String)] {
        &self.0
    }

    pub fn into_entries(self) -> Vec<(String, String)> {
        self.0
    }

    /// The value of `key` (already normalised, e.g. `accel:bitstream_id`), if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// How many ARQs this group asks for: the sum of its `resources:` amounts, doubled
    /// for `FPGA` when `trait:CUSTOM_FPGA_XILINX` is required (the management and user
    /// functions are attached together), as upstream's ARQ create does.
    pub fn accelerator_count(&self) -> u64 {
        let amount = |v: &str| v.trim().parse::<u64>().unwrap_or(0);
        if self.get("trait:CUSTOM_FPGA_XILINX") == Some("required") {
            return 2 * self.get("resources:FPGA").map_or(0, amount);
        }
        self.0
            .iter()
            .filter(|(k, _)| k.starts_with("resources"))
            .map(|(_, v)| amount(v))
            .sum()
    }

    /// Parses one wire group (keys and values already strings, in order).
    pub fn parse(index: usize, raw: Vec<(String, String)>) -> Result<Group, ProfileError> {
        if raw.is_empty() {
            return Err(ProfileError::EmptyGroup(index));
        }
        let mut out: Vec<(String, String)> = Vec::with_capacity(raw.len());
        for (key, value) in raw {
            let (key, value) = parse_entry(&key, value)?;
            if out.iter().any(|(k, _)| *k == key) {
                return Err(ProfileError::DuplicateKey(key, index));
            }
            out.push((key, value));
        }
        Ok(Group(out))
    }
}

/// Class and trait names as the seed allows them: lower case becomes upper case and
/// hyphens become underscores; surrounding spaces go, as upstream strips them.
fn translate(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| {
            if c == '-' {
                '_'
            } else {
                c.to_ascii_uppercase()
            }
        })
        .collect()
}

fn parse_entry(key: &str, value: String) -> Result<(String, String), ProfileError> {
    if let Some(name) = key.strip_prefix("trait:") {
        let name = translate(name);
        let known = name.starts_with(CUSTOM_PREFIX) || standard::traits().any(|t| t == name);
        if !is_symbol(&name) || !known {
            return Err(ProfileError::BadTrait(name));
        }
        if value != "required" && value != "forbidden" {
            return Err(ProfileError::BadTraitValue(value));
        }
        Ok((format!("trait:{name}"), value))
    } else if let Some(class) = key.strip_prefix("resources:") {
        let class = translate(class);
        let known = class.starts_with(CUSTOM_PREFIX)
            || CYBORG_CLASSES.contains(&class.as_str())
            || standard::is_standard_resource_class(&class);
        if !is_symbol(&class) || !known {
            return Err(ProfileError::BadResourceClass(class));
        }
        match value.trim().parse::<i64>() {
            Ok(n) if n > 0 => Ok((format!("resources:{class}"), n.to_string())),
            _ => Err(ProfileError::BadAmount(value)),
        }
    } else if let Some(accel) = key.strip_prefix("accel:") {
        check_accel(accel, &value)?;
        Ok((key.to_owned(), value))
    } else {
        Err(ProfileError::BadKey)
    }
}

/// The spec's table of `accel:` keys and value types; other keys pass unchecked, as
/// upstream passes all of them.
fn check_accel(key: &str, value: &str) -> Result<(), ProfileError> {
    let bad = |why| {
        Err(ProfileError::BadAccelValue(
            format!("accel:{key}"),
            value.to_owned(),
            why,
        ))
    };
    match key {
        "bitstream_id" | "function_id" if uuid::Uuid::try_parse(value).is_err() => {
            bad("a UUID is expected")
        }
        "bitstream_name" | "function_name" if value.trim().is_empty() => {
            bad("a non-empty string is expected")
        }
        "attach_target" if !matches!(value, "VM" | "host" | "none") => {
            bad("one of VM, host, none is expected")
        }
        _ => Ok(()),
    }
}

/// A profile ready to be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProfile {
    pub name: String,
    pub description: Option<String>,
    /// Client-supplied uuid, if any.
    pub uuid: Option<uuid::Uuid>,
    pub groups: Vec<Group>,
}

impl DeviceProfile {
    /// Checks a name: non-empty, `^[A-Za-z0-9_-]+$`, at most 255 characters.
    pub fn check_name(name: &str) -> Result<(), ProfileError> {
        if name.is_empty() {
            return Err(ProfileError::NameNeeded);
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(ProfileError::BadName);
        }
        if name.len() > MAX_NAME_LEN {
            return Err(ProfileError::NameTooLong);
        }
        Ok(())
    }

    /// Builds a profile from wire parts; `groups` are raw groups in order.
    pub fn parse(
        name: &str,
        description: Option<String>,
        uuid: Option<uuid::Uuid>,
        groups: Vec<Vec<(String, String)>>,
    ) -> Result<DeviceProfile, ProfileError> {
        Self::check_name(name)?;
        if groups.is_empty() {
            return Err(ProfileError::GroupsExpected);
        }
        let groups = groups
            .into_iter()
            .enumerate()
            .map(|(i, g)| Group::parse(i, g))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DeviceProfile {
            name: name.to_owned(),
            description,
            uuid,
            groups,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn translation_and_order() {
        let grp = Group::parse(
            0,
            g(&[
                ("trait:custom_fpga-1", "required"),
                ("resources: fpga", "2"),
                ("accel:bitstream_id", "d5ca2f11-3108-4426-a11c-a959987565df"),
            ]),
        )
        .unwrap();
        let keys: Vec<&str> = grp.entries().iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "trait:CUSTOM_FPGA_1",
                "resources:FPGA",
                "accel:bitstream_id"
            ]
        );
        assert_eq!(grp.accelerator_count(), 2);
    }

    #[test]
    fn refusals() {
        let e = |pairs: &[(&str, &str)]| Group::parse(0, g(pairs)).unwrap_err();
        assert_eq!(e(&[("foo:bar", "1")]), ProfileError::BadKey);
        assert!(matches!(
            e(&[("trait:CUSTOM_A", "maybe")]),
            ProfileError::BadTraitValue(_)
        ));
        assert!(matches!(
            e(&[("trait:NOT_A_TRAIT", "required")]),
            ProfileError::BadTrait(_)
        ));
        assert!(matches!(
            e(&[("resources:FPGA", "0")]),
            ProfileError::BadAmount(_)
        ));
        assert!(matches!(
            e(&[("resources:FPGA", "x")]),
            ProfileError::BadAmount(_)
        ));
        assert!(matches!(
            e(&[("resources:NOPE", "1")]),
            ProfileError::BadResourceClass(_)
        ));
        assert!(matches!(
            e(&[("resources:FPGA", "1"), ("resources:fpga", "1")]),
            ProfileError::DuplicateKey(..)
        ));
        assert!(matches!(
            e(&[("accel:attach_target", "cloud")]),
            ProfileError::BadAccelValue(..)
        ));
        assert!(matches!(
            e(&[("accel:function_id", "3AFB")]),
            ProfileError::BadAccelValue(..)
        ));
        assert_eq!(e(&[]), ProfileError::EmptyGroup(0));
        assert_eq!(DeviceProfile::check_name("a b"), Err(ProfileError::BadName));
        assert_eq!(DeviceProfile::check_name(""), Err(ProfileError::NameNeeded));
        assert_eq!(
            DeviceProfile::check_name(&"a".repeat(256)),
            Err(ProfileError::NameTooLong)
        );
        assert!(DeviceProfile::parse("x", None, None, vec![]).is_err());
    }

    #[test]
    fn xilinx_doubles_fpga() {
        let grp = Group::parse(
            0,
            g(&[
                ("resources:FPGA", "1"),
                ("trait:CUSTOM_FPGA_XILINX", "required"),
            ]),
        )
        .unwrap();
        assert_eq!(grp.accelerator_count(), 2);
        let std_trait = Group::parse(
            0,
            g(&[("resources:PGPU", "3"), ("trait:OWNER_CYBORG", "required")]),
        );
        assert_eq!(std_trait.unwrap().accelerator_count(), 3);
    }
}
