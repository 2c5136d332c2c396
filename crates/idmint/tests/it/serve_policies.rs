//! `idmint serve` with the snowflake policies of `[snowflake]`
//! (`clock_behind`, `sequence_exhausted`, `sequence_start`): a borrowing
//! server hands out a batch longer than a tick without waiting for the clock,
//! and a bad policy stops the start naming its key. Also per-key tokens
//! (`keys.<name>.token`) on the HTTP ID endpoints and over RESP.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use reqwest::StatusCode;

use crate::serve::{
    BadConfig, Served, assert_start_refused, binary_ids, client, expect_error, get, spawn,
};

/// The `twitter` layout's sequence width: an ID's time is `id >> 22` ms.
const TIME_SHIFT: u32 = 22;

/// The value of the unlabelled sample `name` in a Prometheus text body.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} missing: {text}"))
        .trim()
        .parse()
        .unwrap()
}

const EXHAUSTION_WAITS: &str = "idmint_snowflake_sequence_exhaustion_waits_total";

#[test]
fn serve_sequence_exhausted_borrow_issues_long_batches_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[snowflake]\nsequence_exhausted = \"borrow:1s\"\nclock_behind = \"borrow:50ms\"\n\
                  sequence_start = \"zero\"\n\n[keys.sf]\nstrategy = \"snowflake\"\n";
    let server = Served::start(&dir.path().join("borrow"), Some(config), &[]);
    let c = client();
    let mut seen = HashSet::new();
    let mut last = 0;
    for _ in 0..3 {
        // 100,000 IDs are 25 ticks of 4,096: the `wait` policy sleeps through
        // 24 of them; borrowing takes them at once, ahead of the clock.
        let ids = binary_ids(&c, &server, "sf", 100_000);
        assert!(ids[0] > last, "not increasing across batches");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "not increasing");
        let span_ms = (ids[ids.len() - 1] >> TIME_SHIFT) - (ids[0] >> TIME_SHIFT);
        assert!(span_ms >= 24, "a 100,000 batch spans {span_ms} ticks");
        last = ids[ids.len() - 1];
        seen.extend(ids);
    }
    assert_eq!(seen.len(), 300_000, "duplicate IDs");
    let (status, text) = get(&c, &server.url("/metrics"));
    assert!(status.is_success());
    assert_eq!(metric(&text, EXHAUSTION_WAITS), 0.0, "borrow never waits");
    drop(server);

    // The default (`wait`) does wait for the same batch: the metric above is
    // what tells the two apart.
    let server = Served::start(
        &dir.path().join("wait"),
        Some("[keys.sf]\nstrategy = \"snowflake\"\n"),
        &[],
    );
    binary_ids(&c, &server, "sf", 100_000);
    let (_, text) = get(&c, &server.url("/metrics"));
    assert!(metric(&text, EXHAUSTION_WAITS) > 0.0, "{text}");
}

#[test]
fn serve_rejects_bad_snowflake_policies_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[BadConfig] = &[
        (
            Some("[snowflake]\nclock_behind = \"sometimes\"\n"),
            &[],
            "snowflake.clock_behind",
        ),
        (
            None,
            &[("IDMINT_SNOWFLAKE__SEQUENCE_EXHAUSTED", "borrow")],
            "snowflake.sequence_exhausted",
        ),
        (
            Some("[snowflake]\nsequence_start = \"random:99999\"\n"),
            &[],
            "snowflake.sequence_start",
        ),
        (
            Some("[snowflake]\nclock_behind = \"rollback-bits\"\n"),
            &[],
            "snowflake.clock_behind",
        ),
    ];
    assert_start_refused(dir.path(), cases);
}

const TOKEN: &str = "s3cret-Token_42";

const TOKEN_KEYS: &str = r#"
[segment.keys.seg]
step = 10

[keys.seg]
strategy = "segment"

[keys.locked]
strategy = "snowflake"
token = "s3cret-Token_42"

[keys.open]
strategy = "snowflake"
"#;

/// A server with `TOKEN_KEYS`, `seg`'s token (all digits) from the environment.
fn start_with_tokens(data_dir: &std::path::Path) -> Served {
    Served::start_with_args(
        data_dir,
        Some(TOKEN_KEYS),
        &[("IDMINT_KEYS__SEG__TOKEN", "12345")],
        &["--resp-addr", "127.0.0.1:0"],
    )
}

