//! The simulated registry: an in-memory [`WorkerRegistry`] that keeps the
//! trait's contract exactly, on its own clock, and injects faults between the
//! caller and itself.
//!
//! The contract, as `registry.rs` states it and as it holds here:
//! - **Exclusive**: a claim takes only a worker with no live lease (its
//!   expiry, by the registry's clock, not past).
//! - **Marks survive holders**: a claim returns the highest mark ever
//!   persisted for the worker; `persist_mark` raises it, never lowers it, and
//!   the mark outlives releases and expiries. A clean stop's record
//!   (`record_clean_stop`) sets it to what that holding issued, until the
//!   next persist raises it again.
//! - **Fenced persistence**: `renew`, `persist_mark` and `record_clean_stop`
//!   succeed only for the live holder's token; anything else is `LeaseLost`.
//! - **Bounded**: every call either answers or hangs (a stall); the keeper's
//!   call timeout bounds it, as for every real backend.
//! - **Typed exhaustion**: `Exhausted` with the count in use.
//!
//! The registry's clock is true time (see `time.rs`), never behind a caller's
//! (it is the latest true time any caller reached). A lease runs `ttl` on it;
//! the holder is told `valid_until = (its instant when it sent the call) +
//! ttl`, so the holder errs early, as with every real backend.
//!
//! Faults, each decided from the seed and the call's coordinates (`rng::mix`):
//! - a call that **fails** (a backend error; nothing done);
//! - a call that **stalls** (hangs past any call timeout; nothing done);
//! - a **slow** call (answers after up to 3 s: done late, or not at all when the
//!   caller's timeout dropped it first);
//! - a **lost answer** (done at the registry, then the connection drops: the
//!   caller sees an error for something that happened);
//! - per node, set by the driver: the **link down** (every call refused at
//!   once) or **blackholed** (every call hangs);
//! - set by the driver, for the whole registry: an **overload**
//!   ([`SimRegistry::overload`]): until a given time, most report writes
//!   (`persist`, `clean stop`) and some renewals hang past the caller's
//!   timeout, as on a coordinator serving a crowd, so live peers' reports
//!   go stale by tens of seconds while their leases hold;
//! - set by the driver, for the whole registry: a **failover to a stale
//!   replica** ([`SimRegistry::fail_over_to_stale_replica`]): the store rolls
//!   back to a prefix of its history (one of the snapshots it takes every
//!   second, up to 30 s old) and a new epoch begins, as Redis's or SQL's
//!   epoch check begins one on a promoted replica. Claims are then held
//!   (`Held`) for the lease TTL plus the mark window; a renewal or mark in
//!   an older epoch is `LeaseLost` and first raises the epoch's floor (every
//!   claim's mark) to the highest mark the caller's process ever sent, as
//!   the real registries do; a holder may register again
//!   ([`WorkerRegistry::register_again`]) under that method's rules.
//!
//! What `peers` tells of each report ([`ReportClocks`]): its age by the
//! registry's clock (as SQL, Redis and ZooKeeper do), the revisions of its
//! write and of the read (etcd), or nothing; and it may read a random
//! sample of the live reports, as etcd, Redis and ZooKeeper do on a large
//! fleet ([`SimRegistry::with_reports`]).
//!
//! [`Flaw`] breaks one rule of the contract on purpose, for the tests that
//! prove the checker catches a broken registry.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use idmint_registry::{
    Claim, FLEET_RECENT, FleetMember, Lease, NodeIdentity, PeerReport, RegistryError,
    ReportRevision, WorkerRegistry,
};
use jiff::Timestamp;
use tokio::time::Instant;

use super::rng::{below, mix, uniform, unit};
use super::time::NodeTime;
use super::trace::{Trace, What, text};

const KIND: &str = "sim";

/// One rule of the contract broken on purpose (`IDMINT_SIM_FLAW`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// Claims ignore live leases: a worker is handed out while held.
    ShareLiveWorkers,
    /// Claims don't return the stored mark: a new holder starts at its own
    /// clock, however far behind.
    ForgetMarks,
    /// Leases run out after half the TTL the holder was told.
    EarlyExpiry,
    /// `renew` and `persist_mark` don't check the token: a stale holder
    /// renews over the new one and goes on.
    Unfenced,
    /// After a failover to a stale replica, claims are not held and the
    /// floor is not applied: a worker whose live holder has not registered
    /// again yet is handed out from the rolled-back marks.
    NoHold,
}

