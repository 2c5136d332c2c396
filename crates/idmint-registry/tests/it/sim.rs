//! Deterministic simulation of a fleet: the real keeper, generators and
//! oracle campaign on simulated time, over an in-memory registry that keeps
//! the `WorkerRegistry` contract and injects faults (docs/design.md,
//! "Deterministic simulation").
//!
//! Each seed runs `IDMINT_SIM_NODES` nodes for `IDMINT_SIM_HOURS` of
//! simulated time: crashes (SIGKILL) and restarts with the clock maybe
//! behind, graceful restarts (a clean stop: the generator sealed and what it
//! really issued recorded in place of the window-ahead mark, so the next
//! holder of the worker, this node or another, starts above that), pauses
//! (SIGSTOP) often past the lease, wall
//! clocks that step back (up to 5 h) and forward and drift, links that refuse
//! or hang, and registry calls that fail, stall, answer late or lose their
//! answer. Every issued ID is checked at once: no ID twice across the fleet,
//! no process's IDs going back, and no oracle ID below one reserved before.
//!
//! - `sim/fleet.rs`: the driver (one paused runtime per node process, why
//!   that models SIGSTOP, the step loop);
//! - `sim/registry.rs`: the simulated registry, its faults, and the
//!   [`Flaw`]s that break it on purpose;
//! - `sim/checker.rs`: the checks; `sim/time.rs`: true time, node clocks;
//!   `sim/trace.rs`: the event ring a failing seed prints; `sim/rng.rs`.
//!
//! By default `cargo test` runs a few seeds at reduced scale (debug build,
//! well under a minute each). More on demand, e.g. a full day of 1,000
//! nodes for 100 seeds:
//!
//! ```text
//! IDMINT_SIM_SEEDS=1..100 IDMINT_SIM_NODES=1000 IDMINT_SIM_HOURS=24 \
//!     cargo test -p idmint-registry --release --test it -- --exact sim::fleet --nocapture
//! ```
//!
//! Also `IDMINT_SIM_STEP_MS` (100), `IDMINT_SIM_RATE` (IDs per node per
//! second, 2), `IDMINT_SIM_FAULT_MINUTES` (mean minutes between two faults
//! of one node, 5), `IDMINT_SIM_FLAW` (a broken registry, `NAME` or
//! `NAME:workers` or `NAME:oracle`: the run should then fail) and
//! `IDMINT_SIM_TRACE` (a file to write the last 200,000 events to; `{seed}`
//! in it becomes the seed). A failing seed prints the command that replays
//! it.
//!
//! Cost, in release, on one core of a 2-core machine shared with other
//! builds: 1,000 nodes take about 1.8 s per simulated minute in 100 ms steps
//! (107 s for an hour, so about 45 minutes for a day, per seed), up to twice
//! that when the machine is busy, and about 40% less in 250 ms steps.
//! Seeds are independent: run several sets at once.

mod checker;
mod fleet;
mod registry;
mod rng;
mod time;
mod trace;

use std::fmt::Write as _;
use std::time::Duration;

use fleet::{Outcome, SimConfig, Stats};
use registry::{Flaw, ReportClocks, Target};

/// The seeds `cargo test` runs, and their scale.
const CI_SEEDS: [u64; 3] = [1, 2, 3];
const CI_NODES: usize = 40;
const CI_HOURS: f64 = 0.5;

#[derive(Debug, Clone)]
struct Plan {
    seeds: Vec<u64>,
    nodes: usize,
    hours: f64,
    step_ms: u64,
    rate: f64,
    fault_minutes: f64,
    flaw: Option<(Flaw, Target)>,
}

