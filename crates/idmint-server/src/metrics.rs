//! Metrics: what `GET /metrics` exports in the Prometheus text format, and the
//! counters the status page reads.
//!
//! # One recorder per server, no global
//! Each [`Metrics`] builds its own [`PrometheusRecorder`] and talks to it
//! through the `metrics` facade's [`Recorder`] trait: handles
//! ([`Counter`], [`Gauge`], [`Histogram`]) are registered on that recorder and
//! kept, never looked up through the global `counter!` macros. Several servers
//! in one process (tests) therefore keep separate numbers, and nothing needs
//! installing.
//!
//! # What is counted where
//! - **IDs issued** (`idmint_ids_issued_total{key,strategy}`): once per
//!   request, by `n_ids` at once, into a per-(key, strategy) `AtomicU64` this
//!   module owns; a scrape copies it into the recorder's counter
//!   ([`Counter::absolute`]). That is the one atomic add a request costs (what
//!   the facade's own counter would cost), and it is readable, which the
//!   recorder's counters are not: the throughput sampler and the status page
//!   sum the same cells.
//! - **HTTP latency** (`idmint_http_request_duration_seconds{route,status}`):
//!   a histogram per matched route and status class, recorded by [`track`].
//! - **gRPC latency** (`idmint_grpc_request_duration_seconds{method,code}`):
//!   a histogram per RPC and outcome (`ok`, `invalid_argument`, ...),
//!   recorded by `grpc.rs`; open `StreamIds` calls in `idmint_grpc_streams_open`.
//! - **Read at scrape time** from their owners: the snowflake generator's
//!   [`SnowflakeStats`] (as counters that stay monotonic across a re-claim's
//!   new generator), the clock's drift, the lease, the worker ID, the mark's
//!   lead, segment buffers and steps, the layout's time left.
//! - **Registry errors and segment lease failures**: counted by
//!   [`CountingRegistry`] and [`CountingStore`], thin wrappers around the
//!   registry and the segment store that count failed and abandoned (timed
//!   out) calls.
//!
//! # Label cardinality
//! `key` is a segment key that exists in the store, or a key named in
//! `[keys]`; any other key (the Leaf snowflake route takes any name) and
//! keyless requests (`/v1/uuid`) are counted under `key="*"`. At most
//! [`MAX_KEYS`] distinct keys get their own series.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use axum::extract::{MatchedPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idmint_core::clock::Clock;
use idmint_core::{Snowflake, SnowflakeStats};
use idmint_registry::{
    Claim, FleetMember, Lease, LeaseState, NodeIdentity, PeerReport, WorkerRegistry,
};
use idmint_segment::{KeyInfo, KeyStatus, NewKey, SegmentGrant, SegmentStore};
use jiff::Timestamp;
use metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use tokio::task::JoinHandle;

use crate::config::Strategy;
use crate::state::AppState;

/// The most keys that get their own `idmint_ids_issued_total` series; the rest
/// share `key="*"`.
pub(crate) const MAX_KEYS: usize = 1000;

/// The label of keys without their own series.
const OTHER_KEY: &str = "*";

const ISSUED: &str = "idmint_ids_issued_total";
const HTTP_LATENCY: &str = "idmint_http_request_duration_seconds";
const GRPC_LATENCY: &str = "idmint_grpc_request_duration_seconds";
const REGISTRY_ERRORS: &str = "idmint_registry_errors_total";
const LEASE_FAILURES: &str = "idmint_segment_lease_failures_total";
const TLS_RELOADS: &str = "idmint_tls_reloads_total";
const TLS_RELOAD_FAILURES: &str = "idmint_tls_reload_failures_total";

/// Latency buckets: 50 µs to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// How often the sampler records the issued total (and drains histograms).
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// How many samples the throughput history keeps (a minute at one a second).
const SAMPLES_KEPT: usize = 61;
/// The window of the throughput figure, in samples (seconds).
pub(crate) const RATE_WINDOW: usize = 5;

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// One (key, strategy)'s issued count.
struct IssuedCell {
    strategy: &'static str,
    n_ids: AtomicU64,
    exported: Counter,
}

/// The issued cells by key; copy-on-write, so counting reads without locking.
type IssuedMap = HashMap<Box<str>, Vec<Arc<IssuedCell>>, foldhash::fast::RandomState>;

/// Snowflake counters carried over from generators a re-claim replaced.
#[derive(Default)]
struct StatsCarry {
    generator: Option<Arc<Snowflake>>,
    base: SnowflakeStats,
}

