//! `idmint serve` against hostile clients (docs/design.md §5 "Bad input"): bad
//! counts, oversized requests, slow clients holding connections, floods of
//! connections, and RESP garbage. The server answers each with a typed error
//! (or closes that one connection), issues nothing for it, keeps serving
//! everyone else promptly, and its memory stays bounded.
//!
//! RESP's malformed and oversize frames are in `serve_resp.rs`; here is what
//! that file leaves out (deep arrays, overflowing lengths, binary garbage).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::Value;

use crate::serve::{Served, client, expect_error, get};

const KEYS: &str = r#"
[server]
admin_token = "t"

[segment.keys.order]
step = 10
start = 100

[keys.sf]
strategy = "snowflake"
"#;

/// A server with RESP on, `KEYS` configured, and `server` lines added to `[server]`.
fn start(data_dir: &Path, server: &str) -> Served {
    let config = KEYS.replace("[server]\n", &format!("[server]\n{server}\n"));
    Served::start_with_args(
        data_dir,
        Some(&config),
        &[],
        &["--resp-addr", "127.0.0.1:0"],
    )
}

fn resp_addr(server: &Served) -> String {
    server.resp_addr.clone().expect("RESP is on")
}

/// Sends `request` (a whole RESP command, or several) on a fresh connection;
/// the first reply line.
fn resp_line(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(request).unwrap();
    read_line(&mut s)
}

/// One `\r\n`-ended line from `s`, without the ending; what came before a close.
fn read_line(s: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match s.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&line).trim_end().to_owned()
}