impl Plan {
    fn from_env() -> Plan {
        fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
            match std::env::var(name) {
                Ok(v) => v
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
                Err(_) => default,
            }
        }
        let seeds = std::env::var("IDMINT_SIM_SEEDS")
            .map(|s| parse_seeds(&s).unwrap_or_else(|e| panic!("IDMINT_SIM_SEEDS={s:?}: {e}")))
            .unwrap_or_else(|_| CI_SEEDS.to_vec());
        let flaw = std::env::var("IDMINT_SIM_FLAW").ok().map(|f| {
            Flaw::parse_with_target(&f).unwrap_or_else(|| {
                let names: Vec<&str> = Flaw::ALL.iter().map(|f| f.name()).collect();
                panic!(
                    "IDMINT_SIM_FLAW={f:?} is none of {names:?}, optionally followed by \
                     :workers or :oracle"
                )
            })
        });
        let plan = Plan {
            seeds,
            nodes: var("IDMINT_SIM_NODES", CI_NODES),
            hours: var("IDMINT_SIM_HOURS", CI_HOURS),
            step_ms: var("IDMINT_SIM_STEP_MS", 100),
            rate: var("IDMINT_SIM_RATE", 2.0),
            fault_minutes: var("IDMINT_SIM_FAULT_MINUTES", 5.0),
            flaw,
        };
        assert!(plan.nodes >= 1, "IDMINT_SIM_NODES must be at least 1");
        assert!(plan.hours > 0.0, "IDMINT_SIM_HOURS must be above 0");
        assert!(
            (1..=500).contains(&plan.step_ms),
            "IDMINT_SIM_STEP_MS must be 1 to 500: steps must stay well below the keeper's \
             1 s lease margin"
        );
        assert!(plan.rate > 0.0, "IDMINT_SIM_RATE must be above 0");
        assert!(
            plan.fault_minutes > 0.0,
            "IDMINT_SIM_FAULT_MINUTES must be above 0"
        );
        plan
    }

    fn config(&self, seed: u64) -> SimConfig {
        SimConfig {
            seed,
            nodes: self.nodes,
            duration: Duration::from_secs_f64(self.hours * 3600.0),
            step: Duration::from_millis(self.step_ms),
            rate: self.rate,
            fault_every: Duration::from_secs_f64(self.fault_minutes * 60.0),
            oracle_nodes: self.nodes.min(3),
            flaw: self.flaw,
            reports: reports_of(seed),
            peer_sample: None,
            overload: None,
            clock_faults: true,
            fast_node: None,
        }
    }

    /// The command that runs `seed` again, exactly.
    fn replay(&self, seed: u64) -> String {
        let mut cmd = format!(
            "IDMINT_SIM_SEEDS={seed} IDMINT_SIM_NODES={} IDMINT_SIM_HOURS={} \
             IDMINT_SIM_STEP_MS={} IDMINT_SIM_RATE={} IDMINT_SIM_FAULT_MINUTES={}",
            self.nodes, self.hours, self.step_ms, self.rate, self.fault_minutes
        );
        if let Some((f, target)) = self.flaw {
            write!(cmd, " IDMINT_SIM_FLAW={}:{}", f.name(), target.name()).unwrap();
        }
        let release = if cfg!(debug_assertions) {
            ""
        } else {
            " --release"
        };
        write!(
            cmd,
            " cargo test -p idmint-registry{release} --test it -- --exact sim::fleet --nocapture"
        )
        .unwrap();
        cmd
    }
}

/// What a seed's worker registry tells of each report: its age (SQL, Redis,
/// ZooKeeper), its revisions (etcd) or nothing (an idmint before ages), in
/// turn, so the CI seeds run each.
fn reports_of(seed: u64) -> ReportClocks {
    [
        ReportClocks::Ages,
        ReportClocks::Revisions,
        ReportClocks::Unknown,
    ][(seed % 3) as usize]
}

/// `7`, `1,5,9`, `1..100` (1 to 100, both included) or `1..=100`.
fn parse_seeds(text: &str) -> Result<Vec<u64>, String> {
    let mut seeds = Vec::new();
    for part in text.split(',').map(str::trim) {
        let num = |s: &str| {
            s.trim()
                .parse::<u64>()
                .map_err(|_| format!("{s:?} is not a seed (a whole number)"))
        };
        match part.split_once("..") {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b.trim_start_matches('='))?);
                if a > b {
                    return Err(format!("range {part} is empty"));
                }
                seeds.extend(a..=b);
            }
            None => seeds.push(num(part)?),
        }
    }
    Ok(seeds)
}

fn summary(seed: u64, plan: &Plan, s: &Stats, digest: (u64, u64), took: Duration) -> String {
    format!(
        "sim seed {seed}: {} nodes, {} h in {} ms steps: {} IDs in {} holdings ({} takeovers of \
         a dead node's worker), {} oracle IDs; issue refused {:?}; reserve refused {:?}; \
         faults {:?}; keeper starts {} (failed {:?}); pauses past the lease: {} refused and {} \
         issued (below the mark) before the keeper ran; worker registry {:?}; oracle registry \
         {:?}; {} events, digest {:016x}; {:.1} s",
        plan.nodes,
        plan.hours,
        plan.step_ms,
        s.ids,
        s.holdings,
        s.takeovers,
        s.reserved,
        s.refused,
        s.reserve_refused,
        s.faults,
        s.starts,
        s.start_failed,
        s.resumed_past_lease_refused,
        s.resumed_past_lease_issued,
        s.workers,
        s.oracle,
        digest.1,
        digest.0,
        took.as_secs_f64()
    )
}

