//! The Redis strategies and the Redis segment store, against a real Redis.
//!
//! Other suites share the Redis and tests run in parallel: each test works
//! under its own random key prefix and deletes its keys when it ends (also
//! when it fails).

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idmint_core::{FieldOrder, Id, Layout, LayoutSpec};
use idmint_segment::redis::{
    DailySerial, DailySerialConfig, RedisConnection, RedisCounter, RedisCounterConfig,
    RedisSegmentStore, RedisSnowflake, RedisSnowflakeConfig, RedisStoreConfig,
};
use idmint_segment::{
    FloorFile, MAX_ID, NewKey, SegmentAllocator, SegmentConfig, SegmentError, SegmentStore,
    StoreEpoch,
};
use jiff::Timestamp;
use jiff::tz::Offset;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{REDIS_URL, require_service};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A unique key prefix for one test, and the keys under it deleted on drop.
struct TestKeys {
    prefix: String,
}

impl TestKeys {
    fn new(test: &str) -> TestKeys {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let random = RandomState::new().hash_one(SEQ.fetch_add(1, Ordering::Relaxed));
        TestKeys {
            prefix: format!(
                "idmint-test:redis:{test}:{}:{random:016x}:",
                std::process::id()
            ),
        }
    }
}

impl Drop for TestKeys {
    fn drop(&mut self) {
        self.forget();
    }
}

impl TestKeys {
    /// Deletes every key under the prefix: for this test, what a Redis
    /// restarted without persistence holds (nothing).
    fn forget(&self) {
        // Synchronous on purpose: it also runs while a failing test unwinds.
        let Ok(client) = redis::Client::open(REDIS_URL) else {
            return;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
            return;
        };
        let pattern = format!("{}*", self.prefix);
        let mut cursor = 0u64;
        loop {
            let Ok((next, keys)): redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query(&mut conn)
            else {
                return;
            };
            if !keys.is_empty() {
                let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&keys).query(&mut conn);
            }
            if next == 0 {
                return;
            }
            cursor = next;
        }
    }
}

/// A connection to the test Redis, or `None` (after `require_service`) when
/// it is not reachable.
async fn connect() -> Option<RedisConnection> {
    let conn = RedisConnection::connect(REDIS_URL, Duration::from_secs(2)).await;
    if require_service("redis", conn.is_ok()) {
        conn.ok()
    } else {
        None
    }
}

/// A plain `redis` connection for poking at keys directly.
async fn raw() -> redis::aio::MultiplexedConnection {
    redis::Client::open(REDIS_URL)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Redis's clock.
async fn redis_time() -> Timestamp {
    let (sec, usec): (i64, i64) = redis::cmd("TIME")
        .query_async(&mut raw().await)
        .await
        .unwrap();
    Timestamp::from_microsecond(sec * 1_000_000 + usec).unwrap()
}

async fn set(key: &str, value: impl redis::ToRedisArgs + Send + Sync) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut raw().await)
        .await
        .unwrap();
}

fn assert_no_duplicates(ids: &[u64]) {
    let unique: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "duplicate IDs");
}

fn assert_increasing(ids: &[u64], what: &str) {
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "{what}: IDs not strictly increasing"
    );
}

