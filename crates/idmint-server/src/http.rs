//! The HTTP API (axum): Leaf-compatible endpoints, the `v1` API, health and
//! readiness, and the admin API behind a bearer token.
//!
//! # Errors
//! Every failure is `{"error": {"code": "...", "message": "..."}}` with a
//! fitting status: 400 bad input, 401 a missing or wrong admin token, 403 the
//! admin API switched off, 404 an unknown key or endpoint, 409 a key that
//! exists, 503 (with `Retry-After`) when the worker lease or segment store
//! can't serve right now. Never an ID of 0 or −1, never a 200 for a failure.
//!
//! # Batch bodies (`GET /v1/ids/{key}`, `GET /v1/uuid`), chosen by `Accept`
//! - `application/octet-stream`: the compact binary form. Integer IDs (and
//!   public IDs) are unsigned 64-bit **little-endian**, 8 bytes each, back to
//!   back, in issue order; UUIDs are 16 bytes each in RFC 9562 byte order. The
//!   count is the body length divided by 8 (or 16), also sent as
//!   `X-Idmint-Count`.
//! - `application/json`: `{"key": ..., "strategy": ..., "ids": ["...", ...]}`,
//!   IDs as strings (JavaScript loses integers above 2^53).
//! - anything else (`text/plain`, `*/*`, none): one ID per line.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idmint_core::clock::MonotonicClock;
use idmint_core::uuid::UuidGenerator;
use idmint_core::{Id, IdBatch, Layout, Obfuscator, PublicId, PublicIdCodec};
use idmint_registry::{LeaseState, WorkerHandle};
use idmint_segment::{KeyStatus, NewKey, SegmentAllocator, SegmentError};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::{ADMIN_TOKEN_ENV, Secret, Strategy};

/// What a configured key does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeySpec {
    pub strategy: Strategy,
    pub public: bool,
}

/// Everything the handlers share.
pub(crate) struct AppState {
    pub worker: WorkerHandle,
    pub layout: Layout,
    pub layout_text: String,
    pub clock: Arc<MonotonicClock>,
    pub segments: SegmentAllocator,
    pub uuids: UuidGenerator,
    pub keys: HashMap<String, KeySpec>,
    pub obfuscator: Option<Obfuscator>,
    pub codec: PublicIdCodec,
    pub admin_token: Option<Secret>,
    pub max_count: u64,
}

impl fmt::Debug for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppState")
            .field("layout", &self.layout_text)
            .field("keys", &self.keys)
            .field("max_count", &self.max_count)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// The spec of `key`: as configured, else a segment key looked up in the store.
    fn spec(&self, key: &str) -> KeySpec {
        self.keys.get(key).copied().unwrap_or(KeySpec {
            strategy: Strategy::Segment,
            public: false,
        })
    }
}

type Shared = State<Arc<AppState>>;

/// The router of every endpoint.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/api/snowflake/get/{key}", get(leaf_snowflake))
        .route("/api/segment/get/{key}", get(leaf_segment))
        .route("/decodeSnowflakeId", get(leaf_decode))
        .route("/v1/ids/{key}", get(ids))
        .route("/v1/decode/{id}", get(decode))
        .route("/v1/uuid", get(uuids))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/admin/keys", get(admin_keys).post(admin_create_key))
        .route("/v1/admin/workers", get(admin_workers))
        .route("/v1/admin/reveal", post(admin_reveal))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

// ---- Errors ----

/// An error response: status, stable code, message, and a retry hint for 503s.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<Duration>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    fn unavailable(code: &'static str, message: impl Into<String>, after: Duration) -> ApiError {
        ApiError {
            retry_after: Some(after),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        if let Some(after) = self.retry_after {
            // Whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3).
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

fn core_error(e: idmint_core::Error) -> ApiError {
    let code = e.code();
    if e.is_bad_input() {
        ApiError::bad_request(code, e.to_string())
    } else if e.is_transient() {
        ApiError::unavailable(code, e.to_string(), Duration::from_secs(1))
    } else {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, code, e.to_string())
    }
}

fn segment_error(e: SegmentError) -> ApiError {
    let code = e.code();
    match &e {
        SegmentError::NotFound { .. } => ApiError::new(StatusCode::NOT_FOUND, code, e.to_string()),
        SegmentError::KeyExists { .. } => ApiError::new(StatusCode::CONFLICT, code, e.to_string()),
        _ if e.is_bad_input() => ApiError::bad_request(code, e.to_string()),
        _ if e.is_transient() => ApiError::unavailable(
            code,
            e.to_string(),
            e.retry_after().unwrap_or(Duration::from_secs(1)),
        ),
        _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, code, e.to_string()),
    }
}

