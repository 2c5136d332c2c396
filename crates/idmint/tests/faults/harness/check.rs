//! [`Checker`] and [`Outcome`]: the promises checked over a [`Record`].

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Duration;

use anyhow::Result;
use jiff::Timestamp;

use super::load::{KeyKind, Record, Reply};

/// A scenario's result: the figures of its line and table row, whether it
/// passed, and why not.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// IDs checked.
    pub ids_checked: u64,
    /// IDs seen more than once (each extra sighting counts).
    pub duplicates: u64,
    /// IDs not above the one before them (per stream, or per worker).
    pub monotonic_violations: u64,
    /// Snowflake IDs whose decoded time is out of bounds.
    pub time_violations: u64,
    /// Failed requests by code, and refused starts as `start:<code>`.
    pub errors_by_code: BTreeMap<String, u64>,
    /// The longest a stream went without a successful reply.
    pub max_gap: Duration,
    /// The promise, or the behaviour expected where it can't be kept.
    pub expected: String,
    /// What went wrong (empty when passed).
    pub failures: Vec<String>,
    /// What happened worth showing (first violations, phases).
    pub notes: Vec<String>,
}

impl Outcome {
    /// True when nothing failed: no duplicates, violations or bad bodies, and
    /// every [`Outcome::require`] held.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
            && self.duplicates == 0
            && self.monotonic_violations == 0
            && self.time_violations == 0
            && !self.errors_by_code.contains_key("bad_body")
    }

    /// Records a failure unless `holds`.
    pub fn require(&mut self, holds: bool, what: impl Into<String>) {
        if !holds {
            self.failures.push(what.into());
        }
    }

    /// Records a failure, `what: <error>`, when `result` is an error.
    pub fn require_ok<T>(&mut self, result: &Result<T>, what: &str) {
        if let Err(e) = result {
            self.failures.push(format!("{what}: {e:#}"));
        }
    }

    /// Adds a note for the log.
    pub fn note(&mut self, what: impl Into<String>) {
        self.notes.push(what.into());
    }

    /// Counts `n` events under `code`.
    pub fn count(&mut self, code: &str, n: u64) {
        if n > 0 {
            *self.errors_by_code.entry(code.to_owned()).or_default() += n;
        }
    }

    /// Counts the refused starts, `start:<code>` each.
    pub fn count_refusals(&mut self, codes: &[String]) {
        for code in codes {
            self.count(&format!("start:{code}"), 1);
        }
    }

    /// How many failures carry `code`.
    pub fn errors(&self, code: &str) -> u64 {
        self.errors_by_code.get(code).copied().unwrap_or(0)
    }

    /// `{code:n,...}`.
    pub fn errors_text(&self) -> String {
        let parts: Vec<String> = self
            .errors_by_code
            .iter()
            .map(|(code, n)| format!("{code}:{n}"))
            .collect();
        format!("{{{}}}", parts.join(","))
    }

    /// The scenario's one line.
    pub fn line(&self, name: &str) -> String {
        format!(
            "{name:<34} ids={} dup={} mono={} time={} errors={} max_gap={:.1}s  {}",
            self.ids_checked,
            self.duplicates,
            self.monotonic_violations,
            self.time_violations,
            self.errors_text(),
            self.max_gap.as_secs_f64(),
            if self.passed() { "ok" } else { "FAILED" }
        )
    }
}

/// Checks a [`Record`] against the promises (see the module docs).
#[derive(Debug, Clone)]
pub struct Checker {
    expected: String,
    behind: Duration,
    ahead: Duration,
    per_node: HashMap<String, (Duration, Duration)>,
    monotonic: (Duration, Duration),
}

/// How many violations of each kind are described in notes.
const NOTES_PER_KIND: usize = 5;

/// How far a monotonic ID's decoded time may run ahead of real time: the
/// leader persists its mark up to `monotonic.window` (3 s) ahead of its
/// clock, and a new leader starts above the last one's mark; 2 s more for a
/// loaded machine.
pub const MONOTONIC_AHEAD: Duration = Duration::from_secs(5);

impl Checker {
    /// A checker whose outcome states `expected`; time bounds 1 s either way
    /// (send/receive brackets already; this is for the clocks' drift and a
    /// loaded machine).
    pub fn new(expected: impl Into<String>) -> Checker {
        Checker {
            expected: expected.into(),
            behind: Duration::from_secs(1),
            ahead: Duration::from_secs(1),
            per_node: HashMap::new(),
            monotonic: (Duration::from_secs(1), MONOTONIC_AHEAD),
        }
    }