/// A node's metrics: its recorder, the issued counters, the latency
/// histograms and the throughput history. See the [module docs](self).
pub(crate) struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    node: String,
    started: Instant,
    started_at: Timestamp,
    issued: ArcSwap<IssuedMap>,
    issued_insert: Mutex<()>,
    /// Histograms by route, one per status class (1xx..5xx); copy-on-write.
    latency: ArcSwap<HashMap<Box<str>, Arc<[Histogram; 5]>>>,
    latency_insert: Mutex<()>,
    /// gRPC histograms by (method, outcome); copy-on-write.
    grpc_latency: ArcSwap<HashMap<(&'static str, &'static str), Histogram>>,
    grpc_latency_insert: Mutex<()>,
    /// `StreamIds` calls open now.
    grpc_streams_open: AtomicU64,
    carry: Mutex<StatsCarry>,
    /// `(when, issued total)`, one a second, oldest first.
    samples: Mutex<VecDeque<(Instant, u64)>>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn key(name: &'static str, labels: Vec<Label>) -> Key {
    Key::from_parts(name, labels)
}

fn label(name: &'static str, value: impl Into<String>) -> Label {
    Label::new(name, value.into())
}

impl Metrics {
    /// A fresh recorder for the node named `node`.
    pub(crate) fn new(node: String) -> Metrics {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(HTTP_LATENCY.to_owned()), LATENCY_BUCKETS)
            // Fails only for an empty list; LATENCY_BUCKETS is a non-empty constant.
            .expect("LATENCY_BUCKETS is not empty")
            .set_buckets_for_metric(Matcher::Full(GRPC_LATENCY.to_owned()), LATENCY_BUCKETS)
            .expect("LATENCY_BUCKETS is not empty")
            .build_recorder();
        for (name, unit, text) in COUNTER_HELP {
            recorder.describe_counter((*name).into(), Some(*unit), (*text).into());
        }
        for (name, text) in GAUGE_HELP {
            recorder.describe_gauge((*name).into(), None, (*text).into());
        }
        for (name, _, text) in STATS_HELP {
            recorder.describe_counter((*name).into(), Some(Unit::Count), (*text).into());
        }
        let handle = recorder.handle();
        Metrics {
            recorder,
            handle,
            node,
            started: Instant::now(),
            started_at: Timestamp::now(),
            issued: ArcSwap::from_pointee(IssuedMap::default()),
            issued_insert: Mutex::new(()),
            latency: ArcSwap::from_pointee(HashMap::new()),
            latency_insert: Mutex::new(()),
            grpc_latency: ArcSwap::from_pointee(HashMap::new()),
            grpc_latency_insert: Mutex::new(()),
            grpc_streams_open: AtomicU64::new(0),
            carry: Mutex::new(StatsCarry::default()),
            samples: Mutex::new(VecDeque::with_capacity(SAMPLES_KEPT)),
        }
    }

    /// This node, as the registry knows it.
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// When the server started, and how long ago.
    pub(crate) fn started(&self) -> (Timestamp, Duration) {
        (self.started_at, self.started.elapsed())
    }

    fn counter(&self, key: &Key) -> Counter {
        self.recorder.register_counter(key, &METADATA)
    }

    fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        self.recorder.register_gauge(&key(name, labels), &METADATA)
    }

    // ---- IDs issued ----

    /// Counts `n_ids` IDs of `key` made by `strategy` (one call per request).
    /// `key` gets its own series when it is `named` (configured, or a segment
    /// key the store knows); otherwise it counts under `key="*"`.
    #[inline]
    pub(crate) fn count_issued(&self, key: &str, named: bool, strategy: Strategy, n_ids: u64) {
        self.with_issued_cell(key, named, strategy, |cell| {
            cell.n_ids.fetch_add(n_ids, Ordering::Relaxed);
        });
    }

    /// The counter of `key`'s IDs of `strategy`, for a caller that adds to it
    /// many times; `named` as for [`Metrics::count_issued`].
    pub(crate) fn issued_counter(
        &self,
        key: &str,
        named: bool,
        strategy: Strategy,
    ) -> IssuedCounter {
        IssuedCounter(self.with_issued_cell(key, named, strategy, Arc::clone))
    }

    /// Calls `f` with the cell that counts `key`'s IDs of `strategy` (the
    /// `other` key's when `key` is not `named`, or past [`MAX_KEYS`]): by
    /// reference, so counting one request clones no `Arc`.
    fn with_issued_cell<R>(
        &self,
        key: &str,
        named: bool,
        strategy: Strategy,
        f: impl FnOnce(&Arc<IssuedCell>) -> R,
    ) -> R {
        let key = if named { key } else { OTHER_KEY };
        let strategy = strategy.name();
        if let Some(cells) = self.issued.load().get(key)
            && let Some(cell) = cells.iter().find(|c| c.strategy == strategy)
        {
            return f(cell);
        }
        f(&self.insert_issued(key, strategy))
    }

    #[cold]
    fn insert_issued(&self, key: &str, strategy: &'static str) -> Arc<IssuedCell> {
        let _one_writer = lock(&self.issued_insert);
        let current = self.issued.load_full();
        let key = if current.contains_key(key) || current.len() < MAX_KEYS {
            key
        } else {
            OTHER_KEY
        };
        if let Some(cell) = current
            .get(key)
            .and_then(|cells| cells.iter().find(|c| c.strategy == strategy))
        {
            return cell.clone();
        }
        let cell = Arc::new(IssuedCell {
            strategy,
            n_ids: AtomicU64::new(0),
            exported: self.counter(&self::key(
                ISSUED,
                vec![label("key", key), label("strategy", strategy)],
            )),
        });
        let mut next = IssuedMap::clone(&current);
        next.entry(key.into()).or_default().push(cell.clone());
        self.issued.store(Arc::new(next));
        cell
    }

    /// IDs issued so far: per (key, strategy), sorted, and the total.
    pub(crate) fn issued(&self) -> (Vec<(String, &'static str, u64)>, u64) {
        let map = self.issued.load();
        let mut rows: Vec<(String, &'static str, u64)> = map
            .iter()
            .flat_map(|(key, cells)| {
                cells
                    .iter()
                    .map(|c| (key.to_string(), c.strategy, c.n_ids.load(Ordering::Relaxed)))
            })
            .collect();
        rows.sort();
        let total = rows.iter().map(|r| r.2).sum();
        (rows, total)
    }

    fn issued_total(&self) -> u64 {
        self.issued
            .load()
            .values()
            .flatten()
            .map(|c| c.n_ids.load(Ordering::Relaxed))
            .sum()
    }

    // ---- Throughput ----

    /// Records the issued total now (the sampler calls this once a second).
    fn sample(&self) {
        let total = self.issued_total();
        let mut samples = lock(&self.samples);
        if samples.len() == SAMPLES_KEPT {
            samples.pop_front();
        }
        samples.push_back((Instant::now(), total));
    }

    /// IDs per second over the last [`RATE_WINDOW`] seconds (or since the
    /// first sample), and per-second rates over the last minute, oldest first.
    pub(crate) fn throughput(&self) -> (f64, Vec<f64>) {
        let now = (Instant::now(), self.issued_total());
        let samples = lock(&self.samples);
        let rate = |from: (Instant, u64), to: (Instant, u64)| {
            let secs = to.0.saturating_duration_since(from.0).as_secs_f64();
            if secs > 0.0 {
                to.1.saturating_sub(from.1) as f64 / secs
            } else {
                0.0
            }
        };
        let recent = samples
            .iter()
            .rev()
            .nth(RATE_WINDOW - 1)
            .or_else(|| samples.front())
            .map_or(0.0, |&from| rate(from, now));
        let history = samples
            .iter()
            .zip(samples.iter().skip(1))
            .map(|(&a, &b)| rate(a, b))
            .collect();
        (recent, history)
    }

    // ---- HTTP latency ----

    /// The latency histograms of `route`, one per status class (1xx to 5xx).
    pub(crate) fn route_histograms(&self, route: &str) -> Arc<[Histogram; 5]> {
        match self.latency.load().get(route) {
            Some(h) => h.clone(),
            None => self.insert_route(route),
        }
    }

    #[cold]
    fn insert_route(&self, route: &str) -> Arc<[Histogram; 5]> {
        let _one_writer = lock(&self.latency_insert);
        let current = self.latency.load_full();
        if let Some(h) = current.get(route) {
            return h.clone();
        }
        let histograms: Arc<[Histogram; 5]> = Arc::new(std::array::from_fn(|class| {
            self.recorder.register_histogram(
                &key(
                    HTTP_LATENCY,
                    vec![
                        label("route", route),
                        label("status", format!("{}xx", class + 1)),
                    ],
                ),
                &METADATA,
            )
        }));
        let mut next = HashMap::clone(&current);
        next.insert(route.into(), histograms.clone());
        self.latency.store(Arc::new(next));
        histograms
    }

    // ---- gRPC ----

    /// Records a gRPC call's latency under its method and outcome (`ok` or the
    /// status code's name).
    pub(crate) fn record_grpc_latency(
        &self,
        method: &'static str,
        outcome: &'static str,
        elapsed: Duration,
    ) {
        if let Some(h) = self.grpc_latency.load().get(&(method, outcome)) {
            h.record(elapsed.as_secs_f64());
            return;
        }
        self.insert_grpc(method, outcome)
            .record(elapsed.as_secs_f64());
    }

    #[cold]
    fn insert_grpc(&self, method: &'static str, outcome: &'static str) -> Histogram {
        let _one_writer = lock(&self.grpc_latency_insert);
        let current = self.grpc_latency.load_full();
        if let Some(h) = current.get(&(method, outcome)) {
            return h.clone();
        }
        let histogram = self.recorder.register_histogram(
            &key(
                GRPC_LATENCY,
                vec![label("method", method), label("code", outcome)],
            ),
            &METADATA,
        );
        let mut next = HashMap::clone(&current);
        next.insert((method, outcome), histogram.clone());
        self.grpc_latency.store(Arc::new(next));
        histogram
    }

    /// A `StreamIds` call opened.
    pub(crate) fn grpc_stream_opened(&self) {
        self.grpc_streams_open.fetch_add(1, Ordering::Relaxed);
    }

    /// A `StreamIds` call ended (finished, failed or cancelled).
    pub(crate) fn grpc_stream_closed(&self) {
        self.grpc_streams_open.fetch_sub(1, Ordering::Relaxed);
    }

    // ---- Failures ----

    fn registry_errors(&self, registry: &'static str, operation: &'static str) -> Counter {
        self.counter(&key(
            REGISTRY_ERRORS,
            vec![label("registry", registry), label("operation", operation)],
        ))
    }

    fn registry_error(&self, registry: &'static str, operation: &'static str) {
        self.registry_errors(registry, operation).increment(1);
    }

    fn lease_failure(&self, store: &'static str, key_name: &str) {
        self.counter(&key(
            LEASE_FAILURES,
            vec![label("store", store), label("key", key_name)],
        ))
        .increment(1);
    }

    // ---- Scrape ----

    /// The snowflake counters so far, monotonic across generators a re-claim
    /// replaced.
    pub(crate) fn snowflake_stats(&self, current: Arc<Snowflake>) -> SnowflakeStats {
        let mut carry = lock(&self.carry);
        if let Some(previous) = &carry.generator
            && !Arc::ptr_eq(previous, &current)
        {
            carry.base = add_stats(carry.base, previous.stats());
        }
        let stats = add_stats(carry.base, current.stats());
        carry.generator = Some(current);
        stats
    }

    /// `GET /metrics`: reads the scrape-time values into the recorder and renders.
    pub(crate) fn render(&self, state: &AppState) -> String {
        self.collect(state);
        self.handle.render()
    }

    fn collect(&self, state: &AppState) {
        for cells in self.issued.load().values() {
            for cell in cells {
                cell.exported.absolute(cell.n_ids.load(Ordering::Relaxed));
            }
        }

        let s = state.worker.status();
        let registry = || vec![label("registry", s.registry)];
        self.gauge("idmint_worker_id", registry())
            .set(f64::from(s.worker));
        self.gauge("idmint_worker_lease_held", registry())
            .set(if s.lease == LeaseState::Held {
                1.0
            } else {
                0.0
            });
        if let Some(left) = s.lease_left {
            self.gauge("idmint_worker_lease_seconds_left", registry())
                .set(left.as_secs_f64());
        }
        self.gauge("idmint_worker_generation", registry())
            .set(s.generation as f64);
        let now = state.clock.now_nanos();
        if let Some(mark) = s.mark {
            self.gauge("idmint_snowflake_mark_lead_seconds", vec![])
                .set(lead_seconds(mark, now));
        }
        if let Some(mark) = s.persisted_mark {
            self.gauge("idmint_snowflake_persisted_mark_lead_seconds", vec![])
                .set(lead_seconds(mark, now));
        }
        self.gauge(
            "idmint_clock_drift_seconds",
            vec![label("clock", state.clock.source().name())],
        )
        .set(state.clock.drift() as f64 / 1e9);
        if let Some(end) = state.layout.runs_out_at() {
            self.gauge(
                "idmint_layout_seconds_left",
                vec![label("layout", state.layout_text.clone())],
            )
            .set(lead_seconds(end, now));
        }
        // The same answer as `/readyz`, so an alert can watch it without probing.
        let ready = crate::ready::not_ready_reason(state).is_none();
        self.gauge("idmint_ready", vec![])
            .set(if ready { 1.0 } else { 0.0 });
        self.gauge("idmint_grpc_streams_open", vec![])
            .set(self.grpc_streams_open.load(Ordering::Relaxed) as f64);
        self.gauge("idmint_uptime_seconds", vec![])
            .set(self.started.elapsed().as_secs_f64());
        self.gauge(
            "idmint_build_info",
            vec![label("version", env!("CARGO_PKG_VERSION"))],
        )
        .set(1.0);

        if let Some(tls) = &state.tls {
            let (reloads, failures) = tls.reload_counts();
            self.counter(&key(TLS_RELOADS, vec![])).absolute(reloads);
            self.counter(&key(TLS_RELOAD_FAILURES, vec![]))
                .absolute(failures);
            self.gauge("idmint_tls_cert_not_after_timestamp_seconds", vec![])
                .set(tls.cert().not_after as f64);
        }

        let stats = self.snowflake_stats(state.worker.generator());
        for (name, read, _) in STATS_HELP {
            self.counter(&key(name, vec![])).absolute(read(&stats));
        }

        for k in state.segments.served_keys() {
            let labels = || vec![label("key", k.key.clone())];
            let (current, next) = buffer_fill(&k);
            self.gauge("idmint_segment_ids_left", labels())
                .set((current + next) as f64);
            self.gauge("idmint_segment_next_loaded", labels())
                .set(if k.next.is_some() { 1.0 } else { 0.0 });
            self.gauge("idmint_segment_step", labels())
                .set(k.step as f64);
        }
    }
}

fn add_stats(a: SnowflakeStats, b: SnowflakeStats) -> SnowflakeStats {
    SnowflakeStats {
        exhaustion_waits: a.exhaustion_waits + b.exhaustion_waits,
        clock_behind: a.clock_behind + b.clock_behind,
        clock_behind_waits: a.clock_behind_waits + b.clock_behind_waits,
        rollbacks: a.rollbacks + b.rollbacks,
        history_reuses: a.history_reuses + b.history_reuses,
    }
}

type StatField = fn(&SnowflakeStats) -> u64;

/// The snowflake generator's counters: name, field, help.
const STATS_HELP: &[(&str, StatField, &str)] = &[
    (
        "idmint_snowflake_sequence_exhaustion_waits_total",
        |s| s.exhaustion_waits,
        "times a caller waited because a tick's sequence was used up",
    ),
    (
        "idmint_snowflake_clock_behind_total",
        |s| s.clock_behind,
        "times the clock was seen behind the last issued ID (clock rollbacks seen)",
    ),
    (
        "idmint_snowflake_clock_behind_waits_total",
        |s| s.clock_behind_waits,
        "times a caller waited for the clock to catch up",
    ),
    (
        "idmint_snowflake_rollback_increments_total",
        |s| s.rollbacks,
        "rollback counter increments (rollback-bits policy)",
    ),
    (
        "idmint_snowflake_history_reuses_total",
        |s| s.history_reuses,
        "IDs issued from the history ring (history policy)",
    ),
];

/// The counters and histograms this module records, with their units and help.
const COUNTER_HELP: &[(&str, Unit, &str)] = &[
    (ISSUED, Unit::Count, "IDs issued, by key and strategy"),
    (
        HTTP_LATENCY,
        Unit::Seconds,
        "HTTP request latency (to the response head), by route and status class",
    ),
    (
        GRPC_LATENCY,
        Unit::Seconds,
        "gRPC call latency (StreamIds: to its first message), by method and outcome",
    ),
    (
        REGISTRY_ERRORS,
        Unit::Count,
        "worker registry calls that failed or timed out, by operation",
    ),
    (
        LEASE_FAILURES,
        Unit::Count,
        "segment leases (store fetches) that failed or timed out, by key",
    ),
    (
        TLS_RELOADS,
        Unit::Count,
        "TLS certificate reloads that were swapped in (SIGHUP or the files changed)",
    ),
    (
        TLS_RELOAD_FAILURES,
        Unit::Count,
        "TLS certificate reloads that failed: the previous certificate is still served",
    ),
];

const GAUGE_HELP: &[(&str, &str)] = &[
    (
        "idmint_tls_cert_not_after_timestamp_seconds",
        "when the TLS certificate served now expires, in seconds since the Unix epoch",
    ),
    (
        "idmint_worker_id",
        "the worker ID this node holds, by registry",
    ),
    (
        "idmint_worker_lease_held",
        "1 while the worker lease is held, 0 otherwise (renewing, expired, lost, stopped)",
    ),
    (
        "idmint_worker_lease_seconds_left",
        "seconds the worker lease has left",
    ),
    (
        "idmint_worker_generation",
        "generators built: 1 plus the re-claims that replaced one",
    ),
    (
        "idmint_snowflake_mark_lead_seconds",
        "how far the high-water mark IDs may reach is ahead of the clock",
    ),
    (
        "idmint_snowflake_persisted_mark_lead_seconds",
        "how far the persisted high-water mark is ahead of the clock",
    ),
    (
        "idmint_clock_drift_seconds",
        "the wall clock minus the clock IDs are made from (0 when snowflake.clock is wall)",
    ),
    (
        "idmint_layout_seconds_left",
        "seconds until the snowflake layout runs out",
    ),
    (
        "idmint_ready",
        "1 while /readyz answers ready, 0 otherwise (its body says why)",
    ),
    ("idmint_uptime_seconds", "seconds since the server started"),
    ("idmint_grpc_streams_open", "gRPC StreamIds calls open now"),
    ("idmint_build_info", "1, labeled with the version"),
    (
        "idmint_segment_ids_left",
        "IDs left in a segment key's buffers (current and next segment)",
    ),
    (
        "idmint_segment_next_loaded",
        "1 when a segment key's next segment is loaded",
    ),
    (
        "idmint_segment_step",
        "the step a segment key's next lease will use",
    ),
];

/// Seconds from `now` (clock nanoseconds) to `t`; negative when `t` is past.
pub(crate) fn lead_seconds(t: Timestamp, now: i64) -> f64 {
    (t.as_nanosecond() - i128::from(now)) as f64 / 1e9
}

/// IDs left in a key's current segment and in its loaded next segment.
pub(crate) fn buffer_fill(k: &KeyStatus) -> (u64, u64) {
    let current = k.current.map_or(0, |(_, _, left)| left);
    let next = k.next.map_or(0, |(first, last)| {
        (last.get().saturating_sub(first.get())) / k.delta.max(1) + 1
    });
    (current, next)
}

/// `key`'s issued counter, found once for a caller that issues for the same
/// key many times (a RESP connection, through `AppState::issued_counter`):
/// adding to it skips the lookups [`Metrics::count_issued`] makes.
pub(crate) struct IssuedCounter(Arc<IssuedCell>);

impl IssuedCounter {
    pub(crate) fn add(&self, n_ids: u64) {
        self.0.n_ids.fetch_add(n_ids, Ordering::Relaxed);
    }
}

/// `GET /metrics`: the Prometheus text format (version 0.0.4).
pub(crate) async fn scrape(State(state): State<Arc<AppState>>) -> Response {
    let body = state.metrics.render(&state);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

// ---- HTTP latency layer ----

/// The HTTP latency layer: times each request to its response head and
/// records it under the matched route (`route="unmatched"` for the fallback)
/// and status class.
///
/// Written by hand rather than with `axum::middleware::from_fn`, which boxes
/// every request's future and clones the boxed inner service per request:
/// under callgrind that was 7 of the 31 allocations of a single-ID request.
/// Here the future wraps the inner one in place, and each route's histograms
/// are looked up once, on its first request.
#[derive(Clone)]
pub(crate) struct LatencyLayer {
    metrics: Arc<Metrics>,
}

impl LatencyLayer {
    pub(crate) fn new(metrics: Arc<Metrics>) -> LatencyLayer {
        LatencyLayer { metrics }
    }
}

impl<S> tower_layer::Layer<S> for LatencyLayer {
    type Service = Latency<S>;

    fn layer(&self, inner: S) -> Latency<S> {
        Latency {
            inner,
            metrics: self.metrics.clone(),
            histograms: Arc::default(),
        }
    }
}

/// [`LatencyLayer`]'s service around one route (axum layers each route).
#[derive(Clone)]
pub(crate) struct Latency<S> {
    inner: S,
    metrics: Arc<Metrics>,
    /// This route's histograms, found on its first request.
    histograms: Arc<OnceLock<Arc<[Histogram; 5]>>>,
}

impl<S, B> tower_service::Service<axum::http::Request<B>> for Latency<S>
where
    S: tower_service::Service<axum::http::Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = LatencyFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        let histograms = self
            .histograms
            .get_or_init(|| {
                let route = req.extensions().get::<MatchedPath>();
                let route = route.map_or("unmatched", MatchedPath::as_str);
                self.metrics.route_histograms(route)
            })
            .clone();
        LatencyFuture {
            started: Instant::now(),
            inner: self.inner.call(req),
            histograms,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner response future, timed.
    pub(crate) struct LatencyFuture<F> {
        #[pin]
        inner: F,
        started: Instant,
        histograms: Arc<[Histogram; 5]>,
    }
}

impl<F, E> Future for LatencyFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        if let Ok(response) = &result {
            record_latency(this.histograms, response.status(), this.started.elapsed());
        }
        Poll::Ready(result)
    }
}

