//! The config's sections below the top level (`[server]`, `[snowflake]` and
//! its registries, `[segment]`, `[keys.<name>]`, `[obfuscation]`, `[tls]`):
//! their keys, defaults and serde spellings. The reference for every key is
//! the module doc of [`config`](super); `idmint.example.toml` lists them all.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use idmint_core::{
    ClockBehind, ObfuscationKey, Obfuscator, SequenceExhausted, SequenceStart, TextFormat,
};
use idmint_redis::{ClusterTarget, RedisTarget, SentinelTarget};
use idmint_segment::NewKey;
use serde::{Deserialize, Deserializer, Serialize};

use super::{CHECKED, ConfigError, OBFUSCATION_KEY_ENV, Secret, show};

/// `[server]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Where HTTP listens (default `127.0.0.1:8080`; port 0 picks a free port).
    pub http_addr: SocketAddr,
    /// Where the Redis-protocol (RESP2/RESP3) listener listens (default: none, off;
    /// port 0 picks a free port).
    pub resp_addr: Option<SocketAddr>,
    /// Where the gRPC listener (`idmint.v1.IdService`) listens (default:
    /// none, off; port 0 picks a free port).
    pub grpc_addr: Option<SocketAddr>,
    /// The data directory: worker lease file, segment floors (what this node
    /// issued per key, `segment-floors`), default SQLite segment store
    /// (default `./idmint-data`, created if missing).
    pub data_dir: PathBuf,
    /// The admin API's bearer token (also `IDMINT_ADMIN_TOKEN`); unset, the
    /// admin API answers 403.
    pub admin_token: Option<Secret>,
    /// The largest `count` one request may ask for (default 100,000).
    pub max_count: u64,
    /// How long a shutdown waits for in-flight requests (default `10s`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub shutdown_grace: Duration,
    /// The most client connections open at once, HTTP and RESP together
    /// (default 4,096); further clients wait to be accepted. See "Slow and
    /// greedy clients" above.
    pub max_connections: usize,
    /// How long a client may take to send a request once it started (HTTP:
    /// the request line and headers; RESP: one whole command), and how long
    /// an HTTP connection may sit idle (default `10s`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub read_timeout: Duration,
    /// What a name declared nowhere gets (see "Undeclared keys" above);
    /// unset, [`Config::undeclared_keys`](super::Config::undeclared_keys) picks by `segment.schema`.
    pub undeclared_keys: Option<UndeclaredKeys>,
}

/// `server.undeclared_keys`: the strategy of names declared nowhere, or `refuse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum UndeclaredKeys {
    /// Snowflake IDs (the default on idmint's own segment table).
    Snowflake,
    /// The segment store's row of that name (the default on a Leaf or
    /// Tinyid table); no row is `key_not_found`.
    Segment,
    /// Random UUIDs.
    Uuid4,
    /// Time-ordered UUIDs.
    Uuid7,
    /// A typed `unknown_key` error: only declared keys are served.
    Refuse,
}

impl UndeclaredKeys {
    /// The strategy undeclared names get, or `None` when they are refused.
    pub fn strategy(self) -> Option<Strategy> {
        match self {
            UndeclaredKeys::Snowflake => Some(Strategy::Snowflake),
            UndeclaredKeys::Segment => Some(Strategy::Segment),
            UndeclaredKeys::Uuid4 => Some(Strategy::Uuid4),
            UndeclaredKeys::Uuid7 => Some(Strategy::Uuid7),
            UndeclaredKeys::Refuse => None,
        }
    }

    /// The name as written in config.
    pub fn name(self) -> &'static str {
        self.strategy().map_or("refuse", Strategy::name)
    }
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            resp_addr: None,
            grpc_addr: None,
            data_dir: PathBuf::from("./idmint-data"),
            admin_token: None,
            max_count: 100_000,
            shutdown_grace: Duration::from_secs(10),
            max_connections: 4096,
            read_timeout: Duration::from_secs(10),
            undeclared_keys: None,
        }
    }
}

/// Which worker registry hands out the snowflake worker ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RegistryKind {
    /// A lease file in the data directory (the embedded default).
    #[default]
    File,
    /// `snowflake.worker` from config, marks in the data directory.
    Static,
    /// From the host's private IPv4 address.
    Host,
    /// From the StatefulSet ordinal in the pod's host name.
    K8s,
    /// A table on PostgreSQL, MySQL/MariaDB or SQLite.
    Sql,
    /// `SET NX PX` leases on Redis.
    Redis,
    /// etcd leases.
    Etcd,
    /// ZooKeeper nodes.
    Zookeeper,
}