// ---------------------------------------------------------------------------
// Counter
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_concurrent_tasks_get_unique_increasing_ids() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("counter-concurrent");
    let config = RedisCounterConfig::new(0, 1).with_key_prefix(&keys.prefix);
    let counter = Arc::new(RedisCounter::new(conn, config).unwrap());
    let mut tasks = Vec::new();
    for task in 0..8u64 {
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..400u64 {
                if (i + task) % 10 == 0 {
                    let run = counter.next_ids("order", 25).await.unwrap();
                    ids.extend(run.iter().map(Id::get));
                } else {
                    ids.push(counter.next_id("order").await.unwrap().get());
                }
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let ids = task.await.unwrap();
        assert_increasing(&ids, "one task");
        all.extend(ids);
    }
    assert_no_duplicates(&all);
    assert!(!all.contains(&0), "0 is never an ID");
    // One node of one: the IDs are exactly 1..=n, nothing skipped.
    all.sort_unstable();
    let n = all.len() as u64;
    assert_eq!(all, (1..=n).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_nodes_never_collide_and_keep_their_residue_class() {
    let Some(_) = connect().await else { return };
    let keys = TestKeys::new("counter-nodes");
    let mut per_node: Vec<Vec<u64>> = Vec::new();
    let mut handles = Vec::new();
    for node in 0..2u32 {
        // Each node has its own connection, as two servers would.
        let config = RedisCounterConfig::new(node, 2).with_key_prefix(&keys.prefix);
        let counter = Arc::new(RedisCounter::connect(REDIS_URL, config).await.unwrap());
        for _ in 0..4 {
            let counter = counter.clone();
            handles.push((
                node,
                tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for _ in 0..200 {
                        ids.push(counter.next_id("order").await.unwrap().get());
                    }
                    ids.extend(
                        counter
                            .next_ids("order", 100)
                            .await
                            .unwrap()
                            .iter()
                            .map(Id::get),
                    );
                    ids
                }),
            ));
        }
    }
    per_node.resize(2, Vec::new());
    for (node, handle) in handles {
        let ids = handle.await.unwrap();
        assert_increasing(&ids, "one task");
        per_node[node as usize].extend(ids);
    }
    for (node, ids) in per_node.iter().enumerate() {
        assert!(
            ids.iter().all(|&id| id > 0 && id % 2 == node as u64),
            "node {node} left its residue class"
        );
    }
    // Node 1 starts at 1, node 0 at 2 (0 is never an ID).
    assert_eq!(per_node[1].iter().min(), Some(&1));
    assert_eq!(per_node[0].iter().min(), Some(&2));
    let mut all: Vec<u64> = per_node.concat();
    assert_no_duplicates(&all);
    all.sort_unstable();
    assert_eq!(all.len(), 2 * 4 * 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_batches_are_one_run_with_the_node_step() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("counter-batch");
    let config = RedisCounterConfig::new(2, 3).with_key_prefix(&keys.prefix);
    let counter = RedisCounter::new(conn, config).unwrap();
    let first = counter.next_id("invoice").await.unwrap().get();
    assert_eq!(first, 2);
    let run = counter.next_ids("invoice", 100_000).await.unwrap();
    assert_eq!(
        (run.first().get(), run.count(), run.stride()),
        (5, 100_000, 3)
    );
    assert_eq!(run.last().get(), 5 + 3 * 99_999);
    let next = counter.next_id("invoice").await.unwrap().get();
    assert_eq!(next, run.last().get() + 3);
    // Keys are independent.
    assert_eq!(counter.next_id("other").await.unwrap().get(), 2);

    let err = counter.next_ids("invoice", 0).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::InvalidCount { count: 0, .. }),
        "{err:?}"
    );
    let err = counter.next_id("bad key").await.unwrap_err();
    assert!(matches!(err, SegmentError::InvalidKey { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_refuses_foreign_values_and_runs_out_at_2_pow_63() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("counter-edges");
    let config = RedisCounterConfig::new(1, 4).with_key_prefix(&keys.prefix);
    let counter = RedisCounter::new(conn.clone(), config).unwrap();
    // A value written under another node count: not an ID of node 1 of 4.
    set(&counter.redis_key("order"), 6).await;
    let err = counter.next_id("order").await.unwrap_err();
    assert!(
        matches!(err, SegmentError::Backend { store: "redis", .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("node 1 of 4"), "{err}");

    let config = RedisCounterConfig::new(0, 1).with_key_prefix(&keys.prefix);
    let counter = RedisCounter::new(conn, config).unwrap();
    set(&counter.redis_key("big"), MAX_ID - 2).await;
    assert_eq!(counter.next_id("big").await.unwrap().get(), MAX_ID - 1);
    let err = counter.next_ids("big", 2).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::Exhausted { step: 2, .. }),
        "{err:?}"
    );
    assert_eq!(counter.next_id("big").await.unwrap(), Id::MAX);
    let err = counter.next_id("big").await.unwrap_err();
    assert!(
        matches!(err, SegmentError::Exhausted { max_id, .. } if max_id == MAX_ID),
        "{err:?}"
    );
}

/// The keys under `prefix` (what a test's calls wrote).
async fn keys_under(prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut raw().await)
        .await
        .unwrap();
    keys.sort();
    keys
}

/// A counter refuses a Redis that forgot (restarted empty, or restored from
/// an older snapshot) instead of counting again from its first ID, in the
/// process and across a restart that hands its memory over; `raise` brings
/// it back above everything it returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_refuses_a_redis_that_forgot_until_raised() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("counter-reset");
    let config = RedisCounterConfig::new(1, 3).with_key_prefix(&keys.prefix);
    let counter = RedisCounter::new(conn.clone(), config.clone()).unwrap();
    let mut issued: Vec<u64> = counter
        .next_ids("order", 40)
        .await
        .unwrap()
        .iter()
        .map(Id::get)
        .collect();
    issued.push(counter.next_id("order").await.unwrap().get());
    let last = *issued.last().unwrap();
    let memory = counter.memory();
    assert_eq!(memory.floor("order"), Some(last + 1));
    let epoch = memory.epoch.clone().unwrap();
    assert_eq!(
        keys_under(&keys.prefix).await.len(),
        2,
        "the counter and the epoch"
    );

    // Redis restarted empty: refused in this process and in the next one.
    keys.forget();
    let restarted = RedisCounter::new(conn.clone(), config.clone())
        .unwrap()
        .with_memory(memory.clone());
    for c in [&counter, &restarted] {
        let err = c.next_id("order").await.unwrap_err();
        assert_eq!(err.code(), "store_reset", "{err}");
        assert!(err.to_string().contains("epoch marker is missing"), "{err}");
        // Another key of the same reset Redis is refused too.
        assert_eq!(c.next_id("other").await.unwrap_err().code(), "store_reset");
    }
    assert!(keys_under(&keys.prefix).await.is_empty(), "nothing written");

    // Restored from an older snapshot: the marker is back, the counter behind.
    set(&counter.epoch_key(), epoch.as_str()).await;
    set(&counter.redis_key("order"), 10).await;
    let err = restarted.next_id("order").await.unwrap_err();
    assert!(
        matches!(err, SegmentError::KeyBelowFloor { floor, found: Some(13), .. } if floor == last + 1),
        "{err}"
    );
    let held: String = redis::cmd("GET")
        .arg(counter.redis_key("order"))
        .query_async(&mut raw().await)
        .await
        .unwrap();
    assert_eq!(held, "10", "a refusal changes nothing");

    // The way back: raised above what it returned, it carries on above.
    restarted.raise("order", 0).await.unwrap();
    let next = restarted.next_id("order").await.unwrap().get();
    assert_eq!(next, last + 3, "the node's next ID after its last");
    assert_eq!(next % 3, 1);
    // After a reset, raise also writes a new marker that every counter adopts.
    keys.forget();
    restarted.raise("order", 1_000).await.unwrap();
    let adopted = restarted.memory().epoch.unwrap();
    assert_ne!(adopted, epoch);
    let id = restarted.next_id("order").await.unwrap().get();
    assert!(id > 1_000 && id % 3 == 1, "{id}");
    let fresh = RedisCounter::new(conn, config).unwrap();
    fresh.next_id("new").await.unwrap();
    assert_eq!(fresh.memory().epoch, Some(adopted));
    issued.extend([next, id]);
    assert_no_duplicates(&issued);
}

/// Daily serials refuse a Redis that forgot the day's counter instead of
/// counting the day from 1 again; `raise` brings them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_refuses_a_redis_that_forgot_until_raised() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("serial-reset");
    let config = DailySerialConfig::new(6).with_key_prefix(&keys.prefix);
    let serials = DailySerial::new(conn.clone(), config.clone()).unwrap();
    let batch = serials.next_batch("order", 10).await.unwrap();
    let (day, last) = (batch.day(), batch.last().counter());
    let memory = serials.memory();
    assert_eq!(memory.last["order"], (day, last));
    let epoch = memory.epoch.clone().unwrap();

    keys.forget();
    let restarted = DailySerial::new(conn.clone(), config.clone())
        .unwrap()
        .with_memory(memory);
    for s in [&serials, &restarted] {
        let err = s.next("order").await.unwrap_err();
        assert_eq!(err.code(), "store_reset", "{err}");
    }
    assert!(keys_under(&keys.prefix).await.is_empty(), "nothing written");

    // The marker back, the day's counter behind what was returned.
    set(&serials.epoch_key(), epoch.as_str()).await;
    set(&serials.redis_key("order", day), 3).await;
    let err = restarted.next("order").await.unwrap_err();
    if batch.day() == serials.next_batch("probe", 1).await.unwrap().day() {
        assert!(
            matches!(err, SegmentError::KeyBelowFloor { floor, found: Some(4), .. } if floor == last + 1),
            "{err}"
        );
        let raw_counter: String = redis::cmd("GET")
            .arg(serials.redis_key("order", day))
            .query_async(&mut raw().await)
            .await
            .unwrap();
        assert_eq!(raw_counter, "3", "a refusal changes nothing");
        restarted.raise("order", day, 0).await.unwrap();
        let next = restarted.next("order").await.unwrap();
        assert_eq!((next.day(), next.counter()), (day, last + 1));
    }
}

