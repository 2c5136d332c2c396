// Size: about 1,580 lines before the tests (which are in `allocator/tests.rs`),
// some 370 of them docs. The allocator is one type whose loader, preloader,
// failure back-off and floors share a per-key lock and state; split up, the
// rule that every lease starts above the previous one (and above the
// persisted floor) would span files, so the file is kept whole.
//! [`SegmentAllocator`]: per-key double buffers filled from a [`SegmentStore`].
//!
//! The lock-free part (taking IDs, switching segments) is
//! [`idmint_core::SegmentBuffer`]; this module does the leasing around it:
//! which step to ask for, when, with what timeout, and what a caller sees when
//! the store is down.
//!
//! # Loading
//! - **Preload**: once a segment's preload point is passed (default 10% used,
//!   as Leaf), the preloader ([`SegmentAllocator::spawn_preloader`]) leases
//!   the next segment in the background. It is not woken by the taker that
//!   crosses the point (a thread wake costs that call 10 to 45 µs): its
//!   thread watches the keys' positions itself, as often as the fastest
//!   key's pace needs, and parks when nothing moves for a while (only then
//!   does a crossing taker wake it; see `watch.rs`). A failed preload is
//!   retried with backoff while the key still wants a segment.
//! - **On demand**: a caller that finds nothing buffered leases the next
//!   segment itself, one caller per key at a time (a per-key async lock); the
//!   others wait for it. A batch asks for a segment big enough for what it
//!   still needs, so 100,000 IDs cost one lease, not a hundred.
//! - Every store call is bounded by [`SegmentConfig::with_store_timeout`], and a
//!   caller waits at most [`SegmentConfig::with_wait`] in all before getting
//!   [`SegmentError::Unavailable`] with a retry hint.
//!
//! # Dynamic step (Leaf's rule)
//! A segment that lasted under 15 minutes doubles the next step (capped at the
//! configured maximum, default 1,000,000); one that lasted over 30 minutes
//! halves it, never below the key's configured step. Durations are read from
//! the allocator's [`Clock`], so tests drive them with a manual clock.
//!
//! # New and unknown keys
//! A key is looked up in the store on its first request (Leaf makes you wait up
//! to 60 s for its cache refresh); a key that isn't there is a typed
//! [`SegmentError::NotFound`], remembered for a short while
//! ([`SegmentConfig::with_miss_ttl`]) so a flood of requests for a missing key
//! doesn't become a flood of queries.
//!
//! # What is never issued twice
//! Every ID comes from a segment the store leased to this allocator alone; the
//! buffer hands each out once; a segment that doesn't start above the previous
//! one is refused ([`SegmentError::StoreWentBackwards`]). A lease whose answer
//! was lost (timeout) is simply never used, so after an outage the allocator
//! carries on above everything issued.
//!
//! # Across restarts: the floors
//! With a [`FloorFile`] ([`SegmentAllocator::with_floors`]), the same holds
//! across restarts and against a store that forgets. Each lease asks the store
//! for a segment only at or above the key's floor (one atomic step:
//! [`SegmentStore::fetch_above`]), and the floor is raised to the segment's
//! end, durably, before the segment is installed: one file write per
//! segment, nothing per ID. A store that has lost the key or holds it below
//! the floor (reset, or restored from an older backup) is refused with
//! [`SegmentError::KeyBelowFloor`] and left as it was; callers get that error
//! (backing off for the retry hint) until the store is raised above the
//! floor. [`SegmentAllocator::check_floors`] checks the store's epoch and
//! every floored key before serving.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use idmint_core::clock::MonotonicClock;
use idmint_core::{Clock, Id, IdBatch, IdRun, SegmentBuffer, TakeOne};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use idmint_core::BufferPosition;

use crate::error::{Result, SegmentError};
use crate::floor::FloorFile;
use crate::store::StoreEpoch;
use crate::store::{KeyInfo, MAX_ID, NewKey, SegmentGrant, SegmentStore, validate_key};
use crate::watch::{Bell, LINGER, Lookout, Scan, Watch};

/// Settings of a [`SegmentAllocator`].
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use idmint_segment::SegmentConfig;
///
/// let config = SegmentConfig::new()
///     .with_preload_share(0.2) // Tinyid's 20%
///     .with_max_step(500_000)
///     .with_store_timeout(Duration::from_secs(1));
/// assert_eq!(config.max_step(), 500_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SegmentConfig {
    preload_share: f64,
    max_step: u64,
    grow_below: Duration,
    shrink_above: Duration,
    store_timeout: Duration,
    wait: Duration,
    retry_after: Duration,
    miss_ttl: Duration,
    max_batch: u64,
}

impl Default for SegmentConfig {
    fn default() -> SegmentConfig {
        SegmentConfig::new()
    }
}

impl SegmentConfig {
    /// Leaf's defaults: preload at 10%, steps up to 1,000,000, double under
    /// 15 minutes and halve over 30; a 3 s store timeout and wait; misses
    /// remembered for 250 ms; batches up to 1,000,000.
    pub const fn new() -> SegmentConfig {
        SegmentConfig {
            preload_share: 0.1,
            max_step: 1_000_000,
            grow_below: Duration::from_secs(15 * 60),
            shrink_above: Duration::from_secs(30 * 60),
            store_timeout: Duration::from_secs(3),
            wait: Duration::from_secs(3),
            retry_after: Duration::from_secs(1),
            miss_ttl: Duration::from_millis(250),
            max_batch: 1_000_000,
        }
    }

    /// Share of a segment used before the next one is leased (0..=1).
    pub const fn with_preload_share(mut self, share: f64) -> SegmentConfig {
        self.preload_share = share;
        self
    }

    /// The dynamic step's cap (never below a key's own step).
    pub const fn with_max_step(mut self, max_step: u64) -> SegmentConfig {
        self.max_step = max_step;
        self
    }

    /// Segments that last less than `grow_below` double the step; those that
    /// last more than `shrink_above` halve it.
    pub const fn with_step_timing(
        mut self,
        grow_below: Duration,
        shrink_above: Duration,
    ) -> SegmentConfig {
        self.grow_below = grow_below;
        self.shrink_above = shrink_above;
        self
    }

    /// The bound on every store call.
    pub const fn with_store_timeout(mut self, timeout: Duration) -> SegmentConfig {
        self.store_timeout = timeout;
        self
    }

    /// How long a caller waits for a segment in all before
    /// [`SegmentError::Unavailable`].
    pub const fn with_wait(mut self, wait: Duration) -> SegmentConfig {
        self.wait = wait;
        self
    }

    /// The retry hint given with [`SegmentError::Unavailable`], and the first
    /// delay between preload retries.
    pub const fn with_retry_after(mut self, retry_after: Duration) -> SegmentConfig {
        self.retry_after = retry_after;
        self
    }

