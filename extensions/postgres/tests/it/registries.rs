//! Workers from the registries `idmint serve` has, through `idmint.config`:
//! three clusters on one etcd, an etcd outage past the lease, pairs of
//! clusters on ZooKeeper, Redis and SQL, and a config that can't work.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::service::{Service, require_service};
use crate::{
    CREATE, INSERT, assert_idmint_error, config_file, inserts_go_on_above, max_id,
    rows_per_connection, say,
};

/// An idmint config naming `etcd` as the registry (the file `idmint serve
/// --config` reads), in `cluster` with `lease_ttl`.
fn etcd_config(etcd: &Service, cluster: &str, lease_ttl: &str) -> String {
    format!(
        "[snowflake]\nregistry = \"etcd\"\n\n[snowflake.etcd]\nendpoints = [\"{}\"]\n\
         cluster = \"{cluster}-{}\"\nlease_ttl = \"{lease_ttl}\"\n",
        etcd.address(),
        std::process::id()
    )
}

/// Every `id` in `t`, read with COPY.
fn ids(client: &mut postgres::Client) -> Vec<i64> {
    let reader = client.copy_out("COPY t (id) TO STDOUT").unwrap();
    BufReader::new(reader)
        .lines()
        .map(|l| l.unwrap().parse().unwrap())
        .collect()
}

/// Three clusters, one etcd: each inserts from 8 connections at once, all
/// three at the same time. Each holds a worker of its own from etcd, every
/// ID carries its cluster's worker, and the union has no duplicate.
#[test]
fn three_clusters_on_one_etcd_repeat_no_id() {
    let Some(etcd) = Service::etcd("three") else {
        return;
    };
    let config = config_file("three", &etcd_config(&etcd, "three", "10s"));
    let setting = config.setting();
    let clusters: Vec<Cluster> = (0..3)
        .map(|i| Cluster::start_with(&format!("etcd{i}"), &setting))
        .collect();
    for c in &clusters {
        c.client().batch_execute(CREATE).unwrap();
    }
    let rows = rows_per_connection();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for c in &clusters {
            scope.spawn(move || c.insert_bulk(8, rows, "t", 1));
        }
    });
    let took = started.elapsed();
    let total = 3 * 8 * rows;
    say(&format!(
        "3 clusters on etcd, 8 connections each: {total} rows in {:.1} s ({:.0} rows/s)",
        took.as_secs_f64(),
        total as f64 / took.as_secs_f64()
    ));

    let mut all = HashSet::with_capacity(total as usize);
    let mut nodes = HashSet::new();
    let mut duplicates = 0u64;
    for c in &clusters {
        let mut client = c.client();
        let status = client
            .query_one(
                "SELECT registry, datacenter, worker, lease FROM idmint_status()",
                &[],
            )
            .unwrap();
        let (registry, dc, worker, lease): (String, i32, i32, String) =
            (status.get(0), status.get(1), status.get(2), status.get(3));
        assert_eq!((registry.as_str(), lease.as_str()), ("etcd", "held"));
        assert!(
            nodes.insert((dc, worker)),
            "two clusters hold ({dc}, {worker})"
        );
        // The newest and oldest IDs through idmint_decode, every ID by its
        // bits: the default layout (twitter) keeps 12 sequence bits under 5
        // worker bits under 5 datacenter bits.
        let decoded: i64 = client
            .query_one(
                "SELECT count(*) FROM idmint_decode((SELECT min(id) FROM t)) a,
                 idmint_decode((SELECT max(id) FROM t)) b
                 WHERE (a.datacenter, a.worker, b.datacenter, b.worker) = ($1, $2, $1, $2)",
                &[&dc, &worker],
            )
            .unwrap()
            .get(0);
        assert_eq!(decoded, 1, "idmint_decode: not ({dc}, {worker})'s IDs");
        let node = i64::from(dc << 5 | worker);
        let ids = ids(&mut client);
        assert_eq!(ids.len() as u64, 8 * rows);
        let foreign = ids.iter().filter(|id| (*id >> 12) & 1023 != node).count();
        assert_eq!(
            foreign, 0,
            "IDs of another node in ({dc}, {worker})'s table"
        );
        for id in ids {
            if !all.insert(id) {
                duplicates += 1;
            }
        }
    }
    assert_eq!(duplicates, 0, "duplicate IDs across the three clusters");
    assert_eq!(all.len() as u64, total);
}

