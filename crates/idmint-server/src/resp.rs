//! The Redis-protocol listener: any Redis client, with its default settings
//! (pools, pipelines, MULTI/EXEC transactions, RESP2 or RESP3), or
//! `redis-benchmark`, gets IDs with no new SDK.
//!
//! # Commands
//! - `INCR key`, `GET key`: the key's next ID, made by the key's configured
//!   strategy exactly as `GET /v1/ids/{key}` makes it (`issue.rs`). An
//!   integer reply; a public key's ID is obfuscated, and comes as a bulk
//!   string when the public text form isn't decimal; UUID keys answer the
//!   hyphenated UUID as a bulk string.
//! - `INCRBY key n`: reserves the key's next `n` IDs (1 to
//!   `server.max_count`) as one run and answers the last, so a client that
//!   wants a block of IDs counts them back from it. `INCRBY key 1` is `INCR
//!   key` for every strategy (redis-py's `incr()` sends it). For `n` > 1:
//!   - a segment key: the run is `last - (n-1)*delta ..= last` stepping by
//!     the key's `delta` (`last-n+1..=last` for the usual delta 1): its IDs
//!     are this client's alone. A run that crosses into a segment not
//!     adjacent to the last (another node leased the numbers in between) is
//!     not a run: those IDs are dropped (a gap, never issued to anyone) and
//!     the run taken again, from one segment (leases are sized to hold it);
//!     after 3 such tries, `-NOT_CONTIGUOUS`, retryable.
//!   - a snowflake, UUID or public key: `-NOT_CONTIGUOUS`, nothing issued:
//!     their IDs aren't consecutive numbers, so "the last" names no run.
//!   - a count of 0, negative or not a number: `-INVALID_COUNT`, nothing
//!     issued.
//! - `IDMINT.BATCH key n`: an array of the key's next `n` IDs (1 to
//!   `server.max_count`), each as `INCR` would answer it, for any strategy.
//! - `MULTI`, then commands (`+QUEUED`), then `EXEC`: the commands run at
//!   `EXEC`, their replies in one array. Nothing runs, so nothing is issued,
//!   before `EXEC`: not for a `DISCARD`ed transaction, nor for one whose
//!   connection closes, nor for one with a command that failed to queue (an
//!   unknown command, a wrong arity, a bad key or count, a key needing
//!   `AUTH`), whose `EXEC` answers `-EXECABORT` as Redis does. `WATCH` is
//!   refused with why (every read of an idmint key issues an ID: there is no
//!   value to watch); `UNWATCH` answers `+OK` (clients send it to reset).
//! - `AUTH token` or `AUTH user token` (the user ignored), and `HELLO ...
//!   AUTH user token`: unlocks, for this connection, the keys whose
//!   `keys.<name>.token` is `token`. Issuing for a key with a token answers
//!   `-NOAUTH ...` until then; a token that is no key's answers `-WRONGPASS
//!   ...`. Tokens are compared in constant time and never logged.
//! - `HELLO [2|3] [AUTH user token] [SETNAME name]`: the protocol, RESP2 by
//!   default. In RESP3 the replies that have a type of their own use it, as
//!   redis-server 7 does: `HELLO`, `CONFIG GET` and `COMMAND DOCS` answer
//!   maps, `COMMAND INFO`'s flags are sets, nulls are `_`, and `INFO` and
//!   `CLIENT INFO` are verbatim strings. IDs are integers in both.
//! - What clients send at connect or to reset: `CLIENT
//!   SETNAME|GETNAME|SETINFO|ID|INFO` (`CLIENT TRACKING` and `CACHING` are
//!   refused with why), `SELECT 0`, `RESET`, `QUIT`, and `CONFIG GET save`
//!   and `appendonly` (what `redis-benchmark` asks for).
//! - `COMMAND`, `COMMAND INFO|DOCS [name ...]`, `COMMAND COUNT|LIST`: in
//!   Redis 7's shapes (`resp/commands.rs`), so clients that read command
//!   tables parse them.
//! - `PING [message]`, `ECHO message`, `INFO [section ...]` (`server`,
//!   `idmint`, `stats`; all for none, `default`, `all` or `everything`; an
//!   unknown section adds nothing).
//! - Anything else: `-ERR unknown command 'name'`.
//!
//! # Errors
//! Failures to issue answer `-CODE message`, the code being the HTTP API's
//! upper-cased (`-KEY_NOT_FOUND segment key "x" was not found...`,
//! `-UNAVAILABLE ...`); the connection stays open. Wrong arity answers
//! `-ERR wrong number of arguments for 'incr' command`. A malformed or
//! oversize request (see `resp/frame.rs` for the limits) answers
//! `-ERR Protocol error: ...` and the connection is closed, as Redis does.
//!
//! # Pipelining
//! Each read is parsed to its end: every whole request in the buffer is
//! answered, in order, into one output buffer, which is written once per
//! read (or sooner when it passes [`FLUSH_AT`], so a pipeline of large
//! batches doesn't pile up in memory).
//!
//! # Slow, idle and too many clients
//! A request must arrive whole within `server.read_timeout` of its first
//! byte, or the connection is answered `-ERR timeout ...` and closed: a
//! client trickling a frame can't hold a connection (or the up to a frame's
//! worth of memory it makes the server buffer) for longer. Replies the
//! socket can't take at once must be taken within the same timeout, or the
//! connection is closed: a client that pipelines and never reads doesn't
//! hold a connection and its replies either. An idle
//! connection, with nothing half sent, is kept however long, as Redis keeps
//! idle clients by default (`timeout 0`): Redis clients pool connections and
//! don't expect the server to drop them. What bounds idle clients is
//! `server.max_connections`, shared with HTTP: each connection holds a slot
//! from accept to close, and at the cap the listener accepts no more until
//! one frees.
//!
//! # TLS
//! With `[tls]` (and `tls.resp` left on) every connection shakes hands
//! first, in its own task within `server.read_timeout` (`tls.rs`); `redis-cli
//! --tls` and `rediss://` clients connect. A client sending plain RESP gets
//! `-ERR this port speaks TLS ...` and is disconnected. Plain and TLS
//! connections run the same code over `MaybeTls`.
//!
//! # Shutdown
//! When the server stops, the listener stops accepting; each connection
//! answers the requests it has read (and finishes one it is halfway through
//! reading), then closes. Connections still open after `server.shutdown_grace`
//! are dropped.
//!
//! # Where the code is
//! This file accepts connections and runs each one's read-answer-write
//! loop ([`Connection`]). A request is parsed by `resp/frame.rs`, looked up
//! in the command table of `resp/commands.rs` and run by `resp/dispatch.rs`;
//! `resp/ids.rs` issues, `resp/transaction.rs` queues and runs `MULTI`/`EXEC`,
//! and `resp/session.rs` answers the connection's own commands (`AUTH`,
//! `HELLO`, `CLIENT`, `INFO`, `RESET`).

