// Size: about 1,090 lines before the tests, some 240 of them docs. Every
// transition of the one state word (next, batch, rollback, history, mark) must
// keep the invariants listed below, and they are checked against each other
// here and in the loom models; the policies' types and text form live in
// `snowflake/policy.rs`.
//! [`Snowflake`]: time · node · sequence IDs from one atomic word, with a policy for
//! every way the clock and the sequence can let a generator down.
//!
//! # The state word
//!
//! All of a generator's mutable state on the hot path is one `AtomicU64`:
//!
//! ```text
//! | last tick | rollback counter | next sequence (sequence_bits + 1 wide) |
//! ```
//!
//! `next_id` reads the clock, computes the next state from the word it loaded, and
//! publishes it with one compare-and-swap; the ID is a pure function of the new
//! state. Invariants, kept by every transition:
//! - for a fixed rollback counter, `(last tick, next sequence)` only grows, so no
//!   (tick, counter, sequence) triple is handed out twice;
//! - the counter changes only under the `rollback-bits` policy, and only to a value
//!   whose earlier IDs all have ticks below the new tick (`rollback_max` records
//!   them);
//! - under the `history` policy, a tick's unspent sequence numbers are published to
//!   the ring only after the state word has left that tick for good, and ring
//!   entries only grow (`fetch_max`, CAS), so a reused number is reused once;
//! - no ID's tick reaches `mark_end` (the persisted high-water mark) or the
//!   layout's capacity.
//!
//! Waiting (for the next tick, for a clock to catch up) happens between attempts,
//! never while holding anything another thread needs.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use jiff::Timestamp;

use crate::batch::{IdBatch, IdRun};
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::id::Id;
use crate::layout::{Bits, Layout};
use crate::sync::{AtomicU64, Mutex, Ordering, lock};

mod policy;
pub use policy::{ClockBehind, SequenceExhausted, SequenceStart};

/// Counters of the slow paths a generator took. Read with [`Snowflake::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnowflakeStats {
    /// Times a caller waited because a tick's sequence was used up.
    pub exhaustion_waits: u64,
    /// Times the clock was seen behind the last issued ID by more than borrowing absorbs.
    pub clock_behind: u64,
    /// Times a caller waited for the clock to catch up (`wait` policy).
    pub clock_behind_waits: u64,
    /// Rollback counter increments (`rollback-bits` policy).
    pub rollbacks: u64,
    /// IDs issued from the history ring (`history` policy).
    pub history_reuses: u64,
}

#[derive(Debug, Default)]
struct Counters {
    exhaustion_waits: AtomicU64,
    clock_behind: AtomicU64,
    clock_behind_waits: AtomicU64,
    rollbacks: AtomicU64,
    history_reuses: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A builder for a [`Snowflake`] generator; see [`Snowflake::builder`].
#[derive(Debug, Clone)]
pub struct SnowflakeBuilder {
    layout: Layout,
    datacenter: u32,
    worker: u32,
    clock: Option<Arc<dyn Clock>>,
    clock_behind: ClockBehind,
    exhausted: SequenceExhausted,
    start: SequenceStart,
    start_after: Option<Timestamp>,
    mark: Option<Timestamp>,
    seed: Option<u64>,
    shared: Option<&'static SnowflakeWords>,
}

impl SnowflakeBuilder {
    /// Datacenter part of the node field (default 0).
    pub fn with_datacenter(mut self, datacenter: u32) -> SnowflakeBuilder {
        self.datacenter = datacenter;
        self
    }

    /// Worker part of the node field (default 0).
    pub fn with_worker(mut self, worker: u32) -> SnowflakeBuilder {
        self.worker = worker;
        self
    }

    /// The time source (default: a new [`MonotonicClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> SnowflakeBuilder {
        self.clock = Some(clock);
        self
    }

    /// The clock-behind policy (default: `Wait { max: 5 ms }`, as Leaf).
    pub fn with_clock_behind(mut self, policy: ClockBehind) -> SnowflakeBuilder {
        self.clock_behind = policy;
        self
    }

    /// The sequence-exhausted policy (default: `Wait`).
    pub fn with_sequence_exhausted(mut self, policy: SequenceExhausted) -> SnowflakeBuilder {
        self.exhausted = policy;
        self
    }

    /// The sequence start policy (default: `Zero`).
    pub fn with_sequence_start(mut self, start: SequenceStart) -> SnowflakeBuilder {
        self.start = start;
        self
    }

    /// Start strictly above `mark`: no ID at or before that time is issued.
    ///
    /// Pass the high-water mark a worker store recorded for this worker ID; a
    /// restart with the clock behind, or a takeover of a dead node's worker ID,
    /// then cannot repeat an ID.
    pub fn with_start_after(mut self, mark: Timestamp) -> SnowflakeBuilder {
        self.start_after = Some(mark);
        self
    }

    /// Issue no ID later than `mark` until [`Snowflake::advance_mark`] moves it.
    ///
    /// Without this the generator is unbounded (for tools and tests); servers
    /// always set it to what their worker store has persisted.
    pub fn with_mark(mut self, mark: Timestamp) -> SnowflakeBuilder {
        self.mark = Some(mark);
        self
    }

    /// A fixed seed for [`SequenceStart::Random`], for reproducible tests.
    pub fn with_seed(mut self, seed: u64) -> SnowflakeBuilder {
        self.seed = Some(seed);
        self
    }

