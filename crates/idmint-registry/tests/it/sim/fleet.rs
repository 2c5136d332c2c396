//! The driver: a fleet of node processes, each a real `WorkerKeeper` (and on
//! a few nodes a real oracle `Campaign`) on its own paused tokio runtime, all
//! on the test's one thread, stepped together through simulated time while
//! faults strike.
//!
//! # Why one runtime per node
//!
//! A node is a process: it has its own monotonic clock, and a SIGSTOP stops
//! all of its threads at once, its keeper task included, while the rest of
//! the fleet goes on. One runtime per process models exactly that: a paused
//! node's runtime is simply not driven, so its keeper task does not run at
//! all (no fence check, no retraction), and on resume its clock jumps and its
//! callers issue *before* its task runs again, the race a real SIGSTOP past
//! the lease sets up. What stops them then is the real code: the generator's
//! mark, which the keeper never lets lead past the lease's fence, and the
//! oracle's `holds_lease` check. A crash drops the runtime: the task dies
//! mid-whatever without releasing, as under SIGKILL.
//!
//! # Steps
//!
//! Each step (`IDMINT_SIM_STEP_MS`, 100 ms by default) the driver: applies
//! the faults due; runs every live, unpaused runtime up to the step's end
//! (each through all its timers in order, on its own clock); then lets nodes
//! issue (about `rate` IDs per second each, at the step's end) and oracle
//! nodes reserve, checking every ID at once. Within a step, runtimes run one
//! after another, so the registry sees one node's calls of that step before
//! the next node's; the registry's clock never runs behind a caller, so this
//! reordering can only make a lease look shorter to its holder, and it stays
//! far below the keeper's lease margin (1 s), which already covers clock-rate
//! differences between a node and its registry.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use idmint_core::{ClockBehind, Layout, LayoutSpec, SequenceExhausted};
use idmint_registry::{
    Campaign, CampaignConfig, CampaignGuard, GeneratorSettings, KeeperConfig, KeeperGuard,
    NodeIdentity, RegistryError, WorkerKeeper,
};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::checker::{Checker, Holding, Violation};
use super::registry::{
    CallFaults, Flaw, Injected, Net, ReportClocks, SimLink, SimRegistry, Target,
};
use super::rng::Rng;
use super::time::{NodeTime, SimClock, Source, Wall};
use super::trace::{Trace, What};

/// One simulation run's parameters.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub nodes: usize,
    pub duration: Duration,
    pub step: Duration,
    /// IDs each node issues per simulated second, on average.
    pub rate: f64,
    /// The mean time between two faults of one node.
    pub fault_every: Duration,
    /// How many nodes also campaign for the oracle (the first ones).
    pub oracle_nodes: usize,
    /// A broken registry, and which.
    pub flaw: Option<(Flaw, Target)>,
    /// What the worker registry's `peers` tells of each report, and the
    /// size of the sample it reads (all live reports: `None`).
    pub reports: ReportClocks,
    pub peer_sample: Option<usize>,
    /// Overloads of the worker registry: the mean gap between two, and how
    /// long each lasts (uniform between the two).
    pub overload: Option<(Duration, Duration, Duration)>,
    /// Whether wall clocks step (and restarts find them behind). Off, every
    /// clock is right but for its drift (under 500 ppm), and the run's
    /// clock-skew refusals are all false but those of the fast node.
    pub clock_faults: bool,
    /// A node whose wall clock is this far ahead from the start, and stays
    /// so (no NTP), which first boots a minute in, once peers report.
    pub fast_node: Option<(usize, Duration)>,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Stats {
    pub ids: u64,
    pub reserved: u64,
    pub holdings: u64,
    pub takeovers: u64,
    pub starts: u64,
    pub refused: BTreeMap<&'static str, u64>,
    pub reserve_refused: BTreeMap<&'static str, u64>,
    pub start_failed: BTreeMap<&'static str, u64>,
    pub faults: BTreeMap<&'static str, u64>,
    /// Resumes from a pause longer than the lease had left: whether the
    /// first issue after the clock jumped (before the keeper's task ran
    /// again) was refused or went through (below a persisted mark).
    pub resumed_past_lease_refused: u64,
    pub resumed_past_lease_issued: u64,
    pub workers: Injected,
    pub oracle: Injected,
    /// Per node: starts refused with `clock_skew`, and starts that went
    /// through.
    pub skew_refused: BTreeMap<usize, u64>,
    pub started: BTreeMap<usize, u64>,
}

