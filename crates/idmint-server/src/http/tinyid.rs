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

use crate::config::Strategy;
use crate::error::{ErrorClass, IssueError};
use crate::issue::{Issued, issue, route_spec};
use crate::keys::{KeySource, KeySpec};
use crate::state::AppState;
use crate::tokens::constant_time_eq;

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

impl Failure {
    fn into_response(self, body: Body) -> Response {
        let mut response = match body {
            // By hand, in Tinyid's field order (serde_json's maps sort keys).
            Body::Json => (
                self.status,
                [(header::CONTENT_TYPE, JSON)],
                format!(
                    "{{\"data\":null,\"code\":{},\"message\":{}}}",
                    self.code,
                    serde_json::Value::from(self.message)
                ),
            )
                .into_response(),
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
async fn next_id(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let result = match params(request).await {
        Ok(p) => ids(&state, &p).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(values) => {
            let mut body = String::with_capacity(40 + values.len() * 20);
            body.push_str("{\"data\":[");
            push_joined(&mut body, &values);
            body.push_str("],\"code\":200,\"message\":\"\"}");
            ok_json(body)
        }
        Err(e) => e.into_response(Body::Json),
    }
}

/// `/tinyid/id/nextIdSimple`.
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
async fn next_segment_id(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let result = match params(request).await {
        Ok(p) => segment(&state, &p).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(s) => ok_json(format!(
            "{{\"data\":{{\"maxId\":{},\"loadingId\":{},\"currentId\":{},\"delta\":{},\
             \"remainder\":{}}},\"code\":200,\"message\":\"\"}}",
            s.max_id, s.loading_id, s.current_id, s.delta, s.remainder
        )),
        Err(e) => e.into_response(Body::Json),
    }
}

/// `/tinyid/id/nextSegmentIdSimple`.
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

fn ok_json(body: String) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, JSON)], body).into_response()
}

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
