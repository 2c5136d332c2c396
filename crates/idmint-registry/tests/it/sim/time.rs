//! Simulated time: the fleet's true time, each node's monotonic clock (its
//! own paused tokio runtime, running a little fast or slow), and each node's
//! wall clock (steps, drift), which its generators read through
//! [`SimClock`].
//!
//! True time is "global" nanoseconds since the simulation began; the
//! registry's clock is true time. A node process (an incarnation) runs on its
//! own current-thread runtime with paused time: its `tokio::time::Instant` is
//! the node's monotonic clock, which the keeper times leases and intervals
//! with. [`NodeTime`] maps between the two at the machine's rate error.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use idmint_core::Clock;
use tokio::time::Instant;

/// 2026-11-21T00:00:00Z: true time 0 on the wall.
pub const T0_NS: i64 = 1_795_219_200_000_000_000;

/// One process's monotonic clock against true time: its runtime's instant
/// `base` was true time `g0`, and it runs `ppm` parts per million fast
/// (negative: slow).
#[derive(Debug, Clone, Copy)]
pub struct NodeTime {
    pub base: Instant,
    pub g0: u64,
    pub ppm: i64,
}

impl NodeTime {
    /// The process's instant at true time `g` (not before `g0`).
    pub fn local_at(&self, g: u64) -> Instant {
        let elapsed = i128::from(g.saturating_sub(self.g0));
        let local = elapsed * (1_000_000 + i128::from(self.ppm)) / 1_000_000;
        self.base + Duration::from_nanos(u64::try_from(local).expect("positive"))
    }

    /// The true time of the process's instant `at`.
    pub fn global_of(&self, at: Instant) -> u64 {
        let local =
            i128::try_from(at.saturating_duration_since(self.base).as_nanos()).expect("fits");
        let g = local * 1_000_000 / (1_000_000 + i128::from(self.ppm));
        self.g0 + u64::try_from(g).expect("positive")
    }

    /// The process's instant now: its runtime's clock. Panics outside a
    /// runtime (tokio would silently read the real clock there).
    pub fn now() -> Instant {
        assert!(
            tokio::runtime::Handle::try_current().is_ok(),
            "simulated time read outside a node's runtime"
        );
        Instant::now()
    }
}

/// A machine's wall clock: true time, plus its drift (the machine's rate
/// error), plus the steps applied to it (an operator, a bad NTP server).
#[derive(Debug)]
pub struct Wall {
    pub ppm: i64,
    offset: AtomicI64,
}

impl Wall {
    pub fn new(ppm: i64) -> Wall {
        Wall {
            ppm,
            offset: AtomicI64::new(0),
        }
    }

    /// The wall clock's reading at true time `g`, in Unix nanoseconds.
    pub fn read(&self, g: u64) -> i64 {
        let g = i64::try_from(g).expect("fits");
        T0_NS + g + g / 1_000_000 * self.ppm + self.offset.load(Ordering::Relaxed)
    }

    /// Steps the clock by `by` nanoseconds (negative: back).
    pub fn step(&self, by: i64) {
        self.offset.fetch_add(by, Ordering::Relaxed);
    }

    /// NTP steps it to true time.
    pub fn correct(&self, g: u64) {
        let g = i64::try_from(g).expect("fits");
        self.offset
            .store(-(g / 1_000_000 * self.ppm), Ordering::Relaxed);
    }

    /// How far it is from true time now, in nanoseconds.
    pub fn error(&self, g: u64) -> i64 {
        self.read(g) - T0_NS - i64::try_from(g).expect("fits")
    }
}

/// What a node's generators read the time from, as in idmint's config:
/// the raw wall clock, or the wall clock read at start and advanced by the
/// monotonic clock (the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Wall,
    Monotonic,
}

/// A node process's generator clock.
///
/// [`Clock::wait`] (a generator waiting out a short step back, or for the
/// next tick) moves this clock forward by the wait, as `ManualClock` does:
/// the thread slept while the simulation stood still.
#[derive(Debug, Clone)]
pub struct SimClock(Arc<ClockInner>);

#[derive(Debug)]
struct ClockInner {
    time: NodeTime,
    wall: Arc<Wall>,
    source: Source,
    /// The wall reading at the process's start, for `Monotonic`.
    wall_at_start: i64,
    waited: AtomicI64,
}

impl SimClock {
    pub fn new(time: NodeTime, wall: Arc<Wall>, source: Source) -> SimClock {
        let wall_at_start = wall.read(time.g0);
        SimClock(Arc::new(ClockInner {
            time,
            wall,
            source,
            wall_at_start,
            waited: AtomicI64::new(0),
        }))
    }
}

impl Clock for SimClock {
    fn now_nanos(&self) -> i64 {
        let c = &self.0;
        let local = NodeTime::now();
        let read = match c.source {
            Source::Wall => c.wall.read(c.time.global_of(local)),
            Source::Monotonic => {
                let mono = local.saturating_duration_since(c.time.base).as_nanos();
                c.wall_at_start + i64::try_from(mono).expect("fits")
            }
        };
        read + c.waited.load(Ordering::Relaxed)
    }

    fn wait(&self, d: Duration) {
        let d = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        self.0.waited.fetch_add(d, Ordering::Relaxed);
    }
}