/// etcd stopped past the lease: inserts fail with the typed error (SQLSTATE
/// 55000, `lease_lost` or `mark_reached`) and insert nothing; etcd back,
/// inserts resume above every earlier ID.
#[test]
fn an_etcd_outage_past_the_lease_fails_inserts_until_it_returns() {
    let Some(etcd) = Service::etcd("outage") else {
        return;
    };
    let lease_ttl = Duration::from_secs(3);
    let config = config_file("outage", &etcd_config(&etcd, "outage", "3s"));
    let cluster = Cluster::start_with("outage", &config.setting());
    let mut client = cluster.client();
    client.batch_execute(CREATE).unwrap();
    for _ in 0..100 {
        client.execute(INSERT, &[&1]).unwrap();
    }
    let max_before = max_id(&mut client);

    etcd.stop();
    let stopped = Instant::now();
    // Past the lease (and the mark the keeper persisted ahead): no more IDs.
    std::thread::sleep(lease_ttl + Duration::from_secs(2));
    let err = client.execute(INSERT, &[&2]).unwrap_err();
    let code = assert_idmint_error(&err, "55000", &["lease_lost", "mark_reached"]);
    let lease: String = client
        .query_one("SELECT lease FROM idmint_status()", &[])
        .unwrap()
        .get(0);
    assert!(
        matches!(lease.as_str(), "expired" | "lost" | "renewing"),
        "lease {lease} with etcd down for {:?}",
        stopped.elapsed()
    );
    let n: i64 = client
        .query_one("SELECT count(*) FROM t WHERE round = 2", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "a failed insert left a row");
    say(&format!(
        "etcd down {:.1} s: INSERT failed with {code} (lease {lease})",
        stopped.elapsed().as_secs_f64()
    ));

    etcd.restart();
    let back = Instant::now();
    loop {
        match client.execute(INSERT, &[&2]) {
            Ok(_) => break,
            Err(e) => {
                assert_idmint_error(&e, "55000", &["lease_lost", "mark_reached", "not_ready"]);
                assert!(
                    back.elapsed() < Duration::from_secs(30),
                    "inserts still fail 30 s after etcd returned: {e:?}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    say(&format!(
        "etcd back: inserts resumed after {:.1} s",
        back.elapsed().as_secs_f64()
    ));
    for _ in 0..100 {
        client.execute(INSERT, &[&2]).unwrap();
    }
    let row = client
        .query_one(
            "SELECT min(id), count(*), count(DISTINCT id) FROM t WHERE round = 2",
            &[],
        )
        .unwrap();
    let (min_after, n, distinct): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((n, distinct), (101, 101));
    assert!(
        min_after > max_before,
        "{min_after} after the outage, {max_before} before"
    );
}

/// A config that can't work: the server starts, says why in its log, and
/// every call fails with `invalid_config` (22023), inserting nothing.
#[test]
fn a_bad_config_is_an_error_not_an_id() {
    let config = config_file(
        "bad",
        "[snowflake]\nregistry = \"etcd\"\n\n[snowflake.etcd]\nlease_ttl = \"1500ms\"\n",
    );
    let cluster = Cluster::start_with("badconfig", &config.setting());
    let mut client = cluster.client();
    client.batch_execute(CREATE).unwrap();
    let started = Instant::now();
    let err = client.execute(INSERT, &[&1]).unwrap_err();
    assert_idmint_error(&err, "22023", &["invalid_config"]);
    let message = err.as_db_error().unwrap().message().to_owned();
    assert!(message.contains("snowflake.etcd"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a bad config made the call wait"
    );
    let n: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    let log = cluster.log();
    assert!(
        log.contains("idmint error code: invalid_config") && log.contains("snowflake.etcd"),
        "{log}"
    );
    // idmint_status() reports it (the keeper sets it as it starts).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let row = client
            .query_one("SELECT lease, last_error FROM idmint_status()", &[])
            .unwrap();
        let (lease, last_error): (String, Option<String>) = (row.get(0), row.get(1));
        if (lease.as_str(), last_error.as_deref()) == ("failed", Some("invalid_config")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "status: lease {lease}, last error {last_error:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A file that isn't there either.
    let missing = Cluster::start_with(
        "missingconfig",
        "idmint.config = '/nonexistent/idmint.toml'",
    );
    let mut client = missing.client();
    client.batch_execute("CREATE EXTENSION idmint").unwrap();
    let err = client
        .query_one("SELECT idmint_next_id()", &[])
        .unwrap_err();
    assert_idmint_error(&err, "22023", &["invalid_config"]);
    assert!(
        err.as_db_error()
            .unwrap()
            .message()
            .contains("/nonexistent/idmint.toml"),
        "{err:?}"
    );
}

/// Whether something listens at `addr` (the machine's own services).
fn listening(addr: &str) -> bool {
    addr.parse()
        .is_ok_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok())
}

/// Two clusters on each of: a private ZooKeeper (ephemeral nodes), the
/// machine's Redis, the machine's PostgreSQL (the `sql` registry's table in
/// database `test`), as the workspace's tests reach them. Each pair inserts
/// at once from 4 connections a cluster: distinct workers, no duplicate.
#[test]
fn clusters_on_zookeeper_redis_and_sql_repeat_no_id() {
    let cluster_name = format!("pg-ext-{}", std::process::id());
    for registry in ["zookeeper", "redis", "sql"] {
        // The service, kept running for the pair, and the registry's section.
        let (_zookeeper, section) = match registry {
            "zookeeper" => {
                let Some(zk) = Service::zookeeper("pair") else {
                    continue;
                };
                let section = format!(
                    "[snowflake.zookeeper]\nconnect = \"{}\"\ncluster = \"{cluster_name}\"\n",
                    zk.address()
                );
                (Some(zk), section)
            }
            "redis" => {
                if !require_service("redis", listening("127.0.0.1:6379"), "nothing on 6379") {
                    continue;
                }
                let section = format!(
                    "[snowflake.redis]\nurl = \"redis://127.0.0.1:6379/\"\ncluster = \"{cluster_name}\"\n"
                );
                (None, section)
            }
            _ => {
                if !require_service("PostgreSQL", listening("127.0.0.1:5432"), "nothing on 5432") {
                    continue;
                }
                let section = format!(
                    "[snowflake.sql]\nurl = \"postgres://postgres@127.0.0.1:5432/test\"\n\
                     mode = \"lease\"\ncluster = \"{cluster_name}\"\n"
                );
                (None, section)
            }
        };
        let config = config_file(
            registry,
            &format!("[snowflake]\nregistry = \"{registry}\"\n\n{section}"),
        );
        let clusters: Vec<Cluster> = (0..2)
            .map(|i| Cluster::start_with(&format!("{registry}{i}"), &config.setting()))
            .collect();
        for c in &clusters {
            c.client().batch_execute(CREATE).unwrap();
        }
        std::thread::scope(|scope| {
            for c in &clusters {
                scope.spawn(move || c.insert(4, 2_000, INSERT, 1));
            }
        });
        let mut all = HashSet::new();
        let mut nodes = HashSet::new();
        for c in &clusters {
            let mut client = c.client();
            let status = client
                .query_one(
                    "SELECT registry, datacenter, worker, lease FROM idmint_status()",
                    &[],
                )
                .unwrap();
            let (name, dc, worker, lease): (String, i32, i32, String) =
                (status.get(0), status.get(1), status.get(2), status.get(3));
            assert_eq!((name.as_str(), lease.as_str()), (registry, "held"));
            assert!(
                nodes.insert((dc, worker)),
                "two clusters hold ({dc}, {worker}) on {registry}"
            );
            for id in ids(&mut client) {
                assert!(all.insert(id), "{id} twice on {registry}");
            }
        }
        assert_eq!(all.len(), 2 * 4 * 2_000);
        say(&format!(
            "2 clusters on {registry}: workers {nodes:?}, {} IDs, no duplicate",
            all.len()
        ));
    }
}

/// The `sql` registry on the cluster's own server, for a single server that
/// wants its worker in a table rather than a file: the keeper connects to
/// the server it runs in (retrying until it accepts connections), and IDs
/// go on above every earlier one across a clean restart.
#[test]
fn the_sql_registry_on_the_same_server() {
    let cluster = Cluster::start("samesql");
    let config = config_file(
        "samesql",
        &format!(
            "[snowflake]\nregistry = \"sql\"\n\n[snowflake.sql]\nurl = \"{}\"\nmode = \"lease\"\n",
            cluster.url()
        ),
    );
    cluster.restart_with(&config.setting());
    let mut client = cluster.client();
    client.batch_execute(CREATE).unwrap();
    cluster.insert(4, 1_000, INSERT, 1);
    let status = client
        .query_one("SELECT registry, lease FROM idmint_status()", &[])
        .unwrap();
    assert_eq!(
        (status.get::<_, String>(0), status.get::<_, String>(1)),
        ("sql".to_owned(), "held".to_owned())
    );
    let max_before = max_id(&mut client);
    drop(client);
    cluster.restart();
    inserts_go_on_above(&cluster, max_before, 1_000, 8_000);
}
