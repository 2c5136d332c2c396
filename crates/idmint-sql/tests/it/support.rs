//! Helpers shared by the integration tests.

use std::io::Write;
use std::time::Duration;

use idmint_sql::{ConnectOptions, Database, Dialect, on_pool};

/// PostgreSQL for the tests.
pub const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// MariaDB for the tests.
pub const MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// Whether a test that needs `name` should run: `true` when `reachable`.
///
/// When the service is down, under `CI=true` this panics (CI must have every
/// service), and elsewhere it prints a loud SKIPPED line and returns `false`.
///
/// # Panics
/// Under `CI=true` when `reachable` is `false`.
pub fn require_service(name: &str, reachable: bool) -> bool {
    if reachable {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{name} is not reachable and CI=true: start {name} before running the tests");
    }
    // The real stderr, not `eprintln!`, which the harness hides for passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {name} is not reachable; this test did not run (set CI=true to fail instead)"
    );
    false
}

/// A pool on the server of `dialect` (PostgreSQL or MariaDB), or `None` after
/// [`require_service`] when it can't be reached.
pub async fn connect(
    dialect: Dialect,
    options: impl Fn(ConnectOptions) -> ConnectOptions,
) -> Option<Database> {
    let (name, url) = match dialect {
        Dialect::Postgres => ("PostgreSQL", POSTGRES_URL),
        Dialect::MySql => ("MariaDB", MYSQL_URL),
        Dialect::Sqlite => unreachable!("SQLite is tested by the unit tests"),
    };
    let base = ConnectOptions::new(url.to_owned()).with_connect_timeout(Duration::from_secs(3));
    match Database::connect(&options(base)).await {
        Ok(db) => Some(db),
        Err(_) => {
            require_service(name, false);
            None
        }
    }
}

/// A table name no other test uses.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}_{:016x}", fastrand::u64(..))
}

/// Runs one statement without parameters.
pub async fn exec(db: &Database, sql: &str) {
    on_pool!(db.pool(), p => sqlx::raw_sql(sql).execute(p).await.map(|_| ()))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}
