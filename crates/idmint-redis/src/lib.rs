//! Redis plumbing shared by idmint's worker-ID registry and its Redis
//! strategies (counters, segment store, Redis-side snowflake, daily serials):
//! [`RedisConnection`], one connection per [`RedisTarget`] (a server, a
//! Sentinel-managed primary, or a Redis Cluster) that reconnects by itself,
//! follows failovers and bounds every call.
//!
//! The `redis` crate's `ConnectionManager` reconnects after a connection
//! breaks, but not after one that stays open and stops answering (a network
//! partition that sends no reset): every call on it would wait out its timeout.
//! [`RedisConnection`] replaces such a connection after a call on it times out.
//! Errors are this crate's [`CallError`], which each caller maps onto its own
//! error type, naming its operation.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, FromRedisValue, Pipeline, RedisFuture,
    RedisResult, ServerErrorKind, TlsMode, Value,
};

mod facts;
mod target;
mod topology;

pub use facts::ServerFacts;
pub use target::{ClusterTarget, RedisTarget, SentinelTarget, check_single_slot, hash_tag};
pub use topology::{ClusterShard, Topology, TopologyNode};

// The `tls` feature's rustls is there for its `ring` feature alone: rustls
// then installs ring as the process's provider at the first TLS connection.
#[cfg(feature = "tls")]
use rustls as _;

/// Whether this build speaks TLS to Redis (the crate's `tls` feature).
/// Without it [`RedisTarget::validate`] refuses a target that asks for TLS
/// ([`RedisTarget::tls_setting`]).
pub const TLS: bool = cfg!(feature = "tls");

/// Why a call on a [`RedisConnection`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The URL or target does not parse, or the timeout is zero.
    #[error("{0}")]
    Config(String),
    /// Redis did not answer within the call's bound.
    #[error("no answer within {after:?}")]
    Timeout {
        /// The bound.
        after: Duration,
    },
    /// Redis answered with an error, or the connection failed.
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
}

/// What a [`RedisConnection::call`] hands its operation: a multiplexed
/// connection to the server (or the Sentinel's current primary, or the
/// Cluster) that implements `redis::aio::ConnectionLike`, so commands,
/// pipelines and scripts run on it as on any `redis` connection. Cheap to
/// clone.
#[derive(Clone)]
pub struct Conn(ConnKind);

