//! [`Database`]: a connection pool to PostgreSQL, MySQL/MariaDB or SQLite,
//! opened from a URL.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::failover::{
    Attached, Failover, HostReport, SEARCH_INTERVAL, Server, Target, Topology, with_hooks,
};
use crate::hosts::HostUrl;
use crate::redact::redact_url;

/// How to open a [`Database`].
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use idmint_sql::ConnectOptions;
///
/// let options = ConnectOptions::new("postgres://idmint@db/ids".to_owned())
///     .with_max_connections(8)
///     .with_connect_timeout(Duration::from_secs(2));
/// assert_eq!(options.max_connections(), 8);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    url: String,
    max_connections: u32,
    connect_timeout: Duration,
    busy_timeout: Duration,
    lock_timeout: Duration,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("url", &redact_url(&self.url))
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("busy_timeout", &self.busy_timeout)
            .field("lock_timeout", &self.lock_timeout)
            .finish()
    }
}

impl ConnectOptions {
    /// The default pool size.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 4;
    /// The default bound on opening the pool, and on waiting for a pooled
    /// connection later.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default time SQLite waits for another connection's write lock.
    pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default bound on waiting for the migration lock.
    pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

    /// Options for the database at `url`, with the defaults: 4 connections,
    /// connect timeout 5 s, SQLite busy timeout 5 s, migration lock timeout 30 s.
    ///
    /// `url` is a sqlx URL: `postgres://user:password@host:5432/db`,
    /// `mysql://root@host:3306/db` (or `mariadb://`), `sqlite://path/to/file.db`
    /// or `sqlite:path` (the file is created if missing); or, for a primary
    /// with standbys, a host list: libpq's
    /// `postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write` or
    /// `mysql://u@h1:3306,h2:3306/db` (see the crate docs).
    pub const fn new(url: String) -> ConnectOptions {
        ConnectOptions {
            url,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            busy_timeout: Self::DEFAULT_BUSY_TIMEOUT,
            lock_timeout: Self::DEFAULT_LOCK_TIMEOUT,
        }
    }

    /// The size of the pool (at least 1).
    pub const fn with_max_connections(mut self, n_connections: u32) -> ConnectOptions {
        self.max_connections = n_connections;
        self
    }

    /// The bound on opening the pool, and on waiting for a free pooled
    /// connection afterwards (at least 1 ms).
    pub const fn with_connect_timeout(mut self, timeout: Duration) -> ConnectOptions {
        self.connect_timeout = timeout;
        self
    }

    /// How long SQLite waits for another connection's write lock before
    /// failing with `SQLITE_BUSY` (ignored by the other databases).
    pub const fn with_busy_timeout(mut self, timeout: Duration) -> ConnectOptions {
        self.busy_timeout = timeout;
        self
    }

    /// The bound on waiting for the migration lock in [`Database::migrate`].
    pub const fn with_lock_timeout(mut self, timeout: Duration) -> ConnectOptions {
        self.lock_timeout = timeout;
        self
    }

    /// The URL, password included.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The pool size.
    pub const fn max_connections(&self) -> u32 {
        self.max_connections
    }

    /// The connect timeout.
    pub const fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The SQLite busy timeout.
    pub const fn busy_timeout(&self) -> Duration {
        self.busy_timeout
    }

    /// The migration lock timeout.
    pub const fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }

    fn validate(&self) -> Result<()> {
        if self.max_connections == 0 {
            return Err(Error::InvalidOptions(
                "max connections 0 leaves no connection".to_owned(),
            ));
        }
        if self.connect_timeout < Duration::from_millis(1) {
            return Err(Error::InvalidOptions(format!(
                "connect timeout {:?} is below 1ms",
                self.connect_timeout
            )));
        }
        Ok(())
    }
}

/// The sqlx pool of a [`Database`], one variant per [`Dialect`].
///
/// Write backend-independent code once with [`on_pool!`](crate::on_pool).
/// Not `non_exhaustive` so that the macro can match it from other crates; a
/// new backend is a breaking change anyway.
#[derive(Debug, Clone)]
pub enum Pool {
    /// PostgreSQL.
    Postgres(PgPool),
    /// MySQL or MariaDB.
    MySql(MySqlPool),
    /// SQLite.
    Sqlite(SqlitePool),
}

