//! Migrations on PostgreSQL and MariaDB: once, in order, under the lock,
//! refusing newer schemas.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idmint_sql::{ConnectOptions, Database, Dialect, Error, MigrationSet, Pool};

use crate::support::{self, exec, unique_name};

/// Three steps on a table of its own: create, add a column, insert a row
/// (the insert shows a step that ran twice).
fn steps(dialect: Dialect, table: &str) -> MigrationSet {
    let _ = dialect;
    MigrationSet::new(format!("test:{table}"))
        .with_migration(
            1,
            "create",
            [format!(
                "CREATE TABLE IF NOT EXISTS {table} (k VARCHAR(16) PRIMARY KEY)"
            )],
        )
        .with_migration(
            2,
            "add v",
            [format!("ALTER TABLE {table} ADD COLUMN v BIGINT NULL")],
        )
        .with_migration(
            3,
            "seed",
            [format!("INSERT INTO {table} (k, v) VALUES ('seed', 1)")],
        )
}

async fn count(db: &Database, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    idmint_sql::on_pool!(db.pool(), p => sqlx::query_scalar::<_, i64>(&sql).fetch_one(p).await)
        .unwrap()
}

async fn cleanup(db: &Database, table: &str) {
    exec(db, &format!("DROP TABLE IF EXISTS {table}")).await;
    exec(
        db,
        &format!(
            "DELETE FROM {} WHERE component = 'test:{table}'",
            idmint_sql::MIGRATIONS_TABLE
        ),
    )
    .await;
}

async fn concurrent_migrations_apply_each_step_once(dialect: Dialect) {
    let mut dbs = Vec::new();
    for _ in 0..4 {
        let Some(db) = support::connect(dialect, |o| o.with_max_connections(2)).await else {
            return;
        };
        dbs.push(db);
    }
    let table = unique_name("mig");
    let set = steps(dialect, &table);
    let handles: Vec<_> = dbs
        .iter()
        .map(|db| {
            let (db, set) = (db.clone(), set.clone());
            tokio::spawn(async move { db.migrate(&set).await })
        })
        .collect();
    let mut applied = Vec::new();
    for h in handles {
        let r = h.await.unwrap().unwrap();
        assert_eq!(r.version, 3);
        applied.extend(r.applied);
    }
    applied.sort_unstable();
    assert_eq!(
        applied,
        [1, 2, 3],
        "each step applied by exactly one caller"
    );
    assert_eq!(count(&dbs[0], &table).await, 1, "the seed step ran once");
    let recorded: Vec<i64> = dbs[1]
        .applied_migrations(set.component())
        .await
        .unwrap()
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(recorded, [1, 2, 3]);
    // Again: nothing to do.
    assert!(dbs[2].migrate(&set).await.unwrap().applied.is_empty());
    cleanup(&dbs[0], &table).await;
}

async fn failed_step_is_reported_and_not_recorded(dialect: Dialect) {
    let Some(db) = support::connect(dialect, |o| o).await else {
        return;
    };
    let table = unique_name("mig");
    let broken = MigrationSet::new(format!("test:{table}"))
        .with_migration(
            1,
            "create",
            [format!(
                "CREATE TABLE IF NOT EXISTS {table} (k VARCHAR(16) PRIMARY KEY)"
            )],
        )
        .with_migration(
            2,
            "broken",
            ["ALTER TABLE no_such_table_at_all ADD COLUMN v BIGINT"],
        );
    let err = db.migrate(&broken).await.unwrap_err();
    assert!(
        matches!(&err, Error::Migration { version: 2, description, .. } if description == "broken"),
        "{err}"
    );
    let recorded: Vec<i64> = db
        .applied_migrations(broken.component())
        .await
        .unwrap()
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(recorded, [1]);
    // The fixed binary carries on from step 2.
    let report = db.migrate(&steps(dialect, &table)).await.unwrap();
    assert_eq!(report.applied, [2, 3]);
    // The lock was released on the error path: another caller gets it at once.
    let other =
        MigrationSet::new(format!("test:{table}:other")).with_migration(1, "noop", ["SELECT 1"]);
    db.migrate(&other).await.unwrap();
    exec(
        &db,
        &format!(
            "DELETE FROM {} WHERE component = 'test:{table}:other'",
            idmint_sql::MIGRATIONS_TABLE
        ),
    )
    .await;
    cleanup(&db, &table).await;
}

async fn newer_schema_is_refused(dialect: Dialect) {
    let Some(db) = support::connect(dialect, |o| o).await else {
        return;
    };
    let table = unique_name("mig");
    db.migrate(&steps(dialect, &table)).await.unwrap();
    let older = MigrationSet::new(format!("test:{table}")).with_migration(
        1,
        "create",
        [format!(
            "CREATE TABLE IF NOT EXISTS {table} (k VARCHAR(16) PRIMARY KEY)"
        )],
    );
    let err = db.migrate(&older).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::SchemaTooNew {
                recorded: 3,
                known: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.is_transient() && !err.is_config());
    cleanup(&db, &table).await;
}

