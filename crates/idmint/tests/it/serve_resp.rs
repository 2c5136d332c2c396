//! `idmint serve --resp-addr`: the Redis-protocol listener of the real binary,
//! driven by the `redis` crate (a real client: it sends `CLIENT SETINFO` at
//! connect and pipelines) and by raw TCP for what no client would send.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use redis::{Connection, RedisError, Value};

use crate::serve::{OBFUSCATION_KEY, Served, client, get};

const KEYS: &str = r#"
# Names declared nowhere are segment keys here: these tests ask for
# unknown segment keys.
[server]
undeclared_keys = "segment"

[segment.keys.order]
step = 10
start = 100

[segment.keys.bulk]
step = 1000

[keys.sf]
strategy = "snowflake"

[keys.u7]
strategy = "uuid7"

[keys.pub]
strategy = "snowflake"
public = true
"#;

/// A server with the RESP listener on a free port, `KEYS` configured.
fn start(data_dir: &Path) -> Served {
    Served::start_with_args(
        data_dir,
        Some(KEYS),
        &[("IDMINT_OBFUSCATION_KEY", OBFUSCATION_KEY)],
        &["--resp-addr", "127.0.0.1:0"],
    )
}

fn resp_addr(server: &Served) -> &str {
    server
        .resp_addr
        .as_deref()
        .expect("the ready file names the RESP address")
}

/// A `redis` crate connection to the server's RESP listener.
fn connect(server: &Served) -> Connection {
    let client = redis::Client::open(format!("redis://{}/", resp_addr(server))).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(30))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    con
}

fn cmd<T: redis::FromRedisValue>(con: &mut Connection, args: &[&str]) -> Result<T, RedisError> {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
}

/// Asserts a server error reply with `code`; returns its message.
#[track_caller]
fn expect_code<T: std::fmt::Debug>(result: Result<T, RedisError>, code: &str) -> String {
    let e = result.expect_err("an error reply");
    assert_eq!(e.code(), Some(code), "{e}");
    e.detail().unwrap_or_default().to_owned()
}

