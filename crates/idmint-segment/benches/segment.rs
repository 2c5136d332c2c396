//! In-process segment-mode benchmarks, as ratios against a bare
//! `AtomicU64::fetch_add` measured in the same run.
//!
//! `cargo bench -p idmint-segment --bench segment` prints the Markdown table in
//! BENCHMARKS.md. Every figure is the median of `IDMINT_BENCH_RUNS` runs
//! (default 7). The store is the in-memory one so that the figures are the
//! allocator's own; a lease from a real database costs a query per segment,
//! which the preloader keeps off the callers' path.
//!
//! A custom harness for the same reason as idmint-core's: ratios between
//! measurements of one run, and latency percentiles over a stream of calls
//! that crosses segment switches, which criterion doesn't give.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use idmint_core::Layout;
use idmint_core::{IdBatch, IdRun, SegmentBuffer, TakeOne};
use idmint_segment::redis::{
    DailySerial, DailySerialConfig, RedisCounter, RedisCounterConfig, RedisSegmentStore,
    RedisSnowflake, RedisSnowflakeConfig, RedisStoreConfig,
};
use idmint_segment::{MemoryStore, NewKey, SegmentAllocator, SegmentConfig, SegmentKey};
use idmint_testkit::bench::{
    Row, cost, fetch_add_ns, fetch_add_row, median, per_call_ns, print_table, runs, together,
};

const REDIS_URL: &str = "redis://127.0.0.1:6379/";

/// A runtime for the preloader, an allocator with one key of `step`, and a
/// handle on the key.
fn allocator(step: u64) -> (tokio::runtime::Runtime, SegmentKey, impl Drop) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (key, guard) = rt.block_on(async {
        let allocator =
            SegmentAllocator::new(MemoryStore::new(), SegmentConfig::new().with_max_step(step))
                .unwrap();
        allocator
            .create_key(NewKey::new("bench", step))
            .await
            .unwrap();
        let guard = allocator.spawn_preloader();
        (allocator.key("bench").await.unwrap(), guard)
    });
    (rt, key, guard)
}

/// A current-thread runtime per calling thread (the allocator's hot path is
/// synchronous inside `next_id`; the runtime only serves the rare slow path).
fn caller_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Nanoseconds per `SegmentKey::next_id` on `threads` threads.
fn allocator_cost(threads: usize, per_thread: u64, step: u64) -> f64 {
    let (_rt, key, _guard) = allocator(step);
    let took = together(threads, || {
        let key = key.clone();
        let rt = caller_runtime();
        move || {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..per_thread {
                    black_box(key.next_id().await.unwrap());
                }
                start.elapsed()
            })
        }
    });
    per_call_ns(took.into_iter().max().unwrap(), per_thread * threads as u64)
}

