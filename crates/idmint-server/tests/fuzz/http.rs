//! Fuzz tests of the HTTP API's inputs: key and ID path segments and query
//! parameters (counts, versions, tokens, repeated and unknown parameters,
//! percent-encoding junk), sent to an in-process server over one keep-alive
//! connection.
//!
//! The server runs on the embedded default (a `file` worker lease and SQLite
//! segments in a temporary data directory) with keys of every strategy. The
//! client is raw TCP, so paths reach the server as generated (an HTTP client
//! would normalise them); every generated request is valid HTTP, so hyper
//! itself never answers, only idmint's router.
//!
//! Each request is checked against a model of how the server reads it
//! (percent-decoding, `+` in queries, repeated parameters refused, key and
//! count rules): the status and error code it predicts, within
//! [`BOUND`]; every error is `{"error":{"code","message"}}`; never a 5xx;
//! a 200 carries exactly the IDs asked for, all positive, each stream of
//! IDs strictly increasing (snowflake, per segment key) and every ID
//! unique. After the run the server still serves.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use idmint_core::uuid::Uuid;
use idmint_core::{Id, IdParts, Layout};
use idmint_node::Config;
use idmint_server::Server;
use idmint_testkit::fuzz::{arbitrary, cases, mutated, timed};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde_json::Value;

/// `server.max_count`, small so that bodies stay small.
const MAX_COUNT: u64 = 1000;
/// The token of the key `locked`.
const TOKEN: &str = "t0k";
/// The longest one request may take, a segment lease from SQLite included.
const BOUND: Duration = Duration::from_secs(2);
/// The server's layout (the default).
const LAYOUT: Layout = Layout::TWITTER;

// ---- The server and the connection ----

/// An in-process server on the embedded default, on a free loopback port,
/// stopped and joined on drop.
struct Served {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Served {
    fn start() -> Served {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let env = [
            ("IDMINT_SERVER__DATA_DIR", dir.path().display().to_string()),
            ("IDMINT_SERVER__HTTP_ADDR", "127.0.0.1:0".to_owned()),
            ("IDMINT_SERVER__MAX_COUNT", MAX_COUNT.to_string()),
            ("IDMINT_SEGMENT__KEYS__ORDER__STEP", "100".to_owned()),
            ("IDMINT_KEYS__SF__STRATEGY", "snowflake".to_owned()),
            ("IDMINT_KEYS__PUB__STRATEGY", "snowflake".to_owned()),
            ("IDMINT_KEYS__PUB__PUBLIC", "true".to_owned()),
            ("IDMINT_KEYS__LOCKED__STRATEGY", "snowflake".to_owned()),
            ("IDMINT_KEYS__LOCKED__TOKEN", TOKEN.to_owned()),
            ("IDMINT_KEYS__U4__STRATEGY", "uuid4".to_owned()),
            ("IDMINT_KEYS__U7__STRATEGY", "uuid7".to_owned()),
            (
                "IDMINT_OBFUSCATION_KEY",
                "2b7e151628aed2a6abf7158809cf4f3c".to_owned(),
            ),
        ];
        let config =
            Config::load(None, env.map(|(k, v)| (k.to_owned(), v))).expect("the config loads");
        let (started, start) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                match Server::start(config).await {
                    Ok(server) => {
                        let _ = started.send(Ok(server.local_addr()));
                        let shutdown = async {
                            let _ = stopped.await;
                        };
                        server.serve(shutdown).await.expect("serving");
                    }
                    Err(e) => {
                        let _ = started.send(Err(e.to_string()));
                    }
                }
            });
        });
        let addr = start
            .recv_timeout(Duration::from_secs(60))
            .expect("the server starts within a minute")
            .expect("the server starts");
        Served {
            addr,
            stop: Some(stop),
            thread: Some(thread),
            _dir: dir,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let joined = thread.join();
            if !std::thread::panicking() {
                joined.expect("the server thread ends cleanly");
            }
        }
    }
}

