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
//! peers list is empty (no skew check against peers is possible). When
//! ZooKeeper answers again (tried at most every 5 s, from the keeper's
//! persist calls), the claim is registered there again
//! ([`WorkerRegistry::register_again`]: the identity's node must still have
//! the cached worker as its sequence, and a mark at or below the holder's),
//! so ZooKeeper holds the marks from then on and a restart that lost its
//! cache can't start from ZooKeeper's older mark.
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
//! A clean stop's record ([`WorkerRegistry::record_clean_stop`]) sets the mark
//! to the last tick the holder issued in the same multi-op. Forever mode sets
//! it by a version-checked `setData` on its node, then in the local cache
//! (ZooKeeper first, so the cache never holds less: `zookeeper/forever.rs`).
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
//!   [`FLEET_RECENT`](crate::FLEET_RECENT) of the newest change, live within the peer window (the
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
//! # Where the code lives
//! This module holds what both modes share: the configuration, the session
//! (replaced when it ends), the node data format, and [`ZooKeeperRegistry`],
//! which picks the protocol from [`ZooKeeperMode`] at connect and hands every
//! step to it. Each mode is one type implementing the steps (claim, renew,
//! persist, peers, fleet, release): `Forever` in `zookeeper/forever.rs`
//! (with the local cache) and `Ephemeral` in `zookeeper/ephemeral.rs`.
//!
//! # References
//! - Meituan Leaf, `SnowflakeZookeeperHolder` (the Forever scheme and its cache).
//! - Twitter Snowflake (worker IDs as ephemeral ZooKeeper nodes).

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use zookeeper_client as zk;

use crate::error::{RegistryError, Result};
use crate::registry::{
    Claim, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry, check_range,
};
use crate::util::{bounded, check_timeout};

mod ephemeral;
mod forever;
pub mod topology;

use self::ephemeral::Ephemeral;
use self::forever::Forever;

/// The registry kind, as in config and in errors.
const KIND: &str = "zookeeper";

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
            return Err(RegistryError::config(
                KIND,
                format!("cluster name {:?} is empty or contains '/'", self.cluster),
            ));
        }
        if self.session_timeout.as_millis() == 0 {
            return Err(RegistryError::config(
                KIND,
                format!(
                    "session timeout {:?} is shorter than 1 ms",
                    self.session_timeout
                ),
            ));
        }
        check_timeout(KIND, "timeout", self.timeout)?;
        if self.mode == ZooKeeperMode::Ephemeral && self.cache_dir.is_some() {
            return Err(RegistryError::config(
                KIND,
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
///   only together with a write on our own ephemeral node, which a clean
///   stop's record also needs.
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
    protocol: Protocol,
}

/// The one protocol a registry speaks, chosen at connect from its mode.
enum Protocol {
    Forever(Forever),
    Ephemeral(Ephemeral),
}

impl fmt::Debug for ZooKeeperRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let session = self.session();
        f.debug_struct("ZooKeeperRegistry")
            .field("hosts", &session.hosts())
            .field("config", &session.config)
            .field("offline", &session.is_offline())
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
        let session = Session {
            client: Mutex::new(client),
            offline_reason: Mutex::new(offline_reason),
            connect_string: connect_string.to_owned(),
            config,
        };
        let protocol = match session.config.mode {
            ZooKeeperMode::Forever => Protocol::Forever(Forever::new(session)),
            ZooKeeperMode::Ephemeral => Protocol::Ephemeral(Ephemeral::new(session)),
        };
        Ok(ZooKeeperRegistry { protocol })
    }

    /// The configuration.
    pub fn config(&self) -> &ZooKeeperConfig {
        &self.session().config
    }

    /// Whether the registry started from its cache because ZooKeeper was down.
    pub fn is_offline(&self) -> bool {
        self.session().is_offline()
    }

    /// The session ID, while connected.
    pub fn session_id(&self) -> Option<i64> {
        self.session().client().map(|c| c.session_id().0)
    }

    /// Closes the session without releasing anything: ZooKeeper deletes this
    /// session's ephemeral nodes at once (as it would after the session
    /// timeout if the process died). Renewing, persisting or releasing a claim
    /// made on it fails with [`RegistryError::LeaseLost`] (or does nothing, for
    /// a release); a later claim opens a new session, as a restarted node would.
    pub fn close_session(&self) {
        let client = self
            .session()
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(client);
    }

    /// The high-water mark stored for `worker` (Ephemeral mode; for checks and
    /// listings, a claim returns it too).
    ///
    /// # Errors
    /// [`RegistryError::Timeout`] or [`RegistryError::Backend`] when ZooKeeper fails.
    pub async fn stored_mark(&self, worker: u32) -> Result<Option<Timestamp>> {
        self.session().stored_mark(worker).await
    }

    /// The protocol's steps, as the trait's.
    fn protocol(&self) -> &dyn WorkerRegistry {
        match &self.protocol {
            Protocol::Forever(p) => p,
            Protocol::Ephemeral(p) => p,
        }
    }

    fn session(&self) -> &Session {
        match &self.protocol {
            Protocol::Forever(p) => p.session(),
            Protocol::Ephemeral(p) => p.session(),
        }
    }
}

#[async_trait]
impl WorkerRegistry for ZooKeeperRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn reassigns_workers(&self) -> bool {
        self.protocol().reassigns_workers()
    }

    async fn persist_local(&self, claim: &Claim, mark: Timestamp) -> Result<()> {
        self.protocol().persist_local(claim, mark).await
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        check_range(KIND, range)?;
        self.protocol().claim(node, range).await
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        self.protocol().renew(claim).await
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.protocol().persist_mark(claim, mark, reported).await
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.protocol()
            .record_clean_stop(claim, high, reported)
            .await
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        self.protocol().peers(claim).await
    }

    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> Result<Claim> {
        self.protocol().register_again(node, claim, mark).await
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        self.protocol().fleet().await
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        self.protocol().release(claim).await
    }
}

