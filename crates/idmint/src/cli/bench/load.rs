//! The measurement loops: `--concurrency` workers calling for `--batch` IDs
//! until `--duration` is up, against the targets or an in-process generator;
//! each run ends as a [`Report`].

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use idmint_core::{IdBatch, Layout, SequenceExhausted, Snowflake};
use idmint_segment::MemoryStore;
use idmint_segment::{NewKey, SegmentAllocator, SegmentConfig};

use super::BenchArgs;
use super::progress::LiveProgress;
use super::report::Report;
use super::target::{Conn, Target, TlsFiles, http_client};
use super::worker::Worker;

pub(super) async fn bench_targets(
    args: &BenchArgs,
    targets: &[Target],
    tls: &TlsFiles,
    progress: &LiveProgress,
) -> Result<Report> {
    let shared = targets
        .iter()
        .map(|t| http_client(args, t, tls))
        .collect::<Result<Vec<_>>>()?;
    // Worker i talks to target i mod n.
    let mut conns = Vec::with_capacity(args.concurrency as usize);
    for i in 0..args.concurrency as usize {
        let t = i % targets.len();
        conns.push(Conn::connect(&targets[t], shared[t].as_ref(), tls).await?);
    }
    let prefetch = match (&targets[0], args.prefetch) {
        (Target::Http(_), 0) => ", prefetch off".to_owned(),
        (Target::Http(_), n) => format!(", prefetch {n}"),
        _ => String::new(),
    };
    let names: Vec<String> = targets.iter().map(Target::to_string).collect();
    let spread = if targets.len() > 1 {
        format!(", connections spread over {} targets", targets.len())
    } else {
        String::new()
    };
    let label = format!(
        "{} (key {}, batch {}{prefetch}{spread})",
        names.join(", "),
        args.key,
        args.batch
    );
    let started = Instant::now();
    let deadline = started + args.duration;
    let check_order = args.check_order;
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let key = args.key.clone();
            let batch = args.batch;
            let counter = progress.counter();
            tokio::spawn(async move {
                let mut w = Worker::new(check_order, counter);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let result = conn.next_ids(&key, batch).await;
                    w.record(t, result.map_err(|e| format!("{e:#}")));
                }
                w
            })
        })
        .collect();
    let mut workers = Vec::with_capacity(tasks.len());
    for task in tasks {
        workers.push(task.await.context("a bench worker panicked")?);
    }
    Ok(Report::new(
        label,
        args.concurrency,
        started.elapsed(),
        workers,
    ))
}

pub(super) fn bench_snowflake(args: &BenchArgs, progress: &LiveProgress) -> Result<Report> {
    let generator = Snowflake::builder(Layout::TWITTER)
        .with_worker(0)
        .with_sequence_exhausted(SequenceExhausted::Wait)
        .build()?;
    let batch = args.batch;
    let check_order = args.check_order;
    let started = Instant::now();
    let deadline = started + args.duration;
    let workers = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.concurrency)
            .map(|_| {
                let generator = &generator;
                let counter = progress.counter();
                s.spawn(move || {
                    let mut w = Worker::new(check_order, counter);
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let result = if batch == 1 {
                            generator.next_id().map(|id| vec![id.get()])
                        } else {
                            generator.next_ids(batch).map(|b| expand(&b))
                        };
                        w.record(t, result.map_err(|e| e.to_string()));
                    }
                    w
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("a bench thread panicked")))
            .collect::<Result<Vec<_>>>()
    })?;
    let label = format!(
        "in-process snowflake (twitter layout, worker 0, batch {batch}, {} threads sharing one generator)",
        args.concurrency
    );
    Ok(Report::new(
        label,
        args.concurrency,
        started.elapsed(),
        workers,
    ))
}

pub(super) async fn bench_segment(args: &BenchArgs, progress: &LiveProgress) -> Result<Report> {
    let allocator = Arc::new(SegmentAllocator::new(
        MemoryStore::new(),
        SegmentConfig::new(),
    )?);
    allocator
        .create_key(NewKey::new(args.key.clone(), 1000))
        .await?;
    let _preloader = allocator.spawn_preloader();
    let check_order = args.check_order;
    let started = Instant::now();
    let deadline = started + args.duration;
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let allocator = Arc::clone(&allocator);
            let key = args.key.clone();
            let batch = args.batch;
            let counter = progress.counter();
            tokio::spawn(async move {
                let mut w = Worker::new(check_order, counter);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let result = if batch == 1 {
                        allocator.next_id(&key).await.map(|id| vec![id.get()])
                    } else {
                        allocator.next_ids(&key, batch).await.map(|b| expand(&b))
                    };
                    w.record(t, result.map_err(|e| e.to_string()));
                    // Let the preloader and the other tasks in on a busy runtime.
                    if w.calls.is_multiple_of(256) {
                        tokio::task::yield_now().await;
                    }
                }
                w
            })
        })
        .collect();
    let mut workers = Vec::with_capacity(tasks.len());
    for task in tasks {
        workers.push(task.await.context("a bench worker panicked")?);
    }
    let label = format!(
        "in-process segment (memory store, step 1000, key {}, batch {}, {} tasks)",
        args.key, args.batch, args.concurrency
    );
    Ok(Report::new(
        label,
        args.concurrency,
        started.elapsed(),
        workers,
    ))
}

fn expand(batch: &IdBatch) -> Vec<u64> {
    batch.iter().map(|id| id.get()).collect()
}