fn path_error(e: PathRejection) -> ApiError {
    ApiError::bad_request("invalid_path", e.body_text())
}

fn query_error(e: QueryRejection) -> ApiError {
    ApiError::bad_request("invalid_query", e.body_text())
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no such endpoint: {method} {}", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

// ---- Issuing ----

/// IDs ready to render.
enum Issued {
    /// Integer IDs, already obfuscated when `public`.
    Ints { values: Vec<u64>, public: bool },
    /// UUIDs.
    Uuids(Vec<u128>),
}

fn check_key(key: &str) -> Result<(), ApiError> {
    idmint_segment::validate_key(key).map_err(segment_error)
}

fn count_of(params: &HashMap<String, String>, max: u64) -> Result<u64, ApiError> {
    let Some(text) = params.get("count") else {
        return Ok(1);
    };
    let n: u64 = text.trim().parse().map_err(|_| {
        ApiError::bad_request(
            "invalid_count",
            format!("count {text:?} is not a whole number: ask for 1..={max} IDs"),
        )
    })?;
    if n == 0 || n > max {
        return Err(ApiError::bad_request(
            "invalid_count",
            format!("count {n} is out of range: ask for 1..={max} IDs (server.max_count)"),
        ));
    }
    Ok(n)
}

/// `n` snowflake IDs from the worker. A `MarkReached` while the lease is held
/// means the keeper is persisting the next window: waited out briefly (the
/// keeper was nudged) before answering 503.
async fn snowflakes(state: &Arc<AppState>, n: u64) -> Result<Vec<u64>, ApiError> {
    let deadline = Instant::now() + Duration::from_millis(250);
    loop {
        let result: idmint_core::Result<Vec<u64>> = if n == 1 {
            state.worker.next_id().map(|id| vec![id.get()])
        } else if n <= state.layout.ids_per_tick() {
            state.worker.next_ids(n).map(|b| flatten(&b))
        } else {
            // A batch longer than a tick waits for ticks: off the async workers.
            let worker = state.worker.clone();
            tokio::task::spawn_blocking(move || worker.next_ids(n).map(|b| flatten(&b)))
                .await
                .map_err(|e| {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                })?
        };
        match result {
            Err(idmint_core::Error::MarkReached { .. })
                if Instant::now() < deadline && state.worker.status().lease == LeaseState::Held =>
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(e @ idmint_core::Error::MarkReached { .. }) => {
                let status = state.worker.status();
                let why = status
                    .not_ready_reason()
                    .unwrap_or_else(|| "the high-water mark is being persisted".to_owned());
                return Err(ApiError::unavailable(
                    e.code(),
                    format!("snowflake IDs are paused: {why}"),
                    Duration::from_secs(1),
                ));
            }
            other => return other.map_err(core_error),
        }
    }
}

fn flatten(batch: &IdBatch) -> Vec<u64> {
    let mut out = Vec::with_capacity(usize::try_from(batch.len()).unwrap_or(0));
    out.extend(batch.iter().map(Id::get));
    out
}

async fn segment_ids(state: &AppState, key: &str, n: u64) -> Result<Vec<u64>, ApiError> {
    if n == 1 {
        let id = state.segments.next_id(key).await.map_err(segment_error)?;
        Ok(vec![id.get()])
    } else {
        let batch = state
            .segments
            .next_ids(key, n)
            .await
            .map_err(segment_error)?;
        Ok(flatten(&batch))
    }
}

/// Makes `n` IDs of `key` per its spec; public keys' IDs obfuscated.
async fn issue(
    state: &Arc<AppState>,
    key: &str,
    spec: KeySpec,
    n: u64,
) -> Result<Issued, ApiError> {
    let values = match spec.strategy {
        Strategy::Snowflake => snowflakes(state, n).await?,
        Strategy::Segment => segment_ids(state, key, n).await?,
        Strategy::Uuid4 | Strategy::Uuid7 => {
            let v7 = spec.strategy == Strategy::Uuid7;
            return Ok(Issued::Uuids(make_uuids(&state.uuids, v7, n)));
        }
    };
    if !spec.public {
        return Ok(Issued::Ints {
            values,
            public: false,
        });
    }
    let obfuscate = {
        let state = state.clone();
        move || -> Result<Vec<u64>, ApiError> {
            let obfuscator = state.obfuscator.as_ref().ok_or_else(|| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "obfuscation_disabled",
                    "public key without an obfuscation key",
                )
            })?;
            values
                .into_iter()
                .map(|v| {
                    let id = Id::new(v).map_err(core_error)?;
                    obfuscator
                        .obfuscate(id)
                        .map(PublicId::get)
                        .map_err(core_error)
                })
                .collect()
        }
    };
    let values = if n > 1000 {
        tokio::task::spawn_blocking(obfuscate).await.map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })??
    } else {
        obfuscate()?
    };
    Ok(Issued::Ints {
        values,
        public: true,
    })
}