    /// How far a monotonic ID's decoded time may lie before real time at
    /// send (`behind`) and after it at receive (`ahead`), instead of 1 s and
    /// [`MONOTONIC_AHEAD`]: a leader whose clock is behind the last one's mark
    /// goes on from the mark, so its IDs lag real time.
    pub fn with_monotonic_time_bounds(mut self, behind: Duration, ahead: Duration) -> Checker {
        self.monotonic = (behind, ahead);
        self
    }

    /// How far a snowflake ID's decoded time may lie before the node's clock
    /// at send (`behind`) and after it at receive (`ahead`: a `borrow`
    /// policy's bound, say).
    pub fn with_time_bounds(mut self, behind: Duration, ahead: Duration) -> Checker {
        self.behind = behind;
        self.ahead = ahead;
        self
    }

    /// Time bounds for the IDs of one node (a node restarted behind under a
    /// `borrow` policy, say), instead of [`Checker::with_time_bounds`]'.
    pub fn with_node_time_bounds(
        mut self,
        node: &str,
        behind: Duration,
        ahead: Duration,
    ) -> Checker {
        self.per_node.insert(node.to_owned(), (behind, ahead));
        self
    }

    /// Checks everything; the outcome passes when nothing is violated.
    pub fn check(&self, record: &Record) -> Outcome {
        let mut out = Outcome {
            expected: self.expected.clone(),
            ..Outcome::default()
        };
        for reply in record.replies() {
            match &reply.result {
                Ok(ids) => out.ids_checked += ids.len() as u64,
                Err(code) => out.count(code, 1),
            }
        }
        self.check_duplicates(record, &mut out);
        self.check_streams(record, &mut out);
        check_linearizable(record, &mut out);
        self.check_workers(record, &mut out);
        self.check_times(record, &mut out);
        out.max_gap = max_gap(record);
        out
    }

    fn check_duplicates(&self, record: &Record, out: &mut Outcome) {
        let mut spaces: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (stream, kind) in record.streams.iter().zip(&record.kinds) {
            for reply in stream {
                let Ok(ids) = &reply.result else { continue };
                let space = match kind {
                    KeyKind::Snowflake(_) => "snowflake".to_owned(),
                    KeyKind::Segment => format!("segment:{}", reply.key),
                    // One oracle issues every monotonic key's IDs.
                    KeyKind::Monotonic(_) => "monotonic".to_owned(),
                };
                spaces.entry(space).or_default().extend(ids);
            }
        }
        for (space, mut ids) in spaces {
            ids.sort_unstable();
            let mut shown = 0;
            for pair in ids.windows(2) {
                if pair[0] == pair[1] {
                    out.duplicates += 1;
                    if shown < NOTES_PER_KIND {
                        shown += 1;
                        out.note(format!("duplicate {} in {space}", pair[0]));
                    }
                }
            }
        }
    }

    fn check_streams(&self, record: &Record, out: &mut Outcome) {
        let mut shown = 0;
        for (stream, kind) in record.streams.iter().zip(&record.kinds) {
            if matches!(kind, KeyKind::Monotonic(_)) {
                // A stream's requests are sequential: check_linearizable
                // covers them (counted once, there).
                continue;
            }
            let mut last: Option<(u64, &Reply)> = None;
            for reply in stream {
                let Ok(ids) = &reply.result else { continue };
                for &id in ids {
                    if let Some((prev, prev_reply)) = last
                        && id <= prev
                    {
                        out.monotonic_violations += 1;
                        if shown < NOTES_PER_KIND {
                            shown += 1;
                            out.note(format!(
                                    "stream {} ({} {}): {id} (received {}) not above {prev} (received {})",
                                    reply.stream,
                                    reply.node.name(),
                                    reply.key,
                                    reply.received,
                                    prev_reply.received
                                ));
                        }
                    }
                    last = Some((id, reply));
                }
            }
        }
    }

