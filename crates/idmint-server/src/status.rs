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
use serde_json::{Value, json};

use crate::metrics::sampler::RATE_WINDOW;
use crate::metrics::scrape::{buffer_fill, lead_seconds};
use crate::state::AppState;

/// The layout's run-out date shows a warning when it is closer than this.
const WARN_WITHIN_SECS: f64 = 365.0 * 24.0 * 3600.0;

const PAGE: &str = include_str!("status.html");

/// `GET /v1/status`.
pub(crate) async fn status(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(snapshot(&state)).into_response()
}

/// `GET /`: the status page.
pub(crate) async fn page(State(state): State<Arc<AppState>>) -> Response {
    let snapshot = snapshot(&state);
    let worker = snapshot["worker"]["id"].to_string();
    // `</script>` can't end the embedded JSON early: `<` is escaped.
    let embedded = snapshot.to_string().replace('<', "\\u003c");
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

/// What `/v1/status` answers.
pub(crate) fn snapshot(state: &AppState) -> Value {
    let metrics = &state.metrics;
    let now_nanos = state.clock.now_nanos();
    let now = jiff::Timestamp::from_nanosecond(i128::from(now_nanos)).ok();
    let s = state.worker.status();
    let (started_at, uptime) = metrics.started();

    let layout = &state.layout;
    let runs_out = layout.runs_out_at();
    let secs_left = runs_out.map(|t| lead_seconds(t, now_nanos));
    let stats = metrics.snowflake_stats(state.worker.generator());

    let segments: Vec<Value> = state
        .segments
        .served_keys()
        .iter()
        .map(|k| {
            let (current_left, next_ids) = buffer_fill(k);
            json!({
                "key": k.key,
                "step": k.step,
                "min_step": k.min_step,
                "delta": k.delta,
                "remainder": k.remainder,
                "current": k.current.map(|(first, last, left)| json!({
                    "first": first.get().to_string(),
                    "last": last.get().to_string(),
                    "left": left.to_string(),
                })),
                "next": k.next.map(|(first, last)| json!({
                    "first": first.get().to_string(),
                    "last": last.get().to_string(),
                    "ids": next_ids.to_string(),
                })),
                "ids_left": (current_left + next_ids).to_string(),
                "loading": k.loading,
                "last_error": k.last_error,
            })
        })
        .collect();

    let (per_key, total) = metrics.issued();
    let (rate, history) = metrics.throughput();

    json!({
        "node": metrics.node(),
        "version": env!("CARGO_PKG_VERSION"),
        "now": now.map(|t| t.to_string()),
        "started_at": started_at.to_string(),
        "uptime_seconds": uptime.as_secs_f64().floor(),
        "worker": {
            "id": s.worker,
            "registry": s.registry,
            "lease": s.lease.name(),
            "held": s.lease == LeaseState::Held,
            "lease_left_ms": s.lease_left.map(|d| d.as_millis() as u64),
            "generation": s.generation,
            "ready": s.is_ready() && crate::ready::clock_not_ready(state).is_none(),
            "last_error": s.last_error,
        },
        "mark": {
            "mark": s.mark.map(|t| t.to_string()),
            "lead_ms": s.mark.map(|t| ms(lead_seconds(t, now_nanos))),
            "persisted": s.persisted_mark.map(|t| t.to_string()),
            "persisted_lead_ms": s.persisted_mark.map(|t| ms(lead_seconds(t, now_nanos))),
        },
        "clock": {
            "source": state.clock.source().name(),
            "not_ready": crate::ready::clock_not_ready(state),
            "drift_ms": ms(state.clock.drift() as f64 / 1e9),
        },
        "layout": {
            "name": state.layout_text,
            "ids_per_second_per_worker": layout.ids_per_second_per_worker(),
            "workers": layout.workers().to_string(),
            "runs_out_at": runs_out.map(|t| t.to_string()),
            "days_left": secs_left.map(|s| (s / 86_400.0).floor()),
            "runs_out_within_a_year": secs_left.is_some_and(|s| s < WARN_WITHIN_SECS),
        },
        "snowflake": {
            "exhaustion_waits": stats.exhaustion_waits.to_string(),
            "clock_behind": stats.clock_behind.to_string(),
            "clock_behind_waits": stats.clock_behind_waits.to_string(),
            "rollbacks": stats.rollbacks.to_string(),
            "history_reuses": stats.history_reuses.to_string(),
        },
        "segments": segments,
        "issued": {
            "total": total.to_string(),
            "keys": per_key.iter().map(|(key, strategy, n)| json!({
                "key": key, "strategy": strategy, "count": n.to_string(),
            })).collect::<Vec<_>>(),
        },
        "throughput": {
            "ids_per_second": rate.round(),
            "window_seconds": RATE_WINDOW,
            "history": history.iter().map(|r| r.round()).collect::<Vec<_>>(),
        },
        "tls": state.tls.as_deref().map(tls_status),
        "monotonic": state.monotonic.as_deref().map(crate::monotonic::Monotonic::snapshot),
    })
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
