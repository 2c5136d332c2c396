//! `idmint serve`: the real binary on a free port with a temporary data
//! directory, driven over HTTP. The helpers here (`Served`, `client`, `get`)
//! are shared with `serve_cluster.rs`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde_json::Value;

/// A 128-bit obfuscation key for tests.
pub const OBFUSCATION_KEY: &str = "2b7e151628aed2a6abf7158809cf4f3c";

/// A running `idmint serve`, killed when dropped.
pub struct Served {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The RESP listener's `127.0.0.1:PORT`, when started with `--resp-addr`.
    pub resp_addr: Option<String>,
    log: PathBuf,
}

/// Spawns `idmint serve` on port 0 in `data_dir`, with `config` (TOML) if given
/// and `env` set (every other `IDMINT_` variable removed), without waiting.
pub fn spawn(
    data_dir: &Path,
    config: Option<&str>,
    env: &[(&str, &str)],
) -> (Child, PathBuf, PathBuf) {
    spawn_with_args(data_dir, config, env, &[])
}

/// [`spawn`] with more flags for `idmint serve` (`--resp-addr 127.0.0.1:0`).
pub fn spawn_with_args(
    data_dir: &Path,
    config: Option<&str>,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Child, PathBuf, PathBuf) {
    std::fs::create_dir_all(data_dir).unwrap();
    let tag = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let side = data_dir.with_extension(format!("run-{tag}"));
    std::fs::create_dir_all(&side).unwrap();
    let ready = side.join("ready");
    let log = side.join("stderr.log");
    let mut command = idmint_command();
    command.arg("serve");
    if let Some(text) = config {
        let path = side.join("idmint.toml");
        std::fs::write(&path, text).unwrap();
        command.arg("--config").arg(path);
    }
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--http-addr", "127.0.0.1:0", "--ready-file"])
        .arg(&ready)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    command.env("IDMINT_LOG", "info");
    for (name, value) in env {
        command.env(name, value);
    }
    (command.spawn().expect("run idmint serve"), ready, log)
}

/// The `idmint` binary with every `IDMINT_` variable of the test's
/// environment removed, so it sees only the settings a test gives it.
pub fn idmint_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idmint"));
    for (name, _) in std::env::vars() {
        if name.starts_with("IDMINT_") {
            command.env_remove(name);
        }
    }
    command
}

