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

[segment.keys.odd]
step = 10
delta = 2
remainder = 1

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
    let commands: Vec<Value> = cmd(&mut con, &["COMMAND"]).unwrap();
    let count: usize = cmd(&mut con, &["COMMAND", "COUNT"]).unwrap();
    assert_eq!(commands.len(), count);
    let infos: Vec<Value> = cmd(&mut con, &["COMMAND", "INFO"]).unwrap();
    assert_eq!(infos.len(), count, "no names: every command, as Redis 7");
    let docs: Vec<Value> = cmd(&mut con, &["COMMAND", "DOCS", "incr"]).unwrap();
    assert_eq!(docs.len(), 2, "{docs:?}");
    let config: Vec<String> = cmd(&mut con, &["CONFIG", "GET", "appendonly"]).unwrap();
    assert_eq!(config, ["appendonly", "no"]);
    // Protocols other than 2 and 3 are refused; HELLO 2 is answered.
    expect_code(cmd::<Value>(&mut con, &["HELLO", "4"]), "NOPROTO");
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
    expect_code(
        cmd::<Value>(&mut con, &["INCRBY", "sf", "5"]),
        "NOT_CONTIGUOUS",
    );
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

/// Sends inline `requests` on `s` and returns the replies, up to the reply of
/// a final `PING` marker (left out).
fn exchange(s: &mut TcpStream, requests: &str) -> String {
    const MARK: &str = "$11\r\nidmint-mark\r\n";
    s.write_all(format!("{requests}PING idmint-mark\r\n").as_bytes())
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.ends_with(MARK.as_bytes()) {
        let got = s.read(&mut buf).unwrap();
        assert!(got > 0, "closed after {:?}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..got]);
    }
    out.truncate(out.len() - MARK.len());
    String::from_utf8(out).unwrap()
}

fn raw_connect(server: &Served) -> TcpStream {
    let s = TcpStream::connect(resp_addr(server)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// The number after `:` of an integer reply.
fn int_reply(reply: &str) -> u64 {
    reply
        .strip_prefix(':')
        .and_then(|r| r.strip_suffix("\r\n"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an integer reply: {reply:?}"))
}

#[test]
fn serve_resp_hello_3_answers_resp3_until_hello_2_or_reset() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let mut s = raw_connect(&server);

    // Before HELLO: RESP2, a null bulk string.
    assert_eq!(exchange(&mut s, "CLIENT GETNAME\r\n"), "$-1\r\n");
    let hello = exchange(&mut s, "HELLO 3\r\n");
    assert!(
        hello.starts_with("%7\r\n$6\r\nserver\r\n$6\r\nidmint\r\n$7\r\nversion\r\n"),
        "{hello:?}"
    );
    assert!(
        hello.contains("$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:"),
        "{hello:?}"
    );
    assert!(hello.ends_with("$7\r\nmodules\r\n*0\r\n"), "{hello:?}");
    // RESP3's null, map, verbatim string and set.
    assert_eq!(exchange(&mut s, "CLIENT GETNAME\r\n"), "_\r\n");
    assert_eq!(
        exchange(&mut s, "CONFIG GET save\r\n"),
        "%1\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    let info = exchange(&mut s, "INFO server\r\n");
    assert!(
        info.starts_with('=') && info.contains("\r\ntxt:# Server\r\n"),
        "{info:?}"
    );
    assert!(!info.contains("# Stats"), "{info:?}");
    assert_eq!(exchange(&mut s, "INFO nosuch\r\n"), "=4\r\ntxt:\r\n");
    let info = exchange(&mut s, "COMMAND INFO incr nosuch\r\n");
    assert!(
        info.starts_with("*2\r\n*10\r\n$4\r\nincr\r\n:2\r\n~3\r\n+write\r\n"),
        "{info:?}"
    );
    assert!(info.ends_with("_\r\n"), "{info:?}");
    let client_info = exchange(&mut s, "CLIENT INFO\r\n");
    assert!(client_info.contains(" resp=3 "), "{client_info:?}");
    // IDs are integers as before.
    int_reply(&exchange(&mut s, "INCR order\r\n"));

    // SETNAME and a bad option; a failing HELLO changes nothing.
    let hello = exchange(&mut s, "HELLO 2 SETNAME idmint-test\r\n");
    assert!(hello.starts_with("*14\r\n"), "{hello:?}");
    assert_eq!(
        exchange(&mut s, "CLIENT GETNAME\r\n"),
        "$11\r\nidmint-test\r\n"
    );
    assert_eq!(
        exchange(&mut s, "HELLO 3 FOO\r\n"),
        "-ERR Syntax error in HELLO option 'FOO'\r\n"
    );
    assert!(exchange(&mut s, "HELLO 4\r\n").starts_with("-NOPROTO "));
    assert!(exchange(&mut s, "HELLO x\r\n").starts_with("-ERR Protocol version"));
    // No key has a token here: AUTH in HELLO is refused as Redis refuses it.
    assert!(exchange(&mut s, "HELLO 3 AUTH default pw\r\n").starts_with("-ERR AUTH"));
    assert_eq!(
        exchange(&mut s, "CLIENT GETNAME\r\n"),
        "$11\r\nidmint-test\r\n"
    );

    // RESET: RESP2, no name.
    assert!(exchange(&mut s, "HELLO 3\r\n").starts_with('%'));
    assert_eq!(exchange(&mut s, "RESET\r\n"), "+RESET\r\n");
    assert_eq!(exchange(&mut s, "CLIENT GETNAME\r\n"), "$-1\r\n");
    assert!(exchange(&mut s, "CLIENT TRACKING on\r\n").starts_with("-ERR client-side caching"),);
}

#[test]
fn serve_resp_multi_issues_ids_only_at_exec_and_only_for_a_clean_queue() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let mut s = raw_connect(&server);

    let first = int_reply(&exchange(&mut s, "INCR order\r\n"));
    assert_eq!(
        exchange(
            &mut s,
            "MULTI\r\nINCR order\r\nIDMINT.BATCH order 2\r\nPING\r\nEXEC\r\n"
        ),
        format!(
            "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n:{}\r\n*2\r\n:{}\r\n:{}\r\n+PONG\r\n",
            first + 1,
            first + 2,
            first + 3
        )
    );
    // DISCARD: nothing queued ran.
    assert_eq!(
        exchange(&mut s, "MULTI\r\nINCR order\r\nINCR order\r\nDISCARD\r\n"),
        "+OK\r\n+QUEUED\r\n+QUEUED\r\n+OK\r\n"
    );
    assert_eq!(int_reply(&exchange(&mut s, "INCR order\r\n")), first + 4);
    // A command that can't be queued aborts the whole transaction, as Redis:
    // an unknown command, a wrong arity, a bad count, INCRBY of a snowflake key.
    for bad in [
        "FOO",
        "INCR",
        "IDMINT.BATCH order 0",
        "INCRBY order -2",
        "INCRBY sf 5",
    ] {
        let replies = exchange(&mut s, &format!("MULTI\r\nINCR order\r\n{bad}\r\nEXEC\r\n"));
        let lines: Vec<&str> = replies.split_terminator("\r\n").collect();
        assert_eq!(lines[..2], ["+OK", "+QUEUED"], "{bad}: {replies:?}");
        assert!(lines[2].starts_with('-'), "{bad}: {replies:?}");
        assert_eq!(
            lines[3], "-EXECABORT Transaction discarded because of previous errors.",
            "{bad}"
        );
    }
    assert_eq!(int_reply(&exchange(&mut s, "INCR order\r\n")), first + 5);
    // What Redis refuses inside a transaction, without aborting it.
    assert_eq!(
        exchange(&mut s, "MULTI\r\nMULTI\r\nWATCH order\r\nEXEC\r\n"),
        "+OK\r\n-ERR MULTI calls can not be nested\r\n\
         -ERR WATCH inside MULTI is not allowed\r\n*0\r\n"
    );
    assert_eq!(
        exchange(&mut s, "EXEC\r\nDISCARD\r\nUNWATCH\r\n"),
        "-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n+OK\r\n"
    );
    assert!(exchange(&mut s, "WATCH order\r\n").starts_with("-ERR WATCH is not supported"));
    // A transaction holds at most 4 MiB of queued requests.
    let echo = format!("ECHO {}\r\n", "x".repeat(65_000));
    let replies = exchange(&mut s, &format!("MULTI\r\n{}EXEC\r\n", echo.repeat(70)));
    let lines: Vec<&str> = replies.split_terminator("\r\n").collect();
    assert_eq!(lines[0], "+OK");
    assert!(
        lines[1..65].iter().all(|l| *l == "+QUEUED"),
        "{:?}",
        &lines[..66]
    );
    assert!(
        lines[65].starts_with("-ERR transaction too large"),
        "{}",
        lines[65]
    );
    assert_eq!(
        lines.last().copied(),
        Some("-EXECABORT Transaction discarded because of previous errors.")
    );
    // A connection closed mid-transaction issues nothing either.
    s.write_all(b"MULTI\r\nINCR order\r\nINCR order\r\n")
        .unwrap();
    drop(s);
    let mut s = raw_connect(&server);
    assert_eq!(int_reply(&exchange(&mut s, "INCR order\r\n")), first + 6);
    // The server counted exactly the IDs it answered.
    let (_, metrics) = get(&client(), &server.url("/metrics"));
    assert!(
        metrics.contains("idmint_ids_issued_total{key=\"order\",strategy=\"segment\"} 7\n"),
        "{metrics}"
    );
}

#[test]
fn serve_resp_incrby_reserves_one_run_and_answers_its_last() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let mut con = connect(&server);

    let first: u64 = cmd(&mut con, &["INCR", "order"]).unwrap();
    // Across the step of 10: still one run, before the next INCR.
    let last: u64 = cmd(&mut con, &["INCRBY", "order", "25"]).unwrap();
    assert_eq!(last, first + 25);
    let next: u64 = cmd(&mut con, &["INCR", "order"]).unwrap();
    assert_eq!(next, last + 1);
    // Bad counts: a typed error, nothing issued.
    for bad in ["0", "-3", "abc", "1.5", "100001", ""] {
        let message = expect_code(
            cmd::<Value>(&mut con, &["INCRBY", "order", bad]),
            "INVALID_COUNT",
        );
        assert!(message.contains("1..=100000"), "{bad}: {message}");
    }
    assert_eq!(cmd::<u64>(&mut con, &["INCR", "order"]).unwrap(), last + 2);
    // A delta-2 key: the run is last-2(n-1) ..= last, step 2.
    let odd: u64 = cmd(&mut con, &["INCR", "odd"]).unwrap();
    assert_eq!(odd % 2, 1);
    let last_odd: u64 = cmd(&mut con, &["INCRBY", "odd", "12"]).unwrap();
    assert_eq!(last_odd, odd + 2 * 12);
    assert_eq!(
        cmd::<u64>(&mut con, &["INCR", "odd"]).unwrap(),
        last_odd + 2
    );

    // INCRBY 1 is INCR for every strategy (redis-py's incr() sends it).
    let sf: u64 = cmd(&mut con, &["INCRBY", "sf", "1"]).unwrap();
    assert!(sf > 1 << 40);
    let uuid: String = cmd(&mut con, &["INCRBY", "u7", "1"]).unwrap();
    assert_eq!(uuid.len(), 36);
    // More than one: only segment keys hand out a run.
    for key in ["sf", "u7", "pub"] {
        let message = expect_code(
            cmd::<Value>(&mut con, &["INCRBY", key, "3"]),
            "NOT_CONTIGUOUS",
        );
        assert!(message.contains(&format!("key \"{key}\"")), "{message}");
        assert!(message.contains("IDMINT.BATCH"), "{message}");
    }
    let (_, metrics) = get(&client(), &server.url("/metrics"));
    assert!(
        metrics.contains("idmint_ids_issued_total{key=\"order\",strategy=\"segment\"} 28\n"),
        "{metrics}"
    );
}

#[test]
fn serve_resp_transaction_of_large_batches_answers_every_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let mut con = connect(&server);

    // 5 batches of 100,000: megabytes of replies, written as EXEC runs.
    let mut tx = redis::pipe();
    tx.atomic();
    for _ in 0..5 {
        tx.cmd("IDMINT.BATCH").arg("bulk").arg(100_000);
    }
    let batches: Vec<Vec<u64>> = tx.query(&mut con).unwrap();
    let ids: Vec<u64> = batches.into_iter().flatten().collect();
    assert_eq!(ids.len(), 500_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let next: u64 = cmd(&mut con, &["INCR", "bulk"]).unwrap();
    assert!(next > ids[ids.len() - 1]);
}

#[test]
fn serve_resp_incrby_never_answers_a_run_split_by_another_nodes_segment() {
    if !crate::serve::postgres_up() {
        return;
    }
    let unique = crate::serve::unique_suffix();
    let url = idmint_testkit::POSTGRES_URL;
    let config = format!(
        r#"
[snowflake]
registry = "sql"

[snowflake.sql]
url = "{url}"
cluster = "resp-incrby-{unique}"
table = "idmint_worker_resp_{unique}"

[segment]
url = "{url}"
table = "alloc_resp_{unique}"

[segment.keys.order]
step = 10
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let [a, b] = [0, 1].map(|i| {
        Served::start_with_args(
            &dir.path().join(format!("node{i}")),
            Some(&config),
            &[],
            &["--resp-addr", "127.0.0.1:0"],
        )
    });
    let (mut con_a, mut con_b) = (connect(&a), connect(&b));
    let settle = || std::thread::sleep(Duration::from_millis(300));

    // A leases (and preloads) first, then B: B's segments sit right above
    // A's, so A's buffered IDs and A's next lease are no run.
    let first_a: u64 = cmd(&mut con_a, &["INCR", "order"]).unwrap();
    settle();
    let first_b: u64 = cmd(&mut con_b, &["INCR", "order"]).unwrap();
    settle();
    let last: u64 = cmd(&mut con_a, &["INCRBY", "order", "25"]).unwrap();
    let run = last - 24..=last;
    // The run A answered is A's alone: B's IDs, before and after, are not in it.
    let mut ids_b: Vec<u64> = vec![first_b];
    for _ in 0..30 {
        ids_b.push(cmd(&mut con_b, &["INCR", "order"]).unwrap());
    }
    assert!(!run.contains(&first_a));
    for id in &ids_b {
        assert!(
            !run.contains(id),
            "B's ID {id} is in A's INCRBY run {run:?}"
        );
    }
    let next_a: u64 = cmd(&mut con_a, &["INCR", "order"]).unwrap();
    assert!(next_a > last);
    // The split run was dropped and taken again, and said so.
    let log = a.log();
    assert!(
        log.contains("INCRBY run not contiguous across segments"),
        "{log}"
    );
}