/// Sends `bytes` on a fresh connection, half-closes nothing, and reads until
/// the server closes it (or 30 s pass): returns what the server wrote and
/// whether it closed.
fn raw_until_close(addr: &str, bytes: &[u8]) -> (String, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // A reset after the reply (unread input at close) is a close too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

/// Reads exactly the replies to `n` single-line requests from `s`.
fn read_lines(s: &mut TcpStream, n: usize) -> Vec<String> {
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while text.matches("\r\n").count() < n {
        let got = s.read(&mut buf).unwrap();
        assert!(got > 0, "closed after {text:?}");
        text.push_str(std::str::from_utf8(&buf[..got]).unwrap());
    }
    text.split_terminator("\r\n").map(str::to_owned).collect()
}

#[test]
fn serve_resp_incr_get_and_batch_issue_each_keys_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    assert!(
        server.log().contains("listening for RESP"),
        "{}",
        server.log()
    );
    let mut con = connect(&server);

    // Segment: INCR and GET both take the next ID, as HTTP does, from one allocator.
    assert_eq!(cmd::<u64>(&mut con, &["INCR", "order"]).unwrap(), 100);
    assert_eq!(cmd::<u64>(&mut con, &["GET", "order"]).unwrap(), 101);
    assert_eq!(cmd::<u64>(&mut con, &["incr", "order"]).unwrap(), 102);
    assert_eq!(
        get(&client(), &server.url("/api/segment/get/order")).1,
        "103"
    );
    let batch: Vec<u64> = cmd(&mut con, &["IDMINT.BATCH", "order", "5"]).unwrap();
    assert_eq!(batch, [104, 105, 106, 107, 108]);

    // Snowflake: integers, increasing, this node's worker.
    let a: u64 = cmd(&mut con, &["INCR", "sf"]).unwrap();
    let b: u64 = cmd(&mut con, &["GET", "sf"]).unwrap();
    assert!(0 < a && a < b && b < 1 << 63, "{a} {b}");
    let batch: Vec<u64> = cmd(&mut con, &["IDMINT.BATCH", "sf", "10000"]).unwrap();
    assert_eq!(batch.len(), 10_000);
    assert!(crate::strictly_increasing(&batch) && batch[0] > b);
    // The raw reply is an integer, not a string that parses as one.
    let raw: Value = cmd(&mut con, &["INCR", "sf"]).unwrap();
    assert!(matches!(raw, Value::Int(_)), "{raw:?}");

    // A UUID key answers a bulk string; a public key an obfuscated integer.
    let uuid: String = cmd(&mut con, &["INCR", "u7"]).unwrap();
    assert_eq!((uuid.len(), uuid.as_bytes()[14]), (36, b'7'), "{uuid}");
    let uuids: Vec<String> = cmd(&mut con, &["IDMINT.BATCH", "u7", "3"]).unwrap();
    assert_eq!(uuids.len(), 3);
    let public: Vec<u64> = cmd(&mut con, &["IDMINT.BATCH", "pub", "100"]).unwrap();
    assert_eq!(public.iter().collect::<HashSet<_>>().len(), 100);
    assert!(!crate::strictly_increasing(&public));

    // Failures to issue: `-CODE message`, and the connection goes on.
    let message = expect_code(cmd::<u64>(&mut con, &["INCR", "nope"]), "KEY_NOT_FOUND");
    assert!(message.contains("nope"), "{message}");
    expect_code(cmd::<u64>(&mut con, &["GET", "a b"]), "INVALID_KEY");
    for count in ["0", "-1", "ten", "100001"] {
        let message = expect_code(
            cmd::<Vec<u64>>(&mut con, &["IDMINT.BATCH", "sf", count]),
            "INVALID_COUNT",
        );
        assert!(message.contains("100000"), "{message}");
    }
    // Nothing was issued by the failures.
    assert_eq!(cmd::<u64>(&mut con, &["INCR", "order"]).unwrap(), 109);

    // Every ID is counted under its key, as soon as its reply is read (the
    // connection counts a key's IDs in batches, before writing the replies).
    let (_, metrics) = get(&client(), &server.url("/metrics"));
    for (key, n) in [("order", 10), ("sf", 10_003), ("u7", 4), ("pub", 100)] {
        let label = format!("key=\"{key}\"");
        let line = metrics
            .lines()
            .find(|l| l.starts_with("idmint_ids_issued_total{") && l.contains(&label))
            .unwrap_or_else(|| panic!("no series for {key}: {metrics}"));
        assert!(line.ends_with(&format!(" {n}")), "{line}");
    }
}

#[test]
fn serve_resp_pipelines_answer_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let mut con = connect(&server);

    for (key, first) in [("sf", None), ("bulk", Some(1u64))] {
        let mut pipe = redis::pipe();
        for _ in 0..1000 {
            pipe.cmd("INCR").arg(key);
        }
        let ids: Vec<u64> = pipe.query(&mut con).unwrap();
        assert_eq!(ids.len(), 1000);
        assert!(crate::strictly_increasing(&ids), "{key}");
        if let Some(first) = first {
            assert_eq!(ids, (first..first + 1000).collect::<Vec<_>>());
        }
    }

    // Raw: a pipeline of mixed commands in one write (arrays and inline).
    let mut s = TcpStream::connect(resp_addr(&server)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut bytes = Vec::new();
    for i in 0..200 {
        if i % 2 == 0 {
            bytes.extend_from_slice(b"*2\r\n$4\r\nINCR\r\n$4\r\nbulk\r\n");
        } else {
            bytes.extend_from_slice(b"INCR bulk\r\n");
        }
    }
    bytes.extend_from_slice(b"PING\r\n");
    s.write_all(&bytes).unwrap();
    let lines = read_lines(&mut s, 201);
    let expected: Vec<String> = (1001..1201).map(|id| format!(":{id}")).collect();
    assert_eq!(lines[..200], expected[..]);
    assert_eq!(lines[200], "+PONG");
}

