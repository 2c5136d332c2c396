// Size: about 1,870 lines before the tests, some 370 of them docs: one backend
// with one protocol. Each step is one transaction whose compares are the
// fence; they read best beside each other and beside the module docs that
// justify them, so the file is kept whole.
//! The `etcd` worker registry: worker IDs held by etcd leases, claimed and
//! fenced by transactions, with high-water marks that outlive their holders.
//!
//! # Why etcd
//!
//! etcd is a linearizable store (Raft): a transaction that committed is seen by
//! every later read and transaction, across a leader change, and a majority of
//! members must agree before anything commits, so a failover never forgets a
//! claim or a mark the way an asynchronously replicated store can. Leases expire
//! by the *server's* clock, on the leader, and deleting a lease deletes every key
//! attached to it in one step; no holder's clock decides who holds a worker ID.
//!
//! # Keys
//!
//! Under a prefix (default `/idmint/default/`, or `/idmint/<cluster>/` with
//! [`EtcdConfig::with_cluster`]):
//! - `workers/<id>`: the holding. Its value names the holder (host, address,
//!   port, lease); it is attached to the holder's lease, so it disappears when
//!   the lease expires or is revoked.
//! - `marks/<id>`: the worker's high-water mark in Unix milliseconds (rounded up,
//!   so it never understates what was promised). It has no lease: it outlives
//!   every holder.
//! - `reported/<id>`: the holder's last reported time in Unix milliseconds,
//!   attached to the lease, so dead peers vanish from [`WorkerRegistry::peers`]
//!   and a new holder never inherits an old holder's report.
//! - `full`: a hint, never a fence: the last claim that found every worker ID
//!   of its range held wrote when, so that a crowd waiting for a full space
//!   counts the held keys once a second between them instead of once a try
//!   each.
//!
//! # Transactions, and why each is safe
//!
//! - **claim**: look for free IDs (32 random `workers/` keys and the `full`
//!   note in one read-only transaction; when none of those is free and no
//!   note from the last second says the space is full, a count of the held
//!   keys, and when that leaves room, every held key, keys only), grant a
//!   lease, then for up to
//!   4 of the free IDs in random order, and looking again after that:
//!   `if create_revision(workers/<id>) == 0 then put workers/<id> (lease), get marks/<id>`.
//!   A create revision of 0 means the key does not exist; etcd applies
//!   transactions one at a time, so of all concurrent claimers of one ID exactly
//!   one finds it absent and creates it, and the others fail the compare. The
//!   mark is read in the same transaction, after every transaction of the
//!   previous holder (whose key had to be gone for the compare to pass), so it is
//!   the highest mark any earlier holder persisted. The claim's token is the
//!   lease ID and the key's create revision: both assigned by etcd and never
//!   reused for another holding.
//! - **claim a given ID** ([`WorkerRegistry::claim_worker`], the collision
//!   check of the fixed registries): the same transaction on that one ID, with
//!   an `else` branch that reads `workers/<id>` to name the holder.
//! - **renew**: a `LeaseKeepAlive` on the claim's lease. A lease that expired or
//!   was revoked answers with a TTL of 0 and is [`RegistryError::LeaseLost`];
//!   once expired, a lease never comes back, so a renewal can't resurrect a
//!   holding another node has taken since.
//! - **persist mark**: read `marks/<id>` (value and mod revision), then
//!   `if lease(workers/<id>) == ours and create_revision(workers/<id>) == ours
//!   and mod_revision(marks/<id>) == read then put marks/<id> (only when
//!   higher), put reported/<id> (lease)`, else read `workers/<id>` to tell a lost
//!   lease from a concurrent write (retried). A node whose lease is gone fails
//!   the first two compares, so it can never raise the mark a new holder started
//!   from; the mod-revision compare makes read-check-write one atomic step, so
//!   the mark never goes down.
//! - **clean stop** ([`WorkerRegistry::record_clean_stop`]): `if
//!   lease(workers/<id>) == ours and create_revision(workers/<id>) == ours
//!   then put marks/<id> (the last tick issued), put reported/<id> (lease)`:
//!   fenced as a persist, but the mark is set, not raised. A persist of ours
//!   still in flight compares the mark's old mod revision and fails.
//! - **peers**: a sample, so that a start costs O(1) however large the
//!   fleet: one read-only transaction of point reads of 64 random workers'
//!   `reported/` keys (in the last claim's range), and when fewer than 16 of
//!   those exist (a sparse space), one that reads at most 64 `reported/`
//!   keys from a random point of the prefix, wrapping around (small there;
//!   etcd walks its index over the whole prefix for it).
//! - **fleet** ([`WorkerRegistry::fleet`]): one read-only transaction gets the
//!   `workers/`, `reported/` and `marks/` prefixes at one revision; then each
//!   holding's lease is asked its time to live. Only live holdings are listed:
//!   etcd deletes a holding with its lease, so it remembers no recent ones.
//! - **release**: `LeaseRevoke`, which deletes `workers/<id>` and `reported/<id>`
//!   at once and leaves `marks/<id>`. Revoking acts on our own lease only, so a
//!   stale node can't release a new holder's ID.
//!
//! # Limits
//!
//! - **Lease TTLs are whole seconds**, and etcd raises short ones to its minimum
//!   (1.5 × the election timeout, 2 s with the defaults). The granted TTL is what
//!   [`Lease::ttl`] reports.
//! - **A leader change or an etcd restart extends leases**: etcd gives every
//!   lease a full TTL again when a new leader takes over. A holder is never cut
//!   short by this; an ID is freed later than its TTL says, never earlier.
//! - **The server's clock rate matters**: a leader whose clock runs fast expires
//!   leases early, before the holder's monotonic `valid_until`; the keeper's
//!   safety margin covers small rate differences, not clock jumps on the leader.
//! - **No authentication or TLS** is configured here: the endpoints are plain
//!   `http://` URLs.
//! - **A nearly full space costs a scan**: when none of the 32 IDs a claim
//!   samples is free (a space about nine tenths held or more), it counts the
//!   held `workers/` keys (etcd walks its index: about 3 ms for 10,000 here),
//!   and reads them all, keys only, when the count leaves room. With
//!   millions of held IDs that read is large. A full space costs a crowd of
//!   waiting claims one count a second between them (the `full` note).
//!
//! # References
//! - etcd API guarantees: <https://etcd.io/docs/v3.4/learning/api_guarantees/>
//! - etcd transactions and leases: <https://etcd.io/docs/v3.4/learning/api/>

pub mod topology;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, LeaseGrantOptions,
    LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use jiff::Timestamp;

use crate::error::{RegistryError, Result};
use crate::registry::{
    Claim, FleetMember, Lease, NodeIdentity, PeerReport, ReportRevision, WorkerRegistry,
    check_given_worker, check_range,
};
use crate::util::{bounded, ceil_ms, check_timeout, distinct_below, random_u64, sample_free};

/// The registry kind, as in config and in errors.
const KIND: &str = "etcd";

/// How many times a mark write that lost a race with another write of the same
/// mark key is tried again (each within the call's timeout).
const PERSIST_ATTEMPTS: u32 = 16;

/// How many random worker IDs a claim looks at in one read before it reads
/// them all (see [`EtcdRegistry::free_workers`]). With a fifth of the space
/// free, all 32 are held once in 1,300 looks.
const CLAIM_SAMPLE: u32 = 32;

/// How many free workers a claim tries (one transaction each) before it looks
/// again: after that many losses to other claimers, its view is stale.
const CLAIM_TRIES: usize = 4;

/// How long a `full` note spares a waiting claim its count (see
/// [`EtcdRegistry::free_workers`]): a worker freed just after a note is
/// found this much later at most, by the first look after it.
const FULL_NOTE_FRESH: Duration = Duration::from_secs(1);

/// The `full` note: the last look that found all of a range's IDs held.
/// Its value is `range=<ids> in_use=<held> at=<unix ms>`; `at` is the
/// writer's clock, so a note is fresh only within [`FULL_NOTE_FRESH`] of
/// the reader's either way (a writer whose clock runs ahead makes notes
/// that are never fresh, and costs counts, not claims).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FullNote {
    range: u32,
    in_use: u64,
    at_ms: i64,
}

impl FullNote {
    fn parse(raw: &[u8]) -> Option<FullNote> {
        let text = std::str::from_utf8(raw).ok()?;
        let mut fields = text.split(' ');
        let mut field = |name: &str| fields.next()?.strip_prefix(name)?.strip_prefix('=');
        Some(FullNote {
            range: field("range")?.parse().ok()?,
            in_use: field("in_use")?.parse().ok()?,
            at_ms: field("at")?.parse().ok()?,
        })
    }

    fn is_fresh(&self) -> bool {
        self.at_ms.abs_diff(unix_ms()) < FULL_NOTE_FRESH.as_millis() as u64
    }
}

