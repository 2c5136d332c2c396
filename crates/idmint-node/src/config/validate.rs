//! The checks [`Config::validate`] makes without I/O, one named step per
//! part of the config, each naming the first key that is wrong.

use std::time::Duration;

use idmint_core::{Layout, Snowflake};
use idmint_redis::RedisTarget;

use super::{
    Config, ConfigError, DEFAULT_REDIS_URL, OBFUSCATION_KEY_ENV, RegistryKind, SchemaName,
    SqlModeName, Strategy, TlsSection,
};

/// The origin named by checks made after loading: the value may have come
/// from either place.
pub(crate) const CHECKED: &str = "the config file or environment";

/// A check's failure, naming `key`.
/// At most one way to one Redis: `[..sentinel]`, `[..redis_cluster]` or
/// the URL. `keys` names the three settings.
fn check_topology(
    keys: [&str; 3],
    sentinel: bool,
    cluster: bool,
    url: bool,
) -> Result<(), ConfigError> {
    let [sentinel_key, cluster_key, url_key] = keys;
    if sentinel && cluster {
        return Err(invalid(
            cluster_key,
            format!(
                "is set beside {sentinel_key}: a Redis is reached through its sentinels or as a cluster, set one"
            ),
        ));
    }
    if url && (sentinel || cluster) {
        let other = if sentinel { sentinel_key } else { cluster_key };
        return Err(invalid(
            url_key,
            format!(
                "is set beside {other}: the Redis is reached through {other}, leave the url unset"
            ),
        ));
    }
    Ok(())
}

/// A Sentinel or Cluster target's own settings (addresses, names), named by
/// its section.
fn check_target(keys: [&str; 2], sentinel: bool, target: &RedisTarget) -> Result<(), ConfigError> {
    let key = if sentinel { keys[0] } else { keys[1] };
    match target {
        RedisTarget::Url(_) => Ok(()),
        _ => target.validate().map_err(|e| invalid(key, e.to_string())),
    }
}

/// A Redis setting that asks for TLS, refused by name (as the other Redis
/// checks, whether or not the section is used) in a build without
/// Redis TLS (idmint-node's `redis-tls` feature; the bindings ship without
/// it). `sections` are the key of the URL's section, the Sentinel's and the
/// Cluster's.
fn check_tls(sections: [&str; 3], target: &RedisTarget) -> Result<(), ConfigError> {
    if idmint_redis::TLS {
        return Ok(());
    }
    let Some(setting) = target.tls_setting() else {
        return Ok(());
    };
    let section = match target {
        RedisTarget::Sentinel(_) => sections[1],
        RedisTarget::Cluster(_) => sections[2],
        _ => sections[0],
    };
    Err(invalid(
        &format!("{section}.{setting}"),
        "asks for TLS to Redis, but this build has no Redis TLS: build it with the `redis-tls` \
         feature (idmint-embed's, or the binding's; `idmint serve` has it)",
    ))
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        origin: CHECKED.to_owned(),
        message: message.into(),
    }
}

