// Size: about 1,510 lines before the tests, some 480 of them docs (the
// module's contract for all three modes, and the epochs every mode relies
// on). The rest is the public configuration and `Base`, the plumbing the modes
// share; each mode is its own type in `sql/`, the epochs' logic is in
// `sql/epoch.rs`, and the statements and DDL are in `sql/statements.rs`.
//! The `sql` worker registry: worker IDs and high-water marks in a table on
//! PostgreSQL, MySQL/MariaDB or SQLite (sqlx, runtime queries only).
//!
//! # Why it exists
//! uid-generator users already keep worker IDs in a `WORKER_NODE` table; many
//! deployments have a database but no etcd or ZooKeeper. This module gives them
//! both uid-generator's scheme and a safe reusable one, on the database they run.
//!
//! # Modes
//! - [`SqlMode::Disposable`] (uid-generator's `WORKER_NODE`): every start inserts a
//!   row and the worker ID *is* the row's auto-increment `ID`. IDs are never
//!   reused, so a claim never has a previous holder (`stored_mark` is `None`) and
//!   needs no lease. Row IDs belong to the table, not to the cluster: every
//!   cluster (and every lease-mode row) in the same table consumes them, and `ID`
//!   starts at 1, so worker 0 is never handed out. Give a disposable cluster a
//!   table of its own when its range is small.
//! - [`SqlMode::Lease`]: worker IDs `0..range` of a cluster are rows `(CLUSTER,
//!   WORKER)` created on first use; a claim takes a row whose lease expired (or
//!   was released) or creates the next one, and a heartbeat ([`WorkerRegistry::renew`])
//!   extends the lease. The mark stays on the row across holders, so a node that
//!   takes over a dead node's worker ID starts above the dead node's mark.
//! - [`SqlMode::UidGenerator`]: disposable on uid-generator's own `WORKER_NODE`
//!   table, as its DDL made it: a claim inserts the row uid-generator's
//!   `DisposableWorkerIdAssigner` would, the worker ID is its `ID`, and marks
//!   and reported times live in a side table `<table>_IDMINT`. See
//!   [`SqlMode::UidGenerator`] for the rows written and what the side table
//!   is for.
//!
//! # Why each claim is atomic
//! A claim is a loop of attempts; every attempt is **one statement** that either
//! wins a worker ID outright or changes nothing:
//! - *Takeover* is a compare-and-set `UPDATE … SET TOKEN = new, LEASE_EXPIRES =
//!   now + ttl WHERE CLUSTER = ? AND WORKER = ? AND (TOKEN IS NULL OR
//!   LEASE_EXPIRES <= now)`, one affected row meaning "won". On PostgreSQL (READ COMMITTED) a
//!   concurrent updater of the same row waits for the first to commit and then
//!   re-evaluates the `WHERE` on the new row version, which no longer matches. On
//!   MySQL/MariaDB (InnoDB) an `UPDATE` is a locking read of the latest committed
//!   version, never of a snapshot, so the same holds. On SQLite a write holds the
//!   database's single write lock for the whole statement.
//! - *A never-used ID* is an `INSERT` of `(CLUSTER, MAX(WORKER) + 1)`; the unique
//!   key on `(CLUSTER, WORKER)` makes exactly one of several concurrent inserts of
//!   the same number succeed; the others see a unique violation and retry.
//!
//! Deadlocks, serialization failures, lock-wait timeouts and `SQLITE_BUSY`
//! ([`idmint_sql::is_retryable`]) changed nothing and are retried the same way;
//! the whole claim is bounded by the configured timeout.
//!
//! # Whose clock
//! Lease expiry is written and compared with the **database's** clock (`now()` on
//! PostgreSQL, `UTC_TIMESTAMP(6)` on MySQL/MariaDB so the session time zone plays
//! no part, `julianday('now')` on SQLite), so nodes with skewed clocks agree on
//! when a lease ran out. The [`Lease::valid_until`] handed back is measured on the
//! node's monotonic clock from *before* the granting statement was sent, so the
//! node always believes its lease ends no later than the database does.
//!
//! A given worker ID ([`WorkerRegistry::claim_worker`], the collision check of
//! the fixed registries; lease mode only) is claimed with the same two
//! statements on that one ID; when it is held, the row's `HOST_NAME`, `ADDRESS`
//! and `PORT` name the holder.
//!
//! # Fencing
//! `renew`, `persist_mark` and `release` carry the claim's random token in their
//! `WHERE` clause (`renew` and `persist_mark` also require an unexpired lease), so
//! a node that lost its worker ID can neither extend the new holder's lease nor
//! raise the mark the new holder started from. `persist_mark` only ever raises
//! the mark (a `CASE` that keeps the larger value, portable to all three).
//! In lease mode a clean stop's record
//! ([`WorkerRegistry::record_clean_stop`]) sets it to the last tick the holder
//! issued, under the same fence, in one `UPDATE`; the disposable modes never
//! hand a worker ID out again, so they keep the default (nothing to wait
//! for).
//! Claims, `renew` and `persist_mark` also check the cluster's epoch in the
//! same statement (next section).
//!
//! # When the database forgets
//! A database promoted from an asynchronous replica (a failover) can lack the
//! last committed writes: a lease claimed or renewed just before, a mark
//! raised just before, a disposable or uid-generator row inserted just before
//! (whose auto-increment `ID` the promoted server then hands out again). A node
//! that claimed at once would be handed a worker ID that a live node holds,
//! with a mark below what that node issued, and both would issue the same IDs
//! until the holder's next renewal. So each cluster has an **epoch**: a row of
//! the table [`EPOCH_TABLE`], shared by every worker table and mode on the
//! database and keyed by the worker table (the side table in uid-generator
//! mode) and the cluster, holding the epoch's ID, the identity of the server it
//! was last seen on, when its hold on claims ends (`HOLD_UNTIL`, on the
//! database's clock), the longest hold any node asked for, and the floor of
//! every claim's mark (µs, as the marks).
//!
//! - **The server's identity** ([`SqlRegistry::server_identity`]).
//!   PostgreSQL: `<system_identifier>/<timeline>`; a restore into a new
//!   cluster has another system identifier (`pg_control_system()`), and a
//!   promotion or a point-in-time recovery starts the next timeline (the
//!   higher of `pg_control_checkpoint()`'s and the one WAL is written on,
//!   which moves at once, where the checkpoint's waits for the next
//!   checkpoint after a fast promotion). MySQL: `@@server_uuid`. MariaDB,
//!   which has none: `<server_id>@<hostname>` (replication requires a
//!   replica's `server_id` to differ from its primary's). SQLite: none; a
//!   local file has no replica to fail over to. Where PostgreSQL won't show it
//!   (`pg_control_system()` revoked, as a managed service may), connect warns
//!   and a change of server goes unseen: such a node takes whatever server an
//!   epoch names for its own (a node of the cluster that can read it holds
//!   claims once, when it first finds `unreadable` recorded).
//! - **Before every claim** one query reads the identity and the epoch. A
//!   missing epoch where the cluster has worker rows (an upgrade from an
//!   idmint without epochs, rows restored without theirs), or an epoch that
//!   names another server, starts a **new epoch** with a **hold**: no claim
//!   until the lease TTL plus the keepers' mark window
//!   ([`SqlConfig::with_mark_window`]) has passed. By then every earlier
//!   holder has stopped (a lease ends at most one TTL after its last
//!   renewal; a disposable holder stops at its last persisted mark), and
//!   every clock has passed what they persisted (a mark leads its node's
//!   clock by at most the window). Claims meanwhile fail with
//!   [`RegistryError::Held`] (`registry_held`), saying why and how long is
//!   left by the database's clock; the keeper waits it out at start, and
//!   retries just past it when claiming again. The epoch is written in one
//!   transaction that locks its row (`SELECT … FOR UPDATE`; SQLite's
//!   `BEGIN IMMEDIATE`), so nodes that notice together begin one epoch. A new
//!   cluster, with neither an epoch nor rows, starts without a hold.
//! - **Every fenced statement checks the epoch itself.** Claims (the
//!   takeover `UPDATE`, the `INSERT … SELECT` of a new row; in uid-generator
//!   mode the side table's, uid-generator's own insert is left as theirs and
//!   follows the check), renewals and marks carry an `EXISTS` on the epoch's
//!   row: the epoch is still the claim's (every token begins with its epoch's
//!   ID), the server running the statement is the one the epoch names, and
//!   for a claim the hold is over. So no claim slips in between the check and
//!   a failover, and a holder fences at its next renewal or mark, with no
//!   extra round trip: such a statement changes nothing, the registry reads
//!   why, and answers [`RegistryError::LeaseLost`] naming it (`the registry's
//!   epoch changed (…)`). In lease mode a holder whose lease is still valid
//!   by its own clock then registers its worker again
//!   ([`WorkerRegistry::register_again`]: one statement with the renewals'
//!   epoch condition, not the hold's, takes the row if it is free or still
//!   the old token's and holds no higher mark, raising the mark to the
//!   holder's; another creates it if the database lost it) and issues on.
//! - **The floor.** Before it reports that loss, the holder raises the new
//!   epoch's floor to the highest mark this registry ever persisted (best
//!   effort); every claim returns the higher of its worker's mark and the
//!   floor as `stored_mark`. So the next holder starts above everything an
//!   old holder issued, even ahead of its clock (the oracle's leader
//!   borrowing), as long as the old holder reached the database within the
//!   hold.
//!
//! The cost: one query before each claim. Renewals (every lease TTL / 3) and
//! marks take no extra round trip: the condition rides in their statement
//! (on PostgreSQL it reads the control file, a few kilobytes). Issuing IDs
//! never touches the database. Restarting the same server keeps its
//! identity and costs nothing.
//!
//! What this cannot see: a backup restored into the same server (same
//! identity: `pg_restore`, a reloaded `mysqldump`, a SQLite file copied
//! back), commits a crash lost with `synchronous_commit = off` or
//! `innodb_flush_log_at_trx_commit` ≠ 1, a cluster's epoch and rows restored
//! together from before its first claim, rows edited by hand, and nodes of an
//! idmint without epochs (they don't fence). After such a restore, keep every
//! node of the cluster stopped for the lease TTL plus the mark window before
//! starting any.
//!
//! # The fleet
//! [`WorkerRegistry::fleet`] is one `SELECT` (one snapshot): the rows holding
//! a token whose lease (lease mode) or liveness deadline (the disposable
//! modes) ends in the future or ended less than [`FLEET_RECENT`] ago, with
//! the time left computed by the database's clock. Released rows are not
//! listed. Disposable rows have no lease: their `lease_left` is `None` and
//! the deadline only decides `live`. In uid-generator mode the holder is the
//! side table's `HOLDER` (`host (address:port)`).
//!
//! # Schema
//! Created and upgraded by the binary's own migrations ([`idmint_sql::migrate`],
//! component `registry:<table>`, recorded in `idmint_schema_migrations`), which
//! [`SqlRegistry::connect`] runs under a database-wide lock, so servers starting
//! at once apply each step exactly once; [`SqlRegistry::migrations`] gives the
//! steps. Columns: uid-generator's `ID, HOST_NAME, PORT, TYPE, LAUNCH_DATE,
//! MODIFIED, CREATED`, plus `CLUSTER`, `WORKER` (lease mode; `NULL` for
//! disposable rows), `ADDRESS`, `TOKEN`, `LEASE_EXPIRES`, `MARK_US` and
//! `REPORTED_US` (microseconds since the Unix epoch; marks are rounded up, never
//! down). `MODIFIED`/`CREATED` are `TIMESTAMPTZ` on PostgreSQL, `DATETIME(6)` in
//! UTC on MySQL/MariaDB (uid-generator's `TIMESTAMP` ends in 2038) and text on
//! SQLite.
//!
//! | version | PostgreSQL, MySQL/MariaDB, SQLite |
//! |---|---|
//! | 1 | `CREATE TABLE IF NOT EXISTS` the table above, exactly as idmint created it before it had migrations |
//! | 2 | `ALTER TABLE` adding `REPORTED_AT` (the database's clock when a report was written, in `LEASE_EXPIRES`'s form) and `REPORTED_TOKEN` (the token of the holding that wrote it) |
//!
//! A start weighs each peer's report by its age, which `peers` computes in
//! the same `SELECT` on the database's clock (`now − REPORTED_AT`, no
//! extra round trip): the peer's clock now is about `REPORTED_US` plus
//! that. Only where `REPORTED_TOKEN` is the row's token: a node of an
//! idmint before version 2 reports without the stamp, and a stamp left by
//! an earlier holding of the row would make its report look older than it
//! is (the peer's clock later than it is). uid-generator mode's side table
//! gets the same two columns (its version 2).
//!
//! The epoch table [`EPOCH_TABLE`] has its own component,
//! `registry:idmint_registry_epoch` ([`SqlRegistry::epoch_migrations`]),
//! whose version 1 creates it: `WORKER_TABLE`, `CLUSTER` (the key),
//! `EPOCH_ID`, `SERVER_IDENTITY`, `HOLD_UNTIL`, `HOLD_US`, `FLOOR_US`,
//! `HOLD_REASON`, `STARTED`, `MODIFIED`. Dropped after it was recorded, it is
//! refused at connect as the worker table is (recreated empty it would be
//! safe, each cluster with rows held once, but not behind the operator's
//! back).
//!
//! **Tables from before migrations are adopted, not recreated.** Earlier idmint
//! created the same table with the same `CREATE TABLE IF NOT EXISTS` at every
//! start, and recorded nothing. Version 1 is that statement unchanged, so on such
//! a table it changes nothing and is recorded, and the workers' rows and marks
//! stay. On PostgreSQL it first takes the transaction-scoped advisory lock the
//! old code took (`hashtext('idmint:<table>')`), so an old and a new binary
//! starting together on a fresh database don't race on the catalog.
//!
//! [`SqlRegistry::connect`] also checks the table it is given:
//! - Before adopting an unrecorded table, that it has the registry's columns: a
//!   table of the same name that belongs to something else is refused, and
//!   nothing is recorded.
//! - That the table exists once migrated. A table dropped after its migrations
//!   were recorded is refused, not recreated: it held every worker's high-water
//!   mark, and an empty table would let a node with its clock behind reissue
//!   IDs. The message says how to start afresh deliberately (delete the
//!   component's rows from `idmint_schema_migrations`).
//! - A database whose records show a newer version of the component (a newer
//!   idmint migrated it) is refused with [`RegistryError::Config`] naming both
//!   versions.
//!
//! The table name is quoted, and on PostgreSQL folded to lower case first: the
//! pre-migration code wrote it unquoted, which PostgreSQL folds, so a configured
//! `Workers` still names the table `workers` it created (and the component is
//! `registry:workers`). Validated names ([`idmint_sql::Identifier`]) make either
//! form safe to put into SQL text.
//!
//! # Where the code lives
//! This module holds the configuration, what every mode shares (the pool,
//! the table's checks, the fetch helpers, the error mapping) and
//! [`SqlRegistry`], which picks the mode's protocol at connect and hands
//! every step to it. Each mode is one type implementing the steps (claim,
//! renew, persist, peers, fleet, release): `sql/lease.rs`, `sql/disposable.rs`
//! and `sql/uid_generator.rs` (with that mode's own statements and side
//! table). `sql/statements.rs` holds the worker table's and the epoch table's
//! migrations (their DDL) beside the statements run on them, and
//! `sql/epoch.rs` the epoch check, its decision and the fencing errors.
//!
//! # References
//! - uid-generator's `WORKER_NODE` table and `DisposableWorkerIdAssigner`.
//! - docs/design.md §2 "Worker-ID registries" and "High-water mark, persisted ahead".

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use idmint_sql::{
    Bind, ConnectOptions, Database, Dialect, Identifier, MIGRATIONS_TABLE, MigrationSet, Pool,
    bind_all, on_pool,
};
use jiff::Timestamp;

