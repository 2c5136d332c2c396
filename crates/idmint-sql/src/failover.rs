//! Following the writable server of a host list: which host a pool connects
//! to, how a connection to a standby or a demoted primary is dropped, and how
//! the pool finds the new primary after a failover.
//!
//! # Design
//! One sqlx pool per [`Database`](crate::Database), as for a one-host URL
//! (every consumer keeps using [`Database::pool`](crate::Database::pool)),
//! pointed at one host of the list at a time: its *target*. sqlx opens every
//! new connection with the pool's current connect options and re-reads them
//! at each attempt, and [`sqlx::Pool::set_connect_options`] changes them in
//! place, so moving the target moves every later connection. Hooks
//! keep the target on the writable host (a round trip each, on
//! idmint's few statements a second):
//!
//! - `after_connect` checks each new connection's role (PostgreSQL:
//!   `pg_is_in_recovery()` and `transaction_read_only`; MySQL/MariaDB:
//!   `@@read_only` and `@@innodb_read_only`). A read-only one is refused,
//!   which makes sqlx drop it and try again after a short backoff, and
//!   starts a search for the writable host first;
//! - `before_acquire` runs the same query on a pooled connection before it is
//!   handed out, in place of sqlx's ping (so it costs no extra round trip): a
//!   connection whose server went away fails it, and one whose server was
//!   demoted (MySQL's `SET GLOBAL read_only = 1` keeps sessions open) answers
//!   read-only; either way it is dropped and a search starts;
//! - `after_release` runs it once more when a connection comes back from a
//!   statement: a statement that failed because its server went away (or
//!   was demoted under it) starts the search at once, before anything else
//!   waits on a new connection to the dead target;
//! - [`Failover::nudge`], called by `Database::pool`: a pool left with no
//!   connection at all (every one dropped, and new ones refused by a target
//!   that is gone, which sqlx retries without running any hook) starts a
//!   search in a task of its own: at most one at a time, and one a second.
//!
//! A *search* asks each host in the URL's order, on a connection of its own,
//! and moves the target to the first writable one. Without one (a promotion
//! under way), it moves the target to the first host that answers at all, so
//! that `after_connect` keeps asking there and the pool connects as soon as
//! that host is promoted. Searches run one at a time and at most every
//! [`SEARCH_INTERVAL`]; a caller that finds one running returns at once,
//! since the target that search sets serves it too.
//!
//! What this does not decide: whether the promoted server remembers what the
//! old one had. The registry's epoch and the segment store's ledger and
//! epoch marker check that on the connections this pool gives them, as for
//! any server that changed under a one-host URL.
//!
//! The pool is reached from the hooks through a [`Weak`] handle (the hooks
//! live inside the pool, so a strong one would keep it alive forever); the
//! strong one lives in the `Database`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use sqlx::Connection;
use sqlx::mysql::MySql;
use sqlx::pool::PoolConnectionMetadata;
use sqlx::postgres::Postgres;

/// The shortest time between two searches for the writable host.
pub(crate) const SEARCH_INTERVAL: Duration = Duration::from_millis(100);

/// The shortest time between two searches started by a pool left without
/// connections ([`Failover::nudge`]).
const NUDGE_INTERVAL: Duration = Duration::from_secs(1);

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one host of a URL is, as a connection to it found out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostRole {
    /// It takes writes: a PostgreSQL primary whose sessions are not
    /// read-only, a MySQL/MariaDB server with `read_only` and
    /// `innodb_read_only` off.
    Primary,
    /// It answers but refuses writes: a PostgreSQL standby (in recovery) or a
    /// read-only session, a MySQL/MariaDB replica with `read_only` on.
    Standby,
    /// It did not answer within the connect timeout, or refused.
    Unreachable {
        /// What went wrong.
        reason: String,
    },
}

impl fmt::Display for HostRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostRole::Primary => f.write_str("primary"),
            HostRole::Standby => f.write_str("standby (read-only)"),
            HostRole::Unreachable { reason } => write!(f, "unreachable: {reason}"),
        }
    }
}

