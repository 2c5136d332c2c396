//! What `GET /metrics` reads at scrape time from the parts that own it (the
//! worker's status and generator, the clock, the layout, the TLS
//! certificate, the segment buffers) and renders with the recorder's own
//! counters.
//!
//! The HTTP handler hands it those parts as [`Readings`], so the metrics know
//! nothing of the server's shared state.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use idmint_core::clock::Clock;
use idmint_core::{Layout, Snowflake, SnowflakeStats};
use idmint_registry::{LeaseState, OracleStatus, Role, WorkerHandle};
use idmint_segment::{KeyStatus, SegmentAllocator};
use jiff::Timestamp;

use super::{
    Metrics, ORACLE_IDS, ORACLE_LEADER_CHANGES, STATS_HELP, TLS_RELOAD_FAILURES, TLS_RELOADS, key,
    label, lock,
};
use crate::tls::Tls;
use idmint_node::IdClock;

/// What a scrape reads besides the recorder's own counters: borrowed from
/// the server's parts for the one scrape.
pub(crate) struct Readings<'a> {
    pub worker: &'a WorkerHandle,
    pub clock: &'a IdClock,
    pub layout: &'a Layout,
    /// The layout's name, the `layout` label.
    pub layout_text: &'a str,
    /// `/readyz`'s answer: ready or not.
    pub ready: bool,
    pub tls: Option<&'a Tls>,
    pub segments: &'a SegmentAllocator,
    /// The timestamp oracle, when a key is monotonic.
    pub oracle: Option<OracleReadings>,
}

/// The oracle's part of a scrape.
pub(crate) struct OracleReadings {
    pub status: OracleStatus,
    /// IDs reserved on this node as the leader.
    pub reserved_here: u64,
    /// IDs forwarded to the leader.
    pub forwarded: u64,
}

impl Metrics {
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
    pub(crate) fn render(&self, state: &Readings<'_>) -> String {
        self.collect(state);
        self.handle.render()
    }

    fn collect(&self, state: &Readings<'_>) {
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
                vec![label("layout", state.layout_text)],
            )
            .set(lead_seconds(end, now));
        }
        // The same answer as `/readyz`, so an alert can watch it without probing.
        let ready = state.ready;
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

        if let Some(tls) = state.tls {
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

        if let Some(oracle) = &state.oracle {
            self.collect_oracle(oracle);
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
            self.gauge("idmint_segment_refused", labels())
                .set(if k.refusal.is_some() { 1.0 } else { 0.0 });
        }
    }
}

impl Metrics {
    fn collect_oracle(&self, oracle: &OracleReadings) {
        let s = &oracle.status;
        let flag = |on: bool| if on { 1.0 } else { 0.0 };
        self.gauge("idmint_oracle_leader", vec![])
            .set(flag(s.role == Role::Leader));
        self.gauge("idmint_oracle_leader_known", vec![])
            .set(flag(s.leader.is_some()));
        if let Some(term) = s.leader.as_ref().and_then(|l| l.term) {
            self.gauge("idmint_oracle_term_timestamp_seconds", vec![])
                .set(term.as_millisecond() as f64 / 1e3);
        }
        if let Some(mark) = s.mark {
            let now = Timestamp::now().as_nanosecond();
            self.gauge("idmint_oracle_window_seconds_left", vec![])
                .set((mark.as_nanosecond() - now) as f64 / 1e9);
        }
        if let Some(d) = s.last_failover {
            self.gauge("idmint_oracle_last_failover_seconds", vec![])
                .set(d.as_secs_f64());
        }
        self.counter(&key(ORACLE_LEADER_CHANGES, vec![]))
            .absolute(s.leader_changes);
        for (path, n) in [
            ("leader", oracle.reserved_here),
            ("forwarded", oracle.forwarded),
        ] {
            self.counter(&key(ORACLE_IDS, vec![label("path", path)]))
                .absolute(n);
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
