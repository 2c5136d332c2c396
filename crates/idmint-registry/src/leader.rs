//! The timestamp oracle's leader: one node of a cluster issues every ID of
//! the `monotonic` strategy, from one generator whose IDs only grow, and hands
//! over to another node when it dies, without ever stepping back (TiKV PD's
//! timestamp oracle, on idmint's leases and high-water marks).
//!
//! [`Campaign::spawn`] starts a task, owned by the returned [`CampaignGuard`],
//! that keeps trying to become the leader and, while it is not, finds out who
//! is. Callers go through an [`Oracle`]: [`Oracle::reserve`] on the leader,
//! [`Oracle::leader`] to know where to forward on a follower.
//!
//! # Why IDs never step back
//!
//! - **One holder.** The leadership is worker ID 0 of a range of one, claimed
//!   through a [`WorkerKeeper`] on a shared registry in a namespace of its own
//!   (the caller opens the registry so). The registry's exclusivity is the
//!   election: no home-made consensus.
//! - **Persist, then allow.** The keeper persists the generator's mark ahead of
//!   every ID; a new leader's generator starts above the stored mark, so every
//!   ID it issues is above every ID any earlier leader issued, whatever its
//!   clock says (with `borrow` policies it runs ahead of a clock that is
//!   behind, up to the policy's lead).
//! - **Fenced on every call.** [`Oracle::reserve`] refuses once the lease's
//!   fence (its end minus the keeper's margin) has passed on the monotonic
//!   clock, read on the call itself ([`WorkerHandle::holds_lease`]), so a
//!   leader stopped past its lease and continued (SIGSTOP, a starved runtime)
//!   never issues after someone else could have become the leader. The
//!   registry only grants the claim again once the lease has run out by its
//!   own clock, and the fence errs early by the margin.
//! - **One generator per leadership.** IDs of one generator strictly increase
//!   under any concurrency (one atomic word), so requests that do not overlap
//!   in time get increasing IDs: the order is linearizable.
//!
//! # Finding the leader
//!
//! The leader's claim carries its [`NodeIdentity`] (the caller puts the address
//! followers forward to in it); followers read it from
//! [`WorkerRegistry::fleet`] every poll interval, and at once after
//! [`Oracle::refresh`] (a forward that failed). A node campaigns only when
//! that read lists no live leader: a claim attempt costs writes on some
//! registries (on etcd a lease grant, a failing transaction and a revoke,
//! all raft proposals), so followers that campaigned every poll cost etcd
//! about 12 writes a second each. A dead leader's holding leaves the
//! listing when its lease runs out; the next poll campaigns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use idmint_core::{IdBatch, IdRun};
use jiff::Timestamp;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::error::{RegistryError, Result};
use crate::keeper::{GeneratorSettings, KeeperConfig, KeeperGuard, WorkerHandle, WorkerKeeper};
use crate::registry::{NodeIdentity, WorkerRegistry};
use crate::util::bounded;

/// This node's part in the oracle right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// It holds the leadership and issues.
    Leader,
    /// Another node leads (as last read from the registry).
    Follower,
    /// No leader is known: an election is under way.
    Candidate,
}

impl Role {
    /// The role's name, as status output shows it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
        }
    }
}

/// The leader as this node knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// Who leads, as its claim says.
    pub node: NodeIdentity,
    /// Whether that is this node.
    pub is_self: bool,
    /// The leadership's term: the first mark its generator was allowed up
    /// to, which grows from one leadership to the next. Known on the leader
    /// itself; `None` on followers.
    pub term: Option<Timestamp>,
}

/// A snapshot of the oracle, for `/readyz`, the status page and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OracleStatus {
    /// This node's role.
    pub role: Role,
    /// The leader, when one is known.
    pub leader: Option<LeaderInfo>,
    /// On the leader: the mark its generator may issue up to (the persisted
    /// window's end).
    pub mark: Option<Timestamp>,
    /// How many times this node saw the leader change (to another node or a
    /// new term), the first leader it saw not counted.
    pub leader_changes: u64,
    /// How long the last time without a known leader lasted, as this node saw
    /// it (from noticing the leader gone to knowing the next); the election at
    /// start is not counted.
    pub last_failover: Option<Duration>,
    /// How long there has been no known leader, while there is none.
    pub leaderless_for: Option<Duration>,
    /// The last failure of a registry call, cleared by the next success.
    pub last_error: Option<String>,
}

/// How a campaign runs, beyond the keeper's own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CampaignConfig {
    poll: Duration,
}