/// A response, read off the wire.
#[derive(Debug)]
struct Response {
    status: u16,
    /// Lower-cased names.
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Response {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    addr: SocketAddr,
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        Conn {
            addr,
            reader: BufReader::new(connect(addr)),
        }
    }

    /// Sends a GET and reads the answer. When that fails the connection is
    /// replaced by a new one, so the next request (a shrunk case) starts
    /// afresh.
    fn get(&mut self, target: &str, accept: Option<&str>) -> std::io::Result<Response> {
        let mut request = format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        if let Some(accept) = accept {
            request.push_str(&format!("Accept: {accept}\r\n"));
        }
        request.push_str("\r\n");
        let answered = self
            .reader
            .get_mut()
            .write_all(request.as_bytes())
            .and_then(|()| read_response(&mut self.reader));
        if answered.is_err() {
            self.reader = BufReader::new(connect(self.addr));
        }
        answered
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connecting to the server");
    // A hang shows as a read that times out, not as a stuck test.
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("a read timeout");
    stream.set_nodelay(true).expect("no delay");
    stream
}

fn read_line(reader: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

fn bad_data(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// Reads one response: status line, headers, then a body framed by
/// `Content-Length` or chunked.
fn read_response(reader: &mut impl BufRead) -> std::io::Result<Response> {
    let status_line = read_line(reader)?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad_data(format!("status line {status_line:?}")))?;
    let mut headers = HashMap::new();
    loop {
        let line = read_line(reader)?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad_data(format!("header {line:?}")))?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    let mut body = Vec::new();
    if let Some(len) = headers.get("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| bad_data(format!("length {len:?}")))?;
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|t| t == "chunked")
    {
        loop {
            let size = read_line(reader)?;
            let size = usize::from_str_radix(size.split(';').next().unwrap_or_default(), 16)
                .map_err(|_| bad_data(format!("chunk size {size:?}")))?;
            if size == 0 {
                while !read_line(reader)?.is_empty() {}
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            read_line(reader)?;
        }
    } else {
        return Err(bad_data(format!("a {status} response without framing")));
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

// ---- How the server reads a request ----

/// Percent-decoding: `%XX` to its byte; a `%` without two hex digits stays.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// A path parameter as axum's `Path` reads it: percent-decoded, and refused
/// (`None`) unless UTF-8.
fn path_param(raw: &str) -> Option<String> {
    String::from_utf8(percent_decode(raw.as_bytes())).ok()
}

/// The query's parameters as the server reads them (form encoding): pairs
/// split on `&`, empty ones skipped, split at the first `=`, `+` a space,
/// percent-decoded, bad UTF-8 replaced. A name given twice is refused:
/// `invalid_count` for `count`, `invalid_query` for others.
fn query_params(raw: &str) -> Result<HashMap<String, String>, Expect> {
    let decode = |s: &str| {
        let bytes: Vec<u8> = s
            .bytes()
            .map(|b| if b == b'+' { b' ' } else { b })
            .collect();
        String::from_utf8_lossy(&percent_decode(&bytes)).into_owned()
    };
    let mut params = HashMap::new();
    for pair in raw.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decode(name);
        if params.contains_key(&name) {
            let code = if name == "count" {
                "invalid_count"
            } else {
                "invalid_query"
            };
            return Err(Expect::Error(400, code));
        }
        params.insert(name, decode(value));
    }
    Ok(params)
}

/// Bytes that may stand unescaped in a generated request target (besides
/// letters and digits); everything else is percent-encoded, so the target
/// is valid HTTP. `%` stays, so generated text can hold percent junk.
const RAW_OK: &str = "-._~!$&'()*+,;=:@%";

/// `text` as a path segment: `/`, `?` and `#` encoded too.
fn path_segment(text: &str) -> String {
    escape(text, |c| c.is_ascii_alphanumeric() || RAW_OK.contains(c))
}

/// `text` as a query string: `/` and `?` may stand, `#` is encoded.
fn query_string(text: &str) -> String {
    escape(text, |c| {
        c.is_ascii_alphanumeric() || RAW_OK.contains(c) || "/?".contains(c)
    })
}

fn escape(text: &str, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if keep(c) {
            out.push(c);
        } else {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// The body format an `Accept` header picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Json,
    Binary,
}

fn format_of(accept: Option<&str>) -> Format {
    match accept.unwrap_or("") {
        a if a.contains("application/octet-stream") => Format::Binary,
        a if a.contains("application/json") => Format::Json,
        _ => Format::Text,
    }
}

/// Where a key's IDs come from, for checking order and uniqueness.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Stream {
    /// This node's snowflake generator: strictly increasing.
    Snowflake,
    /// A segment key: strictly increasing.
    Segment(String),
    /// Obfuscated snowflake IDs: unique, in no order.
    Public,
    /// UUIDs of a version: unique.
    Uuid(usize),
}

/// What the server should answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// An error status with this code.
    Error(u16, &'static str),
    /// `n` IDs of a stream, in a body of this format.
    Ids(Stream, u64, Format),
    /// A decoded ID, as `/v1/decode` writes it (`leaf` for Leaf's shape).
    Decoded(Id, bool),
    /// Anything but a 5xx (unmodelled paths); errors still well-formed.
    NoServerError,
}

/// The key names configured, and their streams.
fn configured(key: &str) -> Option<Stream> {
    Some(match key {
        "sf" | "locked" => Stream::Snowflake,
        "pub" => Stream::Public,
        "u4" => Stream::Uuid(4),
        "u7" => Stream::Uuid(7),
        "order" => Stream::Segment("order".to_owned()),
        _ => return None,
    })
}

/// `count` as `issue::parse_count` reads it.
fn count(params: &HashMap<String, String>) -> Result<u64, Expect> {
    match params.get("count") {
        None => Ok(1),
        Some(text) => Some(text.trim())
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse::<u64>().ok())
            .filter(|n| (1..=MAX_COUNT).contains(n))
            .ok_or(Expect::Error(400, "invalid_count")),
    }
}

/// The key of a key route: decoded, well-formed, its token given if it has one.
fn key_of(raw: &str, params: &HashMap<String, String>) -> Result<String, Expect> {
    let key = path_param(raw).ok_or(Expect::Error(400, "invalid_path"))?;
    idmint_segment::validate_key(&key).map_err(|_| Expect::Error(400, "invalid_key"))?;
    if key == "locked" && params.get("token").map(String::as_str) != Some(TOKEN) {
        return Err(Expect::Error(401, "unauthorized"));
    }
    Ok(key)
}

/// An ID as `decode_text` reads it: trimmed decimal, then the layout.
fn decoded(text: &str) -> Expect {
    match text.trim().parse::<Id>() {
        Ok(id) if LAYOUT.decode(id.get()).is_ok() => Expect::Decoded(id, false),
        _ => Expect::Error(400, "invalid_id"),
    }
}

/// One generated request.
#[derive(Debug, Clone)]
struct Request {
    route: Route,
    /// The raw query, without `?`; `None` for no `?` at all.
    query: Option<String>,
    accept: Option<&'static str>,
}

#[derive(Debug, Clone)]
enum Route {
    /// `/v1/ids/{key}`.
    Ids(String),
    /// `/api/segment/get/{key}`.
    LeafSegment(String),
    /// `/api/snowflake/get/{key}`.
    LeafSnowflake(String),
    /// `/v1/decode/{id}`.
    Decode(String),
    /// `/v1/uuid`.
    Uuid,
    /// `/decodeSnowflakeId`.
    LeafDecode,
    /// Any path.
    Other(String),
}

impl Request {
    fn target(&self) -> String {
        let path = match &self.route {
            Route::Ids(key) => format!("/v1/ids/{key}"),
            Route::LeafSegment(key) => format!("/api/segment/get/{key}"),
            Route::LeafSnowflake(key) => format!("/api/snowflake/get/{key}"),
            Route::Decode(id) => format!("/v1/decode/{id}"),
            Route::Uuid => "/v1/uuid".to_owned(),
            Route::LeafDecode => "/decodeSnowflakeId".to_owned(),
            Route::Other(path) => path.clone(),
        };
        match &self.query {
            Some(query) => format!("{path}?{query}"),
            None => path,
        }
    }

    /// What the server should answer, following each handler's order of
    /// checks. `names` is the strategy each undeclared name was first
    /// answered with in this run (a name keeps it on every route); a request
    /// that reaches the strategy step adds its name.
    fn expect(&self, names: &mut Names) -> Expect {
        self.outcome(names).unwrap_or_else(|e| e)
    }

    fn outcome(&self, names: &mut Names) -> Result<Expect, Expect> {
        let format = format_of(self.accept);
        let params = match &self.route {
            Route::Ids(raw)
            | Route::LeafSegment(raw)
            | Route::LeafSnowflake(raw)
            | Route::Decode(raw)
                if raw.is_empty() =>
            {
                return Ok(Expect::Error(404, "not_found"));
            }
            Route::Decode(raw) => {
                // The query (`?key=`, which picks the layout) is read first,
                // then the path; the key must be well formed.
                let params = query_params(self.query.as_deref().unwrap_or(""))?;
                let text = path_param(raw).ok_or(Expect::Error(400, "invalid_path"))?;
                if let Some(key) = params.get("key") {
                    idmint_segment::validate_key(key)
                        .map_err(|_| Expect::Error(400, "invalid_key"))?;
                }
                return Ok(decoded(&text));
            }
            Route::Other(_) => return Ok(Expect::NoServerError),
            // The other handlers read the query before anything else.
            _ => query_params(self.query.as_deref().unwrap_or(""))?,
        };
        Ok(match &self.route {
            Route::Ids(raw) => {
                let key = key_of(raw, &params)?;
                let n = count(&params)?;
                // An undeclared name is a snowflake key (`server.undeclared_keys`'s
                // default), unless Leaf's segment route answered it first.
                let stream = match configured(&key) {
                    Some(stream) => stream,
                    None => match names.first_answer(&key, Kind::Snowflake) {
                        Kind::Snowflake => Stream::Snowflake,
                        Kind::Segment => return Err(Expect::Error(404, "key_not_found")),
                    },
                };
                Expect::Ids(stream, n, format)
            }
            Route::LeafSegment(raw) => {
                let key = key_of(raw, &params)?;
                match configured(&key) {
                    Some(Stream::Segment(_)) => {}
                    // Declared with another strategy.
                    Some(_) => return Err(Expect::Error(409, "wrong_strategy")),
                    None => match names.first_answer(&key, Kind::Segment) {
                        // Served as a segment key, which the store doesn't have.
                        Kind::Segment => return Err(Expect::Error(404, "key_not_found")),
                        // Answered as snowflake before.
                        Kind::Snowflake => return Err(Expect::Error(409, "wrong_strategy")),
                    },
                }
                Expect::Ids(Stream::Segment(key), 1, Format::Text)
            }
            Route::LeafSnowflake(raw) => {
                let key = key_of(raw, &params)?;
                let stream = match configured(&key) {
                    Some(Stream::Public) => Stream::Public,
                    Some(Stream::Segment(_) | Stream::Uuid(_)) => {
                        return Err(Expect::Error(409, "wrong_strategy"));
                    }
                    Some(Stream::Snowflake) => Stream::Snowflake,
                    None => match names.first_answer(&key, Kind::Snowflake) {
                        Kind::Snowflake => Stream::Snowflake,
                        Kind::Segment => return Err(Expect::Error(409, "wrong_strategy")),
                    },
                };
                Expect::Ids(stream, 1, Format::Text)
            }
            Route::Uuid => {
                let version = match params.get("version").map(|v| v.trim()) {
                    None | Some("7") => 7,
                    Some("4") => 4,
                    Some(_) => return Err(Expect::Error(400, "invalid_version")),
                };
                Expect::Ids(Stream::Uuid(version), count(&params)?, format)
            }
            Route::LeafDecode => match params.get("snowflakeId") {
                None => Expect::Error(400, "invalid_id"),
                Some(text) => match decoded(text) {
                    Expect::Decoded(id, _) => Expect::Decoded(id, true),
                    other => other,
                },
            },
            Route::Decode(_) | Route::Other(_) => unreachable!("answered above"),
        })
    }
}

// ---- Generating requests ----

const KEYS: &[&str] = &[
    "sf", "pub", "locked", "u4", "u7", "order", "nope", "order.x", "a:b",
];

const URL_TOKENS: &[&str] = &[
    "%",
    "%%",
    "%zz",
    "%4",
    "%C3%28",
    "%FF",
    "%00",
    "%2F",
    "%2f",
    "%25",
    "%20",
    "+",
    "&",
    "&&",
    "=",
    "==",
    "?",
    "/",
    "..",
    "%E2%80%AE",
    "%F0%9F%A6%80",
    "count=",
    "token=t0k",
    "version=4",
    "snowflakeId=",
];

/// Key text: configured keys, unknown well-formed keys, and junk.
fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(KEYS).prop_map(str::to_owned),
        1 => "[A-Za-z0-9._:-]{1,20}",
        2 => mutated(select(KEYS).prop_map(str::to_owned), URL_TOKENS),
        1 => arbitrary("a-z0-9%/.:_-"),
    ]
    .prop_map(|text| path_segment(&text))
}

/// ID text: IDs of the layout, any number, and junk.
fn id_text() -> impl Strategy<Value = String> {
    let valid =
        (0u64..1 << 41, 0u32..32, 0u32..32, 0u32..4096).prop_map(|(tick, dc, worker, seq)| {
            let parts = IdParts {
                tick,
                datacenter: dc,
                worker,
                sequence: seq,
                ..IdParts::default()
            };
            LAYOUT.compose(parts).expect("parts in range").to_string()
        });
    prop_oneof![
        3 => valid.clone(),
        1 => any::<u64>().prop_map(|v| v.to_string()),
        2 => mutated(valid, URL_TOKENS),
        1 => arbitrary("0-9 +%-"),
    ]
}

/// A count's text: in range, at the edges, far out, and not numbers.
fn count_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (1u64..=20).prop_map(|n| n.to_string()),
        1 => (1..=MAX_COUNT).prop_map(|n| n.to_string()),
        2 => select(&[
            "0", "1000", "1001", "1000000000000", "-1", "+5", " 5", "5 ", "05", "1e3", "0x10", "", "٣",
            "18446744073709551615", "18446744073709551616", "99999999999999999999999", "1.0", "NaN",
        ][..])
        .prop_map(str::to_owned),
        1 => mutated(Just("10".to_owned()), URL_TOKENS),
    ]
}

