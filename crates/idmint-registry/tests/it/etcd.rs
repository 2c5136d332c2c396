//! The `etcd` registry against a real etcd: the shared one named by
//! `IDMINT_TEST_ETCD_ENDPOINT` (started by `scripts/etcd start DIR`), and, for
//! the outage test, a private one each run starts and stops itself.
//!
//! Each test works under its own key prefix, so tests run in parallel without
//! seeing each other, and deletes its keys at the end. etcd grants at least 2 s
//! per lease, so the expiry tests take a few seconds each; they run in parallel.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use idmint_core::Layout;
use idmint_registry::etcd_registry::{EtcdConfig, EtcdRegistry};
use idmint_registry::keeper::{GeneratorSettings, KeeperConfig, LeaseState, WorkerKeeper};
use idmint_registry::{Claim, NodeIdentity, PeerReport, RegistryError, WorkerRegistry};
use jiff::Timestamp;

use crate::support::{FORK_GUARD, require_service};

/// etcd's smallest lease with its default election timeout.
const SHORT: Duration = Duration::from_secs(2);
const LONG: Duration = Duration::from_secs(30);

fn endpoint() -> Option<String> {
    std::env::var("IDMINT_TEST_ETCD_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
}

/// A unique prefix per test, so parallel tests never share keys.
fn unique_prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/idmint-test/{test}-{}-{nanos}/", std::process::id())
}

/// A test's key space: connects registries under its prefix and cleans up.
struct Space {
    endpoint: String,
    prefix: String,
}

impl Space {
    /// `None` (after a loud SKIPPED line) when no etcd is configured outside CI.
    fn new(test: &str) -> Option<Space> {
        let endpoint = endpoint();
        if !require_service("etcd (IDMINT_TEST_ETCD_ENDPOINT)", endpoint.is_some()) {
            return None;
        }
        Some(Space {
            endpoint: endpoint?,
            prefix: unique_prefix(test),
        })
    }

    async fn registry(&self, lease_ttl: Duration) -> EtcdRegistry {
        let config = EtcdConfig::new()
            .with_prefix(self.prefix.clone())
            .with_lease_ttl(lease_ttl);
        EtcdRegistry::connect(&[&self.endpoint], config)
            .await
            .expect("etcd is configured, so connect succeeds")
    }
}

impl Drop for Space {
    /// Deletes every key under the prefix (marks have no lease), on a runtime of
    /// its own so it runs even when the test panicked.
    fn drop(&mut self) {
        let endpoint = self.endpoint.clone();
        let prefix = self.prefix.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut client = etcd_client::Client::connect([endpoint], None).await.ok()?;
                let options = etcd_client::DeleteOptions::new().with_prefix();
                tokio::time::timeout(
                    Duration::from_secs(2),
                    client.delete(prefix.as_str(), Some(options)),
                )
                .await
                .ok()?
                .ok()
            })
        })
        .join();
    }
}

fn node(n: usize) -> NodeIdentity {
    NodeIdentity {
        host: format!("node-{n}"),
        address: "127.0.0.1".to_owned(),
        port: 7000 + u16::try_from(n).unwrap(),
    }
}

