//! `idmint bench fleet`: what a fleet costs its coordinator, and how fast it
//! recovers, measured on the real one a config names (etcd, PostgreSQL,
//! MySQL/MariaDB, Redis, ZooKeeper, SQLite).
//!
//! For each fleet size N it runs, one after the other:
//! 1. **start**: N nodes start at once in a worker space of exactly N IDs
//!    (no spare, the hardest case); each claim's time to serving, p50/p99;
//! 2. **steady**: for `--steady`, the registry calls each node makes
//!    (counted by this process, in-process nodes), the coordinator's own
//!    request counters, and its CPU and memory;
//! 3. **join**: `--joins` nodes join the running fleet one after another
//!    (in-process), each stopped again before the next: the claim time of a
//!    node joining a fleet of N, without a crowd starting beside it;
//! 4. **kill**: `--kill-percent` of the nodes die at once (a crash: nothing
//!    released) and as many replacements start at once; the time until each
//!    serves, against the bound the lease TTL sets (TTL + 2 s in-process,
//!    TTL + 5 s for processes);
//! 5. **roll** (in-process): a rolling restart, every node replaced once,
//!    in a worker space of `--roll-space` times N (default 1.2): replacements
//!    start in batches of the spare IDs (at most a quarter of the fleet, as
//!    Kubernetes' default surge), then as many old nodes stop gracefully;
//!    any refused start is a failure;
//! 6. **oracle** (`--processes --oracle-key KEY`, after the steady state):
//!    the timestamp oracle's leader is SIGKILLed, and each follower's time
//!    from the kill to its next ID of the `monotonic` key ([`oracle`]). The
//!    config must define the key and give gRPC a port of its own per node
//!    (`server.grpc_addr = "127.0.0.1:0"`), as followers forward over it.
//!
//! Nodes are tasks in this process ([`inproc`]: thousands fit) or, with
//! `--processes`, real `idmint serve` processes ([`procs`]). `--delay D`
//! puts a proxy before the coordinator that holds every packet D in each
//! direction ([`proxy`]), to see nodes back off from a slow coordinator.
//!
//! After every phase the fleet is checked: no two serving nodes hold one
//! worker ID, and each issues with its own. A duplicate, or any refused
//! start, fails the run (exit 1). The figures go to stdout, and with
//! `--json FILE` to a file; a live line on stderr shows each phase when
//! stderr is a terminal.
//!
//! # Where
//! - `fleet/phases.rs`: the phases of one fleet size, in-process or with
//!   processes;
//! - `fleet/report.rs`: the figures of a fleet size, and their text;
//! - `fleet/starts.rs`: the starts of a phase and their percentiles;
//! - `fleet/setup.rs`: the cluster and the proxy's address in the config;
//! - `fleet/progress.rs`: the live line.

mod coordinator;
mod inproc;
mod oracle;
mod phases;
mod procs;
mod progress;
mod proxy;
mod registry;
mod report;
mod setup;
mod starts;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::Args;

use self::phases::{run_in_process, run_processes};
use self::setup::set_cluster;
use super::bad_input;