fn param() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        3 => count_text(),
        1 => select(&["4", "7", "v7", " 4", "6", "t0k", "T0K", "t0k ", ""][..]).prop_map(str::to_owned),
        1 => id_text(),
        1 => arbitrary("a-z0-9%+&=_-"),
    ];
    let name = prop_oneof![
        4 => select(&["count", "version", "token", "snowflakeId", "COUNT", "count ", "c%6Funt", "coun%74", "", "x"][..])
            .prop_map(str::to_owned),
        1 => "[a-zA-Z]{1,8}",
    ];
    (name, value, any::<bool>()).prop_map(|(name, value, with_eq)| {
        // `%` and `+` stay as written: percent junk, and spaces.
        let escape =
            |text: &str| escape(text, |c| c.is_ascii_alphanumeric() || c == '%' || c == '+');
        if with_eq {
            format!("{}={}", escape(&name), escape(&value))
        } else {
            escape(&name)
        }
    })
}

/// A query: parameters joined by `&`, sometimes with edits on top; `None`
/// for none at all.
fn query() -> impl Strategy<Value = Option<String>> {
    let joined = || prop::collection::vec(param(), 0..4).prop_map(|params| params.join("&"));
    prop_oneof![
        1 => Just(None),
        4 => joined().prop_map(Some),
        1 => mutated(joined(), URL_TOKENS).prop_map(|q| Some(query_string(&q))),
    ]
}

