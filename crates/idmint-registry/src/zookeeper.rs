//! The `zookeeper` worker registry, in two modes: Leaf's persistent sequential
//! nodes ([`ZooKeeperMode::Forever`]) and Twitter's ephemeral nodes as leases
//! ([`ZooKeeperMode::Ephemeral`]).
//!
//! # `Forever`: one worker ID per `ip:port`, for good (Meituan Leaf)
//!
//! Each node identity `ip:port` owns one persistent sequential znode
//! `/idmint/{cluster}/forever/{ip:port}-{seq}`; the worker ID is the sequence
//! number. A restart of the same `ip:port` finds its znode again and keeps its
//! worker ID; an ID is never handed to another identity, so there is no lease
//! ([`Claim::lease`] is `None`). The znode's data holds the identity, the last
//! reported time and the high-water mark; the mark is raised only by a
//! version-checked `setData` (compare-and-set on the znode version, retried on a
//! conflict), so it never goes down.
//!
//! Why it is safe: exclusivity rests on identities being unique (one process per
//! `ip:port`, as in Leaf); a restart starts above its own stored mark.
//!
//! **The local cache** ([`ZooKeeperConfig::with_cache_dir`], Forever only): each
//! claim and each persisted mark is also written to a small file (temp file,
//! fsync, rename), and the file is written *before* ZooKeeper, so it never holds
//! less than ZooKeeper does. When ZooKeeper can't be reached at
//! [`ZooKeeperRegistry::connect`], the registry starts offline and a claim
//! returns the cached worker ID and mark. It may do that because a Forever ID
//! belongs to one identity for good: nobody else can be holding it. It may
//! **not** skip the clock check: the cached mark is the claim's
//! [`Claim::stored_mark`], so the keeper refuses a clock behind it exactly as it
//! would online (Leaf catches its own clock-check failure and falls back to the
//! cache; here nothing is caught). Offline, marks go to the cache only and the
//! peers list is empty (no skew check against peers is possible).
//!
//! # `Ephemeral`: the ZooKeeper session is the lease (Twitter Snowflake)
//!
//! A worker ID is claimed by creating the ephemeral znode
//! `/idmint/{cluster}/workers/{id}` (taken IDs answer `NodeExists`; the search
//! starts at a random free ID). ZooKeeper deletes it when the session ends, so an
//! ID whose holder died is reusable after the session timeout. The lease is the
//! session: [`Lease::valid_until`] is the instant before the request that
//! created or re-checked the node plus the negotiated session timeout (the
//! server can't expire the session sooner after seeing that request). The mark
//! lives in the persistent `/idmint/{cluster}/marks/{id}` and is raised by one
//! multi-op: `setData` on our ephemeral node with its version (after checking its
//! `ephemeralOwner` is our session) plus a version-checked `setData` on the mark.
//! A node that lost its session can't send it at all (the server refuses
//! requests of an expired session), and a new holder's node has a different
//! owner, so a stale holder can never raise the mark a new holder started from.
//!
//! **Sessions end; registries don't.** A session that expired (ZooKeeper was
//! unreachable for longer than its timeout) or was closed is replaced by a new
//! one at the next claim (and the next call that needs no claim, such as
//! listing peers). Claims made on the old session stay lost: their token names
//! it, so renewing or persisting them fails with [`RegistryError::LeaseLost`],
//! and the keeper claims again.
//!
//! # The fleet
//!
//! [`WorkerRegistry::fleet`] reads every node's data in one bounded call
//! (one read after another: ZooKeeper has no multi-read). A node's data
//! holds `address=ip:port` and, since the fleet view, `host=` (older data
//! has no host line: readers skip lines they don't know, both ways).
//! - Forever: every identity's node whose last change is within
//!   [`FLEET_RECENT`] of the newest change, live within the peer window (the
//!   rule peers follow), by ZooKeeper's own modification times. No lease.
//! - Ephemeral: every worker node (the session is the lease; ZooKeeper tells
//!   no one how long another session has left, so `lease_left` is `None`),
//!   with the mark from `marks/<id>`. A holder's report keeps its identity
//!   lines.
//!
//! # Limits
//!
//! - **Session timeout vs lease.** ZooKeeper bounds the session timeout between
//!   2 and 20 tick times; the negotiated value (not the asked one) is the lease.
//!   A shorter one detects dead holders faster but ends a lease after a shorter
//!   network hiccup.
//! - **Forever trusts identities.** Two processes configured with the same
//!   `ip:port` share a worker ID (as in Leaf). Worker IDs are never reclaimed:
//!   the range bounds how many identities a cluster ever has.
//! - **The cache is local.** It helps only a node restarting on the same data
//!   directory; a node without a cache entry can't start while ZooKeeper is down.
//! - **No given worker IDs.** [`WorkerRegistry::claim_worker`] is not
//!   implemented (the default `Unsupported` error): the fixed registries'
//!   collision check needs another shared registry.
//! - **Ephemeral nodes are deleted only by their session.** An operator deleting
//!   a holder's node by hand breaks the fence for that holder.
//!
//! # References
//! - Meituan Leaf, `SnowflakeZookeeperHolder` (the Forever scheme and its cache).
//! - Twitter Snowflake (worker IDs as ephemeral ZooKeeper nodes).

use std::borrow::Cow;
use std::fmt;
use std::fs;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jiff::Timestamp;
use zookeeper_client as zk;

use crate::error::{RegistryError, Result};
use crate::registry::{
    Claim, FLEET_RECENT, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry, check_range,
};
use crate::util::{bounded, ceil_ms, random_u64};

/// The registry kind, as in config and in errors.
const KIND: &str = "zookeeper";

/// The token prefix of a claim served from the local cache while offline.
const OFFLINE: &str = "cache:";

/// How many compare-and-set attempts a mark update makes before giving up.
const CAS_ATTEMPTS: usize = 16;

