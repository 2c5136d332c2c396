//! The SQL store on Didi Tinyid's own tables (`TableSchema::Tinyid`), on
//! MariaDB (the database Tinyid supports), with Tinyid's DDL and sample rows,
//! and beside a simulated Tinyid server taking segments from the same rows.
//!
//! Each test gets a database of its own: Tinyid's table names are fixed
//! (`tiny_id_token` is not configurable in Tinyid), so a fresh table name is
//! not enough to keep concurrent runs apart.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use idmint_segment::sql::{SqlSegmentStore, SqlStoreConfig, TableSchema, TinyidToken};
use idmint_segment::{
    MAX_ID, NewKey, SegmentAllocator, SegmentConfig, SegmentError, SegmentGrant, SegmentStore,
};
use sqlx::mysql::MySqlPool;

use crate::support::{self, MYSQL_URL};
use idmint_testkit::tinyid::{self, DB_SQL as TINYID_DB_SQL};

/// A database of its own on the shared MariaDB, holding Tinyid's tables and
/// sample rows; dropped by [`TinyidDb::drop_database`].
struct TinyidDb {
    name: String,
    url: String,
    pool: MySqlPool,
    server: MySqlPool,
}

impl TinyidDb {
    /// `None` (after `require_service`) when MariaDB can't be reached.
    async fn new() -> Option<TinyidDb> {
        let server =
            match tokio::time::timeout(Duration::from_secs(3), MySqlPool::connect(MYSQL_URL)).await
            {
                Ok(Ok(pool)) => pool,
                _ => {
                    support::require_service("MariaDB", false);
                    return None;
                }
            };
        let name = format!("tinyid_test_{:016x}", fastrand::u64(..));
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&server)
            .await
            .unwrap();
        let base = MYSQL_URL.rsplit_once('/').unwrap().0;
        let url = format!("{base}/{name}");
        let pool = MySqlPool::connect(&url).await.unwrap();
        for statement in TINYID_DB_SQL {
            sqlx::raw_sql(statement).execute(&pool).await.unwrap();
        }
        Some(TinyidDb {
            name,
            url,
            pool,
            server,
        })
    }

    fn config(&self) -> SqlStoreConfig {
        SqlStoreConfig::new(self.url.clone()).with_schema(TableSchema::Tinyid)
    }

    async fn store(&self) -> SqlSegmentStore {
        SqlSegmentStore::connect(self.config()).await.unwrap()
    }

    /// `max_id, version` of `biz_type`'s row.
    async fn row(&self, biz_type: &str) -> (i64, i64) {
        sqlx::query_as("SELECT max_id, version FROM tiny_id_info WHERE biz_type = ?")
            .bind(biz_type)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    async fn drop_database(self) {
        self.pool.close().await;
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {}", self.name))
            .execute(&self.server)
            .await
            .unwrap();
        self.server.close().await;
    }
}

/// A segment as a Tinyid server takes it: the numbers `(old, new]`.
#[derive(Debug, Clone, Copy)]
pub struct TinyidLease {
    pub old_max: i64,
    pub new_max: i64,
    pub delta: i64,
    pub remainder: i64,
}

