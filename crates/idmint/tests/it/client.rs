//! `idmint-client` against real `idmint serve` processes (started with the
//! helpers of `serve.rs`): prefetch under concurrency, fail-over past a
//! closed port and a server killed mid-run, all servers down, and a 4xx that
//! is returned typed and not retried.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idmint_client::{Client, Error, FailureReason};

use crate::serve::Served;

/// A snowflake key `sf` and a segment key `order` on worker `worker`.
fn config(worker: u32) -> String {
    format!(
        "[server]\nundeclared_keys = \"segment\"\n\n[snowflake]\nworker = {worker}\n\n[keys.sf]\nstrategy = \"snowflake\"\n\n\
         [segment.keys.order]\nstep = 1000\n"
    )
}

/// An address where nothing listens (a port bound, then released).
fn closed_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    addr
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The node field (datacenter and worker) of a Twitter-layout ID.
fn node_of(id: u64) -> u64 {
    (id >> 12) & 0x3ff
}

#[test]
fn client_prefetch_8_tasks_50k_ids_each_no_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(&config(0)), &[]);
    let client = Client::builder()
        .servers([server.url("")])
        .prefetch(2000)
        .low_water(0.25)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let rt = runtime();
    for key in ["sf", "order"] {
        let per_task: Vec<Vec<u64>> = rt.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let client = client.clone();
                    tokio::spawn(async move {
                        let mut ids = Vec::with_capacity(50_000);
                        while ids.len() < 50_000 {
                            if ids.len() % 10 == 0 {
                                // Batches from the buffer too, not only single IDs.
                                ids.extend(client.next_ids(key, 7).await.unwrap());
                            } else {
                                ids.push(client.next_id(key).await.unwrap());
                            }
                        }
                        ids
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.push(t.await.unwrap());
            }
            all
        });
        let mut seen = HashSet::with_capacity(400_100);
        for ids in &per_task {
            // One server, one buffer: each task's IDs come out in order.
            assert!(crate::strictly_increasing(ids), "{key}: out of order");
            for &id in ids {
                assert!(seen.insert(id), "{key}: duplicate {id}");
            }
        }
        assert!(seen.len() >= 400_000);
        if key == "order" {
            // Segment IDs are dense: prefetch skips nothing while the client lives.
            let max = *seen.iter().max().unwrap();
            assert!(max < 1 + seen.len() as u64 + 2 * 2000, "{max}");
        }
    }
    // The refill keeps IDs in hand for the next call.
    assert!(client.buffered("sf") > 0);
}

#[test]
fn client_fails_over_past_a_closed_port() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(&config(0)), &[]);
    let down = closed_addr();
    // The blocking client, without and with prefetch.
    for prefetch in [0, 100] {
        let client = Client::builder()
            .servers([down.clone(), server.addr.clone()])
            .prefetch(prefetch)
            .timeout(Duration::from_secs(30))
            .build_blocking()
            .unwrap();
        let mut ids = vec![client.next_id("sf").unwrap()];
        ids.extend(client.next_ids("sf", 1000).unwrap());
        for _ in 0..200 {
            ids.push(client.next_id("order").unwrap());
        }
        assert_eq!(ids.len(), 1201);
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 1201);
        assert!(crate::strictly_increasing(&ids[..1001]));
        assert!(crate::strictly_increasing(&ids[1001..]));
    }
}