/// A RESP array command.
fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The server's process ID, as its RESP `INFO` tells it.
fn server_pid(server: &Served) -> u32 {
    let mut s = TcpStream::connect(resp_addr(server)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(b"INFO\r\n").unwrap();
    let header = read_line(&mut s);
    let len: usize = header.strip_prefix('$').unwrap().parse().unwrap();
    let mut info = vec![0u8; len + 2];
    s.read_exact(&mut info).unwrap();
    let info = String::from_utf8(info).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Resident memory of `pid`, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// One snowflake ID over HTTP, checked, and how long it took.
fn timed_id(c: &Client, server: &Served) -> Duration {
    let started = Instant::now();
    let (status, body) = get(c, &server.url("/v1/ids/sf"));
    let took = started.elapsed();
    assert_eq!(status, StatusCode::OK, "{body}");
    let id: u64 = body.trim().parse().unwrap();
    assert!(id > 0 && id < 1 << 63);
    took
}

/// The `q`-quantile of `durations`.
fn quantile(durations: &[Duration], q: f64) -> Duration {
    let mut sorted = durations.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[test]
fn serve_hostile_counts_are_400s_naming_count_and_issue_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"), "");
    let c = client();
    let counts = [
        "0",
        "-1",
        "1000000000000",
        "18446744073709551616",
        "99999999999999999999999999999",
        "abc",
        "",
        "1e3",
        "1.0",
        "0x10",
        "%20",
        "5%00",
        "%EF%BC%95", // a fullwidth digit five
        "%F0%9F%92%A5",
        "%FF",
    ];
    for count in counts {
        for path in ["/v1/ids/order", "/v1/ids/sf", "/v1/uuid"] {
            let url = server.url(&format!("{path}?count={count}"));
            let r = c.get(&url).send().unwrap();
            let message = expect_error(r, StatusCode::BAD_REQUEST, "invalid_count");
            assert!(message.contains("count"), "{url}: {message}");
        }
    }
    // A count given twice is refused, not resolved silently either way.
    for query in ["count=1&count=2", "count=3&count=3", "count=2&x=1&count="] {
        let url = server.url(&format!("/v1/ids/order?{query}"));
        let message = expect_error(
            c.get(&url).send().unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_count",
        );
        assert!(message.contains("count"), "{url}: {message}");
    }
    // RESP: the same counts, as raw bytes, typed errors on an open connection.
    let addr = resp_addr(&server);
    let mut raw: Vec<Vec<u8>> = counts
        .iter()
        .filter(|c| !c.contains('%'))
        .map(|c| c.as_bytes().to_vec())
        .collect();
    raw.extend([
        "５".as_bytes().to_vec(),
        vec![0xff, 0xfe],
        b"5\0".to_vec(),
        b" 5 x".to_vec(),
    ]);
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    for count in &raw {
        s.write_all(&command(&[b"IDMINT.BATCH", b"order", count]))
            .unwrap();
        let reply = read_line(&mut s);
        assert!(
            reply.starts_with("-INVALID_COUNT ") && reply.contains("count"),
            "{count:?}: {reply}"
        );
    }
    // Nothing was issued: the segment key starts where it should.
    assert_eq!(get(&c, &server.url("/api/segment/get/order")).1, "100");
    s.write_all(&command(&[b"INCR", b"order"])).unwrap();
    assert_eq!(read_line(&mut s), ":101");
}

/// What the server did with one oversized request.
#[derive(Debug)]
struct Refusal {
    /// The status line's code, if a response came before the close.
    status: Option<u16>,
    /// The response's body (up to what was read).
    body: String,
    took: Duration,
}

/// Sends `head` and then `body` over and over, up to `body_len` bytes (from
/// a thread, as the server may stop reading), and reads what comes back
/// until the close.
fn send_oversized(addr: &str, head: Vec<u8>, body: Vec<u8>, body_len: usize) -> Refusal {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut writer = s.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        // The server may close while this still writes: not a failure.
        let _ = writer.write_all(&head);
        let mut sent = 0;
        while sent < body_len {
            if writer.write_all(&body).is_err() {
                break;
            }
            sent += body.len();
        }
    });
    let mut response = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                response.extend_from_slice(&buf[..n]);
                // One response is all there is to read.
                if let Some(end) = find(&response, b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if response.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no answer to an oversized request: {e}"),
        }
    }
    let took = started.elapsed();
    drop(s);
    sending.join().unwrap();
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok());
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Refusal { status, body, took }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn serve_hostile_oversized_requests_are_refused_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"), "");
    let c = client();
    let pid = server_pid(&server);
    let mib = "a".repeat(1 << 20);
    let plain = vec![b'x'; 64 * 1024];
    let mut chunked = b"1000\r\n".to_vec();
    chunked.extend([b'x'; 0x1000]);
    chunked.extend(b"\r\n");
    /// What, the head, a body piece sent over and over up to a length, and
    /// the statuses that may answer.
    type Case<'a> = (&'a str, Vec<u8>, (&'a [u8], usize), &'a [u16]);
    let cases: Vec<Case> = vec![
        (
            "1 MiB path",
            format!("GET /v1/ids/{mib} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
            (&[], 0),
            &[414, 431],
        ),
        (
            "1 MiB query",
            format!("GET /v1/ids/sf?count=1&x={mib} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
            (&[], 0),
            &[414, 431],
        ),
        (
            "1 MiB header",
            format!("GET /v1/ids/sf HTTP/1.1\r\nHost: x\r\nX-Big: {mib}\r\n\r\n").into_bytes(),
            (&[], 0),
            &[431],
        ),
        (
            "100 MiB body, admin token",
            b"POST /v1/admin/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\
              Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n"
                .to_vec(),
            (&plain, 4 << 20),
            &[413],
        ),
        (
            "chunked body past the limit, admin token",
            b"POST /v1/admin/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\
              Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                .to_vec(),
            (&chunked, 4 << 20),
            &[413],
        ),
        (
            "100 MiB body, no token",
            b"POST /v1/admin/keys HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n"
                .to_vec(),
            (&plain, 4 << 20),
            &[401],
        ),
    ];
    for (what, head, (body, body_len), statuses) in cases {
        let refusal = send_oversized(&server.addr, head, body.to_vec(), body_len);
        let status = refusal
            .status
            .unwrap_or_else(|| panic!("{what}: {refusal:?}"));
        assert!(statuses.contains(&status), "{what}: {refusal:?}");
        assert!(
            refusal.took < Duration::from_secs(5),
            "{what}: answered after {:?}",
            refusal.took
        );
        if status == 413 || status == 401 {
            // Our own refusals are JSON errors, like every other.
            let body: Value = serde_json::from_str(&refusal.body)
                .unwrap_or_else(|_| panic!("{what}: not JSON: {refusal:?}"));
            let code = if status == 413 {
                "body_too_large"
            } else {
                "unauthorized"
            };
            assert_eq!(body["error"]["code"], code, "{what}");
        }
        eprintln!("{what}: {status} after {:?}", refusal.took);
        // Still serving, promptly.
        assert!(timed_id(&c, &server) < Duration::from_secs(2), "{what}");
    }
    // Nothing of those requests stayed in memory.
    let rss = rss_kib(pid);
    assert!(rss < 64 * 1024, "RSS {rss} KiB after oversized requests");
    // A legitimate admin request still works: nothing was created above.
    let r = c
        .post(server.url("/v1/admin/keys"))
        .bearer_auth("t")
        .json(&serde_json::json!({"key": "after", "step": 5}))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(get(&c, &server.url("/api/segment/get/after")).1, "1");
}

/// A connection a slow client holds: it sent part of a request and trickles
/// the rest, a byte at a time.
struct Slow {
    stream: TcpStream,
    opened: Instant,
    closed: Option<Instant>,
}

impl Slow {
    fn open(addr: &str, start: &[u8]) -> Slow {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(start).unwrap();
        stream.set_nonblocking(true).unwrap();
        Slow {
            stream,
            opened: Instant::now(),
            closed: None,
        }
    }

    /// Sends one more byte of header, and notes when the server closed.
    fn trickle(&mut self) {
        if self.closed.is_some() {
            return;
        }
        let mut buf = [0u8; 1024];
        let gone = match self.stream.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            Err(_) => true,
        };
        let gone = gone
            || match self.stream.write(b"a") {
                Ok(_) => false,
                Err(e) => e.kind() != ErrorKind::WouldBlock,
            };
        if gone {
            self.closed = Some(Instant::now());
        }
    }
}