    /// How long an unknown key is remembered as unknown.
    pub const fn with_miss_ttl(mut self, miss_ttl: Duration) -> SegmentConfig {
        self.miss_ttl = miss_ttl;
        self
    }

    /// The largest batch one call may ask for.
    pub const fn with_max_batch(mut self, max_batch: u64) -> SegmentConfig {
        self.max_batch = max_batch;
        self
    }

    /// See [`SegmentConfig::with_preload_share`].
    pub const fn preload_share(&self) -> f64 {
        self.preload_share
    }

    /// See [`SegmentConfig::with_max_step`].
    pub const fn max_step(&self) -> u64 {
        self.max_step
    }

    /// See [`SegmentConfig::with_store_timeout`].
    pub const fn store_timeout(&self) -> Duration {
        self.store_timeout
    }

    /// See [`SegmentConfig::with_max_batch`].
    pub const fn max_batch(&self) -> u64 {
        self.max_batch
    }

    /// Checks the settings: the preload share, the step and batch bounds,
    /// the timeouts. Building a [`SegmentAllocator`] runs it; a server's config
    /// check runs it before any I/O.
    ///
    /// # Errors
    /// [`SegmentError::Config`] naming the setting that can't work.
    pub fn check(&self) -> Result<()> {
        let bad = |what: &str| Err(SegmentError::Config(what.to_owned()));
        if !(0.0..=1.0).contains(&self.preload_share) {
            return bad("preload share must be within 0..=1");
        }
        if self.max_step == 0 || self.max_batch == 0 {
            return bad("max step and max batch must be above 0");
        }
        if self.store_timeout.is_zero() || self.wait.is_zero() {
            return bad("store timeout and wait must be above 0");
        }
        if self.grow_below > self.shrink_above {
            return bad("the grow-below duration must not exceed the shrink-above duration");
        }
        Ok(())
    }
}

/// One key's state as a status page shows it (Leaf's `/cache`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStatus {
    /// The key.
    pub key: String,
    /// The step the next lease will use (the dynamic step).
    pub step: u64,
    /// The key's configured step (the dynamic step's floor).
    pub min_step: u64,
    /// The key's delta.
    pub delta: u64,
    /// The key's remainder.
    pub remainder: u64,
    /// The segment IDs come from: first and last ID, and IDs left.
    pub current: Option<(Id, Id, u64)>,
    /// The next segment, loaded: first and last ID.
    pub next: Option<(Id, Id)>,
    /// A lease is in flight.
    pub loading: bool,
    /// The last lease failure, cleared by a successful lease.
    pub last_error: Option<String>,
    /// The code of a standing refusal (`key_below_floor`, `store_reset`):
    /// the store holds less than this node issued from the key, and only an
    /// operator's `idmint segment raise` clears it. `None` otherwise.
    pub refusal: Option<&'static str>,
    /// The store's row, when the listing came from the store.
    pub stored: Option<KeyInfo>,
}

/// A key's buffer and what leasing it needs.
#[derive(Debug)]
struct KeyEntry {
    key: Arc<str>,
    buffer: SegmentBuffer,
    /// Serializes leases and installs for the key.
    loader: tokio::sync::Mutex<Loader>,
    /// Mirrors for status pages (read without the async lock).
    loading: AtomicBool,
    /// The preloader has a lease task for the key.
    preloading: AtomicBool,
    shown: Mutex<Shown>,
    /// After a failed lease, callers don't try the store again before this:
    /// they fail at once with the failure, and the preloader starts no lease
    /// for the key. Without it, every caller of a key whose store is down
    /// waits out its own store timeout and adds a connection attempt to the
    /// storm. A refusal (the store holds less than this node issued) is
    /// remembered with it, so callers in the meantime get the same typed
    /// refusal.
    retry_at: Mutex<Option<Backoff>>,
}

/// Why a key's callers wait before the store is asked again.
#[derive(Debug, Clone)]
struct Backoff {
    /// Not before this.
    until: tokio::time::Instant,
    /// The standing refusal, when the store refused rather than failed.
    refusal: Option<Refusal>,
    /// Refusals in a row. Only an operator clears a refusal (`idmint segment
    /// raise`), so each one doubles the pause, up to [`MAX_REFUSED_PAUSE`],
    /// as the preloader's retries of a down store do; the first is logged
    /// as an error, the repeats only at debug level.
    refusals: u32,
}

/// A lease the store can't be allowed to serve: it holds less than this node
/// issued.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    /// The key is missing (`found: None`) or its `max_id` is below the floor.
    BelowFloor { floor: u64, found: Option<u64> },
    /// The store's epoch marker is missing or another than the one this node
    /// adopted: it was reset, or is another store.
    StoreReset {
        remembered: Option<String>,
        found: Option<String>,
    },
}

impl Refusal {
    /// The refusal's stable code, as [`SegmentError::code`] gives it.
    fn code(&self) -> &'static str {
        match self {
            Refusal::BelowFloor { .. } => "key_below_floor",
            Refusal::StoreReset { .. } => "store_reset",
        }
    }
}

/// The longest pause between two store calls for a refused key.
const MAX_REFUSED_PAUSE: Duration = Duration::from_secs(30);

/// The leasing state, under [`KeyEntry::loader`].
#[derive(Debug)]
struct Loader {
    min_step: u64,
    step: u64,
    delta: u64,
    /// When the last lease was made (clock nanoseconds).
    last_lease: Option<i64>,
    /// The end (`max_id`) of the last lease.
    last_end: Option<u64>,
}

#[derive(Debug, Clone, Default)]
struct Shown {
    step: u64,
    min_step: u64,
    delta: u64,
    remainder: u64,
    last_error: Option<String>,
}

impl Loader {
    /// Leaf's dynamic step for the lease about to be made at `now`.
    fn next_step(&self, now: i64, config: &SegmentConfig) -> u64 {
        let Some(last) = self.last_lease else {
            return self.min_step;
        };
        let lasted = Duration::from_nanos(now.saturating_sub(last).max(0) as u64);
        if lasted < config.grow_below {
            self.step
                .saturating_mul(2)
                .min(config.max_step.max(self.min_step))
        } else if lasted <= config.shrink_above {
            self.step
        } else {
            (self.step / 2).max(self.min_step)
        }
    }
}

type KeyMap = HashMap<Arc<str>, Arc<KeyEntry>>;

#[derive(Debug)]
struct Inner {
    store: Arc<dyn SegmentStore>,
    config: SegmentConfig,
    clock: Arc<dyn Clock>,
    /// Copy-on-write: readers never lock; inserts are rare.
    keys: ArcSwap<KeyMap>,
    insert: Mutex<()>,
    /// Unknown keys and until when they count as unknown.
    misses: Mutex<HashMap<String, Instant>>,
    /// Rings the preloader's watch, if it is parked.
    bell: Arc<Bell>,
    /// What this node issued from each key, persisted ahead of use.
    floors: Option<Arc<FloorFile>>,
}

