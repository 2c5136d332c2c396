//! Time sources for generators: the [`Clock`] trait and its three implementations.
//!
//! - [`MonotonicClock`] (the default): the wall clock read once at start, advanced
//!   by the monotonic clock. A wall-clock step back while running (NTP, an operator,
//!   a VM migration) is invisible to it; [`MonotonicClock::drift`] measures how far
//!   the wall clock has moved away.
//! - [`WallClock`]: the raw wall clock, for the classic behaviour (and for tests of it).
//! - [`ManualClock`]: set by hand, for tests; waiting on it moves it forward.
//! - [`CoarseClock`]: a [`MonotonicClock`] whose reading a ticker thread publishes
//!   in one atomic, for callers that issue IDs faster than a clock read costs.
//!
//! Generators read the time through the trait only, so clock faults are injected by
//! handing them a [`ManualClock`] (sonyflake's injectable `now` is the model).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Below this, [`Clock::wait`] on a real clock yields instead of sleeping: the
/// scheduler's sleep granularity (~50-100 µs) would overshoot short waits.
const SPIN_BELOW: Duration = Duration::from_micros(150);
/// How much earlier than asked a real clock's sleep wakes, to absorb oversleeping.
const SLEEP_SLACK: Duration = Duration::from_micros(100);

/// A source of time for generators.
///
/// Implementations are cheap to read (generators read the clock on every ID) and
/// shared across threads.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Nanoseconds since the Unix epoch (1970-01-01T00:00:00Z).
    fn now_nanos(&self) -> i64;

    /// Blocks the calling thread for about `d`, and may return early; callers read
    /// the clock again afterwards.
    ///
    /// Real clocks sleep (or yield, for short waits); [`ManualClock`] moves itself
    /// forward by `d` instead, so code that waits can be tested without sleeping.
    fn wait(&self, d: Duration) {
        real_wait(d);
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_nanos(&self) -> i64 {
        (**self).now_nanos()
    }
    fn wait(&self, d: Duration) {
        (**self).wait(d);
    }
}

fn real_wait(d: Duration) {
    if d < SPIN_BELOW {
        std::thread::yield_now();
    } else {
        std::thread::sleep(d - SLEEP_SLACK);
    }
}

fn wall_nanos() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

/// The wall clock read once at construction, advanced by the monotonic clock.
///
/// - Never goes backwards while the process runs, whatever the wall clock does.
/// - Runs at the monotonic clock's rate, so it can drift from the wall clock
///   (NTP slews both alike; a step moves only the wall clock). [`drift`] measures
///   the gap; export it and alert on it.
/// - A restart reads the wall clock afresh, so it can start behind the last
///   issued ID: that case is for the generator's clock policy and the persisted
///   high-water mark, not for the clock.
///
/// [`drift`]: MonotonicClock::drift
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    wall_at_start: i64,
    start: Instant,
}

impl MonotonicClock {
    /// Reads the wall clock now and anchors to it.
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            start: Instant::now(),
            wall_at_start: wall_nanos(),
        }
    }

    /// How far the wall clock is ahead of this clock, in nanoseconds (negative
    /// when the wall clock is behind, as after a step back).
    pub fn drift(&self) -> i64 {
        wall_nanos() - self.now_nanos()
    }
}

impl Default for MonotonicClock {
    fn default() -> MonotonicClock {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> i64 {
        let elapsed = self.start.elapsed().as_nanos();
        self.wall_at_start
            .saturating_add(i64::try_from(elapsed).unwrap_or(i64::MAX))
    }
}

/// The raw wall clock (`SystemTime::now`): steps back when the system clock does.
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

impl Clock for WallClock {
    #[inline]
    fn now_nanos(&self) -> i64 {
        wall_nanos()
    }
}

/// A clock set by hand, for tests. Clones share the same time.
///
/// [`Clock::wait`] on it moves the time forward by the wait (like
/// `tokio::time::pause`), unless auto-advance is turned off, in which case it
/// yields and leaves moving the time to the test.
///
/// # Examples
///
/// ```
/// use idmint_core::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::at_millis(1_700_000_000_000);
/// clock.advance(Duration::from_millis(5));
/// clock.step_back(Duration::from_millis(2));
/// assert_eq!(clock.now_nanos(), 1_700_000_000_003_000_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug)]
struct ManualInner {
    now: AtomicI64,
    auto_advance: AtomicBool,
}

impl ManualClock {
    /// A clock at `nanos` since the Unix epoch, moving forward on `wait`.
    pub fn at_nanos(nanos: i64) -> ManualClock {
        ManualClock {
            inner: Arc::new(ManualInner {
                now: AtomicI64::new(nanos),
                auto_advance: AtomicBool::new(true),
            }),
        }
    }

