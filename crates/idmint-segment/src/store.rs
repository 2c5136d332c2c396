//! The [`SegmentStore`] seam: where segment keys live and how a segment is leased.
//!
//! The allocator ([`crate::SegmentAllocator`]) is the only consumer; it bounds
//! every call with its store timeout, so implementations need not add their own
//! (they should still set connect timeouts on their pools).

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use jiff::{Timestamp, Unit};

use crate::error::{Result, SegmentError};

/// The longest key name, as Leaf's `biz_tag varchar(128)`.
pub const MAX_KEY_LEN: usize = 128;

/// The longest epoch marker.
const MAX_EPOCH_LEN: usize = 64;

/// A store's epoch marker: 1 to 64 ASCII letters, digits and `.` `_` `-` `:`.
///
/// [`StoreEpoch::generate`] makes one from the time and 64 random bits
/// (`2026-11-21T08:00:00Z_3f9a1c2e4b5d6f70`), so two initialisations of a
/// store (before and after a reset) never write the same marker.
///
/// # Examples
/// ```
/// use idmint_segment::StoreEpoch;
///
/// let a = StoreEpoch::generate();
/// assert_ne!(a, StoreEpoch::generate());
/// assert_eq!(a.as_str().parse::<StoreEpoch>()?, a);
/// assert!("two words".parse::<StoreEpoch>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreEpoch(String);

impl StoreEpoch {
    /// A new marker: the time (to the second, UTC) and 64 random bits.
    pub fn generate() -> StoreEpoch {
        let now = Timestamp::now();
        let now = now.round(Unit::Second).unwrap_or(now);
        StoreEpoch(format!("{now}_{:016x}", fastrand::u64(..)))
    }

    /// The marker as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for StoreEpoch {
    type Err = SegmentError;

    /// Reads a marker.
    ///
    /// # Errors
    /// [`SegmentError::InvalidSpec`] (field `epoch`) for an empty or too long
    /// text, or one with other characters.
    fn from_str(text: &str) -> Result<StoreEpoch> {
        let ok = !text.is_empty()
            && text.len() <= MAX_EPOCH_LEN
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
        if !ok {
            let shown: String = text.chars().take(MAX_EPOCH_LEN).collect();
            return Err(SegmentError::InvalidSpec {
                field: "epoch",
                reason: format!(
                    "{shown:?} is not 1 to {MAX_EPOCH_LEN} letters, digits, '.', '_', '-', ':'"
                ),
            });
        }
        Ok(StoreEpoch(text.to_owned()))
    }
}

impl fmt::Display for StoreEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The largest ID a segment may contain (2^63 − 1).
pub const MAX_ID: u64 = i64::MAX as u64;

/// Checks a key name: 1 to [`MAX_KEY_LEN`] bytes of ASCII letters, digits and
/// `.` `_` `-` `:` (so it is safe in a URL path, a Redis key and a log line).
///
/// # Errors
/// [`SegmentError::InvalidKey`] naming what is wrong.
///
/// # Examples
/// ```
/// use idmint_segment::validate_key;
///
/// assert!(validate_key("order.v2").is_ok());
/// assert!(validate_key("").is_err());
/// assert!(validate_key("a b").is_err());
/// ```
pub fn validate_key(key: &str) -> Result<()> {
    // A table over bytes, not a test per char: this runs on every request,
    // and decoding UTF-8 here was a tenth of a RESP `INCR`'s instructions.
    const KEY_BYTES: [bool; 256] = {
        let mut table = [false; 256];
        let mut b = 0;
        while b < 256 {
            let c = b as u8;
            table[b] = c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b':');
            b += 1;
        }
        table
    };

    let reason = if key.is_empty() {
        "a key is at least one character".to_owned()
    } else if key.len() > MAX_KEY_LEN {
        format!("a key is at most {MAX_KEY_LEN} bytes, not {}", key.len())
    } else if let Some(at) = key.bytes().position(|b| !KEY_BYTES[usize::from(b)]) {
        // Every byte before `at` is ASCII, so `at` starts a character.
        let c = key[at..].chars().next().unwrap_or_default();
        format!("{c:?} is not allowed; use letters, digits, '.', '_', '-' and ':'")
    } else {
        return Ok(());
    };
    let shown: String = key.chars().take(64).collect();
    Err(SegmentError::InvalidKey { key: shown, reason })
}

/// One key as its store holds it (Leaf's `leaf_alloc` row plus Tinyid's
/// `delta`/`remainder`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// The key (Leaf's `biz_tag`).
    pub key: String,
    /// The end of the last segment handed out: the next segment starts here.
    pub max_id: u64,
    /// The key's configured step: the size of a segment, and the floor of the
    /// allocator's dynamic step.
    pub step: u64,
    /// Only IDs with `id % delta == remainder` are issued (1 and 0: all).
    pub delta: u64,
    /// See [`KeyInfo::delta`].
    pub remainder: u64,
    /// Free text.
    pub description: String,
    /// When the row last changed, if the store keeps it.
    pub updated: Option<Timestamp>,
}

