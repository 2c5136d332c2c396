//! The `monotonic` strategy under faults: three nodes share one timestamp
//! oracle (a leader elected through the worker registry issues every ID,
//! followers forward to it over gRPC), while clients of every node record
//! each request's send and receive time and its IDs. The leader is
//! SIGKILLed, frozen past its lease, cut off from the coordinator, replaced
//! by a node whose clock is an hour behind, and the coordinator itself is
//! restarted.
//!
//! What must hold, whatever happens: no ID twice, and real-time order
//! (linearizability) across every client and node: a request sent after
//! another's response was read gets only IDs above that response's (the
//! checker's `mono` column counts the requests that don't, and pairs out of
//! order within a response). Between leaders, requests wait up to
//! `monotonic.leader_wait` and then answer `503 no_leader`: availability,
//! not order, is what a fail-over costs.
//!
//! Each scenario runs on etcd and on the `sql` registry (PostgreSQL), both
//! private instances the suite may stop. The layout is `tso` (`id >> 18` is
//! Unix ms); the time column checks that each ID decodes to real time,
//! within [`MONOTONIC_AHEAD`] ahead (a new leader starts above the last one's
//! persisted window) and 1 s behind (more for a leader whose clock is behind).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use idmint_core::Layout;
use idmint_testkit::proxy::CutProxy;
use jiff::Timestamp;
use serde_json::Value;

use crate::harness::check::MONOTONIC_AHEAD;
use crate::harness::load::{KeyKind, Reply};
use crate::harness::node::{NodeInfo, Refusal, wait_for};
use crate::harness::{
    Checker, Coordinator, Ctx, FakeClock, Load, LoadOptions, Node, Outcome, Record, Registry,
    Scenario, ServeConfig, Target,
};

/// The monotonic key every client asks for.
const KEY: &str = "seq";
/// The three nodes.
const NAMES: [&str; 3] = ["a", "b", "c"];
/// `monotonic.lease_ttl` (the default): a dead leader is replaced after
/// about this long.
const TTL: Duration = Duration::from_secs(3);
/// The bound on each wait for load progress, a leader, or an error.
const WAIT: Duration = Duration::from_secs(60);
/// How many IDs a scenario checks at least in full mode.
const FULL_IDS: u64 = 1_000_000;
/// How long a full-mode scenario may take to gather [`FULL_IDS`].
const FULL_WAIT: Duration = Duration::from_secs(600);

/// The monotonic scenarios: the checker's own test, then each fault on etcd
/// and on PostgreSQL.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "monotonic-checker",
            run: checker_self_test,
        },
        Scenario {
            name: "monotonic-leader-sigkill[etcd]",
            run: |ctx| leader_sigkill(ctx, Registry::Etcd),
        },
        Scenario {
            name: "monotonic-leader-sigkill[postgres]",
            run: |ctx| leader_sigkill(ctx, Registry::Postgres),
        },
        Scenario {
            name: "monotonic-leader-sigstop[etcd]",
            run: |ctx| leader_sigstop(ctx, Registry::Etcd),
        },
        Scenario {
            name: "monotonic-leader-sigstop[postgres]",
            run: |ctx| leader_sigstop(ctx, Registry::Postgres),
        },
        Scenario {
            name: "monotonic-leader-cut-off[etcd]",
            run: |ctx| leader_cut_off(ctx, Registry::Etcd),
        },
        Scenario {
            name: "monotonic-leader-cut-off[postgres]",
            run: |ctx| leader_cut_off(ctx, Registry::Postgres),
        },
        Scenario {
            name: "monotonic-leader-behind-1h[etcd]",
            run: |ctx| leader_behind(ctx, Registry::Etcd),
        },
        Scenario {
            name: "monotonic-leader-behind-1h[postgres]",
            run: |ctx| leader_behind(ctx, Registry::Postgres),
        },
        Scenario {
            name: "monotonic-coordinator-restart[etcd]",
            run: |ctx| coordinator_restart(ctx, Registry::Etcd),
        },
        Scenario {
            name: "monotonic-coordinator-restart[postgres]",
            run: |ctx| coordinator_restart(ctx, Registry::Postgres),
        },
        Scenario {
            name: "monotonic-coordinator-forgets[redis]",
            run: redis_forgets,
        },
    ]
}

/// Three nodes on `coordinator` serving the monotonic key [`KEY`] (and the
/// config's usual snowflake key, which no client asks for).
fn config(ctx: &Ctx, coordinator: &Coordinator) -> ServeConfig {
    ServeConfig::new(coordinator.clone(), ctx.unique("m"))
        .with_lease_ttl(TTL)
        .with_monotonic_key(KEY)
        .with_monotonic("lease_ttl", &format!("\"{}s\"", TTL.as_secs()))
}

