// Size: about 1,080 lines before the tests, some 290 of them docs. The ring's
// protocol (one producer storing slots and publishing `tail`, takers claiming
// with a CAS on `head`, the mark and lead bounds) is one invariant spread over
// the builder's checks, the take paths and the fill; the loom models at the
// bottom check it as a whole, so it is kept in one file.
//! [`Cached`]: Baidu uid-generator's CachedUidGenerator, a ring of IDs made ahead of
//! demand from whole ticks, with its lead over the clock bounded.
//!
//! # The ring
//!
//! Positions count IDs ever put (`tail`) and ever taken (`head`); position `p`
//! lives in slot `p % capacity`. Invariants:
//! - `head <= tail <= head + capacity`: the producer writes position `p` only
//!   when `p < head + capacity`, so it never overwrites an ID not yet taken;
//! - the ID at position `p + 1` is greater than the one at `p`: fills put the
//!   ticks in increasing order, each tick's sequence numbers in order, and never
//!   put a tick twice (a tick cut short by a full ring is finished, its unput
//!   IDs discarded);
//! - no tick put is at or past the high-water mark, past the layout's end, or
//!   starts more than `max_lead` after the clock's time at the fill.
//!
//! Takes are lock-free: one compare-and-swap on `head` per ID (per chunk of a
//! batch). Fills are single-producer, behind a mutex that no take ever waits on.
//!
//! # Differences from uid-generator
//!
//! - The lead over the clock is bounded ([`CachedBuilder::with_max_lead`]);
//!   uid-generator borrows future seconds without limit.
//! - A fill starts at the clock's tick when the clock has moved past the last
//!   filled tick, so IDs made under light load carry (about) the time they are
//!   taken, not the time the generator started.
//! - Refills put whole ticks while one fits; a tick is cut short (and the rest
//!   discarded and counted) only when the ring is below its padding threshold
//!   and has no room for a whole tick.
//! - Background refilling is a thread the caller starts and owns
//!   ([`Cached::spawn_refiller`]), or the caller's own task calling
//!   [`Cached::refill`]; without either, takes refill inline when the ring is empty.

use std::fmt;
use std::sync::Arc;
use std::sync::TryLockError;
use std::sync::atomic::{AtomicBool, AtomicU64 as StdAtomicU64};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use jiff::Timestamp;

use crate::batch::{IdBatch, IdRun};
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::id::Id;
use crate::layout::{Bits, Layout};
use crate::sync::{AtomicU64, Mutex, Ordering, lock};

#[cfg(loom)]
use loom::thread::yield_now;
#[cfg(not(loom))]
use std::thread::yield_now;

/// uid-generator's default: the ring holds `2^3` ticks' worth of IDs.
const DEFAULT_BOOST_POWER: u8 = 3;
/// uid-generator's default: refill when less than half the ring is left.
const DEFAULT_PADDING_PERCENT: u8 = 50;
/// The lead bound when none is given, unless the ring spans longer (see
/// [`CachedBuilder::with_max_lead`]).
const DEFAULT_MAX_LEAD: Duration = Duration::from_secs(1);
/// The largest ring: 2^24 slots, 128 MiB.
const MAX_SLOTS: u64 = 1 << 24;
/// The most IDs a batch reads before publishing them with one compare-and-swap:
/// small enough that single-ID takers racing the batch rarely make it start over.
const BATCH_CHUNK: usize = 512;
/// The longest a refiller sleeps before looking again at a ring it could not fill
/// (the clock may have moved, a [`ManualClock`](crate::clock::ManualClock) too).
const REFILL_RETRY_MAX: Duration = Duration::from_millis(100);

/// What a take does when the ring is empty and cannot be refilled yet, because
/// the next tick would start more than the allowed lead ahead of the clock.
///
/// A ring held back by the high-water mark or an exhausted layout fails at once
/// with [`Error::MarkReached`] or [`Error::LayoutExhausted`]: waiting for the
/// clock would not help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TakeRejection {
    /// Return [`Error::RingEmpty`] at once (uid-generator's default
    /// `RejectedUidHandler` throws).
    Fail,
    /// Wait for the clock to let a refill happen, for at most `max` in all, then
    /// return [`Error::RingEmpty`].
    Wait {
        /// The longest one call waits.
        max: Duration,
    },
}

/// Counters and fill level of a [`Cached`] generator. Read with [`Cached::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CachedStats {
    /// Slots in the ring.
    pub capacity: u64,
    /// IDs in the ring, ready to take.
    pub available: u64,
    /// Fills that put at least one ID (the pre-fill included).
    pub fills: u64,
    /// IDs put into the ring.
    pub ids_put: u64,
    /// IDs of ticks cut short by a full ring, never put and never issued
    /// (uid-generator's put rejection, here "discard and count").
    pub ids_discarded: u64,
    /// Calls to `next_id`/`next_ids` that found the ring empty.
    pub empty_takes: u64,
    /// Times a take waited for the clock ([`TakeRejection::Wait`]).
    pub take_waits: u64,
    /// Takes that failed with [`Error::RingEmpty`].
    pub rejected_takes: u64,
}

/// Statistics only, so plain std atomics even under loom: they take no part
/// in the ring's correctness and would only grow the model.
#[derive(Debug, Default)]
struct Counters {
    fills: StdAtomicU64,
    ids_put: StdAtomicU64,
    ids_discarded: StdAtomicU64,
    empty_takes: StdAtomicU64,
    take_waits: StdAtomicU64,
    rejected_takes: StdAtomicU64,
}

