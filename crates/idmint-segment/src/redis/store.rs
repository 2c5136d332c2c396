//! [`RedisSegmentStore`]: segment keys in Redis hashes, for the segment allocator.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jiff::Timestamp;
use redis::Script;

use super::{
    DEFAULT_KEY_PREFIX, DEFAULT_TIMEOUT, KIND, RedisConnection, bad_reply, check_key_prefix,
    check_timeout,
};
use crate::error::{Result, SegmentError};
use crate::store::StoreEpoch;
use crate::store::{BELOW_LUA, KeyInfo, MAX_ID, NewKey, SegmentGrant, SegmentStore, validate_key};

/// KEYS[1]: the key's hash. ARGV[1]: the step ('' for the key's own);
/// ARGV[2]: now, in Unix ms; ARGV[3]: the floor `max_id` must be at.
/// Returns `{0}` not found, `{1, max_id, step, delta, remainder}` leased,
/// `{2, max_id, step, error}` `HINCRBY` refused, `{3, step}` a stored step
/// below 1, `{4, max_id}` below the floor (nothing changed).
const FETCH_LUA: &str = r"
local row = redis.call('HMGET', KEYS[1], 'max_id', 'step', 'delta', 'remainder')
if not row[1] then
  return {0}
end
if below(row[1], ARGV[3]) then
  return {4, row[1]}
end
local step = ARGV[1]
if step == '' then
  step = row[2]
  if (not step) or (tonumber(step) or 0) < 1 then
    return {3, tostring(step)}
  end
end
local r = redis.pcall('HINCRBY', KEYS[1], 'max_id', step)
if type(r) == 'table' and r.err then
  return {2, row[1], step, r.err}
end
redis.call('HSET', KEYS[1], 'updated', ARGV[2])
return {1, redis.call('HGET', KEYS[1], 'max_id'), step, row[3] or '1', row[4] or '0'}
";

/// KEYS[1]: the key's hash; KEYS[2]: the index set; KEYS[3]: the ledger
/// set. ARGV: key, max_id, step, delta, remainder, description, updated
/// (Unix ms). Returns 1 created, 0 exists, 2 forgotten (the ledger or the
/// index names the key, whose hash is gone: nothing written).
const CREATE_LUA: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1
  or redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 2
end
redis.call('HSET', KEYS[1], 'max_id', ARGV[2], 'step', ARGV[3], 'delta', ARGV[4],
  'remainder', ARGV[5], 'description', ARGV[6], 'updated', ARGV[7])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
return 1
";

/// KEYS[1]: the key's hash; KEYS[2]: the index set; KEYS[3]: the ledger
/// set. ARGV: key, max_id (the start to raise to), step, delta, remainder,
/// description, updated (Unix ms). Returns `{0}` left as it was, `{1}`
/// raised, `{2}` created.
const RAISE_LUA: &str = r"
local max_id = redis.call('HGET', KEYS[1], 'max_id')
if not max_id then
  redis.call('HSET', KEYS[1], 'max_id', ARGV[2], 'step', ARGV[3], 'delta', ARGV[4],
    'remainder', ARGV[5], 'description', ARGV[6], 'updated', ARGV[7])
  redis.call('SADD', KEYS[2], ARGV[1])
  redis.call('SADD', KEYS[3], ARGV[1])
  return {2}
end
if below(max_id, ARGV[2]) then
  redis.call('HSET', KEYS[1], 'max_id', ARGV[2], 'updated', ARGV[7])
  return {1}
end
return {0}
";

/// KEYS[1]: the epoch key. ARGV[1]: the marker to write when there is none.
/// Returns the marker in place.
const INIT_EPOCH_LUA: &str = r"
if redis.call('SETNX', KEYS[1], ARGV[1]) == 1 then
  return ARGV[1]
end
return redis.call('GET', KEYS[1])
";

/// Configuration of a [`RedisSegmentStore`] (builder-lite:
/// [`RedisStoreConfig::new`] plus `with_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    key_prefix: Cow<'static, str>,
    timeout: Duration,
    replicas: Option<u32>,
}

impl RedisStoreConfig {
    /// The defaults: key prefix [`DEFAULT_KEY_PREFIX`], timeout
    /// [`DEFAULT_TIMEOUT`].
    pub const fn new() -> RedisStoreConfig {
        RedisStoreConfig {
            key_prefix: Cow::Borrowed(DEFAULT_KEY_PREFIX),
            timeout: DEFAULT_TIMEOUT,
            replicas: None,
        }
    }