/// What a failing seed prints: the broken promise, the replay command, and
/// the last events of the nodes and worker involved.
fn failure(seed: u64, plan: &Plan, out: &Outcome) -> Option<String> {
    let (at, v) = out.violation.as_ref()?;
    let mut text = format!(
        "sim seed {seed} broke a promise at {}: {v}\n  replay: {}\n  the last events of nodes \
         {:?}{}:\n",
        trace::clock_text(*at),
        plan.replay(seed),
        v.nodes,
        v.worker
            .map(|w| format!(" and worker {w}"))
            .unwrap_or_default()
    );
    for e in out.trace.about(&v.nodes, v.worker, 80) {
        writeln!(text, "    {e}").unwrap();
    }
    Some(text)
}

/// Runs the seeds of `IDMINT_SIM_SEEDS` (by default `CI_SEEDS` at reduced
/// scale) and fails with every failing seed's replay command.
#[test]
fn fleet() {
    let plan = Plan::from_env();
    let mut failures = Vec::new();
    let mut total = Stats::default();
    for &seed in &plan.seeds {
        let started = std::time::Instant::now();
        let out = fleet::run(plan.config(seed));
        eprintln!(
            "{}",
            summary(seed, &plan, &out.stats, out.digest, started.elapsed())
        );
        if let Ok(path) = std::env::var("IDMINT_SIM_TRACE") {
            let path = path.replace("{seed}", &seed.to_string());
            out.trace
                .write_to(&path)
                .unwrap_or_else(|e| panic!("writing the trace to {path}: {e}"));
        }
        if let Some(f) = failure(seed, &plan, &out) {
            eprintln!("{f}");
            let (_, v) = out.violation.as_ref().expect("failed");
            failures.push(format!(
                "  seed {seed}: {v}\n    replay: {}",
                plan.replay(seed)
            ));
        }
        add(&mut total, &out.stats);
    }
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed (their traces are above):\n{}",
        failures.len(),
        plan.seeds.len(),
        failures.join("\n")
    );
    if plan.flaw.is_none() {
        exercised(&total);
    }
}

fn add(total: &mut Stats, s: &Stats) {
    total.ids += s.ids;
    total.reserved += s.reserved;
    total.takeovers += s.takeovers;
    total.resumed_past_lease_refused += s.resumed_past_lease_refused;
    for (k, v) in &s.faults {
        *total.faults.entry(k).or_default() += v;
    }
    let sum = |a: &mut registry::Injected, b: &registry::Injected| {
        a.failed += b.failed;
        a.stalled += b.stalled;
        a.slow += b.slow;
        a.lost += b.lost;
        a.refused += b.refused;
        a.blackholed += b.blackholed;
        a.lease_lost += b.lease_lost;
        a.clean_stops += b.clean_stops;
        a.claims_after_clean_stop += b.claims_after_clean_stop;
        a.failovers += b.failovers;
        a.held += b.held;
        a.registered_again += b.registered_again;
        a.register_refused += b.register_refused;
        a.overloaded += b.overloaded;
        a.stalest_report = a.stalest_report.max(b.stalest_report);
    };
    sum(&mut total.workers, &s.workers);
    sum(&mut total.oracle, &s.oracle);
}

/// A run that checked nothing would pass too: the run must have issued,
/// taken workers over, failed over the oracle and hit every fault.
fn exercised(t: &Stats) {
    let mut missing = Vec::new();
    for (what, n) in [
        ("snowflake IDs", t.ids),
        ("oracle IDs", t.reserved),
        ("takeovers of a dead node's worker", t.takeovers),
        (
            "pauses past the lease refused before the keeper ran",
            t.resumed_past_lease_refused,
        ),
        ("failed calls", t.workers.failed),
        ("stalled calls", t.workers.stalled),
        ("slow calls", t.workers.slow),
        ("lost answers", t.workers.lost),
        ("refused calls", t.workers.refused),
        ("blackholed calls", t.workers.blackholed),
        ("lost leases", t.workers.lease_lost),
        ("clean stops recorded", t.workers.clean_stops),
        (
            "claims above a clean stop's record",
            t.workers.claims_after_clean_stop,
        ),
        ("lost oracle leases", t.oracle.lease_lost),
        ("failovers to a stale replica", t.workers.failovers),
        ("claims held by a new epoch", t.workers.held),
        ("holders registered again", t.workers.registered_again),
    ] {
        if n == 0 {
            missing.push(what);
        }
    }
    for kind in [
        "crash",
        "graceful restart",
        "pause",
        "clock back",
        "clock forward",
        "link down",
        "blackhole",
        "restart behind",
        "failover to a stale replica",
    ] {
        if !t.faults.contains_key(kind) {
            missing.push(kind);
        }
    }
    assert!(
        missing.is_empty(),
        "the run was too small to exercise: {missing:?}"
    );
}

