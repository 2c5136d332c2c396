// Size: about 1,470 lines before the tests, some 340 of them docs: one backend
// with one protocol, whose Lua scripts sit beside the steps that run them
// (as in the segment crate's `redis/`), and the epoch check that every step relies on, so
// the file is kept whole.
//! The `redis` worker registry: worker-ID leases as `SET NX PX` keys, fenced
//! high-water marks, and peers' reported times, all on one Redis.
//!
//! This is katsubushi's and Yitter's scheme made safe. Both hold a worker ID with
//! a key set `NX` with an expiry; Yitter renews it by `GET` then `SET`, which is
//! racy: between the two calls the key can expire and another node can claim the
//! ID, and the renewing node then overwrites the new holder's lease. Here every
//! step that depends on who holds the ID runs inside one Lua script, which Redis
//! executes atomically (no other command runs between its reads and its writes).
//!
//! # Keys
//!
//! Under a prefix (default `idmint:{default}:`, or `idmint:{<cluster>}:` with
//! [`RedisConfig::with_cluster`]; the braces are a Redis Cluster hash tag that
//! keeps all of a cluster's keys in one slot):
//! - `worker:<id>`: the lease. Holds the claim's random token, expires after the
//!   lease TTL unless renewed.
//! - `mark:<id>`: the worker's high-water mark in Unix milliseconds (rounded up,
//!   so it never understates what was promised). It never expires, so it outlives
//!   every holder; it is raised only by a script that first checks the lease
//!   token, so a node that lost its lease can never raise it.
//! - `reported`: a hash from worker ID to that worker's last reported time in
//!   Unix milliseconds. An entry counts as live only while the worker's lease key
//!   exists; stale entries are removed when peers are listed, when a worker is
//!   claimed and when it is released.
//! - `reported_at`: a hash from worker ID to `<ms>/<reported ms>`: Redis's
//!   `TIME` when the persist (or clean stop) script wrote that report. The
//!   peers script gives each report's age by `TIME` from it, in the same
//!   script: a start weighs a peer's clock as `reported + age`. Only a
//!   stamp of the very report counts: an idmint without stamps writes
//!   `reported` alone, and an earlier holder's stamp names another report.
//!   An entry is overwritten by the worker's next report and removed with
//!   its `reported` entry by the peers script.
//! - `holders`: a set of the worker IDs claimed and not released, so that
//!   [`WorkerRegistry::fleet`] finds holders without scanning the keyspace
//!   (`KEYS` blocks Redis). Added after the other keys: workers claimed by an
//!   older idmint are not in it and are found through `reported` instead
//!   once they report (their first mark follows their claim at once). Who
//!   holds a worker is read from its lease token, which has always begun
//!   with `host@address:port/`.
//! - `epoch`: a hash naming the cluster's current epoch (`id`), the server it
//!   was last seen on (`server`, Redis's `run_id`), when claims may resume
//!   (`hold_until`, Redis time in ms), the longest hold any node asked for
//!   (`hold_ms`) and the floor every claim's mark is raised to (`floor`).
//!   Every lease token names the epoch it was claimed in.
//!
//! # Scripts, and why each is atomic
//!
//! - **claim**: tries `SET worker:<id> token NX PX ttl` for up to
//!   [`CLAIM_WINDOW`] consecutive IDs from a random start, and on the first
//!   success reads `mark:<id>` and clears the old `reported` entry. One script
//!   per window: one round trip, and the count of held IDs it returns is exact for
//!   that window (so a range of at most `CLAIM_WINDOW` IDs reports exhaustion
//!   exactly). Windows bound how long one script blocks Redis when the range is
//!   huge (baidu's layout has 2^22 workers). The random start spreads concurrent
//!   claimers over the range so they rarely contend for the same IDs.
//! - **claim a given ID** ([`WorkerRegistry::claim_worker`], the collision
//!   check of the fixed registries): the claim script on a window of that one
//!   ID; when it is held, the lease key's token (`host@address:port/…`) names
//!   the holder.
//! - **renew**: `PEXPIRE` only if the lease key still holds our token.
//! - **persist**: raises `mark:<id>` only if the lease key holds our token and the
//!   new mark is higher, and records the reported time.
//! - **clean stop**: sets `mark:<id>` to what the holder really issued, under
//!   the same check as persist (see [`WorkerRegistry::record_clean_stop`]).
//! - **release**: `DEL` only if the lease key holds our token; the mark stays.
//! - **peers**: reads the `reported` hash (a random sample of 64 entries when
//!   it holds more than 128) and keeps the entries whose lease key exists,
//!   dropping the others, each with its age by `TIME` (`reported_at`).
//! - **fleet**: reads `holders` and `reported`, and for each worker whose lease
//!   key exists its token, `PTTL`, report and mark, in one read-only script
//!   (one moment). Only live holdings are listed: Redis deletes an expired
//!   lease key, so it remembers no recent ones.
//!
//! - **epoch** (module section "When Redis forgets"): records the server,
//!   starts a new epoch with a hold when the server may have forgotten, and
//!   raises the floor. Claim, renew and persist check their token's epoch
//!   first and refuse in another one.
//!
//! # When Redis forgets
//!
//! A Redis restarted without persistence comes back empty; one with RDB
//! snapshots comes back as of its last snapshot; a failover promotes a
//! replica that may lack the last writes (replication is asynchronous). Each
//! loses leases and marks, and a node that claimed a "free" worker at once
//! would issue beside its old holder, which goes on until its next renewal
//! (two nodes issued thousands of the same IDs that way). So:
//!
//! - **The epoch check.** Before every claim and every renewal, the registry
//!   asks `INFO` who the server is (`run_id`). When that differs from what it
//!   saw last, the epoch script compares it with the `server` the epoch
//!   records. A missing epoch, or a different server that can't show it keeps
//!   every write (AOF with `appendfsync always`, not promoted, no eviction),
//!   starts a **new epoch** with a **hold**: no claim until the longest lease
//!   TTL plus the mark window has passed (Redis's own advice for locks,
//!   "delayed restarts"). By then every earlier holder has fenced (its lease
//!   ends no later than one TTL after its last renewal), and every clock has
//!   passed what it persisted (a mark leads its node's clock by at most the
//!   window, or what the lease has left).
//! - **Holders fence at once, or register again.** A renewal that finds
//!   another server, or a script that finds another epoch than its token's,
//!   fails with `LeaseLost`. A holder whose lease is still valid by its own
//!   clock then registers its worker again in the new epoch
//!   ([`WorkerRegistry::register_again`], one script: the worker free or
//!   still its token's, no higher mark stored; the mark raised to the
//!   holder's) and issues on; the hold applies to every other claim, so no
//!   one else can have taken the worker meanwhile. Any other holder stops
//!   issuing at once and claims again (held).
//! - **The floor.** Before it reports the loss, the holder raises the new
//!   epoch's `floor` to the highest mark it ever persisted; every claim
//!   returns the higher of the worker's mark and the floor. So the next
//!   holder starts above everything an old holder issued, even one that ran
//!   ahead of its clock (the oracle's leader borrowing), as long as it
//!   reached Redis within the hold.
//! - **A new cluster.** A missing epoch is taken for a new cluster, with no
//!   hold, only when the server shows it can't have lost one: it has run
//!   longer than a hold, was never promoted, evicts nothing, never ran
//!   `FLUSHALL`/`FLUSHDB`, and no `holders` or `reported` key of the cluster
//!   exists. Otherwise the first claim waits one hold (also the first start
//!   after an upgrade from an idmint without epochs).
//!
//! What this cannot see: keys deleted by hand (`DEL` of the cluster's keys is
//! like dropping a database's table), and a holder that could not reach Redis
//! for the whole hold while running ahead of its clock (its floor is not
//! raised; a holder that tracks its clock is covered by the hold itself).
//! `WAIT` would not help: Redis does not promise that a failover promotes a
//! replica that acknowledged, so idmint holds after every failover instead.
//! Redis's clock decides expiry: a step forward on the Redis host ends
//! leases early, before the holder's monotonic `valid_until`.
//!
//! # Sentinel and Cluster
//!
//! [`RedisRegistry::open`] takes a [`RedisTarget`]: one server, the primary
//! Redis Sentinel names, or a Redis Cluster. A Sentinel failover or a Cluster
//! master's failover puts another server (another `run_id`, promoted from a
//! replica) behind the same keys, and the epoch check above treats it as
//! any server change: a new epoch with a hold, unless the new primary shows
//! it keeps every write (a promoted replica never does). On a Cluster every
//! key of one idmint cluster shares one hash slot (the prefix's `{...}` hash
//! tag, required there), the scripts that build key names at run time
//! declare the epoch key so that they run on that slot's master, and `INFO`
//! is asked of that master. `INFO` has no key, so while the client's slot
//! map is stale (the master just died) another node may answer it: the
//! epoch script checks that the `run_id` it was given is its own server's
//! and otherwise changes nothing (the call fails as unavailable and is
//! asked again), so a failover is one new epoch, not one per node that
//! happened to answer.
//!
//! Run Redis with `appendonly yes` and `appendfsync always`, on a single
//! primary, and a restart costs nothing: the epoch goes on. Any other way
//! costs a hold (lease TTL + window) at every restart or failover, never a
//! duplicate. The start logs a warning when the server can forget.
//!
//! # References
//! - Redis: [distributed locks](https://redis.io/docs/latest/develop/use/patterns/distributed-locks/)
//!   (`SET NX PX` with a random value, release by script).
//! - katsubushi and Yitter's IdGenerator: the worker-ID-by-Redis-key schemes this
//!   module follows and fixes.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint_redis::{CallError, Conn, RedisConnection, ServerFacts};
pub use idmint_redis::{ClusterTarget, RedisTarget, SentinelTarget};
use jiff::Timestamp;
use redis::{RedisResult, Script};