    /// Keep the state in `words`, shared with every other generator built over
    /// them (in other processes too, when `words` lies in shared memory):
    /// together they are one generator, each with its own clock and policies.
    ///
    /// - Every generator over the same words must have the same layout, node
    ///   and policies; the words don't record them.
    /// - Building never moves the words back: the start mark is applied with
    ///   `fetch_max`, and so is [`SnowflakeBuilder::with_mark`].
    /// - The generator is always bounded: it issues nothing until a mark is
    ///   set here or by [`Snowflake::advance_mark`] on any generator over the words.
    /// - The `history` and `rollback-bits` clock policies are refused: their
    ///   tables are per generator, so two generators could reuse one number.
    pub fn with_shared_words(mut self, words: &'static SnowflakeWords) -> SnowflakeBuilder {
        self.shared = Some(words);
        self
    }

    /// Checks the settings against the layout and makes the generator.
    ///
    /// Does no I/O and starts nothing in the background.
    ///
    /// # Errors
    ///
    /// [`Error::NodeOutOfRange`] for a datacenter or worker outside the layout,
    /// [`Error::InvalidConfig`] for a policy the layout can't support (rollback
    /// bits without rollback bits in the layout, a zero history window, a random
    /// start above the sequence capacity, a `history` or `rollback-bits` policy
    /// over shared words), and [`Error::LayoutExhausted`] when the start mark
    /// is past the layout's end.
    pub fn build(self) -> Result<Snowflake> {
        let layout = self.layout;
        if self.shared.is_some()
            && matches!(
                self.clock_behind,
                ClockBehind::History { .. } | ClockBehind::RollbackBits
            )
        {
            return Err(Error::InvalidConfig(format!(
                "the {} clock-behind policy can't run over shared words: its table is per generator",
                self.clock_behind
            )));
        }
        let node = layout.checked_node(self.datacenter, self.worker)?;
        let unit = layout.unit();
        let ticks_in = |d: Duration| -> u64 {
            u64::try_from(d.as_nanos() / unit.as_nanos()).unwrap_or(u64::MAX)
        };
        let max_seq = layout.ids_per_tick() - 1;
        let mut history_len = 0;
        let mut clock_borrow = 0;
        match self.clock_behind {
            ClockBehind::RollbackBits if layout.rollback_bits() == 0 => {
                return Err(Error::InvalidConfig(
                    "the rollback-bits policy needs a layout with rollback bits (e.g. `leaf,rollback=2`)"
                        .to_owned(),
                ));
            }
            ClockBehind::History { ticks } => {
                if !(1..=1 << 16).contains(&ticks) {
                    return Err(Error::InvalidConfig(format!(
                        "history window of {ticks} ticks is out of range (1..=65536)"
                    )));
                }
                history_len = ticks as usize;
            }
            ClockBehind::Borrow { max_lead } => clock_borrow = ticks_in(max_lead),
            ClockBehind::Wait { max } if max.is_zero() => {
                return Err(Error::InvalidConfig(
                    "wait policy with a zero bound: use `fail` instead".to_owned(),
                ));
            }
            _ => {}
        }
        let exhaust_borrow = match self.exhausted {
            SequenceExhausted::Wait => None,
            SequenceExhausted::Borrow { max_lead } => Some(ticks_in(max_lead)),
        };
        let start_below = match self.start {
            SequenceStart::Zero => 1,
            SequenceStart::Random { below } => {
                if below == 0 || u64::from(below) > max_seq + 1 {
                    return Err(Error::InvalidConfig(format!(
                        "random sequence start below {below} is out of range (1..={})",
                        max_seq + 1
                    )));
                }
                u64::from(below)
            }
        };
        let seed = self.seed.unwrap_or_else(|| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x1d_6d17);
            h.finish()
        });
        let hist_width = u32::from(layout.sequence_bits()) + 1;
        // The state's sequence field takes every bit the tick and rollback
        // fields leave: the headroom above `max_seq + 1` absorbs the claims of
        // threads that `fetch_add` after a tick is used up.
        let seq_width =
            64 - u32::from(layout.usable_time_bits()) - u32::from(layout.rollback_bits());
        let headroom = (1u64 << seq_width.min(63)) - (max_seq + 1);
        let rb_width = u32::from(layout.rollback_bits());
        let mut generator = Snowflake {
            bits: layout.bits(),
            node,
            rollback_shift: u32::from(layout.datacenter_bits() + layout.worker_bits()),
            epoch_ns: layout.epoch_nanos(),
            unit_ns: layout.unit_nanos(),
            ticks: layout.ticks(),
            max_seq,
            seq_width,
            hist_width,
            fast_add: headroom > MAX_THREADS,
            rb_width,
            rb_mask: (1 << rb_width) - 1,
            absorb: clock_borrow.max(exhaust_borrow.unwrap_or(0)),
            absorb_ns: clock_borrow
                .max(exhaust_borrow.unwrap_or(0))
                .saturating_mul(layout.unit_nanos() as u64),
            exhaust_borrow,
            exhaust_borrow_ns: exhaust_borrow.map(|b| b.saturating_mul(layout.unit_nanos() as u64)),
            start_below,
            seed,
            clock: self
                .clock
                .unwrap_or_else(|| Arc::new(MonotonicClock::new())),
            policy: self.clock_behind,
            words: match self.shared {
                Some(words) => Words::Shared(words),
                None => Words::Owned(SnowflakeWords::new()),
            },
            bounded: self.mark.is_some() || self.shared.is_some(),
            history: (0..history_len).map(|_| AtomicU64::new(0)).collect(),
            rollback_max: Mutex::new(vec![0; 1 << rb_width]),
            counters: Counters::default(),
            layout,
        };
        let initial = match self.start_after {
            Some(mark) if mark >= layout.epoch() => {
                let tick = generator.tick_of_time(mark);
                if tick >= generator.ticks {
                    return Err(layout.exhausted());
                }
                // A run before this one may have used every rollback counter
                // value at any tick up to the mark; a rollback below the mark
                // must not reuse one (the table is not persisted).
                generator.rollback_max = Mutex::new(vec![tick + 1; 1 << rb_width]);
                generator.pack(tick, 0, max_seq + 1)
            }
            _ => generator.pack(0, 0, generator.start_seq(0)),
        };
        let end = match self.mark {
            Some(mark) => generator.mark_end_for(mark),
            None if self.shared.is_some() => 0,
            None => layout.ticks(),
        };
        let words = generator.words();
        if self.shared.is_some() {
            // Other generators may be issuing from these words: only move on.
            words.state.fetch_max(initial, Ordering::AcqRel);
            words.mark_end.fetch_max(end, Ordering::AcqRel);
        } else {
            words.state.store(initial, Ordering::Release);
            words.mark_end.store(end, Ordering::Release);
        }
        Ok(generator)
    }
}

