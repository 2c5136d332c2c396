//! [`Generator`]: snowflake IDs in this process, with a fixed worker ID or a
//! worker ID leased from the registry a config names, kept by the keeper on
//! the generator's own runtime.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use idmint_core::clock::{MonotonicClock, WallClock};
use idmint_core::{Clock, ClockBehind, IdBatch, SequenceExhausted, SequenceStart, Snowflake};
use idmint_node::config::{Config, RegistryKind, ZooKeeperModeName};
use idmint_node::open::{generator_settings, keeper_config, open_registry};
use idmint_node::{IdClock, IssueError, MarkWait};
use idmint_registry::{
    KeeperGuard, LeaseState, NodeIdentity, RegistryError, WorkerHandle, WorkerKeeper,
};
use jiff::Timestamp;

use crate::count;
use crate::error::Error;
use crate::fork::ProcessBound;
use crate::layout::Layout;
use crate::open;
use crate::runtime::Runtime;
use crate::workers::{self, CheckedRegistry, IdSpace, InUse};

/// The most IDs one [`Generator::next_ids`] call makes: the core's
/// [`Snowflake::MAX_BATCH`], which every binding states and exposes as is.
pub const MAX_BATCH: u64 = Snowflake::MAX_BATCH;

/// How long a failed claim in a forked child is answered from memory before
/// the next call tries again (so a registry that is down doesn't get one
/// claim per call).
const RECLAIM_BACKOFF: Duration = Duration::from_secs(1);

/// How a fixed-worker [`Generator`] makes IDs: the layout, the worker (and
/// datacenter) parts of the node field, the clock and the policies.
///
/// Builder-lite: [`GeneratorOptions::new`] gives the core's defaults
/// (`wait:5ms` when the clock is behind, `wait` for the next tick when a
/// tick's sequence runs out, a zero sequence start, the monotonic clock).
#[derive(Debug, Clone)]
pub struct GeneratorOptions {
    layout: Layout,
    worker: u32,
    datacenter: u32,
    clock_behind: ClockBehind,
    sequence_exhausted: SequenceExhausted,
    sequence_start: SequenceStart,
    wall_clock: bool,
}

impl Default for GeneratorOptions {
    /// Every binding's default generator: [`Layout::default`] (`twitter`),
    /// worker 0, the core's policies.
    fn default() -> GeneratorOptions {
        GeneratorOptions::new(Layout::default(), 0)
    }
}

impl GeneratorOptions {
    /// Worker `worker` (within the layout's worker bits) of `layout`,
    /// datacenter 0.
    pub fn new(layout: Layout, worker: u32) -> GeneratorOptions {
        GeneratorOptions {
            layout,
            worker,
            datacenter: 0,
            clock_behind: ClockBehind::default(),
            sequence_exhausted: SequenceExhausted::default(),
            sequence_start: SequenceStart::default(),
            wall_clock: false,
        }
    }

    /// The layout (default [`Layout::default`], `twitter`).
    pub fn with_layout(mut self, layout: Layout) -> GeneratorOptions {
        self.layout = layout;
        self
    }

    /// The worker part of the node field (default 0).
    pub fn with_worker(mut self, worker: u32) -> GeneratorOptions {
        self.worker = worker;
        self
    }

    /// The datacenter part of the node field (default 0).
    pub fn with_datacenter(mut self, datacenter: u32) -> GeneratorOptions {
        self.datacenter = datacenter;
        self
    }

    /// What to do when the clock is behind the last ID (`fail`, `wait:5ms`,
    /// `borrow:1s`, `rollback-bits`, `history:64`), as in config.
    ///
    /// # Errors
    /// `invalid_text` naming the text.
    pub fn with_clock_behind(mut self, policy: &str) -> Result<GeneratorOptions, Error> {
        self.clock_behind = policy.parse()?;
        Ok(self)
    }

    /// What to do when a tick's sequence runs out (`wait`, `borrow:1s`).
    ///
    /// # Errors
    /// `invalid_text` naming the text.
    pub fn with_sequence_exhausted(mut self, policy: &str) -> Result<GeneratorOptions, Error> {
        self.sequence_exhausted = policy.parse()?;
        Ok(self)
    }