    /// A clock at `millis` since the Unix epoch.
    pub fn at_millis(millis: i64) -> ManualClock {
        ManualClock::at_nanos(millis * 1_000_000)
    }

    /// A clock at `time`.
    pub fn at(time: jiff::Timestamp) -> ManualClock {
        ManualClock::at_nanos(i64::try_from(time.as_nanosecond()).expect("time within i64 nanos"))
    }

    /// Whether `wait` moves the clock forward (the default) or only yields.
    pub fn set_auto_advance(&self, on: bool) {
        self.inner.auto_advance.store(on, Ordering::SeqCst);
    }

    /// Sets the time.
    pub fn set_nanos(&self, nanos: i64) {
        self.inner.now.store(nanos, Ordering::SeqCst);
    }

    /// Moves the time forward.
    pub fn advance(&self, d: Duration) {
        self.inner.now.fetch_add(dur_nanos(d), Ordering::SeqCst);
    }

    /// Moves the time back, as a wall-clock step back would.
    pub fn step_back(&self, d: Duration) {
        self.inner.now.fetch_sub(dur_nanos(d), Ordering::SeqCst);
    }
}

fn dur_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).expect("duration fits in i64 nanoseconds")
}

impl Clock for ManualClock {
    fn now_nanos(&self) -> i64 {
        self.inner.now.load(Ordering::SeqCst)
    }

    fn wait(&self, d: Duration) {
        if self.inner.auto_advance.load(Ordering::SeqCst) {
            // Never less than a nanosecond, so a waiting loop always makes progress.
            self.inner
                .now
                .fetch_add(dur_nanos(d).max(1), Ordering::SeqCst);
        } else {
            std::thread::yield_now();
        }
    }
}

/// A [`MonotonicClock`] read from one atomic that a ticker thread refreshes
/// every `resolution`: a read costs a load instead of a system clock call
/// (about 1 ns against 20-25 ns on the machines we measure).
///
/// - Never goes backwards (the ticker publishes with `fetch_max`).
/// - Lags the source by up to the resolution plus the ticker's scheduling delay,
///   so IDs carry a time up to that much older than the instant they were made.
///   Keep the resolution well below the layout's unit. On an overloaded machine
///   the ticker can be starved for milliseconds; the clock then stands still
///   (it never goes back, so IDs stay unique) until the ticker or a waiter
///   refreshes it.
/// - Reads the source directly while no ticker runs (before [`CoarseClock::start`],
///   after its [`CoarseTicker`] is dropped), so it never stands still.
/// - [`Clock::wait`] refreshes the published time after sleeping, so a waiter
///   sees the new tick without waiting for the ticker.
///
/// # Examples
///
/// ```
/// use idmint_core::clock::{Clock, CoarseClock};
/// use std::time::Duration;
///
/// let clock = CoarseClock::new(Duration::from_micros(100));
/// let ticker = clock.start();
/// let a = clock.now_nanos();
/// clock.wait(Duration::from_millis(2)); // waiting refreshes the published time
/// assert!(clock.now_nanos() > a);
/// drop(ticker); // stops and joins the thread
/// ```
#[derive(Debug, Clone)]
pub struct CoarseClock {
    inner: Arc<CoarseInner>,
}

/// `CoarseInner::now` holds this while no ticker runs: readers go to the source.
const NOT_TICKING: i64 = i64::MIN;

#[derive(Debug)]
struct CoarseInner {
    /// The published time, or `NOT_TICKING`. One word, so a read is one load.
    now: AtomicI64,
    source: MonotonicClock,
    resolution: Duration,
}

