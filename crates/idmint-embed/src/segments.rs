//! [`Segments`]: segment-mode IDs in this process, from the `[segment]`
//! section of an `idmint serve` config, preloaded on the allocator's own
//! runtime.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwapOption;
use idmint_node::config::{Config, ServerConfig};
use idmint_node::open::{open_segment_allocator, prepare_segments};
use idmint_segment::{PreloaderGuard, SegmentAllocator};

use crate::count;
use crate::error::Error;
use crate::fork::ProcessBound;
use crate::generator::{create_data_dir, load_config};
use crate::open;
use crate::runtime::Runtime;

/// Segment keys (Leaf-segment, Tinyid) in this process: dense, strictly
/// increasing IDs per key, from ranges leased from the store the config's
/// `[segment]` section names (SQL with idmint's table, Leaf's `leaf_alloc`
/// or Tinyid's `tiny_id_info`; Redis), double-buffered, the next range
/// leased in the background once a share of the current one is used.
///
/// Contract:
/// - **Thread-safe.** `&self` everywhere. An ID from the buffer is one
///   `fetch_add`; a call blocks only when both buffers of its key are empty
///   (the store is slow or down), for the store's answer.
/// - **Unique.** Every ID comes from a range the store leased to this
///   process alone, once; a key's IDs strictly increase.
/// - **Store down.** Buffered IDs keep coming; once a key's buffers are
///   empty, `unavailable` with a retry hint. Unknown keys: `key_not_found`.
/// - **Fork.** After [`crate::after_fork_in_child`], the child reopens the
///   store on its own runtime and leases its own ranges; nothing the parent
///   buffered is used there.
/// - **Floors.** The server keeps a floor file per data directory that
///   refuses a store reset behind what it issued. Many processes on one host
///   can't share it, so an embedded allocator keeps none unless asked
///   ([`Segments::from_config_with_floors`]; one process per data directory).
/// - **Close.** [`Segments::close`] stops the preloader and closes the store;
///   idempotent; later calls fail with `closed`. Dropping closes it.
#[derive(Debug)]
pub struct Segments {
    config: Box<Config>,
    floors: bool,
    /// The allocator and the close, shared with the process's table of
    /// what is open ([`crate::close_all`]).
    state: Arc<State>,
}

/// What a close touches: [`crate::close_all`] reaches it through the
/// process's table.
#[derive(Debug)]
struct State {
    live: ArcSwapOption<ProcessBound<Live>>,
    reopen: Mutex<Reopen>,
}

impl open::Close for State {
    fn close(&self) {
        let mut reopen = lock(&self.reopen);
        reopen.closed = true;
        if let Some(live) = self.live.swap(None)
            && live.is_current()
        {
            lock(&live.preloader).take();
        }
    }
}

#[derive(Debug)]
struct Live {
    /// `Some` until dropped, inside the runtime's context (see the drop).
    allocator: Option<SegmentAllocator>,
    /// Dropped before the runtime: it aborts the preloader task.
    preloader: Mutex<Option<PreloaderGuard>>,
    runtime: Runtime,
}

impl Live {
    fn allocator(&self) -> &SegmentAllocator {
        match &self.allocator {
            Some(a) => a,
            None => unreachable!("the allocator is taken only by the drop"),
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // The store's connection pool hands its connections back with tasks:
        // dropped where the runtime is the current one.
        let _context = self.runtime.enter();
        lock(&self.preloader).take();
        self.allocator.take();
    }
}

#[derive(Debug, Default)]
struct Reopen {
    closed: bool,
}

impl Segments {
    /// The allocator on the store of the `[segment]` section of the config
    /// file at `path` (then the `IDMINT_…` environment variables over it):
    /// connects (migrating idmint's own table), creates the keys declared in
    /// `[segment.keys]` that the store lacks, and starts the preloader.
    ///
    /// # Errors
    /// `invalid_config` for a config `idmint serve` would refuse; the
    /// store's codes when it can't be opened (`store_error`,
    /// `store_timeout`, ...).
    pub fn from_config(path: impl AsRef<Path>) -> Result<Segments, Error> {
        Segments::from_checked(load_config(Some(path.as_ref()))?, false)
    }

    /// As [`Segments::from_config`], with the server's floor file in
    /// `server.data_dir` (locked: one process per data directory).
    ///
    /// # Errors
    /// As [`Segments::from_config`]; `floor_file_error` when another process
    /// holds the directory, `store_reset` or `key_below_floor` when the store
    /// forgot what this directory's process issued.
    pub fn from_config_with_floors(path: impl AsRef<Path>) -> Result<Segments, Error> {
        Segments::from_checked(load_config(Some(path.as_ref()))?, true)
    }

    /// [`Segments::from_config`], or with `floors`
    /// [`Segments::from_config_with_floors`]: the one choice every binding's
    /// `floors` option makes.
    ///
    /// # Errors
    /// As [`Segments::from_config`].
    pub fn from_config_floors(path: impl AsRef<Path>, floors: bool) -> Result<Segments, Error> {
        Segments::from_checked(load_config(Some(path.as_ref()))?, floors)
    }

    /// As [`Segments::from_config`] (`floors` as
    /// [`Segments::from_config_with_floors`]), from a config already loaded
    /// (checked again here as `idmint serve` checks it).
    ///
    /// # Errors
    /// As [`Segments::from_config`].
    pub fn open(config: Config, floors: bool) -> Result<Segments, Error> {
        idmint_node::check(&config)?;
        Segments::from_checked(config, floors)
    }