/// A snowflake generator: IDs made of time, node and sequence, from one atomic word.
///
/// - **Thread-safe**: `Send + Sync`, shared by `&self`; lock-free on the hot path
///   (one compare-and-swap per ID, or per batch when borrowing).
/// - **Unique**: never issues the same ID twice, under any policy, however the
///   clock moves, provided no other generator uses the same layout and node.
/// - **Monotonic**: each ID is greater than every ID issued before it by this
///   generator, except across a clock rollback under the `rollback-bits` and
///   `history` policies, which trade order for availability.
/// - **Sequence used up within a tick**: see [`SequenceExhausted`]; waiting
///   sleeps the calling thread only, holding nothing.
/// - **Clock behind the last issued time**: see [`ClockBehind`]. A lead of up to
///   the larger of the two borrow bounds is absorbed silently.
/// - **Bounded by a high-water mark** when one is set: no ID's time passes the
///   mark until [`Snowflake::advance_mark`] moves it ([`Error::MarkReached`]).
/// - **Layout run out**: [`Error::LayoutExhausted`], never a negative or
///   wrapped ID.
///
/// # Examples
///
/// ```
/// use idmint_core::{Layout, Snowflake};
///
/// let generator = Snowflake::builder(Layout::TWITTER)
///     .with_datacenter(1)
///     .with_worker(7)
///     .build()?;
/// let a = generator.next_id()?;
/// let b = generator.next_id()?;
/// assert!(a < b);
/// let parts = Layout::TWITTER.decode(b.get())?;
/// assert_eq!((parts.datacenter, parts.worker), (1, 7));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Snowflake {
    layout: Layout,
    bits: Bits,
    node: u64,
    rollback_shift: u32,
    epoch_ns: i64,
    unit_ns: i64,
    ticks: u64,
    max_seq: u64,
    /// Width of the state word's sequence field (at least `sequence_bits + 1`).
    seq_width: u32,
    /// Width of a history entry's sequence field: `sequence_bits + 1`.
    hist_width: u32,
    /// Whether sequence numbers within a tick may be claimed with `fetch_add`.
    fast_add: bool,
    rb_width: u32,
    rb_mask: u64,
    /// Lead (in ticks) over the clock absorbed without calling it a rollback.
    absorb: u64,
    /// `absorb` in nanoseconds.
    absorb_ns: u64,
    /// Ticks the sequence-exhausted policy may borrow, if it borrows.
    exhaust_borrow: Option<u64>,
    /// `exhaust_borrow` in nanoseconds.
    exhaust_borrow_ns: Option<u64>,
    start_below: u64,
    seed: u64,
    clock: Arc<dyn Clock>,
    policy: ClockBehind,
    /// The state word and the mark end: this generator's own, or words in
    /// memory shared with other generators ([`SnowflakeBuilder::with_shared_words`]).
    words: Words,
    /// Whether a mark was set at build; unbounded generators ignore `advance_mark`.
    bounded: bool,
    /// `history` policy ring: entry = (tick + 1) << hist_width | next unspent sequence.
    history: Box<[AtomicU64]>,
    /// `rollback-bits` policy: per counter value, 1 + the highest tick issued with it
    /// (0: never used). The lock serializes rollbacks only, never the hot path.
    rollback_max: Mutex<Vec<u64>>,
    counters: Counters,
}

/// The mutable state of a [`Snowflake`]: its state word and its mark end, as
/// plain data (`#[repr(C)]`, two cache-padded `AtomicU64`s; all zero bytes are
/// a valid value, the one [`SnowflakeWords::new`] makes).
///
/// A generator keeps its own by default. Words placed where several
/// generators reach them (memory shared between processes, mapped at any
/// address: they hold no pointer) make those generators one, through
/// [`SnowflakeBuilder::with_shared_words`]. Zeroed words issue nothing: their
/// mark end is 0 until a mark is set.
#[repr(C)]
#[derive(Debug)]
pub struct SnowflakeWords {
    /// `| last tick | rollback counter | next sequence |` (see the module docs).
    state: CachePadded<AtomicU64>,
    /// Ticks below this may be issued: the persisted mark's tick + 1, capped at
    /// the layout's tick count (which it equals while an owned generator has
    /// no mark).
    mark_end: CachePadded<AtomicU64>,
}

impl Default for SnowflakeWords {
    fn default() -> SnowflakeWords {
        SnowflakeWords::new()
    }
}

impl SnowflakeWords {
    /// Zeroed words: no state, nothing may be issued.
    pub fn new() -> SnowflakeWords {
        SnowflakeWords {
            state: CachePadded::new(AtomicU64::new(0)),
            mark_end: CachePadded::new(AtomicU64::new(0)),
        }
    }
}

