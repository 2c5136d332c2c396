//! Real Redis clients, each with its default settings, against the RESP
//! listener of the real `idmint serve`: redis-py, node-redis, ioredis, the
//! `redis` and `fred` crates, redigo, ruby-redis, phpredis and Perl's Redis.
//!
//! Each client is a small program under `tests/resp_clients/<lang>/` (the
//! Rust ones are included below as modules) that does the same things and
//! prints one JSON object of the IDs it got, as decimal strings:
//! `client_info` (its `CLIENT INFO`, which shows the protocol it chose),
//! `incr_segment`/`incr_snowflake` (3 `INCR`s each), `incrby` (an `INCR`,
//! `INCRBY order 10`, an `INCR`), `pipeline` and `transaction` (20 `INCR`s
//! each, as the client pipelines and runs MULTI/EXEC), `discard` (an `INCR`,
//! MULTI with two queued `INCR`s, DISCARD, an `INCR`), `pool` (200 `INCR`s
//! through the client's pool or several connections at once), `noauth` (the
//! error of an `INCR` of a key with a token, without it) and `auth` (2 `INCR`s
//! of that key with its token as the password).
//!
//! The PyPI and npm clients are installed, pinned, into
//! `target/resp-clients/` by `scripts/resp-clients` (run here once per test
//! binary; quick when done); the Debian ones by `scripts/deps`. A missing
//! interpreter or package fails under `CI=true` and is a loud SKIPPED
//! elsewhere.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::serve::{Served, client, get};

#[path = "../resp_clients/rust/fred.rs"]
mod fred_client;
#[path = "../resp_clients/rust/redis_rs.rs"]
mod redis_rs_client;

/// The `secret` key's token.
const TOKEN: &str = "t0ken-for-resp-clients";

/// The keys the programs use, declared: a segment key with a small step (so
/// pipelines and pools cross segments), a snowflake key, and a snowflake key
/// with a token.
fn config() -> String {
    format!(
        r#"
[segment.keys.order]
step = 50

[keys.order]
strategy = "segment"

[keys.sf]
strategy = "snowflake"

[keys.secret]
strategy = "snowflake"
token = "{TOKEN}"
"#
    )
}

/// How many `order` IDs each program takes: 3 INCR, INCR + INCRBY 10 + INCR,
/// a pipeline and a transaction of 20, INCR + INCR around a DISCARD, and 200
/// through the pool.
const ORDER_IDS: u64 = 3 + (1 + 10 + 1) + 20 + 20 + 2 + 200;

fn start(data_dir: &Path) -> Served {
    Served::start_with_args(
        data_dir,
        Some(&config()),
        &[],
        &["--resp-addr", "127.0.0.1:0"],
    )
}

fn host_port(server: &Served) -> (String, u16) {
    let addr = server.resp_addr.as_deref().expect("a RESP address");
    let (host, port) = addr.rsplit_once(':').unwrap();
    (host.to_owned(), port.parse().unwrap())
}

/// `target/`, where the binary under test was built.
fn target_dir() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_idmint"));
    bin.parent().and_then(Path::parent).unwrap().to_owned()
}

fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/resp_clients")
}

/// Installs the PyPI and npm clients once per test run; false when that
/// failed (no network, no pip or npm).
fn installed() -> bool {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let done = DONE.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/resp-clients");
        let output = Command::new("bash")
            .arg(script)
            .env("CARGO_TARGET_DIR", target_dir())
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    });
    if let Err(e) = done {
        eprintln!("scripts/resp-clients failed: {e}");
    }
    done.is_ok()
}

/// Whether `program` runs (`program --version` or the like succeeds).
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs a client program to its end (at most 2 minutes) and parses its JSON.
#[track_caller]
fn run_program(name: &str, command: &mut Command) -> Value {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{name} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{name} failed ({}): {stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{name} printed no JSON ({e}): {stdout}"))
}

fn ids(name: &str, out: &Value, field: &str) -> Vec<u64> {
    out[field]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: no {field} in {out}"))
        .iter()
        .map(|v| id(name, v))
        .collect()
}

fn id(name: &str, v: &Value) -> u64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{name}: {v} is not an ID"))
}

#[track_caller]
fn increasing(name: &str, what: &str, ids: &[u64]) {
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "{name}: {what} IDs not increasing: {ids:?}"
    );
}

