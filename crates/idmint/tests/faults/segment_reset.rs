//! Stores that forget (issue 23): a segment store reset or restored from an
//! older backup under nodes that issued from it, and the Redis counter and
//! daily serial across a Redis restart.
//!
//! What must hold (docs/design.md §2, "Segment mode: when the store
//! forgets"): a node never issues an ID again. It serves what it leased,
//! then refuses while running (`503 key_below_floor`), refuses to start
//! (`store_reset`, `key_below_floor`) and creates nothing; once an operator
//! raises the key above every node's floor (`idmint segment raise`, with
//! each node's data directory), the nodes serve again above everything
//! issued. Typed refusals are counted; a duplicate fails the scenario.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use idmint_segment::redis::{
    DailySerial, DailySerialConfig, RedisConnection, RedisCounter, RedisCounterConfig,
};
use idmint_segment::{FloorRecord, SegmentError};
use jiff::Timestamp;

use crate::harness::load::Reply;
use crate::harness::{
    Checker, Ctx, Load, LoadOptions, Node, Outcome, Record, Registry, Scenario, ServeConfig,
    Skipped,
};

/// Four worker IDs (the snowflake key runs beside the segment key).
const LAYOUT: &str = "leaf,node=2";
/// The segment key.
const KEY: &str = "order";
/// The bound on each wait for load progress or an expected error.
const WAIT: Duration = Duration::from_secs(120);
/// The codes a node may answer while its store forgot, or while it is down.
const ALLOWED: &[&str] = &[
    "key_below_floor",
    "store_reset",
    "unavailable",
    "store_error",
    "store_timeout",
    "connect",
    "io",
    "timeout",
    // A restarting node answers its port while it starts (http/starting.rs).
    "not_ready",
];

/// The scenarios of stores that forget.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "segment-store-reset[redis]",
            run: redis_reset,
        },
        Scenario {
            name: "segment-store-restored[postgres]",
            run: postgres_restored,
        },
        Scenario {
            name: "counter-and-serial-reset[redis]",
            run: counter_and_serial_reset,
        },
    ]
}

/// IDs the scenario runs over: at least 10^6 in full mode.
fn total(ctx: &Ctx) -> u64 {
    ctx.scale(20_000, 1_000_000)
}

/// IDs per batch request.
fn batch(ctx: &Ctx) -> u64 {
    ctx.scale(100, 1000)
}

/// Two nodes on the `file` registry (the store's faults are the point, not
/// the registry's) with segment key `order` on `store` (table or prefix
/// `table`), its dynamic step capped so a node's buffers drain within a
/// phase.
fn config(ctx: &Ctx, store: String, table: String) -> Result<ServeConfig> {
    Ok(
        ServeConfig::new(Registry::File.coordinator(ctx)?, ctx.unique("c"))
            .with_layout(LAYOUT)
            .with_segment_store(store, table)
            .with_segment("max_step", &ctx.scale(1_000, 100_000).to_string())
            .with_segment_key(KEY, ctx.scale(100, 1000)),
    )
}

/// Starts `a` and `b` and adds their streams to a new load.
fn start_nodes(ctx: &Ctx, config: &ServeConfig) -> Result<(Vec<Node>, Load)> {
    let mut nodes = vec![
        Node::new(ctx, "a", config, 0)?,
        Node::new(ctx, "b", config, 1)?,
    ];
    let load = Load::start(Vec::new(), LoadOptions::new());
    for node in &mut nodes {
        node.start()?;
        node.wait_ready(Duration::from_secs(30))?;
        load.add_all(config.targets(node, batch(ctx))?);
    }
    Ok((nodes, load))
}

