// Size: about 1,020 lines before the tests, some 220 of them docs. The
// statements and DDL are in `sql/statements.rs` and Tinyid's schema in
// `sql/tinyid.rs`; what is left is the store's configuration and its one
// protocol.
//! The SQL segment store: segment keys as rows of a table on SQLite,
//! PostgreSQL or MySQL/MariaDB (sqlx, statements built at run time).
//!
//! # Why it exists
//! Segment mode is what Leaf and Tinyid users run: one row per business key,
//! `max_id` bumped by `step` to lease a range. [`SqlSegmentStore`] keeps that
//! table, Leaf's columns and all, so it can also take over a Leaf deployment's
//! own `leaf_alloc` table ([`TableSchema::Leaf`]) and carry on above the IDs
//! Leaf issued.
//!
//! # Contract (see [`SegmentStore`])
//! - A fetch sets `max_id = max_id + step` (the step given, else the row's) and
//!   returns the new row in one atomic step, so fetches of one key by any
//!   number of processes get disjoint ranges `[max_id − step, max_id)`, each
//!   above every range handed out before it.
//! - A fetch that would take `max_id` past 2^63 − 1 changes nothing and fails
//!   with [`SegmentError::Exhausted`]; an unknown key with
//!   [`SegmentError::NotFound`].
//! - A range is issued only once its statement (or transaction) committed. If
//!   the answer is lost after the commit, the caller sees an error and the
//!   range is skipped, never handed out twice.
//! - Rows created by [`SegmentStore::create`] or typed in by hand are visible
//!   at once to every process: nothing is cached here.
//!
//! # Why each fetch is atomic
//! - **PostgreSQL**: one `UPDATE … SET max_id = max_id + ? WHERE biz_tag = ?
//!   AND max_id <= ? RETURNING max_id, …`. The update takes the row lock; a
//!   concurrent update of the same row waits for it, then (READ COMMITTED)
//!   re-evaluates its `WHERE` and its `SET` on the newly committed version, so
//!   each adds its step to the value the previous one wrote. `RETURNING` gives
//!   back exactly the value this statement wrote.
//! - **SQLite**: the same statement. A write holds the database's single write
//!   lock for the whole statement, so no other write interleaves; WAL mode lets
//!   readers continue meanwhile; a busy timeout makes writers queue.
//! - **MySQL/MariaDB**: they have no `UPDATE … RETURNING`, so the `UPDATE` and a
//!   `SELECT` of the row run in one transaction on one connection. InnoDB's
//!   `UPDATE` is a locking read of the latest committed row (never of a
//!   snapshot) and holds the row's exclusive lock until commit; the `SELECT`
//!   in the same transaction sees the transaction's own write, whatever the
//!   isolation level. No other transaction can change the row between the two.
//!
//! Deadlocks, serialization failures, lock-wait timeouts and `SQLITE_BUSY`
//! ([`idmint_sql::is_retryable`]) changed nothing, so the whole fetch is run
//! again, up to [`SqlStoreConfig::with_max_attempts`] times (default 10) with a
//! jittered backoff below 100 ms per wait. The allocator bounds every call with
//! its own store timeout on top.
//!
//! # The 2^63 − 1 guard
//! The `WHERE` clause admits the row only when `max_id + step` fits, written so
//! that SQL never computes a sum that overflows: `max_id <= ?` with the limit
//! `2^63 − 1 − step` computed in Rust for a given step, and `CASE WHEN step > 0
//! THEN max_id <= 2^63 − 1 − step …` for the row's own step. This matters most
//! on SQLite, which turns an overflowing integer sum into a REAL without an
//! error. When no row was updated, the row is read to tell
//! [`SegmentError::NotFound`] from [`SegmentError::Exhausted`].
//!
//! # Schema
//! [`TableSchema::Idmint`] (the default): a table created by the binary's own
//! migrations ([`idmint_sql::migrate`], component `segment:<table>`, run by
//! [`SqlSegmentStore::connect`]) with Leaf's columns and Tinyid's:
//!
//! | column | PostgreSQL | MySQL/MariaDB | SQLite (`STRICT`) |
//! |---|---|---|---|
//! | `biz_tag` (primary key) | `VARCHAR(128)` | `VARCHAR(128)` ASCII, binary collation | `TEXT` |
//! | `max_id` | `BIGINT` | `BIGINT` | `INTEGER` |
//! | `step` | `BIGINT` | `BIGINT` | `INTEGER` |
//! | `description` | `VARCHAR(256)` | `VARCHAR(256)` | `TEXT` |
//! | `update_time` | `TIMESTAMPTZ` | `DATETIME(6)`, UTC | `TEXT`, UTC |
//! | `delta` | `BIGINT` default 1 | `BIGINT` default 1 | `INTEGER` default 1 |
//! | `remainder` | `BIGINT` default 0 | `BIGINT` default 0 | `INTEGER` default 0 |
//!
//! `step` is `BIGINT` where Leaf has `INT`, so the dynamic step is not capped at
//! 2^31 − 1; `CHECK`s keep hand-typed rows sane (`step > 0`, `max_id >= 0`,
//! `0 <= remainder < delta`).
//!
//! [`TableSchema::Leaf`]: an existing Leaf table used exactly as Leaf's DDL made
//! it (`biz_tag, max_id, step INT, description, update_time`). Nothing is
//! migrated; [`SqlSegmentStore::connect`] checks that the table and its five
//! columns exist. Every key has `delta = 1, remainder = 0`; keys created here
//! must have those and a step that fits Leaf's `INT`. A Leaf row's `max_id` is
//! the end of the last segment Leaf handed out (Leaf issues `[max_id − step,
//! max_id)` too), so idmint's first segment starts exactly where Leaf stopped.
//! Stop the Leaf servers first, or let them run side by side: both bump the
//! same row atomically, so they never overlap either.
//!
//! [`TableSchema::Tinyid`]: an existing Didi Tinyid `tiny_id_info` table (and
//! its `tiny_id_token`) used as Tinyid's `db.sql` made it. Nothing is migrated;
//! [`SqlSegmentStore::connect`] checks the table's columns. A lease is not the
//! statement above but Tinyid's own optimistic lock (read the row, then
//! `UPDATE … SET max_id = ?, version = version + 1 WHERE id = ? AND max_id = ?
//! AND version = ?`, again on a lost race), and a Tinyid row's segment is
//! `(max_id, max_id + step]`; [`tinyid`] gives the argument and the mapping.
//! Tinyid servers can keep running on the same rows.
//!
//! # References
//! - Meituan Leaf: `leaf_alloc` DDL and `IDAllocDaoImpl.updateMaxIdAndGetLeafAlloc`.
//! - Didi Tinyid: `tiny_id_info` (`db.sql`), `TinyIdInfoDAOImpl.updateMaxId`.
//! - docs/design.md §2 "Segment mode".

