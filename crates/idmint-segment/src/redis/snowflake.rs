//! [`RedisSnowflake`]: a snowflake made inside Redis, on Redis's clock.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use idmint_core::{FieldOrder, Id, IdBatch, IdParts, IdRun, Layout};
use jiff::Timestamp;
use redis::Script;

use super::{
    DEFAULT_KEY_PREFIX, DEFAULT_TIMEOUT, RedisConnection, bad_reply, check_count, check_key_prefix,
    check_timeout, millis_at_least_one,
};
use crate::error::{Result, SegmentError};

/// KEYS[1]: the node's last-tick key.
/// ARGV: 1 tick key prefix, 2 epoch ms, 3 unit ms, 4 ticks in the layout,
/// 5 IDs per tick, 6 node value, 7 time shift, 8 node shift, 9 sequence shift,
/// 10 IDs wanted, 11 tick key TTL ms.
///
/// Replies `{code, sec, usec, a, b, c, d}` with Redis's time (`sec`, `usec`):
/// - `0`: issued: `a` tick, `b` first sequence, `c` count, `d` ID high 32
///   bits, and a 5th value the ID's low 32 bits;
/// - `1`: the tick's sequence is used up (or its counter was lost): `a` tick;
/// - `2`: before the layout's epoch;
/// - `3`: past the layout's end;
/// - `4`: the clock is behind the last tick `a`.
const SNOWFLAKE_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local sec, usec = tonumber(t[1]), tonumber(t[2])
local ms = sec * 1000 + math.floor(usec / 1000)
local epoch, unit = tonumber(ARGV[2]), tonumber(ARGV[3])
if ms < epoch then return {2, sec, usec} end
local tick = math.floor((ms - epoch) / unit)
if tick >= tonumber(ARGV[4]) then return {3, sec, usec} end
local last = redis.call('GET', KEYS[1])
if last then last = tonumber(last) end
if last and tick < last then return {4, sec, usec, last} end
local tick_text = string.format('%.0f', tick)
local tick_key = ARGV[1] .. tick_text
local fresh = redis.call('EXISTS', tick_key) == 0
if fresh and last == tick then return {1, sec, usec, tick} end
local n, per_tick = tonumber(ARGV[10]), tonumber(ARGV[5])
local used = redis.call('INCRBY', tick_key, n)
if fresh then redis.call('PEXPIRE', tick_key, ARGV[11]) end
local first = used - n
if first >= per_tick then return {1, sec, usec, tick} end
local count = math.min(used, per_tick) - first
if last ~= tick then redis.call('SET', KEYS[1], tick_text) end
local function halves(v, shift)
  if shift >= 32 then return v * 2 ^ (shift - 32), 0 end
  local p = 2 ^ (32 - shift)
  return math.floor(v / p), (v % p) * 2 ^ shift
end
local th, tl = halves(tick, tonumber(ARGV[7]))
local nh, nl = halves(tonumber(ARGV[6]), tonumber(ARGV[8]))
local sh, sl = halves(first, tonumber(ARGV[9]))
return {0, sec, usec, tick, first, count, th + nh + sh, tl + nl + sl}
";

/// The default bound on waiting for the clock to catch up: Leaf's 5 ms.
const DEFAULT_CLOCK_BEHIND_WAIT: Duration = Duration::from_millis(5);

/// Configuration of a [`RedisSnowflake`] (builder-lite:
/// [`RedisSnowflakeConfig::new`] plus `with_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSnowflakeConfig {
    layout: Layout,
    datacenter: u32,
    worker: u32,
    key_prefix: Cow<'static, str>,
    timeout: Duration,
    clock_behind_wait: Duration,
    tick_wait: Option<Duration>,
}

impl RedisSnowflakeConfig {
    /// IDs of `layout` for `worker` (datacenter 0).
    ///
    /// The node (datacenter and worker) is checked against the layout when the
    /// generator is made. Every Redis (or key prefix) a layout's IDs come from
    /// needs its own node numbers: two Redis servers with the same node number
    /// issue the same IDs.
    pub const fn new(layout: Layout, worker: u32) -> RedisSnowflakeConfig {
        RedisSnowflakeConfig {
            layout,
            datacenter: 0,
            worker,
            key_prefix: Cow::Borrowed(DEFAULT_KEY_PREFIX),
            timeout: DEFAULT_TIMEOUT,
            clock_behind_wait: DEFAULT_CLOCK_BEHIND_WAIT,
            tick_wait: None,
        }
    }

