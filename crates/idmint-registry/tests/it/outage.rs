//! Lease loss while running: a keeper-backed generator issues IDs from a
//! private etcd, ZooKeeper, PostgreSQL, MariaDB or Redis (`crate::services`,
//! started by the project's scripts on a free port), and the test stops the
//! service mid-run and starts it again. One scenario,
//! [`lease_loss_while_running`], for every service; what must hold:
//! - issuing stops before the lease could run out: every ID handed out after
//!   the service began to stop was handed out before the latest lease end the
//!   keeper knew of (measured from before the request that granted it, so the
//!   service's own expiry is later still);
//! - once refused, no ID while the service is down, every refusal a typed
//!   `MarkReached`, and the status not ready, saying why;
//! - when the service is back the keeper resumes on its own (renewing, or
//!   claiming again), and every ID after is above every ID before.
//!
//! Then the coordinator that forgets: Redis restarted empty or from a
//! snapshot, a lagging PostgreSQL replica promoted (`PrivateService::promote`),
//! MariaDB answering with another `server_id`, and a PostgreSQL standby or
//! MariaDB replica promoted behind a URL naming both servers. Claims are held,
//! holders fence, and the next holder starts above what the old one issued.
//!
//! A service whose software is missing skips the test loudly, or fails it
//! under `CI=true`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idmint_core::{Error as CoreError, Id, Layout};
use idmint_registry::WorkerRegistry;
use idmint_registry::etcd::{EtcdConfig, EtcdRegistry};
use idmint_registry::keeper::{
    GeneratorSettings, KeeperConfig, KeeperGuard, LeaseState, WorkerHandle, WorkerKeeper,
    WorkerStatus,
};
use idmint_registry::redis::{RedisConfig, RedisRegistry};
use idmint_registry::sql::{SqlConfig, SqlMode, SqlRegistry};
use idmint_registry::zookeeper::{ZooKeeperConfig, ZooKeeperMode, ZooKeeperRegistry};

use crate::services::{PrivateService, Service};
use crate::support::{id_time, identity};

const LAYOUT: Layout = Layout::TWITTER;

/// One attempt to issue: when it returned, what it returned, and the lease end
/// the keeper knew of just before.
struct Attempt {
    at: Instant,
    result: Result<u64, CoreError>,
    lease_end: Option<Instant>,
}

/// Issues IDs on a thread of its own, one every 200 µs, until stopped, noting
/// the keeper's lease end before each.
struct Issuer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Attempt>>,
}

impl Issuer {
    fn start(handle: WorkerHandle) -> Issuer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut log = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let lease_end = handle
                    .status()
                    .lease_left
                    .filter(|left| !left.is_zero())
                    .map(|left| Instant::now() + left);
                let result = handle.next_id().map(Id::get);
                log.push(Attempt {
                    at: Instant::now(),
                    result,
                    lease_end,
                });
                std::thread::sleep(Duration::from_micros(200));
            }
            log
        });
        Issuer { stop, thread }
    }

    fn finish(self) -> Vec<Attempt> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .expect("the issuing thread does not panic")
    }
}

/// What an outage run saw, for checks of one backend's own.
struct Outage {
    /// IDs issued before the service was started again.
    before: Vec<u64>,
    /// IDs issued after.
    after: Vec<u64>,
    /// The status once the keeper resumed.
    resumed: WorkerStatus,
}

