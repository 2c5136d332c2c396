//! [`CutProxy`]: a loopback TCP proxy in front of a service that a test can
//! cut, to take one client off its coordinator while everything else (other
//! clients, the service itself) carries on.
//!
//! Two ways to cut:
//! - [`CutProxy::cut`]: every open connection is closed (the client sees a
//!   reset or an end of stream at once) and new ones are closed as soon as
//!   they are accepted, like a service that went away;
//! - [`CutProxy::blackhole`]: open connections stay open but nothing more is
//!   forwarded, and new ones are accepted and never forwarded, like a network
//!   partition without resets; the client finds out only by its own timeouts.
//!
//! [`CutProxy::delay`] slows the service down instead: every answer (each
//! chunk read from it) is held back for a while before it is forwarded, as
//! from an overloaded server.
//!
//! [`CutProxy::restore`] lets new connections through again; connections
//! that were open during a blackhole are closed then (their bytes in flight
//! are gone, as after a real partition).
//!
//! Plain threads (two per connection) rather than an async runtime, so tests
//! of any kind can use it; connections are few.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Forwarding normally.
const OPEN: u8 = 0;
/// Closing everything.
const CUT: u8 = 1;
/// Forwarding nothing, closing nothing.
const BLACKHOLE: u8 = 2;

/// A TCP proxy on `127.0.0.1` to one upstream address, which can be cut and
/// restored. Stopped (every connection closed) on drop.
#[derive(Debug)]
pub struct CutProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    state: AtomicU8,
    /// Bumped at every cut and restore: a connection whose epoch is older
    /// than a cut (or a blackhole's end) is closed.
    epoch: AtomicU64,
    stopping: AtomicBool,
    /// Both ends of every open connection, by connection number.
    open: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
    accepted: AtomicU64,
    /// How long each chunk from upstream is held back, in microseconds.
    delay_us: AtomicU64,
}