// ---------------------------------------------------------------------------
// Segment store
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_creates_describes_lists_and_fetches() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("store-basics");
    let store = RedisSegmentStore::new(conn, RedisStoreConfig::new().with_key_prefix(&keys.prefix))
        .unwrap();
    assert_eq!(store.kind(), "redis");
    assert!(store.list().await.unwrap().is_empty());

    let b = store
        .create(&NewKey::new("pay.b", 100).with_description("payments"))
        .await
        .unwrap();
    assert_eq!((b.max_id, b.step, b.delta, b.remainder), (1, 100, 1, 0));
    let a = store
        .create(&NewKey::new("order:a", 10).with_start(500).with_delta(3, 2))
        .await
        .unwrap();
    assert_eq!((a.max_id, a.delta, a.remainder), (500, 3, 2));

    let described = store.describe("pay.b").await.unwrap().unwrap();
    assert_eq!(described.description, "payments");
    assert_eq!(described.max_id, 1);
    assert!(described.updated.is_some());
    assert_eq!(store.describe("missing").await.unwrap(), None);

    let listed: Vec<String> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.key)
        .collect();
    assert_eq!(listed, ["order:a", "pay.b"]);

    let grant = store.fetch("pay.b", None).await.unwrap();
    assert_eq!((grant.start(), grant.max_id, grant.step), (1, 101, 100));
    let grant = store.fetch("pay.b", Some(1000)).await.unwrap();
    assert_eq!((grant.start(), grant.max_id, grant.step), (101, 1101, 1000));
    let grant = store.fetch("order:a", None).await.unwrap();
    assert_eq!(
        (grant.start(), grant.max_id, grant.delta, grant.remainder),
        (500, 510, 3, 2)
    );
    assert_eq!(store.describe("pay.b").await.unwrap().unwrap().max_id, 1101);

    // A hash written by hand is usable at once, with Tinyid's defaults.
    let () = redis::cmd("HSET")
        .arg(store.redis_key("by-hand"))
        .arg("max_id")
        .arg(7)
        .arg("step")
        .arg(5)
        .query_async(&mut raw().await)
        .await
        .unwrap();
    let grant = store.fetch("by-hand", None).await.unwrap();
    assert_eq!(
        (grant.start(), grant.max_id, grant.delta, grant.remainder),
        (7, 12, 1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_leases_above_floors_raises_and_keeps_an_epoch() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("store-floors");
    let store = RedisSegmentStore::new(conn, RedisStoreConfig::new().with_key_prefix(&keys.prefix))
        .unwrap();
    store.create(&NewKey::new("k", 10)).await.unwrap();
    assert_eq!(store.fetch_above("k", None, 1).await.unwrap().start(), 1);
    // Compared as numbers, not as text or doubles: "11" < "9" as text,
    // and 2^53 + 1 is not a double.
    for floor in [12, 100, (1 << 53) + 1] {
        let err = store.fetch_above("k", None, floor).await.unwrap_err();
        assert!(
            matches!(
                err,
                SegmentError::KeyBelowFloor {
                    found: Some(11),
                    ..
                }
            ),
            "{floor}: {err}"
        );
    }
    assert_eq!(store.describe("k").await.unwrap().unwrap().max_id, 11);
    let near = (1u64 << 53) + 1;
    store
        .raise(&NewKey::new("k", 10).with_start(near))
        .await
        .unwrap();
    assert!(store.fetch_above("k", None, near + 1).await.is_err());
    let g = store.fetch_above("k", None, near).await.unwrap();
    assert_eq!((g.start(), g.max_id), (near, near + 10));
    // Raise: create when missing, never lower, listed as any key.
    let created = store
        .raise(&NewKey::new("order", 100).with_start(251))
        .await
        .unwrap();
    assert_eq!((created.max_id, created.step), (251, 100));
    let kept = store
        .raise(&NewKey::new("order", 100).with_start(9))
        .await
        .unwrap();
    assert_eq!(kept.max_id, 251);
    assert_eq!(store.list().await.unwrap().len(), 2);

    // The epoch: written once, the first writer wins.
    assert!(store.keeps_epoch());
    assert_eq!(store.epoch().await.unwrap(), None);
    let first = StoreEpoch::generate();
    assert_eq!(store.init_epoch(&first).await.unwrap(), first);
    assert_eq!(
        store.init_epoch(&StoreEpoch::generate()).await.unwrap(),
        first
    );
    assert_eq!(store.epoch().await.unwrap(), Some(first));
    // Redis restarted without persistence: no keys, no epoch.
    keys.forget();
    assert_eq!(store.epoch().await.unwrap(), None);
    assert_eq!(
        store
            .fetch_above("order", None, 251)
            .await
            .unwrap_err()
            .code(),
        "key_not_found"
    );
}

/// The issue's story on one node: IDs 1..250 taken, Redis restarted empty,
/// the node restarted: it refuses instead of creating the key from 1; the
/// operator raises the key and the node serves above 250.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_floors_refuses_a_redis_that_forgot_until_raised() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("store-reset");
    let dir = tempfile::tempdir().unwrap();
    let declared = ["order".to_owned()];
    let node = |conn: RedisConnection| {
        let store =
            RedisSegmentStore::new(conn, RedisStoreConfig::new().with_key_prefix(&keys.prefix))
                .unwrap();
        SegmentAllocator::new(store, SegmentConfig::new())
            .unwrap()
            .with_floors(Arc::new(FloorFile::open(dir.path()).unwrap()))
            .unwrap()
    };
    let allocator = node(conn.clone());
    allocator.check_floors(&declared).await.unwrap();
    allocator
        .create_key(NewKey::new("order", 100))
        .await
        .unwrap();
    let taken = allocator.next_ids("order", 250).await.unwrap();
    assert_eq!(taken.last().unwrap().get(), 250);
    let floor = allocator.floors().unwrap().floor("order").unwrap();
    drop(allocator);

    keys.forget();
    let allocator = node(conn.clone());
    let err = allocator.check_floors(&declared).await.unwrap_err();
    assert_eq!(err.code(), "store_reset", "{err}");
    assert!(
        err.to_string()
            .contains(&format!("\"order\" (floor {floor})")),
        "{err}"
    );
    let store = allocator.store();
    assert_eq!(store.epoch().await.unwrap(), None, "nothing written");
    assert!(store.list().await.unwrap().is_empty(), "nothing created");

    // The operator's fix, as `idmint segment raise order --above 250` does it.
    let raised = idmint_segment::raise_key(
        store.as_ref(),
        allocator.floors().map(AsRef::as_ref),
        NewKey::new("order", 100),
        250,
        &declared,
    )
    .await
    .unwrap();
    assert!(raised.info.max_id >= floor);
    assert!(raised.epoch_adopted.is_some());
    allocator.check_floors(&declared).await.unwrap();
    let id = allocator.next_id("order").await.unwrap().get();
    assert!(id > 250 && id >= floor, "{id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_errors_are_typed() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("store-errors");
    let store = RedisSegmentStore::new(conn, RedisStoreConfig::new().with_key_prefix(&keys.prefix))
        .unwrap();
    store.create(&NewKey::new("order", 10)).await.unwrap();
    let err = store.create(&NewKey::new("order", 99)).await.unwrap_err();
    assert!(
        matches!(&err, SegmentError::KeyExists { key } if key == "order"),
        "{err:?}"
    );
    assert_eq!(
        store.describe("order").await.unwrap().unwrap().step,
        10,
        "unchanged"
    );

    let err = store.fetch("nope", None).await.unwrap_err();
    assert!(
        matches!(&err, SegmentError::NotFound { key } if key == "nope"),
        "{err:?}"
    );
    let err = store.fetch("bad key", None).await.unwrap_err();
    assert!(matches!(err, SegmentError::InvalidKey { .. }), "{err:?}");
    let err = store.fetch("order", Some(0)).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::InvalidSpec { field: "step", .. }),
        "{err:?}"
    );
    let err = store.create(&NewKey::new("zero", 0)).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::InvalidSpec { field: "step", .. }),
        "{err:?}"
    );

    // Near 2^63: the last segment ends exactly at 2^63 - 1, the next is refused
    // and changes nothing.
    store
        .create(&NewKey::new("almost-full", 100).with_start(MAX_ID - 100))
        .await
        .unwrap();
    let grant = store.fetch("almost-full", None).await.unwrap();
    assert_eq!(grant.max_id, MAX_ID);
    let err = store.fetch("almost-full", None).await.unwrap_err();
    assert!(
        matches!(&err, SegmentError::Exhausted { key, max_id, step: 100 } if key == "almost-full" && *max_id == MAX_ID),
        "{err:?}"
    );
    let err = store.fetch("almost-full", Some(1)).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::Exhausted { step: 1, .. }),
        "{err:?}"
    );
    assert_eq!(
        store.describe("almost-full").await.unwrap().unwrap().max_id,
        MAX_ID
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_concurrent_fetches_from_two_connections_never_overlap() {
    let Some(_) = connect().await else { return };
    let keys = TestKeys::new("store-concurrent");
    let config = RedisStoreConfig::new().with_key_prefix(&keys.prefix);
    let stores = [
        Arc::new(
            RedisSegmentStore::connect(REDIS_URL, config.clone())
                .await
                .unwrap(),
        ),
        Arc::new(RedisSegmentStore::connect(REDIS_URL, config).await.unwrap()),
    ];
    stores[0].create(&NewKey::new("order", 10)).await.unwrap();
    let mut tasks = Vec::new();
    for store in &stores {
        for task in 0..8u64 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut ranges = Vec::new();
                for i in 0..50u64 {
                    let step = if (i + task) % 3 == 0 { Some(7) } else { None };
                    let grant = store.fetch("order", step).await.unwrap();
                    ranges.push((grant.start(), grant.max_id));
                }
                ranges
            }));
        }
    }
    let mut all = Vec::new();
    for task in tasks {
        let ranges = task.await.unwrap();
        assert!(
            ranges.windows(2).all(|w| w[0].1 <= w[1].0),
            "one task's segments go up"
        );
        all.extend(ranges);
    }
    all.sort_unstable();
    assert_eq!(all.len(), 2 * 8 * 50);
    assert_eq!(all[0].0, 1);
    for pair in all.windows(2) {
        assert_eq!(
            pair[0].1, pair[1].0,
            "segments overlap or leave a gap: {pair:?}"
        );
    }
    let end = all.last().unwrap().1;
    assert_eq!(
        stores[1].describe("order").await.unwrap().unwrap().max_id,
        end
    );
}