impl fmt::Display for FullNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "range={} in_use={} at={}",
            self.range, self.in_use, self.at_ms
        )
    }
}

/// The wall clock in Unix milliseconds (for the `full` note only: no
/// claim's safety rests on it).
fn unix_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

/// How many peers' reports a start reads at most (a sample when the fleet is
/// larger): enough for the median the clock check takes.
const PEER_SAMPLE: u32 = 64;

/// With more than one endpoint, how long a call waits on one member before
/// it fails (and the next call goes to the next member), when the call
/// timeout is longer. A write reaching a member just as the leader dies
/// can wait there for etcd's own request timeout (5 s and more) though a
/// new leader was elected within a second or two: seen as a node's 2 s
/// persist timing out on a live member, and a 1.9 s gap in its IDs. A
/// healthy member answers a write in milliseconds.
///
/// A member that times out is not always away: on an overloaded cluster
/// every member may take longer, and a one-second bound then fails every
/// call that the call timeout would have let through (seen on a loaded CI
/// machine: live members answering in 1 to 2 s for 6 s, and a node
/// stopping at its mark). So once every member has timed a call out,
/// calls get the whole call timeout until one answers
/// ([`EtcdRegistry::bound`]).
///
/// Every member, not as many calls in a row as there are members: calls
/// made at once on one registry (the nodes of a process sharing it, a
/// node's renewal beside its mark) all time out together on the one
/// follower that forwards them to a dead leader. Counted in a row, that
/// one member's timeouts switched every call to the long bound for the
/// election, and a write sent just before the new leader took over waited
/// out 2 s instead of 1: measured with 1,000 nodes on 64 shared registries,
/// a node's longest gap in IDs was 1.87 s in one run of 7, for an election
/// of under 2 s and 2.75 s of room in its mark.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(1);

/// The part of the call timeout within which a call that may run twice
/// moves on to the next member at once ([`EtcdRegistry::moving_call`]):
/// short of the whole, so the keeper's bound on the call (the same length
/// by default) does not cut the last try off.
const MOVING_SHARE: f64 = 0.75;

/// Below this much of [`MOVING_SHARE`] left, a call returns its member's
/// failure rather than try the next member (the keeper tries again soon).
const MOVING_LEAST: Duration = Duration::from_millis(100);

/// Configuration of an [`EtcdRegistry`] (builder-lite: [`EtcdConfig::new`] plus
/// `with_*` setters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    prefix: Cow<'static, str>,
    lease_ttl: Duration,
    timeout: Duration,
    connect_timeout: Duration,
}

impl EtcdConfig {
    /// The key prefix used unless set: cluster `default`.
    pub const DEFAULT_PREFIX: &'static str = "/idmint/default/";
    /// The lease time to live asked for unless set.
    pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
    /// The timeout of each remote call used unless set.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
    /// The timeout of connecting used unless set.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

    /// The defaults: prefix [`Self::DEFAULT_PREFIX`], lease TTL 10 s, call
    /// timeout 2 s, connect timeout 2 s.
    pub const fn new() -> Self {
        EtcdConfig {
            prefix: Cow::Borrowed(Self::DEFAULT_PREFIX),
            lease_ttl: Self::DEFAULT_LEASE_TTL,
            timeout: Self::DEFAULT_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Keys go under `/idmint/<cluster>/`, so several idmint clusters can share
    /// one etcd.
    #[must_use]
    pub fn with_cluster(mut self, cluster: &str) -> Self {
        self.prefix = Cow::Owned(format!("/idmint/{cluster}/"));
        self
    }

    /// Keys go under exactly `prefix` (tests use a unique one each).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Cow::Owned(prefix.into());
        self
    }

    /// The lease time to live to ask for: whole seconds, at least 1 s. etcd may
    /// grant more (its minimum is 2 s with the default election timeout).
    #[must_use]
    pub const fn with_lease_ttl(mut self, lease_ttl: Duration) -> Self {
        self.lease_ttl = lease_ttl;
        self
    }

    /// How long each remote call may take before it fails with
    /// [`RegistryError::Timeout`].
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long [`EtcdRegistry::connect`] may take (connecting and a first read).
    #[must_use]
    pub const fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The lease time to live asked for.
    pub const fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The timeout of each remote call.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The timeout of connecting.
    pub const fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Checks the settings without connecting: the key prefix, the lease TTL
    /// (whole seconds, as etcd grants them) and the timeouts.
    /// [`EtcdRegistry::connect`] runs it first; a server's config check runs
    /// it before any I/O.
    ///
    /// # Errors
    /// [`RegistryError::Config`] naming the setting that can't work.
    pub fn validate(&self) -> Result<()> {
        if self.prefix.is_empty() {
            return Err(RegistryError::config(
                KIND,
                "the key prefix is empty".to_owned(),
            ));
        }
        if self.lease_ttl < Duration::from_secs(1) || self.lease_ttl.subsec_nanos() != 0 {
            return Err(RegistryError::config(
                KIND,
                format!(
                    "lease ttl {:?} is not a whole number of seconds of at least 1s",
                    self.lease_ttl
                ),
            ));
        }
        check_timeout(KIND, "timeout", self.timeout)?;
        check_timeout(KIND, "connect timeout", self.connect_timeout)?;
        Ok(())
    }
}

impl Default for EtcdConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// A [`WorkerRegistry`] on an etcd cluster (3.4 or later).
///
/// - **Exclusive** while the lease lives: claims create the worker key only if
///   it does not exist, and every later write compares the key's lease and
///   create revision with the claim's (see the module docs).
/// - **Leases** last the TTL etcd granted, from etcd receiving the request;
///   [`Lease::valid_until`] is measured from before the request was sent, so it
///   ends no later than etcd's expiry (given the clocks' rates agree).
/// - **Bounded**: every call fails with [`RegistryError::Timeout`] after
///   [`EtcdConfig::timeout`]; while etcd is unreachable calls time out (the
///   client reconnects by itself when it is back).
/// - **Thread-safe**: share it behind an `Arc`; calls are multiplexed on one
///   gRPC channel.
/// - **No hidden I/O**: only [`EtcdRegistry::connect`] and the trait's methods
///   talk to etcd, and no background task runs: the lease lives only as long as
///   someone calls [`WorkerRegistry::renew`] (the keeper does, every TTL / 3).
///
/// # Examples
///
/// ```no_run
/// use idmint_registry::etcd::{EtcdConfig, EtcdRegistry};
/// use idmint_registry::{NodeIdentity, WorkerRegistry};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = EtcdConfig::new().with_cluster("orders");
/// let registry = EtcdRegistry::connect(&["http://127.0.0.1:2379"], config).await?;
/// let node = NodeIdentity { host: "web-1".into(), address: "10.0.0.7".into(), port: 8080 };
/// let claim = registry.claim(&node, 1024).await?;
/// println!("worker {}, start above {:?}", claim.worker, claim.stored_mark);
/// registry.release(&claim).await?;
/// # Ok(())
/// # }
/// ```
pub struct EtcdRegistry {
    members: Members,
    /// Each call's bound while members answer: the call timeout, or with
    /// several endpoints at most [`MEMBER_TIMEOUT`] ([`EtcdRegistry::bound`]).
    call_bound: Duration,
    endpoints: Vec<String>,
    config: EtcdConfig,
    /// One keep-alive stream per held lease, opened at the first renewal
    /// and kept: opening one sends a keep-alive of its own (etcd-client's
    /// `lease_keep_alive` waits for its answer to learn the lease), so a
    /// stream per renewal cost etcd two messages instead of one.
    keepers: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<KeepAliveStream>>>>,
    /// The worker range of the last claim (0 before one): where
    /// [`WorkerRegistry::peers`] samples reports by point reads.
    last_range: std::sync::atomic::AtomicU32,
    /// The mark of each worker this client last persisted, as `(lease,
    /// mark in ms, the mark key's mod revision)`: the next persist's
    /// transaction compares against that revision without reading the key
    /// first (one request instead of two); a mismatch reads it again.
    marks: Mutex<HashMap<u32, KnownMark>>,
}

/// A worker's mark as this client last wrote it.
#[derive(Debug, Clone, Copy)]
struct KnownMark {
    /// The lease the write was made under.
    lease: i64,
    /// The mark, in ms (`None`: no mark key).
    ms: Option<i64>,
    /// The mark key's mod revision (0: no key).
    revision: i64,
}

/// A lease's open keep-alive stream, and whether its last round ended (a
/// round cut off by the call timeout may leave its answer in the stream,
/// where the next round would take it for its own and date the renewal too
/// late: such a stream is closed and opened again).
struct KeepAliveStream {
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
    clean: bool,
}

/// One client per member, and the member calls go to (the pinned one).
///
/// Hand-written over etcd-client's own balancing of a list of endpoints:
/// its balanced channel keeps sending calls to a member that is down and
/// fails them (`tcp connect error`; etcdv3/etcd-client issue 39, open), so
/// with one member of three down, a node's renewals and marks failed at
/// random and it stopped at its mark on a cluster that was serving. As
/// etcd's own Go client does, calls go to one member, and a call that
/// can't reach it (unavailable, timed out) moves the pin to the next.
///
/// A member left behind gets a new client (a new channel, connecting
/// lazily): a channel whose member went away and came back was seen to
/// time every call out for good, where a new one connects at once. At most
/// one new client per member every [`RENEW_EVERY`]: a busy member that
/// times calls out must not get a reconnection from every node of a large
/// fleet on every timeout.
struct Members {
    /// Shared with the tasks that build new clients.
    clients: Arc<[arc_swap::ArcSwap<Client>]>,
    endpoints: Vec<String>,
    options: ConnectOptions,
    pinned: AtomicUsize,
    /// The members whose last call timed out, a bit each (member `n` is bit
    /// `n % 64`), all cleared by a call that answered in time: every bit
    /// set means the cluster is slow, not one member away.
    timed_out: AtomicU64,
    /// When each member last got a new client, in ms since `since` (0:
    /// never).
    renewed: Box<[AtomicU64]>,
    since: Instant,
}

/// The least time between two new clients for one member.
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// Member `n`'s bit in [`Members::timed_out`].
fn member_bit(n: usize) -> u64 {
    1 << (n % 64)
}

impl Members {
    /// Whether every member's last call timed out (with more than 64
    /// members, every one of 64 bits: members share them).
    fn all_timed_out(&self) -> bool {
        let all = (0..self.clients.len().min(64)).fold(0, |bits, n| bits | member_bit(n));
        self.timed_out.load(Ordering::Relaxed) & all == all
    }

