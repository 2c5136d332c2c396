//! The `sql` registry against real PostgreSQL, MariaDB and SQLite.
//!
//! Every scenario runs once per database. Each test gets a table of its own
//! (dropped at the end), so tests run in parallel without seeing each other;
//! one scenario checks that two clusters sharing a table stay apart. Nodes are
//! separate `SqlRegistry` instances, each with its own pool, as separate
//! processes would be. Lease scenarios use a 1 s TTL to keep the module fast.
//!
//! Services: `IDMINT_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `IDMINT_TEST_MYSQL_URL`
//! (default `mysql://root@127.0.0.1:3306/test`); SQLite uses a temporary file.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use idmint_registry::sql::{SqlConfig, SqlMode, SqlRegistry};
use idmint_registry::{Claim, NodeIdentity, RegistryError, WorkerRegistry};
use jiff::{SignedDuration, Timestamp};
use tokio::sync::Barrier;

use crate::support::require_service;

const SHORT_TTL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Database {
    Postgres,
    MariaDb,
    Sqlite,
}

/// One test's database: its URL and its own table.
struct Env {
    db: Database,
    url: String,
    table: String,
    sqlite_file: Option<PathBuf>,
}

impl Env {
    /// The environment for `test` on `db`, or `None` (after a loud SKIPPED line)
    /// when the service is down outside CI.
    fn new(db: Database, test: &str) -> Option<Env> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let stamp = Timestamp::now().as_millisecond() % 100_000_000;
        let table = format!(
            "it_{}_{}_{stamp}_{seq}",
            abbreviate(test),
            std::process::id()
        );
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
        Some(Env {
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
    async fn node(&self, config: SqlConfig) -> SqlRegistry {
        SqlRegistry::connect(&self.url, config)
            .await
            .unwrap_or_else(|e| panic!("connect to {:?} failed: {e}", self.db))
    }

    /// `n` nodes connected concurrently (which also races their `CREATE TABLE`).
    async fn nodes(&self, n: usize, config: SqlConfig) -> Vec<Arc<SqlRegistry>> {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let url = self.url.clone();
                let config = config.clone();
                tokio::spawn(async move { SqlRegistry::connect(&url, config).await })
            })
            .collect();
        let mut nodes = Vec::with_capacity(n);
        for task in tasks {
            let node = task
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("concurrent connect to {:?} failed: {e}", self.db));
            nodes.push(Arc::new(node));
        }
        nodes
    }

    /// Drops the test's table (or file). Best effort: a failure leaves litter,
    /// not a wrong result.
    async fn cleanup(self) {
        let drop_sql = format!("DROP TABLE IF EXISTS {}", self.table);
        match self.db {
            Database::Postgres => {
                if let Ok(pool) = sqlx::PgPool::connect(&self.url).await {
                    let _ = sqlx::query(&drop_sql).execute(&pool).await;
                    pool.close().await;
                }
            }
            Database::MariaDb => {
                if let Ok(pool) = sqlx::MySqlPool::connect(&self.url).await {
                    let _ = sqlx::query(&drop_sql).execute(&pool).await;
                    pool.close().await;
                }
            }
            Database::Sqlite => {
                if let Some(path) = self.sqlite_file {
                    for suffix in ["", "-wal", "-shm"] {
                        let mut p = path.clone().into_os_string();
                        p.push(suffix);
                        let _ = std::fs::remove_file(p);
                    }
                }
            }
        }
    }
}

