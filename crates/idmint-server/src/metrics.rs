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
//!   a histogram per matched route and status class, recorded by
//!   [`latency::LatencyLayer`] (`metrics/latency.rs`).
//! - **gRPC latency** (`idmint_grpc_request_duration_seconds{method,code}`):
//!   a histogram per RPC and outcome (`ok`, `invalid_argument`, ...),
//!   recorded by `grpc.rs` (`metrics/grpc.rs`); open `StreamIds` calls in
//!   `idmint_grpc_streams_open`.
//! - **Read at scrape time** from their owners (`metrics/scrape.rs`): the snowflake generator's
//!   [`SnowflakeStats`] (as counters that stay monotonic across a re-claim's
//!   new generator), the clock's drift, the lease, the worker ID, the mark's
//!   lead, segment buffers and steps, the layout's time left.
//! - **Registry errors and segment lease failures**: counted by
//!   `CountingRegistry` and `CountingStore` (`backends.rs`), thin wrappers
//!   around the registry and the segment store that count failed and
//!   abandoned (timed out) calls.
//!
//! # Label cardinality
//! `key` is a segment key that exists in the store, or a key named in
//! `[keys]`; any other key (the Leaf snowflake route takes any name) and
//! keyless requests (`/v1/uuid`) are counted under `key="*"`. At most
//! [`MAX_KEYS`] distinct keys get their own series.
//!
//! # Where the parts live
//! This file is the recorder ([`Metrics`]) and what it describes; the parts
//! that feed it each have a file: `metrics/latency.rs` (the HTTP latency
//! layer), `metrics/grpc.rs` (gRPC latency and open streams),
//! `metrics/sampler.rs` (the throughput history and the recorder's upkeep)
//! and `metrics/scrape.rs` (what `GET /metrics` reads and renders). None of
//! them knows the server's shared state: a scrape is handed what it reads.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use idmint_core::{Snowflake, SnowflakeStats};
use jiff::Timestamp;
use metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use idmint_node::config::Strategy;

mod grpc;
pub(crate) mod latency;
pub(crate) mod sampler;
pub(crate) mod scrape;

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
const ORACLE_IDS: &str = "idmint_oracle_ids_total";
const ORACLE_LEADER_CHANGES: &str = "idmint_oracle_leader_changes_total";

/// Latency buckets: 50 µs to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// How many samples the throughput history keeps (a minute at one a second).
const SAMPLES_KEPT: usize = 61;

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

    /// The recorder's text as it stands, with nothing read into it first.
    #[cfg(test)]
    pub(crate) fn text(&self) -> String {
        self.handle.render()
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

    // ---- Failures (counted by `backends.rs`) ----

    pub(crate) fn registry_errors(
        &self,
        registry: &'static str,
        operation: &'static str,
    ) -> Counter {
        self.counter(&key(
            REGISTRY_ERRORS,
            vec![label("registry", registry), label("operation", operation)],
        ))
    }

    pub(crate) fn registry_error(&self, registry: &'static str, operation: &'static str) {
        self.registry_errors(registry, operation).increment(1);
    }

    pub(crate) fn lease_failure(&self, store: &'static str, key_name: &str) {
        self.counter(&key(
            LEASE_FAILURES,
            vec![label("store", store), label("key", key_name)],
        ))
        .increment(1);
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
    (
        ORACLE_IDS,
        Unit::Count,
        "monotonic IDs this node handed out, by path: reserved here as the leader \
         (its own requests and followers' forwards) or forwarded to the leader",
    ),
    (
        ORACLE_LEADER_CHANGES,
        Unit::Count,
        "times this node saw the oracle's leader change (another node or a new term)",
    ),
];

const GAUGE_HELP: &[(&str, &str)] = &[
    (
        "idmint_oracle_leader",
        "1 while this node leads the timestamp oracle (monotonic keys), 0 otherwise",
    ),
    (
        "idmint_oracle_leader_known",
        "1 while this node knows the oracle's leader (itself or another), 0 during an election",
    ),
    (
        "idmint_oracle_term_timestamp_seconds",
        "the leader's term: the first mark of its leadership, in seconds since the Unix \
         epoch; it grows from one leader to the next",
    ),
    (
        "idmint_oracle_window_seconds_left",
        "on the leader: how far the persisted window it may issue up to is ahead of now",
    ),
    (
        "idmint_oracle_last_failover_seconds",
        "how long the last time without a known leader lasted, as this node saw it",
    ),
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
    (
        "idmint_segment_refused",
        "1 while a segment key's store holds less than this node issued from it \
         (key_below_floor, store_reset): refused until raised",
    ),
];

/// `key`'s issued counter, found once for a caller that issues for the same
/// key many times (a RESP connection, through `AppState::issued_counter`):
/// adding to it skips the lookups [`Metrics::count_issued`] makes.
pub(crate) struct IssuedCounter(Arc<IssuedCell>);

impl IssuedCounter {
    pub(crate) fn add(&self, n_ids: u64) {
        self.0.n_ids.fetch_add(n_ids, Ordering::Relaxed);
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
}
