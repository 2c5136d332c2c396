//! The `sql` registry against real PostgreSQL, MariaDB and SQLite: the
//! registry contract (`crate::contract`, in lease mode) once per database, and
//! what only the SQL registry does (disposable mode, clusters sharing a table,
//! configuration errors, its schema migrations and the adoption of tables that
//! idmint created before it had migrations).
//!
//! Each test gets a table of its own (dropped at the end, with its migration
//! records), so tests run in parallel without seeing each other. Nodes are separate `SqlRegistry`
//! instances, each with a pool of its own (one connection), as separate
//! processes would be. Lease scenarios use a 1 s TTL to keep the module fast.
//!
//! Services: `IDMINT_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `IDMINT_TEST_MYSQL_URL`
//! (default `mysql://root@127.0.0.1:3306/test`); SQLite uses a temporary file.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint_registry::sql::{EPOCH_TABLE, SqlConfig, SqlMode, SqlRegistry};
use idmint_registry::{RegistryError, WorkerRegistry};
use idmint_sql::{ConnectOptions, MIGRATIONS_TABLE, on_pool};
use jiff::{SignedDuration, Timestamp};

use crate::contract::{Backend, Holding};
use crate::support::{exec_sql, exec_sql_on_drop, identity, require_service, unique_name};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    Postgres,
    MariaDb,
    Sqlite,
}

/// One test's database: its URL and its own table, dropped on drop.
pub struct SqlBackend {
    db: Database,
    url: String,
    table: String,
    sqlite_file: Option<PathBuf>,
}

impl SqlBackend {
    /// The backend for `test` on `db`, or `None` (after a loud SKIPPED line)
    /// when the service is down outside CI.
    pub fn new(db: Database, test: &str) -> Option<SqlBackend> {
        let table = format!("it_{}", abbreviate(&unique_name(test)));
        let (url, sqlite_file) = match db {
            Database::Postgres => {
                let url = std::env::var("IDMINT_TEST_POSTGRES_URL")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
                if !require_service("PostgreSQL", reachable(&url, 5432)) {
                    return None;
                }
                (url, None)
            }
            Database::MariaDb => {
                let url = std::env::var("IDMINT_TEST_MYSQL_URL")
                    .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
                if !require_service("MariaDB", reachable(&url, 3306)) {
                    return None;
                }
                (url, None)
            }
            Database::Sqlite => {
                let path = std::env::temp_dir().join(format!("idmint-{table}.db"));
                (format!("sqlite:{}", path.display()), Some(path))
            }
        };
        Some(SqlBackend {
            db,
            url,
            table,
            sqlite_file,
        })
    }

    fn config(&self, mode: SqlMode) -> SqlConfig {
        SqlConfig::new(mode)
            .with_table(&self.table)
            .with_cluster(format!("{}-cluster", self.table))
            .with_max_connections(1)
    }

    /// A node: a registry with a pool of its own.
    async fn node_with(&self, config: SqlConfig) -> SqlRegistry {
        SqlRegistry::connect(&self.url, config)
            .await
            .unwrap_or_else(|e| panic!("connect to {:?} failed: {e}", self.db))
    }

    /// The migration component of the test's table (its names are lower case,
    /// so the same on every database).
    fn component(&self) -> String {
        format!("registry:{}", self.table)
    }

    /// A plain connection to the test's database, to look behind the registry.
    async fn admin(&self) -> idmint_sql::Database {
        idmint_sql::Database::connect(&ConnectOptions::new(self.url.clone()))
            .await
            .unwrap_or_else(|e| panic!("admin connect to {:?} failed: {e}", self.db))
    }

    /// A 400 ms lease and a 300 ms mark window: after the database forgot,
    /// claims are held for 700 ms.
    fn forgetful(&self, mode: SqlMode) -> SqlConfig {
        self.config(mode)
            .with_lease_ttl(Duration::from_millis(400))
            .with_mark_window(Duration::from_millis(300))
    }

