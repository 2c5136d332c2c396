//! Versioned schema migrations that the binary runs itself, per component.
//!
//! # Model
//! A *component* (`"segment:leaf_alloc"`, `"registry:idmint_worker"`) owns some
//! tables and supplies a [`MigrationSet`]: numbered steps, each a list of SQL
//! statements written for the connected [`Dialect`] and
//! possibly depending on configuration (the table's name). Every applied step
//! is recorded in one shared table:
//!
//! ```sql
//! idmint_schema_migrations (component, version, description, applied_at,
//!                           PRIMARY KEY (component, version))
//! ```
//!
//! [`Database::migrate`] applies the steps the database has not recorded, in
//! order, and refuses with [`Error::SchemaTooNew`] when the database records a
//! version of the component newer than any the binary knows (a newer idmint
//! migrated it; an older one must not touch it).
//!
//! # Concurrency
//! Several servers starting at once all call `migrate`. A quick check without
//! a lock returns at once when everything is applied (the common case). Else
//! the work runs under one database-wide lock, and the recorded versions are
//! read again under it, so each step is applied exactly once:
//! - PostgreSQL: a session advisory lock (`pg_try_advisory_lock` on the key
//!   `0x6964_6d69_6e74`, "idmint" in ASCII, polled until the lock timeout),
//!   on a connection that is closed afterwards, so the lock
//!   can't outlive an error or a cancelled future. Each step and its record
//!   commit in one transaction (PostgreSQL's DDL is transactional).
//! - MySQL/MariaDB: `GET_LOCK('idmint_schema_migrations', 0)` polled the same
//!   way (a server-wide named lock). DDL commits implicitly there, so a step
//!   that fails halfway may leave its first statements applied without a
//!   record; steps are therefore written to be re-runnable (`CREATE TABLE IF
//!   NOT EXISTS`).
//! - SQLite: `BEGIN IMMEDIATE` takes the database's write lock; every pending
//!   step and its record commit in that one transaction.
//!
//! On PostgreSQL and MySQL/MariaDB a step's statement waits at most a second
//! for a table lock another session holds (`lock_timeout`,
//! `lock_wait_timeout`), and the steps are tried again until the lock
//! timeout: a DDL statement waiting for its lock holds up every later
//! statement on the table, other nodes' renewals among them, and a server
//! does not always end that wait when the client gives up.
//!
//! # Why not sqlx's `Migrator`
//! sqlx's `Migrator` assumes one fixed migration set per database, with SQL
//! fixed at build time and checksummed, recorded in one `_sqlx_migrations`
//! table. idmint needs several independent sets in one database (the segment
//! store and the worker registry, from two crates, each possibly several times
//! under different table names) and SQL that depends on configuration (the
//! table name), which checksums of fixed files can't express. The protocol
//! here is small: a lock, a table of `(component, version)`, and ordered steps.

use std::time::{Duration, Instant};

use sqlx::Executor;
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::SqliteConnection;

use crate::database::{Database, Pool};
use crate::dialect::Dialect;
use crate::error::{Error, Result};

/// The table recording applied migrations, shared by every component.
pub const MIGRATIONS_TABLE: &str = "idmint_schema_migrations";

/// The PostgreSQL advisory lock key serializing migrations ("idmint" in ASCII).
const PG_LOCK_KEY: i64 = 0x6964_6d69_6e74;

/// The MySQL/MariaDB named lock serializing migrations.
const MYSQL_LOCK_NAME: &str = "idmint_schema_migrations";

/// How often a waiting migrator polls the lock.
const LOCK_POLL: Duration = Duration::from_millis(25);

/// How long one migration statement waits for a table lock that another
/// session holds (a long transaction, a dump) before it gives up and the
/// steps are tried again, until the lock timeout. A DDL statement waiting
/// for its lock queues every later statement on that table behind it, so
/// while it waits the other nodes' renewals on the table wait too; and
/// PostgreSQL keeps it waiting after its client has gone. Short waits,
/// retried, bound that stall to this long at a time.
const STEP_LOCK_WAIT: Duration = Duration::from_secs(1);

