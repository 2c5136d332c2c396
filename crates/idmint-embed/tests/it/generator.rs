//! Generators: fixed, leased from the file registry, PostgreSQL and etcd, a
//! lease lost with the registry, and a forked child.
//!
//! Every test's generators live in this one process, whose table of live
//! workers refuses a second generator of one layout and worker ID
//! (`workers.rs`): a test that runs beside others keeps to a layout (an
//! epoch) or worker IDs of its own.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use idmint_embed::{Generator, GeneratorOptions, Layout, after_fork_in_child};

use crate::support::{
    PrivateService, Service, alone, config, etcd, ordinary, postgres, psql, unique,
};

#[test]
fn fixed_generators_issue_increasing_ids_of_their_worker() {
    let _g = ordinary();
    for preset in [
        "twitter",
        "leaf",
        "baidu,epoch=2024-01-01",
        "sonyflake",
        "discord",
        "instagram",
        "js53",
    ] {
        let layout = Layout::parse(preset).unwrap();
        let g = Generator::new(GeneratorOptions::new(layout, 3)).unwrap();
        let first = g.next_id().unwrap();
        let batch = g.next_ids(5000).unwrap();
        assert_eq!(batch.len(), 5000);
        assert!(first < batch[0], "{preset}");
        assert!(batch.windows(2).all(|w| w[0] < w[1]), "{preset}");
        let parts = layout.decode(batch[4999]).unwrap();
        assert_eq!(parts.worker, 3, "{preset}");
        assert_eq!(g.status().unwrap().registry, "fixed");
    }
}