#[derive(Clone)]
enum ConnKind {
    Single(ConnectionManager),
    Sentinel(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.0 {
            ConnKind::Single(c) => c.req_packed_command(cmd),
            ConnKind::Sentinel(c) => c.req_packed_command(cmd),
            ConnKind::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.0 {
            ConnKind::Single(c) => c.req_packed_commands(cmd, offset, count),
            ConnKind::Sentinel(c) => c.req_packed_commands(cmd, offset, count),
            ConnKind::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.0 {
            ConnKind::Single(c) => c.get_db(),
            ConnKind::Sentinel(c) => c.get_db(),
            ConnKind::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// Waits until `replicas` replicas have acknowledged every write the
    /// server took before this call (`WAIT`), for at most `wait`, and
    /// returns how many did. On a Cluster it asks the master of `key`'s
    /// slot, where a script on `key` ran; elsewhere the one server this
    /// connection talks to.
    ///
    /// Run it on the same `Conn` right after a write: it is the server that
    /// took the write that counts its replicas. (A single server's
    /// `ConnectionManager` sends it on a new connection only if the old one
    /// broke between the two calls; behind a proxy that moved to another
    /// server meanwhile, that server's count would answer. A Sentinel `Conn`
    /// is one server's connection and never moves.)
    ///
    /// # Errors
    /// What Redis or the connection answered.
    pub async fn wait_for_replicas(
        &mut self,
        key: &str,
        replicas: u32,
        wait: Duration,
    ) -> RedisResult<u32> {
        // `WAIT n 0` would block for ever: wait at least a millisecond.
        let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(millis);
        let acked: i64 = if let ConnKind::Cluster(cluster) = &mut self.0 {
            let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
            let value = cluster.route_command(cmd, routing).await?;
            i64::from_redis_value(value)?
        } else {
            cmd.query_async(self).await?
        };
        Ok(u32::try_from(acked.max(0)).unwrap_or(u32::MAX))
    }
}

/// A connection to one Redis (a server, a Sentinel-managed primary, or a
/// Redis Cluster), shared by everything that talks to it.
///
/// - **Reconnects by itself.** A single server: the `redis` crate's
///   `ConnectionManager`, which opens a new connection after the old one
///   breaks (within the next call's timeout). A connection that stays open
///   but stops answering is replaced after a call on it times out, so it
///   can't keep failing every call.
/// - **Follows a Sentinel failover.** After a connection error, a timeout or
///   an answer that the server is no longer a writable primary (`READONLY`,
///   `MASTERDOWN`, `LOADING`, `NOREPLICAS`), the next call asks the sentinels again which
///   server is the primary (the `redis` crate's `SentinelClient`, which also
///   checks that server's `ROLE`).
/// - **Follows a Cluster.** The `redis` crate's cluster client routes each
///   command by its key's slot, follows `MOVED` and `ASK`, and learns the new
///   slot map after a failover.
/// - **Multiplexed and cheap to clone.** Clones share the connection; many
///   tasks can have calls in flight at once.
/// - **Bounded.** Every call, the first connection and a Sentinel lookup
///   included, gives up after its timeout.
/// - **No hidden I/O.** Only [`RedisConnection::connect`],
///   [`RedisConnection::open`] and the calls talk to Redis.
///
/// # Examples
///
/// ```no_run
/// use idmint_redis::RedisConnection;
/// use std::time::Duration;
///
/// # async fn run() -> Result<(), idmint_redis::CallError> {
/// let bound = Duration::from_secs(2);
/// let conn = RedisConnection::connect("redis://127.0.0.1:6379/", bound).await?;
/// let n: i64 = conn
///     .call(bound, |mut c| async move { redis::cmd("INCR").arg("hits").query_async(&mut c).await })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisConnection {
    inner: Arc<Inner>,
}

struct Inner {
    target: RedisTarget,
    /// The bound given when opening: each connection attempt's, and on a
    /// Cluster each request's.
    timeout: Duration,
    backend: Backend,
    /// The connection calls go through; `None` until (re)established. A
    /// call that finds it stale (timed out, or a Sentinel primary that
    /// stopped being one) clears it, and the next call opens another.
    current: ArcSwapOption<Conn>,
    /// Serialises (re)connecting, so a burst of calls after a failover asks
    /// the sentinels once, not once each.
    connecting: tokio::sync::Mutex<()>,
}

enum Backend {
    Single {
        client: redis::Client,
        config: ConnectionManagerConfig,
    },
    /// The crate's `SentinelClient` needs `&mut` to look the primary up
    /// (it caches its connections to the sentinels).
    Sentinel {
        client: tokio::sync::Mutex<SentinelClient>,
        config: AsyncConnectionConfig,
    },
    Cluster {
        client: ClusterClient,
    },
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConnection")
            .field("target", &self.inner.target)
            .finish_non_exhaustive()
    }
}

impl RedisConnection {
    /// Connects to the Redis at `url` (`redis://[user:password@]host:port/[db]`)
    /// and checks that it answers `PING` within `timeout`.
    ///
    /// `timeout` also bounds each connection attempt when the connection is
    /// opened again later; each call's own bound is the one it is given.
    ///
    /// # Errors
    /// - [`CallError::Config`] for a malformed URL or a zero timeout.
    /// - [`CallError::Timeout`] when Redis does not answer within `timeout`.
    /// - [`CallError::Redis`] when the connection is refused or fails.
    pub async fn connect(url: &str, timeout: Duration) -> Result<RedisConnection, CallError> {
        Self::open(&RedisTarget::Url(url.to_owned()), timeout).await
    }

    /// Connects to `target` (a server, a Sentinel-managed primary or a
    /// Cluster) and checks that it answers `PING` within `timeout`.
    ///
    /// # Errors
    /// As [`RedisConnection::connect`]; [`CallError::Config`] also for a
    /// target [`RedisTarget::validate`] refuses.
    pub async fn open(
        target: &RedisTarget,
        timeout: Duration,
    ) -> Result<RedisConnection, CallError> {
        let conn = Self::lazy(target, timeout)?;
        conn.call(timeout, |mut c| async move {
            redis::cmd("PING").query_async::<String>(&mut c).await
        })
        .await?;
        Ok(conn)
    }

    /// Builds the connection without connecting: the first call connects.
    ///
    /// # Errors
    /// [`CallError::Config`] for a target [`RedisTarget::validate`] refuses
    /// or a zero timeout.
    pub fn lazy(target: &RedisTarget, timeout: Duration) -> Result<RedisConnection, CallError> {
        if timeout.is_zero() {
            return Err(CallError::Config("redis timeout is zero".to_owned()));
        }
        target.validate()?;
        let backend = match target {
            RedisTarget::Url(url) => {
                let client = redis::Client::open(url.as_str())
                    .map_err(|e| CallError::Config(format!("invalid redis url: {e}")))?;
                // Few, quick reconnection attempts: a call is bounded by its
                // timeout anyway, and a refused connection should come back as
                // an error soon rather than be retried with backoff for
                // seconds. No response timeout here: each call has its own
                // bound.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None)
                    .set_number_of_retries(2)
                    .set_min_delay(Duration::from_millis(10))
                    .set_max_delay(Duration::from_millis(200));
                Backend::Single { client, config }
            }
            RedisTarget::Sentinel(s) => {
                let client = sentinel_client(s)?;
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None);
                Backend::Sentinel {
                    client: tokio::sync::Mutex::new(client),
                    config,
                }
            }
            RedisTarget::Cluster(c) => Backend::Cluster {
                client: cluster_client(c, timeout)?,
            },
        };
        Ok(RedisConnection {
            inner: Arc::new(Inner {
                target: target.clone(),
                timeout,
                backend,
                current: ArcSwapOption::empty(),
                connecting: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// What this connects to, without passwords (`host:port`, or the
    /// Sentinel master and its sentinels, or the Cluster's nodes).
    pub fn addr(&self) -> String {
        self.inner.target.describe()
    }

    /// The target this connects to.
    pub fn target(&self) -> &RedisTarget {
        &self.inner.target
    }

    /// The bound it was opened with: each connection attempt's, and on a
    /// Cluster each request's, whatever the call's own bound.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.target.is_cluster()
    }

    /// Whether this is a primary that Redis Sentinel names.
    pub fn is_sentinel(&self) -> bool {
        matches!(self.inner.target, RedisTarget::Sentinel(_))
    }

    /// How many replicas the server holding `key` has connected now
    /// (`INFO replication`, `connected_slaves`; on a Cluster, the master of
    /// `key`'s slot), within `timeout`.
    ///
    /// # Errors
    /// As [`RedisConnection::call`]; [`CallError::Redis`] too when the
    /// answer has no count.
    pub async fn connected_replicas(&self, key: &str, timeout: Duration) -> Result<u32, CallError> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("replication");
        let info: String = self.call_at(timeout, key, cmd).await?;
        info.lines()
            .find_map(|line| line.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| {
                CallError::Redis(redis::RedisError::from((
                    ErrorKind::Parse,
                    "INFO replication has no connected_slaves count",
                )))
            })
    }

    /// Runs `op` on the connection within `timeout`.
    ///
    /// # Errors
    /// [`CallError::Timeout`] when `op` (with connecting, if needed) does not
    /// finish within `timeout` (the connection is then replaced for the calls
    /// that follow), and [`CallError::Redis`] for what Redis or the
    /// connection answered.
    pub async fn call<T, F, Fut>(&self, timeout: Duration, op: F) -> Result<T, CallError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut used: Option<Arc<Conn>> = None;
        let run = async {
            let conn = self.current().await?;
            used = Some(Arc::clone(&conn));
            op((*conn).clone()).await
        };
        let outcome = tokio::time::timeout(timeout, run).await;
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.is_timeout() => {
                self.forget(used.as_ref());
                Err(CallError::Timeout { after: timeout })
            }
            Ok(Err(e)) => {
                if self.is_stale(&e) {
                    self.forget(used.as_ref());
                }
                Err(CallError::Redis(e))
            }
            Err(_elapsed) => {
                self.forget(used.as_ref());
                Err(CallError::Timeout { after: timeout })
            }
        }
    }

    /// Runs `cmd` on the server that holds `key` (on a Cluster, the master
    /// of the key's slot, even for a command without keys such as `INFO`;
    /// elsewhere, the one server), within `timeout`.
    ///
    /// # Errors
    /// As [`RedisConnection::call`].
    pub async fn call_at<T: FromRedisValue>(
        &self,
        timeout: Duration,
        key: &str,
        cmd: Cmd,
    ) -> Result<T, CallError> {
        let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
        self.call(timeout, |c| async move {
            let mut c = c;
            if let ConnKind::Cluster(cluster) = &mut c.0 {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let value = cluster.route_command(cmd, routing).await?;
                return T::from_redis_value(value).map_err(redis::RedisError::from);
            }
            cmd.query_async(&mut c).await
        })
        .await
    }

    /// The connection calls go through, opened first when there is none.
    async fn current(&self) -> RedisResult<Arc<Conn>> {
        if let Some(conn) = self.inner.current.load_full() {
            return Ok(conn);
        }
        let _one_at_a_time = self.inner.connecting.lock().await;
        if let Some(conn) = self.inner.current.load_full() {
            return Ok(conn);
        }
        let conn = Arc::new(self.establish().await?);
        self.inner.current.store(Some(Arc::clone(&conn)));
        Ok(conn)
    }

    async fn establish(&self) -> RedisResult<Conn> {
        match &self.inner.backend {
            Backend::Single { client, config } => Ok(Conn(ConnKind::Single(
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?,
            ))),
            Backend::Sentinel { client, config } => {
                // Asks the sentinels for the primary every time: this runs
                // at the first call and after the primary went stale.
                let primary = client.lock().await.async_get_client().await?;
                let conn = primary
                    .get_multiplexed_async_connection_with_config(config)
                    .await?;
                Ok(Conn(ConnKind::Sentinel(conn)))
            }
            Backend::Cluster { client } => Ok(Conn(ConnKind::Cluster(
                client.get_async_connection().await?,
            ))),
        }
    }

    /// Whether an error says the connection should not be used again: on a
    /// Sentinel target, a broken connection or a server that is no longer a
    /// writable primary (`READONLY`, `MASTERDOWN`, `LOADING`, or `NOREPLICAS`:
    /// a primary cut off from its replicas under `min-replicas-to-write`,
    /// which the sentinels may have replaced); the sentinels are asked again. A single server's
    /// `ConnectionManager` and the cluster client reconnect by themselves.
    fn is_stale(&self, e: &redis::RedisError) -> bool {
        if !matches!(self.inner.backend, Backend::Sentinel { .. }) {
            return false;
        }
        if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            return true;
        }
        matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
            )
        ) || ["READONLY", "NOREPLICAS"]
            .iter()
            .any(|code| e.code() == Some(code) || e.to_string().contains(code))
    }

    /// Drops `stale` as the current connection, unless another call has
    /// replaced it already. Calls still running on it finish on it; the next
    /// calls connect afresh.
    fn forget(&self, stale: Option<&Arc<Conn>>) {
        if let Some(stale) = stale {
            let _previous = self
                .inner
                .current
                .compare_and_swap(stale, None::<Arc<Conn>>);
        }
    }
}