/// Where a generator's words are: inline, or shared. One predictable branch
/// per access.
#[derive(Debug)]
// Inline on purpose: the owned words stay inside the generator, as the two
// fields were before the seam, with no pointer to follow on the hot path.
#[expect(
    clippy::large_enum_variant,
    reason = "one per generator; inline avoids an indirection"
)]
enum Words {
    Owned(SnowflakeWords),
    Shared(&'static SnowflakeWords),
}

/// More threads than can ever claim at once: Linux's `PID_MAX_LIMIT` (2^22) bounds
/// the threads of a process. A `fetch_add` claim past a used-up tick lands in the
/// state word's sequence headroom; a thread makes at most one such claim before it
/// sees the tick used up, so headroom above this many claims can't overflow into
/// the rollback and tick fields. Under loom, a small number lets tiny test
/// layouts take the fast path.
#[cfg(not(loom))]
const MAX_THREADS: u64 = 1 << 22;
#[cfg(loom)]
const MAX_THREADS: u64 = 8;

/// The clock's tick against the state's last tick.
enum Position {
    /// In a later tick (the tick).
    After(u64),
    /// In the last tick or behind it by no more than the absorbed lead
    /// (nanoseconds since the epoch).
    Within(u64),
    /// Behind by more than the absorbed lead (the tick).
    Behind(u64),
}

/// What the clock-behind slow path decided.
enum Behind {
    Retry,
    Issued(Id),
}

impl Snowflake {
    /// The largest batch [`Snowflake::next_ids`] hands out in one call.
    pub const MAX_BATCH: u64 = 10_000_000;

    /// Starts building a generator for `layout`.
    pub fn builder(layout: Layout) -> SnowflakeBuilder {
        SnowflakeBuilder {
            layout,
            datacenter: 0,
            worker: 0,
            clock: None,
            clock_behind: ClockBehind::default(),
            exhausted: SequenceExhausted::default(),
            start: SequenceStart::default(),
            start_after: None,
            mark: None,
            seed: None,
            shared: None,
        }
    }

    /// The generator's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Counters of the slow paths taken so far.
    pub fn stats(&self) -> SnowflakeStats {
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SnowflakeStats {
            exhaustion_waits: r(&c.exhaustion_waits),
            clock_behind: r(&c.clock_behind),
            clock_behind_waits: r(&c.clock_behind_waits),
            rollbacks: r(&c.rollbacks),
            history_reuses: r(&c.history_reuses),
        }
    }

    #[inline]
    fn pack(&self, tick: u64, rb: u64, next_seq: u64) -> u64 {
        (tick << (self.rb_width + self.seq_width)) | (rb << self.seq_width) | next_seq
    }

    #[inline]
    fn unpack(&self, state: u64) -> (u64, u64, u64) {
        (
            state >> (self.rb_width + self.seq_width),
            (state >> self.seq_width) & self.rb_mask,
            state & ((1 << self.seq_width) - 1),
        )
    }

    #[inline]
    fn compose(&self, tick: u64, rb: u64, seq: u64) -> Id {
        Id::from_raw(
            self.bits
                .compose(tick, self.node | (rb << self.rollback_shift), seq),
        )
    }