/// The scenario (see the module docs). `run` is how long the keeper issues
/// before the stop: a few renewals.
async fn lease_loss_while_running(
    service: &PrivateService,
    registry: Arc<dyn WorkerRegistry>,
    keeper: KeeperConfig,
    run: Duration,
) -> (KeeperGuard, Outage) {
    let kind = service.name();
    let guard = WorkerKeeper::start(
        registry,
        identity(1),
        GeneratorSettings::new(LAYOUT),
        keeper,
    )
    .await
    .unwrap_or_else(|e| panic!("{kind}: the keeper starts on the private service: {e}"));
    let handle = guard.handle().clone();
    let issuer = Issuer::start(handle.clone());
    tokio::time::sleep(run).await;
    assert!(handle.status().is_ready(), "{:?}", handle.status());

    // The service goes away.
    let stopping = Instant::now();
    tokio::task::block_in_place(|| service.stop());
    let stopped = Instant::now();
    // Issuing stops, and the keeper says why.
    let deadline = stopped + Duration::from_secs(10);
    loop {
        let status = handle.status();
        if matches!(status.lease, LeaseState::Expired | LeaseState::Lost) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{kind}: still {:?} 10s after the service stopped",
            status
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let down = handle.status();
    assert!(!down.is_ready(), "{kind}: {down:?}");
    assert!(down.not_ready_reason().is_some());
    assert!(down.last_error.is_some(), "{kind}: {down:?}");
    // Down for a while longer: nothing is issued.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(matches!(
        handle.next_id(),
        Err(CoreError::MarkReached { .. })
    ));

    // The service comes back on the same port.
    let restarting = Instant::now();
    tokio::task::block_in_place(|| service.restart());
    let restarted = Instant::now();
    let deadline = restarted + Duration::from_secs(20);
    while handle.next_id().is_err() {
        assert!(
            Instant::now() < deadline,
            "{kind}: did not resume within 20s of the service returning: {:?}",
            handle.status()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let resumed_after = restarted.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = issuer.finish();
    let resumed = handle.status();

    // Every ID, across the outage and the re-claim, above every earlier one.
    let ids: Vec<u64> = log
        .iter()
        .filter_map(|a| a.result.as_ref().ok().copied())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "{kind}: the IDs did not keep increasing across the outage"
    );
    // Nothing issued past the lease's end, once the service was stopping.
    let mut lease_end: Option<Instant> = None;
    let mut last_ok_while_down = None;
    let mut first_refusal = None;
    for a in log.iter().filter(|a| a.at < restarting) {
        lease_end = lease_end.max(a.lease_end);
        if a.at < stopping {
            continue;
        }
        match &a.result {
            Ok(id) => {
                let end = lease_end.expect("a lease while issuing");
                assert!(
                    a.at < end,
                    "{kind}: issued {id} {:?} after the lease's end",
                    a.at - end
                );
                assert!(
                    first_refusal.is_none(),
                    "{kind}: issued {id} after a refusal while the service was down"
                );
                last_ok_while_down = Some(a.at);
            }
            Err(CoreError::MarkReached { .. }) => {
                first_refusal.get_or_insert(a.at);
            }
            Err(e) => panic!("{kind}: expected MarkReached while down, got {e}"),
        }
    }
    let first_refusal = first_refusal.expect("issuing stopped while the service was down");
    let before: Vec<u64> = log
        .iter()
        .filter(|a| a.at < restarting)
        .filter_map(|a| a.result.as_ref().ok().copied())
        .collect();
    let after: Vec<u64> = log
        .iter()
        .filter(|a| a.at >= restarting)
        .filter_map(|a| a.result.as_ref().ok().copied())
        .collect();
    assert!(before.len() > 100, "{kind}: {} IDs before", before.len());
    assert!(!after.is_empty(), "{kind}: no ID after the restart");
    let (max_before, min_after) = (before[before.len() - 1], after[0]);
    assert!(
        min_after > max_before,
        "{kind}: after the restart {min_after} (at {}) is not above {max_before} (at {})",
        id_time(&LAYOUT, Id::new(min_after).unwrap()),
        id_time(&LAYOUT, Id::new(max_before).unwrap()),
    );
    assert!(resumed.is_ready(), "{kind}: {resumed:?}");
    assert_eq!(resumed.lease, LeaseState::Held);
    eprintln!(
        "{kind} outage: stop took {:?}; last ID {:?} and first refusal {:?} after the stop \
         began (lease ended {:?} after it); resumed {resumed_after:?} after the restart, \
         generation {}; {} IDs before, {} after",
        stopped - stopping,
        last_ok_while_down.map(|t: Instant| t - stopping),
        first_refusal - stopping,
        lease_end.map(|e| e.saturating_duration_since(stopping)),
        resumed.generation,
        before.len(),
        after.len(),
    );
    (
        guard,
        Outage {
            before,
            after,
            resumed,
        },
    )
}

/// A 2 s lease (etcd's least), renewed every 2/3 s; issuing stops 0.5 s before
/// it ends.
fn keeper_config() -> KeeperConfig {
    KeeperConfig::new()
        .with_lease_margin(Duration::from_millis(500))
        .with_call_timeout(Duration::from_secs(1))
        .with_retry_interval(Duration::from_millis(250))
        .with_check_interval(Duration::from_millis(50))
        .with_report_interval(Duration::from_millis(500))
}

