//! The registry an in-process node talks through: the shared client of the
//! real coordinator, with a count of every call, a switch that kills the
//! node, and the worker space the run allows.
//!
//! A killed node's calls fail at once, as a crashed process's would never
//! arrive: its claim is neither renewed nor released, and its lease runs out
//! at the coordinator as a dead pod's does.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint_registry::{
    Claim, FleetMember, Lease, NodeIdentity, PeerReport, RegistryError, WorkerRegistry,
};
use jiff::Timestamp;

/// Registry calls made by every node of the fleet, by kind. Writes change
/// what the coordinator holds (claim, renew, persist, release); reads don't
/// (peers, fleet).
#[derive(Debug, Default)]
pub struct Calls {
    writes: AtomicU64,
    reads: AtomicU64,
    failed: AtomicU64,
    /// How long each granted claim call took.
    claims: Mutex<Vec<Duration>>,
}

/// A reading of [`Calls`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCount {
    /// Claims, renewals, persisted marks and releases.
    pub writes: u64,
    /// Peer and fleet listings.
    pub reads: u64,
    /// Calls the coordinator failed or timed out (not a killed node's).
    pub failed: u64,
}

impl Calls {
    /// The times of the claims granted since the last call, emptied.
    pub fn take_claim_times(&self) -> Vec<Duration> {
        std::mem::take(&mut *self.claims.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The counts so far.
    pub fn read(&self) -> CallCount {
        CallCount {
            writes: self.writes.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

impl std::ops::Sub for CallCount {
    type Output = CallCount;

    fn sub(self, earlier: CallCount) -> CallCount {
        CallCount {
            writes: self.writes - earlier.writes,
            reads: self.reads - earlier.reads,
            failed: self.failed - earlier.failed,
        }
    }
}

/// One node's view of the shared registry.
#[derive(Debug)]
pub struct Tracked {
    inner: Arc<dyn WorkerRegistry>,
    calls: Arc<Calls>,
    alive: Arc<AtomicBool>,
    space: Arc<AtomicU32>,
}

impl Tracked {
    /// `inner` for one node, counting into `calls`; claims are made in at
    /// most `space` worker IDs (the run's worker space, below the layout's).
    pub fn new(
        inner: Arc<dyn WorkerRegistry>,
        calls: Arc<Calls>,
        space: Arc<AtomicU32>,
    ) -> Tracked {
        Tracked {
            inner,
            calls,
            alive: Arc::new(AtomicBool::new(true)),
            space,
        }
    }

    /// The switch [`kill`] turns off, for the node to keep.
    pub fn alive(&self) -> Arc<AtomicBool> {
        self.alive.clone()
    }

    fn check(&self, operation: &'static str) -> Result<(), RegistryError> {
        if self.alive.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err(RegistryError::Backend {
                registry: self.inner.kind(),
                operation,
                message: "this node was killed by the fleet harness".to_owned(),
            })
        }
    }

    fn count<T>(&self, write: bool, result: Result<T, RegistryError>) -> Result<T, RegistryError> {
        let counter = if write {
            &self.calls.writes
        } else {
            &self.calls.reads
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if result.is_err() {
            self.calls.failed.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

/// Turns a node's registry off: every later call fails at once.
pub fn kill(alive: &AtomicBool) {
    alive.store(false, Ordering::Relaxed);
}

#[async_trait]
impl WorkerRegistry for Tracked {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn reassigns_workers(&self) -> bool {
        self.inner.reassigns_workers()
    }

    async fn persist_local(&self, claim: &Claim, mark: Timestamp) -> Result<(), RegistryError> {
        self.inner.persist_local(claim, mark).await
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> Result<Claim, RegistryError> {
        self.check("claim")?;
        let range = range.min(self.space.load(Ordering::Relaxed));
        let began = Instant::now();
        let result = self.inner.claim(node, range).await;
        if result.is_ok() {
            let took = began.elapsed();
            self.calls
                .claims
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(took);
        }
        // Exhaustion is the registry's answer, not a failure: the start waits.
        let exhausted = matches!(result, Err(RegistryError::Exhausted { .. }));
        self.calls.writes.fetch_add(1, Ordering::Relaxed);
        if result.is_err() && !exhausted {
            self.calls.failed.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn renew(&self, claim: &Claim) -> Result<Option<Lease>, RegistryError> {
        self.check("renew")?;
        self.count(true, self.inner.renew(claim).await)
    }

    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> Result<Claim, RegistryError> {
        self.check("register again")?;
        self.count(true, self.inner.register_again(node, claim, mark).await)
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        self.check("persist mark")?;
        self.count(true, self.inner.persist_mark(claim, mark, reported).await)
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> Result<(), RegistryError> {
        self.check("record clean stop")?;
        self.count(
            true,
            self.inner.record_clean_stop(claim, high, reported).await,
        )
    }

    async fn peers(&self, claim: &Claim) -> Result<Vec<PeerReport>, RegistryError> {
        self.check("peers")?;
        self.count(false, self.inner.peers(claim).await)
    }

    async fn release(&self, claim: &Claim) -> Result<(), RegistryError> {
        self.check("release")?;
        self.count(true, self.inner.release(claim).await)
    }

    async fn fleet(&self) -> Result<Vec<FleetMember>, RegistryError> {
        self.check("fleet")?;
        self.count(false, self.inner.fleet().await)
    }
}