/// Segment mode: dense, strictly increasing IDs per key, leased from a store
/// in segments and served from a lock-free double buffer.
///
/// # Contract
/// - **Unique** across every allocator sharing the store: each ID comes from a
///   segment leased to this allocator alone.
/// - **Strictly increasing per key** within an allocator: a call that completes
///   before another starts gets smaller IDs; a batch's IDs increase.
/// - **Store down**: buffered IDs keep being served; when none are left, calls
///   fail with [`SegmentError::Unavailable`] and a retry hint. Never 0, never
///   −1, never an ID already issued; after the outage it carries on above.
/// - **Cheap**: an ID from the buffer is one atomic add and no lock; a batch
///   of any size is a handful of atomic steps and, past the buffer, one lease.
/// - No hidden tasks: preloading runs only once
///   [`SegmentAllocator::spawn_preloader`] was called; without it, callers
///   lease on demand.
///
/// Cloning is cheap and shares everything.
///
/// # Examples
/// ```
/// use idmint_segment::{MemoryStore, NewKey, SegmentAllocator, SegmentConfig};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let allocator = SegmentAllocator::new(MemoryStore::new(), SegmentConfig::new())?;
/// allocator.create_key(NewKey::new("order", 1000)).await?;
/// let _preloader = allocator.spawn_preloader();
/// let first = allocator.next_id("order").await?;
/// let batch = allocator.next_ids("order", 5000).await?;
/// assert_eq!(first.get(), 1);
/// assert_eq!(batch.first().unwrap().get(), 2);
/// assert!(allocator.next_id("nope").await.is_err());
/// # Ok::<(), idmint_segment::SegmentError>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SegmentAllocator {
    inner: Arc<Inner>,
}

impl SegmentAllocator {
    /// An allocator over `store`; nothing is read or spawned yet.
    ///
    /// # Errors
    /// [`SegmentError::Config`] for settings that can't work.
    pub fn new(store: impl SegmentStore, config: SegmentConfig) -> Result<SegmentAllocator> {
        SegmentAllocator::from_shared(Arc::new(store), config)
    }

    /// An allocator over a store chosen at run time (a server's config).
    ///
    /// # Errors
    /// [`SegmentError::Config`] for settings that can't work.
    pub fn from_shared(
        store: Arc<dyn SegmentStore>,
        config: SegmentConfig,
    ) -> Result<SegmentAllocator> {
        SegmentAllocator::with_clock(store, config, Arc::new(MonotonicClock::new()))
    }

    /// An allocator over a shared store, timing the dynamic step on `clock`.
    ///
    /// # Errors
    /// [`SegmentError::Config`] for settings that can't work.
    pub fn with_clock(
        store: Arc<dyn SegmentStore>,
        config: SegmentConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<SegmentAllocator> {
        config.check()?;
        Ok(SegmentAllocator {
            inner: Arc::new(Inner {
                store,
                config,
                clock,
                keys: ArcSwap::default(),
                insert: Mutex::new(()),
                misses: Mutex::new(HashMap::new()),
                bell: Arc::default(),
                floors: None,
            }),
        })
    }

    /// Keeps this node's floors in `floors` (its data directory's
    /// [`FloorFile`]): every lease is asked for at or above the key's floor,
    /// and raises it, durably, before the segment's IDs are handed out. See
    /// [`SegmentAllocator`]'s docs.
    ///
    /// # Errors
    /// [`SegmentError::Config`] when the allocator was cloned already (set
    /// the floors first).
    pub fn with_floors(mut self, floors: Arc<FloorFile>) -> Result<SegmentAllocator> {
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            return Err(SegmentError::Config(
                "the floors of a segment allocator are set before it is cloned or used".to_owned(),
            ));
        };
        inner.floors = Some(floors);
        Ok(self)
    }

