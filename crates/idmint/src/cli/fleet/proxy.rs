//! A slow coordinator on demand: a TCP proxy on loopback that holds every
//! chunk for a fixed time in each direction, so each request-response round
//! trip through it takes twice that longer, however many are in flight (a
//! chunk's delay starts when it arrives, so a stream is delayed, not
//! throttled).
//!
//! It can also be cut ([`DelayProxy::cut`]): every connection through it
//! closes and new ones are refused, as a crashed process's connections end.
//! That is how an in-process node on ZooKeeper dies: its session, which
//! holds its ephemeral claim, expires at the server after the session
//! timeout, and only then is its worker ID free.
//!
//! Hand-written: it is a few dozen lines over tokio, and the proxies on
//! crates.io either forward without delay or shape bandwidth, not latency.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A running proxy; it stops when dropped.
#[derive(Debug)]
pub struct DelayProxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
    cut: Arc<AtomicBool>,
    connections: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl DelayProxy {
    /// Listens on a free loopback port and forwards each connection to
    /// `upstream`, every chunk `one_way` late.
    pub async fn start(upstream: (String, u16), one_way: Duration) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(std::sync::Mutex::new(Vec::<tokio::task::AbortHandle>::new()));
        let (is_cut, open) = (cut.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if is_cut.load(Ordering::Relaxed) {
                    continue;
                }
                let upstream = upstream.clone();
                let connection = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect((upstream.0.as_str(), upstream.1)).await
                    else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pipe(client_read, server_write, one_way),
                        pipe(server_read, client_write, one_way),
                    );
                });
                let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
                open.retain(|c| !c.is_finished());
                open.push(connection.abort_handle());
            }
        });
        Ok(DelayProxy {
            addr,
            task,
            cut,
            connections,
        })
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
        for c in self
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            c.abort();
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        // Dropping `tx` ends the writer once it has written what it holds.
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_round_trip_takes_twice_the_delay_longer() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = echo.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 4];
            while s.read_exact(&mut buf).await.is_ok() {
                s.write_all(&buf).await.unwrap();
            }
        });
        let proxy = DelayProxy::start(("127.0.0.1".to_owned(), port), Duration::from_millis(50))
            .await
            .unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        for _ in 0..3 {
            let started = std::time::Instant::now();
            c.write_all(b"ping").await.unwrap();
            let mut buf = [0u8; 4];
            c.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"ping");
            let took = started.elapsed();
            assert!(took >= Duration::from_millis(100), "{took:?}");
            assert!(took < Duration::from_millis(1000), "{took:?}");
        }
        proxy.cut();
        let mut buf = [0u8; 4];
        let closed = c.read(&mut buf).await;
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(matches!(again.read(&mut buf).await, Ok(0) | Err(_)));
    }
}