/// The longest component name.
const MAX_COMPONENT_LEN: usize = 128;

/// The longest step description.
const MAX_DESCRIPTION_LEN: usize = 256;

/// One numbered step of a [`MigrationSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    version: u32,
    description: String,
    statements: Vec<String>,
}

impl Migration {
    /// The step's version (1 for the first).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// What the step does, recorded with it.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The statements, run in order.
    pub fn statements(&self) -> &[String] {
        &self.statements
    }
}

/// The migrations of one component, written for one dialect.
///
/// # Examples
/// ```
/// use idmint_sql::{Dialect, Identifier, MigrationSet};
///
/// let table = Identifier::new("orders")?;
/// let dialect = Dialect::Sqlite;
/// let set = MigrationSet::new(format!("example:{table}")).with_migration(
///     1,
///     "create the table",
///     [format!(
///         "CREATE TABLE IF NOT EXISTS {} (id BIGINT PRIMARY KEY)",
///         dialect.quote(&table)
///     )],
/// );
/// assert_eq!(set.latest_version(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationSet {
    component: String,
    migrations: Vec<Migration>,
}

impl MigrationSet {
    /// An empty set for `component` (1 to 128 printable ASCII characters; by
    /// convention `"<crate part>:<table>"`).
    pub fn new(component: impl Into<String>) -> MigrationSet {
        MigrationSet {
            component: component.into(),
            migrations: Vec::new(),
        }
    }

    /// Adds a step. Versions must be added in strictly increasing order,
    /// starting at 1 or above; [`Database::migrate`] checks.
    pub fn with_migration<S: Into<String>>(
        mut self,
        version: u32,
        description: impl Into<String>,
        statements: impl IntoIterator<Item = S>,
    ) -> MigrationSet {
        self.migrations.push(Migration {
            version,
            description: description.into(),
            statements: statements.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// The component.
    pub fn component(&self) -> &str {
        &self.component
    }

    /// The steps.
    pub fn migrations(&self) -> &[Migration] {
        &self.migrations
    }

    /// The newest version in the set (0 when empty).
    pub fn latest_version(&self) -> u32 {
        self.migrations.last().map_or(0, |m| m.version)
    }

    /// Checks the set is well formed.
    ///
    /// # Errors
    /// [`Error::InvalidMigrations`]: a bad component name, versions not
    /// strictly increasing from 1 or above, a step without statements, a
    /// description longer than 256 bytes.
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| {
            Err(Error::InvalidMigrations {
                component: self.component.chars().take(MAX_COMPONENT_LEN).collect(),
                reason,
            })
        };
        if self.component.is_empty()
            || self.component.len() > MAX_COMPONENT_LEN
            || !self.component.bytes().all(|b| b.is_ascii_graphic())
        {
            return invalid(format!(
                "a component name has 1 to {MAX_COMPONENT_LEN} printable ASCII characters"
            ));
        }
        let mut previous = 0;
        for m in &self.migrations {
            if m.version <= previous {
                return invalid(format!(
                    "version {} follows version {previous}: versions start at 1 and increase",
                    m.version
                ));
            }
            if m.statements.iter().all(|s| s.trim().is_empty()) {
                return invalid(format!("version {} has no statements", m.version));
            }
            if m.description.len() > MAX_DESCRIPTION_LEN {
                return invalid(format!(
                    "the description of version {} is longer than {MAX_DESCRIPTION_LEN} bytes",
                    m.version
                ));
            }
            previous = m.version;
        }
        Ok(())
    }

    /// The steps not in `recorded`, after checking none recorded is newer
    /// than the set knows.
    fn pending(&self, recorded: &[i64]) -> Result<Vec<&Migration>> {
        let known = self.latest_version();
        if let Some(&newest) = recorded.iter().max()
            && newest > i64::from(known)
        {
            return Err(Error::SchemaTooNew {
                component: self.component.clone(),
                recorded: newest,
                known,
            });
        }
        Ok(self
            .migrations
            .iter()
            .filter(|m| !recorded.contains(&i64::from(m.version)))
            .collect())
    }
}

/// What [`Database::migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MigrationReport {
    /// The component.
    pub component: String,
    /// The versions this call applied, in order (empty: nothing to do).
    pub applied: Vec<u32>,
    /// The component's schema version now.
    pub version: u32,
}

/// A step recorded in the database.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AppliedMigration {
    /// Its version.
    pub version: i64,
    /// Its description, as recorded.
    pub description: String,
}

