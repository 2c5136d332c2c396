//! `idmint serve` on a Redis segment store that forgets (issue 23): a private
//! Redis without persistence (`scripts/redis`) restarted empty under a
//! segment key. What must hold, seen from outside the real binary:
//!
//! - while running, the node serves what it leased, then answers `503
//!   store_reset` with `Retry-After` (the epoch marker went with the keys),
//!   never an ID it issued; so it does when only the marker is deleted;
//! - restarted, it refuses to start, naming the key and its floor, and
//!   creates nothing in the store;
//! - `idmint segment raise` (store only) is not enough while the node's
//!   remembered epoch is gone from the store; with the node's data directory
//!   it adopts the new epoch, and the node serves above every ID it issued.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use idmint_testkit::{PrivateService, Service};
use reqwest::StatusCode;

use crate::serve::{Served, binary_ids, client, spawn};
use crate::{expect_failure, expect_ok, idmint};

/// Runs `idmint serve` on `data_dir` with the config at `config` until it
/// exits (it must, within 60 s): the status and its log.
fn refused_start(data_dir: &Path, config: &str) -> (ExitStatus, String) {
    let (mut child, _, log) = spawn(data_dir, Some(config), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, std::fs::read_to_string(log).unwrap_or_default());
        }
        assert!(
            Instant::now() < deadline,
            "idmint serve did not exit: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `error:` line of a log.
fn error_line(log: &str) -> &str {
    log.lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {log}"))
}

/// The number after `"order" (floor ` in `text`.
fn floor_in(text: &str) -> u64 {
    let at = text
        .find("\"order\" (floor ")
        .unwrap_or_else(|| panic!("no floor of order in: {text}"))
        + "\"order\" (floor ".len();
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after the floor in: {text}"))
}

/// Keys under `prefix` in the Redis at `url`.
fn redis_keys(url: &str, prefix: &str) -> Vec<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut conn)
        .unwrap();
    keys.sort();
    keys
}

