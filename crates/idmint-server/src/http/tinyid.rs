//! Didi Tinyid's HTTP API, so Tinyid's clients (the Java `tinyid-client`, and
//! anything calling its URLs) switch servers without a change.
//!
//! # Routes (Tinyid's `IdContronller`, under its context path `/tinyid`)
//! Each answers GET and POST (Spring's `@RequestMapping` takes any method),
//! with `bizType`, `token` and (`nextId*`) `batchSize` from the query string
//! or, on POST, an `application/x-www-form-urlencoded` body:
//! - `/tinyid/id/nextId`: `{"data":[1,2],"code":200,"message":""}`;
//! - `/tinyid/id/nextIdSimple`: `1,2` (plain text);
//! - `/tinyid/id/nextSegmentId`: `{"data":{"maxId":…,"loadingId":…,
//!   "currentId":…,"delta":1,"remainder":0},"code":200,"message":""}`;
//! - `/tinyid/id/nextSegmentIdSimple`: `currentId,loadingId,maxId,delta,remainder`,
//!   the text `tinyid-client`'s `HttpSegmentIdServiceImpl` splits on commas.
//!
//! The JSON field order is Tinyid's (`Response`: `data, code, message`;
//! `SegmentId`: `maxId, loadingId, currentId, delta, remainder`), and IDs are
//! JSON numbers, as Tinyid's `Long`s are.
//!
//! # A segment handed out
//! `nextSegmentId*` gives the client a whole segment it consumes locally:
//! the IDs `id` with `currentId < id <= maxId` and `id % delta ==
//! remainder`; the client loads the next one once it passes `loadingId`
//! (`currentId + step × 20 %`, Tinyid's `LOADING_PERCENT`). It is leased
//! from the store for the client alone, exactly like a segment of the
//! server's own buffers, so it never overlaps what `nextId` or any other
//! route hands out.
//!
//! # Tokens
//! With `segment.schema = "tinyid"` a request needs a token that Tinyid's
//! `tiny_id_token` table lists for its `bizType` (read at start and again
//! every minute, as Tinyid's `TinyIdTokenServiceImpl` does), so a team keeps
//! its tokens. Otherwise the key's `keys.<name>.token`, when it has one, and
//! a key without a token is open, as on every other route.
//!
//! # Failures
//! Never an ID, never a sentinel like `-1`, nothing issued. Where Tinyid
//! answers a failure, idmint answers the same body: a missing or wrong
//! token is HTTP 200 with `{"data":null,"code":5,"message":"token is error"}`,
//! anything else `"code":6` with a message naming what failed; the `Simple`
//! routes answer an empty body. A `batchSize` above Tinyid's shipped
//! `batch.size.max` (100,000), or above `server.max_count`, is clamped to it,
//! as Tinyid's `checkBatchSize` does. idmint then differs in the status: 400
//! for a `batchSize` of 0 or below, or one that is not a number (Tinyid
//! answers 400 only for the latter, and returns nothing for 0), 409
//! for a key declared with another strategy or public, 503 with
//! `Retry-After` when the store can't serve; an unknown key is 200 with code
//! 6, as in Tinyid.
//!
//! # References
//! Didi Tinyid: `IdContronller`, `vo/Response`, `vo/ErrorCode`,
//! `base/entity/SegmentId`, `DbSegmentIdServiceImpl.convert`,
//! `TinyIdTokenServiceImpl.canVisit`, `HttpSegmentIdServiceImpl`,
//! `IdContronller.checkBatchSize`, `offline/application.properties`
//! (`batch.size.max=100000`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequest, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde::Serialize;
use utoipa::ToSchema;

use crate::issue::{Issued, issue, route_spec};
use crate::keys::{KeySource, KeySpec};
use crate::state::AppState;
use crate::tokens::constant_time_eq;
use idmint_node::config::Strategy;
use idmint_node::{ErrorClass, IssueError};

/// Tinyid's `batch.size.max` as shipped: the most IDs one `nextId` hands
/// out; a larger `batchSize` is clamped to it.
pub(crate) const MAX_BATCH: u64 = 100_000;

/// Tinyid's `ErrorCode.TOKEN_ERR`.
const TOKEN_ERR: (u32, &str) = (5, "token is error");
/// Tinyid's `ErrorCode.SYS_ERR` code (its message is the failure's).
const SYS_ERR: u32 = 6;
/// Tinyid's `Constants.LOADING_PERCENT`.
const LOADING_PERCENT: u64 = 20;