/// Which registry a [`Flaw`] breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Workers,
    Oracle,
    Both,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Workers => "workers",
            Target::Oracle => "oracle",
            Target::Both => "both",
        }
    }

    pub fn hits(self, registry: &str) -> bool {
        self == Target::Both || self.name() == registry
    }
}

impl Flaw {
    /// `NAME` (both registries), `NAME:workers` or `NAME:oracle`.
    pub fn parse_with_target(text: &str) -> Option<(Flaw, Target)> {
        let (name, target) = text.split_once(':').unwrap_or((text, "both"));
        let target = [Target::Workers, Target::Oracle, Target::Both]
            .into_iter()
            .find(|t| t.name() == target)?;
        Some((Flaw::parse(name)?, target))
    }

    pub const ALL: [Flaw; 5] = [
        Flaw::ShareLiveWorkers,
        Flaw::ForgetMarks,
        Flaw::EarlyExpiry,
        Flaw::Unfenced,
        Flaw::NoHold,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Flaw::ShareLiveWorkers => "share-live-workers",
            Flaw::ForgetMarks => "forget-marks",
            Flaw::EarlyExpiry => "early-expiry",
            Flaw::Unfenced => "unfenced",
            Flaw::NoHold => "no-hold",
        }
    }

    pub fn parse(name: &str) -> Option<Flaw> {
        Flaw::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// What `peers` tells of each report beside its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportClocks {
    /// Its age by the registry's clock (SQL, Redis, ZooKeeper).
    Ages,
    /// The revisions of its write and of the read (etcd).
    Revisions,
    /// Nothing (an idmint before ages).
    Unknown,
}

/// During an overload, the share of report writes (`persist`, `clean
/// stop`) and of renewals that hang past the caller's timeout.
const OVERLOAD_DROPS_REPORTS: f64 = 0.9;
const OVERLOAD_DROPS_RENEWALS: f64 = 0.3;

/// How often each per-call fault strikes (probabilities per call).
#[derive(Debug, Clone, Copy)]
pub struct CallFaults {
    pub fail: f64,
    pub stall: f64,
    pub slow: f64,
    pub lost: f64,
}

impl CallFaults {
    pub const NONE: CallFaults = CallFaults {
        fail: 0.0,
        stall: 0.0,
        slow: 0.0,
        lost: 0.0,
    };

    pub const DEFAULT: CallFaults = CallFaults {
        fail: 0.01,
        stall: 0.005,
        slow: 0.02,
        lost: 0.005,
    };
}

/// A node machine's network, as the driver breaks it: until these true
/// times, every call is refused, or hangs.
#[derive(Debug, Default)]
pub struct Net {
    pub down_until: AtomicU64,
    pub blackhole_until: AtomicU64,
}

/// Counts of what the registry injected, for the run's summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct Injected {
    pub calls: u64,
    pub failed: u64,
    pub stalled: u64,
    pub slow: u64,
    pub lost: u64,
    pub refused: u64,
    pub blackholed: u64,
    pub lease_lost: u64,
    pub exhausted: u64,
    /// Clean stops recorded (the mark set to what the holder issued).
    pub clean_stops: u64,
    /// Claims whose stored mark was a clean stop's record.
    pub claims_after_clean_stop: u64,
    /// Failovers to a stale replica (new epochs).
    pub failovers: u64,
    /// Claims refused while a new epoch held them.
    pub held: u64,
    /// Holders that registered again in a new epoch.
    pub registered_again: u64,
    /// Registrations again refused (the worker held by another, a higher
    /// mark stored, or the claim of the current epoch).
    pub register_refused: u64,
    /// Report writes and renewals an overload dropped (hung).
    pub overloaded: u64,
    /// The oldest report (by the registry's clock) a peers read returned.
    pub stalest_report: Duration,
}

#[derive(Debug)]
pub struct SimRegistry {
    /// `workers` or `oracle`: which namespace, in traces.
    pub name: &'static str,
    ttl: Duration,
    /// The keepers' mark window: a new epoch holds claims for `ttl` plus it.
    window: Duration,
    flaw: Option<Flaw>,
    seed: u64,
    faults: CallFaults,
    reports: ReportClocks,
    /// `peers` reads a random sample of this many live reports.
    sample: Option<usize>,
    state: Mutex<State>,
    trace: Arc<Trace>,
}

