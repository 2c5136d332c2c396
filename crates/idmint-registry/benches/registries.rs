//! Worker-registry benchmarks: how long a claim takes on each registry, and what
//! the keeper's high-water-mark check costs on the hot path, as a share of the
//! layout's cap and against a bare `Snowflake` measured in the same run.
//!
//! `cargo bench -p idmint-registry --bench registries` prints a Markdown table
//! (the one in BENCHMARKS.md). Every figure is the median of `IDMINT_BENCH_RUNS`
//! runs (default 7), because the machines are shared and noisy.
//!
//! Services, each with a table, cluster or key prefix of its own that is removed
//! at the end: PostgreSQL (`IDMINT_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`), MariaDB (`IDMINT_TEST_MYSQL_URL`,
//! default `mysql://root@127.0.0.1:3306/test`) and Redis (`IDMINT_TEST_REDIS_ADDR`,
//! default `127.0.0.1:6379`); etcd (`IDMINT_TEST_ETCD_ENDPOINT`, as
//! `scripts/etcd start DIR` writes it) and ZooKeeper (`IDMINT_TEST_ZOOKEEPER`, as
//! `scripts/zookeeper start DIR` writes it) only when their variable is set. A
//! service that is down or not configured gives a "skipped" row and a
//! `SKIPPED:` line on stderr, not a failure. SQLite and the file registry use
//! temporary files.
//!
//! Quick mode (no `--bench` argument, as `cargo test --benches` runs it): one run
//! of a few claims on the local registries (file, static, SQLite) and a 50 ms
//! hot-path window on the file registry, so it needs no service and finishes in
//! a couple of seconds.
//!
//! A custom harness rather than criterion, as in `idmint-core`'s benches: the
//! hot-path figure is a sustained rate over a wall-clock window (a generator at
//! its cap spends most of its time waiting for the next tick) and a ratio
//! between two measurements of one run.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idmint_core::clock::MonotonicClock;
use idmint_core::{ClockBehind, Layout, SequenceExhausted, Snowflake};
use idmint_registry::etcd::{EtcdConfig, EtcdRegistry};
use idmint_registry::file::FileRegistry;
use idmint_registry::fixed::StaticRegistry;
use idmint_registry::keeper::{GeneratorSettings, KeeperConfig, WorkerKeeper};
use idmint_registry::redis::{RedisConfig, RedisRegistry};
use idmint_registry::sql::{SqlConfig, SqlMode, SqlRegistry};
use idmint_registry::zookeeper::{ZooKeeperConfig, ZooKeeperMode, ZooKeeperRegistry};
use idmint_registry::{NodeIdentity, WorkerRegistry};
use idmint_testkit::bench::{Row, median, print_table, runs, together};
use tokio::runtime::Runtime;

const LAYOUT: Layout = Layout::TWITTER;
const CAP_TWITTER: f64 = 4_096_000.0;

/// The value at quantile `q` (0..=1) of `v`, nearest rank.
fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let idx = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[idx]
}

/// Microseconds, with a decimal below 10 µs.
fn us(micros: f64) -> String {
    if micros < 10.0 {
        format!("{micros:.1} µs")
    } else {
        format!("{micros:.0} µs")
    }
}

/// Something unique per benchmark run, for table names, clusters and prefixes.
fn stamp() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}_{}", std::process::id(), nanos % 1_000_000_000_000)
}

fn node() -> NodeIdentity {
    NodeIdentity {
        host: "bench".to_owned(),
        address: "127.0.0.1".to_owned(),
        port: 7000,
    }
}

fn reachable(addr: &str) -> bool {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a: SocketAddr| {
            TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok()
        })
}

