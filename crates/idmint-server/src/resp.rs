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

mod commands;
mod frame;

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Strategy;
use crate::error::{ErrorClass, IssueError};
use crate::issue::{self, Issued};
use crate::keys::KeySpec;
use crate::listen::{Bound, stopped};
use crate::metrics::IssuedCounter;
use crate::state::AppState;
use crate::tls::{self, MaybeTls, Surface};
use commands::{Command, command};
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
    if let Err(e) = done {
        if e.is_panic() {
            tracing::error!(error = %e, "RESP connection task panicked");
        }
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

    /// Runs one request whose arguments are `args`, ranges of `input`
    /// relative to `base`.
    async fn execute(&mut self, input: &[u8], base: usize, args: &[Range<usize>]) -> Flow {
        let arg = |i: usize| -> &[u8] {
            args.get(i)
                .and_then(|r| input.get(base + r.start..base + r.end))
                .unwrap_or_default()
        };
        let n_args = args.len();
        let name = arg(0);
        match command(name) {
            Command::Incr | Command::Get if n_args == 2 => {
                self.issue(arg(1), None).await;
            }
            Command::Batch if n_args == 3 => {
                self.issue(arg(1), Some(arg(2))).await;
            }
            Command::IncrBy if n_args == 3 => {
                // Boxed: its future is larger than INCR's, which shouldn't
                // pay for it.
                Box::pin(self.incr_by(arg(1), arg(2))).await;
            }
            Command::Auth if n_args == 2 || n_args == 3 => match self.auth(arg(n_args - 1)) {
                Ok(()) => frame::simple(&mut self.out, "OK"),
                Err((code, message)) => frame::error(&mut self.out, code, message),
            },
            Command::Ping if n_args <= 2 => match n_args {
                1 => frame::simple(&mut self.out, "PONG"),
                _ => frame::bulk(&mut self.out, arg(1)),
            },
            Command::Echo if n_args == 2 => frame::bulk(&mut self.out, arg(1)),
            Command::Info => {
                let sections: Vec<&[u8]> = (1..n_args).map(arg).collect();
                let info = self.info(&sections);
                frame::verbatim(&mut self.out, info.as_bytes(), self.proto);
            }
            Command::Quit => {
                frame::simple(&mut self.out, "OK");
                return Flow::Close;
            }
            Command::Hello => {
                let options: Vec<&[u8]> = (1..n_args).map(arg).collect();
                self.hello(&options);
            }
            Command::Client if n_args >= 2 => {
                let rest: Vec<&[u8]> = (2..n_args).map(arg).collect();
                self.client(arg(1), &rest);
            }
            Command::Select if n_args == 2 => {
                if arg(1) == b"0" {
                    frame::simple(&mut self.out, "OK");
                } else {
                    frame::error(&mut self.out, "ERR", "DB index is out of range");
                }
            }
            Command::Commands => {
                let sub = arg(1);
                let names: Vec<&[u8]> = (2..n_args).map(arg).collect();
                if n_args == 1 {
                    commands::write_all_info(&mut self.out, self.proto);
                } else if sub.eq_ignore_ascii_case(b"COUNT") && n_args == 2 {
                    frame::integer(&mut self.out, commands::SPECS.len() as i64);
                } else if sub.eq_ignore_ascii_case(b"INFO") && names.is_empty() {
                    // Redis 7: no names, every command.
                    commands::write_all_info(&mut self.out, self.proto);
                } else if sub.eq_ignore_ascii_case(b"INFO") {
                    commands::write_info(&mut self.out, names.into_iter(), self.proto);
                } else if sub.eq_ignore_ascii_case(b"DOCS") {
                    commands::write_docs(&mut self.out, &names, self.proto);
                } else if sub.eq_ignore_ascii_case(b"LIST") && n_args == 2 {
                    commands::write_list(&mut self.out);
                } else {
                    let message = format!(
                        "unknown subcommand or wrong number of arguments for '{}': \
                         COMMAND serves COUNT, INFO, DOCS and LIST",
                        shown(sub)
                    );
                    frame::error(&mut self.out, "ERR", &message);
                }
            }
            Command::Config if n_args == 3 && arg(1).eq_ignore_ascii_case(b"GET") => {
                // `redis-benchmark` asks for `save` and `appendonly` at start.
                let param = arg(2);
                let value: Option<(&[u8], &[u8])> = if param.eq_ignore_ascii_case(b"save") {
                    Some((b"save", b""))
                } else if param.eq_ignore_ascii_case(b"appendonly") {
                    Some((b"appendonly", b"no"))
                } else {
                    None
                };
                frame::map(&mut self.out, usize::from(value.is_some()), self.proto);
                if let Some((name, value)) = value {
                    frame::bulk(&mut self.out, name);
                    frame::bulk(&mut self.out, value);
                }
            }
            Command::Config => {
                let message = format!(
                    "unknown subcommand or wrong number of arguments for '{}': only CONFIG GET is served",
                    shown(arg(1))
                );
                frame::error(&mut self.out, "ERR", &message);
            }
            Command::Multi if n_args == 1 => {
                self.multi = Some(Box::default());
                frame::simple(&mut self.out, "OK");
            }
            Command::Exec if n_args == 1 => {
                frame::error(&mut self.out, "ERR", "EXEC without MULTI");
            }
            Command::Discard if n_args == 1 => {
                frame::error(&mut self.out, "ERR", "DISCARD without MULTI");
            }
            Command::Watch if n_args >= 2 => frame::error(&mut self.out, "ERR", WATCH_REFUSED),
            Command::Unwatch if n_args == 1 => frame::simple(&mut self.out, "OK"),
            Command::Reset if n_args == 1 => {
                self.reset();
                frame::simple(&mut self.out, "RESET");
            }
            Command::Unknown => {
                let message = format!("unknown command '{}'", shown(name));
                frame::error(&mut self.out, "ERR", &message);
            }
            _ => {
                let message = wrong_arity(name);
                frame::error(&mut self.out, "ERR", &message);
            }
        }
        Flow::Continue
    }

    /// A request while a transaction is open: `EXEC`, `DISCARD`, `QUIT` and
    /// `RESET` run at once; anything else is checked and queued (`+QUEUED`),
    /// or refused, which makes `EXEC` refuse the whole transaction.
    async fn queue(&mut self, input: &[u8], base: usize, args: &[Range<usize>]) -> Flow {
        let arg = |i: usize| -> &[u8] {
            args.get(i)
                .and_then(|r| input.get(base + r.start..base + r.end))
                .unwrap_or_default()
        };
        let name = arg(0);
        let cmd = command(name);
        match cmd {
            Command::Exec if args.len() == 1 => return self.exec().await,
            Command::Discard if args.len() == 1 => {
                // Nothing queued ran, so nothing was issued.
                self.multi = None;
                frame::simple(&mut self.out, "OK");
                return Flow::Continue;
            }
            Command::Quit | Command::Reset => return self.execute(input, base, args).await,
            Command::Multi => {
                frame::error(&mut self.out, "ERR", "MULTI calls can not be nested");
                return Flow::Continue;
            }
            Command::Watch => {
                frame::error(&mut self.out, "ERR", "WATCH inside MULTI is not allowed");
                return Flow::Continue;
            }
            _ => {}
        }
        let values: Vec<&[u8]> = (0..args.len()).map(arg).collect();
        match self.check_queued(cmd, &values) {
            Ok(()) => {
                let start = args.first().map_or(0, |r| r.start);
                let end = args.last().map_or(0, |r| r.end);
                let bytes = input[base + start..base + end].to_vec();
                let ranges = args
                    .iter()
                    .map(|r| r.start - start..r.end - start)
                    .collect();
                let Some(multi) = &mut self.multi else {
                    return Flow::Continue;
                };
                if multi.bytes + bytes.len() > MAX_QUEUED_BYTES {
                    multi.failed = true;
                    let message = format!(
                        "transaction too large: at most {MAX_QUEUED_BYTES} bytes of queued \
                         commands; EXEC will refuse it"
                    );
                    frame::error(&mut self.out, "ERR", &message);
                } else {
                    multi.bytes += bytes.len();
                    multi.queued.push((bytes, ranges));
                    frame::simple(&mut self.out, "QUEUED");
                }
            }
            Err((code, message)) => {
                if let Some(multi) = &mut self.multi {
                    multi.failed = true;
                }
                frame::error(&mut self.out, &code, &message);
            }
        }
        Flow::Continue
    }

    /// What `EXEC` would refuse to run, checked when a command is queued: an
    /// unknown command, a wrong arity, and for the issuing commands a bad
    /// key, a key that needs `AUTH`, a bad count, or `INCRBY` of a key that
    /// can't answer it. So a transaction either runs every command or none
    /// (what can still fail at `EXEC` is the store or the clock).
    fn check_queued(&self, cmd: Command, args: &[&[u8]]) -> Result<(), (String, String)> {
        let name = args.first().copied().unwrap_or_default();
        let Some(spec) = commands::spec(cmd) else {
            return Err(("ERR".into(), format!("unknown command '{}'", shown(name))));
        };
        if !spec.arity_fits(args.len()) {
            return Err(("ERR".into(), wrong_arity(name)));
        }
        let issue_error = |e: IssueError| (e.code.to_ascii_uppercase(), e.message);
        match cmd {
            Command::Incr | Command::Get | Command::Batch | Command::IncrBy => {
                let key =
                    checked_key(&self.state, &self.authorized, args[1]).map_err(issue_error)?;
                if cmd == Command::Batch {
                    let text = String::from_utf8_lossy(args[2]);
                    issue::parse_count(&text, self.state.max_count).map_err(issue_error)?;
                } else if cmd == Command::IncrBy {
                    let n = incr_by_count(args[2], self.state.max_count).map_err(issue_error)?;
                    if n > 1 {
                        incr_by_fits(key, self.state.spec(key)).map_err(issue_error)?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `EXEC`: every queued command's reply, in one array; or `-EXECABORT`
    /// when one failed to queue (nothing runs, nothing is issued).
    async fn exec(&mut self) -> Flow {
        let Some(multi) = self.multi.take() else {
            return Flow::Continue;
        };
        if multi.failed {
            frame::error(
                &mut self.out,
                "EXECABORT",
                "Transaction discarded because of previous errors.",
            );
            return Flow::Continue;
        }
        frame::array(&mut self.out, multi.queued.len());
        for (bytes, ranges) in &multi.queued {
            // QUIT, MULTI, EXEC are never queued: every command continues.
            self.execute(bytes, 0, ranges).await;
            // A transaction of large batches is written as it runs, as a
            // pipeline is; and when the client is gone, the rest isn't run,
            // so no more IDs are issued that no one will read.
            if self.out.len() >= FLUSH_AT
                && let Err(e) = self.write_out().await
            {
                tracing::debug!(peer = %self.peer, error = %e, "RESP write failed during EXEC");
                return Flow::Close;
            }
        }
        Flow::Continue
    }

    /// `RESET`: the connection as it was new: RESP2, no transaction, no keys
    /// unlocked, no name.
    fn reset(&mut self) {
        self.multi = None;
        self.proto = Proto::Resp2;
        self.authorized.clear();
        // It holds a key that passed the token check.
        self.last_key = None;
        self.name = None;
    }

    /// `INCR`/`GET` (`count` None: one ID, not in an array) and `IDMINT.BATCH`.
    async fn issue(&mut self, key: &[u8], count: Option<&[u8]>) {
        let mark = self.out.len();
        match self.try_issue(key, count).await {
            Ok(n) => self.n_ids += n,
            Err(e) => {
                // Nothing half written: an array header without its elements.
                self.out.truncate(mark);
                frame::error(&mut self.out, &e.code.to_ascii_uppercase(), &e.message);
            }
        }
    }

    async fn try_issue(&mut self, key: &[u8], count: Option<&[u8]>) -> Result<u64, IssueError> {
        let last = match &mut self.last_key {
            Some(last) if last.key.as_bytes() == key => last,
            slot => slot.insert(resolve(&self.state, &self.authorized, key)?),
        };
        let n = match count {
            None => 1,
            Some(text) => {
                let text = String::from_utf8_lossy(text);
                issue::parse_count(&text, self.state.max_count)?
            }
        };
        let issued = issue::issue_uncounted(&self.state, &last.key, last.spec, n).await?;
        last.pending += issued.len() as u64;
        if count.is_some() {
            frame::array(&mut self.out, issued.len());
        }
        let n_issued = issued.len() as u64;
        match issued {
            Issued::Ints { values, public } => {
                let as_integers = !public || issue::public_ids_are_decimal(&self.state);
                for value in values {
                    match i64::try_from(value) {
                        Ok(v) if as_integers => frame::integer(&mut self.out, v),
                        _ => {
                            let text = issue::text_of(&self.state, value, public)?;
                            frame::bulk(&mut self.out, text.as_bytes());
                        }
                    }
                }
            }
            Issued::Uuids(values) => {
                for value in values {
                    frame::bulk(&mut self.out, issue::uuid_text(value).as_bytes());
                }
            }
        }
        Ok(n_issued)
    }

    /// `INCRBY key n`: see the module docs.
    async fn incr_by(&mut self, key: &[u8], count: &[u8]) {
        // `INCRBY key 1` is `INCR key` for every strategy (redis-py's
        // `incr()` sends it): a run of one ID is always contiguous.
        let n = match incr_by_count(count, self.state.max_count) {
            Ok(1) => return self.issue(key, None).await,
            Ok(n) => n,
            Err(e) => {
                return frame::error(&mut self.out, &e.code.to_ascii_uppercase(), &e.message);
            }
        };
        match self.try_incr_by(key, n).await {
            Ok(n) => self.n_ids += n,
            Err(e) => frame::error(&mut self.out, &e.code.to_ascii_uppercase(), &e.message),
        }
    }

    /// `INCRBY key n` for `n` > 1.
    async fn try_incr_by(&mut self, key: &[u8], n: u64) -> Result<u64, IssueError> {
        let last = match &mut self.last_key {
            Some(last) if last.key.as_bytes() == key => last,
            slot => slot.insert(resolve(&self.state, &self.authorized, key)?),
        };
        incr_by_fits(&last.key, last.spec)?;
        let mut made = 0;
        for _ in 0..INCRBY_TRIES {
            let issued = issue::issue_uncounted(&self.state, &last.key, last.spec, n).await?;
            let Issued::Ints { values, .. } = issued else {
                return Err(IssueError::internal("a segment key answered UUIDs"));
            };
            last.pending += n;
            made += n;
            // The key's stride, once its segments are leased: 1 but for
            // keys with a `delta`.
            let delta = self.state.segments.key(&last.key).await?.status().delta;
            if values.windows(2).all(|w| w[1] == w[0] + delta) {
                let last_id = values.last().copied().unwrap_or_default();
                let last_id = i64::try_from(last_id)
                    .map_err(|_| IssueError::internal(format!("ID {last_id} passes 2^63")))?;
                frame::integer(&mut self.out, last_id);
                return Ok(made);
            }
            // The run crossed into a segment that doesn't follow the last
            // (another node leased the numbers between): a client reading
            // `last - n + 1 ..= last` would take IDs that aren't its own.
            // These are dropped, a gap that is never issued, and the run is
            // taken again, from one segment this time (leases are sized for
            // the run).
            tracing::warn!(key = %last.key, n, first = values.first().copied().unwrap_or_default(),
                last = values.last().copied().unwrap_or_default(),
                "INCRBY run not contiguous across segments; dropped and taken again");
        }
        Err(IssueError::unavailable(
            "not_contiguous",
            format!(
                "INCRBY {} {n}: no contiguous run of {n} IDs in {INCRBY_TRIES} tries \
                 (other nodes lease the key's segments in between); retry, or ask \
                 IDMINT.BATCH for the IDs themselves",
                last.key
            ),
            Duration::from_millis(100),
        ))
    }

    /// `AUTH [user] token`: unlocks the keys whose token this is. An error is
    /// (code, message).
    fn auth(&mut self, token: &[u8]) -> Result<(), (&'static str, &'static str)> {
        if self.state.key_tokens.is_empty() {
            return Err((
                "ERR",
                "AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            ));
        }
        let keys = self.state.keys_with_token(token);
        if keys.is_empty() {
            return Err((
                "WRONGPASS",
                "invalid username-password pair or user is disabled.",
            ));
        }
        for key in keys {
            if !self.authorized.contains(&key) {
                self.authorized.push(key);
            }
        }
        Ok(())
    }

    /// `INFO [section ...]`: the named sections (`server`, `idmint`,
    /// `stats`), all of them for none or `default`, `all`, `everything`;
    /// unknown names add nothing.
    fn info(&self, sections: &[&[u8]]) -> String {
        let wants = |section: &str| info_wants(sections, section);
        let stats = &self.stats;
        let mut info = String::new();
        if wants("server") {
            info += &format!(
                "# Server\r\n\
                 idmint_version:{version}\r\n\
                 resp_protocols:2,3\r\n\
                 process_id:{pid}\r\n\
                 tcp_port:{port}\r\n\
                 uptime_in_seconds:{uptime}\r\n",
                version = env!("CARGO_PKG_VERSION"),
                pid = std::process::id(),
                port = stats.addr.port(),
                uptime = stats.started.elapsed().as_secs(),
            );
        }
        if wants("idmint") {
            let status = self.state.worker.status();
            if !info.is_empty() {
                info += "\r\n";
            }
            info += &format!(
                "# Idmint\r\n\
                 registry:{registry}\r\n\
                 worker:{worker}\r\n\
                 lease:{lease}\r\n\
                 layout:{layout}\r\n\
                 max_count:{max_count}\r\n",
                registry = status.registry,
                worker = status.worker,
                lease = status.lease.name(),
                layout = self.state.layout_text,
                max_count = self.state.max_count,
            );
        }
        if wants("stats") {
            if !info.is_empty() {
                info += "\r\n";
            }
            info += &format!(
                "# Stats\r\n\
                 connected_clients:{open}\r\n\
                 total_connections_received:{total}\r\n\
                 total_commands_processed:{commands}\r\n\
                 ids_issued:{ids}\r\n",
                open = stats.connections_open.load(Ordering::Relaxed),
                total = stats.connections_total.load(Ordering::Relaxed),
                // This read's own commands and IDs are added after it.
                commands = stats.commands.load(Ordering::Relaxed) + self.n_commands,
                ids = stats.ids_issued.load(Ordering::Relaxed) + self.n_ids,
            );
        }
        info
    }

    /// `HELLO [protover [AUTH user password] [SETNAME name]]`: switches to
    /// RESP2 or RESP3 and answers the server's facts (a map in RESP3). A
    /// failing option changes nothing.
    fn hello(&mut self, options: &[&[u8]]) {
        let Hello { proto, token, name } = match parse_hello(options, self.proto) {
            Ok(hello) => hello,
            Err((code, message)) => return frame::error(&mut self.out, code, &message),
        };
        if let Some(token) = token
            && let Err((code, message)) = self.auth(token)
        {
            return frame::error(&mut self.out, code, message);
        }
        if let Some(name) = name {
            self.name = (!name.is_empty()).then(|| name.to_vec());
        }
        self.proto = proto;
        let version = env!("CARGO_PKG_VERSION").as_bytes();
        let fields: [(&[u8], &[u8]); 7] = [
            (b"server", b"idmint"),
            (b"version", version),
            (b"proto", b""),
            (b"id", b""),
            (b"mode", b"standalone"),
            (b"role", b"master"),
            (b"modules", b""),
        ];
        frame::map(&mut self.out, fields.len(), proto);
        for (field, value) in fields {
            frame::bulk(&mut self.out, field);
            match field {
                b"proto" => frame::integer(&mut self.out, proto.number()),
                b"id" => frame::integer(&mut self.out, self.id),
                b"modules" => frame::array(&mut self.out, 0),
                _ => frame::bulk(&mut self.out, value),
            }
        }
    }

    /// `CLIENT SETNAME|GETNAME|SETINFO|ID|INFO`: what clients send at
    /// connect; `TRACKING` and `CACHING` are refused with why.
    fn client(&mut self, sub: &[u8], rest: &[&[u8]]) {
        let is = |name: &[u8]| sub.eq_ignore_ascii_case(name);
        if is(b"SETNAME") && rest.len() == 1 {
            if valid_client_name(rest[0]) {
                self.name = (!rest[0].is_empty()).then(|| rest[0].to_vec());
                frame::simple(&mut self.out, "OK");
            } else {
                frame::error(&mut self.out, "ERR", BAD_CLIENT_NAME);
            }
        } else if is(b"GETNAME") && rest.is_empty() {
            match &self.name {
                Some(name) => frame::bulk(&mut self.out, name),
                None => frame::null(&mut self.out, self.proto),
            }
        } else if is(b"SETINFO") && rest.len() == 2 {
            let attr = rest[0];
            if !attr.eq_ignore_ascii_case(b"lib-name") && !attr.eq_ignore_ascii_case(b"lib-ver") {
                let message = format!("Unrecognized option '{}'", shown(attr));
                frame::error(&mut self.out, "ERR", &message);
            } else if !valid_client_name(rest[1]) {
                let message = format!(
                    "{} cannot contain spaces, newlines or special characters.",
                    shown(attr).to_ascii_lowercase()
                );
                frame::error(&mut self.out, "ERR", &message);
            } else {
                let value = (!rest[1].is_empty()).then(|| rest[1].to_vec());
                if attr.eq_ignore_ascii_case(b"lib-name") {
                    self.lib.0 = value;
                } else {
                    self.lib.1 = value;
                }
                frame::simple(&mut self.out, "OK");
            }
        } else if is(b"ID") && rest.is_empty() {
            frame::integer(&mut self.out, self.id);
        } else if is(b"INFO") && rest.is_empty() {
            let info = self.client_info();
            frame::verbatim(&mut self.out, info.as_bytes(), self.proto);
        } else if is(b"TRACKING") || is(b"CACHING") {
            frame::error(
                &mut self.out,
                "ERR",
                "client-side caching is not supported: idmint keys have no value to cache, \
                 every read issues a new ID",
            );
        } else {
            let message = format!(
                "unknown subcommand or wrong number of arguments for 'client|{}': \
                 CLIENT serves SETNAME, GETNAME, SETINFO, ID and INFO",
                shown(sub).to_ascii_lowercase()
            );
            frame::error(&mut self.out, "ERR", &message);
        }
    }

    /// `CLIENT INFO`: Redis's fields that mean something here, one line.
    fn client_info(&self) -> String {
        let text = |value: &Option<Vec<u8>>| {
            value
                .as_deref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        format!(
            "id={id} addr={addr} name={name} age={age} db=0 multi={multi} resp={resp} \
             lib-name={lib_name} lib-ver={lib_ver}\n",
            id = self.id,
            addr = self.peer,
            name = text(&self.name),
            age = self.opened.elapsed().as_secs(),
            multi = self.multi.as_ref().map_or(-1, |m| m.queued.len() as i64),
            resp = self.proto.number(),
            lib_name = text(&self.lib.0),
            lib_ver = text(&self.lib.1),
        )
    }
}

/// A `HELLO`'s options.
#[derive(Debug, PartialEq, Eq)]
struct Hello<'a> {
    proto: Proto,
    /// `AUTH user password`'s password: a key's token.
    token: Option<&'a [u8]>,
    /// `SETNAME name`, checked.
    name: Option<&'a [u8]>,
}

/// Parses `HELLO`'s options (`protover [AUTH user password] [SETNAME name]`);
/// `current` is the protocol when no version is given. An error is (code,
/// message), as Redis words them.
fn parse_hello<'a>(
    options: &[&'a [u8]],
    current: Proto,
) -> Result<Hello<'a>, (&'static str, String)> {
    let mut hello = Hello {
        proto: current,
        token: None,
        name: None,
    };
    if let Some(&version) = options.first() {
        hello.proto = match version {
            b"2" => Proto::Resp2,
            b"3" => Proto::Resp3,
            v if !v.is_empty() && v.len() < 20 && v.iter().all(u8::is_ascii_digit) => {
                return Err((
                    "NOPROTO",
                    format!(
                        "unsupported protocol version {}: this server speaks 2 and 3",
                        shown(v)
                    ),
                ));
            }
            _ => {
                return Err((
                    "ERR",
                    "Protocol version is not an integer or out of range".to_owned(),
                ));
            }
        };
    }
    let mut at = 1;
    while at < options.len() {
        let option = options[at];
        let left = options.len() - at - 1;
        if option.eq_ignore_ascii_case(b"AUTH") && left >= 2 {
            hello.token = Some(options[at + 2]);
            at += 3;
        } else if option.eq_ignore_ascii_case(b"SETNAME") && left >= 1 {
            hello.name = Some(options[at + 1]);
            at += 2;
        } else {
            return Err((
                "ERR",
                format!("Syntax error in HELLO option '{}'", shown(option)),
            ));
        }
    }
    if hello.name.is_some_and(|name| !valid_client_name(name)) {
        return Err(("ERR", BAD_CLIENT_NAME.to_owned()));
    }
    Ok(hello)
}

/// Whether `INFO` with the `asked` sections shows `section`: every section
/// for none, `default`, `all` or `everything`; names in any case.
fn info_wants(asked: &[&[u8]], section: &str) -> bool {
    asked.is_empty()
        || asked.iter().any(|asked| {
            [section, "default", "all", "everything"]
                .iter()
                .any(|name| name.as_bytes().eq_ignore_ascii_case(asked))
        })
}

/// Tries of an `INCRBY` run before answering unavailable: a retry takes the
/// run from one segment unless another node leases in between again.
const INCRBY_TRIES: u32 = 3;

const WATCH_REFUSED: &str = "WATCH is not supported: every read of an idmint key issues a new ID, \
     so there is no value to watch; use MULTI/EXEC without WATCH";

const BAD_CLIENT_NAME: &str = "Client names cannot contain spaces, newlines or special characters.";

/// Redis's rule: printable ASCII, no spaces.
fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|b| (b'!'..=b'~').contains(b))
}

fn wrong_arity(name: &[u8]) -> String {
    format!(
        "wrong number of arguments for '{}' command",
        shown(name).to_ascii_lowercase()
    )
}

/// `INCRBY`'s count: a whole number from 1 to `max` (`server.max_count`).
fn incr_by_count(text: &[u8], max: u64) -> Result<u64, IssueError> {
    let text = String::from_utf8_lossy(text);
    if let Some(digits) = text.strip_prefix('-')
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(IssueError::bad_input(
            "invalid_count",
            format!("INCRBY count {text} is negative: ask for 1..={max} IDs (server.max_count)"),
        ));
    }
    issue::parse_count(&text, max)
}

/// Whether `INCRBY` of more than one ID can answer for `key`: only a segment
/// key hands out IDs as one run a client can count back from the last; a
/// public key's IDs are obfuscated, snowflake and UUID IDs aren't
/// consecutive.
fn incr_by_fits(key: &str, spec: KeySpec) -> Result<(), IssueError> {
    let why = match spec.strategy {
        Strategy::Segment if !spec.public => return Ok(()),
        Strategy::Segment => "is public: its IDs are obfuscated, not one run".to_owned(),
        other => format!(
            "is a {} key: its IDs are not one contiguous run",
            other.name()
        ),
    };
    Err(IssueError::bad_input(
        "not_contiguous",
        format!(
            "INCRBY needs a segment key and key {key:?} {why}; \
             ask IDMINT.BATCH {key} <n> for its next IDs"
        ),
    ))
}

/// Checks `key` and its token (`authorized`: the keys AUTH unlocked).
fn checked_key<'k>(
    state: &AppState,
    authorized: &[String],
    key: &'k [u8],
) -> Result<&'k str, IssueError> {
    let key = std::str::from_utf8(key).map_err(|_| {
        IssueError::bad_input("invalid_key", format!("key {:?} is not UTF-8", shown(key)))
    })?;
    issue::check_key(key)?;
    if state.token_for(key).is_some() && !authorized.iter().any(|k| k == key) {
        return Err(IssueError::new(
            ErrorClass::Unauthorized,
            "noauth",
            format!("Authentication required: key {key:?} needs AUTH <token> first"),
        ));
    }
    Ok(key)
}

/// Checks `key` and its token (`authorized`: the keys AUTH unlocked), and
/// looks up what issuing for it needs.
fn resolve(state: &AppState, authorized: &[String], key: &[u8]) -> Result<LastKey, IssueError> {
    let key = checked_key(state, authorized, key)?;
    let spec = state.spec(key);
    Ok(LastKey {
        key: key.to_owned(),
        spec,
        counter: state.issued_counter(key, spec.strategy),
        pending: 0,
    })
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

    #[test]
    fn hello_takes_a_version_auth_and_setname() {
        fn parse(text: &str) -> Result<Hello<'_>, (&'static str, String)> {
            let options: Vec<&[u8]> = text.split(' ').skip(1).map(str::as_bytes).collect();
            parse_hello(&options, Proto::Resp2)
        }
        assert_eq!(parse("HELLO").unwrap().proto, Proto::Resp2);
        assert_eq!(
            parse_hello(&[], Proto::Resp3).unwrap().proto,
            Proto::Resp3,
            "no version keeps the protocol"
        );
        let hello = parse("HELLO 3 AUTH default tok SETNAME app").unwrap();
        assert_eq!(
            hello,
            Hello {
                proto: Proto::Resp3,
                token: Some(b"tok"),
                name: Some(b"app"),
            }
        );
        let hello = parse("HELLO 2 setname app auth u t").unwrap();
        assert_eq!((hello.proto, hello.token), (Proto::Resp2, Some(&b"t"[..])));
        assert_eq!(parse("HELLO 4").unwrap_err().0, "NOPROTO");
        assert_eq!(parse("HELLO 99999999999999999999999").unwrap_err().0, "ERR");
        assert_eq!(
            parse("HELLO three").unwrap_err().1,
            "Protocol version is not an integer or out of range"
        );
        for bad in ["HELLO 3 AUTH u", "HELLO 3 SETNAME", "HELLO 3 FOO bar"] {
            let (code, message) = parse(bad).unwrap_err();
            assert_eq!(code, "ERR", "{bad}");
            assert!(
                message.starts_with("Syntax error in HELLO option"),
                "{bad}: {message}"
            );
        }
        assert_eq!(
            parse_hello(&[b"3", b"SETNAME", b"a\nb"], Proto::Resp2)
                .unwrap_err()
                .1,
            BAD_CLIENT_NAME
        );
    }

    #[test]
    fn incrby_counts_are_positive_and_runs_need_a_private_segment_key() {
        assert_eq!(incr_by_count(b"7", 10).unwrap(), 7);
        for bad in [&b"0"[..], b"-1", b"11", b"x", b"", b"+3", b"1.0"] {
            let e = incr_by_count(bad, 10).unwrap_err();
            assert_eq!(e.code, "invalid_count", "{bad:?}");
        }
        assert!(
            incr_by_count(b"-4", 10)
                .unwrap_err()
                .message
                .contains("negative")
        );
        let spec = |strategy, public| KeySpec {
            strategy,
            public,
            source: crate::keys::KeySource::Declared,
        };
        assert!(incr_by_fits("k", spec(Strategy::Segment, false)).is_ok());
        for (strategy, public) in [
            (Strategy::Segment, true),
            (Strategy::Snowflake, false),
            (Strategy::Uuid7, false),
            (Strategy::Uuid4, false),
        ] {
            let e = incr_by_fits("k", spec(strategy, public)).unwrap_err();
            assert_eq!(e.code, "not_contiguous");
            assert!(e.message.contains("IDMINT.BATCH k"), "{}", e.message);
        }
    }

    #[test]
    fn info_sections_are_chosen_by_name() {
        assert!(info_wants(&[], "stats"));
        assert!(info_wants(&[b"Server"], "server"));
        assert!(!info_wants(&[b"server"], "stats"));
        assert!(info_wants(&[b"server", b"STATS"], "stats"));
        for all in [&b"default"[..], b"all", b"everything"] {
            assert!(info_wants(&[all], "idmint"));
        }
        assert!(!info_wants(&[b"nosuch"], "server"));
    }

    #[test]
    fn client_names_are_printable_ascii_without_spaces() {
        assert!(valid_client_name(b"redis-py(8.1.0)"));
        assert!(valid_client_name(b""));
        for bad in [&b"a b"[..], b"a\nb", b"\x7f", "é".as_bytes()] {
            assert!(!valid_client_name(bad), "{bad:?}");
        }
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
        let config = crate::config::Config::load(Some(&path), []).unwrap();
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
