//! Placement microversions: an ordered `(major, minor)` value parsed from
//! `OpenStack-API-Version: placement X.Y`, as `microversion_parse` does upstream.

use std::fmt;

/// A Placement API microversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u16, pub u16);

impl Version {
    pub const MIN: Version = Version(1, 0);
    pub const MAX: Version = Version(1, 39);

    /// True when this request's version is at least `1.minor`.
    pub fn at_least(self, minor: u16) -> bool {
        self >= Version(1, minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// Why a version header was refused: 400 for a malformed value, 406 for a
/// well-formed one outside `MIN..=MAX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionError {
    Malformed(String),
    Unacceptable(String),
}

/// Picks the `placement` entry out of one or more `OpenStack-API-Version` header
/// values (`"placement 1.5"`, `"compute 2.1, placement latest"`).
pub fn from_headers<'a>(values: impl Iterator<Item = &'a str>) -> Result<Version, VersionError> {
    let mut found: Option<&str> = None;
    for value in values {
        for part in value.split(',') {
            let part = part.trim();
            let mut it = part.splitn(2, char::is_whitespace);
            let service = it.next().unwrap_or("");
            if service.eq_ignore_ascii_case("placement") {
                found = Some(it.next().unwrap_or("").trim());
            }
        }
    }
    match found {
        None => Ok(Version::MIN),
        Some(v) => parse(v),
    }
}

/// Parses `X.Y` or `latest` and checks it is served.
pub fn parse(v: &str) -> Result<Version, VersionError> {
    if v == "latest" {
        return Ok(Version::MAX);
    }
    let malformed = || VersionError::Malformed(format!("invalid version string: {v}"));
    let (maj, min) = v.split_once('.').ok_or_else(malformed)?;
    let is_num = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !is_num(maj) || !is_num(min) {
        return Err(malformed());
    }
    let (maj, min): (u16, u16) = match (maj.parse(), min.parse()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return Err(VersionError::Unacceptable(v.to_owned())),
    };
    let version = Version(maj, min);
    if version < Version::MIN || version > Version::MAX {
        return Err(VersionError::Unacceptable(v.to_owned()));
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        assert_eq!(from_headers(std::iter::empty()), Ok(Version::MIN));
        assert_eq!(
            from_headers(["placement 1.5"].into_iter()),
            Ok(Version(1, 5))
        );
        assert_eq!(
            from_headers(["compute 2.1, placement latest"].into_iter()),
            Ok(Version::MAX)
        );
        assert!(matches!(parse("1.2.3"), Err(VersionError::Malformed(_))));
        assert!(matches!(
            parse("pony.horse"),
            Err(VersionError::Malformed(_))
        ));
        assert!(matches!(parse("0.5"), Err(VersionError::Unacceptable(_))));
        assert!(matches!(parse("1.40"), Err(VersionError::Unacceptable(_))));
        assert!(Version(1, 10) > Version(1, 9));
    }
}
