//! `idmint gen`: IDs on stdout, one per line, from any strategy and layout.
//!
//! Output is the hot path: stdout is locked once behind a 64 KiB `BufWriter`,
//! integers are formatted without allocating, and time-ordered IDs are reserved
//! in batches of up to [`BATCH`] (one atomic step per tick, not per ID).

use std::io::{self, BufWriter, IsTerminal, StdoutLock};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use idmint_core::uuid::{UuidGenerator, UuidNamespace, UuidVersion};
use idmint_core::{Cached, Error, IdBatch, Layout, SequenceExhausted, Snowflake, TakeRejection};
use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};

use super::bad_input;
use super::format::{IdFormat, IdWriter};

/// The most IDs one `gen` prints.
const MAX_COUNT: u64 = 1_000_000_000;
/// IDs reserved per call to a generator.
const BATCH: u64 = 100_000;
/// Runs at least this long get a progress bar (when stderr is a terminal).
const PROGRESS_FROM: u64 = 1_000_000;
/// The longest one batch of the cached strategy waits for the clock: longer than
/// any sensible layout needs for [`BATCH`] IDs.
const CACHED_MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// The layout when `--layout` is not given.
const DEFAULT_LAYOUT: &str = "twitter";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Strategy {
    /// Time · node · sequence from a layout (Twitter Snowflake, Leaf).
    Snowflake,
    /// Baidu's CachedUidGenerator: a ring of pre-made IDs.
    Cached,
    /// RFC 9562 UUIDs (v7 unless --uuid-version says otherwise).
    Uuid,
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// How IDs are made.
    #[arg(long, value_enum, default_value_t = Strategy::Snowflake)]
    strategy: Strategy,

    /// Layout for snowflake and cached: a preset (twitter, leaf, baidu, sonyflake,
    /// discord, instagram, js53, tso) or a spec such as `twitter,epoch=2024-01-01`
    /// [default: twitter].
    #[arg(long, value_name = "TEXT")]
    layout: Option<String>,

    /// Worker ID, within the layout's worker bits [default: 0].
    #[arg(long, value_name = "N")]
    worker: Option<u32>,

    /// Datacenter ID, within the layout's datacenter bits [default: 0].
    #[arg(long, value_name = "N")]
    datacenter: Option<u32>,

    /// How many IDs, 1 to 1,000,000,000 [default: 1].
    #[arg(long, short = 'n', value_name = "N")]
    count: Option<u64>,

    /// Text form of snowflake and cached IDs: decimal, lowercase hex without a
    /// prefix, or Crockford base32 [default: dec].
    #[arg(long, value_enum, value_name = "FORMAT")]
    format: Option<IdFormat>,

    /// UUID version for --strategy uuid: 7 (time-ordered), 4 (random), 1, or the
    /// name-based 3 and 5 (with --namespace and --name) [default: 7].
    #[arg(long, value_name = "VERSION")]
    uuid_version: Option<String>,

    /// Namespace of v3/v5 UUIDs: dns, url, oid, x500 or a UUID.
    #[arg(long, value_name = "NAMESPACE")]
    namespace: Option<String>,

    /// Name of a v3/v5 UUID; repeat for several (one UUID per name).
    #[arg(long, value_name = "NAME")]
    name: Vec<String>,
}

pub fn run(args: GenArgs) -> Result<()> {
    if let Some(count) = args.count
        && (count == 0 || count > MAX_COUNT)
    {
        return Err(Error::InvalidCount {
            count,
            max: MAX_COUNT,
        }
        .into());
    }
    match args.strategy {
        Strategy::Snowflake => snowflake_ids(&args),
        Strategy::Cached => cached_ids(&args),
        Strategy::Uuid => uuids(&args),
    }
}

/// What snowflake and cached IDs are made from, checked.
struct IntegerSetup {
    layout: Layout,
    worker: u32,
    datacenter: u32,
    count: u64,
    format: IdFormat,
}

impl IntegerSetup {
    fn new(args: &GenArgs, strategy: &str) -> Result<IntegerSetup> {
        for (given, flag) in [
            (args.uuid_version.is_some(), "--uuid-version"),
            (args.namespace.is_some(), "--namespace"),
            (!args.name.is_empty(), "--name"),
        ] {
            if given {
                return Err(bad_input(format!(
                    "{flag} applies to --strategy uuid, not --strategy {strategy}"
                )));
            }
        }
        Ok(IntegerSetup {
            layout: args.layout.as_deref().unwrap_or(DEFAULT_LAYOUT).parse()?,
            worker: args.worker.unwrap_or(0),
            datacenter: args.datacenter.unwrap_or(0),
            count: args.count.unwrap_or(1),
            format: args.format.unwrap_or_default(),
        })
    }
}

fn snowflake_ids(args: &GenArgs) -> Result<()> {
    let setup = IntegerSetup::new(args, "snowflake")?;
    // Wait, never borrow: a command-line run has no reason to issue IDs from
    // ticks that have not come yet.
    let generator = Snowflake::builder(setup.layout)
        .with_worker(setup.worker)
        .with_datacenter(setup.datacenter)
        .with_sequence_exhausted(SequenceExhausted::Wait)
        .build()?;
    print_batches(setup.count, setup.format, |n| generator.next_ids(n))
}

