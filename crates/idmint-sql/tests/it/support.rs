//! Helpers shared by the integration tests.

use std::time::Duration;

use idmint_sql::{ConnectOptions, Database, Dialect, on_pool};

pub use idmint_testkit::{MYSQL_URL, POSTGRES_URL, require_service};

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
