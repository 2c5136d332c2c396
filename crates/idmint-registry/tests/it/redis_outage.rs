//! Lease loss while running, on Redis: a keeper on a private `redis-server`
//! that the test kills mid-run and starts again, empty.
//!
//! The server is a child process on a free loopback port with persistence off,
//! so the restart loses every key, the lease and the worker's mark included
//! (the documented limit of the `redis` registry). What must hold anyway:
//! - the holder stops issuing, with a typed error and a not-ready status,
//!   before its lease could have expired on the server (the kill is the last
//!   moment the server could have seen a renewal, so the refusal must come
//!   within one lease TTL of it);
//! - when Redis is back the keeper claims again and resumes, and every new ID
//!   is above every ID issued before, although the stored mark was lost: the
//!   keeper starts the new generator above the last mark it persisted itself.
//!
//! Needs the `redis-server` binary (not a running Redis); without it the test
//! is skipped loudly, or fails under `CI=true`.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idmint_core::{Error as CoreError, Layout};
use idmint_registry::keeper::{GeneratorSettings, KeeperConfig, LeaseState, WorkerKeeper};
use idmint_registry::redis_registry::{RedisConfig, RedisRegistry};
use idmint_registry::{NodeIdentity, WorkerHandle};

use crate::support::{FORK_GUARD, id_time, require_service};

const LAYOUT: Layout = Layout::TWITTER;
const TTL: Duration = Duration::from_secs(1);

/// A private `redis-server`, killed on drop.
struct RedisProcess {
    child: Child,
    port: u16,
}

