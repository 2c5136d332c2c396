//! The Redis strategies and the Redis segment store.
//!
//! - [`RedisCounter`]: `INCRBY` counters with a per-node offset and step (node
//!   `i` of `N` issues `i, i + N, i + 2N, ...`), the "Redis cluster counter"
//!   pattern made collision-free by construction.
//! - [`RedisSegmentStore`]: a [`SegmentStore`](crate::SegmentStore) keeping
//!   each key in a Redis hash, for the segment allocator.
//! - [`RedisSnowflake`]: a snowflake computed inside Redis: one Lua script reads
//!   Redis's `TIME`, counts the tick's sequence with a per-(node, tick) key and
//!   composes the ID with an [`idmint_core::Layout`].
//! - [`DailySerial`]: serials like `ORD20261121000042` from a per-day key, the
//!   day taken from Redis's `TIME` in the same script as the increment.
//!
//! All of them share one [`RedisConnection`] (which reconnects by itself
//! after a lost connection, and follows a Sentinel or Cluster failover) and
//! bound every call with their configured timeout: a call that does not finish
//! in time fails with [`SegmentError::Timeout`] (`store: "redis"`), one that
//! Redis refuses or a connection that fails with [`SegmentError::Backend`].
//! Nothing is ever answered with a sentinel ID.
//!
//! # Keys
//!
//! Every key lives under a key prefix (default [`DEFAULT_KEY_PREFIX`],
//! `idmint:`), so tests and tenants can share a Redis:
//!
//! | strategy | keys |
//! |---|---|
//! | counter | `{prefix}counter:{key}:{node}`: the last ID node `node` issued for `key`; `{prefix}counter:epoch`: the counters' epoch marker |
//! | segment store | `{prefix}segment:{key}`: a hash (`max_id`, `step`, `delta`, `remainder`, `description`, `updated`); `{prefix}segments`: the set of key names; `{prefix}segments:epoch`: the store's epoch marker |
//! | snowflake | `{prefix}snowflake:{node}:last`: the last tick the node issued in (never expires); `{prefix}snowflake:{node}:tick:{tick}`: the tick's sequence counter (expires a second after the tick) |
//! | daily serial | `{prefix}serial:{key}:{YYYYMMDD}`: the day's counter (expires after the configured TTL); `{prefix}serial:epoch`: the serials' epoch marker |
//!
//! # Scripts, and why each is atomic
//!
//! Redis runs a Lua script alone: no other command runs between its reads and
//! its writes. Every script here does its check and its write in one script,
//! so two clients (in one process or many) can never both pass a check and
//! then both write. Each module documents its script. Lua numbers are doubles,
//! so scripts never do arithmetic on values that may pass 2^53: 64-bit
//! increments are left to `INCRBY`/`HINCRBY`, results are read back as strings,
//! and the snowflake composes its ID as two exact 32-bit halves.
//!
//! # Requirements and limits
//!
//! - **Redis 5 or later.** The snowflake and daily-serial scripts read `TIME`
//!   and then write, which needs script effects replication (the default since
//!   Redis 5; the scripts ask for it on older servers).
//! - **IDs are as durable as Redis.** Counters, segment rows, the snowflake's
//!   last tick and the serials' day counters are the only record in Redis of
//!   what was issued: run Redis with `appendonly yes` and `appendfsync
//!   always` on a single primary where duplicates must never happen. A Redis
//!   that forgets anyway (restarted without persistence, failed over to a
//!   replica that missed the last writes) is detected where the client can
//!   tell: each store and strategy keeps an epoch marker beside its keys,
//!   written once, and the segment allocator (with its floor file), the
//!   counter and the daily serial (with what they remember) refuse a Redis
//!   whose marker is gone or whose counters fell below what they handed out
//!   ([`SegmentError::StoreReset`], [`SegmentError::KeyBelowFloor`]), instead
//!   of counting again from the start. A client with no memory (a new
//!   process that was handed none) can't tell.
//! - **Sentinel and Cluster.** [`RedisConnection::open`] takes an
//!   `idmint_redis::RedisTarget`: the primary Redis Sentinel names (asked
//!   again after a failover) or a Redis Cluster. On a Cluster each strategy
//!   requires its key prefix to hold a hash tag (`idmint:{orders}:`): every
//!   key a script touches then shares one slot, and the snowflake and serial
//!   scripts, which build key names from the time they read, declare one key
//!   of that slot so the cluster runs them on its master.
//! - **Failovers.** The segment store uses a leased segment only once a
//!   replica acknowledged it (`WAIT`, see [`RedisStoreConfig::with_replicas`]),
//!   so a failover promotes a replica that holds every segment whose IDs
//!   were issued. The counters, serials and Redis-side snowflake don't wait
//!   (one round trip per ID would double their cost): a failover to a
//!   replica that missed their last writes is caught like any Redis that
//!   forgot, by the epoch markers and what each client remembers, and a
//!   client with no memory can't tell.

