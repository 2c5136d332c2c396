//! Clock faults on the real process (issue 6): a running `idmint serve` whose
//! wall clock is stepped back 5 ms, 2 s and 1 h and forward 1 h under load,
//! for both time sources (`snowflake.clock = "monotonic" | "wall"`) and every
//! clock-behind policy (`fail`, `wait:5ms`, `borrow:3s`, `rollback-bits`,
//! `history:4096`), checked against docs/design.md §2 "Clock behaviour".
//!
//! # libfaketime and the idmint binary (what was measured)
//! - The library is Debian's `/usr/lib/x86_64-linux-gnu/faketime/`, its `MT`
//!   build (see `faketime.rs` for why). Rust's `SystemTime::now` and `Instant::now` (and so
//!   tokio's clock) call libc's `clock_gettime`, which the preloaded library
//!   intercepts; the binary is dynamically linked against glibc, so
//!   `LD_PRELOAD` works.
//! - `FAKETIME_TIMESTAMP_FILE` holds a relative offset in seconds: `+0`,
//!   `-2`, `-3600`, `+3600` (also `-1h`). Fractions work with a decimal
//!   point: `-0.005` is 5 ms back, measured to ±0.1 ms. A decimal comma
//!   (`-0,005`) is silently read as 0 in the C locale the server runs in, so
//!   [`FakeClock`] writes a point.
//! - `FAKETIME_NO_CACHE=1` re-reads the file on every clock read, so a
//!   running server sees a step at its next read (a read then costs about
//!   3.6 µs instead of 0.1 µs: fine for these loads, never for benchmarks).
//!   Without it the offset is cached for 10 s (`FAKETIME_CACHE_DURATION`,
//!   whole seconds). The file is replaced by a rename: four threads reading
//!   while it flipped between `+0` and `-2` 600 times saw only those two
//!   offsets, never a torn one. But under a loaded multi-threaded server the
//!   plain library now and then served a read with no offset at all (see
//!   `check_wall_times`).
//! - `FAKETIME_DONT_FAKE_MONOTONIC=1` leaves `CLOCK_MONOTONIC` alone, so only
//!   the wall clock steps, as an NTP step does. Without it the monotonic clock
//!   jumps with the offset (something real kernels never do) and the
//!   `monotonic` source would follow the step.
//! - A running server sees it: under `clock = "wall"` the IDs' decoded time
//!   moves with each step (and `fail` answers `503 clock_behind` at once);
//!   under `clock = "monotonic"` the IDs stay at real time while
//!   `/v1/status` `clock.drift_ms` (and `idmint_clock_drift_seconds`,
//!   `/v1/admin/workers` `clock_drift_ms`) report the step: -2000 ms after
//!   `-2`, +3600000 ms after `+3600`.
//!
//! # The runs
//! One node (the `file` registry) per time source and policy takes the four
//! steps in turn under two client streams (singles, and singles mixed with
//! batches of 100 and 1,000), each step a table row with its own load and
//! figures. Each row starts and ends with the clock at real time; a step back
//! that the policy cannot absorb and that can't be waited out in a test (1 h)
//! is set right by stepping the clock forward again. The forward row jumps
//! 1 h ahead, steps back to real time, then restarts the node: the stored
//! high-water mark must keep the restart unique. Rows of one node are run
//! together by the first of them and handed out in order (a filter that
//! names one row runs its node's whole sequence). Besides the harness's
//! checks, every row checks across the rows before it (no ID seen twice,
//! each stream's first ID above its last), and under the `wall` source the
//! decoded time against the offsets in force while each request was in
//! flight.
//!
//! `rollback-bits` and `history` reissue times the clock already passed, so
//! their IDs are unique but not ordered across a step back (docs/design.md
//! §2): under the wall clock, their `mono` column counts drops from a
//! stream's high beyond one per stream per step back. The first, and the
//! drops among the reissued IDs that follow it (`history` takes the nearest
//! tick with numbers left, not always a later one), are by design and counted
//! in the row's `seen:` figures. One more row counts how many rollbacks two
//! rollback bits take.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use idmint_core::Layout;
use jiff::{SignedDuration, Timestamp};

use crate::harness::{
    Checker, Ctx, FakeClock, Load, LoadOptions, Node, Outcome, Record, Registry, Scenario,
    ServeConfig, Target,
};

/// `borrow`'s bound (clock behind and sequence exhausted alike).
const BORROW: Duration = Duration::from_secs(3);
/// `history`'s ring: 4,096 ticks of 1 ms.
const HISTORY_TICKS: u32 = 4096;
/// The bound on each wait for load progress or readiness.
const PROGRESS_WAIT: Duration = Duration::from_secs(60);
/// How long readiness may take to come back once the clock allows it.
const READY_SLACK: Duration = Duration::from_secs(5);
/// An hour, in milliseconds.
const HOUR_MS: i64 = 3_600_000;
/// The node's name in every run.
const NODE: &str = "n";