use crate::error::{RegistryError, Result};
use crate::registry::{
    Claim, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry, check_given_worker,
    check_range,
};
use crate::util::{ceil_ms, check_timeout, random_u64, registration_suffix};

/// The registry kind, as in config and in errors.
const KIND: &str = "redis";

/// The most worker IDs one claim script tries: it bounds how long the script
/// blocks Redis (a script runs alone) when a layout has millions of worker IDs.
/// A range no larger than this is claimed in one atomic round trip.
pub const CLAIM_WINDOW: u32 = 1024;

/// How many peers' reports a start reads at most: a sample when the fleet is
/// larger than twice this, enough for the median the clock check takes.
const PEER_SAMPLE: u32 = 64;

/// Claim: `SET NX PX` over a window of IDs; on success read the mark (raised
/// to the epoch's floor) and drop the previous holder's report. Refuses while
/// the epoch is not the one the caller checked (`{2, 0, ''}`) or its hold has
/// not run out (`{3, ms left, ''}`). Returns `{1, id, mark or ''}` or
/// `{0, held, ''}`.
const CLAIM_LUA: &str = r"
local prefix = ARGV[1]
local start = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local range = tonumber(ARGV[4])
local epoch = redis.call('HMGET', prefix .. 'epoch', 'id', 'hold_until', 'floor')
if epoch[1] ~= ARGV[7] then return {2, 0, ''} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local hold_until = tonumber(epoch[2] or '0') or 0
if hold_until > now then return {3, hold_until - now, ''} end
local floor = epoch[3] or '0'
local held = 0
for i = 0, count - 1 do
  local id = (start + i) % range
  if redis.call('SET', prefix .. 'worker:' .. id, ARGV[5], 'NX', 'PX', ARGV[6]) then
    local mark = redis.call('GET', prefix .. 'mark:' .. id)
    if tonumber(floor) > 0 and ((not mark) or tonumber(floor) > tonumber(mark)) then
      mark = floor
    end
    redis.call('HDEL', prefix .. 'reported', tostring(id))
    redis.call('SADD', prefix .. 'holders', tostring(id))
    return {1, id, mark or ''}
  end
  held = held + 1
end
return {0, held, ''}
";

/// The epoch check, run before claims and renewals and whenever a script
/// finds the epoch changed: records the server the cluster runs on, and
/// starts a new epoch, with a hold on claims, when the server may have
/// forgotten what it was told (see the module docs, "When Redis forgets").
/// KEYS: epoch hash, holders set, reported hash. ARGV: run_id, hold ms,
/// fresh (1: the server shows it never held an epoch), keeps every write
/// (1), this registry's highest persisted mark ms (the floor it raises),
/// a new epoch ID. Returns `{id, hold ms left (may be < 0), why}`, `why`
/// empty unless this call started a new epoch; `{'', 0, 'misrouted'}`,
/// changing nothing, when the server running the script is not the one
/// whose `run_id` the caller read (module docs, "Sentinel and Cluster":
/// without it, one Cluster failover recorded three servers in 33 ms, each
/// a new epoch with its hold).
const EPOCH_LUA: &str = r"
local here = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if here ~= ARGV[1] then return {'', 0, 'misrouted'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local e = redis.call('HMGET', KEYS[1], 'id', 'server', 'hold_until', 'hold_ms', 'floor')
local id = e[1]
local hold_until = tonumber(e[3] or '0') or 0
local hold = math.max(tonumber(ARGV[2]), tonumber(e[4] or '0') or 0)
local floor = math.max(tonumber(e[5] or '0') or 0, tonumber(ARGV[5]))
local why = ''
if not id then
  id = ARGV[6]
  if ARGV[3] ~= '1' or redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then
    hold_until = now + hold
    why = 'epoch_missing'
  end
elseif e[2] ~= ARGV[1] and ARGV[4] ~= '1' then
  id = ARGV[6]
  hold_until = math.max(hold_until, now + hold)
  why = 'server_changed'
end
redis.call('HSET', KEYS[1], 'id', id, 'server', ARGV[1], 'hold_until', string.format('%d', hold_until),
  'hold_ms', string.format('%d', hold), 'floor', string.format('%d', floor))
if why ~= '' then
  redis.call('HSET', KEYS[1], 'reset_at', string.format('%d', now), 'reset_why', why)
end
return {id, hold_until - now, why}
";

/// The epoch script's source, for this crate's tests of what it does on a
/// server it was not meant for; not an API.
#[doc(hidden)]
pub const EPOCH_SCRIPT_FOR_TESTS: &str = EPOCH_LUA;

/// Renew: `PEXPIRE` only while the lease holds our token, in our epoch.
/// KEYS: lease, epoch hash. ARGV: token, ttl ms, epoch ID.
/// Returns 1 renewed, 0 expired, -1 held by another token, -2 a new epoch.
const RENEW_LUA: &str = r"
if redis.call('HGET', KEYS[2], 'id') ~= ARGV[3] then return -2 end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif holder then
  return -1
end
return 0
";

/// Persist: only while the lease holds our token, in our epoch; the mark only
/// rises. KEYS: lease, mark, reported hash, epoch hash, reported-at hash.
/// ARGV: token, mark ms, reported ms, worker, epoch ID. The report is
/// stamped with Redis's `TIME` (`<redis ms>/<reported ms>` in the
/// reported-at hash) so `peers` can tell its age.
/// Returns 1 done, 0 expired, -1 held by another token, -2 a new epoch.
const PERSIST_LUA: &str = r"
if redis.call('HGET', KEYS[4], 'id') ~= ARGV[5] then return -2 end
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  if holder then return -1 end
  return 0
end
local old = redis.call('GET', KEYS[2])
if (not old) or tonumber(ARGV[2]) > tonumber(old) then
  redis.call('SET', KEYS[2], ARGV[2])
end
redis.call('HSET', KEYS[3], ARGV[4], ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[5], ARGV[4], string.format('%d', now) .. '/' .. ARGV[3])
return 1
";

/// A clean stop's record: as persist, fenced by our token in our epoch, but
/// the mark is set to the tick the holder really issued up to, not raised
/// (see `WorkerRegistry::record_clean_stop`). KEYS and ARGV as persist's.
/// Returns 1 done, 0 expired, -1 held by another token, -2 a new epoch.
const STOP_LUA: &str = r"
if redis.call('HGET', KEYS[4], 'id') ~= ARGV[5] then return -2 end
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  if holder then return -1 end
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[5], ARGV[4], string.format('%d', now) .. '/' .. ARGV[3])
return 1
";

