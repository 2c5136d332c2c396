//! Coordinators that forget: the worker registry's service comes back
//! without what it was told (Redis restarted with persistence off; a
//! PostgreSQL replica that lags promoted in a failover), while nodes hold
//! worker IDs and a new node starts at once.
//!
//! What must hold (docs/design.md, "When the coordinator forgets"): no claim
//! is granted while an earlier holder could still issue; a holder that finds
//! the store changed stops at once; the next holder of a worker starts above
//! everything the earlier one persisted. So no ID is issued twice, and each
//! worker's IDs keep increasing across its holders. Waits and typed refusals
//! are allowed, and counted.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::harness::{
    Checker, Coordinator, Ctx, Load, LoadOptions, Node, Outcome, Registry, Scenario, ServeConfig,
};

/// Two worker IDs, as in the issue that found the duplicates: two nodes
/// hold both, so the third can only take one that was freed.
const LAYOUT: &str = "time=41,unit=1ms,epoch=2020-01-01,worker=1,sequence=12";
/// The registry's lease TTL.
const TTL: Duration = Duration::from_secs(3);
/// The bound on each wait for load progress or a start.
const WAIT: Duration = Duration::from_secs(60);
/// How many IDs the scenario checks at least in full mode.
const FULL_IDS: u64 = 1_000_000;

/// The scenarios of coordinators that forget.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "registry-forgets[redis]",
            run: redis_restarts_empty,
        },
        Scenario {
            name: "registry-forgets[postgres]",
            run: postgres_fails_over_to_a_lagging_replica,
        },
    ]
}

/// How a scenario's coordinator forgets.
struct Forgetting {
    /// What happens, for the expected-behaviour line.
    what: &'static str,
    /// The event's name in the notes and failures: `restart`, `failover`.
    event: &'static str,
}

/// `registry-forgets[redis]`: nodes a and b hold the two workers of a 1-bit
/// layout on a Redis without persistence, under load; Redis restarts empty
/// and node c starts at once. Before, c claimed worker 0 at once and issued
/// beside its old holder (2,600 to 3,950 IDs twice per run). Now c waits
/// out the hold (lease TTL + mark window), a and b fence at their next
/// renewal, and whoever holds a worker next starts above its old holder's
/// persisted mark. Then c is SIGKILLed, and a and b claim again once its
/// lease has run out.
fn redis_restarts_empty(ctx: &Ctx) -> Result<Outcome> {
    let coordinator = Registry::Redis.coordinator(ctx)?;
    let config = forgetful_config(ctx, &coordinator);
    under_two_holders(
        ctx,
        &config,
        || coordinator.restart(),
        &Forgetting {
            what: "redis (persistence off) restarts empty",
            event: "restart",
        },
    )
}

/// `registry-forgets[postgres]`: the `sql` registry (lease mode) on a
/// PostgreSQL whose replica lags. Node z claims worker 0 and is killed, so
/// the cluster has an epoch and worker 0's row; once z's lease has run out
/// the replica is copied, and it gets nothing after. Nodes a and b then hold
/// both workers under load, on the primary only. The replica is promoted
/// on the same port (a new timeline, neither claim): node c, started at once,
/// would be handed worker 0 again and issue beside its holder. Now c waits
/// out the hold (lease TTL + mark window), a and b fence at their next
/// renewal and raise the floor, and whoever holds a worker next starts above
/// its old holder's marks.
fn postgres_fails_over_to_a_lagging_replica(ctx: &Ctx) -> Result<Outcome> {
    let coordinator = Registry::Postgres.coordinator(ctx)?;
    let config = forgetful_config(ctx, &coordinator);
    let mut z = Node::new(ctx, "z", &config, 3)?;
    z.start()?;
    z.wait_ready(Duration::from_secs(30))?;
    z.kill()?;
    std::thread::sleep(TTL + Duration::from_millis(500));
    coordinator.replicate()?;
    under_two_holders(
        ctx,
        &config,
        || coordinator.promote(),
        &Forgetting {
            what: "postgres fails over to a replica that lags (promoted without two nodes' \
                   claims and marks)",
            event: "failover",
        },
    )
}