    /// The pinned member's number, to hand to [`Members::noted`].
    fn pinned(&self) -> usize {
        self.pinned.load(Ordering::Relaxed)
    }

    /// The pinned member's client (cheap: clones share its channel).
    fn client(&self) -> Client {
        (*self.clients[self.pinned() % self.clients.len()].load_full()).clone()
    }

    /// Builds member `n` a new client in the background (connecting is
    /// lazy: this dials nothing), which takes the old one's place.
    fn renew_client(&self, n: usize) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let now = u64::try_from(self.since.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let last = self.renewed[n].load(Ordering::Relaxed);
        let every = u64::try_from(RENEW_EVERY.as_millis()).unwrap_or(u64::MAX);
        if (last != 0 && now.saturating_sub(last) < every)
            || self.renewed[n]
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let endpoint = self.endpoints[n].clone();
        let options = self.options.clone();
        let clients = self.clients.clone();
        runtime.spawn(async move {
            if let Ok(fresh) = Client::connect([endpoint], Some(options)).await {
                clients[n].store(Arc::new(fresh));
            }
        });
    }

    /// Moves the pin from `member` to the next one when `result` says
    /// `member` could not be reached, unless another call moved it already.
    ///
    /// With several members a timeout is one member's, not the cluster's:
    /// it comes back as [`RegistryError::Unavailable`], which the keeper
    /// tries again soon (on the next member) instead of pacing its retries
    /// by the time the call took, as it does for a coordinator whose only
    /// member is too busy to answer.
    ///
    /// It also notes which members timed out, for [`EtcdRegistry::bound`]:
    /// only an answer within [`MEMBER_TIMEOUT`] (`took`) clears them, so a
    /// slow cluster keeps the long bound.
    fn noted<T>(&self, member: usize, took: Duration, result: Result<T>) -> Result<T> {
        match &result {
            Ok(_) if took < MEMBER_TIMEOUT => self.timed_out.store(0, Ordering::Relaxed),
            Ok(_) => {}
            Err(RegistryError::Timeout { .. }) => {
                self.timed_out
                    .fetch_or(member_bit(member), Ordering::Relaxed);
            }
            Err(_) => {}
        }
        let Err(error @ (RegistryError::Timeout { .. } | RegistryError::Unavailable { .. })) =
            &result
        else {
            return result;
        };
        let next = (member + 1) % self.clients.len();
        if self
            .pinned
            .compare_exchange(member, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            tracing::debug!(from = member, to = next, %error, "etcd: moving to the next member");
            self.renew_client(member % self.clients.len());
        }
        if self.clients.len() < 2 {
            return result;
        }
        match result {
            Err(RegistryError::Timeout {
                registry,
                operation,
                after,
            }) => Err(RegistryError::Unavailable {
                registry,
                operation,
                message: format!("member {} did not answer within {after:?}", member + 1),
            }),
            other => other,
        }
    }
}

impl EtcdRegistry {
    /// The pinned member's client.
    fn client(&self) -> Client {
        self.members.client()
    }

    /// Runs `call` on the pinned member and notes how it went
    /// ([`Members::noted`]).
    async fn pinned_call<T>(&self, call: impl Future<Output = Result<T>>) -> Result<T> {
        let pinned = self.members.pinned();
        let started = Instant::now();
        let result = call.await;
        self.members.noted(pinned, started.elapsed(), result)
    }

    /// Runs `call` on the pinned member as [`EtcdRegistry::pinned_call`]
    /// does; with several members, when the member can't be reached or
    /// doesn't answer in time, at once again on the next one, while
    /// [`MOVING_SHARE`] of the call timeout lasts (each try bounded by what
    /// is left of it), at most once per member. For the calls that may run
    /// twice: a renewal, a mark or report (a compare-and-put on the mark's
    /// revision), a read, a release. Not a claim: one that timed out may
    /// have been granted, and a second try would hold another worker for a
    /// whole lease.
    ///
    /// Why at once: when the leader dies, its own clients fail at once and
    /// move to a follower, where a write forwarded to the dead leader waits
    /// out [`MEMBER_TIMEOUT`]. The keeper's pause before its next try (a
    /// quarter to three quarters of a second) came on top of that, and
    /// measured with 1,000 nodes on a 3-member cluster it was the largest
    /// part of the gap in IDs of a node whose mark ran out meanwhile.
    /// Within the share, the keeper's own bound on the call (by default the
    /// same as the call timeout) never cuts a try off, which would make it
    /// a timeout that the keeper paces by the time it took.
    async fn moving_call<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let members = self.members.clients.len();
        let budget = self.config.timeout.mul_f64(MOVING_SHARE);
        let started = Instant::now();
        let mut result = self.pinned_call(call()).await;
        for _ in 1..members {
            let Err(RegistryError::Unavailable { operation, .. }) = &result else {
                break;
            };
            let operation = *operation;
            let left = budget.saturating_sub(started.elapsed());
            if left < MOVING_LEAST {
                break;
            }
            let pinned = self.members.pinned();
            let tried = Instant::now();
            let next = match tokio::time::timeout(left, call()).await {
                Ok(r) => r,
                Err(_) => Err(RegistryError::Timeout {
                    registry: KIND,
                    operation,
                    after: left,
                }),
            };
            result = self.members.noted(pinned, tried.elapsed(), next);
        }
        result
    }

    /// The bound of the next call: [`EtcdRegistry::call_bound`], or the
    /// whole call timeout once every member timed a call out (see
    /// [`MEMBER_TIMEOUT`]).
    fn bound(&self) -> Duration {
        let members = self.members.clients.len();
        if members > 1 && self.members.all_timed_out() {
            self.config.timeout
        } else {
            self.call_bound
        }
    }

    /// A failed call: [`RegistryError::Timeout`] when the channel's deadline
    /// (the call timeout) ran out, else as [`backend`].
    fn failed(&self, operation: &'static str, e: &etcd_client::Error) -> RegistryError {
        if is_deadline(e) {
            RegistryError::Timeout {
                registry: KIND,
                operation,
                after: self.config.timeout,
            }
        } else {
            backend(operation, e)
        }
    }
}