fn abbreviate(test: &str) -> String {
    test.split('_').filter_map(|w| w.chars().next()).collect()
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

fn node_identity(i: usize) -> NodeIdentity {
    NodeIdentity {
        host: format!("node-{i}"),
        address: format!("10.0.0.{i}"),
        port: 8080,
    }
}

/// A mark with whole microseconds, so it reads back exactly.
fn mark_at(offset: SignedDuration) -> Timestamp {
    let t = Timestamp::now() + offset;
    Timestamp::from_microsecond(t.as_microsecond()).unwrap()
}

/// `n` nodes claim at once (released together by a barrier).
async fn claim_concurrently(
    nodes: &[Arc<SqlRegistry>],
    range: u32,
) -> Vec<Result<Claim, RegistryError>> {
    let barrier = Arc::new(Barrier::new(nodes.len()));
    let tasks: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let node = Arc::clone(node);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                node.claim(&node_identity(i), range).await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

async fn sixteen_claimers_get_distinct_workers(env: Env) {
    let started = Instant::now();
    let nodes = env
        .nodes(
            16,
            env.config(SqlMode::Lease)
                .with_lease_ttl(Duration::from_secs(30)),
        )
        .await;
    let results = claim_concurrently(&nodes, 1024).await;
    let workers: BTreeSet<u32> = results
        .iter()
        .map(|r| {
            r.as_ref()
                .expect("every claim succeeds with a range of 1024")
                .worker
        })
        .collect();
    assert_eq!(
        workers.len(),
        16,
        "{:?}: workers not distinct: {workers:?}",
        env.db
    );
    assert!(workers.iter().all(|&w| w < 1024));
    for (node, claim) in nodes.iter().zip(&results) {
        let claim = claim.as_ref().unwrap();
        assert_eq!(claim.stored_mark, None, "a never-used worker has no mark");
        assert!(claim.lease.is_some());
        node.release(claim).await.unwrap();
    }
    eprintln!(
        "{:?}: 16 concurrent claims in {:?}",
        env.db,
        started.elapsed()
    );
    env.cleanup().await;
}

/// Checks one round of 16 claims on a range of 8: exactly 8 distinct workers,
/// 8 typed exhaustion errors counting 8 in use.
fn assert_exactly_8(db: Database, results: &[Result<Claim, RegistryError>]) {
    let mut workers = BTreeSet::new();
    let mut exhausted = 0;
    for result in results {
        match result {
            Ok(claim) => {
                assert!(
                    workers.insert(claim.worker),
                    "{db:?}: worker {} handed out twice",
                    claim.worker
                );
                assert!(claim.worker < 8);
            }
            Err(RegistryError::Exhausted {
                registry,
                in_use,
                range,
            }) => {
                assert_eq!((*registry, *in_use, *range), ("sql", 8, 8));
                exhausted += 1;
            }
            Err(e) => panic!("{db:?}: unexpected error: {e}"),
        }
    }
    assert_eq!(workers.len(), 8, "{db:?}: {results:?}");
    assert_eq!(exhausted, 8);
}

async fn range_of_8_admits_exactly_8(env: Env) {
    let nodes = env.nodes(16, env.config(SqlMode::Lease)).await;
    // Round 1: a fresh table, every winner creates its row.
    let results = claim_concurrently(&nodes, 8).await;
    assert_exactly_8(env.db, &results);
    let stored_mark = mark_at(SignedDuration::from_secs(3));
    for (node, result) in nodes.iter().zip(&results) {
        if let Ok(claim) = result {
            node.persist_mark(claim, stored_mark, Timestamp::now())
                .await
                .unwrap();
            node.release(claim).await.unwrap();
        }
    }
    // Round 2: all 8 rows exist and are free, so every winner goes through the
    // compare-and-set takeover of an existing row.
    let results = claim_concurrently(&nodes, 8).await;
    assert_exactly_8(env.db, &results);
    for result in results.iter().flatten() {
        assert_eq!(result.stored_mark, Some(stored_mark));
    }
    env.cleanup().await;
}

async fn takeover_after_expiry_starts_above_the_dead_nodes_mark(env: Env) {
    let config = env.config(SqlMode::Lease).with_lease_ttl(SHORT_TTL);
    let a = env.node(config.clone()).await;
    let b = env.node(config.clone()).await;

    let claim_a = a.claim(&node_identity(1), 1).await.unwrap();
    assert_eq!(claim_a.worker, 0);
    let mark_a = mark_at(SignedDuration::from_secs(3));
    a.persist_mark(&claim_a, mark_a, Timestamp::now())
        .await
        .unwrap();
    // A dies: its registry and connections go away, the lease is not released.
    drop(a);

    let err = b.claim(&node_identity(2), 1).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Exhausted {
                in_use: 1,
                range: 1,
                ..
            }
        ),
        "{:?}: a live lease must not be taken over: {err}",
        env.db
    );

    let lease_a = claim_a.lease.unwrap();
    tokio::time::sleep_until((lease_a.valid_until + Duration::from_millis(300)).into()).await;
    let claim_b = b.claim(&node_identity(2), 1).await.unwrap();
    assert_eq!(claim_b.worker, 0);
    assert_eq!(
        claim_b.stored_mark,
        Some(mark_a),
        "{:?}: B must start above A's mark",
        env.db
    );

    // A's stale claim (its token) can neither renew nor raise the mark.
    let err = b.renew(&claim_a).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::LeaseLost { worker: 0, .. }),
        "{err}"
    );
    let higher = mark_at(SignedDuration::from_hours(1));
    let err = b
        .persist_mark(&claim_a, higher, Timestamp::now())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::LeaseLost { worker: 0, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("lease on worker 0 lost"), "{err}");
    // A's stale release does not free B's worker either.
    b.release(&claim_a).await.unwrap();
    let c = env.node(config).await;
    let err = c.claim(&node_identity(3), 1).await.unwrap_err();
    assert!(matches!(err, RegistryError::Exhausted { .. }), "{err}");

    // Release keeps the mark, and the stale persist did not change it.
    b.release(&claim_b).await.unwrap();
    let claim_c = c.claim(&node_identity(3), 1).await.unwrap();
    assert_eq!(claim_c.worker, 0);
    assert_eq!(claim_c.stored_mark, Some(mark_a));
    c.release(&claim_c).await.unwrap();
    env.cleanup().await;
}