/// One host of a URL and its role, as [`survey`](crate::survey) found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostReport {
    /// `host:port` (an IPv6 address in brackets).
    pub host: String,
    /// What it is.
    pub role: HostRole,
    /// How a primary replicates to the servers streaming from it; `None`
    /// for other roles, or when the server would not say.
    pub replication: Option<Replication>,
}

/// The servers replicating from a primary, by whether a commit waits for
/// them: a failover to one that doesn't may lose the last commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Replication {
    /// Standbys a commit waits for: PostgreSQL `sync` and `quorum`
    /// standbys, MariaDB/MySQL semi-synchronous replicas.
    pub synchronous: u32,
    /// Standbys a commit doesn't wait for: PostgreSQL `async` and
    /// `potential` standbys, MariaDB/MySQL replicas that are not
    /// semi-synchronous (all of them while semi-sync is off or has fallen
    /// back).
    pub asynchronous: u32,
    /// Standbys whose state the login may not see (PostgreSQL shows
    /// `sync_state` to superusers and `pg_monitor` only).
    pub unknown: u32,
}

/// A database with servers that can be primary or standby: how to ask a
/// connection which it is.
pub(crate) trait Server: sqlx::Database {
    /// True when the connection's server takes writes.
    fn is_writable(conn: &mut Self::Connection) -> BoxFuture<'_, Result<bool, sqlx::Error>>;

    /// How the connection's server (a primary) replicates.
    fn replication(conn: &mut Self::Connection) -> BoxFuture<'_, Result<Replication, sqlx::Error>>;
}

fn count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

impl Server for Postgres {
    fn is_writable(conn: &mut Self::Connection) -> BoxFuture<'_, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            // libpq's `primary` asks pg_is_in_recovery(), its `read-write`
            // transaction_read_only; idmint needs both to be false.
            let (in_recovery, read_only): (bool, String) = sqlx::query_as(
                "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')",
            )
            .fetch_one(conn)
            .await?;
            Ok(!in_recovery && read_only == "off")
        })
    }

    fn replication(conn: &mut Self::Connection) -> BoxFuture<'_, Result<Replication, sqlx::Error>> {
        Box::pin(async move {
            let (synchronous, asynchronous, unknown): (i64, i64, i64) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')), \
                 count(*) FILTER (WHERE sync_state IN ('async', 'potential')), \
                 count(*) FILTER (WHERE sync_state IS NULL) FROM pg_stat_replication",
            )
            .fetch_one(conn)
            .await?;
            Ok(Replication {
                synchronous: count(synchronous),
                asynchronous: count(asynchronous),
                unknown: count(unknown),
            })
        })
    }
}

