//! What the server adds to the backends `idmint-node` opens: the key table
//! read from the store (`key_table`), the segment allocator with its leases
//! counted (`open_segments`), and the counting wrappers around the registry
//! and the store ([`CountingRegistry`], [`CountingStore`]) that feed the
//! failure metrics.

use std::sync::Arc;

use async_trait::async_trait;

use idmint_node::NodeError;
use idmint_node::config::{Config, Strategy};
use idmint_node::open::{allocator_on, open_floors, open_store};
use idmint_registry::{Claim, FleetMember, Lease, NodeIdentity, PeerReport, WorkerRegistry};
use idmint_segment::sql::SqlSegmentStore;
use idmint_segment::{KeyInfo, NewKey, SegmentAllocator, SegmentGrant, SegmentStore, StoreEpoch};
use jiff::Timestamp;

use crate::error::ServerError;
use crate::keys::{KeyMap, KeySource, KeySpec, KeyTable};
use crate::metrics::Metrics;

/// Every key's strategy at start: the declared keys, and the store's rows
/// as segment keys (so a key created through the admin API, or a row of a
/// Leaf or Tinyid table, stays a segment key across restarts).
pub(crate) async fn key_table(
    config: &Config,
    segments: &SegmentAllocator,
) -> Result<KeyTable, ServerError> {
    let stored = segments
        .store()
        .list()
        .await
        .map_err(|source| NodeError::Segment {
            what: "listing the segment store's keys".to_owned(),
            source,
        })?;
    let mut keys: KeyMap<KeySpec> = stored
        .into_iter()
        .map(|info| (info.key, KeySpec::new(Strategy::Segment, KeySource::Store)))
        .collect();
    for name in config.segment.keys.keys() {
        keys.insert(
            name.clone(),
            KeySpec::new(Strategy::Segment, KeySource::Declared),
        );
    }
    for (name, key) in &config.keys {
        keys.insert(
            name.clone(),
            KeySpec {
                strategy: key.strategy,
                public: key.public,
                source: KeySource::Declared,
            },
        );
    }
    let undeclared = config.undeclared_keys();
    tracing::info!(
        known = keys.len(),
        undeclared_keys = undeclared.name(),
        "keys resolved"
    );
    Ok(KeyTable::new(keys, undeclared))
}

/// The segment allocator on the configured store, keeping this node's
/// floors in `server.data_dir` (the floor file, locked for as long as the
/// allocator lives), and the store itself when it is Tinyid's table (for its
/// tokens).
pub(crate) async fn open_segments(
    config: &Config,
    metrics: Arc<Metrics>,
) -> Result<(SegmentAllocator, Option<Arc<SqlSegmentStore>>), ServerError> {
    let floors = open_floors(config)?;
    let (store, tinyid) = open_store(config).await?;
    let allocator = allocator_on(config, CountingStore::wrap(store, metrics), Some(floors))?;
    Ok((allocator, tinyid))
}

/// Counts a call as failed unless it is disarmed: a call dropped before it
/// finishes (the caller's timeout) counts too.
struct FailureGuard<F: FnMut()> {
    on_failure: Option<F>,
}

impl<F: FnMut()> FailureGuard<F> {
    fn new(on_failure: F) -> Self {
        FailureGuard {
            on_failure: Some(on_failure),
        }
    }

    fn finish<T, E>(mut self, result: Result<T, E>) -> Result<T, E> {
        if result.is_ok() {
            self.on_failure = None;
        }
        result
    }
}

impl<F: FnMut()> Drop for FailureGuard<F> {
    fn drop(&mut self) {
        if let Some(f) = &mut self.on_failure {
            f();
        }
    }
}

/// A [`WorkerRegistry`] that counts failed calls in
/// `idmint_registry_errors_total` and otherwise is the registry it wraps.
#[derive(Debug)]
pub(crate) struct CountingRegistry {
    inner: Arc<dyn WorkerRegistry>,
    metrics: Arc<Metrics>,
}

impl CountingRegistry {
    /// Wraps `inner`. The error counters of the keeper's calls start at 0,
    /// so `rate()` works before the first failure.
    pub(crate) fn wrap(
        inner: Arc<dyn WorkerRegistry>,
        metrics: Arc<Metrics>,
    ) -> Arc<dyn WorkerRegistry> {
        for operation in ["claim", "renew", "persist_mark", "peers", "release"] {
            // Registering shows the series at 0.
            metrics
                .registry_errors(inner.kind(), operation)
                .increment(0);
        }
        Arc::new(CountingRegistry { inner, metrics })
    }

    fn guard(&self, operation: &'static str) -> FailureGuard<impl FnMut() + '_> {
        let registry = self.inner.kind();
        FailureGuard::new(move || self.metrics.registry_error(registry, operation))
    }
}

type RegistryResult<T> = idmint_registry::Result<T>;

#[async_trait]
impl WorkerRegistry for CountingRegistry {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn reassigns_workers(&self) -> bool {
        self.inner.reassigns_workers()
    }

    async fn persist_local(&self, claim: &Claim, mark: Timestamp) -> RegistryResult<()> {
        self.inner.persist_local(claim, mark).await
    }

