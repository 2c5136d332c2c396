use std::collections::HashSet;
use std::sync::atomic::AtomicU64;

use async_trait::async_trait;
use idmint_core::clock::ManualClock;

use super::*;
use crate::memory::MemoryStore;
use crate::store::SegmentGrant;

/// A memory store with switches: down (fails), hang (never answers), lose
/// (leases, then never answers), a delay per lease, and counters.
#[derive(Debug, Default)]
struct FlakyStore {
    store: MemoryStore,
    down: AtomicBool,
    hang: AtomicBool,
    lose: AtomicBool,
    delay_ms: AtomicU64,
    fetches: AtomicU64,
    steps: Mutex<Vec<u64>>,
    /// Hands out this `max_id` on the next lease instead (to go backwards).
    rewind_to: Mutex<Option<u64>>,
}

#[async_trait]
impl SegmentStore for FlakyStore {
    fn kind(&self) -> &'static str {
        "flaky"
    }

    async fn fetch_above(&self, key: &str, step: Option<u64>, floor: u64) -> Result<SegmentGrant> {
        let delay = self.delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if self.hang.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
        if self.down.load(Ordering::Relaxed) {
            return Err(SegmentError::Backend {
                store: "flaky",
                operation: "fetch",
                message: "connection refused".into(),
            });
        }
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let mut grant = self.store.fetch_above(key, step, floor).await?;
        lock(&self.steps).push(grant.step);
        if let Some(max_id) = lock(&self.rewind_to).take() {
            grant.max_id = max_id;
        }
        if self.lose.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
        Ok(grant)
    }

    async fn describe(&self, key: &str) -> Result<Option<KeyInfo>> {
        if self.down.load(Ordering::Relaxed) {
            return Err(SegmentError::Backend {
                store: "flaky",
                operation: "describe",
                message: "connection refused".into(),
            });
        }
        self.store.describe(key).await
    }

    async fn create(&self, key: &NewKey) -> Result<KeyInfo> {
        self.store.create(key).await
    }

    async fn list(&self) -> Result<Vec<KeyInfo>> {
        self.store.list().await
    }

    async fn raise(&self, key: &NewKey) -> Result<KeyInfo> {
        self.store.raise(key).await
    }

    fn keeps_epoch(&self) -> bool {
        self.store.keeps_epoch()
    }

    async fn epoch(&self) -> Result<Option<StoreEpoch>> {
        self.store.epoch().await
    }

    async fn init_epoch(&self, epoch: &StoreEpoch) -> Result<StoreEpoch> {
        self.store.init_epoch(epoch).await
    }
}

fn config() -> SegmentConfig {
    SegmentConfig::new()
        .with_store_timeout(Duration::from_millis(200))
        .with_wait(Duration::from_millis(500))
        .with_retry_after(Duration::from_millis(50))
}

async fn allocator_with(
    store: Arc<FlakyStore>,
    config: SegmentConfig,
    keys: &[NewKey],
) -> (SegmentAllocator, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_millis(1_795_219_200_000));
    let allocator = SegmentAllocator::with_clock(store, config, clock.clone()).unwrap();
    for key in keys {
        allocator.create_key(key.clone()).await.unwrap();
    }
    (allocator, clock)
}

fn ids(batch: &IdBatch) -> Vec<u64> {
    batch.iter().map(Id::get).collect()
}

