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

mod coordinator;
mod inproc;
mod oracle;
mod procs;
mod proxy;
mod registry;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use clap::Args;
use idmint_node::Config;
use idmint_node::config::{RegistryKind, Secret};
use serde::Serialize;

use self::coordinator::{Coordinator, Usage, usage};
use self::inproc::{InProcess, default_connections};
use self::procs::Processes;
use self::proxy::DelayProxy;
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

async fn run_in_process(
    args: &FleetArgs,
    config: &Config,
    ttl: Duration,
    n: usize,
) -> Result<Report> {
    let coordinator = Coordinator::of(config);
    let mut config = config.clone();
    let proxy = match args.delay {
        Some(delay) => {
            let endpoint = coordinator
                .endpoint()
                .ok_or_else(|| bad_input("--delay: this registry has no network endpoint"))?;
            let proxy = DelayProxy::start(endpoint, delay)
                .await
                .context("starting the delay proxy")?;
            redirect(&mut config, proxy.addr());
            Some(proxy)
        }
        None => None,
    };
    let connections = args.connections.unwrap_or_else(|| default_connections(n));
    let endpoint = match &proxy {
        Some(proxy) => Some(("127.0.0.1".to_owned(), proxy.addr().port())),
        None => coordinator.endpoint(),
    };
    let mut fleet = InProcess::open(&config, connections, endpoint).await?;
    let space = fleet.layout_space();
    if n > space as usize {
        return Err(bad_input(format!(
            "--nodes {n}: the layout {:?} has {space} worker IDs",
            config.snowflake.layout
        )));
    }
    let mut report = Report::new(&config, "in-process", n, ttl, args.delay);
    report.connections = (!fleet.per_node_sessions()).then_some(connections);

    // 1. Start, in a space of exactly n.
    fleet.set_space(n as u32);
    let progress = Progress::new("start", n as u64);
    let starts = fleet.start(n, Instant::now(), &progress).await;
    drop(progress);
    report.start = Some(starts.figures(None));
    report.check("start", fleet.check());

    // 2. Steady state.
    let calls_before = fleet.calls().read();
    let before = coordinator.sample().await;
    match &args.steady_fault {
        None => steady_wait(args.steady, || fleet.calls().read().writes).await,
        Some(command) => {
            steady_wait(args.steady / 2, || fleet.calls().read().writes).await;
            report.fault = Some(steady_fault(&mut fleet, command, args.steady / 2).await);
        }
    }
    let after = coordinator.sample().await;
    let calls = fleet.calls().read() - calls_before;
    let per_node_second = |count: u64| count as f64 / args.steady.as_secs_f64() / n as f64;
    report.steady = Some(Steady {
        seconds: args.steady.as_secs_f64(),
        writes_per_node_s: Some(per_node_second(calls.writes)),
        reads_per_node_s: Some(per_node_second(calls.reads)),
        failed_calls: Some(calls.failed),
        coordinator: per_node(usage(&before, &after), n),
        nodes_memory_mib: None,
    });
    report.check("steady state", fleet.check());
    if let Some(e) = report.fault.as_ref().and_then(|f| f.error.clone()) {
        report.failures.push(format!("after the fault: {e}"));
    }

    // 3. Nodes join one at a time, in a space with room for them.
    if args.joins > 0 {
        fleet.set_space((n + 1) as u32);
        let progress = Progress::new("joins", args.joins as u64);
        let mut all = Starts::default();
        for _ in 0..args.joins {
            let starts = fleet.start(1, Instant::now(), &progress).await;
            all.took.extend(starts.took);
            all.refused.extend(starts.refused);
            all.claims
                .get_or_insert_with(Vec::new)
                .extend(starts.claims.unwrap_or_default());
            fleet.stop_newest(1).await;
        }
        drop(progress);
        fleet.set_space(n as u32);
        report.join = Some(all.figures(None));
    }

    // 4. Kill a share; replacements start at once.
    let to_kill = n * args.kill_percent as usize / 100;
    if to_kill > 0 {
        let killed_at = Instant::now();
        let killed = fleet.kill(to_kill);
        let progress = Progress::new("replacements", killed as u64);
        let starts = fleet.start(killed, killed_at, &progress).await;
        drop(progress);
        report.kill = Some(Kill {
            killed,
            bound_ms: ms(ttl + Duration::from_secs(2)),
            replacements: starts.figures(Some(ttl + Duration::from_secs(2))),
        });
        report.check("replacements", fleet.check());
    }

    // 5. A rolling restart in a space 1.2 times the fleet.
    let roll_space = ((n as f64 * args.roll_space).ceil() as u32).min(space);
    if roll_space > 0 {
        report.roll = Some(roll(&mut fleet, n, roll_space).await);
        report.check("rolling restart", fleet.check());
    }
    fleet.stop_all().await;
    report.failures.extend(report.refusals());
    Ok(report)
}

