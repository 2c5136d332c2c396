//! Coordinators and `idmint serve` configs: which registry, where its
//! service listens, and the TOML each node runs.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use idmint_core::Layout;
use idmint_testkit::{PrivateService, Service};

use super::{Ctx, Node, Target};

/// A worker registry the suite runs nodes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    /// A lease file in each node's data directory (worker from config).
    File,
    /// The `sql` registry in lease mode on PostgreSQL.
    Postgres,
    /// The `sql` registry in lease mode on MariaDB.
    MariaDb,
    /// etcd leases.
    Etcd,
    /// ZooKeeper ephemeral nodes.
    ZooKeeper,
    /// Redis `SET NX PX` leases.
    Redis,
}

impl Registry {
    /// The name in scenario names: `file`, `postgres`, `mariadb`, `etcd`,
    /// `zookeeper`, `redis`.
    pub fn name(self) -> &'static str {
        match self {
            Registry::File => "file",
            Registry::Postgres => "postgres",
            Registry::MariaDb => "mariadb",
            Registry::Etcd => "etcd",
            Registry::ZooKeeper => "zookeeper",
            Registry::Redis => "redis",
        }
    }

    /// The service behind it (none for `file`).
    pub fn service(self) -> Option<Service> {
        match self {
            Registry::File => None,
            Registry::Postgres => Some(Service::Postgres),
            Registry::MariaDb => Some(Service::MariaDb),
            Registry::Etcd => Some(Service::Etcd),
            Registry::ZooKeeper => Some(Service::ZooKeeper),
            Registry::Redis => Some(Service::Redis),
        }
    }

    /// The registry on the run's private instance of its service (started on
    /// first use), which scenarios may stop and restart.
    ///
    /// # Errors
    /// [`Skipped`] when the service's software is missing.
    pub fn coordinator(self, ctx: &Ctx) -> Result<Coordinator> {
        let service = match self.service() {
            Some(s) => Some(ctx.private(s)?),
            None => None,
        };
        let address = service
            .as_ref()
            .map(|s| s.address().to_owned())
            .unwrap_or_default();
        Ok(Coordinator {
            registry: self,
            address,
            service,
        })
    }
}

/// A registry and where its service listens.
#[derive(Debug, Clone)]
pub struct Coordinator {
    /// Which registry.
    pub registry: Registry,
    /// The address nodes are configured with: a URL (`postgres://…`,
    /// `mysql://…`, `redis://…`), an etcd endpoint, or ZooKeeper's
    /// `host:port`. Empty for `file`.
    pub address: String,
    /// The private instance, to stop and restart.
    pub service: Option<Arc<PrivateService>>,
}

impl Coordinator {
    /// The same coordinator reached through `proxy_addr` (`127.0.0.1:PORT`,
    /// a [`idmint_testkit::proxy::CutProxy`] in front of it).
    pub fn via(&self, proxy_addr: &str) -> Coordinator {
        let address = match self.registry {
            Registry::ZooKeeper => proxy_addr.to_owned(),
            _ => with_host_port(&self.address, proxy_addr),
        };
        Coordinator {
            address,
            ..self.clone()
        }
    }

    /// The `host:port` the service listens on.
    pub fn host_port(&self) -> Option<String> {
        match self.registry {
            Registry::ZooKeeper => Some(self.address.clone()),
            _ => host_port(&self.address),
        }
    }

    /// Stops the private service (and waits until it is gone).
    ///
    /// # Errors
    /// When there is no private service (`file`).
    pub fn stop(&self) -> Result<()> {
        let service = self
            .service
            .as_ref()
            .ok_or_else(|| anyhow!("the {} registry has no service", self.registry.name()))?;
        service.stop();
        Ok(())
    }

    /// Starts the private service again on the same port with the same data.
    ///
    /// # Errors
    /// When there is no private service (`file`).
    pub fn restart(&self) -> Result<()> {
        let service = self
            .service
            .as_ref()
            .ok_or_else(|| anyhow!("the {} registry has no service", self.registry.name()))?;
        service.restart();
        Ok(())
    }

    /// PostgreSQL: copies the running cluster into a replica that gets
    /// nothing after ([`PrivateService::replicate`]).
    ///
    /// # Errors
    /// When the registry is not on PostgreSQL.
    pub fn replicate(&self) -> Result<()> {
        self.postgres()?.replicate();
        Ok(())
    }

    /// PostgreSQL: fails over to the replica of [`Coordinator::replicate`]
    /// on the same port ([`PrivateService::promote`]).
    ///
    /// # Errors
    /// When the registry is not on PostgreSQL.
    pub fn promote(&self) -> Result<()> {
        self.postgres()?.promote();
        Ok(())
    }

    /// The private PostgreSQL.
    fn postgres(&self) -> Result<&PrivateService> {
        match (&self.service, self.registry) {
            (Some(service), Registry::Postgres) => Ok(service),
            _ => Err(anyhow!(
                "the {} registry has no replica to promote",
                self.registry.name()
            )),
        }
    }
}