/// Successful replies per stream in each phase of load.
fn phase(ctx: &Ctx) -> u64 {
    ctx.scale(20, 200)
}

/// `/v1/status`'s `monotonic` object of `node`.
fn view(node: &Node) -> Result<Value> {
    let v: Value = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?
        .get(node.url("/v1/status"))
        .send()?
        .json()?;
    Ok(v["monotonic"].clone())
}

/// The figure `field` of a view (the counts are strings).
fn figure(view: &Value, field: &str) -> u64 {
    match &view[field] {
        Value::String(s) => s.parse().unwrap_or(0),
        v => v.as_u64().unwrap_or(0),
    }
}

/// A running cluster of three nodes and the clients of each.
struct Cluster {
    layout: Layout,
    nodes: Vec<Node>,
    load: Load,
    /// When each fail-over began and how long until the nodes agreed on the
    /// next leader, for the notes.
    failovers: Vec<String>,
}

impl Cluster {
    /// Starts one node per config (named a, b, c), the clients of each, and
    /// waits until they agree on a leader and every stream has served.
    fn start(ctx: &Ctx, configs: &[ServeConfig], clocks: Option<&[FakeClock]>) -> Result<Cluster> {
        let layout = configs[0].monotonic_layout()?;
        let mut nodes = Vec::new();
        for (idx, config) in configs.iter().enumerate() {
            let mut node = Node::new(ctx, NAMES[idx], config, u32::try_from(idx)?)?;
            if let Some(clocks) = clocks {
                node.set_clock(Some(clocks[idx].clone()));
            }
            node.start()?;
            node.wait_ready(Duration::from_secs(30))?;
            nodes.push(node);
        }
        let cluster = Cluster {
            layout,
            load: Load::start(Vec::new(), LoadOptions::new()),
            nodes,
            failovers: Vec::new(),
        };
        cluster.leader_among(&[0, 1, 2], WAIT)?;
        for idx in 0..cluster.nodes.len() {
            cluster.load.add_all(cluster.targets(idx));
        }
        cluster.load.wait_ok(None, phase(ctx), WAIT)?;
        Ok(cluster)
    }

    /// Two clients of node `idx`: single IDs, and batches of 1, 10 and 100.
    fn targets(&self, idx: usize) -> Vec<Target> {
        let node = &self.nodes[idx];
        vec![
            Target::monotonic(node, KEY, self.layout),
            Target::monotonic(node, KEY, self.layout).with_counts(&[1, 10, 100]),
        ]
    }

    /// Load until the fault: a phase, and in full mode half of [`FULL_IDS`].
    fn warm(&self, ctx: &Ctx) -> Result<()> {
        self.load.wait_ok(None, phase(ctx), WAIT)?;
        if ctx.mode == crate::harness::Mode::Full {
            self.load.wait_ids(FULL_IDS / 2, FULL_WAIT)?;
        }
        Ok(())
    }

    /// Load after recovery: a phase on every stream, and in full mode up to
    /// [`FULL_IDS`] in all.
    fn settle(&self, ctx: &Ctx) -> Result<()> {
        self.load.wait_ok(None, phase(ctx), WAIT)?;
        if ctx.mode == crate::harness::Mode::Full {
            self.load.wait_ids(FULL_IDS, FULL_WAIT)?;
        }
        Ok(())
    }

    /// Waits until the nodes `among` agree on one leader among them: exactly
    /// one says it leads, and every one names it. Returns its index.
    fn leader_among(&self, among: &[usize], within: Duration) -> Result<usize> {
        let mut last = Vec::new();
        wait_for(within, Duration::from_millis(50), || {
            let views: Vec<Value> = among
                .iter()
                .map(|&i| view(&self.nodes[i]).unwrap_or(Value::Null))
                .collect();
            let leaders: Vec<usize> = among
                .iter()
                .zip(&views)
                .filter(|(_, v)| v["role"] == "leader")
                .map(|(&i, _)| i)
                .collect();
            let named: Vec<&Value> = views.iter().map(|v| &v["leader"]).collect();
            let agreed =
                leaders.len() == 1 && named.iter().all(|n| n.is_string() && *n == named[0]);
            last = views
                .iter()
                .map(|v| format!("{}/{}", v["role"], v["leader"]))
                .collect();
            Ok(agreed.then(|| leaders[0]))
        })
        .with_context(|| format!("no agreed leader among {among:?}: {last:?}"))
    }

