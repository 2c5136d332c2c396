//! The gRPC listener's standard services on the real binary: a client that
//! is not Rust (Python's grpcio, `tests/grpc_python/check_grpc.py`, in the
//! virtual environment `scripts/pyenv` makes) checks `grpc.health.v1`, lists
//! the services by reflection and calls `GetIds` through the descriptors it
//! fetched; and `grpc.health.v1` follows `/readyz` through a worker-lease
//! outage (the registry, a private Redis, stopped and started again), with
//! `Watch` streaming each change and ending at shutdown.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idmint_testkit::{PrivateService, Service, require_service};
use reqwest::StatusCode;
use serde_json::Value;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::serve::{Served, client, get};
use crate::serve_grpc::grpc_addr;

/// The service names health answers for: the server, and the ID service.
const SERVICES: [&str; 2] = ["", "idmint.v1.IdService"];

/// The Python of `scripts/pyenv`'s environment, which that script makes (or
/// finds made) with the pinned packages (grpcio, and the OpenAPI tools of
/// `serve_openapi.rs`); `None` after a loud SKIPPED line when it can't
/// (under `CI=true` that fails the test).
pub(crate) fn python() -> Option<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pyenv");
    let out = Command::new(&script).output().expect("run scripts/pyenv");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        eprintln!("scripts/pyenv failed ({}): {stderr}", out.status);
    }
    if !require_service(
        "Python with the pinned test packages (scripts/pyenv)",
        out.status.success(),
    ) {
        return None;
    }
    let python = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(
        Path::new(&python).exists(),
        "scripts/pyenv printed {python:?}"
    );
    Some(python)
}

/// Runs `check_grpc.py` against `addr` for `n` IDs of `key`; returns its
/// JSON report, failing with its stderr when it fails.
fn check_grpc(python: &str, addr: &str, key: &str, n: u64) -> Value {
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc_python/check_grpc.py");
    let out = Command::new(python)
        .arg(&program)
        .args([addr, key, &n.to_string()])
        .output()
        .expect("run check_grpc.py");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "check_grpc.py {key} failed ({}): {stderr}",
        out.status
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check_grpc.py printed no JSON ({e}): {stderr}"))
}

fn numbers(report: &Value) -> Vec<u64> {
    report["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids: {report}"))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

#[test]
fn serve_grpc_python_client_checks_health_lists_by_reflection_and_calls_get_ids() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = "[segment.keys.order]\nstep = 100\nstart = 1000\n\n\
                  [keys.sf]\nstrategy = \"snowflake\"\n";
    let server = Served::start_with_args(
        &dir.path().join("data"),
        Some(config),
        &[],
        &["--grpc-addr", "127.0.0.1:0"],
    );
    let addr = grpc_addr(&server);

    let report = check_grpc(&python, &addr, "order", 5);
    for version in ["v1", "v1alpha"] {
        let listed: Vec<&str> = report[version]
            .as_array()
            .unwrap_or_else(|| panic!("no {version} list: {report}"))
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for service in [
            "idmint.v1.IdService",
            "grpc.health.v1.Health",
            &format!("grpc.reflection.{version}.ServerReflection"),
        ] {
            assert!(listed.contains(&service), "{version}: {listed:?}");
        }
    }
    // The key's first IDs, issued for real: HTTP goes on after them.
    assert_eq!(report["strategy"], "segment", "{report}");
    assert_eq!(numbers(&report), [1000, 1001, 1002, 1003, 1004]);
    let c = client();
    let (status, body) = get(&c, &server.url("/v1/ids/order?count=2"));
    assert_eq!((status, body.as_str()), (StatusCode::OK, "1005\n1006\n"));

    let report = check_grpc(&python, &addr, "sf", 3);
    assert_eq!(report["strategy"], "snowflake", "{report}");
    let ids = numbers(&report);
    assert_eq!(ids.len(), 3, "{report}");
    assert!(crate::strictly_increasing(&ids), "{ids:?}");
    let (status, body) = get(&c, &server.url(&format!("/v1/decode/{}", ids[0])));
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A runtime for the health clients: one worker thread is plenty.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

async fn health_client(addr: &str) -> HealthClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

fn request(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_owned(),
    }
}

/// `Check`'s answer for each of [`SERVICES`].
fn check_all(rt: &tokio::runtime::Runtime, addr: &str) -> Vec<ServingStatus> {
    rt.block_on(async {
        let mut health = health_client(addr).await;
        let mut statuses = Vec::new();
        for service in SERVICES {
            let reply =
                tokio::time::timeout(Duration::from_secs(10), health.check(request(service)))
                    .await
                    .expect("Check answers within 10 s")
                    .unwrap_or_else(|e| panic!("Check({service:?}) failed: {e}"));
            statuses.push(reply.into_inner().status());
        }
        statuses
    })
}

