//! The `redis` registry on the topologies production runs, started by the
//! project's scripts on loopback (`idmint_testkit::redis_ha`): a primary with
//! 2 replicas behind 3 sentinels, and a 6-node Redis Cluster.
//!
//! - The registry contract holds through the sentinels and on the cluster.
//! - A failover that loses writes (the primary's replicas SIGSTOPped while
//!   the holder persists a mark far ahead, then the primary SIGKILLed and a
//!   replica promoted) is detected as a promotion: the holder fences at its
//!   next renewal and raises the new epoch's floor to that lost mark, claims
//!   wait out the hold, and every later holder starts above the lost mark,
//!   so no worker is issued twice and no ID again. Each prints what the
//!   failover cost (kill to promotion, kill to serving again).
//! - A holder whose lease outlives the failover registers its worker again
//!   in the new epoch and keeps issuing: the failover costs it about its own
//!   length, not the hold (issue 32). The rules of that registration are
//!   checked on the machine's Redis too (`a_holder_registers_again_only_…`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint_core::Layout;
use idmint_registry::keeper::{GeneratorSettings, KeeperConfig, WorkerHandle, WorkerKeeper};
use idmint_registry::redis::{
    ClusterTarget, RedisConfig, RedisRegistry, RedisTarget, SentinelTarget,
};
use idmint_registry::{RegistryError, WorkerRegistry};
use idmint_testkit::redis_ha::{ClusterDeployment, SentinelDeployment};

use crate::contract::{Backend, Holding};
use crate::support::{identity, unique_name};

fn sentinel_target(d: &SentinelDeployment) -> RedisTarget {
    RedisTarget::Sentinel(SentinelTarget::new(d.sentinels().to_vec(), d.master_name()))
}

fn cluster_target(d: &ClusterDeployment) -> RedisTarget {
    // Two of the six nodes: the client learns the rest from them.
    RedisTarget::Cluster(ClusterTarget::new(d.nodes()[..2].to_vec()))
}

/// A test's key space (a hash-tagged prefix) on a shared topology.
struct HaBackend {
    target: RedisTarget,
    prefix: String,
}

#[async_trait]
impl Backend for HaBackend {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn holding(&self) -> Holding {
        Holding::Lease
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(600)
    }

    async fn node(&self, ttl: Duration) -> Arc<dyn WorkerRegistry> {
        let config = RedisConfig::new()
            .with_prefix(self.prefix.clone())
            .with_lease_ttl(ttl);
        Arc::new(
            RedisRegistry::open(&self.target, config)
                .await
                .expect("the topology is up, so open succeeds"),
        )
    }
}

/// A backend under a new prefix whose epoch is already set. A server up
/// for less than a hold (these were just started) holds a prefix's first
/// claim for lease TTL + window, as it should (it can't show it never had
/// the keys); a claim with a 1 ms lease and window waits that out at once,
/// and the epoch it starts keeps no hold for the scenario's nodes.
async fn primed(target: &RedisTarget, test: &str) -> HaBackend {
    let prefix = format!("idmint-test:{{{}}}:", unique_name(test));
    let config = RedisConfig::new()
        .with_prefix(prefix.clone())
        .with_lease_ttl(Duration::from_millis(1))
        .with_mark_window(Duration::from_millis(1));
    let registry = RedisRegistry::open(target, config).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let claim = loop {
        match registry.claim(&identity(0), 1).await {
            Ok(claim) => break claim,
            Err(RegistryError::Held { retry_after, .. }) if Instant::now() < deadline => {
                tokio::time::sleep(retry_after + Duration::from_millis(5)).await;
            }
            Err(e) => panic!("priming {prefix}: {e}"),
        }
    };
    registry.release(&claim).await.unwrap();
    HaBackend {
        target: target.clone(),
        prefix,
    }
}