/// Which scheme the registry uses (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZooKeeperMode {
    /// Leaf's scheme: a persistent sequential node per `ip:port`, reused across
    /// restarts; no lease; an optional local cache.
    Forever,
    /// Twitter's scheme: an ephemeral node per worker ID; the session is the lease.
    Ephemeral,
}

/// Configuration of a [`ZooKeeperRegistry`] (builder-lite:
/// [`ZooKeeperConfig::new`] plus `with_*` setters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZooKeeperConfig {
    mode: ZooKeeperMode,
    cluster: Cow<'static, str>,
    session_timeout: Duration,
    timeout: Duration,
    cache_dir: Option<PathBuf>,
    peer_window: Duration,
}

impl ZooKeeperConfig {
    /// The session timeout asked for unless set.
    pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
    /// The timeout of each remote call unless set.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
    /// How recently a Forever peer must have reported to count as live.
    pub const DEFAULT_PEER_WINDOW: Duration = Duration::from_secs(30);

    /// The defaults for `mode`: cluster `default`, session timeout 10 s, call
    /// timeout 3 s, no cache, peer window 30 s.
    pub const fn new(mode: ZooKeeperMode) -> Self {
        ZooKeeperConfig {
            mode,
            cluster: Cow::Borrowed("default"),
            session_timeout: Self::DEFAULT_SESSION_TIMEOUT,
            timeout: Self::DEFAULT_TIMEOUT,
            cache_dir: None,
            peer_window: Self::DEFAULT_PEER_WINDOW,
        }
    }

