//! The admin API, behind the bearer token `server.admin_token`: segment keys
//! listed and created (`/v1/admin/keys`), the worker and the fleet
//! (`/v1/admin/workers`, `/v1/admin/fleet`), and public IDs revealed
//! (`/v1/admin/reveal`). Errors are the HTTP API's (`ApiError`).

use std::pin::Pin;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idmint_segment::{KeyStatus, NewKey, SegmentError};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, Shared, core_error, segment_error};
use crate::config::{ADMIN_TOKEN_ENV, Strategy};
use crate::keys::{KeySource, KeySpec};
use crate::state::AppState;
use crate::tokens::constant_time_eq;

/// Checks the admin bearer token, comparing in constant time.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &state.admin_token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_disabled",
            format!(
                "the admin API is off: set server.admin_token in the config file or \
                 {ADMIN_TOKEN_ENV} in the environment, then send `Authorization: Bearer <token>`"
            ),
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing admin token: send `Authorization: Bearer <token>`",
        )),
        Some(given) if constant_time_eq(given.trim().as_bytes(), token.expose().as_bytes()) => {
            Ok(())
        }
        Some(_) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "wrong admin token",
        )),
    }
}

/// The body of `POST /v1/admin/keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateKey {
    key: String,
    step: u64,
    #[serde(default = "one")]
    start: u64,
    #[serde(default = "one")]
    delta: u64,
    #[serde(default)]
    remainder: u64,
    #[serde(default)]
    description: String,
}

fn one() -> u64 {
    1
}

/// The most an admin request's body may hold: its JSON is a few fields.
const MAX_ADMIN_BODY: usize = 64 * 1024;

/// Reads an admin request's body (call it once the token is checked, so an
/// unauthorized client can't make the server read anything): at most
/// [`MAX_ADMIN_BODY`] bytes, else 413 `body_too_large`, told by the declared
/// length before any byte is read when there is one.
async fn read_body(mut body: Body) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body over {MAX_ADMIN_BODY} bytes: admin requests are small JSON"),
        )
    };
    if body.size_hint().lower() > MAX_ADMIN_BODY as u64 {
        return Err(too_large());
    }
    let mut read = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame
            .map_err(|e| ApiError::bad_request("invalid_body", format!("request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if read.len() + data.len() > MAX_ADMIN_BODY {
                return Err(too_large());
            }
            read.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(read))
}

fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("request body: {e}")))
}

