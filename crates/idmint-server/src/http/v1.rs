//! idmint's own `v1` routes: `/v1/ids/{key}` (IDs of a key by its
//! strategy), `/v1/decode/{id}` and `/v1/uuid`.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use idmint_node::config::Strategy;
use serde::Serialize;
use utoipa::ToSchema;

use super::Shared;
use super::error::{ApiError, ErrorBody, path_error};
use super::params::{Params, check_key, check_key_token, count_of, decode_text};
use super::render::{Batch, Binary, IdsBody, UuidsBody, negotiate, render};
use crate::issue::{Issued, issue, make_uuids};

/// `GET /v1/ids/{key}?count=N`.
#[utoipa::path(
    get,
    path = "/v1/ids/{key}",
    operation_id = "getIds",
    tag = "v1",
    summary = "IDs of a key, made by its strategy",
    description = "`count` IDs of the key, made by its strategy: declared in `[keys.<name>]` or \
        `[segment.keys.<name>]`, a key of the segment store, or else \
        `server.undeclared_keys` (`snowflake` by default). The body is chosen by `Accept`: \
        `application/octet-stream` (each ID an unsigned 64-bit little-endian integer, 8 bytes, \
        back to back in issue order), `application/json` (IDs as strings), anything else or \
        none one decimal ID per line. A public key's IDs are obfuscated: in text and JSON in \
        `obfuscation.format`, in binary as the 64-bit public ID.",
    params(
        ("key" = String, Path, description = "The key name: 1 to 128 bytes of ASCII letters, digits, `.`, `_`, `-` and `:`.",
            pattern = "^[A-Za-z0-9._:-]{1,128}$", min_length = 1, max_length = 128, example = "order"),
        ("count" = Option<u64>, Query, description = "How many IDs: a whole number of decimal digits from 1 to `server.max_count` (this document's `maximum`). Absent, 1.",
            minimum = 1, example = 3),
        ("token" = Option<String>, Query, description = "The key's token, for a key with `keys.<name>.token` (or send `Authorization: Bearer <token>`)."),
    ),
    security((), ("key_token" = []), ("key_token_query" = [])),
    responses(
        (status = 200, description = "The IDs.",
            headers(
                ("x-idmint-count" = u64, description = "The number of IDs."),
                ("x-idmint-strategy" = Strategy, description = "The key's strategy. A client must not prefetch a `monotonic` key's IDs."),
            ),
            content(
                (IdsBody = "application/json"),
                (String = "text/plain; charset=utf-8", example = "1001\n1002\n1003\n"),
                (Binary = "application/octet-stream"),
            )),
        (status = 400, description = "`invalid_key`, `invalid_count`, `invalid_query`, `invalid_path`: a bad key name or count; a parameter given twice; a path that doesn't decode.", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the key's token is missing or wrong.", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 404, description = "`key_not_found`, `unknown_key`: a segment key the store doesn't have; a refused name.", body = ErrorBody),
        (status = 503, description = "`mark_reached`, `clock_behind`, `rollback_exhausted` (snowflake keys), `unavailable`, `key_below_floor`, `store_reset` (segment keys), `no_leader` (monotonic keys).", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
        (status = 500, description = "`layout_exhausted`, `clock_before_epoch`, `key_exhausted`, `store_went_backwards`, `floor_file_error`, `obfuscation_disabled`, `encode_failed`, `internal`.", body = ErrorBody),
    ),
)]
pub(super) async fn ids(
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
    let batch = Batch::Key {
        key,
        strategy: spec.strategy,
        public: spec.public,
    };
    render(&state, format, batch, issued)
}

/// `GET /v1/decode/{id}`'s body: the parts of an ID.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"datacenter": 0, "id": "2124325464095850496", "layout": "twitter", "rollback": 0, "sequence": 0, "tick": 506478658699_u64, "time": "2026-11-22T02:13:53.356Z", "unix_ms": 1795313633356_i64, "worker": 0}))]
pub(crate) struct DecodedId {
    /// The datacenter field.
    datacenter: u32,
    /// The ID, as a decimal string.
    id: String,
    /// The layout it was read with, in its text form.
    layout: String,
    /// The rollback counter field.
    rollback: u32,
    /// The sequence field.
    sequence: u32,
    /// The time field: ticks since the layout's epoch.
    tick: u64,
    /// The time, RFC 3339 in UTC.
    time: String,
    /// The time, in milliseconds since the Unix epoch.
    unix_ms: i64,
    /// The worker field.
    worker: u32,
}

/// `GET /v1/decode/{id}`.
///
/// `?key=NAME` reads the ID with that key's layout: `monotonic.layout` for a
/// monotonic key, the snowflake layout otherwise.
#[utoipa::path(
    get,
    path = "/v1/decode/{id}",
    operation_id = "decodeId",
    tag = "v1",
    summary = "The parts of an ID",
    params(
        ("id" = String, Path, description = "A decimal ID.", pattern = "^[0-9]+$", example = "2124325464095850496"),
        ("key" = Option<String>, Query, description = "Read the ID with this key's layout: `monotonic.layout` for a `monotonic` key, `snowflake.layout` for any other key or none.",
            pattern = "^[A-Za-z0-9._:-]{1,128}$", min_length = 1, max_length = 128),
    ),
    responses(
        (status = 200, description = "The parts.", body = DecodedId),
        (status = 400, description = "`invalid_id`: not decimal, above 2^63 − 1, or not an ID of the layout; `invalid_key`, `invalid_query`, `invalid_path`.", body = ErrorBody),
    ),
)]
pub(super) async fn decode(
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
    Ok(axum::Json(DecodedId {
        datacenter: d.datacenter,
        id: d.id.get().to_string(),
        layout: layout_text.to_string(),
        rollback: d.rollback,
        sequence: d.sequence,
        tick: d.tick,
        time: d.time.to_string(),
        unix_ms: d.time.as_millisecond(),
        worker: d.worker,
    })
    .into_response())
}

/// `GET /v1/uuid?version=4|7&count=N` (version 7 unless given).
#[utoipa::path(
    get,
    path = "/v1/uuid",
    operation_id = "getUuids",
    tag = "v1",
    summary = "UUIDs, not tied to a key",
    description = "`count` UUIDs (RFC 9562). The body is chosen by `Accept` as for \
        `/v1/ids/{key}`: 16 bytes each in RFC 9562 byte order in binary, strings in JSON, \
        one hyphenated UUID per line in text.",
    params(
        ("version" = Option<String>, Query, description = "The UUID version: `7` (the default) or `4`.", example = "7"),
        ("count" = Option<u64>, Query, description = "How many UUIDs: a whole number of decimal digits from 1 to `server.max_count` (this document's `maximum`). Absent, 1.",
            minimum = 1, example = 2),
    ),
    responses(
        (status = 200, description = "The UUIDs.",
            headers(("x-idmint-count" = u64, description = "The number of UUIDs.")),
            content(
                (UuidsBody = "application/json"),
                (String = "text/plain; charset=utf-8", example = "019ac1d4-5f3e-7b2a-9c4d-2e6f8a1b3c5d\n"),
                (Binary = "application/octet-stream"),
            )),
        (status = 400, description = "`invalid_version`: a version other than 4 or 7; `invalid_count`, `invalid_query`: a bad count; a parameter given twice.", body = ErrorBody),
    ),
)]
pub(super) async fn uuids(
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
    let batch = Batch::Uuid {
        version: if v7 { 7 } else { 4 },
    };
    render(&state, negotiate(&headers), batch, issued)
}
