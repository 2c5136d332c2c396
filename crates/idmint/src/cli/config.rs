//! `idmint config`: the server's configuration, without starting a server.
//!
//! - `check FILE` loads FILE and the `IDMINT_…` environment exactly as
//!   `idmint serve --config FILE` does, runs every check `serve` runs before
//!   it starts (the same code: `serve::checked_config`, no network I/O), and
//!   prints the resolved config as TOML with every secret hidden (tokens and
//!   keys as `***`, passwords inside URLs too), and a comment beside each
//!   `auto` of `[snowflake]` with what it comes to here. A config that passes can still
//!   fail at start only for what needs a connection, the data directory or
//!   the clock. Then, unless `--offline`, it asks each Redis the config uses
//!   what it looks like (read-only, 2 s each): `topology:` lines on stderr
//!   name the primary and its replicas, the sentinels and the primary each
//!   names, or the cluster's slots, masters and replicas, with a `warning:`
//!   line where one lost member stops it (a single member, fewer than 3
//!   sentinels, a master without a replica); and about its persistence, with
//!   a `warning:` line for each that can forget what idmint stores. It asks
//!   each host of the PostgreSQL and MySQL/MariaDB URLs it uses what it is:
//!   a `topology:` line per host (primary, standby, unreachable; 2 s each)
//!   and a `warning:` line for a URL naming one host (a failover needs the
//!   standbys listed, or a proxy), no writable host, or two. Warnings never
//!   change the exit code.
//! - `default` prints the embedded default config, the one an empty file gives.
//!
//! Every key, with its default and meaning, is listed in `idmint.example.toml`
//! at the repository root.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use idmint_node::Config;
use idmint_node::config::{RegistryKind, SqlModeName, ZooKeeperModeName};

use super::plan::{Plan, PlanInput, Reuse};
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
    /// restart can lose leases, marks or counters; and asks each host of the
    /// PostgreSQL and MySQL/MariaDB URLs whether it is the primary or a
    /// standby, warning about a URL with one host.
    Check {
        /// The TOML config file (`/dev/stdin` reads standard input).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Don't connect to any coordinator or database (skip the
        /// persistence warnings and the SQL topology).
        #[arg(long)]
        offline: bool,
        /// Plan the worker space for this many nodes: warn on stderr when
        /// the config's layout and registry can't hold them (see also
        /// `idmint layout --lease-ttl`).
        #[arg(long, value_name = "NODES")]
        fleet: Option<u64>,
        /// Node starts an hour for the plan (restarts, rollouts,
        /// autoscaling; default 0).
        #[arg(long, value_name = "N", requires = "fleet", value_parser = super::plan::parse_rate)]
        restarts_per_hour: Option<f64>,
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
            fleet,
            restarts_per_hour,
            overrides,
        } => {
            let config = serve::checked_config(Some(&file), |config| overrides.apply(config))?;
            if fleet.is_some() {
                warn_about_worker_space(&config, fleet, restarts_per_hour)?;
            }
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
    let text = explain_auto(&text, &config);
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("writing the config to stdout")
}

/// `text` (the config as TOML) with what each `auto` of `[snowflake]`
/// resolves to for this config, as a comment on its line: the window is wider
/// on registries with leader elections, and the claim wait follows the lease
/// TTL and the window, so `auto` alone doesn't say how long a start waits.
fn explain_auto(text: &str, config: &Config) -> String {
    let sf = &config.snowflake;
    let window = sf.mark_window();
    let ttl = idmint_node::open::lease_ttl(config);
    let window_note = format!(
        "{} with the {} registry",
        show(window),
        registry_label(config)
    );
    let wait_note = match ttl {
        Some(ttl) => format!(
            "{}: the lease TTL {} + the window {} + 30s, at least 60s",
            show(sf.claim_wait.resolve(Some(ttl), window)),
            show(ttl),
            show(window)
        ),
        None => format!(
            "{}: the floor, as the {} registry has no lease TTL",
            show(sf.claim_wait.resolve(None, window)),
            registry_label(config)
        ),
    };
    let mut section = "";
    let mut out = String::with_capacity(text.len() + 160);
    for line in text.lines() {
        if line.starts_with('[') {
            section = line;
        }
        out.push_str(line);
        if section == "[snowflake]" {
            if line == "window = \"auto\"" {
                out.push_str(&format!(" # {window_note}"));
            } else if line == "claim_wait = \"auto\"" {
                out.push_str(&format!(" # {wait_note}"));
            }
        }
        out.push('\n');
    }
    out
}

