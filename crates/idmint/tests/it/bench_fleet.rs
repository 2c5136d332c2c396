//! `idmint bench fleet` end to end, at the reduced sizes CI affords, on the
//! real coordinators: it must run each phase, read each coordinator's own
//! counters, see a kill as a crash (replacements wait for the dead nodes'
//! leases), replace every node in a rolling restart without a refusal, and
//! refuse what it can't measure. The full figures (N up to 10,000) are
//! BENCHMARKS.md's, from `scripts/bench-fleet`.
//!
//! etcd and ZooKeeper: the ones `scripts/test` started
//! (`IDMINT_TEST_ETCD_ENDPOINT`, `IDMINT_TEST_ZOOKEEPER`), else private
//! ones. PostgreSQL, MariaDB and Redis: the machine's.

use std::path::Path;
use std::time::Duration;

use idmint_testkit::cluster::{ClusterKind, PrivateCluster};
use idmint_testkit::{MYSQL_URL, POSTGRES_URL, PrivateService, REDIS_URL, Service};
use serde_json::Value;

use crate::{expect_ok, fails, idmint};

const LEASE_TTL: Duration = Duration::from_secs(3);

/// Nodes that join each in-process fleet one at a time.
const JOINS: u64 = 3;

/// 8 worker bits: room for the small fleets and their rolling restarts.
const LAYOUT: &str = "time=41,unit=1ms,epoch=2026-01-01T00:00:00Z,node=8,sequence=14";

/// An etcd endpoint and, when private, the etcd itself.
fn etcd() -> Option<(String, Option<PrivateService>)> {
    match std::env::var("IDMINT_TEST_ETCD_ENDPOINT") {
        Ok(endpoint) => Some((endpoint, None)),
        Err(_) => {
            let etcd = PrivateService::start(Service::Etcd)?;
            Some((etcd.address().to_owned(), Some(etcd)))
        }
    }
}

/// The `registry` lines of a config on etcd at `endpoint`.
fn etcd_registry(endpoint: &str) -> String {
    format!(
        "registry = \"etcd\"\n[snowflake.etcd]\nendpoints = [\"{endpoint}\"]\nlease_ttl = \"{}s\"",
        LEASE_TTL.as_secs()
    )
}