#[test]
fn serve_refuses_a_redis_segment_store_that_forgot_until_the_key_is_raised() {
    let Some(redis) = PrivateService::start(Service::Redis) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let prefix = "reset-test:";
    let config = format!(
        "[segment]\nurl = {:?}\nkey_prefix = {prefix:?}\n[segment.keys.order]\nstep = 100\n",
        redis.address()
    );
    let config_path = dir.path().join("idmint.toml");
    std::fs::write(&config_path, &config).unwrap();
    let config_arg = config_path.to_str().unwrap();

    // IDs 1..=250 taken, in singles and batches.
    let server = Served::start(&data, Some(&config), &[]);
    let c = client();
    let mut issued = Vec::new();
    while issued.len() < 250 {
        let n = if issued.len() % 3 == 0 { 1 } else { 7 };
        let n = n.min(250 - issued.len() as u64);
        issued.extend(binary_ids(&c, &server, "order", n));
    }
    assert_eq!(issued, (1..=250).collect::<Vec<u64>>());

    // Redis restarts empty under the running node: it serves what it leased,
    // then refuses, typed, with a retry hint (after an `unavailable` or two
    // while its connection to Redis is re-made).
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        assert!(Instant::now() < deadline, "never refused");
        let r = c.get(server.url("/v1/ids/order")).send().unwrap();
        if r.status() == StatusCode::OK {
            let id: u64 = r.text().unwrap().trim().parse().unwrap();
            issued.push(id);
            continue;
        }
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.headers().get("retry-after").is_some());
        let body: serde_json::Value = r.json().unwrap();
        match body["error"]["code"].as_str().unwrap() {
            // The epoch marker went with the keys: the next lease finds it
            // missing before it asks for the key.
            "store_reset" => break body["error"]["message"].as_str().unwrap().to_owned(),
            "unavailable" | "store_error" | "store_timeout" => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("{other}: {body}"),
        }
    };
    assert!(message.contains("epoch marker is missing"), "{message}");
    let (status, _) = server.terminate();
    assert!(status.success());
    assert!(
        redis_keys(redis.address(), prefix).is_empty(),
        "a refused lease writes nothing"
    );

    // Restarted, the node refuses to start, naming the key and its floor.
    let (status, log) = refused_start(&data, &config);
    assert_eq!(status.code(), Some(1), "{log}");
    let line = error_line(&log);
    assert!(line.contains("store was reset"), "{line}");
    assert!(line.contains("epoch marker is missing"), "{line}");
    let floor = floor_in(line);
    assert!(floor > *issued.iter().max().unwrap(), "{floor}: {line}");
    assert!(
        redis_keys(redis.address(), prefix).is_empty(),
        "a refused start creates nothing"
    );

    // Bad input exits 2 and changes nothing.
    for args in [
        &[
            "segment",
            "raise",
            "no such key",
            "--above",
            "1",
            "--config",
            config_arg,
        ][..],
        &[
            "segment",
            "raise",
            "order",
            "--above",
            "9223372036854775807",
            "--config",
            config_arg,
        ],
        &[
            "segment",
            "raise",
            "undeclared",
            "--above",
            "5",
            "--config",
            config_arg,
            "--store-only",
        ],
    ] {
        let (code, line) = expect_failure(args, idmint(args));
        assert_eq!(code, 2, "{args:?}: {line}");
    }
    assert!(redis_keys(redis.address(), prefix).is_empty());

    // The store alone raised: the node still refuses, its epoch is gone.
    let above = floor - 1;
    let above_arg = above.to_string();
    let args = [
        "segment",
        "raise",
        "order",
        "--above",
        &above_arg,
        "--config",
        config_arg,
        "--store-only",
    ];
    let out = expect_ok(&args, idmint(&args));
    assert!(
        out.contains(&format!("created, issuing from {floor}")),
        "{out}"
    );
    let (status, log) = refused_start(&data, &config);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(error_line(&log).contains("store was reset"), "{log}");

    // With the node's data directory: the node adopts the store's new epoch.
    let args = [
        "segment",
        "raise",
        "order",
        "--above",
        "250",
        "--config",
        config_arg,
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let out = expect_ok(&args, idmint(&args));
    assert!(out.contains("already at"), "{out}");
    assert!(out.contains("adopted the store's epoch"), "{out}");

    // It serves again, above every ID it issued.
    let server = Served::start(&data, Some(&config), &[]);
    let after = binary_ids(&c, &server, "order", 500);
    assert!(after[0] >= floor, "{} below the floor {floor}", after[0]);
    // The floor file is the running server's: the command refuses it (exit 1).
    let (code, line) = expect_failure(&args, idmint(&args));
    assert_eq!(code, 1, "{line}");
    assert!(line.contains("in use by another idmint process"), "{line}");
    issued.extend(after);
    let unique: HashSet<u64> = issued.iter().copied().collect();
    assert_eq!(unique.len(), issued.len(), "an ID came twice");
}