    /// The datacenter part of the node (for layouts that have one).
    #[must_use]
    pub const fn with_datacenter(mut self, datacenter: u32) -> RedisSnowflakeConfig {
        self.datacenter = datacenter;
        self
    }

    /// Keys go under `prefix`. Use one prefix per layout: the keys hold ticks,
    /// which mean something else under another layout.
    #[must_use]
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> RedisSnowflakeConfig {
        self.key_prefix = Cow::Owned(prefix.into());
        self
    }

    /// How long each Redis call may take before it fails with
    /// [`SegmentError::Timeout`] (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> RedisSnowflakeConfig {
        self.timeout = timeout;
        self
    }

    /// How far behind the node's last tick Redis's clock may be for a call to
    /// wait for it to catch up instead of failing (default 5 ms, as Leaf).
    /// Zero fails at once.
    #[must_use]
    pub const fn with_clock_behind_wait(mut self, wait: Duration) -> RedisSnowflakeConfig {
        self.clock_behind_wait = wait;
        self
    }

    /// How long a call may wait for Redis's clock to reach the next tick when
    /// the current tick's sequence is used up (default: one tick plus 1 s).
    /// Past it the call fails with [`SegmentError::Timeout`]: Redis's clock is
    /// not advancing.
    #[must_use]
    pub const fn with_tick_wait(mut self, wait: Duration) -> RedisSnowflakeConfig {
        self.tick_wait = Some(wait);
        self
    }

    /// The layout.
    pub const fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The datacenter.
    pub const fn datacenter(&self) -> u32 {
        self.datacenter
    }

    /// The worker.
    pub const fn worker(&self) -> u32 {
        self.worker
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The timeout of each Redis call.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The bound on waiting for the clock to catch up.
    pub const fn clock_behind_wait(&self) -> Duration {
        self.clock_behind_wait
    }

    /// The bound on waiting for the next tick.
    pub fn tick_wait(&self) -> Duration {
        self.tick_wait
            .unwrap_or_else(|| self.layout.unit() + Duration::from_secs(1))
    }

    /// The node field value.
    fn node_value(&self) -> u64 {
        (u64::from(self.datacenter) << self.layout.worker_bits()) | u64::from(self.worker)
    }

    fn validate(&self) -> Result<()> {
        let check = |field: &'static str, value: u32, max: u32| {
            if value > max {
                Err(SegmentError::Core(idmint_core::Error::NodeOutOfRange {
                    field,
                    value: u64::from(value),
                    max: u64::from(max),
                }))
            } else {
                Ok(())
            }
        };
        check("datacenter", self.datacenter, self.layout.max_datacenter())?;
        check("worker", self.worker, self.layout.max_worker())?;
        check_key_prefix(&self.key_prefix)?;
        check_timeout(self.timeout)
    }
}

/// The shifts of a layout's fields, as its IDs are composed:
/// `tick << time | node << node_shift | sequence << seq_shift`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shifts {
    time: u32,
    node: u32,
    sequence: u32,
}

impl Shifts {
    fn of(layout: &Layout) -> Shifts {
        let node_bits = u32::from(layout.node_bits());
        let sequence_bits = u32::from(layout.sequence_bits());
        match layout.order() {
            FieldOrder::TimeNodeSequence => Shifts {
                time: node_bits + sequence_bits,
                node: sequence_bits,
                sequence: 0,
            },
            FieldOrder::TimeSequenceNode => Shifts {
                time: node_bits + sequence_bits,
                node: 0,
                sequence: node_bits,
            },
        }
    }
}

/// What one script call did.
enum Step {
    Issued(IdRun),
    /// The tick's sequence is used up: retry once Redis's clock reaches `next_tick_at`.
    TickUsedUp {
        wait: Duration,
    },
    /// Redis's clock is `behind` the node's last tick.
    ClockBehind {
        behind: Duration,
    },
}