#[tokio::test]
async fn one_caller_gets_every_id_in_order_across_segments() {
    let store = Arc::new(FlakyStore::default());
    let (allocator, _) = allocator_with(store.clone(), config(), &[NewKey::new("order", 10)]).await;
    let _preloader = allocator.spawn_preloader();
    let mut got = Vec::new();
    for _ in 0..1000 {
        got.push(allocator.next_id("order").await.unwrap().get());
        tokio::task::yield_now().await;
    }
    // Dense: one caller skips nothing, whoever leased each segment.
    assert_eq!(got, (1..=1000).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_big_batch_costs_one_lease_and_spans_segments() {
    let store = Arc::new(FlakyStore::default());
    let (allocator, _) =
        allocator_with(store.clone(), config(), &[NewKey::new("order", 1000)]).await;
    allocator.next_id("order").await.unwrap();
    let before = store.fetches.load(Ordering::Relaxed);
    let batch = allocator.next_ids("order", 100_000).await.unwrap();
    assert_eq!(batch.len(), 100_000);
    assert_eq!(
        store.fetches.load(Ordering::Relaxed) - before,
        1,
        "one lease sized for the rest"
    );
    let got = ids(&batch);
    assert_eq!(got.first(), Some(&2));
    assert!(got.windows(2).all(|w| w[1] == w[0] + 1), "contiguous");
    assert!(batch.runs().len() <= 2, "{} runs", batch.runs().len());
    let next = allocator.next_id("order").await.unwrap().get();
    assert!(next > *got.last().unwrap());
}

#[tokio::test]
async fn try_next_id_serves_the_buffer_and_starts_nothing_when_it_is_empty() {
    let store = Arc::new(FlakyStore::default());
    let (allocator, _) = allocator_with(store.clone(), config(), &[NewKey::new("k", 10)]).await;
    assert_eq!(allocator.try_next_id("k"), None, "nothing buffered yet");
    assert_eq!(
        store.fetches.load(Ordering::Relaxed),
        0,
        "and nothing leased"
    );
    let mut got = vec![allocator.next_id("k").await.unwrap().get()];
    got.extend(std::iter::from_fn(|| allocator.try_next_id("k")).map(Id::get));
    assert_eq!(got, (1..=10).collect::<Vec<_>>());
    // Asked again and again with the buffer empty (no preloader here): no
    // lease is started and dropped, no index of the next segment reserved.
    for _ in 0..100 {
        assert_eq!(allocator.try_next_id("k"), None);
    }
    assert_eq!(store.fetches.load(Ordering::Relaxed), 1);
    let next = allocator.next_id("k").await.unwrap().get();
    assert_eq!(next, 11, "dense: the next lease's first ID comes next");
    assert_eq!(allocator.try_next_id("k").map(Id::get), Some(12));
    assert_eq!(allocator.try_next_id("no-such-key"), None);
}

#[tokio::test]
async fn counts_outside_the_range_are_refused() {
    let store = Arc::new(FlakyStore::default());
    let (allocator, _) = allocator_with(store.clone(), config(), &[NewKey::new("k", 10)]).await;
    for n in [0, 1_000_001] {
        let error = allocator.next_ids("k", n).await.unwrap_err();
        assert!(
            matches!(error, SegmentError::InvalidCount { .. }),
            "{error}"
        );
        assert!(error.is_bad_input());
    }
    assert_eq!(
        store.fetches.load(Ordering::Relaxed),
        0,
        "bad input changes nothing"
    );
    let error = allocator.next_id("no such key!").await.unwrap_err();
    assert_eq!(error.code(), "invalid_key");
}

#[tokio::test]
async fn the_step_doubles_when_segments_go_fast_and_halves_when_slow() {
    let store = Arc::new(FlakyStore::default());
    let config = config().with_max_step(80);
    let (allocator, clock) = allocator_with(store.clone(), config, &[NewKey::new("k", 10)]).await;
    let key = allocator.key("k").await.unwrap();
    let minute = 60_000_000_000;
    let mut last = 0;
    for _ in 0..6 {
        // Each segment used up in a minute: fast.
        let status = key.status();
        let left = status.current.map_or(0, |(_, _, left)| left);
        let batch = key.next_ids(left + 1).await.unwrap();
        last = batch.last().unwrap().get();
        clock.set_nanos(clock.now_nanos() + minute);
    }
    assert_eq!(
        *lock(&store.steps),
        [10, 20, 40, 80, 80, 80],
        "doubles, capped at 80"
    );
    for _ in 0..4 {
        // Each segment lasting 31 minutes: slow.
        clock.set_nanos(clock.now_nanos() + 31 * minute);
        let left = key.status().current.map_or(0, |(_, _, left)| left);
        let batch = key.next_ids(left + 1).await.unwrap();
        assert!(batch.first().unwrap().get() > last);
        last = batch.last().unwrap().get();
    }
    assert_eq!(
        lock(&store.steps)[6..],
        [40, 20, 10, 10],
        "halves, never below the key's step"
    );
    assert_eq!(key.status().step, 10);
}

#[tokio::test]
async fn delta_and_remainder_keep_ids_in_their_class() {
    let store = Arc::new(FlakyStore::default());
    let (allocator, _) = allocator_with(
        store.clone(),
        config(),
        &[NewKey::new("a", 10).with_delta(3, 2)],
    )
    .await;
    let batch = allocator.next_ids("a", 1000).await.unwrap();
    let got = ids(&batch);
    assert!(got.iter().all(|id| id % 3 == 2), "{:?}", &got[..10]);
    assert!(got.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(&got[..4], [2, 5, 8, 11]);
}

#[tokio::test]
async fn keys_created_anywhere_are_usable_at_once_and_unknown_keys_are_typed() {
    let store = Arc::new(FlakyStore::default());
    let config = config().with_miss_ttl(Duration::from_millis(30));
    let (allocator, _) = allocator_with(store.clone(), config, &[]).await;
    let error = allocator.next_id("late").await.unwrap_err();
    assert!(matches!(error, SegmentError::NotFound { .. }), "{error}");
    assert_eq!(error.code(), "key_not_found");
    // Created through this allocator: usable on the next call.
    allocator.create_key(NewKey::new("late", 5)).await.unwrap();
    assert_eq!(allocator.next_id("late").await.unwrap().get(), 1);
    // Created behind its back (another server, or SQL by hand): usable once
    // the short miss memory lapses.
    assert!(allocator.next_id("other").await.is_err());
    store.store.create(&NewKey::new("other", 5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(allocator.next_id("other").await.unwrap().get(), 1);
    let error = allocator
        .create_key(NewKey::new("late", 5))
        .await
        .unwrap_err();
    assert!(matches!(error, SegmentError::KeyExists { .. }), "{error}");
}

#[tokio::test]
async fn a_store_outage_serves_the_buffer_then_fails_typed_then_recovers_above() {
    let store = Arc::new(FlakyStore::default());
    let (allocator, _) = allocator_with(store.clone(), config(), &[NewKey::new("k", 100)]).await;
    let _preloader = allocator.spawn_preloader();
    let mut issued = vec![allocator.next_id("k").await.unwrap().get()];
    store.down.store(true, Ordering::Relaxed);
    let mut failures = 0;
    for _ in 0..300 {
        match allocator.next_id("k").await {
            Ok(id) => issued.push(id.get()),
            Err(error) => {
                assert_eq!(error.code(), "unavailable", "{error}");
                // The full hint after a failed lease; what is left of it
                // for the callers that fail at once while backing off.
                let hint = error.retry_after().unwrap();
                assert!(hint > Duration::ZERO && hint <= Duration::from_millis(50));
                failures += 1;
            }
        }
    }
    assert_eq!(issued.len(), 100, "the buffered segment is served in full");
    assert_eq!(failures, 201);
    let status = allocator.served_keys().pop().unwrap();
    assert!(status.last_error.unwrap().contains("connection refused"));
    store.down.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = allocator.next_ids("k", 500).await.unwrap();
    assert!(after.first().unwrap().get() > *issued.last().unwrap());
}

#[tokio::test]
async fn a_hanging_store_times_out_and_a_lost_lease_is_never_used() {
    let store = Arc::new(FlakyStore::default());
    let (allocator, _) = allocator_with(store.clone(), config(), &[NewKey::new("k", 10)]).await;
    let first = allocator.next_ids("k", 10).await.unwrap();
    store.hang.store(true, Ordering::Relaxed);
    let started = tokio::time::Instant::now();
    let error = allocator.next_id("k").await.unwrap_err();
    assert_eq!(error.code(), "unavailable", "{error}");
    assert!(error.to_string().contains("timed out"), "{error}");
    assert!(started.elapsed() < Duration::from_millis(450));
    store.hang.store(false, Ordering::Relaxed);
    // Until the retry hint has passed, callers fail at once without a store call.
    let fetches = store.fetches.load(Ordering::Relaxed);
    let started = tokio::time::Instant::now();
    let error = allocator.next_id("k").await.unwrap_err();
    assert!(error.to_string().contains("tried again in"), "{error}");
    assert!(error.retry_after().unwrap() <= Duration::from_millis(50));
    assert!(started.elapsed() < Duration::from_millis(20));
    assert_eq!(
        store.fetches.load(Ordering::Relaxed),
        fetches,
        "no store call while backing off"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The store leases [11, 21) but the answer never arrives.
    store.lose.store(true, Ordering::Relaxed);
    assert!(allocator.next_id("k").await.is_err());
    store.lose.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let next = allocator.next_id("k").await.unwrap().get();
    assert!(next > first.last().unwrap().get());
    let lost_step = lock(&store.steps)[1];
    assert_eq!(
        next,
        11 + lost_step,
        "the lost lease [11, {}) is skipped",
        11 + lost_step
    );
}

#[tokio::test]
async fn a_store_that_goes_backwards_is_refused() {
    let store = Arc::new(FlakyStore::default());
    let (allocator, _) = allocator_with(store.clone(), config(), &[NewKey::new("k", 10)]).await;
    let batch = allocator.next_ids("k", 10).await.unwrap();
    // The next lease (step 20, the step doubled) ends at 25: starts at 5.
    *lock(&store.rewind_to) = Some(25);
    let error = allocator.next_id("k").await.unwrap_err();
    assert!(
        matches!(
            error,
            SegmentError::StoreWentBackwards {
                start: 5,
                previous_end: 11,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(batch.last().unwrap().get(), 10);
}

#[tokio::test(start_paused = true)]
async fn the_preloader_leases_ahead_so_the_switch_does_not_wait() {
    let store = Arc::new(FlakyStore::default());
    store.delay_ms.store(100, Ordering::Relaxed);
    let config = config()
        .with_store_timeout(Duration::from_secs(1))
        .with_wait(Duration::from_secs(2));
    let (allocator, _) = allocator_with(store.clone(), config, &[NewKey::new("k", 100)]).await;
    let _preloader = allocator.spawn_preloader();
    let key = allocator.key("k").await.unwrap();
    key.next_ids(11).await.unwrap();
    assert!(
        key.status().next.is_none(),
        "the preload runs in the background"
    );
    until_leasing(&key).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The lease's 100 ms have passed on the paused clock; the watch's thread
    // installs the segment when the timer wakes it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while key.status().next.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the preload never landed"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(key.status().next.map(|(first, _)| first.get()), Some(101));
    key.next_ids(89).await.unwrap();
    let started = tokio::time::Instant::now();
    let id = key.next_id().await.unwrap();
    assert_eq!(id.get(), 101);
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "the switch took no store time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_never_share_an_id_and_each_sees_them_increase() {
    let store = Arc::new(FlakyStore::default());
    let (allocator, _) = allocator_with(store.clone(), config(), &[NewKey::new("k", 100)]).await;
    let _preloader = allocator.spawn_preloader();
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let allocator = allocator.clone();
            tokio::spawn(async move {
                let mut got = Vec::with_capacity(40_000);
                while got.len() < 40_000 {
                    if t % 2 == 0 {
                        got.push(allocator.next_id("k").await.unwrap().get());
                    } else {
                        let batch = allocator.next_ids("k", 1 + t * 13).await.unwrap();
                        got.extend(batch.iter().map(Id::get));
                    }
                }
                got
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for task in tasks {
        let got = task.await.unwrap();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "a task's IDs increase");
        for id in got {
            assert!(seen.insert(id), "ID {id} twice");
        }
    }
}

// ---- Floors: what this node issued, persisted ahead of use ----

/// An allocator over `store` keeping its floors in `dir`.
fn with_floors(store: Arc<FlakyStore>, dir: &std::path::Path) -> SegmentAllocator {
    let clock = Arc::new(ManualClock::at_millis(1_795_219_200_000));
    SegmentAllocator::with_clock(store, config(), clock)
        .unwrap()
        .with_floors(Arc::new(FloorFile::open(dir).unwrap()))
        .unwrap()
}

/// The floors on disk, as a restarted node would read them.
fn floors_on_disk(dir: &std::path::Path) -> crate::floor::FloorRecord {
    let text = std::fs::read_to_string(dir.join(crate::floor::FLOOR_FILE_NAME)).unwrap();
    crate::floor::FloorRecord::parse(&text).unwrap()
}

#[tokio::test]
async fn every_id_is_below_a_floor_on_disk_before_it_is_handed_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore::default());
    let allocator = with_floors(store.clone(), dir.path());
    allocator.check_floors(&[]).await.unwrap();
    allocator
        .create_key(NewKey::new("order", 10))
        .await
        .unwrap();
    let _preloader = allocator.spawn_preloader();
    let mut writes = 0;
    let mut last_floor = 0;
    for _ in 0..300 {
        let id = allocator.next_id("order").await.unwrap().get();
        let floor = floors_on_disk(dir.path()).floor("order").unwrap();
        assert!(id < floor, "ID {id} left with floor {floor} on disk");
        if floor != last_floor {
            writes += 1;
            last_floor = floor;
        }
    }
    let batch = allocator.next_ids("order", 5000).await.unwrap();
    let floor = floors_on_disk(dir.path()).floor("order").unwrap();
    assert!(batch.last().unwrap().get() < floor);
    let leases = store.fetches.load(Ordering::Relaxed);
    assert!(
        writes <= leases && leases < 40,
        "one write per lease at most, never per ID: {writes} writes, {leases} leases"
    );
    // The epoch the store got is the one remembered.
    assert_eq!(
        floors_on_disk(dir.path()).epoch,
        store.epoch().await.unwrap()
    );
}

#[tokio::test]
async fn a_restarted_node_refuses_a_reset_store_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore::default());
    let declared = ["order".to_owned()];
    let issued = {
        let allocator = with_floors(store.clone(), dir.path());
        allocator.check_floors(&declared).await.unwrap();
        allocator
            .create_key(NewKey::new("order", 100))
            .await
            .unwrap();
        allocator.next_ids("order", 250).await.unwrap()
    };
    assert_eq!(issued.last().unwrap().get(), 250);
    let floor = floors_on_disk(dir.path()).floor("order").unwrap();
    assert!(floor > 250);

    // Redis restarted without persistence: every key and the epoch are gone.
    store.store.reset();
    let allocator = with_floors(store.clone(), dir.path());
    let error = allocator.check_floors(&declared).await.unwrap_err();
    assert_eq!(error.code(), "store_reset", "{error}");
    let text = error.to_string();
    assert!(
        text.contains("missing") && text.contains(&format!("\"order\" (floor {floor})")),
        "{text}"
    );
    assert_eq!(store.epoch().await.unwrap(), None, "no epoch was written");
    // Creating the key anew from 1 (what the server did at start) is refused.
    let error = allocator
        .create_key(NewKey::new("order", 100))
        .await
        .unwrap_err();
    assert!(
        matches!(error, SegmentError::KeyBelowFloor { floor: f, found: Some(1), .. } if f == floor),
        "{error}"
    );
    assert!(
        store.list().await.unwrap().is_empty(),
        "nothing was created"
    );
    // The message tells the operator what to run.
    assert!(
        error
            .to_string()
            .contains(&format!("idmint segment raise order --above {}", floor - 1)),
        "{error}"
    );
    assert!(!error.is_transient() && !error.is_bad_input());
    // Once the key is back above the floor, creating it is "exists", as
    // for any key (what a server's start expects of its declared keys).
    store
        .raise(&NewKey::new("order", 100).with_start(floor))
        .await
        .unwrap();
    let exists = allocator
        .create_key(NewKey::new("order", 100))
        .await
        .unwrap_err();
    assert_eq!(exists.code(), "key_exists", "{exists}");
}

#[tokio::test]
async fn a_store_restored_behind_is_refused_while_running_until_raised() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore::default());
    let allocator = with_floors(store.clone(), dir.path());
    allocator.check_floors(&[]).await.unwrap();
    allocator.create_key(NewKey::new("k", 10)).await.unwrap();
    let mut issued: Vec<u64> = ids(&allocator.next_ids("k", 95).await.unwrap());
    let floor = floors_on_disk(dir.path()).floor("k").unwrap();

    // Restored from a backup taken when max_id was 31: the buffer is served
    // out, then the next lease is refused and the store left as it was.
    assert!(store.store.set_max_id("k", 31));
    let error = loop {
        match allocator.next_id("k").await {
            Ok(id) => issued.push(id.get()),
            Err(error) => break error,
        }
    };
    assert!(
        matches!(error, SegmentError::KeyBelowFloor { floor: f, found: Some(31), .. } if f == floor),
        "{error}"
    );
    assert_eq!(error.code(), "key_below_floor");
    assert_eq!(store.store.describe("k").await.unwrap().unwrap().max_id, 31);
    // Callers in the backoff get the refusal at once, without a store call.
    let fetches = store.fetches.load(Ordering::Relaxed);
    let again = allocator.next_ids("k", 3).await.unwrap_err();
    assert_eq!(again.code(), "key_below_floor", "{again}");
    assert_eq!(store.fetches.load(Ordering::Relaxed), fetches);
    // The store asked again later is still refused, and still unchanged.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(
        allocator.next_id("k").await.unwrap_err().code(),
        "key_below_floor"
    );
    assert_eq!(store.store.describe("k").await.unwrap().unwrap().max_id, 31);
    // Tinyid's whole segments are refused below the floor too.
    assert_eq!(
        allocator.lease_segment("k").await.unwrap_err().code(),
        "key_below_floor"
    );

    // The operator raises the key above every ID issued: serving resumes above.
    store
        .raise(&NewKey::new("k", 10).with_start(floor))
        .await
        .unwrap();
    // Three refusals in a row so far: the store is asked again after the
    // doubled pause (50, 100, then 200 ms).
    tokio::time::sleep(Duration::from_millis(250)).await;
    let after = ids(&allocator.next_ids("k", 50).await.unwrap());
    assert!(after[0] >= floor, "{} below the floor {floor}", after[0]);
    let segment = allocator.lease_segment("k").await.unwrap();
    assert!(segment.start() >= floor);
    assert!(floors_on_disk(dir.path()).floor("k").unwrap() >= segment.max_id);
    issued.extend(after);
    let unique: HashSet<u64> = issued.iter().copied().collect();
    assert_eq!(unique.len(), issued.len(), "no ID twice");
}

#[tokio::test]
async fn a_key_the_store_lost_while_running_is_refused_not_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore::default());
    let allocator = with_floors(store.clone(), dir.path());
    allocator.create_key(NewKey::new("k", 10)).await.unwrap();
    allocator
        .create_key(NewKey::new("fresh", 10))
        .await
        .unwrap();
    allocator.next_ids("k", 10).await.unwrap();
    store.store.reset();
    let error = allocator.next_id("k").await.unwrap_err();
    assert!(
        matches!(error, SegmentError::KeyBelowFloor { found: None, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("no such key"), "{error}");
    // A key this node never issued from is simply unknown.
    let error = allocator.next_id("never").await.unwrap_err();
    assert_eq!(error.code(), "key_not_found");
    assert!(
        store.list().await.unwrap().is_empty(),
        "nothing was created"
    );
}

#[tokio::test]
async fn a_store_that_breaks_its_floor_promise_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore::default());
    allocator_with(store.clone(), config(), &[NewKey::new("k", 10)]).await;
    let allocator = with_floors(store.clone(), dir.path());
    allocator.next_ids("k", 10).await.unwrap();
    // The next lease ends at 25 with a step of 20: it starts at 5.
    *lock(&store.rewind_to) = Some(25);
    let error = allocator.next_id("k").await.unwrap_err();
    assert!(
        matches!(error, SegmentError::StoreWentBackwards { start: 5, .. }),
        "{error}"
    );
    // Restarted (no lease in memory), the floor (11: the refused segment
    // was never persisted) still refuses a segment from 5 (step 10, to 15).
    drop(allocator);
    let allocator = with_floors(store.clone(), dir.path());
    *lock(&store.rewind_to) = Some(15);
    let error = allocator.next_id("k").await.unwrap_err();
    assert!(
        matches!(error, SegmentError::KeyBelowFloor { found: Some(5), .. }),
        "{error}"
    );
}

#[tokio::test]
async fn check_floors_adopts_a_new_store_and_refuses_another_or_lowered_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore::default());
    // A node that never leased adopts the store's epoch, writing one first.
    {
        let allocator = with_floors(store.clone(), dir.path());
        allocator.check_floors(&[]).await.unwrap();
        let epoch = store.epoch().await.unwrap().unwrap();
        assert_eq!(allocator.floors().unwrap().epoch(), Some(epoch));
        allocator.create_key(NewKey::new("a", 10)).await.unwrap();
        allocator.create_key(NewKey::new("b", 10)).await.unwrap();
        allocator.next_ids("a", 15).await.unwrap();
        allocator.next_ids("b", 15).await.unwrap();
    }
    // Same store, same epoch: fine; a floored key missing but not declared
    // is only logged.
    store.store.set_max_id("a", 1_000);
    {
        let allocator = with_floors(store.clone(), dir.path());
        allocator.check_floors(&["a".to_owned()]).await.unwrap();
        // Lowered below the floor: refused, naming the key.
        store.store.set_max_id("b", 3);
        let error = allocator.check_floors(&[]).await.unwrap_err();
        assert!(
            matches!(&error, SegmentError::KeyBelowFloor { key, found: Some(3), .. } if key == "b"),
            "{error}"
        );
    }
    // Another store (or this one re-initialised): its epoch differs.
    let other = Arc::new(FlakyStore::default());
    other.init_epoch(&StoreEpoch::generate()).await.unwrap();
    let allocator = with_floors(other.clone(), dir.path());
    let error = allocator.check_floors(&[]).await.unwrap_err();
    let SegmentError::StoreReset {
        found, remembered, ..
    } = &error
    else {
        panic!("{error}");
    };
    assert_ne!(found, remembered);
    assert!(found.is_some());
}

