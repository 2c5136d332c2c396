//! The `etcd` registry against the real etcd named by
//! `IDMINT_TEST_ETCD_ENDPOINT` (started by `scripts/etcd start DIR`): the
//! registry contract (`crate::contract`), and what only etcd does.
//!
//! Each test works under its own key prefix, so tests run in parallel without
//! seeing each other, and deletes its keys at the end. etcd grants at least 2 s
//! per lease, so the expiry tests take a few seconds each; they run in parallel.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint_registry::etcd::{EtcdConfig, EtcdRegistry};
use idmint_registry::{RegistryError, WorkerRegistry};

use crate::contract::{Backend, Holding, LONG, ReadsMarks, ReportClock, contract_suite};
use crate::support::{block_on_side, identity, require_service, unique_name};

/// etcd's smallest lease with its default election timeout.
const SHORT: Duration = Duration::from_secs(2);

/// A test's key space on the shared etcd; its keys are deleted on drop.
pub struct EtcdBackend {
    endpoint: String,
    prefix: String,
}

/// The backend for `test`, or `None` (after a loud SKIPPED line) when no etcd
/// is configured outside CI.
pub fn backend(test: &str) -> Option<EtcdBackend> {
    let endpoint = std::env::var("IDMINT_TEST_ETCD_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty());
    if !require_service("etcd (IDMINT_TEST_ETCD_ENDPOINT)", endpoint.is_some()) {
        return None;
    }
    Some(EtcdBackend {
        endpoint: endpoint?,
        prefix: format!("/idmint-test/{}/", unique_name(test)),
    })
}

impl EtcdBackend {
    async fn registry(&self, lease_ttl: Duration) -> EtcdRegistry {
        // etcd leases are whole seconds, 2 s at least.
        let secs = lease_ttl.as_secs() + u64::from(lease_ttl.subsec_nanos() > 0);
        let config = EtcdConfig::new()
            .with_prefix(self.prefix.clone())
            .with_lease_ttl(Duration::from_secs(secs).max(SHORT));
        EtcdRegistry::connect(&[&self.endpoint], config)
            .await
            .expect("etcd is configured, so connect succeeds")
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    fn holding(&self) -> Holding {
        Holding::Lease
    }

    fn short_ttl(&self) -> Duration {
        SHORT
    }

    fn report_clock(&self) -> ReportClock {
        ReportClock::Revision
    }

    async fn node(&self, ttl: Duration) -> Arc<dyn WorkerRegistry> {
        Arc::new(self.registry(ttl).await)
    }
}

impl Drop for EtcdBackend {
    /// Deletes every key under the prefix (marks have no lease), on a runtime of
    /// its own so it runs even when the test panicked.
    fn drop(&mut self) {
        let endpoint = self.endpoint.clone();
        let prefix = self.prefix.clone();
        block_on_side(move || {
            Box::pin(async move {
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
        });
    }
}

contract_suite!(backend);

#[tokio::test]
async fn leases_are_granted_as_asked_and_revoked_on_release() {
    let Some(b) = backend("renew") else {
        return;
    };
    let registry = b.registry(Duration::from_secs(5)).await;
    let claim = registry.claim(&identity(1), 2).await.unwrap();
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

/// A crowd of 300 starts at once in a space of exactly 300 (a rollout of a
/// full fleet): each gets a distinct worker, although most of the IDs any
/// claimer samples are taken by the time it tries them, and the 301st is told
/// the space is full, with the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_fills_a_space_of_exactly_its_size() {
    let Some(b) = backend("crowd") else {
        return;
    };
    const N: u32 = 300;
    let registry = Arc::new(b.registry(LONG).await);
    let barrier = Arc::new(tokio::sync::Barrier::new(N as usize));
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let registry = Arc::clone(&registry);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                // A claim may time out in the crowd (2 s a call): try again,
                // as the keeper does.
                for _ in 0..10 {
                    match registry.claim(&identity(i as usize), N).await {
                        Err(RegistryError::Timeout { .. }) => continue,
                        other => return other,
                    }
                }
                registry.claim(&identity(i as usize), N).await
            })
        })
        .collect();
    let mut workers = std::collections::BTreeSet::new();
    for task in tasks {
        let claim = task
            .await
            .unwrap()
            .expect("every claim of the crowd succeeds");
        assert!(claim.worker < N);
        assert!(
            workers.insert(claim.worker),
            "worker {} twice",
            claim.worker
        );
    }
    assert_eq!(workers.len(), N as usize);
    let err = registry.claim(&identity(N as usize), N).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Exhausted {
                in_use: 300,
                range: 300,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_claim_leaves_no_holding() {
    let Some(b) = backend("cancelled") else {
        return;
    };
    crate::contract::a_cancelled_claim_leaves_no_holding(&b.registry(LONG).await).await;
}

/// A grant whose answer comes after the call timeout may still be applied by
/// etcd. The claim chose the lease's ID, so it revokes it: no lease of the
/// registry's TTL outlives the failed claims (they would each hold etcd's
/// memory and expiry work for a whole TTL, and at 10,000 nodes they piled
/// up faster than they expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_cut_off_by_the_timeout_leaves_no_lease() {
    let Some(b) = backend("cut-grant") else {
        return;
    };
    // A TTL no other test uses, to find this test's leases among theirs.
    const TTL: i64 = 47;
    let config = EtcdConfig::new()
        .with_prefix(b.prefix.clone())
        .with_lease_ttl(Duration::from_secs(TTL as u64))
        .with_timeout(Duration::from_millis(1));
    // Connecting makes a call under the same timeout: it may take a few tries.
    let mut registry = None;
    for _ in 0..50 {
        if let Ok(r) = EtcdRegistry::connect(&[&b.endpoint], config.clone()).await {
            registry = Some(r);
            break;
        }
    }
    let registry = registry.expect("connects within 50 tries of 1 ms");
    // Cut off by idmint's bound or by the gRPC deadline it sets on each
    // request: both are a Timeout (which the keeper backs off from longer).
    let mut client = etcd_client::Client::connect([b.endpoint.as_str()], None)
        .await
        .unwrap();
    let mut timed_out = 0;
    for i in 0..50 {
        match registry.claim(&identity(i), 64).await {
            Err(RegistryError::Timeout { .. }) => timed_out += 1,
            Err(e) => panic!("not a timeout: {e}"),
            // Answered within the timeout after all: its lease (the token's
            // first part) is revoked here, where 1 ms is not the bound.
            Ok(claim) => {
                let lease = claim.token.split('/').next().unwrap();
                let lease = i64::from_str_radix(lease, 16).unwrap();
                client.lease_revoke(lease).await.unwrap();
            }
        }
    }
    assert!(
        timed_out > 0,
        "no grant was cut off: the test proves nothing"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut left = Vec::new();
        for lease in client.leases().await.unwrap().leases() {
            let ttl = client.lease_time_to_live(lease.id(), None).await.unwrap();
            if ttl.granted_ttl() == TTL {
                left.push(lease.id());
            }
        }
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} leases of {timed_out} cut-off claims live on: {left:x?}",
            left.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A claim that finds a space of 100 full notes it, so that a crowd
/// waiting for it costs etcd one count a second; a worker freed after the
/// note is claimed within the note's second and a try, and a note never
/// stands for another range.
#[tokio::test]
async fn a_full_space_is_noted_and_a_worker_freed_after_it_is_found_within_a_second() {
    let Some(b) = backend("full-note") else {
        return;
    };
    const N: u32 = 100;
    let registry = b.registry(LONG).await;
    let mut claims = Vec::new();
    for i in 0..N {
        claims.push(registry.claim(&identity(i as usize), N).await.unwrap());
    }
    let err = registry.claim(&identity(900), N).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Exhausted {
                in_use: 100,
                range: 100,
                ..
            }
        ),
        "{err}"
    );
    let mut client = etcd_client::Client::connect([b.endpoint.as_str()], None)
        .await
        .unwrap();
    let note = client.get(format!("{}full", b.prefix), None).await.unwrap();
    let note = note.kvs().first().expect("the full space was noted");
    let text = note.value_str().unwrap();
    assert!(text.starts_with("range=100 in_use=100 at="), "{text}");

    // The note is for range 100 only: a claim in 200 finds room at once.
    let wider = registry.claim(&identity(901), 2 * N).await.unwrap();
    assert!(wider.worker >= N, "{}", wider.worker);
    registry.release(&wider).await.unwrap();

    let freed = claims.swap_remove(37);
    registry.release(&freed).await.unwrap();
    let released = Instant::now();
    let mut noted = 0;
    let claim = loop {
        match registry.claim(&identity(902), N).await {
            Ok(claim) => break claim,
            // The sample missed it and the note still stands.
            Err(RegistryError::Exhausted { .. }) => noted += 1,
            Err(e) => panic!("{e}"),
        }
        assert!(
            released.elapsed() < Duration::from_millis(1500),
            "the freed worker was not found within the note's second and a try"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(claim.worker, freed.worker);
    eprintln!(
        "freed worker found {:?} after its release, {noted} tries answered by the note",
        released.elapsed()
    );
}

#[tokio::test]
async fn a_large_fleet_reads_a_sample_of_its_peers() {
    let Some(b) = backend("peer-sample") else {
        return;
    };
    let registry = b.registry(LONG).await;
    // 200 in 8,192 IDs: too sparse for point reads of 64 random workers
    // (about 1.6 hits, 16 needed), so the limited range read: 63 or 64.
    crate::contract::a_large_fleet_reads_a_sample_of_its_peers(&registry, 8192, 63..=64).await;
    // 200 in 256: the point reads find about 50, enough for a median.
    crate::contract::a_large_fleet_reads_a_sample_of_its_peers(&registry, 256, 16..=63).await;
}

#[async_trait]
impl ReadsMarks for EtcdRegistry {
    async fn stored(&self, worker: u32) -> Option<jiff::Timestamp> {
        self.stored_mark(worker).await.unwrap()
    }
}

#[tokio::test]
async fn stored_marks_read_back_rounded_up_to_the_millisecond() {
    let Some(b) = backend("marks") else {
        return;
    };
    crate::contract::marks_read_back_rounded_up_to_the_millisecond(&b.registry(LONG).await).await;
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
        RegistryError::Unavailable {
            registry,
            operation,
            ..
        }
        | RegistryError::Timeout {
            registry,
            operation,
            ..
        } => assert_eq!((*registry, *operation), ("etcd", "connect"), "{err}"),
        other => panic!("expected unavailable or a timeout, got {other}"),
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

/// Three "members" of one etcd: a proxy each in front of the test's server,
/// so a test can slow, cut or silence one member at a time. Returns the
/// proxies and the endpoints to connect to, in the same order.
fn three_members(b: &EtcdBackend) -> (Vec<idmint_testkit::proxy::CutProxy>, Vec<String>) {
    let upstream = b.endpoint.trim_start_matches("http://").to_owned();
    let proxies: Vec<_> = (0..3)
        .map(|_| idmint_testkit::proxy::CutProxy::start(&upstream).unwrap())
        .collect();
    let endpoints = proxies
        .iter()
        .map(|p| format!("http://{}", p.addr()))
        .collect();
    (proxies, endpoints)
}

/// Three endpoints that all answer slowly (over a second, under the call
/// timeout): an overloaded cluster, not a member away. After one round of
/// timed-out members, calls get the whole call timeout and succeed, and
/// keep it while answers stay slow; before, the one-second member bound
/// failed every call and the node stopped at its mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_cluster_gets_the_whole_call_timeout() {
    let Some(b) = backend("slow-cluster") else {
        return;
    };
    let (proxies, endpoints) = three_members(&b);
    let config = EtcdConfig::new()
        .with_prefix(b.prefix.clone())
        .with_lease_ttl(Duration::from_secs(30))
        .with_timeout(Duration::from_secs(8))
        .with_connect_timeout(Duration::from_secs(20));
    let reg = EtcdRegistry::connect(&endpoints, config).await.unwrap();
    let node = identity(1);
    let claim = reg.claim(&node, 1024).await.unwrap();
    for p in &proxies {
        p.delay(Duration::from_millis(1_300));
    }
    let mut failures = 0;
    let mut persisted = 0;
    let started = Instant::now();
    while persisted < 3 && started.elapsed() < Duration::from_secs(60) {
        let mark = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3);
        match reg.persist_mark(&claim, mark, jiff::Timestamp::now()).await {
            Ok(()) => persisted += 1,
            Err(e) => {
                assert!(e.is_transient(), "{e}");
                failures += 1;
            }
        }
    }
    assert_eq!(persisted, 3, "{failures} calls failed in 60 s");
    // One round of members timed out at most, then none: the long bound
    // stays while the cluster is slow.
    assert!(failures <= 3, "{failures} calls failed");
    for p in &proxies {
        p.delay(Duration::ZERO);
    }
    reg.release(&claim).await.unwrap();
}

/// Issue 32: with several members, a mark whose member can't be reached
/// (its connections cut, as when the leader is SIGKILLed) or doesn't answer
/// (blackholed, as a follower holding a write for a dead leader) is made
/// again on the next member within the same call, so the keeper's pause
/// before its next try no longer adds to a node's gap in IDs. With every
/// member away the call still fails, as a transient error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_moves_to_the_next_member_within_the_call() {
    let Some(b) = backend("moving-call") else {
        return;
    };
    let (proxies, endpoints) = three_members(&b);
    let config = EtcdConfig::new()
        .with_prefix(b.prefix.clone())
        .with_lease_ttl(Duration::from_secs(30));
    let reg = EtcdRegistry::connect(&endpoints, config).await.unwrap();
    let claim = reg.claim(&identity(1), 1024).await.unwrap();
    let mark = || jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3);
    let now = jiff::Timestamp::now;
    reg.persist_mark(&claim, mark(), now()).await.unwrap();

    proxies[0].cut();
    reg.persist_mark(&claim, mark(), now())
        .await
        .unwrap_or_else(|e| panic!("the first member's connections cut: {e}"));
    proxies[1].blackhole();
    let started = Instant::now();
    reg.persist_mark(&claim, mark(), now())
        .await
        .unwrap_or_else(|e| panic!("the second member silent: {e}"));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the silent member was waited on for its bound first: {:?}",
        started.elapsed()
    );
    reg.renew(&claim).await.unwrap().expect("a lease");

    proxies[2].cut();
    let err = reg
        .persist_mark(&claim, mark(), now())
        .await
        .expect_err("every member away");
    assert!(err.is_transient(), "{err}");
    for p in &proxies {
        p.restore();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = reg.release(&claim).await {
        assert!(
            Instant::now() < deadline,
            "release after the members came back: {e}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Calls made at once on one registry that all time out on the same member
/// (a follower holding writes for a dead leader) say that member is away,
/// not that the cluster is slow: the next member still gets the one-second
/// bound, and the calls move on past it to the member that answers. Before,
/// three timeouts in a row (these three calls' first tries) switched every
/// call to the whole call timeout, so their tries on the second silent
/// member waited out what was left of the call and they failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_timing_out_together_on_one_member_keep_the_short_bound() {
    let Some(b) = backend("together") else {
        return;
    };
    let (proxies, endpoints) = three_members(&b);
    let config = EtcdConfig::new()
        .with_prefix(b.prefix.clone())
        .with_lease_ttl(Duration::from_secs(30))
        .with_timeout(Duration::from_secs(4));
    let reg = EtcdRegistry::connect(&endpoints, config).await.unwrap();
    let mut claims = Vec::new();
    for n in 1..=3 {
        claims.push(reg.claim(&identity(n), 1024).await.unwrap());
    }
    proxies[0].blackhole();
    proxies[1].blackhole();
    let mark = || jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3);
    let results = futures_util::future::join_all(
        claims
            .iter()
            .map(|claim| reg.persist_mark(claim, mark(), jiff::Timestamp::now())),
    )
    .await;
    for (n, result) in results.into_iter().enumerate() {
        result.unwrap_or_else(|e| panic!("call {n}, two members silent: {e}"));
    }
    for p in &proxies {
        p.restore();
    }
    for claim in &claims {
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(e) = reg.release(claim).await {
            assert!(Instant::now() < deadline, "release: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
