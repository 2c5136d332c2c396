//! The HTTP API (axum): Leaf-compatible endpoints, Tinyid's (`http/tinyid.rs`),
//! the `v1` API, health and readiness, and the admin API behind a bearer token
//! (`http/admin.rs`).
//!
//! # Which strategy
//! `/v1/ids/{key}` issues with the key's strategy (`keys::KeyTable`: declared,
//! a store key, else `server.undeclared_keys`). Leaf's routes name theirs in
//! the URL: `/api/snowflake/get/{key}` and `/api/segment/get/{key}` serve any
//! undeclared name with it (unless `server.undeclared_keys = "refuse"`), and
//! a key declared with the other strategy gets 409 `wrong_strategy` naming
//! the key and its strategy.
//!
//! # Errors
//! Every failure is `{"error": {"code": "...", "message": "..."}}` with a
//! fitting status: 400 bad input, 401 a missing or wrong admin or key token
//! (with `WWW-Authenticate: Bearer`), 403 the admin API switched off, 404 an
//! unknown key or endpoint, 409 a key that exists or one asked for with a
//! strategy it doesn't have, 413 an admin request body over 64 KiB, 503
//! (with `Retry-After`) when the worker lease or segment store can't serve
//! right now. Never an ID
//! of 0 or −1, never a 200 for a failure. A parameter given twice
//! (`?count=1&count=2`) is a 400. Before any route, hyper answers a request
//! head over 32 KiB with 431, without a body.
//!
//! # Batch bodies (`GET /v1/ids/{key}`, `GET /v1/uuid`), chosen by `Accept`
//! - `application/octet-stream`: the compact binary form. Integer IDs (and
//!   public IDs) are unsigned 64-bit **little-endian**, 8 bytes each, back to
//!   back, in issue order; UUIDs are 16 bytes each in RFC 9562 byte order. The
//!   count is the body length divided by 8 (or 16), also sent as
//!   `X-Idmint-Count`.
//! - Every body's key strategy is sent as `X-Idmint-Strategy` (`snowflake`,
//!   `segment`, `monotonic`, ...), so a client knows which keys it must not
//!   prefetch (monotonic ones).
//! - `application/json`: `{"key": ..., "strategy": ..., "ids": ["...", ...]}`,
//!   IDs as strings (JavaScript loses integers above 2^53).
//! - anything else (`text/plain`, `*/*`, none): one ID per line.
//!
//! # Key tokens
//! A key with `keys.<name>.token` set answers its ID endpoints
//! (`/api/snowflake/get/{key}`, `/api/segment/get/{key}`, `/v1/ids/{key}`)
//! only to requests carrying the token as `Authorization: Bearer <token>` or
//! `?token=<token>`; otherwise 401 `unauthorized`. Tokens are compared in
//! constant time and never logged nor echoed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idmint_core::{Id, Layout};
use idmint_segment::SegmentError;
use serde_json::{Value, json};

use crate::config::Strategy;
use crate::error::{ErrorClass, IssueError};
use crate::issue::{Issued, issue, make_uuids, route_spec, text_of, uuid_text};
use crate::metrics::latency::LatencyLayer;
use crate::metrics::scrape::Readings;
use crate::monotonic::Monotonic;
use crate::state::AppState;
use crate::status;
use crate::tokens::constant_time_eq;