impl Database {
    /// Applies the steps of `set` that the database has not recorded; see the
    /// [module docs](crate::migrate) for the protocol. Idempotent and safe to
    /// call from many processes at once.
    ///
    /// # Errors
    /// - [`Error::InvalidMigrations`] when the set is not well formed (nothing
    ///   is touched).
    /// - [`Error::SchemaTooNew`] when the database records a newer version of
    ///   the component than the set knows.
    /// - [`Error::Timeout`] when the migration lock is not free within the
    ///   lock timeout ([`crate::ConnectOptions::with_lock_timeout`]), or when
    ///   another session holds a table a step changes for that long.
    /// - [`Error::Migration`] when a step fails, [`Error::Database`] when
    ///   reading or recording does.
    pub async fn migrate(&self, set: &MigrationSet) -> Result<MigrationReport> {
        set.validate()?;
        // Quick path without the lock: fails harmlessly (and falls through)
        // when the table does not exist yet.
        if let Ok(recorded) = self.recorded_versions(set.component()).await
            && set.pending(&recorded)?.is_empty()
        {
            return Ok(MigrationReport {
                component: set.component.clone(),
                applied: Vec::new(),
                version: set.latest_version(),
            });
        }
        let deadline = Instant::now() + self.lock_timeout();
        let applied = match self.pool() {
            Pool::Postgres(p) => {
                let mut conn = p.acquire().await.map_err(db_error("migration connect"))?;
                // The session lock dies with the session: never hand this
                // connection back to the pool, whatever happens below.
                conn.close_on_drop();
                self.lock_postgres(&mut conn, deadline).await?;
                let result = self
                    .apply_patiently::<sqlx::Postgres>(
                        &mut conn,
                        Dialect::Postgres,
                        StepScope::OwnTransaction,
                        set,
                    )
                    .await;
                // Best effort; closing the connection releases it anyway.
                let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                    .bind(PG_LOCK_KEY)
                    .execute(&mut *conn)
                    .await;
                result?
            }
            Pool::MySql(p) => {
                let mut conn = p.acquire().await.map_err(db_error("migration connect"))?;
                conn.close_on_drop();
                self.lock_mysql(&mut conn, deadline).await?;
                let result = self
                    .apply_patiently::<sqlx::MySql>(
                        &mut conn,
                        Dialect::MySql,
                        StepScope::Caller,
                        set,
                    )
                    .await;
                let _ = sqlx::query("SELECT RELEASE_LOCK(?)")
                    .bind(MYSQL_LOCK_NAME)
                    .execute(&mut *conn)
                    .await;
                result?
            }
            Pool::Sqlite(p) => {
                let mut conn = p.acquire().await.map_err(db_error("migration connect"))?;
                conn.close_on_drop();
                self.lock_sqlite(&mut conn, deadline).await?;
                match apply::<sqlx::Sqlite>(&mut conn, Dialect::Sqlite, StepScope::Caller, set)
                    .await
                {
                    Ok(applied) => {
                        (&mut *conn)
                            .execute(sqlx::raw_sql("COMMIT"))
                            .await
                            .map_err(db_error("commit migrations"))?;
                        applied
                    }
                    Err(e) => {
                        let _ = (&mut *conn).execute(sqlx::raw_sql("ROLLBACK")).await;
                        return Err(e);
                    }
                }
            }
        };
        for &version in &applied {
            tracing::info!(
                component = set.component(),
                version,
                url = self.redacted_url(),
                "applied schema migration"
            );
        }
        Ok(MigrationReport {
            component: set.component.clone(),
            applied,
            version: set.latest_version(),
        })
    }