#[test]
fn seeds_parse_as_lists_and_inclusive_ranges() {
    assert_eq!(parse_seeds("7").unwrap(), [7]);
    assert_eq!(parse_seeds("1..3").unwrap(), [1, 2, 3]);
    assert_eq!(parse_seeds("1..=3, 9").unwrap(), [1, 2, 3, 9]);
    assert!(parse_seeds("3..1").unwrap_err().contains("empty"));
    assert!(parse_seeds("x").unwrap_err().contains("\"x\""));
}

/// A small run for the tests below: 12 nodes for 15 simulated minutes.
fn small(seed: u64, flaw: Option<(Flaw, Target)>) -> SimConfig {
    SimConfig {
        seed,
        nodes: 12,
        duration: Duration::from_secs(15 * 60),
        step: Duration::from_millis(100),
        rate: 2.0,
        fault_every: Duration::from_secs(5 * 60),
        oracle_nodes: 3,
        flaw,
        reports: reports_of(seed),
        peer_sample: None,
        overload: None,
        clock_faults: true,
        fast_node: None,
    }
}

#[test]
fn a_seed_replays_exactly() {
    let a = fleet::run(small(7, None));
    let b = fleet::run(small(7, None));
    assert!(a.violation.is_none() && b.violation.is_none());
    assert!(a.digest.1 > 10_000, "a run of {} events", a.digest.1);
    assert_eq!(a.digest, b.digest, "two runs of seed 7 differ");
    assert_eq!(
        (a.stats.ids, a.stats.reserved),
        (b.stats.ids, b.stats.reserved)
    );
    let c = fleet::run(small(8, None));
    assert_ne!(a.digest, c.digest, "seeds 7 and 8 ran alike");
}

/// The first of seeds 1 to 48 whose run `flaw` breaks, with its violation.
///
/// [`Flaw::NoHold`] runs with faults every minute instead of every five: it
/// breaks a promise only when a node claims during a new epoch's hold (a
/// restart, or a holding lost), and once a registration tried again found
/// its own first try's holding (an answer lost no longer cost the holder
/// its worker), the fewer claims of five-minute faults left it uncaught in
/// 48 seeds.
fn caught(flaw: Flaw, target: Target) -> Option<(u64, checker::Violation)> {
    (1..=48).find_map(|seed| {
        let mut cfg = small(seed, Some((flaw, target)));
        if flaw == Flaw::NoHold {
            cfg.fault_every = Duration::from_secs(60);
        }
        fleet::run(cfg).violation.map(|(_, v)| (seed, v))
    })
}

/// Each rule of the registry contract, broken in both registries, lets a
/// promise break, and the checker sees it (most often the oracle's order,
/// which needs lease exclusivity itself; snowflake uniqueness needs only
/// the marks, see the next test).
#[test]
fn the_checker_catches_every_broken_registry() {
    for flaw in Flaw::ALL {
        let (seed, v) = caught(flaw, Target::Both)
            .unwrap_or_else(|| panic!("no seed of 1..=48 caught the flaw {}", flaw.name()));
        eprintln!("{}: seed {seed}: {v}", flaw.name());
    }
}

/// A worker registry that renews and persists without checking the token
/// lets a node that was stopped past its lease renew over the worker's new
/// holder and issue IDs among the new holder's: the snowflake check sees
/// two holdings of one worker interleave. (Claims that ignore live leases,
/// forgotten marks or leases shorter than told are caught above through the
/// oracle; for snowflake IDs the keeper's marks, peer clock check and lease
/// fence absorb them in these runs, which is the keeper's design: a holder
/// never issues past a mark it persisted while it held the worker.)
#[test]
fn the_checker_catches_a_worker_registry_that_does_not_fence() {
    let (seed, v) = caught(Flaw::Unfenced, Target::Workers)
        .expect("a seed of 1..=48 caught an unfenced worker registry");
    eprintln!("unfenced workers: seed {seed}: {v}");
    assert!(v.worker.is_some(), "seed {seed}: {v}");
    assert!(
        v.message.contains("interleave") || v.message.contains("twice"),
        "{v}"
    );
}