fn make_uuids(generator: &UuidGenerator, v7: bool, n: u64) -> Vec<u128> {
    (0..n)
        .map(|_| {
            if v7 {
                generator.next_v7().as_u128()
            } else {
                generator.next_v4().as_u128()
            }
        })
        .collect()
}

// ---- Rendering ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Json,
    Binary,
}

fn negotiate(headers: &HeaderMap) -> Format {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("application/octet-stream") {
        Format::Binary
    } else if accept.contains("application/json") {
        Format::Json
    } else {
        Format::Text
    }
}

fn text_of(state: &AppState, value: u64, public: bool) -> Result<String, ApiError> {
    if public {
        state.codec.encode(PublicId::new(value)).map_err(core_error)
    } else {
        Ok(itoa::Buffer::new().format(value).to_owned())
    }
}

fn uuid_text(value: u128) -> String {
    idmint_core::uuid::Uuid::from_u128(value)
        .hyphenated()
        .to_string()
}

fn render(
    state: &AppState,
    format: Format,
    meta: Value,
    issued: Issued,
) -> Result<Response, ApiError> {
    let count = match &issued {
        Issued::Ints { values, .. } => values.len(),
        Issued::Uuids(u) => u.len(),
    };
    let mut response = match (format, issued) {
        (Format::Binary, Issued::Ints { values, .. }) => {
            let mut body = Vec::with_capacity(values.len() * 8);
            for v in values {
                body.extend_from_slice(&v.to_le_bytes());
            }
            binary(body)
        }
        (Format::Binary, Issued::Uuids(values)) => {
            let mut body = Vec::with_capacity(values.len() * 16);
            for v in values {
                body.extend_from_slice(&v.to_be_bytes());
            }
            binary(body)
        }
        (Format::Json, issued) => {
            let ids: Vec<String> = match issued {
                Issued::Ints { values, public } => values
                    .into_iter()
                    .map(|v| text_of(state, v, public))
                    .collect::<Result<_, _>>()?,
                Issued::Uuids(values) => values.into_iter().map(uuid_text).collect(),
            };
            let mut body = meta;
            body["count"] = json!(ids.len());
            body["ids"] = json!(ids);
            axum::Json(body).into_response()
        }
        (Format::Text, issued) => {
            let mut body = String::with_capacity(count * 20);
            match issued {
                Issued::Ints { values, public } => {
                    let mut buf = itoa::Buffer::new();
                    for v in values {
                        if public {
                            body.push_str(&text_of(state, v, true)?);
                        } else {
                            body.push_str(buf.format(v));
                        }
                        body.push('\n');
                    }
                }
                Issued::Uuids(values) => {
                    for v in values {
                        body.push_str(&uuid_text(v));
                        body.push('\n');
                    }
                }
            }
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
        }
    };
    response
        .headers_mut()
        .insert("x-idmint-count", HeaderValue::from(count));
    Ok(response)
}

