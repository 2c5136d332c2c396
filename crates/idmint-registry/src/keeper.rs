// Size: about 1,820 lines before the tests, some 440 of them docs. The file is
// one state machine (claim, persist ahead, renew, fence, re-claim): the
// task, the handle and the guard share its private state (`Shared`, `Ctx`),
// and the "persist, then allow" invariant is easiest to check with all of it
// in view, so it is kept whole.
//! The keeper: what makes a registry-backed snowflake generator safe to run.
//!
//! [`WorkerKeeper::start`] claims a worker ID, checks the clock, persists a
//! high-water mark *before* any ID may be issued, builds the generator above the
//! worker's stored mark, and starts one background task that keeps the persisted
//! mark ahead of the generator, renews the lease and reports the time. The task
//! is owned by the returned [`KeeperGuard`]; the generator is reached through a
//! [`WorkerHandle`].
//!
//! # Why each rule holds
//!
//! - **Persist, then allow.** The generator's mark is raised with
//!   `Snowflake::advance_mark` only after `persist_mark` returned `Ok`, so every
//!   issued ID's time is at or below a durably stored mark. A later holder of the
//!   worker ID (this node after a restart, or another node after a takeover)
//!   starts strictly above the stored mark, so it can't repeat an ID, whatever its
//!   clock says. This is TiKV PD's timestamp-oracle window, applied to workers.
//! - **Ahead of need.** The task persists `now + window` whenever the generator's
//!   time (the later of the clock and its last issued tick) comes within
//!   `window / 2` of the mark, and at every report. The hot path never waits for
//!   storage under steady load; an ID that would pass the mark fails with
//!   `MarkReached` and wakes the task at once.
//! - **Lease fencing.** The mark never leads the generator's time by more than
//!   the lease has left before `valid_until − margin` (measured on the monotonic
//!   clock), so a generator that tracks its clock runs into its mark by the
//!   fence even if this task is starved. When the fence passes without a
//!   renewal, the mark is also pulled back with `Snowflake::retract_mark`, which
//!   stops a generator running ahead of its clock too. If persisting fails, the
//!   mark simply stops moving and the generator stops at the old mark by itself.
//!   (Uniqueness never depends on the lease: a later holder starts above every
//!   mark this node persisted, and persisting is fenced by the registry. The
//!   lease stop keeps a node that lost its claim from issuing at all.)
//! - **A new claim, a new generator.** When the lease is lost (the registry says
//!   so), the claim is gone for good: someone else may have held the ID and
//!   issued above our mark. The task claims again and builds a *new* generator
//!   above both the new claim's stored mark and the old generator's mark (so a
//!   handle's IDs keep increasing), then swaps it in. Callers read the current
//!   generator once per call through an [`ArcSwap`]: a load is a few
//!   uncontended instructions with no shared write, unlike an `RwLock` read
//!   (an atomic read-modify-write every call, bouncing one cache line between
//!   threads) or a `watch` channel (a lock inside). A caller still holding the old
//!   generator gets `MarkReached` from it: it was retracted before the swap.
//! - **A clean stop records what was really issued.** On shutdown the task
//!   seals the generator (`Snowflake::seal`: nothing past its last issued
//!   tick can come out any more, not even an ID in the making), records
//!   that tick's last instant in place of the window-ahead mark
//!   (`WorkerRegistry::record_clean_stop`, fenced like a persist), and only
//!   then releases the claim. The next holder starts above that, usually
//!   already past, instead of waiting out the window. A crash writes no such
//!   record, so the next holder still waits for the window-ahead mark.
//!
//! # Time
//!
//! Timers use `tokio::time`, and the monotonic clock is read as
//! `tokio::time::Instant::now()`, so tests drive leases and intervals with
//! `tokio::time::pause()`. Generator time comes from the generator's
//! [`Clock`]. Every registry call is bounded by [`KeeperConfig::with_call_timeout`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use idmint_core::clock::MonotonicClock;
use idmint_core::{
    Clock, ClockBehind, Id, IdBatch, Layout, SequenceExhausted, SequenceStart, Snowflake,
};
use jiff::{SignedDuration, Timestamp};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::error::{RegistryError, Result};
use crate::registry::{Claim, Lease, NodeIdentity, PeerReport, WorkerRegistry};
use crate::util::bounded;

/// How many call timeouts bound one claim ([`Ctx::claim`]): a look, a grant,
/// the claim's transaction, and a second look when the first one's free
/// worker was taken meanwhile.
const CLAIM_CALLS: u32 = 4;

/// How many times its own length a failed try makes a waiting start pause
/// at least ([`Ctx::paced`]).
const PACE: u32 = 4;

/// How many claim waits a start waits while the coordinator times out
/// (see [`Ctx::claim_and_establish`]).
const CROWD_WAIT: u32 = 4;

/// How often, about, a running node asks again a coordinator it could not
/// reach ([`RegistryError::Unavailable`]: nothing listening, a broken
/// connection, no connection made within the call), jittered ±50 %
/// ([`Ctx::probe_pause`]). Such a try costs the coordinator nothing (it is
/// down, or a member that can't serve), so a node that stopped at its mark
/// finds it back within about this long; a busy coordinator answers slowly
/// or times out instead, and is paced and backed off as before.
const PROBE: Duration = Duration::from_millis(500);

/// How the keeper runs: windows, intervals, thresholds and timeouts.
///
/// Builder-lite: [`KeeperConfig::new`] gives the defaults, `with_*` change one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeeperConfig {
    window: Duration,
    report_interval: Duration,
    check_interval: Duration,
    peer_skew: Duration,
    lease_margin: Duration,
    call_timeout: Duration,
    max_start_wait: Option<Duration>,
    max_claim_wait: Duration,
    retry_interval: Duration,
}

impl Default for KeeperConfig {
    fn default() -> KeeperConfig {
        KeeperConfig::new()
    }
}

impl KeeperConfig {
    /// The defaults: window 3 s, report every 3 s (as Leaf), check every 250 ms,
    /// peer skew threshold 10 s (as Twitter's server), lease safety margin 1 s,
    /// registry call timeout 2 s, start wait up to the window, claim wait up
    /// to 60 s, retry every 1 s.
    pub const fn new() -> KeeperConfig {
        KeeperConfig {
            window: Duration::from_secs(3),
            report_interval: Duration::from_secs(3),
            check_interval: Duration::from_millis(250),
            peer_skew: Duration::from_secs(10),
            lease_margin: Duration::from_secs(1),
            call_timeout: Duration::from_secs(2),
            max_start_wait: None,
            max_claim_wait: Duration::from_secs(60),
            retry_interval: Duration::from_secs(1),
        }
    }

    /// How far ahead of the generator's time the mark is persisted (default 3 s).
    /// A restart waits up to this long for the clock to pass the stored mark
    /// (unless [`KeeperConfig::with_max_start_wait`] says otherwise). The mark
    /// is persisted again when less than half of it is left, so half the
    /// window is what the node issues on while the registry takes no write:
    /// where a coordinator's leader election stops writes for 1 to 3 s (etcd,
    /// ZooKeeper), give it 6 s, as `idmint-node`'s `window = "auto"` does.
    pub const fn with_window(mut self, window: Duration) -> KeeperConfig {
        self.window = window;
        self
    }

    /// How far ahead of the generator's time the mark is persisted.
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// How often the node reports its time (and the mark is re-persisted),
    /// default 3 s. A report is one registry write a node makes every interval
    /// even when the mark has room; peers' reports are this old at most when
    /// a start compares its clock with them, which the check allows for.
    pub const fn with_report_interval(mut self, interval: Duration) -> KeeperConfig {
        self.report_interval = interval;
        self
    }

    /// How often the task looks at the generator's headroom (default 250 ms); keep
    /// it well below `window / 2`.
    pub const fn with_check_interval(mut self, interval: Duration) -> KeeperConfig {
        self.check_interval = interval;
        self
    }

    /// The largest allowed gap between the local clock and the median of live
    /// peers' clocks as their reports tell them, at claim (default 10 s).
    pub const fn with_peer_skew_threshold(mut self, threshold: Duration) -> KeeperConfig {
        self.peer_skew = threshold;
        self
    }

    /// How long before the lease's end issuing stops (default 1 s). Covers the
    /// rate difference between this node's and the registry's clocks and the
    /// time an ID in the making takes; keep it well below the lease TTL.
    ///
    /// The fence is checked between registry calls, so a slow call can delay the
    /// retraction by up to the call timeout; a generator that tracks its clock
    /// stops at the fence by itself all the same, as its mark never leads past it.
    pub const fn with_lease_margin(mut self, margin: Duration) -> KeeperConfig {
        self.lease_margin = margin;
        self
    }

    /// The bound on every registry call (default 2 s); past it the call fails
    /// with [`RegistryError::Timeout`]. A claim, which is several calls, is
    /// bounded by four.
    pub const fn with_call_timeout(mut self, timeout: Duration) -> KeeperConfig {
        self.call_timeout = timeout;
        self
    }

    /// How long a start (or a re-claim) waits, beyond what the generator's clock
    /// policy absorbs, for the clock to pass the stored mark (default: the
    /// window, since a quick restart finds its own mark up to a window
    /// ahead). Further behind, it refuses with [`RegistryError::ClockBehindMark`].
    pub const fn with_max_start_wait(mut self, wait: Duration) -> KeeperConfig {
        self.max_start_wait = Some(wait);
        self
    }

    /// How long a start waits for the clock to pass the stored mark: what
    /// [`KeeperConfig::with_max_start_wait`] set, or else the window.
    pub const fn max_start_wait(&self) -> Duration {
        match self.max_start_wait {
            Some(wait) => wait,
            None => self.window,
        }
    }

