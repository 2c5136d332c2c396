//! The [`WorkerRegistry`] contract every backend implements.

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jiff::Timestamp;

use crate::error::Result;

/// Who is claiming: used by registries that key workers by host and port (Leaf's
/// ZooKeeper scheme, uid-generator's `WORKER_NODE`), and shown in listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    /// The host name.
    pub host: String,
    /// The address peers reach this node on (IP or name).
    pub address: String,
    /// The service port.
    pub port: u16,
}

impl fmt::Display for NodeIdentity {
    /// `host (address:port)`, as errors name nodes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}:{})", self.host, self.address, self.port)
    }
}

/// A lease on a worker ID: valid until `valid_until` on the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The lease's time to live, as granted.
    pub ttl: Duration,
    /// When it runs out unless renewed, measured on this process's monotonic
    /// clock from before the request that granted or renewed it (so it errs early).
    pub valid_until: Instant,
}

/// A worker ID held by this node.
#[derive(Clone, PartialEq, Eq)]
pub struct Claim {
    /// The worker ID, below the range asked for.
    pub worker: u32,
    /// The high-water mark stored for this worker ID by whoever held it before
    /// (this node before a restart, or a dead node): the generator must start
    /// strictly above it. `None` when the ID was never used.
    pub stored_mark: Option<Timestamp>,
    /// The lease, for registries that have leases.
    pub lease: Option<Lease>,
    /// Backend data identifying this holding (a row id, an etcd lease id, a Redis
    /// token, a ZooKeeper path). Opaque to callers.
    pub token: String,
}

impl fmt::Debug for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claim")
            .field("worker", &self.worker)
            .field("stored_mark", &self.stored_mark)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// A live peer's last report, for the clock sanity check at start.
///
/// A report is the peer's own clock reading, written at its renewals. Under
/// an overloaded coordinator a peer's writes are slow or fail, so its last
/// report can be tens of seconds old when a start reads it, and a median of
/// such readings lags real time: a correct clock looks ahead of it. The
/// registry says how old each report is where it can, so the keeper weighs
/// the peer's clock as it is now, not as it was:
/// - `age`: measured on the coordinator's own clock (a database's time, a
///   Redis `TIME`, a ZooKeeper leader's `mtime`), never on the peer's or the
///   reader's, so it needs no two clocks to agree;
/// - `revision`: where the coordinator has an order of writes but no clock
///   (etcd), the revisions of the report's write and of the read, so a
///   second read can tell a report written after the first one.
///
/// Builder-lite: [`PeerReport::new`], then `with_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerReport {
    /// The peer's worker ID.
    pub worker: u32,
    /// The time the peer last reported (its clock's reading when it reported).
    pub reported: Timestamp,
    /// How long before the read the coordinator stored the report, on the
    /// coordinator's clock; `None` where the registry can't know (etcd, a
    /// report written by an idmint that did not stamp it).
    ///
    /// It errs short, never long: the coordinator stamps a report after the
    /// peer read its clock (a write's way there and its queue come on top),
    /// so `reported + age` is at or behind the peer's clock at the read.
    pub age: Option<Duration>,
    /// The revisions of the report's write and of the read that returned it,
    /// for a coordinator with an order of writes and no clock (etcd).
    pub revision: Option<ReportRevision>,
}

impl PeerReport {
    /// `worker`'s report of `reported`, of unknown age.
    pub const fn new(worker: u32, reported: Timestamp) -> PeerReport {
        PeerReport {
            worker,
            reported,
            age: None,
            revision: None,
        }
    }

    /// The report's age at the read, on the coordinator's clock.
    #[must_use]
    pub const fn with_age(mut self, age: Duration) -> PeerReport {
        self.age = Some(age);
        self
    }

    /// The revisions of the report's write and of the read.
    #[must_use]
    pub const fn with_revision(mut self, revision: ReportRevision) -> PeerReport {
        self.revision = Some(revision);
        self
    }

    /// The peer's clock at the read as the report tells it: `reported` plus
    /// its age, or `reported` alone where the age is unknown.
    pub fn estimated_now(&self) -> Timestamp {
        let age = self
            .age
            .and_then(|a| jiff::SignedDuration::try_from(a).ok())
            .unwrap_or(jiff::SignedDuration::ZERO);
        self.reported.checked_add(age).unwrap_or(Timestamp::MAX)
    }
}

/// Where a report stands in the order of a coordinator's writes, for one
/// that has such an order but no clock of its own (etcd's revisions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportRevision {
    /// The revision of the write that stored the report (etcd's
    /// `mod_revision` of the report's key).
    pub written: i64,
    /// The revision the read saw (etcd's response header's revision).
    pub read: i64,
}

