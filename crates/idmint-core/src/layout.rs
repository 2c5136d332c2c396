//! [`Layout`]: how the bits of a time-ordered ID are split, and everything that follows
//! from the split (capacity, run-out date, compose, decode).
//!
//! An ID of a layout is, from the most significant bit down, either
//! `time · node · sequence` (Twitter, Leaf, Baidu, Discord, Instagram) or
//! `time · sequence · node` (sonyflake). The node field is itself
//! `rollback · datacenter · worker`, high to low; the rollback and datacenter
//! parts may be zero bits wide.
//!
//! Invariants every [`Layout`] value upholds (checked once, in [`LayoutSpec::build`]):
//! - every ID it composes is below `2^max_bits`, with `max_bits <= 63`, so it is a
//!   positive `i64`;
//! - the time field has at least one usable bit, and its usable width is
//!   `min(time_bits, max_bits - node_bits - sequence_bits)`: a layout that declares
//!   more time bits than fit (Discord's 42) runs out when its IDs would pass
//!   `2^max_bits`, not later;
//! - node and sequence values fit in `u32`.

mod text;

use std::time::Duration;

use jiff::Timestamp;

use crate::error::{Error, Result};
use crate::id::Id;

const MS_PER_DAY: u32 = 86_400_000;
/// The latest epoch accepted: 2200-01-01T00:00:00Z.
const MAX_EPOCH_MS: i64 = 7_258_118_400_000;

/// The order of the sequence and node fields below the time field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FieldOrder {
    /// `time · node · sequence`: Twitter, Leaf, Baidu, Discord, Instagram.
    ///
    /// IDs of one tick are consecutive integers.
    #[default]
    TimeNodeSequence,
    /// `time · sequence · node`: sonyflake.
    ///
    /// IDs of one tick step by `2^node_bits`.
    TimeSequenceNode,
}

impl FieldOrder {
    /// The text form: `time-node-sequence` or `time-sequence-node`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FieldOrder::TimeNodeSequence => "time-node-sequence",
            FieldOrder::TimeSequenceNode => "time-sequence-node",
        }
    }
}

/// A validated split of a 63-bit (or narrower) ID into time, node and sequence fields.
///
/// Build one from a [`LayoutSpec`], take a preset ([`Layout::TWITTER`],
/// [`Layout::BAIDU`], ...), or parse the text form (see [`Layout::from_str`]).
///
/// # Examples
///
/// Decoding Discord's documented example ID:
///
/// ```
/// use idmint_core::Layout;
///
/// let parts = Layout::DISCORD.decode(175928847299117063)?;
/// assert_eq!(parts.time.to_string(), "2016-04-30T11:18:25.796Z");
/// // Discord calls these the internal worker and process IDs.
/// assert_eq!((parts.datacenter, parts.worker, parts.sequence), (1, 0, 7));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Capacity facts:
///
/// ```
/// use idmint_core::Layout;
///
/// let leaf = Layout::LEAF;
/// assert_eq!(leaf.ids_per_second_per_worker(), 4_096_000.0);
/// assert_eq!(leaf.workers(), 1024);
/// assert_eq!(leaf.runs_out_at().unwrap().to_string(), "2080-07-10T17:30:30.209Z");
/// ```
///
/// [`Layout::from_str`]: std::str::FromStr
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    time_bits: u8,
    unit_ms: u32,
    epoch_ms: i64,
    datacenter_bits: u8,
    worker_bits: u8,
    rollback_bits: u8,
    sequence_bits: u8,
    order: FieldOrder,
    max_bits: u8,
}

/// The fields of an ID, for [`Layout::compose`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdParts {
    /// Time units since the layout's epoch.
    pub tick: u64,
    /// The datacenter part of the node field.
    pub datacenter: u32,
    /// The worker part of the node field.
    pub worker: u32,
    /// The rollback counter part of the node field.
    pub rollback: u32,
    /// The sequence number within the tick.
    pub sequence: u32,
}

/// An ID taken apart by [`Layout::decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// The ID itself.
    pub id: Id,
    /// The start of the tick the ID was made in.
    pub time: Timestamp,
    /// Time units since the layout's epoch.
    pub tick: u64,
    /// The datacenter part of the node field (0 when the layout has none).
    pub datacenter: u32,
    /// The worker part of the node field.
    pub worker: u32,
    /// The rollback counter (0 when the layout has no rollback bits).
    pub rollback: u32,
    /// The sequence number within the tick.
    pub sequence: u32,
}

impl Decoded {
    /// The parts, ready to compose the same ID again.
    pub fn parts(&self) -> IdParts {
        IdParts {
            tick: self.tick,
            datacenter: self.datacenter,
            worker: self.worker,
            rollback: self.rollback,
            sequence: self.sequence,
        }
    }
}

/// A builder for a [`Layout`]; nothing is checked until [`LayoutSpec::build`].
///
/// Every field has to be set on purpose except those with an obvious neutral
/// value: the unit defaults to 1 ms, node parts to 0 bits, the order to
/// time·node·sequence and `max_bits` to 63.
///
/// # Examples
///
/// ```
/// use idmint_core::{Layout, LayoutSpec};
/// use std::time::Duration;
///
/// let layout = LayoutSpec::new(40, "2024-01-01T00:00:00Z".parse()?, 12)
///     .with_unit(Duration::from_millis(10))
///     .with_worker_bits(8)
///     .build()?;
/// assert_eq!(layout.workers(), 256);
/// assert_eq!(layout.to_string(),
///     "time=40,unit=10ms,epoch=2024-01-01T00:00:00Z,node=8,datacenter=0,rollback=0,sequence=12,order=time-node-sequence,max=63");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutSpec {
    time_bits: u8,
    unit_ms: u64,
    epoch_ms: i64,
    datacenter_bits: u8,
    worker_bits: u8,
    rollback_bits: u8,
    sequence_bits: u8,
    order: FieldOrder,
    max_bits: u8,
}