fn add(c: &StdAtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A builder for a [`Cached`] generator; see [`Cached::builder`].
#[derive(Debug, Clone)]
pub struct CachedBuilder {
    layout: Layout,
    datacenter: u32,
    worker: u32,
    clock: Option<Arc<dyn Clock>>,
    boost_power: u8,
    padding_percent: u8,
    max_lead: Option<Duration>,
    take_rejection: TakeRejection,
    schedule: Option<Duration>,
    start_after: Option<Timestamp>,
    mark: Option<Timestamp>,
}

impl CachedBuilder {
    /// Datacenter part of the node field (default 0).
    pub fn with_datacenter(mut self, datacenter: u32) -> CachedBuilder {
        self.datacenter = datacenter;
        self
    }

    /// Worker part of the node field (default 0).
    pub fn with_worker(mut self, worker: u32) -> CachedBuilder {
        self.worker = worker;
        self
    }

    /// The time source (default: a new [`MonotonicClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> CachedBuilder {
        self.clock = Some(clock);
        self
    }

    /// The ring holds `2^power` ticks' worth of IDs: `2^(sequence_bits + power)`
    /// slots (default 3, as uid-generator's `boostPower`).
    pub fn with_boost_power(mut self, power: u8) -> CachedBuilder {
        self.boost_power = power;
        self
    }

    /// Refill when fewer than `percent` % of the slots hold IDs (default 50, as
    /// uid-generator's `paddingFactor`); 0 refills only an empty ring (or on the
    /// schedule), 100 tops the ring up after every take.
    pub fn with_padding_factor(mut self, percent: u8) -> CachedBuilder {
        self.padding_percent = percent;
        self
    }

    /// How far ahead of the clock the IDs in the ring may be: no fill puts a tick
    /// that starts more than `max_lead` after the clock's time.
    ///
    /// The bound applies to whole ticks: a tick may be filled once its start is
    /// within `max_lead` of the clock. With 1-second ticks (Baidu's layout) a
    /// bound of 2 s lets the ring hold the clock's tick and the next two, and
    /// 1.5 s the next one or two, depending on where in its tick the clock is.
    /// The default is 1 s, or the ring's span (`2^boost_power` ticks) when
    /// that is longer, so the ring can always be filled: 8 s for 1-second ticks
    /// at the default boost power. Demand above the layout's cap is served from
    /// this lead; when it is used up, takes follow [`TakeRejection`].
    pub fn with_max_lead(mut self, max_lead: Duration) -> CachedBuilder {
        self.max_lead = Some(max_lead);
        self
    }

    /// What a take does when the ring is empty (default: [`TakeRejection::Fail`]).
    pub fn with_take_rejection(mut self, policy: TakeRejection) -> CachedBuilder {
        self.take_rejection = policy;
        self
    }

    /// Have the refiller thread also top the ring up every `interval`, whatever
    /// its fill level (uid-generator's `scheduleInterval`); `None` (the default)
    /// refills only when the ring drops below the padding factor.
    pub fn with_schedule(mut self, interval: Option<Duration>) -> CachedBuilder {
        self.schedule = interval;
        self
    }

    /// Start strictly above `mark`: no ID at or before that time is issued.
    ///
    /// Pass the high-water mark a worker store recorded for this worker ID; a
    /// restart with the clock behind, or a takeover of a dead node's worker ID,
    /// then cannot repeat an ID. A mark further ahead of the clock than the
    /// allowed lead leaves the ring empty until the clock catches up.
    pub fn with_start_after(mut self, mark: Timestamp) -> CachedBuilder {
        self.start_after = Some(mark);
        self
    }

    /// Fill no tick later than `mark` until [`Cached::advance_mark`] moves it.
    ///
    /// Without this the generator is unbounded (for tools and tests); servers
    /// always set it to what their worker store has persisted.
    pub fn with_mark(mut self, mark: Timestamp) -> CachedBuilder {
        self.mark = Some(mark);
        self
    }

    /// Checks the settings, makes the generator and pre-fills its ring.
    ///
    /// Reads the clock (to pre-fill) but does no I/O and starts nothing in the
    /// background.
    ///
    /// # Errors
    ///
    /// [`Error::NodeOutOfRange`] for a datacenter or worker outside the layout;
    /// [`Error::InvalidConfig`] for a ring above 2^24 slots, a padding factor
    /// above 100, or a zero wait bound or schedule interval;
    /// [`Error::LayoutExhausted`] when the layout has no tick left to fill and
    /// [`Error::ClockBeforeEpoch`] when the clock reads before the layout's epoch.
    /// A ring held back by the high-water mark is not an error: it stays empty
    /// until [`Cached::advance_mark`].
    pub fn build(self) -> Result<Cached> {
        let layout = self.layout;
        let node = layout.checked_node(self.datacenter, self.worker)?;
        let per_tick = layout.ids_per_tick();
        let capacity = per_tick
            .checked_shl(u32::from(self.boost_power))
            .unwrap_or(u64::MAX);
        if self.boost_power > 24 || capacity > MAX_SLOTS {
            return Err(Error::InvalidConfig(format!(
                "boost power {} gives a ring of 2^({} + {}) slots, above the 2^24 limit",
                self.boost_power,
                layout.sequence_bits(),
                self.boost_power
            )));
        }
        if self.padding_percent > 100 {
            return Err(Error::InvalidConfig(format!(
                "padding factor {}% is out of range (0..=100)",
                self.padding_percent
            )));
        }
        if matches!(self.take_rejection, TakeRejection::Wait { max } if max.is_zero()) {
            return Err(Error::InvalidConfig(
                "take rejection wait with a zero bound: use fail instead".to_owned(),
            ));
        }
        if self.schedule.is_some_and(|d| d.is_zero()) {
            return Err(Error::InvalidConfig(
                "refill schedule of 0s: give a positive interval or none".to_owned(),
            ));
        }
        let span = layout.unit().saturating_mul(1 << self.boost_power);
        let max_lead = self.max_lead.unwrap_or(DEFAULT_MAX_LEAD.max(span));
        let mut ring = Ring {
            bits: layout.bits(),
            node,
            per_tick,
            stride: layout.bits().seq_stride(),
            capacity,
            mask: capacity - 1,
            threshold: capacity * u64::from(self.padding_percent) / 100,
            epoch_ns: layout.epoch_nanos(),
            unit_ns: layout.unit_nanos(),
            ticks: layout.ticks(),
            max_lead,
            max_lead_ns: i64::try_from(max_lead.as_nanos()).unwrap_or(i64::MAX),
            take_rejection: self.take_rejection,
            schedule: self.schedule,
            clock: self
                .clock
                .unwrap_or_else(|| Arc::new(MonotonicClock::new())),
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            slots: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            producer: Mutex::new(Producer {
                tail: 0,
                next_tick: 0,
            }),
            filled_end: StdAtomicU64::new(0),
            mark_end: StdAtomicU64::new(u64::MAX),
            refill_wanted: CachePadded::new(AtomicBool::new(false)),
            refiller: std::sync::Mutex::new(None),
            counters: Counters::default(),
            layout,
        };
        if let Some(mark) = self.start_after.filter(|&mark| mark >= layout.epoch()) {
            let next_tick = ring.tick_of_time(mark).saturating_add(1);
            if next_tick >= ring.ticks {
                return Err(layout.exhausted());
            }
            lock(&ring.producer).next_tick = next_tick;
        }
        if let Some(mark) = self.mark {
            *ring.mark_end.get_mut() = ring.mark_end_for(mark);
        }
        let filled = ring.fill(&mut lock(&ring.producer));
        // A ring held back by the mark or the lead is fine: it fills later.
        if let (0, Some(blocked @ (Blocked::Exhausted | Blocked::BeforeEpoch { .. }))) =
            (filled.put, filled.blocked)
        {
            return Err(ring.blocked_error(blocked));
        }
        Ok(Cached {
            ring: Arc::new(ring),
        })
    }
}

/// Baidu's CachedUidGenerator: IDs of whole ticks made ahead of demand into a
/// ring buffer, handed out lock-free, with a bounded lead over the clock.
///
/// - **Thread-safe**: `Send + Sync`, shared by `&self`. Taking is lock-free (one
///   compare-and-swap per ID); filling is single-producer behind a lock that
///   takes never wait on.
/// - **Unique**: never issues the same ID twice, however the clock moves,
///   provided no other generator uses the same layout and node. A tick is put
///   into the ring at most once; IDs of a tick cut short by a full ring are
///   discarded (and counted in [`CachedStats::ids_discarded`]), never put later.
/// - **Monotonic**: IDs leave the ring in the order they were put, and are put in
///   increasing order, so each ID is greater than every ID taken before it, on
///   any thread.
/// - **Refilled** by a background thread the caller starts
///   ([`Cached::spawn_refiller`]) when less than the padding factor is left, and
///   on a schedule if one is set; or by the caller calling [`Cached::refill`];
///   and inline by a take that finds the ring empty. Construction pre-fills.
/// - **Ring empty and the lead used up** (demand above the layout's cap for
///   longer than the lead absorbs): see [`TakeRejection`]; a failed take returns
///   [`Error::RingEmpty`]. Waiting sleeps the calling thread only, holding nothing.
/// - **Lead bounded**: no fill puts a tick that starts more than `max_lead`
///   after the clock ([`CachedBuilder::with_max_lead`]); [`Cached::lead`]
///   reports it. Fills start at the clock's tick when it is past the last filled
///   tick, so IDs under light load carry about the time they are taken (IDs
///   already in the ring keep their time: at most the ring's span old).
/// - **Clock goes back**: fills continue after the last filled tick as long as
///   that stays within the lead bound of the clock, and stop beyond: the ring
///   drains and takes follow [`TakeRejection`] until the clock catches up.
///   Never a repeat. A clock that jumps forward makes the next fill jump with it.
/// - **Bounded by a high-water mark** when one is set: no tick past the mark is
///   filled until [`Cached::advance_mark`] moves it ([`Error::MarkReached`] once
///   the ring is empty).
/// - **Layout run out**: [`Error::LayoutExhausted`] once the ring is empty, never
///   a negative or wrapped ID.
///
/// # Examples
///
/// ```
/// use idmint_core::{Cached, Layout};
/// use std::time::Duration;
///
/// let generator = Cached::builder(Layout::TWITTER).with_worker(7).build()?;
/// assert_eq!(generator.capacity(), 4096 << 3);
/// assert_eq!(generator.available(), generator.capacity(), "pre-filled");
///
/// let refiller = generator.spawn_refiller();
/// let a = generator.next_id()?;
/// let b = generator.next_id()?;
/// assert!(a < b);
/// assert_eq!(Layout::TWITTER.decode(b.get())?.worker, 7);
/// assert!(generator.lead() <= Duration::from_secs(1));
/// drop(refiller); // stops and joins the refiller thread
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # References
///
/// baidu/uid-generator, `CachedUidGenerator`, `RingBuffer` and `BufferPaddingExecutor`
/// (`boostPower = 3`, `paddingFactor = 50`, `scheduleInterval`, put and take
/// rejection handlers).
pub struct Cached {
    ring: Arc<Ring>,
}