// ---------------------------------------------------------------------------
// Snowflake
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_many_clients_issue_100k_unique_decodable_ids() {
    let Some(_) = connect().await else { return };
    let keys = TestKeys::new("snowflake-many");
    let layout = Layout::TWITTER;
    let config = RedisSnowflakeConfig::new(layout, 17)
        .with_datacenter(3)
        .with_key_prefix(&keys.prefix);
    let before = redis_time().await;
    let mut tasks = Vec::new();
    for _client in 0..2 {
        let generator = Arc::new(
            RedisSnowflake::connect(REDIS_URL, config.clone())
                .await
                .unwrap(),
        );
        for _ in 0..4 {
            let generator = generator.clone();
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::with_capacity(12_500);
                for i in 0..1_511u32 {
                    if i % 150 == 0 {
                        let batch = generator.next_ids(1_000).await.unwrap();
                        assert_eq!(batch.len(), 1_000);
                        ids.extend(batch.iter().map(Id::get));
                    } else {
                        ids.push(generator.next_id().await.unwrap().get());
                    }
                }
                ids
            }));
        }
    }
    let mut all = Vec::new();
    for task in tasks {
        let ids = task.await.unwrap();
        assert_increasing(&ids, "one task");
        all.extend(ids);
    }
    let after = redis_time().await;
    // 8 tasks × (1,500 single + 11 batches of 1,000).
    assert_eq!(all.len(), 8 * (1_500 + 11 * 1_000));
    assert!(all.len() >= 100_000);
    assert_no_duplicates(&all);
    let earliest = before - jiff::SignedDuration::from_secs(1);
    let latest = after + jiff::SignedDuration::from_secs(1);
    for &id in &all {
        let parts = layout.decode(id).unwrap();
        assert_eq!((parts.datacenter, parts.worker), (3, 17), "node of {id}");
        assert!(
            earliest <= parts.time && parts.time <= latest,
            "time of {id} is {}, Redis said {before} to {after}",
            parts.time
        );
        assert!(u64::from(parts.sequence) < layout.ids_per_tick());
    }
}