    async fn claim(&self, node: &NodeIdentity, range: u32) -> RegistryResult<Claim> {
        let guard = self.guard("claim");
        guard.finish(self.inner.claim(node, range).await)
    }

    async fn claim_worker(
        &self,
        node: &NodeIdentity,
        worker: u32,
        range: u32,
    ) -> RegistryResult<Claim> {
        let guard = self.guard("claim_worker");
        guard.finish(self.inner.claim_worker(node, worker, range).await)
    }

    async fn renew(&self, claim: &Claim) -> RegistryResult<Option<Lease>> {
        let guard = self.guard("renew");
        guard.finish(self.inner.renew(claim).await)
    }

    /// Forwarded: the trait's default refuses, which would cost every
    /// failover of the registry a hold.
    async fn register_again(
        &self,
        node: &NodeIdentity,
        claim: &Claim,
        mark: Timestamp,
    ) -> RegistryResult<Claim> {
        let guard = self.guard("register_again");
        guard.finish(self.inner.register_again(node, claim, mark).await)
    }

    async fn persist_mark(
        &self,
        claim: &Claim,
        mark: Timestamp,
        reported: Timestamp,
    ) -> RegistryResult<()> {
        let guard = self.guard("persist_mark");
        guard.finish(self.inner.persist_mark(claim, mark, reported).await)
    }

    async fn record_clean_stop(
        &self,
        claim: &Claim,
        high: Timestamp,
        reported: Timestamp,
    ) -> RegistryResult<()> {
        let guard = self.guard("record_clean_stop");
        guard.finish(self.inner.record_clean_stop(claim, high, reported).await)
    }

    async fn peers(&self, claim: &Claim) -> RegistryResult<Vec<PeerReport>> {
        let guard = self.guard("peers");
        guard.finish(self.inner.peers(claim).await)
    }

    async fn release(&self, claim: &Claim) -> RegistryResult<()> {
        let guard = self.guard("release");
        guard.finish(self.inner.release(claim).await)
    }

    /// Not counted: the listing is for the status page, not the keeper, and a
    /// registry that can't list would otherwise read as failing in alerts.
    async fn fleet(&self) -> RegistryResult<Vec<FleetMember>> {
        self.inner.fleet().await
    }
}

/// A [`SegmentStore`] that counts failed leases (`fetch`) in
/// `idmint_segment_lease_failures_total` and otherwise is the store it wraps.
#[derive(Debug)]
pub(crate) struct CountingStore {
    inner: Arc<dyn SegmentStore>,
    metrics: Arc<Metrics>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub(crate) fn wrap(
        inner: Arc<dyn SegmentStore>,
        metrics: Arc<Metrics>,
    ) -> Arc<dyn SegmentStore> {
        Arc::new(CountingStore { inner, metrics })
    }
}

type SegmentResult<T> = idmint_segment::Result<T>;

#[async_trait]
impl SegmentStore for CountingStore {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn fetch_above(
        &self,
        key: &str,
        step: Option<u64>,
        floor: u64,
    ) -> SegmentResult<SegmentGrant> {
        let store = self.inner.kind();
        let guard = FailureGuard::new(|| self.metrics.lease_failure(store, key));
        guard.finish(self.inner.fetch_above(key, step, floor).await)
    }

    async fn describe(&self, key: &str) -> SegmentResult<Option<KeyInfo>> {
        self.inner.describe(key).await
    }

    async fn create(&self, key: &NewKey) -> SegmentResult<KeyInfo> {
        self.inner.create(key).await
    }

    async fn list(&self) -> SegmentResult<Vec<KeyInfo>> {
        self.inner.list().await
    }

    async fn raise(&self, key: &NewKey) -> SegmentResult<KeyInfo> {
        self.inner.raise(key).await
    }

    fn keeps_epoch(&self) -> bool {
        self.inner.keeps_epoch()
    }

    async fn epoch(&self) -> SegmentResult<Option<StoreEpoch>> {
        self.inner.epoch().await
    }

    async fn init_epoch(&self, epoch: &StoreEpoch) -> SegmentResult<StoreEpoch> {
        self.inner.init_epoch(epoch).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Metrics {
        Metrics::new("test (127.0.0.1:1)".to_owned())
    }

    #[tokio::test]
    async fn failed_leases_are_counted_per_key() {
        let m = Arc::new(metrics());
        let store = CountingStore::wrap(Arc::new(idmint_segment::MemoryStore::new()), m.clone());
        store.create(&NewKey::new("order", 10)).await.unwrap();
        assert!(store.fetch("order", None).await.is_ok());
        assert!(store.fetch("missing", None).await.is_err());
        assert!(store.fetch("missing", None).await.is_err());
        let text = m.text();
        assert!(
            text.contains(r#"idmint_segment_lease_failures_total{store="memory",key="missing"} 2"#),
            "{text}"
        );
        assert!(!text.contains(r#"key="order""#), "{text}");
    }

    #[test]
    fn failure_guard_counts_errors_and_drops() {
        let count = std::cell::Cell::new(0);
        let bump = || count.set(count.get() + 1);
        let _ = FailureGuard::new(bump).finish(Ok::<(), ()>(()));
        let _ = FailureGuard::new(bump).finish(Err::<(), ()>(()));
        drop(FailureGuard::new(bump));
        assert_eq!(count.get(), 2);
    }
}