use crate::error::{RegistryError, Result};
use crate::registry::{
    Claim, FLEET_RECENT, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry,
    check_given_worker, check_range,
};
use crate::util::{bounded, random_u64};

mod disposable;
mod epoch;
mod lease;
mod statements;
mod uid_generator;

use self::disposable::Disposable;
use self::lease::Leased;
use self::statements::{
    COLUMNS, EPOCH_COLUMNS, EpochStatements, FleetRow, Guards, Identity, Statements, epoch_table,
    micros_left, table_in,
};
use self::uid_generator::UidGenerator;

pub use self::statements::EPOCH_TABLE;

const REGISTRY: &str = "sql";

/// uid-generator's `WorkerNodeType.ACTUAL`: a node on a real host (as opposed
/// to `CONTAINER`, 1), written to the `TYPE` column for compatibility.
const NODE_TYPE_ACTUAL: i64 = 2;

/// How the `sql` registry hands out worker IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqlMode {
    /// A new row at every start; the worker ID is the row's auto-increment `ID`,
    /// never reused, no lease (uid-generator's `WORKER_NODE`). `renew` and
    /// `persist_mark` (the keeper's periodic report) only refresh a liveness
    /// deadline (the lease TTL from now) that decides who counts as a live
    /// peer in [`WorkerRegistry::peers`].
    Disposable,
    /// Worker IDs `0..range` are reused once their lease expired; a heartbeat
    /// renews the lease.
    Lease,
    /// [`SqlMode::Disposable`] on uid-generator's own `WORKER_NODE` table, used
    /// as uid-generator's DDL made it: never created, altered or updated, and a
    /// missing table is refused (a new one would count worker IDs from 1
    /// again). MySQL/MariaDB and PostgreSQL; SQLite is refused. The table
    /// defaults to `WORKER_NODE`; the cluster is not used (the table is one
    /// cluster). No lease.
    ///
    /// Each claim inserts the row uid-generator's `DisposableWorkerIdAssigner`
    /// would, and the worker ID is its `ID`, above every row already there:
    /// `TYPE` 2 (`ACTUAL`) with the node's address as `HOST_NAME` and
    /// `<Unix ms>-<random below 100000>` as `PORT`, or, where uid-generator's
    /// container variables `JPAAS_HOST` and `JPAAS_HTTP_PORT` (or
    /// `JPAAS_HOST_PORT_8080`) are set, `TYPE` 1 (`CONTAINER`) with their
    /// values; today's `LAUNCH_DATE`; `NOW()` as `MODIFIED` and `CREATED`.
    ///
    /// A side table, `<table>_IDMINT` (keyed by worker ID, created by idmint's
    /// migrations), keeps what their table has no column for. Uniqueness
    /// between nodes doesn't need it (row IDs are never handed out twice, and a
    /// restart gets a new row); it holds the running worker's high-water mark
    /// (fenced by the claim's token, as in every mode), its last reported time
    /// and liveness deadline for the clock check against live peers at start,
    /// and the marks that protect a worker ID the table's auto-increment ever
    /// hands out again (rows deleted, the counter lowered): such a claim starts
    /// above the stored mark, and is refused while the old holder is live.
    UidGenerator,
}