/// The number after `(floor ` in a refusal: the node's floor.
fn floor_in(message: &str) -> Option<u64> {
    let at = message.find("(floor ")? + "(floor ".len();
    message[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// SIGKILLs every node, then starts each again: each must refuse with one
/// of `codes`. Returns the codes and the highest floor they name.
fn restart_refused(nodes: &mut [Node], codes: &[&str]) -> Result<(Vec<String>, u64)> {
    for node in nodes.iter_mut() {
        node.kill()?;
    }
    let mut refused = Vec::new();
    let mut highest = 0;
    for node in nodes.iter_mut() {
        match node.try_start()? {
            Ok(()) => bail!("node {} started on a store that forgot", node.name()),
            Err(r) if codes.contains(&r.code.as_str()) => {
                let floor = floor_in(&r.message)
                    .ok_or_else(|| anyhow!("no floor named in {}'s refusal: {r}", node.name()))?;
                highest = highest.max(floor);
                refused.push(r.code);
            }
            Err(r) => bail!("node {}: {r}", node.name()),
        }
    }
    Ok((refused, highest))
}

/// `idmint segment raise KEY --above ABOVE` with `node`'s config and its
/// (stopped) data directory: the operator's fix.
fn raise(node: &Node, above: u64) -> Result<String> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idmint"));
    command
        .args([
            "segment",
            "raise",
            KEY,
            "--above",
            &above.to_string(),
            "--config",
        ])
        .arg(node.config_path())
        .arg("--data-dir")
        .arg(node.data_dir())
        .stdin(Stdio::null());
    for (name, _) in std::env::vars() {
        if name.starts_with("IDMINT_") {
            command.env_remove(name);
        }
    }
    let out = {
        let _fork = idmint_testkit::FORK_GUARD
            .write()
            .unwrap_or_else(|p| p.into_inner());
        command.output().context("running idmint segment raise")?
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "idmint segment raise for {} failed ({}): {}{stdout}",
            node.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

/// The segment IDs of `replies` that satisfy `keep`.
fn segment_ids<'a>(
    replies: impl IntoIterator<Item = &'a Reply>,
    keep: impl Fn(&Reply) -> bool,
) -> Vec<u64> {
    replies
        .into_iter()
        .filter(|r| r.key == KEY && keep(r))
        .filter_map(|r| r.result.as_ref().ok())
        .flatten()
        .copied()
        .collect()
}

/// Requires that nothing but [`ALLOWED`] codes came back, and that the
/// segment IDs requested after `resumed` are all above every segment ID
/// received before it.
fn require_after(out: &mut Outcome, record: &Record, resumed: Timestamp) {
    let unexpected: Vec<String> = out
        .errors_by_code
        .keys()
        .filter(|c| !ALLOWED.contains(&c.as_str()) && !c.starts_with("start:"))
        .cloned()
        .collect();
    out.require(
        unexpected.is_empty(),
        format!("unexpected error codes {unexpected:?}"),
    );
    let before = segment_ids(record.replies(), |r| r.received < resumed)
        .into_iter()
        .max();
    let after = segment_ids(record.replies(), |r| r.sent > resumed)
        .into_iter()
        .min();
    match (before, after) {
        (Some(b), Some(a)) => {
            out.require(a > b, format!("first ID {a} after the raise not above {b}"));
            out.note(format!(
                "last {KEY} ID before {b}, first after the raise {a}"
            ));
        }
        _ => out.require(false, format!("no IDs to compare: {before:?} / {after:?}")),
    }
}

/// Waits until both nodes answered `code` on the segment key.
fn wait_refused(load: &Load, code: &str) -> Result<()> {
    for node in ["a", "b"] {
        load.wait_error(Some(node), &[code], WAIT)
            .with_context(|| format!("{node} never refused while running"))?;
    }
    Ok(())
}

/// `segment-store-reset[redis]`: two nodes on a Redis segment store without
/// persistence (`scripts/redis`); Redis restarts empty under load. The nodes
/// refuse while running, refuse to start (`store_reset`: the epoch is gone),
/// and serve above their floors once the key is raised on each data
/// directory.
fn redis_reset(ctx: &Ctx) -> Result<Outcome> {
    let redis = Registry::Redis.coordinator(ctx)?;
    let config = config(ctx, redis.address.clone(), ctx.unique("seg"))?;
    let (mut nodes, load) = start_nodes(ctx, &config)?;
    load.wait_ids(total(ctx) / 2, WAIT)?;

    let reset_at = Timestamp::now();
    redis.restart()?;
    // The running nodes find the epoch marker gone at their next lease.
    let running = wait_refused(&load, "store_reset");
    let (refused, floor) = restart_refused(&mut nodes, &["store_reset"])?;
    let mut raised = Vec::new();
    for node in &nodes {
        raised.push(raise(node, floor - 1)?);
    }
    let resumed = Timestamp::now();
    for node in &mut nodes {
        node.start()?;
        node.wait_ready(Duration::from_secs(30))?;
    }
    load.wait_ids(total(ctx), WAIT * 4)?;
    load.wait_ok(None, 5, WAIT)?;
    let record = load.finish();

    let mut out = Checker::new(
        "Redis (no persistence) restarted empty under a segment key: the nodes serve what \
         they leased, then 503 store_reset (the epoch marker is gone); restarted, they refuse \
         (store_reset) and create \
         nothing; after idmint segment raise on each data directory they serve above every ID \
         issued",
    )
    .check(&record);
    out.require_ok(&running, "refused while running");
    out.count_refusals(&refused);
    out.require(
        raised
            .iter()
            .all(|r| r.contains("adopted the store's epoch")),
        format!("the nodes did not adopt the new epoch: {raised:?}"),
    );
    require_after(&mut out, &record, resumed);
    out.note(format!(
        "Redis restarted at {reset_at}; highest floor {floor}"
    ));
    Ok(out)
}

/// The table's data as `pg_dump` writes it, and the `max_id` of the key in it.
fn pg_dump(url: &str, table: &str) -> Result<(String, u64)> {
    let out = Command::new("pg_dump")
        .arg(format!("--dbname={url}"))
        .args(["--data-only", "--column-inserts", "--table"])
        .arg(format!("public.{table}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Skipped(format!("pg_dump does not run: {e}")))?;
    if !out.status.success() {
        bail!("pg_dump failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let dump = String::from_utf8(out.stdout).context("pg_dump wrote non-UTF-8")?;
    let pattern = format!("('{KEY}', ");
    let at = dump
        .find(&pattern)
        .ok_or_else(|| anyhow!("no row of {KEY} in the dump"))?
        + pattern.len();
    let max_id = dump[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| anyhow!("no max_id after {pattern} in the dump"))?;
    Ok((dump, max_id))
}

/// Replaces the table's rows with the dump's, in one transaction (`psql`).
fn pg_restore(url: &str, table: &str, dump: &str) -> Result<()> {
    let mut child = Command::new("psql")
        .arg(url)
        .args([
            "-v",
            "ON_ERROR_STOP=1",
            "--single-transaction",
            "-q",
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Skipped(format!("psql does not run: {e}")))?;
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        writeln!(stdin, "TRUNCATE public.{table};")?;
        stdin.write_all(dump.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("psql failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// `segment-store-restored[postgres]`: two nodes on a PostgreSQL segment
/// table; `pg_dump` of the table, then both nodes lease past the dump, then
/// the dump is restored over the table. The nodes refuse while running and
/// at start (`key_below_floor`: their floors are above the restored
/// `max_id`), and serve above every ID once the key is raised.
fn postgres_restored(ctx: &Ctx) -> Result<Outcome> {
    let url = ctx.shared_postgres()?;
    let table = ctx.unique("alloc");
    let config = config(ctx, url.clone(), table.clone())?;
    let (mut nodes, load) = start_nodes(ctx, &config)?;
    load.wait_ids(total(ctx) / 3, WAIT)?;

    let (dump, dumped) = pg_dump(&url, &table)?;
    // The last segments: each node leases past the dump (an ID at or above
    // the dumped max_id comes from a segment leased after it).
    let started = Instant::now();
    loop {
        let snapshot = load.snapshot();
        let past = ["a", "b"].iter().all(|n| {
            segment_ids(&snapshot, |r| r.node.name() == *n)
                .into_iter()
                .any(|id| id >= dumped)
        });
        if past && load.ids_received() >= 2 * total(ctx) / 3 {
            break;
        }
        if started.elapsed() > WAIT {
            bail!("the nodes did not both lease past the dump (max_id {dumped})");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let restored_at = Timestamp::now();
    pg_restore(&url, &table, &dump)?;
    let running = wait_refused(&load, "key_below_floor");
    let (refused, floor) = restart_refused(&mut nodes, &["key_below_floor"])?;
    for node in &nodes {
        raise(node, floor - 1)?;
    }
    let resumed = Timestamp::now();
    for node in &mut nodes {
        node.start()?;
        node.wait_ready(Duration::from_secs(30))?;
    }
    load.wait_ids(total(ctx), WAIT * 4)?;
    load.wait_ok(None, 5, WAIT)?;
    let record = load.finish();

    let mut out = Checker::new(
        "a PostgreSQL segment table restored from a pg_dump taken before both nodes' last \
         leases: the nodes refuse while running (503 key_below_floor) and at start, the table \
         left as restored; after idmint segment raise on each data directory they serve above \
         every ID issued",
    )
    .check(&record);
    out.require_ok(&running, "refused while running");
    out.count_refusals(&refused);
    require_after(&mut out, &record, resumed);
    out.note(format!(
        "dumped max_id {dumped}, restored at {restored_at}; highest floor {floor}"
    ));
    Ok(out)
}

/// What the in-process scenario records: the counter's IDs per node, the
/// serials, and the failures by code.
#[derive(Default)]
struct Issued {
    ids: Vec<Vec<u64>>,
    serials: Vec<String>,
    errors: BTreeMap<String, u64>,
}

impl Issued {
    fn count(&self) -> u64 {
        self.ids.iter().map(|v| v.len() as u64).sum::<u64>() + self.serials.len() as u64
    }

    fn fail(&mut self, error: &SegmentError) {
        *self.errors.entry(error.code().to_owned()).or_default() += 1;
    }
}

/// The two counter nodes and two serial processes of the in-process
/// scenario, on `conn` under `prefix`.
struct Strategies {
    counters: Vec<RedisCounter>,
    serials: Vec<DailySerial>,
}

impl Strategies {
    fn new(
        conn: &RedisConnection,
        prefix: &str,
        memory: Option<(Vec<FloorRecord>, Vec<idmint_segment::redis::SerialMemory>)>,
    ) -> Result<Strategies> {
        let (counter_memory, serial_memory) = memory.unwrap_or_default();
        let mut counters = Vec::new();
        for node in 0..2u32 {
            let config = RedisCounterConfig::new(node, 2).with_key_prefix(prefix);
            let counter = RedisCounter::new(conn.clone(), config)?;
            counters.push(match counter_memory.get(node as usize) {
                Some(m) => counter.with_memory(m.clone()),
                None => counter,
            });
        }
        let mut serials = Vec::new();
        for process in 0..2usize {
            let config = DailySerialConfig::new(12).with_key_prefix(prefix);
            let serial = DailySerial::new(conn.clone(), config)?;
            serials.push(match serial_memory.get(process) {
                Some(m) => serial.with_memory(m.clone()),
                None => serial,
            });
        }
        Ok(Strategies { counters, serials })
    }

    fn memory(&self) -> (Vec<FloorRecord>, Vec<idmint_segment::redis::SerialMemory>) {
        (
            self.counters.iter().map(RedisCounter::memory).collect(),
            self.serials.iter().map(DailySerial::memory).collect(),
        )
    }

    /// One round: a batch from each counter and each serial.
    async fn round(&self, n: u64, issued: &mut Issued) {
        for (node, counter) in self.counters.iter().enumerate() {
            match counter.next_ids(KEY, n).await {
                Ok(run) => issued.ids[node].extend(run.iter().map(|id| id.get())),
                Err(e) => issued.fail(&e),
            }
        }
        for serial in &self.serials {
            match serial.next_batch(KEY, n).await {
                Ok(batch) => issued.serials.extend(batch.iter().map(|s| s.into_string())),
                Err(e) => issued.fail(&e),
            }
        }
    }

    /// Calls each counter and serial until it refuses with `code` (past the
    /// transient failures of a Redis coming back), within [`WAIT`].
    async fn until_refused(&self, code: &str, issued: &mut Issued) -> Result<()> {
        let deadline = Instant::now() + WAIT;
        for (node, counter) in self.counters.iter().enumerate() {
            loop {
                match counter.next_id(KEY).await {
                    Ok(id) => issued.ids[node].push(id.get()),
                    Err(e) if e.code() == code => break issued.fail(&e),
                    Err(e) if e.is_transient() => issued.fail(&e),
                    Err(e) => bail!("counter {node}: {e}"),
                }
                if Instant::now() > deadline {
                    bail!("counter {node} never refused with {code}");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        for (process, serial) in self.serials.iter().enumerate() {
            loop {
                match serial.next(KEY).await {
                    Ok(s) => issued.serials.push(s.into_string()),
                    Err(e) if e.code() == code => break issued.fail(&e),
                    Err(e) if e.is_transient() => issued.fail(&e),
                    Err(e) => bail!("serial {process}: {e}"),
                }
                if Instant::now() > deadline {
                    bail!("serial {process} never refused with {code}");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }
}

/// Duplicates in `values` (each extra sighting counts).
fn duplicates<T: Ord + Clone>(values: &[T]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).filter(|w| w[0] == w[1]).count() as u64
}

/// `counter-and-serial-reset[redis]`, through the library in process (the
/// server does not serve these strategies): two counter nodes (`node i of
/// 2`) and two processes of daily serials on one key, Redis restarted empty
/// under them. Each refuses (`store_reset`), in the process and in a
/// restarted one handed its memory; after `raise` they carry on, never
/// repeating a counter ID or a serial.
fn counter_and_serial_reset(ctx: &Ctx) -> Result<Outcome> {
    let redis = Registry::Redis.coordinator(ctx)?;
    let prefix = format!("{}:", ctx.unique("strategies"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let n = batch(ctx);
    let conn = runtime.block_on(RedisConnection::connect(
        &redis.address,
        Duration::from_secs(2),
    ))?;
    let first = Strategies::new(&conn, &prefix, None)?;
    let mut issued = Issued {
        ids: vec![Vec::new(), Vec::new()],
        ..Issued::default()
    };
    runtime.block_on(async {
        while issued.count() < total(ctx) / 2 {
            first.round(n, &mut issued).await;
        }
    });

    redis.restart()?;
    let mut restarts = 0;
    let outcome = runtime.block_on(async {
        first.until_refused("store_reset", &mut issued).await?;
        // The process restarted, handed what it remembered: still refused.
        let second = Strategies::new(&conn, &prefix, Some(first.memory()))?;
        second.until_refused("store_reset", &mut issued).await?;
        restarts += 1;
        // The way back: each raises above what it (and, for the shared
        // serial key, every process) handed out.
        for counter in &second.counters {
            counter.raise(KEY, 0).await?;
        }
        let (_, serial_memory) = second.memory();
        let last = serial_memory
            .iter()
            .filter_map(|m| m.last.get(KEY).copied())
            .max()
            .ok_or_else(|| anyhow!("no serial was remembered"))?;
        for serial in &second.serials {
            serial.raise(KEY, last.0, last.1).await?;
        }
        while issued.count() < total(ctx) {
            second.round(n, &mut issued).await;
        }
        anyhow::Ok(())
    });
    outcome?;

    let mut out = Outcome {
        expected: "the Redis counter (two nodes) and a daily serial (two processes) across a \
                   Redis restart without persistence, in process: each refuses (store_reset), \
                   also restarted with its memory; after raise they carry on without repeating"
            .to_owned(),
        ..Outcome::default()
    };
    out.ids_checked = issued.count();
    let all_ids: Vec<u64> = issued.ids.iter().flatten().copied().collect();
    out.duplicates = duplicates(&all_ids) + duplicates(&issued.serials);
    out.monotonic_violations = issued
        .ids
        .iter()
        .map(|ids| ids.windows(2).filter(|w| w[1] <= w[0]).count() as u64)
        .sum();
    for (code, n) in &issued.errors {
        out.count(code, *n);
    }
    out.count("restart:store_reset", restarts);
    out.require(
        issued.errors.get("store_reset").copied().unwrap_or(0) >= 8,
        "every counter and serial refused, before and after the restart",
    );
    out.note(format!(
        "{} counter IDs, {} serials",
        all_ids.len(),
        issued.serials.len()
    ));
    Ok(out)
}