/// How long after its lease or liveness deadline ran out a holding still
/// shows in [`WorkerRegistry::fleet`] (as `live: false`), where the registry
/// remembers it at all: long enough to see a node that just died, short
/// enough that a fleet's history doesn't fill the listing.
pub const FLEET_RECENT: Duration = Duration::from_secs(300);

/// One node of the fleet as the registry sees it: a holding (or a recent
/// holding) of a worker ID, from [`WorkerRegistry::fleet`].
///
/// Every field is what the registry stores, read at one moment; nothing is
/// filled in from this node's own state. Fields a backend does not store (or
/// that data written by an older idmint lacks) are `None`, never guessed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetMember {
    /// The worker ID.
    pub worker: u32,
    /// The holder's host name, where the registry stores it.
    pub host: Option<String>,
    /// The address peers reach the holder on, where the registry stores it.
    pub address: Option<String>,
    /// The holder's service port, where the registry stores it.
    pub port: Option<u16>,
    /// Whether the holding is live now by the registry's own rule (an unexpired
    /// lease, an existing ephemeral node, a recent report). `false` rows are
    /// recent holdings the registry still remembers (a lease that ran out and
    /// was not yet taken over).
    pub live: bool,
    /// How long the lease has left at the read, by the registry's clock where it
    /// keeps one (zero once it ran out); `None` for registries without leases.
    pub lease_left: Option<Duration>,
    /// The holder's last reported time: its clock's reading when it reported.
    pub reported: Option<Timestamp>,
    /// The worker's stored high-water mark.
    pub mark: Option<Timestamp>,
}

impl FleetMember {
    /// A row for `worker` with nothing else known yet.
    pub fn new(worker: u32) -> FleetMember {
        FleetMember {
            worker,
            host: None,
            address: None,
            port: None,
            live: false,
            lease_left: None,
            reported: None,
            mark: None,
        }
    }

    /// Fills the identity from `node`.
    #[must_use]
    pub fn with_node(mut self, node: &NodeIdentity) -> FleetMember {
        self.host = Some(node.host.clone());
        self.address = Some(node.address.clone());
        self.port = Some(node.port);
        self
    }

    /// Whether this row is `node`'s: the same address and port (the host name
    /// too where the registry stored one).
    pub fn is_node(&self, node: &NodeIdentity) -> bool {
        self.address.as_deref() == Some(node.address.as_str())
            && self.port == Some(node.port)
            && self.host.as_deref().is_none_or(|h| h == node.host)
    }
}

/// A backend that hands out worker IDs and stores their high-water marks.
///
/// Contract, for every implementation:
/// - **Exclusive**: while a claim is held (its lease not expired, or for
///   registries without leases, until released), no other claim gets the same
///   worker ID.
/// - **Marks survive holders**: `stored_mark` of a claim is the highest mark any
///   earlier holder of the ID persisted; persisting only ever raises it. The
///   one write that may lower it is a clean stop's record
///   ([`WorkerRegistry::record_clean_stop`]), to what that holding really
///   issued; any later persist raises it again.
/// - **Conditional persistence**: `persist_mark` succeeds only while this claim
///   still holds the ID (fenced by the lease or the token), so a node that lost
///   its lease can never raise the mark a new holder started from.
/// - **Bounded**: every remote call gives up with `RegistryError::Timeout` after
///   the registry's configured timeout.
/// - **Typed exhaustion**: when no ID is free, `RegistryError::Exhausted` says how
///   many are in use.
#[async_trait]
pub trait WorkerRegistry: Send + Sync + fmt::Debug {
    /// The registry kind, as in config (`static`, `file`, `sql`, `etcd`, ...).
    fn kind(&self) -> &'static str;

    /// Claims a worker ID in `0..range` for `node`.
    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim>;

    /// Claims exactly `worker` (below `range`) for `node`.
    ///
    /// This is how a worker ID that a node was configured with or derived itself
    /// (the `static`, `host`, `k8s` and `file` registries) is registered in a
    /// shared registry: a second node with the same ID then fails at start
    /// instead of issuing the first one's IDs. The claim is exclusive, fenced and
    /// leased like one from [`WorkerRegistry::claim`], and starts above the
    /// worker's stored mark.
    ///
    /// # Errors
    ///
    /// - [`RegistryError::WorkerTaken`](crate::RegistryError::WorkerTaken) naming
    ///   the holder while another claim holds `worker`;
    /// - [`RegistryError::Config`](crate::RegistryError::Config) when `worker` is
    ///   not below `range`;
    /// - [`RegistryError::Unsupported`](crate::RegistryError::Unsupported), the
    ///   default, for registries that only hand out IDs of their own choosing.
    async fn claim_worker(&self, node: &NodeIdentity, worker: u32, range: u32) -> Result<Claim> {
        let _ = (node, worker, range);
        Err(crate::RegistryError::Unsupported {
            registry: self.kind(),
            operation: "claiming a given worker ID",
            reason: Some("this registry assigns worker IDs itself".to_owned()),
        })
    }

