//! The phases of one fleet size, in order: start, steady state (with
//! `--steady-fault`), joins, kill, rolling restart, and with processes the
//! oracle's failover; each fills its part of the [`Report`].

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use idmint_node::Config;

use super::FleetArgs;
use super::coordinator::{Coordinator, usage};
use super::inproc::{InProcess, default_connections};
use super::oracle;
use super::procs::Processes;
use super::progress::Progress;
use super::proxy::DelayProxy;
use super::report::{Fault, Kill, Oracle, Report, Roll, Steady, per_node};
use super::setup::redirect;
use super::starts::{Starts, ms};
use crate::cli::bad_input;

pub(super) async fn run_in_process(
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

pub(super) async fn run_processes(
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
