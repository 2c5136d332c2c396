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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use idmint_core::{IdBatch, Segment, SegmentBuffer, TakeOne};
use idmint_segment::{MemoryStore, NewKey, SegmentAllocator, SegmentConfig, SegmentKey};

fn runs() -> usize {
    std::env::var("IDMINT_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Nanoseconds per call of `f` on `threads` threads, `per_thread` calls each.
fn cost<F>(threads: usize, per_thread: u64, make: impl Fn() -> F) -> f64
where
    F: FnMut() -> u64 + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let mut f = make();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let start = Instant::now();
                for _ in 0..per_thread {
                    black_box(f());
                }
                start.elapsed()
            })
        })
        .collect();
    barrier.wait();
    let took = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap();
    took.as_nanos() as f64 / (per_thread * threads as u64) as f64
}

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
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let key = key.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let rt = caller_runtime();
                barrier.wait();
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..per_thread {
                        black_box(key.next_id().await.unwrap());
                    }
                    start.elapsed()
                })
            })
        })
        .collect();
    barrier.wait();
    let took = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap();
    took.as_nanos() as f64 / (per_thread * threads as u64) as f64
}

/// Latency percentiles (ns) of single `next_id` calls on one thread, over
/// `calls` calls with segments of `step` (so `calls / step` switches).
fn latencies(calls: usize, step: u64) -> [f64; 3] {
    let (_rt, key, _guard) = allocator(step);
    let rt = caller_runtime();
    let mut took = Vec::with_capacity(calls);
    rt.block_on(async {
        for _ in 0..calls {
            let start = Instant::now();
            black_box(key.next_id().await.unwrap());
            took.push(start.elapsed().as_nanos() as f64);
            if took.len() % 1000 == 0 {
                // Lets the preloader (on its own thread) run as it would
                // between requests.
                tokio::task::yield_now().await;
            }
        }
    });
    took.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| took[((took.len() as f64 - 1.0) * q) as usize];
    [at(0.5), at(0.999), at(0.9999)]
}

struct Row {
    what: String,
    figure: String,
    ratio: String,
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` expects a smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs = if quick { 1 } else { runs() };
    let n: u64 = if quick { 100_000 } else { 4_000_000 };
    let mut rows = Vec::new();

    for threads in [1usize, 2] {
        let base = median(
            (0..runs)
                .map(|_| {
                    let c = Arc::new(AtomicU64::new(0));
                    cost(threads, n, || {
                        let c = c.clone();
                        move || c.fetch_add(1, Ordering::Relaxed)
                    })
                })
                .collect(),
        );
        rows.push(Row {
            what: format!("`AtomicU64::fetch_add`, {threads} thread(s) (baseline)"),
            figure: format!("{base:.1} ns/ID"),
            ratio: "1.00×".into(),
        });

        let buffer_ns = median(
            (0..runs)
                .map(|_| {
                    let buffer = Arc::new(SegmentBuffer::new(0.1));
                    let end = n * threads as u64 + 2;
                    buffer
                        .install(Segment::from_range(1, end, 1, 0).unwrap())
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
        let samples: Vec<[f64; 3]> = (0..runs).map(|_| latencies(calls, step)).collect();
        let [p50, p999, p9999] = [0, 1, 2].map(|i| median(samples.iter().map(|s| s[i]).collect()));
        rows.push(Row {
            what: format!(
                "single-call latency, step {step} ({} switches in {calls} calls), 1 thread",
                calls as u64 / step
            ),
            figure: format!("p50 {p50:.0} ns, p99.9 {p999:.0} ns, p99.99 {p9999:.0} ns"),
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

    println!("| measurement | figure | ratio |");
    println!("|---|---|---|");
    for row in rows {
        println!("| {} | {} | {} |", row.what, row.figure, row.ratio);
    }
}