    /// The sequence a tick starts at: 0, or a keyed hash of the tick below the bound.
    #[inline]
    fn start_seq(&self, tick: u64) -> u64 {
        if self.start_below == 1 {
            return 0;
        }
        // SplitMix64's finalizer: cheap, well mixed, and a pure function of the
        // tick, so batches know every tick's start without extra state.
        let mut z = (tick ^ self.seed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % self.start_below
    }

    fn tick_of_time(&self, t: Timestamp) -> u64 {
        let ns = i64::try_from(t.as_nanosecond()).unwrap_or(i64::MAX);
        (ns.saturating_sub(self.epoch_ns).max(0) / self.unit_ns) as u64
    }

    fn tick_start_ns(&self, tick: u64) -> i64 {
        self.epoch_ns
            .saturating_add((tick as i64).saturating_mul(self.unit_ns))
    }

    fn mark_end_for(&self, mark: Timestamp) -> u64 {
        if mark < self.layout.epoch() {
            0
        } else {
            self.tick_of_time(mark).saturating_add(1).min(self.ticks)
        }
    }

    /// Whether `tick` may be issued: below the persisted mark and inside the
    /// layout (`mark_end` never exceeds the layout's tick count, so one compare
    /// covers both).
    #[inline]
    fn check_limits(&self, tick: u64) -> Result<()> {
        if tick >= self.words().mark_end.load(Ordering::Acquire) {
            return Err(if tick >= self.ticks {
                self.layout.exhausted()
            } else {
                self.mark_error(tick)
            });
        }
        Ok(())
    }

    #[cold]
    fn mark_error(&self, tick: u64) -> Error {
        let end = self.words().mark_end.load(Ordering::Acquire);
        Error::MarkReached {
            mark: self
                .layout
                .time_of_tick(end)
                .saturating_sub(jiff::SignedDuration::from_nanos(1))
                .unwrap_or(Timestamp::MIN),
            wanted: self.layout.time_of_tick(tick),
        }
    }

    /// Blocks until the clock reaches `tick` (or for a while; callers re-check).
    fn wait_for_tick(&self, tick: u64, now_ns: i64) {
        let d = self.tick_start_ns(tick).saturating_sub(now_ns);
        self.clock.wait(Duration::from_nanos(d.max(1) as u64));
    }

    /// Issues one ID.
    ///
    /// # Errors
    ///
    /// [`Error::ClockBehind`], [`Error::RollbackExhausted`], [`Error::MarkReached`],
    /// [`Error::LayoutExhausted`] and [`Error::ClockBeforeEpoch`], as the type's
    /// contract describes. An error changes nothing: the next call starts afresh.
    pub fn next_id(&self) -> Result<Id> {
        let mut cur = self.words().state.load(Ordering::Acquire);
        let mut waited = Duration::ZERO;
        loop {
            let now_ns = self.clock.now_nanos();
            let (last, rb, next) = self.unpack(cur);
            let (tick, seq) = match self.position(now_ns, last)? {
                Position::After(now) => (now, self.start_seq(now)),
                Position::Within(since) => {
                    if next <= self.max_seq && self.fast_add {
                        // Claim the next number of whatever tick the word holds
                        // now: every tick in it was checked by the CAS that put
                        // it there. The mark is checked again all the same, as
                        // it may have been pulled back (a lost lease) since.
                        let (tick, rb, seq) =
                            self.unpack(self.words().state.fetch_add(1, Ordering::AcqRel));
                        if seq <= self.max_seq {
                            self.check_limits(tick)?;
                            return Ok(self.compose(tick, rb, seq));
                        }
                        // The tick ran out under us; the claim is spent (counted
                        // in the headroom) and the slow path moves on.
                        cur = self.words().state.load(Ordering::Acquire);
                        continue;
                    } else if next <= self.max_seq {
                        (last, next)
                    } else if self.may_borrow_next(since, last) {
                        (last + 1, self.start_seq(last + 1))
                    } else {
                        bump(&self.counters.exhaustion_waits);
                        self.wait_for_tick(last + 1, now_ns);
                        cur = self.words().state.load(Ordering::Acquire);
                        continue;
                    }
                }
                Position::Behind(now) => match self.behind(cur, now, now_ns, &mut waited)? {
                    Behind::Retry => {
                        cur = self.words().state.load(Ordering::Acquire);
                        continue;
                    }
                    Behind::Issued(id) => return Ok(id),
                },
            };
            self.check_limits(tick)?;
            match self.words().state.compare_exchange_weak(
                cur,
                self.pack(tick, rb, seq + 1),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    if !self.history.is_empty() && tick != last {
                        self.record_history(last, next, tick);
                    }
                    return Ok(self.compose(tick, rb, seq));
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Where the clock (`now_ns`) stands against the state's last tick. Only a
    /// new tick or a clock behind costs a division; the common cases compare
    /// against tick boundaries computed by multiplication.
    #[inline]
    fn position(&self, now_ns: i64, last: u64) -> Result<Position> {
        let since = now_ns.wrapping_sub(self.epoch_ns);
        if since < 0 {
            return Err(Error::ClockBeforeEpoch {
                now: timestamp_of(now_ns),
                epoch: self.layout.epoch(),
            });
        }
        let since = since as u64;
        let unit = self.unit_ns as u64;
        let last_start = last.saturating_mul(unit);
        if since >= last_start.saturating_add(unit) {
            Ok(Position::After(since / unit))
        } else if since.saturating_add(self.absorb_ns) >= last_start {
            Ok(Position::Within(since))
        } else {
            Ok(Position::Behind(since / unit))
        }
    }

    /// Whether tick `last + 1` is within the exhaustion policy's borrow bound,
    /// the clock being `since` nanoseconds past the epoch.
    #[inline]
    fn may_borrow_next(&self, since: u64, last: u64) -> bool {
        self.exhaust_borrow_ns.is_some_and(|b| {
            since.saturating_add(b) >= (last + 1).saturating_mul(self.unit_ns as u64)
        })
    }

    /// The clock reads `now`, more than `absorb` ticks behind the state's last tick.
    #[cold]
    fn behind(&self, cur: u64, now: u64, now_ns: i64, waited: &mut Duration) -> Result<Behind> {
        let (last, _, _) = self.unpack(cur);
        let behind_ns = self.tick_start_ns(last).saturating_sub(now_ns).max(0) as u64;
        let behind = Duration::from_nanos(behind_ns);
        let absorbed = Duration::from_nanos(self.absorb * self.unit_ns as u64);
        bump(&self.counters.clock_behind);
        let fail = |allowed: Duration| Error::ClockBehind {
            behind,
            policy: self.policy.name(),
            allowed,
        };
        match self.policy {
            ClockBehind::Fail | ClockBehind::Borrow { .. } => Err(fail(absorbed)),
            ClockBehind::Wait { max } => {
                if behind + *waited > max {
                    return Err(fail(max));
                }
                bump(&self.counters.clock_behind_waits);
                // Wait until the last tick is within the absorbed lead again.
                let target = last - self.absorb;
                let d = self.tick_start_ns(target).saturating_sub(now_ns).max(1) as u64;
                self.clock.wait(Duration::from_nanos(d));
                // Count the time that passed, not the time asked for: a wait
                // wakes a little early by design, and counting `d` would charge
                // the rest of the step twice and fail a step of exactly `max`.
                // A clock that didn't move (a manual one) or moved back counts
                // as the whole wait, so the loop always ends.
                let elapsed = self.clock.now_nanos().saturating_sub(now_ns);
                let counted = if elapsed > 0 && (elapsed as u64) < d {
                    elapsed as u64
                } else {
                    d
                };
                *waited += Duration::from_nanos(counted);
                Ok(Behind::Retry)
            }
            ClockBehind::RollbackBits => self.roll_back(cur, now),
            ClockBehind::History { .. } => self
                .reuse_history(last, now)
                .map(Behind::Issued)
                .ok_or_else(|| fail(absorbed)),
        }
    }

    /// `rollback-bits`: move to the next counter value and issue at the clock's tick.
    fn roll_back(&self, cur: u64, now: u64) -> Result<Behind> {
        let mut used = lock(&self.rollback_max);
        if self.words().state.load(Ordering::Acquire) != cur {
            return Ok(Behind::Retry);
        }
        let (last, rb, _) = self.unpack(cur);
        let next_rb = (rb + 1) & self.rb_mask;
        let leaving = &mut used[rb as usize];
        *leaving = (*leaving).max(last + 1);
        let next_used = used[next_rb as usize];
        if next_used > now {
            return Err(Error::RollbackExhausted {
                counters: self.rb_mask + 1,
                retry_after: self.layout.time_of_tick(next_used),
            });
        }
        self.check_limits(now)?;
        let seq = self.start_seq(now);
        if self
            .words()
            .state
            .compare_exchange(
                cur,
                self.pack(now, next_rb, seq + 1),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Ok(Behind::Retry);
        }
        bump(&self.counters.rollbacks);
        Ok(Behind::Issued(self.compose(now, next_rb, seq)))
    }

    #[inline]
    fn history_entry(&self, tick: u64, next_seq: u64) -> u64 {
        if tick + 1 > u64::MAX >> self.hist_width {
            // Only the layout's very last tick of a node-less 64-bit-wide layout
            // can't be recorded; an empty entry (0) is never reused.
            return 0;
        }
        ((tick + 1) << self.hist_width) | next_seq.min(self.max_seq + 1)
    }

    /// `history`: the state word left tick `last` (whose next unspent sequence was
    /// `next`) for `new_tick`; publish what the ring may reuse.
    fn record_history(&self, last: u64, next: u64, new_tick: u64) {
        let n = self.history.len() as u64;
        let oldest = new_tick.saturating_sub(n - 1);
        if last >= oldest {
            self.history[(last % n) as usize]
                .fetch_max(self.history_entry(last, next), Ordering::AcqRel);
        }
        // Ticks skipped over were never issued: all their numbers are unspent.
        for tick in (last + 1).max(oldest)..new_tick {
            self.history[(tick % n) as usize].fetch_max(
                self.history_entry(tick, self.start_seq(tick)),
                Ordering::AcqRel,
            );
        }
    }

    /// `history`: issue from the ring, at the clock's tick or the nearest later one
    /// that has numbers left.
    fn reuse_history(&self, last: u64, now: u64) -> Option<Id> {
        let n = self.history.len() as u64;
        if last - now >= n {
            return None;
        }
        for tick in now..last {
            let slot = &self.history[(tick % n) as usize];
            let mut entry = slot.load(Ordering::Acquire);
            loop {
                let (entry_tick, next) = (
                    entry >> self.hist_width,
                    entry & ((1 << self.hist_width) - 1),
                );
                if entry_tick != tick + 1 || next > self.max_seq {
                    break;
                }
                match slot.compare_exchange_weak(
                    entry,
                    entry + 1,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        bump(&self.counters.history_reuses);
                        return Some(self.compose(tick, 0, next));
                    }
                    Err(actual) => entry = actual,
                }
            }
        }
        None
    }

    /// Reserves `n` IDs at once and returns them as runs.
    ///
    /// With [`SequenceExhausted::Borrow`] the whole batch is reserved with one
    /// atomic step, borrowing ticks ahead of the clock within the bound; with
    /// `Wait` it takes one step per tick and waits for each. Under a clock
    /// rollback the policy applies as for [`Snowflake::next_id`] (the
    /// `rollback-bits` and `history` policies hand out those IDs one at a time).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCount`] when `n` is 0 or above [`Snowflake::MAX_BATCH`], and
    /// the errors of [`Snowflake::next_id`]. IDs reserved before an error are
    /// dropped, never handed out again.
    pub fn next_ids(&self, n: u64) -> Result<IdBatch> {
        if n == 0 || n > Snowflake::MAX_BATCH {
            return Err(Error::InvalidCount {
                count: n,
                max: Snowflake::MAX_BATCH,
            });
        }
        let per_tick = self.max_seq + 1;
        let mut batch = IdBatch::with_capacity((n / per_tick + 2).min(4096) as usize);
        let mut remaining = n;
        let mut cur = self.words().state.load(Ordering::Acquire);
        let mut waited = Duration::ZERO;
        let stride = self.bits.seq_stride();
        while remaining > 0 {
            let now_ns = self.clock.now_nanos();
            let (last, rb, next) = self.unpack(cur);
            let (now, t0, s0) = match self.position(now_ns, last)? {
                Position::After(now) => (now, now, self.start_seq(now)),
                Position::Within(since) => {
                    let now = since / self.unit_ns as u64;
                    if next <= self.max_seq {
                        (now, last, next)
                    } else {
                        (now, last + 1, self.start_seq(last + 1))
                    }
                }
                Position::Behind(now) => {
                    if let Behind::Issued(id) = self.behind(cur, now, now_ns, &mut waited)? {
                        batch.push(IdRun::new(id.get(), 1, stride));
                        remaining -= 1;
                    }
                    cur = self.words().state.load(Ordering::Acquire);
                    continue;
                }
            };
            // The last tick this step may issue at: the clock's (or the state's,
            // when it is ahead), plus what the exhaustion policy may borrow.
            let limit = now.max(last) + self.exhaust_borrow.unwrap_or(0);
            if t0 > limit {
                bump(&self.counters.exhaustion_waits);
                self.wait_for_tick(t0 - self.exhaust_borrow.unwrap_or(0), now_ns);
                cur = self.words().state.load(Ordering::Acquire);
                continue;
            }
            // Walk ticks t0..=limit taking sequence numbers, without publishing yet.
            let (mut t, mut s, mut left) = (t0, s0, remaining);
            loop {
                let take = (per_tick - s).min(left);
                left -= take;
                if left == 0 || t == limit {
                    s += take;
                    break;
                }
                t += 1;
                s = self.start_seq(t);
            }
            self.check_limits(t0)?;
            self.check_limits(t)?;
            match self.words().state.compare_exchange_weak(
                cur,
                self.pack(t, rb, s),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    if !self.history.is_empty() && t0 != last {
                        self.record_history(last, next, t0);
                    }
                    let (mut t, mut s, mut left) = (t0, s0, remaining);
                    while left > 0 {
                        let take = (per_tick - s).min(left);
                        if take > 0 {
                            batch.push(IdRun::new(self.compose(t, rb, s).get(), take, stride));
                        }
                        left -= take;
                        if t == limit {
                            break;
                        }
                        t += 1;
                        s = self.start_seq(t);
                    }
                    remaining = left;
                    cur = self.words().state.load(Ordering::Acquire);
                }
                Err(actual) => cur = actual,
            }
        }
        Ok(batch)
    }

    /// Allows IDs up to and including `mark` (the worker store has persisted it).
    /// The mark only moves forward; an earlier value is ignored, and so is any
    /// value on a generator built without [`SnowflakeBuilder::with_mark`].
    pub fn advance_mark(&self, mark: Timestamp) {
        self.words()
            .mark_end
            .fetch_max(self.mark_end_for(mark), Ordering::AcqRel);
    }

    /// Lowers the mark to `until` (never raises it): the generator stops issuing
    /// IDs whose time passes `until`, at once, whatever marks were allowed before.
    ///
    /// For the holder of a worker ID that lost the right to issue (a lease that
    /// ran out, a claim taken over): a mark can only be raised again with
    /// [`Snowflake::advance_mark`] after it is persisted anew. Pass a time before
    /// the layout's epoch (such as [`Timestamp::MIN`]) to stop issuing altogether.
    ///
    /// - A call that is making an ID while the mark is lowered may still return
    ///   it; every ID is at or below a mark that was in force when it was checked.
    /// - Ignored on a generator built without [`SnowflakeBuilder::with_mark`], like
    ///   [`Snowflake::advance_mark`].
    #[cold]
    pub fn retract_mark(&self, until: Timestamp) {
        if self.bounded {
            self.words()
                .mark_end
                .fetch_min(self.mark_end_for(until), Ordering::AcqRel);
        }
    }

    /// Stops issuing for good and returns the generator's true high-water:
    /// the last instant of the latest tick any of its IDs was issued in (or
    /// of its start tick, when it issued none).
    ///
    /// This is what a clean stop records for the next holder of the worker
    /// ID, instead of a mark persisted a window ahead: a generator built
    /// [`with_start_after`](SnowflakeBuilder::with_start_after) the returned
    /// time issues only in later ticks, so it repeats none of these IDs.
    ///
    /// - **Final.** Every call that completes after `seal` returns fails
    ///   ([`Error::MarkReached`], or the layout's end), and so does every
    ///   call that was making an ID when `seal` ran but had not yet taken
    ///   it; an ID taken before is counted. The caller must not
    ///   [`advance_mark`](Snowflake::advance_mark) afterwards (that would
    ///   let IDs past the returned time out again).
    /// - **Unbounded generators too**: unlike
    ///   [`retract_mark`](Snowflake::retract_mark), it stops a generator built
    ///   without a mark.
    /// - **Every policy.** Under `rollback-bits` the state's tick can step
    ///   back; the ticks left behind are counted from the rollback table.
    ///   The `history` policy issues below the last tick only.
    ///
    /// # Why it is exact
    ///
    /// The mark is pulled to zero first, then the state word is moved on by
    /// one compare-and-swap to a value it never held before (one past its
    /// sequence field, which only grows within a tick). An ID is the result
    /// of a read-modify-write of the state word: one ordered before that
    /// swap is in the tick it read (counted); one ordered after it either
    /// read the new value, and so sees the zero mark and fails, or read an
    /// older value, and its compare-and-swap fails. A `fetch_add` claim
    /// checks the mark after its claim, so it sees the zero mark as well.
    #[cold]
    pub fn seal(&self) -> Timestamp {
        self.words().mark_end.fetch_min(0, Ordering::AcqRel);
        let mut cur = self.words().state.load(Ordering::Acquire);
        // One past the sequence field is a value the word never held (the
        // field only grows within a tick, and the headroom above the
        // layout's sequences absorbs one claim per thread, this one too).
        while let Err(actual) = self.words().state.compare_exchange_weak(
            cur,
            cur + 1,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            cur = actual;
        }
        let (last, _, _) = self.unpack(cur);
        // `rollback-bits`: 1 + the highest tick issued under each counter
        // value left behind (0: never used).
        let left_behind = lock(&self.rollback_max)
            .iter()
            .map(|&end| end.saturating_sub(1))
            .max()
            .unwrap_or(0);
        let high = last.max(left_behind);
        self.layout
            .time_of_tick(high.saturating_add(1))
            .saturating_sub(jiff::SignedDuration::from_nanos(1))
            .unwrap_or(Timestamp::MIN)
    }

    #[inline(always)]
    fn words(&self) -> &SnowflakeWords {
        match &self.words {
            Words::Owned(words) => words,
            Words::Shared(words) => words,
        }
    }

    /// The current high-water mark, or `None` when the generator is unbounded.
    pub fn mark(&self) -> Option<Timestamp> {
        let end = self.words().mark_end.load(Ordering::Acquire);
        self.bounded.then(|| {
            self.layout
                .time_of_tick(end)
                .saturating_sub(jiff::SignedDuration::from_nanos(1))
                .unwrap_or(Timestamp::MIN)
        })
    }

    /// The time of the tick the last ID was issued in (or the start mark's tick
    /// before the first ID).
    pub fn last_tick_time(&self) -> Timestamp {
        let (last, _, _) = self.unpack(self.words().state.load(Ordering::Acquire));
        self.layout.time_of_tick(last)
    }

    /// How far the last issued ID's time is ahead of the clock (zero when it is not).
    pub fn lead(&self) -> Duration {
        let (last, _, _) = self.unpack(self.words().state.load(Ordering::Acquire));
        let ahead = self
            .tick_start_ns(last)
            .saturating_sub(self.clock.now_nanos());
        Duration::from_nanos(ahead.max(0) as u64)
    }

    /// The clock the generator reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

fn timestamp_of(ns: i64) -> Timestamp {
    Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(Timestamp::MIN)
}

#[cfg(all(test, not(loom)))]
mod tests;

/// Model checks of the state word: `RUSTFLAGS="--cfg loom" cargo test -p idmint-core --lib --release loom`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::clock::ManualClock;
    use loom::sync::Arc as LoomArc;

    /// Two threads issue (one ID, then a batch of two, or two single IDs); with
    /// `step_back`, the clock moves back 1 ms while they run. Preemptions are
    /// bounded at 3, which covers every interleaving of two CAS loops that race
    /// once each way (loom's guidance for lock-free code).
    fn model(
        layout: Layout,
        policy: ClockBehind,
        exhausted: SequenceExhausted,
        step_back: bool,
        batch: bool,
    ) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(move || {
            let clock = ManualClock::at_millis(1_795_219_200_000);
            let g = LoomArc::new(
                Snowflake::builder(layout)
                    .with_clock(Arc::new(clock.clone()))
                    .with_clock_behind(policy)
                    .with_sequence_exhausted(exhausted)
                    .build()
                    .unwrap(),
            );
            // Two IDs before the threads start, so a step back has something to repeat.
            let mut all: Vec<Id> = (0..2).filter_map(|_| g.next_id().ok()).collect();
            let threads: Vec<_> = (0..2)
                .map(|i| {
                    let g = g.clone();
                    loom::thread::spawn(move || {
                        let mut mine: Vec<Id> = g.next_id().ok().into_iter().collect();
                        if batch && i == 0 {
                            mine.extend(
                                g.next_ids(2)
                                    .map(|b| b.iter().collect::<Vec<_>>())
                                    .unwrap_or_default(),
                            );
                        } else {
                            mine.extend(g.next_id().ok());
                        }
                        mine
                    })
                })
                .collect();
            if step_back {
                clock.step_back(Duration::from_millis(1));
            }
            for t in threads {
                let mine = t.join().unwrap();
                if !matches!(
                    policy,
                    ClockBehind::RollbackBits | ClockBehind::History { .. }
                ) {
                    assert!(
                        mine.windows(2).all(|w| w[0] < w[1]),
                        "not monotonic: {mine:?}"
                    );
                }
                all.extend(mine);
            }
            let n = all.len();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), n, "duplicate ID");
        });
    }

