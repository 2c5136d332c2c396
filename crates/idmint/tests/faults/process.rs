//! Process faults: a node SIGKILLed mid-load and restarted with its clock
//! behind, a node SIGSTOPped past its lease and continued, a dead node's
//! worker ID taken over by another node.
//!
//! The clusters run the layout `leaf,node=1`: two worker IDs, so with two
//! nodes up, a node that starts must take the ID the dead (or frozen) one
//! held, above the mark that one persisted. Every node runs `borrow`
//! clock-behind and sequence-exhausted policies, so a node whose clock is
//! behind that mark issues at once, above it, instead of waiting its clock
//! out: the mark is what keeps its IDs apart from the dead node's.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use jiff::Timestamp;

use crate::harness::{
    Checker, Ctx, FakeClock, Load, LoadOptions, Node, Outcome, Record, Registry, Scenario,
    ServeConfig,
};

/// Two worker IDs.
const LAYOUT: &str = "leaf,node=1";
/// How far a node may run ahead of its clock (`borrow` policies).
const BORROW: Duration = Duration::from_secs(20);
/// How long a node waits to start while a dead node's lease runs out.
const TAKEOVER_WAIT: Duration = Duration::from_secs(30);
/// The bound on each wait for load progress.
const PROGRESS_WAIT: Duration = Duration::from_secs(60);

/// The process-fault scenarios.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "sigkill-restart-behind[file]",
            run: |ctx| sigkill_restart_behind(ctx, Registry::File),
        },
        Scenario {
            name: "sigkill-restart-behind[postgres]",
            run: |ctx| sigkill_restart_behind(ctx, Registry::Postgres),
        },
        Scenario {
            name: "sigkill-restart-behind[mariadb]",
            run: |ctx| sigkill_restart_behind(ctx, Registry::MariaDb),
        },
        Scenario {
            name: "sigkill-restart-behind[etcd]",
            run: |ctx| sigkill_restart_behind(ctx, Registry::Etcd),
        },
        Scenario {
            name: "sigkill-restart-behind[zookeeper]",
            run: |ctx| sigkill_restart_behind(ctx, Registry::ZooKeeper),
        },
        Scenario {
            name: "sigkill-restart-behind[redis]",
            run: |ctx| sigkill_restart_behind(ctx, Registry::Redis),
        },
        Scenario {
            name: "sigstop-past-ttl[postgres]",
            run: |ctx| sigstop_past_ttl(ctx, Registry::Postgres),
        },
        Scenario {
            name: "sigstop-past-ttl[mariadb]",
            run: |ctx| sigstop_past_ttl(ctx, Registry::MariaDb),
        },
        Scenario {
            name: "sigstop-past-ttl[etcd]",
            run: |ctx| sigstop_past_ttl(ctx, Registry::Etcd),
        },
        Scenario {
            name: "sigstop-past-ttl[zookeeper]",
            run: |ctx| sigstop_past_ttl(ctx, Registry::ZooKeeper),
        },
        Scenario {
            name: "sigstop-past-ttl[redis]",
            run: |ctx| sigstop_past_ttl(ctx, Registry::Redis),
        },
        Scenario {
            name: "takeover[file]",
            run: |ctx| takeover(ctx, Registry::File),
        },
        Scenario {
            name: "takeover[postgres]",
            run: |ctx| takeover(ctx, Registry::Postgres),
        },
        Scenario {
            name: "takeover[mariadb]",
            run: |ctx| takeover(ctx, Registry::MariaDb),
        },
        Scenario {
            name: "takeover[etcd]",
            run: |ctx| takeover(ctx, Registry::Etcd),
        },
        Scenario {
            name: "takeover[zookeeper]",
            run: |ctx| takeover(ctx, Registry::ZooKeeper),
        },
        Scenario {
            name: "takeover[redis]",
            run: |ctx| takeover(ctx, Registry::Redis),
        },
    ]
}