impl Server for MySql {
    fn is_writable(conn: &mut Self::Connection) -> BoxFuture<'_, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            // innodb_read_only too: a server started with it refuses InnoDB
            // writes even with read_only off.
            let (read_only, innodb_read_only): (i64, i64) = sqlx::query_as(
                "SELECT CAST(@@global.read_only AS SIGNED), \
                 CAST(@@global.innodb_read_only AS SIGNED)",
            )
            .fetch_one(conn)
            .await?;
            Ok(read_only == 0 && innodb_read_only == 0)
        })
    }

    fn replication(conn: &mut Self::Connection) -> BoxFuture<'_, Result<Replication, sqlx::Error>> {
        Box::pin(async move {
            // MariaDB's status names; MySQL 8.0.26+ names them
            // Rpl_semi_sync_source_* and counts replicas nowhere in status,
            // so there only semi-sync's clients are seen.
            let rows: Vec<(String, String)> = sqlx::query_as(
                "SELECT UPPER(VARIABLE_NAME), VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                 WHERE UPPER(VARIABLE_NAME) IN ('SLAVES_CONNECTED', \
                 'RPL_SEMI_SYNC_MASTER_STATUS', 'RPL_SEMI_SYNC_MASTER_CLIENTS', \
                 'RPL_SEMI_SYNC_SOURCE_STATUS', 'RPL_SEMI_SYNC_SOURCE_CLIENTS')",
            )
            .fetch_all(conn)
            .await?;
            let value = |names: &[&str]| {
                rows.iter()
                    .find(|(name, _)| names.contains(&name.as_str()))
                    .map(|(_, v)| v.as_str())
            };
            let number = |names: &[&str]| value(names).and_then(|v| v.parse::<i64>().ok());
            let semi_sync_on =
                value(&["RPL_SEMI_SYNC_MASTER_STATUS", "RPL_SEMI_SYNC_SOURCE_STATUS"])
                    .is_some_and(|v| v.eq_ignore_ascii_case("ON"));
            let semi_sync = if semi_sync_on {
                count(
                    number(&[
                        "RPL_SEMI_SYNC_MASTER_CLIENTS",
                        "RPL_SEMI_SYNC_SOURCE_CLIENTS",
                    ])
                    .unwrap_or(0),
                )
            } else {
                0
            };
            let connected = number(&["SLAVES_CONNECTED"]).map(count);
            Ok(match connected {
                Some(all) => Replication {
                    synchronous: semi_sync.min(all),
                    asynchronous: all.saturating_sub(semi_sync),
                    unknown: 0,
                },
                None => Replication {
                    synchronous: semi_sync,
                    asynchronous: 0,
                    unknown: 0,
                },
            })
        })
    }
}

type Options<DB> = <<DB as sqlx::Database>::Connection as Connection>::Options;

/// One host of the list and the options that connect to it.
pub(crate) struct Target<DB: Server> {
    pub(crate) host: String,
    pub(crate) options: Options<DB>,
}

/// What one pass over the hosts found.
struct Found {
    writable: Option<usize>,
    answered: Option<usize>,
}

/// The hosts of a pool, its target, and the searches that move it; see the
/// module docs.
pub(crate) struct Failover<DB: Server> {
    url: Arc<str>,
    targets: Vec<Target<DB>>,
    probe_timeout: Duration,
    pool: OnceLock<Weak<sqlx::Pool<DB>>>,
    target: AtomicUsize,
    searching: AtomicBool,
    last_search: Mutex<Option<Instant>>,
}

impl<DB: Server> Failover<DB> {
    pub(crate) fn new(url: Arc<str>, targets: Vec<Target<DB>>, probe_timeout: Duration) -> Self {
        Failover {
            url,
            targets,
            probe_timeout,
            pool: OnceLock::new(),
            target: AtomicUsize::new(0),
            searching: AtomicBool::new(false),
            last_search: Mutex::new(None),
        }
    }

    /// The options of host `idx`.
    pub(crate) fn options(&self, idx: usize) -> &Options<DB> {
        &self.targets[idx].options
    }

    /// The host the pool connects to now.
    pub(crate) fn target_host(&self) -> &str {
        &self.targets[self.target.load(Ordering::Relaxed)].host
    }

    /// Hands the pool to the hooks (once, right after it is opened on host
    /// `idx`).
    pub(crate) fn attach(&self, pool: &Arc<sqlx::Pool<DB>>, idx: usize) {
        self.target.store(idx, Ordering::Relaxed);
        let _ = self.pool.set(Arc::downgrade(pool));
    }

    /// The role of host `idx`, on a connection of its own.
    pub(crate) async fn probe(&self, idx: usize) -> HostRole {
        let target = &self.targets[idx];
        let asked = async {
            let mut conn = DB::Connection::connect_with(&target.options).await?;
            let writable = DB::is_writable(&mut conn).await;
            let _ = conn.close().await;
            writable
        };
        match tokio::time::timeout(self.probe_timeout, asked).await {
            Ok(Ok(true)) => HostRole::Primary,
            Ok(Ok(false)) => HostRole::Standby,
            Ok(Err(e)) => HostRole::Unreachable {
                reason: e.to_string(),
            },
            Err(_) => HostRole::Unreachable {
                reason: format!("no answer within {:?}", self.probe_timeout),
            },
        }
    }