    /// One thread issues (two IDs, or a batch) while another seals: every ID
    /// it got is at or below the sealed time, and once it was refused it
    /// gets nothing more.
    fn seal_model(exhausted: SequenceExhausted, batch: bool) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(move || {
            let clock = ManualClock::at_millis(1_795_219_200_000);
            let layout = tiny();
            let g = LoomArc::new(
                Snowflake::builder(layout)
                    .with_clock(Arc::new(clock.clone()))
                    .with_sequence_exhausted(exhausted)
                    .with_mark(jiff::Timestamp::from_millisecond(1_795_219_300_000).unwrap())
                    .build()
                    .unwrap(),
            );
            let issuer = {
                let g = g.clone();
                loom::thread::spawn(move || {
                    let mut got = Vec::new();
                    let mut refused = false;
                    for _ in 0..2 {
                        let ids = if batch {
                            g.next_ids(3).map(|b| b.iter().collect::<Vec<_>>())
                        } else {
                            g.next_id().map(|id| vec![id])
                        };
                        match ids {
                            Ok(ids) => {
                                assert!(!refused, "issued after a refusal");
                                got.extend(ids);
                            }
                            Err(_) => refused = true,
                        }
                    }
                    got
                })
            };
            let high = g.seal();
            for id in issuer.join().unwrap() {
                let time = layout.decode(id.get()).unwrap().time;
                assert!(time <= high, "{id} at {time} passed the seal at {high}");
            }
            assert!(g.next_id().is_err());
        });
    }

    #[test]
    fn loom_seal_single_ids() {
        seal_model(SequenceExhausted::Wait, false);
    }

    #[test]
    fn loom_seal_batches() {
        let borrow = SequenceExhausted::Borrow {
            max_lead: Duration::from_millis(3),
        };
        seal_model(borrow, true);
    }

    /// Two sequence bits: four IDs a tick, so the threads cross tick boundaries.
    fn tiny() -> Layout {
        "time=41,epoch=2020-01-01,worker=2,rollback=1,sequence=2"
            .parse()
            .unwrap()
    }

    #[test]
    fn loom_wait_policy() {
        model(
            tiny(),
            ClockBehind::Wait {
                max: Duration::from_millis(5),
            },
            SequenceExhausted::Wait,
            false,
            false,
        );
    }

    #[test]
    fn loom_borrow_batches() {
        let borrow = SequenceExhausted::Borrow {
            max_lead: Duration::from_millis(3),
        };
        model(tiny(), ClockBehind::Fail, borrow, false, true);
    }

    #[test]
    fn loom_rollback_bits_with_a_step_back() {
        model(
            tiny(),
            ClockBehind::RollbackBits,
            SequenceExhausted::Wait,
            true,
            false,
        );
    }

    #[test]
    fn loom_history_with_a_step_back() {
        model(
            tiny(),
            ClockBehind::History { ticks: 4 },
            SequenceExhausted::Wait,
            true,
            false,
        );
    }
}
