//! [`Watch`]: a thread that looks at what it watches on its own cadence, so
//! that the takers it serves never pay for waking it.
//!
//! The segment preloader used to be woken by the taker that crossed a
//! segment's preload point. Waking a sleeping thread is a system call and, on
//! a virtual machine, an interrupt to another CPU: that one call in a segment
//! cost 10 to 45 µs where every other costs 40 ns. The watch turns it around:
//! it scans (its [`Lookout`] does the looking and starts whatever is due), and
//! each scan says how soon the next one must come. Then:
//!
//! - **soon** (under [`SPIN_BELOW`]): it spins for half that time and scans
//!   again. It is busy only while some key is used so fast that a sleep's
//!   timer slack (50 µs by default) would come too late, which takes a small
//!   fixed step and millions of IDs a second on one key (the dynamic step
//!   grows segments away from that);
//! - **later**: it naps that long, at most [`MAX_NAP`], since a quiet key can
//!   speed up between scans;
//! - **nothing moved for [`LINGER`]**: it parks, and only then does a taker
//!   that crosses a preload point wake it ([`Bell::ring`]). A busy key never
//!   meets a parked watch, so its takers pay one fence.
//!
//! Parking is a handshake without lost wake-ups: the watch sets `parked`,
//! fences and scans once more; a taker moves its cursor, fences and reads
//! `parked`. With a sequentially consistent fence on each side, either the
//! scan sees the taker's move or the taker sees `parked` and wakes it.
//!
//! The work a scan starts (a segment lease) runs on the watch's thread too:
//! the lookout polls it in each scan with a waker that unparks the thread,
//! inside the tokio runtime's context, so timers and sockets are the
//! runtime's. A lease from a fast store then completes within the scan that
//! saw it was due, and no thread wakes another on the way; one that waits on
//! I/O is woken by the runtime like any task.
//!
//! A watch starved of CPU (more runnable threads than cores) scans late; a key
//! that runs dry meanwhile is leased on demand by its caller, as without a
//! preloader: slower, never wrong.
//!
//! Hand-written: the policy is the point (when to spin, nap or park for a set
//! of cursors), and it is a loop around `std::thread::park`; no crate of the
//! field offers an adaptive poller with a parked handshake.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::task::{Context, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// Below this, the next scan comes after a spin instead of a sleep: a
/// thread's sleep overshoots by its timer slack (50 µs by default on Linux).
pub(crate) const SPIN_BELOW: Duration = Duration::from_micros(60);
/// The longest sleep between scans while anything moves.
pub(crate) const MAX_NAP: Duration = Duration::from_millis(20);
/// How long nothing must move before the watch parks.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// What a watch looks at.
pub(crate) trait Lookout: Send + Sync + 'static {
    /// Looks at everything once, starts what is due and polls what it
    /// started with `cx` (whose waker unparks the watch). `None` when what
    /// is watched is gone: the watch ends.
    fn scan(&self, cx: &mut Context<'_>) -> Option<Scan>;
}

/// What one scan saw.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scan {
    /// Something moved or was started since the last scan.
    pub moved: bool,
    /// How soon the next scan must come; `None` when nothing asks.
    pub look_again: Option<Duration>,
    /// Work it started is still in flight: the watch naps (the work's waker
    /// cuts the nap short) but does not park.
    pub busy: bool,
}

/// Unparks the watch's thread: the waker of the work a lookout polls.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// What takers ring: a watch's parked flag and thread. It outlives any one
/// watch (a new watch takes it over), so takers reach it through one plain
/// reference and ring it with a fence and a load.
#[derive(Debug, Default)]
pub(crate) struct Bell {
    parked: AtomicBool,
    thread: std::sync::Mutex<Option<Thread>>,
}

impl Bell {
    /// Tells the watch that something is due. Wakes its thread only when it
    /// is parked; otherwise one fence and one load.
    #[inline]
    pub(crate) fn ring(&self) {
        // Pairs with the fence in `run`: the caller's move (before this)
        // is seen by the watch's last scan, or `parked` is seen here.
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) {
            self.wake();
        }
    }

    #[cold]
    fn wake(&self) {
        if self.parked.swap(false, Ordering::AcqRel)
            && let Some(thread) = &*self.thread.lock().unwrap_or_else(|p| p.into_inner())
        {
            thread.unpark();
        }
    }
}

/// A running watch. Stopped by [`Watch::stop`] or on drop (or when its
/// lookout's subject is gone). Dropping it also waits for its thread to
/// leave (at most the scan under way), so the lookout and the work in
/// flight are gone before the drop returns: whoever drops the preloader
/// and then its tokio runtime never has a scan polling a lease inside a
/// runtime that is shutting down (issue 33, item 6: "A Tokio 1.x context was
/// found, but it is being shutdown").
#[derive(Debug)]
pub(crate) struct Watch {
    bell: Arc<Bell>,
    stop: Arc<AtomicBool>,
    thread: Thread,
    joined: Option<thread::JoinHandle<()>>,
}

impl Watch {
    /// Starts the watch's thread, named `name`, rung through `bell`,
    /// parking after `linger` without a move ([`LINGER`] outside tests).
    pub(crate) fn spawn(
        name: &str,
        bell: Arc<Bell>,
        lookout: Arc<dyn Lookout>,
        linger: Duration,
    ) -> std::io::Result<Watch> {
        let stop = Arc::new(AtomicBool::new(false));
        bell.parked.store(false, Ordering::Relaxed);
        let handle = thread::Builder::new().name(name.to_owned()).spawn({
            let (bell, stop) = (bell.clone(), stop.clone());
            move || run(&bell, &stop, &*lookout, linger)
        })?;
        let thread = handle.thread().clone();
        *bell.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(thread.clone());
        Ok(Watch {
            bell,
            stop,
            thread,
            joined: Some(handle),
        })
    }

