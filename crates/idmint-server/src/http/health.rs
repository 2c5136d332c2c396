//! Liveness (`/healthz`), readiness (`/readyz`) and the Prometheus metrics
//! (`/metrics`).

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::Shared;
use super::error::{ApiError, ErrorBody};
use crate::metrics::scrape::Readings;
use crate::monotonic::Monotonic;

/// `GET /healthz`'s body.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// Always `ok`.
    #[schema(example = "ok")]
    status: &'static str,
}

/// `GET /healthz`: the process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "health",
    summary = "The process is up",
    responses((status = 200, description = "Always.", body = Health)),
)]
pub(super) async fn healthz() -> Response {
    axum::Json(Health { status: "ok" }).into_response()
}

/// `GET /readyz`'s body when ready.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"monotonic": null, "registry": "file", "segments_refused": [], "status": "ready", "worker": 0}))]
pub(crate) struct Ready {
    /// The timestamp oracle's state (`role`, `leader`, `term`, ...) when a
    /// key is of the `monotonic` strategy; else `null`.
    #[schema(value_type = Option<Object>)]
    monotonic: Option<Value>,
    /// The worker registry (`snowflake.registry`).
    registry: &'static str,
    /// Segment keys refused because their store holds less than this node
    /// issued (`key_below_floor`, `store_reset`); usually empty. They don't
    /// make the node unready: every node on that store refuses them alike,
    /// and the node's other keys still serve. Only an operator clears them.
    segments_refused: Vec<RefusedKey>,
    /// Always `ready`.
    status: &'static str,
    /// This node's worker ID.
    worker: u32,
}

/// A segment key `/readyz` lists as refused.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RefusedKey {
    /// The key.
    key: String,
    /// `key_below_floor` or `store_reset`.
    code: &'static str,
    /// The refusal, naming the floor and what the store holds.
    message: Option<String>,
}

/// `GET /readyz`: 200 while the worker claim is held, its mark persisted and
/// the clock not behind beyond what the clock policy absorbs; 503 with the
/// reason otherwise (a load balancer then sends traffic elsewhere).
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "health",
    summary = "Whether this node should take traffic",
    description = "200 while the layout has not run out, the worker claim is held with its \
        mark persisted, and the clock is not behind the last ID by more than the clock policy \
        absorbs. A load balancer or a Kubernetes readiness probe should watch it.",
    responses(
        (status = 200, description = "Ready.", body = Ready),
        (status = 503, description = "`not_ready`: the message is the reason.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
    ),
)]
pub(super) async fn readyz(State(state): Shared) -> Result<Response, ApiError> {
    let status = state.worker.status();
    match crate::ready::not_ready_reason(&state) {
        None => Ok(axum::Json(Ready {
            monotonic: state
                .monotonic
                .as_deref()
                .map(crate::monotonic::Monotonic::snapshot),
            registry: status.registry,
            segments_refused: state
                .segments
                .served_keys()
                .into_iter()
                .filter_map(|k| {
                    Some(RefusedKey {
                        code: k.refusal?,
                        message: k.last_error,
                        key: k.key,
                    })
                })
                .collect(),
            status: "ready",
            worker: status.worker,
        })
        .into_response()),
        Some(reason) => Err(ApiError::unavailable(
            "not_ready",
            reason,
            Duration::from_secs(1),
        )),
    }
}

/// `GET /metrics`: the Prometheus text format (version 0.0.4), read from the
/// server's parts at scrape time (`metrics/scrape.rs`).
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "status",
    summary = "Prometheus metrics",
    description = "The `idmint_*` metrics in the Prometheus text format 0.0.4. No token.",
    responses((status = 200, description = "Always.", body = String, content_type = "text/plain; version=0.0.4; charset=utf-8")),
)]
pub(super) async fn scrape(State(state): Shared) -> Response {
    let readings = Readings {
        worker: &state.worker,
        clock: &state.clock,
        layout: &state.layout,
        layout_text: &state.layout_text,
        ready: crate::ready::not_ready_reason(&state).is_none(),
        tls: state.tls.as_deref(),
        segments: &state.segments,
        oracle: state.monotonic.as_deref().map(Monotonic::readings),
    };
    let body = state.metrics.render(&readings);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