/// A snowflake generator whose clock and sequence live in Redis.
///
/// - **Unique** per (Redis, key prefix, node): each (tick, sequence) pair is
///   taken by one atomic script, however many clients share the node, and
///   sequence numbers of a tick are never handed out twice. Across nodes, IDs
///   differ in the node field. Two Redis servers must not share node numbers.
/// - **Strictly increasing** per node, in the order Redis runs the calls: the
///   node's last tick never goes down, and sequence numbers within a tick only
///   rise. Each batch is increasing; IDs across nodes are k-sorted by Redis's
///   clock.
/// - **Sequence used up**: the call waits for Redis's clock to reach the next
///   tick (at most [`RedisSnowflakeConfig::tick_wait`], then
///   [`SegmentError::Timeout`]); it never repeats a sequence number.
/// - **Redis's clock goes back**: nothing is issued below the node's last tick.
///   If the clock is at most [`RedisSnowflakeConfig::clock_behind_wait`] behind,
///   the call waits; otherwise it fails with
///   `SegmentError::Core(idmint_core::Error::ClockBehind { .. })` and keeps
///   failing until Redis's clock catches up (the last tick never expires).
/// - **Redis down or slow**: the call fails with [`SegmentError::Timeout`] or
///   [`SegmentError::Backend`] and issues nothing. Durability is Redis's: if
///   Redis loses the last-tick key and its clock is behind, IDs can repeat.
/// - **Decodable**: [`Layout::decode`] gives back Redis's time (to the tick),
///   the node and the sequence.
/// - **Thread-safe**: share it behind an `Arc`.
///
/// One Lua script per call reads Redis's `TIME`, turns it into the layout's
/// tick, takes sequence numbers from the per-(node, tick) counter
/// `{prefix}snowflake:{node}:tick:{tick}` with `INCRBY` (the key expires a
/// second after its tick ends), and composes the ID from tick, node and
/// sequence with the layout's shifts, passed in as arguments. Every client that
/// uses the same node number on the same Redis shares that counter, so any
/// number of processes can issue for one node without coordinating.
///
/// The node's last tick is kept in `{prefix}snowflake:{node}:last`, which never
/// expires: when Redis's clock reads a tick before it (the clock stepped back),
/// the script issues nothing, and the client waits for the clock to catch up
/// (within a bound) or fails with [`idmint_core::Error::ClockBehind`]. When it
/// reads the last tick itself but that tick's counter is gone (it expired while
/// the clock stood still or jumped away and back), the sequence numbers already
/// used are unknown, so the script treats the tick as used up and the client
/// waits for the next one.
///
/// # The script, and why it is atomic
///
/// `SNOWFLAKE_LUA` reads `TIME`, the last tick and the tick's counter, then
/// `INCRBY`s the counter and raises the last tick, all in one script: Redis runs
/// no other command in between, so no two calls get the same (tick, sequence)
/// and the last tick only ever rises. Lua numbers are doubles, exact only below
/// 2^53, so the script composes the ID as two 32-bit halves; the fields occupy
/// disjoint bits, so each half is an exact sum. The client checks the halves
/// against [`Layout::compose`] before issuing.
///
/// # References
/// - Twitter Snowflake (`IdWorker.scala`) and Leaf-snowflake: waiting for the
///   next tick when its sequence is used up, and refusing to issue while the
///   clock is behind the last issued time.
///
/// # Examples
///
/// ```no_run
/// use idmint_core::Layout;
/// use idmint_segment::redis::{RedisSnowflake, RedisSnowflakeConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = RedisSnowflakeConfig::new(Layout::TWITTER, 7).with_datacenter(1);
/// let generator = RedisSnowflake::connect("redis://127.0.0.1:6379/", config).await?;
/// let id = generator.next_id().await?;
/// let parts = Layout::TWITTER.decode(id.get())?;
/// assert_eq!((parts.datacenter, parts.worker), (1, 7));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedisSnowflake {
    conn: RedisConnection,
    config: RedisSnowflakeConfig,
    shifts: Shifts,
    script: Script,
    last_key: String,
    tick_key_prefix: String,
}

impl RedisSnowflake {
    /// A generator on `conn`. Does no I/O.
    ///
    /// # Errors
    /// `SegmentError::Core(idmint_core::Error::NodeOutOfRange { .. })` for a
    /// datacenter or worker outside the layout, [`SegmentError::Config`] for a
    /// bad key prefix or timeout.
    pub fn new(conn: RedisConnection, config: RedisSnowflakeConfig) -> Result<RedisSnowflake> {
        config.validate()?;
        conn.check_prefix(&config.key_prefix)?;
        let node = config.node_value();
        let base = format!("{}snowflake:{node}:", config.key_prefix);
        Ok(RedisSnowflake {
            conn,
            shifts: Shifts::of(&config.layout),
            config,
            script: Script::new(SNOWFLAKE_LUA),
            last_key: format!("{base}last"),
            tick_key_prefix: format!("{base}tick:"),
        })
    }

    /// Connects to `url` (within the config's timeout) and makes a generator.
    ///
    /// # Errors
    /// Those of [`RedisConnection::connect`] and [`RedisSnowflake::new`].
    pub async fn connect(url: &str, config: RedisSnowflakeConfig) -> Result<RedisSnowflake> {
        config.validate()?;
        let conn = RedisConnection::connect(url, config.timeout).await?;
        RedisSnowflake::new(conn, config)
    }

