//! The timestamp oracle's leader (`idmint_registry::leader`): one leader
//! among campaigning nodes, followers that know it, fail-over above
//! everything the old leader issued, and a fence that holds on every call
//! even when the keeper's task is late.
//!
//! First against the in-memory registry on tokio's paused clock (every step
//! deterministic), then on the real etcd, PostgreSQL, Redis and ZooKeeper
//! (ephemeral: the session is the lease).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use idmint_core::clock::ManualClock;
use idmint_core::{ClockBehind, Id, Layout, SequenceExhausted};
use idmint_registry::{
    Campaign, CampaignConfig, CampaignGuard, GeneratorSettings, KeeperConfig, NodeIdentity, Oracle,
    RegistryError, Role, WorkerRegistry,
};

use crate::contract::Backend;
use crate::support::{MemRegistry, Severable, clock, identity, shared};

const TTL: Duration = Duration::from_secs(3);

fn settings(c: Option<&ManualClock>) -> GeneratorSettings {
    let lead = Duration::from_secs(24 * 3600);
    let s = GeneratorSettings::new(Layout::TSO)
        .with_clock_behind(ClockBehind::Borrow { max_lead: lead })
        .with_sequence_exhausted(SequenceExhausted::Borrow { max_lead: lead });
    match c {
        Some(c) => s.with_clock(Arc::new(c.clone())),
        None => s,
    }
}

fn keeper() -> KeeperConfig {
    KeeperConfig::new()
        .with_lease_margin(Duration::from_secs(1))
        .with_check_interval(Duration::from_millis(100))
        .with_retry_interval(Duration::from_millis(250))
}

fn campaign(
    registry: Arc<dyn WorkerRegistry>,
    node: NodeIdentity,
    c: Option<&ManualClock>,
) -> CampaignGuard {
    Campaign::spawn(
        registry,
        node,
        settings(c),
        keeper(),
        CampaignConfig::new().with_poll(Duration::from_millis(100)),
    )
    .unwrap()
}