impl fmt::Debug for EtcdRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Endpoints and config only: the client may carry an auth token.
        f.debug_struct("EtcdRegistry")
            .field("endpoints", &self.endpoints)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EtcdRegistry {
    /// Connects to the etcd cluster at `endpoints` (`http://host:port` each) and
    /// checks it answers a read, all within [`EtcdConfig::connect_timeout`].
    ///
    /// # Errors
    /// - [`RegistryError::Config`] for no endpoints, a malformed endpoint or a
    ///   bad configuration.
    /// - [`RegistryError::Timeout`] when etcd does not answer within the connect
    ///   timeout (nothing listening is usually this: the client keeps retrying).
    /// - [`RegistryError::Backend`] when etcd refuses or fails.
    pub async fn connect<E: AsRef<str>>(endpoints: &[E], config: EtcdConfig) -> Result<Self> {
        config.validate()?;
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
        if endpoints.is_empty() {
            return Err(RegistryError::config(KIND, "no endpoints given".to_owned()));
        }
        let call_bound = if endpoints.len() > 1 {
            config.timeout.min(MEMBER_TIMEOUT)
        } else {
            config.timeout
        };
        // The channel's deadline is the whole call timeout; each call is
        // bounded by `bound()` on top, which is shorter while members answer.
        let options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.timeout);
        let after = config.connect_timeout;
        let mut clients = Vec::with_capacity(endpoints.len());
        for endpoint in &endpoints {
            // Lazy: connecting builds the channel, the first call dials.
            let client = Client::connect([endpoint], Some(options.clone()))
                .await
                .map_err(|e| match e {
                    etcd_client::Error::InvalidUri(_) | etcd_client::Error::InvalidArgs(_) => {
                        RegistryError::config(
                            KIND,
                            format!("invalid etcd endpoint {endpoint:?}: {e}"),
                        )
                    }
                    e => connect_error(&e, after),
                })?;
            clients.push(client);
        }
        // The first member that answers a read is pinned; one that is
        // down or between leaders gives way to the next. All within the
        // connect timeout.
        let deadline = tokio::time::Instant::now() + after;
        let mut first = None;
        let mut last_error = None;
        let mut failed = Vec::new();
        // Each member gets its share of the timeout (the last one what is
        // left), so one that never answers (cut off) leaves time for the rest.
        let share = after / u32::try_from(clients.len()).unwrap_or(u32::MAX);
        for (n, client) in clients.iter().enumerate() {
            let mut client = client.clone();
            let mut left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if n + 1 < clients.len() {
                left = left.min(share);
            }
            let read = client.get(
                config.prefix.as_bytes(),
                Some(GetOptions::new().with_count_only()),
            );
            match tokio::time::timeout(left, read).await {
                Ok(Ok(_)) => {
                    first = Some(n);
                    break;
                }
                Ok(Err(e)) => {
                    let error = connect_error(&e, after);
                    if !error.is_transient() {
                        return Err(error);
                    }
                    last_error = Some(error);
                    failed.push(n);
                }
                Err(_) => {
                    last_error = Some(RegistryError::Timeout {
                        registry: KIND,
                        operation: "connect",
                        after,
                    });
                    failed.push(n);
                }
            }
        }
        let Some(first) = first else {
            return Err(last_error.unwrap_or(RegistryError::Timeout {
                registry: KIND,
                operation: "connect",
                after,
            }));
        };
        // A channel whose first dial failed is not trusted to dial again.
        for n in failed {
            if let Ok(fresh) = Client::connect([&endpoints[n]], Some(options.clone())).await {
                clients[n] = fresh;
            }
        }
        let members = Members {
            clients: clients
                .into_iter()
                .map(arc_swap::ArcSwap::from_pointee)
                .collect(),
            endpoints: endpoints.clone(),
            options,
            pinned: AtomicUsize::new(first),
            timed_out: AtomicU64::new(0),
            renewed: endpoints.iter().map(|_| AtomicU64::new(0)).collect(),
            since: Instant::now(),
        };
        Ok(EtcdRegistry {
            members,
            call_bound,
            endpoints,
            config,
            keepers: Mutex::new(HashMap::new()),
            last_range: std::sync::atomic::AtomicU32::new(0),
            marks: Mutex::new(HashMap::new()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    /// The high-water mark stored for `worker`, whoever holds it (for listings
    /// and checks; a claim returns it too).
    ///
    /// # Errors
    /// [`RegistryError::Timeout`] or [`RegistryError::Backend`] when etcd fails.
    pub async fn stored_mark(&self, worker: u32) -> Result<Option<Timestamp>> {
        let mut client = self.client();
        let key = self.key("marks/", worker);
        let resp = self.call("read mark", client.get(key, None)).await?;
        resp.kvs()
            .first()
            .map(|kv| parse_ms("read mark", worker, kv.value()))
            .transpose()
    }

    fn full_note_key(&self) -> String {
        format!("{}full", self.config.prefix)
    }

    fn key(&self, kind: &str, worker: u32) -> String {
        format!("{}{kind}{worker}", self.config.prefix)
    }

    /// Runs one etcd call under the configured timeout, mapping its errors.
    async fn call<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        let after = self.bound();
        bounded(KIND, operation, after, async {
            fut.await.map_err(|e| {
                // The client's own deadline (the same timeout, set on the
                // channel) ran out first: a timeout, which the keeper backs
                // off from longer than from a broken connection.
                if is_deadline(&e) {
                    RegistryError::Timeout {
                        registry: KIND,
                        operation,
                        after,
                    }
                } else {
                    backend(operation, &e)
                }
            })
        })
        .await
    }

    /// Up to [`CLAIM_TRIES`] worker IDs below `range` that were free a moment
    /// ago, in random order, or [`RegistryError::Exhausted`] when all are held.
    ///
    /// A claim must not cost O(N) when N nodes start at once: that crowd then
    /// costs etcd O(N²) (at 1,000 nodes, claims took 1.8 s at p99). So it first
    /// looks at [`CLAIM_SAMPLE`] random IDs in one read-only transaction,
    /// O(1) however large the fleet. Only when none of those is free (a space
    /// about nine tenths held or more) does it count the held keys, which
    /// etcd answers from its index alone, and read them (keys only) when the
    /// count leaves room.
    ///
    /// A crowd waiting for a full space (a quarter of 10,000 nodes killed
    /// and replaced) would still count 10,000 keys a try each, more than
    /// etcd can serve beside the running fleet. So a look that finds the
    /// space full says so in the `full` note, and for [`FULL_NOTE_FRESH`]
    /// the crowd's looks take the note's word after their sample, one count
    /// for them all. A worker freed meanwhile is found by a sample, or by
    /// the next count.
    async fn free_workers(&self, range: u32) -> Result<Vec<u32>> {
        if range <= 2 * CLAIM_SAMPLE {
            let held = self.held_workers(range).await?;
            return self.free_of(range, &held);
        }
        let sample = distinct_below(range, CLAIM_SAMPLE);
        let note = self.full_note_key();
        let txn = Txn::new().and_then(
            sample
                .iter()
                .map(|w| {
                    TxnOp::get(
                        self.key("workers/", *w),
                        Some(GetOptions::new().with_keys_only()),
                    )
                })
                .chain([TxnOp::get(note.as_str(), None)])
                .collect::<Vec<_>>(),
        );
        let mut client = self.client();
        let resp = self.call("claim", client.txn(txn)).await?;
        let answers = resp.op_responses();
        let mut free = Vec::new();
        for (w, op) in sample.iter().zip(&answers) {
            if let TxnOpResponse::Get(get) = op
                && get.kvs().is_empty()
                && free.len() < CLAIM_TRIES
            {
                free.push(*w);
            }
        }
        if !free.is_empty() {
            return Ok(free);
        }
        let noted = match answers.last() {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().and_then(|kv| {
                FullNote::parse(kv.value()).filter(|n| n.range == range && n.is_fresh())
            }),
            _ => None,
        };
        if let Some(noted) = noted {
            return Err(self.exhausted(noted.in_use, range));
        }
        let mut client = self.client();
        let prefix = format!("{}workers/", self.config.prefix);
        let counted = self
            .call(
                "claim",
                client.get(
                    prefix.as_bytes(),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                ),
            )
            .await?
            .count();
        let counted = u64::try_from(counted).unwrap_or(0);
        // Exactly `range` held keys is a full space, unless keys of IDs
        // outside it share the prefix (a second layout's nodes in the same
        // cluster) while as many inside it are free: then samples find those.
        // More than `range` can only be such keys: read them to tell.
        if counted == u64::from(range) {
            self.note_full(range, counted).await;
            return Err(self.exhausted(counted, range));
        }
        let held = self.held_workers(range).await?;
        if held.len() as u64 >= u64::from(range) {
            self.note_full(range, held.len() as u64).await;
        }
        self.free_of(range, &held)
    }

    /// Up to [`CLAIM_TRIES`] random IDs below `range` not in `held`, or
    /// [`RegistryError::Exhausted`].
    fn free_of(&self, range: u32, held: &HashSet<u32>) -> Result<Vec<u32>> {
        if held.len() as u64 >= u64::from(range) {
            return Err(self.exhausted(held.len() as u64, range));
        }
        Ok(sample_free(range, held, CLAIM_TRIES))
    }

    fn exhausted(&self, in_use: u64, range: u32) -> RegistryError {
        RegistryError::Exhausted {
            registry: KIND,
            in_use,
            range: u64::from(range),
        }
    }

    /// Writes the `full` note: every ID below `range` was held just now. A
    /// note that can't be written costs the crowd counts, not correctness,
    /// so a failure is only logged.
    async fn note_full(&self, range: u32, in_use: u64) {
        let value = FullNote {
            range,
            in_use,
            at_ms: unix_ms(),
        }
        .to_string();
        let mut client = self.client();
        if let Err(e) = self
            .call("claim", client.put(self.full_note_key(), value, None))
            .await
        {
            tracing::debug!(error = %e, "could not note a full etcd worker space");
        }
    }

    /// The worker IDs below `range` whose holding key exists now.
    async fn held_workers(&self, range: u32) -> Result<HashSet<u32>> {
        let mut client = self.client();
        let prefix = format!("{}workers/", self.config.prefix);
        let resp = self
            .call(
                "claim",
                client.get(
                    prefix.as_bytes(),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ),
            )
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| worker_of(kv, prefix.as_bytes()))
            .filter(|w| *w < range)
            .collect())
    }

    /// Tries to create the holding key of each worker in `free` (found free
    /// just before), and looks for free ones again while any are left;
    /// returns the worker, the key's create revision and the stored mark.
    ///
    /// Every failed try means another node took that worker since the look,
    /// so the crowd makes progress and the looking ends, at the latest when
    /// [`EtcdRegistry::free_workers`] finds the space full.
    async fn claim_with_lease(
        &self,
        node: &NodeIdentity,
        range: u32,
        lease_id: i64,
        mut free: Vec<u32>,
    ) -> Result<(u32, i64, Option<Timestamp>)> {
        loop {
            for worker in free {
                match self.take(node, worker, lease_id).await? {
                    Ok((revision, mark)) => return Ok((worker, revision, mark)),
                    // Taken since the look: try the next.
                    Err(_holder) => {}
                }
            }
            free = self.free_workers(range).await?;
        }
    }

    /// One claim transaction on `worker`:
    /// `if create_revision(workers/<id>) == 0 then put workers/<id> (lease), get marks/<id>
    /// else get workers/<id>`. Returns the key's create revision and the stored
    /// mark, or the holding key's value when someone holds the worker.
    async fn take(
        &self,
        node: &NodeIdentity,
        worker: u32,
        lease_id: i64,
    ) -> Result<std::result::Result<(i64, Option<Timestamp>), Option<Vec<u8>>>> {
        let value = format!(
            "host={} address={} port={} lease={lease_id:x}",
            node.host, node.address, node.port
        );
        let key = self.key("workers/", worker);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.as_str(),
                    value.as_str(),
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
                TxnOp::get(self.key("marks/", worker), None),
            ])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let mut client = self.client();
        let resp = self.call("claim", client.txn(txn)).await?;
        let got = resp
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Get(get) => Some(get),
                _ => None,
            })
            .and_then(|get| get.kvs().first().map(|kv| kv.value().to_vec()));
        if !resp.succeeded() {
            return Ok(Err(got));
        }
        // The key was created by this transaction: its create revision is the
        // transaction's revision.
        let revision = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| backend_msg("claim", "transaction answer has no header".to_owned()))?;
        let mark = got.map(|raw| parse_ms("claim", worker, &raw)).transpose()?;
        Ok(Ok((revision, mark)))
    }

    /// Grants a lease, runs `claim` under it, and revokes the lease again when
    /// the claim fails (nothing is attached to it then).
    async fn claim_under_new_lease<F, Fut>(&self, claim: F) -> Result<Claim>
    where
        F: FnOnce(i64) -> Fut,
        Fut: Future<Output = Result<(u32, i64, Option<Timestamp>)>>,
    {
        let ttl_secs = i64::try_from(self.config.lease_ttl.as_secs()).unwrap_or(i64::MAX);
        let mut client = self.client();
        // Before the grant request: the lease is valid until at most this plus
        // the TTL, whenever etcd started counting.
        let before = Instant::now();
        // The lease ID is chosen here, not by etcd: a grant whose answer is
        // cut off by the call timeout (or whose claim is dropped) may still
        // be applied, and with its ID known it is revoked rather than left
        // holding nothing for a whole TTL (`RevokeOnDrop`). Random over 63
        // bits: two claimers meet with a chance of about N / 2^63, and then
        // etcd refuses the second grant, which fails this try only.
        let lease_id = i64::try_from(random_u64() >> 1).unwrap_or(1).max(1);
        let mut orphan = RevokeOnDrop {
            client: Some(self.client()),
            lease_id,
            timeout: self.config.timeout,
        };
        // On any error the grant may have been applied (a timeout, a broken
        // connection): the drop revokes it; a revoke of nothing is harmless.
        let grant = self
            .call(
                "claim",
                client.lease_grant(ttl_secs, Some(LeaseGrantOptions::new().with_id(lease_id))),
            )
            .await?;
        if grant.ttl() <= 0 {
            return Err(backend_msg(
                "claim",
                format!(
                    "etcd granted lease {:x} a ttl of {}s",
                    grant.id(),
                    grant.ttl()
                ),
            ));
        }
        let lease_id = grant.id();
        orphan.lease_id = lease_id;
        let ttl = Duration::from_secs(grant.ttl().unsigned_abs());
        // If the caller gives up on this claim midway (its timeout drops this
        // future), the lease must not live on holding a worker nobody uses
        // for a whole TTL: under an overloaded etcd, such orphans filled the
        // space of 10,000 nodes faster than their leases ran out.
        match claim(lease_id).await {
            Ok((worker, create_revision, stored_mark)) => {
                orphan.client = None;
                Ok(Claim {
                    worker,
                    stored_mark,
                    lease: Some(Lease {
                        ttl,
                        valid_until: before + ttl,
                    }),
                    token: format!("{lease_id:x}/{create_revision}"),
                })
            }
            Err(e) => {
                match self.revoke("claim", lease_id).await {
                    Ok(_) => orphan.client = None,
                    // Left armed: the drop tries again in the background,
                    // with more time than a call timeout that just ran out.
                    Err(revoke_err) => {
                        tracing::warn!(lease = lease_id, error = %revoke_err, "could not revoke an unused etcd lease yet");
                    }
                }
                Err(e)
            }
        }
    }

    /// Revokes a lease, ignoring a lease that is already gone.
    async fn revoke(&self, operation: &'static str, lease_id: i64) -> Result<bool> {
        let mut client = self.client();
        bounded(KIND, operation, self.bound(), async {
            match client.lease_revoke(lease_id).await {
                Ok(_) => Ok(true),
                Err(e) if is_lease_not_found(&e) => Ok(false),
                Err(e) => Err(self.failed(operation, &e)),
            }
        })
        .await
    }

    fn lease_lost(&self, worker: u32, reason: String) -> RegistryError {
        RegistryError::LeaseLost {
            registry: KIND,
            worker,
            reason,
        }
    }

    /// One keep-alive round on a fresh stream: the first request refreshes the
    /// lease (the client library checks its answer), the second reports the TTL
    /// granted, measured from before it was sent.
    /// One keep-alive round on the lease's stream, opening the stream when
    /// there is none (or the last one broke). `ttl` is the lease's granted
    /// TTL: what etcd renews it to, and what a newly opened stream's own
    /// first keep-alive (whose answer etcd-client keeps) renewed it to.
    async fn keep_alive(
        &self,
        lease_id: i64,
        ttl: Duration,
    ) -> std::result::Result<Option<Lease>, KeepAlive> {
        let open = self
            .keepers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&lease_id)
            .cloned();
        if let Some(open) = open {
            let mut open = open.lock().await;
            if !open.clean {
                drop(open);
                self.forget_keeper(lease_id);
                return Box::pin(self.keep_alive(lease_id, ttl)).await;
            }
            open.clean = false;
            let before = Instant::now();
            let answer = match open.keeper.keep_alive().await {
                Ok(()) => open.stream.message().await.map_err(KeepAlive::from_error),
                Err(e) => Err(KeepAlive::from_error(e)),
            };
            open.clean = true;
            match answer {
                Ok(Some(resp)) if resp.ttl() > 0 => {
                    let ttl = Duration::from_secs(resp.ttl().unsigned_abs());
                    return Ok(Some(Lease {
                        ttl,
                        valid_until: before + ttl,
                    }));
                }
                Ok(Some(_)) | Err(KeepAlive::Gone) => {
                    self.forget_lease(lease_id);
                    return Err(KeepAlive::Gone);
                }
                // A broken stream: open a new one below.
                Ok(None) | Err(KeepAlive::Failed(_)) => self.forget_keeper(lease_id),
            }
        }
        let mut client = self.client();
        // Before the request the stream opens with: the lease runs at most
        // `ttl` from whenever etcd renewed it, which is after this.
        let before = Instant::now();
        let (keeper, stream) = client
            .lease_keep_alive(lease_id)
            .await
            .map_err(KeepAlive::from_error)?;
        let opened = KeepAliveStream {
            keeper,
            stream,
            clean: true,
        };
        self.keepers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(lease_id, Arc::new(tokio::sync::Mutex::new(opened)));
        Ok(Some(Lease {
            ttl,
            valid_until: before + ttl,
        }))
    }

    /// Closes the lease's keep-alive stream, if open.
    fn forget_keeper(&self, lease_id: i64) {
        self.keepers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&lease_id);
    }

    /// Drops all this client keeps about a lease that ended.
    fn forget_lease(&self, lease_id: i64) {
        self.forget_keeper(lease_id);
        self.marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, known| known.lease != lease_id);
    }
}