/// The four routes.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/tinyid/id/nextId", any(next_id))
        .route("/tinyid/id/nextIdSimple", any(next_id_simple))
        .route("/tinyid/id/nextSegmentId", any(next_segment_id))
        .route(
            "/tinyid/id/nextSegmentIdSimple",
            any(next_segment_id_simple),
        )
}

// ---- Requests ----

/// A Tinyid route's parameters.
#[derive(Debug, Default)]
struct TinyidParams {
    biz_type: Option<String>,
    token: Option<String>,
    batch_size: Option<String>,
}

/// A failure as a Tinyid route answers it.
#[derive(Debug)]
struct Failure {
    status: StatusCode,
    code: u32,
    message: String,
    retry_after: Option<Duration>,
}

impl Failure {
    fn token() -> Failure {
        Failure {
            status: StatusCode::OK,
            code: TOKEN_ERR.0,
            message: TOKEN_ERR.1.to_owned(),
            retry_after: None,
        }
    }

    fn bad_request(message: String) -> Failure {
        Failure {
            status: StatusCode::BAD_REQUEST,
            code: SYS_ERR,
            message,
            retry_after: None,
        }
    }
}

impl From<IssueError> for Failure {
    fn from(e: IssueError) -> Failure {
        let status = match e.class {
            ErrorClass::BadInput => StatusCode::BAD_REQUEST,
            // Tinyid answers an unknown bizType with 200 and code 6.
            ErrorClass::NotFound => StatusCode::OK,
            ErrorClass::Conflict => StatusCode::CONFLICT,
            ErrorClass::Unauthorized => StatusCode::OK,
            ErrorClass::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Failure {
            status,
            code: SYS_ERR,
            message: e.message,
            retry_after: e.retry_after,
        }
    }
}

/// How a route writes its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Tinyid's `Response` JSON.
    Json,
    /// The `Simple` routes' text (empty on failure).
    Simple,
}

/// `nextId`'s body: Tinyid's `Response`, in its field order.
// A struct, not a JSON map (whose keys serde_json sorts), keeps that order.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"data": [1001, 1002], "code": 200, "message": ""}))]
pub(crate) struct TinyidIds {
    /// The IDs, as JSON numbers (Tinyid's `Long`s); `null` on failure.
    data: Option<Vec<u64>>,
    /// Tinyid's code: 200 success, 5 a token error, 6 any other failure.
    #[schema(examples(200, 5, 6))]
    code: u32,
    /// Empty on success; else the failure's message.
    message: String,
}

/// `nextSegmentId`'s body, Tinyid's `Response` of a `SegmentId`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"data": {"maxId": 2000, "loadingId": 1200, "currentId": 1000, "delta": 1, "remainder": 0}, "code": 200, "message": ""}))]
pub(crate) struct TinyidSegment {
    /// The segment; `null` on failure.
    data: Option<TinyidSegmentId>,
    /// Tinyid's code: 200 success, 5 a token error, 6 any other failure.
    #[schema(examples(200, 5, 6))]
    code: u32,
    /// Empty on success; else the failure's message.
    message: String,
}

/// Tinyid's `SegmentId`, in its field order: the client's IDs are those
/// `id` with `currentId < id <= maxId` and `id % delta == remainder`; it
/// loads the next segment once it passes `loadingId`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TinyidSegmentId {
    /// The segment's last ID.
    max_id: u64,
    /// Past this ID the client loads the next segment.
    loading_id: u64,
    /// The segment starts above this ID.
    current_id: u64,
    /// Hand out only IDs with `id % delta == remainder`.
    delta: u64,
    /// See `delta`.
    remainder: u64,
}

/// A failure's body: `{"data":null,"code":N,"message":"…"}`.
#[derive(Serialize)]
struct Failed {
    data: Option<()>,
    code: u32,
    message: String,
}