/// Records one request's latency in the histogram of its status class.
pub(crate) fn record_latency(histograms: &[Histogram; 5], status: StatusCode, elapsed: Duration) {
    let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
    histograms[class].record(elapsed.as_secs_f64());
}

// ---- Sampler ----

/// Owns the task that samples the issued total once a second (the status
/// page's throughput) and drains the latency histograms' buffers into their
/// buckets (the recorder's upkeep, so an unscraped server's memory stays flat).
/// Dropping it stops the task.
#[derive(Debug)]
pub(crate) struct SamplerGuard(JoinHandle<()>);

impl SamplerGuard {
    /// Starts the sampler.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub(crate) fn spawn(metrics: Arc<Metrics>) -> SamplerGuard {
        SamplerGuard(tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                metrics.sample();
                metrics.handle.run_upkeep();
            }
        }))
    }
}

impl Drop for SamplerGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

// ---- Counting wrappers ----

/// Counts a call as failed unless it is disarmed: a call dropped before it
/// finishes (the caller's timeout) counts too.
struct FailureGuard<F: FnMut()> {
    on_failure: Option<F>,
}

impl<F: FnMut()> FailureGuard<F> {
    fn new(on_failure: F) -> Self {
        FailureGuard {
            on_failure: Some(on_failure),
        }
    }