mod statements;
pub mod tinyid;

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use idmint_sql::{
    Bind, ConnectOptions, Database, Dialect, Identifier, MigrationSet, Pool, RetryPolicy, bind_all,
    on_pool,
};
use jiff::Timestamp;

use self::statements::{LEAF_COLUMNS, Statements};
pub use self::tinyid::TinyidToken;
use crate::error::{Result, SegmentError};
use crate::store::StoreEpoch;
use crate::store::{KeyInfo, MAX_ID, NewKey, SegmentGrant, SegmentStore};

/// Which table layout a [`SqlSegmentStore`] uses; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TableSchema {
    /// idmint's table: Leaf's columns plus `delta` and `remainder`, created and
    /// upgraded by the binary's migrations.
    #[default]
    Idmint,
    /// An existing Leaf `leaf_alloc` table, used as it is: no migrations, no
    /// `delta`/`remainder` (every key issues all numbers), steps up to 2^31 − 1
    /// when creating keys.
    Leaf,
    /// An existing Didi Tinyid `tiny_id_info` table (and its `tiny_id_token`),
    /// used as it is: no migrations, leases taken with Tinyid's own optimistic
    /// lock so Tinyid servers can share the rows; see [`tinyid`].
    Tinyid,
}

impl TableSchema {
    /// The table this schema's peer names: `leaf_alloc` (idmint and Leaf),
    /// `tiny_id_info` (Tinyid).
    pub const fn default_table(self) -> &'static str {
        match self {
            TableSchema::Idmint | TableSchema::Leaf => SqlStoreConfig::DEFAULT_TABLE,
            TableSchema::Tinyid => "tiny_id_info",
        }
    }
}

/// Configuration of a [`SqlSegmentStore`].
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use idmint_segment::sql::{SqlStoreConfig, TableSchema};
///
/// let config = SqlStoreConfig::new("postgres://idmint@db/ids".to_owned())
///     .with_table("order_alloc")
///     .with_max_connections(8)
///     .with_connect_timeout(Duration::from_secs(2));
/// assert_eq!(config.table(), "order_alloc");
/// assert_eq!(config.schema(), TableSchema::Idmint);
///
/// let leaf = SqlStoreConfig::new("mysql://leaf@db/leaf".to_owned()).with_schema(TableSchema::Leaf);
/// assert_eq!(leaf.table(), "leaf_alloc");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct SqlStoreConfig {
    url: String,
    table: Cow<'static, str>,
    schema: TableSchema,
    max_connections: u32,
    connect_timeout: Duration,
    max_attempts: u32,
}

