//! `is_retryable` and `is_unique_violation` on errors the real servers raise,
//! and `RetryPolicy::run` getting past a real conflict.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idmint_sql::{Dialect, Pool, RetryPolicy, is_retryable, is_unique_violation};

use crate::support::{self, exec, unique_name};

async fn duplicate_key_is_a_unique_violation(dialect: Dialect) {
    let Some(db) = support::connect(dialect, |o| o).await else {
        return;
    };
    let t = unique_name("err");
    exec(
        &db,
        &format!("CREATE TABLE {t} (k VARCHAR(16) PRIMARY KEY)"),
    )
    .await;
    exec(&db, &format!("INSERT INTO {t} VALUES ('a')")).await;
    let sql = format!("INSERT INTO {t} VALUES ('a')");
    let err =
        idmint_sql::on_pool!(db.pool(), p => sqlx::raw_sql(&sql).execute(p).await.map(|_| ()))
            .unwrap_err();
    assert!(is_unique_violation(&err), "{err}");
    assert!(!is_retryable(&err), "{err}");
    exec(&db, &format!("DROP TABLE {t}")).await;
}

/// PostgreSQL: a REPEATABLE READ transaction updating a row another
/// transaction changed since its snapshot fails with 40001.
#[tokio::test]
async fn postgres_serialization_failure_is_retryable() {
    let Some(db) = support::connect(Dialect::Postgres, |o| o).await else {
        return;
    };
    let Pool::Postgres(p) = db.pool() else {
        unreachable!()
    };
    let t = unique_name("err");
    exec(
        &db,
        &format!("CREATE TABLE {t} (k INT PRIMARY KEY, v BIGINT NOT NULL)"),
    )
    .await;
    exec(&db, &format!("INSERT INTO {t} VALUES (1, 0)")).await;
    let mut a = p.acquire().await.unwrap();
    sqlx::raw_sql(&format!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT v FROM {t} WHERE k = 1"
    ))
    .execute(&mut *a)
    .await
    .unwrap();
    exec(&db, &format!("UPDATE {t} SET v = v + 1 WHERE k = 1")).await;
    let err = sqlx::raw_sql(&format!("UPDATE {t} SET v = v + 1 WHERE k = 1"))
        .execute(&mut *a)
        .await
        .unwrap_err();
    assert!(is_retryable(&err), "{err}");
    assert!(!is_unique_violation(&err), "{err}");
    sqlx::raw_sql("ROLLBACK").execute(&mut *a).await.unwrap();
    drop(a);
    exec(&db, &format!("DROP TABLE {t}")).await;
}

/// MariaDB: two transactions locking two rows in opposite orders; InnoDB
/// detects the deadlock at once and fails one with 1213.
#[tokio::test]
async fn mysql_deadlock_and_lock_wait_timeout_are_retryable() {
    let Some(db) = support::connect(Dialect::MySql, |o| o.with_max_connections(3)).await else {
        return;
    };
    let Pool::MySql(p) = db.pool() else {
        unreachable!()
    };
    let t = unique_name("err");
    exec(
        &db,
        &format!("CREATE TABLE {t} (k INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB"),
    )
    .await;
    exec(&db, &format!("INSERT INTO {t} VALUES (1, 0), (2, 0)")).await;
    let mut a = p.acquire().await.unwrap();
    let mut b = p.acquire().await.unwrap();
    let update = |k: i32| format!("UPDATE {t} SET v = v + 1 WHERE k = {k}");
    sqlx::raw_sql("BEGIN").execute(&mut *a).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut *b).await.unwrap();
    sqlx::raw_sql(&update(1)).execute(&mut *a).await.unwrap();
    sqlx::raw_sql(&update(2)).execute(&mut *b).await.unwrap();
    let (ra, rb) = tokio::join!(
        async { sqlx::raw_sql(&update(2)).execute(&mut *a).await },
        async {
            // Let `a` block on row 2 first.
            tokio::time::sleep(Duration::from_millis(200)).await;
            sqlx::raw_sql(&update(1)).execute(&mut *b).await
        },
    );
    let errors: Vec<sqlx::Error> = [ra, rb].into_iter().filter_map(Result::err).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(is_retryable(&errors[0]), "{}", errors[0]);
    let _ = sqlx::raw_sql("ROLLBACK").execute(&mut *a).await;
    let _ = sqlx::raw_sql("ROLLBACK").execute(&mut *b).await;

    // A lock wait that runs out (1205).
    sqlx::raw_sql(&format!("BEGIN; {}", update(1)))
        .execute(&mut *a)
        .await
        .unwrap();
    sqlx::raw_sql("SET SESSION innodb_lock_wait_timeout = 1")
        .execute(&mut *b)
        .await
        .unwrap();
    let err = sqlx::raw_sql(&update(1))
        .execute(&mut *b)
        .await
        .unwrap_err();
    assert!(is_retryable(&err), "{err}");
    sqlx::raw_sql("ROLLBACK").execute(&mut *a).await.unwrap();
    b.close().await.unwrap();
    drop(a);
    exec(&db, &format!("DROP TABLE {t}")).await;
}

/// `RetryPolicy::run` restarts a transaction that hit a real serialization
/// failure, and the second attempt succeeds.
#[tokio::test]
async fn retry_policy_gets_past_a_real_conflict() {
    let Some(db) = support::connect(Dialect::Postgres, |o| o).await else {
        return;
    };
    let Pool::Postgres(p) = db.pool() else {
        unreachable!()
    };
    let t = unique_name("err");
    exec(
        &db,
        &format!("CREATE TABLE {t} (k INT PRIMARY KEY, v BIGINT NOT NULL)"),
    )
    .await;
    exec(&db, &format!("INSERT INTO {t} VALUES (1, 0)")).await;
    let attempts = AtomicU32::new(0);
    let v: i64 = RetryPolicy::new()
        .run(|| async {
            let n = attempts.fetch_add(1, Ordering::SeqCst);
            let mut tx = p.begin().await?;
            sqlx::raw_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *tx)
                .await?;
            sqlx::raw_sql(&format!("SELECT v FROM {t} WHERE k = 1"))
                .execute(&mut *tx)
                .await?;
            if n == 0 {
                // Someone else changes the row after our snapshot, once.
                sqlx::raw_sql(&format!("UPDATE {t} SET v = v + 10 WHERE k = 1"))
                    .execute(p)
                    .await?;
            }
            let v =
                sqlx::query_scalar(&format!("UPDATE {t} SET v = v + 1 WHERE k = 1 RETURNING v"))
                    .fetch_one(&mut *tx)
                    .await?;
            tx.commit().await?;
            Ok(v)
        })
        .await
        .unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(v, 11);
    exec(&db, &format!("DROP TABLE {t}")).await;
}

#[tokio::test]
async fn postgres_duplicate_key_is_a_unique_violation() {
    duplicate_key_is_a_unique_violation(Dialect::Postgres).await;
}

#[tokio::test]
async fn mysql_duplicate_key_is_a_unique_violation() {
    duplicate_key_is_a_unique_violation(Dialect::MySql).await;
}
