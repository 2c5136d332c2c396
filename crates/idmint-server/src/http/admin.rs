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
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Shared;
use super::error::{ApiError, ErrorBody, core_error, segment_error};
use crate::fleet::Fleet;
use crate::keys::{KeySource, KeySpec};
use crate::state::AppState;
use crate::tokens::constant_time_eq;
use idmint_node::config::{ADMIN_TOKEN_ENV, Strategy, UndeclaredKeys};

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

/// The body of `POST /v1/admin/keys`: a segment key to create. No other
/// field is taken.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"key": "invoice", "step": 1000}))]
pub(crate) struct CreateKey {
    /// The key name: 1 to 128 bytes of ASCII letters, digits, `.`, `_`, `-` and `:`.
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,128}$", min_length = 1, max_length = 128)]
    key: String,
    /// The segment size: how many IDs one lease hands out.
    #[schema(minimum = 1)]
    step: u64,
    /// The first ID.
    #[serde(default = "one")]
    #[schema(default = 1)]
    start: u64,
    /// Issue only IDs with `id % delta == remainder`.
    #[serde(default = "one")]
    #[schema(default = 1, minimum = 1)]
    delta: u64,
    /// See `delta`; below it.
    #[serde(default)]
    #[schema(default = 0)]
    remainder: u64,
    /// Free text.
    #[serde(default)]
    #[schema(default = "")]
    description: String,
}

/// A segment key's row as the store holds it (`POST /v1/admin/keys`'s answer).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"delta": 1, "description": "", "key": "invoice", "max_id": "1", "remainder": 0, "step": 1000}))]
pub(crate) struct CreatedKey {
    /// Issue only IDs with `id % delta == remainder`.
    delta: u64,
    /// Free text.
    description: String,
    /// The key name.
    key: String,
    /// The row's `max_id`, as a decimal string: the next lease starts here.
    max_id: String,
    /// See `delta`.
    remainder: u64,
    /// The segment size.
    step: u64,
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
#[utoipa::path(
    post,
    path = "/v1/admin/keys",
    operation_id = "adminCreateKey",
    tag = "admin",
    summary = "Create a segment key in the store",
    description = "The key is usable at once. The server won't make a segment key of a name \
        it already answered with another strategy, or one declared with another.",
    request_body(content = CreateKey, description = "At most 64 KiB.", content_type = "application/json"),
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Created: the row as stored.", body = CreatedKey),
        (status = 400, description = "`invalid_json`, `invalid_body`: the body is not that JSON, or can't be read; `invalid_key`, `invalid_spec`: a bad key name; a step, start, delta or remainder that doesn't make sense.", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the admin token is missing or wrong.", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`admin_disabled`: no admin token is configured.", body = ErrorBody),
        (status = 409, description = "`key_exists`: the store has the key already; `key_forgotten`: the store had the key and lost it (`idmint segment raise` brings it back above every ID it issued); `wrong_strategy`: the name is declared, or was answered, with another strategy.", body = ErrorBody),
        (status = 413, description = "`body_too_large`: the body passes 64 KiB.", body = ErrorBody),
        (status = 503, description = "`unavailable`: the store failed; `key_below_floor`: this node issued from a key of that name above `start`.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
    ),
)]
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
    let body = CreatedKey {
        delta: info.delta,
        description: info.description,
        key: info.key,
        max_id: info.max_id.to_string(),
        remainder: info.remainder,
        step: info.step,
    };
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// `GET /v1/admin/keys`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AdminKeys {
    /// The segment keys of the store, then the keys declared with other strategies.
    keys: Vec<AdminKey>,
    /// `server.undeclared_keys`: the strategy of names declared nowhere, or `refuse`.
    undeclared_keys: UndeclaredKeys,
}

/// A key of `GET /v1/admin/keys`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum AdminKey {
    /// A segment key of the store, with this node's buffers.
    Segment(SegmentKey),
    /// A key declared with another strategy.
    Declared(DeclaredKey),
}