pub struct Outcome {
    pub violation: Option<(u64, Violation)>,
    pub stats: Stats,
    pub digest: (u64, u64),
    pub trace: Arc<Trace>,
}

enum Keeper {
    Waiting { retry_at: u64 },
    Starting(JoinHandle<Result<KeeperGuard, RegistryError>>),
    Running(KeeperGuard),
    Stopping(JoinHandle<()>),
}

/// A node process (one incarnation). Fields drop in order: the keeper and
/// campaign guards first (they only signal), then the runtime, which drops
/// every task unrun, as a killed process would.
struct Proc {
    keeper: Keeper,
    campaign: Option<CampaignGuard>,
    paused: Option<Pause>,
    incarnation: u32,
    time: NodeTime,
    clock: Arc<SimClock>,
    worker_link: Arc<SimLink>,
    rt: Runtime,
}

struct Pause {
    until: u64,
    past_lease: bool,
}

enum Life {
    Down { restart_at: u64 },
    Up(Box<Proc>),
}

/// A node machine: what outlives its processes.
struct Node {
    identity: NodeIdentity,
    ppm: i64,
    wall: Arc<Wall>,
    net: Arc<Net>,
    source: Source,
    policy: ClockBehind,
    keeper: KeeperConfig,
    life: Life,
    incarnations: u32,
    next_fault: u64,
    next_issue: u64,
    ntp_at: Option<u64>,
}

struct World {
    cfg: SimConfig,
    rng: Rng,
    now: u64,
    layout: Layout,
    workers: Arc<SimRegistry>,
    oracle: Arc<SimRegistry>,
    trace: Arc<Trace>,
    checker: Checker,
    stats: Stats,
    nodes: Vec<Node>,
    /// When the worker registry next fails over to a stale replica.
    next_failover: u64,
    /// When it is next overloaded.
    next_overload: u64,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("fits")
}

/// A layout with room for the fleet and then some (claims race, dead
/// nodes' leases linger), so workers are reused but rarely all taken.
pub fn layout_for(nodes: usize) -> Layout {
    let want = nodes + nodes / 4 + 4;
    let bits = (usize::BITS - (want - 1).leading_zeros()).max(4) as u8;
    LayoutSpec::new(41, Layout::LEAF.epoch(), 22 - bits)
        .with_worker_bits(bits)
        .build()
        .expect("a valid layout")
}

pub fn run(cfg: SimConfig) -> Outcome {
    let trace = Arc::new(Trace::default());
    let mut rng = Rng::new(cfg.seed);
    let ttl = [Duration::from_secs(10), Duration::from_secs(30)][rng.below(2) as usize];
    let workers = Arc::new(
        SimRegistry::new(
            "workers",
            ttl,
            rng.next_u64(),
            CallFaults::DEFAULT,
            flaw_of(&cfg, "workers"),
            trace.clone(),
        )
        .with_reports(cfg.reports, cfg.peer_sample),
    );
    let oracle = Arc::new(SimRegistry::new(
        "oracle",
        Duration::from_secs(3),
        rng.next_u64(),
        CallFaults::DEFAULT,
        flaw_of(&cfg, "oracle"),
        trace.clone(),
    ));
    let layout = layout_for(cfg.nodes);
    let next_failover = ns(rng.uniform(Duration::ZERO, cfg.fault_every * 2));
    let nodes = (0..cfg.nodes)
        .map(|i| new_node(&mut rng, &cfg, i))
        .collect();
    // Drawn after everything else, so a run without overloads draws as before.
    let next_overload = match cfg.overload {
        Some((every, _, _)) => ns(rng.uniform(Duration::ZERO, every * 2)),
        None => u64::MAX,
    };
    let mut world = World {
        rng,
        now: 0,
        layout,
        workers,
        oracle,
        checker: Checker::new(layout),
        stats: Stats::default(),
        trace: trace.clone(),
        nodes,
        next_failover,
        next_overload,
        cfg,
    };
    let violation = world.run();
    world.stats.ids = world.checker.ids;
    world.stats.reserved = world.checker.reserved;
    world.stats.holdings = world.checker.holdings;
    world.stats.takeovers = world.checker.takeovers;
    world.stats.workers = world.workers.injected();
    world.stats.oracle = world.oracle.injected();
    // Every process dies here; nothing of theirs runs again.
    world.nodes.clear();
    Outcome {
        violation,
        digest: trace.digest(),
        stats: world.stats,
        trace,
    }
}