/// Revokes a lease when dropped armed: the claim that asked for it failed
/// or was cancelled before it could hand the lease on or revoke it itself
/// (its grant may have been applied even when no answer came).
/// The revoke runs on a task of its own (a drop can't wait), bounded by the
/// call timeout; if it fails too, the lease runs out by itself.
struct RevokeOnDrop {
    /// `Some` while armed.
    client: Option<Client>,
    lease_id: i64,
    timeout: Duration,
}

impl Drop for RevokeOnDrop {
    fn drop(&mut self) {
        let Some(mut client) = self.client.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // A call timeout short enough to cut the grant off may cut the
        // revoke off too: this one gets at least a second or two.
        let lease_id = self.lease_id;
        let timeout = self.timeout.max(Duration::from_secs(2));
        runtime.spawn(async move {
            // A grant still on its way through etcd may land after a first
            // revoke found nothing, and a revoke may time out: up to three
            // tries, half a timeout apart, until one revokes.
            for attempt in 0..3 {
                let revoked = tokio::time::timeout(timeout, client.lease_revoke(lease_id)).await;
                tracing::debug!(
                    lease = lease_id,
                    ?revoked,
                    "revoking the lease of a failed or cancelled etcd claim"
                );
                if matches!(revoked, Ok(Ok(_))) || attempt == 2 {
                    break;
                }
                tokio::time::sleep(timeout / 2).await;
            }
        });
    }
}