/// Configuration of a [`SqlRegistry`].
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use idmint_registry::sql::{SqlConfig, SqlMode};
///
/// let config = SqlConfig::new(SqlMode::Lease)
///     .with_cluster("orders")
///     .with_lease_ttl(Duration::from_secs(10));
/// assert_eq!(config.table(), "idmint_worker");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlConfig {
    mode: SqlMode,
    cluster: String,
    table: String,
    lease_ttl: Duration,
    mark_window: Duration,
    timeout: Duration,
    max_connections: u32,
}

impl SqlConfig {
    /// The default table name.
    pub const DEFAULT_TABLE: &'static str = "idmint_worker";
    /// The default cluster name.
    pub const DEFAULT_CLUSTER: &'static str = "default";
    /// The default lease time to live (also the liveness window of disposable rows
    /// for [`WorkerRegistry::peers`]).
    pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);
    /// The default bound on every remote call.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default size of the connection pool.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 2;
    /// The keepers' mark window assumed unless set (the keeper's default).
    pub const DEFAULT_MARK_WINDOW: Duration = Duration::from_secs(3);

    /// The default table of [`SqlMode::UidGenerator`], uid-generator's.
    pub const UID_GENERATOR_TABLE: &'static str = "WORKER_NODE";

    /// A configuration for `mode` with the defaults: table `idmint_worker`
    /// (`WORKER_NODE` in uid-generator mode), cluster `default`, lease TTL
    /// 30 s, mark window 3 s, timeout 5 s, 2 connections.
    pub fn new(mode: SqlMode) -> Self {
        let table = match mode {
            SqlMode::UidGenerator => Self::UID_GENERATOR_TABLE,
            SqlMode::Disposable | SqlMode::Lease => Self::DEFAULT_TABLE,
        };
        SqlConfig {
            mode,
            cluster: Self::DEFAULT_CLUSTER.to_owned(),
            table: table.to_owned(),
            lease_ttl: Self::DEFAULT_LEASE_TTL,
            mark_window: Self::DEFAULT_MARK_WINDOW,
            timeout: Self::DEFAULT_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// The cluster (namespace) whose worker IDs this registry hands out; several
    /// clusters can share one table (1 to 128 characters).
    pub fn with_cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = cluster.into();
        self
    }

    /// The table name (ASCII letters, digits and `_`, not starting with a digit,
    /// at most 63 characters).
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The lease time to live granted by `claim` and `renew` (at least 1 ms).
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// How far ahead of their time the keepers on this registry persist
    /// their marks (`KeeperConfig::with_window`; default 3 s). After the
    /// database forgot (see the [module docs](self#when-the-database-forgets)),
    /// claims wait the lease TTL plus this window: by then no earlier holder
    /// issues, and every clock has passed what they persisted.
    pub fn with_mark_window(mut self, window: Duration) -> Self {
        self.mark_window = window;
        self
    }

    /// The bound on every remote call, connecting included (at least 1 ms).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The size of the connection pool (at least 1).
    pub fn with_max_connections(mut self, n_connections: u32) -> Self {
        self.max_connections = n_connections;
        self
    }

    /// The mode.
    pub fn mode(&self) -> SqlMode {
        self.mode
    }

    /// The cluster.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The lease time to live.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The bound on every remote call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The keepers' mark window this registry assumes.
    pub fn mark_window(&self) -> Duration {
        self.mark_window
    }

    /// How long claims wait after the database forgot: the lease TTL plus
    /// the mark window.
    pub fn reset_hold(&self) -> Duration {
        self.lease_ttl.saturating_add(self.mark_window)
    }

    /// Checks the settings without connecting: the table name, the cluster
    /// name, the lease TTL, the timeout and the pool size. [`SqlRegistry::connect`]
    /// runs it first; a server's config check runs it before any I/O.
    ///
    /// # Errors
    /// [`RegistryError::Config`] naming the setting that can't work.
    pub fn validate(&self) -> Result<()> {
        Identifier::new(self.table.as_str())
            .map_err(|e| RegistryError::config(REGISTRY, format!("table: {e}")))?;
        if self.table.eq_ignore_ascii_case(EPOCH_TABLE) {
            return Err(RegistryError::config(
                REGISTRY,
                format!("table: {EPOCH_TABLE} is the registry's epoch table; name another"),
            ));
        }
        if self.cluster.is_empty() || self.cluster.chars().count() > 128 {
            return Err(RegistryError::config(
                REGISTRY,
                format!(
                    "cluster name {:?} must have 1 to 128 characters",
                    self.cluster
                ),
            ));
        }
        if self.lease_ttl < Duration::from_millis(1) {
            return Err(RegistryError::config(
                REGISTRY,
                format!("lease ttl {:?} is below 1ms", self.lease_ttl),
            ));
        }
        if self.timeout < Duration::from_millis(1) {
            return Err(RegistryError::config(
                REGISTRY,
                format!("timeout {:?} is below 1ms", self.timeout),
            ));
        }
        if self.max_connections == 0 {
            return Err(RegistryError::config(
                REGISTRY,
                "max connections 0 leaves no connection",
            ));
        }
        Ok(())
    }
}

