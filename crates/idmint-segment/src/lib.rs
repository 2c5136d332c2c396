//! idmint's segment mode (Leaf-segment, Tinyid) and Redis strategies.
//!
//! - [`SegmentStore`]: where keys live and how a segment `[max_id − step,
//!   max_id)` is leased in one atomic step: [`sql`] (SQLite, PostgreSQL,
//!   MySQL/MariaDB, and Leaf's own `leaf_alloc` table), [`redis`], and
//!   [`MemoryStore`] for tests.
//! - [`SegmentAllocator`]: per key, a lock-free double buffer (from
//!   `idmint-core`) filled in the background, with Leaf's dynamic step, Tinyid's
//!   `delta`/`remainder`, batches that span segments, and typed errors instead
//!   of Leaf's `-1`/`-2`/`-3`.
//! - [`FloorFile`]: what a node issued from each key and the store's
//!   [`StoreEpoch`], kept in its data directory, so a store that was reset
//!   or restored from an older backup is refused instead of repeating IDs.
//! - [`redis`]: `INCRBY` counters with per-node offset and step, a Redis-side
//!   snowflake, and daily serials.

#![deny(missing_docs)]

mod allocator;
mod error;
mod floor;
mod memory;
mod recover;
pub mod redis;
pub mod sql;
mod store;
mod watch;

pub use allocator::{KeyStatus, PreloaderGuard, SegmentAllocator, SegmentConfig, SegmentKey};
pub use error::{Result, SegmentError};
pub use floor::{FLOOR_FILE_NAME, FloorFile, FloorRecord};
pub use memory::MemoryStore;
pub use recover::{Raised, StillBelow, raise_key};
pub use store::{
    KeyInfo, MAX_ID, MAX_KEY_LEN, NewKey, SegmentGrant, SegmentStore, StoreEpoch, validate_key,
};

/// The README's Rust examples, run as doctests so they can't rot (here, the
/// crate that can see both `idmint_core` and `idmint_segment`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