    /// Where each tick's sequence starts (`zero`, `random:100`).
    ///
    /// # Errors
    /// `invalid_text` naming the text.
    pub fn with_sequence_start(mut self, start: &str) -> Result<GeneratorOptions, Error> {
        self.sequence_start = start.parse()?;
        Ok(self)
    }

    /// The three policies as a binding's options give them, each `None`
    /// keeping the core's default: [`GeneratorOptions::with_clock_behind`],
    /// [`GeneratorOptions::with_sequence_exhausted`] and
    /// [`GeneratorOptions::with_sequence_start`].
    ///
    /// # Errors
    /// `invalid_text` naming the first text that doesn't read.
    pub fn with_policies(
        self,
        clock_behind: Option<&str>,
        sequence_exhausted: Option<&str>,
        sequence_start: Option<&str>,
    ) -> Result<GeneratorOptions, Error> {
        let mut options = self;
        if let Some(p) = clock_behind {
            options = options.with_clock_behind(p)?;
        }
        if let Some(p) = sequence_exhausted {
            options = options.with_sequence_exhausted(p)?;
        }
        if let Some(p) = sequence_start {
            options = options.with_sequence_start(p)?;
        }
        Ok(options)
    }

    /// The raw wall clock instead of the default (the wall clock read once,
    /// advanced by the monotonic clock, so a step back while running is
    /// invisible).
    pub fn with_wall_clock(mut self, wall: bool) -> GeneratorOptions {
        self.wall_clock = wall;
        self
    }

    /// The generator, starting strictly after `start_after` when given (the
    /// last ID of a generator that had this worker ID in this process).
    fn build(&self, start_after: Option<Timestamp>) -> Result<Snowflake, Error> {
        let clock: Arc<dyn Clock> = if self.wall_clock {
            Arc::new(WallClock)
        } else {
            Arc::new(MonotonicClock::new())
        };
        let builder = Snowflake::builder(*self.layout.core());
        let builder = match start_after {
            Some(after) => builder.with_start_after(after),
            None => builder,
        };
        Ok(builder
            .with_datacenter(self.datacenter)
            .with_worker(self.worker)
            .with_clock(clock)
            .with_clock_behind(self.clock_behind)
            .with_sequence_exhausted(self.sequence_exhausted)
            .with_sequence_start(self.sequence_start)
            .build()?)
    }
}

/// What a claimed worker's state looks like from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GeneratorStatus {
    /// The registry (`fixed` for a generator with a fixed worker).
    pub registry: &'static str,
    /// The worker ID issued with: the whole node field for a claimed one
    /// (datacenter in its high bits), the worker part for a fixed one.
    pub worker: u32,
    /// The lease's state: `held`, `renewing`, `expired`, `lost`, `stopped`
    /// (`held` for a fixed worker).
    pub lease: &'static str,
    /// Why the generator would refuse now, if it would (the lease's state,
    /// the store's failure).
    pub not_ready: Option<String>,
}