impl Failure {
    fn into_response(self, body: Body) -> Response {
        let mut response = match body {
            Body::Json => json_response(
                self.status,
                &Failed {
                    data: None,
                    code: self.code,
                    message: self.message,
                },
            ),
            Body::Simple => {
                tracing::debug!(code = self.code, message = %self.message, "tinyid request failed");
                (self.status, [(header::CONTENT_TYPE, TEXT_PLAIN)], "").into_response()
            }
        };
        if let Some(after) = self.retry_after {
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}

/// Spring's `text/plain` for a `String` answer.
const TEXT_PLAIN: &str = "text/plain;charset=UTF-8";
/// Spring's JSON content type.
const JSON: &str = "application/json;charset=UTF-8";

/// The parameters of a request: the query string, then (POST) a form body.
/// A parameter given twice is bad input (Spring would join the values with
/// a comma, which is never a valid key or number).
async fn params(request: Request) -> Result<TinyidParams, Failure> {
    let bad = |e: String| Failure::bad_request(e);
    let (parts, body) = request.into_parts();
    let Query(mut pairs) = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
        .map_err(|e| bad(format!("query string: {}", e.body_text())))?;
    let form = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if parts.method == Method::POST && form {
        // `Form` reads the body of a POST; the query string was read above.
        let request = Request::from_parts(parts, body);
        let axum::Form(body_pairs) =
            axum::Form::<Vec<(String, String)>>::from_request(request, &())
                .await
                .map_err(|e| bad(format!("form body: {}", e.body_text())))?;
        pairs.extend(body_pairs);
    }
    let mut params = TinyidParams::default();
    for (name, value) in pairs {
        let slot = match name.as_str() {
            "bizType" => &mut params.biz_type,
            "token" => &mut params.token,
            "batchSize" => &mut params.batch_size,
            // Spring ignores parameters it doesn't bind; so does this.
            _ => continue,
        };
        if slot.is_some() {
            return Err(bad(format!(
                "parameter {name:?} is given more than once: give it once"
            )));
        }
        *slot = Some(value);
    }
    Ok(params)
}

/// Tinyid's `batchSize` as Spring binds it: absent or empty is 1 (null); an
/// integer, else 400 before anything else is checked.
fn parse_batch_size(text: Option<&str>) -> Result<i64, Failure> {
    let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(1);
    };
    text.parse().map_err(|_| {
        let shown: String = text.chars().take(40).collect();
        Failure::bad_request(format!("batchSize {shown:?} is not a whole number"))
    })
}

/// A batch size of at least 1, clamped to [`MAX_BATCH`] and
/// `server.max_count` as Tinyid's `checkBatchSize` clamps to its
/// `batch.size.max`.
fn check_batch_size(state: &AppState, n: i64) -> Result<u64, Failure> {
    let max = MAX_BATCH.min(state.max_count);
    match u64::try_from(n) {
        Ok(n) if n >= 1 => Ok(n.min(max)),
        _ => Err(Failure::bad_request(format!(
            "batchSize {n} is out of range: ask for at least 1 ID (at most {max} are handed out)"
        ))),
    }
}

/// Tinyid's `canVisit` (bizType and token present, and the token opens the
/// key), then the key itself: a valid name, and a segment key here.
fn admit(state: &AppState, params: &TinyidParams) -> Result<(String, KeySpec), Failure> {
    let biz_type = params.biz_type.as_deref().unwrap_or("");
    let token = params.token.as_deref().unwrap_or("");
    if biz_type.is_empty() {
        return Err(Failure::token());
    }
    match &state.tinyid_tokens {
        Some(tokens) => {
            if token.is_empty() || !tokens.can_visit(biz_type, token) {
                return Err(Failure::token());
            }
        }
        None => {
            if let Some(secret) = state.token_for(biz_type)
                && !constant_time_eq(token.as_bytes(), secret.expose().as_bytes())
            {
                return Err(Failure::token());
            }
        }
    }
    crate::issue::check_key(biz_type)?;
    let spec = segment_spec(state, biz_type)?;
    Ok((biz_type.to_owned(), spec))
}

/// The spec a Tinyid route issues with: a segment key's, or a typed error
/// for a key declared with another strategy, or public (its IDs are served
/// obfuscated, on `/v1/ids` only).
fn segment_spec(state: &AppState, key: &str) -> Result<KeySpec, IssueError> {
    let spec = route_spec(state, key, Strategy::Segment)?;
    if spec.public {
        return Err(IssueError::new(
            ErrorClass::Conflict,
            "wrong_strategy",
            format!(
                "key {key:?} is public: its IDs are served obfuscated on /v1/ids/{key} only, \
                 never as Tinyid's plain numbers"
            ),
        ));
    }
    Ok(spec)
}

/// `n` segment IDs of `key`, as numbers.
async fn ids(state: &Arc<AppState>, params: &TinyidParams) -> Result<Vec<u64>, Failure> {
    let n = parse_batch_size(params.batch_size.as_deref())?;
    let (key, spec) = admit(state, params)?;
    let n = check_batch_size(state, n)?;
    match issue(state, &key, spec, n).await? {
        Issued::Ints { values, .. } => Ok(values.into_vec()),
        Issued::Uuids(_) => Err(IssueError::internal("a segment key issued UUIDs").into()),
    }
}

/// A segment for the client to use up itself, in Tinyid's terms: `(currentId,
/// maxId]`, `loadingId`, `delta`, `remainder`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SegmentId {
    max_id: u64,
    loading_id: u64,
    current_id: u64,
    delta: u64,
    remainder: u64,
}