impl CoarseInner {
    /// Publishes the source's time, never moving the published time back, and
    /// never publishing while no ticker runs.
    fn refresh(&self) {
        let fresh = self.source.now_nanos();
        let _ = self
            .now
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                (old != NOT_TICKING && old < fresh).then_some(fresh)
            });
    }
}

impl CoarseClock {
    /// A coarse clock over a new [`MonotonicClock`], refreshed every `resolution`
    /// once started.
    pub fn new(resolution: Duration) -> CoarseClock {
        let source = MonotonicClock::new();
        CoarseClock {
            inner: Arc::new(CoarseInner {
                now: AtomicI64::new(NOT_TICKING),
                source,
                resolution,
            }),
        }
    }

    /// Starts the ticker thread; it runs until the returned guard is dropped.
    ///
    /// Starting a second ticker while one runs is harmless but wasteful.
    pub fn start(&self) -> CoarseTicker {
        let stop = Arc::new(AtomicBool::new(false));
        let inner = self.inner.clone();
        // The source is monotonic, so switching from reading it to publishing it
        // never moves the clock back.
        let _ = inner.now.compare_exchange(
            NOT_TICKING,
            inner.source.now_nanos(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        let thread = std::thread::Builder::new()
            .name("idmint-coarse-clock".into())
            .spawn({
                let stop = stop.clone();
                move || {
                    while !stop.load(Ordering::Acquire) {
                        inner.refresh();
                        std::thread::park_timeout(inner.resolution);
                    }
                    inner.now.store(NOT_TICKING, Ordering::Release);
                }
            })
            .expect("spawn the coarse clock ticker");
        CoarseTicker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now_nanos(&self) -> i64 {
        match self.inner.now.load(Ordering::Relaxed) {
            NOT_TICKING => self.inner.source.now_nanos(),
            published => published,
        }
    }

    fn wait(&self, d: Duration) {
        real_wait(d);
        self.inner.refresh();
    }
}

/// Owns a [`CoarseClock`]'s ticker thread; dropping it stops and joins the thread.
#[derive(Debug)]
pub struct CoarseTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for CoarseTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_starts_at_wall_time_and_never_goes_back() {
        let c = MonotonicClock::new();
        assert!((c.now_nanos() - wall_nanos()).abs() < 50_000_000);
        let mut last = c.now_nanos();
        for _ in 0..10_000 {
            let now = c.now_nanos();
            assert!(now >= last);
            last = now;
        }
        assert!(c.drift().abs() < 50_000_000);
    }

    #[test]
    fn manual_clock_waits_by_moving_forward() {
        let c = ManualClock::at_millis(1000);
        c.wait(Duration::from_millis(3));
        assert_eq!(c.now_nanos(), 1_003_000_000);
        c.set_auto_advance(false);
        c.wait(Duration::from_millis(3));
        assert_eq!(c.now_nanos(), 1_003_000_000);
        let shared = c.clone();
        shared.step_back(Duration::from_millis(1003));
        assert_eq!(c.now_nanos(), 0);
    }

    #[test]
    fn coarse_clock_follows_its_source_and_falls_back_without_a_ticker() {
        let c = CoarseClock::new(Duration::from_micros(200));
        let before = c.now_nanos();
        std::thread::sleep(Duration::from_millis(2));
        assert!(
            c.now_nanos() >= before + 2_000_000,
            "reads the source before start"
        );
        let ticker = c.start();
        let first = c.now_nanos();
        let mut last = first;
        // Generous: a loaded machine may not schedule the ticker for a while.
        let deadline = Instant::now() + Duration::from_secs(5);
        while last == first && Instant::now() < deadline {
            std::thread::yield_now();
            let now = c.now_nanos();
            assert!(now >= last, "never goes back");
            last = now;
        }
        assert!(last > first, "the ticker moves it");
        assert!((c.now_nanos() - wall_nanos()).abs() < 50_000_000);
        drop(ticker);
        let stopped = c.now_nanos();
        std::thread::sleep(Duration::from_millis(2));
        assert!(
            c.now_nanos() >= stopped + 2_000_000,
            "reads the source again after the ticker stops"
        );
    }

    #[test]
    fn real_wait_returns_close_to_the_asked_time() {
        let t = Instant::now();
        WallClock.wait(Duration::from_millis(2));
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(1), "{took:?}");
    }
}