/// What both protocols share: the session (replaced when it ends), the
/// configuration, and the node paths under the cluster's root.
struct Session {
    /// `None` while offline (Forever with a cache, ZooKeeper down at connect) or
    /// after [`ZooKeeperRegistry::close_session`].
    client: Mutex<Option<zk::Client>>,
    /// Why the registry started offline, until a session opens
    /// ([`Session::try_online`]).
    offline_reason: Mutex<Option<String>>,
    connect_string: String,
    config: ZooKeeperConfig,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("hosts", &self.hosts())
            .field("config", &self.config)
            .field("offline", &self.is_offline())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The connect string's hosts: a connect string may carry no secret, but
    /// a chroot or auth could be added later; the session password is never
    /// shown.
    fn hosts(&self) -> &str {
        self.connect_string.split('/').next().unwrap_or_default()
    }

    fn is_offline(&self) -> bool {
        self.offline_reason().is_some()
    }

    fn offline_reason(&self) -> Option<String> {
        self.offline_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// An offline registry (Forever with a cache, ZooKeeper down at connect)
    /// tries to open a session: true once online. A node that started while
    /// ZooKeeper was down, with no worker in its cache, so claims normally
    /// once ZooKeeper is back, rather than never.
    async fn try_online(&self) -> bool {
        if !self.is_offline() {
            return true;
        }
        match open_session(&self.connect_string, &self.config).await {
            Ok(fresh) => {
                *self.client.lock().unwrap_or_else(|e| e.into_inner()) = Some(fresh);
                *self
                    .offline_reason
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = None;
                tracing::info!("zookeeper reachable again: the forever registry is online");
                true
            }
            Err(e) => {
                let mut reason = self
                    .offline_reason
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if reason.is_some() {
                    *reason = Some(e.to_string());
                }
                false
            }
        }
    }

    async fn stored_mark(&self, worker: u32) -> Result<Option<Timestamp>> {
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
        if !self.try_online().await {
            let reason = self.offline_reason().unwrap_or_default();
            return Err(RegistryError::unavailable(
                KIND,
                operation,
                format!("zookeeper is unreachable: {reason}"),
            ));
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
            .map_err(|e| connect_error("connect", &e))?;
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
                .map_err(|e| connect_error("create parent nodes", &e))?;
        }
        Ok(client)
    };
    bounded(KIND, "connect", config.timeout, connecting).await
}

/// The data and stat of the nodes `dir/child` for each child, read at once:
/// the requests are pipelined on the session's connection, so a thousand
/// reads cost about one round trip, where reading them one after another
/// cost a thousand (and timed out when 1,000 nodes started together).
/// `None` for a node that is gone (its session ended since the listing).
/// Reports with their ages by the ZooKeeper leader's clock: each report
/// comes with its node's `mtime` (the leader's clock when the report was
/// written), and the age is the leader's "now" minus that.
///
/// ZooKeeper has no "what time is it" call, so "now" is the latest `mtime`
/// the same read saw: the reports' own and `own`, the mtime of a node this
/// node wrote anyway (its worker node, written at its claim or its last
/// report). Not a probe write per start: what an overloaded ensemble can't
/// take is one more write from every node that starts. The latest `mtime`
/// is at or before the leader's clock at the read, so every age errs short,
/// and a short age only makes this node look further ahead of a peer,
/// never excuses it. In the ephemeral mode this node's own node was just
/// created by its claim, so its `mtime` is close to now; in the forever
/// mode the newest node of the fleet is the reference, which lags when
/// nobody could write for a while (ages then err short by that much).
fn with_ages(found: Vec<(PeerReport, i64)>, own: Option<i64>) -> Vec<PeerReport> {
    let now = found.iter().map(|(_, mtime)| *mtime).max().max(own);
    found
        .into_iter()
        .map(|(report, mtime)| match now {
            Some(now) => report.with_age(std::time::Duration::from_millis(
                now.saturating_sub(mtime).max(0).unsigned_abs(),
            )),
            None => report,
        })
        .collect()
}

async fn read_children(
    client: &zk::Client,
    operation: &'static str,
    dir: &str,
    children: &[String],
) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
    let reads = children
        .iter()
        .map(|child| async move { client.get_data(&format!("{dir}/{child}")).await });
    futures_util::future::join_all(reads)
        .await
        .into_iter()
        .map(|read| match read {
            Ok(found) => Ok(Some(found)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(backend(operation, &e)),
        })
        .collect()
}

fn backend(operation: &'static str, e: &zk::Error) -> RegistryError {
    RegistryError::backend(KIND, operation, e)
}

/// A failed connect: [`RegistryError::Unavailable`] when no server could
/// be reached or the ensemble can't serve now (a lost connection, no quorum
/// yet, a server that only serves reads), which a start waits on; anything
/// else (refused authentication, bad arguments) as [`backend`].
fn connect_error(operation: &'static str, e: &zk::Error) -> RegistryError {
    match e {
        zk::Error::NoHosts
        | zk::Error::Timeout
        | zk::Error::ConnectionLoss
        | zk::Error::SessionExpired
        | zk::Error::Throttled
        | zk::Error::NotReadOnly => RegistryError::unavailable(KIND, operation, e),
        _ => backend(operation, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zookeeper::ephemeral::render_ephemeral_reported;
    use crate::zookeeper::forever::{address_of_path, parse_seq, render_forever, zk_seq};

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