const TTL: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stopped_mid_run() {
    let Some(etcd) = PrivateService::start(Service::Etcd) else {
        return;
    };
    let config = EtcdConfig::new()
        .with_cluster("outage")
        .with_lease_ttl(TTL)
        .with_timeout(Duration::from_millis(500));
    let registry = EtcdRegistry::connect(&[etcd.address()], config)
        .await
        .unwrap();
    let (guard, _) =
        lease_loss_while_running(&etcd, Arc::new(registry), keeper_config(), TTL).await;
    guard.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_stopped_mid_run() {
    let Some(zk) = PrivateService::start(Service::ZooKeeper) else {
        return;
    };
    let config = ZooKeeperConfig::new(ZooKeeperMode::Ephemeral)
        .with_cluster("outage")
        .with_session_timeout(TTL)
        .with_timeout(Duration::from_secs(1));
    let registry = ZooKeeperRegistry::connect(zk.address(), config)
        .await
        .unwrap();
    // Down longer than the session's timeout: the session expires, and the
    // registry must open a new one to claim again.
    let (guard, outage) =
        lease_loss_while_running(&zk, Arc::new(registry), keeper_config(), TTL).await;
    assert!(outage.resumed.generation >= 1);
    guard.shutdown().await;
}

fn sql_config() -> SqlConfig {
    SqlConfig::new(SqlMode::Lease)
        .with_cluster("outage")
        .with_lease_ttl(TTL)
        .with_timeout(Duration::from_secs(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_mid_run() {
    let Some(pg) = PrivateService::start(Service::Postgres) else {
        return;
    };
    let registry = SqlRegistry::connect(pg.address(), sql_config())
        .await
        .unwrap();
    let (guard, _) = lease_loss_while_running(&pg, Arc::new(registry), keeper_config(), TTL).await;
    guard.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_stopped_mid_run() {
    let Some(maria) = PrivateService::start(Service::MariaDb) else {
        return;
    };
    let registry = SqlRegistry::connect(maria.address(), sql_config())
        .await
        .unwrap();
    let (guard, _) =
        lease_loss_while_running(&maria, Arc::new(registry), keeper_config(), TTL).await;
    guard.shutdown().await;
}

/// Redis without persistence comes back empty: the lease and the worker's mark
/// are gone (the documented limit of the `redis` registry). The keeper finds
/// its lease lost, claims again, and starts above the last mark it persisted
/// itself; the fresh Redis then holds a mark above every ID issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_comes_back_empty() {
    let Some(redis) = PrivateService::start(Service::Redis) else {
        return;
    };
    let ttl = Duration::from_secs(1);
    let config = RedisConfig::new()
        .with_cluster("outage")
        .with_lease_ttl(ttl)
        .with_timeout(Duration::from_millis(200));
    let registry = Arc::new(
        RedisRegistry::connect(redis.address(), config)
            .await
            .unwrap(),
    );
    let keeper = KeeperConfig::new()
        .with_window(Duration::from_millis(600))
        .with_check_interval(Duration::from_millis(50))
        .with_report_interval(Duration::from_millis(500))
        .with_lease_margin(Duration::from_millis(250))
        .with_call_timeout(Duration::from_millis(300))
        .with_retry_interval(Duration::from_millis(100));
    let (guard, outage) =
        lease_loss_while_running(&redis, registry.clone(), keeper, Duration::from_millis(800))
            .await;
    assert_eq!(
        outage.resumed.generation, 2,
        "one re-claim: {:?}",
        outage.resumed
    );
    let max_after = *outage.after.last().unwrap();
    let stored = registry
        .stored_mark(guard.handle().worker())
        .await
        .expect("the restarted redis answers")
        .expect("the keeper persisted a mark in the fresh redis");
    assert!(stored >= id_time(&LAYOUT, Id::new(max_after).unwrap()));
    assert!(outage.before.len() > 100);
    guard.shutdown().await;
    // Released: the lease key is gone.
    let mut conn = redis::Client::open(redis.address())
        .and_then(|c| c.get_connection())
        .unwrap();
    let leases: Vec<String> = redis::cmd("KEYS")
        .arg("idmint:{outage}:worker:*")
        .query(&mut conn)
        .unwrap();
    assert!(leases.is_empty(), "{leases:?}");
}

/// How long the Redis at `url` has been up (`INFO server`'s
/// `uptime_in_seconds`, in ms; whole seconds, so it errs low).
fn redis_uptime_ms(url: &str) -> u64 {
    let mut conn = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .unwrap();
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(0, |s| s * 1_000)
}

/// The settings of the Redis-forgets tests: a 2 s lease and a 500 ms mark
/// window, so a hold lasts [`FORGETFUL_HOLD`]: long enough that a loaded
/// machine (CI runs hundreds of tests beside these) still answers a claim
/// within it. The call timeout plays no part in a hold; it is long so a slow
/// answer doesn't become a failed assertion.
fn forgetful_redis_config() -> RedisConfig {
    RedisConfig::new()
        .with_cluster("forgets")
        .with_lease_ttl(Duration::from_secs(2))
        .with_mark_window(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(5))
}

/// Lease TTL + mark window of [`forgetful_redis_config`].
const FORGETFUL_HOLD: Duration = Duration::from_millis(2_500);

/// Claims on `registry`, waiting out its holds (bounded); returns the claim
/// and how many holds were met.
async fn claim_through_holds(
    registry: &RedisRegistry,
    node: usize,
) -> (idmint_registry::Claim, u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut holds = 0;
    loop {
        match registry.claim(&identity(node), 4).await {
            Ok(claim) => return (claim, holds),
            Err(idmint_registry::RegistryError::Held { retry_after, .. })
                if Instant::now() < deadline =>
            {
                assert!(retry_after <= FORGETFUL_HOLD, "{retry_after:?}");
                holds += 1;
                tokio::time::sleep(retry_after + Duration::from_millis(20)).await;
            }
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("claim failed: {e}"),
        }
    }
}

/// The first answer to a claim on `registry` that isn't a transient
/// failure, which must be an error: a restarted Redis holds claims for
/// [`FORGETFUL_HOLD`] from the first call that finds it restarted, sent no
/// earlier than `since`. A claim granted before that hold could have ended
/// fails the test; one granted later (a machine so loaded that every try
/// within the hold failed transiently) saw no hold either way: `None`, and
/// the caller stops with a loud INCONCLUSIVE line.
async fn first_answer(
    registry: &RedisRegistry,
    node: usize,
    since: Instant,
) -> Option<idmint_registry::RegistryError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match registry.claim(&identity(node), 4).await {
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Some(e),
            Ok(claim) => {
                let after = since.elapsed();
                assert!(
                    after >= FORGETFUL_HOLD,
                    "a restarted Redis gave worker {} {after:?} after the restart, within its hold",
                    claim.worker
                );
                eprintln!(
                    "!!!! INCONCLUSIVE: the first claim after the restart was answered {after:?} \
                     later, after the {FORGETFUL_HOLD:?} hold: too loaded a machine to see it"
                );
                return None;
            }
        }
    }
}

/// Renews `claim`, retrying the failures of a connection that broke with the
/// restart (the next call reconnects); the first other answer.
async fn renew_across_reconnect(
    registry: &RedisRegistry,
    claim: &idmint_registry::Claim,
) -> idmint_registry::RegistryError {
    for _ in 0..10 {
        match registry.renew(claim).await {
            Err(e) if e.is_transient() || e.code() == "registry_backend" => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return e,
            Ok(_) => panic!("renewed a lease the restarted redis should have fenced"),
        }
    }
    panic!("the restarted redis never answered a renewal");
}

/// Redis restarts empty under a holder (issue: two nodes issued the same IDs
/// when a third claimed the freed worker at once). A node that comes after
/// finds the epoch gone and is held for the lease plus the mark window; the
/// holder finds the epoch changed at its next renewal and fences, raising
/// the new epoch's floor to the highest mark it persisted, so the next
/// holder starts above everything it could have issued, even a mark far
/// ahead of the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_holds_claims_and_fences_holders() {
    let Some(redis) = PrivateService::start(Service::Redis) else {
        return;
    };
    let holder = RedisRegistry::connect(redis.address(), forgetful_redis_config())
        .await
        .unwrap();
    // A server that started just now can't show it never held an epoch; on
    // a loaded machine the first claim may come after the hold is over,
    // which is no hold to see.
    let (claim, holds) = claim_through_holds(&holder, 1).await;
    let uptime_ms = redis_uptime_ms(redis.address());
    assert!(
        holds >= 1 || uptime_ms >= 2_500,
        "a Redis up for less than a hold ({uptime_ms} ms) holds the first claim"
    );
    let far = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(600);
    holder
        .persist_mark(&claim, far, jiff::Timestamp::now())
        .await
        .unwrap();

    redis.restart();
    // Nothing calls Redis between its restart and the newcomer's first
    // claim, which finds the restart and starts the hold.
    let restarted = Instant::now();
    let newcomer = RedisRegistry::connect(redis.address(), forgetful_redis_config())
        .await
        .unwrap();
    let Some(err) = first_answer(&newcomer, 2, restarted).await else {
        return;
    };
    assert_eq!(err.code(), "registry_held", "{err}");
    assert!(err.to_string().contains("epoch key"), "{err}");

    let err = renew_across_reconnect(&holder, &claim).await;
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert!(err.to_string().contains("epoch changed"), "{err}");
    let err = holder
        .persist_mark(&claim, far, jiff::Timestamp::now())
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        "lease_lost",
        "a fenced holder persists nothing: {err}"
    );

    let (taken, _) = claim_through_holds(&newcomer, 2).await;
    let floor = taken.stored_mark.expect("the new epoch's floor");
    assert!(
        floor >= far.round(jiff::Unit::Millisecond).unwrap() - jiff::SignedDuration::from_millis(1),
        "the next holder starts above the old holder's mark: {floor} < {far}"
    );
}