/// Runs `$body` with `$p` bound to the [`Pool`]'s sqlx pool; the body is
/// compiled once per backend, so it may use any sqlx API the three share.
///
/// # Examples
/// ```
/// use idmint_sql::{Database, on_pool};
///
/// async fn ping(db: &Database) -> Result<i64, sqlx::Error> {
///     on_pool!(db.pool(), p => sqlx::query_scalar::<_, i64>("SELECT 1").fetch_one(p).await)
/// }
/// ```
#[macro_export]
macro_rules! on_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            $crate::Pool::Postgres($p) => $body,
            $crate::Pool::MySql($p) => $body,
            $crate::Pool::Sqlite($p) => $body,
        }
    };
}

/// A value bound into a statement whose binds are chosen at run time (by
/// [`bind_all!`](crate::bind_all)); the three backends all encode these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind<'a> {
    /// A `BIGINT`.
    Int(i64),
    /// Text.
    Text(&'a str),
    /// Text or `NULL`.
    OptText(Option<&'a str>),
}

/// Binds each [`Bind`] of `$binds`, in order, to `$query` (a `sqlx::query`,
/// `query_as` or `query_scalar`): one loop for every statement whose binds
/// are chosen at run time.
///
/// # Examples
/// ```
/// use idmint_sql::{Bind, Database, bind_all, on_pool};
///
/// async fn count(db: &Database, table_like: &str) -> Result<i64, sqlx::Error> {
///     let binds = [Bind::Text(table_like), Bind::Int(0)];
///     on_pool!(db.pool(), p => {
///         bind_all!(sqlx::query_scalar::<_, i64>("SELECT ? IS NOT NULL AND ? = 0"), &binds)
///             .fetch_one(p)
///             .await
///     })
/// }
/// ```
#[macro_export]
macro_rules! bind_all {
    ($query:expr, $binds:expr) => {{
        let mut query = $query;
        for bind in $binds {
            query = match *bind {
                $crate::Bind::Int(value) => query.bind(value),
                $crate::Bind::Text(value) => query.bind(value),
                $crate::Bind::OptText(value) => query.bind(value),
            };
        }
        query
    }};
}

/// A connection pool to one database, opened by URL.
///
/// - Cheap to clone (the pool is shared) and thread-safe.
/// - Opening it does I/O ([`Database::connect`]); nothing else here starts
///   tasks or touches the database unasked.
/// - `Debug` and errors show the URL with its password replaced by `***`.
#[derive(Clone)]
pub struct Database {
    pool: Pool,
    url: Arc<str>,
    lock_timeout: Duration,
    /// For a URL with several hosts (or `target_session_attrs`): the hosts,
    /// the one the pool connects to, and the searches that move it.
    topology: Option<Arc<dyn Topology>>,
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Database")
            .field("dialect", &self.dialect())
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Opens a pool to the database at `options.url()` and checks that it
    /// answers.
    ///
    /// - PostgreSQL and MySQL/MariaDB (`mariadb://` is read as `mysql://`):
    ///   sqlx's defaults; MySQL sessions run in UTC (sqlx sets `time_zone`).
    ///   With several hosts, the first writable one in the URL's order, each
    ///   host asked within its share of the connect timeout, and asked again
    ///   for up to two fifths of the connect timeout while none is writable
    ///   (a promotion under way); the pool then follows a failover (see
    ///   `failover.rs`).
    /// - SQLite: the file is created if missing, switched to WAL (readers
    ///   don't block the writer; one writer at a time), with the busy timeout.
    ///
    /// # Errors
    /// - [`Error::InvalidUrl`] for an unsupported scheme or a malformed URL,
    ///   [`Error::InvalidOptions`] for a pool of 0 or a zero timeout.
    /// - [`Error::Timeout`] when the database does not answer within the
    ///   connect timeout.
    /// - [`Error::Connect`] when it refuses (authentication, unknown database, …).
    /// - [`Error::NoWritableHost`] when the URL lists several hosts (or sets
    ///   `target_session_attrs`) and none of them takes writes: each is a
    ///   standby, read-only or unreachable.
    pub async fn connect(options: &ConnectOptions) -> Result<Database> {
        options.validate()?;
        let dialect = Dialect::from_url(&options.url)?;
        let redacted: Arc<str> = redact_url(&options.url).into();
        let bad_url = |e: sqlx::Error| Error::InvalidUrl {
            url: redacted.to_string(),
            reason: e.to_string(),
        };
        let connect_error = |source| match source {
            // The pool gave up waiting for its first connection: a timeout,
            // however it was reached.
            sqlx::Error::PoolTimedOut => Error::Timeout {
                operation: "connect",
                url: redacted.to_string(),
                after: options.connect_timeout,
            },
            source => Error::Connect {
                url: redacted.to_string(),
                source,
            },
        };
        let n = options.max_connections;
        let timeout = options.connect_timeout;
        let mut topology: Option<Arc<dyn Topology>> = None;
        let opening = async {
            let pool = match dialect {
                Dialect::Postgres => {
                    let hosts = HostUrl::parse(&options.url, dialect)?;
                    let pool_options = PgPoolOptions::new()
                        .max_connections(n)
                        .acquire_timeout(timeout);
                    if hosts.needs_writable {
                        let base =
                            PgConnectOptions::from_str(&hosts.first_host_url).map_err(bad_url)?;
                        let targets = hosts
                            .hosts
                            .iter()
                            .map(|h| Target {
                                host: h.to_string(),
                                options: base.clone().host(&h.name).port(h.port),
                            })
                            .collect();
                        let (pool, attached) =
                            open_failover(targets, pool_options, &redacted, timeout).await?;
                        topology = Some(attached);
                        Pool::Postgres(pool)
                    } else {
                        let connect = PgConnectOptions::from_str(&options.url).map_err(bad_url)?;
                        let pool = pool_options
                            .connect_with(connect)
                            .await
                            .map_err(connect_error)?;
                        Pool::Postgres(pool)
                    }
                }
                Dialect::MySql => {
                    let hosts = HostUrl::parse(&options.url, dialect)?;
                    let pool_options = MySqlPoolOptions::new()
                        .max_connections(n)
                        .acquire_timeout(timeout);
                    if hosts.needs_writable {
                        let base =
                            MySqlConnectOptions::from_str(&mysql_scheme(&hosts.first_host_url))
                                .map_err(bad_url)?;
                        let targets = hosts
                            .hosts
                            .iter()
                            .map(|h| Target {
                                host: h.to_string(),
                                options: base.clone().host(&h.name).port(h.port),
                            })
                            .collect();
                        let (pool, attached) =
                            open_failover(targets, pool_options, &redacted, timeout).await?;
                        topology = Some(attached);
                        Pool::MySql(pool)
                    } else {
                        let connect = MySqlConnectOptions::from_str(&mysql_scheme(&options.url))
                            .map_err(bad_url)?;
                        let pool = pool_options
                            .connect_with(connect)
                            .await
                            .map_err(connect_error)?;
                        Pool::MySql(pool)
                    }
                }
                Dialect::Sqlite => {
                    let connect = SqliteConnectOptions::from_str(&options.url)
                        .map_err(bad_url)?
                        .create_if_missing(true)
                        .journal_mode(SqliteJournalMode::Wal)
                        .busy_timeout(options.busy_timeout);
                    // Switching a fresh file to WAL while another process
                    // opens it can fail with SQLITE_BUSY without consulting
                    // the busy handler; retry (bounded by the timeout).
                    loop {
                        let pool = SqlitePoolOptions::new()
                            .max_connections(n)
                            .acquire_timeout(timeout)
                            .connect_with(connect.clone())
                            .await;
                        match pool {
                            Ok(pool) => break Pool::Sqlite(pool),
                            Err(e) if crate::is_retryable(&e) => {
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                            Err(e) => return Err(connect_error(e)),
                        }
                    }
                }
            };
            Ok(pool)
        };
        let pool = tokio::time::timeout(timeout, opening)
            .await
            .map_err(|_| Error::Timeout {
                operation: "connect",
                url: redacted.to_string(),
                after: timeout,
            })??;
        Ok(Database {
            pool,
            url: redacted,
            lock_timeout: options.lock_timeout,
            topology,
        })
    }

    /// The pool, to run statements on (see [`on_pool!`](crate::on_pool)).
    ///
    /// On a database opened from several hosts, a pool left with no
    /// connection at all starts a search for the writable host here, in a
    /// task of its own (see [`survey`] for the roles, and the crate docs).
    pub fn pool(&self) -> &Pool {
        if let Some(topology) = &self.topology {
            topology.nudge();
        }
        &self.pool
    }

    /// The host new connections go to, `host:port`, when the URL named
    /// several hosts (or set `target_session_attrs`); `None` otherwise.
    pub fn target_host(&self) -> Option<&str> {
        self.topology.as_deref().map(|t| t.target_host())
    }

    /// Each host of the URL and its role (primary, standby, unreachable), on
    /// connections of their own; empty for a one-host URL opened without
    /// `target_session_attrs` (use [`survey`] for those).
    pub async fn hosts(&self) -> Vec<HostReport> {
        match &self.topology {
            Some(topology) => topology.survey().await,
            None => Vec::new(),
        }
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        match self.pool {
            Pool::Postgres(_) => Dialect::Postgres,
            Pool::MySql(_) => Dialect::MySql,
            Pool::Sqlite(_) => Dialect::Sqlite,
        }
    }

    /// The URL with any password replaced by `***`, for messages.
    pub fn redacted_url(&self) -> &str {
        &self.url
    }

    /// The bound on waiting for the migration lock.
    pub(crate) fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }

    /// Closes the pool: waits for checked-out connections to come back and
    /// closes them all. Later calls fail with `sqlx::Error::PoolClosed`.
    pub async fn close(&self) {
        on_pool!(&self.pool, p => p.close().await)
    }
}

/// `mariadb://` read as `mysql://`, the scheme sqlx knows.
fn mysql_scheme(url: &str) -> String {
    match url.get(..10) {
        Some(s) if s.eq_ignore_ascii_case("mariadb://") => format!("mysql://{}", &url[10..]),
        _ => url.to_owned(),
    }
}

/// Opens a pool on the first writable host of `targets` (in their order),
/// with the failover hooks installed; see the `failover` module.
async fn open_failover<DB: Server>(
    targets: Vec<Target<DB>>,
    pool_options: sqlx::pool::PoolOptions<DB>,
    url: &Arc<str>,
    timeout: Duration,
) -> Result<(sqlx::Pool<DB>, Arc<dyn Topology>)> {
    // Each host gets its share of the connect timeout, so that a first host
    // that swallows packets (a dead machine) leaves time to ask the next.
    let n_hosts = u32::try_from(targets.len()).unwrap_or(u32::MAX).max(1);
    let probe_timeout = (timeout / n_hosts).max(Duration::from_millis(1));
    let failover = Arc::new(Failover::new(Arc::clone(url), targets, probe_timeout));
    // No writable host may mean a promotion under way (it takes about a
    // second): ask again for two fifths of the connect timeout before giving
    // up, so that a node starting during a failover waits for it, and ends
    // with this error rather than with a caller's timeout of half the connect
    // timeout (the registry's), which says less.
    let asking_since = Instant::now();
    let idx = loop {
        match failover.first_writable().await {
            Ok(idx) => break idx,
            Err(hosts) if asking_since.elapsed() >= timeout * 2 / 5 => {
                return Err(Error::NoWritableHost {
                    url: url.to_string(),
                    hosts: hosts
                        .iter()
                        .map(|h| format!("{} is {}", h.host, h.role))
                        .collect::<Vec<_>>()
                        .join("; "),
                });
            }
            Err(_) => tokio::time::sleep(SEARCH_INTERVAL).await,
        }
    };
    let pool = with_hooks(pool_options, &failover)
        .connect_with(failover.options(idx).clone())
        .await
        .map_err(|source| match source {
            sqlx::Error::PoolTimedOut => Error::Timeout {
                operation: "connect",
                url: url.to_string(),
                after: timeout,
            },
            source => Error::Connect {
                url: url.to_string(),
                source,
            },
        })?;
    let pool = Arc::new(pool);
    failover.attach(&pool, idx);
    let handle = (*pool).clone();
    Ok((handle, Arc::new(Attached { failover, pool })))
}

/// Each host of `options.url()` and its role (primary, standby, unreachable),
/// asked in the URL's order on a connection of its own with the connect
/// timeout; for `idmint config check`. A SQLite URL has no hosts (an empty
/// list).
///
/// # Errors
/// [`Error::InvalidUrl`] and [`Error::InvalidOptions`] as for
/// [`Database::connect`]; an unreachable host is a report, not an error.
pub async fn survey(options: &ConnectOptions) -> Result<Vec<HostReport>> {
    options.validate()?;
    let dialect = Dialect::from_url(&options.url)?;
    let redacted: Arc<str> = redact_url(&options.url).into();
    let bad_url = |e: sqlx::Error| Error::InvalidUrl {
        url: redacted.to_string(),
        reason: e.to_string(),
    };
    let timeout = options.connect_timeout;
    match dialect {
        Dialect::Sqlite => Ok(Vec::new()),
        Dialect::Postgres => {
            let hosts = HostUrl::parse(&options.url, dialect)?;
            let base = PgConnectOptions::from_str(&hosts.first_host_url).map_err(bad_url)?;
            let targets: Vec<Target<sqlx::Postgres>> = hosts
                .hosts
                .iter()
                .map(|h| Target {
                    host: h.to_string(),
                    options: base.clone().host(&h.name).port(h.port),
                })
                .collect();
            Ok(Failover::new(redacted, targets, timeout).survey().await)
        }
        Dialect::MySql => {
            let hosts = HostUrl::parse(&options.url, dialect)?;
            let base = MySqlConnectOptions::from_str(&mysql_scheme(&hosts.first_host_url))
                .map_err(bad_url)?;
            let targets: Vec<Target<sqlx::MySql>> = hosts
                .hosts
                .iter()
                .map(|h| Target {
                    host: h.to_string(),
                    options: base.clone().host(&h.name).port(h.port),
                })
                .collect();
            Ok(Failover::new(redacted, targets, timeout).survey().await)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_options_are_refused_before_any_io() {
        let url = "postgres://u:pw@127.0.0.1:1/db".to_owned();
        let err = Database::connect(&ConnectOptions::new(url.clone()).with_max_connections(0))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidOptions(_)), "{err}");
        let err = Database::connect(&ConnectOptions::new(url).with_connect_timeout(Duration::ZERO))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidOptions(_)), "{err}");
        let err = Database::connect(&ConnectOptions::new("redis://h".to_owned()))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidUrl { .. }), "{err}");
    }

    #[tokio::test]
    async fn sqlite_file_is_created_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let url = format!("sqlite://{}", path.display());
        let db = Database::connect(&ConnectOptions::new(url)).await.unwrap();
        assert_eq!(db.dialect(), Dialect::Sqlite);
        assert!(path.exists());
        let mode: String = on_pool!(db.pool(), p => {
            sqlx::query_scalar("PRAGMA journal_mode").fetch_one(p).await
        })
        .unwrap();
        assert_eq!(mode, "wal");
        db.close().await;
    }

    #[tokio::test]
    async fn unreachable_server_times_out_or_is_refused() {
        // Port 1 on loopback: nothing listens, the connection is refused.
        let url = "postgres://u:secret@127.0.0.1:1/db".to_owned();
        let err = Database::connect(
            &ConnectOptions::new(url).with_connect_timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, Error::Connect { .. } | Error::Timeout { .. }),
            "{err}"
        );
        assert!(err.is_transient());
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