mod commands;
mod dispatch;
mod frame;
mod ids;
mod session;
mod transaction;

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::keys::KeySpec;
use crate::listen::{Bound, stopped};
use crate::metrics::IssuedCounter;
use crate::state::AppState;
use crate::tls::{self, MaybeTls, Surface};
use frame::{LIMITS, Proto};

/// Output buffered past this is written before the next request is answered.
const FLUSH_AT: usize = 256 * 1024;

/// Accepts RESP connections on `bound` until `stop` turns true; then waits up
/// to `grace` for open connections to answer what they have read, and drops
/// the rest.
pub(crate) async fn serve(
    bound: Bound,
    state: Arc<AppState>,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let Bound {
        listener,
        local_addr,
    } = bound;
    let stats = Arc::new(Stats::new(local_addr));
    let tls = state.tls.clone().filter(|t| t.enabled(Surface::Resp));
    let mut connections = JoinSet::new();
    let stop_connections = stop.clone();
    loop {
        tokio::select! {
            () = stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let slot = tokio::select! {
                        () = stopped(&mut stop) => break,
                        slot = state.connections.slot("resp") => slot,
                    };
                    let Some(slot) = slot else { break };
                    let _ = stream.set_nodelay(true);
                    // Loaded per connection, so a reloaded certificate serves the next one.
                    let acceptor = tls.as_ref().map(|t| t.acceptor(Surface::Resp));
                    let (state, stats) = (state.clone(), stats.clone());
                    let stop = stop_connections.clone();
                    connections.spawn(async move {
                        let stream = match acceptor {
                            None => MaybeTls::Plain(stream),
                            Some(acceptor) => {
                                let timeout = state.connections.read_timeout;
                                let handshake = tls::accept_within(
                                    acceptor,
                                    stream,
                                    PLAIN_TEXT_ON_TLS,
                                    timeout,
                                    peer,
                                    Surface::Resp,
                                );
                                match handshake.await {
                                    Some(stream) => stream,
                                    None => return,
                                }
                            }
                        };
                        Connection::new(stream, peer, state, stats).run(stop).await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: pass, don't spin.
                    tracing::warn!(addr = %local_addr, error = %e, "RESP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(done) = connections.join_next(), if !connections.is_empty() => {
                log_join(done);
            }
        }
    }
    drop(listener);
    tracing::info!(addr = %local_addr, open = connections.len(), "RESP: no new connections");
    let drained = tokio::time::timeout(grace, async {
        while let Some(done) = connections.join_next().await {
            log_join(done);
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            grace = ?grace,
            "RESP connections still open after the shutdown grace; closing"
        );
        connections.shutdown().await;
    }
}

/// What a client speaking plain RESP to the TLS port is told.
const PLAIN_TEXT_ON_TLS: &[u8] =
    b"-ERR this port speaks TLS: connect with TLS (redis-cli --tls, a rediss:// URL)\r\n";

/// Completes at `deadline`; never when there is none.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn log_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::error!(error = %e, "RESP connection task panicked");
    }
}

/// Counters for `INFO`, shared by the listener's connections.
#[derive(Debug)]
struct Stats {
    addr: SocketAddr,
    started: Instant,
    connections_open: AtomicU64,
    connections_total: AtomicU64,
    commands: AtomicU64,
    ids_issued: AtomicU64,
}

impl Stats {
    fn new(addr: SocketAddr) -> Stats {
        Stats {
            addr,
            started: Instant::now(),
            connections_open: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            ids_issued: AtomicU64::new(0),
        }
    }
}

/// What to do after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    /// Write what is buffered, then close (`QUIT`, a protocol error).
    Close,
}

