//! A credential read from a flag, an environment variable or a file.
//!
//! Configuration types derive `Debug`; a password or token inside one must not reach a
//! log line or a panic message that way. `Secret` prints `***` whatever it holds, and
//! hands its text out only through [`Secret::expose`], so each use of the credential
//! is a visible call.

use std::fmt;

/// A string whose `Debug` and `Display` print `***`.
#[derive(Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: impl Into<String>) -> Secret {
        Secret(text.into())
    }

    /// The credential itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Secret, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.to_owned())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn debug_and_display_hide_it() {
        #[derive(Debug, serde::Deserialize)]
        struct Table {
            #[allow(dead_code)]
            password: Secret,
        }
        let t: Table = toml::from_str("password = \"hunter2\"").unwrap();
        assert_eq!(format!("{t:?}"), "Table { password: *** }");
        assert_eq!(t.password.to_string(), "***");
        assert_eq!(t.password.expose(), "hunter2");
    }
}
