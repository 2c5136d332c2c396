//! Tests of the SQL segment store against real SQLite, PostgreSQL and MariaDB.
//!
//! Every test runs on each backend (`sql::<test>::sqlite`, `::postgres`,
//! `::mysql`) on a table of its own with a random suffix, dropped at the end,
//! because other tests use the same databases at the same time.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idmint_segment::sql::{SqlSegmentStore, SqlStoreConfig, TableSchema};
use idmint_segment::{
    FloorFile, MAX_ID, NewKey, SegmentAllocator, SegmentConfig, SegmentError, SegmentStore,
    StoreEpoch,
};
use idmint_sql::{ConnectOptions, Database, Dialect, Identifier, on_pool};

use crate::support::{self, MYSQL_URL, POSTGRES_URL};

/// One backend's database, and a fresh table name on it.
#[derive(Clone)]
struct TestDb {
    dialect: Dialect,
    url: String,
    table: String,
    /// A separate pool for setting up and inspecting, as an operator would.
    admin: Database,
    /// Keeps the SQLite file's directory alive.
    _dir: Option<Arc<tempfile::TempDir>>,
}

impl TestDb {
    /// The backend's database, or `None` (after `require_service`) when it
    /// can't be reached.
    async fn new(dialect: Dialect) -> Option<TestDb> {
        let (url, dir) = match dialect {
            Dialect::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("segments.db").display());
                (url, Some(Arc::new(dir)))
            }
            Dialect::Postgres => (POSTGRES_URL.to_owned(), None),
            Dialect::MySql => (MYSQL_URL.to_owned(), None),
        };
        let options = ConnectOptions::new(url.clone())
            .with_max_connections(2)
            .with_connect_timeout(Duration::from_secs(3));
        let admin = match Database::connect(&options).await {
            Ok(db) => db,
            Err(e) => {
                let name = match dialect {
                    Dialect::Postgres => "PostgreSQL",
                    Dialect::MySql => "MariaDB",
                    Dialect::Sqlite => panic!("SQLite must always work: {e}"),
                };
                support::require_service(name, false);
                return None;
            }
        };
        Some(TestDb {
            dialect,
            url,
            table: format!("seg_test_{:016x}", fastrand::u64(..)),
            admin,
            _dir: dir,
        })
    }

    fn config(&self) -> SqlStoreConfig {
        SqlStoreConfig::new(self.url.clone()).with_table(self.table.clone())
    }

    async fn store(&self) -> SqlSegmentStore {
        SqlSegmentStore::connect(self.config()).await.unwrap()
    }

    fn component(&self) -> String {
        format!("segment:{}", self.table)
    }

    async fn exec(&self, sql: &str) {
        let sql = self.dialect.placeholders(sql);
        on_pool!(self.admin.pool(), p => sqlx::raw_sql(&sql).execute(p).await.map(|_| ()))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn scalar_i64(&self, sql: &str) -> i64 {
        on_pool!(self.admin.pool(), p => sqlx::query_scalar::<_, i64>(sql).fetch_one(p).await)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn cleanup(&self) {
        self.exec(&format!("DROP TABLE IF EXISTS {}", self.table))
            .await;
        // The epoch table may not exist (a Leaf-only test on a fresh file).
        let forget = self.dialect.placeholders(&format!(
            "DELETE FROM idmint_segment_epochs WHERE segment_table = '{}'",
            self.table
        ));
        let _ =
            on_pool!(self.admin.pool(), p => sqlx::raw_sql(&forget).execute(p).await.map(|_| ()));
        let forget = format!(
            "DELETE FROM idmint_segment_ledger WHERE segment_table = '{}'",
            self.table
        );
        let _ =
            on_pool!(self.admin.pool(), p => sqlx::raw_sql(&forget).execute(p).await.map(|_| ()));
        let delete = format!(
            "DELETE FROM {} WHERE component = '{}'",
            idmint_sql::MIGRATIONS_TABLE,
            self.component()
        );
        let sql = self.dialect.placeholders(&delete);
        // The migrations table may not exist (a Leaf-only test on a fresh file).
        let _ = on_pool!(self.admin.pool(), p => sqlx::raw_sql(&sql).execute(p).await.map(|_| ()));
        self.admin.close().await;
    }
}

/// Runs `body` on a fresh table of `dialect`, then drops the table.
async fn run<F, Fut>(dialect: Dialect, body: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(db) = TestDb::new(dialect).await else {
        return;
    };
    body(db.clone()).await;
    db.cleanup().await;
}

/// One `#[tokio::test]` per backend for the async test body `$name(TestDb)`.
macro_rules! on_each_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                run(Dialect::Sqlite, super::$name).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                run(Dialect::Postgres, super::$name).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn mysql() {
                run(Dialect::MySql, super::$name).await;
            }
        }
    )*};
}