impl RedisProcess {
    /// Starts `redis-server` on `port` (no persistence) and waits until it
    /// answers `PING`.
    fn start(port: u16) -> RedisProcess {
        let child = {
            // A forked child holds copies of the test binary's open files until
            // it execs; see `FORK_GUARD`.
            let _fork = FORK_GUARD.write().unwrap_or_else(|p| p.into_inner());
            Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server was found, so it starts")
        };
        let mut server = RedisProcess { child, port };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if server.answers() {
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("redis-server on port {port} exited at start: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {port} did not answer within 5s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn answers(&self) -> bool {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
            .is_ok()
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// SIGKILL, then reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn redis_server_installed() -> bool {
    let _fork = FORK_GUARD.write().unwrap_or_else(|p| p.into_inner());
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// Issues IDs on a thread of its own, one every 200 µs, until stopped;
/// records every result's time.
struct Issuer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(Instant, Result<u64, CoreError>)>>,
}

impl Issuer {
    fn start(handle: WorkerHandle) -> Issuer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut log = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let result = handle.next_id().map(|id| id.get());
                log.push((Instant::now(), result));
                std::thread::sleep(Duration::from_micros(200));
            }
            log
        });
        Issuer { stop, thread }
    }

    fn finish(self) -> Vec<(Instant, Result<u64, CoreError>)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .expect("the issuing thread does not panic")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_stops_issuing_before_the_lease_ends_and_a_fresh_one_resumes_above() {
    if !require_service("redis-server (binary)", redis_server_installed()) {
        return;
    }
    let port = free_port();
    let mut server = RedisProcess::start(port);
    let config = RedisConfig::new()
        .with_cluster("outage")
        .with_lease_ttl(TTL)
        .with_timeout(Duration::from_millis(200));
    let registry = Arc::new(
        RedisRegistry::connect(&server.url(), config)
            .await
            .expect("the private redis answers"),
    );
    let keeper_config = KeeperConfig::new()
        .with_window(Duration::from_millis(600))
        .with_check_interval(Duration::from_millis(50))
        .with_report_interval(Duration::from_millis(500))
        .with_lease_margin(Duration::from_millis(250))
        .with_call_timeout(Duration::from_millis(300))
        .with_retry_interval(Duration::from_millis(100));
    let node = NodeIdentity {
        host: "outage".to_owned(),
        address: "127.0.0.1".to_owned(),
        port: 7000,
    };
    let guard = WorkerKeeper::start(
        registry.clone(),
        node,
        GeneratorSettings::new(LAYOUT),
        keeper_config,
    )
    .await
    .expect("the keeper starts on the private redis");
    let handle = guard.handle().clone();
    let first_worker = handle.worker();

    // Phase 1: issue for a while, across several renewals.
    let issuer = Issuer::start(handle.clone());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(handle.status().is_ready(), "{:?}", handle.status());

    // Phase 2: kill Redis; the holder must refuse within the lease TTL.
    server.kill();
    let killed = Instant::now();
    tokio::time::sleep(TTL + Duration::from_millis(400)).await;
    let status = handle.status();
    let before = issuer.finish();
    let issued_before: Vec<u64> = before
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok().copied())
        .collect();
    assert!(issued_before.len() > 100, "{} IDs", issued_before.len());
    let max_before = *issued_before.iter().max().unwrap();
    let last_ok = before
        .iter()
        .rev()
        .find(|(_, r)| r.is_ok())
        .map(|(t, _)| *t)
        .unwrap();
    let first_refusal = before
        .iter()
        .find(|(t, r)| *t >= killed && r.is_err())
        .map(|(t, _)| *t)
        .expect("issuing stopped after redis was killed");
    let refused_after = first_refusal - killed;
    // Once refused, never an ID again while Redis is down.
    assert!(last_ok < first_refusal, "an ID was issued after a refusal");
    for (_, r) in before.iter().filter(|(t, _)| *t >= first_refusal) {
        match r {
            Err(CoreError::MarkReached { .. }) => {}
            other => panic!("expected MarkReached while redis is down, got {other:?}"),
        }
    }
    eprintln!(
        "redis outage: first refusal {refused_after:?} after the kill \
         (lease ttl {TTL:?}), last ID {:?} after the kill",
        last_ok.saturating_duration_since(killed)
    );
    assert!(
        refused_after < TTL,
        "issuing went on for {refused_after:?} after the kill, past the lease ttl {TTL:?}"
    );
    assert!(!status.is_ready(), "{status:?}");
    assert_eq!(status.lease, LeaseState::Expired, "{status:?}");
    assert!(status.last_error.is_some(), "{status:?}");
    assert!(matches!(
        handle.next_id(),
        Err(CoreError::MarkReached { .. })
    ));

    // Phase 3: a fresh, empty Redis on the same port: the lease and the mark
    // are gone. The keeper finds the lease lost, claims again, and must start
    // above everything it issued.
    let server = RedisProcess::start(port);
    let restarted = Instant::now();
    let deadline = restarted + Duration::from_secs(8);
    let first_after = loop {
        match handle.next_id() {
            Ok(id) => break id.get(),
            Err(CoreError::MarkReached { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!(
                "the keeper did not resume within 8s of redis returning: {e}; {:?}",
                handle.status()
            ),
        }
    };
    let resumed_after = restarted.elapsed();
    let issuer = Issuer::start(handle.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = issuer.finish();
    let status = handle.status();
    let mut issued_after = vec![first_after];
    issued_after.extend(after.iter().filter_map(|(_, r)| r.as_ref().ok().copied()));
    let min_after = *issued_after.iter().min().unwrap();
    eprintln!(
        "redis outage: resumed {resumed_after:?} after the restart, generation {}, \
         worker {} -> {}, {} IDs before, {} after",
        status.generation,
        first_worker,
        handle.worker(),
        issued_before.len(),
        issued_after.len()
    );
    assert!(
        min_after > max_before,
        "after the restart the keeper issued {min_after} (at {}), not above {max_before} \
         (at {}) issued before it",
        id_time(&LAYOUT, idmint_core::Id::new(min_after).unwrap()),
        id_time(&LAYOUT, idmint_core::Id::new(max_before).unwrap()),
    );
    assert!(
        issued_after.windows(2).all(|w| w[0] < w[1]),
        "IDs after the restart are not increasing"
    );
    assert!(status.is_ready(), "{status:?}");
    assert_eq!(status.lease, LeaseState::Held);
    assert_eq!(status.generation, 2, "one re-claim: {status:?}");
    // The new Redis holds a mark again, above every ID issued so far.
    let stored = registry
        .stored_mark(handle.worker())
        .await
        .expect("the restarted redis answers")
        .expect("the keeper persisted a mark in the fresh redis");
    let max_after = *issued_after.iter().max().unwrap();
    assert!(stored >= id_time(&LAYOUT, idmint_core::Id::new(max_after).unwrap()));

    guard.shutdown().await;
    // Released: the lease key is gone.
    let mut conn = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .unwrap();
    let leases: Vec<String> = redis::cmd("KEYS")
        .arg("idmint:{outage}:worker:*")
        .query(&mut conn)
        .unwrap();
    assert!(leases.is_empty(), "{leases:?}");
}