impl Default for CampaignConfig {
    fn default() -> CampaignConfig {
        CampaignConfig::new()
    }
}

impl CampaignConfig {
    /// The defaults: poll every 250 ms.
    pub const fn new() -> CampaignConfig {
        CampaignConfig {
            poll: Duration::from_millis(250),
        }
    }

    /// How often a node that does not lead tries to claim the leadership and
    /// reads who leads (default 250 ms). Fail-over takes the lease's TTL plus
    /// up to this.
    pub const fn with_poll(mut self, poll: Duration) -> CampaignConfig {
        self.poll = poll;
        self
    }

    /// The poll interval.
    pub const fn poll(&self) -> Duration {
        self.poll
    }
}

#[derive(Debug)]
struct Shared {
    /// This node's keeper of the leadership, once it won an election. The
    /// keeper stays after a lost lease (it claims again by itself); whether it
    /// leads is [`WorkerHandle::holds_lease`], read per call.
    keeper: ArcSwapOption<WorkerHandle>,
    /// The leader as last seen; `None` while none is known.
    leader: ArcSwapOption<LeaderInfo>,
    /// Bumped whenever `leader` changes, so waiters wake.
    changed: watch::Sender<u64>,
    /// Asks the task to read the registry now.
    refresh: Notify,
    shutdown: Notify,
    stopping: AtomicBool,
    stats: Mutex<Stats>,
}

#[derive(Debug, Default)]
struct Stats {
    leader_changes: u64,
    leaderless_since: Option<Instant>,
    last_failover: Option<Duration>,
    last_error: Option<String>,
    seen_leader: bool,
}

impl Shared {
    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where callers reach the oracle: issue on the leader, learn the leader
/// elsewhere. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Oracle {
    shared: Arc<Shared>,
}

impl Oracle {
    /// Reserves `n` consecutive IDs of the oracle, on the leader only.
    ///
    /// - Every ID is above every ID any call returned before this one began,
    ///   on this node or any earlier leader.
    /// - One call is one atomic step of one generator: the IDs come as runs
    ///   (consecutive integers within a tick).
    ///
    /// # Errors
    ///
    /// - [`RegistryError::NotLeader`] when this node does not lead, or its
    ///   lease's fence has passed: ask the leader it names, or wait for one.
    /// - [`RegistryError::Core`] with the generator's error: `MarkReached`
    ///   while the keeper persists the next window (transient), or the
    ///   count's and the layout's errors.
    pub fn reserve(&self, n: u64) -> Result<IdBatch> {
        let keeper = self.shared.keeper.load();
        let Some(keeper) = keeper.as_deref().filter(|k| k.holds_lease()) else {
            return Err(self.not_leader());
        };
        if n == 1 {
            let id = keeper.next_id()?;
            let mut batch = IdBatch::new();
            batch.try_push(IdRun::try_new(id, 1, 1)?)?;
            Ok(batch)
        } else {
            Ok(keeper.next_ids(n)?)
        }
    }

    /// The error for a call this node can't serve as leader, naming the
    /// leader it knows of.
    pub fn not_leader(&self) -> RegistryError {
        let leader = self.shared.leader.load();
        RegistryError::NotLeader {
            leader: leader
                .as_deref()
                .filter(|l| !l.is_self)
                .map(|l| format!("{}:{}", l.node.address, l.node.port)),
        }
    }

    /// The leader as last seen, if one is known.
    pub fn leader(&self) -> Option<LeaderInfo> {
        self.shared.leader.load_full().map(|l| (*l).clone())
    }

    /// This node's role, read now.
    pub fn role(&self) -> Role {
        if self
            .shared
            .keeper
            .load()
            .as_deref()
            .is_some_and(WorkerHandle::holds_lease)
        {
            return Role::Leader;
        }
        match self.shared.leader.load().as_deref() {
            Some(l) if !l.is_self => Role::Follower,
            _ => Role::Candidate,
        }
    }

    /// Asks the campaign to read the registry now (a forward to the leader it
    /// named failed).
    pub fn refresh(&self) {
        self.shared.refresh.notify_one();
    }

    /// A receiver that changes whenever the known leader does: wait on it for
    /// a new leader (with a bound of the caller's).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }

    /// A snapshot of the oracle.
    pub fn status(&self) -> OracleStatus {
        let role = self.role();
        let mark = match role {
            Role::Leader => self
                .shared
                .keeper
                .load()
                .as_deref()
                .and_then(|k| k.generator().mark()),
            _ => None,
        };
        let s = self.shared.stats();
        OracleStatus {
            role,
            leader: self.leader(),
            mark,
            leader_changes: s.leader_changes,
            last_failover: s.last_failover,
            leaderless_for: s.leaderless_since.map(|t| t.elapsed()),
            last_error: s.last_error.clone(),
        }
    }
}