on_each_backend!(
    create_describe_list_fetch,
    existing_key_is_key_exists,
    unknown_key_is_not_found,
    exhausted_near_the_largest_id,
    invalid_specs_are_rejected_and_nothing_written,
    concurrent_fetches_from_two_pools_never_overlap,
    leaf_table_is_continued_above_leaf_ids,
    leaf_mode_refuses_a_missing_or_foreign_table,
    concurrent_connects_migrate_once,
    newer_schema_version_is_refused,
    allocators_on_separate_pools_issue_a_million_unique_ids_per_key,
    a_lease_above_a_floor_is_refused_below_it_and_changes_nothing,
    raise_creates_raises_and_never_lowers,
    the_epoch_is_written_once_and_read_by_every_pool,
    a_node_with_floors_refuses_a_restored_table_until_raised,
    a_leaf_table_keeps_no_epoch_but_honours_floors,
    a_key_the_table_lost_is_never_created_again_from_its_start,
);

async fn create_describe_list_fetch(db: TestDb) {
    let store = db.store().await;
    assert_eq!(store.kind(), db.dialect.name());
    assert!(store.list().await.unwrap().is_empty());

    // Created out of order: list sorts by key.
    let b = store
        .create(&NewKey::new("b.orders", 10).with_start(40).with_delta(4, 3))
        .await
        .unwrap();
    assert_eq!((b.max_id, b.step, b.delta, b.remainder), (40, 10, 4, 3));
    let a = store
        .create(&NewKey::new("a.payments", 100).with_description("payments, v2"))
        .await
        .unwrap();
    assert_eq!(a.key, "a.payments");
    assert_eq!((a.max_id, a.step, a.delta, a.remainder), (1, 100, 1, 0));
    assert_eq!(a.description, "payments, v2");
    assert!(a.updated.is_some(), "{a:?}");
    // Case matters on every backend (MySQL's default collation would fold it).
    store.create(&NewKey::new("A.payments", 7)).await.unwrap();

    let keys: Vec<String> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.key)
        .collect();
    assert_eq!(keys, ["A.payments", "a.payments", "b.orders"]);
    assert_eq!(store.describe("a.payments").await.unwrap().unwrap(), a);

    // The row's step, then a given (dynamic) step.
    let g = store.fetch("a.payments", None).await.unwrap();
    assert_eq!(
        (g.start(), g.max_id, g.step, g.delta, g.remainder),
        (1, 101, 100, 1, 0)
    );
    let g = store.fetch("a.payments", Some(500)).await.unwrap();
    assert_eq!((g.start(), g.max_id, g.step), (101, 601, 500));
    let g = store.fetch("b.orders", None).await.unwrap();
    assert_eq!((g.start(), g.max_id, g.delta, g.remainder), (40, 50, 4, 3));

    let after = store.describe("a.payments").await.unwrap().unwrap();
    assert_eq!(
        (after.max_id, after.step),
        (601, 100),
        "the row's step is untouched"
    );
    assert_eq!(
        store.describe("A.payments").await.unwrap().unwrap().max_id,
        1
    );

    // Visible at once to another pool (another server).
    let other = db.store().await;
    let g = other.fetch("a.payments", None).await.unwrap();
    assert_eq!(g.start(), 601);
    other.create(&NewKey::new("c", 5)).await.unwrap();
    assert_eq!(store.fetch("c", None).await.unwrap().start(), 1);
    store.close().await;
    other.close().await;
}

async fn existing_key_is_key_exists(db: TestDb) {
    let store = db.store().await;
    store.create(&NewKey::new("order", 100)).await.unwrap();
    store.fetch("order", None).await.unwrap();
    let err = store
        .create(&NewKey::new("order", 5).with_start(1_000))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SegmentError::KeyExists { key } if key == "order"),
        "{err}"
    );
    let row = store.describe("order").await.unwrap().unwrap();
    assert_eq!((row.max_id, row.step), (101, 100), "the row is unchanged");

    // Racing creates of one key from two servers: the database decides, by
    // the unique key, and exactly one wins.
    let other = db.store().await;
    for round in 0..5 {
        let key = format!("race-{round}");
        let (first, second) = (NewKey::new(key.clone(), 10), NewKey::new(key, 20));
        let (x, y) = tokio::join!(store.create(&first), other.create(&second));
        let won = [&x, &y].iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "{x:?} {y:?}");
        for r in [x, y] {
            if let Err(e) = r {
                assert!(matches!(e, SegmentError::KeyExists { .. }), "{e}");
            }
        }
    }
    store.close().await;
    other.close().await;
}