/// Issue 32: after a failover to a stale replica, live holders register
/// their workers again and issue on; only the hold keeps every other node
/// off the workers not registered again yet. A registry that lets claims
/// through during the hold hands such a worker out from the rolled-back
/// marks while its holder still issues: the checker sees two holdings of
/// one worker interleave.
#[test]
fn the_checker_catches_claims_that_do_not_wait_for_registration_again() {
    let (seed, v) = caught(Flaw::NoHold, Target::Workers)
        .expect("a seed of 1..=48 caught claims that ignore a new epoch's hold");
    eprintln!("no hold: seed {seed}: {v}");
    assert!(v.worker.is_some(), "seed {seed}: {v}");
    assert!(
        v.message.contains("interleave") || v.message.contains("twice"),
        "{v}"
    );
}

/// The pause model itself: a node stopped (not driven) past its lease, whose
/// worker another node then claims, is continued; before its keeper's task
/// runs (its status still says the lease is held), the generator refuses on
/// its own, and the new holder's IDs are above every one it issued.
#[test]
fn a_node_stopped_past_its_lease_refuses_before_its_keeper_runs() {
    use idmint_registry::{GeneratorSettings, KeeperConfig, LeaseState, WorkerKeeper};
    use std::sync::Arc;

    let trace = Arc::new(trace::Trace::default());
    let ttl = Duration::from_secs(10);
    let reg = Arc::new(registry::SimRegistry::new(
        "workers",
        ttl,
        1,
        registry::CallFaults::NONE,
        None,
        trace,
    ));
    // No worker bits: the second node can only take the first one's worker.
    let layout = idmint_core::LayoutSpec::new(41, idmint_core::Layout::LEAF.epoch(), 12)
        .build()
        .unwrap();
    let start = |i: usize, g0: u64| {
        let (rt, base) = fleet::node_runtime();
        let t = time::NodeTime { base, g0, ppm: 0 };
        let wall = Arc::new(time::Wall::new(0));
        let clock = Arc::new(time::SimClock::new(t, wall, time::Source::Monotonic));
        let link = Arc::new(registry::SimLink::new(
            reg.clone(),
            i,
            1,
            crate::support::identity(i),
            t,
            Arc::new(registry::Net::default()),
        ));
        let settings = GeneratorSettings::new(layout).with_clock(clock);
        let keeper = rt.spawn(WorkerKeeper::start(
            link,
            crate::support::identity(i),
            settings,
            KeeperConfig::new(),
        ));
        fleet::drive(&rt, t.local_at(g0 + 1_000_000_000));
        let guard = rt.block_on(keeper).unwrap().unwrap();
        (rt, t, guard)
    };
    let s = 1_000_000_000u64;
    let (rt_a, t_a, a) = start(0, 0);
    let first = {
        let _in = rt_a.enter();
        a.handle().next_id().unwrap()
    };
    // A is stopped at 1 s. B comes up at 20 s, after A's lease ran out.
    let (rt_b, t_b, b) = start(1, 20 * s);
    fleet::drive(&rt_b, t_b.local_at(30 * s));
    let taken = {
        let _in = rt_b.enter();
        b.handle().next_id().unwrap()
    };
    assert!(taken > first);
    // A continues at 30 s: its clock jumps, its task has not run yet.
    fleet::jump(&rt_a, t_a.local_at(30 * s));
    {
        let _in = rt_a.enter();
        let status = a.handle().status();
        assert_eq!(status.lease, LeaseState::Held, "the keeper's task ran");
        assert_eq!(status.lease_left, Some(Duration::ZERO));
        let err = a.handle().next_id().unwrap_err();
        assert_eq!(err.code(), "mark_reached", "{err}");
    }
    // Once its task runs, it finds the lease gone.
    fleet::drive(&rt_a, t_a.local_at(31 * s));
    let _in = rt_a.enter();
    assert_ne!(a.handle().status().lease, LeaseState::Held);
}

/// The node of [`overloaded`] runs whose clock is truly ahead.
const FAST: usize = 15;