/// How a keep-alive round failed.
enum KeepAlive {
    /// The lease no longer exists.
    Gone,
    /// Anything else.
    Failed(etcd_client::Error),
}

impl KeepAlive {
    fn from_error(e: etcd_client::Error) -> KeepAlive {
        if is_lease_not_found(&e) {
            KeepAlive::Gone
        } else {
            KeepAlive::Failed(e)
        }
    }
}

/// The registry's calls, on the pinned member ([`Members`]); the
/// [`WorkerRegistry`] impl below moves the pin when one can't reach it.
impl EtcdRegistry {
    async fn claim_on_pinned(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        check_range(KIND, range)?;
        self.last_range
            .store(range, std::sync::atomic::Ordering::Relaxed);
        // Look first, grant after: a start waiting for a full space to free
        // up (a mass restart) then costs etcd reads a try, not a lease
        // granted and revoked (two raft proposals).
        let free = self.free_workers(range).await?;
        self.claim_under_new_lease(|lease_id| self.claim_with_lease(node, range, lease_id, free))
            .await
    }

    async fn claim_worker_on_pinned(
        &self,
        node: &NodeIdentity,
        worker: u32,
        range: u32,
    ) -> Result<Claim> {
        check_given_worker(KIND, worker, range)?;
        self.claim_under_new_lease(|lease_id| async move {
            match self.take(node, worker, lease_id).await? {
                Ok((revision, mark)) => Ok((worker, revision, mark)),
                Err(holder) => Err(RegistryError::WorkerTaken {
                    registry: KIND,
                    worker,
                    node: node.to_string(),
                    holder: holder.map_or_else(
                        || "another node (its lease ended just now; try again)".to_owned(),
                        |raw| describe_holder(&raw),
                    ),
                    origin: None,
                }),
            }
        })
        .await
    }

    async fn renew_on_pinned(&self, claim: &Claim) -> Result<Option<Lease>> {
        let (lease_id, _) = parse_token(claim)?;
        let ttl = claim.lease.map_or(self.config.lease_ttl, |l| l.ttl);
        bounded(KIND, "renew", self.bound(), async {
            match self.keep_alive(lease_id, ttl).await {
                Ok(lease) => Ok(lease),
                Err(KeepAlive::Gone) => Err(self.lease_lost(
                    claim.worker,
                    format!("lease {lease_id:x} expired or was revoked"),
                )),
                Err(KeepAlive::Failed(e)) => Err(self.failed("renew", &e)),
            }
        })
        .await
    }