    /// The floor file, when the allocator keeps one.
    pub fn floors(&self) -> Option<&Arc<FloorFile>> {
        self.inner.floors.as_ref()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn SegmentStore> {
        &self.inner.store
    }

    /// The settings.
    pub fn config(&self) -> &SegmentConfig {
        &self.inner.config
    }

    /// The next ID of `key`.
    ///
    /// # Errors
    /// [`SegmentError::InvalidKey`], [`SegmentError::NotFound`],
    /// [`SegmentError::Unavailable`] (store down and nothing buffered),
    /// [`SegmentError::Exhausted`], [`SegmentError::StoreWentBackwards`].
    pub async fn next_id(&self, key: &str) -> Result<Id> {
        let (entry, first) = match self.inner.keys.load().get(key) {
            Some(entry) => match self.inner.take_one_fast(entry) {
                Ok(id) => return Ok(id),
                Err(first) => (entry.clone(), first),
            },
            None => (self.inner.entry(key).await?, TakeOne::Empty),
        };
        // Boxed: the slow path's future is large, and the fast path shouldn't
        // pay for moving it around.
        Box::pin(self.inner.next_id(&entry, first)).await
    }

    /// The next ID of `key` if one is buffered, else `None`, at once and
    /// with nothing started: no lease, no reservation, no key lookup in the
    /// store. For callers that must give something up before they wait
    /// (Python's GIL) and then call [`SegmentAllocator::next_id`].
    ///
    /// Polling [`SegmentAllocator::next_id`] once and dropping it instead
    /// would lose IDs: the dropped future may have reserved an index of the
    /// next segment, or sent a lease the store then commits and nobody
    /// installs.
    #[inline]
    pub fn try_next_id(&self, key: &str) -> Option<Id> {
        let keys = self.inner.keys.load();
        let (id, preload) = keys.get(key)?.buffer.try_take_one()?;
        if preload {
            self.inner.request_preload();
        }
        Some(id)
    }

    /// `n` IDs of `key` in increasing order, as runs (contiguous where the
    /// key's segments are), spanning segments as needed.
    ///
    /// # Errors
    /// [`SegmentError::InvalidCount`] when `n` is 0 or above the configured
    /// maximum, and those of [`SegmentAllocator::next_id`].
    pub async fn next_ids(&self, key: &str, n: u64) -> Result<IdBatch> {
        self.inner.check_count(n)?;
        let entry = self.inner.entry(key).await?;
        self.inner.next_ids(&entry, n).await
    }

    /// A handle on one key, for hot loops that shouldn't look the key up
    /// each time.
    ///
    /// # Errors
    /// Those of [`SegmentAllocator::next_id`] for the lookup.
    pub async fn key(&self, key: &str) -> Result<SegmentKey> {
        let entry = self.inner.entry(key).await?;
        Ok(SegmentKey {
            inner: self.inner.clone(),
            entry,
        })
    }

    /// Creates a key in the store; it is usable at once.
    ///
    /// # Errors
    /// [`SegmentError::KeyExists`], the validation errors of
    /// [`NewKey::validate`], [`SegmentError::Unavailable`] when the store
    /// fails, [`SegmentError::KeyBelowFloor`] when this node issued from a key
    /// of that name above the start (the store forgot it: creating it anew
    /// would repeat IDs).
    pub async fn create_key(&self, key: NewKey) -> Result<KeyInfo> {
        key.validate()?;
        if let Some(floor) = self.inner.floor_of(key.key())
            && key.start() < floor
        {
            // Existing, it is not created (whatever its start); missing, it
            // would start below what this node issued.
            let found = self
                .inner
                .store_call(
                    key.key(),
                    "describe key",
                    self.inner.store.describe(key.key()),
                )
                .await?;
            return Err(match found {
                Some(_) => SegmentError::KeyExists {
                    key: key.key().to_owned(),
                },
                None => self.inner.below_floor(key.key(), floor, Some(key.start())),
            });
        }
        let info = self
            .inner
            .store_call(key.key(), "create key", self.inner.store.create(&key))
            .await?;
        lock(&self.inner.misses).remove(key.key());
        Ok(info)
    }

    /// Leases one whole segment of `key` for a client to hand out itself
    /// (Tinyid's `nextSegmentId`), past this allocator's buffers but under its
    /// floors: asked for at or above the key's floor, which is raised to the
    /// segment's end before it is returned. Not bounded here: the caller
    /// bounds it.
    ///
    /// # Errors
    /// Those of [`SegmentStore::fetch_above`] ([`SegmentError::KeyBelowFloor`]
    /// also for a key the store lost that this node issued from), and
    /// [`SegmentError::FloorFile`] when the floor can't be written (the
    /// segment is then not handed out).
    pub async fn lease_segment(&self, key: &str) -> Result<SegmentGrant> {
        validate_key(key)?;
        let inner = &self.inner;
        let floor = inner.floor_of(key);
        let grant = match inner.store.fetch_above(key, None, floor.unwrap_or(0)).await {
            Err(SegmentError::NotFound { .. }) if floor.is_some() => {
                return Err(inner.below_floor(key, floor.unwrap_or(0), None));
            }
            other => other?,
        };
        if let Some(floor) = floor
            && grant.start() < floor
        {
            return Err(inner.below_floor(key, floor, Some(grant.start())));
        }
        inner.persist_floor(key, grant.max_id).await?;
        Ok(grant)
    }

    /// Checks the store against this node's floors before it serves (the
    /// server runs it at start; without floors it does nothing):
    ///
    /// - **The epoch.** When the floors name keys, the store's epoch marker
    ///   must be the one they remember: missing or different means the store
    ///   was reset, and this fails with [`SegmentError::StoreReset`]. When
    ///   they name none (a new node, or one that never leased), the store's
    ///   marker is adopted, written first if the store has none.
    /// - **Each floored key.** A key whose `max_id` is below its floor fails
    ///   with [`SegmentError::KeyBelowFloor`]; so does a missing one when it is
    ///   in `declared` (the server would create it anew). A missing key that
    ///   is not declared is only logged: nothing creates it below its floor.
    ///
    /// Nothing is created, raised or issued when it fails.
    ///
    /// # Errors
    /// Those above, [`SegmentError::Unavailable`] when the store fails, and
    /// [`SegmentError::FloorFile`] when the adopted epoch can't be written.
    pub async fn check_floors(&self, declared: &[String]) -> Result<()> {
        let Some(floors) = &self.inner.floors else {
            return Ok(());
        };
        let inner = &self.inner;
        let store = &inner.store;
        let record = floors.record();
        if store.keeps_epoch() {
            let found = inner.store_call("*", "read epoch", store.epoch()).await?;
            match (&record.epoch, found) {
                (Some(remembered), found) if !record.floors.is_empty() => {
                    if found.as_ref() != Some(remembered) {
                        return Err(SegmentError::StoreReset {
                            store: store.kind(),
                            remembered: Some(remembered.to_string()),
                            found: found.map(|e| e.to_string()),
                            floors: record.floor_list(),
                        });
                    }
                }
                (_, found) => {
                    let epoch = match found {
                        Some(epoch) => epoch,
                        None => {
                            let new = StoreEpoch::generate();
                            inner
                                .store_call("*", "write epoch", store.init_epoch(&new))
                                .await?
                        }
                    };
                    if record.epoch.as_ref() != Some(&epoch) {
                        tracing::info!(store = store.kind(), %epoch, "segment store epoch adopted");
                    }
                    let floors = floors.clone();
                    blocking(move || floors.set_epoch(&epoch)).await?;
                }
            }
        }
        if record.floors.is_empty() {
            return Ok(());
        }
        let stored: HashMap<String, u64> = inner
            .store_call("*", "list keys", store.list())
            .await?
            .into_iter()
            .map(|info| (info.key, info.max_id))
            .collect();
        for (key, &floor) in &record.floors {
            match stored.get(key) {
                Some(&max_id) if max_id < floor => {
                    return Err(inner.below_floor(key, floor, Some(max_id)));
                }
                Some(_) => {}
                None if declared.iter().any(|d| d == key) => {
                    return Err(inner.below_floor(key, floor, None));
                }
                None => tracing::warn!(
                    key = %key,
                    floor,
                    "a segment key this node issued from is missing from the store; it is \
                     refused if created again below its floor"
                ),
            }
        }
        Ok(())
    }

    /// Every key in the store, with the buffers of those this allocator has
    /// served.
    ///
    /// # Errors
    /// [`SegmentError::Unavailable`] when the store fails.
    pub async fn keys(&self) -> Result<Vec<KeyStatus>> {
        let stored = self
            .inner
            .store_call("*", "list keys", self.inner.store.list())
            .await?;
        let served = self.inner.keys.load();
        Ok(stored
            .into_iter()
            .map(|info| match served.get(info.key.as_str()) {
                Some(entry) => KeyStatus {
                    stored: Some(info),
                    ..entry.status()
                },
                None => KeyStatus {
                    key: info.key.clone(),
                    step: info.step,
                    min_step: info.step,
                    delta: info.delta,
                    remainder: info.remainder,
                    current: None,
                    next: None,
                    loading: false,
                    last_error: None,
                    refusal: None,
                    stored: Some(info),
                },
            })
            .collect())
    }

    /// The buffers of the keys this allocator has served, without asking the
    /// store (for status pages while the store is down).
    pub fn served_keys(&self) -> Vec<KeyStatus> {
        let mut keys: Vec<KeyStatus> = self
            .inner
            .keys
            .load()
            .values()
            .map(|entry| entry.status())
            .collect();
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        keys
    }

    /// Starts the preloader, which leases the next segment of a key once its
    /// preload point is passed: a thread (`idmint-preload`) that watches the
    /// keys' positions, and the leases as tasks on the current tokio runtime.
    /// Stops when the guard is dropped.
    ///
    /// # Panics
    /// Outside a tokio runtime, or when the OS refuses a thread.
    pub fn spawn_preloader(&self) -> PreloaderGuard {
        self.spawn_preloader_lingering(LINGER)
    }

    /// [`SegmentAllocator::spawn_preloader`] whose watch parks after
    /// `linger` without a move (tests).
    fn spawn_preloader_lingering(&self, linger: Duration) -> PreloaderGuard {
        let lookout = Arc::new(PreloadLookout {
            inner: Arc::downgrade(&self.inner),
            runtime: tokio::runtime::Handle::current(),
            seen: Mutex::new(HashMap::new()),
            loads: Mutex::new(FuturesUnordered::new()),
        });
        let watch = Watch::spawn("idmint-preload", self.inner.bell.clone(), lookout, linger)
            .expect("the OS starts the preloader's thread");
        PreloaderGuard { watch }
    }
}

/// A handle on one key of a [`SegmentAllocator`]; cheap to clone.
#[derive(Debug, Clone)]
pub struct SegmentKey {
    inner: Arc<Inner>,
    entry: Arc<KeyEntry>,
}

impl SegmentKey {
    /// The key.
    pub fn name(&self) -> &str {
        &self.entry.key
    }

