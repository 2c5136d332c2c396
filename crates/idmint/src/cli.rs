//! The command line: argument definitions (clap derive) and one module per
//! subcommand. Each subcommand's `run` takes its parsed arguments, writes to
//! stdout, and returns `anyhow::Result`; printing errors is `main`'s job.

mod bench;
mod completions;
mod config;
mod decode;
mod fleet;
mod format;
mod generate;
mod layout;
mod obfuscate;
mod plan;
mod reveal;
mod segment;
mod serve;

use std::fmt;
use std::io;

use clap::{Parser, Subcommand};

/// Distributed unique IDs: make, decode, size and obfuscate them.
#[derive(Debug, Parser)]
#[command(name = "idmint", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Make IDs and print them on stdout, one per line.
    Gen(generate::GenArgs),
    /// Take an ID apart: time, datacenter, worker, rollback, sequence.
    Decode(decode::DecodeArgs),
    /// Show a layout's bits and capacity, or list the presets.
    Layout(layout::LayoutArgs),
    /// Turn IDs into public IDs that look random (keyed FF1-AES permutation).
    ///
    /// The key comes from --key-file or $IDMINT_OBFUSCATION_KEY: 32 or 64 hex
    /// digits, optionally as KEY_ID:HEX entries (several, for rotation, with
    /// --key-id-bits). It is never printed.
    Obfuscate(obfuscate::ObfuscateArgs),
    /// Turn public IDs back into IDs, with the key(s) and settings that made them.
    Reveal(reveal::RevealArgs),
    /// Run the ID server: HTTP (Leaf-compatible and /v1), gRPC, the Redis protocol, metrics and a status page.
    ///
    /// With no arguments it runs on the embedded default: a `file` worker lease
    /// and a SQLite segment store in ./idmint-data, listening on 127.0.0.1:8080.
    /// Every config key can be set by an `IDMINT_<SECTION>__<KEY>` variable.
    Serve(serve::ServeArgs),
    /// Check a server config file without starting the server, or print the default config.
    ///
    /// `idmint config check FILE` accepts exactly what `idmint serve --config
    /// FILE` accepts (with the same IDMINT_… environment) and prints the
    /// resolved config, secrets hidden; idmint.example.toml lists every key.
    Config(config::ConfigArgs),
    /// Operator commands on the server's segment store: `raise KEY --above N`
    /// after the store was reset or restored from an older backup.
    ///
    /// Reads the store from --config as `idmint serve` does; with the node's
    /// data directory (stopped), also renews what the node remembers, so it
    /// can start again.
    Segment(segment::SegmentArgs),
    /// Load a server (http://, resp://, grpc://) or an in-process generator; print
    /// throughput and p50/p99/p99.9 latency, and check every ID is unique.
    ///
    /// Exits 1 if any ID came twice or any call failed.
    ///
    /// `idmint bench fleet` measures a fleet of nodes on a coordinator instead.
    Bench(BenchCommand),
    /// Print a shell completion script, e.g. `idmint completions bash >
    /// /etc/bash_completion.d/idmint`.
    Completions(completions::CompletionsArgs),
    /// Write the man pages into a directory (scripts/dist ships them).
    #[command(hide = true)]
    Man(completions::ManArgs),
}

/// `idmint bench`: the load generator, or `bench fleet`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct BenchCommand {
    #[command(subcommand)]
    fleet: Option<Box<BenchFleet>>,
    #[command(flatten)]
    load: bench::BenchArgs,
}

#[derive(Debug, Subcommand)]
enum BenchFleet {
    /// Run N nodes on a real coordinator (the config's registry): claim
    /// times, the coordinator's requests, CPU and memory per node, recovery
    /// after a mass kill, and a rolling restart.
    ///
    /// Exits 1 if two nodes ever held one worker ID or a start was refused.
    Fleet(fleet::FleetArgs),
}

/// Runs the subcommand.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Gen(args) => generate::run(args),
        Command::Decode(args) => decode::run(args),
        Command::Layout(args) => layout::run(args),
        Command::Obfuscate(args) => obfuscate::run(args),
        Command::Reveal(args) => reveal::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Config(args) => config::run(args),
        Command::Segment(args) => segment::run(args),
        Command::Bench(BenchCommand {
            fleet: Some(fleet), ..
        }) => match *fleet {
            BenchFleet::Fleet(args) => fleet::run(args),
        },
        Command::Bench(BenchCommand { load, .. }) => bench::run(load),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
    }
}

/// Input the user got wrong that the core has no error for (flags that don't go
/// together); `main` exits 2 for it.
#[derive(Debug)]
struct BadInput(String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// An error for input the user got wrong.
fn bad_input(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(message.into()))
}

/// True when the error is the user's input rather than a failure while running.
///
/// Beyond the core's own [`idmint_core::Error::is_bad_input`], a layout that has
/// run out or whose epoch is in the future counts: on the command line both are
/// the layout the user typed.
pub fn is_bad_input(err: &anyhow::Error) -> bool {
    use idmint_core::Error;
    err.chain().any(|e| {
        e.is::<BadInput>()
            || e.downcast_ref::<Error>().is_some_and(|e| {
                e.is_bad_input()
                    || matches!(
                        e,
                        Error::LayoutExhausted { .. } | Error::ClockBeforeEpoch { .. }
                    )
            })
    })
}

/// True when the error is stdout closing under us (`| head`), which is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn errors_are_classified() {
        let pipe =
            anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing");
        assert!(is_broken_pipe(&pipe));
        assert!(!is_bad_input(&pipe));
        assert!(is_bad_input(&bad_input("no")));
        let exhausted = idmint_core::Layout::BAIDU
            .tick_at(jiff::Timestamp::now())
            .unwrap_err();
        assert!(is_bad_input(&anyhow::Error::new(exhausted)));
        let transient = idmint_core::Error::RingEmpty {
            waited: std::time::Duration::ZERO,
            max_lead: std::time::Duration::ZERO,
        };
        assert!(!is_bad_input(&anyhow::Error::new(transient)));
    }
}