    /// Keys go under `prefix`.
    #[must_use]
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> RedisStoreConfig {
        self.key_prefix = Cow::Owned(prefix.into());
        self
    }

    /// How long each call may take before it fails with
    /// [`SegmentError::Timeout`].
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> RedisStoreConfig {
        self.timeout = timeout;
        self
    }

    /// How many replicas must have acknowledged a new segment before its
    /// IDs are used (Redis `WAIT`). Unset (the default), it is 1 when the
    /// server (on a Cluster, the slot's master) has a replica connected
    /// (looked at every 10 s), else 0: a primary without replicas has
    /// nothing a failover could promote. `0` never waits: a failover to a
    /// replica that missed a segment then hands its IDs out again.
    #[must_use]
    pub const fn with_replicas(mut self, replicas: u32) -> RedisStoreConfig {
        self.replicas = Some(replicas);
        self
    }

    /// The replicas set with [`RedisStoreConfig::with_replicas`]; `None`
    /// when the store decides.
    pub const fn replicas(&self) -> Option<u32> {
        self.replicas
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The timeout of each call.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Checks the settings without connecting: the key prefix and the
    /// timeout. [`RedisSegmentStore::connect`] runs it first; a server's config
    /// check runs it before any I/O.
    ///
    /// # Errors
    /// [`SegmentError::Config`] naming the setting that can't work.
    pub fn validate(&self) -> Result<()> {
        check_key_prefix(&self.key_prefix)?;
        check_timeout(self.timeout)
    }
}

impl Default for RedisStoreConfig {
    fn default() -> RedisStoreConfig {
        RedisStoreConfig::new()
    }
}

/// A [`SegmentStore`] on Redis.
///
/// - **Atomic fetch**: each [`SegmentStore::fetch`] is one Lua script, so
///   fetches of one key from any number of clients get disjoint segments, each
///   above every one before it (in Redis's order).
/// - **Never past 2^63 − 1**: a fetch that would pass it fails with
///   [`SegmentError::Exhausted`] and changes nothing.
/// - **Redis down or slow**: calls fail with [`SegmentError::Timeout`] or
///   [`SegmentError::Backend`] within the configured timeout; the allocator
///   keeps serving from its buffers.
/// - **Clocks** play no part (`updated` is informational, from this process).
/// - **Durability** is Redis's: a Redis that loses a fetch's write (restart
///   without persistence, failover to a lagging replica) would hand that
///   segment out again; run it with `appendonly yes` and `appendfsync
///   always`. What the store can do about one that forgets anyway: an epoch
///   marker `{prefix}segments:epoch`, written once by the first idmint to use
///   the store ([`SegmentStore::init_epoch`]), and leases asked for above a
///   floor ([`SegmentStore::fetch_above`]): an allocator with floors refuses a
///   Redis that lost its keys or its marker instead of starting them over.
///
/// Each key is a hash `{prefix}segment:{key}` with the fields of Leaf's
/// `leaf_alloc` row and Tinyid's additions: `max_id`, `step`, `delta`,
/// `remainder`, `description` and `updated` (Unix milliseconds). The set
/// `{prefix}segments` holds the key names, for [`SegmentStore::list`]. A hash
/// written by hand (`HSET {prefix}segment:order max_id 1 step 1000`) is usable
/// at once; `delta` and `remainder` default to 1 and 0, and it is listed once
/// its name is added to the set.
///
/// # Scripts, and why each is atomic
///
/// - **fetch** (`FETCH_LUA`) reads the row, answers "not found" when it has no
///   `max_id` and "below the floor" when `max_id` is below the floor asked
///   for, and `HINCRBY`s `max_id` by the step, all in one script: no other
///   fetch can run between the read and the increment, so two fetches never get
///   overlapping segments, and a refused one changes nothing. `HINCRBY` is
///   exact 64-bit arithmetic and refuses to pass 2^63 − 1, which the script
///   reports as exhausted. Numbers are compared as text (`BELOW_LUA`), never
///   as Lua's doubles.
/// - **raise** (`RAISE_LUA`) creates the key at the start given, or sets its
///   `max_id` to it when below, in one script: a concurrent fetch runs wholly
///   before or after it, so the raise never lowers what a fetch wrote.
/// - **init epoch** (`INIT_EPOCH_LUA`) is `SETNX` and a read of the winner.
/// - **create** (`CREATE_LUA`) checks that the hash does not exist and that
///   no ledger entry names it, and writes it, its index entry and its ledger
///   entry in one script, so of two concurrent creates of a key exactly one
///   succeeds, and a key whose hash was deleted or evicted is never created
///   again from its start (`SegmentError::KeyForgotten`).
///
/// The ledger is the set `{prefix}segments:ledger`: every key the store ever
/// created or raised. A Redis that restarts empty loses it with everything
/// else; the epoch marker and the nodes' floors cover that case.
///
/// # Examples
///
/// ```no_run
/// use idmint_segment::redis::{RedisSegmentStore, RedisStoreConfig};
/// use idmint_segment::{NewKey, SegmentStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisSegmentStore::connect("redis://127.0.0.1:6379/", RedisStoreConfig::new()).await?;
/// store.create(&NewKey::new("order", 1000)).await?;
/// let grant = store.fetch("order", None).await?;
/// assert_eq!((grant.start(), grant.max_id), (1, 1001));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedisSegmentStore {
    conn: RedisConnection,
    config: RedisStoreConfig,
    fetch_script: Script,
    create_script: Script,
    raise_script: Script,
    epoch_script: Script,
    /// The replica count found on a single server when the config leaves
    /// it unset, and when it was read.
    replicas_seen: Mutex<Option<(Instant, u32)>>,
}