/// A stored report: the peer's time, and when (true time) and at which
/// revision the registry stored it.
#[derive(Debug, Clone, Copy)]
struct Report {
    reported: Timestamp,
    at: u64,
    revision: u64,
}

#[derive(Debug, Default)]
struct State {
    /// The registry's clock: true nanoseconds, the latest any caller reached.
    now: u64,
    holders: BTreeMap<u32, Holding>,
    marks: BTreeMap<u32, Timestamp>,
    /// Workers whose mark is a clean stop's record (no persist since).
    clean: std::collections::BTreeSet<u32>,
    reports: BTreeMap<u32, Report>,
    /// Counts report writes: a report's revision.
    revision: u64,
    /// Until this true time, report writes and renewals are mostly dropped.
    overload_until: u64,
    /// Holdings that ended (released, or expired and taken over), for `fleet`.
    ended: BTreeMap<u32, (NodeIdentity, u64)>,
    /// Every claim's stored mark is raised to it (a new epoch's floor).
    floor: Option<Timestamp>,
    /// The epoch: a failover to a stale replica begins a new one. Every
    /// token names the epoch it was granted in.
    epoch: u64,
    /// Claims are held until this true time (a new epoch's hold).
    hold_until: u64,
    /// What the store held, once a second, oldest first: the prefixes of
    /// its history a stale replica may have.
    history: std::collections::VecDeque<(u64, Stored)>,
    tokens: u64,
    injected: Injected,
}

/// What a replica copies: everything the store holds, but the epoch's
/// counters (a new epoch is begun on it by the failover).
#[derive(Debug, Clone)]
struct Stored {
    holders: BTreeMap<u32, Holding>,
    marks: BTreeMap<u32, Timestamp>,
    clean: std::collections::BTreeSet<u32>,
    reports: BTreeMap<u32, Report>,
    ended: BTreeMap<u32, (NodeIdentity, u64)>,
    floor: Option<Timestamp>,
}

/// How often the store is copied, and how far back a stale replica may be.
const SNAPSHOT_EVERY: u64 = 1_000_000_000;
const MAX_LAG: usize = 30;

impl State {
    fn stored(&self) -> Stored {
        Stored {
            holders: self.holders.clone(),
            marks: self.marks.clone(),
            clean: self.clean.clone(),
            reports: self.reports.clone(),
            ended: self.ended.clone(),
            floor: self.floor,
        }
    }

    /// Copies the store when a second has passed since the last copy.
    fn snapshot(&mut self) {
        if self
            .history
            .back()
            .is_some_and(|(at, _)| self.now < at + SNAPSHOT_EVERY)
        {
            return;
        }
        let copy = self.stored();
        self.history.push_back((self.now, copy));
        while self.history.len() > MAX_LAG {
            self.history.pop_front();
        }
    }
}

/// The epoch a token was granted in (`<name>-<epoch>-<n>`).
fn token_epoch(token: &str) -> u64 {
    token
        .split('-')
        .nth(1)
        .and_then(|e| e.parse().ok())
        .unwrap_or(u64::MAX)
}

#[derive(Debug, Clone)]
struct Holding {
    token: String,
    node: NodeIdentity,
    /// True nanoseconds at which the lease runs out.
    expires: u64,
}

impl SimRegistry {
    pub fn new(
        name: &'static str,
        ttl: Duration,
        seed: u64,
        faults: CallFaults,
        flaw: Option<Flaw>,
        trace: Arc<Trace>,
    ) -> SimRegistry {
        SimRegistry {
            name,
            ttl,
            // The keepers' default window, which every simulated node runs.
            window: Duration::from_secs(3),
            flaw,
            seed,
            faults,
            reports: ReportClocks::Unknown,
            sample: None,
            state: Mutex::new(State::default()),
            trace,
        }
    }

    /// What `peers` tells of each report, and whether it reads a sample.
    pub fn with_reports(mut self, reports: ReportClocks, sample: Option<usize>) -> SimRegistry {
        self.reports = reports;
        self.sample = sample;
        self
    }

    /// An overload until true time `until`: most report writes and some
    /// renewals hang from now on.
    pub fn overload(&self, until: u64) {
        let mut s = self.state.lock().unwrap();
        s.overload_until = s.overload_until.max(until);
    }

    /// The share of `op` calls an overload drops at true time `g`.
    fn overload_drops(&self, op: &str, g: u64) -> f64 {
        if g >= self.state.lock().unwrap().overload_until {
            return 0.0;
        }
        match op {
            "persist" | "clean stop" => OVERLOAD_DROPS_REPORTS,
            "renew" => OVERLOAD_DROPS_RENEWALS,
            _ => 0.0,
        }
    }