/// A key to create.
///
/// # Examples
/// ```
/// use idmint_segment::NewKey;
///
/// let key = NewKey::new("order", 1000).with_start(1).with_delta(2, 1);
/// key.validate()?;
/// assert_eq!(key.start(), 1);
/// assert!(NewKey::new("order", 0).validate().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewKey {
    key: String,
    step: u64,
    start: u64,
    delta: u64,
    remainder: u64,
    description: String,
}

impl NewKey {
    /// A key issuing from 1 in segments of `step`.
    pub fn new(key: impl Into<String>, step: u64) -> NewKey {
        NewKey {
            key: key.into(),
            step,
            start: 1,
            delta: 1,
            remainder: 0,
            description: String::new(),
        }
    }

    /// The first ID (the row's initial `max_id`); IDs are never 0, so a start
    /// of 0 issues from 1.
    pub fn with_start(mut self, start: u64) -> NewKey {
        self.start = start;
        self
    }

    /// Issue only IDs with `id % delta == remainder` (Tinyid).
    pub fn with_delta(mut self, delta: u64, remainder: u64) -> NewKey {
        self.delta = delta;
        self.remainder = remainder;
        self
    }

    /// A description stored with the key.
    pub fn with_description(mut self, description: impl Into<String>) -> NewKey {
        self.description = description.into();
        self
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The step.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The first ID.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The delta.
    pub fn delta(&self) -> u64 {
        self.delta
    }

    /// The remainder.
    pub fn remainder(&self) -> u64 {
        self.remainder
    }

    /// The description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Checks every field; stores call this before writing.
    ///
    /// # Errors
    /// [`SegmentError::InvalidKey`] or [`SegmentError::InvalidSpec`] naming
    /// the field: a step of 0, a delta of 0 or above the step, a remainder not
    /// below the delta, a start past the largest ID, a description over 256 bytes.
    pub fn validate(&self) -> Result<()> {
        validate_key(&self.key)?;
        let spec = |field, reason: String| Err(SegmentError::InvalidSpec { field, reason });
        if self.step == 0 || self.step > MAX_ID {
            return spec("step", format!("{} is not in 1..={MAX_ID}", self.step));
        }
        if self.delta == 0 || self.delta > self.step {
            return spec(
                "delta",
                format!(
                    "{} is not in 1..={} (the step): a segment must hold at least one ID",
                    self.delta, self.step
                ),
            );
        }
        if self.remainder >= self.delta {
            return spec(
                "remainder",
                format!("{} is not below the delta {}", self.remainder, self.delta),
            );
        }
        if self.start > MAX_ID - self.step {
            return spec(
                "start",
                format!("{} leaves no room for a step of {}", self.start, self.step),
            );
        }
        if self.description.len() > 256 {
            return spec("description", "is longer than 256 bytes".to_owned());
        }
        Ok(())
    }
}

/// A segment leased from a store: the raw numbers `[max_id − step, max_id)`,
/// of which those with `n % delta == remainder` (and above 0) are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentGrant {
    /// The row's `max_id` after the lease: the segment's end (exclusive).
    pub max_id: u64,
    /// The step used for this lease.
    pub step: u64,
    /// The key's delta.
    pub delta: u64,
    /// The key's remainder.
    pub remainder: u64,
}

impl SegmentGrant {
    /// The first raw number of the segment (0 for a grant whose step passes
    /// its `max_id`, which no correct store hands out).
    pub fn start(&self) -> u64 {
        self.max_id.saturating_sub(self.step)
    }
}