/// The database behind a [`SqlRegistry`], chosen by the URL's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqlBackend {
    /// `postgres://` or `postgresql://`.
    Postgres,
    /// `mysql://` or `mariadb://`.
    MySql,
    /// `sqlite:`.
    Sqlite,
}

impl SqlBackend {
    fn from_dialect(dialect: Dialect) -> SqlBackend {
        match dialect {
            Dialect::Postgres => SqlBackend::Postgres,
            Dialect::MySql => SqlBackend::MySql,
            Dialect::Sqlite => SqlBackend::Sqlite,
        }
    }
}

/// A [`WorkerRegistry`] on a SQL table. See the [module docs](self) for the modes,
/// the schema and why claims are atomic.
///
/// - Thread-safe: share it behind an `Arc`; calls run on a small pool.
/// - Every call is bounded by [`SqlConfig::timeout`] and fails with
///   [`RegistryError::Timeout`]; database errors are [`RegistryError::Backend`]
///   naming the operation.
/// - No background tasks; the only I/O outside the trait methods is
///   [`SqlRegistry::connect`] and [`SqlRegistry::close`].
pub struct SqlRegistry {
    protocol: Protocol,
}

/// The one protocol a registry speaks, chosen at connect from its mode.
enum Protocol {
    Lease(Leased),
    Disposable(Disposable),
    /// Boxed: it carries a second set of statements.
    UidGenerator(Box<UidGenerator>),
}

impl fmt::Debug for SqlRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = self.base();
        f.debug_struct("SqlRegistry")
            .field("backend", &base.backend)
            .field("url", &base.db.redacted_url())
            .field("mode", &base.config.mode)
            .field("table", &base.config.table)
            .field("cluster", &base.config.cluster)
            .field("lease_ttl", &base.config.lease_ttl)
            .field("mark_window", &base.config.mark_window)
            .field("identity", &base.identity())
            .field("timeout", &base.config.timeout)
            .finish_non_exhaustive()
    }
}

impl SqlRegistry {
    /// Connects to the database at `url` and readies the table: runs the
    /// registry's migrations (creating the table on first use, adopting one an
    /// idmint without migrations created) and checks the table; see the
    /// [module docs](self#schema).
    ///
    /// `url` is a sqlx URL: `postgres://user@host:5432/db`, `mysql://root@host/db`
    /// (or `mariadb://`), `sqlite:path/to/file.db` (created if missing, WAL mode).
    ///
    /// # Errors
    /// - [`RegistryError::Config`] for an unsupported scheme, a malformed URL, an
    ///   invalid [`SqlConfig`], a table of that name that is not a worker table,
    ///   a table dropped after it was migrated, or a database migrated by a newer
    ///   idmint (the message names both schema versions); in uid-generator
    ///   mode, a SQLite URL, a missing table, or one without uid-generator's
    ///   columns.
    /// - [`RegistryError::Timeout`] when connecting and migrating take longer than
    ///   the configured timeout.
    /// - [`RegistryError::Backend`] when the database refuses.
    pub async fn connect(url: &str, config: SqlConfig) -> Result<Self> {
        config.validate()?;
        let dialect = Dialect::from_url(url).map_err(sql_error("connect"))?;
        let given = Identifier::new(config.table.as_str())
            .map_err(|e| RegistryError::config(REGISTRY, format!("table: {e}")))?;
        if config.mode == SqlMode::UidGenerator && dialect == Dialect::Sqlite {
            // uid-generator's DDL and DAO are MySQL's; no deployment of it
            // keeps WORKER_NODE in SQLite, and this mode is only for those.
            return Err(RegistryError::config(
                REGISTRY,
                "uid-generator mode needs the MySQL/MariaDB or PostgreSQL database that holds \
                 uid-generator's WORKER_NODE, not SQLite; use disposable or lease mode on SQLite"
                    .to_owned(),
            ));
        }
        let table = table_in(dialect, &given);
        let side = match config.mode {
            SqlMode::UidGenerator => Some(table_in(dialect, &uid_generator::side_table(&given)?)),
            SqlMode::Disposable | SqlMode::Lease => None,
        };
        let timeout = config.timeout;
        let options = ConnectOptions::new(url.to_owned())
            .with_max_connections(config.max_connections)
            // Longer than the registry's own timeout, so a slow or silent
            // server ends as `RegistryError::Timeout`, not as a pool error.
            .with_connect_timeout(timeout.saturating_mul(2))
            .with_busy_timeout(timeout)
            .with_lock_timeout(timeout);
        let fut = async move {
            let db = Database::connect(&options)
                .await
                .map_err(sql_error("connect"))?;
            let identity = epoch::probe_identity(&db).await?;
            let guards = Guards::new(dialect, identity);
            let t = dialect.quote(&table);
            // The epoch covers the cluster's rows of the worker table, or
            // in uid-generator mode the side table's (the table is one
            // cluster): the rows that show a missing epoch is not a new
            // cluster's.
            let (epoch_table_key, epoch_cluster, rows_probe) = match &side {
                Some(side) => (
                    side.to_string(),
                    String::new(),
                    format!("SELECT WORKER_ID FROM {} LIMIT 1", dialect.quote(side)),
                ),
                None => (
                    table.to_string(),
                    config.cluster.clone(),
                    format!("SELECT ID FROM {t} WHERE CLUSTER = ? LIMIT 1"),
                ),
            };
            let base = Base {
                sql: Statements::new(dialect, &t, &guards),
                epoch: EpochStatements::new(dialect, identity, &rows_probe),
                backend: SqlBackend::from_dialect(dialect),
                db,
                table,
                config,
                epoch_table_key,
                epoch_cluster,
                highest_mark_us: AtomicI64::new(0),
            };
            let protocol = if let Some(side) = side {
                let uid = uid_generator::Statements::new(dialect, &t, side, &guards);
                let protocol = UidGenerator::new(base, uid);
                protocol.ready().await?;
                protocol.base().ready_epochs().await?;
                Protocol::UidGenerator(Box::new(protocol))
            } else {
                base.ready_table(&SqlRegistry::migrations(dialect, &given))
                    .await?;
                base.ready_epochs().await?;
                if base.config.mode == SqlMode::Lease {
                    Protocol::Lease(Leased { base })
                } else {
                    Protocol::Disposable(Disposable { base })
                }
            };
            Ok(SqlRegistry { protocol })
        };
        bounded(REGISTRY, "connect", timeout, fut).await
    }