    /// The steps of `component` recorded in the database, oldest first (empty
    /// when none, or when the migrations table does not exist).
    ///
    /// # Errors
    /// [`Error::Database`] when the database fails.
    pub async fn applied_migrations(&self, component: &str) -> Result<Vec<AppliedMigration>> {
        let dialect = self.dialect();
        if !self.migrations_table_exists().await? {
            return Ok(Vec::new());
        }
        let sql = dialect.placeholders(&format!(
            "SELECT version, description FROM {MIGRATIONS_TABLE} WHERE component = ? \
             ORDER BY version"
        ));
        let rows: Vec<(i64, String)> = crate::on_pool!(self.pool(), p => {
            sqlx::query_as(&sql).bind(component).fetch_all(p).await
        })
        .map_err(db_error("read migrations"))?;
        Ok(rows
            .into_iter()
            .map(|(version, description)| AppliedMigration {
                version,
                description,
            })
            .collect())
    }

    async fn migrations_table_exists(&self) -> Result<bool> {
        let sql = match self.dialect() {
            Dialect::Postgres => {
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name = $1"
            }
            Dialect::MySql => {
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name = ?"
            }
            Dialect::Sqlite => {
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
            }
        };
        let n: i64 = crate::on_pool!(self.pool(), p => {
            sqlx::query_scalar(sql).bind(MIGRATIONS_TABLE).fetch_one(p).await
        })
        .map_err(db_error("read migrations"))?;
        Ok(n > 0)
    }

    async fn recorded_versions(&self, component: &str) -> Result<Vec<i64>, sqlx::Error> {
        let sql = self.dialect().placeholders(&format!(
            "SELECT version FROM {MIGRATIONS_TABLE} WHERE component = ?"
        ));
        crate::on_pool!(self.pool(), p => {
            sqlx::query_scalar(&sql).bind(component).fetch_all(p).await
        })
    }

    fn lock_timeout_error(&self) -> Error {
        Error::Timeout {
            operation: "waiting for the migration lock",
            url: self.redacted_url().to_owned(),
            after: self.lock_timeout(),
        }
    }

    async fn lock_postgres(&self, conn: &mut PgConnection, deadline: Instant) -> Result<()> {
        loop {
            let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(PG_LOCK_KEY)
                .fetch_one(&mut *conn)
                .await
                .map_err(db_error("migration lock"))?;
            if locked {
                return Ok(());
            }
            self.wait_for_lock(deadline).await?;
        }
    }

    async fn lock_mysql(&self, conn: &mut MySqlConnection, deadline: Instant) -> Result<()> {
        loop {
            // 1: locked; 0: held by another session; NULL: an error.
            let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
                .bind(MYSQL_LOCK_NAME)
                .fetch_one(&mut *conn)
                .await
                .map_err(db_error("migration lock"))?;
            if locked == Some(1) {
                return Ok(());
            }
            self.wait_for_lock(deadline).await?;
        }
    }

    /// Leaves the connection inside a `BEGIN IMMEDIATE` transaction.
    async fn lock_sqlite(&self, conn: &mut SqliteConnection, deadline: Instant) -> Result<()> {
        loop {
            // Waits up to the busy timeout by itself, then fails with BUSY.
            match (&mut *conn).execute(sqlx::raw_sql("BEGIN IMMEDIATE")).await {
                Ok(_) => return Ok(()),
                Err(e) if crate::is_retryable(&e) => self.wait_for_lock(deadline).await?,
                Err(e) => return Err(db_error("migration lock")(e)),
            }
        }
    }

