//! [`SegmentBuffer`]: the lock-free double buffer behind segment mode
//! (Leaf-segment, Tinyid).
//!
//! A segment is a range of IDs leased from a store (`idmint-segment` does the
//! leasing; this module does no I/O). The buffer holds the current segment and
//! the next one, hands out IDs from them with one atomic add, and takes a new
//! segment from a single installer without ever stopping the takers.
//!
//! # How it works
//! Every segment installed gets a range of *virtual indices* right after the
//! previous one's: segment `g` covers `[vstart_g, vstart_g + count_g)`, with
//! `vstart_{g+1} = vstart_g + count_g`. One `AtomicU64` cursor hands out virtual
//! indices (`fetch_add` for one ID, a compare-and-swap capped at the buffered
//! end for a batch), and index `v` of segment `g` means ID
//! `first_g + (v − vstart_g) · stride_g`. Because both the virtual ranges and
//! the ID ranges of successive segments increase, the map is strictly
//! increasing: the cursor's order is the IDs' order.
//!
//! The two newest segments sit in two slots. Installing segment `g + 1`
//! overwrites the slot of `g − 1`; each slot is a seqlock whose version is its
//! `vstart` (unique per segment, so no ABA). A taker reads the buffered end
//! (`limit`), then the slots; an index below that end that no slot covers
//! belonged to a segment already overwritten, and is skipped (the taker takes
//! again). An index at or above the end is *reserved*: the caller waits for
//! the next install and then resolves it.
//!
//! # Invariants
//! - Each virtual index is handed out once (the cursor only grows), and maps
//!   to at most one ID (segments' virtual ranges are disjoint).
//! - A taker maps an index only through a consistent seqlock read of the slot
//!   that holds its segment, so it never builds an ID from a half-written slot.
//! - Installed segments strictly increase: [`SegmentBuffer::install`] refuses
//!   one that doesn't start above everything installed before.
//! - IDs an index skipped (a slot overwritten under a slow taker) are never
//!   issued: gaps, never repeats.

use crossbeam_utils::CachePadded;

use crate::batch::{IdBatch, IdRun};
use crate::error::{Error, Result};
use crate::id::Id;
use crate::sync::{AtomicU64, Ordering, fence};

/// A slot's `vstart` while it is being written.
const WRITING: u64 = u64::MAX;

/// One of the two segment slots: a seqlock whose version is `vstart`.
#[derive(Debug)]
struct Slot {
    /// The segment's first virtual index, or [`WRITING`].
    vstart: AtomicU64,
    first: AtomicU64,
    count: AtomicU64,
    stride: AtomicU64,
    /// The virtual index whose taker asks for the next segment.
    preload_at: AtomicU64,
}

/// A consistent read of a slot.
#[derive(Debug, Clone, Copy)]
struct SlotView {
    vstart: u64,
    first: u64,
    count: u64,
    stride: u64,
    preload_at: u64,
}

impl SlotView {
    fn vend(&self) -> u64 {
        self.vstart + self.count
    }
}

impl Slot {
    fn new() -> Slot {
        Slot {
            vstart: AtomicU64::new(WRITING),
            first: AtomicU64::new(0),
            count: AtomicU64::new(0),
            stride: AtomicU64::new(0),
            preload_at: AtomicU64::new(0),
        }
    }

    /// The slot's segment, or `None` when it is empty or being rewritten
    /// (Boehm's seqlock reader: acquire the version, read relaxed, acquire
    /// fence, re-read the version).
    #[inline]
    fn read(&self) -> Option<SlotView> {
        let vstart = self.vstart.load(Ordering::Acquire);
        if vstart == WRITING {
            return None;
        }
        let first = self.first.load(Ordering::Relaxed);
        let count = self.count.load(Ordering::Relaxed);
        let stride = self.stride.load(Ordering::Relaxed);
        let preload_at = self.preload_at.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (self.vstart.load(Ordering::Relaxed) == vstart).then_some(SlotView {
            vstart,
            first,
            count,
            stride,
            preload_at,
        })
    }