impl fmt::Debug for SqlStoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStoreConfig")
            .field("url", &idmint_sql::redact_url(&self.url))
            .field("table", &self.table)
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl SqlStoreConfig {
    /// The default table, Leaf's name.
    pub const DEFAULT_TABLE: &'static str = "leaf_alloc";
    /// The default pool size: fetches are rare (one per segment per key), and
    /// SQLite takes one writer at a time anyway.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 4;
    /// The default bound on connecting, and on waiting for a pooled connection.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default number of attempts of a fetch or create that conflicts.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

    /// A store on the database at `url` with the defaults: table `leaf_alloc`,
    /// [`TableSchema::Idmint`], 4 connections, connect timeout 5 s, 10 attempts.
    ///
    /// `url`: `sqlite://path/to/ids.db` (created if missing), `postgres://user@host/db`,
    /// `mysql://user@host/db` or `mariadb://user@host/db`.
    pub const fn new(url: String) -> SqlStoreConfig {
        SqlStoreConfig {
            url,
            table: Cow::Borrowed(Self::DEFAULT_TABLE),
            schema: TableSchema::Idmint,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// The table (ASCII letters, digits and `_`, not starting with a digit, at
    /// most 63 bytes; used exactly as written, case included).
    pub fn with_table(mut self, table: impl Into<Cow<'static, str>>) -> SqlStoreConfig {
        self.table = table.into();
        self
    }

    /// The table layout. A table still at the previous schema's default
    /// becomes this one's ([`TableSchema::default_table`]).
    pub fn with_schema(mut self, schema: TableSchema) -> SqlStoreConfig {
        if self.table == self.schema.default_table() {
            self.table = Cow::Borrowed(schema.default_table());
        }
        self.schema = schema;
        self
    }

    /// The size of the connection pool (at least 1).
    pub const fn with_max_connections(mut self, n_connections: u32) -> SqlStoreConfig {
        self.max_connections = n_connections;
        self
    }

    /// The bound on connecting (and migrating), and on waiting for a free
    /// pooled connection later (at least 1 ms).
    pub const fn with_connect_timeout(mut self, timeout: Duration) -> SqlStoreConfig {
        self.connect_timeout = timeout;
        self
    }

    /// How many times a fetch or create runs at most when it fails with a
    /// transient conflict (deadlock, serialization failure, busy; at least 1).
    pub const fn with_max_attempts(mut self, max_attempts: u32) -> SqlStoreConfig {
        self.max_attempts = max_attempts;
        self
    }

    /// The URL, password included.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Checks the settings without connecting: the table name, the URL's
    /// scheme and the attempt count. [`SqlSegmentStore::connect`] runs it
    /// first; a server's config check runs it before any I/O.
    ///
    /// # Errors
    /// [`SegmentError::Config`] naming the setting that can't work.
    pub fn validate(&self) -> Result<()> {
        self.checked().map(|_| ())
    }

    /// [`SqlStoreConfig::validate`], returning what `connect` goes on with.
    fn checked(&self) -> Result<(Identifier, Dialect)> {
        let table = Identifier::new(self.table.as_ref())
            .map_err(|e| SegmentError::Config(format!("segment table: {e}")))?;
        if self.max_attempts == 0 {
            return Err(SegmentError::Config(
                "max attempts 0 would never run a statement".to_owned(),
            ));
        }
        let dialect = Dialect::from_url(&self.url).map_err(connect_error("sql", "connect"))?;
        Ok((table, dialect))
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The table layout.
    pub const fn schema(&self) -> TableSchema {
        self.schema
    }

    /// The pool size.
    pub const fn max_connections(&self) -> u32 {
        self.max_connections
    }

    /// The connect timeout.
    pub const fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The number of attempts.
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
}

/// The migration component of the segment table `table`: `segment:<table>`.
fn component(table: &Identifier) -> String {
    format!("segment:{table}")
}

/// A [`SegmentStore`] on a SQL table; see the [module docs](self) for the
/// contract, the atomicity argument per database and the schema.
///
/// - Thread-safe and cheap to share behind an `Arc`; calls run on a pool.
/// - No background tasks; I/O happens only in [`SqlSegmentStore::connect`],
///   the trait methods and [`SqlSegmentStore::close`].
/// - Calls are not bounded here beyond the pool's connect timeout: the
///   allocator bounds them.
///
/// # Examples
/// ```
/// use idmint_segment::sql::{SqlSegmentStore, SqlStoreConfig};
/// use idmint_segment::{NewKey, SegmentStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("ids.db");
/// let url = format!("sqlite://{}", path.display());
/// let store = SqlSegmentStore::connect(SqlStoreConfig::new(url)).await?;
/// store.create(&NewKey::new("order", 1000)).await?;
/// let grant = store.fetch("order", None).await?;
/// assert_eq!((grant.start(), grant.max_id), (1, 1001));
/// # Ok::<(), idmint_segment::SegmentError>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SqlSegmentStore {
    db: Database,
    dialect: Dialect,
    table: Identifier,
    schema: TableSchema,
    retry: RetryPolicy,
    sql: Statements,
}

impl fmt::Debug for SqlSegmentStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlSegmentStore")
            .field("dialect", &self.dialect)
            .field("url", &self.db.redacted_url())
            .field("table", &self.table.as_str())
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

/// One row as the statements return it: key, max_id, step, delta, remainder,
/// description, update_time in microseconds.
type KeyRow = (String, i64, i64, i64, i64, Option<String>, Option<i64>);

/// A grant as the statements return it: max_id, step, delta, remainder.
type GrantRow = (i64, i64, i64, i64);

/// How a created key goes into the ledger.
#[derive(Debug, Clone, Copy)]
enum Ledger {
    /// A new key: refused when the ledger knows it.
    New,
    /// A raise bringing a key back: recorded, known or not.
    Raise,
}

impl SqlSegmentStore {
    /// Connects, then readies the table: for [`TableSchema::Idmint`] runs the
    /// migrations (creating the table on first use; safe when many servers
    /// start at once), for [`TableSchema::Leaf`] checks that the table and
    /// Leaf's columns exist.
    ///
    /// # Errors
    /// - [`SegmentError::Config`]: an unsupported or malformed URL, an invalid
    ///   table name or option, a Leaf table that is missing or lacks columns,
    ///   or a database migrated by a newer idmint (the message names the
    ///   versions).
    /// - [`SegmentError::Timeout`] when the database does not answer within the
    ///   connect timeout (or the migration lock is busy for longer than 30 s).
    /// - [`SegmentError::Backend`] when the database refuses.
    pub async fn connect(config: SqlStoreConfig) -> Result<SqlSegmentStore> {
        let (table, dialect) = config.checked()?;
        let kind = dialect.name();
        let options = ConnectOptions::new(config.url.clone())
            .with_max_connections(config.max_connections)
            .with_connect_timeout(config.connect_timeout);
        let db = Database::connect(&options)
            .await
            .map_err(connect_error(kind, "connect"))?;
        let store = SqlSegmentStore {
            sql: Statements::new(dialect, &table, config.schema),
            dialect,
            table,
            schema: config.schema,
            retry: RetryPolicy::new().with_max_attempts(config.max_attempts),
            db,
        };
        match store.schema {
            TableSchema::Idmint => {
                let set = SqlSegmentStore::migrations(dialect, &store.table);
                store
                    .db
                    .migrate(&set)
                    .await
                    .map_err(connect_error(kind, "migrate"))?;
            }
            TableSchema::Leaf => {
                store
                    .check_columns(&LEAF_COLUMNS, "Leaf leaf_alloc")
                    .await?
            }
            TableSchema::Tinyid => {
                store
                    .check_columns(&tinyid::INFO_COLUMNS, "Tinyid tiny_id_info")
                    .await?
            }
        }
        Ok(store)
    }

    /// The migrations of the idmint schema for `table` on `dialect`
    /// (component `segment:<table>`), as [`SqlSegmentStore::connect`] runs them.
    pub fn migrations(dialect: Dialect, table: &Identifier) -> MigrationSet {
        statements::migrations(dialect, table)
    }

    /// The database (to close it, or for tests and tools).
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The table.
    pub fn table(&self) -> &str {
        self.table.as_str()
    }

    /// The table layout.
    pub fn schema(&self) -> TableSchema {
        self.schema
    }

    /// Closes the pool, waiting for connections in use to come back.
    pub async fn close(&self) {
        self.db.close().await;
    }

    /// Checks that the peer's table `what` exists with `wanted` columns.
    async fn check_columns(&self, wanted: &[&str], what: &str) -> Result<()> {
        let columns: Vec<String> = on_pool!(self.db.pool(), p => {
            sqlx::query_scalar(&self.sql.columns)
                .bind(self.table.as_str())
                .fetch_all(p)
                .await
        })
        .map_err(self.backend("check table"))?;
        let columns: Vec<String> = columns.iter().map(|c| c.to_ascii_lowercase()).collect();
        if columns.is_empty() {
            return Err(SegmentError::Config(format!(
                "{what} table {} does not exist in {}: this schema uses an existing {what} \
                 table; create it with its DDL, or use the idmint schema to have one created",
                self.table,
                self.db.redacted_url()
            )));
        }
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|c| !columns.iter().any(|have| have == c))
            .collect();
        if !missing.is_empty() {
            return Err(SegmentError::Config(format!(
                "table {} in {} is not a {what} table: it lacks column(s) {}",
                self.table,
                self.db.redacted_url(),
                missing.join(", ")
            )));
        }
        Ok(())
    }

    /// One attempt at the atomic `max_id += step`: the new grant row, or `None`
    /// when no row was updated (unknown key, or the guard refused).
    async fn try_fetch(
        &self,
        key: &str,
        step: Option<i64>,
        floor: i64,
    ) -> std::result::Result<Option<GrantRow>, sqlx::Error> {
        // The statement with its binds, for `query` or `query_as` alike: the
        // key's own step or the given one, the floor, and the cap that keeps
        // `max_id` at or below MAX_ID.
        macro_rules! fetch_query {
            ($query:path) => {
                match step {
                    Some(step) => $query(&self.sql.fetch_given)
                        .bind(step)
                        .bind(key)
                        .bind(floor)
                        .bind(MAX_ID as i64 - step),
                    None => $query(&self.sql.fetch_own)
                        .bind(key)
                        .bind(floor)
                        .bind(MAX_ID as i64),
                }
            };
        }
        let Pool::MySql(p) = self.db.pool() else {
            // One `UPDATE … RETURNING`.
            return on_pool!(self.db.pool(), p => {
                fetch_query!(sqlx::query_as).fetch_optional(p).await
            });
        };
        let mut tx = p.begin().await?;
        let updated = fetch_query!(sqlx::query).execute(&mut *tx).await?;
        if updated.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        // Our own write, under our row lock until the commit.
        let row: GrantRow = sqlx::query_as(&self.sql.read_grant)
            .bind(key)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(row))
    }

    async fn read_grant_row(
        &self,
        key: &str,
    ) -> std::result::Result<Option<GrantRow>, sqlx::Error> {
        on_pool!(self.db.pool(), p => {
            sqlx::query_as(&self.sql.read_grant).bind(key).fetch_optional(p).await
        })
    }

    /// Creates `key`'s row, recording it in the ledger as `ledger` says.
    async fn create_row(&self, key: &NewKey, ledger: Ledger) -> Result<KeyInfo> {
        key.validate()?;
        if self.schema == TableSchema::Tinyid {
            let row = self.create_tinyid(key).await?;
            return self.key_info(row);
        }
        if self.schema == TableSchema::Leaf {
            if key.delta() != 1 || key.remainder() != 0 {
                return Err(SegmentError::InvalidSpec {
                    field: "delta",
                    reason: format!(
                        "delta {} and remainder {} need the idmint schema: a Leaf table has \
                         no delta/remainder columns",
                        key.delta(),
                        key.remainder()
                    ),
                });
            }
            if key.step() > i32::MAX as u64 {
                return Err(SegmentError::InvalidSpec {
                    field: "step",
                    reason: format!(
                        "{} does not fit a Leaf table's INT step (at most {})",
                        key.step(),
                        i32::MAX
                    ),
                });
            }
        }
        // validate() bounds every number by MAX_ID, so the casts are exact.
        let start = key.start() as i64;
        let step = key.step() as i64;
        let delta = key.delta() as i64;
        let remainder = key.remainder() as i64;
        let description = (!key.description().is_empty()).then_some(key.description());
        let mut binds = vec![
            Bind::Int(start),
            Bind::Int(step),
            Bind::OptText(description),
        ];
        if self.schema == TableSchema::Idmint {
            binds.extend([Bind::Int(delta), Bind::Int(remainder)]);
        }
        let ledger = match (self.keeps_ledger(), ledger) {
            (false, _) => None,
            (true, Ledger::New) => Some(self.sql.ledger_insert.as_str()),
            (true, Ledger::Raise) => Some(self.sql.ledger_upsert.as_str()),
        };
        let row = match self.insert_key(key, &self.sql.insert, &binds, ledger).await {
            // The ledger knows the key, or its row exists: which one.
            Err(SegmentError::KeyExists { .. }) if ledger.is_some() => {
                return match self.describe(key.key()).await? {
                    Some(_) => Err(SegmentError::KeyExists {
                        key: key.key().to_owned(),
                    }),
                    None => Err(SegmentError::KeyForgotten {
                        store: self.kind(),
                        key: key.key().to_owned(),
                    }),
                };
            }
            other => other?,
        };
        self.key_info(row)
    }

    /// [`SegmentStore::raise`]: a key it creates is recorded in the ledger,
    /// also when the ledger knows it already (bringing a lost key back is
    /// what a raise is for).
    async fn raise_row(&self, key: &NewKey) -> Result<KeyInfo> {
        key.validate()?;
        if self.schema == TableSchema::Tinyid {
            let row = self.raise_tinyid(key).await?;
            return self.key_info(row);
        }
        // validate() bounds the start by MAX_ID: the cast is exact.
        let target = key.start() as i64;
        // A raise that finds no row creates one; one that loses that race to
        // another create (or finds the row another process just made) raises
        // that row. `max_id` only grows, so this ends.
        for _ in 0..5 {
            self.retry
                .run(|| async {
                    on_pool!(self.db.pool(), p => {
                        sqlx::query(&self.sql.raise)
                            .bind(target)
                            .bind(key.key())
                            .bind(target)
                            .execute(p)
                            .await
                            .map(|_| ())
                    })
                })
                .await
                .map_err(self.backend("raise"))?;
            match self.describe(key.key()).await? {
                Some(info) if info.max_id >= key.start() => return Ok(info),
                // Created by another process after our update found nothing:
                // raise that row.
                Some(_) => continue,
                None => {}
            }
            match self.create_row(key, Ledger::Raise).await {
                Err(SegmentError::KeyExists { .. }) => continue,
                other => return other,
            }
        }
        Err(SegmentError::Backend {
            store: self.kind(),
            operation: "raise",
            message: format!(
                "the row of key {:?} keeps appearing and disappearing",
                key.key()
            ),
        })
    }

    /// Inserts `key`'s row with `sql` (the key, then `binds`) and reads it
    /// back, in one transaction, after its ledger entry when `ledger` is a
    /// ledger statement: the new row is locked until the commit, so the read
    /// sees what was written. "Exists" is an insert failing on a primary key
    /// (the row's, or the ledger's), never a check before it.
    async fn insert_key(
        &self,
        key: &NewKey,
        sql: &str,
        binds: &[Bind<'_>],
        ledger: Option<&str>,
    ) -> Result<KeyRow> {
        self.retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    let mut tx = p.begin().await?;
                    if let Some(ledger) = ledger {
                        sqlx::query(ledger)
                            .bind(self.table.as_str())
                            .bind(key.key())
                            .execute(&mut *tx)
                            .await?;
                    }
                    bind_all!(sqlx::query(sql).bind(key.key()), binds)
                        .execute(&mut *tx)
                        .await?;
                    let row: KeyRow = sqlx::query_as(&self.sql.describe)
                        .bind(key.key())
                        .fetch_one(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(row)
                })
            })
            .await
            .map_err(|e| {
                if idmint_sql::is_unique_violation(&e) {
                    SegmentError::KeyExists {
                        key: key.key().to_owned(),
                    }
                } else {
                    self.backend("create")(e)
                }
            })
    }

    /// Turns an updated row into a grant, checking what the row says.
    fn grant(&self, key: &str, given: Option<i64>, row: GrantRow) -> Result<SegmentGrant> {
        let (max_id, row_step, delta, remainder) = row;
        let step = given.unwrap_or(row_step);
        // The guard admitted only `0 <= old max_id` and a positive step.
        let (Ok(max_id_u), Ok(step_u)) = (u64::try_from(max_id), u64::try_from(step)) else {
            return Err(self.bad_row(key, format!("max_id {max_id} or step {step} is negative")));
        };
        if step_u == 0 || step_u > max_id_u {
            return Err(self.bad_row(
                key,
                format!("step {step} does not fit below max_id {max_id}"),
            ));
        }
        let (Ok(delta_u), Ok(remainder_u)) = (u64::try_from(delta), u64::try_from(remainder))
        else {
            return Err(self.bad_row(
                key,
                format!("delta {delta} or remainder {remainder} is negative"),
            ));
        };
        if delta_u == 0 || remainder_u >= delta_u {
            return Err(self.bad_row(
                key,
                format!("remainder {remainder} is not below delta {delta}"),
            ));
        }
        Ok(SegmentGrant {
            max_id: max_id_u,
            step: step_u,
            delta: delta_u,
            remainder: remainder_u,
        })
    }

    fn key_info(&self, row: KeyRow) -> Result<KeyInfo> {
        let (key, max_id, step, delta, remainder, description, updated_us) = row;
        let u = |field: &str, v: i64| {
            u64::try_from(v).map_err(|_| self.bad_row(&key, format!("{field} {v} is negative")))
        };
        let max_id = u("max_id", max_id)?;
        let max_id = match self.schema {
            TableSchema::Tinyid => self.tinyid_next_start(&key, max_id)?,
            _ => max_id,
        };
        Ok(KeyInfo {
            max_id,
            step: u("step", step)?,
            delta: u("delta", delta)?,
            remainder: u("remainder", remainder)?,
            description: description.unwrap_or_default(),
            updated: updated_us.and_then(|us| Timestamp::from_microsecond(us).ok()),
            key,
        })
    }

    fn parse_epoch(&self, text: &str) -> Result<StoreEpoch> {
        text.parse().map_err(|e| SegmentError::Backend {
            store: self.kind(),
            operation: "read epoch",
            message: format!(
                "the epoch of table {} in {} is {text:?}: {e}",
                self.table,
                statements::EPOCH_TABLE
            ),
        })
    }

    fn bad_row(&self, key: &str, what: String) -> SegmentError {
        SegmentError::Backend {
            store: self.kind(),
            operation: "read row",
            message: format!(
                "the row of key {key:?} in table {} is invalid: {what}; fix it by hand",
                self.table
            ),
        }
    }

    fn backend(&self, operation: &'static str) -> impl Fn(sqlx::Error) -> SegmentError + use<> {
        let store = self.kind();
        move |e| SegmentError::Backend {
            store,
            operation,
            message: e.to_string(),
        }
    }
}