/// Only the epoch marker deleted (`DEL idmint:segments:epoch`) under a
/// running node: its keys look whole, but this is no longer the store it
/// adopted. The next lease finds that out before asking for anything, and
/// the node answers `503 store_reset` from then on (it used to keep serving
/// with no error), backing off the store rather than asking it at every
/// preloader scan.
#[test]
fn serve_refuses_at_its_next_lease_a_redis_store_whose_epoch_was_deleted() {
    let Some(redis) = PrivateService::start(Service::Redis) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let prefix = "epoch-test:";
    let config = format!(
        "[segment]\nurl = {:?}\nkey_prefix = {prefix:?}\n[segment.keys.order]\nstep = 100\n",
        redis.address()
    );
    let server = Served::start(&data, Some(&config), &[]);
    let c = client();
    let mut issued = binary_ids(&c, &server, "order", 150);
    let epoch_key = format!("{prefix}segments:epoch");
    assert!(redis_keys(redis.address(), prefix).contains(&epoch_key));

    let client = redis::Client::open(redis.address()).unwrap();
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let deleted: u64 = redis::cmd("DEL").arg(&epoch_key).query(&mut conn).unwrap();
    assert_eq!(deleted, 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        assert!(Instant::now() < deadline, "never refused");
        let r = c.get(server.url("/v1/ids/order")).send().unwrap();
        if r.status() == StatusCode::OK {
            issued.push(r.text().unwrap().trim().parse().unwrap());
            assert!(
                issued.len() < 100_000,
                "served on and on without its marker"
            );
            continue;
        }
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.headers().get("retry-after").is_some());
        let body: serde_json::Value = r.json().unwrap();
        assert_eq!(body["error"]["code"], "store_reset", "{body}");
        break body["error"]["message"].as_str().unwrap().to_owned();
    };
    assert!(message.contains("epoch marker is missing"), "{message}");
    assert!(message.contains("\"order\" (floor "), "{message}");

    // A second and a half with no traffic: a preloader asking the store at
    // every scan would log the refusal dozens of times meanwhile.
    std::thread::sleep(Duration::from_millis(1500));

    // The refusal shows on /readyz (still ready: every node on the store
    // refuses alike) and /v1/status, and the store is left alone.
    let ready: serde_json::Value = c.get(server.url("/readyz")).send().unwrap().json().unwrap();
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["segments_refused"][0]["key"], "order", "{ready}");
    assert_eq!(
        ready["segments_refused"][0]["code"], "store_reset",
        "{ready}"
    );
    let status: serde_json::Value = c
        .get(server.url("/v1/status"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let order = status["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "order")
        .unwrap_or_else(|| panic!("no order in {status}"));
    assert_eq!(order["refusal"], "store_reset", "{order}");
    let metrics = c
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains(r#"idmint_segment_refused{key="order"} 1"#),
        "{metrics}"
    );
    let (status, log) = server.terminate();
    assert!(status.success());
    let refusals = log.matches("segment lease refused").count();
    assert!(refusals <= 3, "{refusals} refusals logged: {log}");
    assert!(
        !redis_keys(redis.address(), prefix).contains(&epoch_key),
        "a refused lease writes no marker"
    );
    let unique: HashSet<u64> = issued.iter().copied().collect();
    assert_eq!(unique.len(), issued.len(), "an ID came twice");
}

/// The embedded default store, SQLite in the data directory, deleted (a
/// lost volume restored without it, say): the node refuses to start, and
/// `idmint segment raise --data-dir` raises the key in the store that
/// directory holds, as `serve --data-dir` would open it.
#[test]
fn serve_refuses_a_deleted_sqlite_store_until_raised_in_its_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = "[segment.keys.order]\nstep = 10\n";
    let config_path = dir.path().join("idmint.toml");
    std::fs::write(&config_path, config).unwrap();

    let server = Served::start(&data, Some(config), &[]);
    let c = client();
    let mut issued = binary_ids(&c, &server, "order", 95);
    let (status, _) = server.terminate();
    assert!(status.success());
    for file in ["segments.db", "segments.db-wal", "segments.db-shm"] {
        let _ = std::fs::remove_file(data.join(file));
    }

    let (status, log) = refused_start(&data, config);
    assert_eq!(status.code(), Some(1), "{log}");
    let line = error_line(&log);
    assert!(line.contains("epoch marker is missing"), "{line}");
    let floor = floor_in(line);
    assert!(floor > 95, "{line}");

    let args = [
        "segment",
        "raise",
        "order",
        "--above",
        "95",
        "--config",
        config_path.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let out = expect_ok(&args, idmint(&args));
    assert!(
        out.contains(&format!("created, issuing from {floor}")),
        "above the node's floor, not only above 95: {out}"
    );
    assert!(out.contains("adopted the store's epoch"), "{out}");

    let server = Served::start(&data, Some(config), &[]);
    let after = binary_ids(&c, &server, "order", 10);
    assert_eq!(after[0], floor);
    issued.extend(after);
    let unique: HashSet<u64> = issued.iter().copied().collect();
    assert_eq!(unique.len(), issued.len(), "an ID came twice");
}

/// A key made through the admin API (or in the table) is in no config: once
/// the store has lost it, `segment raise` can't know its step and says to
/// give `--step`, changing nothing; with it, the key comes back above `N`.
/// A key the store still holds keeps its own step.
#[test]
fn segment_raise_of_a_lost_undeclared_key_needs_its_step() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("idmint.toml");
    let db = dir.path().join("segments.db");
    std::fs::write(
        &config_path,
        format!("[segment]\nurl = \"sqlite://{}\"\n", db.display()),
    )
    .unwrap();
    let config = config_path.to_str().unwrap();
    let args = [
        "segment",
        "raise",
        "made",
        "--above",
        "5",
        "--config",
        config,
        "--store-only",
    ];
    let (code, line) = expect_failure(&args, idmint(&args));
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("give --step"), "{line}");

    let with_step = [&args[..], &["--step", "50"]].concat();
    let out = expect_ok(&with_step, idmint(&with_step));
    assert!(out.contains("created, issuing from 6 (step 50)"), "{out}");
    // Held by the store now: raised again without --step, at its own step.
    let again = [
        "segment",
        "raise",
        "made",
        "--above",
        "80",
        "--config",
        config,
        "--store-only",
    ];
    let out = expect_ok(&again, idmint(&again));
    assert!(out.contains("raised from 6 to 81"), "{out}");
}