/// Snowflake IDs made in this process.
///
/// Two kinds, one API:
/// - **Fixed** ([`Generator::new`]): a worker ID given by the caller; no
///   registry, no I/O. The caller keeps worker IDs unique across processes
///   (a registry, below, does it for them).
/// - **Leased** ([`Generator::from_config`]): the `[snowflake]` section of
///   an `idmint serve` config; the worker ID is claimed from its registry
///   (file, static, host, k8s, SQL in every mode, Redis, etcd, ZooKeeper)
///   by the server's own keeper, which runs on this generator's runtime
///   thread, persists the high-water mark ahead of the IDs, renews the lease,
///   and fences the generator when the lease or the store is lost.
///
/// Contract:
/// - **One per worker in a process.** A second live generator whose IDs
///   would overlap this one's (the same epoch, unit and bits below the time
///   field, and the same node field: the same layout and worker ID, whatever
///   the preset is called) is refused with `worker_taken`, fixed or leased
///   alike: two of them repeat every ID. A leased generator's claims (the
///   first, and each re-claim) are checked too; a re-claim that overlaps is
///   given back and tried again later, issuing nothing meanwhile. The
///   worker ID is free again once the generator is closed (or dropped) and
///   its last call has returned.
/// - **Thread-safe.** `&self` everywhere; share it (`Arc`) between threads.
///   A call is one load of the generator in force, then the core's
///   compare-and-swap on one word.
/// - **Monotonic.** IDs from one generator strictly increase, across a
///   re-claim after a lost lease too (the new generator starts above the old
///   one's mark).
/// - **Sequence exhausted.** As the policy says: wait for the next tick (at
///   most one tick), or borrow it within the bound.
/// - **Clock behind.** As the policy says (`wait:5ms` by default), else
///   `clock_behind`. A leased generator never issues past the persisted mark:
///   when the keeper lags, a call waits up to 250 ms while the lease is held
///   (the server's bound), then fails with `mark_reached` and a retry hint;
///   with the lease lost or expired it fails at once, with the lease's state
///   in the message, and no ID is issued.
/// - **Fork.** Stamped with the process it was made in: after
///   [`crate::after_fork_in_child`], a leased generator claims a new worker ID
///   in the child before its first ID there (its parent's claim is left to the
///   parent); a fixed one fails with `forked`.
/// - **Close.** [`Generator::close`] stops issuing, releases the lease and
///   stops the runtime; it is idempotent, and every later call fails with
///   `closed`. Dropping the generator closes it.
///
/// # Examples
///
/// ```
/// use idmint_embed::{Generator, GeneratorOptions, Layout};
///
/// let twitter = Layout::parse("twitter")?;
/// let g = Generator::new(GeneratorOptions::new(twitter, 7))?;
/// let a = g.next_id()?;
/// let batch = g.next_ids(1000)?;
/// assert!(batch[0] > a && batch.windows(2).all(|w| w[0] < w[1]));
/// assert_eq!(twitter.decode(a)?.worker, 7);
/// g.close();
/// assert_eq!(g.next_id().unwrap_err().code(), "closed");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Generator {
    source: Source,
    layout: Layout,
    /// The longest a call waits inside the core (see [`Generator::max_wait`]).
    max_wait: Duration,
    /// The issuer and the close, shared with the process's table of what
    /// is open ([`crate::close_all`]).
    state: Arc<State>,
}

/// What a close touches: [`crate::close_all`] reaches it through the
/// process's table.
#[derive(Debug)]
struct State {
    /// The issuer of this process; `None` once closed.
    live: ArcSwapOption<ProcessBound<Live>>,
    /// Serialises re-claims (in a forked child) and close.
    reclaim: Mutex<Reclaim>,
}

impl State {
    /// A state issuing from `live`, listed in the process's table.
    fn open(live: Live) -> Arc<State> {
        let state = Arc::new(State {
            live: ArcSwapOption::from_pointee(ProcessBound::new(live)),
            reclaim: Mutex::new(Reclaim::default()),
        });
        open::track(&state);
        state
    }
}

impl open::Close for State {
    fn close(&self) {
        let mut reclaim = lock(&self.reclaim);
        reclaim.closed = true;
        if let Some(live) = self.live.swap(None)
            && live.is_current()
        {
            live.close();
        }
    }
}

/// What the generator is made from, to make it again in a forked child.
#[derive(Debug)]
enum Source {
    Fixed(GeneratorOptions),
    Config(Box<Config>),
}

/// The issuer, as made in one process.
// One per generator, behind an `Arc`: boxing the (cache-padded) Snowflake to
// shrink the enum would add a pointer chase to every call for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Live {
    /// A fixed worker's generator, that worker, and its entry in the
    /// process's table of live workers (given back when this drops: after
    /// close, once no call holds it).
    Fixed {
        snowflake: Snowflake,
        worker: u32,
        /// Given back when this drops, with the last tick.
        in_use: InUse,
    },
    Leased(Leased),
}

/// A claimed worker: its handle, the keeper that holds the claim and the
/// runtime both run on.
#[derive(Debug)]
struct Leased {
    handle: WorkerHandle,
    /// Taken by close; dropping it would stop issuing and release in the
    /// background.
    keeper: Mutex<Option<KeeperGuard>>,
    /// The registry the keeper claims through, which holds the claim's entry
    /// in the process's table of live workers.
    registry: Arc<CheckedRegistry>,
    /// Dropped last (fields drop in order): it runs the keeper's release.
    runtime: Runtime,
}

/// A forked child's last failed claim, answered from memory for a while.
#[derive(Debug, Default)]
struct Reclaim {
    failed: Option<(Instant, Error)>,
    closed: bool,
}

