//! [`DailySerial`]: serials like `ORD20261121000042`, a per-day counter in Redis.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use idmint_core::Id;
use jiff::civil::Date;
use jiff::tz::Offset;
use redis::Script;

use super::{
    DEFAULT_KEY_PREFIX, DEFAULT_TIMEOUT, RedisConnection, bad_reply, check_count, check_key_prefix,
    check_timeout,
};
use crate::error::{Result, SegmentError};
use crate::store::validate_key;

/// ARGV: 1 the day keys' prefix, 2 the UTC offset in seconds, 3 serials
/// wanted, 4 the largest counter (10^width − 1), 5 the key TTL in seconds.
/// Returns `{0, YYYYMMDD, last counter}` or `{1, YYYYMMDD, counter now}` when
/// the day's counter has no room.
///
/// The date is Howard Hinnant's `civil_from_days`, on exact integers (all
/// values stay far below 2^53).
const SERIAL_LUA: &str = r"
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
local key = ARGV[1] .. string.format('%.0f', ymd)
local n, max = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = tonumber(redis.call('GET', key) or '0')
if now + n > max then return {1, ymd, now} end
local last = redis.call('INCRBY', key, n)
if now == 0 then redis.call('EXPIRE', key, ARGV[5]) end
return {0, ymd, last}
";

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
/// issued past the width.
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
        Ok(DailySerial {
            conn,
            config,
            script: Script::new(SERIAL_LUA),
        })
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
        let (code, ymd, counter): (i64, i64, i64) = self
            .conn
            .call("daily serial", self.config.timeout, |mut conn| {
                let mut invocation = self.script.prepare_invoke();
                invocation.arg(&base).arg(offset).arg(n).arg(max).arg(ttl);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        let day = date_of(ymd)?;
        let counter = u64::try_from(counter)
            .map_err(|_| bad_reply("daily serial", format!("counter {counter} is negative")))?;
        match code {
            0 if counter >= n && counter <= max => Ok(SerialBatch {
                id_prefix: self.config.id_prefix.to_string(),
                day,
                first: counter - n + 1,
                count: n,
                width: self.config.width,
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