#[test]
fn serve_hostile_slow_clients_are_cut_off_and_others_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"), "read_timeout = \"2s\"");
    let resp = resp_addr(&server);
    let c = client();
    timed_id(&c, &server);
    let mut idle_resp = TcpStream::connect(&resp).unwrap();
    idle_resp
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    // An HTTP keep-alive connection that goes quiet after one request.
    let mut idle_http = TcpStream::connect(&server.addr).unwrap();
    idle_http
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(read_line(&mut idle_http).starts_with("HTTP/1.1 200"));
    idle_http.set_nonblocking(true).unwrap();

    let mut slow: Vec<Slow> = (0..200)
        .map(|_| {
            Slow::open(
                &server.addr,
                b"GET /v1/ids/sf HTTP/1.1\r\nHost: x\r\nX-Slow: ",
            )
        })
        // A key of 60,000 bytes, declared and never finished.
        .chain((0..50).map(|_| Slow::open(&resp, b"*2\r\n$4\r\nINCR\r\n$60000\r\nk")))
        .collect();
    let opened = Instant::now();

    // While they trickle, a normal client gets IDs promptly.
    let mut latencies = Vec::new();
    let deadline = opened + Duration::from_secs(20);
    while slow.iter().any(|s| s.closed.is_none()) {
        assert!(
            Instant::now() < deadline,
            "slow clients still connected after 20 s"
        );
        for s in &mut slow {
            s.trickle();
        }
        for _ in 0..10 {
            latencies.push(timed_id(&c, &server));
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            resp_line(&resp, &command(&[b"PING"])),
            "+PONG",
            "RESP serves others"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Each slow client was cut off at the read timeout, not before.
    let held: Vec<Duration> = slow.iter().map(|s| s.closed.unwrap() - s.opened).collect();
    let (shortest, longest) = (held.iter().min().unwrap(), held.iter().max().unwrap());
    assert!(
        *shortest >= Duration::from_millis(1500),
        "cut off after {shortest:?}"
    );
    assert!(*longest < Duration::from_secs(6), "held for {longest:?}");
    let (p50, max) = (quantile(&latencies, 0.5), quantile(&latencies, 1.0));
    assert!(p50 < Duration::from_millis(200), "median {p50:?}");
    assert!(max < Duration::from_secs(2), "slowest {max:?}");
    eprintln!(
        "slow clients: 250 cut off after {shortest:?}..{longest:?}; meanwhile {} IDs, \
         median {p50:?}, slowest {max:?}",
        latencies.len()
    );

    // An idle RESP connection stays open, as Redis keeps idle clients (`timeout 0`).
    idle_resp.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_line(&mut idle_resp), "+PONG");
    // An idle HTTP keep-alive connection is closed after the read timeout
    // (past the rest of the response read above).
    let mut buf = [0u8; 1024];
    let closed = loop {
        match idle_http.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => {}
            Err(e) => break e.kind() != ErrorKind::WouldBlock,
        }
    };
    assert!(closed, "an idle HTTP connection outlived the read timeout");
}