    /// Rewrites the slot (the seqlock writer: mark, release fence, write
    /// relaxed, publish the version with release).
    fn write(&self, view: SlotView) {
        self.vstart.store(WRITING, Ordering::Relaxed);
        fence(Ordering::Release);
        self.first.store(view.first, Ordering::Relaxed);
        self.count.store(view.count, Ordering::Relaxed);
        self.stride.store(view.stride, Ordering::Relaxed);
        self.preload_at.store(view.preload_at, Ordering::Relaxed);
        self.vstart.store(view.vstart, Ordering::Release);
    }
}

/// Virtual indices handed out at or beyond the buffered end: the caller waits
/// for the next [`SegmentBuffer::install`] and then calls
/// [`SegmentBuffer::resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a reservation holds IDs; resolve it or they are skipped"]
pub struct Reservation {
    start: u64,
    len: u64,
}

impl Reservation {
    /// How many IDs the reservation holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: a reservation holds at least one index.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffered end (see [`SegmentBuffer::buffered_end`]) that resolves it.
    pub fn needs_end(&self) -> u64 {
        self.start + self.len
    }
}

/// What one [`SegmentBuffer::take`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    /// IDs appended to the batch.
    pub taken: u64,
    /// IDs the call asked for that it neither took nor reserved (nothing
    /// buffered, or indices of an overwritten segment): ask again.
    pub missing: u64,
    /// Indices handed out beyond the buffered end.
    pub reserved: Option<Reservation>,
    /// This call crossed the newest segment's preload point: fetch the next
    /// segment now (exactly one taker per segment sees this).
    pub preload: bool,
}

/// What one [`SegmentBuffer::take_one`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeOne {
    /// An ID; `preload` as in [`Take::preload`].
    Id {
        /// The ID.
        id: Id,
        /// Fetch the next segment now.
        preload: bool,
    },
    /// Other takers raced this one past the buffered end: wait for the next
    /// install and [`SegmentBuffer::resolve`] it.
    Reserved(Reservation),
    /// The index belonged to a segment overwritten meanwhile: take again.
    Skipped,
    /// Nothing is buffered: install a segment first.
    Empty,
}

/// What the buffer holds now, for status pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufferStatus {
    /// The segment IDs are coming from, with how many of its IDs are left.
    pub current: Option<(IdRun, u64)>,
    /// The segment after it, loaded and untouched.
    pub next: Option<IdRun>,
}

/// Where a buffer stands, for a preloader that watches buffers rather than
/// being told by the taker that crossed a preload point
/// ([`SegmentBuffer::position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufferPosition {
    /// Virtual indices handed out so far ([`SegmentBuffer::handed_out`]).
    pub handed_out: u64,
    /// The virtual end of what is buffered ([`SegmentBuffer::buffered_end`]).
    pub buffered_end: u64,
    /// The newest segment's preload index, while that segment is the one IDs
    /// come from (nothing buffered beyond it); `None` while a next segment
    /// waits, or before the first install.
    pub preload_at: Option<u64>,
}

impl BufferPosition {
    /// The newest segment's preload index was handed out (the same take that
    /// [`Take::preload`] flags) and no next segment is buffered: it is time to
    /// fetch one.
    pub fn wants_next(&self) -> bool {
        self.preload_at.is_some_and(|at| self.handed_out > at)
    }

    /// IDs between the preload point and the buffered end: what the takers
    /// use up while the next segment is being fetched.
    pub fn runway(&self) -> Option<u64> {
        self.preload_at
            .map(|at| self.buffered_end.saturating_sub(at))
    }
}

/// The lock-free double buffer of segment mode; see the [module docs](self).
///
/// # Contract
/// - **Thread-safe**: any number of threads take at once, lock-free (one atomic
///   add for a single ID, a compare-and-swap for a batch).
/// - **Strictly increasing**: IDs follow the order of the takes; a take that
///   completes before another starts gets smaller IDs.
/// - **No repeats**: an ID is handed out at most once; IDs of a segment
///   overwritten under a slow taker are skipped, never reissued.
/// - **Installs come from one writer at a time** (the caller serializes them,
///   as `idmint-segment` does with a per-key lock) and never block takers.
/// - **Nothing buffered**: a take appends nothing and reports the IDs as
///   `missing`; it never makes an ID up.
///
/// # Examples
/// ```
/// use idmint_core::{IdBatch, IdRun, SegmentBuffer};
///
/// let buffer = SegmentBuffer::new(0.1);
/// buffer.install(IdRun::from_range(1, 101, 1, 0)?)?;
/// let mut batch = IdBatch::new();
/// let take = buffer.take(30, &mut batch);
/// assert_eq!((take.taken, batch.first().unwrap().get()), (30, 1));
/// assert!(take.preload, "30 of 100 used passes the 10% preload point");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SegmentBuffer {
    /// The next virtual index to hand out. On a cache line of its own: every
    /// take writes it, and sharing a line with the read-mostly fields below
    /// would make every other core's next read of them a miss.
    cursor: CachePadded<AtomicU64>,
    /// The virtual end of the newest installed segment.
    limit: AtomicU64,
    /// How many segments were installed; segment `g` lives in `slots[g % 2]`.
    installed: AtomicU64,
    /// The last ID of the newest installed segment (writer-side check).
    newest_last: AtomicU64,
    slots: [Slot; 2],
    /// Share of a segment used before its taker asks for the next, in
    /// millionths.
    preload_ppm: u64,
}