    /// The registry's migrations for `table` on `dialect` (component
    /// `registry:<table>`, the table folded to lower case on PostgreSQL), as
    /// [`SqlRegistry::connect`] runs them; see the [module docs](self#schema).
    ///
    /// # Examples
    /// ```
    /// use idmint_registry::sql::SqlRegistry;
    /// use idmint_sql::{Dialect, Identifier};
    ///
    /// let set = SqlRegistry::migrations(Dialect::Postgres, &Identifier::new("Workers")?);
    /// assert_eq!(set.component(), "registry:workers");
    /// assert_eq!(set.latest_version(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn migrations(dialect: Dialect, table: &Identifier) -> MigrationSet {
        statements::migrations(dialect, table)
    }

    /// The migrations of the epoch table ([`EPOCH_TABLE`], component
    /// `registry:idmint_registry_epoch`, shared by every worker table and
    /// mode on a database), as [`SqlRegistry::connect`] runs them; see the
    /// [module docs](self#when-the-database-forgets).
    pub fn epoch_migrations(dialect: Dialect) -> MigrationSet {
        statements::epoch_migrations(dialect)
    }

    /// The identity of the database server as the registry reads it before
    /// every claim and within every renewal (see the [module
    /// docs](self#when-the-database-forgets)): on PostgreSQL
    /// `<system_identifier>/<timeline>`, on MySQL `@@server_uuid`, on
    /// MariaDB `<server_id>@<hostname>`; `None` on SQLite, and where
    /// PostgreSQL does not show it.
    ///
    /// # Errors
    /// [`RegistryError::Timeout`] or [`RegistryError::Backend`] when the
    /// database fails.
    pub async fn server_identity(&self) -> Result<Option<String>> {
        let base = self.base();
        match base.identity() {
            Identity::Sqlite | Identity::Unreadable => Ok(None),
            Identity::Postgres | Identity::MySql | Identity::MariaDb => {
                base.read_identity().await.map(Some)
            }
        }
    }

    /// The database behind this registry.
    pub fn backend(&self) -> SqlBackend {
        self.base().backend
    }

    /// The configuration.
    pub fn config(&self) -> &SqlConfig {
        &self.base().config
    }

    /// Closes the pool, waiting for connections to shut down. Claims are not
    /// released (call [`WorkerRegistry::release`] first for that).
    pub async fn close(&self) {
        self.base().db.close().await;
    }

    /// The mode's steps, as the trait's.
    fn protocol(&self) -> &dyn WorkerRegistry {
        match &self.protocol {
            Protocol::Lease(p) => p,
            Protocol::Disposable(p) => p,
            Protocol::UidGenerator(p) => p.as_ref(),
        }
    }

    fn base(&self) -> &Base {
        match &self.protocol {
            Protocol::Lease(p) => &p.base,
            Protocol::Disposable(p) => &p.base,
            Protocol::UidGenerator(p) => p.base(),
        }
    }
}

#[async_trait]
impl WorkerRegistry for SqlRegistry {
    fn kind(&self) -> &'static str {
        REGISTRY
    }

    fn reassigns_workers(&self) -> bool {
        self.protocol().reassigns_workers()
    }

    async fn persist_local(&self, claim: &Claim, mark: Timestamp) -> Result<()> {
        self.protocol().persist_local(claim, mark).await
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        check_range(REGISTRY, range)?;
        self.protocol().claim(node, range).await
    }

    /// Lease mode only: disposable worker IDs are row IDs, never chosen. A
    /// cluster should use either this or [`WorkerRegistry::claim`]: a claim
    /// creates new rows above the highest worker number in the table, so given
    /// IDs leave the numbers below them unused by claims.
    async fn claim_worker(&self, node: &NodeIdentity, worker: u32, range: u32) -> Result<Claim> {
        check_given_worker(REGISTRY, worker, range)?;
        self.protocol().claim_worker(node, worker, range).await
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        self.protocol().renew(claim).await
    }

    /// Lease mode only: the disposable modes' worker IDs are never given to
    /// another node, so their holders never fence on an epoch (they fence
    /// on nothing, see [`WorkerRegistry::reassigns_workers`]).
    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> Result<Claim> {
        self.protocol().register_again(node, claim, mark).await
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.protocol().persist_mark(claim, mark, reported).await
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.protocol()
            .record_clean_stop(claim, high, reported)
            .await
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        self.protocol().peers(claim).await
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        self.protocol().fleet().await
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        self.protocol().release(claim).await
    }
}

/// What every mode shares: the pool, the table as the database names it,
/// the configuration and the worker table's statements, with the helpers
/// that run them.
struct Base {
    db: Database,
    backend: SqlBackend,
    /// The table as the database names it (folded to lower case on PostgreSQL).
    table: Identifier,
    config: SqlConfig,
    sql: Statements,
    epoch: EpochStatements,
    /// The epoch row's key: the worker table (the side table in
    /// uid-generator mode) as the database names it…
    epoch_table_key: String,
    /// …and the cluster (empty in uid-generator mode).
    epoch_cluster: String,
    /// The highest mark persisted (or attempted) through this registry, µs:
    /// no holding of this registry issued past it. A holder that finds its
    /// epoch gone raises the new epoch's floor to it.
    highest_mark_us: AtomicI64,
}

