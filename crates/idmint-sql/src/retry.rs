//! Which database errors are worth another attempt, and a bounded retry loop.
//!
//! Row-lock conflicts are normal in idmint's statements (many servers bump the
//! same counter row); the databases resolve some of them by failing one side:
//! PostgreSQL with a serialization failure or a deadlock, InnoDB with a
//! deadlock or a lock-wait timeout, SQLite with `SQLITE_BUSY` once its busy
//! timeout ran out. The statement had no effect in each case, so running it
//! again is safe.

use std::future::Future;
use std::time::Duration;

use sqlx::mysql::MySqlDatabaseError;
use sqlx::postgres::PgDatabaseError;
use sqlx::sqlite::SqliteError;

/// True when the statement failed for a transient conflict and had no effect,
/// so running it (or its whole transaction) again is safe:
///
/// - PostgreSQL `40001` (serialization failure) and `40P01` (deadlock);
/// - MySQL/MariaDB `1213` (deadlock) and `1205` (lock wait timeout; InnoDB
///   rolls back the statement, and with the default
///   `innodb_rollback_on_timeout=OFF` not the transaction, so a caller
///   retrying a multi-statement transaction must restart it, as
///   [`RetryPolicy::run`] does when the closure opens the transaction);
/// - SQLite `SQLITE_BUSY` (5) and `SQLITE_LOCKED` (6), with their extended codes.
///
/// Connection errors are not included: whether a statement whose connection
/// broke took effect is unknown, and only the caller knows whether that matters.
pub fn is_retryable(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
        return matches!(pg.code(), "40001" | "40P01");
    }
    if let Some(my) = db.try_downcast_ref::<MySqlDatabaseError>() {
        return matches!(my.number(), 1205 | 1213);
    }
    if db.try_downcast_ref::<SqliteError>().is_some() {
        return db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| matches!(c & 0xff, 5 | 6));
    }
    false
}

/// True when the statement broke a unique or primary-key constraint (on all
/// three databases: PostgreSQL `23505`, MySQL `1062`, SQLite
/// `SQLITE_CONSTRAINT_UNIQUE`/`_PRIMARYKEY`).
///
/// This is how "already exists" is detected: by the insert failing, never by a
/// check before it, which another process could race.
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// A bounded retry loop with exponential backoff and full jitter, for
/// statements that fail with [`is_retryable`] errors.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use idmint_sql::RetryPolicy;
///
/// let policy = RetryPolicy::new()
///     .with_max_attempts(5)
///     .with_base_delay(Duration::from_millis(1));
/// assert_eq!(policy.max_attempts(), 5);
/// assert!(policy.delay(3) <= Duration::from_millis(8));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
}

impl RetryPolicy {
    /// 10 attempts, the n-th retry waiting a random time below
    /// `min(2 ms · 2^n, 100 ms)`: under a second of waiting in total.
    pub const DEFAULT: RetryPolicy = RetryPolicy {
        max_attempts: 10,
        base_delay: Duration::from_millis(2),
        max_delay: Duration::from_millis(100),
    };

    /// [`RetryPolicy::DEFAULT`].
    pub const fn new() -> RetryPolicy {
        RetryPolicy::DEFAULT
    }

    /// How many times the operation runs at most (at least 1).
    pub const fn with_max_attempts(mut self, max_attempts: u32) -> RetryPolicy {
        self.max_attempts = if max_attempts == 0 { 1 } else { max_attempts };
        self
    }

    /// The bound on the first retry's wait; it doubles at each retry.
    pub const fn with_base_delay(mut self, base_delay: Duration) -> RetryPolicy {
        self.base_delay = base_delay;
        self
    }

    /// The bound no wait exceeds.
    pub const fn with_max_delay(mut self, max_delay: Duration) -> RetryPolicy {
        self.max_delay = max_delay;
        self
    }

