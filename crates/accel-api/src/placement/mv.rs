//! Placement microversions: an ordered `(major, minor)` value parsed from
//! `OpenStack-API-Version: placement X.Y` as `microversion_parse` does upstream, and
//! one named constant per version that changed the API.
//!
//! The names say what each version added, after upstream's
//! `placement/rest_api_version_history.rst`; the server gates on them
//! (`req.mv(mv::NESTED_CANDIDATES)`) and clients pick the version they need by name.

use crate::python::{py_int, py_repr};
use std::fmt;

/// A Placement API microversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u16, pub u16);

impl Version {
    /// 1.0: the first version (Newton).
    pub const MIN: Version = Version(1, 0);
    /// The newest version accel serves (upstream 2023.1 "Antelope" and later).
    pub const MAX: Version = Version(1, 39);

    /// True when this version is `v` or newer.
    pub fn at_least(self, v: Version) -> bool {
        self >= v
    }

    /// The `OpenStack-API-Version` header value, `placement 1.39`.
    pub fn header(self) -> String {
        format!("placement {self}")
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// 1.1: `/resource_providers/{uuid}/aggregates` and its `aggregates` link.
pub const PROVIDER_AGGREGATES: Version = Version(1, 1);
/// 1.2: custom resource classes (`/resource_classes`).
pub const RESOURCE_CLASSES: Version = Version(1, 2);
/// 1.3: `member_of` on `GET /resource_providers`.
pub const PROVIDERS_MEMBER_OF: Version = Version(1, 3);
/// 1.4: `resources` on `GET /resource_providers`.
pub const PROVIDERS_RESOURCES: Version = Version(1, 4);
/// 1.5: `DELETE /resource_providers/{uuid}/inventories`.
pub const DELETE_ALL_INVENTORIES: Version = Version(1, 5);
/// 1.6: traits (`/traits`, `/resource_providers/{uuid}/traits`, the `traits` link).
pub const TRAITS: Version = Version(1, 6);
/// 1.7: `PUT /resource_classes/{name}` creates or verifies a class, with no body.
pub const RESOURCE_CLASS_PUT_CREATES: Version = Version(1, 7);
/// 1.8: `project_id` and `user_id` required in `PUT /allocations/{consumer}`.
pub const ALLOCATION_PROJECT_USER: Version = Version(1, 8);
/// 1.9: `GET /usages` of a project (and user).
pub const PROJECT_USAGES: Version = Version(1, 9);
/// 1.10: `GET /allocation_candidates`.
pub const ALLOCATION_CANDIDATES: Version = Version(1, 10);
/// 1.11: the `allocations` link of a provider.
pub const PROVIDER_ALLOCATIONS_LINK: Version = Version(1, 11);
/// 1.12: allocations as a dict keyed by provider (PUT bodies, allocation requests,
/// `project_id`/`user_id` in `GET /allocations/{consumer}`).
pub const ALLOCATIONS_DICT: Version = Version(1, 12);
/// 1.13: `POST /allocations`, several consumers at once.
pub const POST_ALLOCATIONS: Version = Version(1, 13);
/// 1.14: nested providers (`parent_provider_uuid`, `root_provider_uuid`, `in_tree`).
pub const NESTED_PROVIDERS: Version = Version(1, 14);
/// 1.15: `last-modified` and `cache-control` headers.
pub const LAST_MODIFIED: Version = Version(1, 15);
/// 1.16: `limit` on `GET /allocation_candidates`.
pub const CANDIDATES_LIMIT: Version = Version(1, 16);
/// 1.17: `required` traits on `GET /allocation_candidates`, `traits` in summaries.
pub const CANDIDATES_REQUIRED: Version = Version(1, 17);
/// 1.18: `required` traits on `GET /resource_providers`.
pub const PROVIDERS_REQUIRED: Version = Version(1, 18);
/// 1.19: the provider generation in aggregate bodies (and its check on PUT).
pub const AGGREGATES_GENERATION: Version = Version(1, 19);
/// 1.20: `POST /resource_providers` answers 200 with the provider.
pub const PROVIDER_CREATE_BODY: Version = Version(1, 20);
/// 1.21: `member_of` on `GET /allocation_candidates`.
pub const CANDIDATES_MEMBER_OF: Version = Version(1, 21);
/// 1.22: forbidden traits (`!TRAIT`).
pub const FORBIDDEN_TRAITS: Version = Version(1, 22);
/// 1.23: the `code` of error bodies.
pub const ERROR_CODES: Version = Version(1, 23);
/// 1.24: several `member_of` parameters.
pub const MEMBER_OF_REPEATED: Version = Version(1, 24);
/// 1.25: granular request groups (`resourcesN`, `group_policy`).
pub const GRANULAR_GROUPS: Version = Version(1, 25);
/// 1.26: inventories whose `reserved` equals `total`.
pub const ZERO_CAPACITY: Version = Version(1, 26);
/// 1.27: provider summaries list every class of the provider.
pub const SUMMARIES_ALL_CLASSES: Version = Version(1, 27);
/// 1.28: consumer generations.
pub const CONSUMER_GENERATION: Version = Version(1, 28);
/// 1.29: nested providers in allocation candidates (and summary parent/root).
pub const NESTED_CANDIDATES: Version = Version(1, 29);
/// 1.30: `POST /reshaper`.
pub const RESHAPER: Version = Version(1, 30);
/// 1.31: `in_tree` on `GET /allocation_candidates`.
pub const CANDIDATES_IN_TREE: Version = Version(1, 31);
/// 1.32: forbidden aggregates (`member_of=!...`).
pub const FORBIDDEN_AGGREGATES: Version = Version(1, 32);
/// 1.33: request group suffixes of any `[a-zA-Z0-9_-]{1,64}`.
pub const STRING_SUFFIXES: Version = Version(1, 33);
/// 1.34: `mappings` in allocation requests (and allocation bodies).
pub const CANDIDATE_MAPPINGS: Version = Version(1, 34);
/// 1.35: `root_required`.
pub const ROOT_REQUIRED: Version = Version(1, 35);
/// 1.36: `same_subtree` and resourceless request groups.
pub const SAME_SUBTREE: Version = Version(1, 36);
/// 1.37: re-parenting and un-parenting a provider.
pub const REPARENT: Version = Version(1, 37);
/// 1.38: consumer types.
pub const CONSUMER_TYPES: Version = Version(1, 38);
/// 1.39: `in:` any-of traits in `required`.
pub const ANY_TRAITS: Version = Version(1, 39);

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
        // `placement` with no version reads as no header, as upstream's parser has it.
        None | Some("") => Ok(Version::MIN),
        Some(v) => parse(v),
    }
}

