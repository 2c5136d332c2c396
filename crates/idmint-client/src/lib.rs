//! A Rust client for idmint servers: IDs over HTTP (`GET /v1/ids/{key}` in
//! the compact binary form), with local prefetch of IDs (Tinyid's client
//! idea) so most calls never leave the process, and fail-over across a list
//! of servers.
//!
//! [`Client`] is async (tokio); [`BlockingClient`] wraps it, with a runtime
//! of its own, for callers that aren't.
//!
//! # Examples
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = idmint_client::Client::builder()
//!     .servers(["http://10.0.0.1:8080", "http://10.0.0.2:8080"])
//!     .prefetch(1000) // keep up to 1000 IDs per key in hand
//!     .low_water(0.2) // refill in the background below 200
//!     .timeout(Duration::from_secs(2))
//!     .build()?;
//! let id = client.next_id("order").await?;
//! let batch = client.next_ids("order", 500).await?;
//! assert!(batch.iter().all(|&other| other != id));
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod blocking;
mod error;
mod prefetch;
mod transport;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::AbortHandle;

pub use crate::blocking::BlockingClient;
pub use crate::error::{Error, Failure, FailureReason};
use crate::prefetch::KeyBuffer;
use crate::transport::{TlsOptions, Transport};

/// The server's default cap on one request's count (`server.max_count`).
const DEFAULT_MAX_BATCH: u64 = 100_000;

/// An async idmint client: IDs of a key from a list of servers, optionally
/// prefetched. Cheap to clone (clones share the servers' state, connections
/// and buffers).
///
/// - **Uniqueness.** No two calls, from any number of tasks or clones, get
///   the same ID: every ID comes from one server answer and is handed out
///   once. IDs fetched but never handed out (left in a buffer when the
///   client drops, or in an answer lost to a timeout) are skipped, never
///   reissued: gaps, not duplicates.
/// - **Order.** IDs from one server answer keep the order the server issued
///   them in, and a buffer hands out its IDs in the order it fetched them,
///   so with one server every caller's IDs increase. IDs from different
///   servers only *trend* upward (snowflake IDs are k-sorted within the
///   nodes' clock skew; segment IDs by the order the servers leased their
///   ranges), so after a fail-over, or with prefetch across a fail-over, a
///   later ID can be smaller than an earlier one.
/// - **Fail-over.** A refused connection, a timeout, a broken response, a
///   503 (or any 5xx) sends the request to the next server, and the failed
///   one is skipped until its `Retry-After` (or the back-off) has passed. A
///   4xx answer (unknown key, bad count) is returned at once as
///   [`Error::Rejected`], not retried.
/// - **All servers down.** The call returns [`Error::Unavailable`], listing
///   what each server did, with a retry hint; never a made-up ID.
/// - **Prefetch** (off unless [`ClientBuilder::prefetch`] is set). Each key
///   gets a local buffer of up to `prefetch` IDs; when a call leaves fewer
///   than the low-water share, a background task fetches the next batch.
///   The task is started **on the first use of a key** (on the runtime of
///   that call) and is owned by the client: it stops when the last clone of
///   the client is dropped. Prefetched snowflake IDs carry the time they were
///   made, not the time they are handed out.
/// - **Monotonic keys** (`strategy = "monotonic"`, the cluster's timestamp
///   oracle) are never prefetched: IDs held in a buffer would come out below
///   IDs the oracle issued after them. Each call's IDs are above every ID any
///   client got before the call began, through any server and across
///   fail-over. The client learns which keys are monotonic from the servers'
///   answers (`X-Idmint-Strategy`), so a key's first call always goes to a
///   server; [`ClientBuilder::monotonic_keys`] names them up front.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    transport: Arc<Transport>,
    prefetch: u64,
    low_water: f64,
    buffers: Mutex<HashMap<String, Arc<KeyBuffer>>>,
    /// Per key, held by its first call (see [`Client::next_ids`]).
    probes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The refill tasks, aborted when the client drops.
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(|e| e.into_inner());
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}

/// Builds a [`Client`]: [`Client::builder`], then setters, then
/// [`ClientBuilder::build`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    servers: Vec<String>,
    prefetch: u64,
    low_water: f64,
    timeout: Duration,
    backoff: Duration,
    max_batch: u64,
    tls: TlsOptions,
    monotonic_keys: Vec<String>,
}

