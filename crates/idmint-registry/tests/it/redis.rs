//! The `redis` registry against the real Redis on this machine
//! (`IDMINT_TEST_REDIS_ADDR`, default `127.0.0.1:6379`): the registry contract
//! (`crate::contract`), and what only Redis does.
//!
//! Each test works under its own key prefix, so tests run in parallel without
//! seeing each other, and deletes its keys at the end. Short lease TTLs (a few
//! hundred milliseconds) keep the takeover tests fast.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint_registry::redis::{RedisConfig, RedisRegistry};
use idmint_registry::{RegistryError, WorkerRegistry};

use crate::contract::{Backend, Holding, LONG, ReadsMarks, contract_suite};
use crate::support::{claim_eventually, identity, ms, require_service, unique_name};

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

/// A test's key space on the shared Redis; its keys are deleted on drop.
pub struct RedisBackend {
    prefix: String,
}

/// The backend for `test`, or `None` (after a loud SKIPPED line) when Redis is
/// down outside CI.
pub fn backend(test: &str) -> Option<RedisBackend> {
    if !require_service("redis", reachable()) {
        return None;
    }
    Some(RedisBackend {
        prefix: format!("idmint-test:{{{}}}:", unique_name(test)),
    })
}

impl RedisBackend {
    async fn registry(&self, lease_ttl: Duration) -> RedisRegistry {
        let config = RedisConfig::new()
            .with_prefix(self.prefix.clone())
            .with_lease_ttl(lease_ttl);
        RedisRegistry::connect(&redis_url(), config)
            .await
            .expect("redis is reachable, so connect succeeds")
    }
}

#[async_trait]
impl Backend for RedisBackend {
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
        Arc::new(self.registry(ttl).await)
    }
}

impl Drop for RedisBackend {
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

contract_suite!(backend);

#[tokio::test]
async fn a_stale_claim_is_told_whether_its_lease_expired_or_was_taken_over() {
    let Some(b) = backend("stale-reason") else {
        return;
    };
    let ttl = Duration::from_millis(300);
    let holder = b.registry(ttl).await;
    let other = b.registry(LONG).await;
    let claim = holder.claim(&identity(1), 1).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let err = holder.renew(&claim).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::LeaseLost { worker: 0, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("expired"), "{err}");
    let taken = claim_eventually(&other, &identity(2), 1, Duration::from_secs(3)).await;
    let err = holder.renew(&claim).await.unwrap_err();
    assert!(err.to_string().contains("another node"), "{err}");
    let err = holder
        .persist_mark(&claim, ms(1_900_000_000_000), ms(1_800_000_000_000))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("another node"), "{err}");
    other
        .renew(&taken)
        .await
        .expect("the new holder is untouched");
}

/// A worker claimed by an idmint from before the `holders` set (a lease key
/// and a report, no set entry) is listed once it reported, its holder read
/// from its token; one whose token idmint didn't write has no identity.
///
/// Such data has no epoch either: the first claim after the upgrade is held
/// for a lease and a mark window, as idmint can't tell it from data that
/// lost its epoch.
#[tokio::test]
async fn the_fleet_finds_holders_of_older_idmints_through_their_reports() {
    let Some(b) = backend("fleet-old-data") else {
        return;
    };
    let registry = b.registry(Duration::from_millis(300)).await;
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let p = &b.prefix;
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(format!("{p}worker:4"))
        .arg("old-host@10.9.8.7:7100/42/00000000000000000000000000000001")
        .arg("PX")
        .arg(30_000)
        .ignore()
        .cmd("SET")
        .arg(format!("{p}worker:5"))
        .arg("written-by-something-else")
        .arg("PX")
        .arg(30_000)
        .ignore()
        .cmd("SET")
        .arg(format!("{p}mark:4"))
        .arg(1_800_000_003_000_i64)
        .ignore()
        .cmd("HSET")
        .arg(format!("{p}reported"))
        .arg("4")
        .arg(1_800_000_000_000_i64)
        .arg("5")
        .arg(1_800_000_000_000_i64)
        .arg("6")
        .arg(1_800_000_000_000_i64)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = registry.claim(&identity(1), 4).await.unwrap_err();
    let RegistryError::Held { retry_after, .. } = &err else {
        panic!("an upgrade's first claim is held, not {err}");
    };
    assert!(err.to_string().contains("epoch key"), "{err}");
    assert!(*retry_after <= Duration::from_millis(3300), "{err}");
    tokio::time::sleep(*retry_after + Duration::from_millis(50)).await;
    let fresh = registry.claim(&identity(1), 4).await.unwrap();
    assert!(
        fresh.stored_mark.is_none(),
        "no floor yet: {:?}",
        fresh.stored_mark
    );
    let fleet = registry.fleet().await.unwrap();
    // Worker 6 reported once but holds no lease: not listed.
    assert_eq!(
        fleet.iter().map(|m| m.worker).collect::<Vec<_>>(),
        [fresh.worker, 4, 5],
        "{fleet:?}"
    );
    let old = &fleet[1];
    assert_eq!(
        (old.host.as_deref(), old.address.as_deref(), old.port),
        (Some("old-host"), Some("10.9.8.7"), Some(7100))
    );
    assert_eq!(old.mark, Some(ms(1_800_000_003_000)));
    assert_eq!(old.reported, Some(ms(1_800_000_000_000)));
    assert!(old.live && old.lease_left.is_some_and(|l| l <= LONG));
    assert_eq!((fleet[2].host.as_deref(), fleet[2].port), (None, None));
    assert!(fleet[0].is_node(&identity(1)), "{fleet:?}");
    assert_eq!(fleet[0].reported, None, "not reported yet");
}