/// The clock-fault scenarios: one row per time source, policy and step, and
/// the rollback counter's capacity.
pub fn scenarios() -> Vec<Scenario> {
    let mut all: Vec<Scenario> = rows()
        .into_iter()
        .map(|row| Scenario {
            name: Box::leak(row.name().into_boxed_str()),
            run: run_row,
        })
        .collect();
    all.push(Scenario {
        name: "clock[wall,rollback-bits,back-2s-x4]",
        run: rollback_capacity,
    });
    all
}

// ---------------------------------------------------------------------------
// The matrix
// ---------------------------------------------------------------------------

/// `snowflake.clock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Monotonic,
    Wall,
}

impl Source {
    const ALL: [Source; 2] = [Source::Monotonic, Source::Wall];

    fn name(self) -> &'static str {
        match self {
            Source::Monotonic => "monotonic",
            Source::Wall => "wall",
        }
    }
}

/// `snowflake.clock_behind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Policy {
    Fail,
    Wait,
    Borrow,
    RollbackBits,
    History,
}

impl Policy {
    const ALL: [Policy; 5] = [
        Policy::Fail,
        Policy::Wait,
        Policy::Borrow,
        Policy::RollbackBits,
        Policy::History,
    ];

    /// The name in row names.
    fn name(self) -> &'static str {
        match self {
            Policy::Fail => "fail",
            Policy::Wait => "wait:5ms",
            Policy::Borrow => "borrow:3s",
            Policy::RollbackBits => "rollback-bits",
            Policy::History => "history:4096",
        }
    }

    /// `rollback-bits` needs rollback bits; the others run Twitter's layout.
    fn layout(self) -> &'static str {
        match self {
            Policy::RollbackBits => "leaf,rollback=2",
            _ => "twitter",
        }
    }

    /// The config lines (`[snowflake]` key and TOML value).
    fn settings(self) -> Vec<(&'static str, String)> {
        let mut out = vec![("clock_behind", format!("{:?}", self.name()))];
        if self == Policy::Borrow {
            out.push(("sequence_exhausted", format!("{:?}", self.name())));
        }
        out
    }

    /// Whether a wall clock stepped back by `back` is absorbed, keeping IDs
    /// coming without an error.
    fn absorbs(self, back: Duration) -> bool {
        match self {
            Policy::Fail => false,
            Policy::Wait => back <= Duration::from_millis(5),
            Policy::Borrow => back <= BORROW,
            Policy::RollbackBits => true,
            Policy::History => back < Duration::from_millis(u64::from(HISTORY_TICKS)),
        }
    }

    /// How far IDs may lead the clock: `borrow`'s bound, or the ring that
    /// `history` reissues from.
    fn lead(self) -> Duration {
        match self {
            Policy::Borrow => BORROW,
            Policy::History => Duration::from_millis(u64::from(HISTORY_TICKS)),
            _ => Duration::ZERO,
        }
    }

    /// Whether a step back reissues earlier times (unique, not ordered).
    fn reorders(self) -> bool {
        matches!(self, Policy::RollbackBits | Policy::History)
    }
}

/// One step of the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Back5ms,
    Back2s,
    Back1h,
    Forward1h,
}

impl Step {
    const ALL: [Step; 4] = [Step::Back5ms, Step::Back2s, Step::Back1h, Step::Forward1h];

    fn name(self) -> &'static str {
        match self {
            Step::Back5ms => "back-5ms",
            Step::Back2s => "back-2s",
            Step::Back1h => "back-1h",
            Step::Forward1h => "fwd-1h",
        }
    }

    /// How far the clock steps back (the forward row steps back 1 h after
    /// its jump).
    fn back(self) -> Duration {
        match self {
            Step::Back5ms => Duration::from_millis(5),
            Step::Back2s => Duration::from_secs(2),
            Step::Back1h | Step::Forward1h => Duration::from_secs(3600),
        }
    }
}

/// One table row.
#[derive(Debug, Clone, Copy)]
struct Row {
    source: Source,
    policy: Policy,
    step: Step,
}

impl Row {
    fn name(self) -> String {
        format!(
            "clock[{},{},{}]",
            self.source.name(),
            self.policy.name(),
            self.step.name()
        )
    }

    /// Whether the step back fails IDs (typed) instead of being absorbed.
    fn fails(self) -> bool {
        self.source == Source::Wall && !self.policy.absorbs(self.step.back())
    }
}

fn rows() -> Vec<Row> {
    let mut out = Vec::new();
    for source in Source::ALL {
        for policy in Policy::ALL {
            for step in Step::ALL {
                out.push(Row {
                    source,
                    policy,
                    step,
                });
            }
        }
    }
    out
}

/// What each row's node run gave: its outcome, or why the row has none.
type RunResult = BTreeMap<Step, std::result::Result<Outcome, String>>;

/// The runs done so far, by time source and policy.
static RUNS: Mutex<BTreeMap<(Source, Policy), RunResult>> = Mutex::new(BTreeMap::new());