/// Replaces every node once, `batch` at a time: the replacements first,
/// then as many of the oldest nodes stop.
async fn roll(fleet: &mut InProcess, n: usize, workers: u32) -> Roll {
    fleet.set_space(workers);
    let spare = (workers as usize).saturating_sub(fleet.len());
    let batch = spare.min(n.div_ceil(4)).max(1);
    let began = Instant::now();
    let progress = Progress::new("rolling restart", n as u64);
    let mut all = Starts::default();
    let mut replaced = 0;
    while replaced < n {
        let count = batch.min(n - replaced);
        let starts = fleet.start(count, Instant::now(), &progress).await;
        all.took.extend(starts.took);
        all.refused.extend(starts.refused);
        all.claims
            .get_or_insert_with(Vec::new)
            .extend(starts.claims.unwrap_or_default());
        fleet.stop_oldest(count).await;
        replaced += count;
    }
    Roll {
        workers,
        batch,
        took_s: began.elapsed().as_secs_f64(),
        replacements: all.figures(None),
    }
}

async fn run_processes(
    args: &FleetArgs,
    config: &Config,
    env: Vec<(String, String)>,
    ttl: Duration,
    n: usize,
) -> Result<Report> {
    let coordinator = Coordinator::of(config);
    let dir = match &args.dir {
        Some(dir) => dir.join(format!("fleet-{n}")),
        None => std::env::temp_dir().join(format!("idmint-fleet-{}-{n}", std::process::id())),
    };
    let _ = std::fs::remove_dir_all(&dir);
    let mut fleet = Processes::new(&args.config, env, &dir)?;
    let mut report = Report::new(config, "processes", n, ttl, None);
    // A start may wait a full claim wait for a worker ID, then some.
    let within =
        idmint_node::open::keeper_config(config).max_claim_wait() + Duration::from_secs(30);

    let progress = Progress::new("start", n as u64);
    let started = Instant::now();
    let starts = tokio::task::block_in_place(|| fleet.start(n, started, within, &progress))?;
    drop(progress);
    report.start = Some(starts.figures(None));

    let before = coordinator.sample().await;
    steady_wait(args.steady, || 0).await;
    let after = coordinator.sample().await;
    report.steady = Some(Steady {
        seconds: args.steady.as_secs_f64(),
        writes_per_node_s: None,
        reads_per_node_s: None,
        failed_calls: None,
        coordinator: per_node(usage(&before, &after), fleet.len()),
        nodes_memory_mib: fleet.memory().map(|b| b as f64 / (1024.0 * 1024.0)),
    });

    if let Some(key) = &args.oracle_key {
        let lease = config.monotonic.lease_ttl;
        let failover = oracle::failover(&mut fleet, key, within).await?;
        report.oracle = Some(Oracle {
            key: key.clone(),
            followers: failover.followers,
            leader_lease_ttl_ms: ms(lease),
            first_ids: failover.recovered.figures(None),
        });
    }

    let to_kill = n * args.kill_percent as usize / 100;
    if to_kill > 0 {
        let killed_at = Instant::now();
        let killed = fleet.kill(to_kill);
        let progress = Progress::new("replacements", killed as u64);
        let starts =
            tokio::task::block_in_place(|| fleet.start(killed, killed_at, within, &progress))?;
        drop(progress);
        report.kill = Some(Kill {
            killed,
            bound_ms: ms(ttl + Duration::from_secs(5)),
            replacements: starts.figures(Some(ttl + Duration::from_secs(5))),
        });
    }
    tokio::task::block_in_place(|| fleet.stop_all());
    let _ = std::fs::remove_dir_all(&dir);
    report.failures.extend(report.refusals());
    Ok(report)
}

