//! The allocator against real stores: several allocators sharing a Redis
//! store, a PostgreSQL that goes away under a running allocator, and a
//! PostgreSQL or MariaDB promotion behind a URL naming both servers.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use idmint_core::Id;
use idmint_segment::redis::{RedisSegmentStore, RedisStoreConfig};
use idmint_segment::sql::{SqlSegmentStore, SqlStoreConfig};
use idmint_segment::{NewKey, SegmentAllocator, SegmentConfig, SegmentError, StoreEpoch};

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

/// A promotion behind a URL that names both servers, the old primary
/// stopped: a PostgreSQL streaming standby (libpq's multi-host URL) or a
/// MariaDB replica (a host list). The store follows the new primary on its
/// own; the epoch marker came along with the rows (a standby that had every
/// write is not a restore), so the allocator carries on without a raise,
/// every ID above the one before and below what the new primary records.
/// The longest pause between two IDs is printed (docs/operating.md quotes
/// it).
async fn a_promotion_behind_a_host_list_carries_on_above(service: Service) {
    let Some(db) = PrivateService::start(service) else {
        return;
    };
    let (url, promote) = match service {
        Service::Postgres => {
            db.action("standby");
            let url = db.env("standby.env", "IDMINT_TEST_POSTGRES_PAIR_URL");
            (url, "promote-standby")
        }
        _ => {
            db.action("replica");
            (
                db.env("replica.env", "IDMINT_TEST_MYSQL_PAIR_URL"),
                "promote",
            )
        }
    };
    let store = SqlSegmentStore::connect(
        SqlStoreConfig::new(url).with_connect_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    // Segments of 100 IDs that never grow, taken 10 IDs at a time: dozens of
    // leases a second, so most of them after the promotion come from the
    // promoted server (two buffered segments last 20 calls).
    let config = SegmentConfig::new()
        .with_max_step(100)
        .with_store_timeout(Duration::from_secs(1))
        .with_wait(Duration::from_secs(1))
        .with_retry_after(Duration::from_millis(100));
    let allocator = SegmentAllocator::new(store, config).unwrap();
    allocator
        .create_key(NewKey::new("orders", 100))
        .await
        .unwrap();
    // Written once per table, as `idmint serve` does at start.
    let epoch = allocator
        .store()
        .init_epoch(&StoreEpoch::generate())
        .await
        .unwrap();
    let _preloader = allocator.spawn_preloader();

    let issuing = {
        let allocator = allocator.clone();
        tokio::spawn(async move {
            let mut issued = Vec::new();
            let mut refused = 0_u32;
            let until = Instant::now() + Duration::from_secs(4);
            while Instant::now() < until {
                match allocator.next_ids("orders", 10).await {
                    Ok(ids) => {
                        let at = Instant::now();
                        issued.extend(ids.iter().map(|id| (at, id.get())));
                    }
                    Err(error) => {
                        assert_eq!(error.code(), "unavailable", "{error}");
                        refused += 1;
                        let hint = error.retry_after().unwrap_or(Duration::from_millis(100));
                        tokio::time::sleep(hint).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (issued, refused)
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let promoting = Instant::now();
    tokio::task::block_in_place(|| db.action(promote));
    let promoted_in = promoting.elapsed();
    let (issued, refused) = issuing.await.unwrap();

    let after_promotion = issued.iter().filter(|(at, _)| *at > promoting).count();
    assert!(
        after_promotion > 2_000,
        "{after_promotion} IDs after the promotion: the store did not follow it"
    );
    assert!(
        issued.windows(2).all(|w| w[0].1 < w[1].1),
        "strictly increasing throughout"
    );
    // Read on the promoted server: the old one is stopped.
    let stored = allocator.store().describe("orders").await.unwrap().unwrap();
    assert!(issued.last().unwrap().1 < stored.max_id, "{stored:?}");
    assert_eq!(
        allocator.store().epoch().await.unwrap(),
        Some(epoch),
        "the marker changed"
    );
    let gap = issued.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap();
    assert_eq!(
        issued.len(),
        issued
            .iter()
            .map(|(_, id)| id)
            .collect::<HashSet<_>>()
            .len()
    );
    eprintln!(
        "{} promotion behind a host list: the script took {promoted_in:?}; the longest pause \
         between two segment IDs was {gap:?} ({} IDs, {refused} unavailable answers)",
        db.name(),
        issued.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_promotion_behind_a_multi_host_url_carries_on_above() {
    a_promotion_behind_a_host_list_carries_on_above(Service::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_promotion_behind_a_host_list_carries_on_above() {
    a_promotion_behind_a_host_list_carries_on_above(Service::MariaDb).await;
}