    /// Every host's role, in the URL's order, and how each primary
    /// replicates.
    pub(crate) async fn survey(&self) -> Vec<HostReport> {
        let mut reports = Vec::with_capacity(self.targets.len());
        for idx in 0..self.targets.len() {
            let role = self.probe(idx).await;
            let replication = if role == HostRole::Primary {
                self.replication(idx).await
            } else {
                None
            };
            reports.push(HostReport {
                host: self.targets[idx].host.clone(),
                role,
                replication,
            });
        }
        reports
    }

    /// How host `idx` replicates, on a connection of its own; `None` when
    /// it doesn't answer in time or won't say.
    async fn replication(&self, idx: usize) -> Option<Replication> {
        let target = &self.targets[idx];
        let asked = async {
            let mut conn = DB::Connection::connect_with(&target.options).await?;
            let replication = DB::replication(&mut conn).await;
            let _ = conn.close().await;
            replication
        };
        match tokio::time::timeout(self.probe_timeout, asked).await {
            Ok(Ok(replication)) => Some(replication),
            Ok(Err(e)) => {
                tracing::debug!(host = %target.host, error = %e, "could not read the replication state");
                None
            }
            Err(_) => None,
        }
    }

    /// The first writable host in the URL's order, or `Err` with what each
    /// host was.
    pub(crate) async fn first_writable(&self) -> Result<usize, Vec<HostReport>> {
        let mut reports = Vec::new();
        for idx in 0..self.targets.len() {
            let role = self.probe(idx).await;
            if role == HostRole::Primary {
                return Ok(idx);
            }
            reports.push(HostReport {
                host: self.targets[idx].host.clone(),
                role,
                replication: None,
            });
        }
        Err(reports)
    }

    async fn find(&self) -> Found {
        let mut answered = None;
        for idx in 0..self.targets.len() {
            match self.probe(idx).await {
                HostRole::Primary => {
                    return Found {
                        writable: Some(idx),
                        answered: answered.or(Some(idx)),
                    };
                }
                HostRole::Standby => {
                    answered = answered.or(Some(idx));
                }
                HostRole::Unreachable { .. } => {}
            }
        }
        Found {
            writable: None,
            answered,
        }
    }