mod conn;
mod counter;
mod serial;
mod snowflake;
mod store;

use std::time::Duration;

pub use conn::RedisConnection;
pub use counter::{RedisCounter, RedisCounterConfig};
pub use idmint_redis::{ClusterTarget, RedisTarget, SentinelTarget};
pub use serial::{DailySerial, DailySerialConfig, Serial, SerialBatch, SerialMemory};
pub use snowflake::{RedisSnowflake, RedisSnowflakeConfig};
pub use store::{RedisSegmentStore, RedisStoreConfig};

use crate::error::{Result, SegmentError};

/// The store kind, as in errors and logs.
const KIND: &str = "redis";

/// The key prefix every configuration uses unless set.
pub const DEFAULT_KEY_PREFIX: &str = "idmint:";

/// The timeout of each Redis call every configuration uses unless set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// The most IDs (or serials) one batch call returns.
pub const MAX_IDS_PER_CALL: u64 = 1_000_000;

/// The longest key prefix.
const MAX_KEY_PREFIX_LEN: usize = 128;

/// Checks a key prefix: 1 to 128 bytes of printable ASCII without spaces.
fn check_key_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.len() > MAX_KEY_PREFIX_LEN {
        return Err(SegmentError::Config(format!(
            "redis key prefix {prefix:?} must be 1 to {MAX_KEY_PREFIX_LEN} bytes"
        )));
    }
    if let Some(c) = prefix.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(SegmentError::Config(format!(
            "redis key prefix {prefix:?} contains {c:?}; use printable ASCII without spaces"
        )));
    }
    Ok(())
}

/// Checks a call timeout: above zero.
fn check_timeout(timeout: Duration) -> Result<()> {
    if timeout.is_zero() {
        return Err(SegmentError::Config("redis timeout is zero".to_owned()));
    }
    Ok(())
}

/// Checks a batch size: `1..=MAX_IDS_PER_CALL`.
fn check_count(n_ids: u64) -> Result<()> {
    if n_ids == 0 || n_ids > MAX_IDS_PER_CALL {
        return Err(SegmentError::InvalidCount {
            count: n_ids,
            max: MAX_IDS_PER_CALL,
        });
    }
    Ok(())
}

/// A [`SegmentError::Backend`] for an answer from Redis that makes no sense
/// (a script's reply of the wrong shape, a key holding something else).
fn bad_reply(operation: &'static str, message: String) -> SegmentError {
    SegmentError::Backend {
        store: KIND,
        operation,
        message,
    }
}

/// Whole milliseconds of `d`, at least 1.
fn millis_at_least_one(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_prefixes_are_checked() {
        assert!(check_key_prefix("idmint:").is_ok());
        assert!(check_key_prefix("t:{abc}:").is_ok());
        assert!(check_key_prefix("").is_err());
        assert!(check_key_prefix("a b").is_err());
        assert!(check_key_prefix(&"x".repeat(129)).is_err());
    }

    #[test]
    fn counts_are_checked() {
        assert!(check_count(1).is_ok());
        assert!(check_count(MAX_IDS_PER_CALL).is_ok());
        assert_eq!(check_count(0).unwrap_err().code(), "invalid_count");
        assert!(check_count(MAX_IDS_PER_CALL + 1).is_err());
    }
}