    /// The next ID; see [`SegmentAllocator::next_id`].
    ///
    /// # Errors
    /// As [`SegmentAllocator::next_id`].
    #[inline]
    pub async fn next_id(&self) -> Result<Id> {
        match self.inner.take_one_fast(&self.entry) {
            Ok(id) => Ok(id),
            Err(first) => Box::pin(self.inner.next_id(&self.entry, first)).await,
        }
    }

    /// `n` IDs; see [`SegmentAllocator::next_ids`].
    ///
    /// # Errors
    /// As [`SegmentAllocator::next_ids`].
    pub async fn next_ids(&self, n: u64) -> Result<IdBatch> {
        self.inner.check_count(n)?;
        self.inner.next_ids(&self.entry, n).await
    }

    /// The key's buffers and step.
    pub fn status(&self) -> KeyStatus {
        self.entry.status()
    }
}

/// Owns the preloader: dropping it stops the watch, whose thread then drops
/// the leases in flight (callers lease on demand from then on).
#[derive(Debug)]
pub struct PreloaderGuard {
    watch: Watch,
}

impl Drop for PreloaderGuard {
    fn drop(&mut self) {
        self.watch.stop();
    }
}

/// A preload in flight, polled by the watch's thread.
type Load = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How long a key's pace is measured over before it is trusted.
const PACE_WINDOW: Duration = Duration::from_micros(200);

/// The preloader's lookout: each scan reads every key's position, starts a
/// lease for each key past its preload point (one at a time per key), polls
/// the leases in flight, and asks to look again within a quarter of the time
/// the fastest key takes to use up its runway (the IDs between its preload
/// point and its segment's end), so a lease has three quarters of the
/// runway to come back in.
///
/// The leases run on the watch's thread, in the runtime's context (its
/// timers, its I/O driver, its blocking pool for floor writes): a lease
/// from a fast store completes within the scan that started it.
struct PreloadLookout {
    inner: Weak<Inner>,
    runtime: tokio::runtime::Handle,
    /// Per key, what the last scans saw (only the watch's thread locks it).
    seen: Mutex<HashMap<Arc<str>, Pace>>,
    /// The leases in flight; dropping them cancels them.
    loads: Mutex<FuturesUnordered<Load>>,
}

/// A key's pace, as the watch measures it.
#[derive(Debug, Clone, Copy)]
struct Pace {
    /// The position at the last scan.
    last: u64,
    /// The start of the current measuring window.
    from: (u64, Instant),
    /// IDs per second over the last whole window.
    per_second: f64,
    /// The last runway seen (a segment's IDs past its preload point).
    runway: Option<u64>,
}

impl Lookout for PreloadLookout {
    fn scan(&self, cx: &mut Context<'_>) -> Option<Scan> {
        let inner = self.inner.upgrade()?;
        let _runtime = self.runtime.enter();
        let keys = inner.keys.load();
        let now = Instant::now();
        let mut scan = Scan::default();
        let mut seen = lock(&self.seen);
        let mut loads = lock(&self.loads);
        for entry in keys.values() {
            let position = entry.buffer.position();
            // A key backing off from its store (down, or refusing) is left
            // alone until the pause is over: callers get the failure at once
            // meanwhile, and a refusal would otherwise be asked again at
            // every scan.
            let backing_off = entry.backing_off().map(|(left, _)| left);
            if let Some(left) = backing_off.filter(|_| position.wants_next()) {
                scan.look_again = Some(scan.look_again.map_or(left, |d| d.min(left)));
            } else if position.wants_next() && !entry.preloading.swap(true, Ordering::AcqRel) {
                loads.push(Box::pin(preload(Arc::downgrade(&inner), entry.clone())));
                scan.moved = true;
            }
            let pace = seen.entry(entry.key.clone()).or_insert(Pace {
                last: position.handed_out,
                from: (position.handed_out, now),
                per_second: 0.0,
                runway: None,
            });
            if pace.measure(position, now) {
                scan.moved = true;
            }
            if let Some(soon) = pace.look_again() {
                scan.look_again = Some(scan.look_again.map_or(soon, |d| d.min(soon)));
            }
        }
        drop(inner);
        while let Poll::Ready(Some(())) = loads.poll_next_unpin(cx) {}
        scan.busy = !loads.is_empty();
        Some(scan)
    }
}

impl Drop for PreloadLookout {
    /// Cancels the leases in flight inside the runtime's context: the watch's
    /// thread drops the lookout when it stops, outside any runtime, and a
    /// lease holding a pooled connection returns it to its pool with a task
    /// (sqlx panics with "this functionality requires a Tokio context"
    /// otherwise).
    fn drop(&mut self) {
        let _runtime = self.runtime.enter();
        drop(std::mem::take(
            self.loads.get_mut().unwrap_or_else(|p| p.into_inner()),
        ));
    }
}

impl std::fmt::Debug for PreloadLookout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreloadLookout")
            .field("loads", &lock(&self.loads).len())
            .finish_non_exhaustive()
    }
}