/// Paths no route was made for, and near misses of real ones.
fn other_path() -> impl Strategy<Value = String> {
    let near = || {
        select(
            &[
                "/v1/ids",
                "/v1/ids/",
                "/v1/ids/sf/",
                "/v1/ids/sf/x",
                "//v1/ids/sf",
                "/V1/IDS/sf",
                "/v1/decode/",
                "/v1/uuid/",
                "/api/segment/get/",
                "/api/snowflake/get/sf/1",
                "/decodeSnowflakeId/",
                "/v1",
                "/v1/admin/keys",
                "/v1/admin/reveal",
                "/healthz",
                "/readyz",
                "/metrics",
                "/v1/status",
                "/",
                "/*",
                "/%2e%2e/v1/ids/sf",
                "/v1/./ids/sf",
            ][..],
        )
    };
    prop_oneof![
        2 => near().prop_map(str::to_owned),
        2 => mutated(near().prop_map(str::to_owned), URL_TOKENS).prop_map(|p| format!("/{}", query_string(p.trim_start_matches('/')).replace('?', "%3F"))),
        1 => arbitrary("a-z0-9/%._-").prop_map(|p| format!("/{}", query_string(&p).replace('?', "%3F"))),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    let route = prop_oneof![
        6 => key_text().prop_map(Route::Ids),
        2 => key_text().prop_map(Route::LeafSegment),
        2 => key_text().prop_map(Route::LeafSnowflake),
        3 => id_text().prop_map(|id| Route::Decode(path_segment(&id))),
        3 => Just(Route::Uuid),
        2 => Just(Route::LeafDecode),
        2 => other_path().prop_map(Route::Other),
    ];
    let accept = select(
        &[
            None,
            Some("*/*"),
            Some("text/plain"),
            Some("application/json"),
            Some("application/octet-stream"),
            Some("application/json, application/octet-stream;q=0.1"),
            Some("image/*"),
            Some(",;=q"),
        ][..],
    );
    (route, query(), accept).prop_map(|(route, query, accept)| Request {
        route,
        query,
        accept,
    })
}

// ---- Checking answers ----

/// The error codes of the HTTP API a GET may answer.
const CODES: &[&str] = &[
    "not_found",
    "method_not_allowed",
    "invalid_path",
    "invalid_query",
    "invalid_count",
    "invalid_id",
    "invalid_version",
    "invalid_key",
    "key_not_found",
    "wrong_strategy",
    "unauthorized",
    "admin_disabled",
];

/// Every ID seen, per stream, and the last one of each ordered stream.
#[derive(Default)]
struct Seen {
    ids: HashMap<Stream, HashSet<u128>>,
    last: HashMap<Stream, u128>,
}

/// The strategy an undeclared name was first answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Snowflake,
    Segment,
}

