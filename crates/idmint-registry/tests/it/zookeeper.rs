//! The `zookeeper` registry against a real ZooKeeper started by
//! `scripts/zookeeper start DIR` (`IDMINT_TEST_ZOOKEEPER=127.0.0.1:PORT`).
//!
//! Each test works under its own cluster name, so tests run in parallel without
//! seeing each other. Session timeouts are short (the script's `tickTime=500`
//! allows 1 s and up) to keep takeovers fast.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use idmint_core::Layout;
use idmint_registry::keeper::{GeneratorSettings, KeeperConfig, WorkerKeeper};
use idmint_registry::zookeeper_registry::{ZooKeeperConfig, ZooKeeperMode, ZooKeeperRegistry};
use idmint_registry::{NodeIdentity, RegistryError, WorkerRegistry};
use jiff::Timestamp;

use crate::support::{T0_MS, clock, require_service};

const SESSION: Duration = Duration::from_secs(2);

/// The ensemble's address, or `None` (after a loud SKIPPED line) outside CI.
fn zk_addr() -> Option<String> {
    let addr = std::env::var("IDMINT_TEST_ZOOKEEPER").ok();
    if !require_service("zookeeper (IDMINT_TEST_ZOOKEEPER)", addr.is_some()) {
        return None;
    }
    addr
}

fn unique_cluster(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("test-{test}-{}-{nanos}", std::process::id())
}

fn config(mode: ZooKeeperMode, cluster: &str) -> ZooKeeperConfig {
    ZooKeeperConfig::new(mode)
        .with_cluster(cluster)
        .with_session_timeout(SESSION)
        .with_timeout(Duration::from_secs(5))
}

async fn connect(addr: &str, config: ZooKeeperConfig) -> ZooKeeperRegistry {
    ZooKeeperRegistry::connect(addr, config)
        .await
        .expect("zookeeper is up, so connect succeeds")
}

fn ident(port: u16) -> NodeIdentity {
    NodeIdentity {
        host: format!("host-{port}"),
        address: "10.1.2.3".to_owned(),
        port,
    }
}