/// Leases the key's next segment, retrying transient failures with backoff
/// while the key still wants one; clears the key's `preloading` when done or
/// dropped.
async fn preload(inner: Weak<Inner>, entry: Arc<KeyEntry>) {
    let _done = ClearOnDrop(&entry.preloading);
    let mut backoff = match inner.upgrade() {
        Some(inner) => inner.config.retry_after,
        None => return,
    };
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        match strong.preload(&entry).await {
            Ok(()) => return,
            Err(error) if error.is_transient() => {
                tracing::warn!(key = %entry.key, %error, retry_in = ?backoff,
                    "segment preload failed");
            }
            // Logged where it was decided, once; the key backs off.
            Err(SegmentError::KeyBelowFloor { .. } | SegmentError::StoreReset { .. }) => return,
            Err(error) => {
                tracing::error!(key = %entry.key, %error, "segment preload failed");
                return;
            }
        }
        drop(strong);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

impl Pace {
    /// Takes in a new position; true when the key moved since the last scan.
    fn measure(&mut self, position: BufferPosition, now: Instant) -> bool {
        if let Some(runway) = position.runway() {
            self.runway = Some(runway);
        }
        let moved = position.handed_out != self.last;
        self.last = position.handed_out;
        let (from, since) = self.from;
        let window = now.saturating_duration_since(since);
        if window >= PACE_WINDOW {
            self.per_second =
                position.handed_out.saturating_sub(from) as f64 / window.as_secs_f64();
            self.from = (position.handed_out, now);
        }
        moved
    }

    /// A quarter of the time the key takes to use up its runway at its pace;
    /// one pace window while a key that moves has no pace yet.
    fn look_again(&self) -> Option<Duration> {
        if self.per_second > 0.0 {
            let runway = self.runway?;
            return Some(Duration::from_secs_f64(
                runway as f64 / self.per_second / 4.0,
            ));
        }
        (self.last != self.from.0).then_some(PACE_WINDOW)
    }
}

/// Clears a flag when dropped, also when the task holding it is aborted.
struct ClearOnDrop<'a>(&'a AtomicBool);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Inner {
    fn check_count(&self, n: u64) -> Result<()> {
        if n == 0 || n > self.config.max_batch {
            return Err(SegmentError::InvalidCount {
                count: n,
                max: self.config.max_batch,
            });
        }
        Ok(())
    }

    /// The hot path: one ID from the buffer, or what the slow path must
    /// carry on from.
    #[inline]
    fn take_one_fast(&self, entry: &Arc<KeyEntry>) -> Result<Id, TakeOne> {
        match entry.buffer.take_one() {
            TakeOne::Id { id, preload } => {
                if preload {
                    self.request_preload();
                }
                Ok(id)
            }
            other => Err(other),
        }
    }

    /// A taker passed a preload point: the watch sees that by itself unless
    /// it is parked, and only then is woken.
    #[inline]
    fn request_preload(&self) {
        self.bell.ring();
    }

    /// The slow path of one ID, carrying on from the fast path's `first`
    /// take: a reservation is resolved (its index is this caller's ID, in
    /// order), anything else takes again.
    async fn next_id(&self, entry: &Arc<KeyEntry>, first: TakeOne) -> Result<Id> {
        if let TakeOne::Reserved(mut reservation) = first {
            let deadline = tokio::time::Instant::now() + self.config.wait;
            let mut batch = IdBatch::new();
            loop {
                self.ensure(entry, reservation.needs_end(), 1, deadline)
                    .await?;
                match entry.buffer.resolve(reservation, &mut batch) {
                    Ok(resolved) => {
                        if resolved.preload {
                            self.request_preload();
                        }
                        if let Some(id) = batch.first() {
                            return Ok(id);
                        }
                        break;
                    }
                    Err(still) => reservation = still,
                }
            }
        }
        let batch = self.next_ids(entry, 1).await?;
        Ok(batch.first().expect("a batch of 1 holds an ID"))
    }

    /// The slow path: takes what is buffered, resolves reservations and
    /// leases more until `n` IDs are in hand or the wait runs out.
    async fn next_ids(&self, entry: &Arc<KeyEntry>, n: u64) -> Result<IdBatch> {
        let deadline = tokio::time::Instant::now() + self.config.wait;
        let mut batch = IdBatch::new();
        let mut need = n;
        while need > 0 {
            let take = entry.buffer.take(need, &mut batch);
            need -= take.taken;
            let mut preload = take.preload;
            let mut reserved = take.reserved;
            while let Some(reservation) = reserved {
                self.ensure(entry, reservation.needs_end(), need, deadline)
                    .await?;
                match entry.buffer.resolve(reservation, &mut batch) {
                    Ok(resolved) => {
                        need -= resolved.taken;
                        preload |= resolved.preload;
                        reserved = resolved.reserved;
                    }
                    Err(still) => reserved = Some(still),
                }
            }
            if preload {
                self.request_preload();
            }
            if need > 0 && entry.buffer.remaining() == 0 {
                let target = entry.buffer.handed_out() + 1;
                self.ensure(entry, target, need, deadline).await?;
            }
        }
        Ok(batch)
    }

    /// Leases until the key's buffered end reaches `target`, asking for room
    /// for `demand` IDs.
    async fn ensure(
        &self,
        entry: &Arc<KeyEntry>,
        target: u64,
        demand: u64,
        deadline: tokio::time::Instant,
    ) -> Result<()> {
        while entry.buffer.buffered_end() < target {
            self.check_backoff(entry)?;
            let Ok(mut loader) = tokio::time::timeout_at(deadline, entry.loader.lock()).await
            else {
                return Err(self.unavailable(
                    entry,
                    format!(
                        "waited {:?} for another caller's lease to finish",
                        self.config.wait
                    ),
                ));
            };
            if entry.buffer.buffered_end() >= target {
                break;
            }
            // A lease queued ahead of this caller may have just failed.
            self.check_backoff(entry)?;
            self.lease(entry, &mut loader, demand, deadline).await?;
        }
        Ok(())
    }

    /// Fails at once, with the last failure, while `entry` backs off from
    /// its store.
    fn check_backoff(&self, entry: &KeyEntry) -> Result<()> {
        let Some((left, refused)) = entry.backing_off() else {
            return Ok(());
        };
        if let Some(refusal) = refused {
            return Err(self.refusal_error(&entry.key, refusal));
        }
        let last = entry.shown().last_error.clone().unwrap_or_default();
        Err(SegmentError::Unavailable {
            key: entry.key.to_string(),
            reason: format!("the last lease failed ({last}); the store is tried again in {left:?}"),
            retry_after: left,
        })
    }

    /// Background preload: leases the next segment unless one is buffered
    /// or the key backs off from its store.
    async fn preload(&self, entry: &Arc<KeyEntry>) -> Result<()> {
        let mut loader = entry.loader.lock().await;
        self.check_backoff(entry)?;
        let deadline = tokio::time::Instant::now() + self.config.store_timeout;
        self.lease(entry, &mut loader, 0, deadline).await
    }