/// An `idmint serve` config for the nodes of one scenario: the registry, the
/// layout and snowflake policies, a segment store with its keys, and the
/// keys served. Rendered per node by [`ServeConfig::toml`].
#[derive(Debug, Clone)]
pub struct ServeConfig {
    coordinator: Coordinator,
    cluster: String,
    layout: String,
    lease_ttl: Duration,
    snowflake: Vec<(String, String)>,
    segment_url: Option<String>,
    segment_table: String,
    segment_keys: Vec<(String, u64)>,
    segment: Vec<(String, String)>,
    snowflake_keys: Vec<String>,
    monotonic_keys: Vec<String>,
    monotonic: Vec<(String, String)>,
    extra: String,
}

impl ServeConfig {
    /// Nodes on `coordinator`'s registry in cluster (table, prefix) `cluster`:
    /// layout `twitter`, lease TTL 3 s, one snowflake key `sf`, no segment store.
    pub fn new(coordinator: Coordinator, cluster: impl Into<String>) -> ServeConfig {
        ServeConfig {
            coordinator,
            cluster: cluster.into(),
            layout: "twitter".to_owned(),
            lease_ttl: Duration::from_secs(3),
            snowflake: Vec::new(),
            segment_url: None,
            segment_table: String::new(),
            segment_keys: Vec::new(),
            segment: Vec::new(),
            snowflake_keys: vec!["sf".to_owned()],
            monotonic_keys: Vec::new(),
            monotonic: Vec::new(),
            extra: String::new(),
        }
    }

    /// The layout, in its text form (`leaf,node=1` for two workers).
    pub fn with_layout(mut self, layout: impl Into<String>) -> ServeConfig {
        self.layout = layout.into();
        self
    }

