//! The text form of a [`Layout`], used by the CLI and the config file.
//!
//! ```text
//! layout   = preset | preset "," fields | fields
//! fields   = field ("," field)*
//! field    = key "=" value
//! ```
//!
//! | key | value | default |
//! |---|---|---|
//! | `time` | bits of the time field | required without a preset |
//! | `unit` | `1ms`, `10ms`, `1s`, ... (whole milliseconds, up to 1 day) | `1ms` |
//! | `epoch` | RFC 3339 (`2010-11-04T01:42:54.657Z`, or with an offset: `2016-05-20T00:00:00+08:00`), a date (`2016-05-20`, midnight UTC) or Unix milliseconds | required without a preset |
//! | `node` | bits of the whole node field | datacenter + worker + rollback |
//! | `datacenter` (`dc`) | bits carved out of the node field for the datacenter | 0 |
//! | `worker` | bits of the worker part | what is left of `node` |
//! | `rollback` | bits carved out of the node field for the rollback counter | 0 |
//! | `sequence` (`seq`) | bits of the sequence field | required without a preset |
//! | `order` | `time-node-sequence` (`tns`) or `time-sequence-node` (`tsn`) | `tns` |
//! | `max` | IDs stay below 2^max (63, or 53 for JavaScript) | 63 |
//!
//! `node` stays fixed when `datacenter` or `rollback` change, so `leaf,rollback=2`
//! keeps Leaf's 10 node bits and leaves 8 to the worker. Giving `worker` without
//! `node` grows or shrinks the node field instead. Display writes the full form,
//! which parses back to the same layout.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;

use super::{FieldOrder, Layout, LayoutSpec};
use crate::error::{Error, Result};

fn bad(part: &str, reason: impl Into<String>) -> Error {
    Error::InvalidLayoutText {
        part: part.to_owned(),
        reason: reason.into(),
    }
}

/// Fields as written, before they are resolved against a preset.
#[derive(Default)]
struct Written {
    time: Option<u8>,
    unit: Option<Duration>,
    epoch: Option<Timestamp>,
    node: Option<u8>,
    datacenter: Option<u8>,
    worker: Option<u8>,
    rollback: Option<u8>,
    sequence: Option<u8>,
    order: Option<FieldOrder>,
    max: Option<u8>,
}

impl FromStr for Layout {
    type Err = Error;

    /// Parses a preset name, a preset with overrides, or a full spec.
    ///
    /// # Examples
    ///
    /// ```
    /// use idmint_core::Layout;
    ///
    /// let l: Layout = "baidu,epoch=2024-01-01".parse()?;
    /// assert_eq!(l.runs_out_at().unwrap().to_string(), "2032-07-03T21:24:16Z");
    ///
    /// let l: Layout = "leaf,rollback=2".parse()?;
    /// assert_eq!((l.node_bits(), l.worker_bits(), l.rollback_bits()), (10, 8, 2));
    ///
    /// let err = "twitter,sequence=twelve".parse::<Layout>().unwrap_err();
    /// assert_eq!(err.to_string(), r#"invalid layout text "sequence=twelve": expected a number of bits"#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn from_str(s: &str) -> Result<Layout> {
        let s = s.trim();
        if s.is_empty() {
            return Err(bad(s, "empty: give a preset name or key=value fields"));
        }
        let mut parts = s.split(',').map(str::trim).peekable();
        let preset = match parts.peek() {
            Some(first) if !first.contains('=') => {
                let name = parts.next().expect("peeked");
                Some(Layout::preset(name).ok_or_else(|| {
                    let names: Vec<&str> = Layout::PRESETS.iter().map(|(n, _)| *n).collect();
                    bad(
                        name,
                        format!("unknown preset; presets are {}", names.join(", ")),
                    )
                })?)
            }
            _ => None,
        };
        let mut w = Written::default();
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| bad(part, "expected key=value"))?;
            let (key, value) = (key.trim(), value.trim());
            let slot_taken = |taken: bool| {
                if taken {
                    Err(bad(part, format!("`{key}` is given twice")))
                } else {
                    Ok(())
                }
            };
            match key {
                "time" => {
                    slot_taken(w.time.is_some())?;
                    w.time = Some(parse_bits(part, value)?);
                }
                "unit" => {
                    slot_taken(w.unit.is_some())?;
                    w.unit = Some(parse_unit(part, value)?);
                }
                "epoch" => {
                    slot_taken(w.epoch.is_some())?;
                    w.epoch = Some(parse_epoch(part, value)?);
                }
                "node" => {
                    slot_taken(w.node.is_some())?;
                    w.node = Some(parse_bits(part, value)?);
                }
                "datacenter" | "dc" => {
                    slot_taken(w.datacenter.is_some())?;
                    w.datacenter = Some(parse_bits(part, value)?);
                }
                "worker" => {
                    slot_taken(w.worker.is_some())?;
                    w.worker = Some(parse_bits(part, value)?);
                }
                "rollback" => {
                    slot_taken(w.rollback.is_some())?;
                    w.rollback = Some(parse_bits(part, value)?);
                }
                "sequence" | "seq" => {
                    slot_taken(w.sequence.is_some())?;
                    w.sequence = Some(parse_bits(part, value)?);
                }
                "order" => {
                    slot_taken(w.order.is_some())?;
                    w.order = Some(match value {
                        "time-node-sequence" | "tns" => FieldOrder::TimeNodeSequence,
                        "time-sequence-node" | "tsn" => FieldOrder::TimeSequenceNode,
                        _ => {
                            return Err(bad(
                                part,
                                "expected time-node-sequence (tns) or time-sequence-node (tsn)",
                            ));
                        }
                    });
                }
                "max" => {
                    slot_taken(w.max.is_some())?;
                    w.max = Some(parse_bits(part, value)?);
                }
                _ => {
                    return Err(bad(
                        part,
                        "unknown key; keys are time, unit, epoch, node, datacenter, worker, \
                         rollback, sequence, order, max",
                    ));
                }
            }
        }
        resolve(s, preset, w)
    }
}

