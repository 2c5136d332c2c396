//! The `redis` registry against the real Redis on this machine
//! (`IDMINT_TEST_REDIS_ADDR`, default `127.0.0.1:6379`).
//!
//! Each test works under its own key prefix, so tests run in parallel without
//! seeing each other, and deletes its keys at the end. Short lease TTLs (a few
//! hundred milliseconds) keep the takeover tests fast.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use idmint_registry::redis_registry::{RedisConfig, RedisRegistry};
use idmint_registry::{Claim, NodeIdentity, RegistryError, WorkerRegistry};
use jiff::Timestamp;

use crate::support::require_service;

fn redis_addr() -> String {
    std::env::var("IDMINT_TEST_REDIS_ADDR").unwrap_or_else(|_| "127.0.0.1:6379".to_owned())
}

fn redis_url() -> String {
    format!("redis://{}/", redis_addr())
}

fn reachable() -> bool {
    redis_addr()
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .is_some_and(|addr| TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok())
}

/// A unique prefix per test, so parallel tests never share keys.
fn unique_prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("idmint-test:{{{test}-{}-{nanos}}}:", std::process::id())
}

/// A test's key space: connects registries under its prefix and cleans up.
struct Space {
    prefix: String,
}

impl Space {
    /// `None` (after a loud SKIPPED line) when Redis is down outside CI.
    fn new(test: &str) -> Option<Space> {
        if !require_service("redis", reachable()) {
            return None;
        }
        Some(Space {
            prefix: unique_prefix(test),
        })
    }

    async fn registry(&self, lease_ttl: Duration) -> RedisRegistry {
        let config = RedisConfig::new()
            .with_prefix(self.prefix.clone())
            .with_lease_ttl(lease_ttl);
        RedisRegistry::connect(&redis_url(), config)
            .await
            .expect("redis is reachable, so connect succeeds")
    }
}

impl Drop for Space {
    /// Deletes every key under the prefix (marks never expire by themselves),
    /// on a blocking connection so it runs even when the test panicked.
    fn drop(&mut self) {
        let Ok(mut conn) = redis::Client::open(redis_url()).and_then(|c| c.get_connection()) else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut conn)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&keys).query(&mut conn);
        }
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

const LONG: Duration = Duration::from_secs(30);

/// Claims with `registry` every `step` until it succeeds or `within` passes.
async fn claim_eventually(registry: &RedisRegistry, range: u32, within: Duration) -> Claim {
    let deadline = Instant::now() + within;
    loop {
        match registry.claim(&node(99), range).await {
            Ok(claim) => return claim,
            Err(RegistryError::Exhausted { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(25)).await;
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
                assert_eq!((registry, in_use, range), ("redis", 8, 8));
                exhausted += 1;
            }
            Err(e) => panic!("expected a claim or exhaustion, got {e}"),
        }
    }
    workers.sort_unstable();
    assert_eq!(workers, (0..8).collect::<Vec<u32>>());
    assert_eq!(exhausted, 8);
}