/// Flags of `idmint bench fleet`.
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// The config every node runs on, as `idmint serve --config` reads it;
    /// its `[snowflake]` registry is the coordinator measured.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,

    /// Fleet sizes, run one after the other.
    #[arg(
        long,
        value_name = "N,...",
        value_delimiter = ',',
        default_value = "10,100,1000"
    )]
    nodes: Vec<usize>,

    /// Run each node as a real `idmint serve` process (this binary) instead
    /// of a task in this process. The worker space is then the config's
    /// layout's, and there is no rolling restart.
    #[arg(long)]
    processes: bool,

    /// Registry clients the in-process nodes share (default: one per ten
    /// nodes, 1 to 64).
    #[arg(long, value_name = "N")]
    connections: Option<usize>,

    /// How long the steady state is measured.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    steady: Duration,

    /// How many nodes join the running fleet one at a time (in-process),
    /// each claim timed alone.
    #[arg(long, value_name = "N", default_value_t = 20)]
    joins: usize,

    /// The share of the fleet killed at once, in percent (0 skips it).
    #[arg(long, value_name = "PERCENT", default_value_t = 25,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    kill_percent: u32,

    /// The worker space of the rolling restart, as a multiple of N (rounded
    /// up); 0 skips it.
    #[arg(long, value_name = "FACTOR", default_value_t = 1.2, value_parser = parse_factor)]
    roll_space: f64,

    /// With --processes: after the steady state, SIGKILL the timestamp
    /// oracle's leader and time how long each follower takes to hand out
    /// an ID of this `monotonic` key again (the config must define it).
    #[arg(long, value_name = "KEY", requires = "processes")]
    oracle_key: Option<String>,

    /// Hold every packet to and from the coordinator this long in each
    /// direction (in-process nodes only): a slow coordinator.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    delay: Option<Duration>,

    /// In-process: halfway through the steady state, run this shell command
    /// (`scripts/etcd-cluster kill leader DIR`, say: a coordinator fault),
    /// then have every node issue an ID every 100 ms until the steady state
    /// ends: each node's longest time without one, how many nodes refused
    /// at least once, and how many hold another worker ID afterwards.
    #[arg(long, value_name = "COMMAND")]
    steady_fault: Option<String>,

    /// Also write the figures as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// The registry's cluster (namespace) the nodes claim in; `-N` is
    /// added for each fleet size, so no run waits on an earlier one's marks.
    /// Keep it apart from a production fleet's: the harness's nodes take
    /// worker IDs from the cluster they run in.
    #[arg(long, value_name = "NAME", default_value = "idmint-fleet-bench")]
    cluster: String,

    /// Where process nodes keep their data and logs (default: a new
    /// directory under the system's temporary directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

fn parse_factor(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f == 0.0 || (1.0..=100.0).contains(&f) => Ok(f),
        _ => Err(format!(
            "{text:?}: a factor of at least 1 (the fleet must fit), at most 100, or 0"
        )),
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    idmint_core::duration::parse_duration(text).map_err(|e| e.to_string())
}

/// Runs `idmint bench fleet`.
pub fn run(args: FleetArgs) -> Result<()> {
    // Logs only when asked (`IDMINT_LOG=idmint_registry=debug`): a thousand
    // nodes' start lines would bury the report.
    if std::env::var_os("IDMINT_LOG").is_some() {
        super::serve::init_logging(super::serve::LogFormat::Text);
    }
    let config = super::serve::checked_config(Some(&args.config), |_| {})?;
    let Some(ttl) = idmint_node::open::lease_ttl(&config) else {
        return Err(bad_input(format!(
            "{}: the {} registry holds worker IDs without a lease; a fleet needs a \
             shared registry (sql, redis, etcd or zookeeper)",
            args.config.display(),
            config.snowflake.registry.name()
        )));
    };
    if args.nodes.contains(&0) {
        return Err(bad_input("--nodes: a fleet of 0 nodes measures nothing"));
    }
    if args.processes && args.steady_fault.is_some() {
        return Err(bad_input(
            "--steady-fault works with in-process nodes only (it probes each node's generator)",
        ));
    }
    if args.processes && args.delay.is_some() {
        return Err(bad_input(
            "--delay works with in-process nodes only (the proxy runs in this process)",
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for &n in &args.nodes {
        let mut config = config.clone();
        let cluster = format!("{}-{n}", args.cluster);
        let cluster_env = set_cluster(&mut config, &cluster);
        let report = if args.processes {
            let env = cluster_env
                .into_iter()
                .map(|k| (k.to_owned(), cluster.clone()))
                .collect();
            runtime.block_on(run_processes(&args, &config, env, ttl, n))?
        } else {
            runtime.block_on(run_in_process(&args, &config, ttl, n))?
        };
        print!("{}", report.text());
        failures.extend(report.failures.iter().cloned());
        reports.push(report);
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&reports)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "the fleet broke a promise: {}",
            failures.join("; ")
        ))
    }
}