async fn unknown_key_is_not_found(db: TestDb) {
    let store = db.store().await;
    assert!(store.describe("nope").await.unwrap().is_none());
    for step in [None, Some(10)] {
        let err = store.fetch("nope", step).await.unwrap_err();
        assert!(
            matches!(&err, SegmentError::NotFound { key } if key == "nope"),
            "{err}"
        );
        assert_eq!(err.code(), "key_not_found");
    }
    // A bad step is refused before anything is read or written.
    store.create(&NewKey::new("k", 10)).await.unwrap();
    for step in [0, MAX_ID + 1, u64::MAX] {
        let err = store.fetch("k", Some(step)).await.unwrap_err();
        assert!(err.is_bad_input(), "{step}: {err}");
    }
    assert_eq!(store.describe("k").await.unwrap().unwrap().max_id, 1);
    store.close().await;
}

async fn exhausted_near_the_largest_id(db: TestDb) {
    let store = db.store().await;
    store
        .create(&NewKey::new("edge", 100).with_start(MAX_ID - 150))
        .await
        .unwrap();
    let g = store.fetch("edge", None).await.unwrap();
    assert_eq!((g.start(), g.max_id), (MAX_ID - 150, MAX_ID - 50));

    // The row's step no longer fits: refused, row unchanged.
    let err = store.fetch("edge", None).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::Exhausted { max_id, step: 100, .. } if max_id == MAX_ID - 50),
        "{err}"
    );
    assert_eq!(err.code(), "key_exhausted");
    assert_eq!(
        store.describe("edge").await.unwrap().unwrap().max_id,
        MAX_ID - 50
    );

    // A step that lands exactly on 2^63 − 1 fits; one more does not.
    let err = store.fetch("edge", Some(51)).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::Exhausted { step: 51, .. }),
        "{err}"
    );
    let g = store.fetch("edge", Some(50)).await.unwrap();
    assert_eq!((g.start(), g.max_id), (MAX_ID - 50, MAX_ID));
    for step in [Some(1), None, Some(MAX_ID)] {
        let err = store.fetch("edge", step).await.unwrap_err();
        assert!(
            matches!(err, SegmentError::Exhausted { max_id: MAX_ID, .. }),
            "{err}"
        );
    }
    assert_eq!(
        store.describe("edge").await.unwrap().unwrap().max_id,
        MAX_ID
    );

    // A huge given step on a young key: refused, not wrapped.
    store.create(&NewKey::new("young", 10)).await.unwrap();
    let err = store.fetch("young", Some(MAX_ID)).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::Exhausted { max_id: 1, .. }),
        "{err}"
    );
    assert_eq!(store.describe("young").await.unwrap().unwrap().max_id, 1);

    if db.dialect == Dialect::Sqlite {
        // SQLite would have stored an overflowing sum as a REAL.
        let t = &db.table;
        let reals = db
            .scalar_i64(&format!(
                "SELECT COUNT(*) FROM {t} WHERE typeof(max_id) <> 'integer'"
            ))
            .await;
        assert_eq!(reals, 0);
    }
    store.close().await;
}

async fn invalid_specs_are_rejected_and_nothing_written(db: TestDb) {
    let store = db.store().await;
    let bad = [
        NewKey::new("", 10),
        NewKey::new("a b", 10),
        NewKey::new("x".repeat(129), 10),
        NewKey::new("k", 0),
        NewKey::new("k", MAX_ID + 1),
        NewKey::new("k", 10).with_delta(0, 0),
        NewKey::new("k", 10).with_delta(11, 0),
        NewKey::new("k", 10).with_delta(3, 3),
        NewKey::new("k", 10).with_start(MAX_ID - 5),
        NewKey::new("k", 10).with_description("d".repeat(257)),
    ];
    for key in bad {
        let err = store.create(&key).await.unwrap_err();
        assert!(err.is_bad_input(), "{key:?}: {err}");
    }
    assert!(store.list().await.unwrap().is_empty());
    let t = &db.table;
    assert_eq!(db.scalar_i64(&format!("SELECT COUNT(*) FROM {t}")).await, 0);
    store.close().await;
}

/// One fetch as a task saw it, with tickets taken from one global counter
/// just before the call and just after it returned.
#[derive(Debug, Clone, Copy)]
struct Seen {
    pool: usize,
    task: usize,
    before: u64,
    after: u64,
    start: u64,
    end: u64,
}