fn ms(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

/// Claims with `registry` until it succeeds or `within` passes.
async fn claim_eventually(registry: &EtcdRegistry, range: u32, within: Duration) -> Claim {
    let deadline = Instant::now() + within;
    loop {
        match registry.claim(&node(99), range).await {
            Ok(claim) => return claim,
            Err(RegistryError::Exhausted { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("claim did not succeed within {within:?}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_claimers_get_distinct_workers() {
    let Some(space) = Space::new("distinct") else {
        return;
    };
    let mut registries = Vec::new();
    for _ in 0..16 {
        registries.push(Arc::new(space.registry(LONG).await));
    }
    let tasks: Vec<_> = registries
        .iter()
        .enumerate()
        .map(|(n, registry)| {
            let registry = Arc::clone(registry);
            tokio::spawn(async move { registry.claim(&node(n), 1024).await })
        })
        .collect();
    let mut workers = Vec::new();
    for task in tasks {
        workers.push(
            task.await
                .unwrap()
                .expect("1024 IDs for 16 claimers")
                .worker,
        );
    }
    workers.sort_unstable();
    workers.dedup();
    assert_eq!(workers.len(), 16, "duplicate worker IDs: {workers:?}");
    assert!(workers.iter().all(|w| *w < 1024));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_of_eight_gives_eight_claims_and_typed_exhaustion_to_the_rest() {
    let Some(space) = Space::new("exhausted") else {
        return;
    };
    let mut registries = Vec::new();
    for _ in 0..16 {
        registries.push(Arc::new(space.registry(LONG).await));
    }
    let tasks: Vec<_> = registries
        .iter()
        .enumerate()
        .map(|(n, registry)| {
            let registry = Arc::clone(registry);
            tokio::spawn(async move { registry.claim(&node(n), 8).await })
        })
        .collect();
    let mut workers = Vec::new();
    let mut exhausted = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(claim) => workers.push(claim.worker),
            Err(RegistryError::Exhausted {
                registry,
                in_use,
                range,
            }) => {
                assert_eq!((registry, in_use, range), ("etcd", 8, 8));
                exhausted += 1;
            }
            Err(e) => panic!("expected a claim or exhaustion, got {e}"),
        }
    }
    workers.sort_unstable();
    assert_eq!(workers, (0..8).collect::<Vec<u32>>());
    assert_eq!(exhausted, 8);
    let err = registries[0].claim(&node(0), 8).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("all 8 worker IDs of the etcd registry are in use"),
        "{err}"
    );
}

#[tokio::test]
async fn takeover_after_expiry_starts_above_the_dead_nodes_mark_and_fences_it() {
    let Some(space) = Space::new("takeover") else {
        return;
    };
    let range = 4;
    // Node A claims with a short lease and persists a mark.
    let a = space.registry(SHORT).await;
    let before = Instant::now();
    let a_claim = a.claim(&node(1), range).await.unwrap();
    let w = a_claim.worker;
    let lease = a_claim.lease.unwrap();
    assert_eq!(lease.ttl, SHORT, "etcd 3.4 grants 2 s");
    assert!(lease.valid_until >= before + SHORT);
    assert!(lease.valid_until <= Instant::now() + SHORT);
    let a_mark = ms(1_800_000_000_000);
    a.persist_mark(&a_claim, a_mark, ms(1_799_999_997_000))
        .await
        .unwrap();
    // Every other worker ID is held for the whole test, so B can only get W.
    let fillers = space.registry(LONG).await;
    let mut filler_claims = Vec::new();
    for n in 0..range - 1 {
        filler_claims.push(fillers.claim(&node(10 + n as usize), range).await.unwrap());
    }
    // While A's lease lives, W is not free.
    let b = space.registry(LONG).await;
    let early = b.claim(&node(2), range).await;
    assert!(
        matches!(early, Err(RegistryError::Exhausted { in_use: 4, .. })),
        "W was handed out while A's lease lived: {early:?}"
    );
    // A dies without releasing: no one renews its lease, its client is dropped.
    let stale = a_claim.clone();
    drop(a);
    let b_claim = claim_eventually(&b, range, Duration::from_secs(6)).await;
    assert_eq!(b_claim.worker, w);
    assert!(
        before.elapsed() >= SHORT,
        "W was free before A's lease ran out"
    );
    assert!(
        b_claim.stored_mark >= Some(a_mark),
        "B starts at {:?}",
        b_claim.stored_mark
    );
    // A comes back with its old claim: it can neither renew nor raise the mark.
    let a_again = space.registry(SHORT).await;
    let err = a_again.renew(&stale).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::LeaseLost { worker, .. } if worker == w),
        "{err}"
    );
    let err = a_again
        .persist_mark(&stale, ms(1_900_000_000_000), ms(1_800_000_000_000))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert_eq!(b.stored_mark(w).await.unwrap(), Some(a_mark));
    // Nor can it release B's holding.
    a_again.release(&stale).await.unwrap();
    b.renew(&b_claim).await.expect("B still holds W");
    b.persist_mark(&b_claim, ms(1_800_000_001_000), ms(1_800_000_000_000))
        .await
        .expect("B may raise the mark");
    b.release(&b_claim).await.unwrap();
    for claim in &filler_claims {
        fillers.release(claim).await.unwrap();
    }
}

#[tokio::test]
async fn renew_reports_the_granted_ttl_from_before_the_request() {
    let Some(space) = Space::new("renew") else {
        return;
    };
    let registry = space.registry(Duration::from_secs(5)).await;
    let claim = registry.claim(&node(1), 2).await.unwrap();
    let before = Instant::now();
    let lease = registry.renew(&claim).await.unwrap().expect("etcd leases");
    assert_eq!(lease.ttl, Duration::from_secs(5));
    assert!(lease.valid_until >= before + lease.ttl);
    assert!(lease.valid_until <= Instant::now() + lease.ttl);
    registry.release(&claim).await.unwrap();
    // Released: the lease is revoked, renewing is a lost lease.
    let err = registry.renew(&claim).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::LeaseLost { worker, .. } if worker == claim.worker),
        "{err}"
    );
    assert!(err.to_string().contains("expired or was revoked"), "{err}");
}