    fn finish<T, E>(mut self, result: Result<T, E>) -> Result<T, E> {
        if result.is_ok() {
            self.on_failure = None;
        }
        result
    }
}

impl<F: FnMut()> Drop for FailureGuard<F> {
    fn drop(&mut self) {
        if let Some(f) = &mut self.on_failure {
            f();
        }
    }
}

/// A [`WorkerRegistry`] that counts failed calls in
/// `idmint_registry_errors_total` and otherwise is the registry it wraps.
#[derive(Debug)]
pub(crate) struct CountingRegistry {
    inner: Arc<dyn WorkerRegistry>,
    metrics: Arc<Metrics>,
}

impl CountingRegistry {
    /// Wraps `inner`. The error counters of the keeper's calls start at 0,
    /// so `rate()` works before the first failure.
    pub(crate) fn wrap(
        inner: Arc<dyn WorkerRegistry>,
        metrics: Arc<Metrics>,
    ) -> Arc<dyn WorkerRegistry> {
        for operation in ["claim", "renew", "persist_mark", "peers", "release"] {
            // Registering shows the series at 0.
            metrics
                .registry_errors(inner.kind(), operation)
                .increment(0);
        }
        Arc::new(CountingRegistry { inner, metrics })
    }

    fn guard(&self, operation: &'static str) -> FailureGuard<impl FnMut() + '_> {
        let registry = self.inner.kind();
        FailureGuard::new(move || self.metrics.registry_error(registry, operation))
    }
}

type RegistryResult<T> = idmint_registry::Result<T>;

#[async_trait]
impl WorkerRegistry for CountingRegistry {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> RegistryResult<Claim> {
        let guard = self.guard("claim");
        guard.finish(self.inner.claim(node, range).await)
    }

