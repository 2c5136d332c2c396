//! [`DailySerial`]: serials like `ORD20261121000042`, a per-day counter in Redis.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use idmint_core::Id;
use jiff::civil::Date;
use jiff::tz::Offset;
use redis::Script;

use super::{
    DEFAULT_KEY_PREFIX, DEFAULT_TIMEOUT, KIND, RedisConnection, bad_reply, check_count,
    check_key_prefix, check_timeout,
};
use crate::error::{Result, SegmentError};
use crate::store::StoreEpoch;
use crate::store::validate_key;

/// The day arithmetic both scripts share: `ymd` (YYYYMMDD) of Redis's `TIME`
/// at the UTC offset ARGV[2]. Howard Hinnant's `civil_from_days`, on exact
/// integers (all values stay far below 2^53).
const DAY_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local days = math.floor((tonumber(t[1]) + tonumber(ARGV[2])) / 86400)
local z = days + 719468
local era = math.floor(z / 146097)
local doe = z - era * 146097
local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
  - math.floor(doe / 146096)) / 365)
local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
local mp = math.floor((5 * doy + 2) / 153)
local d = doy - math.floor((153 * mp + 2) / 5) + 1
local m = mp < 10 and mp + 3 or mp - 9
local y = yoe + era * 400
if m <= 2 then y = y + 1 end
local ymd = y * 10000 + m * 100 + d
";

/// After [`DAY_LUA`]. ARGV: 1 the day keys' prefix, 2 the UTC offset in
/// seconds, 3 serials wanted, 4 the largest counter (10^width − 1), 5 the key
/// TTL in seconds, 6 the serials' epoch marker key, 7 the epoch this
/// process remembers ('' none), 8 the epoch to write when there is none and
/// none is remembered, 9 the day (YYYYMMDD) of the last serial this process
/// returned for the key ('' none), 10 that serial's counter.
/// Returns `{0, YYYYMMDD, last counter, epoch}`, `{1, YYYYMMDD, counter now,
/// epoch}` when the day's counter has no room, `{2, 0, 0, the epoch found or
/// ''}` (reset: nothing changed) or `{3, YYYYMMDD, counter now, epoch}` (the
/// day's counter is below the last serial returned on it, or gone for a day
/// before it: nothing changed).
const SERIAL_LUA: &str = r"
local epoch = redis.call('GET', ARGV[6])
if ARGV[7] ~= '' then
  if epoch ~= ARGV[7] then return {2, 0, 0, epoch or ''} end
elseif not epoch then
  if ARGV[9] ~= '' then return {2, 0, 0, ''} end
  redis.call('SET', ARGV[6], ARGV[8])
  epoch = ARGV[8]
end
local key = ARGV[1] .. string.format('%.0f', ymd)
local n, max = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = tonumber(redis.call('GET', key) or '0')
if ARGV[9] ~= '' then
  local day = tonumber(ARGV[9])
  if (ymd == day and now < tonumber(ARGV[10])) or (ymd < day and now == 0) then
    return {3, ymd, now, epoch}
  end
end
if now + n > max then return {1, ymd, now, epoch} end
local last = redis.call('INCRBY', key, n)
if now == 0 then redis.call('EXPIRE', key, ARGV[5]) end
return {0, ymd, last, epoch}
";

/// After [`DAY_LUA`]. ARGV: 1 the day keys' prefix, 2 the UTC offset, 3 the
/// day (YYYYMMDD) to raise, 4 the counter to raise it to, 5 the key TTL in
/// seconds, 6 the epoch marker key, 7 the epoch to write when there is none.
/// Returns the epoch in place.
const RAISE_LUA: &str = r"
local key = ARGV[1] .. ARGV[3]
local now = tonumber(redis.call('GET', key) or '0')
if now < tonumber(ARGV[4]) then
  redis.call('SET', key, ARGV[4])
  redis.call('EXPIRE', key, ARGV[5])
end
redis.call('SETNX', ARGV[6], ARGV[7])
return redis.call('GET', ARGV[6])
";

/// What a [`DailySerial`] remembers: the serials' epoch marker and, per key,
/// the day and counter of the last serial it returned. Keep it across
/// restarts and hand it to the next run ([`DailySerial::with_memory`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SerialMemory {
    /// The epoch marker as seen; `None` before one was seen.
    pub epoch: Option<StoreEpoch>,
    /// Per key: the day and counter of the last serial returned.
    pub last: BTreeMap<String, (Date, u64)>,
}