#[test]
fn client_fails_over_when_a_server_is_killed_mid_run() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    // Without prefetch, then with, each against a fresh pair of nodes. Two
    // nodes with their own worker IDs: their snowflake IDs never collide.
    for (round, prefetch) in [(0, 0u64), (1, 500)] {
        let first = Served::start(&dir.path().join(format!("a{round}")), Some(&config(1)), &[]);
        let second = Served::start(&dir.path().join(format!("b{round}")), Some(&config(2)), &[]);
        let client = Client::builder()
            .servers([first.url(""), second.url("")])
            .prefetch(prefetch)
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let received = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let client = client.clone();
                let received = Arc::clone(&received);
                rt.spawn(async move {
                    let mut ids = Vec::new();
                    while ids.len() < 20_000 {
                        let batch = client.next_ids("sf", 20).await?;
                        received.fetch_add(batch.len() as u64, Ordering::Relaxed);
                        ids.extend(batch);
                    }
                    Ok::<_, Error>(ids)
                })
            })
            .collect();
        // Kill the first server (SIGKILL, by dropping it) while IDs flow.
        let deadline = Instant::now() + Duration::from_secs(60);
        while received.load(Ordering::Relaxed) < 10_000 {
            assert!(Instant::now() < deadline, "no IDs are flowing");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(first);
        let mut seen = HashSet::new();
        let mut nodes = HashSet::new();
        for task in tasks {
            let ids = rt
                .block_on(task)
                .unwrap()
                .unwrap_or_else(|e| panic!("prefetch {prefetch}: a call failed: {e}"));
            for id in ids {
                assert!(seen.insert(id), "prefetch {prefetch}: duplicate {id}");
                nodes.insert(node_of(id));
            }
        }
        assert_eq!(seen.len(), 80_000);
        // Both nodes served: the first until it died, the second after.
        assert_eq!(nodes, HashSet::from([1, 2]), "prefetch {prefetch}");
        drop(second);
    }
}

#[test]
fn client_with_all_servers_down_returns_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(&config(0)), &[]);
    let addrs = [closed_addr(), server.addr.clone()];
    let rt = runtime();
    let client = Client::builder()
        .servers(addrs.clone())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let prefetching = Client::builder()
        .servers(addrs)
        .prefetch(100)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    rt.block_on(async {
        client.next_id("sf").await.unwrap();
        prefetching.next_id("sf").await.unwrap();
    });
    drop(server);
    rt.block_on(async {
        let e = client.next_id("sf").await.unwrap_err();
        let Error::Unavailable { failures, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(e.code(), "unavailable");
        assert!(e.is_transient() && e.retry_after().is_some(), "{e:?}");
        assert_eq!(failures.len(), 2, "{e}");
        for f in failures {
            assert!(matches!(f.reason, FailureReason::Connect(_)), "{f}");
        }
        assert!(e.to_string().starts_with("no server could serve"), "{e}");
        // The prefetching client hands out what it holds, then the same error.
        let mut held = 0;
        let e = loop {
            match prefetching.next_id("sf").await {
                Ok(_) => held += 1,
                Err(e) => break e,
            }
            assert!(held <= 100, "IDs made up out of nothing");
        };
        assert_eq!(e.code(), "unavailable", "{e}");
        assert!(e.is_transient());
    });
}

#[test]
fn client_4xx_is_typed_and_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&dir.path().join("data"), Some(&config(0)), &[]);
    // A second "server" that records whether anyone connected.
    let spare = TcpListener::bind("127.0.0.1:0").unwrap();
    spare.set_nonblocking(true).unwrap();
    let spare_addr = spare.local_addr().unwrap().to_string();
    let rt = runtime();
    for prefetch in [0, 100] {
        let client = Client::builder()
            .servers([server.addr.clone(), spare_addr.clone()])
            .prefetch(prefetch)
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let e = rt.block_on(client.next_id("nope")).unwrap_err();
        match &e {
            Error::Rejected {
                server: from,
                status,
                code,
                message,
            } => {
                assert_eq!((*status, code.as_str()), (404, "key_not_found"));
                assert_eq!(from, &server.url(""));
                assert!(message.contains("nope"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!e.is_transient() && e.is_bad_input());
        assert_eq!(e.code(), "key_not_found");
        // A count above the server's max is its 400, typed too (this client
        // doesn't split it).
        let unsplit = Client::builder()
            .servers([server.addr.clone(), spare_addr.clone()])
            .max_batch(1_000_000)
            .build()
            .unwrap();
        let e = rt.block_on(unsplit.next_ids("sf", 100_001)).unwrap_err();
        assert_eq!(e.code(), "invalid_count", "{e:?}");
        // Nobody knocked on the second server.
        let knocked = spare.accept();
        assert!(
            knocked
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "the 4xx was retried on the next server: {knocked:?}"
        );
    }
}
