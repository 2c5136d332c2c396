//! The Redis-protocol (RESP2) listener: any Redis client, or
//! `redis-benchmark`, gets IDs with no new SDK.
//!
//! # Commands
//! - `INCR key`, `GET key`: the key's next ID, made by the key's configured
//!   strategy exactly as `GET /v1/ids/{key}` makes it (`issue.rs`). An
//!   integer reply; a public key's ID is obfuscated, and comes as a bulk
//!   string when the public text form isn't decimal; UUID keys answer the
//!   hyphenated UUID as a bulk string.
//! - `IDMINT.BATCH key n`: an array of the key's next `n` IDs (1 to
//!   `server.max_count`), each as `INCR` would answer it. A command of its
//!   own rather than `INCRBY key n`: a client calling `INCRBY` expects one
//!   integer back, and an array would break it.
//! - `AUTH token` (or `AUTH user token`, the user ignored): unlocks, for this
//!   connection, the keys whose `keys.<name>.token` is `token`. `INCR`, `GET`
//!   and `IDMINT.BATCH` of a key with a token answer `-NOAUTH ...` until then;
//!   a token that is no key's answers `-WRONGPASS ...`. Tokens are compared in
//!   constant time and never logged.
//! - `PING [message]`, `ECHO message`, `INFO [section]` (version, worker,
//!   uptime, IDs issued over RESP), `QUIT`.
//! - What common clients send when they connect: `HELLO` (without a
//!   version, or `HELLO 2`, answers the server's facts as RESP2; `HELLO 3`
//!   answers `-NOPROTO`, so the client falls back to RESP2), `CLIENT
//!   SETNAME`/`GETNAME`/`SETINFO`/`ID`, `SELECT 0`, `COMMAND` (empty:
//!   `COMMAND`, `COMMAND DOCS`; `COMMAND COUNT`), `CONFIG GET` (what
//!   `redis-benchmark` asks for).
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
//! # Shutdown
//! When the server stops, the listener stops accepting; each connection
//! answers the requests it has read (and finishes one it is halfway through
//! reading), then closes. Connections still open after `server.shutdown_grace`
//! are dropped.

