//! The fleet view: every node as the worker registry sees it
//! ([`WorkerRegistry::fleet`]), for `GET /v1/admin/fleet` and the status
//! page's Fleet table.
//!
//! # One read every couple of seconds, shared
//! A status page left open polls every 2 s, and a fleet of nodes each with a
//! page open would otherwise read the whole registry that often per page.
//! [`FleetView`] keeps the last answer (a listing or a failure) for
//! [`FleetView::MIN_INTERVAL`] and lets one request read at a time: requests
//! that arrive while a read is under way wait for it and share its answer.
//! So one node reads the registry at most once per interval, however many
//! pages and scripts poll it.
//!
//! # Offsets
//! Each row's `offset_ms` is the node's last reported time minus this
//! node's clock at the moment the listing came back. It is not the clock
//! offset alone: a node reports every few seconds, so the figure also holds
//! how long ago it reported (a healthy peer reads up to one report interval
//! negative). A figure far outside that says a clock is off; the keeper's
//! start-up check (`RegistryError::ClockSkew`) uses the same reports.

use std::sync::Arc;
use std::time::Duration;

use idmint_core::clock::Clock;
use idmint_registry::{FleetMember, NodeIdentity, RegistryError, WorkerHandle, WorkerRegistry};
use serde::Serialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// How a fleet listing failed, kept (and shared) like a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FleetError {
    /// The registry error's stable code (`registry_unsupported`, ...).
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
    /// The registry can't list at all: asking again won't help.
    pub unsupported: bool,
}

impl From<RegistryError> for FleetError {
    fn from(e: RegistryError) -> FleetError {
        FleetError {
            code: e.code(),
            unsupported: matches!(e, RegistryError::Unsupported { .. }),
            message: e.to_string(),
        }
    }
}

/// One read of the registry.
#[derive(Debug, Clone)]
struct Read {
    /// When it came back, on tokio's monotonic clock (for the cache's age).
    at: Instant,
    /// When it came back, on this node's ID clock (Unix nanoseconds): the
    /// reading the offsets are taken from.
    read_at_nanos: i64,
    result: Result<Arc<Vec<FleetMember>>, FleetError>,
}

/// The registry's fleet, read at most once per [`FleetView::MIN_INTERVAL`].
///
/// - **Shared**: one read at a time; concurrent callers wait for it and get
///   its answer (a `tokio` mutex, held across the read on purpose).
/// - **Bounded**: the registry bounds its own call; a read that still takes
///   longer than [`FleetView::READ_TIMEOUT`] fails as a timeout.
/// - **Failures are cached too**, so a failing registry isn't asked more
///   often than a healthy one.
#[derive(Debug)]
pub(crate) struct FleetView {
    registry: Arc<dyn WorkerRegistry>,
    node: NodeIdentity,
    last: Mutex<Option<Read>>,
}

impl FleetView {
    /// The shortest time between two reads of the registry.
    pub(crate) const MIN_INTERVAL: Duration = Duration::from_secs(2);
    /// The longest one read may take, above the registry's own timeout.
    pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(10);
    /// Offsets beyond this show as a warning: the keeper's default peer
    /// skew threshold, which a start-up check would refuse.
    pub(crate) const WARN_OFFSET: Duration = Duration::from_secs(10);

    /// A view of `registry`'s fleet, from `node` (this server).
    pub(crate) fn new(registry: Arc<dyn WorkerRegistry>, node: NodeIdentity) -> FleetView {
        FleetView {
            registry,
            node,
            last: Mutex::new(None),
        }
    }