/// Host and port of a URL like `scheme://user@host:port/db`.
fn url_addr(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

fn postgres_url() -> String {
    std::env::var("IDMINT_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn mysql_url() -> String {
    std::env::var("IDMINT_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

fn redis_addr() -> String {
    std::env::var("IDMINT_TEST_REDIS_ADDR").unwrap_or_else(|_| "127.0.0.1:6379".to_owned())
}

fn redis_url() -> String {
    format!("redis://{}/", redis_addr())
}

/// A registry under test and what to remove afterwards.
enum Subject {
    /// Nothing to remove, or a temporary directory removed on drop.
    Local {
        registry: Arc<dyn WorkerRegistry>,
        _dir: Option<tempfile::TempDir>,
    },
    /// A SQL registry on its own table (and, for SQLite, its own file).
    Sql {
        registry: Arc<SqlRegistry>,
        url: String,
        table: String,
        sqlite_file: Option<PathBuf>,
    },
    /// A Redis registry under its own key prefix.
    Redis(Arc<RedisRegistry>, String),
    /// An etcd registry under its own key prefix: (registry, endpoint, prefix).
    Etcd(Arc<EtcdRegistry>, String, String),
    /// A ZooKeeper registry on its own cluster: (registry, address, cluster).
    ZooKeeper(Arc<ZooKeeperRegistry>, String, String),
}

impl Subject {
    fn registry(&self) -> Arc<dyn WorkerRegistry> {
        match self {
            Subject::Local { registry, .. } => registry.clone(),
            Subject::Sql { registry, .. } => registry.clone(),
            Subject::Redis(r, _) => r.clone(),
            Subject::Etcd(r, ..) => r.clone(),
            Subject::ZooKeeper(r, ..) => r.clone(),
        }
    }

    /// Best effort: a failure leaves litter, not a wrong figure.
    async fn cleanup(self) {
        match self {
            Subject::Local { .. } => {}
            Subject::Sql {
                registry,
                url,
                table,
                sqlite_file,
            } => {
                registry.close().await;
                drop(registry);
                // The table and its migration record (component `registry:<table>`).
                let drop_sql = format!("DROP TABLE IF EXISTS {table}");
                let forget_sql = format!(
                    "DELETE FROM {} WHERE component = 'registry:{table}'",
                    idmint_sql::MIGRATIONS_TABLE
                );
                if url.starts_with("postgres") {
                    if let Ok(pool) = sqlx::PgPool::connect(&url).await {
                        let _ = sqlx::query(&drop_sql).execute(&pool).await;
                        let _ = sqlx::query(&forget_sql).execute(&pool).await;
                        pool.close().await;
                    }
                } else if url.starts_with("mysql")
                    && let Ok(pool) = sqlx::MySqlPool::connect(&url).await
                {
                    let _ = sqlx::query(&drop_sql).execute(&pool).await;
                    let _ = sqlx::query(&forget_sql).execute(&pool).await;
                    pool.close().await;
                }
                if let Some(path) = sqlite_file {
                    for suffix in ["", "-wal", "-shm"] {
                        let mut p = path.clone().into_os_string();
                        p.push(suffix);
                        let _ = std::fs::remove_file(p);
                    }
                }
            }
            Subject::Redis(registry, prefix) => {
                drop(registry);
                let Ok(mut conn) =
                    redis::Client::open(redis_url()).and_then(|c| c.get_connection())
                else {
                    return;
                };
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{prefix}*"))
                    .query(&mut conn)
                    .unwrap_or_default();
                if !keys.is_empty() {
                    let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&keys).query(&mut conn);
                }
            }
            Subject::Etcd(registry, endpoint, prefix) => {
                drop(registry);
                if let Ok(mut client) = etcd_client::Client::connect([endpoint], None).await {
                    let options = etcd_client::DeleteOptions::new().with_prefix();
                    let _ = tokio::time::timeout(
                        Duration::from_secs(2),
                        client.delete(prefix.as_str(), Some(options)),
                    )
                    .await;
                }
            }
            Subject::ZooKeeper(registry, addr, cluster) => {
                registry.close_session();
                drop(registry);
                if let Ok(client) = zookeeper_client::Client::connect(&addr).await {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        delete_tree(&client, format!("/idmint/{cluster}")),
                    )
                    .await;
                }
            }
        }
    }
}

/// Deletes `root` and everything under it, children first (best effort).
async fn delete_tree(client: &zookeeper_client::Client, root: String) {
    let mut stack = vec![(root, false)];
    while let Some((path, expanded)) = stack.pop() {
        if expanded {
            let _ = client.delete(&path, None).await;
            continue;
        }
        let children = client.list_children(&path).await.unwrap_or_default();
        stack.push((path.clone(), true));
        for child in children {
            stack.push((format!("{path}/{child}"), false));
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Static,
    Postgres,
    MariaDb,
    Sqlite,
    Redis,
    Etcd,
    ZooKeeper,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::File => "file (temporary directory)",
            Kind::Static => "static",
            Kind::Postgres => "sql, lease mode, PostgreSQL",
            Kind::MariaDb => "sql, lease mode, MariaDB",
            Kind::Sqlite => "sql, lease mode, SQLite (temporary file, WAL)",
            Kind::Redis => "redis",
            Kind::Etcd => "etcd (`IDMINT_TEST_ETCD_ENDPOINT`)",
            Kind::ZooKeeper => "zookeeper, ephemeral mode (`IDMINT_TEST_ZOOKEEPER`)",
        }
    }

    /// Why the service can't be used, if it can't.
    fn unavailable(self) -> Option<String> {
        let addr = match self {
            Kind::Postgres => url_addr(&postgres_url()),
            Kind::MariaDb => url_addr(&mysql_url()),
            Kind::Redis => redis_addr(),
            Kind::Etcd | Kind::ZooKeeper => {
                let var = self.env_var();
                return match std::env::var(var).ok().filter(|v| !v.is_empty()) {
                    None => Some(format!("{var} is not set")),
                    Some(addr) => {
                        let addr = url_addr(&addr);
                        let addr = addr.split(',').next().unwrap_or_default().to_owned();
                        (!reachable(&addr)).then(|| format!("nothing answers on {addr}"))
                    }
                };
            }
            Kind::File | Kind::Static | Kind::Sqlite => return None,
        };
        (!reachable(&addr)).then(|| format!("nothing answers on {addr}"))
    }

    fn env_var(self) -> &'static str {
        match self {
            Kind::ZooKeeper => "IDMINT_TEST_ZOOKEEPER",
            _ => "IDMINT_TEST_ETCD_ENDPOINT",
        }
    }

    async fn open(self) -> Subject {
        let stamp = stamp();
        let sql = |url: String, table: String, sqlite_file: Option<PathBuf>| async move {
            let config = SqlConfig::new(SqlMode::Lease)
                .with_table(table.clone())
                .with_cluster(format!("bench-{table}"))
                .with_max_connections(1);
            let registry = SqlRegistry::connect(&url, config)
                .await
                .unwrap_or_else(|e| panic!("connect to {url} failed: {e}"));
            Subject::Sql {
                registry: Arc::new(registry),
                url,
                table,
                sqlite_file,
            }
        };
        match self {
            Kind::File => {
                let dir = tempfile::tempdir().unwrap();
                let registry = FileRegistry::open(dir.path(), 1).unwrap();
                Subject::Local {
                    registry: Arc::new(registry),
                    _dir: Some(dir),
                }
            }
            Kind::Static => Subject::Local {
                registry: Arc::new(StaticRegistry::new(1)),
                _dir: None,
            },
            Kind::Postgres => sql(postgres_url(), format!("bench_{stamp}"), None).await,
            Kind::MariaDb => sql(mysql_url(), format!("bench_{stamp}"), None).await,
            Kind::Sqlite => {
                let path = std::env::temp_dir().join(format!("idmint-bench-{stamp}.db"));
                let url = format!("sqlite:{}", path.display());
                sql(url, format!("bench_{stamp}"), Some(path)).await
            }
            Kind::Redis => {
                let prefix = format!("idmint-bench:{{{stamp}}}:");
                let config = RedisConfig::new().with_prefix(prefix.clone());
                let registry = RedisRegistry::connect(&redis_url(), config)
                    .await
                    .unwrap_or_else(|e| panic!("connect to redis failed: {e}"));
                Subject::Redis(Arc::new(registry), prefix)
            }
            Kind::Etcd => {
                let endpoint = std::env::var(self.env_var()).unwrap();
                let prefix = format!("/idmint-bench/{stamp}/");
                let config = EtcdConfig::new().with_prefix(prefix.clone());
                let registry = EtcdRegistry::connect(&[&endpoint], config)
                    .await
                    .unwrap_or_else(|e| panic!("connect to etcd failed: {e}"));
                Subject::Etcd(Arc::new(registry), endpoint, prefix)
            }
            Kind::ZooKeeper => {
                let addr = std::env::var(self.env_var()).unwrap();
                let cluster = format!("bench-{stamp}");
                let config = ZooKeeperConfig::new(ZooKeeperMode::Ephemeral).with_cluster(&cluster);
                let registry = ZooKeeperRegistry::connect(&addr, config)
                    .await
                    .unwrap_or_else(|e| panic!("connect to zookeeper failed: {e}"));
                Subject::ZooKeeper(Arc::new(registry), addr, cluster)
            }
        }
    }
}

/// One run: `n_claims` claim + release round trips; returns the claim times and
/// the round-trip times, in microseconds.
async fn claim_run(registry: &dyn WorkerRegistry, n_claims: usize) -> (Vec<f64>, Vec<f64>) {
    let node = node();
    let range = u32::try_from(LAYOUT.workers()).unwrap();
    // One untimed round trip: connections are open and statements prepared.
    let warm = registry.claim(&node, range).await.expect("claim");
    registry.release(&warm).await.expect("release");
    let mut claims = Vec::with_capacity(n_claims);
    let mut trips = Vec::with_capacity(n_claims);
    for _ in 0..n_claims {
        let start = Instant::now();
        let claim = registry.claim(&node, range).await.expect("claim");
        let claimed = start.elapsed();
        registry.release(&claim).await.expect("release");
        let trip = start.elapsed();
        claims.push(claimed.as_secs_f64() * 1e6);
        trips.push(trip.as_secs_f64() * 1e6);
    }
    (claims, trips)
}

/// IDs per second from `threads` threads calling `f` for `window`, and how many
/// calls failed (each failure is retried at once; only successes count).
fn sustained<F>(threads: usize, window: Duration, make: impl Fn() -> F) -> (f64, u64)
where
    F: FnMut() -> bool + Send + 'static,
{
    let results = together(threads, || {
        let mut f = make();
        move || {
            let start = Instant::now();
            let (mut n, mut failed) = (0u64, 0u64);
            loop {
                for _ in 0..64 {
                    if f() {
                        n += 1;
                    } else {
                        failed += 1;
                    }
                }
                if start.elapsed() >= window {
                    break;
                }
            }
            (n, failed, start.elapsed())
        }
    });
    let total: u64 = results.iter().map(|r| r.0).sum();
    let failed: u64 = results.iter().map(|r| r.1).sum();
    let secs = results
        .iter()
        .map(|r| r.2.as_secs_f64())
        .fold(0.0, f64::max);
    (total as f64 / secs, failed)
}

/// A bare generator built as the keeper builds its own: the keeper's default
/// settings (monotonic clock, wait up to 5 ms when the clock is behind, wait for
/// the next tick when the sequence runs out), no mark.
fn bare_snowflake() -> Arc<Snowflake> {
    Arc::new(
        Snowflake::builder(LAYOUT)
            .with_worker(1)
            .with_clock(Arc::new(MonotonicClock::new()))
            .with_clock_behind(ClockBehind::Wait {
                max: Duration::from_millis(5),
            })
            .with_sequence_exhausted(SequenceExhausted::Wait)
            .build()
            .unwrap(),
    )
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing and
    // expects a quick smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs = if quick { 1 } else { runs() };
    let n_claims = if quick { 5 } else { 200 };
    let window = if quick {
        Duration::from_millis(50)
    } else {
        Duration::from_millis(500)
    };
    // The keeper's task runs here; the ID loops run on plain threads.
    let rt: Runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();

    // ---- Claim time per registry ----
    let kinds: &[Kind] = if quick {
        &[Kind::File, Kind::Static, Kind::Sqlite]
    } else {
        &[
            Kind::File,
            Kind::Static,
            Kind::Postgres,
            Kind::MariaDb,
            Kind::Sqlite,
            Kind::Redis,
            Kind::Etcd,
            Kind::ZooKeeper,
        ]
    };
    for &kind in kinds {
        if let Some(why) = kind.unavailable() {
            eprintln!("SKIPPED: {}: {why}", kind.name());
            rows.push(Row {
                what: format!("claim, {}", kind.name()),
                figure: format!("skipped: {why}"),
                ratio: String::new(),
            });
            continue;
        }
        let subject = rt.block_on(kind.open());
        let registry = subject.registry();
        let (mut claim_med, mut claim_p99, mut trip_med, mut trip_p99) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let (claims, trips) = rt.block_on(claim_run(registry.as_ref(), n_claims));
            claim_med.push(median(claims.clone()));
            claim_p99.push(quantile(claims, 0.99));
            trip_med.push(median(trips.clone()));
            trip_p99.push(quantile(trips, 0.99));
        }
        drop(registry);
        rt.block_on(subject.cleanup());
        let (cm, cp, tm, tp) = (
            median(claim_med),
            median(claim_p99),
            median(trip_med),
            median(trip_p99),
        );
        rows.push(Row {
            what: format!("claim, {}", kind.name()),
            figure: format!("median {}, p99 {}", us(cm), us(cp)),
            ratio: format!("round trip with release: median {}, p99 {}", us(tm), us(tp)),
        });
    }
    // ---- The high-water-mark check on the hot path ----
    let hot: &[Kind] = if quick {
        &[Kind::File]
    } else {
        &[Kind::File, Kind::Redis]
    };
    for threads in [1usize, 2] {
        let bare = median(
            (0..runs)
                .map(|_| {
                    let g = bare_snowflake();
                    sustained(threads, window, || {
                        let g = g.clone();
                        move || g.next_id().is_ok()
                    })
                    .0
                })
                .collect(),
        );
        rows.push(Row {
            what: format!(
                "bare `Snowflake::next_id`, twitter layout, wait policy, {threads} thread(s) (baseline)"
            ),
            figure: format!("{bare:.0} IDs/s"),
            ratio: format!("{:.4} of cap", bare / CAP_TWITTER),
        });
        for &kind in hot {
            let what = format!(
                "`WorkerHandle::next_id`, keeper on {}, {threads} thread(s)",
                kind.name()
            );
            if let Some(why) = kind.unavailable() {
                eprintln!("SKIPPED: {what}: {why}");
                rows.push(Row {
                    what,
                    figure: format!("skipped: {why}"),
                    ratio: String::new(),
                });
                continue;
            }
            let failures = AtomicU64::new(0);
            let rate = median(
                (0..runs)
                    .map(|_| {
                        let subject = rt.block_on(kind.open());
                        let guard = rt
                            .block_on(WorkerKeeper::start(
                                subject.registry(),
                                node(),
                                GeneratorSettings::new(LAYOUT),
                                KeeperConfig::new(),
                            ))
                            .expect("the keeper starts");
                        let handle = guard.handle().clone();
                        let (rate, failed) = sustained(threads, window, || {
                            let h = handle.clone();
                            move || h.next_id().is_ok()
                        });
                        failures.fetch_add(failed, Ordering::Relaxed);
                        drop(handle);
                        rt.block_on(guard.shutdown());
                        rt.block_on(subject.cleanup());
                        rate
                    })
                    .collect(),
            );
            rows.push(Row {
                what,
                figure: format!(
                    "{rate:.0} IDs/s, {} refused (all runs)",
                    failures.load(Ordering::Relaxed)
                ),
                ratio: format!(
                    "{:.4} of cap, {:.4} of bare",
                    rate / CAP_TWITTER,
                    rate / bare
                ),
            });
        }
    }

    print_table(
        [
            "measurement",
            &format!("median of {runs}"),
            "ratio / detail",
        ],
        &rows,
    );
}
