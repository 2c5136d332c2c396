//! SQL plumbing shared by `idmint-registry` and `idmint-segment`: connecting to
//! PostgreSQL, MySQL/MariaDB or SQLite by URL, the dialect differences they
//! care about, versioned migrations the binary runs itself, and which database
//! errors are worth a retry.
//!
//! - [`Database::connect`] opens a pool from a URL (`postgres://`, `mysql://`,
//!   `mariadb://`, `sqlite://`) with [`ConnectOptions`]; [`Database::pool`]
//!   gives the sqlx pool of the right type, and [`on_pool!`] runs one piece of
//!   code against whichever it is.
//! - Several hosts, for a primary with standbys or replicas: libpq's
//!   multi-host URLs (`postgres://h1:5432,h2:5432/db?target_session_attrs=read-write`)
//!   and MySQL/MariaDB host lists (`mysql://h1:3306,h2:3306/db`). The pool
//!   connects to the first writable host in the URL's order, drops
//!   connections to a standby or a demoted primary, and follows a failover to
//!   the new primary; [`survey`] reports each host's role, [`url_hosts`] the
//!   list without connecting. See `hosts.rs` for the URL forms accepted and
//!   `failover.rs` for how the pool follows the primary.
//! - [`Dialect`]: placeholders (`?` or `$n`), identifier quoting, "now".
//! - [`Identifier`]: table names from configuration, validated so they can be
//!   put into SQL text safely.
//! - [`Database::migrate`] applies a component's [`MigrationSet`] under a
//!   database lock, recording each step in `idmint_schema_migrations`; see
//!   [`migrate`] for the protocol and why it is not sqlx's `Migrator`.
//! - [`is_retryable`], [`is_unique_violation`] and [`RetryPolicy`]: conflicts
//!   the databases resolve by failing one side, and a bounded retry loop.
//!
//! Statements are built at run time (sqlx's `query` functions, never its
//! compile-time macros), because table names come from configuration and the
//! dialect from the URL.
//!
//! # Examples
//! ```
//! use idmint_sql::{ConnectOptions, Database, Dialect, Identifier, MigrationSet, on_pool};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let url = format!("sqlite://{}", dir.path().join("ids.db").display());
//! let db = Database::connect(&ConnectOptions::new(url)).await?;
//!
//! let table = Identifier::new("counters")?;
//! let t = db.dialect().quote(&table);
//! let set = MigrationSet::new(format!("example:{table}")).with_migration(
//!     1,
//!     "create the counters table",
//!     [format!("CREATE TABLE IF NOT EXISTS {t} (name VARCHAR(64) PRIMARY KEY, n BIGINT NOT NULL)")],
//! );
//! assert_eq!(db.migrate(&set).await?.applied, [1]);
//! assert!(db.migrate(&set).await?.applied.is_empty());
//!
//! let sql = db.dialect().placeholders(&format!("INSERT INTO {t} (name, n) VALUES (?, ?)"));
//! let inserted = on_pool!(db.pool(), p => {
//!     sqlx::query(&sql).bind("a").bind(1_i64).execute(p).await?.rows_affected()
//! });
//! assert_eq!(inserted, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(()) })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod database;
mod dialect;
mod error;
mod failover;
mod hosts;
mod ident;
pub mod migrate;
mod redact;
mod retry;

pub use database::{Bind, ConnectOptions, Database, Pool, survey};
pub use dialect::Dialect;
pub use error::{Error, Result};
pub use failover::{HostReport, HostRole, Replication};
pub use hosts::url_hosts;
pub use ident::Identifier;
pub use migrate::{AppliedMigration, MIGRATIONS_TABLE, Migration, MigrationReport, MigrationSet};
pub use redact::redact_url;
pub use retry::{RetryPolicy, is_retryable, is_unique_violation};
