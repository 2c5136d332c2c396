//! The one text form of a duration, used by the config file, the clock
//! policies' text form and the CLI.
//!
//! Durations are written in jiff's "friendly" form (`3s`, `500ms`, `1m 30s`,
//! `1.5s`, `2h`) or in ISO 8601 (`PT3S`). A bare number is refused rather than
//! guessed at: `3` could mean seconds or milliseconds, and a wrong guess is a
//! thousand-fold mistake in a timeout. Negative durations are refused too:
//! every duration idmint reads is a length of time to wait or keep.
//!
//! [`format_duration`] writes the friendly form, which [`parse_duration`]
//! reads back to the same value.

use std::time::Duration;

use jiff::SignedDuration;

use crate::error::{Error, Result};

/// Parses a duration such as `"3s"`, `"500ms"`, `"1m 30s"`, `"1.5s"` or `"PT3S"`.
///
/// # Errors
/// [`Error::InvalidText`] naming the text, for anything else: a bare number, an
/// unknown unit, a negative duration.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idmint_core::duration::parse_duration;
///
/// assert_eq!(parse_duration("1m 30s")?, Duration::from_secs(90));
/// assert_eq!(parse_duration("1.5s")?, Duration::from_millis(1500));
/// assert_eq!(parse_duration("PT0.25S")?, Duration::from_millis(250));
/// assert!(parse_duration("3").is_err());
/// assert!(parse_duration("-1s").is_err());
/// # Ok::<(), idmint_core::Error>(())
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = |reason: String| Error::InvalidText {
        what: "duration",
        text: text.to_owned(),
        reason,
    };
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad(format!(
            "a number needs a unit, like \"{trimmed}s\" or \"{trimmed}ms\""
        )));
    }
    let signed: SignedDuration = trimmed.parse().map_err(|e| {
        bad(format!(
            "write it like \"3s\", \"500ms\" or \"1m 30s\" ({e})"
        ))
    })?;
    Duration::try_from(signed).map_err(|_| bad("a duration can't be negative".to_owned()))
}

/// Writes `d` in the friendly form [`parse_duration`] reads (`"1m 30s"`, `"5ms"`).
///
/// # Errors
/// [`Error::InvalidText`] for a duration longer than about 292 billion years,
/// which has no text form.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idmint_core::duration::format_duration;
///
/// assert_eq!(format_duration(Duration::from_millis(90_005))?, "1m 30s 5ms");
/// # Ok::<(), idmint_core::Error>(())
/// ```
pub fn format_duration(d: Duration) -> Result<String> {
    SignedDuration::try_from(d)
        .map(|d| format!("{d:#}"))
        .map_err(|e| Error::InvalidText {
            what: "duration",
            text: format!("{d:?}"),
            reason: format!("too long to write: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_friendly_and_iso_forms_parse_and_round_trip() {
        for (text, want) in [
            ("500ms", Duration::from_millis(500)),
            ("5s", Duration::from_secs(5)),
            (" 2m ", Duration::from_secs(120)),
            ("1h 2m 3s", Duration::from_secs(3723)),
            ("0s", Duration::ZERO),
            ("PT3S", Duration::from_secs(3)),
            ("7us", Duration::from_micros(7)),
        ] {
            let got = parse_duration(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(got, want, "{text}");
            let written = format_duration(got).unwrap();
            assert_eq!(parse_duration(&written).unwrap(), got, "{written}");
        }
    }

    #[test]
    fn bare_numbers_units_it_lacks_and_negatives_are_refused_by_name() {
        for bad in ["", "3", "1.5", "fast", "-1s", "5 parsecs", "1mo"] {
            let err = parse_duration(bad).expect_err(bad);
            assert_eq!(err.code(), "invalid_text", "{bad}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        assert!(
            parse_duration("3")
                .unwrap_err()
                .to_string()
                .contains("\"3s\""),
            "the error shows how to write it"
        );
    }
}