/// A key a connection issued for: it passed the key and token checks (AUTH
/// only ever unlocks more), so the next request for it skips them.
struct LastKey {
    key: String,
    spec: KeySpec,
    counter: IssuedCounter,
    /// IDs issued and not yet added to `counter`: added before each write.
    pending: u64,
}

impl LastKey {
    fn flush(&mut self) {
        if self.pending > 0 {
            self.counter.add(std::mem::take(&mut self.pending));
        }
    }
}

impl Drop for LastKey {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A transaction between `MULTI` and `EXEC`/`DISCARD`.
#[derive(Default)]
struct Transaction {
    /// The queued requests: each one's bytes, and its arguments as ranges
    /// of them. Nothing runs (nothing is issued) before `EXEC`.
    queued: Vec<(Vec<u8>, Vec<Range<usize>>)>,
    /// The bytes of `queued`, at most [`MAX_QUEUED_BYTES`].
    bytes: usize,
    /// A request failed to queue: `EXEC` runs nothing, answers `-EXECABORT`.
    failed: bool,
}

/// Most bytes of requests one transaction queues: what a client can make a
/// connection hold before `EXEC` (a pipeline's requests, by contrast, are
/// answered as they are read).
const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;

/// One client connection.
struct Connection {
    /// Plain or TLS: an enum, so the plain path has no dynamic call.
    stream: MaybeTls,
    peer: SocketAddr,
    /// `CLIENT ID`: the connection's number since start.
    id: i64,
    state: Arc<AppState>,
    stats: Arc<Stats>,
    /// Bytes read and not yet parsed.
    input: Vec<u8>,
    /// Replies not yet written.
    out: Vec<u8>,
    /// The current request's arguments, as ranges of `input`.
    args: Vec<Range<usize>>,
    /// When the connection was accepted, for `CLIENT INFO`.
    opened: Instant,
    /// RESP2, or RESP3 after `HELLO 3`.
    proto: Proto,
    /// `CLIENT SETNAME`.
    name: Option<Vec<u8>>,
    /// `CLIENT SETINFO lib-name` and `lib-ver`.
    lib: (Option<Vec<u8>>, Option<Vec<u8>>),
    /// The open transaction, between `MULTI` and `EXEC`/`DISCARD`. Boxed:
    /// a connection that never sends `MULTI` carries one null pointer.
    multi: Option<Box<Transaction>>,
    /// The keys with a token that `AUTH` unlocked on this connection.
    authorized: Vec<String>,
    /// The key last issued for, checked and resolved: clients mostly ask for
    /// the same key again, and then skip the checks and map lookups.
    last_key: Option<LastKey>,
    /// Counted here, added to [`Stats`] before each write.
    n_commands: u64,
    n_ids: u64,
}

impl Connection {
    fn new(stream: MaybeTls, peer: SocketAddr, state: Arc<AppState>, stats: Arc<Stats>) -> Self {
        let id = stats.connections_total.fetch_add(1, Ordering::Relaxed) + 1;
        Connection {
            stream,
            peer,
            id: i64::try_from(id).unwrap_or(i64::MAX),
            state,
            stats,
            input: Vec::with_capacity(4096),
            out: Vec::with_capacity(4096),
            args: Vec::with_capacity(4),
            opened: Instant::now(),
            proto: Proto::Resp2,
            name: None,
            lib: (None, None),
            multi: None,
            authorized: Vec::new(),
            last_key: None,
            n_commands: 0,
            n_ids: 0,
        }
    }

    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        self.stats.connections_open.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.serve(&mut stop).await {
            tracing::debug!(peer = %self.peer, error = %e, "RESP connection ended");
        }
        self.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    async fn serve(&mut self, stop: &mut watch::Receiver<bool>) -> std::io::Result<()> {
        let mut stopping = *stop.borrow();
        // Made once for the connection's life, not once per request: waiting
        // on the stop channel registers on a waiter list that every
        // connection shares, under its lock.
        let mut stop_signal = std::pin::pin!(stopped(stop));
        let read_timeout = self.state.connections.read_timeout;
        // When the request now partly read began to arrive.
        let mut started: Option<tokio::time::Instant> = None;
        loop {
            let unparsed = self.input.len();
            let flow = self.answer_buffered().await?;
            started = match started {
                _ if self.input.is_empty() => None,
                // Requests were answered: what is left began in the last read.
                _ if self.input.len() < unparsed => Some(tokio::time::Instant::now()),
                Some(at) => Some(at),
                None => Some(tokio::time::Instant::now()),
            };
            if !self.out.is_empty() {
                self.write_out().await?;
            }
            // Stopping: close once nothing is half read.
            if flow == Flow::Close || (stopping && self.input.is_empty()) {
                return Ok(());
            }
            if self.input.is_empty() && self.input.capacity() > 64 * 1024 {
                // A large request came and went: give the memory back.
                self.input.shrink_to(16 * 1024);
            }
            if self.input.capacity() - self.input.len() < 4096 {
                self.input.reserve(16 * 1024);
            }
            tokio::select! {
                read = self.stream.read_buf(&mut self.input) => {
                    if read? == 0 {
                        return Ok(());
                    }
                }
                () = &mut stop_signal, if !stopping => {
                    stopping = true;
                }
                () = until(started.map(|at| at + read_timeout)) => {
                    tracing::debug!(peer = %self.peer, "RESP request not whole within the read timeout; closing");
                    let message = format!(
                        "timeout: the request was not whole within {read_timeout:?} \
                         (server.read_timeout); closing"
                    );
                    frame::error(&mut self.out, "ERR", &message);
                    // Best effort: a client that doesn't read gets nothing.
                    let _ = self.stream.try_write_now(&self.out);
                    return Ok(());
                }
            }
        }
    }