impl fmt::Debug for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Base")
            .field("backend", &self.backend)
            .field("url", &self.db.redacted_url())
            .field("table", &self.table)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Base {
    /// Where the server's identity comes from.
    fn identity(&self) -> Identity {
        self.epoch.identity_source
    }

    /// The binds of the epoch's rows probe: the cluster, except in
    /// uid-generator mode.
    fn rows_probe_binds(&self) -> Vec<Bind<'_>> {
        if self.config.mode == SqlMode::UidGenerator {
            Vec::new()
        } else {
            vec![Bind::Text(&self.config.cluster)]
        }
    }

    /// Migrates and checks the epoch table ([`EPOCH_TABLE`]). Dropped after
    /// it was migrated, it is refused like the worker table: recreated
    /// empty, it would hold every cluster's first claim (safe), but it is
    /// not recreated behind the operator's back either.
    async fn ready_epochs(&self) -> Result<()> {
        let set = statements::epoch_migrations(self.db.dialect());
        self.db.migrate(&set).await.map_err(sql_error("migrate"))?;
        let columns = self.columns_of(&epoch_table()).await?;
        if columns.is_empty() {
            return Err(RegistryError::config(
                REGISTRY,
                format!(
                    "the epoch table {EPOCH_TABLE} does not exist in {}, yet {MIGRATIONS_TABLE} \
                 records its migrations: it was dropped; to create it again delete the rows of \
                 component {:?} from {MIGRATIONS_TABLE} (the first claim of each cluster with \
                 worker rows is then held for the lease TTL plus the mark window)",
                    self.db.redacted_url(),
                    set.component(),
                ),
            ));
        }
        let missing = missing_columns(&EPOCH_COLUMNS, &columns);
        if !missing.is_empty() {
            return Err(RegistryError::config(
                REGISTRY,
                format!(
                    "table {EPOCH_TABLE} in {} lacks column(s) {}: it is not idmint's epoch table",
                    self.db.redacted_url(),
                    missing.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// Migrates, then checks the table; see the [module docs](self#schema).
    async fn ready_table(&self, set: &MigrationSet) -> Result<()> {
        let recorded = self
            .db
            .applied_migrations(set.component())
            .await
            .map_err(sql_error("migrate"))?;
        if recorded.is_empty() {
            // Nothing recorded: the table is new, or an idmint without
            // migrations created it (version 1 then adopts it). Refuse a
            // foreign table of that name before recording anything.
            let columns = self.columns().await?;
            if !columns.is_empty() {
                self.check_columns(&columns)?;
            }
        }
        self.db.migrate(set).await.map_err(sql_error("migrate"))?;
        let columns = self.columns().await?;
        if columns.is_empty() {
            return Err(RegistryError::config(
                REGISTRY,
                format!(
                    "table {} does not exist in {}, yet {MIGRATIONS_TABLE} records migrations of \
                 {:?}: it was dropped after idmint created it, and with it every worker's \
                 high-water mark, so it is not recreated silently; restore it, or to start \
                 afresh on purpose delete the rows of component {:?} from {MIGRATIONS_TABLE}",
                    self.table,
                    self.db.redacted_url(),
                    set.component(),
                    set.component(),
                ),
            ));
        }
        self.check_columns(&columns)
    }

    /// The table's column names, upper-cased (empty: no such table).
    async fn columns(&self) -> Result<Vec<String>> {
        self.columns_of(&self.table).await
    }

    /// The column names of `table` (as the database names it), upper-cased
    /// (empty: no such table).
    async fn columns_of(&self, table: &Identifier) -> Result<Vec<String>> {
        let columns: Vec<String> = on_pool!(self.db.pool(), p => {
            sqlx::query_scalar(&self.sql.columns)
                .bind(table.as_str())
                .fetch_all(p)
                .await
        })
        .map_err(backend_error("check table"))?;
        Ok(columns.iter().map(|c| c.to_ascii_uppercase()).collect())
    }

    fn check_columns(&self, columns: &[String]) -> Result<()> {
        let missing = missing_columns(&COLUMNS, columns);
        if missing.is_empty() {
            return Ok(());
        }
        Err(RegistryError::config(
            REGISTRY,
            format!(
                "table {} in {} is not an idmint worker table: it lacks column(s) {}; configure \
             another table name",
                self.table,
                self.db.redacted_url(),
                missing.join(", ")
            ),
        ))
    }

    /// Runs `fut` within the timeout.
    ///
    /// A call that ran out of time while the pool holds no connection at
    /// all spent it connecting: sqlx retries a refused connection (a server
    /// down or restarting) until the timeout, so that is
    /// [`RegistryError::Unavailable`], which the keeper asks again about
    /// within about half a second, not a busy database's timeout, which it
    /// paces by how long the call took (a down PostgreSQL's 2 s calls were
    /// followed by 8 s pauses, and a node resumed up to that long after the
    /// database was back). A busy database keeps its connections, so its
    /// timeouts stay timeouts. A call that starts with no connection is
    /// bounded by three quarters of the timeout, so that it ends (and says
    /// why) before the keeper's own bound of the same length cuts it off
    /// as a plain timeout.
    async fn timed<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let bound = if self.no_connection() {
            self.config.timeout.mul_f64(0.75)
        } else {
            self.config.timeout
        };
        match bounded(REGISTRY, operation, bound, fut).await {
            Err(RegistryError::Timeout { after, .. }) if self.no_connection() => {
                Err(RegistryError::unavailable(
                    REGISTRY,
                    operation,
                    format!("no connection to the database could be made within {after:?}"),
                ))
            }
            other => other,
        }
    }

    /// Whether the pool holds no connection, open or opening.
    fn no_connection(&self) -> bool {
        on_pool!(self.db.pool(), p => p.size() == 0)
    }

    fn ttl_us(&self) -> i64 {
        i64::try_from(self.config.lease_ttl.as_micros()).unwrap_or(i64::MAX)
    }

    async fn exec_rows(
        &self,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> std::result::Result<u64, sqlx::Error> {
        on_pool!(self.db.pool(), p => {
            bind_all!(sqlx::query(sql), binds)
                .execute(p)
                .await
                .map(|r| r.rows_affected())
        })
    }

    async fn fetch_ints(
        &self,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> std::result::Result<Vec<i64>, sqlx::Error> {
        on_pool!(self.db.pool(), p => {
            bind_all!(sqlx::query_scalar::<_, i64>(sql), binds)
                .fetch_all(p)
                .await
        })
    }

    async fn fetch_opt_int(
        &self,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> std::result::Result<Option<Option<i64>>, sqlx::Error> {
        on_pool!(self.db.pool(), p => {
            bind_all!(sqlx::query_scalar::<_, Option<i64>>(sql), binds)
                .fetch_optional(p)
                .await
        })
    }

    /// `(worker, reported µs, age µs)` rows of a peers statement.
    async fn fetch_reports(
        &self,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> std::result::Result<Vec<(i64, i64, Option<i64>)>, sqlx::Error> {
        on_pool!(self.db.pool(), p => {
            bind_all!(sqlx::query_as::<_, (i64, i64, Option<i64>)>(sql), binds)
                .fetch_all(p)
                .await
        })
    }

    async fn fetch_texts3(
        &self,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> std::result::Result<Option<(String, String, String)>, sqlx::Error> {
        on_pool!(self.db.pool(), p => {
            bind_all!(sqlx::query_as::<_, (String, String, String)>(sql), binds)
                .fetch_optional(p)
                .await
        })
    }

    async fn fetch_texts1(
        &self,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> std::result::Result<Option<String>, sqlx::Error> {
        on_pool!(self.db.pool(), p => {
            bind_all!(sqlx::query_scalar::<_, String>(sql), binds)
                .fetch_optional(p)
                .await
        })
    }

    async fn fetch_fleet(
        &self,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> std::result::Result<Vec<FleetRow>, sqlx::Error> {
        on_pool!(self.db.pool(), p => {
            bind_all!(sqlx::query_as::<_, FleetRow>(sql), binds)
                .fetch_all(p)
                .await
        })
    }

    /// Runs `sql`, an `INSERT` into an auto-increment table (ending in
    /// `RETURNING ID` except on MySQL), and returns the new row's `ID`;
    /// `None` when it inserted nothing (an `INSERT … SELECT` whose
    /// condition failed).
    async fn insert_returning_id(
        &self,
        sql: &str,
        binds: &[Bind<'_>],
    ) -> std::result::Result<Option<i64>, sqlx::Error> {
        match self.db.pool() {
            // MySQL has no `INSERT … RETURNING` (MariaDB only from 10.5).
            Pool::MySql(p) => {
                let done = bind_all!(sqlx::query(sql), binds).execute(p).await?;
                if done.rows_affected() == 0 {
                    return Ok(None);
                }
                Ok(Some(
                    i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX),
                ))
            }
            Pool::Postgres(_) | Pool::Sqlite(_) => {
                let ids = self.fetch_ints(sql, binds).await?;
                Ok(ids.first().copied())
            }
        }
    }

    /// A lease granted by a statement sent at `before`.
    fn lease_from(&self, before: Instant) -> Lease {
        Lease {
            ttl: self.config.lease_ttl,
            valid_until: before + self.config.lease_ttl,
        }
    }

    /// The error for a claim whose row no longer carries its token (or whose lease
    /// ran out), naming the table and cluster.
    fn lease_lost(&self, claim: &Claim, reason: &str) -> RegistryError {
        RegistryError::LeaseLost {
            registry: REGISTRY,
            worker: claim.worker,
            reason: format!(
                "{reason} (table {:?}, cluster {:?})",
                self.config.table, self.config.cluster
            ),
        }
    }

    /// Runs `sql` within the timeout and returns the rows it changed;
    /// database errors name `operation`.
    async fn exec(&self, operation: &'static str, sql: &str, binds: &[Bind<'_>]) -> Result<u64> {
        self.timed(operation, async {
            self.exec_rows(sql, binds)
                .await
                .map_err(backend_error(operation))
        })
        .await
    }

    /// `Ok` when a renewal changed a row (`rows`), else why not: the epoch
    /// moved, or the lease is lost.
    async fn renewed(&self, claim: &Claim, rows: u64) -> Result<()> {
        if rows == 0 {
            return Err(self
                .refused(
                    claim,
                    "renew",
                    "renew found the lease expired or held under another token".to_owned(),
                )
                .await);
        }
        Ok(())
    }

    /// Renews a row keyed by its `ID` (the disposable modes: no lease, only
    /// the liveness deadline), in the claim's epoch.
    async fn renew_by_id(&self, sql: &str, claim: &Claim) -> Result<Option<Lease>> {
        let [table, cluster, epoch] = self.guard_binds(&claim.token);
        let binds = [
            Bind::Int(self.ttl_us()),
            Bind::Int(i64::from(claim.worker)),
            Bind::Text(&claim.token),
            table,
            cluster,
            epoch,
        ];
        let rows = self.exec("renew", sql, &binds).await?;
        self.renewed(claim, rows).await?;
        Ok(None)
    }

    /// Raises the mark with `sql`, whose binds are the mark (twice), the
    /// reported time, `key` (the cluster in lease mode, the TTL in the
    /// disposable modes), the worker, the token and the epoch condition's.
    async fn persist(
        &self,
        sql: &str,
        key: Bind<'_>,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let mark_us = mark_to_us_ceil(mark);
        // Before the write: a write that lands but whose answer is lost
        // still counts (persist, then allow: nothing past it is issued
        // unless the write succeeded, so this bound is never low).
        self.note_mark(mark_us);
        let [table, cluster, epoch] = self.guard_binds(&claim.token);
        let binds = [
            Bind::Int(mark_us),
            Bind::Int(mark_us),
            Bind::Int(reported.as_microsecond()),
            key,
            Bind::Int(i64::from(claim.worker)),
            Bind::Text(&claim.token),
            table,
            cluster,
            epoch,
        ];
        let rows = self.exec("persist mark", sql, &binds).await?;
        if rows == 0 {
            return Err(self
                .refused(
                    claim,
                    "persist mark",
                    format!(
                        "mark {mark} not persisted: the lease expired or is held under another \
                         token"
                    ),
                )
                .await);
        }
        Ok(())
    }

    /// Records a clean stop with `sql`, whose binds are the mark, the
    /// reported time, `key` (the cluster), the worker, the token and the
    /// epoch condition's: fenced as [`Base::persist`], but the mark is set
    /// to `high` rather than raised.
    async fn record_stop(
        &self,
        sql: &str,
        key: Bind<'_>,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let [table, cluster, epoch] = self.guard_binds(&claim.token);
        let binds = [
            Bind::Int(mark_to_us_ceil(high)),
            Bind::Int(reported.as_microsecond()),
            key,
            Bind::Int(i64::from(claim.worker)),
            Bind::Text(&claim.token),
            table,
            cluster,
            epoch,
        ];
        let rows = self.exec("record clean stop", sql, &binds).await?;
        if rows == 0 {
            return Err(self
                .refused(
                    claim,
                    "record clean stop",
                    format!(
                        "clean stop at {high} not recorded: the lease expired or is held under \
                         another token"
                    ),
                )
                .await);
        }
        Ok(())
    }

    /// The live peers `sql` lists, as `(worker, reported, age)` rows: the
    /// age in microseconds by the database's clock (`NULL` for a report not
    /// stamped by its holding; a negative one, the database's clock stepped
    /// back since, is taken as 0).
    async fn peers(&self, sql: &str, binds: &[Bind<'_>]) -> Result<Vec<PeerReport>> {
        const OP: &str = "list peers";
        let rows = self
            .timed(OP, async {
                self.fetch_reports(sql, binds)
                    .await
                    .map_err(backend_error(OP))
            })
            .await?;
        rows.into_iter()
            .map(|(worker, reported_us, age_us)| {
                let report = PeerReport::new(worker_u32(worker)?, timestamp_from_us(reported_us)?);
                Ok(match age_us {
                    Some(us) => report.with_age(Duration::from_micros(us.max(0).unsigned_abs())),
                    None => report,
                })
            })
            .collect()
    }

    /// The rows of a fleet listing.
    async fn fleet_rows(&self, sql: &str, binds: &[Bind<'_>]) -> Result<Vec<FleetRow>> {
        const OP: &str = "list fleet";
        self.timed(OP, async {
            self.fetch_fleet(sql, binds)
                .await
                .map_err(backend_error(OP))
        })
        .await
    }

    /// One fleet row as a member, without a lease. `holder`: the host
    /// column holds a whole `host (address:port)` (the uid-generator side
    /// table's `HOLDER`).
    fn fleet_member(
        (worker, host, address, port, left_us, reported_us, mark_us): FleetRow,
        holder: bool,
    ) -> Result<FleetMember> {
        let mut row = FleetMember::new(worker_u32(worker)?);
        if holder {
            if let Some((h, a, p)) = parse_holder(&host) {
                row.host = Some(h);
                row.address = Some(a);
                row.port = Some(p);
            }
        } else {
            row.host = Some(host);
            row.address = Some(address);
            // uid-generator-style rows may hold a non-numeric PORT.
            row.port = port.parse().ok();
        }
        row.live = left_us.unwrap_or(0) > 0;
        row.reported = reported_us.map(timestamp_from_us).transpose()?;
        row.mark = mark_us.map(timestamp_from_us).transpose()?;
        Ok(row)
    }

    /// Gives the claim's row back with `sql`; a row no longer ours is left
    /// alone.
    async fn release(&self, sql: &str, claim: &Claim, binds: &[Bind<'_>]) -> Result<()> {
        let rows = self.exec("release", sql, binds).await?;
        if rows == 0 {
            // Already gone (expired and taken over, or released twice): nothing of
            // ours to give back, and another holder's row must not be touched.
            tracing::debug!(
                worker = claim.worker,
                "sql registry: release found nothing to release"
            );
        }
        Ok(())
    }
}

/// The fleet's recent window as the negative offset the fleet statements
/// bind: rows whose deadline ended no earlier than that are listed.
fn recent_us() -> i64 {
    -i64::try_from(FLEET_RECENT.as_micros()).unwrap_or(i64::MAX)
}

/// The refusal of a given worker ID in a mode whose worker IDs are row IDs.
fn row_ids_only(mode: &str) -> RegistryError {
    RegistryError::Unsupported {
        registry: REGISTRY,
        operation: "claiming a given worker ID",
        reason: Some(format!("in {mode} mode worker IDs are row IDs")),
    }
}

/// The host, address and port of a holder written as [`NodeIdentity`]'s
/// `Display` (`host (address:port)`).
fn parse_holder(text: &str) -> Option<(String, String, u16)> {
    let (host, rest) = text.rsplit_once(" (")?;
    let (address, port) = rest.strip_suffix(')')?.rsplit_once(':')?;
    Some((host.to_owned(), address.to_owned(), port.parse().ok()?))
}

/// A statement's failure: [`RegistryError::Unavailable`] when the database
/// can't be reached or can't serve now ([`unreachable_sqlx`]), which the
/// keeper asks again about soon, else [`RegistryError::Backend`].
fn backend_error(operation: &'static str) -> impl Fn(sqlx::Error) -> RegistryError {
    move |e| {
        if unreachable_sqlx(&e) {
            RegistryError::unavailable(REGISTRY, operation, e)
        } else {
            RegistryError::backend(REGISTRY, operation, e)
        }
    }
}

/// Maps what `idmint-sql` reports while connecting and migrating: its timeouts
/// to [`RegistryError::Timeout`]; bad URLs, options and a schema newer than this
/// binary knows to [`RegistryError::Config`] (restarting won't fix them); the
/// rest to [`RegistryError::Backend`].
fn sql_error(operation: &'static str) -> impl Fn(idmint_sql::Error) -> RegistryError {
    move |e| match e {
        idmint_sql::Error::Timeout { after, .. } => RegistryError::Timeout {
            registry: REGISTRY,
            operation,
            after,
        },
        e @ idmint_sql::Error::SchemaTooNew { .. } => {
            RegistryError::config(REGISTRY, e.to_string())
        }
        e if e.is_config() => RegistryError::config(REGISTRY, e.to_string()),
        e if unreachable(&e) => RegistryError::unavailable(REGISTRY, operation, e),
        e => RegistryError::Backend {
            registry: REGISTRY,
            operation,
            message: e.to_string(),
        },
    }
}

/// Whether `e` says the database can't be reached or can't serve now, so
/// that the same call may succeed later with nothing changed: no server
/// listening or a broken connection (I/O), a pool that found no connection
/// in time, a server starting up or shutting down (PostgreSQL's class 57P,
/// class 08 connection exceptions; MySQL/MariaDB's 1053 "server shutdown in
/// progress"), or no writable host among several (a promotion under way).
/// A refused password or a missing database is an answer, not
/// this: a start fails on it at once.
fn unreachable(e: &idmint_sql::Error) -> bool {
    // A URL listing a primary and its standbys where none takes writes now:
    // a promotion under way.
    if matches!(e, idmint_sql::Error::NoWritableHost { .. }) {
        return true;
    }
    let source = match e {
        idmint_sql::Error::Connect { source, .. }
        | idmint_sql::Error::Database { source, .. }
        | idmint_sql::Error::Migration { source, .. } => source,
        _ => return false,
    };
    unreachable_sqlx(source)
}

/// [`unreachable`] of sqlx's own error.
fn unreachable_sqlx(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("57P") || code.starts_with("08") || code == "1053"
        }),
        _ => false,
    }
}

fn worker_u32(worker: i64) -> Result<u32> {
    u32::try_from(worker).map_err(|_| RegistryError::Backend {
        registry: REGISTRY,
        operation: "read worker",
        message: format!("stored worker id {worker} is not a u32"),
    })
}

/// Marks are stored in whole microseconds, rounded up: raising a mark is always
/// safe, lowering it (even by a nanosecond) is not.
fn mark_to_us_ceil(mark: Timestamp) -> i64 {
    let us = mark.as_microsecond();
    if mark.subsec_nanosecond() % 1000 > 0 {
        us + 1
    } else {
        us
    }
}

fn timestamp_from_us(us: i64) -> Result<Timestamp> {
    Timestamp::from_microsecond(us).map_err(|e| RegistryError::Backend {
        registry: REGISTRY,
        operation: "read timestamp",
        message: format!("stored time {us} us is out of range: {e}"),
    })
}

/// A fresh claim token: the epoch the claim is made in, `/`, and 128 bits.
/// Only uniqueness matters (it fences a stale holder), not secrecy: std's
/// per-instance random hash keys, a process-wide counter, the process id and
/// the wall time make collisions practically impossible. At most 49
/// characters (the token columns hold 64).
fn new_token(epoch: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let a = random_u64() ^ n;
    let b = std::hash::BuildHasher::hash_one(
        &std::collections::hash_map::RandomState::new(),
        (nanos, n, std::process::id()),
    );
    format!("{epoch}/{a:016x}{b:016x}")
}

/// The epoch a token of [`new_token`] was made in; `None` for another token.
fn token_epoch(token: &str) -> Option<&str> {
    token.split_once('/').map(|(epoch, _)| epoch)
}

/// The names of `want` that `have` (a table's columns, upper-cased by
/// `Base::columns_of`) lacks: what every table check reports.
fn missing_columns<'a>(want: &[&'a str], have: &[String]) -> Vec<&'a str> {
    want.iter()
        .copied()
        .filter(|c| !have.iter().any(|h| h == c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_up_to_the_microsecond() {
        let t = Timestamp::new(1_700_000_000, 1_000_001).unwrap();
        assert_eq!(mark_to_us_ceil(t), 1_700_000_000_001_001);
        let t = Timestamp::new(1_700_000_000, 1_000_000).unwrap();
        assert_eq!(mark_to_us_ceil(t), 1_700_000_000_001_000);
    }

    #[test]
    fn config_is_validated() {
        let bad = [
            SqlConfig::new(SqlMode::Lease).with_table("x; DROP TABLE y"),
            SqlConfig::new(SqlMode::Lease).with_table("1abc"),
            SqlConfig::new(SqlMode::Lease).with_cluster(""),
            SqlConfig::new(SqlMode::Lease).with_lease_ttl(Duration::ZERO),
            SqlConfig::new(SqlMode::Lease).with_max_connections(0),
            SqlConfig::new(SqlMode::Lease).with_table("IDMINT_REGISTRY_EPOCH"),
        ];
        for config in bad {
            let err = config.validate().unwrap_err();
            assert_eq!(err.code(), "registry_config", "{config:?}");
        }
        SqlConfig::new(SqlMode::Disposable).validate().unwrap();
    }

    /// Refused before any I/O, with the password hidden wherever it was.
    #[tokio::test]
    async fn unknown_scheme_is_a_config_error() {
        let config = SqlConfig::new(SqlMode::Lease);
        let err = SqlRegistry::connect("oracle://u:pw@h/db?password=pw2", config)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "registry_config", "{err}");
        let text = err.to_string();
        assert!(text.contains("oracle://u:***@h/db?password=***"), "{text}");
        assert!(!text.contains("pw"), "{text}");
    }

    #[tokio::test]
    async fn uid_generator_mode_refuses_sqlite_before_any_io() {
        let dir = std::env::temp_dir().join(format!("idmint-uidgen-{}.db", random_u64()));
        let url = format!("sqlite:{}", dir.display());
        let err = SqlRegistry::connect(&url, SqlConfig::new(SqlMode::UidGenerator))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "registry_config", "{err}");
        assert!(err.to_string().contains("not SQLite"), "{err}");
        assert!(!dir.exists(), "nothing created");
    }

    #[test]
    fn sql_errors_map_to_registry_errors() {
        let too_new = idmint_sql::Error::SchemaTooNew {
            component: "registry:t".to_owned(),
            recorded: 2,
            known: 1,
        };
        let err = sql_error("migrate")(too_new);
        assert_eq!(err.code(), "registry_config", "{err}");
        assert!(err.to_string().contains("schema version 2"), "{err}");
        let timeout = idmint_sql::Error::Timeout {
            operation: "waiting for the migration lock",
            url: "postgres://h/db".to_owned(),
            after: Duration::from_secs(1),
        };
        assert!(matches!(
            sql_error("migrate")(timeout),
            RegistryError::Timeout {
                operation: "migrate",
                ..
            }
        ));
        let failed = idmint_sql::Error::Database {
            operation: "read migrations",
            source: sqlx::Error::RowNotFound,
        };
        assert_eq!(sql_error("migrate")(failed).code(), "registry_backend");
        let refused = idmint_sql::Error::Connect {
            url: "postgres://h/db".to_owned(),
            source: sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into()),
        };
        let err = sql_error("connect")(refused);
        assert_eq!(err.code(), "registry_unavailable", "{err}");
        assert!(err.is_transient());
    }

    #[test]
    fn holders_parse_back_into_identities() {
        let node = NodeIdentity {
            host: "web (eu) 1".into(),
            address: "::1".into(),
            port: 8080,
        };
        assert_eq!(
            parse_holder(&node.to_string()),
            Some(("web (eu) 1".to_owned(), "::1".to_owned(), 8080))
        );
        assert_eq!(parse_holder("10.0.0.1"), None);
    }

    #[test]
    fn tokens_are_distinct_and_name_their_epoch() {
        let a = new_token("0123456789abcdef");
        let b = new_token("0123456789abcdef");
        assert_ne!(a, b);
        assert_eq!(a.len(), 49);
        assert_eq!(token_epoch(&a), Some("0123456789abcdef"));
        assert_eq!(token_epoch("not-the-token"), None);
    }
}