fn resolve(text: &str, preset: Option<Layout>, w: Written) -> Result<Layout> {
    let required = |v: Option<u8>, key: &str| {
        v.ok_or_else(|| bad(text, format!("`{key}` is required when no preset is named")))
    };
    let (time, epoch, sequence) = match preset {
        Some(p) => (
            w.time.unwrap_or(p.time_bits),
            w.epoch.unwrap_or(p.epoch()),
            w.sequence.unwrap_or(p.sequence_bits),
        ),
        None => (
            required(w.time, "time")?,
            w.epoch
                .ok_or_else(|| bad(text, "`epoch` is required when no preset is named"))?,
            required(w.sequence, "sequence")?,
        ),
    };
    let base = preset.map(LayoutSpec::from);
    let datacenter = w
        .datacenter
        .or(preset.map(|p| p.datacenter_bits))
        .unwrap_or(0);
    let rollback = w.rollback.or(preset.map(|p| p.rollback_bits)).unwrap_or(0);
    let carved = u16::from(datacenter) + u16::from(rollback);
    let worker = match (w.node, w.worker) {
        (Some(node), Some(worker)) => {
            if u16::from(node) != carved + u16::from(worker) {
                return Err(bad(
                    text,
                    format!(
                        "node={node} does not equal datacenter={datacenter} + worker={worker} + rollback={rollback}"
                    ),
                ));
            }
            worker
        }
        (None, Some(worker)) => worker,
        (node, None) => {
            let node = node
                .or(preset.map(|p| p.node_bits()))
                .unwrap_or(carved as u8);
            u16::from(node).checked_sub(carved).ok_or_else(|| {
                bad(
                    text,
                    format!(
                        "datacenter={datacenter} + rollback={rollback} bits do not fit in node={node}"
                    ),
                )
            })? as u8
        }
    };
    let mut spec = base
        .unwrap_or_else(|| LayoutSpec::new(time, epoch, sequence))
        .with_time_bits(time)
        .with_epoch(epoch)
        .with_sequence_bits(sequence)
        .with_datacenter_bits(datacenter)
        .with_worker_bits(worker)
        .with_rollback_bits(rollback);
    if let Some(unit) = w.unit {
        spec = spec.with_unit(unit);
    }
    if let Some(order) = w.order {
        spec = spec.with_order(order);
    }
    if let Some(max) = w.max {
        spec = spec.with_max_bits(max);
    }
    spec.build()
}

fn parse_bits(part: &str, value: &str) -> Result<u8> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(part, "expected a number of bits"));
    }
    value
        .parse::<u8>()
        .ok()
        .filter(|&b| b <= 64)
        .ok_or_else(|| bad(part, "a width must be at most 64 bits"))
}

fn parse_unit(part: &str, value: &str) -> Result<Duration> {
    let (digits, ms_per) = if let Some(d) = value.strip_suffix("ms") {
        (d, 1)
    } else if let Some(d) = value.strip_suffix('s') {
        (d, 1000)
    } else {
        return Err(bad(
            part,
            "expected a whole number of ms or s, such as 1ms, 10ms or 1s",
        ));
    };
    let n: u64 = digits
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| bad(part, "expected a positive whole number before ms or s"))?;
    let ms = n
        .checked_mul(ms_per)
        .filter(|&ms| ms <= u64::from(super::MS_PER_DAY))
        .ok_or_else(|| bad(part, "a unit must be at most 1 day"))?;
    Ok(Duration::from_millis(ms))
}