    /// Waits for a new leader among `among` after a fault at `since`, and
    /// notes how long the nodes took to agree on it.
    fn failover(&mut self, what: &str, among: &[usize], since: Instant) -> Result<usize> {
        let leader = self.leader_among(among, WAIT)?;
        self.failovers.push(format!(
            "{what}: {} leads {:.1}s later",
            NAMES[leader],
            since.elapsed().as_secs_f64()
        ));
        Ok(leader)
    }

    /// Waits until every stream of the nodes `idxs` had `n` more replies.
    fn wait_ok_on(&self, idxs: &[usize], n: u64) -> Result<()> {
        for &i in idxs {
            self.load.wait_ok(Some(NAMES[i]), n, WAIT)?;
        }
        Ok(())
    }

    /// Ends node `idx`'s clients and SIGKILLs it.
    fn kill(&mut self, idx: usize) -> Result<()> {
        self.load.retire(NAMES[idx]);
        self.nodes[idx].kill()
    }

    /// Starts node `idx` again and gives it new clients; a refused start is
    /// returned, not an error.
    fn restart(&mut self, idx: usize) -> Result<std::result::Result<(), Refusal>> {
        let started = self.nodes[idx].try_start()?;
        if started.is_ok() {
            self.nodes[idx].wait_ready(Duration::from_secs(30))?;
            self.load.add_all(self.targets(idx));
        }
        Ok(started)
    }

    fn others(&self, idx: usize) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| i != idx).collect()
    }

    /// Stops the clients and checks what they recorded.
    fn finish(self, checker: &Checker) -> (Outcome, Record) {
        let record = self.load.finish();
        let mut out = checker.check(&record);
        for note in self.failovers {
            out.note(note);
        }
        (out, record)
    }
}

/// Requires that every failed request carries one of `allowed` (or is a
/// refused start, counted `start:…`).
fn require_codes(out: &mut Outcome, allowed: &[&str]) {
    let unexpected: Vec<String> = out
        .errors_by_code
        .keys()
        .filter(|c| !allowed.contains(&c.as_str()) && !c.starts_with("start:"))
        .cloned()
        .collect();
    out.require(
        unexpected.is_empty(),
        format!("unexpected error codes {unexpected:?} (expected only {allowed:?})"),
    );
}

/// The monotonic IDs the streams of `node` received in replies sent after
/// `from` and received before `to` (a request sent during a fault may wait
/// for a leader and be served once the fault is over).
fn ids_within(record: &Record, node: &str, from: Timestamp, to: Timestamp) -> u64 {
    record
        .replies()
        .filter(|r| r.node.name() == node && r.sent > from && r.received < to)
        .filter_map(|r| r.result.as_ref().ok())
        .map(|ids| ids.len() as u64)
        .sum()
}

/// The highest monotonic ID received before `before`, and the lowest sent
/// after `after` (from any node).
fn around(record: &Record, before: Timestamp, after: Timestamp) -> (Option<u64>, Option<u64>) {
    let ok = || {
        record
            .replies()
            .filter_map(|r| r.result.as_ref().ok().map(|ids| (r, ids)))
    };
    let last = ok()
        .filter(|(r, _)| r.received < before)
        .flat_map(|(_, ids)| ids.iter().copied())
        .max();
    let first = ok()
        .filter(|(r, _)| r.sent > after)
        .flat_map(|(_, ids)| ids.iter().copied())
        .min();
    (last, first)
}

/// Notes the last ID before a fault and the first after the new leader took
/// over, with their decoded times.
fn note_around(
    out: &mut Outcome,
    layout: Layout,
    record: &Record,
    fault: Timestamp,
    led: Timestamp,
) {
    let (last, first) = around(record, fault, led);
    let time = |id: Option<u64>| {
        id.and_then(|id| layout.decode(id).ok())
            .map_or_else(|| "-".to_owned(), |d| d.time.to_string())
    };
    out.note(format!(
        "last ID before the fault {} ({}), first after the new leader {} ({})",
        last.map_or_else(|| "-".to_owned(), |i| i.to_string()),
        time(last),
        first.map_or_else(|| "-".to_owned(), |i| i.to_string()),
        time(first)
    ));
}

