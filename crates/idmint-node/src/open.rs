//! The backends a node opens, and how: the worker registry and the oracle's
//! leader registry (`open_registry`, `open_leader_registry`), the segment
//! store and allocator (`open_store`, `open_segment_allocator`), and the
//! settings each is opened with, built without I/O so that [`check`]
//! validates exactly what a start opens.
//!
//! [`check`]: crate::check

use std::sync::Arc;
use std::time::Duration;

use idmint_core::{ClockBehind, Layout, SequenceExhausted, SequenceStart};
#[cfg(feature = "etcd")]
use idmint_registry::etcd::{EtcdConfig, EtcdRegistry};
use idmint_registry::file::{FileRegistry, LeaseFile};
use idmint_registry::fixed::{HostRegistry, K8sRegistry, StaticRegistry};
use idmint_registry::redis::{RedisConfig, RedisRegistry};
use idmint_registry::sql::{SqlConfig, SqlMode, SqlRegistry};
use idmint_registry::zookeeper::{ZooKeeperConfig, ZooKeeperMode, ZooKeeperRegistry};
use idmint_registry::{GeneratorSettings, KeeperConfig, RegistryError, WorkerRegistry};
use idmint_segment::redis::{RedisSegmentStore, RedisStoreConfig, RedisTarget};
use idmint_segment::sql::{SqlSegmentStore, SqlStoreConfig, TableSchema};
use idmint_segment::{FloorFile, SegmentAllocator, SegmentConfig, SegmentError, SegmentStore};

use crate::config::{Config, RegistryKind, SchemaName, SqlModeName, ZooKeeperModeName};
use crate::error::NodeError;

/// The worker registry `snowflake.registry` names, opened as `idmint serve`
/// opens it (the file, static, host and k8s registries keep their lease or
/// marks in `server.data_dir`).
///
/// # Errors
/// The registry's: [`RegistryError::Config`] for a setting it refuses, a
/// backend error when it can't be reached.
pub async fn open_registry(config: &Config) -> Result<Arc<dyn WorkerRegistry>, RegistryError> {
    open_registry_observed(config, &|_| {}).await
}

/// [`open_registry`], telling `waiting` each time a connect is tried again.
///
/// A start waits while the coordinator is unavailable or times out
/// ([`RegistryError::is_transient`]: nothing listening yet, etcd between
/// leaders, a failover under way), trying again after a pause that doubles
/// from 250 ms to 2 s, for up to the claim wait (`snowflake.claim_wait`),
/// then fails with the last error. Any other error (a refused password, a
/// bad setting) fails at once.
pub async fn open_registry_observed(
    config: &Config,
    waiting: &(dyn Fn(&RegistryError) + Send + Sync),
) -> Result<Arc<dyn WorkerRegistry>, RegistryError> {
    let wait = keeper_config(config).max_claim_wait();
    // Boxed: each backend's connect is a deep future, and nesting it in
    // the retry loop's overflowed the compiler's query depth in callers.
    open_waiting(wait, waiting, || Box::pin(open_registry_once(config))).await
}