fn parse_epoch(part: &str, value: &str) -> Result<Timestamp> {
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let ms: i64 = value
            .parse()
            .map_err(|_| bad(part, "Unix milliseconds out of range"))?;
        return Timestamp::from_millisecond(ms).map_err(|e| bad(part, e.to_string()));
    }
    if let Ok(ts) = value.parse::<Timestamp>() {
        return Ok(ts);
    }
    if let Ok(date) = value.parse::<jiff::civil::Date>() {
        return date
            .to_zoned(jiff::tz::TimeZone::UTC)
            .map(|z| z.timestamp())
            .map_err(|e| bad(part, e.to_string()));
    }
    Err(bad(
        part,
        "expected an RFC 3339 time (2010-11-04T01:42:54.657Z), a date (2016-05-20) or Unix milliseconds",
    ))
}

pub(super) fn write_unit(f: &mut fmt::Formatter<'_>, unit_ms: u32) -> fmt::Result {
    if unit_ms.is_multiple_of(1000) {
        write!(f, "{}s", unit_ms / 1000)
    } else {
        write!(f, "{unit_ms}ms")
    }
}

impl fmt::Display for Layout {
    /// The full text form, which parses back to an equal layout.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "time={},unit=", self.time_bits)?;
        write_unit(f, self.unit_ms)?;
        write!(
            f,
            ",epoch={},node={},datacenter={},rollback={},sequence={},order={},max={}",
            self.epoch(),
            self.node_bits(),
            self.datacenter_bits,
            self.rollback_bits,
            self.sequence_bits,
            self.order.as_str(),
            self.max_bits
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_by_name_and_round_trip() {
        for &(name, layout) in Layout::PRESETS {
            assert_eq!(name.parse::<Layout>().unwrap(), layout);
            assert_eq!(name.to_uppercase().parse::<Layout>().unwrap(), layout);
            assert_eq!(
                layout.to_string().parse::<Layout>().unwrap(),
                layout,
                "{name}"
            );
        }
    }

    #[test]
    fn overrides_apply_to_the_preset() {
        let l: Layout = "twitter, epoch=2020-01-01 , datacenter=3".parse().unwrap();
        assert_eq!(l.epoch().to_string(), "2020-01-01T00:00:00Z");
        assert_eq!((l.datacenter_bits(), l.worker_bits()), (3, 7));
        let l: Layout = "leaf,worker=6".parse().unwrap();
        assert_eq!(l.node_bits(), 6);
        let l: Layout = "sonyflake,epoch=1409529600000".parse().unwrap();
        assert_eq!(l, Layout::SONYFLAKE);
        // uid-generator's epochs are local dates: an offset names them exactly.
        let l: Layout = "baidu,epoch=2016-05-20T00:00:00+08:00".parse().unwrap();
        assert_eq!(l, Layout::BAIDU);
        let l: Layout = "baidu,epoch=2016-05-20".parse().unwrap();
        assert_eq!(l.epoch().to_string(), "2016-05-20T00:00:00Z");
        assert_ne!(l, Layout::BAIDU);
    }

    #[test]
    fn full_spec_parses() {
        let l: Layout =
            "time=39,unit=10ms,epoch=2014-09-01T00:00:00Z,worker=16,sequence=8,order=tsn"
                .parse()
                .unwrap();
        assert_eq!(l, Layout::SONYFLAKE);
        let l: Layout = "time=30,unit=2s,epoch=2024-06-01,seq=10,max=53"
            .parse()
            .unwrap();
        assert_eq!(l.unit(), Duration::from_secs(2));
        assert_eq!(l.node_bits(), 0);
    }

    #[test]
    fn errors_name_the_bad_part() {
        let cases = [
            ("", ""),
            ("snowflake", "snowflake"),
            ("twitter,time", "time"),
            ("twitter,colour=red", "colour=red"),
            ("twitter,unit=1us", "unit=1us"),
            ("twitter,unit=0ms", "unit=0ms"),
            ("twitter,unit=2d", "unit=2d"),
            ("twitter,epoch=yesterday", "epoch=yesterday"),
            ("twitter,order=nts", "order=nts"),
            ("twitter,seq=300", "seq=300"),
            ("twitter,seq=12,seq=13", "seq=13"),
            ("time=41,epoch=2020-01-01", "time=41,epoch=2020-01-01"),
        ];
        for (text, part) in cases {
            match text.parse::<Layout>() {
                Err(Error::InvalidLayoutText { part: p, .. }) => assert_eq!(p, part, "{text:?}"),
                other => panic!("{text:?} gave {other:?}"),
            }
        }
        // Parsed fine, but the layout does not validate: the field is named.
        match "twitter,sequence=31".parse::<Layout>() {
            Err(Error::InvalidLayout { field, .. }) => assert_eq!(field, "time"),
            other => panic!("{other:?}"),
        }
        match "leaf,node=4,datacenter=3,rollback=2".parse::<Layout>() {
            Err(Error::InvalidLayoutText { reason, .. }) => {
                assert!(reason.contains("do not fit"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
}