mod admin;
mod conn;
mod starting;
pub(crate) mod tinyid;
pub(crate) use conn::serve;
pub(crate) use starting::{StartProgress, answer_while_starting};

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
        .route(
            "/v1/admin/keys",
            get(admin::admin_keys).post(admin::admin_create_key),
        )
        .route("/v1/admin/workers", get(admin::admin_workers))
        .route("/v1/admin/fleet", get(admin::admin_fleet))
        .route("/v1/admin/reveal", post(admin::admin_reveal))
        .route("/", get(status::page))
        .route("/v1/status", get(status::status))
        .route("/metrics", get(scrape))
        .merge(tinyid::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(LatencyLayer::new(state.metrics.clone()))
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

impl From<IssueError> for ApiError {
    fn from(e: IssueError) -> ApiError {
        let status = match e.class {
            ErrorClass::BadInput => StatusCode::BAD_REQUEST,
            ErrorClass::NotFound => StatusCode::NOT_FOUND,
            ErrorClass::Conflict => StatusCode::CONFLICT,
            ErrorClass::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorClass::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            code: e.code,
            message: e.message,
            retry_after: e.retry_after,
        }
    }
}

fn core_error(e: idmint_core::Error) -> ApiError {
    IssueError::from(e).into()
}

fn segment_error(e: SegmentError) -> ApiError {
    IssueError::from(e).into()
}

fn path_error(e: PathRejection) -> ApiError {
    ApiError::bad_request("invalid_path", e.body_text())
}

fn query_error(e: QueryRejection) -> ApiError {
    ApiError::bad_request("invalid_query", e.body_text())
}

/// The query string's parameters, each name at most once: `?count=1&count=2`
/// is a 400 naming `count` (`invalid_count`), not one of the two chosen
/// silently. Other repeated names are `invalid_query`.
struct Params(HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Params, ApiError> {
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(query_error)?;
        let mut params = HashMap::with_capacity(pairs.len());
        for (name, value) in pairs {
            if params.contains_key(&name) {
                let code = if name == "count" {
                    "invalid_count"
                } else {
                    "invalid_query"
                };
                let shown: String = name.chars().take(64).collect();
                return Err(ApiError::bad_request(
                    code,
                    format!("query parameter {shown:?} is given more than once: give it once"),
                ));
            }
            params.insert(name, value);
        }
        Ok(Params(params))
    }
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

// ---- Issuing (the strategy-agnostic part is in `issue.rs`) ----

fn check_key(key: &str) -> Result<(), ApiError> {
    idmint_segment::validate_key(key).map_err(segment_error)
}

/// Checks `key`'s token, when it has one: `Authorization: Bearer <token>`
/// or `?token=<token>`.
fn check_key_token(
    state: &AppState,
    key: &str,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<(), ApiError> {
    let Some(token) = state.token_for(key) else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .or_else(|| params.get("token").map(String::as_str));
    match given {
        Some(given) if constant_time_eq(given.as_bytes(), token.expose().as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("wrong token for key {key:?}"),
        )),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!(
                "key {key:?} needs its token: send `Authorization: Bearer <token>` or `?token=<token>`"
            ),
        )),
    }
}

fn count_of(params: &HashMap<String, String>, max: u64) -> Result<u64, ApiError> {
    match params.get("count") {
        None => Ok(1),
        Some(text) => Ok(crate::issue::parse_count(text, max)?),
    }
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
    let strategy = meta
        .get("strategy")
        .and_then(Value::as_str)
        .and_then(|s| HeaderValue::from_str(s).ok());
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
    let headers = response.headers_mut();
    headers.insert("x-idmint-count", HeaderValue::from(count));
    if let Some(strategy) = strategy {
        headers.insert("x-idmint-strategy", strategy);
    }
    Ok(response)
}

fn binary(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response()
}

/// The content type of single IDs and text bodies.
const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

fn plain(text: String) -> Response {
    ([(header::CONTENT_TYPE, TEXT_PLAIN)], text).into_response()
}

// ---- Leaf-compatible ----

/// `GET /api/snowflake/get/{key}`: one snowflake ID as plain text (Leaf's
/// `/api/snowflake/get/{key}`; the key only matters when it is configured public).
async fn leaf_snowflake(
    State(state): Shared,
    key: Result<Path<String>, PathRejection>,
    query: Params,
    request: Request,
) -> Result<Response, ApiError> {
    leaf_single(state, Strategy::Snowflake, key, query, request).await
}

/// `GET /api/segment/get/{key}`: the key's next segment ID as plain text.
async fn leaf_segment(
    State(state): Shared,
    key: Result<Path<String>, PathRejection>,
    query: Params,
    request: Request,
) -> Result<Response, ApiError> {
    leaf_single(state, Strategy::Segment, key, query, request).await
}