/// Where segment keys live.
///
/// # Contract
/// - [`SegmentStore::fetch_above`] is atomic across every process sharing the
///   store: two fetches of one key never return overlapping ranges, and each
///   returns a range above every range returned before it. A fetch refused
///   for its floor changes nothing.
/// - A key created by [`SegmentStore::create`] (or by hand in the table) is
///   visible to the next [`SegmentStore::describe`] and `fetch`, in any process.
/// - A store that keeps a ledger ([`SegmentStore::keeps_ledger`]) records
///   every key it creates or raises, in the same atomic step, and
///   [`SegmentStore::remember_keys`] records the keys it holds that were
///   made by hand; [`SegmentStore::create`] refuses a key the ledger knows
///   and the store no longer holds ([`SegmentError::KeyForgotten`]). Only
///   [`SegmentStore::raise`] brings such a key back.
/// - [`SegmentStore::raise`] never lowers a key.
/// - A store that keeps an epoch marker ([`SegmentStore::keeps_epoch`]) writes
///   it only through [`SegmentStore::init_epoch`], once: a marker that is
///   missing or different later means the store was reset.
/// - Calls may hang when the backend does; the allocator bounds them.
#[async_trait]
pub trait SegmentStore: Send + Sync + fmt::Debug + 'static {
    /// The store kind, for errors, logs and metrics (`sqlite`, `postgres`,
    /// `mysql`, `redis`, `memory`).
    fn kind(&self) -> &'static str;

    /// Leases the key's next segment: `max_id += step` (the given step, else
    /// the key's own) in one atomic step, returning the new row. The same as
    /// [`SegmentStore::fetch_above`] with a floor of 0.
    ///
    /// # Errors
    /// As [`SegmentStore::fetch_above`].
    async fn fetch(&self, key: &str, step: Option<u64>) -> Result<SegmentGrant> {
        self.fetch_above(key, step, 0).await
    }

    /// Leases the key's next segment, as [`SegmentStore::fetch`], only when
    /// the key's `max_id` is at least `floor`, so the segment starts at or
    /// above it; else changes nothing. The check and the lease are one
    /// atomic step.
    ///
    /// # Errors
    /// [`SegmentError::NotFound`] when the key has no row,
    /// [`SegmentError::KeyBelowFloor`] when its `max_id` is below `floor`,
    /// [`SegmentError::Exhausted`] when `max_id + step` would pass 2^63 − 1,
    /// [`SegmentError::Backend`] when the store fails.
    async fn fetch_above(&self, key: &str, step: Option<u64>, floor: u64) -> Result<SegmentGrant>;

    /// The key's row, or `None`.
    ///
    /// # Errors
    /// [`SegmentError::Backend`] when the store fails.
    async fn describe(&self, key: &str) -> Result<Option<KeyInfo>>;

    /// Creates a key (validated with [`NewKey::validate`]), and records it in
    /// the store's ledger when it keeps one.
    ///
    /// # Errors
    /// [`SegmentError::KeyExists`] when it exists,
    /// [`SegmentError::KeyForgotten`] when the ledger knows the key and its
    /// row is gone, the validation errors, and [`SegmentError::Backend`].
    async fn create(&self, key: &NewKey) -> Result<KeyInfo>;

    /// Every key, sorted by name.
    ///
    /// # Errors
    /// [`SegmentError::Backend`] when the store fails.
    async fn list(&self) -> Result<Vec<KeyInfo>>;

    /// Raises a key so that its next segment starts at `key.start()` or
    /// above: a missing key is created as `key` describes it; an existing
    /// one's `max_id` becomes `key.start()` when it is below, and is left
    /// alone otherwise (never lowered). Atomic against concurrent fetches.
    /// Returns the row afterwards. The operator's fix after a reset or a
    /// restore (`idmint segment raise`).
    ///
    /// # Errors
    /// The validation errors of [`NewKey::validate`] (for a key to create),
    /// [`SegmentError::Backend`] when the store fails.
    async fn raise(&self, key: &NewKey) -> Result<KeyInfo>;

    /// Whether the store keeps a ledger of every key it ever had; `false`
    /// for tables idmint uses as their peers made them (Leaf's, Tinyid's).
    fn keeps_ledger(&self) -> bool {
        false
    }

    /// Records in the ledger every key the store holds now (keys made by
    /// hand in the table, or before the ledger existed); nothing for a
    /// store that keeps none. A server runs it at every start, before it
    /// creates the keys its config declares.
    ///
    /// # Errors
    /// [`SegmentError::Backend`] when the store fails.
    async fn remember_keys(&self) -> Result<()> {
        Ok(())
    }

    /// Whether the store keeps an epoch marker; `false` for tables idmint
    /// uses as their peers made them (Leaf's, Tinyid's), where it adds
    /// nothing.
    fn keeps_epoch(&self) -> bool;

    /// The store's epoch marker: `None` when it has none (never initialised,
    /// or reset since; always for a store that keeps none).
    ///
    /// # Errors
    /// [`SegmentError::Backend`] when the store fails.
    async fn epoch(&self) -> Result<Option<StoreEpoch>>;

    /// Writes `epoch` as the store's marker unless it has one; returns the
    /// marker in place afterwards (`epoch`, or the one another process wrote
    /// first). Atomic: concurrent callers all get the same marker.
    ///
    /// # Errors
    /// [`SegmentError::Config`] for a store that keeps no marker,
    /// [`SegmentError::Backend`] when the store fails.
    async fn init_epoch(&self, epoch: &StoreEpoch) -> Result<StoreEpoch>;
}

/// A Lua function for scripts of stores that keep numbers as text (Redis):
/// `below(a, b)` is `a < b` for decimal integers, compared as text (Lua's
/// numbers are doubles, exact only below 2^53); a leading `-` is below, and
/// leading zeros don't count.
pub(crate) const BELOW_LUA: &str = r"
local function below(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end
  a = string.gsub(a, '^0+', '')
  b = string.gsub(b, '^0+', '')
  if #a ~= #b then return #a < #b end
  return a < b
end
";
