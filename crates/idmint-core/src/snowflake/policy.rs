//! The generator's policies for a clock that reads behind, a tick whose
//! sequence is used up, and where each tick's sequence starts; and their text
//! form, which the config file and the CLI use.
//!
//! ```text
//! clock_behind       = "fail" | "wait:" duration | "borrow:" duration
//!                    | "rollback-bits" | "history:" ticks        (1..=65536)
//! sequence_exhausted = "wait" | "borrow:" duration
//! sequence_start     = "zero" | "random:" below                  (1 or more)
//! ```
//!
//! Names are case-insensitive; durations are written as
//! [`parse_duration`](crate::duration::parse_duration) reads them and must be
//! more than zero. `Display` writes the form `FromStr` reads back. Each
//! policy's [`Default`] is the one [`Snowflake::builder`](crate::Snowflake::builder)
//! starts from; every other crate takes its defaults from here.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::duration::{format_duration, parse_duration};
use crate::error::{Error, Result};

/// What a generator does when the clock reads earlier than the last ID it issued
/// (beyond what borrowing absorbs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClockBehind {
    /// Return [`Error::ClockBehind`] at once (Twitter, uid-generator's default).
    Fail,
    /// Wait for the clock to catch up when it is at most `max` behind; fail
    /// otherwise (Leaf waits up to 5 ms).
    Wait {
        /// The longest the clock may be behind and still be waited for.
        max: Duration,
    },
    /// Keep issuing from the last logical time while that is at most `max_lead`
    /// ahead of the clock; fail beyond (sonyflake, uid-generator's cached mode,
    /// RFC 9562 §6.2).
    Borrow {
        /// How far ahead of the clock the generator may run.
        max_lead: Duration,
    },
    /// Count rollbacks in the layout's rollback bits: each detected rollback moves
    /// to the next counter value and issues from the clock's time again.
    ///
    /// IDs stay unique; they are not monotonic across a rollback. Fails with
    /// [`Error::RollbackExhausted`] when every counter value has been used at or
    /// after the time the clock now reads.
    RollbackBits,
    /// Reuse the unspent sequence numbers of the last `ticks` ticks (the "ID ring"):
    /// a clock that steps back into that window gets fresh IDs from it.
    ///
    /// IDs stay unique; they are not monotonic across a rollback. Fails when the
    /// clock steps back further, or the ticks it lands in have nothing left.
    History {
        /// How many recent ticks keep their unspent sequence numbers.
        ticks: u32,
    },
}

impl ClockBehind {
    /// The policy's name as used in config and errors.
    pub fn name(&self) -> &'static str {
        match self {
            ClockBehind::Fail => "fail",
            ClockBehind::Wait { .. } => "wait",
            ClockBehind::Borrow { .. } => "borrow",
            ClockBehind::RollbackBits => "rollback-bits",
            ClockBehind::History { .. } => "history",
        }
    }
}

/// What a generator does when a tick's sequence numbers are used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SequenceExhausted {
    /// Wait for the next tick (the classic; IDs never run ahead of the clock).
    Wait,
    /// Move on to the next tick at once while that is at most `max_lead` ahead of
    /// the clock (Yitter's "drift"); wait beyond.
    Borrow {
        /// How far ahead of the clock the generator may run.
        max_lead: Duration,
    },
}

/// Where each tick's sequence starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SequenceStart {
    /// At zero.
    Zero,
    /// At a pseudo-random number below `below` (Leaf: 100), so the low digits
    /// spread and IDs do not show how many were issued in a tick.
    Random {
        /// Exclusive upper bound of the start; at most the sequence capacity.
        below: u32,
    },
}

impl Default for ClockBehind {
    /// `wait:5ms`: Leaf's choice, long enough to ride out an NTP slew's small
    /// steps, short enough that a caller barely notices.
    fn default() -> ClockBehind {
        ClockBehind::Wait {
            max: Duration::from_millis(5),
        }
    }
}

impl Default for SequenceExhausted {
    /// `wait`: IDs never run ahead of the clock.
    fn default() -> SequenceExhausted {
        SequenceExhausted::Wait
    }
}

