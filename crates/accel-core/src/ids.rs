//! Identifiers as OpenStack checks them: one `is_uuid_like`, oslo.utils' rule, for every
//! place a request names a uuid (Placement's query strings and JSON schemas, Cyborg's
//! WSME `uuid` type, path segments of both APIs).
//!
//! oslo's rule: strip `urn:` and `uuid:`, the braces around, and every dash; what is
//! left, lower-cased, must be exactly 32 hex digits. So the canonical form, the bare 32
//! digits, `{...}` and `urn:uuid:...` are uuids; whitespace, a sign or an underscore
//! (which Python's `int()` would take) are not.

/// The 32 lower-case hex digits of `s` when it is uuid-like.
fn hex_digits(s: &str) -> Option<String> {
    let t = s.replace("urn:", "").replace("uuid:", "");
    let t = t.trim_matches(|c| c == '{' || c == '}');
    let hex: String = t.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

/// oslo.utils' `uuidutils.is_uuid_like`.
pub fn is_uuid_like(s: &str) -> bool {
    hex_digits(s).is_some()
}

/// The canonical lower-case dashed form of a uuid-like `s`.
pub fn canonical_uuid(s: &str) -> Option<String> {
    hex_digits(s).map(|h| {
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "5f4d0a2e-8c8e-4a9b-9a7e-2b1c3d4e5f60";

    #[test]
    fn forms_oslo_accepts() {
        for s in [
            U,
            "5F4D0A2E-8C8E-4A9B-9A7E-2B1C3D4E5F60",
            "5f4d0a2e8c8e4a9b9a7e2b1c3d4e5f60",
            "{5f4d0a2e-8c8e-4a9b-9a7e-2b1c3d4e5f60}",
            "urn:uuid:5f4d0a2e-8c8e-4a9b-9a7e-2b1c3d4e5f60",
            "5f4d-0a2e8c8e4a9b9a7e2b1c3d4e5f60",
        ] {
            assert!(is_uuid_like(s), "{s}");
            assert_eq!(canonical_uuid(s).as_deref(), Some(U), "{s}");
        }
    }

    #[test]
    fn forms_oslo_refuses() {
        for s in [
            "",
            "not-a-uuid",
            " 5f4d0a2e-8c8e-4a9b-9a7e-2b1c3d4e5f60",
            "5f4d0a2e-8c8e-4a9b-9a7e-2b1c3d4e5f6",
            "5f4d0a2e-8c8e-4a9b-9a7e-2b1c3d4e5f600",
            "5f4d0a2e_8c8e4a9b9a7e2b1c3d4e5f60",
            "g f4d0a2e-8c8e-4a9b-9a7e-2b1c3d4e5f60",
        ] {
            assert!(!is_uuid_like(s), "{s:?}");
            assert_eq!(canonical_uuid(s), None);
        }
    }
}