fn binary(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response()
}

fn plain(text: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

// ---- Leaf-compatible ----

/// `GET /api/snowflake/get/{key}`: one snowflake ID as plain text (Leaf's
/// `/api/snowflake/get/{key}`; the key only matters when it is configured public).
async fn leaf_snowflake(
    State(state): Shared,
    key: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(key) = key.map_err(path_error)?;
    check_key(&key)?;
    let spec = state.spec(&key);
    let spec = KeySpec {
        strategy: Strategy::Snowflake,
        public: spec.public && spec.strategy == Strategy::Snowflake,
    };
    single(&state, &key, spec).await
}

/// `GET /api/segment/get/{key}`: the key's next segment ID as plain text.
async fn leaf_segment(
    State(state): Shared,
    key: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(key) = key.map_err(path_error)?;
    check_key(&key)?;
    let spec = state.spec(&key);
    let spec = KeySpec {
        strategy: Strategy::Segment,
        public: spec.public && spec.strategy == Strategy::Segment,
    };
    single(&state, &key, spec).await
}

async fn single(state: &Arc<AppState>, key: &str, spec: KeySpec) -> Result<Response, ApiError> {
    match issue(state, key, spec, 1).await? {
        Issued::Ints { values, public } => {
            let value = values.first().copied().ok_or_else(|| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "no ID issued",
                )
            })?;
            Ok(plain(text_of(state, value, public)?))
        }
        Issued::Uuids(values) => Ok(plain(
            values.first().map_or_else(String::new, |v| uuid_text(*v)),
        )),
    }
}

/// `GET /decodeSnowflakeId?snowflakeId=`: Leaf's shape, `{"timestamp":
/// "<unix ms>(<yyyy-MM-dd HH:mm:ss.SSS> UTC)", "workerId": "...", "sequenceId":
/// "..."}`, decoded with this server's layout; `workerId` is the whole node
/// field (datacenter and worker), as Leaf's.
async fn leaf_decode(
    State(state): Shared,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = query.map_err(query_error)?;
    let text = params.get("snowflakeId").ok_or_else(|| {
        ApiError::bad_request("invalid_id", "missing query parameter snowflakeId")
    })?;
    let decoded = decode_text(&state.layout, text)?;
    let unix_ms = decoded.time.as_millisecond();
    let shown = format!(
        "{}.{:03}",
        decoded.time.strftime("%Y-%m-%d %H:%M:%S"),
        unix_ms.rem_euclid(1000)
    );
    let node =
        (u64::from(decoded.datacenter) << state.layout.worker_bits()) | u64::from(decoded.worker);
    Ok(axum::Json(json!({
        "timestamp": format!("{unix_ms}({shown})"),
        "workerId": node.to_string(),
        "sequenceId": decoded.sequence.to_string(),
    }))
    .into_response())
}

fn decode_text(layout: &Layout, text: &str) -> Result<idmint_core::Decoded, ApiError> {
    let id: Id = text.trim().parse().map_err(|e: idmint_core::Error| {
        ApiError::bad_request("invalid_id", format!("{text:?} is not an ID: {e}"))
    })?;
    layout
        .decode(id.get())
        .map_err(|e| ApiError::bad_request("invalid_id", format!("{text:?} can't be decoded: {e}")))
}

// ---- v1 ----

/// `GET /v1/ids/{key}?count=N`.
async fn ids(
    State(state): Shared,
    headers: HeaderMap,
    key: Result<Path<String>, PathRejection>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(key) = key.map_err(path_error)?;
    let Query(params) = query.map_err(query_error)?;
    check_key(&key)?;
    let n = count_of(&params, state.max_count)?;
    let spec = state.spec(&key);
    let issued = issue(&state, &key, spec, n).await?;
    render(
        &state,
        negotiate(&headers),
        json!({"key": key, "strategy": spec.strategy.name(), "public": spec.public}),
        issued,
    )
}