    async fn persist_mark_on_pinned(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        let (lease_id, create_revision) = parse_token(claim)?;
        let worker = claim.worker;
        let worker_key = self.key("workers/", worker);
        let mark_key = self.key("marks/", worker);
        let reported_key = self.key("reported/", worker);
        let new_ms = ceil_ms(mark);
        let attempt = async {
            let mut client = self.client();
            for _ in 0..PERSIST_ATTEMPTS {
                let known = self
                    .marks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&worker)
                    .filter(|known| known.lease == lease_id)
                    .map(|known| (known.ms, known.revision));
                let (old_ms, mod_revision) = match known {
                    Some(known) => known,
                    None => {
                        let current = client
                            .get(mark_key.as_str(), None)
                            .await
                            .map_err(|e| self.failed("persist mark", &e))?;
                        match current.kvs().first() {
                            Some(kv) => (
                                Some(ceil_ms(parse_ms("persist mark", worker, kv.value())?)),
                                kv.mod_revision(),
                            ),
                            None => (None, 0),
                        }
                    }
                };
                let raise = old_ms.is_none_or(|old| new_ms > old);
                let mut ops = vec![TxnOp::put(
                    reported_key.as_str(),
                    reported.as_millisecond().to_string(),
                    Some(PutOptions::new().with_lease(lease_id)),
                )];
                if raise {
                    ops.push(TxnOp::put(mark_key.as_str(), new_ms.to_string(), None));
                }
                let txn = Txn::new()
                    .when([
                        Compare::lease(worker_key.as_str(), CompareOp::Equal, lease_id),
                        Compare::create_revision(
                            worker_key.as_str(),
                            CompareOp::Equal,
                            create_revision,
                        ),
                        Compare::mod_revision(mark_key.as_str(), CompareOp::Equal, mod_revision),
                    ])
                    .and_then(ops)
                    .or_else([TxnOp::get(worker_key.as_str(), None)]);
                let resp = match client.txn(txn).await {
                    Ok(resp) => resp,
                    Err(e) if is_lease_not_found(&e) => {
                        return Err(self.lease_lost(
                            worker,
                            format!("lease {lease_id:x} expired or was revoked"),
                        ));
                    }
                    Err(e) => return Err(self.failed("persist mark", &e)),
                };
                if resp.succeeded() {
                    // The mark key now stands at the transaction's revision
                    // when it was written, else where it was.
                    let revision = match (raise, resp.header()) {
                        (true, Some(h)) => Some((Some(new_ms), h.revision())),
                        (true, None) => None,
                        (false, _) => Some((old_ms, mod_revision)),
                    };
                    let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
                    match revision {
                        Some((ms, revision)) => {
                            let known = KnownMark {
                                lease: lease_id,
                                ms,
                                revision,
                            };
                            marks.insert(worker, known);
                        }
                        None => {
                            marks.remove(&worker);
                        }
                    }
                    return Ok(());
                }
                // Read the mark again next time round (or next persist).
                self.marks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&worker);
                let holder = resp.op_responses().into_iter().find_map(|op| match op {
                    TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
                    _ => None,
                });
                match holder.flatten() {
                    None => {
                        return Err(self.lease_lost(
                            worker,
                            format!("lease {lease_id:x} expired or was released"),
                        ));
                    }
                    Some(kv)
                        if kv.lease() != lease_id || kv.create_revision() != create_revision =>
                    {
                        return Err(self.lease_lost(
                            worker,
                            format!(
                                "taken over by another node (lease {:x}, create revision {})",
                                kv.lease(),
                                kv.create_revision()
                            ),
                        ));
                    }
                    // Still ours: the mark key changed between the read and the
                    // transaction (a concurrent persist). Read it again.
                    Some(_) => {}
                }
            }
            Err(backend_msg(
                "persist mark",
                format!("mark of worker {worker} kept changing during {PERSIST_ATTEMPTS} attempts"),
            ))
        };
        bounded(KIND, "persist mark", self.bound(), attempt).await
    }

    /// One transaction: `if lease(workers/<id>) == ours and
    /// create_revision(workers/<id>) == ours then put marks/<id> (the
    /// clean stop's tick), put reported/<id> (lease)`. The holding's
    /// compares fence it as a persist; the mark is set, not raised. A
    /// persist of ours still in flight compares the mark key's old mod
    /// revision, so it fails after this.
    async fn record_clean_stop_on_pinned(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        const OP: &str = "record clean stop";
        let (lease_id, create_revision) = parse_token(claim)?;
        let worker = claim.worker;
        let worker_key = self.key("workers/", worker);
        // The next persist reads the mark key afresh.
        self.marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&worker);
        let txn = Txn::new()
            .when([
                Compare::lease(worker_key.as_str(), CompareOp::Equal, lease_id),
                Compare::create_revision(worker_key.as_str(), CompareOp::Equal, create_revision),
            ])
            .and_then([
                TxnOp::put(self.key("marks/", worker), ceil_ms(high).to_string(), None),
                TxnOp::put(
                    self.key("reported/", worker),
                    reported.as_millisecond().to_string(),
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
            ]);
        let attempt = async {
            let mut client = self.client();
            let gone =
                || self.lease_lost(worker, format!("lease {lease_id:x} expired or was revoked"));
            match client.txn(txn).await {
                Ok(resp) if resp.succeeded() => Ok(()),
                Ok(_) => Err(self.lease_lost(
                    worker,
                    format!("lease {lease_id:x} expired, was released or was taken over"),
                )),
                Err(e) if is_lease_not_found(&e) => Err(gone()),
                Err(e) => Err(self.failed(OP, &e)),
            }
        };
        bounded(KIND, OP, self.bound(), attempt).await
    }

    async fn peers_on_pinned(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        const OP: &str = "list peers";
        // A sample, not every report: N nodes starting at once would read N²
        // reports. First by point reads of random workers in the claimed
        // range: O(1), where even a limited range read costs etcd (3.4) a
        // walk of its index over the whole prefix, which at 10,000 nodes
        // kept etcd at a full core and every start timing out.
        let prefix = format!("{}reported/", self.config.prefix);
        let range = self.last_range.load(std::sync::atomic::Ordering::Relaxed);
        if range > 2 * PEER_SAMPLE {
            let sample = distinct_below(range, PEER_SAMPLE);
            let txn = Txn::new().and_then(
                sample
                    .iter()
                    .map(|w| TxnOp::get(self.key("reported/", *w), None))
                    .collect::<Vec<_>>(),
            );
            let mut client = self.client();
            let resp = self.call(OP, client.txn(txn)).await?;
            let read = resp.header().map(|h| h.revision());
            let mut peers = Vec::new();
            for (worker, op) in sample.iter().zip(resp.op_responses()) {
                if let TxnOpResponse::Get(get) = op
                    && let Some(kv) = get.kvs().first()
                    && *worker != claim.worker
                {
                    let reported = parse_ms(OP, *worker, kv.value())?;
                    peers.push(report_of(*worker, reported, kv, read));
                }
            }
            // Enough for a median; a sparse space (few nodes in many IDs)
            // falls through to the range read, which is small there.
            if peers.len() >= PEER_SAMPLE as usize / 4 {
                peers.sort_by_key(|p| p.worker);
                return Ok(peers);
            }
        }
        // [`PEER_SAMPLE`] keys from a random point of the `reported/` keys,
        // wrapping around to the first, in one read-only transaction.
        let mut end = prefix.clone().into_bytes();
        // The prefix ends in '/'; the key after all keys it starts is '0'.
        *end.last_mut().expect("the prefix is not empty") += 1;
        let from = format!("{prefix}{}", random_u64() % (1 << 22));
        let limit = i64::from(PEER_SAMPLE) + 1;
        let txn = Txn::new().and_then([
            TxnOp::get(
                from.as_str(),
                Some(GetOptions::new().with_range(end).with_limit(limit)),
            ),
            TxnOp::get(
                prefix.as_str(),
                Some(
                    GetOptions::new()
                        .with_range(from.as_str())
                        .with_limit(limit),
                ),
            ),
        ]);
        let mut client = self.client();
        let resp = self.call(OP, client.txn(txn)).await?;
        let read = resp.header().map(|h| h.revision());
        let mut peers = Vec::new();
        for op in resp.op_responses() {
            let TxnOpResponse::Get(get) = op else {
                continue;
            };
            for kv in get.kvs() {
                let Some(worker) = worker_of(kv, prefix.as_bytes()) else {
                    return Err(backend_msg(
                        OP,
                        format!(
                            "reported key {:?} does not end in a worker id",
                            String::from_utf8_lossy(kv.key())
                        ),
                    ));
                };
                if worker == claim.worker || peers.len() >= PEER_SAMPLE as usize {
                    continue;
                }
                let reported = parse_ms(OP, worker, kv.value())?;
                peers.push(report_of(worker, reported, kv, read));
            }
        }
        peers.sort_by_key(|p| p.worker);
        Ok(peers)
    }

    async fn fleet_on_pinned(&self) -> Result<Vec<FleetMember>> {
        const OP: &str = "list fleet";
        let workers = format!("{}workers/", self.config.prefix);
        let reported = format!("{}reported/", self.config.prefix);
        let marks = format!("{}marks/", self.config.prefix);
        let read = async {
            let mut client = self.client();
            let txn = Txn::new().and_then([
                TxnOp::get(workers.as_str(), Some(GetOptions::new().with_prefix())),
                TxnOp::get(reported.as_str(), Some(GetOptions::new().with_prefix())),
                TxnOp::get(marks.as_str(), Some(GetOptions::new().with_prefix())),
            ]);
            let resp = client.txn(txn).await.map_err(|e| self.failed(OP, &e))?;
            let mut gets = resp.op_responses().into_iter().filter_map(|op| match op {
                TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
                _ => None,
            });
            let (Some(held), Some(reports), Some(stored)) = (gets.next(), gets.next(), gets.next())
            else {
                return Err(backend_msg(
                    OP,
                    "transaction answer lacks a read".to_owned(),
                ));
            };
            let mut rows = std::collections::BTreeMap::new();
            let mut leases = tokio::task::JoinSet::new();
            for kv in &held {
                let Some(worker) = worker_of(kv, workers.as_bytes()) else {
                    continue;
                };
                let mut row = FleetMember::new(worker);
                let text = String::from_utf8_lossy(kv.value());
                let field = |name: &str| {
                    text.split(' ')
                        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                        .map(str::to_owned)
                };
                row.host = field("host");
                row.address = field("address");
                row.port = field("port").and_then(|p| p.parse().ok());
                row.live = true;
                let lease_id = kv.lease();
                let mut client = self.client();
                leases.spawn(async move {
                    let ttl = client.lease_time_to_live(lease_id, None).await;
                    (worker, ttl.map(|t| t.ttl()))
                });
                rows.insert(worker, row);
            }
            for kv in &reports {
                if let Some(worker) = worker_of(kv, reported.as_bytes())
                    && let Some(row) = rows.get_mut(&worker)
                {
                    row.reported = Some(parse_ms(OP, worker, kv.value())?);
                }
            }
            for kv in &stored {
                if let Some(worker) = worker_of(kv, marks.as_bytes())
                    && let Some(row) = rows.get_mut(&worker)
                {
                    row.mark = Some(parse_ms(OP, worker, kv.value())?);
                }
            }
            while let Some(done) = leases.join_next().await {
                let (worker, ttl) = done.map_err(|e| backend_msg(OP, e.to_string()))?;
                let ttl = ttl.map_err(|e| self.failed(OP, &e))?;
                if ttl <= 0 {
                    // The lease ran out since the read: its holding went with it.
                    rows.remove(&worker);
                } else if let Some(row) = rows.get_mut(&worker) {
                    row.lease_left = Some(Duration::from_secs(ttl.unsigned_abs()));
                }
            }
            Ok(rows.into_values().collect())
        };
        // The lease reads are spawned: dropping the set on a timeout aborts them.
        bounded(KIND, OP, self.bound(), read).await
    }

    async fn release_on_pinned(&self, claim: &Claim) -> Result<()> {
        let (lease_id, _) = parse_token(claim)?;
        self.forget_lease(lease_id);
        // Revoking deletes the holding and the report (both attached to the
        // lease) and leaves the mark. A lease already gone is not an error: the
        // ID is not ours to give back, and only our own lease is touched.
        if !self.revoke("release", lease_id).await? {
            tracing::warn!(
                worker = claim.worker,
                lease = lease_id,
                "released an etcd worker lease that was already gone"
            );
        }
        Ok(())
    }
}