impl LayoutSpec {
    /// Starts a spec with the three fields that have no neutral value.
    pub fn new(time_bits: u8, epoch: Timestamp, sequence_bits: u8) -> LayoutSpec {
        LayoutSpec {
            time_bits,
            unit_ms: 1,
            epoch_ms: epoch.as_millisecond(),
            datacenter_bits: 0,
            worker_bits: 0,
            rollback_bits: 0,
            sequence_bits,
            order: FieldOrder::TimeNodeSequence,
            max_bits: 63,
        }
    }

    /// The time unit; a whole number of milliseconds from 1 ms to 1 day.
    pub fn with_unit(mut self, unit: Duration) -> LayoutSpec {
        // Sub-millisecond parts are kept so build() can reject them by name.
        self.unit_ms = if !unit.subsec_nanos().is_multiple_of(1_000_000) {
            0
        } else {
            u64::try_from(unit.as_millis()).unwrap_or(u64::MAX)
        };
        self
    }

    /// The epoch: the instant tick 0 starts at.
    pub fn with_epoch(mut self, epoch: Timestamp) -> LayoutSpec {
        self.epoch_ms = epoch.as_millisecond();
        self
    }

    /// Width of the time field in bits.
    pub fn with_time_bits(mut self, bits: u8) -> LayoutSpec {
        self.time_bits = bits;
        self
    }

    /// Width of the datacenter part of the node field.
    pub fn with_datacenter_bits(mut self, bits: u8) -> LayoutSpec {
        self.datacenter_bits = bits;
        self
    }

    /// Width of the worker part of the node field.
    pub fn with_worker_bits(mut self, bits: u8) -> LayoutSpec {
        self.worker_bits = bits;
        self
    }

    /// Width of the rollback counter, added to the node field.
    ///
    /// To carve the counter out of an existing node field instead, reduce the
    /// worker bits by the same amount (the text form's `rollback=` does that).
    pub fn with_rollback_bits(mut self, bits: u8) -> LayoutSpec {
        self.rollback_bits = bits;
        self
    }

    /// Width of the sequence field.
    pub fn with_sequence_bits(mut self, bits: u8) -> LayoutSpec {
        self.sequence_bits = bits;
        self
    }

    /// The order of the node and sequence fields.
    pub fn with_order(mut self, order: FieldOrder) -> LayoutSpec {
        self.order = order;
        self
    }

    /// IDs stay below `2^max_bits`; 63 (the default) for positive `i64`, 53 for
    /// IDs that JavaScript numbers hold exactly.
    pub fn with_max_bits(mut self, bits: u8) -> LayoutSpec {
        self.max_bits = bits;
        self
    }

    /// Checks the spec and makes the layout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidLayout`] naming the first field that is out of range or
    /// does not fit with the others.
    pub fn build(self) -> Result<Layout> {
        fn bad(field: &'static str, reason: String) -> Error {
            Error::InvalidLayout { field, reason }
        }
        if !(16..=63).contains(&self.max_bits) {
            return Err(bad(
                "max",
                format!("{} is out of range (16..=63 bits)", self.max_bits),
            ));
        }
        if !(1..=63).contains(&self.time_bits) {
            return Err(bad(
                "time",
                format!("{} bits is out of range (1..=63)", self.time_bits),
            ));
        }
        if !(1..=u64::from(MS_PER_DAY)).contains(&self.unit_ms) {
            return Err(bad(
                "unit",
                "must be a whole number of milliseconds from 1ms to 1 day".to_owned(),
            ));
        }
        if !(1..=31).contains(&self.sequence_bits) {
            return Err(bad(
                "sequence",
                format!("{} bits is out of range (1..=31)", self.sequence_bits),
            ));
        }
        if self.rollback_bits > 8 {
            return Err(bad(
                "rollback",
                format!("{} bits is out of range (0..=8)", self.rollback_bits),
            ));
        }
        let node_bits = u32::from(self.datacenter_bits)
            + u32::from(self.worker_bits)
            + u32::from(self.rollback_bits);
        if node_bits > 31 {
            return Err(bad(
                "node",
                format!("{node_bits} bits (datacenter + worker + rollback) is more than 31"),
            ));
        }
        let low_bits = node_bits + u32::from(self.sequence_bits);
        if low_bits >= u32::from(self.max_bits) {
            return Err(bad(
                "sequence",
                format!(
                    "node ({node_bits}) + sequence ({}) bits leave no time bits below 2^{}",
                    self.sequence_bits, self.max_bits
                ),
            ));
        }
        if u32::from(self.time_bits) + low_bits > 64 {
            return Err(bad(
                "time",
                format!(
                    "time ({}) + node ({node_bits}) + sequence ({}) bits is more than 64",
                    self.time_bits, self.sequence_bits
                ),
            ));
        }
        if !(0..=MAX_EPOCH_MS).contains(&self.epoch_ms) {
            return Err(bad(
                "epoch",
                format!(
                    "{} is out of range (1970-01-01 to 2200-01-01)",
                    Timestamp::from_millisecond(self.epoch_ms)
                        .map(|t| t.to_string())
                        .unwrap_or_else(|_| self.epoch_ms.to_string())
                ),
            ));
        }
        Ok(Layout {
            time_bits: self.time_bits,
            unit_ms: self.unit_ms as u32,
            epoch_ms: self.epoch_ms,
            datacenter_bits: self.datacenter_bits,
            worker_bits: self.worker_bits,
            rollback_bits: self.rollback_bits,
            sequence_bits: self.sequence_bits,
            order: self.order,
            max_bits: self.max_bits,
        })
    }
}