impl RegistryKind {
    /// The name as written in config.
    pub fn name(self) -> &'static str {
        match self {
            RegistryKind::File => "file",
            RegistryKind::Static => "static",
            RegistryKind::Host => "host",
            RegistryKind::K8s => "k8s",
            RegistryKind::Sql => "sql",
            RegistryKind::Redis => "redis",
            RegistryKind::Etcd => "etcd",
            RegistryKind::Zookeeper => "zookeeper",
        }
    }
}

/// The time snowflake IDs are made from (`snowflake.clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockSource {
    /// The wall clock read once at start, advanced by the monotonic clock: a
    /// wall-clock step while running is invisible (the default).
    #[default]
    Monotonic,
    /// The raw wall clock: it steps back and forward with the system clock.
    Wall,
}

impl ClockSource {
    /// The name as written in config.
    pub fn name(self) -> &'static str {
        match self {
            ClockSource::Monotonic => "monotonic",
            ClockSource::Wall => "wall",
        }
    }
}

/// `[snowflake]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnowflakeConfig {
    /// The layout in its text form (`twitter`, `leaf,rollback=2`, ...; default `twitter`).
    pub layout: String,
    /// The worker registry (default `file`).
    pub registry: RegistryKind,
    /// The worker ID for the `file` (default 0) and `static` (required) registries.
    pub worker: Option<u32>,
    /// A fixed datacenter: registries then hand out only the worker part.
    pub datacenter: Option<u32>,
    /// How far ahead the high-water mark is persisted: `auto` (default: 6 s
    /// on `etcd` and ZooKeeper `ephemeral`, 3 s elsewhere;
    /// [`MarkWindow::resolve`]) or a duration. Read it through
    /// [`SnowflakeConfig::mark_window`].
    #[serde(deserialize_with = "from_text", serialize_with = "show::text")]
    pub window: MarkWindow,
    /// The most this node's clock may differ at start from the median of the
    /// times live peers reported (default `10s`, Twitter's check); further
    /// off, the start is refused (`clock_skew`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub max_peer_skew: Duration,
    /// How often a node reports its time to the registry, re-persisting its
    /// mark (default `3s`): one write per node per interval, whatever the
    /// mark's room. A longer interval spares a large fleet's coordinator;
    /// a start's clock check then allows peers' reports to be that old.
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub report_interval: Duration,
    /// How long a start waits to claim a worker ID while every one is taken
    /// (a dead node's lease has yet to expire) or the registry holds claims:
    /// `auto` (default: the registry's lease TTL plus the window plus 30 s,
    /// and at least 60 s) or a duration. Past it, the start fails; while
    /// the registry's calls time out (a coordinator serving a crowd of
    /// starts), past four times it.
    #[serde(deserialize_with = "from_text", serialize_with = "show::text")]
    pub claim_wait: ClaimWait,
    /// The time IDs are made from: `monotonic` (default) or `wall`.
    pub clock: ClockSource,
    /// When the clock is behind the last issued ID: `fail`, `wait:5ms`
    /// (default), `borrow:50ms`, `rollback-bits` or `history:N`.
    #[serde(deserialize_with = "from_text", serialize_with = "show::text")]
    pub clock_behind: ClockBehind,
    /// When a tick's sequence is used up: `wait` (default) or `borrow:1s`.
    #[serde(deserialize_with = "from_text", serialize_with = "show::text")]
    pub sequence_exhausted: SequenceExhausted,
    /// Where each tick's sequence starts: `zero` (default) or `random:100`.
    #[serde(deserialize_with = "from_text", serialize_with = "show::text")]
    pub sequence_start: SequenceStart,
    /// The address peers know this node by (default: the HTTP address's IP, or
    /// the host name when that is unspecified).
    pub advertise_address: Option<String>,
    /// `[snowflake.host]`.
    pub host: HostSection,
    /// `[snowflake.k8s]`.
    pub k8s: K8sSection,
    /// `[snowflake.sql]`.
    pub sql: SqlRegistrySection,
    /// `[snowflake.redis]`.
    pub redis: RedisRegistrySection,
    /// `[snowflake.etcd]`.
    pub etcd: EtcdSection,
    /// `[snowflake.zookeeper]`.
    pub zookeeper: ZooKeeperSection,
}

