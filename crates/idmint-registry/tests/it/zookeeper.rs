//! The `zookeeper` registry against a real ZooKeeper started by
//! `scripts/zookeeper start DIR` (`IDMINT_TEST_ZOOKEEPER=127.0.0.1:PORT`): the
//! registry contract (`crate::contract`) in both modes, and what only
//! ZooKeeper does (sessions as leases, Leaf's identities and local cache).
//!
//! Each test works under its own cluster name, so tests run in parallel without
//! seeing each other. Session timeouts are short (the script's `tickTime=500`
//! allows 1 s and up) to keep takeovers fast.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint_core::Layout;
use idmint_registry::keeper::{GeneratorSettings, KeeperConfig, WorkerKeeper};
use idmint_registry::zookeeper::{ZooKeeperConfig, ZooKeeperMode, ZooKeeperRegistry};
use idmint_registry::{NodeIdentity, RegistryError, WorkerRegistry};
use jiff::Timestamp;

use crate::contract::{Backend, Holding, ReadsMarks};
use crate::support::{T0_MS, claim_eventually, clock, ms, require_service, unique_name};

const SESSION: Duration = Duration::from_secs(2);

/// The ensemble's address, or `None` (after a loud SKIPPED line) outside CI.
fn zk_addr() -> Option<String> {
    let addr = std::env::var("IDMINT_TEST_ZOOKEEPER")
        .ok()
        .filter(|a| !a.is_empty());
    if !require_service("zookeeper (IDMINT_TEST_ZOOKEEPER)", addr.is_some()) {
        return None;
    }
    addr
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

/// A port nothing listens on: bound, then closed.
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr.to_string()
}

/// A test's cluster on the shared ZooKeeper, in one mode. Its nodes stay in
/// the throwaway ensemble (`scripts/test` starts a fresh one every run).
pub struct ZooKeeperBackend {
    addr: String,
    cluster: String,
    mode: ZooKeeperMode,
}

impl ZooKeeperBackend {
    pub fn new(mode: ZooKeeperMode, test: &str) -> Option<ZooKeeperBackend> {
        Some(ZooKeeperBackend {
            addr: zk_addr()?,
            cluster: format!("test-{}", unique_name(test)),
            mode,
        })
    }
}

#[async_trait]
impl Backend for ZooKeeperBackend {
    fn kind(&self) -> &'static str {
        "zookeeper"
    }

    fn holding(&self) -> Holding {
        match self.mode {
            ZooKeeperMode::Ephemeral => Holding::Session,
            ZooKeeperMode::Forever => Holding::Forever,
        }
    }

    fn short_ttl(&self) -> Duration {
        SESSION
    }

    fn claims_given_workers(&self) -> bool {
        false
    }

    /// The lease is the session: its timeout is asked for as `ttl` (the
    /// ensemble clamps it to 1..=10 s).
    async fn node(&self, ttl: Duration) -> Arc<dyn WorkerRegistry> {
        let config = config(self.mode, &self.cluster).with_session_timeout(ttl);
        Arc::new(connect(&self.addr, config).await)
    }
}

/// Twitter's scheme: an ephemeral node per worker ID, the session as the lease.
mod ephemeral {
    fn backend(test: &str) -> Option<super::ZooKeeperBackend> {
        super::ZooKeeperBackend::new(super::ZooKeeperMode::Ephemeral, test)
    }

    crate::contract::contract_suite!(backend);
}

/// Leaf's scheme: a worker ID per `ip:port` identity, for good. No leases, so
/// no scenario about expiry, release or takeover applies.
mod forever {
    fn backend(test: &str) -> Option<super::ZooKeeperBackend> {
        super::ZooKeeperBackend::new(super::ZooKeeperMode::Forever, test)
    }

    crate::contract::contract_suite!(backend:
        sixteen_concurrent_claimers_get_distinct_workers,
        a_range_of_eight_admits_exactly_eight_and_exhausts_the_rest_typed,
        range_zero_is_a_config_error,
        persisting_only_ever_raises_the_mark,
        a_restart_with_the_clock_behind_issues_above_every_earlier_id,
        a_given_worker_is_claimed_once_and_the_holder_is_named,
        a_second_node_deriving_the_same_worker_fails_at_start_naming_both,
        the_fleet_lists_every_holder_with_its_identity_report_and_mark,
        a_reports_age_is_told_by_the_coordinators_clock,
    );
}

