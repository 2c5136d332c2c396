//! The live status page (`GET /`) and its data (`GET /v1/status`).
//!
//! The page is one HTML file (`status.html`, no external assets): the server
//! fills in the node, version and worker ID (so the page says who it is
//! without script) and embeds the first `/v1/status` answer; a small inline
//! script renders it and fetches `/v1/status` again every 2 s, drawing the
//! throughput chart as inline SVG. `/v1/status` is public, like Leaf's
//! `/cache`: it holds no secret (no URLs, no tokens).
//!
//! The page's Fleet table is the exception: it comes from
//! `/v1/admin/fleet` (`fleet.rs`), which names every node's address and so
//! sits behind the admin token. The page asks for the token and keeps it in
//! the tab's `sessionStorage` only; without it, the table says so.
//!
//! IDs and ID counts are strings in the JSON (JavaScript loses integers above
//! 2^53); durations are numbers of milliseconds or seconds, times RFC 3339.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use idmint_core::clock::Clock;
use idmint_registry::LeaseState;
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::metrics::sampler::RATE_WINDOW;
use crate::metrics::scrape::{buffer_fill, lead_seconds};
use crate::state::AppState;

/// The layout's run-out date shows a warning when it is closer than this.
const WARN_WITHIN_SECS: f64 = 365.0 * 24.0 * 3600.0;

const PAGE: &str = include_str!("status.html");

/// `GET /v1/status`.
#[utoipa::path(
    get,
    path = "/v1/status",
    operation_id = "status",
    tag = "status",
    summary = "What the status page shows, as JSON",
    description = "No token: it holds no URL and no secret. Counts and IDs are strings; \
        durations are numbers of milliseconds or seconds; times are RFC 3339.",
    responses((status = 200, description = "Always.", body = Status)),
)]
pub(crate) async fn status(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(snapshot(&state)).into_response()
}

/// `GET /`: the status page.
#[utoipa::path(
    get,
    path = "/",
    operation_id = "statusPage",
    tag = "status",
    summary = "The live status page",
    description = "One HTML page with no external assets. It embeds the first `/v1/status` \
        answer and fetches it again every 2 s; its Fleet table reads `/v1/admin/fleet`, so \
        it asks for the admin token and keeps it in the tab's `sessionStorage` only.",
    responses((status = 200, description = "Always.", body = String, content_type = "text/html; charset=utf-8",
        headers(("Cache-Control" = String, description = "`no-store`")))),
)]
pub(crate) async fn page(State(state): State<Arc<AppState>>) -> Response {
    let snapshot = snapshot(&state);
    let worker = snapshot.worker.id.to_string();
    // `</script>` can't end the embedded JSON early: `<` is escaped.
    let embedded = serde_json::to_string(&snapshot)
        .expect("the status serializes")
        .replace('<', "\\u003c");
    let html = fill(
        PAGE,
        &[
            ("NODE", &escape(state.metrics.node())),
            ("VERSION", env!("CARGO_PKG_VERSION")),
            ("WORKER", &escape(&worker)),
            ("STATUS_JSON", &embedded),
        ],
    );
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

/// The template with each `{{NAME}}` replaced by its value, in one pass (so
/// a value is never searched for placeholders). Unknown names stay as they are.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 4096);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let value = after.find("}}").and_then(|end| {
            let name = &after[..end];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v, end + 2))
        });
        match value {
            Some((value, used)) => {
                out.push_str(value);
                rest = &after[used..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// HTML-escapes text for element content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn ms(secs: f64) -> f64 {
    (secs * 1000.0 * 1000.0).round() / 1000.0
}

/// What `/v1/status` answers. Its fields, and theirs, are in alphabetical order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Status {
    /// The clock IDs are made from.
    clock: ClockStatus,
    /// IDs issued since the start, per key and in total.
    issued: IssuedStatus,
    /// The layout and its capacity.
    layout: LayoutStatus,
    /// The worker's high-water mark.
    mark: MarkStatus,
    /// The timestamp oracle's state; `null` without monotonic keys.
    #[schema(value_type = Option<Object>)]
    monotonic: Option<Value>,
    /// The node's identity (`host (address)`).
    node: String,
    /// The time by the ID clock (RFC 3339).
    now: Option<String>,
    /// Each served segment key's buffers.
    segments: Vec<SegmentStatus>,
    /// The snowflake generator's counters.
    snowflake: SnowflakeStatus,
    /// When the server started (RFC 3339).
    started_at: String,
    /// IDs per second.
    throughput: Throughput,
    /// The certificate served and how reloads went; `null` without TLS.
    #[schema(value_type = Option<Object>)]
    tls: Option<Value>,
    /// Whole seconds since the start.
    uptime_seconds: f64,
    /// The server's version.
    version: &'static str,
    /// The worker and its lease.
    worker: WorkerStatus,
}

/// `/v1/status`'s `clock`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ClockStatus {
    /// The monotonic clock's drift from the wall clock, in milliseconds.
    drift_ms: f64,
    /// Why the clock keeps the node from being ready, if it does.
    not_ready: Option<String>,
    /// `snowflake.clock`: `monotonic` or `wall`.
    source: &'static str,
}

