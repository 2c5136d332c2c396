//! The `file` registry and the fixed registries with a mark file: restarts with
//! the clock behind, takeover of a crashed node's worker, two processes on one
//! data directory, and crashes in the middle of a mark write.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use idmint_core::clock::ManualClock;
use idmint_core::{Clock, ClockBehind, Id, Layout};
use idmint_registry::file::{FileRegistry, LeaseFile, LeaseRecord};
use idmint_registry::fixed::StaticRegistry;
use idmint_registry::keeper::{GeneratorSettings, KeeperConfig, WorkerKeeper};
use idmint_registry::{RegistryError, WorkerRegistry};
use jiff::Timestamp;

use crate::support::{FORK_GUARD, clock, id_time, node};

const LAYOUT: Layout = Layout::LEAF;

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

fn settings(c: &ManualClock, policy: ClockBehind) -> GeneratorSettings {
    GeneratorSettings::new(LAYOUT)
        .with_clock(Arc::new(c.clone()))
        .with_clock_behind(policy)
}

/// Runs a node on `registry` for `seconds` of steady load and returns its IDs.
/// With `crash`, the runtime is dropped under the keeper: no final report, no
/// release, as after SIGKILL.
fn run_node(
    registry: Arc<dyn WorkerRegistry>,
    c: &ManualClock,
    policy: ClockBehind,
    seconds: u32,
    crash: bool,
) -> Result<Vec<Id>, RegistryError> {
    let rt = paused_runtime();
    let ids = rt.block_on(async {
        let guard = WorkerKeeper::start(
            registry,
            node("n"),
            settings(c, policy),
            KeeperConfig::new(),
        )
        .await?;
        let mut ids = Vec::new();
        for _ in 0..seconds * 10 {
            for _ in 0..20 {
                ids.push(guard.handle().next_id().unwrap());
            }
            c.advance(Duration::from_millis(100));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if crash {
            std::mem::forget(guard);
        } else {
            guard.shutdown().await;
        }
        Ok::<_, RegistryError>(ids)
    })?;
    drop(rt);
    Ok(ids)
}

fn borrow() -> ClockBehind {
    ClockBehind::Borrow {
        max_lead: Duration::from_secs(10),
    }
}

#[test]
fn a_restart_with_the_clock_behind_issues_only_above_every_earlier_id() {
    let _no_fork = FORK_GUARD.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let first = run_node(
        Arc::new(FileRegistry::open(dir.path(), 3).unwrap()),
        &c,
        borrow(),
        5,
        false,
    )
    .unwrap();
    let max_before = *first.iter().max().unwrap();

    // The clock steps back 2 s, inside what borrowing absorbs.
    c.step_back(Duration::from_secs(2));
    let second = run_node(
        Arc::new(FileRegistry::open(dir.path(), 3).unwrap()),
        &c,
        borrow(),
        2,
        false,
    )
    .unwrap();
    assert!(second.iter().all(|id| *id > max_before));
    assert_eq!(LAYOUT.decode(second[0].get()).unwrap().worker, 3);

    // An hour back: refused with a clear error, nothing issued.
    c.step_back(Duration::from_secs(3600));
    let err = run_node(
        Arc::new(FileRegistry::open(dir.path(), 3).unwrap()),
        &c,
        borrow(),
        1,
        false,
    )
    .unwrap_err();
    assert!(
        matches!(err, RegistryError::ClockBehindMark { worker: 3, .. }),
        "{err}"
    );
}

#[test]
fn a_takeover_of_a_crashed_nodes_worker_starts_above_its_mark() {
    let _no_fork = FORK_GUARD.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // Node A, worker 5, crashes without releasing or a final report.
    let a_clock = clock();
    let a_registry = StaticRegistry::new(5).with_mark_file(LeaseFile::open(dir.path()).unwrap());
    let a_ids = run_node(Arc::new(a_registry), &a_clock, borrow(), 4, true).unwrap();
    let a_max = *a_ids.iter().max().unwrap();

    // Node B takes worker 5 over with a clock 1.5 s behind A's.
    let b_clock = ManualClock::at_nanos(a_clock.now_nanos() - 1_500_000_000);
    let b_registry = StaticRegistry::new(5).with_mark_file(LeaseFile::open(dir.path()).unwrap());
    let b_ids = run_node(Arc::new(b_registry), &b_clock, borrow(), 2, false).unwrap();
    assert!(
        b_ids.iter().all(|id| *id > a_max),
        "B repeated or went below A"
    );
    assert!(id_time(&LAYOUT, b_ids[0]) > id_time(&LAYOUT, a_max));
}

#[test]
fn a_second_open_of_a_data_directory_fails_fast_naming_the_holder() {
    let _no_fork = FORK_GUARD.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let held = FileRegistry::open(dir.path(), 0).unwrap();
    // flock locks belong to the open file description: a second open in the
    // same process conflicts like another process would.
    let err = FileRegistry::open(dir.path(), 0).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(
        err,
        RegistryError::Config {
            registry: "file",
            ..
        }
    ));
    assert!(
        msg.contains(&format!(
            "data directory {} is in use by another idmint process (pid {})",
            dir.path().display(),
            std::process::id()
        )),
        "{msg}"
    );
    drop(held);
    FileRegistry::open(dir.path(), 0).expect("free again once the holder is gone");
}