/// The cluster config every process scenario runs.
fn config(ctx: &Ctx, registry: Registry) -> Result<ServeConfig> {
    let borrow = format!("\"borrow:{}s\"", BORROW.as_secs());
    Ok(
        ServeConfig::standard(ctx, registry, LAYOUT, ctx.scale(200, 2000))?
            .with_snowflake("clock_behind", &borrow)
            .with_snowflake("sequence_exhausted", &borrow),
    )
}

/// Replies per stream in each phase of load.
fn phase(ctx: &Ctx) -> u64 {
    ctx.scale(20, 600)
}

/// IDs per batch request.
fn batch(ctx: &Ctx) -> u64 {
    ctx.scale(50, 500)
}

/// Starts nodes `names` (node numbers 0, 1, ...) and waits until each is
/// ready; returns them with the worker IDs they hold.
fn start_nodes(ctx: &Ctx, config: &ServeConfig, names: &[&str]) -> Result<(Vec<Node>, Vec<u32>)> {
    let mut nodes = Vec::new();
    let mut workers = Vec::new();
    for (idx, name) in names.iter().enumerate() {
        let mut node = Node::new(ctx, name, config, u32::try_from(idx)?)?;
        node.start()?;
        workers.push(node.wait_ready(Duration::from_secs(30))?);
        nodes.push(node);
    }
    Ok((nodes, workers))
}

/// The highest snowflake ID `node` handed out in replies received before
/// `before` (all when `None`), and the lowest in replies sent after `after`.
fn last_before(record: &Record, node: &str, before: Timestamp) -> Option<u64> {
    record
        .snowflake_ids_of(node)
        .filter(|(_, r)| r.received < before)
        .map(|(id, _)| id)
        .max()
}

fn first_after(record: &Record, node: &str, after: Timestamp) -> Option<u64> {
    record
        .snowflake_ids_of(node)
        .filter(|(_, r)| r.sent > after)
        .map(|(id, _)| id)
        .min()
}

/// Requires that `node`'s snowflake IDs after `after` start above its own
/// (or `other`'s) IDs before `before`.
fn require_above(
    out: &mut Outcome,
    record: &Record,
    earlier: (&str, Timestamp),
    later: (&str, Timestamp),
) {
    let before = last_before(record, earlier.0, earlier.1);
    let after = first_after(record, later.0, later.1);
    match (before, after) {
        (Some(b), Some(a)) => {
            out.require(
                a > b,
                format!(
                    "{}'s first ID {a} is not above {}'s last {b}",
                    later.0, earlier.0
                ),
            );
            out.note(format!(
                "{}'s last ID {b}, {}'s first after {a}",
                earlier.0, later.0
            ));
        }
        _ => out.require(false, format!("no IDs to compare: {before:?} / {after:?}")),
    }
}