/// Parses `X.Y` or `latest` and checks it is served. Each part reads as Python's
/// `int()` reads it (surrounding whitespace, a sign, `_` between digits), and a
/// malformed value is worded as upstream's `microversion_parse` words it, Python's
/// own error included.
pub fn parse(v: &str) -> Result<Version, VersionError> {
    if v == "latest" {
        return Ok(Version::MAX);
    }
    let malformed =
        |why: String| VersionError::Malformed(format!("invalid version string: {v}; {why}"));
    let (maj, min) = match v.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (v, None),
    };
    let int = |s: &str| {
        py_int(s).ok_or_else(|| {
            malformed(format!(
                "invalid literal for int() with base 10: {}",
                py_repr(s)
            ))
        })
    };
    let maj = int(maj)?;
    let Some(min) = min else {
        return Err(malformed(
            "Version.__new__() missing 1 required positional argument: 'minor'".to_owned(),
        ));
    };
    let min = int(min)?;
    let (Ok(maj), Ok(min)) = (u16::try_from(maj), u16::try_from(min)) else {
        return Err(VersionError::Unacceptable(v.to_owned()));
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
        // Upstream's words, Python's error included; Python's int() syntax accepted.
        let msg = |v: &str| match parse(v) {
            Err(VersionError::Malformed(m)) => m,
            other => panic!("{v}: {other:?}"),
        };
        assert_eq!(
            msg("1.a"),
            "invalid version string: 1.a; invalid literal for int() with base 10: 'a'"
        );
        assert_eq!(
            msg("1.2.3"),
            "invalid version string: 1.2.3; invalid literal for int() with base 10: '2.3'"
        );
        assert_eq!(
            msg("1"),
            "invalid version string: 1; Version.__new__() missing 1 required positional argument: 'minor'"
        );
        assert_eq!(
            msg("1.it's"),
            "invalid version string: 1.it's; invalid literal for int() with base 10: \"it's\""
        );
        for ok in [" 1.5", "1.05", "1.+5", "1. 5", "1.1_0", "01.5"] {
            assert!(parse(ok).is_ok(), "{ok}");
        }
        assert_eq!(parse("1.1_0"), Ok(Version(1, 10)));
        assert!(matches!(parse("1.-1"), Err(VersionError::Unacceptable(_))));
        assert!(matches!(
            parse("1.99999999999999999999"),
            Err(VersionError::Unacceptable(_))
        ));
        assert_eq!(from_headers(["placement"].into_iter()), Ok(Version::MIN));
        assert!(matches!(parse("1.40"), Err(VersionError::Unacceptable(_))));
        assert!(Version(1, 10) > Version(1, 9));
    }

    #[test]
    fn names_are_in_order_and_the_newest_is_max() {
        let all = [
            PROVIDER_AGGREGATES,
            RESOURCE_CLASSES,
            PROVIDERS_MEMBER_OF,
            PROVIDERS_RESOURCES,
            DELETE_ALL_INVENTORIES,
            TRAITS,
            RESOURCE_CLASS_PUT_CREATES,
            ALLOCATION_PROJECT_USER,
            PROJECT_USAGES,
            ALLOCATION_CANDIDATES,
            PROVIDER_ALLOCATIONS_LINK,
            ALLOCATIONS_DICT,
            POST_ALLOCATIONS,
            NESTED_PROVIDERS,
            LAST_MODIFIED,
            CANDIDATES_LIMIT,
            CANDIDATES_REQUIRED,
            PROVIDERS_REQUIRED,
            AGGREGATES_GENERATION,
            PROVIDER_CREATE_BODY,
            CANDIDATES_MEMBER_OF,
            FORBIDDEN_TRAITS,
            ERROR_CODES,
            MEMBER_OF_REPEATED,
            GRANULAR_GROUPS,
            ZERO_CAPACITY,
            SUMMARIES_ALL_CLASSES,
            CONSUMER_GENERATION,
            NESTED_CANDIDATES,
            RESHAPER,
            CANDIDATES_IN_TREE,
            FORBIDDEN_AGGREGATES,
            STRING_SUFFIXES,
            CANDIDATE_MAPPINGS,
            ROOT_REQUIRED,
            SAME_SUBTREE,
            REPARENT,
            CONSUMER_TYPES,
            ANY_TRAITS,
        ];
        for (i, v) in all.iter().enumerate() {
            assert_eq!(*v, Version(1, i as u16 + 1));
        }
        assert_eq!(all.last(), Some(&Version::MAX));
        assert_eq!(NESTED_CANDIDATES.header(), "placement 1.29");
    }
}