impl SnowflakeConfig {
    /// The mark window this config gives its registry: `window`, resolved.
    pub fn mark_window(&self) -> Duration {
        self.window.resolve(self.registry, self.zookeeper.mode)
    }
}

impl Default for SnowflakeConfig {
    fn default() -> SnowflakeConfig {
        SnowflakeConfig {
            layout: "twitter".to_owned(),
            registry: RegistryKind::File,
            worker: None,
            datacenter: None,
            window: MarkWindow::Auto,
            max_peer_skew: Duration::from_secs(10),
            report_interval: Duration::from_secs(3),
            claim_wait: ClaimWait::Auto,
            clock: ClockSource::Monotonic,
            clock_behind: ClockBehind::default(),
            sequence_exhausted: SequenceExhausted::default(),
            sequence_start: SequenceStart::default(),
            advertise_address: None,
            host: HostSection::default(),
            k8s: K8sSection::default(),
            sql: SqlRegistrySection::default(),
            redis: RedisRegistrySection::default(),
            etcd: EtcdSection::default(),
            zookeeper: ZooKeeperSection::default(),
        }
    }
}

/// `[monotonic]`: the timestamp oracle behind `strategy = "monotonic"` keys.
///
/// Its leader is elected through the worker registry of `[snowflake]` (a
/// shared one: `sql`, `redis`, `etcd` or `zookeeper`; or `file` for one node alone), in a
/// namespace of its own (cluster `<cluster>.monotonic`). Followers forward to
/// it over gRPC, over TLS when `tls.grpc` is on.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MonotonicSection {
    /// The layout of its IDs, without node bits (default `tso`: 45 bits of
    /// milliseconds since the Unix epoch above an 18-bit counter, as TiKV PD).
    pub layout: String,
    /// The leader's lease TTL (default `3s`; whole seconds on etcd). A dead
    /// leader is replaced after about this long.
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub lease_ttl: Duration,
    /// How far ahead of its IDs the leader persists its mark (default `3s`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub window: Duration,
    /// How far the leader may run ahead of its own clock (default `24h`): a
    /// new leader whose clock is behind the last leader's mark goes on from
    /// the mark; one further behind refuses to lead.
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub max_lead: Duration,
    /// How long a request waits for a leader during an election before it is
    /// answered `503 no_leader` with `Retry-After` (default `2s`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub leader_wait: Duration,
    /// How often a node that does not lead reads who does (default
    /// `250ms`; at most every 2 s while it knows a leader), and tries to lead
    /// when nobody does.
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub poll: Duration,
    /// With `tls.grpc` on: the CA certificates (PEM) the leader's gRPC
    /// certificate chains to, which followers trust when they forward.
    pub forward_ca: Option<PathBuf>,
    /// With `tls.client_ca` set: the client certificate (PEM) followers
    /// present to the leader.
    pub forward_cert: Option<PathBuf>,
    /// The private key (PEM) of `forward_cert`.
    pub forward_key: Option<PathBuf>,
}

impl Default for MonotonicSection {
    fn default() -> MonotonicSection {
        MonotonicSection {
            layout: "tso".to_owned(),
            lease_ttl: Duration::from_secs(3),
            window: Duration::from_secs(3),
            max_lead: Duration::from_secs(24 * 3600),
            leader_wait: Duration::from_secs(2),
            poll: Duration::from_millis(250),
            forward_ca: None,
            forward_cert: None,
            forward_key: None,
        }
    }
}

/// `[snowflake.host]`: the `host` registry.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostSection {
    /// The private IPv4 address to take the worker ID from (default: resolve
    /// the host name).
    pub address: Option<Ipv4Addr>,
}

/// `[snowflake.k8s]`: the `k8s` registry.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct K8sSection {
    /// The pod host name (default: this machine's).
    pub hostname: Option<String>,
}

/// How the `sql` registry hands out IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SqlModeName {
    /// Reuse IDs whose lease expired.
    #[default]
    Lease,
    /// A new row (and ID) every start.
    Disposable,
    /// A new row every start in uid-generator's own `WORKER_NODE` table,
    /// as uid-generator's `DisposableWorkerIdAssigner` writes it.
    #[serde(rename = "uid-generator")]
    UidGenerator,
}