/// `monotonic-leader-sigkill[<registry>]`: the leader is SIGKILLed under
/// load (three times in full mode); the others elect a new one once its
/// lease runs out; the dead node is started again and follows.
fn leader_sigkill(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let coordinator = registry.coordinator(ctx)?;
    let config = config(ctx, &coordinator);
    let mut cluster = Cluster::start(ctx, &[config.clone(), config.clone(), config], None)?;
    let mut leader = cluster.leader_among(&[0, 1, 2], WAIT)?;
    let rounds = ctx.scale(1, 3);
    let mut restarts = Vec::new();
    let mut first_kill = None;
    let mut first_led = None;
    for round in 0..rounds {
        cluster.warm(ctx)?;
        let killed = Instant::now();
        let killed_at = Timestamp::now();
        first_kill.get_or_insert(killed_at);
        cluster.kill(leader)?;
        let others = cluster.others(leader);
        let next = cluster.failover(
            &format!("round {}: {} SIGKILLed", round + 1, NAMES[leader]),
            &others,
            killed,
        )?;
        first_led.get_or_insert(Timestamp::now());
        cluster.wait_ok_on(&others, phase(ctx))?;
        if let Err(refusal) = cluster.restart(leader)? {
            restarts.push(refusal.code.clone());
            bail!("{} did not start again: {refusal}", NAMES[leader]);
        }
        let agreed = cluster.leader_among(&[0, 1, 2], WAIT)?;
        if agreed != next {
            bail!(
                "the leader moved from {} to {} on a restart",
                NAMES[next],
                NAMES[agreed]
            );
        }
        leader = next;
    }
    cluster.settle(ctx)?;
    let layout = cluster.layout;
    let (mut out, record) = cluster.finish(&Checker::new(format!(
        "leader SIGKILLed under load ({}): requests wait, then 503 no_leader, until its \
         {}s lease runs out and a follower takes over above every ID issued; restarted, \
         it follows; no ID twice, real-time order across all clients",
        if rounds == 1 {
            "once".to_owned()
        } else {
            format!("{rounds} times")
        },
        TTL.as_secs()
    )));
    out.count_refusals(&restarts);
    // The killed node's clients see their connection drop (io, connect).
    require_codes(&mut out, &["no_leader", "io", "connect"]);
    if let (Some(k), Some(l)) = (first_kill, first_led) {
        note_around(&mut out, layout, &record, k, l);
    }
    Ok(out)
}

/// `monotonic-leader-sigstop[<registry>]`: the leader is frozen (SIGSTOP)
/// while the others elect a new one, then continued (SIGCONT): its lease's
/// fence, read on every call, keeps it from issuing; it follows.
fn leader_sigstop(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let coordinator = registry.coordinator(ctx)?;
    let config = config(ctx, &coordinator);
    let mut cluster = Cluster::start(ctx, &[config.clone(), config.clone(), config], None)?;
    let old = cluster.leader_among(&[0, 1, 2], WAIT)?;
    cluster.warm(ctx)?;
    let before = view(&cluster.nodes[old])?;

    let frozen = Instant::now();
    let stopped_at = Timestamp::now();
    cluster.nodes[old].stop()?;
    let others = cluster.others(old);
    let new = cluster.failover(&format!("{} SIGSTOPped", NAMES[old]), &others, frozen)?;
    let led_at = Timestamp::now();
    cluster.wait_ok_on(&others, phase(ctx))?;
    // Frozen well past its lease, with the new leader issuing meanwhile.
    let hold = ctx.scale(TTL + Duration::from_secs(2), TTL * 4);
    std::thread::sleep(hold.saturating_sub(frozen.elapsed()));
    let stopped_for = frozen.elapsed();
    cluster.nodes[old].cont()?;
    let continued = Instant::now();
    let continued_at = Timestamp::now();
    // It learns the new leader and forwards to it.
    let rejoined = cluster.leader_among(&[0, 1, 2], WAIT);
    let rejoin_took = continued.elapsed();
    let after = view(&cluster.nodes[old]).unwrap_or(Value::Null);
    cluster.wait_ok_on(&[0, 1, 2], phase(ctx))?;
    let after_following = view(&cluster.nodes[old]).unwrap_or(Value::Null);

    // The deposed leader leads again: its keeper, which lost the claim,
    // claims it again by itself once the leaders after it are gone.
    let mut live = vec![0, 1, 2];
    let mut leader = new;
    while leader != old {
        let at = Instant::now();
        cluster.kill(leader)?;
        live.retain(|&i| i != leader);
        leader = cluster.failover(&format!("{} SIGKILLed", NAMES[leader]), &live, at)?;
    }
    cluster.settle(ctx)?;
    let leading_again = view(&cluster.nodes[old]).unwrap_or(Value::Null);
    let layout = cluster.layout;
    let (mut out, record) = cluster.finish(&Checker::new(format!(
        "leader frozen (SIGSTOP) {}s, past its {}s lease: a follower takes over; continued \
         (SIGCONT), the old leader's fence refuses on its own generator at once, it forwards \
         to the new leader; its clients wait (or time out) or get 503 no_leader meanwhile; \
         then the leaders after it are SIGKILLed and it leads again, above every ID; no ID \
         twice, real-time order across all clients",
        hold.as_secs(),
        TTL.as_secs()
    )));
    // timeout: a client of the frozen node gives up after 10 s; io, connect:
    // the clients of the nodes killed at the end.
    require_codes(&mut out, &["no_leader", "timeout", "io", "connect"]);
    out.require(
        leading_again["role"] == "leader",
        format!("{} at the end: {leading_again}", NAMES[old]),
    );
    match rejoined {
        Ok(agreed) => out.require(
            agreed == new,
            format!("after SIGCONT {} leads, not {}", NAMES[agreed], NAMES[new]),
        ),
        Err(e) => out.require(false, format!("after SIGCONT: {e:#}")),
    }
    out.require(
        after["role"] == "follower",
        format!("{} after SIGCONT: {after}", NAMES[old]),
    );
    // What the old node reserved as leader: nothing more once continued
    // (requests in flight when it froze aside, which its fence refuses).
    let (r0, r1, r2, r3) = (
        figure(&before, "reserved_here"),
        figure(&after, "reserved_here"),
        figure(&after_following, "reserved_here"),
        figure(&leading_again, "reserved_here"),
    );
    out.require(
        r2 == r1,
        format!(
            "{} reserved {} IDs as a follower after SIGCONT",
            NAMES[old],
            r2.saturating_sub(r1)
        ),
    );
    out.note(format!(
        "{} frozen {:.1}s; agreed on {} again {:.1}s after SIGCONT; reserved_here {r0} before \
         the freeze (read just before), {r1} after, {r2} after a phase as follower, {r3} \
         leading again",
        NAMES[old],
        stopped_for.as_secs_f64(),
        NAMES[new],
        rejoin_took.as_secs_f64()
    ));
    out.note(format!(
        "{} IDs to {}'s clients sent and received while frozen",
        ids_within(&record, NAMES[old], stopped_at, continued_at),
        NAMES[old]
    ));
    note_around(&mut out, layout, &record, stopped_at, led_at);
    Ok(out)
}