/// Redis restarts from a snapshot (here `SHUTDOWN SAVE`, then a start that
/// loads it): the lease survived, but the server changed and a snapshot can
/// be behind, so a new epoch begins, the holder fences at its next renewal
/// and claims are held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_from_a_snapshot_starts_a_new_epoch() {
    let Some(redis) = PrivateService::start(Service::Redis) else {
        return;
    };
    let holder = RedisRegistry::connect(redis.address(), forgetful_redis_config())
        .await
        .unwrap();
    let (claim, _) = claim_through_holds(&holder, 1).await;
    let mut conn = redis::Client::open(redis.address())
        .and_then(|c| c.get_connection())
        .unwrap();
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("SAVE").query(&mut conn);
    redis.restart();
    // The holder's renewal finds the restart and starts the hold.
    let restarted = Instant::now();
    let err = renew_across_reconnect(&holder, &claim).await;
    assert!(err.to_string().contains("epoch changed"), "{err}");
    assert!(err.to_string().contains("server changed"), "{err}");
    let newcomer = RedisRegistry::connect(redis.address(), forgetful_redis_config())
        .await
        .unwrap();
    let Some(err) = first_answer(&newcomer, 2, restarted).await else {
        return;
    };
    assert_eq!(err.code(), "registry_held", "{err}");
    let (claim, _) = claim_through_holds(&newcomer, 2).await;
    newcomer.release(&claim).await.unwrap();
}

/// The settings of the database-forgets tests: a 1 s lease and a 500 ms
/// mark window, so a hold lasts 1.5 s.
fn forgetful_sql_config() -> SqlConfig {
    SqlConfig::new(SqlMode::Lease)
        .with_cluster("forgets")
        .with_lease_ttl(Duration::from_secs(1))
        .with_mark_window(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(1))
}

/// Connects with [`forgetful_sql_config`] as a start does: an answer that a
/// retry changes (its 1 s timeout on a loaded machine, no writable host yet
/// mid-promotion) is tried again, for up to 20 s; anything else fails.
/// Seen in CI beside the fault suite: a setup connect through the
/// two-host URL timed out after 1 s and failed the test before its fault.
async fn connect_as_a_start(url: &str) -> SqlRegistry {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match SqlRegistry::connect(url, forgetful_sql_config()).await {
            Ok(registry) => return registry,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("connecting to {url}: {e}"),
        }
    }
}

/// A keeper persisting 500 ms ahead, as [`forgetful_sql_config`] assumes.
fn forgetful_keeper() -> KeeperConfig {
    KeeperConfig::new()
        .with_window(Duration::from_millis(500))
        .with_check_interval(Duration::from_millis(50))
        .with_report_interval(Duration::from_millis(250))
        .with_lease_margin(Duration::from_millis(250))
        .with_call_timeout(Duration::from_millis(800))
        .with_retry_interval(Duration::from_millis(100))
}

/// One statement on the database at `url`, outside any registry.
async fn sql_admin(url: &str, sql: &str) {
    let db = idmint_sql::Database::connect(&idmint_sql::ConnectOptions::new(url.to_owned()))
        .await
        .unwrap();
    idmint_sql::on_pool!(db.pool(), p => sqlx::query(sql).execute(p).await.map(|_| ()))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    db.close().await;
}

