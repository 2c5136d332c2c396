//! `idmint serve` started while its coordinator can't answer: not up yet,
//! or a 3-member etcd cluster or ZooKeeper ensemble between leaders. A start
//! waits on an answer that a retry would change, and then serves; it never
//! exits on one (issue: every etcd rolling upgrade changes the leader, and a
//! node started then used to exit with `etcdserver: leader changed`).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use idmint_testkit::cluster::{ClusterKind, PrivateCluster};
use idmint_testkit::{PrivateService, Service};

use crate::serve::{Served, client, get, spawn};

/// Three nodes started each just after the leader was SIGKILLed, the killed
/// member revived before the next: each must serve, and their IDs differ.
fn start_while_the_leader_dies(kind: ClusterKind, config: impl Fn(&PrivateCluster) -> String) {
    let Some(cluster) = PrivateCluster::start(kind) else {
        return;
    };
    let c = client();
    let mut ids = HashSet::new();
    let mut served = Vec::new();
    let dirs = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let killed = cluster.kill_leader();
        let started = Instant::now();
        let node = Served::start(
            &dirs.path().join(format!("node{round}")),
            Some(&config(&cluster)),
            &[],
        );
        let took = started.elapsed();
        let (status, body) = get(&c, &node.url("/v1/ids/orders?count=50"));
        assert_eq!(status, 200, "round {round}: {body}");
        let issued = crate::integers(&body);
        assert_eq!(issued.len(), 50, "{body}");
        for id in issued {
            assert!(ids.insert(id), "{id} twice");
        }
        eprintln!(
            "{kind:?} round {round}: member {killed} killed, the node served {:.2} s after its start",
            took.as_secs_f64()
        );
        cluster.revive(killed);
        served.push(node);
    }
    assert_eq!(ids.len(), 150);
    // A member other than the leader down: the cluster serves, and so must
    // every node, without a single failed request (each node's calls that
    // went to that member move to another).
    let leader = cluster.leader();
    let follower = if leader == 1 { 2 } else { 1 };
    cluster.kill(follower);
    let gaps = load(&c, &served, Duration::from_secs(6));
    for (n, (failed, gap)) in gaps.iter().enumerate() {
        if *failed > 0 {
            let log = served[n].log();
            let warnings: Vec<&str> = log.lines().filter(|l| !l.contains(" INFO ")).collect();
            eprintln!("node {n}'s log:\n{}", warnings.join("\n"));
        }
        assert_eq!(
            *failed, 0,
            "node {n}: {failed} requests failed with member {follower} of 3 down"
        );
        eprintln!(
            "{kind:?}: member {follower} down, node {n}'s longest gap {:.3} s",
            gap.as_secs_f64()
        );
    }
    cluster.revive(follower);
    // The leader killed under load: what each node's longest gap was.
    let killed = cluster.kill_leader();
    for (n, (failed, gap)) in load(&c, &served, Duration::from_secs(6)).iter().enumerate() {
        eprintln!(
            "{kind:?}: leader (member {killed}) killed, node {n}: {failed} failed, longest gap {:.3} s",
            gap.as_secs_f64()
        );
    }
}