    /// Per worker, across nodes: an ID received before another was requested
    /// is below it.
    fn check_workers(&self, record: &Record, out: &mut Outcome) {
        let mut shown = 0;
        for ((dc, worker), mut sightings) in sightings_by_worker(record) {
            sightings.sort_by_key(|s| s.reply.sent);
            // Sightings received so far, earliest receipt first; `floor` is the
            // highest ID of those received before the current request was sent.
            let mut pending: BinaryHeap<Reverse<(Timestamp, u64, usize)>> = BinaryHeap::new();
            let mut floor: Option<(u64, usize)> = None;
            for (idx, s) in sightings.iter().enumerate() {
                while let Some(&Reverse((received, hi, at))) = pending.peek() {
                    if received >= s.reply.sent {
                        break;
                    }
                    pending.pop();
                    if floor.is_none_or(|(f, _)| hi > f) {
                        floor = Some((hi, at));
                    }
                }
                if let Some((f, at)) = floor
                    && s.lo <= f
                {
                    out.monotonic_violations += 1;
                    if shown < NOTES_PER_KIND {
                        shown += 1;
                        let before = sightings[at].reply;
                        out.note(format!(
                            "worker {dc}/{worker}: {} from {} (sent {}) not above {f} from {} (received {})",
                            s.lo,
                            s.reply.node.name(),
                            s.reply.sent,
                            before.node.name(),
                            before.received
                        ));
                    }
                }
                pending.push(Reverse((s.reply.received, s.hi, idx)));
            }
        }
    }

    fn check_times(&self, record: &Record, out: &mut Outcome) {
        let mut shown = 0;
        for (stream, kind) in record.streams.iter().zip(&record.kinds) {
            let (layout, monotonic) = match kind {
                KeyKind::Snowflake(layout) => (layout, false),
                KeyKind::Monotonic(layout) => (layout, true),
                KeyKind::Segment => continue,
            };
            for reply in stream {
                let Ok(ids) = &reply.result else { continue };
                let (behind, ahead) = if monotonic {
                    // The leader's clock, wherever the request went: real
                    // time, within the bounds.
                    self.monotonic
                } else {
                    self.per_node
                        .get(reply.node.name())
                        .copied()
                        .unwrap_or((self.behind, self.ahead))
                };
                let offset_ms = if monotonic { 0 } else { reply.offset_ms };
                let offset = jiff::SignedDuration::from_millis(offset_ms);
                let lo = shift(reply.sent, offset, behind, false);
                let hi = shift(reply.received, offset, ahead + layout.unit(), true);
                for &id in ids {
                    let Ok(d) = layout.decode(id) else {
                        out.time_violations += 1;
                        continue;
                    };
                    if d.time < lo || d.time > hi {
                        out.time_violations += 1;
                        if shown < NOTES_PER_KIND {
                            shown += 1;
                            out.note(format!(
                                "{id} from {} decodes to {}, outside {lo}..{hi} (node clock offset {} ms)",
                                reply.node.name(), d.time, offset_ms
                            ));
                        }
                    }
                }
            }
        }
    }
}

/// The IDs one reply carried of one worker: the lowest and the highest.
struct Sighting<'a> {
    reply: &'a Reply,
    lo: u64,
    hi: u64,
}

/// Every reply's snowflake IDs, grouped by (datacenter, worker) as decoded.
fn sightings_by_worker(record: &Record) -> BTreeMap<(u32, u32), Vec<Sighting<'_>>> {
    let mut per_worker: BTreeMap<(u32, u32), Vec<Sighting<'_>>> = BTreeMap::new();
    for (stream, kind) in record.streams.iter().zip(&record.kinds) {
        let KeyKind::Snowflake(layout) = kind else {
            continue;
        };
        for reply in stream {
            let Ok(ids) = &reply.result else { continue };
            let mut by_worker: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
            for &id in ids {
                let Ok(d) = layout.decode(id) else { continue };
                let (lo, hi) = by_worker
                    .entry((d.datacenter, d.worker))
                    .or_insert((id, id));
                *lo = (*lo).min(id);
                *hi = (*hi).max(id);
            }
            for (worker, (lo, hi)) in by_worker {
                per_worker
                    .entry(worker)
                    .or_default()
                    .push(Sighting { reply, lo, hi });
            }
        }
    }
    per_worker
}

/// `t + offset ± bound`.
fn shift(t: Timestamp, offset: jiff::SignedDuration, bound: Duration, up: bool) -> Timestamp {
    let bound = jiff::SignedDuration::try_from(bound).unwrap_or(jiff::SignedDuration::MAX);
    let bound = if up { bound } else { -bound };
    t.checked_add(offset)
        .and_then(|t| t.checked_add(bound))
        .unwrap_or(t)
}

