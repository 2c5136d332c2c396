//! [`RedisCounter`]: `INCRBY` counters with a per-node offset and step.

use std::borrow::Cow;
use std::time::Duration;

use idmint_core::{Id, IdRun};
use redis::Script;

use super::{
    DEFAULT_KEY_PREFIX, DEFAULT_TIMEOUT, RedisConnection, bad_reply, check_count, check_key_prefix,
    check_timeout,
};
use crate::error::{Result, SegmentError};
use crate::store::validate_key;

/// KEYS[1]: the node's counter. ARGV[1]: the increment (step × count);
/// ARGV[2]: the value a missing key starts at (the node's first ID minus the
/// step). Returns `{1, '', new value}` or `{0, Redis's error, value now}`.
const COUNTER_LUA: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2])
end
local r = redis.pcall('INCRBY', KEYS[1], ARGV[1])
if type(r) == 'table' and r.err then
  return {0, r.err, redis.call('GET', KEYS[1]) or ''}
end
return {1, '', redis.call('GET', KEYS[1])}
";

/// Configuration of a [`RedisCounter`]: which node of how many, plus the key
/// prefix and timeout (builder-lite: [`RedisCounterConfig::new`] plus `with_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisCounterConfig {
    node: u32,
    nodes: u32,
    key_prefix: Cow<'static, str>,
    timeout: Duration,
}

impl RedisCounterConfig {
    /// Node `node` of `nodes`: it issues `node, node + nodes, ...` (node 0
    /// starts at `nodes`). One node alone is `new(0, 1)`: `1, 2, 3, ...`.
    ///
    /// Checked when the counter is made: `nodes >= 1` and `node < nodes`.
    pub const fn new(node: u32, nodes: u32) -> RedisCounterConfig {
        RedisCounterConfig {
            node,
            nodes,
            key_prefix: Cow::Borrowed(DEFAULT_KEY_PREFIX),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Keys go under `prefix` (default [`DEFAULT_KEY_PREFIX`]).
    #[must_use]
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> RedisCounterConfig {
        self.key_prefix = Cow::Owned(prefix.into());
        self
    }

    /// How long each call may take before it fails with
    /// [`SegmentError::Timeout`] (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> RedisCounterConfig {
        self.timeout = timeout;
        self
    }

    /// This node's number, the offset of its IDs.
    pub const fn node(&self) -> u32 {
        self.node
    }

    /// The number of nodes, the step between one node's IDs.
    pub const fn nodes(&self) -> u32 {
        self.nodes
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The timeout of each call.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The node's first ID: its offset, or the step for node 0.
    const fn first_id(&self) -> u64 {
        if self.node == 0 {
            self.nodes as u64
        } else {
            self.node as u64
        }
    }

    fn validate(&self) -> Result<()> {
        if self.nodes == 0 {
            return Err(SegmentError::InvalidSpec {
                field: "nodes",
                reason: "0 nodes; a counter needs at least 1".to_owned(),
            });
        }
        if self.node >= self.nodes {
            return Err(SegmentError::InvalidSpec {
                field: "node",
                reason: format!(
                    "{} is not below the number of nodes {}",
                    self.node, self.nodes
                ),
            });
        }
        check_key_prefix(&self.key_prefix)?;
        check_timeout(self.timeout)
    }
}

/// IDs from Redis `INCRBY` counters, one counter per key and node.
///
/// - **Unique** across nodes: node `i` of `N` issues only IDs `≡ i (mod N)`
///   (node 0: multiples of `N`), so nodes never collide, on one Redis or on `N`.
///   Within a node, every ID comes from one atomic `INCRBY`, so clients sharing
///   the node (tasks, processes) never get the same ID.
/// - **Strictly increasing** per key and node, in the order Redis runs the
///   calls; a batch is one run `first, first + N, ...`. Nothing orders one
///   node's IDs against another's.
/// - **Never 0 or negative**: a node's first ID is its offset (node 0: `N`).
///   Past 2^63 − 1 it fails with [`SegmentError::Exhausted`].
/// - **Redis down or slow**: the call fails with [`SegmentError::Timeout`] or
///   [`SegmentError::Backend`] and issues nothing; the connection is opened
///   again on a later call.
/// - **Clocks** play no part.
/// - **Durability** is Redis's: a Redis that loses recent writes (restart
///   without persistence, failover to a lagging replica) issues those IDs again.
/// - **Thread-safe**: share it behind an `Arc` or clone the connection.
///
/// Node `i` of `N` issues `i, i + N, i + 2N, ...` (node 0 starts at `N`: 0 is
/// never an ID), so the IDs of different nodes fall in different residue
/// classes modulo `N` and can never collide, whether the nodes use `N` Redis
/// servers or one. The counter key `{prefix}counter:{key}:{i}` holds the last
/// ID the node issued for the key.
///
/// # The script, and why it is atomic
///
/// `COUNTER_LUA` creates a missing key at "first ID minus the step" and then
/// `INCRBY`s it in the same script, so no other client can see or move the key
/// between the creation and the first increment. The increment itself is
/// Redis's exact 64-bit `INCRBY`; its overflow error is caught in the script and
/// reported as [`SegmentError::Exhausted`], and the new value is read back as a
/// string (a Lua number would round values above 2^53).
///
/// # Examples
///
/// ```no_run
/// use idmint_segment::redis::{RedisCounter, RedisCounterConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// // Node 1 of 3: IDs 1, 4, 7, ...
/// let counter = RedisCounter::connect("redis://127.0.0.1:6379/", RedisCounterConfig::new(1, 3)).await?;
/// let id = counter.next_id("order").await?;
/// assert_eq!(id.get() % 3, 1);
/// let run = counter.next_ids("order", 100).await?;
/// assert_eq!(run.stride(), 3);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedisCounter {
    conn: RedisConnection,
    config: RedisCounterConfig,
    script: Script,
}

impl RedisCounter {
    /// A counter on `conn`. Does no I/O.
    ///
    /// # Errors
    /// [`SegmentError::InvalidSpec`] for a node not below the number of nodes
    /// or zero nodes, [`SegmentError::Config`] for a bad key prefix or timeout.
    pub fn new(conn: RedisConnection, config: RedisCounterConfig) -> Result<RedisCounter> {
        config.validate()?;
        Ok(RedisCounter {
            conn,
            config,
            script: Script::new(COUNTER_LUA),
        })
    }

