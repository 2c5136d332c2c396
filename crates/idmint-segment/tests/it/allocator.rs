//! The allocator against real stores: several allocators sharing a Redis
//! store, and a PostgreSQL that goes away under a running allocator.

use std::collections::HashSet;
use std::time::Duration;

use idmint_core::Id;
use idmint_segment::redis::{RedisSegmentStore, RedisStoreConfig};
use idmint_segment::sql::{SqlSegmentStore, SqlStoreConfig};
use idmint_segment::{NewKey, SegmentAllocator, SegmentConfig, SegmentError};

use crate::support::{self, PrivateService, Service};

/// Two allocators on two Redis connections (as two servers), four tasks each,
/// 1,000,000 IDs of one key in all: no ID twice, each task's IDs increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn allocators_sharing_a_redis_store_issue_a_million_unique_ids() {
    let prefix = format!("idmint-test:{:016x}:", fastrand::u64(..));
    let config = RedisStoreConfig::new().with_key_prefix(prefix.clone());
    let first = RedisSegmentStore::connect(support::REDIS_URL, config.clone()).await;
    if !support::require_service("redis", first.is_ok()) {
        return;
    }
    let mut allocators = Vec::new();
    for store in [
        first.unwrap(),
        RedisSegmentStore::connect(support::REDIS_URL, config)
            .await
            .unwrap(),
    ] {
        allocators
            .push(SegmentAllocator::new(store, SegmentConfig::new().with_max_step(5_000)).unwrap());
    }
    allocators[0]
        .create_key(NewKey::new("orders", 500))
        .await
        .unwrap();
    let guards: Vec<_> = allocators.iter().map(|a| a.spawn_preloader()).collect();
    let mut tasks = Vec::new();
    for allocator in &allocators {
        for t in 0..4u64 {
            let allocator = allocator.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::with_capacity(125_000);
                while got.len() < 125_000 {
                    if t == 0 {
                        got.push(allocator.next_id("orders").await.unwrap().get());
                    } else {
                        let n = (125_000 - got.len() as u64).min(t * 700);
                        let batch = allocator.next_ids("orders", n).await.unwrap();
                        got.extend(batch.iter().map(Id::get));
                    }
                }
                got
            }));
        }
    }
    let mut seen = HashSet::with_capacity(1_000_000);
    for task in tasks {
        let got = task.await.unwrap();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "a task's IDs increase");
        for id in got {
            assert!(seen.insert(id), "ID {id} issued twice");
        }
    }
    assert_eq!(seen.len(), 1_000_000);
    drop(guards);
    // Clean up the test's keys.
    let client = redis::Client::open(support::REDIS_URL).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// PostgreSQL stops under a running allocator: what was buffered is served,
/// then every call fails with `Unavailable` and a retry hint (never an ID),
/// and after the restart IDs carry on above everything issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_serves_the_buffer_then_fails_typed_then_carries_on_above() {
    let Some(postgres) = PrivateService::start(Service::Postgres) else {
        return;
    };
    let store = SqlSegmentStore::connect(
        SqlStoreConfig::new(postgres.address().to_owned())
            .with_connect_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    let config = SegmentConfig::new()
        .with_store_timeout(Duration::from_secs(1))
        .with_wait(Duration::from_secs(1))
        .with_retry_after(Duration::from_millis(200));
    let allocator = SegmentAllocator::new(store, config).unwrap();
    allocator
        .create_key(NewKey::new("payments", 100))
        .await
        .unwrap();
    let _preloader = allocator.spawn_preloader();
    let mut issued = Vec::new();
    for _ in 0..150 {
        issued.push(allocator.next_id("payments").await.unwrap().get());
    }
    // Let the preload of the segment after the current one land.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = allocator.served_keys().pop().unwrap();
    let buffered = status.current.map_or(0, |(_, _, left)| left)
        + status.next.map_or(0, |(first, last)| {
            (last.get() - first.get()) / status.delta + 1
        });
    assert!(buffered > 0, "{status:?}");

    postgres.stop();
    let mut served_in_outage = 0;
    let error = loop {
        match allocator.next_id("payments").await {
            Ok(id) => {
                issued.push(id.get());
                served_in_outage += 1;
                assert!(
                    served_in_outage <= buffered,
                    "served more than was buffered"
                );
            }
            Err(error) => break error,
        }
    };
    assert_eq!(served_in_outage, buffered, "the whole buffer is served");
    assert!(matches!(error, SegmentError::Unavailable { .. }), "{error}");
    // The whole hint, or what is left of it when the preloader's lease failed
    // first (callers then fail at once until the hint has passed).
    let hint = error.retry_after().expect("a retry hint");
    assert!(
        hint > Duration::ZERO && hint <= Duration::from_millis(200),
        "{hint:?}"
    );
    for _ in 0..5 {
        let error = allocator.next_ids("payments", 10).await.unwrap_err();
        assert_eq!(error.code(), "unavailable", "{error}");
    }
    assert!(allocator.served_keys()[0].last_error.is_some());

    postgres.restart();
    let mut after = None;
    for _ in 0..50 {
        match allocator.next_ids("payments", 500).await {
            Ok(batch) => {
                after = Some(batch);
                break;
            }
            Err(error) => {
                assert_eq!(error.code(), "unavailable", "{error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let after = after.expect("the allocator recovers once PostgreSQL is back");
    let before_max = *issued.iter().max().unwrap();
    assert!(after.first().unwrap().get() > before_max);
    issued.extend(after.iter().map(Id::get));
    assert!(
        issued.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing throughout"
    );
    assert!(allocator.served_keys()[0].last_error.is_none());
}