    /// The epoch row of the test's table and `cluster`: `(epoch, server,
    /// floor µs, reason)`.
    async fn epoch_row(&self, cluster: &str) -> Option<(String, String, i64, String)> {
        let admin = self.admin().await;
        let sql = format!(
            "SELECT EPOCH_ID, SERVER_IDENTITY, FLOOR_US, HOLD_REASON FROM {EPOCH_TABLE} \
             WHERE WORKER_TABLE = '{}' AND CLUSTER = '{cluster}'",
            self.table
        );
        let row = on_pool!(admin.pool(), p => {
            sqlx::query_as::<_, (String, String, i64, String)>(&sql)
                .fetch_optional(p)
                .await
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
        admin.close().await;
        row
    }

    /// What a promoted replica or a backup restored into another server
    /// looks like from the epoch's side: the server it records is not the
    /// one answering.
    async fn record_another_server(&self, cluster: &str) {
        let admin = self.admin().await;
        exec_sql(
            &admin,
            &[format!(
                "UPDATE {EPOCH_TABLE} SET SERVER_IDENTITY = 'the-old-primary' \
                 WHERE WORKER_TABLE = '{}' AND CLUSTER = '{cluster}'",
                self.table
            )],
        )
        .await;
        admin.close().await;
    }

    /// The versions of the registry's component recorded in the database.
    async fn recorded_versions(&self) -> Vec<i64> {
        let admin = self.admin().await;
        let recorded = admin.applied_migrations(&self.component()).await.unwrap();
        admin.close().await;
        recorded.into_iter().map(|m| m.version).collect()
    }
}

#[async_trait]
impl Backend for SqlBackend {
    fn kind(&self) -> &'static str {
        "sql"
    }

    fn holding(&self) -> Holding {
        Holding::Lease
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn node(&self, ttl: Duration) -> Arc<dyn WorkerRegistry> {
        Arc::new(
            self.node_with(self.config(SqlMode::Lease).with_lease_ttl(ttl))
                .await,
        )
    }
}

impl Drop for SqlBackend {
    /// Drops the test's table (or file), even after a panic. Best effort: a
    /// failure leaves litter, not a wrong result.
    fn drop(&mut self) {
        if let Some(path) = &self.sqlite_file {
            for suffix in ["", "-wal", "-shm"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
            return;
        }
        let statements = vec![
            format!("DROP TABLE IF EXISTS {}", self.table),
            format!(
                "DELETE FROM {MIGRATIONS_TABLE} WHERE component = '{}'",
                self.component()
            ),
            format!(
                "DELETE FROM {EPOCH_TABLE} WHERE WORKER_TABLE = '{}'",
                self.table
            ),
        ];
        exec_sql_on_drop(self.url.clone(), statements);
    }
}

/// `clusters-sharing-a-table-1234-…` → `cstat_1234_…`: the first letters of the
/// words, then the digits, within MySQL's 64-character names.
fn abbreviate(name: &str) -> String {
    let mut out = String::new();
    for word in name.split('-') {
        if word.bytes().all(|b| b.is_ascii_digit()) {
            out.push('_');
            out.push_str(word);
        } else {
            out.extend(word.split('_').filter_map(|w| w.chars().next()));
        }
    }
    out
}

/// Whether the default local service answers; an explicit URL is assumed up (a
/// failure to connect to it then fails the test instead of skipping it).
fn reachable(url: &str, port: u16) -> bool {
    if url.contains("127.0.0.1") || url.contains("localhost") {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
    } else {
        true
    }
}

/// A mark with whole microseconds, so it reads back exactly.
fn mark_at(offset: SignedDuration) -> Timestamp {
    let t = Timestamp::now() + offset;
    Timestamp::from_microsecond(t.as_microsecond()).unwrap()
}

async fn clusters_sharing_a_table_stay_apart(env: SqlBackend) {
    let red = env
        .node_with(env.config(SqlMode::Lease).with_cluster("red"))
        .await;
    let blue = env
        .node_with(env.config(SqlMode::Lease).with_cluster("blue"))
        .await;
    let r = red.claim(&identity(1), 1).await.unwrap();
    let b = blue.claim(&identity(2), 1).await.unwrap();
    assert_eq!((r.worker, b.worker), (0, 0));
    red.persist_mark(&r, Timestamp::now(), Timestamp::now())
        .await
        .unwrap();
    assert!(
        blue.peers(&b).await.unwrap().is_empty(),
        "red is not blue's peer"
    );
    let err = red.claim(&identity(3), 1).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::Exhausted { in_use: 1, .. }),
        "{err}"
    );
}

/// Disposable rows have no lease: the fleet lists them with `lease_left`
/// `None`, live while their liveness deadline lasts, and drops released ones.
async fn the_fleet_in_disposable_mode_has_no_leases(env: SqlBackend) {
    let ttl = Duration::from_secs(1);
    let node = env
        .node_with(env.config(SqlMode::Disposable).with_lease_ttl(ttl))
        .await;
    let a = node.claim(&identity(1), 8).await.unwrap();
    let b = node.claim(&identity(2), 8).await.unwrap();
    let c = node.claim(&identity(3), 8).await.unwrap();
    let mark = mark_at(SignedDuration::from_secs(3));
    node.persist_mark(&a, mark, mark).await.unwrap();
    let fleet = node.fleet().await.unwrap();
    assert_eq!(
        fleet.iter().map(|m| m.worker).collect::<Vec<_>>(),
        [a.worker, b.worker, c.worker],
        "{:?}",
        env.db
    );
    for (member, n) in fleet.iter().zip(1..) {
        assert!(member.is_node(&identity(n)), "{member:?}");
        assert!(member.live && member.lease_left.is_none(), "{member:?}");
    }
    assert_eq!((fleet[0].mark, fleet[0].reported), (Some(mark), Some(mark)));
    node.release(&b).await.unwrap();
    // `c` stops reporting: once its deadline passes it is listed, not live.
    tokio::time::sleep(ttl + Duration::from_millis(300)).await;
    node.persist_mark(&a, mark, mark).await.unwrap();
    let fleet = node.fleet().await.unwrap();
    let rows: Vec<(u32, bool)> = fleet.iter().map(|m| (m.worker, m.live)).collect();
    assert_eq!(rows, [(a.worker, true), (c.worker, false)], "{:?}", env.db);
}

async fn disposable_ids_increase_and_are_never_reused(env: SqlBackend) {
    let config = env.config(SqlMode::Disposable);
    let node = env.node_with(config).await;
    let mut claims = Vec::new();
    for i in 0..3 {
        let claim = node.claim(&identity(i), 4).await.unwrap();
        assert_eq!(claim.stored_mark, None, "a disposable worker ID is new");
        assert_eq!(claim.lease, None, "disposable workers have no lease");
        claims.push(claim);
    }
    let workers: Vec<u32> = claims.iter().map(|c| c.worker).collect();
    assert_eq!(
        workers,
        [1, 2, 3],
        "{:?}: row ids start at 1 and increase",
        env.db
    );

    let err = node.claim(&identity(9), 4).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Exhausted {
                in_use: 3,
                range: 4,
                ..
            }
        ),
        "{:?}: {err}",
        env.db
    );

    assert_eq!(node.renew(&claims[0]).await.unwrap(), None);
    let mark = mark_at(SignedDuration::from_secs(3));
    node.persist_mark(&claims[0], mark, Timestamp::now())
        .await
        .unwrap();
    node.persist_mark(&claims[1], mark, mark).await.unwrap();
    let peers = node.peers(&claims[0]).await.unwrap();
    assert_eq!(peers.len(), 1, "{peers:?}");
    assert_eq!((peers[0].worker, peers[0].reported), (2, mark));

    // Released IDs are not handed out again.
    node.release(&claims[0]).await.unwrap();
    let err = node.claim(&identity(9), 4).await.unwrap_err();
    assert!(matches!(err, RegistryError::Exhausted { .. }), "{err}");
    let later = node.claim(&identity(9), 16).await.unwrap();
    assert!(
        later.worker > 4,
        "{:?}: worker {} reused",
        env.db,
        later.worker
    );
    let err = node.persist_mark(&claims[0], mark, mark).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::LeaseLost { worker: 1, .. }),
        "{err}"
    );
    // Row IDs are never chosen: a given worker ID can't be claimed.
    let err = node.claim_worker(&identity(9), 7, 16).await.unwrap_err();
    assert_eq!(err.code(), "registry_unsupported", "{err}");
    assert!(err.to_string().contains("disposable mode"), "{err}");
}