/// Tinyid's `DbSegmentIdServiceImpl.getNextSegmentId`, re-implemented:
/// `queryByBizType`, `newMaxId = max_id + step`, `updateMaxId` (the
/// optimistic lock on `id`, `max_id`, `version`), again on a lost race. Each
/// statement commits on its own. (Tinyid wraps the loop in one
/// `@Transactional`; under InnoDB's REPEATABLE READ its re-reads then see the
/// first read's snapshot, so a lost race there is lost on every retry. That
/// only makes Tinyid fail more, never overlap; this loop retries for real.)
pub async fn tinyid_get_next_segment(pool: &MySqlPool, biz_type: &str) -> (TinyidLease, u32) {
    for lost in 0.. {
        let (id, max_id, step, delta, remainder, version): (i64, i64, i32, i32, i32, i64) =
            sqlx::query_as(tinyid::QUERY_BY_BIZ_TYPE)
                .bind(biz_type)
                .fetch_one(pool)
                .await
                .unwrap();
        let new_max = max_id + i64::from(step);
        let updated = sqlx::query(tinyid::UPDATE_MAX_ID)
            .bind(new_max)
            .bind(id)
            .bind(max_id)
            .bind(version)
            .bind(biz_type)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected();
        if updated == 1 {
            let lease = TinyidLease {
                old_max: max_id,
                new_max,
                delta: i64::from(delta),
                remainder: i64::from(remainder),
            };
            return (lease, lost);
        }
    }
    unreachable!()
}

async fn with_db<F, Fut>(body: F)
where
    F: FnOnce(Arc<TinyidDb>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(db) = TinyidDb::new().await else {
        return;
    };
    let db = Arc::new(db);
    body(db.clone()).await;
    let db = Arc::into_inner(db).expect("the test let go of the database");
    db.drop_database().await;
}

/// Tinyid's sample rows lease as Tinyid leases them: `(max_id, max_id +
/// step]`, version bumped, delta/remainder carried.
#[tokio::test]
async fn tinyid_sample_rows_lease_as_tinyid_does() {
    with_db(|db| async move {
        let store = db.store().await;
        assert_eq!(store.schema(), TableSchema::Tinyid);
        assert_eq!(store.table(), "tiny_id_info");

        // Row `test`: max_id 1, step 100000, version 1. Tinyid's first
        // segment is (1, 100001]: IDs 2..=100001.
        let g = store.fetch("test", None).await.unwrap();
        assert_eq!(
            g,
            SegmentGrant {
                max_id: 100_002,
                step: 100_000,
                delta: 1,
                remainder: 0
            }
        );
        assert_eq!(g.start(), 2);
        assert_eq!(db.row("test").await, (100_001, 2));

        // Row `test_odd`: delta 2, remainder 1, version 3.
        let g = store.fetch("test_odd", None).await.unwrap();
        assert_eq!(
            (g.start(), g.max_id, g.delta, g.remainder),
            (2, 100_002, 2, 1)
        );
        assert_eq!(db.row("test_odd").await, (100_001, 4));

        // A given step (the allocator's dynamic step) moves max_id by it.
        let g = store.fetch("test", Some(7)).await.unwrap();
        assert_eq!((g.start(), g.max_id), (100_002, 100_009));
        assert_eq!(db.row("test").await, (100_008, 3));

        // describe: where the next segment starts, the row's own step.
        let info = store.describe("test").await.unwrap().unwrap();
        assert_eq!((info.max_id, info.step, info.delta), (100_009, 100_000, 1));
        assert!(info.updated.is_some());
        let odd = store.describe("test_odd").await.unwrap().unwrap();
        assert_eq!((odd.delta, odd.remainder), (2, 1));
        assert!(store.describe("nope").await.unwrap().is_none());
        let listed: Vec<String> = store
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|k| k.key)
            .collect();
        assert_eq!(listed, ["test", "test_odd"]);

        // Unknown keys are a typed not-found, and change nothing.
        let err = store.fetch("nope", None).await.unwrap_err();
        assert!(matches!(err, SegmentError::NotFound { .. }), "{err}");

        // Tinyid's tokens.
        let tokens = store.tinyid_tokens().await.unwrap();
        let token = "0f673adf80504e2eaa552f5d791b644c".to_owned();
        assert_eq!(
            tokens,
            [
                TinyidToken {
                    token: token.clone(),
                    biz_type: "test".to_owned()
                },
                TinyidToken {
                    token,
                    biz_type: "test_odd".to_owned()
                },
            ]
        );
        store.close().await;
    })
    .await;
}