/// `GET /v1/decode/{id}`.
async fn decode(
    State(state): Shared,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(text) = id.map_err(path_error)?;
    let d = decode_text(&state.layout, &text)?;
    Ok(axum::Json(json!({
        "id": d.id.get().to_string(),
        "layout": state.layout_text,
        "time": d.time.to_string(),
        "unix_ms": d.time.as_millisecond(),
        "tick": d.tick,
        "datacenter": d.datacenter,
        "worker": d.worker,
        "rollback": d.rollback,
        "sequence": d.sequence,
    }))
    .into_response())
}

/// `GET /v1/uuid?version=4|7&count=N` (version 7 unless given).
async fn uuids(
    State(state): Shared,
    headers: HeaderMap,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = query.map_err(query_error)?;
    let v7 = match params.get("version").map(|v| v.trim()) {
        None | Some("7") => true,
        Some("4") => false,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_version",
                format!("UUID version {other:?} is not served: ask for 4 or 7"),
            ));
        }
    };
    let n = count_of(&params, state.max_count)?;
    let issued = Issued::Uuids(make_uuids(&state.uuids, v7, n));
    render(
        &state,
        negotiate(&headers),
        json!({"version": if v7 { 7 } else { 4 }}),
        issued,
    )
}

/// `GET /healthz`: the process is up.
async fn healthz() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

/// `GET /readyz`: 200 while the worker claim is held and its mark persisted;
/// 503 with the reason otherwise (a load balancer then sends traffic elsewhere).
async fn readyz(State(state): Shared) -> Result<Response, ApiError> {
    let status = state.worker.status();
    match status.not_ready_reason() {
        None => Ok(axum::Json(json!({
            "status": "ready",
            "registry": status.registry,
            "worker": status.worker,
        }))
        .into_response()),
        Some(reason) => Err(ApiError::unavailable(
            "not_ready",
            reason,
            Duration::from_secs(1),
        )),
    }
}

// ---- Admin ----

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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("request body: {e}")))
}

/// `POST /v1/admin/keys`: creates a segment key; 201, or 409 if it exists.
async fn admin_create_key(
    State(state): Shared,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let req: CreateKey = json_body(&body)?;
    let key = NewKey::new(req.key, req.step)
        .with_start(req.start)
        .with_delta(req.delta, req.remainder)
        .with_description(req.description);
    let info = state
        .segments
        .create_key(key)
        .await
        .map_err(segment_error)?;
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
async fn admin_keys(State(state): Shared, headers: HeaderMap) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let stored = state.segments.keys().await.map_err(segment_error)?;
    let mut keys: Vec<Value> = stored
        .iter()
        .map(|s| {
            let mut v = key_status_json(s);
            v["public"] = json!(state.keys.get(&s.key).is_some_and(|k| k.public));
            v
        })
        .collect();
    let mut others: Vec<(&String, &KeySpec)> = state
        .keys
        .iter()
        .filter(|(_, spec)| spec.strategy != Strategy::Segment)
        .collect();
    others.sort_by_key(|(name, _)| name.as_str());
    keys.extend(others.into_iter().map(|(name, spec)| {
        json!({"key": name, "strategy": spec.strategy.name(), "public": spec.public})
    }));
    Ok(axum::Json(json!({ "keys": keys })).into_response())
}

/// `GET /v1/admin/workers`: this node's worker, lease, mark and clock drift.
async fn admin_workers(State(state): Shared, headers: HeaderMap) -> Result<Response, ApiError> {
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
        "clock_drift_ms": state.clock.drift() as f64 / 1e6,
        "ready": s.is_ready(),
    });
    Ok(axum::Json(json!({ "workers": [worker] })).into_response())
}

/// The body of `POST /v1/admin/reveal`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RevealRequest {
    id: String,
}

/// `POST /v1/admin/reveal` `{"id": "<public ID>"}`: the internal ID behind a
/// public one, in the configured text form.
async fn admin_reveal(
    State(state): Shared,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let req: RevealRequest = json_body(&body)?;
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