    /// Writes the replies in `out`, having counted what they answer first
    /// (so a client that reads a reply and then scrapes the metrics sees it).
    async fn write_out(&mut self) -> std::io::Result<()> {
        self.stats
            .commands
            .fetch_add(std::mem::take(&mut self.n_commands), Ordering::Relaxed);
        self.stats
            .ids_issued
            .fetch_add(std::mem::take(&mut self.n_ids), Ordering::Relaxed);
        if let Some(last) = &mut self.last_key {
            last.flush();
        }
        // Most replies fit the socket buffer at once: no timer for those.
        let written = self.stream.try_write_now(&self.out)?;
        if written < self.out.len() || self.stream.wants_flush() {
            // A client that doesn't read its replies holds a connection slot
            // and its buffers: it gets the read timeout to take them.
            let timeout = self.state.connections.read_timeout;
            let rest = &self.out[written..];
            let stream = &mut self.stream;
            let send = async move {
                stream.write_all(rest).await?;
                stream.flush().await
            };
            tokio::time::timeout(timeout, send).await.map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("replies not read within {timeout:?} (server.read_timeout)"),
                )
            })??;
        }
        self.out.clear();
        Ok(())
    }

    /// Answers every whole request in `input` into `out`, and drops them
    /// from `input`.
    async fn answer_buffered(&mut self) -> std::io::Result<Flow> {
        let mut consumed = 0;
        let mut flow = Flow::Continue;
        while flow == Flow::Continue {
            let mut args = std::mem::take(&mut self.args);
            let parsed = frame::parse_request(&self.input[consumed..], &LIMITS, &mut args);
            match parsed {
                Ok(Some(n)) => {
                    let request = consumed..consumed + n;
                    consumed += n;
                    if !args.is_empty() {
                        self.n_commands += 1;
                        flow = self.answer(request.start, &args).await;
                    }
                    self.args = args;
                }
                Ok(None) => {
                    self.args = args;
                    break;
                }
                Err(e) => {
                    self.args = args;
                    tracing::debug!(peer = %self.peer, error = %e, "RESP protocol error; closing");
                    frame::error(&mut self.out, "ERR", &format!("Protocol error: {e}"));
                    flow = Flow::Close;
                }
            }
            if self.out.len() >= FLUSH_AT {
                self.write_out().await?;
            }
        }
        self.input.drain(..consumed);
        Ok(flow)
    }

    /// Answers one request whose arguments are `args`, ranges of `input`
    /// relative to `base`.
    async fn answer(&mut self, base: usize, args: &[Range<usize>]) -> Flow {
        let input = std::mem::take(&mut self.input);
        // One test of a field when no transaction is open: `MULTI` costs the
        // hot path nothing more.
        let flow = if self.multi.is_none() {
            self.execute(&input, base, args).await
        } else {
            Box::pin(self.queue(&input, base, args)).await
        };
        self.input = input;
        flow
    }
}

