//! [`IdBatch`]: many IDs reserved in one step, held as runs rather than one by one.

use crate::error::{Error, Result};
use crate::id::Id;

/// IDs `first, first + stride, first + 2·stride, ...`, `count` of them.
///
/// A run is the IDs of one tick (consecutive integers for time·node·sequence
/// layouts, `stride` 1; steps of `2^node_bits` for sonyflake's order), or of one
/// segment lease (`stride` is the key's `delta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRun {
    pub(crate) first: u64,
    pub(crate) count: u64,
    pub(crate) stride: u64,
}

impl IdRun {
    pub(crate) fn new(first: u64, count: u64, stride: u64) -> IdRun {
        debug_assert!(count > 0);
        IdRun {
            first,
            count,
            stride,
        }
    }

    /// A run of `count` IDs from `first` in steps of `stride`, for generators
    /// outside this crate (segment allocators) that hand out runs too.
    ///
    /// # Errors
    /// [`Error::InvalidRun`] when `count` is zero, `stride` is zero while
    /// `count` is above one, or the last ID would be above [`Id::MAX`].
    ///
    /// # Examples
    /// ```
    /// use idmint_core::{Id, IdRun};
    ///
    /// let run = IdRun::try_new(Id::new(10)?, 4, 3)?;
    /// assert_eq!(run.last().get(), 19);
    /// assert!(IdRun::try_new(Id::MAX, 2, 1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_new(first: Id, count: u64, stride: u64) -> Result<IdRun> {
        if count == 0 {
            return Err(Error::InvalidRun("a run holds at least one ID".into()));
        }
        if stride == 0 && count > 1 {
            return Err(Error::InvalidRun(format!(
                "a run of {count} IDs needs a stride above 0"
            )));
        }
        let last = (count - 1)
            .checked_mul(stride)
            .and_then(|span| first.get().checked_add(span))
            .filter(|&last| last <= Id::MAX.get());
        if last.is_none() {
            return Err(Error::InvalidRun(format!(
                "{count} IDs from {first} in steps of {stride} pass the largest ID {}",
                Id::MAX
            )));
        }
        Ok(IdRun::new(first.get(), count, stride))
    }

    /// The IDs of a segment lease: those of `[start, end)` with `id % delta ==
    /// remainder` (Tinyid's filter; `1, 0` keeps them all), leaving out 0.
    ///
    /// # Examples
    /// ```
    /// use idmint_core::IdRun;
    ///
    /// // Tinyid's delta/remainder: of [1000, 2000), the IDs ≡ 1 (mod 3).
    /// let run = IdRun::from_range(1000, 2000, 3, 1)?;
    /// assert_eq!((run.first().get(), run.count(), run.stride()), (1000, 334, 3));
    /// assert_eq!(run.last().get(), 1999);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidRun`] when the range holds no such ID, `delta` is 0,
    /// `remainder` is not below `delta`, or `end` passes 2^63.
    pub fn from_range(start: u64, end: u64, delta: u64, remainder: u64) -> Result<IdRun> {
        if delta == 0 || remainder >= delta {
            return Err(Error::InvalidRun(format!(
                "delta {delta} and remainder {remainder}: need 0 <= remainder < delta"
            )));
        }
        if end > Id::MAX.get() + 1 {
            return Err(Error::InvalidRun(format!(
                "segment end {end} passes the largest ID {}",
                Id::MAX
            )));
        }
        let start = start.max(1);
        // The first n >= start with n % delta == remainder.
        let first = start + (remainder + delta - start % delta) % delta;
        if first >= end {
            return Err(Error::InvalidRun(format!(
                "[{start}, {end}) holds no ID with id % {delta} == {remainder}"
            )));
        }
        let count = (end - 1 - first) / delta + 1;
        Ok(IdRun::new(first, count, delta))
    }

    /// The first (smallest) ID of the run.
    pub fn first(&self) -> Id {
        Id::from_raw(self.first)
    }

    /// The last (largest) ID of the run.
    pub fn last(&self) -> Id {
        Id::from_raw(self.first + (self.count - 1) * self.stride)
    }

    /// How many IDs the run holds.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The difference between consecutive IDs of the run.
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// The IDs of the run, smallest first.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Id> + use<> {
        let IdRun {
            first,
            count,
            stride,
        } = *self;
        (0..count as usize).map(move |i| Id::from_raw(first + i as u64 * stride))
    }
}

/// IDs reserved together, in increasing order, as a list of [`IdRun`]s.
///
/// Reserving a batch costs one atomic step per call for generators that may
/// borrow ahead (and one per tick for those that wait), whatever its size;
/// building the IDs happens only when you iterate.
///
/// # Examples
///
/// ```
/// use idmint_core::{Layout, Snowflake, SequenceExhausted};
/// use std::time::Duration;
///
/// let generator = Snowflake::builder(Layout::TWITTER)
///     .with_worker(1)
///     .with_sequence_exhausted(SequenceExhausted::Borrow { max_lead: Duration::from_secs(1) })
///     .build()?;
/// let batch = generator.next_ids(100_000)?;
/// assert_eq!(batch.len(), 100_000);
/// assert!(batch.runs().len() >= 25, "4,096 IDs a tick");
/// let ids: Vec<_> = batch.iter().collect();
/// assert!(ids.windows(2).all(|w| w[0] < w[1]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdBatch {
    runs: Vec<IdRun>,
    len: u64,
}

impl IdBatch {
    /// An empty batch, to fill with [`IdBatch::try_push`].
    pub fn new() -> IdBatch {
        IdBatch::default()
    }

    /// Appends a run above every ID already in the batch.
    ///
    /// # Errors
    /// [`Error::InvalidRun`] when `run` does not start above the batch's last
    /// ID; the batch is unchanged.
    pub fn try_push(&mut self, run: IdRun) -> Result<()> {
        if let Some(last) = self.last()
            && last >= run.first()
        {
            return Err(Error::InvalidRun(format!(
                "a run from {} does not start above the batch's last ID {last}",
                run.first()
            )));
        }
        self.push(run);
        Ok(())
    }

    pub(crate) fn with_capacity(runs: usize) -> IdBatch {
        IdBatch {
            runs: Vec::with_capacity(runs),
            len: 0,
        }
    }

    pub(crate) fn push(&mut self, run: IdRun) {
        debug_assert!(self.runs.last().is_none_or(|r| r.last() < run.first()));
        self.len += run.count;
        self.runs.push(run);
    }

    /// How many IDs the batch holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the batch holds no IDs.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runs, in increasing order.
    pub fn runs(&self) -> &[IdRun] {
        &self.runs
    }

    /// The first (smallest) ID.
    pub fn first(&self) -> Option<Id> {
        self.runs.first().map(IdRun::first)
    }

    /// The last (largest) ID.
    pub fn last(&self) -> Option<Id> {
        self.runs.last().map(IdRun::last)
    }

    /// Every ID, smallest first.
    pub fn iter(&self) -> impl Iterator<Item = Id> + '_ {
        self.runs.iter().flat_map(IdRun::iter)
    }
}