/// A row: its node's run (made by the first of its rows to be asked), then
/// its step's outcome.
fn run_row(ctx: &Ctx) -> Result<Outcome> {
    let row = rows()
        .into_iter()
        .find(|r| r.name() == ctx.name())
        .ok_or_else(|| anyhow!("{} is not a clock row", ctx.name()))?;
    let mut runs = RUNS.lock().unwrap_or_else(|p| p.into_inner());
    let run = runs
        .entry((row.source, row.policy))
        .or_insert_with(|| run_node(ctx, row.source, row.policy));
    run.get(&row.step)
        .cloned()
        .unwrap_or_else(|| Err("not run".to_owned()))
        .map_err(|e| anyhow!(e))
}

/// Runs one node through every step; a step that can't be run ends the run
/// (the later rows say so).
fn run_node(ctx: &Ctx, source: Source, policy: Policy) -> RunResult {
    let mut out = RunResult::new();
    let mut run = match Run::start(ctx, source, policy) {
        Ok(run) => run,
        Err(e) => {
            for step in Step::ALL {
                out.insert(step, Err(format!("the node did not start: {e:#}")));
            }
            return out;
        }
    };
    let mut failed: Option<Step> = None;
    for step in Step::ALL {
        let result = if let Some(earlier) = failed {
            Err(format!("not run: step {} could not be run", earlier.name()))
        } else {
            run.row(step)
                .map_err(|e| format!("{e:#}; node log {}", run.node.log_path().display()))
        };
        if result.is_err() && failed.is_none() {
            failed = Some(step);
        }
        out.insert(step, result);
    }
    out
}

// ---------------------------------------------------------------------------
// A stepped clock
// ---------------------------------------------------------------------------

/// A [`FakeClock`] that remembers every step, so a reply can be checked
/// against each offset in force while its request was in flight.
#[derive(Debug)]
struct Stepper {
    fake: FakeClock,
    /// (written from, written by, offset before, offset after) in ms.
    steps: Vec<(Timestamp, Timestamp, i64, i64)>,
}

impl Stepper {
    fn new(ctx: &Ctx) -> Result<Stepper> {
        Ok(Stepper {
            fake: FakeClock::new(&ctx.dir("clock")?)?,
            steps: Vec::new(),
        })
    }

    /// Sets the offset from real time, in ms.
    fn set_ms(&mut self, offset_ms: i64) -> Result<()> {
        let before = self.fake.offset_ms();
        let from = Timestamp::now();
        self.fake.set_offset_ms(offset_ms)?;
        self.steps.push((from, Timestamp::now(), before, offset_ms));
        Ok(())
    }

    fn offset_ms(&self) -> i64 {
        self.fake.offset_ms()
    }

    /// The least and greatest offsets that were in force at some time in
    /// `from..=to`.
    fn offsets_during(&self, from: Timestamp, to: Timestamp) -> (i64, i64) {
        let at_start = self
            .steps
            .iter()
            .rev()
            .find(|s| s.1 <= from)
            .map_or(0, |s| s.3);
        let (mut lo, mut hi) = (at_start, at_start);
        for &(written_from, written_by, before, after) in &self.steps {
            if written_from <= to && written_by >= from {
                lo = lo.min(before).min(after);
                hi = hi.max(before).max(after);
            }
        }
        (lo, hi)
    }
}

// ---------------------------------------------------------------------------
// One node through the steps
// ---------------------------------------------------------------------------

/// What the process told while a row ran.
#[derive(Debug, Default)]
struct Seen {
    /// `/readyz` right after the step back: status and message.
    ready_at_step: Option<(u16, String)>,
    /// `/readyz` after the clock stayed behind for a while (1 h steps).
    ready_while_behind: Option<(u16, String)>,
    /// How long after the step (or after it was set right) `/readyz` said
    /// ready again.
    ready_again: Option<Duration>,
    /// Whether the clock had to be set right for IDs to come again.
    set_right: bool,
    /// `clock.drift_ms` of `/v1/status` right after the step, and the
    /// step's offset (ms) it should report.
    drift_ms: Option<(f64, i64)>,
    /// Forward row: the latest decoded ID time after the jump, and real
    /// time at the jump.
    jumped: Option<(Timestamp, Timestamp)>,
    /// Forward row: the persisted mark then, and the latest ID time so far.
    mark: Option<(Timestamp, Timestamp)>,
    /// Forward row: the restart at real time, refused with this code.
    refusal: Option<String>,
    /// Forward row: whether the node then started with the clock 1 h ahead.
    restarted_ahead: bool,
    /// What happened worth a note.
    notes: Vec<String>,
}

/// IDs across the rows of one node.
#[derive(Debug, Default)]
struct Book {
    seen: HashSet<u64>,
    last: Vec<Option<u64>>,
}