#[tokio::test]
async fn takeover_after_expiry_starts_above_the_dead_nodes_mark_and_fences_it() {
    let Some(space) = Space::new("takeover") else {
        return;
    };
    let ttl = Duration::from_millis(400);
    let range = 8;
    // Node A claims with a short lease and persists a mark.
    let a = space.registry(ttl).await;
    let a_claimed_at = Instant::now();
    let a_claim = a.claim(&node(1), range).await.unwrap();
    let w = a_claim.worker;
    let lease = a_claim.lease.unwrap();
    assert_eq!(lease.ttl, ttl);
    assert!(lease.valid_until <= Instant::now() + ttl);
    let a_mark = ms(1_800_000_000_000);
    a.persist_mark(&a_claim, a_mark, ms(1_799_999_997_000))
        .await
        .unwrap();
    // Every other worker ID is held for the whole test, so B can only get W.
    let fillers = space.registry(LONG).await;
    let mut filler_claims = Vec::new();
    for n in 0..7 {
        filler_claims.push(fillers.claim(&node(10 + n), range).await.unwrap());
    }
    // While A's lease lives, W is not free.
    let b = space.registry(LONG).await;
    let early = b.claim(&node(2), range).await;
    if a_claimed_at.elapsed() < ttl / 2 {
        assert!(
            matches!(early, Err(RegistryError::Exhausted { in_use: 8, .. })),
            "W was handed out while A's lease lived: {early:?}"
        );
    }
    // A dies without releasing: its registry and connection are dropped.
    let stale = a_claim.clone();
    drop(a);
    let b_claim = claim_eventually(&b, range, Duration::from_secs(3)).await;
    assert_eq!(b_claim.worker, w);
    assert!(
        a_claimed_at.elapsed() >= ttl,
        "W was free before A's lease ran out"
    );
    assert!(
        b_claim.stored_mark >= Some(a_mark),
        "B starts at {:?}",
        b_claim.stored_mark
    );
    // A comes back with its old token: it can neither renew nor raise the mark.
    let a_again = space.registry(ttl).await;
    let err = a_again.renew(&stale).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::LeaseLost { worker, .. } if worker == w),
        "{err}"
    );
    assert!(err.to_string().contains("another node"), "{err}");
    let err = a_again
        .persist_mark(&stale, ms(1_900_000_000_000), ms(1_800_000_000_000))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "lease_lost");
    assert_eq!(b.stored_mark(w).await.unwrap(), Some(a_mark));
    // Nor can it release B's lease.
    a_again.release(&stale).await.unwrap();
    b.renew(&b_claim).await.expect("B still holds W");
    b.release(&b_claim).await.unwrap();
    for claim in &filler_claims {
        fillers.release(claim).await.unwrap();
    }
}

#[tokio::test]
async fn renew_keeps_the_lease_past_its_ttl_and_expired_renew_is_lease_lost() {
    let Some(space) = Space::new("renew") else {
        return;
    };
    let ttl = Duration::from_millis(300);
    let holder = space.registry(ttl).await;
    let other = space.registry(LONG).await;
    let claim = holder.claim(&node(1), 1).await.unwrap();
    for _ in 0..4 {
        tokio::time::sleep(ttl / 3).await;
        let before = Instant::now();
        let lease = holder.renew(&claim).await.unwrap().expect("redis leases");
        assert!(lease.valid_until >= before + ttl);
        assert!(lease.valid_until <= Instant::now() + ttl);
    }
    // Renewed for 4 × ttl/3 > ttl: nobody else got the ID meanwhile.
    assert!(matches!(
        other.claim(&node(2), 1).await,
        Err(RegistryError::Exhausted {
            in_use: 1,
            range: 1,
            ..
        })
    ));
    // Let it expire; renewing now is a lost lease, not a resurrection.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let err = holder.renew(&claim).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::LeaseLost { worker: 0, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("expired"), "{err}");
    assert!(other.claim(&node(2), 1).await.is_ok());
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
    // The old claim is now fenced out.
    let err = first.renew(&claim).await.unwrap_err();
    assert_eq!(err.code(), "lease_lost");
}