/// `monotonic-leader-cut-off[<registry>]`: each node reaches the coordinator
/// through a proxy of its own; the leader's drops every packet (a partition)
/// for a while. The leader's fence passes, the others elect a new leader;
/// the cut-off node, which can't learn who leads, answers 503 no_leader;
/// healed, it follows.
fn leader_cut_off(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let coordinator = registry.coordinator(ctx)?;
    let upstream = coordinator
        .host_port()
        .ok_or_else(|| anyhow!("no address in {}", coordinator.address))?;
    let proxies = (0..NAMES.len())
        .map(|_| CutProxy::start(&upstream))
        .collect::<std::io::Result<Vec<_>>>()?;
    let config = config(ctx, &coordinator);
    let configs: Vec<ServeConfig> = proxies
        .iter()
        .map(|p| config.via(&p.addr().to_string()))
        .collect();
    let mut cluster = Cluster::start(ctx, &configs, None)?;
    let old = cluster.leader_among(&[0, 1, 2], WAIT)?;
    cluster.warm(ctx)?;

    let cut = Instant::now();
    let cut_at = Timestamp::now();
    proxies[old].blackhole();
    let others = cluster.others(old);
    let new = cluster.failover(&format!("{} cut off", NAMES[old]), &others, cut)?;
    let led_at = Timestamp::now();
    cluster.wait_ok_on(&others, phase(ctx))?;
    let refused = cluster
        .load
        .wait_error(Some(NAMES[old]), &["no_leader"], WAIT);
    let outage = ctx.scale(Duration::from_secs(7), Duration::from_secs(20));
    std::thread::sleep(outage.saturating_sub(cut.elapsed()));
    let healing_at = Timestamp::now();
    proxies[old].restore();
    let healed = Instant::now();
    let rejoined = cluster.leader_among(&[0, 1, 2], WAIT);
    let rejoin_took = healed.elapsed();
    cluster.settle(ctx)?;
    let layout = cluster.layout;
    let (mut out, record) = cluster.finish(&Checker::new(format!(
        "leader cut off from {} for {}s (packets dropped): its fence stops it within the {}s \
         lease (503 mark_reached once it can't persist its window), a follower takes over; \
         the cut-off node answers 503 no_leader (it can't learn the new leader); healed, it \
         follows; no ID twice, real-time order across all clients",
        registry.name(),
        outage.as_secs(),
        TTL.as_secs()
    )));
    require_codes(&mut out, &["no_leader", "mark_reached"]);
    out.require_ok(&refused, "the cut-off node's clients");
    match rejoined {
        Ok(agreed) => out.note(format!(
            "healed: all agree on {} {:.1}s later",
            NAMES[agreed],
            rejoin_took.as_secs_f64()
        )),
        Err(e) => out.require(false, format!("after healing: {e:#}")),
    }
    let lease_gone = cut_at + jiff::SignedDuration::try_from(TTL + Duration::from_secs(1))?;
    let served_cut = ids_within(&record, NAMES[old], lease_gone, healing_at);
    out.require(
        served_cut == 0,
        format!(
            "{} handed out {served_cut} IDs cut off past its lease",
            NAMES[old]
        ),
    );
    out.note(format!("{} led after the cut", NAMES[new]));
    note_around(&mut out, layout, &record, cut_at, led_at);
    Ok(out)
}

