//! `idmint bench`: a load generator. `--concurrency` workers call for
//! `--batch` IDs at a time for `--duration`, against a running server or in
//! this process, then it prints throughput and latency percentiles (p50, p99,
//! p99.9, max) and checks that no ID came twice. A duplicate is reported on
//! stdout with examples, and the command exits 1; so does any failed call.
//!
//! `--check-order` also checks that the IDs came in real-time order, as a
//! `monotonic` key promises (see [`check_order`]): each connection's IDs
//! strictly increase, and a call that began after another call ended got IDs
//! above that call's. `--target` may be given several times (the nodes of a
//! cluster): connections are spread over the targets in turn, so the order is
//! checked across nodes, e.g. the oracle's leader and its followers.
//!
//! Targets (each a [`Conn`] variant; a new protocol is one more variant, one
//! more arm in [`Conn::connect`] and [`Conn::next_ids`], and its scheme in
//! [`Target::parse`]):
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
//! and the current rate ([`LiveProgress`]), but only when stderr is a
//! terminal: piped or redirected, the output is the report alone.

use std::fmt::{self, Write as _};
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use clap::{Args, ValueEnum};
use idmint_core::{IdBatch, Layout, SequenceExhausted, Snowflake};
use idmint_segment::MemoryStore;
use idmint_segment::{NewKey, SegmentAllocator, SegmentConfig};

use idmint_server::grpc::proto::GetIdsRequest;
use idmint_server::grpc::proto::id_service_client::IdServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::bad_input;

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

/// The TLS files of a TLS target, read.
#[derive(Clone, Default)]
struct TlsFiles {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsFiles {
    fn read(args: &BenchArgs) -> Result<TlsFiles> {
        let read = |flag: &str, path: &Path| {
            std::fs::read(path).map_err(|e| bad_input(format!("{flag} {}: {e}", path.display())))
        };
        let ca = args
            .tls_ca
            .as_deref()
            .map(|p| read("--tls-ca", p))
            .transpose()?;
        let identity = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some((read("--tls-cert", cert)?, read("--tls-key", key)?)),
            _ => None,
        };
        Ok(TlsFiles { ca, identity })
    }

    fn any(&self) -> bool {
        self.ca.is_some() || self.identity.is_some()
    }
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

/// A server to load, by URL scheme.
#[derive(Debug, Clone)]
enum Target {
    /// `http://ADDR[/prefix]` or `https://…`: the HTTP API.
    Http(String),
    /// `resp://ADDR`: the Redis protocol; `tls` for `rediss://`.
    Resp { addr: String, tls: bool },
    /// `grpc://ADDR`: gRPC (HTTP/2); `tls` for `grpcs://`.
    Grpc { addr: String, tls: bool },
}

impl Target {
    /// Whether the target is reached over TLS.
    fn is_tls(&self) -> bool {
        match self {
            Target::Http(url) => url.starts_with("https://"),
            Target::Resp { tls, .. } | Target::Grpc { tls, .. } => *tls,
        }
    }