#[test]
fn serve_hostile_connection_floods_keep_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"), "");
    let resp = resp_addr(&server);
    let c = client();
    let pid = server_pid(&server);
    for _ in 0..20 {
        timed_id(&c, &server);
    }
    let rss_start = rss_kib(pid);

    // 2,000 connections opened and dropped at once, some mid-request.
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (http, resp) = (server.addr.as_str(), resp.as_str());
            s.spawn(move || {
                for i in 0..500 {
                    let addr = if i % 4 == 0 { resp } else { http };
                    let Ok(mut conn) = TcpStream::connect(addr) else {
                        continue;
                    };
                    if (i + t) % 2 == 0 {
                        let _ = conn.write_all(b"GET /v1/ids/sf HTTP/1.1\r\nHo");
                    }
                }
            });
        }
    });
    let churn_took = started.elapsed();
    assert!(timed_id(&c, &server) < Duration::from_secs(2));

    // 1,000 held open at once: idle, or halfway through a request.
    let held: Vec<TcpStream> = (0..1000)
        .map(|i| {
            let addr = if i % 5 == 0 { &resp } else { &server.addr };
            let mut conn = TcpStream::connect(addr).unwrap();
            if i % 2 == 0 {
                let start: &[u8] = if i % 5 == 0 {
                    b"*2\r\n$4\r\nINCR\r\n"
                } else {
                    b"GET /v1/ids/sf HTTP/1.1\r\n"
                };
                conn.write_all(start).unwrap();
            }
            conn
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut latencies = Vec::new();
    for _ in 0..50 {
        latencies.push(timed_id(&c, &server));
    }
    let reply = resp_line(&resp, &command(&[b"INCR", b"sf"]));
    assert!(reply.starts_with(':'), "{reply}");
    let rss_held = rss_kib(pid);
    drop(held);
    let max = quantile(&latencies, 1.0);
    assert!(
        max < Duration::from_secs(2),
        "slowest ID with 1,000 held: {max:?}"
    );
    assert!(
        rss_held < 64 * 1024,
        "RSS {rss_held} KiB with 1,000 connections"
    );
    assert!(timed_id(&c, &server) < Duration::from_secs(2));
    eprintln!(
        "connection floods: RSS {rss_start} KiB at start, {rss_held} KiB with 1,000 held \
         ({} KiB each); 2,000 opened and dropped in {churn_took:?}; IDs meanwhile: median \
         {:?}, slowest {max:?}",
        rss_held.saturating_sub(rss_start) / 1000,
        quantile(&latencies, 0.5),
    );
}

#[test]
fn serve_hostile_connection_cap_makes_new_clients_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"), "max_connections = 20");
    let resp = resp_addr(&server);
    // Twenty held, HTTP and RESP together: the cap is the process's.
    let mut held: Vec<TcpStream> = (0..20)
        .map(|i| {
            let mut conn =
                TcpStream::connect(if i % 2 == 0 { &server.addr } else { &resp }).unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(15)))
                .unwrap();
            if i % 2 == 1 {
                // Answered: this connection was accepted.
                conn.write_all(b"PING\r\n").unwrap();
                assert_eq!(read_line(&mut conn), "+PONG");
            }
            conn
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    let url = server.url("/v1/ids/sf");
    // Timed from before the spawn, so the clock covers the whole second the
    // main thread waits below (a start taken inside the thread can begin a
    // little after that wait does).
    let started = Instant::now();
    let waiting = std::thread::spawn(move || {
        let (status, _) = get(&client(), &url);
        tx.send((status, started.elapsed())).unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(1)).is_err(),
        "a 21st connection was served past max_connections = 20"
    );
    // One leaves: the waiting client is let in.
    drop(held.remove(0));
    let (status, took) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(took >= Duration::from_secs(1), "{took:?}");
    waiting.join().unwrap();
    assert!(server.log().contains("max_connections"), "{}", server.log());
}

/// Reads `conn` until the server closes it; the bytes read, or `None` if
/// `limit` bytes came first (the server went on writing).
fn drain_until_closed(conn: &mut TcpStream, limit: usize) -> Option<usize> {
    conn.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0;
    while total < limit {
        match conn.read(&mut buf) {
            Ok(0) => return Some(total),
            Ok(n) => total += n,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some(total),
            Err(e) => panic!("after {total} bytes: {e}"),
        }
    }
    None
}