/// `[snowflake.sql]`: the `sql` registry.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SqlRegistrySection {
    /// `postgres://…`, `mysql://…` or `sqlite://…` (required for `sql`).
    /// PostgreSQL takes libpq's multi-host form
    /// (`postgres://h1:5432,h2:5432/db?target_session_attrs=read-write`) and
    /// MySQL/MariaDB a host list (`mysql://h1:3306,h2:3306/db`): the first
    /// writable host is used and followed through a failover.
    #[serde(
        serialize_with = "show::optional_url",
        skip_serializing_if = "Option::is_none"
    )]
    pub url: Option<Secret>,
    /// `lease` (default), `disposable` or `uid-generator`.
    pub mode: SqlModeName,
    /// The cluster (default `default`; not used in `uid-generator` mode).
    pub cluster: String,
    /// The table (default `idmint_worker`, or `WORKER_NODE` in `uid-generator`
    /// mode).
    pub table: Option<String>,
    /// The lease TTL (default `30s`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub lease_ttl: Duration,
}

impl Default for SqlRegistrySection {
    fn default() -> Self {
        SqlRegistrySection {
            url: None,
            mode: SqlModeName::Lease,
            cluster: "default".to_owned(),
            table: None,
            lease_ttl: Duration::from_secs(30),
        }
    }
}

/// `[snowflake.redis]`: the `redis` registry.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisRegistrySection {
    /// `redis://host:port` (default `redis://127.0.0.1:6379`); left unset
    /// with `sentinel` or `redis_cluster`.
    #[serde(serialize_with = "show::url")]
    pub url: Secret,
    /// The cluster (default `default`).
    pub cluster: String,
    /// The lease TTL (default `10s`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub lease_ttl: Duration,
    /// `[snowflake.redis.sentinel]`: reach the primary through Redis
    /// Sentinel instead of `url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinel: Option<RedisSentinelSection>,
    /// `[snowflake.redis.redis_cluster]`: a Redis Cluster instead of `url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_cluster: Option<RedisClusterSection>,
}

/// The `url` the `redis` registry uses unless set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

impl Default for RedisRegistrySection {
    fn default() -> Self {
        RedisRegistrySection {
            url: Secret::new(DEFAULT_REDIS_URL),
            cluster: "default".to_owned(),
            lease_ttl: Duration::from_secs(10),
            sentinel: None,
            redis_cluster: None,
        }
    }
}

impl RedisRegistrySection {
    /// Where the registry's Redis is: the sentinels, the cluster's nodes, or
    /// `url`.
    pub fn target(&self) -> RedisTarget {
        redis_target(self.sentinel.as_ref(), self.redis_cluster.as_ref())
            .unwrap_or_else(|| RedisTarget::Url(self.url.expose().to_owned()))
    }
}

/// `[snowflake.redis.sentinel]` and `[segment.redis_sentinel]`: a Redis
/// primary found through Redis Sentinel, followed through failovers.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSentinelSection {
    /// The sentinels, `host:port` each (3 or more in production).
    pub sentinels: Vec<String>,
    /// The name the sentinels monitor the primary under.
    pub master_name: String,
    /// The primary's ACL user (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The primary's password (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
    /// TLS to the primary (default false).
    #[serde(default)]
    pub tls: bool,
    /// The database number on the primary (default 0).
    #[serde(default)]
    pub db: i64,
    /// The sentinels' ACL user (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_username: Option<String>,
    /// The sentinels' password (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_password: Option<Secret>,
    /// TLS to the sentinels (default false).
    #[serde(default)]
    pub sentinel_tls: bool,
}

/// `[snowflake.redis.redis_cluster]` and `[segment.redis_cluster]`: a Redis
/// Cluster, found from any of its nodes.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RedisClusterSection {
    /// Some of the cluster's nodes, `host:port` each.
    pub nodes: Vec<String>,
    /// The nodes' ACL user (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The nodes' password (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
    /// TLS to the nodes (default false).
    #[serde(default)]
    pub tls: bool,
}

