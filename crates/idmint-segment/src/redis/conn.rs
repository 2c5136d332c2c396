//! [`RedisConnection`]: the one connection the Redis strategies share, and the
//! error mapping every call goes through. The connection itself (reconnects,
//! replacing a connection that stopped answering, bounded calls) is
//! `idmint_redis::RedisConnection`, shared with the Redis worker registry.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use idmint_redis::CallError;
use redis::RedisResult;
use redis::aio::ConnectionManager;

use super::{KIND, check_timeout};
use crate::error::{Result, SegmentError};

/// A connection to one Redis server, shared by the Redis strategies.
///
/// - **Reconnects by itself.** It wraps the `redis` crate's `ConnectionManager`,
///   which opens a new connection after the old one breaks (within the next
///   call's timeout). A connection that stays open but stops answering (a
///   network partition that sends no reset) is replaced after a call on it
///   times out, so it can't keep failing every call.
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

    /// The server's address, `host:port`.
    pub fn addr(&self) -> &str {
        self.inner.addr()
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
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.inner
            .call(timeout, op)
            .await
            .map_err(|e| call_error(operation, e))
    }
}

fn call_error(operation: &'static str, e: CallError) -> SegmentError {
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