/// A report's age is the database's: only where the holding that wrote the
/// report stamped it (`REPORTED_TOKEN`). A node of an idmint before the
/// stamp (migration 2) that takes a row over and reports leaves the earlier
/// holding's stamp behind: its report's age is unknown, not that stamp's
/// (which would make the peer's clock look later than it is). Disposable
/// rows are stamped alike.
async fn a_report_stamped_by_another_holding_has_no_age(env: SqlBackend) {
    let node = env.node_with(env.config(SqlMode::Lease)).await;
    let me = node.claim(&identity(1), 16).await.unwrap();
    let peer = node.claim(&identity(2), 16).await.unwrap();
    let reported = mark_at(SignedDuration::ZERO);
    node.persist_mark(&peer, mark_at(SignedDuration::from_secs(3)), reported)
        .await
        .unwrap();
    let age = |peers: Vec<idmint_registry::PeerReport>| {
        let p = peers.into_iter().find(|p| p.worker == peer.worker).unwrap();
        assert_eq!(p.reported, reported, "{:?}", env.db);
        p.age
    };
    let fresh = age(node.peers(&me).await.unwrap());
    assert!(
        fresh.is_some_and(|a| a < Duration::from_secs(2)),
        "{:?}: {fresh:?}",
        env.db
    );
    // An old binary's holding of the row: another token, the same report
    // column written, the stamp left as it was.
    let admin = env.admin().await;
    exec_sql(
        &admin,
        &[format!(
            "UPDATE {} SET TOKEN = 'an-older-idmint' WHERE WORKER = {}",
            env.table, peer.worker
        )],
    )
    .await;
    admin.close().await;
    assert_eq!(age(node.peers(&me).await.unwrap()), None, "{:?}", env.db);

    let node = env
        .node_with(env.config(SqlMode::Disposable).with_cluster("disposable"))
        .await;
    let me = node.claim(&identity(1), 16).await.unwrap();
    let peer = node.claim(&identity(2), 16).await.unwrap();
    node.persist_mark(&peer, mark_at(SignedDuration::from_secs(3)), reported)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let peers = node.peers(&me).await.unwrap();
    let age = peers[0].age.expect("a disposable row's report is stamped");
    assert!(
        age >= Duration::from_millis(280) && age < Duration::from_secs(3),
        "{:?}: {age:?}",
        env.db
    );
}