/// The target a Sentinel or Cluster section names; `None` when neither is
/// set. With both set, the Sentinel wins here: validation refuses that
/// config before anything uses this.
pub(crate) fn redis_target(
    sentinel: Option<&RedisSentinelSection>,
    cluster: Option<&RedisClusterSection>,
) -> Option<RedisTarget> {
    let secret = |s: &Option<Secret>| s.as_ref().map(|s| s.expose().to_owned());
    if let Some(s) = sentinel {
        return Some(RedisTarget::Sentinel(
            SentinelTarget::new(s.sentinels.clone(), s.master_name.clone())
                .with_auth(s.username.clone(), secret(&s.password))
                .with_tls(s.tls)
                .with_db(s.db)
                .with_sentinel_auth(s.sentinel_username.clone(), secret(&s.sentinel_password))
                .with_sentinel_tls(s.sentinel_tls),
        ));
    }
    cluster.map(|c| {
        RedisTarget::Cluster(
            ClusterTarget::new(c.nodes.clone())
                .with_auth(c.username.clone(), secret(&c.password))
                .with_tls(c.tls),
        )
    })
}

/// `[snowflake.etcd]`: the `etcd` registry.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EtcdSection {
    /// Endpoints (default `["http://127.0.0.1:2379"]`).
    #[serde(serialize_with = "show::urls")]
    pub endpoints: Vec<String>,
    /// The cluster (default `default`).
    pub cluster: String,
    /// The lease TTL (default `10s`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub lease_ttl: Duration,
}

impl Default for EtcdSection {
    fn default() -> Self {
        EtcdSection {
            endpoints: vec!["http://127.0.0.1:2379".to_owned()],
            cluster: "default".to_owned(),
            lease_ttl: Duration::from_secs(10),
        }
    }
}

/// The ZooKeeper scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ZooKeeperModeName {
    /// Twitter's: an ephemeral node per worker ID.
    #[default]
    Ephemeral,
    /// Leaf's: a persistent sequential node per `ip:port`, cached in the data directory.
    Forever,
}

/// `[snowflake.zookeeper]`: the `zookeeper` registry.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZooKeeperSection {
    /// The connect string (default `127.0.0.1:2181`).
    pub connect: String,
    /// `ephemeral` (default) or `forever`.
    pub mode: ZooKeeperModeName,
    /// The cluster (default `default`).
    pub cluster: String,
    /// The session timeout asked for (default `10s`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub session_timeout: Duration,
}

impl Default for ZooKeeperSection {
    fn default() -> Self {
        ZooKeeperSection {
            connect: "127.0.0.1:2181".to_owned(),
            mode: ZooKeeperModeName::Ephemeral,
            cluster: "default".to_owned(),
            session_timeout: Duration::from_secs(10),
        }
    }
}

/// The segment table's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SchemaName {
    /// idmint's table (Leaf's columns plus `delta`, `remainder`), migrated.
    #[default]
    Idmint,
    /// An existing Leaf `leaf_alloc` table, as it is.
    Leaf,
    /// An existing Didi Tinyid `tiny_id_info` table (tokens from its
    /// `tiny_id_token`), as it is, shared safely with Tinyid servers.
    Tinyid,
}

/// `[segment]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SegmentSection {
    /// The store: `sqlite://…`, `postgres://…`, `mysql://…` or `redis://…`
    /// (default `sqlite://<data_dir>/segments.db`); PostgreSQL and
    /// MySQL/MariaDB take the host lists `snowflake.sql.url` does.
    #[serde(
        serialize_with = "show::optional_url",
        skip_serializing_if = "Option::is_none"
    )]
    pub url: Option<Secret>,
    /// The SQL table (default `leaf_alloc`; `tiny_id_info` with the tinyid schema).
    pub table: Option<String>,
    /// `idmint` (default), `leaf` or `tinyid`.
    pub schema: SchemaName,
    /// The Redis key prefix (Redis stores only; default the store's,
    /// `idmint:`, or `idmint:{idmint}:` on a Redis Cluster, whose prefix
    /// needs a hash tag).
    pub key_prefix: Option<String>,
    /// How many replicas must hold a new segment before its IDs are used
    /// (Redis stores only, by `WAIT`; default 1 when the primary has a
    /// replica connected, else 0; `0` accepts that a failover to a replica
    /// that missed a segment hands its IDs out again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// `[segment.redis_sentinel]`: a Redis store reached through Redis
    /// Sentinel (instead of `url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_sentinel: Option<RedisSentinelSection>,
    /// `[segment.redis_cluster]`: a Redis store on a Redis Cluster (instead
    /// of `url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_cluster: Option<RedisClusterSection>,
    /// Share of a segment used before the next is loaded (default 0.1, Leaf's).
    pub preload_share: f64,
    /// The dynamic step's cap (default 1,000,000).
    pub max_step: u64,
    /// `[segment.keys.<name>]`: keys created at start when missing.
    pub keys: BTreeMap<String, SegmentKeyConfig>,
}