    fn parse(text: &str) -> Result<Target> {
        let (scheme, rest) = text.split_once("://").ok_or_else(|| {
            bad_input(format!(
                "target {text:?} has no scheme: use http://ADDR, resp://ADDR or grpc://ADDR \
                 (https://, rediss://, grpcs:// over TLS)"
            ))
        })?;
        if rest.is_empty() {
            return Err(bad_input(format!("target {text:?} has no address")));
        }
        let addr = rest.trim_end_matches('/').to_owned();
        match scheme {
            "http" | "https" => Ok(Target::Http(text.to_owned())),
            "resp" | "redis" => Ok(Target::Resp { addr, tls: false }),
            "rediss" => Ok(Target::Resp { addr, tls: true }),
            "grpc" => Ok(Target::Grpc { addr, tls: false }),
            "grpcs" => Ok(Target::Grpc { addr, tls: true }),
            other => Err(bad_input(format!(
                "target {text:?}: unknown scheme {other:?}; use http://, resp:// or grpc:// \
                 (https://, rediss://, grpcs:// over TLS)"
            ))),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Http(url) => f.write_str(url),
            Target::Resp { addr, tls } => {
                write!(f, "{}://{addr}", if *tls { "rediss" } else { "resp" })
            }
            Target::Grpc { addr, tls } => {
                write!(f, "{}://{addr}", if *tls { "grpcs" } else { "grpc" })
            }
        }
    }
}

/// One worker's connection to a target.
enum Conn {
    Http(idmint_client::Client),
    Resp(redis::aio::MultiplexedConnection),
    Grpc(IdServiceClient<Channel>),
}

impl Conn {
    /// A connection for one worker; `shared` is the HTTP client all workers
    /// share (its pool opens a connection per worker in flight).
    async fn connect(
        target: &Target,
        shared: Option<&idmint_client::Client>,
        tls: &TlsFiles,
    ) -> Result<Conn> {
        match target {
            Target::Http(_) => Ok(Conn::Http(
                shared.expect("an HTTP target has a client").clone(),
            )),
            Target::Resp { addr, tls: false } => {
                let client = redis::Client::open(format!("redis://{addr}/"))
                    .with_context(|| format!("RESP target {addr}"))?;
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .with_context(|| format!("connecting to {addr}"))?;
                Ok(Conn::Resp(conn))
            }
            Target::Resp { addr, tls: true } => {
                let certificates = redis::TlsCertificates {
                    client_tls: tls.identity.clone().map(|(client_cert, client_key)| {
                        redis::ClientTlsConfig {
                            client_cert,
                            client_key,
                        }
                    }),
                    root_cert: tls.ca.clone(),
                };
                let client =
                    redis::Client::build_with_tls(format!("rediss://{addr}/"), certificates)
                        .map_err(|e| bad_input(format!("RESP TLS target {addr}: {e}")))?;
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .with_context(|| format!("connecting to {addr} over TLS"))?;
                Ok(Conn::Resp(conn))
            }
            Target::Grpc {
                addr,
                tls: with_tls,
            } => {
                let scheme = if *with_tls { "https" } else { "http" };
                let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
                    .map_err(|e| bad_input(format!("gRPC target {addr}: {e}")))?
                    .timeout(Duration::from_secs(30));
                if *with_tls {
                    let mut config = ClientTlsConfig::new();
                    match &tls.ca {
                        Some(ca) => config = config.ca_certificate(Certificate::from_pem(ca)),
                        None => config = config.with_webpki_roots(),
                    }
                    if let Some((cert, key)) = &tls.identity {
                        config = config.identity(Identity::from_pem(cert, key));
                    }
                    endpoint = endpoint
                        .tls_config(config)
                        .map_err(|e| bad_input(format!("gRPC TLS target {addr}: {e}")))?;
                }
                let channel = endpoint
                    .connect()
                    .await
                    .with_context(|| format!("connecting to {addr}"))?;
                // A batch of 100,000 IDs is 800 kB; public IDs add their text.
                Ok(Conn::Grpc(
                    IdServiceClient::new(channel).max_decoding_message_size(GRPC_MAX_MESSAGE),
                ))
            }
        }
    }