/// Tries `open` until it succeeds, fails with an error that a retry would
/// not change, or `wait` has passed (see [`open_registry_observed`]).
pub async fn open_waiting<T, F, Fut>(
    wait: Duration,
    waiting: &(dyn Fn(&RegistryError) + Send + Sync),
    mut open: F,
) -> Result<T, RegistryError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, RegistryError>>,
{
    const FIRST_PAUSE: Duration = Duration::from_millis(250);
    const MAX_PAUSE: Duration = Duration::from_secs(2);
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = FIRST_PAUSE;
    let mut said = false;
    loop {
        let error = match open().await {
            Ok(opened) => return Ok(opened),
            Err(e) if e.is_transient() => e,
            Err(e) => return Err(e),
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(error);
        }
        if !said {
            tracing::warn!(wait_up_to = ?left, "waiting for the registry: {error}");
            said = true;
        }
        waiting(&error);
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

async fn open_registry_once(config: &Config) -> Result<Arc<dyn WorkerRegistry>, RegistryError> {
    let sf = &config.snowflake;
    let data_dir = &config.server.data_dir;
    Ok(match sf.registry {
        RegistryKind::File => Arc::new(FileRegistry::open(data_dir, sf.worker.unwrap_or(0))?),
        RegistryKind::Static => Arc::new(
            StaticRegistry::new(sf.worker.unwrap_or(0)).with_mark_file(LeaseFile::open(data_dir)?),
        ),
        RegistryKind::Host => {
            let registry = match sf.host.address {
                Some(address) => HostRegistry::from_ipv4(address)?,
                None => HostRegistry::from_local_hostname()?,
            };
            Arc::new(registry.with_mark_file(LeaseFile::open(data_dir)?))
        }
        RegistryKind::K8s => {
            let registry = match &sf.k8s.hostname {
                Some(h) => K8sRegistry::from_hostname(h)?,
                None => K8sRegistry::from_local_hostname()?,
            };
            Arc::new(registry.with_mark_file(LeaseFile::open(data_dir)?))
        }
        RegistryKind::Sql => {
            let url = sf.sql.url.as_ref().map(|u| u.expose()).unwrap_or_default();
            Arc::new(SqlRegistry::connect(url, sql_registry_config(config)).await?)
        }
        RegistryKind::Redis => {
            Arc::new(RedisRegistry::open(&sf.redis.target(), redis_registry_config(config)).await?)
        }
        #[cfg(feature = "etcd")]
        RegistryKind::Etcd => {
            Arc::new(EtcdRegistry::connect(&sf.etcd.endpoints, etcd_config(config)).await?)
        }
        #[cfg(not(feature = "etcd"))]
        RegistryKind::Etcd => return Err(without_etcd()),
        RegistryKind::Zookeeper => Arc::new(
            ZooKeeperRegistry::connect(&sf.zookeeper.connect, zookeeper_config(config)).await?,
        ),
    })
}

/// The refusal of `snowflake.registry = "etcd"` in a build without the
/// `etcd` feature (a binding built without it; `idmint serve` has it).
pub fn without_etcd() -> RegistryError {
    RegistryError::Unsupported {
        registry: "etcd",
        operation: "connecting",
        reason: Some("this build has no etcd registry (the `etcd` feature is off)".to_owned()),
    }
}

/// The registry the oracle's leader is elected in: the worker registry's
/// backend, in a namespace of its own (cluster `<cluster>.monotonic`; for the
/// file registry, the data directory's `monotonic/`), with
/// `monotonic.lease_ttl`. SQL always uses lease mode there and ZooKeeper
/// ephemeral mode: the leadership is one lease that changes holders.
pub async fn open_leader_registry(
    config: &Config,
    waiting: &(dyn Fn(&RegistryError) + Send + Sync),
) -> Result<Arc<dyn WorkerRegistry>, RegistryError> {
    let wait = keeper_config(config).max_claim_wait();
    open_waiting(wait, waiting, || {
        Box::pin(open_leader_registry_once(config))
    })
    .await
}

async fn open_leader_registry_once(
    config: &Config,
) -> Result<Arc<dyn WorkerRegistry>, RegistryError> {
    let sf = &config.snowflake;
    Ok(match sf.registry {
        RegistryKind::File => Arc::new(FileRegistry::open(
            config.server.data_dir.join("monotonic"),
            0,
        )?),
        RegistryKind::Sql => {
            let url = sf.sql.url.as_ref().map(|u| u.expose()).unwrap_or_default();
            Arc::new(SqlRegistry::connect(url, leader_sql_config(config)).await?)
        }
        RegistryKind::Redis => {
            Arc::new(RedisRegistry::open(&sf.redis.target(), leader_redis_config(config)).await?)
        }
        #[cfg(feature = "etcd")]
        RegistryKind::Etcd => {
            Arc::new(EtcdRegistry::connect(&sf.etcd.endpoints, leader_etcd_config(config)).await?)
        }
        #[cfg(not(feature = "etcd"))]
        RegistryKind::Etcd => return Err(without_etcd()),
        RegistryKind::Zookeeper => Arc::new(
            ZooKeeperRegistry::connect(&sf.zookeeper.connect, leader_zookeeper_config(config))
                .await?,
        ),
        kind @ (RegistryKind::Static | RegistryKind::Host | RegistryKind::K8s) => {
            // Config::validate refuses these with monotonic keys.
            return Err(RegistryError::Unsupported {
                registry: kind.name(),
                operation: "electing the oracle's leader",
                reason: None,
            });
        }
    })
}

/// The cluster name of the oracle's namespace.
fn leader_cluster(cluster: &str) -> String {
    format!("{cluster}.monotonic")
}

/// The SQL registry settings of the oracle's leader (lease mode, `monotonic.lease_ttl`).
pub fn leader_sql_config(config: &Config) -> SqlConfig {
    let s = &config.snowflake.sql;
    let sql_config = SqlConfig::new(SqlMode::Lease)
        .with_cluster(leader_cluster(&s.cluster))
        .with_lease_ttl(config.monotonic.lease_ttl)
        .with_mark_window(config.monotonic.window);
    // uid-generator's WORKER_NODE has no cluster column: idmint's own table.
    match &s.table {
        Some(table) if s.mode != SqlModeName::UidGenerator => sql_config.with_table(table.clone()),
        _ => sql_config,
    }
}

/// The Redis registry settings of the oracle's leader.
pub fn leader_redis_config(config: &Config) -> RedisConfig {
    RedisConfig::new()
        .with_cluster(&leader_cluster(&config.snowflake.redis.cluster))
        .with_lease_ttl(config.monotonic.lease_ttl)
        .with_mark_window(config.monotonic.window)
}

/// Ephemeral mode whatever `snowflake.zookeeper.mode` says: the session is
/// the leader's lease (`monotonic.lease_ttl` asked as its timeout; the
/// server's negotiated one is what the leader fences on).
pub fn leader_zookeeper_config(config: &Config) -> ZooKeeperConfig {
    ZooKeeperConfig::new(ZooKeeperMode::Ephemeral)
        .with_cluster(leader_cluster(&config.snowflake.zookeeper.cluster))
        .with_session_timeout(config.monotonic.lease_ttl)
}

/// The etcd registry settings of the oracle's leader.
#[cfg(feature = "etcd")]
pub fn leader_etcd_config(config: &Config) -> EtcdConfig {
    EtcdConfig::new()
        .with_cluster(&leader_cluster(&config.snowflake.etcd.cluster))
        .with_lease_ttl(config.monotonic.lease_ttl)
}

/// The oracle's generator: `monotonic.layout`, borrowing on both policies
/// up to `monotonic.max_lead` (a new leader whose clock is behind the last
/// one's mark goes on from the mark), sequences from zero.
pub fn oracle_settings(config: &Config, layout: Layout) -> GeneratorSettings {
    let max_lead = config.monotonic.max_lead;
    GeneratorSettings::new(layout)
        .with_clock_behind(ClockBehind::Borrow { max_lead })
        .with_sequence_exhausted(SequenceExhausted::Borrow { max_lead })
        .with_sequence_start(SequenceStart::Zero)
}

/// The oracle's keeper: `monotonic.window`, a lease margin of a third of the
/// TTL (at most 1 s), checks and retries at the campaign's pace.
pub fn oracle_keeper_config(config: &Config) -> KeeperConfig {
    let m = &config.monotonic;
    KeeperConfig::new()
        .with_window(m.window)
        .with_lease_margin((m.lease_ttl / 3).min(Duration::from_secs(1)))
        .with_check_interval((m.window / 4).min(Duration::from_millis(100)))
        .with_retry_interval(m.poll)
        .with_call_timeout(m.lease_ttl.min(Duration::from_secs(2)))
}

// The settings each backend is opened with, built without I/O, so that
// `check` validates exactly what a start opens.

/// The generator a claimed worker runs: `layout` with `[snowflake]`'s clock
/// and sequence policies and its datacenter.
pub fn generator_settings(config: &Config, layout: Layout) -> GeneratorSettings {
    let sf = &config.snowflake;
    let settings = GeneratorSettings::new(layout)
        .with_clock_behind(sf.clock_behind)
        .with_sequence_exhausted(sf.sequence_exhausted)
        .with_sequence_start(sf.sequence_start);
    match sf.datacenter {
        Some(dc) => settings.with_datacenter(dc),
        None => settings,
    }
}

/// How the worker's keeper runs: `snowflake.window`,
/// `snowflake.max_peer_skew`, `snowflake.report_interval` and
/// `snowflake.claim_wait`, the rest the keeper's defaults.
pub fn keeper_config(config: &Config) -> KeeperConfig {
    let sf = &config.snowflake;
    KeeperConfig::new()
        .with_window(sf.mark_window())
        .with_peer_skew_threshold(sf.max_peer_skew)
        .with_report_interval(sf.report_interval)
        .with_max_claim_wait(sf.claim_wait.resolve(lease_ttl(config), sf.mark_window()))
}

/// How long the configured registry's leases last; `None` for registries
/// that hold a worker ID without one (file, static, host, k8s).
pub fn lease_ttl(config: &Config) -> Option<Duration> {
    let sf = &config.snowflake;
    match sf.registry {
        RegistryKind::Sql => Some(sf.sql.lease_ttl),
        RegistryKind::Redis => Some(sf.redis.lease_ttl),
        RegistryKind::Etcd => Some(sf.etcd.lease_ttl),
        RegistryKind::Zookeeper => Some(sf.zookeeper.session_timeout),
        RegistryKind::File | RegistryKind::Static | RegistryKind::Host | RegistryKind::K8s => None,
    }
}

/// The SQL registry settings of `[snowflake.sql]`.
pub fn sql_registry_config(config: &Config) -> SqlConfig {
    let s = &config.snowflake.sql;
    let mode = match s.mode {
        SqlModeName::Lease => SqlMode::Lease,
        SqlModeName::Disposable => SqlMode::Disposable,
        SqlModeName::UidGenerator => SqlMode::UidGenerator,
    };
    let sql_config = SqlConfig::new(mode)
        .with_cluster(s.cluster.clone())
        .with_lease_ttl(s.lease_ttl)
        .with_mark_window(config.snowflake.mark_window());
    // Unset: the mode's own default (`WORKER_NODE` for uid-generator).
    match &s.table {
        Some(table) => sql_config.with_table(table.clone()),
        None => sql_config,
    }
}

/// The Redis registry settings of `[snowflake.redis]`.
pub fn redis_registry_config(config: &Config) -> RedisConfig {
    let r = &config.snowflake.redis;
    RedisConfig::new()
        .with_cluster(&r.cluster)
        .with_lease_ttl(r.lease_ttl)
        .with_mark_window(config.snowflake.mark_window())
}

/// The etcd registry settings of `[snowflake.etcd]`.
#[cfg(feature = "etcd")]
pub fn etcd_config(config: &Config) -> EtcdConfig {
    let e = &config.snowflake.etcd;
    EtcdConfig::new()
        .with_cluster(&e.cluster)
        .with_lease_ttl(e.lease_ttl)
}

/// The ZooKeeper registry settings of `[snowflake.zookeeper]`.
pub fn zookeeper_config(config: &Config) -> ZooKeeperConfig {
    let z = &config.snowflake.zookeeper;
    let zk_config = ZooKeeperConfig::new(match z.mode {
        ZooKeeperModeName::Ephemeral => ZooKeeperMode::Ephemeral,
        ZooKeeperModeName::Forever => ZooKeeperMode::Forever,
    })
    .with_cluster(z.cluster.clone())
    .with_session_timeout(z.session_timeout);
    match z.mode {
        ZooKeeperModeName::Forever => {
            zk_config.with_cache_dir(config.server.data_dir.join("zookeeper-cache"))
        }
        ZooKeeperModeName::Ephemeral => zk_config,
    }
}

/// The segment allocator's settings of `[segment]` (its batch bound is `server.max_count`).
pub fn segment_config(config: &Config) -> SegmentConfig {
    let seg = &config.segment;
    SegmentConfig::new()
        .with_preload_share(seg.preload_share)
        .with_max_step(seg.max_step)
        .with_max_batch(config.server.max_count.max(1))
}

/// The segment store to open: Redis by the URL's scheme or a Sentinel or
/// Cluster section, else SQL.
pub enum StoreSettings {
    /// A Redis store.
    Redis {
        /// Where.
        target: RedisTarget,
        /// Its settings.
        config: RedisStoreConfig,
    },
    /// A SQL store.
    Sql(SqlStoreConfig),
}

/// The segment store `[segment]` names, and its settings.
pub fn store_settings(config: &Config) -> StoreSettings {
    let url = config.segment_url();
    let seg = &config.segment;
    if let Some(target) = config.segment_redis_target() {
        let store = RedisStoreConfig::new().with_key_prefix(config.segment_redis_prefix());
        StoreSettings::Redis {
            target,
            config: match seg.replicas {
                Some(n) => store.with_replicas(n),
                None => store,
            },
        }
    } else {
        let schema = match seg.schema {
            SchemaName::Idmint => TableSchema::Idmint,
            SchemaName::Leaf => TableSchema::Leaf,
            SchemaName::Tinyid => TableSchema::Tinyid,
        };
        let sql_config = SqlStoreConfig::new(url).with_schema(schema);
        StoreSettings::Sql(match &seg.table {
            Some(table) => sql_config.with_table(table.clone()),
            None => sql_config,
        })
    }
}

/// The segment allocator on the configured store, as `open_segments`
/// opens it for the server but with no metrics, and with the floor file in
/// `server.data_dir` only when `floors` (a process embedding idmint may run
/// many times on one host: see `idmint-embed`).
///
/// # Errors
/// [`NodeError::Segment`] naming `segment.url` (password hidden) or the
/// floor file.
pub async fn open_segment_allocator(
    config: &Config,
    floors: bool,
) -> Result<SegmentAllocator, NodeError> {
    let floors = if floors {
        Some(open_floors(config)?)
    } else {
        None
    };
    let (store, _) = open_store(config).await?;
    allocator_on(config, store, floors)
}

/// This node's floor file in `server.data_dir`.
pub fn open_floors(config: &Config) -> Result<FloorFile, NodeError> {
    let data_dir = &config.server.data_dir;
    FloorFile::open(data_dir).map_err(|source| NodeError::Segment {
        what: format!(
            "opening the floor file in server.data_dir {}",
            data_dir.display()
        ),
        source,
    })
}

/// The allocator on `store` with `[segment]`'s settings and `floors`.
pub fn allocator_on(
    config: &Config,
    store: Arc<dyn SegmentStore>,
    floors: Option<FloorFile>,
) -> Result<SegmentAllocator, NodeError> {
    let name = config.segment_store_name();
    tracing::info!(store = store.kind(), at = %name, "segment store open");
    let allocator = SegmentAllocator::from_shared(store, segment_config(config));
    let allocator = match floors {
        Some(floors) => allocator.and_then(|a| a.with_floors(Arc::new(floors))),
        None => allocator,
    };
    allocator.map_err(|source| NodeError::Segment {
        what: format!("opening {name}"),
        source,
    })
}

/// What a start does on the opened allocator before it serves: checks the
/// store against this node's floors (refusing a store that was reset or
/// restored behind them, and leaving it as it was), records the keys the
/// store holds in its ledger, then creates the keys declared in
/// `[segment.keys]` that the store lacks, refusing one its ledger knows
/// (`key_forgotten`: a key the store had and lost is never created again
/// from its start).
///
/// # Errors
/// [`NodeError::Segment`] naming the floor file or the key.
pub async fn prepare_segments(
    config: &Config,
    segments: &SegmentAllocator,
) -> Result<(), NodeError> {
    let declared: Vec<String> = config.segment.keys.keys().cloned().collect();
    if let Err(source) = segments.check_floors(&declared).await {
        let floors = segments
            .floors()
            .map(|f| f.path().display().to_string())
            .unwrap_or_default();
        return Err(NodeError::Segment {
            what: format!("checking the store against this node's floors in {floors}"),
            source,
        });
    }
    if let Err(source) = segments.store().remember_keys().await {
        return Err(NodeError::Segment {
            what: "recording the store's keys in its ledger".to_owned(),
            source,
        });
    }
    for (name, key) in &config.segment.keys {
        match segments.create_key(key.new_key(name)).await {
            Ok(info) => tracing::info!(key = %name, step = info.step, "segment key created"),
            Err(SegmentError::KeyExists { .. }) => {}
            Err(source) => {
                return Err(NodeError::Segment {
                    what: format!("creating segment.keys.{name}"),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Connects to the configured segment store (migrating idmint's table), as
/// the server does at start, for the command line's operator commands
/// (`idmint segment raise`).
///
/// # Errors
/// [`NodeError::Segment`] naming `segment.url` (password hidden).
pub async fn open_segment_store(config: &Config) -> Result<Arc<dyn SegmentStore>, NodeError> {
    Ok(open_store(config).await?.0)
}

/// The configured store, and the same store typed when it is Tinyid's table.
pub async fn open_store(
    config: &Config,
) -> Result<(Arc<dyn SegmentStore>, Option<Arc<SqlSegmentStore>>), NodeError> {
    let name = config.segment_store_name();
    let fail = |source| NodeError::Segment {
        what: format!("opening {name}"),
        source,
    };
    Ok(match store_settings(config) {
        StoreSettings::Redis { target, config } => (
            Arc::new(
                RedisSegmentStore::open(&target, config)
                    .await
                    .map_err(fail)?,
            ),
            None,
        ),
        StoreSettings::Sql(sql_config) => {
            let schema = sql_config.schema();
            let store = Arc::new(SqlSegmentStore::connect(sql_config).await.map_err(fail)?);
            let tinyid = (schema == TableSchema::Tinyid).then(|| store.clone());
            (store, tinyid)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MarkWindow;

    /// `window = "auto"` (the default) gives the keeper 6 s where a leader
    /// election stops the coordinator's writes and another node may take the
    /// worker (etcd, ZooKeeper `ephemeral`), 3 s elsewhere; a duration is
    /// taken as written, on every registry.
    #[test]
    fn the_auto_window_is_wider_where_coordinators_elect_leaders() {
        let window = |registry: RegistryKind, mode: ZooKeeperModeName, window: MarkWindow| {
            let mut config = Config::default();
            config.snowflake.registry = registry;
            config.snowflake.zookeeper.mode = mode;
            config.snowflake.window = window;
            keeper_config(&config).window()
        };
        let secs = Duration::from_secs;
        let (ephemeral, forever) = (ZooKeeperModeName::Ephemeral, ZooKeeperModeName::Forever);
        assert_eq!(Config::default().snowflake.window, MarkWindow::Auto);
        assert_eq!(
            window(RegistryKind::Etcd, ephemeral, MarkWindow::Auto),
            secs(6)
        );
        assert_eq!(
            window(RegistryKind::Zookeeper, ephemeral, MarkWindow::Auto),
            secs(6)
        );
        assert_eq!(
            window(RegistryKind::Zookeeper, forever, MarkWindow::Auto),
            secs(3)
        );
        for registry in [
            RegistryKind::File,
            RegistryKind::Static,
            RegistryKind::Host,
            RegistryKind::K8s,
            RegistryKind::Sql,
            RegistryKind::Redis,
        ] {
            assert_eq!(
                window(registry, ephemeral, MarkWindow::Auto),
                secs(3),
                "{registry:?}"
            );
        }
        let fixed = MarkWindow::Fixed(Duration::from_millis(1500));
        assert_eq!(
            window(RegistryKind::Etcd, ephemeral, fixed),
            Duration::from_millis(1500)
        );
        assert_eq!(
            window(RegistryKind::Sql, ephemeral, fixed),
            Duration::from_millis(1500)
        );
        assert_eq!("auto".parse::<MarkWindow>(), Ok(MarkWindow::Auto));
        assert_eq!("4s".parse::<MarkWindow>(), Ok(MarkWindow::Fixed(secs(4))));
        assert!(
            "soon"
                .parse::<MarkWindow>()
                .unwrap_err()
                .contains("\"auto\"")
        );
        assert_eq!(MarkWindow::Auto.to_string(), "auto");
        assert_eq!(MarkWindow::Fixed(secs(4)).to_string(), "4s");
    }

    /// After the database forgot, claims wait the lease TTL plus the window
    /// the keepers persist ahead by: each registry is told its keepers'.
    #[test]
    fn sql_registries_hold_for_their_keepers_window() {
        let mut config = Config::default();
        config.snowflake.window = MarkWindow::Fixed(Duration::from_secs(7));
        config.monotonic.window = Duration::from_millis(1500);
        let workers = sql_registry_config(&config);
        assert_eq!(workers.mark_window(), Duration::from_secs(7));
        assert_eq!(
            workers.reset_hold(),
            config.snowflake.sql.lease_ttl + Duration::from_secs(7)
        );
        let leader = leader_sql_config(&config);
        assert_eq!(leader.mark_window(), Duration::from_millis(1500));
        assert_eq!(
            leader.reset_hold(),
            config.monotonic.lease_ttl + Duration::from_millis(1500)
        );
    }
}