    /// Ends the watch: the thread leaves at its next look (at once when it
    /// is parked or napping).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let mut thread = self.bell.thread.lock().unwrap_or_else(|p| p.into_inner());
        if thread.as_ref().is_some_and(|t| t.id() == self.thread.id()) {
            *thread = None;
        }
        drop(thread);
        self.thread.unpark();
    }

    /// True while the thread is parked (tests).
    #[cfg(test)]
    pub(crate) fn is_parked(&self) -> bool {
        self.bell.parked.load(Ordering::Acquire)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop();
        // Not from the watch's own thread (work it polls could drop the
        // last owner): a thread can't wait for itself.
        if let Some(handle) = self.joined.take()
            && handle.thread().id() != thread::current().id()
            && handle.join().is_err()
        {
            tracing::error!("the segment preloader's thread panicked");
        }
    }
}

fn run(shared: &Bell, stop: &AtomicBool, lookout: &dyn Lookout, linger: Duration) {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut last_moved = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let Some(scan) = lookout.scan(&mut cx) else {
            return;
        };
        let now = Instant::now();
        if scan.moved || scan.busy {
            last_moved = now;
        }
        if now.duration_since(last_moved) >= linger {
            shared.parked.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            match lookout.scan(&mut cx) {
                None => return,
                Some(scan) if scan.moved || scan.busy => {
                    shared.parked.store(false, Ordering::Relaxed);
                }
                Some(_) => {
                    while shared.parked.load(Ordering::Acquire) && !stop.load(Ordering::Acquire) {
                        thread::park();
                    }
                }
            }
            last_moved = Instant::now();
            continue;
        }
        match scan.look_again {
            Some(soon) if soon < SPIN_BELOW => {
                let until = Instant::now() + soon / 2;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            // Parks rather than sleeps so that `stop` cuts the nap short;
            // `parked` stays false, so takers never pay to wake a nap.
            later => thread::park_timeout(later.map_or(MAX_NAP, |d| d.min(MAX_NAP))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU64;

    use super::*;

    /// A cursor that takers move; the lookout counts what it saw and
    /// records the cursor it last started work for.
    #[derive(Default)]
    struct Counter {
        cursor: AtomicU64,
        seen: AtomicU64,
        scans: AtomicU64,
        started: Mutex<Vec<u64>>,
    }

    impl Lookout for Counter {
        fn scan(&self, _: &mut Context<'_>) -> Option<Scan> {
            self.scans.fetch_add(1, Ordering::Relaxed);
            let now = self.cursor.load(Ordering::Relaxed);
            let moved = self.seen.swap(now, Ordering::Relaxed) != now;
            if moved {
                self.started.lock().unwrap().push(now);
            }
            Some(Scan {
                moved,
                look_again: Some(Duration::from_millis(1)),
                busy: false,
            })
        }
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting: {what}");
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// A watch over a fresh counter that parks after 20 ms without a move.
    fn started() -> (Arc<Counter>, Arc<Bell>, Watch) {
        let counter = Arc::new(Counter::default());
        let bell = Arc::new(Bell::default());
        let linger = Duration::from_millis(20);
        let watch = Watch::spawn("test-watch", bell.clone(), counter.clone(), linger).unwrap();
        (counter, bell, watch)
    }

    #[test]
    fn a_dropped_watch_has_left_its_thread_and_dropped_its_lookout() {
        for _ in 0..20 {
            let (counter, _bell, watch) = started();
            wait_for("a first scan", || counter.scans.load(Ordering::Relaxed) > 0);
            drop(watch);
            // The thread held the other reference; it is gone with it.
            assert_eq!(
                Arc::strong_count(&counter),
                1,
                "the thread outlived its watch"
            );
            let scans = counter.scans.load(Ordering::Relaxed);
            thread::sleep(Duration::from_millis(5));
            assert_eq!(
                counter.scans.load(Ordering::Relaxed),
                scans,
                "a scan after the drop"
            );
        }
    }

    #[test]
    fn a_parked_watch_is_woken_by_a_ring_and_a_busy_one_is_not_disturbed() {
        let (counter, bell, watch) = started();
        wait_for("the watch parks once nothing moves", || watch.is_parked());
        let scans = counter.scans.load(Ordering::Relaxed);
        thread::sleep(Duration::from_millis(50));
        assert_eq!(
            counter.scans.load(Ordering::Relaxed),
            scans,
            "a parked watch does not scan"
        );
        counter.cursor.store(7, Ordering::Relaxed);
        bell.ring();
        wait_for("the ring wakes it and it sees the move", || {
            counter.started.lock().unwrap().contains(&7)
        });
        assert!(!watch.is_parked());
        // Moves without a ring are seen by a watch that is awake.
        counter.cursor.store(8, Ordering::Relaxed);
        wait_for("an awake watch sees a move by itself", || {
            counter.started.lock().unwrap().contains(&8)
        });
        drop(watch);
    }

    #[test]
    fn no_wake_up_is_lost_between_the_last_scan_and_parking() {
        // Takers move the cursor and ring at random moments around the
        // watch's parking; each move must be seen.
        let (counter, bell, watch) = started();
        for round in 1..=20u64 {
            wait_for("the watch parks", || watch.is_parked());
            if round % 2 == 0 {
                thread::sleep(Duration::from_micros(round * 37));
            }
            counter.cursor.store(round, Ordering::Relaxed);
            bell.ring();
            wait_for("the move is seen", || {
                counter.started.lock().unwrap().contains(&round)
            });
        }
        drop(watch);
    }
}