async fn concurrent_fetches_from_two_pools_never_overlap(db: TestDb) {
    const POOLS: usize = 2;
    const TASKS: usize = 8;
    const FETCHES: usize = 40;
    let mut stores = Vec::new();
    for _ in 0..POOLS {
        stores.push(Arc::new(db.store().await));
    }
    stores[0].create(&NewKey::new("hot", 10)).await.unwrap();
    let clock = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for (pool, store) in stores.iter().enumerate() {
        for task in 0..TASKS {
            let store = Arc::clone(store);
            let clock = Arc::clone(&clock);
            handles.push(tokio::spawn(async move {
                let mut seen = Vec::with_capacity(FETCHES);
                for i in 0..FETCHES {
                    // Mix the row's step with given (dynamic) steps.
                    let step = (i % 3 == 1).then_some(7 + task as u64);
                    let before = clock.fetch_add(1, Ordering::SeqCst);
                    let g = store.fetch("hot", step).await.unwrap();
                    let after = clock.fetch_add(1, Ordering::SeqCst);
                    seen.push(Seen {
                        pool,
                        task,
                        before,
                        after,
                        start: g.start(),
                        end: g.max_id,
                    });
                }
                seen
            }));
        }
    }
    let mut all = Vec::new();
    for h in handles {
        let seen = h.await.unwrap();
        // Each task (a sequence of calls on one pool) sees increasing ranges.
        for w in seen.windows(2) {
            assert!(w[1].start >= w[0].end, "{:?} then {:?}", w[0], w[1]);
        }
        all.extend(seen);
    }
    assert_eq!(all.len(), POOLS * TASKS * FETCHES);

    // Together the ranges tile [1, max_id) exactly: no overlap, no gap.
    let mut sorted = all.clone();
    sorted.sort_by_key(|s| s.start);
    assert_eq!(sorted[0].start, 1);
    for w in sorted.windows(2) {
        assert_eq!(w[1].start, w[0].end, "{:?} and {:?}", w[0], w[1]);
    }
    let end = sorted.last().unwrap().end;
    assert_eq!(
        stores[1].describe("hot").await.unwrap().unwrap().max_id,
        end
    );

    // A fetch that began after another ended got a higher range, whichever
    // pool either ran on.
    for a in &all {
        for b in &all {
            if a.after < b.before {
                assert!(b.start >= a.end, "{a:?} ended before {b:?} began");
            }
        }
    }
    let pools: HashSet<usize> = all.iter().map(|s| s.pool).collect();
    assert_eq!(pools.len(), POOLS);
    let tasks: HashSet<(usize, usize)> = all.iter().map(|s| (s.pool, s.task)).collect();
    assert_eq!(tasks.len(), POOLS * TASKS);
    for store in stores {
        store.close().await;
    }
}

