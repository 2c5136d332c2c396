//! The gRPC surface (tonic): `idmint.v1.IdService`, defined in the
//! repository's `proto/idmint/v1/idmint.proto` (the contract: fields, units,
//! errors), on its own port when `server.grpc_addr` is set.
//!
//! - `GetIds`: a batch of a key's IDs, made by the key's strategy exactly as
//!   `GET /v1/ids/{key}` makes them (`issue::issue`), with the same
//!   limits (`server.max_count`) and error codes.
//! - `Decode`: an ID's parts under the server's layout, as `GET /v1/decode/{id}`.
//! - `StreamIds`: messages of IDs, one after another, made as the stream is
//!   polled: HTTP/2 flow control is the backpressure (a client that stops
//!   reading stops the issuing), and a client that cancels or goes away drops
//!   the stream, which ends it. Nothing is buffered ahead.
//!
//! # Errors
//! An `IssueError` becomes a `Status`: its class picks the code
//! (`INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `UNAUTHENTICATED`,
//! `UNAVAILABLE`, `INTERNAL`), its message is the status message, and the
//! metadata carries the stable code (`idmint-error-code: key_not_found`) and,
//! for `UNAVAILABLE`, the retry hint in whole milliseconds (`retry-after-ms`).
//!
//! # Key tokens
//! A key with `keys.<name>.token` is served only to calls carrying
//! `authorization: Bearer <token>` metadata, compared in constant time.
//!
//! # Metrics
//! IDs are counted by `issue::issue`, as for every surface. Each call's
//! latency goes into `idmint_grpc_request_duration_seconds{method,code}` (for
//! `StreamIds`, up to its first message), and open streams into
//! `idmint_grpc_streams_open`.
//!
//! # Health and reflection
//! The same listener serves `grpc.health.v1.Health`, `SERVING` exactly while
//! `/readyz` is ready (for `""` and `idmint.v1.IdService`, `Watch` streaming
//! each change), and server reflection v1 and v1alpha (`health.rs`).
//!
//! # TLS
//! With `[tls]` (and `tls.grpc` left on), connections are handed to tonic
//! once their TLS handshake (ALPN `h2`) is done, each made in its own task
//! within `server.read_timeout` (`accept`): the same acceptor and reload
//! path as HTTP and RESP (`tls.rs`), not tonic's own TLS.
//!
//! # Shutdown
//! When the server stops, the listener stops accepting and every connection
//! is told to go away (HTTP/2 `GOAWAY`); calls in flight finish, and open
//! streams end after their current message with `UNAVAILABLE`
//! (`shutting_down`); health turns `NOT_SERVING` and `Watch` streams end. Whatever is still open after `server.shutdown_grace` is
//! dropped.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::Either;
use futures_util::{Stream, StreamExt, stream};
use idmint_core::Id;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::{Code, Request, Response, Status};

use crate::issue::{self, Issued};
use crate::keys::KeySpec;
use crate::listen::{Bound, ConnectionLimits, stopped};
use crate::metrics::Metrics;
use crate::monotonic::Reserve;
use crate::state::AppState;
use crate::tls::{self, MaybeTls, Surface, Tls};
use crate::tokens::constant_time_eq;
use idmint_node::{ErrorClass, IssueError};
use proto::id_service_server::{IdService, IdServiceServer};
use proto::{
    DecodeRequest, DecodeResponse, GetIdsRequest, GetIdsResponse, ReserveRequest, ReserveResponse,
    StreamIdsRequest,
};

mod health;

pub use crate::error::ERROR_CODE_METADATA;
pub use crate::proto;

/// The metadata key of an `UNAVAILABLE` call's retry hint, in milliseconds.
pub const RETRY_AFTER_METADATA: &str = "retry-after-ms";

/// The RPC names, as the latency metric labels them.
const GET_IDS: &str = "GetIds";
const DECODE: &str = "Decode";
const STREAM_IDS: &str = "StreamIds";
const RESERVE: &str = "Reserve";