/// Latencies (ns) of single `next_id` calls on one thread, over `calls` calls
/// with segments of `step`: the overall p50 and p99.9, and the medians of the
/// calls that switched to a new segment and of those that crossed a
/// segment's preload point (where the preloader's watch sees that the next
/// segment is due; the caller only rings it if it is parked). One thread from a
/// fresh key issues 1, 2, 3, …, so a call's ID tells which it was.
fn latencies(calls: usize, step: u64) -> [f64; 4] {
    let (_rt, key, _guard) = allocator(step);
    let rt = caller_runtime();
    let mut took = Vec::with_capacity(calls);
    let (mut switches, mut preloads) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..calls {
            let start = Instant::now();
            let id = black_box(key.next_id().await.unwrap()).get();
            let ns = start.elapsed().as_nanos() as f64;
            took.push(ns);
            match (id - 1) % step {
                0 if id > 1 => switches.push(ns),
                // 10% of the segment used (the default preload share).
                at if at == step / 10 => preloads.push(ns),
                _ => {}
            }
            if took.len() % 1000 == 0 {
                // Lets the preloader (on its own thread) run as it would
                // between requests.
                tokio::task::yield_now().await;
            }
        }
    });
    took.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| took[((took.len() as f64 - 1.0) * q) as usize];
    let mid = |v: Vec<f64>| if v.is_empty() { f64::NAN } else { median(v) };
    [at(0.5), at(0.999), mid(switches), mid(preloads)]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` expects a smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs = if quick { 1 } else { runs() };
    let n: u64 = if quick { 100_000 } else { 4_000_000 };
    let mut rows = Vec::new();

    for threads in [1usize, 2] {
        let base = fetch_add_ns(threads, n, runs);
        rows.push(fetch_add_row(threads, base));

        let buffer_ns = median(
            (0..runs)
                .map(|_| {
                    let buffer = Arc::new(SegmentBuffer::new(0.1));
                    let end = n * threads as u64 + 2;
                    buffer
                        .install(IdRun::from_range(1, end, 1, 0).unwrap())
                        .unwrap();
                    cost(threads, n, || {
                        let buffer = buffer.clone();
                        move || match buffer.take_one() {
                            TakeOne::Id { id, .. } => id.get(),
                            other => panic!("{other:?}"),
                        }
                    })
                })
                .collect(),
        );
        rows.push(Row {
            what: format!("`SegmentBuffer::take_one` (core, no I/O), {threads} thread(s)"),
            figure: format!("{buffer_ns:.1} ns/ID"),
            ratio: format!("{:.2}×", buffer_ns / base),
        });

        for step in [1_000_000u64, 10_000] {
            let ns = median(
                (0..runs)
                    .map(|_| allocator_cost(threads, n, step))
                    .collect(),
            );
            rows.push(Row {
                what: format!(
                    "`SegmentKey::next_id`, step {step} ({} switches), preloader on, {threads} thread(s)",
                    n * threads as u64 / step
                ),
                figure: format!("{ns:.1} ns/ID"),
                ratio: format!("{:.2}×", ns / base),
            });
        }
    }

    let calls = if quick { 100_000 } else { 2_000_000 };
    for step in [1_000_000u64, 1_000] {
        let samples: Vec<[f64; 4]> = (0..runs).map(|_| latencies(calls, step)).collect();
        let [p50, p999, switch, preload] =
            [0, 1, 2, 3].map(|i| median(samples.iter().map(|s| s[i]).collect()));
        rows.push(Row {
            what: format!(
                "single-call latency, step {step} ({} switches in {calls} calls), 1 thread",
                calls as u64 / step
            ),
            figure: format!(
                "p50 {p50:.0} ns, p99.9 {p999:.0} ns; switch calls {switch:.0} ns, \
                 preload-point calls {preload:.0} ns (medians)"
            ),
            ratio: "—".into(),
        });
    }

    let batch_us = median(
        (0..runs)
            .map(|_| {
                let (_rt, key, _guard) = allocator(1_000);
                let rt = caller_runtime();
                rt.block_on(async {
                    key.next_id().await.unwrap();
                    let start = Instant::now();
                    let batch: IdBatch = key.next_ids(100_000).await.unwrap();
                    let took = start.elapsed();
                    assert_eq!(batch.len(), 100_000);
                    took.as_secs_f64() * 1e6
                })
            })
            .collect(),
    );
    rows.push(Row {
        what: "`next_ids(100_000)`, step 1000 (one lease sized for the batch)".into(),
        figure: format!("{batch_us:.1} µs"),
        ratio: format!("{:.2} of the 100 µs target", batch_us / 100.0),
    });

    redis_rows(quick, runs, &mut rows);

    print_table(["measurement", "figure", "ratio"], &rows);
}

/// Microseconds per call of `call`, `n` sequential calls on one connection.
async fn per_call_us<F, Fut>(n: u32, mut call: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    for _ in 0..n {
        call().await;
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

/// The Redis strategies, one client calling in sequence, against a bare
/// `INCR` on the same Redis in the same run. Skipped (with a line saying so)
/// when Redis is not there.
fn redis_rows(quick: bool, runs: usize, rows: &mut Vec<Row>) {
    let rt = caller_runtime();
    let n = if quick { 200 } else { 20_000 };
    let prefix = format!("idmint-bench:{:016x}:", fastrand::u64(..));
    let result: Result<(), String> = rt.block_on(async {
        let client = redis::Client::open(REDIS_URL).map_err(|e| e.to_string())?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let counter = RedisCounter::connect(
            REDIS_URL,
            RedisCounterConfig::new(0, 1).with_key_prefix(prefix.clone()),
        )
        .await
        .map_err(|e| e.to_string())?;
        let snowflake = RedisSnowflake::connect(
            REDIS_URL,
            RedisSnowflakeConfig::new(Layout::TWITTER, 1).with_key_prefix(prefix.clone()),
        )
        .await
        .map_err(|e| e.to_string())?;
        let serial = DailySerial::connect(
            REDIS_URL,
            DailySerialConfig::new(10).with_key_prefix(prefix.clone()),
        )
        .await
        .map_err(|e| e.to_string())?;
        let store = RedisSegmentStore::connect(
            REDIS_URL,
            RedisStoreConfig::new().with_key_prefix(prefix.clone()),
        )
        .await
        .map_err(|e| e.to_string())?;
        let allocator = SegmentAllocator::new(store, SegmentConfig::new()).unwrap();
        allocator
            .create_key(NewKey::new("bench", 10_000))
            .await
            .unwrap();
        let _preloader = allocator.spawn_preloader();
        let key = allocator.key("bench").await.unwrap();
        let incr_key = format!("{prefix}raw-incr");

        let mut samples: Vec<[f64; 5]> = Vec::new();
        for _ in 0..runs {
            let incr = per_call_us(n, || {
                let mut conn = conn.clone();
                let incr_key = incr_key.clone();
                async move {
                    let _: u64 = redis::cmd("INCR")
                        .arg(&incr_key)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
            })
            .await;
            let counter_us = per_call_us(n, || async {
                black_box(counter.next_id("bench").await.unwrap());
            })
            .await;
            let snowflake_us = per_call_us(n, || async {
                black_box(snowflake.next_id().await.unwrap());
            })
            .await;
            let serial_us = per_call_us(n, || async {
                black_box(serial.next("bench").await.unwrap());
            })
            .await;
            let segment_us = per_call_us(n, || async {
                black_box(key.next_id().await.unwrap());
            })
            .await;
            samples.push([incr, counter_us, snowflake_us, serial_us, segment_us]);
        }
        let [incr, counter_us, snowflake_us, serial_us, segment_us] =
            [0, 1, 2, 3, 4].map(|i| median(samples.iter().map(|s| s[i]).collect()));
        rows.push(Row {
            what: "Redis `INCR`, one client in sequence (baseline)".into(),
            figure: format!("{incr:.1} µs/call"),
            ratio: "1.00×".into(),
        });
        for (what, us) in [
            ("`RedisCounter::next_id` (one `INCRBY` script)", counter_us),
            (
                "`RedisSnowflake::next_id` (one Lua script: `TIME`, `INCR`, compose)",
                snowflake_us,
            ),
            ("`DailySerial::next` (one Lua script)", serial_us),
            (
                "`SegmentKey::next_id` over the Redis segment store, step 10,000",
                segment_us,
            ),
        ] {
            rows.push(Row {
                what: what.into(),
                figure: format!("{us:.2} µs/call"),
                ratio: format!("{:.2}×", us / incr),
            });
        }
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL")
                .arg(keys)
                .query_async(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    if let Err(why) = result {
        eprintln!("SKIPPED: the Redis rows ({REDIS_URL} not reachable: {why})");
    }
}