/// What `child` (an `idmint serve --ready-file path`) wrote to `path`, once
/// it did (up to 60 s; the server must not exit first).
#[track_caller]
pub fn ready_file_text(child: &mut Child, path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(child.try_wait().unwrap().is_none(), "the server exited");
        assert!(Instant::now() < deadline, "no ready file in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends SIGTERM to `child` and asserts it exits cleanly.
#[track_caller]
pub fn sigterm_and_wait(child: &mut Child) {
    let pid = child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

impl Served {
    /// Starts a server and waits (up to 60 s) until it is serving.
    #[track_caller]
    pub fn start(data_dir: &Path, config: Option<&str>, env: &[(&str, &str)]) -> Served {
        Served::start_with_args(data_dir, config, env, &[])
    }

    /// [`Served::start`] with more flags for `idmint serve`.
    #[track_caller]
    pub fn start_with_args(
        data_dir: &Path,
        config: Option<&str>,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Served {
        let (mut child, ready, log) = spawn_with_args(data_dir, config, env, args);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                // The HTTP address, then `NAME=ADDR` lines for other listeners.
                if text.ends_with('\n') {
                    let mut lines = text.lines();
                    let addr = lines.next().unwrap_or_default().to_owned();
                    let resp_addr = lines
                        .find_map(|l| l.strip_prefix("resp="))
                        .map(str::to_owned);
                    return Served {
                        child,
                        addr,
                        resp_addr,
                        log,
                    };
                }
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "idmint serve exited ({status}) before serving: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "idmint serve did not start in 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The server's process ID (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits (up to 30 s) for the process to exit.
    pub fn terminate(mut self) -> (ExitStatus, String) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, self.log());
            }
            assert!(Instant::now() < deadline, "no exit 30 s after SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the machine's PostgreSQL answers: `false` after a loud SKIPPED
/// line (a failure under `CI=true`, through `require_service`).
pub fn postgres_up() -> bool {
    let up = std::net::TcpStream::connect_timeout(
        &"127.0.0.1:5432".parse().unwrap(),
        Duration::from_secs(2),
    )
    .is_ok();
    idmint_testkit::require_service("PostgreSQL", up)
}

/// A name part no other test run shares (process and microsecond), for the
/// tables and clusters a test makes on a shared database or coordinator.
pub fn unique_suffix() -> String {
    format!(
        "{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros()
    )
}

/// An HTTP client with a generous timeout (debug builds on a shared machine).
pub fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// GET, returning status and body text.
pub fn get(client: &Client, url: &str) -> (StatusCode, String) {
    let r = client.get(url).send().unwrap();
    (r.status(), r.text().unwrap())
}

/// Asserts an error response: `status`, a JSON body
/// `{"error":{"code": code, "message": ...}}`; returns the message.
#[track_caller]
pub fn expect_error(response: Response, status: StatusCode, code: &str) -> String {
    assert_eq!(response.status(), status, "{:?}", response.url().path());
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    assert!(!message.is_empty());
    message
}

/// The IDs of a binary (`application/octet-stream`) body: little-endian u64s.
pub fn le_u64s(bytes: &[u8]) -> Vec<u64> {
    assert_eq!(bytes.len() % 8, 0);
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `count` IDs of `key` as binary, checked against the count header.
pub fn binary_ids(client: &Client, base: &Served, key: &str, count: u64) -> Vec<u64> {
    let r = client
        .get(base.url(&format!("/v1/ids/{key}?count={count}")))
        .header("accept", "application/octet-stream")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-idmint-count"], count.to_string().as_str());
    let ids = le_u64s(&r.bytes().unwrap());
    assert_eq!(ids.len() as u64, count);
    ids
}

const KEYS: &str = r#"
# Names declared nowhere are segment keys here: these tests ask for
# unknown segment keys.
[server]
undeclared_keys = "segment"

[segment.keys.order]
step = 10
start = 100

[keys.sf]
strategy = "snowflake"

[keys.u4]
strategy = "uuid4"

[keys.u7]
strategy = "uuid7"
"#;

/// A node whose layout runs out while it runs leaves `/readyz` (a load
/// balancer stops sending it traffic), and said at start that the end was
/// near: here a 12-bit millisecond layout that ends 4 s after its epoch.
#[test]
fn serve_leaves_readyz_when_its_layout_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let epoch = jiff::Timestamp::now() - jiff::SignedDuration::from_millis(1500);
    let config = format!(
        "[snowflake]\nlayout = \"time=12,unit=1ms,epoch={},worker=10,sequence=12\"\n",
        epoch.round(jiff::Unit::Millisecond).unwrap()
    );
    let server = Served::start(&dir.path().join("data"), Some(&config), &[]);
    let c = client();
    let (status, body) = get(&c, &server.url("/readyz"));
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        server.log().contains("runs out within a year"),
        "{}",
        server.log()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = get(&c, &server.url("/readyz"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            assert!(body.contains("layout ran out at"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "still ready: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, body) = get(&c, &server.url("/api/snowflake/get/sf"));
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(body.contains("layout_exhausted"), "{body}");
}

#[test]
fn serve_answers_the_leaf_endpoints_health_and_decode() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(KEYS), &[]);
    let c = client();

    assert_eq!(get(&c, &server.url("/healthz")).0, StatusCode::OK);
    let (status, body) = get(&c, &server.url("/readyz"));
    assert_eq!(status, StatusCode::OK, "{body}");
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["registry"], "file");

    // Leaf's snowflake endpoint: the ID as plain text, increasing.
    let (status, first) = get(&c, &server.url("/api/snowflake/get/anything"));
    assert_eq!(status, StatusCode::OK);
    let first: u64 = first.parse().unwrap();
    let second: u64 = get(&c, &server.url("/api/snowflake/get/anything"))
        .1
        .parse()
        .unwrap();
    assert!(0 < first && first < second && second < 1 << 63);

    // Leaf's segment endpoint: the declared key starts at its start.
    let got: Vec<u64> = (0..3)
        .map(|_| {
            get(&c, &server.url("/api/segment/get/order"))
                .1
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(got, [100, 101, 102]);

    // Leaf's decode shape, and ours.
    let (status, body) = get(
        &c,
        &server.url(&format!("/decodeSnowflakeId?snowflakeId={second}")),
    );
    assert_eq!(status, StatusCode::OK, "{body}");
    let leaf: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(leaf["workerId"], "0");
    let timestamp = leaf["timestamp"].as_str().unwrap();
    let (ms, shown) = timestamp.split_once('(').unwrap();
    let ms: i64 = ms.parse().unwrap();
    let now_ms = jiff::Timestamp::now().as_millisecond();
    assert!((now_ms - ms).abs() < 60_000, "{timestamp}");
    assert!(
        shown.ends_with(')') && shown.len() == "2026-11-22 01:02:03.456)".len(),
        "{shown}"
    );

    let decoded: Value = c
        .get(server.url(&format!("/v1/decode/{second}")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(decoded["id"], second.to_string());
    assert_eq!(decoded["layout"], "twitter");
    assert_eq!(decoded["worker"], 0);
    assert_eq!(decoded["unix_ms"], ms);
    assert!(decoded["time"].as_str().unwrap().ends_with('Z'));
}

/// The parts of a response that must not depend on which path answered it.
fn answer_shape(r: reqwest::blocking::Response) -> (StatusCode, Vec<(String, String)>, String) {
    let status = r.status();
    let mut headers: Vec<(String, String)> = r
        .headers()
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "date" | "content-length"))
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
        .collect();
    headers.sort();
    let body = r.text().unwrap();
    // IDs differ between two calls; their form must not.
    let body = if body.bytes().all(|b| b.is_ascii_digit()) && !body.is_empty() {
        "<decimal ID>".to_owned()
    } else {
        body
    };
    (status, headers, body)
}

#[test]
fn serve_single_id_routes_answer_alike_with_or_without_the_router() {
    // `GET /api/{snowflake,segment}/get/{key}` without a query is answered
    // before axum's router (http/conn.rs); with an empty query (`?`) the same
    // request goes through the router. Both must say the same thing.
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{KEYS}\n[keys.locked]\nstrategy = \"snowflake\"\ntoken = \"tk\"\n");
    let server = Served::start(&dir.path().join("data"), Some(&config), &[]);
    let c = client();
    let cases: &[(&str, Option<&str>)] = &[
        ("/api/snowflake/get/sf", None),
        ("/api/segment/get/order", None),
        // An undeclared segment key: created on first use, or refused, alike.
        ("/api/segment/get/never.declared", None),
        ("/api/snowflake/get/locked", None),
        ("/api/snowflake/get/locked", Some("tk")),
        ("/api/snowflake/get/locked", Some("wrong")),
    ];
    for &(path, token) in cases {
        let send = |url: String| {
            let request = c.get(url);
            let request = match token {
                Some(token) => request.bearer_auth(token),
                None => request,
            };
            answer_shape(request.send().unwrap())
        };
        let hot = send(server.url(path));
        let routed = send(server.url(&format!("{path}?")));
        assert_eq!(hot, routed, "{path} with token {token:?}");
    }
    // Both paths count in the same latency series: on the snowflake route,
    // two 200s (sf, locked with its token) and two 401s (no token, wrong one)
    // each way.
    let (_, metrics) = get(&c, &server.url("/metrics"));
    for (class, n) in [("2xx", 4), ("4xx", 4)] {
        let series = format!(
            "idmint_http_request_duration_seconds_count{{route=\"/api/snowflake/get/{{key}}\",status=\"{class}\"}} {n}"
        );
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} in {metrics}"
        );
    }
}

#[test]
fn serve_v1_ids_come_as_text_json_or_binary() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(KEYS), &[]);
    let c = client();

    // Text: one per line.
    let (status, text) = get(&c, &server.url("/v1/ids/sf?count=5"));
    assert_eq!(status, StatusCode::OK);
    let ids = crate::integers(&text);
    assert_eq!(ids.len(), 5);
    assert!(crate::strictly_increasing(&ids));

    // JSON: strings, with the key and its strategy.
    let body: Value = c
        .get(server.url("/v1/ids/order?count=25"))
        .header("accept", "application/json")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(body["strategy"], "segment");
    assert_eq!(body["count"], 25);
    let ids: Vec<u64> = body["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, (100..125).collect::<Vec<_>>());

    // Binary: little-endian u64s, continuing where JSON stopped.
    assert_eq!(binary_ids(&c, &server, "order", 3), [125, 126, 127]);
    let sf = binary_ids(&c, &server, "sf", 10_000);
    assert!(crate::strictly_increasing(&sf));

    // A key created in the store but not in config is a segment key; no count is 1.
    let (status, one) = get(&c, &server.url("/v1/ids/order"));
    assert_eq!((status, one.as_str()), (StatusCode::OK, "128\n"));

    // UUID keys and the UUID endpoint.
    for (url, version) in [
        ("/v1/ids/u4?count=3", '4'),
        ("/v1/ids/u7?count=3", '7'),
        ("/v1/uuid?version=4&count=3", '4'),
        ("/v1/uuid?count=3", '7'),
    ] {
        let (status, text) = get(&c, &server.url(url));
        assert_eq!(status, StatusCode::OK, "{url}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{url}");
        for line in lines {
            assert_eq!(line.len(), 36, "{line}");
            assert_eq!(line.as_bytes()[14] as char, version, "{url}: {line}");
        }
    }
    let r = c
        .get(server.url("/v1/uuid?version=7&count=4"))
        .header("accept", "application/octet-stream")
        .send()
        .unwrap();
    assert_eq!(r.bytes().unwrap().len(), 64);
    let body: Value = c
        .get(server.url("/v1/uuid?version=7&count=2"))
        .header("accept", "application/json")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(body["ids"].as_array().unwrap().len(), 2);
}

#[test]
fn serve_errors_are_typed_json_with_fitting_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(KEYS), &[]);
    let c = client();
    let bad = StatusCode::BAD_REQUEST;
    let cases: &[(&str, StatusCode, &str)] = &[
        ("/v1/ids/sf?count=0", bad, "invalid_count"),
        ("/v1/ids/sf?count=1000000000000", bad, "invalid_count"),
        ("/v1/ids/sf?count=100001", bad, "invalid_count"),
        ("/v1/ids/sf?count=-1", bad, "invalid_count"),
        ("/v1/ids/sf?count=ten", bad, "invalid_count"),
        ("/v1/ids/order?count=0", bad, "invalid_count"),
        ("/v1/uuid?count=0", bad, "invalid_count"),
        ("/v1/uuid?version=5", bad, "invalid_version"),
        ("/v1/ids/nope", StatusCode::NOT_FOUND, "key_not_found"),
        (
            "/api/segment/get/nope",
            StatusCode::NOT_FOUND,
            "key_not_found",
        ),
        ("/v1/ids/a%20b", bad, "invalid_key"),
        ("/api/snowflake/get/a%20b", bad, "invalid_key"),
        ("/v1/decode/abc", bad, "invalid_id"),
        ("/v1/decode/-1", bad, "invalid_id"),
        ("/v1/decode/9223372036854775808", bad, "invalid_id"),
        ("/decodeSnowflakeId?snowflakeId=x", bad, "invalid_id"),
        ("/decodeSnowflakeId", bad, "invalid_id"),
        ("/v2/nothing", StatusCode::NOT_FOUND, "not_found"),
    ];
    for &(path, status, code) in cases {
        let message = expect_error(c.get(server.url(path)).send().unwrap(), status, code);
        if code == "invalid_count" && path.contains("1000000000000") {
            assert!(message.contains("100000"), "{message}");
        }
        // A bad name is a bad key whatever its route's strategy: a snowflake
        // route's message doesn't call it a segment key.
        if code == "invalid_key" {
            assert!(
                message.starts_with("invalid key \"a b\""),
                "{path}: {message}"
            );
        }
    }
    expect_error(
        c.post(server.url("/v1/ids/sf")).send().unwrap(),
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    // Nothing was issued by the failures: the segment key starts where it should.
    assert_eq!(get(&c, &server.url("/api/segment/get/order")).1, "100");
}

#[test]
fn serve_admin_api_needs_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    {
        // No token configured: 403, saying how to set one.
        let server = Served::start(&dir.path().join("off"), None, &[]);
        for (method, path) in [
            ("GET", "/v1/admin/keys"),
            ("GET", "/v1/admin/workers"),
            ("GET", "/v1/admin/fleet"),
        ] {
            let r = c
                .request(method.parse().unwrap(), server.url(path))
                .bearer_auth("anything")
                .send()
                .unwrap();
            let message = expect_error(r, StatusCode::FORBIDDEN, "admin_disabled");
            assert!(message.contains("IDMINT_ADMIN_TOKEN"), "{message}");
        }
    }
    let config = format!("{KEYS}\n[keys.pub]\nstrategy = \"snowflake\"\npublic = true\n");
    let server = Served::start(
        &dir.path().join("on"),
        Some(&config),
        &[
            ("IDMINT_ADMIN_TOKEN", "s3cret-token"),
            ("IDMINT_OBFUSCATION_KEY", OBFUSCATION_KEY),
        ],
    );
    let keys_url = server.url("/v1/admin/keys");
    expect_error(
        c.get(&keys_url).send().unwrap(),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    let r = c.get(&keys_url).bearer_auth("wrong").send().unwrap();
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    expect_error(r, StatusCode::UNAUTHORIZED, "unauthorized");

    // Create a key: usable at once; a second create is a conflict.
    let created = c
        .post(&keys_url)
        .bearer_auth("s3cret-token")
        .json(&serde_json::json!({"key": "invoice", "step": 50, "start": 7}))
        .send()
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(get(&c, &server.url("/api/segment/get/invoice")).1, "7");
    let again = c
        .post(&keys_url)
        .bearer_auth("s3cret-token")
        .json(&serde_json::json!({"key": "invoice", "step": 50, "start": 7}))
        .send()
        .unwrap();
    expect_error(again, StatusCode::CONFLICT, "key_exists");
    for body in [
        r#"{"key": "x"}"#,
        "not json",
        r#"{"key":"x","step":5,"extra":1}"#,
    ] {
        let r = c
            .post(&keys_url)
            .bearer_auth("s3cret-token")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap();
        expect_error(r, StatusCode::BAD_REQUEST, "invalid_json");
    }
    let r = c
        .post(&keys_url)
        .bearer_auth("s3cret-token")
        .json(&serde_json::json!({"key": "zero", "step": 0}))
        .send()
        .unwrap();
    expect_error(r, StatusCode::BAD_REQUEST, "invalid_spec");

    // List: the store's keys with buffers and steps, and the configured others.
    let listed: Value = c
        .get(&keys_url)
        .bearer_auth("s3cret-token")
        .send()
        .unwrap()
        .json()
        .unwrap();
    let keys = listed["keys"].as_array().unwrap();
    let invoice = keys.iter().find(|k| k["key"] == "invoice").unwrap();
    assert_eq!(invoice["step"], 50);
    assert_eq!(invoice["strategy"], "segment");
    assert!(invoice["current"]["first"].is_string(), "{invoice}");
    assert!(
        keys.iter()
            .any(|k| k["key"] == "sf" && k["strategy"] == "snowflake")
    );

    let workers: Value = c
        .get(server.url("/v1/admin/workers"))
        .bearer_auth("s3cret-token")
        .send()
        .unwrap()
        .json()
        .unwrap();
    let worker = &workers["workers"][0];
    assert_eq!(worker["registry"], "file");
    assert_eq!(worker["worker"], 0);
    assert_eq!(worker["lease"], "held");
    assert!(
        worker["persisted_mark"].is_string() && worker["clock_drift_ms"].is_number(),
        "{worker}"
    );

    // A public key hands out obfuscated IDs; reveal turns one back.
    let public: u64 = get(&c, &server.url("/api/snowflake/get/pub"))
        .1
        .parse()
        .unwrap();
    let revealed: Value = c
        .post(server.url("/v1/admin/reveal"))
        .bearer_auth("s3cret-token")
        .json(&serde_json::json!({"id": public.to_string()}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let internal: u64 = revealed["id"].as_str().unwrap().parse().unwrap();
    assert_ne!(internal, public);
    let decoded: Value = c
        .get(server.url(&format!("/v1/decode/{internal}")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(decoded["worker"], 0);
    let now_ms = jiff::Timestamp::now().as_millisecond();
    assert!(
        (now_ms - decoded["unix_ms"].as_i64().unwrap()).abs() < 60_000,
        "{decoded}"
    );
    // Public batches are public too: no internal ID shows.
    let batch = binary_ids(&c, &server, "pub", 1000);
    assert_eq!(batch.iter().collect::<HashSet<_>>().len(), 1000);
    assert!(!crate::strictly_increasing(&batch));
    let r = c
        .post(server.url("/v1/admin/reveal"))
        .bearer_auth("s3cret-token")
        .json(&serde_json::json!({"id": "not-a-number"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // The token never shows in the log.
    assert!(!server.log().contains("s3cret-token"));
}

#[test]
fn serve_sigterm_releases_the_lease_for_the_next_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let c = client();
    let first = Served::start(&data, None, &[]);
    let before: u64 = get(&c, &first.url("/api/snowflake/get/a"))
        .1
        .parse()
        .unwrap();

    // A second server on the same data directory is refused while the first runs.
    let (mut second, _, log) = spawn(&data, None, &[]);
    let status = second.wait().unwrap();
    assert!(!status.success());
    let stderr = std::fs::read_to_string(log).unwrap();
    assert!(stderr.contains("error: "), "{stderr}");

    let (status, log) = first.terminate();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("worker claim released"), "{log}");

    // The next server starts right away on the same directory and issues above.
    let started = Instant::now();
    let next = Served::start(&data, None, &[]);
    assert!(started.elapsed() < Duration::from_secs(20));
    let after: u64 = get(&c, &next.url("/api/snowflake/get/a"))
        .1
        .parse()
        .unwrap();
    assert!(after > before, "{after} <= {before}");
}

/// `--ready-file` names a server that is up, or nothing: a file left by an
/// earlier run is removed before anything can fail, the server writes its
/// file whole (no temporary file left beside it), and removes it when it
/// exits.
#[test]
fn serve_ready_file_names_a_live_server_or_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let serve = |config: &str| {
        let config_path = dir.path().join("idmint.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut command = idmint_command();
        command
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--http-addr", "127.0.0.1:0", "--ready-file"])
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    };

    // A stale file and a start that fails on its config: the file is gone.
    std::fs::write(&ready, "127.0.0.1:1\n").unwrap();
    let status = serve("[server]\nhttp_adr = \"x\"\n").status().unwrap();
    assert_eq!(status.code(), Some(2));
    assert!(!ready.exists(), "a failed start left the old ready file");

    // A server that runs: its file holds its address, whole, and goes with it.
    let mut child = serve("").spawn().unwrap();
    let text = ready_file_text(&mut child, &ready);
    assert!(text.ends_with('\n'), "{text:?}");
    let addr = text.lines().next().unwrap();
    let (status, _) = get(&client(), &format!("http://{addr}/readyz"));
    assert_eq!(status, StatusCode::OK);
    let beside: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(beside.is_empty(), "{beside:?}");
    sigterm_and_wait(&mut child);
    assert!(!ready.exists(), "the ready file outlived its server");
}

#[test]
fn serve_rejects_bad_config_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[BadConfig] = &[
        (Some("[server]\nhttp_adr = \"x\"\n"), &[], "http_adr"),
        (
            Some("[snowflake]\nlayout = \"twiter\"\n"),
            &[],
            "snowflake.layout",
        ),
        (Some("[server\n"), &[], "not valid TOML"),
        (
            None,
            &[("IDMINT_SERVER__MAX_COUNT", "lots")],
            "IDMINT_SERVER__MAX_COUNT",
        ),
        (
            None,
            &[("IDMINT_SERVER__MAX_COUNT", "0")],
            "server.max_count",
        ),
        (
            Some("[keys.p]\nstrategy = \"snowflake\"\npublic = true\n"),
            &[],
            "keys.p.public",
        ),
        // Unknown schemes are refused before any file is made or worker claimed.
        (
            Some("[segment]\nurl = \"nonsense://x\"\n"),
            &[],
            "segment.url",
        ),
        (
            Some("[snowflake]\nregistry = \"sql\"\n[snowflake.sql]\nurl = \"nonsense://x\"\n"),
            &[],
            "snowflake.sql.url",
        ),
    ];
    assert_start_refused(dir.path(), cases);
    for i in [6, 7] {
        let data = dir.path().join(format!("d{i}"));
        let made: Vec<_> = std::fs::read_dir(&data)
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(!made.iter().any(|f| f == "worker.lease"), "{made:?}");
    }
}

#[test]
fn serve_unreachable_registry_fails_the_start_saying_why_once() {
    let dir = tempfile::tempdir().unwrap();
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let config =
        "[snowflake]\nregistry = \"redis\"\n[snowflake.redis]\nurl = \"redis://127.0.0.1:1/\"\n";
    let (mut child, _, log) = spawn(&dir.path().join("data"), Some(config), &[]);
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(log).unwrap();
    assert!(!status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(line.contains("snowflake worker registry (redis)"), "{line}");
    assert_eq!(line.matches("refused").count(), 1, "{line}");
}

/// A config case for [`assert_start_refused`]: config file, environment, and
/// what the `error:` line must name.
pub type BadConfig<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)], &'a str);

/// Starts `idmint serve` once per case, each in its own directory under `dir`:
/// each must exit 2 with an `error:` line naming what the case expects.
pub fn assert_start_refused(dir: &Path, cases: &[BadConfig]) {
    for (i, &(config, env, expected)) in cases.iter().enumerate() {
        let (mut child, _, log) = spawn(&dir.join(format!("d{i}")), config, env);
        let status = child.wait().unwrap();
        let stderr = std::fs::read_to_string(log).unwrap();
        assert_eq!(status.code(), Some(2), "{stderr}");
        let line = stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or("");
        assert!(line.contains(expected), "{expected}: {stderr}");
    }
}

#[test]
fn serve_eight_clients_get_100k_ids_each_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[segment.keys.bulk]\nstep = 1000\n[keys.sf]\nstrategy = \"snowflake\"\n";
    let server = Served::start(&dir.path().join("data"), Some(config), &[]);
    for key in ["sf", "bulk"] {
        let per_client: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        let c = client();
                        let mut ids = Vec::with_capacity(100_000);
                        for _ in 0..10 {
                            let batch = binary_ids(&c, &server, key, 10_000);
                            assert!(crate::strictly_increasing(&batch));
                            ids.extend(batch);
                        }
                        ids
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut seen = HashSet::with_capacity(800_000);
        for ids in &per_client {
            assert_eq!(ids.len(), 100_000);
            for &id in ids {
                assert!(id > 0 && id < 1 << 63);
                assert!(seen.insert(id), "{key}: duplicate {id}");
            }
        }
        assert_eq!(seen.len(), 800_000);
    }
}