fn small_layout(order: FieldOrder) -> Layout {
    // 4 IDs per 10 ms tick: the sequence runs out all the time.
    LayoutSpec::new(41, "2024-01-01T00:00:00Z".parse().unwrap(), 2)
        .with_unit(Duration::from_millis(10))
        .with_worker_bits(4)
        .with_order(order)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_waits_for_the_next_tick_when_the_sequence_runs_out() {
    let Some(conn) = connect().await else { return };
    for order in [FieldOrder::TimeNodeSequence, FieldOrder::TimeSequenceNode] {
        let keys = TestKeys::new("snowflake-exhaust");
        let layout = small_layout(order);
        let config = RedisSnowflakeConfig::new(layout, 9).with_key_prefix(&keys.prefix);
        let generator = Arc::new(RedisSnowflake::new(conn.clone(), config).unwrap());

        let started = Instant::now();
        let batch = generator.next_ids(40).await.unwrap();
        let ids: Vec<u64> = batch.iter().map(Id::get).collect();
        assert_eq!(ids.len(), 40);
        assert_increasing(&ids, "a batch");
        assert!(batch.runs().len() >= 10, "{order:?}: 4 IDs a tick");
        let expected_stride = match order {
            FieldOrder::TimeNodeSequence => 1,
            FieldOrder::TimeSequenceNode => 16,
        };
        assert!(
            batch
                .runs()
                .iter()
                .all(|r| r.count() <= 4 && r.stride() == expected_stride)
        );
        assert!(
            started.elapsed() >= Duration::from_millis(80),
            "{order:?}: 40 IDs need at least 10 ticks of 10 ms, took {:?}",
            started.elapsed()
        );

        // Alone on its node, the batch took each tick's sequence from 0 up:
        // decoding gives back exactly the numbers Redis counted.
        let mut sequences: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for &id in &ids {
            let parts = layout.decode(id).unwrap();
            sequences
                .entry(parts.tick)
                .or_default()
                .push(parts.sequence);
        }
        for (tick, seqs) in &sequences {
            let expected: Vec<u32> = (0..seqs.len() as u32).collect();
            assert_eq!(seqs, &expected, "{order:?}: tick {tick}");
        }

        // Concurrent single IDs: never more than 4 in one tick, no repeats.
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let generator = generator.clone();
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..25 {
                    ids.push(generator.next_id().await.unwrap().get());
                }
                ids
            }));
        }
        let mut all = ids;
        for task in tasks {
            let ids = task.await.unwrap();
            assert_increasing(&ids, "one task");
            all.extend(ids);
        }
        assert_no_duplicates(&all);
        let mut per_tick: BTreeMap<u64, u32> = BTreeMap::new();
        for &id in &all {
            let parts = layout.decode(id).unwrap();
            assert_eq!(parts.worker, 9);
            assert!(parts.sequence < 4);
            *per_tick.entry(parts.tick).or_default() += 1;
        }
        assert!(
            per_tick.values().all(|&n| n <= 4),
            "{order:?}: {per_tick:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_refuses_to_issue_below_the_last_tick() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("snowflake-behind");
    let layout = Layout::LEAF;
    let config = RedisSnowflakeConfig::new(layout, 5).with_key_prefix(&keys.prefix);
    let generator = RedisSnowflake::new(conn.clone(), config.clone()).unwrap();
    let now_tick = layout.tick_at(redis_time().await).unwrap();

    // As if an earlier ID was issued 100 s ahead of Redis's clock now (the
    // clock has since stepped back): the default 5 ms wait does not cover it.
    set(generator.last_tick_key(), now_tick + 100_000).await;
    let err = generator.next_id().await.unwrap_err();
    match err {
        SegmentError::Core(idmint_core::Error::ClockBehind {
            behind,
            policy,
            allowed,
        }) => {
            assert_eq!((policy, allowed), ("wait", Duration::from_millis(5)));
            assert!(behind > Duration::from_secs(90) && behind <= Duration::from_secs(100));
        }
        other => panic!("expected ClockBehind, got {other:?}"),
    }
    let failing = RedisSnowflake::new(
        conn.clone(),
        config.clone().with_clock_behind_wait(Duration::ZERO),
    )
    .unwrap();
    let err = failing.next_id().await.unwrap_err();
    assert!(
        matches!(
            err,
            SegmentError::Core(idmint_core::Error::ClockBehind { policy: "fail", .. })
        ),
        "{err:?}"
    );

    // 50 ms behind, within a 1 s wait: the call waits and issues above it.
    let now_tick = layout.tick_at(redis_time().await).unwrap();
    let ahead = now_tick + 50;
    set(generator.last_tick_key(), ahead).await;
    let waiting =
        RedisSnowflake::new(conn, config.with_clock_behind_wait(Duration::from_secs(1))).unwrap();
    let id = waiting.next_id().await.unwrap();
    assert!(layout.decode(id.get()).unwrap().tick >= ahead);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_does_not_restart_a_lost_tick_counter() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("snowflake-lost");
    // 100 ms ticks, so the test can set up a tick before it ends.
    let layout = LayoutSpec::new(41, "2024-01-01T00:00:00Z".parse().unwrap(), 12)
        .with_unit(Duration::from_millis(100))
        .with_worker_bits(4)
        .build()
        .unwrap();
    let config = RedisSnowflakeConfig::new(layout, 2).with_key_prefix(&keys.prefix);
    let generator = RedisSnowflake::new(conn, config).unwrap();
    // The node issued in this tick, but the tick's counter is gone: which
    // sequence numbers were used is unknown, so nothing more from this tick.
    let tick = layout.tick_at(redis_time().await).unwrap();
    set(generator.last_tick_key(), tick).await;
    let id = generator.next_id().await.unwrap();
    assert!(layout.decode(id.get()).unwrap().tick > tick);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_checks_the_node_and_the_count() {
    let Some(conn) = connect().await else { return };
    let err = RedisSnowflake::new(conn.clone(), RedisSnowflakeConfig::new(Layout::LEAF, 1024))
        .unwrap_err();
    assert!(
        matches!(
            err,
            SegmentError::Core(idmint_core::Error::NodeOutOfRange {
                field: "worker",
                value: 1024,
                max: 1023
            })
        ),
        "{err:?}"
    );
    let keys = TestKeys::new("snowflake-count");
    let generator = RedisSnowflake::new(
        conn,
        RedisSnowflakeConfig::new(Layout::LEAF, 1).with_key_prefix(&keys.prefix),
    )
    .unwrap();
    let err = generator.next_ids(0).await.unwrap_err();
    assert!(matches!(err, SegmentError::InvalidCount { .. }), "{err:?}");
}

// ---------------------------------------------------------------------------
// Daily serials
// ---------------------------------------------------------------------------

fn yyyymmdd(time: Timestamp, offset: Offset) -> String {
    time.to_zoned(offset.to_time_zone())
        .date()
        .strftime("%Y%m%d")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_format_and_zero_padding() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("serial-format");
    let offset = Offset::from_hours(8).unwrap();
    let config = DailySerialConfig::new(6)
        .with_id_prefix("ORD")
        .with_utc_offset(offset)
        .with_key_prefix(&keys.prefix);
    let serials = DailySerial::new(conn.clone(), config).unwrap();
    let before = yyyymmdd(redis_time().await, offset);
    let first = serials.next("order").await.unwrap();
    let second = serials.next("order").await.unwrap();
    let batch = serials.next_batch("order", 5).await.unwrap();
    let after = yyyymmdd(redis_time().await, offset);
    if before != after {
        return; // Ran across midnight at +08:00; the rollover test covers that.
    }
    assert_eq!(first.as_str(), format!("ORD{before}000001"));
    assert_eq!(second.to_string(), format!("ORD{before}000002"));
    assert_eq!(first.counter(), 1);
    assert_eq!(first.day().strftime("%Y%m%d").to_string(), before);
    assert_eq!(first.as_u64(), None, "letters in the prefix");
    let texts: Vec<String> = batch.iter().map(|s| s.into_string()).collect();
    assert_eq!(
        texts,
        (3..=7)
            .map(|c| format!("ORD{before}{c:06}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(batch.last().counter(), 7);

    // Digits only: also a number. Another key counts on its own.
    let numeric = DailySerial::new(
        conn,
        DailySerialConfig::new(4)
            .with_utc_offset(offset)
            .with_key_prefix(&keys.prefix),
    )
    .unwrap();
    let s = numeric.next("invoice").await.unwrap();
    assert_eq!(s.as_str(), format!("{before}0001"));
    assert_eq!(s.as_u64(), Some(format!("{before}0001").parse().unwrap()));
    assert_eq!(s.as_id().map(Id::get), s.as_u64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_overflow_is_a_typed_error_and_issues_nothing() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("serial-overflow");
    let config = DailySerialConfig::new(2).with_key_prefix(&keys.prefix);
    let serials = DailySerial::new(conn, config).unwrap();
    let batch = serials.next_batch("tiny", 97).await.unwrap();
    assert_eq!((batch.first_counter(), batch.last().counter()), (1, 97));
    // 98, 99, 100 does not fit: refused whole.
    let err = serials.next_batch("tiny", 3).await.unwrap_err();
    assert!(
        matches!(&err, SegmentError::SerialOverflow { key, counter: 100, width: 2, .. } if key == "tiny"),
        "{err:?}"
    );
    let batch = serials.next_batch("tiny", 2).await.unwrap();
    assert_eq!(batch.last().counter(), 99);
    assert!(batch.last().as_str().ends_with("99"));
    for _ in 0..2 {
        let err = serials.next("tiny").await.unwrap_err();
        match &err {
            SegmentError::SerialOverflow { counter, day, .. } => {
                assert_eq!(*counter, 100);
                assert_eq!(day, &batch.last().as_str()[..8]);
            }
            other => panic!("expected SerialOverflow, got {other:?}"),
        }
        assert_eq!(err.code(), "serial_overflow");
    }
    let key = serials.redis_key("tiny", batch.day());
    let stored: u64 = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut raw().await)
        .await
        .unwrap();
    assert_eq!(stored, 99, "a full counter is left as it is");
    let ttl: i64 = redis::cmd("TTL")
        .arg(&key)
        .query_async(&mut raw().await)
        .await
        .unwrap();
    assert!(
        ttl > 86_400,
        "day keys expire after more than a day, ttl {ttl}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_concurrent_tasks_get_no_duplicates() {
    let Some(_) = connect().await else { return };
    let keys = TestKeys::new("serial-concurrent");
    let config = DailySerialConfig::new(8)
        .with_id_prefix("T-")
        .with_key_prefix(&keys.prefix);
    let mut tasks = Vec::new();
    for _client in 0..2 {
        let serials = Arc::new(
            DailySerial::connect(REDIS_URL, config.clone())
                .await
                .unwrap(),
        );
        for task in 0..4 {
            let serials = serials.clone();
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..200 {
                    if (i + task) % 20 == 0 {
                        out.extend(serials.next_batch("ticket", 10).await.unwrap().iter());
                    } else {
                        out.push(serials.next("ticket").await.unwrap());
                    }
                }
                out
            }));
        }
    }
    let mut all = Vec::new();
    for task in tasks {
        let serials = task.await.unwrap();
        let same_day = serials.windows(2).all(|w| w[0].day() == w[1].day());
        if same_day {
            assert!(serials.windows(2).all(|w| w[0].counter() < w[1].counter()));
        }
        all.extend(serials);
    }
    let texts: HashSet<&str> = all.iter().map(|s| s.as_str()).collect();
    assert_eq!(texts.len(), all.len(), "duplicate serials");
    assert_eq!(all.len(), 8 * (190 + 10 * 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_rolls_over_at_local_midnight() {
    let Some(conn) = connect().await else { return };
    let keys = TestKeys::new("serial-midnight");
    // An offset that puts Redis's clock at 23:59:58 local time now.
    let now = redis_time().await.as_second();
    let seconds = (86_398 - now.rem_euclid(86_400)).rem_euclid(86_400);
    let offset = Offset::from_seconds(i32::try_from(seconds).unwrap()).unwrap();
    let config = DailySerialConfig::new(3)
        .with_utc_offset(offset)
        .with_key_prefix(&keys.prefix);
    let serials = DailySerial::new(conn, config).unwrap();
    let late = serials.next_batch("day", 3).await.unwrap();
    assert_eq!(late.last().counter(), 3);
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let early = serials.next("day").await.unwrap();
    assert_eq!(early.day(), late.day().tomorrow().unwrap());
    assert_eq!(early.counter(), 1, "a new day counts from 1");
    assert!(early.as_str() > late.last().as_str());
}

// ---------------------------------------------------------------------------
// Timeouts, failures and reconnection
// ---------------------------------------------------------------------------

/// A port that accepts TCP connections (the kernel completes the handshake)
/// but never reads or answers.
async fn silent_port() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    (listener, url)
}

fn assert_bounded(err: &SegmentError, started: Instant, bound: Duration) {
    assert!(
        matches!(
            err,
            SegmentError::Timeout { store: "redis", .. }
                | SegmentError::Backend { store: "redis", .. }
        ),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert!(
        started.elapsed() < bound + Duration::from_millis(700),
        "took {:?} with a bound of {bound:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_silent_port_times_out_within_the_bound() {
    let (_listener, url) = silent_port().await;
    let bound = Duration::from_millis(300);
    let started = Instant::now();
    let err = RedisConnection::connect(&url, bound).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::Timeout { store: "redis", operation: "connect", after } if after == bound),
        "{err:?}"
    );
    assert_bounded(&err, started, bound);

    let started = Instant::now();
    let err = RedisCounter::connect(&url, RedisCounterConfig::new(0, 1).with_timeout(bound))
        .await
        .unwrap_err();
    assert_bounded(&err, started, bound);
    let started = Instant::now();
    let err = RedisSegmentStore::connect(&url, RedisStoreConfig::new().with_timeout(bound))
        .await
        .unwrap_err();
    assert_bounded(&err, started, bound);
    let started = Instant::now();
    let err = RedisSnowflake::connect(
        &url,
        RedisSnowflakeConfig::new(Layout::LEAF, 1).with_timeout(bound),
    )
    .await
    .unwrap_err();
    assert_bounded(&err, started, bound);
    let started = Instant::now();
    let err = DailySerial::connect(&url, DailySerialConfig::new(4).with_timeout(bound))
        .await
        .unwrap_err();
    assert_bounded(&err, started, bound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_closed_port_fails_within_the_bound() {
    let (listener, url) = silent_port().await;
    drop(listener);
    let bound = Duration::from_millis(500);
    let started = Instant::now();
    let err = RedisConnection::connect(&url, bound).await.unwrap_err();
    assert_bounded(&err, started, bound);
}

/// Parses one RESP command (an array of bulk strings) from the front of `buf`.
fn parse_command(buf: &[u8]) -> Option<(Vec<String>, usize)> {
    fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buf[at..end], end + 2))
    }
    let (head, mut at) = line(buf, 0)?;
    let n: usize = std::str::from_utf8(head.strip_prefix(b"*")?)
        .ok()?
        .parse()
        .ok()?;
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, next) = line(buf, at)?;
        let len: usize = std::str::from_utf8(len.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        if buf.len() < next + len + 2 {
            return None;
        }
        parts.push(String::from_utf8_lossy(&buf[next..next + len]).into_owned());
        at = next + len + 2;
    }
    Some((parts, at))
}

/// A fake Redis that answers the connection handshake and `PING`, then never
/// answers anything else (a server that hangs mid-session).
async fn hanging_redis() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some((command, used)) = parse_command(&buf) {
                        buf.drain(..used);
                        let reply: &[u8] = match command[0].to_ascii_uppercase().as_str() {
                            "PING" => b"+PONG\r\n",
                            "CLIENT" | "SELECT" | "AUTH" => b"+OK\r\n",
                            _ => continue, // hang
                        };
                        if socket.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_hanging_redis_time_out_within_the_bound() {
    let url = hanging_redis().await;
    let bound = Duration::from_millis(300);
    let timed_out = |err: &SegmentError, started: Instant| {
        assert!(
            matches!(err, SegmentError::Timeout { store: "redis", after, .. } if *after == bound),
            "{err:?}"
        );
        assert!(
            started.elapsed() < bound + Duration::from_millis(700),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    };

    let counter = RedisCounter::connect(&url, RedisCounterConfig::new(0, 1).with_timeout(bound))
        .await
        .unwrap();
    let started = Instant::now();
    timed_out(&counter.next_id("order").await.unwrap_err(), started);

    let store = RedisSegmentStore::connect(&url, RedisStoreConfig::new().with_timeout(bound))
        .await
        .unwrap();
    for call in 0..4 {
        let started = Instant::now();
        let err = match call {
            0 => store.fetch("order", None).await.unwrap_err(),
            1 => store.describe("order").await.unwrap_err(),
            2 => store.create(&NewKey::new("order", 10)).await.unwrap_err(),
            _ => store.list().await.unwrap_err(),
        };
        timed_out(&err, started);
    }

    let generator = RedisSnowflake::connect(
        &url,
        RedisSnowflakeConfig::new(Layout::LEAF, 1).with_timeout(bound),
    )
    .await
    .unwrap();
    let started = Instant::now();
    timed_out(&generator.next_id().await.unwrap_err(), started);

    let serials = DailySerial::connect(&url, DailySerialConfig::new(4).with_timeout(bound))
        .await
        .unwrap();
    let started = Instant::now();
    timed_out(&serials.next("order").await.unwrap_err(), started);
}

/// A TCP proxy to the real Redis whose open connections can be cut (closed)
/// or frozen (kept open, nothing forwarded: a network partition without a
/// reset). Connections opened later work normally.
struct Proxy {
    url: String,
    cut: tokio::sync::watch::Sender<u64>,
    freeze: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    async fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}/", listener.local_addr().unwrap());
        let (cut, cut_rx) = tokio::sync::watch::channel(0u64);
        let (freeze, freeze_rx) = tokio::sync::watch::channel(0u64);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let (mut cut_rx, mut freeze_rx) = (cut_rx.clone(), freeze_rx.clone());
                cut_rx.mark_unchanged();
                freeze_rx.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect("127.0.0.1:6379").await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_rx.changed() => {}
                        _ = freeze_rx.changed() => {
                            // Hold both ends open without forwarding a byte.
                            tokio::time::sleep(Duration::from_secs(30)).await;
                        }
                    }
                });
            }
        });
        Proxy { url, cut, freeze }
    }

    /// Closes every connection open now.
    fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Stops forwarding on every connection open now, leaving them open.
    fn freeze(&self) {
        self.freeze.send_modify(|n| *n += 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_reopened_and_nothing_is_issued_twice() {
    let Some(_) = connect().await else { return };
    let keys = TestKeys::new("reconnect");
    let proxy = Proxy::start().await;
    let bound = Duration::from_secs(2);
    let counter = RedisCounter::connect(
        &proxy.url,
        RedisCounterConfig::new(0, 1)
            .with_key_prefix(&keys.prefix)
            .with_timeout(bound),
    )
    .await
    .unwrap();
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(counter.next_id("order").await.unwrap().get());
    }
    let mut failures = 0;
    for round in 0..3 {
        proxy.cut();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The first call after the cut may fail (typed); within a few calls
        // the connection is open again.
        let mut issued = 0;
        for _ in 0..50 {
            let started = Instant::now();
            match counter.next_id("order").await {
                Ok(id) => {
                    ids.push(id.get());
                    issued += 1;
                    if issued == 10 {
                        break;
                    }
                }
                Err(err) => {
                    assert_bounded(&err, started, bound);
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        assert_eq!(
            issued, 10,
            "round {round}: the connection did not come back"
        );
    }
    assert!(failures <= 30, "{failures} failed calls");
    assert_increasing(&ids, "across reconnections");
    assert_no_duplicates(&ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_stops_answering_is_replaced_after_a_timeout() {
    let Some(_) = connect().await else { return };
    let keys = TestKeys::new("frozen");
    let proxy = Proxy::start().await;
    let bound = Duration::from_millis(400);
    let store = RedisSegmentStore::connect(
        &proxy.url,
        RedisStoreConfig::new()
            .with_key_prefix(&keys.prefix)
            .with_timeout(bound),
    )
    .await
    .unwrap();
    store.create(&NewKey::new("order", 10)).await.unwrap();
    let first = store.fetch("order", None).await.unwrap();

    proxy.freeze();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let err = store.fetch("order", None).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::Timeout { store: "redis", operation: "fetch", after } if after == bound),
        "{err:?}"
    );
    assert!(started.elapsed() < bound + Duration::from_millis(700));

    // The frozen connection is not used again: the next call connects afresh.
    // The timed-out fetch may or may not have reached Redis; either way the
    // next segment is above the first and nothing overlaps.
    let next = store.fetch("order", None).await.unwrap();
    assert!(next.start() >= first.max_id, "{first:?} then {next:?}");
}

/// The ledger on Redis (issue 32, item 10): a key hash deleted (`DEL`, or
/// evicted) is never created again from its start (`key_forgotten`), also
/// by a store that never created it; `raise` brings it back. A hash written
/// by hand and indexed joins the ledger at `remember_keys`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_never_creates_again_a_key_it_lost() {
    let Some(conn) = connect().await else { return };
    let Some(other_conn) = connect().await else {
        return;
    };
    let keys = TestKeys::new("store-ledger");
    let config = RedisStoreConfig::new().with_key_prefix(&keys.prefix);
    let store = RedisSegmentStore::new(conn, config.clone()).unwrap();
    let other = RedisSegmentStore::new(other_conn, config).unwrap();
    assert!(store.keeps_ledger());
    store.create(&NewKey::new("order", 100)).await.unwrap();
    let issued = store.fetch("order", None).await.unwrap();

    let mut raw = raw().await;
    let _: i64 = redis::cmd("DEL")
        .arg(store.redis_key("order"))
        .query_async(&mut raw)
        .await
        .unwrap();
    for s in [&store, &other] {
        let error = s.create(&NewKey::new("order", 100)).await.unwrap_err();
        assert_eq!(error.code(), "key_forgotten", "{error}");
    }
    assert_eq!(
        store.describe("order").await.unwrap(),
        None,
        "nothing created"
    );
    // The index lost too (a hand clean-up): the ledger still knows.
    let _: i64 = redis::cmd("SREM")
        .arg(store.index_key())
        .arg("order")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        other
            .create(&NewKey::new("order", 100))
            .await
            .unwrap_err()
            .code(),
        "key_forgotten"
    );
    let raised = other
        .raise(&NewKey::new("order", 100).with_start(issued.max_id))
        .await
        .unwrap();
    assert_eq!(raised.max_id, issued.max_id);

    // Written by hand and indexed, then remembered, then deleted.
    let _: () = redis::cmd("HSET")
        .arg(store.redis_key("by_hand"))
        .arg("max_id")
        .arg(1)
        .arg("step")
        .arg(10)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: i64 = redis::cmd("SADD")
        .arg(store.index_key())
        .arg("by_hand")
        .query_async(&mut raw)
        .await
        .unwrap();
    store.remember_keys().await.unwrap();
    let _: i64 = redis::cmd("SREM")
        .arg(store.index_key())
        .arg("by_hand")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(store.redis_key("by_hand"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        store
            .create(&NewKey::new("by_hand", 10))
            .await
            .unwrap_err()
            .code(),
        "key_forgotten"
    );
    // A new key is created once.
    store.create(&NewKey::new("new", 10)).await.unwrap();
    assert_eq!(
        other
            .create(&NewKey::new("new", 10))
            .await
            .unwrap_err()
            .code(),
        "key_exists"
    );
}