    /// The last read if it is fresh, else a new one.
    async fn read(&self, clock: &dyn Clock) -> Read {
        let mut last = self.last.lock().await;
        if let Some(read) = last
            .as_ref()
            .filter(|r| r.at.elapsed() < Self::MIN_INTERVAL)
        {
            return read.clone();
        }
        let result = match tokio::time::timeout(Self::READ_TIMEOUT, self.registry.fleet()).await {
            Ok(Ok(members)) => Ok(Arc::new(members)),
            Ok(Err(e)) => Err(FleetError::from(e)),
            Err(_) => Err(FleetError::from(RegistryError::Timeout {
                registry: self.registry.kind(),
                operation: "list fleet",
                after: Self::READ_TIMEOUT,
            })),
        };
        let read = Read {
            at: Instant::now(),
            read_at_nanos: clock.now_nanos(),
            result,
        };
        *last = Some(read.clone());
        read
    }
}

/// `GET /v1/admin/fleet`'s answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Fleet {
    /// How old the listing is, in milliseconds (it is shared for
    /// `min_interval_ms`).
    age_ms: u64,
    /// Every holder the registry lists.
    fleet: Vec<FleetRow>,
    /// The least time between two reads of the registry, in milliseconds.
    min_interval_ms: u64,
    /// This node's identity (`host:port`).
    node: String,
    /// What `offset_ms` measures.
    offset_note: &'static str,
    /// When the listing came back, by this node's clock (RFC 3339).
    read_at: Option<String>,
    /// The worker registry (`snowflake.registry`).
    registry: &'static str,
    /// An offset beyond this, in milliseconds, is worth a look.
    warn_offset_ms: u64,
    /// This node's worker ID.
    worker: u32,
}

/// A holder of a worker ID, as the registry lists it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct FleetRow {
    /// Its address, where the registry stored one.
    address: Option<String>,
    /// Its host name, where the registry stored one.
    host: Option<String>,
    /// Milliseconds left on its lease; `null` without expiry.
    lease_left_ms: Option<u64>,
    /// Whether its lease is live.
    live: bool,
    /// Its stored high-water mark (RFC 3339).
    mark: Option<String>,
    /// Its last report minus this node's clock at `read_at`, in milliseconds.
    offset_ms: Option<f64>,
    /// Its HTTP port, where the registry stored one.
    port: Option<u16>,
    /// Its last reported time (RFC 3339).
    reported: Option<String>,
    /// Whether the row is this node.
    this_node: bool,
    /// The worker ID.
    worker: u32,
}