    fn store_report(s: &mut State, worker: u32, reported: Timestamp) {
        s.revision += 1;
        let report = Report {
            reported,
            at: s.now,
            revision: s.revision,
        };
        s.reports.insert(worker, report);
    }

    pub fn injected(&self) -> Injected {
        self.state.lock().unwrap().injected
    }

    /// A failover to a stale replica at true time `now`: the store rolls
    /// back to the copy `pick` chooses among those of the last [`MAX_LAG`]
    /// seconds, and a new epoch begins, its claims held for the lease TTL
    /// plus the window (what the real registries' epoch check does on a
    /// promoted replica). Returns how far back it went.
    pub fn fail_over_to_stale_replica(&self, now: u64, pick: u64) -> Duration {
        let mut s = self.state.lock().unwrap();
        s.now = s.now.max(now);
        let at = if s.history.is_empty() {
            s.now
        } else {
            let i = below(pick, s.history.len() as u64) as usize;
            let (at, copy) = s.history[i].clone();
            s.holders = copy.holders;
            s.marks = copy.marks;
            s.clean = copy.clean;
            s.reports = copy.reports;
            s.ended = copy.ended;
            s.floor = copy.floor;
            // Nothing after the copy happened on this replica.
            s.history.truncate(i + 1);
            at
        };
        s.epoch += 1;
        let hold = u64::try_from((self.ttl + self.window).as_nanos()).expect("fits");
        s.hold_until = s.now + hold;
        s.injected.failovers += 1;
        Duration::from_nanos(s.now - at)
    }

    fn held(&self, s: &mut State) -> Result<(), RegistryError> {
        if s.now < s.hold_until && self.flaw != Some(Flaw::NoHold) {
            s.injected.held += 1;
            return Err(RegistryError::Held {
                registry: KIND,
                retry_after: Duration::from_nanos(s.hold_until - s.now),
                reason: "the registry failed over to a stale replica".to_owned(),
            });
        }
        Ok(())
    }

    /// A claim's stored mark: the worker's, raised to the epoch's floor.
    fn stored_mark(&self, s: &State, worker: u32) -> Option<Timestamp> {
        match self.flaw {
            Some(Flaw::ForgetMarks) => None,
            Some(Flaw::NoHold) => s.marks.get(&worker).copied(),
            _ => s.marks.get(&worker).copied().max(s.floor),
        }
    }

    fn lease_ns(&self) -> u64 {
        let ttl = match self.flaw {
            Some(Flaw::EarlyExpiry) => self.ttl / 2,
            _ => self.ttl,
        };
        u64::try_from(ttl.as_nanos()).expect("fits")
    }

    fn lease(&self, sent: Instant) -> Lease {
        Lease {
            ttl: self.ttl,
            valid_until: (sent + self.ttl).into_std(),
        }
    }

    fn hold(&self, s: &mut State, worker: u32, node: &NodeIdentity, sent: Instant) -> Claim {
        if let Some(old) = s.holders.remove(&worker) {
            s.ended.insert(worker, (old.node, old.expires));
        }
        s.tokens += 1;
        let token = format!("{}-{}-{}", self.name, s.epoch, s.tokens);
        s.holders.insert(
            worker,
            Holding {
                token: token.clone(),
                node: node.clone(),
                expires: s.now + self.lease_ns(),
            },
        );
        let stored_mark = self.stored_mark(s, worker);
        if s.clean.contains(&worker) {
            s.injected.claims_after_clean_stop += 1;
        }
        Claim {
            worker,
            stored_mark,
            lease: Some(self.lease(sent)),
            token,
        }
    }

    fn is_free(s: &State, worker: u32) -> bool {
        s.holders.get(&worker).is_none_or(|h| h.expires <= s.now)
    }