/// Issue 33's overload: 16 nodes for 10 simulated minutes on a worker
/// registry that is overloaded most of the time (for 30 to 90 s, about a
/// minute apart): 90 % of report writes and 30 % of renewals hang past the
/// caller's timeout, so live peers' reports go stale by tens of seconds.
/// Every wall clock is right (no steps; drift under 500 ppm) but node
/// [`FAST`]'s, 30 s ahead from its first boot a minute in. `peers` reads a
/// sample of 4 live reports, as a large fleet's etcd, Redis or ZooKeeper
/// reads a sample of 64.
fn overloaded(seed: u64, reports: ReportClocks) -> SimConfig {
    SimConfig {
        seed,
        nodes: 16,
        duration: Duration::from_secs(10 * 60),
        step: Duration::from_millis(100),
        rate: 2.0,
        fault_every: Duration::from_secs(60),
        oracle_nodes: 0,
        flaw: None,
        reports,
        peer_sample: Some(4),
        overload: Some((
            Duration::from_secs(30),
            Duration::from_secs(30),
            Duration::from_secs(90),
        )),
        clock_faults: false,
        fast_node: Some((FAST, Duration::from_secs(30))),
    }
}

/// Clock-skew refusals of nodes whose clocks are right: every one but
/// [`FAST`]'s in an [`overloaded`] run.
fn false_refusals(s: &Stats) -> u64 {
    s.skew_refused
        .iter()
        .filter(|(node, _)| **node != FAST)
        .map(|(_, n)| n)
        .sum()
}

/// Issue 33: with each report weighed by its age on the registry's clock,
/// an overloaded registry refuses no start whose clock is right, while the
/// node whose clock is 30 s ahead is refused at every try and never
/// issues; and no ID is issued twice. With the revisions etcd gives (no
/// ages), the second read weighs only reports written after the first,
/// and refuses no correct clock either. With neither, the same runs
/// refuse correct clocks, as the 10,000-node run did: the overload is
/// strong enough to test what ages change.
#[test]
fn an_overloaded_registry_refuses_no_correct_clock() {
    let mut unknown_refused = 0;
    for seed in 1..=3 {
        let out = fleet::run(overloaded(seed, ReportClocks::Ages));
        let s = &out.stats;
        eprintln!(
            "ages, seed {seed}: starts {:?}, clock skew refusals {:?}, stalest report {:?}, \
             {} calls dropped by overloads, {} IDs",
            s.started, s.skew_refused, s.workers.stalest_report, s.workers.overloaded, s.ids
        );
        if let Some(f) = failure(seed, &Plan::from_env(), &out) {
            panic!("{f}");
        }
        assert!(
            s.workers.stalest_report > Duration::from_secs(30),
            "seed {seed}: reports went stale by {:?} only",
            s.workers.stalest_report
        );
        assert!(
            s.faults.get("overload").is_some_and(|n| *n >= 3),
            "{:?}",
            s.faults
        );
        assert!(s.ids > 1_000, "seed {seed}: {} IDs", s.ids);
        assert_eq!(
            false_refusals(s),
            0,
            "seed {seed}: correct clocks refused: {:?}",
            s.skew_refused
        );
        assert!(
            s.skew_refused.get(&FAST).is_some_and(|n| *n >= 10),
            "seed {seed}: the fast node was refused {:?} times",
            s.skew_refused.get(&FAST)
        );
        assert_eq!(
            s.started.get(&FAST),
            None,
            "seed {seed}: the fast node started"
        );

        let out = fleet::run(overloaded(seed, ReportClocks::Revisions));
        if let Some(f) = failure(seed, &Plan::from_env(), &out) {
            panic!("{f}");
        }
        eprintln!(
            "revisions, seed {seed}: clock skew refusals {:?}",
            out.stats.skew_refused
        );
        assert_eq!(
            false_refusals(&out.stats),
            0,
            "seed {seed}: correct clocks refused: {:?}",
            out.stats.skew_refused
        );

        let out = fleet::run(overloaded(seed, ReportClocks::Unknown));
        if let Some(f) = failure(seed, &Plan::from_env(), &out) {
            panic!("{f}");
        }
        eprintln!(
            "unknown ages, seed {seed}: clock skew refusals {:?}",
            out.stats.skew_refused
        );
        unknown_refused += false_refusals(&out.stats);
    }
    assert!(
        unknown_refused > 0,
        "without ages or revisions no correct clock was refused: the overload is too weak \
         to show what they change"
    );
}
