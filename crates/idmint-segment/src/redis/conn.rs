//! [`RedisConnection`]: the one connection the Redis strategies share, and the
//! error mapping every call goes through. The connection itself (reconnects,
//! replacing a connection that stopped answering, bounded calls) is
//! `idmint_redis::RedisConnection`, shared with the Redis worker registry.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use idmint_redis::{CallError, Conn, RedisTarget};
use redis::RedisResult;

use super::{KIND, check_timeout};
use crate::error::{Result, SegmentError};

/// A connection to one Redis (a server, the primary Redis Sentinel names,
/// or a Redis Cluster), shared by the Redis strategies.
///
/// - **Reconnects by itself.** It wraps `idmint_redis::RedisConnection`: the
///   `redis` crate's `ConnectionManager` for one server, which opens a new
///   connection after the old one breaks (within the next call's timeout);
///   for Sentinel, the primary the sentinels name, asked again after a
///   connection error or a demotion; for a Cluster, the crate's cluster
///   client, which follows `MOVED`/`ASK` and failovers. A connection that
///   stays open but stops answering (a network partition that sends no
///   reset) is replaced after a call on it times out, so it can't keep
///   failing every call.
/// - **One slot on a Cluster.** Each strategy built on a Cluster connection
///   requires its key prefix to hold a hash tag (`idmint:{orders}:`), so that
///   all its keys share one slot and every script runs on one node.
/// - **Multiplexed and cheap to clone.** Clones share the connection; many
///   tasks can have calls in flight at once.
/// - **No hidden I/O.** Only [`RedisConnection::connect`] and the strategies'
///   calls talk to Redis.
///
/// # Examples
///
/// ```no_run
/// use idmint_segment::redis::{RedisConnection, RedisCounter, RedisCounterConfig};
/// use std::time::Duration;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let conn = RedisConnection::connect("redis://127.0.0.1:6379/", Duration::from_secs(2)).await?;
/// let counter = RedisCounter::new(conn.clone(), RedisCounterConfig::new(0, 1))?;
/// let id = counter.next_id("order").await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisConnection {
    inner: idmint_redis::RedisConnection,
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConnection")
            .field("addr", &self.inner.addr())
            .finish_non_exhaustive()
    }
}

impl RedisConnection {
    /// Connects to the Redis at `url` (`redis://[user:password@]host:port/[db]`)
    /// and checks that it answers `PING` within `timeout`.
    ///
    /// `timeout` also bounds each connection attempt when the connection is
    /// opened again later; each call's own bound is its strategy's timeout.
    ///
    /// # Errors
    /// - [`SegmentError::Config`] for a malformed URL or a zero timeout.
    /// - [`SegmentError::Timeout`] when Redis does not answer within `timeout`.
    /// - [`SegmentError::Backend`] when the connection is refused or fails.
    pub async fn connect(url: &str, timeout: Duration) -> Result<RedisConnection> {
        check_timeout(timeout)?;
        let inner = idmint_redis::RedisConnection::connect(url, timeout)
            .await
            .map_err(|e| call_error("connect", e))?;
        Ok(RedisConnection { inner })
    }

    /// Connects to `target` (a server, a Sentinel-managed primary or a Redis
    /// Cluster) and checks that it answers `PING` within `timeout`.
    ///
    /// # Errors
    /// As [`RedisConnection::connect`]; [`SegmentError::Config`] also for a
    /// target that can't work.
    pub async fn open(target: &RedisTarget, timeout: Duration) -> Result<RedisConnection> {
        check_timeout(timeout)?;
        let inner = idmint_redis::RedisConnection::open(target, timeout)
            .await
            .map_err(|e| call_error("connect", e))?;
        Ok(RedisConnection { inner })
    }

    /// What this connects to, without passwords: `host:port`, the Sentinel
    /// master and its sentinels, or the Cluster's nodes.
    pub fn addr(&self) -> String {
        self.inner.addr()
    }

    /// The shared connection underneath, for what talks to the same Redis
    /// outside the strategies (server facts, the topology).
    pub fn shared(&self) -> &idmint_redis::RedisConnection {
        &self.inner
    }

    /// On a Redis Cluster, checks that every key under `prefix` shares one
    /// hash slot; elsewhere any prefix does.
    pub(crate) fn check_prefix(&self, prefix: &str) -> Result<()> {
        if self.inner.is_cluster() {
            idmint_redis::check_single_slot(prefix)
                .map_err(|e| SegmentError::Config(e.to_string()))?;
        }
        Ok(())
    }

    /// Runs `op` on the connection within `timeout`, mapping failures to
    /// [`SegmentError::Timeout`] and [`SegmentError::Backend`].
    pub(crate) async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        timeout: Duration,
        op: F,
    ) -> Result<T>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.inner
            .call(timeout, op)
            .await
            .map_err(|e| call_error(operation, e))
    }
}

pub(super) fn call_error(operation: &'static str, e: CallError) -> SegmentError {
    match e {
        CallError::Config(message) => SegmentError::Config(message),
        CallError::Timeout { after } => SegmentError::Timeout {
            store: KIND,
            operation,
            after,
        },
        other => SegmentError::Backend {
            store: KIND,
            operation,
            message: other.to_string(),
        },
    }
}