/// Keys created through idmint are Tinyid rows Tinyid can serve: `begin_id
/// = max_id = start − 1`, version 0; and what a Tinyid row can't hold is refused.
#[tokio::test]
async fn tinyid_keys_are_created_as_tinyid_rows() {
    with_db(|db| async move {
        let store = db.store().await;
        let info = store
            .create(&NewKey::new("orders", 1000).with_start(5).with_delta(3, 2))
            .await
            .unwrap();
        assert_eq!(
            (info.max_id, info.step, info.delta, info.remainder),
            (5, 1000, 3, 2)
        );
        let (begin_id, max_id, version): (i64, i64, i64) = sqlx::query_as(
            "SELECT begin_id, max_id, version FROM tiny_id_info WHERE biz_type = 'orders'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!((begin_id, max_id, version), (4, 4, 0));
        // Tinyid would hand out (4, 1004]; so does the store.
        let g = store.fetch("orders", None).await.unwrap();
        assert_eq!((g.start(), g.max_id), (5, 1005));

        let err = store.create(&NewKey::new("orders", 10)).await.unwrap_err();
        assert!(matches!(err, SegmentError::KeyExists { .. }), "{err}");
        let err = store
            .create(&NewKey::new("k".repeat(64), 10))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("63"), "{err}");
        let err = store
            .create(&NewKey::new("big", u64::from(u32::MAX)))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("INT step"), "{err}");
        let err = store
            .create(&NewKey::new("described", 10).with_description("x"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("description"), "{err}");
        assert!(store.describe("big").await.unwrap().is_none());
        store.close().await;
    })
    .await;
}

/// Bad rows and the 2^63 − 1 end are typed errors that change nothing.
#[tokio::test]
async fn tinyid_bad_rows_and_the_end_change_nothing() {
    with_db(|db| async move {
        let store = db.store().await;
        let near_end = MAX_ID as i64 - 50;
        sqlx::raw_sql(&format!(
            "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder) \
             VALUES ('end', 0, {near_end}, 100, 1, 0), ('nostep', 1, 1, NULL, 1, 0), \
             ('badrem', 1, 1, 10, 2, 2)"
        ))
        .execute(&db.pool)
        .await
        .unwrap();
        let err = store.fetch("end", None).await.unwrap_err();
        assert!(matches!(err, SegmentError::Exhausted { .. }), "{err}");
        assert_eq!(db.row("end").await, (near_end, 0));
        for key in ["nostep", "badrem"] {
            let err = store.fetch(key, None).await.unwrap_err();
            assert!(err.to_string().contains("fix it by hand"), "{key}: {err}");
            assert_eq!(db.row(key).await, (1, 0), "{key}");
        }
        store.close().await;
    })
    .await;
}

/// A floor refuses a Tinyid row below it without touching the row (not even
/// its version), and a raise moves the row with Tinyid's compare-and-swap.
#[tokio::test]
async fn tinyid_rows_honour_floors_and_raise_as_tinyid_writes() {
    with_db(|db| async move {
        let store = db.store().await;
        assert!(!store.keeps_epoch());
        sqlx::raw_sql(
            "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder) \
             VALUES ('f', 0, 100, 10, 1, 0)",
        )
        .execute(&db.pool)
        .await
        .unwrap();
        // The next segment starts at 101.
        let err = store.fetch_above("f", None, 102).await.unwrap_err();
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
        assert_eq!(db.row("f").await, (100, 0), "nothing changed");
        let g = store.fetch_above("f", None, 101).await.unwrap();
        assert_eq!((g.start(), g.max_id), (101, 111));
        assert_eq!(db.row("f").await, (110, 1));

        let raised = store
            .raise(&NewKey::new("f", 10).with_start(5_001))
            .await
            .unwrap();
        assert_eq!(raised.max_id, 5_001, "the next start");
        assert_eq!(
            db.row("f").await,
            (5_000, 2),
            "Tinyid's max_id, version bumped"
        );
        let unchanged = store
            .raise(&NewKey::new("f", 10).with_start(7))
            .await
            .unwrap();
        assert_eq!(unchanged.max_id, 5_001, "never lowered");
        assert_eq!(db.row("f").await, (5_000, 2));
        let created = store
            .raise(&NewKey::new("g", 10).with_start(300))
            .await
            .unwrap();
        assert_eq!(created.max_id, 300);
        assert_eq!(store.fetch("g", None).await.unwrap().start(), 300);
        store.close().await;
    })
    .await;
}

