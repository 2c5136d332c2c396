//! Serving HTTP/1.1 connections: the accept loop, the front service that
//! answers the single-ID routes itself, and the watcher that closes slow and
//! idle connections.
//!
//! # Why by hand
//! `axum::serve` sets hyper no timer (so no header read timeout), keeps idle
//! connections forever and takes every connection offered. hyper's own header
//! read timeout arms a timer for every request, a tenth of a single-ID
//! request's instructions. Here one sweeper task checks every connection a few
//! times per `server.read_timeout` instead, from counters the connection's
//! stream and service keep in plain loads and stores.
//!
//! # The single-ID routes
//! `GET /api/snowflake/get/{key}` and `GET /api/segment/get/{key}`, with a
//! valid key and no query string, are answered by [`Front`] without axum's
//! router: no route match, no extractors, no boxed body. They check the key,
//! its token and issue exactly as the routed handlers do (`super::leaf::single_text`
//! is shared), and record the same latency histograms. Any other request,
//! including those routes with a query (`?token=`), a `HEAD` or an invalid
//! key, goes to the router, which answers or reports it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ::metrics::Histogram;
use atomic_waker::AtomicWaker;
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderValue, Method, Request, header};
use axum::response::{IntoResponse, Response};
use axum::routing::future::RouteFuture;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use slab::Slab;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::task::TaskTracker;

use super::leaf::single_text;
use crate::listen::ConnectionLimits;
use crate::metrics::latency::record_latency;
use crate::state::AppState;
use crate::tls::{self, MaybeTls, Surface};
use idmint_node::config::Strategy;

/// The answer to a client speaking plain HTTP to the HTTPS port.
const PLAIN_TEXT_ON_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
    content-type: text/plain\r\n\
    connection: close\r\n\
    content-length: 50\r\n\r\n\
    this port speaks HTTPS (TLS): use an https:// URL\n";

/// An accepted HTTP connection, with its TLS handshake done (within
/// `read_timeout`) when the listener has an acceptor; `None` when the
/// handshake failed (a plain-text client is told to use `https://`).
pub(super) async fn shake_hands(
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    stream: TcpStream,
    read_timeout: Duration,
    peer: std::net::SocketAddr,
) -> Option<MaybeTls> {
    match acceptor {
        None => Some(MaybeTls::Plain(stream)),
        Some(acceptor) => {
            tls::accept_within(
                acceptor,
                stream,
                PLAIN_TEXT_ON_TLS,
                read_timeout,
                peer,
                Surface::Http,
            )
            .await
        }
    }
}

/// The largest request head (request line and headers) read, in bytes;
/// a larger one is answered 431 before more is buffered. idmint's requests
/// are a path, a short query and a token.
const MAX_REQUEST_HEAD: usize = 32 * 1024;

/// The sweeper looks at each connection this many times per
/// `server.read_timeout`; a slow or idle connection is closed between one and
/// 1 + 1/`SWEEPS` read timeouts after it stalled.
const SWEEPS: u32 = 4;