impl Generator {
    /// A generator with a fixed worker ID: no registry, no I/O, nothing in
    /// the background.
    ///
    /// # Errors
    /// `node_out_of_range` for a worker or datacenter outside the layout,
    /// `invalid_config` for a policy the layout can't support,
    /// `worker_taken` while a live generator of this process makes IDs that
    /// overlap this one's (see the type's contract).
    pub fn new(options: GeneratorOptions) -> Result<Generator, Error> {
        // Checked first, so bad input is refused as such.
        options.build(None)?;
        let worker = options.worker;
        let layout = options.layout.core();
        // In range: `build` checked both parts.
        let node = (u64::from(options.datacenter) << layout.worker_bits()) | u64::from(worker);
        let ids = IdSpace::new(
            layout,
            node,
            options.clock_behind == ClockBehind::RollbackBits,
        );
        let holder = format!(
            "the generator with the fixed worker ID {worker} (datacenter {}) of layout {}",
            options.datacenter,
            workers::layout_name(layout)
        );
        let (in_use, start_after) =
            workers::enter(ids, holder).map_err(|c| Error::worker_taken(&c))?;
        let snowflake = options.build(start_after)?;
        Ok(Generator {
            layout: options.layout,
            max_wait: max_wait(options.layout, options.clock_behind),
            source: Source::Fixed(options),
            state: State::open(Live::Fixed {
                snowflake,
                worker,
                in_use,
            }),
        })
    }

    /// A generator from the `[snowflake]` section of the config file at
    /// `path` (then the `IDMINT_…` environment variables over it, as `idmint
    /// serve` reads its config): claims a worker ID from the registry,
    /// persists the first high-water mark, and returns once an ID can be
    /// issued.
    ///
    /// # Errors
    /// `invalid_config` for a config `idmint serve` would refuse (or that an
    /// embedded process can't use: ZooKeeper's `forever` mode), and the
    /// registry's codes for a failed claim (`workers_exhausted`,
    /// `registry_timeout`, `registry_backend`, `clock_behind_mark`, ...);
    /// `worker_taken` when the worker ID claimed would make IDs that a live
    /// generator of this process makes (the claim is released).
    pub fn from_config(path: impl AsRef<Path>) -> Result<Generator, Error> {
        Generator::from_checked(load_config(Some(path.as_ref()))?)
    }

    /// As [`Generator::from_config`], from a config already loaded (checked
    /// again here as `idmint serve` checks it).
    ///
    /// # Errors
    /// As [`Generator::from_config`].
    pub fn from_loaded(config: Config) -> Result<Generator, Error> {
        idmint_node::check(&config)?;
        Generator::from_checked(config)
    }

    /// From a config [`idmint_node::check`] passed.
    fn from_checked(config: Config) -> Result<Generator, Error> {
        check_embeddable(&config)?;
        let layout = Layout::from(config.layout()?);
        let live = claim(&config, layout)?;
        Ok(Generator {
            layout,
            max_wait: max_wait(layout, config.snowflake.clock_behind),
            source: Source::Config(Box::new(config)),
            state: State::open(live),
        })
    }

    /// The layout IDs are made with.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The longest one [`Generator::next_id`] can wait inside the generator
    /// when nothing fails: a tick for a new sequence, or the clock policy's
    /// bound when the clock is behind (`wait:5ms`). The wait for the keeper
    /// at the mark (up to 250 ms) comes on top, and only when
    /// [`Generator::try_next_id`] says `None`. A binding may hold a lock
    /// (Python's GIL) across a call when this is short.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// The next ID.
    ///
    /// # Errors
    /// `closed`, `forked`; the core's `clock_behind`, `layout_exhausted`,
    /// `clock_before_epoch`; `mark_reached` when the mark can't be persisted
    /// in time or the lease is gone (see the type's contract); after a fork,
    /// the registry's codes while the child's claim fails.
    #[inline]
    pub fn next_id(&self) -> Result<u64, Error> {
        let live = self.state.live.load();
        match live.as_deref() {
            Some(live) if live.is_current() => match &**live {
                Live::Fixed { snowflake: s, .. } => Ok(s.next_id()?.get()),
                Live::Leased(l) => l.next_id(),
            },
            _ => self.after_fork_or_close()?.next_id_live(),
        }
    }