impl Default for SegmentSection {
    fn default() -> Self {
        SegmentSection {
            url: None,
            table: None,
            schema: SchemaName::Idmint,
            key_prefix: None,
            replicas: None,
            redis_sentinel: None,
            redis_cluster: None,
            preload_share: 0.1,
            max_step: 1_000_000,
            keys: BTreeMap::new(),
        }
    }
}

/// `[segment.keys.<name>]`: a segment key, created at start when missing.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentKeyConfig {
    /// The segment size (and the dynamic step's floor).
    pub step: u64,
    /// The first ID (default 1).
    #[serde(default = "one")]
    pub start: u64,
    /// Issue only IDs with `id % delta == remainder` (default 1: all).
    #[serde(default = "one")]
    pub delta: u64,
    /// See `delta` (default 0).
    #[serde(default)]
    pub remainder: u64,
    /// Free text.
    #[serde(default)]
    pub description: String,
}

fn one() -> u64 {
    1
}

impl SegmentKeyConfig {
    /// The key to create.
    pub fn new_key(&self, name: &str) -> NewKey {
        NewKey::new(name, self.step)
            .with_start(self.start)
            .with_delta(self.delta, self.remainder)
            .with_description(self.description.clone())
    }
}

/// How a key's IDs are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// From this node's snowflake generator.
    Snowflake,
    /// From the segment store.
    Segment,
    /// Random UUIDs (RFC 9562 v4).
    Uuid4,
    /// Time-ordered UUIDs (RFC 9562 v7).
    Uuid7,
    /// From the cluster's timestamp oracle (`[monotonic]`): one leader issues
    /// every ID, so IDs strictly increase across all nodes.
    Monotonic,
}

impl Strategy {
    /// The name as written in config.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Snowflake => "snowflake",
            Strategy::Segment => "segment",
            Strategy::Uuid4 => "uuid4",
            Strategy::Uuid7 => "uuid7",
            Strategy::Monotonic => "monotonic",
        }
    }
}

/// `[keys.<name>]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// How the key's IDs are made.
    pub strategy: Strategy,
    /// Hand out obfuscated public IDs (snowflake and segment keys; needs
    /// `obfuscation.key`).
    #[serde(default)]
    pub public: bool,
    /// A token the key's ID requests must carry (Tinyid's per-key tokens;
    /// also `IDMINT_KEYS__<NAME>__TOKEN`). Over HTTP `Authorization: Bearer
    /// <token>` or `?token=<token>`; over RESP `AUTH <token>` on the
    /// connection first. Unset (the default), the key is open.
    #[serde(default)]
    pub token: Option<Secret>,
}

/// `[obfuscation]`: the keyed permutation of public IDs.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObfuscationConfig {
    /// The key ring, as the CLI reads it: entries `HEX` or `KEY_ID:HEX`,
    /// separated by whitespace or commas (also `IDMINT_OBFUSCATION_KEY`).
    pub key: Option<Secret>,
    /// Width of public IDs in bits (default 63).
    pub bits: u8,
    /// Top bits naming the key that made a public ID (default 0).
    pub key_id_bits: u8,
    /// The key that makes new public IDs (default: the last listed).
    pub active_key: Option<u8>,
    /// Text form of public IDs: `dec` (default), `base32` or `sqids`.
    pub format: String,
}

impl Default for ObfuscationConfig {
    fn default() -> Self {
        ObfuscationConfig {
            key: None,
            bits: 63,
            key_id_bits: 0,
            active_key: None,
            format: "dec".to_owned(),
        }
    }
}

impl ObfuscationConfig {
    /// The obfuscator these settings describe, or `None` without a key.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `obfuscation.key` (a malformed ring)
    /// or `obfuscation` (settings that don't fit together); never quotes a
    /// key.
    pub fn obfuscator(&self) -> Result<Option<Obfuscator>, ConfigError> {
        self.checked_obfuscator().map_err(|e| ConfigError::Invalid {
            key: match e {
                idmint_core::Error::InvalidKey { .. } => "obfuscation.key",
                _ => "obfuscation",
            }
            .to_owned(),
            origin: format!("config or {OBFUSCATION_KEY_ENV}"),
            message: e.to_string(),
        })
    }