async fn persist_mark_only_raises_and_peers_see_reports(env: Env) {
    let config = env.config(SqlMode::Lease);
    let x = env.node(config.clone()).await;
    let y = env.node(config).await;

    let claim_x = x.claim(&node_identity(1), 4).await.unwrap();
    let high = mark_at(SignedDuration::from_secs(10));
    let low = mark_at(SignedDuration::from_secs(5));
    let reported = mark_at(SignedDuration::ZERO);
    x.persist_mark(&claim_x, high, reported).await.unwrap();
    x.persist_mark(&claim_x, low, reported).await.unwrap();
    // Persisting the same values again still succeeds (no spurious LeaseLost
    // from "0 rows changed").
    x.persist_mark(&claim_x, high, reported).await.unwrap();

    let claim_y = y.claim(&node_identity(2), 4).await.unwrap();
    assert_ne!(claim_y.worker, claim_x.worker);
    let peers = y.peers(&claim_y).await.unwrap();
    assert_eq!(peers.len(), 1, "{peers:?}");
    assert_eq!(peers[0].worker, claim_x.worker);
    assert_eq!(peers[0].reported, reported);
    assert!(
        x.peers(&claim_x).await.unwrap().is_empty(),
        "Y has not reported yet"
    );

    x.release(&claim_x).await.unwrap();
    assert!(
        y.peers(&claim_y).await.unwrap().is_empty(),
        "a released worker is no peer"
    );
    let again = x.claim(&node_identity(1), 4).await.unwrap();
    assert_eq!(
        again.worker, claim_x.worker,
        "the released worker is the only expired one"
    );
    assert_eq!(
        again.stored_mark,
        Some(high),
        "{:?}: the lower mark must not win",
        env.db
    );
    env.cleanup().await;
}