    /// [`apply`] on PostgreSQL or MySQL/MariaDB, with each statement's table
    /// lock wait bounded by [`STEP_LOCK_WAIT`] and the steps tried again
    /// while another session holds a table, until the lock timeout. Each try
    /// starts over from the records: a step that ran out of time left nothing
    /// behind on PostgreSQL, and MySQL/MariaDB steps are written to be re-run.
    async fn apply_patiently<DB>(
        &self,
        conn: &mut DB::Connection,
        dialect: Dialect,
        scope: StepScope,
        set: &MigrationSet,
    ) -> Result<Vec<u32>>
    where
        DB: sqlx::Database,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
        for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Decode<'q, DB> + sqlx::Type<DB>,
        for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
    {
        let bound = match dialect {
            Dialect::Postgres => format!("SET lock_timeout = '{}ms'", STEP_LOCK_WAIT.as_millis()),
            // Whole seconds only.
            Dialect::MySql => format!(
                "SET SESSION lock_wait_timeout = {}",
                STEP_LOCK_WAIT.as_secs().max(1)
            ),
            Dialect::Sqlite => unreachable!("SQLite waits by its busy timeout"),
        };
        // Session-wide: the connection is closed after the migration.
        (&mut *conn)
            .execute(sqlx::raw_sql(&bound))
            .await
            .map_err(db_error("bound the migration's lock waits"))?;
        let deadline = Instant::now() + self.lock_timeout();
        loop {
            match apply::<DB>(conn, dialect, scope, set).await {
                Err(e) if lock_wait_ran_out(&e) => {
                    if Instant::now() >= deadline {
                        tracing::warn!(
                            component = set.component(),
                            url = self.redacted_url(),
                            error = %e,
                            "schema migration gave up: another session holds a table it changes"
                        );
                        return Err(Error::Timeout {
                            operation: "waiting for a table that another session holds, to migrate",
                            url: self.redacted_url().to_owned(),
                            after: self.lock_timeout(),
                        });
                    }
                    let jitter = Duration::from_millis(fastrand::u64(0..100));
                    tokio::time::sleep(LOCK_POLL * 4 + jitter).await;
                }
                result => return result,
            }
        }
    }

    async fn wait_for_lock(&self, deadline: Instant) -> Result<()> {
        if Instant::now() >= deadline {
            return Err(self.lock_timeout_error());
        }
        let jitter = Duration::from_millis(fastrand::u64(0..10));
        tokio::time::sleep(LOCK_POLL + jitter).await;
        Ok(())
    }
}

fn create_table(dialect: Dialect) -> String {
    let t = MIGRATIONS_TABLE;
    match dialect {
        Dialect::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                component VARCHAR(128) NOT NULL,
                version BIGINT NOT NULL,
                description VARCHAR(256) NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                PRIMARY KEY (component, version)
            )"
        ),
        Dialect::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                component VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                version BIGINT NOT NULL,
                description VARCHAR(256) NOT NULL,
                applied_at DATETIME(6) NOT NULL,
                PRIMARY KEY (component, version)
            ) ENGINE=InnoDB"
        ),
        Dialect::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                component TEXT NOT NULL,
                version INTEGER NOT NULL,
                description TEXT NOT NULL,
                applied_at TEXT NOT NULL,
                PRIMARY KEY (component, version)
            )"
        ),
    }
}

fn record_sql(dialect: Dialect) -> String {
    dialect.placeholders(&format!(
        "INSERT INTO {MIGRATIONS_TABLE} (component, version, description, applied_at) \
         VALUES (?, ?, ?, {})",
        dialect.now()
    ))
}

fn select_sql(dialect: Dialect) -> String {
    dialect.placeholders(&format!(
        "SELECT version FROM {MIGRATIONS_TABLE} WHERE component = ?"
    ))
}

fn step_error(set: &MigrationSet, m: &Migration) -> impl Fn(sqlx::Error) -> Error {
    let component = set.component.clone();
    let version = m.version;
    let description = m.description.clone();
    move |source| Error::Migration {
        component: component.clone(),
        version,
        description: description.clone(),
        source,
    }
}