    /// The next ID if it can be had without waiting for the keeper: `None`
    /// when the high-water mark is reached while the lease is held (the
    /// keeper is persisting further; [`Generator::next_id`] waits for it).
    /// For callers that must give something up before they block (Python's
    /// GIL).
    ///
    /// # Errors
    /// As [`Generator::next_id`], but never a re-claim: after a fork this is
    /// `None` until [`Generator::next_id`] has claimed.
    #[inline]
    pub fn try_next_id(&self) -> Result<Option<u64>, Error> {
        let live = self.state.live.load();
        match live.as_deref() {
            Some(live) if live.is_current() => match &**live {
                Live::Fixed { snowflake: s, .. } => Ok(Some(s.next_id()?.get())),
                Live::Leased(l) => l.try_next_id(),
            },
            Some(_) if matches!(self.source, Source::Config(_)) => Ok(None),
            _ => Err(self.refusal()),
        }
    }

    /// `n` as the length of a batch [`Generator::next_ids`] would make: the
    /// one check of a count every binding makes before it sets anything
    /// aside (Go's and C's arrays), whatever integer type its language
    /// has (a negative one is refused here too, in the same words).
    ///
    /// # Errors
    /// `invalid_count` unless `n` is 1 to [`MAX_BATCH`], naming `n`.
    pub fn check_count(n: impl Into<i128>) -> Result<usize, Error> {
        count::check(n, MAX_BATCH)
    }

    /// `n` IDs in increasing order. Up to a tick's worth (4096 for twitter)
    /// come at once; more wait for the ticks they need (at the layout's cap).
    ///
    /// # Errors
    /// `invalid_count` for 0 or more than [`MAX_BATCH`] (10,000,000, the
    /// core's [`idmint_core::Snowflake::MAX_BATCH`]); else as
    /// [`Generator::next_id`].
    pub fn next_ids(&self, n: u64) -> Result<Vec<u64>, Error> {
        let mut out = Vec::new();
        self.next_ids_into(n, &mut out)?;
        Ok(out)
    }

    /// As [`Generator::next_ids`], appending to `out` (which is left as it
    /// was on an error).
    ///
    /// # Errors
    /// As [`Generator::next_ids`].
    pub fn next_ids_into(&self, n: u64, out: &mut Vec<u64>) -> Result<(), Error> {
        let batch = self.live()?.next_ids_live(n)?;
        out.reserve(usize::try_from(batch.len()).unwrap_or(0));
        out.extend(batch.iter().map(|id| id.get()));
        Ok(())
    }

    /// As [`Generator::next_ids`] with `n = out.len()`, writing the IDs into
    /// `out` in increasing order: for a binding that hands the caller's own
    /// array down (Go's `[]int64`), with no vector in between. `out` is left
    /// as it was on an error.
    ///
    /// # Errors
    /// As [`Generator::next_ids`] (`invalid_count` for an empty `out`).
    pub fn fill_ids(&self, out: &mut [u64]) -> Result<(), Error> {
        let n = u64::try_from(out.len()).unwrap_or(u64::MAX);
        let batch = self.live()?.next_ids_live(n)?;
        for (slot, id) in out.iter_mut().zip(batch.iter()) {
            *slot = id.get();
        }
        Ok(())
    }

    /// The worker ID and the state of its lease.
    ///
    /// # Errors
    /// `closed`; `forked` for a fixed generator in a forked child.
    pub fn status(&self) -> Result<GeneratorStatus, Error> {
        let live = self.state.live.load();
        match live.as_deref() {
            Some(live) if live.is_current() => Ok(live.status()),
            _ => Ok(self.after_fork_or_close()?.status()),
        }
    }

    /// Stops issuing, releases the lease (waiting up to a few seconds for the
    /// registry) and stops the runtime. Idempotent; every later call fails
    /// with `closed`. In a forked child it closes only the child's own claim.
    pub fn close(&self) {
        open::Close::close(&*self.state);
    }

    /// The issuer of this process: the current one, or the child's new one
    /// after a fork.
    fn live(&self) -> Result<Arc<ProcessBound<Live>>, Error> {
        match self.state.live.load_full() {
            Some(live) if live.is_current() => Ok(live),
            _ => self.after_fork_or_close(),
        }
    }