/// The widest counter: 10^15 − 1 is the largest that Lua's doubles count
/// exactly with room to spare.
const MAX_WIDTH: u32 = 15;

/// The longest ID prefix.
const MAX_ID_PREFIX_LEN: usize = 64;

/// Configuration of a [`DailySerial`] (builder-lite: [`DailySerialConfig::new`]
/// plus `with_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailySerialConfig {
    width: u32,
    id_prefix: Cow<'static, str>,
    utc_offset: Offset,
    ttl: Duration,
    key_prefix: Cow<'static, str>,
    timeout: Duration,
}

impl DailySerialConfig {
    /// The key TTL used unless set: 7 days, so a Redis clock that steps back
    /// across midnight by up to 6 days still finds the earlier day's counter.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(7 * 86_400);

    /// Serials with a counter of `width` digits (1 to 15), no ID prefix, days in
    /// UTC.
    pub const fn new(width: u32) -> DailySerialConfig {
        DailySerialConfig {
            width,
            id_prefix: Cow::Borrowed(""),
            utc_offset: Offset::UTC,
            ttl: Self::DEFAULT_TTL,
            key_prefix: Cow::Borrowed(DEFAULT_KEY_PREFIX),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Text put before the date (up to 64 ASCII letters, digits and `-_.:/#`).
    #[must_use]
    pub fn with_id_prefix(mut self, prefix: impl Into<String>) -> DailySerialConfig {
        self.id_prefix = Cow::Owned(prefix.into());
        self
    }

    /// The UTC offset whose date the serials carry (default UTC).
    #[must_use]
    pub const fn with_utc_offset(mut self, offset: Offset) -> DailySerialConfig {
        self.utc_offset = offset;
        self
    }

    /// How long a day's counter key lives after its first serial; more than a
    /// day (default [`Self::DEFAULT_TTL`]). If Redis's clock steps back to a
    /// day whose key has expired, that day counts from 1 again, so keep it well
    /// above any clock error.
    #[must_use]
    pub const fn with_ttl(mut self, ttl: Duration) -> DailySerialConfig {
        self.ttl = ttl;
        self
    }

    /// Keys go under `prefix`.
    #[must_use]
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> DailySerialConfig {
        self.key_prefix = Cow::Owned(prefix.into());
        self
    }

    /// How long each call may take before it fails with
    /// [`SegmentError::Timeout`].
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> DailySerialConfig {
        self.timeout = timeout;
        self
    }

    /// The counter's width in digits.
    pub const fn width(&self) -> u32 {
        self.width
    }

    /// The text before the date.
    pub fn id_prefix(&self) -> &str {
        &self.id_prefix
    }

    /// The UTC offset of the date.
    pub const fn utc_offset(&self) -> Offset {
        self.utc_offset
    }

    /// The day keys' TTL.
    pub const fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The timeout of each call.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The largest counter: `10^width − 1`.
    pub const fn max_counter(&self) -> u64 {
        10u64.pow(self.width) - 1
    }

    fn validate(&self) -> Result<()> {
        let spec = |field, reason: String| Err(SegmentError::InvalidSpec { field, reason });
        if !(1..=MAX_WIDTH).contains(&self.width) {
            return spec(
                "width",
                format!("{} digits is not in 1..={MAX_WIDTH}", self.width),
            );
        }
        if self.id_prefix.len() > MAX_ID_PREFIX_LEN {
            return spec(
                "id prefix",
                format!("is longer than {MAX_ID_PREFIX_LEN} bytes"),
            );
        }
        if let Some(c) = self
            .id_prefix
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "-_.:/#".contains(*c)))
        {
            return spec(
                "id prefix",
                format!("{c:?} is not allowed; use letters, digits and -_.:/#"),
            );
        }
        if self.ttl <= Duration::from_secs(86_400) {
            return spec("ttl", format!("{:?} is not more than a day", self.ttl));
        }
        check_key_prefix(&self.key_prefix)?;
        check_timeout(self.timeout)
    }
}

/// One serial: `{id prefix}{YYYYMMDD}{counter}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Serial {
    text: String,
    day: Date,
    counter: u64,
}