/// `sigkill-restart-behind[<registry>]`: node `a` is SIGKILLed under load.
/// Restarted an hour behind, it must refuse (`clock_behind_mark`); restarted
/// a few seconds behind (within `borrow`), it takes its worker ID back and
/// continues above its pre-kill IDs.
fn sigkill_restart_behind(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let config = config(ctx, registry)?;
    let far_behind = Duration::from_secs(3600);
    let behind = ctx.scale(Duration::from_secs(6), Duration::from_secs(9));
    let (mut nodes, workers) = start_nodes(ctx, &config, &["a", "b"])?;
    let load = Load::start(Vec::new(), LoadOptions::new());
    for node in &nodes {
        load.add_all(config.targets(node, batch(ctx))?);
    }
    load.wait_ok(None, phase(ctx), PROGRESS_WAIT)?;

    let a = &mut nodes[0];
    a.kill()?;
    let killed_at = Timestamp::now();
    let clock = FakeClock::new(&ctx.dir("clock-a")?)?;
    clock.set_behind(far_behind)?;
    a.set_clock(Some(clock.clone()));
    let mut retried = Vec::new();
    let far = a.start_retrying(&["workers_exhausted"], TAKEOVER_WAIT)?;
    retried.extend(far.retried);
    let far_refusal = far.result.err();
    if far_refusal.is_none() {
        a.kill()?;
    }

    clock.set_behind(behind)?;
    let near = a.start_retrying(&["workers_exhausted"], TAKEOVER_WAIT)?;
    retried.extend(near.retried);
    let restarted = near.result.is_ok();
    let restarted_at = Timestamp::now();
    let worker_after = if restarted {
        Some(a.wait_ready(Duration::from_secs(30))?)
    } else {
        None
    };
    if restarted {
        load.wait_ok(Some("a"), phase(ctx), PROGRESS_WAIT)?;
    }
    load.wait_ok(Some("b"), phase(ctx), PROGRESS_WAIT)?;
    let record = load.finish();

    let mut out = Checker::new(format!(
        "restarted 1 h behind: refused (clock_behind_mark); restarted {}s behind \
         (borrow:{}s): same worker ID, IDs above its pre-kill ones",
        behind.as_secs(),
        BORROW.as_secs()
    ))
    .with_node_time_bounds("a", Duration::from_secs(1), BORROW + Duration::from_secs(1))
    .check(&record);
    out.count_refusals(&retried);
    match &far_refusal {
        Some(r) => {
            out.count(&format!("start:{}", r.code), 1);
            out.require(r.code == "clock_behind_mark", format!("1 h behind: {r}"));
        }
        None => out.require(false, "a started 1 h behind its persisted mark"),
    }
    out.require(
        restarted,
        format!(
            "a did not restart {}s behind: {:?}",
            behind.as_secs(),
            near.result
        ),
    );
    out.require(
        worker_after == Some(workers[0]),
        format!(
            "a held worker {} before and {worker_after:?} after",
            workers[0]
        ),
    );
    require_above(&mut out, &record, ("a", killed_at), ("a", restarted_at));
    Ok(out)
}

/// `sigstop-past-ttl[<registry>]`: node `a` is frozen (SIGSTOP) until its
/// lease runs out and node `c` takes its worker ID; continued (SIGCONT), `a`
/// must not issue a snowflake ID on the lease it lost.
fn sigstop_past_ttl(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let config = config(ctx, registry)?;
    let (mut nodes, workers) = start_nodes(ctx, &config, &["a", "b"])?;
    let load = Load::start(Vec::new(), LoadOptions::new());
    for node in &nodes {
        load.add_all(config.targets(node, batch(ctx))?);
    }
    load.wait_ok(None, phase(ctx), PROGRESS_WAIT)?;

    nodes[0].stop()?;
    let stopped_at = Timestamp::now();
    let frozen = Instant::now();
    let mut c = Node::new(ctx, "c", &config, 2)?;
    let attempts = c.start_retrying(&["workers_exhausted"], TAKEOVER_WAIT)?;
    let took_over = frozen.elapsed();
    attempts
        .result
        .as_ref()
        .map_err(|r| anyhow::anyhow!("c did not start: {r}"))?;
    let worker_c = c.wait_ready(Duration::from_secs(30))?;
    load.add_all(config.targets(&c, batch(ctx))?);
    load.wait_ok(Some("c"), phase(ctx), PROGRESS_WAIT)?;

    nodes[0].cont()?;
    let continued_at = Timestamp::now();
    let refused = load
        .wait_error(Some("a"), &["mark_reached"], Duration::from_secs(20))
        .context("a's snowflake requests after SIGCONT");
    load.wait_ok(Some("c"), phase(ctx), PROGRESS_WAIT)?;
    load.wait_ok(Some("b"), phase(ctx), PROGRESS_WAIT)?;
    let record = load.finish();

    let mut out = Checker::new(
        "frozen past its lease: another node takes its worker ID; continued, it answers \
         503 mark_reached for snowflake IDs (segment keys keep serving), never an ID on the lost lease",
    )
    .check(&record);
    out.count_refusals(&attempts.retried);
    out.note(format!(
        "c took worker {worker_c} {:.1}s after a froze",
        took_over.as_secs_f64()
    ));
    out.require(
        worker_c == workers[0],
        format!("c holds worker {worker_c}, a held {}", workers[0]),
    );
    out.require_ok(&refused, "a after SIGCONT");
    out.require(
        nodes[0].log_says("worker lease lost", Duration::from_secs(5)),
        "a's log does not say it lost its lease",
    );
    // After SIGCONT: no snowflake ID from a at all (b and c hold both IDs),
    // and what a request in flight across the freeze got was made before it.
    let late: Vec<u64> = record
        .snowflake_ids_of("a")
        .filter(|(_, r)| r.sent > continued_at)
        .map(|(id, _)| id)
        .collect();
    out.require(
        late.is_empty(),
        format!(
            "a issued {} snowflake IDs after SIGCONT: {:?}",
            late.len(),
            &late[..late.len().min(3)]
        ),
    );
    if let Some(layout) = record.layout() {
        let slack = jiff::SignedDuration::from_secs(1);
        let made_late = record
            .snowflake_ids_of("a")
            .filter(|(_, r)| r.received > continued_at)
            .filter(|(id, _)| {
                layout
                    .decode(*id)
                    .is_ok_and(|d| d.time > stopped_at + slack)
            })
            .count();
        out.require(
            made_late == 0,
            format!("{made_late} of a's IDs were made after it froze"),
        );
    }
    require_above(&mut out, &record, ("a", stopped_at), ("c", stopped_at));
    Ok(out)
}