/// Serves HTTP/1.1 on `listener` until `shutdown` completes; then stops
/// accepting, lets each connection finish the request it is on, and returns
/// once all are closed.
///
/// With `server.read_timeout`:
/// - a client must send a request's head (request line and headers) within
///   it of its first byte, or it is disconnected (slowloris);
/// - a connection on which no byte moved for it (opened and silent, or an
///   idle keep-alive) is closed; one whose handler is still working is asked
///   to close after its response;
/// - a head over [`MAX_REQUEST_HEAD`] gets 431;
/// - each accepted connection takes a slot of `server.max_connections`
///   (shared with RESP and gRPC) before it is served, and the loop accepts no
///   more until it has one: at the cap, new clients wait in the listen backlog.
///
/// With `[tls]` (and `tls.http` left on), each connection shakes hands in
/// its own task within `server.read_timeout` before anything else; a client
/// speaking plain HTTP gets 400 and is disconnected (`tls.rs`).
///
/// HTTP/1.1 only: `axum::serve` also took HTTP/2 with prior knowledge, which
/// no idmint client speaks (gRPC has its own listener), and its protocol
/// sniffing waits for the first bytes without any timeout.
pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let mut http1 = hyper::server::conn::http1::Builder::new();
    // The watcher times heads; hyper would warn per connection that its
    // default header timeout has no timer.
    http1
        .header_read_timeout(None)
        .max_buf_size(MAX_REQUEST_HEAD);
    let read_timeout = limits.read_timeout;
    let tls = state.tls.clone().filter(|t| t.enabled(Surface::Http));
    let front = Arc::new(FrontShared::new(state, router));
    let watcher = Arc::new(Watcher::default());
    let sweeping = tokio::spawn(watcher.clone().sweep(limits.read_timeout));
    let connections = TaskTracker::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pass, don't spin.
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = limits.slot("http") => slot,
        };
        let Some(slot) = slot else { break };
        let _ = stream.set_nodelay(true);
        // Loaded per connection, so a reloaded certificate serves the next one.
        let acceptor = tls.as_ref().map(|t| t.acceptor(Surface::Http));
        let http1 = http1.clone();
        let front = front.clone();
        let watcher = watcher.clone();
        connections.spawn(async move {
            // In the connection's task, bounded: a slow or silent client
            // holds its slot for at most the read timeout, never the loop.
            let Some(stream) = shake_hands(acceptor, stream, read_timeout, peer).await else {
                return;
            };
            let registered = watcher.watch();
            let conn = &registered.conn;
            let stream = Tracked {
                stream,
                conn: conn.clone(),
            };
            let service = Front {
                shared: front,
                conn: conn.clone(),
            };
            let connection = Watched {
                connection: http1.serve_connection(TokioIo::new(stream), service),
                conn: conn.clone(),
                finishing: false,
            };
            connection.await;
            tracing::trace!(%peer, "HTTP connection closed");
            drop(registered);
            drop(slot);
        });
    }
    drop(listener);
    watcher.stop_all();
    connections.close();
    connections.wait().await;
    sweeping.abort();
}

// ---- The front service ----

/// What every connection's [`Front`] shares.
struct FrontShared {
    state: Arc<AppState>,
    router: Router,
    /// The latency histograms of the two single-ID routes, by [`hot_route`]'s
    /// index: the same series the router's latency layer records them in.
    hot: [Arc<[Histogram; 5]>; 2],
}

/// The two routes answered without the router: prefix, strategy, the route's
/// name in the latency metrics.
const HOT_ROUTES: [(&str, Strategy, &str); 2] = [
    (
        "/api/snowflake/get/",
        Strategy::Snowflake,
        "/api/snowflake/get/{key}",
    ),
    (
        "/api/segment/get/",
        Strategy::Segment,
        "/api/segment/get/{key}",
    ),
];

impl FrontShared {
    fn new(state: Arc<AppState>, router: Router) -> FrontShared {
        let hot = HOT_ROUTES.map(|(_, _, name)| state.metrics.route_histograms(name));
        FrontShared { state, router, hot }
    }
}

/// One connection's hyper service: the single-ID routes answered here,
/// everything else by the router.
#[derive(Clone)]
struct Front {
    shared: Arc<FrontShared>,
    conn: Arc<ConnState>,
}

/// A response body: a single ID's text, or whatever the router answered.
type FrontBody = Either<Full<Bytes>, axum::body::Body>;

impl hyper::service::Service<Request<Incoming>> for Front {
    type Response = Response<FrontBody>;
    type Error = Infallible;
    type Future = FrontFuture;

    fn call(&self, request: Request<Incoming>) -> FrontFuture {
        // hyper calls the service once a request's head is read whole.
        self.conn.head_read();
        match hot_route(&request) {
            Some(route) => FrontFuture::Hot {
                inner: Box::pin(answer_hot(self.shared.clone(), route, request)),
            },
            None => {
                let mut router = self.shared.router.clone();
                FrontFuture::Routed {
                    inner: tower_service::Service::call(&mut router, request),
                }
            }
        }
    }
}

