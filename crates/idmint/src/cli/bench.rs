//! `idmint bench`: a load generator. `--concurrency` workers call for
//! `--batch` IDs at a time for `--duration`, against a running server or in
//! this process, then it prints throughput and latency percentiles (p50, p99,
//! p99.9, max) and checks that no ID came twice. A duplicate is reported on
//! stdout with examples, and the command exits 1; so does any failed call.
//!
//! `--check-order` also checks that the IDs came in real-time order, as a
//! `monotonic` key promises (see `bench/order.rs`): each connection's IDs
//! strictly increase, and a call that began after another call ended got IDs
//! above that call's. `--target` may be given several times (the nodes of a
//! cluster): connections are spread over the targets in turn, so the order is
//! checked across nodes, e.g. the oracle's leader and its followers.
//!
//! Targets (each a `Conn` variant in `bench/target.rs`; a new protocol is one
//! more variant, one more arm in `Conn::connect` and `Conn::next_ids`, and its
//! scheme in `Target::parse`):
//! - `http://ADDR`: `GET /v1/ids/{key}?count=N` in the binary form, through
//!   `idmint-client`, with no prefetch unless `--prefetch N`;
//! - `resp://ADDR` (or `redis://`): the Redis protocol, `INCR key` per ID,
//!   `IDMINT.BATCH key N` for batches, one connection per worker;
//! - `grpc://ADDR`: `idmint.v1.IdService/GetIds` with `count` N, through the
//!   server crate's generated client, one HTTP/2 connection per worker;
//! - over TLS: `https://`, `rediss://` and `grpcs://`, trusting the CA of
//!   `--tls-ca` (else the system's or built-in roots) and presenting
//!   `--tls-cert`/`--tls-key` to a server that requires client certificates;
//! - `--in-process`: a `Snowflake` (Twitter layout, worker 0; one OS thread
//!   per worker sharing it) and/or a `SegmentAllocator` on a `MemoryStore`
//!   (one task per worker), one after the other.
//!
//! Latency is kept in a log-linear histogram (1/64 relative precision), not
//! as samples, so a long in-process run needs no memory for it; the IDs
//! themselves are kept, to check them.
//!
//! While a run lasts, a live line on stderr shows the time, the IDs so far
//! and the current rate (`bench/progress.rs`), but only when stderr is a
//! terminal: piped or redirected, the output is the report alone.
//!
//! # Where
//! - `bench/target.rs`: the targets and the surfaces' clients;
//! - `bench/load.rs`: the measurement loops, over the targets or in process;
//! - `bench/worker.rs`: what one worker saw;
//! - `bench/report.rs`: the report, with the duplicate check;
//! - `bench/order.rs`: the `--check-order` check;
//! - `bench/histogram.rs`: the latency histogram;
//! - `bench/progress.rs`: the live line.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::{Args, ValueEnum};

use super::bad_input;
use load::{bench_segment, bench_snowflake, bench_targets};
use progress::LiveProgress;
use report::Report;
use target::{Target, TlsFiles};

mod histogram;
mod load;
mod order;
mod progress;
mod report;
mod target;
mod worker;

/// Flags of `idmint bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The server to load: http://ADDR (HTTP API), resp://ADDR (Redis
    /// protocol) or grpc://ADDR (gRPC). Repeat it (or separate with commas)
    /// to spread the connections over several servers in turn, e.g. the
    /// nodes of a cluster.
    #[arg(
        long,
        value_name = "URL",
        required_unless_present = "in_process",
        value_delimiter = ','
    )]
    target: Vec<String>,

    /// Generate in this process instead of asking a server.
    #[arg(long, conflicts_with_all = ["target", "prefetch"])]
    in_process: bool,

    /// With --in-process: the generators to run, one after the other.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "snowflake,segment",
        requires = "in_process"
    )]
    strategy: Vec<InProcess>,

    /// The key to ask IDs of (a server must know it; in process it is created).
    #[arg(long, default_value = "bench")]
    key: String,

    /// Workers calling at once (tasks, connections or threads).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    concurrency: u32,

    /// How long to run each target: 500ms, 5s, 1m.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,

    /// IDs per call.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    batch: u64,

    /// HTTP only: let the client prefetch up to N IDs per key (0: off).
    #[arg(long, default_value_t = 0)]
    prefetch: u64,

    /// Check that IDs come in real-time order, as a `monotonic` key
    /// promises: each connection's IDs strictly increase, and a call that
    /// began after another ended got IDs above that call's, across all
    /// connections and targets. Any violation fails the run.
    #[arg(long, conflicts_with = "prefetch")]
    check_order: bool,

    /// TLS targets (https://, rediss://, grpcs://): the CA certificate (PEM)
    /// to trust for the server's certificate.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,

    /// TLS targets: the client certificate (PEM) to present (mutual TLS).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// TLS targets: the client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// An in-process generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum InProcess {
    /// `Snowflake`, Twitter layout, worker 0, waiting when a tick is used up.
    Snowflake,
    /// `SegmentAllocator` on a `MemoryStore`, step 1000 (dynamic).
    Segment,
}

/// A run's length in the one duration form (`500ms`, `5s`, `1.5s`, `2m`),
/// more than zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = idmint_core::duration::parse_duration(text).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err(format!("{text:?}: a duration of 0 measures nothing"));
    }
    Ok(d)
}

/// Runs the benchmark.
pub fn run(args: BenchArgs) -> Result<()> {
    if args.key.trim().is_empty() {
        return Err(bad_input("the key is empty"));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut reports = Vec::new();
    if args.in_process {
        let mut strategies = args.strategy.clone();
        strategies.dedup();
        for strategy in strategies {
            let progress = LiveProgress::start(args.duration);
            let report = match strategy {
                InProcess::Snowflake => bench_snowflake(&args, &progress)?,
                InProcess::Segment => runtime.block_on(bench_segment(&args, &progress))?,
            };
            reports.push(report);
        }
    } else {
        let targets = args
            .target
            .iter()
            .map(|t| Target::parse(t))
            .collect::<Result<Vec<_>>>()?;
        if targets.is_empty() {
            return Err(bad_input("no --target given"));
        }
        if args.prefetch > 0 && !targets.iter().all(|t| matches!(t, Target::Http(_))) {
            return Err(bad_input("--prefetch works with http:// targets only"));
        }
        let tls = TlsFiles::read(&args)?;
        if tls.any() && !targets.iter().any(Target::is_tls) {
            return Err(bad_input(
                "--tls-ca, --tls-cert and --tls-key need a TLS target: https://, rediss:// or grpcs://",
            ));
        }
        if targets.iter().any(Target::is_tls) {
            // The Redis and gRPC clients take rustls's process-wide provider:
            // ring, as everywhere in idmint. Already set is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let progress = LiveProgress::start(args.duration);
        reports.push(runtime.block_on(bench_targets(&args, &targets, &tls, &progress))?);
    }
    let mut out = String::new();
    for (i, report) in reports.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        report.render(&mut out);
    }
    std::io::stdout()
        .write_all(out.as_bytes())
        .context("writing the report")?;
    let failures: Vec<String> = reports.iter().filter_map(Report::failure).collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(failures.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        // One grammar with the config file: a bare number has no unit.
        for bad in ["", "0s", "3", "fast", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