impl Default for ClientBuilder {
    fn default() -> ClientBuilder {
        ClientBuilder::new()
    }
}

impl ClientBuilder {
    /// No servers yet, prefetch off, low water 20% (Tinyid's), a 5 s timeout,
    /// 1 s back-off, batches of up to 100,000.
    pub const fn new() -> ClientBuilder {
        ClientBuilder {
            servers: Vec::new(),
            prefetch: 0,
            low_water: 0.2,
            timeout: Duration::from_secs(5),
            backoff: Duration::from_secs(1),
            max_batch: DEFAULT_MAX_BATCH,
            tls: TlsOptions {
                ca_pem: None,
                identity_pem: None,
            },
            monotonic_keys: Vec::new(),
        }
    }

    /// The servers, tried in this order: `http://host:port`,
    /// `https://host:port` (a path prefix is kept) or `host:port` (plain
    /// HTTP).
    pub fn servers<I, S>(mut self, servers: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.servers = servers.into_iter().map(Into::into).collect();
        self
    }

    /// Keep up to `n_ids` IDs per key in a local buffer (0, the default,
    /// turns prefetch off: every call is a request).
    pub const fn prefetch(mut self, n_ids: u64) -> ClientBuilder {
        self.prefetch = n_ids;
        self
    }

    /// Refill a key's buffer once fewer than this share of `prefetch` is
    /// left (0.0 to 1.0; default 0.2; at least one ID).
    pub const fn low_water(mut self, share: f64) -> ClientBuilder {
        self.low_water = share;
        self
    }

    /// The limit for one request to one server, connecting included
    /// (default 5 s); past it, the next server is tried.
    pub const fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// How long a server that failed without a `Retry-After` is skipped
    /// (default 1 s).
    pub const fn backoff(mut self, backoff: Duration) -> ClientBuilder {
        self.backoff = backoff;
        self
    }

    /// The most IDs one request asks for (default 100,000, the server's
    /// default `server.max_count`); larger calls are split.
    pub const fn max_batch(mut self, n_ids: u64) -> ClientBuilder {
        self.max_batch = n_ids;
        self
    }

    /// Trust the CA certificate(s) in `pem` (PEM text, as read from a CA
    /// file) for `https://` servers, instead of the built-in web roots: a
    /// server whose certificate another CA issued is refused.
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> ClientBuilder {
        self.tls.ca_pem = Some(pem.into());
        self
    }

    /// Present this client certificate and private key (both PEM) to
    /// `https://` servers that require one (mutual TLS, the server's
    /// `tls.client_ca`).
    pub fn tls_client_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> ClientBuilder {
        self.tls.identity_pem = Some((cert.into(), key.into()));
        self
    }