    async fn next_ids(&mut self, key: &str, n: u64) -> Result<Vec<u64>> {
        match self {
            Conn::Http(client) => Ok(client.next_ids(key, n).await?),
            Conn::Resp(conn) if n == 1 => {
                let id: u64 = redis::cmd("INCR").arg(key).query_async(conn).await?;
                Ok(vec![id])
            }
            Conn::Resp(conn) => Ok(redis::cmd("IDMINT.BATCH")
                .arg(key)
                .arg(n)
                .query_async(conn)
                .await?),
            Conn::Grpc(client) => {
                let request = GetIdsRequest {
                    key: key.to_owned(),
                    count: n,
                };
                let ids = client
                    .get_ids(request)
                    .await
                    .map_err(grpc_error)?
                    .into_inner()
                    .ids;
                if ids.len() as u64 != n {
                    return Err(anyhow!(
                        "asked {key:?} for {n} integer IDs over gRPC, got {} (a UUID key?)",
                        ids.len()
                    ));
                }
                Ok(ids)
            }
        }
    }
}

/// The largest gRPC message the bench accepts (tonic's default is 4 MiB).
const GRPC_MAX_MESSAGE: usize = 64 << 20;

/// A failed gRPC call as one line: the stable code idmint puts in the
/// metadata, then the message.
fn grpc_error(status: tonic::Status) -> anyhow::Error {
    let code = status
        .metadata()
        .get(idmint_server::grpc::ERROR_CODE_METADATA)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| format!("{:?}", status.code()), str::to_owned);
    anyhow!("{code}: {}", status.message())
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

/// The shared HTTP client of one HTTP target (its pool opens a connection
/// per worker in flight); `None` for the other protocols.
fn http_client(
    args: &BenchArgs,
    target: &Target,
    tls: &TlsFiles,
) -> Result<Option<idmint_client::Client>> {
    let Target::Http(url) = target else {
        return Ok(None);
    };
    let mut builder = idmint_client::Client::builder()
        .servers([url.as_str()])
        .prefetch(args.prefetch)
        .timeout(Duration::from_secs(30));
    if let Some(ca) = &tls.ca {
        builder = builder.tls_ca_pem(ca.clone());
    }
    if let Some((cert, key)) = &tls.identity {
        builder = builder.tls_client_pem(cert.clone(), key.clone());
    }
    Ok(Some(
        builder
            .build()
            .map_err(|e| bad_input(format!("target: {e}")))?,
    ))
}

async fn bench_targets(
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

fn bench_snowflake(args: &BenchArgs, progress: &LiveProgress) -> Result<Report> {
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

async fn bench_segment(args: &BenchArgs, progress: &LiveProgress) -> Result<Report> {
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

/// What one worker saw.
#[derive(Debug, Default)]
struct Worker {
    calls: u64,
    errors: u64,
    first_error: Option<String>,
    latency: Histogram,
    ids: Vec<u64>,
    /// With `--check-order`: every successful call, in the order made.
    spans: Option<Vec<Span>>,
    /// The live line's count of IDs, added to every [`PUBLISH_EVERY`] calls.
    progress: Option<Arc<AtomicU64>>,
    /// IDs received since the last addition to `progress`.
    unpublished: u64,
}

/// How many calls a worker makes between additions to the live line's
/// count: one shared atomic add per call would cost more than the call
/// itself in process.
const PUBLISH_EVERY: u64 = 256;

/// One successful call as the worker saw it, for the order check: when it
/// began (before the request was sent) and ended (after the answer came),
/// and its IDs' range.
#[derive(Debug, Clone, Copy)]
struct Span {
    began: Instant,
    ended: Instant,
    /// The lowest and highest ID of the call.
    min: u64,
    max: u64,
    /// Whether the call's IDs strictly increased, in the order received.
    increasing: bool,
}

impl Worker {
    fn new(check_order: bool, progress: Option<Arc<AtomicU64>>) -> Worker {
        Worker {
            spans: check_order.then(Vec::new),
            progress,
            ..Worker::default()
        }
    }

    /// A call that began at `began` and ends now.
    fn record(&mut self, began: Instant, result: Result<Vec<u64>, String>) {
        let ended = Instant::now();
        self.calls += 1;
        self.latency
            .record(u64::try_from(ended.duration_since(began).as_nanos()).unwrap_or(u64::MAX));
        match result {
            Ok(ids) => {
                if let (Some(spans), Some(&min), Some(&max)) =
                    (&mut self.spans, ids.iter().min(), ids.iter().max())
                {
                    spans.push(Span {
                        began,
                        ended,
                        min,
                        max,
                        increasing: ids.windows(2).all(|w| w[0] < w[1]),
                    });
                }
                self.unpublished += ids.len() as u64;
                self.ids.extend(ids);
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
        if self.calls.is_multiple_of(PUBLISH_EVERY)
            && let Some(progress) = &self.progress
        {
            progress.fetch_add(std::mem::take(&mut self.unpublished), Ordering::Relaxed);
        }
    }
}

/// The live line on stderr while a run lasts: the time, the IDs received so
/// far and the rate over the last half second, redrawn twice a second by a
/// thread of its own. Only when stderr is a terminal; otherwise nothing is
/// started and nothing printed. Cleared when dropped, before the report.
struct LiveProgress {
    ids: Arc<AtomicU64>,
    live: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl LiveProgress {
    fn start(duration: Duration) -> LiveProgress {
        let ids = Arc::new(AtomicU64::new(0));
        if !std::io::stderr().is_terminal() {
            return LiveProgress { ids, live: None };
        }
        let total_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let style = indicatif::ProgressStyle::with_template("{bar:30} {elapsed_precise} / {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        let bar = indicatif::ProgressBar::new(total_ms).with_style(style);
        let stop = Arc::new(AtomicBool::new(false));
        let (count, done) = (ids.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let (mut last_ids, mut last_at) = (0u64, started);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                let now = Instant::now();
                let n = count.load(Ordering::Relaxed);
                let rate = (n - last_ids) as f64 / now.duration_since(last_at).as_secs_f64();
                (last_ids, last_at) = (n, now);
                bar.set_position(
                    u64::try_from(now.duration_since(started).as_millis()).unwrap_or(u64::MAX),
                );
                bar.set_message(format!(
                    "{:.0?}: {} IDs so far, {} IDs/s now",
                    Duration::from_millis(total_ms),
                    group(n),
                    group(rate as u64)
                ));
            }
            bar.finish_and_clear();
        });
        LiveProgress {
            ids,
            live: Some((stop, thread)),
        }
    }

    /// The count workers add to, when the line is shown.
    fn counter(&self) -> Option<Arc<AtomicU64>> {
        self.live.as_ref().map(|_| self.ids.clone())
    }
}

impl Drop for LiveProgress {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.live.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

/// `1234567` as `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What the order check found.
#[derive(Debug, Default, PartialEq, Eq)]
struct OrderCheck {
    /// Successful calls checked.
    calls: u64,
    /// Calls whose IDs were not above every ID of a call that ended before
    /// they began, or not increasing among themselves.
    violations: u64,
    /// Of those, calls below their own connection's previous call.
    within_connection: u64,
    /// Calls that had a call of another connection ended before they began
    /// (the cross-connection constraints actually checked).
    ordered_across: u64,
    /// Up to five violations, described.
    examples: Vec<String>,
}

/// Checks real-time order: a call's IDs strictly increase, and every call
/// that began after another call ended (on any connection) got IDs above
/// that call's. Sound with timestamps taken on the client: a call's end is
/// read after its answer came and the next call's start before its request
/// is sent, on one monotonic clock, so `ended <= began` means the first
/// answer was in before the second request left. Calls that overlap in time
/// may come back in any order. `connections[i]` is connection `i`'s calls in
/// the order made.
fn check_order(connections: &[Vec<Span>]) -> OrderCheck {
    let mut check = OrderCheck::default();
    let example = |check: &mut OrderCheck, text: String| {
        if check.examples.len() < 5 {
            check.examples.push(text);
        }
    };
    // All calls by end, with their highest ID and connection.
    let mut by_end: Vec<(Instant, u64, usize)> = connections
        .iter()
        .enumerate()
        .flat_map(|(c, spans)| spans.iter().map(move |s| (s.ended, s.max, c)))
        .collect();
    by_end.sort_unstable_by_key(|&(ended, _, _)| ended);
    // For each prefix of that order: the highest ID in it, and its first two
    // distinct connections (enough to tell whether it holds a call of a
    // connection other than a given one).
    let mut prefix_max = Vec::with_capacity(by_end.len());
    let mut firsts: Vec<(usize, Option<usize>)> = Vec::with_capacity(by_end.len());
    let mut max = 0u64;
    let mut two: (usize, Option<usize>) = (usize::MAX, None);
    for &(_, m, c) in &by_end {
        max = max.max(m);
        prefix_max.push(max);
        if two.0 == usize::MAX {
            two.0 = c;
        } else if two.1.is_none() && c != two.0 {
            two.1 = Some(c);
        }
        firsts.push(two);
    }
    for (c, spans) in connections.iter().enumerate() {
        let mut previous: Option<&Span> = None;
        for s in spans {
            check.calls += 1;
            let before = by_end.partition_point(|&(ended, _, _)| ended <= s.began);
            if before > 0 {
                let (a, b) = firsts[before - 1];
                if a != c || b.is_some() {
                    check.ordered_across += 1;
                }
            }
            let floor = (before > 0).then(|| prefix_max[before - 1]);
            let mut bad = false;
            if !s.increasing {
                bad = true;
                example(
                    &mut check,
                    format!("connection {c}: a call's IDs did not strictly increase"),
                );
            }
            if let Some(p) = previous.filter(|p| s.min <= p.max) {
                bad = true;
                check.within_connection += 1;
                example(
                    &mut check,
                    format!(
                        "connection {c}: a call got {} after its previous call got up to {}",
                        s.min, p.max
                    ),
                );
            } else if let Some(floor) = floor.filter(|&f| s.min <= f) {
                bad = true;
                example(
                    &mut check,
                    format!(
                        "connection {c}: a call got {} though a call that returned {floor} \
                         had ended before it began",
                        s.min
                    ),
                );
            }
            if bad {
                check.violations += 1;
            }
            previous = Some(s);
        }
    }
    check
}

/// The figures of one run.
#[derive(Debug)]
struct Report {
    label: String,
    concurrency: u32,
    elapsed: Duration,
    calls: u64,
    errors: u64,
    first_error: Option<String>,
    n_ids: u64,
    latency: Histogram,
    n_duplicates: u64,
    duplicate_examples: Vec<u64>,
    /// With `--check-order`.
    order: Option<OrderCheck>,
}

impl Report {
    fn new(label: String, concurrency: u32, elapsed: Duration, workers: Vec<Worker>) -> Report {
        let mut latency = Histogram::default();
        let (mut calls, mut errors, mut first_error) = (0, 0, None);
        let mut ids = Vec::with_capacity(workers.iter().map(|w| w.ids.len()).sum());
        let mut spans = Vec::new();
        for w in workers {
            calls += w.calls;
            errors += w.errors;
            if first_error.is_none() {
                first_error = w.first_error;
            }
            latency.merge(&w.latency);
            ids.extend(w.ids);
            spans.extend(w.spans);
        }
        let order = (!spans.is_empty()).then(|| check_order(&spans));
        let n_ids = ids.len() as u64;
        let (n_duplicates, duplicate_examples) = duplicates(ids);
        Report {
            label,
            concurrency,
            elapsed,
            calls,
            errors,
            first_error,
            n_ids,
            latency,
            n_duplicates,
            duplicate_examples,
            order,
        }
    }

    fn render(&self, out: &mut String) {
        let secs = self.elapsed.as_secs_f64();
        let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let p = |q: f64| format_nanos(self.latency.quantile(q));
        let _ = writeln!(out, "target        {}", self.label);
        let _ = writeln!(out, "concurrency   {}", self.concurrency);
        let _ = writeln!(out, "duration      {secs:.2} s");
        let _ = writeln!(out, "calls         {} ({} failed)", self.calls, self.errors);
        let _ = writeln!(out, "ids           {}", self.n_ids);
        let _ = writeln!(
            out,
            "throughput    {:.0} ids/s, {:.0} calls/s",
            per_sec(self.n_ids),
            per_sec(self.calls)
        );
        let _ = writeln!(
            out,
            "latency       p50 {}, p99 {}, p99.9 {}, max {}",
            p(0.5),
            p(0.99),
            p(0.999),
            format_nanos(self.latency.max)
        );
        if let Some(e) = &self.first_error {
            let _ = writeln!(out, "first error   {e}");
        }
        if self.n_duplicates == 0 {
            let _ = writeln!(out, "duplicates    0 (all {} IDs unique)", self.n_ids);
        } else {
            let examples: Vec<String> =
                self.duplicate_examples.iter().map(u64::to_string).collect();
            let _ = writeln!(
                out,
                "duplicates    {} !!! DUPLICATE IDS RECEIVED, e.g. {}",
                self.n_duplicates,
                examples.join(", ")
            );
        }
        if let Some(order) = &self.order {
            if order.violations == 0 {
                let _ = writeln!(
                    out,
                    "order         0 violations (all {} calls in real-time order; {} of them \
                     began after a call of another connection ended)",
                    order.calls, order.ordered_across
                );
            } else {
                let _ = writeln!(
                    out,
                    "order         {} violations !!! IDS OUT OF REAL-TIME ORDER in {} of {} calls \
                     ({} within a connection), e.g. {}",
                    order.violations,
                    order.violations,
                    order.calls,
                    order.within_connection,
                    order.examples.join("; ")
                );
            }
        }
    }

    /// Why this run counts as failed, if it does.
    fn failure(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.n_duplicates > 0 {
            why.push(format!(
                "{} duplicate IDs from {}",
                self.n_duplicates, self.label
            ));
        }
        if let Some(order) = self.order.as_ref().filter(|o| o.violations > 0) {
            why.push(format!(
                "{} of {} calls to {} got IDs out of real-time order",
                order.violations, order.calls, self.label
            ));
        }
        if self.errors > 0 {
            why.push(format!(
                "{} of {} calls to {} failed, first: {}",
                self.errors,
                self.calls,
                self.label,
                self.first_error.as_deref().unwrap_or("?")
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// The number of IDs that came more than once (each repeat counts), and up
/// to five of them.
fn duplicates(mut ids: Vec<u64>) -> (u64, Vec<u64>) {
    ids.sort_unstable();
    let mut n = 0;
    let mut examples = Vec::new();
    for w in ids.windows(2) {
        if w[0] == w[1] {
            n += 1;
            if examples.len() < 5 && examples.last() != Some(&w[0]) {
                examples.push(w[0]);
            }
        }
    }
    (n, examples)
}

/// A log-linear latency histogram in nanoseconds: exact below 128, then 64
/// buckets per power of two (1/64 relative precision).
#[derive(Debug, Clone)]
struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

/// Sub-buckets per power of two, as a shift.
const SUB_BITS: u32 = 6;
const LINEAR: u64 = 2 << SUB_BITS;
const BUCKETS: usize = (LINEAR + (64 - SUB_BITS as u64 - 1) * (1 << SUB_BITS)) as usize;

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }
}

impl Histogram {
    fn index(v: u64) -> usize {
        if v < LINEAR {
            return v as usize;
        }
        let exp = 63 - u64::from(v.leading_zeros()); // at least SUB_BITS + 1
        let sub = (v >> (exp - u64::from(SUB_BITS))) & ((1 << SUB_BITS) - 1);
        (LINEAR + (exp - u64::from(SUB_BITS) - 1) * (1 << SUB_BITS) + sub) as usize
    }

    /// The highest value of bucket `idx`.
    fn high(idx: usize) -> u64 {
        let idx = idx as u64;
        if idx < LINEAR {
            return idx;
        }
        let exp = (idx - LINEAR) / (1 << SUB_BITS) + u64::from(SUB_BITS) + 1;
        let sub = (idx - LINEAR) % (1 << SUB_BITS);
        let width = 1u64 << (exp - u64::from(SUB_BITS));
        ((1 << SUB_BITS) + sub)
            .saturating_mul(width)
            .saturating_add(width - 1)
    }

    fn record(&mut self, v: u64) {
        self.counts[Histogram::index(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// The value at quantile `q` (0 to 1), as its bucket's highest value,
    /// capped by the largest value seen.
    fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (idx, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Histogram::high(idx).min(self.max);
            }
        }
        self.max
    }
}

fn format_nanos(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(4_064_163), "4,064,163");
        assert_eq!(group(u64::MAX), "18,446,744,073,709,551,615");
    }

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

    #[test]
    fn targets_parse_by_scheme() {
        assert!(matches!(
            Target::parse("http://127.0.0.1:1").unwrap(),
            Target::Http(_)
        ));
        match Target::parse("resp://127.0.0.1:6380/").unwrap() {
            Target::Resp { addr, tls: false } => assert_eq!(addr, "127.0.0.1:6380"),
            other => panic!("{other:?}"),
        }
        match Target::parse("grpc://127.0.0.1:50051/").unwrap() {
            Target::Grpc { addr, tls: false } => assert_eq!(addr, "127.0.0.1:50051"),
            other => panic!("{other:?}"),
        }
        for (text, shown) in [
            ("https://127.0.0.1:1", "https://127.0.0.1:1"),
            ("rediss://127.0.0.1:6380/", "rediss://127.0.0.1:6380"),
            ("grpcs://127.0.0.1:50051", "grpcs://127.0.0.1:50051"),
        ] {
            let target = Target::parse(text).unwrap();
            assert!(target.is_tls(), "{text}");
            assert_eq!(target.to_string(), shown);
        }
        assert!(!Target::parse("http://127.0.0.1:1").unwrap().is_tls());
        for bad in ["127.0.0.1:1", "grpc://", "ftp://h", "http://"] {
            let e = Target::parse(bad).unwrap_err();
            assert!(super::super::is_bad_input(&e), "{bad}: {e}");
        }
    }

    #[test]
    fn histogram_quantiles_are_within_a_bucket() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        for (q, exact) in [(0.5, 5_000_000u64), (0.99, 9_900_000), (0.999, 9_990_000)] {
            let got = h.quantile(q);
            assert!(
                got >= exact && got <= exact + exact / 32,
                "{q}: {got} vs {exact}"
            );
        }
        assert_eq!(h.quantile(1.0), 10_000_000);
        // Every bucket's high value maps back into it, up to the top.
        for v in [0, 1, 127, 128, 129, 255, 256, 1 << 40, u64::MAX] {
            let idx = Histogram::index(v);
            assert!(idx < BUCKETS, "{v}");
            assert!(Histogram::high(idx) >= v, "{v}");
            assert_eq!(Histogram::index(Histogram::high(idx)), idx, "{v}");
        }
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    #[test]
    fn the_order_check_allows_overlap_and_catches_inversions() {
        let t0 = Instant::now();
        let span = |began: u64, ended: u64, ids: &[u64]| Span {
            began: t0 + Duration::from_millis(began),
            ended: t0 + Duration::from_millis(ended),
            min: *ids.iter().min().unwrap(),
            max: *ids.iter().max().unwrap(),
            increasing: ids.windows(2).all(|w| w[0] < w[1]),
        };
        // Two connections; calls that overlap may come back in any order,
        // and one that began after another ended is above it.
        let ok = check_order(&[
            vec![span(0, 10, &[5]), span(10, 20, &[8, 9])],
            vec![span(1, 9, &[4]), span(12, 15, &[6])],
        ]);
        assert_eq!(ok.calls, 4);
        assert_eq!(ok.violations, 0, "{ok:?}");
        // (12, 15) began after (1, 9) ended; (10, 20) after (1, 9) too.
        assert_eq!(ok.ordered_across, 2, "{ok:?}");

        // Across connections: a call that began after another ended got less.
        let bad = check_order(&[vec![span(0, 5, &[5])], vec![span(6, 9, &[4])]]);
        assert_eq!((bad.violations, bad.within_connection), (1, 0), "{bad:?}");
        assert!(bad.examples[0].contains("returned 5"), "{bad:?}");
        // Within a connection, and within a call.
        let bad = check_order(&[vec![span(0, 5, &[5, 6]), span(5, 9, &[6, 7])]]);
        assert_eq!((bad.violations, bad.within_connection), (1, 1), "{bad:?}");
        let bad = check_order(&[vec![span(0, 5, &[7, 6])]]);
        assert_eq!(bad.violations, 1, "{bad:?}");
        assert!(bad.examples[0].contains("strictly increase"), "{bad:?}");
        assert_eq!(check_order(&[vec![], vec![]]), OrderCheck::default());
    }

    #[test]
    fn duplicates_are_counted_with_examples() {
        assert_eq!(duplicates(vec![3, 1, 2]), (0, vec![]));
        assert_eq!(duplicates(vec![5, 1, 5, 2, 5, 2]), (3, vec![2, 5]));
    }
}