/// Leaf's `leaf_alloc` DDL (scripts/leaf_alloc.sql), in MySQL's own words
/// for MariaDB and adapted only as far as the other two need.
fn leaf_ddl(dialect: Dialect, table: &str) -> String {
    match dialect {
        Dialect::MySql => format!(
            "CREATE TABLE `{table}` (
              `biz_tag` varchar(128)  NOT NULL DEFAULT '',
              `max_id` bigint(20) NOT NULL DEFAULT '1',
              `step` int(11) NOT NULL,
              `description` varchar(256)  DEFAULT NULL,
              `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
              PRIMARY KEY (`biz_tag`)
            ) ENGINE=InnoDB"
        ),
        Dialect::Postgres | Dialect::Sqlite => format!(
            "CREATE TABLE {table} (
              biz_tag varchar(128) NOT NULL DEFAULT '',
              max_id bigint NOT NULL DEFAULT 1,
              step int NOT NULL,
              description varchar(256) DEFAULT NULL,
              update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
              PRIMARY KEY (biz_tag)
            )"
        ),
    }
}

async fn leaf_table_is_continued_above_leaf_ids(db: TestDb) {
    let t = &db.table;
    db.exec(&leaf_ddl(db.dialect, t)).await;
    // Leaf's sample row, after Leaf handed out segments up to 10,000
    // (`UPDATE leaf_alloc SET max_id = max_id + step` five times from 1).
    db.exec(&format!(
        "INSERT INTO {t} (biz_tag, max_id, step, description) \
         VALUES ('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id')"
    ))
    .await;
    for _ in 0..5 {
        db.exec(&format!(
            "UPDATE {t} SET max_id = max_id + step WHERE biz_tag = 'leaf-segment-test'"
        ))
        .await;
    }

    let store = SqlSegmentStore::connect(db.config().with_schema(TableSchema::Leaf))
        .await
        .unwrap();
    assert_eq!(store.schema(), TableSchema::Leaf);
    let info = store.describe("leaf-segment-test").await.unwrap().unwrap();
    assert_eq!(
        (info.max_id, info.step, info.delta, info.remainder),
        (10_001, 2000, 1, 0)
    );
    assert_eq!(info.description, "Test leaf Segment Mode Get Id");

    // Leaf issued [1, 10001); idmint carries on right above.
    let g = store.fetch("leaf-segment-test", None).await.unwrap();
    assert_eq!(
        (g.start(), g.max_id, g.step, g.delta, g.remainder),
        (10_001, 12_001, 2000, 1, 0)
    );
    // A Leaf server still running beside idmint bumps the same row: no overlap.
    db.exec(&format!(
        "UPDATE {t} SET max_id = max_id + step WHERE biz_tag = 'leaf-segment-test'"
    ))
    .await;
    let g = store.fetch("leaf-segment-test", Some(5000)).await.unwrap();
    assert_eq!((g.start(), g.max_id), (14_001, 19_001));

    // Keys created in Leaf mode fit Leaf's columns.
    let k = store
        .create(&NewKey::new("new-key", 1000).with_description("from idmint"))
        .await
        .unwrap();
    assert_eq!((k.max_id, k.step, k.delta, k.remainder), (1, 1000, 1, 0));
    let keys: Vec<String> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.key)
        .collect();
    assert_eq!(keys, ["leaf-segment-test", "new-key"]);
    for bad in [
        NewKey::new("d", 10).with_delta(2, 1),
        NewKey::new("s", i32::MAX as u64 + 1),
    ] {
        let err = store.create(&bad).await.unwrap_err();
        assert!(matches!(err, SegmentError::InvalidSpec { .. }), "{err}");
    }
    assert!(store.describe("d").await.unwrap().is_none());

    // Exhaustion is guarded on Leaf's table too.
    db.exec(&format!(
        "UPDATE {t} SET max_id = {} WHERE biz_tag = 'new-key'",
        MAX_ID - 999
    ))
    .await;
    let err = store.fetch("new-key", None).await.unwrap_err();
    assert!(matches!(err, SegmentError::Exhausted { .. }), "{err}");

    // Nothing was migrated: the table is Leaf's as it was.
    let recorded = store
        .database()
        .applied_migrations(&db.component())
        .await
        .unwrap();
    assert!(recorded.is_empty(), "{recorded:?}");
    store.close().await;
}

async fn leaf_mode_refuses_a_missing_or_foreign_table(db: TestDb) {
    let leaf = db.config().with_schema(TableSchema::Leaf);
    let err = SqlSegmentStore::connect(leaf.clone()).await.unwrap_err();
    assert!(
        matches!(&err, SegmentError::Config(m) if m.contains("does not exist")),
        "{err}"
    );
    let t = &db.table;
    db.exec(&format!(
        "CREATE TABLE {t} (biz_tag VARCHAR(128) PRIMARY KEY, max_id BIGINT NOT NULL)"
    ))
    .await;
    let err = SqlSegmentStore::connect(leaf).await.unwrap_err();
    assert!(
        matches!(&err, SegmentError::Config(m) if m.contains("step, description, update_time")),
        "{err}"
    );
}

async fn concurrent_connects_migrate_once(db: TestDb) {
    let (a, b, c) = tokio::join!(
        SqlSegmentStore::connect(db.config()),
        SqlSegmentStore::connect(db.config()),
        SqlSegmentStore::connect(db.config()),
    );
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    let recorded = db.admin.applied_migrations(&db.component()).await.unwrap();
    let versions: Vec<i64> = recorded.iter().map(|m| m.version).collect();
    assert_eq!(versions, [1, 2, 3]);

    // Re-running is a no-op, and the stores work.
    let table = Identifier::new(db.table.clone()).unwrap();
    let set = SqlSegmentStore::migrations(db.dialect, &table);
    let report = db.admin.migrate(&set).await.unwrap();
    assert!(report.applied.is_empty(), "{report:?}");
    assert_eq!(report.version, 3);
    a.create(&NewKey::new("k", 10)).await.unwrap();
    assert_eq!(b.fetch("k", None).await.unwrap().start(), 1);
    assert_eq!(c.fetch("k", None).await.unwrap().start(), 11);
    for s in [a, b, c] {
        s.close().await;
    }
    let again = db.store().await;
    assert_eq!(again.describe("k").await.unwrap().unwrap().max_id, 21);
    again.close().await;
}

async fn newer_schema_version_is_refused(db: TestDb) {
    db.store().await.close().await;
    // A newer idmint recorded version 99 of this table's schema.
    db.exec(&format!(
        "INSERT INTO {} (component, version, description, applied_at) \
         VALUES ('{}', 99, 'from the future', '2030-01-01 00:00:00')",
        idmint_sql::MIGRATIONS_TABLE,
        db.component()
    ))
    .await;

    let err = SqlSegmentStore::connect(db.config()).await.unwrap_err();
    match &err {
        SegmentError::Config(m) => assert!(m.contains("99") && m.contains("newer"), "{m}"),
        other => panic!("expected a configuration error, got {other}"),
    }

    // The typed error underneath.
    let table = Identifier::new(db.table.clone()).unwrap();
    let set = SqlSegmentStore::migrations(db.dialect, &table);
    let err = db.admin.migrate(&set).await.unwrap_err();
    assert!(
        matches!(
            &err,
            idmint_sql::Error::SchemaTooNew { component, recorded: 99, known: 3 }
                if *component == db.component()
        ),
        "{err}"
    );
}

/// The shared-database test: allocators on separate pools (as separate servers would
/// be) share one database; 4 tasks each take IDs of two keys, singly and in
/// batches, 1,000,000 IDs per key in total. No ID is issued twice, each task
/// sees strictly increasing IDs per key, and every ID honours the key's
/// delta/remainder.
async fn allocators_on_separate_pools_issue_a_million_unique_ids_per_key(db: TestDb) {
    const ALLOCATORS: usize = 2;
    const TASKS: usize = 4;
    const IDS_PER_KEY: u64 = 1_000_000;
    const PER_TASK: u64 = IDS_PER_KEY / (ALLOCATORS * TASKS) as u64;
    // (key, step, delta, remainder)
    const KEYS: [(&str, u64, u64, u64); 2] = [("orders", 1000, 1, 0), ("payments", 900, 3, 1)];

    let setup = db.store().await;
    for (key, step, delta, remainder) in KEYS {
        setup
            .create(&NewKey::new(key, step).with_delta(delta, remainder))
            .await
            .unwrap();
    }
    setup.close().await;

    // A small step cap, so the run leases many segments (a few hundred)
    // rather than a handful.
    let config = SegmentConfig::new().with_max_step(16_000);
    let mut allocators = Vec::new();
    let mut preloaders = Vec::new();
    for _ in 0..ALLOCATORS {
        let allocator = SegmentAllocator::new(db.store().await, config).unwrap();
        preloaders.push(allocator.spawn_preloader());
        allocators.push(allocator);
    }

    let mut handles = Vec::new();
    for (a, allocator) in allocators.iter().enumerate() {
        for task in 0..TASKS {
            let allocator = allocator.clone();
            handles.push(tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed((a * TASKS + task) as u64);
                let mut taken: Vec<Vec<u64>> = KEYS
                    .iter()
                    .map(|_| Vec::with_capacity(PER_TASK as usize))
                    .collect();
                while taken.iter().any(|ids| (ids.len() as u64) < PER_TASK) {
                    for (k, (key, ..)) in KEYS.iter().enumerate() {
                        let left = PER_TASK - taken[k].len() as u64;
                        if left == 0 {
                            continue;
                        }
                        if rng.bool() {
                            let id = allocator.next_id(key).await.unwrap();
                            taken[k].push(id.get());
                        } else {
                            let n = rng.u64(1..=2_000).min(left);
                            let batch = allocator.next_ids(key, n).await.unwrap();
                            assert_eq!(batch.len(), n);
                            taken[k].extend(batch.iter().map(|id| id.get()));
                        }
                    }
                }
                for (k, ids) in taken.iter().enumerate() {
                    for w in ids.windows(2) {
                        assert!(
                            w[0] < w[1],
                            "allocator {a} task {task} key {}: {} then {}",
                            KEYS[k].0,
                            w[0],
                            w[1]
                        );
                    }
                }
                taken
            }));
        }
    }
    let mut per_key: Vec<Vec<u64>> = vec![Vec::new(); KEYS.len()];
    for h in handles {
        for (k, ids) in h.await.unwrap().into_iter().enumerate() {
            per_key[k].extend(ids);
        }
    }
    drop(preloaders);

    for (k, mut ids) in per_key.into_iter().enumerate() {
        let (key, _, delta, remainder) = KEYS[k];
        assert_eq!(ids.len() as u64, IDS_PER_KEY, "{key}");
        assert!(
            ids.iter().all(|&id| id > 0 && id % delta == remainder),
            "{key}: an ID outside {delta}n + {remainder}"
        );
        ids.sort_unstable();
        let dup = ids.windows(2).find(|w| w[0] == w[1]);
        assert!(dup.is_none(), "{key}: {dup:?} issued twice");
        // Everything issued lies below what the table records as leased.
        let stored = allocators[0].store().describe(key).await.unwrap().unwrap();
        assert!(*ids.last().unwrap() < stored.max_id, "{key}: {stored:?}");
    }
}

// ---- Floors, raise and the epoch marker ----

async fn a_lease_above_a_floor_is_refused_below_it_and_changes_nothing(db: TestDb) {
    let store = db.store().await;
    store.create(&NewKey::new("k", 10)).await.unwrap();
    let g = store.fetch_above("k", None, 0).await.unwrap();
    assert_eq!((g.start(), g.max_id), (1, 11));
    for step in [None, Some(7)] {
        let err = store.fetch_above("k", step, 50).await.unwrap_err();
        assert!(
            matches!(
                &err,
                SegmentError::KeyBelowFloor { key, floor: 50, found: Some(11), .. } if key == "k"
            ),
            "{err}"
        );
        assert_eq!(err.code(), "key_below_floor");
    }
    assert_eq!(store.describe("k").await.unwrap().unwrap().max_id, 11);
    // At the floor exactly: the segment starts there.
    let g = store.fetch_above("k", Some(5), 11).await.unwrap();
    assert_eq!((g.start(), g.max_id), (11, 16));
    // A missing key is "not found"; the allocator decides what that means.
    let err = store.fetch_above("gone", None, 50).await.unwrap_err();
    assert!(matches!(err, SegmentError::NotFound { .. }), "{err}");
    store.close().await;
}

async fn raise_creates_raises_and_never_lowers(db: TestDb) {
    let store = db.store().await;
    let created = store
        .raise(&NewKey::new("order", 100).with_start(251))
        .await
        .unwrap();
    assert_eq!((created.max_id, created.step), (251, 100));
    let lower = store
        .raise(&NewKey::new("order", 5).with_start(7))
        .await
        .unwrap();
    assert_eq!((lower.max_id, lower.step), (251, 100), "never lowered");
    assert_eq!(store.fetch("order", None).await.unwrap().start(), 251);
    let raised = store
        .raise(&NewKey::new("order", 100).with_start(10_000))
        .await
        .unwrap();
    assert_eq!(raised.max_id, 10_000);
    assert_eq!(store.fetch("order", None).await.unwrap().start(), 10_000);
    // Concurrent raises of a missing key from two pools: one row, the higher.
    let other = db.store().await;
    let (low, high) = (
        NewKey::new("race", 10).with_start(500),
        NewKey::new("race", 10).with_start(900),
    );
    let (x, y) = tokio::join!(store.raise(&low), other.raise(&high));
    x.unwrap();
    y.unwrap();
    assert_eq!(store.describe("race").await.unwrap().unwrap().max_id, 900);
    let bad = store.raise(&NewKey::new("bad", 0).with_start(5)).await;
    assert_eq!(bad.unwrap_err().code(), "invalid_spec");
    store.close().await;
    other.close().await;
}

async fn the_epoch_is_written_once_and_read_by_every_pool(db: TestDb) {
    let (store, other) = (db.store().await, db.store().await);
    assert!(store.keeps_epoch());
    assert_eq!(store.epoch().await.unwrap(), None);
    let (a, b) = (StoreEpoch::generate(), StoreEpoch::generate());
    let (x, y) = tokio::join!(store.init_epoch(&a), other.init_epoch(&b));
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x, y, "both get the marker that won");
    assert!(x == a || x == b);
    assert_eq!(store.init_epoch(&StoreEpoch::generate()).await.unwrap(), x);
    assert_eq!(other.epoch().await.unwrap(), Some(x));
    // A database recreated (or a table restored without its marker) has none.
    db.exec(&format!(
        "DELETE FROM idmint_segment_epochs WHERE segment_table = '{}'",
        db.table
    ))
    .await;
    assert_eq!(store.epoch().await.unwrap(), None);
    store.close().await;
    other.close().await;
}

/// A node with floors on the table, which is then restored from a backup
/// taken before its last leases (`max_id` set back): the restarted node
/// refuses to start, the running one refuses to lease, and nothing in the
/// table moves until it is raised.
async fn a_node_with_floors_refuses_a_restored_table_until_raised(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let declared = ["order".to_owned()];
    let open = |store: SqlSegmentStore| {
        SegmentAllocator::new(store, SegmentConfig::new())
            .unwrap()
            .with_floors(Arc::new(FloorFile::open(dir.path()).unwrap()))
            .unwrap()
    };
    let allocator = open(db.store().await);
    allocator.check_floors(&declared).await.unwrap();
    allocator
        .create_key(NewKey::new("order", 100))
        .await
        .unwrap();
    let before = allocator.next_ids("order", 250).await.unwrap();
    let last = before.last().unwrap().get();
    let floor = allocator.floors().unwrap().floor("order").unwrap();
    assert!(floor > last);

    let t = &db.table;
    db.exec(&format!(
        "UPDATE {t} SET max_id = 101 WHERE biz_tag = 'order'"
    ))
    .await;
    let err = loop {
        match allocator.next_id("order").await {
            Ok(id) => assert!(id.get() < floor, "only what was leased before"),
            Err(err) => break err,
        }
    };
    assert!(
        matches!(
            err,
            SegmentError::KeyBelowFloor {
                found: Some(101),
                ..
            }
        ),
        "{err}"
    );
    drop(allocator);

    let allocator = open(db.store().await);
    let err = allocator.check_floors(&declared).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::KeyBelowFloor { found: Some(101), floor: f, .. } if f == floor),
        "{err}"
    );
    let max_id = db
        .scalar_i64(
            &db.dialect
                .placeholders(&format!("SELECT max_id FROM {t} WHERE biz_tag = 'order'")),
        )
        .await;
    assert_eq!(max_id, 101, "the refusals changed nothing");

    allocator
        .store()
        .raise(&NewKey::new("order", 100).with_start(floor))
        .await
        .unwrap();
    allocator.check_floors(&declared).await.unwrap();
    let after = allocator.next_id("order").await.unwrap().get();
    assert!(after >= floor, "{after} below the floor {floor}");
}

async fn a_leaf_table_keeps_no_epoch_but_honours_floors(db: TestDb) {
    let t = &db.table;
    db.exec(&leaf_ddl(db.dialect, t)).await;
    db.exec(&format!(
        "INSERT INTO {t} (biz_tag, max_id, step) VALUES ('leaf', 1001, 1000)"
    ))
    .await;
    let store = SqlSegmentStore::connect(db.config().with_schema(TableSchema::Leaf))
        .await
        .unwrap();
    assert!(!store.keeps_epoch());
    assert_eq!(store.epoch().await.unwrap(), None);
    assert_eq!(
        store
            .init_epoch(&StoreEpoch::generate())
            .await
            .unwrap_err()
            .code(),
        "invalid_config"
    );
    let err = store.fetch_above("leaf", None, 5000).await.unwrap_err();
    assert!(
        matches!(
            err,
            SegmentError::KeyBelowFloor {
                found: Some(1001),
                ..
            }
        ),
        "{err}"
    );
    let raised = store
        .raise(&NewKey::new("leaf", 1000).with_start(5000))
        .await
        .unwrap();
    assert_eq!(raised.max_id, 5000);
    let g = store.fetch_above("leaf", None, 5000).await.unwrap();
    assert_eq!((g.start(), g.max_id), (5000, 6000));
    store.close().await;
}

/// The ledger (issue 32, item 10): a row deleted by hand is never created
/// again from its start, by a config's declared key or the admin API
/// (`key_forgotten`), from any pool; `raise` brings it back above. Rows made
/// by hand enter the ledger at `remember_keys` (every start), and rows from
/// before the ledger existed at the migration that made it.
async fn a_key_the_table_lost_is_never_created_again_from_its_start(db: TestDb) {
    let (store, other) = (db.store().await, db.store().await);
    assert!(store.keeps_ledger());
    store.create(&NewKey::new("order", 100)).await.unwrap();
    let issued = store.fetch("order", None).await.unwrap();
    assert_eq!(issued.start(), 1);
    db.exec(&format!("DELETE FROM {} WHERE biz_tag = 'order'", db.table))
        .await;
    for s in [&store, &other] {
        let error = s.create(&NewKey::new("order", 100)).await.unwrap_err();
        assert_eq!(error.code(), "key_forgotten", "{error}");
        assert!(
            error.to_string().contains("idmint segment raise order"),
            "{error}"
        );
    }
    assert_eq!(
        store.describe("order").await.unwrap(),
        None,
        "nothing created"
    );
    // An existing row is still "exists", not "forgotten".
    store.create(&NewKey::new("kept", 10)).await.unwrap();
    let exists = other.create(&NewKey::new("kept", 10)).await.unwrap_err();
    assert_eq!(exists.code(), "key_exists", "{exists}");
    // The way back: a raise, above what was issued.
    let raised = store
        .raise(&NewKey::new("order", 100).with_start(issued.max_id))
        .await
        .unwrap();
    assert_eq!(raised.max_id, issued.max_id);
    assert!(store.fetch("order", None).await.unwrap().start() >= issued.max_id);

    // A row written by hand, as Leaf's users do, joins the ledger at the
    // next start's remember_keys; deleted then, it is refused too.
    let (insert, delete) = (
        format!(
            "INSERT INTO {} (biz_tag, max_id, step, description) VALUES ('by_hand', 1, 10, NULL)",
            db.table
        ),
        format!("DELETE FROM {} WHERE biz_tag = 'by_hand'", db.table),
    );
    db.exec(&insert).await;
    store.remember_keys().await.unwrap();
    other.remember_keys().await.unwrap();
    db.exec(&delete).await;
    assert_eq!(
        other
            .create(&NewKey::new("by_hand", 10))
            .await
            .unwrap_err()
            .code(),
        "key_forgotten"
    );
    // Concurrent creates of a new key: one wins, the other sees it exists.
    let new = NewKey::new("new", 10);
    let (x, y) = tokio::join!(store.create(&new), other.create(&new));
    let codes: Vec<&str> = [&x, &y]
        .iter()
        .map(|r| r.as_ref().map_or_else(|e| e.code(), |_| "ok"))
        .collect();
    assert!(
        codes.contains(&"ok") && codes.contains(&"key_exists"),
        "{codes:?}"
    );
    store.close().await;
    other.close().await;
}