/// A segment key of the store, with this node's buffers.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SegmentKey {
    /// The segment this node hands out from; `null` if it has served none.
    current: Option<CurrentSegment>,
    /// Issue only IDs with `id % delta == remainder`.
    delta: u64,
    /// The key name.
    key: String,
    /// The last failure to lease a segment, if any.
    last_error: Option<String>,
    /// Whether the next segment is being leased now.
    loading: bool,
    /// The store's `max_id`, as a decimal string; `null` if unknown.
    max_id: Option<String>,
    /// The smallest step Leaf's dynamic step goes down to.
    min_step: u64,
    /// The segment buffered after `current`, if any.
    next: Option<NextSegment>,
    /// Whether the key's IDs are obfuscated public IDs.
    public: bool,
    /// See `delta`.
    remainder: u64,
    /// The segment size now (it grows and shrinks with demand).
    step: u64,
    /// Always `segment`.
    strategy: Strategy,
}

/// The segment a node hands out from.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CurrentSegment {
    /// Its first ID, as a decimal string.
    first: String,
    /// Its last ID, as a decimal string.
    last: String,
    /// How many IDs are left in it.
    left: u64,
}

/// The segment a node has buffered next.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NextSegment {
    /// Its first ID, as a decimal string.
    first: String,
    /// Its last ID, as a decimal string.
    last: String,
}

/// A key declared in `[keys.<name>]` with a strategy other than segment.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeclaredKey {
    /// The key name.
    key: String,
    /// Whether the key's IDs are obfuscated public IDs.
    public: bool,
    /// How the key's IDs are made.
    strategy: Strategy,
}

fn segment_key(s: &KeyStatus, public: bool) -> SegmentKey {
    SegmentKey {
        current: s.current.map(|(first, last, left)| CurrentSegment {
            first: first.get().to_string(),
            last: last.get().to_string(),
            left,
        }),
        delta: s.delta,
        key: s.key.clone(),
        last_error: s.last_error.clone(),
        loading: s.loading,
        max_id: s.stored.as_ref().map(|i| i.max_id.to_string()),
        min_step: s.min_step,
        next: s.next.map(|(first, last)| NextSegment {
            first: first.get().to_string(),
            last: last.get().to_string(),
        }),
        public,
        remainder: s.remainder,
        step: s.step,
        strategy: Strategy::Segment,
    }
}

/// `GET /v1/admin/keys`: segment keys with their buffers and steps, and the
/// configured keys of other strategies.
#[utoipa::path(
    get,
    path = "/v1/admin/keys",
    operation_id = "adminKeys",
    tag = "admin",
    summary = "The segment keys of the store and the declared keys",
    description = "The segment keys of the store, with this node's buffers, then the keys \
        declared with other strategies.",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The keys.", body = AdminKeys),
        (status = 401, description = "`unauthorized`: the admin token is missing or wrong.", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`admin_disabled`: no admin token is configured.", body = ErrorBody),
        (status = 503, description = "`unavailable`: the store can't list its keys.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
    ),
)]
pub(super) async fn admin_keys(
    State(state): Shared,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let stored = state.segments.keys().await.map_err(segment_error)?;
    let mut keys: Vec<AdminKey> = stored
        .iter()
        .map(|s| {
            let public = state.keys.peek(&s.key).is_some_and(|k| k.public);
            AdminKey::Segment(segment_key(s, public))
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
        AdminKey::Declared(DeclaredKey {
            key: name.clone(),
            public: spec.public,
            strategy: spec.strategy,
        })
    }));
    Ok(axum::Json(AdminKeys {
        keys,
        undeclared_keys: state.keys.undeclared(),
    })
    .into_response())
}

/// `GET /v1/admin/workers`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Workers {
    /// This node's worker (one).
    workers: Vec<Worker>,
}

/// A node's worker, lease, mark and clock.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"clock": "monotonic", "clock_drift_ms": -0.001282, "generation": 1, "last_error": null, "layout": "twitter", "lease": "held", "lease_left_ms": null, "mark": "2026-11-26T12:31:05.372999999Z", "persisted_mark": "2026-11-26T12:31:05.372613571Z", "ready": true, "registry": "file", "worker": 0}))]
pub(crate) struct Worker {
    /// The clock IDs are made from (`snowflake.clock`): `monotonic` or `wall`.
    clock: &'static str,
    /// The monotonic clock's drift from the wall clock, in milliseconds.
    clock_drift_ms: f64,
    /// How many times the worker was claimed in this run.
    generation: u64,
    /// The keeper's last failure, if any.
    last_error: Option<String>,
    /// The layout, in its text form.
    layout: String,
    /// The lease's state (`held`, `lost`, ...).
    lease: &'static str,
    /// Milliseconds left on the lease; `null` for a registry without expiry.
    lease_left_ms: Option<u64>,
    /// The high-water mark IDs may reach (RFC 3339).
    mark: Option<String>,
    /// The mark the registry has durably accepted (RFC 3339).
    persisted_mark: Option<String>,
    /// What `/readyz` answers.
    ready: bool,
    /// The worker registry (`snowflake.registry`).
    registry: &'static str,
    /// The worker ID.
    worker: u32,
}