/// Asks every node for an ID every 20 ms for `time`; for each node, how
/// many requests failed and the longest time between two IDs.
fn load(c: &reqwest::blocking::Client, nodes: &[Served], time: Duration) -> Vec<(u32, Duration)> {
    let end = Instant::now() + time;
    let mut seen: Vec<(u32, Duration, Instant)> = nodes
        .iter()
        .map(|_| (0, Duration::ZERO, Instant::now()))
        .collect();
    while Instant::now() < end {
        for (node, (failed, gap, last)) in nodes.iter().zip(seen.iter_mut()) {
            let (status, body) = get(c, &node.url("/v1/ids/orders"));
            let now = Instant::now();
            if status == 200 {
                *gap = (*gap).max(now - *last);
                *last = now;
            } else {
                if *failed == 0 {
                    eprintln!("{}: {status} {body}", node.addr);
                }
                *failed += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    seen.into_iter()
        .map(|(failed, gap, last)| (failed, gap.max(end.saturating_duration_since(last))))
        .collect()
}

#[test]
fn serve_started_as_the_etcd_leader_dies_waits_then_serves() {
    start_while_the_leader_dies(ClusterKind::Etcd, |cluster| {
        let endpoints: Vec<String> = cluster
            .members()
            .iter()
            .map(|e| format!("\"{e}\""))
            .collect();
        // An 8 s window: a loaded CI machine (three etcd members and the
        // other serve tests at once) was seen to answer a live member's
        // calls in over a second, one after another for 6 s, and a 3 s
        // window ran out on that; what is tested is that a member down
        // fails no request, not how slow the others may be.
        format!(
            "[snowflake]\nregistry = \"etcd\"\nlayout = \"leaf,node=4\"\nwindow = \"8s\"\n\
             [snowflake.etcd]\nendpoints = [{}]\n",
            endpoints.join(", ")
        )
    });
}

#[test]
fn serve_started_as_the_zookeeper_leader_dies_waits_then_serves() {
    start_while_the_leader_dies(ClusterKind::ZooKeeper, |cluster| {
        format!(
            "[snowflake]\nregistry = \"zookeeper\"\nlayout = \"leaf,node=4\"\n\
             [snowflake.zookeeper]\nconnect = \"{}\"\nsession_timeout = \"3s\"\n",
            cluster.connect_string()
        )
    });
}

/// A node started while its etcd is down waits (it does not exit), and
/// serves once etcd is back.
#[test]
fn serve_started_before_its_etcd_is_up_waits_then_serves() {
    let Some(etcd) = PrivateService::start(Service::Etcd) else {
        return;
    };
    etcd.stop();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[snowflake]\nregistry = \"etcd\"\n[snowflake.etcd]\nendpoints = [\"{}\"]\n",
        etcd.address()
    );
    let data = dir.path().join("data");
    let (mut child, ready, log) = spawn(&data, Some(&config), &[]);
    std::thread::sleep(Duration::from_secs(3));
    let status = child.try_wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status.is_none(),
        "exited ({status:?}) while etcd was down: {text}"
    );
    assert!(
        text.contains("waiting for the registry"),
        "no line says what the start waits for: {text}"
    );
    assert!(!ready.exists(), "ready while etcd was down");
    etcd.restart();
    let restarted = Instant::now();
    let deadline = restarted + Duration::from_secs(30);
    while !std::fs::read_to_string(&ready).is_ok_and(|t| t.ends_with('\n')) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "exited after etcd came back"
        );
        assert!(
            Instant::now() < deadline,
            "not ready 30 s after etcd came back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "ready {:.2} s after etcd came back",
        restarted.elapsed().as_secs_f64()
    );
    let addr = std::fs::read_to_string(&ready).unwrap();
    let addr = addr.lines().next().unwrap();
    let (status, body) = get(&client(), &format!("http://{addr}/v1/ids/orders?count=3"));
    assert_eq!(status, 200, "{body}");
    let _ = child.kill();
    let _ = child.wait();
}

/// A registry mode that never gives a worker ID to another node keeps
/// issuing through a coordinator outage longer than the mark window (3 s):
/// not one failed request, the node stays ready, and once the coordinator
/// is back the mark catches up and the status says so.
fn issues_through_an_outage(service: Service, config: impl Fn(&str) -> String) {
    let Some(coordinator) = PrivateService::start(service) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Served::start(
        &dir.path().join("data"),
        Some(&config(coordinator.address())),
        &[],
    );
    let c = client();
    let before = load(&c, std::slice::from_ref(&node), Duration::from_secs(1));
    assert_eq!(before[0].0, 0, "failed before the outage");
    coordinator.stop();
    let stopped = Instant::now();
    // 8 s of load, asking `/readyz` after each second of it: a load
    // balancer must not take the node out while it serves.
    let (mut failed, mut longest) = (0, Duration::ZERO);
    let mut unready = Vec::new();
    for second in 1..=8 {
        let (f, gap) = load(&c, std::slice::from_ref(&node), Duration::from_secs(1))[0];
        failed += f;
        longest = longest.max(gap);
        let (status, body) = get(&c, &node.url("/readyz"));
        if status != 200 {
            unready.push(format!("{second} s in: {status} {body}"));
        }
    }
    let (_, body) = get(&c, &node.url("/v1/status"));
    coordinator.restart();
    eprintln!(
        "{}: {:.1} s outage: {failed} failed, longest gap {:.3} s, {} of 8 asks not ready",
        service_name(service),
        stopped.elapsed().as_secs_f64(),
        longest.as_secs_f64(),
        unready.len()
    );
    assert_eq!(failed, 0, "requests failed during the outage");
    assert!(
        unready.is_empty(),
        "not ready during the outage: {unready:#?}"
    );
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(s["worker"]["coordinator_away"], true, "{body}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = get(&c, &node.url("/v1/status"));
        let s: serde_json::Value = serde_json::from_str(&body).unwrap();
        if s["worker"]["coordinator_away"] == false && s["worker"]["last_error"].is_null() {
            break;
        }
        assert!(Instant::now() < deadline, "never caught up: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        node.log().contains("issuing goes on"),
        "no line says the node issues on: {}",
        node.log()
    );
}

fn service_name(service: Service) -> &'static str {
    match service {
        Service::Postgres => "postgres",
        Service::ZooKeeper => "zookeeper",
        _ => "other",
    }
}