impl Serial {
    fn new(id_prefix: &str, day: Date, counter: u64, width: u32) -> Serial {
        let text = format!(
            "{id_prefix}{:04}{:02}{:02}{counter:0width$}",
            day.year(),
            day.month(),
            day.day(),
            width = width as usize
        );
        Serial { text, day, counter }
    }

    /// The serial as text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The serial as text, owned.
    pub fn into_string(self) -> String {
        self.text
    }

    /// The day it was issued on (at the configured UTC offset).
    pub fn day(&self) -> Date {
        self.day
    }

    /// The day's counter value, from 1.
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// The serial as a number, when its text is one that fits a `u64` and
    /// prints back the same: all digits, no leading zero, at most
    /// `u64::MAX`. `None` for an ID prefix with letters, a prefix starting
    /// with `0`, or a number too large.
    pub fn as_u64(&self) -> Option<u64> {
        let text = self.text.as_bytes();
        if text.first() == Some(&b'0') || !text.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.text.parse().ok()
    }

    /// The serial as an [`Id`] (a positive `i64`), when [`Serial::as_u64`]
    /// gives a number below 2^63.
    pub fn as_id(&self) -> Option<Id> {
        self.as_u64().and_then(|v| Id::new(v).ok())
    }
}

impl fmt::Display for Serial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Consecutive serials of one day, reserved together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerialBatch {
    id_prefix: String,
    day: Date,
    first: u64,
    count: u64,
    width: u32,
}

impl SerialBatch {
    /// The day.
    pub fn day(&self) -> Date {
        self.day
    }

    /// The first counter value.
    pub fn first_counter(&self) -> u64 {
        self.first
    }

    /// How many serials.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Always false: a batch holds at least one serial.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The first serial.
    pub fn first(&self) -> Serial {
        Serial::new(&self.id_prefix, self.day, self.first, self.width)
    }

    /// The last serial.
    pub fn last(&self) -> Serial {
        Serial::new(
            &self.id_prefix,
            self.day,
            self.first + self.count - 1,
            self.width,
        )
    }

    /// Every serial, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Serial> + '_ {
        (0..self.count as usize)
            .map(move |i| Serial::new(&self.id_prefix, self.day, self.first + i as u64, self.width))
    }
}

/// Daily serials from Redis.
///
/// - **Unique** per (Redis, key prefix, key, day): each counter value is taken
///   by one atomic script. Different widths or ID prefixes on one key share the
///   counter.
/// - **Increasing** within a day, in the order Redis runs the calls; the
///   counter starts at 1 each day. Serials of consecutive days sort by day
///   when the ID prefix and width are fixed.
/// - **Full day**: when a day's counter would need more than `width` digits,
///   the call fails with [`SegmentError::SerialOverflow`] and issues nothing
///   (a batch that does not fit whole is refused whole).
/// - **Redis's clock decides the day.** A step back within a day changes
///   nothing; a step back across midnight issues more serials of the earlier
///   day, continuing its counter while its key lives (the TTL, default 7 days).
///   Serials are unique as long as the day's key survives.
/// - **Redis down or slow**: the call fails with [`SegmentError::Timeout`] or
///   [`SegmentError::Backend`] and issues nothing.
/// - **A Redis that forgot** (restarted without persistence, failed over to
///   a lagging replica) would count the day from 1 again. The serials refuse
///   instead when they can tell: they remember the epoch marker
///   (`{prefix}serial:epoch`, written by the first to use the prefix) and,
///   per key, the last serial returned; a marker gone or different fails
///   with [`SegmentError::StoreReset`], a day's counter below the last serial
///   returned on it (or gone, for a day before it) with
///   [`SegmentError::KeyBelowFloor`], and nothing is changed. The memory is
///   the process's; hand it over across restarts with
///   [`DailySerial::memory`] and [`DailySerial::with_memory`].
///   [`DailySerial::raise`] is the way back.
/// - **Thread-safe**: share it behind an `Arc`.
///
/// A serial is `{id prefix}{YYYYMMDD}{counter}`, the counter zero-padded to a
/// fixed width and starting at 1 each day. The day is the date of Redis's
/// `TIME` at a configured UTC offset, and each day counts in its own key
/// `{prefix}serial:{key}:{YYYYMMDD}`, which expires after a TTL of more than a
/// day.
///
/// # The script, and why it is atomic
///
/// `SERIAL_LUA` reads `TIME`, computes the date, checks that the day's counter
/// has room for the serials asked for, and `INCRBY`s it, all in one script:
/// the day an increment counts in is the day Redis read in the same atomic
/// step, so there is no race at midnight (a client can't read one day and
/// increment the next day's counter), and two clients never get the same
/// counter value. A full counter is left as it is and reported; nothing is
/// issued past the width. The epoch and the last serial returned are checked
/// in the same script, before anything is written.
///
/// # Examples
///
/// ```no_run
/// use idmint_segment::redis::{DailySerial, DailySerialConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = DailySerialConfig::new(6).with_id_prefix("ORD");
/// let serials = DailySerial::connect("redis://127.0.0.1:6379/", config).await?;
/// let serial = serials.next("order").await?;
/// println!("{serial}"); // ORD20261121000001
/// assert_eq!(serial.as_u64(), None, "letters in the prefix");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct DailySerial {
    conn: RedisConnection,
    config: DailySerialConfig,
    script: Script,
    raise_script: Script,
    memory: Mutex<SerialMemory>,
}