#[test]
fn serve_key_tokens_guard_the_http_id_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_tokens(&dir.path().join("data"));
    let c = client();
    let locked = [
        "/v1/ids/locked?count=3",
        "/api/snowflake/get/locked",
        "/api/segment/get/seg",
    ];
    for path in locked {
        let r = c.get(server.url(path)).send().unwrap();
        assert_eq!(r.headers()["www-authenticate"], "Bearer", "{path}");
        let message = expect_error(r, StatusCode::UNAUTHORIZED, "unauthorized");
        assert!(message.contains("token"), "{message}");
        let r = c
            .get(server.url(path))
            .bearer_auth("not-it")
            .send()
            .unwrap();
        assert_eq!(r.headers()["www-authenticate"], "Bearer", "{path}");
        expect_error(r, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    // The right token, as a header or in the query.
    let r = c
        .get(server.url("/v1/ids/locked?count=3"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().unwrap().lines().count(), 3);
    let (status, body) = get(
        &c,
        &server.url(&format!("/api/snowflake/get/locked?token={TOKEN}")),
    );
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.trim().parse::<u64>().unwrap() > 0);
    let r = c
        .get(server.url("/api/segment/get/seg"))
        .bearer_auth("12345")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // One key's token opens no other key.
    let r = c
        .get(server.url("/api/segment/get/seg"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    expect_error(r, StatusCode::UNAUTHORIZED, "unauthorized");
    // Keys without a token stay open.
    let (status, _) = get(&c, &server.url("/v1/ids/open?count=2"));
    assert_eq!(status, StatusCode::OK);
    let log = server.log();
    assert!(!log.contains(TOKEN) && !log.contains("12345"), "{log}");
}

/// Sends one RESP request and reads `lines` reply lines.
fn resp(s: &mut TcpStream, args: &[&str], lines: usize) -> Vec<String> {
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    let mut byte = [0u8; 1];
    while text.matches("\r\n").count() < lines {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "closed after {text:?}");
        text.push(char::from(byte[0]));
    }
    text.split_terminator("\r\n").map(str::to_owned).collect()
}

#[test]
fn serve_key_tokens_need_auth_over_resp() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_tokens(&dir.path().join("data"));
    let connect = || {
        let s = TcpStream::connect(server.resp_addr.as_deref().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    };
    let mut s = connect();
    for args in [
        &["INCR", "locked"][..],
        &["GET", "locked"],
        &["IDMINT.BATCH", "locked", "3"],
        &["GET", "seg"],
    ] {
        let reply = resp(&mut s, args, 1);
        assert!(reply[0].starts_with("-NOAUTH "), "{args:?}: {reply:?}");
    }
    assert!(resp(&mut s, &["INCR", "open"], 1)[0].starts_with(':'));
    let reply = resp(&mut s, &["AUTH", "not-it"], 1);
    assert!(reply[0].starts_with("-WRONGPASS "), "{reply:?}");
    assert_eq!(resp(&mut s, &["AUTH", TOKEN], 1), ["+OK"]);
    assert!(resp(&mut s, &["INCR", "locked"], 1)[0].starts_with(':'));
    let batch = resp(&mut s, &["IDMINT.BATCH", "locked", "3"], 4);
    assert_eq!(batch[0], "*3");
    assert!(batch[1..].iter().all(|l| l.starts_with(':')), "{batch:?}");
    // `seg` has its own token; `AUTH user token` works too.
    assert!(resp(&mut s, &["GET", "seg"], 1)[0].starts_with("-NOAUTH "));
    assert_eq!(resp(&mut s, &["AUTH", "default", "12345"], 1), ["+OK"]);
    assert!(resp(&mut s, &["GET", "seg"], 1)[0].starts_with(':'));
    // Authentication belongs to the connection.
    let mut other = connect();
    assert!(resp(&mut other, &["INCR", "locked"], 1)[0].starts_with("-NOAUTH "));
    let log = server.log();
    assert!(!log.contains(TOKEN) && !log.contains("12345"), "{log}");
}

/// The time source (`snowflake.clock`): `wall` starts and serves IDs that
/// decode to the wall clock's time, and every surface says which clock is in
/// use (its drift is 0 by definition); `monotonic` is the default. A bad
/// value stops the start with exit code 2 and one line naming the key.
#[test]
fn serve_clock_source_is_configurable_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let config = "[snowflake]\nclock = \"wall\"\n\n[keys.sf]\nstrategy = \"snowflake\"\n";
    let key = ("IDMINT_KEYS__SF__STRATEGY", "snowflake");
    for (name, config, env, source) in [
        ("wall", Some(config), &[][..], "wall"),
        (
            "wall-env",
            None,
            &[("IDMINT_SNOWFLAKE__CLOCK", "wall"), key][..],
            "wall",
        ),
        ("default", None, &[key][..], "monotonic"),
    ] {
        let server = Served::start(&dir.path().join(name), config, env);
        let before_ms = now_ms();
        let (status, body) = get(&c, &server.url("/v1/ids/sf?count=50"));
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
        let ids: Vec<u64> = body.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(ids.len(), 50);
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "{name}: not increasing"
        );
        let made_ms = (ids[0] >> TIME_SHIFT) + TWITTER_EPOCH_MS;
        assert!(
            made_ms + 2_000 >= before_ms && made_ms <= now_ms() + 2_000,
            "{name}: ID time {made_ms} ms, wall clock {before_ms} ms"
        );

        let (_, status) = get(&c, &server.url("/v1/status"));
        let status: serde_json::Value = serde_json::from_str(&status).unwrap();
        assert_eq!(status["clock"]["source"], source, "{name}: {status}");
        let drift = status["clock"]["drift_ms"].as_f64().unwrap();
        if source == "wall" {
            assert_eq!(drift, 0.0, "{name}");
        } else {
            assert!(drift.abs() < 60_000.0, "{name}: {drift}");
        }
        let (_, text) = get(&c, &server.url("/metrics"));
        assert!(
            text.lines().any(|l| l.starts_with(&format!(
                "idmint_clock_drift_seconds{{clock=\"{source}\"}} "
            ))),
            "{name}: {text}"
        );
        let (status, body) = get(&c, &server.url("/readyz"));
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
    }

    let bad_env = [("IDMINT_SNOWFLAKE__CLOCK", "ntp")];
    for (i, (config, env)) in [
        (Some("[snowflake]\nclock = \"sundial\"\n"), &[][..]),
        (None, &bad_env[..]),
    ]
    .into_iter()
    .enumerate()
    {
        let (mut child, _, log) = spawn(&dir.path().join(format!("bad{i}")), config, env);
        let status = child.wait().unwrap();
        let stderr = std::fs::read_to_string(log).unwrap();
        assert_eq!(status.code(), Some(2), "{stderr}");
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("error: "))
            .collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(
            errors[0].contains("snowflake.clock ") && errors[0].contains("monotonic"),
            "{stderr}"
        );
    }
}

/// The `twitter` layout's epoch, 2010-11-04T01:42:54.657Z, in Unix milliseconds.
const TWITTER_EPOCH_MS: u64 = 1_288_834_974_657;

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_millis()).unwrap()
}
