//! The one check of a batch's count, for every binding: a count as the
//! caller's language gave it (signed in Go and Java, a `number` or a
//! `bigint` in JavaScript, an `int` in Python) is read here, against the
//! limit this layer takes from the core ([`crate::MAX_BATCH`]) or the
//! config (`server.max_count`), before anything is set aside for it.
//!
//! A binding converts only what its language's type can't say as an integer
//! (a JavaScript `2.5`), and refuses it with [`Error::invalid_count`]: the
//! same code and the same words as every other count refused here.

use std::fmt::Display;

use crate::error::Error;

/// `n` as a length, when it is 1 to `max`.
///
/// # Errors
/// `invalid_count` naming `n` and the range, in the core's words (its
/// `Error::InvalidCount` for counts a `u64` holds).
pub(crate) fn check(n: impl Into<i128>, max: u64) -> Result<usize, Error> {
    let n: i128 = n.into();
    match u64::try_from(n) {
        Ok(count) if count == 0 || count > max => {
            Err(idmint_core::Error::InvalidCount { count, max }.into())
        }
        // In range, so below `max`, which fits memory (the core's limit, or
        // a config's `u64` on a 64-bit target; a 32-bit one refuses more).
        Ok(count) => usize::try_from(count).map_err(|_| Error::invalid_count(count, max)),
        Err(_) => Err(Error::invalid_count(n, max)),
    }
}

impl Error {
    /// `invalid_count` for a count that is no integer of `1..=max` in the
    /// caller's language (a negative number, a fraction, a `bigint` wider
    /// than 64 bits): the code and words of every refused count. `shown` is
    /// the count as the caller wrote it.
    pub fn invalid_count(shown: impl Display, max: u64) -> Error {
        Error::refused(
            "invalid_count",
            format!("count {shown} is out of range: ask for 1..={max} IDs"),
            true,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refused_count_reads_as_the_cores() {
        let core = Error::from(idmint_core::Error::InvalidCount { count: 0, max: 9 });
        assert_eq!(check(0_u64, 9).unwrap_err(), core);
        assert_eq!(
            Error::invalid_count(0, 9),
            core,
            "the binding's words are the core's"
        );
        let e = check(-1_i64, 9).unwrap_err();
        assert_eq!(e.code(), "invalid_count");
        assert_eq!(e.message(), "count -1 is out of range: ask for 1..=9 IDs");
        assert!(e.is_bad_input());
        assert_eq!(
            check(10_u64, 9).unwrap_err().message(),
            "count 10 is out of range: ask for 1..=9 IDs"
        );
        assert_eq!(check(9_u64, 9), Ok(9));
        assert_eq!(check(1_i32, 9), Ok(1));
        assert!(check(i128::from(u64::MAX) + 1, 9).is_err());
    }
}