fn flaw_of(cfg: &SimConfig, registry: &str) -> Option<Flaw> {
    cfg.flaw
        .filter(|(_, target)| target.hits(registry))
        .map(|(flaw, _)| flaw)
}

fn new_node(rng: &mut Rng, cfg: &SimConfig, i: usize) -> Node {
    let ppm = rng.below(1001) as i64 - 500;
    let source = if rng.chance(0.7) {
        Source::Monotonic
    } else {
        Source::Wall
    };
    let policy = match rng.below(3) {
        0 => ClockBehind::Fail,
        1 => ClockBehind::Wait {
            max: Duration::from_millis(5),
        },
        _ => ClockBehind::Borrow {
            max_lead: rng.uniform(Duration::from_millis(500), Duration::from_secs(5)),
        },
    };
    let keeper = KeeperConfig::new()
        .with_call_timeout([Duration::from_secs(1), Duration::from_secs(2)][rng.below(2) as usize]);
    let first_fault = ns(rng.uniform(Duration::ZERO, cfg.fault_every * 2));
    // Nodes come up over the first seconds, not all at once.
    let mut restart_at = ns(rng.uniform(Duration::ZERO, Duration::from_secs(5)));
    let wall = Arc::new(Wall::new(ppm));
    if let Some((fast, ahead)) = cfg.fast_node
        && fast == i
    {
        wall.step(i64::try_from(ahead.as_nanos()).expect("fits"));
        restart_at = ns(Duration::from_secs(60));
    }
    Node {
        identity: crate::support::identity(i),
        ppm,
        wall,
        net: Arc::new(Net::default()),
        source,
        policy,
        keeper,
        life: Life::Down { restart_at },
        incarnations: 0,
        next_fault: first_fault,
        next_issue: 0,
        ntp_at: None,
    }
}

/// A new process's runtime (paused, current-thread) and its clock's reading.
///
/// A paused runtime's clock starts at the real instant it was built, and the
/// keeper turns instants into nanoseconds after one process-wide base (its
/// `mono_nanos`: the instant of the first call in the process), saturating
/// at 0 before it. In this test binary another test's paused runtime may
/// have set that base ahead of real time (minutes of simulated time before
/// its first keeper start), and a lease fence before the base would read as
/// never passing. So the base is set here first, at real time, if no one set
/// it yet ([`prime_keeper_clock`]), and every process's clock starts a day
/// after its runtime was built: later than any base another test can have set.
pub fn node_runtime() -> (Runtime, Instant) {
    prime_keeper_clock();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let built = rt.block_on(async { Instant::now() });
    let base = built + Duration::from_secs(24 * 3600);
    jump(&rt, base);
    (rt, base)
}

/// Starts (and stops) one keeper on a runtime whose clock reads real time,
/// so the keeper's process-wide instant base is set no later than now.
fn prime_keeper_clock() {
    static PRIMED: std::sync::Once = std::sync::Once::new();
    PRIMED.call_once(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let reg = Arc::new(SimRegistry::new(
            "workers",
            Duration::from_secs(10),
            0,
            CallFaults::NONE,
            None,
            Arc::new(Trace::default()),
        ));
        rt.block_on(async {
            let base = Instant::now();
            let time = NodeTime {
                base,
                g0: 0,
                ppm: 0,
            };
            let link = Arc::new(SimLink::new(
                reg,
                0,
                0,
                crate::support::identity(0),
                time,
                Arc::new(Net::default()),
            ));
            let clock = Arc::new(SimClock::new(time, Arc::new(Wall::new(0)), Source::Wall));
            let settings = GeneratorSettings::new(Layout::LEAF).with_clock(clock);
            WorkerKeeper::start(
                link,
                crate::support::identity(0),
                settings,
                KeeperConfig::new(),
            )
            .await
            .expect("a keeper on a registry without faults")
            .shutdown()
            .await;
        });
    });
}

