//! The end-to-end fault suite (docs/design.md §1 and §5 on the real binary): real
//! `idmint serve` processes on real coordinators, killed, stopped, restarted
//! behind, cut off, with their coordinators stopped under them, while clients
//! record every ID; then the promises are checked on what was recorded.
//!
//! A test target with its own `main` (`harness = false`):
//!
//! ```text
//! cargo test -p idmint --test faults                 # reduced: every scenario, small counts
//! cargo test -p idmint --test faults -- sigkill      # the scenarios whose name contains "sigkill"
//! cargo test --release -p idmint --test faults -- --full   # full (scripts/faults), writes FAULTS.md
//! ```
//!
//! Each scenario prints one line (scenario, IDs checked, duplicates,
//! monotonicity and time violations, errors by code, the longest time without
//! service), and the run writes the table: `FAULTS.md` at the repository root
//! for a full, unfiltered run, `target/faults/FAULTS.md` otherwise (so CI
//! never dirties the tree). The exit status is non-zero when a scenario fails.
//!
//! Under `IDMINT_FAULT_SUITE=separate` it runs nothing and passes: scripts/test
//! sets that for its `cargo test --workspace` and runs this binary beside it.
//!
//! libtest's flags that cargo may pass (`--nocapture`, `--quiet`,
//! `--test-threads N`, ...) are accepted and ignored; `--list` prints the
//! scenario names (`NAME: test`) and exits.

mod clock;
mod coordinator;
mod faketime;
mod forgets;
mod ha;
mod harness;
mod monotonic;
mod process;
mod segment_reset;

use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::harness::{Ctx, Mode, Outcome, Scenario, Services, Skipped};

/// Every scenario of the suite, in the order they run.
fn all_scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    all.extend(process::scenarios());
    all.extend(coordinator::scenarios());
    all.extend(forgets::scenarios());
    all.extend(ha::scenarios());
    all.extend(clock::scenarios());
    all.extend(monotonic::scenarios());
    all.extend(segment_reset::scenarios());
    all
}

/// What the command line asked for.
#[derive(Debug)]
struct Args {
    mode: Mode,
    list: bool,
    /// Only ignored tests were asked for (`--ignored`): there are none.
    ignored_only: bool,
    exact: bool,
    /// Keep the suite's directory (the nodes' logs) after a passing run too
    /// (`--keep`); a failed run always keeps it.
    keep: bool,
    filters: Vec<String>,
}

/// Set to `separate` where the suite runs as a step of its own: scripts/test
/// runs this binary beside `cargo test --workspace` (most of the suite waits
/// on outages, so the two overlap), and sets this for the `cargo test` so the
/// suite doesn't run twice.
const SEPARATE: &str = "IDMINT_FAULT_SUITE";

/// libtest flags followed by a value, skipped with it.
const FLAGS_WITH_VALUE: &[&str] = &[
    "--test-threads",
    "--format",
    "--logfile",
    "--skip",
    "--color",
    "--report-time",
    "-Z",
];

fn parse_args(args: impl IntoIterator<Item = String>) -> Args {
    let mut parsed = Args {
        mode: Mode::Reduced,
        list: false,
        ignored_only: false,
        exact: false,
        keep: false,
        filters: Vec::new(),
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--full" => parsed.mode = Mode::Full,
            "--list" => parsed.list = true,
            "--ignored" => parsed.ignored_only = true,
            "--exact" => parsed.exact = true,
            "--keep" => parsed.keep = true,
            flag if FLAGS_WITH_VALUE.contains(&flag) => {
                args.next();
            }
            flag if flag.starts_with('-') => {}
            filter => parsed.filters.push(filter.to_owned()),
        }
    }
    parsed
}

fn selected(args: &Args, name: &str) -> bool {
    args.filters.is_empty()
        || args.filters.iter().any(|f| {
            if args.exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        })
}

/// A scenario's result as run: its outcome, or why it could not run.
enum Ran {
    Done(Outcome),
    Skipped(String),
    Error(String),
}

impl Ran {
    fn passed(&self) -> bool {
        match self {
            Ran::Done(outcome) => outcome.passed(),
            Ran::Skipped(_) => true,
            Ran::Error(_) => false,
        }
    }
}

fn run_one(scenario: &Scenario, ctx: &Ctx) -> Ran {
    match std::panic::catch_unwind(AssertUnwindSafe(|| (scenario.run)(ctx))) {
        Ok(Ok(outcome)) => Ran::Done(outcome),
        Ok(Err(e)) => match e.downcast_ref::<Skipped>() {
            Some(skipped) => Ran::Skipped(skipped.0.clone()),
            None => Ran::Error(format!("{e:#}")),
        },
        Err(panic) => Ran::Error(
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".to_owned()),
        ),
    }
}

fn print_result(name: &str, ran: &Ran, took: Duration) {
    match ran {
        Ran::Done(outcome) => {
            println!("{}  ({:.0}s)", outcome.line(name), took.as_secs_f64());
            for failure in &outcome.failures {
                println!("    FAILED: {failure}");
            }
            let shown = if outcome.passed() {
                3
            } else {
                outcome.notes.len()
            };
            for note in outcome.notes.iter().take(shown) {
                println!("    {note}");
            }
        }
        Ran::Skipped(why) => println!("{name:<34} SKIPPED: {why}"),
        Ran::Error(why) => println!("{name:<34} ERROR: {why}"),
    }
}

