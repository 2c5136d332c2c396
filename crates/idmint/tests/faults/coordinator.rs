//! Coordinator faults: the worker registry's (and segment store's) service
//! stopped and restarted under running nodes, and one node cut off from its
//! coordinator by a proxy while its clients keep calling.
//!
//! What must hold (docs/design.md §1.6, §2 "Segment mode"): a node serves while it
//! is safe (snowflake IDs within the lease and the persisted mark, segment IDs
//! from the buffers it holds), then answers a typed 503 (`mark_reached` for
//! snowflake keys, `unavailable` for segment keys), and serves again on its
//! own once the service is back; no ID is ever issued twice.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use idmint_testkit::proxy::CutProxy;
use jiff::Timestamp;

use crate::harness::{
    Checker, Coordinator, Ctx, Load, LoadOptions, Node, Outcome, Record, Registry, Scenario,
    ServeConfig,
};

/// Four worker IDs: room for every node, so no scenario here waits on a takeover.
const LAYOUT: &str = "leaf,node=2";
/// The registries' lease TTL (and ZooKeeper's session timeout).
const TTL: Duration = Duration::from_secs(3);
/// The bound on each wait for load progress or an expected error.
const WAIT: Duration = Duration::from_secs(60);
/// The codes a node may answer while its coordinator is away.
const OUTAGE_CODES: &[&str] = &[
    "mark_reached",
    "unavailable",
    "store_timeout",
    "store_error",
];

/// The coordinator-fault scenarios.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "coordinator-restart[etcd]",
            run: |ctx| coordinator_restart(ctx, Registry::Etcd),
        },
        Scenario {
            name: "coordinator-restart[zookeeper]",
            run: |ctx| coordinator_restart(ctx, Registry::ZooKeeper),
        },
        Scenario {
            name: "coordinator-restart[redis]",
            run: |ctx| coordinator_restart(ctx, Registry::Redis),
        },
        Scenario {
            name: "coordinator-restart[postgres]",
            run: |ctx| coordinator_restart(ctx, Registry::Postgres),
        },
        Scenario {
            name: "coordinator-restart[mariadb]",
            run: |ctx| coordinator_restart(ctx, Registry::MariaDb),
        },
        Scenario {
            name: "cut-off[etcd]",
            run: |ctx| cut_off(ctx, Registry::Etcd),
        },
        Scenario {
            name: "cut-off[zookeeper]",
            run: |ctx| cut_off(ctx, Registry::ZooKeeper),
        },
        Scenario {
            name: "cut-off[redis]",
            run: |ctx| cut_off(ctx, Registry::Redis),
        },
        Scenario {
            name: "cut-off[postgres]",
            run: |ctx| cut_off(ctx, Registry::Postgres),
        },
    ]
}

/// Whether the service also holds the segment store (SQL and Redis do).
fn stores_segments(registry: Registry) -> bool {
    matches!(
        registry,
        Registry::Postgres | Registry::MariaDb | Registry::Redis
    )
}

/// Nodes on `coordinator`; the segment store on it too when it can hold one
/// (else on the machine's PostgreSQL), with a small step so buffers run dry
/// within an outage.
fn config(ctx: &Ctx, coordinator: &Coordinator) -> Result<ServeConfig> {
    let store = if stores_segments(coordinator.registry) {
        coordinator.address.clone()
    } else {
        ctx.shared_postgres()?
    };
    Ok(ServeConfig::new(coordinator.clone(), ctx.unique("c"))
        .with_layout(LAYOUT)
        .with_lease_ttl(TTL)
        .with_segment_store(store, ctx.unique("alloc"))
        .with_segment_key("order", ctx.scale(100, 1000)))
}

fn phase(ctx: &Ctx) -> u64 {
    ctx.scale(20, 600)
}

fn batch(ctx: &Ctx) -> u64 {
    ctx.scale(20, 200)
}

/// How long the service stays away.
fn outage(ctx: &Ctx) -> Duration {
    ctx.scale(Duration::from_secs(5), Duration::from_secs(20))
}

/// Starts each node and waits until it is ready.
fn start(nodes: &mut [Node]) -> Result<()> {
    for node in nodes.iter_mut() {
        node.start()?;
        node.wait_ready(Duration::from_secs(30))?;
    }
    Ok(())
}