#[async_trait]
impl ReadsMarks for RedisRegistry {
    async fn stored(&self, worker: u32) -> Option<jiff::Timestamp> {
        self.stored_mark(worker).await.unwrap()
    }
}

#[tokio::test]
async fn a_large_fleet_reads_a_sample_of_its_peers() {
    let Some(b) = backend("peer-sample") else {
        return;
    };
    crate::contract::a_large_fleet_reads_a_sample_of_its_peers(
        &b.registry(LONG).await,
        1024,
        63..=64,
    )
    .await;
}

#[tokio::test]
async fn stored_marks_read_back_rounded_up_to_the_millisecond() {
    let Some(b) = backend("marks") else {
        return;
    };
    crate::contract::marks_read_back_rounded_up_to_the_millisecond(&b.registry(LONG).await).await;
}

#[tokio::test]
async fn large_ranges_are_claimed_window_by_window() {
    let Some(b) = backend("window") else {
        return;
    };
    let registry = b.registry(LONG).await;
    // 3000 IDs span three claim windows; all but one are held, so the claim
    // must find the free one wherever its random start falls.
    let range = 3000u32;
    let free = 2500u32;
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut pipe = redis::pipe();
    for id in (0..range).filter(|id| *id != free) {
        pipe.cmd("SET")
            .arg(format!("{}worker:{id}", b.prefix))
            .arg("someone-else")
            .arg("PX")
            .arg(30_000)
            .ignore();
    }
    let () = pipe.query_async(&mut conn).await.unwrap();
    let claim = registry.claim(&identity(1), range).await.unwrap();
    assert_eq!(claim.worker, free);
    let err = registry.claim(&identity(2), range).await.unwrap_err();
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
    // A holder whose token names no node is shown as its raw token.
    let err = registry
        .claim_worker(&identity(2), 7, range)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("already held by node \"someone-else\""),
        "{err}"
    );
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
        RegistryError::Unavailable {
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
        other => panic!("expected unavailable or a timeout, got {other}"),
    }
    let err = RedisRegistry::connect("not a url", RedisConfig::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "registry_config", "{err}");
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

/// A report's age is Redis's `TIME` since the persist script stamped it, and
/// only for the very report it stamped: an idmint from before the stamps
/// writes `reported` alone, and its report then has no age (the stamp left
/// beside it names another report), until a stamped write again.
#[tokio::test]
async fn a_report_is_aged_only_by_its_own_stamp() {
    let Some(b) = backend("report-stamp") else {
        return;
    };
    let registry = b.registry(LONG).await;
    let me = registry.claim(&identity(1), 16).await.unwrap();
    let peer = registry.claim(&identity(2), 16).await.unwrap();
    let age = |peers: Vec<idmint_registry::PeerReport>| {
        let p = peers.into_iter().find(|p| p.worker == peer.worker).unwrap();
        (p.reported, p.age)
    };
    registry
        .persist_mark(&peer, ms(1_900_000_000_000), ms(1_800_000_000_000))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (reported, aged) = age(registry.peers(&me).await.unwrap());
    assert_eq!(reported, ms(1_800_000_000_000));
    let aged = aged.expect("a stamped report has an age");
    assert!(
        aged >= Duration::from_millis(295) && aged < Duration::from_secs(3),
        "{aged:?}"
    );
    // An older idmint reports without the stamp.
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("{}reported", b.prefix))
        .arg(peer.worker)
        .arg(1_800_000_000_500_i64)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        age(registry.peers(&me).await.unwrap()),
        (ms(1_800_000_000_500), None)
    );
    registry
        .persist_mark(&peer, ms(1_900_000_000_000), ms(1_800_000_001_000))
        .await
        .unwrap();
    let (reported, aged) = age(registry.peers(&me).await.unwrap());
    assert_eq!(reported, ms(1_800_000_001_000));
    assert!(aged.is_some_and(|a| a < Duration::from_secs(1)), "{aged:?}");
}

/// The epoch script changes nothing on a server other than the one whose
/// `run_id` it is given: on a Redis Cluster mid-failover, `INFO` (no key)
/// can be answered by another node than the slot's master the script runs
/// on, and each such answer had started a new epoch with its hold.
#[tokio::test]
async fn the_epoch_script_refuses_a_run_id_that_is_not_its_servers() {
    let Some(b) = backend("epoch_script_run_id") else {
        return;
    };
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .unwrap();
    let run_id = info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .expect("INFO names the run_id")
        .trim()
        .to_owned();
    let keys = ["epoch", "holders", "reported"].map(|k| format!("{}{k}", b.prefix));
    let script = redis::Script::new(idmint_registry::redis::EPOCH_SCRIPT_FOR_TESTS);
    let shared = conn.clone();
    let run = |run_id: String| {
        let mut invocation = script.key(&keys[0]);
        invocation.key(&keys[1]).key(&keys[2]);
        invocation
            .arg(run_id)
            .arg(13_000)
            .arg(0)
            .arg(0)
            .arg(0)
            .arg("e1");
        let mut conn = shared.clone();
        async move {
            invocation
                .invoke_async::<(String, i64, String)>(&mut conn)
                .await
                .unwrap()
        }
    };
    let other = "f".repeat(40);
    assert_eq!(run(other).await, (String::new(), 0, "misrouted".to_owned()));
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&keys[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 0, "a misrouted check wrote the epoch");
    let (id, hold, why) = run(run_id).await;
    assert_eq!((id.as_str(), why.as_str()), ("e1", "epoch_missing"));
    assert!(hold > 12_000, "{hold}");
}