async fn bad_configs_and_urls_are_typed_errors(env: SqlBackend) {
    let err = SqlRegistry::connect(&env.url, env.config(SqlMode::Lease).with_table("a b"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    let node = env.node_with(env.config(SqlMode::Lease)).await;
    let err = node.claim(&identity(1), 0).await.unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    let debug = format!("{node:?}");
    assert!(debug.contains(&env.table), "{debug}");
}

/// The table exactly as idmint created it before the registry had migrations
/// (its `CREATE TABLE IF NOT EXISTS`, unquoted name and all), on `db`.
fn pre_migration_ddl(db: Database, t: &str) -> String {
    match db {
        Database::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                ID BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                CLUSTER VARCHAR(128) NOT NULL,
                WORKER BIGINT NULL,
                HOST_NAME VARCHAR(255) NOT NULL,
                PORT VARCHAR(64) NOT NULL,
                ADDRESS VARCHAR(255) NOT NULL,
                TYPE INT NOT NULL,
                LAUNCH_DATE DATE NOT NULL,
                MODIFIED TIMESTAMPTZ NOT NULL,
                CREATED TIMESTAMPTZ NOT NULL,
                TOKEN VARCHAR(64) NULL,
                LEASE_EXPIRES TIMESTAMPTZ NULL,
                MARK_US BIGINT NULL,
                REPORTED_US BIGINT NULL,
                UNIQUE (CLUSTER, WORKER)
            )"
        ),
        Database::MariaDb => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                ID BIGINT NOT NULL AUTO_INCREMENT,
                CLUSTER VARCHAR(128) NOT NULL,
                WORKER BIGINT NULL,
                HOST_NAME VARCHAR(255) NOT NULL,
                PORT VARCHAR(64) NOT NULL,
                ADDRESS VARCHAR(255) NOT NULL,
                TYPE INT NOT NULL,
                LAUNCH_DATE DATE NOT NULL,
                MODIFIED DATETIME(6) NOT NULL,
                CREATED DATETIME(6) NOT NULL,
                TOKEN VARCHAR(64) NULL,
                LEASE_EXPIRES DATETIME(6) NULL,
                MARK_US BIGINT NULL,
                REPORTED_US BIGINT NULL,
                PRIMARY KEY (ID),
                UNIQUE KEY uk_cluster_worker (CLUSTER, WORKER)
            ) ENGINE=InnoDB"
        ),
        Database::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                ID INTEGER PRIMARY KEY AUTOINCREMENT,
                CLUSTER TEXT NOT NULL,
                WORKER INTEGER NULL,
                HOST_NAME TEXT NOT NULL,
                PORT TEXT NOT NULL,
                ADDRESS TEXT NOT NULL,
                TYPE INTEGER NOT NULL,
                LAUNCH_DATE TEXT NOT NULL,
                MODIFIED TEXT NOT NULL,
                CREATED TEXT NOT NULL,
                TOKEN TEXT NULL,
                LEASE_EXPIRES INTEGER NULL,
                MARK_US INTEGER NULL,
                REPORTED_US INTEGER NULL,
                UNIQUE (CLUSTER, WORKER)
            )"
        ),
    }
}

async fn a_fresh_table_records_its_migration(env: SqlBackend) {
    assert!(env.recorded_versions().await.is_empty());
    let node = env.node_with(env.config(SqlMode::Lease)).await;
    let admin = env.admin().await;
    let recorded = admin.applied_migrations(&env.component()).await.unwrap();
    admin.close().await;
    assert_eq!(recorded.len(), 2, "{:?}: {recorded:?}", env.db);
    assert_eq!((recorded[0].version, recorded[1].version), (1, 2));
    assert!(
        recorded[0].description.contains("worker table"),
        "{recorded:?}"
    );
    assert!(
        recorded[1].description.contains("REPORTED_AT"),
        "{recorded:?}"
    );
    let claim = node.claim(&identity(1), 4).await.unwrap();
    assert_eq!((claim.worker, claim.stored_mark), (0, None));
    // Connecting again finds everything applied and changes nothing.
    let again = env.node_with(env.config(SqlMode::Lease)).await;
    assert_eq!(env.recorded_versions().await, [1, 2]);
    assert_eq!(again.claim(&identity(2), 4).await.unwrap().worker, 1);
}