impl Default for SequenceStart {
    /// `zero`.
    fn default() -> SequenceStart {
        SequenceStart::Zero
    }
}

/// Splits `NAME` or `NAME:ARGUMENT`, the name lowercased.
fn parts(text: &str) -> (String, Option<&str>) {
    let text = text.trim();
    match text.split_once(':') {
        Some((name, arg)) => (name.trim().to_ascii_lowercase(), Some(arg.trim())),
        None => (text.to_ascii_lowercase(), None),
    }
}

fn invalid(what: &'static str, text: &str, reason: impl Into<String>) -> Error {
    Error::InvalidText {
        what,
        text: text.to_owned(),
        reason: reason.into(),
    }
}

/// A policy's bound: a duration of more than zero.
fn bound(what: &'static str, text: &str, arg: Option<&str>, example: &str) -> Result<Duration> {
    let Some(arg) = arg else {
        return Err(invalid(
            what,
            text,
            format!("needs a bound, like {example:?}"),
        ));
    };
    let d = parse_duration(arg).map_err(|e| invalid(what, text, e.to_string()))?;
    if d.is_zero() {
        return Err(invalid(what, text, "the bound must be more than zero"));
    }
    Ok(d)
}

/// Writes a policy's bound; a duration too long for text (beyond ~292 billion
/// years) is written as whole seconds, which is not read back.
fn write_bound(f: &mut fmt::Formatter<'_>, name: &str, d: Duration) -> fmt::Result {
    match format_duration(d) {
        Ok(text) => write!(f, "{name}:{text}"),
        Err(_) => write!(f, "{name}:{}s", d.as_secs()),
    }
}

impl FromStr for ClockBehind {
    type Err = Error;

    /// Parses `fail`, `wait:DURATION`, `borrow:DURATION`, `rollback-bits` or `history:N`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use idmint_core::ClockBehind;
    ///
    /// let p: ClockBehind = "borrow:50ms".parse()?;
    /// assert_eq!(p, ClockBehind::Borrow { max_lead: Duration::from_millis(50) });
    /// assert_eq!(p.to_string(), "borrow:50ms");
    /// assert!("wait".parse::<ClockBehind>().is_err(), "wait needs a bound");
    /// # Ok::<(), idmint_core::Error>(())
    /// ```
    fn from_str(text: &str) -> Result<ClockBehind> {
        const WHAT: &str = "clock_behind policy";
        let (name, arg) = parts(text);
        let no_arg = |policy: ClockBehind| match arg {
            None => Ok(policy),
            Some(_) => Err(invalid(WHAT, text, format!("{name} takes no argument"))),
        };
        match name.as_str() {
            "fail" => no_arg(ClockBehind::Fail),
            "rollback-bits" => no_arg(ClockBehind::RollbackBits),
            "wait" => Ok(ClockBehind::Wait {
                max: bound(WHAT, text, arg, "wait:5ms")?,
            }),
            "borrow" => Ok(ClockBehind::Borrow {
                max_lead: bound(WHAT, text, arg, "borrow:50ms")?,
            }),
            "history" => arg
                .and_then(|a| a.parse::<u32>().ok())
                .filter(|t| (1..=1 << 16).contains(t))
                .map(|ticks| ClockBehind::History { ticks })
                .ok_or_else(|| {
                    invalid(
                        WHAT,
                        text,
                        "history needs a tick count 1..=65536, like \"history:64\"",
                    )
                }),
            _ => Err(invalid(
                WHAT,
                text,
                "use \"fail\", \"wait:5ms\", \"borrow:50ms\", \"rollback-bits\" or \"history:N\"",
            )),
        }
    }
}

impl fmt::Display for ClockBehind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ClockBehind::Wait { max } => write_bound(f, "wait", max),
            ClockBehind::Borrow { max_lead } => write_bound(f, "borrow", max_lead),
            ClockBehind::History { ticks } => write!(f, "history:{ticks}"),
            ClockBehind::Fail | ClockBehind::RollbackBits => f.write_str(self.name()),
        }
    }
}

impl FromStr for SequenceExhausted {
    type Err = Error;

