//! The Redis strategies and the Redis segment store on the topologies
//! production runs, started by the project's scripts on loopback
//! (`idmint_testkit::redis_ha`): a primary with 2 replicas behind 3
//! sentinels, and a 6-node Redis Cluster.
//!
//! - Every strategy works through the sentinels and on the cluster (its
//!   scripts run on the node of the prefix's slot); on a cluster a prefix
//!   without a hash tag is refused.
//! - A failover that loses writes (replicas SIGSTOPped and cut off, primary
//!   SIGKILLed, a replica promoted) never hands out an ID twice. By default
//!   a segment is used only once a replica holds it (`WAIT`), so the node
//!   refuses, typed, while its replicas lag, and after the promotion it and
//!   a node with no memory at all go on above every ID issued.
//! - With the store's replicas set to 0 (the risk accepted), the lost
//!   segments' IDs were used: the node that issued them refuses the
//!   rolled-back key, typed, and so does a node restarted on its floors,
//!   until the operator raises the key.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idmint_core::{Id, Layout};
use idmint_segment::redis::{
    ClusterTarget, DailySerial, DailySerialConfig, RedisConnection, RedisCounter,
    RedisCounterConfig, RedisSegmentStore, RedisSnowflake, RedisSnowflakeConfig, RedisStoreConfig,
    RedisTarget, SentinelTarget,
};
use idmint_segment::{
    FloorFile, KeyInfo, NewKey, SegmentAllocator, SegmentConfig, SegmentError, SegmentStore,
};
use idmint_testkit::redis_ha::{ClusterDeployment, SentinelDeployment};

fn sentinel_target(d: &SentinelDeployment) -> RedisTarget {
    RedisTarget::Sentinel(SentinelTarget::new(d.sentinels().to_vec(), d.master_name()))
}

fn cluster_target(d: &ClusterDeployment) -> RedisTarget {
    RedisTarget::Cluster(ClusterTarget::new(d.nodes()[..2].to_vec()))
}