/// Owns the campaign's task. Dropping it stops issuing at once and lets the
/// task release the leadership in the background; [`CampaignGuard::shutdown`]
/// does the same and waits, so the next leader need not wait for the lease to
/// run out.
#[derive(Debug)]
pub struct CampaignGuard {
    oracle: Oracle,
    task: Option<JoinHandle<()>>,
}

impl CampaignGuard {
    /// The oracle this campaign serves.
    pub fn oracle(&self) -> &Oracle {
        &self.oracle
    }

    /// Stops issuing, releases the leadership if held, and waits for the task.
    pub async fn shutdown(mut self) {
        self.signal_stop();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    fn signal_stop(&self) {
        let shared = &self.oracle.shared;
        shared.stopping.store(true, Ordering::Release);
        shared.shutdown.notify_one();
    }
}

impl Drop for CampaignGuard {
    fn drop(&mut self) {
        if self.task.is_some() {
            self.signal_stop();
        }
    }
}

/// Starts campaigns for the oracle's leadership; see the [module docs](self).
#[derive(Debug)]
pub struct Campaign;

impl Campaign {
    /// Starts campaigning on `registry` (a namespace of its own: nothing else
    /// may claim worker IDs there) as `node`, whose address and port are what
    /// followers will forward to.
    ///
    /// Returns at once; the task claims, keeps the leadership, and reads who
    /// leads while it does not. `settings` must have a layout without node
    /// bits and should borrow on both policies (a new leader whose clock is
    /// behind the stored mark then goes on from the mark).
    ///
    /// # Errors
    /// [`RegistryError::Config`] when the layout has node bits, or the keeper's
    /// intervals don't fit together ([`KeeperConfig::validate`]).
    pub fn spawn(
        registry: Arc<dyn WorkerRegistry>,
        node: NodeIdentity,
        settings: GeneratorSettings,
        keeper: KeeperConfig,
        config: CampaignConfig,
    ) -> Result<CampaignGuard> {
        keeper.validate(registry.kind())?;
        if settings.range() != 1 {
            return Err(RegistryError::config(
                registry.kind(),
                format!(
                    "the oracle's layout has {} node IDs; it needs a layout without node bits \
                     (one issuer), such as tso",
                    settings.range()
                ),
            ));
        }
        if config.poll.is_zero() {
            return Err(RegistryError::config(
                registry.kind(),
                "the campaign's poll interval of 0s is out of range (above 0)".to_owned(),
            ));
        }
        let (changed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            keeper: ArcSwapOption::empty(),
            leader: ArcSwapOption::empty(),
            changed,
            refresh: Notify::new(),
            shutdown: Notify::new(),
            stopping: AtomicBool::new(false),
            stats: Mutex::new(Stats {
                leaderless_since: Some(Instant::now()),
                ..Stats::default()
            }),
        });
        let task = Task {
            registry,
            node,
            settings,
            keeper_config: keeper,
            config,
            shared: shared.clone(),
            keeper: None,
        };
        Ok(CampaignGuard {
            oracle: Oracle { shared },
            task: Some(tokio::spawn(task.run())),
        })
    }
}

/// How often a follower that knows its leader reads who leads.
const KNOWN_LEADER_POLL: Duration = Duration::from_secs(2);

struct Task {
    registry: Arc<dyn WorkerRegistry>,
    node: NodeIdentity,
    settings: GeneratorSettings,
    keeper_config: KeeperConfig,
    config: CampaignConfig,
    shared: Arc<Shared>,
    keeper: Option<KeeperGuard>,
}