    async fn claim_worker(
        &self,
        node: &NodeIdentity,
        worker: u32,
        range: u32,
    ) -> RegistryResult<Claim> {
        let guard = self.guard("claim_worker");
        guard.finish(self.inner.claim_worker(node, worker, range).await)
    }

    async fn renew(&self, claim: &Claim) -> RegistryResult<Option<Lease>> {
        let guard = self.guard("renew");
        guard.finish(self.inner.renew(claim).await)
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> RegistryResult<()> {
        let guard = self.guard("persist_mark");
        guard.finish(self.inner.persist_mark(claim, mark, reported).await)
    }

    async fn peers(&self, claim: &Claim) -> RegistryResult<Vec<PeerReport>> {
        let guard = self.guard("peers");
        guard.finish(self.inner.peers(claim).await)
    }

    async fn release(&self, claim: &Claim) -> RegistryResult<()> {
        let guard = self.guard("release");
        guard.finish(self.inner.release(claim).await)
    }

    /// Not counted: the listing is for the status page, not the keeper, and a
    /// registry that can't list would otherwise read as failing in alerts.
    async fn fleet(&self) -> RegistryResult<Vec<FleetMember>> {
        self.inner.fleet().await
    }
}

/// A [`SegmentStore`] that counts failed leases (`fetch`) in
/// `idmint_segment_lease_failures_total` and otherwise is the store it wraps.
#[derive(Debug)]
pub(crate) struct CountingStore {
    inner: Arc<dyn SegmentStore>,
    metrics: Arc<Metrics>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub(crate) fn wrap(
        inner: Arc<dyn SegmentStore>,
        metrics: Arc<Metrics>,
    ) -> Arc<dyn SegmentStore> {
        Arc::new(CountingStore { inner, metrics })
    }
}

type SegmentResult<T> = idmint_segment::Result<T>;

#[async_trait]
impl SegmentStore for CountingStore {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn fetch(&self, key: &str, step: Option<u64>) -> SegmentResult<SegmentGrant> {
        let store = self.inner.kind();
        let guard = FailureGuard::new(|| self.metrics.lease_failure(store, key));
        guard.finish(self.inner.fetch(key, step).await)
    }