#[test]
fn fill_ids_writes_increasing_ids_into_the_callers_array() {
    let _g = ordinary();
    let g = Generator::new(GeneratorOptions::new(Layout::parse("twitter").unwrap(), 4)).unwrap();
    let first = g.next_id().unwrap();
    let mut out = vec![0u64; 10_000];
    g.fill_ids(&mut out).unwrap();
    assert!(first < out[0]);
    assert!(out.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(g.fill_ids(&mut []).unwrap_err().code(), "invalid_count");
    // The limit the docs give: the core's, not a larger one of the binding's.
    let err = g.next_ids(10_000_001).unwrap_err();
    assert_eq!(err.code(), "invalid_count");
    assert!(err.to_string().contains("10000000"), "{err}");
    g.close();
    let mut untouched = [7u64; 3];
    assert_eq!(g.fill_ids(&mut untouched).unwrap_err().code(), "closed");
    assert_eq!(untouched, [7; 3]);
}

#[test]
fn bad_input_is_refused_with_the_servers_codes() {
    let _g = ordinary();
    assert_eq!(
        Layout::parse("twitter,sequence=x").unwrap_err().code(),
        "invalid_layout_text"
    );
    let twitter = Layout::parse("twitter").unwrap();
    let e = Generator::new(GeneratorOptions::new(twitter, 32)).unwrap_err();
    assert_eq!(e.code(), "node_out_of_range");
    assert!(e.is_bad_input());
    let g = Generator::new(GeneratorOptions::new(twitter, 1)).unwrap();
    assert_eq!(g.next_ids(0).unwrap_err().code(), "invalid_count");
    assert_eq!(
        GeneratorOptions::new(twitter, 1)
            .with_clock_behind("sometimes")
            .unwrap_err()
            .code(),
        "invalid_text"
    );
    let zk = config(
        "[snowflake]\nregistry = \"zookeeper\"\n[snowflake.zookeeper]\nmode = \"forever\"\n",
    );
    let e = Generator::from_config(&zk.path).unwrap_err();
    assert_eq!(e.code(), "invalid_config");
    assert!(e.message().contains("ephemeral"), "{e}");
    let unknown = config("[snowflake]\nregistery = \"file\"\n");
    let e = Generator::from_config(&unknown.path).unwrap_err();
    assert_eq!(e.code(), "invalid_config");
    assert!(e.message().contains("registery"), "{e}");
}

#[test]
fn close_releases_and_later_calls_fail_typed() {
    let _g = ordinary();
    let file = config("[snowflake]\nregistry = \"file\"\n");
    let g = Generator::from_config(&file.path).unwrap();
    g.next_id().unwrap();
    // A second process (here: generator) on the data directory is refused
    // while the first holds it...
    let e = Generator::from_config(&file.path).unwrap_err();
    assert_eq!(e.code(), "registry_config", "{e}");
    g.close();
    g.close();
    assert_eq!(g.next_id().unwrap_err().code(), "closed");
    assert_eq!(g.next_ids(3).unwrap_err().code(), "closed");
    assert_eq!(g.try_next_id().unwrap_err().code(), "closed");
    // ... and takes it once the first is closed.
    let again = Generator::from_config(&file.path).unwrap();
    again.next_id().unwrap();
}

/// `close()` is a clean stop: the lease file then holds the last instant of
/// the last ID's tick, not the mark persisted a window ahead, so the next
/// open on the directory starts from there (above every ID before) at once.
#[test]
fn close_records_the_last_tick_issued_for_the_next_open() {
    let _g = ordinary();
    // A layout of its own: another test of this process holds the file
    // registry's worker 0 of `twitter`, and one process refuses a second.
    let file = config("[snowflake]\nlayout = \"twitter,epoch=2022-06-07\"\nregistry = \"file\"\n");
    let lease = file
        .path
        .parent()
        .unwrap()
        .join("data")
        .join("worker.lease");
    let mark = || -> jiff::Timestamp {
        let text = std::fs::read_to_string(&lease).unwrap();
        let line = text.lines().find_map(|l| l.strip_prefix("mark=")).unwrap();
        line.parse().unwrap()
    };
    let g = Generator::from_config(&file.path).unwrap();
    let ids = g.next_ids(100_000).unwrap();
    let last = *ids.last().unwrap();
    let ahead = mark();
    g.close();
    let layout = Layout::parse("twitter,epoch=2022-06-07").unwrap();
    let tick_end = layout.decode(last).unwrap().time + jiff::SignedDuration::from_nanos(999_999);
    assert!(ahead > tick_end, "{ahead}");
    assert_eq!(mark(), tick_end);
    let again = Generator::from_config(&file.path).unwrap();
    let next = again.next_ids(100_000).unwrap();
    assert!(next[0] > last);
    let mut seen: HashSet<u64> = ids.into_iter().collect();
    assert!(next.into_iter().all(|id| seen.insert(id)), "an ID twice");
}

/// Two generators (as two processes would) on one shared registry: distinct
/// workers, no ID twice.
fn two_on_one_registry(section: &str) {
    let shared = config(section);
    let a = Generator::from_config(&shared.path).unwrap();
    let b = Generator::from_config(&shared.path).unwrap();
    let (sa, sb) = (a.status().unwrap(), b.status().unwrap());
    assert_ne!(sa.worker, sb.worker);
    assert_eq!((sa.lease, sb.lease), ("held", "held"));
    let mut seen = HashSet::new();
    for _ in 0..20 {
        for id in a
            .next_ids(1000)
            .unwrap()
            .into_iter()
            .chain(b.next_ids(1000).unwrap())
        {
            assert!(seen.insert(id), "{id} twice");
        }
    }
    a.close();
    b.close();
}

#[test]
fn leased_on_postgres() {
    let _g = ordinary();
    let Some(url) = postgres() else { return };
    let cluster = unique("embed");
    two_on_one_registry(&format!(
        "[snowflake]\nlayout = \"twitter,epoch=2020-01-01\"\nregistry = \"sql\"\n\
         [snowflake.sql]\nurl = \"{url}\"\ncluster = \"{cluster}\"\n"
    ));
    // uid-generator's WORKER_NODE, as its DDL makes it (PostgreSQL's
    // spelling); one row per start.
    let table = unique("worker_node");
    psql(&format!(
        "CREATE TABLE {table} (ID BIGSERIAL NOT NULL, HOST_NAME VARCHAR(64) NOT NULL, \
         PORT VARCHAR(64) NOT NULL, TYPE INT NOT NULL, LAUNCH_DATE DATE NOT NULL, \
         MODIFIED TIMESTAMP NOT NULL, CREATED TIMESTAMP NOT NULL, PRIMARY KEY(ID))"
    ));
    two_on_one_registry(&format!(
        "[snowflake]\nlayout = \"baidu,epoch=2024-01-02\"\nregistry = \"sql\"\n\
         [snowflake.sql]\nurl = \"{url}\"\nmode = \"uid-generator\"\ntable = \"{table}\"\n"
    ));
}

#[test]
fn leased_on_etcd() {
    let _g = ordinary();
    let Some(endpoint) = etcd() else { return };
    let cluster = unique("embed");
    two_on_one_registry(&format!(
        "[snowflake]\nlayout = \"twitter,epoch=2020-01-02\"\nregistry = \"etcd\"\n\
         [snowflake.etcd]\nendpoints = [\"{endpoint}\"]\n\
         cluster = \"{cluster}\"\n"
    ));
}

/// The registry stops; once the lease has run out every call is refused
/// with `mark_reached` naming the lease, and none returns an ID.
#[test]
fn a_lost_lease_refuses_every_call() {
    let _g = ordinary();
    let Some(redis) = PrivateService::start(Service::Redis) else {
        return;
    };
    let cfg = config(&format!(
        "[snowflake]\nlayout = \"twitter,epoch=2020-01-03\"\nregistry = \"redis\"\n\
         window = \"1s\"\n[snowflake.redis]\nurl = \"{}\"\n\
         lease_ttl = \"2s\"\n",
        redis.address()
    ));
    let g = Generator::from_config(&cfg.path).unwrap();
    g.next_id().unwrap();
    redis.stop();
    let stopped = Instant::now();
    let refused = loop {
        match g.next_id() {
            Ok(_) => assert!(
                stopped.elapsed() < Duration::from_secs(5),
                "still issuing 5 s after the registry stopped (lease 2 s)"
            ),
            Err(e) => break e,
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(refused.code(), "mark_reached", "{refused}");
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(1)));
    // Past the lease's end, nothing more is issued, by any call.
    std::thread::sleep(Duration::from_secs(2));
    for _ in 0..50 {
        let e = g.next_id().unwrap_err();
        assert_eq!(e.code(), "mark_reached");
        assert_eq!(g.next_ids(10).unwrap_err().code(), "mark_reached");
    }
    let e = g.next_id().unwrap_err();
    assert!(
        e.message().contains("expired") || e.message().contains("lost"),
        "names the lease's state: {e}"
    );
    assert_eq!(g.try_next_id().unwrap_err().code(), "mark_reached");
    assert_ne!(g.status().unwrap().lease, "held");
}

/// What a binding's at-fork hook leads to: a fixed generator refuses in the
/// child, a leased one claims another worker ID before its first ID there
/// and leaves the parent's claim alone.
#[test]
fn a_forked_child_never_issues_with_its_parents_worker() {
    let _g = alone();
    let twitter = Layout::parse("twitter").unwrap();
    let fixed = Generator::new(GeneratorOptions::new(twitter, 5)).unwrap();
    let Some(url) = postgres() else { return };
    let cluster = unique("fork");
    let shared = config(&format!(
        "[snowflake]\nregistry = \"sql\"\n[snowflake.sql]\nurl = \"{url}\"\ncluster = \"{cluster}\"\n"
    ));
    let parent = Generator::from_config(&shared.path).unwrap();
    let parent_worker = parent.status().unwrap().worker;
    let before = parent.next_id().unwrap();

    after_fork_in_child();

    let e = fixed.next_id().unwrap_err();
    assert_eq!(e.code(), "forked", "{e}");
    assert!(e.message().contains("worker ID 5"));
    assert_eq!(fixed.try_next_id().unwrap_err().code(), "forked");
    // Not yet claimed: the non-blocking call says "wait", issuing nothing.
    assert_eq!(parent.try_next_id().unwrap(), None);
    let first = parent.next_id().unwrap();
    let child_worker = parent.status().unwrap().worker;
    assert_ne!(child_worker, parent_worker, "claimed anew");
    assert_eq!(
        twitter.decode(first).unwrap().worker & 31,
        child_worker & 31
    );
    assert_ne!(first, before);
    // The parent's claim is still held: a third claimant gets a third ID.
    let third = Generator::from_config(&shared.path).unwrap();
    let third_worker = third.status().unwrap().worker;
    assert!(third_worker != parent_worker && third_worker != child_worker);
    parent.close();
    assert_eq!(parent.next_id().unwrap_err().code(), "closed");
}