impl Config {
    /// Checks what can be checked without I/O: the layout, limits, key
    /// strategies and segment keys, the obfuscation settings, and that each
    /// registry has what it needs.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first key that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_policies(self.layout()?)?;
        self.check_limits()?;
        self.check_urls()?;
        self.check_redis()?;
        self.check_registry()?;
        self.check_segment()?;
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        self.check_keys()?;
        self.check_monotonic()
    }

    /// Whether any key is declared `strategy = "monotonic"`.
    pub fn has_monotonic_keys(&self) -> bool {
        self.keys
            .values()
            .any(|k| k.strategy == Strategy::Monotonic)
    }

    /// The oracle's layout.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `monotonic.layout`: it does not parse,
    /// or it has node bits (the oracle has one issuer).
    pub fn monotonic_layout(&self) -> Result<Layout, ConfigError> {
        let layout: Layout = self
            .monotonic
            .layout
            .parse()
            .map_err(|e: idmint_core::Error| invalid("monotonic.layout", e.to_string()))?;
        if layout.workers() != 1 {
            return Err(invalid(
                "monotonic.layout",
                format!(
                    "{:?} has {} node IDs: the oracle has one issuer, so its layout has no \
                     node bits (tso, or time and sequence bits alone)",
                    self.monotonic.layout,
                    layout.workers()
                ),
            ));
        }
        Ok(layout)
    }

    /// What followers need to forward over TLS: with `tls.grpc` on, the CA
    /// they trust; with `tls.client_ca` set, a client certificate and key.
    fn check_forwarding_tls(&self) -> Result<(), ConfigError> {
        let m = &self.monotonic;
        let Some(tls) = self.tls.as_ref().filter(|t| t.grpc) else {
            return Ok(());
        };
        if m.forward_ca.is_none() {
            return Err(invalid(
                "monotonic.forward_ca",
                "gRPC speaks TLS (tls.grpc), so followers forward to the leader over TLS: \
                 set the CA (PEM) its certificate chains to",
            ));
        }
        match (&m.forward_cert, &m.forward_key) {
            (Some(_), None) => Err(invalid(
                "monotonic.forward_key",
                "monotonic.forward_cert is set without its key",
            )),
            (None, Some(_)) => Err(invalid(
                "monotonic.forward_cert",
                "monotonic.forward_key is set without its certificate",
            )),
            (None, None) if tls.client_ca.is_some() => Err(invalid(
                "monotonic.forward_cert",
                "the leader requires client certificates (tls.client_ca): set the certificate \
                 and key followers present when they forward",
            )),
            _ => Ok(()),
        }
    }

    /// `[monotonic]`, and, when a key is declared monotonic, that the worker
    /// registry can elect its leader and followers can reach it.
    fn check_monotonic(&self) -> Result<(), ConfigError> {
        let m = &self.monotonic;
        self.monotonic_layout()?;
        if m.lease_ttl < Duration::from_secs(1) {
            return Err(invalid(
                "monotonic.lease_ttl",
                format!("{:?} is too short: at least 1s", m.lease_ttl),
            ));
        }
        if m.window < Duration::from_millis(600) {
            return Err(invalid(
                "monotonic.window",
                format!(
                    "{:?} is too short: at least 600ms, so the mark can be persisted ahead of need",
                    m.window
                ),
            ));
        }
        if m.max_lead < m.window {
            return Err(invalid(
                "monotonic.max_lead",
                format!(
                    "{:?} is shorter than monotonic.window {:?}: a leader must be able to run \
                     at least a window ahead of its clock",
                    m.max_lead, m.window
                ),
            ));
        }
        if m.leader_wait.is_zero() || m.leader_wait > Duration::from_secs(60) {
            return Err(invalid(
                "monotonic.leader_wait",
                format!("{:?} is out of range (above 0, at most 60s)", m.leader_wait),
            ));
        }
        if m.poll.is_zero() || m.poll >= m.lease_ttl {
            return Err(invalid(
                "monotonic.poll",
                format!(
                    "{:?} is out of range (above 0, below monotonic.lease_ttl {:?})",
                    m.poll, m.lease_ttl
                ),
            ));
        }
        for (name, key) in &self.keys {
            if key.strategy == Strategy::Monotonic && key.public {
                return Err(invalid(
                    &format!("keys.{name}.public"),
                    "monotonic keys can't be public: obfuscation would hide their order",
                ));
            }
        }
        if !self.has_monotonic_keys() {
            return Ok(());
        }
        let registry = self.snowflake.registry;
        match registry {
            RegistryKind::File => Ok(()),
            RegistryKind::Sql
            | RegistryKind::Redis
            | RegistryKind::Etcd
            | RegistryKind::Zookeeper => {
                let Some(grpc) = self.server.grpc_addr else {
                    return Err(invalid(
                        "server.grpc_addr",
                        format!(
                            "monotonic keys on the {} registry need a gRPC listener: followers \
                             forward their requests to the leader over gRPC",
                            registry.name()
                        ),
                    ));
                };
                self.check_reserve_guarded(grpc)?;
                self.check_forwarding_tls()
            }
            RegistryKind::Static | RegistryKind::Host | RegistryKind::K8s => Err(invalid(
                "snowflake.registry",
                format!(
                    "monotonic keys need a registry that can elect one leader (sql, redis, \
                     etcd, zookeeper, or file for one node); the {} registry has no shared state",
                    registry.name()
                ),
            )),
        }
    }

    /// The leader's internal `Reserve` RPC hands out runs of the oracle's
    /// IDs (every monotonic key's) to whoever calls it. It needs the admin
    /// token (followers send it), or client certificates (mutual TLS on the
    /// gRPC listener), whenever the gRPC listener is reachable from other
    /// hosts or a key is guarded by a token; refused otherwise.
    fn check_reserve_guarded(&self, grpc: std::net::SocketAddr) -> Result<(), ConfigError> {
        let guarded = self.server.admin_token.is_some()
            || self
                .tls
                .as_ref()
                .is_some_and(|t| t.grpc && t.client_ca.is_some());
        let tokened = self.keys.iter().find(|(_, k)| k.token.is_some());
        let exposed = !grpc.ip().is_loopback();
        if guarded || !(exposed || tokened.is_some()) {
            return Ok(());
        }
        let why = if exposed {
            format!("the gRPC listener {grpc} is reachable from other hosts")
        } else {
            format!(
                "key {:?} has a token",
                tokened.map(|(name, _)| name.as_str()).unwrap_or_default()
            )
        };
        Err(invalid(
            "server.admin_token",
            format!(
                "monotonic keys on a shared registry, and {why}: the leader's internal Reserve \
                 RPC would hand out the oracle's IDs to any caller; set server.admin_token \
                 (followers send it), or tls.client_ca with TLS on gRPC (mutual TLS)"
            ),
        ))
    }

    /// The parsed layout.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `snowflake.layout`.
    pub fn layout(&self) -> Result<Layout, ConfigError> {
        self.snowflake
            .layout
            .parse()
            .map_err(|e: idmint_core::Error| invalid("snowflake.layout", e.to_string()))
    }

    /// Checks each snowflake policy against the layout (rollback bits, the
    /// random start's bound) by building a generator with it alone.
    fn check_policies(&self, layout: Layout) -> Result<(), ConfigError> {
        let sf = &self.snowflake;
        let fail = |key: &'static str| move |e: idmint_core::Error| invalid(key, e.to_string());
        Snowflake::builder(layout)
            .with_clock_behind(sf.clock_behind)
            .build()
            .map_err(fail("snowflake.clock_behind"))?;
        Snowflake::builder(layout)
            .with_sequence_exhausted(sf.sequence_exhausted)
            .build()
            .map_err(fail("snowflake.sequence_exhausted"))?;
        Snowflake::builder(layout)
            .with_sequence_start(sf.sequence_start)
            .build()
            .map_err(fail("snowflake.sequence_start"))?;
        Ok(())
    }

    /// The server's limits: batch size, connections, read timeout.
    fn check_limits(&self) -> Result<(), ConfigError> {
        if self.snowflake.max_peer_skew.is_zero() {
            return Err(invalid(
                "snowflake.max_peer_skew",
                "0s is out of range: above 0 (no two clocks agree to the nanosecond)",
            ));
        }
        let server = &self.server;
        if !(1..=Snowflake::MAX_BATCH).contains(&server.max_count) {
            return Err(invalid(
                "server.max_count",
                format!(
                    "{} is out of range 1..={}",
                    server.max_count,
                    Snowflake::MAX_BATCH
                ),
            ));
        }
        if server.max_connections == 0 {
            return Err(invalid(
                "server.max_connections",
                "0 is out of range: at least 1 connection",
            ));
        }
        if server.read_timeout.is_zero() {
            return Err(invalid(
                "server.read_timeout",
                "0s is out of range: a client needs some time to send a request",
            ));
        }
        Ok(())
    }

    /// The database URLs' schemes and host lists (a PostgreSQL multi-host
    /// URL, a MySQL/MariaDB host list, and `target_session_attrs`; see
    /// `idmint_sql::url_hosts`), checked before the data directory is made
    /// and a worker ID claimed for a start that would fail at the segment
    /// store.
    fn check_urls(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.segment.url {
            let url = url.expose();
            let redis = url.starts_with("redis://") || url.starts_with("rediss://");
            if !redis && let Err(e) = idmint_sql::Dialect::from_url(url) {
                return Err(invalid(
                    "segment.url",
                    format!("{e}, or redis:// (rediss://) for a Redis store"),
                ));
            }
            if !redis && let Err(e) = idmint_sql::url_hosts(url) {
                return Err(invalid("segment.url", e.to_string()));
            }
        }
        if let Some(url) = &self.snowflake.sql.url
            && let Err(e) = idmint_sql::url_hosts(url.expose())
        {
            return Err(invalid("snowflake.sql.url", e.to_string()));
        }
        Ok(())
    }

    /// The Redis topologies: a Sentinel or a Cluster section, never both and
    /// never beside a URL; each one's addresses and names; and on a Cluster,
    /// key prefixes that keep all of a cluster's keys in one hash slot.
    fn check_redis(&self) -> Result<(), ConfigError> {
        let r = &self.snowflake.redis;
        check_topology(
            [
                "snowflake.redis.sentinel",
                "snowflake.redis.redis_cluster",
                "snowflake.redis.url",
            ],
            r.sentinel.is_some(),
            r.redis_cluster.is_some(),
            r.url.expose() != DEFAULT_REDIS_URL,
        )?;
        check_tls(
            [
                "snowflake.redis",
                "snowflake.redis.sentinel",
                "snowflake.redis.redis_cluster",
            ],
            &r.target(),
        )?;
        check_target(
            ["snowflake.redis.sentinel", "snowflake.redis.redis_cluster"],
            r.sentinel.is_some(),
            &r.target(),
        )?;
        if r.redis_cluster.is_some() {
            let config = idmint_registry::redis::RedisConfig::new().with_cluster(&r.cluster);
            idmint_redis::check_single_slot(config.prefix())
                .map_err(|e| invalid("snowflake.redis.cluster", e.to_string()))?;
        }
        let seg = &self.segment;
        check_topology(
            [
                "segment.redis_sentinel",
                "segment.redis_cluster",
                "segment.url",
            ],
            seg.redis_sentinel.is_some(),
            seg.redis_cluster.is_some(),
            seg.url.is_some(),
        )?;
        if let Some(target) = self.segment_redis_target() {
            check_tls(
                ["segment", "segment.redis_sentinel", "segment.redis_cluster"],
                &target,
            )?;
            check_target(
                ["segment.redis_sentinel", "segment.redis_cluster"],
                seg.redis_sentinel.is_some(),
                &target,
            )?;
        }
        if seg.redis_cluster.is_some() {
            idmint_redis::check_single_slot(&self.segment_redis_prefix())
                .map_err(|e| invalid("segment.key_prefix", e.to_string()))?;
        }
        Ok(())
    }

    /// The snowflake window, and that the chosen registry has what it needs.
    fn check_registry(&self) -> Result<(), ConfigError> {
        let sf = &self.snowflake;
        if sf.mark_window() < Duration::from_millis(600) {
            return Err(invalid(
                "snowflake.window",
                format!(
                    "{:?} is too short: at least 600ms, so the mark can be persisted ahead of need",
                    sf.mark_window()
                ),
            ));
        }
        if sf.report_interval < Duration::from_millis(100) {
            return Err(invalid(
                "snowflake.report_interval",
                format!(
                    "{:?} is too short: at least 100ms (each report is a registry write)",
                    sf.report_interval
                ),
            ));
        }
        match sf.registry {
            RegistryKind::Static if sf.worker.is_none() => {
                return Err(invalid(
                    "snowflake.worker",
                    "the static registry needs a worker ID",
                ));
            }
            RegistryKind::Sql if sf.sql.url.is_none() => {
                return Err(invalid(
                    "snowflake.sql.url",
                    "the sql registry needs a database URL",
                ));
            }
            RegistryKind::Sql
                if sf.sql.mode == SqlModeName::UidGenerator && sf.sql.cluster != "default" =>
            {
                return Err(invalid(
                    "snowflake.sql.cluster",
                    format!(
                        "{:?} has no meaning in uid-generator mode: WORKER_NODE has no cluster \
                         column, so the whole table is one cluster; give each cluster a table \
                         of its own instead",
                        sf.sql.cluster
                    ),
                ));
            }
            RegistryKind::Etcd if sf.etcd.endpoints.is_empty() => {
                return Err(invalid(
                    "snowflake.etcd.endpoints",
                    "the etcd registry needs at least one endpoint",
                ));
            }
            _ => {}
        }
        if sf.worker.is_some() && !matches!(sf.registry, RegistryKind::File | RegistryKind::Static)
        {
            return Err(invalid(
                "snowflake.worker",
                format!(
                    "the {} registry chooses the worker ID itself; remove snowflake.worker",
                    sf.registry.name()
                ),
            ));
        }
        Ok(())
    }

    /// The segment store's schema and preload share, and each declared key.
    fn check_segment(&self) -> Result<(), ConfigError> {
        let segment = &self.segment;
        let redis_store = self.segment_redis_target().is_some();
        if redis_store && segment.schema != SchemaName::Idmint {
            return Err(invalid(
                "segment.schema",
                "the leaf and tinyid schemas are SQL tables: set segment.url to their database",
            ));
        }
        if !(0.0..=1.0).contains(&segment.preload_share) {
            return Err(invalid(
                "segment.preload_share",
                format!("{} is out of range 0..=1", segment.preload_share),
            ));
        }
        for (name, key) in &segment.keys {
            key.new_key(name)
                .validate()
                .map_err(|e| invalid(&format!("segment.keys.{name}"), e.to_string()))?;
        }
        Ok(())
    }

    /// The obfuscation settings, and each `[keys.<name>]`: its name, token and
    /// whether it can be public.
    fn check_keys(&self) -> Result<(), ConfigError> {
        let obfuscator = self.obfuscation.obfuscator()?;
        self.obfuscation.text_format()?;
        for (name, key) in &self.keys {
            idmint_segment::validate_key(name)
                .map_err(|e| invalid(&format!("keys.{name}"), e.to_string()))?;
            if let Some(token) = &key.token {
                let text = token.expose();
                if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(invalid(
                        &format!("keys.{name}.token"),
                        "a token must be non-empty, without spaces or control characters",
                    ));
                }
            }
            if key.public {
                if matches!(key.strategy, Strategy::Uuid4 | Strategy::Uuid7) {
                    return Err(invalid(
                        &format!("keys.{name}.public"),
                        "UUID keys can't be public: obfuscation permutes integer IDs",
                    ));
                }
                if obfuscator.is_none() {
                    return Err(invalid(
                        &format!("keys.{name}.public"),
                        format!(
                            "a public key needs an obfuscation key: set obfuscation.key or \
                             {OBFUSCATION_KEY_ENV} (generate one with `openssl rand -hex 16`)"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl TlsSection {
    /// Checks what needs no file: `cert` and `key` are set, the interval is
    /// not zero.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `tls.cert`, `tls.key` or `tls.poll_interval`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cert.is_none() {
            return Err(invalid(
                "tls.cert",
                "[tls] needs the certificate's PEM file (tls.cert)",
            ));
        }
        if self.key.is_none() {
            return Err(invalid(
                "tls.key",
                "[tls] needs the private key's PEM file (tls.key)",
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(invalid(
                "tls.poll_interval",
                "0s is out of range: the files are checked every poll_interval",
            ));
        }
        Ok(())
    }
}