/// The index in [`HOT_ROUTES`] of the route `request` is for, if it is one
/// answered without the router: a `GET`, no query, a key that needs no
/// percent-decoding and is valid (anything else the router reports).
fn hot_route<B>(request: &Request<B>) -> Option<usize> {
    if request.method() != Method::GET || request.uri().query().is_some() {
        return None;
    }
    let path = request.uri().path();
    HOT_ROUTES.iter().position(|(prefix, _, _)| {
        path.strip_prefix(prefix)
            .is_some_and(|key| idmint_segment::validate_key(key).is_ok())
    })
}

/// Answers a request [`hot_route`] picked, as the routed handler would.
async fn answer_hot(
    shared: Arc<FrontShared>,
    route: usize,
    request: Request<Incoming>,
) -> Response<FrontBody> {
    let started = Instant::now();
    let (prefix, strategy, _) = HOT_ROUTES[route];
    let key = &request.uri().path()[prefix.len()..];
    let no_params = super::params::QueryParams::new();
    let answered = single_text(&shared.state, strategy, key, request.headers(), &no_params).await;
    let response = match answered {
        Ok(text) => {
            let mut response = Response::new(Either::Left(Full::new(Bytes::from(text))));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(super::render::TEXT_PLAIN),
            );
            response
        }
        Err(e) => e.into_response().map(Either::Right),
    };
    record_latency(&shared.hot[route], response.status(), started.elapsed());
    response
}

pin_project_lite::pin_project! {
    /// [`Front`]'s response future.
    #[project = FrontProj]
    enum FrontFuture {
        Hot { inner: Pin<Box<dyn Future<Output = Response<FrontBody>> + Send>> },
        Routed { #[pin] inner: RouteFuture<Infallible> },
    }
}

impl Future for FrontFuture {
    type Output = Result<Response<FrontBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            FrontProj::Hot { inner } => inner.as_mut().poll(cx).map(Ok),
            FrontProj::Routed { inner } => inner
                .poll(cx)
                .map(|answered| answered.map(|response| response.map(Either::Right))),
        }
    }
}

// ---- Watching connections ----

/// What the sweeper asks of a connection ([`ConnState::order`]).
const RUN: u8 = 0;
/// Finish the request in flight, then close.
const FINISH: u8 = 1;
/// Close now: nothing is in flight.
const CLOSE: u8 = 2;

/// [`ConnState::head`] while a request read whole has not started its response.
const BUSY: u64 = u64::MAX;

/// One connection's counters, kept by its stream ([`Tracked`]) and service
/// ([`Front`]), read by the sweeper. Only the connection's task writes
/// `moved` and `head` (so loads and stores, no read-modify-write), and the
/// sweeper only needs to see them change within a sweep: `Relaxed`.
#[derive(Debug, Default)]
struct ConnState {
    /// Reads and writes that moved bytes.
    moved: AtomicU64,
    /// 0: no request head is being read; [`BUSY`]: a request was read whole
    /// and its response has not started; otherwise the `moved` count at which
    /// the head being read began.
    head: AtomicU64,
    /// [`RUN`], [`FINISH`] or [`CLOSE`]; only ever raised.
    order: AtomicU8,
    /// Wakes the connection's task when `order` is raised.
    waker: AtomicWaker,
}

impl ConnState {
    fn moved_bytes(&self) -> u64 {
        let moved = self.moved.load(Ordering::Relaxed) + 1;
        self.moved.store(moved, Ordering::Relaxed);
        moved
    }

    /// Bytes came in: they begin a head unless one is begun or in service.
    fn read(&self) {
        let moved = self.moved_bytes();
        if self.head.load(Ordering::Relaxed) == 0 {
            self.head.store(moved, Ordering::Relaxed);
        }
    }

    /// Bytes went out: a response started, so the next bytes in begin a head.
    fn wrote(&self) {
        self.moved_bytes();
        if self.head.load(Ordering::Relaxed) == BUSY {
            self.head.store(0, Ordering::Relaxed);
        }
    }