/// What a step runs in: PostgreSQL wraps each step and its record in a
/// transaction; MySQL/MariaDB cannot (DDL commits by itself there), and SQLite
/// runs every step inside the caller's `BEGIN IMMEDIATE`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StepScope {
    OwnTransaction,
    Caller,
}

/// The pending steps of `set` and their records, on a connection that already
/// holds the database's migration lock: one loop for every database, which
/// differ only in `dialect` (the statements) and `scope`.
async fn apply<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    scope: StepScope,
    set: &MigrationSet,
) -> Result<Vec<u32>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Decode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    use sqlx::Connection;

    (&mut *conn)
        .execute(sqlx::raw_sql(&create_table(dialect)))
        .await
        .map_err(db_error("create migrations table"))?;
    let recorded: Vec<i64> = sqlx::query_scalar::<DB, i64>(&select_sql(dialect))
        .bind(set.component())
        .fetch_all(&mut *conn)
        .await
        .map_err(db_error("read migrations"))?;
    let mut applied = Vec::new();
    for m in set.pending(&recorded)? {
        let fail = step_error(set, m);
        match scope {
            StepScope::OwnTransaction => {
                let mut tx = conn.begin().await.map_err(&fail)?;
                apply_step::<DB>(&mut tx, dialect, set, m)
                    .await
                    .map_err(&fail)?;
                tx.commit().await.map_err(&fail)?;
            }
            StepScope::Caller => apply_step::<DB>(conn, dialect, set, m)
                .await
                .map_err(&fail)?,
        }
        applied.push(m.version);
    }
    Ok(applied)
}

/// One migration's statements, then its record.
async fn apply_step<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    set: &MigrationSet,
    m: &Migration,
) -> std::result::Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for statement in &m.statements {
        (&mut *conn).execute(sqlx::raw_sql(statement)).await?;
    }
    sqlx::query::<DB>(&record_sql(dialect))
        .bind(set.component())
        .bind(i64::from(m.version))
        .bind(m.description())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

fn db_error(operation: &'static str) -> impl Fn(sqlx::Error) -> Error {
    move |source| Error::Database { operation, source }
}

