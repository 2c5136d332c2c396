//! Readiness: whether the node should take traffic, and why not
//! ([`not_ready_reason`]). `/readyz`, the `idmint_ready` gauge, the status
//! page and the gRPC health service all answer from here.

use std::sync::atomic::Ordering;
use std::time::Duration;

use idmint_core::clock::Clock;
use idmint_core::{ClockBehind, SequenceExhausted};

use crate::state::AppState;

/// Why the clock keeps the node out of rotation, if it does (docs/design.md §2
/// "Taking a sick node out of rotation"): snowflake IDs fail, or would fail,
/// because the clock reads further behind the last issued ID than the clock
/// policy absorbs. Clears by itself once the clock catches up (or is set
/// right).
///
/// Two readings, the first that applies:
/// - a failure seen: the last `clock_behind` or `rollback_exhausted` error
///   said until when IDs fail ([`note_clock_failure`]); this covers
///   `rollback-bits` with every counter value in use and a `history` ring
///   run dry, which only issuing can tell;
/// - the clock against the last issued ID, without waiting for a request:
///   `fail` absorbs nothing, `wait` its bound, `borrow` its lead, `history:N`
///   N ticks, and `sequence_exhausted = "borrow:…"` its lead on top (the
///   generator may run that far ahead of a clock that did not move).
///   `rollback-bits` absorbs any step back while a counter value is free.
pub(crate) fn clock_not_ready(state: &AppState) -> Option<String> {
    let (policy, exhausted) = state.clock_policy;
    let source = state.clock.source().name();
    let now = state.clock.now_nanos();
    let until = state.clock_failed_until.load(Ordering::Acquire);
    if now < until {
        return Some(format!(
            "snowflake IDs fail for {:.3} ms more: the {source} clock went back further than \
             snowflake.clock_behind = \"{}\" absorbs",
            (until - now) as f64 / 1e6,
            policy.name(),
        ));
    }
    let absorbed = match policy {
        ClockBehind::Wait { max } => max,
        ClockBehind::Borrow { max_lead } => max_lead,
        ClockBehind::History { ticks } => state.layout.unit().saturating_mul(ticks),
        ClockBehind::RollbackBits => return None,
        _ => Duration::ZERO,
    };
    let absorbed = match exhausted {
        SequenceExhausted::Borrow { max_lead } => absorbed.max(max_lead),
        _ => absorbed,
    };
    let behind = state.worker.generator().lead();
    (behind > absorbed).then(|| {
        format!(
            "the {source} clock is {:.3} ms behind the last issued ID; \
             snowflake.clock_behind = \"{}\" absorbs {:.3} ms",
            behind.as_secs_f64() * 1e3,
            policy.name(),
            absorbed.as_secs_f64() * 1e3,
        )
    })
}

/// Why the node should take no traffic, or `None` when it is ready: the
/// layout's ([`layout_not_ready`]), the worker lease's verdict, then the
/// clock's ([`clock_not_ready`]). `/readyz`
/// answers from it, and the gRPC health service follows it.
pub(crate) fn not_ready_reason(state: &AppState) -> Option<String> {
    layout_not_ready(state)
        .or_else(|| state.worker.status().not_ready_reason())
        .or_else(|| clock_not_ready(state))
}

/// Why the layout keeps the node out of rotation: it has run out, so every
/// snowflake ID fails (`layout_exhausted`). The start refuses such a layout;
/// this catches one that runs out while the node runs.
pub(crate) fn layout_not_ready(state: &AppState) -> Option<String> {
    let end = state.layout.runs_out_at()?;
    let now = jiff::Timestamp::from_nanosecond(i128::from(state.clock.now_nanos())).ok()?;
    (now >= end).then(|| {
        format!(
            "the snowflake layout ran out at {end}: no snowflake ID can be issued; move to a \
             later epoch or more time bits"
        )
    })
}

/// Records until when snowflake IDs fail after a clock error (`error`'s own
/// verdict: the time the clock must reach), for [`clock_not_ready`].
pub(crate) fn note_clock_failure(state: &AppState, error: &idmint_core::Error) {
    let last = state.worker.generator().last_tick_time();
    if let Some(until) = failing_until(error, last) {
        state.clock_failed_until.fetch_max(until, Ordering::AcqRel);
    }
}

/// The clock reading (nanoseconds) from which IDs no longer fail as `error`
/// said, the last issued ID being in the tick starting at `last_tick`; `None`
/// for an error that isn't the clock's.
///
/// A `clock_behind` failure lasts until the clock is within the policy's
/// allowance of the last ID's time. That is measured from the ID's time, the
/// one thing the failure was measured against, and never as `now + behind`
/// with a clock read of our own: the clock may have been set right between
/// the generator's read and ours, and `behind` added to the corrected time
/// would keep the node out of rotation for the whole step (an hour) while it
/// issues again. The fault suite's `clock[wall,fail,back-1h]` row hit that
/// race on a loaded machine.
fn failing_until(error: &idmint_core::Error, last_tick: jiff::Timestamp) -> Option<i64> {
    let nanos = |t: jiff::Timestamp| i64::try_from(t.as_nanosecond()).unwrap_or(i64::MAX);
    match error {
        idmint_core::Error::ClockBehind { allowed, .. } => Some(
            nanos(last_tick).saturating_sub(i64::try_from(allowed.as_nanos()).unwrap_or(i64::MAX)),
        ),
        idmint_core::Error::RollbackExhausted { retry_after, .. } => Some(nanos(*retry_after)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use idmint_core::Error;
    use jiff::Timestamp;

    use super::failing_until;

    #[test]
    fn a_clock_behind_failure_lasts_until_the_last_ids_time_less_the_allowance() {
        let last = Timestamp::from_second(1_800_000_000).unwrap();
        let behind = |allowed| Error::ClockBehind {
            behind: Duration::from_secs(3600),
            policy: "fail",
            allowed,
        };
        let ns = 1_800_000_000 * 1_000_000_000_i64;
        // However far behind the clock read: the hour is not added to any
        // later reading (which may already be set right).
        assert_eq!(failing_until(&behind(Duration::ZERO), last), Some(ns));
        assert_eq!(
            failing_until(&behind(Duration::from_millis(5)), last),
            Some(ns - 5_000_000)
        );
    }

    #[test]
    fn rollback_exhaustion_lasts_until_its_retry_time_and_other_errors_not_at_all() {
        let last = Timestamp::from_second(1_800_000_000).unwrap();
        let retry_after = Timestamp::from_second(1_800_000_002).unwrap();
        let exhausted = Error::RollbackExhausted {
            counters: 4,
            retry_after,
        };
        assert_eq!(
            failing_until(&exhausted, last),
            Some(1_800_000_002 * 1_000_000_000)
        );
        assert_eq!(
            failing_until(&Error::InvalidCount { count: 0, max: 1 }, last),
            None
        );
    }
}