    /// The configuration.
    pub fn config(&self) -> &RedisSnowflakeConfig {
        &self.config
    }

    /// The Redis key holding the node's last tick.
    pub fn last_tick_key(&self) -> &str {
        &self.last_key
    }

    /// The next ID.
    ///
    /// # Errors
    /// See [`RedisSnowflake::next_ids`].
    pub async fn next_id(&self) -> Result<Id> {
        let batch = self.next_ids(1).await?;
        batch
            .first()
            .ok_or_else(|| bad_reply("snowflake", "an empty batch of 1".to_owned()))
    }

    /// The next `n_ids` IDs, increasing, as runs (one per tick used). A batch
    /// larger than a tick's sequence waits for the following ticks.
    ///
    /// # Errors
    /// - [`SegmentError::InvalidCount`] for 0 or more than
    ///   [`MAX_IDS_PER_CALL`](super::MAX_IDS_PER_CALL).
    /// - `SegmentError::Core(idmint_core::Error::ClockBehind { .. })` when
    ///   Redis's clock is behind the node's last tick by more than the wait
    ///   bound; `ClockBeforeEpoch` and `LayoutExhausted` when Redis's clock is
    ///   outside the layout.
    /// - [`SegmentError::Timeout`] when a Redis call times out, or Redis's clock
    ///   does not reach the next tick within the tick wait.
    /// - [`SegmentError::Backend`] when Redis fails.
    ///
    /// IDs reserved by earlier rounds of a failing call are not returned and
    /// never issued again.
    pub async fn next_ids(&self, n_ids: u64) -> Result<IdBatch> {
        check_count(n_ids)?;
        let mut batch = IdBatch::new();
        let mut left = n_ids;
        let mut clock_waited = Duration::ZERO;
        let tick_wait = self.config.tick_wait();
        let mut tick_deadline = Instant::now() + tick_wait;
        loop {
            match self.step(left).await? {
                Step::Issued(run) => {
                    left -= run.count();
                    batch.try_push(run)?;
                    if left == 0 {
                        return Ok(batch);
                    }
                    tick_deadline = Instant::now() + tick_wait;
                }
                Step::TickUsedUp { wait } => {
                    if Instant::now() + wait > tick_deadline {
                        return Err(SegmentError::Timeout {
                            store: super::KIND,
                            operation: "snowflake: waiting for the next tick",
                            after: tick_wait,
                        });
                    }
                    tokio::time::sleep(wait).await;
                }
                Step::ClockBehind { behind } => {
                    let allowed = self.config.clock_behind_wait;
                    if clock_waited + behind > allowed {
                        return Err(SegmentError::Core(idmint_core::Error::ClockBehind {
                            behind,
                            policy: if allowed.is_zero() { "fail" } else { "wait" },
                            allowed,
                        }));
                    }
                    clock_waited += behind;
                    tokio::time::sleep(behind).await;
                }
            }
        }
    }