/// Without Tinyid's table the store refuses to start, naming it.
#[tokio::test]
async fn tinyid_schema_needs_tinyid_table() {
    with_db(|db| async move {
        sqlx::raw_sql("DROP TABLE tiny_id_info")
            .execute(&db.pool)
            .await
            .unwrap();
        let err = SqlSegmentStore::connect(db.config()).await.unwrap_err();
        assert!(matches!(err, SegmentError::Config(_)), "{err}");
        assert!(err.to_string().contains("tiny_id_info"), "{err}");
    })
    .await;
}

/// idmint's allocator and simulated Tinyid servers take segments from the
/// same rows at once: no number is in two segments, and each side issues
/// only from its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tinyid_servers_and_idmint_share_rows_without_overlap() {
    with_db(|db| async move {
        // Small steps so the rows move often and races are many.
        sqlx::raw_sql("UPDATE tiny_id_info SET step = 100")
            .execute(&db.pool)
            .await
            .unwrap();
        let store = db.store().await;
        let allocator = Arc::new(
            SegmentAllocator::new(
                store,
                SegmentConfig::new()
                    .with_max_step(100)
                    .with_preload_share(0.2),
            )
            .unwrap(),
        );
        let mut tasks = Vec::new();
        for t in 0..4 {
            let pool = db.pool.clone();
            tasks.push(tokio::spawn(async move {
                let biz_type = if t % 2 == 0 { "test" } else { "test_odd" };
                let mut ids = Vec::new();
                let mut lost = 0;
                for _ in 0..40 {
                    let (lease, l) = tinyid_get_next_segment(&pool, biz_type).await;
                    lost += l;
                    ids.extend(
                        (lease.old_max + 1..=lease.new_max)
                            .filter(|id| id % lease.delta == lease.remainder)
                            .map(|id| (biz_type, id as u64)),
                    );
                }
                (ids, lost)
            }));
        }
        let mut idmint_tasks = Vec::new();
        for t in 0..4 {
            let allocator = allocator.clone();
            idmint_tasks.push(tokio::spawn(async move {
                let biz_type = if t % 2 == 0 { "test" } else { "test_odd" };
                let mut ids = Vec::new();
                for _ in 0..40 {
                    let batch = allocator.next_ids(biz_type, 100).await.unwrap();
                    ids.extend(batch.iter().map(|id| (biz_type, id.get())));
                }
                ids
            }));
        }
        let mut seen = HashSet::new();
        let mut races = 0;
        let mut n_tinyid = 0;
        for task in tasks {
            let (ids, lost) = task.await.unwrap();
            races += lost;
            n_tinyid += ids.len();
            for id in ids {
                assert!(seen.insert(id), "{id:?} issued twice");
            }
        }
        let mut idmint_ids = Vec::new();
        for task in idmint_tasks {
            idmint_ids.push(task.await.unwrap());
        }
        let (max_test, _) = db.row("test").await;
        let (max_odd, _) = db.row("test_odd").await;
        let mut n_idmint = 0;
        for ids in idmint_ids {
            n_idmint += ids.len();
            for (key, id) in ids {
                if key == "test_odd" {
                    assert_eq!(id % 2, 1, "{id} is not odd");
                }
                // Every number up to the row's max_id is in exactly one
                // lease; not in a Tinyid one (below), it is in idmint's.
                let max = if key == "test" { max_test } else { max_odd };
                assert!(
                    id >= 2 && id <= max as u64,
                    "{key} {id} is outside every lease"
                );
                assert!(seen.insert((key, id)), "{key} {id} issued twice");
            }
        }
        assert_eq!(n_idmint, 4 * 40 * 100);
        assert!(n_tinyid >= 2 * 40 * 100, "{n_tinyid}");
        // Every lease bumped the version once: the rows' versions count them.
        let (_, v_test) = db.row("test").await;
        let (_, v_odd) = db.row("test_odd").await;
        assert!(v_test > 1 + 80 && v_odd > 3 + 80, "{v_test} {v_odd}");
        eprintln!(
            "tinyid sharing: {n_tinyid} IDs by simulated Tinyid ({races} lost races), \
             {n_idmint} by idmint"
        );
    })
    .await;
}