/// How long a single server's replica count is trusted before it is read
/// again (the config left the replicas unset).
const REPLICAS_RECHECK: Duration = Duration::from_secs(10);

impl RedisSegmentStore {
    /// A store on `conn`. Does no I/O.
    ///
    /// # Errors
    /// [`SegmentError::Config`] for a bad key prefix or timeout.
    pub fn new(conn: RedisConnection, config: RedisStoreConfig) -> Result<RedisSegmentStore> {
        config.validate()?;
        conn.check_prefix(&config.key_prefix)?;
        Ok(RedisSegmentStore {
            conn,
            config,
            fetch_script: Script::new(&format!("{BELOW_LUA}{FETCH_LUA}")),
            create_script: Script::new(CREATE_LUA),
            raise_script: Script::new(&format!("{BELOW_LUA}{RAISE_LUA}")),
            epoch_script: Script::new(INIT_EPOCH_LUA),
            replicas_seen: Mutex::new(None),
        })
    }

    /// Connects to `url` (within the config's timeout) and makes a store.
    ///
    /// # Errors
    /// Those of [`RedisConnection::connect`] and [`RedisSegmentStore::new`].
    pub async fn connect(url: &str, config: RedisStoreConfig) -> Result<RedisSegmentStore> {
        config.validate()?;
        let conn = RedisConnection::connect(url, config.timeout).await?;
        RedisSegmentStore::new(conn, config)
    }

    /// Connects to `target` (a server, the primary Redis Sentinel names, or
    /// a Redis Cluster) within the config's timeout and makes a store. On a
    /// Cluster the key prefix must hold a hash tag.
    ///
    /// # Errors
    /// Those of [`RedisConnection::open`] and [`RedisSegmentStore::new`].
    pub async fn open(
        target: &idmint_redis::RedisTarget,
        config: RedisStoreConfig,
    ) -> Result<RedisSegmentStore> {
        config.validate()?;
        if target.is_cluster() {
            idmint_redis::check_single_slot(&config.key_prefix)
                .map_err(|e| SegmentError::Config(e.to_string()))?;
        }
        let conn = RedisConnection::open(target, config.timeout).await?;
        RedisSegmentStore::new(conn, config)
    }

    /// The configuration.
    pub fn config(&self) -> &RedisStoreConfig {
        &self.config
    }