    /// The fence: `claim` is the live holding of its worker, in this epoch.
    /// A claim of an earlier epoch first raises the floor to `highest`, the
    /// highest mark the caller's process ever sent (as the real registries
    /// raise it when a holder finds its epoch gone).
    fn check(
        &self,
        s: &mut State,
        claim: &Claim,
        highest: Option<Timestamp>,
    ) -> Result<(), RegistryError> {
        if token_epoch(&claim.token) != s.epoch {
            s.floor = s.floor.max(highest);
            s.injected.lease_lost += 1;
            return Err(RegistryError::LeaseLost {
                registry: KIND,
                worker: claim.worker,
                reason: "the registry's epoch changed".to_owned(),
            });
        }
        let why = match s.holders.get(&claim.worker) {
            Some(h) if h.token == claim.token && h.expires > s.now => return Ok(()),
            Some(h) if h.token == claim.token => "the lease ran out",
            Some(_) => "another node holds the worker",
            None => "the worker is not held",
        };
        s.injected.lease_lost += 1;
        Err(RegistryError::LeaseLost {
            registry: KIND,
            worker: claim.worker,
            reason: why.to_owned(),
        })
    }

    fn claim(
        &self,
        s: &mut State,
        node_idx: usize,
        node: &NodeIdentity,
        range: u32,
        sent: Instant,
    ) -> Result<Claim, RegistryError> {
        if range == 0 {
            return Err(RegistryError::Config {
                registry: KIND,
                message: "worker range 0..0 has no worker IDs to claim".to_owned(),
            });
        }
        self.held(s)?;
        // Half the claims scan from a random start, as the real backends
        // do; the other half take the free worker whose last holder stopped
        // most recently: any free worker may be granted, and that one is
        // where a takeover can go wrong (its holder may still be paused,
        // cut off, or ahead of the claimant's clock).
        let pick = mix(&[self.seed, 0xc1a1, node_idx as u64, s.now]);
        let start = below(pick, u64::from(range)) as u32;
        if self.flaw == Some(Flaw::ShareLiveWorkers) {
            return Ok(self.hold(s, start, node, sent));
        }
        let free = if pick & 1 == 0 {
            (0..range)
                .map(|i| (start + i) % range)
                .find(|&w| Self::is_free(s, w))
        } else {
            (0..range).filter(|&w| Self::is_free(s, w)).max_by_key(|w| {
                let held = s.holders.get(w).map(|h| h.expires);
                let ended = s.ended.get(w).map(|(_, at)| *at);
                (held.max(ended), u32::MAX - w)
            })
        };
        match free {
            Some(w) => Ok(self.hold(s, w, node, sent)),
            None => {
                s.injected.exhausted += 1;
                Err(RegistryError::Exhausted {
                    registry: KIND,
                    in_use: u64::from(range),
                    range: u64::from(range),
                })
            }
        }
    }

    fn claim_worker(
        &self,
        s: &mut State,
        node: &NodeIdentity,
        worker: u32,
        range: u32,
        sent: Instant,
    ) -> Result<Claim, RegistryError> {
        if worker >= range {
            return Err(RegistryError::Config {
                registry: KIND,
                message: format!("worker {worker} is out of range 0..{range}"),
            });
        }
        self.held(s)?;
        if !Self::is_free(s, worker) && self.flaw != Some(Flaw::ShareLiveWorkers) {
            return Err(RegistryError::WorkerTaken {
                registry: KIND,
                worker,
                node: node.to_string(),
                holder: s.holders[&worker].node.to_string(),
                origin: None,
            });
        }
        Ok(self.hold(s, worker, node, sent))
    }

    fn renew(
        &self,
        s: &mut State,
        node: &NodeIdentity,
        claim: &Claim,
        sent: Instant,
        highest: Option<Timestamp>,
    ) -> Result<Option<Lease>, RegistryError> {
        if self.flaw == Some(Flaw::Unfenced) {
            // Renews by worker alone: whoever holds it now is overwritten.
            let expires = s.now + self.lease_ns();
            s.holders.insert(
                claim.worker,
                Holding {
                    token: claim.token.clone(),
                    node: node.clone(),
                    expires,
                },
            );
            return Ok(Some(self.lease(sent)));
        }
        self.check(s, claim, highest)?;
        let expires = s.now + self.lease_ns();
        s.holders.get_mut(&claim.worker).expect("checked").expires = expires;
        Ok(Some(self.lease(sent)))
    }