impl DailySerial {
    /// Daily serials on `conn`. Does no I/O.
    ///
    /// # Errors
    /// [`SegmentError::InvalidSpec`] for a width outside 1..=15, a bad ID prefix
    /// or a TTL of a day or less; [`SegmentError::Config`] for a bad key prefix
    /// or timeout.
    pub fn new(conn: RedisConnection, config: DailySerialConfig) -> Result<DailySerial> {
        config.validate()?;
        conn.check_prefix(&config.key_prefix)?;
        Ok(DailySerial {
            conn,
            config,
            script: Script::new(&format!("{DAY_LUA}{SERIAL_LUA}")),
            raise_script: Script::new(&format!("{DAY_LUA}{RAISE_LUA}")),
            memory: Mutex::new(SerialMemory::default()),
        })
    }

    /// Starts from what an earlier run remembered ([`DailySerial::memory`]):
    /// the serials then refuse a Redis that lost its marker, or a day's
    /// counter below the last serial returned on it.
    #[must_use]
    pub fn with_memory(self, memory: SerialMemory) -> DailySerial {
        *self.remembered() = memory;
        self
    }

    /// What these serials remember: the epoch marker seen and, per key, the
    /// last serial returned. Keep it across restarts.
    pub fn memory(&self) -> SerialMemory {
        self.remembered().clone()
    }

    /// The Redis key holding the serials' epoch marker (a day's counter is
    /// `serial:{key}:{YYYYMMDD}`, so never `serial:epoch`).
    pub fn epoch_key(&self) -> String {
        format!("{}serial:epoch", self.config.key_prefix)
    }