impl SegmentBuffer {
    /// An empty buffer that asks for the next segment once `preload_share` of
    /// the newest one is used (Leaf: 0.1; clamped to 0..=1).
    pub fn new(preload_share: f64) -> SegmentBuffer {
        let share = if preload_share.is_nan() {
            0.0
        } else {
            preload_share.clamp(0.0, 1.0)
        };
        SegmentBuffer {
            cursor: CachePadded::new(AtomicU64::new(0)),
            limit: AtomicU64::new(0),
            installed: AtomicU64::new(0),
            newest_last: AtomicU64::new(0),
            slots: [Slot::new(), Slot::new()],
            preload_ppm: (share * 1e6) as u64,
        }
    }

    /// Takes up to `n` IDs (`n` ≥ 1), appending them to `batch` as runs.
    ///
    /// A single ID is one `fetch_add`; it may come back as a one-index
    /// [`Reservation`] when other takers raced it past the buffered end. A
    /// batch takes at most what is buffered (never reserves) and reports the
    /// rest as `missing`.
    pub fn take(&self, n: u64, batch: &mut IdBatch) -> Take {
        let limit = self.limit.load(Ordering::Acquire);
        let mut cursor = self.cursor.load(Ordering::Relaxed);
        if cursor >= limit || n == 0 {
            return Take {
                taken: 0,
                missing: n,
                reserved: None,
                preload: false,
            };
        }
        let (start, len) = if n == 1 {
            (self.cursor.fetch_add(1, Ordering::Relaxed), 1)
        } else {
            loop {
                let len = n.min(limit - cursor);
                match self.cursor.compare_exchange_weak(
                    cursor,
                    cursor + len,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break (cursor, len),
                    Err(now) if now >= limit => {
                        return Take {
                            taken: 0,
                            missing: n,
                            reserved: None,
                            preload: false,
                        };
                    }
                    Err(now) => cursor = now,
                }
            }
        };
        let mut take = self.map(start, len, limit, batch);
        take.missing += n - len;
        take
    }

    /// Takes one ID: the hot path, one `fetch_add` and one seqlock read, no
    /// allocation.
    #[inline]
    pub fn take_one(&self) -> TakeOne {
        let limit = self.limit.load(Ordering::Acquire);
        if self.cursor.load(Ordering::Relaxed) >= limit {
            return TakeOne::Empty;
        }
        let index = self.cursor.fetch_add(1, Ordering::Relaxed);
        if index >= limit {
            return TakeOne::Reserved(Reservation {
                start: index,
                len: 1,
            });
        }
        // The common case in one seqlock read: pick the slot by the newest
        // segment's start (the installer bumps `installed` before `limit`, so
        // after the acquire load of `limit` this is the newest or newer).
        let newest = &self.slots[((self.installed.load(Ordering::Relaxed) + 1) % 2) as usize];
        let slot = if index >= newest.vstart.load(Ordering::Relaxed) {
            newest
        } else {
            &self.slots[((self.installed.load(Ordering::Relaxed)) % 2) as usize]
        };
        if let Some(view) = slot.read()
            && (view.vstart..view.vend()).contains(&index)
        {
            return TakeOne::Id {
                id: Id::from_raw(view.first + (index - view.vstart) * view.stride),
                preload: index == view.preload_at && view.vend() == limit,
            };
        }
        // A slot rewritten meanwhile: the general path sorts it out.
        let mut id = None;
        let take = self.map_with(index, 1, limit, |run| id = Some(run.first()));
        match (id, take.reserved) {
            (Some(id), _) => TakeOne::Id {
                id,
                preload: take.preload,
            },
            (None, Some(reservation)) => TakeOne::Reserved(reservation),
            (None, None) => TakeOne::Skipped,
        }
    }