/// The count of `key`'s IDs issued, from `/metrics`.
fn issued(server: &Served, key: &str) -> u64 {
    let (_, metrics) = get(&client(), &server.url("/metrics"));
    let prefix = format!("idmint_ids_issued_total{{key=\"{key}\",");
    metrics
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// What every client must have got (see the module docs); `proto` is the
/// protocol it speaks by default, as its `CLIENT INFO` shows.
#[track_caller]
fn check(name: &str, proto: u8, out: &Value, server: &Served) {
    let info = out["client_info"].as_str().unwrap_or_default();
    assert!(
        info.contains(&format!(" resp={proto} ")),
        "{name}: expected RESP{proto}: {info}"
    );
    let segment = ids(name, out, "incr_segment");
    assert_eq!(segment.len(), 3, "{name}");
    increasing(name, "INCR (segment)", &segment);
    let snowflakes = ids(name, out, "incr_snowflake");
    assert_eq!(snowflakes.len(), 3, "{name}");
    increasing(name, "INCR (snowflake)", &snowflakes);
    // A snowflake ID carries milliseconds since 2010 above 22 bits: a 2020s
    // ID is above 2^60, far from a counter (and from 2^53, where a
    // JavaScript number would round it).
    assert!(snowflakes[0] > 1 << 60, "{name}: {snowflakes:?}");

    let incrby = &out["incrby"];
    let (before, last, after) = (
        id(name, &incrby["before"]),
        id(name, &incrby["last"]),
        id(name, &incrby["after"]),
    );
    // The run is before+1..=last, all this client's: the next INCR follows it.
    assert_eq!(
        (last, after),
        (before + 10, before + 11),
        "{name}: INCRBY 10 did not return the last of 10"
    );

    let pipeline = ids(name, out, "pipeline");
    assert_eq!(pipeline.len(), 20, "{name}");
    increasing(name, "pipeline", &pipeline);
    let transaction = ids(name, out, "transaction");
    assert_eq!(
        transaction.len(),
        20,
        "{name}: MULTI/EXEC answers every INCR"
    );
    increasing(name, "transaction", &transaction);
    // Nothing else uses the key: a transaction's IDs are one run.
    assert_eq!(
        transaction[19] - transaction[0],
        19,
        "{name}: {transaction:?}"
    );

    let discard = &out["discard"];
    assert_eq!(
        id(name, &discard["after"]),
        id(name, &discard["before"]) + 1,
        "{name}: a DISCARDed transaction issued IDs"
    );

    let pool = ids(name, out, "pool");
    assert_eq!(pool.len(), 200, "{name}");

    let noauth = out["noauth"].as_str().unwrap_or_default();
    // Clients show the code (`NOAUTH`) or their own error type for it.
    assert!(
        noauth.contains("Authentication required: key \"secret\""),
        "{name}: {noauth}"
    );
    let auth = ids(name, out, "auth");
    assert_eq!(auth.len(), 2, "{name}");
    increasing(name, "AUTH", &auth);

    // No duplicates anywhere: every segment ID, the INCRBY run included.
    let mut seen = HashSet::new();
    let around = [before, after];
    let all_segment = segment
        .iter()
        .chain(&around)
        .chain(&pipeline)
        .chain(&transaction)
        .chain(&pool)
        .copied()
        .chain(before + 1..=last)
        .chain([id(name, &discard["before"]), id(name, &discard["after"])]);
    for v in all_segment {
        assert!(seen.insert(v), "{name}: ID {v} issued twice");
    }
    let mut seen = HashSet::new();
    for v in snowflakes.iter().chain(&auth) {
        assert!(seen.insert(*v), "{name}: ID {v} issued twice");
    }
    // The server issued exactly what the client got: nothing for the
    // DISCARDed INCRs, nothing lost.
    assert_eq!(issued(server, "order"), ORDER_IDS, "{name}");
    assert_eq!(
        seen.len() as u64,
        issued(server, "sf") + issued(server, "secret")
    );
}

/// What the clients that read `COMMAND` and `INFO` made of them.
#[track_caller]
fn check_introspection(name: &str, out: &Value) {
    let field = |f: &str| id(name, &out["introspection"][f]);
    assert_eq!(field("command"), field("command_count"), "{name}");
    assert!(field("command") >= 20, "{name}");
    assert_eq!(field("incr_arity"), 2, "{name}");
    // INFO was read after every ID the program took: 5 of `sf` and `secret`.
    assert_eq!(field("info_ids_issued"), ORDER_IDS + 5, "{name}");
}

/// Runs an external client program against a fresh server and checks it;
/// `needs` is what must be there (name, whether it is), e.g. the
/// interpreter and the package.
#[track_caller]
fn external(
    name: &str,
    proto: u8,
    needs: &[(&str, bool)],
    command: impl FnOnce(&str, u16) -> Command,
) -> Option<Value> {
    for (what, there) in needs {
        if !idmint_testkit::require_service(what, *there) {
            return None;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let (host, port) = host_port(&server);
    let out = run_program(name, &mut command(&host, port));
    check(name, proto, &out, &server);
    Some(out)
}

fn python_ok() -> bool {
    runs(
        "python3",
        &["-c", "import sys; sys.exit(sys.version_info < (3, 8))"],
    )
}

#[test]
fn serve_resp_clients_redis_py() {
    let pkgs = target_dir().join("resp-clients/python");
    let out = external(
        "redis-py",
        3,
        &[
            ("python3", python_ok()),
            ("redis-py (scripts/resp-clients)", installed()),
        ],
        |host, port| {
            let mut c = Command::new("python3");
            c.arg(programs().join("python/client.py"))
                .args([host, &port.to_string(), TOKEN])
                .env("PYTHONPATH", &pkgs);
            c
        },
    );
    if let Some(out) = out {
        check_introspection("redis-py", &out);
    }
}

fn node(script: &str, host: &str, port: u16) -> Command {
    let mut c = Command::new("node");
    c.arg(programs().join("node").join(script))
        .args([host, &port.to_string(), TOKEN])
        .env(
            "NODE_PATH",
            target_dir().join("resp-clients/node/node_modules"),
        );
    c
}

#[test]
fn serve_resp_clients_node_redis() {
    let out = external(
        "node-redis",
        3,
        &[
            ("node", runs("node", &["--version"])),
            ("node-redis (scripts/resp-clients)", installed()),
        ],
        |host, port| node("node_redis.js", host, port),
    );
    if let Some(out) = out {
        check_introspection("node-redis", &out);
    }
}

#[test]
fn serve_resp_clients_ioredis() {
    external(
        "ioredis",
        3,
        &[
            ("node", runs("node", &["--version"])),
            ("ioredis (scripts/resp-clients)", installed()),
        ],
        |host, port| node("ioredis.js", host, port),
    );
}

#[test]
fn serve_resp_clients_redigo() {
    const GOPATH: &str = "/usr/share/gocode";
    let package = Path::new(GOPATH).join("src/github.com/gomodule/redigo/redis");
    let go = runs("go", &["version"]);
    let needs = [
        ("go (Debian golang-go)", go),
        (
            "redigo (Debian golang-github-gomodule-redigo-dev)",
            package.is_dir(),
        ),
    ];
    if !needs
        .iter()
        .all(|(what, there)| idmint_testkit::require_service(what, *there))
    {
        return;
    }
    // Built from Debian's redigo source: GOPATH mode, no module download.
    let bin = target_dir().join("resp-clients/go/redigo");
    let build = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(programs().join("go/redigo.go"))
        .env("GO111MODULE", "off")
        .env("GOPATH", GOPATH)
        .env("GOFLAGS", "")
        .env("GOCACHE", target_dir().join("resp-clients/go/cache"))
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&build.stderr)
    );
    external("redigo", 2, &[], |host, port| {
        let mut c = Command::new(&bin);
        c.args([host, &port.to_string(), TOKEN]);
        c
    });
}

#[test]
fn serve_resp_clients_ruby_redis() {
    external(
        "ruby-redis",
        2,
        &[
            ("ruby", runs("ruby", &["--version"])),
            (
                "ruby-redis (Debian ruby-redis)",
                runs("ruby", &["-e", "require 'redis'"]),
            ),
        ],
        |host, port| {
            let mut c = Command::new("ruby");
            c.arg(programs().join("ruby/client.rb"))
                .args([host, &port.to_string(), TOKEN]);
            c
        },
    );
}

#[test]
fn serve_resp_clients_phpredis() {
    external(
        "phpredis",
        2,
        &[
            ("php (Debian php-cli)", runs("php", &["--version"])),
            (
                "phpredis (Debian php-redis)",
                runs("php", &["-r", "exit(class_exists('Redis') ? 0 : 1);"]),
            ),
        ],
        |host, port| {
            let mut c = Command::new("php");
            c.arg(programs().join("php/client.php"))
                .args([host, &port.to_string(), TOKEN]);
            c
        },
    );
}

#[test]
fn serve_resp_clients_perl_redis() {
    external(
        "perl Redis",
        2,
        &[
            ("perl", runs("perl", &["-v"])),
            (
                "Perl Redis (Debian libredis-perl)",
                runs("perl", &["-MRedis", "-e1"]),
            ),
        ],
        |host, port| {
            let mut c = Command::new("perl");
            c.arg(programs().join("perl/client.pl"))
                .args([host, &port.to_string(), TOKEN]);
            c
        },
    );
}

#[test]
fn serve_resp_clients_redis_crate() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let (host, port) = host_port(&server);
    let out = redis_rs_client::run(&host, port, TOKEN);
    check("redis crate", 2, &out, &server);
}

#[test]
fn serve_resp_clients_fred() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let (host, port) = host_port(&server);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let out = runtime.block_on(fred_client::run(&host, port, TOKEN));
    check("fred", 2, &out, &server);
}