    /// How long a start waits to claim, default 60 s: while the registry
    /// holds claims ([`RegistryError::Held`]: its store forgot, and no claim
    /// is safe until every earlier holder has stopped), or while every worker
    /// ID is taken ([`RegistryError::Exhausted`]: a dead node's lease has yet
    /// to expire, as after a mass restart). Keep it above the registry's lease
    /// TTL plus a margin. Past it, the start fails with that error; while the
    /// registry's calls time out (a coordinator serving a crowd), past four
    /// times it. A re-claim while running retries for as long as it takes,
    /// not ready in the meantime.
    pub const fn with_max_claim_wait(mut self, wait: Duration) -> KeeperConfig {
        self.max_claim_wait = wait;
        self
    }

    /// How soon a failed renewal, persist or claim is tried again (default 1 s;
    /// the check interval when that is longer).
    pub const fn with_retry_interval(mut self, interval: Duration) -> KeeperConfig {
        self.retry_interval = interval;
        self
    }

    /// The bound on every registry call.
    pub const fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// How long a start waits to claim before it fails.
    pub const fn max_claim_wait(&self) -> Duration {
        self.max_claim_wait
    }

    /// Checks the intervals against each other and the window.
    /// [`WorkerKeeper::start`] runs it first; a server's config check runs it
    /// before any I/O. `registry` names the registry in the error.
    ///
    /// # Errors
    /// [`RegistryError::Config`] naming the interval that can't work.
    pub fn validate(&self, registry: &'static str) -> Result<()> {
        let bad = |message: String| {
            Err(RegistryError::Config {
                registry,
                message: format!("keeper: {message}"),
            })
        };
        if self.window.is_zero() {
            return bad("window of 0s is too short: the mark would never lead".to_owned());
        }
        if self.check_interval.is_zero() || self.check_interval >= self.window / 2 {
            return bad(format!(
                "check interval {:?} is out of range (above 0, below half the window {:?})",
                self.check_interval, self.window
            ));
        }
        for (name, d) in [
            ("report interval", self.report_interval),
            ("call timeout", self.call_timeout),
            ("retry interval", self.retry_interval),
        ] {
            if d.is_zero() {
                return bad(format!("{name} of 0s is out of range (above 0)"));
            }
        }
        Ok(())
    }
}

/// The generator the keeper builds: layout, clock and policies.
///
/// The worker (and datacenter) come from the registry's claim; the start and the
/// mark from the stored and persisted marks.
#[derive(Debug, Clone)]
pub struct GeneratorSettings {
    layout: Layout,
    clock: Arc<dyn Clock>,
    clock_behind: ClockBehind,
    exhausted: SequenceExhausted,
    start: SequenceStart,
    datacenter: Option<u32>,
}

impl GeneratorSettings {
    /// Settings for `layout`, with the core's defaults: a [`MonotonicClock`],
    /// each policy's `Default` (the same as [`Snowflake::builder`]'s), and
    /// worker IDs claimed across the whole node field.
    pub fn new(layout: Layout) -> GeneratorSettings {
        GeneratorSettings {
            layout,
            clock: Arc::new(MonotonicClock::new()),
            clock_behind: ClockBehind::default(),
            exhausted: SequenceExhausted::default(),
            start: SequenceStart::default(),
            datacenter: None,
        }
    }

    /// The time source.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> GeneratorSettings {
        self.clock = clock;
        self
    }

    /// The clock-behind policy.
    pub fn with_clock_behind(mut self, policy: ClockBehind) -> GeneratorSettings {
        self.clock_behind = policy;
        self
    }

    /// The sequence-exhausted policy.
    pub fn with_sequence_exhausted(mut self, policy: SequenceExhausted) -> GeneratorSettings {
        self.exhausted = policy;
        self
    }

    /// The sequence start policy.
    pub fn with_sequence_start(mut self, start: SequenceStart) -> GeneratorSettings {
        self.start = start;
        self
    }

    /// Fix the datacenter part of the node field; claims then cover the worker
    /// part only (range `0..=max_worker`). Without it, a claimed ID covers the
    /// whole node field (range `0..workers()`), split into datacenter (high bits)
    /// and worker (low bits).
    pub fn with_datacenter(mut self, datacenter: u32) -> GeneratorSettings {
        self.datacenter = Some(datacenter);
        self
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The range claims are made in.
    pub fn range(&self) -> u32 {
        let n = match self.datacenter {
            Some(_) => u64::from(self.layout.max_worker()) + 1,
            None => self.layout.workers(),
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// (datacenter, worker) of a claimed ID.
    fn split(&self, id: u32) -> (u32, u32) {
        match self.datacenter {
            Some(dc) => (dc, id),
            None => {
                let bits = self.layout.worker_bits();
                let worker = if bits >= 32 {
                    id
                } else {
                    id & ((1u32 << bits) - 1)
                };
                let dc = if bits >= 32 { 0 } else { id >> bits };
                (dc, worker)
            }
        }
    }

    /// How far behind the clock may be at start for the generator itself to cope:
    /// the `wait` bound, or the `borrow` lead. Zero for `fail`, and for
    /// `rollback-bits` and `history`, whose reuse of earlier times must never
    /// reach into what an earlier holder issued.
    fn start_absorb(&self) -> Duration {
        match self.clock_behind {
            ClockBehind::Wait { max } => max,
            ClockBehind::Borrow { max_lead } => max_lead,
            _ => Duration::ZERO,
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_nanosecond(i128::from(self.clock.now_nanos())).unwrap_or(Timestamp::MIN)
    }
}

/// The state of the worker's claim, as `/readyz` and the status page show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// The claim is held (its lease valid, or the registry has no leases).
    Held,
    /// Renewing fails but the lease is still valid: issuing goes on within the mark.
    Renewing,
    /// The lease ran out (minus the margin) without a renewal: issuing stopped.
    Expired,
    /// The registry says the claim is gone; issuing stopped, claiming again.
    Lost,
    /// The keeper was shut down; issuing stopped and the claim released.
    Stopped,
}

impl LeaseState {
    /// The state's name, as shown in status output.
    pub fn name(&self) -> &'static str {
        match self {
            LeaseState::Held => "held",
            LeaseState::Renewing => "renewing",
            LeaseState::Expired => "expired",
            LeaseState::Lost => "lost",
            LeaseState::Stopped => "stopped",
        }
    }
}

/// A snapshot of the keeper's state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStatus {
    /// The registry kind.
    pub registry: &'static str,
    /// The claimed ID (the whole node field, or the worker part with a fixed datacenter).
    pub worker: u32,
    /// The claim's state.
    pub lease: LeaseState,
    /// How long the lease has left (`None`: no lease).
    pub lease_left: Option<Duration>,
    /// What the generator may issue up to now.
    pub mark: Option<Timestamp>,
    /// The last mark persisted.
    pub persisted_mark: Option<Timestamp>,
    /// How many generators were built (1 + the re-claims that replaced it).
    pub generation: u64,
    /// The last registry failure, cleared by the next success.
    pub last_error: Option<String>,
    /// The first mark the current generator was allowed up to: persisted
    /// above everything any earlier holder of the ID persisted, so it grows
    /// from one holding to the next (a leader's term, for the oracle).
    pub first_mark: Option<Timestamp>,
    /// The coordinator can't be reached (`last_error` says why), and as
    /// the registry never hands this worker ID to another node
    /// ([`WorkerRegistry::reassigns_workers`]), issuing goes on: the mark
    /// advances without it and catches up when it answers. The node stays
    /// ready.
    pub coordinator_away: bool,
}

impl WorkerStatus {
    /// Whether the node should take traffic: the claim is held and the last
    /// registry call succeeded.
    pub fn is_ready(&self) -> bool {
        self.not_ready_reason().is_none()
    }

    /// Why the node should not take traffic, if it should not.
    pub fn not_ready_reason(&self) -> Option<String> {
        if self.coordinator_away && self.lease == LeaseState::Held {
            return None;
        }
        match (self.lease, &self.last_error) {
            (LeaseState::Held, None) => None,
            (LeaseState::Held, Some(e)) => Some(format!("worker store failing: {e}")),
            (state, Some(e)) => Some(format!(
                "worker {} lease {}: {e}",
                self.worker,
                state.name()
            )),
            (state, None) => Some(format!("worker {} lease {}", self.worker, state.name())),
        }
    }
}

/// The generator in force and who it issues as.
#[derive(Debug)]
struct Current {
    generator: Arc<Snowflake>,
    worker: u32,
}

#[derive(Debug)]
struct Shared {
    current: ArcSwap<Current>,
    status: Mutex<Status>,
    /// The lease's fence (its end minus the margin) as [`mono_nanos`]: 0
    /// while the claim is not held, `u64::MAX` for a claim without a lease.
    /// Read on every call by [`WorkerHandle::holds_lease`].
    fence: AtomicU64,
    /// Wakes the task early: an ID hit the mark.
    nudge: Notify,
    shutdown: Notify,
    stopping: AtomicBool,
}

#[derive(Debug, Clone)]
struct Status {
    lease: LeaseState,
    valid_until: Option<Instant>,
    persisted: Option<Timestamp>,
    generation: u64,
    last_error: Option<String>,
    first_mark: Option<Timestamp>,
    /// Issuing on past a coordinator that can't be reached (a registry
    /// that never hands the worker ID to another node).
    coordinator_away: bool,
}

impl Shared {
    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where callers get IDs: always from the current generator. Cheap to clone.
///
/// - `next_id`/`next_ids` load the current generator once per call (no lock).
/// - An ID that would pass the persisted mark fails with
///   [`idmint_core::Error::MarkReached`] (transient: retry shortly) and wakes the
///   keeper to persist further.
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    shared: Arc<Shared>,
    registry: &'static str,
}

impl WorkerHandle {
    /// The generator in force now. Don't keep it: after a re-claim it is
    /// retracted and a new one takes its place; call this (or
    /// [`WorkerHandle::next_id`]) per use.
    pub fn generator(&self) -> Arc<Snowflake> {
        self.shared.current.load().generator.clone()
    }

    /// Issues one ID from the current generator.
    ///
    /// # Errors
    ///
    /// Those of [`Snowflake::next_id`]; `MarkReached` while the mark can't be
    /// persisted or the lease is gone.
    #[inline]
    pub fn next_id(&self) -> idmint_core::Result<Id> {
        let result = self.shared.current.load().generator.next_id();
        if let Err(idmint_core::Error::MarkReached { .. }) = &result {
            self.shared.nudge.notify_one();
        }
        result
    }

