//! The extension against the real thing: private PostgreSQL clusters started
//! by `scripts/postgres`, the extension installed into the system PostgreSQL
//! (`scripts/pg-extension install`, which `scripts/pg-extension test` runs
//! first) and preloaded.
//!
//! - `IDMINT_PG_ROWS`: rows per connection in the concurrent insert tests
//!   (default 125,000: 8 connections make 1,000,000 rows a cluster, in
//!   1,000-row statements, one DEFAULT call a row).
//! - `IDMINT_BIN`: the `idmint` binary `idmint_decode` and
//!   `idmint_obfuscate` are compared with (default: the root workspace's
//!   `target/debug/idmint`).
//! - etcd and ZooKeeper (`scripts/etcd`, `scripts/zookeeper`), the
//!   machine's Redis and PostgreSQL for the registry tests, libfaketime for the
//!   restart an hour behind: under `CI=true` a missing one fails its test,
//!   elsewhere it prints SKIPPED.

mod cluster;
mod convert;
mod crash;
mod fixed;
mod public_ids;
mod registries;
mod service;

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use cluster::Cluster;

/// The extension and the table every test inserts into: `id` from the
/// default, `round` telling apart the inserts before and after a restart.
const CREATE: &str = "CREATE EXTENSION idmint;
     CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idmint_next_id(), round int NOT NULL);";
/// One row into `t`, one DEFAULT call.
const INSERT: &str = "INSERT INTO t (round) VALUES ($1)";

/// Rows each of the 8 connections inserts.
fn rows_per_connection() -> u64 {
    std::env::var("IDMINT_PG_ROWS")
        .ok()
        .map(|v| v.parse().expect("IDMINT_PG_ROWS is a number"))
        .unwrap_or(125_000)
}

/// The newest ID in `t`.
fn max_id(client: &mut postgres::Client) -> i64 {
    client
        .query_one("SELECT max(id) FROM t", &[])
        .unwrap()
        .get(0)
}

/// After a clean restart of `cluster`: 4 connections insert `rows` rows
/// each as round 2; `t` then holds `total` distinct IDs and every one of
/// round 2 is above `max_before`.
fn inserts_go_on_above(cluster: &Cluster, max_before: i64, rows: u64, total: i64) {
    cluster.insert(4, rows, INSERT, 2);
    let mut client = cluster.client();
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT id), min(id) FILTER (WHERE round = 2) FROM t",
            &[],
        )
        .unwrap();
    let (n, distinct, min_after): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((n, distinct), (total, total));
    assert!(
        min_after > max_before,
        "{min_after} after the restart, {max_before} before"
    );
}

/// Writes a figure to the real stderr (the harness hides a passing test's
/// captured output), so a run shows what it measured.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "     {line}");
}

/// An idmint config file, readable by the clusters' `postgres` user;
/// removed on drop.
struct ConfigFile(PathBuf);