/// `/v1/status`'s `issued`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct IssuedStatus {
    /// Per key.
    keys: Vec<IssuedKey>,
    /// In total, as a decimal string.
    total: String,
}

/// IDs issued for one key.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct IssuedKey {
    /// How many, as a decimal string.
    count: String,
    /// The key (empty for `/v1/uuid`).
    key: String,
    /// Its strategy.
    strategy: &'static str,
}

/// `/v1/status`'s `layout`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LayoutStatus {
    /// Whole days until the layout runs out; `null` if it never does.
    days_left: Option<f64>,
    /// The most IDs one worker can make per second.
    ids_per_second_per_worker: f64,
    /// The layout, in its text form.
    name: String,
    /// When the layout runs out (RFC 3339); `null` if it never does.
    runs_out_at: Option<String>,
    /// Whether that is less than a year away.
    runs_out_within_a_year: bool,
    /// How many workers the layout has room for, as a decimal string.
    workers: String,
}

/// `/v1/status`'s `mark`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MarkStatus {
    /// How far the mark is ahead of now, in milliseconds.
    lead_ms: Option<f64>,
    /// The high-water mark IDs may reach (RFC 3339).
    mark: Option<String>,
    /// The mark the registry has durably accepted (RFC 3339).
    persisted: Option<String>,
    /// How far the persisted mark is ahead of now, in milliseconds.
    persisted_lead_ms: Option<f64>,
}

/// A served segment key's buffers.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SegmentStatus {
    /// The segment handed out from now.
    current: Option<CurrentSegment>,
    /// Issue only IDs with `id % delta == remainder`.
    delta: u64,
    /// IDs left in both segments, as a decimal string.
    ids_left: String,
    /// The key.
    key: String,
    /// The last failure to lease a segment, if any.
    last_error: Option<String>,
    /// Whether the next segment is being leased now.
    loading: bool,
    /// The smallest step the dynamic step goes down to.
    min_step: u64,
    /// The segment buffered next.
    next: Option<NextSegment>,
    /// `key_below_floor` or `store_reset` while the store holds less than
    /// this node issued from the key: its requests are refused until an
    /// operator raises it (`idmint segment raise`); else `null`.
    refusal: Option<&'static str>,
    /// See `delta`.
    remainder: u64,
    /// The segment size now.
    step: u64,
}

/// The segment a key hands out from (`/v1/status`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = StatusCurrentSegment)]
pub(crate) struct CurrentSegment {
    /// Its first ID, as a decimal string.
    first: String,
    /// Its last ID, as a decimal string.
    last: String,
    /// IDs left in it, as a decimal string.
    left: String,
}

/// The segment a key has buffered next (`/v1/status`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = StatusNextSegment)]
pub(crate) struct NextSegment {
    /// Its first ID, as a decimal string.
    first: String,
    /// How many IDs it holds, as a decimal string.
    ids: String,
    /// Its last ID, as a decimal string.
    last: String,
}

/// `/v1/status`'s `snowflake`: counters since the start, as decimal strings.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SnowflakeStatus {
    /// IDs asked for while the clock was behind.
    clock_behind: String,
    /// Waits for the clock to catch up.
    clock_behind_waits: String,
    /// Waits for the next tick after a tick's sequence ran out.
    exhaustion_waits: String,
    /// Ticks reused under the `history` policy.
    history_reuses: String,
    /// Rollback counter steps under `rollback-bits`.
    rollbacks: String,
}

/// `/v1/status`'s `throughput`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Throughput {
    /// Recent rates, oldest first.
    history: Vec<f64>,
    /// The rate over the last `window_seconds`.
    ids_per_second: f64,
    /// The window of `ids_per_second`.
    window_seconds: usize,
}

/// `/v1/status`'s `worker`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = StatusWorker)]
pub(crate) struct WorkerStatus {
    /// How many times the worker was claimed in this run.
    generation: u64,
    /// Whether the lease is held.
    held: bool,
    /// The worker ID.
    id: u32,
    /// The keeper's last failure, if any.
    last_error: Option<String>,
    /// The registry can't be reached and, as it never gives this worker ID
    /// to another node (SQL `disposable` and `uid-generator`, ZooKeeper
    /// `forever`), issuing goes on; the mark catches up when it answers.
    coordinator_away: bool,
    /// The lease's state.
    lease: &'static str,
    /// Milliseconds left on the lease; `null` for a registry without expiry.
    lease_left_ms: Option<u64>,
    /// What `/readyz` answers.
    ready: bool,
    /// The worker registry.
    registry: &'static str,
}