fn wrong_arity(name: &[u8]) -> String {
    format!(
        "wrong number of arguments for '{}' command",
        shown(name).to_ascii_lowercase()
    )
}

/// Client bytes fit for an error message: lossy UTF-8, at most 64
/// characters, control characters escaped.
fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(256)]);
    let mut out: String = text
        .chars()
        .take(64)
        .flat_map(|c| {
            if c.is_control() || c == '\'' {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    if text.chars().count() > 64 || bytes.len() > 256 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::commands::{Command, command};
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    #[test]
    fn command_names_are_case_insensitive() {
        assert_eq!(command(b"incr"), Command::Incr);
        assert_eq!(command(b"IdMint.Batch"), Command::Batch);
        assert_eq!(command(b"IncrBy"), Command::IncrBy);
        assert_eq!(command(b"INCRBYFLOAT"), Command::Unknown);
        assert_eq!(command(b""), Command::Unknown);
    }

    /// A whole server on free loopback ports, `keys` configured, in a
    /// temporary directory; stops when the sender is dropped.
    struct Served {
        resp: SocketAddr,
        _stop: tokio::sync::oneshot::Sender<()>,
        _dir: tempfile::TempDir,
    }

    async fn served(keys: &str) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idmint.toml");
        let data = dir.path().join("data");
        std::fs::write(
            &path,
            format!(
                "[server]\nhttp_addr = \"127.0.0.1:0\"\nresp_addr = \"127.0.0.1:0\"\n\
                 data_dir = {data:?}\n{keys}"
            ),
        )
        .unwrap();
        let config = idmint_node::config::Config::load(Some(&path), []).unwrap();
        let server = crate::start::Server::start(config).await.unwrap();
        let resp = server.resp_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(async move {
            let _ = stopped.await;
        }));
        Served {
            resp,
            _stop: stop,
            _dir: dir,
        }
    }

    /// Sends inline `requests` and returns the replies, up to a final
    /// `PING` marker's (left out).
    async fn exchange(s: &mut TcpStream, requests: &str) -> String {
        const MARK: &str = "$4\r\nmark\r\n";
        s.write_all(format!("{requests}PING mark\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = Vec::new();
        while !out.ends_with(MARK.as_bytes()) {
            let n = tokio::time::timeout(Duration::from_secs(30), s.read_buf(&mut out))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&out));
        }
        out.truncate(out.len() - MARK.len());
        String::from_utf8(out).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn new_commands_answer_as_resp2_or_resp3() {
        let server =
            served("[segment.keys.order]\nstep = 10\n\n[keys.sf]\nstrategy = \"snowflake\"\n")
                .await;
        // (request, RESP2 reply, RESP3 reply); `#` stands for the next ID.
        let cases: &[(&str, &str, &str)] = &[
            ("CLIENT GETNAME", "$-1\r\n", "_\r\n"),
            (
                "CLIENT SETNAME a b",
                "-ERR unknown subcommand or wrong number of arguments for 'client|setname'",
                "-ERR unknown subcommand or wrong number of arguments for 'client|setname'",
            ),
            (
                "CONFIG GET save",
                "*2\r\n$4\r\nsave\r\n$0\r\n\r\n",
                "%1\r\n$4\r\nsave\r\n$0\r\n\r\n",
            ),
            ("CONFIG GET nosuch", "*0\r\n", "%0\r\n"),
            ("INFO nosuch", "$0\r\n\r\n", "=4\r\ntxt:\r\n"),
            ("COMMAND INFO nosuch", "*1\r\n*-1\r\n", "*1\r\n_\r\n"),
            ("COMMAND COUNT", ":20\r\n", ":20\r\n"),
            (
                "COMMAND LIST",
                "*20\r\n$4\r\nincr\r\n",
                "*20\r\n$4\r\nincr\r\n",
            ),
            (
                "COMMAND DOCS get",
                "*2\r\n$3\r\nget\r\n*8\r\n",
                "%1\r\n$3\r\nget\r\n%4\r\n",
            ),
            ("INCR order", ":#\r\n", ":#\r\n"),
            ("INCRBY order 5", ":#+4\r\n", ":#+4\r\n"),
            ("INCRBY order 0", "-INVALID_COUNT ", "-INVALID_COUNT "),
            ("INCRBY sf 2", "-NOT_CONTIGUOUS ", "-NOT_CONTIGUOUS "),
            (
                "MULTI\r\nINCR order\r\nEXEC",
                "+OK\r\n+QUEUED\r\n*1\r\n:#\r\n",
                "+OK\r\n+QUEUED\r\n*1\r\n:#\r\n",
            ),
            (
                "EXEC",
                "-ERR EXEC without MULTI\r\n",
                "-ERR EXEC without MULTI\r\n",
            ),
            ("UNWATCH", "+OK\r\n", "+OK\r\n"),
            ("SELECT 0", "+OK\r\n", "+OK\r\n"),
        ];
        let mut s = TcpStream::connect(server.resp).await.unwrap();
        let mut next = 1;
        for proto in [2, 3] {
            let hello = exchange(&mut s, &format!("HELLO {proto}\r\n")).await;
            let map = if proto == 2 { "*14\r\n" } else { "%7\r\n" };
            assert!(hello.starts_with(map), "{hello:?}");
            assert!(hello.contains(&format!("$5\r\nproto\r\n:{proto}\r\n")));
            for (request, resp2, resp3) in cases {
                let expected = if proto == 2 { resp2 } else { resp3 };
                let (expected, used) = if expected.contains("#+4") {
                    (expected.replace("#+4", &(next + 4).to_string()), 5)
                } else if expected.contains('#') {
                    (expected.replace('#', &next.to_string()), 1)
                } else {
                    ((*expected).to_owned(), 0)
                };
                let reply = exchange(&mut s, &format!("{request}\r\n")).await;
                assert!(
                    reply.starts_with(&expected),
                    "RESP{proto} {request}: {reply:?}, expected {expected:?}"
                );
                next += used;
            }
        }
        // RESET: back to RESP2.
        assert_eq!(
            exchange(&mut s, "HELLO 3\r\nRESET\r\n")
                .await
                .rsplit("\r\n+")
                .next(),
            Some("RESET\r\n")
        );
        assert_eq!(exchange(&mut s, "CLIENT GETNAME\r\n").await, "$-1\r\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_transaction_issues_nothing_until_exec_and_nothing_when_refused() {
        let server = served("[segment.keys.order]\nstep = 10\n").await;
        let mut s = TcpStream::connect(server.resp).await.unwrap();
        assert_eq!(exchange(&mut s, "INCR order\r\n").await, ":1\r\n");
        assert_eq!(
            exchange(
                &mut s,
                "MULTI\r\nINCR order\r\nIDMINT.BATCH order 2\r\nDISCARD\r\n"
            )
            .await,
            "+OK\r\n+QUEUED\r\n+QUEUED\r\n+OK\r\n"
        );
        assert_eq!(
            exchange(&mut s, "MULTI\r\nINCR order\r\nINCRBY order x\r\nEXEC\r\n").await,
            "+OK\r\n+QUEUED\r\n-INVALID_COUNT count \"x\" is not a whole number: ask for \
             1..=100000 IDs\r\n-EXECABORT Transaction discarded because of previous errors.\r\n"
        );
        assert_eq!(
            exchange(
                &mut s,
                "MULTI\r\nINCR order\r\nINCRBY order 3\r\nPING\r\nEXEC\r\n"
            )
            .await,
            "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n:2\r\n:5\r\n+PONG\r\n"
        );
        assert_eq!(exchange(&mut s, "INCR order\r\n").await, ":6\r\n");
    }

    #[test]
    fn shown_is_short_and_one_line() {
        assert_eq!(shown(b"foo"), "foo");
        assert_eq!(shown(b"a\r\nb"), "a\\r\\nb");
        assert_eq!(shown(b"it's"), "it\\'s");
        let long = shown(&[b'x'; 1000]);
        assert!(long.len() == 67 && long.ends_with("..."), "{long}");
        assert_eq!(shown(&[0xff, b'a']), "\u{fffd}a");
    }
}