/// What the server remembers of undeclared names in this run: a name keeps
/// the strategy it was first answered with, on every route.
#[derive(Debug, Default)]
struct Names(HashMap<String, Kind>);

impl Names {
    /// The strategy `key` is answered with when asked as `asked`: the first
    /// one it was answered with, which this answer fixes if it is the first.
    fn first_answer(&mut self, key: &str, asked: Kind) -> Kind {
        *self.0.entry(key.to_owned()).or_insert(asked)
    }
}

impl Seen {
    fn record(&mut self, stream: &Stream, ids: &[u128]) -> Result<(), TestCaseError> {
        let seen = self.ids.entry(stream.clone()).or_default();
        for &id in ids {
            prop_assert!(seen.insert(id), "{stream:?} issued {id} twice");
        }
        if matches!(stream, Stream::Snowflake | Stream::Segment(_)) {
            for &id in ids {
                if let Some(&last) = self.last.get(stream) {
                    prop_assert!(id > last, "{stream:?}: {id} after {last}");
                }
                self.last.insert(stream.clone(), id);
            }
        }
        Ok(())
    }
}

/// An error answer: JSON `{"error":{"code","message"}}` with a known code
/// and a message; the code.
fn check_error_body(response: &Response) -> Result<&'static str, TestCaseError> {
    prop_assert_eq!(
        response.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    let body: Value = serde_json::from_slice(&response.body)
        .map_err(|e| TestCaseError::fail(format!("error body {:?}: {e}", response.text())))?;
    let code = body["error"]["code"].as_str().unwrap_or_default();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    let known = CODES.iter().find(|c| **c == code);
    prop_assert!(known.is_some(), "unknown code in {body}");
    prop_assert!(!message.trim().is_empty(), "no message in {body}");
    Ok(known.copied().unwrap_or_default())
}

