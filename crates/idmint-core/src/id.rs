//! [`Id`]: a 63-bit positive integer, the value every generator in this crate issues.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A unique ID: a non-negative integer below 2^63, so it is always a positive `i64`
/// (a `BIGINT` in SQL, a `long` in Java) as well as a `u64`.
///
/// # Examples
///
/// ```
/// use idmint_core::Id;
///
/// let id: Id = "175928847299117063".parse()?;
/// assert_eq!(id.get(), 175928847299117063);
/// assert_eq!(i64::from(id), 175928847299117063);
/// assert!("-1".parse::<Id>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(u64);

impl Id {
    /// The largest ID: 2^63 − 1.
    pub const MAX: Id = Id(i64::MAX as u64);

    /// Wraps a value as an ID.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] when `value` is 2^63 or above.
    pub fn new(value: u64) -> Result<Id> {
        if value > Id::MAX.0 {
            return Err(Error::invalid_id(
                &value.to_string(),
                "above 2^63 - 1, the largest positive i64",
            ));
        }
        Ok(Id(value))
    }

    /// Wraps a value the caller knows to be below 2^63.
    pub(crate) const fn from_raw(value: u64) -> Id {
        debug_assert!(value <= i64::MAX as u64);
        Id(value)
    }

    /// The ID as a `u64`.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The ID as an `i64`; never negative.
    pub const fn as_i64(self) -> i64 {
        self.0 as i64
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for Id {
    type Err = Error;

    /// Parses a decimal ID, as printed by `Display`.
    fn from_str(s: &str) -> Result<Id> {
        if s.is_empty() {
            return Err(Error::invalid_id(s, "empty"));
        }
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid_id(s, "not a decimal number"));
        }
        let value: u64 = s
            .parse()
            .map_err(|_| Error::invalid_id(s, "above 2^63 - 1, the largest positive i64"))?;
        Id::new(value).map_err(|_| Error::invalid_id(s, "above 2^63 - 1, the largest positive i64"))
    }
}

impl From<Id> for u64 {
    fn from(id: Id) -> u64 {
        id.0
    }
}

impl From<Id> for i64 {
    fn from(id: Id) -> i64 {
        id.0 as i64
    }
}

impl TryFrom<u64> for Id {
    type Error = Error;
    fn try_from(value: u64) -> Result<Id> {
        Id::new(value)
    }
}

impl TryFrom<i64> for Id {
    type Error = Error;
    fn try_from(value: i64) -> Result<Id> {
        u64::try_from(value)
            .map_err(|_| Error::invalid_id(&value.to_string(), "negative"))
            .and_then(Id::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rejects_bad_text() {
        for bad in [
            "",
            "-1",
            "+1",
            "1e3",
            " 1",
            "9223372036854775808",
            "99999999999999999999",
            "0x10",
        ] {
            let err = bad.parse::<Id>().unwrap_err();
            assert_eq!(err.code(), "invalid_id", "{bad:?}");
        }
        assert_eq!("9223372036854775807".parse::<Id>().unwrap(), Id::MAX);
        assert_eq!("0".parse::<Id>().unwrap().get(), 0);
    }

    #[test]
    fn conversions_keep_the_value() {
        assert!(Id::try_from(-5i64).is_err());
        assert_eq!(Id::try_from(42i64).unwrap().as_i64(), 42);
        assert!(Id::new(1 << 63).is_err());
    }
}