/// The table, with the command that reproduces it.
fn table(mode: Mode, results: &[(&'static str, Ran, Duration)], took: Duration) -> String {
    let (command, one_row) = match mode {
        Mode::Full => ("scripts/faults", "scripts/faults NAME"),
        Mode::Reduced => (
            "cargo test -p idmint --test faults",
            "cargo test -p idmint --test faults -- NAME",
        ),
    };
    let mut t = String::new();
    let _ = writeln!(t, "# Fault suite results\n");
    let _ = writeln!(
        t,
        "Produced by the fault suite itself (`crates/idmint/tests/faults/`), {} mode, {} \
         scenarios in {:.0} s, finished {}.\n",
        mode.name(),
        results.len(),
        took.as_secs_f64(),
        jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_else(|_| jiff::Timestamp::now())
    );
    let _ = writeln!(
        t,
        "Reproduce the table with `{command}`; one row with `{one_row}`. \
         Columns: IDs checked, duplicate IDs, \
         monotonicity violations (per client stream and per worker across nodes; for \
         `monotonic` keys, real-time order across every client and node: requests whose IDs \
         are not above every ID read before they were sent, and pairs out of order within a \
         response), snowflake and monotonic IDs whose decoded time is out of bounds, failed requests by code \
         (`start:CODE` counts refused starts; `connect`/`io`/`timeout` are transport \
         failures), and the longest time a client stream went without an ID.\n"
    );
    let _ = writeln!(
        t,
        "| scenario | IDs | dup | mono | time | errors | max gap | result | expected behaviour |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---|---:|---|---|");
    for (name, ran, _) in results {
        match ran {
            Ran::Done(o) => {
                let _ = writeln!(
                    t,
                    "| `{name}` | {} | {} | {} | {} | {} | {:.1} s | {} | {} |",
                    o.ids_checked,
                    o.duplicates,
                    o.monotonic_violations,
                    o.time_violations,
                    o.errors_text().replace('|', "\\|"),
                    o.max_gap.as_secs_f64(),
                    if o.passed() { "ok" } else { "FAILED" },
                    o.expected.replace('|', "\\|")
                );
            }
            Ran::Skipped(why) => {
                let _ = writeln!(t, "| `{name}` | | | | | | | skipped | {why} |");
            }
            Ran::Error(why) => {
                let first = why.lines().next().unwrap_or_default().replace('|', "\\|");
                let _ = writeln!(t, "| `{name}` | | | | | | | ERROR | {first} |");
            }
        }
    }
    t
}

fn repo_root() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn table_path(mode: Mode, filtered: bool) -> PathBuf {
    if mode == Mode::Full && !filtered {
        return repo_root().join("FAULTS.md");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo_root().join("target"), PathBuf::from);
    target.join("faults").join("FAULTS.md")
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            println!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the selected scenarios; `Ok(false)` when one failed.
fn run() -> Result<bool> {
    let args = parse_args(std::env::args().skip(1));
    let scenarios: Vec<Scenario> = all_scenarios()
        .into_iter()
        .filter(|s| selected(&args, s.name))
        .collect();
    if args.list {
        if !args.ignored_only {
            for s in &scenarios {
                println!("{}: test", s.name);
            }
        }
        return Ok(true);
    }
    if args.ignored_only {
        return Ok(true);
    }
    if std::env::var_os(SEPARATE).is_some_and(|v| v == "separate") {
        // scripts/test runs this binary itself, beside `cargo test --workspace`.
        println!(
            "fault suite: not run by this command ({SEPARATE}=separate: its own step runs it)"
        );
        return Ok(true);
    }
    if scenarios.is_empty() {
        // `cargo test NAME` passes NAME to every test target: not ours.
        println!("fault suite: no scenario matches {:?}", args.filters);
        return Ok(true);
    }
    let root = tempfile::Builder::new()
        .prefix("idmint-faults-")
        .tempdir()
        .context("creating the suite's directory")?;
    println!(
        "fault suite, {} mode: {} scenarios (files under {})",
        args.mode.name(),
        scenarios.len(),
        root.path().display()
    );
    let services = Arc::new(Services::default());
    let started = Instant::now();
    let mut results = Vec::new();
    for (idx, scenario) in scenarios.iter().enumerate() {
        let dir = root.path().join(format!("{idx:02}"));
        let ctx = Ctx::new(args.mode, scenario.name, dir, services.clone());
        let t0 = Instant::now();
        let ran = run_one(scenario, &ctx);
        let took = t0.elapsed();
        print_result(scenario.name, &ran, took);
        results.push((scenario.name, ran, took));
    }
    drop(services);
    let took = started.elapsed();
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, ran, _)| !ran.passed())
        .map(|(name, _, _)| *name)
        .collect();
    let path = table_path(args.mode, !args.filters.is_empty());
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&path, table(args.mode, &results, took))
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "{} scenarios in {:.0} s, {} failed; table in {}",
        results.len(),
        took.as_secs_f64(),
        failed.len(),
        path.display()
    );
    if failed.is_empty() && !args.keep {
        return Ok(true);
    }
    // Keep the nodes' logs of a failed run, or when asked to.
    let kept = root.keep();
    if failed.is_empty() {
        println!("logs kept under {}", kept.display());
        return Ok(true);
    }
    println!(
        "FAILED: {}; logs kept under {}",
        failed.join(", "),
        kept.display()
    );
    Ok(false)
}