/// `POST /v1/admin/keys`: creates a segment key; 201, or 409 if it exists.
pub(super) async fn admin_create_key(
    State(state): Shared,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let req: CreateKey = json_body(&read_body(body).await?)?;
    let name = req.key.clone();
    let key = NewKey::new(req.key, req.step)
        .with_start(req.start)
        .with_delta(req.delta, req.remainder)
        .with_description(req.description);
    key.validate().map_err(segment_error)?;
    // The name becomes a segment key before its row exists, so no request
    // in between can answer it with another strategy.
    let claimed = state.keys.claim_segment(&name)?;
    let info = match state.segments.create_key(key).await {
        Ok(info) => info,
        // The row is there (made elsewhere): a segment key all the same.
        Err(e @ SegmentError::KeyExists { .. }) => return Err(segment_error(e)),
        Err(e) => {
            if claimed {
                state.keys.forget(&name);
            }
            return Err(segment_error(e));
        }
    };
    tracing::info!(key = %info.key, step = info.step, "segment key created through the admin API");
    let body = json!({
        "key": info.key,
        "max_id": info.max_id.to_string(),
        "step": info.step,
        "delta": info.delta,
        "remainder": info.remainder,
        "description": info.description,
    });
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

fn key_status_json(s: &KeyStatus) -> Value {
    json!({
        "key": s.key,
        "strategy": "segment",
        "step": s.step,
        "min_step": s.min_step,
        "delta": s.delta,
        "remainder": s.remainder,
        "max_id": s.stored.as_ref().map(|i| i.max_id.to_string()),
        "current": s.current.map(|(first, last, left)| json!({
            "first": first.get().to_string(), "last": last.get().to_string(), "left": left,
        })),
        "next": s.next.map(|(first, last)| json!({
            "first": first.get().to_string(), "last": last.get().to_string(),
        })),
        "loading": s.loading,
        "last_error": s.last_error,
    })
}

/// `GET /v1/admin/keys`: segment keys with their buffers and steps, and the
/// configured keys of other strategies.
pub(super) async fn admin_keys(
    State(state): Shared,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let stored = state.segments.keys().await.map_err(segment_error)?;
    let mut keys: Vec<Value> = stored
        .iter()
        .map(|s| {
            let mut v = key_status_json(s);
            v["public"] = json!(state.keys.peek(&s.key).is_some_and(|k| k.public));
            v
        })
        .collect();
    let known = state.keys.snapshot();
    let mut others: Vec<(&String, &KeySpec)> = known
        .iter()
        .filter(|(_, spec)| {
            spec.source == KeySource::Declared && spec.strategy != Strategy::Segment
        })
        .collect();
    others.sort_by_key(|(name, _)| name.as_str());
    keys.extend(others.into_iter().map(|(name, spec)| {
        json!({"key": name, "strategy": spec.strategy.name(), "public": spec.public})
    }));
    Ok(axum::Json(json!({
        "keys": keys,
        "undeclared_keys": state.keys.undeclared().name(),
    }))
    .into_response())
}

/// `GET /v1/admin/workers`: this node's worker, lease, mark and clock drift.
pub(super) async fn admin_workers(
    State(state): Shared,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let s = state.worker.status();
    let worker = json!({
        "registry": s.registry,
        "worker": s.worker,
        "layout": state.layout_text,
        "lease": s.lease.name(),
        "lease_left_ms": s.lease_left.map(|d| d.as_millis() as u64),
        "mark": s.mark.map(|t| t.to_string()),
        "persisted_mark": s.persisted_mark.map(|t| t.to_string()),
        "generation": s.generation,
        "last_error": s.last_error,
        "clock": state.clock.source().name(),
        "clock_drift_ms": state.clock.drift() as f64 / 1e6,
        "ready": s.is_ready() && crate::ready::clock_not_ready(&state).is_none(),
    });
    Ok(axum::Json(json!({ "workers": [worker] })).into_response())
}

/// `GET /v1/admin/fleet`: every node as the worker registry sees it, with
/// each one's report offset from this node's clock and this node's row
/// marked (`fleet.rs`). Behind the admin token like the other admin routes:
/// it names every node's address. 501 `registry_unsupported` for a registry
/// that can't list; 503 when the registry fails or times out.
pub(super) async fn admin_fleet(
    State(state): Shared,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    match crate::fleet::snapshot(&state.fleet, &state.clock, &state.worker).await {
        Ok(body) => Ok(axum::Json(body).into_response()),
        Err(e) if e.unsupported => Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            e.code,
            e.message,
        )),
        Err(e) => Err(ApiError::unavailable(
            e.code,
            e.message,
            crate::fleet::FleetView::MIN_INTERVAL,
        )),
    }
}

/// The body of `POST /v1/admin/reveal`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RevealRequest {
    id: String,
}

/// `POST /v1/admin/reveal` `{"id": "<public ID>"}`: the internal ID behind a
/// public one, in the configured text form.
pub(super) async fn admin_reveal(
    State(state): Shared,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let req: RevealRequest = json_body(&read_body(body).await?)?;
    let obfuscator = state.obfuscator.as_ref().ok_or_else(|| {
        ApiError::bad_request(
            "obfuscation_disabled",
            "no obfuscation key is configured (obfuscation.key or IDMINT_OBFUSCATION_KEY)",
        )
    })?;
    let public = state.codec.decode(req.id.trim()).map_err(core_error)?;
    let id = obfuscator.reveal(public).map_err(core_error)?;
    Ok(axum::Json(json!({"public": req.id, "id": id.get().to_string()})).into_response())
}