/// `GET /v1/admin/workers`: this node's worker, lease, mark and clock drift.
#[utoipa::path(
    get,
    path = "/v1/admin/workers",
    operation_id = "adminWorkers",
    tag = "admin",
    summary = "This node's worker",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The worker.", body = Workers),
        (status = 401, description = "`unauthorized`: the admin token is missing or wrong.", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`admin_disabled`: no admin token is configured.", body = ErrorBody),
    ),
)]
pub(super) async fn admin_workers(
    State(state): Shared,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let s = state.worker.status();
    let worker = Worker {
        clock: state.clock.source().name(),
        clock_drift_ms: state.clock.drift() as f64 / 1e6,
        generation: s.generation,
        last_error: s.last_error.clone(),
        layout: state.layout_text.clone(),
        lease: s.lease.name(),
        lease_left_ms: s.lease_left.map(|d| d.as_millis() as u64),
        mark: s.mark.map(|t| t.to_string()),
        persisted_mark: s.persisted_mark.map(|t| t.to_string()),
        ready: s.is_ready() && crate::ready::clock_not_ready(&state).is_none(),
        registry: s.registry,
        worker: s.worker,
    };
    Ok(axum::Json(Workers {
        workers: vec![worker],
    })
    .into_response())
}

/// `GET /v1/admin/fleet`: every node as the worker registry sees it, with
/// each one's report offset from this node's clock and this node's row
/// marked (`fleet.rs`). Behind the admin token like the other admin routes:
/// it names every node's address. 501 `registry_unsupported` for a registry
/// that can't list; 503 when the registry fails or times out.
#[utoipa::path(
    get,
    path = "/v1/admin/fleet",
    operation_id = "adminFleet",
    tag = "admin",
    summary = "Every node as the worker registry sees it",
    description = "Worker ID, host, address, port, liveness, lease left, last report, its \
        offset from this node's clock, stored mark, and `this_node`. One node reads the \
        registry at most once every 2 s and shares the answer.",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The fleet.", body = Fleet),
        (status = 401, description = "`unauthorized`: the admin token is missing or wrong.", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`admin_disabled`: no admin token is configured.", body = ErrorBody),
        (status = 501, description = "`registry_unsupported`: the registry can't list its holders.", body = ErrorBody),
        (status = 503, description = "The registry's code (`registry_timeout`, `registry_backend`, ...): the listing failed.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
    ),
)]
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
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"id": "1ZE3EZ6FCPC17"}))]
pub(crate) struct RevealRequest {
    /// A public ID, in `obfuscation.format`.
    id: String,
}

/// `POST /v1/admin/reveal`'s answer.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"id": "2125931214584938496", "public": "1ZE3EZ6FCPC17"}))]
pub(crate) struct Revealed {
    /// The internal ID, as a decimal string.
    id: String,
    /// The public ID asked about, as given.
    public: String,
}

/// `POST /v1/admin/reveal` `{"id": "<public ID>"}`: the internal ID behind a
/// public one, in the configured text form.
#[utoipa::path(
    post,
    path = "/v1/admin/reveal",
    operation_id = "adminReveal",
    tag = "admin",
    summary = "The internal ID behind a public ID",
    request_body(content = RevealRequest, description = "At most 64 KiB.", content_type = "application/json"),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The internal ID.", body = Revealed),
        (status = 400, description = "`obfuscation_disabled`: no obfuscation key is configured; `invalid_json`, `invalid_body`; `invalid_public_id`, `unknown_key_id`, `invalid_id`: not a public ID of this format; made with a key ID that has no key here; not revealable.", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the admin token is missing or wrong.", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`admin_disabled`: no admin token is configured.", body = ErrorBody),
        (status = 413, description = "`body_too_large`: the body passes 64 KiB.", body = ErrorBody),
    ),
)]
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
    Ok(axum::Json(Revealed {
        id: id.get().to_string(),
        public: req.id,
    })
    .into_response())
}