/// Asks `/readyz` until it answers `want`, then `Check` until every service
/// is `status`: health must agree with readiness within a second.
fn until_both(
    rt: &tokio::runtime::Runtime,
    server: &Served,
    addr: &str,
    want: StatusCode,
    status: ServingStatus,
    within: Duration,
) {
    let c = client();
    let deadline = Instant::now() + within;
    loop {
        let (got, body) = get(&c, &server.url("/readyz"));
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz still {got}: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let agreed = Instant::now() + Duration::from_secs(1);
    loop {
        let statuses = check_all(rt, addr);
        if statuses.iter().all(|&s| s == status) {
            return;
        }
        assert!(
            Instant::now() < agreed,
            "/readyz answered {want}, health still says {statuses:?} a second later"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What one `Watch` stream delivered, and how it ended.
#[derive(Debug, Default)]
struct Watched {
    statuses: Vec<ServingStatus>,
    /// `Some(Ok)` when the stream ended cleanly, `Some(Err)` with the error.
    ended: Option<Result<(), String>>,
}

#[test]
fn serve_grpc_health_follows_readyz_through_a_lease_outage() {
    let Some(redis) = PrivateService::start(Service::Redis) else {
        return;
    };
    let config = format!(
        "[snowflake]\nwindow = \"1s\"\nregistry = \"redis\"\n\n\
         [snowflake.redis]\nurl = \"{}\"\nlease_ttl = \"2s\"\n\n\
         [keys.sf]\nstrategy = \"snowflake\"\n",
        redis.address()
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start_with_args(
        &dir.path().join("data"),
        Some(&config),
        &[],
        &["--grpc-addr", "127.0.0.1:0"],
    );
    let addr = grpc_addr(&server);
    let rt = runtime();
    until_both(
        &rt,
        &server,
        &addr,
        StatusCode::OK,
        ServingStatus::Serving,
        Duration::from_secs(10),
    );

    // A watcher of each name, from the start to the end.
    let watched: Vec<Arc<Mutex<Watched>>> = SERVICES.iter().map(|_| Arc::default()).collect();
    let watchers: Vec<_> = SERVICES
        .iter()
        .zip(&watched)
        .map(|(&service, seen)| {
            let seen = seen.clone();
            let addr = addr.clone();
            rt.spawn(async move {
                let mut health = health_client(&addr).await;
                let mut stream = health.watch(request(service)).await.unwrap().into_inner();
                loop {
                    let message: Result<Option<HealthCheckResponse>, _> = stream.message().await;
                    let mut seen = seen.lock().unwrap();
                    match message {
                        Ok(Some(m)) => seen.statuses.push(m.status()),
                        Ok(None) => {
                            seen.ended = Some(Ok(()));
                            return;
                        }
                        Err(e) => {
                            seen.ended = Some(Err(e.to_string()));
                            return;
                        }
                    }
                }
            })
        })
        .collect();

    // The registry goes away: the lease is lost, /readyz says 503, and
    // health says NOT_SERVING.
    redis.stop();
    until_both(
        &rt,
        &server,
        &addr,
        StatusCode::SERVICE_UNAVAILABLE,
        ServingStatus::NotServing,
        Duration::from_secs(15),
    );
    // Back: ready again, and SERVING again.
    redis.restart();
    until_both(
        &rt,
        &server,
        &addr,
        StatusCode::OK,
        ServingStatus::Serving,
        Duration::from_secs(30),
    );
    let c = client();
    let (status, body) = get(&c, &server.url("/v1/ids/sf?count=3"));
    assert_eq!(status, StatusCode::OK, "{body}");
    std::thread::sleep(Duration::from_millis(300));

    // At shutdown the watches get NOT_SERVING and end, and don't hold the
    // stop up until the grace (10 s).
    let stopping = Instant::now();
    let (exit, log) = server.terminate();
    let took = stopping.elapsed();
    assert!(exit.success(), "{exit}: {log}");
    assert!(
        took < Duration::from_secs(5),
        "stopping took {took:?}: {log}"
    );
    rt.block_on(async {
        for watcher in watchers {
            tokio::time::timeout(Duration::from_secs(5), watcher)
                .await
                .expect("the watch ended with the server")
                .unwrap();
        }
    });
    for (service, seen) in SERVICES.iter().zip(&watched) {
        let seen = seen.lock().unwrap();
        // Each change once, in order (a flap while the lease came back may
        // add a pair).
        let mut changes = seen.statuses.clone();
        changes.dedup();
        assert!(
            changes.len() >= 4
                && changes.starts_with(&[
                    ServingStatus::Serving,
                    ServingStatus::NotServing,
                    ServingStatus::Serving,
                ])
                && changes.last() == Some(&ServingStatus::NotServing),
            "{service:?}: watched {:?}",
            seen.statuses
        );
        assert_eq!(seen.ended, Some(Ok(())), "{service:?}");
    }
    // Each change is logged, once, not each time it is read.
    let changes = log.matches("gRPC health changed").count();
    assert!(
        (2..=6).contains(&changes),
        "{changes} changes logged: {log}"
    );
}