impl From<Layout> for LayoutSpec {
    fn from(l: Layout) -> LayoutSpec {
        LayoutSpec {
            time_bits: l.time_bits,
            unit_ms: u64::from(l.unit_ms),
            epoch_ms: l.epoch_ms,
            datacenter_bits: l.datacenter_bits,
            worker_bits: l.worker_bits,
            rollback_bits: l.rollback_bits,
            sequence_bits: l.sequence_bits,
            order: l.order,
            max_bits: l.max_bits,
        }
    }
}

/// Twitter's epoch, 2010-11-04T01:42:54.657Z, also used by Leaf.
const TWITTER_EPOCH_MS: i64 = 1_288_834_974_657;

impl Layout {
    /// Twitter Snowflake: 41 time bits of 1 ms, 5 datacenter + 5 worker bits,
    /// 12 sequence bits, epoch 2010-11-04T01:42:54.657Z. Runs out in 2080.
    ///
    /// # References
    /// twitter-archive/snowflake, `IdWorker.scala` (`twepoch = 1288834974657L`).
    pub const TWITTER: Layout = Layout::preset_tns(41, 1, TWITTER_EPOCH_MS, 5, 5, 12, 63);

    /// Meituan Leaf's snowflake mode: 41 time bits of 1 ms, 10 worker bits,
    /// 12 sequence bits, Twitter's epoch.
    ///
    /// # References
    /// Meituan-Dianping/Leaf, `SnowflakeIDGenImpl` (`twepoch = 1288834974657L`).
    pub const LEAF: Layout = Layout::preset_tns(41, 1, TWITTER_EPOCH_MS, 0, 10, 12, 63);

    /// Baidu uid-generator's default: 28 time bits of 1 s, 22 worker bits,
    /// 13 sequence bits, epoch 2016-05-19T16:00:00Z (Unix ms 1463673600000).
    ///
    /// The epoch is uid-generator's `epochSeconds` default, `1463673600000` ms:
    /// 2016-05-20 00:00 in China Standard Time (UTC+8), not midnight UTC. An
    /// `epochStr` set explicitly is parsed in the JVM's default time zone, so a
    /// deployment that set `epochStr = "2016-05-20"` on JVMs running in UTC has
    /// epoch `baidu,epoch=2016-05-20T00:00:00Z` instead, 8 hours later.
    ///
    /// This layout **ran out on 2024-11-20T13:24:16Z** (2024-11-20 21:24:16 at
    /// UTC+8, as uid-generator's own docs say): it still decodes old IDs but
    /// generators refuse to issue with it. Use it with a later epoch
    /// (`baidu,epoch=2024-01-01`) or move to a wider layout.
    ///
    /// # References
    /// baidu/uid-generator, `DefaultUidGenerator` (`timeBits = 28, workerBits = 22,
    /// seqBits = 13, epochStr = "2016-05-20"`, `epochSeconds =
    /// TimeUnit.MILLISECONDS.toSeconds(1463673600000L)`), `BitsAllocator.allocate`
    /// (`deltaSeconds << timestampShift | workerId << workerIdShift | sequence`)
    /// and `DateUtils.parseByDayPattern` (the JVM's default time zone); issue
    /// #100 on its expiry.
    pub const BAIDU: Layout = Layout::preset_tns(28, 1000, 1_463_673_600_000, 0, 22, 13, 63);

    /// Sony's sonyflake: 39 time bits of 10 ms, 8 sequence bits above 16 machine
    /// bits, epoch 2014-09-01T00:00:00Z.
    ///
    /// # References
    /// sony/sonyflake, `sonyflake.go` (`BitLenTime = 39, BitLenSequence = 8,
    /// BitLenMachineID = 16`, start time 2014-09-01 UTC).
    pub const SONYFLAKE: Layout = Layout {
        time_bits: 39,
        unit_ms: 10,
        epoch_ms: 1_409_529_600_000,
        datacenter_bits: 0,
        worker_bits: 16,
        rollback_bits: 0,
        sequence_bits: 8,
        order: FieldOrder::TimeSequenceNode,
        max_bits: 63,
    };

    /// Discord: 42 time bits of 1 ms, 5 + 5 node bits (Discord's internal worker
    /// and process IDs, here datacenter and worker), 12 sequence bits, epoch
    /// 2015-01-01T00:00:00Z.
    ///
    /// Discord declares 42 time bits over 64-bit IDs; kept below 2^63 the layout
    /// runs out on 2084-09-06, when a Discord ID would first need bit 63.
    ///
    /// # References
    /// Discord developer documentation, "Reference: Snowflakes".
    pub const DISCORD: Layout = Layout::preset_tns(42, 1, 1_420_070_400_000, 5, 5, 12, 63);