/// Runs the runtime until its clock reads `until`, through every timer on the way.
pub fn drive(rt: &Runtime, until: Instant) {
    rt.block_on(async move { tokio::time::sleep_until(until).await });
}

/// Moves the runtime's clock forward to `to` without running any task: a
/// process continued after a SIGSTOP, before its scheduler got to anything.
/// (`tokio::time::advance` moves the clock on its first poll, then yields;
/// polled once outside the scheduler, nothing else runs.)
pub fn jump(rt: &Runtime, to: Instant) {
    let _in = rt.enter();
    let by = to.saturating_duration_since(Instant::now());
    let mut advance = std::pin::pin!(tokio::time::advance(by));
    let _ = advance
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()));
    assert!(Instant::now() >= to, "the jump moved the clock");
}

impl World {
    fn run(&mut self) -> Option<(u64, Violation)> {
        let step = ns(self.cfg.step);
        let end = ns(self.cfg.duration);
        while self.now < end {
            self.now += step;
            if self.next_failover <= self.now {
                self.fail_over();
            }
            if self.next_overload <= self.now {
                self.overload();
            }
            for i in 0..self.nodes.len() {
                self.events(i);
            }
            if let Err(v) = self.resume_all() {
                return Some((self.now, v));
            }
            for i in 0..self.nodes.len() {
                self.advance(i);
            }
            for i in 0..self.nodes.len() {
                if let Err(v) = self.issue(i) {
                    return Some((self.now, v));
                }
            }
        }
        None
    }

    /// The worker registry fails over to a stale replica: it rolls back to
    /// a prefix of its history, up to 30 s old, and begins a new epoch
    /// (`SimRegistry::fail_over_to_stale_replica`). As often as one node's
    /// faults, for the whole registry.
    fn fail_over(&mut self) {
        let gap = self.rng.uniform(Duration::ZERO, self.cfg.fault_every * 2);
        self.next_failover = self.now + ns(gap).max(1);
        let pick = self.rng.next_u64();
        let lag = self.workers.fail_over_to_stale_replica(self.now, pick);
        self.count("failover to a stale replica");
        // Told as node 0's event: the trace is per node, and every node's
        // next call meets it.
        self.fault(
            0,
            format!("the worker registry fails over to a replica {lag:?} behind (a new epoch)"),
        );
    }

    /// The worker registry is overloaded for a while
    /// (`SimRegistry::overload`): report writes and renewals mostly hang.
    fn overload(&mut self) {
        let Some((every, shortest, longest)) = self.cfg.overload else {
            return;
        };
        let lasts = self.rng.uniform(shortest, longest);
        let gap = self.rng.uniform(Duration::ZERO, every * 2);
        self.next_overload = self.now + ns(lasts) + ns(gap).max(1);
        self.workers.overload(self.now + ns(lasts));
        self.count("overload");
        self.fault(
            0,
            format!("the worker registry is overloaded for {lasts:?} (reports and renewals hang)"),
        );
    }

    fn fault(&mut self, i: usize, what: String) {
        self.trace.push(self.now, i, What::Fault(what));
    }

    fn count(&mut self, kind: &'static str) {
        *self.stats.faults.entry(kind).or_default() += 1;
    }

    /// Restarts, retries, clock corrections and new faults due for node `i`.
    fn events(&mut self, i: usize) {
        let now = self.now;
        if self.nodes[i].ntp_at.is_some_and(|t| t <= now) {
            let node = &mut self.nodes[i];
            node.ntp_at = None;
            let error = node.wall.error(now);
            node.wall.correct(now);
            self.fault(
                i,
                format!("ntp steps the wall clock by {} ms", -error / 1_000_000),
            );
        }
        match &self.nodes[i].life {
            Life::Down { restart_at } if *restart_at <= now => self.boot(i),
            Life::Up(p) => {
                if let Keeper::Waiting { retry_at } = p.keeper
                    && retry_at <= now
                    && p.paused.is_none()
                {
                    self.start_keeper(i);
                }
            }
            Life::Down { .. } => {}
        }
        if self.nodes[i].next_fault <= now {
            let gap = self.rng.uniform(Duration::ZERO, self.cfg.fault_every * 2);
            self.nodes[i].next_fault = now + ns(gap).max(1);
            self.strike(i);
        }
    }