mod frame;

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::issue::{self, AppState, ErrorClass, IssueError, Issued};
use crate::metrics::IssuedCounter;
use crate::start::Bound;
use frame::LIMITS;

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
                    let conn = Connection::new(stream, peer, state.clone(), stats.clone());
                    let run = conn.run(stop_connections.clone());
                    connections.spawn(async move {
                        run.await;
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

/// Completes when `stop` turns true, or its sender is gone (stop then too).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|&stopped| stopped).await;
}

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
    spec: issue::KeySpec,
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

/// One client connection.
struct Connection {
    stream: TcpStream,
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
    /// `CLIENT SETNAME`.
    name: Option<Vec<u8>>,
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
    fn new(stream: TcpStream, peer: SocketAddr, state: Arc<AppState>, stats: Arc<Stats>) -> Self {
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
            name: None,
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
                    let _ = self.stream.try_write(&self.out);
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
        let written = match self.stream.try_write(&self.out) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        if written < self.out.len() {
            // A client that doesn't read its replies holds a connection slot
            // and its buffers: it gets the read timeout to take them.
            let timeout = self.state.connections.read_timeout;
            tokio::time::timeout(timeout, self.stream.write_all(&self.out[written..]))
                .await
                .map_err(|_| {
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
        let arg = |i: usize| -> &[u8] {
            args.get(i)
                .and_then(|r| input.get(base + r.start..base + r.end))
                .unwrap_or_default()
        };
        let n_args = args.len();
        let name = arg(0);
        let flow = match command(name) {
            Command::Incr | Command::Get if n_args == 2 => {
                self.issue(arg(1), None).await;
                Flow::Continue
            }
            Command::Batch if n_args == 3 => {
                self.issue(arg(1), Some(arg(2))).await;
                Flow::Continue
            }
            Command::Auth if n_args == 2 || n_args == 3 => {
                self.auth(arg(n_args - 1));
                Flow::Continue
            }
            Command::Ping if n_args <= 2 => {
                match n_args {
                    1 => frame::simple(&mut self.out, "PONG"),
                    _ => frame::bulk(&mut self.out, arg(1)),
                }
                Flow::Continue
            }
            Command::Echo if n_args == 2 => {
                frame::bulk(&mut self.out, arg(1));
                Flow::Continue
            }
            Command::Info => {
                let info = self.info();
                frame::bulk(&mut self.out, info.as_bytes());
                Flow::Continue
            }
            Command::Quit => {
                frame::simple(&mut self.out, "OK");
                Flow::Close
            }
            Command::Hello => {
                self.hello(if n_args > 1 { Some(arg(1)) } else { None });
                Flow::Continue
            }
            Command::Client if n_args >= 2 => {
                self.client(arg(1), if n_args > 2 { Some(arg(2)) } else { None });
                Flow::Continue
            }
            Command::Select if n_args == 2 => {
                if arg(1) == b"0" {
                    frame::simple(&mut self.out, "OK");
                } else {
                    frame::error(&mut self.out, "ERR", "DB index is out of range");
                }
                Flow::Continue
            }
            Command::Commands => {
                if n_args > 1 && arg(1).eq_ignore_ascii_case(b"COUNT") {
                    frame::integer(&mut self.out, Command::COUNT);
                } else {
                    frame::array(&mut self.out, 0);
                }
                Flow::Continue
            }
            Command::Config if n_args == 3 && arg(1).eq_ignore_ascii_case(b"GET") => {
                // `redis-benchmark` asks for `save` and `appendonly` at start.
                let param = arg(2);
                if param.eq_ignore_ascii_case(b"save") {
                    frame::array(&mut self.out, 2);
                    frame::bulk(&mut self.out, b"save");
                    frame::bulk(&mut self.out, b"");
                } else if param.eq_ignore_ascii_case(b"appendonly") {
                    frame::array(&mut self.out, 2);
                    frame::bulk(&mut self.out, b"appendonly");
                    frame::bulk(&mut self.out, b"no");
                } else {
                    frame::array(&mut self.out, 0);
                }
                Flow::Continue
            }
            Command::Config => {
                let message = format!(
                    "unknown subcommand or wrong number of arguments for '{}': only CONFIG GET is served",
                    shown(arg(1))
                );
                frame::error(&mut self.out, "ERR", &message);
                Flow::Continue
            }
            Command::Unknown => {
                let message = format!("unknown command '{}'", shown(name));
                frame::error(&mut self.out, "ERR", &message);
                Flow::Continue
            }
            _ => {
                let message = format!(
                    "wrong number of arguments for '{}' command",
                    shown(name).to_ascii_lowercase()
                );
                frame::error(&mut self.out, "ERR", &message);
                Flow::Continue
            }
        };
        self.input = input;
        flow
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

    /// `AUTH [user] token`: unlocks the keys whose token this is.
    fn auth(&mut self, token: &[u8]) {
        if self.state.key_tokens.is_empty() {
            frame::error(
                &mut self.out,
                "ERR",
                "AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            );
            return;
        }
        let keys = self.state.keys_with_token(token);
        if keys.is_empty() {
            frame::error(
                &mut self.out,
                "WRONGPASS",
                "invalid username-password pair or user is disabled.",
            );
            return;
        }
        for key in keys {
            if !self.authorized.contains(&key) {
                self.authorized.push(key);
            }
        }
        frame::simple(&mut self.out, "OK");
    }

    fn info(&self) -> String {
        let stats = &self.stats;
        let status = self.state.worker.status();
        format!(
            "# Server\r\n\
             idmint_version:{version}\r\n\
             resp_protocol:2\r\n\
             process_id:{pid}\r\n\
             tcp_port:{port}\r\n\
             uptime_in_seconds:{uptime}\r\n\
             \r\n\
             # Idmint\r\n\
             registry:{registry}\r\n\
             worker:{worker}\r\n\
             lease:{lease}\r\n\
             layout:{layout}\r\n\
             max_count:{max_count}\r\n\
             \r\n\
             # Stats\r\n\
             connected_clients:{open}\r\n\
             total_connections_received:{total}\r\n\
             total_commands_processed:{commands}\r\n\
             ids_issued:{ids}\r\n",
            version = env!("CARGO_PKG_VERSION"),
            pid = std::process::id(),
            port = stats.addr.port(),
            uptime = stats.started.elapsed().as_secs(),
            registry = status.registry,
            worker = status.worker,
            lease = status.lease.name(),
            layout = self.state.layout_text,
            max_count = self.state.max_count,
            open = stats.connections_open.load(Ordering::Relaxed),
            total = stats.connections_total.load(Ordering::Relaxed),
            // This read's own commands and IDs are added after it.
            commands = stats.commands.load(Ordering::Relaxed) + self.n_commands,
            ids = stats.ids_issued.load(Ordering::Relaxed) + self.n_ids,
        )
    }

    /// `HELLO [protover ...]`: RESP2 only.
    fn hello(&mut self, version: Option<&[u8]>) {
        match version {
            None | Some(b"2") => {
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
                frame::array(&mut self.out, 2 * fields.len());
                for (field, value) in fields {
                    frame::bulk(&mut self.out, field);
                    match field {
                        b"proto" => frame::integer(&mut self.out, 2),
                        b"id" => frame::integer(&mut self.out, self.id),
                        b"modules" => frame::array(&mut self.out, 0),
                        _ => frame::bulk(&mut self.out, value),
                    }
                }
            }
            Some(_) => frame::error(
                &mut self.out,
                "NOPROTO",
                "unsupported protocol version: this server speaks RESP2 only",
            ),
        }
    }

    /// `CLIENT SETNAME|GETNAME|SETINFO|ID`: what clients send at connect.
    fn client(&mut self, sub: &[u8], value: Option<&[u8]>) {
        if sub.eq_ignore_ascii_case(b"SETNAME") {
            match value {
                Some(name) if !name.contains(&b' ') => {
                    self.name = (!name.is_empty()).then(|| name.to_vec());
                    frame::simple(&mut self.out, "OK");
                }
                Some(_) => frame::error(
                    &mut self.out,
                    "ERR",
                    "Client names cannot contain spaces, newlines or special characters.",
                ),
                None => frame::error(
                    &mut self.out,
                    "ERR",
                    "wrong number of arguments for 'client|setname' command",
                ),
            }
        } else if sub.eq_ignore_ascii_case(b"GETNAME") {
            match &self.name {
                Some(name) => frame::bulk(&mut self.out, name),
                None => frame::null(&mut self.out),
            }
        } else if sub.eq_ignore_ascii_case(b"SETINFO") {
            frame::simple(&mut self.out, "OK");
        } else if sub.eq_ignore_ascii_case(b"ID") {
            frame::integer(&mut self.out, self.id);
        } else {
            let message = format!("unknown subcommand '{}'", shown(sub));
            frame::error(&mut self.out, "ERR", &message);
        }
    }
}

/// The commands this listener knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Incr,
    Get,
    Batch,
    Ping,
    Echo,
    Info,
    Quit,
    Hello,
    Client,
    Select,
    Commands,
    Config,
    Auth,
    Unknown,
}

impl Command {
    /// How many commands `COMMAND COUNT` reports.
    const COUNT: i64 = 13;
}

/// Checks `key` and its token (`authorized`: the keys AUTH unlocked), and
/// looks up what issuing for it needs.
fn resolve(state: &AppState, authorized: &[String], key: &[u8]) -> Result<LastKey, IssueError> {
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
    let spec = state.spec(key);
    Ok(LastKey {
        key: key.to_owned(),
        spec,
        counter: IssuedCounter::new(state, key, spec.strategy),
        pending: 0,
    })
}

fn command(name: &[u8]) -> Command {
    // Checked in order of how often they come.
    const NAMES: [(&[u8], Command); 13] = [
        (b"INCR", Command::Incr),
        (b"GET", Command::Get),
        (b"IDMINT.BATCH", Command::Batch),
        (b"PING", Command::Ping),
        (b"ECHO", Command::Echo),
        (b"INFO", Command::Info),
        (b"QUIT", Command::Quit),
        (b"HELLO", Command::Hello),
        (b"CLIENT", Command::Client),
        (b"SELECT", Command::Select),
        (b"COMMAND", Command::Commands),
        (b"CONFIG", Command::Config),
        (b"AUTH", Command::Auth),
    ];
    NAMES
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(name))
        .map_or(Command::Unknown, |&(_, c)| c)
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

    #[test]
    fn command_names_are_case_insensitive() {
        assert_eq!(command(b"incr"), Command::Incr);
        assert_eq!(command(b"IdMint.Batch"), Command::Batch);
        assert_eq!(command(b"INCRBY"), Command::Unknown);
        assert_eq!(command(b""), Command::Unknown);
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