#[async_trait]
impl ReadsMarks for ZooKeeperRegistry {
    async fn stored(&self, worker: u32) -> Option<Timestamp> {
        self.stored_mark(worker).await.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_marks_read_back_rounded_up_to_the_millisecond() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_name("marks");
    let registry = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    crate::contract::marks_read_back_rounded_up_to_the_millisecond(&registry).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_cancelled_claims_leave_no_holding() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_name("cancelled");
    let registry = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    crate::contract::a_cancelled_claim_leaves_no_holding(&registry).await;
}

/// A start reads a random 64 of its peers' reports, not all of them: in a
/// fleet of 1,000 starting together, reading every report one after another
/// timed the starts out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_a_large_fleet_reads_a_sample_of_its_peers() {
    let Some(b) = ZooKeeperBackend::new(ZooKeeperMode::Ephemeral, "peer-sample") else {
        return;
    };
    let registry = b.node(Duration::from_secs(10)).await;
    crate::contract::a_large_fleet_reads_a_sample_of_its_peers(&*registry, 1024, 64..=64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_claims_work_only_on_the_session_that_made_them() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_name("session");
    let a = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    let claim_a = a.claim(&ident(1), 1).await.unwrap();
    let lease = claim_a.lease.expect("the session is the lease");
    assert!(lease.ttl <= SESSION * 2, "{lease:?}");
    let mark_a = ms(T0_MS + 3_000);
    a.persist_mark(&claim_a, mark_a, ms(T0_MS)).await.unwrap();
    assert_eq!(a.stored_mark(0).await.unwrap(), Some(mark_a));

    // Another live session presenting A's claim is refused, and can't release it.
    let c = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    let foreign = c
        .persist_mark(&claim_a, ms(T0_MS + 60_000), ms(T0_MS))
        .await;
    assert!(
        matches!(foreign, Err(RegistryError::LeaseLost { .. })),
        "{foreign:?}"
    );
    assert!(matches!(
        c.renew(&claim_a).await,
        Err(RegistryError::LeaseLost { .. })
    ));
    c.release(&claim_a).await.unwrap();
    a.renew(&claim_a).await.expect("A still holds worker 0");
    assert_eq!(c.stored_mark(0).await.unwrap(), Some(mark_a));

    // A closes its session: its claim is gone for good, and a new claim opens a
    // new session (as a restarted node would) and starts above the mark.
    a.close_session();
    assert!(matches!(
        a.renew(&claim_a).await,
        Err(RegistryError::LeaseLost { .. })
    ));
    let stale = a
        .persist_mark(&claim_a, ms(T0_MS + 60_000), ms(T0_MS))
        .await;
    assert!(
        matches!(stale, Err(RegistryError::LeaseLost { .. })),
        "{stale:?}"
    );
    let again = claim_eventually(&a, &ident(1), 1, Duration::from_secs(5)).await;
    assert_eq!((again.worker, again.stored_mark), (0, Some(mark_a)));
    assert_ne!(again.token, claim_a.token, "a new session");
    a.renew(&again).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_node_frees_its_worker_only_when_its_session_times_out() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_name("crash");
    // Node A lives on a runtime of its own; dropping that runtime kills its
    // connection without closing the session, as a crash would.
    let (a, claim_a, crashed) = {
        let (addr, cluster) = (addr.clone(), cluster.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let (a, claim) = rt.block_on(async {
                let a = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
                let claim = a.claim(&ident(1), 1).await.unwrap();
                a.persist_mark(&claim, ms(T0_MS + 3_000), ms(T0_MS))
                    .await
                    .unwrap();
                (a, claim)
            });
            drop(rt);
            (a, claim, Instant::now())
        })
        .join()
        .unwrap()
    };
    let b = connect(&addr, config(ZooKeeperMode::Ephemeral, &cluster)).await;
    let probe = b.claim(&ident(2), 2).await.unwrap();
    let peers = b.peers(&probe).await.unwrap();
    assert_eq!(
        peers.iter().map(|p| p.worker).collect::<Vec<_>>(),
        vec![claim_a.worker],
        "the dead node looks alive until its session times out"
    );
    b.release(&probe).await.unwrap();
    let claim_b = claim_eventually(&b, &ident(2), 1, SESSION * 4).await;
    let took = crashed.elapsed();
    assert_eq!(claim_b.worker, claim_a.worker);
    assert_eq!(claim_b.stored_mark, Some(ms(T0_MS + 3_000)));
    assert!(
        took >= SESSION / 2,
        "worker freed {took:?} after the crash, before the session could time out"
    );
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forever_same_identity_keeps_its_worker_and_mark_across_restarts() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_name("forever");
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
async fn forever_identities_keep_their_ids_when_the_range_is_full() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_name("forever-range");
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

/// The keeper writes the cache (`persist_local`) before it persists the same
/// mark to ZooKeeper; that persist does not write and sync the file again.
/// A higher mark does, and reaches the cache before ZooKeeper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forever_persist_writes_the_cache_only_when_the_mark_rises() {
    use std::os::unix::fs::MetadataExt;

