//! What the keeper and the backends share: the generator's words and what the
//! keeper publishes about its claim, all atomics in one `#[repr(C)]` struct in
//! PostgreSQL's shared memory (no pointers: each process maps it anywhere).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use idmint_core::SnowflakeWords;
use idmint_node::ERROR_CODES;
use pgrx::{PGRXSharedMemory, PgAtomic};

/// The cluster's one copy, set up in `_PG_init` (`pg_shmem_init!`).
// SAFETY: the name is this extension's own.
pub(crate) static SHARED: PgAtomic<Shared> = unsafe { PgAtomic::new(c"idmint shared state") };

/// `lease` values: what the keeper's claim is in.
pub(crate) const LEASE_STARTING: u64 = 0;
/// The names of the states, indexed by `lease` (the keeper's `LeaseState`
/// names, then this extension's own two).
pub(crate) const LEASE_NAMES: [&str; 7] = [
    "starting", "held", "renewing", "expired", "lost", "stopped", "failed",
];
pub(crate) const LEASE_HELD: u64 = 1;
pub(crate) const LEASE_RENEWING: u64 = 2;
pub(crate) const LEASE_EXPIRED: u64 = 3;
pub(crate) const LEASE_LOST: u64 = 4;
pub(crate) const LEASE_STOPPED: u64 = 5;
/// The keeper could not start (its error code in `error`); it tries again.
pub(crate) const LEASE_FAILED: u64 = 6;

/// "No time": a mark not set.
pub(crate) const NO_TIME: i64 = i64::MIN;

/// The shared state. Written by the keeper only, except `words`, which every
/// backend's generator moves.
#[repr(C)]
pub(crate) struct Shared {
    /// The generator's state word and mark end.
    pub(crate) words: SnowflakeWords,
    /// 0 until the keeper published a first persisted mark; then how many
    /// generators the keeper built (a re-claim makes a new one, possibly for
    /// another worker ID). A backend that issued while this changed retries.
    pub(crate) generation: AtomicU64,
    /// `(datacenter << 32) | worker` of the current generation.
    pub(crate) node: AtomicU64,
    /// One of the `LEASE_*` states.
    pub(crate) lease: AtomicU64,
    /// What the lease has left, in milliseconds (-1: no lease).
    pub(crate) lease_left_ms: AtomicI64,
    /// The last persisted mark, unix milliseconds (`NO_TIME`: none).
    pub(crate) persisted_ms: AtomicI64,
    /// The last failure's stable code, as [`code_index`] stores it (0: none).
    pub(crate) error: AtomicU64,
    /// The registry's kind, an index into `REGISTRIES`.
    pub(crate) registry: AtomicU64,
}

// SAFETY: atomics and plain integers only, no pointers.
unsafe impl PGRXSharedMemory for Shared {}

/// The registry kinds `registry` indexes (`snowflake.registry`'s names).
pub(crate) const REGISTRIES: [&str; 8] = [
    "file",
    "static",
    "host",
    "k8s",
    "sql",
    "redis",
    "etcd",
    "zookeeper",
];

/// The index `error` holds for `code`: its place in idmint's one list of
/// codes (`idmint_node::ERROR_CODES`) plus one, 0 meaning none; a code
/// not listed is stored as `internal`.
pub(crate) fn code_index(code: &str) -> u64 {
    let place = |c: &str| ERROR_CODES.iter().position(|known| *known == c);
    let found = place(code).or_else(|| place("internal")).unwrap_or(0);
    found as u64 + 1
}

impl Shared {
    pub(crate) fn new() -> Shared {
        Shared {
            words: SnowflakeWords::new(),
            generation: AtomicU64::new(0),
            node: AtomicU64::new(0),
            lease: AtomicU64::new(LEASE_STARTING),
            lease_left_ms: AtomicI64::new(-1),
            persisted_ms: AtomicI64::new(NO_TIME),
            error: AtomicU64::new(0),
            registry: AtomicU64::new(0),
        }
    }

    /// The last failure's code, if any.
    pub(crate) fn error_code(&self) -> Option<&'static str> {
        match self.error.load(Ordering::Acquire) {
            0 => None,
            i => Some(
                ERROR_CODES
                    .get(i as usize - 1)
                    .copied()
                    .unwrap_or("internal"),
            ),
        }
    }
}

/// The shared state, or `None` when the library was not preloaded.
pub(crate) fn shared() -> Option<&'static Shared> {
    PRELOADED.load(Ordering::Acquire).then(|| SHARED.get())
}

/// Set by `_PG_init` when it ran from `shared_preload_libraries` (backends
/// inherit it by fork).
pub(crate) static PRELOADED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);