/// Connects right after a promotion, while the sentinels (or the cluster's
/// nodes) may still spread the news: retried, bounded.
async fn open_after_failover(target: &RedisTarget) -> RedisConnection {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match RedisConnection::open(target, Duration::from_secs(1)).await {
            Ok(conn) => return conn,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no answer after the failover: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The key `order` as the promoted primary holds it, asked until it
/// answers (bounded): the key was replicated before the replicas paused.
async fn order_after_failover(store: &dyn SegmentStore) -> KeyInfo {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.describe("order").await {
            Ok(row) => return row.expect("the key was replicated before the pause"),
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no answer after the failover: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn assert_unique(ids: &[u64]) {
    let set: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(set.len(), ids.len(), "an ID was issued twice");
}

/// Each strategy, under the hash-tagged `prefix`, on `conn`.
async fn every_strategy_works(conn: &RedisConnection, prefix: &str) {
    let store = RedisSegmentStore::new(
        conn.clone(),
        RedisStoreConfig::new().with_key_prefix(prefix),
    )
    .unwrap();
    let allocator = SegmentAllocator::new(store, SegmentConfig::new()).unwrap();
    allocator
        .create_key(NewKey::new("order", 100))
        .await
        .unwrap();
    let ids: Vec<u64> = allocator
        .next_ids("order", 250)
        .await
        .unwrap()
        .iter()
        .map(Id::get)
        .collect();
    assert_eq!(ids, (1..=250).collect::<Vec<_>>());

    let counter = RedisCounter::new(
        conn.clone(),
        RedisCounterConfig::new(1, 3).with_key_prefix(prefix),
    )
    .unwrap();
    let mut counted = vec![counter.next_id("c").await.unwrap().get()];
    counted.extend(counter.next_ids("c", 5).await.unwrap().iter().map(Id::get));
    assert_eq!(counted, [1, 4, 7, 10, 13, 16]);

    let serials = DailySerial::new(
        conn.clone(),
        DailySerialConfig::new(6).with_key_prefix(prefix),
    )
    .unwrap();
    let first = serials.next("t").await.unwrap().to_string();
    let second = serials.next("t").await.unwrap().to_string();
    assert!(
        first.ends_with("000001") && second.ends_with("000002"),
        "{first} {second}"
    );

    let snowflake = RedisSnowflake::new(
        conn.clone(),
        RedisSnowflakeConfig::new(Layout::TWITTER, 5).with_key_prefix(prefix),
    )
    .unwrap();
    let mut flakes: Vec<u64> = snowflake
        .next_ids(2_000)
        .await
        .unwrap()
        .iter()
        .map(Id::get)
        .collect();
    flakes.push(snowflake.next_id().await.unwrap().get());
    assert_unique(&flakes);
    assert!(flakes.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_strategy_works_through_sentinel_and_on_a_cluster() {
    let Some(sentinel) = SentinelDeployment::start() else {
        return;
    };
    let conn = RedisConnection::open(&sentinel_target(&sentinel), Duration::from_secs(2))
        .await
        .unwrap();
    // Through the sentinels any prefix works, as on one server.
    every_strategy_works(&conn, "idmint-test:sentinel:").await;
    drop(sentinel);

    let Some(cluster) = ClusterDeployment::start() else {
        return;
    };
    let conn = RedisConnection::open(&cluster_target(&cluster), Duration::from_secs(2))
        .await
        .unwrap();
    every_strategy_works(&conn, "idmint-test:{cluster}:").await;
    // Keys that would span slots are refused before anything is written.
    let err = RedisCounter::new(
        conn.clone(),
        RedisCounterConfig::new(0, 1).with_key_prefix("idmint-test:plain:"),
    )
    .unwrap_err();
    assert!(
        matches!(&err, SegmentError::Config(m) if m.contains("hash tag")),
        "{err}"
    );
    let err = RedisSegmentStore::open(
        &cluster_target(&cluster),
        RedisStoreConfig::new().with_key_prefix("idmint-test:plain:"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("hash tag"), "{err}");
}

/// A node with floors issues, its store's replicas are stopped, it issues
/// more (those segment leases reach the primary only), the primary dies and
/// a replica is promoted without them. Whatever it issued before is never
/// issued again: it refuses the rolled-back key (`key_below_floor`), and so
/// does a node restarted on its floors until the key is raised.
async fn a_failover_that_lost_segments_reissues_nothing(
    target: RedisTarget,
    prefix: &str,
    pause: impl FnOnce(),
    fail_over: impl FnOnce(),
) {
    let dir = tempfile::tempdir().unwrap();
    let declared = ["order".to_owned()];
    let node = |conn: RedisConnection| {
        let config = RedisStoreConfig::new()
            .with_key_prefix(prefix)
            .with_replicas(0);
        let store = RedisSegmentStore::new(conn, config).unwrap();
        SegmentAllocator::new(store, SegmentConfig::new())
            .unwrap()
            .with_floors(Arc::new(FloorFile::open(dir.path()).unwrap()))
            .unwrap()
    };
    let conn = RedisConnection::open(&target, Duration::from_secs(1))
        .await
        .unwrap();
    let allocator = node(conn.clone());
    allocator.check_floors(&declared).await.unwrap();
    allocator
        .create_key(NewKey::new("order", 100))
        .await
        .unwrap();
    let mut issued: Vec<u64> = allocator
        .next_ids("order", 150)
        .await
        .unwrap()
        .iter()
        .map(Id::get)
        .collect();

    pause();
    // Segments leased now reach the primary only: issue past what the
    // store had leased when replication stopped.
    let leased = allocator
        .store()
        .describe("order")
        .await
        .unwrap()
        .unwrap()
        .max_id;
    while *issued.iter().max().unwrap() < leased + 50 {
        let batch = allocator.next_ids("order", 100).await.unwrap();
        issued.extend(batch.iter().map(Id::get));
        assert!(
            issued.len() < 100_000,
            "the store never leased a new segment"
        );
    }
    let highest = *issued.iter().max().unwrap();
    tokio::task::block_in_place(fail_over);
    // The promoted primary lacks the segments leased while its replication
    // was stopped: the key went back (else this test proves nothing).
    let row = order_after_failover(allocator.store().as_ref()).await;
    assert!(
        row.max_id < highest,
        "the promoted primary has every segment (max_id {}, issued up to {highest})",
        row.max_id
    );

    // The node goes on from its buffers, then refuses the rolled-back key,
    // typed: never an ID twice.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match allocator.next_id("order").await {
            Ok(id) => issued.push(id.get()),
            Err(e) if matches!(e.code(), "unavailable" | "store_timeout" | "store_error") => {
                assert!(
                    Instant::now() < deadline,
                    "no answer after the failover: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => break e,
        }
        assert!(issued.len() < 100_000, "the node never refused");
    };
    assert_eq!(refused.code(), "key_below_floor", "{refused}");
    assert_unique(&issued);
    let highest = *issued.iter().max().unwrap();
    drop(allocator);

    // A node started on the same floors refuses at start, naming the key
    // and the way out; after the operator's raise it issues above them.
    let conn = open_after_failover(&target).await;
    let restarted = node(conn);
    let err = restarted.check_floors(&declared).await.unwrap_err();
    assert_eq!(err.code(), "key_below_floor", "{err}");
    assert!(
        err.to_string().contains("idmint segment raise order"),
        "{err}"
    );
    idmint_segment::raise_key(
        restarted.store().as_ref(),
        restarted.floors().map(AsRef::as_ref),
        NewKey::new("order", 100),
        highest,
        &declared,
    )
    .await
    .unwrap();
    restarted.check_floors(&declared).await.unwrap();
    let id = restarted.next_id("order").await.unwrap().get();
    assert!(id > highest, "{id} was issued before");
}

/// A node on the default config, whose store's replicas stop (SIGSTOP,
/// links cut): it serves the segments a replica holds, then refuses, typed,
/// naming the replicas, instead of using a segment only the primary has.
/// The primary dies and a replica is promoted: it holds every segment whose
/// IDs were used, so the node and a node with no memory (no floors) both go
/// on, and no ID is issued twice.
async fn a_failover_with_lagging_replicas_reissues_nothing(
    target: RedisTarget,
    prefix: &str,
    pause: impl FnOnce(),
    fail_over: impl FnOnce(),
) {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let declared = ["order".to_owned()];
    let node = |conn: RedisConnection, dir: &std::path::Path| {
        let store =
            RedisSegmentStore::new(conn, RedisStoreConfig::new().with_key_prefix(prefix)).unwrap();
        SegmentAllocator::new(store, SegmentConfig::new())
            .unwrap()
            .with_floors(Arc::new(FloorFile::open(dir).unwrap()))
            .unwrap()
    };
    let conn = RedisConnection::open(&target, Duration::from_secs(1))
        .await
        .unwrap();
    let allocator = node(conn, dirs[0].path());
    allocator.check_floors(&declared).await.unwrap();
    allocator
        .create_key(NewKey::new("order", 100))
        .await
        .unwrap();
    let mut issued: Vec<u64> = allocator
        .next_ids("order", 150)
        .await
        .unwrap()
        .iter()
        .map(Id::get)
        .collect();

    pause();
    let refused = loop {
        match allocator.next_ids("order", 100).await {
            Ok(batch) => issued.extend(batch.iter().map(Id::get)),
            Err(e) => break e,
        }
        assert!(
            issued.len() < 100_000,
            "the node used segments no replica held"
        );
    };
    assert!(
        matches!(refused.code(), "unavailable" | "store_error"),
        "{refused}"
    );
    assert!(refused.to_string().contains("replica"), "{refused}");
    let highest = *issued.iter().max().unwrap();

    tokio::task::block_in_place(fail_over);
    let row = order_after_failover(allocator.store().as_ref()).await;
    assert!(
        row.max_id >= highest,
        "the promoted primary lacks a segment whose IDs were used (max_id {}, issued up to \
         {highest})",
        row.max_id
    );

    // The node goes on, and so does one with no memory of the key.
    let fresh = node(open_after_failover(&target).await, dirs[1].path());
    fresh.check_floors(&declared).await.unwrap();
    let before = issued.len();
    let deadline = Instant::now() + Duration::from_secs(20);
    while issued.len() < before + 2_000 {
        for n in [&allocator, &fresh] {
            match n.next_ids("order", 100).await {
                Ok(batch) => issued.extend(batch.iter().map(Id::get)),
                Err(e) => {
                    assert!(Instant::now() < deadline, "no IDs after the failover: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    assert_unique(&issued);
}

/// Issue 32: a Sentinel failover after a SIGKILL of the primary, whose
/// replicas lag (SIGSTOPped first, so writes are lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_with_lagging_replicas_reissues_nothing() {
    let Some(d) = SentinelDeployment::start() else {
        return;
    };
    let replicas = d.replicas();
    a_failover_with_lagging_replicas_reissues_nothing(
        sentinel_target(&d),
        "idmint-test:sentinel-failover:",
        || assert_eq!(d.lag_replicas(), replicas),
        || {
            let old = d.kill_primary();
            replicas.iter().for_each(|&p| d.resume(p));
            d.wait_failover(old);
        },
    )
    .await;
}

/// The same with no replicas required: the lost segments' IDs were used, and
/// the node's floors refuse the rolled-back key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_that_lost_used_segments_is_refused_by_the_floors() {
    let Some(d) = SentinelDeployment::start() else {
        return;
    };
    let replicas = d.replicas();
    a_failover_that_lost_segments_reissues_nothing(
        sentinel_target(&d),
        "idmint-test:sentinel-floors:",
        || assert_eq!(d.lag_replicas(), replicas),
        || {
            let old = d.kill_primary();
            replicas.iter().for_each(|&p| d.resume(p));
            d.wait_failover(old);
        },
    )
    .await;
}

/// Issue 32: a Redis Cluster master SIGKILLed, its lagging replica promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_failover_with_a_lagging_replica_reissues_nothing() {
    let Some(d) = ClusterDeployment::start() else {
        return;
    };
    let prefix = "idmint-test:{failover}:";
    let slot_key = format!("{prefix}segments");
    let replicas = d.replicas(&slot_key);
    a_failover_with_lagging_replicas_reissues_nothing(
        cluster_target(&d),
        prefix,
        || assert_eq!(d.lag_replicas(&slot_key), replicas),
        || {
            let old = d.kill_master(&slot_key);
            replicas.iter().for_each(|&p| d.resume(p));
            d.wait_failover(&slot_key, old);
        },
    )
    .await;
}