/// A real failover to an asynchronous replica that lags: the replica is
/// copied once the cluster's epoch exists, a keeper then claims worker 0 and
/// issues on the primary only, and the replica is promoted on the same port
/// (a new timeline, and neither the claim nor the marks). Without the epoch
/// a newcomer would be handed worker 0 at once and issue the holder's IDs.
/// Here the newcomer's start waits out the hold, the holder finds the new
/// epoch at its next renewal and raises the floor, and worker 0 either
/// stays the holder's (registered again, when its 1 s lease outlived the
/// promotion) or, free again in the promoted database, goes to one of them
/// (whichever claims first once the hold is over); no ID is issued twice,
/// and each worker's IDs keep increasing across its holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_promoted_replica_holds_claims_and_fences_holders() {
    let Some(pg) = PrivateService::start(Service::Postgres) else {
        return;
    };
    let url = pg.address().to_owned();
    let first = SqlRegistry::connect(&url, forgetful_sql_config())
        .await
        .unwrap();
    let before = first
        .server_identity()
        .await
        .unwrap()
        .expect("postgres shows its identity");
    let claim = first.claim(&identity(9), 4).await.unwrap();
    first.release(&claim).await.unwrap();
    first.close().await;
    tokio::task::block_in_place(|| pg.replicate());

    let holder = WorkerKeeper::start(
        Arc::new(
            SqlRegistry::connect(&url, forgetful_sql_config())
                .await
                .unwrap(),
        ),
        identity(1),
        GeneratorSettings::new(LAYOUT),
        forgetful_keeper(),
    )
    .await
    .unwrap();
    let held = holder.handle().clone();
    assert_eq!(held.worker(), 0);
    let holder_ids = Issuer::start(held.clone());
    tokio::time::sleep(Duration::from_millis(800)).await;
    let persisted = held.status().persisted_mark.expect("a persisted mark");

    let promoting = Instant::now();
    tokio::task::block_in_place(|| pg.promote());
    let promoted_in = promoting.elapsed();
    // The promoted server may refuse a moment longer on a loaded machine
    // (seen once in a full run): connect as a restarted node would, retrying.
    let deadline = Instant::now() + Duration::from_secs(15);
    let registry = loop {
        match SqlRegistry::connect(&url, forgetful_sql_config()).await {
            Ok(registry) => break registry,
            Err(e) if Instant::now() < deadline => {
                eprintln!("connecting after the promotion: {e}; again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the promoted server refused for 15 s: {e}"),
        }
    };
    let after = registry.server_identity().await.unwrap().unwrap();
    let (system, timeline) = before.split_once('/').unwrap();
    let (system_after, timeline_after) = after.split_once('/').unwrap();
    assert_eq!(system, system_after, "{before} → {after}");
    assert_eq!(
        timeline_after.parse::<u32>().unwrap(),
        timeline.parse::<u32>().unwrap() + 1,
        "{before} → {after}"
    );
    // The promoted database lost the claim: no worker is held there under a
    // token of an earlier epoch (nothing is claimed before the hold is
    // over; a holder whose lease outlived the promotion may have
    // registered its worker again, in the new epoch).
    let held_sql = "SELECT COUNT(*) FROM idmint_worker WHERE CLUSTER = 'forgets' \
                    AND TOKEN IS NOT NULL AND TOKEN NOT LIKE (SELECT EPOCH_ID || '/%' \
                    FROM idmint_registry_epoch WHERE CLUSTER = 'forgets')";
    let db = idmint_sql::Database::connect(&idmint_sql::ConnectOptions::new(url.clone()))
        .await
        .unwrap();
    let held_rows: i64 = idmint_sql::on_pool!(db.pool(), p => {
        sqlx::query_scalar(held_sql).fetch_one(p).await
    })
    .unwrap();
    assert_eq!(held_rows, 0, "the replica knew of the holder's claim");

    let starting = Instant::now();
    let newcomer = WorkerKeeper::start(
        Arc::new(registry),
        identity(2),
        GeneratorSettings::new(LAYOUT),
        forgetful_keeper(),
    )
    .await
    .expect("the newcomer starts once the hold is over");
    let waited = starting.elapsed();
    let hold_over = Instant::now();
    assert!(waited >= Duration::from_millis(500), "no hold: {waited:?}");
    let newcomer_ids = Issuer::start(newcomer.handle().clone());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let newcomer_log = newcomer_ids.finish();
    let holder_log = holder_ids.finish();

    // The holder fenced and raised the new epoch's floor above its marks.
    let floor_sql = "SELECT FLOOR_US FROM idmint_registry_epoch WHERE CLUSTER = 'forgets'";
    let floor: i64 = idmint_sql::on_pool!(db.pool(), p => {
        sqlx::query_scalar(floor_sql).fetch_one(p).await
    })
    .unwrap();
    db.close().await;
    assert!(
        floor >= persisted.as_microsecond(),
        "floor {floor} below the holder's mark {persisted}"
    );

    let issued_by = |log: &[Attempt]| -> Vec<(Instant, u64)> {
        log.iter()
            .filter_map(|a| a.result.as_ref().ok().map(|id| (a.at, *id)))
            .collect()
    };
    let (old, new) = (issued_by(&holder_log), issued_by(&newcomer_log));
    assert!(
        old.len() > 100 && new.len() > 100,
        "{} {}",
        old.len(),
        new.len()
    );
    let mut issued: Vec<(Instant, u64)> = old.iter().chain(&new).copied().collect();
    issued.sort_by_key(|(at, _)| *at);
    let distinct: std::collections::HashSet<u64> = issued.iter().map(|(_, id)| *id).collect();
    assert_eq!(distinct.len(), issued.len(), "an ID issued twice");
    let worker_of = |id: u64| LAYOUT.decode(id).unwrap().worker;
    let mut last = std::collections::HashMap::new();
    for (_, id) in &issued {
        if let Some(previous) = last.insert(worker_of(*id), *id) {
            assert!(
                *id > previous,
                "worker {}: {id} after {previous}",
                worker_of(*id)
            );
        }
    }
    assert!(
        issued
            .iter()
            .any(|(at, id)| *at > hold_over && worker_of(*id) == 0),
        "worker 0 was held again after the failover"
    );
    eprintln!(
        "postgres promotion: promoted in {promoted_in:?}; the newcomer waited {waited:?} \
         (worker {}); the holder issued {} IDs (re-claimed as worker {}, generation {}), \
         the newcomer {}",
        newcomer.handle().worker(),
        old.len(),
        held.worker(),
        held.status().generation,
        new.len()
    );
    newcomer.shutdown().await;
    holder.shutdown().await;
}