/// Tinyid's tables as they would be on PostgreSQL and SQLite (Tinyid itself
/// ships MySQL DDL only): the same columns and types, in each database's words.
fn portable_ddl(dialect: idmint_sql::Dialect) -> [&'static str; 2] {
    match dialect {
        idmint_sql::Dialect::Postgres => [
            "CREATE TABLE tiny_id_info (
                id BIGSERIAL PRIMARY KEY,
                biz_type VARCHAR(63) NOT NULL DEFAULT '' UNIQUE,
                begin_id BIGINT NOT NULL DEFAULT 0,
                max_id BIGINT NOT NULL DEFAULT 0,
                step INT DEFAULT 0,
                delta INT NOT NULL DEFAULT 1,
                remainder INT NOT NULL DEFAULT 0,
                create_time TIMESTAMP NOT NULL DEFAULT '2010-01-01 00:00:00',
                update_time TIMESTAMP NOT NULL DEFAULT '2010-01-01 00:00:00',
                version BIGINT NOT NULL DEFAULT 0)",
            "CREATE TABLE tiny_id_token (
                id SERIAL PRIMARY KEY,
                token VARCHAR(255) NOT NULL DEFAULT '',
                biz_type VARCHAR(63) NOT NULL DEFAULT '',
                remark VARCHAR(255) NOT NULL DEFAULT '',
                create_time TIMESTAMP NOT NULL DEFAULT '2010-01-01 00:00:00',
                update_time TIMESTAMP NOT NULL DEFAULT '2010-01-01 00:00:00')",
        ],
        _ => [
            "CREATE TABLE tiny_id_info (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                biz_type VARCHAR(63) NOT NULL DEFAULT '' UNIQUE,
                begin_id BIGINT NOT NULL DEFAULT 0,
                max_id BIGINT NOT NULL DEFAULT 0,
                step INT DEFAULT 0,
                delta INT NOT NULL DEFAULT 1,
                remainder INT NOT NULL DEFAULT 0,
                create_time TIMESTAMP NOT NULL DEFAULT '2010-01-01 00:00:00',
                update_time TIMESTAMP NOT NULL DEFAULT '2010-01-01 00:00:00',
                version BIGINT NOT NULL DEFAULT 0)",
            "CREATE TABLE tiny_id_token (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                token VARCHAR(255) NOT NULL DEFAULT '',
                biz_type VARCHAR(63) NOT NULL DEFAULT '',
                remark VARCHAR(255) NOT NULL DEFAULT '',
                create_time TIMESTAMP NOT NULL DEFAULT '2010-01-01 00:00:00',
                update_time TIMESTAMP NOT NULL DEFAULT '2010-01-01 00:00:00')",
        ],
    }
}

