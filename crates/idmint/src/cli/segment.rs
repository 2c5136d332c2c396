//! `idmint segment`: operator commands on a server's segment store.
//!
//! - `raise KEY --above N`: the fix after a store forgot what it handed out
//!   (a Redis restarted without persistence, a database restored from an
//!   older backup), which the server refuses to serve from
//!   (`key_below_floor`, `store_reset`). It sets the key's `max_id` in the
//!   store from `--config` to at least `N + 1` (never lower; a missing key is
//!   created with its `[segment.keys]` step), so every ID issued from then on
//!   is above `N`. With the node's data directory (`--data-dir`, or
//!   `server.data_dir` when it holds a floor file) it also raises the key
//!   above that node's floor, and once the store holds every key the node
//!   issued from and every declared key, makes the node adopt the store's
//!   epoch marker (writing one into a store that has none): the node can
//!   start again. Run it while that node is stopped (its floor file is
//!   locked while it runs), once per node's data directory, with `N` at
//!   least the highest ID any node issued (each refusal names that node's
//!   floor).
//!
//! Exit codes as every command: 0 done, 1 a failure (the store unreachable,
//! the floor file in use by a running server), 2 bad input (a bad key or
//! number, a bad config).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use idmint_segment::{
    FLOOR_FILE_NAME, FloorFile, MAX_ID, NewKey, Raised, SegmentError, validate_key,
};

use super::{bad_input, serve};

/// Flags of `idmint segment`.
#[derive(Debug, Args)]
pub struct SegmentArgs {
    #[command(subcommand)]
    command: SegmentCommand,
}

#[derive(Debug, Subcommand)]
enum SegmentCommand {
    /// Raise a segment key so that it issues only IDs above N: never lowers
    /// it, creates it when missing. With the node's data directory, also
    /// above that node's floor, and the node adopts the store's epoch once
    /// the store holds every key it issued from: the way back after the
    /// store was reset or restored from an older backup.
    Raise(RaiseArgs),
}

/// Flags of `idmint segment raise`.
#[derive(Debug, Args)]
struct RaiseArgs {
    /// The segment key.
    #[arg(value_name = "KEY")]
    key: String,

    /// Every ID the key issues from now on is above N (at least the highest
    /// ID any node issued; the servers' refusals name their floors).
    #[arg(long, value_name = "N")]
    above: u64,

    /// The server's config file: the store (`[segment]`), the key's step
    /// (`[segment.keys.KEY]`) and `server.data_dir`, with the IDMINT_…
    /// environment as `idmint serve` reads it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// The stopped node's data directory whose floors to raise above and
    /// whose remembered store epoch to renew, as `serve --data-dir` (it also
    /// holds the default SQLite store). Default: server.data_dir, when it
    /// holds a floor file.
    #[arg(long, value_name = "DIR", conflicts_with = "store_only")]
    data_dir: Option<PathBuf>,

    /// Raise the key in the store only; leave every data directory alone.
    #[arg(long)]
    store_only: bool,

    /// The step of the key when it has to be created (default: its
    /// `[segment.keys]` step, else the step of its row in the store).
    #[arg(long, value_name = "N")]
    step: Option<u64>,
}

/// Runs `idmint segment …`.
pub fn run(args: SegmentArgs) -> Result<()> {
    match args.command {
        SegmentCommand::Raise(args) => raise(args),
    }
}