/// Register again: a holder whose claim is from an earlier epoch takes its
/// worker in the current one (see `WorkerRegistry::register_again`). Only
/// while the lease key is gone, still holds the old token or already the new
/// one (an earlier try of this registration, whose answer was lost), and the
/// stored mark is not above the holder's; the mark is raised to the holder's.
/// KEYS: lease, mark, epoch hash, holders set. ARGV: old token, new token,
/// ttl ms, mark ms, the epoch checked, the old token's epoch, worker.
/// Returns `{1, stored mark or ''}` done (the mark found), `{-1, holder}` held by another
/// token, `{-2, ''}` the epoch moved since the check, `{-3, ''}` the claim
/// is of this epoch, `{-4, stored mark}` a higher mark is stored.
const REGISTER_AGAIN_LUA: &str = r"
local epoch = redis.call('HGET', KEYS[3], 'id')
if epoch ~= ARGV[5] then return {-2, ''} end
if epoch == ARGV[6] then return {-3, ''} end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] and holder ~= ARGV[2] then return {-1, holder} end
local mark = redis.call('GET', KEYS[2])
if mark and tonumber(mark) > tonumber(ARGV[4]) then return {-4, mark} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if (not mark) or tonumber(ARGV[4]) > tonumber(mark) then
  redis.call('SET', KEYS[2], ARGV[4])
end
redis.call('SADD', KEYS[4], ARGV[7])
return {1, mark or ''}
";

/// Release: `DEL` only while the lease holds our token; the mark stays.
/// KEYS: lease, reported hash, holders set. Returns 1 released, 0 expired,
/// -1 held by another token.
const RELEASE_LUA: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HDEL', KEYS[2], ARGV[2])
  redis.call('SREM', KEYS[3], ARGV[2])
  return 1
elseif holder then
  return -1
end
return 0
";

/// Peers: the reported times of workers whose lease key exists; drops the rest.
/// KEYS: reported hash, reported-at hash. Returns a flat list `id, ms, age
/// ms or '', ...`: a report's age by Redis's `TIME`, from the stamp the
/// persist script left beside it, when that stamp is of this very report
/// (an idmint without stamps, or an earlier holder's stamp, leaves none
/// that matches). When the hash holds more than twice `ARGV[2]` entries, a
/// random sample of `ARGV[2]` of them (`HRANDFIELD`, Redis 6.2 and later;
/// all of them on an older server): N nodes starting at once would
/// otherwise cost Redis O(N²) in scripts that block it.
const PEERS_LUA: &str = r"
local sample = tonumber(ARGV[2])
local all
if redis.call('HLEN', KEYS[1]) > 2 * sample then
  local got = redis.pcall('HRANDFIELD', KEYS[1], sample, 'WITHVALUES')
  if type(got) == 'table' and not got.err then all = got end