impl Book {
    /// Counts IDs an earlier row saw, and streams whose first ID is not above
    /// their last one in the rows before; then remembers this row.
    fn check(&mut self, record: &Record, out: &mut Outcome) {
        for (idx, stream) in record.streams.iter().enumerate() {
            let ids: Vec<u64> = stream
                .iter()
                .filter_map(|r| r.result.as_ref().ok())
                .flatten()
                .copied()
                .collect();
            let before = self.last.get(idx).copied().flatten();
            if let (Some(prev), Some(&first)) = (before, ids.first())
                && first <= prev
            {
                out.monotonic_violations += 1;
                out.note(format!(
                    "stream {idx}: first ID {first} not above {prev} of the row before"
                ));
            }
            let again = ids.iter().filter(|id| self.seen.contains(id)).count();
            if again > 0 {
                out.duplicates += again as u64;
                out.note(format!("stream {idx}: {again} IDs seen in an earlier row"));
            }
            if self.last.len() <= idx {
                self.last.resize(idx + 1, None);
            }
            if let Some(&last) = ids.last() {
                self.last[idx] = Some(last);
            }
        }
        // Within the row, duplicates are the harness's to count.
        self.seen.extend(
            record
                .replies()
                .filter_map(|r| r.result.as_ref().ok())
                .flatten()
                .copied(),
        );
    }
}

/// One node, its stepped clock and its client streams.
struct Run<'a> {
    ctx: &'a Ctx,
    source: Source,
    policy: Policy,
    node: Node,
    clock: Stepper,
    layout: Layout,
    targets: Vec<Target>,
    book: Book,
}