    /// Slow path: closed, or made before a fork. In a child, a leased
    /// generator claims anew (once; others wait on the lock), a fixed one
    /// refuses.
    #[cold]
    fn after_fork_or_close(&self) -> Result<Arc<ProcessBound<Live>>, Error> {
        let mut reclaim = lock(&self.state.reclaim);
        if reclaim.closed {
            return Err(Error::closed("generator"));
        }
        if let Some(live) = self.state.live.load_full().filter(|l| l.is_current()) {
            return Ok(live); // another thread claimed meanwhile
        }
        let config = match &self.source {
            Source::Fixed(options) => return Err(Error::forked(options.worker)),
            Source::Config(config) => config,
        };
        if let Some((at, e)) = &reclaim.failed
            && at.elapsed() < RECLAIM_BACKOFF
        {
            return Err(e.clone());
        }
        match claim(config, self.layout) {
            Ok(live) => {
                reclaim.failed = None;
                let live = Arc::new(ProcessBound::new(live));
                // The parent's issuer is leaked by its ProcessBound, never
                // dropped here.
                self.state.live.store(Some(live.clone()));
                Ok(live)
            }
            Err(e) => {
                reclaim.failed = Some((Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Why a call can't be served right now without the slow path.
    fn refusal(&self) -> Error {
        match &self.source {
            _ if lock(&self.state.reclaim).closed => Error::closed("generator"),
            Source::Fixed(options) => Error::forked(options.worker),
            Source::Config(_) => Error::closed("generator"),
        }
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.close();
    }
}

impl Drop for Live {
    /// The last reference to a fixed generator is gone: nothing issues from
    /// it again, and the next generator on its worker ID in this process
    /// starts after its last tick (`workers.rs`).
    fn drop(&mut self) {
        if let Live::Fixed {
            snowflake, in_use, ..
        } = self
        {
            in_use.ended_at(snowflake.last_tick_time());
        }
    }
}

impl Live {
    fn next_id_live(&self) -> Result<u64, Error> {
        match self {
            Live::Fixed { snowflake: s, .. } => Ok(s.next_id()?.get()),
            Live::Leased(l) => l.next_id(),
        }
    }

    fn next_ids_live(&self, n: u64) -> Result<IdBatch, Error> {
        match self {
            Live::Fixed { snowflake: s, .. } => Ok(s.next_ids(n)?),
            Live::Leased(l) => l.next_ids(n),
        }
    }

    fn status(&self) -> GeneratorStatus {
        match self {
            Live::Fixed { worker, .. } => GeneratorStatus {
                registry: "fixed",
                worker: *worker,
                lease: LeaseState::Held.name(),
                not_ready: None,
            },
            Live::Leased(l) => {
                let s = l.handle.status();
                GeneratorStatus {
                    registry: s.registry,
                    worker: s.worker,
                    lease: s.lease.name(),
                    not_ready: s.not_ready_reason(),
                }
            }
        }
    }

    fn close(&self) {
        if let Live::Leased(l) = self {
            let keeper = lock(&l.keeper).take();
            if let Some(keeper) = keeper {
                // Stops issuing at once, then persists a last report and
                // releases the claim; bounded, so a registry that is down
                // can't hold the caller for long (its lease then runs out).
                l.runtime.block_on(async {
                    let _ = tokio::time::timeout(Duration::from_secs(5), keeper.shutdown()).await;
                });
                // The generator is stopped (the shutdown's first step), so its
                // worker ID is free in this process, released in the registry
                // or not; the next generator on it starts after its last ID.
                l.registry.forget(l.handle.generator().last_tick_time());
            }
        }
    }
}

impl Leased {
    #[inline]
    fn next_id(&self) -> Result<u64, Error> {
        match self.handle.next_id() {
            Ok(id) => Ok(id.get()),
            Err(e @ idmint_core::Error::MarkReached { .. }) => {
                self.wait_for_mark(e, || self.handle.next_id().map(|id| id.get()))
            }
            Err(e) => Err(e.into()),
        }
    }

    #[inline]
    fn try_next_id(&self) -> Result<Option<u64>, Error> {
        match self.handle.next_id() {
            Ok(id) => Ok(Some(id.get())),
            Err(e @ idmint_core::Error::MarkReached { .. }) => {
                let status = self.handle.status();
                if status.lease == LeaseState::Held {
                    Ok(None)
                } else {
                    Err(IssueError::paused(&e, &status).into())
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    fn next_ids(&self, n: u64) -> Result<IdBatch, Error> {
        match self.handle.next_ids(n) {
            Ok(batch) => Ok(batch),
            Err(e @ idmint_core::Error::MarkReached { .. }) => {
                self.wait_for_mark(e, || self.handle.next_ids(n))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// What the server does when a call meets the mark
    /// ([`MarkWait`]), asleep on this thread.
    #[cold]
    fn wait_for_mark<T>(
        &self,
        mut e: idmint_core::Error,
        mut again: impl FnMut() -> idmint_core::Result<T>,
    ) -> Result<T, Error> {
        let mut wait = MarkWait::new();
        loop {
            std::thread::sleep(wait.pause(&e, &self.handle)?);
            match again() {
                Ok(v) => return Ok(v),
                Err(next @ idmint_core::Error::MarkReached { .. }) => e = next,
                Err(other) => return Err(other.into()),
            }
        }
    }
}

/// A tick, or the clock policy's wait bound if longer.
fn max_wait(layout: Layout, clock_behind: ClockBehind) -> Duration {
    match clock_behind {
        ClockBehind::Wait { max } => layout.unit().max(max),
        _ => layout.unit(),
    }
}

/// Loads a config as `idmint serve` does: `path`, then the `IDMINT_…`
/// environment variables, then the server's checks (once).
pub(crate) fn load_config(path: Option<&Path>) -> Result<Config, Error> {
    Ok(idmint_node::load_checked(path)?)
}

/// Refuses what a config can do in a server but not in an embedded process.
fn check_embeddable(config: &Config) -> Result<(), Error> {
    let sf = &config.snowflake;
    if sf.registry == RegistryKind::Zookeeper && sf.zookeeper.mode == ZooKeeperModeName::Forever {
        return Err(Error::config(
            "config key snowflake.zookeeper.mode: \"forever\" keys a worker ID by the node's \
             address and port, and an embedded process has no port of its own (two processes \
             on one host would get one worker ID); use mode = \"ephemeral\"",
        ));
    }
    Ok(())
}

/// Who this process claims as (`idmint_node::process_identity`): the host
/// name, the address (`snowflake.advertise_address`, else the host name),
/// and the process ID in the port field, so each process on a host is a
/// node of its own in the registry's listing.
pub fn node_identity(config: &Config) -> NodeIdentity {
    idmint_node::process_identity(config)
}

/// Creates `server.data_dir`, for what lives there and doesn't create it
/// itself: the default segment store's SQLite file. (The lease file of the
/// file, static, host and k8s registries and the floor file create it when
/// they open; a config that needs none of these creates no directory.)
pub(crate) fn create_data_dir(config: &Config) -> Result<(), Error> {
    Ok(idmint_node::create_data_dir(config)?)
}

/// Opens the registry and claims a worker through a keeper on a new
/// runtime, as `idmint serve`'s start does (`start.rs::claim_worker`), each
/// claim checked against the process's live workers ([`CheckedRegistry`]).
/// No data directory is made here: the registries that keep files there
/// make it.
fn claim(config: &Config, layout: Layout) -> Result<Live, Error> {
    let runtime = Runtime::start()?;
    let settings = generator_settings(config, *layout.core())
        .with_clock(IdClock::new(config.snowflake.clock).shared());
    let node = node_identity(config);
    let (registry, started) = runtime.block_on(async {
        let registry = Arc::new(CheckedRegistry::new(
            open_registry(config).await?,
            *layout.core(),
            config.snowflake.datacenter,
            config.snowflake.clock_behind == ClockBehind::RollbackBits,
        ));
        let started =
            WorkerKeeper::start(registry.clone(), node, settings, keeper_config(config)).await;
        Ok::<_, RegistryError>((registry, started))
    })?;
    let keeper = started.map_err(|e| match registry.refused() {
        // Refused here: in this layer's own words (the registry's speak of
        // two nodes).
        Some(conflict) => Error::worker_taken(&conflict),
        None => e.into(),
    })?;
    Ok(Live::Leased(Leased {
        handle: keeper.handle().clone(),
        keeper: Mutex::new(Some(keeper)),
        registry,
        runtime,
    }))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