impl ConfigFile {
    /// The `idmint.config` line naming it.
    fn setting(&self) -> String {
        format!("idmint.config = '{}'", self.0.display())
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An idmint config file named after `name` holding `text`.
fn config_file(name: &str, text: &str) -> ConfigFile {
    let path = std::env::temp_dir().join(format!(
        "wtp-idmint-pg-config-{name}-{}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    ConfigFile(path)
}

/// Checks that `err` is the extension's ERROR with `sqlstate` and one of
/// `codes` in its DETAIL (`idmint error code: CODE`); returns the code.
fn assert_idmint_error(err: &postgres::Error, sqlstate: &str, codes: &[&str]) -> String {
    let db = err
        .as_db_error()
        .unwrap_or_else(|| panic!("not a database error: {err}"));
    let code = db
        .detail()
        .and_then(|d| d.strip_prefix("idmint error code: "))
        .unwrap_or_else(|| panic!("no idmint error code in {db:?}"))
        .to_owned();
    assert!(
        codes.contains(&code.as_str()),
        "code {code}, not one of {codes:?}: {db}"
    );
    assert_eq!(db.code().code(), sqlstate, "{db}");
    code
}

/// The `idmint` binary (`IDMINT_BIN`, or the root workspace's debug build).
fn idmint_bin() -> String {
    std::env::var("IDMINT_BIN")
        .unwrap_or_else(|_| format!("{}/../../target/debug/idmint", env!("CARGO_MANIFEST_DIR")))
}

/// 8 connections insert at once into a table whose id defaults to
/// `idmint_next_id()`; the cluster then crashes (`pg_ctl stop -m immediate`)
/// and restarts, and 8 connections insert again: no ID repeats, and every ID
/// after the crash is above every ID before it.
#[test]
fn concurrent_inserts_repeat_no_id_across_a_crash() {
    let cluster = Cluster::start("inserts");
    let mut client = cluster.client();
    client.batch_execute(CREATE).unwrap();
    let rows = rows_per_connection();
    let insert = |round: i32| cluster.insert_bulk(8, rows, "t", round);
    let started = std::time::Instant::now();
    insert(1);
    let took = started.elapsed().as_secs_f64();
    say(&format!(
        "1 cluster, 8 connections: {} rows in {took:.1} s ({:.0} rows/s)",
        8 * rows,
        (8 * rows) as f64 / took
    ));
    let count = |c: &mut postgres::Client, round: i32| -> (i64, i64) {
        let row = c
            .query_one(
                "SELECT count(*), count(DISTINCT id) FROM t WHERE round = $1",
                &[&round],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let (n, distinct) = count(&mut client, 1);
    assert_eq!(n, 8 * rows as i64);
    assert_eq!(distinct, n, "{} duplicate IDs", n - distinct);
    let max_before = max_id(&mut client);
    drop(client);

    cluster.crash_and_restart();

    let mut client = cluster.client();
    insert(2);
    let (n, distinct) = count(&mut client, 2);
    assert_eq!((n, distinct), (8 * rows as i64, 8 * rows as i64));
    let min_after: i64 = client
        .query_one("SELECT min(id) FROM t WHERE round = 2", &[])
        .unwrap()
        .get(0);
    assert!(
        min_after > max_before,
        "an ID after the crash ({min_after}) is not above the last one before it ({max_before})"
    );
    // The primary key saw every row: the union has no duplicate either.
    let (all, all_distinct): (i64, i64) = {
        let row = client
            .query_one("SELECT count(*), count(DISTINCT id) FROM t", &[])
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((all, all_distinct), (16 * rows as i64, 16 * rows as i64));
}

/// `idmint_next_ids`, `idmint_decode` against `idmint decode`,
/// `idmint_status`, and the errors' SQLSTATEs and codes.
#[test]
fn functions_and_errors() {
    let cluster = Cluster::start("functions");
    let mut client = cluster.client();
    client.batch_execute("CREATE EXTENSION idmint").unwrap();

    let ids: Vec<i64> = client
        .query("SELECT * FROM idmint_next_ids(1000)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 1000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "not increasing");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 1000);
    let next: i64 = client
        .query_one("SELECT idmint_next_id()", &[])
        .unwrap()
        .get(0);
    assert!(next > ids[999]);

    let status = client
        .query_one(
            "SELECT registry, worker, lease, mark IS NOT NULL, persisted_mark IS NOT NULL, generation
             FROM idmint_status()",
            &[],
        )
        .unwrap();
    assert_eq!(status.get::<_, String>(0), "file");
    assert_eq!(status.get::<_, i32>(1), 0);
    assert_eq!(status.get::<_, String>(2), "held");
    assert!(status.get::<_, bool>(3), "no mark");
    assert!(status.get::<_, bool>(4), "no persisted mark");
    assert!(status.get::<_, i64>(5) >= 1);

    // A clean stop records what was issued; the restart issues above it.
    cluster.restart();
    let mut client = cluster.client();
    let after: i64 = client
        .query_one("SELECT idmint_next_id()", &[])
        .unwrap()
        .get(0);
    assert!(after > next, "{after} after a clean restart, {next} before");
    let log = cluster.log();
    assert!(log.contains("clean stop recorded"), "{log}");

    for (sql, sqlstate, code) in [
        ("SELECT * FROM idmint_next_ids(0)", "22023", "invalid_count"),
        (
            "SELECT * FROM idmint_next_ids(-5)",
            "22023",
            "invalid_count",
        ),
        (
            "SELECT * FROM idmint_next_ids(1000001)",
            "22023",
            "invalid_count",
        ),
        ("SELECT * FROM idmint_decode(-1)", "22023", "invalid_id"),
        // No [obfuscation] key here: public IDs are refused, not made up.
        (
            "SELECT idmint_obfuscate(1)",
            "55000",
            "obfuscation_disabled",
        ),
        ("SELECT idmint_reveal(1)", "55000", "obfuscation_disabled"),
    ] {
        let err = client.query(sql, &[]).unwrap_err();
        let db = err.as_db_error().unwrap_or_else(|| panic!("{sql}: {err}"));
        assert_eq!(db.code().code(), sqlstate, "{sql}: {db}");
        assert_eq!(
            db.detail(),
            Some(format!("idmint error code: {code}").as_str()),
            "{sql}: {db}"
        );
    }

    // idmint_decode agrees with `idmint decode --json` (twitter, the default).
    let row = client
        .query_one(
            "SELECT (extract(epoch FROM time) * 1000)::bigint, datacenter, worker, sequence
             FROM idmint_decode($1)",
            &[&next],
        )
        .unwrap();
    let (unix_ms, dc, worker, seq): (i64, i32, i32, i32) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let cli = idmint_decode(next);
    assert_eq!(
        (unix_ms, dc, worker, seq),
        (
            cli["unix_ms"].parse().unwrap(),
            cli["datacenter"].parse().unwrap(),
            cli["worker"].parse().unwrap(),
            cli["sequence"].parse().unwrap(),
        ),
        "idmint decode said {cli:?}"
    );
}

/// `idmint decode ID --json`'s fields, as text.
fn idmint_decode(id: i64) -> std::collections::HashMap<String, String> {
    let bin = idmint_bin();
    let out = Command::new(&bin)
        .args(["decode", &id.to_string(), "--json"])
        .output()
        .unwrap_or_else(|e| panic!("running {bin} (build it with `cargo build -p idmint`): {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // A flat JSON object of strings and numbers.
    text.trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once(':').unwrap();
            (
                k.trim_matches('"').to_owned(),
                v.trim_matches('"').to_owned(),
            )
        })
        .collect()
}