    /// The lease TTL (`sql`, `redis`, `etcd`: whole seconds; the ZooKeeper
    /// session timeout). Default 3 s.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> ServeConfig {
        self.lease_ttl = ttl;
        self
    }

    /// A `[snowflake]` key with its value as a TOML literal:
    /// `with_snowflake("clock_behind", "\"borrow:20s\"")`.
    pub fn with_snowflake(mut self, key: &str, value: &str) -> ServeConfig {
        self.snowflake.push((key.to_owned(), value.to_owned()));
        self
    }

    /// A key of `strategy = "monotonic"` (the timestamp oracle). On a shared
    /// registry the nodes then listen for gRPC on a free port
    /// (`server.grpc_addr = "127.0.0.1:0"`): followers forward there.
    pub fn with_monotonic_key(mut self, key: &str) -> ServeConfig {
        self.monotonic_keys.push(key.to_owned());
        self
    }

    /// A `[monotonic]` setting with its value as a TOML literal:
    /// `with_monotonic("lease_ttl", "\"3s\"")`.
    pub fn with_monotonic(mut self, key: &str, value: &str) -> ServeConfig {
        self.monotonic.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The suite's usual cluster on `registry`'s private service: layout
    /// `layout`, snowflake key `sf`, and segment key `order` (segment size
    /// `step`) on the machine's PostgreSQL in a table of its own.
    ///
    /// # Errors
    /// [`Skipped`] when a service is missing.
    pub fn standard(ctx: &Ctx, registry: Registry, layout: &str, step: u64) -> Result<ServeConfig> {
        Ok(
            ServeConfig::new(registry.coordinator(ctx)?, ctx.unique("c"))
                .with_layout(layout)
                .with_segment_store(ctx.shared_postgres()?, ctx.unique("alloc"))
                .with_segment_key("order", step),
        )
    }

    /// The usual streams for `node` under [`ServeConfig::standard`]: `sf` in
    /// singles and batches of `batch`, and `order` likewise.
    ///
    /// # Errors
    /// When the layout does not parse.
    pub fn targets(&self, node: &Node, batch: u64) -> Result<Vec<Target>> {
        let layout = self.layout()?;
        let mut targets: Vec<Target> = self
            .snowflake_keys
            .iter()
            .map(|k| Target::snowflake(node, k, layout).with_counts(&[1, 1, batch]))
            .collect();
        targets.extend(
            self.segment_keys
                .iter()
                .map(|(k, _)| Target::segment(node, k).with_counts(&[1, batch])),
        );
        Ok(targets)
    }

    /// A segment store at `url` in table (or Redis prefix) `table`.
    pub fn with_segment_store(
        mut self,
        url: impl Into<String>,
        table: impl Into<String>,
    ) -> ServeConfig {
        self.segment_url = Some(url.into());
        self.segment_table = table.into();
        self
    }

    /// A `[segment]` setting with its value as a TOML literal:
    /// `with_segment("max_step", "1000")`.
    pub fn with_segment(mut self, key: &str, value: &str) -> ServeConfig {
        self.segment.push((key.to_owned(), value.to_owned()));
        self
    }

    /// A segment key created at start with segment size `step`.
    pub fn with_segment_key(mut self, key: &str, step: u64) -> ServeConfig {
        self.segment_keys.push((key.to_owned(), step));
        self
    }

    /// The same config (cluster, tables, keys) reaching the coordinator
    /// through `proxy_addr` (a [`idmint_testkit::proxy::CutProxy`]), and the
    /// segment store too when it lives on the same service.
    pub fn via(&self, proxy_addr: &str) -> ServeConfig {
        let coordinator = self.coordinator.via(proxy_addr);
        let segment_url = self.segment_url.as_ref().map(|url| {
            if *url == self.coordinator.address {
                coordinator.address.clone()
            } else {
                url.clone()
            }
        });
        ServeConfig {
            coordinator,
            segment_url,
            ..self.clone()
        }
    }

    /// The parsed layout, for the checker.
    ///
    /// # Errors
    /// When the layout text does not parse.
    pub fn layout(&self) -> Result<Layout> {
        self.layout
            .parse()
            .map_err(|e| anyhow!("layout {:?}: {e}", self.layout))
    }

    /// The parsed layout of the monotonic keys (`monotonic.layout`, `tso`
    /// unless set), for the checker.
    ///
    /// # Errors
    /// When the layout text does not parse.
    pub fn monotonic_layout(&self) -> Result<Layout> {
        let text = self
            .monotonic
            .iter()
            .find(|(k, _)| k == "layout")
            .map_or("tso", |(_, v)| v.trim_matches('"'));
        text.parse()
            .map_err(|e| anyhow!("monotonic layout {text:?}: {e}"))
    }

    /// The config of node number `node_idx` (the `file` registry's worker ID).
    pub fn toml(&self, node_idx: u32) -> String {
        let mut t = String::new();
        let ttl = format!("{}s", self.lease_ttl.as_secs().max(1));
        let _ = writeln!(t, "[snowflake]\nlayout = {:?}", self.layout);
        let registry = match self.coordinator.registry {
            Registry::File => "file",
            Registry::Postgres | Registry::MariaDb => "sql",
            Registry::Etcd => "etcd",
            Registry::ZooKeeper => "zookeeper",
            Registry::Redis => "redis",
        };
        let _ = writeln!(t, "registry = {registry:?}");
        if self.coordinator.registry == Registry::File {
            let _ = writeln!(t, "worker = {node_idx}");
        }
        for (key, value) in &self.snowflake {
            let _ = writeln!(t, "{key} = {value}");
        }
        let address = &self.coordinator.address;
        let cluster = &self.cluster;
        match self.coordinator.registry {
            Registry::File => {}
            Registry::Postgres | Registry::MariaDb => {
                let _ = writeln!(
                    t,
                    "[snowflake.sql]\nurl = {address:?}\ncluster = {cluster:?}\ntable = \"w_{cluster}\"\nlease_ttl = {ttl:?}"
                );
            }
            Registry::Etcd => {
                let _ = writeln!(
                    t,
                    "[snowflake.etcd]\nendpoints = [{address:?}]\ncluster = {cluster:?}\nlease_ttl = {ttl:?}"
                );
            }
            Registry::ZooKeeper => {
                let _ = writeln!(
                    t,
                    "[snowflake.zookeeper]\nconnect = {address:?}\ncluster = {cluster:?}\nsession_timeout = {:?}",
                    format!("{}ms", self.lease_ttl.as_millis())
                );
            }
            Registry::Redis => {
                let _ = writeln!(
                    t,
                    "[snowflake.redis]\nurl = {address:?}\ncluster = {cluster:?}\nlease_ttl = {ttl:?}"
                );
            }
        }
        if let Some(url) = &self.segment_url {
            let _ = writeln!(t, "[segment]\nurl = {url:?}");
            if url.starts_with("redis://") {
                let _ = writeln!(t, "key_prefix = \"{}:\"", self.segment_table);
            } else {
                let _ = writeln!(t, "table = {:?}", self.segment_table);
            }
            for (key, value) in &self.segment {
                let _ = writeln!(t, "{key} = {value}");
            }
        }
        for (key, step) in &self.segment_keys {
            let _ = writeln!(t, "[segment.keys.{key}]\nstep = {step}");
        }
        for key in &self.snowflake_keys {
            let _ = writeln!(t, "[keys.{key}]\nstrategy = \"snowflake\"");
        }
        if !self.monotonic_keys.is_empty() {
            if self.coordinator.registry != Registry::File {
                let _ = writeln!(t, "[server]\ngrpc_addr = \"127.0.0.1:0\"");
            }
            let _ = writeln!(t, "[monotonic]");
            for (key, value) in &self.monotonic {
                let _ = writeln!(t, "{key} = {value}");
            }
        }
        for key in &self.monotonic_keys {
            let _ = writeln!(t, "[keys.{key}]\nstrategy = \"monotonic\"");
        }
        t.push_str(&self.extra);
        t
    }
}

/// `host:port` of a URL like `scheme://user@host:port/path`.
pub fn host_port(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hp = rest.split('/').next()?;
    hp.contains(':').then(|| hp.to_owned())
}

/// Replaces the `host:port` of `url` with `with`.
pub fn with_host_port(url: &str, with: &str) -> String {
    match host_port(url) {
        Some(hp) => url.replacen(&hp, with, 1),
        None => url.to_owned(),
    }
}