/// The IDs of a 200 body, each checked for its stream: integers positive
/// and below 2^63, UUIDs of the right version.
fn ids_of(
    response: &Response,
    stream: &Stream,
    format: Format,
) -> Result<Vec<u128>, TestCaseError> {
    let texts: Vec<String> = match format {
        Format::Binary => {
            let width = if matches!(stream, Stream::Uuid(_)) {
                16
            } else {
                8
            };
            prop_assert_eq!(response.body.len() % width, 0);
            return response
                .body
                .chunks(width)
                .map(|chunk| {
                    let id = if width == 8 {
                        u128::from(u64::from_le_bytes(chunk.try_into().expect("8 bytes")))
                    } else {
                        u128::from_be_bytes(chunk.try_into().expect("16 bytes"))
                    };
                    check_id(stream, id).map(|()| id)
                })
                .collect();
        }
        Format::Json => {
            let body: Value = serde_json::from_slice(&response.body)
                .map_err(|e| TestCaseError::fail(format!("body {:?}: {e}", response.text())))?;
            let ids = body["ids"].as_array().cloned().unwrap_or_default();
            prop_assert_eq!(body["count"].as_u64(), Some(ids.len() as u64));
            ids.iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| TestCaseError::fail(format!("ID {v} is not a string")))
                })
                .collect::<Result<_, _>>()?
        }
        Format::Text => response.text().lines().map(str::to_owned).collect(),
    };
    texts
        .iter()
        .map(|text| {
            let id = match stream {
                Stream::Uuid(_) => Uuid::parse_str(text).map(|u| u.as_u128()).ok(),
                _ => text.parse::<u64>().ok().map(u128::from),
            };
            let id = id.ok_or_else(|| {
                TestCaseError::fail(format!("{text:?} is not an ID of {stream:?}"))
            })?;
            check_id(stream, id).map(|()| id)
        })
        .collect()
}

