//! The clock snowflake IDs are made from (`snowflake.clock`): [`IdClock`].

use std::sync::Arc;

use idmint_core::clock::{Clock, MonotonicClock, WallClock};

use crate::config::ClockSource;

/// The clock snowflake IDs are made from (`snowflake.clock`), as the
/// surfaces report it.
#[derive(Debug, Clone)]
pub enum IdClock {
    /// The wall clock read once at start, advanced by the monotonic clock.
    Monotonic(Arc<MonotonicClock>),
    /// The raw wall clock.
    Wall(Arc<WallClock>),
}

impl IdClock {
    /// The clock `source` names, anchored now.
    pub fn new(source: ClockSource) -> IdClock {
        match source {
            ClockSource::Monotonic => IdClock::Monotonic(Arc::new(MonotonicClock::new())),
            ClockSource::Wall => IdClock::Wall(Arc::new(WallClock)),
        }
    }

    /// The clock itself, for the generator (no dispatch on its hot path).
    pub fn shared(&self) -> Arc<dyn Clock> {
        match self {
            IdClock::Monotonic(c) => c.clone(),
            IdClock::Wall(c) => c.clone(),
        }
    }

    /// Which clock this is.
    pub fn source(&self) -> ClockSource {
        match self {
            IdClock::Monotonic(_) => ClockSource::Monotonic,
            IdClock::Wall(_) => ClockSource::Wall,
        }
    }

    /// The wall clock minus this clock, in nanoseconds: how far a wall-clock
    /// step (or slew) has moved the wall clock away from the time IDs carry.
    /// Always 0 for the wall clock, which IDs follow step for step.
    pub fn drift(&self) -> i64 {
        match self {
            IdClock::Monotonic(c) => c.drift(),
            IdClock::Wall(_) => 0,
        }
    }
}

impl Clock for IdClock {
    fn now_nanos(&self) -> i64 {
        match self {
            IdClock::Monotonic(c) => c.now_nanos(),
            IdClock::Wall(c) => c.now_nanos(),
        }
    }
}