    /// How many times the operation runs at most.
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The wait before retry number `retry` (1 for the first): a random
    /// duration below `min(base · 2^(retry − 1), max)`. The jitter spreads
    /// servers that collided on a row, so they don't collide again in step.
    pub fn delay(&self, retry: u32) -> Duration {
        let exp = retry.saturating_sub(1).min(20);
        let cap = self.base_delay.saturating_mul(1 << exp).min(self.max_delay);
        let cap_us = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX);
        if cap_us == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(fastrand::u64(0..cap_us))
    }

    /// Runs `op` until it succeeds, fails with an error that is not
    /// [`is_retryable`], or has run [`RetryPolicy::max_attempts`] times;
    /// returns the last result.
    ///
    /// `op` is called afresh for each attempt, so a transaction opened inside
    /// it is restarted as a whole.
    ///
    /// # Errors
    /// The operation's last error.
    pub async fn run<T, F, Fut>(&self, mut op: F) -> Result<T, sqlx::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let mut attempt = 1;
        loop {
            match op().await {
                Err(e) if attempt < self.max_attempts && is_retryable(&e) => {
                    tracing::debug!(attempt, error = %e, "retrying a conflicting statement");
                    tokio::time::sleep(self.delay(attempt)).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[test]
    fn delays_grow_and_are_capped() {
        let p = RetryPolicy::new()
            .with_base_delay(Duration::from_millis(2))
            .with_max_delay(Duration::from_millis(10));
        for _ in 0..100 {
            assert!(p.delay(1) < Duration::from_millis(2));
            assert!(p.delay(2) < Duration::from_millis(4));
            assert!(p.delay(30) < Duration::from_millis(10));
        }
        assert_eq!(
            RetryPolicy::new().with_base_delay(Duration::ZERO).delay(5),
            Duration::ZERO
        );
        assert_eq!(RetryPolicy::new().with_max_attempts(0).max_attempts(), 1);
    }

    #[test]
    fn non_database_errors_are_not_retryable() {
        assert!(!is_retryable(&sqlx::Error::RowNotFound));
        assert!(!is_retryable(&sqlx::Error::PoolTimedOut));
        assert!(!is_unique_violation(&sqlx::Error::RowNotFound));
    }

    #[tokio::test]
    async fn run_stops_at_the_first_non_retryable_error() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = RetryPolicy::new()
            .run(|| async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err(sqlx::Error::RowNotFound)
            })
            .await;
        assert!(matches!(result, Err(sqlx::Error::RowNotFound)));
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    /// Real SQLite errors: a write while another connection holds the write
    /// lock is BUSY (retryable), a duplicate key is a unique violation.
    #[tokio::test]
    async fn sqlite_errors_are_classified() {
        use sqlx::Connection;
        use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};

        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("t.db"))
            .create_if_missing(true)
            .busy_timeout(Duration::ZERO);
        let mut a = SqliteConnection::connect_with(&options).await.unwrap();
        let mut b = SqliteConnection::connect_with(&options).await.unwrap();
        sqlx::raw_sql("CREATE TABLE t (k INTEGER PRIMARY KEY)")
            .execute(&mut a)
            .await
            .unwrap();
        sqlx::raw_sql("INSERT INTO t VALUES (1)")
            .execute(&mut a)
            .await
            .unwrap();
        let dup = sqlx::raw_sql("INSERT INTO t VALUES (1)")
            .execute(&mut a)
            .await
            .unwrap_err();
        assert!(is_unique_violation(&dup), "{dup}");
        assert!(!is_retryable(&dup), "{dup}");

        let tx = a.begin_with("BEGIN IMMEDIATE").await.unwrap();
        let busy = sqlx::raw_sql("INSERT INTO t VALUES (2)")
            .execute(&mut b)
            .await
            .unwrap_err();
        assert!(is_retryable(&busy), "{busy}");
        assert!(!is_unique_violation(&busy), "{busy}");
        tx.rollback().await.unwrap();
    }
}