    fn strike(&mut self, i: usize) {
        let up = matches!(self.nodes[i].life, Life::Up(_));
        // Links stay cut for up to 90 s: three times the longest lease.
        let longest_cut = Duration::from_secs(90);
        match self.rng.weighted(&[25, 10, 20, 15, 10, 10]) {
            0 if up => {
                let down = self
                    .rng
                    .log_uniform(Duration::from_secs(1), Duration::from_secs(600));
                self.count("crash");
                self.fault(i, format!("crash (SIGKILL); back in {down:?}"));
                self.nodes[i].life = Life::Down {
                    restart_at: self.now + ns(down),
                };
            }
            1 if up => self.graceful_stop(i),
            2 if up => {
                let Life::Up(p) = &mut self.nodes[i].life else {
                    unreachable!()
                };
                if p.paused.is_some() {
                    return;
                }
                let pause = self
                    .rng
                    .log_uniform(Duration::from_millis(200), Duration::from_secs(120));
                let left = match &p.keeper {
                    Keeper::Running(g) => {
                        // `status` reads the node's clock: inside its runtime.
                        let _in = p.rt.enter();
                        g.handle().status().lease_left
                    }
                    _ => None,
                };
                p.paused = Some(Pause {
                    until: self.now + ns(pause),
                    past_lease: left.is_some_and(|l| pause > l),
                });
                self.count("pause");
                self.fault(
                    i,
                    format!("pause (SIGSTOP) for {pause:?}; lease left {left:?}"),
                );
            }
            3 if self.cfg.clock_faults => {
                let back = self.rng.chance(0.7);
                let by = if back {
                    self.rng
                        .log_uniform(Duration::from_millis(5), Duration::from_secs(5 * 3600))
                } else {
                    self.rng
                        .log_uniform(Duration::from_millis(5), Duration::from_secs(600))
                };
                let signed = i64::try_from(by.as_nanos()).expect("fits");
                self.nodes[i].wall.step(if back { -signed } else { signed });
                if self.rng.chance(0.8) {
                    let fix = self
                        .rng
                        .log_uniform(Duration::from_secs(10), Duration::from_secs(3600));
                    self.nodes[i].ntp_at = Some(self.now + ns(fix));
                }
                self.count(if back { "clock back" } else { "clock forward" });
                let dir = if back { "back" } else { "forward" };
                self.fault(i, format!("wall clock steps {dir} by {by:?}"));
            }
            4 => {
                let d = self.rng.log_uniform(Duration::from_secs(1), longest_cut);
                self.nodes[i]
                    .net
                    .down_until
                    .store(self.now + ns(d), std::sync::atomic::Ordering::Relaxed);
                self.count("link down");
                self.fault(i, format!("link down for {d:?} (calls refused)"));
            }
            5 => {
                let d = self.rng.log_uniform(Duration::from_secs(1), longest_cut);
                self.nodes[i]
                    .net
                    .blackhole_until
                    .store(self.now + ns(d), std::sync::atomic::Ordering::Relaxed);
                self.count("blackhole");
                self.fault(i, format!("link blackholed for {d:?} (calls hang)"));
            }
            _ => {}
        }
    }

    fn graceful_stop(&mut self, i: usize) {
        let Life::Up(p) = &mut self.nodes[i].life else {
            return;
        };
        if p.paused.is_some() {
            return;
        }
        let keeper = std::mem::replace(&mut p.keeper, Keeper::Waiting { retry_at: u64::MAX });
        let campaign = p.campaign.take();
        p.keeper = match keeper {
            Keeper::Running(guard) => Keeper::Stopping(p.rt.spawn(async move {
                guard.shutdown().await;
                if let Some(c) = campaign {
                    c.shutdown().await;
                }
            })),
            other => {
                p.campaign = campaign;
                p.keeper = other;
                return;
            }
        };
        self.count("graceful restart");
        self.fault(i, "graceful restart: shutdown, release".to_owned());
    }

