//! The rules of resource class, trait and consumer type names.
//!
//! Placement accepts `^[A-Z0-9_]+$` for resource classes and traits (at most 255
//! characters) and requires custom ones to start with `CUSTOM_`. The request schemas
//! check the pattern with upstream's messages; the store and the agent use these
//! constants and [`is_symbol`] where a name is made or tested outside a request.

/// The prefix every operator-defined resource class and trait carries.
pub const CUSTOM_PREFIX: &str = "CUSTOM_";

/// Longest resource class, trait or consumer type name Placement stores.
pub const MAX_NAME_LEN: usize = 255;

/// True when `s` matches `^[A-Z0-9_]+$` and fits the column.
pub fn is_symbol(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols() {
        assert!(is_symbol("VCPU"));
        assert!(is_symbol("CUSTOM_FPGA_INTEL_ARRIA10"));
        assert!(!is_symbol("vcpu"));
        assert!(!is_symbol(""));
        assert!(!is_symbol(&"A".repeat(MAX_NAME_LEN + 1)));
        assert!(is_symbol(&"A".repeat(MAX_NAME_LEN)));
    }
}