/// Whether a statement gave up waiting for a lock another session holds:
/// PostgreSQL's `lock_not_available` (`55P03`, past `lock_timeout`),
/// MySQL/MariaDB's 1205 (past `lock_wait_timeout`, or InnoDB's row lock wait).
fn lock_wait_ran_out(e: &Error) -> bool {
    use sqlx::mysql::MySqlDatabaseError;
    use sqlx::postgres::PgDatabaseError;

    let Some(sqlx::Error::Database(db)) = e.sqlx() else {
        return false;
    };
    if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
        return pg.code() == "55P03";
    }
    db.try_downcast_ref::<MySqlDatabaseError>()
        .is_some_and(|my| my.number() == 1205)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConnectOptions;

    fn set(component: &str) -> MigrationSet {
        MigrationSet::new(component)
            .with_migration(1, "create t", ["CREATE TABLE IF NOT EXISTS t (a INTEGER)"])
            .with_migration(3, "add b", ["ALTER TABLE t ADD COLUMN b INTEGER"])
    }

    /// Servers connect and migrate inside spawned tasks: the futures must be `Send`.
    #[test]
    fn connect_and_migrate_futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("m.db").display());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let options = ConnectOptions::new(url);
        let connecting = Database::connect(&options);
        assert_send(&connecting);
        let db = rt.block_on(connecting).unwrap();
        let set = set("c");
        let fut = db.migrate(&set);
        assert_send(&fut);
        assert_eq!(rt.block_on(fut).unwrap().applied, [1, 3]);
    }

    #[test]
    fn malformed_sets_are_refused() {
        let bad = [
            MigrationSet::new(""),
            MigrationSet::new("has space"),
            MigrationSet::new("x".repeat(129)),
            MigrationSet::new("c").with_migration(0, "zero", ["SELECT 1"]),
            MigrationSet::new("c")
                .with_migration(2, "two", ["SELECT 1"])
                .with_migration(2, "two again", ["SELECT 1"]),
            MigrationSet::new("c").with_migration(1, "empty", Vec::<String>::new()),
            MigrationSet::new("c").with_migration(1, "x".repeat(257), ["SELECT 1"]),
        ];
        for set in bad {
            let err = set.validate().unwrap_err();
            assert!(matches!(err, Error::InvalidMigrations { .. }), "{set:?}");
            assert!(err.is_config());
        }
        set("segment:t").validate().unwrap();
        MigrationSet::new("empty:ok").validate().unwrap();
    }

    #[test]
    fn pending_skips_recorded_and_refuses_newer() {
        let s = set("c");
        let pending: Vec<u32> = s.pending(&[]).unwrap().iter().map(|m| m.version).collect();
        assert_eq!(pending, [1, 3]);
        let pending: Vec<u32> = s.pending(&[1]).unwrap().iter().map(|m| m.version).collect();
        assert_eq!(pending, [3]);
        assert!(s.pending(&[1, 3]).unwrap().is_empty());
        let err = s.pending(&[1, 3, 4]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::SchemaTooNew {
                    recorded: 4,
                    known: 3,
                    ..
                }
            ),
            "{err}"
        );
    }

    async fn sqlite(dir: &tempfile::TempDir) -> Database {
        let url = format!("sqlite://{}", dir.path().join("m.db").display());
        Database::connect(&ConnectOptions::new(url)).await.unwrap()
    }

    #[tokio::test]
    async fn sqlite_applies_once_and_records_each_step() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
        let report = db.migrate(&set("c")).await.unwrap();
        assert_eq!(report.applied, [1, 3]);
        assert_eq!(report.version, 3);
        let again = db.migrate(&set("c")).await.unwrap();
        assert!(again.applied.is_empty());
        let recorded = db.applied_migrations("c").await.unwrap();
        let versions: Vec<i64> = recorded.iter().map(|m| m.version).collect();
        assert_eq!(versions, [1, 3]);
        assert_eq!(recorded[1].description, "add b");
        // Another component is independent.
        assert!(db.applied_migrations("other").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn sqlite_failed_step_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
        let broken = MigrationSet::new("c")
            .with_migration(1, "create t", ["CREATE TABLE t (a INTEGER)"])
            .with_migration(2, "broken", ["ALTER TABLE nope ADD COLUMN b INTEGER"]);
        let err = db.migrate(&broken).await.unwrap_err();
        assert!(matches!(err, Error::Migration { version: 2, .. }), "{err}");
        // All pending steps share one transaction on SQLite: step 1 is gone too.
        assert!(db.applied_migrations("c").await.unwrap().is_empty());
        let report = db.migrate(&set("c")).await.unwrap();
        assert_eq!(report.applied, [1, 3]);
    }

    #[tokio::test]
    async fn sqlite_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
        db.migrate(&set("c")).await.unwrap();
        let older = MigrationSet::new("c").with_migration(1, "create t", ["SELECT 1"]);
        let err = db.migrate(&older).await.unwrap_err();
        assert!(
            matches!(&err, Error::SchemaTooNew { component, recorded: 3, known: 1 } if component == "c"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn sqlite_lock_wait_is_bounded() {
        use sqlx::Connection;

        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("m.db").display());
        let db = Database::connect(
            &ConnectOptions::new(url)
                .with_busy_timeout(Duration::from_millis(20))
                .with_lock_timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap();
        let Pool::Sqlite(p) = db.pool() else {
            unreachable!()
        };
        let mut holder = p.acquire().await.unwrap();
        let tx = holder.begin_with("BEGIN IMMEDIATE").await.unwrap();
        let err = db.migrate(&set("c")).await.unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        tx.rollback().await.unwrap();
        drop(holder);
        assert_eq!(db.migrate(&set("c")).await.unwrap().applied, [1, 3]);
    }
}