/// `monotonic-leader-behind-1h[<registry>]`: the nodes run on the wall
/// clock (`snowflake.clock = "wall"`, which the oracle reads too); a
/// follower's clock steps back an hour, and the leaders are SIGKILLed until
/// that node leads. Its clock is behind the stored mark, so it goes on from
/// the mark (`monotonic.max_lead`, 24 h): IDs keep increasing, their decoded
/// time stays at the mark instead of following its clock.
///
/// Nodes are started at real time (a node an hour off is refused by the
/// registry's peer clock-skew check) and the clock steps at runtime; the
/// killed nodes are started again at real time, which the skew check may
/// refuse while the stepped node reports its time (`start:clock_skew`).
fn leader_behind(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let coordinator = registry.coordinator(ctx)?;
    let config = config(ctx, &coordinator).with_snowflake("clock", "\"wall\"");
    let clocks = (0..NAMES.len())
        .map(|i| FakeClock::new(&ctx.dir(&format!("clock-{}", NAMES[i]))?))
        .collect::<Result<Vec<_>>>()?;
    let mut cluster = Cluster::start(
        ctx,
        &[config.clone(), config.clone(), config],
        Some(&clocks),
    )?;
    let mut leader = cluster.leader_among(&[0, 1, 2], WAIT)?;
    let behind = cluster.others(leader)[0];
    clocks[behind].set_behind(Duration::from_secs(3600))?;
    let stepped_at = Timestamp::now();
    cluster.warm(ctx)?;

    let mut live: Vec<usize> = vec![0, 1, 2];
    let mut killed = Vec::new();
    let mut fault_at = None;
    while leader != behind {
        let at = Instant::now();
        fault_at.get_or_insert(Timestamp::now());
        cluster.kill(leader)?;
        killed.push(leader);
        live.retain(|&i| i != leader);
        leader = cluster.failover(&format!("{} SIGKILLed", NAMES[leader]), &live, at)?;
    }
    let led_at = Timestamp::now();
    cluster.wait_ok_on(&live, phase(ctx))?;
    let mut refusals = Vec::new();
    for &idx in &killed {
        match cluster.restart(idx)? {
            Ok(()) => live.push(idx),
            Err(refusal) => {
                cluster
                    .failovers
                    .push(format!("{} restarted at real time: {refusal}", NAMES[idx]));
                refusals.push(refusal.code);
            }
        }
    }
    live.sort_unstable();
    let agreed = cluster.leader_among(&live, WAIT);
    let led = view(&cluster.nodes[behind]).unwrap_or(Value::Null);
    cluster.settle(ctx)?;
    let layout = cluster.layout;
    let window = Duration::from_secs(600);
    let (mut out, record) = cluster.finish(
        &Checker::new(
            "a follower's wall clock steps back 1 h, then the leader(s) are SIGKILLed until it \
             leads: it goes on from the stored mark (max_lead 24h), IDs keep increasing and \
             decode to the mark's time, not its clock's; killed nodes restarted at real time \
             may be refused (clock_skew); no ID twice, real-time order across all clients",
        )
        .with_monotonic_time_bounds(window, MONOTONIC_AHEAD),
    );
    out.count_refusals(&refusals);
    require_codes(&mut out, &["no_leader", "io", "connect"]);
    match agreed {
        Ok(agreed) => out.require(
            agreed == behind,
            format!("{} leads at the end, not {}", NAMES[agreed], NAMES[behind]),
        ),
        Err(e) => out.require(false, format!("after the restarts: {e:#}")),
    }
    out.require(
        led["role"] == "leader",
        format!("{} behind 1 h: {led}", NAMES[behind]),
    );
    out.require(
        refusals.iter().all(|c| c == "clock_skew"),
        format!("restarts refused with {refusals:?}"),
    );
    out.note(format!(
        "{}'s clock stepped back 1 h at {stepped_at}; it led from {led_at}; its mark {}",
        NAMES[behind], led["mark"]
    ));
    if let Some(fault) = fault_at {
        note_around(&mut out, layout, &record, fault, led_at);
    }
    Ok(out)
}