    /// Instagram's sharded IDs: 41 time bits of 1 ms, 13 shard bits (worker),
    /// 10 sequence bits, epoch 2011-08-24T21:07:01.721Z.
    ///
    /// # References
    /// Instagram Engineering, "Sharding & IDs at Instagram" (2012): the
    /// `next_id` PL/pgSQL function with `our_epoch bigint := 1314220021721`.
    pub const INSTAGRAM: Layout = Layout::preset_tns(41, 1, 1_314_220_021_721, 0, 13, 10, 63);

    /// IDs below 2^53 that JavaScript numbers hold exactly: 33 time bits of 1 s,
    /// 4 worker bits, 15 sequence bits (32,768 IDs a second per worker, 16
    /// workers), epoch 2024-01-01T00:00:00Z; the top bit of 53 stays clear.
    pub const JS53: Layout = Layout::preset_tns(33, 1000, 1_704_067_200_000, 0, 4, 15, 53);

    /// A timestamp oracle's layout, TiKV PD's and TiDB's TSO: 45 time bits of
    /// 1 ms since the Unix epoch above an 18-bit logical counter, no node
    /// bits. One issuer (the leader) hands these out in strictly increasing
    /// order, so they order events across a whole fleet; `decode` shows when
    /// each was made, and PD's TSOs decode as idmint's. Runs out in 3084.
    ///
    /// # References
    /// TiDB's `oracle` package: `physicalShiftBits = 18`,
    /// `ComposeTS(physical, logical) = (physical << physicalShiftBits) +
    /// logical`, physical in Unix milliseconds (`GetPhysical`).
    pub const TSO: Layout = Layout::preset_tns(45, 1, 0, 0, 0, 18, 63);