/// The longest stretch between two IDs a holder issued, within `log`.
fn longest_gap(log: &[Attempt]) -> Duration {
    let issued: Vec<Instant> = log
        .iter()
        .filter(|a| a.result.is_ok())
        .map(|a| a.at)
        .collect();
    issued
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(Duration::ZERO)
}

/// Issue 32, item 4: a promotion of a lagging replica that takes less than
/// the lease costs a live holder the promotion, not the hold. The holder
/// (lease 10 s, window 1 s: a hold of 11 s) finds the new epoch at its next
/// renewal or mark, registers its worker again with its highest mark, and
/// goes on with the same generator; a newcomer's claim is still held (the
/// hold keeps everyone else off the workers a live holder may register
/// again), and no ID is issued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_promotion_keeps_a_live_holder_issuing() {
    let Some(pg) = PrivateService::start(Service::Postgres) else {
        return;
    };
    let url = pg.address().to_owned();
    let config = || {
        SqlConfig::new(SqlMode::Lease)
            .with_cluster("keeps")
            .with_lease_ttl(Duration::from_secs(10))
            .with_mark_window(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(1))
    };
    // The cluster's epoch and worker 0's row exist before the copy.
    let first = SqlRegistry::connect(&url, config()).await.unwrap();
    let claim = first.claim(&identity(9), 4).await.unwrap();
    first.release(&claim).await.unwrap();
    first.close().await;
    tokio::task::block_in_place(|| pg.replicate());

    let keeper = KeeperConfig::new()
        .with_window(Duration::from_secs(1))
        .with_check_interval(Duration::from_millis(50))
        .with_report_interval(Duration::from_millis(500))
        .with_call_timeout(Duration::from_secs(1));
    let holder = WorkerKeeper::start(
        Arc::new(SqlRegistry::connect(&url, config()).await.unwrap()),
        identity(1),
        GeneratorSettings::new(LAYOUT),
        keeper,
    )
    .await
    .unwrap();
    let held = holder.handle().clone();
    let worker = held.worker();
    let ids = Issuer::start(held.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let persisted = held.status().persisted_mark.expect("a persisted mark");

    let promoting = Instant::now();
    tokio::task::block_in_place(|| pg.promote());
    let promoted_in = promoting.elapsed();
    // The promoted database lacks the claim and the marks; the holder finds
    // the new epoch at its next renewal or mark and registers again: its
    // row holds a token again, with a mark at or above everything it
    // persisted before the promotion. Well within the hold.
    let row = format!(
        "SELECT MARK_US FROM idmint_worker WHERE CLUSTER = 'keeps' AND WORKER = {worker} \
         AND TOKEN IS NOT NULL"
    );
    let db = idmint_sql::Database::connect(&idmint_sql::ConnectOptions::new(url.clone()))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let mark: Option<i64> = idmint_sql::on_pool!(db.pool(), p => {
            sqlx::query_scalar(&row).fetch_optional(p).await
        })
        .unwrap_or(None)
        .flatten();
        if mark.is_some_and(|m| m >= persisted.as_microsecond()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "worker {worker} not registered again within 8 s of the promotion: mark {mark:?}, \
             the holder persisted {persisted}; {:?}",
            held.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    db.close().await;
    let registered_after = promoting.elapsed();
    // Anyone else's claim is still held.
    let newcomer = SqlRegistry::connect(&url, config()).await.unwrap();
    let err = newcomer.claim(&identity(2), 4).await.unwrap_err();
    assert_eq!(err.code(), "registry_held", "{err}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let log = ids.finish();
    let gap = longest_gap(&log);
    let status = held.status();
    eprintln!(
        "postgres promotion with a live holder: promoted in {promoted_in:?}; registered again \
         {registered_after:?} after the promotion began; the longest gap between IDs {gap:?} \
         (a hold is 11 s); generation {}",
        status.generation
    );
    assert_eq!(held.worker(), worker, "the holder kept its worker");
    assert_eq!(status.generation, 1, "no new claim: {status:?}");
    assert_eq!(status.lease, LeaseState::Held, "{status:?}");
    assert!(
        gap < promoted_in + Duration::from_secs(3),
        "a gap of {gap:?} for a promotion of {promoted_in:?}"
    );
    let issued: Vec<u64> = log
        .iter()
        .filter_map(|a| a.result.as_ref().ok().copied())
        .collect();
    assert!(
        issued.windows(2).all(|w| w[0] < w[1]),
        "the holder's IDs went back or repeated"
    );
    newcomer.close().await;
    holder.shutdown().await;
}

/// MariaDB answering with another `server_id`, as a replica promoted in a
/// failover does (replication requires them to differ; here `SET GLOBAL
/// server_id` on a private server, so the registry reads a real change):
/// claims are held, the holder's renewal fences it, and after the hold a
/// claim starts above the holder's highest mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_with_another_server_id_holds_claims_and_fences_holders() {
    let Some(maria) = PrivateService::start(Service::MariaDb) else {
        return;
    };
    let url = maria.address().to_owned();
    let holder = SqlRegistry::connect(&url, forgetful_sql_config())
        .await
        .unwrap();
    let before = holder.server_identity().await.unwrap().unwrap();
    let claim = holder.claim(&identity(1), 4).await.unwrap();
    let far = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(600);
    holder
        .persist_mark(&claim, far, jiff::Timestamp::now())
        .await
        .unwrap();

    sql_admin(&url, "SET GLOBAL server_id = 4242").await;
    let after = holder.server_identity().await.unwrap().unwrap();
    assert!(
        after.starts_with("4242@") && after != before,
        "{before} → {after}"
    );
    let newcomer = SqlRegistry::connect(&url, forgetful_sql_config())
        .await
        .unwrap();
    let err = newcomer.claim(&identity(2), 4).await.unwrap_err();
    let idmint_registry::RegistryError::Held { retry_after, .. } = &err else {
        panic!("claims are held, not {err}");
    };
    let text = err.to_string();
    assert!(
        text.contains(&format!("was {before}, now {after}")),
        "{text}"
    );
    let err = holder.renew(&claim).await.unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert!(err.to_string().contains("epoch changed"), "{err}");

    tokio::time::sleep(*retry_after + Duration::from_millis(20)).await;
    let taken = newcomer.claim(&identity(2), 4).await.unwrap();
    let floor = taken.stored_mark.expect("the new epoch's floor");
    assert!(
        floor >= far.round(jiff::Unit::Microsecond).unwrap() - jiff::SignedDuration::from_micros(1),
        "the next holder starts above the old holder's mark: {floor} < {far}"
    );
}

/// A promotion through a URL that names both servers, the old primary
/// stopped: a PostgreSQL streaming standby (`scripts/postgres standby`,
/// libpq's multi-host URL) or a MariaDB replica (`scripts/mariadb replica`, a
/// host list). The holder's registry follows the new primary on its own, the
/// epoch check sees the change of server exactly as through a one-host URL
/// (claims held, the holder fenced, with the old and the new identity named),
/// and no ID is issued twice. The holder's longest pause is printed
/// (docs/operating.md quotes it).
async fn promoted_through_a_host_list(service: Service) {
    let Some(db) = PrivateService::start(service) else {
        return;
    };
    let (url, promote) = match service {
        Service::Postgres => {
            db.action("standby");
            let url = db.env("standby.env", "IDMINT_TEST_POSTGRES_PAIR_URL");
            (url, "promote-standby")
        }
        _ => {
            db.action("replica");
            (
                db.env("replica.env", "IDMINT_TEST_MYSQL_PAIR_URL"),
                "promote",
            )
        }
    };
    // The standby alone, asked to be writable: a transient refusal that a
    // start retries (a promotion may be under way), naming what it found.
    let standby_only = match service {
        Service::Postgres => format!(
            "{}?target_session_attrs=read-write",
            db.env("standby.env", "IDMINT_TEST_POSTGRES_STANDBY_URL")
        ),
        _ => {
            let replica = db.env("replica.env", "IDMINT_TEST_MYSQL_REPLICA_URL");
            let host = replica
                .split_once('@')
                .unwrap()
                .1
                .split_once('/')
                .unwrap()
                .0;
            format!("mysql://root@{host},{host}/idmint")
        }
    };
    // A timeout (a loaded machine) says nothing yet: asked again.
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        let err = SqlRegistry::connect(&standby_only, forgetful_sql_config())
            .await
            .unwrap_err();
        if err.code() != "registry_timeout" || Instant::now() >= deadline {
            break err;
        }
    };
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("no writable host"), "{err}");

    let probe = connect_as_a_start(&url).await;
    let before = probe.server_identity().await.unwrap().unwrap();
    probe.close().await;

    let holder = WorkerKeeper::start(
        Arc::new(connect_as_a_start(&url).await),
        identity(1),
        GeneratorSettings::new(LAYOUT),
        forgetful_keeper(),
    )
    .await
    .unwrap();
    let held = holder.handle().clone();
    let holder_ids = Issuer::start(held.clone());
    tokio::time::sleep(Duration::from_millis(800)).await;

    let promoting = Instant::now();
    tokio::task::block_in_place(|| db.action(promote));
    let promoted_in = promoting.elapsed();
    let promoted = Instant::now();
    let promoted_at = jiff::Timestamp::now();

    // A node connecting now, through the same URL, reaches the new primary
    // and finds the change of server, as through a one-host URL.
    let newcomer_registry = connect_as_a_start(&url).await;
    let after = newcomer_registry.server_identity().await.unwrap().unwrap();
    assert_ne!(before, after, "the promotion changed no identity");
    if service == Service::Postgres {
        let (system, timeline) = before.split_once('/').unwrap();
        let (system_after, timeline_after) = after.split_once('/').unwrap();
        assert_eq!(system, system_after, "{before} → {after}");
        assert_eq!(
            timeline_after.parse::<u32>().unwrap(),
            timeline.parse::<u32>().unwrap() + 1,
            "{before} → {after}"
        );
    }
    let newcomer = WorkerKeeper::start(
        Arc::new(newcomer_registry),
        identity(2),
        GeneratorSettings::new(LAYOUT),
        forgetful_keeper(),
    )
    .await
    .expect("the newcomer starts once the hold is over");
    let waited = promoted.elapsed();
    assert!(waited >= Duration::from_millis(500), "no hold: {waited:?}");
    let newcomer_ids = Issuer::start(newcomer.handle().clone());
    // The holder goes on on the new primary, through the pool it had before
    // the promotion: it registers its worker again in the new epoch (its
    // lease still valid when it finds the change), or fences and claims
    // again after the hold (its 1 s lease ran out first). Either way it
    // persists marks there: later than any it persisted before.
    let deadline = Instant::now() + Duration::from_secs(15);
    let on_new_primary = |s: &WorkerStatus| {
        s.is_ready()
            && s.persisted_mark
                .is_some_and(|m| m > promoted_at + jiff::SignedDuration::from_secs(1))
    };
    while !on_new_primary(&held.status()) {
        assert!(
            Instant::now() < deadline,
            "the holder did not go on on the new primary: {:?}",
            held.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let holder_log = holder_ids.finish();
    let newcomer_log = newcomer_ids.finish();

    let issued_by = |log: &[Attempt]| -> Vec<(Instant, u64)> {
        log.iter()
            .filter_map(|a| a.result.as_ref().ok().map(|id| (a.at, *id)))
            .collect()
    };
    let (old, new) = (issued_by(&holder_log), issued_by(&newcomer_log));
    assert!(
        old.iter().any(|(at, _)| *at > promoted),
        "the holder issued nothing on the new primary"
    );
    assert!(new.len() > 100, "the newcomer issued {}", new.len());
    let mut issued: Vec<(Instant, u64)> = old.iter().chain(&new).copied().collect();
    issued.sort_by_key(|(at, _)| *at);
    let distinct: std::collections::HashSet<u64> = issued.iter().map(|(_, id)| *id).collect();
    assert_eq!(distinct.len(), issued.len(), "an ID issued twice");
    let worker_of = |id: u64| LAYOUT.decode(id).unwrap().worker;
    let mut last = std::collections::HashMap::new();
    for (_, id) in &issued {
        if let Some(previous) = last.insert(worker_of(*id), *id) {
            assert!(
                *id > previous,
                "worker {}: {id} after {previous}",
                worker_of(*id)
            );
        }
    }
    let gap = old.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap();
    eprintln!(
        "{} promotion through a host list: the script took {promoted_in:?}; the identity went \
         {before} → {after}; the newcomer waited {waited:?}; the holder's longest pause was \
         {gap:?} (lease TTL 1 s + window 500 ms), {}; {} + {} IDs, none twice",
        db.name(),
        if held.status().generation == 1 {
            "its worker registered again"
        } else {
            "claimed again after the hold"
        },
        old.len(),
        new.len()
    );
    newcomer.shutdown().await;
    holder.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_standby_promoted_through_a_multi_host_url() {
    promoted_through_a_host_list(Service::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_replica_promoted_through_a_host_list() {
    promoted_through_a_host_list(Service::MariaDb).await;
}

/// A PostgreSQL that won't show its identity (`pg_control_system()`
/// revoked, as a managed service may): the registry still connects and
/// claims, warning that a change of server goes unseen, and reports no
/// identity. A node of the same cluster that does read it (another role)
/// takes the recorded "unreadable" for another server and holds claims
/// once; after that both go on, neither beginning epochs for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_hiding_its_identity_still_serves() {
    let Some(pg) = PrivateService::start(Service::Postgres) else {
        return;
    };
    let url = pg.address().to_owned();
    for sql in [
        "CREATE ROLE app LOGIN",
        "GRANT CREATE ON SCHEMA public TO app",
        "REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC",
    ] {
        sql_admin(&url, sql).await;
    }
    let as_app = url.replacen("postgres://postgres@", "postgres://app@", 1);
    assert_ne!(as_app, url);
    let registry = SqlRegistry::connect(&as_app, forgetful_sql_config())
        .await
        .unwrap();
    assert_eq!(registry.server_identity().await.unwrap(), None);
    let claim = registry.claim(&identity(1), 4).await.unwrap();
    registry.renew(&claim).await.unwrap();
    registry
        .persist_mark(&claim, jiff::Timestamp::now(), jiff::Timestamp::now())
        .await
        .unwrap();
    // As a superuser the same server does show it: the registry read as `app`.
    let reader = SqlRegistry::connect(&url, forgetful_sql_config())
        .await
        .unwrap();
    assert!(reader.server_identity().await.unwrap().is_some());
    let err = reader.claim(&identity(2), 4).await.unwrap_err();
    let idmint_registry::RegistryError::Held { retry_after, .. } = &err else {
        panic!("the reader takes \"unreadable\" for another server, not {err}");
    };
    tokio::time::sleep(*retry_after + Duration::from_millis(20)).await;
    let theirs = reader.claim(&identity(2), 4).await.unwrap();
    // The old claim's epoch is gone; the next ones are not held, either way.
    let err = registry.renew(&claim).await.unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    let ours = registry.claim(&identity(1), 4).await.unwrap();
    registry.renew(&ours).await.unwrap();
    reader.renew(&theirs).await.unwrap();
    let third = reader.claim(&identity(3), 4).await.unwrap();
    assert_ne!(third.worker, ours.worker);
}
