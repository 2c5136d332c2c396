//! Migrations on PostgreSQL and MariaDB: once, in order, under the lock,
//! refusing newer schemas.

use std::time::Duration;

use idmint_sql::{Database, Dialect, Error, MigrationSet, Pool};

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
);