/// A table the pre-migration code created, with a worker's row and mark in it,
/// is adopted: version 1 is recorded, version 2 adds the report's stamp, and
/// the row (so the mark) is still there.
async fn a_pre_migration_table_is_adopted(env: SqlBackend) {
    let admin = env.admin().await;
    let dialect = admin.dialect();
    let config = env.config(SqlMode::Lease);
    let old_mark = mark_at(SignedDuration::from_secs(60));
    exec_sql(
        &admin,
        &[
            pre_migration_ddl(env.db, &env.table),
            // Worker 0, released by its last holder, with a mark a minute ahead.
            format!(
                "INSERT INTO {} (CLUSTER, WORKER, HOST_NAME, PORT, ADDRESS, TYPE, \
                 LAUNCH_DATE, MODIFIED, CREATED, TOKEN, LEASE_EXPIRES, MARK_US) \
                 VALUES ('{}', 0, 'old-node', '7000', '10.9.9.9', 2, CURRENT_DATE, {now}, \
                 {now}, NULL, NULL, {})",
                env.table,
                config.cluster(),
                old_mark.as_microsecond(),
                now = dialect.now(),
            ),
        ],
    )
    .await;
    admin.close().await;
    assert!(env.recorded_versions().await.is_empty());

    // Rows, and no epoch: the first claim is held once, for the lease TTL
    // and the mark window (the rows can't tell an upgrade from rows restored
    // without their epoch).
    let node = env
        .node_with(
            config
                .clone()
                .with_lease_ttl(Duration::from_millis(300))
                .with_mark_window(Duration::from_millis(200)),
        )
        .await;
    assert_eq!(env.recorded_versions().await, [1, 2], "{:?}", env.db);
    let err = node.claim(&identity(1), 4).await.unwrap_err();
    let RegistryError::Held { retry_after, .. } = &err else {
        panic!("{:?}: an upgrade's first claim is held, not {err}", env.db);
    };
    assert!(*retry_after <= Duration::from_millis(500), "{err}");
    assert!(err.to_string().contains("no epoch is recorded"), "{err}");
    tokio::time::sleep(*retry_after + Duration::from_millis(20)).await;
    let claim = node.claim(&identity(1), 4).await.unwrap();
    assert_eq!(claim.worker, 0, "{:?}: the old row is reused", env.db);
    assert_eq!(
        claim.stored_mark,
        Some(old_mark),
        "{:?}: the old node's mark survived",
        env.db
    );
    // The adopted table works like a new one: a second worker is created.
    let second = node.claim(&identity(2), 4).await.unwrap();
    assert_eq!(second.worker, 1);
    node.persist_mark(&second, Timestamp::now(), Timestamp::now())
        .await
        .unwrap();
    node.release(&claim).await.unwrap();
    // And a node connecting later finds it recorded.
    env.node_with(config).await;
    assert_eq!(env.recorded_versions().await, [1, 2]);
}

/// A database a newer idmint migrated (it records version 3 of the registry's
/// component) is refused at connect with a configuration error naming both
/// versions, before anything is claimed.
async fn a_newer_schema_version_is_refused(env: SqlBackend) {
    env.node_with(env.config(SqlMode::Lease)).await;
    let admin = env.admin().await;
    let dialect = admin.dialect();
    exec_sql(
        &admin,
        &[format!(
            "INSERT INTO {MIGRATIONS_TABLE} (component, version, description, applied_at) \
             VALUES ('{}', 3, 'from a newer idmint', {})",
            env.component(),
            dialect.now()
        )],
    )
    .await;
    admin.close().await;
    let err = SqlRegistry::connect(&env.url, env.config(SqlMode::Lease))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Config {
                registry: "sql",
                ..
            }
        ),
        "{:?}: {err}",
        env.db
    );
    let text = err.to_string();
    assert!(text.contains("schema version 3"), "{text}");
    assert!(text.contains("newer than version 2"), "{text}");
    assert!(text.contains(&env.component()), "{text}");
}

/// Two servers starting at once on a database without the table both connect;
/// the migration is applied and recorded once.
async fn concurrent_connects_on_a_fresh_table_both_succeed(env: SqlBackend) {
    let connects: Vec<_> = (0..2)
        .map(|_| {
            let (url, config) = (env.url.clone(), env.config(SqlMode::Lease));
            tokio::spawn(async move { SqlRegistry::connect(&url, config).await })
        })
        .collect();
    let mut nodes = Vec::new();
    for connect in connects {
        let node = connect
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{:?}: {e}", env.db));
        nodes.push(node);
    }
    assert_eq!(env.recorded_versions().await, [1, 2], "{:?}", env.db);
    let a = nodes[0].claim(&identity(1), 4).await.unwrap();
    let b = nodes[1].claim(&identity(2), 4).await.unwrap();
    assert_ne!(a.worker, b.worker);
}