/// Runs `command` (a coordinator fault) under the steady fleet, then
/// probes every node for `rest`.
async fn steady_fault(fleet: &mut InProcess, command: &str, rest: Duration) -> Fault {
    let failed_before = fleet.calls().read().failed;
    let began = Instant::now();
    let owned = command.to_owned();
    // The command runs beside the probes, which start before it acts.
    let running = tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(owned)
            .stdin(std::process::Stdio::null())
            .output();
        (out, began.elapsed())
    });
    let watched = fleet.watch(rest).await;
    let (ran, took) = running
        .await
        .unwrap_or_else(|e| (Err(std::io::Error::other(e.to_string())), began.elapsed()));
    let command_ms = ms(took);
    let (status, output) = match ran {
        Ok(out) => (
            out.status.success(),
            [&out.stdout, &out.stderr]
                .iter()
                .map(|b| String::from_utf8_lossy(b).trim().to_owned())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Err(e) => (false, e.to_string()),
    };
    let failed_calls = fleet.calls().read().failed - failed_before;
    match watched {
        Ok(w) => Fault {
            command: command.to_owned(),
            command_ok: status,
            command_output: output,
            command_ms,
            watched_s: w.watched.as_secs_f64(),
            longest_gap_ms: ms(w.longest_gap),
            longest_gap_p99_ms: ms(w.gap_p99),
            nodes_refused: w.nodes_refused,
            workers_changed: w.workers_changed,
            failed_calls,
            error: None,
        },
        Err(e) => Fault {
            command: command.to_owned(),
            command_ok: status,
            command_output: output,
            command_ms,
            watched_s: 0.0,
            longest_gap_ms: 0.0,
            longest_gap_p99_ms: 0.0,
            nodes_refused: 0,
            workers_changed: 0,
            failed_calls,
            error: Some(format!("{e:#}")),
        },
    }
}

/// Waits out the steady state, with a live line of the write rate.
async fn steady_wait(steady: Duration, writes: impl Fn() -> u64) {
    let progress = Progress::new("steady state (s)", steady.as_secs());
    let began = Instant::now();
    let mut last = writes();
    while began.elapsed() < steady {
        let left = steady.saturating_sub(began.elapsed());
        tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        let now = writes();
        progress.set(
            began.elapsed().as_secs(),
            format!("{} registry writes/s", now - last),
        );
        last = now;
    }
}

/// Makes `config`'s registry claim in `cluster`; returns the variable that
/// does the same for an `idmint serve` process.
fn set_cluster(config: &mut Config, cluster: &str) -> Option<&'static str> {
    let sf = &mut config.snowflake;
    let (field, var) = match sf.registry {
        RegistryKind::Etcd => (&mut sf.etcd.cluster, "IDMINT_SNOWFLAKE__ETCD__CLUSTER"),
        RegistryKind::Redis => (&mut sf.redis.cluster, "IDMINT_SNOWFLAKE__REDIS__CLUSTER"),
        RegistryKind::Sql => (&mut sf.sql.cluster, "IDMINT_SNOWFLAKE__SQL__CLUSTER"),
        RegistryKind::Zookeeper => (
            &mut sf.zookeeper.cluster,
            "IDMINT_SNOWFLAKE__ZOOKEEPER__CLUSTER",
        ),
        _ => return None,
    };
    *field = cluster.to_owned();
    Some(var)
}

/// Points `config`'s registry at `to` instead (the delay proxy).
fn redirect(config: &mut Config, to: SocketAddr) {
    let sf = &mut config.snowflake;
    match sf.registry {
        RegistryKind::Etcd => sf.etcd.endpoints = vec![format!("http://{to}")],
        RegistryKind::Redis => {
            sf.redis.url = Secret::new(with_authority(sf.redis.url.expose(), to))
        }
        RegistryKind::Sql => {
            if let Some(url) = &sf.sql.url {
                sf.sql.url = Some(Secret::new(with_authority(url.expose(), to)));
            }
        }
        RegistryKind::Zookeeper => {
            let chroot = sf
                .zookeeper
                .connect
                .find('/')
                .map(|i| sf.zookeeper.connect[i..].to_owned());
            sf.zookeeper.connect = format!("{to}{}", chroot.unwrap_or_default());
        }
        _ => {}
    }
}

/// `url` with its host and port replaced by `to` (user and path kept).
fn with_authority(url: &str, to: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let user = authority
        .rsplit_once('@')
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    format!("{scheme}://{user}{to}{tail}")
}

/// Starts measured in one phase.
#[derive(Debug, Default)]
pub struct Starts {
    /// Each successful start's time.
    pub took: Vec<Duration>,
    /// Why each refused start was refused.
    pub refused: Vec<String>,
    /// How long each granted registry claim call took, where this process
    /// saw them (in-process nodes).
    pub claims: Option<Vec<Duration>>,
}