    /// As [`ObfuscationConfig::obfuscator`], with the core's errors: for a
    /// library handed these settings as values rather than in a config
    /// (`idmint-embed`'s `PublicIds::new`), whose callers match the codes
    /// docs/api.md gives them.
    ///
    /// # Errors
    /// `idmint_core::Error::InvalidKey` for a malformed key ring (an entry
    /// that is no key, a key ID that is no number, no entry at all), naming
    /// the entry by its position; `InvalidObfuscator` for settings that
    /// don't fit together. Never quotes a key.
    pub fn checked_obfuscator(&self) -> Result<Option<Obfuscator>, idmint_core::Error> {
        let Some(ring) = &self.key else {
            return Ok(None);
        };
        let invalid_key =
            |entry_idx: usize, reason: &dyn fmt::Display| idmint_core::Error::InvalidKey {
                reason: format!("entry {}: {reason}", entry_idx + 1),
            };
        let mut builder = Obfuscator::builder(self.bits).with_key_id_bits(self.key_id_bits);
        let mut n_keys = 0;
        for (entry_idx, entry) in ring
            .expose()
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|e| !e.is_empty())
            .enumerate()
        {
            let (key_id, hex) = match entry.split_once(':') {
                Some((id, hex)) => {
                    let id = id.parse::<u8>().map_err(|_| {
                        invalid_key(entry_idx, &"the key ID is not a number 0..=255")
                    })?;
                    (id, hex)
                }
                None => (0, entry),
            };
            let key = ObfuscationKey::from_hex(hex).map_err(|e| match e {
                idmint_core::Error::InvalidKey { reason } => invalid_key(entry_idx, &reason),
                other => other,
            })?;
            builder = builder.with_key(key_id, key);
            n_keys += 1;
        }
        if n_keys == 0 {
            return Err(idmint_core::Error::InvalidKey {
                reason: "no key in the key ring".to_owned(),
            });
        }
        if let Some(active) = self.active_key {
            builder = builder.with_active_key(active);
        }
        builder.build().map(Some)
    }

    /// The text form of public IDs.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `obfuscation.format`.
    pub fn text_format(&self) -> Result<TextFormat, ConfigError> {
        self.format
            .parse()
            .map_err(|e: idmint_core::Error| ConfigError::Invalid {
                key: "obfuscation.format".to_owned(),
                origin: CHECKED.to_owned(),
                message: e.to_string(),
            })
    }
}

/// `[tls]`: the certificate every listener serves, and which listeners use
/// it (see "TLS" in the [module docs](super)). The files are read and checked
/// when the server starts (`Server::start`), not here.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    /// The certificate chain, PEM, leaf first (required).
    pub cert: Option<PathBuf>,
    /// The private key, PEM (required).
    pub key: Option<PathBuf>,
    /// CA certificates, PEM, that client certificates must chain to; set,
    /// client certificates are required (mutual TLS).
    pub client_ca: Option<PathBuf>,
    /// TLS on the HTTP listener (default true).
    pub http: bool,
    /// TLS on the gRPC listener (default true).
    pub grpc: bool,
    /// TLS on the RESP listener (default true).
    pub resp: bool,
    /// How often the files' modification times are checked (default `5s`).
    #[serde(deserialize_with = "duration", serialize_with = "show::duration")]
    pub poll_interval: Duration,
}

impl Default for TlsSection {
    fn default() -> TlsSection {
        TlsSection {
            cert: None,
            key: None,
            client_ca: None,
            http: true,
            grpc: true,
            resp: true,
            poll_interval: Duration::from_secs(5),
        }
    }
}

/// Reads a duration written as `"3s"`, `"500ms"`, `"1m 30s"` or ISO 8601
/// (`"PT3S"`), through jiff's parser.
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    idmint_core::duration::parse_duration(&text).map_err(serde::de::Error::custom)
}

/// `snowflake.window`: `auto` or a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkWindow {
    /// 6 s where the registry's coordinator elects a leader and a node's
    /// worker may go to another node (`etcd`, ZooKeeper `ephemeral`), 3 s
    /// elsewhere.
    Auto,
    /// This long.
    Fixed(Duration),
}