    async fn describe(&self, key: &str) -> SegmentResult<Option<KeyInfo>> {
        self.inner.describe(key).await
    }

    async fn create(&self, key: &NewKey) -> SegmentResult<KeyInfo> {
        self.inner.create(key).await
    }

    async fn list(&self) -> SegmentResult<Vec<KeyInfo>> {
        self.inner.list().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Metrics {
        Metrics::new("test (127.0.0.1:1)".to_owned())
    }

    /// Every metric the server describes: the alert rules and the dashboard in
    /// `deploy/` may name only these.
    fn described_names() -> Vec<&'static str> {
        let mut names: Vec<&str> = COUNTER_HELP.iter().map(|(name, _, _)| *name).collect();
        names.extend(GAUGE_HELP.iter().map(|(name, _)| *name));
        names.extend(STATS_HELP.iter().map(|(name, _, _)| *name));
        names
    }

    /// The `idmint_*` names a text mentions, histogram suffixes removed.
    fn names_in(text: &str) -> std::collections::BTreeSet<String> {
        let mut found = std::collections::BTreeSet::new();
        let mut rest = text;
        while let Some(at) = rest.find("idmint_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            let name = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|base| *base == HTTP_LATENCY || *base == GRPC_LATENCY)
                .unwrap_or(name);
            // `idmint_*` in prose names the family, not a metric.
            if name.len() > "idmint_".len() {
                found.insert(name.to_owned());
            }
            rest = &tail[end..];
        }
        found
    }