/// One ID of `strategy` for a Leaf route: the route, not the key's config,
/// picks the strategy; the key is public only if configured public for it.
///
/// The single-ID routes and `/v1/ids` take the whole `request` for its
/// headers, read by reference: the `HeaderMap` extractor clones them, an
/// allocation on the hottest path.
async fn leaf_single(
    state: Arc<AppState>,
    strategy: Strategy,
    key: Result<Path<String>, PathRejection>,
    query: Params,
    request: Request,
) -> Result<Response, ApiError> {
    let Path(key) = key.map_err(path_error)?;
    let Params(params) = query;
    let text = single_text(&state, strategy, &key, request.headers(), &params).await?;
    Ok(plain(text))
}

/// The query parameters of a request ([`Params`]).
type QueryParams = HashMap<String, String>;

/// One ID of `strategy` for `key` as text, after checking the key and its
/// token: the single-ID routes, routed or answered by `conn::Front`.
async fn single_text(
    state: &Arc<AppState>,
    strategy: Strategy,
    key: &str,
    headers: &HeaderMap,
    params: &QueryParams,
) -> Result<String, ApiError> {
    check_key(key)?;
    check_key_token(state, key, headers, params)?;
    let spec = route_spec(state, key, strategy)?;
    match issue(state, key, spec, 1).await? {
        Issued::Ints { values, public } => {
            let value = values.first().copied().ok_or_else(|| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "no ID issued",
                )
            })?;
            Ok(text_of(state, value, public)?)
        }
        Issued::Uuids(values) => Ok(values.first().map_or_else(String::new, |v| uuid_text(*v))),
    }
}

/// `GET /decodeSnowflakeId?snowflakeId=`: Leaf's shape, `{"timestamp":
/// "<unix ms>(<yyyy-MM-dd HH:mm:ss.SSS> UTC)", "workerId": "...", "sequenceId":
/// "..."}`, decoded with this server's layout; `workerId` is the whole node
/// field (datacenter and worker), as Leaf's.
async fn leaf_decode(State(state): Shared, query: Params) -> Result<Response, ApiError> {
    let Params(params) = query;
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
    key: Result<Path<String>, PathRejection>,
    query: Params,
    request: Request,
) -> Result<Response, ApiError> {
    let Path(key) = key.map_err(path_error)?;
    let Params(params) = query;
    check_key(&key)?;
    check_key_token(&state, &key, request.headers(), &params)?;
    let n = count_of(&params, state.max_count)?;
    let format = negotiate(request.headers());
    drop(request);
    let spec = state.spec(&key);
    let issued = issue(&state, &key, spec, n).await?;
    render(
        &state,
        format,
        json!({"key": key, "strategy": spec.strategy.name(), "public": spec.public}),
        issued,
    )
}

/// `GET /v1/decode/{id}`.
///
/// `?key=NAME` reads the ID with that key's layout: `monotonic.layout` for a
/// monotonic key, the snowflake layout otherwise.
async fn decode(
    State(state): Shared,
    id: Result<Path<String>, PathRejection>,
    query: Params,
) -> Result<Response, ApiError> {
    let Path(text) = id.map_err(path_error)?;
    let Params(params) = query;
    let key = params.get("key").map(String::as_str);
    if let Some(key) = key {
        check_key(key)?;
    }
    let (layout, layout_text) = state.decode_layout(key);
    let d = decode_text(layout, &text)?;
    Ok(axum::Json(json!({
        "id": d.id.get().to_string(),
        "layout": layout_text,
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
    query: Params,
) -> Result<Response, ApiError> {
    let Params(params) = query;
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
    state.count_issued("", if v7 { Strategy::Uuid7 } else { Strategy::Uuid4 }, n);
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

/// `GET /readyz`: 200 while the worker claim is held, its mark persisted and
/// the clock not behind beyond what the clock policy absorbs; 503 with the
/// reason otherwise (a load balancer then sends traffic elsewhere).
async fn readyz(State(state): Shared) -> Result<Response, ApiError> {
    let status = state.worker.status();
    match crate::ready::not_ready_reason(&state) {
        None => Ok(axum::Json(json!({
            "status": "ready",
            "registry": status.registry,
            "worker": status.worker,
            "monotonic": state.monotonic.as_deref().map(crate::monotonic::Monotonic::snapshot),
        }))
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
async fn scrape(State(state): Shared) -> Response {
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