    /// Connects to `url` (within the config's timeout) and makes a counter.
    ///
    /// # Errors
    /// Those of [`RedisConnection::connect`] and [`RedisCounter::new`].
    pub async fn connect(url: &str, config: RedisCounterConfig) -> Result<RedisCounter> {
        config.validate()?;
        let conn = RedisConnection::connect(url, config.timeout).await?;
        RedisCounter::new(conn, config)
    }

    /// The configuration.
    pub fn config(&self) -> &RedisCounterConfig {
        &self.config
    }

    /// The Redis key holding this node's last ID for `key`.
    pub fn redis_key(&self, key: &str) -> String {
        format!(
            "{}counter:{key}:{}",
            self.config.key_prefix, self.config.node
        )
    }

    /// The next ID for `key`.
    ///
    /// # Errors
    /// [`SegmentError::InvalidKey`] for a bad key name, [`SegmentError::Exhausted`]
    /// past 2^63 − 1, [`SegmentError::Timeout`] and [`SegmentError::Backend`]
    /// when Redis fails (or the key holds something this node did not write).
    pub async fn next_id(&self, key: &str) -> Result<Id> {
        Ok(self.next_ids(key, 1).await?.first())
    }

    /// The next `n_ids` IDs for `key`, reserved with one `INCRBY` and returned
    /// as one run with stride `N` (the number of nodes).
    ///
    /// # Errors
    /// Those of [`RedisCounter::next_id`], and [`SegmentError::InvalidCount`]
    /// for 0 or more than [`MAX_IDS_PER_CALL`](super::MAX_IDS_PER_CALL).
    pub async fn next_ids(&self, key: &str, n_ids: u64) -> Result<IdRun> {
        validate_key(key)?;
        check_count(n_ids)?;
        let step = u64::from(self.config.nodes);
        // At most 2^32 × 10^6 < 2^53: no overflow.
        let increment = step * n_ids;
        let first_id = self.config.first_id();
        // May be negative (node 1 of 2 starts at -1): Redis integers are signed.
        let initial = first_id as i64 - step as i64;
        let redis_key = self.redis_key(key);
        let (ok, error, value): (i64, String, String) = self
            .conn
            .call("counter increment", self.config.timeout, |mut conn| {
                let mut invocation = self.script.prepare_invoke();
                invocation.key(&redis_key).arg(increment).arg(initial);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        if ok != 1 {
            if error.contains("overflow") {
                return Err(SegmentError::Exhausted {
                    key: key.to_owned(),
                    max_id: value.parse().unwrap_or(crate::MAX_ID),
                    step: increment,
                });
            }
            return Err(bad_reply(
                "counter increment",
                format!("key {redis_key}: {error}"),
            ));
        }
        let last: i64 = value.parse().map_err(|_| {
            bad_reply(
                "counter increment",
                format!("key {redis_key} holds {value:?}, not an integer"),
            )
        })?;
        // The key must hold an ID of this node: at least its first ID and in
        // its residue class. Anything else means another configuration (a
        // different node count, a hand edit) wrote it; refuse rather than
        // issue IDs that may belong to another node.
        let span = step * (n_ids - 1);
        let own = u64::try_from(last)
            .ok()
            .filter(|&last| last >= first_id + span && (last - first_id) % step == 0);
        let Some(last) = own else {
            return Err(bad_reply(
                "counter increment",
                format!(
                    "key {redis_key} holds {last}, not an ID of node {} of {}; was it written \
                     with another node count?",
                    self.config.node, self.config.nodes
                ),
            ));
        };
        let first = Id::new(last - span)?;
        Ok(IdRun::try_new(first, n_ids, step)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_checked() {
        assert!(RedisCounterConfig::new(0, 1).validate().is_ok());
        assert!(RedisCounterConfig::new(3, 4).validate().is_ok());
        let err = RedisCounterConfig::new(4, 4).validate().unwrap_err();
        assert!(matches!(
            err,
            SegmentError::InvalidSpec { field: "node", .. }
        ));
        let err = RedisCounterConfig::new(0, 0).validate().unwrap_err();
        assert!(matches!(
            err,
            SegmentError::InvalidSpec { field: "nodes", .. }
        ));
        assert!(
            RedisCounterConfig::new(0, 1)
                .with_timeout(Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(
            RedisCounterConfig::new(0, 1)
                .with_key_prefix("")
                .validate()
                .is_err()
        );
    }

    #[test]
    fn first_ids_are_never_zero() {
        assert_eq!(RedisCounterConfig::new(0, 1).first_id(), 1);
        assert_eq!(RedisCounterConfig::new(0, 4).first_id(), 4);
        assert_eq!(RedisCounterConfig::new(3, 4).first_id(), 3);
    }
}