    /// Takes one ID only if one is buffered: never reserves, so a caller
    /// that gives up on `None` leaves nothing behind (a dropped
    /// [`Reservation`] would skip an index of the next segment). A
    /// compare-and-swap capped at the buffered end instead of
    /// [`SegmentBuffer::take_one`]'s `fetch_add`; the `bool` is the take's
    /// preload flag.
    pub fn try_take_one(&self) -> Option<(Id, bool)> {
        loop {
            let limit = self.limit.load(Ordering::Acquire);
            let index = self.cursor.load(Ordering::Relaxed);
            if index >= limit {
                return None;
            }
            if self
                .cursor
                .compare_exchange_weak(index, index + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            // Below `limit`, so mapped or skipped (its slot overwritten
            // under this taker), never reserved.
            let mut id = None;
            let take = self.map_with(index, 1, limit, |run| id = Some(run.first()));
            if let Some(id) = id {
                return Some((id, take.preload));
            }
        }
    }

    /// Maps the reservation's indices now that the buffered end passed them.
    ///
    /// # Errors
    /// Gives the reservation back when nothing was installed over it yet.
    pub fn resolve(
        &self,
        reservation: Reservation,
        batch: &mut IdBatch,
    ) -> Result<Take, Reservation> {
        let limit = self.limit.load(Ordering::Acquire);
        if limit < reservation.needs_end() {
            return Err(reservation);
        }
        Ok(self.map(reservation.start, reservation.len, limit, batch))
    }

    /// Maps virtual indices `[start, start + len)` through the slots, with
    /// `limit` read (acquire) before the slots.
    fn map(&self, start: u64, len: u64, limit: u64, batch: &mut IdBatch) -> Take {
        self.map_with(start, len, limit, |run| batch.push(run))
    }

    /// [`SegmentBuffer::map`] handing each run to `emit`.
    fn map_with(&self, start: u64, len: u64, limit: u64, mut emit: impl FnMut(IdRun)) -> Take {
        let end = start + len;
        let mut views = [self.slots[0].read(), self.slots[1].read()];
        if let [Some(a), Some(b)] = views
            && a.vstart > b.vstart
        {
            views.swap(0, 1);
        }
        let mut take = Take {
            taken: 0,
            missing: 0,
            reserved: None,
            preload: false,
        };
        let mut covered_to = start;
        for view in views.into_iter().flatten() {
            let lo = start.max(view.vstart);
            let hi = end.min(view.vend());
            if lo >= hi {
                continue;
            }
            let first = view.first + (lo - view.vstart) * view.stride;
            // Runs come out in increasing order: the slots are sorted by
            // vstart, and a later segment's IDs are above an earlier one's.
            emit(IdRun::new(first, hi - lo, view.stride));
            take.taken += hi - lo;
            covered_to = hi;
            if view.vend() == limit && (lo..hi).contains(&view.preload_at) {
                take.preload = true;
            }
        }
        let beyond = end.saturating_sub(limit.max(covered_to));
        if beyond > 0 {
            take.reserved = Some(Reservation {
                start: end - beyond,
                len: beyond,
            });
        }
        take.missing = len - take.taken - beyond;
        take
    }

    /// Installs the next segment after the newest.
    ///
    /// Installs must not run concurrently with each other (callers serialize
    /// them); takers are never blocked. Installing overwrites the older of the
    /// two slots: whatever of its segment was not yet taken is skipped.
    ///
    /// # Errors
    /// [`Error::InvalidRun`] when `segment` does not start above the last ID
    /// of the newest installed segment, or when a segment is still buffered
    /// untouched beyond the current one (see [`SegmentBuffer::wants_next`]):
    /// installing then would throw IDs away. Nothing changes.
    pub fn install(&self, segment: IdRun) -> Result<()> {
        if !self.wants_next() {
            return Err(Error::InvalidRun(
                "the next segment is already buffered; install when wants_next() says so".into(),
            ));
        }
        let generation = self.installed.load(Ordering::Relaxed);
        if generation > 0 {
            let newest_last = self.newest_last.load(Ordering::Relaxed);
            if segment.first <= newest_last {
                return Err(Error::InvalidRun(format!(
                    "segment from {} does not start above the last buffered ID {newest_last}",
                    segment.first
                )));
            }
        }
        let vstart = self.limit.load(Ordering::Relaxed);
        let preload_at = vstart + mul_ppm(segment.count, self.preload_ppm).min(segment.count - 1);
        self.slots[(generation % 2) as usize].write(SlotView {
            vstart,
            first: segment.first,
            count: segment.count,
            stride: segment.stride,
            preload_at,
        });
        self.newest_last
            .store(segment.last().get(), Ordering::Relaxed);
        self.installed.store(generation + 1, Ordering::Relaxed);
        // Publishes the slot: a taker that reads this limit sees the slot.
        self.limit.store(vstart + segment.count, Ordering::Release);
        Ok(())
    }

    /// The virtual end of what is buffered; compare with
    /// [`Reservation::needs_end`] and [`SegmentBuffer::handed_out`].
    pub fn buffered_end(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// How many virtual indices were handed out (taken, reserved or skipped).
    pub fn handed_out(&self) -> u64 {
        self.cursor.load(Ordering::Relaxed)
    }

    /// IDs buffered and not yet handed out.
    pub fn remaining(&self) -> u64 {
        self.buffered_end().saturating_sub(self.handed_out())
    }

    /// True when nothing is buffered beyond the segment IDs come from now: the
    /// next segment should be fetched.
    pub fn wants_next(&self) -> bool {
        let cursor = self.handed_out();
        self.slots
            .iter()
            .filter_map(Slot::read)
            .all(|view| view.vstart <= cursor)
    }

    /// Where the buffer stands: handed out, buffered end, and the newest
    /// segment's preload index while IDs come from it. A few relaxed loads
    /// and one seqlock read; takers are never disturbed.
    ///
    /// # Examples
    /// ```
    /// use idmint_core::{IdBatch, IdRun, SegmentBuffer};
    ///
    /// let buffer = SegmentBuffer::new(0.1);
    /// buffer.install(IdRun::from_range(1, 101, 1, 0)?)?;
    /// assert_eq!(buffer.position().preload_at, Some(10));
    /// assert!(!buffer.position().wants_next());
    /// buffer.take(10, &mut IdBatch::new());
    /// assert!(!buffer.position().wants_next(), "indices 0..=9 taken");
    /// buffer.take(1, &mut IdBatch::new());
    /// assert!(buffer.position().wants_next(), "index 10 taken: the 10% point");
    /// assert_eq!(buffer.position().runway(), Some(90));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn position(&self) -> BufferPosition {
        let buffered_end = self.buffered_end();
        let handed_out = self.handed_out();
        let newest = self
            .slots
            .iter()
            .filter_map(Slot::read)
            .max_by_key(|view| view.vstart);
        BufferPosition {
            handed_out,
            buffered_end,
            preload_at: newest
                .filter(|view| view.vend() == buffered_end && view.vstart <= handed_out)
                .map(|view| view.preload_at),
        }
    }

    /// The current and next segment, for status pages.
    pub fn status(&self) -> BufferStatus {
        let cursor = self.handed_out();
        let mut status = BufferStatus::default();
        let mut views: Vec<SlotView> = self.slots.iter().filter_map(Slot::read).collect();
        views.sort_by_key(|v| v.vstart);
        for view in views {
            let segment = IdRun::new(view.first, view.count, view.stride);
            if view.vend() <= cursor {
                continue;
            }
            if view.vstart <= cursor {
                status.current = Some((segment, view.vend() - cursor));
            } else if status.current.is_none() && status.next.is_none() {
                status.current = Some((segment, view.count));
            } else {
                status.next = Some(segment);
            }
        }
        status
    }
}

/// `count · ppm / 10^6` without overflow.
fn mul_ppm(count: u64, ppm: u64) -> u64 {
    ((count as u128 * ppm as u128) / 1_000_000) as u64
}

#[cfg(all(test, not(loom)))]
mod tests;

/// Model checks: `RUSTFLAGS="--cfg loom" cargo test -p idmint-core --lib --release loom`.
#[cfg(all(test, loom))]
mod loom_tests;