/// While another session holds the migration lock, `migrate` waits no longer
/// than its lock timeout, then succeeds once the lock is free.
async fn lock_wait_is_bounded(dialect: Dialect) {
    let Some(db) =
        support::connect(dialect, |o| o.with_lock_timeout(Duration::from_millis(300))).await
    else {
        return;
    };
    let table = unique_name("mig");
    let set = steps(dialect, &table);
    // The same lock as the crate's (its key is private; if it changes, this
    // test stops timing out and fails).
    match db.pool() {
        Pool::Postgres(p) => {
            let mut holder = p.acquire().await.unwrap();
            sqlx::query("SELECT pg_advisory_lock($1)")
                .bind(0x6964_6d69_6e74_i64)
                .execute(&mut *holder)
                .await
                .unwrap();
            let err = db.migrate(&set).await.unwrap_err();
            assert!(matches!(err, Error::Timeout { .. }), "{err}");
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(0x6964_6d69_6e74_i64)
                .execute(&mut *holder)
                .await
                .unwrap();
        }
        Pool::MySql(p) => {
            let mut holder = p.acquire().await.unwrap();
            sqlx::query("SELECT GET_LOCK('idmint_schema_migrations', 5)")
                .execute(&mut *holder)
                .await
                .unwrap();
            let err = db.migrate(&set).await.unwrap_err();
            assert!(matches!(err, Error::Timeout { .. }), "{err}");
            sqlx::query("SELECT RELEASE_LOCK('idmint_schema_migrations')")
                .execute(&mut *holder)
                .await
                .unwrap();
        }
        Pool::Sqlite(_) => unreachable!(),
    }
    assert_eq!(db.migrate(&set).await.unwrap().applied, [1, 2, 3]);
    cleanup(&db, &table).await;
}

/// A step whose table another session holds in a long transaction (an open
/// `BEGIN`, a dump) gives up at the lock timeout with [`Error::Timeout`],
/// and while it waits, other sessions' statements on the table are held up
/// about a second at a time, not for as long as the transaction lasts. Once
/// the transaction ends, the step applies.
async fn a_step_behind_a_long_transaction_gives_up_without_stalling_the_table(dialect: Dialect) {
    let lock_timeout = Duration::from_secs(4);
    let Some(db) = support::connect(dialect, |o| o.with_lock_timeout(lock_timeout)).await else {
        return;
    };
    // One connection each, so each pool's statements share one session.
    let one = |o: ConnectOptions| o.with_max_connections(1);
    let (Some(holder), Some(reader)) = (
        support::connect(dialect, one).await,
        support::connect(dialect, one).await,
    ) else {
        return;
    };
    let table = unique_name("mig");
    let set = steps(dialect, &table);
    let created = MigrationSet::new(set.component()).with_migration(
        1,
        "create",
        [format!(
            "CREATE TABLE IF NOT EXISTS {table} (k VARCHAR(16) PRIMARY KEY)"
        )],
    );
    db.migrate(&created).await.unwrap();
    exec(&holder, "BEGIN").await;
    assert_eq!(count(&holder, &table).await, 0);

    let stop = Arc::new(AtomicBool::new(false));
    let longest_read = tokio::spawn({
        let (stop, table) = (Arc::clone(&stop), table.clone());
        async move {
            let mut longest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                count(&reader, &table).await;
                longest = longest.max(started.elapsed());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            longest
        }
    });
    let started = Instant::now();
    let migrated = tokio::time::timeout(lock_timeout * 3, db.migrate(&set))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{dialect:?}: the step still waits after {:?}",
                lock_timeout * 3
            )
        });
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let longest_read = longest_read.await.unwrap();
    let err = migrated.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{dialect:?}: {err}");
    assert!(err.to_string().contains("another session holds"), "{err}");
    assert!(took >= lock_timeout, "{dialect:?}: gave up after {took:?}");
    assert!(
        longest_read < Duration::from_millis(2500),
        "{dialect:?}: a read of the table waited {longest_read:?} behind the step"
    );

    exec(&holder, "COMMIT").await;
    assert_eq!(db.migrate(&set).await.unwrap().applied, [2, 3]);
    cleanup(&db, &table).await;
}

macro_rules! on_servers {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(Dialect::Postgres).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                super::$name(Dialect::MySql).await;
            }
        }
    )*};
}

on_servers!(
    concurrent_migrations_apply_each_step_once,
    failed_step_is_reported_and_not_recorded,
    newer_schema_is_refused,
    lock_wait_is_bounded,
    a_step_behind_a_long_transaction_gives_up_without_stalling_the_table,
);