/// Stops a private Redis with `SHUTDOWN SAVE`, as a Redis with persistence
/// would keep its data over a restart (`scripts/redis` runs it with
/// persistence off and reloads the saved file at start). idmint's Redis
/// registry and store say they need a persistent Redis; a Redis that forgets
/// leases and marks is outside the promise.
pub(crate) fn shutdown_redis_saving(coordinator: &Coordinator) -> Result<()> {
    let addr = coordinator
        .host_port()
        .ok_or_else(|| anyhow!("no address in {}", coordinator.address))?;
    let mut stream = TcpStream::connect(&addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(b"SHUTDOWN SAVE\r\n")?;
    // Redis closes the connection once it has saved and is exiting.
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    if rest.starts_with(b"-") {
        return Err(anyhow!(
            "SHUTDOWN SAVE failed: {}",
            String::from_utf8_lossy(&rest).trim()
        ));
    }
    Ok(())
}

/// Requires that nothing but outage codes (and transport failures of a
/// connection the node dropped) came back.
fn require_outage_codes(out: &mut Outcome) {
    let unexpected: Vec<String> = out
        .errors_by_code
        .keys()
        .filter(|c| !OUTAGE_CODES.contains(&c.as_str()) && !c.starts_with("start:"))
        .cloned()
        .collect();
    out.require(
        unexpected.is_empty(),
        format!("unexpected error codes {unexpected:?}"),
    );
}

/// Snowflake IDs from `nodes` in replies sent within `from..to`: what a node
/// handed out when it could not have held a lease.
fn snowflake_ids_sent_within(
    record: &Record,
    nodes: &[&str],
    from: Timestamp,
    to: Timestamp,
) -> u64 {
    nodes
        .iter()
        .map(|n| {
            record
                .snowflake_ids_of(n)
                .filter(|(_, r)| r.sent > from && r.sent < to)
                .count() as u64
        })
        .sum()
}

/// After `at`, plus the lease TTL and a second of slack, no lease could still
/// be held.
fn lease_surely_gone(at: Timestamp) -> Timestamp {
    at + jiff::SignedDuration::try_from(TTL + Duration::from_secs(1)).unwrap_or_default()
}

/// `coordinator-restart[<service>]`: two nodes under load; the service
/// holding their worker registry (and, for SQL and Redis, their segment
/// store) is stopped for a while and started again.
fn coordinator_restart(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let coordinator = registry.coordinator(ctx)?;
    let config = config(ctx, &coordinator)?;
    let mut nodes = vec![
        Node::new(ctx, "a", &config, 0)?,
        Node::new(ctx, "b", &config, 1)?,
    ];
    start(&mut nodes)?;
    let load = Load::start(Vec::new(), LoadOptions::new());
    for node in &nodes {
        load.add_all(config.targets(node, batch(ctx))?);
    }
    load.wait_ok(None, phase(ctx), WAIT)?;

    let down = Instant::now();
    let stopped_at = Timestamp::now();
    if registry == Registry::Redis {
        shutdown_redis_saving(&coordinator)?;
    } else {
        coordinator.stop()?;
    }
    let snowflake_refused = load.wait_error(None, &["mark_reached"], WAIT);
    let segment_refused = if stores_segments(registry) {
        Some(load.wait_error(None, &["unavailable", "store_timeout", "store_error"], WAIT))
    } else {
        None
    };
    // The outage lasts its planned time (a fault's length, not a wait for readiness).
    std::thread::sleep(outage(ctx).saturating_sub(down.elapsed()));
    let restarting_at = Timestamp::now();
    coordinator.restart()?;
    let restarted = Instant::now();
    // Every stream serves again.
    load.wait_ok(None, phase(ctx), WAIT)?;
    let recovered = restarted.elapsed();
    let record = load.finish();

    let what = if stores_segments(registry) {
        "worker registry and segment store"
    } else {
        "worker registry (segment store elsewhere)"
    };
    let persistence = if registry == Registry::Redis {
        " (Redis stopped with SHUTDOWN SAVE: a persistent Redis)"
    } else {
        ""
    };
    let mut out = Checker::new(format!(
        "{} as {what}{persistence} down {}s: snowflake IDs while the lease lasts, then 503 \
         mark_reached; segment IDs from the buffers{}; both resume on restart",
        registry.name(),
        outage(ctx).as_secs(),
        if stores_segments(registry) {
            ", then 503 unavailable"
        } else {
            " and the store"
        }
    ))
    .check(&record);
    out.require_ok(&snowflake_refused, "snowflake");
    if let Some(refused) = &segment_refused {
        out.require_ok(refused, "segments");
    }
    require_outage_codes(&mut out);
    let issued_without_lease = snowflake_ids_sent_within(
        &record,
        &["a", "b"],
        lease_surely_gone(stopped_at),
        restarting_at,
    );
    out.require(
        issued_without_lease == 0,
        format!(
            "{issued_without_lease} snowflake IDs issued with the registry down past the lease"
        ),
    );
    out.note(format!(
        "every stream served again {:.1}s after the restart",
        recovered.as_secs_f64()
    ));
    Ok(out)
}

/// Whether a cut drops packets silently (a partition: the node finds out by
/// its own timeouts) or resets every connection (the node finds out at once).
/// etcd and PostgreSQL are partitioned, ZooKeeper and Redis reset.
fn silent_cut(registry: Registry) -> bool {
    matches!(
        registry,
        Registry::Etcd | Registry::Postgres | Registry::MariaDb
    )
}

/// `cut-off[<service>]`: node `a` reaches its coordinator (and, for SQL and
/// Redis, its segment store) through a proxy, node `b` directly; the proxy
/// cuts `a` off ([`silent_cut`]) while clients keep calling both, then
/// forwards again.
fn cut_off(ctx: &Ctx, registry: Registry) -> Result<Outcome> {
    let coordinator = registry.coordinator(ctx)?;
    let upstream = coordinator
        .host_port()
        .ok_or_else(|| anyhow!("no address in {}", coordinator.address))?;
    let proxy = CutProxy::start(&upstream)?;
    let config = config(ctx, &coordinator)?;
    let mut nodes = vec![
        Node::new(ctx, "a", &config.via(&proxy.addr().to_string()), 0)?,
        Node::new(ctx, "b", &config, 1)?,
    ];
    start(&mut nodes)?;
    let load = Load::start(Vec::new(), LoadOptions::new());
    for node in &nodes {
        load.add_all(config.targets(node, batch(ctx))?);
    }
    load.wait_ok(None, phase(ctx), WAIT)?;

    let cut = Instant::now();
    let cut_at = Timestamp::now();
    if silent_cut(registry) {
        proxy.blackhole();
    } else {
        proxy.cut();
    }
    let snowflake_refused = load.wait_error(Some("a"), &["mark_reached"], WAIT);
    let served_until = cut.elapsed();
    let segment_refused = if stores_segments(registry) {
        Some(load.wait_error(
            Some("a"),
            &["unavailable", "store_timeout", "store_error"],
            WAIT,
        ))
    } else {
        None
    };
    // b, on the same coordinator directly, serves all along.
    let b_served = load.wait_ok(Some("b"), phase(ctx), WAIT);
    std::thread::sleep(outage(ctx).saturating_sub(cut.elapsed()));
    let healing_at = Timestamp::now();
    proxy.restore();
    let healed = Instant::now();
    load.wait_ok(Some("a"), phase(ctx), WAIT)?;
    let recovered = healed.elapsed();
    let record = load.finish();

    let mut out = Checker::new(format!(
        "one node cut off from {} for {}s ({}): it serves snowflake IDs while its lease lasts, \
         then 503 mark_reached{}; the other node serves throughout; healed, it serves again",
        registry.name(),
        outage(ctx).as_secs(),
        if silent_cut(registry) {
            "packets dropped"
        } else {
            "connections reset"
        },
        if stores_segments(registry) {
            ", and segment IDs from its buffers, then 503 unavailable"
        } else {
            ""
        }
    ))
    .check(&record);
    out.require_ok(&snowflake_refused, "snowflake");
    if let Some(refused) = &segment_refused {
        out.require_ok(refused, "segments");
    }
    out.require_ok(&b_served, "b during the cut");
    require_outage_codes(&mut out);
    let issued_without_lease =
        snowflake_ids_sent_within(&record, &["a"], lease_surely_gone(cut_at), healing_at);
    out.require(
        issued_without_lease == 0,
        format!("a issued {issued_without_lease} snowflake IDs cut off past its lease"),
    );
    out.note(format!(
        "a served snowflake IDs {:.1}s into the cut; served again {:.1}s after healing",
        served_until.as_secs_f64(),
        recovered.as_secs_f64()
    ));
    Ok(out)
}