#[test]
fn serve_hostile_clients_that_never_read_replies_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        &dir.path().join("data"),
        "max_connections = 2\nread_timeout = \"1s\"",
    );
    let resp = resp_addr(&server);
    // Both slots taken by clients that ask for far more than the socket
    // buffers hold (about 2 MB per reply) and never read a byte.
    let mut http = TcpStream::connect(&server.addr).unwrap();
    http.write_all(&b"GET /v1/ids/sf?count=100000 HTTP/1.1\r\nHost: x\r\n\r\n".repeat(200))
        .unwrap();
    let mut redis = TcpStream::connect(&resp).unwrap();
    redis
        .write_all(&command(&[b"IDMINT.BATCH", b"sf", b"100000"]).repeat(200))
        .unwrap();
    // A third client waits for a slot, which it gets once both are closed
    // for not reading for a read timeout.
    let started = Instant::now();
    let (status, _) = get(&client(), &server.url("/v1/ids/sf"));
    let waited = started.elapsed();
    assert_eq!(status, StatusCode::OK);
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    // Both are closed within a read timeout and a sweep of going quiet (the
    // slot above may have come from the first), with their replies mostly
    // unsent: reading now ends long before 400 MB.
    std::thread::sleep(Duration::from_secs(3));
    for (what, conn) in [("HTTP", &mut http), ("RESP", &mut redis)] {
        let read = drain_until_closed(conn, 100 << 20);
        assert!(read.is_some(), "{what}: the server kept writing");
    }
    eprintln!("non-reading clients: the waiting client got a slot after {waited:?}");
}

/// A small deterministic generator of bytes (xorshift64).
fn garbage(n: usize, mut state: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

#[test]
fn serve_hostile_resp_garbage_gets_errors_and_closes_only_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"), "");
    let addr = resp_addr(&server);
    let mut bystander = TcpStream::connect(&addr).unwrap();
    bystander
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();

    let deep = b"*1\r\n".repeat(100_000);
    let cases: &[(&str, &[u8], &str)] = &[
        ("deep arrays", &deep, "expected '$'"),
        (
            "array length past i64",
            b"*99999999999999999999\r\n",
            "invalid multibulk length",
        ),
        (
            "bulk length past i64",
            b"*1\r\n$9223372036854775808\r\n",
            "invalid bulk length",
        ),
        ("null bulk string", b"*1\r\n$-1\r\n", "invalid bulk length"),
        ("endless header", &[b'*'; 4096], "expected '\\r\\n'"),
        ("NUL bytes", b"*1\r\n\0\0\0\0\r\n", "expected '$'"),
    ];
    for &(what, input, expected) in cases {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let _ = s.write_all(input);
        let reply = read_line(&mut s);
        assert!(
            reply.starts_with("-ERR Protocol error: ") && reply.contains(expected),
            "{what}: {reply:?}"
        );
        let mut rest = Vec::new();
        // Closed after the error (a reset counts: our unread input was dropped).
        let closed = match s.read_to_end(&mut rest) {
            Ok(_) => rest.is_empty(),
            Err(e) => e.kind() == ErrorKind::ConnectionReset,
        };
        assert!(closed, "{what}: not closed, then {rest:?}");
    }
    // A null array (`*-1`) is skipped, as Redis does; the connection goes on.
    assert_eq!(resp_line(&addr, b"*-1\r\n*0\r\nPING\r\n"), "+PONG");

    // Binary garbage: only error replies, then a close or silence; never an ID.
    for seed in 1..=8u64 {
        let bytes = garbage(64 * 1024, seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let _ = s.write_all(&bytes);
        let mut replies = Vec::new();
        let _ = s.read_to_end(&mut replies);
        let replies = String::from_utf8_lossy(&replies);
        for line in replies.split_terminator("\r\n") {
            assert!(
                line.starts_with('-'),
                "seed {seed}: a reply that is no error: {line:?}"
            );
        }
    }

    // The bystander was never disturbed, and the server still issues.
    bystander.write_all(&command(&[b"INCR", b"sf"])).unwrap();
    let reply = read_line(&mut bystander);
    assert!(reply.starts_with(':'), "{reply}");
    assert_eq!(get(&client(), &server.url("/healthz")).0, StatusCode::OK);
}