    /// Leases one segment and installs it, under the key's loader lock. Does
    /// nothing when a segment beyond the current one is buffered already.
    async fn lease(
        &self,
        entry: &Arc<KeyEntry>,
        loader: &mut Loader,
        demand: u64,
        deadline: tokio::time::Instant,
    ) -> Result<()> {
        if !entry.buffer.wants_next() {
            return Ok(());
        }
        let now = self.clock.now_nanos();
        let step = loader.next_step(now, &self.config);
        let lease_step = step.max(demand.saturating_mul(loader.delta)).min(MAX_ID);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let timeout = self.config.store_timeout.min(left);
        let floor = self.floor_of(&entry.key);
        entry.loading.store(true, Ordering::Relaxed);
        let fetched = tokio::time::timeout(timeout, async {
            if floor.is_some()
                && let Some(refusal) = self.check_epoch().await?
            {
                return Ok(Err(refusal));
            }
            self.store
                .fetch_above(&entry.key, Some(lease_step), floor.unwrap_or(0))
                .await
                .map(Ok)
        })
        .await;
        entry.loading.store(false, Ordering::Relaxed);
        let grant = match fetched {
            Ok(Ok(Ok(grant))) => grant,
            // The store's epoch marker is gone or another: nothing was asked.
            Ok(Ok(Err(refusal))) => return Err(self.refuse(entry, refusal)),
            // The store changed nothing: it is below what this node issued.
            Ok(Err(SegmentError::KeyBelowFloor { floor, found, .. })) => {
                return Err(self.refuse(entry, Refusal::BelowFloor { floor, found }));
            }
            Ok(Err(SegmentError::NotFound { .. })) if floor.is_some() => {
                let floor = floor.unwrap_or(0);
                return Err(self.refuse(entry, Refusal::BelowFloor { floor, found: None }));
            }
            Ok(Err(error)) if error.is_transient() => {
                tracing::warn!(key = %entry.key, store = self.store.kind(), %error,
                    "segment lease failed");
                return Err(self.lease_failed(entry, error.to_string()));
            }
            Ok(Err(error)) => {
                entry.shown().last_error = Some(error.to_string());
                return Err(error);
            }
            Err(_) => {
                let reason = format!(
                    "{} store: lease timed out after {timeout:?}",
                    self.store.kind()
                );
                tracing::warn!(key = %entry.key, store = self.store.kind(), %reason,
                    "segment lease failed");
                return Err(self.lease_failed(entry, reason));
            }
        };
        if let Some(previous_end) = loader.last_end
            && grant.start() < previous_end
        {
            let error = SegmentError::StoreWentBackwards {
                store: self.store.kind(),
                key: entry.key.to_string(),
                start: grant.start(),
                previous_end,
            };
            tracing::error!(key = %entry.key, %error, "segment refused");
            entry.shown().last_error = Some(error.to_string());
            return Err(error);
        }
        // The store promised as much; a store that breaks it is refused too.
        // (The floor as read before the fetch: a floor raised since, by a
        // whole-segment lease that the store ordered after this one, says
        // nothing against this segment.)
        if let Some(floor) = floor
            && grant.start() < floor
        {
            let found = Some(grant.start());
            return Err(self.refuse(entry, Refusal::BelowFloor { floor, found }));
        }
        let segment = IdRun::from_range(grant.start(), grant.max_id, grant.delta, grant.remainder)?;
        // Persist, then issue: the floor covers the segment before any of
        // its IDs can leave. A failure loses this segment, never repeats it.
        if let Err(error) = self.persist_floor(&entry.key, grant.max_id).await {
            tracing::error!(key = %entry.key, %error, "segment floor not written");
            return Err(self.lease_failed(entry, error.to_string()));
        }
        entry.buffer.install(segment)?;
        if let Some(Backoff {
            refusal: Some(refusal),
            refusals,
            ..
        }) = lock(&entry.retry_at).take()
        {
            tracing::info!(key = %entry.key, refused = refusal.code(), refusals,
                "segment lease granted again after refusals");
        }
        loader.last_end = Some(grant.max_id);
        loader.last_lease = Some(now);
        loader.step = step;
        loader.delta = grant.delta;
        let mut shown = entry.shown();
        shown.step = step;
        shown.delta = grant.delta;
        shown.remainder = grant.remainder;
        shown.last_error = None;
        tracing::debug!(key = %entry.key, first = %segment.first(), last = %segment.last(),
            step = lease_step, "segment leased");
        Ok(())
    }

    /// A lease the store failed: callers back off from it for the retry hint.
    fn lease_failed(&self, entry: &KeyEntry, reason: String) -> SegmentError {
        *lock(&entry.retry_at) = Some(Backoff {
            until: tokio::time::Instant::now() + self.config.retry_after,
            refusal: None,
            refusals: 0,
        });
        self.unavailable(entry, reason)
    }

    /// A lease refused because the store holds less than this node issued:
    /// callers get the refusal at once until the pause is over, then the
    /// store is asked again (at or above the floor, so a refused lease never
    /// moves it). Only an operator clears a refusal, so the pause doubles
    /// with each one in a row, from the retry hint up to
    /// [`MAX_REFUSED_PAUSE`]; the first is logged as an error, a change of
    /// refusal as a warning, the repeats at debug level only.
    fn refuse(&self, entry: &KeyEntry, refusal: Refusal) -> SegmentError {
        let error = self.refusal_error(&entry.key, refusal.clone());
        let mut backoff = lock(&entry.retry_at);
        let before = backoff.as_ref().and_then(|b| {
            let refusal = b.refusal.as_ref()?;
            Some((refusal.clone(), b.refusals))
        });
        let refusals = before.as_ref().map_or(0, |(_, n)| *n).saturating_add(1);
        let pause = self
            .config
            .retry_after
            .saturating_mul(1 << (refusals - 1).min(16))
            .min(MAX_REFUSED_PAUSE.max(self.config.retry_after));
        match &before {
            None => tracing::error!(key = %entry.key, %error, retry_in = ?pause,
                "segment lease refused; serving the key resumes once an operator raises it \
                 (idmint segment raise)"),
            Some((was, _)) if *was != refusal => {
                tracing::warn!(key = %entry.key, %error, retry_in = ?pause,
                    "segment lease refused")
            }
            Some(_) => tracing::debug!(key = %entry.key, %error, refusals, retry_in = ?pause,
                "segment lease refused again"),
        }
        *backoff = Some(Backoff {
            until: tokio::time::Instant::now() + pause,
            refusal: Some(refusal),
            refusals,
        });
        drop(backoff);
        entry.shown().last_error = Some(error.to_string());
        error
    }

    /// The error callers see for `refusal`.
    fn refusal_error(&self, key: &str, refusal: Refusal) -> SegmentError {
        match refusal {
            Refusal::BelowFloor { floor, found } => self.below_floor(key, floor, found),
            Refusal::StoreReset { remembered, found } => SegmentError::StoreReset {
                store: self.store.kind(),
                remembered,
                found,
                floors: self
                    .floors
                    .as_ref()
                    .map(|f| f.record().floor_list())
                    .unwrap_or_default(),
            },
        }
    }

