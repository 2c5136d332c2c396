//! [`Identifier`]: a validated SQL identifier for configurable names (tables).
//!
//! Table names come from configuration and end up inside SQL text, where no
//! placeholder can stand for them. Validating them to a tiny alphabet makes
//! injection impossible and keeps the name portable: the same name works on
//! PostgreSQL (63-byte limit), MySQL/MariaDB (64) and SQLite, and needs no
//! escaping inside quotes ([`crate::Dialect::quote`]).

use std::fmt;

use crate::error::{Error, Result};

/// A plain SQL identifier: 1 to [`Identifier::MAX_LEN`] ASCII letters, digits
/// and `_`, not starting with a digit.
///
/// # Examples
/// ```
/// use idmint_sql::Identifier;
///
/// let table = Identifier::new("leaf_alloc")?;
/// assert_eq!(table.as_str(), "leaf_alloc");
/// assert!(Identifier::new("leaf_alloc; DROP TABLE x").is_err());
/// assert!(Identifier::new("1table").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identifier(String);

impl Identifier {
    /// The longest identifier: PostgreSQL's limit (`NAMEDATALEN` − 1), the
    /// smallest of the three.
    pub const MAX_LEN: usize = 63;

    /// Validates `name`.
    ///
    /// # Errors
    /// [`Error::InvalidIdentifier`] naming what is wrong.
    pub fn new(name: impl Into<String>) -> Result<Identifier> {
        let name = name.into();
        let reason = if name.is_empty() {
            "an identifier has at least one character".to_owned()
        } else if name.len() > Self::MAX_LEN {
            format!(
                "an identifier has at most {} bytes, not {}",
                Self::MAX_LEN,
                name.len()
            )
        } else if name.as_bytes()[0].is_ascii_digit() {
            "an identifier does not start with a digit".to_owned()
        } else if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
        {
            format!("{c:?} is not allowed; use ASCII letters, digits and '_'")
        } else {
            return Ok(Identifier(name));
        };
        Err(Error::InvalidIdentifier {
            name: name.chars().take(80).collect(),
            reason,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Identifier {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Identifier {
    type Err = Error;

    fn from_str(s: &str) -> Result<Identifier> {
        Identifier::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_accepted() {
        for name in ["leaf_alloc", "_x", "T1", "a", &"x".repeat(63)] {
            assert_eq!(Identifier::new(name).unwrap().as_str(), name);
        }
    }

    #[test]
    fn everything_else_is_refused_with_a_reason() {
        let cases = [
            ("", "at least one"),
            ("9lives", "digit"),
            ("a-b", "'-'"),
            ("a b", "' '"),
            ("a\"b", "'\"'"),
            ("a`b", "'`'"),
            ("x;DROP TABLE y", "';'"),
            ("tablé", "'é'"),
        ];
        for (name, why) in cases {
            let err = Identifier::new(name).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(why), "{name:?}: {text}");
            assert!(err.is_config());
        }
        let long = "x".repeat(64);
        assert!(
            Identifier::new(long)
                .unwrap_err()
                .to_string()
                .contains("64")
        );
    }
}