    /// [`WorkerRegistry::register_again`]'s rules: a claim of an earlier
    /// epoch, its worker free, still its own or already this registration's,
    /// no higher mark stored.
    fn register_again(
        &self,
        s: &mut State,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
        sent: Instant,
    ) -> Result<Claim, RegistryError> {
        let refuse = |s: &mut State, why: String| {
            s.injected.register_refused += 1;
            Err(RegistryError::LeaseLost {
                registry: KIND,
                worker: claim.worker,
                reason: format!("register again: {why}"),
            })
        };
        if token_epoch(&claim.token) == s.epoch {
            return refuse(s, "the lease was lost within its epoch".to_owned());
        }
        // Every try of one registration asks with the same new token, as
        // the real registries do: a try whose answer was lost left the
        // worker under it, and the next try takes it as its own.
        let token = format!("{}-{}-again-{}", self.name, s.epoch, claim.token);
        if let Some(h) = s.holders.get(&claim.worker)
            && h.token != claim.token
            && h.token != token
            && h.expires > s.now
        {
            let why = format!("the new epoch shows the worker held by {}", h.node);
            return refuse(s, why);
        }
        let stored = s.marks.get(&claim.worker).copied();
        if stored.is_some_and(|m| m > mark) {
            return refuse(s, format!("a higher mark is stored ({stored:?})"));
        }
        let mut again = self.hold(s, claim.worker, node, sent);
        s.holders.get_mut(&claim.worker).expect("just held").token = token.clone();
        again.token = token;
        again.stored_mark = Some(mark);
        let m = s.marks.entry(claim.worker).or_insert(mark);
        *m = (*m).max(mark);
        s.clean.remove(&claim.worker);
        s.injected.registered_again += 1;
        Ok(again)
    }

    fn persist_mark(
        &self,
        s: &mut State,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
        highest: Option<Timestamp>,
    ) -> Result<(), RegistryError> {
        if self.flaw != Some(Flaw::Unfenced) {
            self.check(s, claim, highest)?;
        }
        let m = s.marks.entry(claim.worker).or_insert(mark);
        *m = (*m).max(mark);
        s.clean.remove(&claim.worker);
        Self::store_report(s, claim.worker, reported);
        Ok(())
    }

    fn record_clean_stop(
        &self,
        s: &mut State,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
        highest: Option<Timestamp>,
    ) -> Result<(), RegistryError> {
        self.check(s, claim, highest)?;
        s.marks.insert(claim.worker, high);
        s.clean.insert(claim.worker);
        s.injected.clean_stops += 1;
        Self::store_report(s, claim.worker, reported);
        Ok(())
    }

    fn peers(&self, s: &mut State, claim: &Claim) -> Vec<PeerReport> {
        let mut live: Vec<(u32, Report)> = s
            .holders
            .iter()
            .filter(|(w, h)| **w != claim.worker && h.expires > s.now)
            .filter_map(|(w, _)| s.reports.get(w).map(|r| (*w, *r)))
            .collect();
        if let Some(n) = self.sample {
            // A partial Fisher-Yates shuffle, seeded by the read.
            let key = mix(&[self.seed, 0x5a3b, u64::from(claim.worker), s.now]);
            for i in 0..n.min(live.len()) {
                let j = i + below(mix(&[key, i as u64]), (live.len() - i) as u64) as usize;
                live.swap(i, j);
            }
            live.truncate(n);
            live.sort_by_key(|(w, _)| *w);
        }
        let now = s.now;
        let read = s.revision;
        let mut stalest = s.injected.stalest_report;
        let peers = live
            .into_iter()
            .map(|(w, r)| {
                let age = Duration::from_nanos(now - r.at);
                stalest = stalest.max(age);
                let report = PeerReport::new(w, r.reported);
                match self.reports {
                    ReportClocks::Ages => report.with_age(age),
                    ReportClocks::Revisions => report.with_revision(ReportRevision {
                        written: i64::try_from(r.revision).expect("fits"),
                        read: i64::try_from(read).expect("fits"),
                    }),
                    ReportClocks::Unknown => report,
                }
            })
            .collect();
        s.injected.stalest_report = stalest;
        peers
    }

    fn release(s: &mut State, claim: &Claim) {
        if s.holders
            .get(&claim.worker)
            .is_some_and(|h| h.token == claim.token)
        {
            let h = s.holders.remove(&claim.worker).expect("present");
            s.ended.insert(claim.worker, (h.node, s.now));
        }
    }