    /// From a config [`idmint_node::check`] passed.
    fn from_checked(config: Config, floors: bool) -> Result<Segments, Error> {
        let live = open(&config, floors)?;
        Ok(Segments {
            config: Box::new(config),
            floors,
            state: {
                let state = Arc::new(State {
                    live: ArcSwapOption::from_pointee(ProcessBound::new(live)),
                    reopen: Mutex::new(Reopen::default()),
                });
                open::track(&state);
                state
            },
        })
    }

    /// The next ID of `key`.
    ///
    /// # Errors
    /// `invalid_key`, `key_not_found`, `unavailable` (store down, buffers
    /// empty, with a retry hint), `key_exhausted`, `store_went_backwards`,
    /// `closed`.
    pub fn next_id(&self, key: &str) -> Result<u64, Error> {
        let live = self.live()?;
        Ok(live.runtime.run(live.allocator().next_id(key))?.get())
    }

    /// The next ID of `key` if it is in the buffer: `None` when getting one
    /// would wait for the store ([`Segments::next_id`] waits). For callers
    /// that must give something up before they block (Python's GIL).
    ///
    /// # Errors
    /// As [`Segments::next_id`]; `None` rather than a reopen after a fork.
    pub fn try_next_id(&self, key: &str) -> Result<Option<u64>, Error> {
        let guard = self.state.live.load();
        let Some(live) = guard.as_deref().filter(|l| l.is_current()) else {
            return if lock(&self.state.reopen).closed {
                Err(Error::closed("segment allocator"))
            } else {
                Ok(None)
            };
        };
        // The buffer alone: a lease started here and dropped would lose its
        // segment (allocator.rs, `SegmentAllocator::try_next_id`).
        Ok(live.allocator().try_next_id(key).map(|id| id.get()))
    }

    /// `n` IDs of `key` in increasing order, spanning ranges as needed.
    ///
    /// # Errors
    /// `invalid_count` for 0 or more than [`Segments::max_count`] (the
    /// config's `server.max_count`, default [`Segments::default_max_count`]);
    /// else as [`Segments::next_id`].
    pub fn next_ids(&self, key: &str, n: u64) -> Result<Vec<u64>, Error> {
        let live = self.live()?;
        let batch = live.runtime.run(live.allocator().next_ids(key, n))?;
        Ok(batch.iter().map(|id| id.get()).collect())
    }

    /// `n` as the length of a batch [`Segments::next_ids`] would take: the
    /// one check of a count every binding makes before it sets anything
    /// aside, whatever integer type its language has.
    ///
    /// # Errors
    /// `invalid_count` unless `n` is 1 to [`Segments::max_count`], naming
    /// `n`.
    pub fn check_count(&self, n: impl Into<i128>) -> Result<usize, Error> {
        count::check(n, self.max_count())
    }

    /// The most IDs one [`Segments::next_ids`] call takes: the config's
    /// `server.max_count`, as the server's requests.
    pub fn max_count(&self) -> u64 {
        self.config.server.max_count
    }

    /// `server.max_count` when the config doesn't set it (100,000): the
    /// server's own default, which every binding states and exposes as is.
    pub fn default_max_count() -> u64 {
        ServerConfig::default().max_count
    }

    /// Stops the preloader and closes the store. Idempotent; later calls
    /// fail with `closed`.
    pub fn close(&self) {
        open::Close::close(&*self.state);
    }

    /// The allocator of this process: the current one, or after a fork the
    /// child's own, opened now.
    fn live(&self) -> Result<Arc<ProcessBound<Live>>, Error> {
        if let Some(live) = self.state.live.load_full().filter(|l| l.is_current()) {
            return Ok(live);
        }
        self.reopen()
    }

    #[cold]
    fn reopen(&self) -> Result<Arc<ProcessBound<Live>>, Error> {
        let reopen = lock(&self.state.reopen);
        if reopen.closed {
            return Err(Error::closed("segment allocator"));
        }
        if let Some(live) = self.state.live.load_full().filter(|l| l.is_current()) {
            return Ok(live);
        }
        let live = Arc::new(ProcessBound::new(open(&self.config, self.floors)?));
        // The parent's allocator is leaked by its ProcessBound.
        self.state.live.store(Some(live.clone()));
        drop(reopen);
        Ok(live)
    }
}

impl Drop for Segments {
    fn drop(&mut self) {
        self.close();
    }
}

/// Opens the allocator as `idmint serve`'s start does
/// (`start.rs::start_segments`), on a new runtime, and starts its preloader.
///
/// The data directory is made only for the default store, SQLite in it
/// (`Config::segment_url`), whose file SQLite creates but not its folder;
/// the floor file makes it itself, and any other store needs none.
fn open(config: &Config, floors: bool) -> Result<Live, Error> {
    if config.segment.url.is_none() {
        create_data_dir(config)?;
    }
    let runtime = Runtime::start()?;
    let allocator = runtime.block_on(async {
        let allocator = open_segment_allocator(config, floors).await?;
        prepare_segments(config, &allocator).await?;
        Ok::<_, Error>(allocator)
    })?;
    let preloader = {
        let _context = runtime.enter();
        allocator.spawn_preloader()
    };
    Ok(Live {
        allocator: Some(allocator),
        preloader: Mutex::new(Some(preloader)),
        runtime,
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