    /// A request's head was read whole.
    fn head_read(&self) {
        self.head.store(BUSY, Ordering::Relaxed);
    }

    fn raise(&self, order: u8) {
        if self.order.fetch_max(order, Ordering::Release) < order {
            self.waker.wake();
        }
    }
}

/// The registry of open connections and what the sweeper last saw of each.
#[derive(Debug, Default)]
struct Watcher {
    /// The open connections, and whether the server is stopping (a
    /// connection registered after [`Watcher::stop_all`], done with its TLS
    /// handshake late, is told to finish at once).
    watched: Mutex<(Slab<Watch>, bool)>,
}

#[derive(Debug)]
struct Watch {
    conn: Arc<ConnState>,
    moved: u64,
    /// Sweeps in a row that saw `moved` unchanged.
    quiet: u32,
    head: u64,
    /// Sweeps in a row that saw the same head being read.
    head_age: u32,
}

/// A connection's place in the [`Watcher`]; leaves it when dropped.
struct Registered {
    watcher: Arc<Watcher>,
    key: usize,
    conn: Arc<ConnState>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.watcher.lock().0.try_remove(self.key);
    }
}

impl Watcher {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Slab<Watch>, bool)> {
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn watch(self: &Arc<Self>) -> Registered {
        let conn = Arc::new(ConnState::default());
        let mut watched = self.lock();
        if watched.1 {
            conn.raise(FINISH);
        }
        let key = watched.0.insert(Watch::new(conn.clone()));
        drop(watched);
        Registered {
            watcher: self.clone(),
            key,
            conn,
        }
    }

    /// Every `read_timeout / SWEEPS`, closes the connections that stalled.
    async fn sweep(self: Arc<Self>, read_timeout: Duration) {
        let mut every = tokio::time::interval(read_timeout / SWEEPS);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            every.tick().await;
            for (_, watch) in self.lock().0.iter_mut() {
                watch.sweep();
            }
        }
    }

    /// The server is stopping: every connection finishes the response it is
    /// on, if any, and closes (hyper closes an idle keep-alive at once). Not
    /// [`CLOSE`] for those with no request being read or handled: the
    /// counters can't tell an idle connection from one whose response is
    /// still being written.
    fn stop_all(&self) {
        let mut watched = self.lock();
        watched.1 = true;
        for (_, watch) in watched.0.iter() {
            watch.conn.raise(FINISH);
        }
    }
}

impl Watch {
    fn new(conn: Arc<ConnState>) -> Watch {
        Watch {
            conn,
            // Never a count: the first sweep sees a change, so a connection
            // opened just before it gets its whole read timeout.
            moved: u64::MAX,
            quiet: 0,
            head: 0,
            head_age: 0,
        }
    }

    fn sweep(&mut self) {
        let moved = self.conn.moved.load(Ordering::Relaxed);
        let head = self.conn.head.load(Ordering::Relaxed);
        self.quiet = if moved == self.moved {
            self.quiet + 1
        } else {
            0
        };
        self.moved = moved;
        let reading = head != 0 && head != BUSY;
        self.head_age = if reading && head == self.head {
            self.head_age + 1
        } else {
            0
        };
        self.head = head;
        if self.head_age >= SWEEPS {
            tracing::debug!("HTTP request head not whole within the read timeout; closing");
            self.conn.raise(CLOSE);
        } else if self.quiet >= SWEEPS {
            // Idle, or a handler working with no byte moving: the latter may
            // finish its response first.
            self.conn.raise(if head == BUSY { FINISH } else { CLOSE });
        }
    }
}

type HttpConnection = hyper::server::conn::http1::Connection<TokioIo<Tracked>, Front>;

pin_project_lite::pin_project! {
    /// A connection, driven to its end or until its [`ConnState::order`]
    /// says to finish or close.
    struct Watched {
        #[pin]
        connection: HttpConnection,
        conn: Arc<ConnState>,
        finishing: bool,
    }
}

