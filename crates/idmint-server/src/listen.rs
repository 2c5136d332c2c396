//! Listener plumbing the three surfaces share: the sockets bound at start
//! ([`Bound`]), the limits every listener keeps ([`ConnectionLimits`]), and
//! the stop signal their accept loops watch ([`stopped`]).
//!
//! It sits below the surfaces and the start-up code, so that `start.rs` can
//! bind and hand each surface its socket without a surface importing `start`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;

/// A listener bound at start, so a port that can't be had fails the start
/// before anything is claimed (port 0 picks a free port), with the address
/// it got. HTTP, RESP and gRPC each serve on one.
#[derive(Debug)]
pub(crate) struct Bound {
    pub listener: TcpListener,
    pub local_addr: SocketAddr,
}

impl Bound {
    /// Binds `addr` and reads back the address it got.
    pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<Bound> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        Ok(Bound {
            listener,
            local_addr,
        })
    }
}

/// Completes when `stop` turns true, or its sender is gone (stop then too).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|&stopped| stopped).await;
}

/// What bounds slow and greedy clients, on every listener
/// (`server.max_connections`, `server.read_timeout`; see `config.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ConnectionLimits {
    /// One permit per open client connection, HTTP and RESP together: a
    /// listener takes one before it accepts, so at the cap new clients wait.
    pub slots: Arc<tokio::sync::Semaphore>,
    /// `server.max_connections`, for the log line when the cap is reached.
    pub max: usize,
    /// How long a started request may take to arrive whole.
    pub read_timeout: Duration,
    /// When the cap was last logged: one line a minute at most, however
    /// many clients wait.
    logged: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl ConnectionLimits {
    /// Limits of `max` connections and `read_timeout`.
    pub(crate) fn new(max: usize, read_timeout: Duration) -> ConnectionLimits {
        ConnectionLimits {
            slots: Arc::new(tokio::sync::Semaphore::new(max)),
            max,
            read_timeout,
            logged: Arc::default(),
        }
    }

    /// A slot for one more connection, held until the connection closes: at
    /// once when one is free; otherwise logs that the cap is reached (naming
    /// `listener`) and waits for one. `None` only if the slots were closed.
    pub(crate) async fn slot(
        &self,
        listener: &'static str,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Some(permit);
        }
        if self.first_in_a_minute() {
            tracing::warn!(
                listener,
                max_connections = self.max,
                "connection cap reached (server.max_connections): new connections wait"
            );
        }
        self.slots.clone().acquire_owned().await.ok()
    }

    fn first_in_a_minute(&self) -> bool {
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let first = logged.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(60));
        if first {
            *logged = Some(now);
        }
        first
    }
}
