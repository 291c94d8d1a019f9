//! Validated names: resource classes, traits, consumer types.
//!
//! Placement accepts `^[A-Z0-9_]+$` for resource classes and traits (at most 255
//! characters) and requires custom ones to start with `CUSTOM_`. Parsing happens once,
//! at the edge; a value of these types is known to be well formed.

use std::fmt;

/// The prefix every operator-defined resource class and trait carries.
pub const CUSTOM_PREFIX: &str = "CUSTOM_";

/// Longest resource class, trait or consumer type name Placement stores.
pub const MAX_NAME_LEN: usize = 255;

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("name is empty")]
    Empty,
    #[error("name is longer than {MAX_NAME_LEN} characters")]
    TooLong,
    #[error("name may contain only upper case letters, digits and underscores")]
    BadCharacters,
    #[error("custom names must start with {CUSTOM_PREFIX}")]
    NotCustom,
}

/// True when `s` matches `^[A-Z0-9_]+$` and fits the column.
pub fn is_symbol(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn check_symbol(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    if s.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    if !is_symbol(s) {
        return Err(NameError::BadCharacters);
    }
    Ok(())
}

macro_rules! symbol_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Parses any well-formed name, standard or custom.
            pub fn parse(s: &str) -> Result<Self, NameError> {
                check_symbol(s)?;
                Ok(Self(s.to_owned()))
            }

            /// Parses a name that must be custom (`CUSTOM_...`).
            pub fn parse_custom(s: &str) -> Result<Self, NameError> {
                let n = Self::parse(s)?;
                if !n.is_custom() {
                    return Err(NameError::NotCustom);
                }
                Ok(n)
            }

            pub fn is_custom(&self) -> bool {
                self.0.starts_with(CUSTOM_PREFIX)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

symbol_type!(
    /// A resource class name such as `VCPU` or `CUSTOM_ACCELERATOR_FPGA`.
    ResourceClassName
);
symbol_type!(
    /// A trait name such as `HW_CPU_X86_AVX2` or `CUSTOM_FPGA_INTEL_ARRIA10`.
    TraitName
);
symbol_type!(
    /// A consumer type (Placement 1.38) such as `INSTANCE` or `MIGRATION`.
    ConsumerType
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols() {
        assert!(ResourceClassName::parse("VCPU").is_ok());
        assert_eq!(
            ResourceClassName::parse("vcpu"),
            Err(NameError::BadCharacters)
        );
        assert_eq!(ResourceClassName::parse(""), Err(NameError::Empty));
        assert_eq!(TraitName::parse(&"A".repeat(256)), Err(NameError::TooLong));
        assert_eq!(TraitName::parse_custom("HW_X"), Err(NameError::NotCustom));
        assert!(TraitName::parse_custom("CUSTOM_X").unwrap().is_custom());
    }
}
