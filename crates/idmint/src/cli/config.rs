//! `idmint config`: the server's configuration, without starting a server.
//!
//! - `check FILE` loads FILE and the `IDMINT_…` environment exactly as
//!   `idmint serve --config FILE` does, runs every check `serve` runs before
//!   it starts (the same code: `serve::checked_config`, no network I/O), and
//!   prints the resolved config as TOML with every secret hidden (tokens and
//!   keys as `***`, passwords inside URLs too). A config that passes can still
//!   fail at start only for what needs a connection, the data directory or
//!   the clock. Then, unless `--offline`, it asks each Redis the config uses
//!   about its persistence (read-only, 2 s each) and prints a `warning:` line
//!   on stderr for each that can forget what idmint stores; warnings never
//!   change the exit code.
//! - `default` prints the embedded default config, the one an empty file gives.
//!
//! Every key, with its default and meaning, is listed in `idmint.example.toml`
//! at the repository root.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use idmint_server::Config;

use super::{bad_input, serve};

/// Flags of `idmint config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Check a config file as `idmint serve --config FILE` would (with the
    /// IDMINT_… environment and the same overriding flags), without starting
    /// the server; print the resolved config with secrets hidden.
    ///
    /// Exits 0 when the config is good, 2 with one line naming the bad key
    /// and the file or environment variable it came from.
    ///
    /// Then asks each Redis the config uses whether it keeps what it is told
    /// (appendonly, appendfsync, eviction) and warns on stderr where a
    /// restart can lose leases, marks or counters.
    Check {
        /// The TOML config file (`/dev/stdin` reads standard input).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Don't connect to any coordinator (skip the persistence warnings).
        #[arg(long)]
        offline: bool,
        /// The flags `idmint serve` takes that override config keys.
        #[command(flatten)]
        overrides: serve::ConfigFlags,
    },
    /// Print the default config (what no file at all gives) as TOML.
    Default,
}

/// Runs `idmint config check` or `idmint config default`.
pub fn run(args: ConfigArgs) -> Result<()> {
    let config = match args.command {
        ConfigCommand::Check {
            file,
            offline,
            overrides,
        } => {
            let config = serve::checked_config(Some(&file), |config| overrides.apply(config))?;
            if !offline {
                warn_about_coordinators(&config)?;
            }
            config
        }
        ConfigCommand::Default => Config::default(),
    };
    let text = config
        .to_toml()
        .map_err(|e| bad_input(format!("config: {e}")))?;
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("writing the config to stdout")
}

/// Prints a `warning:` line on stderr for each coordinator that can forget
/// what idmint stores in it.
fn warn_about_coordinators(config: &Config) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime that asks the coordinators")?;
    let warnings = runtime.block_on(idmint_server::coordinator_warnings(config));
    let mut stderr = std::io::stderr().lock();
    for warning in warnings {
        writeln!(stderr, "warning: {warning}").context("writing to stderr")?;
    }
    Ok(())
}