    fn fleet(s: &State) -> Vec<FleetMember> {
        let recent = u64::try_from(FLEET_RECENT.as_nanos()).expect("fits");
        let mut members = Vec::new();
        let workers: std::collections::BTreeSet<u32> =
            s.holders.keys().chain(s.ended.keys()).copied().collect();
        for w in workers {
            let live = s.holders.get(&w).filter(|h| h.expires > s.now);
            let (node, live, left) = match (live, s.holders.get(&w), s.ended.get(&w)) {
                (Some(h), _, _) => (h.node.clone(), true, h.expires - s.now),
                (None, Some(h), _) if s.now - h.expires < recent => (h.node.clone(), false, 0),
                (None, None, Some((node, at))) if s.now - at < recent => (node.clone(), false, 0),
                _ => continue,
            };
            let mut m = FleetMember::new(w).with_node(&node);
            m.live = live;
            m.lease_left = Some(Duration::from_nanos(left));
            m.reported = s.reports.get(&w).map(|r| r.reported);
            m.mark = s.marks.get(&w).copied();
            members.push(m);
        }
        members
    }
}

/// One node process's connection to a [`SimRegistry`]: what its keeper holds.
#[derive(Debug)]
pub struct SimLink {
    reg: Arc<SimRegistry>,
    /// The highest mark this process ever sent (persisted, recorded or
    /// registered), as the real registries track it for the floor.
    highest: Mutex<Option<Timestamp>>,
    node: usize,
    incarnation: u32,
    identity: NodeIdentity,
    time: NodeTime,
    net: Arc<Net>,
}

/// What one call does to the registry's state, run when (and if) the call
/// reaches it.
type Op<'a, T> =
    Box<dyn FnOnce(&SimRegistry, &mut State, Instant) -> Result<T, RegistryError> + Send + 'a>;

impl SimLink {
    pub fn new(
        reg: Arc<SimRegistry>,
        node: usize,
        incarnation: u32,
        identity: NodeIdentity,
        time: NodeTime,
        net: Arc<Net>,
    ) -> SimLink {
        SimLink {
            reg,
            highest: Mutex::new(None),
            node,
            incarnation,
            identity,
            time,
            net,
        }
    }

    fn event(&self, at: u64, op: &'static str, worker: Option<u32>, outcome: String) {
        self.reg.trace.push(
            at,
            self.node,
            What::Call {
                reg: self.reg.name,
                op,
                worker,
                outcome,
            },
        );
    }

    /// Notes a mark about to be sent: the highest raises a new epoch's floor.
    fn note(&self, mark: Timestamp) {
        let mut h = self.highest.lock().unwrap();
        *h = (*h).max(Some(mark));
    }

    fn highest(&self) -> Option<Timestamp> {
        *self.highest.lock().unwrap()
    }

    fn count(&self, f: impl FnOnce(&mut Injected)) {
        f(&mut self.reg.state.lock().unwrap().injected);
    }

    /// Runs `op` through the faults: refused, hung, failed, late, or done with
    /// its answer lost.
    async fn call<T: Describe>(
        &self,
        name: &'static str,
        worker: Option<u32>,
        op: Op<'_, T>,
    ) -> Result<T, RegistryError> {
        let sent = NodeTime::now();
        let g = self.time.global_of(sent);
        self.count(|i| i.calls += 1);
        if g < self.net.down_until.load(Ordering::Relaxed) {
            self.count(|i| i.refused += 1);
            self.event(g, name, worker, "refused: link down".to_owned());
            return Err(backend(name, "connection refused (link down)"));
        }
        if g < self.net.blackhole_until.load(Ordering::Relaxed) {
            self.count(|i| i.blackholed += 1);
            self.event(g, name, worker, "hangs: link blackholed".to_owned());
            return std::future::pending().await;
        }
        let r = self.reg.as_ref();
        let key = mix(&[
            r.seed,
            text(r.name),
            self.node as u64,
            u64::from(self.incarnation),
            text(name),
            g,
        ]);
        let u = unit(key);
        let f = r.faults;
        if u < f.fail {
            self.count(|i| i.failed += 1);
            self.event(g, name, worker, "failed (injected)".to_owned());
            return Err(backend(name, "injected failure"));
        }
        if u < f.fail + f.stall {
            self.count(|i| i.stalled += 1);
            self.event(g, name, worker, "stalls (injected)".to_owned());
            return std::future::pending().await;
        }
        if unit(mix(&[key, 3])) < r.overload_drops(name, g) {
            self.count(|i| i.overloaded += 1);
            self.event(
                g,
                name,
                worker,
                "hangs: the registry is overloaded".to_owned(),
            );
            return std::future::pending().await;
        }
        let lost = u >= f.fail + f.stall + f.slow && u < f.fail + f.stall + f.slow + f.lost;
        if u >= f.fail + f.stall && u < f.fail + f.stall + f.slow {
            self.count(|i| i.slow += 1);
            let delay = uniform(
                mix(&[key, 1]),
                Duration::from_millis(5),
                Duration::from_secs(3),
            );
            tokio::time::sleep(delay).await;
        }
        let (at, result) = {
            let mut s = r.state.lock().unwrap();
            s.now = s.now.max(self.time.global_of(NodeTime::now()));
            s.snapshot();
            let at = s.now;
            (at, op(r, &mut s, sent))
        };
        let text = match &result {
            Ok(v) => v.describe(),
            Err(e) => format!("error: {e}"),
        };
        if lost {
            self.count(|i| i.lost += 1);
            self.event(at, name, worker, format!("{text}; answer lost (injected)"));
            return Err(backend(name, "connection reset before the answer came"));
        }
        self.event(
            at,
            name,
            worker.or(result.as_ref().ok().and_then(Describe::worker)),
            text,
        );
        result
    }
}