#[async_trait]
impl SegmentStore for SqlSegmentStore {
    fn kind(&self) -> &'static str {
        self.dialect.name()
    }

    async fn fetch_above(&self, key: &str, step: Option<u64>, floor: u64) -> Result<SegmentGrant> {
        const OP: &str = "fetch";
        // Every max_id is at most MAX_ID: a larger floor is as good as it.
        let floor_i = floor.min(MAX_ID) as i64;
        let given = match step {
            None => None,
            Some(s) if (1..=MAX_ID).contains(&s) => Some(s as i64),
            Some(s) => {
                return Err(SegmentError::InvalidSpec {
                    field: "step",
                    reason: format!("{s} is not in 1..={MAX_ID}"),
                });
            }
        };
        if self.schema == TableSchema::Tinyid {
            return self.fetch_tinyid(key, given, floor).await;
        }
        // A row that changes between the refused update and the read below
        // (someone lowered max_id by hand) gets a few more tries.
        let mut changed_under_us = 0;
        loop {
            let row = self
                .retry
                .run(|| self.try_fetch(key, given, floor_i))
                .await
                .map_err(self.backend(OP))?;
            if let Some(row) = row {
                return self.grant(key, given, row);
            }
            // Nothing was updated: unknown key, below the floor, or the step
            // does not fit.
            let current = self
                .retry
                .run(|| self.read_grant_row(key))
                .await
                .map_err(self.backend(OP))?;
            let Some((max_id, row_step, _, _)) = current else {
                return Err(SegmentError::NotFound {
                    key: key.to_owned(),
                });
            };
            let step = given.unwrap_or(row_step);
            if step <= 0 {
                return Err(self.bad_row(key, format!("step {step} is not positive")));
            }
            if max_id < 0 {
                return Err(self.bad_row(key, format!("max_id {max_id} is negative")));
            }
            if max_id < floor_i {
                return Err(SegmentError::KeyBelowFloor {
                    store: self.kind(),
                    key: key.to_owned(),
                    floor,
                    found: Some(max_id as u64),
                });
            }
            if max_id > MAX_ID as i64 - step {
                return Err(SegmentError::Exhausted {
                    key: key.to_owned(),
                    max_id: max_id as u64,
                    step: step as u64,
                });
            }
            changed_under_us += 1;
            if changed_under_us >= 3 {
                return Err(SegmentError::Backend {
                    store: self.kind(),
                    operation: OP,
                    message: format!("the row of key {key:?} keeps changing under the update"),
                });
            }
        }
    }

    async fn describe(&self, key: &str) -> Result<Option<KeyInfo>> {
        let row: Option<KeyRow> = self
            .retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    sqlx::query_as(&self.sql.describe).bind(key).fetch_optional(p).await
                })
            })
            .await
            .map_err(self.backend("describe"))?;
        row.map(|r| self.key_info(r)).transpose()
    }

    async fn create(&self, key: &NewKey) -> Result<KeyInfo> {
        self.create_row(key, Ledger::New).await
    }

    async fn raise(&self, key: &NewKey) -> Result<KeyInfo> {
        self.raise_row(key).await
    }

    fn keeps_ledger(&self) -> bool {
        self.schema == TableSchema::Idmint
    }

    async fn remember_keys(&self) -> Result<()> {
        if !self.keeps_ledger() {
            return Ok(());
        }
        self.retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    sqlx::query(&self.sql.ledger_remember)
                        .bind(self.table.as_str())
                        .execute(p)
                        .await
                        .map(|_| ())
                })
            })
            .await
            .map_err(self.backend("remember keys"))
    }

    fn keeps_epoch(&self) -> bool {
        self.schema == TableSchema::Idmint
    }

    async fn epoch(&self) -> Result<Option<StoreEpoch>> {
        if !self.keeps_epoch() {
            return Ok(None);
        }
        let text: Option<String> = self
            .retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    sqlx::query_scalar(&self.sql.epoch_read)
                        .bind(self.table.as_str())
                        .fetch_optional(p)
                        .await
                })
            })
            .await
            .map_err(self.backend("read epoch"))?;
        text.map(|t| self.parse_epoch(&t)).transpose()
    }

    async fn init_epoch(&self, epoch: &StoreEpoch) -> Result<StoreEpoch> {
        if !self.keeps_epoch() {
            return Err(SegmentError::Config(format!(
                "the {:?} schema keeps no epoch marker",
                self.schema
            )));
        }
        self.retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    sqlx::query(&self.sql.epoch_init)
                        .bind(self.table.as_str())
                        .bind(epoch.as_str())
                        .execute(p)
                        .await
                        .map(|_| ())
                })
            })
            .await
            .map_err(self.backend("write epoch"))?;
        self.epoch().await?.ok_or_else(|| SegmentError::Backend {
            store: self.kind(),
            operation: "write epoch",
            message: format!(
                "the epoch of table {} is missing right after it was written",
                self.table
            ),
        })
    }

    async fn list(&self) -> Result<Vec<KeyInfo>> {
        let rows: Vec<KeyRow> = self
            .retry
            .run(|| async {
                on_pool!(self.db.pool(), p => {
                    sqlx::query_as(&self.sql.list).fetch_all(p).await
                })
            })
            .await
            .map_err(self.backend("list"))?;
        let mut keys = rows
            .into_iter()
            .map(|r| self.key_info(r))
            .collect::<Result<Vec<_>>>()?;
        // Byte order, whatever the database's collation.
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(keys)
    }
}