async fn segment(state: &Arc<AppState>, params: &TinyidParams) -> Result<SegmentId, Failure> {
    let (key, spec) = admit(state, params)?;
    if spec.source == KeySource::Refused {
        return Err(crate::issue::refused(&key).into());
    }
    let store = state.segments.store();
    let timeout = state.segments.config().store_timeout();
    // Under this node's floors, as the buffers: the segment is above what
    // it issued, and raises its floor before the client gets it.
    let grant = match tokio::time::timeout(timeout, state.segments.lease_segment(&key)).await {
        Ok(result) => result.map_err(IssueError::from)?,
        Err(_) => {
            return Err(IssueError::unavailable(
                "timeout",
                format!(
                    "{} store: leasing a segment of {key:?} timed out after {timeout:?}",
                    store.kind()
                ),
                Duration::from_secs(1),
            )
            .into());
        }
    };
    // tinyid-client reads delta and remainder with Integer.parseInt.
    if grant.delta > i32::MAX as u64 {
        return Err(IssueError::new(
            ErrorClass::Conflict,
            "wrong_strategy",
            format!(
                "key {key:?} has delta {} above a Java int: Tinyid's client can't take its \
                 segments; use nextId or /v1/ids/{key}",
                grant.delta
            ),
        )
        .into());
    }
    // The grant is [start, end); Tinyid's client takes (currentId, maxId].
    // ID 0 is never issued, so a segment from 0 starts above it.
    let current_id = grant.start().max(1) - 1;
    let max_id = grant.max_id - 1;
    let loading_id = current_id + grant.step * LOADING_PERCENT / 100;
    // Counted as issued: the client hands them out itself.
    let upto = |x: u64| match x.checked_sub(grant.remainder) {
        Some(above) => above / grant.delta + 1,
        None => 0,
    };
    let n_ids = upto(max_id) - upto(current_id);
    state.count_issued(&key, Strategy::Segment, n_ids);
    Ok(SegmentId {
        max_id,
        loading_id,
        current_id,
        delta: grant.delta,
        remainder: grant.remainder,
    })
}

// ---- Handlers ----

/// `/tinyid/id/nextId`.
#[utoipa::path(
    method(get, post),
    path = "/tinyid/id/nextId",
    operation_id = "tinyidNextId",
    tag = "tinyid",
    summary = "IDs of a segment key (Didi Tinyid's URL)",
    description = TINYID_DESCRIPTION,
    params(
        ("bizType" = Option<String>, Query, description = "The key. Missing or empty: code 5.", example = "order"),
        ("token" = Option<String>, Query, description = "The key's Tinyid token (`tiny_id_token`), or its `keys.<name>.token`."),
        ("batchSize" = Option<i64>, Query, description = "How many IDs (absent or empty: 1). Above 100,000 (Tinyid's `batch.size.max`) or `server.max_count`, cut to it; 0 or below, or not a number: 400.", minimum = 1, example = 2),
    ),
    request_body(content = TinyidForm, content_type = "application/x-www-form-urlencoded",
        description = "POST only: the parameters as a form body instead of the query."),
    security((), ("key_token_query" = [])),
    responses(
        (status = 200, description = "The IDs (code 200), or Tinyid's failure: code 5 for a missing `bizType` or a missing or wrong token, code 6 for an unknown key.", body = TinyidIds, content_type = "application/json;charset=UTF-8"),
        (status = 400, description = "Code 6: `batchSize` not a whole number, or 0 or below; a parameter given twice.", body = TinyidIds, content_type = "application/json;charset=UTF-8"),
        (status = 409, description = "Code 6: the key is declared with another strategy, or public.", body = TinyidIds, content_type = "application/json;charset=UTF-8"),
        (status = 503, description = "Code 6: the store can't serve.", body = TinyidIds, content_type = "application/json;charset=UTF-8",
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
        (status = 500, description = "Code 6: a failure of the server.", body = TinyidIds, content_type = "application/json;charset=UTF-8"),
    ),
)]
async fn next_id(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let result = match params(request).await {
        Ok(p) => ids(&state, &p).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(values) => json_response(
            StatusCode::OK,
            &TinyidIds {
                data: Some(values),
                code: 200,
                message: String::new(),
            },
        ),
        Err(e) => e.into_response(Body::Json),
    }
}