impl MarkWindow {
    /// The window `auto` gives a registry with leader elections.
    ///
    /// A node persists its mark when less than half the window is left, so
    /// half of this is the room it has when a write can't go through. An etcd
    /// or ZooKeeper leader's death stops writes for the election: etcd's
    /// timeout is randomised between 1 and 2 s at its defaults, and 1,000
    /// nodes on a 3-member etcd measured up to about 3 s until their next
    /// write went through (BENCHMARKS.md, "How cost grows"). 3 s of room
    /// rides that through; 1.5 s, the other registries' default, did not.
    pub const ELECTED: Duration = Duration::from_secs(6);

    /// The window `auto` gives every other registry. SQL and Redis
    /// failovers last longer than any window, so a wider one buys them
    /// little, and it lengthens what the window costs: the wait of a restart
    /// after a crash and the hold after a coordinator forgets.
    pub const OTHER: Duration = Duration::from_secs(3);

    /// The window for `registry` (and, on ZooKeeper, its mode).
    pub fn resolve(self, registry: RegistryKind, zookeeper: ZooKeeperModeName) -> Duration {
        match (self, registry, zookeeper) {
            (MarkWindow::Fixed(window), _, _) => window,
            (MarkWindow::Auto, RegistryKind::Etcd, _)
            | (MarkWindow::Auto, RegistryKind::Zookeeper, ZooKeeperModeName::Ephemeral) => {
                MarkWindow::ELECTED
            }
            (MarkWindow::Auto, _, _) => MarkWindow::OTHER,
        }
    }
}

impl FromStr for MarkWindow {
    type Err = String;

    fn from_str(text: &str) -> Result<MarkWindow, String> {
        Ok(parse_auto_or_duration(text)?.map_or(MarkWindow::Auto, MarkWindow::Fixed))
    }
}

impl fmt::Display for MarkWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MarkWindow::Auto => write_auto_or_duration(f, None),
            MarkWindow::Fixed(window) => write_auto_or_duration(f, Some(*window)),
        }
    }
}

/// Reads `auto` (`None`) or a duration: the text of the settings that take
/// either ([`MarkWindow`], [`ClaimWait`]).
fn parse_auto_or_duration(text: &str) -> Result<Option<Duration>, String> {
    if text.trim() == "auto" {
        return Ok(None);
    }
    idmint_core::duration::parse_duration(text)
        .map(Some)
        .map_err(|e| format!("{e}; or \"auto\""))
}

/// Writes `auto` (`None`) or a duration, as [`parse_auto_or_duration`] reads it.
fn write_auto_or_duration(f: &mut fmt::Formatter<'_>, value: Option<Duration>) -> fmt::Result {
    match value {
        None => f.write_str("auto"),
        Some(duration) => {
            let text = idmint_core::duration::format_duration(duration).map_err(|_| fmt::Error)?;
            f.write_str(&text)
        }
    }
}

/// `snowflake.claim_wait`: `auto` or a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimWait {
    /// The registry's lease TTL plus the window plus 30 s, at least 60 s.
    Auto,
    /// This long.
    Fixed(Duration),
}

impl ClaimWait {
    /// The wait for a registry whose leases last `lease_ttl` (none for
    /// registries without leases), with the mark `window`.
    pub fn resolve(self, lease_ttl: Option<Duration>, window: Duration) -> Duration {
        match self {
            ClaimWait::Fixed(wait) => wait,
            ClaimWait::Auto => {
                let floor = Duration::from_secs(60);
                lease_ttl.map_or(floor, |ttl| {
                    (ttl + window + Duration::from_secs(30)).max(floor)
                })
            }
        }
    }
}

impl FromStr for ClaimWait {
    type Err = String;

    fn from_str(text: &str) -> Result<ClaimWait, String> {
        Ok(parse_auto_or_duration(text)?.map_or(ClaimWait::Auto, ClaimWait::Fixed))
    }
}

impl fmt::Display for ClaimWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimWait::Auto => write_auto_or_duration(f, None),
            ClaimWait::Fixed(wait) => write_auto_or_duration(f, Some(*wait)),
        }
    }
}

/// Reads a value written in its text form ([`FromStr`]), such as a clock
/// policy (`"wait:5ms"`): the form the core defines next to the type.
fn from_text<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    String::deserialize(deserializer)?
        .parse()
        .map_err(serde::de::Error::custom)
}