    #[test]
    fn deploy_alerts_and_dashboard_name_only_exported_metrics() {
        let known = described_names();
        for file in [
            "prometheus/idmint-alerts.yml",
            "prometheus/idmint-alerts.test.yml",
            "grafana/idmint-dashboard.json",
        ] {
            let path = format!("{}/../../deploy/{file}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let names = names_in(&text);
            assert!(names.len() >= 5, "{file} names only {names:?}");
            let unknown: Vec<_> = names
                .iter()
                .filter(|n| !known.contains(&n.as_str()))
                .collect();
            assert!(
                unknown.is_empty(),
                "{file} names metrics the server does not export: {unknown:?}"
            );
        }
    }

    #[test]
    fn issued_counts_per_key_and_strategy() {
        let m = metrics();
        m.count_issued("order", true, Strategy::Segment, 100);
        m.count_issued("order", true, Strategy::Segment, 5);
        m.count_issued("order", true, Strategy::Snowflake, 1);
        m.count_issued("whatever", false, Strategy::Snowflake, 2);
        let (rows, total) = m.issued();
        assert_eq!(total, 108);
        assert_eq!(
            rows,
            vec![
                ("*".to_owned(), "snowflake", 2),
                ("order".to_owned(), "segment", 105),
                ("order".to_owned(), "snowflake", 1),
            ]
        );
    }

    #[test]
    fn keys_beyond_the_cap_share_one_series() {
        let m = metrics();
        for i in 0..MAX_KEYS + 10 {
            m.count_issued(&format!("k{i}"), true, Strategy::Segment, 1);
        }
        let (rows, total) = m.issued();
        assert_eq!(total, (MAX_KEYS + 10) as u64);
        assert_eq!(rows.len(), MAX_KEYS + 1);
        assert!(rows.contains(&("*".to_owned(), "segment", 10)), "{rows:?}");
    }

    #[test]
    fn two_recorders_keep_separate_numbers() {
        let (a, b) = (metrics(), metrics());
        a.count_issued("order", true, Strategy::Segment, 7);
        for cells in a.issued.load().values() {
            for c in cells {
                c.exported.absolute(c.n_ids.load(Ordering::Relaxed));
            }
        }
        assert!(
            a.handle
                .render()
                .contains(r#"idmint_ids_issued_total{key="order",strategy="segment"} 7"#),
            "{}",
            a.handle.render()
        );
        assert!(!b.handle.render().contains("idmint_ids_issued_total{"));
    }

    #[test]
    fn latency_is_a_histogram_per_route_and_class() {
        let m = metrics();
        let route = m.route_histograms("/v1/ids/{key}");
        record_latency(&route, StatusCode::OK, Duration::from_micros(300));
        record_latency(&route, StatusCode::NOT_FOUND, Duration::from_millis(2));
        m.handle.run_upkeep();
        let text = m.handle.render();
        assert!(
            text.contains(
                r#"idmint_http_request_duration_seconds_bucket{route="/v1/ids/{key}",status="2xx",le="0.0005"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"idmint_http_request_duration_seconds_count{route="/v1/ids/{key}",status="4xx"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn throughput_from_samples() {
        let m = metrics();
        m.sample();
        m.count_issued("a", true, Strategy::Snowflake, 1000);
        std::thread::sleep(Duration::from_millis(20));
        m.sample();
        let (rate, history) = m.throughput();
        assert!(rate > 0.0);
        assert_eq!(history.len(), 1);
        assert!(history[0] > 1000.0, "{history:?}");
    }

    #[tokio::test]
    async fn failed_leases_are_counted_per_key() {
        let m = Arc::new(metrics());
        let store = CountingStore::wrap(Arc::new(idmint_segment::MemoryStore::new()), m.clone());
        store.create(&NewKey::new("order", 10)).await.unwrap();
        assert!(store.fetch("order", None).await.is_ok());
        assert!(store.fetch("missing", None).await.is_err());
        assert!(store.fetch("missing", None).await.is_err());
        let text = m.handle.render();
        assert!(
            text.contains(r#"idmint_segment_lease_failures_total{store="memory",key="missing"} 2"#),
            "{text}"
        );
        assert!(!text.contains(r#"key="order""#), "{text}");
    }

    #[test]
    fn failure_guard_counts_errors_and_drops() {
        let count = std::cell::Cell::new(0);
        let bump = || count.set(count.get() + 1);
        let _ = FailureGuard::new(bump).finish(Ok::<(), ()>(()));
        let _ = FailureGuard::new(bump).finish(Err::<(), ()>(()));
        drop(FailureGuard::new(bump));
        assert_eq!(count.get(), 2);
    }
}