    /// Nodes go under `/idmint/{cluster}/`, so several clusters share one ensemble.
    #[must_use]
    pub fn with_cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = Cow::Owned(cluster.into());
        self
    }

    /// The session timeout asked of ZooKeeper (the server may clamp it; the
    /// negotiated one is the Ephemeral lease).
    #[must_use]
    pub const fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long each remote call (connecting included) may take before it fails
    /// with [`RegistryError::Timeout`].
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Keeps Leaf's local cache of the worker ID and mark in `dir` (Forever only).
    #[must_use]
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// How recently (by ZooKeeper's modification time) a Forever peer must have
    /// reported to count as live in [`WorkerRegistry::peers`].
    #[must_use]
    pub const fn with_peer_window(mut self, window: Duration) -> Self {
        self.peer_window = window;
        self
    }

    /// The mode.
    pub const fn mode(&self) -> ZooKeeperMode {
        self.mode
    }

    /// The cluster name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The session timeout asked for.
    pub const fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// The timeout of each remote call.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The cache directory, if any.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache_dir.as_deref()
    }

    /// Checks the settings without connecting: the cluster name, the session
    /// timeout, the timeout and the cache directory's mode.
    /// [`ZooKeeperRegistry::connect`] runs it first; a server's config check
    /// runs it before any I/O.
    ///
    /// # Errors
    /// [`RegistryError::Config`] naming the setting that can't work.
    pub fn validate(&self) -> Result<()> {
        if self.cluster.is_empty() || self.cluster.contains('/') {
            return Err(config_error(format!(
                "cluster name {:?} is empty or contains '/'",
                self.cluster
            )));
        }
        if self.session_timeout.as_millis() == 0 {
            return Err(config_error(format!(
                "session timeout {:?} is shorter than 1 ms",
                self.session_timeout
            )));
        }
        if self.timeout.is_zero() {
            return Err(config_error("timeout is zero".to_owned()));
        }
        if self.mode == ZooKeeperMode::Ephemeral && self.cache_dir.is_some() {
            return Err(config_error(
                "a local cache is allowed only in forever mode: ephemeral worker IDs \
                 are handed to other nodes, so a cached one may be someone else's"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    fn root(&self) -> String {
        format!("/idmint/{}", self.cluster)
    }
}

/// A [`WorkerRegistry`] on a ZooKeeper ensemble, in one of two
/// [`ZooKeeperMode`]s.
///
/// - **Exclusive**: Forever, one worker ID per identity for good; Ephemeral, one
///   holder per ephemeral node while its session lives.
/// - **Fenced marks**: raised only by version-checked writes; in Ephemeral mode
///   only together with a write on our own ephemeral node.
/// - **Bounded**: every call fails with [`RegistryError::Timeout`] after
///   [`ZooKeeperConfig::timeout`].
/// - **Thread-safe**: share it behind an `Arc`; calls share one session.
/// - **No hidden I/O**: only [`ZooKeeperRegistry::connect`] and the trait's
///   methods talk to ZooKeeper or the cache.
///
/// # Examples
///
/// ```no_run
/// use idmint_registry::zookeeper::{ZooKeeperConfig, ZooKeeperMode, ZooKeeperRegistry};
/// use idmint_registry::{NodeIdentity, WorkerRegistry};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = ZooKeeperConfig::new(ZooKeeperMode::Ephemeral).with_cluster("orders");
/// let registry = ZooKeeperRegistry::connect("127.0.0.1:2181", config).await?;
/// let node = NodeIdentity { host: "web-1".into(), address: "10.0.0.7".into(), port: 8080 };
/// let claim = registry.claim(&node, 1024).await?;
/// registry.release(&claim).await?;
/// # Ok(())
/// # }
/// ```
pub struct ZooKeeperRegistry {
    /// `None` while offline (Forever with a cache, ZooKeeper down at connect) or
    /// after [`ZooKeeperRegistry::close_session`].
    client: Mutex<Option<zk::Client>>,
    offline_reason: Option<String>,
    connect_string: String,
    config: ZooKeeperConfig,
    /// Serializes cache read-modify-writes so the cached mark only rises.
    cache_lock: Mutex<()>,
}

impl fmt::Debug for ZooKeeperRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hosts only: a connect string may carry no secret, but a chroot or auth
        // could be added later; the session password is never shown.
        let hosts = self.connect_string.split('/').next().unwrap_or_default();
        f.debug_struct("ZooKeeperRegistry")
            .field("hosts", &hosts)
            .field("config", &self.config)
            .field("offline", &self.offline_reason.is_some())
            .finish_non_exhaustive()
    }
}

impl ZooKeeperRegistry {
    /// Connects to the ensemble at `connect_string` (`host:port[,host:port...]`),
    /// establishes a session and creates the cluster's parent nodes.
    ///
    /// In Forever mode with a cache directory, a ZooKeeper that can't be reached
    /// (refused or timed out) gives an offline registry instead of an error:
    /// its claims come from the cache (see the module docs).
    ///
    /// # Errors
    /// - [`RegistryError::Config`] for a bad configuration.
    /// - [`RegistryError::Timeout`] when no session is established in time.
    /// - [`RegistryError::Backend`] when connecting or creating nodes fails.
    pub async fn connect(connect_string: &str, config: ZooKeeperConfig) -> Result<Self> {
        config.validate()?;
        let connected = open_session(connect_string, &config).await;
        let (client, offline_reason) = match connected {
            Ok(client) => (Some(client), None),
            Err(e) if config.mode == ZooKeeperMode::Forever && config.cache_dir.is_some() => {
                tracing::warn!(error = %e, "zookeeper unreachable; forever registry starts from its local cache");
                (None, Some(e.to_string()))
            }
            Err(e) => return Err(e),
        };
        Ok(ZooKeeperRegistry {
            client: Mutex::new(client),
            offline_reason,
            connect_string: connect_string.to_owned(),
            config,
            cache_lock: Mutex::new(()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ZooKeeperConfig {
        &self.config
    }

    /// Whether the registry started from its cache because ZooKeeper was down.
    pub fn is_offline(&self) -> bool {
        self.offline_reason.is_some()
    }

    /// The session ID, while connected.
    pub fn session_id(&self) -> Option<i64> {
        self.client().map(|c| c.session_id().0)
    }

    /// Closes the session without releasing anything: ZooKeeper deletes this
    /// session's ephemeral nodes at once (as it would after the session
    /// timeout if the process died). Renewing, persisting or releasing a claim
    /// made on it fails with [`RegistryError::LeaseLost`] (or does nothing, for
    /// a release); a later claim opens a new session, as a restarted node would.
    pub fn close_session(&self) {
        let client = self.client.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(client);
    }

    /// The high-water mark stored for `worker` (Ephemeral mode; for checks and
    /// listings, a claim returns it too).
    ///
    /// # Errors
    /// [`RegistryError::Timeout`] or [`RegistryError::Backend`] when ZooKeeper fails.
    pub async fn stored_mark(&self, worker: u32) -> Result<Option<Timestamp>> {
        let client = self.live_client("read mark").await?;
        let path = self.mark_path(worker);
        self.call("read mark", async {
            match client.get_data(&path).await {
                Ok((data, _)) => parse_mark_node("read mark", worker, &data),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(backend("read mark", &e)),
            }
        })
        .await
    }

    fn client(&self) -> Option<zk::Client> {
        self.client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A live session: the current one, or a new one when it ended (expired
    /// while ZooKeeper was unreachable for longer than the session timeout, or
    /// closed by [`ZooKeeperRegistry::close_session`]). Without this, a registry
    /// whose session expired could never claim again.
    ///
    /// Claims made on an ended session stay lost: their token names that
    /// session, and renewing or persisting them never opens a new one.
    async fn live_client(&self, operation: &'static str) -> Result<zk::Client> {
        if let Some(reason) = &self.offline_reason {
            return Err(RegistryError::Backend {
                registry: KIND,
                operation,
                message: format!("zookeeper was unreachable at connect: {reason}"),
            });
        }
        if let Some(client) = self.client().filter(|c| !c.state().is_terminated()) {
            return Ok(client);
        }
        let fresh = open_session(&self.connect_string, &self.config).await?;
        let mut slot = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(current) = slot.as_ref().filter(|c| !c.state().is_terminated()) {
            // Another call opened one meanwhile: use it, drop ours (closing it).
            return Ok(current.clone());
        }
        tracing::info!(
            session = %format!("{:#x}", fresh.session_id().0),
            "zookeeper session ended; opened a new one"
        );
        *slot = Some(fresh.clone());
        Ok(fresh)
    }

    async fn call<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        bounded(KIND, operation, self.config.timeout, fut).await
    }

    fn worker_path(&self, worker: u32) -> String {
        format!("{}/workers/{worker}", self.config.root())
    }

    fn mark_path(&self, worker: u32) -> String {
        format!("{}/marks/{worker}", self.config.root())
    }

    fn forever_dir(&self) -> String {
        format!("{}/forever", self.config.root())
    }

    fn lease_lost(&self, worker: u32, reason: impl Into<String>) -> RegistryError {
        RegistryError::LeaseLost {
            registry: KIND,
            worker,
            reason: reason.into(),
        }
    }

    // ---- Forever ----

    async fn claim_forever(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        let address = node_address(node);
        if self.is_offline() {
            return self.claim_from_cache(&address);
        }
        let client = self.live_client("claim").await?;
        let dir = self.forever_dir();
        let prefix = format!("{address}-");
        let (path, worker, data) = self
            .call("claim", async {
                let children = client
                    .list_children(&dir)
                    .await
                    .map_err(|e| backend("list forever nodes", &e))?;
                // The lowest sequence wins if a race once created two.
                let mine = children
                    .iter()
                    .filter_map(|c| {
                        let seq = c.strip_prefix(&prefix)?;
                        Some((parse_seq(seq)?, c))
                    })
                    .min();
                if let Some((seq, name)) = mine {
                    let path = format!("{dir}/{name}");
                    let (data, _) = client
                        .get_data(&path)
                        .await
                        .map_err(|e| backend("read forever node", &e))?;
                    return Ok((path, seq, data));
                }
                let data = render_forever(&address, Some(&node.host), Timestamp::now(), None);
                let options =
                    zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
                let (_, seq) = client
                    .create(&format!("{dir}/{prefix}"), data.as_bytes(), &options)
                    .await
                    .map_err(|e| backend("create forever node", &e))?;
                let seq = seq.into_i64();
                let path = format!("{dir}/{prefix}{}", zk_seq(seq));
                Ok((path, seq, data.into_bytes()))
            })
            .await?;
        if worker >= i64::from(range) {
            // Never used: give the node back so the listing counts only real workers.
            let _ = self
                .call("delete forever node", async {
                    client
                        .delete(&path, None)
                        .await
                        .map_err(|e| backend("delete forever node", &e))
                })
                .await;
            let in_use = self
                .call("list forever nodes", async {
                    client
                        .list_children(&dir)
                        .await
                        .map_err(|e| backend("list forever nodes", &e))
                })
                .await
                .map_or(u64::from(range), |c| c.len() as u64);
            return Err(RegistryError::Exhausted {
                registry: KIND,
                in_use: in_use.min(u64::from(range)),
                range: u64::from(range),
            });
        }
        let worker = u32::try_from(worker).expect("below a u32 range");
        let record = parse_record("claim", worker, &data)?;
        let cached = self.read_cache(&address)?.filter(|c| c.worker == worker);
        let stored_mark = record.mark.max(cached.and_then(|c| c.mark));
        self.write_cache(&address, worker, stored_mark)?;
        tracing::info!(worker, ?stored_mark, %path, "claimed forever worker ID on zookeeper");
        Ok(Claim {
            worker,
            stored_mark,
            lease: None,
            token: path,
        })
    }

    fn claim_from_cache(&self, address: &str) -> Result<Claim> {
        let reason = self.offline_reason.clone().unwrap_or_default();
        match self.read_cache(address)? {
            Some(cached) => {
                tracing::warn!(worker = cached.worker, mark = ?cached.mark, "zookeeper unreachable: worker ID from the local cache");
                Ok(Claim {
                    worker: cached.worker,
                    stored_mark: cached.mark,
                    lease: None,
                    token: format!("{OFFLINE}{address}"),
                })
            }
            None => Err(RegistryError::Backend {
                registry: KIND,
                operation: "claim",
                message: format!(
                    "zookeeper was unreachable at connect ({reason}) and the cache has no \
                     worker for {address}"
                ),
            }),
        }
    }

    async fn persist_forever(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let address = claim
            .token
            .strip_prefix(OFFLINE)
            .map(str::to_owned)
            .or_else(|| address_of_path(&claim.token))
            .unwrap_or_default();
        // The cache first: it must never hold less than ZooKeeper.
        if self.config.cache_dir.is_some() {
            let cached = self.read_cache(&address)?.and_then(|c| c.mark);
            self.write_cache(&address, claim.worker, cached.max(Some(mark)))?;
        }
        if claim.token.starts_with(OFFLINE) {
            return Ok(());
        }
        let client = self.live_client("persist mark").await?;
        let path = claim.token.clone();
        self.call("persist mark", async {
            for _ in 0..CAS_ATTEMPTS {
                let (data, stat) = client
                    .get_data(&path)
                    .await
                    .map_err(|e| backend("persist mark", &e))?;
                let record = parse_record("persist mark", claim.worker, &data)?;
                let new_mark = record.mark.max(Some(mark));
                let data = render_forever(&address, record.host.as_deref(), reported, new_mark);
                match client
                    .set_data(&path, data.as_bytes(), Some(stat.version))
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(zk::Error::BadVersion) => continue,
                    Err(e) => return Err(backend("persist mark", &e)),
                }
            }
            Err(RegistryError::Backend {
                registry: KIND,
                operation: "persist mark",
                message: format!(
                    "{path} kept changing over {CAS_ATTEMPTS} compare-and-set attempts"
                ),
            })
        })
        .await
    }

    async fn peers_forever(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        if self.is_offline() {
            tracing::warn!("zookeeper unreachable: no peers to check the clock against");
            return Ok(Vec::new());
        }
        let client = self.live_client("list peers").await?;
        let dir = self.forever_dir();
        let nodes = self
            .call("list peers", async {
                let children = client
                    .list_children(&dir)
                    .await
                    .map_err(|e| backend("list peers", &e))?;
                let mut nodes = Vec::with_capacity(children.len());
                for child in children {
                    let Some(seq) = child.rsplit_once('-').and_then(|(_, s)| parse_seq(s)) else {
                        continue;
                    };
                    match client.get_data(&format!("{dir}/{child}")).await {
                        Ok((data, stat)) => nodes.push((seq, data, stat.mtime)),
                        Err(zk::Error::NoNode) => {}
                        Err(e) => return Err(backend("list peers", &e)),
                    }
                }
                Ok(nodes)
            })
            .await?;
        // Liveness by ZooKeeper's own modification times, not our clock.
        let newest = nodes.iter().map(|n| n.2).max().unwrap_or(0);
        let window = i64::try_from(self.config.peer_window.as_millis()).unwrap_or(i64::MAX);
        let mut peers = Vec::new();
        for (seq, data, mtime) in nodes {
            let Ok(worker) = u32::try_from(seq) else {
                continue;
            };
            if worker == claim.worker || newest.saturating_sub(mtime) > window {
                continue;
            }
            if let Some(reported) = parse_record("list peers", worker, &data)?.reported {
                peers.push(PeerReport { worker, reported });
            }
        }
        peers.sort_by_key(|p| p.worker);
        Ok(peers)
    }

    // ---- Ephemeral ----

    async fn claim_ephemeral(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        let client = self.live_client("claim").await?;
        let address = node_address(node);
        let dir = format!("{}/workers", self.config.root());
        let session = client.session_id().0;
        self.call("claim", async {
            let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
            loop {
                let held = client
                    .list_children(&dir)
                    .await
                    .map_err(|e| backend("list workers", &e))?;
                let held: std::collections::HashSet<u32> =
                    held.iter().filter_map(|c| c.parse().ok()).filter(|w| *w < range).collect();
                if held.len() as u64 >= u64::from(range) {
                    return Err(RegistryError::Exhausted {
                        registry: KIND,
                        in_use: held.len() as u64,
                        range: u64::from(range),
                    });
                }
                // A random start spreads concurrent claimers over the free IDs.
                let start = u32::try_from(random_u64() % u64::from(range)).unwrap_or(0);
                let free = (0..range)
                    .map(|i| ((u64::from(start) + u64::from(i)) % u64::from(range)) as u32)
                    .filter(|w| !held.contains(w));
                for worker in free {
                    let data = render_ephemeral(&address, &node.host);
                    let before = Instant::now();
                    match client.create(&self.worker_path(worker), data.as_bytes(), &options).await {
                        Ok(_) => {
                            let stored_mark = match client.get_data(&self.mark_path(worker)).await {
                                Ok((data, _)) => parse_mark_node("claim", worker, &data)?,
                                Err(zk::Error::NoNode) => None,
                                Err(e) => return Err(backend("read mark", &e)),
                            };
                            let ttl = client.session_timeout();
                            tracing::info!(worker, ?stored_mark, session = %format!("{session:#x}"), "claimed ephemeral worker ID on zookeeper");
                            return Ok(Claim {
                                worker,
                                stored_mark,
                                lease: Some(Lease {
                                    ttl,
                                    valid_until: before + ttl,
                                }),
                                token: format!("{session:x}"),
                            });
                        }
                        Err(zk::Error::NodeExists) => continue,
                        Err(zk::Error::SessionExpired) => {
                            return Err(self.lease_lost(worker, "the zookeeper session expired"));
                        }
                        Err(e) => return Err(backend("create worker node", &e)),
                    }
                }
                // Every ID that looked free was taken meanwhile: look again.
            }
        })
        .await
    }

    /// Reads our ephemeral node and checks this session owns it; returns its version.
    async fn owned_version(
        &self,
        client: &zk::Client,
        claim: &Claim,
        operation: &'static str,
    ) -> Result<i32> {
        let session = client.session_id().0;
        if claim.token != format!("{session:x}") {
            return Err(self.lease_lost(
                claim.worker,
                "the claim was made on another zookeeper session",
            ));
        }
        match client.check_stat(&self.worker_path(claim.worker)).await {
            Ok(Some(stat)) if stat.ephemeral_owner == session => Ok(stat.version),
            Ok(Some(stat)) => Err(self.lease_lost(
                claim.worker,
                format!(
                    "the worker node is owned by session {:#x}",
                    stat.ephemeral_owner
                ),
            )),
            Ok(None) => Err(self.lease_lost(claim.worker, "the worker node is gone")),
            Err(zk::Error::SessionExpired) => {
                Err(self.lease_lost(claim.worker, "the zookeeper session expired"))
            }
            Err(e) => Err(backend(operation, &e)),
        }
    }

    fn client_for_lease(&self, claim: &Claim) -> Result<zk::Client> {
        self.client()
            .ok_or_else(|| self.lease_lost(claim.worker, "the zookeeper session was closed"))
    }

    async fn renew_ephemeral(&self, claim: &Claim) -> Result<Option<Lease>> {
        let client = self.client_for_lease(claim)?;
        let before = Instant::now();
        self.call("renew", self.owned_version(&client, claim, "renew"))
            .await?;
        let ttl = client.session_timeout();
        Ok(Some(Lease {
            ttl,
            valid_until: before + ttl,
        }))
    }

    async fn persist_ephemeral(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let client = self.client_for_lease(claim)?;
        let worker_path = self.worker_path(claim.worker);
        let mark_path = self.mark_path(claim.worker);
        self.call("persist mark", async {
            for _ in 0..CAS_ATTEMPTS {
                let version = self.owned_version(&client, claim, "persist mark").await?;
                // Who holds the node stays in its data (the multi-op's
                // version check fails if it changed since this read).
                let (own_data, own_stat) = match client.get_data(&worker_path).await {
                    Ok(got) => got,
                    Err(zk::Error::NoNode) => {
                        return Err(self.lease_lost(claim.worker, "the worker node is gone"));
                    }
                    Err(e) => return Err(backend("persist mark", &e)),
                };
                if own_stat.version != version {
                    continue;
                }
                let held = parse_record("persist mark", claim.worker, &own_data)?;
                let (old, mark_version) = match client.get_data(&mark_path).await {
                    Ok((data, stat)) => (
                        parse_mark_node("persist mark", claim.worker, &data)?,
                        Some(stat.version),
                    ),
                    Err(zk::Error::NoNode) => (None, None),
                    Err(e) => return Err(backend("persist mark", &e)),
                };
                let new_mark = old.map_or(mark, |old| old.max(mark));
                let mut multi = client.new_multi_writer();
                let own = render_ephemeral_reported(&held, reported);
                let mark_data = ceil_ms(new_mark).to_string();
                let built = (|| {
                    multi.add_set_data(&worker_path, own.as_bytes(), Some(version))?;
                    match mark_version {
                        Some(v) => multi.add_set_data(&mark_path, mark_data.as_bytes(), Some(v)),
                        None => multi.add_create(
                            &mark_path,
                            mark_data.as_bytes(),
                            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                        ),
                    }
                })();
                built.map_err(|e| backend("persist mark", &e))?;
                match multi.commit().await {
                    Ok(_) => return Ok(()),
                    Err(e) => match zk::Error::from(e) {
                        // Our node or the mark changed in between: look again (a
                        // lost node then shows as LeaseLost).
                        zk::Error::BadVersion | zk::Error::NodeExists | zk::Error::NoNode => {
                            continue;
                        }
                        zk::Error::SessionExpired => {
                            return Err(
                                self.lease_lost(claim.worker, "the zookeeper session expired")
                            );
                        }
                        e => return Err(backend("persist mark", &e)),
                    },
                }
            }
            Err(RegistryError::Backend {
                registry: KIND,
                operation: "persist mark",
                message: format!("{mark_path} kept changing over {CAS_ATTEMPTS} attempts"),
            })
        })
        .await
    }

    async fn peers_ephemeral(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        let client = self.live_client("list peers").await?;
        let dir = format!("{}/workers", self.config.root());
        self.call("list peers", async {
            let children = client
                .list_children(&dir)
                .await
                .map_err(|e| backend("list peers", &e))?;
            let mut peers = Vec::new();
            for child in children {
                let Ok(worker) = child.parse::<u32>() else {
                    continue;
                };
                if worker == claim.worker {
                    continue;
                }
                match client.get_data(&format!("{dir}/{child}")).await {
                    Ok((data, _)) => {
                        if let Some(reported) = parse_record("list peers", worker, &data)?.reported
                        {
                            peers.push(PeerReport { worker, reported });
                        }
                    }
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(backend("list peers", &e)),
                }
            }
            peers.sort_by_key(|p| p.worker);
            Ok(peers)
        })
        .await
    }

    async fn release_ephemeral(&self, claim: &Claim) -> Result<()> {
        let Some(client) = self.client() else {
            return Ok(());
        };
        self.call("release", async {
            let version = match self.owned_version(&client, claim, "release").await {
                Ok(v) => v,
                Err(RegistryError::LeaseLost { reason, .. }) => {
                    // Not ours any more: nothing to give back, the new holder's node stays.
                    tracing::warn!(worker = claim.worker, %reason, "released a zookeeper worker that was already gone");
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            match client.delete(&self.worker_path(claim.worker), Some(version)).await {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(e) => Err(backend("release", &e)),
            }
        })
        .await
    }

    async fn fleet_forever(&self) -> Result<Vec<FleetMember>> {
        const OP: &str = "list fleet";
        let client = self.live_client(OP).await?;
        let dir = self.forever_dir();
        let nodes = self
            .call(OP, async {
                let children = client
                    .list_children(&dir)
                    .await
                    .map_err(|e| backend(OP, &e))?;
                let mut nodes = Vec::with_capacity(children.len());
                for child in children {
                    let Some((address, seq)) = child.rsplit_once('-') else {
                        continue;
                    };
                    let Some(worker) = parse_seq(seq).and_then(|s| u32::try_from(s).ok()) else {
                        continue;
                    };
                    match client.get_data(&format!("{dir}/{child}")).await {
                        Ok((data, stat)) => {
                            nodes.push((worker, address.to_owned(), data, stat.mtime));
                        }
                        Err(zk::Error::NoNode) => {}
                        Err(e) => return Err(backend(OP, &e)),
                    }
                }
                Ok(nodes)
            })
            .await?;
        let newest = nodes.iter().map(|n| n.3).max().unwrap_or(0);
        let window = i64::try_from(self.config.peer_window.as_millis()).unwrap_or(i64::MAX);
        let recent = i64::try_from(FLEET_RECENT.as_millis()).unwrap_or(i64::MAX);
        let mut rows = Vec::new();
        for (worker, address, data, mtime) in nodes {
            let age = newest.saturating_sub(mtime);
            if age > recent.max(window) {
                continue;
            }
            let record = parse_record(OP, worker, &data)?;
            let mut row = FleetMember::new(worker);
            if let Some((a, port)) = split_address(&address) {
                row.address = Some(a);
                row.port = Some(port);
            }
            row.host = record.host;
            row.live = age <= window;
            row.reported = record.reported;
            row.mark = record.mark;
            rows.push(row);
        }
        rows.sort_by_key(|r| r.worker);
        Ok(rows)
    }

    async fn fleet_ephemeral(&self) -> Result<Vec<FleetMember>> {
        const OP: &str = "list fleet";
        let client = self.live_client(OP).await?;
        let dir = format!("{}/workers", self.config.root());
        self.call(OP, async {
            let children = client
                .list_children(&dir)
                .await
                .map_err(|e| backend(OP, &e))?;
            let mut rows = Vec::new();
            for child in children {
                let Ok(worker) = child.parse::<u32>() else {
                    continue;
                };
                let data = match client.get_data(&format!("{dir}/{child}")).await {
                    Ok((data, _)) => data,
                    // Its session ended since the listing.
                    Err(zk::Error::NoNode) => continue,
                    Err(e) => return Err(backend(OP, &e)),
                };
                let record = parse_record(OP, worker, &data)?;
                let mut row = FleetMember::new(worker);
                if let Some((a, port)) = record.address.as_deref().and_then(split_address) {
                    row.address = Some(a);
                    row.port = Some(port);
                }
                row.host = record.host;
                row.live = true;
                row.reported = record.reported;
                row.mark = match client.get_data(&self.mark_path(worker)).await {
                    Ok((data, _)) => parse_mark_node(OP, worker, &data)?,
                    Err(zk::Error::NoNode) => None,
                    Err(e) => return Err(backend(OP, &e)),
                };
                rows.push(row);
            }
            rows.sort_by_key(|r| r.worker);
            Ok(rows)
        })
        .await
    }

    // ---- The local cache (Forever only) ----

    fn cache_path(&self, address: &str) -> Option<PathBuf> {
        let dir = self.config.cache_dir.as_ref()?;
        let name: String = format!("zk-{}-{address}", self.config.cluster)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Some(dir.join(format!("{name}.worker")))
    }

    fn read_cache(&self, address: &str) -> Result<Option<CacheRecord>> {
        let Some(path) = self.cache_path(address) else {
            return Ok(None);
        };
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(cache_error(format!("read {}: {e}", path.display()))),
        };
        // A damaged cache is an error, never "no mark": that guess goes backwards.
        CacheRecord::parse(&text)
            .map(Some)
            .map_err(|e| cache_error(format!("{} is damaged: {e}", path.display())))
    }

    fn write_cache(&self, address: &str, worker: u32, mark: Option<Timestamp>) -> Result<()> {
        let Some(path) = self.cache_path(address) else {
            return Ok(());
        };
        let _guard = self.cache_lock.lock().unwrap_or_else(|e| e.into_inner());
        // Only raise: a concurrent writer may have stored a higher mark.
        let current = self
            .read_cache(address)?
            .filter(|c| c.worker == worker)
            .and_then(|c| c.mark);
        let record = CacheRecord {
            worker,
            mark: current.max(mark),
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)
            .map_err(|e| cache_error(format!("create {}: {e}", dir.display())))?;
        let temp = path.with_extension("worker.tmp");
        let write = || -> std::io::Result<()> {
            let mut file = fs::File::create(&temp)?;
            file.write_all(record.render().as_bytes())?;
            file.sync_all()?;
            fs::rename(&temp, &path)?;
            fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| cache_error(format!("write {}: {e}", path.display())))
    }
}

#[async_trait]
impl WorkerRegistry for ZooKeeperRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        check_range(KIND, range)?;
        match self.config.mode {
            ZooKeeperMode::Forever => self.claim_forever(node, range).await,
            ZooKeeperMode::Ephemeral => self.claim_ephemeral(node, range).await,
        }
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        match self.config.mode {
            ZooKeeperMode::Forever => Ok(None),
            ZooKeeperMode::Ephemeral => self.renew_ephemeral(claim).await,
        }
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        match self.config.mode {
            ZooKeeperMode::Forever => self.persist_forever(claim, mark, reported).await,
            ZooKeeperMode::Ephemeral => self.persist_ephemeral(claim, mark, reported).await,
        }
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        match self.config.mode {
            ZooKeeperMode::Forever => self.peers_forever(claim).await,
            ZooKeeperMode::Ephemeral => self.peers_ephemeral(claim).await,
        }
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        if self.is_offline() {
            return Err(RegistryError::Backend {
                registry: KIND,
                operation: "list fleet",
                message: format!(
                    "zookeeper was unreachable at connect: {}",
                    self.offline_reason.as_deref().unwrap_or("unknown")
                ),
            });
        }
        match self.config.mode {
            ZooKeeperMode::Forever => self.fleet_forever().await,
            ZooKeeperMode::Ephemeral => self.fleet_ephemeral().await,
        }
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        match self.config.mode {
            // A forever worker ID belongs to its identity for good; the mark stays.
            ZooKeeperMode::Forever => Ok(()),
            ZooKeeperMode::Ephemeral => self.release_ephemeral(claim).await,
        }
    }
}

/// What the local cache file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CacheRecord {
    worker: u32,
    mark: Option<Timestamp>,
}

impl CacheRecord {
    fn render(&self) -> String {
        let mut s = format!("# idmint zookeeper worker cache\nworker={}\n", self.worker);
        if let Some(mark) = self.mark {
            s.push_str(&format!("mark={}\n", ceil_ms(mark)));
        }
        s.push_str("end\n");
        s
    }

    fn parse(text: &str) -> std::result::Result<CacheRecord, String> {
        let mut worker = None;
        let mut mark = None;
        let mut ended = false;
        for line in text.lines() {
            match line.split_once('=') {
                Some(("worker", v)) => {
                    worker = Some(
                        v.parse::<u32>()
                            .map_err(|_| format!("worker {v:?} is not a number"))?,
                    )
                }
                Some(("mark", v)) => {
                    mark = Some(
                        ms_to_ts(v)
                            .ok_or_else(|| format!("mark {v:?} is not unix milliseconds"))?,
                    )
                }
                _ if line == "end" => ended = true,
                _ => {}
            }
        }
        if !ended {
            return Err("it was cut short (no end line)".to_owned());
        }
        Ok(CacheRecord {
            worker: worker.ok_or("it has no worker line")?,
            mark,
        })
    }
}

/// A node's data: `address=`, `host=`, `reported=`, `mark=` lines (times in
/// Unix ms). Lines a reader doesn't know are skipped.
#[derive(Debug, Default, PartialEq, Eq)]
struct NodeRecord {
    address: Option<String>,
    host: Option<String>,
    reported: Option<Timestamp>,
    mark: Option<Timestamp>,
}

/// The identity lines; `host` is absent where older data had none.
fn identity_lines(address: &str, host: Option<&str>) -> String {
    match host {
        Some(host) => format!("address={address}\nhost={host}\n"),
        None => format!("address={address}\n"),
    }
}

fn render_forever(
    address: &str,
    host: Option<&str>,
    reported: Timestamp,
    mark: Option<Timestamp>,
) -> String {
    let mut s = format!(
        "{}reported={}\n",
        identity_lines(address, host),
        reported.as_millisecond()
    );
    if let Some(mark) = mark {
        s.push_str(&format!("mark={}\n", ceil_ms(mark)));
    }
    s
}

/// A new ephemeral node's data: who holds it. No `reported=` line: a holder
/// reports with its first persisted mark, by its generator's clock, and until
/// then is no peer to compare clocks with.
fn render_ephemeral(address: &str, host: &str) -> String {
    identity_lines(address, Some(host))
}

/// A report on an ephemeral node: its identity lines (as `held` has them),
/// then the time.
fn render_ephemeral_reported(held: &NodeRecord, reported: Timestamp) -> String {
    let identity = held
        .address
        .as_deref()
        .map(|a| identity_lines(a, held.host.as_deref()))
        .unwrap_or_default();
    format!("{identity}reported={}\n", reported.as_millisecond())
}

fn parse_record(operation: &'static str, worker: u32, data: &[u8]) -> Result<NodeRecord> {
    let bad = |what: String| RegistryError::Backend {
        registry: KIND,
        operation,
        message: format!("worker {worker}'s node holds {what}"),
    };
    let text = std::str::from_utf8(data).map_err(|_| bad("data that is not utf-8".to_owned()))?;
    let mut record = NodeRecord::default();
    for line in text.lines() {
        match line.split_once('=') {
            Some(("reported", v)) => {
                record.reported = Some(ms_to_ts(v).ok_or_else(|| bad(format!("reported={v:?}")))?);
            }
            Some(("mark", v)) => {
                record.mark = Some(ms_to_ts(v).ok_or_else(|| bad(format!("mark={v:?}")))?);
            }
            Some(("address", v)) => record.address = Some(v.to_owned()),
            Some(("host", v)) => record.host = Some(v.to_owned()),
            _ => {}
        }
    }
    Ok(record)
}

fn parse_mark_node(operation: &'static str, worker: u32, data: &[u8]) -> Result<Option<Timestamp>> {
    let text = String::from_utf8_lossy(data);
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    ms_to_ts(text)
        .map(Some)
        .ok_or_else(|| RegistryError::Backend {
            registry: KIND,
            operation,
            message: format!(
                "worker {worker} has mark {text:?} stored, not a unix time in milliseconds"
            ),
        })
}

fn ms_to_ts(raw: &str) -> Option<Timestamp> {
    raw.trim()
        .parse::<i64>()
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
}

fn node_address(node: &NodeIdentity) -> String {
    format!("{}:{}", node.address, node.port)
}

/// `ip` and port of an `ip:port` (the last colon splits, so IPv6 works).
fn split_address(address: &str) -> Option<(String, u16)> {
    let (ip, port) = address.rsplit_once(':')?;
    Some((ip.to_owned(), port.parse().ok()?))
}

/// `ip:port` from a forever node path `.../forever/{ip:port}-{seq}`.
fn address_of_path(path: &str) -> Option<String> {
    let name = path.rsplit('/').next()?;
    Some(name.rsplit_once('-')?.0.to_owned())
}

fn parse_seq(raw: &str) -> Option<i64> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

/// ZooKeeper's rendering of a sequence number (ten digits, or nineteen past i32).
fn zk_seq(seq: i64) -> String {
    if seq <= i64::from(i32::MAX) {
        format!("{seq:010}")
    } else {
        format!("{seq:019}")
    }
}

/// Establishes a session on `connect_string` and creates the cluster's parent
/// nodes, within the configured timeout.
async fn open_session(connect_string: &str, config: &ZooKeeperConfig) -> Result<zk::Client> {
    let connecting = async {
        let client = zk::Client::connector()
            .with_session_timeout(config.session_timeout)
            .with_connection_timeout(config.timeout)
            .with_fail_eagerly()
            .connect(connect_string)
            .await
            .map_err(|e| backend("connect", &e))?;
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let root = config.root();
        let dirs: &[&str] = match config.mode {
            ZooKeeperMode::Forever => &["forever"],
            ZooKeeperMode::Ephemeral => &["workers", "marks"],
        };
        for dir in dirs {
            client
                .mkdir(&format!("{root}/{dir}"), &options)
                .await
                .map_err(|e| backend("create parent nodes", &e))?;
        }
        Ok(client)
    };
    bounded(KIND, "connect", config.timeout, connecting).await
}

fn backend(operation: &'static str, e: &zk::Error) -> RegistryError {
    RegistryError::Backend {
        registry: KIND,
        operation,
        message: e.to_string(),
    }
}

fn config_error(message: String) -> RegistryError {
    RegistryError::Config {
        registry: KIND,
        message,
    }
}

fn cache_error(message: String) -> RegistryError {
    RegistryError::Backend {
        registry: KIND,
        operation: "local cache",
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_rejects_cache_in_ephemeral_mode_and_bad_clusters() {
        let err = ZooKeeperConfig::new(ZooKeeperMode::Ephemeral)
            .with_cache_dir("/tmp/x")
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("forever mode"), "{err}");
        assert!(
            ZooKeeperConfig::new(ZooKeeperMode::Forever)
                .with_cluster("a/b")
                .validate()
                .is_err()
        );
        assert!(
            ZooKeeperConfig::new(ZooKeeperMode::Forever)
                .with_cache_dir("/tmp/x")
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn cache_records_round_trip_and_cut_files_are_errors() {
        let record = CacheRecord {
            worker: 7,
            mark: Timestamp::from_millisecond(1_700_000_000_123).ok(),
        };
        assert_eq!(CacheRecord::parse(&record.render()).unwrap(), record);
        let cut = record.render().replace("end\n", "");
        assert!(CacheRecord::parse(&cut).is_err());
    }

    #[test]
    fn node_paths_and_sequences_parse() {
        assert_eq!(
            address_of_path("/idmint/c/forever/10.0.0.1:80-0000000003").as_deref(),
            Some("10.0.0.1:80")
        );
        assert_eq!(parse_seq("0000000003"), Some(3));
        assert_eq!(parse_seq("x1"), None);
        assert_eq!(zk_seq(3), "0000000003");
        let data = render_forever(
            "a:1",
            Some("web-1"),
            Timestamp::from_millisecond(5).unwrap(),
            Timestamp::from_millisecond(9).ok(),
        );
        let record = parse_record("claim", 1, data.as_bytes()).unwrap();
        assert_eq!(record.mark, Timestamp::from_millisecond(9).ok());
        assert_eq!(record.reported, Timestamp::from_millisecond(5).ok());
        assert_eq!(record.host.as_deref(), Some("web-1"));
        assert_eq!(record.address.as_deref(), Some("a:1"));
        // Data of an older idmint: no host line.
        let old = parse_record("claim", 1, b"address=a:1\nreported=5\n").unwrap();
        assert_eq!((old.host, old.address.as_deref()), (None, Some("a:1")));
        let reported = render_ephemeral_reported(&record, Timestamp::from_millisecond(7).unwrap());
        assert_eq!(reported, "address=a:1\nhost=web-1\nreported=7\n");
        assert_eq!(split_address("::1:80"), Some(("::1".to_owned(), 80)));
        assert_eq!(split_address("nonsense"), None);
    }
}