/// The crate's Sentinel client for `s`: auth and TLS for the sentinels and
/// for the primary set apart, as Sentinel deployments often differ.
fn sentinel_client(s: &SentinelTarget) -> Result<SentinelClient, CallError> {
    let config = |e: redis::RedisError| CallError::Config(format!("redis sentinel: {e}"));
    let mut addrs = Vec::with_capacity(s.sentinels.len());
    for addr in &s.sentinels {
        let (host, port) = target::parse_host_port(addr, "sentinel")?;
        addrs.push(ConnectionAddr::Tcp(host, port));
    }
    let mut builder = SentinelClientBuilder::new(addrs, &s.master_name, SentinelServerType::Master)
        .map_err(config)?
        .set_client_to_redis_db(s.db);
    if let Some(user) = &s.username {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = &s.password {
        builder = builder.set_client_to_redis_password(password);
    }
    if s.tls {
        builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
    }
    if let Some(user) = &s.sentinel_username {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = &s.sentinel_password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if s.sentinel_tls {
        builder = builder.set_client_to_sentinel_tls_mode(TlsMode::Secure);
    }
    builder.build().map_err(config)
}

/// The crate's cluster client for `c`. Its own retries (with backoff, after
/// `MOVED`, `TRYAGAIN` or a lost node) run inside each call's bound.
fn cluster_client(c: &ClusterTarget, timeout: Duration) -> Result<ClusterClient, CallError> {
    let scheme = if c.tls { "rediss" } else { "redis" };
    let mut nodes = Vec::with_capacity(c.nodes.len());
    for addr in &c.nodes {
        let (host, port) = target::parse_host_port(addr, "cluster node")?;
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        nodes.push(format!("{scheme}://{host}:{port}/"));
    }
    // Each call is bounded by its own timeout; the client's per-request
    // bound (500 ms by default) must not cut a call short of it.
    let mut builder = ClusterClient::builder(nodes)
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .min_retry_wait(10)
        .max_retry_wait(200);
    if let Some(user) = &c.username {
        builder = builder.username(user);
    }
    if let Some(password) = &c.password {
        builder = builder.password(password);
    }
    builder
        .build()
        .map_err(|e| CallError::Config(format!("redis cluster: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_input_is_refused_before_connecting() {
        let err = RedisConnection::connect("redis://127.0.0.1:6379/", Duration::ZERO)
            .await
            .unwrap_err();
        assert!(
            matches!(err, CallError::Config(ref m) if m.contains("zero")),
            "{err:?}"
        );
        let err = RedisConnection::connect("http://nowhere", Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            matches!(err, CallError::Config(ref m) if m.contains("invalid redis url")),
            "{err:?}"
        );
    }

    /// TLS to a port nothing listens on. The `redis` crate builds the
    /// rustls config before it connects, and rustls panics there when its
    /// crate features name no crypto provider: with the `tls` feature the
    /// call gets as far as the refused connection, an error; without it
    /// the target is refused before connecting.
    #[tokio::test]
    async fn tls_fails_as_an_error_never_a_panic() {
        let Err(err) =
            RedisConnection::connect("rediss://127.0.0.1:1/", Duration::from_secs(5)).await
        else {
            panic!("a TLS connection to port 1 succeeded");
        };
        if TLS {
            assert!(
                matches!(err, CallError::Redis(ref e) if e.is_connection_refusal() || e.is_io_error()),
                "{err:?}"
            );
        } else {
            assert!(
                matches!(err, CallError::Config(ref m) if m.contains("no Redis TLS")),
                "{err:?}"
            );
        }
    }

    #[test]
    fn connect_future_is_send() {
        fn assert_send<T: Send>(_: T) {}
        assert_send(RedisConnection::connect(
            "redis://127.0.0.1:1/",
            Duration::from_secs(1),
        ));
    }
}
