//! Redis plumbing shared by idmint's worker-ID registry and its Redis
//! strategies (counters, segment store, Redis-side snowflake, daily serials):
//! [`RedisConnection`], one connection per server that reconnects by itself
//! and bounds every call.
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

use arc_swap::ArcSwap;
use redis::RedisResult;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

mod facts;

pub use facts::ServerFacts;

/// Why a call on a [`RedisConnection`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The URL does not parse, or the timeout is zero.
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

/// A connection to one Redis server, shared by everything that talks to it.
///
/// - **Reconnects by itself.** It wraps the `redis` crate's `ConnectionManager`,
///   which opens a new connection after the old one breaks (within the next
///   call's timeout). A connection that stays open but stops answering is
///   replaced after a call on it times out, so it can't keep failing every call.
/// - **Multiplexed and cheap to clone.** Clones share the connection; many
///   tasks can have calls in flight at once.
/// - **Bounded.** Every call, the first connection included, gives up after its
///   timeout.
/// - **No hidden I/O.** Only [`RedisConnection::connect`] and
///   [`RedisConnection::call`] talk to Redis.
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
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// The manager calls go through; replaced when a call on it times out.
    current: ArcSwap<ConnectionManager>,
    /// `host:port` only: the URL may carry a password.
    addr: String,
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConnection")
            .field("addr", &self.inner.addr)
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
        if timeout.is_zero() {
            return Err(CallError::Config("redis timeout is zero".to_owned()));
        }
        let client = redis::Client::open(url)
            .map_err(|e| CallError::Config(format!("invalid redis url: {e}")))?;
        let addr = client.get_connection_info().addr().to_string();
        // Few, quick reconnection attempts: a call is bounded by its timeout
        // anyway, and a refused connection should come back as an error soon
        // rather than be retried with backoff for seconds. No response timeout
        // here: each call has its own bound.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(None)
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        let manager = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        let conn = RedisConnection {
            inner: Arc::new(Inner {
                client,
                config,
                current: ArcSwap::from_pointee(manager),
                addr,
            }),
        };
        conn.call(timeout, |mut manager| async move {
            redis::cmd("PING").query_async::<String>(&mut manager).await
        })
        .await?;
        Ok(conn)
    }

    /// The server's address, `host:port`.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Runs `op` on the connection within `timeout`.
    ///
    /// # Errors
    /// [`CallError::Timeout`] when `op` does not finish within `timeout` (the
    /// connection is then replaced for the calls that follow), and
    /// [`CallError::Redis`] for what Redis or the connection answered.
    pub async fn call<T, F, Fut>(&self, timeout: Duration, op: F) -> Result<T, CallError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let manager = self.inner.current.load_full();
        match tokio::time::timeout(timeout, op((*manager).clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.is_timeout() => {
                self.replace(&manager);
                Err(CallError::Timeout { after: timeout })
            }
            Ok(Err(e)) => Err(CallError::Redis(e)),
            Err(_elapsed) => {
                self.replace(&manager);
                Err(CallError::Timeout { after: timeout })
            }
        }
    }

    /// Puts a new (not yet connected) manager in place of `stale`, unless
    /// another call has done so already. Calls still running on `stale` finish
    /// on it; the next calls connect afresh.
    fn replace(&self, stale: &Arc<ConnectionManager>) {
        let fresh = ConnectionManager::new_lazy_with_config(
            self.inner.client.clone(),
            self.inner.config.clone(),
        );
        if let Ok(fresh) = fresh {
            let _previous = self.inner.current.compare_and_swap(stale, Arc::new(fresh));
        }
    }
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

    #[test]
    fn connect_future_is_send() {
        fn assert_send<T: Send>(_: T) {}
        assert_send(RedisConnection::connect(
            "redis://127.0.0.1:1/",
            Duration::from_secs(1),
        ));
    }
}