impl CutProxy {
    /// Starts a proxy on a free loopback port in front of `upstream`
    /// (`127.0.0.1:5432`).
    ///
    /// # Errors
    /// When `upstream` is not an address or no port can be bound.
    pub fn start(upstream: &str) -> std::io::Result<CutProxy> {
        let upstream: SocketAddr = upstream.parse().map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("upstream {upstream:?} is not host:port: {e}"),
            )
        })?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            state: AtomicU8::new(OPEN),
            epoch: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
            accepted: AtomicU64::new(0),
            delay_us: AtomicU64::new(0),
        });
        let for_thread = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("cut-proxy".to_owned())
            .spawn(move || accept_loop(&listener, &for_thread))?;
        Ok(CutProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Where clients connect: `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The upstream address.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// How many connections were accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Closes every open connection and every new one until [`CutProxy::restore`].
    pub fn cut(&self) {
        self.shared.state.store(CUT, Ordering::SeqCst);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        self.shared.close_all();
    }

    /// Stops forwarding on every connection, open or new, without closing any,
    /// until [`CutProxy::restore`].
    pub fn blackhole(&self) {
        self.shared.state.store(BLACKHOLE, Ordering::SeqCst);
    }

    /// Holds back every chunk the service sends (answers) for `delay`
    /// before forwarding it, on open and new connections; zero forwards at
    /// once again. Requests go through at once.
    pub fn delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::SeqCst);
    }

    /// Forwards again. Connections open during a blackhole are closed now.
    pub fn restore(&self) {
        let was = self.shared.state.swap(OPEN, Ordering::SeqCst);
        if was == BLACKHOLE {
            self.shared.epoch.fetch_add(1, Ordering::SeqCst);
            self.shared.close_all();
        }
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.close_all();
        // Wake the acceptor with one last connection.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

impl Shared {
    fn close_all(&self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        for (_, a, b) in open.drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for inbound in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(inbound) = inbound else { continue };
        let number = shared.accepted.fetch_add(1, Ordering::SeqCst);
        if shared.state.load(Ordering::SeqCst) == CUT {
            let _ = inbound.shutdown(Shutdown::Both);
            continue;
        }
        let shared = shared.clone();
        let _ = std::thread::Builder::new()
            .name("cut-proxy-conn".to_owned())
            .spawn(move || connect(inbound, number, &shared));
    }
}

/// Connects upstream (once forwarding is allowed) and pumps both ways.
fn connect(inbound: TcpStream, number: u64, shared: &Arc<Shared>) {
    let epoch = shared.epoch.load(Ordering::SeqCst);
    // A connection accepted during a blackhole waits, unforwarded.
    while shared.state.load(Ordering::SeqCst) == BLACKHOLE {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if shared.state.load(Ordering::SeqCst) == CUT || shared.epoch.load(Ordering::SeqCst) != epoch {
        let _ = inbound.shutdown(Shutdown::Both);
        return;
    }
    let Ok(outbound) = TcpStream::connect_timeout(&shared.upstream, Duration::from_secs(5)) else {
        let _ = inbound.shutdown(Shutdown::Both);
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (Ok(in2), Ok(out2), Ok(in3), Ok(out3)) = (
        inbound.try_clone(),
        outbound.try_clone(),
        inbound.try_clone(),
        outbound.try_clone(),
    ) else {
        return;
    };
    shared
        .open
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((number, in3, out3));
    let back = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("cut-proxy-pump".to_owned())
            .spawn(move || pump(out2, in2, &shared, epoch, true))
    };
    pump(inbound, outbound, shared, epoch, false);
    if let Ok(back) = back {
        let _ = back.join();
    }
    shared
        .open
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(n, _, _)| *n != number);
}

/// Copies `from` to `to` until either closes, holding bytes back while the
/// proxy is a blackhole (and, for the service's answers, `answers`, by the
/// delay) and dropping the connection when its epoch ends.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, epoch: u64, answers: bool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while shared.state.load(Ordering::SeqCst) == BLACKHOLE
            && !shared.stopping.load(Ordering::SeqCst)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let delay = shared.delay_us.load(Ordering::SeqCst);
        if answers && delay > 0 {
            std::thread::sleep(Duration::from_micros(delay));
        }
        if shared.epoch.load(Ordering::SeqCst) != epoch || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free port; returns its address.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn connect(proxy: &CutProxy) -> TcpStream {
        let stream = TcpStream::connect(proxy.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        stream
    }

    /// Sends `ping` and reads the echo; `None` when nothing (or an end) came.
    fn round_trip(stream: &mut TcpStream) -> Option<Vec<u8>> {
        stream.write_all(b"ping").ok()?;
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).ok()?;
        Some(buf.to_vec())
    }

    #[test]
    fn delay_holds_answers_back() {
        let proxy = CutProxy::start(&echo_server().to_string()).unwrap();
        let mut stream = connect(&proxy);
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        proxy.delay(Duration::from_millis(200));
        let started = std::time::Instant::now();
        assert_eq!(round_trip(&mut stream).as_deref(), Some(&b"ping"[..]));
        assert!(started.elapsed() >= Duration::from_millis(200));
        proxy.delay(Duration::ZERO);
        let started = std::time::Instant::now();
        assert_eq!(round_trip(&mut stream).as_deref(), Some(&b"ping"[..]));
        assert!(started.elapsed() < Duration::from_millis(200));
    }

    #[test]
    fn cut_closes_open_connections_and_refuses_new_ones_until_restored() {
        let proxy = CutProxy::start(&echo_server().to_string()).unwrap();
        let mut open = connect(&proxy);
        assert_eq!(round_trip(&mut open).as_deref(), Some(&b"ping"[..]));

        proxy.cut();
        assert_eq!(round_trip(&mut open), None);
        let mut during = connect(&proxy);
        assert_eq!(round_trip(&mut during), None);

        proxy.restore();
        let mut after = connect(&proxy);
        assert_eq!(round_trip(&mut after).as_deref(), Some(&b"ping"[..]));
    }

    #[test]
    fn blackhole_forwards_nothing_then_closes_what_was_held() {
        let proxy = CutProxy::start(&echo_server().to_string()).unwrap();
        let mut open = connect(&proxy);
        assert_eq!(round_trip(&mut open).as_deref(), Some(&b"ping"[..]));

        proxy.blackhole();
        // No answer, and no end of stream either: a read times out.
        open.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        let err = open.read(&mut buf).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{err:?}"
        );
        let mut during = connect(&proxy);
        assert_eq!(round_trip(&mut during), None);

        proxy.restore();
        // What was held across the blackhole is closed; new connections work.
        open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(open.read(&mut buf), Ok(0) | Err(_)));
        let mut after = connect(&proxy);
        assert_eq!(round_trip(&mut after).as_deref(), Some(&b"ping"[..]));
        assert!(proxy.accepted() >= 3);
    }
}