fn backend(operation: &'static str, message: &str) -> RegistryError {
    RegistryError::Backend {
        registry: KIND,
        operation,
        message: message.to_owned(),
    }
}

/// A call's answer in a trace line.
trait Describe {
    fn describe(&self) -> String;
    fn worker(&self) -> Option<u32> {
        None
    }
}

impl Describe for Claim {
    fn describe(&self) -> String {
        format!(
            "granted worker {} (stored mark {})",
            self.worker,
            self.stored_mark
                .map_or_else(|| "none".to_owned(), |m| m.to_string())
        )
    }
    fn worker(&self) -> Option<u32> {
        Some(self.worker)
    }
}

impl Describe for Option<Lease> {
    fn describe(&self) -> String {
        "renewed".to_owned()
    }
}

impl Describe for () {
    fn describe(&self) -> String {
        "ok".to_owned()
    }
}

impl Describe for Vec<PeerReport> {
    fn describe(&self) -> String {
        format!("{} peers", self.len())
    }
}

impl Describe for Vec<FleetMember> {
    fn describe(&self) -> String {
        format!("{} members", self.len())
    }
}

/// A persist's answer, with the mark asked for.
struct Persisted(Timestamp);

impl Describe for Persisted {
    fn describe(&self) -> String {
        format!("mark {} persisted", self.0)
    }
}

#[async_trait]
impl WorkerRegistry for SimLink {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim, RegistryError> {
        let idx = self.node;
        self.call(
            "claim",
            None,
            Box::new(move |r, s, sent| r.claim(s, idx, node, range, sent)),
        )
        .await
    }

    async fn claim_worker(
        &self,
        node: &NodeIdentity,
        worker: u32,
        range: u32,
    ) -> Result<Claim, RegistryError> {
        self.call(
            "claim worker",
            Some(worker),
            Box::new(move |r, s, sent| r.claim_worker(s, node, worker, range, sent)),
        )
        .await
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>, RegistryError> {
        let node = &self.identity;
        let highest = self.highest();
        self.call(
            "renew",
            Some(claim.worker),
            Box::new(move |r, s, sent| r.renew(s, node, claim, sent, highest)),
        )
        .await
    }

    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> Result<Claim, RegistryError> {
        self.note(mark);
        self.call(
            "register again",
            Some(claim.worker),
            Box::new(move |r, s, sent| r.register_again(s, node, claim, mark, sent)),
        )
        .await
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        self.note(mark);
        let highest = self.highest();
        self.call(
            "persist",
            Some(claim.worker),
            Box::new(move |r, s, _| {
                r.persist_mark(s, claim, mark, reported, highest)
                    .map(|()| Persisted(mark))
            }),
        )
        .await
        .map(|_| ())
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        let highest = self.highest();
        self.call(
            "clean stop",
            Some(claim.worker),
            Box::new(move |r, s, _| {
                r.record_clean_stop(s, claim, high, reported, highest)
                    .map(|()| Persisted(high))
            }),
        )
        .await
        .map(|_| ())
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>, RegistryError> {
        self.call(
            "peers",
            Some(claim.worker),
            Box::new(move |r, s, _| Ok(r.peers(s, claim))),
        )
        .await
    }

    async fn release(&self, claim: &Claim) -> Result<(), RegistryError> {
        self.call(
            "release",
            Some(claim.worker),
            Box::new(move |_, s, _| {
                SimRegistry::release(s, claim);
                Ok(())
            }),
        )
        .await
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>, RegistryError> {
        self.call("fleet", None, Box::new(|_, s, _| Ok(SimRegistry::fleet(s))))
            .await
    }
}