    /// The presets by name, in the order documentation lists them.
    pub const PRESETS: &'static [(&'static str, Layout)] = &[
        ("twitter", Layout::TWITTER),
        ("leaf", Layout::LEAF),
        ("baidu", Layout::BAIDU),
        ("sonyflake", Layout::SONYFLAKE),
        ("discord", Layout::DISCORD),
        ("instagram", Layout::INSTAGRAM),
        ("js53", Layout::JS53),
        ("tso", Layout::TSO),
    ];

    #[allow(clippy::too_many_arguments)]
    const fn preset_tns(
        time_bits: u8,
        unit_ms: u32,
        epoch_ms: i64,
        datacenter_bits: u8,
        worker_bits: u8,
        sequence_bits: u8,
        max_bits: u8,
    ) -> Layout {
        Layout {
            time_bits,
            unit_ms,
            epoch_ms,
            datacenter_bits,
            worker_bits,
            rollback_bits: 0,
            sequence_bits,
            order: FieldOrder::TimeNodeSequence,
            max_bits,
        }
    }

    /// The preset with this name (`twitter`, `leaf`, `baidu`, `sonyflake`,
    /// `discord`, `instagram`, `js53`, `tso`), case-insensitive.
    pub fn preset(name: &str) -> Option<Layout> {
        Layout::PRESETS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|&(_, l)| l)
    }

    /// The name of the preset this layout equals, if any.
    pub fn preset_name(&self) -> Option<&'static str> {
        Layout::PRESETS
            .iter()
            .find(|(_, l)| l == self)
            .map(|&(n, _)| n)
    }

    /// Declared width of the time field.
    pub fn time_bits(&self) -> u8 {
        self.time_bits
    }

    /// Usable width of the time field: the declared width, or less where the
    /// declared width would take IDs past `2^max_bits`.
    pub fn usable_time_bits(&self) -> u8 {
        self.time_bits.min(self.max_bits - self.low_bits())
    }

    /// The length of one tick.
    pub fn unit(&self) -> Duration {
        Duration::from_millis(u64::from(self.unit_ms))
    }

    /// The instant tick 0 starts at.
    pub fn epoch(&self) -> Timestamp {
        Timestamp::from_millisecond(self.epoch_ms).expect("epoch checked at build")
    }

    /// Width of the datacenter part of the node field.
    pub fn datacenter_bits(&self) -> u8 {
        self.datacenter_bits
    }

    /// Width of the worker part of the node field.
    pub fn worker_bits(&self) -> u8 {
        self.worker_bits
    }

    /// Width of the rollback counter in the node field.
    pub fn rollback_bits(&self) -> u8 {
        self.rollback_bits
    }

    /// Width of the whole node field (rollback + datacenter + worker).
    pub fn node_bits(&self) -> u8 {
        self.rollback_bits + self.datacenter_bits + self.worker_bits
    }

    /// Width of the sequence field.
    pub fn sequence_bits(&self) -> u8 {
        self.sequence_bits
    }

    /// The field order below the time field.
    pub fn order(&self) -> FieldOrder {
        self.order
    }

    /// IDs of this layout are below `2^max_bits`.
    pub fn max_bits(&self) -> u8 {
        self.max_bits
    }

    fn low_bits(&self) -> u8 {
        self.node_bits() + self.sequence_bits
    }

    /// IDs one worker can issue per tick: `2^sequence_bits`.
    pub fn ids_per_tick(&self) -> u64 {
        1 << self.sequence_bits
    }

    /// The layout's cap: IDs one worker can issue per second.
    pub fn ids_per_second_per_worker(&self) -> f64 {
        self.ids_per_tick() as f64 * 1000.0 / f64::from(self.unit_ms)
    }

    /// How many distinct (datacenter, worker) pairs the node field holds.
    pub fn workers(&self) -> u64 {
        1 << (self.datacenter_bits + self.worker_bits)
    }

    /// The largest datacenter value.
    pub fn max_datacenter(&self) -> u32 {
        ((1u64 << self.datacenter_bits) - 1) as u32
    }

    /// The largest worker value.
    pub fn max_worker(&self) -> u32 {
        ((1u64 << self.worker_bits) - 1) as u32
    }

    /// The number of ticks the time field holds.
    pub fn ticks(&self) -> u64 {
        1 << self.usable_time_bits()
    }

    /// The first instant the layout cannot represent, or `None` when that is
    /// after the year 9999.
    pub fn runs_out_at(&self) -> Option<Timestamp> {
        let end = i128::from(self.epoch_ms) + i128::from(self.ticks()) * i128::from(self.unit_ms);
        i64::try_from(end)
            .ok()
            .and_then(|ms| Timestamp::from_millisecond(ms).ok())
    }

    /// How long from `now` until the layout runs out; zero if it has.
    ///
    /// `None` when the layout runs past the year 9999.
    pub fn time_left(&self, now: Timestamp) -> Option<Duration> {
        let end = self.runs_out_at()?;
        let left = end.as_millisecond().saturating_sub(now.as_millisecond());
        Some(Duration::from_millis(u64::try_from(left).unwrap_or(0)))
    }

    /// The tick `time` falls in.
    ///
    /// # Errors
    ///
    /// [`Error::ClockBeforeEpoch`] when `time` is before the epoch and
    /// [`Error::LayoutExhausted`] when it is at or after [`Layout::runs_out_at`].
    pub fn tick_at(&self, time: Timestamp) -> Result<u64> {
        let ms = time.as_millisecond();
        if ms < self.epoch_ms {
            return Err(Error::ClockBeforeEpoch {
                now: time,
                epoch: self.epoch(),
            });
        }
        let tick = ((ms - self.epoch_ms) / i64::from(self.unit_ms)) as u64;
        if tick >= self.ticks() {
            return Err(self.exhausted());
        }
        Ok(tick)
    }

    /// The instant `tick` starts at.
    pub fn time_of_tick(&self, tick: u64) -> Timestamp {
        let ms = i128::from(self.epoch_ms) + i128::from(tick) * i128::from(self.unit_ms);
        i64::try_from(ms)
            .ok()
            .and_then(|ms| Timestamp::from_millisecond(ms).ok())
            .unwrap_or(Timestamp::MAX)
    }

    pub(crate) fn exhausted(&self) -> Error {
        Error::LayoutExhausted {
            ran_out_at: self.runs_out_at().unwrap_or(Timestamp::MAX),
        }
    }

    /// Composes an ID from its parts.
    ///
    /// # Errors
    ///
    /// [`Error::NodeOutOfRange`] when a node part or the sequence does not fit its
    /// field, and [`Error::LayoutExhausted`] when the tick is past the time field.
    pub fn compose(&self, parts: IdParts) -> Result<Id> {
        let check = |field: &'static str, value: u32, bits: u8| {
            let max = (1u64 << bits) - 1;
            if u64::from(value) > max {
                Err(Error::NodeOutOfRange {
                    field,
                    value: u64::from(value),
                    max,
                })
            } else {
                Ok(())
            }
        };
        check("datacenter", parts.datacenter, self.datacenter_bits)?;
        check("worker", parts.worker, self.worker_bits)?;
        check("rollback", parts.rollback, self.rollback_bits)?;
        check("sequence", parts.sequence, self.sequence_bits)?;
        if parts.tick >= self.ticks() {
            return Err(self.exhausted());
        }
        let node = self.node_value(parts.datacenter, parts.worker, parts.rollback);
        Ok(Id::from_raw(self.bits().compose(
            parts.tick,
            node,
            u64::from(parts.sequence),
        )))
    }

    /// The node field value of a generator's datacenter and worker (rollback 0).
    ///
    /// # Errors
    ///
    /// [`Error::NodeOutOfRange`] when either is outside its field.
    pub(crate) fn checked_node(&self, datacenter: u32, worker: u32) -> Result<u64> {
        let check = |field: &'static str, value: u32, max: u32| {
            if value > max {
                Err(Error::NodeOutOfRange {
                    field,
                    value: u64::from(value),
                    max: u64::from(max),
                })
            } else {
                Ok(())
            }
        };
        check("datacenter", datacenter, self.max_datacenter())?;
        check("worker", worker, self.max_worker())?;
        Ok(self.node_value(datacenter, worker, 0))
    }

    /// The node field value for these parts (unchecked).
    pub(crate) fn node_value(&self, datacenter: u32, worker: u32, rollback: u32) -> u64 {
        (u64::from(rollback) << (self.datacenter_bits + self.worker_bits))
            | (u64::from(datacenter) << self.worker_bits)
            | u64::from(worker)
    }

    /// Takes an ID apart. Works for every ID of the layout, also after the layout
    /// has run out for generation.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] when the value cannot be an ID of this layout (it has
    /// bits set above the layout's fields).
    pub fn decode(&self, id: u64) -> Result<Decoded> {
        let width = self.usable_time_bits() + self.low_bits();
        if width < 64 && id >> width != 0 {
            return Err(Error::invalid_id(
                &id.to_string(),
                format!("has bits set above this layout's {width} bits"),
            ));
        }
        let b = self.bits();
        let tick = id >> b.time_shift;
        let node = (id >> b.node_shift) & b.node_mask;
        let sequence = ((id >> b.seq_shift) & b.seq_mask) as u32;
        let worker = (node & ((1 << self.worker_bits) - 1)) as u32;
        let datacenter = ((node >> self.worker_bits) & ((1 << self.datacenter_bits) - 1)) as u32;
        let rollback = (node >> (self.worker_bits + self.datacenter_bits)) as u32;
        Ok(Decoded {
            id: Id::from_raw(id),
            time: self.time_of_tick(tick),
            tick,
            datacenter,
            worker,
            rollback,
            sequence,
        })
    }

    /// Shifts and masks for composing IDs on hot paths.
    pub(crate) fn bits(&self) -> Bits {
        let node_bits = self.node_bits();
        let (node_shift, seq_shift) = match self.order {
            FieldOrder::TimeNodeSequence => (self.sequence_bits, 0),
            FieldOrder::TimeSequenceNode => (0, node_bits),
        };
        Bits {
            time_shift: u32::from(node_bits + self.sequence_bits),
            node_shift: u32::from(node_shift),
            seq_shift: u32::from(seq_shift),
            node_mask: (1 << node_bits) - 1,
            seq_mask: (1 << self.sequence_bits) - 1,
        }
    }

    /// The epoch in nanoseconds since the Unix epoch.
    pub(crate) fn epoch_nanos(&self) -> i64 {
        self.epoch_ms * 1_000_000
    }

    /// The unit in nanoseconds.
    pub(crate) fn unit_nanos(&self) -> i64 {
        i64::from(self.unit_ms) * 1_000_000
    }
}