/// A table of the registry's name that is not a worker table is refused and
/// not recorded; a worker table dropped after it was migrated is refused, not
/// silently recreated empty (its marks are gone).
async fn foreign_and_dropped_tables_are_refused(env: SqlBackend) {
    let admin = env.admin().await;
    exec_sql(
        &admin,
        &[format!(
            "CREATE TABLE {} (ID BIGINT, NAME VARCHAR(16))",
            env.table
        )],
    )
    .await;
    let err = SqlRegistry::connect(&env.url, env.config(SqlMode::Lease))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    let text = err.to_string();
    assert!(text.contains("not an idmint worker table"), "{text}");
    assert!(text.contains("CLUSTER, WORKER"), "{text}");
    assert!(env.recorded_versions().await.is_empty());

    exec_sql(&admin, &[format!("DROP TABLE {}", env.table)]).await;
    env.node_with(env.config(SqlMode::Lease)).await;
    exec_sql(&admin, &[format!("DROP TABLE {}", env.table)]).await;
    admin.close().await;
    let err = SqlRegistry::connect(&env.url, env.config(SqlMode::Lease))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    let text = err.to_string();
    assert!(text.contains("does not exist"), "{text}");
    assert!(text.contains(MIGRATIONS_TABLE), "{text}");
}

/// Claims on `node`, waiting out its holds (bounded); returns the claim and
/// how many holds were met.
async fn claim_through_holds(
    node: &SqlRegistry,
    n: usize,
    range: u32,
) -> (idmint_registry::Claim, u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut holds = 0;
    loop {
        match node.claim(&identity(n), range).await {
            Ok(claim) => return (claim, holds),
            Err(RegistryError::Held { retry_after, .. }) if Instant::now() < deadline => {
                holds += 1;
                tokio::time::sleep(retry_after + Duration::from_millis(20)).await;
            }
            Err(e) => panic!("claim failed: {e}"),
        }
    }
}

/// A new cluster has nothing to forget: its first claim is not held, and
/// begins the cluster's epoch on the server answering; every claim's token
/// names the epoch. Another cluster's rows in the same table don't make a
/// new cluster an upgrade.
async fn a_new_cluster_is_not_held_and_records_its_server(env: SqlBackend) {
    let node = env.node_with(env.config(SqlMode::Lease)).await;
    let identity_now = node.server_identity().await.unwrap();
    assert_eq!(
        identity_now.is_none(),
        env.db == Database::Sqlite,
        "{:?}: {identity_now:?}",
        env.db
    );
    let claim = node.claim(&identity(1), 4).await.unwrap();
    let cluster = env.config(SqlMode::Lease).cluster().to_owned();
    let (epoch, server, floor, reason) = env.epoch_row(&cluster).await.expect("an epoch");
    assert_eq!(
        server,
        identity_now.unwrap_or_else(|| "sqlite".to_owned()),
        "{:?}",
        env.db
    );
    assert_eq!((floor, reason.as_str()), (0, ""));
    assert!(claim.token.starts_with(&format!("{epoch}/")), "{claim:?}");
    let other = env
        .node_with(env.config(SqlMode::Lease).with_cluster("second"))
        .await;
    let started = Instant::now();
    other.claim(&identity(2), 4).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(env.epoch_row("second").await.is_some());
}