/// What `GET /v1/admin/fleet` answers: the listing with each row's offset
/// and this node's row marked: `view` read with `clock` (the ID clock, whose
/// reading the offsets are taken from), `worker` the ID this node holds.
///
/// # Errors
/// The listing's failure ([`FleetError`]), as the registry gave it.
pub(crate) async fn snapshot(
    view: &FleetView,
    clock: &dyn Clock,
    worker: &WorkerHandle,
) -> Result<Fleet, FleetError> {
    let read = view.read(clock).await;
    let members = read.result?;
    let read_at = jiff::Timestamp::from_nanosecond(i128::from(read.read_at_nanos)).ok();
    let worker = worker.worker();
    let rows: Vec<FleetRow> = members
        .iter()
        .map(|m| {
            // A worker ID has one live holder: the same ID, and our identity
            // where the registry stored one.
            let identity_unknown = m.address.is_none() && m.port.is_none();
            let this_node =
                m.live && m.worker == worker && (m.is_node(&view.node) || identity_unknown);
            let offset_ms = m.reported.map(|r| {
                let nanos = r.as_nanosecond() - i128::from(read.read_at_nanos);
                (nanos as f64 / 1e3).round() / 1e3
            });
            FleetRow {
                address: m.address.clone(),
                host: m.host.clone(),
                lease_left_ms: m
                    .lease_left
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                live: m.live,
                mark: m.mark.map(|t| t.to_string()),
                offset_ms,
                port: m.port,
                reported: m.reported.map(|t| t.to_string()),
                this_node,
                worker: m.worker,
            }
        })
        .collect();
    Ok(Fleet {
        age_ms: u64::try_from(read.at.elapsed().as_millis()).unwrap_or(u64::MAX),
        fleet: rows,
        min_interval_ms: FleetView::MIN_INTERVAL.as_millis() as u64,
        node: view.node.to_string(),
        offset_note: "offset_ms = the node's last reported time minus this node's clock at \
                      read_at; it includes how long ago the node reported (up to its report \
                      interval), not only the clock offset",
        read_at: read_at.map(|t| t.to_string()),
        registry: view.registry.kind(),
        warn_offset_ms: FleetView::WARN_OFFSET.as_millis() as u64,
        worker,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use async_trait::async_trait;
    use idmint_core::clock::ManualClock;
    use idmint_registry::{Claim, Lease, PeerReport};
    use jiff::Timestamp;

    use super::*;

    /// Counts listings; fails them when asked to.
    #[derive(Debug, Default)]
    struct Counting {
        reads: AtomicU32,
        fail: bool,
    }

    #[async_trait]
    impl WorkerRegistry for Counting {
        fn kind(&self) -> &'static str {
            "counting"
        }
        async fn claim(&self, _: &NodeIdentity, _: u32) -> idmint_registry::Result<Claim> {
            unreachable!("not claimed in these tests")
        }
        async fn renew(&self, _: &Claim) -> idmint_registry::Result<Option<Lease>> {
            Ok(None)
        }
        async fn persist_mark(
            &self,
            _: &Claim,
            _: Timestamp,
            _: Timestamp,
        ) -> idmint_registry::Result<()> {
            Ok(())
        }
        async fn peers(&self, _: &Claim) -> idmint_registry::Result<Vec<PeerReport>> {
            Ok(Vec::new())
        }
        async fn release(&self, _: &Claim) -> idmint_registry::Result<()> {
            Ok(())
        }
        async fn fleet(&self) -> idmint_registry::Result<Vec<FleetMember>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            // Long enough for concurrent callers to queue behind this read.
            tokio::time::sleep(Duration::from_millis(50)).await;
            if self.fail {
                return Err(RegistryError::Unsupported {
                    registry: "counting",
                    operation: "listing the fleet",
                    reason: None,
                });
            }
            Ok(vec![FleetMember::new(3)])
        }
    }

    fn node() -> NodeIdentity {
        NodeIdentity {
            host: "h".into(),
            address: "10.0.0.1".into(),
            port: 80,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_and_repeated_reads_share_one_listing_per_interval() {
        let registry = Arc::new(Counting::default());
        let view = Arc::new(FleetView::new(registry.clone(), node()));
        let clock = Arc::new(ManualClock::at_millis(1_795_219_200_000));
        let readers: Vec<_> = (0..8)
            .map(|_| {
                let (view, clock) = (view.clone(), clock.clone());
                tokio::spawn(async move { view.read(&*clock).await })
            })
            .collect();
        for reader in readers {
            let read = reader.await.unwrap();
            assert_eq!(read.result.unwrap().len(), 1);
        }
        assert_eq!(
            registry.reads.load(Ordering::SeqCst),
            1,
            "one read for eight callers"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        view.read(&*clock).await.result.unwrap();
        assert_eq!(registry.reads.load(Ordering::SeqCst), 1, "still fresh");
        tokio::time::sleep(FleetView::MIN_INTERVAL).await;
        view.read(&*clock).await.result.unwrap();
        assert_eq!(
            registry.reads.load(Ordering::SeqCst),
            2,
            "stale: read again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_typed_and_cached_like_listings() {
        let registry = Arc::new(Counting {
            fail: true,
            ..Counting::default()
        });
        let view = FleetView::new(registry.clone(), node());
        let clock = ManualClock::at_millis(1_795_219_200_000);
        let err = view.read(&clock).await.result.unwrap_err();
        assert!(err.unsupported, "{err:?}");
        assert_eq!(err.code, "registry_unsupported");
        let again = view.read(&clock).await.result.unwrap_err();
        assert_eq!(again, err);
        assert_eq!(registry.reads.load(Ordering::SeqCst), 1);
    }
}