fn check_id(stream: &Stream, id: u128) -> Result<(), TestCaseError> {
    match stream {
        Stream::Uuid(version) => {
            let version = *version;
            prop_assert_eq!(
                Uuid::from_u128(id).get_version_num(),
                version,
                "{}",
                Uuid::from_u128(id)
            );
        }
        _ => prop_assert!(id > 0 && id <= u128::from(Id::MAX.get()), "ID {id}"),
    }
    Ok(())
}

/// A decode answer: the ID's fields, read with the server's layout.
fn check_decoded(response: &Response, id: Id, leaf: bool) -> Result<(), TestCaseError> {
    let body: Value = serde_json::from_slice(&response.body)
        .map_err(|e| TestCaseError::fail(format!("body {:?}: {e}", response.text())))?;
    let d = LAYOUT.decode(id.get()).expect("the model decoded it");
    if leaf {
        let node = (u64::from(d.datacenter) << LAYOUT.worker_bits()) | u64::from(d.worker);
        prop_assert_eq!(
            body["workerId"].as_str().map(str::to_owned),
            Some(node.to_string())
        );
        prop_assert_eq!(
            body["sequenceId"].as_str().map(str::to_owned),
            Some(d.sequence.to_string())
        );
        let ms = d.time.as_millisecond().to_string();
        prop_assert!(
            body["timestamp"]
                .as_str()
                .is_some_and(|t| t.starts_with(&ms)),
            "{body}"
        );
    } else {
        prop_assert_eq!(body["id"].as_str().map(str::to_owned), Some(id.to_string()));
        prop_assert_eq!(body["tick"].as_u64(), Some(d.tick));
        prop_assert_eq!(body["worker"].as_u64(), Some(u64::from(d.worker)));
        prop_assert_eq!(body["datacenter"].as_u64(), Some(u64::from(d.datacenter)));
        prop_assert_eq!(body["sequence"].as_u64(), Some(u64::from(d.sequence)));
        prop_assert_eq!(body["unix_ms"].as_i64(), Some(d.time.as_millisecond()));
    }
    Ok(())
}