#[tokio::test]
async fn peers_lists_live_workers_reported_times() {
    let Some(space) = Space::new("peers") else {
        return;
    };
    let registry = space.registry(LONG).await;
    let short = space.registry(Duration::from_millis(300)).await;
    let me = registry.claim(&node(1), 16).await.unwrap();
    let alive = registry.claim(&node(2), 16).await.unwrap();
    let leaving = registry.claim(&node(3), 16).await.unwrap();
    let dying = short.claim(&node(4), 16).await.unwrap();
    let silent = registry.claim(&node(5), 16).await.unwrap();
    let mark = ms(1_800_000_003_000);
    registry
        .persist_mark(&me, mark, ms(1_800_000_000_001))
        .await
        .unwrap();
    registry
        .persist_mark(&alive, mark, ms(1_800_000_000_002))
        .await
        .unwrap();
    registry
        .persist_mark(&leaving, mark, ms(1_800_000_000_003))
        .await
        .unwrap();
    short
        .persist_mark(&dying, mark, ms(1_800_000_000_004))
        .await
        .unwrap();
    let workers =
        |peers: &[idmint_registry::PeerReport]| peers.iter().map(|p| p.worker).collect::<Vec<_>>();
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
    tokio::time::sleep(Duration::from_millis(400)).await;
    let peers = registry.peers(&me).await.unwrap();
    assert_eq!(workers(&peers), vec![alive.worker]);
}

#[tokio::test]
async fn a_new_holder_does_not_inherit_the_old_holders_report() {
    let Some(space) = Space::new("stale-report") else {
        return;
    };
    let short = space.registry(Duration::from_millis(200)).await;
    let registry = space.registry(LONG).await;
    let old = short.claim(&node(1), 1).await.unwrap();
    short
        .persist_mark(&old, ms(1_800_000_003_000), ms(1_800_000_000_000))
        .await
        .unwrap();
    let observer = registry.claim(&node(9), 2).await.unwrap();
    assert_eq!(observer.worker, 1, "range 2 with worker 0 held");
    drop(short);
    let new = claim_eventually(&registry, 1, Duration::from_secs(3)).await;
    assert_eq!(new.worker, old.worker);
    // Worker 0 is live again, but its holder has not reported yet.
    assert_eq!(registry.peers(&observer).await.unwrap(), vec![]);
}

#[tokio::test]
async fn unreachable_redis_is_a_typed_error_within_the_timeout() {
    let timeout = Duration::from_millis(500);
    let config = RedisConfig::new().with_timeout(timeout);
    let started = Instant::now();
    let err = RedisRegistry::connect("redis://127.0.0.1:1/", config)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < timeout + Duration::from_millis(500),
        "took {:?}",
        started.elapsed()
    );
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
        } => {
            assert_eq!((*registry, *operation), ("redis", "connect"), "{err}");
        }
        other => panic!("expected a backend error or timeout, got {other}"),
    }
    let err = RedisRegistry::connect("not a url", RedisConfig::new())
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

#[tokio::test]
async fn large_ranges_are_claimed_window_by_window() {
    let Some(space) = Space::new("window") else {
        return;
    };
    let registry = space.registry(LONG).await;
    // 3000 IDs span three claim windows; all but one are held, so the claim
    // must find the free one wherever its random start falls.
    let range = 3000u32;
    let free = 2500u32;
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut pipe = redis::pipe();
    for id in (0..range).filter(|id| *id != free) {
        pipe.cmd("SET")
            .arg(format!("{}worker:{id}", space.prefix))
            .arg("someone-else")
            .arg("PX")
            .arg(30_000)
            .ignore();
    }
    let () = pipe.query_async(&mut conn).await.unwrap();
    let claim = registry.claim(&node(1), range).await.unwrap();
    assert_eq!(claim.worker, free);
    let err = registry.claim(&node(2), range).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Exhausted {
                in_use: 3000,
                range: 3000,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_with_a_typed_error() {
    // The kernel completes the TCP handshake for a listener nobody accepts on,
    // so the client connects and then waits for a reply that never comes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", silent.local_addr().unwrap());
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = RedisRegistry::connect(&url, RedisConfig::new().with_timeout(timeout))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(err, RegistryError::Timeout { registry: "redis", operation: "connect", after } if after == timeout),
        "{err}"
    );
    assert!(
        took >= timeout && took < timeout + Duration::from_millis(500),
        "took {took:?}"
    );
    assert_eq!(
        err.to_string(),
        "redis registry: connect timed out after 300ms"
    );
}