    /// Issues `n` IDs from the current generator.
    ///
    /// # Errors
    ///
    /// Those of [`Snowflake::next_ids`].
    pub fn next_ids(&self, n: u64) -> idmint_core::Result<IdBatch> {
        let result = self.shared.current.load().generator.next_ids(n);
        if let Err(idmint_core::Error::MarkReached { .. }) = &result {
            self.shared.nudge.notify_one();
        }
        result
    }

    /// Whether the claim is held and its lease's fence (its end minus the
    /// margin, on the monotonic clock) has not passed, read now: one atomic
    /// load and one clock read.
    ///
    /// The keeper's task stops the generator when the fence passes, but a
    /// task can be late (a starved runtime, a process stopped and continued
    /// past its lease). A caller that must not issue once someone else could
    /// hold the claim (the oracle's leader, `leader.rs`) asks this before each
    /// issue; it turns false by itself as time passes, whatever the task does.
    #[inline]
    pub fn holds_lease(&self) -> bool {
        mono_nanos(mono_now()) < self.shared.fence.load(Ordering::Acquire)
    }

    /// The claimed ID the current generator issues as.
    pub fn worker(&self) -> u32 {
        self.shared.current.load().worker
    }

    /// A snapshot of the claim, the marks and the last error.
    pub fn status(&self) -> WorkerStatus {
        let current = self.shared.current.load();
        let s = self.shared.status().clone();
        let now = tokio::time::Instant::now().into_std();
        WorkerStatus {
            registry: self.registry,
            worker: current.worker,
            lease: s.lease,
            lease_left: s.valid_until.map(|v| v.saturating_duration_since(now)),
            mark: current.generator.mark(),
            persisted_mark: s.persisted,
            generation: s.generation,
            last_error: s.last_error,
            first_mark: s.first_mark,
            coordinator_away: s.coordinator_away,
        }
    }
}

/// Owns the keeper's background task. Dropping it stops issuing at once and lets
/// the task persist a final report and release the claim in the background;
/// [`KeeperGuard::shutdown`] does the same and waits for it.
#[derive(Debug)]
pub struct KeeperGuard {
    handle: WorkerHandle,
    task: Option<JoinHandle<()>>,
}

impl KeeperGuard {
    /// The handle callers get IDs from.
    pub fn handle(&self) -> &WorkerHandle {
        &self.handle
    }

    /// Stops issuing, persists a final report, releases the claim, and waits for
    /// the task to end.
    pub async fn shutdown(mut self) {
        self.signal_stop();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    fn signal_stop(&self) {
        let shared = &self.handle.shared;
        shared.fence.store(0, Ordering::Release);
        shared.current.load().generator.retract_mark(Timestamp::MIN);
        shared.stopping.store(true, Ordering::Release);
        shared.shutdown.notify_one();
    }
}

impl Drop for KeeperGuard {
    fn drop(&mut self) {
        if self.task.is_some() {
            self.signal_stop();
        }
    }
}

/// Starts registry-backed generators; see the [module docs](self).
#[derive(Debug)]
pub struct WorkerKeeper;

impl WorkerKeeper {
    /// Claims a worker ID from `registry`, checks the clock, persists the first
    /// mark, builds the generator, and starts the background task.
    ///
    /// Returns only once an ID can be issued: the mark is persisted.
    ///
    /// # Errors
    ///
    /// - The registry's errors (exhausted, timeout, backend, config), each call
    ///   bounded by the call timeout; [`RegistryError::Held`] or
    ///   [`RegistryError::Exhausted`] once the claim wait has run out (a start
    ///   that finds every worker ID taken waits for a lease to expire or a
    ///   worker to be released, up to [`KeeperConfig::with_max_claim_wait`]).
    /// - [`RegistryError::ClockBehindMark`] when the clock is behind the worker's
    ///   stored mark by more than the clock policy absorbs plus the start wait.
    /// - [`RegistryError::ClockSkew`] when the clock is off from the median of live
    ///   peers' clocks by more than the threshold: each peer's reported time,
    ///   plus the report's age where the registry tells it
    ///   ([`PeerReport::age`]); ahead of reports of unknown age, by a report
    ///   interval more, and after a second read a report interval later.
    /// - [`RegistryError::Core`] when the generator can't be built.
    ///
    /// The claim is released again on every error after it was made.
    pub async fn start(
        registry: Arc<dyn WorkerRegistry>,
        node: NodeIdentity,
        settings: GeneratorSettings,
        config: KeeperConfig,
    ) -> Result<KeeperGuard> {
        WorkerKeeper::start_observed(registry, node, settings, config, &|_| {}).await
    }

    /// [`WorkerKeeper::start`], telling `waiting` why, each time the claim
    /// waits (a server's `/readyz` names it while it starts).
    ///
    /// # Errors
    /// As [`WorkerKeeper::start`].
    pub async fn start_observed(
        registry: Arc<dyn WorkerRegistry>,
        node: NodeIdentity,
        settings: GeneratorSettings,
        config: KeeperConfig,
        waiting: &(dyn Fn(&RegistryError) + Send + Sync),
    ) -> Result<KeeperGuard> {
        config.validate(registry.kind())?;
        let ctx = Ctx {
            reassigns: registry.reassigns_workers(),
            registry,
            node,
            settings,
            config,
            retries: AtomicU64::new(0),
        };
        let (claim, est) = ctx.claim_and_establish(waiting).await?;
        let shared = Arc::new(Shared {
            current: ArcSwap::from_pointee(Current {
                generator: est.generator.clone(),
                worker: claim.worker,
            }),
            status: Mutex::new(Status {
                lease: LeaseState::Held,
                valid_until: claim.lease.map(|l| l.valid_until),
                persisted: Some(est.persisted),
                generation: 1,
                last_error: None,
                first_mark: Some(est.persisted),
                coordinator_away: false,
            }),
            fence: AtomicU64::new(fence_of(
                LeaseState::Held,
                ctx.fenced(claim.lease),
                &ctx.config,
            )),
            nudge: Notify::new(),
            shutdown: Notify::new(),
            stopping: AtomicBool::new(false),
        });
        let handle = WorkerHandle {
            shared: shared.clone(),
            registry: ctx.registry.kind(),
        };
        let now = mono_now();
        let task = Task {
            next_renew: claim.lease.map(|l| now + renew_every(&l)),
            lease: claim.lease,
            claim: Some(claim),
            generator: est.generator,
            persisted: est.persisted,
            attempted: est.persisted,
            regain: false,
            next_report: now + ctx.config.report_interval,
            retry_at: now,
            failures: 0,
            call_failures: 0,
            local_failing: AtomicBool::new(false),
            shared,
            ctx,
        };
        Ok(KeeperGuard {
            handle,
            task: Some(tokio::spawn(task.run())),
        })
    }
}

/// What the keeper's start and re-claims share.
#[derive(Debug)]
struct Ctx {
    registry: Arc<dyn WorkerRegistry>,
    /// [`WorkerRegistry::reassigns_workers`], read once: whether a lease
    /// that runs out or a coordinator that can't be reached must stop
    /// issuing (see [`Ctx::fenced`] and [`Task::keep_mark_ahead`]).
    reassigns: bool,
    node: NodeIdentity,
    settings: GeneratorSettings,
    config: KeeperConfig,
    /// Counts jittered retries: with the node, what each one's spread hashes.
    retries: AtomicU64,
}

struct Established {
    generator: Arc<Snowflake>,
    persisted: Timestamp,
}

/// What [`Task::fence`] saw: the lease ran out, and whether that is news.
#[derive(Debug, Clone, Copy)]
struct Fence {
    expired: bool,
    newly_expired: bool,
}

fn mono_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// `at` as nanoseconds since a base an hour before the first call in this
/// process (saturating at 0 before it), so a fence fits one atomic.
///
/// The base is taken from the real clock, an hour back (or as far back as
/// the clock goes): a tokio runtime whose paused clock had run ahead of
/// real time used to set it, and another runtime's fences, earlier than
/// that, then read as 0, a fence that never passes (a test of the oracle's
/// fence failed when it ran after such a test in one process).
fn mono_nanos(at: Instant) -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(|| {
        let now = Instant::now();
        [3600, 60, 1]
            .into_iter()
            .find_map(|s| now.checked_sub(Duration::from_secs(s)))
            .unwrap_or(now)
    });
    u64::try_from(at.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
}

/// The fence [`WorkerHandle::holds_lease`] compares with: the lease's end
/// minus the margin while the claim is held (or renewing), none without a
/// lease, and already passed in every other state.
fn fence_of(state: LeaseState, lease: Option<Lease>, config: &KeeperConfig) -> u64 {
    match (state, lease) {
        (LeaseState::Held | LeaseState::Renewing, None) => u64::MAX,
        (LeaseState::Held | LeaseState::Renewing, Some(l)) => l
            .valid_until
            .checked_sub(config.lease_margin)
            // Never 0 while held: 0 means "not held".
            .map_or(1, |fence| mono_nanos(fence).max(1)),
        _ => 0,
    }
}

/// `base` spread over `[base / 2, base · 3/2)`, so that nodes retrying
/// together drift apart. The spread is a hash of the node and the retry's
/// number, not OS randomness: distinct nodes differ, and a simulation
/// replays exactly.
fn jittered(base: Duration, node: &NodeIdentity, retry: u64) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    (&node.host, &node.address, node.port, retry).hash(&mut hasher);
    let unit = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
    base.mul_f64(0.5 + unit)
}