impl Task {
    async fn run(mut self) {
        loop {
            if self.shared.stopping.load(Ordering::Acquire) {
                break;
            }
            // Campaign only when no live leader is listed: on etcd a claim
            // attempt is three raft writes (grant, a failing transaction,
            // revoke), which a follower per poll made thousands a second
            // at fleet scale. A dead leader's holding leaves the listing
            // when its lease runs out, and the next poll campaigns.
            let led = self.observe().await;
            if self.keeper.is_none() && !led {
                self.campaign().await;
                if self.keeper.is_some() {
                    self.observe().await;
                }
            }
            // A follower that knows its leader reads the registry less
            // often: a forward that fails wakes it at once (`refresh`), so
            // a fail-over is seen as fast, and 1,000 followers polling every
            // 250 ms were 4,000 listings a second on the coordinator.
            let knows_leader = self.keeper.is_none() && self.shared.leader.load().is_some();
            let pause = if knows_leader {
                self.config.poll.max(KNOWN_LEADER_POLL)
            } else {
                self.config.poll
            };
            tokio::select! {
                _ = self.shared.shutdown.notified() => break,
                _ = self.shared.refresh.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
        self.shared.keeper.store(None);
        if let Some(keeper) = self.keeper.take() {
            keeper.shutdown().await;
        }
        self.set_leader(None);
    }

    /// One attempt at the leadership. Once won, the keeper keeps it (and
    /// claims it again by itself after losing it), so this runs until the
    /// first win only.
    async fn campaign(&mut self) {
        // Never waits to claim: a taken worker 0 means someone else leads
        // (the answer to report at once), and a hold is retried by this
        // loop's own cadence.
        let started = WorkerKeeper::start(
            self.registry.clone(),
            self.node.clone(),
            self.settings.clone(),
            self.keeper_config.with_max_claim_wait(Duration::ZERO),
        )
        .await;
        match started {
            Ok(keeper) => {
                let status = keeper.handle().status();
                tracing::info!(
                    registry = self.registry.kind(),
                    node = %self.node,
                    term = ?status.first_mark,
                    "elected the oracle's leader"
                );
                self.shared
                    .keeper
                    .store(Some(Arc::new(keeper.handle().clone())));
                self.keeper = Some(keeper);
                self.shared.stats().last_error = None;
            }
            // Someone else leads: a follower's normal answer.
            Err(RegistryError::Exhausted { .. } | RegistryError::WorkerTaken { .. }) => {}
            Err(e) => {
                tracing::warn!(registry = self.registry.kind(), error = %e, "oracle campaign");
                self.shared.stats().last_error = Some(e.to_string());
            }
        }
    }

    /// Works out who leads: this node while its keeper holds the lease,
    /// else the live holder the registry lists. Returns whether a leader is
    /// known (a failed read knows none, so the node campaigns).
    async fn observe(&mut self) -> bool {
        if let Some(keeper) = &self.keeper {
            let handle = keeper.handle();
            if handle.holds_lease() {
                let term = handle.status().first_mark;
                self.set_leader(Some(LeaderInfo {
                    node: self.node.clone(),
                    is_self: true,
                    term,
                }));
                return true;
            }
        }
        let timeout = self.keeper_config.call_timeout();
        let listed = bounded(
            self.registry.kind(),
            "fleet",
            timeout,
            self.registry.fleet(),
        )
        .await;
        match listed {
            Ok(fleet) => {
                let leader = fleet
                    .into_iter()
                    .filter(|m| m.live && m.worker == 0)
                    .find_map(|m| {
                        Some(NodeIdentity {
                            host: m.host.clone().unwrap_or_default(),
                            address: m.address.clone()?,
                            port: m.port?,
                        })
                    })
                    // Our own stale holding (a lease that ran out, not yet
                    // claimed again) is no leader to forward to.
                    .filter(|node| *node != self.node)
                    .map(|node| LeaderInfo {
                        node,
                        is_self: false,
                        term: None,
                    });
                let known = leader.is_some();
                self.set_leader(leader);
                if self.keeper.is_some() {
                    // Leading is the keeper's to tell; the read worked.
                } else {
                    self.shared.stats().last_error = None;
                }
                known
            }
            Err(e) => {
                tracing::warn!(registry = self.registry.kind(), error = %e, "oracle: reading the leader");
                self.shared.stats().last_error = Some(e.to_string());
                self.set_leader(None);
                false
            }
        }
    }

    fn set_leader(&self, leader: Option<LeaderInfo>) {
        let old = self.shared.leader.load_full();
        if old.as_deref() == leader.as_ref() {
            return;
        }
        {
            let mut s = self.shared.stats();
            match (&leader, s.leaderless_since) {
                (Some(l), since) => {
                    if s.seen_leader {
                        s.leader_changes += 1;
                        // The first election at start is no fail-over.
                        if let Some(since) = since {
                            s.last_failover = Some(since.elapsed());
                        }
                    }
                    s.seen_leader = true;
                    s.leaderless_since = None;
                    tracing::info!(leader = %l.node, is_self = l.is_self, "oracle leader known");
                }
                (None, None) => {
                    s.leaderless_since = Some(Instant::now());
                    tracing::warn!("oracle: no leader known");
                }
                (None, Some(_)) => {}
            }
        }
        self.shared.leader.store(leader.map(Arc::new));
        self.shared.changed.send_modify(|n| *n += 1);
    }
}