    /// The way back after Redis forgot: raises `key`'s counter for `day` to
    /// at least `above` (and the last serial these serials returned on that
    /// day), so the next serial of that day counts from above it; writes an
    /// epoch marker when the prefix has none, and adopts the marker in place.
    ///
    /// # Errors
    /// [`SegmentError::InvalidKey`] for a bad key name,
    /// [`SegmentError::InvalidSpec`] for `above` at or past the largest
    /// counter, and [`SegmentError::Timeout`] and [`SegmentError::Backend`]
    /// when Redis fails.
    pub async fn raise(&self, key: &str, day: Date, above: u64) -> Result<()> {
        validate_key(key)?;
        if above >= self.config.max_counter() {
            return Err(SegmentError::InvalidSpec {
                field: "above",
                reason: format!(
                    "{above} leaves no counter of {} digits above it",
                    self.config.width
                ),
            });
        }
        let last = match self.remembered().last.get(key) {
            Some(&(d, counter)) if d == day => counter,
            _ => 0,
        };
        let base = format!("{}serial:{key}:", self.config.key_prefix);
        let ymd = format!("{:04}{:02}{:02}", day.year(), day.month(), day.day());
        let (offset, ttl) = (self.config.utc_offset.seconds(), self.config.ttl.as_secs());
        let epoch_key = self.epoch_key();
        let fresh = StoreEpoch::generate();
        let epoch: String = self
            .conn
            .call("daily serial raise", self.config.timeout, |mut conn| {
                let mut invocation = self.raise_script.prepare_invoke();
                // Declared (the script reads it from ARGV) so that a Redis
                // Cluster runs the script on the node of the prefix's slot.
                invocation
                    .key(&epoch_key)
                    .arg(&base)
                    .arg(offset)
                    .arg(&ymd)
                    .arg(above.max(last))
                    .arg(ttl)
                    .arg(&epoch_key)
                    .arg(fresh.as_str());
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        let epoch = epoch.parse().map_err(|e| {
            bad_reply(
                "daily serial raise",
                format!("key {epoch_key} holds {epoch:?}: {e}"),
            )
        })?;
        self.remembered().epoch = Some(epoch);
        Ok(())
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, SerialMemory> {
        // No critical section can leave the record half-changed.
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connects to `url` (within the config's timeout) and makes the serials.
    ///
    /// # Errors
    /// Those of [`RedisConnection::connect`] and [`DailySerial::new`].
    pub async fn connect(url: &str, config: DailySerialConfig) -> Result<DailySerial> {
        config.validate()?;
        let conn = RedisConnection::connect(url, config.timeout).await?;
        DailySerial::new(conn, config)
    }

    /// The configuration.
    pub fn config(&self) -> &DailySerialConfig {
        &self.config
    }

    /// The Redis key counting `key`'s serials on `day`.
    pub fn redis_key(&self, key: &str, day: Date) -> String {
        format!(
            "{}serial:{key}:{:04}{:02}{:02}",
            self.config.key_prefix,
            day.year(),
            day.month(),
            day.day()
        )
    }

    /// The next serial for `key`.
    ///
    /// # Errors
    /// See [`DailySerial::next_batch`].
    pub async fn next(&self, key: &str) -> Result<Serial> {
        Ok(self.next_batch(key, 1).await?.first())
    }

    /// The next `n` serials for `key`, consecutive, of one day.
    ///
    /// # Errors
    /// - [`SegmentError::InvalidKey`] for a bad key name and
    ///   [`SegmentError::InvalidCount`] for 0 or more than
    ///   [`MAX_IDS_PER_CALL`](super::MAX_IDS_PER_CALL).
    /// - [`SegmentError::SerialOverflow`] when the day's counter has no room for
    ///   all of them.
    /// - [`SegmentError::Timeout`] and [`SegmentError::Backend`] when Redis fails.
    pub async fn next_batch(&self, key: &str, n: u64) -> Result<SerialBatch> {
        validate_key(key)?;
        check_count(n)?;
        let base = format!("{}serial:{key}:", self.config.key_prefix);
        let offset = self.config.utc_offset.seconds();
        let max = self.config.max_counter();
        let ttl = self.config.ttl.as_secs();
        let (expected, last) = {
            let memory = self.remembered();
            (memory.epoch.clone(), memory.last.get(key).copied())
        };
        let expected_arg = expected.as_ref().map_or("", StoreEpoch::as_str);
        let (last_day, last_counter) = match last {
            Some((day, counter)) => (
                format!("{:04}{:02}{:02}", day.year(), day.month(), day.day()),
                counter.to_string(),
            ),
            None => (String::new(), String::new()),
        };
        let epoch_key = self.epoch_key();
        let fresh = StoreEpoch::generate();
        let (code, ymd, counter, epoch): (i64, i64, i64, String) = self
            .conn
            .call("daily serial", self.config.timeout, |mut conn| {
                let mut invocation = self.script.prepare_invoke();
                // Declared for a Redis Cluster's routing, as in the raise.
                invocation
                    .key(&epoch_key)
                    .arg(&base)
                    .arg(offset)
                    .arg(n)
                    .arg(max)
                    .arg(ttl)
                    .arg(&epoch_key)
                    .arg(expected_arg)
                    .arg(fresh.as_str())
                    .arg(&last_day)
                    .arg(&last_counter);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        if code == 2 {
            let floors = self
                .remembered()
                .last
                .iter()
                .map(|(k, &(_, counter))| (k.clone(), counter + 1))
                .collect();
            return Err(SegmentError::StoreReset {
                store: KIND,
                remembered: expected.map(|e| e.to_string()),
                found: (!epoch.is_empty()).then_some(epoch),
                floors,
            });
        }
        let day = date_of(ymd)?;
        let counter = u64::try_from(counter)
            .map_err(|_| bad_reply("daily serial", format!("counter {counter} is negative")))?;
        match code {
            0 if counter >= n && counter <= max => {
                let mut memory = self.remembered();
                if memory
                    .last
                    .get(key)
                    .is_none_or(|&seen| seen < (day, counter))
                {
                    memory.last.insert(key.to_owned(), (day, counter));
                }
                if memory.epoch.is_none() {
                    memory.epoch = epoch.parse().ok();
                }
                Ok(SerialBatch {
                    id_prefix: self.config.id_prefix.to_string(),
                    day,
                    first: counter - n + 1,
                    count: n,
                    width: self.config.width,
                })
            }
            // The day's counter is below the last serial returned on it: the
            // floor is that serial's counter plus one, on its day.
            3 => Err(SegmentError::KeyBelowFloor {
                store: KIND,
                key: format!("{key} on {ymd:08}"),
                floor: last.map_or(1, |(_, c)| c + 1),
                found: Some(counter + 1),
            }),
            1 => Err(SegmentError::SerialOverflow {
                key: key.to_owned(),
                day: format!("{ymd:08}"),
                counter: counter + n,
                width: self.config.width,
            }),
            _ => Err(bad_reply(
                "daily serial",
                format!("unexpected script reply ({code}, {ymd}, {counter})"),
            )),
        }
    }
}

/// `YYYYMMDD` as a date.
fn date_of(ymd: i64) -> Result<Date> {
    let part = |v: i64| i8::try_from(v).ok();
    let date = i16::try_from(ymd / 10_000).ok().and_then(|y| {
        let (m, d) = (part(ymd / 100 % 100)?, part(ymd % 100)?);
        Date::new(y, m, d).ok()
    });
    date.ok_or_else(|| bad_reply("daily serial", format!("{ymd} is not a date YYYYMMDD")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_are_zero_padded_and_numbers_only_when_they_round_trip() {
        let day = Date::new(2026, 11, 21).unwrap();
        let s = Serial::new("", day, 42, 6);
        assert_eq!(s.as_str(), "20261121000042");
        assert_eq!(s.as_u64(), Some(20_261_121_000_042));
        assert_eq!(s.as_id().map(Id::get), Some(20_261_121_000_042));
        assert_eq!(Serial::new("ORD", day, 1, 4).as_str(), "ORD202611210001");
        assert_eq!(Serial::new("ORD", day, 1, 4).as_u64(), None);
        assert_eq!(Serial::new("0", day, 1, 4).as_u64(), None, "leading zero");
        assert_eq!(Serial::new("9", day, 7, 2).as_u64(), Some(92_026_112_107));
        // 8 + 12 = 20 digits: 2.0e19 is above u64::MAX (1.8e19).
        assert_eq!(Serial::new("", day, 1, 12).as_u64(), None);
        // 19 digits: fits u64 and i64.
        let s = Serial::new("", day, 1, 11);
        assert_eq!(s.as_u64(), Some(2_026_112_100_000_000_001));
        assert!(s.as_id().is_some());
        // 19 digits above i64::MAX: a u64, not an Id.
        let s = Serial::new("95", day, 1, 9);
        assert_eq!(s.as_u64(), Some(9_520_261_121_000_000_001));
        assert_eq!(s.as_id(), None);
    }

    #[test]
    fn config_is_checked() {
        assert!(DailySerialConfig::new(6).validate().is_ok());
        for bad in [
            DailySerialConfig::new(0),
            DailySerialConfig::new(16),
            DailySerialConfig::new(6).with_id_prefix("a b"),
            DailySerialConfig::new(6).with_ttl(Duration::from_secs(86_400)),
        ] {
            assert_eq!(
                bad.validate().unwrap_err().code(),
                "invalid_spec",
                "{bad:?}"
            );
        }
        assert_eq!(DailySerialConfig::new(2).max_counter(), 99);
        assert_eq!(
            DailySerialConfig::new(15).max_counter(),
            999_999_999_999_999
        );
    }

    #[test]
    fn dates_parse() {
        assert_eq!(
            date_of(20_261_121).unwrap(),
            Date::new(2026, 11, 21).unwrap()
        );
        assert!(date_of(20_261_321).is_err());
    }
}