/// The database server changed under a running cluster (a promoted
/// replica, a backup restored into another server; here its recorded
/// identity is edited, which is what the registry sees). A claim is held,
/// with the typed error and how long to wait; the holder fences at its
/// next renewal (or mark) and raises the new epoch's floor to the highest
/// mark it persisted; after the hold a claim starts above it.
async fn a_changed_server_holds_claims_and_fences_holders(env: SqlBackend, mode: SqlMode) {
    let config = env.forgetful(mode);
    let cluster = config.cluster().to_owned();
    let holder = env.node_with(config.clone()).await;
    let (claim, holds) = claim_through_holds(&holder, 1, 64).await;
    assert_eq!(holds, 0, "{:?}: a new cluster is not held", env.db);
    let far = mark_at(SignedDuration::from_mins(10));
    holder
        .persist_mark(&claim, far, Timestamp::now())
        .await
        .unwrap();

    env.record_another_server(&cluster).await;
    let newcomer = env.node_with(config.clone()).await;
    let err = newcomer.claim(&identity(2), 64).await.unwrap_err();
    let RegistryError::Held {
        retry_after,
        reason,
        ..
    } = &err
    else {
        panic!("{:?}: claims are held, not {err}", env.db);
    };
    assert_eq!(err.code(), "registry_held");
    assert!(
        !retry_after.is_zero() && *retry_after <= config.reset_hold(),
        "{retry_after:?}"
    );
    assert!(reason.contains("server changed"), "{reason}");
    assert!(reason.contains("was the-old-primary"), "{reason}");

    // The holder fences at its next renewal (the disposable modes renew
    // only their liveness) and at its next mark.
    let err = holder.renew(&claim).await.unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{:?}: {err}", env.db);
    assert!(err.to_string().contains("epoch changed"), "{err}");
    assert!(err.to_string().contains("server changed"), "{err}");
    let err = holder
        .persist_mark(&claim, far, Timestamp::now())
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        "lease_lost",
        "a fenced holder persists nothing: {err}"
    );
    let (_, _, floor, _) = env.epoch_row(&cluster).await.unwrap();
    assert!(floor >= far.as_microsecond(), "{:?}: floor {floor}", env.db);

    let (taken, holds) = claim_through_holds(&newcomer, 2, 64).await;
    assert!(holds >= 1);
    assert!(
        taken.stored_mark >= Some(far),
        "{:?}: the next holder starts above the old holder's mark: {:?} < {far}",
        env.db,
        taken.stored_mark
    );
    // The hold is over: claims go on at once.
    newcomer.claim(&identity(3), 64).await.unwrap();
}

async fn a_changed_server_holds_lease_claims(env: SqlBackend) {
    a_changed_server_holds_claims_and_fences_holders(env, SqlMode::Lease).await;
}

async fn a_changed_server_holds_disposable_claims(env: SqlBackend) {
    a_changed_server_holds_claims_and_fences_holders(env, SqlMode::Disposable).await;
}

/// Issue 32: a holder registers its worker again in the new epoch of a
/// changed server, and a second try of that registration (the first one's
/// answer lost: done at the database, the call timed out, as on a loaded
/// CI machine just after a PostgreSQL promotion) gets the same holding,
/// where it used to read as another node's lease and the holder lost its
/// worker to the hold. Another node's claim of the worker stays refused.
async fn a_registration_again_tried_twice_gets_one_holding(env: SqlBackend) {
    let config = env.config(SqlMode::Lease);
    let cluster = config.cluster().to_owned();
    let holder = env.node_with(config.clone()).await;
    let claim = holder.claim(&identity(1), 8).await.unwrap();
    let mark = mark_at(SignedDuration::from_secs(5));
    holder
        .persist_mark(&claim, mark, Timestamp::now())
        .await
        .unwrap();
    env.record_another_server(&cluster).await;
    let err = holder.renew(&claim).await.unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{:?}: {err}", env.db);

    let again = holder
        .register_again(&identity(1), &claim, mark)
        .await
        .unwrap_or_else(|e| panic!("{:?}: the first try: {e}", env.db));
    assert_eq!(again.worker, claim.worker);
    assert_ne!(again.token, claim.token);
    let retried = holder
        .register_again(&identity(1), &claim, mark)
        .await
        .unwrap_or_else(|e| panic!("{:?}: the second try: {e}", env.db));
    assert_eq!(
        (retried.worker, &retried.token),
        (claim.worker, &again.token),
        "{:?}: one holding",
        env.db
    );
    holder.renew(&again).await.unwrap().expect("a lease");
    holder
        .persist_mark(&again, mark, Timestamp::now())
        .await
        .unwrap();
    // The old claim fences as before: only a registration takes it on.
    let err = holder
        .persist_mark(&claim, mark, Timestamp::now())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{:?}: {err}", env.db);

    let newcomer = env.node_with(config).await;
    let err = newcomer
        .claim_worker(&identity(2), claim.worker, 8)
        .await
        .unwrap_err();
    assert!(
        matches!(err.code(), "registry_held" | "worker_taken"),
        "{:?}: {err}",
        env.db
    );
}