#[test]
fn serve_resp_answers_ping_info_quit_and_what_clients_send_at_connect() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let mut con = connect(&server);

    assert_eq!(cmd::<String>(&mut con, &["PING"]).unwrap(), "PONG");
    assert_eq!(cmd::<String>(&mut con, &["PING", "hi"]).unwrap(), "hi");
    assert_eq!(
        cmd::<String>(&mut con, &["ECHO", "a\r\nb"]).unwrap(),
        "a\r\nb"
    );
    let _: u64 = cmd(&mut con, &["INCR", "sf"]).unwrap();
    let info: String = cmd(&mut con, &["INFO"]).unwrap();
    for field in [
        "idmint_version:",
        "uptime_in_seconds:",
        "worker:0\r\n",
        "registry:file\r\n",
        "layout:twitter\r\n",
        "ids_issued:1\r\n",
    ] {
        assert!(info.contains(field), "{field}: {info}");
    }
    let info: String = cmd(&mut con, &["INFO", "server"]).unwrap();
    assert!(info.contains("# Server"));

    assert_eq!(
        cmd::<String>(&mut con, &["CLIENT", "SETNAME", "it"]).unwrap(),
        "OK"
    );
    assert_eq!(
        cmd::<String>(&mut con, &["CLIENT", "GETNAME"]).unwrap(),
        "it"
    );
    assert_eq!(cmd::<String>(&mut con, &["SELECT", "0"]).unwrap(), "OK");
    expect_code(cmd::<String>(&mut con, &["SELECT", "1"]), "ERR");
    assert!(
        cmd::<Vec<Value>>(&mut con, &["COMMAND"])
            .unwrap()
            .is_empty()
    );
    assert!(
        cmd::<Vec<Value>>(&mut con, &["COMMAND", "DOCS"])
            .unwrap()
            .is_empty()
    );
    let config: Vec<String> = cmd(&mut con, &["CONFIG", "GET", "appendonly"]).unwrap();
    assert_eq!(config, ["appendonly", "no"]);
    // RESP3 is refused so the client stays on RESP2; HELLO 2 is answered.
    expect_code(cmd::<Value>(&mut con, &["HELLO", "3"]), "NOPROTO");
    let hello: Vec<Value> = cmd(&mut con, &["HELLO", "2"]).unwrap();
    assert_eq!(hello.len(), 14);
    assert_eq!(cmd::<String>(&mut con, &["PING"]).unwrap(), "PONG");

    // QUIT: +OK, then the server closes.
    let (reply, closed) = raw_until_close(resp_addr(&server), b"PING\r\nQUIT\r\nPING\r\n");
    assert_eq!(reply, "+PONG\r\n+OK\r\n");
    assert!(closed);
}

#[test]
fn serve_resp_unknown_commands_and_wrong_arity_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let mut con = connect(&server);

    let message = expect_code(cmd::<Value>(&mut con, &["FLUSHALL"]), "ERR");
    assert_eq!(message, "unknown command 'FLUSHALL'");
    expect_code(cmd::<Value>(&mut con, &["INCRBY", "sf", "5"]), "ERR");
    for args in [
        &["INCR"][..],
        &["INCR", "sf", "sf"],
        &["GET"],
        &["IDMINT.BATCH", "sf"],
        &["ECHO"],
        &["PING", "a", "b"],
    ] {
        let message = expect_code(cmd::<Value>(&mut con, args), "ERR");
        let name = args[0].to_ascii_lowercase();
        assert_eq!(
            message,
            format!("wrong number of arguments for '{name}' command")
        );
    }
    // Still the same connection, still serving.
    assert!(cmd::<u64>(&mut con, &["INCR", "sf"]).unwrap() > 0);
}