/// Precomputed shifts and masks of a layout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bits {
    pub(crate) time_shift: u32,
    pub(crate) node_shift: u32,
    pub(crate) seq_shift: u32,
    pub(crate) node_mask: u64,
    pub(crate) seq_mask: u64,
}

impl Bits {
    #[inline]
    pub(crate) fn compose(&self, tick: u64, node: u64, seq: u64) -> u64 {
        (tick << self.time_shift) | (node << self.node_shift) | (seq << self.seq_shift)
    }

    /// The distance between IDs of consecutive sequence numbers in one tick.
    pub(crate) fn seq_stride(&self) -> u64 {
        1 << self.seq_shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn presets_are_valid_layouts() {
        for &(name, layout) in Layout::PRESETS {
            let rebuilt = LayoutSpec::from(layout).build();
            assert_eq!(rebuilt, Ok(layout), "preset {name}");
            assert_eq!(Layout::preset(name), Some(layout));
            assert_eq!(layout.preset_name(), Some(name));
        }
    }

    #[test]
    fn discord_documentation_example_decodes() {
        let d = Layout::DISCORD.decode(175_928_847_299_117_063).unwrap();
        assert_eq!(d.time, ts("2016-04-30T11:18:25.796Z"));
        assert_eq!(d.datacenter, 1, "Discord's internal worker ID");
        assert_eq!(d.worker, 0, "Discord's internal process ID");
        assert_eq!(d.sequence, 7, "Discord's increment");
        assert_eq!(Layout::DISCORD.compose(d.parts()).unwrap(), d.id);
    }

    #[test]
    fn twitter_api_documentation_tweet_decodes() {
        // The Tweet object example in Twitter's API v1.1 documentation:
        // id 1050118621198921728, created_at "Wed Oct 10 20:19:24 +0000 2018".
        let d = Layout::TWITTER.decode(1_050_118_621_198_921_728).unwrap();
        assert_eq!(d.time.as_second(), ts("2018-10-10T20:19:24Z").as_second());
        assert_eq!(d.time, ts("2018-10-10T20:19:24.211Z"));
        assert_eq!((d.datacenter, d.worker, d.sequence), (10, 27, 0));
    }

    #[test]
    fn tso_decodes_a_pd_timestamp_as_physical_ms_and_logical() {
        // PD composes (physical_ms << 18) + logical.
        let physical_ms: u64 = 1_700_000_000_123;
        let tso = (physical_ms << 18) + 77;
        let d = Layout::TSO.decode(tso).unwrap();
        assert_eq!(d.time.to_string(), "2023-11-14T22:13:20.123Z");
        assert_eq!((d.tick, d.sequence), (physical_ms, 77));
        assert_eq!((d.datacenter, d.worker), (0, 0));
        assert_eq!(Layout::TSO.compose(d.parts()).unwrap().get(), tso);
        assert_eq!(Layout::TSO.ids_per_tick(), 1 << 18);
        assert_eq!(
            Layout::TSO.runs_out_at().unwrap().to_string(),
            "3084-12-12T12:41:28.832Z"
        );
    }

    #[test]
    fn instagram_blog_example_composes_and_decodes() {
        // "Sharding & IDs at Instagram": 1387263000 ms after the epoch, shard 1341,
        // sequence 5001 % 1024 = 905.
        let id = (1_387_263_000u64 << 23) | (1341 << 10) | 905;
        let d = Layout::INSTAGRAM.decode(id).unwrap();
        assert_eq!((d.tick, d.worker, d.sequence), (1_387_263_000, 1341, 905));
        assert_eq!(
            Layout::INSTAGRAM
                .compose(IdParts {
                    tick: 1_387_263_000,
                    worker: 1341,
                    sequence: 905,
                    ..Default::default()
                })
                .unwrap()
                .get(),
            id
        );
    }

    #[test]
    fn sonyflake_puts_sequence_above_machine() {
        // sonyflake: id = time << 24 | sequence << 16 | machine.
        let id = (100u64 << 24) | (3 << 16) | 0xBEEF;
        let d = Layout::SONYFLAKE.decode(id).unwrap();
        assert_eq!((d.tick, d.sequence, d.worker), (100, 3, 0xBEEF));
        assert_eq!(d.time, ts("2014-09-01T00:00:01Z"));
    }

    #[test]
    fn run_out_dates_are_exact() {
        assert_eq!(
            Layout::BAIDU.runs_out_at(),
            Some(ts("2024-11-20T13:24:16Z"))
        );
        assert_eq!(
            Layout::TWITTER.runs_out_at(),
            Some(ts("2080-07-10T17:30:30.209Z"))
        );
        assert_eq!(
            Layout::DISCORD.runs_out_at(),
            Some(ts("2084-09-06T15:47:35.552Z"))
        );
        assert_eq!(
            Layout::SONYFLAKE.runs_out_at(),
            Some(ts("2188-11-16T03:28:58.880Z"))
        );
        assert_eq!(Layout::DISCORD.usable_time_bits(), 41);
    }

    /// An ID made by uid-generator's own arithmetic, as its source writes it:
    /// `DefaultUidGenerator.nextId` takes `currentSecond - epochSeconds` with
    /// `epochSeconds = 1463673600` and `BitsAllocator.allocate` packs
    /// `deltaSeconds << 35 | workerId << 13 | sequence` (28/22/13 bits).
    #[test]
    fn decodes_an_id_made_by_uid_generators_algorithm() {
        const EPOCH_SECONDS: u64 = 1_463_673_600;
        let allocate =
            |delta: u64, worker: u64, sequence: u64| (delta << 35) | (worker << 13) | sequence;
        // 2020-01-01T00:00:00Z on worker 1234, the 57th ID of that second.
        let current_second = 1_577_836_800;
        let uid = allocate(current_second - EPOCH_SECONDS, 1234, 56);
        assert_eq!(uid, 3_922_617_683_263_766_584);
        let d = Layout::BAIDU.decode(uid).unwrap();
        assert_eq!(d.time, ts("2020-01-01T00:00:00Z"));
        assert_eq!((d.worker, d.sequence), (1234, 56));
        assert_eq!(
            Layout::BAIDU
                .compose(IdParts {
                    tick: d.tick,
                    worker: 1234,
                    sequence: 56,
                    ..Default::default()
                })
                .unwrap()
                .get(),
            uid
        );
        // The last second uid-generator accepts: `currentSecond - epochSeconds`
        // may equal `maxDeltaSeconds = 2^28 - 1`, no more.
        let last = allocate((1 << 28) - 1, 1, 0);
        assert_eq!(
            Layout::BAIDU.decode(last).unwrap().time,
            ts("2024-11-20T13:24:15Z")
        );
        // The old midnight-UTC reading put every such ID 8 hours late.
        let utc: Layout = "baidu,epoch=2016-05-20T00:00:00Z".parse().unwrap();
        assert_eq!(utc.decode(uid).unwrap().time, ts("2020-01-01T08:00:00Z"));
        assert_eq!(utc.runs_out_at(), Some(ts("2024-11-20T21:24:16Z")));

        // The ID uid-generator's README prints, made with the bits its README
        // configures (`timeBits` 29, `workerBits` 21, `seqBits` 13, `epochStr`
        // "2016-09-20"): `"timestamp":"2017-01-19 12:15:46", "workerId":"4",
        // "sequence":"9"`. The JVM parses `epochStr` and prints the time in
        // its own time zone, so with the epoch at that zone's midnight (here
        // UTC+8) the time reads back as printed.
        let readme: Layout =
            "time=29,unit=1s,epoch=2016-09-20T00:00:00+08:00,worker=21,sequence=13"
                .parse()
                .unwrap();
        let d = readme.decode(180_363_646_902_239_241).unwrap();
        assert_eq!((d.worker, d.sequence), (4, 9));
        assert_eq!(d.time, ts("2017-01-19T12:15:46+08:00"));
    }

    #[test]
    fn exhausted_layout_still_decodes_but_will_not_compose_later_times() {
        let b = Layout::BAIDU;
        let err = b.tick_at(ts("2026-11-21T00:00:00Z")).unwrap_err();
        assert!(
            matches!(err, Error::LayoutExhausted { ran_out_at } if ran_out_at == ts("2024-11-20T13:24:16Z"))
        );
        assert!(err.to_string().contains("2024-11-20T13:24:16Z"));
        let last = b
            .compose(IdParts {
                tick: b.ticks() - 1,
                worker: 7,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            b.decode(last.get()).unwrap().time,
            ts("2024-11-20T13:24:15Z")
        );
    }

    #[test]
    fn capacity_facts() {
        assert_eq!(Layout::TWITTER.ids_per_second_per_worker(), 4_096_000.0);
        assert_eq!(Layout::TWITTER.workers(), 1024);
        assert_eq!(Layout::SONYFLAKE.ids_per_second_per_worker(), 25_600.0);
        assert_eq!(Layout::SONYFLAKE.workers(), 65_536);
        assert_eq!(Layout::BAIDU.ids_per_second_per_worker(), 8192.0);
        assert_eq!(Layout::BAIDU.workers(), 1 << 22);
        assert_eq!(Layout::JS53.ids_per_second_per_worker(), 32_768.0);
    }

    #[test]
    fn js53_ids_stay_below_2_pow_53() {
        let l = Layout::JS53;
        let max = l
            .compose(IdParts {
                tick: l.ticks() - 1,
                worker: 15,
                sequence: (1 << 15) - 1,
                ..Default::default()
            })
            .unwrap();
        assert!(max.get() < 1 << 53);
        assert!(
            l.decode(1 << 52).is_err(),
            "bit 52 is above the layout's fields"
        );
    }

    #[test]
    fn build_rejects_bad_fields_by_name() {
        let epoch = ts("2020-01-01T00:00:00Z");
        let cases = [
            (LayoutSpec::new(0, epoch, 12), "time"),
            (LayoutSpec::new(41, epoch, 0), "sequence"),
            (
                LayoutSpec::new(41, epoch, 12).with_unit(Duration::from_micros(1500)),
                "unit",
            ),
            (
                LayoutSpec::new(41, epoch, 12).with_unit(Duration::from_secs(86_401)),
                "unit",
            ),
            (LayoutSpec::new(41, epoch, 12).with_worker_bits(32), "node"),
            (
                LayoutSpec::new(41, epoch, 12).with_rollback_bits(9),
                "rollback",
            ),
            (
                LayoutSpec::new(20, epoch, 30)
                    .with_worker_bits(25)
                    .with_max_bits(53),
                "sequence",
            ),
            (LayoutSpec::new(60, epoch, 12).with_worker_bits(10), "time"),
            (LayoutSpec::new(41, epoch, 12).with_max_bits(64), "max"),
            (LayoutSpec::new(41, ts("2300-01-01T00:00:00Z"), 12), "epoch"),
        ];
        for (spec, field) in cases {
            match spec.build() {
                Err(Error::InvalidLayout { field: f, .. }) => assert_eq!(f, field, "{spec:?}"),
                other => panic!("{spec:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn compose_rejects_out_of_range_parts() {
        let l = Layout::TWITTER;
        let err = l
            .compose(IdParts {
                worker: 32,
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(
            err,
            Error::NodeOutOfRange {
                field: "worker",
                value: 32,
                max: 31
            }
        );
        let err = l
            .compose(IdParts {
                sequence: 4096,
                ..Default::default()
            })
            .unwrap_err();
        assert!(matches!(
            err,
            Error::NodeOutOfRange {
                field: "sequence",
                ..
            }
        ));
        assert!(matches!(
            l.compose(IdParts {
                tick: 1 << 41,
                ..Default::default()
            }),
            Err(Error::LayoutExhausted { .. })
        ));
    }

    fn any_layout() -> impl proptest::strategy::Strategy<Value = Layout> {
        use proptest::prelude::*;
        (
            (1u8..=63, 1u32..=86_400_000, 0i64..=MAX_EPOCH_MS),
            (0u8..=10, 0u8..=20, 0u8..=8, 1u8..=31),
            (any::<bool>(), 16u8..=63),
        )
            .prop_filter_map(
                "fields must fit",
                |((time, unit, epoch), (dc, worker, rb, seq), (tsn, max))| {
                    LayoutSpec::new(time, Timestamp::from_millisecond(epoch).unwrap(), seq)
                        .with_unit(Duration::from_millis(u64::from(unit)))
                        .with_datacenter_bits(dc)
                        .with_worker_bits(worker)
                        .with_rollback_bits(rb)
                        .with_order(if tsn {
                            FieldOrder::TimeSequenceNode
                        } else {
                            FieldOrder::TimeNodeSequence
                        })
                        .with_max_bits(max)
                        .build()
                        .ok()
                },
            )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        #[test]
        fn compose_then_decode_gives_the_parts_back(layout in any_layout(), r in proptest::prelude::any::<[u64; 5]>()) {
            let parts = IdParts {
                tick: r[0] % layout.ticks(),
                datacenter: (r[1] % (u64::from(layout.max_datacenter()) + 1)) as u32,
                worker: (r[2] % (u64::from(layout.max_worker()) + 1)) as u32,
                rollback: (r[3] % (1 << layout.rollback_bits())) as u32,
                sequence: (r[4] % layout.ids_per_tick()) as u32,
            };
            let id = layout.compose(parts).unwrap();
            proptest::prop_assert!(id.get() < 1 << layout.max_bits());
            let decoded = layout.decode(id.get()).unwrap();
            proptest::prop_assert_eq!(decoded.parts(), parts);
            proptest::prop_assert_eq!(decoded.time, layout.time_of_tick(parts.tick));
        }

        #[test]
        fn text_form_round_trips(layout in any_layout()) {
            let text = layout.to_string();
            proptest::prop_assert_eq!(text.parse::<Layout>(), Ok(layout), "{}", text);
        }

        #[test]
        fn later_ticks_make_larger_ids(layout in any_layout(), a in proptest::prelude::any::<u64>(), b in proptest::prelude::any::<u64>()) {
            let (a, b) = (a % layout.ticks(), b % layout.ticks());
            let (a, b) = (a.min(b), a.max(b).max(1));
            let a = a.min(b - 1);
            let max_a = layout.compose(IdParts {
                tick: a,
                datacenter: layout.max_datacenter(),
                worker: layout.max_worker(),
                rollback: (1u32 << layout.rollback_bits()) - 1,
                sequence: (layout.ids_per_tick() - 1) as u32,
            }).unwrap();
            let min_b = layout.compose(IdParts { tick: b, ..Default::default() }).unwrap();
            proptest::prop_assert!(max_a < min_b);
        }

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,80}") {
            let _ = text.parse::<Layout>();
        }

        #[test]
        fn arbitrary_ids_decode_or_fail_cleanly(layout in any_layout(), id in proptest::prelude::any::<u64>()) {
            if let Ok(d) = layout.decode(id) {
                proptest::prop_assert_eq!(layout.compose(d.parts()).unwrap().get(), id);
            }
        }
    }
}