    /// Parses `wait` or `borrow:DURATION`.
    fn from_str(text: &str) -> Result<SequenceExhausted> {
        const WHAT: &str = "sequence_exhausted policy";
        match parts(text) {
            (name, None) if name == "wait" => Ok(SequenceExhausted::Wait),
            (name, arg) if name == "borrow" => Ok(SequenceExhausted::Borrow {
                max_lead: bound(WHAT, text, arg, "borrow:1s")?,
            }),
            _ => Err(invalid(WHAT, text, "use \"wait\" or \"borrow:1s\"")),
        }
    }
}

impl fmt::Display for SequenceExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SequenceExhausted::Wait => f.write_str("wait"),
            SequenceExhausted::Borrow { max_lead } => write_bound(f, "borrow", max_lead),
        }
    }
}

impl FromStr for SequenceStart {
    type Err = Error;

    /// Parses `zero` or `random:N` (N ≥ 1).
    fn from_str(text: &str) -> Result<SequenceStart> {
        const WHAT: &str = "sequence_start";
        match parts(text) {
            (name, None) if name == "zero" => Ok(SequenceStart::Zero),
            (name, Some(arg)) if name == "random" => arg
                .parse::<u32>()
                .ok()
                .filter(|&below| below > 0)
                .map(|below| SequenceStart::Random { below })
                .ok_or_else(|| {
                    invalid(
                        WHAT,
                        text,
                        "random needs a bound of 1 or more, like \"random:100\"",
                    )
                }),
            _ => Err(invalid(WHAT, text, "use \"zero\" or \"random:100\"")),
        }
    }
}

impl fmt::Display for SequenceStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SequenceStart::Zero => f.write_str("zero"),
            SequenceStart::Random { below } => write!(f, "random:{below}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_round_trips_through_its_text() {
        let ms = Duration::from_millis;
        for p in [
            ClockBehind::Fail,
            ClockBehind::RollbackBits,
            ClockBehind::Wait { max: ms(5) },
            ClockBehind::Borrow {
                max_lead: Duration::from_secs(90),
            },
            ClockBehind::History { ticks: 65_536 },
        ] {
            assert_eq!(p.to_string().parse::<ClockBehind>(), Ok(p), "{p}");
        }
        for p in [
            SequenceExhausted::Wait,
            SequenceExhausted::Borrow { max_lead: ms(1500) },
        ] {
            assert_eq!(p.to_string().parse::<SequenceExhausted>(), Ok(p), "{p}");
        }
        for p in [SequenceStart::Zero, SequenceStart::Random { below: 100 }] {
            assert_eq!(p.to_string().parse::<SequenceStart>(), Ok(p), "{p}");
        }
        assert_eq!(
            " WAIT : 1m ".parse::<ClockBehind>(),
            Ok(ClockBehind::Wait { max: ms(60_000) })
        );
        assert_eq!(
            " Borrow : 50ms ".parse::<ClockBehind>(),
            Ok(ClockBehind::Borrow { max_lead: ms(50) })
        );
    }

    #[test]
    fn bad_policy_text_is_refused_naming_the_text() {
        for bad in [
            "",
            "nope",
            "wait",
            "wait:0s",
            "wait:5",
            "wait:soon",
            "borrow",
            "borrow:-1s",
            "fail:1s",
            "history",
            "history:0",
            "history:65537",
            "history:70000",
            "rollback-bits:2",
        ] {
            let err = bad.parse::<ClockBehind>().expect_err(bad);
            assert_eq!(err.code(), "invalid_text");
            let message = err.to_string();
            assert!(
                !message.contains('\n') && message.contains(&format!("{bad:?}")),
                "{message}"
            );
        }
        for bad in ["", "borrow", "borrow:0ms", "wait:1s", "drift"] {
            assert!(bad.parse::<SequenceExhausted>().is_err(), "{bad}");
        }
        for bad in [
            "",
            "random",
            "random:0",
            "random:-1",
            "random:x",
            "zero:1",
            "one",
        ] {
            assert!(bad.parse::<SequenceStart>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        assert_eq!(ClockBehind::default().to_string(), "wait:5ms");
        assert_eq!(SequenceExhausted::default().to_string(), "wait");
        assert_eq!(SequenceStart::default().to_string(), "zero");
    }
}