/// Sends `request` and checks the answer against the model.
fn check(
    conn: &mut Conn,
    seen: &mut Seen,
    names: &mut Names,
    request: &Request,
) -> Result<(), TestCaseError> {
    let target = request.target();
    let response = timed(BOUND, &format!("GET {target}"), || {
        conn.get(&target, request.accept)
    })?
    .map_err(|e| TestCaseError::fail(format!("GET {target}: {e}")))?;
    prop_assert!(
        response.status < 500,
        "GET {target}: {} {}",
        response.status,
        response.text()
    );
    prop_assert!(
        response
            .headers
            .get("connection")
            .is_none_or(|c| !c.eq_ignore_ascii_case("close")),
        "GET {target} closed the connection"
    );
    let code = if response.status >= 400 {
        Some(check_error_body(&response)?)
    } else {
        None
    };
    match request.expect(names) {
        Expect::Error(status, expected) => {
            prop_assert_eq!(
                (response.status, code),
                (status, Some(expected)),
                "GET {}: {}",
                target,
                response.text()
            );
        }
        Expect::NoServerError => {}
        Expect::Ids(stream, n, format) => {
            prop_assert_eq!(response.status, 200, "GET {}: {}", target, response.text());
            let ids = ids_of(&response, &stream, format)?;
            prop_assert_eq!(ids.len() as u64, n, "GET {}", target);
            if !matches!(
                request.route,
                Route::LeafSegment(_) | Route::LeafSnowflake(_)
            ) {
                prop_assert_eq!(response.headers.get("x-idmint-count"), Some(&n.to_string()));
            }
            seen.record(&stream, &ids)?;
        }
        Expect::Decoded(id, leaf) => {
            prop_assert_eq!(response.status, 200, "GET {}: {}", target, response.text());
            check_decoded(&response, id, leaf)?;
        }
    }
    Ok(())
}

#[test]
fn fuzz_http_requests() {
    let served = Served::start();
    let conn = RefCell::new(Conn::open(served.addr));
    let seen = RefCell::new(Seen::default());
    let names = RefCell::new(Names::default());
    let mut runner = TestRunner::new(cases(500));
    let result = runner.run(&request(), |request| {
        check(
            &mut conn.borrow_mut(),
            &mut seen.borrow_mut(),
            &mut names.borrow_mut(),
            &request,
        )
    });
    if let Err(e) = result {
        panic!("{e}");
    }

    // The server still serves, on the old connection and a new one.
    for conn in [&mut *conn.borrow_mut(), &mut Conn::open(served.addr)] {
        let response = conn
            .get("/v1/ids/sf?count=3", None)
            .expect("the server still answers");
        assert_eq!(response.status, 200, "{}", response.text());
        let ids: Vec<u64> = response
            .text()
            .lines()
            .map(|l| l.parse().expect("an ID"))
            .collect();
        assert!(ids.len() == 3 && ids.iter().all(|&id| id > 0), "{ids:?}");
        assert_eq!(conn.get("/healthz", None).expect("healthz").status, 200);
    }
}