/// The cluster of these scenarios on `coordinator`: two workers, a 3 s lease.
fn forgetful_config(ctx: &Ctx, coordinator: &Coordinator) -> ServeConfig {
    ServeConfig::new(coordinator.clone(), ctx.unique("forgets"))
        .with_layout(LAYOUT)
        .with_lease_ttl(TTL)
        // Past the hold (lease TTL + the 3 s window), a start waits a little
        // for a worker, then is refused: with two workers and three nodes,
        // one of them is left without.
        .with_snowflake("claim_wait", "\"10s\"")
}

/// Nodes a and b hold both workers under load; `forget` makes the
/// coordinator forget and node c starts at once. c must wait out the hold
/// (or be refused, with no worker left), nothing is issued twice, and each
/// worker's IDs increase across holders. Then c is SIGKILLed, and whoever of
/// a and b lost its worker claims it again once c's lease has run out.
fn under_two_holders(
    ctx: &Ctx,
    config: &ServeConfig,
    forget: impl FnOnce() -> Result<()>,
    how: &Forgetting,
) -> Result<Outcome> {
    let layout = config.layout()?;
    let mut nodes = vec![
        Node::new(ctx, "a", config, 0)?,
        Node::new(ctx, "b", config, 1)?,
    ];
    for node in &mut nodes {
        node.start()?;
        node.wait_ready(Duration::from_secs(30))?;
    }
    let batch = ctx.scale(50, 500);
    let load = Load::start(Vec::new(), LoadOptions::new());
    for node in &nodes {
        load.add_all(config.targets(node, batch)?);
    }
    load.wait_ok(None, ctx.scale(20, 200), WAIT)?;
    if ctx.mode == crate::harness::Mode::Full {
        load.wait_ids(FULL_IDS / 2, Duration::from_secs(300))?;
    }

    forget()?;
    let forgot = Instant::now();
    let mut c = Node::new(ctx, "c", config, 2)?;
    // Two workers, three nodes: after the hold one of them is left without
    // a worker, which for c is a refused start.
    let attempts = c.start_retrying(&["workers_exhausted"], TTL * 5)?;
    let c_serves = attempts.result.is_ok();
    let c_after = forgot.elapsed();
    let waited = c.log_says("waiting to claim a worker ID", Duration::ZERO);
    if c_serves {
        load.add_all(config.targets(&c, batch)?);
        load.wait_ok(Some("c"), ctx.scale(20, 200), WAIT)?;
        load.retire("c");
        c.kill()?;
    }
    load.wait_ok(None, ctx.scale(20, 200), WAIT)?;
    if ctx.mode == crate::harness::Mode::Full {
        load.wait_ids(FULL_IDS, Duration::from_secs(300))?;
    }
    let record = load.finish();

    let event = how.event;
    let mut out = Checker::new(format!(
        "{} under two nodes holding both workers, and a third starts at once: claims wait \
         for the lease and the mark window, holders fence at their next renewal, the next \
         holder of a worker starts above the old one's mark; no ID twice, each worker's IDs \
         increase across holders",
        how.what
    ))
    .check(&record);
    out.count_refusals(&attempts.retried);
    if let Err(refusal) = &attempts.result {
        out.count(&format!("start:{}", refusal.code), 1);
    }
    out.require(
        waited,
        format!(
            "node c did not wait for the hold after the {event} (its log has no \
             \"waiting to claim a worker ID\")"
        ),
    );
    // The hold is the lease plus the window: serving sooner means a claim
    // was granted while an old holder could still issue.
    out.require(
        !c_serves || c_after >= TTL,
        format!(
            "node c served {:.1}s after the {event}, before the old leases could end",
            c_after.as_secs_f64()
        ),
    );
    out.note(format!(
        "node c {} {:.1}s after the {event}; layout {} ({} workers)",
        if c_serves { "served" } else { "was refused" },
        c_after.as_secs_f64(),
        LAYOUT,
        layout.workers()
    ));
    Ok(out)
}