/// `/tinyid/id/nextIdSimple`.
#[utoipa::path(
    method(get, post),
    path = "/tinyid/id/nextIdSimple",
    operation_id = "tinyidNextIdSimple",
    tag = "tinyid",
    summary = "IDs of a segment key as text (Didi Tinyid's URL)",
    description = TINYID_DESCRIPTION,
    params(
        ("bizType" = Option<String>, Query, description = "The key. Missing or empty: an empty body.", example = "order"),
        ("token" = Option<String>, Query, description = "The key's Tinyid token (`tiny_id_token`), or its `keys.<name>.token`."),
        ("batchSize" = Option<i64>, Query, description = "How many IDs (absent or empty: 1). Above 100,000 (Tinyid's `batch.size.max`) or `server.max_count`, cut to it; 0 or below, or not a number: 400.", minimum = 1, example = 2),
    ),
    request_body(content = TinyidForm, content_type = "application/x-www-form-urlencoded",
        description = "POST only: the parameters as a form body instead of the query."),
    security((), ("key_token_query" = [])),
    responses(
        (status = 200, description = "The IDs joined by commas; empty for a token error or an unknown key.", body = String, content_type = "text/plain;charset=UTF-8", example = "1001,1002"),
        (status = 400, description = "Empty: `batchSize` not a whole number, or 0 or below; a parameter given twice."),
        (status = 409, description = "Empty: the key is declared with another strategy, or public."),
        (status = 503, description = "Empty: the store can't serve.",
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
        (status = 500, description = "Empty: a failure of the server."),
    ),
)]
async fn next_id_simple(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let result = match params(request).await {
        Ok(p) => ids(&state, &p).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(values) => {
            let mut body = String::with_capacity(values.len() * 20);
            push_joined(&mut body, &values);
            (StatusCode::OK, [(header::CONTENT_TYPE, TEXT_PLAIN)], body).into_response()
        }
        Err(e) => e.into_response(Body::Simple),
    }
}

/// `/tinyid/id/nextSegmentId`.
#[utoipa::path(
    method(get, post),
    path = "/tinyid/id/nextSegmentId",
    operation_id = "tinyidNextSegmentId",
    tag = "tinyid",
    summary = "A whole segment for the client to hand out (Didi Tinyid's URL)",
    description = TINYID_SEGMENT_DESCRIPTION,
    params(
        ("bizType" = Option<String>, Query, description = "The key. Missing or empty: code 5.", example = "order"),
        ("token" = Option<String>, Query, description = "The key's Tinyid token (`tiny_id_token`), or its `keys.<name>.token`."),
    ),
    request_body(content = TinyidForm, content_type = "application/x-www-form-urlencoded",
        description = "POST only: the parameters as a form body instead of the query."),
    security((), ("key_token_query" = [])),
    responses(
        (status = 200, description = "The segment (code 200), or Tinyid's failure: code 5 for a missing `bizType` or a missing or wrong token, code 6 for an unknown key.", body = TinyidSegment, content_type = "application/json;charset=UTF-8"),
        (status = 400, description = "Code 6: a parameter given twice.", body = TinyidSegment, content_type = "application/json;charset=UTF-8"),
        (status = 409, description = "Code 6: the key is declared with another strategy, or public, or its `delta` doesn't fit a Java `int`.", body = TinyidSegment, content_type = "application/json;charset=UTF-8"),
        (status = 503, description = "Code 6: the store can't serve.", body = TinyidSegment, content_type = "application/json;charset=UTF-8",
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
        (status = 500, description = "Code 6: a failure of the server.", body = TinyidSegment, content_type = "application/json;charset=UTF-8"),
    ),
)]
async fn next_segment_id(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let result = match params(request).await {
        Ok(p) => segment(&state, &p).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(s) => json_response(
            StatusCode::OK,
            &TinyidSegment {
                data: Some(TinyidSegmentId {
                    max_id: s.max_id,
                    loading_id: s.loading_id,
                    current_id: s.current_id,
                    delta: s.delta,
                    remainder: s.remainder,
                }),
                code: 200,
                message: String::new(),
            },
        ),
        Err(e) => e.into_response(Body::Json),
    }
}