    /// One script call for up to `n_ids` IDs.
    async fn step(&self, n_ids: u64) -> Result<Step> {
        let layout = &self.config.layout;
        let unit_ms = u64::try_from(layout.unit().as_millis()).unwrap_or(u64::MAX);
        let epoch_ms = layout.epoch().as_millisecond();
        let ttl_ms = millis_at_least_one(layout.unit()) + 1000;
        // Never ask for more than a tick holds: the rest comes from later ticks.
        let wanted = n_ids.min(layout.ids_per_tick());
        let reply: Vec<i64> = self
            .conn
            .call("snowflake", self.config.timeout, |mut conn| {
                let mut invocation = self.script.prepare_invoke();
                invocation
                    .key(&self.last_key)
                    .arg(&self.tick_key_prefix)
                    .arg(epoch_ms)
                    .arg(unit_ms)
                    .arg(layout.ticks())
                    .arg(layout.ids_per_tick())
                    .arg(self.config.node_value())
                    .arg(self.shifts.time)
                    .arg(self.shifts.node)
                    .arg(self.shifts.sequence)
                    .arg(wanted)
                    .arg(ttl_ms);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        let value = |i: usize| -> Result<u64> {
            reply
                .get(i)
                .and_then(|&v| u64::try_from(v).ok())
                .ok_or_else(|| bad_reply("snowflake", format!("unexpected script reply {reply:?}")))
        };
        let (code, sec, usec) = (value(0)?, value(1)?, value(2)?);
        let now_us = sec.saturating_mul(1_000_000).saturating_add(usec);
        let now = i64::try_from(now_us)
            .ok()
            .and_then(|us| Timestamp::from_microsecond(us).ok())
            .ok_or_else(|| {
                bad_reply(
                    "snowflake",
                    format!("redis TIME {sec}.{usec:06} is out of range"),
                )
            })?;
        // The instant (µs since the Unix epoch) a tick starts at.
        let tick_start_us = |tick: u64| -> u64 {
            let ms = (epoch_ms as u64).saturating_add(tick.saturating_mul(unit_ms));
            ms.saturating_mul(1000)
        };
        match code {
            0 => {
                let (tick, first_seq, count) = (value(3)?, value(4)?, value(5)?);
                let from_redis = (value(6)? << 32) | value(7)?;
                let parts = IdParts {
                    tick,
                    datacenter: self.config.datacenter,
                    worker: self.config.worker,
                    rollback: 0,
                    sequence: u32::try_from(first_seq).map_err(|_| {
                        bad_reply("snowflake", format!("sequence {first_seq} out of range"))
                    })?,
                };
                let expected = layout.compose(parts)?;
                if expected.get() != from_redis || count == 0 || count > wanted {
                    return Err(bad_reply(
                        "snowflake",
                        format!(
                            "script composed {from_redis} ({count} IDs) for tick {tick}, \
                             sequence {first_seq}; the layout composes {expected}"
                        ),
                    ));
                }
                let stride = 1u64 << self.shifts.sequence;
                Ok(Step::Issued(IdRun::try_new(expected, count, stride)?))
            }
            1 => {
                let next = tick_start_us(value(3)?.saturating_add(1));
                let wait = Duration::from_micros(next.saturating_sub(now_us).max(100));
                Ok(Step::TickUsedUp { wait })
            }
            2 => Err(SegmentError::Core(idmint_core::Error::ClockBeforeEpoch {
                now,
                epoch: layout.epoch(),
            })),
            3 => Err(SegmentError::Core(idmint_core::Error::LayoutExhausted {
                ran_out_at: layout.runs_out_at().unwrap_or(Timestamp::MAX),
            })),
            4 => {
                let last_start = tick_start_us(value(3)?);
                let behind = Duration::from_micros(last_start.saturating_sub(now_us).max(1));
                Ok(Step::ClockBehind { behind })
            }
            other => Err(bad_reply(
                "snowflake",
                format!("unexpected script reply code {other}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idmint_core::LayoutSpec;

    #[test]
    fn shifts_match_the_layouts_composition() {
        for &(name, layout) in Layout::PRESETS {
            let s = Shifts::of(&layout);
            let parts = IdParts {
                tick: 12_345,
                datacenter: layout.max_datacenter(),
                worker: layout.max_worker() / 3,
                rollback: 0,
                sequence: 5,
            };
            let node =
                (u64::from(parts.datacenter) << layout.worker_bits()) | u64::from(parts.worker);
            let by_shifts = (parts.tick << s.time) | (node << s.node) | (5u64 << s.sequence);
            assert_eq!(layout.compose(parts).unwrap().get(), by_shifts, "{name}");
        }
    }

    #[test]
    fn node_is_checked_against_the_layout() {
        let err = RedisSnowflakeConfig::new(Layout::TWITTER, 32)
            .validate()
            .unwrap_err();
        assert!(
            matches!(
                err,
                SegmentError::Core(idmint_core::Error::NodeOutOfRange {
                    field: "worker",
                    value: 32,
                    max: 31
                })
            ),
            "{err:?}"
        );
        let err = RedisSnowflakeConfig::new(Layout::TWITTER, 1)
            .with_datacenter(32)
            .validate()
            .unwrap_err();
        assert!(matches!(
            err,
            SegmentError::Core(idmint_core::Error::NodeOutOfRange {
                field: "datacenter",
                ..
            })
        ));
        assert!(
            RedisSnowflakeConfig::new(Layout::TWITTER, 31)
                .with_datacenter(31)
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn tick_wait_defaults_to_a_tick_plus_a_second() {
        let layout = LayoutSpec::new(40, "2024-01-01T00:00:00Z".parse().unwrap(), 12)
            .with_unit(Duration::from_millis(10))
            .build()
            .unwrap();
        let config = RedisSnowflakeConfig::new(layout, 0);
        assert_eq!(config.tick_wait(), Duration::from_millis(1010));
        assert_eq!(
            config.with_tick_wait(Duration::from_millis(50)).tick_wait(),
            Duration::from_millis(50)
        );
    }
}