/// Waits, in real time, until the preloader's watch (a thread, not on this
/// paused clock) has started a lease for `key`: only then may the paused
/// clock run on.
async fn until_leasing(key: &SegmentKey) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !key.status().loading {
        assert!(
            std::time::Instant::now() < deadline,
            "the preloader never started a lease"
        );
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_micros(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_preloads_without_being_told_and_parks_when_nothing_moves() {
    let store = Arc::new(FlakyStore::default());
    let config = config().with_max_step(100);
    let (allocator, _) = allocator_with(store.clone(), config, &[NewKey::new("k", 100)]).await;
    let preloader = allocator.spawn_preloader_lingering(Duration::from_millis(30));
    let key = allocator.key("k").await.unwrap();
    for round in 0..50u64 {
        // Past the preload point of each segment, then wait for the next
        // segment to appear by itself; no switch ever leases on demand.
        key.next_ids(11).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while key.status().next.is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: no preload"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        key.next_ids(89).await.unwrap();
        if round % 10 == 9 {
            // Let the watch park: the next crossing must wake it.
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !preloader.watch.is_parked() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the watch never parked"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    assert_eq!(
        store.fetches.load(Ordering::Relaxed),
        51,
        "one lease per segment, each made by the preloader ahead of need"
    );
    let id = key.next_id().await.unwrap();
    assert_eq!(id.get(), 5001);
}

/// Store calls made while `for_how_long` passes with a caller asking every
/// 10 ms and the preloader running: what a refused key costs the store.
async fn fetches_while_asking(
    allocator: &SegmentAllocator,
    store: &FlakyStore,
    key: &str,
    for_how_long: Duration,
) -> u64 {
    let before = store.fetches.load(Ordering::Relaxed);
    let until = tokio::time::Instant::now() + for_how_long;
    while tokio::time::Instant::now() < until {
        let error = allocator.next_id(key).await.unwrap_err();
        assert!(
            matches!(error.code(), "key_below_floor" | "store_reset"),
            "{error}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.fetches.load(Ordering::Relaxed) - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_backs_off_doubling_and_the_preloader_does_not_storm() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore::default());
    let allocator = with_floors(store.clone(), dir.path());
    allocator.create_key(NewKey::new("k", 10)).await.unwrap();
    let _preloader = allocator.spawn_preloader();
    let mut issued: Vec<u64> = ids(&allocator.next_ids("k", 25).await.unwrap());
    let floor = floors_on_disk(dir.path()).floor("k").unwrap();

    // The store is restored behind: once the buffers are served out, every
    // lease is refused, by the preloader and the callers alike.
    assert!(store.store.set_max_id("k", 3));
    while let Ok(id) = allocator.next_id("k").await {
        issued.push(id.get());
    }
    let status = served(&allocator, "k");
    assert_eq!(status.refusal, Some("key_below_floor"), "{status:?}");
    // With a 50 ms retry hint doubling per refusal: 50, 100, 200, 400, 800
    // ms... about 5 store calls in 1.5 s. Asked again at every scan of the
    // preloader, as before, it was about 48 a second.
    let calls = fetches_while_asking(&allocator, &store, "k", Duration::from_millis(1500)).await;
    assert!(calls <= 8, "{calls} store calls in 1.5 s for a refused key");
    assert_eq!(store.store.describe("k").await.unwrap().unwrap().max_id, 3);

    // The operator raises the key: serving resumes at the next try (within
    // the longest pause so far), above the floor, and the refusal clears.
    store
        .raise(&NewKey::new("k", 10).with_start(floor))
        .await
        .unwrap();
    let resumed = tokio::time::Instant::now();
    let id = loop {
        match allocator.next_id("k").await {
            Ok(id) => break id.get(),
            Err(error) => assert_eq!(error.code(), "key_below_floor", "{error}"),
        }
        assert!(resumed.elapsed() < Duration::from_secs(10), "never resumed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(id >= floor, "{id} below the floor {floor}");
    assert_eq!(served(&allocator, "k").refusal, None);
    issued.push(id);
    let unique: HashSet<u64> = issued.iter().copied().collect();
    assert_eq!(unique.len(), issued.len(), "no ID twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_whose_epoch_goes_missing_while_running_is_refused_at_the_next_lease() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore::default());
    let allocator = with_floors(store.clone(), dir.path());
    allocator.check_floors(&[]).await.unwrap();
    allocator.create_key(NewKey::new("k", 10)).await.unwrap();
    let _preloader = allocator.spawn_preloader();
    allocator.next_ids("k", 5).await.unwrap();
    let adopted = store.epoch().await.unwrap().expect("an epoch adopted");

    // Only the marker is deleted (`DEL idmint:segments:epoch`): the keys
    // look whole, but this is no longer the store the node adopted.
    store.store.forget_epoch();
    let max_id = store.store.describe("k").await.unwrap().unwrap().max_id;
    let error = loop {
        if let Err(error) = allocator.next_id("k").await {
            break error;
        }
    };
    assert_eq!(error.code(), "store_reset", "{error}");
    assert!(
        matches!(&error, SegmentError::StoreReset { remembered: Some(r), found: None, floors, .. }
            if *r == adopted.to_string() && floors.iter().any(|(k, _)| k == "k")),
        "{error:?}"
    );
    assert_eq!(served(&allocator, "k").refusal, Some("store_reset"));
    // Nothing was leased from the store that lost its marker, and callers
    // back off from it as from any refusal.
    assert_eq!(
        store.store.describe("k").await.unwrap().unwrap().max_id,
        max_id
    );
    let calls = fetches_while_asking(&allocator, &store, "k", Duration::from_millis(500)).await;
    assert_eq!(
        calls, 0,
        "a store without its marker is never asked for a segment"
    );

    // Another marker (a node with an empty directory wrote one into the
    // reset store): still another store for this node.
    store
        .store
        .init_epoch(&StoreEpoch::generate())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        allocator.next_id("k").await.unwrap_err().code(),
        "store_reset"
    );
}

/// `key`'s status among the served keys.
fn served(allocator: &SegmentAllocator, key: &str) -> KeyStatus {
    allocator
        .served_keys()
        .into_iter()
        .find(|k| k.key == key)
        .expect("a served key")
}

#[tokio::test]
async fn a_key_the_store_lost_is_not_created_again_by_a_node_without_floors() {
    // Node A issued from the key; its row is then deleted by hand. Node B,
    // with no floors (a new node, an empty data directory), would create it
    // again from its start and repeat A's IDs: the store's ledger refuses.
    let store = Arc::new(FlakyStore::default());
    let (a, _) = allocator_with(store.clone(), config(), &[NewKey::new("k", 10)]).await;
    let issued = ids(&a.next_ids("k", 25).await.unwrap());
    assert!(store.store.delete_key("k"));
    let (b, _) = allocator_with(store.clone(), config(), &[]).await;
    let error = b.create_key(NewKey::new("k", 10)).await.unwrap_err();
    assert_eq!(error.code(), "key_forgotten", "{error}");
    assert!(store.store.describe("k").await.unwrap().is_none());
    // The operator raises it above what was issued; both serve above.
    let above = *issued.iter().max().unwrap() + 1;
    store
        .raise(&NewKey::new("k", 10).with_start(above))
        .await
        .unwrap();
    let next = b.next_id("k").await.unwrap().get();
    assert!(next >= above, "{next} < {above}");
}