/// Issue 32, item 10, as measured: node A served a config-declared key on
/// PostgreSQL, whose row was then deleted by hand. Node B, with an empty
/// data directory, started on the same config and created the key again at
/// its start, issuing IDs A had issued. Now the table's ledger remembers the
/// key: B's start refuses, naming the key and `idmint segment raise`, and
/// creates nothing; the admin API refuses the same name with 409
/// `key_forgotten`; once raised, B starts and serves above every ID A issued.
#[test]
fn serve_never_creates_again_a_declared_key_its_table_lost() {
    if !crate::serve::postgres_up() {
        return;
    }
    let unique = crate::serve::unique_suffix();
    let url = std::env::var("IDMINT_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let table = format!("alloc_forgot_{unique}");
    let config = format!(
        "[server]\nadmin_token = \"t\"\n[segment]\nurl = {url:?}\ntable = {table:?}\n\
         [segment.keys.order]\nstep = 100\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let a = Served::start(&dir.path().join("a"), Some(&config), &[]);
    let mut issued = binary_ids(&c, &a, "order", 250);
    let (status, _) = a.terminate();
    assert!(status.success());

    let psql = |sql: &str| {
        let out = std::process::Command::new("psql")
            .args([url.as_str(), "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
            .output()
            .expect("psql (scripts/deps installs it)");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    psql(&format!("DELETE FROM {table} WHERE biz_tag = 'order'"));

    let (status, log) = refused_start(&dir.path().join("b"), &config);
    assert_eq!(status.code(), Some(1), "{log}");
    let line = error_line(&log);
    assert!(line.contains("segment key \"order\" existed"), "{line}");
    assert!(
        line.contains("idmint segment raise order --above N"),
        "{line}"
    );
    assert_eq!(
        psql(&format!(
            "SELECT count(*) FROM {table} WHERE biz_tag = 'order'"
        ))
        .trim(),
        "0",
        "a refused start creates nothing"
    );

    // The way back: raised above every ID issued, B starts and serves above.
    let config_path = dir.path().join("idmint.toml");
    std::fs::write(&config_path, &config).unwrap();
    let above = issued.iter().max().unwrap().to_string();
    let args = [
        "segment",
        "raise",
        "order",
        "--above",
        &above,
        "--config",
        config_path.to_str().unwrap(),
        "--store-only",
    ];
    let out = expect_ok(&args, idmint(&args));
    assert!(out.contains("created"), "{out}");
    let b = Served::start(&dir.path().join("b"), Some(&config), &[]);
    let after = binary_ids(&c, &b, "order", 250);
    assert!(after[0] > *issued.iter().max().unwrap());
    // Another name, created through the admin API and then lost, is
    // refused there with 409.
    let create = |key: &str| {
        c.post(b.url("/v1/admin/keys"))
            .bearer_auth("t")
            .json(&serde_json::json!({"key": key, "step": 10}))
            .send()
            .unwrap()
    };
    assert_eq!(create("made").status(), StatusCode::CREATED);
    psql(&format!("DELETE FROM {table} WHERE biz_tag = 'made'"));
    let r = create("made");
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(body["error"]["code"], "key_forgotten", "{body}");
    issued.extend(after);
    let unique_ids: HashSet<u64> = issued.iter().copied().collect();
    assert_eq!(unique_ids.len(), issued.len(), "an ID came twice");
    psql(&format!("DROP TABLE {table}"));
    psql(&format!(
        "DELETE FROM idmint_segment_ledger WHERE segment_table = '{table}'; \
         DELETE FROM idmint_segment_epochs WHERE segment_table = '{table}'; \
         DELETE FROM idmint_schema_migrations WHERE component = 'segment:{table}'"
    ));
}