    /// Builds the client. No I/O and no task happens here.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for no servers, an address that isn't an
    /// `http://` or `https://` URL, a low-water share outside 0.0..=1.0, a
    /// timeout of 0, a prefetch or max batch that doesn't fit (`prefetch` ≤
    /// `max_batch`), or TLS PEM text that isn't a certificate (or key).
    ///
    /// # Examples
    /// ```
    /// let e = idmint_client::Client::builder().build().unwrap_err();
    /// assert_eq!(e.code(), "invalid_input");
    /// let e = idmint_client::Client::builder().servers(["ftp://h:1"]).build().unwrap_err();
    /// assert!(e.to_string().contains("only http:// and https://"));
    /// let client = idmint_client::Client::builder().servers(["127.0.0.1:8080"]).build()?;
    /// assert_eq!(client.servers().collect::<Vec<_>>(), ["http://127.0.0.1:8080"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(self) -> Result<Client, Error> {
        if self.servers.is_empty() {
            return Err(Error::invalid(
                "no servers given: a client needs at least one",
            ));
        }
        if !(0.0..=1.0).contains(&self.low_water) {
            return Err(Error::invalid(format!(
                "low water {} is not a share between 0.0 and 1.0",
                self.low_water
            )));
        }
        if self.timeout.is_zero() {
            return Err(Error::invalid("a timeout of 0 would fail every request"));
        }
        if self.max_batch == 0 {
            return Err(Error::invalid("a max batch of 0 would fetch nothing"));
        }
        if self.prefetch > self.max_batch {
            return Err(Error::invalid(format!(
                "prefetch {} is above the max batch {}",
                self.prefetch, self.max_batch
            )));
        }
        let servers = self
            .servers
            .iter()
            .map(|s| transport::parse_server(s))
            .collect::<Result<Vec<_>, _>>()?;
        let transport = Transport::new(
            servers,
            self.timeout,
            self.backoff,
            self.max_batch,
            &self.tls,
        )?;
        for key in &self.monotonic_keys {
            transport.set_monotonic(key);
        }
        Ok(Client {
            inner: Arc::new(Inner {
                transport: Arc::new(transport),
                prefetch: self.prefetch,
                low_water: self.low_water,
                buffers: Mutex::new(HashMap::new()),
                probes: Mutex::new(HashMap::new()),
                tasks: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Keys that are `monotonic` on the servers: never prefetched, from the
    /// first call on. (Without this the client learns it from the first
    /// answer, and prefetches nothing for them either.)
    pub fn monotonic_keys<I, S>(mut self, keys: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.monotonic_keys.extend(keys.into_iter().map(Into::into));
        self
    }

    /// Builds a [`BlockingClient`], with a runtime of its own.
    ///
    /// # Errors
    /// As [`ClientBuilder::build`], and [`Error::InvalidInput`] if the
    /// runtime can't be started.
    pub fn build_blocking(self) -> Result<BlockingClient, Error> {
        BlockingClient::new(self.build()?)
    }
}

impl Client {
    /// A builder with the defaults of [`ClientBuilder::new`].
    pub const fn builder() -> ClientBuilder {
        ClientBuilder::new()
    }

    /// The servers' base URLs, in the order given.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.inner.transport.server_names()
    }

    /// The next ID of `key`.
    ///
    /// With prefetch on, this first use of `key` starts its refill task.
    ///
    /// # Errors
    /// [`Error::Rejected`] (not retried) when a server says the request is
    /// wrong, [`Error::Unavailable`] when no server could serve,
    /// [`Error::Protocol`] for a key whose IDs aren't 64-bit integers.
    pub async fn next_id(&self, key: &str) -> Result<u64, Error> {
        let ids = self.next_ids(key, 1).await?;
        ids.first()
            .copied()
            .ok_or_else(|| Error::invalid("no ID was returned"))
    }

    /// The next `n_ids` IDs of `key`, in the order issued.
    ///
    /// With prefetch on, a count up to the low-water count is served from
    /// the key's buffer; a larger one comes from the buffer when it holds
    /// enough, else straight from a server (split into requests of at most
    /// the max batch), leaving the buffer as it was.
    ///
    /// # Errors
    /// As [`Client::next_id`]; and [`Error::InvalidInput`] for a count of 0
    /// or an empty key.
    pub async fn next_ids(&self, key: &str, n_ids: u64) -> Result<Vec<u64>, Error> {
        if n_ids == 0 {
            return Err(Error::invalid("a count of 0 asks for no IDs"));
        }
        if key.is_empty() {
            return Err(Error::invalid("the key is empty"));
        }
        let transport = &self.inner.transport;
        if self.inner.prefetch > 0 && !transport.is_monotonic(key) {
            if !self.has_buffer(key) {
                // The first call of a key goes straight to a server, which
                // says whether the key is monotonic before anything is
                // prefetched for it. Calls that come meanwhile wait for it,
                // so none gets IDs from before the buffer's.
                let probe = self.probe(key);
                let _first = probe.lock().await;
                if !self.has_buffer(key) {
                    let ids = self.fetch_direct(key, n_ids).await?;
                    if !transport.is_monotonic(key) {
                        self.buffer(key)?;
                    }
                    return Ok(ids);
                }
            }
            if transport.is_monotonic(key) {
                return self.fetch_direct(key, n_ids).await;
            }
            let buffer = self.buffer(key)?;
            if n_ids <= buffer.low_water() {
                return buffer.take(n_ids).await;
            }
            if let Some(ids) = buffer.try_take(n_ids) {
                return Ok(ids);
            }
        }
        self.fetch_direct(key, n_ids).await
    }

    /// How many IDs of `key` are prefetched and waiting (0 with prefetch off).
    pub fn buffered(&self, key: &str) -> usize {
        let buffers = self.inner.buffers.lock().expect("not poisoned");
        buffers.get(key).map_or(0, |b| b.len())
    }

    /// The lock a key's first call holds while it finds out whether the key
    /// may be prefetched.
    fn probe(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut probes = self.inner.probes.lock().expect("not poisoned");
        Arc::clone(probes.entry(key.to_owned()).or_default())
    }

    fn has_buffer(&self, key: &str) -> bool {
        let buffers = self.inner.buffers.lock().expect("not poisoned");
        buffers.contains_key(key)
    }

    async fn fetch_direct(&self, key: &str, n_ids: u64) -> Result<Vec<u64>, Error> {
        let transport = &self.inner.transport;
        let mut ids = Vec::with_capacity(usize::try_from(n_ids).unwrap_or(0).min(1 << 24));
        let mut left = n_ids;
        while left > 0 {
            let n = left.min(transport.max_batch());
            ids.extend(transport.fetch(key, n).await?);
            left -= n;
        }
        Ok(ids)
    }

    /// The buffer of `key`, created with its refill task on first use.
    fn buffer(&self, key: &str) -> Result<Arc<KeyBuffer>, Error> {
        let mut buffers = self.inner.buffers.lock().expect("not poisoned");
        if let Some(buffer) = buffers.get(key) {
            return Ok(Arc::clone(buffer));
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::invalid("the client must be called within a tokio runtime"))?;
        let low_water = (self.inner.prefetch as f64 * self.inner.low_water).ceil() as u64;
        let buffer = Arc::new(KeyBuffer::new(key, self.inner.prefetch, low_water));
        let task = runtime.spawn(Arc::clone(&buffer).refill(Arc::clone(&self.inner.transport)));
        self.inner
            .tasks
            .lock()
            .expect("not poisoned")
            .push(task.abort_handle());
        buffers.insert(key.to_owned(), Arc::clone(&buffer));
        Ok(buffer)
    }
}

#[cfg(test)]
mod tests {
    //! The client against tiny fake servers on loopback: a 503 with
    //! `Retry-After` sends calls elsewhere until the hint has passed.

    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A fake server answering every request with `answer(count, n_request)`
    /// (status line + headers + body), one request per connection.
    async fn fake(
        answer: impl Fn(u64, u64) -> Vec<u8> + Send + Sync + 'static,
    ) -> (String, Arc<AtomicU64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let served = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&served);
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let n_request = counter.fetch_add(1, Ordering::SeqCst);
                let answer = Arc::clone(&answer);
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = socket.read(&mut buf).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&buf[..n]);
                    }
                    let text = String::from_utf8_lossy(&request);
                    let count = text
                        .split("count=")
                        .nth(1)
                        .and_then(|s| s.split(' ').next())
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(1);
                    let _ = socket.write_all(&answer(count, n_request)).await;
                });
            }
        });
        (addr, served)
    }

    fn response(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    }

    /// IDs `base + n_request * 1000 + i`.
    fn ids(base: u64) -> impl Fn(u64, u64) -> Vec<u8> + Send + Sync + 'static {
        ids_of(base, "snowflake")
    }

    /// [`ids`] of a key of `strategy` (`X-Idmint-Strategy`).
    fn ids_of(base: u64, strategy: &'static str) -> impl Fn(u64, u64) -> Vec<u8> + Send + Sync {
        move |count, n_request| {
            let body: Vec<u8> = (0..count)
                .flat_map(|i| (base + n_request * 1000 + i).to_le_bytes())
                .collect();
            response(
                "200 OK",
                &format!(
                    "content-type: application/octet-stream\r\nx-idmint-count: {count}\r\n\
                     x-idmint-strategy: {strategy}\r\n"
                ),
                &body,
            )
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_503_sends_calls_elsewhere_until_its_retry_after() {
        let (busy, busy_hits) = fake(|_, _| {
            response(
                "503 Service Unavailable",
                "content-type: application/json\r\nretry-after: 1\r\n",
                br#"{"error":{"code":"unavailable","message":"segment store down"}}"#,
            )
        })
        .await;
        let (good, good_hits) = fake(ids(1 << 40)).await;
        let client = Client::builder()
            .servers([busy, good])
            .backoff(Duration::from_secs(60))
            .build()
            .unwrap();
        assert_eq!(
            client.next_ids("k", 3).await.unwrap(),
            [1 << 40, (1 << 40) + 1, (1 << 40) + 2]
        );
        assert_eq!(busy_hits.load(Ordering::SeqCst), 1);
        // Skipped while its Retry-After (1 s) runs, not the 60 s back-off...
        for _ in 0..5 {
            client.next_id("k").await.unwrap();
        }
        assert_eq!(busy_hits.load(Ordering::SeqCst), 1);
        assert_eq!(good_hits.load(Ordering::SeqCst), 6);
        // ...and the preferred server stays the one that answered.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        client.next_id("k").await.unwrap();
        assert_eq!(busy_hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn all_503_is_unavailable_with_the_servers_hint() {
        let (busy, _) = fake(|_, _| {
            response(
                "503 Service Unavailable",
                "content-type: application/json\r\nretry-after: 4\r\n",
                br#"{"error":{"code":"not_ready","message":"no worker lease"}}"#,
            )
        })
        .await;
        let client = Client::builder()
            .servers([busy])
            .prefetch(10)
            .build()
            .unwrap();
        let e = client.next_id("k").await.unwrap_err();
        assert!(e.is_transient(), "{e:?}");
        let hint = e.retry_after().unwrap();
        assert!(
            hint > Duration::from_secs(3) && hint <= Duration::from_secs(4),
            "{hint:?}"
        );
        let Error::Unavailable { failures, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(
            matches!(&failures[0].reason, FailureReason::Unavailable { code, retry_after, .. }
                if code == "not_ready" && *retry_after == Some(Duration::from_secs(4))),
            "{e:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn monotonic_keys_are_never_prefetched() {
        let (server, hits) = fake(ids_of(1, "monotonic")).await;
        let client = Client::builder()
            .servers([server.clone()])
            .prefetch(100)
            .build()
            .unwrap();
        for i in 0..20 {
            assert_eq!(client.next_id("seq").await.unwrap(), 1 + i * 1000);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(client.buffered("seq"), 0);
        assert_eq!(hits.load(Ordering::SeqCst), 20);
        // Named up front: not even the first call could prefetch.
        let (server, hits) = fake(ids_of(1, "monotonic")).await;
        let client = Client::builder()
            .servers([server])
            .prefetch(100)
            .monotonic_keys(["seq"])
            .build()
            .unwrap();
        assert_eq!(client.next_ids("seq", 3).await.unwrap(), [1, 2, 3]);
        assert_eq!(client.buffered("seq"), 0);
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prefetch_refills_in_the_background_and_keeps_order() {
        let (good, hits) = fake(ids(1)).await;
        let client = Client::builder()
            .servers([good])
            .prefetch(100)
            .low_water(0.5)
            .build()
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..250 {
            got.push(client.next_id("k").await.unwrap());
        }
        // The key's first call went to the server (which said the key is no
        // monotonic one); then three batches, in order, the refill running
        // ahead of the calls.
        let expected: Vec<u64> = std::iter::once(1)
            .chain((1..4).flat_map(|r| (0..100).map(move |i| 1 + r * 1000 + i)))
            .collect();
        assert_eq!(got, expected[..250]);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(client.buffered("k"), 51);
        assert_eq!(hits.load(Ordering::SeqCst), 4);
        // A big call goes straight to the server, leaving the buffer as it was.
        assert_eq!(client.next_ids("k", 500).await.unwrap().len(), 500);
        assert_eq!(client.buffered("k"), 51);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_non_integer_body_is_a_protocol_error() {
        let (uuids, _) = fake(|count, _| {
            response(
                "200 OK",
                &format!("content-type: application/octet-stream\r\nx-idmint-count: {count}\r\n"),
                &vec![7u8; 16 * count as usize],
            )
        })
        .await;
        let client = Client::builder().servers([uuids]).build().unwrap();
        let e = client.next_ids("u7", 2).await.unwrap_err();
        assert_eq!(e.code(), "protocol", "{e:?}");
        assert_eq!(
            client.next_ids("u7", 0).await.unwrap_err().code(),
            "invalid_input"
        );
    }
}