fn raise(args: RaiseArgs) -> Result<()> {
    // Bad input is refused before anything is opened.
    validate_key(&args.key).map_err(segment_error)?;
    if args.above >= MAX_ID {
        return Err(bad_input(format!(
            "--above {}: no ID is above it (the largest is {MAX_ID})",
            args.above
        )));
    }
    // As `serve --data-dir`: the data directory also holds the default
    // SQLite store, so the store raised is the one that node serves from.
    let config = serve::checked_config(args.config.as_deref(), |config| {
        if let Some(dir) = &args.data_dir {
            config.server.data_dir = dir.clone();
        }
    })?;
    let floors = if args.store_only {
        None
    } else {
        open_floors(&args, &config.server.data_dir)?
    };
    let declared: Vec<String> = config.segment.keys.keys().cloned().collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let raised = runtime.block_on(async {
        let store = idmint_node::open::open_segment_store(&config)
            .await
            .map_err(|e| {
                if e.is_config() {
                    bad_input(format!("config: {e}"))
                } else {
                    anyhow::Error::new(e)
                }
            })?;
        let spec = match (config.segment.keys.get(&args.key), args.step) {
            (_, Some(step)) => NewKey::new(args.key.clone(), step),
            (Some(declared), None) => declared.new_key(&args.key),
            (None, None) => match store.describe(&args.key).await.map_err(segment_error)? {
                Some(row) => {
                    NewKey::new(args.key.clone(), row.step).with_delta(row.delta, row.remainder)
                }
                None => {
                    return Err(bad_input(format!(
                        "segment key {:?} is neither in [segment.keys] nor in the store: give \
                         --step to create it",
                        args.key
                    )));
                }
            },
        };
        idmint_segment::raise_key(store.as_ref(), floors.as_ref(), spec, args.above, &declared)
            .await
            .map_err(segment_error)
    })?;
    report(&args.key, &raised, floors.as_ref())
}

/// The node's floor file: `--data-dir` (which must exist), else
/// `server.data_dir` when it holds one.
fn open_floors(args: &RaiseArgs, configured: &std::path::Path) -> Result<Option<FloorFile>> {
    let dir = match &args.data_dir {
        Some(dir) if !dir.is_dir() => {
            return Err(bad_input(format!(
                "--data-dir {} is not a directory",
                dir.display()
            )));
        }
        Some(dir) => dir.clone(),
        None if configured.join(FLOOR_FILE_NAME).is_file() => configured.to_owned(),
        None => {
            eprintln_note(&format!(
                "no floor file in server.data_dir {}: raising the key in the store only",
                configured.display()
            ));
            return Ok(None);
        }
    };
    FloorFile::open(&dir)
        .map(Some)
        .map_err(|e| anyhow::Error::new(e).context(format!("data directory {}", dir.display())))
}

/// A store error as the command line classifies it.
fn segment_error(e: SegmentError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

fn report(key: &str, raised: &Raised, floors: Option<&FloorFile>) -> Result<()> {
    let mut out = String::new();
    let now = raised.info.max_id;
    match raised.before {
        None => out.push_str(&format!(
            "segment key {key}: created, issuing from {now} (step {})\n",
            raised.info.step
        )),
        Some(before) if before < now => out.push_str(&format!(
            "segment key {key}: raised from {before} to {now}, issuing from {now}\n"
        )),
        Some(_) => out.push_str(&format!(
            "segment key {key}: already at {now} (at least {}), left as it was\n",
            raised.target
        )),
    }
    if let Some(floors) = floors {
        let path = floors.path();
        if raised.still_below.is_empty() {
            match &raised.epoch_adopted {
                Some(epoch) => out.push_str(&format!(
                    "{}: adopted the store's epoch {epoch}; the node can start\n",
                    path.display()
                )),
                None => out.push_str(&format!(
                    "{}: every key the node issued from is at or above its floor; the node \
                     can start\n",
                    path.display()
                )),
            }
        } else {
            out.push_str(&format!(
                "{}: the node still refuses to start; raise these keys too:\n",
                path.display()
            ));
            for s in &raised.still_below {
                let found = s
                    .found
                    .map_or_else(|| "missing".to_owned(), |m| format!("at {m}"));
                match s.floor {
                    Some(floor) => out.push_str(&format!(
                        "  {} (floor {floor}: --above {} at least; the store has it {found})\n",
                        s.key,
                        floor.saturating_sub(1)
                    )),
                    None => out.push_str(&format!(
                        "  {} (declared in [segment.keys] but missing: other nodes may have \
                         issued it)\n",
                        s.key
                    )),
                }
            }
        }
    }
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("writing to stdout")
}

/// One line on stderr that is not an error.
fn eprintln_note(text: &str) {
    // Not eprintln!: it panics when stderr is closed.
    let _ = writeln!(std::io::stderr(), "note: {text}");
}