    /// A new process on node `i`: a fresh runtime (its clock starting now),
    /// its clock maybe stepped back as it comes up, a campaign on oracle
    /// nodes, and a keeper start.
    fn boot(&mut self, i: usize) {
        let now = self.now;
        // Restarts (not the first start) may find the clock behind.
        if self.nodes[i].incarnations > 0 && self.cfg.clock_faults && self.rng.chance(0.3) {
            let by = self
                .rng
                .log_uniform(Duration::from_millis(5), Duration::from_secs(3600));
            self.nodes[i]
                .wall
                .step(-i64::try_from(by.as_nanos()).expect("fits"));
            self.nodes[i].ntp_at = Some(
                now + ns(self
                    .rng
                    .log_uniform(Duration::from_secs(10), Duration::from_secs(1800))),
            );
            self.count("restart behind");
            self.fault(i, format!("restarts with the wall clock {by:?} behind"));
        }
        let node = &mut self.nodes[i];
        node.incarnations += 1;
        let incarnation = node.incarnations;
        let (rt, base) = node_runtime();
        let time = NodeTime {
            base,
            g0: now,
            ppm: node.ppm,
        };
        let clock = Arc::new(SimClock::new(time, node.wall.clone(), node.source));
        let link = |reg: &Arc<SimRegistry>| {
            Arc::new(SimLink::new(
                reg.clone(),
                i,
                incarnation,
                node.identity.clone(),
                time,
                node.net.clone(),
            ))
        };
        let worker_link = link(&self.workers);
        let campaign = (i < self.cfg.oracle_nodes).then(|| {
            let lead = Duration::from_secs(24 * 3600);
            let settings = GeneratorSettings::new(Layout::TSO)
                .with_clock(clock.clone())
                .with_clock_behind(ClockBehind::Borrow { max_lead: lead })
                .with_sequence_exhausted(SequenceExhausted::Borrow { max_lead: lead });
            let _in = rt.enter();
            Campaign::spawn(
                link(&self.oracle),
                node.identity.clone(),
                settings,
                KeeperConfig::new(),
                CampaignConfig::new(),
            )
            .expect("a valid campaign")
        });
        node.life = Life::Up(Box::new(Proc {
            keeper: Keeper::Waiting { retry_at: now },
            campaign,
            paused: None,
            incarnation,
            time,
            clock,
            worker_link,
            rt,
        }));
        self.start_keeper(i);
    }

    fn start_keeper(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let Life::Up(p) = &mut node.life else {
            return;
        };
        let settings = GeneratorSettings::new(self.layout)
            .with_clock(p.clock.clone())
            .with_clock_behind(node.policy);
        let start = WorkerKeeper::start(
            p.worker_link.clone(),
            node.identity.clone(),
            settings,
            node.keeper,
        );
        p.keeper = Keeper::Starting(p.rt.spawn(start));
        self.stats.starts += 1;
    }

    /// Continues the nodes whose pause is over: the clock jumps, and the
    /// node's callers issue before its keeper's task runs again.
    fn resume_all(&mut self) -> Result<(), Violation> {
        for i in 0..self.nodes.len() {
            let now = self.now;
            let Life::Up(p) = &mut self.nodes[i].life else {
                continue;
            };
            let Some(pause) = p.paused.take_if(|p| p.until <= now) else {
                continue;
            };
            jump(&p.rt, p.time.local_at(now));
            self.fault(i, "continued (SIGCONT)".to_owned());
            let issued = self.issue_now(i)?;
            if pause.past_lease {
                if issued {
                    self.stats.resumed_past_lease_issued += 1;
                } else {
                    self.stats.resumed_past_lease_refused += 1;
                }
            }
        }
        Ok(())
    }