#[test]
fn serve_resp_malformed_and_oversize_requests_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let addr = resp_addr(&server).to_owned();
    let mut con = connect(&server);

    let long_inline = vec![b'A'; 70_000];
    let cases: &[(&[u8], &str)] = &[
        (b"*x\r\n", "invalid multibulk length"),
        (b"*1\r\n:1\r\n", "expected '$'"),
        (b"*1\r\n$x\r\n", "invalid bulk length"),
        (b"*1\r\n$-5\r\n", "invalid bulk length"),
        (b"*1\r\n$4\r\nPINGxx\r\n", "expected '\\r\\n'"),
        // Over the limits: answered from the header alone, before any data.
        (b"*1\r\n$1000000\r\n", "invalid bulk length"),
        (b"*100000\r\n", "invalid multibulk length"),
        (&long_inline, "too big inline request"),
        // A whole request first: answered, then the bad one closes.
        (b"PING\r\n*1\r\n:1\r\n", "expected '$'"),
    ];
    for &(input, expected) in cases {
        let (reply, closed) = raw_until_close(&addr, input);
        let shown = String::from_utf8_lossy(&input[..input.len().min(40)]).into_owned();
        let reply = reply.strip_prefix("+PONG\r\n").unwrap_or(&reply);
        assert!(
            reply.starts_with("-ERR Protocol error: ") && reply.contains(expected),
            "{shown:?}: {reply:?}"
        );
        assert_eq!(reply.matches("\r\n").count(), 1, "{reply:?}");
        assert!(closed, "{shown:?}: not closed");
    }
    // The others are unaffected.
    assert_eq!(cmd::<String>(&mut con, &["PING"]).unwrap(), "PONG");
    assert!(cmd::<u64>(&mut con, &["INCR", "sf"]).unwrap() > 0);
    assert_eq!(get(&client(), &server.url("/healthz")).0, 200);
}

#[test]
fn serve_resp_eight_connections_get_10k_ids_each_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    for key in ["sf", "bulk"] {
        let per_connection: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        let mut con = connect(&server);
                        let mut ids = Vec::with_capacity(10_000);
                        for _ in 0..10 {
                            let mut pipe = redis::pipe();
                            for _ in 0..1000 {
                                pipe.cmd("INCR").arg(key);
                            }
                            let batch: Vec<u64> = pipe.query(&mut con).unwrap();
                            ids.extend(batch);
                        }
                        assert!(crate::strictly_increasing(&ids), "{key}");
                        ids
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut seen = HashSet::with_capacity(80_000);
        for ids in &per_connection {
            assert_eq!(ids.len(), 10_000);
            for &id in ids {
                assert!(id > 0 && id < 1 << 63);
                assert!(seen.insert(id), "{key}: duplicate {id}");
            }
        }
        assert_eq!(seen.len(), 80_000);
    }
}

#[test]
fn serve_resp_stops_with_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let addr = resp_addr(&server).to_owned();
    // An idle client and one halfway through a request.
    let mut idle = connect(&server);
    assert!(cmd::<u64>(&mut idle, &["INCR", "sf"]).unwrap() > 0);
    let mut half = TcpStream::connect(&addr).unwrap();
    half.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    half.write_all(b"*2\r\n$4\r\nINCR\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));

    let stopping = std::thread::spawn(move || server.terminate());
    // The half-read request is finished and answered, then the connection closes.
    std::thread::sleep(Duration::from_millis(300));
    half.write_all(b"$5\r\norder\r\n").unwrap();
    let mut reply = String::new();
    half.read_to_string(&mut reply).unwrap();
    assert_eq!(reply, ":100\r\n");

    let (status, log) = stopping.join().unwrap();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("RESP: no new connections"), "{log}");
    assert!(log.contains("worker claim released"), "{log}");
    assert!(TcpStream::connect(&addr).is_err(), "still accepting");
}