/// Everything a [`Cached`] generator and its refiller thread share.
struct Ring {
    layout: Layout,
    bits: Bits,
    node: u64,
    per_tick: u64,
    /// Distance between consecutive sequence numbers' IDs within a tick.
    stride: u64,
    capacity: u64,
    mask: u64,
    /// Below this many IDs left, takes ask the refiller for a fill.
    threshold: u64,
    epoch_ns: i64,
    unit_ns: i64,
    ticks: u64,
    max_lead: Duration,
    max_lead_ns: i64,
    take_rejection: TakeRejection,
    schedule: Option<Duration>,
    clock: Arc<dyn Clock>,
    /// Position of the next take (= IDs ever taken). Written only by takers' CAS.
    head: CachePadded<AtomicU64>,
    /// Position of the next put (= IDs ever put). Written only by the producer.
    tail: CachePadded<AtomicU64>,
    slots: Box<[AtomicU64]>,
    /// The producer's state. A mutex, not a lock-free protocol, because only
    /// fills take it (the refiller, `refill`, or a take that found the ring empty
    /// and got it with `try_lock`), each for a bounded burst of stores and never
    /// while waiting; takes of IDs never touch it. Single-producer fills keep
    /// `tail` a plain store and make "each tick put once" trivially true.
    producer: Mutex<Producer>,
    /// 1 + the last tick filled (0: none yet), for [`Cached::lead`].
    filled_end: StdAtomicU64,
    /// Ticks below this may be filled (the high-water mark's tick + 1).
    mark_end: StdAtomicU64,
    /// Set by takes below the threshold (and by `advance_mark`), cleared by the
    /// refiller before it fills: at most one wake-up per refill cycle, and one
    /// load per take when no refiller runs.
    refill_wanted: CachePadded<AtomicBool>,
    /// The refiller thread to wake, if one runs. A std lock, not a modelled one:
    /// taken once per refill cycle, never on the ring's correctness path.
    refiller: std::sync::Mutex<Option<Thread>>,
    counters: Counters,
}

struct Producer {
    /// Mirror of `Ring::tail`, which only the producer writes.
    tail: u64,
    /// The lowest tick never put: fills start at the later of this and the clock.
    next_tick: u64,
}

/// Why a fill stopped before the ring was full.
#[derive(Debug, Clone, Copy)]
enum Blocked {
    /// The next tick starts more than `max_lead` ahead of the clock; it becomes
    /// fillable `in_ns` from now.
    Lead { in_ns: i64 },
    /// The next tick is past the high-water mark.
    Mark { tick: u64 },
    /// The next tick is past the layout's end.
    Exhausted,
    /// The clock reads before the layout's epoch.
    BeforeEpoch { now_ns: i64 },
}

struct Filled {
    put: u64,
    blocked: Option<Blocked>,
}

impl Cached {
    /// The largest batch [`Cached::next_ids`] hands out in one call.
    pub const MAX_BATCH: u64 = 10_000_000;

    /// Starts building a generator for `layout`.
    pub fn builder(layout: Layout) -> CachedBuilder {
        CachedBuilder {
            layout,
            datacenter: 0,
            worker: 0,
            clock: None,
            boost_power: DEFAULT_BOOST_POWER,
            padding_percent: DEFAULT_PADDING_PERCENT,
            max_lead: None,
            take_rejection: TakeRejection::Fail,
            schedule: None,
            start_after: None,
            mark: None,
        }
    }

    /// Issues one ID.
    ///
    /// # Errors
    ///
    /// When the ring is empty and cannot be refilled: [`Error::RingEmpty`] (the
    /// lead is used up; see [`TakeRejection`]), [`Error::MarkReached`],
    /// [`Error::LayoutExhausted`] or [`Error::ClockBeforeEpoch`]. An error
    /// changes nothing: the next call starts afresh.
    #[inline]
    pub fn next_id(&self) -> Result<Id> {
        let ring = &*self.ring;
        match ring.try_take() {
            Some((id, left)) => {
                ring.after_take(left);
                Ok(Id::from_raw(id))
            }
            None => ring.next_id_slow(),
        }
    }

    /// Takes `n` IDs and returns them as runs.
    ///
    /// IDs are taken in chunks of up to 512, one compare-and-swap each, and
    /// refilled as for [`Cached::next_id`] when the ring runs dry.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCount`] when `n` is 0 or above [`Cached::MAX_BATCH`], and
    /// the errors of [`Cached::next_id`]. IDs taken before an error are dropped,
    /// never handed out again.
    pub fn next_ids(&self, n: u64) -> Result<IdBatch> {
        if n == 0 || n > Cached::MAX_BATCH {
            return Err(Error::InvalidCount {
                count: n,
                max: Cached::MAX_BATCH,
            });
        }
        let ring = &*self.ring;
        let mut batch = IdBatch::with_capacity((n / ring.per_tick + 2).min(4096) as usize);
        // The run being built: (first, count). Pushed when the next ID does not extend it.
        let mut open: Option<(u64, u64)> = None;
        let mut chunk = [0u64; BATCH_CHUNK];
        let mut remaining = n;
        let mut waited = Duration::ZERO;
        let mut found_empty = false;
        while remaining > 0 {
            let Some((k, left)) = ring.try_take_chunk(remaining, &mut chunk) else {
                if !found_empty {
                    found_empty = true;
                    add(&ring.counters.empty_takes, 1);
                    ring.want_refill();
                }
                ring.await_refill(&mut waited)?;
                continue;
            };
            ring.after_take(left);
            for &id in &chunk[..k] {
                open = match open {
                    Some((first, count)) if id == first + count * ring.stride => {
                        Some((first, count + 1))
                    }
                    Some((first, count)) => {
                        batch.push(IdRun::new(first, count, ring.stride));
                        Some((id, 1))
                    }
                    None => Some((id, 1)),
                };
            }
            remaining -= k as u64;
        }
        if let Some((first, count)) = open {
            batch.push(IdRun::new(first, count, ring.stride));
        }
        Ok(batch)
    }

    /// Fills the ring now, on the calling thread, and returns how many IDs it put.
    ///
    /// For callers that drive refilling from their own task instead of
    /// [`Cached::spawn_refiller`]. Puts whole ticks while one fits, and part of a
    /// tick only when the ring is below the padding factor with no room for a
    /// whole one. Waits for the fill lock if another fill holds it, nothing else.
    ///
    /// # Errors
    ///
    /// When nothing could be put into a ring that has room: [`Error::MarkReached`],
    /// [`Error::LayoutExhausted`] or [`Error::ClockBeforeEpoch`]. A fill held
    /// back only by the lead bound, or a ring with no room, is not an error: it
    /// returns `Ok(0)`.
    pub fn refill(&self) -> Result<u64> {
        let ring = &*self.ring;
        let filled = ring.fill(&mut lock(&ring.producer));
        match filled.blocked {
            Some(
                blocked @ (Blocked::Mark { .. } | Blocked::Exhausted | Blocked::BeforeEpoch { .. }),
            ) if filled.put == 0 => Err(ring.blocked_error(blocked)),
            _ => Ok(filled.put),
        }
    }

