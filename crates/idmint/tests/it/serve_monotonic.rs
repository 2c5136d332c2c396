//! `strategy = "monotonic"`: the timestamp oracle end to end on real
//! `idmint serve` processes.
//!
//! - One node on the embedded file registry is its own oracle: IDs strictly
//!   increase, across a SIGKILL and restart too, and decode under `tso`.
//! - Three nodes on a private etcd, on ZooKeeper and on PostgreSQL: one
//!   leads, the others
//!   forward; clients asking different nodes see IDs in real-time order
//!   (every request's IDs above every ID returned before it began). The
//!   leader is SIGKILLed; a new one takes over within the lease, above
//!   everything the old one issued.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idmint_testkit::tls::TestCa;
use idmint_testkit::{POSTGRES_URL, PrivateService, Service};
use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::Value;

use crate::serve::{Served, client, expect_error, postgres_up, unique_suffix};

/// One request as a client saw it: when it began and ended, and its IDs.
#[derive(Debug, Clone)]
struct Seen {
    began: Instant,
    ended: Instant,
    ids: Vec<u64>,
}

/// `count` IDs of `key` from `node` as decimal text lines; `None` on a 503.
fn ids(client: &Client, node: &Served, key: &str, count: u64) -> Option<Vec<u64>> {
    let r = client
        .get(node.url(&format!("/v1/ids/{key}?count={count}")))
        .send()
        .ok()?;
    if r.status() == StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().unwrap();
    Some(text.lines().map(|l| l.parse().unwrap()).collect())
}