#[tokio::test]
async fn persist_never_lowers_the_mark() {
    let Some(space) = Space::new("raise") else {
        return;
    };
    let registry = space.registry(LONG).await;
    let claim = registry.claim(&node(1), 4).await.unwrap();
    assert_eq!(claim.stored_mark, None);
    let high = ms(1_800_000_000_500);
    registry
        .persist_mark(&claim, high, ms(1_800_000_000_000))
        .await
        .unwrap();
    registry
        .persist_mark(&claim, ms(1_800_000_000_100), ms(1_800_000_000_100))
        .await
        .unwrap();
    assert_eq!(
        registry.stored_mark(claim.worker).await.unwrap(),
        Some(high)
    );
    // A mark inside a millisecond is stored rounded up, never down.
    let inside = high + jiff::SignedDuration::from_micros(300);
    registry
        .persist_mark(&claim, inside, ms(1_800_000_000_200))
        .await
        .unwrap();
    assert_eq!(
        registry.stored_mark(claim.worker).await.unwrap(),
        Some(ms(1_800_000_000_501))
    );
    // Concurrent persists from the holder: the highest wins.
    let registry = Arc::new(registry);
    let tasks: Vec<_> = (0..8i64)
        .map(|n| {
            let registry = Arc::clone(&registry);
            let claim = claim.clone();
            tokio::spawn(async move {
                registry
                    .persist_mark(
                        &claim,
                        ms(1_800_000_001_000 + n * 100),
                        ms(1_800_000_000_000),
                    )
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(
        registry.stored_mark(claim.worker).await.unwrap(),
        Some(ms(1_800_000_001_700))
    );
}

#[tokio::test]
async fn release_frees_the_worker_and_keeps_its_mark() {
    let Some(space) = Space::new("release") else {
        return;
    };
    let first = space.registry(LONG).await;
    let second = space.registry(LONG).await;
    let claim = first.claim(&node(1), 1).await.unwrap();
    let mark = ms(1_800_000_003_000);
    first
        .persist_mark(&claim, mark, ms(1_800_000_000_000))
        .await
        .unwrap();
    first.release(&claim).await.unwrap();
    // Freed at once, without waiting for the TTL; the mark is still there.
    let again = second.claim(&node(2), 1).await.unwrap();
    assert_eq!(again.worker, claim.worker);
    assert_eq!(again.stored_mark, Some(mark));
    assert_ne!(again.token, claim.token);
    // The old claim is fenced out and can't touch the new holding.
    assert_eq!(first.renew(&claim).await.unwrap_err().code(), "lease_lost");
    let err = first
        .persist_mark(&claim, ms(1_900_000_000_000), ms(1_800_000_000_000))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert_eq!(second.stored_mark(0).await.unwrap(), Some(mark));
    first.release(&claim).await.unwrap();
    second
        .renew(&again)
        .await
        .expect("the new holder is untouched");
}

#[tokio::test]
async fn peers_lists_live_workers_reported_times() {
    let Some(space) = Space::new("peers") else {
        return;
    };
    let registry = space.registry(LONG).await;
    let short = space.registry(SHORT).await;
    let me = registry.claim(&node(1), 16).await.unwrap();
    let alive = registry.claim(&node(2), 16).await.unwrap();
    let leaving = registry.claim(&node(3), 16).await.unwrap();
    let dying = short.claim(&node(4), 16).await.unwrap();
    let silent = registry.claim(&node(5), 16).await.unwrap();
    let mark = ms(1_800_000_003_000);
    for (r, c, at) in [
        (&registry, &me, 1),
        (&registry, &alive, 2),
        (&registry, &leaving, 3),
        (&short, &dying, 4),
    ] {
        r.persist_mark(c, mark, ms(1_800_000_000_000 + at))
            .await
            .unwrap();
    }
    let workers = |peers: &[PeerReport]| peers.iter().map(|p| p.worker).collect::<Vec<_>>();
    let peers = registry.peers(&me).await.unwrap();
    let mut expected = vec![alive.worker, leaving.worker, dying.worker];
    expected.sort_unstable();
    // Not itself, and not `silent`, which never reported.
    assert_eq!(
        workers(&peers),
        expected,
        "{peers:?} (silent is {})",
        silent.worker
    );
    let alive_report = peers.iter().find(|p| p.worker == alive.worker).unwrap();
    assert_eq!(alive_report.reported, ms(1_800_000_000_002));
    // A released worker and an expired one are no longer peers.
    registry.release(&leaving).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let peers = registry.peers(&me).await.unwrap();
        if workers(&peers) == vec![alive.worker] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dead peer never vanished: {peers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn unreachable_etcd_is_a_typed_error_within_the_timeout() {
    // Nothing listens on a port the kernel just handed out and took back.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let timeout = Duration::from_millis(500);
    let config = EtcdConfig::new().with_connect_timeout(timeout);
    let started = Instant::now();
    let err = EtcdRegistry::connect(&[format!("http://127.0.0.1:{port}")], config)
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < timeout + Duration::from_millis(500), "took {took:?}");
    match &err {
        RegistryError::Backend {
            registry,
            operation,
            ..
        }
        | RegistryError::Timeout {
            registry,
            operation,
            ..
        } => assert_eq!((*registry, *operation), ("etcd", "connect"), "{err}"),
        other => panic!("expected a backend error or timeout, got {other}"),
    }
    let empty: [&str; 0] = [];
    let err = EtcdRegistry::connect(&empty, EtcdConfig::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    let err = EtcdRegistry::connect(&["http://[bad"], EtcdConfig::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
}

#[tokio::test]
async fn range_zero_is_a_config_error() {
    let Some(space) = Space::new("range-zero") else {
        return;
    };
    let registry = space.registry(LONG).await;
    let err = registry.claim(&node(1), 0).await.unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
}

// ---- Lease loss while running, against a private etcd ----

/// An etcd of this test's own, started and stopped with `scripts/etcd`.
struct PrivateEtcd {
    script: PathBuf,
    dir: tempfile::TempDir,
    endpoint: String,
}

impl PrivateEtcd {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/etcd")
    }

    fn installed() -> bool {
        let _fork = FORK_GUARD.write().unwrap_or_else(|p| p.into_inner());
        Command::new("etcd")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn run(&self, action: &str) -> String {
        let out = {
            let _fork = FORK_GUARD.write().unwrap_or_else(|p| p.into_inner());
            Command::new(&self.script)
                .arg(action)
                .arg(self.dir.path())
                .output()
                .expect("scripts/etcd runs")
        };
        assert!(
            out.status.success(),
            "scripts/etcd {action} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn start() -> PrivateEtcd {
        let mut etcd = PrivateEtcd {
            script: Self::script(),
            dir: tempfile::tempdir().unwrap(),
            endpoint: String::new(),
        };
        etcd.endpoint = etcd.run("start");
        assert!(
            etcd.endpoint.starts_with("http://127.0.0.1:"),
            "{}",
            etcd.endpoint
        );
        etcd
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        let _fork = FORK_GUARD.write().unwrap_or_else(|p| p.into_inner());
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_stops_issuing_before_the_lease_can_expire_and_resumes_above() {
    if !require_service("etcd (the etcd binary)", PrivateEtcd::installed()) {
        return;
    }
    let etcd = PrivateEtcd::start();
    let timeout = Duration::from_millis(400);
    let config = EtcdConfig::new()
        .with_cluster("keeper-outage")
        .with_lease_ttl(SHORT)
        .with_timeout(timeout);
    let registry = Arc::new(
        EtcdRegistry::connect(&[&etcd.endpoint], config)
            .await
            .unwrap(),
    );
    let keeper_config = KeeperConfig::new()
        .with_call_timeout(timeout)
        .with_retry_interval(Duration::from_millis(250))
        .with_lease_margin(Duration::from_millis(500));
    let shared: Arc<dyn WorkerRegistry> = registry.clone();
    let guard = WorkerKeeper::start(
        shared,
        node(1),
        GeneratorSettings::new(Layout::TWITTER),
        keeper_config,
    )
    .await
    .unwrap();
    let handle = guard.handle().clone();

    // Issue for a while: renewals (every ~0.7 s) keep it going past the TTL.
    let mut before_max = 0u64;
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        if let Ok(id) = handle.next_id() {
            assert!(id.get() > before_max);
            before_max = id.get();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(before_max > 0);
    let status = handle.status();
    assert_eq!(status.lease, LeaseState::Held, "{status:?}");

    // etcd goes away. The lease can't expire before the keeper's own
    // `valid_until` (measured from before its last renewal was sent).
    let snapshot = Instant::now();
    let left = handle.status().lease_left.expect("etcd has leases");
    let lease_end = snapshot + left;
    etcd.run("stop");
    // Every ID issued from here on must have been issued before the lease's
    // end (the instant after the call returned is the bound checked), and
    // issuing must stop with a typed error and a lease no longer held.
    let give_up = lease_end + Duration::from_secs(3);
    loop {
        match handle.next_id() {
            Ok(id) => {
                let returned = Instant::now();
                assert!(
                    returned < lease_end,
                    "issued {id:?} {:?} after the lease's end: {:?}",
                    returned - lease_end,
                    handle.status()
                );
                assert!(id.get() > before_max);
                before_max = id.get();
            }
            Err(e) => {
                assert_eq!(e.code(), "mark_reached", "{e}");
                if handle.status().lease != LeaseState::Held {
                    break;
                }
            }
        }
        assert!(
            Instant::now() < give_up,
            "never stopped: {:?}",
            handle.status()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Stays stopped while etcd is down, and says why.
    let deadline = Instant::now() + Duration::from_secs(5);
    while handle.status().lease != LeaseState::Expired {
        assert!(Instant::now() < deadline, "{:?}", handle.status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = handle.status();
    assert!(!status.is_ready(), "{status:?}");
    assert!(status.not_ready_reason().is_some());
    for _ in 0..20 {
        assert!(handle.next_id().is_err(), "issued with the lease expired");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // etcd comes back on the same port with the same data.
    etcd.run("restart");
    let deadline = Instant::now() + Duration::from_secs(15);
    let first_after = loop {
        if let Ok(id) = handle.next_id() {
            break id.get();
        }
        assert!(
            Instant::now() < deadline,
            "did not resume after etcd came back: {:?}",
            handle.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(first_after > before_max, "{first_after} <= {before_max}");
    let mut last = first_after;
    for _ in 0..1000 {
        if let Ok(id) = handle.next_id() {
            assert!(id.get() > last);
            last = id.get();
        }
    }
    assert_eq!(handle.status().lease, LeaseState::Held);
    guard.shutdown().await;
}