/// The index of the one leader among `oracles`, once there is exactly one
/// and every other knows it; panics after `within` (of tokio's clock).
async fn one_leader(oracles: &[&Oracle], within: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let leaders: Vec<usize> = (0..oracles.len())
            .filter(|&i| oracles[i].role() == Role::Leader)
            .collect();
        if let [leader] = leaders[..] {
            let node = oracles[leader].leader().map(|l| l.node);
            let agreed = oracles.iter().enumerate().all(|(i, o)| {
                i == leader || (o.role() == Role::Follower && o.leader().map(|l| l.node) == node)
            });
            if agreed {
                return leader;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no single leader within {within:?}: {:?}",
            oracles.iter().map(|o| o.status()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ids(oracle: &Oracle, n: u64) -> Vec<Id> {
    oracle.reserve(n).unwrap().iter().collect()
}

#[tokio::test(start_paused = true)]
async fn one_of_three_leads_the_others_follow_and_refuse_to_issue() {
    let reg = Arc::new(MemRegistry::with_ttl(TTL));
    let guards: Vec<CampaignGuard> = (0..3)
        .map(|i| campaign(shared(&reg), identity(i), None))
        .collect();
    let oracles: Vec<&Oracle> = guards.iter().map(CampaignGuard::oracle).collect();
    let leader = one_leader(&oracles, Duration::from_secs(5)).await;
    let got = ids(oracles[leader], 1000);
    assert!(got.windows(2).all(|w| w[0] < w[1]));
    for (i, o) in oracles.iter().enumerate().filter(|&(i, _)| i != leader) {
        let err = o.reserve(1).unwrap_err();
        let expected = format!("10.0.0.{leader}:{}", 7000 + leader);
        assert!(
            matches!(&err, RegistryError::NotLeader { leader: Some(l) } if *l == expected),
            "node {i}: {err}"
        );
        assert_eq!(err.code(), "not_leader");
    }
    // Held and renewed: still the same leader many leases later.
    tokio::time::sleep(TTL * 5).await;
    assert_eq!(one_leader(&oracles, Duration::from_secs(1)).await, leader);
    let status = oracles[leader].status();
    assert!(status.leader.unwrap().term.is_some());
    for g in guards {
        g.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_leaders_successor_issues_above_everything_it_issued() {
    let reg = Arc::new(MemRegistry::with_ttl(TTL));
    let links: Vec<Arc<Severable>> = (0..3).map(|_| Severable::new(shared(&reg))).collect();
    let guards: Vec<CampaignGuard> = (0..3)
        .map(|i| campaign(links[i].clone(), identity(i), None))
        .collect();
    let oracles: Vec<&Oracle> = guards.iter().map(CampaignGuard::oracle).collect();
    let first = one_leader(&oracles, Duration::from_secs(5)).await;
    let term = oracles[first].status().leader.unwrap().term.unwrap();
    let before = ids(oracles[first], 100_000);
    // The leader is cut off: no renewal, no release (a crash, as the
    // registry sees it). Its lease runs out; at every moment at most one
    // node may issue.
    links[first].sever();
    let mut successor = None;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let leading: Vec<usize> = (0..3).filter(|&i| oracles[i].reserve(1).is_ok()).collect();
        assert!(leading.len() <= 1, "two leaders at once: {leading:?}");
        if let [l] = leading[..]
            && l != first
        {
            successor = Some(l);
            break;
        }
    }
    let next = successor.expect("a new leader within 10 s");
    let after = ids(oracles[next], 10);
    assert!(after[0] > *before.last().unwrap());
    assert!(matches!(
        oracles[first].reserve(1),
        Err(RegistryError::NotLeader { .. })
    ));
    let new_term = oracles[next].status().leader.unwrap().term.unwrap();
    assert!(new_term > term, "{new_term} after {term}");
    let survivors: Vec<&Oracle> = (0..3).filter(|&i| i != first).map(|i| oracles[i]).collect();
    one_leader(&survivors, Duration::from_secs(5)).await;
    assert!(survivors.iter().any(|o| o.status().leader_changes >= 1));
    for g in guards {
        g.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_leader_past_its_fence_refuses_even_while_its_keeper_is_stuck() {
    let reg = Arc::new(MemRegistry::with_ttl(TTL));
    let guard = campaign(shared(&reg), identity(0), None);
    let oracle = guard.oracle();
    one_leader(&[oracle], Duration::from_secs(5)).await;
    assert!(oracle.reserve(1).is_ok());
    // Every registry call now hangs: the keeper is stuck in a renewal (up to
    // its call timeout) and can't retract the mark when the fence passes.
    reg.hang.store(true, Ordering::SeqCst);
    tokio::time::sleep(TTL - Duration::from_millis(900)).await;
    assert!(matches!(
        oracle.reserve(1),
        Err(RegistryError::NotLeader { .. })
    ));
    reg.hang.store(false, Ordering::SeqCst);
    drop(guard);
}

#[tokio::test(start_paused = true)]
async fn a_new_leader_with_its_clock_an_hour_behind_goes_on_from_the_mark() {
    let reg = Arc::new(MemRegistry::with_ttl(TTL));
    let links: Vec<Arc<Severable>> = (0..2).map(|_| Severable::new(shared(&reg))).collect();
    let on_time = clock();
    let behind = ManualClock::at_millis(crate::support::T0_MS - 3_600_000);
    let guard_a = campaign(links[0].clone(), identity(0), Some(&on_time));
    let oracle_a = guard_a.oracle();
    one_leader(&[oracle_a], Duration::from_secs(5)).await;
    // Only now does the second node campaign, so the first one leads.
    let guard_b = campaign(links[1].clone(), identity(1), Some(&behind));
    let before = ids(oracle_a, 50_000);
    links[0].sever();
    let oracle_b = guard_b.oracle();
    one_leader(&[oracle_b], Duration::from_secs(10)).await;
    let after = ids(oracle_b, 300_000);
    assert!(after[0] > *before.last().unwrap());
    assert!(after.windows(2).all(|w| w[0] < w[1]));
    drop(guard_a);
    guard_b.shutdown().await;
}

/// A leader that steps down cleanly records what it really issued in place
/// of its window-ahead mark, so the next leader goes on from there at once,
/// not from a mark ahead of every clock; its IDs are still above all of the
/// old leader's.
#[tokio::test(start_paused = true)]
async fn a_leader_stepping_down_cleanly_hands_over_its_true_high_water() {
    let reg = Arc::new(MemRegistry::with_ttl(TTL));
    let c = clock();
    let guard_a = campaign(shared(&reg), identity(0), Some(&c));
    let oracle_a = guard_a.oracle().clone();
    one_leader(&[&oracle_a], Duration::from_secs(5)).await;
    // Only now does the second node campaign, so the first one leads.
    let guard_b = campaign(shared(&reg), identity(1), Some(&c));
    let before = ids(&oracle_a, 50_000);
    let window_ahead = reg.mark(0).expect("the leader persisted a mark");
    guard_a.shutdown().await;
    let recorded = reg.mark(0).unwrap();
    assert!(recorded < window_ahead, "{recorded} !< {window_ahead}");
    let oracle_b = guard_b.oracle();
    one_leader(&[oracle_b], Duration::from_secs(5)).await;
    let after = ids(oracle_b, 10);
    assert!(after[0] > *before.last().unwrap());
    let first = Layout::TSO.decode(after[0].get()).unwrap().time;
    assert!(
        first < window_ahead,
        "the new leader started at {first}, past the old leader's window-ahead mark"
    );
    guard_b.shutdown().await;
}

#[tokio::test]
async fn a_layout_with_node_bits_or_a_zero_poll_is_refused() {
    let reg: Arc<dyn WorkerRegistry> = Arc::new(MemRegistry::with_ttl(TTL));
    let err = Campaign::spawn(
        reg.clone(),
        identity(0),
        GeneratorSettings::new(Layout::TWITTER),
        keeper(),
        CampaignConfig::new(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("without node bits"), "{err}");
    let err = Campaign::spawn(
        reg,
        identity(0),
        settings(None),
        keeper(),
        CampaignConfig::new().with_poll(Duration::ZERO),
    )
    .unwrap_err();
    assert!(err.to_string().contains("poll interval of 0s"), "{err}");
}

/// On a real backend: three campaigns, one leader; its graceful shutdown
/// hands over at once (released, no lease to wait for); a cut-off leader is
/// replaced once its lease runs out; IDs only grow.
async fn fails_over_on<B: Backend>(backend: B) {
    let ttl = backend.short_ttl().max(Duration::from_secs(2));
    let mut links = Vec::new();
    let mut guards = Vec::new();
    for i in 0..3 {
        let link = Severable::new(backend.node(ttl).await);
        guards.push(Some(campaign(link.clone(), identity(i), None)));
        links.push(link);
    }
    let live = |guards: &[Option<CampaignGuard>]| -> Vec<Oracle> {
        guards
            .iter()
            .flatten()
            .map(|g| g.oracle().clone())
            .collect()
    };
    let oracles = live(&guards);
    let refs: Vec<&Oracle> = oracles.iter().collect();
    let first = one_leader(&refs, Duration::from_secs(15)).await;
    let mut last = *ids(refs[first], 1000).last().unwrap();
    // Graceful: released at once.
    let node = refs[first].leader().unwrap().node;
    let index = (0..3).find(|&i| identity(i) == node).unwrap();
    guards[index].take().unwrap().shutdown().await;
    let oracles = live(&guards);
    let refs: Vec<&Oracle> = oracles.iter().collect();
    let second = one_leader(&refs, ttl * 3).await;
    let got = ids(refs[second], 1000);
    assert!(got[0] > last);
    last = *got.last().unwrap();
    // Cut off: replaced after the lease.
    let node = refs[second].leader().unwrap().node;
    let index = (0..3).find(|&i| identity(i) == node).unwrap();
    links[index].sever();
    let survivor = (0..3)
        .filter(|&i| i != index)
        .find_map(|i| guards[i].as_ref())
        .unwrap()
        .oracle()
        .clone();
    let deadline = tokio::time::Instant::now() + ttl * 5;
    loop {
        if let Ok(batch) = survivor.reserve(10) {
            assert!(batch.first().unwrap() > last);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            survivor.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for g in guards.into_iter().flatten() {
        g.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_on_etcd() {
    if let Some(b) = crate::etcd::backend("leader") {
        fails_over_on(b).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_on_postgres() {
    if let Some(b) = crate::sql::SqlBackend::new(crate::sql::Database::Postgres, "leader") {
        fails_over_on(b).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_on_zookeeper() {
    let mode = idmint_registry::zookeeper::ZooKeeperMode::Ephemeral;
    if let Some(b) = crate::zookeeper::ZooKeeperBackend::new(mode, "leader") {
        fails_over_on(b).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_on_redis() {
    if let Some(b) = crate::redis::backend("leader") {
        fails_over_on(b).await;
    }
}