/// The Tinyid schema's statements are plain SQL: the same leases, keys and
/// tokens on PostgreSQL and SQLite.
async fn tinyid_schema_on(dialect: idmint_sql::Dialect) {
    use idmint_sql::{ConnectOptions, Database, on_pool};
    let (url, admin_url, name, _dir) = match dialect {
        idmint_sql::Dialect::Postgres => {
            let name = format!("tinyid_test_{:016x}", fastrand::u64(..));
            let base = support::POSTGRES_URL.rsplit_once('/').unwrap().0;
            (
                format!("{base}/{name}"),
                Some(support::POSTGRES_URL.to_owned()),
                name,
                None,
            )
        }
        _ => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("tinyid.db").display());
            (url, None, String::new(), Some(dir))
        }
    };
    let connect = |url: String| async move {
        let options = ConnectOptions::new(url)
            .with_max_connections(2)
            .with_connect_timeout(Duration::from_secs(3));
        Database::connect(&options).await
    };
    let server = match &admin_url {
        Some(admin_url) => match connect(admin_url.clone()).await {
            Ok(db) => {
                on_pool!(db.pool(), p => sqlx::raw_sql(&format!("CREATE DATABASE {name}")).execute(p).await.map(|_| ()))
                    .unwrap();
                Some(db)
            }
            Err(_) => {
                support::require_service("PostgreSQL", false);
                return;
            }
        },
        None => None,
    };
    let db = connect(url.clone()).await.unwrap();
    let mut statements: Vec<String> = portable_ddl(dialect)
        .iter()
        .map(|s| s.to_string())
        .collect();
    statements.push(
        "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version) \
         VALUES ('test', 1, 1, 100000, 1, 0, 1), ('test_odd', 1, 1, 100000, 2, 1, 3)"
            .to_owned(),
    );
    statements.push("INSERT INTO tiny_id_token (token, biz_type) VALUES ('tk', 'test')".to_owned());
    for sql in &statements {
        on_pool!(db.pool(), p => sqlx::raw_sql(sql).execute(p).await.map(|_| ()))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    let store =
        SqlSegmentStore::connect(SqlStoreConfig::new(url.clone()).with_schema(TableSchema::Tinyid))
            .await
            .unwrap();
    let g = store.fetch("test", None).await.unwrap();
    assert_eq!(
        (g.start(), g.max_id, g.step),
        (2, 100_002, 100_000),
        "{dialect}"
    );
    let g = store.fetch("test_odd", Some(10)).await.unwrap();
    assert_eq!(
        (g.start(), g.max_id, g.delta, g.remainder),
        (2, 12, 2, 1),
        "{dialect}"
    );
    let info = store.describe("test").await.unwrap().unwrap();
    assert_eq!(info.max_id, 100_002, "{dialect}");
    let created = store
        .create(&NewKey::new("orders", 50).with_start(10))
        .await
        .unwrap();
    assert_eq!(created.max_id, 10, "{dialect}");
    let g = store.fetch("orders", None).await.unwrap();
    assert_eq!((g.start(), g.max_id), (10, 60), "{dialect}");
    let err = store.create(&NewKey::new("orders", 50)).await.unwrap_err();
    assert!(
        matches!(err, SegmentError::KeyExists { .. }),
        "{dialect}: {err}"
    );
    let tokens = store.tinyid_tokens().await.unwrap();
    assert_eq!(tokens.len(), 1, "{dialect}");
    let version: i64 = on_pool!(db.pool(), p => {
        sqlx::query_scalar("SELECT version FROM tiny_id_info WHERE biz_type = 'test'").fetch_one(p).await
    })
    .unwrap();
    assert_eq!(version, 2, "{dialect}");
    store.close().await;
    db.close().await;
    if let Some(server) = server {
        on_pool!(server.pool(), p => sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(p).await.map(|_| ()))
            .unwrap();
        server.close().await;
    }
}

#[tokio::test]
async fn tinyid_schema_on_postgres() {
    tinyid_schema_on(idmint_sql::Dialect::Postgres).await;
}

#[tokio::test]
async fn tinyid_schema_on_sqlite() {
    tinyid_schema_on(idmint_sql::Dialect::Sqlite).await;
}