/// Checks real-time order: each request's IDs strictly increase, and are
/// above every ID of every request that ended before it began; no ID twice.
fn check_linearizable(seen: &[Seen]) -> Result<(), String> {
    let mut all = HashSet::new();
    for s in seen {
        if !s.ids.windows(2).all(|w| w[0] < w[1]) {
            return Err(format!("IDs of one request out of order: {:?}", s.ids));
        }
        for &id in &s.ids {
            if !all.insert(id) {
                return Err(format!("ID {id} issued twice"));
            }
        }
    }
    // Sorted by end: the highest ID of everything that ended before a
    // request began is a prefix maximum.
    let mut by_end: Vec<&Seen> = seen.iter().collect();
    by_end.sort_by_key(|s| s.ended);
    let mut prefix_max = Vec::with_capacity(by_end.len());
    let mut max = 0u64;
    for s in &by_end {
        max = max.max(*s.ids.last().unwrap());
        prefix_max.push(max);
    }
    for s in seen {
        let before = by_end.partition_point(|o| o.ended < s.began);
        if before > 0 {
            let floor = prefix_max[before - 1];
            if s.ids[0] <= floor {
                return Err(format!(
                    "order violated: a request that began after ID {floor} was returned got {}",
                    s.ids[0]
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn the_order_check_catches_repeats_and_inversions() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let seen = |spans: &[(u64, u64, &[u64])]| -> Vec<Seen> {
        spans
            .iter()
            .map(|&(b, e, ids)| Seen {
                began: at(b),
                ended: at(e),
                ids: ids.to_vec(),
            })
            .collect()
    };
    // Overlapping requests may come back in any order.
    assert_eq!(
        check_linearizable(&seen(&[(0, 10, &[5]), (1, 9, &[4])])),
        Ok(())
    );
    // One that began after another ended must be above it.
    let err = check_linearizable(&seen(&[(0, 5, &[5]), (6, 9, &[4])])).unwrap_err();
    assert!(err.contains("order violated"), "{err}");
    let err = check_linearizable(&seen(&[(0, 5, &[5, 6]), (1, 9, &[6])])).unwrap_err();
    assert!(err.contains("twice"), "{err}");
}

fn snapshot(client: &Client, node: &Served) -> Option<Value> {
    let r = client.get(node.url("/v1/status")).send().ok()?;
    let v: Value = r.json().ok()?;
    Some(v["monotonic"].clone())
}

/// Waits until every node knows one and the same leader; returns its index.
fn wait_for_leader(client: &Client, nodes: &[&Served]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views: Vec<Value> = nodes
            .iter()
            .map(|n| snapshot(client, n).unwrap_or(Value::Null))
            .collect();
        let leaders: Vec<usize> = views
            .iter()
            .enumerate()
            .filter(|(_, v)| v["role"] == "leader")
            .map(|(i, _)| i)
            .collect();
        let known: HashSet<String> = views
            .iter()
            .filter_map(|v| v["leader"].as_str().map(str::to_owned))
            .collect();
        if leaders.len() == 1 && known.len() == 1 && views.iter().all(|v| !v["leader"].is_null()) {
            return leaders[0];
        }
        assert!(
            Instant::now() < deadline,
            "no single leader after 30 s: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_monotonic_on_one_node_increases_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[keys.seq]\nstrategy = \"monotonic\"\n";
    let c = client();
    let mut last = 0u64;
    for round in 0..2 {
        let node = Served::start(&dir.path().join("node"), Some(config), &[]);
        for i in 0..200 {
            let count = if i % 10 == 0 { 1000 } else { 1 };
            let got = ids(&c, &node, "seq", count).expect("a node alone always leads");
            assert_eq!(got.len() as u64, count);
            assert!(got[0] > last, "round {round}: {} after {last}", got[0]);
            assert!(got.windows(2).all(|w| w[0] < w[1]));
            last = *got.last().unwrap();
        }
        // A batch of 100,000 in one step.
        let big = ids(&c, &node, "seq", 100_000).unwrap();
        assert!(big[0] > last && big.windows(2).all(|w| w[0] < w[1]));
        last = *big.last().unwrap();
        // The ID decodes under the tso layout: made about now.
        let millis = (last >> 18) as i64;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!((now - millis).abs() < 60_000, "{millis} vs {now}");
        let decoded: Value = c
            .get(node.url(&format!("/v1/decode/{last}?key=seq")))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(decoded["layout"], "tso", "{decoded}");
        assert_eq!(decoded["unix_ms"], millis, "{decoded}");
        let view = snapshot(&c, &node).unwrap();
        assert_eq!(view["role"], "leader", "{view}");
        // Killed without a chance to release: the restart starts above the mark.
        drop(node);
    }
}

#[test]
fn serve_monotonic_refuses_what_it_cannot_order() {
    let dir = tempfile::tempdir().unwrap();
    let bad = [
        (
            "[server]\nadmin_token = \"t\"\n[snowflake]\nregistry = \"etcd\"\n[keys.seq]\nstrategy = \"monotonic\"\n",
            "server.grpc_addr",
        ),
        (
            "[keys.seq]\nstrategy = \"monotonic\"\npublic = true\n[obfuscation]\nkey = \"2b7e151628aed2a6abf7158809cf4f3c\"\n",
            "keys.seq.public",
        ),
        (
            "[monotonic]\nlayout = \"twitter\"\n[keys.seq]\nstrategy = \"monotonic\"\n",
            "monotonic.layout",
        ),
        (
            "[snowflake]\nregistry = \"k8s\"\n[keys.seq]\nstrategy = \"monotonic\"\n",
            "snowflake.registry",
        ),
    ];
    for (config, key) in bad {
        let path = dir.path().join("idmint.toml");
        std::fs::write(&path, config).unwrap();
        let out = crate::idmint(&["config", "check", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config}: {stderr}");
        assert!(stderr.contains(key), "{config}: {stderr}");
    }
}

/// Three nodes on `registry` (a `[snowflake]` section body): order across
/// nodes under concurrent clients, then the leader SIGKILLed.
fn three_nodes(dir: &Path, registry: &str) {
    let config = format!(
        r#"
[server]
grpc_addr = "127.0.0.1:0"
resp_addr = "127.0.0.1:0"
# Reserve wants the admin token: followers send it when they forward.
admin_token = "cluster-secret"

[snowflake]
{registry}

[monotonic]
lease_ttl = "2s"

[keys.seq]
strategy = "monotonic"

[keys.other]
strategy = "monotonic"
"#
    );
    let mut nodes: Vec<Option<Served>> = (0..3)
        .map(|i| {
            Some(Served::start(
                &dir.join(format!("node{i}")),
                Some(&config),
                &[],
            ))
        })
        .collect();
    let c = client();
    let live = |nodes: &[Option<Served>]| -> Vec<usize> {
        (0..nodes.len()).filter(|&i| nodes[i].is_some()).collect()
    };
    let leader = {
        let refs: Vec<&Served> = nodes.iter().flatten().collect();
        wait_for_leader(&c, &refs)
    };

    // Four clients, each asking the nodes in turn, two keys.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let run_clients = |nodes: &[Option<Served>], rounds: usize, tolerate_503: bool| {
        let targets: Vec<&Served> = nodes.iter().flatten().collect();
        std::thread::scope(|scope| {
            for t in 0..4 {
                let seen = seen.clone();
                let targets = &targets;
                scope.spawn(move || {
                    let c = client();
                    for i in 0..rounds {
                        let node = targets[(t + i) % targets.len()];
                        let key = if i % 2 == 0 { "seq" } else { "other" };
                        let count = [1, 1, 7, 100][i % 4];
                        let began = Instant::now();
                        let got = ids(&c, node, key, count);
                        let ended = Instant::now();
                        match got {
                            Some(ids) => {
                                assert_eq!(ids.len() as u64, count);
                                seen.lock().unwrap().push(Seen { began, ended, ids });
                            }
                            None => assert!(tolerate_503, "503 with a leader in place"),
                        }
                    }
                });
            }
        });
    };
    run_clients(&nodes, 150, false);

    // SIGKILL the leader: the others wait for the lease, elect, go on.
    let killed_at = Instant::now();
    nodes[leader] = None;
    let survivors = live(&nodes);
    let first_after = loop {
        let node = nodes[survivors[0]].as_ref().unwrap();
        let began = Instant::now();
        if let Some(ids) = ids(&c, node, "seq", 1) {
            seen.lock().unwrap().push(Seen {
                began,
                ended: Instant::now(),
                ids,
            });
            break killed_at.elapsed();
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "no new leader 30 s after the old one was killed"
        );
    };
    eprintln!("monotonic fail-over after SIGKILL: first ID after {first_after:?}");
    run_clients(&nodes, 100, true);
    let refs: Vec<&Served> = nodes.iter().flatten().collect();
    let new_leader = wait_for_leader(&c, &refs);
    let view = snapshot(&c, refs[new_leader]).unwrap();
    assert_eq!(view["role"], "leader");

    let seen = seen.lock().unwrap();
    assert!(seen.len() > 900, "{} requests", seen.len());
    check_linearizable(&seen).unwrap();

    // A follower names the oracle in its status and forwards.
    let follower = (0..refs.len()).find(|&i| i != new_leader).unwrap();
    let view = snapshot(&c, refs[follower]).unwrap();
    assert_eq!(view["role"], "follower", "{view}");
    assert!(view["forwarded"].as_str().unwrap().parse::<u64>().unwrap() > 0);

    // RESP on a follower: INCR answers the oracle's next ID, above all seen.
    let highest = seen.iter().map(|s| *s.ids.last().unwrap()).max().unwrap();
    let resp_addr = refs[follower].resp_addr.clone().unwrap();
    let mut conn = std::net::TcpStream::connect(&resp_addr).unwrap();
    conn.write_all(b"*2\r\n$4\r\nINCR\r\n$3\r\nseq\r\n")
        .unwrap();
    let mut reply = [0u8; 64];
    let n = conn.read(&mut reply).unwrap();
    let text = std::str::from_utf8(&reply[..n]).unwrap();
    let id: u64 = text
        .strip_prefix(':')
        .and_then(|t| t.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("{text:?}"));
    assert!(id > highest, "RESP {id} after {highest}");

    // The Rust client, prefetch on, over every node: it learns the key is
    // monotonic and never buffers it; each call above the last.
    let urls: Vec<String> = refs.iter().map(|n| n.url("")).collect();
    let rust_client = idmint_client::Client::builder()
        .servers(urls)
        .prefetch(1000)
        .build_blocking()
        .unwrap();
    let mut last = id;
    for _ in 0..100 {
        let next = rust_client.next_id("seq").unwrap();
        assert!(next > last, "client {next} after {last}");
        last = next;
    }
    assert_eq!(rust_client.buffered("seq"), 0);

    // Metrics: the leader says so; the follower counts what it forwarded.
    let metrics = |node: &Served| c.get(node.url("/metrics")).send().unwrap().text().unwrap();
    assert!(metrics(refs[new_leader]).contains("idmint_oracle_leader 1"));
    let follower_metrics = metrics(refs[follower]);
    assert!(
        follower_metrics.contains("idmint_oracle_leader 0"),
        "{follower_metrics}"
    );
    assert!(follower_metrics.contains("idmint_oracle_leader_known 1"));
    assert!(follower_metrics.contains("idmint_oracle_ids_total{path=\"forwarded\"}"));

    // Reserve, the followers' RPC, wants the cluster's admin token.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let leader_grpc = format!("http://{}", crate::serve_grpc::grpc_addr(refs[new_leader]));
    let (refused, reserved) = rt.block_on(async {
        use idmint_server::grpc::proto::ReserveRequest;
        use idmint_server::grpc::proto::id_service_client::IdServiceClient;
        let mut grpc = IdServiceClient::connect(leader_grpc).await.unwrap();
        let refused = grpc.reserve(ReserveRequest { count: 5 }).await.unwrap_err();
        let mut request = tonic::Request::new(ReserveRequest { count: 5 });
        request
            .metadata_mut()
            .insert("authorization", "Bearer cluster-secret".parse().unwrap());
        (refused, grpc.reserve(request).await.unwrap().into_inner())
    });
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    assert_eq!(reserved.counts.iter().sum::<u64>(), 5);
    assert!(
        reserved.firsts[0] > id,
        "Reserve {:?} after {id}",
        reserved.firsts
    );

    // Bad input changes nothing and says what was wrong.
    let r = c
        .get(refs[follower].url("/v1/ids/seq?count=0"))
        .send()
        .unwrap();
    expect_error(r, StatusCode::BAD_REQUEST, "invalid_count");
}

/// Followers forward to the leader's gRPC listener, at that listener's own
/// address: here each node's gRPC listens on another loopback IP than its
/// HTTP (issue: the leader advertised its HTTP IP with its gRPC port, and
/// followers answered 503 no_leader).
#[test]
fn serve_monotonic_followers_reach_a_leader_whose_grpc_listens_on_another_ip() {
    let Some(etcd) = PrivateService::start(Service::Etcd) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nadmin_token = \"cluster-secret\"\n[snowflake]\nregistry = \"etcd\"\n\
         [snowflake.etcd]\nendpoints = [\"{}\"]\n[keys.seq]\nstrategy = \"monotonic\"\n",
        etcd.address()
    );
    let nodes: Vec<Served> = ["127.0.0.2", "127.0.0.3"]
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            Served::start_with_args(
                &dir.path().join(format!("node{i}")),
                Some(&config),
                &[],
                &["--grpc-addr", &format!("{ip}:0")],
            )
        })
        .collect();
    let c = client();
    let refs: Vec<&Served> = nodes.iter().collect();
    let leader = wait_for_leader(&c, &refs);
    let follower = 1 - leader;
    let view = snapshot(&c, &nodes[follower]).unwrap();
    let named = view["leader"].as_str().unwrap().to_owned();
    let leader_ip = ["127.0.0.2", "127.0.0.3"][leader];
    assert!(
        named.contains(leader_ip),
        "the leader is known by its gRPC address {leader_ip}: {view}"
    );
    let mut last = 0;
    for count in [1, 10, 100] {
        let got = ids(&c, &nodes[follower], "seq", count)
            .unwrap_or_else(|| panic!("the follower could not reach the leader at {named}"));
        assert_eq!(got.len() as u64, count);
        assert!(got[0] > last && got.windows(2).all(|w| w[0] < w[1]));
        last = *got.last().unwrap();
    }
}

#[test]
fn serve_monotonic_three_nodes_on_etcd_keep_order_through_a_leader_kill() {
    let Some(etcd) = PrivateService::start(Service::Etcd) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let registry = format!(
        "registry = \"etcd\"\n[snowflake.etcd]\nendpoints = [\"{}\"]\nlease_ttl = \"3s\"\n",
        etcd.address()
    );
    three_nodes(dir.path(), &registry);
}

#[test]
fn serve_monotonic_three_nodes_on_zookeeper_keep_order_through_a_leader_kill() {
    let connect = std::env::var("IDMINT_TEST_ZOOKEEPER")
        .ok()
        .filter(|a| !a.is_empty());
    if !idmint_testkit::require_service("ZooKeeper (IDMINT_TEST_ZOOKEEPER)", connect.is_some()) {
        return;
    }
    let connect = connect.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cluster = format!("mono-{}", unique_suffix());
    let registry = format!(
        "registry = \"zookeeper\"\n[snowflake.zookeeper]\nconnect = \"{connect}\"\ncluster = \"{cluster}\"\n"
    );
    three_nodes(dir.path(), &registry);
}

#[test]
fn serve_monotonic_three_nodes_on_postgres_keep_order_through_a_leader_kill() {
    if !postgres_up() {
        return;
    }
    let unique = unique_suffix();
    let dir = tempfile::tempdir().unwrap();
    let registry = format!(
        "registry = \"sql\"\n[snowflake.sql]\nurl = \"{POSTGRES_URL}\"\ncluster = \"mono-{unique}\"\ntable = \"idmint_worker_mono_{unique}\"\n"
    );
    three_nodes(dir.path(), &registry);
}

#[test]
fn serve_monotonic_forwards_over_mutual_tls_and_refuses_a_leader_it_cannot_verify_until_reloaded() {
    if !postgres_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let ca = TestCa::new("idmint oracle test CA");
    let ca_file = ca.write(&pki, "ca");
    let (server_cert, server_key) = ca.server(21).write(&pki, "server");
    let (client_cert, client_key) = ca.client(22).write(&pki, "client");
    let stranger = TestCa::new("a CA nobody trusts").write(&pki, "stranger");
    let unique = unique_suffix();
    // gRPC alone speaks (mutual) TLS; HTTP stays plain for the test's client.
    let config = |forward_ca: &Path, leader_wait: &str| {
        format!(
            r#"
[server]
grpc_addr = "127.0.0.1:0"

[snowflake]
registry = "sql"
[snowflake.sql]
url = "{POSTGRES_URL}"
cluster = "mono-tls-{unique}"
table = "idmint_worker_mtls_{unique}"

[monotonic]
leader_wait = "{leader_wait}"
forward_ca = {forward_ca:?}
forward_cert = {client_cert:?}
forward_key = {client_key:?}

[keys.seq]
strategy = "monotonic"

[tls]
cert = {server_cert:?}
key = {server_key:?}
client_ca = {ca_file:?}
http = false
resp = false
"#
        )
    };
    let c = client();
    let leader = Served::start(&dir.path().join("a"), Some(&config(&ca_file, "2s")), &[]);
    wait_for_leader(&c, &[&leader]);
    let follower = Served::start(&dir.path().join("b"), Some(&config(&ca_file, "2s")), &[]);
    let doubter = Served::start(
        &dir.path().join("c"),
        Some(&config(&stranger, "500ms")),
        &[],
    );
    let mut last = 0;
    for _ in 0..50 {
        let got = ids(&c, &follower, "seq", 3).expect("forwarded over mutual TLS");
        assert!(got[0] > last);
        last = got[2];
    }
    assert_eq!(snapshot(&c, &follower).unwrap()["forwarded"], "150");
    // A follower that does not trust the leader's certificate forwards nothing.
    let r = c.get(doubter.url("/v1/ids/seq")).send().unwrap();
    let message = expect_error(r, StatusCode::SERVICE_UNAVAILABLE, "no_leader");
    assert!(message.contains("does not answer"), "{message}");
    // Its forward_ca replaced by the cluster's CA and SIGHUP: it reloads the
    // forwarding files with the listeners' and forwards over the new ones.
    std::fs::copy(&ca_file, &stranger).unwrap();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &doubter.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let got = loop {
        if let Some(got) = ids(&c, &doubter, "seq", 3) {
            break got;
        }
        assert!(Instant::now() < deadline, "still refused after the reload");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(got[0] > last, "{got:?} after {last}");
    assert!(
        doubter.log().contains("TLS certificate reloaded"),
        "{}",
        doubter.log()
    );
    // A leader without TLS settings for forwarding is refused at start.
    let path = dir.path().join("no-ca.toml");
    std::fs::write(
        &path,
        config(&ca_file, "2s").replace(&format!("forward_ca = {ca_file:?}\n"), ""),
    )
    .unwrap();
    let out = crate::idmint(&["config", "check", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("monotonic.forward_ca"), "{stderr}");
}
