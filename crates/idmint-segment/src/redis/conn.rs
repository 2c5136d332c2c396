//! [`RedisConnection`]: the one connection the Redis strategies share, and the
//! timeout and error mapping every call goes through.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use redis::RedisResult;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

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
    /// opened again later; each call's own bound is its strategy's timeout.
    ///
    /// # Errors
    /// - [`SegmentError::Config`] for a malformed URL or a zero timeout.
    /// - [`SegmentError::Timeout`] when Redis does not answer within `timeout`.
    /// - [`SegmentError::Backend`] when the connection is refused or fails.
    pub async fn connect(url: &str, timeout: Duration) -> Result<RedisConnection> {
        check_timeout(timeout)?;
        let client = redis::Client::open(url)
            .map_err(|e| SegmentError::Config(format!("invalid redis url: {e}")))?;
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
        let manager = lazy_manager(&client, &config)?;
        let conn = RedisConnection {
            inner: Arc::new(Inner {
                client,
                config,
                current: ArcSwap::from_pointee(manager),
                addr,
            }),
        };
        conn.call("connect", timeout, |mut manager| async move {
            redis::cmd("PING").query_async::<String>(&mut manager).await
        })
        .await?;
        Ok(conn)
    }

    /// The server's address, `host:port`.
    pub fn addr(&self) -> &str {
        &self.inner.addr
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
        let manager = self.inner.current.load_full();
        let timed_out = || SegmentError::Timeout {
            store: KIND,
            operation,
            after: timeout,
        };
        match tokio::time::timeout(timeout, op((*manager).clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.is_timeout() => {
                self.replace(&manager);
                Err(timed_out())
            }
            Ok(Err(e)) => Err(SegmentError::Backend {
                store: KIND,
                operation,
                message: e.to_string(),
            }),
            Err(_elapsed) => {
                self.replace(&manager);
                Err(timed_out())
            }
        }
    }

    /// Puts a new (not yet connected) manager in place of `stale`, unless
    /// another call has done so already. Calls still running on `stale` finish
    /// on it; the next calls connect afresh.
    fn replace(&self, stale: &Arc<ConnectionManager>) {
        if let Ok(fresh) = lazy_manager(&self.inner.client, &self.inner.config) {
            let _previous = self.inner.current.compare_and_swap(stale, Arc::new(fresh));
        }
    }
}

/// A manager that connects on its first use. Does no I/O.
fn lazy_manager(
    client: &redis::Client,
    config: &ConnectionManagerConfig,
) -> Result<ConnectionManager> {
    ConnectionManager::new_lazy_with_config(client.clone(), config.clone()).map_err(|e| {
        SegmentError::Backend {
            store: KIND,
            operation: "connect",
            message: e.to_string(),
        }
    })
}