fn ms(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

/// A port nothing listens on: bound, then closed.
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ephemeral_sixteen_concurrent_claimers_get_distinct_ids() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_cluster("eph16");
    let mut tasks = Vec::new();
    for i in 0..16u16 {
        let (addr, cluster) = (addr.clone(), cluster.clone());
        tasks.push(tokio::spawn(async move {
            let reg = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
            let claim = reg.claim(&ident(7000 + i), 1024).await.unwrap();
            (reg, claim)
        }));
    }
    let mut held = Vec::new();
    for t in tasks {
        held.push(t.await.unwrap());
    }
    let mut workers: Vec<u32> = held.iter().map(|(_, c)| c.worker).collect();
    workers.sort_unstable();
    workers.dedup();
    assert_eq!(workers.len(), 16, "{workers:?}");
    for (reg, claim) in &held {
        assert!(claim.lease.is_some());
        assert!(reg.renew(claim).await.unwrap().is_some());
        reg.release(claim).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ephemeral_range_of_eight_lets_exactly_eight_claim() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_cluster("eph8");
    let mut tasks = Vec::new();
    for i in 0..16u16 {
        let (addr, cluster) = (addr.clone(), cluster.clone());
        tasks.push(tokio::spawn(async move {
            let reg = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
            let result = reg.claim(&ident(7000 + i), 8).await;
            (reg, result)
        }));
    }
    let mut won = Vec::new();
    let mut exhausted = 0;
    let mut keep = Vec::new();
    for t in tasks {
        let (reg, result) = t.await.unwrap();
        match result {
            Ok(claim) => won.push(claim.worker),
            Err(RegistryError::Exhausted { in_use, range, .. }) => {
                assert_eq!((in_use, range), (8, 8));
                exhausted += 1;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
        keep.push(reg);
    }
    won.sort_unstable();
    assert_eq!(won, (0..8).collect::<Vec<_>>());
    assert_eq!(exhausted, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_takeover_starts_above_the_dead_holders_mark_and_fences_it() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_cluster("takeover");
    let a = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    let claim_a = a.claim(&ident(1), 1).await.unwrap();
    assert_eq!(claim_a.stored_mark, None);
    let mark_a = ms(T0_MS + 3_000);
    a.persist_mark(&claim_a, mark_a, ms(T0_MS)).await.unwrap();
    // A lower mark never lowers it.
    a.persist_mark(&claim_a, ms(T0_MS), ms(T0_MS))
        .await
        .unwrap();
    assert_eq!(a.stored_mark(0).await.unwrap(), Some(mark_a));

    // The range of 1 is full while A lives.
    let b = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    assert!(matches!(
        b.claim(&ident(2), 1).await,
        Err(RegistryError::Exhausted { in_use: 1, .. })
    ));

    // A's session ends without a release; B takes worker 0 above A's mark.
    // Dropping the client closes the session in the background: ZooKeeper
    // deletes A's ephemeral node a moment later (at the latest when the session
    // times out), so B retries until then.
    a.close_session();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let claim_b = loop {
        match b.claim(&ident(2), 1).await {
            Ok(claim) => break claim,
            Err(RegistryError::Exhausted { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("B could not claim after A's session ended: {e}"),
        }
    };
    assert_eq!(claim_b.worker, claim_a.worker);
    assert!(
        claim_b.stored_mark >= Some(mark_a),
        "{:?}",
        claim_b.stored_mark
    );

    // A's stale writes are refused and leave B's mark alone.
    let stale = a
        .persist_mark(&claim_a, ms(T0_MS + 60_000), ms(T0_MS))
        .await;
    assert!(
        matches!(stale, Err(RegistryError::LeaseLost { .. })),
        "{stale:?}"
    );
    assert!(matches!(
        a.renew(&claim_a).await,
        Err(RegistryError::LeaseLost { .. })
    ));
    assert_eq!(b.stored_mark(0).await.unwrap(), Some(mark_a));

    // Even a live session that is not the holder is refused (a claim from
    // another registry presented here).
    let c = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    let foreign = c
        .persist_mark(&claim_b, ms(T0_MS + 60_000), ms(T0_MS))
        .await;
    assert!(
        matches!(foreign, Err(RegistryError::LeaseLost { .. })),
        "{foreign:?}"
    );

    // B's lease is the negotiated session; renew extends it.
    let lease = b.renew(&claim_b).await.unwrap().unwrap();
    assert!(lease.valid_until > Instant::now());
    assert!(lease.ttl <= SESSION * 2);
    let mark_b = ms(T0_MS + 9_000);
    b.persist_mark(&claim_b, mark_b, ms(T0_MS)).await.unwrap();

    // Release frees the ID and keeps the mark.
    b.release(&claim_b).await.unwrap();
    let claim_c = c.claim(&ident(3), 1).await.unwrap();
    assert_eq!(claim_c.stored_mark, Some(mark_b));
    // The old holder's release is a no-op for the new holder.
    b.release(&claim_b).await.unwrap();
    assert!(c.renew(&claim_c).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_session_expiry_frees_the_id_after_the_timeout() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_cluster("expiry");
    let a = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    let claim_a = a.claim(&ident(1), 1).await.unwrap();
    let b = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    // Peers see A's report.
    let probe = b.claim(&ident(2), 2).await.unwrap();
    let peers = b.peers(&probe).await.unwrap();
    assert_eq!(
        peers.iter().map(|p| p.worker).collect::<Vec<_>>(),
        vec![claim_a.worker]
    );
    b.release(&probe).await.unwrap();
    // A dies (its whole registry dropped): the session closes and frees worker 0.
    drop(a);
    let started = Instant::now();
    loop {
        match b.claim(&ident(2), 1).await {
            Ok(claim) => {
                assert_eq!(claim.worker, 0);
                break;
            }
            Err(RegistryError::Exhausted { .. }) if started.elapsed() < SESSION * 4 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("worker 0 never freed: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forever_same_identity_keeps_its_worker_and_mark_across_restarts() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_cluster("forever");
    let reg = connect(&addr, config(ZooKeeperMode::Forever, &cluster)).await;
    let a = reg.claim(&ident(8080), 1024).await.unwrap();
    assert_eq!((a.lease, a.stored_mark), (None, None));
    let b = reg.claim(&ident(8081), 1024).await.unwrap();
    assert_ne!(a.worker, b.worker);
    let mark = ms(T0_MS + 3_000);
    reg.persist_mark(&a, mark, ms(T0_MS)).await.unwrap();
    reg.persist_mark(&a, ms(T0_MS), ms(T0_MS)).await.unwrap();
    assert_eq!(reg.renew(&a).await.unwrap(), None);
    reg.release(&a).await.unwrap();
    drop(reg);

    // A restart: a new session, the same identity.
    let reg = connect(&addr, config(ZooKeeperMode::Forever, &cluster)).await;
    let again = reg.claim(&ident(8080), 1024).await.unwrap();
    assert_eq!(again.worker, a.worker);
    assert_eq!(again.stored_mark, Some(mark));
    let peers = reg.peers(&again).await.unwrap();
    assert_eq!(
        peers.iter().map(|p| p.worker).collect::<Vec<_>>(),
        vec![b.worker]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forever_range_exhaustion_is_typed() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_cluster("forever-range");
    let reg = connect(&addr, config(ZooKeeperMode::Forever, &cluster)).await;
    let mut workers = Vec::new();
    for port in 0..4 {
        workers.push(reg.claim(&ident(9000 + port), 4).await.unwrap().worker);
    }
    assert_eq!(workers, vec![0, 1, 2, 3]);
    let err = reg.claim(&ident(9100), 4).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Exhausted {
                in_use: 4,
                range: 4,
                ..
            }
        ),
        "{err}"
    );
    // Known identities still get theirs.
    assert_eq!(reg.claim(&ident(9002), 4).await.unwrap().worker, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forever_cache_starts_without_zookeeper_and_never_skips_the_clock_check() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_cluster("cache");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(ZooKeeperMode::Forever, &cluster).with_cache_dir(dir.path());
    let reg = connect(&addr, cfg.clone()).await;
    let _other = reg.claim(&ident(1), 1024).await.unwrap();
    let claim = reg.claim(&ident(2), 1024).await.unwrap();
    let mark = ms(T0_MS + 3_600_000);
    reg.persist_mark(&claim, mark, ms(T0_MS)).await.unwrap();
    drop(reg);

    // ZooKeeper unreachable: the cache gives the worker ID and the mark.
    let cfg_down = cfg.clone().with_timeout(Duration::from_secs(1));
    let offline = ZooKeeperRegistry::connect(&closed_port(), cfg_down.clone())
        .await
        .unwrap();
    assert!(offline.is_offline());
    let cached = offline.claim(&ident(2), 1024).await.unwrap();
    assert_eq!(
        (cached.worker, cached.stored_mark),
        (claim.worker, Some(mark))
    );
    // An identity the cache doesn't know can't start.
    let unknown = offline.claim(&ident(3), 1024).await.unwrap_err();
    assert!(unknown.to_string().contains("10.1.2.3:3"), "{unknown}");

    // The keeper refuses a clock an hour behind the cached mark.
    let c = clock();
    let settings = GeneratorSettings::new(Layout::TWITTER).with_clock(Arc::new(c.clone()));
    let keeper = KeeperConfig::new().with_max_start_wait(Duration::from_millis(10));
    let registry: Arc<dyn WorkerRegistry> = Arc::new(offline);
    let refused = WorkerKeeper::start(registry, ident(2), settings, keeper).await;
    assert!(
        matches!(refused, Err(RegistryError::ClockBehindMark { .. })),
        "{:?}",
        refused.err()
    );

    // With the clock past the mark it starts, and its IDs are above the mark.
    c.set_nanos((T0_MS + 3_600_000 + 10) * 1_000_000);
    let offline = ZooKeeperRegistry::connect(&closed_port(), cfg_down)
        .await
        .unwrap();
    let settings = GeneratorSettings::new(Layout::TWITTER).with_clock(Arc::new(c.clone()));
    let guard = WorkerKeeper::start(Arc::new(offline), ident(2), settings, keeper)
        .await
        .unwrap();
    assert_eq!(guard.handle().worker(), claim.worker);
    let id = guard.handle().next_id().unwrap();
    let t = Layout::TWITTER.decode(id.get()).unwrap().time;
    assert!(t > mark, "{t} <= {mark}");
    guard.shutdown().await;

    // Back online, ZooKeeper holds at least what the cache promised before.
    let reg = connect(&addr, cfg).await;
    let again = reg.claim(&ident(2), 1024).await.unwrap();
    assert_eq!(again.worker, claim.worker);
    assert!(again.stored_mark >= Some(mark));
}

#[tokio::test]
async fn ephemeral_connect_to_a_closed_port_fails_typed_and_fast() {
    let started = Instant::now();
    let cfg = ZooKeeperConfig::new(ZooKeeperMode::Ephemeral).with_timeout(Duration::from_secs(1));
    let err = ZooKeeperRegistry::connect(&closed_port(), cfg)
        .await
        .unwrap_err();
    assert!(
        matches!(err.code(), "registry_backend" | "registry_timeout"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}