    /// Whether a worker ID this registry gave one node can later be given to
    /// another: after a lease runs out, a session ends, or a node releases it
    /// (`true`, the default). `false` for registries that tie each worker ID
    /// to one holder for good: SQL `disposable` and `uid-generator` (a new ID
    /// every start, never reused), ZooKeeper `forever` (an ID per `ip:port`),
    /// and the single-node ones (`file`, `static`, `host`, `k8s`).
    ///
    /// Such a registry's node keeps issuing through a coordinator outage of
    /// any length ([`WorkerKeeper`](crate::WorkerKeeper)): a persist that
    /// fails with [`RegistryError::is_transient`](crate::RegistryError::is_transient)
    /// does not stop it, and a lease that runs out does not fence it. So a
    /// `false` registry must keep what a restart of the same worker ID
    /// needs without the coordinator (ZooKeeper `forever`'s local cache, the
    /// single-node registries' lease file), or need nothing (a disposable
    /// ID is never claimed again).
    fn reassigns_workers(&self) -> bool {
        true
    }

    /// For a registry that never reassigns ([`WorkerRegistry::reassigns_workers`]
    /// is `false`): keeps `mark` where a restart of this worker ID finds it
    /// without the coordinator (ZooKeeper `forever`'s cache, the single-node
    /// registries' lease file), raising what is kept, never lowering it. The
    /// keeper calls it before it lets the generator issue up to `mark`, then
    /// persists to the coordinator, whose failure then stops nothing. The
    /// default keeps nothing: a disposable ID is never claimed again.
    async fn persist_local(&self, claim: &Claim, mark: Timestamp) -> Result<()> {
        let _ = (claim, mark);
        Ok(())
    }

    /// Renews the claim's lease; returns the new lease (or `None` for registries
    /// without leases).
    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>>;

    /// Registers `claim` again after the registry began a new epoch (its
    /// store forgot, or may have forgotten: a failover to a replica that
    /// lacked the last writes, a restart from an older snapshot), so its
    /// holder keeps its worker ID instead of waiting out the hold.
    ///
    /// The keeper calls it only for a claim whose renewal or mark the
    /// registry refused with [`RegistryError::LeaseLost`](crate::RegistryError::LeaseLost),
    /// and only while the claim's lease is still valid by the holder's own
    /// monotonic clock (end minus margin); `mark` is the highest mark that
    /// holding ever persisted, so nothing it issued is above `mark`.
    ///
    /// An implementation grants it, in one atomic step, only when:
    /// - the claim was made in an **earlier epoch** than the current one (a
    ///   lease lost within one epoch is lost for good);
    /// - the current epoch shows the worker **free or held by this very
    ///   claim** (its token), or by an earlier try of this same
    ///   registration, never by another live holding. Every try of one
    ///   registration asks with the same new token, derived from the old
    ///   one: a try whose answer was lost (a timeout after the store
    ///   committed it) must not read to the next try as another node's
    ///   lease;
    /// - the worker's stored mark is **at or below `mark`** (above it, some
    ///   other holding wrote it after this one: its IDs may be above this
    ///   generator's).
    ///
    /// It then holds the worker in the current epoch for `node` (a new token
    /// and lease, measured from before the request, as a claim's), raises the
    /// stored mark to at least `mark`, and returns the new claim, whose
    /// `stored_mark` is `mark` as stored (rounded up). The registry's
    /// hold on claims does not apply to it: the hold keeps other nodes off the
    /// workers that a live holder may still register again, and this is that
    /// holder.
    ///
    /// # Errors
    /// [`RegistryError::LeaseLost`](crate::RegistryError::LeaseLost) when one
    /// of the conditions fails (the holder then fences and claims anew, after
    /// the hold); [`RegistryError::Unsupported`](crate::RegistryError::Unsupported),
    /// the default, for registries without epochs; the backend's timeout and
    /// failure errors otherwise.
    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> Result<Claim> {
        let _ = (node, claim, mark);
        Err(crate::RegistryError::Unsupported {
            registry: self.kind(),
            operation: "registering a claim again in a new epoch",
            reason: None,
        })
    }

    /// Durably raises the worker's high-water mark to `mark` (never lowers it)
    /// and records `reported` as the node's last reported time.
    async fn persist_mark(&self, claim: &Claim, mark: Timestamp, reported: Timestamp)
    -> Result<()>;