/// Runs a part of the registry contract on `target`, each scenario under its
/// own prefix.
async fn contract_on(target: &RedisTarget) {
    use crate::contract as c;
    c::sixteen_concurrent_claimers_get_distinct_workers(primed(target, "sixteen").await).await;
    c::persisting_only_ever_raises_the_mark(primed(target, "raises").await).await;
    c::release_frees_the_worker_at_once_and_fences_the_old_claim(primed(target, "release").await)
        .await;
    c::takeover_after_expiry_starts_above_the_dead_nodes_mark_and_fences_it(
        primed(target, "takeover").await,
    )
    .await;
    c::the_fleet_lists_every_holder_with_its_identity_report_and_mark(
        primed(target, "fleet").await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_holds_through_sentinel_and_on_a_cluster() {
    let Some(sentinel) = SentinelDeployment::start() else {
        return;
    };
    contract_on(&sentinel_target(&sentinel)).await;
    drop(sentinel);
    let Some(cluster) = ClusterDeployment::start() else {
        return;
    };
    contract_on(&cluster_target(&cluster)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_refuses_a_prefix_whose_keys_span_slots() {
    // Checked before connecting: no cluster needed.
    let target = RedisTarget::Cluster(ClusterTarget::new(vec!["127.0.0.1:1".to_owned()]));
    let err = RedisRegistry::open(&target, RedisConfig::new().with_prefix("idmint:plain:"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
    assert!(err.to_string().contains("hash tag"), "{err}");
}

/// The failover tests' settings: a 4 s lease (between a renewal and the
/// next write the scripts pause the replicas, after waiting for them to
/// catch up, which a busy machine slowed past a 2 s lease) and a 500 ms
/// mark window: a hold of 4.5 s.
fn ha_config() -> RedisConfig {
    RedisConfig::new()
        .with_cluster("ha")
        .with_lease_ttl(Duration::from_secs(4))
        .with_mark_window(Duration::from_millis(500))
        .with_timeout(Duration::from_millis(500))
}

/// Claims on `registry`, waiting out its holds (bounded, each at most the
/// configured hold); returns the claim and how many holds were met.
async fn claim_through_holds(
    registry: &RedisRegistry,
    node: usize,
) -> (idmint_registry::Claim, u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut holds = 0;
    loop {
        match registry.claim(&identity(node), 4).await {
            Ok(claim) => return (claim, holds),
            Err(RegistryError::Held { retry_after, .. }) if Instant::now() < deadline => {
                assert!(retry_after <= ha_config().reset_hold(), "{retry_after:?}");
                holds += 1;
                tokio::time::sleep(retry_after + Duration::from_millis(20)).await;
            }
            // Right after a failover the sentinels (or the cluster's nodes)
            // may still spread the news; on a loaded machine that outlasts
            // the first call.
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("claim failed: {e}"),
        }
    }
}

/// Opens a registry, retrying (bounded) what a failover answers for a while.
async fn open_through_failover(target: &RedisTarget) -> RedisRegistry {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match RedisRegistry::open(target, ha_config()).await {
            Ok(registry) => return registry,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("open failed after the failover: {e}"),
        }
    }
}

/// What a failover cost, as the test saw it.
struct Cost {
    /// From the SIGKILL to the new primary answering as one.
    promoted: Duration,
    /// From the SIGKILL to a claim granted again (the hold waited out).
    serving: Duration,
}

/// The story both topologies share. `pause` SIGSTOPs the primary's replicas,
/// `fail_over` SIGKILLs the primary, resumes the replicas and returns once one
/// is promoted (it lacks every write made while they were stopped).
async fn a_failover_that_lost_writes_is_a_promotion(
    target: RedisTarget,
    pause: impl FnOnce(),
    fail_over: impl FnOnce(),
) -> Cost {
    let holder = RedisRegistry::open(&target, ha_config()).await.unwrap();
    let (claim, _) = claim_through_holds(&holder, 1).await;
    let now = jiff::Timestamp::now;
    holder
        .persist_mark(&claim, now() + jiff::SignedDuration::from_secs(1), now())
        .await
        .unwrap();
    holder.renew(&claim).await.unwrap().expect("still held");

    pause();
    // Reaches the primary only: the replicas are stopped, so a promotion
    // loses it.
    let far = now() + jiff::SignedDuration::from_secs(600);
    holder.persist_mark(&claim, far, now()).await.unwrap();

    let killed = Instant::now();
    tokio::task::block_in_place(fail_over);
    let promoted = killed.elapsed();

    // The promoted primary lacks the far mark (else this proves nothing).
    // Connecting right after the promotion may fail while the sentinels
    // (or the cluster's nodes) still spread the news: retried, bounded.
    let mark_key = format!("{}mark:{}", ha_config().prefix(), claim.worker);
    let deadline = Instant::now() + Duration::from_secs(10);
    let stored: Option<i64> = loop {
        let got = match idmint_redis::RedisConnection::open(&target, Duration::from_secs(1)).await {
            Ok(raw) => {
                raw.call(Duration::from_secs(1), |mut c| {
                    let key = mark_key.clone();
                    async move { redis::cmd("GET").arg(key).query_async(&mut c).await }
                })
                .await
            }
            Err(e) => Err(e),
        };
        match got {
            Ok(v) => break v,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no answer after the failover: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // The replicas had every write before they were paused (the deployment
    // waits for them), so the mark persisted before the pause is there.
    assert!(
        stored.is_some_and(|ms| ms < far.as_millisecond()),
        "the promoted primary should hold the mark from before the pause, not the far one: {stored:?}"
    );

    // The holder fences at its next renewal, naming the promotion, and
    // raises the new epoch's floor to the mark the promotion lost.
    let mut renewing;
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        // The call that finds the new epoch creates it, and its hold runs
        // from then: not before this instant.
        renewing = Instant::now();
        match holder.renew(&claim).await {
            Err(e) if e.is_transient() || e.code() == "registry_backend" => {
                assert!(
                    Instant::now() < deadline,
                    "no answer after the failover: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => break e,
            Ok(_) => panic!("renewed a lease on a primary that lost it"),
        }
    };
    assert_eq!(err.code(), "lease_lost", "{err}");
    let text = err.to_string();
    assert!(
        text.contains("epoch changed") && text.contains("server changed"),
        "{text}"
    );
    assert!(text.contains("promoted from a replica"), "{text}");

    // A node that comes now is held: the lost lease's worker can't be
    // handed out while its old holder could still issue. How long the test
    // itself takes to get there depends on the machine's load, so a claim
    // granted without a hold is a failure only if it was answered before
    // the hold can have ended.
    let newcomer = open_through_failover(&target).await;
    let (taken, holds) = claim_through_holds(&newcomer, 2).await;
    let serving = killed.elapsed();
    if holds == 0 {
        assert!(
            renewing.elapsed() >= ha_config().reset_hold(),
            "a claim {:?} after the promotion was found was not held (hold {:?})",
            renewing.elapsed(),
            ha_config().reset_hold()
        );
        eprintln!(
            "the machine is slow: the newcomer claimed {:?} after the promotion was found, \
             past the hold, so the hold itself went unchecked this run",
            renewing.elapsed()
        );
    }
    let floor = taken.stored_mark.expect("the new epoch's floor");
    let lost = far.round(jiff::Unit::Millisecond).unwrap() - jiff::SignedDuration::from_millis(1);
    assert!(
        floor >= lost,
        "the next holder starts above the mark the promotion lost: {floor} < {far}"
    );
    // The old holder, claiming again, starts above it too.
    let (again, _) = claim_through_holds(&holder, 1).await;
    assert_ne!(again.worker, taken.worker, "one worker, two holders");
    assert!(again.stored_mark.expect("a floor") >= lost);
    Cost { promoted, serving }
}

/// Issue 32: a Sentinel failover after a SIGKILL of the primary, whose
/// replicas lag (SIGSTOPped first, so writes are lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_that_lost_writes_is_detected_as_a_promotion() {
    let Some(d) = SentinelDeployment::start() else {
        return;
    };
    let replicas = d.replicas();
    assert_eq!(replicas.len(), 2, "{replicas:?}");
    let cost = a_failover_that_lost_writes_is_a_promotion(
        sentinel_target(&d),
        || assert_eq!(d.lag_replicas(), replicas),
        || {
            let old = d.kill_primary();
            replicas.iter().for_each(|&p| d.resume(p));
            let new = d.wait_failover(old);
            assert!(replicas.contains(&new), "{new} is not one of {replicas:?}");
        },
    )
    .await;
    eprintln!(
        "redis sentinel failover: promoted {:?} after the SIGKILL; a claim granted again {:?} after it \
         (a hold of lease TTL 2 s + window 500 ms)",
        cost.promoted, cost.serving
    );
}

/// Issue 32: a Redis Cluster master SIGKILLed, its replica (SIGSTOPped first,
/// so writes are lost) promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_failover_that_lost_writes_is_detected_as_a_promotion() {
    let Some(d) = ClusterDeployment::start() else {
        return;
    };
    let slot_key = format!("{}epoch", ha_config().prefix());
    let replicas = d.replicas(&slot_key);
    assert_eq!(replicas.len(), 1, "{replicas:?}");
    let cost = a_failover_that_lost_writes_is_a_promotion(
        cluster_target(&d),
        || assert_eq!(d.lag_replicas(&slot_key), replicas),
        || {
            let old = d.kill_master(&slot_key);
            replicas.iter().for_each(|&p| d.resume(p));
            let new = d.wait_failover(&slot_key, old);
            assert_eq!(vec![new], replicas);
        },
    )
    .await;
    eprintln!(
        "redis cluster master failover: promoted {:?} after the SIGKILL; a claim granted again {:?} \
         after it (a hold of lease TTL 2 s + window 500 ms)",
        cost.promoted, cost.serving
    );
}

/// Issue 32: the rules of [`WorkerRegistry::register_again`] on the real
/// Redis of this machine, its forgetting played by deleting the cluster's
/// epoch key, a lease and a mark (what a failover to a replica that lacked
/// them does): refused within the claim's own epoch; granted in a new epoch
/// to the holder, keeping its worker, raising the mark to the holder's,
/// while every other claim is held; refused while another token holds the
/// worker or a higher mark is stored.
#[tokio::test]
async fn a_holder_registers_again_only_in_a_new_epoch_and_only_its_own_worker() {
    let Some(_redis) = crate::redis::backend("register-again") else {
        return;
    };
    let url = format!(
        "redis://{}/",
        std::env::var("IDMINT_TEST_REDIS_ADDR").unwrap_or_else(|_| "127.0.0.1:6379".to_owned())
    );
    let prefix = format!("idmint-test:{{{}}}:", unique_name("register-again"));
    let config = RedisConfig::new()
        .with_prefix(prefix.clone())
        .with_lease_ttl(Duration::from_secs(5))
        .with_mark_window(Duration::from_millis(500));
    let holder = RedisRegistry::connect(&url, config.clone()).await.unwrap();
    let raw = redis::Client::open(url.as_str()).unwrap();
    let mut conn = raw.get_multiplexed_async_connection().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let claim = loop {
        match holder.claim(&identity(1), 4).await {
            Ok(claim) => break claim,
            Err(RegistryError::Held { retry_after, .. }) if Instant::now() < deadline => {
                tokio::time::sleep(retry_after + Duration::from_millis(20)).await;
            }
            Err(e) => panic!("claim: {e}"),
        }
    };
    let w = claim.worker;
    let now = jiff::Timestamp::now;
    let mark = now() + jiff::SignedDuration::from_secs(2);
    holder.persist_mark(&claim, mark, now()).await.unwrap();

    // Within its epoch, a lost lease stays lost.
    let err = holder
        .register_again(&identity(1), &claim, mark)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert!(err.to_string().contains("within its epoch"), "{err}");

    // Redis forgets: the epoch, the lease and the mark (rolled back).
    let key = |k: &str| format!("{prefix}{k}");
    let forget = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        let keys = [key("epoch"), key(&format!("worker:{w}"))];
        let mark_key = key(&format!("mark:{w}"));
        async move {
            let _: () = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut conn)
                .await
                .unwrap();
            let _: () = redis::cmd("SET")
                .arg(mark_key)
                .arg(1_000)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };
    forget(&mut conn).await;
    let err = holder.renew(&claim).await.unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert!(err.to_string().contains("epoch changed"), "{err}");
    let other = RedisRegistry::connect(&url, config.clone()).await.unwrap();
    let err = other.claim_worker(&identity(2), w, 4).await.unwrap_err();
    assert_eq!(err.code(), "registry_held", "{err}");

    // The holder registers again: the same worker, a new lease in the new
    // epoch, the mark raised back to what it persisted.
    let again = holder
        .register_again(&identity(1), &claim, mark)
        .await
        .unwrap();
    assert_eq!(again.worker, w);
    assert_ne!(again.token, claim.token);
    assert!(again.stored_mark.is_some_and(|m| m
        >= mark.round(jiff::Unit::Millisecond).unwrap() - jiff::SignedDuration::from_millis(1)));
    let stored = holder.stored_mark(w).await.unwrap().unwrap();
    assert!(
        stored.as_millisecond() >= mark.as_millisecond(),
        "{stored} < {mark}"
    );
    // A second try of the same registration (the first one's answer lost)
    // gets the same holding, not "held by another node".
    let retried = holder
        .register_again(&identity(1), &claim, mark)
        .await
        .unwrap();
    assert_eq!((retried.worker, &retried.token), (w, &again.token));
    holder.renew(&again).await.unwrap().expect("held");
    holder.persist_mark(&again, mark, now()).await.unwrap();
    // Registering the new claim again in its own epoch: refused.
    let err = holder
        .register_again(&identity(1), &again, mark)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("within its epoch"), "{err}");

    // Forgotten again, and meanwhile another node's lease on the worker:
    // refused, naming it.
    forget(&mut conn).await;
    let _: () = redis::cmd("SET")
        .arg(key(&format!("worker:{w}")))
        .arg("node-9@10.0.0.9:7009/1/e/ff")
        .arg("PX")
        .arg(5_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = holder.renew(&again).await.unwrap_err();
    assert!(err.to_string().contains("epoch changed"), "{err}");
    let err = holder
        .register_again(&identity(1), &again, mark)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert!(err.to_string().contains("node-9"), "{err}");

    // The lease gone, but a higher mark stored (another holding wrote it):
    // refused.
    let _: () = redis::cmd("DEL")
        .arg(key(&format!("worker:{w}")))
        .query_async(&mut conn)
        .await
        .unwrap();
    let higher = (mark + jiff::SignedDuration::from_secs(60)).as_millisecond();
    let _: () = redis::cmd("SET")
        .arg(key(&format!("mark:{w}")))
        .arg(higher)
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = holder
        .register_again(&identity(1), &again, mark)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "lease_lost", "{err}");
    assert!(err.to_string().contains("another holding"), "{err}");

    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// IDs a handle issues on a thread of its own until stopped: when each came.
fn issue_on(
    handle: WorkerHandle,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(Instant, u64)>> {
    std::thread::spawn(move || {
        let mut issued = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            if let Ok(id) = handle.next_id() {
                issued.push((Instant::now(), id.get()));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        issued
    })
}

/// Issue 32, item 4: a Sentinel failover to a replica that lost writes,
/// under a running keeper whose lease (10 s) outlives it. The holder finds
/// the new epoch (the promoted server) at its next renewal or mark,
/// registers its worker again with its highest mark, and goes on with the
/// same generator: the failover costs it about its own length plus a
/// second, not the lease TTL + window (11 s) a fence and a re-claim cost.
/// Other claims are held meanwhile, and the holder's IDs only increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_keeps_its_worker_through_a_sentinel_failover() {
    let Some(d) = SentinelDeployment::start() else {
        return;
    };
    let target = sentinel_target(&d);
    let primed = primed(&target, "keeps").await;
    let config = RedisConfig::new()
        .with_prefix(primed.prefix.clone())
        .with_lease_ttl(Duration::from_secs(10))
        .with_mark_window(Duration::from_secs(1))
        .with_timeout(Duration::from_millis(500));
    let keeper = KeeperConfig::new()
        .with_window(Duration::from_secs(1))
        .with_check_interval(Duration::from_millis(50))
        .with_report_interval(Duration::from_millis(500))
        .with_call_timeout(Duration::from_secs(1));
    let guard = WorkerKeeper::start(
        Arc::new(RedisRegistry::open(&target, config.clone()).await.unwrap()),
        identity(1),
        GeneratorSettings::new(Layout::TWITTER),
        keeper,
    )
    .await
    .unwrap();
    let held = guard.handle().clone();
    let worker = held.worker();
    let stop = Arc::new(AtomicBool::new(false));
    let issuing = issue_on(held.clone(), stop.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let replicas = d.replicas();
    let killed = Instant::now();
    let killed_at = jiff::Timestamp::now();
    tokio::task::block_in_place(|| {
        assert_eq!(d.lag_replicas(), replicas);
        let old = d.kill_primary();
        replicas.iter().for_each(|&p| d.resume(p));
        let new = d.wait_failover(old);
        assert!(replicas.contains(&new), "{new} is not one of {replicas:?}");
    });
    let promoted = killed.elapsed();
    // The holder persists marks on the new primary again: later than any
    // it persisted before the kill.
    let deadline = Instant::now() + Duration::from_secs(20);
    let going_on = |s: &idmint_registry::keeper::WorkerStatus| {
        s.is_ready()
            && s.persisted_mark
                .is_some_and(|m| m > killed_at + jiff::SignedDuration::from_secs(2))
    };
    while !going_on(&held.status()) {
        assert!(
            Instant::now() < deadline,
            "the holder did not go on after the failover: {:?}",
            held.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let serving = killed.elapsed();
    // Everyone else is held: the hold keeps them off the workers a live
    // holder may still register again.
    let newcomer = RedisRegistry::open(&target, config).await.unwrap();
    let err = newcomer.claim(&identity(2), 4).await.unwrap_err();
    assert_eq!(err.code(), "registry_held", "{err}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let issued = issuing.join().unwrap();
    let gap = issued
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .max()
        .unwrap_or(Duration::MAX);
    let status = held.status();
    eprintln!(
        "redis sentinel failover with a live holder: promoted {promoted:?} after the SIGKILL; \
         the holder persisting again {serving:?} after it; its longest gap between IDs {gap:?} \
         (a hold is 11 s); generation {}",
        status.generation
    );
    assert_eq!(held.worker(), worker, "the holder kept its worker");
    assert_eq!(status.generation, 1, "no new claim: {status:?}");
    assert!(
        gap < promoted + Duration::from_secs(3),
        "a gap of {gap:?} for a failover of {promoted:?}"
    );
    assert!(
        issued.windows(2).all(|w| w[0].1 < w[1].1),
        "the holder's IDs went back or repeated"
    );
    guard.shutdown().await;
}