#[test]
fn serve_sql_disposable_issues_through_a_database_outage() {
    issues_through_an_outage(Service::Postgres, |url| {
        format!(
            "[snowflake]\nregistry = \"sql\"\nlayout = \"leaf\"\n\
             [snowflake.sql]\nurl = \"{url}\"\nmode = \"disposable\"\n"
        )
    });
}

#[test]
fn serve_zookeeper_forever_issues_through_a_zookeeper_outage() {
    issues_through_an_outage(Service::ZooKeeper, |connect| {
        format!(
            "[snowflake]\nregistry = \"zookeeper\"\nlayout = \"leaf\"\n\
             [snowflake.zookeeper]\nconnect = \"{connect}\"\nmode = \"forever\"\n"
        )
    });
}

/// Issue 32, item 4, through `idmint serve`: a node on the SQL `lease`
/// registry (lease 10 s, window 1 s: a hold of 11 s) keeps serving through a
/// promotion of a lagging PostgreSQL replica (copied after the node started,
/// so it lacks the node's last marks). The node finds the new epoch at its
/// next renewal or mark and registers its worker again: the same worker, no
/// new claim (generation 1), and a gap of about the promotion's own time, not
/// the hold; every ID unique.
#[test]
fn serve_sql_lease_keeps_its_worker_through_a_postgres_promotion() {
    let Some(pg) = PrivateService::start(Service::Postgres) else {
        return;
    };
    let config = format!(
        "[snowflake]\nregistry = \"sql\"\nlayout = \"leaf\"\nwindow = \"1s\"\n\
         [snowflake.sql]\nurl = \"{}\"\nmode = \"lease\"\nlease_ttl = \"10s\"\n",
        pg.address()
    );
    let dir = tempfile::tempdir().unwrap();
    let node = Served::start(&dir.path().join("data"), Some(&config), &[]);
    let c = client();
    let status = |c: &reqwest::blocking::Client| -> serde_json::Value {
        let (_, body) = get(c, &node.url("/v1/status"));
        serde_json::from_str(&body).unwrap()
    };
    let worker = status(&c)["worker"]["id"].clone();
    pg.replicate();
    let before = load(&c, std::slice::from_ref(&node), Duration::from_millis(1500));
    assert_eq!(before[0].0, 0, "failed before the promotion");

    let promoting = std::thread::scope(|scope| {
        let promotion = scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(500));
            let started = Instant::now();
            pg.promote();
            started.elapsed()
        });
        let during = load(&c, std::slice::from_ref(&node), Duration::from_secs(8));
        (promotion.join().unwrap(), during)
    });
    let (promoted_in, during) = promoting;
    let s = status(&c);
    eprintln!(
        "postgres promotion under idmint serve: promoted in {promoted_in:?}; {} requests \
         refused, the longest gap between IDs {:?} (a hold is 11 s); worker {} generation {}",
        during[0].0, during[0].1, s["worker"]["id"], s["worker"]["generation"]
    );
    assert_eq!(s["worker"]["id"], worker, "the node kept its worker: {s}");
    assert_eq!(s["worker"]["generation"], 1, "no new claim: {s}");
    assert!(
        during[0].1 < promoted_in + Duration::from_secs(3),
        "a gap of {:?} for a promotion of {promoted_in:?}; the node's log:\n{}",
        during[0].1,
        node.log()
    );
    let (status_code, body) = get(&c, &node.url("/v1/ids/orders?count=100"));
    assert_eq!(status_code, 200, "{body}");
    let ids = crate::integers(&body);
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        ids.len(),
        "{body}"
    );
}