/// The metadata key naming the oracle's leader (`address:port`) on a
/// `Reserve` refused with `not_leader`.
pub const LEADER_METADATA: &str = "idmint-leader";

/// Serves gRPC on `bound` until `stop` turns true; then stops accepting,
/// lets calls in flight finish and streams end, for at most `grace`.
pub(crate) async fn serve(
    bound: Bound,
    state: Arc<AppState>,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let Bound {
        listener,
        local_addr,
    } = bound;
    let limits = state.connections.clone();
    let tls = state.tls.clone().filter(|t| t.enabled(Surface::Grpc));
    let (health, _follower) = health::health(state.clone(), stop.clone()).await;
    let (reflection_v1, reflection_v1alpha) = match health::reflection() {
        Ok((v1, v1alpha)) => (Some(v1), Some(v1alpha)),
        Err(e) => {
            tracing::error!(error = %e, "gRPC server reflection is off: its descriptors don't decode");
            (None, None)
        }
    };
    let service = IdServiceServer::new(Service {
        state,
        stop: stop.clone(),
    });
    let shutdown = {
        let mut stop = stop.clone();
        async move {
            stopped(&mut stop).await;
            tracing::info!(addr = %local_addr, "gRPC: no new connections");
        }
    };
    let served = tonic::transport::Server::builder()
        .add_service(service)
        .add_service(health)
        .add_optional_service(reflection_v1)
        .add_optional_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(accept(listener, local_addr, limits, tls), shutdown);
    tokio::select! {
        result = served => {
            if let Err(e) = result {
                tracing::error!(addr = %local_addr, error = %e, "serving gRPC failed");
            }
        }
        () = async { stopped(&mut stop).await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace = ?grace, "gRPC calls still open after the shutdown grace; closing");
        }
    }
}

/// The accepted connections, with `TCP_NODELAY` set (small replies go out at
/// once), each holding one of the server's connection slots
/// (`server.max_connections`, shared with HTTP and RESP) until it closes. A
/// failed accept (out of file descriptors) pauses instead of spinning. With
/// TLS, see [`accept_tls`].
fn accept(
    listener: TcpListener,
    addr: SocketAddr,
    limits: ConnectionLimits,
    tls: Option<Arc<Tls>>,
) -> impl Stream<Item = std::io::Result<Slotted>> {
    if let Some(tls) = tls {
        return Either::Right(accept_tls(listener, addr, limits, tls));
    }
    Either::Left(stream::unfold(listener, move |listener| {
        let limits = limits.clone();
        async move {
            let slot = limits.slot("grpc").await?;
            let (stream, _) = accept_one(&listener, addr).await;
            Some((
                Ok(Slotted {
                    stream: MaybeTls::Plain(stream),
                    _slot: slot,
                }),
                listener,
            ))
        }
    }))
}

/// The next connection, with `TCP_NODELAY` set; a failed accept pauses.
async fn accept_one(listener: &TcpListener, addr: SocketAddr) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => {
                let _ = accepted.0.set_nodelay(true);
                return accepted;
            }
            Err(e) => {
                tracing::warn!(addr = %addr, error = %e, "gRPC accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// [`accept`] over TLS: a task accepts, and each connection shakes hands in
/// a task of its own (within `server.read_timeout`), so a slow or silent
/// client never holds up the others; connections done with their handshake
/// come out in the order they finish. The accepting task ends when tonic
/// drops the stream (the server stopped).
fn accept_tls(
    listener: TcpListener,
    addr: SocketAddr,
    limits: ConnectionLimits,
    tls: Arc<Tls>,
) -> impl Stream<Item = std::io::Result<Slotted>> {
    let (ready, handshaken) = tokio::sync::mpsc::channel::<Slotted>(64);
    tokio::spawn(async move {
        loop {
            let slot = tokio::select! {
                () = ready.closed() => return,
                slot = limits.slot("grpc") => slot,
            };
            let Some(slot) = slot else { return };
            let (stream, peer) = tokio::select! {
                () = ready.closed() => return,
                accepted = accept_one(&listener, addr) => accepted,
            };
            // Loaded per connection, so a reloaded certificate serves the next one.
            let acceptor = tls.acceptor(Surface::Grpc);
            let ready = ready.clone();
            let timeout = limits.read_timeout;
            tokio::spawn(async move {
                // No plain-text reply: a plain HTTP/2 client reads only frames.
                let handshake =
                    tls::accept_within(acceptor, stream, b"", timeout, peer, Surface::Grpc);
                if let Some(stream) = handshake.await {
                    let _ = ready
                        .send(Slotted {
                            stream,
                            _slot: slot,
                        })
                        .await;
                }
            });
        }
    });
    stream::unfold(handshaken, |mut handshaken| async move {
        let slotted = handshaken.recv().await?;
        Some((Ok(slotted), handshaken))
    })
}

pin_project_lite::pin_project! {
    /// A gRPC client's connection and the slot it holds until dropped.
    struct Slotted {
        #[pin]
        stream: MaybeTls,
        _slot: OwnedSemaphorePermit,
    }
}

impl Connected for Slotted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Slotted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.project().stream.poll_read(cx, buf)
    }
}