    /// Starts a thread that refills the ring when takes leave less than the
    /// padding factor in it, and on the schedule if one is set.
    ///
    /// The thread runs until the returned guard is dropped, which stops and joins
    /// it. Run one refiller per generator: a second one works but only the latest
    /// is woken by takes.
    ///
    /// # Panics
    ///
    /// When the operating system cannot create a thread (as `std::thread::spawn`).
    pub fn spawn_refiller(&self) -> RefillerGuard {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let ring = Arc::clone(&self.ring);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("idmint-refill".to_owned())
                .spawn(move || ring.run_refiller(&stop))
                .expect("failed to spawn the cached generator's refiller thread")
        };
        // Registered after the start: the thread checks `refill_wanted` before
        // it first parks, so a request made in between is not lost.
        *std_lock(&self.ring.refiller) = Some(handle.thread().clone());
        RefillerGuard {
            ring: Arc::clone(&self.ring),
            stop,
            handle: Some(handle),
        }
    }

    /// Slots in the ring: `2^(sequence_bits + boost_power)`.
    pub fn capacity(&self) -> u64 {
        self.ring.capacity
    }

    /// IDs in the ring, ready to take (a snapshot; takes and fills move it).
    pub fn available(&self) -> u64 {
        self.ring.available()
    }

    /// How far the last filled tick's start is ahead of the clock (zero when it
    /// is not ahead). At most [`Cached::max_lead`], unless the clock has stepped
    /// back since that tick was filled.
    pub fn lead(&self) -> Duration {
        let end = self.ring.filled_end.load(Ordering::Acquire);
        if end == 0 {
            return Duration::ZERO;
        }
        let ahead = self
            .ring
            .tick_start_ns(end - 1)
            .saturating_sub(self.ring.clock.now_nanos());
        Duration::from_nanos(ahead.max(0) as u64)
    }

    /// The configured bound on [`Cached::lead`].
    pub fn max_lead(&self) -> Duration {
        self.ring.max_lead
    }

    /// Counters of fills and takes so far, and the fill level.
    pub fn stats(&self) -> CachedStats {
        let c = &self.ring.counters;
        let r = |a: &StdAtomicU64| a.load(Ordering::Relaxed);
        CachedStats {
            capacity: self.ring.capacity,
            available: self.ring.available(),
            fills: r(&c.fills),
            ids_put: r(&c.ids_put),
            ids_discarded: r(&c.ids_discarded),
            empty_takes: r(&c.empty_takes),
            take_waits: r(&c.take_waits),
            rejected_takes: r(&c.rejected_takes),
        }
    }

    /// Allows fills up to and including `mark` (the worker store has persisted
    /// it), and wakes the refiller. The mark only moves forward; an earlier value
    /// is ignored.
    pub fn advance_mark(&self, mark: Timestamp) {
        let end = self.ring.mark_end_for(mark);
        self.ring.mark_end.fetch_max(end, Ordering::AcqRel);
        self.ring.wake_refiller();
    }

    /// The current high-water mark (the last instant of the last tick allowed),
    /// or `None` when the generator is unbounded.
    pub fn mark(&self) -> Option<Timestamp> {
        let end = self.ring.mark_end.load(Ordering::Acquire);
        (end != u64::MAX).then(|| self.ring.tick_end_time(end))
    }

    /// The generator's layout.
    pub fn layout(&self) -> &Layout {
        &self.ring.layout
    }

    /// The clock the generator reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.ring.clock
    }
}

impl fmt::Debug for Cached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not derived: the ring's slots would print every ID in it.
        let ring = &*self.ring;
        f.debug_struct("Cached")
            .field("layout", &ring.layout)
            .field("capacity", &ring.capacity)
            .field("available", &ring.available())
            .field("threshold", &ring.threshold)
            .field("max_lead", &ring.max_lead)
            .field("take_rejection", &ring.take_rejection)
            .field("schedule", &ring.schedule)
            .field("mark", &self.mark())
            .finish_non_exhaustive()
    }
}

/// Owns a [`Cached`] generator's refiller thread; dropping it stops and joins
/// the thread. See [`Cached::spawn_refiller`].
#[must_use = "dropping the guard stops the refiller at once"]
pub struct RefillerGuard {
    ring: Arc<Ring>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl fmt::Debug for RefillerGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefillerGuard")
            .field("thread", &self.handle.as_ref().map(|h| h.thread().id()))
            .finish()
    }
}

impl Drop for RefillerGuard {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        self.stop.store(true, Ordering::Release);
        {
            let mut registered = std_lock(&self.ring.refiller);
            if registered
                .as_ref()
                .is_some_and(|t| t.id() == handle.thread().id())
            {
                *registered = None;
            }
        }
        handle.thread().unpark();
        if let Err(panic) = handle.join() {
            // Surface a refiller panic, unless already unwinding (that would abort).
            if !std::thread::panicking() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

fn std_lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Ring {
    fn available(&self) -> u64 {
        let head = self.head.load(Ordering::Acquire);
        self.tail.load(Ordering::Acquire).saturating_sub(head)
    }

    /// Takes the ID at the cursor: `Some((id, IDs left after it))`, or `None` when
    /// the ring is empty.
    ///
    /// The slot is read *before* the compare-and-swap that claims it, and the
    /// value is used only if the CAS succeeds. Why that is safe:
    /// - The value is the one put at position `head`: the producer stored it
    ///   before its Release store of a `tail > head`, which our Acquire load of
    ///   `tail` read; and any later store to the slot is for position
    ///   `head + capacity` or beyond (see next point).
    /// - The producer writes position `p` only after an Acquire load of
    ///   `head` shows `p < head + capacity`. To overwrite our slot it must see
    ///   `head > h`, a value written by our successful CAS `h -> h+1` (AcqRel)
    ///   or by a later RMW on `head` in its release sequence; our slot read is
    ///   sequenced before that CAS, so it happens before the overwrite and cannot
    ///   see it. If instead another taker moved `head` past `h` first, `head`
    ///   never returns to `h` (positions are never reused), our CAS fails and we
    ///   drop what we read.
    #[inline]
    fn try_take(&self) -> Option<(u64, u64)> {
        // Acquire: a `head` written by another taker comes with that taker's
        // view of `tail`, so the `tail` we load next is at least `head`.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let tail = self.tail.load(Ordering::Acquire);
            if head >= tail {
                return None;
            }
            let id = self.slots[(head & self.mask) as usize].load(Ordering::Relaxed);
            match self.head.compare_exchange_weak(
                head,
                head + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some((id, tail - head - 1)),
                Err(actual) => head = actual,
            }
        }
    }

    /// Takes up to `want` (and at most a chunk of) IDs into `out` with one CAS:
    /// `Some((how many, IDs left))`, or `None` when the ring is empty. The same
    /// read-then-claim argument as [`Ring::try_take`] holds for every position
    /// of the chunk: all are below the `head` the CAS moves past.
    fn try_take_chunk(&self, want: u64, out: &mut [u64; BATCH_CHUNK]) -> Option<(usize, u64)> {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let tail = self.tail.load(Ordering::Acquire);
            if head >= tail {
                return None;
            }
            let k = want.min(tail - head).min(BATCH_CHUNK as u64);
            for (i, slot) in out.iter_mut().take(k as usize).enumerate() {
                *slot =
                    self.slots[((head + i as u64) & self.mask) as usize].load(Ordering::Relaxed);
            }
            match self.head.compare_exchange_weak(
                head,
                head + k,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some((k as usize, tail - head - k)),
                Err(actual) => head = actual,
            }
        }
    }

    #[inline]
    fn after_take(&self, left: u64) {
        if left < self.threshold {
            self.want_refill();
        }
    }

    /// Asks the refiller, if one runs, for a fill, unless a request is pending.
    #[inline]
    fn want_refill(&self) {
        // The load first: once set, the flag stays set until a refiller clears
        // it, so takes without a refiller pay one shared read, not a write.
        if !self.refill_wanted.load(Ordering::Relaxed)
            && !self.refill_wanted.swap(true, Ordering::AcqRel)
        {
            self.unpark_refiller();
        }
    }

    /// Asks the refiller for a fill even if a request is pending: something
    /// that held a fill back (the mark) has changed.
    fn wake_refiller(&self) {
        self.refill_wanted.store(true, Ordering::Release);
        self.unpark_refiller();
    }

    fn unpark_refiller(&self) {
        if let Some(thread) = std_lock(&self.refiller).as_ref() {
            thread.unpark();
        }
    }

    #[cold]
    fn next_id_slow(&self) -> Result<Id> {
        add(&self.counters.empty_takes, 1);
        self.want_refill();
        let mut waited = Duration::ZERO;
        loop {
            if let Some((id, left)) = self.try_take() {
                self.after_take(left);
                return Ok(Id::from_raw(id));
            }
            self.await_refill(&mut waited)?;
        }
    }