fn renew_every(lease: &Lease) -> Duration {
    (lease.ttl / 3).max(Duration::from_millis(1))
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

fn since(later: Timestamp, earlier: Timestamp) -> Duration {
    Duration::try_from(later.duration_since(earlier)).unwrap_or(Duration::ZERO)
}

/// The start's clock check: [`RegistryError::ClockSkew`] when `now` is off
/// from the peers' clocks by more than `skew`.
///
/// Each report bounds its peer's clock at the read:
/// - of known age ([`PeerReport::age`]), at `reported + age`, which errs
///   behind the peer's clock by the write's way to the coordinator, never
///   ahead of it;
/// - of unknown age, between `reported` and `reported + interval` (a peer
///   reports every interval, when its coordinator lets it).
///
/// Ahead is measured from the median of the upper bounds and behind from
/// the median of the lower ones: an unknown age counts in the node's favour
/// both ways, as before ages were known, a known one in neither. The
/// median, not the mean: one live peer whose clock is hours off (a node on
/// the raw wall clock after a step) would move a mean by hours / n and
/// refuse every start in the fleet (the simulation, `tests/it/sim.rs`,
/// found 300 nodes stuck so). The offset named is from the median of the
/// lower bounds.
fn check_peer_clocks(
    now: Timestamp,
    peers: &[PeerReport],
    skew: Duration,
    interval: Duration,
) -> Result<()> {
    fn median(mut v: Vec<i128>) -> i128 {
        v.sort_unstable();
        let mid = v.len() / 2;
        if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2
        }
    }
    if peers.is_empty() {
        return Ok(());
    }
    let interval_ns = i128::try_from(interval.as_nanos()).unwrap_or(i128::MAX);
    let low: Vec<i128> = peers
        .iter()
        .map(|p| p.estimated_now().as_nanosecond())
        .collect();
    let high: Vec<i128> = peers
        .iter()
        .zip(&low)
        .map(|(p, low)| match p.age {
            Some(_) => *low,
            None => low.saturating_add(interval_ns),
        })
        .collect();
    let now_ns = now.as_nanosecond();
    let offset_ns = now_ns - median(low);
    let ahead_ns = now_ns - median(high);
    let skew_ns = skew.as_nanos();
    if (offset_ns < 0 && offset_ns.unsigned_abs() > skew_ns)
        || (ahead_ns > 0 && ahead_ns.unsigned_abs() > skew_ns)
    {
        return Err(RegistryError::ClockSkew {
            offset_ms: i64::try_from(offset_ns / 1_000_000).unwrap_or(if offset_ns < 0 {
                i64::MIN
            } else {
                i64::MAX
            }),
            peers: peers.len(),
            threshold: skew,
        });
    }
    Ok(())
}

/// Of a second read of the peers (`again`), the reports a start ahead of
/// the first read (`first`) may weigh: those of known age (already weighed
/// as the peers' clocks now), and those written after the first read. A
/// report with revisions (etcd) was written after it when its write's
/// revision is above the first read's; one without, when its time rose
/// since the first read, or its peer was not in the first read at all
/// (only a sampling registry reads other peers the second time, and etcd,
/// the one that samples, gives revisions).
fn fresh_reports(first: &[PeerReport], again: Vec<PeerReport>) -> Vec<PeerReport> {
    let first_read = first
        .iter()
        .filter_map(|p| p.revision.map(|r| r.read))
        .max();
    again
        .into_iter()
        .filter(|p| {
            if p.age.is_some() {
                return true;
            }
            if let (Some(r), Some(first_read)) = (p.revision, first_read) {
                return r.written > first_read;
            }
            first
                .iter()
                .find(|q| q.worker == p.worker)
                .is_none_or(|q| p.reported > q.reported)
        })
        .collect()
}