/// What `/v1/status` answers.
pub(crate) fn snapshot(state: &AppState) -> Status {
    let metrics = &state.metrics;
    let now_nanos = state.clock.now_nanos();
    let now = jiff::Timestamp::from_nanosecond(i128::from(now_nanos)).ok();
    let s = state.worker.status();
    let (started_at, uptime) = metrics.started();

    let layout = &state.layout;
    let runs_out = layout.runs_out_at();
    let secs_left = runs_out.map(|t| lead_seconds(t, now_nanos));
    let stats = metrics.snowflake_stats(state.worker.generator());

    let segments: Vec<SegmentStatus> = state
        .segments
        .served_keys()
        .iter()
        .map(|k| {
            let (current_left, next_ids) = buffer_fill(k);
            SegmentStatus {
                current: k.current.map(|(first, last, left)| CurrentSegment {
                    first: first.get().to_string(),
                    last: last.get().to_string(),
                    left: left.to_string(),
                }),
                delta: k.delta,
                ids_left: (current_left + next_ids).to_string(),
                key: k.key.clone(),
                last_error: k.last_error.clone(),
                loading: k.loading,
                min_step: k.min_step,
                next: k.next.map(|(first, last)| NextSegment {
                    first: first.get().to_string(),
                    ids: next_ids.to_string(),
                    last: last.get().to_string(),
                }),
                refusal: k.refusal,
                remainder: k.remainder,
                step: k.step,
            }
        })
        .collect();

    let (per_key, total) = metrics.issued();
    let (rate, history) = metrics.throughput();

    Status {
        clock: ClockStatus {
            drift_ms: ms(state.clock.drift() as f64 / 1e9),
            not_ready: crate::ready::clock_not_ready(state),
            source: state.clock.source().name(),
        },
        issued: IssuedStatus {
            keys: per_key
                .into_iter()
                .map(|(key, strategy, n)| IssuedKey {
                    count: n.to_string(),
                    key,
                    strategy,
                })
                .collect(),
            total: total.to_string(),
        },
        layout: LayoutStatus {
            days_left: secs_left.map(|s| (s / 86_400.0).floor()),
            ids_per_second_per_worker: layout.ids_per_second_per_worker(),
            name: state.layout_text.clone(),
            runs_out_at: runs_out.map(|t| t.to_string()),
            runs_out_within_a_year: secs_left.is_some_and(|s| s < WARN_WITHIN_SECS),
            workers: layout.workers().to_string(),
        },
        mark: MarkStatus {
            lead_ms: s.mark.map(|t| ms(lead_seconds(t, now_nanos))),
            mark: s.mark.map(|t| t.to_string()),
            persisted: s.persisted_mark.map(|t| t.to_string()),
            persisted_lead_ms: s.persisted_mark.map(|t| ms(lead_seconds(t, now_nanos))),
        },
        monotonic: state
            .monotonic
            .as_deref()
            .map(crate::monotonic::Monotonic::snapshot),
        node: metrics.node().to_owned(),
        now: now.map(|t| t.to_string()),
        segments,
        snowflake: SnowflakeStatus {
            clock_behind: stats.clock_behind.to_string(),
            clock_behind_waits: stats.clock_behind_waits.to_string(),
            exhaustion_waits: stats.exhaustion_waits.to_string(),
            history_reuses: stats.history_reuses.to_string(),
            rollbacks: stats.rollbacks.to_string(),
        },
        started_at: started_at.to_string(),
        throughput: Throughput {
            history: history.iter().map(|r| r.round()).collect(),
            ids_per_second: rate.round(),
            window_seconds: RATE_WINDOW,
        },
        tls: state.tls.as_deref().map(tls_status),
        uptime_seconds: uptime.as_secs_f64().floor(),
        version: env!("CARGO_PKG_VERSION"),
        worker: WorkerStatus {
            generation: s.generation,
            held: s.lease == LeaseState::Held,
            id: s.worker,
            last_error: s.last_error.clone(),
            coordinator_away: s.coordinator_away,
            lease: s.lease.name(),
            lease_left_ms: s.lease_left.map(|d| d.as_millis() as u64),
            ready: s.is_ready() && crate::ready::clock_not_ready(state).is_none(),
            registry: s.registry,
        },
    }
}

/// `/v1/status`'s `tls`: the certificate served and how reloads went.
fn tls_status(tls: &crate::tls::Tls) -> Value {
    use crate::tls::Surface;
    let cert = tls.cert();
    let (reloads, failures) = tls.reload_counts();
    let last_error = tls.last_error();
    json!({
        "listeners": {
            "http": tls.enabled(Surface::Http),
            "grpc": tls.enabled(Surface::Grpc),
            "resp": tls.enabled(Surface::Resp),
        },
        "subject": cert.subject,
        "serial": cert.serial,
        "not_after": jiff::Timestamp::from_second(cert.not_after).ok().map(|t| t.to_string()),
        "loaded_at": cert.loaded_at.to_string(),
        "reloads": reloads,
        "reload_failures": failures,
        "last_reload_error": last_error.as_ref().map(|(_, e)| e.clone()),
        "last_reload_error_at": last_error.map(|(at, _)| at.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::{escape, fill};

    #[test]
    fn fills_placeholders_once() {
        assert_eq!(
            fill("a {{X}} b {{Y}} {{Z}} {{", &[("X", "{{Y}}"), ("Y", "2")]),
            "a {{Y}} b 2 {{Z}} {{"
        );
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"<a href="x">&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }
}