/// `takeover[<registry>]`: node `a` is SIGKILLed; node `c` (another
/// identity; for `file`, on `a`'s data directory) takes its worker ID, with
/// its clock set back behind `a`'s last IDs: it starts above `a`'s mark.
fn takeover(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let config = config(ctx, registry)?;
    let (mut nodes, workers) = start_nodes(ctx, &config, &["a", "b"])?;
    let load = Load::start(Vec::new(), LoadOptions::new());
    for node in &nodes {
        load.add_all(config.targets(node, batch(ctx))?);
    }
    load.wait_ok(None, phase(ctx), PROGRESS_WAIT)?;

    nodes[0].kill()?;
    let killed_at = Timestamp::now();
    let killed = Instant::now();
    let mut c = Node::new(ctx, "c", &config, 0)?;
    if registry == Registry::File {
        c = c.with_data_dir(nodes[0].data_dir());
    }
    // Each attempt runs on a clock set 2 s before the kill: without the
    // stored mark, c would make IDs a made.
    let clock = FakeClock::new(&ctx.dir("clock-c")?)?;
    c.set_clock(Some(clock.clone()));
    let behind_kill = Duration::from_secs(2);
    let attempts = c.start_retrying_with(&["workers_exhausted"], TAKEOVER_WAIT, |_| {
        clock.set_behind(killed.elapsed() + behind_kill)
    })?;
    let took_over = killed.elapsed();
    attempts
        .result
        .as_ref()
        .map_err(|r| anyhow::anyhow!("c did not start: {r}"))?;
    let started_at = Timestamp::now();
    let worker_c = c.wait_ready(Duration::from_secs(30))?;
    load.add_all(config.targets(&c, batch(ctx))?);
    load.wait_ok(Some("c"), phase(ctx), PROGRESS_WAIT)?;
    load.wait_ok(Some("b"), phase(ctx), PROGRESS_WAIT)?;
    let record = load.finish();

    let mut out = Checker::new(format!(
        "a dead node's worker ID taken by a new node whose clock reads 2 s before the death \
         (borrow:{}s): its IDs start above the dead node's mark",
        BORROW.as_secs()
    ))
    .with_node_time_bounds("c", Duration::from_secs(1), BORROW + Duration::from_secs(1))
    .check(&record);
    out.count_refusals(&attempts.retried);
    out.note(format!(
        "c took worker {worker_c} {:.1}s after a died, {} ms behind",
        took_over.as_secs_f64(),
        -clock.offset_ms()
    ));
    out.require(
        worker_c == workers[0],
        format!("c holds worker {worker_c}, a held {}", workers[0]),
    );
    require_above(&mut out, &record, ("a", killed_at), ("c", started_at));
    Ok(out)
}