impl AsyncWrite for Slotted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.project().stream.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().stream.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().stream.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.project().stream.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// `idmint.v1.IdService` on the server's shared state.
struct Service {
    state: Arc<AppState>,
    /// Turns true when the server stops: open streams end.
    stop: watch::Receiver<bool>,
}

/// What `StreamIds` answers: a boxed stream of messages.
type IdStream = Pin<Box<dyn Stream<Item = Result<GetIdsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl IdService for Service {
    async fn get_ids(
        &self,
        request: Request<GetIdsRequest>,
    ) -> Result<Response<GetIdsResponse>, Status> {
        let started = Instant::now();
        let result = self.try_get_ids(request).await;
        self.finish(GET_IDS, started, result)
    }

    async fn decode(
        &self,
        request: Request<DecodeRequest>,
    ) -> Result<Response<DecodeResponse>, Status> {
        let started = Instant::now();
        let request = request.get_ref();
        let result = decode(&self.state, request.id, &request.key);
        self.finish(DECODE, started, result)
    }

    type StreamIdsStream = IdStream;

    async fn stream_ids(
        &self,
        request: Request<StreamIdsRequest>,
    ) -> Result<Response<IdStream>, Status> {
        let started = Instant::now();
        let result = self.open_stream(request).await;
        self.finish(STREAM_IDS, started, result)
    }

    async fn reserve(
        &self,
        request: Request<ReserveRequest>,
    ) -> Result<Response<ReserveResponse>, Status> {
        let started = Instant::now();
        let result = self.try_reserve(request).await;
        let mut outcome = self.finish(RESERVE, started, result);
        if let (Err(status), Some(m)) = (&mut outcome, &self.state.monotonic) {
            // Tell the follower where to go instead.
            if let Some(leader) = m.oracle().leader().filter(|l| !l.is_self) {
                let addr = format!("{}:{}", leader.node.address, leader.node.port);
                if let Ok(v) = MetadataValue::try_from(addr) {
                    status.metadata_mut().insert(LEADER_METADATA, v);
                }
            }
        }
        outcome
    }
}