impl Starts {
    fn figures(mut self, bound: Option<Duration>) -> StartFigures {
        self.took.sort();
        let claims = self.claims.map(|mut c| {
            c.sort();
            Percentiles::of(&c)
        });
        let took = Percentiles::of(&self.took);
        StartFigures {
            served: self.took.len(),
            p50_ms: took.p50_ms,
            p99_ms: took.p99_ms,
            max_ms: took.max_ms,
            claim_call: claims,
            within_bound: bound.map(|b| self.took.last().is_none_or(|&t| t <= b)),
            refused: self.refused.len(),
            refusals: self.refused.into_iter().take(3).collect(),
        }
    }
}

/// p50, p99 and the largest of sorted times, in milliseconds.
#[derive(Debug, Serialize)]
struct Percentiles {
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
}

impl Percentiles {
    fn of(sorted: &[Duration]) -> Percentiles {
        let pct = |p: f64| -> Option<f64> {
            let last = sorted.len().checked_sub(1)?;
            let i = ((last as f64) * p).round() as usize;
            Some(ms(sorted[i]))
        };
        Percentiles {
            p50_ms: pct(0.50),
            p99_ms: pct(0.99),
            max_ms: pct(1.0),
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// What a start phase measured.
#[derive(Debug, Serialize)]
struct StartFigures {
    served: usize,
    /// From the start (or the kill) to serving.
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
    /// The registry's claim calls alone (in-process nodes).
    claim_call: Option<Percentiles>,
    within_bound: Option<bool>,
    refused: usize,
    /// The first few refusals' reasons.
    refusals: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Steady {
    seconds: f64,
    writes_per_node_s: Option<f64>,
    reads_per_node_s: Option<f64>,
    failed_calls: Option<u64>,
    /// The coordinator's own counters, per node and second.
    coordinator: Usage,
    nodes_memory_mib: Option<f64>,
}

/// What a fault in the steady state cost (`--steady-fault`).
#[derive(Debug, Serialize)]
struct Fault {
    command: String,
    command_ok: bool,
    command_output: String,
    /// How long the command ran.
    command_ms: f64,
    /// How long the nodes were probed after it began.
    watched_s: f64,
    /// The longest time a node went without issuing (probed every 100 ms),
    /// the longest over nodes and its 99th percentile.
    longest_gap_ms: f64,
    longest_gap_p99_ms: f64,
    /// Nodes that refused at least one probe.
    nodes_refused: usize,
    /// Nodes holding another worker ID than before the fault.
    workers_changed: usize,
    /// Registry calls that failed or timed out from the fault to the end.
    failed_calls: u64,
    /// What broke a promise (a repeated ID).
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct Kill {
    killed: usize,
    bound_ms: f64,
    replacements: StartFigures,
}

#[derive(Debug, Serialize)]
struct Oracle {
    key: String,
    followers: usize,
    leader_lease_ttl_ms: f64,
    /// From the leader's kill to each follower's first ID.
    first_ids: StartFigures,
}

#[derive(Debug, Serialize)]
struct Roll {
    workers: u32,
    batch: usize,
    took_s: f64,
    replacements: StartFigures,
}

/// One fleet size's figures.
#[derive(Debug, Serialize)]
struct Report {
    registry: String,
    mode: &'static str,
    nodes: usize,
    lease_ttl_ms: f64,
    delay_ms: Option<f64>,
    connections: Option<usize>,
    start: Option<StartFigures>,
    steady: Option<Steady>,
    fault: Option<Fault>,
    /// Nodes joining the running fleet one at a time.
    join: Option<StartFigures>,
    kill: Option<Kill>,
    roll: Option<Roll>,
    oracle: Option<Oracle>,
    /// Nodes that refused to issue when checked (their keeper waiting on
    /// the coordinator), by phase.
    paused: Vec<String>,
    /// Nodes that issued with a worker ID another node was still issuing
    /// with (a takeover; the IDs differ, by the marks), by phase.
    takeovers: Vec<String>,
    failures: Vec<String>,
}

/// A coordinator's rates divided among `nodes`.
fn per_node(mut usage: Usage, nodes: usize) -> Usage {
    for rate in usage.rates.values_mut() {
        *rate /= nodes.max(1) as f64;
    }
    usage
}

impl Report {
    fn new(
        config: &Config,
        mode: &'static str,
        nodes: usize,
        ttl: Duration,
        delay: Option<Duration>,
    ) -> Report {
        let sf = &config.snowflake;
        let registry = match sf.registry {
            RegistryKind::Sql => {
                let url = sf
                    .sql
                    .url
                    .as_ref()
                    .map(|u| u.expose().to_owned())
                    .unwrap_or_default();
                let db = url.split(':').next().unwrap_or("sql");
                format!("sql ({db})")
            }
            kind => kind.name().to_owned(),
        };
        Report {
            registry,
            mode,
            nodes,
            lease_ttl_ms: ms(ttl),
            delay_ms: delay.map(ms),
            connections: None,
            start: None,
            steady: None,
            fault: None,
            join: None,
            kill: None,
            roll: None,
            oracle: None,
            paused: Vec::new(),
            takeovers: Vec::new(),
            failures: Vec::new(),
        }
    }

    fn check(&mut self, phase: &str, result: Result<inproc::Check>) {
        match result {
            Ok(check) => {
                if check.paused > 0 {
                    self.paused
                        .push(format!("{} after the {phase}", check.paused));
                }
                if check.shared_workers > 0 {
                    self.takeovers
                        .push(format!("{} after the {phase}", check.shared_workers));
                }
            }
            Err(e) => self.failures.push(format!("after the {phase}: {e:#}")),
        }
    }

    fn refusals(&self) -> Vec<String> {
        let phases = [
            ("start", self.start.as_ref()),
            ("join", self.join.as_ref()),
            ("replacement", self.kill.as_ref().map(|k| &k.replacements)),
            (
                "rolling restart",
                self.roll.as_ref().map(|r| &r.replacements),
            ),
            (
                "oracle follower",
                self.oracle.as_ref().map(|o| &o.first_ids),
            ),
        ];
        phases
            .into_iter()
            .filter_map(|(phase, f)| {
                let f = f?;
                (f.refused > 0).then(|| {
                    format!(
                        "{} {phase} start(s) refused, e.g. {}",
                        f.refused,
                        f.refusals.first().map(String::as_str).unwrap_or("?")
                    )
                })
            })
            .collect()
    }

    /// The report for people.
    fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = write!(
            out,
            "fleet of {} {} nodes on {} (lease TTL {:.0?}",
            self.nodes,
            if self.mode == "processes" {
                "process"
            } else {
                self.mode
            },
            self.registry,
            Duration::from_secs_f64(self.lease_ttl_ms / 1000.0)
        );
        match self.connections {
            Some(c) => {
                let _ = write!(out, ", {c} registry clients");
            }
            None if self.mode == "in-process" => out.push_str(", a session per node"),
            None => {}
        }
        if let Some(d) = self.delay_ms {
            let _ = write!(out, ", coordinator delayed {d:.0} ms each way");
        }
        out.push_str(")\n");
        if let Some(s) = &self.start {
            let _ = writeln!(out, "  start         {}", s.text());
        }
        if let Some(s) = &self.steady {
            let _ = write!(out, "  steady {:>4.0} s", s.seconds);
            if let (Some(w), Some(r)) = (s.writes_per_node_s, s.reads_per_node_s) {
                let _ = write!(
                    out,
                    " registry calls per node: {w:.3} writes/s, {r:.3} reads/s, {} failed;",
                    s.failed_calls.unwrap_or(0)
                );
            }
            let _ = writeln!(out);
            let c = &s.coordinator;
            let _ = write!(out, "                coordinator:");
            match c.cpu_percent {
                Some(cpu) => {
                    let _ = write!(out, " CPU {cpu:.1} % of a core,");
                }
                None => out.push_str(" CPU unknown,"),
            }
            match c.memory_mib {
                Some(m) => {
                    let _ = write!(out, " {m:.1} MiB;");
                }
                None => out.push_str(" memory unknown;"),
            }
            for (name, rate) in &c.rates {
                let _ = write!(out, " {name} {rate:.3}/s,");
            }
            if c.rates.is_empty() {
                out.push_str(" no counters of its own");
            } else {
                out.pop();
                out.push_str(" per node");
            }
            out.push('\n');
            if let Some(m) = s.nodes_memory_mib {
                let _ = writeln!(
                    out,
                    "                nodes: {m:.0} MiB in all, {:.1} MiB each",
                    m / self.nodes as f64
                );
            }
        }
        if let Some(f) = &self.fault {
            let _ = writeln!(
                out,
                "  fault         `{}` ({}, {:.0} ms{}); over {:.1} s after it: longest gap {:.0} ms \
                 (p99 over nodes {:.0} ms), {} nodes refused once or more, {} hold another \
                 worker, {} failed registry calls",
                f.command,
                if f.command_ok { "ok" } else { "FAILED" },
                f.command_ms,
                if f.command_output.is_empty() {
                    String::new()
                } else {
                    format!(": {}", f.command_output)
                },
                f.watched_s,
                f.longest_gap_ms,
                f.longest_gap_p99_ms,
                f.nodes_refused,
                f.workers_changed,
                f.failed_calls
            );
        }
        if let Some(j) = &self.join {
            let _ = writeln!(out, "  join          one at a time: {}", j.text());
        }
        if let Some(o) = &self.oracle {
            let _ = writeln!(
                out,
                "  oracle        leader of {:?} killed (lease TTL {:.0} ms); {} followers' first IDs: {}",
                o.key,
                o.leader_lease_ttl_ms,
                o.followers,
                o.first_ids.text()
            );
        }
        if let Some(k) = &self.kill {
            let _ = writeln!(
                out,
                "  kill          {} killed at once; replacements {} (bound {:.0} ms: {})",
                k.killed,
                k.replacements.text(),
                k.bound_ms,
                match k.replacements.within_bound {
                    Some(true) => "met",
                    _ => "MISSED",
                }
            );
        }
        if let Some(r) = &self.roll {
            let _ = writeln!(
                out,
                "  roll          {} workers, batches of {}: {} in {:.1} s",
                r.workers,
                r.batch,
                r.replacements.text(),
                r.took_s
            );
        }
        if !self.paused.is_empty() {
            let _ = writeln!(
                out,
                "  paused        nodes refusing to issue when checked: {}",
                self.paused.join(", ")
            );
        }
        if !self.takeovers.is_empty() {
            let _ = writeln!(
                out,
                "  takeovers     nodes issuing on a worker ID another node still issued on: {}",
                self.takeovers.join(", ")
            );
        }
        for f in &self.failures {
            let _ = writeln!(out, "  FAILED        {f}");
        }
        out
    }
}

impl StartFigures {
    fn text(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} ms"));
        let claims = match &self.claim_call {
            Some(c) => format!(
                " (claim calls p50 {}, p99 {}, max {})",
                f(c.p50_ms),
                f(c.p99_ms),
                f(c.max_ms)
            ),
            None => String::new(),
        };
        format!(
            "{} serving: p50 {}, p99 {}, max {}{claims}; {} refused",
            self.served,
            f(self.p50_ms),
            f(self.p99_ms),
            f(self.max_ms),
            self.refused
        )
    }
}

/// The live line of a phase on stderr, when stderr is a terminal.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(phase: &str, total: u64) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let style = indicatif::ProgressStyle::with_template(
            "{prefix:>16} {bar:30} {pos}/{len} {elapsed_precise} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        let bar = indicatif::ProgressBar::new(total)
            .with_style(style)
            .with_prefix(phase.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar: Some(bar) }
    }

    /// One more done.
    pub fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    fn set(&self, position: u64, message: String) {
        if let Some(bar) = &self.bar {
            bar.set_position(position);
            bar.set_message(message);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_keeps_the_user_and_the_path() {
        let to: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(
            with_authority("postgres://postgres@127.0.0.1:5432/test", to),
            "postgres://postgres@127.0.0.1:4000/test"
        );
        assert_eq!(
            with_authority("redis://127.0.0.1/", to),
            "redis://127.0.0.1:4000/"
        );
        assert_eq!(
            with_authority("mysql://root:pw@db/test?x=1", to),
            "mysql://root:pw@127.0.0.1:4000/test?x=1"
        );
    }

    #[test]
    fn percentiles_are_read_off_the_sorted_times() {
        let starts = Starts {
            took: (1..=100).rev().map(Duration::from_millis).collect(),
            refused: vec!["no".to_owned()],
            claims: None,
        };
        let f = starts.figures(Some(Duration::from_millis(99)));
        assert_eq!(
            (f.p50_ms, f.p99_ms, f.max_ms),
            (Some(51.0), Some(99.0), Some(100.0))
        );
        assert_eq!(f.within_bound, Some(false));
        assert_eq!(f.refused, 1);
    }
}
