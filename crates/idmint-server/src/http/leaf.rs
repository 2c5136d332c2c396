//! Meituan Leaf's routes: one snowflake or segment ID as plain text
//! (`/api/{snowflake,segment}/get/{key}`, the strategy named by the route),
//! and `/decodeSnowflakeId` in Leaf's shape. [`single_text`] is also the
//! fast path's (`http/conn.rs`).

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idmint_node::config::Strategy;
use serde::Serialize;
use utoipa::ToSchema;

use super::Shared;
use super::error::{ApiError, ErrorBody, path_error};
use super::params::{Params, QueryParams, check_key, check_key_token, decode_text};
use super::render::plain;
use crate::issue::{Issued, issue, route_spec, text_of, uuid_text};
use crate::state::AppState;

/// `GET /api/snowflake/get/{key}`: one snowflake ID as plain text (Leaf's
/// `/api/snowflake/get/{key}`; the key only matters when it is configured public).
///
/// Without a query, `http/conn.rs` answers it before the router, alike.
#[utoipa::path(
    get,
    path = "/api/snowflake/get/{key}",
    operation_id = "leafSnowflake",
    tag = "leaf",
    summary = "One snowflake ID (Meituan Leaf's URL)",
    description = "One ID as decimal text, with no newline. The route serves an undeclared \
        name as a snowflake key (unless `server.undeclared_keys = \"refuse\"`); a key \
        declared public answers its obfuscated public ID in `obfuscation.format`.",
    params(
        ("key" = String, Path, description = "The key name: 1 to 128 bytes of ASCII letters, digits, `.`, `_`, `-` and `:`.",
            pattern = "^[A-Za-z0-9._:-]{1,128}$", min_length = 1, max_length = 128, example = "sf"),
        ("token" = Option<String>, Query, description = "The key's token, for a key with `keys.<name>.token` (or send `Authorization: Bearer <token>`)."),
    ),
    security((), ("key_token" = []), ("key_token_query" = [])),
    responses(
        (status = 200, description = "The ID.", body = String, content_type = "text/plain; charset=utf-8", example = "2124325464095850496"),
        (status = 400, description = "`invalid_key`, `invalid_query`, `invalid_path`: a bad key name; a parameter given twice; a path that doesn't decode.", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the key has a token and the request none, or the wrong one.", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 404, description = "`unknown_key`: the name is declared nowhere and `server.undeclared_keys = \"refuse\"`.", body = ErrorBody),
        (status = 409, description = "`wrong_strategy`: the key is known with another strategy.", body = ErrorBody),
        (status = 503, description = "`mark_reached`, `clock_behind`, `rollback_exhausted`: the worker can't issue right now.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
        (status = 500, description = "`layout_exhausted`, `clock_before_epoch`, `internal`.", body = ErrorBody),
    ),
)]
pub(super) async fn leaf_snowflake(
    State(state): Shared,
    key: Result<Path<String>, PathRejection>,
    query: Params,
    request: Request,
) -> Result<Response, ApiError> {
    leaf_single(state, Strategy::Snowflake, key, query, request).await
}

/// `GET /api/segment/get/{key}`: the key's next segment ID as plain text.
///
/// Without a query, `http/conn.rs` answers it before the router, alike.
#[utoipa::path(
    get,
    path = "/api/segment/get/{key}",
    operation_id = "leafSegment",
    tag = "leaf",
    summary = "The next segment ID of a key (Meituan Leaf's URL)",
    description = "The key's next segment ID as decimal text, with no newline. The route \
        serves an undeclared name as a segment key (unless `server.undeclared_keys = \
        \"refuse\"`); it must then exist in the segment store.",
    params(
        ("key" = String, Path, description = "The key name: 1 to 128 bytes of ASCII letters, digits, `.`, `_`, `-` and `:`.",
            pattern = "^[A-Za-z0-9._:-]{1,128}$", min_length = 1, max_length = 128, example = "order"),
        ("token" = Option<String>, Query, description = "The key's token, for a key with `keys.<name>.token` (or send `Authorization: Bearer <token>`)."),
    ),
    security((), ("key_token" = []), ("key_token_query" = [])),
    responses(
        (status = 200, description = "The ID.", body = String, content_type = "text/plain; charset=utf-8", example = "1001"),
        (status = 400, description = "`invalid_key`, `invalid_query`, `invalid_path`.", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the key's token is missing or wrong.", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 404, description = "`key_not_found`, `unknown_key`: the store has no such key; the name is refused.", body = ErrorBody),
        (status = 409, description = "`wrong_strategy`: the key is declared with another strategy, or was answered as another.", body = ErrorBody),
        (status = 503, description = "`unavailable`, `key_below_floor`, `store_reset`: the store can't lease a segment and the buffers are empty, or it holds less than this node issued.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
        (status = 500, description = "`key_exhausted`, `store_went_backwards`, `floor_file_error`, `internal`.", body = ErrorBody),
    ),
)]
pub(super) async fn leaf_segment(
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

/// One ID of `strategy` for `key` as text, after checking the key and its
/// token: the single-ID routes, routed or answered by `conn::Front`.
pub(super) async fn single_text(
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

/// `GET /decodeSnowflakeId`'s body, in Leaf's shape: every part a string.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"sequenceId": "0", "timestamp": "1795313633356(2026-11-22 02:13:53.356)", "workerId": "0"}))]
pub(crate) struct LeafDecoded {
    /// The sequence field, in decimal.
    sequence_id: String,
    /// `<unix ms>(<yyyy-MM-dd HH:mm:ss.SSS>)`, the time in parentheses in UTC.
    timestamp: String,
    /// The whole node field (datacenter and worker bits together), as Leaf's.
    worker_id: String,
}

/// `GET /decodeSnowflakeId?snowflakeId=`: Leaf's shape, `{"timestamp":
/// "<unix ms>(<yyyy-MM-dd HH:mm:ss.SSS> UTC)", "workerId": "...", "sequenceId":
/// "..."}`, decoded with this server's layout; `workerId` is the whole node
/// field (datacenter and worker), as Leaf's.
#[utoipa::path(
    get,
    path = "/decodeSnowflakeId",
    operation_id = "leafDecode",
    tag = "leaf",
    summary = "The parts of an ID, in Leaf's shape",
    description = "Reads the ID with this server's layout (`snowflake.layout`).",
    params(
        ("snowflakeId" = String, Query, description = "A decimal ID.", pattern = "^[0-9]+$", example = "2124325464095850496"),
    ),
    responses(
        (status = 200, description = "The parts.", body = LeafDecoded),
        (status = 400, description = "`invalid_id`: `snowflakeId` missing, not decimal, above 2^63 − 1, or not an ID of the layout; `invalid_query`: a parameter given twice.", body = ErrorBody),
    ),
)]
pub(super) async fn leaf_decode(State(state): Shared, query: Params) -> Result<Response, ApiError> {
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
    Ok(axum::Json(LeafDecoded {
        sequence_id: decoded.sequence.to_string(),
        timestamp: format!("{unix_ms}({shown})"),
        worker_id: node.to_string(),
    })
    .into_response())
}
