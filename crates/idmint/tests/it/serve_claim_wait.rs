//! A start that finds every worker ID taken waits for one to be freed, names
//! what it waits for on `/readyz` meanwhile, and serves once a dead node's
//! lease has expired: the mass-restart case, where a replacement starts
//! before the node it replaces has timed out.
//!
//! Three `idmint serve` processes share one SQL registry on an SQLite file
//! (no service needed) with a layout of one worker bit: two workers.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use crate::serve::{Served, client};

const LEASE_TTL: Duration = Duration::from_secs(3);

fn config(db: &Path) -> String {
    format!(
        r#"
[snowflake]
layout = "twitter,worker=1"
datacenter = 1
registry = "sql"
window = "1s"

[snowflake.sql]
url = "sqlite://{}"
lease_ttl = "{}s"
"#,
        db.display(),
        LEASE_TTL.as_secs()
    )
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `url` until `done` accepts the status and body, for up to `within`.
fn until(
    url: &str,
    within: Duration,
    what: &str,
    done: impl Fn(StatusCode, &Value) -> bool,
) -> Value {
    let c = client();
    let deadline = Instant::now() + within;
    let mut last = String::new();
    loop {
        if let Ok(response) = c.get(url).send() {
            let status = response.status();
            let body: Value = response.json().unwrap_or(Value::Null);
            if done(status, &body) {
                return body;
            }
            last = format!("{status} {body}");
        }
        assert!(Instant::now() < deadline, "{what}: last answer {last}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_start_with_every_worker_taken_waits_says_why_and_takes_a_dead_nodes_worker() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir.path().join("registry.db"));
    let a = Served::start(&dir.path().join("a"), Some(&config), &[]);
    let _b = Served::start(&dir.path().join("b"), Some(&config), &[]);

    // The third node, on a port known before it is ready.
    let port = free_port();
    let side = dir.path().join("c-side");
    std::fs::create_dir_all(&side).unwrap();
    std::fs::write(side.join("idmint.toml"), &config).unwrap();
    let ready = side.join("ready");
    let log = side.join("stderr.log");
    let mut c = Command::new(env!("CARGO_BIN_EXE_idmint"))
        .arg("serve")
        .arg("--config")
        .arg(side.join("idmint.toml"))
        .arg("--data-dir")
        .arg(dir.path().join("c"))
        .args(["--http-addr", &format!("127.0.0.1:{port}"), "--ready-file"])
        .arg(&ready)
        .env("IDMINT_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");

    let waiting = until(
        &format!("{base}/readyz"),
        Duration::from_secs(30),
        "the waiting node never said why on /readyz",
        |status, body| {
            status == StatusCode::SERVICE_UNAVAILABLE
                && body["error"]["code"] == "not_ready"
                && body["error"]["message"].as_str().is_some_and(|m| {
                    m.contains("waiting to claim a worker ID") && m.contains("in use")
                })
        },
    );
    let message = waiting["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("all 2 worker IDs"), "{message}");
    until(
        &format!("{base}/healthz"),
        Duration::from_secs(5),
        "/healthz while starting",
        |s, _| s == StatusCode::OK,
    );
    let refused = client().get(format!("{base}/v1/ids/x")).send().unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    assert!(
        c.try_wait().unwrap().is_none(),
        "the node waits instead of exiting"
    );

    // A dies without releasing its worker; C takes it once the lease expires.
    let a_worker = worker_of(&a.url("/readyz"));
    let killed = Instant::now();
    Command::new("kill")
        .args(["-9", &a.pid().to_string()])
        .status()
        .unwrap();
    let ready_body = until(
        &format!("{base}/readyz"),
        LEASE_TTL + Duration::from_secs(20),
        "the waiting node never claimed the dead node's worker",
        |status, _| status == StatusCode::OK,
    );
    let took = killed.elapsed();
    assert_eq!(
        ready_body["worker"].as_u64(),
        Some(a_worker),
        "{ready_body}"
    );
    assert!(ready.exists(), "ready once it serves");
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(
        log_text.contains("waiting to claim a worker ID"),
        "the log says what the start waits for: {log_text}"
    );
    eprintln!("the replacement served {took:?} after the kill (lease TTL {LEASE_TTL:?})");
    let _ = c.kill();
    let _ = c.wait();
}

fn worker_of(readyz: &str) -> u64 {
    let body: Value = client().get(readyz).send().unwrap().json().unwrap();
    body["worker"]
        .as_u64()
        .expect("a ready node names its worker")
}