end
if not all then all = redis.call('HGETALL', KEYS[1]) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #all, 2 do
  if redis.call('EXISTS', ARGV[1] .. 'worker:' .. all[i]) == 1 then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
    local age = ''
    local stamp = redis.call('HGET', KEYS[2], all[i])
    if stamp then
      local at, of = string.match(stamp, '^(%d+)/(.*)$')
      if at and of == all[i + 1] then
        age = string.format('%d', math.max(0, now - tonumber(at)))
      end
    end
    out[#out + 1] = age
  else
    redis.call('HDEL', KEYS[1], all[i])
    redis.call('HDEL', KEYS[2], all[i])
  end
end
return out
";

/// Fleet: every worker in `holders` or `reported` whose lease key exists, as
/// a flat list `id, token, pttl ms, reported ms or '', mark ms or '', ...`.
/// Read-only: stale entries are left to the scripts that clean them.
const FLEET_LUA: &str = r"
local prefix = ARGV[1]
local seen = {}
local ids = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if not seen[id] then seen[id] = true; ids[#ids + 1] = id end
end
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not seen[id] then seen[id] = true; ids[#ids + 1] = id end
end
local out = {}
for _, id in ipairs(ids) do
  local lease = prefix .. 'worker:' .. id
  local token = redis.call('GET', lease)
  if token then
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = tostring(redis.call('PTTL', lease))
    out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
    out[#out + 1] = redis.call('GET', prefix .. 'mark:' .. id) or ''
  end
end
return out
";

/// Configuration of a [`RedisRegistry`] (builder-lite: [`RedisConfig::new`] plus
/// `with_*` setters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    prefix: Cow<'static, str>,
    lease_ttl: Duration,
    timeout: Duration,
    mark_window: Duration,
}

impl RedisConfig {
    /// The key prefix used unless set: cluster `default`.
    pub const DEFAULT_PREFIX: &'static str = "idmint:{default}:";
    /// The lease time to live used unless set.
    pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
    /// The timeout of each remote call used unless set.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
    /// The keepers' mark window assumed unless set (the keeper's default).
    pub const DEFAULT_MARK_WINDOW: Duration = Duration::from_secs(3);

    /// The defaults: prefix [`Self::DEFAULT_PREFIX`], lease TTL 10 s, timeout
    /// 2 s, mark window 3 s.
    pub const fn new() -> Self {
        RedisConfig {
            prefix: Cow::Borrowed(Self::DEFAULT_PREFIX),
            lease_ttl: Self::DEFAULT_LEASE_TTL,
            timeout: Self::DEFAULT_TIMEOUT,
            mark_window: Self::DEFAULT_MARK_WINDOW,
        }
    }

    /// Keys go under `idmint:{<cluster>}:`, so several idmint clusters can share
    /// one Redis.
    #[must_use]
    pub fn with_cluster(mut self, cluster: &str) -> Self {
        self.prefix = Cow::Owned(format!("idmint:{{{cluster}}}:"));
        self
    }

    /// Keys go under exactly `prefix` (tests use a unique one each).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Cow::Owned(prefix.into());
        self
    }

    /// How long a lease lives unless renewed (whole milliseconds, at least 1 ms).
    #[must_use]
    pub const fn with_lease_ttl(mut self, lease_ttl: Duration) -> Self {
        self.lease_ttl = lease_ttl;
        self
    }

    /// How long each remote call (connecting included) may take before it fails
    /// with [`RegistryError::Timeout`].
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How far ahead of their time the keepers on this registry persist
    /// their marks (`KeeperConfig::with_window`; default 3 s). After Redis
    /// forgets, claims wait the lease TTL plus this window: by then no
    /// earlier holder issues, and every clock has passed what they
    /// persisted.
    #[must_use]
    pub const fn with_mark_window(mut self, window: Duration) -> Self {
        self.mark_window = window;
        self
    }

    /// How long claims wait after Redis forgot its state: the lease TTL plus
    /// the mark window.
    pub fn reset_hold(&self) -> Duration {
        self.lease_ttl.saturating_add(self.mark_window)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The lease time to live.
    pub const fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The timeout of each remote call.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Checks the settings without connecting: the key prefix, the lease TTL
    /// and the timeout. [`RedisRegistry::connect`] runs it first; a server's
    /// config check runs it before any I/O.
    ///
    /// # Errors
    /// [`RegistryError::Config`] naming the setting that can't work.
    pub fn validate(&self) -> Result<()> {
        if self.prefix.is_empty() {
            return Err(RegistryError::config(
                KIND,
                "the key prefix is empty".to_owned(),
            ));
        }
        if self.lease_ttl.as_millis() == 0 {
            return Err(RegistryError::config(
                KIND,
                format!("lease ttl {:?} is shorter than 1 ms", self.lease_ttl),
            ));
        }
        check_timeout(KIND, "timeout", self.timeout)?;
        Ok(())
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// A [`WorkerRegistry`] on one Redis server (or a primary with replicas; see the
/// module docs for what failover does to leases).
///
/// - **Exclusive** while the lease key lives: claims use `SET NX PX`, and every
///   later step checks the claim's random token inside a script.
/// - **Leases** last [`RedisConfig::lease_ttl`] from Redis receiving the request;
///   [`Lease::valid_until`] is measured from before the request was sent, so it
///   ends no later than Redis's expiry (given Redis's clock does not jump).
/// - **Bounded**: every call, connecting again after a lost connection included,
///   fails with [`RegistryError::Timeout`] after [`RedisConfig::timeout`].
/// - **Thread-safe**: share it behind an `Arc`; calls are multiplexed on one
///   connection.
/// - **No hidden I/O**: only [`RedisRegistry::connect`] and the trait's methods
///   talk to Redis. A connection lost to an error or a timeout is opened again
///   by the next call, within that call's timeout.
///
/// # Examples
///
/// ```no_run
/// use idmint_registry::redis::{RedisConfig, RedisRegistry};
/// use idmint_registry::{NodeIdentity, WorkerRegistry};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = RedisConfig::new().with_cluster("orders");
/// let registry = RedisRegistry::connect("redis://127.0.0.1:6379/", config).await?;
/// let node = NodeIdentity { host: "web-1".into(), address: "10.0.0.7".into(), port: 8080 };
/// let claim = registry.claim(&node, 1024).await?;
/// println!("worker {}, start above {:?}", claim.worker, claim.stored_mark);
/// registry.release(&claim).await?;
/// # Ok(())
/// # }
/// ```
pub struct RedisRegistry {
    /// One multiplexed connection that reconnects by itself and is replaced
    /// when a call on it times out (`idmint_redis`).
    conn: RedisConnection,
    config: RedisConfig,
    claim_script: Script,
    renew_script: Script,
    register_again_script: Script,
    persist_script: Script,
    stop_script: Script,
    release_script: Script,
    peers_script: Script,
    fleet_script: Script,
    epoch_script: Script,
    /// What this registry knows of the server and the cluster's epoch.
    known: Mutex<Known>,
}

/// What a [`RedisRegistry`] remembers between calls about the server it
/// talks to; see the module docs, "When Redis forgets".
#[derive(Debug, Default)]
struct Known {
    /// The epoch the last check found; claims made now are made in it.
    epoch: Option<String>,
    /// The server's `run_id` at the last check.
    run_id: Option<String>,
    /// The highest mark persisted (or attempted) through this registry, in
    /// Unix ms: no holding of this registry issued past it. Raised into the
    /// epoch's floor when a new epoch is found, so the next holders start
    /// above it.
    highest_mark: i64,
    /// Why claims are held, for the error, as the last check found it.
    hold_reason: String,
    /// The persistence warning was logged for this `run_id`.
    warned_for: Option<String>,
}

/// What an epoch check found.
#[derive(Debug, Clone)]
struct Epoch {
    /// The epoch ID now.
    id: String,
    /// How long claims are still held.
    hold_left: Duration,
}

impl fmt::Debug for RedisRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The address only: the connection info may carry a password.
        f.debug_struct("RedisRegistry")
            .field("addr", &self.conn.addr())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RedisRegistry {
    /// Connects to the Redis at `url` (`redis://[user:password@]host:port/[db]`)
    /// and checks it answers `PING`.
    ///
    /// # Errors
    /// - [`RegistryError::Config`] for a malformed URL or configuration.
    /// - [`RegistryError::Timeout`] when Redis does not answer within the timeout.
    /// - [`RegistryError::Backend`] when the connection is refused or fails.
    pub async fn connect(url: &str, config: RedisConfig) -> Result<Self> {
        Self::open(&RedisTarget::Url(url.to_owned()), config).await
    }

    /// Connects to `target`: one server, the primary Redis Sentinel names
    /// (asked again after a failover), or a Redis Cluster, and checks it
    /// answers `PING`. On a Cluster the key prefix must hold a hash tag
    /// (the default `idmint:{default}:` does), so that every key of the
    /// cluster lives in one slot and each script runs on one node.
    ///
    /// # Errors
    /// As [`RedisRegistry::connect`]; [`RegistryError::Config`] also for a
    /// target that can't work, or a Cluster with a prefix without a hash tag.
    pub async fn open(target: &RedisTarget, config: RedisConfig) -> Result<Self> {
        config.validate()?;
        if target.is_cluster() {
            idmint_redis::check_single_slot(&config.prefix)
                .map_err(|e| RegistryError::config(KIND, e.to_string()))?;
        }
        let conn = RedisConnection::open(target, config.timeout)
            .await
            .map_err(|e| call_error("connect", e))?;
        Ok(RedisRegistry {
            conn,
            config,
            claim_script: Script::new(CLAIM_LUA),
            renew_script: Script::new(RENEW_LUA),
            register_again_script: Script::new(REGISTER_AGAIN_LUA),
            persist_script: Script::new(PERSIST_LUA),
            stop_script: Script::new(STOP_LUA),
            release_script: Script::new(RELEASE_LUA),
            peers_script: Script::new(PEERS_LUA),
            fleet_script: Script::new(FLEET_LUA),
            epoch_script: Script::new(EPOCH_LUA),
            known: Mutex::new(Known::default()),
        })
    }

    /// What the server says of its persistence, and a warning when a restart
    /// or failover can lose what it was told (for `idmint config check` and
    /// the start's log).
    ///
    /// # Errors
    /// [`RegistryError::Timeout`] or [`RegistryError::Backend`] when Redis fails.
    pub async fn server_facts(&self) -> Result<ServerFacts> {
        let mut facts = ServerFacts::read(&self.conn, &self.epoch_key(), self.config.timeout)
            .await
            .map_err(|e| call_error("read server facts", e))?;
        facts
            .read_config(&self.conn, &self.epoch_key(), self.config.timeout)
            .await;
        Ok(facts)
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The epoch check (module docs, "When Redis forgets"): asks the server
    /// who it is, and when that differs from what this registry last saw
    /// (or it has seen nothing yet), runs the epoch script, which records
    /// the server and starts a new epoch with a hold when the server may
    /// have forgotten. `force` runs the script even when the server is the
    /// same (a script found the epoch changed).
    async fn check_epoch(&self, operation: &'static str, force: bool) -> Result<Epoch> {
        let mut facts = ServerFacts::read(&self.conn, &self.epoch_key(), self.config.timeout)
            .await
            .map_err(|e| call_error(operation, e))?;
        {
            let known = self.known();
            if !force
                && known.run_id.as_deref() == Some(facts.run_id.as_str())
                && let Some(id) = &known.epoch
            {
                return Ok(Epoch {
                    id: id.clone(),
                    hold_left: Duration::ZERO,
                });
            }
        }
        facts
            .read_config(&self.conn, &self.epoch_key(), self.config.timeout)
            .await;
        let hold = self.config.reset_hold();
        // A missing epoch is a new cluster only when the server shows it can
        // never have held one that went: it has run longer than a hold, was
        // never promoted, evicts nothing and was never flushed.
        let fresh = facts.uptime >= hold
            && !facts.promoted
            && !facts.evicts()
            && !ServerFacts::ever_flushed(&self.conn, &self.epoch_key(), self.config.timeout).await;
        let keeps = facts.keeps_every_write() && !facts.evicts();
        let floor = self.known().highest_mark;
        let keys = [
            format!("{}epoch", self.config.prefix),
            format!("{}holders", self.config.prefix),
            format!("{}reported", self.config.prefix),
        ];
        let new_id = format!("{:016x}", random_u64());
        let (id, left_ms, why): (String, i64, String) = self
            .call(operation, |mut conn| {
                let mut invocation = self.epoch_script.key(&keys[0]);
                invocation
                    .key(&keys[1])
                    .key(&keys[2])
                    .arg(&facts.run_id)
                    .arg(ttl_ms(hold))
                    .arg(u8::from(fresh))
                    .arg(u8::from(keeps))
                    .arg(floor)
                    .arg(&new_id);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        if why == "misrouted" {
            // Asked again by the caller's retry, once the client's slot map
            // names the slot's master (module docs, "Sentinel and Cluster").
            return Err(RegistryError::unavailable(
                KIND,
                operation,
                format!(
                    "INFO was answered by another server (run_id {}) than the one holding \
                     the registry's keys: a failover is under way",
                    facts.run_id
                ),
            ));
        }
        let hold_left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
        let mut known = self.known();
        if let Some(warning) = facts.persistence_warning()
            && known.warned_for.as_deref() != Some(facts.run_id.as_str())
        {
            tracing::warn!(
                addr = %self.conn.addr(),
                "the redis registry's server can forget leases and marks: {warning}; \
                 idmint then holds claims for the lease TTL plus the mark window \
                 (appendonly yes with appendfsync always avoids the wait)"
            );
            known.warned_for = Some(facts.run_id.clone());
        }
        if !why.is_empty() {
            known.hold_reason = match why.as_str() {
                "epoch_missing" => format!(
                    "the registry's epoch key {} is missing: Redis (up {:?}) lost its data, \
                     or this is a new cluster on a server that can't show it never had one",
                    keys[0], facts.uptime
                ),
                _ => format!(
                    "the redis server changed (run_id {}{}): it may have lost the last leases and marks",
                    facts.run_id,
                    if facts.promoted {
                        ", promoted from a replica"
                    } else {
                        ""
                    }
                ),
            };
            tracing::warn!(
                prefix = %self.config.prefix,
                epoch = %id,
                hold = ?hold_left,
                "redis registry: a new epoch: {}; every claim waits until no earlier holder \
                 can still issue",
                known.hold_reason
            );
        }
        known.run_id = Some(facts.run_id);
        known.epoch = Some(id.clone());
        Ok(Epoch { id, hold_left })
    }

    /// The epoch check before a claim: the epoch to claim in, or
    /// [`RegistryError::Held`] while claims wait.
    async fn epoch_for_claim(&self, force: bool) -> Result<String> {
        let epoch = self.check_epoch("claim", force).await?;
        if epoch.hold_left.is_zero() {
            Ok(epoch.id)
        } else {
            Err(self.held(epoch.hold_left))
        }
    }

    fn held(&self, left: Duration) -> RegistryError {
        let reason = self.known().hold_reason.clone();
        RegistryError::Held {
            registry: KIND,
            retry_after: left,
            reason: if reason.is_empty() {
                "the redis server may have lost its state".to_owned()
            } else {
                reason
            },
        }
    }

    /// A claim whose epoch is no longer the server's: Redis forgot (or may
    /// have forgotten) it. Records this registry's highest mark in the new
    /// epoch's floor first (best effort), so the next holder starts above
    /// everything this node issued.
    async fn epoch_lost(&self, claim: &Claim, doing: &str) -> RegistryError {
        if let Err(e) = self.check_epoch("raise the floor", true).await {
            tracing::warn!(error = %e, "redis registry: could not raise the new epoch's floor");
        }
        let reason = self.known().hold_reason.clone();
        RegistryError::LeaseLost {
            registry: KIND,
            worker: claim.worker,
            reason: format!(
                "{doing}: the registry's epoch changed ({}): issuing stopped",
                if reason.is_empty() {
                    "redis may have lost its state"
                } else {
                    &reason
                }
            ),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// The high-water mark stored for `worker`, whoever holds it (for listings
    /// and checks; a claim returns it too).
    ///
    /// # Errors
    /// [`RegistryError::Timeout`] or [`RegistryError::Backend`] when Redis fails.
    pub async fn stored_mark(&self, worker: u32) -> Result<Option<Timestamp>> {
        let key = self.key("mark:", worker);
        let raw: Option<String> = self
            .call("read mark", |mut conn| async move {
                redis::cmd("GET").arg(&key).query_async(&mut conn).await
            })
            .await?;
        raw.map(|ms| parse_ms("read mark", worker, &ms)).transpose()
    }

    fn key(&self, kind: &str, worker: u32) -> String {
        format!("{}{kind}{worker}", self.config.prefix)
    }

    /// The epoch hash's key; also where `INFO` is asked on a Redis Cluster
    /// (the master of the prefix's slot).
    fn epoch_key(&self) -> String {
        format!("{}epoch", self.config.prefix)
    }

    /// Runs `op` on the shared connection within the timeout, mapping
    /// failures to typed errors.
    async fn call<T, F, Fut>(&self, operation: &'static str, op: F) -> Result<T>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.conn
            .call(self.config.timeout, op)
            .await
            .map_err(|e| call_error(operation, e))
    }

    /// Runs the claim script over `count` IDs from `start` (modulo `range`) and
    /// turns a win into a claim; `Ok(Err(held))` counts the held IDs it met.
    ///
    /// A claim in an epoch that is no longer the server's is
    /// [`WindowError::Epoch`]; one refused while claims are held,
    /// [`RegistryError::Held`].
    async fn claim_window(
        &self,
        token: &str,
        start: u64,
        count: u32,
        range: u32,
    ) -> Result<std::result::Result<Claim, WindowMiss>> {
        let ttl_ms = ttl_ms(self.config.lease_ttl);
        // Taken before the request: the lease ends no later than Redis's expiry.
        let before = Instant::now();
        let epoch_key = self.epoch_key();
        let (won, value, mark): (i64, i64, String) = self
            .call("claim", |mut conn| {
                let mut invocation = self.claim_script.prepare_invoke();
                // The script builds its key names; the epoch key is declared
                // (unread) so that a Redis Cluster runs it on the node of the
                // prefix's slot.
                invocation
                    .key(&epoch_key)
                    .arg(self.config.prefix.as_ref())
                    .arg(start)
                    .arg(count)
                    .arg(range)
                    .arg(token)
                    .arg(ttl_ms)
                    .arg(token_epoch(token));
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        match won {
            1 => {}
            2 => return Ok(Err(WindowMiss::Epoch)),
            3 => {
                let left = Duration::from_millis(u64::try_from(value).unwrap_or(0));
                return Err(self.held(left));
            }
            _ => return Ok(Err(WindowMiss::Held(u64::try_from(value).unwrap_or(0)))),
        }
        let worker = u32::try_from(value)
            .ok()
            .filter(|w| *w < range)
            .ok_or_else(|| RegistryError::Backend {
                registry: KIND,
                operation: "claim",
                message: format!("script returned worker {value}, outside 0..{range}"),
            })?;
        let stored_mark = if mark.is_empty() {
            None
        } else {
            Some(parse_ms("claim", worker, &mark)?)
        };
        tracing::info!(worker, ?stored_mark, prefix = %self.config.prefix, "claimed worker ID on redis");
        Ok(Ok(Claim {
            worker,
            stored_mark,
            lease: Some(Lease {
                ttl: self.config.lease_ttl,
                valid_until: before + self.config.lease_ttl,
            }),
            token: token.to_owned(),
        }))
    }

    /// The epoch changed under two claims in a row: Redis restarting or
    /// failing over again and again.
    fn epoch_moving(&self) -> RegistryError {
        RegistryError::Backend {
            registry: KIND,
            operation: "claim",
            message: "the registry's epoch changed twice during one claim: is redis \
                      restarting or failing over?"
                .to_owned(),
        }
    }

    fn lease_lost(&self, worker: u32, code: i64, doing: &str) -> RegistryError {
        let reason = if code < 0 {
            format!("{doing}: worker {worker} is held by another node's lease")
        } else {
            format!("{doing}: the lease on worker {worker} expired")
        };
        RegistryError::LeaseLost {
            registry: KIND,
            worker,
            reason,
        }
    }
}

#[async_trait]
impl WorkerRegistry for RedisRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        check_range(KIND, range)?;
        // A new epoch found between the check and the claim: check once more.
        let mut force = false;
        'epoch: for _ in 0..2 {
            let token = new_token(node, &self.epoch_for_claim(force).await?);
            let start = random_u64() % u64::from(range);
            let mut in_use = 0u64;
            let mut covered = 0u32;
            while covered < range {
                let count = CLAIM_WINDOW.min(range - covered);
                let window_start = (start + u64::from(covered)) % u64::from(range);
                match self
                    .claim_window(&token, window_start, count, range)
                    .await?
                {
                    Ok(claim) => return Ok(claim),
                    Err(WindowMiss::Held(held)) => in_use += held,
                    Err(WindowMiss::Epoch) => {
                        force = true;
                        continue 'epoch;
                    }
                }
                covered += count;
            }
            return Err(RegistryError::Exhausted {
                registry: KIND,
                in_use,
                range: u64::from(range),
            });
        }
        Err(self.epoch_moving())
    }

    async fn claim_worker(&self, node: &NodeIdentity, worker: u32, range: u32) -> Result<Claim> {
        check_given_worker(KIND, worker, range)?;
        let mut token = new_token(node, &self.epoch_for_claim(false).await?);
        let key = self.key("worker:", worker);
        // The holder is read after a failed claim; if its lease ended in between,
        // the worker is free and the claim is tried again.
        for _ in 0..3 {
            match self
                .claim_window(&token, u64::from(worker), 1, range)
                .await?
            {
                Ok(claim) => return Ok(claim),
                Err(WindowMiss::Epoch) => {
                    token = new_token(node, &self.epoch_for_claim(true).await?);
                    continue;
                }
                Err(WindowMiss::Held(_)) => {}
            }
            let holder: Option<String> = self
                .call("claim", |mut conn| {
                    let key = key.clone();
                    async move { redis::cmd("GET").arg(&key).query_async(&mut conn).await }
                })
                .await?;
            if let Some(holder) = holder {
                return Err(RegistryError::WorkerTaken {
                    registry: KIND,
                    worker,
                    node: node.to_string(),
                    holder: describe_holder(&holder),
                    origin: None,
                });
            }
        }
        Err(RegistryError::WorkerTaken {
            registry: KIND,
            worker,
            node: node.to_string(),
            holder: "another node (its lease came and went while this claim looked)".to_owned(),
            origin: None,
        })
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        let key = self.key("worker:", claim.worker);
        let epoch_key = format!("{}epoch", self.config.prefix);
        let ttl_ms = ttl_ms(self.config.lease_ttl);
        let before = Instant::now();
        // Who the server is, every renewal: a holder that sees it change
        // fences at once (a new epoch), without waiting for its lease.
        let epoch = self.check_epoch("renew", false).await?;
        if epoch.id != token_epoch(&claim.token) {
            return Err(self.epoch_lost(claim, "renew").await);
        }
        let code: i64 = self
            .call("renew", |mut conn| {
                let mut invocation = self.renew_script.key(&key);
                invocation
                    .key(&epoch_key)
                    .arg(&claim.token)
                    .arg(ttl_ms)
                    .arg(token_epoch(&claim.token));
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        if code == -2 {
            return Err(self.epoch_lost(claim, "renew").await);
        }
        if code != 1 {
            return Err(self.lease_lost(claim.worker, code, "renew"));
        }
        Ok(Some(Lease {
            ttl: self.config.lease_ttl,
            valid_until: before + self.config.lease_ttl,
        }))
    }

    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> Result<Claim> {
        const OP: &str = "register again";
        let lost = |reason: String| RegistryError::LeaseLost {
            registry: KIND,
            worker: claim.worker,
            reason: format!("{OP}: {reason}"),
        };
        // The epoch now, held or not: the hold keeps claims off the workers
        // that a live holder may still register again, and this is one.
        let epoch = self.check_epoch(OP, false).await?;
        let old_epoch = token_epoch(&claim.token);
        if epoch.id == old_epoch {
            return Err(lost(format!(
                "the lease on worker {} was lost within its epoch",
                claim.worker
            )));
        }
        // The same token on every try (see `registration_suffix`).
        let token = registration_token(node, &claim.token, &epoch.id);
        let mark_ms = ceil_ms(mark);
        {
            let mut known = self.known();
            known.highest_mark = known.highest_mark.max(mark_ms);
        }
        let keys = [
            self.key("worker:", claim.worker),
            self.key("mark:", claim.worker),
            self.epoch_key(),
            format!("{}holders", self.config.prefix),
        ];
        let ttl_ms = ttl_ms(self.config.lease_ttl);
        // Taken before the request: the lease ends no later than Redis's expiry.
        let before = Instant::now();
        let (code, value): (i64, String) = self
            .call(OP, |mut conn| {
                let mut invocation = self.register_again_script.key(&keys[0]);
                invocation
                    .key(&keys[1])
                    .key(&keys[2])
                    .key(&keys[3])
                    .arg(&claim.token)
                    .arg(&token)
                    .arg(ttl_ms)
                    .arg(mark_ms)
                    .arg(&epoch.id)
                    .arg(old_epoch)
                    .arg(claim.worker);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        match code {
            1 => {}
            -1 => {
                return Err(lost(format!(
                    "the new epoch shows worker {} held by {}",
                    claim.worker,
                    describe_holder(&value)
                )));
            }
            -2 => {
                // Another epoch began between the check and the script: a
                // transient answer, tried again while the lease lasts.
                return Err(RegistryError::Backend {
                    registry: KIND,
                    operation: OP,
                    message: "the registry's epoch changed again during the registration"
                        .to_owned(),
                });
            }
            -3 => {
                return Err(lost(format!(
                    "the lease on worker {} was lost within its epoch",
                    claim.worker
                )));
            }
            _ => {
                return Err(lost(format!(
                    "worker {} has mark {value} ms stored, above this holding's {mark_ms} ms: \
                     another holding wrote it",
                    claim.worker
                )));
            }
        }
        // What the script found was at most `mark_ms`, and it stored that.
        let stored_mark = Some(parse_ms(OP, claim.worker, &mark_ms.to_string())?);
        tracing::info!(
            worker = claim.worker,
            epoch = %epoch.id,
            prefix = %self.config.prefix,
            "registered the worker again in the redis registry's new epoch"
        );
        Ok(Claim {
            worker: claim.worker,
            stored_mark,
            lease: Some(Lease {
                ttl: self.config.lease_ttl,
                valid_until: before + self.config.lease_ttl,
            }),
            token,
        })
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let lease_key = self.key("worker:", claim.worker);
        let mark_key = self.key("mark:", claim.worker);
        let reported_key = format!("{}reported", self.config.prefix);
        let reported_at_key = format!("{}reported_at", self.config.prefix);
        let epoch_key = format!("{}epoch", self.config.prefix);
        let mark_ms = ceil_ms(mark);
        {
            // Before the write: a write that lands but whose answer is lost
            // still counts (persist, then allow: nothing past it is issued
            // unless the write succeeded, so this bound is never low).
            let mut known = self.known();
            known.highest_mark = known.highest_mark.max(mark_ms);
        }
        let code: i64 = self
            .call("persist mark", |mut conn| {
                let mut invocation = self.persist_script.key(&lease_key);
                invocation
                    .key(&mark_key)
                    .key(&reported_key)
                    .key(&epoch_key)
                    .key(&reported_at_key)
                    .arg(&claim.token)
                    .arg(mark_ms)
                    .arg(reported.as_millisecond())
                    .arg(claim.worker)
                    .arg(token_epoch(&claim.token));
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        if code == -2 {
            return Err(self.epoch_lost(claim, "persist mark").await);
        }
        if code != 1 {
            return Err(self.lease_lost(claim.worker, code, "persist mark"));
        }
        Ok(())
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        const OP: &str = "record clean stop";
        let lease_key = self.key("worker:", claim.worker);
        let mark_key = self.key("mark:", claim.worker);
        let reported_key = format!("{}reported", self.config.prefix);
        let reported_at_key = format!("{}reported_at", self.config.prefix);
        let epoch_key = format!("{}epoch", self.config.prefix);
        let code: i64 = self
            .call(OP, |mut conn| {
                let mut invocation = self.stop_script.key(&lease_key);
                invocation
                    .key(&mark_key)
                    .key(&reported_key)
                    .key(&epoch_key)
                    .key(&reported_at_key)
                    .arg(&claim.token)
                    .arg(ceil_ms(high))
                    .arg(reported.as_millisecond())
                    .arg(claim.worker)
                    .arg(token_epoch(&claim.token));
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        if code == -2 {
            return Err(self.epoch_lost(claim, OP).await);
        }
        if code != 1 {
            return Err(self.lease_lost(claim.worker, code, OP));
        }
        Ok(())
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        let reported_key = format!("{}reported", self.config.prefix);
        let reported_at_key = format!("{}reported_at", self.config.prefix);
        let flat: Vec<String> = self
            .call("list peers", |mut conn| {
                let mut invocation = self.peers_script.key(&reported_key);
                invocation
                    .key(&reported_at_key)
                    .arg(self.config.prefix.as_ref())
                    .arg(PEER_SAMPLE);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        let mut peers = Vec::with_capacity(flat.len() / 3);
        for row in flat.chunks_exact(3) {
            let worker: u32 = row[0].parse().map_err(|_| RegistryError::Backend {
                registry: KIND,
                operation: "list peers",
                message: format!("reported hash has a non-numeric worker field {:?}", row[0]),
            })?;
            if worker == claim.worker {
                continue;
            }
            let report = PeerReport::new(worker, parse_ms("list peers", worker, &row[1])?);
            peers.push(match row[2].parse::<u64>() {
                Ok(ms) => report.with_age(Duration::from_millis(ms)),
                Err(_) => report,
            });
        }
        peers.sort_by_key(|p| p.worker);
        Ok(peers)
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        const OP: &str = "list fleet";
        let holders_key = format!("{}holders", self.config.prefix);
        let reported_key = format!("{}reported", self.config.prefix);
        let flat: Vec<String> = self
            .call(OP, |mut conn| {
                let mut invocation = self.fleet_script.key(&holders_key);
                invocation
                    .key(&reported_key)
                    .arg(self.config.prefix.as_ref());
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        let mut rows = Vec::with_capacity(flat.len() / 5);
        for row in flat.chunks_exact(5) {
            let [id, token, pttl, reported, mark] = row else {
                continue;
            };
            let worker: u32 = id.parse().map_err(|_| RegistryError::Backend {
                registry: KIND,
                operation: OP,
                message: format!(
                    "worker ID {id:?} in the holders set or reported hash is not a number"
                ),
            })?;
            let mut member = FleetMember::new(worker);
            if let Some((host, address, port)) = holder_of(token) {
                member.host = Some(host);
                member.address = Some(address);
                member.port = Some(port);
            }
            member.live = true;
            // PTTL: -1 no expiry (not written by idmint), -2 gone since the GET.
            member.lease_left = pttl
                .parse::<i64>()
                .ok()
                .filter(|ms| *ms >= 0)
                .map(|ms| Duration::from_millis(ms.unsigned_abs()));
            member.reported = (!reported.is_empty())
                .then(|| parse_ms(OP, worker, reported))
                .transpose()?;
            member.mark = (!mark.is_empty())
                .then(|| parse_ms(OP, worker, mark))
                .transpose()?;
            rows.push(member);
        }
        rows.sort_by_key(|r| r.worker);
        Ok(rows)
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let lease_key = self.key("worker:", claim.worker);
        let reported_key = format!("{}reported", self.config.prefix);
        let holders_key = format!("{}holders", self.config.prefix);
        let code: i64 = self
            .call("release", |mut conn| {
                let mut invocation = self.release_script.key(&lease_key);
                invocation
                    .key(&reported_key)
                    .key(&holders_key)
                    .arg(&claim.token)
                    .arg(claim.worker);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        // Releasing what is no longer ours is a no-op, not an error: the ID is
        // not ours to give back, and the new holder's lease is untouched.
        if code != 1 {
            tracing::warn!(
                worker = claim.worker,
                taken_over = code < 0,
                "released a redis worker lease that was already gone"
            );
        }
        Ok(())
    }
}

/// A fresh lease token: who holds the worker (`host@address:port`, for the
/// holder named in [`RegistryError::WorkerTaken`]), the process, the epoch
/// the claim is made in, and 128 random bits that make it unique.
fn new_token(node: &NodeIdentity, epoch: &str) -> String {
    format!(
        "{}@{}:{}/{}/{epoch}/{:016x}{:016x}",
        node.host,
        node.address,
        node.port,
        std::process::id(),
        random_u64(),
        random_u64()
    )
}

/// The token of `old`'s registration again in `epoch`: [`new_token`]'s
/// form, its random part derived from `old` (`registration_suffix`), so
/// each try of one registration asks with the same token.
fn registration_token(node: &NodeIdentity, old: &str, epoch: &str) -> String {
    format!(
        "{}@{}:{}/{}/{epoch}/{}",
        node.host,
        node.address,
        node.port,
        std::process::id(),
        registration_suffix(old, epoch)
    )
}

/// The epoch a token of [`new_token`] was made in.
fn token_epoch(token: &str) -> &str {
    token.split('/').nth(2).unwrap_or("")
}

/// Why a claim window won nothing.
enum WindowMiss {
    /// Every ID tried is held; how many.
    Held(u64),
    /// The epoch changed since the check: check again.
    Epoch,
}

/// The host, address and port a lease token of [`new_token`] begins with;
/// `None` for a token written by something else.
fn holder_of(token: &str) -> Option<(String, String, u16)> {
    let (who, _) = token.split_once('/')?;
    let (host, at) = who.rsplit_once('@')?;
    let (address, port) = at.rsplit_once(':')?;
    if host.is_empty() || address.is_empty() {
        return None;
    }
    Some((host.to_owned(), address.to_owned(), port.parse().ok()?))
}

/// The node a lease token names (`host (address:port)`), or the token itself
/// when it was written by something else.
fn describe_holder(token: &str) -> String {
    let who = token.split('/').next().unwrap_or(token);
    match who.rsplit_once('@') {
        Some((host, at)) if !host.is_empty() && token.contains('/') => format!("{host} ({at})"),
        _ => format!("{token:?}"),
    }
}

/// A failed call as the registry reports it, naming `operation`.
fn call_error(operation: &'static str, e: CallError) -> RegistryError {
    match e {
        CallError::Config(message) => RegistryError::config(KIND, message),
        CallError::Timeout { after } => RegistryError::Timeout {
            registry: KIND,
            operation,
            after,
        },
        // Nothing listening, a broken connection, a replica still loading, a
        // cluster between masters, or sentinels that name no usable primary
        // yet (a failover under way): a start waits on these.
        CallError::Redis(e)
            if e.is_io_error()
                || e.is_connection_refusal()
                || e.is_connection_dropped()
                || matches!(
                    e.kind(),
                    redis::ErrorKind::Server(
                        redis::ServerErrorKind::BusyLoading
                            | redis::ServerErrorKind::TryAgain
                            | redis::ServerErrorKind::ClusterDown
                            | redis::ServerErrorKind::MasterDown
                            | redis::ServerErrorKind::ReadOnly
                    ) | redis::ErrorKind::MasterNameNotFoundBySentinel
                        | redis::ErrorKind::NoValidReplicasFoundBySentinel
                ) =>
        {
            RegistryError::unavailable(KIND, operation, e)
        }
        other => RegistryError::Backend {
            registry: KIND,
            operation,
            message: other.to_string(),
        },
    }
}

/// The lease TTL in whole milliseconds for `PX`/`PEXPIRE` (validated ≥ 1 ms).
fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

fn parse_ms(operation: &'static str, worker: u32, raw: &str) -> Result<Timestamp> {
    raw.parse::<i64>()
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .ok_or_else(|| RegistryError::Backend {
            registry: KIND,
            operation,
            message: format!("worker {worker} has {raw:?} stored, not a unix time in milliseconds"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_setters() {
        let config = RedisConfig::new();
        assert_eq!(config.prefix(), "idmint:{default}:");
        assert_eq!(config.lease_ttl(), Duration::from_secs(10));
        assert_eq!(config.timeout(), Duration::from_secs(2));
        let config = config.with_cluster("orders");
        assert_eq!(config.prefix(), "idmint:{orders}:");
        assert!(config.validate().is_ok());
    }

    #[test]
    fn config_rejects_sub_millisecond_ttl_and_zero_timeout() {
        let err = RedisConfig::new()
            .with_lease_ttl(Duration::from_micros(500))
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("500µs"), "{err}");
        assert!(
            RedisConfig::new()
                .with_timeout(Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(RedisConfig::new().with_prefix("").validate().is_err());
    }

    #[test]
    fn tokens_name_their_holder() {
        let node = NodeIdentity {
            host: "web-1".into(),
            address: "10.0.0.7".into(),
            port: 8080,
        };
        let token = new_token(&node, "e1");
        assert!(token.starts_with("web-1@10.0.0.7:8080/"), "{token}");
        assert_eq!(token_epoch(&token), "e1");
        assert_eq!(describe_holder(&token), "web-1 (10.0.0.7:8080)");
        assert_eq!(
            holder_of(&token),
            Some(("web-1".to_owned(), "10.0.0.7".to_owned(), 8080))
        );
        let v6 = new_token(
            &NodeIdentity {
                host: "web-2".into(),
                address: "::1".into(),
                port: 9,
            },
            "e2",
        );
        assert_eq!(
            holder_of(&v6),
            Some(("web-2".to_owned(), "::1".to_owned(), 9))
        );
        assert_eq!(holder_of("someone-else"), None);
        assert_eq!(describe_holder("someone-else"), "\"someone-else\"");
    }

    #[test]
    fn stored_values_that_are_not_millis_are_backend_errors() {
        let err = parse_ms("claim", 5, "soon").unwrap_err();
        assert_eq!(err.code(), "registry_backend");
        assert!(err.to_string().contains("worker 5"), "{err}");
    }
}
