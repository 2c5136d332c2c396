//! In-process generator benchmarks, as ratios against baselines measured in the
//! same run: a bare `AtomicU64::fetch_add` and the layout's cap.
//!
//! `cargo bench -p idmint-core --bench generators` prints a Markdown table (the one
//! in BENCHMARKS.md). Every figure is the median of `IDMINT_BENCH_RUNS` runs
//! (default 7), because the machines are shared and noisy.
//!
//! A custom harness rather than criterion: the figures that matter are sustained
//! rates over wall-clock windows (a generator at its cap spends most of its time
//! waiting for the next tick) and ratios between measurements of one run, which
//! criterion's per-iteration statistics do not give.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idmint_core::clock::CoarseClock;
use idmint_core::{Cached, Layout, SequenceExhausted, Snowflake, TakeRejection};
use idmint_testkit::bench::{
    Row, cost, fetch_add_ns, fetch_add_row, median, print_table, runs, together,
};

const CAP_TWITTER: f64 = 4_096_000.0;

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Runs `f` on `threads` threads for `window`; returns (IDs per second, largest
/// lead of a last-issued ID over the wall clock in ms, per `time_ms`).
fn sustained<F, T>(threads: usize, window: Duration, make: impl Fn() -> F, time_ms: T) -> (f64, f64)
where
    F: FnMut() -> u64 + Send + 'static,
    T: Fn(u64) -> i64,
{
    let results = together(threads, || {
        let mut f = make();
        move || {
            let start = Instant::now();
            let (mut n, mut last) = (0u64, 0u64);
            loop {
                for _ in 0..64 {
                    last = f();
                }
                n += 64;
                if start.elapsed() >= window {
                    break;
                }
            }
            (n, last, start.elapsed())
        }
    });
    let now = wall_ms();
    let total: u64 = results.iter().map(|r| r.0).sum();
    let secs = results
        .iter()
        .map(|r| r.2.as_secs_f64())
        .fold(0.0, f64::max);
    let lead = results
        .iter()
        .map(|r| (time_ms(r.1) - now) as f64)
        .fold(f64::MIN, f64::max);
    (total as f64 / secs, lead.max(0.0))
}

fn twitter_ms(id: u64) -> i64 {
    Layout::TWITTER.decode(id).unwrap().time.as_millisecond()
}

fn shared_snowflake(exhausted: SequenceExhausted) -> Arc<Snowflake> {
    Arc::new(
        Snowflake::builder(Layout::TWITTER)
            .with_worker(1)
            .with_sequence_exhausted(exhausted)
            .build()
            .unwrap(),
    )
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing and
    // expects a quick smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs = if quick { 1 } else { runs() };
    let window = if quick {
        Duration::from_millis(50)
    } else {
        Duration::from_millis(500)
    };
    let n_cost: u64 = if quick { 100_000 } else { 2_000_000 };
    let borrow = SequenceExhausted::Borrow {
        max_lead: Duration::from_secs(10),
    };
    let mut rows = Vec::new();

    for threads in [1usize, 2] {
        // Baseline: a bare shared counter.
        let base = fetch_add_ns(threads, n_cost, runs);
        rows.push(fetch_add_row(threads, base));

        // Snowflake at its cap (classic: wait for the next tick).
        let (rate, lead) = median2(
            (0..runs)
                .map(|_| {
                    let g = shared_snowflake(SequenceExhausted::Wait);
                    sustained(
                        threads,
                        window,
                        || {
                            let g = g.clone();
                            move || g.next_id().unwrap().get()
                        },
                        twitter_ms,
                    )
                })
                .collect(),
        );
        rows.push(Row {
            what: format!(
                "idmint `Snowflake::next_id`, twitter layout, wait policy, {threads} thread(s)"
            ),
            figure: format!("{:.0} IDs/s, lead {lead:.0} ms", rate),
            ratio: format!("{:.4} of cap", rate / CAP_TWITTER),
        });

        // Snowflake borrowing within its bound: cost per ID.
        let ns = median(
            (0..runs)
                .map(|_| {
                    let g = shared_snowflake(borrow);
                    cost(threads, n_cost, || {
                        let g = g.clone();
                        move || g.next_id().unwrap().get()
                    })
                })
                .collect(),
        );
        rows.push(Row {
            what: format!("idmint `Snowflake::next_id`, borrowing (bound 10 s), default clock, {threads} thread(s)"),
            figure: format!("{ns:.1} ns/ID"),
            ratio: format!("{:.2}× fetch_add", ns / base),
        });

        // The same with the coarse clock: the time is one atomic load.
        let ns = median(
            (0..runs)
                .map(|_| {
                    let clock = CoarseClock::new(Duration::from_micros(100));
                    let _ticker = clock.start();
                    let g = Arc::new(
                        Snowflake::builder(Layout::TWITTER)
                            .with_worker(1)
                            .with_clock(Arc::new(clock))
                            .with_sequence_exhausted(borrow)
                            .build()
                            .unwrap(),
                    );
                    cost(threads, n_cost, || {
                        let g = g.clone();
                        move || g.next_id().unwrap().get()
                    })
                })
                .collect(),
        );
        rows.push(Row {
            what: format!("idmint `Snowflake::next_id`, borrowing (bound 10 s), `CoarseClock` 100 µs, {threads} thread(s)"),
            figure: format!("{ns:.1} ns/ID"),
            ratio: format!("{:.2}× fetch_add", ns / base),
        });

        // Cached ring, taking with the refiller running.
        let ns = median(
            (0..runs)
                .map(|_| {
                    let g = Arc::new(
                        Cached::builder(Layout::TWITTER)
                            .with_worker(1)
                            .with_max_lead(Duration::from_secs(10))
                            .with_take_rejection(TakeRejection::Wait {
                                max: Duration::from_secs(10),
                            })
                            .build()
                            .unwrap(),
                    );
                    let _refiller = g.spawn_refiller();
                    cost(threads, n_cost, || {
                        let g = g.clone();
                        move || g.next_id().unwrap().get()
                    })
                })
                .collect(),
        );
        rows.push(Row {
            what: format!("idmint `Cached::next_id`, lead bound 10 s, {threads} thread(s)"),
            figure: format!("{ns:.1} ns/ID"),
            ratio: format!("{:.2}× fetch_add", ns / base),
        });

        // Peers, at their caps, with how far ahead of the clock they run.
        let (rate, lead) = median2(
            (0..runs)
                .map(|_| {
                    let g = Arc::new(snowflaked::sync::Generator::new(1));
                    sustained(
                        threads,
                        window,
                        || {
                            let g = g.clone();
                            move || g.generate::<u64>()
                        },
                        |id| (id >> 22) as i64,
                    )
                })
                .collect(),
        );
        rows.push(Row {
            what: format!("peer `snowflaked::sync::Generator`, {threads} thread(s)"),
            figure: format!("{rate:.0} IDs/s, lead {lead:.0} ms"),
            ratio: format!("{:.4} of cap", rate / CAP_TWITTER),
        });
        let (rate, lead) = median2(
            (0..runs)
                .map(|_| {
                    sustained(
                        threads,
                        window,
                        || || tsid::create_tsid_1024().number(),
                        |id| (id >> 22) as i64 + 1_577_836_800_000,
                    )
                })
                .collect(),
        );
        rows.push(Row {
            what: format!(
                "peer `tsid::create_tsid_1024` (10 node + 12 counter bits), {threads} thread(s)"
            ),
            figure: format!("{rate:.0} IDs/s, lead {lead:.0} ms"),
            ratio: format!("{:.4} of cap", rate / CAP_TWITTER),
        });
    }

    // One call for 100,000 IDs: reserved in one step, returned as runs.
    let samples = if quick { 20 } else { 2000 };
    let mut micros: Vec<f64> = (0..samples)
        .map(|_| {
            let g = Snowflake::builder(Layout::TWITTER)
                .with_sequence_exhausted(SequenceExhausted::Borrow {
                    max_lead: Duration::from_secs(1),
                })
                .build()
                .unwrap();
            let start = Instant::now();
            let batch = black_box(g.next_ids(100_000).unwrap());
            let took = start.elapsed();
            assert_eq!(batch.len(), 100_000);
            took.as_secs_f64() * 1e6
        })
        .collect();
    micros.sort_by(|a, b| a.total_cmp(b));
    let p99 = micros[micros.len() * 99 / 100];
    rows.push(Row {
        what: "idmint `Snowflake::next_ids(100_000)`, borrowing (bound 1 s)".into(),
        figure: format!("median {:.1} µs, p99 {p99:.1} µs", micros[micros.len() / 2]),
        ratio: format!(
            "{:.3} of the 100 µs budget",
            micros[micros.len() / 2] / 100.0
        ),
    });

    print_table(
        ["measurement", &format!("median of {runs}"), "ratio"],
        &rows,
    );
}

/// The run with the median rate, keeping its lead alongside.
fn median2(mut v: Vec<(f64, f64)>) -> (f64, f64) {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v[v.len() / 2]
}