/// Set in the child process this test spawns of itself.
const CHILD_DIR: &str = "IDMINT_TEST_LOCK_CHILD_DIR";

#[test]
fn a_second_process_on_the_same_data_directory_fails_fast() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        // Child: hold the directory until the parent closes our stdin.
        let _held = LeaseFile::open(&dir).unwrap();
        println!("LOCKED");
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spawning = FORK_GUARD.write().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "file::a_second_process_on_the_same_data_directory_fails_fast",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    drop(spawning);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("LOCKED") {
        line.clear();
        assert_ne!(
            out.read_line(&mut line).unwrap(),
            0,
            "child ended before locking"
        );
    }
    let err = LeaseFile::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "in use by another idmint process (pid {})",
            child.id()
        )),
        "{err}"
    );
    // SIGKILL: the kernel drops the lock with the process.
    child.kill().unwrap();
    child.wait().unwrap();
    LeaseFile::open(dir.path()).expect("a dead holder leaves no stale lock");
}

/// The file registry's fleet is this node: the lease file's worker, mark and
/// report, the identity while it is claimed; a static registry without a
/// file lists its in-memory worker once claimed.
#[test]
fn the_fleet_of_a_single_node_registry_is_that_node() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let registry = FileRegistry::open(dir.path(), 3).unwrap();
        assert_eq!(registry.fleet().await.unwrap(), []);
        let claim = registry.claim(&node("a"), 8).await.unwrap();
        let mark = ts("2026-11-21T00:00:03Z");
        let reported = ts("2026-11-21T00:00:00Z");
        registry.persist_mark(&claim, mark, reported).await.unwrap();
        let fleet = registry.fleet().await.unwrap();
        assert_eq!(fleet.len(), 1, "{fleet:?}");
        let me = &fleet[0];
        assert_eq!(me.worker, 3);
        assert!(me.is_node(&node("a")) && me.live, "{me:?}");
        assert_eq!(
            (me.mark, me.reported, me.lease_left),
            (Some(mark), Some(reported), None)
        );
        registry.release(&claim).await.unwrap();
        let fleet = registry.fleet().await.unwrap();
        assert_eq!(fleet.len(), 1, "the lease file still holds the mark");
        assert!(!fleet[0].live && fleet[0].host.is_none(), "{fleet:?}");
        assert_eq!(fleet[0].mark, Some(mark));

        let fixed = StaticRegistry::new(5);
        assert_eq!(fixed.fleet().await.unwrap(), []);
        let claim = fixed.claim(&node("b"), 8).await.unwrap();
        let fleet = fixed.fleet().await.unwrap();
        assert_eq!(fleet.len(), 1, "{fleet:?}");
        assert_eq!(
            (fleet[0].worker, fleet[0].live, fleet[0].mark),
            (5, true, None)
        );
        assert!(fleet[0].is_node(&node("b")));
        fixed.release(&claim).await.unwrap();
    });
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn a_crash_mid_write_never_moves_the_mark_back() {
    let _no_fork = FORK_GUARD.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let record = LeaseRecord {
        worker: 2,
        mark: Some(ts("2026-11-21T00:00:03Z")),
        reported: Some(ts("2026-11-21T00:00:00Z")),
    };
    {
        let file = LeaseFile::open(dir.path()).unwrap();
        file.write(&record).unwrap();
    }
    let temp = dir.path().join("worker.lease.tmp");

    // Crash while writing the temp file: it is cut short.
    std::fs::write(
        &temp,
        "# idmint worker lease\nversion=1\nworker=2\nmark=2026-11-2",
    )
    .unwrap();
    let file = LeaseFile::open(dir.path()).unwrap();
    assert_eq!(file.read().unwrap(), Some(record));
    assert!(!temp.exists(), "the interrupted write is discarded");
    drop(file);

    // Crash before the temp file existed, or after the rename: the record stands.
    let file = LeaseFile::open(dir.path()).unwrap();
    assert_eq!(file.read().unwrap(), Some(record));
    let newer = LeaseRecord {
        mark: Some(ts("2026-11-21T00:00:06Z")),
        ..record
    };
    file.write(&newer).unwrap();
    drop(file);
    let file = LeaseFile::open(dir.path()).unwrap();
    assert_eq!(file.read().unwrap(), Some(newer));
    drop(file);

    // A damaged lease file stops the start instead of being read as "no mark".
    std::fs::write(
        dir.path().join("worker.lease"),
        "version=1\nworker=2\nmark=20",
    )
    .unwrap();
    let rt = paused_runtime();
    let err = rt
        .block_on(WorkerKeeper::start(
            Arc::new(FileRegistry::open(dir.path(), 2).unwrap()),
            node("n"),
            settings(&clock(), ClockBehind::Fail),
            KeeperConfig::new(),
        ))
        .unwrap_err();
    assert!(err.to_string().contains("is damaged"), "{err}");
}

#[test]
fn the_file_registry_checks_its_worker_against_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let rt = paused_runtime();
    let registry = FileRegistry::open(dir.path(), 40).unwrap();
    let err = rt.block_on(registry.claim(&node("n"), 32)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "file registry: worker 40 is out of range 0..32 for this layout"
    );
}