    let Some(addr) = zk_addr() else { return };
    let cluster = unique_name("cache-once");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(ZooKeeperMode::Forever, &cluster).with_cache_dir(dir.path());
    let reg = connect(&addr, cfg).await;
    let claim = reg.claim(&ident(8), 1024).await.unwrap();
    let cache = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "worker"))
        .expect("the claim wrote a cache file");
    // Each write renames a new file over the old: a new inode.
    let inode = || std::fs::metadata(&cache).unwrap().ino();
    let mark = ms(T0_MS + 3_000);
    reg.persist_local(&claim, mark).await.unwrap();
    let written = inode();
    reg.persist_mark(&claim, mark, ms(T0_MS)).await.unwrap();
    assert_eq!(inode(), written, "the same mark was written again");
    reg.persist_mark(&claim, ms(T0_MS + 6_000), ms(T0_MS))
        .await
        .unwrap();
    assert_ne!(inode(), written, "a higher mark was not written");
    let text = std::fs::read_to_string(&cache).unwrap();
    assert!(text.contains(&format!("mark={}", T0_MS + 6_000)), "{text}");
}

/// Forever mode records a clean stop too (issue 36): the identity's next
/// start finds the last tick issued, not the window-ahead mark, in
/// ZooKeeper and in the local cache alike (the cache never below
/// ZooKeeper), and a persist afterwards raises both again. Offline, the
/// cache alone is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forever_clean_stop_sets_zookeeper_and_the_cache_to_what_was_issued() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_name("clean-stop");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(ZooKeeperMode::Forever, &cluster).with_cache_dir(dir.path());
    let reg = connect(&addr, cfg.clone()).await;
    let claim = reg.claim(&ident(7), 1024).await.unwrap();
    reg.persist_mark(&claim, ms(T0_MS + 3_000), ms(T0_MS))
        .await
        .unwrap();
    let high = ms(T0_MS + 200) + jiff::SignedDuration::from_micros(300);
    reg.record_clean_stop(&claim, high, ms(T0_MS + 250))
        .await
        .unwrap();
    let again = reg.claim(&ident(7), 1024).await.unwrap();
    assert_eq!(again.worker, claim.worker);
    assert_eq!(
        again.stored_mark,
        Some(ms(T0_MS + 201)),
        "rounded up, not the window's"
    );
    drop(reg);

    // The cache says the same: offline, the identity starts from it.
    let cfg_down = cfg.clone().with_timeout(Duration::from_secs(1));
    let offline = ZooKeeperRegistry::connect(&closed_port(), cfg_down.clone())
        .await
        .unwrap();
    let cached = offline.claim(&ident(7), 1024).await.unwrap();
    assert_eq!(cached.stored_mark, Some(ms(T0_MS + 201)));
    // Offline, a run persists ahead and stops cleanly: the cache alone.
    offline
        .persist_mark(&cached, ms(T0_MS + 9_000), ms(T0_MS + 300))
        .await
        .unwrap();
    offline
        .record_clean_stop(&cached, ms(T0_MS + 400), ms(T0_MS + 400))
        .await
        .unwrap();
    let offline = ZooKeeperRegistry::connect(&closed_port(), cfg_down)
        .await
        .unwrap();
    assert_eq!(
        offline.claim(&ident(7), 1024).await.unwrap().stored_mark,
        Some(ms(T0_MS + 400))
    );

    // Online again: the claim takes the higher of ZooKeeper and the cache,
    // and a persist raises the mark again.
    let reg = connect(&addr, cfg).await;
    let back = reg.claim(&ident(7), 1024).await.unwrap();
    assert_eq!(back.stored_mark, Some(ms(T0_MS + 400)));
    reg.persist_mark(&back, ms(T0_MS + 5_000), ms(T0_MS + 450))
        .await
        .unwrap();
    assert_eq!(
        reg.claim(&ident(7), 1024).await.unwrap().stored_mark,
        Some(ms(T0_MS + 5_000))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forever_cache_starts_without_zookeeper_and_never_skips_the_clock_check() {
    let Some(addr) = zk_addr() else { return };
    let cluster = unique_name("cache");
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
    // An identity the cache doesn't know can't start yet: it waits for
    // ZooKeeper (transient), and doesn't exit.
    let unknown = offline.claim(&ident(3), 1024).await.unwrap_err();
    assert!(unknown.to_string().contains("10.1.2.3:3"), "{unknown}");
    assert!(unknown.is_transient(), "{unknown}");

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
    let t: Timestamp = Layout::TWITTER.decode(id.get()).unwrap().time;
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
        matches!(err.code(), "registry_unavailable" | "registry_timeout"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// A forever registry that started offline (ZooKeeper down at connect) goes
/// online when ZooKeeper is back: a node with nothing cached, started during
/// the outage, claims normally then instead of never (the fault suite's
/// `long-outage[zookeeper,forever]` saw it exit at its claim wait).
#[tokio::test]
async fn an_offline_forever_registry_goes_online_when_zookeeper_returns() {
    let Some(addr) = zk_addr() else {
        return;
    };
    let upstream = addr.split(',').next().unwrap().to_owned();
    let proxy = idmint_testkit::proxy::CutProxy::start(&upstream).unwrap();
    proxy.cut();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(ZooKeeperMode::Forever, &unique_name("online"))
        .with_cache_dir(dir.path())
        .with_timeout(Duration::from_secs(1));
    let reg = ZooKeeperRegistry::connect(&proxy.addr().to_string(), cfg)
        .await
        .unwrap();
    assert!(reg.is_offline());
    let waiting = reg.claim(&ident(4), 1024).await.unwrap_err();
    assert!(waiting.is_transient(), "{waiting}");
    proxy.restore();
    let claim = reg.claim(&ident(4), 1024).await.unwrap();
    assert!(!reg.is_offline());
    assert!(!claim.token.starts_with("cache:"), "{}", claim.token);
    reg.persist_mark(&claim, ms(T0_MS + 1_000), ms(T0_MS))
        .await
        .unwrap();
}

/// A forever node that started from its cache while ZooKeeper was down
/// writes its marks to ZooKeeper once it answers (it registers its worker
/// there again), without a refused ID: a restart that then loses its cache
/// starts above what it issued, not from ZooKeeper's older mark.
// Two threads: the test issues IDs on its own thread, blocking, while the
// keeper runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forever_node_started_offline_pushes_its_marks_when_zookeeper_returns() {
    let Some(addr) = zk_addr() else {
        return;
    };
    let cluster = unique_name("offline-push");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(ZooKeeperMode::Forever, &cluster)
        .with_cache_dir(dir.path())
        .with_timeout(Duration::from_secs(1));
    // The identity's worker, known to ZooKeeper and the cache, with no mark yet.
    let first = connect(&addr, cfg.clone())
        .await
        .claim(&ident(5), 1024)
        .await
        .unwrap();
    let zookeeper_mark = || async {
        // No cache: what ZooKeeper alone holds for the identity.
        let reg = connect(&addr, config(ZooKeeperMode::Forever, &cluster)).await;
        reg.claim(&ident(5), 1024).await.unwrap()
    };
    assert_eq!(zookeeper_mark().await.stored_mark, None);

    let upstream = addr.split(',').next().unwrap().to_owned();
    let proxy = idmint_testkit::proxy::CutProxy::start(&upstream).unwrap();
    proxy.cut();
    let offline = ZooKeeperRegistry::connect(&proxy.addr().to_string(), cfg)
        .await
        .unwrap();
    assert!(offline.is_offline());
    let keeper = KeeperConfig::new()
        .with_window(Duration::from_secs(2))
        .with_report_interval(Duration::from_millis(500));
    let guard = WorkerKeeper::start(
        Arc::new(offline),
        ident(5),
        GeneratorSettings::new(Layout::TWITTER),
        keeper,
    )
    .await
    .unwrap();
    assert_eq!(guard.handle().worker(), first.worker);
    let mut issued = 0u64;
    let mut refused = Vec::new();
    let mut issue_for = |d: Duration| {
        let until = Instant::now() + d;
        let mut last = 0;
        while Instant::now() < until {
            match guard.handle().next_id() {
                Ok(id) => {
                    issued += 1;
                    last = id.get();
                }
                Err(e) => refused.push(e.to_string()),
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        last
    };
    issue_for(Duration::from_secs(1));

    proxy.restore();
    let restored = Timestamp::now();
    // Within the probe interval (5 s) plus a report, ZooKeeper holds a mark
    // above what was issued since it returned.
    let mut pushed = None;
    for _ in 0..20 {
        let last = issue_for(Duration::from_millis(500));
        let at = zookeeper_mark().await.stored_mark;
        let issued_at: Timestamp = Layout::TWITTER.decode(last).unwrap().time;
        if at.is_some_and(|m| m > restored && m >= issued_at) {
            pushed = at;
            break;
        }
    }
    assert!(
        pushed.is_some(),
        "zookeeper never got the marks persisted offline"
    );
    assert_eq!(guard.handle().worker(), first.worker, "the worker was kept");
    assert!(
        refused.is_empty(),
        "{} IDs refused (zookeeper back at {restored}): {:?}",
        refused.len(),
        &refused[..refused.len().min(3)]
    );
    assert!(issued > 1000, "{issued}");
    guard.shutdown().await;
}

/// Registering a cached claim again on ZooKeeper is refused (`LeaseLost`:
/// the keeper then fences and claims anew) when ZooKeeper gives the
/// identity another worker, or holds a mark above the holder's; otherwise
/// it raises the mark and the claim's token becomes the node's path.
#[tokio::test]
async fn a_cached_forever_claim_registers_again_only_as_zookeeper_records_it() {
    let Some(addr) = zk_addr() else {
        return;
    };
    let reg = connect(&addr, config(ZooKeeperMode::Forever, &unique_name("again"))).await;
    let claim = reg.claim(&ident(6), 1024).await.unwrap();
    let cached = |worker: u32| idmint_registry::Claim {
        worker,
        stored_mark: None,
        lease: None,
        token: "cache:10.1.2.3:6".to_owned(),
    };
    let lost = |r: &Result<idmint_registry::Claim, RegistryError>| {
        matches!(r, Err(RegistryError::LeaseLost { .. }))
    };
    // Another worker than ZooKeeper gives the identity: refused.
    let other = reg
        .register_again(&ident(6), &cached(claim.worker + 1), ms(T0_MS + 1_000))
        .await;
    assert!(lost(&other), "{other:?}");
    // Accepted: the mark is raised and the token is the node's path.
    let again = reg
        .register_again(&ident(6), &cached(claim.worker), ms(T0_MS + 1_000))
        .await
        .unwrap();
    assert_eq!(again.worker, claim.worker);
    assert_eq!(again.token, claim.token);
    assert_eq!(again.stored_mark, Some(ms(T0_MS + 1_000)));
    assert_eq!(
        reg.claim(&ident(6), 1024).await.unwrap().stored_mark,
        Some(ms(T0_MS + 1_000))
    );
    // ZooKeeper's mark above the holder's (another process wrote as this
    // identity): refused, and the mark stays.
    let behind = reg
        .register_again(&ident(6), &cached(claim.worker), ms(T0_MS + 500))
        .await;
    assert!(lost(&behind), "{behind:?}");
    assert_eq!(
        reg.claim(&ident(6), 1024).await.unwrap().stored_mark,
        Some(ms(T0_MS + 1_000))
    );
    // An identity ZooKeeper doesn't know (a restore from before its node): refused.
    let unknown = reg
        .register_again(&ident(9), &cached(claim.worker), ms(T0_MS + 1_000))
        .await;
    assert!(lost(&unknown), "{unknown:?}");
}