impl Service {
    /// A follower's forwarded reservation: served only as the leader, never
    /// forwarded again.
    async fn try_reserve(
        &self,
        request: Request<ReserveRequest>,
    ) -> Result<ReserveResponse, IssueError> {
        let (metadata, _, request) = request.into_parts();
        if let Some(token) = &self.state.admin_token {
            let given = bearer(&metadata);
            if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.expose().as_bytes())) {
                return Err(IssueError::new(
                    ErrorClass::Unauthorized,
                    "unauthorized",
                    "Reserve needs server.admin_token: send `authorization: Bearer <token>`",
                ));
            }
        }
        let Some(monotonic) = &self.state.monotonic else {
            return Err(IssueError::new(
                ErrorClass::NotFound,
                "no_oracle",
                "this node runs no timestamp oracle: no key is declared strategy = \"monotonic\"",
            ));
        };
        let max = self.state.max_count;
        let count = request.count;
        if count == 0 || count > max {
            return Err(IssueError::bad_input(
                "invalid_count",
                format!("count {count} is out of range: ask for 1..={max} IDs (server.max_count)"),
            ));
        }
        let batch = match monotonic.reserve_here(count).await {
            Ok(batch) => batch,
            Err(Reserve::Failed(e)) => return Err(e),
            Err(Reserve::NotLeader) => {
                let e = monotonic.oracle().not_leader();
                return Err(IssueError::unavailable(
                    e.code(),
                    e.to_string(),
                    Duration::from_millis(100),
                ));
            }
        };
        let term_ms = monotonic
            .oracle()
            .leader()
            .and_then(|l| l.term)
            .map_or(0, |t| t.as_millisecond());
        // The wire form is runs of consecutive integers: the oracle's layout
        // has no node bits, so its sequence is the lowest field (stride 1).
        if let Some(run) = batch
            .runs()
            .iter()
            .find(|r| r.stride() != 1 && r.count() > 1)
        {
            return Err(IssueError::internal(format!(
                "the oracle's IDs step by {}, which Reserve can't send as runs",
                run.stride()
            )));
        }
        let (firsts, counts) = batch
            .runs()
            .iter()
            .map(|run| (run.first().get(), run.count()))
            .unzip();
        Ok(ReserveResponse {
            firsts,
            counts,
            term_ms,
        })
    }

    async fn try_get_ids(
        &self,
        request: Request<GetIdsRequest>,
    ) -> Result<GetIdsResponse, IssueError> {
        let (metadata, _, request) = request.into_parts();
        let spec = self.admit(&metadata, &request.key, "count", request.count)?;
        batch(&self.state, &request.key, spec, request.count).await
    }

    /// Checks a stream's request and issues its first message, so that bad
    /// input and unknown keys fail the call itself.
    async fn open_stream(
        &self,
        request: Request<StreamIdsRequest>,
    ) -> Result<IdStream, IssueError> {
        let (metadata, _, request) = request.into_parts();
        let StreamIdsRequest {
            key,
            count_per_message: per_message,
            total,
        } = request;
        let spec = self.admit(&metadata, &key, "count_per_message", per_message)?;
        let mut feed = Feed {
            state: self.state.clone(),
            key,
            spec,
            per_message,
            left: (total > 0).then_some(total),
            stop: self.stop.clone(),
            _open: OpenStream::new(self.state.metrics.clone()),
        };
        let first = feed.issue_next().await?;
        let rest = stream::unfold(feed, |mut feed| async move {
            let message = feed.next().await?;
            Some((message, feed))
        });
        Ok(Box::pin(stream::once(async { Ok(first) }).chain(rest)))
    }

    /// The checks every issuing call makes, in the HTTP API's order: the
    /// key's form, its token, the count. Returns the key's spec.
    fn admit(
        &self,
        metadata: &MetadataMap,
        key: &str,
        count_name: &str,
        count: u64,
    ) -> Result<KeySpec, IssueError> {
        issue::check_key(key)?;
        check_token(&self.state, key, metadata)?;
        let max = self.state.max_count;
        if count == 0 || count > max {
            return Err(IssueError::bad_input(
                "invalid_count",
                format!(
                    "{count_name} {count} is out of range: ask for 1..={max} IDs (server.max_count)"
                ),
            ));
        }
        Ok(self.state.spec(key))
    }

    /// Records the call's latency under its outcome and turns a failure into
    /// its status.
    fn finish<T>(
        &self,
        method: &'static str,
        started: Instant,
        result: Result<T, IssueError>,
    ) -> Result<Response<T>, Status> {
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => code_of(e.class).1,
        };
        self.state
            .metrics
            .record_grpc_latency(method, outcome, started.elapsed());
        result.map(Response::new).map_err(status_of)
    }
}