    /// Runs node `i`'s process up to now, then collects what finished.
    fn advance(&mut self, i: usize) {
        let now = self.now;
        let Life::Up(p) = &mut self.nodes[i].life else {
            return;
        };
        if p.paused.is_some() {
            return;
        }
        drive(&p.rt, p.time.local_at(now));
        match &p.keeper {
            Keeper::Starting(h) if h.is_finished() => {
                let Keeper::Starting(h) =
                    std::mem::replace(&mut p.keeper, Keeper::Waiting { retry_at: 0 })
                else {
                    unreachable!()
                };
                match p.rt.block_on(h).expect("the keeper's start does not panic") {
                    Ok(guard) => {
                        let worker = guard.handle().worker();
                        let incarnation = p.incarnation;
                        p.keeper = Keeper::Running(guard);
                        *self.stats.started.entry(i).or_default() += 1;
                        self.trace.push(
                            now,
                            i,
                            What::Started {
                                incarnation,
                                worker,
                            },
                        );
                    }
                    Err(e) => {
                        let wait = match e {
                            RegistryError::ClockSkew { .. }
                            | RegistryError::ClockBehindMark { .. } => Duration::from_secs(10),
                            _ => self
                                .rng
                                .uniform(Duration::from_secs(1), Duration::from_secs(3)),
                        };
                        p.keeper = Keeper::Waiting {
                            retry_at: now + ns(wait),
                        };
                        *self.stats.start_failed.entry(e.code()).or_default() += 1;
                        if matches!(e, RegistryError::ClockSkew { .. }) {
                            *self.stats.skew_refused.entry(i).or_default() += 1;
                        }
                        self.trace.push(now, i, What::StartFailed(e.to_string()));
                    }
                }
            }
            Keeper::Stopping(h) if h.is_finished() => {
                let down = self
                    .rng
                    .uniform(Duration::from_secs(1), Duration::from_secs(10));
                self.nodes[i].life = Life::Down {
                    restart_at: now + ns(down),
                };
            }
            _ => {}
        }
    }

    /// Node `i` issues if it is due.
    fn issue(&mut self, i: usize) -> Result<(), Violation> {
        let now = self.now;
        let every = 1.0 / self.cfg.rate;
        let Life::Up(p) = &self.nodes[i].life else {
            return Ok(());
        };
        if p.paused.is_some() {
            return Ok(());
        }
        if self.nodes[i].next_issue <= now {
            let gap = self
                .rng
                .uniform(Duration::ZERO, Duration::from_secs_f64(2.0 * every));
            self.nodes[i].next_issue = now + ns(gap);
            self.issue_now(i)?;
        }
        Ok(())
    }

    /// Node `i`'s callers ask for IDs now (and for a reservation, on oracle
    /// nodes). Returns whether a snowflake ID was issued.
    fn issue_now(&mut self, i: usize) -> Result<bool, Violation> {
        let now = self.now;
        let Life::Up(p) = &self.nodes[i].life else {
            return Ok(false);
        };
        let _in = p.rt.enter();
        let mut issued = false;
        if let Keeper::Running(guard) = &p.keeper {
            let handle = guard.handle();
            let n = if self.rng.chance(0.1) {
                1 + self.rng.below(4)
            } else {
                1
            };
            let result = handle
                .next_ids(n)
                .map(|batch| batch.iter().map(|id| id.get()).collect::<Vec<u64>>());
            match result {
                Ok(ids) => {
                    let generation = handle.status().generation;
                    let h = Holding {
                        node: i,
                        incarnation: p.incarnation,
                        generation,
                    };
                    for id in ids {
                        let worker = self.checker.worker_of(id);
                        self.trace.push(
                            now,
                            i,
                            What::Issued {
                                worker,
                                generation,
                                id,
                            },
                        );
                        self.checker.snowflake(h, id)?;
                    }
                    issued = true;
                }
                Err(e) => {
                    *self.stats.refused.entry(e.code()).or_default() += 1;
                    self.trace.push(now, i, What::Refused(e.code()));
                }
            }
        }
        if let Some(c) = &p.campaign
            && self.rng.chance(0.5)
        {
            let n = 1 + self.rng.below(4);
            match c.oracle().reserve(n) {
                Ok(batch) => {
                    let ids: Vec<u64> = batch.iter().map(|id| id.get()).collect();
                    self.trace.push(
                        now,
                        i,
                        What::Reserved {
                            first: ids[0],
                            last: ids[ids.len() - 1],
                        },
                    );
                    self.checker.oracle(i, &batch)?;
                }
                Err(e) => {
                    *self.stats.reserve_refused.entry(e.code()).or_default() += 1;
                }
            }
        }
        Ok(issued)
    }
}