    /// The Redis hash holding `key`.
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}segment:{key}", self.config.key_prefix)
    }

    /// The Redis set holding every key name.
    pub fn index_key(&self) -> String {
        format!("{}segments", self.config.key_prefix)
    }

    /// The Redis set holding every key name the store ever had (the ledger).
    pub fn ledger_key(&self) -> String {
        format!("{}segments:ledger", self.config.key_prefix)
    }

    /// The Redis key holding the store's epoch marker. (Not a key's hash:
    /// those are `segment:…`, this is `segments:epoch`.)
    pub fn epoch_key(&self) -> String {
        format!("{}segments:epoch", self.config.key_prefix)
    }

    /// How many replicas must acknowledge a new segment of `redis_key`:
    /// the config's count, else 1 when the server holding it (on a Cluster,
    /// the slot's master) has a replica connected, else 0. The count is
    /// read again every [`REPLICAS_RECHECK`], and at once after a segment
    /// fell short of it (a failover may have left a primary without
    /// replicas, which nothing can be promoted from).
    async fn replicas_required(&self, redis_key: &str) -> Result<u32> {
        if let Some(n) = self.config.replicas {
            return Ok(n);
        }
        let seen = *self.replicas_seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, n)) = seen
            && at.elapsed() < REPLICAS_RECHECK
        {
            return Ok(n);
        }
        let connected = self
            .conn
            .shared()
            .connected_replicas(redis_key, self.config.timeout)
            .await
            .map_err(|e| match e {
                idmint_redis::CallError::Redis(e) if e.kind() != redis::ErrorKind::Io => {
                    SegmentError::Backend {
                        store: KIND,
                        operation: "count replicas",
                        message: format!(
                            "{e}; with INFO unavailable, set the store's replicas (`[segment] \
                             replicas`) to the count a failover needs"
                        ),
                    }
                }
                e => super::conn::call_error("count replicas", e),
            })?;
        let n = connected.min(1);
        *self.replicas_seen.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), n));
        Ok(n)
    }

    async fn read_row(&self, key: &str) -> Result<Option<KeyInfo>> {
        let redis_key = self.redis_key(key);
        let fields: HashMap<String, String> = self
            .conn
            .call("describe", self.config.timeout, |mut conn| async move {
                redis::cmd("HGETALL")
                    .arg(&redis_key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        parse_row(key, &fields)
    }
}

/// A key's hash as a [`KeyInfo`]; `None` for an empty hash (no key).
fn parse_row(key: &str, fields: &HashMap<String, String>) -> Result<Option<KeyInfo>> {
    if fields.is_empty() {
        return Ok(None);
    }
    let number = |field: &'static str, default: Option<u64>| -> Result<u64> {
        match fields.get(field) {
            Some(text) => text.parse::<u64>().ok().filter(|&v| v <= MAX_ID).ok_or_else(|| {
                bad_reply(
                    "describe",
                    format!("key {key:?}: field {field} holds {text:?}, not an integer in 0..=2^63-1"),
                )
            }),
            None => default.ok_or_else(|| {
                bad_reply("describe", format!("key {key:?}: field {field} is missing"))
            }),
        }
    };
    let updated = fields
        .get("updated")
        .and_then(|ms| ms.parse::<i64>().ok())
        .and_then(|ms| Timestamp::from_millisecond(ms).ok());
    Ok(Some(KeyInfo {
        key: key.to_owned(),
        max_id: number("max_id", None)?,
        step: number("step", None)?,
        delta: number("delta", Some(1))?,
        remainder: number("remainder", Some(0))?,
        description: fields.get("description").cloned().unwrap_or_default(),
        updated,
    }))
}

/// A number from a script's reply.
fn reply_number(operation: &'static str, what: &str, text: &str) -> Result<u64> {
    text.parse::<u64>()
        .ok()
        .filter(|&v| v <= MAX_ID)
        .ok_or_else(|| {
            bad_reply(
                operation,
                format!("{what} is {text:?}, not an integer in 0..=2^63-1"),
            )
        })
}

#[async_trait]
impl SegmentStore for RedisSegmentStore {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn fetch_above(&self, key: &str, step: Option<u64>, floor: u64) -> Result<SegmentGrant> {
        validate_key(key)?;
        if let Some(step) = step
            && !(1..=MAX_ID).contains(&step)
        {
            return Err(SegmentError::InvalidSpec {
                field: "step",
                reason: format!("{step} is not in 1..={MAX_ID}"),
            });
        }
        let redis_key = self.redis_key(key);
        let step_arg = step.map(|s| s.to_string()).unwrap_or_default();
        let now_ms = Timestamp::now().as_millisecond();
        let required = self.replicas_required(&redis_key).await?;
        // The replicas get half the call's bound (and half the connection's,
        // which bounds each request on a Cluster): the script and the
        // answer need the rest.
        let wait = self.config.timeout.min(self.conn.shared().timeout()) / 2;
        let (reply, acked): (Vec<String>, u32) = self
            .conn
            .call("fetch", self.config.timeout, |mut conn| {
                let mut invocation = self.fetch_script.prepare_invoke();
                invocation
                    .key(&redis_key)
                    .arg(&step_arg)
                    .arg(now_ms)
                    .arg(floor);
                let redis_key = &redis_key;
                async move {
                    let reply: Vec<String> = invocation.invoke_async(&mut conn).await?;
                    // A leased segment is used only once `required`
                    // replicas hold it: a failover promotes one of them
                    // (Sentinel and a Cluster promote the replica furthest
                    // along), so the new primary can't hand it out again.
                    let acked = if required > 0 && reply.first().map(String::as_str) == Some("1") {
                        conn.wait_for_replicas(redis_key, required, wait).await?
                    } else {
                        required
                    };
                    Ok((reply, acked))
                }
            })
            .await?;
        let field = |i: usize| reply.get(i).map(String::as_str).unwrap_or("");
        match field(0) {
            "0" => Err(SegmentError::NotFound {
                key: key.to_owned(),
            }),
            "1" if acked < required => {
                *self.replicas_seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
                Err(SegmentError::Backend {
                    store: KIND,
                    operation: "fetch",
                    message: format!(
                        "the segment leased for key {key:?} reached {acked} of the {required} \
                     replica(s) it needs within {wait:?}, so it is not used (its IDs are \
                     skipped): a failover to a replica without it would lease it again. \
                     Check the replicas' links, or set the store's replicas to 0 to accept \
                     that risk"
                    ),
                })
            }
            "1" => {
                let max_id = reply_number("fetch", "max_id", field(1))?;
                let step = reply_number("fetch", "step", field(2))?;
                let delta = reply_number("fetch", "delta", field(3))?;
                let remainder = reply_number("fetch", "remainder", field(4))?;
                if max_id < step || delta == 0 || remainder >= delta {
                    return Err(bad_reply(
                        "fetch",
                        format!(
                            "key {key:?} holds max_id {max_id}, step {step}, delta {delta}, \
                             remainder {remainder}, which is not a segment"
                        ),
                    ));
                }
                Ok(SegmentGrant {
                    max_id,
                    step,
                    delta,
                    remainder,
                })
            }
            "2" if field(3).contains("overflow") => Err(SegmentError::Exhausted {
                key: key.to_owned(),
                max_id: field(1).parse().unwrap_or(MAX_ID),
                step: field(2).parse().unwrap_or(MAX_ID),
            }),
            "2" => Err(bad_reply("fetch", format!("key {key:?}: {}", field(3)))),
            "4" => Err(SegmentError::KeyBelowFloor {
                store: KIND,
                key: key.to_owned(),
                floor,
                found: field(1).parse().ok(),
            }),
            "3" => Err(bad_reply(
                "fetch",
                format!(
                    "key {key:?} has step {:?}, not a positive integer",
                    field(1)
                ),
            )),
            other => Err(bad_reply(
                "fetch",
                format!("unexpected script reply {other:?}"),
            )),
        }
    }

    async fn describe(&self, key: &str) -> Result<Option<KeyInfo>> {
        validate_key(key)?;
        self.read_row(key).await
    }

    async fn create(&self, key: &NewKey) -> Result<KeyInfo> {
        key.validate()?;
        let now = Timestamp::now();
        let info = KeyInfo {
            key: key.key().to_owned(),
            max_id: key.start(),
            step: key.step(),
            delta: key.delta(),
            remainder: key.remainder(),
            description: key.description().to_owned(),
            updated: Timestamp::from_millisecond(now.as_millisecond()).ok(),
        };
        let redis_key = self.redis_key(key.key());
        let index_key = self.index_key();
        let ledger_key = self.ledger_key();
        let created: i64 = self
            .conn
            .call("create", self.config.timeout, |mut conn| {
                let mut invocation = self.create_script.prepare_invoke();
                invocation
                    .key(&redis_key)
                    .key(&index_key)
                    .key(&ledger_key)
                    .arg(&info.key)
                    .arg(info.max_id)
                    .arg(info.step)
                    .arg(info.delta)
                    .arg(info.remainder)
                    .arg(&info.description)
                    .arg(now.as_millisecond());
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        match created {
            1 => Ok(info),
            2 => Err(SegmentError::KeyForgotten {
                store: KIND,
                key: info.key,
            }),
            _ => Err(SegmentError::KeyExists { key: info.key }),
        }
    }

    async fn list(&self) -> Result<Vec<KeyInfo>> {
        let index_key = self.index_key();
        let mut names: Vec<String> = self
            .conn
            .call("list", self.config.timeout, |mut conn| async move {
                redis::cmd("SMEMBERS")
                    .arg(&index_key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        // Names that are not keys (written by hand) are skipped, not errors.
        names.retain(|name| validate_key(name).is_ok());
        names.sort();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for name in &names {
            pipe.cmd("HGETALL").arg(self.redis_key(name));
        }
        let rows: Vec<HashMap<String, String>> = self
            .conn
            .call("list", self.config.timeout, |mut conn| async move {
                pipe.query_async(&mut conn).await
            })
            .await?;
        let mut keys = Vec::with_capacity(names.len());
        for (name, fields) in names.iter().zip(&rows) {
            // A name whose hash was deleted by hand is not a key any more.
            if let Some(info) = parse_row(name, fields)? {
                keys.push(info);
            }
        }
        Ok(keys)
    }

    async fn raise(&self, key: &NewKey) -> Result<KeyInfo> {
        key.validate()?;
        let redis_key = self.redis_key(key.key());
        let index_key = self.index_key();
        let ledger_key = self.ledger_key();
        let now = Timestamp::now().as_millisecond();
        let _: Vec<i64> = self
            .conn
            .call("raise", self.config.timeout, |mut conn| {
                let mut invocation = self.raise_script.prepare_invoke();
                invocation
                    .key(&redis_key)
                    .key(&index_key)
                    .key(&ledger_key)
                    .arg(key.key())
                    .arg(key.start())
                    .arg(key.step())
                    .arg(key.delta())
                    .arg(key.remainder())
                    .arg(key.description())
                    .arg(now);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        self.read_row(key.key()).await?.ok_or_else(|| {
            bad_reply(
                "raise",
                format!("key {:?} is gone right after its raise", key.key()),
            )
        })
    }

    fn keeps_ledger(&self) -> bool {
        true
    }

    /// The index set names every key created through idmint, also those
    /// whose hash was deleted since: its union into the ledger.
    async fn remember_keys(&self) -> Result<()> {
        let (index_key, ledger_key) = (self.index_key(), self.ledger_key());
        let _: i64 = self
            .conn
            .call(
                "remember keys",
                self.config.timeout,
                |mut conn| async move {
                    redis::cmd("SUNIONSTORE")
                        .arg(&ledger_key)
                        .arg(&ledger_key)
                        .arg(&index_key)
                        .query_async(&mut conn)
                        .await
                },
            )
            .await?;
        Ok(())
    }

    fn keeps_epoch(&self) -> bool {
        true
    }

    async fn epoch(&self) -> Result<Option<StoreEpoch>> {
        let epoch_key = self.epoch_key();
        let text: Option<String> = self
            .conn
            .call("read epoch", self.config.timeout, |mut conn| async move {
                redis::cmd("GET")
                    .arg(&epoch_key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        text.map(|t| parse_epoch("read epoch", &t)).transpose()
    }

    async fn init_epoch(&self, epoch: &StoreEpoch) -> Result<StoreEpoch> {
        let epoch_key = self.epoch_key();
        let text: String = self
            .conn
            .call("write epoch", self.config.timeout, |mut conn| {
                let mut invocation = self.epoch_script.prepare_invoke();
                invocation.key(&epoch_key).arg(epoch.as_str());
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        parse_epoch("write epoch", &text)
    }
}

/// An epoch marker read from Redis.
fn parse_epoch(operation: &'static str, text: &str) -> Result<StoreEpoch> {
    text.parse()
        .map_err(|e| bad_reply(operation, format!("the epoch key holds {text:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_with_tinyid_defaults() {
        let fields: HashMap<String, String> = [("max_id", "11"), ("step", "10")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let info = parse_row("order", &fields).unwrap().unwrap();
        assert_eq!(
            (info.max_id, info.step, info.delta, info.remainder),
            (11, 10, 1, 0)
        );
        assert_eq!(info.updated, None);
        assert!(parse_row("order", &HashMap::new()).unwrap().is_none());
    }

    #[test]
    fn rows_with_bad_numbers_are_backend_errors() {
        let fields: HashMap<String, String> = [("max_id", "-3"), ("step", "10")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let err = parse_row("order", &fields).unwrap_err();
        assert_eq!(err.code(), "store_error");
        assert!(err.to_string().contains("max_id"), "{err}");
    }
}