#[async_trait]
impl WorkerRegistry for EtcdRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim> {
        self.pinned_call(self.claim_on_pinned(node, range)).await
    }

    async fn claim_worker(&self, node: &NodeIdentity, worker: u32, range: u32) -> Result<Claim> {
        self.pinned_call(self.claim_worker_on_pinned(node, worker, range))
            .await
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>> {
        self.moving_call(|| self.renew_on_pinned(claim)).await
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.moving_call(|| self.persist_mark_on_pinned(claim, mark, reported))
            .await
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<()> {
        self.moving_call(|| self.record_clean_stop_on_pinned(claim, high, reported))
            .await
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>> {
        self.moving_call(|| self.peers_on_pinned(claim)).await
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>> {
        self.moving_call(|| self.fleet_on_pinned()).await
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        self.moving_call(|| self.release_on_pinned(claim)).await
    }
}

/// A peer's report as etcd stores it: etcd keeps no clock, so its age is
/// unknown (`None`), but the revision of the write that stored it
/// (`mod_revision`) and the read's (the response header's) let a start's
/// second read weigh only the reports written after its first one (a
/// sample draws other peers the second time, whose reports may be as stale
/// as the first ones).
fn report_of(worker: u32, reported: Timestamp, kv: &KeyValue, read: Option<i64>) -> PeerReport {
    let report = PeerReport::new(worker, reported);
    match read {
        Some(read) => report.with_revision(ReportRevision {
            written: kv.mod_revision(),
            read,
        }),
        None => report,
    }
}

/// A failed call: [`RegistryError::Unavailable`] when the member could not
/// be reached or could not serve ([`unreachable`]), else
/// [`RegistryError::Backend`].
fn backend(operation: &'static str, e: &etcd_client::Error) -> RegistryError {
    if unreachable(e) {
        RegistryError::unavailable(KIND, operation, e)
    } else {
        backend_msg(operation, e.to_string())
    }
}

/// Whether `e` says the member can't be reached or can't serve now: a
/// transport or I/O error (nothing listening, a broken connection), or
/// gRPC's UNAVAILABLE (14: also `etcdserver: leader changed` and `no
/// leader`) or ABORTED (10), by number as in [`is_deadline`].
///
/// A member that dies mid-call breaks the HTTP/2 connection under it, which
/// tonic reports as UNKNOWN (2) or INTERNAL (13) with the transport's words
/// (`transport error`, `connection reset`, `h2 protocol error`, ...), or as
/// CANCELLED (1) with them only in its source (`operation was canceled`,
/// from hyper's `connection closed`: seen when a member's connections were
/// cut mid-call): that is the connection, not etcd's answer, and passes
/// too. A CANCELLED that is the call's own deadline is [`is_deadline`]'s.
fn unreachable(e: &etcd_client::Error) -> bool {
    const BROKEN: &[&str] = &[
        "transport error",
        "connection reset",
        "connection closed",
        "broken pipe",
        "h2 protocol error",
        "error trying to connect",
    ];
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => match s.code() as i32 {
            10 | 14 => true,
            1 | 2 | 13 if !is_deadline(e) => {
                // The status's message and its source's (`e`'s whole text).
                let text = e.to_string().to_ascii_lowercase();
                BROKEN.iter().any(|words| text.contains(words))
            }
            _ => false,
        },
        _ => false,
    }
}

fn backend_msg(operation: &'static str, message: String) -> RegistryError {
    RegistryError::backend(KIND, operation, message)
}

/// A failed connect: [`RegistryError::Unavailable`] for what passes by
/// itself (nothing listening, a broken connection, etcd between leaders:
/// `etcdserver: leader changed` and `no leader` come as UNAVAILABLE), which
/// a start waits on; [`RegistryError::Timeout`] for a deadline; anything else
/// (refused authentication, a permission) as [`backend`]. Every rolling
/// upgrade of etcd changes its leader: a node started then must wait, not exit.
fn connect_error(e: &etcd_client::Error, after: Duration) -> RegistryError {
    if is_deadline(e) {
        RegistryError::Timeout {
            registry: KIND,
            operation: "connect",
            after,
        }
    } else {
        backend("connect", e)
    }
}

/// Whether the call ran out of time in the gRPC channel (tonic's
/// `TimeoutExpired`, reported as a cancelled call) or at etcd (its deadline
/// exceeded).
fn is_deadline(e: &etcd_client::Error) -> bool {
    match e {
        // gRPC's status codes: 1 CANCELLED, 4 DEADLINE_EXCEEDED (by number,
        // as this crate does not name etcd-client's tonic).
        etcd_client::Error::GRpcStatus(s) => {
            let code = s.code() as i32;
            code == 4 || (code == 1 && s.message().contains("Timeout expired"))
        }
        _ => false,
    }
}

/// Whether etcd said the lease does not exist (expired or revoked).
fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains("lease not found"),
        // etcd's `ErrGRPCLeaseNotFound`: "etcdserver: requested lease not found".
        etcd_client::Error::GRpcStatus(s) => s.message().contains("lease not found"),
        _ => false,
    }
}

/// The worker ID a key under `prefix` ends in.
fn worker_of(kv: &KeyValue, prefix: &[u8]) -> Option<u32> {
    let rest = kv.key().strip_prefix(prefix)?;
    std::str::from_utf8(rest).ok()?.parse().ok()
}

/// The node a holding key's value names (`host (address:port)`).
fn describe_holder(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let field = |name: &str| {
        text.split(' ')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    match (field("host"), field("address"), field("port")) {
        (Some(host), Some(address), Some(port)) => format!("{host} ({address}:{port})"),
        _ => format!("{text:?}"),
    }
}

/// The lease ID and create revision a claim's token holds.
fn parse_token(claim: &Claim) -> Result<(i64, i64)> {
    claim
        .token
        .split_once('/')
        .and_then(|(lease, revision)| {
            Some((
                i64::from_str_radix(lease, 16).ok()?,
                revision.parse::<i64>().ok()?,
            ))
        })
        .ok_or_else(|| {
            RegistryError::config(
                KIND,
                format!(
                    "claim token {:?} of worker {} is not an etcd claim",
                    claim.token, claim.worker
                ),
            )
        })
}

fn parse_ms(operation: &'static str, worker: u32, raw: &[u8]) -> Result<Timestamp> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .ok_or_else(|| {
            backend_msg(
                operation,
                format!(
                    "worker {worker} has {:?} stored, not a unix time in milliseconds",
                    String::from_utf8_lossy(raw)
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_notes_round_trip_and_are_fresh_for_a_second_either_way() {
        let now = unix_ms();
        let note = FullNote {
            range: 16_384,
            in_use: 16_384,
            at_ms: now,
        };
        let text = note.to_string();
        assert_eq!(text, format!("range=16384 in_use=16384 at={now}"));
        assert_eq!(FullNote::parse(text.as_bytes()), Some(note));
        assert!(note.is_fresh());
        for off in [-1_500, 1_500, -3_600_000, 3_600_000] {
            let moved = FullNote {
                at_ms: now + off,
                ..note
            };
            assert!(!moved.is_fresh(), "{off} ms away is not fresh");
        }
        for bad in [
            "",
            "range=1",
            "range=x in_use=1 at=2",
            "in_use=1 range=1 at=2",
        ] {
            assert_eq!(FullNote::parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    fn claim_with_token(token: &str) -> Claim {
        Claim {
            worker: 3,
            stored_mark: None,
            lease: None,
            token: token.to_owned(),
        }
    }

    #[test]
    fn tokens_round_trip_lease_and_revision() {
        let claim = claim_with_token("694d8a1f2b3c4d5e/1234");
        assert_eq!(parse_token(&claim).unwrap(), (0x694d_8a1f_2b3c_4d5e, 1234));
        let err = parse_token(&claim_with_token("redis-token")).unwrap_err();
        assert_eq!(err.code(), "registry_config");
        assert!(err.to_string().contains("\"redis-token\""), "{err}");
    }

    #[test]
    fn config_defaults_and_setters() {
        let config = EtcdConfig::new();
        assert_eq!(config.prefix(), "/idmint/default/");
        assert_eq!(config.lease_ttl(), Duration::from_secs(10));
        assert_eq!(config.timeout(), Duration::from_secs(2));
        assert_eq!(config.connect_timeout(), Duration::from_secs(2));
        let config = config.with_cluster("orders");
        assert_eq!(config.prefix(), "/idmint/orders/");
        assert!(config.validate().is_ok());
    }

    #[test]
    fn config_rejects_fractional_ttls_and_zero_timeouts() {
        let err = EtcdConfig::new()
            .with_lease_ttl(Duration::from_millis(1500))
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("1.5s"), "{err}");
        assert!(
            EtcdConfig::new()
                .with_lease_ttl(Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(
            EtcdConfig::new()
                .with_timeout(Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(EtcdConfig::new().with_prefix("").validate().is_err());
    }

    #[test]
    fn stored_values_that_are_not_millis_are_backend_errors() {
        let err = parse_ms("claim", 5, b"soon").unwrap_err();
        assert_eq!(err.code(), "registry_backend");
        assert!(err.to_string().contains("worker 5"), "{err}");
    }
}