/// The longest time a stream went without a successful reply: from its first
/// success, between successes, and from its last success to the load's end.
fn max_gap(record: &Record) -> Duration {
    let mut gap = Duration::ZERO;
    for (idx, stream) in record.streams.iter().enumerate() {
        let end = record.ends.get(idx).copied().unwrap_or(record.finished);
        let mut last_ok: Option<Timestamp> = None;
        for reply in stream.iter().filter(|r| r.result.is_ok()) {
            if let Some(prev) = last_ok {
                gap = gap.max(between(prev, reply.received));
            }
            last_ok = Some(reply.received);
        }
        if let Some(prev) = last_ok {
            gap = gap.max(between(prev, end));
        }
    }
    gap
}

fn between(earlier: Timestamp, later: Timestamp) -> Duration {
    Duration::try_from(later.duration_since(earlier)).unwrap_or(Duration::ZERO)
}

/// One monotonic reply as the order check sees it.
#[derive(Debug, Clone, Copy)]
struct Span<'a> {
    reply: &'a Reply,
    lo: u64,
    hi: u64,
}

/// Real-time order of the monotonic IDs, across every stream, node and
/// monotonic key (linearizability of the oracle): for requests A and B where
/// A's response was read before B was sent, every ID of B must be above
/// every ID of A; and the IDs of one response strictly increase.
///
/// Counts, into `monotonic_violations`: each request whose lowest ID is not
/// above the highest ID of everything received before it was sent (one per
/// such request, however many earlier requests it falls below), and each
/// adjacent pair within a response that does not increase. Duplicates are
/// counted by `check_duplicates`.
///
/// Sorted by receipt, the highest ID received before a time is a prefix
/// maximum, found by a binary search on the send time: O(n log n). Times are
/// the load's monotonic-clock readings, taken before the send and after the
/// read, so "received before sent" as recorded is so in fact.
fn check_linearizable(record: &Record, out: &mut Outcome) {
    let mut spans: Vec<Span<'_>> = Vec::new();
    let mut shown = 0;
    for (stream, kind) in record.streams.iter().zip(&record.kinds) {
        if !matches!(kind, KeyKind::Monotonic(_)) {
            continue;
        }
        for reply in stream {
            let Ok(ids) = &reply.result else { continue };
            let (Some(&lo), Some(&hi)) = (ids.iter().min(), ids.iter().max()) else {
                continue;
            };
            for pair in ids.windows(2) {
                if pair[1] <= pair[0] {
                    out.monotonic_violations += 1;
                    if shown < NOTES_PER_KIND {
                        shown += 1;
                        out.note(format!(
                            "order: a response of {} from {} (stream {}) has {} after {}",
                            ids.len(),
                            reply.node.name(),
                            reply.stream,
                            pair[1],
                            pair[0]
                        ));
                    }
                }
            }
            spans.push(Span { reply, lo, hi });
        }
    }
    let mut by_receipt = spans.clone();
    by_receipt.sort_by_key(|s| s.reply.received_at);
    // prefix[i]: the highest ID among by_receipt[..=i], and where it came from.
    let mut prefix: Vec<(u64, usize)> = Vec::with_capacity(by_receipt.len());
    for (i, s) in by_receipt.iter().enumerate() {
        let best = match prefix.last() {
            Some(&(hi, at)) if hi >= s.hi => (hi, at),
            _ => (s.hi, i),
        };
        prefix.push(best);
    }
    for s in &spans {
        let before = by_receipt.partition_point(|o| o.reply.received_at < s.reply.sent_at);
        let Some(&(floor, at)) = before.checked_sub(1).and_then(|i| prefix.get(i)) else {
            continue;
        };
        if s.lo <= floor {
            out.monotonic_violations += 1;
            if shown < NOTES_PER_KIND {
                shown += 1;
                let earlier = by_receipt[at].reply;
                let gap = s
                    .reply
                    .sent_at
                    .saturating_duration_since(earlier.received_at);
                out.note(format!(
                    "order: {} from {} (stream {}, sent {}) not above {floor} from {} \
                     (stream {}, received {}, {:.1} ms before)",
                    s.lo,
                    s.reply.node.name(),
                    s.reply.stream,
                    s.reply.sent,
                    earlier.node.name(),
                    earlier.stream,
                    earlier.received,
                    gap.as_secs_f64() * 1e3
                ));
            }
        }
    }
}