fn write_config(dir: &Path, layout: &str, registry: &str) -> String {
    let path = dir.join("fleet.toml");
    std::fs::write(
        &path,
        format!("[snowflake]\nlayout = \"{layout}\"\nwindow = \"1s\"\n{registry}\n"),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// Runs `idmint bench fleet` with `args`, expects success, and returns the
/// report of each fleet size (the `--json` file).
fn bench_fleet(dir: &Path, config: &str, args: &[&str]) -> Vec<Value> {
    let json = dir.join("fleet.json");
    let joins = JOINS.to_string();
    let mut all = vec![
        "bench",
        "fleet",
        "--config",
        config,
        "--json",
        json.to_str().unwrap(),
        "--joins",
        &joins,
    ];
    all.extend_from_slice(args);
    let stdout = expect_ok(&all, idmint(&all));
    assert!(stdout.contains("fleet of"), "{stdout}");
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// What every in-process run must show: all started, a kill that cost the
/// replacements a lease's wait, and a rolling restart with no refusal.
fn check_in_process(report: &Value, n: u64) {
    assert_eq!(report["start"]["served"], n, "{report:#}");
    assert_eq!(report["start"]["refused"], 0, "{report:#}");
    assert!(
        report["failures"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
    let steady = &report["steady"];
    // Each node renews and persists: some writes, and nowhere near a storm.
    let writes = f(&steady["writes_per_node_s"]);
    assert!(writes > 0.1 && writes < 5.0, "{report:#}");
    assert!(
        steady["coordinator"]["cpu_percent"].is_number(),
        "{report:#}"
    );
    let kill = &report["kill"];
    let killed = kill["killed"].as_u64().unwrap();
    assert_eq!(killed, n / 4, "{report:#}");
    assert_eq!(kill["replacements"]["served"], killed, "{report:#}");
    // A space of exactly n: each replacement waited for a dead node's
    // lease (not released: a crash), and then took its worker ID.
    let p50 = f(&kill["replacements"]["p50_ms"]);
    assert!(
        p50 >= 1000.0,
        "replacements did not wait for a lease: {report:#}"
    );
    assert!(
        f(&kill["replacements"]["max_ms"])
            < (LEASE_TTL + Duration::from_secs(20)).as_millis() as f64,
        "{report:#}"
    );
    let roll = &report["roll"];
    assert_eq!(roll["replacements"]["served"], n, "{report:#}");
    assert_eq!(roll["replacements"]["refused"], 0, "{report:#}");
}

#[test]
fn bench_fleet_in_process_on_etcd_reads_etcds_own_counters_and_recovers() {
    // A private etcd: its counters see this test's fleet alone.
    let Some(etcd) = PrivateService::start(Service::Etcd) else {
        return;
    };
    let endpoint = etcd.address().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), LAYOUT, &etcd_registry(&endpoint));
    let cluster = format!("bench-fleet-{}", std::process::id());
    let reports = bench_fleet(
        dir.path(),
        &config,
        &["--nodes", "4,20", "--steady", "3s", "--cluster", &cluster],
    );
    assert_eq!(reports.len(), 2);
    for (report, n) in reports.iter().zip([4, 20]) {
        assert_eq!(report["nodes"], n);
        assert_eq!(report["registry"], "etcd");
        check_in_process(report, n);
        let rates = &report["steady"]["coordinator"]["rates"];
        for counter in ["raft proposals", "grpc messages", "lease keep-alives"] {
            assert!(f(&rates[counter]) > 0.0, "{counter}: {report:#}");
        }
        // One request per registry call: a renewal is one keep-alive on a
        // stream kept open, a persist one transaction (no read first).
        let steady = &report["steady"];
        let calls = f(&steady["writes_per_node_s"]) + f(&steady["reads_per_node_s"]);
        let requests = f(&rates["grpc messages"]);
        assert!(
            requests <= calls * 1.2 + 0.1,
            "{requests} gRPC messages/s per node for {calls} registry calls: {report:#}"
        );
    }
}

/// `--steady-fault` on a 3-member etcd: its leader SIGKILLed halfway
/// through the steady state (and revived), every node probed meanwhile. What
/// fails the test is a broken promise (an ID twice, a refused start) or a
/// fault that did not run; the gaps and the workers kept are figures,
/// printed (BENCHMARKS.md has them at 1,000 nodes).
#[test]
fn bench_fleet_probes_every_node_through_an_etcd_leader_kill() {
    let Some(cluster) = PrivateCluster::start(ClusterKind::Etcd) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let endpoints: Vec<String> = cluster
        .members()
        .iter()
        .map(|e| format!("\"{e}\""))
        .collect();
    let registry = format!(
        "registry = \"etcd\"\n[snowflake.etcd]\nendpoints = [{}]\nlease_ttl = \"{}s\"",
        endpoints.join(", "),
        LEASE_TTL.as_secs()
    );
    let config = write_config(dir.path(), LAYOUT, &registry);
    let script = cluster.script_path().display().to_string();
    let cluster_dir = cluster.dir().display().to_string();
    let fault = format!(
        "n=$({script} kill leader {cluster_dir}) && sleep 2 && {script} revive $n {cluster_dir} && echo member $n"
    );
    let name = format!("bench-fleet-fault-{}", std::process::id());
    let reports = bench_fleet(
        dir.path(),
        &config,
        &[
            "--nodes",
            "10",
            "--steady",
            "8s",
            "--kill-percent",
            "0",
            "--roll-space",
            "0",
            "--steady-fault",
            &fault,
            "--cluster",
            &name,
        ],
    );
    let report = &reports[0];
    assert!(
        report["failures"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
    let f_ = &report["fault"];
    assert_eq!(f_["command_ok"], true, "{report:#}");
    assert!(
        f_["command_output"].as_str().unwrap().contains("member"),
        "{report:#}"
    );
    assert!(f(&f_["watched_s"]) >= 3.0, "{report:#}");
    eprintln!(
        "etcd leader killed under 10 nodes: longest gap {} ms, {} refused once or more, {} hold \
         another worker, {} failed calls",
        f_["longest_gap_ms"], f_["nodes_refused"], f_["workers_changed"], f_["failed_calls"]
    );
}

#[test]
fn bench_fleet_delay_slows_every_claim_and_nothing_is_refused() {
    let Some((endpoint, _etcd)) = etcd() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), LAYOUT, &etcd_registry(&endpoint));
    let cluster = format!("bench-fleet-delay-{}", std::process::id());
    let reports = bench_fleet(
        dir.path(),
        &config,
        &[
            "--nodes",
            "8",
            "--steady",
            "3s",
            "--delay",
            "100ms",
            "--cluster",
            &cluster,
        ],
    );
    let report = &reports[0];
    assert_eq!(report["delay_ms"], 100.0);
    check_in_process(report, 8);
    // A claim is at least a lease grant and a transaction: two round trips
    // of 200 ms through the proxy.
    let claim = &report["start"]["claim_call"];
    assert!(f(&claim["p50_ms"]) >= 400.0, "{report:#}");
    assert_eq!(report["steady"]["failed_calls"], 0, "{report:#}");
}

#[test]
fn bench_fleet_processes_on_etcd_fail_over_the_oracle_and_wait_for_dead_leases() {
    let Some((endpoint, _etcd)) = etcd() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // 3 worker bits: 8 processes fill the space, so replacements of killed
    // ones must wait for their leases to run out. Each serves a monotonic
    // key, which followers forward to the oracle's leader over gRPC.
    let path = dir.path().join("fleet.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[server]
grpc_addr = "127.0.0.1:0"

[snowflake]
layout = "time=41,unit=1ms,epoch=2026-01-01T00:00:00Z,node=3,sequence=12"
window = "1s"
registry = "etcd"

[snowflake.etcd]
endpoints = ["{endpoint}"]
lease_ttl = "{}s"

[monotonic]
lease_ttl = "2s"

[keys.seq]
strategy = "monotonic"
"#,
            LEASE_TTL.as_secs()
        ),
    )
    .unwrap();
    let cluster = format!("bench-fleet-procs-{}", std::process::id());
    let reports = bench_fleet(
        dir.path(),
        path.to_str().unwrap(),
        &[
            "--processes",
            "--nodes",
            "8",
            "--steady",
            "2s",
            "--oracle-key",
            "seq",
            "--cluster",
            &cluster,
            "--dir",
            dir.path().to_str().unwrap(),
        ],
    );
    let report = &reports[0];
    assert_eq!(report["mode"], "processes");
    assert_eq!(report["start"]["served"], 8, "{report:#}");
    let memory = f(&report["steady"]["nodes_memory_mib"]);
    assert!(memory > 8.0, "8 processes in {memory} MiB: {report:#}");

    // The leader's kill: every follower hands out IDs again, after a new
    // leader's lease (2 s) at most and some.
    let oracle = &report["oracle"];
    assert_eq!(oracle["followers"], 7, "{report:#}");
    assert_eq!(oracle["first_ids"]["served"], 7, "{report:#}");
    assert!(f(&oracle["first_ids"]["max_ms"]) < 20_000.0, "{report:#}");

    // Then two of the seven left die; with the space full, a replacement
    // waits for a dead node's lease.
    assert_eq!(report["kill"]["killed"], 2, "{report:#}");
    let replacements = &report["kill"]["replacements"];
    assert_eq!(replacements["served"], 2, "{report:#}");
    assert!(f(&replacements["max_ms"]) >= 1000.0, "{report:#}");
}

/// The other coordinators, 8 nodes each: every one's own counters are read.
#[test]
fn bench_fleet_runs_on_postgres_mariadb_redis_and_zookeeper() {
    let zookeeper = match std::env::var("IDMINT_TEST_ZOOKEEPER") {
        Ok(connect) => Some((connect, None)),
        Err(_) => {
            PrivateService::start(Service::ZooKeeper).map(|zk| (zk.address().to_owned(), Some(zk)))
        }
    };
    let mut cases = vec![
        (
            "sql (postgres)",
            format!(
                "registry = \"sql\"\n[snowflake.sql]\nurl = \"{POSTGRES_URL}\"\nlease_ttl = \"3s\""
            ),
            "transactions",
        ),
        (
            "sql (mysql)",
            format!(
                "registry = \"sql\"\n[snowflake.sql]\nurl = \"{MYSQL_URL}\"\nlease_ttl = \"3s\""
            ),
            "statements",
        ),
        (
            "redis",
            format!(
                "registry = \"redis\"\n[snowflake.redis]\nurl = \"{REDIS_URL}\"\nlease_ttl = \"3s\""
            ),
            "commands",
        ),
    ];
    if let Some((connect, _)) = &zookeeper {
        cases.push((
            "zookeeper",
            format!(
                "registry = \"zookeeper\"\n[snowflake.zookeeper]\nconnect = \"{connect}\"\nsession_timeout = \"3s\""
            ),
            "packets received",
        ));
    }
    for (registry, section, counter) in cases {
        let reachable = match registry {
            "sql (postgres)" => listens(5432),
            "sql (mysql)" => listens(3306),
            "redis" => listens(6379),
            _ => true,
        };
        if !idmint_testkit::require_service(registry, reachable) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(dir.path(), LAYOUT, &section);
        let cluster = format!("bench_fleet_{}", std::process::id());
        let reports = bench_fleet(
            dir.path(),
            &config,
            &["--nodes", "8", "--steady", "3s", "--cluster", &cluster],
        );
        let report = &reports[0];
        assert_eq!(report["registry"], registry, "{report:#}");
        check_in_process(report, 8);
        let rate = f(&report["steady"]["coordinator"]["rates"][counter]);
        assert!(rate > 0.0, "{registry}: {counter}: {report:#}");
    }
}

fn listens(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1))
        .is_ok()
}

#[test]
fn bench_fleet_refuses_what_it_cannot_measure() {
    let dir = tempfile::tempdir().unwrap();
    // The file registry holds one node's worker ID without a lease.
    let file = write_config(dir.path(), "twitter", "registry = \"file\"");
    let (code, line) = fails(&["bench", "fleet", "--config", &file]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("shared registry"), "{line}");

    let etcd = write_config(dir.path(), LAYOUT, "registry = \"etcd\"");
    let (code, line) = fails(&["bench", "fleet", "--config", &etcd, "--nodes", "0"]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("--nodes"), "{line}");
    let (code, line) = fails(&[
        "bench",
        "fleet",
        "--config",
        &etcd,
        "--processes",
        "--delay",
        "100ms",
    ]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("--delay"), "{line}");
}