/// The registry as `explain_auto` names it: with ZooKeeper's mode, which
/// decides the window.
fn registry_label(config: &Config) -> String {
    let sf = &config.snowflake;
    match sf.registry {
        RegistryKind::Zookeeper => match sf.zookeeper.mode {
            ZooKeeperModeName::Ephemeral => "zookeeper (ephemeral)".to_owned(),
            ZooKeeperModeName::Forever => "zookeeper (forever)".to_owned(),
        },
        other => other.name().to_owned(),
    }
}

fn show(duration: std::time::Duration) -> String {
    idmint_core::duration::format_duration(duration).unwrap_or_else(|_| format!("{duration:?}"))
}

/// Prints the worker-space plan for the config's layout and registry on
/// stderr: a `plan:` line each, then a `warning:` line for each problem.
fn warn_about_worker_space(
    config: &Config,
    fleet: Option<u64>,
    restarts_per_hour: Option<f64>,
) -> Result<()> {
    let layout = config.layout()?;
    let sf = &config.snowflake;
    // With a fixed datacenter, registries hand out only the worker part.
    let workers = match sf.datacenter {
        Some(_) => u64::from(layout.max_worker()) + 1,
        None => layout.workers(),
    };
    let (reuse, lease_ttl) = match sf.registry {
        RegistryKind::Sql => match sf.sql.mode {
            SqlModeName::Lease => (Reuse::Leased, Some(sf.sql.lease_ttl)),
            SqlModeName::Disposable | SqlModeName::UidGenerator => (Reuse::Never, None),
        },
        RegistryKind::Redis => (Reuse::Leased, Some(sf.redis.lease_ttl)),
        RegistryKind::Etcd => (Reuse::Leased, Some(sf.etcd.lease_ttl)),
        RegistryKind::Zookeeper => match sf.zookeeper.mode {
            ZooKeeperModeName::Ephemeral => (Reuse::Leased, Some(sf.zookeeper.session_timeout)),
            // Leaf's persistent node per ip:port: a node with a new address
            // (a rescheduled pod) takes a new ID for good.
            ZooKeeperModeName::Forever => (Reuse::Never, None),
        },
        RegistryKind::File | RegistryKind::Static | RegistryKind::Host | RegistryKind::K8s => {
            (Reuse::Fixed, None)
        }
    };
    let plan = Plan::new(PlanInput {
        workers,
        reuse,
        lease_ttl,
        fleet,
        restarts_per_hour,
    });
    let mut stderr = std::io::stderr().lock();
    writeln!(
        stderr,
        "plan: {} worker IDs ({} registry)",
        plan.workers,
        sf.registry.name()
    )
    .context("writing to stderr")?;
    for (label, value) in plan.lines() {
        writeln!(stderr, "plan: {label}: {value}").context("writing to stderr")?;
    }
    for warning in &plan.warnings {
        writeln!(stderr, "warning: {warning}").context("writing to stderr")?;
    }
    Ok(())
}

/// Prints each Redis's topology (`topology:` lines) on stderr, a
/// `warning:` line for each single point of failure and each coordinator
/// that can forget what idmint stores in it, then each SQL host's role and
/// what is wrong with each SQL topology.
fn warn_about_coordinators(config: &Config) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime that asks the coordinators")?;
    let mut topologies = runtime.block_on(idmint_server::redis_topologies(config));
    topologies.extend(runtime.block_on(idmint_server::cluster_topologies(config)));
    let warnings = runtime.block_on(idmint_server::coordinator_warnings(config));
    let sql_topologies = runtime.block_on(idmint_server::sql_topology(config));
    let mut stderr = std::io::stderr().lock();
    for report in topologies {
        for line in &report.lines {
            writeln!(stderr, "topology: {}: {line}", report.what).context("writing to stderr")?;
        }
        for warning in &report.warnings {
            writeln!(stderr, "warning: {}: {warning}", report.what).context("writing to stderr")?;
        }
    }
    for warning in warnings {
        writeln!(stderr, "warning: {warning}").context("writing to stderr")?;
    }
    for topology in sql_topologies {
        for line in topology.lines() {
            writeln!(stderr, "topology: {line}").context("writing to stderr")?;
        }
        for warning in topology.warnings() {
            writeln!(stderr, "warning: {warning}").context("writing to stderr")?;
        }
    }
    Ok(())
}