/// `monotonic-coordinator-restart[<registry>]`: the service holding the
/// leader's lease is stopped under load and started again. The leader issues
/// while its lease and window last, then every node answers 503 (no leader
/// can be elected or keep its lease); once the service is back, a leader
/// (the same or another) issues above everything before.
fn coordinator_restart(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let coordinator = registry.coordinator(ctx)?;
    let config = config(ctx, &coordinator);
    let mut cluster = Cluster::start(ctx, &[config.clone(), config.clone(), config], None)?;
    let old = cluster.leader_among(&[0, 1, 2], WAIT)?;
    cluster.warm(ctx)?;

    let down = Instant::now();
    let stopped_at = Timestamp::now();
    coordinator.stop()?;
    let refused = cluster.load.wait_error(None, &[], WAIT);
    let outage = ctx.scale(Duration::from_secs(6), Duration::from_secs(20));
    std::thread::sleep(outage.saturating_sub(down.elapsed()));
    let restarting_at = Timestamp::now();
    coordinator.restart()?;
    let restarted = Instant::now();
    let new = cluster.failover(
        &format!("{} restarted (leader was {})", registry.name(), NAMES[old]),
        &[0, 1, 2],
        restarted,
    )?;
    let led_at = Timestamp::now();
    cluster.settle(ctx)?;
    let layout = cluster.layout;
    let (mut out, record) = cluster.finish(&Checker::new(format!(
        "{} down {}s under load: the leader issues while its lease and window last, then \
         every node answers 503 (no_leader; mark_reached while the leader can't persist its \
         window); started again, a leader issues above every ID before; no ID twice, \
         real-time order across all clients",
        registry.name(),
        outage.as_secs()
    )));
    out.require_ok(&refused, "an error while the coordinator is down");
    require_codes(&mut out, &["no_leader", "mark_reached"]);
    let lease_gone = stopped_at + jiff::SignedDuration::try_from(TTL + Duration::from_secs(1))?;
    let issued: u64 = NAMES
        .iter()
        .map(|n| ids_within(&record, n, lease_gone, restarting_at))
        .sum();
    out.require(
        issued == 0,
        format!("{issued} IDs issued with the coordinator down past the lease"),
    );
    out.note(format!(
        "{} leads after the restart (was {})",
        NAMES[new], NAMES[old]
    ));
    note_around(&mut out, layout, &record, stopped_at, led_at);
    Ok(out)
}

/// `monotonic-coordinator-forgets[redis]`: the leader is elected on a Redis
/// without persistence, which restarts empty at once under load (issue:
/// a second leader took over within 0.2 s and 96 IDs were issued twice).
/// The old leader's next renewal finds the new epoch. Its lease still valid
/// by its own clock, it registers its worker again (raising the new epoch's
/// floor to its mark) and leads on; else it fences, and no node leads until
/// the lease and the window from before have run out, the new leader above
/// the floor. Either way: no ID twice, real-time order across all clients,
/// never two leaders issuing at once.
fn redis_forgets(ctx: &Ctx) -> Result<Outcome> {
    let coordinator = Registry::Redis.coordinator(ctx)?;
    let config = config(ctx, &coordinator);
    let mut cluster = Cluster::start(ctx, &[config.clone(), config.clone(), config], None)?;
    let old = cluster.leader_among(&[0, 1, 2], WAIT)?;
    cluster.warm(ctx)?;

    let restarting_at = Timestamp::now();
    coordinator.restart()?;
    let restarted = Instant::now();
    // Past the old leader's next renewal (one lease): then see who leads.
    std::thread::sleep(TTL);
    let new = cluster.failover(
        &format!("redis restarted empty (leader was {})", NAMES[old]),
        &[0, 1, 2],
        restarted,
    )?;
    let held_for = restarted.elapsed();
    let led_at = Timestamp::now();
    cluster.settle(ctx)?;
    let layout = cluster.layout;
    let held = cluster.nodes[new].log_says("waiting to claim", Duration::ZERO)
        || cluster.nodes[new].log_says("claims are held", Duration::ZERO);
    let registered_again = cluster.nodes[old].log_says("registered again", Duration::ZERO)
        || cluster.nodes[old].log_says("register again", Duration::ZERO);
    let (mut out, record) = cluster.finish(&Checker::new(
        "redis (persistence off) restarts empty under load: the leader, its lease valid by \
         its own clock, registers its worker again in the new epoch and leads on; or it \
         fences, claims are held for the lease and the window, and the new leader starts \
         above the old one's persisted window; no ID twice, real-time order across all \
         clients",
    ));
    require_codes(&mut out, &["no_leader", "mark_reached"]);
    if new == old {
        out.note(format!(
            "{} led on through the restart ({})",
            NAMES[old],
            if registered_again {
                "registered its worker again"
            } else {
                "its log doesn't say it registered again"
            }
        ));
    } else {
        // Another node leads: only after the hold, which the old leader's
        // lease and window make safe.
        out.require(
            held,
            format!("the new leader {} never met the hold", NAMES[new]),
        );
        out.note(format!(
            "{} leads {:.1}s after the restart (was {})",
            NAMES[new],
            held_for.as_secs_f64(),
            NAMES[old]
        ));
    }
    note_around(&mut out, layout, &record, restarting_at, led_at);
    Ok(out)
}

