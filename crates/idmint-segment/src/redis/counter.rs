//! [`RedisCounter`]: `INCRBY` counters with a per-node offset and step.

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::Duration;

use idmint_core::{Id, IdRun};
use redis::Script;

use super::{
    DEFAULT_KEY_PREFIX, DEFAULT_TIMEOUT, KIND, RedisConnection, bad_reply, check_count,
    check_key_prefix, check_timeout,
};
use crate::error::{Result, SegmentError};
use crate::floor::FloorRecord;
use crate::store::StoreEpoch;
use crate::store::{BELOW_LUA, validate_key};

/// KEYS[1]: the node's counter; KEYS[2]: the counters' epoch marker.
/// ARGV[1]: the increment (step × count); ARGV[2]: the value a missing key
/// starts at (the node's first ID minus the step); ARGV[3]: the epoch this
/// node remembers ('' none); ARGV[4]: the epoch to write when there is none
/// and none is remembered; ARGV[5]: the highest ID this node returned for the
/// key ('' none).
/// Returns `{1, '', new value, epoch}`, `{0, Redis's error, value now,
/// epoch}`, `{2, the epoch found or ''}` (reset: nothing changed) or `{3, '',
/// the counter or '', epoch}` (below the highest ID returned: nothing
/// changed).
const COUNTER_LUA: &str = r"
local epoch = redis.call('GET', KEYS[2])
if ARGV[3] ~= '' then
  if epoch ~= ARGV[3] then
    return {2, epoch or '', '', ''}
  end
elseif not epoch then
  if ARGV[5] ~= '' then
    return {2, '', '', ''}
  end
  redis.call('SET', KEYS[2], ARGV[4])
  epoch = ARGV[4]
end
local now = redis.call('GET', KEYS[1])
if ARGV[5] ~= '' and ((not now) or below(now, ARGV[5])) then
  return {3, '', now or '', epoch}
end
if not now then
  redis.call('SET', KEYS[1], ARGV[2])
end
local r = redis.pcall('INCRBY', KEYS[1], ARGV[1])
if type(r) == 'table' and r.err then
  return {0, r.err, redis.call('GET', KEYS[1]) or '', epoch}
end
return {1, '', redis.call('GET', KEYS[1]), epoch}
";

/// KEYS[1]: the node's counter; KEYS[2]: the counters' epoch marker.
/// ARGV[1]: the value to raise the counter to; ARGV[2]: the epoch to write
/// when there is none. Returns the epoch in place.
const RAISE_LUA: &str = r"
local now = redis.call('GET', KEYS[1])
if (not now) or below(now, ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('SETNX', KEYS[2], ARGV[2])
return redis.call('GET', KEYS[2])
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
/// - **Durability** is Redis's, watched: a Redis that loses recent writes
///   (restart without persistence, failover to a lagging replica) would issue
///   those IDs again. The counter refuses instead when it can tell: it
///   remembers the counters' epoch marker (`{prefix}counter:epoch`, written
///   by the first counter to use the prefix) and, per key, the highest ID it
///   returned; a marker that is gone or different fails with
///   [`SegmentError::StoreReset`], a counter below what it returned with
///   [`SegmentError::KeyBelowFloor`], and nothing is changed. That memory
///   lives in the process; hand it over across restarts with
///   [`RedisCounter::memory`] and [`RedisCounter::with_memory`] (a new
///   process with no memory can't tell). [`RedisCounter::raise`] is the way
///   back.
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
/// `COUNTER_LUA` checks the epoch marker (writing it when the prefix has none
/// and this counter remembers nothing) and the node's counter against the
/// highest ID this counter returned, creates a missing key at "first ID minus
/// the step" and then `INCRBY`s it, all in one script, so no other client can
/// see or move the key between the checks, the creation and the increment.
/// The increment itself is Redis's exact 64-bit `INCRBY`; its overflow error
/// is caught in the script and reported as [`SegmentError::Exhausted`], and
/// the new value is read back as a string (a Lua number would round values
/// above 2^53; the comparison is on text, `BELOW_LUA`). The script touches the
/// counter and the marker: on Redis Cluster give the prefix a hash tag
/// (`{ids}:`) so both are in one slot.
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
    raise_script: Script,
    /// The marker seen, and per key the highest ID returned plus one.
    memory: Mutex<FloorRecord>,
}

impl RedisCounter {
    /// A counter on `conn`. Does no I/O.
    ///
    /// # Errors
    /// [`SegmentError::InvalidSpec`] for a node not below the number of nodes
    /// or zero nodes, [`SegmentError::Config`] for a bad key prefix or timeout.
    pub fn new(conn: RedisConnection, config: RedisCounterConfig) -> Result<RedisCounter> {
        config.validate()?;
        conn.check_prefix(&config.key_prefix)?;
        Ok(RedisCounter {
            conn,
            config,
            script: Script::new(&format!("{BELOW_LUA}{COUNTER_LUA}")),
            raise_script: Script::new(&format!("{BELOW_LUA}{RAISE_LUA}")),
            memory: Mutex::new(FloorRecord::default()),
        })
    }