    /// Moves the target to the first writable host (or, with none, the first
    /// that answers); see the module docs. Returns at once when another
    /// search runs or one ended less than [`SEARCH_INTERVAL`] ago.
    pub(crate) async fn search(&self) {
        if self.searching.swap(true, Ordering::AcqRel) {
            return;
        }
        // Cleared however this ends: a search in a hook is dropped with the
        // acquire that ran it when that times out, and a flag left set would
        // stop every later search.
        let _searching = Clear(&self.searching);
        let recent = self
            .last_search
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < SEARCH_INTERVAL);
        if !recent {
            let found = self.find().await;
            if let Some(idx) = found.writable.or(found.answered) {
                self.retarget(idx, found.writable.is_some());
            } else {
                tracing::warn!(
                    url = %self.url,
                    "no host of the database url answers; the pool keeps trying {}",
                    self.target_host()
                );
            }
            *self.last_search.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        }
    }

    fn retarget(&self, idx: usize, writable: bool) {
        let previous = self.target.swap(idx, Ordering::AcqRel);
        if previous == idx {
            return;
        }
        if let Some(pool) = self.pool.get().and_then(Weak::upgrade) {
            pool.set_connect_options(self.targets[idx].options.clone());
        }
        let (from, to) = (&self.targets[previous].host, &self.targets[idx].host);
        if writable {
            tracing::warn!(url = %self.url, "database failover: new connections go to {to} (was {from})");
        } else {
            tracing::warn!(
                url = %self.url,
                "database failover: no host is writable yet; waiting on {to} (was {from})"
            );
        }
    }

    /// The `after_connect` hook: a connection to a read-only server is an
    /// error (sqlx drops it and tries again), after a search.
    pub(crate) fn after_connect<'c>(
        self: &Arc<Self>,
        conn: &'c mut DB::Connection,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        let this = Arc::clone(self);
        Box::pin(async move {
            match DB::is_writable(conn).await {
                Ok(true) => Ok(()),
                Ok(false) => {
                    let host = this.target_host().to_owned();
                    this.search().await;
                    Err(sqlx::Error::Protocol(format!(
                        "{host} is read-only (a standby, or a demoted primary); looking for the \
                         writable host of {}",
                        this.url
                    )))
                }
                Err(e) => {
                    this.search().await;
                    Err(e)
                }
            }
        })
    }

    /// The `before_acquire` hook: a pooled connection whose server went away
    /// or turned read-only is dropped (`false`), after a search.
    pub(crate) fn before_acquire<'c>(
        self: &Arc<Self>,
        conn: &'c mut DB::Connection,
    ) -> BoxFuture<'c, Result<bool, sqlx::Error>> {
        let this = Arc::clone(self);
        Box::pin(async move {
            match DB::is_writable(conn).await {
                Ok(true) => Ok(true),
                Ok(false) | Err(_) => {
                    this.search().await;
                    Ok(false)
                }
            }
        })
    }

    /// The `after_release` hook: the same check as `before_acquire`, on a
    /// connection coming back from a statement.
    pub(crate) fn after_release<'c>(
        self: &Arc<Self>,
        conn: &'c mut DB::Connection,
    ) -> BoxFuture<'c, Result<bool, sqlx::Error>> {
        self.before_acquire(conn)
    }

    /// Starts a search in a task of its own when the pool has no connection
    /// left (see the module docs); a no-op outside a Tokio runtime.
    pub(crate) fn nudge(self: &Arc<Self>, pool: &sqlx::Pool<DB>) {
        if pool.size() > 0 || self.searching.load(Ordering::Acquire) {
            return;
        }
        let due = self
            .last_search
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none_or(|at| at.elapsed() >= NUDGE_INTERVAL);
        if !due {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let this = Arc::clone(self);
            runtime.spawn(async move { this.search().await });
        }
    }
}

/// Clears a flag when dropped.
struct Clear<'a>(&'a AtomicBool);

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A multi-host pool's [`Failover`] and the strong handle on the pool its
/// hooks reach weakly, type-erased for [`Database`](crate::Database).
pub(crate) struct Attached<DB: Server> {
    pub(crate) failover: Arc<Failover<DB>>,
    pub(crate) pool: Arc<sqlx::Pool<DB>>,
}

/// What a `Database` asks of its [`Attached`] failover, whatever the backend.
pub(crate) trait Topology: Send + Sync {
    fn nudge(&self);
    fn target_host(&self) -> &str;
    fn survey(&self) -> BoxFuture<'_, Vec<HostReport>>;
}

impl<DB: Server> Topology for Attached<DB> {
    fn nudge(&self) {
        self.failover.nudge(&self.pool);
    }

    fn target_host(&self) -> &str {
        self.failover.target_host()
    }

    fn survey(&self) -> BoxFuture<'_, Vec<HostReport>> {
        Box::pin(self.failover.survey())
    }
}

/// Pool options with the hooks of the module docs installed.
pub(crate) fn with_hooks<DB: Server>(
    options: sqlx::pool::PoolOptions<DB>,
    failover: &Arc<Failover<DB>>,
) -> sqlx::pool::PoolOptions<DB> {
    let (on_connect, on_acquire, on_release) = (
        Arc::clone(failover),
        Arc::clone(failover),
        Arc::clone(failover),
    );
    options
        // `before_acquire` asks the role instead: a round trip either way.
        .test_before_acquire(false)
        .after_connect(move |conn, _: PoolConnectionMetadata| on_connect.after_connect(conn))
        .before_acquire(move |conn, _: PoolConnectionMetadata| on_acquire.before_acquire(conn))
        .after_release(move |conn, _: PoolConnectionMetadata| on_release.after_release(conn))
}