/// A made-up reply: stream, sent and received (ms from the start), IDs.
type Span = (usize, u64, u64, &'static [u64]);

/// `monotonic-checker`: the order check itself, on made-up records: it must
/// count what it is meant to and nothing else.
fn checker_self_test(_ctx: &Ctx) -> Result<Outcome> {
    let layout = Layout::TSO;
    let a = NodeInfo::detached("a");
    let b = NodeInfo::detached("b");
    let t0 = Instant::now();
    let w0 = Timestamp::now();
    // (stream, sent ms, received ms, IDs), IDs made now.
    let base = u64::try_from(w0.as_millisecond())? << 18;
    let record = |spans: &[Span]| -> Record {
        let mut streams: Vec<Vec<Reply>> = vec![Vec::new(); 2];
        for &(stream, sent, received, ids) in spans {
            let at = |ms: u64| t0 + Duration::from_millis(ms);
            let wall =
                |ms: u64| w0 + jiff::SignedDuration::from_millis(i64::try_from(ms).unwrap_or(0));
            streams[stream].push(Reply {
                stream,
                node: if stream == 0 { a.clone() } else { b.clone() },
                key: KEY.to_owned(),
                sent: wall(sent),
                received: wall(received),
                sent_at: at(sent),
                received_at: at(received),
                offset_ms: 0,
                result: Ok(ids.iter().map(|i| base + i).collect()),
            });
        }
        let finished = w0 + jiff::SignedDuration::from_millis(100);
        Record {
            kinds: vec![KeyKind::Monotonic(layout); 2],
            streams,
            finished,
            ends: vec![finished; 2],
        }
    };
    let check = |spans: &[Span]| Checker::new("").check(&record(spans));
    let mut out = Outcome {
        expected: "made-up records: overlapping requests in any order pass; each request \
                   below one read before it was sent counts once in mono, as does each pair \
                   out of order within a response; repeats count in dup"
            .to_owned(),
        ..Outcome::default()
    };
    let cases: [(&str, Vec<Span>, u64, u64); 5] = [
        // Overlapping: any order.
        ("overlap", vec![(0, 0, 10, &[5]), (1, 1, 9, &[4])], 0, 0),
        // b began after a ended, below it.
        ("inversion", vec![(0, 0, 5, &[5, 6]), (1, 6, 9, &[4])], 0, 1),
        // Two later requests below one earlier: two violations.
        (
            "two-below",
            vec![
                (0, 0, 5, &[50]),
                (1, 6, 7, &[10]),
                (1, 8, 9, &[20]),
                (0, 10, 11, &[60]),
            ],
            0,
            2,
        ),
        // Out of order within one response, and a repeat across nodes.
        (
            "in-response",
            vec![(0, 0, 5, &[7, 9, 8]), (1, 6, 9, &[10, 11])],
            0,
            1,
        ),
        ("repeat", vec![(0, 0, 5, &[5, 6]), (1, 1, 9, &[6, 7])], 1, 0),
    ];
    for (name, spans, dup, mono) in cases {
        let got = check(&spans);
        out.ids_checked += got.ids_checked;
        out.require(
            got.duplicates == dup && got.monotonic_violations == mono,
            format!(
                "{name}: dup={} mono={}, expected dup={dup} mono={mono}",
                got.duplicates, got.monotonic_violations
            ),
        );
    }
    Ok(out)
}