    /// Starts from what an earlier run of this node remembered (its
    /// [`RedisCounter::memory`]): the counters' epoch marker, and per key a
    /// floor every ID it returned is below. The counter then refuses a Redis
    /// that lost the marker or holds a counter below a floor.
    #[must_use]
    pub fn with_memory(self, memory: FloorRecord) -> RedisCounter {
        *self.remembered() = memory;
        self
    }

    /// What this counter remembers: the epoch marker it saw and, per key, a
    /// floor every ID it returned is below (the highest plus one). Keep it
    /// across restarts (a file, a database) and hand it to the next run with
    /// [`RedisCounter::with_memory`].
    pub fn memory(&self) -> FloorRecord {
        self.remembered().clone()
    }

    /// The Redis key holding the counters' epoch marker (a counter is
    /// `counter:{key}:{node}`, so never `counter:epoch`).
    pub fn epoch_key(&self) -> String {
        format!("{}counter:epoch", self.config.key_prefix)
    }

    /// The way back after Redis forgot: raises this node's counter for `key`
    /// so its next ID is above `above` and above every ID this counter
    /// returned (never lowers it), writes an epoch marker when the prefix has
    /// none, and adopts the marker in place. Other nodes' counters are theirs
    /// to raise.
    ///
    /// # Errors
    /// [`SegmentError::InvalidKey`] for a bad key name,
    /// [`SegmentError::InvalidSpec`] for `above` at or past 2^63 − 1, and
    /// [`SegmentError::Timeout`] and [`SegmentError::Backend`] when Redis
    /// fails.
    pub async fn raise(&self, key: &str, above: u64) -> Result<()> {
        validate_key(key)?;
        if above >= crate::MAX_ID {
            return Err(SegmentError::InvalidSpec {
                field: "above",
                reason: format!("{above} leaves no ID above it"),
            });
        }
        let step = u64::from(self.config.nodes);
        let first_id = self.config.first_id();
        let highest = self
            .remembered()
            .floor(key)
            .map_or(0, |f| f.saturating_sub(1));
        let target = above.max(highest);
        // The largest ID of this node at or below the target: its next ID is
        // the first one above.
        let value = if target < first_id {
            first_id as i64 - step as i64
        } else {
            (first_id + (target - first_id) / step * step) as i64
        };
        let (redis_key, epoch_key) = (self.redis_key(key), self.epoch_key());
        let fresh = StoreEpoch::generate();
        let epoch: String = self
            .conn
            .call("counter raise", self.config.timeout, |mut conn| {
                let mut invocation = self.raise_script.prepare_invoke();
                invocation
                    .key(&redis_key)
                    .key(&epoch_key)
                    .arg(value)
                    .arg(fresh.as_str());
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        let epoch = epoch.parse().map_err(|e| {
            bad_reply(
                "counter raise",
                format!("key {epoch_key} holds {epoch:?}: {e}"),
            )
        })?;
        self.remembered().epoch = Some(epoch);
        Ok(())
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, FloorRecord> {
        // No critical section can leave the record half-changed.
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
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
        let (redis_key, epoch_key) = (self.redis_key(key), self.epoch_key());
        let (expected, floor) = {
            let memory = self.remembered();
            (memory.epoch.clone(), memory.floor(key))
        };
        let expected_arg = expected.as_ref().map_or("", StoreEpoch::as_str);
        let fresh = StoreEpoch::generate();
        // The highest ID returned: the counter must be at least that.
        let highest = floor.map(|f| f.saturating_sub(1).to_string());
        let (ok, error, value, epoch): (i64, String, String, String) = self
            .conn
            .call("counter increment", self.config.timeout, |mut conn| {
                let mut invocation = self.script.prepare_invoke();
                invocation
                    .key(&redis_key)
                    .key(&epoch_key)
                    .arg(increment)
                    .arg(initial)
                    .arg(expected_arg)
                    .arg(fresh.as_str())
                    .arg(highest.as_deref().unwrap_or(""));
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        match ok {
            2 => {
                return Err(SegmentError::StoreReset {
                    store: KIND,
                    remembered: expected.map(|e| e.to_string()),
                    found: (!error.is_empty()).then_some(error),
                    floors: self.remembered().floor_list(),
                });
            }
            3 => {
                return Err(SegmentError::KeyBelowFloor {
                    store: KIND,
                    key: key.to_owned(),
                    floor: floor.unwrap_or(0),
                    found: value.parse::<u64>().ok().and_then(|v| v.checked_add(step)),
                });
            }
            _ => {}
        }
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
            .filter(|&last| last >= first_id + span && (last - first_id).is_multiple_of(step));
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
        let run = IdRun::try_new(first, n_ids, step)?;
        let mut memory = self.remembered();
        memory.raise(key, last.saturating_add(1));
        if memory.epoch.is_none() {
            memory.epoch = epoch.parse().ok();
        }
        Ok(run)
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