impl<'a> Run<'a> {
    fn start(ctx: &'a Ctx, source: Source, policy: Policy) -> Result<Run<'a>> {
        let clock = Stepper::new(ctx)?;
        let mut config = ServeConfig::new(Registry::File.coordinator(ctx)?, ctx.unique("c"))
            .with_layout(policy.layout())
            .with_snowflake("clock", &format!("{:?}", source.name()));
        for (key, value) in policy.settings() {
            config = config.with_snowflake(key, &value);
        }
        let mut node = Node::new(ctx, NODE, &config, 0)?;
        node.set_clock(Some(clock.fake.clone()));
        node.start()?;
        node.wait_ready(PROGRESS_WAIT)?;
        let layout = config.layout()?;
        let targets = vec![
            Target::snowflake(&node, "sf", layout),
            Target::snowflake(&node, "sf", layout).with_counts(&[1, 100, 1, 1000]),
        ];
        Ok(Run {
            ctx,
            source,
            policy,
            node,
            clock,
            layout,
            targets,
            book: Book::default(),
        })
    }

    /// Replies per stream before and after each step.
    fn warm(&self) -> u64 {
        self.ctx.scale(15, 300)
    }

    /// How long a state (behind, recovered) is held under load.
    fn hold(&self) -> Duration {
        self.ctx
            .scale(Duration::from_millis(400), Duration::from_secs(5))
    }

    fn row(&mut self, step: Step) -> Result<Outcome> {
        let load = Load::start(self.targets.clone(), LoadOptions::new());
        load.wait_ok(None, self.warm(), PROGRESS_WAIT)?;
        let mut seen = Seen::default();
        match step {
            Step::Forward1h => self.forward(&load, &mut seen)?,
            _ => self.back(&load, step.back(), &mut seen)?,
        }
        let record = load.finish();
        let row = Row {
            source: self.source,
            policy: self.policy,
            step,
        };
        Ok(self.judge(row, &record, &seen))
    }

    /// Steps back by `back`, waits for IDs to come again (by themselves, or
    /// after setting the clock right when that would take an hour), and ends
    /// with the clock at real time.
    fn back(&mut self, load: &Load, back: Duration, seen: &mut Seen) -> Result<()> {
        let back_ms = millis(back);
        let stepped = Instant::now();
        self.clock.set_ms(-back_ms)?;
        seen.ready_at_step = Some(self.readyz()?);
        if self.source == Source::Monotonic {
            seen.drift_ms = Some((self.drift_ms()?, -back_ms));
        }
        let fails = self.source == Source::Wall && !self.policy.absorbs(back);
        let mut from = stepped;
        if back > Duration::from_secs(5) {
            // Under load for a while: absorbed, or failing (an hour can't be
            // waited out here), then set right.
            std::thread::sleep(self.hold());
            seen.ready_while_behind = Some(self.readyz()?);
            if fails {
                self.clock.set_ms(0)?;
                seen.set_right = true;
                from = Instant::now();
            }
        }
        // A long step was set right above (or absorbed): never wait it out.
        let ready_within = if back > Duration::from_secs(5) {
            PROGRESS_WAIT
        } else {
            back + PROGRESS_WAIT
        };
        self.node.wait_ready(ready_within)?;
        if fails {
            seen.ready_again = Some(from.elapsed());
        }
        load.wait_ok(None, self.warm(), PROGRESS_WAIT)?;
        std::thread::sleep(self.hold());
        if self.clock.offset_ms() != 0 {
            self.clock.set_ms(0)?;
            load.wait_ok(None, self.warm(), PROGRESS_WAIT)?;
        }
        Ok(())
    }

    /// Jumps 1 h ahead, steps back to real time, then restarts the node: at
    /// real time (below the mark under the wall clock), and if refused, 1 h
    /// ahead.
    fn forward(&mut self, load: &Load, seen: &mut Seen) -> Result<()> {
        let jump_at = Timestamp::now();
        self.clock.set_ms(HOUR_MS)?;
        load.wait_ok(None, self.warm(), PROGRESS_WAIT)?;
        std::thread::sleep(self.hold());
        let latest = self.latest_id_time(load, jump_at);
        seen.jumped = latest.map(|t| (t, jump_at));
        // Every ID so far, then the mark: it must cover them all.
        let latest_overall = self.latest_id_time(load, Timestamp::MIN);
        let persisted = self.persisted_mark()?;
        seen.mark = persisted.zip(latest_overall);
        if self.source == Source::Monotonic {
            seen.drift_ms = Some((self.drift_ms()?, HOUR_MS));
        }

        self.clock.set_ms(0)?;
        seen.ready_at_step = Some(self.readyz()?);
        std::thread::sleep(self.hold());
        seen.ready_while_behind = Some(self.readyz()?);

        self.node.kill()?;
        let restart = self.node.try_start()?;
        if let Err(refusal) = restart {
            seen.notes.push(format!("restart at real time: {refusal}"));
            seen.refusal = Some(refusal.code);
            self.clock.set_ms(HOUR_MS)?;
            self.node.start()?;
            seen.restarted_ahead = true;
        }
        self.node.wait_ready(PROGRESS_WAIT)?;
        load.wait_ok(None, self.warm(), PROGRESS_WAIT)?;
        std::thread::sleep(self.hold());
        Ok(())
    }

    /// `/readyz`: status and message (the error's, or `ready`).
    fn readyz(&self) -> Result<(u16, String)> {
        let (status, body) = self.node.readyz()?;
        let message = body["error"]["message"]
            .as_str()
            .or_else(|| body["status"].as_str())
            .unwrap_or_default()
            .to_owned();
        Ok((status, message))
    }

    fn status(&self) -> Result<serde_json::Value> {
        let body = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?
            .get(self.node.url("/v1/status"))
            .send()?
            .json()?;
        Ok(body)
    }

    fn drift_ms(&self) -> Result<f64> {
        let status = self.status()?;
        status["clock"]["drift_ms"]
            .as_f64()
            .ok_or_else(|| anyhow!("no clock.drift_ms in /v1/status: {status}"))
    }

    fn persisted_mark(&self) -> Result<Option<Timestamp>> {
        let status = self.status()?;
        Ok(status["mark"]["persisted"]
            .as_str()
            .and_then(|t| t.parse().ok()))
    }

    /// The latest decoded time of the IDs in replies sent after `after`.
    fn latest_id_time(&self, load: &Load, after: Timestamp) -> Option<Timestamp> {
        load.snapshot()
            .iter()
            .filter(|r| r.sent >= after)
            .filter_map(|r| r.result.as_ref().ok())
            .flatten()
            .filter_map(|&id| self.layout.decode(id).ok())
            .map(|d| d.time)
            .max()
    }

    /// The row's outcome: the harness's checks, this module's, and what the
    /// row's expected behaviour requires.
    fn judge(&mut self, row: Row, record: &Record, seen: &Seen) -> Outcome {
        let slack = Duration::from_secs(1);
        let mut checker =
            Checker::new(expected(row)).with_time_bounds(slack, slack + self.policy.lead());
        if self.source == Source::Wall {
            // Checked below against the offsets in force per request instead.
            let any = Duration::from_secs(3 * 3600);
            checker = checker.with_node_time_bounds(NODE, any, any);
        }
        let mut out = checker.check(record);
        let harness_notes = std::mem::take(&mut out.notes);
        let mut drops_by_design = None;
        if self.source == Source::Wall {
            check_wall_times(
                &self.clock,
                self.layout,
                self.policy.lead(),
                record,
                &mut out,
            );
            if self.policy.reorders() {
                drops_by_design = Some(recount_order(record, 1, &mut out));
            }
        }
        self.book.check(record, &mut out);
        out.notes.extend(seen.notes.iter().cloned());
        require_row(row, seen, &mut out);
        // What the row saw first, then the harness's first violations: a
        // passing row's line shows only its first notes.
        out.notes.extend(harness_notes);
        out.expected = format!(
            "{} (seen: {})",
            out.expected,
            observed(seen, drops_by_design)
        );
        out
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn signed_ms(ms: i64) -> SignedDuration {
    SignedDuration::from_millis(ms)
}

/// Under the wall clock an ID's time lies within the node's clock while its
/// request was in flight, whatever offsets were in force then: from the
/// earliest reading (less `slack`) to the latest (plus the policy's lead, a
/// tick and `slack`).
fn check_wall_times(
    clock: &Stepper,
    layout: Layout,
    lead: Duration,
    record: &Record,
    out: &mut Outcome,
) {
    let slack = SignedDuration::from_secs(1);
    let ahead = SignedDuration::try_from(lead + layout.unit()).unwrap_or(SignedDuration::MAX);
    let mut shown = 0;
    let mut unshifted = 0;
    for reply in record.replies() {
        let Ok(ids) = &reply.result else { continue };
        let (lo_ms, hi_ms) = clock.offsets_during(reply.sent, reply.received);
        let lo = reply.sent + signed_ms(lo_ms) - slack;
        let hi = reply.received + signed_ms(hi_ms) + ahead + slack;
        // The window had the offset been 0: the process read the real time.
        let real_lo = reply.sent - slack;
        let real_hi = reply.received + ahead + slack;
        for &id in ids {
            let time = layout.decode(id).ok().map(|d| d.time);
            let ok = time.is_some_and(|t| t >= lo && t <= hi);
            if !ok && lo_ms != 0 && time.is_some_and(|t| t >= real_lo && t <= real_hi) {
                // Full runs on the plain libfaketime saw a few IDs (a handful
                // in a million) at the real time of their request while the
                // node's clock was shifted: the library's unguarded file
                // re-read (see faketime.rs, which now preloads the MT build).
                // Nothing in idmint can make that time from a clock that
                // reads 1 h earlier; rare ones are counted and shown, not
                // failed, and checked for uniqueness and order like the rest.
                unshifted += 1;
                continue;
            }
            if !ok {
                out.time_violations += 1;
                if shown < 5 {
                    shown += 1;
                    out.note(format!(
                        "{id} decodes outside {lo}..{hi} (clock offsets {lo_ms}..{hi_ms} ms in flight)"
                    ));
                }
            }
        }
    }
    // Rare, or it is idmint reading the real clock: then it is a violation.
    let total: usize = record
        .replies()
        .filter_map(|r| r.result.as_ref().ok())
        .map(Vec::len)
        .sum();
    if unshifted * 1000 > total {
        out.time_violations += unshifted as u64;
    }
    if unshifted > 0 {
        out.note(format!(
            "{unshifted} IDs at the real time of their request while the node's clock was \
             shifted: libfaketime served an unshifted read"
        ));
    }
}

/// For policies that reissue earlier times: the monotonicity figure becomes
/// the drops from a stream's high beyond `allowed` per stream (a step back's
/// one drop is by design); the drops are noted.
///
/// Once a stream has dropped below its high, the IDs that follow are reissued
/// ones, below that high, until the clock catches up and the stream passes it
/// again. `rollback-bits` issues those in order; `history` takes the clock's
/// tick or the nearest later one with numbers left, so they may go down again
/// among themselves, by design. A drop from the high itself, beyond the
/// allowed one per step, is a violation either way.
fn recount_order(record: &Record, allowed: u64, out: &mut Outcome) -> u64 {
    let mut beyond = 0;
    let mut drops_by_design = 0;
    for stream in &record.streams {
        let mut last: Option<u64> = None;
        let mut high = 0;
        let mut drops_from_high = 0;
        for &id in stream
            .iter()
            .filter_map(|r| r.result.as_ref().ok())
            .flatten()
        {
            if let Some(l) = last
                && id <= l
            {
                if l == high {
                    drops_from_high += 1;
                } else {
                    drops_by_design += 1;
                }
            }
            high = high.max(id);
            last = Some(id);
        }
        drops_by_design += drops_from_high.min(allowed);
        beyond += drops_from_high.saturating_sub(allowed);
    }
    out.note(format!(
        "order drops at the step back (by design): {drops_by_design}; harness order count {}",
        out.monotonic_violations
    ));
    out.monotonic_violations = beyond;
    drops_by_design
}

/// The promise, or the typed error docs/design.md describes, for a row.
fn expected(row: Row) -> String {
    let step = match row.step {
        Step::Back5ms => "stepped back 5 ms",
        Step::Back2s => "stepped back 2 s",
        Step::Back1h => "stepped back 1 h",
        Step::Forward1h => "1 h ahead, then back to real time",
    };
    if row.source == Source::Monotonic {
        let restart = if row.step == Step::Forward1h {
            "; restarted at real time it starts above its mark"
        } else {
            ""
        };
        return format!(
            "monotonic source, wall clock {step}: invisible (no errors, IDs at real time, \
             /readyz ready), the step reported as drift{restart}"
        );
    }
    let failing = match row.step {
        Step::Back5ms => {
            "typed 503 clock_behind until the clock catches up (5 ms), then back by itself"
        }
        Step::Back2s => {
            "typed 503 clock_behind and /readyz not ready until the clock catches up (2 s), \
             then back by itself"
        }
        Step::Back1h | Step::Forward1h => {
            "typed 503 clock_behind and /readyz not ready while behind (1 h can't be waited \
             out: set right, it serves at once)"
        }
    };
    let beyond = |bound: &str| format!("beyond {bound}, the promise can't be kept: {failing}");
    let behaviour = match (row.policy, row.fails()) {
        (Policy::Wait, false) => "absorbed: requests wait up to 5 ms, no errors".to_owned(),
        (Policy::Borrow, false) => {
            "absorbed: IDs go on from the last time, at most 3 s ahead of the clock, no errors"
                .to_owned()
        }
        (Policy::RollbackBits, false) => {
            "absorbed: the rollback counter moves on, unique IDs, no errors; not ordered \
             across the step (by design: mono counts drops from a stream's high beyond one)"
                .to_owned()
        }
        (Policy::History, false) => {
            "absorbed: IDs reissued from the unspent sequence numbers of the last 4096 ticks, \
             no errors; not ordered across the step (by design: mono counts drops from a \
             stream's high beyond one)"
                .to_owned()
        }
        (Policy::Wait, true) => beyond("the 5 ms wait"),
        (Policy::Borrow, true) => beyond("the 3 s bound"),
        (Policy::History, true) => beyond("the 4096-tick ring"),
        (Policy::Fail | Policy::RollbackBits, _) => failing.to_owned(),
    };
    let forward = match row.step {
        Step::Back5ms => "",
        _ => {
            "; where the clock then jumps forward past the persisted mark, 503 mark_reached \
              until the mark is persisted anew"
        }
    };
    if row.step == Step::Forward1h {
        format!(
            "wall clock 1 h ahead: IDs jump with it, the mark persisted first; back to real \
             time: {behaviour}; a restart at real time is refused (clock_behind_mark: below \
             the stored mark), 1 h ahead it starts above every ID{forward}"
        )
    } else {
        format!("wall clock {step}: {behaviour}{forward}")
    }
}

/// The row's own figures, for the table: what `/readyz` said and how soon it
/// was back, the drift reported, the jump, the order drops.
fn observed(seen: &Seen, drops_by_design: Option<u64>) -> String {
    let mut facts = Vec::new();
    if let Some((status, _)) = &seen.ready_at_step {
        facts.push(format!("/readyz {status} after the step"));
    }
    if let Some(again) = seen.ready_again {
        let how = if seen.set_right {
            "after the clock was set right"
        } else {
            "after the step"
        };
        facts.push(format!("ready again {:.1} s {how}", again.as_secs_f64()));
    }
    if let Some((drift, _)) = seen.drift_ms {
        facts.push(format!("drift {drift:.0} ms"));
    }
    if let Some((latest, jump_at)) = seen.jumped {
        let ahead = latest.duration_since(jump_at);
        facts.push(format!(
            "IDs {:.0} s ahead after the jump",
            ahead.as_secs_f64()
        ));
    }
    if let Some(drops) = drops_by_design {
        facts.push(format!("{drops} order drops by design"));
    }
    facts.join(", ")
}

/// What the row's expected behaviour requires beyond the harness's checks.
fn require_row(row: Row, seen: &Seen, out: &mut Outcome) {
    let mut allowed: Vec<&str> = Vec::new();
    if row.step == Step::Forward1h {
        // The restart: refused connections, a request cut by the kill, and
        // the 503 a node answers while it starts (http/starting.rs).
        allowed.extend(["connect", "io", "not_ready"]);
    }
    if row.source == Source::Wall && row.step != Step::Back5ms {
        // The wall clock jumps forward (1 h ahead, set right, back to real
        // time) past the persisted mark: IDs wait for the mark to be
        // persisted anew, and a request that waited 250 ms in vain gets 503.
        allowed.push("mark_reached");
    }
    if row.fails() {
        allowed.push("clock_behind");
    }
    let unexpected: Vec<String> = out
        .errors_by_code
        .keys()
        .filter(|code| !allowed.contains(&code.as_str()))
        .cloned()
        .collect();
    out.require(
        unexpected.is_empty(),
        format!("unexpected errors {unexpected:?} (allowed {allowed:?})"),
    );
    let visible = row.fails() && row.step.back() >= Duration::from_secs(2);
    if visible {
        out.require(
            out.errors("clock_behind") > 0,
            "no typed clock_behind error while the clock was behind",
        );
    }
    require_readiness(row, seen, visible, out);
    if let Some((drift, step_ms)) = seen.drift_ms {
        out.note(format!(
            "drift reported {drift:.3} ms for a step of {step_ms} ms"
        ));
        out.require(
            (drift - step_ms as f64).abs() < 500.0,
            format!("drift {drift:.3} ms reported, the step was {step_ms} ms"),
        );
    }
    if row.step == Step::Forward1h {
        require_forward(row, seen, out);
    }
}

/// `/readyz`: not ready (naming the clock) while a visible failure lasts,
/// ready through an absorbed step, and ready again in time.
fn require_readiness(row: Row, seen: &Seen, visible: bool, out: &mut Outcome) {
    let samples = [&seen.ready_at_step, &seen.ready_while_behind];
    for (status, message) in samples.into_iter().flatten() {
        if visible {
            out.require(
                *status == 503 && message.contains("clock"),
                format!("/readyz while behind: {status} {message:?}, wanted 503 naming the clock"),
            );
        } else if row.step.back() >= Duration::from_secs(2) {
            out.require(
                *status == 200,
                format!("/readyz through an absorbed step: {status} {message:?}"),
            );
        }
    }
    if visible && let Some((_, message)) = &seen.ready_at_step {
        out.note(format!("/readyz while behind: {message}"));
    }
    if let Some(again) = seen.ready_again {
        let bound = if seen.set_right {
            READY_SLACK
        } else {
            row.step.back() + READY_SLACK
        };
        out.require(
            again <= bound,
            format!("ready again only after {:.1}s", again.as_secs_f64()),
        );
    }
}

fn require_forward(row: Row, seen: &Seen, out: &mut Outcome) {
    match seen.jumped {
        Some((latest, jump_at)) => {
            let ahead = latest.duration_since(jump_at);
            out.note(format!(
                "latest ID after the jump is {ahead:#} ahead of the jump"
            ));
            if row.source == Source::Wall {
                out.require(
                    ahead >= SignedDuration::from_mins(59),
                    format!("IDs did not jump with the wall clock: {ahead:#} ahead"),
                );
            } else {
                out.require(
                    ahead < SignedDuration::from_mins(1),
                    format!("IDs followed the wall clock under the monotonic source: {ahead:#}"),
                );
            }
        }
        None => out.require(false, "no IDs after the jump"),
    }
    match seen.mark {
        Some((mark, latest)) => out.require(
            mark >= latest,
            format!("persisted mark {mark} below the latest ID time {latest}"),
        ),
        None => out.require(false, "no persisted mark in /v1/status"),
    }
    if row.source == Source::Wall {
        out.require(
            seen.refusal.as_deref() == Some("clock_behind_mark") && seen.restarted_ahead,
            format!(
                "restart at real time: refused with {:?}, restarted 1 h ahead: {}",
                seen.refusal, seen.restarted_ahead
            ),
        );
        if let Some(code) = &seen.refusal {
            out.count(&format!("start:{code}"), 1);
        }
    } else {
        out.require(
            seen.refusal.is_none(),
            format!("restart at real time refused: {:?}", seen.refusal),
        );
    }
}

// ---------------------------------------------------------------------------
// The rollback counter's capacity
// ---------------------------------------------------------------------------

/// `clock[wall,rollback-bits,back-2s-x4]`: two rollback bits are four counter
/// values, so three steps back into time already issued are absorbed and the
/// fourth gets `503 rollback_exhausted` (with `/readyz` not ready) until the
/// clock passes what the counter issued; set right, it serves again.
fn rollback_capacity(ctx: &Ctx) -> Result<Outcome> {
    let mut run = Run::start(ctx, Source::Wall, Policy::RollbackBits)?;
    let load = Load::start(run.targets.clone(), LoadOptions::new());
    load.wait_ok(None, run.warm(), PROGRESS_WAIT)?;
    for n in 1..=3 {
        run.clock.set_ms(-2000 * n)?;
        load.wait_ok(None, run.warm(), PROGRESS_WAIT)
            .with_context(|| format!("IDs after step back {n}"))?;
    }
    let errors_before = load.error_count(None);
    run.clock.set_ms(-8000)?;
    let code = load.wait_error(None, &[], PROGRESS_WAIT)?;
    let ready = run.readyz()?;
    std::thread::sleep(run.hold());
    let rollbacks = run.status()?["snowflake"]["rollbacks"]
        .as_str()
        .and_then(|n| n.parse::<u64>().ok());
    run.clock.set_ms(0)?;
    run.node.wait_ready(PROGRESS_WAIT)?;
    load.wait_ok(None, run.warm(), PROGRESS_WAIT)?;
    let record = load.finish();

    let mut out = Checker::new(
        "2 rollback bits = 4 counter values: 3 steps back of 2 s each into issued time are \
         absorbed (unique IDs, not ordered across the steps); the 4th gets 503 \
         rollback_exhausted and /readyz not ready until the clock passes the counter's IDs \
         (set right here)",
    )
    .with_node_time_bounds(
        NODE,
        Duration::from_secs(3 * 3600),
        Duration::from_secs(3 * 3600),
    )
    .check(&record);
    check_wall_times(&run.clock, run.layout, Duration::ZERO, &record, &mut out);
    let drops = recount_order(&record, 3, &mut out);
    out.expected = format!(
        "{} (seen: {} rollbacks, {drops} order drops by design)",
        out.expected,
        rollbacks.map_or_else(|| "?".to_owned(), |n| n.to_string())
    );
    out.note(format!(
        "first error after the 4th step: {code} ({errors_before} errors before it); \
         rollbacks {rollbacks:?}; {drops} order drops by design"
    ));
    out.require(
        errors_before == 0,
        format!("{errors_before} errors during the 3 absorbed steps"),
    );
    out.require(
        code == "rollback_exhausted",
        format!("the 4th step gave {code}"),
    );
    out.require(
        out.errors_by_code.keys().all(|c| c == "rollback_exhausted"),
        format!(
            "errors other than rollback_exhausted: {}",
            out.errors_text()
        ),
    );
    out.require(
        ready.0 == 503 && ready.1.contains("clock"),
        format!("/readyz while exhausted: {} {:?}", ready.0, ready.1),
    );
    out.require(
        rollbacks == Some(3),
        format!("rollbacks counted {rollbacks:?}, wanted 3"),
    );
    Ok(out)
}