/// Worker rows without their epoch (rows restored without it; the epoch
/// row deleted): the holder finds its epoch gone at its next renewal and
/// fences, which begins a new epoch, held once.
async fn rows_without_an_epoch_hold_claims_once(env: SqlBackend) {
    let config = env.forgetful(SqlMode::Lease);
    let cluster = config.cluster().to_owned();
    let holder = env.node_with(config.clone()).await;
    let claim = holder.claim(&identity(1), 8).await.unwrap();
    let mark = mark_at(SignedDuration::from_secs(90));
    holder
        .persist_mark(&claim, mark, Timestamp::now())
        .await
        .unwrap();
    let admin = env.admin().await;
    exec_sql(
        &admin,
        &[format!(
            "DELETE FROM {EPOCH_TABLE} WHERE WORKER_TABLE = '{}'",
            env.table
        )],
    )
    .await;
    admin.close().await;
    let err = holder.renew(&claim).await.unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert!(err.to_string().contains("epoch record is gone"), "{err}");
    let (_, _, floor, reason) = env.epoch_row(&cluster).await.expect("a new epoch");
    assert!(reason.contains("no epoch is recorded"), "{reason}");
    assert!(floor >= mark.as_microsecond());
    let newcomer = env.node_with(config).await;
    let err = newcomer.claim(&identity(2), 8).await.unwrap_err();
    assert_eq!(err.code(), "registry_held", "{err}");
    let (taken, _) = claim_through_holds(&newcomer, 2, 8).await;
    assert!(taken.stored_mark >= Some(mark), "{:?}", taken.stored_mark);
    let started = Instant::now();
    newcomer.claim(&identity(3), 8).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "held once only"
    );
}

/// The identity the registry reads is the server's own: PostgreSQL's system
/// identifier and timeline, MariaDB's `server_id` and host name; SQLite has
/// none.
async fn the_server_identity_is_the_servers(env: SqlBackend) {
    let node = env.node_with(env.config(SqlMode::Lease)).await;
    let admin = env.admin().await;
    let expected = match env.db {
        Database::Sqlite => None,
        Database::Postgres => {
            let sql = "SELECT CAST(s.system_identifier AS TEXT), CAST(c.timeline_id AS TEXT) \
                       FROM pg_control_system() s, pg_control_checkpoint() c";
            let (system, timeline) = on_pool!(admin.pool(), p => {
                sqlx::query_as::<_, (String, String)>(sql).fetch_one(p).await
            })
            .unwrap();
            Some(format!("{system}/{timeline}"))
        }
        Database::MariaDb => {
            let sql = "SELECT CAST(@@server_id AS CHAR), CAST(@@hostname AS CHAR)";
            let (id, host) = on_pool!(admin.pool(), p => {
                sqlx::query_as::<_, (String, String)>(sql).fetch_one(p).await
            })
            .unwrap();
            Some(format!("{id}@{host}"))
        }
    };
    admin.close().await;
    assert_eq!(node.server_identity().await.unwrap(), expected);
}

/// Runs SQL-only scenarios, each a test named after it in the invoking module.
macro_rules! sql_only {
    ($make:ident: $($test:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                if let Some(backend) = $make(stringify!($test)) {
                    crate::support::within_limit(stringify!($test), super::$test(backend))
                        .await;
                }
            }
        )+
    };
}

/// Everything once per database: the contract, then the SQL-only scenarios.
macro_rules! per_database {
    ($module:ident, $db:ident) => {
        mod $module {
            fn backend(test: &str) -> Option<super::SqlBackend> {
                super::SqlBackend::new(super::Database::$db, test)
            }

            crate::contract::contract_suite!(backend);

            sql_only!(backend:
                clusters_sharing_a_table_stay_apart,
                disposable_ids_increase_and_are_never_reused,
                a_report_stamped_by_another_holding_has_no_age,
                the_fleet_in_disposable_mode_has_no_leases,
                bad_configs_and_urls_are_typed_errors,
                a_fresh_table_records_its_migration,
                a_pre_migration_table_is_adopted,
                a_newer_schema_version_is_refused,
                concurrent_connects_on_a_fresh_table_both_succeed,
                foreign_and_dropped_tables_are_refused,
                a_new_cluster_is_not_held_and_records_its_server,
                a_changed_server_holds_lease_claims,
                a_changed_server_holds_disposable_claims,
                rows_without_an_epoch_hold_claims_once,
                a_registration_again_tried_twice_gets_one_holding,
                the_server_identity_is_the_servers,
            );
        }
    };
}

per_database!(postgres, Postgres);
per_database!(mariadb, MariaDb);
per_database!(sqlite, Sqlite);

/// A server that accepts connections and never answers: every backend's
/// handshake waits forever, so only the registry's own timeout ends `connect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_a_silent_server_times_out() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    for url in [
        format!("postgres://u:secret@127.0.0.1:{port}/db"),
        format!("mysql://u:secret@127.0.0.1:{port}/db"),
    ] {
        let config = SqlConfig::new(SqlMode::Lease).with_timeout(Duration::from_millis(300));
        let started = Instant::now();
        let err = SqlRegistry::connect(&url, config).await.unwrap_err();
        assert!(
            matches!(
                err,
                RegistryError::Timeout {
                    operation: "connect",
                    ..
                }
            ),
            "{url}: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(3), "{url}");
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