async fn renew_keeps_the_lease_past_its_first_ttl(env: Env) {
    let config = env.config(SqlMode::Lease).with_lease_ttl(SHORT_TTL);
    let a = env.node(config.clone()).await;
    let b = env.node(config).await;
    let claim = a.claim(&node_identity(1), 1).await.unwrap();
    let first = claim.lease.unwrap();

    tokio::time::sleep(Duration::from_millis(600)).await;
    let before = Instant::now();
    let renewed = a
        .renew(&claim)
        .await
        .unwrap()
        .expect("lease mode renews a lease");
    let after = Instant::now();
    assert!(renewed.valid_until > first.valid_until);
    // Measured from before the request was sent: between the call's start and
    // its end, plus the ttl.
    assert!(renewed.valid_until >= before + SHORT_TTL);
    assert!(
        renewed.valid_until <= after + SHORT_TTL,
        "valid_until must err early"
    );

    tokio::time::sleep_until((first.valid_until + Duration::from_millis(200)).into()).await;
    let err = b.claim(&node_identity(2), 1).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::Exhausted { in_use: 1, .. }),
        "{:?}: a renewed lease must hold past the first ttl: {err}",
        env.db
    );

    a.release(&claim).await.unwrap();
    assert!(matches!(
        a.renew(&claim).await,
        Err(RegistryError::LeaseLost { .. })
    ));
    let err = a
        .persist_mark(&claim, Timestamp::now(), Timestamp::now())
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::LeaseLost { .. }), "{err}");
    let claim_b = b.claim(&node_identity(2), 1).await.unwrap();
    assert_eq!(claim_b.worker, 0);
    env.cleanup().await;
}

async fn clusters_sharing_a_table_stay_apart(env: Env) {
    let red = env
        .node(env.config(SqlMode::Lease).with_cluster("red"))
        .await;
    let blue = env
        .node(env.config(SqlMode::Lease).with_cluster("blue"))
        .await;
    let r = red.claim(&node_identity(1), 1).await.unwrap();
    let b = blue.claim(&node_identity(2), 1).await.unwrap();
    assert_eq!((r.worker, b.worker), (0, 0));
    red.persist_mark(&r, Timestamp::now(), Timestamp::now())
        .await
        .unwrap();
    assert!(
        blue.peers(&b).await.unwrap().is_empty(),
        "red is not blue's peer"
    );
    let err = red.claim(&node_identity(3), 1).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::Exhausted { in_use: 1, .. }),
        "{err}"
    );
    env.cleanup().await;
}

async fn disposable_ids_increase_and_are_never_reused(env: Env) {
    let config = env.config(SqlMode::Disposable);
    let node = env.node(config).await;
    let mut claims = Vec::new();
    for i in 0..3 {
        let claim = node.claim(&node_identity(i), 4).await.unwrap();
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

    let err = node.claim(&node_identity(9), 4).await.unwrap_err();
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
    let err = node.claim(&node_identity(9), 4).await.unwrap_err();
    assert!(matches!(err, RegistryError::Exhausted { .. }), "{err}");
    let later = node.claim(&node_identity(9), 16).await.unwrap();
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
    env.cleanup().await;
}

async fn bad_configs_and_urls_are_typed_errors(env: Env) {
    let err = SqlRegistry::connect(&env.url, env.config(SqlMode::Lease).with_table("a b"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    let node = env.node(env.config(SqlMode::Lease)).await;
    let err = node.claim(&node_identity(1), 0).await.unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    let debug = format!("{node:?}");
    assert!(debug.contains(&env.table), "{debug}");
    env.cleanup().await;
}

macro_rules! per_database {
    ($($test:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if let Some(env) = super::Env::new(super::Database::Postgres, stringify!($test)) {
                        super::$test(env).await;
                    }
                }
            )*
        }
        mod mariadb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if let Some(env) = super::Env::new(super::Database::MariaDb, stringify!($test)) {
                        super::$test(env).await;
                    }
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if let Some(env) = super::Env::new(super::Database::Sqlite, stringify!($test)) {
                        super::$test(env).await;
                    }
                }
            )*
        }
    };
}

per_database!(
    sixteen_claimers_get_distinct_workers,
    range_of_8_admits_exactly_8,
    takeover_after_expiry_starts_above_the_dead_nodes_mark,
    persist_mark_only_raises_and_peers_see_reports,
    renew_keeps_the_lease_past_its_first_ttl,
    clusters_sharing_a_table_stay_apart,
    disposable_ids_increase_and_are_never_reused,
    bad_configs_and_urls_are_typed_errors,
);

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