fn cached_ids(args: &GenArgs) -> Result<()> {
    let setup = IntegerSetup::new(args, "cached")?;
    // Takes wait for the clock when the ring's lead is used up, as snowflake's
    // `Wait` does: a command-line run has no reason to fail because it asked for
    // more than the layout issues within the lead. No refiller thread: takes
    // refill inline, which is all one thread needs.
    let generator = Cached::builder(setup.layout)
        .with_worker(setup.worker)
        .with_datacenter(setup.datacenter)
        .with_take_rejection(TakeRejection::Wait {
            max: CACHED_MAX_WAIT,
        })
        .build()?;
    print_batches(setup.count, setup.format, |n| generator.next_ids(n))
}

/// Prints `count` IDs reserved `BATCH` at a time by `next_ids`.
fn print_batches(
    count: u64,
    format: IdFormat,
    mut next_ids: impl FnMut(u64) -> idmint_core::Result<IdBatch>,
) -> Result<()> {
    let mut out = IdWriter::new(stdout(), format);
    let progress = Progress::new(count);
    let mut remaining = count;
    while remaining > 0 {
        let n = remaining.min(BATCH);
        let batch = next_ids(n)?;
        for run in batch.runs() {
            for id in run.iter() {
                out.write_id(id.get()).context("writing to stdout")?;
            }
        }
        remaining -= n;
        progress.inc(n);
    }
    out.finish().context("writing to stdout")?;
    Ok(())
}

/// UUIDs, hyphenated lowercase.
fn uuids(args: &GenArgs) -> Result<()> {
    for (given, flag, why) in [
        (
            args.layout.is_some(),
            "--layout",
            "UUIDs have a fixed layout",
        ),
        (args.worker.is_some(), "--worker", "UUIDs need no worker ID"),
        (
            args.datacenter.is_some(),
            "--datacenter",
            "UUIDs need no datacenter ID",
        ),
        (
            args.format.is_some(),
            "--format",
            "UUIDs print in their hyphenated form",
        ),
    ] {
        if given {
            return Err(bad_input(format!(
                "{flag} does not apply to --strategy uuid: {why}"
            )));
        }
    }
    let version = match &args.uuid_version {
        Some(text) => text.parse::<UuidVersion>().map_err(config_to_bad_input)?,
        None => UuidVersion::V7,
    };
    let mut out = IdWriter::new(stdout(), IdFormat::Dec);
    let mut line = [0u8; 37];
    let mut write = |out: &mut IdWriter<_>, uuid: idmint_core::uuid::Uuid| -> Result<()> {
        uuid.hyphenated().encode_lower(&mut line[..36]);
        line[36] = b'\n';
        out.write_raw(&line).context("writing to stdout")
    };
    if version.is_name_based() {
        let namespace: UuidNamespace = args
            .namespace
            .as_deref()
            .ok_or_else(|| {
                bad_input(format!(
                    "UUID {version} needs --namespace (dns, url, oid, x500 or a UUID) and --name"
                ))
            })?
            .parse()
            .map_err(config_to_bad_input)?;
        if args.name.is_empty() {
            return Err(bad_input(format!(
                "UUID {version} needs --name (repeat it for several)"
            )));
        }
        if args.count.is_some() {
            return Err(bad_input(format!(
                "--count does not apply to UUID {version}: it is one UUID per --name"
            )));
        }
        for name in &args.name {
            write(
                &mut out,
                UuidGenerator::name_based(version, namespace, name.as_bytes())?,
            )?;
        }
    } else {
        if args.namespace.is_some() || !args.name.is_empty() {
            return Err(bad_input(format!(
                "--namespace and --name apply to UUID v3 and v5, not {version}"
            )));
        }
        let count = args.count.unwrap_or(1);
        let generator = UuidGenerator::new();
        let progress = Progress::new(count);
        let mut remaining = count;
        while remaining > 0 {
            let n = remaining.min(BATCH);
            for _ in 0..n {
                write(&mut out, generator.next(version)?)?;
            }
            remaining -= n;
            progress.inc(n);
        }
    }
    out.finish().context("writing to stdout")?;
    Ok(())
}

/// The core's config error without its "invalid generator config" prefix, which
/// reads oddly for a command-line flag.
fn config_to_bad_input(err: Error) -> anyhow::Error {
    match err {
        Error::InvalidConfig(message) => bad_input(message),
        other => other.into(),
    }
}

fn stdout() -> BufWriter<StdoutLock<'static>> {
    BufWriter::with_capacity(64 * 1024, io::stdout().lock())
}

/// A progress bar on stderr for long runs, only when stderr is a terminal; it
/// clears itself when dropped, so an error line is not printed under a stale bar.
struct Progress(Option<ProgressBar>);

impl Progress {
    fn new(count: u64) -> Progress {
        if count < PROGRESS_FROM || !io::stderr().is_terminal() {
            return Progress(None);
        }
        let style = ProgressStyle::with_template(
            "{bar:40} {human_pos}/{human_len} IDs  {elapsed_precise}  eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        Progress(Some(
            ProgressBar::new(count)
                .with_style(style)
                .with_finish(ProgressFinish::AndClear),
        ))
    }

    fn inc(&self, n: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(n);
        }
    }
}