/// Maps an `idmint-sql` error from connecting or migrating.
fn connect_error(
    store: &'static str,
    operation: &'static str,
) -> impl Fn(idmint_sql::Error) -> SegmentError {
    move |e| match e {
        idmint_sql::Error::Timeout { after, .. } => SegmentError::Timeout {
            store,
            operation,
            after,
        },
        e @ idmint_sql::Error::SchemaTooNew { .. } => SegmentError::Config(e.to_string()),
        e if e.is_config() => SegmentError::Config(e.to_string()),
        e => SegmentError::Backend {
            store,
            operation,
            message: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_configuration_is_refused_before_connecting() {
        let url = "postgres://u:pw@127.0.0.1:1/db".to_owned();
        let cases = [
            SqlStoreConfig::new(url.clone()).with_table("x; DROP TABLE y"),
            SqlStoreConfig::new(url.clone()).with_table(""),
            SqlStoreConfig::new(url.clone()).with_max_connections(0),
            SqlStoreConfig::new(url.clone()).with_connect_timeout(Duration::ZERO),
            SqlStoreConfig::new(url).with_max_attempts(0),
            SqlStoreConfig::new("oracle://u:pw@h/db".to_owned()),
        ];
        for config in cases {
            let err = SqlSegmentStore::connect(config.clone()).await.unwrap_err();
            assert!(matches!(err, SegmentError::Config(_)), "{config:?}: {err}");
            assert!(!err.to_string().contains("pw@"), "{err}");
        }
    }

    /// Servers connect inside spawned tasks: the future must be `Send`.
    #[test]
    fn connect_future_is_send() {
        fn assert_send<T: Send>(_: T) {}
        assert_send(SqlSegmentStore::connect(SqlStoreConfig::new(
            "sqlite://x.db".to_owned(),
        )));
    }

    #[test]
    fn debug_hides_the_password() {
        let config = SqlStoreConfig::new("postgres://u:secret@h/db".to_owned());
        let text = format!("{config:?}");
        assert!(!text.contains("secret"), "{text}");
    }
}