/// `/tinyid/id/nextSegmentIdSimple`.
#[utoipa::path(
    method(get, post),
    path = "/tinyid/id/nextSegmentIdSimple",
    operation_id = "tinyidNextSegmentIdSimple",
    tag = "tinyid",
    summary = "A whole segment as text (Didi Tinyid's URL)",
    description = TINYID_SEGMENT_DESCRIPTION,
    params(
        ("bizType" = Option<String>, Query, description = "The key. Missing or empty: an empty body.", example = "order"),
        ("token" = Option<String>, Query, description = "The key's Tinyid token (`tiny_id_token`), or its `keys.<name>.token`."),
    ),
    request_body(content = TinyidForm, content_type = "application/x-www-form-urlencoded",
        description = "POST only: the parameters as a form body instead of the query."),
    security((), ("key_token_query" = [])),
    responses(
        (status = 200, description = "`currentId,loadingId,maxId,delta,remainder`; empty for a token error or an unknown key.", body = String, content_type = "text/plain;charset=UTF-8", example = "1000,1200,2000,1,0"),
        (status = 400, description = "Empty: a parameter given twice."),
        (status = 409, description = "Empty: the key is declared with another strategy, or public, or its `delta` doesn't fit a Java `int`."),
        (status = 503, description = "Empty: the store can't serve.",
            headers(("Retry-After" = u64, description = "Whole seconds to wait before a retry (at least 1)."))),
        (status = 500, description = "Empty: a failure of the server."),
    ),
)]
async fn next_segment_id_simple(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let result = match params(request).await {
        Ok(p) => segment(&state, &p).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(s) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, TEXT_PLAIN)],
            format!(
                "{},{},{},{},{}",
                s.current_id, s.loading_id, s.max_id, s.delta, s.remainder
            ),
        )
            .into_response(),
        Err(e) => e.into_response(Body::Simple),
    }
}

fn push_joined(body: &mut String, values: &[u64]) {
    let mut buf = itoa::Buffer::new();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(buf.format(*v));
    }
}

fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let body = serde_json::to_vec(body).expect("a Tinyid body serializes");
    (status, [(header::CONTENT_TYPE, JSON)], body).into_response()
}

/// The parameters of a Tinyid route as a POST form body.
// Only a schema: `params` reads the form by name.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "only a schema: `params` reads the form by name")]
pub(crate) struct TinyidForm {
    /// The key.
    biz_type: Option<String>,
    /// The key's token.
    token: Option<String>,
    /// How many IDs (`nextId*` only; absent or empty: 1).
    batch_size: Option<String>,
}

/// What the Tinyid routes say in the document.
const TINYID_DESCRIPTION: &str = "Didi Tinyid's route, answering any method as Spring's \
    `@RequestMapping` does (GET and POST are documented). Parameters come from the query \
    string or, on POST, an `application/x-www-form-urlencoded` body; a parameter given \
    twice is refused, others are ignored. The key is a segment key; an undeclared name is \
    served as one (unless `server.undeclared_keys = \"refuse\"`). Token: with \
    `segment.schema = \"tinyid\"` one that Tinyid's `tiny_id_token` table lists for the \
    `bizType`; otherwise the key's `keys.<name>.token` when it has one. IDs are JSON \
    numbers, as Tinyid's are; idmint's stable error codes don't appear in Tinyid's bodies.";

/// What the Tinyid segment routes say in the document.
const TINYID_SEGMENT_DESCRIPTION: &str = "Didi Tinyid's route: a whole segment leased from \
    the store for this client alone, so it overlaps nothing any route hands out. The \
    client's IDs are those `id` with `currentId < id <= maxId` and `id % delta == \
    remainder`; it loads the next segment once it passes `loadingId` (`currentId` + 20 % of \
    the step). Parameters, tokens and keys as for `nextId`; no `batchSize`.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_parse_as_spring_binds_them() {
        assert_eq!(parse_batch_size(None).unwrap(), 1);
        assert_eq!(parse_batch_size(Some("")).unwrap(), 1);
        assert_eq!(parse_batch_size(Some(" 7 ")).unwrap(), 7);
        assert_eq!(parse_batch_size(Some("-3")).unwrap(), -3);
        for bad in ["abc", "1.5", "1e3", "99999999999999999999"] {
            let e = parse_batch_size(Some(bad)).unwrap_err();
            assert_eq!(
                (e.status, e.code),
                (StatusCode::BAD_REQUEST, SYS_ERR),
                "{bad}"
            );
            assert!(e.message.contains("batchSize"), "{}", e.message);
        }
    }
}
