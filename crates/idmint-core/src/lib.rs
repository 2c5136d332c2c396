//! idmint's core: layouts, clocks, and the snowflake, cached and UUID generators.
//!
//! This crate does no I/O and runs no async runtime. Generators take a [`Clock`]
//! and their node (worker) ID as values; whatever persists a high-water mark or
//! leases a worker ID lives in other crates and talks to generators through
//! [`Snowflake::advance_mark`] and [`SnowflakeBuilder::with_start_after`].
//!
//! - [`Layout`]: a validated split of 63 bits into time, node and sequence, with the
//!   presets of the field ([`Layout::TWITTER`], [`Layout::BAIDU`], ...), capacity
//!   facts, compose and decode, and a text form.
//! - [`Snowflake`]: the lock-free time·node·sequence generator with clock-behind,
//!   sequence-exhausted and sequence-start policies.
//! - [`Cached`]: Baidu's CachedUidGenerator, a pre-filled ring of whole ticks with
//!   a bounded lead over the clock.
//! - [`SegmentBuffer`]: the lock-free double buffer of segment mode; the
//!   leasing of segments from a store lives in `idmint-segment`.
//! - [`uuid`](mod@uuid): RFC 9562 UUIDs (v1, v3, v4, v5, v7) from the `uuid` crate.
//!
//! # Examples
//!
//! ```
//! use idmint_core::{Layout, Snowflake};
//!
//! let layout: Layout = "twitter".parse()?;
//! let generator = Snowflake::builder(layout).with_worker(3).build()?;
//! let id = generator.next_id()?;
//! assert_eq!(layout.decode(id.get())?.worker, 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod batch;
mod cached;
pub mod clock;
pub mod duration;
mod error;
mod id;
mod layout;
pub mod obfuscate;
pub mod segment;
mod snowflake;
mod sync;
pub mod uuid;

pub use batch::{IdBatch, IdRun};
pub use cached::*;
pub use clock::Clock;
pub use error::{Error, Result};
pub use id::Id;
pub use layout::{Decoded, FieldOrder, IdParts, Layout, LayoutSpec};
pub use obfuscate::{
    ObfuscationKey, Obfuscator, ObfuscatorBuilder, PublicId, PublicIdCodec, TextFormat,
};
pub use segment::{BufferPosition, BufferStatus, Reservation, SegmentBuffer, Take, TakeOne};
pub use snowflake::{
    ClockBehind, SequenceExhausted, SequenceStart, Snowflake, SnowflakeBuilder, SnowflakeStats,
    SnowflakeWords,
};