    /// Records a clean stop: this holding has stopped issuing for good, and
    /// none of its IDs is later than `high` (the generator's
    /// [`Snowflake::seal`](idmint_core::Snowflake::seal)). The worker's stored
    /// mark becomes `high` (rounded up as every mark), in place of the mark
    /// persisted a window ahead, so the next holder (this node restarted, or
    /// another node taking the released ID) starts at once instead of
    /// waiting for its clock to pass that mark. `reported` is recorded as by
    /// [`WorkerRegistry::persist_mark`].
    ///
    /// The keeper calls it once, after sealing the generator and before
    /// [`WorkerRegistry::release`]. Why it is safe to lower the mark then:
    /// - **Only the holder, only once it stopped.** It is fenced like
    ///   `persist_mark` (the lease or the token), so a node that lost the ID
    ///   can't lower a new holder's mark; and the generator is sealed first,
    ///   so no ID past `high` can come out after it.
    /// - **Unambiguous.** It is one atomic write (a file replaced by rename,
    ///   one statement, one transaction or script). A crash before or during
    ///   it leaves the window-ahead mark, which is what a crash must leave.
    /// - **Any later persist raises it again**: a persist of this holding's
    ///   that was still in flight can only put a higher mark back (the wait
    ///   of a crash, never too little), and the next holder's first persist
    ///   is above `high`.
    /// - Every earlier holding's IDs are below this holding's start, and
    ///   `high` is at or above it, so `high` covers them too.
    ///
    /// The default persists `high` as a mark, which never lowers the stored
    /// one: the next holder waits for the window-ahead mark, as after a
    /// crash. It serves registries whose worker IDs are never taken again
    /// (the disposable modes) and those that keep the mark elsewhere too
    /// (ZooKeeper's `forever` mode and its local cache). A registry that
    /// wraps another must forward this call, or every clean stop through it
    /// costs the next holder the window.
    ///
    /// # Errors
    /// Those of [`WorkerRegistry::persist_mark`]; the stored mark then stays.
    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.persist_mark(claim, high, reported).await
    }

    /// The last reported times of live peers (excluding this claim's worker):
    /// all of them, or on a large fleet a sample of at least 64 (etcd reads a
    /// sample so that a start does not cost O(N)). The keeper compares its
    /// clock with their median.
    ///
    /// Each report carries its age ([`PeerReport::age`]) where the backend
    /// can measure it on the coordinator's clock within the same read (one
    /// statement, script or transaction: no call per peer), or the
    /// revisions of its write and of the read ([`PeerReport::revision`]).
    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>>;

    /// Gives the worker ID back. The stored mark stays.
    async fn release(&self, claim: &Claim) -> Result<()>;

    /// The fleet as the registry sees it: every live holding of a worker ID,
    /// and the ones that ended less than [`FLEET_RECENT`] ago where the
    /// registry still remembers them (`live: false`), sorted by worker ID. For status pages and operators; nothing decides on it.
    ///
    /// - **Read-only**: it never changes what the registry holds (no claim,
    ///   renewal or clean-up), so any number of nodes may call it.
    /// - **Bounded** like every call: it gives up with
    ///   [`RegistryError::Timeout`](crate::RegistryError::Timeout) after the
    ///   registry's timeout, however many rows it reads.
    /// - **One moment**: rows are read together where the backend can (one
    ///   statement, one transaction, one script); otherwise one after another
    ///   within the timeout.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Unsupported`](crate::RegistryError::Unsupported), the
    /// default, for registries that can't list; the backend's timeout and
    /// failure errors otherwise.
    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        Err(crate::RegistryError::Unsupported {
            registry: self.kind(),
            operation: "listing the fleet",
            reason: None,
        })
    }
}

/// The range check of [`WorkerRegistry::claim`]: a layout with no worker bits
/// has `range` 1; 0 is a caller's mistake, named the same way by every registry.
pub(crate) fn check_range(registry: &'static str, range: u32) -> Result<()> {
    if range == 0 {
        return Err(crate::RegistryError::Config {
            registry,
            message: "worker range 0..0 has no worker IDs to claim".to_owned(),
        });
    }
    Ok(())
}

/// The range check of [`WorkerRegistry::claim_worker`]: `worker` must lie in
/// `0..range` (`range` as [`GeneratorSettings::range`](crate::GeneratorSettings::range)
/// gives it). Public so a config checker refuses a configured worker ID
/// with the message a claim would give, before any I/O.
///
/// # Errors
/// [`RegistryError::Config`](crate::RegistryError::Config) naming the worker
/// and the range.
pub fn check_given_worker(registry: &'static str, worker: u32, range: u32) -> Result<()> {
    if worker >= range {
        return Err(crate::RegistryError::Config {
            registry,
            message: format!("worker {worker} is out of range 0..{range} for this layout"),
        });
    }
    Ok(())
}