impl Ctx {
    fn kind(&self) -> &'static str {
        self.registry.kind()
    }

    /// The lease that fences issuing: the claim's, unless the registry
    /// never hands the worker ID to another node, whose lease (a shared
    /// registry's collision check) guards nobody's IDs when it runs out.
    fn fenced(&self, lease: Option<Lease>) -> Option<Lease> {
        lease.filter(|_| self.reassigns)
    }

    /// Runs a registry call under the call timeout.
    async fn call<T>(
        &self,
        operation: &'static str,
        fut: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        bounded(self.kind(), operation, self.config.call_timeout, fut).await
    }

    /// One claim. A claim is several registry calls (a look at the free
    /// worker IDs, a lease's grant, the claim's transaction), each bounded
    /// by the registry itself; the whole is bounded by [`CLAIM_CALLS`] call
    /// timeouts. Bounding it by one cut off claims midway on a coordinator
    /// slowed by a crowd (10,000 nodes on one etcd), after the coordinator
    /// had done the work for them, and the crowd came back to pay again.
    async fn claim(&self) -> Result<Claim> {
        let range = self.settings.range();
        let after = self.config.call_timeout.saturating_mul(CLAIM_CALLS);
        bounded(
            self.kind(),
            "claim",
            after,
            self.registry.claim(&self.node, range),
        )
        .await
    }

    /// The pause before the next try after a failed one that took `took`:
    /// `pause`, and at least [`PACE`] times `took`. A coordinator's latency
    /// is how it says it is busy; pacing tries by it keeps each waiting node
    /// at one call in flight for `PACE + 1` parts of its time, so a crowd
    /// of waiting starts leaves room for the running fleet's renewals
    /// however large it is, and comes back as soon as answers are quick
    /// again.
    fn paced(pause: Duration, took: Duration) -> Duration {
        pause.max(took.saturating_mul(PACE))
    }

    /// The pause before a running node asks again a coordinator it could
    /// not reach: [`PROBE`] (at least a check interval), spread ±50 % by a
    /// hash of the node and the retry's number, so a fleet that lost its
    /// coordinator together does not come back to it in step.
    fn probe_pause(&self) -> Duration {
        jittered(
            PROBE.max(self.config.check_interval),
            &self.node,
            self.retries.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// How long a failed try that ended in `error` took, as [`Ctx::paced`]
    /// counts it: nothing for [`RegistryError::Unavailable`], which is
    /// not a busy coordinator's answer but a member that could not be
    /// reached (the registry moved to another) or nothing listening.
    fn took(error: &RegistryError, took: Duration) -> Duration {
        if matches!(error, RegistryError::Unavailable { .. }) {
            Duration::ZERO
        } else {
            took
        }
    }

    /// A start's claim and first mark, retried for up to the claim wait.
    ///
    /// The claim waits while the registry holds claims
    /// ([`RegistryError::Held`]: tries again just past the hold) or every
    /// worker ID is taken ([`RegistryError::Exhausted`]: tries again every
    /// retry interval, jittered so a fleet of waiting starts doesn't claim in
    /// lockstep, until a lease expires or a worker is released). A call that
    /// times out or fails ([`RegistryError::Timeout`],
    /// [`RegistryError::Backend`]: a coordinator that is slow, overloaded by
    /// a fleet starting at once, or down; or a lease that ran out before the
    /// first mark was persisted) is tried again after a backoff
    /// that doubles up to 8 retry intervals (64 after timeouts:
    /// [`Ctx::backoff_after`]), jittered, so the fleet backs off
    /// instead of piling on. While the calls time out, the start waits up
    /// to [`CROWD_WAIT`] times the claim wait. Every pause after a failed
    /// try is at least [`PACE`] times as long as the try took
    /// ([`Ctx::paced`]): a busy coordinator answers slowly before it times
    /// out, and a crowd paced by its answers stays within what it serves. A
    /// call that failed after the claim was made is tried again on the same
    /// claim while its lease has room; past that, the claim is released
    /// first. Says once what it waits for, and tells `waiting` each time;
    /// past the wait, fails with the last error. Anything else (the clock,
    /// the config) fails at once.
    async fn claim_and_establish(
        &self,
        waiting: &(dyn Fn(&RegistryError) + Send + Sync),
    ) -> Result<(Claim, Established)> {
        let started = tokio::time::Instant::now();
        // What is left of the wait after `error`: the claim wait, or after a
        // timeout [`CROWD_WAIT`] times it. A coordinator that times out is
        // serving a crowd in turn (10,000 nodes starting at once on one etcd
        // core took 150 s, past a 120 s claim wait), and a start that gives
        // up on it only comes back, restarted, at the end of the line.
        let left_after = |error: &RegistryError| {
            let wait = match error {
                RegistryError::Timeout { .. } => {
                    self.config.max_claim_wait.saturating_mul(CROWD_WAIT)
                }
                _ => self.config.max_claim_wait,
            };
            (started + wait).saturating_duration_since(tokio::time::Instant::now())
        };
        let mut said = false;
        let mut failures = 0u32;
        loop {
            let tried = tokio::time::Instant::now();
            let error = match self.claim().await {
                Ok(claim) => {
                    let mut tried = tokio::time::Instant::now();
                    let mut outcome = self.establish(&claim, None).await;
                    // A slow coordinator failed a call after the claim: keep
                    // the claim while its lease has room and try the rest
                    // again, rather than give back what the crowd paid for
                    // and claim anew. Doing that, 10,000 nodes starting at
                    // once on an etcd at its limit never converged: most
                    // starts timed out after their claim, released it, and
                    // came back to pay for it again.
                    while let Err(
                        e @ (RegistryError::Timeout { .. }
                        | RegistryError::Unavailable { .. }
                        | RegistryError::Backend { .. }),
                    ) = &outcome
                    {
                        failures += 1;
                        let took = Self::took(e, tried.elapsed());
                        let pause = Self::paced(self.backoff_after(failures, e), took);
                        let room = claim.lease.map_or(Duration::MAX, |l| {
                            l.valid_until.saturating_duration_since(mono_now())
                        });
                        let needed =
                            pause + self.config.lease_margin + 2 * self.config.call_timeout;
                        let left = left_after(e);
                        if room < needed || left < pause {
                            break;
                        }
                        waiting(e);
                        tokio::time::sleep(pause).await;
                        tried = tokio::time::Instant::now();
                        outcome = self.establish(&claim, None).await;
                    }
                    match outcome {
                        Ok(est) => return Ok((claim, est)),
                        Err(e) => {
                            self.release_quietly(&claim).await;
                            e
                        }
                    }
                }
                Err(e) => e,
            };
            let pause = match &error {
                // Just past the hold's end, as the registry's clock reckons it.
                RegistryError::Held { retry_after, .. } => *retry_after + Duration::from_millis(20),
                RegistryError::Exhausted { .. } => Self::paced(self.backoff(0), tried.elapsed()),
                // A lease that ran out before the first mark was persisted
                // (a claim slowed by an overloaded coordinator) is a failed
                // call like the others.
                RegistryError::Timeout { .. }
                | RegistryError::Unavailable { .. }
                | RegistryError::Backend { .. }
                | RegistryError::LeaseLost { .. } => {
                    failures += 1;
                    let took = Self::took(&error, tried.elapsed());
                    Self::paced(self.backoff_after(failures, &error), took)
                }
                _ => return Err(error),
            };
            let left = left_after(&error);
            if left.is_zero() {
                return Err(error);
            }
            if !said {
                tracing::warn!(
                    registry = self.registry.kind(),
                    wait_up_to = ?left,
                    "waiting to claim a worker ID: {error}"
                );
                said = true;
            }
            waiting(&error);
            tokio::time::sleep(pause.min(left)).await;
        }
    }

    /// The pause before trying again after `failures` failed calls in a
    /// row: the retry interval, doubled for each failure up to 8 times it,
    /// then spread by ±50 % (hashed from the node and a count of retries,
    /// so a simulation replays exactly).
    fn backoff(&self, failures: u32) -> Duration {
        self.backoff_with_cap(failures, 3)
    }

    /// The backoff after `error`, the last of `failures` in a
    /// row. A timeout is what an overloaded coordinator answers, and a try
    /// it times out still cost it the work: after timeouts the pause keeps
    /// doubling up to 64 retry intervals (about a minute at the defaults),
    /// so a crowd larger than the coordinator can serve spreads its tries
    /// out until they fit. After other failures (a refused or broken
    /// connection: a coordinator down or restarting, where a try costs it
    /// nothing) it stops at 8, so a start notices the way back soon.
    fn backoff_after(&self, failures: u32, error: &RegistryError) -> Duration {
        let doublings = if matches!(error, RegistryError::Timeout { .. }) {
            6
        } else {
            3
        };
        self.backoff_with_cap(failures, doublings)
    }

    fn backoff_with_cap(&self, failures: u32, doublings: u32) -> Duration {
        let base = self
            .config
            .retry_interval
            .max(self.config.check_interval)
            .saturating_mul(1 << failures.saturating_sub(1).min(doublings));
        jittered(
            base,
            &self.node,
            self.retries.fetch_add(1, Ordering::Relaxed),
        )
    }

    async fn release_quietly(&self, claim: &Claim) {
        if let Err(e) = self.call("release", self.registry.release(claim)).await {
            tracing::warn!(worker = claim.worker, error = %e, "releasing the worker claim failed");
        }
    }

    /// Compares `now` with the peers' clocks as their reports tell them
    /// ([`check_peer_clocks`]).
    fn peer_clocks(&self, now: Timestamp, peers: &[PeerReport]) -> Result<()> {
        check_peer_clocks(
            now,
            peers,
            self.config.peer_skew,
            self.config.report_interval,
        )
    }

    /// How far the mark may lead the generator's time: the window, and no more
    /// than the lease has left before its end minus the margin (on the monotonic
    /// clock). A generator that tracks its clock therefore reaches the mark, and
    /// stops by itself, by the time the lease's fence passes, even if this task
    /// is starved; one that runs ahead of its clock (borrowing) keeps its lead.
    fn lead(&self, lease: Option<&Lease>) -> Duration {
        let left = lease.filter(|_| self.reassigns).map(|l| {
            l.valid_until
                .checked_sub(self.config.lease_margin)
                .map_or(Duration::ZERO, |end| {
                    end.saturating_duration_since(mono_now())
                })
        });
        left.map_or(self.config.window, |left| left.min(self.config.window))
    }

    /// Clock checks, first persist, generator: everything between a claim and
    /// the first ID. `floor` is a mark the new generator must also start above
    /// (the previous generator's, on a re-claim).
    async fn establish(&self, claim: &Claim, floor: Option<Timestamp>) -> Result<Established> {
        let floor = claim.stored_mark.max(floor);
        let absorb = self.settings.start_absorb();
        let max_wait = self.config.max_start_wait();
        let allowed = absorb + max_wait;
        let mut now = self.settings.now();
        if let Some(mark) = floor {
            let deadline = tokio::time::Instant::now() + max_wait;
            if now < mark && since(mark, now) > absorb {
                // Said once: why a start takes this long. After a crash the
                // stored mark is a window ahead; after a clean stop it is
                // the last tick issued, usually already past.
                tracing::info!(
                    worker = claim.worker,
                    behind = ?since(mark, now),
                    %mark,
                    "the clock is behind the worker's stored mark: waiting for it to pass"
                );
            }
            // Wait (asynchronously) for the clock to come within what the policy absorbs.
            while now < mark && since(mark, now) > absorb {
                let behind = since(mark, now);
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                if behind > allowed || left.is_zero() {
                    return Err(RegistryError::ClockBehindMark {
                        worker: claim.worker,
                        now,
                        mark,
                        behind,
                        allowed,
                    });
                }
                tokio::time::sleep((behind - absorb).min(left)).await;
                now = self.settings.now();
            }
        }
        let peers = self.call("peers", self.registry.peers(claim)).await?;
        if let Err(skew) = self.peer_clocks(now, &peers) {
            // Behind the peers, nothing excuses: a report's age only ever
            // moves its peer's clock later, so a stale one can only make a
            // node look ahead. Ahead of reports of known age, nothing
            // excuses either: they are weighed as the peers' clocks now.
            // Ahead of reports of unknown age may be reports the peers
            // could not refresh (a coordinator that was away or
            // overloaded, so their clocks look as old as the outage): ask
            // again a report interval later and weigh only the reports
            // written meanwhile, and those of known age. None: no evidence
            // either way.
            let RegistryError::ClockSkew { offset_ms, .. } = skew else {
                return Err(skew);
            };
            if offset_ms < 0 || peers.iter().all(|p| p.age.is_some()) {
                return Err(skew);
            }
            tracing::info!(
                offset_ms,
                peers = peers.len(),
                "ahead of the peers' reports: waiting a report interval for fresh ones"
            );
            tokio::time::sleep(self.config.report_interval + Duration::from_millis(250)).await;
            let again = self.call("peers", self.registry.peers(claim)).await?;
            let fresh = fresh_reports(&peers, again);
            now = self.settings.now();
            self.peer_clocks(now, &fresh)?;
        }
        let base = floor.map_or(now, |f| f.max(now));
        let lead = self.lead(claim.lease.as_ref());
        let target = add(base, lead);
        if lead.is_zero() {
            return Err(RegistryError::LeaseLost {
                registry: self.kind(),
                worker: claim.worker,
                reason: format!(
                    "the lease (ttl {:?}) leaves no time before its end minus the \
                     safety margin; use a longer lease or a smaller margin",
                    claim.lease.map(|l| l.ttl).unwrap_or_default()
                ),
            });
        }
        self.call(
            "persist mark",
            self.registry.persist_mark(claim, target, now),
        )
        .await?;
        let (datacenter, worker) = self.settings.split(claim.worker);
        let s = &self.settings;
        let mut builder = Snowflake::builder(s.layout)
            .with_datacenter(datacenter)
            .with_worker(worker)
            .with_clock(s.clock.clone())
            .with_clock_behind(s.clock_behind)
            .with_sequence_exhausted(s.exhausted)
            .with_sequence_start(s.start)
            .with_mark(target);
        if let Some(floor) = floor {
            builder = builder.with_start_after(floor);
        }
        Ok(Established {
            generator: Arc::new(builder.build()?),
            persisted: target,
        })
    }
}

/// The background task's state.
struct Task {
    ctx: Ctx,
    shared: Arc<Shared>,
    /// `None` while lost and claiming again.
    claim: Option<Claim>,
    lease: Option<Lease>,
    generator: Arc<Snowflake>,
    persisted: Timestamp,
    /// The highest mark this holding asked the registry to persist, acknowledged
    /// or not (a write whose answer was lost may have landed): what a
    /// registration in a new epoch raises the stored mark to, and checks it
    /// against ([`WorkerRegistry::register_again`]).
    attempted: Timestamp,
    /// The registry refused the claim (a new epoch) while the lease was still
    /// valid by this node's clock, and registering it again failed on a
    /// transient error: try that again, not a renewal, until the lease's
    /// fence.
    regain: bool,
    next_renew: Option<Instant>,
    next_report: Instant,
    /// After a failed persist or claim, no new attempt before this (nudges from
    /// callers hitting the mark must not hammer a failing registry).
    retry_at: Instant,
    /// Re-claims that timed out or failed in a row: the backoff doubles
    /// with each.
    failures: u32,
    /// Renewals and persists that failed in a row (reset by a success of
    /// either): their retries back off by it ([`Task::retry_pause`]).
    call_failures: u32,
    /// Where no other node can ever hold this worker ID: the mark kept
    /// locally could not be moved (the data directory can't be written), so
    /// the generator stops at its mark whatever the coordinator answers, and
    /// the status shows that failure, not the coordinator's. Atomic: it is
    /// set while a coordinator call borrows the task.
    local_failing: AtomicBool,
}

impl Task {
    async fn run(mut self) {
        loop {
            if self.shared.stopping.load(Ordering::Acquire) {
                break;
            }
            let wake = tokio::time::Instant::from_std(self.next_wake());
            tokio::select! {
                _ = self.shared.shutdown.notified() => break,
                _ = self.shared.nudge.notified() => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
            if self.shared.stopping.load(Ordering::Acquire) {
                break;
            }
            self.step().await;
        }
        self.finish().await;
    }

    fn next_wake(&self) -> Instant {
        let now = mono_now();
        let mut wake = now + self.ctx.config.check_interval;
        if self.claim.is_none() {
            wake = self.retry_at.max(now);
        }
        if let Some(r) = self.next_renew {
            wake = wake.min(r);
        }
        if let Some(fence) = self
            .ctx
            .fenced(self.lease)
            .and_then(|l| l.valid_until.checked_sub(self.ctx.config.lease_margin))
            && fence > now
        {
            wake = wake.min(fence);
        }
        wake.max(now)
    }

    /// Records the last registry failure; logs it at WARN when it differs
    /// from the one before (a retry failing the same way every interval, as
    /// a deposed oracle leader's re-claim does while another node leads,
    /// logs at DEBUG instead of a line four times a second).
    fn set_error(&self, e: &RegistryError) {
        let text = e.to_string();
        let mut status = self.shared.status();
        if status.last_error.as_deref() == Some(text.as_str()) {
            tracing::debug!(registry = self.ctx.kind(), error = %text, "worker keeper (again)");
        } else {
            tracing::warn!(registry = self.ctx.kind(), error = %text, "worker keeper");
        }
        status.last_error = Some(text);
    }

    fn set_state(&self, state: LeaseState) {
        let mut s = self.shared.status();
        s.lease = state;
        s.valid_until = self.lease.map(|l| l.valid_until);
        self.shared.fence.store(
            fence_of(state, self.ctx.fenced(self.lease), &self.ctx.config),
            Ordering::Release,
        );
    }

    fn retry_after(&self) -> Duration {
        self.ctx
            .config
            .retry_interval
            .max(self.ctx.config.check_interval)
    }

    /// The pause before a failed renewal or persist is tried again, `left`
    /// before it must have succeeded (the lease's fence; the mark's end).
    ///
    /// A fixed second was a storm at scale: 10,000 nodes whose persists
    /// timed out on an overloaded etcd retried every second each, ten times
    /// their usual rate, and kept it overloaded for good. So the pause backs
    /// off as a start's does (doubling to 8 retry intervals, jittered) and
    /// is paced by how long the failed call took ([`Ctx::paced`]), but it
    /// never uses more than half of what is `left`, so the retries come
    /// closer together as the deadline nears, and one falls before it.
    ///
    /// Past the deadline (the generator already stopped at its mark) every
    /// second of pause is a second of refused IDs, so it no longer doubles:
    /// a jittered retry interval, paced. Pacing alone holds a crowd's retries
    /// to what a slow coordinator answers, and a coordinator that refuses at
    /// once (down) costs nothing to ask every second.
    ///
    /// The first retry after [`RegistryError::Unavailable`] comes at the
    /// next check: the registry already moved to another member (etcd), or
    /// the call failed at once, so asking again costs nothing and a node
    /// whose mark is near is back within a check interval. Later ones come
    /// about every [`PROBE`] (jittered), neither doubled nor paced: a
    /// coordinator that can't be reached costs nothing to ask, and a node
    /// stopped at its mark resumes within about that long of its return.
    fn retry_pause(
        &mut self,
        error: &RegistryError,
        took: Duration,
        left: Option<Duration>,
    ) -> Duration {
        self.call_failures += 1;
        if matches!(error, RegistryError::Unavailable { .. }) {
            return if self.call_failures == 1 {
                self.ctx.config.check_interval
            } else {
                self.ctx.probe_pause()
            };
        }
        let took = Ctx::took(error, took);
        match left {
            Some(left) if !left.is_zero() => Ctx::paced(self.ctx.backoff(self.call_failures), took)
                .min((left / 2).max(self.retry_after())),
            _ => Ctx::paced(self.ctx.backoff(0), took),
        }
    }

    /// One wake of the keeper: claim again if the claim is gone; otherwise
    /// fence an expired lease, renew when due, and keep the mark ahead.
    async fn step(&mut self) {
        let mono = mono_now();
        let Some(claim) = self.claim.clone() else {
            if mono >= self.retry_at {
                self.reclaim().await;
            }
            return;
        };
        let fence = self.fence(&claim, mono);
        if self.renew_if_due(&claim, mono, fence).await {
            self.keep_mark_ahead(&claim, mono).await;
        }
    }

    /// The fence: a lease that ran out (minus the margin) without a renewal
    /// retracts the mark, so the generator stops issuing before the lease
    /// could be granted to anyone else.
    fn fence(&mut self, claim: &Claim, mono: Instant) -> Fence {
        let expired = self.ctx.fenced(self.lease).is_some_and(|l| {
            l.valid_until
                .checked_sub(self.ctx.config.lease_margin)
                .is_none_or(|f| mono >= f)
        });
        let newly_expired = expired && self.shared.status().lease != LeaseState::Expired;
        if expired {
            self.generator.retract_mark(Timestamp::MIN);
            if newly_expired {
                tracing::warn!(
                    worker = claim.worker,
                    "worker lease ran out: issuing stopped"
                );
            }
            self.set_state(LeaseState::Expired);
        }
        Fence {
            expired,
            newly_expired,
        }
    }

    /// Renews the lease when due. Returns whether the step goes on to the
    /// mark: not while the lease stays expired, nor once the claim is lost.
    ///
    /// Once expired, renewing is tried at once, then every check interval:
    /// not on every wake, as callers hitting the retracted mark nudge this
    /// task once per refused ID (that was a registry call, and a log line,
    /// per refused request).
    async fn renew_if_due(&mut self, claim: &Claim, mono: Instant, fence: Fence) -> bool {
        let expired = fence.expired;
        let renew_due = self.next_renew.is_some_and(|r| mono >= r) || fence.newly_expired;
        if self.regain {
            if expired {
                // The lease ran out by this node's clock before the new
                // epoch took the claim: another node may take the worker
                // once the hold ends, so the claim is gone for good.
                self.lose();
                return false;
            }
            if renew_due {
                return self.register_again(claim).await;
            }
            return false;
        }
        if !renew_due {
            return !expired;
        }
        let tried = tokio::time::Instant::now();
        let renewing = self.ctx.call("renew", self.ctx.registry.renew(claim));
        match self.local_mark_kept_during(claim, renewing).await {
            Ok(lease) => {
                self.call_failures = 0;
                self.lease = lease;
                self.next_renew = lease.map(|l| mono + renew_every(&l));
                self.set_state(LeaseState::Held);
                if !self.local_failing.load(Ordering::Acquire) {
                    self.shared.status().last_error = None;
                }
                // Resumed after an expiry: the claim was never lost, so the
                // same generator goes on once the mark is persisted again.
                true
            }
            Err(e @ RegistryError::LeaseLost { .. }) => {
                self.set_error(&e);
                // Valid now, not only when the renewal was sent: it may
                // have taken up to the call timeout.
                if expired || !self.lease_valid(mono_now()) {
                    self.lose();
                    return false;
                }
                self.register_again(claim).await
            }
            Err(e) if !self.ctx.reassigns => {
                // No lease fences this worker: it stays held, and the node
                // issues on from the mark kept locally.
                self.coordinator_failed(claim, &e);
                self.next_renew = Some(mono + self.retry_pause(&e, tried.elapsed(), None));
                true
            }
            Err(e) => {
                self.set_error(&e);
                let retry = if expired {
                    self.ctx.config.check_interval
                } else {
                    // Jittered and backing off: a fleet whose renewals failed
                    // together (a coordinator that stalled or is overloaded)
                    // doesn't retry in lockstep, nor faster than it answers.
                    let left = self.lease.and_then(|l| {
                        l.valid_until
                            .checked_sub(self.ctx.config.lease_margin)
                            .map(|fence| fence.saturating_duration_since(mono_now()))
                    });
                    self.retry_pause(&e, tried.elapsed(), left)
                };
                self.next_renew = Some(mono + retry);
                if !expired {
                    self.set_state(LeaseState::Renewing);
                }
                !expired
            }
        }
    }

    /// Persists the mark ahead when it runs low or a report is due, and only
    /// then lets the generator issue up to it (persist, then allow).
    async fn keep_mark_ahead(&mut self, claim: &Claim, mono: Instant) {
        let (now, ahead, target) = self.aim();
        let mark = self.generator.mark().unwrap_or(Timestamp::MIN);
        let report_due = mono >= self.next_report;
        let low = mark < add(ahead, self.ctx.config.window / 2);
        if low
            && self
                .keep_local_mark_ahead(claim, ahead, target)
                .await
                .is_err()
        {
            // The mark stays; the generator stops there by itself.
            self.retry_at = mono_now() + self.ctx.config.check_interval;
            return;
        }
        if !(report_due || low) || mono < self.retry_at {
            return;
        }
        let persist = target.max(self.persisted);
        self.attempted = self.attempted.max(persist);
        let tried = tokio::time::Instant::now();
        let persisting = self.ctx.call(
            "persist mark",
            self.ctx.registry.persist_mark(claim, persist, now),
        );
        match self.local_mark_kept_during(claim, persisting).await {
            Ok(()) => {
                self.call_failures = 0;
                self.persisted = persist;
                // Where no other node can hold the worker, only the mark
                // kept locally lets the generator on (above): a restart
                // without the coordinator reads that one.
                if self.ctx.reassigns {
                    self.generator.advance_mark(target);
                }
                self.next_report = mono + self.ctx.config.report_interval;
                let local_failing = self.local_failing.load(Ordering::Acquire);
                let mut s = self.shared.status();
                s.persisted = Some(persist);
                if !local_failing {
                    s.last_error = None;
                }
                if std::mem::take(&mut s.coordinator_away) {
                    tracing::info!(
                        worker = claim.worker,
                        "the registry answers again; the mark caught up"
                    );
                }
            }
            Err(e @ RegistryError::LeaseLost { .. }) => {
                self.set_error(&e);
                if self.lease_valid(mono_now()) {
                    self.register_again(claim).await;
                } else {
                    self.lose();
                }
            }
            Err(e) if !self.ctx.reassigns => {
                // The generator already issues up to the mark kept locally
                // (above): issue on, and catch the coordinator up when it
                // answers.
                self.coordinator_failed(claim, &e);
                // Tried again within half of what the mark kept locally
                // leaves (kept ahead during the call too, so not the target
                // asked for before it): a coordinator that comes back is
                // caught up within about that, not after a pause paced by a
                // long failed call.
                let now = self.ctx.settings.now();
                let left = Some(since(self.generator.mark().unwrap_or(target), now));
                self.retry_at = mono_now() + self.retry_pause(&e, tried.elapsed(), left);
            }
            Err(e) => {
                // The mark stays where it is; the generator stops there by itself.
                self.set_error(&e);
                let left = (mark > now)
                    .then(|| Duration::try_from(mark.duration_since(now)).unwrap_or_default());
                self.retry_at = mono_now() + self.retry_pause(&e, tried.elapsed(), left);
            }
        }
    }

    /// The clock now, how far the generator has gone (now, or its last tick
    /// where that is later), and the mark a persist now aims for: that plus
    /// the lead.
    fn aim(&self) -> (Timestamp, Timestamp, Timestamp) {
        let now = self.ctx.settings.now();
        let ahead = now.max(self.generator.last_tick_time());
        (now, ahead, add(ahead, self.ctx.lead(self.lease.as_ref())))
    }

    /// Where no other node can ever hold this worker ID, moves the mark to
    /// `target` (`ahead` plus the lead) once it is below `ahead` plus half
    /// the window: what must hold the mark before the generator may issue up
    /// to it is what a restart reads without the coordinator (persist, then
    /// allow), and the coordinator is told after, whether it answers or not.
    /// Does nothing where a lease decides (the registry reassigns workers).
    async fn keep_local_mark_ahead(
        &self,
        claim: &Claim,
        ahead: Timestamp,
        target: Timestamp,
    ) -> Result<()> {
        let mark = self.generator.mark().unwrap_or(Timestamp::MIN);
        if self.ctx.reassigns || mark >= add(ahead, self.ctx.config.window / 2) {
            return Ok(());
        }
        let kept = self
            .ctx
            .call(
                "persist mark locally",
                self.ctx.registry.persist_local(claim, target),
            )
            .await;
        match kept {
            Ok(()) => {
                self.generator.advance_mark(target);
                if self.local_failing.swap(false, Ordering::AcqRel) {
                    tracing::info!(worker = claim.worker, "the mark is kept locally again");
                }
                Ok(())
            }
            Err(e) => {
                self.local_failing.store(true, Ordering::Release);
                self.set_error(&e);
                // Not ready: the generator stops at its mark.
                self.shared.status().coordinator_away = false;
                Err(e)
            }
        }
    }

    /// A coordinator call failed (but for [`RegistryError::LeaseLost`]) where
    /// no other node can ever hold this worker ID: issuing goes on from the
    /// mark kept locally, and the node stays ready, whatever the failure is
    /// (a connection reset is no more a reason to stop than a timeout). The
    /// status says the coordinator is away, unless the mark kept locally
    /// fails too: that one stops the generator, and the status shows it.
    fn coordinator_failed(&self, claim: &Claim, e: &RegistryError) {
        if self.local_failing.load(Ordering::Acquire) {
            tracing::debug!(worker = claim.worker, error = %e, "the registry fails too");
            return;
        }
        self.set_error(e);
        let mut s = self.shared.status();
        if !std::mem::replace(&mut s.coordinator_away, true) {
            tracing::warn!(
                worker = claim.worker,
                "the registry fails; this worker ID is never given to another node, so \
                 issuing goes on"
            );
        }
    }

    /// Awaits `call`, a coordinator call of this step; where no other node
    /// can ever hold this worker ID, keeps the mark ahead locally meanwhile,
    /// every check interval.
    ///
    /// A coordinator that can't be reached holds each call for up to the call
    /// timeout (2 s), more than the half window (1.5 s) the mark keeps ahead
    /// of the clock between local persists. A call sent just before the mark
    /// ran low used to outlast it, and the node refused IDs for the rest of
    /// the call, in a mode that promises to issue through any outage (seen in
    /// CI: one `mark_reached` at the start of a ZooKeeper outage, `forever`).
    async fn local_mark_kept_during<T>(
        &self,
        claim: &Claim,
        call: impl std::future::Future<Output = T>,
    ) -> T {
        if self.ctx.reassigns {
            return call.await;
        }
        let mut call = std::pin::pin!(call);
        let every = self.ctx.config.check_interval;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                out = &mut call => return out,
                _ = tick.tick() => {
                    let (_, ahead, target) = self.aim();
                    // A failure is recorded there; the call goes on.
                    let _ = self.keep_local_mark_ahead(claim, ahead, target).await;
                }
            }
        }
    }

    /// Whether the lease is valid by this node's own monotonic clock at
    /// `mono`: before its end minus the margin (always, without a lease
    /// that fences).
    fn lease_valid(&self, mono: Instant) -> bool {
        self.ctx.fenced(self.lease).is_none_or(|l| {
            l.valid_until
                .checked_sub(self.ctx.config.lease_margin)
                .is_some_and(|fence| mono < fence)
        })
    }

    /// The registry refused the claim (`LeaseLost`) while its lease is still
    /// valid by this node's clock: registers it again in the registry's new
    /// epoch ([`WorkerRegistry::register_again`]), keeping the worker ID and
    /// the generator. Returns whether the step goes on to the mark.
    ///
    /// Why issuing may go on meanwhile, and after, with the same generator:
    /// - **Nobody else holds the worker yet.** A registry that forgot begins
    ///   a new epoch whose claims are held for the lease TTL plus the mark
    ///   window; registration again is the only way into a held worker, and
    ///   only the holding whose lease is still valid by its own clock asks
    ///   for it (this one: a lease is exclusive, and `valid_until` errs
    ///   early). So until this node's fence, which comes before the hold
    ///   ends, no other node can be issuing with this worker ID.
    /// - **Nothing issued is below the next holder's start.** Every ID this
    ///   generator issued is at or below a mark it persisted (persist, then
    ///   allow), so at or below `attempted`, and the registration raises the
    ///   new epoch's stored mark to `attempted` before it grants anything:
    ///   the next holder of the worker starts above it, even if the new
    ///   epoch's store had lost every mark this holding wrote.
    /// - **Only while no one else came between.** The registry grants it
    ///   only when the claim is from an earlier epoch, the worker is free or
    ///   still this claim's, and its stored mark is not above `attempted`
    ///   (a higher one was written by another holding, whose IDs may be
    ///   above this generator's); anything else is `LeaseLost`, and this
    ///   node fences as before.
    /// - **The fence still holds.** Until the registration succeeds, the
    ///   mark is not persisted further and the lease is not renewed, so the
    ///   generator stops at its mark, and at the old lease's fence at the
    ///   latest (then the claim is lost and claimed anew, after the hold).
    async fn register_again(&mut self, claim: &Claim) -> bool {
        let tried = tokio::time::Instant::now();
        let result = self
            .ctx
            .call(
                "register again",
                self.ctx
                    .registry
                    .register_again(&self.ctx.node, claim, self.attempted),
            )
            .await;
        let mono = mono_now();
        match result {
            Ok(again) => {
                self.regain = false;
                self.call_failures = 0;
                self.lease = again.lease;
                self.next_renew = again.lease.map(|l| mono + renew_every(&l));
                self.persisted = self.persisted.max(self.attempted);
                tracing::info!(
                    worker = again.worker,
                    "worker registered again in the registry's new epoch; issuing goes on"
                );
                self.claim = Some(again);
                self.set_state(LeaseState::Held);
                let mut s = self.shared.status();
                s.persisted = Some(self.persisted);
                s.last_error = None;
                true
            }
            Err(e)
                if self.lease_valid(mono)
                    && (e.is_transient() || matches!(e, RegistryError::Backend { .. })) =>
            {
                // Tried again until the lease's fence; meanwhile the
                // generator issues up to its mark, no further.
                self.set_error(&e);
                self.regain = true;
                let left = self.lease.and_then(|l| {
                    l.valid_until
                        .checked_sub(self.ctx.config.lease_margin)
                        .map(|fence| fence.saturating_duration_since(mono))
                });
                self.next_renew = Some(mono + self.retry_pause(&e, tried.elapsed(), left));
                self.set_state(LeaseState::Renewing);
                false
            }
            Err(e) => {
                if !matches!(e, RegistryError::Unsupported { .. }) {
                    self.set_error(&e);
                }
                self.lose();
                false
            }
        }
    }

    /// The registry says the claim is gone: stop issuing, claim again next.
    fn lose(&mut self) {
        self.regain = false;
        self.generator.retract_mark(Timestamp::MIN);
        self.claim = None;
        self.lease = None;
        self.next_renew = None;
        // Soon (every ID is refused meanwhile), jittered so that nodes that
        // lost their leases together don't claim again in step.
        self.retry_at = mono_now()
            + jittered(
                self.ctx.config.check_interval,
                &self.ctx.node,
                self.ctx.retries.fetch_add(1, Ordering::Relaxed),
            );
        self.set_state(LeaseState::Lost);
    }

    /// Claims again and swaps in a new generator above both the new stored mark
    /// and everything the old generator could have issued.
    async fn reclaim(&mut self) {
        let tried = tokio::time::Instant::now();
        let claim = match self.ctx.claim().await {
            Ok(claim) => {
                self.failures = 0;
                claim
            }
            Err(e) => {
                self.set_error(&e);
                let wait = match &e {
                    // Held: try again just as the hold ends, not before.
                    RegistryError::Held { retry_after, .. } => {
                        (*retry_after + Duration::from_millis(20)).max(self.retry_after())
                    }
                    // A coordinator that can't be reached: ask again soon
                    // (jittered), as a renewal does; a lost lease is a
                    // node that refuses every ID until this succeeds.
                    RegistryError::Unavailable { .. } => self.ctx.probe_pause(),
                    // A slow or failing coordinator: back off, doubling.
                    RegistryError::Timeout { .. } | RegistryError::Backend { .. } => {
                        self.failures += 1;
                        let took = Ctx::took(&e, tried.elapsed());
                        Ctx::paced(self.ctx.backoff_after(self.failures, &e), took)
                    }
                    // Jittered: nodes that lost their leases together don't
                    // come back to the registry in lockstep.
                    _ => Ctx::paced(self.ctx.backoff(0), tried.elapsed()),
                };
                self.retry_at = mono_now() + wait;
                return;
            }
        };
        let floor = Some(self.persisted);
        match self.ctx.establish(&claim, floor).await {
            Ok(est) => {
                self.generator = est.generator.clone();
                self.persisted = est.persisted;
                self.attempted = est.persisted;
                let mono = mono_now();
                self.lease = claim.lease;
                self.next_renew = claim.lease.map(|l| mono + renew_every(&l));
                self.next_report = mono + self.ctx.config.report_interval;
                self.shared.current.store(Arc::new(Current {
                    generator: est.generator,
                    worker: claim.worker,
                }));
                tracing::info!(
                    worker = claim.worker,
                    "worker claimed again; new generator in force"
                );
                self.claim = Some(claim);
                self.set_state(LeaseState::Held);
                let mut s = self.shared.status();
                s.persisted = Some(est.persisted);
                s.first_mark = Some(est.persisted);
                s.generation += 1;
                s.last_error = None;
            }
            Err(e) => {
                self.set_error(&e);
                self.ctx.release_quietly(&claim).await;
                self.retry_at = mono_now() + self.retry_after();
            }
        }
    }

    /// Stop issuing for good, record what was really issued, release.
    ///
    /// A clean stop: the generator is sealed (no ID past its last issued
    /// tick can come out any more, not even one in the making), then its
    /// true high-water replaces the window-ahead mark in the registry
    /// ([`WorkerRegistry::record_clean_stop`]), and only then is the claim
    /// released. So the next holder waits for that tick, usually already
    /// past, instead of the window. If the record fails, the stored mark
    /// stays the window-ahead one: the next holder waits as after a crash.
    async fn finish(mut self) {
        let high = self.generator.seal();
        if let Some(claim) = self.claim.take() {
            let now = self.ctx.settings.now();
            match self
                .ctx
                .call(
                    "record clean stop",
                    self.ctx.registry.record_clean_stop(&claim, high, now),
                )
                .await
            {
                Ok(()) => tracing::debug!(worker = claim.worker, %high, "clean stop recorded"),
                Err(e) => self.set_error(&e),
            }
            self.ctx.release_quietly(&claim).await;
        }
        self.lease = None;
        self.set_state(LeaseState::Stopped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::ReportRevision;

    #[test]
    fn config_is_validated() {
        assert!(KeeperConfig::new().validate("file").is_ok());
        let err = KeeperConfig::new()
            .with_check_interval(Duration::from_secs(2))
            .validate("file")
            .unwrap_err();
        assert!(err.to_string().contains("check interval 2s"), "{err}");
        let err = KeeperConfig::new()
            .with_window(Duration::ZERO)
            .validate("sql")
            .unwrap_err();
        assert!(
            err.to_string().starts_with("sql registry: keeper: window"),
            "{err}"
        );
    }

    #[test]
    fn claimed_ids_split_into_datacenter_and_worker() {
        let s = GeneratorSettings::new(Layout::TWITTER);
        assert_eq!(s.range(), 1024);
        assert_eq!(s.split(0b00011_00101), (3, 5));
        let s = s.with_datacenter(2);
        assert_eq!(s.range(), 32);
        assert_eq!(s.split(7), (2, 7));
        assert_eq!(GeneratorSettings::new(Layout::LEAF).split(1000), (0, 1000));
    }

    #[test]
    fn only_wait_and_borrow_absorb_a_clock_behind_the_stored_mark() {
        let s = GeneratorSettings::new(Layout::LEAF);
        assert_eq!(s.start_absorb(), Duration::from_millis(5));
        let s = s.with_clock_behind(ClockBehind::History { ticks: 8 });
        assert_eq!(s.start_absorb(), Duration::ZERO);
        let s = s.with_clock_behind(ClockBehind::Borrow {
            max_lead: Duration::from_secs(3),
        });
        assert_eq!(s.start_absorb(), Duration::from_secs(3));
    }

    const T: i64 = 1_795_219_200_000;
    const SKEW: Duration = Duration::from_secs(10);
    const INTERVAL: Duration = Duration::from_secs(3);

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(T + ms).unwrap()
    }

    /// `(reported ms from T, age in ms or unknown)` as peers 1, 2, ...
    fn reports(of: &[(i64, Option<u64>)]) -> Vec<PeerReport> {
        (1..)
            .zip(of)
            .map(|(w, &(ms, age))| {
                let r = PeerReport::new(w, at(ms));
                match age {
                    Some(a) => r.with_age(Duration::from_millis(a)),
                    None => r,
                }
            })
            .collect()
    }

    fn offset(now_ms: i64, of: &[(i64, Option<u64>)]) -> Option<i64> {
        match check_peer_clocks(at(now_ms), &reports(of), SKEW, INTERVAL) {
            Ok(()) => None,
            Err(RegistryError::ClockSkew { offset_ms, .. }) => Some(offset_ms),
            Err(e) => panic!("{e}"),
        }
    }

    /// The case: reports 74.8 s old by the coordinator's clock (an
    /// overloaded coordinator took no report for that long). Of known age
    /// they are the peers' clocks now, and a correct clock starts; of
    /// unknown age, the same reports refuse it.
    #[test]
    fn stale_reports_of_known_age_do_not_refuse_a_correct_clock() {
        let stale = [(-74_810, Some(74_810)); 5];
        assert_eq!(offset(0, &stale), None);
        let unknown = [(-74_810, None); 5];
        assert_eq!(offset(0, &unknown), Some(74_810));
        // Some fresh, most stale, all of known age: still in step.
        let mixed = [
            (-60_000, Some(60_000)),
            (-1_000, Some(1_000)),
            (-45_000, Some(45_050)),
            (0, Some(0)),
            (-90_000, Some(89_900)),
        ];
        assert_eq!(offset(0, &mixed), None);
    }

    /// A clock truly ahead is refused by reports of known age, stale or
    /// fresh, and without the report interval's allowance: their age is
    /// known, not up to an interval.
    #[test]
    fn a_fast_clock_is_refused_by_reports_of_known_age() {
        assert_eq!(offset(30_000, &[(0, Some(0)); 3]), Some(30_000));
        assert_eq!(offset(30_000, &[(-50_000, Some(50_000)); 3]), Some(30_000));
        // 12 s ahead: within the threshold plus an interval of unknown-age
        // reports (12 < 13), not of known-age ones (12 > 10).
        assert_eq!(offset(12_000, &[(0, None); 3]), None);
        assert_eq!(offset(12_000, &[(0, Some(0)); 3]), Some(12_000));
        // Unknown ages keep their allowance beside known ones: the median of
        // upper bounds is 0 + 3 s here.
        assert_eq!(offset(12_000, &[(0, None), (0, None), (0, Some(0))]), None);
    }

    /// A clock behind the peers is refused as before, stale reports or
    /// not: an age only moves a peer's clock later, so it makes a node look
    /// further behind, never less.
    #[test]
    fn a_clock_behind_is_refused_even_among_stale_reports() {
        let some_stale = [
            (-70_000, Some(70_000)),
            (-70_000, Some(70_000)),
            (0, Some(0)),
        ];
        assert_eq!(offset(-20_000, &some_stale), Some(-20_000));
        // Unknown ages: the stale reports turn the node 20 s behind into one
        // 50 s ahead, which a second read finding no fresh report would let
        // start; known ages put it right.
        let unknown = [(-70_000, None), (-70_000, None), (0, None)];
        assert_eq!(offset(-20_000, &unknown), Some(50_000));
        // Within the threshold behind: in step.
        assert_eq!(offset(-9_000, &some_stale), None);
        assert_eq!(offset(-11_000, &[(0, None); 3]), Some(-11_000));
    }

    /// A second read weighs the reports of known age, and of the others
    /// those written after the first read: by revision where the registry
    /// gives one (a sample may hold other peers the second time), else by a
    /// time that rose.
    #[test]
    fn a_second_read_weighs_only_reports_written_after_the_first() {
        let rev = |written, read| ReportRevision { written, read };
        let first = vec![
            PeerReport::new(1, at(-60_000)).with_revision(rev(40, 100)),
            PeerReport::new(2, at(-60_000)).with_revision(rev(41, 100)),
        ];
        let again = vec![
            // Not in the first sample, written before it: stale.
            PeerReport::new(3, at(-60_000)).with_revision(rev(90, 130)),
            // Written after it.
            PeerReport::new(4, at(-100)).with_revision(rev(120, 130)),
            // The same report again.
            PeerReport::new(1, at(-60_000)).with_revision(rev(40, 130)),
        ];
        let workers = |v: Vec<PeerReport>| v.iter().map(|p| p.worker).collect::<Vec<_>>();
        assert_eq!(workers(fresh_reports(&first, again)), [4]);
        // Without revisions: a time that rose, or a peer not read before.
        let first = reports(&[(-60_000, None), (-60_000, None)]);
        let again = vec![
            PeerReport::new(1, at(-60_000)),
            PeerReport::new(2, at(-500)),
            PeerReport::new(3, at(-60_000)),
            PeerReport::new(4, at(-60_000)).with_age(Duration::from_secs(60)),
        ];
        assert_eq!(workers(fresh_reports(&first, again)), [2, 3, 4]);
    }

    #[test]
    fn status_says_why_it_is_not_ready() {
        let mut st = WorkerStatus {
            registry: "file",
            worker: 3,
            lease: LeaseState::Held,
            lease_left: None,
            mark: None,
            persisted_mark: None,
            generation: 1,
            last_error: None,
            first_mark: None,
            coordinator_away: false,
        };
        assert!(st.is_ready());
        st.lease = LeaseState::Expired;
        assert_eq!(st.not_ready_reason().unwrap(), "worker 3 lease expired");
        st.lease = LeaseState::Held;
        st.last_error = Some("boom".into());
        assert_eq!(st.not_ready_reason().unwrap(), "worker store failing: boom");
        // Away, but issuing on: ready.
        st.coordinator_away = true;
        assert!(st.is_ready());
        st.lease = LeaseState::Lost;
        assert!(!st.is_ready());
    }
}