    /// The ring was found empty: fill it inline if no one else is filling, else
    /// let whoever is filling run; when nothing can be put, wait for the clock
    /// or fail, as the policy says. `Ok` means "try taking again".
    fn await_refill(&self, waited: &mut Duration) -> Result<()> {
        let mut producer = match self.producer.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // A fill is running and publishes tick by tick; give it the CPU.
                yield_now();
                return Ok(());
            }
        };
        let filled = self.fill(&mut producer);
        drop(producer);
        if filled.put > 0 || self.available() > 0 {
            return Ok(());
        }
        let Some(blocked) = filled.blocked else {
            // Nothing put into an empty ring yet not blocked: takes emptied and
            // refilled it meanwhile; look again.
            return Ok(());
        };
        match (blocked, self.take_rejection) {
            (Blocked::Lead { in_ns }, TakeRejection::Wait { max }) if *waited < max => {
                let d = Duration::from_nanos(in_ns.max(1) as u64).min(max - *waited);
                add(&self.counters.take_waits, 1);
                self.clock.wait(d);
                *waited += d;
                Ok(())
            }
            (Blocked::Lead { .. }, _) => {
                add(&self.counters.rejected_takes, 1);
                Err(Error::RingEmpty {
                    waited: *waited,
                    max_lead: self.max_lead,
                })
            }
            (blocked, _) => Err(self.blocked_error(blocked)),
        }
    }

    fn blocked_error(&self, blocked: Blocked) -> Error {
        match blocked {
            Blocked::Lead { .. } => Error::RingEmpty {
                waited: Duration::ZERO,
                max_lead: self.max_lead,
            },
            Blocked::Mark { tick } => Error::MarkReached {
                mark: self.tick_end_time(self.mark_end.load(Ordering::Acquire)),
                wanted: self.layout.time_of_tick(tick),
            },
            Blocked::Exhausted => self.layout.exhausted(),
            Blocked::BeforeEpoch { now_ns } => Error::ClockBeforeEpoch {
                now: Timestamp::from_nanosecond(i128::from(now_ns)).unwrap_or(Timestamp::MIN),
                epoch: self.layout.epoch(),
            },
        }
    }

    /// Puts ticks into the ring, starting at the later of the next unput tick and
    /// the clock's tick, until the ring is full (or has no room for a whole tick
    /// and is not below the padding threshold) or a tick may not be put.
    fn fill(&self, producer: &mut Producer) -> Filled {
        let now_ns = self.clock.now_nanos();
        let since = now_ns.saturating_sub(self.epoch_ns);
        if since < 0 {
            return Filled {
                put: 0,
                blocked: Some(Blocked::BeforeEpoch { now_ns }),
            };
        }
        let clock_tick = (since / self.unit_ns) as u64;
        // The last tick that starts no more than max_lead after now.
        let lead_tick = (since.saturating_add(self.max_lead_ns) / self.unit_ns) as u64;
        let mark_end = self.mark_end.load(Ordering::Acquire);
        let mut put = 0;
        let blocked = loop {
            // Acquire pairs with takers' AcqRel CAS on `head`: every read of a
            // slot below `head` happened before the stores below overwrite it.
            let head = self.head.load(Ordering::Acquire);
            let free = head + self.capacity - producer.tail;
            if free == 0 {
                break None;
            }
            let tick = producer.next_tick.max(clock_tick);
            if tick >= self.ticks {
                break Some(Blocked::Exhausted);
            }
            if tick >= mark_end {
                break Some(Blocked::Mark { tick });
            }
            if tick > lead_tick {
                let in_ns = self
                    .tick_start_ns(tick)
                    .saturating_sub(self.max_lead_ns)
                    .saturating_sub(now_ns);
                break Some(Blocked::Lead { in_ns });
            }
            let n = if free >= self.per_tick {
                self.per_tick
            } else if self.capacity - free < self.threshold.max(1) {
                // Below the threshold with no room for a whole tick: put part of
                // it; the rest of the tick is discarded, never put later.
                free
            } else {
                break None;
            };
            let first = self.bits.compose(tick, self.node, 0);
            for i in 0..n {
                let slot_idx = ((producer.tail + i) & self.mask) as usize;
                self.slots[slot_idx].store(first + i * self.stride, Ordering::Relaxed);
            }
            producer.tail += n;
            producer.next_tick = tick + 1;
            self.filled_end.store(tick + 1, Ordering::Release);
            // Release publishes the slot stores above to takers, whose Acquire
            // load of `tail` reads this (or a later) value. Published per tick so
            // takers waiting on an empty ring start before the fill ends.
            self.tail.store(producer.tail, Ordering::Release);
            put += n;
            if n < self.per_tick {
                add(&self.counters.ids_discarded, self.per_tick - n);
            }
        };
        if put > 0 {
            add(&self.counters.fills, 1);
            add(&self.counters.ids_put, put);
        }
        Filled { put, blocked }
    }

    /// The refiller thread's loop: fill when asked (or on the schedule), retry a
    /// ring that still needs IDs once the clock may allow more, park otherwise.
    fn run_refiller(&self, stop: &AtomicBool) {
        let mut next_scheduled = self.schedule.map(|d| Instant::now() + d);
        let mut retry_at: Option<Instant> = None;
        while !stop.load(Ordering::Acquire) {
            let now = Instant::now();
            let wanted = self.refill_wanted.swap(false, Ordering::AcqRel);
            let scheduled = next_scheduled.is_some_and(|t| now >= t);
            let retry = retry_at.is_some_and(|t| now >= t);
            if wanted || scheduled || retry {
                let filled = self.fill(&mut lock(&self.producer));
                if scheduled {
                    next_scheduled = self.schedule.map(|interval| now + interval);
                }
                let needs_more = self.available() < self.threshold.max(1);
                if needs_more && filled.blocked.is_some() {
                    // Leave a request pending so takes below the threshold don't
                    // wake us for every ID: we retry on our own when the clock
                    // may allow more, and advance_mark wakes us regardless. An
                    // exhausted layout never gets better.
                    self.refill_wanted.store(true, Ordering::Release);
                }
                retry_at = match filled.blocked {
                    Some(Blocked::Lead { in_ns }) if needs_more => {
                        Some(now + Duration::from_nanos(in_ns.max(1) as u64).min(REFILL_RETRY_MAX))
                    }
                    Some(Blocked::BeforeEpoch { .. }) if needs_more => Some(now + REFILL_RETRY_MAX),
                    _ => None,
                };
            }
            match next_scheduled.into_iter().chain(retry_at).min() {
                Some(deadline) => {
                    std::thread::park_timeout(deadline.saturating_duration_since(Instant::now()))
                }
                None => std::thread::park(),
            }
        }
    }

    fn tick_of_time(&self, t: Timestamp) -> u64 {
        let ns = i64::try_from(t.as_nanosecond()).unwrap_or(i64::MAX);
        (ns.saturating_sub(self.epoch_ns).max(0) / self.unit_ns) as u64
    }

    fn tick_start_ns(&self, tick: u64) -> i64 {
        self.epoch_ns.saturating_add(
            i64::try_from(tick)
                .unwrap_or(i64::MAX)
                .saturating_mul(self.unit_ns),
        )
    }

    fn mark_end_for(&self, mark: Timestamp) -> u64 {
        if mark < self.layout.epoch() {
            0
        } else {
            self.tick_of_time(mark).saturating_add(1)
        }
    }

    /// The last instant before tick `end` starts.
    fn tick_end_time(&self, end: u64) -> Timestamp {
        self.layout
            .time_of_tick(end)
            .saturating_sub(jiff::SignedDuration::from_nanos(1))
            .unwrap_or(Timestamp::MIN)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::layout::LayoutSpec;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// 1 ms ticks of 16 IDs, 2 datacenter and 3 worker bits, epoch 2020-01-01.
    fn small_layout() -> Layout {
        LayoutSpec::new(41, ts("2020-01-01T00:00:00Z"), 4)
            .with_datacenter_bits(2)
            .with_worker_bits(3)
            .build()
            .unwrap()
    }

    /// A manual clock at the start of a tick of `small_layout`.
    fn clock() -> ManualClock {
        ManualClock::at(ts("2026-03-01T12:00:00Z"))
    }

    fn tick_now(layout: &Layout, clock: &ManualClock) -> u64 {
        layout
            .tick_at(Timestamp::from_nanosecond(i128::from(clock.now_nanos())).unwrap())
            .unwrap()
    }

    fn small(clock: &ManualClock) -> CachedBuilder {
        Cached::builder(small_layout())
            .with_datacenter(2)
            .with_worker(5)
            .with_clock(Arc::new(clock.clone()))
    }

    fn drain(cached: &Cached) -> Vec<u64> {
        let mut ids = Vec::new();
        while let Some((id, _)) = cached.ring.try_take() {
            ids.push(id);
        }
        ids
    }

    fn strictly_increasing(ids: &[u64]) -> bool {
        ids.windows(2).all(|w| w[0] < w[1])
    }

    /// Polls `f` for up to 10 s of real time.
    fn eventually(mut f: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        f()
    }

    #[test]
    fn prefill_fills_capacity_with_whole_ticks() {
        let clock = clock();
        let layout = Layout::TWITTER;
        let cached = Cached::builder(layout)
            .with_datacenter(3)
            .with_worker(17)
            .with_clock(Arc::new(clock.clone()))
            .build()
            .unwrap();
        assert_eq!(cached.capacity(), 4096 << 3);
        assert_eq!(cached.available(), cached.capacity());
        let stats = cached.stats();
        assert_eq!(
            (stats.fills, stats.ids_put, stats.ids_discarded),
            (1, 4096 << 3, 0)
        );
        assert_eq!(
            cached.lead(),
            Duration::from_millis(7),
            "8 ticks from the clock's"
        );
        let first = layout.decode(cached.next_id().unwrap().get()).unwrap();
        assert_eq!(
            first.tick,
            tick_now(&layout, &clock),
            "starts at the clock's tick"
        );
        assert_eq!((first.datacenter, first.worker, first.sequence), (3, 17, 0));
        let rest = drain(&cached);
        assert_eq!(rest.len() as u64, cached.capacity() - 1);
        assert!(rest[0] > first.id.get() && strictly_increasing(&rest));
        let last = layout.decode(*rest.last().unwrap()).unwrap();
        assert_eq!((last.tick - first.tick, last.sequence), (7, 4095));
    }

    #[test]
    fn ids_are_unique_and_increasing_across_two_threads() {
        const PER_THREAD: usize = 1_000_000;
        let clock = clock();
        let layout = Layout::TWITTER;
        // 2,000,000 IDs are 489 ticks: within the default 1 s lead of a clock that stands still.
        let cached = Cached::builder(layout)
            .with_datacenter(1)
            .with_worker(9)
            .with_clock(Arc::new(clock.clone()))
            .build()
            .unwrap();
        let refiller = cached.spawn_refiller();
        let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        (0..PER_THREAD)
                            .map(|_| cached.next_id().unwrap().get())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        drop(refiller);
        let mut all = Vec::with_capacity(2 * PER_THREAD);
        for ids in &per_thread {
            assert!(strictly_increasing(ids), "each thread sees increasing IDs");
            all.extend_from_slice(ids);
        }
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 2 * PER_THREAD, "no duplicates");
        for &id in all.iter().step_by(9973) {
            let d = layout.decode(id).unwrap();
            assert_eq!((d.datacenter, d.worker), (1, 9));
        }
        assert!(cached.lead() <= cached.max_lead());
    }

    #[test]
    fn batches_and_single_takes_race_without_overlap() {
        let clock = clock();
        let cached = Cached::builder(Layout::TWITTER)
            .with_clock(Arc::new(clock.clone()))
            .build()
            .unwrap();
        let _refiller = cached.spawn_refiller();
        let (singles, batches) = std::thread::scope(|s| {
            let singles = s.spawn(|| {
                (0..200_000)
                    .map(|_| cached.next_id().unwrap().get())
                    .collect::<Vec<_>>()
            });
            let batches = s.spawn(|| {
                (0..200)
                    .flat_map(|_| {
                        cached
                            .next_ids(997)
                            .unwrap()
                            .iter()
                            .map(Id::get)
                            .collect::<Vec<_>>()
                    })
                    .collect::<Vec<_>>()
            });
            (singles.join().unwrap(), batches.join().unwrap())
        });
        assert!(strictly_increasing(&singles) && strictly_increasing(&batches));
        let mut all: Vec<u64> = singles.into_iter().chain(batches).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 200_000 + 200 * 997, "no duplicates");
    }

    #[test]
    fn lead_never_exceeds_the_bound_and_fail_rejects() {
        let clock = clock();
        let layout = small_layout();
        let cached = small(&clock)
            .with_boost_power(2)
            .with_max_lead(Duration::from_millis(10))
            .build()
            .unwrap();
        let now_tick = tick_now(&layout, &clock);
        let mut ids = Vec::new();
        let err = loop {
            match cached.next_id() {
                Ok(id) => {
                    assert!(
                        cached.lead() <= Duration::from_millis(10),
                        "{:?}",
                        cached.lead()
                    );
                    assert!(layout.decode(id.get()).unwrap().tick <= now_tick + 10);
                    ids.push(id.get());
                }
                Err(e) => break e,
            }
        };
        assert_eq!(ids.len(), 11 * 16, "the clock's tick and the 10 after it");
        assert!(strictly_increasing(&ids));
        assert_eq!(
            err,
            Error::RingEmpty {
                waited: Duration::ZERO,
                max_lead: Duration::from_millis(10)
            }
        );
        assert!(err.is_transient());
        assert_eq!(cached.lead(), Duration::from_millis(10));
        let stats = cached.stats();
        assert_eq!(stats.rejected_takes, 1);
        assert!(stats.empty_takes >= 1);
        assert!(matches!(cached.next_ids(5), Err(Error::RingEmpty { .. })));

        // The clock moves on one tick: one more tick can be filled.
        clock.advance(Duration::from_millis(1));
        let more = cached.next_ids(100);
        assert!(
            matches!(more, Err(Error::RingEmpty { .. })),
            "16 IDs, not 100"
        );
        let next = cached.next_id();
        assert!(next.is_err(), "the 16 went to the failed batch, dropped");
        clock.advance(Duration::from_millis(1));
        let id = cached.next_id().unwrap();
        assert_eq!(layout.decode(id.get()).unwrap().tick, now_tick + 12);
    }

    #[test]
    fn wait_policy_waits_for_the_clock_then_gives_up() {
        let clock = clock();
        let layout = small_layout();
        let cached = small(&clock)
            .with_boost_power(2)
            .with_max_lead(Duration::from_millis(10))
            .with_take_rejection(TakeRejection::Wait {
                max: Duration::from_millis(5),
            })
            .build()
            .unwrap();
        let start = clock.now_nanos();
        let mut last = 0;
        // Demand far above the cap: the manual clock moves only when takes wait.
        for _ in 0..2000 {
            let id = cached.next_id().unwrap().get();
            assert!(id > last);
            last = id;
            assert!(cached.lead() <= Duration::from_millis(10));
            let d = layout.decode(id).unwrap();
            assert!(d.tick <= tick_now(&layout, &clock) + 10);
        }
        assert!(
            clock.now_nanos() > start,
            "takes waited by moving the clock"
        );
        assert!(cached.stats().take_waits > 0);

        clock.set_auto_advance(false);
        let err = (0..10_000).find_map(|_| cached.next_id().err()).unwrap();
        assert_eq!(
            err,
            Error::RingEmpty {
                waited: Duration::from_millis(5),
                max_lead: Duration::from_millis(10)
            }
        );
    }

    #[test]
    fn clock_stepping_back_never_repeats() {
        let clock = clock();
        let layout = small_layout();
        let cached = small(&clock)
            .with_boost_power(1)
            .with_max_lead(Duration::from_millis(10))
            .build()
            .unwrap();
        let mut ids: Vec<u64> = (0..20).map(|_| cached.next_id().unwrap().get()).collect();

        clock.step_back(Duration::from_millis(1));
        // Fills continue after the last filled tick, within the lead of the clock.
        while let Ok(id) = cached.next_id() {
            ids.push(id.get());
        }
        let high = layout.decode(*ids.last().unwrap()).unwrap().tick;
        assert_eq!(high, tick_now(&layout, &clock) + 10);

        clock.step_back(Duration::from_secs(3600));
        assert!(matches!(cached.next_id(), Err(Error::RingEmpty { .. })));
        assert_eq!(cached.refill(), Ok(0), "held back by the lead bound");

        clock.advance(Duration::from_secs(3600) + Duration::from_millis(10));
        for _ in 0..100 {
            ids.push(cached.next_id().unwrap().get());
        }
        assert!(strictly_increasing(&ids), "no repeat and no step back");
        assert_eq!(layout.decode(*ids.last().unwrap()).unwrap().tick, high + 7);
    }

    #[test]
    fn clock_jumping_forward_skips_ahead() {
        let clock = clock();
        let layout = small_layout();
        let cached = small(&clock).build().unwrap();
        let before = drain(&cached);
        clock.advance(Duration::from_secs(3600));
        let id = cached.next_id().unwrap();
        let d = layout.decode(id.get()).unwrap();
        assert_eq!(d.tick, tick_now(&layout, &clock));
        assert_eq!(d.sequence, 0);
        assert!(id.get() > *before.last().unwrap());
        assert_eq!(
            cached.lead(),
            Duration::from_millis(7),
            "the refill took 8 ticks"
        );
    }

    #[test]
    fn put_rejection_discards_the_rest_of_a_tick_and_counts_it() {
        let clock = clock();
        let layout = small_layout();
        let cached = small(&clock).with_boost_power(0).build().unwrap();
        let now_tick = tick_now(&layout, &clock);
        assert_eq!((cached.capacity(), cached.available()), (16, 16));

        // 13 left, above the 8 threshold, no room for a whole tick: nothing put.
        let first: Vec<u64> = (0..3).map(|_| cached.next_id().unwrap().get()).collect();
        assert_eq!(cached.refill(), Ok(0));
        assert_eq!(cached.stats().ids_discarded, 0);

        // 6 left, below the threshold: 10 IDs of the next tick are put, 6 discarded.
        let second: Vec<u64> = (0..7).map(|_| cached.next_id().unwrap().get()).collect();
        assert_eq!(cached.refill(), Ok(10));
        let stats = cached.stats();
        assert_eq!(
            (stats.ids_put, stats.ids_discarded, stats.available),
            (26, 6, 16)
        );

        let rest = drain(&cached);
        let decoded: Vec<_> = rest.iter().map(|&id| layout.decode(id).unwrap()).collect();
        assert!(decoded[..6].iter().all(|d| d.tick == now_tick));
        assert!(
            decoded[6..]
                .iter()
                .enumerate()
                .all(|(i, d)| d.tick == now_tick + 1 && d.sequence == i as u32)
        );

        // The next fill starts at the next tick: the discarded IDs are never put.
        let id = cached.next_id().unwrap();
        let d = layout.decode(id.get()).unwrap();
        assert_eq!((d.tick, d.sequence), (now_tick + 2, 0));
        let all: Vec<u64> = first
            .into_iter()
            .chain(second)
            .chain(rest)
            .chain([id.get()])
            .collect();
        assert!(strictly_increasing(&all));
    }

    #[test]
    fn refiller_refills_in_the_background_and_stops_on_drop() {
        let clock = clock();
        let cached = small(&clock).with_boost_power(1).build().unwrap();
        assert_eq!((cached.capacity(), cached.stats().fills), (32, 1));
        let refiller = cached.spawn_refiller();
        for _ in 0..20 {
            cached.next_id().unwrap();
        }
        // 12 left, below 16: the refiller puts one whole tick (room for 1 of 20).
        assert!(
            eventually(|| cached.available() == 28),
            "{:?}",
            cached.stats()
        );
        assert_eq!(cached.stats().ids_discarded, 0);
        drop(refiller);

        let fills = cached.stats().fills;
        for _ in 0..20 {
            cached.next_id().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            cached.available(),
            8,
            "no refiller after the guard is dropped"
        );
        assert_eq!(cached.stats().fills, fills);
    }

    #[test]
    fn schedule_mode_refills_without_being_asked() {
        let clock = clock();
        // Padding 0: takes never ask for a refill; only the schedule fills.
        let cached = small(&clock)
            .with_boost_power(1)
            .with_padding_factor(0)
            .with_schedule(Some(Duration::from_millis(5)))
            .build()
            .unwrap();
        for _ in 0..20 {
            cached.next_id().unwrap();
        }
        assert!(!cached.ring.refill_wanted.load(Ordering::Relaxed));
        let _refiller = cached.spawn_refiller();
        assert!(
            eventually(|| cached.available() == 28),
            "{:?}",
            cached.stats()
        );
    }

    #[test]
    fn refiller_retries_when_the_clock_allows_more() {
        let clock = clock();
        let cached = small(&clock)
            .with_boost_power(1)
            .with_max_lead(Duration::ZERO)
            .build()
            .unwrap();
        assert_eq!(cached.available(), 16, "no lead: the clock's tick only");
        let _refiller = cached.spawn_refiller();
        for _ in 0..10 {
            cached.next_id().unwrap();
        }
        clock.advance(Duration::from_millis(1));
        assert!(
            eventually(|| cached.available() == 22),
            "{:?}",
            cached.stats()
        );
        assert_eq!(cached.lead(), Duration::ZERO);
    }

    #[test]
    fn refiller_resumes_when_the_mark_advances() {
        let clock = clock();
        let layout = small_layout();
        let now_tick = tick_now(&layout, &clock);
        let cached = small(&clock)
            .with_boost_power(2)
            .with_mark(layout.time_of_tick(now_tick + 1))
            .build()
            .unwrap();
        assert_eq!(cached.available(), 32);
        let _refiller = cached.spawn_refiller();
        for _ in 0..20 {
            cached.next_id().unwrap();
        }
        // Held back by the mark, the refiller leaves a request pending, so takes
        // stop waking it; advancing the mark wakes it anyway.
        assert!(eventually(|| cached
            .ring
            .refill_wanted
            .load(Ordering::Acquire)));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(cached.available(), 12);
        cached.advance_mark(layout.time_of_tick(now_tick + 3));
        assert!(
            eventually(|| cached.available() == 44),
            "{:?}",
            cached.stats()
        );
    }

    #[test]
    fn mark_bounds_fills_and_advance_mark_resumes() {
        let clock = clock();
        let layout = small_layout();
        let now_tick = tick_now(&layout, &clock);
        let mark = layout.time_of_tick(now_tick + 2) + Duration::from_micros(500);
        let cached = small(&clock)
            .with_boost_power(2)
            .with_mark(mark)
            .build()
            .unwrap();
        assert_eq!(
            cached.mark(),
            Some(layout.time_of_tick(now_tick + 3) - Duration::from_nanos(1))
        );
        assert_eq!(cached.available(), 3 * 16, "up to the mark's tick");
        assert_eq!(drain(&cached).len(), 48);
        let err = cached.next_id().unwrap_err();
        assert_eq!(
            err,
            Error::MarkReached {
                mark: cached.mark().unwrap(),
                wanted: layout.time_of_tick(now_tick + 3)
            }
        );
        assert!(matches!(cached.refill(), Err(Error::MarkReached { .. })));

        cached.advance_mark(layout.time_of_tick(now_tick + 5));
        cached.advance_mark(layout.time_of_tick(now_tick + 1));
        assert_eq!(
            cached.mark(),
            Some(layout.time_of_tick(now_tick + 6) - Duration::from_nanos(1))
        );
        let id = cached.next_id().unwrap();
        assert_eq!(layout.decode(id.get()).unwrap().tick, now_tick + 3);
        assert_eq!(cached.available(), 3 * 16 - 1);
        drain(&cached);
        assert!(matches!(cached.next_id(), Err(Error::MarkReached { .. })));
    }

    #[test]
    fn start_after_starts_strictly_above_the_mark() {
        let clock = clock();
        let layout = small_layout();
        let now_tick = tick_now(&layout, &clock);
        let mark = layout.time_of_tick(now_tick + 5);
        let cached = small(&clock).with_start_after(mark).build().unwrap();
        let d = layout.decode(cached.next_id().unwrap().get()).unwrap();
        assert_eq!((d.tick, d.sequence), (now_tick + 6, 0));
        assert!(d.time > mark);

        // A mark in the past changes nothing: the fill starts at the clock.
        let cached = small(&clock)
            .with_start_after(layout.time_of_tick(now_tick - 100))
            .build()
            .unwrap();
        assert_eq!(
            layout.decode(cached.next_id().unwrap().get()).unwrap().tick,
            now_tick
        );

        // A mark beyond the lead leaves the ring empty until the clock catches up.
        let cached = small(&clock)
            .with_max_lead(Duration::from_millis(10))
            .with_start_after(layout.time_of_tick(now_tick + 50))
            .build()
            .unwrap();
        assert_eq!(cached.available(), 0);
        assert!(matches!(cached.next_id(), Err(Error::RingEmpty { .. })));
        clock.advance(Duration::from_millis(41));
        assert_eq!(
            layout.decode(cached.next_id().unwrap().get()).unwrap().tick,
            now_tick + 51
        );
    }

    #[test]
    fn exhausted_layout_is_a_typed_error() {
        let clock = ManualClock::at(ts("2026-11-21T00:00:00Z"));
        let err = Cached::builder(Layout::BAIDU)
            .with_clock(Arc::new(clock))
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            Error::LayoutExhausted {
                ran_out_at: ts("2024-11-20T13:24:16Z")
            }
        );

        // Three seconds before the end: the ring gets the last three ticks, then stops.
        let clock = ManualClock::at(ts("2024-11-20T13:24:13Z"));
        let cached = Cached::builder(Layout::BAIDU)
            .with_worker(1)
            .with_clock(Arc::new(clock))
            .build()
            .unwrap();
        assert_eq!(cached.available(), 3 * 8192);
        assert_eq!(
            cached.max_lead(),
            Duration::from_secs(8),
            "the ring's span of 1 s ticks"
        );
        let ids = drain(&cached);
        let last = Layout::BAIDU.decode(*ids.last().unwrap()).unwrap();
        assert_eq!(last.tick, Layout::BAIDU.ticks() - 1);
        assert!(matches!(
            cached.next_id(),
            Err(Error::LayoutExhausted { .. })
        ));
        assert!(matches!(
            cached.refill(),
            Err(Error::LayoutExhausted { .. })
        ));
    }

    #[test]
    fn clock_before_epoch_is_a_typed_error() {
        let layout = LayoutSpec::new(41, ts("2030-01-01T00:00:00Z"), 12)
            .build()
            .unwrap();
        let err = Cached::builder(layout)
            .with_clock(Arc::new(clock()))
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::ClockBeforeEpoch { .. }), "{err}");
    }

    #[test]
    fn bad_config_is_rejected_by_name() {
        let clock = clock();
        let cases = [
            small(&clock).with_worker(8),
            small(&clock).with_datacenter(4),
            small(&clock).with_boost_power(21),
            small(&clock).with_boost_power(200),
            small(&clock).with_padding_factor(101),
            small(&clock).with_take_rejection(TakeRejection::Wait {
                max: Duration::ZERO,
            }),
            small(&clock).with_schedule(Some(Duration::ZERO)),
        ];
        for builder in cases {
            let err = builder.clone().build().unwrap_err();
            assert!(err.is_bad_input(), "{builder:?}: {err}");
            let msg = err.to_string();
            assert_eq!(msg, msg.to_lowercase(), "lowercase messages");
        }
        let cached = small(&clock).build().unwrap();
        assert_eq!(cached.next_ids(0).unwrap_err().code(), "invalid_count");
        assert_eq!(
            cached.next_ids(Cached::MAX_BATCH + 1).unwrap_err().code(),
            "invalid_count"
        );
    }

    #[test]
    fn batches_come_as_runs_of_ticks() {
        let clock = clock();
        let layout = Layout::TWITTER;
        let cached = Cached::builder(layout)
            .with_worker(4)
            .with_clock(Arc::new(clock.clone()))
            .build()
            .unwrap();
        let single = cached.next_id().unwrap();
        let batch = cached.next_ids(100_000).unwrap();
        assert_eq!(batch.len(), 100_000);
        assert_eq!(
            batch.runs().len(),
            25,
            "the rest of one tick, 23 whole ticks, part of one"
        );
        assert!(batch.first().unwrap() > single);
        let ids: Vec<u64> = batch.iter().map(Id::get).collect();
        assert!(strictly_increasing(&ids));
        assert!(cached.next_id().unwrap() > batch.last().unwrap());

        // Sonyflake's order: IDs of a tick step by 2^16.
        let cached = Cached::builder(Layout::SONYFLAKE)
            .with_worker(0xBEEF)
            .with_clock(Arc::new(clock))
            .build()
            .unwrap();
        let batch = cached.next_ids(600).unwrap();
        // The last ID of a tick plus the stride is the first of the next: one run.
        assert_eq!(batch.runs().len(), 1);
        assert_eq!(batch.runs()[0].stride(), 1 << 16);
        for (i, id) in batch.iter().enumerate() {
            let d = Layout::SONYFLAKE.decode(id.get()).unwrap();
            assert_eq!((d.worker, d.sequence), (0xBEEF, i as u32 % 256));
        }
    }

    #[test]
    fn generator_and_guard_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Cached>();
        send_sync::<RefillerGuard>();
        send_sync::<CachedBuilder>();
    }

    #[test]
    fn debug_does_not_print_the_ring() {
        let cached = small(&clock()).build().unwrap();
        let text = format!("{cached:?}");
        assert!(
            text.contains("capacity: 128") && text.len() < 1000,
            "{text}"
        );
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::layout::{IdParts, LayoutSpec};

    /// `takers` threads take `each` IDs while a producer thread fills, over a
    /// ring of 4 slots (2 sequence bits, boost power 0) that starts full, so the
    /// producer overwrites slots as takers free them (and takers that find it
    /// empty fill it inline, racing the producer for the lock).
    ///
    /// Checks that every ID put is issued exactly once, in order, and that
    /// every ID issued is one that was put (no garbage from an overwritten slot).
    fn model(takers: usize, each: usize, preemption_bound: Option<usize>) {
        let epoch: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let layout = LayoutSpec::new(30, epoch, 2)
            .with_worker_bits(1)
            .build()
            .unwrap();
        let start = layout.tick_at(epoch + Duration::from_secs(1)).unwrap();
        let id = move |tick: u64, sequence: u32| {
            let parts = IdParts {
                tick,
                worker: 1,
                sequence,
                ..Default::default()
            };
            layout.compose(parts).unwrap().get()
        };
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = preemption_bound;
        builder.check(move || {
            let clock = ManualClock::at(epoch + Duration::from_secs(1));
            let cached = Arc::new(
                Cached::builder(layout)
                    .with_worker(1)
                    .with_clock(Arc::new(clock))
                    .with_boost_power(0)
                    // Every take leaves the ring below the threshold, so fills
                    // put into whatever room the takers made.
                    .with_padding_factor(100)
                    .with_max_lead(Duration::from_secs(3600))
                    .build()
                    .unwrap(),
            );
            let handles: Vec<_> = (0..takers)
                .map(|_| {
                    let cached = Arc::clone(&cached);
                    loom::thread::spawn(move || {
                        let ids: Vec<u64> =
                            (0..each).map(|_| cached.next_id().unwrap().get()).collect();
                        assert!(
                            ids.windows(2).all(|w| w[0] < w[1]),
                            "each taker's IDs increase"
                        );
                        ids
                    })
                })
                .collect();
            // A thread of its own: loom explores the main thread's interleavings
            // with spawned threads poorly.
            let producer = {
                let cached = Arc::clone(&cached);
                loom::thread::spawn(move || cached.refill().unwrap())
            };
            producer.join().unwrap();
            let mut taken: Vec<u64> = handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect();
            taken.sort_unstable();
            let mut drained = Vec::new();
            while let Some((id, _)) = cached.ring.try_take() {
                drained.push(id);
            }
            assert!(
                taken.last() < drained.first() || drained.is_empty(),
                "what is left comes after what was taken"
            );

            // Taken and left over together: exactly the IDs put, each once. Fills
            // put the prefilled tick whole, then for each following tick a prefix
            // of its sequence numbers (the rest of a tick cut short is discarded).
            let all: Vec<u64> = taken.iter().chain(&drained).copied().collect();
            assert_eq!(
                all.len() as u64,
                cached.stats().ids_put,
                "nothing lost, nothing repeated"
            );
            let (mut tick, mut seq) = (start, 0);
            for (i, &got) in all.iter().enumerate() {
                if i >= 4 && (seq == 4 || got == id(tick + 1, 0)) {
                    (tick, seq) = (tick + 1, 0);
                }
                assert_eq!(got, id(tick, seq), "no garbage, no repeat: {all:?}");
                seq += 1;
            }
        });
    }

    #[test]
    fn loom_two_takers_race_a_put() {
        // Exhaustive: about 80,000 interleavings.
        model(2, 1, None);
    }

    #[test]
    fn loom_two_takers_race_a_put_twice() {
        // Bounded: exhaustive does not finish in minutes.
        model(2, 2, Some(2));
    }

    #[test]
    fn loom_taker_refills_inline_while_a_put_runs() {
        // Bounded: a taker spinning on the fill lock makes the exhaustive model
        // too large; 4 preemptions cover the lock races.
        model(1, 5, Some(4));
    }
}