impl Future for Watched {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        // Registered before the order is read, so a raise in between wakes.
        this.conn.waker.register(cx.waker());
        match this.conn.order.load(Ordering::Acquire) {
            RUN => {}
            FINISH => {
                if !*this.finishing {
                    this.connection.as_mut().graceful_shutdown();
                    *this.finishing = true;
                }
            }
            _ => return Poll::Ready(()),
        }
        if let Err(e) = std::task::ready!(this.connection.poll(cx)) {
            tracing::debug!(error = %e, "HTTP connection ended");
        }
        Poll::Ready(())
    }
}

/// A client's TCP stream that counts in its [`ConnState`] when bytes move.
#[derive(Debug)]
struct Tracked {
    stream: MaybeTls,
    conn: Arc<ConnState>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.conn.read();
        }
        polled
    }
}

impl Tracked {
    fn wrote(&self, polled: &Poll<std::io::Result<usize>>) {
        if matches!(polled, Poll::Ready(Ok(n)) if *n > 0) {
            self.conn.wrote();
        }
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn the_routes_answered_before_the_router_are_in_the_openapi_document() {
        let document = super::super::openapi::document(1);
        for (prefix, _, route) in HOT_ROUTES {
            let item = document
                .paths
                .paths
                .get(route)
                .unwrap_or_else(|| panic!("{route} is not in the OpenAPI document"));
            assert!(item.get.is_some(), "GET {route} is not documented");
            // The key is the path's one parameter, and the hot path takes
            // exactly the keys it documents.
            assert_eq!(route, format!("{prefix}{{key}}"));
        }
    }

    #[test]
    fn only_plain_single_id_requests_skip_the_router() {
        assert_eq!(hot_route(&get("/api/snowflake/get/order")), Some(0));
        assert_eq!(hot_route(&get("/api/segment/get/a.b_c-d:e")), Some(1));
        for routed in [
            "/api/snowflake/get/order?token=t",
            "/api/snowflake/get/order?",
            "/api/snowflake/get/",
            "/api/snowflake/get/a%20b",
            "/api/snowflake/get/a/b",
            "/api/segment/get/a%2Fb",
            "/api/segment/get/a*b",
            "/api/snowflake/getorder",
            "/v1/ids/order",
        ] {
            assert_eq!(hot_route(&get(routed)), None, "{routed}");
        }
        let head = Request::head("/api/snowflake/get/order").body(()).unwrap();
        assert_eq!(hot_route(&head), None);
    }

    fn watch() -> Watch {
        Watch::new(Arc::new(ConnState::default()))
    }

    fn order(watch: &Watch) -> u8 {
        watch.conn.order.load(Ordering::Relaxed)
    }

    #[test]
    fn a_head_trickling_in_is_closed_after_the_timeout() {
        let mut w = watch();
        w.conn.read();
        for _ in 0..SWEEPS {
            w.sweep();
            w.conn.read(); // one more byte of the same head each sweep
            assert_eq!(order(&w), RUN);
        }
        w.sweep();
        assert_eq!(order(&w), CLOSE);
    }

    #[test]
    fn requests_answered_in_time_keep_the_connection() {
        let mut w = watch();
        for _ in 0..5 * SWEEPS {
            w.conn.read();
            w.conn.head_read();
            w.conn.wrote();
            w.sweep();
        }
        assert_eq!(order(&w), RUN);
    }

    #[test]
    fn an_idle_connection_closes_and_a_busy_one_finishes() {
        let mut idle = watch();
        for _ in 0..=SWEEPS {
            assert_eq!(order(&idle), RUN);
            idle.sweep();
        }
        assert_eq!(order(&idle), CLOSE);

        let mut busy = watch();
        busy.conn.read();
        busy.conn.head_read();
        for _ in 0..=SWEEPS {
            busy.sweep();
        }
        assert_eq!(order(&busy), FINISH);
        // The order is only ever raised.
        busy.conn.raise(RUN);
        assert_eq!(order(&busy), FINISH);
    }
}