    /// Whether the store's epoch marker is still the one this node adopted
    /// (its floor file's), read before each lease of a floored key: a store
    /// that was reset, or another store, is refused before it is asked for
    /// anything ([`SegmentError::StoreReset`]), also when its keys look
    /// whole. `None` when the store keeps no marker or this node adopted
    /// none yet.
    async fn check_epoch(&self) -> Result<Option<Refusal>> {
        let Some(remembered) = self.floors.as_ref().and_then(|f| f.epoch()) else {
            return Ok(None);
        };
        if !self.store.keeps_epoch() {
            return Ok(None);
        }
        let found = self.store.epoch().await?;
        Ok(
            (found.as_ref() != Some(&remembered)).then(|| Refusal::StoreReset {
                remembered: Some(remembered.to_string()),
                found: found.map(|e| e.to_string()),
            }),
        )
    }

    fn below_floor(&self, key: &str, floor: u64, found: Option<u64>) -> SegmentError {
        SegmentError::KeyBelowFloor {
            store: self.store.kind(),
            key: key.to_owned(),
            floor,
            found,
        }
    }

    /// `key`'s floor, when this node keeps floors and issued from it.
    fn floor_of(&self, key: &str) -> Option<u64> {
        self.floors.as_ref().and_then(|f| f.floor(key))
    }

    /// Raises `key`'s floor to `floor` in the floor file (on a blocking
    /// thread: one write and fsync), when the allocator keeps one and the
    /// floor is below.
    async fn persist_floor(&self, key: &str, floor: u64) -> Result<()> {
        let Some(floors) = &self.floors else {
            return Ok(());
        };
        if floors.floor(key).is_some_and(|have| have >= floor) {
            return Ok(());
        }
        let (floors, key) = (floors.clone(), key.to_owned());
        blocking(move || floors.raise(&key, floor)).await
    }

    fn unavailable(&self, entry: &KeyEntry, reason: String) -> SegmentError {
        entry.shown().last_error = Some(reason.clone());
        SegmentError::Unavailable {
            key: entry.key.to_string(),
            reason,
            retry_after: self.config.retry_after,
        }
    }

    /// Runs a store call under the store timeout, mapping failures to
    /// [`SegmentError::Unavailable`] (bad input and "not found" pass through).
    async fn store_call<T>(
        &self,
        key: &str,
        operation: &'static str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.config.store_timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) if error.is_transient() => Err(SegmentError::Unavailable {
                key: key.to_owned(),
                reason: error.to_string(),
                retry_after: self.config.retry_after,
            }),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(SegmentError::Unavailable {
                key: key.to_owned(),
                reason: format!(
                    "{} store: {operation} timed out after {:?}",
                    self.store.kind(),
                    self.config.store_timeout
                ),
                retry_after: self.config.retry_after,
            }),
        }
    }

    /// The error for a key the store does not have: "not found", or a
    /// refusal when this node issued from it (the store forgot it).
    fn missing(&self, key: &str) -> SegmentError {
        match self.floor_of(key) {
            Some(floor) => self.below_floor(key, floor, None),
            None => SegmentError::NotFound {
                key: key.to_owned(),
            },
        }
    }

    /// The key's entry, looking the key up in the store on first use.
    async fn entry(&self, key: &str) -> Result<Arc<KeyEntry>> {
        if let Some(entry) = self.keys.load().get(key) {
            return Ok(entry.clone());
        }
        validate_key(key)?;
        {
            let mut misses = lock(&self.misses);
            match misses.get(key) {
                Some(until) if *until > Instant::now() => {
                    return Err(self.missing(key));
                }
                Some(_) => {
                    misses.remove(key);
                }
                None => {}
            }
        }
        let Some(info) = self
            .store_call(key, "describe key", self.store.describe(key))
            .await?
        else {
            let mut misses = lock(&self.misses);
            // Bounded: a flood of made-up keys can't grow the map without end.
            if misses.len() >= 10_000 {
                let now = Instant::now();
                misses.retain(|_, until| *until > now);
                if misses.len() >= 10_000 {
                    misses.clear();
                }
            }
            misses.insert(key.to_owned(), Instant::now() + self.config.miss_ttl);
            return Err(self.missing(key));
        };
        let _insert = lock(&self.insert);
        if let Some(entry) = self.keys.load().get(key) {
            return Ok(entry.clone());
        }
        let entry = Arc::new(KeyEntry::new(&info, self.config.preload_share));
        let mut keys = KeyMap::clone(&self.keys.load());
        keys.insert(entry.key.clone(), entry.clone());
        self.keys.store(Arc::new(keys));
        Ok(entry)
    }
}

impl KeyEntry {
    fn new(info: &KeyInfo, preload_share: f64) -> KeyEntry {
        KeyEntry {
            key: Arc::from(info.key.as_str()),
            buffer: SegmentBuffer::new(preload_share),
            loader: tokio::sync::Mutex::new(Loader {
                min_step: info.step,
                step: info.step,
                delta: info.delta,
                last_lease: None,
                last_end: None,
            }),
            loading: AtomicBool::new(false),
            preloading: AtomicBool::new(false),
            shown: Mutex::new(Shown {
                step: info.step,
                min_step: info.step,
                delta: info.delta,
                remainder: info.remainder,
                last_error: None,
            }),
            retry_at: Mutex::new(None),
        }
    }

    /// How long callers must still wait before trying the store again after
    /// a failed or refused lease, and the refusal; `None` when they may try
    /// now.
    fn backing_off(&self) -> Option<(Duration, Option<Refusal>)> {
        let backoff = lock(&self.retry_at);
        let backoff = backoff.as_ref()?;
        let left = backoff
            .until
            .saturating_duration_since(tokio::time::Instant::now());
        (!left.is_zero()).then(|| (left, backoff.refusal.clone()))
    }

    fn shown(&self) -> std::sync::MutexGuard<'_, Shown> {
        lock(&self.shown)
    }

    fn status(&self) -> KeyStatus {
        let shown = self.shown().clone();
        let buffer = self.buffer.status();
        KeyStatus {
            key: self.key.to_string(),
            step: shown.step,
            min_step: shown.min_step,
            delta: shown.delta,
            remainder: shown.remainder,
            current: buffer
                .current
                .map(|(segment, left)| (segment.first(), segment.last(), left)),
            next: buffer.next.map(|segment| (segment.first(), segment.last())),
            loading: self.loading.load(Ordering::Relaxed),
            last_error: shown.last_error,
            refusal: lock(&self.retry_at)
                .as_ref()
                .and_then(|b| b.refusal.as_ref().map(Refusal::code)),
            stored: None,
        }
    }
}

/// Runs blocking file I/O (a floor write) on a blocking thread.
async fn blocking(work: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) => Err(SegmentError::FloorFile {
            path: crate::floor::FLOOR_FILE_NAME.to_owned(),
            operation: "write",
            message: format!("the writing thread failed: {e}"),
        }),
    }
}

/// Locks a std mutex, ignoring poisoning: no critical section here can leave
/// its data inconsistent.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
