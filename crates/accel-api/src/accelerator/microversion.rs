//! Accelerator microversions 2.0–2.3 (the server parses requests with them, clients
//! name the one they speak), parsed as Cyborg master does
//! (`cyborg/api/controllers/base.py::Version.parse_headers`): the standard
//! `OpenStack-API-Version: accelerator 2.x` first, then a bare `2.x` (released Cyborg
//! 2024.1–2026.1 understood only that form), `latest`, and 2.0 when absent (Nova sends
//! no header).

use std::fmt;

/// An accelerator API microversion (major is always 2 once parsed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u16, pub u16);

impl Version {
    pub const MIN: Version = Version(2, 0);
    pub const MAX: Version = Version(2, 3);
    /// `/project_id` in ARQ patches.
    pub const PROJECT_ID: Version = Version(2, 1);
    /// Device profile lookup by name.
    pub const DP_BY_NAME: Version = Version(2, 2);
    /// Device `status`.
    pub const DEVICE_STATUS: Version = Version(2, 3);
}

impl Version {
    /// The `OpenStack-API-Version` header value that asks for this version.
    pub fn header(self) -> String {
        format!("accelerator {self}")
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// The 406 messages upstream gives.
pub fn parse<'a>(values: impl Iterator<Item = &'a str>) -> Result<Version, String> {
    let raw: Vec<&str> = values.collect();
    let standard = raw
        .iter()
        .flat_map(|v| v.split(','))
        .filter_map(|part| {
            let (service, version) = part.trim().split_once(char::is_whitespace)?;
            service
                .eq_ignore_ascii_case("accelerator")
                .then(|| version.trim())
        })
        .next_back();
    let text = match (standard, raw.first()) {
        (Some(v), _) => v.to_owned(),
        (None, Some(_)) => raw.join(","),
        (None, None) => return Ok(Version::MIN),
    };
    let range = format!("[{}, {}]", Version::MIN, Version::MAX);
    if text.eq_ignore_ascii_case("latest") {
        return Ok(Version::MAX);
    }
    let invalid = || "Invalid value for OpenStack-API-Version header".to_owned();
    let (maj, min) = text.split_once('.').ok_or_else(invalid)?;
    let (maj, min): (u16, u16) = match (maj.trim().parse(), min.trim().parse()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return Err(invalid()),
    };
    let v = Version(maj, min);
    if maj != 2 {
        return Err(format!(
            "Mutually exclusive versions requested. Version {v} requested but not supported by this service. The supported version range is: {range}."
        ));
    }
    if v > Version::MAX {
        return Err(format!(
            "Version {v} was requested but the minor version is not supported by this service. The supported version range is: {range}."
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(parse(std::iter::empty()), Ok(Version(2, 0)));
        assert_eq!(parse(["accelerator 2.2"].into_iter()), Ok(Version(2, 2)));
        assert_eq!(parse(["2.1"].into_iter()), Ok(Version(2, 1)));
        assert_eq!(
            parse(["compute 2.1, accelerator latest"].into_iter()),
            Ok(Version::MAX)
        );
        assert!(parse(["accelerator 2.9"].into_iter())
            .unwrap_err()
            .starts_with("Version 2.9 was requested"));
        assert!(parse(["accelerator 3.0"].into_iter())
            .unwrap_err()
            .starts_with("Mutually exclusive"));
        assert_eq!(
            parse(["accelerator two"].into_iter()).unwrap_err(),
            "Invalid value for OpenStack-API-Version header"
        );
    }
}