/// The token of `authorization: Bearer <token>` metadata, if any.
fn bearer(metadata: &MetadataMap) -> Option<&str> {
    metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Checks `key`'s token, when it has one: `authorization: Bearer <token>`.
fn check_token(state: &AppState, key: &str, metadata: &MetadataMap) -> Result<(), IssueError> {
    let Some(token) = state.token_for(key) else {
        return Ok(());
    };
    match bearer(metadata) {
        Some(given) if constant_time_eq(given.as_bytes(), token.expose().as_bytes()) => Ok(()),
        Some(_) => Err(IssueError::new(
            ErrorClass::Unauthorized,
            "unauthorized",
            format!("wrong token for key {key:?}"),
        )),
        None => Err(IssueError::new(
            ErrorClass::Unauthorized,
            "unauthorized",
            format!(
                "key {key:?} needs its token: send the metadata `authorization: Bearer <token>`"
            ),
        )),
    }
}

/// `n` IDs of `key` as one message.
async fn batch(
    state: &Arc<AppState>,
    key: &str,
    spec: KeySpec,
    n: u64,
) -> Result<GetIdsResponse, IssueError> {
    let issued = issue::issue(state, key, spec, n).await?;
    let mut message = GetIdsResponse {
        key: key.to_owned(),
        strategy: spec.strategy.name().to_owned(),
        ..GetIdsResponse::default()
    };
    match issued {
        Issued::Ints { values, public } => {
            if public {
                message.public_ids = values
                    .iter()
                    .map(|&v| issue::text_of(state, v, true))
                    .collect::<Result<_, _>>()?;
            }
            message.public = public;
            message.ids = values.into_vec();
        }
        Issued::Uuids(values) => {
            message.uuids = values
                .into_iter()
                .map(|v| v.to_be_bytes().to_vec())
                .collect();
        }
    }
    Ok(message)
}

/// `id`'s parts under the server's layout.
/// `Decode`: `id` read with `key`'s layout (the oracle's for a monotonic
/// key; the snowflake layout for any other name, or an empty `key`), as
/// `/v1/decode/{id}?key=` reads it.
fn decode(state: &AppState, id: u64, key: &str) -> Result<DecodeResponse, IssueError> {
    let key = (!key.is_empty()).then_some(key);
    if let Some(key) = key {
        issue::check_key(key)?;
    }
    let (layout, layout_text) = state.decode_layout(key);
    let invalid = |e: idmint_core::Error| {
        IssueError::bad_input("invalid_id", format!("{id} can't be decoded: {e}"))
    };
    let id = Id::new(id).map_err(invalid)?;
    let d = layout.decode(id.get()).map_err(invalid)?;
    Ok(DecodeResponse {
        id: d.id.get(),
        layout: layout_text.to_owned(),
        time: d.time.to_string(),
        unix_ms: d.time.as_millisecond(),
        tick: d.tick,
        datacenter: d.datacenter,
        worker: d.worker,
        rollback: d.rollback,
        sequence: d.sequence,
    })
}

/// One `StreamIds` call's state: what to issue next, and how much is left.
struct Feed {
    state: Arc<AppState>,
    key: String,
    spec: KeySpec,
    per_message: u64,
    /// IDs still to send; `None` when the stream runs until cancelled.
    left: Option<u64>,
    stop: watch::Receiver<bool>,
    /// Counts the stream as open until it is dropped (ended or cancelled).
    _open: OpenStream,
}

impl Feed {
    /// The next message, a failure that ends the stream, or `None` once it has
    /// ended.
    async fn next(&mut self) -> Option<Result<GetIdsResponse, Status>> {
        if self.left == Some(0) {
            return None;
        }
        if *self.stop.borrow() {
            self.left = Some(0);
            return Some(Err(status_of(IssueError::unavailable(
                "shutting_down",
                "the server is shutting down: open the stream again, here later or on another node",
                Duration::from_secs(1),
            ))));
        }
        let message = self.issue_next().await;
        if message.is_err() {
            self.left = Some(0);
        }
        Some(message.map_err(status_of))
    }

    /// Issues the next message's IDs and counts them off.
    async fn issue_next(&mut self) -> Result<GetIdsResponse, IssueError> {
        let n = self
            .left
            .map_or(self.per_message, |left| left.min(self.per_message));
        let message = batch(&self.state, &self.key, self.spec, n).await?;
        if let Some(left) = &mut self.left {
            *left -= n;
        }
        Ok(message)
    }
}

/// Counts a stream in `idmint_grpc_streams_open` while it lives.
struct OpenStream(Arc<Metrics>);

impl OpenStream {
    fn new(metrics: Arc<Metrics>) -> OpenStream {
        metrics.grpc_stream_opened();
        OpenStream(metrics)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.grpc_stream_closed();
    }
}

/// The gRPC code of an error class, and its name as the latency metric labels it.
fn code_of(class: ErrorClass) -> (Code, &'static str) {
    match class {
        ErrorClass::BadInput => (Code::InvalidArgument, "invalid_argument"),
        ErrorClass::NotFound => (Code::NotFound, "not_found"),
        ErrorClass::Conflict => (Code::AlreadyExists, "already_exists"),
        ErrorClass::Unauthorized => (Code::Unauthenticated, "unauthenticated"),
        ErrorClass::Unavailable => (Code::Unavailable, "unavailable"),
        ErrorClass::Internal => (Code::Internal, "internal"),
    }
}

/// The status of a failed call: the class's code, the message, and the stable
/// code and retry hint as metadata.
fn status_of(e: IssueError) -> Status {
    let mut metadata = MetadataMap::new();
    if let Ok(code) = MetadataValue::try_from(e.code) {
        metadata.insert(ERROR_CODE_METADATA, code);
    }
    if let Some(after) = e.retry_after {
        // Whole milliseconds, rounded up, at least 1.
        let ms = after.as_nanos().div_ceil(1_000_000).max(1);
        metadata.insert(
            RETRY_AFTER_METADATA,
            MetadataValue::from(u64::try_from(ms).unwrap_or(u64::MAX)),
        );
    }
    Status::with_metadata(code_of(e.class).0, e.message, metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata<'a>(status: &'a Status, key: &str) -> Option<&'a str> {
        status.metadata().get(key).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn statuses_carry_the_class_code_and_the_stable_code() {
        let cases = [
            (
                IssueError::bad_input("invalid_count", "count 0"),
                Code::InvalidArgument,
            ),
            (
                IssueError::new(ErrorClass::NotFound, "key_not_found", "no key"),
                Code::NotFound,
            ),
            (
                IssueError::new(ErrorClass::Conflict, "key_exists", "exists"),
                Code::AlreadyExists,
            ),
            (
                IssueError::new(ErrorClass::Unauthorized, "unauthorized", "token"),
                Code::Unauthenticated,
            ),
            (IssueError::internal("boom"), Code::Internal),
        ];
        for (error, code) in cases {
            let stable = error.code;
            let message = error.message.clone();
            let status = status_of(error);
            assert_eq!(status.code(), code, "{stable}");
            assert_eq!(status.message(), message);
            assert_eq!(metadata(&status, ERROR_CODE_METADATA), Some(stable));
            assert_eq!(metadata(&status, RETRY_AFTER_METADATA), None, "{stable}");
        }
    }

    #[test]
    fn unavailable_carries_a_retry_hint_in_whole_milliseconds() {
        for (after, ms) in [
            (Duration::from_secs(1), "1000"),
            (Duration::from_micros(1500), "2"),
            (Duration::from_nanos(1), "1"),
            (Duration::ZERO, "1"),
        ] {
            let status = status_of(IssueError::unavailable("unavailable", "store down", after));
            assert_eq!(status.code(), Code::Unavailable);
            assert_eq!(metadata(&status, ERROR_CODE_METADATA), Some("unavailable"));
            assert_eq!(
                metadata(&status, RETRY_AFTER_METADATA),
                Some(ms),
                "{after:?}"
            );
        }
    }
}
